// MPI communication layer with bounded waits.
#include "dist/dist.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_started_mpi = 0; // we called MPI_Init (so we finalize)
static int g_rank = 0, g_world = 1;
static double g_timeout_s = 600.0;
static char g_ctx[256] = "";

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
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return slm_fail(SLM_E_COMM, "MPI_Init_thread failed");
        g_started_mpi = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    slm_log_set_rank(g_rank, g_world);
    slm_set_abort_hook(abort_hook);
    return SLM_OK;
}

void slm_dist_finalize(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (g_started_mpi && init && !fin) MPI_Finalize();
    g_started_mpi = 0;
}

int slm_dist_rank(void) { return g_rank; }
int slm_dist_world(void) { return g_world; }
void slm_dist_set_timeout(double seconds) { g_timeout_s = seconds; }
void slm_dist_set_context(const char *ctx) { snprintf(g_ctx, sizeof g_ctx, "%s", ctx ? ctx : ""); }

static MPI_Datatype mpi_dt(slm_dtype_comm dt) {
    switch (dt) {
    case SLM_DT_F32: return MPI_FLOAT;
    case SLM_DT_F64: return MPI_DOUBLE;
    case SLM_DT_I64: return MPI_INT64_T;
    case SLM_DT_U8: return MPI_UINT8_T;
    }
    return MPI_BYTE;
}

static MPI_Op mpi_op(slm_redop op) {
    switch (op) {
    case SLM_OP_SUM: return MPI_SUM;
    case SLM_OP_MAX: return MPI_MAX;
    case SLM_OP_MIN: return MPI_MIN;
    }
    return MPI_SUM;
}

// Waits for `req` with the deadline; polls with a short sleep after a spin phase.
static void wait_bounded(MPI_Request *req, const char *what) {
    double t0 = MPI_Wtime();
    int done = 0;
    long spins = 0;
    for (;;) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (++spins > 1000) {
            struct timespec ts = {0, 50000}; // 50 us
            nanosleep(&ts, NULL);
        }
        if (g_timeout_s > 0 && MPI_Wtime() - t0 > g_timeout_s)
            slm_fatal("collective %s timed out after %.0f s (%s; group: world of %d); a peer rank "
                      "is dead or stuck; aborting the job",
                      what, g_timeout_s, g_ctx[0] ? g_ctx : "no context", g_world);
    }
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
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    wait_bounded(&r, what);
}

void slm_dist_allreduce(void *buf, int64_t count, slm_dtype_comm dt, slm_redop op,
                        const char *what) {
    if (g_world == 1) return;
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, count_int(count, what), mpi_dt(dt), mpi_op(op),
                   MPI_COMM_WORLD, &r);
    wait_bounded(&r, what);
}

void slm_dist_bcast(void *buf, int64_t count, slm_dtype_comm dt, int root, const char *what) {
    if (g_world == 1) return;
    MPI_Request r;
    MPI_Ibcast(buf, count_int(count, what), mpi_dt(dt), root, MPI_COMM_WORLD, &r);
    wait_bounded(&r, what);
}

void slm_dist_allgather(const void *send, void *recv, int64_t count, slm_dtype_comm dt,
                        const char *what) {
    int sz = 0;
    MPI_Type_size(mpi_dt(dt), &sz);
    if (g_world == 1) {
        memmove(recv, send, (size_t)count * (size_t)sz);
        return;
    }
    MPI_Request r;
    MPI_Iallgather(send, count_int(count, what), mpi_dt(dt), recv, (int)count, mpi_dt(dt),
                   MPI_COMM_WORLD, &r);
    wait_bounded(&r, what);
}

slm_status slm_dist_agree(slm_status local) {
    if (g_world == 1) return local;
    // Lowest failing rank wins: reduce (failed ? rank : world) with MIN.
    int64_t who = local ? g_rank : g_world;
    slm_dist_allreduce(&who, 1, SLM_DT_I64, SLM_OP_MIN, "status agreement");
    if (who == g_world) return SLM_OK;
    char msg[1024];
    int64_t code = local;
    if (g_rank == who) snprintf(msg, sizeof msg, "%s", slm_errmsg());
    slm_dist_bcast(msg, sizeof msg, SLM_DT_U8, (int)who, "status message");
    slm_dist_bcast(&code, 1, SLM_DT_I64, (int)who, "status code");
    if (g_rank != who) slm_fail((slm_status)code, "rank %d failed: %s", (int)who, msg);
    return (slm_status)code;
}
