// Subcommand entry points of the shardlm CLI. Each parses its arguments with its option table
// (opt.h), calls one module entry point, prints the error message on failure and returns the
// process exit code (slm_exit_code): 0 success, 1 runtime error (I/O, bad data, numeric
// failure), 2 usage error (bad options). The library never exits or prints to stdout
// (scripts/check_style.sh); main() returns what the subcommand returned.
#ifndef SLM_CMD_H
#define SLM_CMD_H

#include "opt.h"

int slm_cmd_tokenizer(int argc, char **argv);  // shardlm tokenizer train|encode|decode|info
int slm_cmd_prep(int argc, char **argv);       // shardlm prep
int slm_cmd_train(int argc, char **argv);      // shardlm train
int slm_cmd_eval(int argc, char **argv);       // shardlm eval
int slm_cmd_generate(int argc, char **argv);   // shardlm generate
int slm_cmd_bench_peak(int argc, char **argv); // shardlm bench-peak
int slm_cmd_ckpt(int argc, char **argv);       // shardlm ckpt inspect|verify|export

// The option table of `shardlm train` (tests check it against src/train/agree.c).
const slm_cli *slm_train_cli(void);

#endif
