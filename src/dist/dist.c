// MPI communication layer with bounded waits.
#include "dist/dist.h"
#include "dist/dist_internal.h"

#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_started_mpi = 0; // we called MPI_Init (so we finalize)
static int g_rank = 0, g_world = 1;
static double g_timeout_s = 600.0;
// Idle polling of wait_bounded (slm_dist_set_lazy_poll): 0 = spin 1000 MPI_Test, then one
// every 50 us (training); 1 = 10 spins, then the interval doubles from 50 us up to 1 ms.
static int g_lazy_poll = 0;
static char g_ctx[256] = "";
static double g_wait_s = 0.0; // exposed communication time (slm_dist_wait_seconds)

struct slm_comm {
    MPI_Comm comm;
    int rank, size;
    char name[64];
    int fid;      // flight-recorder group id (-1: none)
    uint64_t seq; // collectives started on it (the flight recorder's sequence numbers)
};
static slm_comm g_world_comm = {0, 0, 1, "world", -1, 0};

// A collective's flight-recorder entry (sequence number = the group's next).
static uint64_t fl_begin(slm_comm *c, const char *op, const char *what, int64_t count,
                         slm_dtype dt) {
    return slm_comm_flight_begin(c, op, what, count * (int64_t)slm_dtype_bytes(dt));
}
static MPI_Op g_bf16_sum = MPI_OP_NULL;

// Optional progress thread (slm_dist_request_progress_thread): polls MPI so non-blocking
// collectives advance while the main thread computes. Needs MPI_THREAD_MULTIPLE.
static double g_progress_us = 0; // requested poll interval; 0: no thread
static volatile int g_progress_run = 0;
static pthread_t g_progress_tid;
static MPI_Comm g_progress_comm = MPI_COMM_NULL;

static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *dt);

// Drives Open MPI's progress engine (opal_progress, which also advances libnbc schedules) by
// probing a private communicator no message is ever sent on; touches no user request.
static void *progress_main(void *arg) {
    (void)arg;
    struct timespec ts = {0, (long)(g_progress_us * 1000.0)};
    while (g_progress_run) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g_progress_comm, &flag, MPI_STATUS_IGNORE);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

void slm_dist_request_progress_thread(double poll_us) {
    g_progress_us = poll_us > 0 ? poll_us : 0;
}

static void abort_hook(int code) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
    abort();
}

slm_status slm_dist_init(int *argc, char ***argv) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
        int provided = 0;
        int want = g_progress_us > 0 ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
        if (MPI_Init_thread(argc, argv, want, &provided) != MPI_SUCCESS)
            return slm_fail(SLM_E_COMM, "MPI_Init_thread failed");
        g_started_mpi = 1;
        if (g_progress_us > 0 && provided < MPI_THREAD_MULTIPLE) {
            slm_warn("MPI does not provide MPI_THREAD_MULTIPLE; no progress thread");
            g_progress_us = 0;
        }
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    g_world_comm.comm = MPI_COMM_WORLD;
    g_world_comm.rank = g_rank;
    g_world_comm.size = g_world;
    snprintf(g_world_comm.name, sizeof g_world_comm.name, "world");
    if (g_bf16_sum == MPI_OP_NULL) MPI_Op_create(bf16_sum_fn, 1, &g_bf16_sum);
    slm_log_set_rank(g_rank, g_world);
    slm_flight_set_context_source(g_ctx);
    if (g_world > 1 && g_world_comm.fid < 0) {
        int *ranks = slm_xmalloc((size_t)g_world * sizeof(int));
        for (int r = 0; r < g_world; r++)
            ranks[r] = r;
        g_world_comm.fid = slm_flight_group_add("world", g_world, ranks);
        free(ranks);
    }
    if (g_progress_us > 0 && g_world > 1 && !g_progress_run) {
        MPI_Comm_dup(MPI_COMM_WORLD, &g_progress_comm);
        g_progress_run = 1;
        if (pthread_create(&g_progress_tid, NULL, progress_main, NULL) != 0) {
            g_progress_run = 0;
            slm_warn("cannot start the MPI progress thread");
        }
    }
    slm_set_abort_hook(abort_hook);
    return SLM_OK;
}

