// The tokenizer and chat template a GGUF file carries (tokenizer.ggml.* metadata), as shardlm's
// tokenizer files: model gpt2 (byte-level BPE) -> tokenizer.json through tokenizer/'s
// slm_tokenizer_vocab_json. Keys: gguf_format.h; docs/formats.md "GGUF".
#include "ckpt/ckpt.h"
#include "ckpt/gguf_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// An optional id key (-1 when absent).
static slm_status opt_id(const slm_gguf_file *f, const char *key, int32_t n, int32_t *out) {
    int64_t v = -1;
    bool found = false;
    slm_status st = slm_gguf_get_int(f, key, 0, n - 1, &v, &found);
    *out = found ? (int32_t)v : -1;
    return st;
}

slm_status slm_gguf_tokenizer_json(const slm_gguf_file *f, slm_buf *out) {
    const char *model = NULL, *pre = NULL;
    size_t mlen = 0, plen = 0;
    bool has_pre = false;
    slm_status st = slm_gguf_get_str(f, SLM_GGUF_KEY_TOK_MODEL, &model, &mlen, NULL);
    if (st) return st;
    if (mlen != 4 || memcmp(model, "gpt2", 4))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: key %s is \"%.*s\": shardlm imports the byte-level BPE tokenizer "
                        "(gpt2) from GGUF; HINT: use the model's Hugging Face directory "
                        "(config.json, safetensors and its tokenizer.model or tokenizer.json) "
                        "as --model / --init-from-hf instead of the GGUF file",
                        f->path, SLM_GGUF_KEY_TOK_MODEL, (int)(mlen > 40 ? 40 : mlen), model);
    if ((st = slm_gguf_get_str(f, SLM_GGUF_KEY_TOK_PRE, &pre, &plen, &has_pre))) return st;
    char pre_name[64] = "gpt2"; // llama.cpp's reading of a file without the key
    if (has_pre) snprintf(pre_name, sizeof pre_name, "%.*s", (int)(plen > 60 ? 60 : plen), pre);
    const slm_gguf_kv *toks = NULL, *types = NULL, *merges = NULL;
    if ((st = slm_gguf_get_array(f, SLM_GGUF_KEY_TOK_TOKENS, SLM_GGUF_STRING, &toks)) ||
        (st = slm_gguf_get_array(f, SLM_GGUF_KEY_TOK_TYPES, SLM_GGUF_INT32, &types)) ||
        (st = slm_gguf_get_array(f, SLM_GGUF_KEY_TOK_MERGES, SLM_GGUF_STRING, &merges)))
        return st;
    if (!toks || !merges)
        return slm_fail(SLM_E_FORMAT,
                        "%s: key %s missing (a gpt2 tokenizer needs tokens and merges)", f->path,
                        toks ? SLM_GGUF_KEY_TOK_MERGES : SLM_GGUF_KEY_TOK_TOKENS);
    if (toks->count < 256 || toks->count > (1u << 22) || merges->count > (1u << 22))
        return slm_fail(SLM_E_FORMAT, "%s: %llu tokens and %llu merges (expected 256 .. 2^22)",
                        f->path, (unsigned long long)toks->count,
                        (unsigned long long)merges->count);
    if (types && types->count != toks->count)
        return slm_fail(SLM_E_FORMAT, "%s: key %s has %llu entries for %llu tokens", f->path,
                        SLM_GGUF_KEY_TOK_TYPES, (unsigned long long)types->count,
                        (unsigned long long)toks->count);
    slm_tok_vocab v = {
        .n_tokens = (int32_t)toks->count, .n_merges = (int32_t)merges->count, .pre = pre_name};
    int32_t n = v.n_tokens;
    if ((st = opt_id(f, SLM_GGUF_KEY_TOK_BOS, n, &v.bos_id)) ||
        (st = opt_id(f, SLM_GGUF_KEY_TOK_EOS, n, &v.eos_id)) ||
        (st = opt_id(f, SLM_GGUF_KEY_TOK_PAD, n, &v.pad_id)) ||
        (st = opt_id(f, SLM_GGUF_KEY_TOK_UNK, n, &v.unk_id)))
        return st;
    v.unk_id = -1; // byte-level BPE never produces UNK (llama.cpp writes 0 for some files)
    bool found = false;
    v.add_bos = false; // gpt2 models: llama.cpp adds BOS only when add_bos_token says so
    if ((st = slm_gguf_get_bool(f, SLM_GGUF_KEY_TOK_ADD_BOS, &v.add_bos, &found))) return st;
    const char **ts = slm_xmalloc((size_t)n * sizeof *ts);
    size_t *tl = slm_xmalloc((size_t)n * sizeof *tl);
    const char **ms = slm_xmalloc((size_t)(v.n_merges + 1) * sizeof *ms);
    size_t *ml = slm_xmalloc((size_t)(v.n_merges + 1) * sizeof *ml);
    int32_t *tt = NULL;
    slm_gguf_array_strings(f, toks, ts, tl);
    slm_gguf_array_strings(f, merges, ms, ml);
    if (types) {
        tt = slm_xmalloc((size_t)n * sizeof *tt);
        for (int32_t i = 0; i < n; i++)
            tt[i] = (int32_t)slm_get_le32(f->map.data + types->off + 4 * (size_t)i);
    }
    v.tokens = ts;
    v.token_len = tl;
    v.merges = ms;
    v.merge_len = ml;
    v.token_type = tt;
    st = slm_tokenizer_vocab_json(&v, f->path, out);
    if (st && has_pre && strstr(slm_errmsg(), "pre-tokenizer"))
        st = slm_fail(st,
                      "%s: key %s is \"%s\": this pre-tokenizer is not implemented (shardlm "
                      "knows gpt2, smollm, starcoder, llama-bpe)",
                      f->path, SLM_GGUF_KEY_TOK_PRE, pre_name);
    free(ts);
    free(tl);
    free(ms);
    free(ml);
    free(tt);
    return st;
}

slm_status slm_gguf_write_tokenizer(const slm_gguf_file *f, const char *dir, char **path) {
    *path = NULL;
    slm_buf b = {0};
    slm_status st = slm_gguf_tokenizer_json(f, &b);
    char *p = slm_path_join(dir, "tokenizer.json");
    if (!st) st = slm_file_write_atomic(p, b.data, b.len);
    slm_buf_free(&b);
    slm_tokenizer *t = NULL;
    if (!st) st = slm_tokenizer_load(p, &t); // what was written must load
    slm_tokenizer_free(t);
    if (st) {
        free(p);
        return st;
    }
    *path = p;
    return SLM_OK;
}

const char *slm_gguf_chat_template(const slm_gguf_file *f, bool *present) {
    const char *s = NULL;
    size_t n = 0;
    *present = false;
    if (slm_gguf_get_str(f, SLM_GGUF_KEY_CHAT_TEMPLATE, &s, &n, present) || !*present) return NULL;
    // Recognised by the markers each family's Jinja text writes.
    char *t = slm_xmalloc(n + 1);
    memcpy(t, s, n);
    t[n] = 0;
    const char *name = NULL;
    if (strstr(t, "<|im_start|>") && strstr(t, "<|im_end|>"))
        name = "chatml";
    else if (strstr(t, "<|start_header_id|>") && strstr(t, "<|eot_id|>"))
        name = "llama3";
    else if (strstr(t, "[INST]") && strstr(t, "[/INST]"))
        name = "llama2";
    free(t);
    return name;
}
