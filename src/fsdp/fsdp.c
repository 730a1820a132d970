// FSDP schedule: shards, all-gather / free / reduce-scatter state machines per unit, driven by
// the model's unit hooks. See fsdp.h for the strategies and the contracts.
#include "fsdp/fsdp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { G_FREE = 0, G_FLIGHT = 1, G_READY = 2 };
enum { R_IDLE = 0, R_RS = 1, R_AR = 2 };

void slm_fsdp_opts_default(slm_fsdp_opts *o) {
    memset(o, 0, sizeof *o);
    o->sharding = SLM_FULL_SHARD;
    o->param_dtype = SLM_DTYPE_F32;
    o->reduce_dtype = SLM_DTYPE_F32;
    o->limit_all_gathers = 2;
    o->forward_prefetch = true;
    o->backward_prefetch = true;
}

static const char *const k_names[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"};

slm_status slm_sharding_parse(const char *s, slm_sharding *out) {
    for (int i = 0; i < 4; i++) {
        if (s && strcasecmp(s, k_names[i]) == 0) {
            *out = (slm_sharding)i;
            return SLM_OK;
        }
    }
    return slm_fail(SLM_E_ARG,
                    "--sharding: unknown strategy \"%s\"; expected FULL_SHARD, SHARD_GRAD_OP, "
                    "NO_SHARD or HYBRID_SHARD",
                    s ? s : "(null)");
}

const char *slm_sharding_name(slm_sharding s) {
    return (int)s >= 0 && (int)s < 4 ? k_names[s] : "?";
}

slm_status slm_precision_parse(const char *what, const char *s, slm_dtype *out) {
    if (s && (strcasecmp(s, "fp32") == 0 || strcasecmp(s, "float32") == 0)) {
        *out = SLM_DTYPE_F32;
        return SLM_OK;
    }
    if (s && (strcasecmp(s, "bf16") == 0 || strcasecmp(s, "bfloat16") == 0)) {
        *out = SLM_DTYPE_BF16;
        return SLM_OK;
    }
    return slm_fail(SLM_E_ARG, "%s: unknown dtype \"%s\"; expected fp32 or bf16", what,
                    s ? s : "(null)");
}

// ---------------------------------------------------------------------------------------------
// Device memory. Every parameter, gradient and optimizer buffer (shards, gathered units, bf16
// staging, full gradients, reduction buffers) lives on the model's device (NULL: the CPU
// device) and is touched only through device.h. The collectives (dist/) run on these buffers:
// host memory on the CPU and SLEEP devices; a CUDA device will hand them to dist's slm_dcomm_*
// (NCCL) instead (not done here).

static slm_device *dev(const slm_fsdp *f) {
    return f->model->dev;
}

static void *talloc(slm_fsdp *f, size_t bytes) {
    f->transient_bytes += bytes;
    if (f->transient_bytes > f->peak_transient_bytes) f->peak_transient_bytes = f->transient_bytes;
    return slm_dev_alloc(dev(f), bytes ? bytes : 64);
}

static void tfree(slm_fsdp *f, void *p, size_t bytes) {
    if (!p) return;
    f->transient_bytes -= bytes;
    slm_dev_free(dev(f), p);
}

// True when params need no communication and no copy: the full unit is the master itself.
static bool alias_master(const slm_fsdp *f) {
    return f->S == 1 && f->opts.param_dtype == SLM_DTYPE_F32;
}

// True when the backward writes straight into the gradient shard: one rank holds the whole unit
// and nothing is reduced (S == R == 1, fp32 reduction), so the model's grads[u] is the shard
// itself and micro-batches accumulate there as in a plain single-process model (no copy, no
// temporary full gradient: the same additions in the same order).
static bool direct_grads(const slm_fsdp *f) {
    return f->S == 1 && f->R == 1 && f->opts.reduce_dtype == SLM_DTYPE_F32;
}

// The model's pointer slots of fsdp unit u: base units 0..n_base-1 are the model's units,
// n_base + l is block l's LoRA adapter unit.
static float **param_slot(const slm_fsdp *f, int u) {
    return u < f->n_base ? &f->model->params[u] : &f->model->lora_params[u - f->n_base];
}

static float **grad_slot(const slm_fsdp *f, int u) {
    return u < f->n_base ? &f->model->grads[u] : &f->model->lora_grads[u - f->n_base];
}

// The adapter unit of block u (-1: none, or u is not a block).
static int adapter_of(const slm_fsdp *f, int u) {
    return f->n_units > f->n_base && u >= 0 && u < f->n_base - 1 ? f->n_base + u : -1;
}

static void set_context(slm_fsdp *f, const char *phase, int u) {
    f->ctx_phase = phase;
    f->ctx_unit = u;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "step %lld, %s, FSDP unit %d", (long long)f->t + 1, phase, u);
    slm_dist_set_context(ctx);
}

