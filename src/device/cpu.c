// The CPU backend of device.h: host memory (64-byte aligned) and the kernels of kernels/ (fp32
// through OpenBLAS sgemm, bf16 compute through oneDNN, the rest OpenMP loops). Everything is
// synchronous, so sync is a no-op and copies are memcpy.
#include "device/device_internal.h"

#include <stdlib.h>

#include "kernels/kernels.h"

static void *cpu_alloc(slm_device *d, size_t bytes) {
    (void)d;
    return slm_xaligned(bytes ? bytes : 64);
}

static void cpu_free(slm_device *d, void *p) {
    (void)d;
    free(p);
}

static void cpu_zero(slm_device *d, void *p, size_t bytes) {
    (void)d;
    if (bytes) slm_vec_copy(p, NULL, bytes);
}

static void cpu_copy(slm_device *d, void *dst, const void *src, size_t bytes, slm_copy_dir dir) {
    (void)d, (void)dir;
    if (bytes && dst != src) slm_vec_copy(dst, src, bytes);
}

static void cpu_sync(slm_device *d) {
    (void)d;
}

static int cpu_set_threads(slm_device *d, int n) {
    (void)d;
    return slm_kernels_set_threads(n);
}

static int cpu_threads(const slm_device *d) {
    (void)d;
    return slm_kernels_threads();
}

static void cpu_linear_fwd(slm_device *d, bool bf16, float *out, const float *inp, const float *W,
                           int64_t N, int64_t I, int64_t O, bool accumulate) {
    (void)d;
    slm_linear_fwd(bf16, out, inp, W, N, I, O, accumulate);
}

static void cpu_linear_bwd(slm_device *d, bool bf16, float *dinp, float *dW, const float *dout,
                           const float *inp, const float *W, int64_t N, int64_t I, int64_t O) {
    (void)d;
    slm_linear_bwd(bf16, dinp, dW, dout, inp, W, N, I, O);
}

static void cpu_rmsnorm_fwd(slm_device *d, float *out, float *rstd, const float *inp,
                            const float *w, int64_t N, int C, float eps) {
    (void)d;
    slm_rmsnorm_fwd(out, rstd, inp, w, N, C, eps);
}

static void cpu_rmsnorm_bwd(slm_device *d, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, const float *rstd, int64_t N, int C) {
    (void)d;
    slm_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C);
}

static void cpu_rope_tables(slm_device *d, float *cos_t, float *sin_t, int T, int half,
                            const double *inv_freq) {
    (void)d;
    slm_rope_tables_freq(cos_t, sin_t, T, half, inv_freq);
}

static void cpu_rope_apply(slm_device *d, float *x, const float *cos_t, const float *sin_t, int B,
                           int T, int nh, int D, int pos0, const int32_t *pos, bool inverse) {
    (void)d;
    if (pos)
        slm_rope_apply_pos(x, cos_t, sin_t, B, T, nh, D, pos, inverse);
    else
        slm_rope_apply(x, cos_t, sin_t, B, T, nh, D, pos0, inverse);
}

static void cpu_attention_fwd(slm_device *d, float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *pos, int B, int T, int H, int KV,
                              int D) {
    (void)d;
    if (pos)
        slm_attention_fwd_packed(out, lse, q, k, v, pos, B, T, H, KV, D);
    else
        slm_attention_fwd(out, lse, q, k, v, B, T, H, KV, D);
}

static void cpu_attention_bwd(slm_device *d, float *dq, float *dk, float *dv, const float *dout,
                              const float *q, const float *k, const float *v, const float *out,
                              const float *lse, const int32_t *pos, int B, int T, int H, int KV,
                              int D) {
    (void)d;
    if (pos)
        slm_attention_bwd_packed(dq, dk, dv, dout, q, k, v, out, lse, pos, B, T, H, KV, D);
    else
        slm_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KV, D);
}

static void cpu_swiglu_fwd(slm_device *d, float *h, const float *gate, const float *up, int64_t N,
                           int64_t F) {
    (void)d;
    slm_swiglu_fwd(h, gate, up, N, F);
}

static void cpu_swiglu_bwd(slm_device *d, float *dgate, float *dup, const float *dh,
                           const float *gate, const float *up, int64_t N, int64_t F) {
    (void)d;
    slm_swiglu_bwd(dgate, dup, dh, gate, up, N, F);
}

