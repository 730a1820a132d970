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

#endif
