// kernels: the compute ops of the Llama model, forward and backward. The CPU backend (fp32:
// OpenBLAS sgemm for matmuls, OpenMP for the rest; bf16 compute: oneDNN's matmul, bf16.c) runs
// over host memory and is what the model calls today. The CUDA backend (kernels/cuda/, the
// section at the end; built when nvcc is found) has device twins of most ops on device memory,
// compiled in CI but not yet run on a GPU nor called by the model: the device layer of issue 21
// will choose between them. Callers: model/ (its matmuls, norms, RoPE, attention, SwiGLU,
// embedding and loss; the model still does some host work itself: copies, the loss sum, the
// lm_head gradient add, LoRA's scaling and dropout, decode's softmax and KV cache), health/ (the
// self-check's small MLP step), the trainer and `bench-peak` (the measured GEMM peaks).
//
// Conventions: row-major; N = B*T rows of tokens; C = hidden size, H heads, KV key/value heads,
// D = head dim, F = ffn size, V = vocab. Backward functions ACCUMULATE (+=) into parameter
// gradients (dW, dw) and, where stated, into input gradients, so residual branches and gradient
// accumulation need no extra adds. Element counts and offsets are int64_t.
// Determinism: for a fixed thread count every kernel gives bitwise-identical results run to run
// (no atomics in reductions; static OpenMP schedules wherever the split affects the result).
// Threads (CPU): every kernel runs on the OpenMP threads (OMP_NUM_THREADS / omp_set_num_threads);
// the kernels keep OpenBLAS itself single-threaded and slice GEMMs over the OpenMP threads, so
// openblas_set_num_threads has no lasting effect. Where OpenBLAS 0.3.21 does not recognise the
// CPU and falls back to its SSE3 kernels, the first kernel call switches it to its AVX-512 /
// AVX2 kernels (set OPENBLAS_CORETYPE to choose yourself). Details in kernels/blas.c.
#ifndef SLM_KERNELS_H
#define SLM_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// nn.Linear without bias: out[N, O] = inp[N, I] @ W[O, I]^T   (accumulate: out += ...)
void slm_matmul_fwd(float *out, const float *inp, const float *W, int64_t N, int64_t I, int64_t O,
                    bool accumulate);
// Backward of slm_matmul_fwd: dinp[N, I] += dout[N, O] @ W[O, I] (skipped when dinp is NULL);
// dW[O, I] += dout^T @ inp (skipped when dW is NULL).
void slm_matmul_bwd(float *dinp, float *dW, const float *dout, const float *inp, const float *W,
                    int64_t N, int64_t I, int64_t O);

// RMSNorm (Zhang & Sennrich 2019), HF LlamaRMSNorm: out = inp * rstd * w,
// rstd[n] = 1 / sqrt(mean(inp[n]^2) + eps). out, inp [N, C]; w [C]; rstd [N] written.
void slm_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int64_t N, int C,
                     float eps);
// dinp[N, C] += ..., dw[C] += ... given dout [N, C] and the saved rstd.
void slm_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     const float *rstd, int64_t N, int C);

// RoPE tables for positions [0, T): cos, sin [T, D/2], frequency theta^(-2i/D).
void slm_rope_tables(float *cos_t, float *sin_t, int T, int D, float theta);
// The same from given inverse frequencies inv_freq [half] (e.g. a scaled RoPE's): cos, sin
// [T, half] of the angle t * inv_freq[i], computed in double and rounded once.
void slm_rope_tables_freq(float *cos_t, float *sin_t, int T, int half, const double *inv_freq);
// Rotates x [B, T, nh, D] in place, HF rotate_half convention (halves, not pairs), position
// of row t is pos0 + t. Backward: the same call with inverse = true (rotation by -angle).
void slm_rope_apply(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh, int D,
                    int pos0, bool inverse);

// slm_rope_apply with the position of row (b, t) given by pos[b * T + t] (packed samples;
// each < the tables' rows).
void slm_rope_apply_pos(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh,
                        int D, const int32_t *pos, bool inverse);

// Causal scaled-dot-product attention with GQA (query head h uses kv head h / (H / KV)),
// computed block-wise with an online softmax (Milakov & Gimelshein 2018; FlashAttention,
// Dao et al. 2022): no [T, T] score matrix is stored.
//   q [B, T, H, D], k, v [B, T, KV, D] -> out [B, T, H, D]; lse [B, H, T] (log-sum-exp of the
//   scaled scores per query, saved for backward). scale = 1/sqrt(D).
void slm_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int T, int H, int KV, int D);
// Backward (FlashAttention-2 style recomputation from lse): writes (=, not +=) dq [B, T, H, D],
// dk, dv [B, T, KV, D] given dout [B, T, H, D] and the forward's out and lse.
void slm_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                       const float *k, const float *v, const float *out, const float *lse, int B,
                       int T, int H, int KV, int D);

