// KV-cache decoding (batch 1): one token per call, attention over the cached keys / values.
// Single-query attention is composed from the matmul kernels, one GQA group at a time:
// the `rep` = H/KV query heads of group g are contiguous in q, and the cache keeps each kv
// head's positions contiguous ([KV, max_T, D] per layer), so
//   scores [rep, pos+1] = q_g [rep, D] @ K_g[0..pos]^T      (fp32 linear forward)
//   out_g  [rep, D]     = softmax(scores / sqrt(D)) @ V_g   (fp32 linear backward's dinp = dout W)
// The cache and every scratch vector are device memory (the model's device); the token goes
// host to device and the logits device to host.
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>

struct slm_kv_cache {
    slm_device *dev; // the model's device, where every buffer below lives
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
    float *rstd;          // [1]
    float *logits;        // [V]
    int32_t *token;       // [1]
};

double slm_kv_cache_bytes_estimate(const slm_llama_config *c, int64_t max_T) {
    double C = c->hidden_size, H = c->num_attention_heads, KV = c->num_key_value_heads;
    double D = slm_llama_head_dim(c), F = c->intermediate_size, T = (double)max_T;
    double floats = 2.0 * c->num_hidden_layers * KV * T * D          // K and V caches
                    + 2.0 * T * (D / 2)                              // RoPE tables
                    + (H / KV) * T                                   // attention scores
                    + 2.0 * C + 2.0 * H * D + 2.0 * KV * D + 3.0 * F // one token's vectors
                    + 1.0 + c->vocab_size;                           // rstd, logits
    return floats * sizeof(float) + sizeof(int32_t);
}

slm_kv_cache *slm_kv_cache_new(const slm_llama *m, int max_T) {
    SLM_ASSERT(max_T > 0);
    const slm_llama_config *c = &m->cfg;
    int64_t C = c->hidden_size, D = slm_llama_head_dim(c), KV = c->num_key_value_heads;
    int64_t F = c->intermediate_size, rep = c->num_attention_heads / KV;
    int64_t HD = (int64_t)c->num_attention_heads * D;
    slm_kv_cache *kc = slm_xcalloc(1, sizeof *kc);
    slm_device *d = kc->dev = m->dev;
    kc->max_T = max_T;
    kc->layer_stride = KV * max_T * D;
    int64_t cache_floats = c->num_hidden_layers * kc->layer_stride;
    kc->k = slm_dev_alloc_f32(d, cache_floats);
    kc->v = slm_dev_alloc_f32(d, cache_floats);
    slm_dev_zero(d, kc->k, (size_t)cache_floats * sizeof(float));
    slm_dev_zero(d, kc->v, (size_t)cache_floats * sizeof(float));
    kc->rope_cos = slm_dev_alloc_f32(d, max_T * (D / 2));
    kc->rope_sin = slm_dev_alloc_f32(d, max_T * (D / 2));
    {
        double *inv_freq = slm_xcalloc((size_t)(D / 2), sizeof *inv_freq);
        slm_llama_rope_inv_freq(c, (int)D, inv_freq); // scaled RoPE (rope_scaling) included
        slm_dev_rope_tables(d, kc->rope_cos, kc->rope_sin, max_T, (int)(D / 2), inv_freq);
        free(inv_freq);
    }
    kc->x = slm_dev_alloc_f32(d, C);
    kc->ln = slm_dev_alloc_f32(d, C);
    kc->q = slm_dev_alloc_f32(d, HD);
    kc->kt = slm_dev_alloc_f32(d, KV * D);
    kc->vt = slm_dev_alloc_f32(d, KV * D);
    kc->att = slm_dev_alloc_f32(d, HD);
    kc->scores = slm_dev_alloc_f32(d, rep * max_T);
    kc->gate = slm_dev_alloc_f32(d, F);
    kc->up = slm_dev_alloc_f32(d, F);
    kc->h = slm_dev_alloc_f32(d, F);
    kc->rstd = slm_dev_alloc_f32(d, 1);
    kc->logits = slm_dev_alloc_f32(d, c->vocab_size);
    kc->token = slm_dev_alloc(d, sizeof(int32_t));
    return kc;
}

