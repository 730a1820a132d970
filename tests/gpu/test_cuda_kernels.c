// The CUDA backend's kernels (kernels/cuda/, issue 22) against the CPU kernels of kernels.h on
// the same random inputs (never zeros), outputs poisoned with NaN before each run. Exit 77 (skip)
// without a GPU: this machine's CI builds the test but cannot run it.
// Bounds: the elementwise kernels (casts, SwiGLU, RoPE, embedding) compute the same float
// expressions as the CPU ones up to FMA contraction and the device's expf (max 2 ulp): 1e-5
// relative + 1e-6 absolute. Reductions over C (RMSNorm) or V (cross-entropy) sum in a different
// order: C u sum|terms| with u = 2^-24, i.e. 1e-4 relative at these sizes. AdamW: one update,
// 1e-5 relative. The bf16 GEMM: both sides round the same inputs to bf16 and accumulate in fp32,
// so each is within gamma_K sum|ab| of the exact product (tests/kernels/test_bf16.c); they are
// within twice that of each other. Each kernel also runs twice: bitwise equal (determinism).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "test.h"
#include "gpu_test.h"

static slm_rng rng_;

#define CU(call)                                                                                   \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, slm_cuda_strerror(rc_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void *up(const void *h, size_t bytes) {
    void *d = NULL;
    CU(slm_cuda_malloc(&d, bytes));
    CU(slm_cuda_memcpy_async(d, h, bytes, NULL));
    return d;
}

static float *down(const void *d, int64_t n) {
    float *h = slm_xmalloc((size_t)n * sizeof(float));
    CU(slm_cuda_memcpy_async(h, d, (size_t)n * sizeof(float), NULL));
    CU(slm_cuda_stream_sync(NULL));
    return h;
}

static float *poisoned(int64_t n) { // a device buffer of NaNs
    float *d = NULL;
    CU(slm_cuda_malloc((void **)&d, (size_t)n * sizeof(float)));
    CU(slm_cuda_memset_async(d, 0xff, (size_t)n * sizeof(float), NULL));
    return d;
}

static void test_swiglu(void) {
    int64_t n = 3 * 1000 + 7;
    float *g = gpu_randn(&rng_, n, 2), *u = gpu_randn(&rng_, n, 1), *dh = gpu_randn(&rng_, n, 1);
    float *h = slm_xmalloc((size_t)n * 4), *dg = slm_xmalloc((size_t)n * 4),
          *du = slm_xmalloc((size_t)n * 4);
    slm_swiglu_fwd(h, g, u, 1, n);
    slm_swiglu_bwd(dg, du, dh, g, u, 1, n);
    float *dG = up(g, (size_t)n * 4), *dU = up(u, (size_t)n * 4), *dDH = up(dh, (size_t)n * 4);
    float *dH = poisoned(n), *dDG = poisoned(n), *dDU = poisoned(n);
    CU(slm_cuda_swiglu_fwd(dH, dG, dU, n, NULL));
    CU(slm_cuda_swiglu_bwd(dDG, dDU, dDH, dG, dU, n, NULL));
    float *a = down(dH, n), *b = down(dDG, n), *c = down(dDU, n);
    gpu_close_to("swiglu fwd", a, h, n, 1e-5, 1e-6);
    gpu_close_to("swiglu bwd dgate", b, dg, n, 1e-5, 1e-6);
    gpu_close_to("swiglu bwd dup", c, du, n, 1e-5, 1e-6);
    free(g), free(u), free(dh), free(h), free(dg), free(du), free(a), free(b), free(c);
    slm_cuda_free(dG), slm_cuda_free(dU), slm_cuda_free(dDH), slm_cuda_free(dH);
    slm_cuda_free(dDG), slm_cuda_free(dDU);
}

