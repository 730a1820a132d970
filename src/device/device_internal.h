// device_internal: the backend table behind device.h (private to src/device/). A backend fills
// one slm_device_ops; the public slm_dev_* functions resolve a NULL device to the CPU device and
// call through the table. Every entry is required (a backend without an op says so in its own
// function, never through a NULL pointer).
#ifndef SLM_DEVICE_INTERNAL_H
#define SLM_DEVICE_INTERNAL_H

#include "device/device.h"

typedef struct slm_device_ops {
    const char *name;
    void *(*alloc)(slm_device *d, size_t bytes);
    void (*free)(slm_device *d, void *p);
    void (*zero)(slm_device *d, void *p, size_t bytes);
    void (*copy)(slm_device *d, void *dst, const void *src, size_t bytes, slm_copy_dir dir);
    void (*sync)(slm_device *d);
    int (*set_threads)(slm_device *d, int n);
    int (*threads)(const slm_device *d);
    // free / total bytes (CUDA only: NULL means the host's memory, base.h slm_mem_probe)
    void (*mem_info)(slm_device *d, double *free_b, double *total_b);
    // pinned host staging (NULL: 64-byte aligned host memory)
    void *(*host_alloc)(slm_device *d, size_t bytes);
    void (*host_free)(slm_device *d, void *p);
    // counters (NULL: none, valid = false) and a description (NULL: the name)
    void (*stats)(slm_device *d, slm_device_stats *out);
    const char *(*describe)(slm_device *d);
    void (*linear_fwd)(slm_device *d, bool bf16, float *out, const float *inp, const float *W,
                       int64_t N, int64_t I, int64_t O, bool accumulate);
    void (*linear_bwd)(slm_device *d, bool bf16, float *dinp, float *dW, const float *dout,
                       const float *inp, const float *W, int64_t N, int64_t I, int64_t O);
    void (*rmsnorm_fwd)(slm_device *d, float *out, float *rstd, const float *inp, const float *w,
                        int64_t N, int C, float eps);
    void (*rmsnorm_bwd)(slm_device *d, float *dinp, float *dw, const float *dout, const float *inp,
                        const float *w, const float *rstd, int64_t N, int C);
    void (*rope_tables)(slm_device *d, float *cos_t, float *sin_t, int T, int half,
                        const double *inv_freq);
    void (*rope_apply)(slm_device *d, float *x, const float *cos_t, const float *sin_t, int B,
                       int T, int nh, int D, int pos0, const int32_t *pos, bool inverse);
    void (*attention_fwd)(slm_device *d, float *out, float *lse, const float *q, const float *k,
                          const float *v, const int32_t *pos, int B, int T, int H, int KV, int D);
    void (*attention_bwd)(slm_device *d, float *dq, float *dk, float *dv, const float *dout,
                          const float *q, const float *k, const float *v, const float *out,
                          const float *lse, const int32_t *pos, int B, int T, int H, int KV, int D);
    void (*swiglu_fwd)(slm_device *d, float *h, const float *gate, const float *up, int64_t N,
                       int64_t F);
    void (*swiglu_bwd)(slm_device *d, float *dgate, float *dup, const float *dh, const float *gate,
                       const float *up, int64_t N, int64_t F);
    void (*embedding_fwd)(slm_device *d, float *out, const int32_t *tokens, const float *table,
                          int64_t N, int C);
    void (*embedding_bwd)(slm_device *d, float *dtable, const int32_t *tokens, const float *dout,
                          int64_t N, int C);
    void (*cross_entropy)(slm_device *d, float *logits, float *losses, const int32_t *targets,
                          int64_t N, int64_t V, float dscale);
    void (*round_bf16)(slm_device *d, float *x, int64_t n);
    void (*add)(slm_device *d, float *out, const float *a, const float *b, int64_t n);
    void (*axpy)(slm_device *d, float *y, float a, const float *x, int64_t n);
    void (*scale)(slm_device *d, float *x, float s, int64_t n);
    void (*fill)(slm_device *d, float *x, float v, int64_t n);
    double (*sumsq)(slm_device *d, const float *x, int64_t n);
    double (*sum)(slm_device *d, const float *x, int64_t n);
    void (*adamw)(slm_device *d, float *p, const float *g, float *m, float *v, int64_t n, float b1,
                  float b2, float eps, float decay_mul, float step_size, float bc2_sqrt);
    void (*f32_to_bf16)(slm_device *d, uint16_t *y, const float *x, int64_t n);
    void (*bf16_to_f32)(slm_device *d, float *y, const uint16_t *x, int64_t n);
    void (*bf16_accumulate)(slm_device *d, float *acc, const uint16_t *x, int64_t n);
    void (*dropout)(slm_device *d, uint64_t key, uint32_t thr, float scale, const float *x,
                    float *y, float *acc, int64_t n);
    void (*softmax_rows)(slm_device *d, float *s, int64_t rows, int64_t n, float scale);
    double (*gemm_peak)(slm_device *d, bool bf16, int n, int reps);
    const char *(*bf16_isa)(slm_device *d);
} slm_device_ops;

struct slm_device {
    slm_device_kind kind;
    const slm_device_ops *ops;
    bool owned;      // freed by slm_device_close (the CPU singleton is not)
    double gflops;   // SLEEP: the simulated rate
    double deadline; // SLEEP: CLOCK_MONOTONIC seconds the simulated compute runs until
    double slept_s;  // SLEEP: total simulated compute
    char desc[96];   // slm_device_describe's text
    void *impl;      // backend state (CUDA: cuda.c's stream, cuBLASLt context, scratch)
};

// The CPU backend's table (cpu.c), whose memory functions the SLEEP backend reuses.
extern const slm_device_ops slm_device_cpu_ops;
// The SLEEP backend's table (sleep.c).
extern const slm_device_ops slm_device_sleep_ops;
// Opens CUDA device `ordinal` into d (kind, ops, impl set); cuda.c. Errors: SLM_E_UNSUPPORTED
// (a build without the CUDA backend, no device visible, ordinal out of range) naming why.
slm_status slm_device_cuda_open(slm_device *d, int ordinal);
// NVML's counters of the GPU at `pci_bus_id` (nvml.c); valid = false without NVML.
void slm_device_nvml_read(const char *pci_bus_id, slm_device_stats *out);
// Frees what slm_device_cuda_open made (stream, cuBLASLt context, scratch).
void slm_device_cuda_close(slm_device *d);

#endif
