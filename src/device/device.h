// device: the one interface through which model/, fsdp/, optim/, train/ and health/ reach the
// memory a step computes on and every op a step computes with (docs/architecture.md, "device").
//
// A device is a handle with a table of functions (a backend), as ggml's backend interface
// (ggml-backend-impl.h: a struct of function pointers per backend, every op taking the backend
// first). Three backends:
//   CPU    host memory (64-byte aligned); ops are kernels/ (OpenBLAS sgemm, oneDNN bf16 GEMM,
//          OpenMP loops); streams and events are trivially synchronous.
//   SLEEP  --simulate-compute GFLOPS: host memory; GEMM-like ops (linear, attention) sleep for
//          their FLOPs / rate, every other op does nothing, so the real schedule (unit hooks,
//          collectives, optimizer calls) runs unchanged on a few cores without the arithmetic.
//   CUDA   device memory (cudaMalloc), one compute stream, kernels/cuda/ and cuBLASLt bf16 GEMMs
//          (cuda.c; compiled in CI, NOT YET RUN on a GPU). bf16 compute only.
// Device pointers: `float *` / `void *` values that only this interface may dereference.
// On the CPU and SLEEP devices they are host addresses; code above the device layer must
// still read and write them only through slm_dev_copy (or the ops), so that a CUDA device can
// attach without changing it. Ops run in issue order on the device's compute stream (llm.c's
// CUDA code passes a stream to each kernel; here the stream is the device's own, and only copies
// and collectives name another); results are visible to the host after slm_dev_sync or a
// synchronous copy / reduction to the host.
// A NULL device means the process-wide CPU device (slm_device_cpu()), so host-only callers and
// tests need not create one.
// Determinism: every op gives bitwise-identical results for a fixed device and thread count
// (kernels.h). Errors: allocation failure is fatal (slm_fatal naming the bytes), as
// slm_xaligned; contract violations (NULL where a buffer is needed) are assertions.
#ifndef SLM_DEVICE_H
#define SLM_DEVICE_H

#include "base/base.h"

typedef enum { SLM_DEVICE_CPU = 0, SLM_DEVICE_SLEEP = 1, SLM_DEVICE_CUDA = 2 } slm_device_kind;

typedef struct slm_device slm_device;

// The process-wide CPU device (never freed; slm_device_close ignores it).
slm_device *slm_device_cpu(void);
// A SLEEP device computing at `gflops` GFLOP/s (> 0). Owned: slm_device_close.
slm_device *slm_device_sleep(double gflops);
// Opens a device from a spec: "cpu", "sleep:GFLOPS", "cuda" (= "cuda:0"), "cuda:N". Errors:
// SLM_E_ARG naming the spec and the accepted forms; SLM_E_UNSUPPORTED for a CUDA device in a
// build without the CUDA backend, or when none (or not N) is visible, saying which.
slm_status slm_device_open(const char *spec, slm_device **out);
// Frees a device from slm_device_open / slm_device_sleep after everything allocated on it (CUDA:
// its stream, cuBLASLt context and scratch); NULL and the CPU device: nothing.
void slm_device_close(slm_device *d);
// The backend of d (NULL: SLM_DEVICE_CPU).
slm_device_kind slm_device_kind_of(const slm_device *d);
// "cpu", "sleep" or "cuda" (static string).
const char *slm_device_name(const slm_device *d);
// Compute threads of the device (CPU: the OpenMP threads every kernel runs on; n <= 0 leaves
// them as they are). Returns the count in effect.
int slm_device_set_threads(slm_device *d, int n);
int slm_device_threads(const slm_device *d);
// Seconds the SLEEP device slept since it was created (0 on the others).
double slm_device_slept_s(const slm_device *d);

// Counters of a GPU as DCGM's exporter reports them (NVML, device/nvml.c), for Prometheus gauges
// and the health check. valid is false where there are none (CPU, SLEEP, no NVML library): the
// fields are then meaningless, never "zero".
typedef struct slm_device_stats {
    bool valid;
    double mem_used_b, mem_total_b; // device memory in use (all processes), total
    double util_ratio;              // busy fraction of the last sample period, [0, 1]
    double power_w;                 // board power draw
    double temp_c;                  // GPU temperature
    double ecc_uncorrected;         // uncorrected ECC errors since the driver loaded (-1: n/a)
} slm_device_stats;
void slm_device_stats_read(slm_device *d, slm_device_stats *out);
// What the device is, e.g. "cpu", "sleep (500 GFLOP/s)", "cuda:0 NVIDIA H200 (sm_90)" (valid
// until slm_device_close).
const char *slm_device_describe(slm_device *d);

