// The dense matmuls of the model (nn.Linear without bias, forward and backward) and the sgemm
// peak measurement, all through OpenBLAS cblas_sgemm. The model calls these on [B*T, C] at
// once, so the GEMMs are large enough for OpenBLAS to run near its peak.
#include "kernels/kernels.h"

#include <cblas.h>
// openblas_config.h pulls in <complex.h>, whose macro `I` would clash with our dimension names.
#undef I
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels_internal.h"

// Threading: one pool only. OpenBLAS's own pthread pool is set to one thread and every large
// GEMM is split over the OpenMP threads here (slices of rows of C, or of columns when C is
// wide), each slice one single-threaded sgemm. Two busy-waiting pools (OpenBLAS and OpenMP) on
// the same cores slow each other down; with one pool the small kernels that run between GEMMs
// find their threads awake. OMP_NUM_THREADS / omp_set_num_threads is the only knob.
//
// CPU kernel selection: Debian's OpenBLAS is built with DYNAMIC_ARCH and picks its kernels from
// a table of known CPUs at load time. 0.3.21 does not know recent Xeons (e.g. family 6 model 207,
// Emerald Rapids) and falls back to the SSE3 "Prescott" kernels, about 2.4x slower than its
// AVX-512 SkylakeX kernels on the same machine (measured here, 1024^3 on 2 threads: 66 vs
// 160 GFLOP/s; ~150 GFLOP/s per core in CPU time). When
// the user did not choose (OPENBLAS_CORETYPE unset) and the fallback was taken on a CPU with
// AVX-512 (or AVX2 + FMA), we re-run OpenBLAS's own dispatch with OPENBLAS_CORETYPE set to
// SkylakeX (or Haswell), through its exported gotoblas_dynamic_quit/init. Both symbols are
// declared weak: with a non-DYNAMIC_ARCH OpenBLAS they are absent and nothing is changed.
// OPENBLAS_CORETYPE is left set in the environment, so child processes start on the same
// kernels. This runs at the first BLAS use, which must not race other threads' BLAS calls (the
// kernels only call BLAS from inside their own parallel regions).
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));

static pthread_once_t blas_once_ = PTHREAD_ONCE_INIT;

static void blas_setup(void) {
    openblas_set_num_threads(1);
    if (getenv("OPENBLAS_CORETYPE") || !gotoblas_dynamic_init || !gotoblas_dynamic_quit) return;
    const char *core = openblas_get_corename();
    if (!core || strcmp(core, "Prescott") != 0) return;
    __builtin_cpu_init();
    const char *want = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    if (!want) return;
    setenv("OPENBLAS_CORETYPE", want, 0);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    slm_log(SLM_LOG_DEBUG, "kernels: OpenBLAS chose Prescott kernels on this CPU; now %s",
            openblas_get_corename());
}

void slm_kernels_blas_setup(void) {
    pthread_once(&blas_once_, blas_setup);
    // Someone may have raised OpenBLAS's thread count since (openblas_set_num_threads is
    // process-wide, e.g. a tool's --threads): put it back, or every per-thread sgemm of ours
    // would fan out into OpenBLAS's own pool as well. Only outside parallel regions, where no
    // BLAS call of ours is in flight.
    if (!omp_in_parallel() && openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// C[M, N] = alpha * op(A) op(B) + beta * C, row-major, split over the OpenMP threads.
static void sgemm_par(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                      float *Cm, int64_t ldc) {
    slm_kernels_blas_setup();
    SLM_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
               ldb <= INT32_MAX && ldc <= INT32_MAX);
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    int nth = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nth <= 1 || (double)M * N * K < 2e6) {
        cblas_sgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb,
                    beta, Cm, (int)ldc);
        return;
    }
    bool split_m = M >= N;
    int64_t ext = split_m ? M : N;
    // One slice per thread, of whole 16-row/column blocks. Each slice is an independent sgemm
    // that packs the shared operand (the weights, for the row split) again, so more slices
    // would cost more packing: at 256-row slices that is ~10% of the FLOP time, at one slice
    // per thread a few %. (Measured on a quiet moment of the 2-core machine: one slice per
    // thread ran every `small` GEMM at 310-330 GFLOP/s, i.e. at the 1024^3 peak; 4 slices per
    // thread ran 250-300.) Each output element is computed by the same sgemm call shape
    // whichever thread runs it, and the slicing depends only on the sizes and the thread count,
    // so the result is fixed bit for bit.
    int64_t nblk = (ext + 15) / 16;
    int64_t nslice = nth < nblk ? nth : nblk;