// ---------------------------------------------------------------------------------------------
// Gather state machine: FREE -> FLIGHT (all-gather started) -> READY (params[u] valid) -> FREE

static void gather_start(slm_fsdp *f, int u) {
    slm_fsdp_unit *x = &f->units[u];
    if (x->gstate != G_FREE) return;
    if (alias_master(f)) {
        x->full = x->master;
        x->gstate = G_READY;
        *param_slot(f, u) = x->full;
        return;
    }
    f->in_flight++;
    if (f->S > 1) f->stats.n_gathers++;
    x->full = talloc(f, (size_t)x->n_padded * sizeof(float));
    if (f->opts.param_dtype == SLM_DTYPE_BF16) {
        x->bf_send = talloc(f, (size_t)x->shard_numel * 2);
        x->bf_full = talloc(f, (size_t)x->n_padded * 2);
        slm_dev_f32_to_bf16(dev(f), x->bf_send, x->master, x->shard_numel);
        slm_dist_iallgather(f->shard, x->bf_send, x->bf_full, x->shard_numel, SLM_DTYPE_BF16,
                            "all-gather (bf16 params)", &x->greq);
        if (f->S > 1) f->stats.bytes_gathered += x->n_padded * 2;
    } else {
        slm_dist_iallgather(f->shard, x->master, x->full, x->shard_numel, SLM_DTYPE_F32,
                            "all-gather (params)", &x->greq);
        if (f->S > 1) f->stats.bytes_gathered += x->n_padded * 4;
    }
    x->gstate = G_FLIGHT;
}

static void gather_complete(slm_fsdp *f, int u) {
    slm_fsdp_unit *x = &f->units[u];
    if (x->bf_full) {
        slm_dev_bf16_to_f32(dev(f), x->full, x->bf_full, x->n_padded);
        tfree(f, x->bf_send, (size_t)x->shard_numel * 2);
        tfree(f, x->bf_full, (size_t)x->n_padded * 2);
        x->bf_send = x->bf_full = NULL;
    }
    x->gstate = G_READY;
    *param_slot(f, u) = x->full;
}

// Whether request r is complete: waited for when `block` (the wait counts as exposed
// communication), else polled (a completed request stays inactive: true again).
static bool req_done(slm_fsdp *f, slm_dist_req *r, bool block) {
    if (!block) return slm_dist_test(r);
    double t0 = slm_time_s();
    slm_dist_wait(r);
    f->stats.exposed_comm_s += slm_time_s() - t0;
    return true;
}

static void gather_wait(slm_fsdp *f, int u) {
    slm_fsdp_unit *x = &f->units[u];
    if (x->gstate == G_FREE) gather_start(f, u);
    if (x->gstate == G_FLIGHT && req_done(f, &x->greq, true)) gather_complete(f, u);
}

static void release(slm_fsdp *f, int u) {
    slm_fsdp_unit *x = &f->units[u];
    if (x->gstate == G_FREE) return;
    if (x->gstate == G_FLIGHT) {
        slm_dist_wait(&x->greq);
        gather_complete(f, u);
    }
    if (x->full != x->master) {
        tfree(f, x->full, (size_t)x->n_padded * sizeof(float));
        f->in_flight--;
    }
    x->full = NULL;
    x->gstate = G_FREE;
    *param_slot(f, u) = NULL;
}

