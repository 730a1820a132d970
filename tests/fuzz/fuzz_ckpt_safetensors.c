// libFuzzer target: the safetensors header parser (slm_st_parse: header length, JSON, dtypes,
// shapes, offsets, overlap / coverage), then conversion of every accepted tensor to f32.
#include "ckpt/ckpt.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    slm_st_file f;
    if (slm_st_parse(data, size, "fuzz.safetensors", &f) == SLM_OK) {
        for (int i = 0; i < f.n; i++) {
            const slm_st_tensor *t = &f.t[i];
            if (f.data_start + t->end > size) __builtin_trap();
            if (t->numel > (1 << 20)) continue;
            float *out = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
            slm_st_read_f32(&f, t, out);
            free(out);
        }
    }
    slm_st_close(&f);
    return 0;
}
