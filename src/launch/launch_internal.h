// Private to src/launch/ (launch.h is the public API): the types and functions its files share.
//
// One file per concern. Calls go one way, down this graph (a file calls only the files named
// after its arrow; util.c, signals.c, metrics.c, proc.c and rundir.c call no other file of
// launch/):
//
//   launch.c     slm_launch_run: options, the attempt loop, the end of a launch
//                -> attempt preflight record command hosts rundir job metrics signals util
//   attempt.c    one training attempt: its command, supervision, outcome and culprit
//                -> job output culprit heartbeat command hosts rundir metrics signals util
//   preflight.c  the health-check job before an attempt; hosts excluded on its report
//                -> job output command hosts metrics signals util
//   record.c     RUN_DIR/attempts.json (earlier launches kept) and the summary table
//                -> hosts util
//   command.c    argument vectors: the mpirun / srun prefix, lookups in the train arguments
//                -> hosts
//   job.c        starting and stopping the job: fork / exec, process group, teardown, reaping
//                -> output proc util
//   output.c     the job's stderr: relayed, and parsed (errors, culprits, Open MPI's banners,
//                the MPI transport)  -> util
//   culprit.c    evidence of a failure: ranks dead or stopped in /proc, the flight recorder's
//                verdict  -> proc util
//   heartbeat.c  heartbeat records: parsing, the per-attempt scan  -> metrics
//   hosts.c      the host list, exclusions, usable slots, the world of the next attempt
//                -> metrics
//   rundir.c     the run directory: its run lock, checkpoints, directories this launch made
//   proc.c       the process tree in /proc: a process's state, this process's descendants
//   metrics.c    the launcher's own /metrics (--metrics-addr)
//   signals.c    the launcher's own signals (SIGTERM, SIGUSR1, SIGINT), recorded for the loops
//   util.c       wall clock and sleep
#ifndef SLM_LAUNCH_INTERNAL_H
#define SLM_LAUNCH_INTERNAL_H

#include <cjson/cJSON.h>
#include <sys/types.h>

#include "launch/launch.h"

#define MAX_HOSTS 256
#define MAX_ATTEMPTS 256
#define MAX_RANKS 4096

// The launcher's states (shardlm_launch_state).
enum { ST_HEALTH, ST_RUNNING, ST_BACKOFF, ST_DONE, N_STATES };

typedef struct hb_state {
    int world;
    slm_heartbeat *last; // [world]; step -1: none seen
    double last_progress;
    int64_t start_step;     // from the first "start" record (-1: none)
    int64_t max_step;       // highest "train" step
    double first_step_time; // launcher time of the first "train" record (0: none)
    double newest_time;     // the newest "time" of any record (0: none)
    int64_t newest_step;    // the highest step of any record (-1: none)
    bool any_train;
    bool any_record; // some rank wrote a record in this attempt (start-up is over)
} hb_state;

