// Fused softmax + cross-entropy over the vocabulary, gradient written in place.
//
// For a row z [V] with target y:  m = max_j z_j,  s = sum_j exp(z_j - m),  lse = m + log s,
//   loss = lse - z_y,     dloss/dz_j = softmax(z)_j - [j == y] = exp(z_j - m) / s - [j == y].
// Subtracting the max keeps every exponent <= 0 (no overflow; the largest term is exactly 1, so
// s >= 1 and log s is safe). Three passes over the row, which stays in L2 (V = 32000 is 128 KB):
// max, exp-and-sum (the exponentials are stored into the row when a gradient is wanted), scale.
// Rows are independent: parallel over rows (dynamic chunks: each row's result does not depend on
// the thread that computes it), no cross-row reduction, so deterministic.
#include "kernels/kernels.h"

#include <math.h>

#include "base/base.h"
#include "kernels/kernels_internal.h"

// max of z[0..n) over 16 independent lanes, then a tree: vectorizes under GCC and clang
// alike (a float max reduction under `omp simd` is refused by clang without -ffast-math).
static float row_max(const float *restrict z, int64_t n) {
    float a[16];
    for (int l = 0; l < 16; l++)
        a[l] = -INFINITY;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++)
            a[l] = z[j + l] > a[l] ? z[j + l] : a[l];
    for (; j < n; j++)
        a[0] = z[j] > a[0] ? z[j] : a[0];
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            a[l] = a[l + w] > a[l] ? a[l + w] : a[l];
    return a[0];
}

void slm_cross_entropy_fused(float *logits, float *losses, const int32_t *targets, int64_t N,
                             int64_t V, float dscale) {
    bool grad = dscale != 0.0f;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t n = 0; n < N; n++) {
        float *restrict z = logits + n * V;
        int32_t y = targets[n];
        if (y == -1) {
            losses[n] = 0.0f;
            if (grad)
                for (int64_t j = 0; j < V; j++)
                    z[j] = 0.0f;
            continue;
        }
        SLM_ASSERT(y >= 0 && y < V);
        float m = row_max(z, V);
        float zy = z[y];
        float s = 0.0f;
        if (grad) {
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < V; j++) {
                float e = slm_expf_fast(z[j] - m);
                z[j] = e;
                s += e;
            }
            float k = dscale / s;
            for (int64_t j = 0; j < V; j++)
                z[j] *= k;
            z[y] -= dscale;
        } else {
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < V; j++)
                s += slm_expf_fast(z[j] - m);
        }
        losses[n] = m + logf(s) - zy;
    }
}
