// Llama-2 on per-unit FlatParameters: layout, seeded init, forward, backward (with optional
// activation checkpointing) and the chunked fused lm_head + cross-entropy.
//
// Shapes: N = B*T token rows, C hidden, H heads, KV kv heads, D = C/H head dim, F ffn, V vocab.
// Every tensor of a block is [N, features] row-major, so q_proj's output [N, H*D] is already the
// [B, T, H, D] layout the attention kernel takes: no transposes anywhere.
// Every buffer that holds parameters, gradients or activations is device memory (m->dev,
// device.h), reached only through the slm_dev_* calls; host memory here is metadata (unit
// layouts, view tables, the workspace struct) and the seeded init's staging buffers.
#include "model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Saved activations of one block (per layer, or one shared set under activation checkpointing).
typedef struct block_acts {
    float *ln1;           // [N, C] input_layernorm output
    float *rstd1;         // [N]
    float *q;             // [N, H*D] = [B, T, H, D], after RoPE
    float *k;             // [N, KV*D] = [B, T, KV, D], after RoPE
    float *v;             // [N, KV*D]
    float *att;           // [N, H*D] attention output (o_proj input)
    float *lse;           // [B, H, T] attention log-sum-exp
    float *xmid;          // [N, C] residual stream after the attention branch
    float *ln2;           // [N, C] post_attention_layernorm output
    float *rstd2;         // [N]
    float *gate, *up, *h; // [N, F] gate_proj, up_proj outputs, silu(gate) * up
} block_acts;

struct slm_llama_acts {
    slm_device *dev;  // where every buffer below lives (the model's device)
    int B, T;         // capacity: B*T rows, T positions
    int64_t N;        // B * T
    bool keep_logits; // logits [N, V] retained
    bool ckpt;        // allocated for activation checkpointing
    int rope_T;       // rows of the RoPE tables
    float *rope_cos;  // [rope_T, D/2]
    float *rope_sin;  // [rope_T, D/2]
    float *x;         // [L+1, N, C] block inputs; x[L] is the last block's output
    block_acts *blk;  // [n_blk]
    int n_blk;        // L, or 1 with activation checkpointing
    float *lnf;       // [N, C] final norm output
    float *rstdf;     // [N]
    float *logits;    // [N, V] (keep_logits only)
    float *chunk;     // [chunk_rows, V] logits / dlogits of one row chunk
    int64_t chunk_rows;
    float *losses;    // [N] per-row cross-entropy
    float *dlnf;      // [N, C] d(mean loss)/d(lnf), from the forward's fused head
    float *dwlm;      // [V, C] d(mean loss)/d(lm_head weight), lazily allocated
    int32_t *tokens;  // [N] copy of the last forward's tokens (embedding, its backward)
    int32_t *targets; // [N] copy of the last forward's targets (cross-entropy)
    int32_t *pos;     // [N] positions of the last packed forward (has_pos), else unused
    bool has_pos;
    // backward scratch, lazily allocated
    float *dx;               // [N, C] gradient of the residual stream
    float *dln;              // [N, C] gradient of a norm output / of the attention output
    float *dq;               // [N, H*D]
    float *dk, *dv;          // [N, KV*D]
    float *dh, *dgate, *dup; // [N, F]
    float *dnorm;            // [C] discarded norm-weight gradient of a frozen base (LoRA)
    // last forward
    int cur_B, cur_T;
    bool can_backward;
    int blk0_layer; // under checkpointing: the layer whose activations blk[0] holds (-1: none)
    size_t bytes;   // activation bytes allocated (reported by slm_llama_act_bytes)
};

// The tensors of a block_acts in one list (allocation and freeing walk it) and each one's
// floats per token row, in the same order.
enum { BLOCK_ACTS_N = 13 };
static void block_tensors(block_acts *b, float **t[BLOCK_ACTS_N]) {
    float **l[BLOCK_ACTS_N] = {&b->ln1,  &b->rstd1, &b->q,     &b->k,    &b->v,  &b->att, &b->lse,
                               &b->xmid, &b->ln2,   &b->rstd2, &b->gate, &b->up, &b->h};
    memcpy(t, l, sizeof l); // host table of pointers to the device pointers
}

static void block_widths(const slm_llama_config *c, int64_t w[BLOCK_ACTS_N]) {
    int64_t C = c->hidden_size, F = c->intermediate_size, H = c->num_attention_heads;
    int64_t D = slm_llama_head_dim(c), HD = H * D, KVD = c->num_key_value_heads * D;
    int64_t l[BLOCK_ACTS_N] = {C, 1, HD, KVD, KVD, HD, H, C, C, 1, F, F, F};
    memcpy(w, l, sizeof l); // host table of widths
}

static float *falloc(slm_llama_acts *a, int64_t n) {
    a->bytes += (size_t)n * sizeof(float);
    return slm_dev_alloc_f32(a->dev, n);
}

