// SentencePiece BPE models (tokenizer.model): stub while the real loader lands.
#include "tokenizer/tok_internal.h"

slm_status slm_spm_load(const char *path, const uint8_t *data, size_t len, slm_tokenizer *t) {
    (void)data;
    (void)len;
    (void)t;
    return slm_fail(SLM_E_UNSUPPORTED, "%s: SentencePiece models: not implemented yet", path);
}
void slm_spm_free(void *impl) { (void)impl; }
slm_status slm_spm_encode(const slm_tokenizer *t, const char *text, size_t len, int flags,
                          slm_ivec *out) {
    (void)t;
    (void)text;
    (void)len;
    (void)flags;
    (void)out;
    return slm_fail(SLM_E_UNSUPPORTED, "SentencePiece encode: not implemented yet");
}
slm_status slm_spm_decode(const slm_tokenizer *t, const int32_t *ids, size_t n, slm_buf *out) {
    (void)t;
    (void)ids;
    (void)n;
    (void)out;
    return slm_fail(SLM_E_UNSUPPORTED, "SentencePiece decode: not implemented yet");
}
const char *slm_spm_piece(const slm_tokenizer *t, int32_t id) {
    (void)t;
    (void)id;
    return NULL;
}
