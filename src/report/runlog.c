// The metrics.jsonl reader (report.h). Tolerant by design: a run that crashed may have cut its
// last line, and older runs wrote fewer fields.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "report/report.h"

static double num_or_nan(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) && isfinite(x->valuedouble) ? x->valuedouble : NAN;
}

// An integer field in [-2^53, 2^53], else `def`.
static int64_t int_or(const cJSON *o, const char *key, int64_t def) {
    double v = num_or_nan(o, key);
    if (!isfinite(v) || fabs(v) > SLM_JSON_MAX_EXACT || v != floor(v)) return def;
    return (int64_t)v;
}

static void parse_step(const cJSON *o, slm_run_step *s) {
    s->step = int_or(o, "step", -1);
    s->tokens = int_or(o, "tokens", -1);
    s->loss = num_or_nan(o, "loss");
    s->lr = num_or_nan(o, "lr");
    s->grad_norm = num_or_nan(o, "grad_norm");
    s->tokens_per_s = num_or_nan(o, "tokens_per_s");
    s->mfu = num_or_nan(o, "mfu");
    s->ms_per_step = num_or_nan(o, "ms_per_step");
    s->val_loss = num_or_nan(o, "val_loss");
    s->elapsed_s = num_or_nan(o, "elapsed_s");
    s->data_ms = num_or_nan(o, "data_ms");
    s->comm_ms = num_or_nan(o, "comm_ms");
    s->ckpt_ms = num_or_nan(o, "ckpt_ms");
    s->time = num_or_nan(o, "time");
}

// The array `key` of numbers (null / other: NaN) into a new array of *n (the first array read
// sets *n; later ones are cut or NaN-padded to it). NULL when absent.
static double *num_array(const cJSON *o, const char *key, int *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a)) return NULL;
    int len = cJSON_GetArraySize(a);
    if (*n < 0) *n = len > 1 << 20 ? 1 << 20 : len;
    double *v = slm_xmalloc((size_t)(*n ? *n : 1) * sizeof *v);
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (i >= *n) break;
        v[i++] = cJSON_IsNumber(x) && isfinite(x->valuedouble) ? x->valuedouble : NAN;
    }
    for (; i < *n; i++)
        v[i] = NAN;
    return v;
}

static void parse_ranks(const cJSON *o, slm_run_ranks *r) {
    r->step = int_or(o, "step", -1);
    int n = -1;
    r->rss_bytes = num_array(o, "rss_bytes", &n);
    r->peak_rss_bytes = num_array(o, "peak_rss_bytes", &n);
    r->cpu_util = num_array(o, "cpu_util", &n);
    r->step_ms = num_array(o, "step_ms", &n);
    r->n_ranks = n < 0 ? 0 : n;
}

// Orders the steps by step number, file order among equal ones (a bottom-up merge sort of the
// indices, stable), and keeps the last record of each step.
static void dedupe_steps(slm_run_log *l) {
    size_t n = l->n_steps;
    if (n < 2) return;
    size_t *ix = slm_xmalloc(n * sizeof *ix), *tmp = slm_xmalloc(n * sizeof *tmp);
    for (size_t i = 0; i < n; i++)
        ix[i] = i;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                tmp[k++] = l->steps[ix[b]].step < l->steps[ix[a]].step ? ix[b++] : ix[a++];
            while (a < mid)
                tmp[k++] = ix[a++];
            while (b < hi)
                tmp[k++] = ix[b++];
        }
        memcpy(ix, tmp, n * sizeof *ix);
    }
    slm_run_step *sorted = slm_xmalloc(n * sizeof *sorted);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const slm_run_step *s = &l->steps[ix[i]];
        if (m > 0 && sorted[m - 1].step == s->step)
            sorted[m - 1] = *s; // a later record of the same step wins
        else
            sorted[m++] = *s;
    }
    free(ix), free(tmp), free(l->steps);
    l->steps = sorted;
    l->n_steps = m;
}

