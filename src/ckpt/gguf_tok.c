// The tokenizer and chat template a GGUF file carries (tokenizer.ggml.* metadata), as shardlm's
// tokenizer files: model gpt2 (byte-level BPE) -> tokenizer.json through tokenizer/'s
// slm_tokenizer_vocab_json; model llama (SentencePiece) -> tokenizer.model through
// slm_tokenizer_vocab_spm. Keys: gguf_format.h; docs/formats.md "GGUF".
#include "ckpt/ckpt.h"
#include "ckpt/gguf_format.h"

#include <math.h>
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

// What both tokenizer models read: the tokens (required, 1 .. 2^22 of them), the token types
// (optional here; per token when present), the special ids and add_bos_token (default
// `add_bos`). On success the caller frees v->tokens, v->token_len and v->token_type.
static slm_status read_common(const slm_gguf_file *f, slm_tok_vocab *v, bool add_bos) {
    const slm_gguf_kv *toks = NULL, *types = NULL;
    slm_status st = slm_gguf_get_array(f, SLM_GGUF_KEY_TOK_TOKENS, SLM_GGUF_STRING, &toks);
    if (!st) st = slm_gguf_get_array(f, SLM_GGUF_KEY_TOK_TYPES, SLM_GGUF_INT32, &types);
    if (st) return st;
    if (!toks)
        return slm_fail(SLM_E_FORMAT, "%s: key %s missing (the tokenizer's vocabulary)", f->path,
                        SLM_GGUF_KEY_TOK_TOKENS);
    if (toks->count == 0 || toks->count > (1u << 22))
        return slm_fail(SLM_E_FORMAT, "%s: key %s has %llu tokens (expected 1 .. 2^22)", f->path,
                        SLM_GGUF_KEY_TOK_TOKENS, (unsigned long long)toks->count);
    if (types && types->count != toks->count)
        return slm_fail(SLM_E_FORMAT, "%s: key %s has %llu entries for %llu tokens", f->path,
                        SLM_GGUF_KEY_TOK_TYPES, (unsigned long long)types->count,
                        (unsigned long long)toks->count);
    int32_t n = v->n_tokens = (int32_t)toks->count;
    if ((st = opt_id(f, SLM_GGUF_KEY_TOK_BOS, n, &v->bos_id)) ||
        (st = opt_id(f, SLM_GGUF_KEY_TOK_EOS, n, &v->eos_id)) ||
        (st = opt_id(f, SLM_GGUF_KEY_TOK_PAD, n, &v->pad_id)) ||
        (st = opt_id(f, SLM_GGUF_KEY_TOK_UNK, n, &v->unk_id)))
        return st;
    bool found = false;
    v->add_bos = add_bos;
    if ((st = slm_gguf_get_bool(f, SLM_GGUF_KEY_TOK_ADD_BOS, &v->add_bos, &found))) return st;
    const char **ts = slm_xmalloc((size_t)n * sizeof *ts);
    size_t *tl = slm_xmalloc((size_t)n * sizeof *tl);
    slm_gguf_array_strings(f, toks, ts, tl);
    int32_t *tt = NULL;
    if (types) {
        tt = slm_xmalloc((size_t)n * sizeof *tt);
        for (int32_t i = 0; i < n; i++)
            tt[i] = (int32_t)slm_get_le32(f->map.data + types->off + 4 * (size_t)i);
    }
    v->tokens = ts;
    v->token_len = tl;
    v->token_type = tt;
    return SLM_OK;
}

static void free_common(slm_tok_vocab *v) {
    free((void *)v->tokens);
    free((void *)v->token_len);
    free((void *)v->token_type);
}

// Model gpt2: byte-level BPE as tokenizer.json.
static slm_status gpt2_json(const slm_gguf_file *f, slm_buf *out) {
    const char *pre = NULL;
    size_t plen = 0;
    bool has_pre = false;
    slm_status st = slm_gguf_get_str(f, SLM_GGUF_KEY_TOK_PRE, &pre, &plen, &has_pre);
    if (st) return st;
    char pre_name[64] = "gpt2"; // llama.cpp's reading of a file without the key
    if (has_pre) snprintf(pre_name, sizeof pre_name, "%.*s", (int)(plen > 60 ? 60 : plen), pre);
    const slm_gguf_kv *merges = NULL;
    if ((st = slm_gguf_get_array(f, SLM_GGUF_KEY_TOK_MERGES, SLM_GGUF_STRING, &merges))) return st;
    if (!merges)
        return slm_fail(SLM_E_FORMAT,
                        "%s: key %s missing (a gpt2 tokenizer needs tokens and merges)", f->path,
                        SLM_GGUF_KEY_TOK_MERGES);
    // gpt2 models: llama.cpp adds BOS only when add_bos_token says so
    slm_tok_vocab v = {.pre = pre_name};
    if ((st = read_common(f, &v, false))) return st;
    if (v.n_tokens < 256 || merges->count > (1u << 22)) {
        free_common(&v);
        return slm_fail(SLM_E_FORMAT, "%s: %d tokens and %llu merges (expected 256 .. 2^22)",
                        f->path, v.n_tokens, (unsigned long long)merges->count);
    }
    v.unk_id = -1; // byte-level BPE never produces UNK (llama.cpp writes 0 for some files)
    v.n_merges = (int32_t)merges->count;
    const char **ms = slm_xmalloc((size_t)(v.n_merges + 1) * sizeof *ms);
    size_t *ml = slm_xmalloc((size_t)(v.n_merges + 1) * sizeof *ml);
    slm_gguf_array_strings(f, merges, ms, ml);
    v.merges = ms;
    v.merge_len = ml;
    st = slm_tokenizer_vocab_json(&v, f->path, out);
    if (st && has_pre && strstr(slm_errmsg(), "pre-tokenizer"))
        st = slm_fail(st,
                      "%s: key %s is \"%s\": this pre-tokenizer is not implemented (shardlm "
                      "knows gpt2, smollm, starcoder, llama-bpe)",
                      f->path, SLM_GGUF_KEY_TOK_PRE, pre_name);
    free_common(&v);
    free(ms);
    free(ml);
    return st;
}

