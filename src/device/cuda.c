// The CUDA backend of device.h (issue 22): device memory (cudaMalloc, never managed memory), one
// compute stream per device, the kernels of kernels/cuda/ and bf16 GEMMs through cuBLASLt
// (operands cast to bf16 into scratch buffers owned here, fp32 accumulation and output: the
// numerics of the CPU backend's bf16 compute, which is its reference). fp32 compute is not
// offered on the GPU (callers choose --compute-dtype bf16 there); the linear ops say so.
// A kernel's failure is fatal with the op and CUDA's message (the trainer's abort path ends the
// job, as for any fatal error under MPI). Without SLM_HAVE_CUDA only the open function exists
// and reports that the build has no CUDA backend.
// NOT YET RUN ON A GPU: compiled in CI (nvcc, warnings as errors); tests/gpu/test_cuda_device.c
// compares every op with the CPU device and exits 77 without a GPU.
#include "device/device_internal.h"

#ifndef SLM_HAVE_CUDA

slm_status slm_device_cuda_open(slm_device *d, int ordinal) {
    (void)d;
    return slm_fail(SLM_E_UNSUPPORTED,
                    "device \"cuda:%d\": this build has no CUDA backend (CMake found no nvcc; "
                    "build with -DSLM_CUDA=ON where the CUDA toolkit is installed)",
                    ordinal);
}

void slm_device_cuda_close(slm_device *d) {
    (void)d;
}

#else

#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

typedef struct cuda_state {
    int ordinal;
    void *stream;
    slm_cuda_gemm_ctx *gemm;
    void *bf[3];      // bf16 operand scratch of the linear ops
    size_t bf_cap[3]; // bytes of each
    float *att;       // attention backward scratch [B * H * T]
    size_t att_cap;   // bytes
    double *scalar;   // one device double: sums come back through it
    char isa[64];     // "cuBLASLt bf16 (sm_90)"
    char pci[32];     // PCI bus id (NVML finds the GPU by it)
} cuda_state;

static cuda_state *st(slm_device *d) {
    return (cuda_state *)d->impl;
}

static void ck(int rc, const char *what) {
    if (rc) slm_fatal("device cuda: %s failed: %s", what, slm_cuda_strerror(rc));
}

// Scratch buffer i with at least `bytes` (grown by reallocation; contents not kept).
static void *scratch(cuda_state *s, int i, size_t bytes) {
    if (s->bf_cap[i] < bytes) {
        if (s->bf[i]) ck(slm_cuda_free(s->bf[i]), "cudaFree (scratch)");
        s->bf[i] = NULL;
        ck(slm_cuda_malloc(&s->bf[i], bytes), "cudaMalloc (bf16 operand scratch)");
        s->bf_cap[i] = bytes;
    }
    return s->bf[i];
}

static void *cu_alloc(slm_device *d, size_t bytes) {
    void *p = NULL;
    int rc = slm_cuda_malloc(&p, bytes ? bytes : 256);
    if (rc) {
        size_t fr = 0, tot = 0;
        slm_cuda_mem_info(&fr, &tot);
        slm_fatal("device cuda:%d: cudaMalloc of %zu bytes failed (%s); %zu of %zu bytes free",
                  st(d)->ordinal, bytes, slm_cuda_strerror(rc), fr, tot);
    }
    return p;
}

static void cu_free(slm_device *d, void *p) {
    (void)d;
    ck(slm_cuda_free(p), "cudaFree");
}

static void cu_zero(slm_device *d, void *p, size_t bytes) {
    if (bytes) ck(slm_cuda_memset_async(p, 0, bytes, st(d)->stream), "cudaMemsetAsync");
}

static void cu_sync(slm_device *d) {
    ck(slm_cuda_stream_sync(st(d)->stream), "cudaStreamSynchronize");
}

// Host <-> device copies are synchronous on return (device.h); device-to-device ones are queued.
static void cu_copy(slm_device *d, void *dst, const void *src, size_t bytes, slm_copy_dir dir) {
    if (!bytes || dst == src) return;
    ck(slm_cuda_memcpy_async(dst, src, bytes, st(d)->stream), "cudaMemcpyAsync");
    if (dir != SLM_D2D) cu_sync(d);
}

