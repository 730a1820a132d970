// Option descriptors: one table entry per option (name, where its value lives, type, range,
// default, help), so that one declaration drives a command line's parser and --help (tools/opt.h)
// as well as a library's defaults, validation and comparison of settings (train/options.h).
//
// An entry locates its value by `off`, a byte offset into a caller-owned "args" struct
// (offsetof), so tables are static const data a test can inspect. This header has the entry
// type and the per-value operations: parse one value into its field, check a field's value
// against the range, write a value's canonical text. It parses no argv and prints nothing.
#ifndef SLM_BASE_OPT_H
#define SLM_BASE_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef enum slm_opt_type {
    SLM_OPT_END = 0, // terminates a table
    SLM_OPT_SECTION, // not an option: a heading line in --help (`help`)
    SLM_OPT_FLAG,    // no value; sets a bool to true (or calls `parse` with v = NULL)
    SLM_OPT_INT,     // integer in [ilo, ihi], stored as int
    SLM_OPT_INT64,   // integer in [ilo, ihi], stored as int64_t (or uint64_t when ilo >= 0)
    SLM_OPT_DOUBLE,  // finite real in the range [dlo, dhi] (see SLM_OPTF_*), stored as double
    SLM_OPT_FLOAT,   // as SLM_OPT_DOUBLE, also finite as a float; stored as float
    SLM_OPT_STRING,  // any text, stored as const char * (pointing into argv)
    SLM_OPT_LIST,    // one or more values: the next argument and the bare arguments after it
                     // (shell globs), appended to an slm_opt_list; a value never starts with --
    SLM_OPT_ENUM,    // one of `choices` (NULL-terminated), stored as its int index (or a bool:
                     // SLM_OPTF_BOOL)
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
// A stored 0 means "not given" (off / automatic) and passes slm_opt_check; a command line
// cannot give it unless it is in the range.
#define SLM_OPTF_ZERO_OFF 32u
#define SLM_OPTF_NEG_OFF 64u   // as ZERO_OFF for any stored value < 0
#define SLM_OPTF_BOOL 128u     // ENUM of two choices stored as a bool (the second one is true)
#define SLM_OPTF_REQUIRED 256u // no default: the caller gives it (its zeroed field fails the check)

// One option. `off` is the value's offset in the args struct, `size` the field's bytes.
typedef struct slm_opt {
    const char *name; // "--batch"
    slm_opt_type type;
    size_t off;
    size_t size;      // sizeof the field (0: unchecked); tables may fill it, tests compare it
    const char *meta; // value placeholder in --help ("B"); NULL for flags
    const char *help; // one sentence or more; --help word-wraps it
    int64_t ilo, ihi; // INT / INT64 range (inclusive)
    double dlo, dhi;  // DOUBLE / FLOAT range (see SLM_OPTF_LO_OPEN / HI_OPEN)
    unsigned flags;
    const char *def;   // default in words for --help ("lr/10", "environment"), NULL: from args
    const char *range; // DOUBLE / FLOAT: the range in words when the generated one is not
                       // enough (e.g. "> 0 seconds and finite"); NULL: generated
    const char *init;  // the default as option text, stored by slm_opt_defaults (without the
                       // range check: "-1" for an SLM_OPTF_NEG_OFF field); NULL: left as is
    const char *const *choices;                                     // ENUM
    slm_status (*parse)(const char *opt, const char *v, void *dst); // CUSTOM, FLAG (v NULL)
    // CUSTOM / FLAG with parse: the canonical text of the value at dst (slm_opt_value_text)
    void (*show)(const void *dst, char *buf, size_t cap);
    int group; // in [1, 8): options of one group exclude each other, and each is given once
} slm_opt;

// Values of an SLM_OPT_LIST option. The array is allocated by the parser (argc entries) and
// freed by slm_opt_list_free.
typedef struct slm_opt_list {
    const char **v;
    int n;
} slm_opt_list;

void slm_opt_list_free(slm_opt_list *l);

// Parses the text `v` of option o and stores it in args at o->off (FLAG: sets true or calls
// o->parse(name, NULL, dst)). The range is checked (as given on a command line: the OFF flags
// do not apply). Errors: SLM_E_ARG naming the option, the value and the range or choices;
// args unchanged then. LIST is not handled here (the argv parser appends).
slm_status slm_opt_set(const slm_opt *o, const char *v, void *args);

// Checks the value stored in args at o->off against o's range (INT / INT64 / DOUBLE / FLOAT;
// the SLM_OPTF_ZERO_OFF / NEG_OFF values pass). Errors: SLM_E_ARG naming the option, the value
// and the range, as slm_opt_set words them. Other types: SLM_OK.
slm_status slm_opt_check(const slm_opt *o, const void *args);

// Stores every entry's `init` into args (the table's defaults; the rest of args is left as is).
// An init the entry cannot parse is a programmer error (slm_fatal).
void slm_opt_defaults(const slm_opt *table, void *args);

// The canonical text of the value stored at o->off (written to buf, NUL-terminated): %d / %lld
// for integers, %.9g for FLOAT, %.17g for DOUBLE, "on" / "off" for FLAG, the string or
// "(unset)", the choice's name, o->show for CUSTOM and FLAG with parse. Equal texts mean equal
// values (what ranks compare).
void slm_opt_value_text(const slm_opt *o, const void *args, char *buf, size_t cap);

// The range of an INT / INT64 / DOUBLE / FLOAT option in words ("in [0, 1)", "> 0 and finite",
// ">= 1"), written to buf (NUL-terminated, truncated to cap). Empty for other types.
void slm_opt_range_text(const slm_opt *o, char *buf, size_t cap);

// Parses a byte count as SLM_OPT_SIZE does. SLM_E_ARG naming `opt` on a bad value.
slm_status slm_opt_parse_size(const char *opt, const char *s, size_t *out);

#endif
