// A GGUF file of the `llama` architecture as a shardlm model: metadata -> slm_llama_config,
// tensors -> the HF-named parameter views. llama.cpp's converter (convert_hf_to_gguf.py,
// LlamaModel) writes every weight in HF's row-major order with the dimensions listed reversed
// (ne[0] = HF's last dimension), and permutes the rows of q_proj / k_proj so that the two halves
// of each head's rotate-half pair sit next to each other (its interleaved RoPE): within head h
// (D rows), HF row h*D + j*D/2 + i (j in {0, 1}, i < D/2) is stored at row h*D + 2*i + j.
// The loader undoes that permutation. Checked against transformers' own GGUF loader
// (tests/ckpt/gguf_smollm2.py).
#include "ckpt/ckpt.h"
#include "ckpt/gguf_format.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Reads an integer key into an int32 field; absent: *found false (field unchanged).
static slm_status get_i32(const slm_gguf_file *f, const char *key, int32_t lo, int32_t *out,
                          bool *found) {
    int64_t v = 0;
    bool fnd = false;
    slm_status st = slm_gguf_get_int(f, key, lo, INT32_MAX, &v, found ? &fnd : NULL);
    if (st) return st;
    if (found) *found = fnd;
    if (!found || fnd) *out = (int32_t)v;
    return SLM_OK;
}

// A key whose value changes the math in a way shardlm does not implement unless it has its
// neutral value: refused naming the key and both values.
static slm_status refuse_unless(const slm_gguf_file *f, const char *key, double neutral,
                                const char *what) {
    double v = 0;
    bool found = false;
    slm_status st = slm_gguf_get_float(f, key, &v, &found);
    if (st) {
        // a bool key (attention.causal, use_parallel_residual)
        bool b = false;
        if (slm_gguf_get_bool(f, key, &b, &found)) return st;
        v = b;
    }
    if (!found || v == neutral) return SLM_OK;
    return slm_fail(SLM_E_UNSUPPORTED, "%s: key %s is %g: %s is not supported (only %g)", f->path,
                    key, v, what, neutral);
}

// The llama.* keys shardlm reads or knows to be harmless; any other llama.* key is warned
// about (it may change the math in a way this reader does not know of).
static bool known_llama_key(const char *k) {
    static const char *const known[] = {SLM_GGUF_KEY_VOCAB_SIZE,
                                        SLM_GGUF_KEY_CONTEXT_LENGTH,
                                        SLM_GGUF_KEY_EMBEDDING_LENGTH,
                                        SLM_GGUF_KEY_BLOCK_COUNT,
                                        SLM_GGUF_KEY_FEED_FORWARD_LENGTH,
                                        SLM_GGUF_KEY_HEAD_COUNT,
                                        SLM_GGUF_KEY_HEAD_COUNT_KV,
                                        SLM_GGUF_KEY_RMS_EPS,
                                        SLM_GGUF_KEY_KEY_LENGTH,
                                        SLM_GGUF_KEY_VALUE_LENGTH,
                                        SLM_GGUF_KEY_ROPE_DIM,
                                        SLM_GGUF_KEY_ROPE_BASE,
                                        SLM_GGUF_KEY_ROPE_SCALING_TYPE,
                                        SLM_GGUF_KEY_ROPE_SCALING_FACTOR,
                                        SLM_GGUF_KEY_ROPE_SCALING_ORIG_CTX,
                                        SLM_GGUF_KEY_ROPE_SCALE_LINEAR,
                                        "llama.rope.scaling.finetuned",
                                        "llama.rope.scaling.attn_factor",
                                        "llama.expert_count",
                                        "llama.expert_used_count",
                                        "llama.attention.causal",
                                        "llama.attention.clamp_kqv",
                                        "llama.attention.max_alibi_bias",
                                        "llama.attention.layer_norm_epsilon",
                                        "llama.attention.sliding_window",
                                        "llama.attention.scale",
                                        "llama.use_parallel_residual",
                                        "llama.tensor_data_layout",
                                        "llama.logit_scale",
                                        "llama.embedding_scale",
                                        "llama.residual_scale",
                                        NULL};
    for (int i = 0; known[i]; i++)
        if (!strcmp(k, known[i])) return true;
    return false;
}

