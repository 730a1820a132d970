// device.h: handles, the public entry points (a NULL device is the CPU device), and streams /
// events, which are tokens on the synchronous CPU and SLEEP backends.
#include "device/device_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static slm_device g_cpu = {.kind = SLM_DEVICE_CPU, .ops = &slm_device_cpu_ops};

slm_device *slm_device_cpu(void) {
    return &g_cpu;
}

static inline slm_device *dev(slm_device *d) {
    return d ? d : &g_cpu;
}

static inline const slm_device *cdev(const slm_device *d) {
    return d ? d : &g_cpu;
}

// The SLEEP table with the CPU backend's memory, sync and thread entries filled in.
static slm_device_ops g_sleep_ops;
static pthread_once_t g_sleep_once = PTHREAD_ONCE_INIT;

static void sleep_ops_init(void) {
    g_sleep_ops = slm_device_sleep_ops;
    g_sleep_ops.alloc = slm_device_cpu_ops.alloc;
    g_sleep_ops.free = slm_device_cpu_ops.free;
    g_sleep_ops.zero = slm_device_cpu_ops.zero;
    g_sleep_ops.copy = slm_device_cpu_ops.copy;
    g_sleep_ops.sync = slm_device_cpu_ops.sync;
    g_sleep_ops.set_threads = slm_device_cpu_ops.set_threads;
    g_sleep_ops.threads = slm_device_cpu_ops.threads;
}

slm_device *slm_device_sleep(double gflops) {
    SLM_ASSERT(gflops > 0);
    pthread_once(&g_sleep_once, sleep_ops_init);
    slm_device *d = slm_xcalloc(1, sizeof *d);
    d->kind = SLM_DEVICE_SLEEP;
    d->ops = &g_sleep_ops;
    d->owned = true;
    d->gflops = gflops;
    return d;
}

slm_status slm_device_open(const char *spec, slm_device **out) {
    *out = NULL;
    if (spec && strcmp(spec, "cpu") == 0) {
        *out = &g_cpu;
        return SLM_OK;
    }
    if (spec && strncmp(spec, "sleep:", 6) == 0) {
        char *end = NULL;
        double g = strtod(spec + 6, &end);
        if (end != spec + 6 && *end == '\0' && g > 0 && g < 1e12) {
            *out = slm_device_sleep(g);
            return SLM_OK;
        }
    }
    int ordinal = -1;
    if (spec && strcmp(spec, "cuda") == 0) ordinal = 0;
    if (spec && strncmp(spec, "cuda:", 5) == 0) {
        char *end = NULL;
        long o = strtol(spec + 5, &end, 10);
        if (end != spec + 5 && *end == '\0' && o >= 0 && o < 4096) ordinal = (int)o;
    }
    if (ordinal >= 0) {
        slm_device *d = slm_xcalloc(1, sizeof *d);
        d->owned = true;
        slm_status st = slm_device_cuda_open(d, ordinal);
        if (st) {
            free(d);
            return st;
        }
        *out = d;
        return SLM_OK;
    }
    return slm_fail(SLM_E_ARG,
                    "device \"%s\": expected \"cpu\", \"sleep:GFLOPS\" (GFLOPS > 0), \"cuda\" "
                    "or \"cuda:N\"",
                    spec ? spec : "(null)");
}

void slm_device_close(slm_device *d) {
    if (!d || !d->owned) return;
    if (d->kind == SLM_DEVICE_CUDA) slm_device_cuda_close(d);
    free(d);
}

slm_device_kind slm_device_kind_of(const slm_device *d) {
    return cdev(d)->kind;
}

const char *slm_device_name(const slm_device *d) {
    return cdev(d)->ops->name;
}

int slm_device_set_threads(slm_device *d, int n) {
    d = dev(d);
    return d->ops->set_threads(d, n);
}

int slm_device_threads(const slm_device *d) {
    d = cdev(d);
    return d->ops->threads(d);
}

double slm_device_slept_s(const slm_device *d) {
    return cdev(d)->slept_s;
}

void slm_device_stats_read(slm_device *d, slm_device_stats *out) {
    d = dev(d);
    memset(out, 0, sizeof *out);
    out->ecc_uncorrected = -1;
    if (d->ops->stats) d->ops->stats(d, out);
}

const char *slm_device_describe(slm_device *d) {
    d = dev(d);
    if (d->ops->describe) return d->ops->describe(d);
    if (d->kind == SLM_DEVICE_SLEEP) {
        snprintf(d->desc, sizeof d->desc, "sleep (%.6g GFLOP/s)", d->gflops);
        return d->desc;
    }
    return d->ops->name;
}

