// Subcommand entry points of the shardlm CLI. Each parses its arguments with its option table
// (opt.h), calls one module entry point, prints the error message on failure and returns the
// process exit code (slm_exit_code): 0 success, 1 runtime error (I/O, bad data, numeric
// failure), 2 usage error (bad options). The library never exits or prints to stdout
// (scripts/check_style.sh); main() returns what the subcommand returned.
#ifndef SLM_CMD_H
#define SLM_CMD_H

#include "opt.h"

int slm_cmd_tokenizer(int argc, char **argv);   // shardlm tokenizer train|encode|decode|info
int slm_cmd_prep(int argc, char **argv);        // shardlm prep
int slm_cmd_train(int argc, char **argv);       // shardlm train
int slm_cmd_eval(int argc, char **argv);        // shardlm eval
int slm_cmd_generate(int argc, char **argv);    // shardlm generate
int slm_cmd_bench_peak(int argc, char **argv);  // shardlm bench-peak
int slm_cmd_ckpt(int argc, char **argv);        // shardlm ckpt inspect|verify|export
int slm_cmd_report(int argc, char **argv);      // shardlm report
int slm_cmd_flight(int argc, char **argv);      // shardlm flight RUN_DIR
int slm_cmd_healthcheck(int argc, char **argv); // shardlm healthcheck
int slm_cmd_launch(int argc, char **argv);      // shardlm launch

// The option table of `shardlm train` (tests check it against src/train/agree.c).
const slm_cli *slm_train_cli(void);

// The two mutually exclusive options that name the model of eval and generate (option group
// 1), as entries of an slm_opt table whose args struct has `const char *model, *hf`; OFF is
// the table's offsetof macro.
#define SLM_MODEL_DIR_OPTS(OFF)                                                                    \
    {.name = "--model",                                                                            \
     .type = SLM_OPT_STRING,                                                                       \
     .off = OFF(model),                                                                            \
     .meta = "DIR",                                                                                \
     .help = "a run directory written by shardlm train (its newest checkpoint that "               \
             "verifies), a checkpoint step_N directory, an HF directory (config.json + "           \
             "safetensors) or a llama.cpp GGUF file (llama architecture)",                         \
     .group = 1},                                                                                  \
    {                                                                                              \
        .name = "--init-from-hf", .type = SLM_OPT_STRING, .off = OFF(hf), .meta = "DIR",           \
        .help = "instead of --model: HF config.json + safetensors (+ tokenizer)", .group = 1       \
    }

// The options of a command that loads a model and computes with it (eval, generate): --threads
// (OpenMP threads, into an int64_t field `threads`; left 0: the environment) and --quiet (into a
// bool field `quiet`). OFF is the command's offsetof macro, as for SLM_MODEL_DIR_OPTS.
#define SLM_MODEL_RUN_OPTS(OFF)                                                                    \
    {.name = "--threads",                                                                          \
     .type = SLM_OPT_INT64,                                                                        \
     .off = OFF(threads),                                                                          \
     .meta = "N",                                                                                  \
     .help = "OpenMP threads",                                                                     \
     .ilo = 1,                                                                                     \
     .ihi = 4096,                                                                                  \
     .def = "environment"},                                                                        \
        {.name = "--compute-dtype",                                                                \
         .type = SLM_OPT_CUSTOM,                                                                   \
         .off = OFF(compute_dtype),                                                                \
         .meta = "D",                                                                              \
         .help =                                                                                   \
             "fp32 or bf16 (matmul inputs rounded to bf16, fp32 accumulation; train's option)",    \
         .parse = slm_opt_parse_compute_dtype,                                                     \
         .def = "fp32"},                                                                           \
    {                                                                                              \
        .name = "--quiet", .type = SLM_OPT_FLAG, .off = OFF(quiet),                                \
        .help = "no progress line while a checkpoint loads (stderr)"                               \
    }

#endif
