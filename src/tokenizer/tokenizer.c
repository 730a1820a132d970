// Tokenizer front door: loads a file, detects its family, dispatches encode/decode.
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

slm_status slm_tokenizer_load(const char *path, slm_tokenizer **out) {
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &data, &len);
    if (st) return st;
    if (len == 0) {
        free(data);
        return slm_fail(SLM_E_FORMAT, "%s: empty tokenizer file", path);
    }
    slm_tokenizer *t = slm_xcalloc(1, sizeof *t);
    t->bos_id = t->eos_id = t->unk_id = t->pad_id = -1;
    size_t i = 0;
    while (i < len && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t'))
        i++;
    // tokenizer.json starts with '{'; a SentencePiece ModelProto starts with field 1 (pieces,
    // length-delimited: tag byte 0x0a).
    if (i < len && data[i] == '{') {
        t->type = SLM_TOK_BYTE_BPE;
        st = slm_bpe_load_json(path, data, len, t);
    } else if ((unsigned char)data[0] == 0x0a) {
        t->type = SLM_TOK_SPM_BPE;
        st = slm_spm_load(path, (const uint8_t *)data, len, t);
    } else {
        st = slm_fail(SLM_E_FORMAT,
                      "%s: not a tokenizer: expected a tokenizer.json (JSON object) or a "
                      "SentencePiece tokenizer.model (protobuf)",
                      path);
    }
    if (st == SLM_OK) t->hash = slm_xxh64(data, len, 0);
    free(data);
    if (st) {
        free(t);
        return st;
    }
    *out = t;
    return SLM_OK;
}

void slm_tokenizer_free(slm_tokenizer *t) {
    if (!t) return;
    if (t->type == SLM_TOK_BYTE_BPE) slm_bpe_free(t->impl);
    else if (t->type == SLM_TOK_SPM_BPE) slm_spm_free(t->impl);
    free(t);
}

slm_tok_type slm_tokenizer_type(const slm_tokenizer *t) { return t->type; }
const char *slm_tokenizer_type_name(const slm_tokenizer *t) {
    return t->type == SLM_TOK_BYTE_BPE ? "byte_bpe" : "sentencepiece_bpe";
}
int32_t slm_tokenizer_vocab_size(const slm_tokenizer *t) { return t->vocab_size; }
int32_t slm_tokenizer_bos_id(const slm_tokenizer *t) { return t->bos_id; }
int32_t slm_tokenizer_eos_id(const slm_tokenizer *t) { return t->eos_id; }
int32_t slm_tokenizer_unk_id(const slm_tokenizer *t) { return t->unk_id; }
int32_t slm_tokenizer_pad_id(const slm_tokenizer *t) { return t->pad_id; }
uint64_t slm_tokenizer_hash(const slm_tokenizer *t) { return t->hash; }

const char *slm_tokenizer_piece(const slm_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->vocab_size) return NULL;
    return t->type == SLM_TOK_BYTE_BPE ? slm_bpe_piece(t, id) : slm_spm_piece(t, id);
}

slm_status slm_tokenizer_encode(const slm_tokenizer *t, const char *text, size_t len, int flags,
                                slm_ivec *out) {
    if (flags & ~(SLM_ENC_ADD_BOS | SLM_ENC_ADD_EOS | SLM_ENC_ALLOW_SPECIAL))
        return slm_fail(SLM_E_ARG, "tokenizer encode: unknown flags 0x%x", flags);
    return t->type == SLM_TOK_BYTE_BPE ? slm_bpe_encode(t, text, len, flags, out)
                                       : slm_spm_encode(t, text, len, flags, out);
}

slm_status slm_tokenizer_decode(const slm_tokenizer *t, const int32_t *ids, size_t n,
                                slm_buf *out) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return slm_fail(SLM_E_ARG, "tokenizer decode: id %d at position %zu is outside [0, %d)",
                            ids[i], i, t->vocab_size);
    return t->type == SLM_TOK_BYTE_BPE ? slm_bpe_decode(t, ids, n, out)
                                       : slm_spm_decode(t, ids, n, out);
}