// Head dim: key_length (= value_length), else C / H; RoPE over all of it.
static slm_status head_dim_of(const slm_gguf_file *f, slm_llama_config *c) {
    slm_status st;
    int32_t kl = 0, vl = 0, rd = 0;
    bool has_kl = false, has_vl = false, has_rd = false;
    if ((st = get_i32(f, SLM_GGUF_KEY_KEY_LENGTH, 1, &kl, &has_kl)) ||
        (st = get_i32(f, SLM_GGUF_KEY_VALUE_LENGTH, 1, &vl, &has_vl)) ||
        (st = get_i32(f, SLM_GGUF_KEY_ROPE_DIM, 1, &rd, &has_rd)))
        return st;
    if (has_kl && has_vl && kl != vl)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: keys %s = %d and %s = %d differ (shardlm's attention has one head "
                        "dim)",
                        f->path, SLM_GGUF_KEY_KEY_LENGTH, kl, SLM_GGUF_KEY_VALUE_LENGTH, vl);
    int32_t D = has_kl ? kl : has_vl ? vl : c->hidden_size / c->num_attention_heads;
    if (D * c->num_attention_heads != c->hidden_size || c->hidden_size % c->num_attention_heads)
        c->head_dim = D;
    if (has_rd && rd != D)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: key %s is %d but the head dim is %d: partial rotary embeddings are "
                        "not supported",
                        f->path, SLM_GGUF_KEY_ROPE_DIM, rd, D);
    return SLM_OK;
}

// RoPE scaling: none or linear (rope.scaling.type / the older rope.scale_linear); Llama 3.1's
// per-frequency factors (tensor rope_freqs.weight) are refused.
static slm_status rope_scaling_of(const slm_gguf_file *f, slm_llama_config *c) {
    slm_status st;
    bool found;
    const char *ty = NULL;
    size_t tlen = 0;
    if ((st = slm_gguf_get_str(f, SLM_GGUF_KEY_ROPE_SCALING_TYPE, &ty, &tlen, &found))) return st;
    double factor = 0;
    bool has_factor = false;
    if ((st = slm_gguf_get_float(f, SLM_GGUF_KEY_ROPE_SCALING_FACTOR, &factor, &has_factor)))
        return st;
    double lin = 0;
    bool has_lin = false;
    if ((st = slm_gguf_get_float(f, SLM_GGUF_KEY_ROPE_SCALE_LINEAR, &lin, &has_lin))) return st;
    if (found && !(tlen == 4 && !memcmp(ty, "none", 4)) && !(tlen == 6 && !memcmp(ty, "linear", 6)))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: key %s is \"%.*s\" (shardlm implements none and linear RoPE scaling "
                        "from GGUF)",
                        f->path, SLM_GGUF_KEY_ROPE_SCALING_TYPE, (int)(tlen > 40 ? 40 : tlen), ty);
    bool linear = (found && tlen == 6) || (!found && has_lin && lin != 1.0);
    if (linear) {
        double fac = found ? factor : lin;
        if ((found && !has_factor) || !(fac > 0) || !isfinite(fac))
            return slm_fail(
                SLM_E_FORMAT, "%s: linear RoPE scaling needs a positive key %s", f->path,
                found ? SLM_GGUF_KEY_ROPE_SCALING_FACTOR : SLM_GGUF_KEY_ROPE_SCALE_LINEAR);
        if (fac != 1.0) {
            c->rope_type = SLM_ROPE_LINEAR;
            c->rope_factor = (float)fac;
        }
    }
    if (slm_gguf_tensor_find(f, SLM_GGUF_T_ROPE_FREQS))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: tensor %s (per-frequency RoPE factors, Llama 3.1's scaling as "
                        "llama.cpp stores it) is not supported",
                        f->path, SLM_GGUF_T_ROPE_FREQS);
    return SLM_OK;
}

