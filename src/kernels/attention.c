// Causal multi-head attention with GQA, forward and backward, block-wise with an online
// softmax: the [T, T] score matrix is never stored, only one [BQ, BK] tile per thread.
//
// Forward (online softmax, Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022): for a
// block of queries Q_i and key/value blocks j = 0, 1, ... up to the diagonal,
//   S = scale * Q_i K_j^T,  m' = max(m, rowmax S),  P = exp(S - m'),  c = exp(m - m'),
//   l = c * l + rowsum P,   O = c * O + P V_j,      m = m'
// and finally O /= l, lse = m + log l. Causal masking only touches tiles that straddle the
// diagonal; tiles entirely above it are skipped (about half the work of full attention).
//
// Backward (FlashAttention-2, Dao 2023, recomputation from lse): with P = exp(S - lse) the exact
// probabilities, dO the output gradient and D_r = sum_d dO[r, d] * O[r, d] = rowsum(dO * O)
// (which equals sum_j P_rj dP_rj, the softmax Jacobian's shared term):
//   dV_j += P^T dO_i,   dP = dO_i V_j^T,   dS = P * (dP - D),
//   dQ_i += scale * dS K_j,               dK_j += scale * dS^T Q_i.
// One task owns one (batch, kv head): it loops over key blocks j (dK_j, dV_j stay in cache) and,
// for every query head of the GQA group and every query block i at or below the diagonal,
// accumulates dQ_i. Every output element is written by exactly one task in a fixed order, so the
// result is deterministic without atomics (FlashAttention-2 on GPUs uses atomics for dQ).
//
// Implementation notes (CPU). Tile products go through single-threaded cblas_sgemm calls on
// 64 x 64 tiles with strided leading dimensions (q rows are H*D apart), parallelism comes from
// independent tasks over OpenMP threads (dynamic schedule; each task writes its own outputs, so
// results do not depend on which thread ran it). OpenBLAS 0.3.21 runs small GEMMs through
// unpacked "small-matrix" kernels, except row-major A B^T (its column-major "TN" case), which it
// packs on every call; so the one operand that would be used transposed (K_j, V_j in the
// backward, Q_i in the forward) is transposed once into a per-thread buffer and reused by every
// tile, and every tile GEMM is NN or TN. Measured on the `small` shapes this cut CPU time by
// ~12% (backward) and ~16% (forward). 64 x 64 tiles measured faster than 32 or 128.
#include "kernels/kernels.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels_internal.h"

// Tile edge (queries = keys) for head dim D: 64, halved for large D to keep the tile GEMMs
// (and the per-thread buffers) around 64*64*64.
static int attn_block(int D) {
    int blk = 64;
    while (blk > 8 && (int64_t)blk * blk * D > 64 * 64 * 64)
        blk /= 2;
    return blk;
}

// Transposes rows [n, D] with leading dimension ld into dst [D, n] (leading dimension n_ld).
// Done in 8 x 8 blocks (each block's rows stay in registers / L1 for both sides).
static void transpose_rows(float *restrict dst, int n_ld, const float *restrict src, int64_t ld,
                           int n, int D) {
    for (int j0 = 0; j0 < n; j0 += 8)
        for (int d0 = 0; d0 < D; d0 += 8) {
            int j1 = j0 + 8 < n ? j0 + 8 : n, d1 = d0 + 8 < D ? d0 + 8 : D;
            for (int d = d0; d < d1; d++)
                for (int j = j0; j < j1; j++)
                    dst[(int64_t)d * n_ld + j] = src[j * ld + d];
        }
}

