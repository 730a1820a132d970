// dist: the communication layer over MPI (Open MPI). mpi.h is included only in this module.
//
// A process without mpirun is a world of one through MPI's singleton init. A world of one also
// works without slm_dist_init at all (library callers, unit tests): the world communicator and
// every group split from a one-rank communicator are one-rank communicators whose collectives
// complete locally (copies where needed) and never call MPI. Every collective is
// started non-blocking and waited on with a deadline (slm_dist_set_timeout); on expiry the rank
// logs the op, its context (unit, step) and the group, then aborts the whole job with MPI_Abort,
// so a dead or stuck peer ends the job with an error instead of a hang.
// Groups: besides the world, slm_comm_split makes sub-communicators (FSDP's shard group and
// replica group, MPI_Comm_split). Every collective exists blocking (start + bounded wait) and
// non-blocking (start returns an slm_dist_req; slm_dist_test polls it, slm_dist_wait waits with
// the same deadline). bf16 buffers (uint16 bit patterns) reduce with a user-defined MPI op that
// sums in fp32 and rounds to nearest even.
// Progress: Open MPI mostly advances non-blocking collectives inside MPI calls, so callers that
// want overlap call slm_dist_test / slm_dist_progress at natural points (FSDP hooks).
#ifndef SLM_DIST_H
#define SLM_DIST_H

#include "base/base.h"

// Element types of collectives: base/'s slm_dtype (F32, F64, I64, U8, BF16; F16 is not sent).
// SLM_DTYPE_BF16: uint16 bfloat16 bit patterns (SUM only, through a user-defined op; MAX/MIN are
// fatal for it).
typedef enum { SLM_OP_SUM, SLM_OP_MAX, SLM_OP_MIN } slm_redop;

// Initialises MPI (thread level FUNNELED), sets the log rank and installs an abort hook that
// calls MPI_Abort. Idempotent. Errors: SLM_E_COMM if MPI cannot start.
slm_status slm_dist_init(int *argc, char ***argv);
// Call before slm_dist_init: with poll_us > 0, MPI starts with MPI_THREAD_MULTIPLE and (world > 1)
// a thread polls MPI's progress engine every poll_us microseconds, so non-blocking collectives
// advance while the main thread computes (Open MPI otherwise progresses them only inside MPI
// calls). The thread calls only MPI_Iprobe on a private communicator. Stopped by
// slm_dist_finalize. Costs one mostly sleeping thread.
void slm_dist_request_progress_thread(double poll_us);
// Finalises MPI if slm_dist_init started it. Safe to call when never initialised.
void slm_dist_finalize(void);
int slm_dist_rank(void);
int slm_dist_world(void);
// Deadline for every wait, in seconds (default 600; <= 0 disables; the command lines refuse
// values <= 0 or non-finite, so only library callers can disable it).
void slm_dist_set_timeout(double seconds);
// Idle polling of every wait (default off: 1000 MPI_Test spins, then one every 50 us). On:
// 10 spins, then the sleep between MPI_Test doubles from 50 us to 1 ms, so a completed
// collective is seen up to ~1 ms late but many oversubscribed waiting ranks leave the cores
// to the ones progressing. For --simulate-compute only (the emulated cluster of
// bench/scaling/, 16 ranks on 2 cores); real training keeps the default.
void slm_dist_set_lazy_poll(bool lazy);
bool slm_dist_lazy_poll(void);
// Context shown when a collective times out ("step 120, unit 3"); copied.
void slm_dist_set_context(const char *ctx);

// World collectives. `what` names the operation for timeout messages.
void slm_dist_barrier(const char *what);
void slm_dist_allreduce(void *buf, int64_t count, slm_dtype dt, slm_redop op, const char *what);
void slm_dist_bcast(void *buf, int64_t count, slm_dtype dt, int root, const char *what);
// Gathers `count` elements from every rank into recv[world * count] (rank order).
void slm_dist_allgather(const void *send, void *recv, int64_t count, slm_dtype dt,
                        const char *what);

