// KV-cache decoding (batch 1): one token per call, attention over the cached keys / values.
// Single-query attention is composed from the matmul kernels, one GQA group at a time:
// the `rep` = H/KV query heads of group g are contiguous in q, and the cache keeps each kv
// head's positions contiguous ([KV, max_T, D] per layer), so
//   scores [rep, pos+1] = q_g [rep, D] @ K_g[0..pos]^T      (slm_matmul_fwd)
//   out_g  [rep, D]     = softmax(scores / sqrt(D)) @ V_g   (slm_matmul_bwd's dinp = dout @ W)
#include "model_internal.h"

#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct slm_kv_cache {
    int max_T;
    int64_t layer_stride; // KV * max_T * D floats per layer
    float *k, *v;         // [L, KV, max_T, D], after RoPE (k)
    float *rope_cos;      // [max_T, D/2]
    float *rope_sin;
    // one-token scratch
    float *x;             // [C] residual stream
    float *ln;            // [C]
    float *q;             // [H*D]
    float *kt, *vt;       // [KV*D] this token's key / value
    float *att;           // [H*D]
    float *scores;        // [H/KV, max_T]
    float *gate, *up, *h; // [F]
    float rstd[1];
};

double slm_kv_cache_bytes_estimate(const slm_llama_config *c, int64_t max_T) {
    double C = c->hidden_size, H = c->num_attention_heads, KV = c->num_key_value_heads;
    double D = slm_llama_head_dim(c), F = c->intermediate_size, T = (double)max_T;
    double floats = 2.0 * c->num_hidden_layers * KV * T * D           // K and V caches
                    + 2.0 * T * (D / 2)                               // RoPE tables
                    + (H / KV) * T                                    // attention scores
                    + 2.0 * C + 2.0 * H * D + 2.0 * KV * D + 3.0 * F; // one token's vectors
    return floats * sizeof(float);
}

slm_kv_cache *slm_kv_cache_new(const slm_llama *m, int max_T) {
    SLM_ASSERT(max_T > 0);
    const slm_llama_config *c = &m->cfg;
    int64_t C = c->hidden_size, D = slm_llama_head_dim(c), KV = c->num_key_value_heads;
    int64_t F = c->intermediate_size, rep = c->num_attention_heads / KV;
    int64_t HD = (int64_t)c->num_attention_heads * D;
    slm_kv_cache *kc = slm_xcalloc(1, sizeof *kc);
    kc->max_T = max_T;
    kc->layer_stride = KV * max_T * D;
    size_t cache_bytes = (size_t)(c->num_hidden_layers * kc->layer_stride) * sizeof(float);
    kc->k = slm_xaligned(cache_bytes);
    kc->v = slm_xaligned(cache_bytes);
    memset(kc->k, 0, cache_bytes);
    memset(kc->v, 0, cache_bytes);
    kc->rope_cos = slm_xaligned((size_t)(max_T * (D / 2)) * sizeof(float));
    kc->rope_sin = slm_xaligned((size_t)(max_T * (D / 2)) * sizeof(float));
    {
        double *inv_freq = slm_xcalloc((size_t)(D / 2), sizeof *inv_freq);
        slm_llama_rope_inv_freq(c, (int)D, inv_freq); // scaled RoPE (rope_scaling) included
        slm_rope_tables_freq(kc->rope_cos, kc->rope_sin, max_T, (int)(D / 2), inv_freq);
        free(inv_freq);
    }
    kc->x = slm_xaligned((size_t)C * sizeof(float));
    kc->ln = slm_xaligned((size_t)C * sizeof(float));
    kc->q = slm_xaligned((size_t)HD * sizeof(float));
    kc->kt = slm_xaligned((size_t)(KV * D) * sizeof(float));
    kc->vt = slm_xaligned((size_t)(KV * D) * sizeof(float));
    kc->att = slm_xaligned((size_t)HD * sizeof(float));
    kc->scores = slm_xaligned((size_t)(rep * max_T) * sizeof(float));
    kc->gate = slm_xaligned((size_t)F * sizeof(float));
    kc->up = slm_xaligned((size_t)F * sizeof(float));
    kc->h = slm_xaligned((size_t)F * sizeof(float));
    return kc;
}

void slm_kv_cache_free(slm_kv_cache *kc) {
    if (!kc) return;
    float *ptrs[] = {kc->k,  kc->v,  kc->rope_cos, kc->rope_sin, kc->x,    kc->ln, kc->q,
                     kc->kt, kc->vt, kc->att,      kc->scores,   kc->gate, kc->up, kc->h};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        free(ptrs[i]);
    free(kc);
}

// Row-wise softmax of s [rows, n] after scaling by `scale` (max-subtracted, in double sums).
static void softmax_rows(float *s, int64_t rows, int64_t n, float scale) {
    for (int64_t r = 0; r < rows; r++) {
        float *row = s + r * n;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            row[j] *= scale;
            if (row[j] > mx) mx = row[j];
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; j++) {
            row[j] = expf(row[j] - mx);
            sum += row[j];
        }
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < n; j++)
            row[j] *= inv;
    }
}

