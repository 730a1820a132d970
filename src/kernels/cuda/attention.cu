// Causal attention with GQA, plain or over packed samples, forward and backward on the GPU
// (issue 22): the correctness-first version, one warp per query row (forward, dQ) or key row
// (dK, dV), fp32 on CUDA cores. Same algorithm and layouts as kernels/attention.c (online softmax
// forward saving lse; FlashAttention-2's recomputation backward with D = rowsum(dO * O)), same
// masks: query t sees keys [0, t], or [t - pos[t], t] with packed positions. Deterministic without
// atomics: each output row is owned by one warp that walks its keys (or queries) in order, and a
// dot product is a fixed xor-shuffle tree over the 32 lanes. dK / dV are computed by their own
// warps looping over the queries that see the key, so no two warps write one element.
// What this leaves for later (issue 22): tensor-core tiles (mma.sync / wgmma) or cuDNN's fused
// attention; bf16 inputs. The tests check it against the CPU kernels.
#include "cuda_common.cuh"

enum { ATT_MAXD = 256, ATT_PER_LANE = ATT_MAXD / 32, ATT_WARPS = 4 };

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The first key query t of batch row b sees (0 without packing).
__device__ __forceinline__ int first_key(const int32_t *pos, int b, int T, int t) {
    return pos ? t - pos[(int64_t)b * T + t] : 0;
}

// Loads row x[0 .. D) into this lane's slots (dims lane, lane + 32, ...; 0 past D).
__device__ __forceinline__ void load_row(float *r, const float *x, int D, int lane) {
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; i++) {
        int d = lane + 32 * i;
        r[i] = d < D ? x[d] : 0.0f;
    }
}

__device__ __forceinline__ float dot_row(const float *r, const float *x, int D, int lane) {
    float s = 0;
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < D) s += r[i] * x[d];
    }
    return warp_sum(s);
}

// One warp per (b, t, h) query row.
__global__ void k_att_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                          const int32_t *pos, int B, int T, int H, int KV, int D, float scale) {
    int64_t row = (int64_t)blockIdx.x * ATT_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (int64_t)B * T * H) return;
    int h = (int)(row % H), t = (int)(row / H % T), b = (int)(row / ((int64_t)H * T));
    int kh = h / (H / KV);
    float qr[ATT_PER_LANE], o[ATT_PER_LANE] = {0};
    load_row(qr, q + row * D, D, lane);
    float m = -INFINITY, l = 0;
    for (int j = first_key(pos, b, T, t); j <= t; j++) {
        const float *kj = k + (((int64_t)b * T + j) * KV + kh) * D;
        const float *vj = v + (((int64_t)b * T + j) * KV + kh) * D;
        float s = dot_row(qr, kj, D, lane) * scale;
        float mn = fmaxf(m, s), c = expf(m - mn), p = expf(s - mn);
        l = l * c + p;
#pragma unroll
        for (int i = 0; i < ATT_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) o[i] = o[i] * c + p * vj[d];
        }
        m = mn;
    }
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < D) out[row * D + d] = o[i] / l;
    }
    if (lane == 0) lse[((int64_t)b * H + h) * T + t] = m + logf(l);
}

// dq for one query row, and D_r = rowsum(dO * O) into dd [B, H, T] (used by k_att_dkv).
__global__ void k_att_dq(float *dq, float *dd, const float *dout, const float *q, const float *k,
                         const float *v, const float *out, const float *lse, const int32_t *pos,
                         int B, int T, int H, int KV, int D, float scale) {
    int64_t row = (int64_t)blockIdx.x * ATT_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (int64_t)B * T * H) return;
    int h = (int)(row % H), t = (int)(row / H % T), b = (int)(row / ((int64_t)H * T));
    int kh = h / (H / KV);
    float qr[ATT_PER_LANE], dor[ATT_PER_LANE], acc[ATT_PER_LANE] = {0};
    load_row(qr, q + row * D, D, lane);
    load_row(dor, dout + row * D, D, lane);
    float Dr = dot_row(dor, out + row * D, D, lane);
    float L = lse[((int64_t)b * H + h) * T + t];
    if (lane == 0) dd[((int64_t)b * H + h) * T + t] = Dr;
    for (int j = first_key(pos, b, T, t); j <= t; j++) {
        const float *kj = k + (((int64_t)b * T + j) * KV + kh) * D;
        const float *vj = v + (((int64_t)b * T + j) * KV + kh) * D;
        float p = expf(dot_row(qr, kj, D, lane) * scale - L);
        float ds = p * (dot_row(dor, vj, D, lane) - Dr);
#pragma unroll
        for (int i = 0; i < ATT_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) acc[i] += scale * ds * kj[d];
        }
    }
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < D) dq[row * D + d] = acc[i];
    }
}