// Keys that would change the math are refused unless neutral; unknown llama.* keys warned of.
static slm_status refuse_math_keys(const slm_gguf_file *f) {
    slm_status st;
    if ((st = refuse_unless(f, "llama.expert_count", 0, "a mixture of experts")) ||
        (st = refuse_unless(f, "llama.attention.clamp_kqv", 0, "clamping Q, K, V")) ||
        (st = refuse_unless(f, "llama.attention.max_alibi_bias", 0, "ALiBi")) ||
        (st = refuse_unless(f, "llama.attention.sliding_window", 0, "sliding-window attention")) ||
        (st = refuse_unless(f, "llama.attention.causal", 1, "non-causal attention")) ||
        (st = refuse_unless(f, "llama.use_parallel_residual", 0, "a parallel residual")) ||
        (st = refuse_unless(f, "llama.rope.scaling.attn_factor", 1, "a RoPE attention factor")) ||
        (st = refuse_unless(f, "llama.logit_scale", 1, "scaled logits")) ||
        (st = refuse_unless(f, "llama.embedding_scale", 1, "a scaled embedding")) ||
        (st = refuse_unless(f, "llama.residual_scale", 1, "a scaled residual")))
        return st;
    const char *refused[] = {"llama.attention.layer_norm_epsilon", "llama.attention.scale",
                             "llama.tensor_data_layout", NULL};
    for (int i = 0; refused[i]; i++)
        if (slm_gguf_find(f, refused[i]))
            return slm_fail(SLM_E_UNSUPPORTED, "%s: key %s is present: %s is not supported",
                            f->path, refused[i],
                            i == 0   ? "LayerNorm (rather than RMSNorm)"
                            : i == 1 ? "an attention scale other than 1/sqrt(head dim)"
                                     : "a tensor layout other than llama.cpp's converter's");
    for (int64_t i = 0; i < f->n_kv; i++)
        if (!strncmp(f->kv[i].key, "llama.", 6) && !known_llama_key(f->kv[i].key))
            slm_warn("%s: key %s is not known to shardlm's GGUF import and is ignored", f->path,
                     f->kv[i].key);
    return SLM_OK;
}

// Vocabulary: the embedding's rows (llama.vocab_size, when present, must agree).
static slm_status vocab_of(const slm_gguf_file *f, slm_llama_config *c) {
    slm_status st;
    bool found;
    const slm_gguf_tensor *emb = slm_gguf_tensor_find(f, SLM_GGUF_T_TOKEN_EMBD);
    if (!emb)
        return slm_fail(SLM_E_FORMAT, "%s: tensor %s missing", f->path, SLM_GGUF_T_TOKEN_EMBD);
    if (emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > INT32_MAX)
        return slm_fail(SLM_E_FORMAT, "%s: tensor %s: expected 2 dims [hidden, vocab]", f->path,
                        SLM_GGUF_T_TOKEN_EMBD);
    c->vocab_size = (int32_t)emb->ne[1];
    int32_t vs = 0;
    if ((st = get_i32(f, SLM_GGUF_KEY_VOCAB_SIZE, 1, &vs, &found))) return st;
    if (found && vs != c->vocab_size)
        return slm_fail(SLM_E_FORMAT, "%s: key %s is %d but tensor %s has %" PRId64 " rows",
                        f->path, SLM_GGUF_KEY_VOCAB_SIZE, vs, SLM_GGUF_T_TOKEN_EMBD, emb->ne[1]);
    return SLM_OK;
}

