// Vector kernels of the optimizer, FSDP and LoRA paths: axpy / scale / fill, the fixed-block
// sums behind gradient-norm clipping and the loss, the AdamW segment update, bf16 casts and
// accumulation, counter-based dropout and the decode step's row softmax. Elementwise loops use a
// static OpenMP schedule (any split gives the same bits); reductions use fixed blocks summed in
// block order, so the result does not depend on the thread count.
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

// Elements below which a loop stays on one thread: the fork/join cost of a parallel region
// exceeds the work for a norm weight of a few hundred elements.
#define VEC_PAR_MIN 32768
// Fixed block size of the sums (the block split, not the thread split, fixes the order).
#define VEC_SUM_BLOCK 16384

void slm_vec_axpy(float *y, float a, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= VEC_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

void slm_vec_scale(float *x, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= VEC_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

void slm_vec_fill(float *x, float v, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= VEC_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
}

double slm_vec_sumsq(const float *x, int64_t n) {
    if (n <= 0) return 0.0;
    int64_t nb = (n + VEC_SUM_BLOCK - 1) / VEC_SUM_BLOCK;
    double stack_parts[64];
    double *parts = nb <= 64 ? stack_parts : slm_xmalloc((size_t)nb * sizeof(double));
#pragma omp parallel for schedule(static) if (n >= VEC_PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * VEC_SUM_BLOCK, hi = lo + VEC_SUM_BLOCK < n ? lo + VEC_SUM_BLOCK : n;
        double s = 0.0;
        for (int64_t i = lo; i < hi; i++)
            s += (double)x[i] * (double)x[i];
        parts[b] = s;
    }
    double total = 0.0;
    for (int64_t b = 0; b < nb; b++)
        total += parts[b];
    if (parts != stack_parts) free(parts);
    return total;
}

double slm_vec_sum(const float *x, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    return sum;
}

void slm_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float b1, float b2,
                      float eps, float decay_mul, float step_size, float bc2_sqrt) {
#pragma omp parallel for schedule(static) if (n >= VEC_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay_mul - step_size * (mi / denom);
    }
}

void slm_bf16_accumulate(float *acc, const uint16_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t w = (uint32_t)x[i] << 16;
        float v;
        memcpy(&v, &w, 4);
        acc[i] += v;
    }
}

void slm_dropout_apply(uint64_t key, uint32_t thr, float scale, const float *x, float *y,
                       float *acc, int64_t n) {
    int64_t ng = (n + 3) / 4;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < ng; g++) {
        uint64_t h = slm_mix64(key ^ (uint64_t)g);
        for (int64_t i = 4 * g, k = 0; k < 4 && i < n; i++, k++) {
            bool kept = ((h >> (16 * k)) & 0xffffu) >= thr;
            if (y)
                y[i] = kept ? x[i] * scale : 0.0f;
            else if (kept)
                acc[i] += x[i] * scale;
        }
    }
}

void slm_softmax_rows(float *s, int64_t rows, int64_t n, float scale) {
    for (int64_t r = 0; r < rows; r++) {
        float *row = s + r * n;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            row[j] *= scale;
            if (row[j] > mx) mx = row[j];
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; j++) {
            row[j] = expf(row[j] - mx);
            sum += row[j];
        }
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < n; j++)
            row[j] *= inv;
    }
}

void slm_vec_copy(void *dst, const void *src, size_t bytes) {
    const size_t piece = (size_t)1 << 20;
    if (bytes < 4 * piece) {
        if (src)
            memcpy(dst, src, bytes);
        else
            memset(dst, 0, bytes);
        return;
    }
    int64_t n = (int64_t)((bytes + piece - 1) / piece);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        size_t off = (size_t)i * piece, len = bytes - off < piece ? bytes - off : piece;
        if (src)
            memcpy((uint8_t *)dst + off, (const uint8_t *)src + off, len);
        else
            memset((uint8_t *)dst + off, 0, len);
    }
}

int slm_kernels_set_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
    return omp_get_max_threads();
}

int slm_kernels_threads(void) {
    return omp_get_max_threads();
}
