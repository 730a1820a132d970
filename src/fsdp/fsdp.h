// fsdp: fully sharded data parallelism (Zhao et al. 2023, "PyTorch FSDP") over the model's units.
//
// Each unit's FlatParameter (model.h) of `numel` fp32 elements is padded with zeros to a
// multiple of the shard-group size S and cut into S equal shards; shard-group rank s keeps
// elements [s * n_padded / S, (s + 1) * n_padded / S): its fp32 master weights, its fp32
// gradient shard and its AdamW m / v. The optimizer updates only that shard. Before a unit runs,
// the shard group all-gathers its shards into a full buffer that the model's params[u] points
// at; after its backward, the full gradient is reduce-scattered within the shard group (then
// all-reduced across the replica group for HYBRID_SHARD) and added into the gradient shard.
//
// One schedule, four strategies (data, not code forks):
//   strategy       shard group S       replica group R    reshard after forward
//   FULL_SHARD     world               1                  yes (root unit excepted, as PyTorch)
//   SHARD_GRAD_OP  world               1                  no (freed after backward)
//   NO_SHARD       1 (DDP)             world              params are the master (no copy)
//   HYBRID_SHARD   G (consecutive)     world / G          yes
// Gradients are SUMMED over the data-parallel ranks (all world ranks): the caller scales each
// micro-batch's loss by its share of the global step's target tokens (as the single-process
// trainer does for its micro-batches), so the summed gradient is that of the global mean loss.
// Gradient accumulation: the reduction runs once per micro-batch's backward and accumulates into
// the gradient shard (memory stays sharded; NO_SHARD therefore all-reduces per micro-batch).
//
// Mixed precision: param_dtype bf16 all-gathers bf16 (round to nearest even) copies of the
// master shards and widens them to fp32 for the kernels; reduce_dtype bf16 sends gradients as
// bf16 and sums them in fp32 inside a user-defined MPI op. Masters, gradient shards and AdamW
// state are always fp32.
//
// Overlap: non-blocking all-gather of the next unit (forward order root, 0..L-1; backward order
// root, L-1..0) is started at the current unit's pre hook, capped by limit_all_gathers units
// gathered or in flight; a unit's reduce-scatter is started at its post_backward and completes
// while earlier units' backward runs. Open MPI progresses these mostly inside MPI calls, so every
// hook polls (MPI_Test) all outstanding requests; slm_dist_request_progress_thread adds a thread
// that drives MPI's progress engine during compute. docs/scaling.md gives what overlap results.
//
// The module knows units and flat buffers, not Llama; it installs the model's unit hooks.
#ifndef SLM_FSDP_H
#define SLM_FSDP_H

#include "base/base.h"
#include "dist/dist.h"
#include "model/model.h"
#include "optim/optim.h"

typedef enum { SLM_FULL_SHARD, SLM_SHARD_GRAD_OP, SLM_NO_SHARD, SLM_HYBRID_SHARD } slm_sharding;
// The dtypes of mixed precision are base/'s slm_dtype: SLM_DTYPE_F32 or SLM_DTYPE_BF16.

typedef struct slm_fsdp_opts {
    slm_sharding sharding;
    int shard_group_size;   // HYBRID_SHARD: G, divides the world size; ignored otherwise
    slm_dtype param_dtype;  // dtype of all-gathered parameters (compute is fp32)
    slm_dtype reduce_dtype; // dtype of gradient communication
    int limit_all_gathers;  // max units gathered or being gathered at once for prefetch
                            // (the unit needed now is always gathered); 0: unlimited
    bool forward_prefetch;  // start the next unit's all-gather in pre_forward
    bool backward_prefetch; // start the previous unit's all-gather in pre_backward
} slm_fsdp_opts;

