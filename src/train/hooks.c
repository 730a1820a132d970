// The library's step hooks: the stop flag, metrics.jsonl and checkpoint scheduling, attached to
// the training loop by whoever runs it (tools/cmd_train.c). Contract in train.h.
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "train/train.h"
#include "train/train_internal.h"

// ---------------------------------------------------------------------------------------------
// Stop flag

static bool stop_flag(void *ctx) {
    (void)ctx;
    return slm_stop_requested();
}

slm_status slm_train_add_stop_hook(slm_train_opts *o) {
    slm_train_hook h = {.name = "stop flag", .want_stop = stop_flag};
    return slm_train_attach(o, &h);
}

// ---------------------------------------------------------------------------------------------
// metrics.jsonl (rank 0 with out_dir), the per-rank log files and the per-step exchange of
// per-rank figures and queued warnings (every rank)

#define SLM_RANKS_EVERY 10 // a "ranks" event every this many steps (and the first and last)
#define SLM_HOST_CAP 64    // bytes of a host name in the exchange

// The per-rank record of the exchange (doubles): figures, queued bytes, the figures' step.
enum { R_RSS, R_PEAK, R_CPU, R_STEP, R_DATA, R_COMM, R_FWD, R_STEPNO, SLM_REC_N };

typedef struct jsonl_state {
    FILE *f;                      // rank 0 with out_dir, else NULL
    const slm_train_std_hooks *h; // for the checkpoint schedule's counters
    int rank, W;
    char *hosts;                  // [W][SLM_HOST_CAP], gathered at the start
    double *rec;                  // [W][SLM_REC_N] gathered on "ranks" steps
    double rec_send[SLM_REC_N];   // this rank's share of the figures exchange
    slm_dist_req rec_req;         // the figures / queue sizes started at the last boundary
    char *lines_send, *lines_all; // the lines exchange: [slot], [W][slot]
    size_t slot;
    slm_dist_req lines_req;
    int64_t n_ckpt;          // committed saves seen
    int64_t last_ckpt;       // step of the newest checkpoint event written
    int64_t probe_step;      // SHARDLM_LOG_PROBE=S: every rank warns at step S (0: off)
    double data_ms, comm_ms; // this step's data wait and exposed communication (rank's own)
    double stall_s;          // the schedule's total stall seen
    double cpu_s, wall_s;    // at the last exchange (CPU utilisation)
    int64_t n_exch;          // exchanges done, and their time (seconds, on this rank)
    double exch_s;
} jsonl_state;

static void jsonl_num(slm_buf *b, const char *key, double x) {
    if (isfinite(x))
        slm_buf_appendf(b, ",\"%s\":%.9g", key, x);
    else
        slm_buf_appendf(b, ",\"%s\":null", key);
}

// ,"key":"s" with JSON string escapes (RFC 8259: quote, backslash and control characters).
static void jsonl_str(slm_buf *b, const char *key, const char *s) {
    slm_buf_appendf(b, ",\"%s\":\"", key);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            slm_buf_appendf(b, "\\%c", *p);
        else if (*p < 0x20)
            slm_buf_appendf(b, "\\u%04x", *p);
        else
            slm_buf_append(b, p, 1);
    }
    slm_buf_append(b, "\"", 1);
}

static void put_line(FILE *f, slm_buf *b) {
    fputs(b->data, f);
    fflush(f);
    slm_buf_free(b);
}

// The launcher's attempt number (SHARDLM_ATTEMPT, 1-based), 0 when not under the launcher.
static long attempt_number(void) {
    const char *a = getenv("SHARDLM_ATTEMPT");
    char *end = NULL;
    long v = a ? strtol(a, &end, 10) : 0;
    return a && end && !*end && v > 0 ? v : 0;
}

static void event_head(slm_buf *b, const char *event, int64_t step) {
    slm_buf_appendf(b, "{\"event\":\"%s\",\"step\":%lld", event, (long long)step);
    slm_buf_appendf(b, ",\"time\":%.3f", slm_unix_time_s());
}

slm_status slm_train_jsonl_event(const slm_train_std_hooks *h, const char *event, int64_t step,
                                 const char *fields) {
    jsonl_state *js = h ? h->metrics : NULL;
    if (!js || !js->f) return SLM_OK;
    slm_buf b = {0};
    event_head(&b, event, step);
    if (fields && *fields) slm_buf_appendf(&b, ",%s", fields);
    slm_buf_appendf(&b, "}\n");
    put_line(js->f, &b);
    return SLM_OK;
}

