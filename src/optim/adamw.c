// AdamW on flat fp32 ranges, the warmup + cosine learning-rate schedule, and the sum-of-squares
// and scaling helpers behind global gradient-norm clipping. See optim.h for the contracts.
#include "optim/optim.h"

#include "device/device.h"

#include <math.h>
#include <stdlib.h>

static int cmp_range(const void *a, const void *b) {
    const slm_decay_range *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

void slm_adamw_step(slm_device *dev, float *params, const float *grads, float *m, float *v,
                    int64_t n, const slm_adamw_hparams *h, float lr, int64_t t,
                    const slm_decay_range *ranges, int n_ranges) {
    SLM_ASSERT(n >= 0 && t >= 1 && n_ranges >= 0);
    if (n == 0) return;
    double bc1 = 1.0 - pow((double)h->beta1, (double)t);
    double bc2 = 1.0 - pow((double)h->beta2, (double)t);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float mul_decay = 1.0f - lr * h->weight_decay;

    // Walk the ranges in order of `begin`; gaps between them are decayed (optim.h).
    slm_decay_range *r = NULL;
    if (n_ranges > 0) {
        r = slm_xmalloc((size_t)n_ranges * sizeof *r);
        for (int i = 0; i < n_ranges; i++)
            r[i] = ranges[i];
        qsort(r, (size_t)n_ranges, sizeof *r, cmp_range);
    }
    int64_t pos = 0;
    for (int i = 0; i <= n_ranges; i++) {
        int64_t gap_end = i < n_ranges ? r[i].begin : n;
        if (gap_end > n) gap_end = n;
        if (gap_end > pos) {
            slm_dev_adamw(dev, params + pos, grads + pos, m + pos, v + pos, gap_end - pos, h->beta1,
                          h->beta2, h->eps, mul_decay, step_size, bc2_sqrt);
            pos = gap_end;
        }
        if (i == n_ranges) break;
        int64_t b = r[i].begin < pos ? pos : r[i].begin; // overlapping ranges: first one wins
        int64_t e = r[i].end > n ? n : r[i].end;
        SLM_ASSERT(r[i].begin >= 0 && r[i].end >= r[i].begin);
        if (e > b)
            slm_dev_adamw(dev, params + b, grads + b, m + b, v + b, e - b, h->beta1, h->beta2,
                          h->eps, r[i].decay ? mul_decay : 1.0f, step_size, bc2_sqrt);
        if (e > pos) pos = e;
    }
    free(r);
}

// Linear warmup: lr_peak * (step + 1) / warmup for step < warmup, so step 0 already trains
// (a zero first step would waste the batch) and step warmup - 1 reaches lr_peak.
// Cosine decay (Loshchilov & Hutter 2017, SGDR without restarts) from lr_peak at step `warmup`
// to lr_min at step `total`:  lr_min + 0.5 (lr_peak - lr_min)(1 + cos(pi
// (step-warmup)/(total-warmup))). Constant lr_min from `total` on. Computed in double, rounded
// once.
float slm_lr_at(int64_t step, int64_t warmup, int64_t total, float lr_peak, float lr_min) {
    if (step < 0) step = 0;
    if (warmup > 0 && step < warmup)
        return (float)((double)lr_peak * (double)(step + 1) / (double)warmup);
    if (step >= total) return lr_min;
    double progress = (double)(step - warmup) / (double)(total - warmup);
    double c = 0.5 * (1.0 + cos(M_PI * progress));
    return (float)((double)lr_min + c * ((double)lr_peak - (double)lr_min));
}

double slm_sumsq(const float *x, int64_t n) {
    return slm_dev_sumsq(NULL, x, n);
}

void slm_scale(float *x, int64_t n, float s) {
    slm_dev_scale(NULL, x, s, n);
}

double slm_clip_coef(double norm, double max_norm) {
    if (!(max_norm > 0) || !isfinite(norm)) return 1.0;
    double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? coef : 1.0;
}

double slm_clip_grad_norm(float *const *bufs, const int64_t *lens, int n_bufs, double max_norm) {
    double sumsq = 0;
    for (int i = 0; i < n_bufs; i++)
        sumsq += slm_sumsq(bufs[i], lens[i]);
    double norm = sqrt(sumsq);
    double coef = slm_clip_coef(norm, max_norm);
    if (coef < 1.0)
        for (int i = 0; i < n_bufs; i++)
            slm_scale(bufs[i], lens[i], (float)coef);
    return norm;
}