// dk, dv for one key row (b, j, kv head): over the group's query heads and the queries that see
// key j (t >= j while t's sample starts at or before j), in order.
__global__ void k_att_dkv(float *dk, float *dv, const float *dd, const float *dout, const float *q,
                          const float *k, const float *v, const float *lse, const int32_t *pos,
                          int B, int T, int H, int KV, int D, float scale) {
    int64_t row = (int64_t)blockIdx.x * ATT_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (int64_t)B * T * KV) return;
    int kh = (int)(row % KV), j = (int)(row / KV % T), b = (int)(row / ((int64_t)KV * T));
    int G = H / KV;
    float kr[ATT_PER_LANE], vr[ATT_PER_LANE], ak[ATT_PER_LANE] = {0}, av[ATT_PER_LANE] = {0};
    load_row(kr, k + row * D, D, lane);
    load_row(vr, v + row * D, D, lane);
    for (int g = 0; g < G; g++) {
        int h = kh * G + g;
        for (int t = j; t < T && first_key(pos, b, T, t) <= j; t++) {
            int64_t qrow = ((int64_t)b * T + t) * H + h;
            const float *qt = q + qrow * D, *dot = dout + qrow * D;
            float L = lse[((int64_t)b * H + h) * T + t], Dr = dd[((int64_t)b * H + h) * T + t];
            float p = expf(dot_row(kr, qt, D, lane) * scale - L);
            float ds = p * (dot_row(vr, dot, D, lane) - Dr);
#pragma unroll
            for (int i = 0; i < ATT_PER_LANE; i++) {
                int d = lane + 32 * i;
                if (d < D) {
                    av[i] += p * dot[d];
                    ak[i] += scale * ds * qt[d];
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < D) {
            dk[row * D + d] = ak[i];
            dv[row * D + d] = av[i];
        }
    }
}

static unsigned att_blocks(int64_t rows) {
    return slm_cuda_blocks_(rows, ATT_WARPS);
}

extern "C" {

int slm_cuda_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *pos, int B, int T, int H, int KV, int D, void *stream) {
    if (D > ATT_MAXD || KV <= 0 || H % KV != 0) return (int)cudaErrorInvalidValue;
    int64_t rows = (int64_t)B * T * H;
    if (rows <= 0) return 0;
    k_att_fwd<<<att_blocks(rows), 32 * ATT_WARPS, 0, slm_cuda_stream_(stream)>>>(
        out, lse, q, k, v, pos, B, T, H, KV, D, 1.0f / sqrtf((float)D));
    SLM_CUDA_LAUNCHED();
}

int slm_cuda_attention_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *q, const float *k, const float *v, const float *out,
                           const float *lse, const int32_t *pos, int B, int T, int H, int KV, int D,
                           void *stream) {
    if (D > ATT_MAXD || KV <= 0 || H % KV != 0) return (int)cudaErrorInvalidValue;
    int64_t rows = (int64_t)B * T * H, krows = (int64_t)B * T * KV;
    if (rows <= 0) return 0;
    float scale = 1.0f / sqrtf((float)D);
    cudaStream_t s = slm_cuda_stream_(stream);
    k_att_dq<<<att_blocks(rows), 32 * ATT_WARPS, 0, s>>>(dq, scratch, dout, q, k, v, out, lse, pos,
                                                         B, T, H, KV, D, scale);
    SLM_CUDA_TRY(cudaGetLastError());
    k_att_dkv<<<att_blocks(krows), 32 * ATT_WARPS, 0, s>>>(dk, dv, scratch, dout, q, k, v, lse, pos,
                                                           B, T, H, KV, D, scale);
    SLM_CUDA_LAUNCHED();
}

} // extern "C"
