// The flight recorder: a ring of the last SLM_FLIGHT_RING collectives of this rank and its
// async-signal-safe JSON dump (contract in dist.h, "Flight recorder"). Nothing here allocates
// after start-up: entries, the group table and the dump buffer are static, and the dump is
// formatted by hand (no stdio) and written with open / write / rename, so it can run inside a
// signal handler.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"
#include "dist/dist_internal.h"

typedef struct flight_entry {
    volatile uint64_t id; // 0: empty; written last on begin
    uint64_t seq;
    int gid;
    int state;
    const char *op, *what; // string literals
    int64_t bytes;
    int64_t step;
    const char *phase; // string literal
    char ctx[80];
    double t_start, t_end;
    double t_wait; // when a wait for it began (0: completed without a wait)
} flight_entry;

typedef struct flight_group {
    bool used;
    char name[64];
    int size, n_ranks;
    int ranks[SLM_FLIGHT_GROUP_RANKS];
    uint64_t last_seq;
} flight_group;

static flight_entry g_ring[SLM_FLIGHT_RING];
static flight_group g_groups[SLM_FLIGHT_MAX_GROUPS];
static uint64_t g_next_id = 1;
static volatile int64_t g_step = 0;
static const char *volatile g_phase = "start";
static char g_dump_path[4096], g_dump_tmp[4200], g_host[128];
static int g_rank = 0, g_world = 1;
static char g_buf[SLM_FLIGHT_RING * 450 + 65536]; // the dump's text
static const char *g_ctx_src = NULL;              // dist.c's context string (slm_dist_set_context)

static double now_unix(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); // async-signal-safe
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void slm_flight_set_where(int64_t step, const char *phase) {
    g_step = step;
    g_phase = phase ? phase : "";
}

void slm_flight_set_context_source(const char *ctx) {
    g_ctx_src = ctx;
}

int slm_flight_group_add(const char *name, int size, const int *ranks) {
    for (int g = 0; g < SLM_FLIGHT_MAX_GROUPS; g++) {
        flight_group *G = &g_groups[g];
        if (G->used) continue;
        memset(G, 0, sizeof *G);
        snprintf(G->name, sizeof G->name, "%s", name ? name : "group");
        G->size = size;
        G->n_ranks = size < SLM_FLIGHT_GROUP_RANKS ? size : SLM_FLIGHT_GROUP_RANKS;
        for (int i = 0; i < G->n_ranks; i++)
            G->ranks[i] = ranks[i];
        G->used = true;
        return g;
    }
    return -1;
}

void slm_flight_group_remove(int gid) {
    if (gid >= 0 && gid < SLM_FLIGHT_MAX_GROUPS) g_groups[gid].used = false;
}

uint64_t slm_flight_begin(int gid, uint64_t seq, const char *op, const char *what, int64_t bytes) {
    uint64_t id = g_next_id++;
    flight_entry *e = &g_ring[(id - 1) % SLM_FLIGHT_RING];
    e->id = 0; // invalid while it is rewritten
    e->seq = seq;
    e->gid = gid;
    e->state = SLM_FLIGHT_STARTED;
    e->op = op;
    e->what = what;
    e->bytes = bytes;
    e->step = g_step;
    e->phase = g_phase;
    if (g_ctx_src)
        snprintf(e->ctx, sizeof e->ctx, "%s", g_ctx_src);
    else
        e->ctx[0] = 0;
    e->t_start = now_unix();
    e->t_end = 0;
    e->t_wait = 0;
    if (gid >= 0 && gid < SLM_FLIGHT_MAX_GROUPS) g_groups[gid].last_seq = seq;
    e->id = id;
    return id;
}

void slm_flight_mark(uint64_t id, int state) {
    if (!id) return;
    flight_entry *e = &g_ring[(id - 1) % SLM_FLIGHT_RING];
    if (e->id != id) return;
    if (state == SLM_FLIGHT_DONE) e->t_end = now_unix();
    if (state == SLM_FLIGHT_WAITING && !(e->t_wait > 0)) e->t_wait = now_unix();
    e->state = state;
}