// Attention over packed samples: pos [B, T] is each token's position in its sample (0 at a
// sample start, else the previous token's + 1); query t attends to keys [t - pos[t], t] only
// (block-diagonal causal mask). Same outputs and layouts as slm_attention_fwd / _bwd.
void slm_attention_fwd_packed(float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *pos, int B, int T, int H, int KV,
                              int D);
void slm_attention_bwd_packed(float *dq, float *dk, float *dv, const float *dout, const float *q,
                              const float *k, const float *v, const float *out, const float *lse,
                              const int32_t *pos, int B, int T, int H, int KV, int D);

// SwiGLU (Shazeer 2020): h = silu(gate) * up, all [N, F].
void slm_swiglu_fwd(float *h, const float *gate, const float *up, int64_t N, int64_t F);
// dgate, dup [N, F] written (=) from dh.
void slm_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                    int64_t N, int64_t F);

// Embedding lookup: out[N, C] = table[tokens[n]]. Backward: dtable[tokens[n]] += dout[n]
// (deterministic order).
void slm_embedding_fwd(float *out, const int32_t *tokens, const float *table, int64_t N, int C);
void slm_embedding_bwd(float *dtable, const int32_t *tokens, const float *dout, int64_t N, int C);

// Fused softmax + cross-entropy over logits [N, V] (in place): for each row with
// targets[n] != -1 (the ignore index), losses[n] = logsumexp(row) - row[target] and the row is
// overwritten with dloss/dlogits * dscale = (softmax(row) - onehot(target)) * dscale; ignored rows
// get loss 0 and a zero gradient. When dscale == 0 the logits are left unchanged.
void slm_cross_entropy_fused(float *logits, float *losses, const int32_t *targets, int64_t N,
                             int64_t V, float dscale);

// out[n] = a[n] + b[n]   (n elements; out may alias a)
void slm_add(float *out, const float *a, const float *b, int64_t n);

// Measured sgemm peak of this machine in GFLOP/s (square fp32 GEMMs of size `n`, best of
// `reps`), for MFU denominators.
double slm_sgemm_peak_gflops(int n, int reps);

// bf16 compute (kernels/bf16.c): C[M, N] = bf16(op(A))[M, K] bf16(op(B))[K, N] (+ C when
// `accumulate`), row-major, fp32 in and out: A and B are read as fp32 and rounded to bfloat16
// (round to nearest even) on the way in, products accumulate in fp32 (tensor cores' and
// autocast(bfloat16)'s numerics). op(X) = X^T when ta / tb (A stored [K, M], B stored [N, K]);
// lda / ldb / ldc are the row strides of the stored matrices. Through oneDNN's matmul where the
// CPU has AVX512-BF16 or AMX (primitive cached per shape), else rounded operands through the fp32
// sgemm (said once in the log). Error bound: tests/kernels/test_bf16.c. Thread-safe (calls
// serialize); must not be called inside an OpenMP parallel region.
void slm_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                   const float *B, int64_t ldb, bool accumulate, float *Cm, int64_t ldc);
// nn.Linear without bias in the compute dtype: bf16 false is slm_matmul_fwd / slm_matmul_bwd
// (fp32); true computes the same products through slm_gemm_bf16 (every operand, weights and
// activations, gradients in backward too, rounded to bf16; fp32 accumulation and outputs), as
// autocast(bfloat16) and tensor cores do. Same shapes and accumulate rules as the fp32 ones.
void slm_linear_fwd(bool bf16, float *out, const float *inp, const float *W, int64_t N, int64_t I,
                    int64_t O, bool accumulate);
void slm_linear_bwd(bool bf16, float *dinp, float *dW, const float *dout, const float *inp,
                    const float *W, int64_t N, int64_t I, int64_t O);
// x[i] = fp32(bf16(x[i])) in place (round to nearest even): what bf16 compute does to the
// activations it multiplies (attention's q, k, v).
void slm_round_bf16(float *x, int64_t n);
// oneDNN's view of this CPU, e.g. "avx512_core_bf16 (AVX512-BF16)" (static string).
const char *slm_bf16_gemm_isa(void);
// Measured bf16 GEMM rate of this machine in GFLOP/s (square n x n x n through slm_gemm_bf16,
// best of `reps`, rounding of the operands included), for bf16 MFU denominators.
double slm_bf16_gemm_peak_gflops(int n, int reps);