void slm_device_mem_info(slm_device *d, double *free_b, double *total_b) {
    d = dev(d);
    if (d->ops->mem_info) {
        d->ops->mem_info(d, free_b, total_b);
        return;
    }
    slm_mem_info m;
    slm_mem_probe(&m);
    *free_b = m.bytes;
    *total_b = m.bytes;
}

slm_status slm_dev_mem_check(slm_device *d, double need_bytes, const char *fmt, ...) {
    d = dev(d);
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!d->ops->mem_info) return slm_mem_check(need_bytes, "%s", what);
    double fr = 0, tot = 0;
    d->ops->mem_info(d, &fr, &tot);
    if (!(need_bytes == need_bytes)) need_bytes = 1e300; // NaN: too much
    if (need_bytes <= fr) return SLM_OK;
    char a[32], b[32], c[32];
    return slm_fail(SLM_E_NOMEM,
                    "%s needs about %s of %s memory, more than the %s free (of %s on the device)",
                    what, slm_fmt_bytes(need_bytes, a), d->ops->name, slm_fmt_bytes(fr, b),
                    slm_fmt_bytes(tot, c));
}

// ---------------------------------------------------------------------------------------------
// Memory

void *slm_dev_alloc(slm_device *d, size_t bytes) {
    d = dev(d);
    return d->ops->alloc(d, bytes);
}

float *slm_dev_alloc_f32(slm_device *d, int64_t n) {
    SLM_ASSERT(n >= 0);
    return slm_dev_alloc(d, (size_t)n * sizeof(float));
}

void slm_dev_free(slm_device *d, void *p) {
    if (!p) return;
    d = dev(d);
    d->ops->free(d, p);
}

void slm_dev_zero(slm_device *d, void *p, size_t bytes) {
    d = dev(d);
    d->ops->zero(d, p, bytes);
}

void slm_dev_copy(slm_device *d, void *dst, const void *src, size_t bytes, slm_copy_dir dir) {
    d = dev(d);
    d->ops->copy(d, dst, src, bytes, dir);
}

void *slm_dev_host_alloc(slm_device *d, size_t bytes) {
    d = dev(d);
    if (d->ops->host_alloc) return d->ops->host_alloc(d, bytes);
    return slm_xaligned(bytes ? bytes : 64);
}

void slm_dev_host_free(slm_device *d, void *p) {
    if (!p) return;
    d = dev(d);
    if (d->ops->host_free)
        d->ops->host_free(d, p);
    else
        free(p);
}

// Streams and events of the synchronous backends: distinct tokens, nothing to order.
struct slm_stream {
    int unused;
};
struct slm_event {
    int unused;
};

slm_stream *slm_dev_stream_create(slm_device *d) {
    (void)d;
    return slm_xcalloc(1, sizeof(slm_stream));
}

void slm_dev_stream_destroy(slm_device *d, slm_stream *s) {
    (void)d;
    free(s);
}

slm_event *slm_dev_event_create(slm_device *d) {
    (void)d;
    return slm_xcalloc(1, sizeof(slm_event));
}

void slm_dev_event_destroy(slm_device *d, slm_event *e) {
    (void)d;
    free(e);
}

void slm_dev_event_record(slm_device *d, slm_event *e, slm_stream *s) {
    (void)d, (void)e, (void)s;
}

void slm_dev_stream_wait(slm_device *d, slm_stream *s, slm_event *e) {
    (void)d, (void)s, (void)e;
}

void slm_dev_sync(slm_device *d) {
    d = dev(d);
    d->ops->sync(d);
}

// ---------------------------------------------------------------------------------------------
// Ops: resolve the device, call its backend.

#define OP(name, ...)                                                                              \
    do {                                                                                           \
        d = dev(d);                                                                                \
        d->ops->name(d, __VA_ARGS__);                                                              \
    } while (0)

void slm_dev_linear_fwd(slm_device *d, bool bf16, float *out, const float *inp, const float *W,
                        int64_t N, int64_t I, int64_t O, bool accumulate) {
    OP(linear_fwd, bf16, out, inp, W, N, I, O, accumulate);
}

void slm_dev_linear_bwd(slm_device *d, bool bf16, float *dinp, float *dW, const float *dout,
                        const float *inp, const float *W, int64_t N, int64_t I, int64_t O) {
    OP(linear_bwd, bf16, dinp, dW, dout, inp, W, N, I, O);
}

void slm_dev_rmsnorm_fwd(slm_device *d, float *out, float *rstd, const float *inp, const float *w,
                         int64_t N, int C, float eps) {
    OP(rmsnorm_fwd, out, rstd, inp, w, N, C, eps);
}

void slm_dev_rmsnorm_bwd(slm_device *d, float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int64_t N, int C) {
    OP(rmsnorm_bwd, dinp, dw, dout, inp, w, rstd, N, C);
}