slm_status slm_gguf_llama_config(const slm_gguf_file *f, slm_llama_config *c) {
    memset(c, 0, sizeof *c);
    const char *arch;
    size_t alen;
    slm_status st = slm_gguf_get_str(f, SLM_GGUF_KEY_ARCH, &arch, &alen, NULL);
    if (st) return st;
    if (alen != 5 || memcmp(arch, "llama", 5))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: key %s is \"%.*s\" (shardlm imports the \"llama\" architecture)",
                        f->path, SLM_GGUF_KEY_ARCH, (int)(alen > 40 ? 40 : alen), arch);
    bool found;
    if ((st = get_i32(f, SLM_GGUF_KEY_BLOCK_COUNT, 1, &c->num_hidden_layers, NULL)) ||
        (st = get_i32(f, SLM_GGUF_KEY_EMBEDDING_LENGTH, 1, &c->hidden_size, NULL)) ||
        (st = get_i32(f, SLM_GGUF_KEY_FEED_FORWARD_LENGTH, 1, &c->intermediate_size, NULL)) ||
        (st = get_i32(f, SLM_GGUF_KEY_HEAD_COUNT, 1, &c->num_attention_heads, NULL)) ||
        (st = get_i32(f, SLM_GGUF_KEY_CONTEXT_LENGTH, 1, &c->max_position_embeddings, NULL)))
        return st;
    c->num_key_value_heads = c->num_attention_heads; // llama.cpp's default
    if ((st = get_i32(f, SLM_GGUF_KEY_HEAD_COUNT_KV, 1, &c->num_key_value_heads, &found)))
        return st;
    double v = 0;
    if ((st = slm_gguf_get_float(f, SLM_GGUF_KEY_RMS_EPS, &v, NULL))) return st;
    c->rms_norm_eps = (float)v;
    c->rope_theta = 10000.0f; // llama.cpp's default
    if ((st = slm_gguf_get_float(f, SLM_GGUF_KEY_ROPE_BASE, &v, &found))) return st;
    if (found) c->rope_theta = (float)v;
    c->initializer_range = 0.02f;
    if ((st = head_dim_of(f, c)) || (st = rope_scaling_of(f, c)) || (st = refuse_math_keys(f)) ||
        (st = vocab_of(f, c)))
        return st;
    c->tie_word_embeddings = slm_gguf_tensor_find(f, SLM_GGUF_T_OUTPUT) == NULL;
    st = slm_llama_config_validate(c);
    return st ? slm_fail_wrap(st, "%s: the llama metadata", f->path) : SLM_OK;
}

bool slm_gguf_name_of(const char *hf, const slm_llama_config *c, char *out, size_t cap,
                      int *rope_heads) {
    static const char *const map[][2] = {
        {"input_layernorm.weight", SLM_GGUF_T_ATTN_NORM},
        {"self_attn.q_proj.weight", SLM_GGUF_T_ATTN_Q},
        {"self_attn.k_proj.weight", SLM_GGUF_T_ATTN_K},
        {"self_attn.v_proj.weight", SLM_GGUF_T_ATTN_V},
        {"self_attn.o_proj.weight", SLM_GGUF_T_ATTN_OUT},
        {"post_attention_layernorm.weight", SLM_GGUF_T_FFN_NORM},
        {"mlp.gate_proj.weight", SLM_GGUF_T_FFN_GATE},
        {"mlp.up_proj.weight", SLM_GGUF_T_FFN_UP},
        {"mlp.down_proj.weight", SLM_GGUF_T_FFN_DOWN},
    };
    *rope_heads = 0;
    if (!strcmp(hf, "model.embed_tokens.weight"))
        snprintf(out, cap, "%s", SLM_GGUF_T_TOKEN_EMBD);
    else if (!strcmp(hf, "model.norm.weight"))
        snprintf(out, cap, "%s", SLM_GGUF_T_OUTPUT_NORM);
    else if (!strcmp(hf, "lm_head.weight"))
        snprintf(out, cap, "%s", SLM_GGUF_T_OUTPUT);
    else {
        int l = -1, n = 0;
        if (sscanf(hf, "model.layers.%d.%n", &l, &n) != 1 || l < 0 || n <= 0) return false;
        for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
            if (!strcmp(hf + n, map[k][0])) {
                snprintf(out, cap, "blk.%d.%s.weight", l, map[k][1]);
                if (k == 1) *rope_heads = c->num_attention_heads;
                if (k == 2) *rope_heads = c->num_key_value_heads;
                return true;
            }
        return false;
    }
    return true;
}

