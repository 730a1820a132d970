// launch: the supervisor of a training job (`shardlm launch`). It is the parent of mpirun (or of
// srun inside a Slurm allocation) and uses no MPI itself, so it outlives any rank failure.
//
// Per attempt: a preflight `shardlm healthcheck` job on every usable slot (hosts whose ranks
// fail it are excluded), then `shardlm train ... --resume auto --heartbeat-dir RUN_DIR/heartbeat`
// with SHARDLM_ATTEMPT=N in its environment, started in its own process group. The launcher
// becomes a child subreaper (PR_SET_CHILD_SUBREAPER), so ranks that lose their mpirun are
// re-parented to it and never outlive it; mpirun / srun get PR_SET_PDEATHSIG SIGTERM, so the
// job stops (forwarded to the ranks: checkpoint, exit 75) when the launcher itself is killed
// (kill -9, OOM). A run directory whose run lock a live process holds is refused up front
// (SLM_LAUNCH_FAILED, nothing started or written). It supervises:
//  - the job's exit status (0: done; 75: preempted; anything else: a failure);
//  - the heartbeat files: no rank advancing for hang_timeout_s is a hang;
//  - its own SIGTERM / SIGUSR1 / SIGINT and max_run_s: forwarded to the ranks as SIGUSR1 (the
//    trainer checkpoints and exits 75), then the job is terminated after preempt_grace_s.
// A failure or hang: SIGUSR2 to the ranks (their flight recorders dump), the culprit named
// (mpirun's report of the rank that died, a rank found stopped in /proc, the `shardlm flight`
// verdict), SIGTERM to every process of the job, SIGKILL after kill_grace_s, exponential
// backoff, then the next attempt from the newest checkpoint that verifies. Restarts are counted
// for the whole job. A host that fails its health check, or that is named as the culprit of
// two failures, is excluded; the next attempt runs at --nproc on the remaining slots (spares) or
// at the largest smaller world >= min_nproc that divides the global batch, keeping the global
// batch by scaling --grad-accum (per-rank memory unchanged; the same sequences per step, as the
// loader's order does not depend on the world size, docs/formats.md). A failure before the
// attempt's first step with the same error as the previous attempt is deterministic: no retry.
#ifndef SLM_LAUNCH_H
#define SLM_LAUNCH_H

#include "base/base.h"

// Exit codes of `shardlm launch` (docs/operations.md).
#define SLM_LAUNCH_OK 0
#define SLM_LAUNCH_FAILED 1        // failed after max_restarts restarts (or cannot continue)
#define SLM_LAUNCH_USAGE 2         // usage error
#define SLM_LAUNCH_HEALTH 3        // the health check failed and no healthy world is left
#define SLM_LAUNCH_DETERMINISTIC 4 // deterministic start-up failure (not retried)
#define SLM_LAUNCH_PREEMPTED 75    // preempted / max_run reached: resumable

typedef struct slm_launch_opts {
    int nproc;     // ranks of a full-size attempt (>= 1)
    int min_nproc; // smallest world allowed after exclusions (1..nproc)
    int max_restarts;
    const char *hostfile;     // "host slots=N" / "host:N" / "host" lines, '#' comments (or NULL)
    const char *hosts;        // "h1:2,h2:2" (or NULL); neither: this host, nproc slots
    double max_run_s;         // > 0: stop (preempted) after this long
    double hang_timeout_s;    // no heartbeat progress for this long is a hang
    double startup_timeout_s; // before an attempt's first heartbeat record (start-up: MPI, model
                              // init, checkpoint load) the allowance instead of hang_timeout_s;
                              // 0: max(hang_timeout_s, 120 s)
    double preempt_grace_s;   // after forwarding a preemption: time for the checkpoint
    double kill_grace_s;      // SIGTERM -> SIGKILL
    double backoff_s;         // first wait before a restart (doubles, at most backoff_max_s)
    double backoff_max_s;
    double health_timeout_s; // bound on the health-check job
    bool no_health_check;
    const char *mpirun;          // the MPI launcher program (NULL: $MPIEXEC or "mpirun")
    const char *const *mpi_args; // extra arguments for mpirun (--mca ..., -x VAR)
    int n_mpi_args;
    const char *health_mem;   // healthcheck --mem value (NULL: its default)
    const char *exe;          // the shardlm binary the ranks run
    const char *metrics_addr; // HOST:PORT the launcher serves its own /metrics on (NULL: off)
    double metrics_linger_s;  // after the end: keep serving /metrics this long (the "done" state)
    int train_argc;           // train arguments (after "--"; a leading "train" is skipped)
    char **train_argv;
} slm_launch_opts;

// Defaults: min_nproc 0 (= nproc), 3 restarts, hang 300 s, preempt grace 120 s, kill grace
// 10 s, backoff 1 s .. 30 s, health timeout 300 s.
void slm_launch_opts_default(slm_launch_opts *o);

// Metrics: with metrics_addr the launcher serves /metrics itself (src/metrics, its own registry,
// no MPI) from before the first health check to its exit: the shardlm_launch_* families of
// docs/observability.md (restarts, attempts, world size, health-check failures, excluded hosts,
// the last attempt's result, the job state, the newest heartbeat). A port in use fails before
// anything starts (SLM_LAUNCH_FAILED, the address and the reason printed). With
// metrics_linger_s > 0 the server stays up that long after the end (state "done"; a SIGTERM or
// SIGINT ends the wait) before slm_launch_run returns.
//
// Runs the job to its end as described above. Progress lines go to stderr (slm_log, "launch:"),
// the job's own output passes through. *summary (owned, free()) receives this launch's attempts
// table, which is also appended to RUN_DIR/attempts.json (earlier launches' attempts are kept,
// numbered by launch). Returns the process exit code (SLM_LAUNCH_*); SLM_LAUNCH_USAGE with the
// message printed for bad options (no --out in the train arguments, --resume other than auto,
// a bad hostfile, min_nproc > nproc, too few slots); SLM_LAUNCH_DETERMINISTIC when mpirun /
// srun failed at start-up with no rank reporting (a RUN_DIR this call created is removed).
int slm_launch_run(const slm_launch_opts *o, char **summary);

// One heartbeat record (docs/operations.md "Heartbeat").
typedef struct slm_heartbeat {
    int rank;
    long pid;
    char host[128];
    int64_t step;
    double time;
    char phase[16];
} slm_heartbeat;
// Parses one heartbeat file's text (len bytes, need not be NUL-terminated). SLM_E_FORMAT
// naming the field for anything else.
slm_status slm_launch_parse_heartbeat(const char *text, size_t len, slm_heartbeat *hb);

// Parses hosts "h1:2,h2" (slots default 1) or, with is_file, a hostfile's text, appending at
// most cap entries to names (copied, owned by the caller: free each) / slots. Returns the count,
// or -1 with the error message set (SLM_E_ARG naming the line / item).
int slm_launch_parse_hosts(const char *text, bool is_file, char **names, int *slots, int cap);

#endif