static int cu_set_threads(slm_device *d, int n) {
    (void)d;
    return slm_kernels_set_threads(n); // host threads (staging, loaders)
}

static int cu_threads(const slm_device *d) {
    (void)d;
    return slm_kernels_threads();
}

static void cu_mem_info(slm_device *d, double *free_b, double *total_b) {
    size_t fr = 0, tot = 0;
    ck(slm_cuda_mem_info(&fr, &tot), "cudaMemGetInfo");
    (void)d;
    *free_b = (double)fr;
    *total_b = (double)tot;
}

// Pinned (page-locked) host memory: D2H / H2D copies from it run at full PCIe / NVLink speed and
// asynchronously (the checkpoint staging of issue 22).
static void *cu_host_alloc(slm_device *d, size_t bytes) {
    void *p = NULL;
    int rc = slm_cuda_host_alloc(&p, bytes ? bytes : 64);
    if (rc)
        slm_fatal("device cuda:%d: cudaMallocHost of %zu bytes failed: %s", st(d)->ordinal, bytes,
                  slm_cuda_strerror(rc));
    return p;
}

static void cu_host_free(slm_device *d, void *p) {
    (void)d;
    ck(slm_cuda_host_free(p), "cudaFreeHost");
}

static void cu_stats(slm_device *d, slm_device_stats *out) {
    slm_device_nvml_read(st(d)->pci, out);
}

static const char *cu_describe(slm_device *d) {
    return d->desc;
}

static void need_bf16(bool bf16) {
    if (!bf16)
        slm_fatal("device cuda: fp32 compute is not implemented on the GPU; use --compute-dtype "
                  "bf16 (tensor-core numerics, checked against the CPU's bf16 path)");
}

// x [n] fp32 -> scratch i as bf16.
static const void *as_bf16(slm_device *d, int i, const float *x, int64_t n) {
    void *b = scratch(st(d), i, (size_t)n * 2);
    ck(slm_cuda_f32_to_bf16(b, x, n, st(d)->stream), "fp32 -> bf16 cast");
    return b;
}

static void gemm(slm_device *d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                 int64_t lda, const void *B, int64_t ldb, bool acc, float *C, int64_t ldc) {
    ck(slm_cuda_gemm_bf16(st(d)->gemm, ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc, st(d)->stream),
       "cuBLASLt bf16 GEMM");
}

// out[N, O] (+)= inp[N, I] W[O, I]^T
static void cu_linear_fwd(slm_device *d, bool bf16, float *out, const float *inp, const float *W,
                          int64_t N, int64_t I, int64_t O, bool accumulate) {
    need_bf16(bf16);
    const void *a = as_bf16(d, 0, inp, N * I), *w = as_bf16(d, 1, W, O * I);
    gemm(d, false, true, N, O, I, a, I, w, I, accumulate, out, O);
}

// dinp[N, I] += dout[N, O] W[O, I];  dW[O, I] += dout^T inp
static void cu_linear_bwd(slm_device *d, bool bf16, float *dinp, float *dW, const float *dout,
                          const float *inp, const float *W, int64_t N, int64_t I, int64_t O) {
    need_bf16(bf16);
    const void *g = as_bf16(d, 0, dout, N * O);
    if (dinp) gemm(d, false, false, N, I, O, g, O, as_bf16(d, 1, W, O * I), I, true, dinp, I);
    if (dW) gemm(d, true, false, O, I, N, g, O, as_bf16(d, 2, inp, N * I), I, true, dW, I);
}

static void cu_rmsnorm_fwd(slm_device *d, float *out, float *rstd, const float *inp, const float *w,
                           int64_t N, int C, float eps) {
    ck(slm_cuda_rmsnorm_fwd(out, rstd, inp, w, N, C, eps, st(d)->stream), "RMSNorm forward");
}

