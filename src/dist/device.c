// Device communicators (dist.h, "Device collectives"): NCCL and host-staged MPI collectives on
// CUDA device buffers, with the host collectives' bounded waits and flight recorder. Compiled in
// every build; the CUDA parts only with SLM_DIST_CUDA (the CUDA backend), NCCL's only with
// SLM_HAVE_NCCL (CMakeLists.txt finds it under the CUDA toolkit).
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"
#include "dist/dist_internal.h"

#ifdef SLM_DIST_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef SLM_HAVE_NCCL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" // nccl.h declares f() for f(void)
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

// ---------------------------------------------------------------------------------------------
// Local rank (no CUDA needed)

// 1 when variable `name` is set: *out its value, *st SLM_OK or the error for a bad value.
static int env_local_rank(const char *name, int *out, slm_status *st) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 0 || x > INT_MAX) {
        *st = slm_fail(SLM_E_ARG, "%s=\"%s\" (rank %d): expected an integer >= 0 (the local rank)",
                       name, v, slm_dist_rank());
        return 1;
    }
    *out = (int)x;
    *st = SLM_OK;
    return 1;
}

slm_status slm_dist_local_rank(int *local_rank) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                       "MPI_LOCALRANKID"};
    *local_rank = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        slm_status st = SLM_OK;
        if (env_local_rank(vars[i], local_rank, &st)) return st;
    }
    if (slm_dist_world() == 1) return SLM_OK;
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, slm_dist_rank(), MPI_INFO_NULL,
                            &node) != MPI_SUCCESS)
        return slm_fail(SLM_E_COMM, "rank %d: MPI_Comm_split_type (the node's ranks) failed",
                        slm_dist_rank());
    MPI_Comm_rank(node, local_rank);
    MPI_Comm_free(&node);
    return SLM_OK;
}

#ifndef SLM_DIST_CUDA

// ---------------------------------------------------------------------------------------------
// Without the CUDA backend: the same functions, each an error

static slm_status no_cuda(const char *what) {
    return slm_fail(SLM_E_UNSUPPORTED,
                    "%s: device collectives: built without CUDA (configure with the CUDA "
                    "toolkit: cmake -DSLM_CUDA=ON)",
                    what);
}

slm_status slm_dist_select_device(int *dev) {
    *dev = -1;
    return no_cuda("GPU selection");
}
bool slm_dcomm_available(slm_dcomm_kind kind) {
    (void)kind;
    return false;
}
slm_status slm_dcomm_create(slm_comm *host, slm_dcomm_kind kind, slm_dcomm **out) {
    (void)host, (void)kind;
    *out = NULL;
    return no_cuda("device communicator");
}
slm_status slm_dcomm_split(slm_dcomm *parent, int color, int key, const char *name,
                           slm_dcomm **out) {
    (void)parent, (void)color, (void)key, (void)name;
    *out = NULL;
    return no_cuda("device communicator");
}
void slm_dcomm_free(slm_dcomm *dc) {
    (void)dc;
}
slm_dcomm_kind slm_dcomm_kind_of(const slm_dcomm *dc) {
    (void)dc;
    return SLM_DCOMM_STAGED;
}
slm_comm *slm_dcomm_host(slm_dcomm *dc) {
    (void)dc;
    return NULL;
}
void *slm_dcomm_stream(slm_dcomm *dc) {
    (void)dc;
    return NULL;
}
slm_status slm_dcomm_iallgather(slm_dcomm *dc, const void *send, void *recv, int64_t count,
                                slm_dtype dt, void *after, const char *what, slm_dcomm_req *req) {
    (void)dc, (void)send, (void)recv, (void)count, (void)dt, (void)after;
    memset(req, 0, sizeof *req);
    return no_cuda(what);
}
slm_status slm_dcomm_ireduce_scatter(slm_dcomm *dc, const void *send, void *recv, int64_t count,
                                     slm_dtype dt, slm_redop op, void *after, const char *what,
                                     slm_dcomm_req *req) {
    (void)dc, (void)send, (void)recv, (void)count, (void)dt, (void)op, (void)after;
    memset(req, 0, sizeof *req);
    return no_cuda(what);
}
slm_status slm_dcomm_iallreduce(slm_dcomm *dc, void *buf, int64_t count, slm_dtype dt, slm_redop op,
                                void *after, const char *what, slm_dcomm_req *req) {
    (void)dc, (void)buf, (void)count, (void)dt, (void)op, (void)after;
    memset(req, 0, sizeof *req);
    return no_cuda(what);
}
slm_status slm_dcomm_test(slm_dcomm_req *req, bool *done) {
    *done = !req->active;
    return req->active ? no_cuda(req->what) : SLM_OK;
}
slm_status slm_dcomm_wait(slm_dcomm_req *req) {
    return req->active ? no_cuda(req->what) : SLM_OK;
}
slm_status slm_dcomm_stream_wait(slm_dcomm_req *req, void *stream) {
    (void)stream;
    return req->active ? no_cuda(req->what) : SLM_OK;
}