// Defaults: FULL_SHARD, fp32 / fp32, limit_all_gathers 2, both prefetches on.
void slm_fsdp_opts_default(slm_fsdp_opts *o);
// "FULL_SHARD" | "SHARD_GRAD_OP" | "NO_SHARD" | "HYBRID_SHARD" (case-insensitive).
// Errors: SLM_E_ARG naming the text and the accepted values.
slm_status slm_sharding_parse(const char *s, slm_sharding *out);
const char *slm_sharding_name(slm_sharding s);
// "fp32" | "bf16". Errors: SLM_E_ARG naming `what` (the option) and the text.
slm_status slm_precision_parse(const char *what, const char *s, slm_dtype *out);

// One unit's shard state on this rank. Private to fsdp.c: other modules use the functions below
// (slm_fsdp_shard_read, slm_fsdp_steps_done, ...), never these fields. Every buffer below is
// memory of the model's device (m->dev; NULL: the CPU device), touched only through device.h.
typedef struct slm_fsdp_unit {
    int64_t numel;           // unpadded FlatParameter elements
    int64_t n_padded;        // numel rounded up to a multiple of S
    int64_t shard_numel;     // n_padded / S
    int64_t shard_begin;     // element offset of this rank's shard in the unit
    float *master;           // [shard_numel] fp32 master weights (padding stays 0), owned
    float *grad;             // [shard_numel] fp32 summed gradient shard, owned
    float *m, *v;            // [shard_numel] AdamW moments, owned
    bool frozen;             // LoRA base unit: master only (grad, m, v NULL), never reduced
    slm_decay_range *ranges; // the unit's views intersected with the shard, shard-relative
    int n_ranges;
    // gather state (private to fsdp.c)
    int gstate;                  // 0 free, 1 in flight, 2 gathered
    float *full;                 // [n_padded] gathered params (== master for NO_SHARD fp32)
    uint16_t *bf_send, *bf_full; // bf16 staging
    slm_dist_req greq;
    // reduction state (private)
    int rstate;       // 0 idle, 1 reduce-scatter in flight, 2 all-reduce in flight
    float *full_grad; // [n_padded] the model's gradient target during backward
    void *rbuf_full;  // send buffer of the reduce-scatter (bf16 copy or full_grad)
    void *rbuf_shard; // [shard_numel] reduced shard (f32 or bf16)
    slm_dist_req rreq;
} slm_fsdp_unit;

// Counters of one rank since slm_fsdp_init or the last slm_fsdp_reset_stats (the trainer never
// resets them: its step timing reports totals since the start).
typedef struct slm_fsdp_stats {
    double exposed_comm_s;  // time waiting for / polling collectives (not hidden by compute)
    int64_t bytes_gathered; // bytes received by all-gathers (full buffers)
    int64_t bytes_reduced;  // bytes sent into reduce-scatters / all-reduces
    int64_t n_gathers;      // all-gathers started
    int64_t n_prefetched;   // of which started early by prefetch
} slm_fsdp_stats;

// The sharding state. Its fields are private to fsdp.c (reach them through the functions below);
// the struct is public only so callers can hold one by value.
typedef struct slm_fsdp {
    slm_fsdp_opts opts;
    slm_llama *model;          // borrowed; its params/grads pointers and hooks are managed here
    int n_units;               // n_base, plus L adapter units with LoRA
    int n_base;                // the model's units (m->n_units)
    slm_fsdp_unit *units;      // [n_units], owned
    slm_comm *shard, *replica; // owned groups
    int world, rank;           // data-parallel world (all ranks)
    int S, R;                  // shard / replica group sizes
    int64_t t;                 // optimizer steps done
    int *rq, rq_len;           // units with a reduction in flight, in start order (private)
    int in_flight;             // units gathered or being gathered (alias units not counted)
    size_t state_bytes;        // persistent bytes: master + grad + m + v shards
    size_t transient_bytes;    // gathered params + full grads + staging, now
    size_t peak_transient_bytes;
    slm_fsdp_stats stats;
    const char *ctx_phase; // the hook phase and unit of the dist context now (private)
    int ctx_unit;
} slm_fsdp;

