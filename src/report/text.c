// The text summary of a run for terminals (`shardlm report RUN_DIR` without -o).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_internal.h"

// "run DIR: model M (N parameters), W ranks, SHARDING" and the status line. wmin / wmax: the
// sessions' smallest and largest world.
static void text_header(const report_run *r, int wmin, int wmax, slm_buf *out) {
    char a[32];
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(r->start, "model");
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(r->start, "n_params");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(r->start, "sharding");
    report_fmt_si(cJSON_IsNumber(np) ? np->valuedouble : NAN, a);
    char w[64];
    if (wmin != wmax)
        snprintf(w, sizeof w, "%d to %d ranks (by session, below)", wmin, wmax);
    else if (r->world > 0)
        snprintf(w, sizeof w, "%d rank%s", r->world, r->world == 1 ? "" : "s");
    else
        snprintf(w, sizeof w, "world size not recorded");
    slm_buf_appendf(out, "run %s: model %s (%s parameters), %s%s%s\n", r->dir,
                    cJSON_IsString(model) ? model->valuestring : "?", a, w,
                    cJSON_IsString(sh) ? ", " : "", cJSON_IsString(sh) ? sh->valuestring : "");
    if (r->steps_planned > 0)
        slm_buf_appendf(out, "status: %s, %lld of %lld steps\n", r->status,
                        (long long)r->steps_done, (long long)r->steps_planned);
    else
        slm_buf_appendf(out, "status: %s, %lld steps\n", r->status, (long long)r->steps_done);
}

// The train and validation loss lines.
static void text_losses(const report_run *r, slm_buf *out) {
    const slm_run_log *l = &r->log;
    // %.4f for the usual range; a diverged loss in %.4g (no 300-digit numbers)
    const char *f0 = fabs(l->steps[0].loss) < 1e6 ? "%.4f" : "%.4g";
    const char *f1 = fabs(r->final_loss) < 1e6 ? "%.4f" : "%.4g";
    char a0[48], a1[48];
    snprintf(a0, sizeof a0, f0, l->steps[0].loss);
    snprintf(a1, sizeof a1, f1, r->final_loss);
    char scope[160];
    report_loss_scope(r, false, scope, sizeof scope);
    slm_buf_appendf(out, "train loss: %s at step %lld -> %s at step %lld%s%s%s\n", a0,
                    (long long)l->steps[0].step, a1, (long long)r->steps_done,
                    scope[0] ? " (each " : "", scope, scope[0] ? ")" : "");
    if (isfinite(r->final_val)) {
        report_loss_scope(r, true, scope, sizeof scope);
        slm_buf_appendf(
            out, fabs(r->final_val) < 1e6 ? "validation loss: %.4f" : "validation loss: %.4g",
            r->final_val);
        slm_buf_appendf(out, " after step %lld%s%s%s\n", (long long)r->final_val_step,
                        r->final_val_end ? ", the end of training" : "", scope[0] ? ", " : "",
                        scope);
    }
}

// The throughput line (MFU there when every session had the same world, same_world) and the
// split of step time, when the steps recorded it.
static void text_speed(const report_run *r, bool same_world, slm_buf *out) {
    const slm_run_log *l = &r->log;
    char a[32], c[32], d[32];
    report_fmt_si(r->tokens, a);
    report_fmt_si(r->mean_tps, c);
    report_fmt_duration(r->wall_s, d);
    slm_buf_appendf(out, "throughput: %s tokens in %s, %s tok/s", a, d, c);
    if (isfinite(r->mean_mfu) && same_world) // else by session, below
        slm_buf_appendf(out, ", MFU %.1f%%", 100 * r->mean_mfu);
    slm_buf_appendf(out, "\n");
    double tot = 0, data = 0, comm = 0, ck = 0;
    bool split = false;
    for (size_t i = 0; i < l->n_steps; i++) {
        const slm_run_step *s = &l->steps[i];
        if (!isfinite(s->ms_per_step) || !isfinite(s->data_ms) || !isfinite(s->comm_ms)) continue;
        split = true;
        tot += s->ms_per_step + (isfinite(s->ckpt_ms) ? s->ckpt_ms : 0);
        data += s->data_ms, comm += s->comm_ms;
        ck += isfinite(s->ckpt_ms) ? s->ckpt_ms : 0;
    }
    if (split && tot > 0 && isfinite(tot) && isfinite(data + comm + ck))
        slm_buf_appendf(out,
                        "step time: compute %.1f%%, exposed comm %.1f%%, data wait %.1f%%, "
                        "checkpoint stall %.1f%%\n",
                        100 * (tot - data - comm - ck) / tot, 100 * comm / tot, 100 * data / tot,
                        100 * ck / tot);
}

// The memory and checkpoint lines.
static void text_memory_ckpts(const report_run *r, slm_buf *out) {
    const slm_run_log *l = &r->log;
    char a[32];
    if (l->n_ranks) {
        const slm_run_ranks *rk = &l->ranks[l->n_ranks - 1];
        double peak = -1;
        int who = -1;
        for (int k = 0; rk->peak_rss_bytes && k < rk->n_ranks; k++)
            if (rk->peak_rss_bytes[k] > peak) peak = rk->peak_rss_bytes[k], who = k;
        if (who >= 0)
            slm_buf_appendf(out, "memory: peak RSS %s (rank %d, the highest of %d)\n",
                            slm_fmt_bytes(peak, a), who, rk->n_ranks);
    }
    if (r->n_ckpts) {
        const report_ckpt *last = &r->ckpts[r->n_ckpts - 1];
        slm_buf_appendf(out, "checkpoints: %zu, newest %s (%s)%s\n", r->n_ckpts, last->name,
                        slm_fmt_bytes(last->bytes, a), last->latest ? ", named by latest" : "");
    } else {
        slm_buf_appendf(out, "checkpoints: none committed\n");
    }
}