// Agrees on a status across ranks at a phase boundary: returns SLM_OK on every rank if all
// ranks passed SLM_OK; otherwise every rank returns the lowest failing rank's status and
// message (prefixed with that rank), so no rank is left waiting in a later collective.
slm_status slm_dist_agree(slm_status local);

// One value every rank must hold identically (slm_dist_agree_values).
typedef struct slm_agree_item {
    const char *name;  // what the user calls it: "--param-dtype", "dataset manifest"
    const char *value; // canonical text: the parsed value printed back ("0.0003", not "3e-4"),
                       // so equal settings typed differently agree; NULL reads "(unset)"
    slm_status code;   // returned when this item differs: SLM_E_ARG for an option (exit 2),
                       // SLM_E_FORMAT for data / files (exit 1)
} slm_agree_item;

// Checks that every rank of the world holds the same n items (same names, same values) before
// the ranks communicate about anything else. Collective over the world, bounded by the
// collective timeout; SLM_OK at once in a world of one. One all-gather of three integers per
// rank (n, XXH64 of the names, XXH64 of all the values' XXH64s) decides; only on a difference
// follow an all-gather of every item's hash and one of the first differing item's values
// (their first 160 bytes), so every rank returns the same status (that item's code; SLM_E_ARG
// when the lists themselves differ) and the same message, e.g.
//   "ranks disagree on --param-dtype: rank 0 bf16, rank 1 fp32"
// (ranks holding one value are grouped: "ranks 0-2,5 bf16, rank 3 fp32"; at most 6 values
// shown), then "; also differ: --lr, --seed" naming the other differing items. Meant to be
// printed once (by rank 0). items[i].name / value are borrowed for the call only.
slm_status slm_dist_agree_values(const slm_agree_item *items, int n);

// ---------------------------------------------------------------------------------------------
// Communicators (groups) and non-blocking collectives

// A communicator: the world or a group split from it. Opaque; owned by whoever split it.
typedef struct slm_comm slm_comm;

// The world communicator (valid after slm_dist_init; never freed by callers).
slm_comm *slm_comm_world(void);
// Splits `parent` (MPI_Comm_split; a one-rank parent gives a one-rank group without MPI): ranks
// with the same `color` (>= 0) form one group, ordered by `key` then parent rank. `name` ("shard
// group 1 of 2") is copied into timeout messages. Collective over `parent`. Returns an owned
// communicator (slm_comm_free); never NULL. Errors are fatal (an MPI failure here leaves peers
// blocked).
slm_comm *slm_comm_split(slm_comm *parent, int color, int key, const char *name);
// Frees a communicator from slm_comm_split (NULL and the world are ignored).
void slm_comm_free(slm_comm *c);
int slm_comm_rank(const slm_comm *c);
int slm_comm_size(const slm_comm *c);
const char *slm_comm_name(const slm_comm *c);

// A request handle of an in-flight non-blocking collective. Zero-initialised = inactive.
// The buffers given to the start call must stay valid and untouched until the request
// completes (slm_dist_test returned true or slm_dist_wait returned).
typedef struct slm_dist_req {
    uint64_t h;           // the MPI_Request, opaque
    bool active;          // started and not yet completed
    const char *what;     // op name for timeout messages (borrowed string literal)
    const slm_comm *comm; // borrowed
    double t_start;       // slm_time_s() at start
    uint64_t flight;      // its flight-recorder entry (0: none)
} slm_dist_req;

// Starts a collective on `c`. `what` must outlive the request (use string literals).
//  iallgather:      send [count] -> recv [size * count], rank order.
//  ireduce_scatter: send [size * count] -> recv [count]: rank r gets the reduction of block r
//                   (MPI_Reduce_scatter_block).
//  iallreduce:      in place on buf [count].
//  ibcast:          buf [count] from `root` (rank in c).
//  ibarrier.
// A group of one completes immediately (copies where needed); the request is still valid.
void slm_dist_iallgather(slm_comm *c, const void *send, void *recv, int64_t count, slm_dtype dt,
                         const char *what, slm_dist_req *req);