static void cu_rmsnorm_bwd(slm_device *d, float *dinp, float *dw, const float *dout,
                           const float *inp, const float *w, const float *rstd, int64_t N, int C) {
    ck(slm_cuda_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C, st(d)->stream), "RMSNorm backward");
}

// The tables are computed on the host in double (kernels.h) and copied.
static void cu_rope_tables(slm_device *d, float *cos_t, float *sin_t, int T, int half,
                           const double *inv_freq) {
    size_t bytes = (size_t)T * (size_t)half * sizeof(float);
    float *hc = slm_xaligned(bytes ? bytes : 64), *hs = slm_xaligned(bytes ? bytes : 64);
    slm_rope_tables_freq(hc, hs, T, half, inv_freq);
    cu_copy(d, cos_t, hc, bytes, SLM_H2D);
    cu_copy(d, sin_t, hs, bytes, SLM_H2D);
    free(hc);
    free(hs);
}

static void cu_rope_apply(slm_device *d, float *x, const float *cos_t, const float *sin_t, int B,
                          int T, int nh, int D, int pos0, const int32_t *pos, bool inverse) {
    ck(slm_cuda_rope_apply(x, cos_t, sin_t, B, T, nh, D, pos0, pos, inverse, st(d)->stream),
       "RoPE");
}

static void cu_attention_fwd(slm_device *d, float *out, float *lse, const float *q, const float *k,
                             const float *v, const int32_t *pos, int B, int T, int H, int KV,
                             int D) {
    ck(slm_cuda_attention_fwd(out, lse, q, k, v, pos, B, T, H, KV, D, st(d)->stream),
       "attention forward");
}

static void cu_attention_bwd(slm_device *d, float *dq, float *dk, float *dv, const float *dout,
                             const float *q, const float *k, const float *v, const float *out,
                             const float *lse, const int32_t *pos, int B, int T, int H, int KV,
                             int D) {
    cuda_state *s = st(d);
    size_t bytes = (size_t)B * (size_t)H * (size_t)T * sizeof(float);
    if (s->att_cap < bytes) {
        if (s->att) ck(slm_cuda_free(s->att), "cudaFree (attention scratch)");
        s->att = NULL;
        ck(slm_cuda_malloc((void **)&s->att, bytes), "cudaMalloc (attention scratch)");
        s->att_cap = bytes;
    }
    ck(slm_cuda_attention_bwd(dq, dk, dv, s->att, dout, q, k, v, out, lse, pos, B, T, H, KV, D,
                              s->stream),
       "attention backward");
}

static void cu_swiglu_fwd(slm_device *d, float *h, const float *gate, const float *up, int64_t N,
                          int64_t F) {
    ck(slm_cuda_swiglu_fwd(h, gate, up, N * F, st(d)->stream), "SwiGLU forward");
}

static void cu_swiglu_bwd(slm_device *d, float *dgate, float *dup, const float *dh,
                          const float *gate, const float *up, int64_t N, int64_t F) {
    ck(slm_cuda_swiglu_bwd(dgate, dup, dh, gate, up, N * F, st(d)->stream), "SwiGLU backward");
}

static void cu_embedding_fwd(slm_device *d, float *out, const int32_t *tokens, const float *table,
                             int64_t N, int C) {
    ck(slm_cuda_embedding_fwd(out, tokens, table, N, C, st(d)->stream), "embedding forward");
}

static void cu_embedding_bwd(slm_device *d, float *dtable, const int32_t *tokens, const float *dout,
                             int64_t N, int C) {
    ck(slm_cuda_embedding_bwd(dtable, tokens, dout, N, C, st(d)->stream), "embedding backward");
}

static void cu_cross_entropy(slm_device *d, float *logits, float *losses, const int32_t *targets,
                             int64_t N, int64_t V, float dscale) {
    ck(slm_cuda_cross_entropy(logits, losses, targets, N, V, dscale, st(d)->stream),
       "cross-entropy");
}

static void cu_round_bf16(slm_device *d, float *x, int64_t n) {
    ck(slm_cuda_round_bf16(x, n, st(d)->stream), "bf16 rounding");
}

