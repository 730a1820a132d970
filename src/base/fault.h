// base/fault: the SHARDLM_FAULT / SHARDLM_ATTEMPT parser (fault injection for tests) and the
// queries of a parsed plan. Only the parsing and the attempt rule live here, below every module
// that reads the plan (train/ fires the trainer's faults: slm_fault_before_step and
// slm_fault_flip_byte in train.h; health/ fails its checks; tools/ checks the plan at start-up).
// Nothing here acts on a fault. docs/operations.md "Fault injection".
#ifndef SLM_BASE_FAULT_H
#define SLM_BASE_FAULT_H

#include "base/base.h"

// Off unless the environment variable SHARDLM_FAULT is set: a ','-separated list of faults,
// each KIND[:key=value...][:always]:
//   kill:rank=R:step=S         SIGKILL to self before step S (1-based step about to run)
//   stop:rank=R:step=S         SIGSTOP to self before step S (a hung rank)
//   exit:rank=R:step=S         exit status 1 before step S
//   slow:rank=R:ms=M[:step=S]  sleep M ms before every step (only step S when given)
//   fail-health:rank=R[:check=NAME]  `shardlm healthcheck` fails on rank R (only check NAME)
//   corrupt-ckpt:step=S[:rank=R]     after step S's checkpoint is committed, rank 0 flips a
//                              byte in the middle of its rank_R file (default R 0)
//   nan-grad:step=S[:rank=R]   rank R's (default 0) loss and gradients of step S are NaN
// `rank` is the world rank. A fault fires only on the first attempt (SHARDLM_ATTEMPT unset or
// 1; the launcher exports SHARDLM_ATTEMPT=N, 1-based) unless `:always` is appended.

typedef enum slm_fault_kind {
    SLM_FAULT_KILL,
    SLM_FAULT_STOP,
    SLM_FAULT_EXIT,
    SLM_FAULT_FAIL_HEALTH,
    SLM_FAULT_CORRUPT_CKPT,
    SLM_FAULT_SLOW,
    SLM_FAULT_NAN_GRAD,
} slm_fault_kind;

typedef struct slm_fault {
    slm_fault_kind kind;
    int rank;       // world rank; -1 when not given
    int64_t step;   // >= 1; 0 when not given
    int64_t ms;     // slow: milliseconds per step
    char check[32]; // fail-health: the check's name ("" = every check)
    bool always;    // fires on every attempt, not only the first
    char item[64];  // the item as written (truncated), for messages
} slm_fault;

#define SLM_FAULT_MAX 16
// A parsed SHARDLM_FAULT and the attempt number it applies to.
typedef struct slm_fault_plan {
    int n;
    slm_fault f[SLM_FAULT_MAX];
    int attempt; // SHARDLM_ATTEMPT (1 when unset)
} slm_fault_plan;

// "kill", "stop", ... as written in SHARDLM_FAULT.
const char *slm_fault_kind_name(slm_fault_kind k);
// Parses a SHARDLM_FAULT value (NULL or "": no fault) into *plan (attempt 1). Errors:
// SLM_E_ARG naming SHARDLM_FAULT, the item (1-based) and the field: unknown kind or key, a
// key the kind does not take or given twice, a missing required key, a value out of range,
// an empty item, more than SLM_FAULT_MAX faults. On error *plan holds no fault.
slm_status slm_fault_parse(const char *spec, slm_fault_plan *plan);
// Parses a SHARDLM_ATTEMPT value (NULL or "": 1). Errors: SLM_E_ARG naming SHARDLM_ATTEMPT
// unless it is an integer >= 1.
slm_status slm_fault_parse_attempt(const char *text, int *attempt);
// Both from the environment (SHARDLM_FAULT, SHARDLM_ATTEMPT). Errors: as the two parsers (a
// usage error: exit 2); *plan then holds no fault.
slm_status slm_fault_plan_from_env(slm_fault_plan *plan);
// Once the world size is known: SLM_E_ARG (a usage error) naming SHARDLM_FAULT, the item and
// the world size if an armed fault names a rank >= world (it would never fire).
slm_status slm_fault_check_world(const slm_fault_plan *p, int world);
// True if f fires on the plan's attempt (the first, or f->always).
bool slm_fault_armed(const slm_fault_plan *p, const slm_fault *f);
// The first armed fault of `kind` at `step` (any step when step < 0), or NULL. p may be NULL.
const slm_fault *slm_fault_find(const slm_fault_plan *p, slm_fault_kind kind, int64_t step);
// True if an armed fail-health fault names `rank` and either names no check or names `check`
// (any fail-health fault of the rank when check is NULL). p may be NULL.
bool slm_fault_health_fails(const slm_fault_plan *p, int rank, const char *check);

#endif
