// report: reads what a training run leaves in its run directory (metrics.jsonl, config.json,
// checkpoints/, the launcher's attempts.json) and renders it, as one self-contained HTML file
// with inline SVG charts (no scripts, no network) or as a short text summary for terminals
// (`shardlm report`). metrics.jsonl's schema is in docs/formats.md ("metrics.jsonl"); files of
// every schema version are read (schema 1: start / step / end events only).
//
// Invariants: the run directory is only read; the HTML is written atomically to the path the
// caller names. Malformed metrics.jsonl lines (a crash can cut the last one) are skipped and
// counted, never fatal.
#ifndef SLM_REPORT_H
#define SLM_REPORT_H

#include "base/base.h"

// One "step" event (NaN for a field the line does not carry, e.g. schema 1's data_ms).
typedef struct slm_run_step {
    int64_t step, tokens;
    double loss, lr, grad_norm, tokens_per_s, mfu, ms_per_step, val_loss, elapsed_s;
    double data_ms, comm_ms, ckpt_ms, time; // schema 2
} slm_run_step;

// One "ranks" event: per-rank figures at a step (arrays of n_ranks; NaN where null).
typedef struct slm_run_ranks {
    int64_t step;
    int n_ranks;
    double *rss_bytes, *peak_rss_bytes, *cpu_util, *step_ms; // owned
} slm_run_ranks;

// Any other event (start, end, eval, checkpoint, restart, straggler, nonfinite, error, ...):
// its name, step (-1 if none), time (NaN if none) and the whole line as compact JSON.
typedef struct slm_run_event {
    char name[32];
    int64_t step;
    double time;
    char *json; // owned, NUL-terminated
} slm_run_event;

// A parsed metrics.jsonl. Steps are in step order, one per step: a step logged twice (the
// replay after a restart from an earlier checkpoint) keeps its last record.
typedef struct slm_run_log {
    slm_run_step *steps;
    size_t n_steps;
    slm_run_ranks *ranks;
    size_t n_ranks;
    slm_run_event *events; // in file order
    size_t n_events;
    int64_t n_lines;   // non-empty lines
    int64_t n_bad;     // lines skipped: not a JSON object, or no "event" string
    int64_t first_bad; // 1-based line number of the first skipped line (0: none)
    int schema;        // highest "schema" of a start event (1 when none names one)
} slm_run_log;

// Parses the text of a metrics.jsonl (`len` bytes, need not be NUL-terminated); `path` names it
// in messages. Unknown events and fields are kept (events) or ignored (fields); wrong-typed
// fields read as absent (NaN). Errors: SLM_E_FORMAT when no line at all is a JSON object with an
// "event" string (naming the path and the first bad line), unless the text is empty (an empty
// log is a run that has not started a step). On error *out is zeroed.
slm_status slm_run_log_parse(const char *text, size_t len, const char *path, slm_run_log *out);
// Reads and parses PATH. Errors: SLM_E_IO naming PATH, those of slm_run_log_parse.
slm_status slm_run_log_read(const char *path, slm_run_log *out);
void slm_run_log_free(slm_run_log *l);
// The first event named `name` at or after index `from` (NULL if none).
const slm_run_event *slm_run_log_find(const slm_run_log *l, const char *name, size_t from);

// Writes the HTML report of RUN_DIR to OUT_PATH (atomic replace). Errors: SLM_E_IO when RUN_DIR
// has no metrics.jsonl (naming it) or OUT_PATH cannot be written; SLM_E_FORMAT from the parser.
slm_status slm_report_html(const char *run_dir, const char *out_path);
// Appends the text summary of RUN_DIR (a few lines, for a terminal) to *out. Errors: as above.
slm_status slm_report_text(const char *run_dir, slm_buf *out);

#endif