// ---------------------------------------------------------------------------------------------
// Layout

static void add_view(slm_unit_layout *u, const char *name, int ndim, int64_t d0, int64_t d1,
                     bool wd) {
    slm_param_view *v = &u->views[u->n_views++];
    memset(v, 0, sizeof *v); // host view table
    snprintf(v->name, sizeof v->name, "%s", name);
    v->ndim = ndim;
    v->shape[0] = d0;
    v->shape[1] = ndim == 2 ? d1 : 0;
    v->numel = ndim == 2 ? d0 * d1 : d0;
    v->offset = u->numel;
    v->weight_decay = wd;
    u->numel += v->numel;
}

static void build_layout(slm_llama *m) {
    const slm_llama_config *c = &m->cfg;
    int L = c->num_hidden_layers;
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    int64_t D = slm_llama_head_dim(c);
    int64_t HD = c->num_attention_heads * D, KVD = c->num_key_value_heads * D;
    m->n_units = L + 1;
    m->units = slm_xcalloc((size_t)m->n_units, sizeof *m->units);
    char nm[96];
    for (int l = 0; l < L; l++) {
        slm_unit_layout *u = &m->units[l];
        u->views = slm_xcalloc(BV_COUNT, sizeof *u->views);
#define BLOCK_VIEW(suffix, nd, a, b, wd)                                                           \
    snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix);                                      \
    add_view(u, nm, nd, a, b, wd)
        BLOCK_VIEW("input_layernorm.weight", 1, C, 0, false);
        BLOCK_VIEW("self_attn.q_proj.weight", 2, HD, C, true);
        BLOCK_VIEW("self_attn.k_proj.weight", 2, KVD, C, true);
        BLOCK_VIEW("self_attn.v_proj.weight", 2, KVD, C, true);
        BLOCK_VIEW("self_attn.o_proj.weight", 2, C, HD, true);
        BLOCK_VIEW("post_attention_layernorm.weight", 1, C, 0, false);
        BLOCK_VIEW("mlp.gate_proj.weight", 2, F, C, true);
        BLOCK_VIEW("mlp.up_proj.weight", 2, F, C, true);
        BLOCK_VIEW("mlp.down_proj.weight", 2, C, F, true);
#undef BLOCK_VIEW
    }
    slm_unit_layout *r = &m->units[L];
    r->views = slm_xcalloc(3, sizeof *r->views);
    add_view(r, "model.embed_tokens.weight", 2, V, C, false);
    add_view(r, "model.norm.weight", 1, C, 0, false);
    if (!c->tie_word_embeddings) add_view(r, "lm_head.weight", 2, V, C, true);
}

slm_status slm_llama_init_on(slm_llama *m, slm_device *dev, const slm_llama_config *cfg,
                             bool alloc) {
    memset(m, 0, sizeof *m); // the host struct (metadata and pointers)
    m->dev = dev;
    slm_status st = slm_llama_config_validate(cfg);
    if (st) return st;
    m->cfg = *cfg;
    build_layout(m);
    m->params = slm_xcalloc((size_t)m->n_units, sizeof *m->params);
    m->grads = slm_xcalloc((size_t)m->n_units, sizeof *m->grads);
    m->owns_buffers = alloc;
    if (alloc) {
        for (int u = 0; u < m->n_units; u++) {
            int64_t n = m->units[u].numel;
            m->params[u] = slm_dev_alloc_f32(dev, n);
            m->grads[u] = slm_dev_alloc_f32(dev, n);
            slm_dev_zero(dev, m->params[u], (size_t)n * sizeof(float));
            slm_dev_zero(dev, m->grads[u], (size_t)n * sizeof(float));
        }
    }
    return SLM_OK;
}

slm_status slm_llama_init(slm_llama *m, const slm_llama_config *cfg, bool alloc) {
    return slm_llama_init_on(m, NULL, cfg, alloc);
}

static void acts_free(slm_llama_acts *a);

void slm_llama_free(slm_llama *m) {
    if (!m) return;
    slm_units_free(m->dev, m->n_units, m->units, m->params, m->grads, m->owns_buffers);
    acts_free(m->acts);
    slm_lora_free(m);
    memset(m, 0, sizeof *m); // the host struct
}

