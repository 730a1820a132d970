// The metrics registry and the text exposition writer (contract and format in metrics.h).
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"

// A double held as its bit pattern in an atomic 64-bit word (lock-free on x86-64).
typedef _Atomic uint64_t atomic_f64;

static double load_f64(const atomic_f64 *a) {
    uint64_t u = atomic_load_explicit(a, memory_order_relaxed);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static void store_f64(atomic_f64 *a, double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    atomic_store_explicit(a, u, memory_order_relaxed);
}

static void add_f64(atomic_f64 *a, double by) {
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed), nu;
    do {
        double d;
        memcpy(&d, &old, sizeof d);
        d += by;
        memcpy(&nu, &d, sizeof nu);
    } while (!atomic_compare_exchange_weak_explicit(a, &old, nu, memory_order_relaxed,
                                                    memory_order_relaxed));
}

struct slm_metric {
    slm_metric_family *fam;
    char **values;            // [fam->n_labels] label values (owned)
    atomic_f64 value;         // counter / gauge value; histogram sum
    _Atomic uint64_t *counts; // histogram: [n_bounds + 1] per-bucket (not cumulative) counts
    slm_metric *next;
};

struct slm_metric_family {
    slm_metrics *reg;
    slm_metric_type type;
    char *name, *help;
    int n_labels;
    char *labels[SLM_METRICS_MAX_LABELS];
    int n_bounds;
    double bounds[SLM_METRICS_MAX_BUCKETS];
    slm_metric *first, *last;
    slm_metric_family *next;
};

struct slm_metrics {
    pthread_mutex_t mu; // guards the lists (registration, rendering), not the values
    slm_metric_family *first, *last;
};

