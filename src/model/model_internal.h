// model/'s private header (llama.c, decode.c): the view indices inside a unit's FlatParameter.
// Not for other modules: they find tensors by name through slm_llama's unit layouts.
#ifndef SLM_MODEL_INTERNAL_H
#define SLM_MODEL_INTERNAL_H

#include "model/model.h"

// View indices inside a block unit (HF order: input_layernorm, q/k/v/o_proj,
// post_attention_layernorm, gate/up/down_proj) and inside the root unit (embed_tokens, the final
// norm, lm_head when untied).
enum { BV_LN1, BV_Q, BV_K, BV_V, BV_O, BV_LN2, BV_GATE, BV_UP, BV_DOWN, BV_COUNT };
enum { RV_EMB, RV_NORM, RV_LM };

// LoRA internals (lora.c) for llama.c. `blk` is the saved-activation slot (layer l, or 0
// under activation checkpointing). slm_lora_fwd adds target t's adapter output for input
// x [N, in] into y [N, out] and saves what its backward needs; slm_lora_bwd adds the adapter
// gradients into lora_grads[l] and d(input) into dx [N, in], given dy [N, out].
void slm_lora_acts_ensure(slm_llama *m, int n_blk, int64_t N, bool train);
void slm_lora_acts_free(slm_lora_acts *a);
size_t slm_lora_act_bytes(const slm_llama *m);
void slm_lora_fwd(const slm_llama *m, int l, int t, int blk, const float *x, float *y, int64_t N);
void slm_lora_bwd(const slm_llama *m, int l, int t, int blk, const float *x, const float *dy,
                  float *dx, int64_t N);
void slm_lora_free(slm_llama *m);

#endif