// Host staging of walk(): a tensor as read (tmp, for RoPE rows) and as it goes to the device.
typedef struct gguf_stage {
    float *tmp, *out;
    int64_t tmp_cap, out_cap;
} gguf_stage;

// GGUF tensor t into view v of unit u of m: read on the host (llama.cpp's RoPE row permutation
// undone head by head when `heads` > 0), checked finite, then copied to the model's device.
static slm_status load_view(const slm_gguf_file *f, const slm_gguf_tensor *t, slm_llama *m, int u,
                            const slm_param_view *v, int heads, gguf_stage *s) {
    size_t nb = (size_t)v->numel * sizeof(float);
    if (s->out_cap < v->numel) {
        slm_dev_host_free(m->dev, s->out);
        s->out = slm_dev_host_alloc(m->dev, nb);
        s->out_cap = v->numel;
    }
    float *dst = s->out;
    if (!heads) {
        slm_gguf_read_f32(f, t, dst);
    } else {
        if (s->tmp_cap < v->numel) {
            free(s->tmp);
            s->tmp = slm_xmalloc(nb);
            s->tmp_cap = v->numel;
        }
        slm_gguf_read_f32(f, t, s->tmp);
        int64_t rows = v->shape[0], cols = v->shape[1], D = rows / heads, half = D / 2;
        for (int64_t h = 0; h < heads; h++)
            for (int64_t j = 0; j < 2; j++)
                for (int64_t k = 0; k < half; k++)
                    memcpy(dst + (h * D + j * half + k) * cols, s->tmp + (h * D + 2 * k + j) * cols,
                           (size_t)cols * sizeof *dst);
    }
    slm_status st = slm_check_finite(&m->units[u], u, v->offset, dst, v->numel, "weights", f->path);
    if (!st) slm_dev_copy(m->dev, m->params[u] + v->offset, dst, nb, SLM_H2D);
    return st;
}