// Starts unit u's all-gather early if the cap allows.
static void prefetch(slm_fsdp *f, int u) {
    if (u < 0 || f->units[u].gstate != G_FREE) return;
    if (!alias_master(f) && f->opts.limit_all_gathers > 0 &&
        f->in_flight >= f->opts.limit_all_gathers)
        return;
    if (f->S > 1) f->stats.n_prefetched++;
    gather_start(f, u);
}

// ---------------------------------------------------------------------------------------------
// Reduction state machine: IDLE -> RS (reduce-scatter in the shard group) -> AR (all-reduce in
// the replica group) -> IDLE with the result added into the gradient shard.

static size_t red_elt(const slm_fsdp *f) {
    return f->opts.reduce_dtype == SLM_DTYPE_BF16 ? 2 : 4;
}

static slm_dtype red_dt(const slm_fsdp *f) {
    return f->opts.reduce_dtype == SLM_DTYPE_BF16 ? SLM_DTYPE_BF16 : SLM_DTYPE_F32;
}

static void reduce_finish(slm_fsdp *f, int u) {
    slm_fsdp_unit *x = &f->units[u];
    int64_t n = x->shard_numel;
    if (f->opts.reduce_dtype == SLM_DTYPE_BF16)
        slm_dev_bf16_accumulate(dev(f), x->grad, x->rbuf_shard, n);
    else // grad += reduced, element by element (the same additions as a loop)
        slm_dev_add(dev(f), x->grad, x->grad, x->rbuf_shard, n);
    size_t e = red_elt(f);
    if (x->rbuf_shard != x->rbuf_full) tfree(f, x->rbuf_shard, (size_t)n * e);
    if (x->rbuf_full != x->full_grad) tfree(f, x->rbuf_full, (size_t)x->n_padded * e);
    tfree(f, x->full_grad, (size_t)x->n_padded * sizeof(float));
    x->full_grad = NULL;
    x->rbuf_full = x->rbuf_shard = NULL;
    x->rstate = R_IDLE;
}

// Advances the queued reductions in the order they were started. A reduce-scatter that finished
// moves on to its replica all-reduce only once every earlier queued unit has, so all ranks issue
// the replica group's collectives in the same order (MPI requires it; rank-local completion
// order differs). Entries up to queue index `must` (-1: none) are waited for; the rest polled.
static void reduce_progress(slm_fsdp *f, int must) {
    bool ordered = true; // every earlier entry has left the reduce-scatter stage
    for (int i = 0; i < f->rq_len; i++) {
        slm_fsdp_unit *x = &f->units[f->rq[i]];
        bool block = i <= must;
        if (x->rstate == R_RS) {
            if (!req_done(f, &x->rreq, block) || !ordered) {
                ordered = false;
                continue;
            }
            if (f->R > 1) {
                x->rstate = R_AR;
                // Started from whichever hook polled the reduce-scatter's completion: the
                // context names the unit it reduces, then the hook's own is put back.
                const char *ph = f->ctx_phase;
                int cu = f->ctx_unit;
                set_context(f, "backward reduce (replica group)", f->rq[i]);
                slm_dist_iallreduce(f->replica, x->rbuf_shard, x->shard_numel, red_dt(f),
                                    SLM_OP_SUM, "all-reduce (grads, replica group)", &x->rreq);
                if (ph) set_context(f, ph, cu);
                f->stats.bytes_reduced += x->shard_numel * (int64_t)red_elt(f);
            } else {
                reduce_finish(f, f->rq[i]);
                continue;
            }
        }
        if (x->rstate == R_AR && req_done(f, &x->rreq, block)) reduce_finish(f, f->rq[i]);
    }
    int k = 0;
    for (int i = 0; i < f->rq_len; i++)
        if (f->units[f->rq[i]].rstate != R_IDLE) f->rq[k++] = f->rq[i];
    f->rq_len = k;
}

