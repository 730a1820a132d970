// slm_gemm_bf16 (kernels/bf16.c) against a reference written here: the operands rounded to
// bfloat16 by frexp / rint / ldexp (an implementation independent of base/'s bit-level one),
// products and sums in double. Both paths run: oneDNN where the CPU has a bf16 matmul, and the
// rounded-operand sgemm (SLM_BF16_GEMM=sgemm, the path of CPUs without bf16 instructions).
//
// The bound, per output element c = sum_k a_k b_k (+ c0 when accumulating), a_k and b_k bf16:
// a product of two bf16 values has at most 8 + 8 = 16 significant bits, so it is exact in fp32
// (24 bits), barring underflow (none here: |inputs| > 1e-6). What remains is the fp32 summation of
// n = K terms (K + 1 with c0), in whatever order and blocking the GEMM uses: for any summation
// tree, |c_computed - c| <= gamma_(n-1) * sum |terms|, gamma_m = m u / (1 - m u) (Higham,
// "Accuracy and Stability of Numerical Algorithms", 2nd ed., 4.2). u = 2^-23 rather than RN's
// 2^-24 covers any faithful rounding of each addition (AMX's and AVX512-BF16's accumulation
// included), so the bound holds on every x86-64 this runs on. A GEMM that skipped the rounding
// (a plain fp32 GEMM) misses it by far: its inputs differ from the bf16 ones by up to 2^-9
// relative, which test_rounding_matters checks is visible at these sizes.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "test.h"

static slm_rng rng_;

// Round to the nearest bfloat16 (8 significant bits), ties to even: rint rounds half to even in
// the default rounding mode. Normal numbers only (the inputs here are).
static double bf16_ref(float x) {
    if (x == 0.0f) return 0.0;
    int e;
    double m = frexp((double)x, &e); // x = m 2^e, 0.5 <= |m| < 1
    return ldexp(rint(ldexp(m, 8)), e - 8);
}

static float *randn(int64_t n) {
    float *x = slm_xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        float v = slm_rng_normal(&rng_);
        x[i] = fabsf(v) < 1e-6f ? 1e-6f : v;
    }
    return x;
}

typedef struct shape {
    int64_t M, N, K, pad; // pad: extra columns in every stored row (leading dimension > cols)
} shape;

// The worst ratio |c - ref| / bound over C, for one call of slm_gemm_bf16.
static double check_one(const shape *s, bool ta, bool tb, bool acc) {
    int64_t M = s->M, N = s->N, K = s->K;
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + s->pad, ldb = bc + s->pad, ldc = N + s->pad;
    float *A = randn(ar * lda), *B = randn(br * ldb), *C0 = randn(M * ldc);
    float *C = slm_xmalloc((size_t)(M * ldc) * sizeof(float));
    memcpy(C, C0, (size_t)(M * ldc) * sizeof(float));
    if (!acc) // poisoned: a result that is not written shows up as NaN
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = NAN;
    slm_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc);
    const double u = ldexp(1.0, -23);
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double a = bf16_ref(ta ? A[k * lda + i] : A[i * lda + k]);
                double b = bf16_ref(tb ? B[j * ldb + k] : B[k * ldb + j]);
                ref += a * b;
                mag += fabs(a * b);
            }
            int64_t n = K;
            if (acc) {
                ref += C0[i * ldc + j];
                mag += fabs(C0[i * ldc + j]);
                n++;
            }
            double gamma = (double)(n - 1) * u / (1 - (double)(n - 1) * u);
            // the final value is an fp32: allow its own rounding too (u |ref|)
            double bound = gamma * mag + u * fabs(ref) + 1e-300;
            double err = fabs((double)C[i * ldc + j] - ref);
            double r = isnan(err) ? INFINITY : err / bound;
            if (r > worst) worst = r;
        }
    // the padding columns of C are never written
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ldc; j++)
            if (memcmp(&C[i * ldc + j], &C0[i * ldc + j], sizeof(float)) != 0 && !acc)
                worst = INFINITY;
    free(A);
    free(B);
    free(C0);
    free(C);
    return worst;
}

static const shape shapes[] = {{1, 1, 1, 0},     {7, 5, 3, 0},      {33, 17, 65, 3},
                               {64, 96, 257, 0}, {130, 64, 512, 5}, {5, 300, 96, 0}};

