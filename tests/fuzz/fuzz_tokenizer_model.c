// libFuzzer target: arbitrary bytes as a SentencePiece tokenizer.model. The loader must refuse
// (SLM_E_FORMAT / SLM_E_UNSUPPORTED) or load; a loaded model must encode and decode a fixed
// string, and decode every id, without crashing or leaking. Seeds: tests/fuzz/corpus/
// tokenizer_model/ (a small model made with spm_train).
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    slm_tokenizer t;
    memset(&t, 0, sizeof t);
    t.bos_id = t.eos_id = t.unk_id = t.pad_id = -1;
    if (slm_spm_load("fuzz.model", data, size, &t) != SLM_OK) return 0;
    static const char text[] = "  Hello  world, \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \xff"
                               "<s> \xe2\x96\x81\xe2\x96\x81 tab\there  ";
    slm_ivec ids = {0};
    slm_buf out = {0};
    if (slm_spm_encode(&t, text, sizeof text - 1, SLM_ENC_ADD_BOS | SLM_ENC_ADD_EOS, &ids)) abort();
    for (size_t i = 0; i < ids.len; i++)
        if (ids.data[i] < 0 || ids.data[i] >= t.vocab_size) abort();
    if (slm_spm_decode(&t, ids.data, ids.len, &out)) abort();
    ids.len = 0; // control / unknown piece texts matched as specials
    if (slm_spm_encode(&t, text, sizeof text - 1, SLM_ENC_ALLOW_SPECIAL, &ids)) abort();
    for (size_t i = 0; i < ids.len; i++)
        if (ids.data[i] < 0 || ids.data[i] >= t.vocab_size) abort();
    // every id once (pieces of every type, byte runs, control ids)
    int32_t n = t.vocab_size < 4096 ? t.vocab_size : 4096;
    ids.len = 0;
    for (int32_t i = 0; i < n; i++)
        slm_ivec_push(&ids, i);
    out.len = 0;
    if (slm_spm_decode(&t, ids.data, ids.len, &out)) abort();
    for (int32_t i = 0; i < n; i++)
        if (!slm_spm_piece(&t, i)) abort();
    slm_ivec_free(&ids);
    slm_buf_free(&out);
    slm_spm_free(t.impl);
    return 0;
}