// Forward tiles are computed transposed, St = scale * K_j Q_i^T [keys, queries]: the softmax
// statistics are then per column, so the running max, the exponentials and the sums are all
// plain vertical vector ops across queries, with no horizontal reductions (which cost more than
// the exponentials on 64-wide rows). O += St^T V_j is one sgemm with A transposed.
//
// Packed samples (pos != NULL, slm_attention_fwd_packed): query t of batch row b sees keys
// [t - pos[b, t], t], the causal block of its own sample. Sample starts are non-decreasing in t,
// so per key the queries that see it form a contiguous range [f, g) of the tile, tiles left of
// the query block's first sample are skipped, and a row that sees no key of a tile keeps its
// running statistics (c = 1). With pos == NULL every bound equals the plain causal one and the
// arithmetic is unchanged.
static void attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                     const int32_t *pos, int B, int T, int H, int KV, int D) {
    SLM_ASSERT(B >= 0 && T >= 0 && D > 0 && KV > 0 && H % KV == 0);
    slm_kernels_blas_setup();
    const int bq = attn_block(D), bk = attn_block(D);
    const int nrep = H / KV;
    const int nqb = (T + bq - 1) / bq;
    const int64_t ldq = (int64_t)H * D, ldkv = (int64_t)KV * D;
    const float scale = 1.0f / sqrtf((float)D);
    const int64_t ntask = (int64_t)B * H * nqb;
#pragma omp parallel
    {
        float *St = slm_xaligned((size_t)bk * bq * sizeof(float));
        float *Qt = slm_xaligned((size_t)D * bq * sizeof(float));
        // per query of the block: running max, running sum, this tile's max / sum / rescale
        float *m = slm_xmalloc((size_t)bq * 5 * sizeof(float));
        float *l = m + bq, *mt = l + bq, *lt = mt + bq, *c = lt + bq;
        // Tasks (b, h, query block) are independent (each writes its own rows of out and lse),
        // so handing them out dynamically keeps the result deterministic while balancing the
        // triangular work (query block i costs i + 1 tiles) and surviving a preempted thread.
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            int qb = (int)(task % nqb);
            int h = (int)((task / nqb) % H);
            int b = (int)(task / ((int64_t)nqb * H));
            int kvh = h / nrep;
            int q0 = qb * bq, nq = T - q0 < bq ? T - q0 : bq;
            const float *Q = q + ((int64_t)b * T + q0) * ldq + (int64_t)h * D;
            const float *K = k + (int64_t)b * T * ldkv + (int64_t)kvh * D;
            const float *Vv = v + (int64_t)b * T * ldkv + (int64_t)kvh * D;
            float *O = out + ((int64_t)b * T + q0) * ldq + (int64_t)h * D;
            for (int r = 0; r < nq; r++) {
                memset(O + r * ldq, 0, (size_t)D * sizeof(float));
                m[r] = -INFINITY;
                l[r] = 0.0f;
            }
            transpose_rows(Qt, bq, Q, ldq, nq, D); // Q_i^T [D, nq]
            int kend = q0 + nq; // keys at positions >= kend are masked for every query here
            // packed: first key of each query's sample (non-decreasing in the query)
            const int32_t *P = pos ? pos + (int64_t)b * T + q0 : NULL;
            int kstart = P ? ((q0 - P[0]) / bk) * bk : 0;
            for (int k0 = kstart; k0 < kend; k0 += bk) {
                int nk = kend - k0 < bk ? kend - k0 : bk;
                // queries r < r0 see none of these keys (k0 > q0 + r): left out of this tile;
                // unpacked, every query kept sees at least key k0, so its max is finite.
                int r0 = k0 > q0 ? k0 - q0 : 0;
                int mq = nq - r0;
                float *restrict mr = m + r0, *restrict lr = l + r0;
                // St = scale * K_j Q_i^T as an NN GEMM on the transposed query block (see the
                // note on OpenBLAS's small-matrix path in the backward)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nk, mq, D, scale,
                            K + k0 * ldkv, (int)ldkv, Qt + r0, bq, 0.0f, St, bq);
                // key k0 + j is visible to query q0 + r0 + r iff r >= first(j) = k0 + j - q0 - r0
                for (int r = 0; r < mq; r++)
                    mt[r] = mr[r], lt[r] = 0.0f;
                // packed: queries r >= g (tile-relative) start their sample after key k0 + j
                int g = P ? 0 : mq; // packed: advanced per key below (sample starts <= key)
                for (int j = 0; j < nk; j++) {
                    const float *restrict st = St + j * bq;
                    int f = k0 + j - q0 - r0;
                    if (f < 0) f = 0;
                    if (P)
                        while (g < mq && q0 + r0 + g - P[r0 + g] <= k0 + j)
                            g++;
                    for (int r = f; r < g; r++)
                        mt[r] = st[r] > mt[r] ? st[r] : mt[r];
                }
                if (P) g = 0;
                for (int j = 0; j < nk; j++) {
                    float *restrict st = St + j * bq;
                    int f = k0 + j - q0 - r0;
                    if (f < 0) f = 0;
                    if (f > mq) f = mq;
                    if (P)
                        while (g < mq && q0 + r0 + g - P[r0 + g] <= k0 + j)
                            g++;
                    int ge = g > f ? g : f;
                    for (int r = 0; r < f; r++)
                        st[r] = 0.0f;
                    for (int r = f; r < ge; r++) {
                        float e = slm_expf_fast(st[r] - mt[r]);
                        st[r] = e;
                        lt[r] += e;
                    }
                    for (int r = ge; r < mq; r++)
                        st[r] = 0.0f;
                }
                for (int r = 0; r < mq; r++) {
                    // 0 on the first tile (m = -inf); a packed row that saw no key yet keeps 1
                    c[r] = mt[r] == -INFINITY ? 1.0f : slm_expf_fast(mr[r] - mt[r]);
                    lr[r] = c[r] * lr[r] + lt[r];
                    mr[r] = mt[r];
                }
                if (k0 > kstart) { // O is still zero before the first tile
                    for (int r = 0; r < mq; r++) {
                        float *restrict o = O + (r0 + r) * ldq;
                        float cr = c[r];
                        for (int d = 0; d < D; d++)
                            o[d] *= cr;
                    }
                }
                // O[r0:] += St^T V_j
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, mq, D, nk, 1.0f, St, bq,
                            Vv + k0 * ldkv, (int)ldkv, 1.0f, O + r0 * ldq, (int)ldq);
            }
            float *L = lse + ((int64_t)b * H + h) * T + q0;
            for (int r = 0; r < nq; r++) {
                float inv = 1.0f / l[r];
                float *restrict o = O + r * ldq;
                for (int d = 0; d < D; d++)
                    o[d] *= inv;
                L[r] = m[r] + logf(l[r]);
            }
        }
        free(St);
        free(Qt);
        free(m);
    }
}

