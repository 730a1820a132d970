// optim: AdamW on flat fp32 buffers (whole units or FSDP shards), the learning-rate schedule,
// and gradient-norm helpers.
//
// AdamW: Loshchilov & Hutter 2019 (decoupled weight decay), bias-corrected moments as in
// torch.optim.AdamW: p -= lr * wd * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
// The optimizer does not know about units or ranks: it updates whatever flat range it is given,
// with a per-element weight-decay mask expressed as ranges. Deterministic for a fixed thread
// count.
#ifndef SLM_OPTIM_H
#define SLM_OPTIM_H

#include "base/base.h"
#include "device/device.h"

typedef struct slm_adamw_hparams {
    float lr_peak; // peak learning rate
    float beta1, beta2, eps;
    float weight_decay;
} slm_adamw_hparams;

// A half-open element range [begin, end) of a flat buffer and whether it is decayed.
typedef struct slm_decay_range {
    int64_t begin, end;
    bool decay;
} slm_decay_range;

// One AdamW step on `n` elements: params, grads (read), m, v (updated in place), with
// `lr` for this step and `t` the 1-based step count for bias correction. Ranges not covered
// by `ranges` are decayed (n_ranges == 0: decay everything).
// params, grads, m, v are memory of device `dev` (NULL: the CPU device); the segments run there
// (device.h slm_dev_adamw).
void slm_adamw_step(slm_device *dev, float *params, const float *grads, float *m, float *v,
                    int64_t n, const slm_adamw_hparams *h, float lr, int64_t t,
                    const slm_decay_range *ranges, int n_ranges);

// Linear warmup over `warmup` steps from 0 to lr_peak, then cosine decay to lr_min at
// `total` steps; constant lr_min after. `step` is 0-based.
float slm_lr_at(int64_t step, int64_t warmup, int64_t total, float lr_peak, float lr_min);

// Sum of squares of n floats of host (CPU device) memory, accumulated in double (global norm =
// sqrt of the sum over all buffers / ranks); device.h slm_dev_sumsq on the CPU device.
double slm_sumsq(const float *x, int64_t n);
// Multiplies n floats of host memory by s (slm_dev_scale on the CPU device).
void slm_scale(float *x, int64_t n, float s);

// The clipping rule of torch.nn.utils.clip_grad_norm_: the factor max_norm / (norm + 1e-6)
// when max_norm > 0, the norm is finite and that factor is below 1; else 1 (leave the gradients
// as they are). Callers multiply by the factor rounded to float. Shared by slm_clip_grad_norm and
// fsdp's slm_fsdp_clip_grad_norm, so both clip by one rule.
double slm_clip_coef(double norm, double max_norm);

// Global-norm gradient clipping over n_bufs buffers (bufs[i] holds lens[i] floats, scaled in
// place), as torch.nn.utils.clip_grad_norm_: norm = sqrt(sum of slm_sumsq over the buffers);
// when max_norm > 0, the norm is finite and max_norm / (norm + 1e-6) < 1, every buffer is
// multiplied by that coefficient (rounded to float). Returns the norm before clipping (NaN /
// Inf propagate; nothing is scaled then). For whole-model buffers: the reference training loop
// of tests/train/test_train.c uses it; the trainer clips at every world size (one included)
// with slm_fsdp_clip_grad_norm, which applies the same rule to the local shards after an
// all-reduce of their sums of squares.
double slm_clip_grad_norm(float *const *bufs, const int64_t *lens, int n_bufs, double max_norm);

#endif