void slm_kv_cache_free(slm_kv_cache *kc) {
    if (!kc) return;
    void *ptrs[] = {kc->k,  kc->v,  kc->rope_cos, kc->rope_sin, kc->x,      kc->ln,
                    kc->q,  kc->kt, kc->vt,       kc->att,      kc->scores, kc->gate,
                    kc->up, kc->h,  kc->rstd,     kc->logits,   kc->token};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        slm_dev_free(kc->dev, ptrs[i]);
    free(kc);
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
    SLM_ASSERT(kc->dev == m->dev);
    slm_device *d = m->dev;
    bool bf = m->bf16_compute;
    float eps = c->rms_norm_eps, scale = 1.0f / sqrtf((float)D);
    const slm_param_view *rv = m->units[L].views;

    if (m->hooks.pre_forward) m->hooks.pre_forward(m->hooks.ctx, L);
    SLM_ASSERT(m->params[L]);
    slm_dev_copy(d, kc->token, &token, sizeof token, SLM_H2D); // validated above
    slm_dev_embedding_fwd(d, kc->x, kc->token, m->params[L] + rv[RV_EMB].offset, 1, C);
    for (int l = 0; l < L; l++) {
        if (m->hooks.pre_forward) m->hooks.pre_forward(m->hooks.ctx, l);
        const float *p = m->params[l];
        SLM_ASSERT(p);
        const slm_param_view *vw = m->units[l].views;
        // view order: ln1, q, k, v, o, ln2, gate, up, down (see llama.c)
        slm_dev_rmsnorm_fwd(d, kc->ln, kc->rstd, kc->x, p + vw[BV_LN1].offset, 1, C, eps);
        slm_dev_linear_fwd(d, bf, kc->q, kc->ln, p + vw[BV_Q].offset, 1, C, HD, false);
        slm_dev_linear_fwd(d, bf, kc->kt, kc->ln, p + vw[BV_K].offset, 1, C, KVD, false);
        slm_dev_linear_fwd(d, bf, kc->vt, kc->ln, p + vw[BV_V].offset, 1, C, KVD, false);
        slm_dev_rope_apply(d, kc->q, kc->rope_cos, kc->rope_sin, 1, 1, H, D, pos, NULL, false);
        slm_dev_rope_apply(d, kc->kt, kc->rope_cos, kc->rope_sin, 1, 1, KV, D, pos, NULL, false);
        if (bf) { // attention's inputs, as llama.c's attention_fwd rounds them
            slm_dev_round_bf16(d, kc->q, (int64_t)H * D);
            slm_dev_round_bf16(d, kc->kt, (int64_t)KV * D);
            slm_dev_round_bf16(d, kc->vt, (int64_t)KV * D);
        }
        float *kl = kc->k + l * kc->layer_stride, *vl = kc->v + l * kc->layer_stride;
        for (int g = 0; g < KV; g++) {
            int64_t at = ((int64_t)g * kc->max_T + pos) * D;
            size_t bytes = (size_t)D * sizeof(float);
            slm_dev_copy(d, kl + at, kc->kt + (int64_t)g * D, bytes, SLM_D2D);
            slm_dev_copy(d, vl + at, kc->vt + (int64_t)g * D, bytes, SLM_D2D);
        }
        int64_t n = pos + 1;
        for (int g = 0; g < KV; g++) {
            const float *Kg = kl + (int64_t)g * kc->max_T * D; // [n, D]
            const float *Vg = vl + (int64_t)g * kc->max_T * D; // [n, D]
            float *qg = kc->q + (int64_t)g * rep * D;          // [rep, D]
            float *og = kc->att + (int64_t)g * rep * D;        // [rep, D]
            slm_dev_linear_fwd(d, false, kc->scores, qg, Kg, rep, D, n, false);
            slm_dev_softmax_rows(d, kc->scores, rep, n, scale);
            slm_dev_zero(d, og, (size_t)(rep * D) * sizeof(float));
            slm_dev_linear_bwd(d, false, og, NULL, kc->scores, NULL, Vg, rep, D, n);
        }
        slm_dev_linear_fwd(d, bf, kc->x, kc->att, p + vw[BV_O].offset, 1, HD, C, true);
        slm_dev_rmsnorm_fwd(d, kc->ln, kc->rstd, kc->x, p + vw[BV_LN2].offset, 1, C, eps);
        slm_dev_linear_fwd(d, bf, kc->gate, kc->ln, p + vw[BV_GATE].offset, 1, C, F, false);
        slm_dev_linear_fwd(d, bf, kc->up, kc->ln, p + vw[BV_UP].offset, 1, C, F, false);
        slm_dev_swiglu_fwd(d, kc->h, kc->gate, kc->up, 1, F);
        slm_dev_linear_fwd(d, bf, kc->x, kc->h, p + vw[BV_DOWN].offset, 1, F, C, true);
        if (m->hooks.post_forward) m->hooks.post_forward(m->hooks.ctx, l);
    }
    const float *root = m->params[L];
    slm_dev_rmsnorm_fwd(d, kc->ln, kc->rstd, kc->x, root + rv[RV_NORM].offset, 1, C, eps);
    const float *Wlm = root + (c->tie_word_embeddings ? rv[RV_EMB].offset : rv[RV_LM].offset);
    slm_dev_linear_fwd(d, bf, kc->logits, kc->ln, Wlm, 1, C, V, false);
    slm_dev_copy(d, logits, kc->logits, (size_t)V * sizeof(float), SLM_D2H);
    if (m->hooks.post_forward) m->hooks.post_forward(m->hooks.ctx, L);
}
