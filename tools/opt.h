// Option tables of the shardlm CLI: each subcommand declares its options once (name, type,
// range, default, help line) in a static slm_opt array; slm_opt_parse() parses argv against it
// (range checks and usage errors included) and slm_opt_help() prints --help from it.
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

// Process exit codes of every subcommand.
#define SLM_EXIT_OK 0
#define SLM_EXIT_ERROR 1 // runtime error: I/O, bad data, numeric failure
#define SLM_EXIT_USAGE 2 // usage error: bad options
// train stopped by a preemption signal (SIGTERM / SIGUSR1) after committing a checkpoint: the
// run resumes with --resume auto (sysexits' EX_TEMPFAIL; docs/operations.md)
#define SLM_EXIT_PREEMPTED 75

typedef enum slm_opt_type {
    SLM_OPT_END = 0, // terminates a table
    SLM_OPT_SECTION, // not an option: a heading line in --help (`help`)
    SLM_OPT_FLAG,    // no value; sets a bool to true
    SLM_OPT_INT,     // integer in [ilo, ihi], stored as int
    SLM_OPT_INT64,   // integer in [ilo, ihi], stored as int64_t
    SLM_OPT_DOUBLE,  // finite real in the range [dlo, dhi] (see SLM_OPTF_*), stored as double
    SLM_OPT_FLOAT,   // as SLM_OPT_DOUBLE, also finite as a float; stored as float
    SLM_OPT_STRING,  // any text, stored as const char * (pointing into argv)
    SLM_OPT_LIST,    // one or more values: the next argument and the bare arguments after it
                     // (shell globs), appended to an slm_opt_list; a value never starts with --
    SLM_OPT_ENUM,    // one of `choices` (NULL-terminated), stored as its int index
    SLM_OPT_SIZE,    // a byte count: 5GB, 500MB, 10KB (decimal), 2GiB, 3MiB or a whole number of
                     // bytes >= 1 (at most 1e18); stored as size_t
    SLM_OPT_CUSTOM,  // parsed by `parse` (its slm_status message is the usage error)
} slm_opt_type;

// Flags of an option (slm_opt.flags).
#define SLM_OPTF_LO_OPEN 1u  // DOUBLE / FLOAT: value > dlo (default >= dlo)
#define SLM_OPTF_HI_OPEN 2u  // DOUBLE / FLOAT: value < dhi (default <= dhi; dhi may be INFINITY)
#define SLM_OPTF_F32 4u      // DOUBLE: the value must also be finite as a float
#define SLM_OPTF_PER_RANK 8u // train: ranks may differ in it (not compared by slm_train_agree)
#define SLM_OPTF_NODEF 16u   // --help shows no default (a required option, or no useful one)

// One option. `off` is the value's offset in the args struct given to slm_opt_parse.
typedef struct slm_opt {
    const char *name; // "--batch"
    slm_opt_type type;
    size_t off;
    const char *meta; // value placeholder in --help ("B"); NULL for flags
    const char *help; // one sentence or more; --help word-wraps it
    int64_t ilo, ihi; // INT / INT64 range (inclusive)
    double dlo, dhi;  // DOUBLE / FLOAT range (see SLM_OPTF_LO_OPEN / HI_OPEN)
    unsigned flags;
    const char *def;   // default in words for --help ("lr/10", "environment"), NULL: from args
    const char *range; // DOUBLE / FLOAT: the range in words when the generated one is not
                       // enough (e.g. "> 0 seconds and finite"); NULL: generated
    const char *const *choices;                                     // ENUM
    slm_status (*parse)(const char *opt, const char *v, void *dst); // CUSTOM
    int group; // in [1, 8): options of one group exclude each other, and each is given once
} slm_opt;

// Values of an SLM_OPT_LIST option. The array is allocated by slm_opt_parse (argc entries)
// and freed by slm_opt_list_free.
typedef struct slm_opt_list {
    const char **v;
    int n;
} slm_opt_list;

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

// The range of an INT / INT64 / DOUBLE / FLOAT option in words ("in [0, 1)", "> 0 and finite",
// ">= 1"), written to buf (NUL-terminated, truncated to cap). Empty for other types.
void slm_opt_range_text(const slm_opt *o, char *buf, size_t cap);

// Parses a byte count as SLM_OPT_SIZE does. SLM_E_ARG naming `opt` on a bad value.
slm_status slm_opt_parse_size(const char *opt, const char *s, size_t *out);

// A CUSTOM option's parser for a metrics address (--metrics-addr of train and launch): checks
// `v` with slm_metrics_parse_addr (HOST:PORT, :PORT, [IPV6]:PORT) and stores the string as given
// into *(const char **)dst. SLM_E_ARG naming `opt` and the address on a bad one.
slm_status slm_opt_parse_metrics_addr(const char *opt, const char *v, void *dst);

// The process exit code of a status: 0 for SLM_OK, 2 for SLM_E_ARG (usage), 1 otherwise.
int slm_exit_code(slm_status st);

void slm_opt_list_free(slm_opt_list *l);

#endif