#else

// ---------------------------------------------------------------------------------------------
// CUDA: communicators, streams, staging

#define NSLOT 4 // staged collectives in flight per communicator

typedef struct stage {
    void *send, *recv; // pinned host (cudaHostAlloc)
    size_t send_cap, recv_cap;
    bool busy;
} stage;

struct slm_dcomm {
    slm_comm *host;
    bool own_host; // split by slm_dcomm_split (freed with it)
    slm_dcomm_kind kind;
    int device;
    cudaStream_t stream;
    cudaEvent_t after; // recorded on the producing stream before each start
#ifdef SLM_HAVE_NCCL
    ncclComm_t nccl;   // NULL once aborted
#endif
    bool broken;       // aborted after a timeout or an asynchronous error
    char broken_msg[512];
    stage slots[NSLOT];
};

static slm_status cu_fail(cudaError_t e, const char *call, const char *what) {
    return slm_fail(SLM_E_COMM, "%s (rank %d): %s failed: %s", what, slm_dist_rank(), call,
                    cudaGetErrorString(e));
}
#define CU(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return cu_fail(e_, #call, what);                                    \
    } while (0)

// The idle poll of every device wait: spin, then 50 us naps (the MPI path's default).
static void nap(long *spins) {
    if (++*spins <= 1000) return;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

static slm_status check_types(slm_dtype dt, slm_redop op, bool reduces, const char *what) {
    if (dt == SLM_DTYPE_F16)
        return slm_fail(SLM_E_ARG, "collective %s: fp16 buffers are not carried", what);
    if (reduces && dt == SLM_DTYPE_BF16 && op != SLM_OP_SUM)
        return slm_fail(SLM_E_ARG, "collective %s: bf16 supports SUM only", what);
    return SLM_OK;
}

bool slm_dcomm_available(slm_dcomm_kind kind) {
#ifdef SLM_HAVE_NCCL
    (void)kind;
    return true;
#else
    return kind != SLM_DCOMM_NCCL;
#endif
}

slm_status slm_dist_select_device(int *dev) {
    *dev = -1;
    int lr = 0, n = 0;
    slm_status st = slm_dist_local_rank(&lr);
    if (st) return st;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return slm_fail(SLM_E_UNSUPPORTED, "rank %d: no CUDA device (%s)", slm_dist_rank(),
                        e != cudaSuccess ? cudaGetErrorString(e) : "device count 0");
    CU(cudaSetDevice(lr % n), "GPU selection");
    *dev = lr % n;
    slm_info("local rank %d -> GPU %d of %d", lr, *dev, n);
    if (lr >= n)
        slm_warn("local rank %d shares GPU %d with local rank %d: device collectives take the "
                 "host-staged path (NCCL needs one GPU per rank)",
                 lr, *dev, lr % n);
    return SLM_OK;
}

// This rank's GPU as one number (host name and PCI bus id hashed), to find ranks sharing one.
static slm_status device_id(int dev, int64_t *id) {
    char bus[64] = "", host[256] = "";
    CU(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev), "device communicator");
    gethostname(host, sizeof host - 1);
    uint64_t h = slm_xxh64(host, strlen(host), 0x6763);
    *id = (int64_t)slm_xxh64(bus, strlen(bus), h);
    return SLM_OK;
}