const slm_param_view *slm_llama_find(const slm_llama *m, const char *name, int *unit) {
    for (int u = 0; u < m->n_units; u++) {
        for (int i = 0; i < m->units[u].n_views; i++) {
            if (strcmp(m->units[u].views[i].name, name) == 0) {
                if (unit) *unit = u;
                return &m->units[u].views[i];
            }
        }
    }
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Init

// Seed of the stream of view `view` of unit `unit` (documented in docs/model.md).
static uint64_t view_seed(uint64_t seed, int unit, int view) {
    return slm_mix64(slm_mix64(slm_mix64(seed) ^ (uint64_t)unit) ^ (uint64_t)view);
}

static void init_view(const slm_llama *m, uint64_t seed, int unit, int vi, float *flat) {
    const slm_param_view *v = &m->units[unit].views[vi];
    float *p = flat + v->offset;
    if (v->ndim == 1) { // RMSNorm weights
        for (int64_t i = 0; i < v->numel; i++)
            p[i] = 1.0f;
        return;
    }
    slm_rng r;
    slm_rng_seed(&r, view_seed(seed, unit, vi));
    float std = m->cfg.initializer_range;
    for (int64_t i = 0; i < v->numel; i++)
        p[i] = std * slm_rng_normal(&r);
}

void slm_llama_init_unit_weights(const slm_llama *m, uint64_t seed, int unit, float *flat) {
    SLM_ASSERT(unit >= 0 && unit < m->n_units && flat);
    for (int i = 0; i < m->units[unit].n_views; i++)
        init_view(m, seed, unit, i, flat);
}

// Floats of host staging slm_llama_init_weights fills before copying to the device (64 MiB, or
// the largest unit, or the whole model if smaller).
#define INIT_STAGE_FLOATS ((int64_t)1 << 24)

// One group of units [u0, ...) initialised on the host: unit u at stage + off[u].
typedef struct init_group {
    const slm_llama *m;
    uint64_t seed;
    int u0;
    float *stage;       // host staging
    const int64_t *off; // [n_units] each unit's place in stage
} init_group;

// Task t of a group: the t-th (unit, view) pair counted from unit u0.
static void init_task(void *ctx, int t) {
    const init_group *g = ctx;
    int u = g->u0, i = t;
    while (i >= g->m->units[u].n_views)
        i -= g->m->units[u++].n_views;
    if (g->m->params[u]) init_view(g->m, g->seed, u, i, g->stage + g->off[u]);
}

void slm_llama_init_weights(slm_llama *m, uint64_t seed) {
    // Groups of units are generated on a host staging buffer, one task per (unit, view) (each an
    // independent stream, so any schedule gives the same bits), then copied to the device.
    int64_t cap = INIT_STAGE_FLOATS, total = 0;
    for (int u = 0; u < m->n_units; u++) {
        int64_t n = m->params[u] ? m->units[u].numel : 0;
        total += n;
        if (n > cap) cap = n;
    }
    if (cap > total) cap = total;
    init_group g = {.m = m, .seed = seed};
    g.stage = slm_dev_host_alloc(m->dev, (size_t)cap * sizeof(float)); // host staging
    int64_t *off = slm_xcalloc((size_t)m->n_units, sizeof *off);
    g.off = off;
    for (int u0 = 0; u0 < m->n_units;) {
        int u1 = u0, tasks = 0;
        int64_t used = 0;
        for (; u1 < m->n_units; u1++) {
            int64_t n = m->params[u1] ? m->units[u1].numel : 0;
            if (u1 > u0 && used + n > cap) break;
            off[u1] = used;
            used += n;
            tasks += m->units[u1].n_views;
        }
        g.u0 = u0;
        slm_parallel_tasks(tasks, init_task, &g);
        for (int u = u0; u < u1; u++)
            if (m->params[u])
                slm_dev_copy(m->dev, m->params[u], g.stage + off[u],
                             (size_t)m->units[u].numel * sizeof(float), SLM_H2D);
        u0 = u1;
    }
    free(off);
    slm_dev_host_free(m->dev, g.stage);
}

// ---------------------------------------------------------------------------------------------
// Activation workspace

static void acts_free(slm_llama_acts *a) {
    if (!a) return;
    for (int i = 0; i < a->n_blk; i++) {
        float **t[BLOCK_ACTS_N];
        block_tensors(&a->blk[i], t);
        for (int j = 0; j < BLOCK_ACTS_N; j++)
            slm_dev_free(a->dev, *t[j]);
    }
    free(a->blk); // host array of block_acts
    void *dev_bufs[] = {a->rope_cos, a->rope_sin, a->x,    a->lnf,  a->rstdf,  a->logits,
                        a->chunk,    a->losses,   a->dlnf, a->dwlm, a->tokens, a->targets,
                        a->pos,      a->dx,       a->dln,  a->dq,   a->dk,     a->dv,
                        a->dh,       a->dgate,    a->dup,  a->dnorm};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof dev_bufs[0]; i++)
        slm_dev_free(a->dev, dev_bufs[i]);
    free(a);
}