// Walks the model's views: each GGUF tensor found, with the shape the view expects (GGUF order),
// and no GGUF tensor left over. With `m` non-NULL (params allocated) the data is read too.
static slm_status walk(const slm_gguf_file *f, const slm_llama *lay, slm_llama *m) {
    bool *used = slm_xcalloc((size_t)f->n_tensors + 1, 1);
    gguf_stage stage = {0};
    slm_status st = SLM_OK;
    double total = 0, done = 0;
    for (int u = 0; u < lay->n_units; u++)
        total += 4.0 * (double)lay->units[u].numel;
    slm_progress pg;
    if (m) slm_progress_begin(&pg, "GGUF load", 0, total);
    for (int u = 0; u < lay->n_units && !st; u++) {
        for (int i = 0; i < lay->units[u].n_views && !st; i++) {
            const slm_param_view *v = &lay->units[u].views[i];
            char name[128];
            int heads = 0;
            if (!slm_gguf_name_of(v->name, &lay->cfg, name, sizeof name, &heads))
                slm_fatal("gguf: no GGUF name for parameter %s", v->name);
            const slm_gguf_tensor *t = slm_gguf_tensor_find(f, name);
            if (!t) {
                st = slm_fail(SLM_E_FORMAT, "%s: tensor %s missing (the metadata asks for %s)",
                              f->path, name, v->name);
                break;
            }
            used[t - f->t] = true;
            int64_t rows = v->ndim == 2 ? v->shape[0] : 1,
                    cols = v->ndim == 2 ? v->shape[1] : v->shape[0];
            bool ok =
                t->n_dims == v->ndim && t->ne[0] == cols && (v->ndim == 1 || t->ne[1] == rows);
            if (!ok) {
                char have[96], want[48];
                int k = snprintf(have, sizeof have, "[%" PRId64, t->ne[0]);
                for (int d = 1; d < t->n_dims && d < 4 && k < (int)sizeof have - 24; d++)
                    k += snprintf(have + k, sizeof have - (size_t)k, ", %" PRId64, t->ne[d]);
                snprintf(have + k, sizeof have - (size_t)k, "]");
                if (v->ndim == 2)
                    snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "]", cols, rows);
                else
                    snprintf(want, sizeof want, "[%" PRId64 "]", cols);
                st = slm_fail(SLM_E_FORMAT,
                              "%s: tensor %s has ne %s (%d dims), expected %s (GGUF order) "
                              "for %s",
                              f->path, name, have, t->n_dims, want, v->name);
                break;
            }
            if (!m) continue;
            st = load_view(f, t, m, u, v, heads, &stage);
            done += 4.0 * (double)v->numel;
            slm_progress_update(&pg, done, "%s", name);
        }
    }
    for (int64_t i = 0; i < f->n_tensors && !st; i++)
        if (!used[i])
            st = slm_fail(
                SLM_E_UNSUPPORTED, "%s: tensor %s is not a parameter of shardlm's Llama (%s)",
                f->path, f->t[i].name,
                strstr(f->t[i].name, ".bias") ? "biases are not supported" : "unexpected name");
    if (m) {
        if (st)
            slm_progress_abandon(&pg);
        else
            slm_progress_end(&pg, done, "%.0f MB of fp32", done / 1e6);
    }
    free(stage.tmp);
    if (m) slm_dev_host_free(m->dev, stage.out);
    free(used);
    return st;
}

slm_status slm_gguf_check_shapes(const slm_gguf_file *f, const slm_llama_config *cfg) {
    slm_llama lay;
    slm_status st = slm_llama_init(&lay, cfg, false);
    if (st) return st;
    st = walk(f, &lay, NULL);
    slm_llama_free(&lay);
    return st;
}

static bool same_model(const slm_llama_config *a, const slm_llama_config *b) {
    return a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
           a->intermediate_size == b->intermediate_size &&
           a->num_hidden_layers == b->num_hidden_layers &&
           a->num_attention_heads == b->num_attention_heads &&
           a->num_key_value_heads == b->num_key_value_heads &&
           a->tie_word_embeddings == b->tie_word_embeddings &&
           slm_llama_head_dim(a) == slm_llama_head_dim(b) &&
           fabsf(a->rms_norm_eps - b->rms_norm_eps) <= 1e-6f * fabsf(b->rms_norm_eps) &&
           slm_llama_rope_same(a, b);
}

slm_status slm_gguf_load(slm_llama *m, const slm_gguf_file *f) {
    slm_llama_config c;
    slm_status st = slm_gguf_llama_config(f, &c);
    if (st) return st;
    if (!same_model(&c, &m->cfg))
        return slm_fail(
            SLM_E_ARG,
            "%s: the GGUF metadata (V=%d C=%d F=%d L=%d H=%d KV=%d tie=%d) describes "
            "another model than this one (V=%d C=%d F=%d L=%d H=%d KV=%d tie=%d), or "
            "other RMS eps / RoPE settings",
            f->path, c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
            c.num_attention_heads, c.num_key_value_heads, c.tie_word_embeddings, m->cfg.vocab_size,
            m->cfg.hidden_size, m->cfg.intermediate_size, m->cfg.num_hidden_layers,
            m->cfg.num_attention_heads, m->cfg.num_key_value_heads, m->cfg.tie_word_embeddings);
    return walk(f, m, m);
}
