// What the HTML and text renderers share: one run directory read once (not public API).
#ifndef SLM_REPORT_INTERNAL_H
#define SLM_REPORT_INTERNAL_H

#include <cjson/cJSON.h>

#include "report/report.h"

typedef struct report_ckpt {
    char name[64]; // step_NNNNNNNN
    int64_t step;
    double bytes;    // sum of its files
    double mtime;    // newest file's modification time, Unix seconds
    double stall_ms; // from its "checkpoint" event (NaN if none)
    bool latest;     // named by checkpoints/latest
} report_ckpt;

typedef struct report_run {
    char *dir;
    slm_run_log log;
    cJSON *config;       // RUN_DIR/config.json (NULL if absent or unreadable)
    cJSON *start;        // the newest "start" event (NULL if none); parsed from its json
    cJSON *attempts;     // the array of attempts of RUN_DIR/attempts.json (NULL if absent)
    char *attempts_note; // why attempts.json could not be read (NULL: fine or absent)
    report_ckpt *ckpts;  // in step order
    size_t n_ckpts;
    // Derived figures
    int64_t steps_planned, steps_done;
    double final_loss, final_val, tokens, wall_s, mean_tps, mean_mfu;
    int64_t final_val_step; // the step final_val was taken after (-1: none)
    bool final_val_end;     // final_val is the end event's (the validation at the end)
    int val_batches;        // micro-batches per rank of a validation (an eval event's "batches":
                            // 0 = the whole split; -1 unknown)
    // MFU: the peak per process the figures are against, GFLOP/s: the start event's
    // peak_gflops, or the fastest step's rate when higher (the trainer raises its peak so since
    // issue 20; older logs hold steps above 100 %); NaN when the start event lacks the peak,
    // flops_per_token or world. mfu_per_tps: a step's MFU per token/s against it (NaN alike).
    // max_step_mfu: the largest step "mfu" as logged (the fallback's scale when above 1).
    double peak_eff, mfu_per_tps, max_step_mfu;
    const char *status; // "complete", "interrupted", "failed", "stopped early",
                        // "running, or ended without an end event"
    int world;
} report_run;

// Reads RUN_DIR (metrics.jsonl is required). Errors: SLM_E_IO naming the missing file,
// those of slm_run_log_read.
slm_status report_run_open(const char *run_dir, report_run *r);
void report_run_close(report_run *r);
// The start event and headline figures from r->log alone (report_run_open calls it; the fuzz
// target fills r->log itself).
void report_run_derive(report_run *r);

// One session of a run: the first `shardlm train`, or one resume, from its "start" event.
typedef struct report_session {
    int64_t from, to;              // its steps are (from, to]: from its start_step up to where
                                   // the next session resumed (INT64_MAX for the last)
    int64_t first_step, last_step; // the steps metrics.jsonl keeps of it (-1: none)
    int world;                     // ranks
    long attempt; // SHARDLM_ATTEMPT its ranks saw: 0 not under shardlm launch (by hand), 1 a
                  // launch's first attempt, >= 2 a launcher restart; -1 not recorded
    double time;  // Unix seconds of its start event (NaN if none)
    double tokens_per_s, mfu; // over its steps after its first (NaN: none), MFU as logged
} report_session;
// The sessions in file order into *out (owned, free()); returns their count, 0 (and NULL) when
// a start event lacks schema 2's start_step / world (no split is possible).
size_t report_sessions(const report_run *r, report_session **out);
// "start" (the first), "launcher restart", "new launch", "resumed by hand" or "resumed".
const char *report_session_origin(const report_session *s, bool first);
// Of sessions after the first: launcher restarts (attempt >= 2) and continuations (the rest).
void report_session_counts(const report_session *s, size_t n, int *restarts, int *continuations);
// The page's "Sessions" section (nothing when the run has fewer than two).
void report_sessions_html(const report_run *r, slm_buf *b);
// The page / the summary of an opened run, appended to *out.
void report_render_html(const report_run *r, slm_buf *out);
void report_render_text(const report_run *r, slm_buf *out);

// Formats: "1.23M" style (k, M, G, T), "12m 34s" style durations, "585 MiB" style bytes.
void report_fmt_si(double v, char out[32]);
void report_fmt_duration(double s, char out[32]);
void report_fmt_utc(double unix_s, char out[32]);
// A JSON number for a table cell, for reading (metrics.jsonl keeps every digit): an integer as
// such; other values of magnitude >= 1e6 rounded to an integer; the rest with at most 6
// significant digits, so float32 noise disappears (--lr 3e-4 written as 0.000300000014 reads
// "0.0003", lr / 10 in float32, 3.0000001e-05, reads "3e-05").
void report_fmt_num(double v, char out[40]);
// What one loss figure is over, for labels: the training loss of a step ("over one step's
// global batch: 4 x 128 tokens x 2 accumulated x 2 ranks = 2048 positions") or a validation
// ("20 batches of 4 x 128 tokens per rank x 2 ranks = 20480 positions", "the whole validation
// split"); shapes from the start event. Empty when the start event lacks them.
void report_loss_scope(const report_run *r, bool validation, char *out, size_t cap);

#endif