// Vector kernels (kernels/vec.c); n elements, elementwise ones parallel with a static schedule.
// y[i] += a * x[i]
void slm_vec_axpy(float *y, float a, const float *x, int64_t n);
// x[i] *= s
void slm_vec_scale(float *x, float s, int64_t n);
// x[i] = v
void slm_vec_fill(float *x, float v, int64_t n);
// Sum of x[i]^2 in double: blocks of 16384 elements each summed in order, the block sums added
// in block order (the same bits for any thread count).
double slm_vec_sumsq(const float *x, int64_t n);
// Sum of x[i] in double, in index order (single thread).
double slm_vec_sum(const float *x, int64_t n);
// The AdamW update of one segment (torch.optim.AdamW's single-tensor path; optim.h):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p = p * decay_mul - step_size * m / (sqrt(v) / bc2_sqrt + eps)
void slm_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float b1, float b2,
                      float eps, float decay_mul, float step_size, float bc2_sqrt);
// acc[i] += fp32(x[i]), x bf16 bit patterns.
void slm_bf16_accumulate(float *acc, const uint16_t *x, int64_t n);
// Counter-based inverted dropout: group g of 4 elements hashes h = slm_mix64(key ^ g); element
// 4g + k is kept when its 16-bit lane (h >> 16k) & 0xffff >= thr. y non-NULL: y[i] = kept ?
// x[i] * scale : 0; y NULL: acc[i] += x[i] * scale for kept elements only.
void slm_dropout_apply(uint64_t key, uint32_t thr, float scale, const float *x, float *y,
                       float *acc, int64_t n);
// Row-wise softmax of s [rows, n] after scaling by `scale`: max-subtracted, exp in fp32, row sum
// in double, one reciprocal per row.
void slm_softmax_rows(float *s, int64_t rows, int64_t n, float scale);
// dst <- src (src NULL: zeros), `bytes` bytes; from 4 MiB on in 1 MiB pieces over the OpenMP
// threads (the CPU device's copies and zeroing: checkpoint staging, gathers).
void slm_vec_copy(void *dst, const void *src, size_t bytes);
// The OpenMP threads every CPU kernel runs on: sets them (n > 0) and returns the count in effect.
int slm_kernels_set_threads(int n);
int slm_kernels_threads(void);

// ---------------------------------------------------------------------------------------------
// CUDA backend (kernels/cuda/*.cu, built when CMake finds nvcc: SLM_HAVE_CUDA; issue 22). The
// device twins of the CPU kernels above, on device pointers, each queued on `stream` (a
// cudaStream_t; NULL = the legacy default stream) and returning 0 or an error code that
// slm_cuda_strerror names (launch errors are reported at the call; execution errors at the next
// synchronization). Same layouts and semantics as the CPU kernel of the same name; fp32 buffers
// unless a parameter says bf16 (uint16 bit patterns, __nv_bfloat16 on the device). Deterministic:
// no atomics, fixed reduction trees, cuBLASLt algorithms pinned per shape. None of this has run
// on a GPU yet: tests/gpu/test_cuda_kernels.c checks it against the CPU kernels where one exists.
#ifdef SLM_HAVE_CUDA
#include <stddef.h>
// Devices visible (0 without a driver or device: not an error).
int slm_cuda_device_count(int *n);
int slm_cuda_set_device(int dev);
// PCI bus id of device `dev` ("0000:19:00.0"; NVML finds the same GPU by it) and its name with
// the compute capability ("NVIDIA H200 (sm_90)"), into buf [len].
int slm_cuda_pci_bus_id(int dev, char *buf, int len);
int slm_cuda_device_name(int dev, char *buf, int len);
// Free and total device memory in bytes (cudaMemGetInfo).
int slm_cuda_mem_info(size_t *free_b, size_t *total_b);
// Device memory (cudaMalloc; never managed memory) and pinned host memory for staging.
int slm_cuda_malloc(void **p, size_t bytes);
int slm_cuda_free(void *p);
int slm_cuda_host_alloc(void **p, size_t bytes);
int slm_cuda_host_free(void *p);
// Any direction (unified addressing), ordered on `stream`.
int slm_cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream);
int slm_cuda_memset_async(void *dst, int byte, size_t bytes, void *stream);
// Streams (non-blocking) and events (no timing) for compute / communication overlap.
int slm_cuda_stream_create(void **s);
int slm_cuda_stream_destroy(void *s);
int slm_cuda_stream_sync(void *s);
int slm_cuda_event_create(void **ev);
int slm_cuda_event_destroy(void *ev);
int slm_cuda_event_record(void *ev, void *stream);
int slm_cuda_stream_wait_event(void *stream, void *ev);
// The message of a code returned by the functions here (CUDA runtime or cuBLAS).
const char *slm_cuda_strerror(int code);