static slm_llama_acts *acts_new(const slm_llama *m, int B, int T, bool keep_logits) {
    const slm_llama_config *c = &m->cfg;
    int L = c->num_hidden_layers;
    int64_t C = c->hidden_size, V = c->vocab_size, D = slm_llama_head_dim(c);
    slm_llama_acts *a = slm_xcalloc(1, sizeof *a);
    a->dev = m->dev;
    a->B = B;
    a->T = T;
    a->N = (int64_t)B * T;
    int64_t N = a->N;
    a->keep_logits = keep_logits;
    a->ckpt = m->activation_checkpointing;
    a->rope_T = T;
    a->rope_cos = falloc(a, (int64_t)a->rope_T * (D / 2)); // D: the head dim
    a->rope_sin = falloc(a, (int64_t)a->rope_T * (D / 2));
    {
        double *inv_freq = slm_xcalloc((size_t)(D / 2), sizeof *inv_freq);
        slm_llama_rope_inv_freq(c, (int)D, inv_freq); // scaled RoPE (rope_scaling) included
        slm_dev_rope_tables(a->dev, a->rope_cos, a->rope_sin, a->rope_T, (int)(D / 2), inv_freq);
        free(inv_freq);
    }
    a->x = falloc(a, (int64_t)(L + 1) * N * C);
    a->n_blk = a->ckpt ? 1 : L;
    a->blk = slm_xcalloc((size_t)a->n_blk, sizeof *a->blk);
    int64_t w[BLOCK_ACTS_N];
    block_widths(c, w);
    for (int i = 0; i < a->n_blk; i++) {
        float **t[BLOCK_ACTS_N];
        block_tensors(&a->blk[i], t);
        for (int j = 0; j < BLOCK_ACTS_N; j++)
            *t[j] = falloc(a, N * w[j]);
    }
    a->lnf = falloc(a, N * C);
    a->rstdf = falloc(a, N);
    if (keep_logits) a->logits = falloc(a, N * V);
    // Row chunks of ~16 MiB of logits, at least 256 rows so the lm_head GEMMs stay efficient.
    int64_t rows = ((int64_t)1 << 22) / V;
    if (rows < 256) rows = 256;
    if (m->head_chunk_rows > 0) rows = m->head_chunk_rows;
    if (rows > N) rows = N;
    a->chunk_rows = rows;
    a->chunk = falloc(a, rows * V);
    a->losses = falloc(a, N);
    a->dlnf = falloc(a, N * C);
    // ids (not counted in bytes, as slm_llama_act_bytes reports float activations)
    a->tokens = slm_dev_alloc(a->dev, (size_t)N * sizeof(int32_t));
    a->targets = slm_dev_alloc(a->dev, (size_t)N * sizeof(int32_t));
    a->pos = slm_dev_alloc(a->dev, (size_t)N * sizeof(int32_t));
    return a;
}

static void acts_alloc_backward(const slm_llama *m, slm_llama_acts *a) {
    if (a->dx) return;
    const slm_llama_config *c = &m->cfg;
    int64_t N = a->N, C = c->hidden_size, F = c->intermediate_size;
    int64_t D = slm_llama_head_dim(c), HD = (int64_t)c->num_attention_heads * D;
    int64_t KVD = (int64_t)c->num_key_value_heads * D;
    a->dx = falloc(a, N * C);
    a->dln = falloc(a, N * (HD > C ? HD : C)); // d(norm output) [N, C] and d(att) [N, H*D]
    a->dq = falloc(a, N * HD);
    a->dk = falloc(a, N * KVD);
    a->dv = falloc(a, N * KVD);
    a->dh = falloc(a, N * F);
    a->dgate = falloc(a, N * F);
    a->dup = falloc(a, N * F);
}

void slm_llama_set_shape(slm_llama *m, int B, int T, bool keep_logits) {
    SLM_ASSERT(B > 0 && T > 0);
    acts_free(m->acts);
    m->acts = acts_new(m, B, T, keep_logits);
}

size_t slm_llama_act_bytes(const slm_llama *m) {
    return (m->acts ? m->acts->bytes : 0) + slm_lora_act_bytes(m);
}

double slm_llama_act_bytes_estimate(const slm_llama_config *c, int B, int T,
                                    bool activation_checkpointing) {
    double L = c->num_hidden_layers, C = c->hidden_size, F = c->intermediate_size;
    double V = c->vocab_size, H = c->num_attention_heads;
    double D = slm_llama_head_dim(c), HD = H * D, KVD = c->num_key_value_heads * D;
    double N = (double)B * T;
    double rows = (double)(((int64_t)1 << 22) / (c->vocab_size > 0 ? c->vocab_size : 1));
    if (rows < 256) rows = 256;
    if (rows > N) rows = N;
    double per_block = N * (2 * C + 2 * HD + 2 + 2 * C + 2 * KVD + H + 3 * F);
    double floats = 2 * T * (D / 2) + (L + 1) * N * C +
                    (activation_checkpointing ? 1 : L) * per_block + N * C + N + rows * V + N +
                    N * C                                                         // forward
                    + N * (C + (HD > C ? HD : C) + HD + 2 * KVD + 3 * F) + V * C; // bwd, dwlm
    return floats * sizeof(float) + 3 * N * sizeof(int32_t); // tokens, targets, positions
}