// Waits until unit u has no reduction in flight (and every reduction queued before it).
static void reduce_wait_unit(slm_fsdp *f, int u) {
    for (int i = 0; i < f->rq_len; i++) {
        if (f->rq[i] == u) {
            reduce_progress(f, i);
            return;
        }
    }
}

static void reduce_start(slm_fsdp *f, int u) {
    slm_fsdp_unit *x = &f->units[u];
    size_t e = red_elt(f);
    if (f->opts.reduce_dtype == SLM_DTYPE_BF16) {
        x->rbuf_full = talloc(f, (size_t)x->n_padded * 2);
        slm_dev_f32_to_bf16(dev(f), x->rbuf_full, x->full_grad, x->n_padded);
    } else {
        x->rbuf_full = x->full_grad;
    }
    if (f->S > 1) {
        x->rbuf_shard = talloc(f, (size_t)x->shard_numel * e);
        x->rstate = R_RS;
        f->rq[f->rq_len++] = u;
        slm_dist_ireduce_scatter(f->shard, x->rbuf_full, x->rbuf_shard, x->shard_numel, red_dt(f),
                                 SLM_OP_SUM, "reduce-scatter (grads)", &x->rreq);
        f->stats.bytes_reduced += x->n_padded * (int64_t)e;
    } else {
        // NO_SHARD: the whole unit is the shard; all-reduce it in place across the replicas.
        x->rbuf_shard = x->rbuf_full;
        x->rstate = R_AR;
        f->rq[f->rq_len++] = u;
        slm_dist_iallreduce(f->replica, x->rbuf_shard, x->n_padded, red_dt(f), SLM_OP_SUM,
                            "all-reduce (grads)", &x->rreq);
        if (f->R > 1) f->stats.bytes_reduced += x->n_padded * (int64_t)e;
    }
}

// Drives every outstanding request (MPI_Test): Open MPI's progress engine advances
// non-blocking collectives mostly inside MPI calls, so this is what lets them overlap compute.
// Time spent here counts as exposed communication: with shared-memory transports the copy of
// a rendezvous message happens inside the MPI_Test that matches it.
static void poll_all(slm_fsdp *f) {
    double t0 = slm_time_s();
    for (int u = 0; u < f->n_units; u++) {
        slm_fsdp_unit *x = &f->units[u];
        if (x->gstate == G_FLIGHT && slm_dist_test(&x->greq)) gather_complete(f, u);
    }
    reduce_progress(f, -1);
    f->stats.exposed_comm_s += slm_time_s() - t0;
}

// ---------------------------------------------------------------------------------------------
// Hooks (order in model.h)

static bool reshard_after_forward(const slm_fsdp *f) {
    return f->opts.sharding == SLM_FULL_SHARD || f->opts.sharding == SLM_HYBRID_SHARD;
}

static void hook_pre_forward(void *ctx, int u) {
    slm_fsdp *f = ctx;
    int L = f->n_base - 1;
    set_context(f, "forward", u);
    gather_wait(f, u);
    if (adapter_of(f, u) >= 0) gather_wait(f, adapter_of(f, u));
    if (f->opts.forward_prefetch) {
        int next = u == L ? (L > 0 ? 0 : -1) : (u + 1 < L ? u + 1 : -1);
        prefetch(f, next);
        prefetch(f, adapter_of(f, next));
    }
    poll_all(f);
}

static void hook_post_forward(void *ctx, int u) {
    slm_fsdp *f = ctx;
    // The root stays gathered: its backward (lm_head, final norm) starts right after the loss.
    if (u != f->n_base - 1 && reshard_after_forward(f)) {
        release(f, u);
        if (adapter_of(f, u) >= 0) release(f, adapter_of(f, u));
    }
    poll_all(f);
}

