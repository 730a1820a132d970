// kernels_internal: helpers shared by the CPU kernel files only (not part of the public API).
// Everything here is `static inline` plain C written so that GCC auto-vectorizes the loops that
// call it (no intrinsics, so the same code builds under ASan/UBSan without -march flags).
#ifndef SLM_KERNELS_INTERNAL_H
#define SLM_KERNELS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

// Called by every kernel that uses BLAS, outside parallel regions, before its BLAS calls.
// Once per process (thread-safe): where OpenBLAS fell back to its generic SSE3 kernels on a CPU
// it does not know, switches it to the AVX-512 / AVX2 ones (see blas.c). Every call: keeps
// OpenBLAS single-threaded (the kernels split work over the OpenMP threads themselves).
void slm_kernels_blas_setup(void);

// C[M, N] = op(A)[M, K] op(B)[K, N] + beta C, row-major fp32, op = transpose when ta / tb; the
// threaded OpenBLAS sgemm of blas.c (slices per OpenMP thread, deterministic for a fixed thread
// count). Used by bf16.c's fallback path.
void slm_sgemm_rowmajor(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float beta, float *Cm,
                        int64_t ldc);

// The best rate in GFLOP/s of `reps` timed calls gemm(n, a, b, c) computing c = a b^T on n x n
// fp32 matrices of fixed non-zero values (after one untimed warm-up call); n <= 0: 1024, reps
// <= 0: 3. The sgemm and bf16 peaks of kernels.h.
double slm_square_gemm_peak(int n, int reps,
                            void (*gemm)(int n, const float *a, const float *b, float *c));

// exp(x) in fp32, max relative error ~2e-7 (about 2 ulp); exactly 0 below ln(FLT_MIN) and
// saturating at exp(88) above 88 (callers pass arguments <= 0 after a max subtraction, or
// -gate in sigmoid, where exp(88) instead of inf changes nothing); NaN in, NaN out.
// Method (Cephes expf): x = n ln2 + r with n = rint(x / ln2), |r| <= ln2/2, ln2 split in a
// high and a low part (Cody-Waite) so r is exact; exp(r) by a degree-5 minimax polynomial;
// 2^n assembled in the exponent bits. Branch-free so loops over it vectorize (8 lanes on AVX2).
static inline float slm_expf_fast(float x) {
    const float hi = 88.0f, lo = -87.3365447504f; // hi keeps n <= 127 (no inf)
    // Written so a NaN argument clamps to `hi` (comparisons with NaN are false) and the integer
    // exponent below stays in range; the NaN itself is returned at the end.
    float xc = x < hi ? x : hi;
    xc = xc > lo ? xc : lo;
    // round to nearest by the 1.5 * 2^23 trick (floorf would block vectorization without
    // -ffast-math; |xc / ln2| < 128 keeps it exact). Needs strict FP semantics (no -ffast-math).
    const float magic = 12582912.0f;
    float n = (xc * 1.44269504088896341f + magic) - magic;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, sizeof s);
    float y = p * s;
    return x < lo ? 0.0f : (x == x ? y : x);
}

#endif
