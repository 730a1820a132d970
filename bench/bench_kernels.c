// Kernel lab: times every CPU kernel at one model configuration and prints ms, GFLOP/s (for the
// FLOP-heavy ones) or GB/s (for the memory-bound ones), and the share of the measured sgemm peak.
// Not a test: no asserts; correctness lives in tests/kernels/.
//
//   build-x/bench/bench_kernels [--only SUBSTR] [B T C H KV F V] [reps]
//   (defaults: the `small` config B=4 T=512 C=512 H=8 KV=8 F=1376 V=8192, 5 reps, best time
//   kept; threads from OMP_NUM_THREADS). --only times just the rows whose label contains SUBSTR.
//   On a shared machine the numbers are noisy: compare best-of-many, interleaved.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "kernels/kernels.h"

#include <cblas.h> // after kernels.h: it pulls in <complex.h>, whose macro I clashes with it

static int reps_ = 5;
static const char *only_;
static double peak_;

static float *randbuf(int64_t n, float std, slm_rng *r) {
    float *x = slm_xaligned((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = slm_rng_normal(r) * std;
    return x;
}

// One row of the table: best time over reps_ (after one warm-up call, done by the caller's
// first invocation of fn via the loop below).
#define TIME_IT(label, flops, bytes, stmt)                                                         \
    do {                                                                                           \
        if (only_ && !strstr(label, only_)) break;                                                 \
        stmt;                                                                                      \
        double best_ = 1e30, bestc_ = 1e30;                                                        \
        for (int r_ = 0; r_ < reps_; r_++) {                                                       \
            double t0_ = slm_time_s(), c0_ = cpu_s();                                              \
            stmt;                                                                                  \
            double dt_ = slm_time_s() - t0_, dc_ = cpu_s() - c0_;                                  \
            if (dt_ < best_) best_ = dt_;                                                          \
            if (dc_ < bestc_) bestc_ = dc_;                                                        \
        }                                                                                          \
        report(label, best_, bestc_, (double)(flops), (double)(bytes));                            \
    } while (0)

// Process CPU seconds (all threads). On a shared machine, CPU time / threads is a steadier
// figure than wall time: it does not count time our threads spent preempted.
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double total_ms_;

static void report(const char *label, double s, double cpu, double flops, double bytes) {
    total_ms_ += s * 1e3;
    double cpu_ms = cpu * 1e3 / omp_get_max_threads();
    if (flops > 0)
        printf("%-22s %9.3f ms (cpu/thr %9.3f)  %7.1f GFLOP/s  %5.1f%% of peak\n", label, s * 1e3,
               cpu_ms, flops / s * 1e-9, 100.0 * flops / s * 1e-9 / peak_);
    else
        printf("%-22s %9.3f ms (cpu/thr %9.3f)  %7.1f GB/s\n", label, s * 1e3, cpu_ms,
               bytes / s * 1e-9);
}

int main(int argc, char **argv) {
    int B = 4, T = 512, C = 512, H = 8, KV = 8, F = 1376, V = 8192;
    if (argc >= 3 && strcmp(argv[1], "--only") == 0) {
        only_ = argv[2];
        argc -= 2, argv += 2;
    }
    if (argc >= 8) {
        B = atoi(argv[1]), T = atoi(argv[2]), C = atoi(argv[3]), H = atoi(argv[4]);
        KV = atoi(argv[5]), F = atoi(argv[6]), V = atoi(argv[7]);
    }
    if (argc >= 9) reps_ = atoi(argv[8]);
    int D = C / H;
    int64_t N = (int64_t)B * T;
    slm_rng rng;
    slm_rng_seed(&rng, 7);
    peak_ = slm_sgemm_peak_gflops(1024, 5);
    printf("config B=%d T=%d C=%d H=%d KV=%d D=%d F=%d V=%d; omp threads %d; OpenBLAS core %s; "
           "sgemm peak (1024^3) %.1f GFLOP/s\n",
           B, T, C, H, KV, D, F, V, omp_get_max_threads(), openblas_get_corename(), peak_);

    float *x = randbuf(N * C, 1, &rng), *y = randbuf(N * C, 1, &rng), *dy = randbuf(N * C, 1, &rng);
    float *dx = randbuf(N * C, 1, &rng), *w = randbuf(C, 1, &rng), *dw = randbuf(C, 1, &rng);
    float *rstd = randbuf(N, 1, &rng);
    int64_t nqkv = (int64_t)(H + 2 * KV) * D;
    float *Wqkv = randbuf(nqkv * C, 0.02f, &rng), *dWqkv = randbuf(nqkv * C, 0.0f, &rng);
    float *qkv = randbuf(N * nqkv, 1, &rng), *dqkv = randbuf(N * nqkv, 1, &rng);
    float *Wg = randbuf((int64_t)F * C, 0.02f, &rng), *dWg = randbuf((int64_t)F * C, 0, &rng);
    float *g = randbuf(N * F, 1, &rng), *u = randbuf(N * F, 1, &rng), *hh = randbuf(N * F, 1, &rng);
    float *dg = randbuf(N * F, 1, &rng), *du = randbuf(N * F, 1, &rng);
    float *Wv = randbuf((int64_t)V * C, 0.02f, &rng), *dWv = randbuf((int64_t)V * C, 0, &rng);
    float *logits = randbuf(N * V, 1, &rng), *losses = randbuf(N, 1, &rng);
    int32_t *tok = slm_xmalloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++)
        tok[i] = (int32_t)slm_rng_below(&rng, (uint64_t)V);
    float *q = randbuf(N * H * D, 1, &rng), *k = randbuf(N * KV * D, 1, &rng);
    float *v = randbuf(N * KV * D, 1, &rng), *ao = randbuf(N * H * D, 1, &rng);
    float *lse = randbuf((int64_t)B * H * T, 1, &rng), *dao = randbuf(N * H * D, 1, &rng);
    float *dq = randbuf(N * H * D, 1, &rng), *dk = randbuf(N * KV * D, 1, &rng);
    float *dv = randbuf(N * KV * D, 1, &rng);
    float *ct = randbuf((int64_t)T * D / 2, 1, &rng), *st = randbuf((int64_t)T * D / 2, 1, &rng);
    slm_rope_tables(ct, st, T, D, 10000.0f);

    double attn_f = 4.0 * B * H * D * (double)T * (T + 1) / 2; // QK^T and PV, causal half
    printf("\n-- per block (x L layers)\n");
    TIME_IT("rmsnorm fwd", 0, 2.0 * N * C * 4, slm_rmsnorm_fwd(y, rstd, x, w, N, C, 1e-5f));
    TIME_IT("matmul qkv fwd", 2.0 * N * C * nqkv, 0,
            slm_matmul_fwd(qkv, y, Wqkv, N, C, nqkv, false));
    TIME_IT("rope q+k fwd", 0, 2.0 * N * (H + KV) * D * 4,
            (slm_rope_apply(q, ct, st, B, T, H, D, 0, false),
             slm_rope_apply(k, ct, st, B, T, KV, D, 0, false)));
    TIME_IT("attention fwd", attn_f, 0, slm_attention_fwd(ao, lse, q, k, v, B, T, H, KV, D));
    TIME_IT("matmul o fwd", 2.0 * N * C * C, 0, slm_matmul_fwd(x, ao, Wqkv, N, C, C, false));
    TIME_IT("add (residual)", 0, 3.0 * N * C * 4, slm_add(x, x, y, N * C));
    TIME_IT("matmul gate+up fwd", 2.0 * 2 * N * C * F, 0,
            (slm_matmul_fwd(g, y, Wg, N, C, F, false), slm_matmul_fwd(u, y, Wg, N, C, F, false)));
    TIME_IT("swiglu fwd", 0, 3.0 * N * F * 4, slm_swiglu_fwd(hh, g, u, N, F));
    TIME_IT("matmul down fwd", 2.0 * N * C * F, 0, slm_matmul_fwd(x, hh, Wg, N, F, C, false));
    double fwd_ms = total_ms_;
    total_ms_ = 0;
    TIME_IT("matmul down bwd", 4.0 * N * C * F, 0, slm_matmul_bwd(dg, dWg, dx, hh, Wg, N, F, C));
    TIME_IT("swiglu bwd", 0, 5.0 * N * F * 4, slm_swiglu_bwd(dg, du, hh, g, u, N, F));
    TIME_IT(
        "matmul gate+up bwd", 2.0 * 4 * N * C * F, 0,
        (slm_matmul_bwd(dx, dWg, dg, y, Wg, N, C, F), slm_matmul_bwd(dx, dWg, du, y, Wg, N, C, F)));
    TIME_IT("matmul o bwd", 4.0 * N * C * C, 0, slm_matmul_bwd(dao, dWqkv, dx, ao, Wqkv, N, C, C));
    TIME_IT("attention bwd", 2.5 * attn_f, 0,
            slm_attention_bwd(dq, dk, dv, dao, q, k, v, ao, lse, B, T, H, KV, D));
    {
        // Packed samples (instruction data): every row holds samples of S tokens; the
        // block-diagonal mask leaves ~S/T of the causal work. Flops counted: the causal ones
        // inside the samples.
        int32_t *pos = slm_xmalloc((size_t)N * sizeof(int32_t));
        static const int lens[] = {64, 200};
        for (int li = 0; li < 2; li++) {
            int S = lens[li];
            for (int64_t i = 0; i < N; i++)
                pos[i] = (int32_t)((i % T) % S);
            double pf = 0;
            for (int t0 = 0; t0 < T; t0 += S) {
                double n = T - t0 < S ? T - t0 : S;
                pf += 4.0 * B * H * D * n * (n + 1) / 2;
            }
            char lf[64], lb[64];
            snprintf(lf, sizeof lf, "attention fwd packed S=%d", S);
            snprintf(lb, sizeof lb, "attention bwd packed S=%d", S);
            TIME_IT(lf, pf, 0, slm_attention_fwd_packed(ao, lse, q, k, v, pos, B, T, H, KV, D));
            TIME_IT(
                lb, 2.5 * pf, 0,
                slm_attention_bwd_packed(dq, dk, dv, dao, q, k, v, ao, lse, pos, B, T, H, KV, D));
        }
        free(pos);
        slm_attention_fwd(ao, lse, q, k, v, B, T, H, KV, D); // the unpacked lse again
    }
    TIME_IT("rope q+k bwd", 0, 2.0 * N * (H + KV) * D * 4,
            (slm_rope_apply(dq, ct, st, B, T, H, D, 0, true),
             slm_rope_apply(dk, ct, st, B, T, KV, D, 0, true)));
    TIME_IT("matmul qkv bwd", 4.0 * N * C * nqkv, 0,
            slm_matmul_bwd(dx, dWqkv, dqkv, y, Wqkv, N, C, nqkv));
    TIME_IT("rmsnorm bwd", 0, 4.0 * N * C * 4, slm_rmsnorm_bwd(dx, dw, dy, x, w, rstd, N, C));
    double bwd_ms = total_ms_;
    total_ms_ = 0;
    printf("\n-- once per step\n");
    TIME_IT("embedding fwd", 0, 2.0 * N * C * 4, slm_embedding_fwd(x, tok, Wv, N, C));
    TIME_IT("lm_head fwd", 2.0 * N * C * V, 0, slm_matmul_fwd(logits, x, Wv, N, C, V, false));
    TIME_IT("cross-entropy fused", 0, 2.0 * N * V * 4,
            slm_cross_entropy_fused(logits, losses, tok, N, V, 1.0f / (float)N));
    TIME_IT("lm_head bwd", 4.0 * N * C * V, 0, slm_matmul_bwd(dx, dWv, logits, x, Wv, N, C, V));
    TIME_IT("embedding bwd", 0, 2.0 * N * C * 4, slm_embedding_bwd(dWv, tok, dx, N, C));

    // FLOPs of one block actually executed (fwd + bwd = 3x fwd): 6 * matmul params per token plus
    // 3x the causal attention products (the PaLM MFU formula counts full, non-causal attention).
    double blk_params = (double)nqkv * C + (double)C * C + 3.0 * C * F;
    double blk_flops = 6.0 * blk_params * N + 3.0 * attn_f;
    if (only_) return 0; // partial tables have no meaningful totals (buffers leak to exit)
    printf("\nblock fwd %.1f ms + bwd %.1f ms = %.1f ms; %.1f GFLOP/s = %.1f%% of sgemm peak\n",
           fwd_ms, bwd_ms, fwd_ms + bwd_ms, blk_flops / ((fwd_ms + bwd_ms) * 1e-3) * 1e-9,
           100.0 * blk_flops / ((fwd_ms + bwd_ms) * 1e-3) * 1e-9 / peak_);
    printf("root (embedding, lm_head, cross-entropy) %.1f ms\n", total_ms_);

    free(x), free(y), free(dy), free(dx), free(w), free(dw), free(rstd), free(Wqkv), free(dWqkv);
    free(qkv), free(dqkv), free(Wg), free(dWg), free(g), free(u), free(hh), free(dg), free(du);
    free(Wv), free(dWv), free(logits), free(losses), free(tok), free(q), free(k), free(v);
    free(ao), free(lse), free(dao), free(dq), free(dk), free(dv), free(ct), free(st);
    return 0;
}