// Points the model's gradient slot of unit u at where its backward adds (a frozen unit: none).
static void grads_begin(slm_fsdp *f, int u) {
    slm_fsdp_unit *x = &f->units[u];
    if (x->frozen) {
        *grad_slot(f, u) = NULL;
    } else if (direct_grads(f)) {
        *grad_slot(f, u) = x->grad; // the backward adds into the shard itself
    } else {
        // A reduction of this unit from the previous micro-batch still owns its buffers.
        reduce_wait_unit(f, u);
        x->full_grad = talloc(f, (size_t)x->n_padded * sizeof(float));
        slm_dev_zero(dev(f), x->full_grad, (size_t)x->n_padded * sizeof(float));
        *grad_slot(f, u) = x->full_grad;
    }
}

static void hook_pre_backward(void *ctx, int u) {
    slm_fsdp *f = ctx;
    set_context(f, "backward", u);
    gather_wait(f, u);
    int a = adapter_of(f, u);
    if (a >= 0) gather_wait(f, a);
    int L = f->n_base - 1;
    grads_begin(f, u);
    if (a >= 0) grads_begin(f, a);
    if (f->opts.backward_prefetch) {
        int prev = u == L ? L - 1 : u - 1;
        prefetch(f, prev);
        prefetch(f, adapter_of(f, prev));
    }
    poll_all(f);
}

static void grads_end(slm_fsdp *f, int u) {
    *grad_slot(f, u) = NULL;
    if (!f->units[u].frozen && !direct_grads(f)) reduce_start(f, u);
    if (f->opts.sharding != SLM_NO_SHARD) release(f, u);
}

static void hook_post_backward(void *ctx, int u) {
    slm_fsdp *f = ctx;
    set_context(f, "backward reduce", u);
    int a = adapter_of(f, u);
    if (a >= 0) grads_end(f, a); // the adapter's reduction first: it is what is trained
    grads_end(f, u);
    poll_all(f);
}

// ---------------------------------------------------------------------------------------------
// Set-up and optimizer