static void cu_add(slm_device *d, float *out, const float *a, const float *b, int64_t n) {
    ck(slm_cuda_add(out, a, b, n, st(d)->stream), "add");
}

static void cu_axpy(slm_device *d, float *y, float a, const float *x, int64_t n) {
    ck(slm_cuda_axpy(y, a, x, n, st(d)->stream), "axpy");
}

static void cu_scale(slm_device *d, float *x, float s, int64_t n) {
    ck(slm_cuda_scale(x, s, n, st(d)->stream), "scale");
}

static void cu_fill(slm_device *d, float *x, float v, int64_t n) {
    ck(slm_cuda_fill(x, v, n, st(d)->stream), "fill");
}

static double scalar_back(slm_device *d) {
    double r = 0;
    cu_copy(d, &r, st(d)->scalar, sizeof r, SLM_D2H);
    return r;
}

static double cu_sumsq(slm_device *d, const float *x, int64_t n) {
    if (n <= 0) return 0.0;
    ck(slm_cuda_sumsq(st(d)->scalar, x, n, st(d)->stream), "sum of squares");
    return scalar_back(d);
}

static double cu_sum(slm_device *d, const float *x, int64_t n) {
    if (n <= 0) return 0.0;
    ck(slm_cuda_sum(st(d)->scalar, x, n, st(d)->stream), "sum");
    return scalar_back(d);
}

static void cu_adamw(slm_device *d, float *p, const float *g, float *m, float *v, int64_t n,
                     float b1, float b2, float eps, float decay_mul, float step_size,
                     float bc2_sqrt) {
    ck(slm_cuda_adamw_segment(p, g, m, v, n, b1, b2, eps, decay_mul, step_size, bc2_sqrt,
                              st(d)->stream),
       "AdamW");
}

static void cu_f32_to_bf16(slm_device *d, uint16_t *y, const float *x, int64_t n) {
    ck(slm_cuda_f32_to_bf16(y, x, n, st(d)->stream), "fp32 -> bf16 cast");
}

static void cu_bf16_to_f32(slm_device *d, float *y, const uint16_t *x, int64_t n) {
    ck(slm_cuda_bf16_to_f32(y, x, n, st(d)->stream), "bf16 -> fp32 cast");
}

static void cu_bf16_accumulate(slm_device *d, float *acc, const uint16_t *x, int64_t n) {
    ck(slm_cuda_bf16_accumulate(acc, x, n, st(d)->stream), "bf16 accumulate");
}

static void cu_dropout(slm_device *d, uint64_t key, uint32_t thr, float scale, const float *x,
                       float *y, float *acc, int64_t n) {
    ck(slm_cuda_dropout(key, thr, scale, x, y, acc, n, st(d)->stream), "dropout");
}

static void cu_softmax_rows(slm_device *d, float *s, int64_t rows, int64_t n, float scale) {
    ck(slm_cuda_softmax_rows(s, rows, n, scale, st(d)->stream), "row softmax");
}

// Square bf16 GEMMs C = A B^T of size n on device buffers of fixed non-zero values, best of reps.
static double cu_gemm_peak(slm_device *d, bool bf16, int n, int reps) {
    need_bf16(bf16);
    if (n <= 0) n = 8192;
    if (reps <= 0) reps = 5;
    int64_t nn = (int64_t)n * n;
    float *a = cu_alloc(d, (size_t)nn * 4), *c = cu_alloc(d, (size_t)nn * 4);
    cu_fill(d, a, 0.5f, nn);
    const void *ab = as_bf16(d, 0, a, nn);
    gemm(d, false, true, n, n, n, ab, n, ab, n, false, c, n); // warm-up, algorithm chosen
    cu_sync(d);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = slm_time_s();
        gemm(d, false, true, n, n, n, ab, n, ab, n, false, c, n);
        cu_sync(d);
        double g = 2.0 * (double)nn * n / (slm_time_s() - t0) / 1e9;
        if (g > best) best = g;
    }
    cu_free(d, a);
    cu_free(d, c);
    return best;
}

static const char *cu_isa(slm_device *d) {
    return st(d)->isa;
}