void slm_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int T, int H, int KV, int D) {
    attn_fwd(out, lse, q, k, v, NULL, B, T, H, KV, D);
}

void slm_attention_fwd_packed(float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *pos, int B, int T, int H, int KV,
                              int D) {
    SLM_ASSERT(pos);
    attn_fwd(out, lse, q, k, v, pos, B, T, H, KV, D);
}

// Packed (pos != NULL): P is zero outside each query's sample [t - pos[t], t]; the query tiles
// of a key block stop at the first whose first query starts its sample after the block.
static void attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                     const float *k, const float *v, const float *out, const float *lse,
                     const int32_t *pos, int B, int T, int H, int KV, int D) {
    SLM_ASSERT(B >= 0 && T >= 0 && D > 0 && KV > 0 && H % KV == 0);
    slm_kernels_blas_setup();
    const int blk = attn_block(D);
    const int nrep = H / KV;
    const int64_t ldq = (int64_t)H * D, ldkv = (int64_t)KV * D;
    const float scale = 1.0f / sqrtf((float)D);
    const int64_t ntask = (int64_t)B * KV;
#pragma omp parallel
    {
        float *P = slm_xaligned((size_t)blk * blk * sizeof(float));
        float *dP = slm_xaligned((size_t)blk * blk * sizeof(float));
        float *Kt = slm_xaligned((size_t)D * blk * sizeof(float));
        float *Vt = slm_xaligned((size_t)D * blk * sizeof(float));
        float *Dv = slm_xmalloc((size_t)nrep * (size_t)T * sizeof(float));
        // (b, kv head) tasks write disjoint dq / dk / dv rows: dynamic is still deterministic.
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            int b = (int)(task / KV), kvh = (int)(task % KV);
            const float *K = k + (int64_t)b * T * ldkv + (int64_t)kvh * D;
            const float *Vv = v + (int64_t)b * T * ldkv + (int64_t)kvh * D;
            float *dK = dk + (int64_t)b * T * ldkv + (int64_t)kvh * D;
            float *dV = dv + (int64_t)b * T * ldkv + (int64_t)kvh * D;
            for (int t = 0; t < T; t++) {
                memset(dK + t * ldkv, 0, (size_t)D * sizeof(float));
                memset(dV + t * ldkv, 0, (size_t)D * sizeof(float));
            }
            // D = rowsum(dO * O) per query row of every head in the group; zero dQ.
            for (int g = 0; g < nrep; g++) {
                int h = kvh * nrep + g;
                for (int t = 0; t < T; t++) {
                    int64_t off = ((int64_t)b * T + t) * ldq + (int64_t)h * D;
                    const float *restrict a = dout + off, *restrict o = out + off;
                    float s = 0.0f;
#pragma omp simd reduction(+ : s)
                    for (int d = 0; d < D; d++)
                        s += a[d] * o[d];
                    Dv[(int64_t)g * T + t] = s;
                    memset(dq + off, 0, (size_t)D * sizeof(float));
                }
            }
            for (int k0 = 0; k0 < T; k0 += blk) {
                int nk = T - k0 < blk ? T - k0 : blk;
                const float *Kj = K + k0 * ldkv;
                float *dKj = dK + k0 * ldkv, *dVj = dV + k0 * ldkv;
                // K_j^T and V_j^T [D, nk], shared by every query tile and head below: with them
                // Q K^T and dO V^T are NN GEMMs. (Row-major A B^T maps to OpenBLAS's column-major
                // "TN" case, which its small-matrix path refuses: it would pack both operands
                // on every call.) All five GEMMs per tile then take the unpacked kernels.
                transpose_rows(Kt, blk, Kj, ldkv, nk, D);
                transpose_rows(Vt, blk, Vv + k0 * ldkv, ldkv, nk, D);
                for (int g = 0; g < nrep; g++) {
                    int h = kvh * nrep + g;
                    const float *L = lse + ((int64_t)b * H + h) * T;
                    // query tiles from the diagonal down (row k0 is the first to see key k0)
                    for (int q0 = k0; q0 < T; q0 += blk) {
                        int nq = T - q0 < blk ? T - q0 : blk;
                        const int32_t *Pq = pos ? pos + (int64_t)b * T + q0 : NULL;
                        if (Pq && q0 - Pq[0] >= k0 + nk) break; // its samples start later

                        int64_t qoff = ((int64_t)b * T + q0) * ldq + (int64_t)h * D;
                        const float *Qi = q + qoff, *dOi = dout + qoff;
                        float *dQi = dq + qoff;
                        const float *Di = Dv + (int64_t)g * T + q0;
                        // P = exp(scale * Q_i K_j^T - lse), causal-masked
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, nk, D, scale, Qi,
                                    (int)ldq, Kt, blk, 0.0f, P, blk);
                        for (int r = 0; r < nq; r++) {
                            float *restrict p = P + r * blk;
                            float lr = L[q0 + r];
                            int valid = q0 + r - k0 + 1; // >= 1 since q0 >= k0
                            if (valid > nk) valid = nk;
                            int lo = 0; // packed: keys before the query's sample start
                            if (Pq) {
                                lo = q0 + r - Pq[r] - k0;
                                if (lo < 0) lo = 0;
                                if (lo > valid) lo = valid;
                                for (int j = 0; j < lo; j++)
                                    p[j] = 0.0f;
                            }
                            for (int j = lo; j < valid; j++)
                                p[j] = slm_expf_fast(p[j] - lr);
                            if (valid < nk)
                                memset(p + valid, 0, (size_t)(nk - valid) * sizeof(float));
                        }
                        // dV_j += P^T dO_i
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, D, nq, 1.0f, P,
                                    blk, dOi, (int)ldq, 1.0f, dVj, (int)ldkv);
                        // dP = dO_i V_j^T, then dS = P * (dP - D) in place
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, nk, D, 1.0f, dOi,
                                    (int)ldq, Vt, blk, 0.0f, dP, blk);
                        for (int r = 0; r < nq; r++) {
                            float *restrict ds = dP + r * blk;
                            const float *restrict p = P + r * blk;
                            float dr = Di[r];
                            for (int j = 0; j < nk; j++)
                                ds[j] = p[j] * (ds[j] - dr);
                        }
                        // dQ_i += scale * dS K_j;  dK_j += scale * dS^T Q_i
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, D, nk, scale, dP,
                                    blk, Kj, (int)ldkv, 1.0f, dQi, (int)ldq);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, D, nq, scale, dP,
                                    blk, Qi, (int)ldq, 1.0f, dKj, (int)ldkv);
                    }
                }
            }
        }
        free(P);
        free(dP);
        free(Kt);
        free(Vt);
        free(Dv);
    }
}

void slm_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                       const float *k, const float *v, const float *out, const float *lse, int B,
                       int T, int H, int KV, int D) {
    attn_bwd(dq, dk, dv, dout, q, k, v, out, lse, NULL, B, T, H, KV, D);
}

void slm_attention_bwd_packed(float *dq, float *dk, float *dv, const float *dout, const float *q,
                              const float *k, const float *v, const float *out, const float *lse,
                              const int32_t *pos, int B, int T, int H, int KV, int D) {
    SLM_ASSERT(pos);
    attn_bwd(dq, dk, dv, dout, q, k, v, out, lse, pos, B, T, H, KV, D);
}