static void sweep(const char *path) {
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int t = 0; t < 8; t++) {
            bool ta = t & 1, tb = t & 2, acc = t & 4;
            double w = check_one(&shapes[si], ta, tb, acc);
            CHECK_MSG(w <= 1.0, "%s: %lldx%lldx%lld ta %d tb %d acc %d: error %.3g x the bound",
                      path, (long long)shapes[si].M, (long long)shapes[si].N,
                      (long long)shapes[si].K, ta, tb, acc, w);
        }
}

static void test_default_path(void) {
    unsetenv("SLM_BF16_GEMM");
    fprintf(stderr, "oneDNN ISA: %s\n", slm_bf16_gemm_isa());
    sweep("default");
}

static void test_sgemm_path(void) {
    setenv("SLM_BF16_GEMM", "sgemm", 1);
    sweep("sgemm");
    unsetenv("SLM_BF16_GEMM");
}

// Ties round to even, in both paths: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (-> 1),
// 1 + 3 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (-> 1 + 2^-6).
static void test_ties(void) {
    for (int p = 0; p < 2; p++) {
        if (p) setenv("SLM_BF16_GEMM", "sgemm", 1);
        float a[2] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f}, b[2] = {1.0f, 0.0f}, c = NAN;
        slm_gemm_bf16(false, false, 1, 1, 2, a, 2, b, 1, false, &c, 1);
        CHECK_MSG(c == 1.0f, "path %d: bf16(1 + 2^-8) -> %.9g, want 1", p, c);
        b[0] = 0.0f, b[1] = 1.0f;
        slm_gemm_bf16(false, false, 1, 1, 2, a, 2, b, 1, false, &c, 1);
        CHECK_MSG(c == 1.0f + 0x1p-6f, "path %d: bf16(1 + 3 2^-8) -> %.9g, want 1 + 2^-6", p, c);
        unsetenv("SLM_BF16_GEMM");
    }
}

// The rounding is visible: an fp32 GEMM of the same inputs is off the bf16 result by far more
// than the bound, so the sweep above could not pass without rounding.
static void test_rounding_matters(void) {
    int64_t M = 16, N = 16, K = 256;
    float *A = randn(M * K), *B = randn(K * N), *C = slm_xmalloc((size_t)(M * N) * sizeof(float));
    slm_gemm_bf16(false, false, M, N, K, A, K, B, N, false, C, N);
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double exact = 0;
            for (int64_t k = 0; k < K; k++)
                exact += (double)A[i * K + k] * B[k * N + j];
            double d = fabs(C[i * N + j] - exact);
            if (d > worst) worst = d;
        }
    // fp32 would agree to ~K 2^-24 sqrt(K) ~ 2e-4 absolute; bf16 inputs move it by ~2^-9 sqrt(K)
    CHECK_MSG(worst > 1e-2, "bf16 result within %.3g of the unrounded product", worst);
    free(A);
    free(B);
    free(C);
}

// Same inputs, same thread count: bitwise the same result (both paths).
static void test_repeatable(void) {
    int64_t M = 96, N = 80, K = 300;
    float *A = randn(M * K), *B = randn(N * K);
    float *C1 = slm_xmalloc((size_t)(M * N) * sizeof(float));
    float *C2 = slm_xmalloc((size_t)(M * N) * sizeof(float));
    for (int p = 0; p < 2; p++) {
        if (p) setenv("SLM_BF16_GEMM", "sgemm", 1);
        slm_gemm_bf16(false, true, M, N, K, A, K, B, K, false, C1, N);
        slm_gemm_bf16(false, true, M, N, K, A, K, B, K, false, C2, N);
        CHECK_MSG(memcmp(C1, C2, (size_t)(M * N) * sizeof(float)) == 0, "path %d differs", p);
        unsetenv("SLM_BF16_GEMM");
    }
    free(A);
    free(B);
    free(C1);
    free(C2);
}

static void test_peak(void) {
    double g = slm_bf16_gemm_peak_gflops(256, 2);
    fprintf(stderr, "bf16 GEMM 256^3: %.1f GFLOP/s (not asserted)\n", g);
    CHECK(g > 0 && isfinite(g));
}

int main(void) {
    slm_rng_seed(&rng_, 4321);
    RUN(test_ties);
    RUN(test_default_path);
    RUN(test_sgemm_path);
    RUN(test_rounding_matters);
    RUN(test_repeatable);
    RUN(test_peak);
    return TEST_SUMMARY();
}