// The implementation every rank of `host` takes for `kind` (the same on every rank: decided on
// the all-gathered device ids). Collective over `host` unless kind is STAGED.
static slm_status pick_kind(slm_comm *host, slm_dcomm_kind kind, int dev, slm_dcomm_kind *out) {
    *out = SLM_DCOMM_STAGED;
    if (kind == SLM_DCOMM_STAGED) return SLM_OK;
    int n = slm_comm_size(host);
    int64_t mine = 0;
    slm_status st = device_id(dev, &mine);
    int64_t *ids = slm_xmalloc((size_t)n * sizeof(int64_t));
    // A rank whose CUDA query failed still joins the all-gather (its id 0), so none is left
    // waiting; every rank then sees the failure.
    slm_comm_allgather(host, &mine, ids, 1, SLM_DTYPE_I64, "device ids");
    int a = -1, b = -1, failed = -1;
    for (int i = 0; i < n && a < 0 && failed < 0; i++) {
        if (ids[i] == 0) failed = i;
        for (int j = i + 1; j < n && a < 0; j++)
            if (ids[i] == ids[j]) a = i, b = j;
    }
    free(ids);
    if (st) return st;
    if (failed >= 0)
        return slm_fail(SLM_E_COMM,
                        "device communicator of %s: rank %d of it could not name its "
                        "GPU",
                        slm_comm_name(host), failed);
#ifndef SLM_HAVE_NCCL
    (void)a, (void)b; // ranks sharing a GPU: the staged path anyway
    if (kind == SLM_DCOMM_NCCL)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "device communicator of %s: built without NCCL (the CUDA toolkit's "
                        "nccl.h / libnccl.so were not found); use the host-staged path",
                        slm_comm_name(host));
    return SLM_OK;
#else
    if (a >= 0 && kind == SLM_DCOMM_NCCL)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "device communicator of %s: ranks %d and %d of it share one GPU, which "
                        "NCCL refuses; use the host-staged path",
                        slm_comm_name(host), a, b);
    *out = a >= 0 ? SLM_DCOMM_STAGED : SLM_DCOMM_NCCL;
    return SLM_OK;
#endif
}

// ---------------------------------------------------------------------------------------------
// NCCL

#ifdef SLM_HAVE_NCCL
static ncclDataType_t nccl_dt(slm_dtype dt) {
    switch (dt) {
    case SLM_DTYPE_F32:
        return ncclFloat32;
    case SLM_DTYPE_F64:
        return ncclFloat64;
    case SLM_DTYPE_I64:
        return ncclInt64;
    case SLM_DTYPE_BF16:
        return ncclBfloat16;
    case SLM_DTYPE_U8:
    case SLM_DTYPE_F16:
        break;
    }
    return ncclUint8;
}

static ncclRedOp_t nccl_op(slm_redop op) {
    return op == SLM_OP_MAX ? ncclMax : op == SLM_OP_MIN ? ncclMin : ncclSum;
}

// Aborts the communicator (every later call on it fails with `why`).
static void nccl_abort(slm_dcomm *dc, const char *why) {
    if (dc->nccl) ncclCommAbort(dc->nccl);
    dc->nccl = NULL;
    dc->broken = true;
    snprintf(dc->broken_msg, sizeof dc->broken_msg, "%s", why);
}

// Settles a call of the non-blocking communicator `comm`: while it reports ncclInProgress,
// polls ncclCommGetAsyncError until done, bounded by the collective timeout. On an error or
// the deadline the communicator is aborted.
static slm_status nccl_settle(slm_dcomm *dc, ncclResult_t r, const char *call, const char *what) {
    ncclComm_t comm = dc->nccl;
    double t0 = slm_time_s(), tmo = slm_dist_timeout();
    long spins = 0;
    while (r == ncclInProgress) {
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
        if (r != ncclInProgress) break;
        if (tmo > 0 && slm_time_s() - t0 > tmo) { // as a wait's timeout (slm_dcomm_wait)
            slm_dist_timeout_dump(what);
            char msg[1536];
            slm_dist_timeout_text(msg, sizeof msg, what, slm_comm_name(dc->host),
                                  slm_comm_size(dc->host));
            nccl_abort(dc, "NCCL communicator aborted after a timeout");
            return slm_fail(SLM_E_TIMEOUT, "%s (%s); NCCL communicator aborted", msg, call);
        }
        nap(&spins);
    }
    if (r == ncclSuccess) return SLM_OK;
    char why[512];
    snprintf(why, sizeof why, "%s (group %s): %s failed: %s (%s)", what, slm_comm_name(dc->host),
             call, ncclGetErrorString(r), ncclGetLastError(comm));
    nccl_abort(dc, why);
    return slm_fail(SLM_E_COMM, "%s; NCCL communicator aborted", why);
}

