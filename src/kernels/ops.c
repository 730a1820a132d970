// Pointwise and row-wise kernels of the Llama block: RMSNorm, RoPE, SwiGLU, embedding, add.
// Each is one pass over memory, parallel over rows with a static OpenMP schedule; reductions
// inside a row use `omp simd reduction` (vectorized, fixed lane order, so deterministic), and
// reductions across rows (RMSNorm dw, embedding backward) never race: they use per-thread
// partials summed in thread order, or split the columns between threads.
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels_internal.h"

// ---------------------------------------------------------------------------------------------
// RMSNorm (Zhang & Sennrich 2019) as HF LlamaRMSNorm: y = x * r * w, r = 1/sqrt(mean(x^2) + eps).

void slm_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int64_t N, int C,
                     float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *restrict x = inp + n * C;
        float *restrict y = out + n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < C; i++)
            ss += x[i] * x[i];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[n] = r;
        for (int i = 0; i < C; i++)
            y[i] = x[i] * r * w[i];
    }
}

// With g = dout * w (the gradient reaching the normalized x * r):
//   dx = r * g - x * r^3 * (sum_i g_i x_i) / C        dw += sum_n dout * x * r
// dw is reduced over rows: each thread sums its contiguous block of rows into its own partial
// row, then the partials are added in thread order (deterministic for a fixed thread count).
void slm_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     const float *rstd, int64_t N, int C) {
    int nt_max = omp_get_max_threads();
    float *part = slm_xcalloc((size_t)nt_max * (size_t)C, sizeof(float));
#pragma omp parallel
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        int64_t n0 = N * tid / nth, n1 = N * (tid + 1) / nth;
        float *restrict pw = part + (int64_t)tid * C;
        for (int64_t n = n0; n < n1; n++) {
            const float *restrict x = inp + n * C;
            const float *restrict dy = dout + n * C;
            float *restrict dx = dinp + n * C;
            float r = rstd[n];
            float gx = 0.0f;
#pragma omp simd reduction(+ : gx)
            for (int i = 0; i < C; i++)
                gx += dy[i] * w[i] * x[i];
            float k = gx * r * r * r / (float)C;
            for (int i = 0; i < C; i++) {
                dx[i] += r * dy[i] * w[i] - k * x[i];
                pw[i] += dy[i] * x[i] * r;
            }
        }
#pragma omp barrier
#pragma omp for schedule(static)
        for (int i = 0; i < C; i++) {
            float s = 0.0f;
            for (int t = 0; t < nth; t++)
                s += part[(int64_t)t * C + i];
            dw[i] += s;
        }
    }
    free(part);
}

// ---------------------------------------------------------------------------------------------
// RoPE (Su et al. 2021), HF rotate_half convention.

void slm_rope_tables(float *cos_t, float *sin_t, int T, int D, float theta) {
    SLM_ASSERT(D % 2 == 0);
    int half = D / 2;
    for (int i = 0; i < half; i++) {
        // inv_freq_i = theta^(-2i/D), as HF computes it (in double here, then rounded once).
        double inv_freq = pow((double)theta, -2.0 * (double)i / (double)D);
        for (int t = 0; t < T; t++) {
            double a = (double)t * inv_freq;
            cos_t[(int64_t)t * half + i] = (float)cos(a);
            sin_t[(int64_t)t * half + i] = (float)sin(a);
        }
    }
}

void slm_rope_tables_freq(float *cos_t, float *sin_t, int T, int half, const double *inv_freq) {
    for (int i = 0; i < half; i++) {
        for (int t = 0; t < T; t++) {
            double a = (double)t * inv_freq[i];
            cos_t[(int64_t)t * half + i] = (float)cos(a);
            sin_t[(int64_t)t * half + i] = (float)sin(a);
        }
    }
}