void slm_dist_ireduce_scatter(slm_comm *c, const void *send, void *recv, int64_t count,
                              slm_dtype dt, slm_redop op, const char *what, slm_dist_req *req);
void slm_dist_iallreduce(slm_comm *c, void *buf, int64_t count, slm_dtype dt, slm_redop op,
                         const char *what, slm_dist_req *req);
void slm_dist_ibcast(slm_comm *c, void *buf, int64_t count, slm_dtype dt, int root,
                     const char *what, slm_dist_req *req);
void slm_dist_ibarrier(slm_comm *c, const char *what, slm_dist_req *req);
// Polls (MPI_Test): true when complete (the request becomes inactive), true for an inactive
// request. Also drives progress of other outstanding collectives in Open MPI.
bool slm_dist_test(slm_dist_req *req);
// Waits for completion with the deadline of slm_dist_set_timeout, measured from the wait's
// start; on expiry logs the op, the context (slm_dist_set_context), the group and its size,
// then aborts the job (MPI_Abort). No-op on an inactive request.
void slm_dist_wait(slm_dist_req *req);

// Blocking collectives on a communicator: start + slm_dist_wait.
void slm_comm_allgather(slm_comm *c, const void *send, void *recv, int64_t count, slm_dtype dt,
                        const char *what);
void slm_comm_reduce_scatter(slm_comm *c, const void *send, void *recv, int64_t count, slm_dtype dt,
                             slm_redop op, const char *what);
void slm_comm_allreduce(slm_comm *c, void *buf, int64_t count, slm_dtype dt, slm_redop op,
                        const char *what);
void slm_comm_bcast(slm_comm *c, void *buf, int64_t count, slm_dtype dt, int root,
                    const char *what);
void slm_comm_barrier(slm_comm *c, const char *what);

// ---------------------------------------------------------------------------------------------
// Flight recorder (docs/operations.md "Flight recorder")
//
// Every collective of a group of more than one rank is recorded in a ring of the last
// SLM_FLIGHT_RING entries (static storage: no allocation per collective): its sequence number
// in its group (1-based; every member of a group numbers the group's collectives alike, as MPI
// orders them), the op ("allreduce", "allgather", "reduce_scatter", "bcast", "barrier"), `what`
// ("stop flags"), the dist context (slm_dist_set_context: "step 3, forward, FSDP unit 2"), the
// caller's step and phase (slm_flight_set_where), bytes sent by this rank, the group (names must
// identify a group across the world: "world", "shard group 1 of 2"), wall-clock (Unix) start
// and end times and the state: started (non-blocking, not yet waited on), waiting (in a wait),
// done. The dump (slm_flight_dump) writes it as one JSON object:
//   {"format":"shardlm-flight-1","rank":R,"world":W,"pid":P,"host":"H","reason":"SIGUSR2",
//    "time":T,"step":S,"phase":"...","context":"...",
//    "groups":[{"id":0,"name":"world","size":W,"seq":N,"ranks":[0,1,...]}, ...],
//    "entries":[{"seq":N,"group":"world","op":"allreduce","what":"stop flags","bytes":24,
//                "step":S,"phase":"...","context":"...","t_start":T0,"t_end":T1|null,
//                "t_wait":TW|null,"state":"done"|"waiting"|"started"}, ...]}   (oldest first)
// t_wait: when this rank began waiting for it (slm_dist_wait), null when it completed in a
// poll (slm_dist_test) without a wait: t_end - t_wait is the time the rank was blocked on it.
// It is written on a collective timeout (before the job is aborted), on SIGUSR2 and on a fatal
// signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) once slm_flight_install_signals ran; the
// dump path is async-signal-safe (formatted into a static buffer, open / write / rename).
#define SLM_FLIGHT_RING 512
#define SLM_FLIGHT_MAX_GROUPS 32
#define SLM_FLIGHT_GROUP_RANKS 1024 // member ranks kept per group in the dump

