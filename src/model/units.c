// Unit layouts and their flat buffers, freed the same way for the base model (llama.c) and the
// LoRA adapters (lora.c); a file of its own so that neither calls the other for it.
#include "model_internal.h"

#include <stdlib.h>

void slm_units_free(slm_device *dev, int n, slm_unit_layout *units, float **params, float **grads,
                    bool owns) {
    for (int u = 0; units && u < n; u++)
        free(units[u].views); // host view tables
    for (int u = 0; owns && u < n; u++) {
        if (params) slm_dev_free(dev, params[u]);
        if (grads) slm_dev_free(dev, grads[u]);
    }
    free(units);
    free(params);
    free(grads);
}
