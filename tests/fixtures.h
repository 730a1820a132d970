// Shared fixtures of the C tests (the shell tests' preamble and fixtures are tests/lib.sh).
#ifndef SLM_TEST_FIXTURES_H
#define SLM_TEST_FIXTURES_H

#include <stdbool.h>
#include <stdlib.h>

#include "base/base.h"
#include "model/model.h"
#include "test.h"

// A Llama config for tests: vocab V, hidden C, intermediate F, L layers, H heads, KV key/value
// heads, T positions, tied or untied embeddings; RMSNorm eps 1e-5, RoPE theta 1e4, init std 0.02,
// head_dim C / H, no RoPE scaling. Tests change the other fields they need.
static inline slm_llama_config slm_test_config(int32_t V, int32_t C, int32_t F, int32_t L,
                                               int32_t H, int32_t KV, int32_t T, bool tied) {
    return (slm_llama_config){.vocab_size = V,
                              .hidden_size = C,
                              .intermediate_size = F,
                              .num_hidden_layers = L,
                              .num_attention_heads = H,
                              .num_key_value_heads = KV,
                              .max_position_embeddings = T,
                              .rms_norm_eps = 1e-5f,
                              .rope_theta = 10000.0f,
                              .tie_word_embeddings = tied,
                              .initializer_range = 0.02f};
}

// The tiny config most tests use: vocab `vocab`, hidden 16, intermediate 32, 1 layer, 2 heads,
// 1 KV head, 64 positions, untied embeddings (slm_test_config's other defaults).
static inline slm_llama_config slm_test_tiny_config(int32_t vocab) {
    return slm_test_config(vocab, 16, 32, 1, 2, 1, 64, false);
}

// Writes the first `bytes` of tinyshakespeare (in SLM_SHARED_DIR), extended to the end of that
// line, to `path` (atomically). Errors: the status of reading or writing, with its message.
static inline slm_status slm_test_corpus(const char *path, size_t bytes) {
    char *all = NULL;
    size_t n = 0;
    slm_status st = slm_file_read_all(slm_test_shared("data/tinyshakespeare.txt"), &all, &n);
    if (st) return st;
    size_t cut = n < bytes ? n : bytes;
    while (cut < n && cut > 0 && all[cut - 1] != '\n')
        cut++;
    st = slm_file_write_atomic(path, all, cut);
    free(all);
    return st;
}

#endif
