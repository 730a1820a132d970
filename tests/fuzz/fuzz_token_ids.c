// Fuzz target: the token-id file parser of slm_eval_token_ids (shardlm eval --token-ids), on a
// fixed tiny model. Any input must give SLM_OK or a clean error.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"

static slm_llama g_model;
static char g_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void remove_temp(void) {
    unlink(g_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_path[0]) {
        omp_set_num_threads(1); // a tiny model: thread start-up would dominate every input
        slm_llama_config c = {.vocab_size = 11,
                              .hidden_size = 8,
                              .intermediate_size = 12,
                              .num_hidden_layers = 1,
                              .num_attention_heads = 2,
                              .num_key_value_heads = 1,
                              .max_position_embeddings = 8,
                              .rms_norm_eps = 1e-5f,
                              .rope_theta = 10000.0f,
                              .initializer_range = 0.02f};
        if (slm_llama_init(&g_model, &c, true)) abort();
        slm_llama_init_weights(&g_model, 1);
        snprintf(g_path, sizeof g_path, "/tmp/fuzz_token_ids.%d", (int)getpid());
        atexit(remove_temp);
    }
    FILE *f = fopen(g_path, "wb"); // plain write: no fsync per input
    if (!f) return 0;
    size_t put = fwrite(data, 1, size, f);
    fclose(f);
    if (put != size) return 0;
    slm_eval_result r;
    (void)slm_eval_token_ids(&g_model, g_path, &r);
    return 0;
}