void slm_dist_finalize(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (g_progress_run) {
        g_progress_run = 0;
        pthread_join(g_progress_tid, NULL);
        if (init && !fin) MPI_Comm_free(&g_progress_comm);
    }
    if (init && !fin && g_bf16_sum != MPI_OP_NULL) MPI_Op_free(&g_bf16_sum);
    g_bf16_sum = MPI_OP_NULL;
    if (g_started_mpi && init && !fin) MPI_Finalize();
    g_started_mpi = 0;
}

int slm_dist_rank(void) {
    return g_rank;
}
int slm_dist_world(void) {
    return g_world;
}
void slm_dist_set_timeout(double seconds) {
    g_timeout_s = seconds;
}
void slm_dist_set_lazy_poll(bool lazy) {
    g_lazy_poll = lazy ? 1 : 0;
}
bool slm_dist_lazy_poll(void) {
    return g_lazy_poll != 0;
}
void slm_dist_set_context(const char *ctx) {
    snprintf(g_ctx, sizeof g_ctx, "%s", ctx ? ctx : "");
}

static MPI_Datatype mpi_dt(slm_dtype dt) {
    switch (dt) {
    case SLM_DTYPE_F32:
        return MPI_FLOAT;
    case SLM_DTYPE_F64:
        return MPI_DOUBLE;
    case SLM_DTYPE_I64:
        return MPI_INT64_T;
    case SLM_DTYPE_U8:
        return MPI_UINT8_T;
    case SLM_DTYPE_BF16:
        return MPI_UINT16_T;
    case SLM_DTYPE_F16:
        slm_fatal("collectives do not carry fp16 buffers");
    }
    return MPI_BYTE;
}

static MPI_Op mpi_op(slm_redop op) {
    switch (op) {
    case SLM_OP_SUM:
        return MPI_SUM;
    case SLM_OP_MAX:
        return MPI_MAX;
    case SLM_OP_MIN:
        return MPI_MIN;
    }
    return MPI_SUM;
}

double slm_flight_abort_grace(double timeout_s) {
    double g = timeout_s / 2;
    return g < 10 ? g : 10;
}

