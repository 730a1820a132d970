// Reading a run directory for the report: metrics.jsonl, config.json, checkpoints/ and the
// launcher's attempts.json, plus the headline figures both renderers print.
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "report/report_internal.h"

void report_fmt_si(double v, char out[32]) {
    static const char *const suf[] = {"", "k", "M", "G", "T", "P"};
    if (!isfinite(v)) {
        snprintf(out, 32, "n/a");
        return;
    }
    int k = 0;
    double a = fabs(v);
    while (a >= 999.5 && k < 5)
        a /= 1000, v /= 1000, k++;
    // three significant digits, trailing zeros dropped (50.0k -> 50k, 1.50M -> 1.5M)
    int dec = a >= 100 ? 0 : a >= 10 ? 1 : 2;
    if (k == 0 && a == floor(a)) dec = 0;
    char num[24];
    snprintf(num, sizeof num, "%.*f", dec, v);
    if (strchr(num, '.')) {
        size_t n = strlen(num);
        while (n > 0 && num[n - 1] == '0')
            num[--n] = 0;
        if (n > 0 && num[n - 1] == '.') num[--n] = 0;
    }
    snprintf(out, 32, "%s%s", num, suf[k]);
}

void report_fmt_num(double v, char out[40]) {
    if (!isfinite(v)) {
        snprintf(out, 40, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    // integers, and large values without a 1.79616e+09 exponent
    bool whole = fabs(v) < 1e16 && (fabs(v) >= 1e6 || v == floor(v));
    snprintf(out, 40, whole ? "%.0f" : "%.6g", v);
}

void report_fmt_duration(double s, char out[32]) {
    if (!isfinite(s) || s < 0) {
        snprintf(out, 32, "n/a");
        return;
    }
    long t = (long)(s + 0.5);
    if (s < 10)
        snprintf(out, 32, "%.2f s", s);
    else if (s < 60)
        snprintf(out, 32, "%.1f s", s);
    else if (t < 3600)
        snprintf(out, 32, "%ldm %02lds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(out, 32, "%ldh %02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(out, 32, "%ldd %02ldh", t / 86400, t / 3600 % 24);
}

void report_fmt_utc(double unix_s, char out[32]) {
    if (!isfinite(unix_s) || unix_s < 0 || unix_s > 4e10) {
        snprintf(out, 32, "n/a");
        return;
    }
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

static cJSON *read_json(const char *path, char **why) {
    char *text = NULL;
    size_t len = 0;
    if (!slm_is_file(path) || slm_file_read_all(path, &text, &len) != SLM_OK) return NULL;
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    if (!o && why) {
        size_t n = strlen(path) + 64;
        *why = slm_xmalloc(n);
        snprintf(*why, n, "%s is not valid JSON", path);
    }
    return o;
}

static void list_checkpoints(report_run *r) {
    char *root = slm_path_join(r->dir, "checkpoints");
    char *lp = slm_path_join(root, "latest");
    char latest[64] = "";
    FILE *lf = fopen(lp, "r");
    if (lf) {
        if (fgets(latest, sizeof latest, lf)) latest[strcspn(latest, "\r\n ")] = 0;
        fclose(lf);
    }
    free(lp);
    DIR *d = opendir(root);
    size_t cap = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long long step;
        int used = 0;
        if (sscanf(e->d_name, "step_%lld%n", &step, &used) != 1 || e->d_name[used] || step < 0 ||
            strlen(e->d_name) >= 64)
            continue;
        char *dir = slm_path_join(root, e->d_name);
        if (!slm_is_dir(dir)) {
            free(dir);
            continue;
        }
        if (r->n_ckpts == cap)
            r->ckpts = slm_xrealloc(r->ckpts, (cap = cap ? 2 * cap : 16) * sizeof *r->ckpts);
        report_ckpt *c = &r->ckpts[r->n_ckpts++];
        memset(c, 0, sizeof *c);
        size_t nl = strlen(e->d_name); // < 64: checked above
        memcpy(c->name, e->d_name, nl + 1);
        c->step = step;
        c->stall_ms = NAN;
        c->latest = !strcmp(latest, e->d_name);
        DIR *cd = opendir(dir);
        struct dirent *f;
        while (cd && (f = readdir(cd))) {
            if (f->d_name[0] == '.') continue;
            char *p = slm_path_join(dir, f->d_name);
            struct stat sb;
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
                c->bytes += (double)sb.st_size;
                if ((double)sb.st_mtime > c->mtime) c->mtime = (double)sb.st_mtime;
            }
            free(p);
        }
        if (cd) closedir(cd);
        free(dir);
    }
    if (d) closedir(d);
    free(root);
    // insertion sort by step (a few hundred at most)
    for (size_t i = 1; i < r->n_ckpts; i++)
        for (size_t j = i; j > 0 && r->ckpts[j].step < r->ckpts[j - 1].step; j--) {
            report_ckpt t = r->ckpts[j];
            r->ckpts[j] = r->ckpts[j - 1];
            r->ckpts[j - 1] = t;
        }
    for (size_t i = 0; i < r->log.n_events; i++) {
        const slm_run_event *ev = &r->log.events[i];
        if (strcmp(ev->name, "checkpoint")) continue;
        cJSON *o = cJSON_Parse(ev->json);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "stall_ms");
        for (size_t k = 0; k < r->n_ckpts; k++)
            if (r->ckpts[k].step == ev->step && cJSON_IsNumber(s))
                r->ckpts[k].stall_ms = s->valuedouble;
        cJSON_Delete(o);
    }
}

// attempts.json: an array of attempt objects, or an object holding one under "attempts".
static void read_attempts(report_run *r) {
    char *p = slm_path_join(r->dir, "attempts.json");
    cJSON *o = read_json(p, &r->attempts_note);
    free(p);
    if (!o) return;
    cJSON *a = cJSON_IsArray(o) ? o : cJSON_DetachItemFromObjectCaseSensitive(o, "attempts");
    if (a != o) cJSON_Delete(o);
    if (!cJSON_IsArray(a)) {
        cJSON_Delete(a);
        r->attempts_note = slm_xstrdup("attempts.json holds no array of attempts");
        return;
    }
    r->attempts = a;
}

static double start_num(const report_run *r, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(r->start, key);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static void derive(report_run *r) {
    const slm_run_log *l = &r->log;
    r->steps_planned = -1;
    r->final_loss = r->final_val = r->tokens = r->wall_s = r->mean_tps = r->mean_mfu = NAN;
    r->final_val_step = -1;
    r->final_val_end = false;
    r->val_batches = -1;
    r->max_step_mfu = r->peak_eff = r->mfu_per_tps = NAN;
    r->world = 0; // unknown until a start event says (schema 1 did not record it)
    double planned = start_num(r, "steps"), world = start_num(r, "world");
    // The newest start event names the plan the run has now (a resume may extend --steps).
    for (size_t i = 0; i < l->n_events; i++) {
        if (strcmp(l->events[i].name, "start")) continue;
        cJSON *o = cJSON_Parse(l->events[i].json);
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "steps");
        if (cJSON_IsNumber(x)) planned = x->valuedouble;
        cJSON_Delete(o);
    }
    if (isfinite(planned)) r->steps_planned = (int64_t)planned;
    if (isfinite(world) && world >= 1) r->world = (int)world;
    if (l->n_steps) {
        const slm_run_step *last = &l->steps[l->n_steps - 1];
        r->steps_done = last->step;
        r->final_loss = last->loss;
        r->tokens = last->tokens >= 0 ? (double)last->tokens : NAN;
        for (size_t i = l->n_steps; i-- > 0;)
            if (isfinite(l->steps[i].val_loss)) {
                r->final_val = l->steps[i].val_loss;
                r->final_val_step = l->steps[i].step;
                break;
            }
        for (size_t i = 0; i < l->n_steps; i++)
            if (isfinite(l->steps[i].mfu) && !(l->steps[i].mfu <= r->max_step_mfu)) // NaN-safe max
                r->max_step_mfu = l->steps[i].mfu;
        // Rates over the steps after the first (the first pays start-up costs), as the trainer.
        double tok = 0, ms = 0, flops_tok = start_num(r, "flops_per_token");
        double peak = start_num(r, "peak_gflops");
        size_t from = l->n_steps > 1 ? 1 : 0;
        for (size_t i = from; i < l->n_steps; i++)
            if (isfinite(l->steps[i].tokens_per_s) && isfinite(l->steps[i].ms_per_step)) {
                tok += l->steps[i].tokens_per_s * l->steps[i].ms_per_step / 1e3;
                ms += l->steps[i].ms_per_step;
            }
        if (ms > 0) r->mean_tps = tok / (ms / 1e3);
        if (isfinite(flops_tok) && isfinite(peak) && peak > 0 && r->world > 0) {
            // A peak measured low at start-up is raised to the fastest step's rate, as the
            // trainer does since issue 20 (the start event has the peak before any raise).
            for (size_t i = 0; i < l->n_steps; i++) {
                double rate = l->steps[i].tokens_per_s * flops_tok / (1e9 * r->world);
                if (isfinite(rate) && rate > peak) peak = rate;
            }
            r->peak_eff = peak;
            r->mfu_per_tps = flops_tok / (peak * 1e9 * r->world);
            r->mean_mfu = r->mean_tps * r->mfu_per_tps;
        } else { // world unknown: the time-weighted mean of the steps' own MFU figures
            double wm = 0, wms = 0;
            for (size_t i = from; i < l->n_steps; i++)
                if (isfinite(l->steps[i].mfu) && isfinite(l->steps[i].ms_per_step)) {
                    wm += l->steps[i].mfu * l->steps[i].ms_per_step;
                    wms += l->steps[i].ms_per_step;
                }
            if (wms > 0) r->mean_mfu = wm / wms / (r->max_step_mfu > 1 ? r->max_step_mfu : 1);
        }
        // Wall time: the sum over attempts of each attempt's last elapsed_s.
        double wall = 0, prev = -1;
        bool any = false;
        for (size_t i = 0; i < l->n_steps; i++) {
            double e = l->steps[i].elapsed_s;
            if (!isfinite(e)) continue;
            if (prev >= 0 && e < prev) wall += prev;
            prev = e, any = true;
        }
        if (any) r->wall_s = wall + prev;
    }
    const slm_run_event *end = NULL, *err = NULL;
    for (size_t i = 0; i < l->n_events; i++) {
        if (!strcmp(l->events[i].name, "end")) end = &l->events[i], err = NULL;
        if (!strcmp(l->events[i].name, "error") || !strcmp(l->events[i].name, "nonfinite"))
            err = &l->events[i];
        if (!strcmp(l->events[i].name, "start")) end = err = NULL;
    }
    for (size_t i = 0; i < l->n_events; i++) { // what a validation is over
        if (strcmp(l->events[i].name, "eval")) continue;
        cJSON *o = cJSON_Parse(l->events[i].json);
        const cJSON *nb = cJSON_GetObjectItemCaseSensitive(o, "batches");
        if (cJSON_IsNumber(nb) && nb->valuedouble >= 0 && nb->valuedouble < 1e9)
            r->val_batches = (int)nb->valuedouble;
        cJSON_Delete(o);
    }
    if (end) { // the validation at the end (of a run stopped early, e.g. --max-minutes) is
               // only in the end event
        cJSON *o = cJSON_Parse(end->json);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "val_loss");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "steps");
        // the same figure as the last step record's is that validation (an interrupted run
        // validates nothing at its end)
        if (cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble != r->final_val) {
            r->final_val = v->valuedouble;
            r->final_val_end = true;
            r->final_val_step = cJSON_IsNumber(st) ? (int64_t)st->valuedouble : r->steps_done;
        }
        cJSON_Delete(o);
    }
    if (err)
        r->status = "failed";
    else if (end) {
        cJSON *o = cJSON_Parse(end->json);
        bool intr = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "interrupted"));
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "steps");
        bool short_run = cJSON_IsNumber(st) && r->steps_planned > 0 &&
                         st->valuedouble < (double)r->steps_planned;
        cJSON_Delete(o);
        r->status = intr ? "interrupted" : short_run ? "stopped early" : "complete";
    } else
        r->status = "running, or ended without an end event";
}