static slm_status open_rank_log(const slm_train_opts *o, int rank) {
    char name[64];
    snprintf(name, sizeof name, "logs/rank_%05d.log", rank);
    char *p = slm_path_join(o->out_dir, name);
    slm_status st = slm_log_open_file(p);
    free(p);
    return st;
}

static slm_status metrics_start(void *ctx, slm_trainer *tr) {
    slm_train_std_hooks *h = ctx;
    const slm_train_opts *o = tr->o;
    jsonl_state *js = slm_xcalloc(1, sizeof *js);
    h->metrics = js;
    js->h = h;
    js->rank = tr->rank, js->W = tr->W;
    js->last_ckpt = tr->step; // a resumed run's earlier checkpoints were reported then
    const char *probe = getenv("SHARDLM_LOG_PROBE");
    js->probe_step = probe ? strtoll(probe, NULL, 10) : 0;
    js->hosts = slm_xcalloc((size_t)tr->W, SLM_HOST_CAP);
    js->rec = slm_xcalloc((size_t)tr->W * SLM_REC_N, sizeof(double));
    char mine[SLM_HOST_CAP] = {0};
    snprintf(mine, sizeof mine, "%s", slm_log_host());
    slm_dist_allgather(mine, js->hosts, SLM_HOST_CAP, SLM_DTYPE_U8, "host names");
    slm_proc_usage_info u;
    slm_proc_usage(&u);
    js->cpu_s = u.cpu_s, js->wall_s = slm_time_s();
    slm_status st = SLM_OK;
    if (o->out_dir) {
        st = open_rank_log(o, tr->rank);
        if (!st)
            slm_log_file_only(SLM_LOG_INFO,
                              "training starts at step %lld of %lld (world %d, pid %d%s)",
                              (long long)tr->step, (long long)o->steps, tr->W, (int)getpid(),
                              attempt_number() ? ", launcher attempt" : "");
    }
    if (st || !o->out_dir || tr->rank != 0) return st;
    char *p = slm_path_join(o->out_dir, "metrics.jsonl");
    js->f = fopen(p, "a"); // the open phase emptied it for a fresh run
    st = js->f ? SLM_OK : slm_fail(SLM_E_IO, "%s: cannot open for writing", p);
    free(p);
    if (st) return st;
    slm_buf b = {0};
    slm_buf_appendf(&b,
                    "{\"event\":\"start\",\"model\":\"%s\",\"n_params\":%lld,\"batch\":%d,"
                    "\"seq\":%d,\"grad_accum\":%d,\"steps\":%lld,\"warmup\":%lld,\"lr\":%.9g,"
                    "\"min_lr\":%.9g,\"weight_decay\":%.9g,\"grad_clip\":%.9g,\"seed\":%llu,"
                    "\"threads\":%d,\"peak_gflops\":%.6g,\"flops_per_token\":%.9g",
                    o->model, (long long)slm_llama_n_params(&tr->cfg), tr->B, tr->T, tr->K,
                    (long long)o->steps, (long long)o->warmup, (double)o->adamw.lr_peak,
                    (double)tr->min_lr, (double)o->adamw.weight_decay, (double)o->grad_clip,
                    (unsigned long long)o->seed, slm_device_threads(tr->model.dev), tr->peak,
                    tr->fpt);
    // Added in schema 2 (docs/formats.md): the run's shape and where it runs.
    slm_buf_appendf(&b, ",\"schema\":2,\"world\":%d,\"start_step\":%lld,\"attempt\":%ld", tr->W,
                    (long long)tr->step, attempt_number());
    slm_buf_appendf(&b, ",\"time\":%.3f", slm_unix_time_s());
    jsonl_str(&b, "sharding", slm_sharding_name(tr->fsdp_opts.sharding));
    jsonl_str(&b, "data", o->synthetic ? "(synthetic)" : o->data_dir);
    slm_buf_appendf(&b, ",\"layers\":%d,\"hidden\":%d,\"vocab\":%d,\"hosts\":[",
                    tr->cfg.num_hidden_layers, tr->cfg.hidden_size, tr->cfg.vocab_size);
    for (int r = 0; r < tr->W; r++) {
        slm_buf tmp = {0};
        jsonl_str(&tmp, "h", js->hosts + (size_t)r * SLM_HOST_CAP);
        slm_buf_appendf(&b, "%s%s", r ? "," : "", tmp.data + 5); // drop ,"h":
        slm_buf_free(&tmp);
    }
    slm_buf_appendf(&b, "]}\n");
    put_line(js->f, &b);
    if (tr->resume_path) {
        slm_buf_appendf(&b, "\"attempt\":%ld", attempt_number());
        jsonl_str(&b, "from", tr->resume_path);
        slm_train_jsonl_event(h, "restart", tr->step, b.data);
        slm_buf_free(&b);
    } else if (attempt_number() > 1) { // a launcher restart with no checkpoint: from step 0
        slm_buf_appendf(&b, "\"attempt\":%ld,\"from\":null", attempt_number());
        slm_train_jsonl_event(h, "restart", tr->step, b.data);
        slm_buf_free(&b);
    }
    if (tr->batch_changed) { // --allow-batch-change accepted another global batch (trainer.c)
        const slm_batch_geom g[2] = {tr->batch_saved, {tr->B, tr->T, tr->K, tr->W}};
        const char *key[2] = {"from", "to"};
        for (int i = 0; i < 2; i++)
            slm_buf_appendf(&b,
                            "%s\"%s\":{\"batch\":%d,\"world\":%d,\"grad_accum\":%d,\"seq\":%d,"
                            "\"global_batch\":%lld}",
                            i ? "," : "", key[i], g[i].B, g[i].W, g[i].K, g[i].T,
                            (long long)slm_batch_global(g[i]));
        slm_train_jsonl_event(h, "batch_change", tr->step, b.data);
        slm_buf_free(&b);
    }
    return SLM_OK;
}