static void cpu_embedding_fwd(slm_device *d, float *out, const int32_t *tokens, const float *table,
                              int64_t N, int C) {
    (void)d;
    slm_embedding_fwd(out, tokens, table, N, C);
}

static void cpu_embedding_bwd(slm_device *d, float *dtable, const int32_t *tokens,
                              const float *dout, int64_t N, int C) {
    (void)d;
    slm_embedding_bwd(dtable, tokens, dout, N, C);
}

static void cpu_cross_entropy(slm_device *d, float *logits, float *losses, const int32_t *targets,
                              int64_t N, int64_t V, float dscale) {
    (void)d;
    slm_cross_entropy_fused(logits, losses, targets, N, V, dscale);
}

static void cpu_round_bf16(slm_device *d, float *x, int64_t n) {
    (void)d;
    slm_round_bf16(x, n);
}

static void cpu_add(slm_device *d, float *out, const float *a, const float *b, int64_t n) {
    (void)d;
    slm_add(out, a, b, n);
}

static void cpu_axpy(slm_device *d, float *y, float a, const float *x, int64_t n) {
    (void)d;
    slm_vec_axpy(y, a, x, n);
}

static void cpu_scale(slm_device *d, float *x, float s, int64_t n) {
    (void)d;
    slm_vec_scale(x, s, n);
}

static void cpu_fill(slm_device *d, float *x, float v, int64_t n) {
    (void)d;
    slm_vec_fill(x, v, n);
}

static double cpu_sumsq(slm_device *d, const float *x, int64_t n) {
    (void)d;
    return slm_vec_sumsq(x, n);
}

static double cpu_sum(slm_device *d, const float *x, int64_t n) {
    (void)d;
    return slm_vec_sum(x, n);
}

static void cpu_adamw(slm_device *d, float *p, const float *g, float *m, float *v, int64_t n,
                      float b1, float b2, float eps, float decay_mul, float step_size,
                      float bc2_sqrt) {
    (void)d;
    slm_adamw_update(p, g, m, v, n, b1, b2, eps, decay_mul, step_size, bc2_sqrt);
}

static void cpu_f32_to_bf16(slm_device *d, uint16_t *y, const float *x, int64_t n) {
    (void)d;
    slm_f32_to_bf16(x, y, n);
}

static void cpu_bf16_to_f32(slm_device *d, float *y, const uint16_t *x, int64_t n) {
    (void)d;
    slm_bf16_to_f32(x, y, n);
}

static void cpu_bf16_accumulate(slm_device *d, float *acc, const uint16_t *x, int64_t n) {
    (void)d;
    slm_bf16_accumulate(acc, x, n);
}

static void cpu_dropout(slm_device *d, uint64_t key, uint32_t thr, float scale, const float *x,
                        float *y, float *acc, int64_t n) {
    (void)d;
    slm_dropout_apply(key, thr, scale, x, y, acc, n);
}

static void cpu_softmax_rows(slm_device *d, float *s, int64_t rows, int64_t n, float scale) {
    (void)d;
    slm_softmax_rows(s, rows, n, scale);
}

static double cpu_gemm_peak(slm_device *d, bool bf16, int n, int reps) {
    (void)d;
    return bf16 ? slm_bf16_gemm_peak_gflops(n, reps) : slm_sgemm_peak_gflops(n, reps);
}

static const char *cpu_bf16_isa(slm_device *d) {
    (void)d;
    return slm_bf16_gemm_isa();
}

const slm_device_ops slm_device_cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .set_threads = cpu_set_threads,
    .threads = cpu_threads,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .rope_tables = cpu_rope_tables,
    .rope_apply = cpu_rope_apply,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .cross_entropy = cpu_cross_entropy,
    .round_bf16 = cpu_round_bf16,
    .add = cpu_add,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .fill = cpu_fill,
    .sumsq = cpu_sumsq,
    .sum = cpu_sum,
    .adamw = cpu_adamw,
    .f32_to_bf16 = cpu_f32_to_bf16,
    .bf16_to_f32 = cpu_bf16_to_f32,
    .bf16_accumulate = cpu_bf16_accumulate,
    .dropout = cpu_dropout,
    .softmax_rows = cpu_softmax_rows,
    .gemm_peak = cpu_gemm_peak,
    .bf16_isa = cpu_bf16_isa,
};
