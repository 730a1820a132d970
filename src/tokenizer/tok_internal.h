// Private to src/tokenizer/: the tokenizer object and the per-family entry points that
// tokenizer.c dispatches to. bpe*.c implements the byte-level BPE family, spm*.c SentencePiece.
#ifndef SLM_TOK_INTERNAL_H
#define SLM_TOK_INTERNAL_H

#include "tokenizer/tokenizer.h"

struct slm_tokenizer {
    slm_tok_type type;
    int32_t vocab_size;
    int32_t bos_id, eos_id, unk_id, pad_id; // -1 when absent
    bool no_default_bos;                    // the file says: do not prepend BOS by default
    uint64_t hash;                          // XXH64 of the source file bytes
    void *impl;                             // owned by the family: struct bpe_model / spm_model
};

// Byte-level BPE (bpe*.c). `data` is the tokenizer.json text (NUL-terminated, `len` bytes);
// `path` is only for messages. Fills every field of *t except `hash`.
slm_status slm_bpe_load_json(const char *path, const char *data, size_t len, slm_tokenizer *t);
void slm_bpe_free(void *impl);
slm_status slm_bpe_encode(const slm_tokenizer *t, const char *text, size_t len, int flags,
                          slm_ivec *out);
slm_status slm_bpe_decode(const slm_tokenizer *t, const int32_t *ids, size_t n, slm_buf *out);
const char *slm_bpe_piece(const slm_tokenizer *t, int32_t id);

// SentencePiece (spm*.c). `data` is the serialized ModelProto. Fills every field of *t except
// `hash`; refuses unsupported models with SLM_E_UNSUPPORTED.
slm_status slm_spm_load(const char *path, const uint8_t *data, size_t len, slm_tokenizer *t);
void slm_spm_free(void *impl);
slm_status slm_spm_encode(const slm_tokenizer *t, const char *text, size_t len, int flags,
                          slm_ivec *out);
slm_status slm_spm_decode(const slm_tokenizer *t, const int32_t *ids, size_t n, slm_buf *out);
// As slm_spm_decode; with `raw`, byte-fallback pieces are appended as their bytes verbatim
// (no U+FFFD for malformed UTF-8).
slm_status slm_spm_decode_ex(const slm_tokenizer *t, const int32_t *ids, size_t n, bool raw,
                             slm_buf *out);
// The byte a byte-fallback piece <0xXX> stands for, or -1 when `id` is not one.
int slm_spm_byte_of(const slm_tokenizer *t, int32_t id);
const char *slm_spm_piece(const slm_tokenizer *t, int32_t id);

#endif
