// train/: the FLOPs model of MFU (the peak sgemm rate that is its denominator, the FLOPs a token
// and an FSDP unit cost; --simulate-compute's SLEEP device waits for the same count). Part of
// train/train.h (which includes it); peak.c and flops.c implement it.
#ifndef SLM_TRAIN_FLOPS_H
#define SLM_TRAIN_FLOPS_H

#include "base/base.h"
#include "model/model.h"

// The MFU denominator (src/train/peak.c; docs/training.md "MFU"): the best sgemm rate seen for
// this CPU model and thread count, cached across runs in a small file and raised by the trainer
// whenever a step runs faster than it, so MFU never exceeds 100 %.
// slm_peak_key: "CPU model name|threads=N" (/proc/cpuinfo) into out[cap].
void slm_peak_key(int threads, char *out, size_t cap);
// The cache file: $SHARDLM_CACHE_DIR/sgemm_peak.tsv ($SHARDLM_CACHE_DIR empty: NULL, no cache),
// else $XDG_CACHE_HOME/shardlm/..., else $HOME/.cache/shardlm/...; NULL without any. Caller
// frees.
char *slm_peak_cache_path(void);
// The cached GFLOP/s of `key`; NaN when there is no cache, no such line or it does not parse.
double slm_peak_cache_get(const char *key);
// Records `gflops` for `key` unless the cache already holds as much (other lines kept; the file
// and its directory made as needed, written atomically). SLM_OK without a cache. Errors: SLM_E_IO
// naming the file.
slm_status slm_peak_cache_raise(const char *key, double gflops);

// FLOPs per trained token: 6 N + 12 L A T (Kaplan et al. 2020 / PaLM appendix B), N =
// slm_llama_n_matmul_params (embedding excluded, lm_head included; with an explicit head_dim
// the q/k/v/o shapes use heads x head_dim), A = slm_train_attn_width.
double slm_train_flops_per_token(const slm_llama_config *c, int T);
// The width A of the attention score and value products per token: heads x head_dim with an
// explicit head_dim (HF config field), else hidden_size C (the count without head_dim).
double slm_train_attn_width(const slm_llama_config *c);
// FLOPs of one FSDP unit (0..L-1 blocks, L the root) for one micro-batch of B x T tokens, split
// as the model spends them between the unit's hooks (model.h): *fwd between pre_forward and
// post_forward, *bwd between pre_backward and post_backward. Same counting as
// slm_train_flops_per_token (2 FLOPs per multiply-add, forward 1x, backward 2x the matmuls;
// attention scores and values 4 A T per token forward, not halved for the causal mask): the
// units' fwd + bwd sum to slm_train_flops_per_token x B x T. Block: 2 N P_b + 4 N T A forward,
// twice that backward (plus the forward again under activation checkpointing, except for the
// last block, whose activations are kept). Root: the lm_head's forward AND backward (6 N V C) in
// *fwd, because the model runs the head's backward chunk by chunk inside the forward; *bwd 0
// (the final norm and embedding gradients are not matmuls).
void slm_train_unit_flops(const slm_llama_config *c, int B, int T, bool activation_checkpointing,
                          int unit, double *fwd, double *bwd);

#endif
