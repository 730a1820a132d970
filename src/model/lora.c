// LoRA adapters around the block projections (Hu et al. 2021; PEFT's LoraLayer arithmetic):
// config parsing, adapter unit layouts, PEFT's init, the adapter forward / backward that
// proj.c runs with each targeted projection, inverted dropout from a counter-based hash, and
// merging into the base weights. Contract in model.h (internals in model_internal.h).
// Adapter parameters, gradients and activations are device memory (m->dev), reached through
// slm_dev_*; the host holds the layouts and the staging buffers of init and merge.
#include "model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_targets[SLM_LORA_N_TARGETS] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

const char *slm_lora_target_name(int t) {
    return t >= 0 && t < SLM_LORA_N_TARGETS ? k_targets[t] : NULL;
}

slm_status slm_lora_parse_targets(const char *s, uint32_t *out) {
    *out = 0;
    if (!s || !*s)
        return slm_fail(SLM_E_ARG, "--lora-targets: empty; expected a comma-separated list of "
                                   "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                                   "down_proj (or all)");
    if (!strcmp(s, "all")) {
        *out = (1u << SLM_LORA_N_TARGETS) - 1;
        return SLM_OK;
    }
    const char *p = s;
    for (;;) { // every comma-separated item, the empty one after a trailing comma included
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int found = -1;
        for (int t = 0; t < SLM_LORA_N_TARGETS; t++)
            if (strlen(k_targets[t]) == n && !strncmp(p, k_targets[t], n)) found = t;
        if (found < 0 || (*out & (1u << found)))
            return slm_fail(SLM_E_ARG,
                            "--lora-targets: %s \"%.*s\" in \"%s\"; expected a comma-separated "
                            "list of distinct names among q_proj, k_proj, v_proj, o_proj, "
                            "gate_proj, up_proj, down_proj (or all)",
                            found < 0 ? "unknown module" : "repeated module", (int)n, p, s);
        *out |= 1u << found;
        if (!e) break;
        p = e + 1;
    }
    return SLM_OK;
}

slm_status slm_lora_config_validate(const slm_lora_config *lc) {
    if (lc->rank < 1) return slm_fail(SLM_E_ARG, "--lora-rank must be >= 1 (got %d)", lc->rank);
    if (!(lc->alpha > 0) || !isfinite(lc->alpha))
        return slm_fail(SLM_E_ARG, "--lora-alpha must be a positive number (got %g)",
                        (double)lc->alpha);
    if (!(lc->dropout >= 0 && lc->dropout < 1))
        return slm_fail(SLM_E_ARG, "--lora-dropout must be in [0, 1) (got %g)",
                        (double)lc->dropout);
    if (!lc->targets || lc->targets >> SLM_LORA_N_TARGETS)
        return slm_fail(SLM_E_ARG, "--lora-targets: no (or an unknown) target module");
    return SLM_OK;
}

static bool close6(float a, float b) {
    return fabsf(a - b) <= 1e-6f * fmaxf(fabsf(a), fabsf(b));
}

bool slm_lora_config_same(const slm_lora_config *a, const slm_lora_config *b) {
    return a->rank == b->rank && a->targets == b->targets && close6(a->alpha, b->alpha) &&
           close6(a->dropout, b->dropout);
}

void slm_lora_target_shape(const slm_llama_config *c, int t, int64_t *out, int64_t *in) {
    int64_t C = c->hidden_size, F = c->intermediate_size;
    int64_t D = slm_llama_head_dim(c);
    int64_t HD = (int64_t)c->num_attention_heads * D, KVD = (int64_t)c->num_key_value_heads * D;
    switch (t) {
    case SLM_LORA_Q:
        *out = HD, *in = C;
        break;
    case SLM_LORA_K:
    case SLM_LORA_V:
        *out = KVD, *in = C;
        break;
    case SLM_LORA_O:
        *out = C, *in = HD;
        break;
    case SLM_LORA_GATE:
    case SLM_LORA_UP:
        *out = F, *in = C;
        break;
    default:
        *out = C, *in = F;
        break; // down_proj
    }
}

int64_t slm_lora_n_params(const slm_llama_config *c, const slm_lora_config *lc) {
    int64_t n = 0;
    for (int t = 0; t < SLM_LORA_N_TARGETS; t++) {
        if (!(lc->targets & (1u << t))) continue;
        int64_t o, i;
        slm_lora_target_shape(c, t, &o, &i);
        n += (int64_t)lc->rank * (o + i);
    }
    return n * c->num_hidden_layers;
}

// ---------------------------------------------------------------------------------------------
// Layout and init

int slm_llama_lora_view(const slm_llama *m, int t) {
    if (m->lora.rank < 1 || !(m->lora.targets & (1u << t))) return -1;
    int j = 0;
    for (int k = 0; k < t; k++)
        j += (m->lora.targets >> k) & 1u;
    return 2 * j;
}

static void add_lora_view(slm_unit_layout *u, const char *name, int64_t d0, int64_t d1) {
    slm_param_view *v = &u->views[u->n_views++];
    memset(v, 0, sizeof *v); // host view table
    snprintf(v->name, sizeof v->name, "%s", name);
    v->ndim = 2;
    v->shape[0] = d0;
    v->shape[1] = d1;
    v->offset = u->numel;
    v->numel = d0 * d1;
    v->weight_decay = true; // as every LoRA matrix under HF Trainer's AdamW grouping
    u->numel += v->numel;
}

slm_status slm_llama_lora_init(slm_llama *m, const slm_lora_config *lc, bool alloc, uint64_t seed) {
    slm_status st = slm_lora_config_validate(lc);
    if (st) return st;
    int L = m->cfg.num_hidden_layers, r = lc->rank;
    m->lora = *lc;
    m->lora_units = slm_xcalloc((size_t)L, sizeof *m->lora_units);
    m->lora_params = slm_xcalloc((size_t)L, sizeof *m->lora_params);
    m->lora_grads = slm_xcalloc((size_t)L, sizeof *m->lora_grads);
    for (int l = 0; l < L; l++) {
        slm_unit_layout *u = &m->lora_units[l];
        u->views = slm_xcalloc(2 * SLM_LORA_N_TARGETS, sizeof *u->views);
        for (int t = 0; t < SLM_LORA_N_TARGETS; t++) {
            if (!(lc->targets & (1u << t))) continue;
            int64_t o, i;
            slm_lora_target_shape(&m->cfg, t, &o, &i);
            const char *mod = t <= SLM_LORA_O ? "self_attn" : "mlp";
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_A.weight", l, mod,
                     k_targets[t]);
            add_lora_view(u, name, r, i);
            snprintf(name, sizeof name, "model.layers.%d.%s.%s.lora_B.weight", l, mod,
                     k_targets[t]);
            add_lora_view(u, name, o, r);
        }
    }
    m->lora_owns_buffers = alloc;
    if (alloc) {
        // Every adapter unit has the same numel: one host staging buffer for the init.
        size_t b = (size_t)m->lora_units[0].numel * sizeof(float);
        float *stage = slm_dev_host_alloc(m->dev, b);
        for (int l = 0; l < L; l++) {
            m->lora_params[l] = slm_dev_alloc_f32(m->dev, m->lora_units[l].numel);
            m->lora_grads[l] = slm_dev_alloc_f32(m->dev, m->lora_units[l].numel);
            slm_dev_zero(m->dev, m->lora_grads[l], b);
            slm_llama_lora_init_unit_weights(m, seed, l, stage);
            slm_dev_copy(m->dev, m->lora_params[l], stage, b, SLM_H2D);
        }
        slm_dev_host_free(m->dev, stage);
    }
    return SLM_OK;
}

