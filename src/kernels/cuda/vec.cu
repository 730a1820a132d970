// Vector kernels of the CUDA backend (issue 22): the device twins of kernels/vec.c and of the
// elementwise ops the device layer (device.h) needs: axpy, scale, fill, add, bf16 rounding and
// accumulation, counter-based dropout, row softmax. Elementwise kernels are exact twins up to
// nvcc's FMA contraction (axpy's a * x + y may round once instead of twice); the row softmax sums
// with a fixed tree (deterministic, not the CPU's serial order).
#include "cuda_common.cuh"

enum { VEC_THREADS = 256 };

__global__ void k_axpy(float *y, float a, const float *x, int64_t n) {
    SLM_CUDA_FOR(i, n) y[i] += a * x[i];
}

__global__ void k_scale(float *x, float s, int64_t n) {
    SLM_CUDA_FOR(i, n) x[i] *= s;
}

__global__ void k_fill(float *x, float v, int64_t n) {
    SLM_CUDA_FOR(i, n) x[i] = v;
}

__global__ void k_add(float *out, const float *a, const float *b, int64_t n) {
    SLM_CUDA_FOR(i, n) out[i] = a[i] + b[i];
}

__global__ void k_round_bf16(float *x, int64_t n) {
    SLM_CUDA_FOR(i, n) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

__global__ void k_bf16_acc(float *acc, const __nv_bfloat16 *x, int64_t n) {
    SLM_CUDA_FOR(i, n) acc[i] += __bfloat162float(x[i]);
}

// base/rng.c's slm_mix64 (SplitMix64's finalizer), the same constants.
__device__ uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// One thread per group of 4 elements (kernels.h slm_dropout_apply's mask).
__global__ void k_dropout(uint64_t key, uint32_t thr, float scale, const float *x, float *y,
                          float *acc, int64_t n) {
    int64_t ng = (n + 3) / 4;
    SLM_CUDA_FOR(g, ng) {
        uint64_t h = mix64(key ^ (uint64_t)g);
        for (int64_t i = 4 * g, k = 0; k < 4 && i < n; i++, k++) {
            bool kept = ((h >> (16 * k)) & 0xffffu) >= thr;
            if (y)
                y[i] = kept ? x[i] * scale : 0.0f;
            else if (kept)
                acc[i] += x[i] * scale;
        }
    }
}

// One block per row: scale, max, exp, sum (double, fixed tree), normalise.
__global__ void k_softmax_rows(float *s, int64_t n, float scale) {
    __shared__ float shm[VEC_THREADS];
    __shared__ double shs[VEC_THREADS];
    float *row = s + (int64_t)blockIdx.x * n;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += VEC_THREADS) {
        float v = row[j] * scale;
        row[j] = v;
        mx = fmaxf(mx, v);
    }
    shm[threadIdx.x] = mx;
    __syncthreads();
    for (int k = VEC_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) shm[threadIdx.x] = fmaxf(shm[threadIdx.x], shm[threadIdx.x + k]);
        __syncthreads();
    }
    mx = shm[0];
    double sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += VEC_THREADS) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    shs[threadIdx.x] = sum;
    __syncthreads();
    for (int k = VEC_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) shs[threadIdx.x] += shs[threadIdx.x + k];
        __syncthreads();
    }
    float inv = (float)(1.0 / shs[0]);
    for (int64_t j = threadIdx.x; j < n; j += VEC_THREADS)
        row[j] *= inv;
}

#define GRID(n) slm_cuda_blocks_((n), VEC_THREADS), VEC_THREADS, 0, slm_cuda_stream_(stream)

extern "C" {

int slm_cuda_axpy(float *y, float a, const float *x, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_axpy<<<GRID(n)>>>(y, a, x, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_scale(float *x, float s, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_scale<<<GRID(n)>>>(x, s, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_fill(float *x, float v, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_fill<<<GRID(n)>>>(x, v, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_add(float *out, const float *a, const float *b, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_add<<<GRID(n)>>>(out, a, b, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_round_bf16(float *x, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_round_bf16<<<GRID(n)>>>(x, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_bf16_accumulate(float *acc, const void *x, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_bf16_acc<<<GRID(n)>>>(acc, (const __nv_bfloat16 *)x, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_dropout(uint64_t key, uint32_t thr, float scale, const float *x, float *y, float *acc,
                     int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_dropout<<<GRID((n + 3) / 4)>>>(key, thr, scale, x, y, acc, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_softmax_rows(float *s, int64_t rows, int64_t n, float scale, void *stream) {
    if (rows <= 0 || n <= 0) return 0;
    k_softmax_rows<<<(unsigned)rows, VEC_THREADS, 0, slm_cuda_stream_(stream)>>>(s, n, scale);
    SLM_CUDA_LAUNCHED();
}

} // extern "C"