slm_status slm_fsdp_init(slm_fsdp *f, slm_llama *m, const slm_fsdp_opts *o, uint64_t seed) {
    memset(f, 0, sizeof *f);
    if (m->owns_buffers)
        return slm_fail(SLM_E_ARG, "fsdp: the model must be initialised with alloc == false");
    f->opts = *o;
    f->model = m;
    f->n_base = m->n_units;
    bool lora = m->lora.rank > 0;
    if (lora && m->lora_owns_buffers)
        return slm_fail(SLM_E_ARG, "fsdp: the LoRA adapters must be attached with alloc == false");
    f->n_units = m->n_units + (lora ? m->cfg.num_hidden_layers : 0);
    slm_comm *w = slm_comm_world();
    f->world = slm_comm_size(w);
    f->rank = slm_comm_rank(w);
    switch (o->sharding) {
    case SLM_FULL_SHARD:
    case SLM_SHARD_GRAD_OP:
        f->S = f->world;
        break;
    case SLM_NO_SHARD:
        f->S = 1;
        break;
    case SLM_HYBRID_SHARD:
        if (o->shard_group_size < 1 || f->world % o->shard_group_size != 0)
            return slm_fail(SLM_E_ARG,
                            "--shard-group-size %d must be >= 1 and divide the world size %d "
                            "for HYBRID_SHARD",
                            o->shard_group_size, f->world);
        f->S = o->shard_group_size;
        break;
    default:
        return slm_fail(SLM_E_ARG, "fsdp: unknown sharding strategy %d", (int)o->sharding);
    }
    f->R = f->world / f->S;
    // Shard groups are runs of S consecutive ranks (one node's ranks under a by-core mapping);
    // replica groups take one rank from each.
    char name[64];
    int sg = f->rank / f->S, sr = f->rank % f->S;
    snprintf(name, sizeof name, "shard group %d of %d", sg, f->R);
    f->shard = slm_comm_split(w, sg, sr, name);
    snprintf(name, sizeof name, "replica group %d of %d", sr, f->S);
    f->replica = slm_comm_split(w, sr, sg, name);

    f->units = slm_xcalloc((size_t)f->n_units, sizeof *f->units);
    f->rq = slm_xcalloc((size_t)f->n_units, sizeof *f->rq);
    for (int u = 0; u < f->n_units; u++) {
        slm_fsdp_unit *x = &f->units[u];
        bool adapter = u >= f->n_base;
        const slm_unit_layout *lay = adapter ? &m->lora_units[u - f->n_base] : &m->units[u];
        x->frozen = lora && !adapter; // LoRA: base weights only (no gradient, no AdamW state)
        x->numel = lay->numel;
        x->n_padded = (lay->numel + f->S - 1) / f->S * f->S;
        x->shard_numel = x->n_padded / f->S;
        x->shard_begin = (int64_t)sr * x->shard_numel;
        size_t b = (size_t)x->shard_numel * sizeof(float);
        float **bufs[4] = {&x->master, &x->grad, &x->m, &x->v};
        for (int k = 0; k < (x->frozen ? 1 : 4); k++) {
            *bufs[k] = slm_dev_alloc(m->dev, b ? b : 64);
            if (k > 0) slm_dev_zero(m->dev, *bufs[k], b);
        }
        f->state_bytes += (x->frozen ? 1 : 4) * b;
        // The unit's seeded init on the host (a zeroed staging copy of the whole unit: elements
        // no view covers and the padding stay 0), then this rank's shard of it to the device.
        float *full = slm_xcalloc((size_t)x->n_padded, sizeof(float));
        if (adapter)
            slm_llama_lora_init_unit_weights(m, seed, u - f->n_base, full);
        else
            slm_llama_init_unit_weights(m, seed, u, full);
        slm_dev_copy(m->dev, x->master, full + x->shard_begin, b, SLM_H2D);
        free(full);
        x->ranges = slm_xcalloc((size_t)lay->n_views + 1, sizeof *x->ranges);
        int64_t s0 = x->shard_begin, s1 = x->shard_begin + x->shard_numel;
        for (int i = 0; i < lay->n_views; i++) {
            int64_t a = lay->views[i].offset, e = a + lay->views[i].numel;
            if (a < s0) a = s0;
            if (e > s1) e = s1;
            if (e <= a) continue;
            x->ranges[x->n_ranges++] =
                (slm_decay_range){a - s0, e - s0, lay->views[i].weight_decay};
        }
        *param_slot(f, u) = NULL;
        *grad_slot(f, u) = NULL;
    }
    m->hooks = (slm_unit_hooks){.ctx = f,
                                .pre_forward = hook_pre_forward,
                                .post_forward = hook_post_forward,
                                .pre_backward = hook_pre_backward,
                                .post_backward = hook_post_backward};
    return SLM_OK;
}

void slm_fsdp_free(slm_fsdp *f) {
    if (!f || !f->units) return;
    slm_fsdp_sync_grads(f);
    for (int u = 0; u < f->n_units; u++)
        release(f, u);
    free(f->rq);
    for (int u = 0; u < f->n_units; u++) {
        slm_fsdp_unit *x = &f->units[u];
        slm_dev_free(dev(f), x->master);
        slm_dev_free(dev(f), x->grad);
        slm_dev_free(dev(f), x->m);
        slm_dev_free(dev(f), x->v);
        free(x->ranges);
    }
    free(f->units);
    if (f->model) {
        memset(&f->model->hooks, 0, sizeof f->model->hooks);
        for (int u = 0; u < f->n_units; u++)
            *param_slot(f, u) = *grad_slot(f, u) = NULL;
    }
    slm_comm_free(f->shard);
    slm_comm_free(f->replica);
    memset(f, 0, sizeof *f);
}

void slm_fsdp_zero_grad(slm_fsdp *f) {
    slm_fsdp_sync_grads(f);
    for (int u = 0; u < f->n_units; u++)
        if (!f->units[u].frozen)
            slm_dev_zero(dev(f), f->units[u].grad, (size_t)f->units[u].shard_numel * sizeof(float));
}

