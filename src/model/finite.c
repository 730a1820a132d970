// Non-finite weight detection for loaders (HF safetensors, checkpoints).
#include "model.h"

#include <inttypes.h>
#include <math.h>

slm_status slm_check_finite(const slm_unit_layout *lay, int unit, int64_t begin, const float *x,
                            int64_t n, const char *what, const char *src) {
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(x[i])) continue;
        int64_t e = begin + i;
        const char *name = "(padding)";
        int64_t at = e;
        for (int k = 0; lay && k < lay->n_views; k++) {
            const slm_param_view *v = &lay->views[k];
            if (e >= v->offset && e < v->offset + v->numel) {
                name = v->name;
                at = e - v->offset;
                break;
            }
        }
        return slm_fail(SLM_E_FORMAT,
                        "%s: %s of tensor %s (unit %d) element %" PRId64 " is %s: the file is "
                        "corrupt or from a diverged run (weights and AdamW moments must be "
                        "finite)",
                        src, what, name, unit, at, isnan(x[i]) ? "NaN" : "infinite");
    }
    return SLM_OK;
}
