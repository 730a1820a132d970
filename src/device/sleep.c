// The SLEEP backend of device.h (--simulate-compute GFLOPS): host memory as the CPU backend, but
// no arithmetic. The GEMM-like ops (linear forward / backward, attention forward / backward)
// sleep for their FLOPs / rate; every other op does nothing (sums return 0). The model, FSDP
// and the optimizer run their real schedule on it (unit hooks, collectives, copies), which is
// what the emulated cluster of bench/scaling/ measures (docs/scaling.md).
// Sleeps are kept on an absolute CLOCK_MONOTONIC deadline: each op extends the deadline by its
// time from max(now, deadline), so interrupted sleeps and the sleep call's own overhead do not
// accumulate into the simulated rate.
#include "device/device_internal.h"

#include <errno.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Simulates `flops` of compute.
static void busy(slm_device *d, double flops) {
    if (flops <= 0 || d->gflops <= 0) return;
    double s = flops / (d->gflops * 1e9), now = now_s();
    if (d->deadline < now) d->deadline = now;
    d->deadline += s;
    d->slept_s += s;
    struct timespec until = {(time_t)d->deadline,
                             (long)((d->deadline - (double)(time_t)d->deadline) * 1e9)};
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
}

static void sleep_linear_fwd(slm_device *d, bool bf16, float *out, const float *inp, const float *W,
                             int64_t N, int64_t I, int64_t O, bool accumulate) {
    (void)bf16, (void)out, (void)inp, (void)W, (void)accumulate;
    busy(d, 2.0 * (double)N * (double)I * (double)O);
}

static void sleep_linear_bwd(slm_device *d, bool bf16, float *dinp, float *dW, const float *dout,
                             const float *inp, const float *W, int64_t N, int64_t I, int64_t O) {
    (void)bf16, (void)dout, (void)inp, (void)W;
    busy(d, 2.0 * (double)N * (double)I * (double)O * ((dinp ? 1 : 0) + (dW ? 1 : 0)));
}

// Attention forward: QK^T and PV, 2 * 2 * B * H * D * T^2, not halved for the causal mask: the
// count of the MFU numerator (train/flops.h slm_train_flops_per_token, 12 L A T per token over
// forward and backward), so --simulate-compute's waits and its step line's compute stay the
// model's 6 N + 12 L A T FLOPs / rate (tests/train/test_sim_compute.sh, bench/scaling/model.py).
static double attn_flops(int B, int T, int H, int D) {
    return 4.0 * (double)B * (double)H * (double)D * (double)T * (double)T;
}

static void sleep_attention_fwd(slm_device *d, float *out, float *lse, const float *q,
                                const float *k, const float *v, const int32_t *pos, int B, int T,
                                int H, int KV, int D) {
    (void)out, (void)lse, (void)q, (void)k, (void)v, (void)pos, (void)KV;
    busy(d, attn_flops(B, T, H, D));
}