void slm_llama_decode_step(slm_llama *m, slm_kv_cache *kc, int32_t token, int pos, float *logits) {
    const slm_llama_config *c = &m->cfg;
    int L = c->num_hidden_layers, C = c->hidden_size, H = c->num_attention_heads;
    int KV = c->num_key_value_heads, D = slm_llama_head_dim(c), rep = H / KV;
    int64_t F = c->intermediate_size, V = c->vocab_size, KVD = (int64_t)KV * D, HD = (int64_t)H * D;
    if (m->lora.rank > 0)
        slm_fatal("model: KV-cache decoding of a model with unmerged LoRA adapters (merge them "
                  "first: slm_llama_lora_merge)");
    if (pos < 0 || pos >= kc->max_T)
        slm_fatal("model: decode position %d outside the KV cache [0, %d)", pos, kc->max_T);
    if (token < 0 || token >= c->vocab_size)
        slm_fatal("model: decode token %d outside [0, %d)", token, c->vocab_size);
    float eps = c->rms_norm_eps, scale = 1.0f / sqrtf((float)D);
    const slm_param_view *rv = m->units[L].views;

    if (m->hooks.pre_forward) m->hooks.pre_forward(m->hooks.ctx, L);
    SLM_ASSERT(m->params[L]);
    slm_embedding_fwd(kc->x, &token, m->params[L] + rv[RV_EMB].offset, 1, C);
    for (int l = 0; l < L; l++) {
        if (m->hooks.pre_forward) m->hooks.pre_forward(m->hooks.ctx, l);
        const float *p = m->params[l];
        SLM_ASSERT(p);
        const slm_param_view *vw = m->units[l].views;
        // view order: ln1, q, k, v, o, ln2, gate, up, down (see llama.c)
        slm_rmsnorm_fwd(kc->ln, kc->rstd, kc->x, p + vw[BV_LN1].offset, 1, C, eps);
        slm_linear_fwd(m->bf16_compute, kc->q, kc->ln, p + vw[BV_Q].offset, 1, C, HD, false);
        slm_linear_fwd(m->bf16_compute, kc->kt, kc->ln, p + vw[BV_K].offset, 1, C, KVD, false);
        slm_linear_fwd(m->bf16_compute, kc->vt, kc->ln, p + vw[BV_V].offset, 1, C, KVD, false);
        slm_rope_apply(kc->q, kc->rope_cos, kc->rope_sin, 1, 1, H, D, pos, false);
        slm_rope_apply(kc->kt, kc->rope_cos, kc->rope_sin, 1, 1, KV, D, pos, false);
        if (m->bf16_compute) { // attention's inputs, as llama.c's attention_fwd rounds them
            slm_round_bf16(kc->q, (int64_t)H * D);
            slm_round_bf16(kc->kt, (int64_t)KV * D);
            slm_round_bf16(kc->vt, (int64_t)KV * D);
        }
        float *kl = kc->k + l * kc->layer_stride, *vl = kc->v + l * kc->layer_stride;
        for (int g = 0; g < KV; g++) {
            int64_t at = ((int64_t)g * kc->max_T + pos) * D;
            memcpy(kl + at, kc->kt + (int64_t)g * D, (size_t)D * sizeof(float));
            memcpy(vl + at, kc->vt + (int64_t)g * D, (size_t)D * sizeof(float));
        }
        int64_t n = pos + 1;
        for (int g = 0; g < KV; g++) {
            const float *Kg = kl + (int64_t)g * kc->max_T * D; // [n, D]
            const float *Vg = vl + (int64_t)g * kc->max_T * D; // [n, D]
            float *qg = kc->q + (int64_t)g * rep * D;          // [rep, D]
            float *og = kc->att + (int64_t)g * rep * D;        // [rep, D]
            slm_matmul_fwd(kc->scores, qg, Kg, rep, D, n, false);
            softmax_rows(kc->scores, rep, n, scale);
            memset(og, 0, (size_t)(rep * D) * sizeof(float));
            slm_matmul_bwd(og, NULL, kc->scores, NULL, Vg, rep, D, n);
        }
        slm_linear_fwd(m->bf16_compute, kc->x, kc->att, p + vw[BV_O].offset, 1, HD, C, true);
        slm_rmsnorm_fwd(kc->ln, kc->rstd, kc->x, p + vw[BV_LN2].offset, 1, C, eps);
        slm_linear_fwd(m->bf16_compute, kc->gate, kc->ln, p + vw[BV_GATE].offset, 1, C, F, false);
        slm_linear_fwd(m->bf16_compute, kc->up, kc->ln, p + vw[BV_UP].offset, 1, C, F, false);
        slm_swiglu_fwd(kc->h, kc->gate, kc->up, 1, F);
        slm_linear_fwd(m->bf16_compute, kc->x, kc->h, p + vw[BV_DOWN].offset, 1, F, C, true);
        if (m->hooks.post_forward) m->hooks.post_forward(m->hooks.ctx, l);
    }
    const float *root = m->params[L];
    slm_rmsnorm_fwd(kc->ln, kc->rstd, kc->x, root + rv[RV_NORM].offset, 1, C, eps);
    const float *Wlm = root + (c->tie_word_embeddings ? rv[RV_EMB].offset : rv[RV_LM].offset);
    slm_linear_fwd(m->bf16_compute, logits, kc->ln, Wlm, 1, C, V, false);
    if (m->hooks.post_forward) m->hooks.post_forward(m->hooks.ctx, L);
}