void slm_llama_lora_init_unit_weights(const slm_llama *m, uint64_t seed, int l, float *flat) {
    const slm_unit_layout *u = &m->lora_units[l];
    int unit = m->cfg.num_hidden_layers + 1 + l; // after the base units' streams
    for (int vi = 0; vi < u->n_views; vi++) {
        const slm_param_view *v = &u->views[vi];
        float *p = flat + v->offset;
        if (vi % 2 == 1) { // lora_B: zeros, so the adapted model starts as the base
            for (int64_t i = 0; i < v->numel; i++)
                p[i] = 0.0f; // flat is a host buffer
            continue;
        }
        slm_rng r;
        slm_rng_seed(&r, slm_mix64(slm_mix64(slm_mix64(seed) ^ (uint64_t)unit) ^ (uint64_t)vi));
        float bound = 1.0f / sqrtf((float)v->shape[1]);
        for (int64_t i = 0; i < v->numel; i++)
            p[i] = bound * (2.0f * slm_rng_uniform(&r) - 1.0f);
    }
}

const slm_param_view *slm_llama_lora_find(const slm_llama *m, const char *name, int *l) {
    for (int k = 0; m->lora.rank > 0 && k < m->cfg.num_hidden_layers; k++)
        for (int i = 0; i < m->lora_units[k].n_views; i++)
            if (!strcmp(m->lora_units[k].views[i].name, name)) {
                if (l) *l = k;
                return &m->lora_units[k].views[i];
            }
    return NULL;
}

