// Helpers shared by the train/ sources (not part of the public API).
#ifndef SLM_TRAIN_INTERNAL_H
#define SLM_TRAIN_INTERNAL_H

#include "data/data.h"
#include "train/train.h"

// Resolves a preset / config.json, applies a vocab override (> 0), validates, and checks
// T <= max_position_embeddings. Errors: SLM_E_ARG naming the spec and the field.
slm_status slm_train_resolve_config(const char *spec, int32_t vocab_override, int T,
                                    slm_llama_config *cfg);
// Tokenizer, manifest and model agree on the vocabulary size. Errors: SLM_E_ARG naming all three.
slm_status slm_train_check_vocab(const slm_dataset *ds, const slm_tokenizer *tok,
                                 const slm_llama_config *cfg, const char *model_spec);
// windows [b, T+1] -> inputs [b, T], targets [b, T]; returns the count of targets != -1.
int64_t slm_train_split_windows(const int32_t *win, int b, int T, int32_t *inp, int32_t *tgt);
// Mean loss over up to max_batches (0: all) batches of B windows from a val loader opened with
// B_global 1, from its current position. Errors: SLM_E_NUMERIC on a non-finite loss.
slm_status slm_train_eval_loader(slm_llama *m, slm_loader *l, int B, int T, int64_t max_batches,
                                 slm_eval_result *res);

// Memory this process may still allocate, in bytes: slm_mem_available() (base/), the min of
// MemAvailable, the RLIMIT_AS headroom and the cgroup memory.max headroom; 0 if none is known.
double slm_train_mem_available(void);
// Human-readable size ("1.50 GiB") into buf[32]; returns buf.
const char *slm_train_fmt_bytes(double bytes, char buf[32]);

#endif
