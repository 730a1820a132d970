// libFuzzer target: the GGUF parser (slm_gguf_parse: header, counts, keys and values, arrays,
// alignment, tensor infos and their placement), the typed getters on every key, the tokenizer
// conversion (gpt2 -> tokenizer.json, llama -> a SentencePiece tokenizer.model, loaded once),
// then dequantization of every accepted tensor (bounded size) to f32.
#include "ckpt/ckpt.h"
#include "ckpt/gguf_format.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    slm_gguf_file f;
    if (slm_gguf_parse(data, size, "fuzz.gguf", &f) == SLM_OK) {
        for (int64_t i = 0; i < f.n_kv; i++) {
            const slm_gguf_kv *kv = &f.kv[i];
            int64_t v;
            double d;
            bool b;
            const char *s;
            size_t n;
            (void)slm_gguf_get_int(&f, kv->key, INT64_MIN, INT64_MAX, &v, NULL);
            (void)slm_gguf_get_float(&f, kv->key, &d, NULL);
            (void)slm_gguf_get_bool(&f, kv->key, &b, NULL);
            (void)slm_gguf_get_str(&f, kv->key, &s, &n, NULL);
            const slm_gguf_kv *arr = NULL;
            if (!slm_gguf_get_array(&f, kv->key, SLM_GGUF_STRING, &arr) && arr &&
                arr->count < 4096) {
                const char **ss = malloc((size_t)(arr->count + 1) * sizeof *ss);
                size_t *ls = malloc((size_t)(arr->count + 1) * sizeof *ls);
                slm_gguf_array_strings(&f, arr, ss, ls);
                for (uint64_t k = 0; k < arr->count; k++)
                    if (ss[k] + ls[k] > (const char *)data + size) __builtin_trap();
                free(ss);
                free(ls);
            }
        }
        slm_buf tok = {0};
        (void)slm_gguf_tokenizer_file(&f, &tok, NULL);
        slm_buf_free(&tok);
        for (int64_t i = 0; i < f.n_tensors; i++) {
            const slm_gguf_tensor *t = &f.t[i];
            if (f.data_start + t->offset + t->nbytes > size) __builtin_trap();
            if (t->numel > (1 << 20)) continue;
            float *out = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
            slm_gguf_read_f32(&f, t, out);
            free(out);
        }
    }
    slm_gguf_close(&f);
    return 0;
}