void slm_dist_timeout_dump(const char *what) {
    bool dumped = slm_flight_dump("collective timeout");
    if (dumped) {
        slm_error("collective %s timed out after %.0f s; flight recorder written to %s; aborting "
                  "in %.0f s",
                  what, g_timeout_s, slm_flight_dump_path(), slm_flight_abort_grace(g_timeout_s));
        double g = slm_flight_abort_grace(g_timeout_s);
        struct timespec ts = {(time_t)g, (long)((g - (double)(time_t)g) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

void slm_dist_timeout_text(char *buf, size_t n, const char *what, const char *group, int size) {
    snprintf(buf, n,
             "collective %s timed out after %.0f s (%s; group: %s, %d ranks); a peer rank is "
             "dead or stuck",
             what, g_timeout_s, g_ctx[0] ? g_ctx : "no context", group, size);
}

double slm_dist_timeout(void) {
    return g_timeout_s;
}
void slm_dist_add_wait(double seconds) {
    g_wait_s += seconds;
}
uint64_t slm_comm_flight_begin(slm_comm *c, const char *op, const char *what, int64_t bytes) {
    return slm_flight_begin(c->fid, ++c->seq, op, what, bytes);
}

// A timed-out wait: the flight recorder's dump, a grace for the peers waiting in the same
// collective to time out and dump too, then the job's end.
static void timed_out(const char *what, const slm_comm *c) {
    slm_dist_timeout_dump(what);
    char msg[1536];
    slm_dist_timeout_text(msg, sizeof msg, what, c ? c->name : "world", c ? c->size : g_world);
    slm_fatal("%s; aborting the job", msg);
}

// Waits for `req` with the deadline; polls with a short sleep after a spin phase. `fl`: its
// flight-recorder entry.
static void wait_bounded(MPI_Request *req, const char *what, const slm_comm *c, uint64_t fl) {
    double t0 = MPI_Wtime();
    int done = 0;
    long spins = 0, spin_max = g_lazy_poll ? 10 : 1000;
    long sleep_ns = 50000, sleep_max_ns = g_lazy_poll ? 1000000 : 50000; // 50 us (1 ms)
    slm_flight_mark(fl, SLM_FLIGHT_WAITING);
    for (;;) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) {
            g_wait_s += MPI_Wtime() - t0;
            slm_flight_mark(fl, SLM_FLIGHT_DONE);
            return;
        }
        if (++spins > spin_max) {
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < sleep_max_ns)
                sleep_ns = sleep_ns * 2 < sleep_max_ns ? sleep_ns * 2 : sleep_max_ns;
        }
        if (g_timeout_s > 0 && MPI_Wtime() - t0 > g_timeout_s) timed_out(what, c);
    }
}

static MPI_Op op_for(slm_dtype dt, slm_redop op, const char *what) {
    if (dt != SLM_DTYPE_BF16) return mpi_op(op);
    if (op != SLM_OP_SUM) slm_fatal("collective %s: bf16 supports SUM only", what);
    return g_bf16_sum;
}

static int count_int(int64_t count, const char *what) {
    if (count < 0 || count > 0x7fffffff)
        slm_fatal("collective %s: count %lld does not fit an MPI int count", what,
                  (long long)count);
    return (int)count;
}

void slm_dist_barrier(const char *what) {
    if (g_world == 1) return;
    MPI_Request r;
    uint64_t fl = fl_begin(&g_world_comm, "barrier", what, 0, SLM_DTYPE_U8);
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    wait_bounded(&r, what, &g_world_comm, fl);
}

void slm_dist_allreduce(void *buf, int64_t count, slm_dtype dt, slm_redop op, const char *what) {
    if (g_world == 1) return;
    MPI_Request r;
    uint64_t fl = fl_begin(&g_world_comm, "allreduce", what, count, dt);
    MPI_Iallreduce(MPI_IN_PLACE, buf, count_int(count, what), mpi_dt(dt), op_for(dt, op, what),
                   MPI_COMM_WORLD, &r);
    wait_bounded(&r, what, &g_world_comm, fl);
}

void slm_dist_bcast(void *buf, int64_t count, slm_dtype dt, int root, const char *what) {
    if (g_world == 1) return;
    MPI_Request r;
    uint64_t fl = fl_begin(&g_world_comm, "bcast", what, count, dt);
    MPI_Ibcast(buf, count_int(count, what), mpi_dt(dt), root, MPI_COMM_WORLD, &r);
    wait_bounded(&r, what, &g_world_comm, fl);
}

void slm_dist_allgather(const void *send, void *recv, int64_t count, slm_dtype dt,
                        const char *what) {
    if (g_world == 1) {
        memmove(recv, send, (size_t)count * slm_dtype_bytes(dt));
        return;
    }
    MPI_Request r;
    uint64_t fl = fl_begin(&g_world_comm, "allgather", what, count, dt);
    MPI_Iallgather(send, count_int(count, what), mpi_dt(dt), recv, (int)count, mpi_dt(dt),
                   MPI_COMM_WORLD, &r);
    wait_bounded(&r, what, &g_world_comm, fl);
}

slm_status slm_dist_agree(slm_status local) {
    if (g_world == 1) return local;
    // Lowest failing rank wins: reduce (failed ? rank : world) with MIN.
    int64_t who = local ? g_rank : g_world;
    slm_dist_allreduce(&who, 1, SLM_DTYPE_I64, SLM_OP_MIN, "status agreement");
    if (who == g_world) return SLM_OK;
    char msg[1024];
    int64_t code = local;
    if (g_rank == who) snprintf(msg, sizeof msg, "%s", slm_errmsg());
    slm_dist_bcast(msg, sizeof msg, SLM_DTYPE_U8, (int)who, "status message");
    slm_dist_bcast(&code, 1, SLM_DTYPE_I64, (int)who, "status code");
    if (g_rank != who) slm_fail((slm_status)code, "rank %d failed: %s", (int)who, msg);
    return (slm_status)code;
}

// Shown bytes of one differing value (longer ones end in "...").
#define AGREE_SHOW 160
// Distinct values named in a disagreement message; contiguous rank runs per value.
#define AGREE_MAX_VALUES 4
#define AGREE_MAX_RUNS 8

// Appends "rank 3" or "ranks 0-2,5" for the ranks r whose hash all[r * n + i] is h.
static void append_ranks(slm_buf *b, const uint64_t *all, int n, int i, uint64_t h) {
    int count = 0;
    for (int r = 0; r < g_world; r++)
        count += all[(size_t)r * n + i] == h;
    slm_buf_appendf(b, "%s", count == 1 ? "rank " : "ranks ");
    int runs = 0;
    for (int r = 0; r < g_world; r++) {
        if (all[(size_t)r * n + i] != h) continue;
        int e = r;
        while (e + 1 < g_world && all[(size_t)(e + 1) * n + i] == h)
            e++;
        if (runs == AGREE_MAX_RUNS) {
            slm_buf_appendf(b, ",...");
            break;
        }
        slm_buf_appendf(b, "%s%d", runs ? "," : "", r);
        if (e > r) slm_buf_appendf(b, "-%d", e);
        runs++;
        r = e;
    }
}

slm_status slm_dist_agree_values(const slm_agree_item *items, int n) {
    if (g_world == 1) return SLM_OK;
    uint64_t names = 0x736c6d61677265ull, values = 0;
    uint64_t *mine = slm_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
    for (int i = 0; i < n; i++) {
        names = slm_xxh64(items[i].name, strlen(items[i].name) + 1, names);
        // The NUL is hashed too; NULL ("(unset)") hashes apart from every string.
        const char *v = items[i].value;
        mine[i] = v ? slm_xxh64(v, strlen(v) + 1, 0) : slm_xxh64("", 0, 1);
        values = slm_xxh64(&mine[i], sizeof mine[i], values);
    }
    // 1. One all-gather of a fixed size: the count, the names and all values, each as one hash.
    int64_t head[3] = {n, (int64_t)names, (int64_t)values};
    int64_t *heads = slm_xmalloc((size_t)g_world * 3 * sizeof(int64_t));
    slm_dist_allgather(head, heads, 3, SLM_DTYPE_I64, "option agreement");
    bool all_same = true;
    for (int r = 1; r < g_world; r++) {
        if (heads[3 * r] != heads[0] || heads[3 * r + 1] != heads[1]) {
            // Different lists (another build): the per-item hashes cannot be lined up.
            slm_status st = slm_fail(SLM_E_ARG,
                                     "ranks disagree on which settings they compare: rank 0 "
                                     "checks %lld, rank %d checks %lld%s (different shardlm "
                                     "builds?)",
                                     (long long)heads[0], r, (long long)heads[3 * r],
                                     heads[3 * r] == heads[0] ? " with other names" : "");
            free(heads), free(mine);
            return st;
        }
        all_same = all_same && heads[3 * r + 2] == heads[2];
    }
    free(heads);
    if (all_same) {
        free(mine);
        return SLM_OK;
    }
    // 2. Something differs: every item's hash, to find which (lists are equal in length now).
    uint64_t *all = slm_xmalloc((size_t)g_world * (size_t)n * sizeof(uint64_t));
    slm_dist_allgather(mine, all, n, SLM_DTYPE_I64, "option agreement (values)");
    free(mine);
    int first = -1;
    bool *differs = slm_xcalloc((size_t)n, sizeof(bool));
    for (int i = 0; i < n; i++) {
        for (int r = 1; r < g_world && !differs[i]; r++)
            differs[i] = all[(size_t)r * n + i] != all[i];
        if (differs[i] && first < 0) first = i;
    }
    if (first < 0) {
        free(all), free(differs);
        return SLM_OK;
    }
    // 3. The first differing item's values themselves, for the message.
    char mine_v[AGREE_SHOW + 1];
    const char *v = items[first].value ? items[first].value : "(unset)";
    if (strlen(v) > AGREE_SHOW)
        snprintf(mine_v, sizeof mine_v, "%.*s...", AGREE_SHOW - 3, v);
    else
        snprintf(mine_v, sizeof mine_v, "%s", v);
    char *vals = slm_xmalloc((size_t)g_world * sizeof mine_v);
    slm_dist_allgather(mine_v, vals, (int64_t)sizeof mine_v, SLM_DTYPE_U8,
                       "option agreement (differing values)");
    slm_buf b = {0};
    slm_buf_appendf(&b, "ranks disagree on %s: ", items[first].name);
    uint64_t shown[AGREE_MAX_VALUES];
    int n_shown = 0;
    for (int r = 0; r < g_world; r++) {
        uint64_t h = all[(size_t)r * n + first];
        bool seen = false;
        for (int k = 0; k < n_shown; k++)
            seen = seen || shown[k] == h;
        if (seen) continue;
        if (n_shown == AGREE_MAX_VALUES) {
            slm_buf_appendf(&b, ", and other values on further ranks");
            break;
        }
        if (n_shown) slm_buf_appendf(&b, ", ");
        append_ranks(&b, all, n, first, h);
        const char *rv = vals + (size_t)r * sizeof mine_v;
        slm_buf_appendf(&b, " %.*s", AGREE_SHOW, rv);
        shown[n_shown++] = h;
    }
    int n_more = 0;
    for (int i = first + 1; i < n; i++) {
        if (!differs[i]) continue;
        if (n_more == 8) {
            slm_buf_appendf(&b, ", ...");
            break;
        }
        slm_buf_appendf(&b, "%s%s", n_more ? ", " : "; also differ: ", items[i].name);
        n_more++;
    }
    slm_status st = slm_fail(items[first].code ? items[first].code : SLM_E_ARG, "%s", b.data);
    slm_buf_free(&b);
    free(vals), free(all), free(differs);
    return st;
}

// ---------------------------------------------------------------------------------------------
// bfloat16

// The conversions are base/'s (slm_f32_to_bf16_1, slm_bf16_to_f32_1).

// The user-defined reduction for bf16 buffers: each pair is widened to fp32, added, and rounded
// back to bf16 (so a k-way reduction rounds k-1 times, as NCCL's bf16 sum does).
static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = slm_f32_to_bf16_1(slm_bf16_to_f32_1(a[i]) + slm_bf16_to_f32_1(b[i]));
}