void slm_fsdp_sync_grads(slm_fsdp *f) {
    reduce_progress(f, f->rq_len - 1);
}

double slm_fsdp_clip_grad_norm(slm_fsdp *f, double max_norm) {
    slm_fsdp_sync_grads(f);
    double ss = 0;
    for (int u = 0; u < f->n_units; u++) {
        const slm_fsdp_unit *x = &f->units[u];
        if (x->frozen) continue;
        int64_t valid = x->numel - x->shard_begin; // padding excluded (it is zero anyway)
        if (valid > x->shard_numel) valid = x->shard_numel;
        if (valid > 0) ss += slm_dev_sumsq(dev(f), x->grad, valid);
    }
    double t0 = slm_time_s();
    slm_comm_allreduce(f->shard, &ss, 1, SLM_DTYPE_F64, SLM_OP_SUM, "all-reduce (grad norm)");
    f->stats.exposed_comm_s += slm_time_s() - t0;
    double norm = sqrt(ss);
    double coef = slm_clip_coef(norm, max_norm); // optim's rule, as slm_clip_grad_norm
    if (coef < 1.0)
        for (int u = 0; u < f->n_units; u++)
            if (!f->units[u].frozen)
                slm_dev_scale(dev(f), f->units[u].grad, (float)coef, f->units[u].shard_numel);
    return norm;
}

void slm_fsdp_optimizer_step(slm_fsdp *f, const slm_adamw_hparams *h, float lr) {
    slm_fsdp_sync_grads(f);
    f->t++;
    for (int u = 0; u < f->n_units; u++) {
        slm_fsdp_unit *x = &f->units[u];
        if (x->frozen) continue;
        slm_adamw_step(f->model->dev, x->master, x->grad, x->m, x->v, x->shard_numel, h, lr, f->t,
                       x->ranges, x->n_ranges);
    }
    slm_fsdp_release_all(f);
}

void slm_fsdp_release_all(slm_fsdp *f) {
    for (int u = 0; u < f->n_units; u++)
        release(f, u);
}

void slm_fsdp_gather_unit(slm_fsdp *f, int u, float *out) {
    slm_fsdp_unit *x = &f->units[u];
    size_t b = (size_t)x->n_padded * sizeof(float);
    float *full = slm_dev_alloc(dev(f), b ? b : 64);
    slm_comm_allgather(f->shard, x->master, full, x->shard_numel, SLM_DTYPE_F32,
                       "all-gather (unit for saving)");
    slm_dev_copy(dev(f), out, full, (size_t)x->numel * sizeof(float), SLM_D2H);
    slm_dev_free(dev(f), full);
}

// Elements of unit u's shard below the unit's numel (the rest is padding).
static int64_t shard_valid(const slm_fsdp_unit *x) {
    int64_t valid = x->numel - x->shard_begin;
    if (valid > x->shard_numel) valid = x->shard_numel;
    return valid < 0 ? 0 : valid;
}

void slm_fsdp_load_unit(slm_fsdp *f, int u, const float *full) {
    slm_fsdp_unit *x = &f->units[u];
    release(f, u);
    slm_dev_zero(dev(f), x->master, (size_t)x->shard_numel * sizeof(float));
    slm_dev_copy(dev(f), x->master, full + x->shard_begin, (size_t)shard_valid(x) * sizeof(float),
                 SLM_H2D);
}

void slm_fsdp_shard_range(const slm_fsdp *f, int u, int64_t *begin, int64_t *end) {
    const slm_fsdp_unit *x = &f->units[u];
    *begin = x->shard_begin;
    *end = x->shard_begin + x->shard_numel;
}

bool slm_fsdp_shard_has(const slm_fsdp *f, int u, slm_fsdp_state what) {
    return what == SLM_FSDP_MASTER || !f->units[u].frozen;
}

