// Row- and buffer-wise reductions of the CUDA backend (issue 22): RMSNorm forward / backward, the
// fused cross-entropy, the sum of squares (gradient norm) and AdamW. Deterministic by
// construction: every sum is a fixed tree over a fixed partition (block size and grid size
// depend only on the shapes), no atomics, so a run repeats bit for bit on the same GPU.
#include "cuda_common.cuh"

enum { RED_THREADS = 256 };

// Sum of v over the block (RED_THREADS threads), the same tree every time; every thread gets it.
template <typename T> __device__ T block_sum(T v, T *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_max(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// One block per row: rstd = 1 / sqrt(mean(x^2) + eps); out = x * rstd * w.
__global__ void k_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int C,
                              float eps) {
    __shared__ float sh[RED_THREADS];
    const float *x = inp + (int64_t)blockIdx.x * C;
    float s = 0;
    for (int c = threadIdx.x; c < C; c += RED_THREADS)
        s += x[c] * x[c];
    float r = 1.0f / sqrtf(block_sum(s, sh) / (float)C + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    float *o = out + (int64_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += RED_THREADS)
        o[c] = x[c] * r * w[c];
}

// One block per row: dinp += rstd * (w dout) - x * rstd^3 * mean_c(w dout x).
__global__ void k_rmsnorm_bwd_dx(float *dinp, const float *dout, const float *inp, const float *w,
                                 const float *rstd, int C) {
    __shared__ float sh[RED_THREADS];
    int64_t off = (int64_t)blockIdx.x * C;
    float r = rstd[blockIdx.x], s = 0;
    for (int c = threadIdx.x; c < C; c += RED_THREADS)
        s += w[c] * dout[off + c] * inp[off + c];
    float m = block_sum(s, sh) / (float)C;
    for (int c = threadIdx.x; c < C; c += RED_THREADS)
        dinp[off + c] += r * w[c] * dout[off + c] - inp[off + c] * r * r * r * m;
}

// One thread per column: dw[c] += sum over rows n (in order) of dout * x * rstd.
__global__ void k_rmsnorm_bwd_dw(float *dw, const float *dout, const float *inp, const float *rstd,
                                 int64_t N, int C) {
    SLM_CUDA_FOR(c, (int64_t)C) {
        float s = 0;
        for (int64_t n = 0; n < N; n++)
            s += dout[n * C + c] * inp[n * C + c] * rstd[n];
        dw[c] += s;
    }
}

// One block per row of logits [N, V]: loss = logsumexp - x[t]; row = (softmax - onehot) dscale.
__global__ void k_xent(float *logits, float *losses, const int32_t *targets, int64_t V,
                       float dscale) {
    __shared__ float sh[RED_THREADS];
    float *x = logits + (int64_t)blockIdx.x * V;
    int32_t t = targets[blockIdx.x];
    if (t < 0) { // the ignore index: loss 0, zero gradient
        if (threadIdx.x == 0) losses[blockIdx.x] = 0;
        if (dscale != 0)
            for (int64_t v = threadIdx.x; v < V; v += RED_THREADS)
                x[v] = 0;
        return;
    }
    float mx = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += RED_THREADS)
        mx = fmaxf(mx, x[v]);
    mx = block_max(mx, sh);
    float s = 0;
    for (int64_t v = threadIdx.x; v < V; v += RED_THREADS)
        s += expf(x[v] - mx);
    s = block_sum(s, sh);
    float lse = mx + logf(s);
    if (threadIdx.x == 0) losses[blockIdx.x] = lse - x[t];
    __syncthreads(); // x[t] read before it is overwritten
    if (dscale == 0) return;
    for (int64_t v = threadIdx.x; v < V; v += RED_THREADS)
        x[v] = (expf(x[v] - lse) - (v == t ? 1.0f : 0.0f)) * dscale;
}

// Pass 1 of the sum (of squares when SQ): block b sums its grid-stride share in double.
template <bool SQ> __global__ void k_sumsq_part(double *part, const float *x, int64_t n) {
    __shared__ double sh[RED_THREADS];
    double s = 0;
    SLM_CUDA_FOR(i, n) s += SQ ? (double)x[i] * x[i] : (double)x[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// Pass 2: one block adds the nb partial sums (fixed order) into *out.
__global__ void k_sumsq_final(double *out, const double *part, int nb) {
    __shared__ double sh[RED_THREADS];
    double s = 0;
    for (int i = threadIdx.x; i < nb; i += RED_THREADS)
        s += part[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) *out = s;
}

// torch.optim.AdamW's update, written as optim/adamw.c's adamw_segment (the same float
// expressions, so the two differ only by nvcc's FMA contraction): decoupled decay folded into
// decay_mul = 1 - lr wd, step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t); optionally the
// bf16 copy of the new parameters (the compute weights).
__global__ void k_adamw(float *p, const float *g, float *m, float *v, __nv_bfloat16 *p_bf16,
                        int64_t n, float b1, float b2, float eps, float decay_mul, float step_size,
                        float bc2_sqrt) {
    SLM_CUDA_FOR(i, n) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        float pi = p[i] * decay_mul - step_size * (mi / denom);
        p[i] = pi;
        if (p_bf16) p_bf16[i] = __float2bfloat16_rn(pi);
    }
}

// *out (device double) = sum of x[i]^2 (or of x[i]); the grid is a function of n only
// (determinism).
template <bool SQ> static int sum_impl(double *out, const float *x, int64_t n, void *stream) {
    cudaStream_t s = slm_cuda_stream_(stream);
    int nb = (int)slm_cuda_blocks_(n, RED_THREADS);
    if (nb > 1024) nb = 1024;
    double *part = NULL;
    SLM_CUDA_TRY(cudaMallocAsync((void **)&part, (size_t)nb * sizeof(double), s));
    k_sumsq_part<SQ><<<(unsigned)nb, RED_THREADS, 0, s>>>(part, x, n);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        k_sumsq_final<<<1, RED_THREADS, 0, s>>>(out, part, nb);
        e = cudaGetLastError();
    }
    cudaError_t f = cudaFreeAsync(part, s);
    return (int)(e != cudaSuccess ? e : f);
}

extern "C" {

int slm_cuda_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                         int C, float eps, void *stream) {
    if (N <= 0) return 0;
    k_rmsnorm_fwd<<<(unsigned)N, RED_THREADS, 0, slm_cuda_stream_(stream)>>>(out, rstd, inp, w, C,
                                                                             eps);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int64_t N, int C, void *stream) {
    if (N <= 0) return 0;
    cudaStream_t s = slm_cuda_stream_(stream);
    k_rmsnorm_bwd_dx<<<(unsigned)N, RED_THREADS, 0, s>>>(dinp, dout, inp, w, rstd, C);
    SLM_CUDA_TRY(cudaGetLastError());
    k_rmsnorm_bwd_dw<<<slm_cuda_blocks_(C, 128), 128, 0, s>>>(dw, dout, inp, rstd, N, C);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_cross_entropy(float *logits, float *losses, const int32_t *targets, int64_t N,
                           int64_t V, float dscale, void *stream) {
    if (N <= 0) return 0;
    k_xent<<<(unsigned)N, RED_THREADS, 0, slm_cuda_stream_(stream)>>>(logits, losses, targets, V,
                                                                      dscale);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_sumsq(double *out, const float *x, int64_t n, void *stream) {
    return sum_impl<true>(out, x, n, stream);
}

int slm_cuda_sum(double *out, const float *x, int64_t n, void *stream) {
    return sum_impl<false>(out, x, n, stream);
}

int slm_cuda_adamw_segment(float *p, const float *g, float *m, float *v, int64_t n, float b1,
                           float b2, float eps, float decay_mul, float step_size, float bc2_sqrt,
                           void *stream) {
    if (n <= 0) return 0;
    k_adamw<<<slm_cuda_blocks_(n, 256), 256, 0, slm_cuda_stream_(stream)>>>(
        p, g, m, v, NULL, n, b1, b2, eps, decay_mul, step_size, bc2_sqrt);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_adamw(float *p, const float *g, float *m, float *v, void *p_bf16, int64_t n, float lr,
                   float beta1, float beta2, float eps, float wd, int64_t t, void *stream) {
    if (n <= 0) return 0;
    double bc1 = 1.0 - pow((double)beta1, (double)t), bc2 = 1.0 - pow((double)beta2, (double)t);
    k_adamw<<<slm_cuda_blocks_(n, 256), 256, 0, slm_cuda_stream_(stream)>>>(
        p, g, m, v, (__nv_bfloat16 *)p_bf16, n, beta1, beta2, eps, 1.0f - lr * wd,
        (float)((double)lr / bc1), (float)sqrt(bc2));
    SLM_CUDA_LAUNCHED();
}

} // extern "C"