// Where dumps go (copied; NULL or "" turns dumping off) and the rank / world they name.
void slm_flight_set_dump_path(const char *path, int rank, int world);
const char *slm_flight_dump_path(void); // NULL when off
// The caller's position, stamped on the following collectives and the dump: step (1-based
// step in progress) and phase (a string literal: "forward/backward", "optimizer", ...).
void slm_flight_set_where(int64_t step, const char *phase);
// Writes the dump now (async-signal-safe; `reason` is stored in it). False when dumping is off
// or the file could not be written.
bool slm_flight_dump(const char *reason);
// Handlers: SIGUSR2 dumps and training goes on; a fatal signal dumps, then the process dies of
// that signal as it would have (SA_RESETHAND, re-raised).
void slm_flight_install_signals(void);
// Seconds a rank whose collective timed out waits after its dump before aborting the job, so
// peers waiting in the same collective time out and dump too: min(10, timeout / 2).
double slm_flight_abort_grace(double timeout_s);

// One parsed dump (slm_flight_parse). Strings are owned (slm_flight_dump_free).
typedef struct slm_flight_rec {
    uint64_t seq;
    char *group, *op, *what, *phase, *context, *state;
    int64_t bytes, step;
    double t_start, t_end; // t_end 0 when not done
} slm_flight_rec;
typedef struct slm_flight_grp {
    char *name;
    int size, n_ranks;
    int *ranks;
    uint64_t seq; // last sequence number this rank started in the group
} slm_flight_grp;
typedef struct slm_flight_file {
    int rank, world;
    int64_t pid, step;
    char *host, *reason, *phase, *context;
    double time;
    int n_groups, n_entries;
    slm_flight_grp *groups;
    slm_flight_rec *entries;
} slm_flight_file;
// Parses and checks one dump's text (`what` names it in messages: the path). Errors:
// SLM_E_FORMAT naming `what`, the field (entries[3].seq) and what was expected: not JSON, a
// missing or mistyped field, rank outside [0, world), a group with more ranks than its size or
// a member outside the world, an entry of a group the dump does not list. On error *out is
// zeroed.
slm_status slm_flight_parse(const char *text, size_t len, const char *what, slm_flight_file *out);
void slm_flight_file_free(slm_flight_file *f);

// What slm_flight_analyze concluded.
typedef struct slm_flight_verdict {
    int world;            // from the dumps
    int n_dumps;          // ranks that wrote a dump
    bool hang;            // some rank waits in a collective another member never entered
    int culprit;          // that member's world rank (-1: none found)
    bool culprit_dumped;  // it wrote a dump (else: stopped or dead; where it was comes from
                          // its heartbeat file when there is one)
    int64_t culprit_step; // its step (-1 unknown)
    char culprit_phase[32], culprit_context[96];
    char group[64], op[32], what[64]; // the collective the others wait in
    uint64_t seq;                     // its sequence number in `group`
    int n_waiting;                    // ranks waiting in it
    char text[4096];                  // the verdict, one or more lines for people
} slm_flight_verdict;
// Reads RUN_DIR/logs/flight_rank_*.json (and RUN_DIR/heartbeat/rank_*.json for ranks without a
// dump) and matches sequence numbers per group: a rank waiting (or started and not done) in
// collective #k of group G names every member of G whose last started sequence number in G is
// below k, or which wrote no dump, as never having entered it; the culprit is the one the most
// waiting ranks name (lowest rank on ties). Errors: SLM_E_IO when RUN_DIR/logs holds no dump;
// the parse errors of a dump (naming the file).
slm_status slm_flight_analyze(const char *run_dir, slm_flight_verdict *v);