void report_loss_scope(const report_run *r, bool validation, char *out, size_t cap) {
    double b = start_num(r, "batch"), t = start_num(r, "seq"), k = start_num(r, "grad_accum");
    int w = r->world > 0 ? r->world : 1;
    out[0] = 0;
    if (!(b >= 1 && t >= 1 && b < 1e9 && t < 1e9)) return;
    if (!(k >= 1 && k < 1e9)) k = 1;
    char ranks[32] = "";
    if (r->world > 1) snprintf(ranks, sizeof ranks, " x %d ranks", r->world);
    if (!validation) {
        char acc[32] = "";
        if (k > 1) snprintf(acc, sizeof acc, " x %.0f accumulated", k);
        snprintf(out, cap, "over one step's global batch: %.0f x %.0f tokens%s%s = %.0f positions",
                 b, t, acc, ranks, b * t * k * w);
    } else if (r->val_batches == 0) {
        snprintf(out, cap, "over the whole validation split");
    } else if (r->val_batches > 0) {
        snprintf(out, cap, "over %d batch%s of %.0f x %.0f tokens%s%s = %.0f positions",
                 r->val_batches, r->val_batches == 1 ? "" : "es", b, t,
                 r->world > 1 ? " per rank" : "", ranks, (double)r->val_batches * b * t * w);
    }
}