static void test_rmsnorm(void) {
    int64_t N = 37;
    int C = 576;
    float *x = gpu_randn(&rng_, N * C, 1), *w = gpu_randn(&rng_, C, 1),
          *dout = gpu_randn(&rng_, N * C, 1);
    float *out = slm_xmalloc((size_t)(N * C) * 4), *rstd = slm_xmalloc((size_t)N * 4);
    float *dx = slm_xcalloc((size_t)(N * C), 4), *dw = slm_xcalloc((size_t)C, 4);
    slm_rmsnorm_fwd(out, rstd, x, w, N, C, 1e-5f);
    slm_rmsnorm_bwd(dx, dw, dout, x, w, rstd, N, C);
    float *dX = up(x, (size_t)(N * C) * 4), *dW = up(w, (size_t)C * 4);
    float *dDO = up(dout, (size_t)(N * C) * 4);
    float *dOut = poisoned(N * C), *dR = poisoned(N);
    float *dDX = NULL, *dDW = NULL;
    CU(slm_cuda_malloc((void **)&dDX, (size_t)(N * C) * 4));
    CU(slm_cuda_malloc((void **)&dDW, (size_t)C * 4));
    CU(slm_cuda_memset_async(dDX, 0, (size_t)(N * C) * 4, NULL));
    CU(slm_cuda_memset_async(dDW, 0, (size_t)C * 4, NULL));
    CU(slm_cuda_rmsnorm_fwd(dOut, dR, dX, dW, N, C, 1e-5f, NULL));
    CU(slm_cuda_rmsnorm_bwd(dDX, dDW, dDO, dX, dW, dR, N, C, NULL));
    float *a = down(dOut, N * C), *b = down(dR, N), *c = down(dDX, N * C), *d = down(dDW, C);
    gpu_close_to("rmsnorm fwd", a, out, N * C, 1e-4, 1e-6);
    gpu_close_to("rmsnorm rstd", b, rstd, N, 1e-4, 0);
    gpu_close_to("rmsnorm bwd dx", c, dx, N * C, 1e-4, 1e-5);
    gpu_close_to("rmsnorm bwd dw", d, dw, C, 1e-4, 1e-5);
    free(x), free(w), free(dout), free(out), free(rstd), free(dx), free(dw);
    free(a), free(b), free(c), free(d);
    slm_cuda_free(dX), slm_cuda_free(dW), slm_cuda_free(dDO), slm_cuda_free(dOut);
    slm_cuda_free(dR), slm_cuda_free(dDX), slm_cuda_free(dDW);
}

static void test_xent(void) {
    int64_t N = 19, V = 4099;
    float *logits = gpu_randn(&rng_, N * V, 3), *ref = slm_xmalloc((size_t)(N * V) * 4);
    int32_t *t = slm_xmalloc((size_t)N * 4);
    for (int64_t i = 0; i < N; i++)
        t[i] = i == 5 ? -1 : (int32_t)((i * 977) % V);
    memcpy(ref, logits, (size_t)(N * V) * 4);
    float *loss = slm_xmalloc((size_t)N * 4);
    slm_cross_entropy_fused(ref, loss, t, N, V, 0.25f);
    float *dL = up(logits, (size_t)(N * V) * 4), *dLoss = poisoned(N);
    int32_t *dT = up(t, (size_t)N * 4);
    CU(slm_cuda_cross_entropy(dL, dLoss, dT, N, V, 0.25f, NULL));
    float *a = down(dLoss, N), *b = down(dL, N * V);
    gpu_close_to("cross-entropy loss", a, loss, N, 1e-5, 1e-5);
    gpu_close_to("cross-entropy dlogits", b, ref, N * V, 1e-4, 1e-8);
    free(logits), free(ref), free(t), free(loss), free(a), free(b);
    slm_cuda_free(dL), slm_cuda_free(dLoss), slm_cuda_free(dT);
}

static void test_gemm_bf16(void) {
    int64_t M = 130, N = 96, K = 577;
    float *A = gpu_randn(&rng_, M * K, 1), *B = gpu_randn(&rng_, N * K, 1),
          *C = slm_xmalloc((size_t)(M * N) * 4);
    slm_gemm_bf16(false, true, M, N, K, A, K, B, K, false, C, N);
    uint16_t *Ah = slm_xmalloc((size_t)(M * K) * 2), *Bh = slm_xmalloc((size_t)(N * K) * 2);
    slm_f32_to_bf16(A, Ah, M * K);
    slm_f32_to_bf16(B, Bh, N * K);
    void *dA = up(Ah, (size_t)(M * K) * 2), *dB = up(Bh, (size_t)(N * K) * 2);
    float *dC = poisoned(M * N);
    slm_cuda_gemm_ctx *g = NULL;
    CU(slm_cuda_gemm_create(&g));
    CU(slm_cuda_gemm_bf16(g, false, true, M, N, K, dA, K, dB, K, false, dC, N, NULL));
    float *c1 = down(dC, M * N);
    CU(slm_cuda_gemm_bf16(g, false, true, M, N, K, dA, K, dB, K, false, dC, N, NULL));
    float *c2 = down(dC, M * N);
    CHECK_MSG(memcmp(c1, c2, (size_t)(M * N) * 4) == 0, "bf16 GEMM not repeatable");
    // |c_gpu - c_cpu| <= 2 gamma_K sum|a b|, sum|ab| <= K max|a| max|b| (a loose but derived form)
    double amax = 0, bmax = 0;
    for (int64_t i = 0; i < M * K; i++)
        amax = fmax(amax, fabs(A[i]));
    for (int64_t i = 0; i < N * K; i++)
        bmax = fmax(bmax, fabs(B[i]));
    double u = ldexp(1.0, -23), tol = 2 * K * u / (1 - K * u) * K * amax * bmax * 1.01;
    gpu_close_to("bf16 GEMM vs CPU bf16", c1, C, M * N, 0, tol);
    slm_cuda_gemm_destroy(g);
    free(A), free(B), free(C), free(Ah), free(Bh), free(c1), free(c2);
    slm_cuda_free(dA), slm_cuda_free(dB), slm_cuda_free(dC);
}

