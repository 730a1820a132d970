// Evaluation: mean loss / perplexity on a prepared split or on a file of token ids, and the
// unigram entropy of a split (the quick start's yardstick). Contracts in train.h.
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_internal.h"

slm_status slm_eval_split(slm_llama *m, const char *data_dir, const char *split, int B, int T,
                          int64_t max_batches, slm_eval_result *res) {
    if (B < 1 || T < 1) return slm_fail(SLM_E_ARG, "batch %d and seq %d must be >= 1", B, T);
    if (T > m->cfg.max_position_embeddings)
        return slm_fail(SLM_E_ARG, "--seq %d is longer than the model's "
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
    slm_loader_opts lo = {.dir = data_dir, .split = split, .T = T, .B_global = 1, .rank = 0,
                          .world = 1, .seed = 0, .shuffle = false};
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

// Parses one line of whitespace-separated non-negative integers into `ids`.
static slm_status parse_ids_line(const char *path, int64_t lineno, const char *s, slm_ivec *ids,
                                 int32_t vocab) {
    const char *p = s;
    ids->len = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p || *p == '\n') break;
        if (!isdigit((unsigned char)*p))
            return slm_fail(SLM_E_FORMAT, "%s:%lld:%lld: expected a token id, found '%c'", path,
                            (long long)lineno, (long long)(p - s) + 1, *p);
        errno = 0;
        char *end = NULL;
        long long x = strtoll(p, &end, 10);
        if (errno || x >= vocab)
            return slm_fail(SLM_E_ARG, "%s:%lld:%lld: token id %.*s is outside the model's "
                                       "vocabulary [0, %d)",
                            path, (long long)lineno, (long long)(p - s) + 1,
                            (int)(end - p > 24 ? 24 : end - p), p, vocab);
        slm_ivec_push(ids, (int32_t)x);
        p = end;
    }
    return SLM_OK;
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
    bool was_loss_only = m->loss_only;
    m->loss_only = true; // evaluation only: skip the lm_head backward inside the forward
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        lineno++;
        st = parse_ids_line(path, lineno, line, &ids, m->cfg.vocab_size);
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
        float loss = slm_llama_forward(m, ids.data, tgt, 1, T);
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
out:
    m->loss_only = was_loss_only;
    free(text);
    free(tgt);
    slm_ivec_free(&ids);
    return st;
}

slm_status slm_unigram_entropy(const char *data_dir, const char *split, double *nats,
                               int64_t *n_tokens) {
    slm_dataset ds;
    slm_status st = slm_dataset_open(data_dir, &ds);
    if (st) return st;
    const slm_split_info *si = !strcmp(split, "train") ? &ds.train
                               : !strcmp(split, "val") ? &ds.val
                                                       : NULL;
    if (!si) {
        slm_dataset_free(&ds);
        return slm_fail(SLM_E_ARG, "unknown split \"%s\" (train or val)", split);
    }
    uint64_t *count = slm_xcalloc((size_t)ds.vocab_size, sizeof(uint64_t));
    uint64_t total = 0;
    for (int s = 0; s < si->n_shards && !st; s++) {
        char *p = slm_path_join(ds.dir, si->shards[s].file);
        slm_map map = {0};
        slm_shard_header h;
        const slm_shard_info *sh = &si->shards[s];
        st = slm_map_file(p, &map);
        // The loader's checks: size and whole-file XXH64 against manifest.json, then the shard's
        // own header, payload hash and token range (slm_shard_verify).
        if (!st && map.len != sh->bytes)
            st = slm_fail(SLM_E_FORMAT,
                          "%s: file is %zu bytes, manifest says %llu (truncated or replaced); "
                          "HINT: rerun shardlm prep",
                          p, map.len, (unsigned long long)sh->bytes);
        if (!st) {
            uint64_t fh = slm_xxh64(map.data, map.len, 0);
            if (fh != sh->xxh64) {
                char a[17], b[17];
                slm_hex64(sh->xxh64, a);
                slm_hex64(fh, b);
                st = slm_fail(SLM_E_CHECKSUM,
                              "%s: checksum mismatch (manifest xxh64 %s, file %s): the shard is "
                              "corrupt; HINT: rerun shardlm prep",
                              p, a, b);
            }
        }
        if (!st) st = slm_shard_verify(p, map.data, map.len, (uint32_t)ds.vocab_size, &h);
        if (!st) {
            const uint8_t *d = map.data + SLM_SHARD_HEADER_BYTES;
            for (uint64_t i = 0; i < h.n_tokens; i++) {
                uint32_t tkn;
                if (h.token_bytes == 2)
                    tkn = (uint32_t)d[2 * i] | (uint32_t)d[2 * i + 1] << 8;
                else
                    tkn = (uint32_t)d[4 * i] | (uint32_t)d[4 * i + 1] << 8 |
                          (uint32_t)d[4 * i + 2] << 16 | (uint32_t)d[4 * i + 3] << 24;
                if (tkn >= (uint32_t)ds.vocab_size) {
                    st = slm_fail(SLM_E_FORMAT, "%s: token %llu is %u, vocab_size %d", p,
                                  (unsigned long long)i, tkn, ds.vocab_size);
                    break;
                }
                count[tkn]++;
            }
            total += h.n_tokens;
        }
        slm_map_free(&map);
        free(p);
    }
    if (!st && total == 0) st = slm_fail(SLM_E_FORMAT, "%s: split \"%s\" is empty", data_dir, split);
    if (!st) {
        double hsum = 0;
        for (int32_t v = 0; v < ds.vocab_size; v++)
            if (count[v]) {
                double pv = (double)count[v] / (double)total;
                hsum -= pv * log(pv);
            }
        *nats = hsum;
        if (n_tokens) *n_tokens = (int64_t)total;
    }
    free(count);
    slm_dataset_free(&ds);
    return st;
}