// ---------------------------------------------------------------------------------------------
// Device collectives (issue 22): communicators over CUDA device buffers (device.c)
//
// A parallel set beside slm_comm_* rather than a device flag on it: a device collective is
// ordered on a CUDA stream, not on the host (it starts after the work queued before it on the
// producing stream and completes through an event the consumer's stream can wait on without
// blocking the host); it fails differently (an NCCL communicator is aborted and the failure
// returned, where an MPI one ends the job); and the CPU path stays exactly as it is, with no
// device branch in any host collective. The shapes are kept: the same collectives (all-gather,
// reduce-scatter, all-reduce) with the same argument order, blocking-free starts that fill a
// request, bounded waits on --collective-timeout with the MPI path's message, groups split with
// (color, key, name), and the flight recorder's entries numbered in the wrapped host group.
//
// Two implementations: NCCL (a communicator bootstrapped through MPI: rank 0's ncclUniqueId is
// broadcast on the host group; non-blocking NCCL config, so a wait can give up and
// ncclCommAbort), and host-staged MPI (device -> pinned host on the communication stream, the
// host collective of this module, pinned host -> device), the fallback when NCCL is not built or
// when ranks of a group share a GPU (NCCL refuses that). Built only with the CUDA backend
// (SLM_CUDA); otherwise every function below reports "built without CUDA" (SLM_E_UNSUPPORTED).
// Device pointers and streams are CUDA's (cudaStream_t as void *; NULL: the legacy default
// stream). Element types: F32 and BF16 (SUM only for reductions: NCCL's bf16 sum, the host
// path's user op), plus F64 / I64 / U8 for all-gather.

typedef enum {
    SLM_DCOMM_AUTO = 0,  // NCCL when built and every rank of the group has its own GPU, else STAGED
    SLM_DCOMM_NCCL = 1,  // NCCL; an error when not built
    SLM_DCOMM_STAGED = 2 // host-staged MPI
} slm_dcomm_kind;

// A device communicator: wraps a host communicator (the world, or its own split) and owns a
// communication stream (non-blocking w.r.t. the legacy stream) and, for NCCL, an ncclComm_t.
typedef struct slm_dcomm slm_dcomm;

// An in-flight device collective. Zero-initialised = inactive. Buffers stay valid and untouched
// (by any stream) until it completes: slm_dcomm_test said done, or slm_dcomm_wait /
// slm_dcomm_stream_wait returned (for the latter: until that stream passed the wait point).
typedef struct slm_dcomm_req {
    bool active;
    slm_dcomm *dc;         // borrowed
    const char *op, *what; // string literals
    double t_start;        // MPI_Wtime at start
    uint64_t flight;       // its flight-recorder entry (0: none)
    void *done;            // cudaEvent_t recorded on the communication stream after it
    int slot;              // staged: its pinned staging slot (-1: none)
    slm_dist_req host;     // staged: the host collective
    void *dst;             // staged: device destination of the copy back
    const void *back;      // staged: its pinned source
    size_t back_bytes;     // staged: its size
    bool back_queued;      // staged: the copy back is queued (the host part is done)
} slm_dcomm_req;

// This rank's rank among the ranks of its node: OMPI_COMM_WORLD_LOCAL_RANK (mpirun), else
// SLURM_LOCALID (srun), else MPI_LOCALRANKID (MPICH's Hydra), else 0 in a world of one, else
// the rank in MPI_COMM_TYPE_SHARED of the world. Errors: SLM_E_ARG naming the variable when its
// value is not an integer >= 0.
slm_status slm_dist_local_rank(int *local_rank);
// Picks and sets this rank's GPU: local rank % device count (cudaSetDevice), logged. *dev gets
// it. Errors: SLM_E_UNSUPPORTED without CUDA or without a device; the local rank's errors.
slm_status slm_dist_select_device(int *dev);
// Whether this build has the implementation (NCCL: built with NCCL; STAGED / AUTO: with CUDA).
bool slm_dcomm_available(slm_dcomm_kind kind);

// Creates the device communicator of host communicator `host` (borrowed; must outlive it) on
// the current device. Collective over `host`. AUTO decides the same on every rank (one
// all-gather of each rank's host and device id). Errors: SLM_E_UNSUPPORTED (not built, or NCCL
// asked for and ranks share a GPU), SLM_E_COMM (CUDA / NCCL failures, named), SLM_E_TIMEOUT
// (NCCL's bootstrap past the timeout; the communicator aborted). *out NULL on error.
slm_status slm_dcomm_create(slm_comm *host, slm_dcomm_kind kind, slm_dcomm **out);
// Splits `parent` (HYBRID_SHARD's shard and replica groups) as slm_comm_split does: the host
// group with MPI_Comm_split and, for NCCL, the device one with ncclCommSplit. Collective over
// `parent`. Errors as slm_dcomm_create's.
slm_status slm_dcomm_split(slm_dcomm *parent, int color, int key, const char *name,
                           slm_dcomm **out);