// ---------------------------------------------------------------------------------------------
// Communicators and non-blocking collectives

slm_comm *slm_comm_world(void) {
    return &g_world_comm;
}

slm_comm *slm_comm_split(slm_comm *parent, int color, int key, const char *name) {
    slm_comm *c = slm_xcalloc(1, sizeof *c);
    c->fid = -1;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "group");
    if (parent->size == 1) { // a one-rank group: no MPI object (MPI may not even be started)
        (void)color, (void)key;
        c->comm = MPI_COMM_NULL;
        c->rank = 0;
        c->size = 1;
        return c;
    }
    if (MPI_Comm_split(parent->comm, color, key, &c->comm) != MPI_SUCCESS)
        slm_fatal("MPI_Comm_split of %s (color %d) failed", parent->name, color);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    if (c->size > 1) { // its members' world ranks, for the flight recorder
        MPI_Group grp, wgrp;
        MPI_Comm_group(c->comm, &grp);
        MPI_Comm_group(MPI_COMM_WORLD, &wgrp);
        int *idx = slm_xmalloc((size_t)c->size * sizeof(int));
        int *wr = slm_xmalloc((size_t)c->size * sizeof(int));
        for (int i = 0; i < c->size; i++)
            idx[i] = i;
        MPI_Group_translate_ranks(grp, c->size, idx, wgrp, wr);
        c->fid = slm_flight_group_add(c->name, c->size, wr);
        free(idx), free(wr);
        MPI_Group_free(&grp);
        MPI_Group_free(&wgrp);
    }
    return c;
}

