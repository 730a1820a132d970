// dist: the communication layer over MPI (Open MPI). mpi.h is included only in this module.
//
// A process without mpirun is a world of one through MPI's singleton init. Every collective is
// started non-blocking and waited on with a deadline (slm_dist_set_timeout); on expiry the rank
// logs the op, its context (unit, step) and the group, then aborts the whole job with MPI_Abort,
// so a dead or stuck peer ends the job with an error instead of a hang.
// The FSDP issue extends this with shard / replica groups, reduce-scatter and all-gather.
#ifndef SLM_DIST_H
#define SLM_DIST_H

#include "base/base.h"

typedef enum { SLM_DT_F32, SLM_DT_F64, SLM_DT_I64, SLM_DT_U8 } slm_dtype_comm;
typedef enum { SLM_OP_SUM, SLM_OP_MAX, SLM_OP_MIN } slm_redop;

// Initialises MPI (thread level FUNNELED), sets the log rank and installs an abort hook that
// calls MPI_Abort. Idempotent. Errors: SLM_E_COMM if MPI cannot start.
slm_status slm_dist_init(int *argc, char ***argv);
// Finalises MPI if slm_dist_init started it. Safe to call when never initialised.
void slm_dist_finalize(void);
int slm_dist_rank(void);
int slm_dist_world(void);
// Deadline for every wait, in seconds (default 600; <= 0 disables).
void slm_dist_set_timeout(double seconds);
// Context shown when a collective times out ("step 120, unit 3"); copied.
void slm_dist_set_context(const char *ctx);

// World collectives. `what` names the operation for timeout messages.
void slm_dist_barrier(const char *what);
void slm_dist_allreduce(void *buf, int64_t count, slm_dtype_comm dt, slm_redop op,
                        const char *what);
void slm_dist_bcast(void *buf, int64_t count, slm_dtype_comm dt, int root, const char *what);
// Gathers `count` elements from every rank into recv[world * count] (rank order).
void slm_dist_allgather(const void *send, void *recv, int64_t count, slm_dtype_comm dt,
                        const char *what);

// Agrees on a status across ranks at a phase boundary: returns SLM_OK on every rank if all
// ranks passed SLM_OK; otherwise every rank returns the lowest failing rank's status and
// message (prefixed with that rank), so no rank is left waiting in a later collective.
slm_status slm_dist_agree(slm_status local);

#endif
