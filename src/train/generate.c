// Generation: KV-cache decoding with temperature, top-k and nucleus (top-p) sampling, streamed
// through a callback as the decoded text grows. Contracts in train/generate.h.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

typedef struct cand {
    int32_t id;
    float p;
} cand;

// Descending probability; ties by ascending id so the order (and the sample) is deterministic.
static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t slm_sample_logits(float *logits, int32_t V, const slm_gen_opts *o, slm_rng *rng) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (!(o->temperature > 0)) return best; // greedy
    // softmax(logits / temperature), max-subtracted.
    double sum = 0;
    float mx = logits[best];
    for (int32_t i = 0; i < V; i++) {
        logits[i] = expf((logits[i] - mx) / o->temperature);
        sum += logits[i];
    }
    bool filter = (o->top_k > 0 && o->top_k < V) || (o->top_p > 0 && o->top_p < 1);
    if (!filter) {
        double u = (double)slm_rng_uniform(rng) * sum, acc = 0;
        for (int32_t i = 0; i < V; i++) {
            acc += logits[i];
            if (u < acc) return i;
        }
        return best; // rounding at the very end of the cumulative sum
    }
    cand *c = slm_xmalloc((size_t)V * sizeof *c);
    for (int32_t i = 0; i < V; i++)
        c[i] = (cand){i, (float)(logits[i] / sum)};
    qsort(c, (size_t)V, sizeof *c, cmp_cand);
    int32_t n = V;
    if (o->top_k > 0 && o->top_k < n) n = o->top_k;
    if (o->top_p > 0 && o->top_p < 1) {
        // Smallest prefix whose probability mass reaches top_p (always at least one token).
        double acc = 0;
        for (int32_t i = 0; i < n; i++) {
            acc += c[i].p;
            if (acc >= o->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    double kept = 0;
    for (int32_t i = 0; i < n; i++)
        kept += c[i].p;
    double u = (double)slm_rng_uniform(rng) * kept, acc = 0;
    int32_t pick = c[n - 1].id;
    for (int32_t i = 0; i < n; i++) {
        acc += c[i].p;
        if (u < acc) {
            pick = c[i].id;
            break;
        }
    }
    free(c);
    return pick;
}

static slm_status generate(slm_llama *m, const slm_tokenizer *tok, slm_ivec ids,
                           const slm_gen_opts *o, slm_gen_emit_fn emit, void *ctx,
                           slm_ivec *out_ids);

slm_status slm_generate(slm_llama *m, const slm_tokenizer *tok, const char *prompt,
                        const slm_gen_opts *o, slm_gen_emit_fn emit, void *ctx, slm_ivec *out_ids) {
    slm_ivec ids = {0};
    slm_status st =
        slm_tokenizer_encode(tok, prompt, strlen(prompt), o->add_bos ? SLM_ENC_ADD_BOS : 0, &ids);
    if (st) {
        slm_ivec_free(&ids);
        return st;
    }
    return generate(m, tok, ids, o, emit, ctx, out_ids);
}

slm_status slm_generate_ids(slm_llama *m, const slm_tokenizer *tok, const int32_t *prompt_ids,
                            size_t n_prompt, const slm_gen_opts *o, slm_gen_emit_fn emit, void *ctx,
                            slm_ivec *out_ids) {
    slm_ivec ids = {0};
    for (size_t i = 0; i < n_prompt; i++)
        slm_ivec_push(&ids, prompt_ids[i]);
    return generate(m, tok, ids, o, emit, ctx, out_ids);
}

// Takes ownership of `ids` (the prompt).
static slm_status generate(slm_llama *m, const slm_tokenizer *tok, slm_ivec ids,
                           const slm_gen_opts *o, slm_gen_emit_fn emit, void *ctx,
                           slm_ivec *out_ids) {
    slm_status st = SLM_OK;
    if (o->max_new < 0)
        st = slm_fail(SLM_E_ARG, "--max-new must be >= 0 (got %d)", o->max_new);
    else if (o->temperature < 0)
        st = slm_fail(SLM_E_ARG, "--temperature must be >= 0");
    else if (o->top_k < 0)
        st = slm_fail(SLM_E_ARG, "--top-k must be >= 0");
    else if (!(o->top_p > 0 && o->top_p <= 1))
        st = slm_fail(SLM_E_ARG, "--top-p must be in (0, 1]");
    for (size_t i = 0; !st && i < ids.len; i++)
        if (ids.data[i] < 0 || ids.data[i] >= m->cfg.vocab_size)
            st = slm_fail(SLM_E_ARG, "prompt id %d at %zu is outside the model's vocabulary",
                          ids.data[i], i);
    if (st) goto out;
    if (ids.len == 0) {
        st = slm_fail(SLM_E_ARG, "the prompt is empty and the tokenizer has no BOS token to "
                                 "start from; give --prompt some text");
        goto out;
    }
    int maxT = m->cfg.max_position_embeddings;
    if ((int64_t)ids.len > maxT) {
        st = slm_fail(SLM_E_ARG, "the prompt is %zu tokens; the model's context is %d", ids.len,
                      maxT);
        goto out;
    }
    int64_t want_T = (int64_t)ids.len + o->max_new;
    int cache_T = want_T < maxT ? (int)want_T : maxT;
    // The KV cache for cache_T positions and the logits row, before allocating them.
    st = slm_mem_check(slm_kv_cache_bytes_estimate(&m->cfg, cache_T) +
                           (double)m->cfg.vocab_size * sizeof(float),
                       "the KV cache for %d positions (prompt %zu + --max-new %d tokens)", cache_T,
                       ids.len, o->max_new);
    if (st) goto out;
    slm_kv_cache *kv = slm_kv_cache_new(m, cache_T);
    int32_t V = m->cfg.vocab_size;
    int32_t tv = slm_tokenizer_vocab_size(tok);
    float *logits = slm_xmalloc((size_t)V * sizeof(float));
    slm_rng rng;
    slm_rng_seed(&rng, o->seed);
    for (size_t i = 0; i < ids.len; i++)
        slm_llama_decode_step(m, kv, ids.data[i], (int)i, logits);
    // Text already shown: the decoded prompt. New text streams through an incremental decoder
    // that holds back a character until all its bytes have arrived (several byte-fallback or
    // byte-level tokens), so what is emitted never changes later and the concatenation of the
    // chunks is the one-shot decode of the new ids' text (tokenizer.h slm_tok_stream).
    slm_tok_stream ts;
    slm_tok_stream_init(&ts, tok, false);
    const char *chunk = NULL;
    size_t chunk_len = 0;
    st = slm_tok_stream_push(&ts, ids.data, ids.len, &chunk, &chunk_len);
    ts.shown = ts.text.len; // the prompt is the caller's to show
    int32_t eos = slm_tokenizer_eos_id(tok);
    for (int i = 0; !st && i < o->max_new; i++) {
        // Ids the model knows but the tokenizer does not (a padded vocab) are never sampled.
        for (int32_t v = tv; v < V; v++)
            logits[v] = -INFINITY;
        int32_t next = slm_sample_logits(logits, V, o, &rng);
        slm_ivec_push(&ids, next);
        if (o->stop_at_eos && next == eos) break;
        if (o->stop_at_id && next == o->stop_id) break;
        st = slm_tok_stream_push(&ts, &next, 1, &chunk, &chunk_len);
        if (st) break;
        if (emit) emit(ctx, next, chunk, chunk_len);
        if ((int)ids.len >= cache_T) break; // context full
        slm_llama_decode_step(m, kv, next, (int)ids.len - 1, logits);
    }
    if (!st) { // the ids end inside a character: show what the one-shot decode shows
        slm_tok_stream_finish(&ts, &chunk, &chunk_len);
        if (emit && chunk_len) emit(ctx, -1, chunk, chunk_len);
    }
    slm_tok_stream_free(&ts);
    free(logits);
    slm_kv_cache_free(kv);
    if (!st && out_ids) {
        out_ids->len = 0;
        for (size_t i = 0; i < ids.len; i++)
            slm_ivec_push(out_ids, ids.data[i]);
    }
out:
    slm_ivec_free(&ids);
    return st;
}