// Model llama: SentencePiece BPE as a tokenizer.model, with llama.cpp's defaults (add_bos_token
// true, add_space_prefix true, add_eos_token false).
static slm_status llama_spm(const slm_gguf_file *f, slm_buf *out) {
    slm_tok_vocab v = {0};
    slm_status st = read_common(f, &v, true);
    if (st) return st;
    const slm_gguf_kv *scores = NULL;
    bool add_eos = false, found = false;
    v.add_space_prefix = true;
    char *what = NULL;
    float *sc = NULL;
    if ((st = slm_gguf_get_array(f, SLM_GGUF_KEY_TOK_SCORES, SLM_GGUF_FLOAT32, &scores)) ||
        (st = slm_gguf_get_bool(f, SLM_GGUF_KEY_TOK_ADD_SPACE_PREFIX, &v.add_space_prefix,
                                &found)) ||
        (st = slm_gguf_get_bool(f, SLM_GGUF_KEY_TOK_ADD_EOS, &add_eos, &found)))
        goto out;
    if (!scores || !v.token_type) {
        st = slm_fail(SLM_E_FORMAT,
                      "%s: key %s missing (a llama (SentencePiece) tokenizer needs tokens, "
                      "scores and token types)",
                      f->path, scores ? SLM_GGUF_KEY_TOK_TYPES : SLM_GGUF_KEY_TOK_SCORES);
        goto out;
    }
    if (scores->count != (uint64_t)v.n_tokens) {
        st = slm_fail(SLM_E_FORMAT, "%s: key %s has %llu entries for %d tokens", f->path,
                      SLM_GGUF_KEY_TOK_SCORES, (unsigned long long)scores->count, v.n_tokens);
        goto out;
    }
    if (add_eos) { // shardlm's encoders never append EOS by default
        st = slm_fail(SLM_E_UNSUPPORTED,
                      "%s: key %s is true: shardlm does not append EOS to every encoded text",
                      f->path, SLM_GGUF_KEY_TOK_ADD_EOS);
        goto out;
    }
    sc = slm_xmalloc((size_t)v.n_tokens * sizeof *sc);
    for (int32_t i = 0; i < v.n_tokens; i++) {
        uint32_t u = slm_get_le32(f->map.data + scores->off + 4 * (size_t)i);
        memcpy(&sc[i], &u, 4);
        int ty = v.token_type[i];
        if (ty < SLM_GGUF_TOKEN_NORMAL || ty > SLM_GGUF_TOKEN_BYTE || !isfinite(sc[i]) ||
            !v.token_len[i]) {
            st = slm_fail(SLM_E_FORMAT,
                          "%s: token %d: %s %d, %s %g, text of %zu bytes (expected a type 1 "
                          "normal .. 6 byte, a finite score, a non-empty text)",
                          f->path, i, SLM_GGUF_KEY_TOK_TYPES, ty, SLM_GGUF_KEY_TOK_SCORES,
                          (double)sc[i], v.token_len[i]);
            goto out;
        }
    }
    v.scores = sc;
    size_t wl = strlen(f->path) + 64;
    what = slm_xmalloc(wl);
    snprintf(what, wl, "%s (%s)", f->path, SLM_GGUF_KEY_TOK_TOKENS);
    st = slm_tokenizer_vocab_spm(&v, what, out);
out:
    free(what);
    free(sc);
    free_common(&v);
    return st;
}

slm_status slm_gguf_tokenizer_file(const slm_gguf_file *f, slm_buf *out, const char **name) {
    const char *model = NULL;
    size_t mlen = 0;
    slm_status st = slm_gguf_get_str(f, SLM_GGUF_KEY_TOK_MODEL, &model, &mlen, NULL);
    if (st) return st;
    if (mlen == 4 && !memcmp(model, "gpt2", 4)) {
        if (name) *name = "tokenizer.json";
        return gpt2_json(f, out);
    }
    if (mlen == 5 && !memcmp(model, "llama", 5)) {
        if (name) *name = "tokenizer.model";
        return llama_spm(f, out);
    }
    return slm_fail(SLM_E_UNSUPPORTED,
                    "%s: key %s is \"%.*s\": shardlm imports the byte-level BPE (gpt2) and "
                    "SentencePiece (llama) tokenizers from GGUF; HINT: use the model's Hugging "
                    "Face directory (config.json, safetensors and its tokenizer.model or "
                    "tokenizer.json) as --model / --init-from-hf instead of the GGUF file",
                    f->path, SLM_GGUF_KEY_TOK_MODEL, (int)(mlen > 40 ? 40 : mlen), model);
}

slm_status slm_gguf_write_tokenizer(const slm_gguf_file *f, const char *dir, char **path) {
    *path = NULL;
    slm_buf b = {0};
    const char *name = NULL;
    slm_status st = slm_gguf_tokenizer_file(f, &b, &name);
    char *p = slm_path_join(dir, name ? name : "tokenizer");
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