// This rank's figures for the exchange: the queue size always, the per-rank figures (and the
// step they belong to) only on "ranks" steps (the /proc read costs tens of microseconds).
static void my_figures(jsonl_state *js, const slm_step_metrics *s, bool figures, double *mine) {
    for (int k = 0; k < SLM_REC_N; k++)
        mine[k] = NAN;
    mine[R_FWD] = js->W > 1 ? (double)slm_log_forward_pending() : 0;
    mine[R_STEPNO] = figures ? (double)s->step : -1;
    if (!figures) return;
    double now = slm_time_s();
    slm_proc_usage_info u;
    slm_proc_usage(&u);
    mine[R_RSS] = u.rss_bytes;
    mine[R_PEAK] = u.peak_rss_bytes > u.rss_bytes ? u.peak_rss_bytes : u.rss_bytes;
    mine[R_CPU] =
        now > js->wall_s && u.cpu_s >= 0 ? (u.cpu_s - js->cpu_s) / (now - js->wall_s) : -1;
    js->cpu_s = u.cpu_s, js->wall_s = now;
    mine[R_STEP] = s->ms_per_step;
    mine[R_DATA] = js->data_ms;
    mine[R_COMM] = js->comm_ms;
}

static void write_ranks(jsonl_state *js, int64_t step);

// Completes the pending exchanges (every rank, at a step boundary or at the end): the lines
// started one boundary ago are printed by rank 0; the counts and figures started one boundary
// ago give rank 0 its "ranks" event and, when some rank has lines queued, start the exchange of
// the lines. Both complete at the next boundary: no rank waits for a slower one at this one.
static void exchange_complete(jsonl_state *js) {
    if (js->lines_req.active) {
        slm_dist_wait(&js->lines_req);
        for (int r = 1; js->rank == 0 && r < js->W; r++) {
            uint64_t len;
            memcpy(&len, js->lines_all + (size_t)r * js->slot, 8);
            if (len > 0 && len <= js->slot - 8)
                slm_log_forwarded(r, js->hosts + (size_t)r * SLM_HOST_CAP,
                                  js->lines_all + (size_t)r * js->slot + 8, (size_t)len);
        }
        free(js->lines_send), free(js->lines_all);
        js->lines_send = js->lines_all = NULL;
    }
    if (!js->rec_req.active) return;
    slm_dist_wait(&js->rec_req);
    if (js->f && js->rec[R_STEPNO] >= 0) write_ranks(js, (int64_t)js->rec[R_STEPNO]);
    size_t cap = 0;
    for (int r = 0; r < js->W; r++)
        if (js->rec[r * SLM_REC_N + R_FWD] > (double)cap)
            cap = (size_t)js->rec[r * SLM_REC_N + R_FWD];
    if (cap == 0) return;
    js->slot = cap + 8; // 8 bytes of length, then whole lines
    js->lines_send = slm_xcalloc(1, js->slot);
    js->lines_all = slm_xcalloc((size_t)js->W, js->slot);
    uint64_t n = js->rank ? slm_log_forward_take(js->lines_send + 8, cap) : 0;
    memcpy(js->lines_send, &n, 8);
    slm_dist_iallgather(slm_comm_world(), js->lines_send, js->lines_all, (int64_t)js->slot,
                        SLM_DTYPE_U8, "forwarded log lines", &js->lines_req);
}

