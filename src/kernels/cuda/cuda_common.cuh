// Shared by the CUDA kernel files of kernels/cuda/ (issue 22): error plumbing and launch helpers.
// The C interface (kernels.h, "CUDA backend") returns int: 0 on success, a cudaError_t value, or
// SLM_CUDA_CUBLAS_BASE + a cublasStatus_t; slm_cuda_strerror names either. Every launch is
// checked with cudaGetLastError so a bad configuration is reported at its call, not later.
#ifndef SLM_CUDA_COMMON_CUH
#define SLM_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

extern "C" {
#include "kernels/kernels.h" // the C interface: the definitions here are checked against it
}

#define SLM_CUDA_CUBLAS_BASE 100000

#define SLM_CUDA_TRY(call)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return (int)e_;                                                     \
    } while (0)

// After a <<<...>>> launch: the launch's own error (bad grid, no device), or 0.
#define SLM_CUDA_LAUNCHED() return (int)cudaGetLastError()

static inline cudaStream_t slm_cuda_stream_(void *s) {
    return (cudaStream_t)s;
}

// Blocks of `threads` covering n elements (at least 1, at most 2^31 - 1).
static inline unsigned slm_cuda_blocks_(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 2147483647) b = 2147483647;
    return (unsigned)b;
}

// Grid-stride loop index over [0, n).
#define SLM_CUDA_FOR(i, n)                                                                         \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)blockDim.x * gridDim.x)

#endif