// Free and total bytes of the device's memory: CPU and SLEEP: what this process can still
// allocate (base.h slm_mem_probe; total = free there); CUDA: cudaMemGetInfo.
void slm_device_mem_info(slm_device *d, double *free_b, double *total_b);
// SLM_OK when `need_bytes` fit in the device's free memory, else SLM_E_NOMEM: "<what> needs about
// N of <device> memory, more than the F free (...)" (`what` printf-style). The check every
// subcommand runs before allocating a model on a device (CPU: base.h slm_mem_check).
slm_status slm_dev_mem_check(slm_device *d, double need_bytes, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// ---------------------------------------------------------------------------------------------
// Memory. Buffers are 64-byte aligned, contents undefined until written (slm_dev_zero).
void *slm_dev_alloc(slm_device *d, size_t bytes);
// floats: slm_dev_alloc(d, n * 4).
float *slm_dev_alloc_f32(slm_device *d, int64_t n);
void slm_dev_free(slm_device *d, void *p); // NULL is a no-op
void slm_dev_zero(slm_device *d, void *p, size_t bytes);
typedef enum { SLM_H2D, SLM_D2H, SLM_D2D } slm_copy_dir;
// Copies `bytes`; synchronous on the host: a D2H copy's data is in dst on return (the compute
// stream is drained first), an H2D copy's src may be reused on return.
void slm_dev_copy(slm_device *d, void *dst, const void *src, size_t bytes, slm_copy_dir dir);
// Host memory for staging device <-> host copies (pinned on CUDA; aligned host memory here).
void *slm_dev_host_alloc(slm_device *d, size_t bytes);
void slm_dev_host_free(slm_device *d, void *p);

// Streams and events: ordering between the compute stream and a side stream (communication,
// checkpoint staging). Trivially synchronous on CPU and SLEEP (record / wait do nothing).
typedef struct slm_stream slm_stream;
typedef struct slm_event slm_event;
slm_stream *slm_dev_stream_create(slm_device *d);
void slm_dev_stream_destroy(slm_device *d, slm_stream *s);
slm_event *slm_dev_event_create(slm_device *d);
void slm_dev_event_destroy(slm_device *d, slm_event *e);
// Records e on stream s (NULL: the compute stream); makes stream s wait for e.
void slm_dev_event_record(slm_device *d, slm_event *e, slm_stream *s);
void slm_dev_stream_wait(slm_device *d, slm_stream *s, slm_event *e);
// Waits until everything queued on the device has finished.
void slm_dev_sync(slm_device *d);

// ---------------------------------------------------------------------------------------------
// Ops: the contracts (shapes, layouts, accumulate rules, bounds) of the kernels.h functions of
// the same name; every pointer is device memory unless said. `bf16`: bf16 compute (operands
// rounded to bf16, fp32 accumulation: kernels.h slm_linear_fwd).

void slm_dev_linear_fwd(slm_device *d, bool bf16, float *out, const float *inp, const float *W,
                        int64_t N, int64_t I, int64_t O, bool accumulate);
void slm_dev_linear_bwd(slm_device *d, bool bf16, float *dinp, float *dW, const float *dout,
                        const float *inp, const float *W, int64_t N, int64_t I, int64_t O);
void slm_dev_rmsnorm_fwd(slm_device *d, float *out, float *rstd, const float *inp, const float *w,
                         int64_t N, int C, float eps);
void slm_dev_rmsnorm_bwd(slm_device *d, float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int64_t N, int C);
// RoPE tables cos, sin [T, half] (device) from inv_freq [half] (HOST, double).
void slm_dev_rope_tables(slm_device *d, float *cos_t, float *sin_t, int T, int half,
                         const double *inv_freq);
// pos NULL: row t at pos0 + t (kernels.h slm_rope_apply); else pos [B, T] on the device
// (slm_rope_apply_pos).
void slm_dev_rope_apply(slm_device *d, float *x, const float *cos_t, const float *sin_t, int B,
                        int T, int nh, int D, int pos0, const int32_t *pos, bool inverse);
// pos NULL: causal (slm_attention_fwd / _bwd); else packed (slm_attention_fwd_packed / _bwd).
void slm_dev_attention_fwd(slm_device *d, float *out, float *lse, const float *q, const float *k,
                           const float *v, const int32_t *pos, int B, int T, int H, int KV, int D);
void slm_dev_attention_bwd(slm_device *d, float *dq, float *dk, float *dv, const float *dout,
                           const float *q, const float *k, const float *v, const float *out,
                           const float *lse, const int32_t *pos, int B, int T, int H, int KV,
                           int D);
void slm_dev_swiglu_fwd(slm_device *d, float *h, const float *gate, const float *up, int64_t N,
                        int64_t F);
void slm_dev_swiglu_bwd(slm_device *d, float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, int64_t N, int64_t F);
void slm_dev_embedding_fwd(slm_device *d, float *out, const int32_t *tokens, const float *table,
                           int64_t N, int C);
void slm_dev_embedding_bwd(slm_device *d, float *dtable, const int32_t *tokens, const float *dout,
                           int64_t N, int C);
void slm_dev_cross_entropy(slm_device *d, float *logits, float *losses, const int32_t *targets,
                           int64_t N, int64_t V, float dscale);
// x[i] = fp32(bf16(x[i])) (slm_round_bf16).
void slm_dev_round_bf16(slm_device *d, float *x, int64_t n);
// out[i] = a[i] + b[i] (out may alias a).
void slm_dev_add(slm_device *d, float *out, const float *a, const float *b, int64_t n);
// y[i] += a * x[i].
void slm_dev_axpy(slm_device *d, float *y, float a, const float *x, int64_t n);
// x[i] *= s.
void slm_dev_scale(slm_device *d, float *x, float s, int64_t n);
// x[i] = v.
void slm_dev_fill(slm_device *d, float *x, float v, int64_t n);
// Sum of x[i]^2 in double, fixed blocks of 16384 summed in order (thread-count independent);
// returned to the host (synchronizes).
double slm_dev_sumsq(slm_device *d, const float *x, int64_t n);
// Sum of x[i] in double, in index order; returned to the host (synchronizes).
double slm_dev_sum(slm_device *d, const float *x, int64_t n);
// One AdamW segment (optim.h): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p = p * decay_mul - step_size * m / (sqrt(v) / bc2_sqrt + eps); n elements.
void slm_dev_adamw(slm_device *d, float *p, const float *g, float *m, float *v, int64_t n, float b1,
                   float b2, float eps, float decay_mul, float step_size, float bc2_sqrt);
// fp32 <-> bf16 (uint16 bit patterns; round to nearest even), n elements.
void slm_dev_f32_to_bf16(slm_device *d, uint16_t *y, const float *x, int64_t n);
void slm_dev_bf16_to_f32(slm_device *d, float *y, const uint16_t *x, int64_t n);
// acc[i] += fp32(x[i]) for a bf16 x (gradient shards reduced in bf16).
void slm_dev_bf16_accumulate(slm_device *d, float *acc, const uint16_t *x, int64_t n);
// Inverted dropout with the counter-based mask of model.h slm_lora_dropout_keep: group g of 4
// elements draws h = slm_mix64(key ^ g); element 4g + k is kept when (h >> 16k) & 0xffff >=
// thr; kept elements are x[i] * scale. y non-NULL: y[i] = kept ? x[i] * scale : 0; y NULL:
// acc[i] += x[i] * scale for kept elements.
void slm_dev_dropout(slm_device *d, uint64_t key, uint32_t thr, float scale, const float *x,
                     float *y, float *acc, int64_t n);
// Row-wise softmax of s [rows, n] after scaling by `scale` (max-subtracted, double row sums).
void slm_dev_softmax_rows(slm_device *d, float *s, int64_t rows, int64_t n, float scale);

// Measured GEMM rates of this device in GFLOP/s (square n x n x n, best of reps): fp32 and bf16
// compute (kernels.h slm_sgemm_peak_gflops / slm_bf16_gemm_peak_gflops); the SLEEP device
// returns its rate.
double slm_dev_gemm_peak_gflops(slm_device *d, bool bf16, int n, int reps);
// The instruction set the bf16 GEMM runs on (CPU: oneDNN's ISA), static string.
const char *slm_dev_bf16_isa(slm_device *d);

#endif