// Every rank, at each step boundary: completes what the previous boundary started, then starts
// a non-blocking all-gather of this rank's queue size (8 bytes; with its figures on "ranks"
// steps). A world of one has nothing to forward: its figures are written at once.
static void exchange(jsonl_state *js, const slm_step_metrics *s, bool figures) {
    double t0 = slm_time_s();
    if (js->W == 1) {
        if (!figures) return;
        my_figures(js, s, true, js->rec);
        if (js->f) write_ranks(js, s->step);
    } else {
        exchange_complete(js);
        my_figures(js, s, figures, js->rec_send);
        slm_dist_iallgather(slm_comm_world(), js->rec_send, js->rec, SLM_REC_N, SLM_DTYPE_F64,
                            "per-rank figures", &js->rec_req);
    }
    js->n_exch++;
    js->exch_s += slm_time_s() - t0;
}

// At the end of a run every rank reaches together: completes the exchanges and forwards what is
// still queued (at most two more rounds, blocking: the run is over).
static void exchange_drain(jsonl_state *js) {
    for (int round = 0; round < 3 && js->W > 1; round++) {
        exchange_complete(js);
        if (!js->lines_req.active && round > 0) break;
        if (!js->lines_req.active) { // one more count round for lines queued since
            slm_step_metrics none = {0};
            my_figures(js, &none, false, js->rec_send);
            slm_dist_iallgather(slm_comm_world(), js->rec_send, js->rec, SLM_REC_N, SLM_DTYPE_F64,
                                "per-rank figures", &js->rec_req);
        }
    }
    exchange_complete(js);
}

// "ranks": one array per figure, indexed by rank.
static void write_ranks(jsonl_state *js, int64_t step) {
    static const char *const names[] = {"rss_bytes", "peak_rss_bytes", "cpu_util",
                                        "step_ms",   "data_ms",        "comm_ms"};
    slm_buf b = {0};
    event_head(&b, "ranks", step);
    for (int k = 0; k < R_FWD; k++) {
        slm_buf_appendf(&b, ",\"%s\":[", names[k]);
        for (int r = 0; r < js->W; r++) {
            double x = js->rec[r * SLM_REC_N + k];
            if (isfinite(x) && x >= 0)
                slm_buf_appendf(&b, "%s%.6g", r ? "," : "", x);
            else
                slm_buf_appendf(&b, "%snull", r ? "," : "");
        }
        slm_buf_appendf(&b, "]");
    }
    slm_buf_appendf(&b, "}\n");
    put_line(js->f, &b);
}

// Sum of the sizes of the plain files in DIR (a checkpoint's step directory), -1 if unreadable.
static double dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    double total = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *p = slm_path_join(dir, e->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) total += (double)sb.st_size;
        free(p);
    }
    closedir(d);
    return total;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// A "checkpoint" event for every committed step_N directory above the last one reported, in