slm_metrics *slm_metrics_new(void) {
    slm_metrics *r = slm_xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void slm_metrics_free(slm_metrics *r) {
    if (!r) return;
    for (slm_metric_family *f = r->first, *fn; f; f = fn) {
        fn = f->next;
        for (slm_metric *m = f->first, *mn; m; m = mn) {
            mn = m->next;
            for (int i = 0; i < f->n_labels; i++)
                free(m->values[i]);
            free(m->values);
            free((void *)m->counts);
            free(m);
        }
        for (int i = 0; i < f->n_labels; i++)
            free(f->labels[i]);
        free(f->name);
        free(f->help);
        free(f);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

// ---------------------------------------------------------------------------------------------
// Registration

static bool name_ok(const char *s, bool colon) {
    if (!s || !*s) return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool alpha =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
        bool digit = c >= '0' && c <= '9';
        if (!(alpha || (digit && p != s))) return false;
    }
    return true;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static const char *type_name(slm_metric_type t) {
    return t == SLM_METRIC_COUNTER ? "counter" : t == SLM_METRIC_GAUGE ? "gauge" : "histogram";
}

static slm_status check_family(const slm_metrics *r, slm_metric_type type, const char *name,
                               int n_labels, const char *const *label_names, int n_bounds,
                               const double *bounds) {
    if (!name_ok(name, true))
        return slm_fail(SLM_E_ARG,
                        "metric name \"%s\": expected [a-zA-Z_:][a-zA-Z0-9_:]* (Prometheus "
                        "metric names)",
                        name ? name : "(null)");
    if (type != SLM_METRIC_COUNTER && type != SLM_METRIC_GAUGE && type != SLM_METRIC_HISTOGRAM)
        return slm_fail(SLM_E_ARG, "metric %s: unknown type %d", name, (int)type);
    if (type == SLM_METRIC_COUNTER && !ends_with(name, "_total"))
        return slm_fail(SLM_E_ARG, "counter %s: a counter's name must end in _total", name);
    for (const slm_metric_family *f = r->first; f; f = f->next)
        if (!strcmp(f->name, name))
            return slm_fail(SLM_E_ARG, "metric %s: already registered", name);
    if (n_labels < 0 || n_labels > SLM_METRICS_MAX_LABELS || (n_labels > 0 && !label_names))
        return slm_fail(SLM_E_ARG, "metric %s: %d labels (at most %d)", name, n_labels,
                        SLM_METRICS_MAX_LABELS);
    for (int i = 0; i < n_labels; i++) {
        const char *l = label_names[i];
        if (!name_ok(l, false) || !strncmp(l, "__", 2))
            return slm_fail(SLM_E_ARG,
                            "metric %s: label name \"%s\": expected [a-zA-Z_][a-zA-Z0-9_]* "
                            "not starting with __",
                            name, l ? l : "(null)");
        if (type == SLM_METRIC_HISTOGRAM && !strcmp(l, "le"))
            return slm_fail(SLM_E_ARG, "histogram %s: the label name le is reserved", name);
        for (int j = 0; j < i; j++)
            if (!strcmp(label_names[j], l))
                return slm_fail(SLM_E_ARG, "metric %s: label %s given twice", name, l);
    }
    if (type != SLM_METRIC_HISTOGRAM) return SLM_OK;
    if (n_bounds < 1 || n_bounds > SLM_METRICS_MAX_BUCKETS || !bounds)
        return slm_fail(SLM_E_ARG, "histogram %s: %d bucket bounds (expected 1..%d)", name,
                        n_bounds, SLM_METRICS_MAX_BUCKETS);
    for (int i = 0; i < n_bounds; i++)
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return slm_fail(SLM_E_ARG,
                            "histogram %s: bucket bound %d (%g) is not finite or not above "
                            "the previous one",
                            name, i, bounds[i]);
    return SLM_OK;
}

slm_status slm_metrics_family(slm_metrics *r, slm_metric_type type, const char *name,
                              const char *help, int n_labels, const char *const *label_names,
                              int n_bounds, const double *bounds, slm_metric_family **out) {
    *out = NULL;
    pthread_mutex_lock(&r->mu);
    slm_status st = check_family(r, type, name, n_labels, label_names, n_bounds, bounds);
    if (st) {
        pthread_mutex_unlock(&r->mu);
        return st;
    }
    slm_metric_family *f = slm_xcalloc(1, sizeof *f);
    f->reg = r;
    f->type = type;
    f->name = slm_xstrdup(name);
    f->help = slm_xstrdup(help ? help : "");
    f->n_labels = n_labels;
    for (int i = 0; i < n_labels; i++)
        f->labels[i] = slm_xstrdup(label_names[i]);
    if (type == SLM_METRIC_HISTOGRAM) {
        f->n_bounds = n_bounds;
        memcpy(f->bounds, bounds, (size_t)n_bounds * sizeof *bounds);
    }
    if (r->last)
        r->last->next = f;
    else
        r->first = f;
    r->last = f;
    pthread_mutex_unlock(&r->mu);
    *out = f;
    return SLM_OK;
}

slm_status slm_metrics_series(slm_metric_family *f, const char *const *label_values,
                              slm_metric **out) {
    *out = NULL;
    for (int i = 0; i < f->n_labels; i++)
        if (!label_values || !label_values[i])
            return slm_fail(SLM_E_ARG, "metric %s: no value for label %s", f->name, f->labels[i]);
    slm_metrics *r = f->reg;
    pthread_mutex_lock(&r->mu);
    for (slm_metric *m = f->first; m; m = m->next) {
        bool same = true;
        for (int i = 0; i < f->n_labels && same; i++)
            same = !strcmp(m->values[i], label_values[i]);
        if (same) {
            pthread_mutex_unlock(&r->mu);
            *out = m;
            return SLM_OK;
        }
    }
    slm_metric *m = slm_xcalloc(1, sizeof *m);
    m->fam = f;
    m->values = slm_xcalloc((size_t)f->n_labels + 1, sizeof *m->values);
    for (int i = 0; i < f->n_labels; i++)
        m->values[i] = slm_xstrdup(label_values[i]);
    store_f64(&m->value, 0.0);
    if (f->type == SLM_METRIC_HISTOGRAM) {
        m->counts = slm_xcalloc((size_t)f->n_bounds + 1, sizeof *m->counts);
        for (int i = 0; i <= f->n_bounds; i++)
            atomic_init(&m->counts[i], 0);
    }
    if (f->last)
        f->last->next = m;
    else
        f->first = m;
    f->last = m;
    pthread_mutex_unlock(&r->mu);
    *out = m;
    return SLM_OK;
}

static slm_metric *plain(slm_metrics *r, slm_metric_type t, const char *name, const char *help,
                         int n_bounds, const double *bounds) {
    slm_metric_family *f;
    slm_metric *m = NULL;
    if (slm_metrics_family(r, t, name, help, 0, NULL, n_bounds, bounds, &f)) return NULL;
    if (slm_metrics_series(f, NULL, &m)) return NULL;
    return m;
}

slm_metric *slm_metrics_counter(slm_metrics *r, const char *name, const char *help) {
    return plain(r, SLM_METRIC_COUNTER, name, help, 0, NULL);
}
slm_metric *slm_metrics_gauge(slm_metrics *r, const char *name, const char *help) {
    return plain(r, SLM_METRIC_GAUGE, name, help, 0, NULL);
}
slm_metric *slm_metrics_histogram(slm_metrics *r, const char *name, const char *help, int n_bounds,
                                  const double *bounds) {
    return plain(r, SLM_METRIC_HISTOGRAM, name, help, n_bounds, bounds);
}

// ---------------------------------------------------------------------------------------------
// Updates

void slm_metric_inc(slm_metric *m, double by) {
    if (!m || m->fam->type == SLM_METRIC_HISTOGRAM || isnan(by)) return;
    if (m->fam->type == SLM_METRIC_COUNTER && by < 0) return;
    add_f64(&m->value, by);
}

void slm_metric_set(slm_metric *m, double v) {
    if (!m || m->fam->type == SLM_METRIC_HISTOGRAM) return;
    store_f64(&m->value, v);
}

void slm_metric_observe(slm_metric *m, double v) {
    if (!m || m->fam->type != SLM_METRIC_HISTOGRAM || isnan(v)) return;
    const slm_metric_family *f = m->fam;
    int b = 0; // first bucket whose upper bound holds v (le: v <= bound); n_bounds = +Inf
    while (b < f->n_bounds && v > f->bounds[b])
        b++;
    atomic_fetch_add_explicit(&m->counts[b], 1, memory_order_relaxed);
    add_f64(&m->value, v);
}

double slm_metric_value(const slm_metric *m) {
    return m ? load_f64(&m->value) : NAN;
}

uint64_t slm_metric_count(const slm_metric *m) {
    if (!m || m->fam->type != SLM_METRIC_HISTOGRAM) return 0;
    uint64_t n = 0;
    for (int i = 0; i <= m->fam->n_bounds; i++)
        n += atomic_load_explicit(&m->counts[i], memory_order_relaxed);
    return n;
}

// ---------------------------------------------------------------------------------------------
// Text exposition

const char *slm_metrics_fmt_value(double v, char buf[32]) {
    if (isnan(v)) return strcpy(buf, "NaN");
    if (isinf(v)) return strcpy(buf, v > 0 ? "+Inf" : "-Inf");
    // the shortest that reads back exactly, from 6 digits (so 10 prints "10", not "1e+01")
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

// HELP text: backslash and line feed escaped. Label values also escape the double quote.
static void put_escaped(slm_buf *b, const char *s, bool quote) {
    for (const char *p = s; *p; p++) {
        if (*p == '\\')
            slm_buf_append(b, "\\\\", 2);
        else if (*p == '\n')
            slm_buf_append(b, "\\n", 2);
        else if (quote && *p == '"')
            slm_buf_append(b, "\\\"", 2);
        else
            slm_buf_append(b, p, 1);
    }
}

// name{labels[,le="..."]} value
static void put_sample(slm_buf *b, const slm_metric *m, const char *suffix, const char *le,
                       double v) {
    const slm_metric_family *f = m->fam;
    slm_buf_appendf(b, "%s%s", f->name, suffix);
    if (f->n_labels || le) {
        slm_buf_append(b, "{", 1);
        for (int i = 0; i < f->n_labels; i++) {
            slm_buf_appendf(b, "%s%s=\"", i ? "," : "", f->labels[i]);
            put_escaped(b, m->values[i], true);
            slm_buf_append(b, "\"", 1);
        }
        if (le) slm_buf_appendf(b, "%sle=\"%s\"", f->n_labels ? "," : "", le);
        slm_buf_append(b, "}", 1);
    }
    char num[32];
    slm_buf_appendf(b, " %s\n", slm_metrics_fmt_value(v, num));
}

void slm_metrics_render(slm_metrics *r, slm_buf *out) {
    pthread_mutex_lock(&r->mu);
    for (const slm_metric_family *f = r->first; f; f = f->next) {
        slm_buf_appendf(out, "# HELP %s ", f->name);
        put_escaped(out, f->help, false);
        slm_buf_appendf(out, "\n# TYPE %s %s\n", f->name, type_name(f->type));
        for (const slm_metric *m = f->first; m; m = m->next) {
            if (f->type != SLM_METRIC_HISTOGRAM) {
                put_sample(out, m, "", NULL, load_f64(&m->value));
                continue;
            }
            uint64_t cum = 0;
            char le[32];
            for (int i = 0; i <= f->n_bounds; i++) {
                cum += atomic_load_explicit(&m->counts[i], memory_order_relaxed);
                const char *bound =
                    i < f->n_bounds ? slm_metrics_fmt_value(f->bounds[i], le) : "+Inf";
                put_sample(out, m, "_bucket", bound, (double)cum);
            }
            put_sample(out, m, "_sum", NULL, load_f64(&m->value));
            put_sample(out, m, "_count", NULL, (double)cum);
        }
    }
    pthread_mutex_unlock(&r->mu);
}
