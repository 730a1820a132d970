// model/'s private header (llama.c, proj.c, lora.c, decode.c): the view indices inside a unit's
// FlatParameter, the block projections and the LoRA internals behind them.
// Not for other modules: they find tensors by name through slm_llama's unit layouts.
#ifndef SLM_MODEL_INTERNAL_H
#define SLM_MODEL_INTERNAL_H

#include "model/model.h"

// View indices inside a block unit (HF order: input_layernorm, q/k/v/o_proj,
// post_attention_layernorm, gate/up/down_proj) and inside the root unit (embed_tokens, the final
// norm, lm_head when untied).
enum { BV_LN1, BV_Q, BV_K, BV_V, BV_O, BV_LN2, BV_GATE, BV_UP, BV_DOWN, BV_COUNT };
enum { RV_EMB, RV_NORM, RV_LM };

// The base weight view of projection t (t in block order SLM_LORA_Q .. SLM_LORA_DOWN: the LoRA
// target indices name the seven projections of a block, adapted or not).
static inline int slm_proj_view(int t) {
    static const int view[SLM_LORA_N_TARGETS] = {BV_Q, BV_K, BV_V, BV_O, BV_GATE, BV_UP, BV_DOWN};
    return view[t];
}

// LoRA freezes the base: no base weight (block or root) gets a gradient, only the adapters.
static inline bool slm_llama_base_frozen(const slm_llama *m) {
    return m->lora.rank > 0;
}

// The projections of one block (proj.c), for llama.c's block forward / backward. Projection t
// is y [N, out] = x [N, in] W^T with W view slm_proj_view(t) of the block unit [out, in]
// (slm_lora_target_shape), plus s * (dropout(x) A^T) B^T when t has a LoRA adapter.
typedef struct slm_proj_ctx {
    const slm_llama *m;
    int l;          // block (layer)
    int blk;        // the adapters' saved-activation slot: l, or 0 under activation checkpointing
    const float *p; // the block unit's parameters
    float *g;       // its gradients, which the backward adds into; NULL: none (frozen base)
    int64_t N;      // token rows
} slm_proj_ctx;

// One projection's output gradient for slm_proj_bwd.
typedef struct slm_proj_dy {
    int t;           // projection (SLM_LORA_Q ..)
    const float *dy; // [N, out]
} slm_proj_dy;

// y = x W^T (acc: y += x W^T) plus the adapter's output, whose saved activations are kept for
// the backward. y NULL: only those saved activations (the recomputation under activation
// checkpointing, which needs everything but the block output).
void slm_proj_fwd(const slm_proj_ctx *pc, int t, const float *x, float *y, bool acc);
// Backward of n projections that read the same input x [N, in], in the order given: writes
// (=) dx [N, in] = sum of dy W (+ the adapter's d(input)), adds dy^T x into the base
// gradients unless pc->g is NULL and the adapter gradients into lora_grads[l]. Base terms are
// added first, in the order given, then the adapters'.
void slm_proj_bwd(const slm_proj_ctx *pc, const float *x, float *dx, int n, const slm_proj_dy *dys);

// Frees n unit layouts (their views) and the units / params / grads arrays, and with `owns` the
// device buffers params[u] / grads[u] on `dev` (arrays may be NULL). The base units' and the
// adapters' alike.
void slm_units_free(slm_device *dev, int n, slm_unit_layout *units, float **params, float **grads,
                    bool owns);

// LoRA internals (lora.c) behind proj.c. slm_lora_fwd adds target t's adapter output for input
// x [N, in] into y [N, out] (y NULL: skipped) and saves what its backward needs in slot `blk`;
// slm_lora_bwd adds the adapter gradients into lora_grads[l] and d(input) into dx [N, in],
// given dy [N, out]. Both do nothing for a target without an adapter (and without LoRA).
// slm_lora_acts_ensure sizes the saved activations (n_blk slots of N rows; nothing without
// LoRA) and records whether the next forward trains (dropout applied).
void slm_lora_acts_ensure(slm_llama *m, int n_blk, int64_t N, bool train);
void slm_lora_acts_free(slm_lora_acts *a);
size_t slm_lora_act_bytes(const slm_llama *m);
void slm_lora_fwd(const slm_llama *m, int l, int t, int blk, const float *x, float *y, int64_t N);
void slm_lora_bwd(const slm_llama *m, int l, int t, int blk, const float *x, const float *dy,
                  float *dx, int64_t N);
void slm_lora_free(slm_llama *m);

#endif