// Rank 0 of the host group makes the unique id, a host broadcast hands it to the others, each
// joins with ncclCommInitRankConfig (non-blocking, so the wait for the slowest is bounded).
static slm_status nccl_init(slm_dcomm *dc) {
    unsigned char msg[sizeof(ncclUniqueId) + 1];
    memset(msg, 0, sizeof msg);
    ncclResult_t r = ncclSuccess;
    if (slm_comm_rank(dc->host) == 0) {
        ncclUniqueId id;
        r = ncclGetUniqueId(&id);
        memcpy(msg, &id, sizeof id);
        msg[sizeof id] = r == ncclSuccess;
    }
    // Sent even when rank 0 failed (its flag 0), so no rank is left in the broadcast.
    slm_comm_bcast(dc->host, msg, (int64_t)sizeof msg, SLM_DTYPE_U8, 0, "NCCL unique id");
    if (!msg[sizeof(ncclUniqueId)])
        return slm_fail(SLM_E_COMM,
                        "device communicator of %s: ncclGetUniqueId failed on its "
                        "rank 0%s%s",
                        slm_comm_name(dc->host), r != ncclSuccess ? ": " : "",
                        r != ncclSuccess ? ncclGetErrorString(r) : "");
    ncclUniqueId id;
    memcpy(&id, msg, sizeof id);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    r = ncclCommInitRankConfig(&dc->nccl, slm_comm_size(dc->host), id, slm_comm_rank(dc->host),
                               &cfg);
    return nccl_settle(dc, r, "ncclCommInitRankConfig", "NCCL bootstrap");
}
#endif

// ---------------------------------------------------------------------------------------------
// Communicators

static slm_status dcomm_new(slm_comm *host, bool own, slm_dcomm_kind kind, int dev,
                            slm_dcomm **out) {
    slm_dcomm *dc = slm_xcalloc(1, sizeof *dc);
    dc->host = host;
    dc->own_host = own;
    dc->kind = kind;
    dc->device = dev;
    *out = dc;
    CU(cudaStreamCreateWithFlags(&dc->stream, cudaStreamNonBlocking), "device communicator");
    CU(cudaEventCreateWithFlags(&dc->after, cudaEventDisableTiming), "device communicator");
    return SLM_OK;
}

slm_status slm_dcomm_create(slm_comm *host, slm_dcomm_kind kind, slm_dcomm **out) {
    *out = NULL;
    int dev = 0;
    CU(cudaGetDevice(&dev), "device communicator");
    slm_dcomm_kind k;
    slm_status st = pick_kind(host, kind, dev, &k);
    if (st) return st;
    slm_dcomm *dc = NULL;
    st = dcomm_new(host, false, k, dev, &dc);
#ifdef SLM_HAVE_NCCL
    if (!st && k == SLM_DCOMM_NCCL) st = nccl_init(dc);
#endif
    if (st) {
        slm_dcomm_free(dc);
        return st;
    }
    *out = dc;
    return SLM_OK;
}

slm_status slm_dcomm_split(slm_dcomm *parent, int color, int key, const char *name,
                           slm_dcomm **out) {
    *out = NULL;
    if (parent->broken)
        return slm_fail(SLM_E_COMM, "splitting %s: %s", slm_comm_name(parent->host),
                        parent->broken_msg);
    slm_comm *h = slm_comm_split(parent->host, color, key, name);
    slm_dcomm *dc = NULL;
    slm_status st = dcomm_new(h, true, parent->kind, parent->device, &dc);
#ifdef SLM_HAVE_NCCL
    if (!st && parent->kind == SLM_DCOMM_NCCL) {
        // Both order a group's ranks by key, then by parent rank: the NCCL and MPI groups agree.
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclResult_t r = ncclCommSplit(parent->nccl, color, key, &dc->nccl, &cfg);
        // A failed split leaves the parent in an unknown state: it is aborted too.
        st = nccl_settle(parent, r, "ncclCommSplit", "NCCL group split");
        if (!st)
            st = nccl_settle(dc, ncclInProgress, "ncclCommSplit (new group)", "NCCL group split");
    }
#endif
    if (st) {
        if (dc)
            slm_dcomm_free(dc);
        else
            slm_comm_free(h);
        return st;
    }
    *out = dc;
    return SLM_OK;
}