static const slm_device_ops k_cuda_ops = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .zero = cu_zero,
    .copy = cu_copy,
    .sync = cu_sync,
    .set_threads = cu_set_threads,
    .threads = cu_threads,
    .mem_info = cu_mem_info,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .stats = cu_stats,
    .describe = cu_describe,
    .linear_fwd = cu_linear_fwd,
    .linear_bwd = cu_linear_bwd,
    .rmsnorm_fwd = cu_rmsnorm_fwd,
    .rmsnorm_bwd = cu_rmsnorm_bwd,
    .rope_tables = cu_rope_tables,
    .rope_apply = cu_rope_apply,
    .attention_fwd = cu_attention_fwd,
    .attention_bwd = cu_attention_bwd,
    .swiglu_fwd = cu_swiglu_fwd,
    .swiglu_bwd = cu_swiglu_bwd,
    .embedding_fwd = cu_embedding_fwd,
    .embedding_bwd = cu_embedding_bwd,
    .cross_entropy = cu_cross_entropy,
    .round_bf16 = cu_round_bf16,
    .add = cu_add,
    .axpy = cu_axpy,
    .scale = cu_scale,
    .fill = cu_fill,
    .sumsq = cu_sumsq,
    .sum = cu_sum,
    .adamw = cu_adamw,
    .f32_to_bf16 = cu_f32_to_bf16,
    .bf16_to_f32 = cu_bf16_to_f32,
    .bf16_accumulate = cu_bf16_accumulate,
    .dropout = cu_dropout,
    .softmax_rows = cu_softmax_rows,
    .gemm_peak = cu_gemm_peak,
    .bf16_isa = cu_isa,
};

slm_status slm_device_cuda_open(slm_device *d, int ordinal) {
    int n = 0;
    int rc = slm_cuda_device_count(&n);
    if (rc || n == 0)
        return slm_fail(SLM_E_UNSUPPORTED, "device \"cuda:%d\": no CUDA device visible (%s)",
                        ordinal, rc ? slm_cuda_strerror(rc) : "0 devices");
    if (ordinal < 0 || ordinal >= n)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "device \"cuda:%d\": this process sees %d CUDA device(s) (0..%d)", ordinal,
                        n, n - 1);
    rc = slm_cuda_set_device(ordinal);
    if (rc)
        return slm_fail(SLM_E_UNSUPPORTED, "cudaSetDevice(%d): %s", ordinal, slm_cuda_strerror(rc));
    cuda_state *s = slm_xcalloc(1, sizeof *s);
    s->ordinal = ordinal;
    d->kind = SLM_DEVICE_CUDA;
    d->ops = &k_cuda_ops;
    d->impl = s;
    ck(slm_cuda_stream_create(&s->stream), "cudaStreamCreate");
    ck(slm_cuda_gemm_create(&s->gemm), "cuBLASLt context");
    ck(slm_cuda_malloc((void **)&s->scalar, sizeof(double)), "cudaMalloc (scalar)");
    snprintf(s->isa, sizeof s->isa, "cuBLASLt bf16 (CUDA device %d)", ordinal);
    char name[64] = "?";
    slm_cuda_device_name(ordinal, name, (int)sizeof name);
    snprintf(d->desc, sizeof d->desc, "cuda:%d %s", ordinal, name);
    if (slm_cuda_pci_bus_id(ordinal, s->pci, (int)sizeof s->pci)) s->pci[0] = '\0';
    return SLM_OK;
}

void slm_device_cuda_close(slm_device *d) {
    cuda_state *s = st(d);
    if (!s) return;
    cu_sync(d);
    for (int i = 0; i < 3; i++)
        if (s->bf[i]) slm_cuda_free(s->bf[i]);
    if (s->att) slm_cuda_free(s->att);
    if (s->scalar) slm_cuda_free(s->scalar);
    if (s->gemm) slm_cuda_gemm_destroy(s->gemm);
    if (s->stream) slm_cuda_stream_destroy(s->stream);
    free(s);
    d->impl = NULL;
}

#endif