void slm_comm_free(slm_comm *c) {
    if (!c || c == &g_world_comm) return;
    slm_flight_group_remove(c->fid);
    int fin = 0;
    if (c->comm != MPI_COMM_NULL) MPI_Finalized(&fin);
    if (c->comm != MPI_COMM_NULL && !fin) MPI_Comm_free(&c->comm);
    free(c);
}

int slm_comm_rank(const slm_comm *c) {
    return c->rank;
}
int slm_comm_size(const slm_comm *c) {
    return c->size;
}
const char *slm_comm_name(const slm_comm *c) {
    return c->name;
}

_Static_assert(sizeof(MPI_Request) <= sizeof(uint64_t), "MPI_Request must fit slm_dist_req.h");

static void req_set(slm_dist_req *req, MPI_Request r, const slm_comm *c, const char *what,
                    uint64_t fl) {
    memset(req, 0, sizeof *req);
    memcpy(&req->h, &r, sizeof r);
    req->active = true;
    req->what = what;
    req->comm = c;
    req->t_start = MPI_Wtime();
    req->flight = fl;
}

static void req_done(slm_dist_req *req, const slm_comm *c, const char *what) {
    memset(req, 0, sizeof *req);
    req->what = what;
    req->comm = c;
}

void slm_dist_iallgather(slm_comm *c, const void *send, void *recv, int64_t count, slm_dtype dt,
                         const char *what, slm_dist_req *req) {
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, (size_t)count * slm_dtype_bytes(dt));
        req_done(req, c, what);
        return;
    }
    int n = count_int(count, what);
    count_int(count * c->size, what);
    MPI_Request r;
    uint64_t fl = fl_begin(c, "allgather", what, count, dt);
    MPI_Iallgather(send == recv ? MPI_IN_PLACE : send, n, mpi_dt(dt), recv, n, mpi_dt(dt), c->comm,
                   &r);
    req_set(req, r, c, what, fl);
}