void slm_dcomm_free(slm_dcomm *dc) {
    if (!dc) return;
#ifdef SLM_HAVE_NCCL
    if (dc->nccl) {
        // Finalize flushes what was issued (bounded like a wait), then destroy frees.
        ncclResult_t r = ncclCommFinalize(dc->nccl);
        if (nccl_settle(dc, r, "ncclCommFinalize", "NCCL communicator free") == SLM_OK)
            ncclCommDestroy(dc->nccl);
        else
            slm_warn("%s", slm_errmsg());
        dc->nccl = NULL;
    }
#endif
    for (int i = 0; i < NSLOT; i++) {
        if (dc->slots[i].send) cudaFreeHost(dc->slots[i].send);
        if (dc->slots[i].recv) cudaFreeHost(dc->slots[i].recv);
    }
    if (dc->after) cudaEventDestroy(dc->after);
    if (dc->stream) cudaStreamDestroy(dc->stream);
    if (dc->own_host) slm_comm_free(dc->host);
    free(dc);
}

slm_dcomm_kind slm_dcomm_kind_of(const slm_dcomm *dc) {
    return dc->kind;
}
slm_comm *slm_dcomm_host(slm_dcomm *dc) {
    return dc->host;
}
void *slm_dcomm_stream(slm_dcomm *dc) {
    return dc->stream;
}

// ---------------------------------------------------------------------------------------------
// Collectives

// Common start: the request reset, the communicator's state checked, the communication stream
// ordered after `after`, the completion event made.
static slm_status start(slm_dcomm *dc, void *after, const char *op, const char *what,
                        slm_dcomm_req *req) {
    memset(req, 0, sizeof *req);
    req->slot = -1;
    if (dc->broken) return slm_fail(SLM_E_COMM, "collective %s: %s", what, dc->broken_msg);
    CU(cudaEventRecord(dc->after, (cudaStream_t)after), what);
    CU(cudaStreamWaitEvent(dc->stream, dc->after, 0), what);
    cudaEvent_t ev;
    CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), what);
    req->done = ev;
    req->dc = dc;
    req->op = op;
    req->what = what;
    req->t_start = slm_time_s();
    return SLM_OK;
}

static void req_release(slm_dcomm_req *req) {
    if (req->done) cudaEventDestroy((cudaEvent_t)req->done);
    if (req->slot >= 0) req->dc->slots[req->slot].busy = false;
    req->done = NULL;
    req->slot = -1;
    req->active = false;
}

// A staging slot with pinned buffers of at least send_b / recv_b bytes.
static slm_status take_slot(slm_dcomm *dc, size_t send_b, size_t recv_b, const char *what,
                            int *out) {
    int s = -1;
    for (int i = 0; i < NSLOT && s < 0; i++)
        if (!dc->slots[i].busy) s = i;
    if (s < 0)
        return slm_fail(SLM_E_ARG, "collective %s: more than %d staged collectives in flight on %s",
                        what, NSLOT, slm_comm_name(dc->host));
    stage *g = &dc->slots[s];
    if (g->send_cap < send_b) {
        if (g->send) cudaFreeHost(g->send);
        g->send = NULL, g->send_cap = 0;
        CU(cudaHostAlloc(&g->send, send_b, cudaHostAllocDefault), what);
        g->send_cap = send_b;
    }
    if (g->recv_cap < recv_b) {
        if (g->recv) cudaFreeHost(g->recv);
        g->recv = NULL, g->recv_cap = 0;
        CU(cudaHostAlloc(&g->recv, recv_b, cudaHostAllocDefault), what);
        g->recv_cap = recv_b;
    }
    g->busy = true;
    *out = s;
    return SLM_OK;
}

// Queues the staged copy back (pinned -> device) and the completion event.
static slm_status queue_back(slm_dcomm_req *req) {
    slm_dcomm *dc = req->dc;
    if (req->back_bytes)
        CU(cudaMemcpyAsync(req->dst, req->back, req->back_bytes, cudaMemcpyHostToDevice,
                           dc->stream),
           req->what);
    CU(cudaEventRecord((cudaEvent_t)req->done, dc->stream), req->what);
    req->back_queued = true;
    return SLM_OK;
}

enum { OP_ALLGATHER, OP_REDUCE_SCATTER, OP_ALLREDUCE };
static const char *const op_names[] = {"allgather", "reduce_scatter", "allreduce"};

