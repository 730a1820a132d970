// libFuzzer target: checkpoint manifest.json parsing and validation (slm_ckpt_parse_manifest:
// format version, config, units, files, range coverage). Reads no rank file.
#include "ckpt/ckpt_internal.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    slm_ckpt *c = slm_ckpt_alloc("/nonexistent/step_00000001");
    if (slm_ckpt_parse_manifest(c, (const char *)data, size) == SLM_OK) {
        // An accepted manifest is self-consistent: every tensor lies inside its unit.
        for (int u = 0; u < slm_ckpt_n_units(c); u++) {
            const slm_unit_layout *L = slm_ckpt_unit(c, u);
            for (int i = 0; i < L->n_views; i++)
                if (L->views[i].offset + L->views[i].numel > L->numel) __builtin_trap();
        }
        // ... and its skip counters fit its step.
        const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
        if (M->nonfinite_in_a_row > M->nonfinite_skips ||
            M->nonfinite_skips + M->empty_skips > M->step)
            __builtin_trap();
    }
    slm_ckpt_free(c);
    return 0;
}