// step order (the bytes of its files; the schedule's stall since the last look on the newest).
static void scan_checkpoints(jsonl_state *js, const slm_train_opts *o, double stall_s) {
    char *root = slm_path_join(o->out_dir, "checkpoints");
    DIR *d = opendir(root);
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long long step;
        int used = 0;
        if (sscanf(e->d_name, "step_%lld%n", &step, &used) != 1 || e->d_name[used]) continue;
        if (step <= js->last_ckpt) continue;
        if (n == cap) steps = slm_xrealloc(steps, (cap = cap ? 2 * cap : 8) * sizeof *steps);
        steps[n++] = step;
    }
    if (d) closedir(d);
    if (n) qsort(steps, n, sizeof *steps, cmp_i64); // qsort(NULL, 0, ...) is undefined
    for (size_t i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "step_%08lld", (long long)steps[i]);
        char *dir = slm_path_join(root, name);
        slm_buf b = {0};
        event_head(&b, "checkpoint", steps[i]);
        jsonl_str(&b, "dir", name);
        jsonl_num(&b, "bytes", dir_bytes(dir));
        jsonl_num(&b, "stall_ms", i + 1 == n ? stall_s * 1e3 : NAN);
        slm_buf_appendf(&b, "}\n");
        put_line(js->f, &b);
        free(dir);
        js->last_ckpt = steps[i];
    }
    free(steps);
    free(root);
}

// The schedule's stall since the last look (seconds); new commits are reported as events.
static double checkpoint_events(jsonl_state *js, const slm_train_opts *o) {
    const slm_ckpt_sched *cs = js->h->ckpt;
    if (!cs) return 0;
    int64_t n;
    double total, mx;
    slm_ckpt_sched_stats(cs, &n, &total, &mx);
    double stall = total - js->stall_s;
    js->stall_s = total;
    if (n != js->n_ckpt && js->f) scan_checkpoints(js, o, stall);
    js->n_ckpt = n;
    return stall;
}

static slm_status metrics_step(void *ctx, slm_trainer *tr, const slm_step_metrics *s) {
    slm_train_std_hooks *h = ctx;
    jsonl_state *js = h->metrics;
    if (js->probe_step == s->step) // SHARDLM_LOG_PROBE: check the log plumbing end to end
        slm_warn("log probe: rank %d on %s at step %lld", js->rank, slm_log_host(),
                 (long long)s->step);
    bool ranks = s->step == 1 || s->step % SLM_RANKS_EVERY == 0 || s->step == s->total_steps;
    slm_step_timing tm; // this rank's split of the step (trainer.c)
    slm_trainer_step_timing(tr, &tm);
    js->data_ms = tm.data_s * 1e3, js->comm_ms = tm.comm_s * 1e3;
    exchange(js, s, ranks);
    if (!js->f) return SLM_OK;
    double stall = checkpoint_events(js, tr->o);
    slm_buf b = {0};
    slm_buf_appendf(&b, "{\"event\":\"step\",\"step\":%lld", (long long)s->step);
    jsonl_num(&b, "loss", s->loss);
    jsonl_num(&b, "lr", s->lr);
    jsonl_num(&b, "grad_norm", s->grad_norm);
    jsonl_num(&b, "tokens_per_s", s->tokens_per_s);
    jsonl_num(&b, "mfu", s->mfu);
    jsonl_num(&b, "ms_per_step", s->ms_per_step);
    jsonl_num(&b, "val_loss", s->val_loss);
    slm_buf_appendf(&b, ",\"tokens\":%lld", (long long)s->tokens_seen);
    jsonl_num(&b, "elapsed_s", s->elapsed_s);
    if (s->skipped && s->no_target) // no target token in the global batch
        slm_buf_appendf(&b, ",\"skipped\":true,\"no_target\":true,\"empty_skips\":%lld",
                        (long long)s->empty_skips);
    else if (s->skipped) // --on-nonfinite skip
        slm_buf_appendf(&b, ",\"skipped\":true,\"nonfinite_skips\":%lld",
                        (long long)s->nonfinite_skips);
    if (s->loss_spike) jsonl_num(&b, "loss_spike_z", s->loss_z);
    // schema 2: the step time split (rank 0), wall clock
    jsonl_num(&b, "data_ms", js->data_ms);
    jsonl_num(&b, "comm_ms", js->comm_ms);
    jsonl_num(&b, "ckpt_ms", stall * 1e3);
    slm_buf_appendf(&b, ",\"time\":%.3f", slm_unix_time_s());
    slm_buf_appendf(&b, "}\n");
    put_line(js->f, &b);
    if (isfinite(s->val_loss)) {
        event_head(&b, "eval", s->step);
        jsonl_num(&b, "val_loss", s->val_loss);
        slm_buf_appendf(&b, ",\"batches\":%d}\n", tr->o->eval_batches);
        put_line(js->f, &b);
    }
    return SLM_OK;
}