// Sets up sharding for `m` (initialised with alloc == false; slm_llama_set_shape may come before
// or after) over the world communicator: splits the shard and replica groups, allocates the
// shards, initialises the masters with slm_llama_init_unit_weights(m, seed, u) (so the weights
// equal the single-process init for any world size) and installs m->hooks.
// With LoRA (m->lora.rank > 0, adapters attached with alloc == false before this call) the
// model's units are frozen (master shards only: no gradient shard, no AdamW m / v, no
// reduction; the model computes no base gradient), and every block's adapter unit is one more
// FSDP unit, index m->n_units + l for block l: gathered and released with its block, its
// gradient reduced after the block's backward (as any unit's), trained by AdamW, initialised
// with slm_llama_lora_init_unit_weights. The unit index functions below take these indices too.
// Errors: SLM_E_ARG (HYBRID_SHARD with a G that does not divide the world; m or its adapters
// allocated their own buffers). Collective over the world: every rank, same m config and opts.
slm_status slm_fsdp_init(slm_fsdp *f, slm_llama *m, const slm_fsdp_opts *o, uint64_t seed);
// Waits for outstanding requests, frees everything, clears the model's hooks and pointers.
// Safe on a zeroed struct. Collective (frees communicators).
void slm_fsdp_free(slm_fsdp *f);

// Zeroes the gradient shards (start of an optimizer step).
void slm_fsdp_zero_grad(slm_fsdp *f);
// Completes every outstanding reduction (after the last micro-batch's backward); the gradient
// shards then hold the sum over all data-parallel ranks and micro-batches.
void slm_fsdp_sync_grads(slm_fsdp *f);
// Global L2 norm of the summed gradient: each element counted once (padding excluded, HYBRID
// replicas not double counted: the sum of squares is all-reduced within the shard group only,
// since replica groups hold identical shards). If max_norm > 0 and the norm exceeds it, scales
// the shards by max_norm / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_). Calls
// slm_fsdp_sync_grads first. Collective over the shard group.
double slm_fsdp_clip_grad_norm(slm_fsdp *f, double max_norm);
// AdamW on every unit's shard (decay ranges intersected with the shard) with lr and the step's
// 1-based count (f->t + 1); then releases all gathered parameters (they are stale).
void slm_fsdp_optimizer_step(slm_fsdp *f, const slm_adamw_hparams *h, float lr);

// All-gathers unit u's fp32 master weights into the HOST buffer out[numel] (unpadded) on every
// rank, e.g. to save the model. Collective over the shard group.
void slm_fsdp_gather_unit(slm_fsdp *f, int u, float *out);
// Sets unit u's master shard from the full unit in the HOST buffer full[numel] (same on every
// rank; e.g. loaded from a file). Local; releases a gathered copy.
void slm_fsdp_load_unit(slm_fsdp *f, int u, const float *full);
// Releases all gathered parameters (after changing masters outside slm_fsdp_optimizer_step).
void slm_fsdp_release_all(slm_fsdp *f);
// This rank's communication counters (slm_fsdp_stats), and their reset to zero.
slm_fsdp_stats slm_fsdp_get_stats(const slm_fsdp *f);
void slm_fsdp_reset_stats(slm_fsdp *f);

// This rank's shard of unit u: elements [begin, end) of the unit's FlatParameter (end may run
// past the unit's numel into the zero padding). For checkpoints: save and restore exactly these
// ranges, through slm_fsdp_shard_read / _write (the shards are device memory: no pointer to them
// leaves this module).
void slm_fsdp_shard_range(const slm_fsdp *f, int u, int64_t *begin, int64_t *end);
// The fp32 states of a shard: master weights, AdamW m (exp_avg) and v (exp_avg_sq).
typedef enum { SLM_FSDP_MASTER = 0, SLM_FSDP_EXP_AVG = 1, SLM_FSDP_EXP_AVG_SQ = 2 } slm_fsdp_state;
// Whether unit u has state `what` (a frozen LoRA base unit has only its master weights).
bool slm_fsdp_shard_has(const slm_fsdp *f, int u, slm_fsdp_state what);
// Copies elements [begin + off, begin + off + n) of unit u's shard state `what` (0 <= off,
// off + n <= end - begin) to host[n] (device-to-host; synchronous: the data is in host on
// return). Local. May run on another thread while the training thread only reads the shards
// (forward / backward): the checkpoint writer stages with it.
void slm_fsdp_shard_read(const slm_fsdp *f, int u, slm_fsdp_state what, int64_t off, int64_t n,
                         float *host);