// One collective, both implementations. send / recv as the public functions (allreduce: both
// `buf`).
static slm_status icoll(int kind, slm_dcomm *dc, const void *send, void *recv, int64_t count,
                        slm_dtype dt, slm_redop op, void *after, const char *what,
                        slm_dcomm_req *req) {
    memset(req, 0, sizeof *req);
    slm_status st = check_types(dt, op, kind != OP_ALLGATHER, what);
    if (st) return st;
    if (count < 0)
        return slm_fail(SLM_E_ARG, "collective %s: count %lld < 0", what, (long long)count);
    st = start(dc, after, op_names[kind], what, req);
    if (st) return st;
    int n = slm_comm_size(dc->host);
    size_t esz = slm_dtype_bytes(dt), b = (size_t)count * esz;
    size_t send_b = kind == OP_REDUCE_SCATTER ? b * (size_t)n : b;
    size_t recv_b = kind == OP_ALLGATHER ? b * (size_t)n : b;
#ifdef SLM_HAVE_NCCL
    if (dc->kind == SLM_DCOMM_NCCL) {
        // bytes sent by this rank, as the host path counts them
        int64_t sent = (int64_t)(kind == OP_REDUCE_SCATTER ? send_b : b);
        req->flight = n > 1 ? slm_comm_flight_begin(dc->host, req->op, what, sent) : 0;
        ncclResult_t r;
        if (kind == OP_ALLGATHER)
            r = ncclAllGather(send, recv, (size_t)count, nccl_dt(dt), dc->nccl, dc->stream);
        else if (kind == OP_REDUCE_SCATTER)
            r = ncclReduceScatter(send, recv, (size_t)count, nccl_dt(dt), nccl_op(op), dc->nccl,
                                  dc->stream);
        else
            r = ncclAllReduce(send, recv, (size_t)count, nccl_dt(dt), nccl_op(op), dc->nccl,
                              dc->stream);
        st = nccl_settle(dc, r, op_names[kind], what);
        if (!st && cudaEventRecord((cudaEvent_t)req->done, dc->stream) != cudaSuccess)
            st = slm_fail(SLM_E_COMM, "collective %s: cudaEventRecord failed", what);
        if (st) {
            slm_flight_mark(req->flight, SLM_FLIGHT_DONE);
            req_release(req);
            return st;
        }
        req->active = true;
        return SLM_OK;
    }
#endif
    // Host-staged: device -> pinned on the communication stream (after the producer's work),
    // the host collective on the pinned buffers, the copy back when it completes.
    st = take_slot(dc, send_b, recv_b, what, &req->slot);
    if (!st && send_b &&
        cudaMemcpyAsync(dc->slots[req->slot].send, send, send_b, cudaMemcpyDeviceToHost,
                        dc->stream) != cudaSuccess)
        st = slm_fail(SLM_E_COMM, "collective %s: staging copy to the host failed", what);
    if (!st && cudaStreamSynchronize(dc->stream) != cudaSuccess)
        st = slm_fail(SLM_E_COMM, "collective %s: staging copy to the host failed", what);
    if (st) {
        req_release(req);
        return st;
    }
    stage *g = &dc->slots[req->slot];
    req->dst = recv;
    req->back_bytes = recv_b;
    if (kind == OP_ALLGATHER) {
        req->back = g->recv;
        slm_dist_iallgather(dc->host, g->send, g->recv, count, dt, what, &req->host);
    } else if (kind == OP_REDUCE_SCATTER) {
        req->back = g->recv;
        slm_dist_ireduce_scatter(dc->host, g->send, g->recv, count, dt, op, what, &req->host);
    } else {
        req->back = g->send;
        slm_dist_iallreduce(dc->host, g->send, count, dt, op, what, &req->host);
    }
    req->active = true;
    if (!req->host.active) { // a group of one: done at once
        st = queue_back(req);
        if (st) req_release(req);
    }
    return st;
}