void slm_rope_apply(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh, int D,
                    int pos0, bool inverse) {
    SLM_ASSERT(D % 2 == 0 && pos0 >= 0);
    int half = D / 2;
    float sgn = inverse ? -1.0f : 1.0f;
    int64_t rows = (int64_t)B * T;
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < rows; bt++) {
        int64_t t = bt % T;
        const float *restrict c = cos_t + (pos0 + t) * half;
        const float *restrict s = sin_t + (pos0 + t) * half;
        for (int h = 0; h < nh; h++) {
            float *restrict x1 = x + (bt * nh + h) * D;
            float *restrict x2 = x1 + half;
            // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin); the inverse rotates by -angle.
            for (int i = 0; i < half; i++) {
                float a = x1[i], b = x2[i], si = sgn * s[i];
                x1[i] = a * c[i] - b * si;
                x2[i] = b * c[i] + a * si;
            }
        }
    }
}

void slm_rope_apply_pos(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh,
                        int D, const int32_t *pos, bool inverse) {
    SLM_ASSERT(D % 2 == 0 && pos);
    int half = D / 2;
    float sgn = inverse ? -1.0f : 1.0f;
    int64_t rows = (int64_t)B * T;
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < rows; bt++) {
        const float *restrict c = cos_t + (int64_t)pos[bt] * half;
        const float *restrict s = sin_t + (int64_t)pos[bt] * half;
        for (int h = 0; h < nh; h++) {
            float *restrict x1 = x + (bt * nh + h) * D;
            float *restrict x2 = x1 + half;
            for (int i = 0; i < half; i++) {
                float a = x1[i], b = x2[i], si = sgn * s[i];
                x1[i] = a * c[i] - b * si;
                x2[i] = b * c[i] + a * si;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU (Shazeer 2020): h = silu(g) * u, silu(g) = g * sigmoid(g).
//   dh/dg = u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  dh/du = silu(g).

void slm_swiglu_fwd(float *h, const float *gate, const float *up, int64_t N, int64_t F) {
    int64_t n = N * F;
    const int64_t chunk = 4096;
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        int64_t c1 = c0 + chunk < n ? c0 + chunk : n;
        float *restrict hh = h;
        const float *restrict g = gate, *restrict u = up;
        for (int64_t i = c0; i < c1; i++) {
            float sg = 1.0f / (1.0f + slm_expf_fast(-g[i]));
            hh[i] = g[i] * sg * u[i];
        }
    }
}

void slm_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                    int64_t N, int64_t F) {
    int64_t n = N * F;
    const int64_t chunk = 4096;
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        int64_t c1 = c0 + chunk < n ? c0 + chunk : n;
        float *restrict dg = dgate, *restrict du = dup;
        const float *restrict d = dh, *restrict g = gate, *restrict u = up;
        for (int64_t i = c0; i < c1; i++) {
            float sg = 1.0f / (1.0f + slm_expf_fast(-g[i]));
            float gi = g[i], di = d[i];
            du[i] = di * gi * sg;
            dg[i] = di * u[i] * sg * (1.0f + gi * (1.0f - sg));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Embedding.

void slm_embedding_fwd(float *out, const int32_t *tokens, const float *table, int64_t N, int C) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        SLM_ASSERT(tokens[n] >= 0);
        memcpy(out + n * C, table + (int64_t)tokens[n] * C, (size_t)C * sizeof(float));
    }
}

// Deterministic without atomics: threads split the C columns, and each thread walks all N
// tokens in order, so every dtable element receives its additions in token order.
void slm_embedding_bwd(float *dtable, const int32_t *tokens, const float *dout, int64_t N, int C) {
#pragma omp parallel
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        // Column ranges rounded to 16 floats (a cache line) so threads do not share lines.
        int nblk = (C + 15) / 16;
        int c0 = (int)((int64_t)nblk * tid / nth) * 16,
            c1 = (int)((int64_t)nblk * (tid + 1) / nth) * 16;
        if (c1 > C) c1 = C;
        if (c0 < c1) {
            for (int64_t n = 0; n < N; n++) {
                SLM_ASSERT(tokens[n] >= 0);
                float *restrict d = dtable + (int64_t)tokens[n] * C;
                const float *restrict g = dout + n * C;
                for (int i = c0; i < c1; i++)
                    d[i] += g[i];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------

void slm_add(float *out, const float *a, const float *b, int64_t n) {
    // out may alias a, so no restrict on out/a; the loop still vectorizes (element-wise).
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}
