// Training options, declared once. slm_train_options is the table of the options of
// slm_train_opts (train.h): for each its --name, field (offset, size and type), default, range,
// help text, --help section and whether the ranks of a run must agree on it (all do unless
// SLM_OPTF_PER_RANK). It drives:
//  - slm_train_opts_default: the defaults (each entry's `init`; fsdp/'s own defaults for
//    --sharding, --param-dtype, --reduce-dtype, --limit-all-gathers and prefetch);
//  - slm_train_opts_check: validation, the ranges of the table and the rules between options;
//  - slm_train_agree: the settings compared across ranks;
//  - `shardlm train`'s parser and --help (tools/cmd_train.c adds only its CLI-only options).
// Fields of slm_train_opts that are not options (the hooks) are not in it.
#ifndef SLM_TRAIN_OPTIONS_H
#define SLM_TRAIN_OPTIONS_H

#include "base/base.h"
#include "base/opt.h"

struct slm_train_opts;

// The table, in --help order with its SLM_OPT_SECTION headings, terminated by SLM_OPT_END.
// Offsets are into struct slm_train_opts; every entry has `size` (the field's sizeof).
extern const slm_opt slm_train_options[];

// Checks a run's options as slm_train_open does before anything else: every option's value is
// in its table range (or its "not given" value: SLM_OPTF_ZERO_OFF / NEG_OFF), and the rules
// between options hold (--init-from-hf vs --init-from-gguf vs --resume PATH, --out for
// resume-side options, --loss-spike-window 0 or >= SLM_SPIKE_WINDOW_MIN, LoRA's base and
// settings, --ckpt-uri, --min-lr <= --lr, a dataset, --simulate-compute's limits). Reads
// --init-from-hf's path (is it a GGUF file). Returns SLM_OK or SLM_E_ARG with the message naming
// the option(s), without a "train: " prefix (the CLI adds it).
slm_status slm_train_opts_check(const struct slm_train_opts *o);

#endif