// The attempts line, from attempts.json.
static void text_attempts(const cJSON *attempts, slm_buf *out) {
    int n = cJSON_GetArraySize(attempts);
    const cJSON *last = cJSON_GetArrayItem(attempts, n - 1);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(last, "result");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(last, "reason");
    int launches = 0; // launches are numbered from 1 (a file without numbers: one)
    const cJSON *at;
    cJSON_ArrayForEach(at, attempts) {
        const cJSON *ln = cJSON_GetObjectItemCaseSensitive(at, "launch");
        if (cJSON_IsNumber(ln) && ln->valueint > launches) launches = ln->valueint;
    }
    slm_buf_appendf(out, "attempts: %d (attempts.json)", n);
    if (launches > 1) slm_buf_appendf(out, " in %d launches", launches);
    if (cJSON_IsString(res))
        slm_buf_appendf(out, ", the last: %s%s%s", res->valuestring,
                        cJSON_IsString(why) && why->valuestring[0] ? ", " : "",
                        cJSON_IsString(why) ? why->valuestring : "");
    slm_buf_appendf(out, "\n");
}

// The sessions line and one line per session (more than one session).
static void text_sessions(const report_session *ses, size_t n_ses, slm_buf *out) {
    char c[32];
    int restarts, cont;
    report_session_counts(ses, n_ses, &restarts, &cont);
    slm_buf_appendf(out,
                    "sessions: %zu: %d launcher restart%s, %d continuation%s (by hand or a "
                    "new launch)\n",
                    n_ses, restarts, restarts == 1 ? "" : "s", cont, cont == 1 ? "" : "s");
    for (size_t k = 0; k < n_ses; k++) {
        const report_session *e = &ses[k];
        report_fmt_si(e->tokens_per_s, c);
        slm_buf_appendf(out, "  %zu (%s): ", k + 1, report_session_origin(e, k == 0));
        if (e->first_step >= 0)
            slm_buf_appendf(out, "steps %lld-%lld", (long long)e->first_step,
                            (long long)e->last_step);
        else
            slm_buf_appendf(out, "no step kept");
        slm_buf_appendf(out, ", %d rank%s, %s tok/s", e->world, e->world == 1 ? "" : "s", c);
        if (isfinite(e->mfu)) slm_buf_appendf(out, ", MFU %.1f%%", 100 * e->mfu);
        slm_buf_appendf(out, "\n");
    }
}

// The events line. A "restart" event is a resume: by the launcher after a failure (attempt >=
// 2) or a continuation by hand / by a new launch (attempt 0 / 1; without the field: a restart).
static void text_events(const slm_run_log *l, slm_buf *out) {
    int n_restart = 0, n_cont = 0, n_other = 0;
    for (size_t i = 0; i < l->n_events; i++) {
        const char *n = l->events[i].name;
        if (!strcmp(n, "restart")) {
            cJSON *o = cJSON_Parse(l->events[i].json);
            const cJSON *at = cJSON_GetObjectItemCaseSensitive(o, "attempt");
            if (cJSON_IsNumber(at) && at->valuedouble < 2)
                n_cont++;
            else
                n_restart++;
            cJSON_Delete(o);
        }
        if (!strcmp(n, "straggler") || !strcmp(n, "nonfinite") || !strcmp(n, "error")) n_other++;
    }
    if (n_restart || n_cont || n_other)
        slm_buf_appendf(out,
                        "events: %d restart%s, %d continuation%s, %d straggler / non-finite / "
                        "error\n",
                        n_restart, n_restart == 1 ? "" : "s", n_cont, n_cont == 1 ? "" : "s",
                        n_other);
}

void report_render_text(const report_run *rp, slm_buf *out) {
    const slm_run_log *l = &rp->log;
    report_session *ses = NULL; // the sessions' worlds and rates are each their own
    size_t n_ses = report_sessions(rp, &ses);
    int wmin = rp->world, wmax = rp->world;
    for (size_t k = 0; k < n_ses; k++) {
        if (ses[k].world < wmin) wmin = ses[k].world;
        if (ses[k].world > wmax) wmax = ses[k].world;
    }
    text_header(rp, wmin, wmax, out);
    if (l->n_steps) {
        text_losses(rp, out);
        text_speed(rp, wmin == wmax, out);
    }
    text_memory_ckpts(rp, out);
    if (rp->attempts) text_attempts(rp->attempts, out);
    if (n_ses > 1) text_sessions(ses, n_ses, out);
    text_events(l, out);
    free(ses);
    if (l->n_bad)
        slm_buf_appendf(out,
                        "note: %lld malformed metrics.jsonl line%s skipped (first: line %lld)\n",
                        (long long)l->n_bad, l->n_bad == 1 ? "" : "s", (long long)l->first_bad);
}

slm_status slm_report_text(const char *run_dir, slm_buf *out) {
    report_run r;
    slm_status st = report_run_open(run_dir, &r);
    if (st) return st;
    report_render_text(&r, out);
    report_run_close(&r);
    return SLM_OK;
}