const float *slm_llama_logits(const slm_llama *m) {
    SLM_ASSERT(m->acts && m->acts->keep_logits);
    return m->acts->logits;
}

void slm_llama_logits_to_host(const slm_llama *m, int64_t row0, int64_t rows, float *host) {
    SLM_ASSERT(m->acts && m->acts->keep_logits && host);
    const slm_llama_acts *a = m->acts;
    int64_t V = m->cfg.vocab_size, N = (int64_t)a->cur_B * a->cur_T;
    SLM_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= N);
    slm_dev_copy(m->dev, host, a->logits + row0 * V, (size_t)(rows * V) * sizeof(float), SLM_D2H);
}

// ---------------------------------------------------------------------------------------------
// Forward

#define HOOK(m, which, u)                                                                          \
    do {                                                                                           \
        if ((m)->hooks.which) (m)->hooks.which((m)->hooks.ctx, (u));                               \
    } while (0)

static const float *unit_params(const slm_llama *m, int u) {
    if (!m->params[u]) slm_fatal("model: params of unit %d are NULL (not gathered?)", u);
    return m->params[u];
}

static float *unit_grads(const slm_llama *m, int u) {
    if (!m->grads[u]) slm_fatal("model: grads of unit %d are NULL", u);
    return m->grads[u];
}

// The projections of block l for a forward (grads false) or a backward.
static slm_proj_ctx block_proj(const slm_llama *m, const slm_llama_acts *a, int l, bool grads) {
    float *g = grads && !slm_llama_base_frozen(m) ? unit_grads(m, l) : NULL;
    int64_t N = (int64_t)a->cur_B * a->cur_T;
    return (slm_proj_ctx){
        .m = m, .l = l, .blk = a->ckpt ? 0 : l, .p = unit_params(m, l), .g = g, .N = N};
}

// RoPE on b's q and k, then causal attention into b->att, b->lse (packed samples: positions
// restart per sample and attention stays inside it). With bf16 compute q, k and v are rounded
// to bf16 first (the attention matmuls' inputs; backward then works on the rounded values, and
// the gradient passes the rounding unchanged, as autocast's casts do).
static void attention_fwd(const slm_llama_config *c, const slm_llama_acts *a, block_acts *b,
                          bool bf16) {
    int B = a->cur_B, T = a->cur_T, H = c->num_attention_heads, KV = c->num_key_value_heads;
    int D = slm_llama_head_dim(c);
    const int32_t *pos = a->has_pos ? a->pos : NULL;
    slm_dev_rope_apply(a->dev, b->q, a->rope_cos, a->rope_sin, B, T, H, D, 0, pos, false);
    slm_dev_rope_apply(a->dev, b->k, a->rope_cos, a->rope_sin, B, T, KV, D, 0, pos, false);
    if (bf16) {
        slm_dev_round_bf16(a->dev, b->q, (int64_t)B * T * H * D);
        slm_dev_round_bf16(a->dev, b->k, (int64_t)B * T * KV * D);
        slm_dev_round_bf16(a->dev, b->v, (int64_t)B * T * KV * D);
    }
    slm_dev_attention_fwd(a->dev, b->att, b->lse, b->q, b->k, b->v, pos, B, T, H, KV, D);
}

// Backward of attention_fwd: d(att) in a->dln -> a->dq, a->dk (rotated back), a->dv.
static void attention_bwd(const slm_llama_config *c, const slm_llama_acts *a, const block_acts *b) {
    int B = a->cur_B, T = a->cur_T, H = c->num_attention_heads, KV = c->num_key_value_heads;
    int D = slm_llama_head_dim(c);
    const int32_t *pos = a->has_pos ? a->pos : NULL;
    slm_dev_attention_bwd(a->dev, a->dq, a->dk, a->dv, a->dln, b->q, b->k, b->v, b->att, b->lse,
                          pos, B, T, H, KV, D);
    // RoPE is a rotation: its backward rotates the gradient by the opposite angle.
    slm_dev_rope_apply(a->dev, a->dq, a->rope_cos, a->rope_sin, B, T, H, D, 0, pos, true);
    slm_dev_rope_apply(a->dev, a->dk, a->rope_cos, a->rope_sin, B, T, KV, D, 0, pos, true);
}

