// The per-rank log file (RUN_DIR/logs/rank_NNNNN.log), the queue of warnings and errors that
// rank 0 prints for the other ranks, and the process's resource figures (RSS, CPU). Contract in
// base.h ("Per-rank log files").
#include "base.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define SLM_LOG_EARLY_CAP (64 * 1024) // lines kept before the file is opened
#define SLM_LOG_FWD_CAP (16 * 1024)   // queued warning / error lines of a non-zero rank

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_file = NULL;
static slm_buf g_early;             // lines before slm_log_open_file (bounded)
static bool g_early_full = false;   // the early buffer dropped lines
static slm_buf g_fwd;               // "L<level digit> message\n" lines to forward
static int64_t g_fwd_dropped = 0;   // lines that did not fit in g_fwd
static bool g_fwd_on = false;       // a rank > 0 of a world > 1 queues warnings and errors
static int g_rank = 0, g_world = 1; // as slm_log_set_rank
static char g_host[256] = "";

static const char *const k_level_names[] = {"debug", "info", "warning", "error"};

const char *slm_log_level_name(slm_log_level level) {
    return level >= SLM_LOG_DEBUG && level <= SLM_LOG_ERROR ? k_level_names[level] : "?";
}

const char *slm_log_host(void) {
    pthread_mutex_lock(&g_mu);
    if (!g_host[0] && gethostname(g_host, sizeof g_host - 1) != 0) snprintf(g_host, 2, "?");
    pthread_mutex_unlock(&g_mu);
    return g_host;
}

void slm_utc_timestamp(char out[32]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ts.tv_nsec / 1000000));
}

double slm_unix_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void set_rank(int rank, int world) {
    pthread_mutex_lock(&g_mu);
    g_rank = rank, g_world = world;
    g_fwd_on = world > 1 && rank > 0;
    pthread_mutex_unlock(&g_mu);
}

// One file line: "TIME rank=R host=H level=L message\n" (`rank_host` overrides the rank and
// host part for lines forwarded from another rank). Called with g_mu held.
static void file_line(slm_buf *b, const char *rank_host, slm_log_level level, const char *msg) {
    char ts[32];
    slm_utc_timestamp(ts);
    if (!g_host[0] && gethostname(g_host, sizeof g_host - 1) != 0) snprintf(g_host, 2, "?");
    if (rank_host)
        slm_buf_appendf(b, "%s %s level=%s %s\n", ts, rank_host, slm_log_level_name(level), msg);
    else
        slm_buf_appendf(b, "%s rank=%d host=%s level=%s %s\n", ts, g_rank, g_host,
                        slm_log_level_name(level), msg);
}

static void emit_locked(const char *rank_host, slm_log_level level, const char *msg) {
    slm_buf b = {0};
    file_line(&b, rank_host, level, msg);
    for (size_t i = 0; i + 1 < b.len; i++) // one line per message
        if (b.data[i] == '\n' || b.data[i] == '\r') b.data[i] = ' ';
    if (g_file) {
        fwrite(b.data, 1, b.len, g_file);
        fflush(g_file);
    } else if (!g_early_full) {
        if (g_early.len + b.len <= SLM_LOG_EARLY_CAP)
            slm_buf_append(&g_early, b.data, b.len);
        else
            g_early_full = true;
    }
    slm_buf_free(&b);
}