// ---------------------------------------------------------------------------------------------
// Async-signal-safe formatting into g_buf

typedef struct sw {
    char *b;
    size_t cap, n;
} sw;

static void put(sw *w, const char *s, size_t len) {
    if (w->n + len > w->cap) len = w->cap > w->n ? w->cap - w->n : 0;
    memcpy(w->b + w->n, s, len);
    w->n += len;
}
static void puts_(sw *w, const char *s) {
    put(w, s, strlen(s));
}
static void put_u64(sw *w, uint64_t v) {
    char t[24];
    int i = 24;
    do {
        t[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(w, t + i, (size_t)(24 - i));
}
static void put_i64(sw *w, int64_t v) {
    if (v < 0) {
        put(w, "-", 1);
        put_u64(w, (uint64_t)0 - (uint64_t)v);
    } else {
        put_u64(w, (uint64_t)v);
    }
}
// A non-negative time in seconds with 6 decimals (0 -> null).
static void put_time(sw *w, double t) {
    if (!(t > 0) || t > 1e15) {
        puts_(w, "null");
        return;
    }
    uint64_t us = (uint64_t)(t * 1e6 + 0.5);
    put_u64(w, us / 1000000);
    char f[8] = ".000000";
    uint64_t r = us % 1000000;
    for (int i = 6; i >= 1; i--, r /= 10)
        f[i] = (char)('0' + r % 10);
    put(w, f, 7);
}
// A JSON string of at most `max` bytes of s (NULL: null).
static void put_jstr(sw *w, const char *s, size_t max) {
    if (!s) {
        puts_(w, "null");
        return;
    }
    put(w, "\"", 1);
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            put(w, esc, 2);
        } else if (c < 0x20) {
            static const char hex[] = "0123456789abcdef";
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(w, esc, 6);
        } else {
            put(w, (const char *)&c, 1);
        }
    }
    put(w, "\"", 1);
}
static const char *state_name(int s) {
    return s == SLM_FLIGHT_WAITING ? "waiting" : s == SLM_FLIGHT_DONE ? "done" : "started";
}

