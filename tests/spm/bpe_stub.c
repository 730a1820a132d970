// Used only while src/tokenizer/bpe*.c has not landed (see CMakeLists.txt): byte-level BPE entry
// points that refuse, so the SentencePiece tests link on their own.
#include "tokenizer/tok_internal.h"

slm_status slm_bpe_load_json(const char *path, const char *data, size_t len, slm_tokenizer *t) {
    (void)data, (void)len, (void)t;
    return slm_fail(SLM_E_UNSUPPORTED, "%s: byte-level BPE not built", path);
}
void slm_bpe_free(void *impl) {
    (void)impl;
}
slm_status slm_bpe_encode(const slm_tokenizer *t, const char *text, size_t len, int flags,
                          slm_ivec *out) {
    (void)t, (void)text, (void)len, (void)flags, (void)out;
    return SLM_E_UNSUPPORTED;
}
slm_status slm_bpe_decode(const slm_tokenizer *t, const int32_t *ids, size_t n, slm_buf *out) {
    (void)t, (void)ids, (void)n, (void)out;
    return SLM_E_UNSUPPORTED;
}
const char *slm_bpe_piece(const slm_tokenizer *t, int32_t id) {
    (void)t, (void)id;
    return NULL;
}
