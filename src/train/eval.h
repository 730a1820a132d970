// train/: evaluation (mean loss and perplexity of a split or of token-id lines, unigram entropy).
// Part of train/train.h (which includes it); eval.c implements it.
#ifndef SLM_TRAIN_EVAL_H
#define SLM_TRAIN_EVAL_H

#include "base/base.h"
#include "model/model.h"

// ---------------------------------------------------------------------------------------------
// Evaluation

typedef struct slm_eval_result {
    double loss;          // mean cross-entropy, nats per target token
    double perplexity;    // exp(loss)
    int64_t n_tokens;     // target tokens evaluated
    int64_t n_seqs;       // sequences (windows or lines)
    bool completion_only; // instruction data: loss and n_tokens over the completion / assistant
                          // tokens only (the dataset's target mask), samples packed
} slm_eval_result;

// Mean loss over a prepared split: windows of T+1 tokens in order, `max_batches` batches of B
// (0: all). Instruction data (manifest format_version 2): windows of packed samples and the
// loss over their target (completion / assistant) tokens only. Errors: those of slm_loader_open;
// SLM_E_ARG on vocab mismatch or T too long; SLM_E_NUMERIC on a non-finite loss.
slm_status slm_eval_split(slm_llama *m, const char *data_dir, const char *split, int B, int T,
                          int64_t max_batches, slm_eval_result *res);
// Mean loss over a text file of whitespace-separated token ids, one sequence per line
// (inputs = ids[:-1], targets = ids[1:]); lines with fewer than 2 ids are skipped; all lines'
// target tokens weigh equally. Errors: SLM_E_IO; SLM_E_FORMAT naming the line and column of a
// non-integer; SLM_E_ARG naming the line of an id >= vocab_size or a line longer than
// max_position_embeddings + 1.
slm_status slm_eval_token_ids(slm_llama *m, const char *path, slm_eval_result *res);
// Unigram entropy of a split, nats/token: H = -sum_v p(v) ln p(v) with p the split's token
// frequencies (the loss of the best context-free model, the quick start's yardstick).
// Errors: those of slm_loader_open / slm_dataset_open.
slm_status slm_unigram_entropy(const char *data_dir, const char *split, double *nats,
                               int64_t *n_tokens);

#endif
