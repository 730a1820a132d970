// Elementwise and gather kernels of the CUDA backend (issue 22), each the device twin of the CPU
// kernel of the same name in kernels.h, on fp32 buffers unless the name says bf16: casts, SwiGLU,
// RoPE (HF rotate-half; positions from pos0 or per token), embedding forward / backward. All are
// deterministic: no atomics; the embedding backward gives each column to one thread, which adds
// the rows of its tokens in token order (the CPU kernel's order).
#include "cuda_common.cuh"

__global__ void k_f32_to_bf16(__nv_bfloat16 *y, const float *x, int64_t n) {
    SLM_CUDA_FOR(i, n) y[i] = __float2bfloat16_rn(x[i]); // round to nearest even, NaN kept
}

__global__ void k_bf16_to_f32(float *y, const __nv_bfloat16 *x, int64_t n) {
    SLM_CUDA_FOR(i, n) y[i] = __bfloat162float(x[i]);
}

__global__ void k_swiglu_fwd(float *h, const float *gate, const float *up, int64_t n) {
    SLM_CUDA_FOR(i, n) {
        float g = gate[i];
        h[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__global__ void k_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate,
                             const float *up, int64_t n) {
    SLM_CUDA_FOR(i, n) {
        float g = gate[i], s = 1.0f / (1.0f + expf(-g)), silu = g * s;
        dup[i] = dh[i] * silu;
        dgate[i] = dh[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
    }
}

// x [B, T, nh, D]; one thread per (row, head, i < D/2) pair of the rotate-half layout.
__global__ void k_rope(float *x, const float *cos_t, const float *sin_t, int64_t rows, int nh,
                       int D, int T, int pos0, const int32_t *pos, float sign) {
    int half = D / 2;
    int64_t n = rows * nh * half;
    SLM_CUDA_FOR(idx, n) {
        int64_t r = idx / ((int64_t)nh * half);
        int rem = (int)(idx % ((int64_t)nh * half));
        int h = rem / half, i = rem % half;
        int p = pos ? pos[r] : pos0 + (int)(r % T);
        float c = cos_t[(int64_t)p * half + i], s = sign * sin_t[(int64_t)p * half + i];
        float *v = x + (r * nh + h) * D;
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

__global__ void k_embedding_fwd(float *out, const int32_t *tokens, const float *table, int64_t N,
                                int C) {
    SLM_CUDA_FOR(idx, N * C) {
        int64_t n = idx / C;
        int c = (int)(idx % C);
        out[idx] = table[(int64_t)tokens[n] * C + c];
    }
}

// One thread per column c: dtable[tok[n], c] += dout[n, c] for n = 0, 1, ... in order.
__global__ void k_embedding_bwd(float *dtable, const int32_t *tokens, const float *dout, int64_t N,
                                int C) {
    SLM_CUDA_FOR(c, (int64_t)C) {
        for (int64_t n = 0; n < N; n++)
            dtable[(int64_t)tokens[n] * C + c] += dout[n * C + c];
    }
}

extern "C" {

int slm_cuda_f32_to_bf16(void *y, const float *x, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_f32_to_bf16<<<slm_cuda_blocks_(n, 256), 256, 0, slm_cuda_stream_(stream)>>>(
        (__nv_bfloat16 *)y, x, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_bf16_to_f32(float *y, const void *x, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_bf16_to_f32<<<slm_cuda_blocks_(n, 256), 256, 0, slm_cuda_stream_(stream)>>>(
        y, (const __nv_bfloat16 *)x, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_swiglu_fwd(float *h, const float *gate, const float *up, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_swiglu_fwd<<<slm_cuda_blocks_(n, 256), 256, 0, slm_cuda_stream_(stream)>>>(h, gate, up, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_swiglu_bwd<<<slm_cuda_blocks_(n, 256), 256, 0, slm_cuda_stream_(stream)>>>(dgate, dup, dh,
                                                                                 gate, up, n);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_rope_apply(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh,
                        int D, int pos0, const int32_t *pos, bool inverse, void *stream) {
    int64_t n = (int64_t)B * T * nh * (D / 2);
    if (n <= 0) return 0;
    k_rope<<<slm_cuda_blocks_(n, 256), 256, 0, slm_cuda_stream_(stream)>>>(
        x, cos_t, sin_t, (int64_t)B * T, nh, D, T, pos0, pos, inverse ? -1.0f : 1.0f);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_embedding_fwd(float *out, const int32_t *tokens, const float *table, int64_t N, int C,
                           void *stream) {
    if (N <= 0 || C <= 0) return 0;
    k_embedding_fwd<<<slm_cuda_blocks_(N * C, 256), 256, 0, slm_cuda_stream_(stream)>>>(
        out, tokens, table, N, C);
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_embedding_bwd(float *dtable, const int32_t *tokens, const float *dout, int64_t N,
                           int C, void *stream) {
    if (N <= 0 || C <= 0) return 0;
    k_embedding_bwd<<<slm_cuda_blocks_(C, 128), 128, 0, slm_cuda_stream_(stream)>>>(dtable, tokens,
                                                                                    dout, N, C);
    SLM_CUDA_LAUNCHED();
}

} // extern "C"