static slm_status metrics_finish(void *ctx, slm_trainer *tr, slm_status st) {
    slm_train_std_hooks *h = ctx;
    jsonl_state *js = h->metrics;
    if (!js) return SLM_OK;
    // Every rank gets here together after a completed run, or a non-finite step all agreed on;
    // after other errors a peer may not, so nothing more is waited for (the buffers of a request
    // still in flight are left to the exiting process).
    bool together = st == SLM_OK || st == SLM_E_NUMERIC;
    if (together) exchange_drain(js);
    bool in_flight = js->rec_req.active || js->lines_req.active;
    if (js->n_exch > 0 && tr->o->out_dir)
        slm_log_file_only(SLM_LOG_INFO,
                          "per-step exchange of per-rank figures and warnings: %lld times, "
                          "%.1f us mean",
                          (long long)js->n_exch, 1e6 * js->exch_s / (double)js->n_exch);
    if (js->f) {
        scan_checkpoints(js, tr->o, NAN); // the final one (the checkpoint hook ran first)
        slm_buf b = {0};
        if (st == SLM_E_NUMERIC) {
            event_head(&b, "nonfinite", tr->step + 1);
            jsonl_str(&b, "message", slm_errmsg());
            slm_buf_appendf(&b, "}\n");
            put_line(js->f, &b);
        }
        if (!st) {
            const slm_train_result *r = slm_trainer_result(tr);
            slm_buf_appendf(&b, "{\"event\":\"end\",\"steps\":%lld", (long long)r->steps_done);
            jsonl_num(&b, "loss", r->final_loss);
            jsonl_num(&b, "val_loss", r->final_val_loss);
            jsonl_num(&b, "tokens_per_s", r->tokens_per_s);
            jsonl_num(&b, "mfu", r->mfu);
            slm_buf_appendf(&b, ",\"interrupted\":%s", r->interrupted ? "true" : "false");
            slm_buf_appendf(&b, ",\"nonfinite_skips\":%lld,\"empty_skips\":%lld",
                            (long long)r->nonfinite_skips, (long long)r->empty_skips);
            slm_buf_appendf(&b, ",\"time\":%.3f", slm_unix_time_s());
            slm_buf_appendf(&b, "}\n");
            put_line(js->f, &b);
        } else {
            event_head(&b, "error", tr->step);
            jsonl_str(&b, "status", slm_status_name(st));
            jsonl_str(&b, "message", slm_errmsg());
            slm_buf_appendf(&b, "}\n");
            put_line(js->f, &b);
        }
        fclose(js->f);
    }
    if (!in_flight) {
        free(js->hosts), free(js->rec), free(js->lines_send), free(js->lines_all);
        free(js);
    }
    h->metrics = NULL;
    return SLM_OK;
}

