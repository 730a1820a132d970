// Times forward + backward of the C model (not a test; no asserts on time).
// Usage: model_bench [SPEC=kjv] [B=8] [T=256] [steps=5] [ckpt=0]
// Prints ms per step, tokens/s and the model FLOPs rate with the MFU formula's numerator
// (6N + 12 L C T) FLOPs per token.
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "kjv";
    int B = argc > 2 ? atoi(argv[2]) : 8, T = argc > 3 ? atoi(argv[3]) : 256;
    int steps = argc > 4 ? atoi(argv[4]) : 5;
    bool ckpt = argc > 5 && atoi(argv[5]) != 0;
    slm_llama_config c;
    slm_llama m;
    if (slm_llama_config_resolve(spec, &c) || slm_llama_init(&m, &c, true)) {
        fprintf(stderr, "model_bench: %s\n", slm_errmsg());
        return 1;
    }
    slm_llama_init_weights(&m, 1);
    m.activation_checkpointing = ckpt;
    slm_llama_set_shape(&m, B, T, false);
    int64_t N = (int64_t)B * T;
    int32_t *tok = malloc((size_t)N * 4), *tgt = malloc((size_t)N * 4);
    slm_rng r;
    slm_rng_seed(&r, 2);
    for (int64_t i = 0; i < N; i++) {
        tok[i] = (int32_t)slm_rng_below(&r, (uint64_t)c.vocab_size);
        tgt[i] = (int32_t)slm_rng_below(&r, (uint64_t)c.vocab_size);
    }
    double best = 1e30, fwd_best = 1e30, cpu_best = 1e30; // wall s, wall s, process CPU s
    for (int s = 0; s < steps + 1; s++) {                 // first step warms up
        clock_t c0 = clock();
        double t0 = slm_time_s();
        slm_llama_forward(&m, tok, tgt, B, T);
        double t1 = slm_time_s();
        slm_llama_backward(&m, 1.0f);
        double t2 = slm_time_s();
        double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
        if (s > 0 && cpu < cpu_best) cpu_best = cpu;
        if (s > 0 && t2 - t0 < best) best = t2 - t0;
        if (s > 0 && t1 - t0 < fwd_best) fwd_best = t1 - t0;
    }
    double flops_tok = 6.0 * (double)slm_llama_n_matmul_params(&c) +
                       12.0 * c.num_hidden_layers * c.hidden_size * (double)T;
    printf("%s B=%d T=%d ckpt=%d: %.1f ms/step (forward incl. fused head %.1f ms), %.0f tok/s, "
           "%.1f GFLOP/s (6N+12LCT), act %.1f MiB, CPU time %.1f ms/step\n",
           spec, B, T, (int)ckpt, best * 1e3, fwd_best * 1e3, (double)N / best,
           flops_tok * (double)N / best * 1e-9, slm_llama_act_bytes(&m) / 1048576.0,
           cpu_best * 1e3);
    free(tok);
    free(tgt);
    slm_llama_free(&m);
    return 0;
}
