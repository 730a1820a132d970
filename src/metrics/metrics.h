// metrics: a small Prometheus-style metrics registry (counters, gauges, histograms with fixed
// buckets, labels), its text exposition writer and an HTTP server for /metrics (libmicrohttpd).
//
// Format: the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/): per family one "# HELP name
// text" line (backslash and line feed escaped as \\ and \n) and one "# TYPE name counter|gauge|
// histogram" line, then its samples, one per line: name{label="value",...} value. Label values
// escape backslash, double quote and line feed (\\, \", \n). Histograms write cumulative
// name_bucket{...,le="bound"} lines ending with le="+Inf", then name_sum and name_count.
// Values print as the shortest decimal that reads back to the same double ("+Inf", "-Inf",
// "NaN" for the non-finite ones). Naming: base units (seconds, bytes), counters end in _total.
//
// Threads: registration (families, series) takes the registry's mutex and allocates; it is done
// at set-up. Updating a series (inc / set / observe) through its handle is lock-free (C11
// atomics, no allocation), so the training thread never waits for a scrape; rendering takes
// the mutex only to walk the registered series (registration waits, updates do not). A scrape
// may see the values of a step half-updated (each value is read atomically; a histogram's
// _count is the sum of the bucket counts it printed, so buckets and count always agree).
#ifndef SLM_METRICS_H
#define SLM_METRICS_H

#include "base/base.h"

typedef enum { SLM_METRIC_COUNTER, SLM_METRIC_GAUGE, SLM_METRIC_HISTOGRAM } slm_metric_type;

#define SLM_METRICS_MAX_LABELS 4   // label names per family
#define SLM_METRICS_MAX_BUCKETS 32 // finite bucket bounds per histogram (+Inf is implicit)

typedef struct slm_metrics slm_metrics;               // a registry
typedef struct slm_metric_family slm_metric_family;   // one metric name, its type and labels
typedef struct slm_metric slm_metric;                 // one series (one set of label values)
typedef struct slm_metrics_server slm_metrics_server; // an HTTP server for /metrics

// An empty registry. Free with slm_metrics_free (after stopping any server that renders it).
slm_metrics *slm_metrics_new(void);
void slm_metrics_free(slm_metrics *r);

// Registers a family. name: [a-zA-Z_:][a-zA-Z0-9_:]*, unique in the registry; a counter's
// name ends in "_total". help: any UTF-8 text (escaped when written). label_names[n_labels]
// (n_labels <= SLM_METRICS_MAX_LABELS): [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__", no
// "le" for histograms, no duplicates. Histograms: bounds[n_bounds], finite and strictly
// increasing (1 <= n_bounds <= SLM_METRICS_MAX_BUCKETS); ignored for the other types. Strings
// and bounds are copied. *out is owned by the registry. Errors: SLM_E_ARG naming the family
// and what is wrong.
slm_status slm_metrics_family(slm_metrics *r, slm_metric_type type, const char *name,
                              const char *help, int n_labels, const char *const *label_names,
                              int n_bounds, const double *bounds, slm_metric_family **out);
// The series of `f` with label_values[n_labels of f] (any UTF-8, copied): created at 0 on first
// use, the same handle afterwards. Owned by the registry. Errors: SLM_E_ARG for a NULL value.
slm_status slm_metrics_series(slm_metric_family *f, const char *const *label_values,
                              slm_metric **out);
// Registers an unlabelled family and returns its one series; NULL on error (slm_errmsg says
// why). Bounds as for slm_metrics_family (histograms only).
slm_metric *slm_metrics_counter(slm_metrics *r, const char *name, const char *help);
slm_metric *slm_metrics_gauge(slm_metrics *r, const char *name, const char *help);
slm_metric *slm_metrics_histogram(slm_metrics *r, const char *name, const char *help, int n_bounds,
                                  const double *bounds);

// Updates (lock-free, no allocation; NULL m is ignored so optional series need no checks).
// inc: counters and gauges, by >= 0 for counters (a negative or NaN step is ignored).
void slm_metric_inc(slm_metric *m, double by);
// set: gauges; also counters that mirror a monotone total kept elsewhere (bytes sent).
void slm_metric_set(slm_metric *m, double v);
// observe: histograms (NaN is ignored).
void slm_metric_observe(slm_metric *m, double v);
// Current value (counter, gauge) or sum of observations (histogram); NaN for NULL.
double slm_metric_value(const slm_metric *m);
// Observations of a histogram (0 for other types or NULL).
uint64_t slm_metric_count(const slm_metric *m);

// Appends the whole registry in the text exposition format to *out (families in registration
// order, series in creation order; a family without series writes only HELP and TYPE).
void slm_metrics_render(slm_metrics *r, slm_buf *out);

// Formats v as the exposition format writes it (shortest round-trip decimal, +Inf / -Inf /
// NaN) into buf[32]; returns buf.
const char *slm_metrics_fmt_value(double v, char buf[32]);

// ---------------------------------------------------------------------------------------------
// The /metrics server

// Parses a listen address: "HOST:PORT", ":PORT" (host 127.0.0.1: loopback unless the user names
// another) or "[IPV6]:PORT"; PORT 0..65535 (0 picks a free port). HOST is a numeric IPv4 / IPv6
// address or a name such as localhost (resolved when the server starts). host gets the host
// part (at most host_cap - 1 bytes). Errors: SLM_E_ARG naming the address and what is expected.
slm_status slm_metrics_parse_addr(const char *addr, char *host, size_t host_cap, int *port);

// Starts serving `r` over HTTP on `addr` (slm_metrics_parse_addr) on libmicrohttpd's own
// thread: GET or HEAD /metrics answers 200 with the rendered registry (Content-Type
// text/plain; version=0.0.4; charset=utf-8), any other path 404, any other method 405. The
// socket is bound and listening when this returns, so a port in use fails here. At most 64
// connections at once, each closed after 10 s idle. `r` is borrowed until slm_metrics_server_stop.
// Errors: SLM_E_ARG (bad address, unknown host), SLM_E_IO naming the address and the system's
// reason (port in use, permission), and a hint (another --metrics-addr, or :0).
slm_status slm_metrics_server_start(const char *addr, slm_metrics *r, slm_metrics_server **out);
// The port the server listens on (the chosen one for port 0).
int slm_metrics_server_port(const slm_metrics_server *s);
// "HOST:PORT" it listens on (borrowed, valid until stop).
const char *slm_metrics_server_addr(const slm_metrics_server *s);
// Requests answered so far (all paths).
uint64_t slm_metrics_server_requests(const slm_metrics_server *s);
// Stops the server (joins its thread, closes the socket) and frees it. Safe on NULL.
void slm_metrics_server_stop(slm_metrics_server *s);

#endif