// Sets the same elements from host[n] (host-to-device); writing the master weights releases a
// gathered copy of the unit (it would be stale). Local.
void slm_fsdp_shard_write(slm_fsdp *f, int u, slm_fsdp_state what, int64_t off, int64_t n,
                          const float *host);
// Loading whole-model weights in place (--init-from-hf with a shard group of one): when every
// rank holds whole units (S == 1), releases the gathered parameters and points the model's
// params[u] of the base units at the master shards, so a model reader (which writes params[u]
// through slm_dev_copy on m->dev) fills the masters without a second copy of the model; returns
// true. Returns false and changes nothing when S > 1 (load with slm_fsdp_load_unit instead).
// slm_fsdp_unbind_masters clears the pointers again; no step may run in between.
bool slm_fsdp_bind_masters(slm_fsdp *f);
void slm_fsdp_unbind_masters(slm_fsdp *f);
// Optimizer steps done (the AdamW bias-correction count; the next step uses this + 1); set it
// when restoring a checkpoint.
int64_t slm_fsdp_steps_done(const slm_fsdp *f);
void slm_fsdp_set_steps_done(slm_fsdp *f, int64_t t);
// The shard group size S (1 for NO_SHARD and in a world of one).
int slm_fsdp_group_size(const slm_fsdp *f);
// True on ranks outside shard group 0 (NO_SHARD / HYBRID_SHARD replicas): their shards equal
// shard group 0's, so they need not be saved.
bool slm_fsdp_is_replica(const slm_fsdp *f);
// Normalises options for a world of `world` ranks: a world of one has nothing to shard or send,
// so it runs NO_SHARD with fp32 params and reduction (the plain single-process arithmetic; the
// dtypes name communication formats). Larger worlds are left as given.
void slm_fsdp_opts_for_world(slm_fsdp_opts *o, int world);
// The shard group size options `o` give in a world of `world` ranks (before slm_fsdp_init).
int slm_fsdp_shard_group_for(const slm_fsdp_opts *o, int world);
// Up-front estimate of one rank's parameter, gradient and AdamW bytes for a model of n_params
// parameters whose largest unit has big_unit_numel elements: 4 fp32 per parameter over the
// shard group, plus (world > 1) the gathered parameters and full gradients of about two
// units at a time. A world of one holds nothing transient (params aliased, direct gradients).
double slm_fsdp_estimate_bytes(const slm_fsdp_opts *o, int world, double n_params,
                               double big_unit_numel);
// The same with LoRA: the frozen base's fp32 params (1 per parameter) and the adapters' params,
// gradients and AdamW m / v (4 per adapter parameter) over the shard group, plus the gathered
// parameters of about two units (world > 1).
double slm_fsdp_estimate_bytes_lora(const slm_fsdp_opts *o, int world, double n_base,
                                    double n_adapter, double big_unit_numel);
// This rank's persistent bytes: fp32 master, gradient and AdamW m / v shards (masters only for
// frozen LoRA base units).
size_t slm_fsdp_state_bytes(const slm_fsdp *f);
// slm_fsdp_state_bytes + the peak of the transient bytes (gathered parameters, full gradients,
// bf16 staging): the most parameter / gradient / optimizer bytes held.
size_t slm_fsdp_peak_bytes(const slm_fsdp *f);

#endif
