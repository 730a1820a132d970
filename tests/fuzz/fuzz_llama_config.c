// libFuzzer target: HF config.json parsing and validation (slm_llama_config_parse), then the
// unit layout of any config that is accepted (no parameter allocation).
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    slm_log_set_level(SLM_LOG_ERROR); // unknown-field warnings would flood the fuzzer's output
    slm_llama_config c;
    if (slm_llama_config_parse((const char *)data, size, "fuzz.json", &c) != SLM_OK) return 0;
    if (c.num_hidden_layers > 64) return 0; // layout cost is linear in L; keep iterations fast
    slm_llama m;
    if (slm_llama_init(&m, &c, false) == SLM_OK) {
        int64_t total = 0;
        for (int u = 0; u < m.n_units; u++)
            total += m.units[u].numel;
        if (total != slm_llama_n_params(&c)) __builtin_trap();
        slm_llama_free(&m);
    }
    return 0;
}
