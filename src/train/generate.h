// train/: generation (KV-cache decoding with temperature / top-k / top-p sampling). Part of
// train/train.h (which includes it); generate.c implements it.
#ifndef SLM_TRAIN_GENERATE_H
#define SLM_TRAIN_GENERATE_H

#include "base/base.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

// ---------------------------------------------------------------------------------------------
// Generation

typedef struct slm_gen_opts {
    int max_new;       // tokens to generate after the prompt
    float temperature; // 0: greedy (argmax)
    int top_k;         // 0: off
    float top_p;       // 1: off (nucleus sampling, Holtzman et al. 2020)
    uint64_t seed;
    bool add_bos;     // prepend the tokenizer's BOS id (if it has one)
    bool stop_at_eos; // stop when the EOS id is sampled
    bool stop_at_id;  // also stop when stop_id is sampled (a chat template's end of turn)
    int32_t stop_id;
} slm_gen_opts;

// Called after each new token with the text it completed (the bytes no later token can change:
// a character split over several tokens comes whole with its last token); `len` may be 0 (a
// special token, or part of a character). If generation ends inside a character, a last call
// with token -1 carries the rest. The concatenated bytes equal the one-shot decode of the new
// tokens' text.
typedef void (*slm_gen_emit_fn)(void *ctx, int32_t token, const char *bytes, size_t len);

// Encodes `prompt`, runs it through the KV cache, then samples max_new tokens (or until EOS /
// the context is full), calling emit after each new token. Deterministic for a fixed seed.
// Errors: SLM_E_ARG for an empty prompt without BOS, or options out of range.
// slm_generate_ids: the same from prompt ids (e.g. a chat template's, slm_chat_prompt_ids) instead
// of text; o->add_bos is not applied.
slm_status slm_generate(slm_llama *m, const slm_tokenizer *tok, const char *prompt,
                        const slm_gen_opts *o, slm_gen_emit_fn emit, void *ctx, slm_ivec *out_ids);
slm_status slm_generate_ids(slm_llama *m, const slm_tokenizer *tok, const int32_t *prompt_ids,
                            size_t n_prompt, const slm_gen_opts *o, slm_gen_emit_fn emit, void *ctx,
                            slm_ivec *out_ids);
// Samples one id from logits[V] (modified in place) with the options' temperature / top-k /
// top-p and the RNG. Deterministic.
int32_t slm_sample_logits(float *logits, int32_t V, const slm_gen_opts *o, slm_rng *rng);

#endif
