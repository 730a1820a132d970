// Loader windows to a micro-batch's inputs and targets, and the validation loop over them.
// Contract in train_internal.h.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "train/train.h"
#include "train/train_internal.h"

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
