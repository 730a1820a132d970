// libFuzzer target: arbitrary bytes as a tokenizer.json. When the bytes load as a byte-level BPE,
// a fixed text (ASCII, UTF-8, invalid UTF-8, NUL, special-token text) must encode, decode back to
// itself, and encode identically a second time (the per-thread cache path). A vocabulary that
// lacks the symbols of some non-printable bytes loads (with a warning) and drops those bytes
// when encoding, as HF tokenizers does: the round trip is then the text without them.
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_text[] =
    "Hello, world! It's  \t\n\n 12345 caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd "
    "\xf0\x9f\x98\x80 \xff\xfe\xc3 <|bos|><|endoftext|> \0tail   ";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = malloc(size + 1);
    if (!json) return 0;
    memcpy(json, data, size);
    json[size] = 0;
    slm_tokenizer t;
    memset(&t, 0, sizeof t);
    t.type = SLM_TOK_BYTE_BPE;
    t.bos_id = t.eos_id = t.unk_id = t.pad_id = -1;
    if (slm_bpe_load_json("fuzz.json", json, size, &t) == SLM_OK) {
        const size_t n = sizeof k_text - 1;
        slm_ivec a = {0}, b = {0};
        slm_buf out = {0};
        if (slm_tokenizer_encode(&t, k_text, n, 0, &a) ||
            slm_tokenizer_encode(&t, k_text, n, 0, &b))
            abort(); // byte-level BPE encode never fails
        if (a.len != b.len || memcmp(a.data, b.data, a.len * sizeof *a.data)) abort();
        // BOS/EOS/PAD decode to nothing by design; a hostile vocab can make merges produce
        // them, so the round trip is required only when none appears.
        int has_special = 0;
        for (size_t i = 0; i < a.len; i++) {
            if (a.data[i] < 0 || a.data[i] >= t.vocab_size) abort();
            has_special |= a.data[i] == t.bos_id || a.data[i] == t.eos_id || a.data[i] == t.pad_id;
        }
        if (slm_tokenizer_decode(&t, a.data, a.len, &out)) abort();
        const bpe_model *m = t.impl;
        char kept[sizeof k_text];
        size_t nk = 0;
        for (size_t i = 0; i < n; i++)
            if (m->byte_id[(uint8_t)k_text[i]] >= 0) kept[nk++] = k_text[i];
        if (!has_special && (out.len != nk || memcmp(out.data, kept, nk))) abort();
        slm_ivec_free(&a);
        slm_ivec_free(&b);
        slm_buf_free(&out);
        slm_bpe_free(t.impl);
    }
    free(json);
    return 0;
}