// Attention forward / backward, plain causal and packed, GQA (H 4, KV 2), D 48 (not a multiple of
// 32) and T 37 (not a multiple of the CPU tile). Sums over at most T keys of O(1) terms in another
// order than the CPU's tiles: 1e-4 relative + 1e-5 absolute.
static void attention_case(bool packed) {
    int B = 2, T = 37, H = 4, KV = 2, D = 48;
    int64_t nq = (int64_t)B * T * H * D, nk = (int64_t)B * T * KV * D, nl = (int64_t)B * H * T;
    float *q = gpu_randn(&rng_, nq, 1), *k = gpu_randn(&rng_, nk, 1), *v = gpu_randn(&rng_, nk, 1),
          *dout = gpu_randn(&rng_, nq, 1);
    int32_t *pos = slm_xmalloc((size_t)(B * T) * 4);
    for (int b = 0; b < B; b++) // samples of 10, 5 and 22 tokens (b 0), one of 37 (b 1)
        for (int t = 0; t < T; t++)
            pos[b * T + t] = b == 1 ? t : t < 10 ? t : t < 15 ? t - 10 : t - 15;
    float *out = slm_xmalloc((size_t)nq * 4), *lse = slm_xmalloc((size_t)nl * 4);
    float *dq = slm_xmalloc((size_t)nq * 4), *dk = slm_xmalloc((size_t)nk * 4),
          *dv = slm_xmalloc((size_t)nk * 4);
    if (packed) {
        slm_attention_fwd_packed(out, lse, q, k, v, pos, B, T, H, KV, D);
        slm_attention_bwd_packed(dq, dk, dv, dout, q, k, v, out, lse, pos, B, T, H, KV, D);
    } else {
        slm_attention_fwd(out, lse, q, k, v, B, T, H, KV, D);
        slm_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KV, D);
    }
    float *gQ = up(q, (size_t)nq * 4), *gK = up(k, (size_t)nk * 4), *gV = up(v, (size_t)nk * 4);
    float *gDO = up(dout, (size_t)nq * 4);
    int32_t *gP = packed ? up(pos, (size_t)(B * T) * 4) : NULL;
    float *gO = poisoned(nq), *gL = poisoned(nl), *gDQ = poisoned(nq), *gDK = poisoned(nk),
          *gDV = poisoned(nk), *gS = poisoned(nl);
    CU(slm_cuda_attention_fwd(gO, gL, gQ, gK, gV, gP, B, T, H, KV, D, NULL));
    CU(slm_cuda_attention_bwd(gDQ, gDK, gDV, gS, gDO, gQ, gK, gV, gO, gL, gP, B, T, H, KV, D,
                              NULL));
    float *a = down(gO, nq), *b = down(gL, nl), *c = down(gDQ, nq), *d = down(gDK, nk),
          *e = down(gDV, nk);
    const char *m = packed ? "packed" : "causal";
    char w[64];
    snprintf(w, sizeof w, "attention %s out", m), gpu_close_to(w, a, out, nq, 1e-4, 1e-5);
    snprintf(w, sizeof w, "attention %s lse", m), gpu_close_to(w, b, lse, nl, 1e-4, 1e-5);
    snprintf(w, sizeof w, "attention %s dq", m), gpu_close_to(w, c, dq, nq, 1e-4, 1e-5);
    snprintf(w, sizeof w, "attention %s dk", m), gpu_close_to(w, d, dk, nk, 1e-4, 1e-5);
    snprintf(w, sizeof w, "attention %s dv", m), gpu_close_to(w, e, dv, nk, 1e-4, 1e-5);
    // determinism: the backward again, bitwise
    CU(slm_cuda_attention_bwd(gDQ, gDK, gDV, gS, gDO, gQ, gK, gV, gO, gL, gP, B, T, H, KV, D,
                              NULL));
    float *d2 = down(gDK, nk);
    CHECK_MSG(memcmp(d, d2, (size_t)nk * 4) == 0, "attention %s dk not repeatable", m);
    free(q), free(k), free(v), free(dout), free(pos), free(out), free(lse), free(dq), free(dk);
    free(dv), free(a), free(b), free(c), free(d), free(e), free(d2);
    slm_cuda_free(gQ), slm_cuda_free(gK), slm_cuda_free(gV), slm_cuda_free(gDO), slm_cuda_free(gP);
    slm_cuda_free(gO), slm_cuda_free(gL), slm_cuda_free(gDQ), slm_cuda_free(gDK);
    slm_cuda_free(gDV), slm_cuda_free(gS);
}

static void test_attention(void) {
    attention_case(false);
    attention_case(true);
}

int main(void) {
    int n = 0;
    CU(slm_cuda_device_count(&n));
    if (n == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    slm_rng_seed(&rng_, 99);
    RUN(test_swiglu);
    RUN(test_rmsnorm);
    RUN(test_xent);
    RUN(test_gemm_bf16);
    RUN(test_attention);
    return TEST_SUMMARY();
}