// Block l forward from xin [N, C] into the saved activations `b`; writes the block output into
// xout [N, C] unless xout is NULL (the recomputation under activation checkpointing needs
// everything but the output, which is the next block's saved input). Each projection includes
// its LoRA adapter, if any (proj.c).
static void block_forward(const slm_llama *m, int l, const slm_llama_acts *a, const float *xin,
                          block_acts *b, float *xout) {
    const slm_llama_config *c = &m->cfg;
    const slm_param_view *vw = m->units[l].views;
    slm_proj_ctx pc = block_proj(m, a, l, false);
    int64_t N = pc.N, C = c->hidden_size, F = c->intermediate_size;
    slm_device *d = m->dev;
    size_t row_bytes = (size_t)(N * C) * sizeof(float);
    // attention branch: x + o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))), n = norm(x)
    slm_dev_rmsnorm_fwd(d, b->ln1, b->rstd1, xin, pc.p + vw[BV_LN1].offset, N, (int)C,
                        c->rms_norm_eps);
    slm_proj_fwd(&pc, SLM_LORA_Q, b->ln1, b->q, false);
    slm_proj_fwd(&pc, SLM_LORA_K, b->ln1, b->k, false);
    slm_proj_fwd(&pc, SLM_LORA_V, b->ln1, b->v, false);
    attention_fwd(c, a, b, m->bf16_compute);
    slm_dev_copy(d, b->xmid, xin, row_bytes, SLM_D2D);
    slm_proj_fwd(&pc, SLM_LORA_O, b->att, b->xmid, true); // residual add fused
    // MLP branch: xmid + down_proj(silu(gate_proj(n)) * up_proj(n)), n = norm(xmid)
    slm_dev_rmsnorm_fwd(d, b->ln2, b->rstd2, b->xmid, pc.p + vw[BV_LN2].offset, N, (int)C,
                        c->rms_norm_eps);
    slm_proj_fwd(&pc, SLM_LORA_GATE, b->ln2, b->gate, false);
    slm_proj_fwd(&pc, SLM_LORA_UP, b->ln2, b->up, false);
    slm_dev_swiglu_fwd(d, b->h, b->gate, b->up, N, F);
    if (xout) slm_dev_copy(d, xout, b->xmid, row_bytes, SLM_D2D);
    slm_proj_fwd(&pc, SLM_LORA_DOWN, b->h, xout, true); // xout NULL: the adapter's saved acts only
}

// Final norm -> lm_head -> cross-entropy in row chunks. With `grad`, the backward of the head
// for the mean loss is done here too, chunk by chunk, while the chunk's dlogits are at hand:
// dlnf = dlogits @ W_lm, dwlm = dlogits^T @ lnf (so no [N, V] buffer is ever needed).
static float head_forward(slm_llama *m, const int32_t *targets, int64_t N, bool grad) {
    slm_llama_acts *a = m->acts;
    const slm_llama_config *c = &m->cfg;
    int L = c->num_hidden_layers;
    int64_t C = c->hidden_size, V = c->vocab_size;
    const float *root = unit_params(m, L);
    const slm_param_view *rv = m->units[L].views;
    const float *Wlm = root + (c->tie_word_embeddings ? rv[RV_EMB].offset : rv[RV_LM].offset);
    slm_device *d = m->dev;
    slm_dev_rmsnorm_fwd(d, a->lnf, a->rstdf, a->x + (int64_t)L * N * C, root + rv[RV_NORM].offset,
                        N, (int)C, c->rms_norm_eps);
    if (a->keep_logits)
        slm_dev_linear_fwd(d, m->bf16_compute, a->logits, a->lnf, Wlm, N, C, V, false);
    if (!targets) return 0.0f;
    int64_t n_valid = 0;
    for (int64_t i = 0; i < N; i++) {
        if (targets[i] == -1) continue;
        if (targets[i] < 0 || targets[i] >= V)
            slm_fatal("model: target %d at row %lld is outside [0, %lld) and not the ignore "
                      "index -1",
                      targets[i], (long long)i, (long long)V);
        n_valid++;
    }
    slm_dev_copy(d, a->targets, targets, (size_t)N * sizeof(int32_t), SLM_H2D); // validated
    float dscale = (grad && n_valid > 0) ? 1.0f / (float)n_valid : 0.0f;
    float *dwlm = NULL; // a frozen base (LoRA) gets no lm_head gradient, only d(lnf)
    if (grad && !slm_llama_base_frozen(m)) {
        if (!a->dwlm) a->dwlm = falloc(a, V * C); // once per workspace
        dwlm = a->dwlm;
        slm_dev_zero(d, dwlm, (size_t)(V * C) * sizeof(float));
    }
    if (grad) slm_dev_zero(d, a->dlnf, (size_t)(N * C) * sizeof(float));
    for (int64_t r0 = 0; r0 < N; r0 += a->chunk_rows) {
        int64_t rows = N - r0 < a->chunk_rows ? N - r0 : a->chunk_rows;
        float *lg = a->chunk; // [rows, V]
        if (a->keep_logits)
            slm_dev_copy(d, lg, a->logits + r0 * V, (size_t)(rows * V) * sizeof(float), SLM_D2D);
        else
            slm_dev_linear_fwd(d, m->bf16_compute, lg, a->lnf + r0 * C, Wlm, rows, C, V, false);
        slm_dev_cross_entropy(d, lg, a->losses + r0, a->targets + r0, rows, V, dscale);
        if (dscale != 0.0f)
            slm_dev_linear_bwd(d, m->bf16_compute, a->dlnf + r0 * C, dwlm, lg, a->lnf + r0 * C, Wlm,
                               rows, C, V);
    }
    double sum = slm_dev_sum(d, a->losses, N);
    return n_valid ? (float)(sum / (double)n_valid) : 0.0f;
}