slm_status report_run_open(const char *run_dir, report_run *r) {
    memset(r, 0, sizeof *r);
    r->dir = slm_xstrdup(run_dir);
    char *p = slm_path_join(run_dir, "metrics.jsonl");
    slm_status st = slm_is_file(p) ? slm_run_log_read(p, &r->log)
                                   : slm_fail(SLM_E_IO,
                                              "%s: no such file (is %s a run directory written "
                                              "by shardlm train --out?)",
                                              p, run_dir);
    free(p);
    if (st) {
        report_run_close(r);
        return st;
    }
    p = slm_path_join(run_dir, "config.json");
    r->config = read_json(p, NULL);
    free(p);
    read_attempts(r);
    list_checkpoints(r);
    report_run_derive(r);
    return SLM_OK;
}

void report_run_derive(report_run *r) {
    const slm_run_event *s = NULL; // the newest start: the options the run has now
    for (size_t i = 0; i < r->log.n_events; i++)
        if (!strcmp(r->log.events[i].name, "start")) s = &r->log.events[i];
    cJSON_Delete(r->start);
    r->start = s ? cJSON_Parse(s->json) : NULL;
    derive(r);
}

void report_run_close(report_run *r) {
    slm_run_log_free(&r->log);
    cJSON_Delete(r->config);
    cJSON_Delete(r->start);
    cJSON_Delete(r->attempts);
    free(r->attempts_note);
    free(r->ckpts);
    free(r->dir);
    memset(r, 0, sizeof *r);
}