static size_t format_dump(const char *reason) {
    sw w = {g_buf, sizeof g_buf - 8, 0}; // room for the closing brackets
    puts_(&w, "{\"format\":\"shardlm-flight-1\",\"rank\":");
    put_i64(&w, g_rank);
    puts_(&w, ",\"world\":");
    put_i64(&w, g_world);
    puts_(&w, ",\"pid\":");
    put_i64(&w, (int64_t)getpid());
    puts_(&w, ",\"host\":");
    put_jstr(&w, g_host, sizeof g_host);
    puts_(&w, ",\"reason\":");
    put_jstr(&w, reason, 64);
    puts_(&w, ",\"time\":");
    put_time(&w, now_unix());
    puts_(&w, ",\"step\":");
    put_i64(&w, g_step);
    puts_(&w, ",\"phase\":");
    put_jstr(&w, g_phase, 32);
    puts_(&w, ",\"context\":");
    put_jstr(&w, g_ctx_src, 200);
    puts_(&w, ",\n\"groups\":[");
    bool first = true;
    for (int g = 0; g < SLM_FLIGHT_MAX_GROUPS; g++) {
        const flight_group *G = &g_groups[g];
        if (!G->used) continue;
        puts_(&w, first ? "\n{\"id\":" : ",\n{\"id\":");
        first = false;
        put_i64(&w, g);
        puts_(&w, ",\"name\":");
        put_jstr(&w, G->name, sizeof G->name);
        puts_(&w, ",\"size\":");
        put_i64(&w, G->size);
        puts_(&w, ",\"seq\":");
        put_u64(&w, G->last_seq);
        puts_(&w, ",\"ranks\":[");
        for (int i = 0; i < G->n_ranks; i++) {
            if (i) put(&w, ",", 1);
            put_i64(&w, G->ranks[i]);
        }
        puts_(&w, "]}");
    }
    puts_(&w, "],\n\"entries\":[");
    uint64_t last = g_next_id - 1, lo = last > SLM_FLIGHT_RING ? last - SLM_FLIGHT_RING + 1 : 1;
    first = true;
    for (uint64_t id = lo; id <= last && w.n + 600 < w.cap; id++) {
        const flight_entry *e = &g_ring[(id - 1) % SLM_FLIGHT_RING];
        if (e->id != id) continue;
        puts_(&w, first ? "\n{\"seq\":" : ",\n{\"seq\":");
        first = false;
        put_u64(&w, e->seq);
        puts_(&w, ",\"group\":");
        put_jstr(&w, e->gid >= 0 ? g_groups[e->gid].name : "?", 64);
        puts_(&w, ",\"op\":");
        put_jstr(&w, e->op, 32);
        puts_(&w, ",\"what\":");
        put_jstr(&w, e->what, 80);
        puts_(&w, ",\"bytes\":");
        put_i64(&w, e->bytes);
        puts_(&w, ",\"step\":");
        put_i64(&w, e->step);
        puts_(&w, ",\"phase\":");
        put_jstr(&w, e->phase, 32);
        puts_(&w, ",\"context\":");
        put_jstr(&w, e->ctx, sizeof e->ctx);
        puts_(&w, ",\"t_start\":");
        put_time(&w, e->t_start);
        puts_(&w, ",\"t_end\":");
        put_time(&w, e->state == SLM_FLIGHT_DONE ? e->t_end : 0);
        puts_(&w, ",\"t_wait\":");
        put_time(&w, e->t_wait);
        puts_(&w, ",\"state\":");
        put_jstr(&w, state_name(e->state), 16);
        puts_(&w, "}");
    }
    w.cap += 8;
    puts_(&w, "]}\n");
    return w.n;
}

void slm_flight_set_dump_path(const char *path, int rank, int world) {
    g_rank = rank;
    g_world = world;
    if (gethostname(g_host, sizeof g_host - 1) != 0) snprintf(g_host, sizeof g_host, "unknown");
    if (!path || strlen(path) >= sizeof g_dump_path) {
        g_dump_path[0] = 0;
        return;
    }
    snprintf(g_dump_path, sizeof g_dump_path, "%s", path);
    snprintf(g_dump_tmp, sizeof g_dump_tmp, "%s.tmp", path);
}

bool slm_flight_dump(const char *reason) {
    if (!g_dump_path[0]) return false;
    size_t n = format_dump(reason);
    int fd = open(g_dump_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    size_t off = 0;
    while (off < n) {
        ssize_t k = write(fd, g_buf + off, n - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        off += (size_t)k;
    }
    close(fd);
    if (off != n) return false;
    return rename(g_dump_tmp, g_dump_path) == 0;
}

const char *slm_flight_dump_path(void) {
    return g_dump_path[0] ? g_dump_path : NULL;
}

// ---------------------------------------------------------------------------------------------
// Signals

static void on_usr2(int sig) {
    (void)sig;
    int saved = errno;
    slm_flight_dump("SIGUSR2");
    errno = saved;
}

static void on_fatal(int sig) {
    const char *r = sig == SIGSEGV   ? "signal SIGSEGV"
                    : sig == SIGBUS  ? "signal SIGBUS"
                    : sig == SIGFPE  ? "signal SIGFPE"
                    : sig == SIGILL  ? "signal SIGILL"
                    : sig == SIGABRT ? "signal SIGABRT"
                                     : "fatal signal";
    slm_flight_dump(r);
    signal(sig, SIG_DFL); // SA_RESETHAND did this already; the re-raise ends the process
    raise(sig);
}

void slm_flight_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_usr2;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        sigaction(fatal[i], &sa, NULL);
}