static void sleep_attention_bwd(slm_device *d, float *dq, float *dk, float *dv, const float *dout,
                                const float *q, const float *k, const float *v, const float *out,
                                const float *lse, const int32_t *pos, int B, int T, int H, int KV,
                                int D) {
    (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out, (void)lse;
    (void)pos, (void)KV;
    busy(d, 2.0 * attn_flops(B, T, H, D));
}

// The ops without FLOPs worth simulating: nothing happens.
static void nop_rmsnorm_fwd(slm_device *d, float *out, float *rstd, const float *inp,
                            const float *w, int64_t N, int C, float eps) {
    (void)d, (void)out, (void)rstd, (void)inp, (void)w, (void)N, (void)C, (void)eps;
}
static void nop_rmsnorm_bwd(slm_device *d, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, const float *rstd, int64_t N, int C) {
    (void)d, (void)dinp, (void)dw, (void)dout, (void)inp, (void)w, (void)rstd, (void)N, (void)C;
}
static void nop_rope_tables(slm_device *d, float *cos_t, float *sin_t, int T, int half,
                            const double *inv_freq) {
    (void)d, (void)cos_t, (void)sin_t, (void)T, (void)half, (void)inv_freq;
}
static void nop_rope_apply(slm_device *d, float *x, const float *cos_t, const float *sin_t, int B,
                           int T, int nh, int D, int pos0, const int32_t *pos, bool inverse) {
    (void)d, (void)x, (void)cos_t, (void)sin_t, (void)B, (void)T, (void)nh, (void)D, (void)pos0;
    (void)pos, (void)inverse;
}
static void nop_swiglu_fwd(slm_device *d, float *h, const float *gate, const float *up, int64_t N,
                           int64_t F) {
    (void)d, (void)h, (void)gate, (void)up, (void)N, (void)F;
}
static void nop_swiglu_bwd(slm_device *d, float *dgate, float *dup, const float *dh,
                           const float *gate, const float *up, int64_t N, int64_t F) {
    (void)d, (void)dgate, (void)dup, (void)dh, (void)gate, (void)up, (void)N, (void)F;
}
static void nop_embedding_fwd(slm_device *d, float *out, const int32_t *tokens, const float *table,
                              int64_t N, int C) {
    (void)d, (void)out, (void)tokens, (void)table, (void)N, (void)C;
}
static void nop_embedding_bwd(slm_device *d, float *dtable, const int32_t *tokens,
                              const float *dout, int64_t N, int C) {
    (void)d, (void)dtable, (void)tokens, (void)dout, (void)N, (void)C;
}
static void nop_cross_entropy(slm_device *d, float *logits, float *losses, const int32_t *targets,
                              int64_t N, int64_t V, float dscale) {
    (void)d, (void)logits, (void)losses, (void)targets, (void)N, (void)V, (void)dscale;
}
static void nop_vec(slm_device *d, float *x, int64_t n) {
    (void)d, (void)x, (void)n;
}
static void nop_add(slm_device *d, float *out, const float *a, const float *b, int64_t n) {
    (void)d, (void)out, (void)a, (void)b, (void)n;
}
static void nop_axpy(slm_device *d, float *y, float a, const float *x, int64_t n) {
    (void)d, (void)y, (void)a, (void)x, (void)n;
}
static void nop_scale(slm_device *d, float *x, float s, int64_t n) {
    (void)d, (void)x, (void)s, (void)n;
}
static double zero_sum(slm_device *d, const float *x, int64_t n) {
    (void)d, (void)x, (void)n;
    return 0.0;
}
static void nop_adamw(slm_device *d, float *p, const float *g, float *m, float *v, int64_t n,
                      float b1, float b2, float eps, float decay_mul, float step_size,
                      float bc2_sqrt) {
    (void)d, (void)p, (void)g, (void)m, (void)v, (void)n, (void)b1, (void)b2, (void)eps;
    (void)decay_mul, (void)step_size, (void)bc2_sqrt;
}
static void nop_to_bf16(slm_device *d, uint16_t *y, const float *x, int64_t n) {
    (void)d, (void)y, (void)x, (void)n;
}
static void nop_from_bf16(slm_device *d, float *y, const uint16_t *x, int64_t n) {
    (void)d, (void)y, (void)x, (void)n;
}
static void nop_dropout(slm_device *d, uint64_t key, uint32_t thr, float scale, const float *x,
                        float *y, float *acc, int64_t n) {
    (void)d, (void)key, (void)thr, (void)scale, (void)x, (void)y, (void)acc, (void)n;
}
static void nop_softmax_rows(slm_device *d, float *s, int64_t rows, int64_t n, float scale) {
    (void)d, (void)s, (void)rows, (void)n, (void)scale;
}
static double sleep_gemm_peak(slm_device *d, bool bf16, int n, int reps) {
    (void)bf16, (void)n, (void)reps;
    return d->gflops;
}
static const char *sleep_isa(slm_device *d) {
    (void)d;
    return "none (SLEEP device)";
}

static void nop_fill(slm_device *d, float *x, float v, int64_t n) {
    (void)d, (void)x, (void)v, (void)n;
}

const slm_device_ops slm_device_sleep_ops = {
    .name = "sleep",
    .alloc = NULL, // memory, sync and threads: the CPU backend's (device.c)
    .linear_fwd = sleep_linear_fwd,
    .linear_bwd = sleep_linear_bwd,
    .rmsnorm_fwd = nop_rmsnorm_fwd,
    .rmsnorm_bwd = nop_rmsnorm_bwd,
    .rope_tables = nop_rope_tables,
    .rope_apply = nop_rope_apply,
    .attention_fwd = sleep_attention_fwd,
    .attention_bwd = sleep_attention_bwd,
    .swiglu_fwd = nop_swiglu_fwd,
    .swiglu_bwd = nop_swiglu_bwd,
    .embedding_fwd = nop_embedding_fwd,
    .embedding_bwd = nop_embedding_bwd,
    .cross_entropy = nop_cross_entropy,
    .round_bf16 = nop_vec,
    .add = nop_add,
    .axpy = nop_axpy,
    .scale = nop_scale,
    .fill = nop_fill,
    .sumsq = zero_sum,
    .sum = zero_sum,
    .adamw = nop_adamw,
    .f32_to_bf16 = nop_to_bf16,
    .bf16_to_f32 = nop_from_bf16,
    .bf16_accumulate = nop_from_bf16,
    .dropout = nop_dropout,
    .softmax_rows = nop_softmax_rows,
    .gemm_peak = sleep_gemm_peak,
    .bf16_isa = sleep_isa,
};