// Frees it (destroys the NCCL communicator, the stream and the staging buffers; frees a host
// group it split). In-flight requests must be complete. NULL is ignored.
void slm_dcomm_free(slm_dcomm *dc);
slm_dcomm_kind slm_dcomm_kind_of(const slm_dcomm *dc); // NCCL or STAGED, never AUTO
slm_comm *slm_dcomm_host(slm_dcomm *dc);               // the wrapped host group
void *slm_dcomm_stream(slm_dcomm *dc);                 // the communication stream

// Starts a collective on the communication stream after the work queued on `after` (the
// producing stream: an event recorded there is waited on by the communication stream; the
// host does not block, except the staged path, which waits for its device-to-host copy before
// starting the MPI collective). Shapes as the host ones:
//  iallgather:      send [count] -> recv [size * count] in rank order (send may be
//                   recv + rank * count: in place);
//  ireduce_scatter: send [size * count] -> recv [count], block r to rank r (SUM only);
//  iallreduce:      in place on buf [count] (SUM only for BF16).
// `what` names it in messages and the flight recorder (a string literal). Errors: SLM_E_ARG
// (dtype / op not carried), SLM_E_COMM (CUDA / NCCL failures, or a communicator aborted by an
// earlier timeout); the request stays inactive then.
slm_status slm_dcomm_iallgather(slm_dcomm *dc, const void *send, void *recv, int64_t count,
                                slm_dtype dt, void *after, const char *what, slm_dcomm_req *req);
slm_status slm_dcomm_ireduce_scatter(slm_dcomm *dc, const void *send, void *recv, int64_t count,
                                     slm_dtype dt, slm_redop op, void *after, const char *what,
                                     slm_dcomm_req *req);
slm_status slm_dcomm_iallreduce(slm_dcomm *dc, void *buf, int64_t count, slm_dtype dt, slm_redop op,
                                void *after, const char *what, slm_dcomm_req *req);
// Polls without blocking: *done true when complete (the request becomes inactive). Errors: an
// asynchronous NCCL or CUDA error (the communicator is aborted).
slm_status slm_dcomm_test(slm_dcomm_req *req, bool *done);
// Waits on the host for completion, bounded by slm_dist_set_timeout from the wait's start.
// NCCL: past the deadline the flight recorder is dumped (and the abort grace waited, as the MPI
// path does), the communicator is aborted (ncclCommAbort; every later call on it fails) and
// SLM_E_TIMEOUT returned with the MPI path's message ("collective WHAT timed out after T s
// (CONTEXT; group: NAME, N ranks); a peer rank is dead or stuck; NCCL communicator aborted"):
// the caller fails the step. Staged: the host collective's wait is the MPI path's own
// (slm_dist_wait: on expiry it ends the job). No-op on an inactive request.
slm_status slm_dcomm_wait(slm_dcomm_req *req);
// Makes `stream` (compute) wait on the collective without blocking the host (the overlap:
// start the next unit's all-gather, compute, then let the consumer's stream wait). NCCL: an
// event wait; the request stays active so a later slm_dcomm_test / slm_dcomm_wait still bounds
// it on the host. Staged: waits on the host for the MPI part (slm_dcomm_wait), then the same.
slm_status slm_dcomm_stream_wait(slm_dcomm_req *req, void *stream);

// Total time (seconds) this process spent blocked in slm_dist_wait / blocking collectives since
// the last reset: the communication time not hidden behind compute ("exposed comm").
double slm_dist_wait_seconds(void);
void slm_dist_reset_wait_seconds(void);

#endif