// fp32 <-> bf16 (round to nearest even; NaN stays NaN), n elements.
int slm_cuda_f32_to_bf16(void *y, const float *x, int64_t n, void *stream);
int slm_cuda_bf16_to_f32(float *y, const void *x, int64_t n, void *stream);
int slm_cuda_swiglu_fwd(float *h, const float *gate, const float *up, int64_t n, void *stream);
int slm_cuda_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, int64_t n, void *stream);
// slm_rope_apply (pos NULL: row t at pos0 + t) and slm_rope_apply_pos (pos [B, T]) in one.
int slm_cuda_rope_apply(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh,
                        int D, int pos0, const int32_t *pos, bool inverse, void *stream);
int slm_cuda_embedding_fwd(float *out, const int32_t *tokens, const float *table, int64_t N, int C,
                           void *stream);
int slm_cuda_embedding_bwd(float *dtable, const int32_t *tokens, const float *dout, int64_t N,
                           int C, void *stream);
int slm_cuda_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                         int C, float eps, void *stream);
// dinp [N, C] += ..., dw [C] += ... (slm_rmsnorm_bwd).
int slm_cuda_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int64_t N, int C, void *stream);
int slm_cuda_cross_entropy(float *logits, float *losses, const int32_t *targets, int64_t N,
                           int64_t V, float dscale, void *stream);
// *out (a device double) = sum of x[i]^2 over n floats, two fixed-order passes.
int slm_cuda_sumsq(double *out, const float *x, int64_t n, void *stream);
// One AdamW step over n elements (optim.h's slm_adamw_step on one range with weight decay wd);
// p_bf16 (may be NULL) receives bf16(p) after the update.
int slm_cuda_adamw(float *p, const float *g, float *m, float *v, void *p_bf16, int64_t n, float lr,
                   float beta1, float beta2, float eps, float wd, int64_t t, void *stream);

// *out (a device double) = sum of x[i] (fixed tree, as slm_cuda_sumsq).
int slm_cuda_sum(double *out, const float *x, int64_t n, void *stream);
// slm_adamw_update on the device (its float expressions; nvcc may contract to FMA).
int slm_cuda_adamw_segment(float *p, const float *g, float *m, float *v, int64_t n, float b1,
                           float b2, float eps, float decay_mul, float step_size, float bc2_sqrt,
                           void *stream);
// The vector kernels of kernels/vec.c on the device (kernels/cuda/vec.cu); x of
// slm_cuda_bf16_accumulate is bf16.
int slm_cuda_axpy(float *y, float a, const float *x, int64_t n, void *stream);
int slm_cuda_scale(float *x, float s, int64_t n, void *stream);
int slm_cuda_fill(float *x, float v, int64_t n, void *stream);
int slm_cuda_add(float *out, const float *a, const float *b, int64_t n, void *stream);
int slm_cuda_round_bf16(float *x, int64_t n, void *stream);
int slm_cuda_bf16_accumulate(float *acc, const void *x, int64_t n, void *stream);
int slm_cuda_dropout(uint64_t key, uint32_t thr, float scale, const float *x, float *y, float *acc,
                     int64_t n, void *stream);
// Row softmax (slm_softmax_rows), one block per row, double sum over a fixed tree.
int slm_cuda_softmax_rows(float *s, int64_t rows, int64_t n, float scale, void *stream);

// Causal attention with GQA (slm_attention_fwd / _bwd; pos [B, T] NULL, or packed positions as
// slm_attention_fwd_packed), D <= 256, H a multiple of KV. The backward writes dq, dk, dv (=) and
// needs `scratch`, B * H * T floats of device memory (the rows' D = rowsum(dO * O)).
int slm_cuda_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *pos, int B, int T, int H, int KV, int D, void *stream);
int slm_cuda_attention_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *q, const float *k, const float *v, const float *out,
                           const float *lse, const int32_t *pos, int B, int T, int H, int KV, int D,
                           void *stream);

// cuBLASLt context: handle, 32 MiB workspace, algorithms pinned per shape. One per device.
typedef struct slm_cuda_gemm_ctx slm_cuda_gemm_ctx;
int slm_cuda_gemm_create(slm_cuda_gemm_ctx **out);
void slm_cuda_gemm_destroy(slm_cuda_gemm_ctx *g);
// slm_gemm_bf16's contract with operands already bf16 on the device: C[M, N] (fp32, row-major,
// += when accumulate) = op(A)[M, K] op(B)[K, N], fp32 accumulation.
int slm_cuda_gemm_bf16(slm_cuda_gemm_ctx *g, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       const void *A, int64_t lda, const void *B, int64_t ldb, bool accumulate,
                       float *Cm, int64_t ldc, void *stream);
#endif

#endif