typedef struct job {
    pid_t pid;
    int err_fd;
    bool exited;
    int status;
    double exit_time;
    double evidence_time; // when the launcher's output first reported the failure (0: never)
    int64_t resumed_step; // from the trainer's "resumed from ... (step N)" line (-1: none)
    char part[8192];
    size_t part_len;
    char first_error[1024]; // the first error line, not counting non-fatal ones (below)
    // The first fatal line of the trainer ("error: train: ...", what a rank exits on) and the
    // rank whose error it is (err_rank, -1: none): the rank named in "rank R failed: ..." (an
    // error the ranks agreed on, printed by all of them) if any fatal line carries one, else the
    // rank that printed the first. A "... (training continues ...)" line is never either.
    char fatal_error[1024];
    int err_rank;
    bool err_agreed;
    // A rank's "terminated by SIGTERM" / "interrupted by SIGINT" line: the consequence of
    // mpirun (or the launcher) stopping the job, never its cause; the attempt's error only when
    // nothing else explains the failure (a rank failing in MPI_Init makes mpirun SIGTERM the
    // others, and their line must not hide Open MPI's banner naming the cause).
    char signal_error[128];
    int culprit_rank;
    bool culprit_signal; // culprit_rank from mpirun's "exited on signal" (else: first exit != 0)
    char culprit_host[128];
    char reason[256];
    bool coll_timeout;
    int pending_rank; // "Process name: [[J,1],R]" seen, waiting for "Exit code"
    // The text of Open MPI's first help banner (between two lines of dashes), space-joined: what
    // mpirun says when it fails before any rank runs (a bad MCA setting, no slots, a missing
    // executable), where no line carries "error:".
    // A banner that opens with "WARNING" (Open MPI goes on after it: an unknown interface name,
    // an OpenFabrics device it skips) is kept aside in warn_banner and the next one is taken:
    // the warning is the reason only when no other banner follows.
    char banner[4096];
    char warn_banner[4096];
    int banner_state; // 0: none seen yet, 1: inside the first, 2: done
    // transport (Open MPI verbose selection lines)
    char pml[64];
    char btl[512];
} job;

typedef struct argv_t {
    char **v;
    int n, cap;
} argv_t;

typedef struct attempt {
    int n;
    double start, end, detected, last_progress, first_step_time;
    int world, grad_accum;
    char hosts[1024];
    int exit_status, exit_signal; // raw job exit (-1 when none)
    char result[24];              // "success", "failed", "hang", "preempted", "max-run"
    char reason[4608];
    int culprit_rank;
    char culprit_host[128];
    char verdict[1024];
    char error[1024];
    int64_t start_step, steps_reached, steps_lost;
    bool any_train;
    bool refused; // the MPI start-up failed, no rank reported (launcher_refused)
} attempt;

typedef struct health_rec {
    double time;
    int world;
    bool ok;
    char failed[4608]; // "rank 2 (host h2): gemm: ...; ..."
} health_rec;

typedef struct run {
    const slm_launch_opts *o; // &opts once the options are checked
    slm_launch_opts opts;     // the caller's, min_nproc 0 replaced by nproc
    const char *run_dir;
    char hb_dir[4096];
    bool slurm;
    int n_hosts;
    char *host[MAX_HOSTS];
    int slots[MAX_HOSTS];
    bool excluded[MAX_HOSTS];
    int failures[MAX_HOSTS];
    bool local;                     // no host list: this machine
    int grad_accum, grad_accum_idx; // the user's --grad-accum and its argv index (-1: none)
    int shard_group;                // HYBRID_SHARD's --shard-group-size (a world divides by it); 1
    bool add_resume, add_heartbeat, has_verify, has_grace;
    // --train-from-scratch (argv index, -1: none): passed to the first attempt only while the
    // earlier run's checkpoints/ (inode scratch_ino, holding saves: scratch_had) is still in place
    int scratch_idx;
    bool scratch_had;
    ino_t scratch_ino;
    const char *model;
    const char *device; // the train arguments' --device (NULL: the CPU): the health check's too
    char transport[1024];
    attempt att[MAX_ATTEMPTS];
    int n_att;
    health_rec health[MAX_ATTEMPTS];
    int n_health;
    int restarts;
    int exit_code;
    char message[4608];
    double t0;
    // RUN_DIR/attempts.json as earlier launches left it (appended to, never overwritten): their
    // attempts, health records and launch summaries (owned arrays), and this launch's number.
    cJSON *prev_attempts, *prev_health, *prev_launches;
    int launch_no;
    // The MPI start-up failed with no rank reporting (launcher_refused); this launch created
    // RUN_DIR (made: the highest directory it created, "" when it existed): it is removed.
    bool startup_failed;
    char made[4096];
} run;

// util.c
double wall_now(void);  // Unix time, seconds
void sleep_s(double s); // sleeps s seconds, resuming after a signal