void slm_dev_rope_tables(slm_device *d, float *cos_t, float *sin_t, int T, int half,
                         const double *inv_freq) {
    OP(rope_tables, cos_t, sin_t, T, half, inv_freq);
}

void slm_dev_rope_apply(slm_device *d, float *x, const float *cos_t, const float *sin_t, int B,
                        int T, int nh, int D, int pos0, const int32_t *pos, bool inverse) {
    OP(rope_apply, x, cos_t, sin_t, B, T, nh, D, pos0, pos, inverse);
}

void slm_dev_attention_fwd(slm_device *d, float *out, float *lse, const float *q, const float *k,
                           const float *v, const int32_t *pos, int B, int T, int H, int KV, int D) {
    OP(attention_fwd, out, lse, q, k, v, pos, B, T, H, KV, D);
}

void slm_dev_attention_bwd(slm_device *d, float *dq, float *dk, float *dv, const float *dout,
                           const float *q, const float *k, const float *v, const float *out,
                           const float *lse, const int32_t *pos, int B, int T, int H, int KV,
                           int D) {
    OP(attention_bwd, dq, dk, dv, dout, q, k, v, out, lse, pos, B, T, H, KV, D);
}

void slm_dev_swiglu_fwd(slm_device *d, float *h, const float *gate, const float *up, int64_t N,
                        int64_t F) {
    OP(swiglu_fwd, h, gate, up, N, F);
}

void slm_dev_swiglu_bwd(slm_device *d, float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, int64_t N, int64_t F) {
    OP(swiglu_bwd, dgate, dup, dh, gate, up, N, F);
}

void slm_dev_embedding_fwd(slm_device *d, float *out, const int32_t *tokens, const float *table,
                           int64_t N, int C) {
    OP(embedding_fwd, out, tokens, table, N, C);
}

void slm_dev_embedding_bwd(slm_device *d, float *dtable, const int32_t *tokens, const float *dout,
                           int64_t N, int C) {
    OP(embedding_bwd, dtable, tokens, dout, N, C);
}

void slm_dev_cross_entropy(slm_device *d, float *logits, float *losses, const int32_t *targets,
                           int64_t N, int64_t V, float dscale) {
    OP(cross_entropy, logits, losses, targets, N, V, dscale);
}

void slm_dev_round_bf16(slm_device *d, float *x, int64_t n) {
    OP(round_bf16, x, n);
}

void slm_dev_add(slm_device *d, float *out, const float *a, const float *b, int64_t n) {
    OP(add, out, a, b, n);
}

void slm_dev_axpy(slm_device *d, float *y, float a, const float *x, int64_t n) {
    OP(axpy, y, a, x, n);
}

void slm_dev_scale(slm_device *d, float *x, float s, int64_t n) {
    OP(scale, x, s, n);
}

void slm_dev_fill(slm_device *d, float *x, float v, int64_t n) {
    OP(fill, x, v, n);
}

double slm_dev_sumsq(slm_device *d, const float *x, int64_t n) {
    d = dev(d);
    return d->ops->sumsq(d, x, n);
}

double slm_dev_sum(slm_device *d, const float *x, int64_t n) {
    d = dev(d);
    return d->ops->sum(d, x, n);
}

void slm_dev_adamw(slm_device *d, float *p, const float *g, float *m, float *v, int64_t n, float b1,
                   float b2, float eps, float decay_mul, float step_size, float bc2_sqrt) {
    OP(adamw, p, g, m, v, n, b1, b2, eps, decay_mul, step_size, bc2_sqrt);
}

void slm_dev_f32_to_bf16(slm_device *d, uint16_t *y, const float *x, int64_t n) {
    OP(f32_to_bf16, y, x, n);
}

void slm_dev_bf16_to_f32(slm_device *d, float *y, const uint16_t *x, int64_t n) {
    OP(bf16_to_f32, y, x, n);
}

void slm_dev_bf16_accumulate(slm_device *d, float *acc, const uint16_t *x, int64_t n) {
    OP(bf16_accumulate, acc, x, n);
}

void slm_dev_dropout(slm_device *d, uint64_t key, uint32_t thr, float scale, const float *x,
                     float *y, float *acc, int64_t n) {
    OP(dropout, key, thr, scale, x, y, acc, n);
}

void slm_dev_softmax_rows(slm_device *d, float *s, int64_t rows, int64_t n, float scale) {
    OP(softmax_rows, s, rows, n, scale);
}

double slm_dev_gemm_peak_gflops(slm_device *d, bool bf16, int n, int reps) {
    d = dev(d);
    return d->ops->gemm_peak(d, bf16, n, reps);
}

const char *slm_dev_bf16_isa(slm_device *d) {
    d = dev(d);
    return d->ops->bf16_isa(d);
}