slm_status slm_train_add_metrics_hook(slm_train_opts *o, slm_train_std_hooks *h) {
    slm_train_hook k = {.name = "metrics.jsonl",
                        .ctx = h,
                        .on_start = metrics_start,
                        .on_step = metrics_step,
                        .on_finish = metrics_finish};
    return slm_train_attach(o, &k);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints (out_dir/checkpoints)

static slm_status ckpt_start(void *ctx, slm_trainer *tr) {
    slm_ckpt_sched **cs = ctx;
    const slm_train_opts *o = tr->o;
    *cs = NULL;
    if (!o->out_dir) return SLM_OK;
    // Every rank writes its shard file, except replicas (NO_SHARD / HYBRID_SHARD shard groups
    // > 0), whose shards equal shard group 0's.
    char *root = slm_path_join(o->out_dir, "checkpoints");
    // The run's identity (model config, tokenizer) for --ckpt-uri's check of the remote prefix.
    slm_ckpt_meta meta;
    slm_ckpt_shard *sh = slm_xcalloc((size_t)tr->model.n_units, sizeof *sh);
    slm_trainer_ckpt_state(tr, tr->step, &meta, sh);
    free(sh);
    slm_ckpt_policy pol = {.root = root,
                           .every_steps = o->ckpt_every_steps,
                           .every_minutes = o->ckpt_every_minutes,
                           .keep = o->ckpt_keep,
                           .sync = o->ckpt_sync,
                           .abort_on_error = o->ckpt_abort_on_error,
                           .remote_uri = o->ckpt_uri,
                           .remote_prefix_shards = o->s3_prefix_shards,
                           .meta = &meta,
                           .preempt_grace_s = o->preempt_grace_s};
    slm_status st = slm_ckpt_sched_new(&pol, tr->rank, tr->W, slm_fsdp_is_replica(&tr->fsdp), cs);
    free(root);
    return st;
}

// Polls the pending checkpoint and, if `save`, starts one of the current state.
static slm_status ckpt_poll(slm_ckpt_sched *cs, slm_trainer *tr, bool save) {
    slm_ckpt_meta meta;
    int NU = 0;
    const slm_unit_layout *lay = slm_trainer_ckpt_layout(tr, &NU);
    slm_ckpt_shard *sh = slm_xcalloc((size_t)NU, sizeof *sh);
    slm_trainer_ckpt_state(tr, tr->step, &meta, sh);
    slm_status st = slm_ckpt_sched_step(cs, save, &meta, lay, NU, sh);
    free(sh);
    return st;
}

static void ckpt_fence(void *ctx, slm_trainer *tr) {
    (void)tr;
    slm_ckpt_sched_fence(*(slm_ckpt_sched **)ctx); // an async save may still copy params / m / v
}

static slm_status ckpt_step(void *ctx, slm_trainer *tr, const slm_step_metrics *m) {
    slm_ckpt_sched *cs = *(slm_ckpt_sched **)ctx;
    if (!cs) return SLM_OK;
    slm_status st = ckpt_poll(cs, tr, slm_ckpt_sched_due(cs, m->step, false));
    tr->fault->after_ckpt(tr);
    return st;
}

static void ckpt_summary(const slm_ckpt_sched *cs, const char *out_dir) {
    int64_t n_saves;
    double stall_total, stall_max;
    slm_ckpt_sched_stats(cs, &n_saves, &stall_total, &stall_max);
    int64_t n_failed = slm_ckpt_sched_n_failed(cs);
    char failed[64] = "";
    if (n_failed)
        snprintf(failed, sizeof failed, " (%lld failed, see the errors above)",
                 (long long)n_failed);
    slm_info("checkpoints: %lld saved%s under %s/checkpoints, training stall %.1f ms max, %.1f "
             "ms total",
             (long long)n_saves, failed, out_dir, stall_max * 1e3, stall_total * 1e3);
}

// The final state (end, --max-minutes or a stop) is always checkpointed. On an error exit a
// save that finished writing is committed when every rank gets here together (a world of one,
// a non-finite loss agreed by the all-reduce), otherwise discarded with a warning.
static slm_status ckpt_finish(void *ctx, slm_trainer *tr, slm_status st) {
    slm_ckpt_sched **cs = ctx;
    if (!*cs) return SLM_OK;
    slm_status r = SLM_OK;
    if (st) {
        slm_ckpt_sched_settle(*cs, tr->W == 1 || st == SLM_E_NUMERIC);
    } else {
        r = ckpt_poll(*cs, tr, true);
        if (!r) r = slm_ckpt_sched_finish(*cs);
        if (!r) ckpt_summary(*cs, tr->o->out_dir);
        if (r) slm_ckpt_sched_settle(*cs, tr->W == 1);
    }
    tr->fault->after_ckpt(tr);
    slm_ckpt_sched_free(*cs); // joins a background write before the shards are freed
    *cs = NULL;
    return r;
}

slm_status slm_train_add_ckpt_hook(slm_train_opts *o, slm_train_std_hooks *h) {
    slm_train_hook k = {.name = "checkpoints",
                        .ctx = &h->ckpt,
                        .on_start = ckpt_start,
                        .before_update = ckpt_fence,
                        .on_step = ckpt_step,
                        .on_finish = ckpt_finish};
    return slm_train_attach(o, &k);
}

slm_status slm_train_add_std_hooks(slm_train_opts *o, slm_train_std_hooks *h) {
    slm_status st = slm_train_add_stop_hook(o);
    if (!st) st = slm_train_add_ckpt_hook(o, h);
    if (!st) st = slm_train_add_metrics_hook(o, h);
    if (!st) st = slm_train_add_heartbeat_hook(o, h);
    if (!st) st = slm_train_add_snapshot_hook(o, h);
    return st;
}
