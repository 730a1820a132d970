// Training: options and their defaults, hook registration, the stop flag, config and vocab
// checks, windows to inputs / targets, the validation loop, and slm_train_run composing the
// phases of trainer.c (open, init, step, finish). Hooks in hooks.c. Contract in train.h.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "dist/dist.h"
#include "kernels/kernels.h"
#include "train/train.h"
#include "train/train_internal.h"
#include "ckpt/ckpt.h"

// The stop flag is base/'s (slm_stop_*): these name the trainer's messages. A stop is honoured at
// the next micro-batch or step boundary (saved, resumable); a second SIGINT exits at once.
void slm_train_install_signal_handlers(void) {
    slm_stop_install("\nshardlm: stop requested: stopping at the next micro-batch boundary "
                     "(interrupt again to exit at once, without saving)\n",
                     "\nshardlm: second interrupt: exiting now without saving (the last "
                     "committed checkpoint is kept)\n");
}

void slm_train_request_stop(void) {
    slm_stop_request();
}
bool slm_train_stop_requested(void) {
    return slm_stop_requested();
}
void slm_train_reset_stop(void) {
    slm_stop_reset();
}

void slm_train_opts_default(slm_train_opts *o) {
    memset(o, 0, sizeof *o);
    slm_fsdp_opts_default(&o->fsdp);        // fsdp/ owns its options' defaults
    slm_opt_defaults(slm_train_options, o); // the rest: the option table (options.c)
}

slm_status slm_train_attach(slm_train_opts *o, const slm_train_hook *h) {
    if (o->n_hooks >= SLM_TRAIN_MAX_HOOKS)
        return slm_fail(SLM_E_ARG, "too many step hooks (at most %d)", SLM_TRAIN_MAX_HOOKS);
    o->hooks[o->n_hooks++] = *h;
    return SLM_OK;
}

slm_status slm_train_add_hook(slm_train_opts *o, slm_step_hook_fn fn, void *ctx) {
    slm_train_hook h = {.name = "step hook", .ctx = ctx, .observe = fn};
    return slm_train_attach(o, &h);
}

double slm_train_flops_per_token(const slm_llama_config *c, int T) {
    // 6N: forward 2N + backward 4N multiply-adds counted as 2 FLOPs each; 12 L A T: the
    // attention score and value products (QK^T and AV), forward and backward, over the
    // attention width A (slm_train_attn_width).
    return 6.0 * (double)slm_llama_n_matmul_params(c) +
           12.0 * (double)c->num_hidden_layers * slm_train_attn_width(c) * (double)T;
}

double slm_train_attn_width(const slm_llama_config *c) {
    // An explicit head_dim: the query / key width heads x head_dim (q_proj's rows). Without one
    // the count stays the hidden size C, as it always was.
    return c->head_dim > 0 ? (double)c->num_attention_heads * (double)c->head_dim
                           : (double)c->hidden_size;
}

slm_status slm_train_resolve_config(const char *spec, int32_t vocab_override, int T,
                                    slm_llama_config *cfg) {
    if (!spec) return slm_fail(SLM_E_ARG, "no model given (--model PRESET|config.json)");
    slm_status st;
    if (slm_is_gguf_file(spec)) { // a GGUF file: its llama metadata
        slm_gguf_file g;
        st = slm_gguf_open(spec, &g);
        if (!st) st = slm_gguf_llama_config(&g, cfg);
        slm_gguf_close(&g);
    } else {
        st = slm_llama_config_resolve(spec, cfg);
    }
    if (st) return st;
    if (vocab_override > 0) cfg->vocab_size = vocab_override;
    st = slm_llama_config_validate(cfg);
    if (st) return slm_fail_wrap(st, "model %s", spec);
    if (T > cfg->max_position_embeddings)
        return slm_fail(SLM_E_ARG,
                        "--seq %d is longer than the model's max_position_embeddings %d (%s); "
                        "HINT: use --seq <= %d or a config.json with a larger "
                        "max_position_embeddings",
                        T, cfg->max_position_embeddings, spec, cfg->max_position_embeddings);
    return SLM_OK;
}

slm_status slm_train_check_vocab(const slm_dataset *ds, const slm_tokenizer *tok,
                                 const slm_llama_config *cfg, const char *model_spec) {
    int32_t tv = slm_tokenizer_vocab_size(tok);
    if (tv != ds->vocab_size)
        return slm_fail(SLM_E_ARG,
                        "%s: the tokenizer %s has %d ids but manifest.json says vocab_size %d "
                        "(dataset prepared with another tokenizer?)",
                        ds->dir, ds->tokenizer_file, tv, ds->vocab_size);
    if (cfg->vocab_size != ds->vocab_size)
        return slm_fail(SLM_E_ARG,
                        "vocab mismatch: model %s has vocab_size %d but dataset %s (tokenizer %s) "
                        "has %d; HINT: pass --vocab-size %d or a config.json with vocab_size %d",
                        model_spec, cfg->vocab_size, ds->dir, ds->tokenizer_file, ds->vocab_size,
                        ds->vocab_size, ds->vocab_size);
    return SLM_OK;
}

