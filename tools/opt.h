// Option tables of the shardlm CLI: each subcommand declares its options once (name, type,
// range, default, help line) in an slm_opt array (base/opt.h; train's comes from the library,
// train/options.h); slm_opt_parse() parses argv against it (range checks and usage errors
// included) and slm_opt_help() prints --help from it.
//
// Values land in a caller-owned "args" struct at each option's offset (offsetof), so tables are
// static const data and can be inspected by tests (tests/tools/test_opt.c). Defaults are the
// args struct's contents before parsing; --help prints them from there unless an entry names its
// default in words (`def`). Usage errors print "CMD: message" on stderr and make slm_opt_parse
// return SLM_EXIT_USAGE (2).
#ifndef SLM_OPT_H
#define SLM_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"
#include "base/opt.h"

// Process exit codes of every subcommand.
#define SLM_EXIT_OK 0
#define SLM_EXIT_ERROR 1 // runtime error: I/O, bad data, numeric failure
#define SLM_EXIT_USAGE 2 // usage error: bad options
// train stopped by a preemption signal (SIGTERM / SIGUSR1) after committing a checkpoint: the
// run resumes with --resume auto (sysexits' EX_TEMPFAIL; docs/operations.md)
#define SLM_EXIT_PREEMPTED 75

// A subcommand's command line: message prefix, help text around the table, and parsing rules.
typedef struct slm_cli {
    const char *cmd;   // "train", "tokenizer encode": the prefix of every usage error
    const char *usage; // usage lines and description, printed first by --help
    const slm_opt *opts;
    const char *footer;         // printed after the options (may be NULL)
    void (*footer_fn)(FILE *f); // prints more after `footer` (may be NULL)
    int max_positional;         // bare arguments allowed (ckpt PATH); more is "unexpected argument"
    bool strict_values;         // no option value may start with "--" (prep: `--input --out D`)
    bool help_anywhere;         // -h / --help wins wherever it is (else: where an option may stand)
} slm_cli;

// What slm_opt_parse saw besides the values: how often each option was given (by table index;
// a table has at most SLM_OPT_MAX entries) and the positional arguments.
#define SLM_OPT_MAX 96
typedef struct slm_opt_seen {
    unsigned char count[SLM_OPT_MAX];
    const char *positional[4];
    int n_positional;
} slm_opt_seen;

// Parses argv[1..argc-1] (argv[0] is the subcommand's name) into `args` as laid out by
// cli->opts. -h / --help (where an option may stand, or anywhere with help_anywhere) prints
// slm_opt_help(stdout) and returns SLM_EXIT_OK. A usage error (unknown option, missing value, bad
// number, out of range, unexpected argument, two options of one group) prints "CMD: message" and
// returns SLM_EXIT_USAGE. Returns -1 when the command should go on. `seen` may be NULL.
int slm_opt_parse(const slm_cli *cli, int argc, char **argv, void *args, slm_opt_seen *seen);

// Prints --help: cli->usage, one entry per option (name, value placeholder, help, range and
// default, word-wrapped), cli->footer. `defaults` is an args struct holding the defaults (the
// values --help prints), or NULL to print only `def` strings.
void slm_opt_help(FILE *f, const slm_cli *cli, const void *defaults);

// Writes `text` word-wrapped to `width` columns and a newline: the first line continues after
// `col` columns already written, continuation lines are indented by `indent`.
void slm_opt_wrap(FILE *f, const char *text, int col, int indent, int width);

// The option named `name` in cli->opts, or NULL.
const slm_opt *slm_opt_find(const slm_cli *cli, const char *name);

// Times option `name` was given (0 if never, or if `name` is not in the table).
int slm_opt_given(const slm_cli *cli, const slm_opt_seen *seen, const char *name);

// A CUSTOM option's parser for a metrics address (--metrics-addr of train and launch): checks
// `v` with slm_metrics_parse_addr (HOST:PORT, :PORT, [IPV6]:PORT) and stores the string as given
// into *(const char **)dst. SLM_E_ARG naming `opt` and the address on a bad one.
slm_status slm_opt_parse_metrics_addr(const char *opt, const char *v, void *dst);

// A CUSTOM option's parser for a compute dtype (--compute-dtype of eval and generate): "fp32" or
// "bf16" into *(slm_dtype *)dst. SLM_E_ARG naming `opt` otherwise.
slm_status slm_opt_parse_compute_dtype(const char *opt, const char *v, void *dst);

// The process exit code of a status: 0 for SLM_OK, 2 for SLM_E_ARG (usage), 1 otherwise.
int slm_exit_code(slm_status st);

#endif
