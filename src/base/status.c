// Status messages, logging, the fatal path and checked allocation.
#include "base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLM_MSG_CAP 2048

static _Thread_local char tl_msg[SLM_MSG_CAP];
static int g_rank = 0, g_world = 1;
static slm_log_level g_level = SLM_LOG_INFO;
static void (*g_abort_hook)(int) = NULL;
// The outputs registered by logfile.c and progress.c (base.h "Internal to base"); NULL: none.
static void (*g_sink_set_rank)(int, int) = NULL;
static void (*g_sink_record)(slm_log_level, const char *, bool) = NULL;
static void (*g_clear_line)(void) = NULL;

void slm_log_set_file_sink_(void (*set_rank)(int rank, int world),
                            void (*record)(slm_log_level level, const char *msg, bool forward)) {
    g_sink_set_rank = set_rank;
    g_sink_record = record;
}

void slm_log_set_clear_line_(void (*clear_line)(void)) {
    g_clear_line = clear_line;
}

slm_status slm_fail(slm_status code, const char *fmt, ...) {
    // Formatted aside first: an argument may be slm_errmsg() itself (the thread's buffer).
    char msg[SLM_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(tl_msg, msg, sizeof tl_msg);
    return code;
}

slm_status slm_fail_wrap(slm_status code, const char *fmt, ...) {
    char ctx[SLM_MSG_CAP], old[SLM_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, tl_msg, sizeof old);
    // Truncation of an over-long message is acceptable; the context comes first.
    size_t n = strlen(ctx);
    if (n > SLM_MSG_CAP - 3) n = SLM_MSG_CAP - 3;
    memcpy(tl_msg, ctx, n);
    memcpy(tl_msg + n, ": ", 2);
    size_t m = strlen(old);
    if (m > SLM_MSG_CAP - 1 - n - 2) m = SLM_MSG_CAP - 1 - n - 2;
    memcpy(tl_msg + n + 2, old, m);
    tl_msg[n + 2 + m] = 0;
    return code;
}

const char *slm_errmsg(void) {
    return tl_msg;
}

void slm_set_errmsg(const char *msg) {
    snprintf(tl_msg, sizeof tl_msg, "%s", msg ? msg : "");
}

const char *slm_status_name(slm_status st) {
    switch (st) {
    case SLM_OK:
        return "ok";
    case SLM_E_ARG:
        return "argument";
    case SLM_E_IO:
        return "io";
    case SLM_E_FORMAT:
        return "format";
    case SLM_E_CHECKSUM:
        return "checksum";
    case SLM_E_NOMEM:
        return "out of memory";
    case SLM_E_UNSUPPORTED:
        return "unsupported";
    case SLM_E_NUMERIC:
        return "numeric";
    case SLM_E_COMM:
        return "communication";
    case SLM_E_TIMEOUT:
        return "timeout";
    case SLM_E_INTERRUPTED:
        return "interrupted";
    }
    return "unknown";
}

void slm_log_set_rank(int rank, int world) {
    g_rank = rank;
    g_world = world;
    if (g_sink_set_rank) g_sink_set_rank(rank, world);
}

void slm_log_set_level(slm_log_level min_level) {
    g_level = min_level;
}

static void vlog(slm_log_level level, const char *fmt, va_list ap) {
    static const char *names[] = {"debug", "info", "warning", "error"};
    char line[SLM_MSG_CAP + 128];
    int n;
    va_list ap2;
    va_copy(ap2, ap);
    if (g_world > 1)
        n = snprintf(line, sizeof line, "shardlm[rank %d/%d] %s: ", g_rank, g_world, names[level]);
    else
        n = snprintf(line, sizeof line, "shardlm %s: ", names[level]);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    // One fwrite per line keeps lines from different threads whole.
    if (g_clear_line) g_clear_line();
    fwrite(line, 1, len, stderr);
    // The same message in the per-rank log file (and rank 0's queue for warnings / errors).
    char msg[SLM_MSG_CAP];
    vsnprintf(msg, sizeof msg, fmt, ap2);
    va_end(ap2);
    if (g_sink_record) g_sink_record(level, msg, true);
}

void slm_log(slm_log_level level, const char *fmt, ...) {
    if (level < g_level) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void slm_set_abort_hook(void (*hook)(int code)) {
    g_abort_hook = hook;
}

void slm_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(SLM_LOG_ERROR, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fflush(stderr);
    if (g_abort_hook) g_abort_hook(70);
    abort();
}

void *slm_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) slm_fatal("out of memory allocating %zu bytes", bytes);
    return p;
}

void *slm_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) slm_fatal("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *slm_xrealloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) slm_fatal("out of memory reallocating %zu bytes", bytes);
    return q;
}

void *slm_xaligned(size_t bytes) {
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0)
        slm_fatal("out of memory allocating %zu aligned bytes", bytes);
    return p;
}

char *slm_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = slm_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

slm_status slm_parse_i64(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return slm_fail(SLM_E_ARG, "%s: expected an integer, got an empty value", what);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return slm_fail(SLM_E_ARG, "%s: expected an integer, got \"%s\"", what, s);
    if (v < lo || v > hi)
        return slm_fail(SLM_E_ARG, "%s: %lld is out of range [%lld, %lld]", what, v, (long long)lo,
                        (long long)hi);
    *out = v;
    return SLM_OK;
}

slm_status slm_parse_f64(const char *what, const char *s, double *out) {
    if (!s || !*s) return slm_fail(SLM_E_ARG, "%s: expected a number, got an empty value", what);
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end) return slm_fail(SLM_E_ARG, "%s: expected a number, got \"%s\"", what, s);
    *out = v;
    return SLM_OK;
}