// signals.c: SIGTERM / SIGUSR1 / SIGINT of the launcher, recorded by a handler
void install_signals(void);
const char *sig_name(int sig);
int sig_pending(void); // the last signal received and not cleared (0: none)
void sig_clear(void);

// metrics.c: the launcher's /metrics (docs/observability.md); without --metrics-addr every
// update is a no-op
slm_status lm_start(const char *addr); // NULL addr: off; a port in use fails
void lm_stop(void);
bool lm_serving(void);
void lm_state(int s); // ST_*
void lm_launch(int nproc, int max_restarts, double start_time);
void lm_attempt(int n, int world); // attempt n (1-based) starts
void lm_restart(void);
void lm_health_failed(void);
void lm_heartbeat(double time, int64_t step); // the newest record's time, the highest step
void lm_host_excluded(const char *host, int n_hosts_excluded);
void lm_exit(const char *result, const char *reason); // the attempt that ended

// heartbeat.c: the scan of an attempt's heartbeat directory (hb_state; h->last owned: free)
void hb_init(hb_state *h, int world, double now);
void hb_scan(hb_state *h, const char *dir, double now);
bool all_ended(const hb_state *h); // every rank's newest record is its final "end"

// proc.c
int proc_stat(long pid, long *ppid, char *state); // 0, or -1 when the process is gone
int proc_descendants(long *pids, int cap);        // live descendants of this process

// output.c: the job's stderr
void job_drain(job *j, int timeout_ms); // reads what is there (waiting at most timeout_ms)
const char *job_banner(const job *j);   // Open MPI's banner for the failure ("" none)
bool launcher_refused(const job *j);    // the MPI start-up failed with no rank reporting

// job.c: the job's process group (mpirun / srun and everything it started)
int job_start(job *j, char *const *argv, const char *const *env_add); // 0, or -1 (errno)
void job_reap(job *j); // reaps every exited child (j may be NULL)
void job_terminate(job *j, double grace);
void job_sweep(job *j);

// hosts.c
int host_index(run *r, const char *name); // -1: not in the list
int host_of_rank(const run *r, int rank);
void exclude_host(run *r, int hi, const char *why);
int n_excluded(const run *r);
int usable_slots(const run *r);
void host_arg(const run *r, int world, char *out, size_t cap);
void excluded_list(const run *r, char *out, size_t cap, char sep);
void slurm_hosts(run *r);
int choose_world(const run *r); // 0: no world fits

// command.c: argument vectors (argv_t; av_free frees one)
void av_add(argv_t *a, const char *s);
void av_addf(argv_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void av_free(argv_t *a);
char *av_join(const argv_t *a); // space-joined (owned: free)
const char *launcher_name(const run *r);
extern const char *const k_verbose_mpi_env[];
void train_command(const run *r, const attempt *at, bool scratch, argv_t *a);
void health_command(const run *r, int world, const char *report, argv_t *a);
const char *find_arg(const slm_launch_opts *o, const char *name, int *idx);

// rundir.c
bool scratch_state(const char *run_dir, ino_t *ino);
bool run_lock_held(const char *run_dir, char *holder, size_t cap);
void report_lock_holder(run *r, const char *holder);
int64_t newest_checkpoint_step(const char *run_dir); // -1: none
void first_missing(const char *path, char *out, size_t cap);
bool remove_made(const run *r);

// culprit.c
void flight_verdict(run *r, char *out, size_t cap);
int stopped_rank(const hb_state *h, long *pid_out);
int dead_rank(const hb_state *h, const char *myhost, long *pid_out, int *n_dead);

// preflight.c
int run_health(run *r); // 0, SLM_LAUNCH_HEALTH / _DETERMINISTIC / _PREEMPTED / _FAILED

// attempt.c
void run_attempt(run *r, attempt *at, int world);

// record.c: RUN_DIR/attempts.json and the summary
void load_history(run *r);
void free_history(run *r);
void write_attempts(run *r, const char *result);
char *summary_text(const run *r, const char *result, bool gone); // owned: free

#endif