#pragma omp parallel for schedule(static, 1) num_threads(nth)
    for (int64_t sl = 0; sl < nslice; sl++) {
        int64_t s0 = nblk * sl / nslice * 16, s1 = nblk * (sl + 1) / nslice * 16;
        if (s1 > ext) s1 = ext;
        if (s0 >= s1) continue;
        int64_t len = s1 - s0;
        if (split_m) {
            const float *As = ta ? A + s0 : A + s0 * lda;
            cblas_sgemm(CblasRowMajor, TA, TB, (int)len, (int)N, (int)K, alpha, As, (int)lda, B,
                        (int)ldb, beta, Cm + s0 * ldc, (int)ldc);
        } else {
            const float *Bs = tb ? B + s0 * ldb : B + s0;
            cblas_sgemm(CblasRowMajor, TA, TB, (int)M, (int)len, (int)K, alpha, A, (int)lda, Bs,
                        (int)ldb, beta, Cm + s0, (int)ldc);
        }
    }
}

void slm_sgemm_rowmajor(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float beta, float *Cm,
                        int64_t ldc) {
    sgemm_par(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, Cm, ldc);
}

void slm_matmul_fwd(float *out, const float *inp, const float *W, int64_t N, int64_t I, int64_t O,
                    bool accumulate) {
    if (N <= 0 || O <= 0) return;
    // out[N, O] = inp[N, I] @ W[O, I]^T  (+ out when accumulating)
    sgemm_par(false, true, N, O, I, 1.0f, inp, I, W, I, accumulate ? 1.0f : 0.0f, out, O);
}

void slm_matmul_bwd(float *dinp, float *dW, const float *dout, const float *inp, const float *W,
                    int64_t N, int64_t I, int64_t O) {
    if (N <= 0 || O <= 0 || I <= 0) return;
    // dinp[N, I] += dout[N, O] @ W[O, I]
    if (dinp) sgemm_par(false, false, N, I, O, 1.0f, dout, O, W, I, 1.0f, dinp, I);
    // dW[O, I] += dout[N, O]^T @ inp[N, I]
    if (dW) sgemm_par(true, false, O, I, N, 1.0f, dout, O, inp, I, 1.0f, dW, I);
}

double slm_square_gemm_peak(int n, int reps,
                            void (*gemm)(int n, const float *a, const float *b, float *c)) {
    if (n <= 0) n = 1024;
    if (reps <= 0) reps = 3;
    size_t bytes = (size_t)n * (size_t)n * sizeof(float);
    float *a = slm_xaligned(bytes), *b = slm_xaligned(bytes), *c = slm_xaligned(bytes);
    for (int64_t i = 0; i < (int64_t)n * n; i++) {
        a[i] = (float)((i * 7 + 3) % 13) * 0.01f;
        b[i] = (float)((i * 5 + 1) % 11) * 0.01f;
        c[i] = 0.0f;
    }
    // One untimed call warms up the threads, the library's buffers (and oneDNN's primitive).
    gemm(n, a, b, c);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = slm_time_s();
        gemm(n, a, b, c);
        double dt = slm_time_s() - t0;
        if (dt < best) best = dt;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * (double)n * (double)n * (double)n / best * 1e-9;
}

// Timed: the same threaded path the model's matmuls take.
static void sgemm_square(int n, const float *a, const float *b, float *c) {
    sgemm_par(false, true, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

double slm_sgemm_peak_gflops(int n, int reps) {
    return slm_square_gemm_peak(n, reps, sgemm_square);
}
