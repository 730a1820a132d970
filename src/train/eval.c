// Evaluation: mean loss / perplexity on a prepared split or on a file of token ids, and the
// unigram entropy of a split (the quick start's yardstick). Contracts in train/eval.h.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_internal.h"

slm_status slm_eval_split(slm_llama *m, const char *data_dir, const char *split, int B, int T,
                          int64_t max_batches, slm_eval_result *res) {
    if (B < 1 || T < 1) return slm_fail(SLM_E_ARG, "batch %d and seq %d must be >= 1", B, T);
    if (T > m->cfg.max_position_embeddings)
        return slm_fail(SLM_E_ARG,
                        "--seq %d is longer than the model's "
                        "max_position_embeddings %d",
                        T, m->cfg.max_position_embeddings);
    slm_dataset ds;
    slm_status st = slm_dataset_open(data_dir, &ds);
    if (st) return st;
    if (ds.vocab_size != m->cfg.vocab_size) {
        st = slm_fail(SLM_E_ARG, "vocab mismatch: dataset %s has vocab_size %d, the model %d",
                      data_dir, ds.vocab_size, m->cfg.vocab_size);
        slm_dataset_free(&ds);
        return st;
    }
    const slm_split_info *si = !strcmp(split, "train") ? &ds.train
                               : !strcmp(split, "val") ? &ds.val
                                                       : NULL;
    uint64_t n_windows = si && si->n_tokens > 0 ? (si->n_tokens - 1) / (uint64_t)T : 0;
    if (ds.masked && si) n_windows = si->n_docs; // packed samples: at least one per window
    if (si && si->n_tokens == 0) { // a data error, not an option error: no --seq helps
        st = slm_fail(SLM_E_FORMAT,
                      "%s: the %s split is empty (0 documents, 0 tokens; train %llu / val %llu "
                      "tokens, val_fraction %g); evaluate the other split or prepare the data "
                      "again",
                      data_dir, split, (unsigned long long)ds.train.n_tokens,
                      (unsigned long long)ds.val.n_tokens, ds.val_fraction);
        slm_dataset_free(&ds);
        return st;
    }
    if (si && n_windows < 1) {
        st = slm_fail(SLM_E_ARG,
                      "%s: the %s split has %llu tokens, 0 windows of --seq + 1 = %d tokens; "
                      "need at least 1 (use a smaller --seq)",
                      data_dir, split, (unsigned long long)si->n_tokens, T + 1);
        slm_dataset_free(&ds);
        return st;
    }
    slm_dataset_free(&ds);
    // The activation workspace for B x T and the window buffers, before allocating them.
    st = slm_mem_check(slm_llama_act_bytes_estimate(&m->cfg, B, T, false) +
                           3.0 * (double)B * (T + 1) * sizeof(int32_t),
                       "the activations of --batch %d x --seq %d", B, T);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", slm_errmsg());
        return slm_fail(st, "%s; reduce --batch or --seq", msg);
    }
    slm_loader_opts lo = {.dir = data_dir,
                          .split = split,
                          .T = T,
                          .B_global = 1,
                          .rank = 0,
                          .world = 1,
                          .seed = 0,
                          .shuffle = false,
                          .max_T = m->cfg.max_position_embeddings};
    slm_loader *l = NULL;
    st = slm_loader_open(&lo, &l);
    if (st) return st;
    slm_llama_set_shape(m, B, T, false);
    st = slm_train_eval_loader(m, l, B, T, max_batches, res);
    slm_loader_free(l);
    if (!st && res->n_tokens == 0)
        st = slm_fail(SLM_E_FORMAT, "%s: split \"%s\" has no window of %d tokens", data_dir, split,
                      T + 1);
    return st;
}

slm_status slm_eval_token_ids(slm_llama *m, const char *path, slm_eval_result *res) {
    char *text = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &text, &len);
    if (st) return st;
    int maxT = m->cfg.max_position_embeddings;
    slm_ivec ids = {0};
    int32_t *tgt = slm_xmalloc((size_t)maxT * sizeof(int32_t));
    double sum = 0;
    int64_t n_tok = 0, n_seq = 0, lineno = 0;
    int shape_T = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        lineno++;
        char what[4200];
        snprintf(what, sizeof what, "%s:%lld", path, (long long)lineno);
        st =
            slm_token_ids_parse_line(what, line, m->cfg.vocab_size, "the model's vocabulary", &ids);
        if (st) goto out;
        line = nl ? nl + 1 : NULL;
        if (ids.len < 2) continue;
        int T = (int)ids.len - 1;
        if ((int64_t)ids.len - 1 > maxT) {
            st = slm_fail(SLM_E_ARG, "%s:%lld: %zu ids; at most max_position_embeddings + 1 = %d",
                          path, (long long)lineno, ids.len, maxT + 1);
            goto out;
        }
        if (T != shape_T) { // workspace sized for this line's length
            slm_llama_set_shape(m, 1, T, false);
            shape_T = T;
        }
        memcpy(tgt, ids.data + 1, (size_t)T * sizeof(int32_t));
        float loss = slm_llama_forward_loss(m, ids.data, tgt, 1, T); // no lm_head backward
        if (!isfinite(loss)) {
            st = slm_fail(SLM_E_NUMERIC, "%s:%lld: loss is %f", path, (long long)lineno,
                          (double)loss);
            goto out;
        }
        sum += (double)loss * T;
        n_tok += T;
        n_seq++;
    }
    if (n_tok == 0) {
        st = slm_fail(SLM_E_ARG, "%s: no line with at least 2 token ids", path);
        goto out;
    }
    res->loss = sum / (double)n_tok;
    res->perplexity = exp(res->loss);
    res->n_tokens = n_tok;
    res->n_seqs = n_seq;
    res->completion_only = false;
out:
    free(text);
    free(tgt);
    slm_ivec_free(&ids);
    return st;
}

slm_status slm_unigram_entropy(const char *data_dir, const char *split, double *nats,
                               int64_t *n_tokens) {
    return slm_split_unigram_entropy(data_dir, split, nats, n_tokens);
}