float slm_llama_forward_loss(slm_llama *m, const int32_t *tokens, const int32_t *targets, int B,
                             int T) {
    bool was = m->loss_only;
    m->loss_only = true;
    float loss = slm_llama_forward(m, tokens, targets, B, T);
    m->loss_only = was;
    return loss;
}

float slm_llama_forward_loss_packed(slm_llama *m, const int32_t *tokens, const int32_t *targets,
                                    const int32_t *pos, int B, int T) {
    bool was = m->loss_only;
    m->loss_only = true;
    float loss = slm_llama_forward_packed(m, tokens, targets, pos, B, T);
    m->loss_only = was;
    return loss;
}

float slm_llama_forward(slm_llama *m, const int32_t *tokens, const int32_t *targets, int B, int T) {
    return slm_llama_forward_packed(m, tokens, targets, NULL, B, T);
}

float slm_llama_forward_packed(slm_llama *m, const int32_t *tokens, const int32_t *targets,
                               const int32_t *pos, int B, int T) {
    const slm_llama_config *c = &m->cfg;
    int L = c->num_hidden_layers, C = c->hidden_size;
    SLM_ASSERT(B > 0 && T > 0);
    if (!m->acts) slm_llama_set_shape(m, B, T, false);
    slm_llama_acts *a = m->acts;
    if (a->ckpt != m->activation_checkpointing) {
        // activation_checkpointing was toggled since set_shape: re-plan the workspace.
        slm_llama_set_shape(m, a->B, a->T, a->keep_logits);
        a = m->acts;
    }
    int64_t N = (int64_t)B * T;
    if (N > a->N || T > a->rope_T)
        slm_fatal("model: forward on B=%d T=%d exceeds the workspace (B=%d T=%d): call "
                  "slm_llama_set_shape first",
                  B, T, a->B, a->T);
    for (int64_t i = 0; i < N; i++) {
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            slm_fatal("model: token %d at row %lld is outside [0, %d)", tokens[i], (long long)i,
                      c->vocab_size);
    }
    if (pos) {
        for (int64_t i = 0; i < N; i++) {
            int64_t t = i % T;
            if (pos[i] < 0 || pos[i] >= a->rope_T || (t == 0 && pos[i] != 0) ||
                (pos[i] != 0 && pos[i] != pos[i - 1] + 1))
                slm_fatal("model: position %d at row %lld (t = %lld): positions must start at 0 "
                          "and grow by one inside a sample, below %d",
                          pos[i], (long long)i, (long long)t, a->rope_T);
        }
        slm_dev_copy(a->dev, a->pos, pos, (size_t)N * sizeof(int32_t), SLM_H2D); // validated
    }
    a->has_pos = pos != NULL;
    a->cur_B = B;
    a->cur_T = T;
    a->can_backward = false;
    a->blk0_layer = a->ckpt ? L - 1 : -1; // the last block's activations stay in blk[0]
    slm_dev_copy(a->dev, a->tokens, tokens, (size_t)N * sizeof(int32_t), SLM_H2D); // validated
    bool grad = targets != NULL && !m->loss_only;
    slm_lora_acts_ensure(m, a->n_blk, a->N, grad);

    HOOK(m, pre_forward, L);
    const float *root = unit_params(m, L);
    slm_dev_embedding_fwd(a->dev, a->x, a->tokens, root + m->units[L].views[RV_EMB].offset, N, C);
    for (int l = 0; l < L; l++) {
        HOOK(m, pre_forward, l);
        block_acts *b = &a->blk[a->ckpt ? 0 : l];
        block_forward(m, l, a, a->x + (int64_t)l * N * C, b, a->x + (int64_t)(l + 1) * N * C);
        HOOK(m, post_forward, l);
    }
    float loss = 0.0f;
    if (targets || a->keep_logits) loss = head_forward(m, targets, N, grad);
    HOOK(m, post_forward, L);
    a->can_backward = grad;
    return loss;
}

// ---------------------------------------------------------------------------------------------
// Backward

// Where a norm weight's gradient goes: its place in the unit's gradients g, or scratch that is
// discarded when the base is frozen (g NULL: LoRA).
static float *norm_grad(slm_llama_acts *a, float *g, const slm_param_view *v) {
    if (g) return g + v->offset;
    if (!a->dnorm) a->dnorm = falloc(a, v->numel);
    return a->dnorm;
}

