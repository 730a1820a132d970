// A byte-level BPE tokenizer.json built from a vocabulary given as arrays (the GGUF import's
// tokenizer.ggml.* metadata), and the pre-tokenizer regexes of llama.cpp's pre-tokenizer names.
#include "tokenizer/bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// GPT-2's pattern with every digit a piece of its own, as llama.cpp's `smollm` / `starcoder`
// pre-tokenizers (and HF's Sequence[Digits(individual_digits), ByteLevel]) split: a digit ends
// the text the GPT-2 pattern sees, so a whitespace run before a digit is matched whole (the
// look-ahead treats a digit like the end of the text) and " ?\p{N}+" is gone.
static const char k_digits_gpt2[] =
    "\\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?![^\\s\\p{N}])|\\s+";
// Llama 3's pattern (tokenizer.json of Meta-Llama-3; llama.cpp's `llama-bpe`), with ignore_merges.
static const char k_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char *slm_bpe_named_regex(const char *name, bool *ignore_merges) {
    *ignore_merges = false;
    if (!strcmp(name, "gpt2") || !strcmp(name, "gpt-2")) return slm_bpe_gpt2_regex;
    if (!strcmp(name, "smollm") || !strcmp(name, "starcoder")) return k_digits_gpt2;
    if (!strcmp(name, "llama-bpe") || !strcmp(name, "llama3") || !strcmp(name, "llama-v3")) {
        *ignore_merges = true;
        return k_llama3;
    }
    return NULL;
}

const char *slm_tokenizer_named_regex(const char *name) {
    bool ignore_merges;
    return slm_bpe_named_regex(name, &ignore_merges);
}

// Whether every character of s[0, n) is one of the 256 byte-level symbols.
static bool is_symbols(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        uint32_t cp;
        if (c < 0x80) {
            cp = c;
            i++;
        } else if ((c & 0xE0) == 0xC0 && i + 1 < n && ((uint8_t)s[i + 1] & 0xC0) == 0x80) {
            cp = ((uint32_t)(c & 0x1F) << 6) | ((uint8_t)s[i + 1] & 0x3F);
            i += 2;
        } else {
            return false;
        }
        bool ok = false;
        for (int b = 0; b < 256 && !ok; b++)
            ok = slm_bpe_byte_cp[b] == cp;
        if (!ok) return false;
    }
    return true;
}

slm_status slm_tokenizer_vocab_json(const slm_tok_vocab *v, const char *what, slm_buf *out) {
    slm_bpe_init_bytemap();
    bool ignore_merges = false;
    const char *re = slm_bpe_named_regex(v->pre, &ignore_merges);
    if (!re)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: pre-tokenizer \"%s\" is not implemented (shardlm knows gpt2, smollm, "
                        "starcoder, llama-bpe)",
                        what, v->pre);
    int32_t ids[4] = {v->bos_id, v->eos_id, v->pad_id, v->unk_id};
    for (int i = 0; i < 4; i++)
        if (ids[i] < -1 || ids[i] >= v->n_tokens)
            return slm_fail(SLM_E_FORMAT,
                            "%s: special token id %d is outside the vocabulary [0, %d)", what,
                            ids[i], v->n_tokens);
    slm_buf_appendf(out, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,"
                         "\n  \"added_tokens\": [");
    int k = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        int ty = v->token_type ? v->token_type[i] : 1;
        if (ty != 3 && ty != 4) continue; // control (special) and user-defined tokens
        slm_buf_appendf(out, "%s\n    {\"id\": %d, \"content\": ", k++ ? "," : "", i);
        slm_bpe_json_string(out, v->tokens[i], v->token_len[i]);
        slm_buf_appendf(out,
                        ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                        "\"normalized\": false, \"special\": %s}",
                        ty == 3 ? "true" : "false");
    }
    slm_buf_appendf(out,
                    "%s],\n  \"normalizer\": null,\n  \"pre_tokenizer\": {\"type\": "
                    "\"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                    "{\"Regex\": ",
                    k ? "\n  " : "");
    slm_bpe_json_string(out, re, strlen(re));
    slm_buf_appendf(out, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
                         "\"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                         "\"use_regex\": false}]},\n  \"post_processor\": null,\n  \"decoder\": "
                         "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": "
                         "true, \"use_regex\": true},\n  \"model\": {\n    \"type\": \"BPE\",\n"
                         "    \"dropout\": null,\n    \"unk_token\": null,\n"
                         "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": "
                         "null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n");
    slm_buf_appendf(out,
                    "    \"ignore_merges\": %s,\n    \"shardlm_special_ids\": {\"bos\": %d, "
                    "\"eos\": %d, \"pad\": %d, \"unk\": %d, \"add_bos\": %s},\n    \"vocab\": {",
                    ignore_merges ? "true" : "false", v->bos_id, v->eos_id, v->pad_id, v->unk_id,
                    v->add_bos ? "true" : "false");
    slm_buf sym = {0};
    for (int32_t i = 0; i < v->n_tokens; i++) {
        slm_buf_appendf(out, "%s\n      ", i ? "," : "");
        if (is_symbols(v->tokens[i], v->token_len[i])) {
            slm_bpe_json_string(out, v->tokens[i], v->token_len[i]);
        } else { // spelled in raw text (a control token such as "<｜begin｜>"): its bytes' symbols
            sym.len = 0;
            slm_bpe_bytes_to_symbols((const uint8_t *)v->tokens[i], v->token_len[i], &sym);
            slm_bpe_json_string(out, sym.data, sym.len);
        }
        slm_buf_appendf(out, ": %d", i);
    }
    slm_buf_free(&sym);
    slm_buf_appendf(out, "\n    },\n    \"merges\": [");
    for (int32_t r = 0; r < v->n_merges; r++) {
        const char *m = v->merges[r], *sp = memchr(m, ' ', v->merge_len[r]);
        if (!sp || memchr(sp + 1, ' ', v->merge_len[r] - (size_t)(sp - m) - 1))
            return slm_fail(SLM_E_FORMAT, "%s: merge %d \"%.*s\": expected \"left right\"", what, r,
                            (int)(v->merge_len[r] > 60 ? 60 : v->merge_len[r]), m);
        slm_buf_appendf(out, "%s\n      [", r ? "," : "");
        slm_bpe_json_string(out, m, (size_t)(sp - m));
        slm_buf_append(out, ", ", 2);
        slm_bpe_json_string(out, sp + 1, v->merge_len[r] - (size_t)(sp - m) - 1);
        slm_buf_append(out, "]", 1);
    }
    slm_buf_appendf(out, "\n    ]\n  }\n}\n");
    return SLM_OK;
}