static void record(slm_log_level level, const char *msg, bool forward) {
    pthread_mutex_lock(&g_mu);
    emit_locked(NULL, level, msg);
    if (forward && g_fwd_on && level >= SLM_LOG_WARN) {
        size_t n = strlen(msg);
        if (g_fwd.len + n + 3 <= SLM_LOG_FWD_CAP) {
            char head[2] = {(char)('0' + (int)level), 0};
            slm_buf_append(&g_fwd, head, 1);
            for (size_t i = 0; i < n; i++) { // one line per message: newlines become spaces
                char c = msg[i] == '\n' ? ' ' : msg[i];
                slm_buf_append(&g_fwd, &c, 1);
            }
            slm_buf_append(&g_fwd, "\n", 1);
        } else {
            g_fwd_dropped++;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

// Every slm_log line is recorded from the start of the process (lines before slm_log_open_file
// are kept for the file), so the sink is registered before main. This object is linked into every
// program that can read what is recorded (the file, the forward queue: functions of this file).
__attribute__((constructor)) static void register_sink(void) {
    slm_log_set_file_sink_(set_rank, record);
}

slm_status slm_log_open_file(const char *path) {
    char *dir = slm_path_parent(path);
    slm_status st = slm_mkdir_p(dir);
    free(dir);
    if (st) return st;
    FILE *f = fopen(path, "a");
    if (!f) return slm_fail(SLM_E_IO, "%s: cannot open the log file: %s", path, strerror(errno));
    pthread_mutex_lock(&g_mu);
    if (g_file) fclose(g_file);
    g_file = f;
    if (g_early.len) fwrite(g_early.data, 1, g_early.len, g_file);
    slm_buf_free(&g_early);
    if (g_early_full)
        emit_locked(NULL, SLM_LOG_WARN, "earlier start-up lines did not fit the log's buffer");
    g_early_full = false;
    fflush(g_file);
    pthread_mutex_unlock(&g_mu);
    return SLM_OK;
}

void slm_log_close_file(void) {
    pthread_mutex_lock(&g_mu);
    if (g_file) fclose(g_file);
    g_file = NULL;
    pthread_mutex_unlock(&g_mu);
}

void slm_log_file_only(slm_log_level level, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    record(level, msg, false);
}

size_t slm_log_forward_pending(void) {
    pthread_mutex_lock(&g_mu);
    size_t n = g_fwd.len + (g_fwd_dropped ? 96 : 0);
    pthread_mutex_unlock(&g_mu);
    return n;
}

size_t slm_log_forward_take(char *buf, size_t cap) {
    if (cap == 0) return 0;
    pthread_mutex_lock(&g_mu);
    if (g_fwd_dropped) {
        char note[96];
        snprintf(note, sizeof note, "%d%lld more warning / error lines: see this rank's log\n",
                 (int)SLM_LOG_WARN, (long long)g_fwd_dropped);
        slm_buf_append(&g_fwd, note, strlen(note));
        g_fwd_dropped = 0;
    }
    // Whole lines only; what does not fit stays queued for the next exchange.
    size_t n = 0;
    while (n < g_fwd.len) {
        const char *nl = memchr(g_fwd.data + n, '\n', g_fwd.len - n);
        size_t end = nl ? (size_t)(nl - g_fwd.data) + 1 : g_fwd.len;
        if (end > cap) break;
        n = end;
    }
    memcpy(buf, g_fwd.data, n);
    memmove(g_fwd.data, g_fwd.data + n, g_fwd.len - n);
    g_fwd.len -= n;
    if (g_fwd.cap) g_fwd.data[g_fwd.len] = 0;
    pthread_mutex_unlock(&g_mu);
    return n;
}

void slm_log_forwarded(int from_rank, const char *host, const char *lines, size_t len) {
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(lines + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - lines) : len;
        if (end > i + 1) {
            int lv = lines[i] - '0';
            if (lv < SLM_LOG_WARN || lv > SLM_LOG_ERROR) lv = SLM_LOG_WARN;
            char msg[2048];
            int mlen = (int)(end - i - 1 < sizeof msg - 1 ? end - i - 1 : sizeof msg - 1);
            memcpy(msg, lines + i + 1, (size_t)mlen);
            msg[mlen] = 0;
            char line[2400];
            int n = snprintf(line, sizeof line, "shardlm[rank %d/%d on %s, forwarded] %s: %s\n",
                             from_rank, g_world, host, slm_log_level_name((slm_log_level)lv), msg);
            if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
            fwrite(line, 1, (size_t)n, stderr);
            char rank_host[320];
            snprintf(rank_host, sizeof rank_host, "rank=%d host=%s forwarded=1", from_rank, host);
            pthread_mutex_lock(&g_mu);
            emit_locked(rank_host, (slm_log_level)lv, msg);
            pthread_mutex_unlock(&g_mu);
        }
        i = end + 1;
    }
}

void slm_proc_usage(slm_proc_usage_info *u) {
    u->rss_bytes = u->peak_rss_bytes = -1;
    u->cpu_s = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        unsigned long long size = 0, res = 0;
        long psz = sysconf(_SC_PAGE_SIZE);
        if (fscanf(f, "%llu %llu", &size, &res) == 2 && psz > 0)
            u->rss_bytes = (double)res * (double)psz;
        fclose(f);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        u->peak_rss_bytes = (double)ru.ru_maxrss * 1024.0; // Linux: KiB
        u->cpu_s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                   (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    }
}