void slm_dist_ireduce_scatter(slm_comm *c, const void *send, void *recv, int64_t count,
                              slm_dtype dt, slm_redop op, const char *what, slm_dist_req *req) {
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, (size_t)count * slm_dtype_bytes(dt));
        req_done(req, c, what);
        return;
    }
    count_int(count * c->size, what);
    MPI_Request r;
    uint64_t fl = fl_begin(c, "reduce_scatter", what, count * c->size, dt);
    MPI_Ireduce_scatter_block(send, recv, count_int(count, what), mpi_dt(dt), op_for(dt, op, what),
                              c->comm, &r);
    req_set(req, r, c, what, fl);
}

void slm_dist_iallreduce(slm_comm *c, void *buf, int64_t count, slm_dtype dt, slm_redop op,
                         const char *what, slm_dist_req *req) {
    if (c->size == 1) {
        req_done(req, c, what);
        return;
    }
    MPI_Request r;
    uint64_t fl = fl_begin(c, "allreduce", what, count, dt);
    MPI_Iallreduce(MPI_IN_PLACE, buf, count_int(count, what), mpi_dt(dt), op_for(dt, op, what),
                   c->comm, &r);
    req_set(req, r, c, what, fl);
}

void slm_dist_ibcast(slm_comm *c, void *buf, int64_t count, slm_dtype dt, int root,
                     const char *what, slm_dist_req *req) {
    if (c->size == 1) {
        req_done(req, c, what);
        return;
    }
    MPI_Request r;
    uint64_t fl = fl_begin(c, "bcast", what, count, dt);
    MPI_Ibcast(buf, count_int(count, what), mpi_dt(dt), root, c->comm, &r);
    req_set(req, r, c, what, fl);
}

void slm_dist_ibarrier(slm_comm *c, const char *what, slm_dist_req *req) {
    if (c->size == 1) {
        req_done(req, c, what);
        return;
    }
    MPI_Request r;
    uint64_t fl = fl_begin(c, "barrier", what, 0, SLM_DTYPE_U8);
    MPI_Ibarrier(c->comm, &r);
    req_set(req, r, c, what, fl);
}

bool slm_dist_test(slm_dist_req *req) {
    if (!req->active) return true;
    MPI_Request r;
    memcpy(&r, &req->h, sizeof r);
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    memcpy(&req->h, &r, sizeof r);
    if (done) {
        req->active = false;
        slm_flight_mark(req->flight, SLM_FLIGHT_DONE);
    }
    return done != 0;
}

void slm_dist_wait(slm_dist_req *req) {
    if (!req->active) return;
    MPI_Request r;
    memcpy(&r, &req->h, sizeof r);
    wait_bounded(&r, req->what ? req->what : "collective", req->comm, req->flight);
    memcpy(&req->h, &r, sizeof r);
    req->active = false;
}

void slm_comm_allgather(slm_comm *c, const void *send, void *recv, int64_t count, slm_dtype dt,
                        const char *what) {
    slm_dist_req q;
    slm_dist_iallgather(c, send, recv, count, dt, what, &q);
    slm_dist_wait(&q);
}

void slm_comm_reduce_scatter(slm_comm *c, const void *send, void *recv, int64_t count, slm_dtype dt,
                             slm_redop op, const char *what) {
    slm_dist_req q;
    slm_dist_ireduce_scatter(c, send, recv, count, dt, op, what, &q);
    slm_dist_wait(&q);
}

void slm_comm_allreduce(slm_comm *c, void *buf, int64_t count, slm_dtype dt, slm_redop op,
                        const char *what) {
    slm_dist_req q;
    slm_dist_iallreduce(c, buf, count, dt, op, what, &q);
    slm_dist_wait(&q);
}

void slm_comm_bcast(slm_comm *c, void *buf, int64_t count, slm_dtype dt, int root,
                    const char *what) {
    slm_dist_req q;
    slm_dist_ibcast(c, buf, count, dt, root, what, &q);
    slm_dist_wait(&q);
}

void slm_comm_barrier(slm_comm *c, const char *what) {
    slm_dist_req q;
    slm_dist_ibarrier(c, what, &q);
    slm_dist_wait(&q);
}

double slm_dist_wait_seconds(void) {
    return g_wait_s;
}
void slm_dist_reset_wait_seconds(void) {
    g_wait_s = 0.0;
}