// Block l backward. On entry a->dx holds dL/d(block output); on exit dL/d(block input).
// Parameter gradients are added into grads[l] (and the adapters' into lora_grads[l]; with LoRA
// the base gets none).
static void block_backward(const slm_llama *m, int l, slm_llama_acts *a, const float *xin,
                           const block_acts *b) {
    const slm_llama_config *c = &m->cfg;
    const slm_param_view *vw = m->units[l].views;
    slm_proj_ctx pc = block_proj(m, a, l, true);
    int64_t N = pc.N, C = c->hidden_size, F = c->intermediate_size;
    slm_device *d = m->dev;
    // MLP branch; the residual passes dx through unchanged and the norm backward adds into it.
    slm_proj_bwd(&pc, b->h, a->dh, 1, (slm_proj_dy[]){{SLM_LORA_DOWN, a->dx}});
    slm_dev_swiglu_bwd(d, a->dgate, a->dup, a->dh, b->gate, b->up, N, F);
    slm_proj_bwd(&pc, b->ln2, a->dln, 2,
                 (slm_proj_dy[]){{SLM_LORA_GATE, a->dgate}, {SLM_LORA_UP, a->dup}});
    slm_dev_rmsnorm_bwd(d, a->dx, norm_grad(a, pc.g, &vw[BV_LN2]), a->dln, b->xmid,
                        pc.p + vw[BV_LN2].offset, b->rstd2, N, (int)C);
    // attention branch (a->dln holds d(att) first, then d(ln1))
    slm_proj_bwd(&pc, b->att, a->dln, 1, (slm_proj_dy[]){{SLM_LORA_O, a->dx}});
    attention_bwd(c, a, b);
    slm_proj_bwd(&pc, b->ln1, a->dln, 3,
                 (slm_proj_dy[]){{SLM_LORA_Q, a->dq}, {SLM_LORA_K, a->dk}, {SLM_LORA_V, a->dv}});
    slm_dev_rmsnorm_bwd(d, a->dx, norm_grad(a, pc.g, &vw[BV_LN1]), a->dln, xin,
                        pc.p + vw[BV_LN1].offset, b->rstd1, N, (int)C);
}

void slm_llama_backward(slm_llama *m, float loss_scale) {
    slm_llama_acts *a = m->acts;
    if (!a || !a->can_backward)
        slm_fatal("model: backward without a preceding forward with targets (or called twice, "
                  "or loss_only set)");
    a->can_backward = false;
    acts_alloc_backward(m, a);
    const slm_llama_config *c = &m->cfg;
    int L = c->num_hidden_layers, C = c->hidden_size;
    int64_t V = c->vocab_size, N = (int64_t)a->cur_B * a->cur_T;
    const slm_param_view *rv = m->units[L].views;

    HOOK(m, pre_backward, L);
    const float *root = unit_params(m, L);
    float *groot = slm_llama_base_frozen(m) ? NULL : unit_grads(m, L); // LoRA: none
    // lm_head: the forward left d(mean loss)/dW in dwlm; scale and add.
    slm_device *d = m->dev;
    if (groot) {
        float *gW = groot + (c->tie_word_embeddings ? rv[RV_EMB].offset : rv[RV_LM].offset);
        slm_dev_axpy(d, gW, loss_scale, a->dwlm, V * C);
    }
    if (loss_scale != 1.0f) slm_dev_scale(d, a->dlnf, loss_scale, N * C);
    slm_dev_zero(d, a->dx, (size_t)N * C * sizeof(float));
    slm_dev_rmsnorm_bwd(d, a->dx, norm_grad(a, groot, &rv[RV_NORM]), a->dlnf,
                        a->x + (int64_t)L * N * C, root + rv[RV_NORM].offset, a->rstdf, N, C);
    for (int l = L - 1; l >= 0; l--) {
        HOOK(m, pre_backward, l);
        const float *xin = a->x + (int64_t)l * N * C;
        block_acts *b = &a->blk[a->ckpt ? 0 : l];
        // Recompute, except for the last block, whose forward activations are still there.
        if (a->ckpt && a->blk0_layer != l) {
            block_forward(m, l, a, xin, b, NULL);
            a->blk0_layer = l;
        }
        block_backward(m, l, a, xin, b);
        HOOK(m, post_backward, l);
    }
    if (groot) slm_dev_embedding_bwd(d, groot + rv[RV_EMB].offset, a->tokens, a->dx, N, C);
    HOOK(m, post_backward, L);
}

void slm_llama_zero_grad(slm_llama *m) {
    for (int u = 0; u < m->n_units; u++) {
        if (m->grads[u])
            slm_dev_zero(m->dev, m->grads[u], (size_t)m->units[u].numel * sizeof(float));
    }
}