slm_status slm_run_log_parse(const char *text, size_t len, const char *path, slm_run_log *out) {
    memset(out, 0, sizeof *out);
    out->schema = 1;
    size_t cap_s = 0, cap_r = 0, cap_e = 0;
    size_t i = 0;
    int64_t line_no = 0;
    char *line = NULL;
    size_t line_cap = 0;
    while (i < len) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t n = end - i;
        line_no++;
        const char *p = text + i;
        i = end + 1;
        size_t a = 0;
        while (a < n && (p[a] == ' ' || p[a] == '\t' || p[a] == '\r'))
            a++;
        if (a == n) continue;
        out->n_lines++;
        if (n + 1 > line_cap) line = slm_xrealloc(line, line_cap = n + 1);
        memcpy(line, p, n);
        line[n] = 0;
        cJSON *o = cJSON_ParseWithLength(line, n);
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
        if (!cJSON_IsObject(o) || !cJSON_IsString(ev) || !ev->valuestring[0]) {
            if (!out->first_bad) out->first_bad = line_no;
            out->n_bad++;
            cJSON_Delete(o);
            continue;
        }
        const char *name = ev->valuestring;
        if (!strcmp(name, "step")) {
            if (out->n_steps == cap_s)
                out->steps = slm_xrealloc(out->steps,
                                          (cap_s = cap_s ? 2 * cap_s : 256) * sizeof *out->steps);
            parse_step(o, &out->steps[out->n_steps]);
            if (out->steps[out->n_steps].step >= 0) out->n_steps++;
        } else if (!strcmp(name, "ranks")) {
            if (out->n_ranks == cap_r)
                out->ranks =
                    slm_xrealloc(out->ranks, (cap_r = cap_r ? 2 * cap_r : 64) * sizeof *out->ranks);
            parse_ranks(o, &out->ranks[out->n_ranks++]);
        } else {
            if (out->n_events == cap_e)
                out->events = slm_xrealloc(out->events,
                                           (cap_e = cap_e ? 2 * cap_e : 64) * sizeof *out->events);
            slm_run_event *e = &out->events[out->n_events++];
            memset(e, 0, sizeof *e);
            snprintf(e->name, sizeof e->name, "%s", name);
            e->step = int_or(o, "step", -1);
            e->time = num_or_nan(o, "time");
            char *js = cJSON_PrintUnformatted(o);
            e->json = js ? js : slm_xstrdup("{}");
            if (!strcmp(name, "start")) {
                int64_t sc = int_or(o, "schema", 1);
                if (sc > out->schema && sc < 1000) out->schema = (int)sc;
            }
        }
        cJSON_Delete(o);
    }
    free(line);
    if (out->n_lines > 0 && out->n_bad == out->n_lines) {
        int64_t first = out->first_bad;
        slm_run_log_free(out);
        return slm_fail(SLM_E_FORMAT,
                        "%s: line %lld: expected one JSON object per line with an \"event\" "
                        "string (a shardlm metrics.jsonl); no line is one",
                        path, (long long)first);
    }
    dedupe_steps(out);
    return SLM_OK;
}

slm_status slm_run_log_read(const char *path, slm_run_log *out) {
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &text, &len);
    if (st) return st;
    st = slm_run_log_parse(text, len, path, out);
    free(text);
    return st;
}

void slm_run_log_free(slm_run_log *l) {
    for (size_t i = 0; i < l->n_ranks; i++) {
        free(l->ranks[i].rss_bytes), free(l->ranks[i].peak_rss_bytes);
        free(l->ranks[i].cpu_util), free(l->ranks[i].step_ms);
    }
    for (size_t i = 0; i < l->n_events; i++)
        free(l->events[i].json);
    free(l->steps), free(l->ranks), free(l->events);
    memset(l, 0, sizeof *l);
}

const slm_run_event *slm_run_log_find(const slm_run_log *l, const char *name, size_t from) {
    for (size_t i = from; i < l->n_events; i++)
        if (!strcmp(l->events[i].name, name)) return &l->events[i];
    return NULL;
}