// The device buffer of state `what` of unit u, checked against [off, off + n) of the shard.
static float *state_buf(const slm_fsdp *f, int u, slm_fsdp_state what, int64_t off, int64_t n) {
    SLM_ASSERT(u >= 0 && u < f->n_units);
    const slm_fsdp_unit *x = &f->units[u];
    SLM_ASSERT(off >= 0 && n >= 0 && off + n <= x->shard_numel);
    float *p = what == SLM_FSDP_MASTER ? x->master : what == SLM_FSDP_EXP_AVG ? x->m : x->v;
    SLM_ASSERT(p != NULL); // a frozen unit has no m / v (slm_fsdp_shard_has)
    return p + off;
}

void slm_fsdp_shard_read(const slm_fsdp *f, int u, slm_fsdp_state what, int64_t off, int64_t n,
                         float *host) {
    if (n > 0)
        slm_dev_copy(dev(f), host, state_buf(f, u, what, off, n), (size_t)n * sizeof(float),
                     SLM_D2H);
}

void slm_fsdp_shard_write(slm_fsdp *f, int u, slm_fsdp_state what, int64_t off, int64_t n,
                          const float *host) {
    if (what == SLM_FSDP_MASTER) release(f, u); // a gathered copy would be stale
    if (n > 0)
        slm_dev_copy(dev(f), state_buf(f, u, what, off, n), host, (size_t)n * sizeof(float),
                     SLM_H2D);
}

bool slm_fsdp_bind_masters(slm_fsdp *f) {
    if (f->S != 1) return false;
    slm_fsdp_release_all(f);
    for (int u = 0; u < f->n_base; u++)
        *param_slot(f, u) = f->units[u].master;
    return true;
}

void slm_fsdp_unbind_masters(slm_fsdp *f) {
    for (int u = 0; u < f->n_base; u++)
        if (f->units[u].gstate == G_FREE) *param_slot(f, u) = NULL;
}

int64_t slm_fsdp_steps_done(const slm_fsdp *f) {
    return f->t;
}
void slm_fsdp_set_steps_done(slm_fsdp *f, int64_t t) {
    f->t = t;
}
int slm_fsdp_group_size(const slm_fsdp *f) {
    return f->S;
}
bool slm_fsdp_is_replica(const slm_fsdp *f) {
    return f->rank / f->S != 0;
}

void slm_fsdp_opts_for_world(slm_fsdp_opts *o, int world) {
    if (world > 1) return;
    o->sharding = SLM_NO_SHARD;
    o->param_dtype = o->reduce_dtype = SLM_DTYPE_F32;
}

int slm_fsdp_shard_group_for(const slm_fsdp_opts *o, int world) {
    if (world <= 1 || o->sharding == SLM_NO_SHARD) return 1;
    if (o->sharding == SLM_HYBRID_SHARD && o->shard_group_size > 0) return o->shard_group_size;
    return world;
}

double slm_fsdp_estimate_bytes_lora(const slm_fsdp_opts *o, int world, double n_base,
                                    double n_adapter, double big_unit_numel) {
    double state = (n_base + 4.0 * n_adapter) * sizeof(float) / slm_fsdp_shard_group_for(o, world);
    if (world <= 1) return state;
    return state + 2.0 * big_unit_numel * sizeof(float); // gathered params; no base gradients
}

double slm_fsdp_estimate_bytes(const slm_fsdp_opts *o, int world, double n_params,
                               double big_unit_numel) {
    double state = 4.0 * n_params * sizeof(float) / slm_fsdp_shard_group_for(o, world);
    if (world <= 1) return state; // direct gradients, params aliased: nothing transient
    return state + 2.0 * 2.0 * big_unit_numel * sizeof(float);
}

slm_fsdp_stats slm_fsdp_get_stats(const slm_fsdp *f) {
    return f->stats;
}

void slm_fsdp_reset_stats(slm_fsdp *f) {
    memset(&f->stats, 0, sizeof f->stats);
}

size_t slm_fsdp_state_bytes(const slm_fsdp *f) {
    return f->state_bytes;
}

size_t slm_fsdp_peak_bytes(const slm_fsdp *f) {
    return f->state_bytes + f->peak_transient_bytes;
}