// Splits windows[b, T+1] into inputs[b, T] = w[:, :-1] and targets[b, T] = w[:, 1:]; returns the
// number of targets that are not the ignore index.
int64_t slm_train_split_windows(const int32_t *win, int b, int T, int32_t *inp, int32_t *tgt) {
    int64_t n = 0;
    for (int i = 0; i < b; i++) {
        const int32_t *w = win + (int64_t)i * (T + 1);
        memcpy(inp + (int64_t)i * T, w, (size_t)T * sizeof(int32_t));
        memcpy(tgt + (int64_t)i * T, w + 1, (size_t)T * sizeof(int32_t));
        for (int t = 0; t < T; t++)
            n += w[t + 1] != -1;
    }
    return n;
}

int64_t slm_train_split_masked(const int32_t *win, const uint8_t *wtgt, const int32_t *wpos, int b,
                               int T, int32_t *inp, int32_t *tgt, int32_t *pos) {
    int64_t n = 0;
    for (int i = 0; i < b; i++) {
        const int32_t *w = win + (int64_t)i * (T + 1);
        const uint8_t *m = wtgt + (int64_t)i * (T + 1);
        memcpy(inp + (int64_t)i * T, w, (size_t)T * sizeof(int32_t));
        memcpy(pos + (int64_t)i * T, wpos + (int64_t)i * (T + 1), (size_t)T * sizeof(int32_t));
        for (int t = 0; t < T; t++) {
            tgt[(int64_t)i * T + t] = m[t + 1] ? w[t + 1] : -1;
            n += m[t + 1] != 0;
        }
    }
    return n;
}

// Validation over the first `max_batches` batches of B windows (0: all) of an open val loader
// (B_global 1: it fills the batch itself, so a split smaller than B still evaluates).
slm_status slm_train_eval_loader(slm_llama *m, slm_loader *l, int B, int T, int64_t max_batches,
                                 slm_eval_result *res) {
    int32_t *win = slm_xmalloc((size_t)B * (T + 1) * sizeof(int32_t));
    int32_t *inp = slm_xmalloc((size_t)B * T * sizeof(int32_t));
    int32_t *tgt = slm_xmalloc((size_t)B * T * sizeof(int32_t));
    // instruction data: loss on the target (completion / assistant) tokens only, packed samples
    bool masked = slm_loader_masked(l);
    uint8_t *wtgt = masked ? slm_xmalloc((size_t)B * (T + 1)) : NULL;
    int32_t *wpos = masked ? slm_xmalloc((size_t)B * (T + 1) * sizeof(int32_t)) : NULL;
    int32_t *pos = masked ? slm_xmalloc((size_t)B * T * sizeof(int32_t)) : NULL;
    double sum = 0;
    int64_t n_tok = 0, n_seq = 0;
    res->completion_only = masked;
    slm_status st = SLM_OK;
    for (int64_t batch = 0; max_batches <= 0 || batch < max_batches; batch++) {
        int b = 0;
        while (b < B && (masked ? slm_loader_next_val_ex(l, win + (int64_t)b * (T + 1),
                                                         wtgt + (int64_t)b * (T + 1),
                                                         wpos + (int64_t)b * (T + 1))
                                : slm_loader_next_val(l, win + (int64_t)b * (T + 1))) == 1)
            b++;
        if (b == 0) break;
        int64_t n = masked ? slm_train_split_masked(win, wtgt, wpos, b, T, inp, tgt, pos)
                           : slm_train_split_windows(win, b, T, inp, tgt);
        float loss = masked ? slm_llama_forward_loss_packed(m, inp, tgt, pos, b, T)
                            : slm_llama_forward_loss(m, inp, tgt, b, T); // no lm_head backward
        if (!isfinite(loss)) {
            st = slm_fail(SLM_E_NUMERIC, "validation batch %lld: loss is %f", (long long)batch,
                          (double)loss);
            break;
        }
        sum += (double)loss * (double)n;
        n_tok += n;
        n_seq += b;
        if (b < B) break;
    }
    free(win), free(inp), free(tgt);
    free(wtgt), free(wpos), free(pos);
    if (st) return st;
    res->n_tokens = n_tok;
    res->n_seqs = n_seq;
    res->loss = n_tok ? sum / (double)n_tok : NAN;
    res->perplexity = exp(res->loss);
    return SLM_OK;
}

slm_status slm_train_run(const slm_train_opts *o, slm_train_result *res) {
    slm_trainer *tr = NULL;
    slm_status st = slm_train_open(o, &tr);
    if (!st) st = slm_train_init(tr);
    while (!st && !slm_train_done(tr)) {
        slm_step_metrics m;
        st = slm_train_step(tr, &m);
    }
    st = slm_train_finish(tr, st);
    if (res && tr && (st == SLM_OK || st == SLM_E_INTERRUPTED)) *res = *slm_trainer_result(tr);
    slm_train_close(tr);
    return st;
}
