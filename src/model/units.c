// Unit layouts and their flat buffers, freed the same way for the base model (llama.c) and the
// LoRA adapters (lora.c); a file of its own so that neither calls the other for it.
#include "model_internal.h"

#include <stdlib.h>

void slm_units_free(int n, slm_unit_layout *units, float **params, float **grads, bool owns) {
    for (int u = 0; units && u < n; u++)
        free(units[u].views);
    for (int u = 0; owns && u < n; u++) {
        if (params) free(params[u]);
        if (grads) free(grads[u]);
    }
    free(units);
    free(params);
    free(grads);
}
