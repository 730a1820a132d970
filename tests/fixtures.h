// Shared fixtures of the C tests (the shell tests' preamble and fixtures are tests/lib.sh).
#ifndef SLM_TEST_FIXTURES_H
#define SLM_TEST_FIXTURES_H

#include <stdlib.h>

#include "base/base.h"
#include "model/model.h"
#include "test.h"

// A tiny Llama config: vocab_size `vocab`, hidden 16, intermediate 32, 1 layer, 2 heads, 1 KV
// head, 64 positions, RMSNorm eps 1e-5, RoPE theta 1e4, untied embeddings, init std 0.02.
// Tests change the fields they need.
static inline slm_llama_config slm_test_tiny_config(int32_t vocab) {
    return (slm_llama_config){.vocab_size = vocab,
                              .hidden_size = 16,
                              .intermediate_size = 32,
                              .num_hidden_layers = 1,
                              .num_attention_heads = 2,
                              .num_key_value_heads = 1,
                              .max_position_embeddings = 64,
                              .rms_norm_eps = 1e-5f,
                              .rope_theta = 10000.0f,
                              .tie_word_embeddings = false,
                              .initializer_range = 0.02f};
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
