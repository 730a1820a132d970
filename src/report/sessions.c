// The sessions of a run: one per "start" event of metrics.jsonl (the first run, then each
// resume), told apart by who started them, with each one's world and throughput on its own.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_internal.h"

static double ev_num(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) && isfinite(x->valuedouble) ? x->valuedouble : NAN;
}

size_t report_sessions(const report_run *r, report_session **out) {
    *out = NULL;
    const slm_run_log *l = &r->log;
    size_t n = 0, cap = 0;
    report_session *s = NULL;
    for (size_t i = 0; i < l->n_events; i++) {
        if (strcmp(l->events[i].name, "start")) continue;
        cJSON *o = cJSON_Parse(l->events[i].json);
        double from = ev_num(o, "start_step"), world = ev_num(o, "world"),
               at = ev_num(o, "attempt");
        cJSON_Delete(o);
        if (!(from >= 0 && from < 9e15 && world >= 1 && world < 1e7)) { // schema 1: no split
            free(s);
            return 0;
        }
        if (n == cap) s = slm_xrealloc(s, (cap = cap ? 2 * cap : 8) * sizeof *s);
        report_session *e = &s[n++];
        memset(e, 0, sizeof *e);
        e->from = (int64_t)from;
        e->world = (int)world;
        e->attempt = at >= 0 && at < 1e9 ? (long)at : -1;
        e->time = l->events[i].time;
    }
    for (size_t k = 0; k < n; k++) {
        report_session *e = &s[k];
        // Its steps: after its start and up to where the next session resumed (a step a later
        // session trained again is that session's: metrics.jsonl keeps a step's last record).
        e->to = k + 1 < n ? s[k + 1].from : INT64_MAX;
        double tok = 0, ms = 0, mfu_ms = 0, ms_mfu = 0;
        bool first = true;
        e->first_step = e->last_step = -1;
        for (size_t i = 0; i < l->n_steps; i++) {
            const slm_run_step *st = &l->steps[i];
            if (st->step <= e->from || st->step > e->to) continue;
            if (e->first_step < 0) e->first_step = st->step;
            e->last_step = st->step;
            if (first) { // the first step of a session pays its start-up, as the trainer's rates
                first = false;
                continue;
            }
            if (isfinite(st->tokens_per_s) && isfinite(st->ms_per_step)) {
                tok += st->tokens_per_s * st->ms_per_step / 1e3;
                ms += st->ms_per_step;
            }
            if (isfinite(st->mfu) && isfinite(st->ms_per_step))
                mfu_ms += st->mfu * st->ms_per_step, ms_mfu += st->ms_per_step;
        }
        e->tokens_per_s = ms > 0 ? tok / (ms / 1e3) : NAN;
        e->mfu = ms_mfu > 0 ? mfu_ms / ms_mfu : NAN;
    }
    *out = s;
    return n;
}

const char *report_session_origin(const report_session *s, bool first) {
    if (first) return "start";
    if (s->attempt >= 2) return "launcher restart";
    if (s->attempt == 1) return "new launch";
    if (s->attempt == 0) return "resumed by hand";
    return "resumed";
}

void report_session_counts(const report_session *s, size_t n, int *restarts, int *continuations) {
    *restarts = *continuations = 0;
    for (size_t k = 1; k < n; k++) {
        if (s[k].attempt >= 2)
            ++*restarts;
        else
            ++*continuations;
    }
}

void report_sessions_html(const report_run *r, slm_buf *b) {
    report_session *s = NULL;
    size_t n = report_sessions(r, &s);
    if (n < 2) {
        free(s);
        return;
    }
    int restarts, cont;
    report_session_counts(s, n, &restarts, &cont);
    slm_buf_appendf(b,
                    "<h2>Sessions</h2>\n<p>%zu sessions: %d launcher restart%s, %d continuation%s "
                    "(by hand or by a new launch)</p>\n<table id=\"sessions\"><tr><th>session</th>"
                    "<th>started</th><th>how</th><th>steps</th><th>ranks</th><th>tokens/s</th>"
                    "<th>MFU</th></tr>\n",
                    n, restarts, restarts == 1 ? "" : "s", cont, cont == 1 ? "" : "s");
    for (size_t k = 0; k < n; k++) {
        char t[32], tps[32], steps[64], mfu[32];
        report_fmt_utc(s[k].time, t);
        report_fmt_si(s[k].tokens_per_s, tps);
        if (s[k].first_step >= 0)
            snprintf(steps, sizeof steps, "%lld-%lld", (long long)s[k].first_step,
                     (long long)s[k].last_step);
        else
            snprintf(steps, sizeof steps, "none kept");
        if (isfinite(s[k].mfu))
            snprintf(mfu, sizeof mfu, "%.1f%%", 100 * s[k].mfu);
        else
            snprintf(mfu, sizeof mfu, "n/a");
        slm_buf_appendf(b,
                        "<tr><td class=\"n\">%zu</td><td class=\"n t\">%s</td><td>%s</td><td "
                        "class=\"n\">%s</td><td class=\"n\">%d</td><td class=\"n\">%s</td><td "
                        "class=\"n\">%s</td></tr>\n",
                        k + 1, t, report_session_origin(&s[k], k == 0), steps, s[k].world, tps,
                        mfu);
    }
    slm_buf_appendf(b, "</table>\n");
    free(s);
}