void slm_llama_lora_zero_grad(slm_llama *m) {
    for (int l = 0; m->lora.rank > 0 && l < m->cfg.num_hidden_layers; l++)
        if (m->lora_grads[l])
            slm_dev_zero(m->dev, m->lora_grads[l], (size_t)m->lora_units[l].numel * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// Activations

struct slm_lora_acts {
    slm_device *dev; // where the buffers below live (the model's device)
    int n_blk;       // blocks of saved adapter activations (L, or 1 under checkpointing)
    int64_t N;       // row capacity
    bool train;      // the last forward was a training forward (dropout applied)
    float **hs;      // [n_blk * SLM_LORA_N_TARGETS] -> [N, r]: s * (dropout(x) A^T)
    float *u;        // [N, max_in] dropout(x) scratch (dropout > 0)
    float *du;       // [N, max_in] d(dropout(x)) scratch (dropout > 0)
    float *dh;       // [N, r]
    int64_t in_max;
};

void slm_lora_acts_free(slm_lora_acts *a) {
    if (!a) return;
    for (int i = 0; i < a->n_blk * SLM_LORA_N_TARGETS; i++)
        slm_dev_free(a->dev, a->hs[i]);
    free(a->hs); // host array of device pointers
    slm_dev_free(a->dev, a->u);
    slm_dev_free(a->dev, a->du);
    slm_dev_free(a->dev, a->dh);
    free(a);
}

void slm_lora_acts_ensure(slm_llama *m, int n_blk, int64_t N, bool train) {
    if (m->lora.rank < 1) return;
    slm_lora_acts *a = m->lora_acts;
    if (!a || a->n_blk != n_blk || a->N < N) {
        slm_lora_acts_free(a);
        a = slm_xcalloc(1, sizeof *a);
        a->dev = m->dev;
        a->n_blk = n_blk;
        a->N = N;
        int64_t r = m->lora.rank;
        a->hs = slm_xcalloc((size_t)n_blk * SLM_LORA_N_TARGETS, sizeof *a->hs);
        for (int b = 0; b < n_blk; b++)
            for (int t = 0; t < SLM_LORA_N_TARGETS; t++)
                if (m->lora.targets & (1u << t))
                    a->hs[b * SLM_LORA_N_TARGETS + t] = slm_dev_alloc_f32(a->dev, N * r);
        a->dh = slm_dev_alloc_f32(a->dev, N * r);
        for (int t = 0; t < SLM_LORA_N_TARGETS; t++) {
            int64_t o, i;
            slm_lora_target_shape(&m->cfg, t, &o, &i);
            if (i > a->in_max) a->in_max = i;
        }
        if (m->lora.dropout > 0) {
            a->u = slm_dev_alloc_f32(a->dev, N * a->in_max);
            a->du = slm_dev_alloc_f32(a->dev, N * a->in_max);
        }
        m->lora_acts = a;
    }
    a->train = train;
}

size_t slm_lora_act_bytes(const slm_llama *m) {
    const slm_lora_acts *a = m->lora_acts;
    if (!a) return 0;
    int nt = 0;
    for (int t = 0; t < SLM_LORA_N_TARGETS; t++)
        nt += (m->lora.targets >> t) & 1u;
    size_t b = (size_t)(a->n_blk * nt + 1) * (size_t)(a->N * m->lora.rank) * sizeof(float);
    if (a->u) b += 2 * (size_t)(a->N * a->in_max) * sizeof(float);
    return b;
}

// One 64-bit hash per group of 4 elements, 16 bits each: (block, target) in the top 24 bits of
// the hashed word, the group index below. drop_key is the part without the group, the key
// slm_dev_dropout hashes with each group index.
static uint64_t drop_key(uint64_t key, int l, int t) {
    uint64_t bt = (uint64_t)(uint32_t)l * SLM_LORA_N_TARGETS + (uint64_t)t;
    return key ^ (bt << 40);
}

static uint64_t drop_word(uint64_t key, int l, int t, int64_t g) {
    return slm_mix64(drop_key(key, l, t) ^ (uint64_t)g);
}

// Elements whose 16-bit lane is below this are dropped: P(drop) = thr / 65536 ~ p.
static uint32_t drop_threshold(float p) {
    return (uint32_t)(p * 65536.0f + 0.5f);
}

bool slm_lora_dropout_keep(uint64_t key, int l, int t, int64_t i, float p) {
    uint64_t h = drop_word(key, l, t, i >> 2);
    return ((h >> (16 * (i & 3))) & 0xffffu) >= drop_threshold(p);
}

// y[i] = keep(i) ? x[i] * scale : 0 over n elements (y may be NULL: then x[i] * scale is added
// into acc[i] for kept elements instead), on the device (slm_dev_dropout: the same mask).
static void dropout_apply(const slm_llama *m, int l, int t, const float *x, float *y, float *acc,
                          int64_t n) {
    float p = m->lora.dropout;
    slm_dev_dropout(m->dev, drop_key(m->lora_dropout_key, l, t), drop_threshold(p),
                    1.0f / (1.0f - p), x, y, acc, n);
}

// dropout(x) into a->u (training forward with p > 0), else x itself.
static const float *adapter_input(const slm_llama *m, int l, int t, const float *x, int64_t N,
                                  int64_t in) {
    const slm_lora_acts *a = m->lora_acts;
    float p = m->lora.dropout;
    if (!(a->train && p > 0)) return x;
    dropout_apply(m, l, t, x, a->u, NULL, N * in);
    return a->u;
}

void slm_lora_fwd(const slm_llama *m, int l, int t, int blk, const float *x, float *y, int64_t N) {
    if (!(m->lora.targets & (1u << t))) return;
    const slm_lora_acts *a = m->lora_acts;
    const float *p = m->lora_params[l];
    if (!p) slm_fatal("model: adapters of block %d are NULL (not gathered?)", l);
    const slm_param_view *vw = m->lora_units[l].views;
    int vi = slm_llama_lora_view(m, t);
    int64_t o, in, r = m->lora.rank;
    slm_lora_target_shape(&m->cfg, t, &o, &in);
    float s = m->lora.alpha / (float)m->lora.rank;
    float *hs = a->hs[blk * SLM_LORA_N_TARGETS + t];
    const float *u = adapter_input(m, l, t, x, N, in);
    slm_dev_linear_fwd(m->dev, m->bf16_compute, hs, u, p + vw[vi].offset, N, in, r, false);
    slm_dev_scale(m->dev, hs, s, N * r);
    if (y) slm_dev_linear_fwd(m->dev, m->bf16_compute, y, hs, p + vw[vi + 1].offset, N, r, o, true);
}

void slm_lora_bwd(const slm_llama *m, int l, int t, int blk, const float *x, const float *dy,
                  float *dx, int64_t N) {
    if (!(m->lora.targets & (1u << t))) return;
    const slm_lora_acts *a = m->lora_acts;
    const float *p = m->lora_params[l];
    float *g = m->lora_grads[l];
    if (!p || !g) slm_fatal("model: adapters or their gradients of block %d are NULL", l);
    const slm_param_view *vw = m->lora_units[l].views;
    int vi = slm_llama_lora_view(m, t);
    int64_t o, in, r = m->lora.rank;
    slm_lora_target_shape(&m->cfg, t, &o, &in);
    float s = m->lora.alpha / (float)m->lora.rank;
    const float *hs = a->hs[blk * SLM_LORA_N_TARGETS + t];
    // y += hs B^T: dB += dy^T hs, d(hs) = dy B, d(h) = s d(hs)
    slm_device *d = m->dev;
    slm_dev_zero(d, a->dh, (size_t)(N * r) * sizeof(float));
    slm_dev_linear_bwd(d, m->bf16_compute, a->dh, g + vw[vi + 1].offset, dy, hs,
                       p + vw[vi + 1].offset, N, r, o);
    slm_dev_scale(d, a->dh, s, N * r);
    // h = u A^T: dA += dh^T u, du = dh A; u = dropout(x): dx += mask * du / (1 - p)
    bool drop = a->train && m->lora.dropout > 0;
    const float *u = adapter_input(m, l, t, x, N, in);
    if (!drop) {
        slm_dev_linear_bwd(d, m->bf16_compute, dx, g + vw[vi].offset, a->dh, u, p + vw[vi].offset,
                           N, in, r);
        return;
    }
    slm_dev_zero(d, a->du, (size_t)(N * in) * sizeof(float));
    slm_dev_linear_bwd(d, m->bf16_compute, a->du, g + vw[vi].offset, a->dh, u, p + vw[vi].offset, N,
                       in, r);
    dropout_apply(m, l, t, a->du, NULL, dx, N * in);
}

// ---------------------------------------------------------------------------------------------
// Merge and free

void slm_lora_free(slm_llama *m) {
    slm_units_free(m->dev, m->cfg.num_hidden_layers, m->lora_units, m->lora_params, m->lora_grads,
                   m->lora_owns_buffers);
    slm_lora_acts_free(m->lora_acts);
    m->lora_units = NULL;
    m->lora_params = m->lora_grads = NULL;
    m->lora_acts = NULL;
    m->lora_owns_buffers = false;
    memset(&m->lora, 0, sizeof m->lora); // the host config
}

// Merge buffers: host staging of one target's A, its transpose and s * B, and their device
// copies (every target's A [r, in] and B [out, r] fit in `cap` floats).
typedef struct merge_bufs {
    float *hA, *hAt, *hsB; // host
    float *At, *sB;        // device
} merge_bufs;

// W[o, in] += s * B[o, r] @ A[r, in] for target t of block l: A^T and s * B are formed on the
// host (export time, not a training step) and W's update runs on the device.
static void merge_target(slm_llama *m, int l, int t, const merge_bufs *mb, float s) {
    slm_device *d = m->dev;
    const float *p = m->lora_params[l];
    const slm_param_view *vw = m->lora_units[l].views;
    int vi = slm_llama_lora_view(m, t);
    int64_t o, in, r = m->lora.rank;
    slm_lora_target_shape(&m->cfg, t, &o, &in);
    slm_dev_copy(d, mb->hA, p + vw[vi].offset, (size_t)(r * in) * sizeof(float), SLM_D2H);
    slm_dev_copy(d, mb->hsB, p + vw[vi + 1].offset, (size_t)(o * r) * sizeof(float), SLM_D2H);
    for (int64_t k = 0; k < r; k++)
        for (int64_t i = 0; i < in; i++)
            mb->hAt[i * r + k] = mb->hA[k * in + i];
    for (int64_t i = 0; i < o * r; i++)
        mb->hsB[i] = s * mb->hsB[i];
    slm_dev_copy(d, mb->At, mb->hAt, (size_t)(in * r) * sizeof(float), SLM_H2D);
    slm_dev_copy(d, mb->sB, mb->hsB, (size_t)(o * r) * sizeof(float), SLM_H2D);
    // W[o, in] += sB[o, r] @ A[r, in] = sB @ At^T (fp32, as PEFT merges)
    float *W = m->params[l] + m->units[l].views[slm_proj_view(t)].offset;
    slm_dev_linear_fwd(d, false, W, mb->sB, mb->At, o, r, in, true);
}

void slm_llama_lora_merge(slm_llama *m) {
    if (m->lora.rank < 1) return;
    int L = m->cfg.num_hidden_layers;
    float s = m->lora.alpha / (float)m->lora.rank;
    int64_t cap = 0;
    for (int t = 0; t < SLM_LORA_N_TARGETS; t++) {
        int64_t o, in;
        slm_lora_target_shape(&m->cfg, t, &o, &in);
        cap = o > cap ? o : cap;
        cap = in > cap ? in : cap;
    }
    cap *= m->lora.rank;
    size_t bytes = (size_t)cap * sizeof(float);
    slm_device *d = m->dev;
    merge_bufs mb = {slm_dev_host_alloc(d, bytes), slm_dev_host_alloc(d, bytes),
                     slm_dev_host_alloc(d, bytes), slm_dev_alloc_f32(d, cap),
                     slm_dev_alloc_f32(d, cap)};
    for (int l = 0; l < L; l++) {
        if (!m->params[l] || !m->lora_params[l])
            slm_fatal("model: merging LoRA needs the base weights and adapters in memory");
        for (int t = 0; t < SLM_LORA_N_TARGETS; t++)
            if (slm_llama_lora_view(m, t) >= 0) merge_target(m, l, t, &mb, s);
    }
    slm_dev_host_free(d, mb.hA);
    slm_dev_host_free(d, mb.hAt);
    slm_dev_host_free(d, mb.hsB);
    slm_dev_free(d, mb.At);
    slm_dev_free(d, mb.sB);
    slm_lora_free(m);
}