slm_status slm_dcomm_iallgather(slm_dcomm *dc, const void *send, void *recv, int64_t count,
                                slm_dtype dt, void *after, const char *what, slm_dcomm_req *req) {
    return icoll(OP_ALLGATHER, dc, send, recv, count, dt, SLM_OP_SUM, after, what, req);
}
slm_status slm_dcomm_ireduce_scatter(slm_dcomm *dc, const void *send, void *recv, int64_t count,
                                     slm_dtype dt, slm_redop op, void *after, const char *what,
                                     slm_dcomm_req *req) {
    return icoll(OP_REDUCE_SCATTER, dc, send, recv, count, dt, op, after, what, req);
}
slm_status slm_dcomm_iallreduce(slm_dcomm *dc, void *buf, int64_t count, slm_dtype dt, slm_redop op,
                                void *after, const char *what, slm_dcomm_req *req) {
    return icoll(OP_ALLREDUCE, dc, buf, buf, count, dt, op, after, what, req);
}

slm_status slm_dcomm_test(slm_dcomm_req *req, bool *done) {
    *done = !req->active;
    if (!req->active) return SLM_OK;
    slm_dcomm *dc = req->dc;
    if (dc->kind == SLM_DCOMM_STAGED && !req->back_queued) {
        if (!slm_dist_test(&req->host)) return SLM_OK;
        slm_status st = queue_back(req);
        if (st) {
            req_release(req);
            return st;
        }
    }
    cudaError_t e = cudaEventQuery((cudaEvent_t)req->done);
    if (e == cudaErrorNotReady) {
#ifdef SLM_HAVE_NCCL
        ncclResult_t a = ncclSuccess;
        if (dc->nccl && ncclCommGetAsyncError(dc->nccl, &a) == ncclSuccess && a != ncclSuccess &&
            a != ncclInProgress) {
            slm_status st = nccl_settle(dc, a, req->op, req->what);
            slm_flight_mark(req->flight, SLM_FLIGHT_DONE);
            req_release(req);
            return st;
        }
#endif
        return SLM_OK;
    }
    if (dc->kind == SLM_DCOMM_NCCL) slm_flight_mark(req->flight, SLM_FLIGHT_DONE);
    req_release(req);
    if (e != cudaSuccess) return cu_fail(e, "cudaEventQuery", req->what);
    *done = true;
    return SLM_OK;
}

slm_status slm_dcomm_wait(slm_dcomm_req *req) {
    if (!req->active) return SLM_OK;
    slm_dcomm *dc = req->dc;
    double t0 = slm_time_s(), tmo = slm_dist_timeout();
    if (dc->kind == SLM_DCOMM_STAGED) {
        if (!req->back_queued) {
            slm_dist_wait(&req->host); // the MPI path's bounded wait (ends the job on expiry)
            slm_status st = queue_back(req);
            if (st) {
                req_release(req);
                return st;
            }
        }
        cudaError_t e = cudaEventSynchronize((cudaEvent_t)req->done); // a local copy only
        req_release(req);
        slm_dist_add_wait(slm_time_s() - t0);
        return e == cudaSuccess ? SLM_OK : cu_fail(e, "cudaEventSynchronize", req->what);
    }
    slm_flight_mark(req->flight, SLM_FLIGHT_WAITING);
    long spins = 0;
    for (;;) {
        bool done = false;
        slm_status st = slm_dcomm_test(req, &done);
        if (st || done) {
            slm_dist_add_wait(slm_time_s() - t0);
            return st;
        }
        if (tmo > 0 && slm_time_s() - t0 > tmo) break;
        nap(&spins);
    }
    // Past the deadline: the dump and the grace as the MPI path, then the communicator aborted
    // (the collective's kernels end with it) and the failure returned to fail the step.
    const char *what = req->what;
    slm_dist_timeout_dump(what);
    char msg[1536];
    slm_dist_timeout_text(msg, sizeof msg, what, slm_comm_name(dc->host), slm_comm_size(dc->host));
#ifdef SLM_HAVE_NCCL
    nccl_abort(dc, "NCCL communicator aborted after a collective timeout");
#endif
    req_release(req);
    slm_dist_add_wait(slm_time_s() - t0);
    return slm_fail(SLM_E_TIMEOUT, "%s; NCCL communicator aborted", msg);
}

slm_status slm_dcomm_stream_wait(slm_dcomm_req *req, void *stream) {
    if (!req->active) return SLM_OK;
    if (req->dc->kind == SLM_DCOMM_STAGED && !req->back_queued) {
        slm_dist_wait(&req->host);
        slm_status st = queue_back(req);
        if (st) {
            req_release(req);
            return st;
        }
    }
    CU(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)req->done, 0), req->what);
    return SLM_OK;
}

#endif
