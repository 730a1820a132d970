// The training-job supervisor (launch.h). One process, single-threaded: a poll loop over the
// job's stderr pipe, its exit status, the heartbeat files and this process's own signals.
#include "launch/launch.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "metrics/metrics.h"

#define MAX_HOSTS 256
#define MAX_ATTEMPTS 256
#define MAX_RANKS 4096

void slm_launch_opts_default(slm_launch_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_restarts = 3;
    o->hang_timeout_s = 300;
    o->preempt_grace_s = 120;
    o->kill_grace_s = 10;
    o->backoff_s = 1;
    o->backoff_max_s = 30;
    o->health_timeout_s = 300;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

// ---------------------------------------------------------------------------------------------
// Signals of the launcher itself: recorded, acted on by the loop.

static volatile sig_atomic_t g_signal;

static void on_signal(int sig) {
    g_signal = sig;
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static const char *sig_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : "?";
}

// ---------------------------------------------------------------------------------------------
// The launcher's own metrics (--metrics-addr; docs/observability.md "Launcher metrics"). Every
// handle is NULL without a registry, and the registry's updates ignore NULL handles, so the code
// below updates them unconditionally.

enum { ST_HEALTH, ST_RUNNING, ST_BACKOFF, ST_DONE, N_STATES };
static const char *const k_state_names[N_STATES] = {"health_check", "running", "backing_off",
                                                    "done"};

typedef struct launch_metrics {
    slm_metrics *reg;
    slm_metrics_server *srv;
    slm_metric *restarts, *attempts, *attempt, *world, *nproc, *max_restarts, *health_fail;
    slm_metric *excluded, *hb_time, *hb_step, *start_time, *state[N_STATES];
    slm_metric_family *host_excluded, *exit_info;
    slm_metric *exit_cur; // the series of exit_info now at 1
} launch_metrics;

static launch_metrics g_m;

static slm_status lm_start(const char *addr) {
    memset(&g_m, 0, sizeof g_m);
    if (!addr) return SLM_OK;
    launch_metrics *m = &g_m;
    m->reg = slm_metrics_new();
    m->restarts = slm_metrics_counter(m->reg, "shardlm_launch_restarts_total",
                                      "Restarts of the job after a failed or hung attempt (counted "
                                      "for the whole job, at most --max-restarts)");
    m->attempts = slm_metrics_counter(m->reg, "shardlm_launch_attempts_started_total",
                                      "Training attempts started (mpirun / srun of shardlm train)");
    m->attempt = slm_metrics_gauge(m->reg, "shardlm_launch_attempt",
                                   "Number of the current (or last) attempt, 1-based; 0 before "
                                   "the first");
    m->world = slm_metrics_gauge(m->reg, "shardlm_launch_world_size",
                                 "Ranks of the current (or last) attempt; 0 before the first");
    m->nproc =
        slm_metrics_gauge(m->reg, "shardlm_launch_nproc", "Ranks of a full-size attempt (--nproc)");
    m->max_restarts = slm_metrics_gauge(m->reg, "shardlm_launch_max_restarts",
                                        "Restarts allowed (--max-restarts)");
    m->health_fail = slm_metrics_counter(m->reg, "shardlm_launch_health_check_failures_total",
                                         "Preflight health checks that failed");
    m->excluded = slm_metrics_gauge(m->reg, "shardlm_launch_excluded_hosts",
                                    "Hosts excluded (failed a health check or named in two "
                                    "failures)");
    const char *host_label[] = {"host"};
    slm_status st =
        slm_metrics_family(m->reg, SLM_METRIC_GAUGE, "shardlm_launch_host_excluded",
                           "1 for each excluded host (series appear when a host is excluded)", 1,
                           host_label, 0, NULL, &m->host_excluded);
    const char *exit_labels[] = {"result", "reason"};
    if (!st)
        st = slm_metrics_family(m->reg, SLM_METRIC_GAUGE, "shardlm_launch_last_exit_info",
                                "The last ended attempt: 1 on the series with its result "
                                "(success, failed, hang, preempted, max-run) and reason, 0 on "
                                "those of earlier attempts",
                                2, exit_labels, 0, NULL, &m->exit_info);
    const char *state_label[] = {"state"};
    slm_metric_family *sf = NULL;
    if (!st)
        st = slm_metrics_family(m->reg, SLM_METRIC_GAUGE, "shardlm_launch_state",
                                "1 on the launcher's current state (health_check, running, "
                                "backing_off, done), 0 on the others",
                                1, state_label, 0, NULL, &sf);
    for (int i = 0; !st && i < N_STATES; i++)
        st = slm_metrics_series(sf, &k_state_names[i], &m->state[i]);
    m->hb_time = slm_metrics_gauge(m->reg, "shardlm_launch_last_heartbeat_timestamp_seconds",
                                   "Unix time in the newest heartbeat record of the current "
                                   "attempt (written by every rank each step); 0 before the "
                                   "first");
    m->hb_step = slm_metrics_gauge(m->reg, "shardlm_launch_heartbeat_step",
                                   "Highest step in the heartbeat records of the current "
                                   "attempt");
    m->start_time = slm_metrics_gauge(m->reg, "shardlm_launch_start_time_seconds",
                                      "Unix time the launcher started");
    if (!st && (!m->restarts || !m->attempts || !m->attempt || !m->world || !m->nproc ||
                !m->max_restarts || !m->health_fail || !m->excluded || !m->hb_time || !m->hb_step ||
                !m->start_time))
        st = slm_fail(SLM_E_ARG, "launch metrics: %s", slm_errmsg());
    if (!st) st = slm_metrics_server_start(addr, m->reg, &m->srv);
    if (st) {
        slm_metrics_free(m->reg);
        memset(m, 0, sizeof *m);
        return st;
    }
    slm_info("launch: metrics: serving http://%s/metrics", slm_metrics_server_addr(m->srv));
    return SLM_OK;
}

static void lm_stop(void) {
    slm_metrics_server_stop(g_m.srv);
    slm_metrics_free(g_m.reg);
    memset(&g_m, 0, sizeof g_m);
}

static void lm_state(int s) {
    for (int i = 0; i < N_STATES; i++)
        slm_metric_set(g_m.state[i], i == s ? 1 : 0);
}

static void lm_host_excluded(const char *host, int n_excluded) {
    slm_metric_set(g_m.excluded, n_excluded);
    slm_metric *s = NULL;
    if (g_m.host_excluded && slm_metrics_series(g_m.host_excluded, &host, &s) == SLM_OK)
        slm_metric_set(s, 1);
}

// The attempt that ended: its series of shardlm_launch_last_exit_info goes to 1, the previous
// one to 0 (reasons are bounded to 160 bytes; one series per distinct result + reason).
static void lm_exit(const char *result, const char *reason) {
    if (!g_m.exit_info) return;
    char why[161];
    snprintf(why, sizeof why, "%s", reason);
    const char *v[] = {result, why};
    slm_metric *s = NULL;
    if (slm_metrics_series(g_m.exit_info, v, &s) != SLM_OK) return;
    if (g_m.exit_cur && g_m.exit_cur != s) slm_metric_set(g_m.exit_cur, 0);
    slm_metric_set(s, 1);
    g_m.exit_cur = s;
}

// ---------------------------------------------------------------------------------------------
// Heartbeats

slm_status slm_launch_parse_heartbeat(const char *text, size_t len, slm_heartbeat *hb) {
    memset(hb, 0, sizeof *hb);
    cJSON *o = cJSON_ParseWithLength(text, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return slm_fail(SLM_E_FORMAT, "heartbeat: not a JSON object");
    }
    int64_t rank = 0, pid = 0, step = 0;
    double t = 0;
    const char *host = NULL, *phase = NULL;
    slm_status st = slm_json_i64("heartbeat", o, "rank", 0, MAX_RANKS * 1024, &rank);
    if (!st) st = slm_json_i64("heartbeat", o, "pid", 1, INT32_MAX, &pid);
    if (!st) st = slm_json_i64("heartbeat", o, "step", 0, INT64_MAX / 2, &step);
    if (!st) st = slm_json_num("heartbeat", o, "time", 0, 1e11, false, &t);
    if (!st) st = slm_json_str("heartbeat", o, "host", &host);
    if (!st) st = slm_json_str("heartbeat", o, "phase", &phase);
    if (!st) {
        hb->rank = (int)rank, hb->pid = (long)pid, hb->step = step, hb->time = t;
        snprintf(hb->host, sizeof hb->host, "%s", host);
        snprintf(hb->phase, sizeof hb->phase, "%s", phase);
    }
    cJSON_Delete(o);
    return st;
}

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

static void hb_init(hb_state *h, int world, double now) {
    memset(h, 0, sizeof *h);
    h->world = world;
    h->last = calloc((size_t)world, sizeof *h->last);
    if (!h->last) slm_fatal("launch: out of memory");
    for (int r = 0; r < world; r++)
        h->last[r].step = -1;
    h->last_progress = now;
    h->start_step = -1;
    h->max_step = -1;
    h->newest_step = -1;
}

static void hb_scan(hb_state *h, const char *dir, double now) {
    char path[4096];
    for (int r = 0; r < h->world; r++) {
        snprintf(path, sizeof path, "%s/rank_%05d.json", dir, r);
        char *text = NULL;
        size_t len = 0;
        if (slm_file_read_all(path, &text, &len) != SLM_OK) continue;
        slm_heartbeat hb;
        if (slm_launch_parse_heartbeat(text, len, &hb) == SLM_OK && hb.rank == r) {
            slm_heartbeat *p = &h->last[r];
            if (hb.step != p->step || strcmp(hb.phase, p->phase) != 0 || hb.pid != p->pid)
                h->last_progress = now;
            *p = hb;
            h->any_record = true;
            if (!strcmp(hb.phase, "start") && h->start_step < 0) h->start_step = hb.step;
            bool trained = !strcmp(hb.phase, "train");
            if (trained && !h->any_train) h->first_step_time = now;
            h->any_train |= trained;
            if (strcmp(hb.phase, "start") != 0 && hb.step > h->max_step) h->max_step = hb.step;
            if (hb.time > h->newest_time) h->newest_time = hb.time;
            if (hb.step > h->newest_step) h->newest_step = hb.step;
            slm_metric_set(g_m.hb_time, h->newest_time);
            slm_metric_set(g_m.hb_step, (double)h->newest_step);
        }
        free(text);
    }
}

// ---------------------------------------------------------------------------------------------
// Processes: the job's tree (descendants of this process; orphans are re-parented here because
// the launcher is a child subreaper).

static int proc_stat(long pid, long *ppid, char *state) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    if (!rp || sscanf(rp + 1, " %c %ld", state, ppid) != 2) return -1;
    return 0;
}

// Live (non-zombie) descendants of this process into pids[cap]; returns the count.
static int descendants(long *pids, int cap) {
    enum { SCAN = 65536 };
    long *all = malloc(sizeof(long) * SCAN * 2);
    if (!all) return 0;
    int n_all = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) && n_all < SCAN) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        long pid = atol(e->d_name), pp;
        char stc;
        if (proc_stat(pid, &pp, &stc) != 0 || stc == 'Z') continue;
        all[2 * n_all] = pid, all[2 * n_all + 1] = pp, n_all++;
    }
    if (d) closedir(d);
    int n = 0;
    long self = (long)getpid();
    // breadth first from self
    long frontier_start = 0;
    for (int i = 0; i < n_all && n < cap; i++)
        if (all[2 * i + 1] == self) pids[n++] = all[2 * i];
    while (frontier_start < n) {
        long parent = pids[frontier_start++];
        for (int i = 0; i < n_all && n < cap; i++)
            if (all[2 * i + 1] == parent) pids[n++] = all[2 * i];
    }
    free(all);
    return n;
}

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

// The MPI start-up failed with no rank reporting anything: the launcher (mpirun / srun) could
// not be executed, or
// it exited with a help banner (refusing to run as root without Open MPI's variables, a bad
// MCA setting, too few slots) while no rank printed an error (nor a "terminated by" line) and it
// reported no rank's exit.
static bool launcher_refused(const job *j) {
    if (!j->exited || j->reason[0] || j->signal_error[0]) return false; // a rank ran
    if (!strncmp(j->first_error, "error: launch: cannot execute", 29)) return true;
    return !j->first_error[0] && j->banner[0] && WIFEXITED(j->status) && WEXITSTATUS(j->status);
}

// Reaps every exited child (the job's launcher and re-parented orphans).
static void reap(job *j) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        if (j && p == j->pid) j->exited = true, j->status = st, j->exit_time = wall_now();
    }
}

static void note_transport(job *j, const char *line) {
    // "[host:pid] select: component ob1 selected"
    const char *s = strstr(line, "] select: component ");
    if (s && strstr(s, " selected")) {
        char name[64] = "";
        if (sscanf(s + 20, "%63s", name) == 1 && !strstr(j->pml, name)) {
            size_t l = strlen(j->pml);
            snprintf(j->pml + l, sizeof j->pml - l, "%s%s", l ? "," : "", name);
        }
        return;
    }
    // "[host:pid] mca: bml: Using vader btl for send to [[J,1],R] on node H"
    s = strstr(line, "] mca: bml: Using ");
    if (!s || line[0] != '[') return;
    char src[128] = "", btl[32] = "", dst[128] = "";
    const char *colon = strchr(line + 1, ':');
    if (!colon || colon - line - 1 >= (long)sizeof src) return;
    memcpy(src, line + 1, (size_t)(colon - line - 1));
    if (sscanf(s + 18, "%31s", btl) != 1) return;
    const char *on = strstr(s, " on node ");
    if (!on || sscanf(on + 9, "%127s", dst) != 1) return;
    if (!strcmp(btl, "self")) return;
    char item[300];
    snprintf(item, sizeof item, "%s %s->%s", btl, src, dst);
    if (strstr(j->btl, item)) return;
    size_t l = strlen(j->btl);
    if (l + strlen(item) + 3 < sizeof j->btl)
        snprintf(j->btl + l, sizeof j->btl - l, "%s%s", l ? ", " : "", item);
}

static bool is_verbose_mca(const char *line) {
    return line[0] == '[' && (strstr(line, "] mca: ") || strstr(line, "] select: ") ||
                              strstr(line, "] check:select: ") || strstr(line, "] selected ") ||
                              strstr(line, "] btl: ") || strstr(line, "] pml: "));
}

// A banner ends: a warning is set aside (the first one) and the search goes on, else done.
static void banner_close(job *j) {
    if (!strncmp(j->banner, "WARNING", 7)) {
        if (!j->warn_banner[0]) snprintf(j->warn_banner, sizeof j->warn_banner, "%s", j->banner);
        j->banner[0] = 0;
        j->banner_state = 0;
    } else
        j->banner_state = 2;
}

// Open MPI's banner for the failure: the first that is not a warning, else the first warning.
static const char *job_banner(const job *j) {
    return j->banner[0] ? j->banner : j->warn_banner;
}

// Collects the first Open MPI help banner (job.banner): a line of dashes opens it, the next
// closes it; blank lines are skipped, runs of spaces kept as one; cut at the buffer's size.
static void banner_line(job *j, const char *line) {
    if (j->banner_state == 2) return;
    size_t d = strspn(line, "-");
    if (d >= 20 && line[d] == 0) {
        if (j->banner_state == 0)
            j->banner_state = 1;
        else
            banner_close(j);
        return;
    }
    if (j->banner_state != 1) return;
    size_t len = strlen(j->banner);
    if (len > 0 && line[0] && len + 4 < sizeof j->banner) j->banner[len++] = ' ';
    for (const char *c = line; *c && len + 4 < sizeof j->banner; c++) {
        bool space = *c == ' ' || *c == '\t';
        if (space && (len == 0 || j->banner[len - 1] == ' ')) continue;
        j->banner[len++] = space ? ' ' : *c;
    }
    if (len + 4 >= sizeof j->banner) {
        memcpy(j->banner + sizeof j->banner - 4, "...", 4);
        banner_close(j);
        return;
    }
    while (len > 0 && j->banner[len - 1] == ' ')
        len--;
    j->banner[len] = 0;
}

// A fatal line of the trainer (job.fatal_error): whose error it is. "shardlm[rank R/W] error:"
// (or "shardlm[rank R/W on HOST, forwarded] error:") printed it; "rank N failed: " in the
// message is slm_dist_agree's: rank N's error, which every rank stops on.
static void note_fatal(job *j, const char *line, const char *msg) {
    int who = -1;
    bool agreed = false;
    for (const char *f = strstr(msg, "rank "); f && who < 0; f = strstr(f + 5, "rank ")) {
        int rk = -1, used = 0;
        if (sscanf(f, "rank %d failed: %n", &rk, &used) == 1 && used > 0 && rk >= 0)
            who = rk, agreed = true;
    }
    const char *pre = strstr(line, "shardlm[rank ");
    if (who < 0 && pre && pre < msg) who = atoi(pre + 13);
    if (!j->fatal_error[0]) snprintf(j->fatal_error, sizeof j->fatal_error, "%s", msg);
    if (who >= 0 && (j->err_rank < 0 || (agreed && !j->err_agreed)))
        j->err_rank = who, j->err_agreed = agreed;
}

static void job_line(job *j, char *line) {
    if (is_verbose_mca(line)) {
        note_transport(j, line);
        return;
    }
    size_t n = strlen(line);
    line[n] = '\n';
    if (write(2, line, n + 1) < 0) { // relayed as it came
    }
    line[n] = 0;
    const char *e = strstr(line, " error: ");
    if (!e && !strncmp(line, "error: ", 7)) e = line - 1;
    if (e && (!strncmp(e + 1, "error: terminated by SIG", 24) ||
              !strncmp(e + 1, "error: interrupted by SIG", 25))) {
        if (!j->signal_error[0]) snprintf(j->signal_error, sizeof j->signal_error, "%s", e + 1);
    } else if (e && !strstr(e, "(training continues")) {
        if (!j->first_error[0]) snprintf(j->first_error, sizeof j->first_error, "%s", e + 1);
        if (!strncmp(e + 1, "error: train: ", 14)) note_fatal(j, line, e + 1);
    }
    if (strstr(line, "timed out after") && strstr(line, "collective")) j->coll_timeout = true;
    banner_line(j, line);
    const char *rs = strstr(line, "resumed from ");
    if (rs && (rs = strstr(rs, "(step ")) && j->resumed_step < 0) j->resumed_step = atoll(rs + 6);
    long r = 0, pid = 0;
    int sig = 0;
    char host[128] = "", signame[64] = "";
    const char *m = strstr(line, "noticed that process rank ");
    if (m && sscanf(m,
                    "noticed that process rank %ld with PID %ld on node %127s exited on signal "
                    "%d (%63[^)])",
                    &r, &pid, host, &sig, signame) >= 4) {
        j->culprit_rank = (int)r;
        j->culprit_signal = true;
        if (!j->evidence_time) j->evidence_time = wall_now();
        snprintf(j->culprit_host, sizeof j->culprit_host, "%s", host);
        snprintf(j->reason, sizeof j->reason, "rank %ld on %s exited on signal %d (%s)", r, host,
                 sig, signame);
        return;
    }
    m = strstr(line, "Process name: [[");
    if (m) {
        const char *c = strstr(m, "],");
        if (c) j->pending_rank = atoi(c + 2);
        return;
    }
    m = strstr(line, "Exit code:");
    if (m && j->pending_rank >= 0 && !j->reason[0]) {
        j->culprit_rank = j->pending_rank;
        if (!j->evidence_time) j->evidence_time = wall_now();
        snprintf(j->reason, sizeof j->reason, "rank %d exited with status %d", j->pending_rank,
                 atoi(m + 10));
        return;
    }
    m = strstr(line, "MPI_ABORT was invoked on rank ");
    if (m && !j->reason[0])
        snprintf(j->reason, sizeof j->reason, "rank %d called MPI_Abort%s", atoi(m + 30),
                 j->coll_timeout ? " after a collective timeout" : "");
}

static void job_drain(job *j, int timeout_ms) {
    if (j->err_fd < 0) return;
    struct pollfd p = {.fd = j->err_fd, .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    if (rc <= 0) return;
    for (;;) {
        ssize_t n = read(j->err_fd, j->part + j->part_len, sizeof j->part - 1 - j->part_len);
        if (n == 0) {
            if (j->part_len) j->part[j->part_len] = 0, job_line(j, j->part);
            j->part_len = 0;
            close(j->err_fd);
            j->err_fd = -1;
            return;
        }
        if (n < 0) return; // EAGAIN: nothing more now
        j->part_len += (size_t)n;
        char *start = j->part, *nl;
        while ((nl = memchr(start, '\n', j->part_len - (size_t)(start - j->part)))) {
            *nl = 0;
            job_line(j, start);
            start = nl + 1;
        }
        size_t rest = j->part_len - (size_t)(start - j->part);
        memmove(j->part, start, rest);
        j->part_len = rest;
        if (j->part_len == sizeof j->part - 1) { // an overlong line: pass it on in pieces
            j->part[j->part_len] = 0;
            job_line(j, j->part);
            j->part_len = 0;
        }
    }
}

static int job_start(job *j, char *const *argv, const char *const *env_add) {
    memset(j, 0, sizeof *j);
    j->culprit_rank = -1;
    j->err_rank = -1;
    j->pending_rank = -1;
    j->resumed_step = -1;
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fds[1], 2);
        close(fds[0]), close(fds[1]);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0), close(nul);
        signal(SIGPIPE, SIG_DFL);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGTERM, &sa, NULL), sigaction(SIGUSR1, &sa, NULL), sigaction(SIGINT, &sa, NULL);
        // The job dies with its supervisor (a kill -9 or OOM kill of the launcher): SIGTERM to
        // mpirun / srun, which forwards it to every rank (they checkpoint and exit 75, as on a
        // preemption, and a relaunch continues; Open MPI's mpirun also ends stopped ranks).
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) raise(SIGTERM); // the launcher died before the line above
        for (int i = 0; env_add && env_add[i]; i += 2)
            setenv(env_add[i], env_add[i + 1], 1);
        execvp(argv[0], argv);
        // Only async-signal-safe calls after fork: the launcher's path and why, in pieces.
        int err = errno;
        const char *why = err == ENOENT    ? ": no such file (or not on PATH)\n"
                          : err == EACCES  ? ": permission denied (not executable)\n"
                          : err == ENOEXEC ? ": not an executable format\n"
                                           : ": exec failed\n";
        static const char msg[] = "shardlm error: launch: cannot execute the MPI launcher ";
        ssize_t w = write(2, msg, sizeof msg - 1);
        if (w >= 0) w = write(2, argv[0], strlen(argv[0]));
        if (w >= 0) w = write(2, why, strlen(why));
        _exit(w < 0 ? 126 : 127);
    }
    setpgid(pid, pid);
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    j->pid = pid;
    j->err_fd = fds[0];
    return 0;
}

// SIGTERM to the job's process group (mpirun forwards it to its ranks), SIGKILL to every
// remaining process of the job after `grace` seconds; returns once none is left (bounded).
static void job_terminate(job *j, double grace) {
    if (!j->exited) kill(-j->pid, SIGTERM);
    double t0 = wall_now();
    long pids[4096];
    while (wall_now() - t0 < grace) {
        job_drain(j, 50);
        reap(j);
        if (j->exited && descendants(pids, 4096) == 0) break;
    }
    for (int round = 0; round < 100; round++) {
        int n = descendants(pids, 4096);
        if (!j->exited) kill(-j->pid, SIGKILL);
        for (int i = 0; i < n; i++)
            kill((pid_t)pids[i], SIGKILL);
        job_drain(j, 50);
        reap(j);
        if (j->exited && n == 0) break;
    }
    while (j->err_fd >= 0)
        job_drain(j, 100);
}

// After the job's launcher exited by itself: its ranks are gone too, or are killed now (a rank
// that outlived mpirun, e.g. a stopped one, is re-parented here).
static void job_sweep(job *j) {
    long pids[4096];
    double t0 = wall_now();
    while (j->err_fd >= 0 && wall_now() - t0 < 5)
        job_drain(j, 100);
    if (descendants(pids, 4096) > 0) job_terminate(j, 2.0);
    if (j->err_fd >= 0) close(j->err_fd), j->err_fd = -1;
}

// ---------------------------------------------------------------------------------------------
// Hosts

int slm_launch_parse_hosts(const char *text, bool is_file, char **names, int *slots, int cap) {
    int n = 0, lineno = 0;
    const char *p = text;
    while (*p) {
        const char *e = is_file ? strchr(p, '\n') : strchr(p, ',');
        if (!e) e = p + strlen(p);
        lineno++;
        char item[512];
        size_t len = (size_t)(e - p);
        if (len >= sizeof item) {
            slm_fail(SLM_E_ARG, "%s %d is longer than %zu characters", is_file ? "line" : "item",
                     lineno, sizeof item - 1);
            goto fail;
        }
        memcpy(item, p, len);
        item[len] = 0;
        char *hash = strchr(item, '#');
        if (hash) *hash = 0;
        char name[256] = "", extra[256] = "";
        int got = sscanf(item, " %255[^: \t\r] %255[^\r]", name, extra);
        p = *e ? e + 1 : e;
        if (got < 1 || !name[0]) {
            if (!is_file) {
                slm_fail(SLM_E_ARG, "item %d is empty (expected HOST or HOST:SLOTS)", lineno);
                goto fail;
            }
            continue;
        }
        long s = 1;
        const char *colon = strchr(item, ':');
        const char *sl = strstr(item, "slots=");
        char *end = NULL;
        if (sl)
            s = strtol(sl + 6, &end, 10);
        else if (colon)
            s = strtol(colon + 1, &end, 10);
        if ((sl || colon) && (!end || end == (sl ? sl + 6 : colon + 1) || s < 1 || s > 100000)) {
            slm_fail(SLM_E_ARG, "%s %d \"%s\": slots must be an integer in [1, 100000]",
                     is_file ? "line" : "item", lineno, item);
            goto fail;
        }
        if (n == cap) {
            slm_fail(SLM_E_ARG, "more than %d hosts", cap);
            goto fail;
        }
        names[n] = slm_xstrdup(name);
        slots[n] = (int)s;
        n++;
    }
    if (n == 0) {
        slm_fail(SLM_E_ARG, "no host given");
        return -1;
    }
    return n;
fail:
    for (int i = 0; i < n; i++)
        free(names[i]);
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Argument vectors

typedef struct argv_t {
    char **v;
    int n, cap;
} argv_t;

static void av_add(argv_t *a, const char *s) {
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->v = slm_xrealloc(a->v, sizeof(char *) * (size_t)a->cap);
    }
    a->v[a->n++] = slm_xstrdup(s);
    a->v[a->n] = NULL;
}

static void av_free(argv_t *a) {
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

static char *av_join(const argv_t *a) {
    slm_buf b = {0};
    for (int i = 0; i < a->n; i++)
        slm_buf_appendf(&b, "%s%s", i ? " " : "", a->v[i]);
    slm_buf_append(&b, "", 1);
    return (char *)b.data;
}

// ---------------------------------------------------------------------------------------------
// The run

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
    const slm_launch_opts *o;
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

static int host_index(run *r, const char *name) {
    for (int i = 0; i < r->n_hosts; i++)
        if (!strcmp(r->host[i], name)) return i;
    return -1;
}

static int n_excluded(const run *r) {
    int n = 0;
    for (int i = 0; i < r->n_hosts; i++)
        n += r->excluded[i];
    return n;
}

static int usable_slots(const run *r) {
    int s = 0;
    for (int i = 0; i < r->n_hosts; i++)
        if (!r->excluded[i]) s += r->slots[i];
    return s;
}

// "--host h1:2,h2:1" covering the first `world` usable slots (or all usable when world < 0).
static void host_arg(const run *r, int world, char *out, size_t cap) {
    size_t l = 0;
    out[0] = 0;
    int left = world < 0 ? usable_slots(r) : world;
    for (int i = 0; i < r->n_hosts && left > 0; i++) {
        if (r->excluded[i]) continue;
        int s = r->slots[i] < left ? r->slots[i] : left;
        l += (size_t)snprintf(out + l, cap > l ? cap - l : 0, "%s%s:%d", l ? "," : "", r->host[i],
                              s);
        left -= s;
    }
}

static void excluded_list(const run *r, char *out, size_t cap, char sep) {
    size_t l = 0;
    out[0] = 0;
    for (int i = 0; i < r->n_hosts; i++)
        if (r->excluded[i])
            l += (size_t)snprintf(out + l, cap > l ? cap - l : 0, "%s%s", l ? (char[]){sep, 0} : "",
                                  r->host[i]);
}

// The MPI launcher's program: srun, --mpirun, $MPIEXEC or mpirun.
static const char *launcher_name(const run *r) {
    const char *mpirun = r->o->mpirun ? r->o->mpirun : getenv("MPIEXEC");
    return r->slurm ? "srun" : mpirun && *mpirun ? mpirun : "mpirun";
}

// The launcher command: mpirun (or srun) with its options for `world` ranks, then the program.
static void launcher_prefix(const run *r, argv_t *a, int world, bool all_slots) {
    const slm_launch_opts *o = r->o;
    char num[32];
    snprintf(num, sizeof num, "%d", world);
    if (r->slurm) {
        av_add(a, "srun");
        av_add(a, "--mpi=pmix");
        av_add(a, "-n");
        av_add(a, num);
        av_add(a, "--kill-on-bad-exit=1");
        char ex[2048];
        excluded_list(r, ex, sizeof ex, ',');
        if (ex[0]) {
            char arg[2100];
            snprintf(arg, sizeof arg, "--exclude=%s", ex);
            av_add(a, arg);
        }
    } else {
        av_add(a, launcher_name(r));
        av_add(a, "-np");
        av_add(a, num);
        if (!r->local) {
            char h[4096];
            host_arg(r, all_slots ? -1 : world, h, sizeof h);
            av_add(a, "--host");
            av_add(a, h);
        }
        av_add(a, "-x");
        av_add(a, "SHARDLM_ATTEMPT");
        if (getenv("SHARDLM_FAULT")) {
            av_add(a, "-x");
            av_add(a, "SHARDLM_FAULT");
        }
    }
    for (int i = 0; i < o->n_mpi_args; i++)
        av_add(a, o->mpi_args[i]);
}

// Under Slurm: the allocation's node names (`scontrol show hostnames`, which expands
// SLURM_JOB_NODELIST's compressed form), each with an even share of --nproc, so attempts,
// culprits and exclusions name hosts. Left empty (host names unknown, as before) when scontrol
// cannot be run; srun still places the ranks.
static void slurm_hosts(run *r) {
    const char *nl = getenv("SLURM_JOB_NODELIST");
    const char *nn = getenv("SLURM_JOB_NUM_NODES");
    if (!nl || !*nl || strchr(nl, '\'') || strlen(nl) > 3000) return;
    int nodes = nn ? atoi(nn) : 1;
    if (nodes < 1) nodes = 1;
    char cmd[3200];
    snprintf(cmd, sizeof cmd, "scontrol show hostnames '%s' 2>/dev/null", nl);
    FILE *f = popen(cmd, "r");
    if (!f) return;
    char line[256];
    int per = (r->o->nproc + nodes - 1) / nodes;
    while (r->n_hosts < MAX_HOSTS && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        r->host[r->n_hosts] = strdup(line);
        if (!r->host[r->n_hosts]) break;
        r->slots[r->n_hosts++] = per;
    }
    pclose(f);
}

// The world of the next attempt: nproc when the usable slots allow, else the largest world in
// [min_nproc, slots] that divides nproc x grad_accum (so the global batch is kept); 0: none.
static int choose_world(const run *r) {
    const slm_launch_opts *o = r->o;
    int slots = r->local ? o->nproc : usable_slots(r);
    if (r->slurm) {
        // Under Slurm: the allocation's nodes (SLURM_JOB_NUM_NODES) share nproc evenly.
        const char *nn = getenv("SLURM_JOB_NUM_NODES");
        int nodes = nn ? atoi(nn) : 1, ex = 0;
        for (int i = 0; i < r->n_hosts; i++)
            ex += r->excluded[i];
        if (nodes < 1) nodes = 1;
        int per = (o->nproc + nodes - 1) / nodes;
        slots = (nodes - ex) * per;
    }
    if (slots >= o->nproc) return o->nproc;
    int64_t total = (int64_t)o->nproc * r->grad_accum;
    for (int m = slots; m >= o->min_nproc && m >= 1; m--)
        if (total % m == 0 && m % r->shard_group == 0) return m;
    return 0;
}

static void record_health(run *r, int world, bool ok, const char *failed) {
    if (r->n_health >= MAX_ATTEMPTS) return;
    health_rec *h = &r->health[r->n_health++];
    h->time = wall_now(), h->world = world, h->ok = ok;
    snprintf(h->failed, sizeof h->failed, "%s", failed);
    if (!ok) slm_metric_inc(g_m.health_fail, 1);
}

// Runs the health check on every usable slot. Returns 0 when it passed (or the failing hosts
// were excluded and enough remain), SLM_LAUNCH_HEALTH when no healthy world is left, or
// SLM_LAUNCH_PREEMPTED when a signal arrived.
static int run_health(run *r) {
    const slm_launch_opts *o = r->o;
    char num[32]; // the attempt this check precedes (faults of attempt 1 fire only before it)
    snprintf(num, sizeof num, "%d", r->n_att + 1);
    setenv("SHARDLM_ATTEMPT", num, 1);
    int world = r->local ? o->nproc : usable_slots(r);
    if (r->slurm) world = choose_world(r);
    char report[4096];
    snprintf(report, sizeof report, "%s/health.json", r->run_dir);
    unlink(report);
    argv_t a = {0};
    launcher_prefix(r, &a, world, true);
    av_add(&a, o->exe);
    av_add(&a, "healthcheck");
    av_add(&a, "--run-dir");
    av_add(&a, r->run_dir);
    av_add(&a, "--report");
    av_add(&a, report);
    if (o->health_mem) {
        av_add(&a, "--mem");
        av_add(&a, o->health_mem);
    }
    if (r->model) {
        av_add(&a, "--model");
        av_add(&a, r->model);
    }
    char *cmd = av_join(&a);
    slm_info("launch: health check on %d rank(s): %s", world, cmd);
    free(cmd);
    const char *env[] = {"OMPI_MCA_pml_base_verbose", "10", "OMPI_MCA_btl_base_verbose", "10",
                         NULL};
    job j;
    if (job_start(&j, a.v, env) != 0) {
        av_free(&a);
        snprintf(r->message, sizeof r->message, "cannot start the health check: %s",
                 strerror(errno));
        return SLM_LAUNCH_FAILED;
    }
    av_free(&a);
    double t0 = wall_now();
    bool interrupted = false;
    while (!j.exited) {
        job_drain(&j, 100);
        reap(&j);
        if (g_signal) {
            interrupted = true;
            break;
        }
        if (wall_now() - t0 > o->health_timeout_s) break;
    }
    bool timed_out = !j.exited && !interrupted;
    if (!j.exited) job_terminate(&j, o->kill_grace_s);
    job_sweep(&j);
    if (j.pml[0] || j.btl[0])
        snprintf(r->transport, sizeof r->transport, "pml %s; btl %s", j.pml[0] ? j.pml : "?",
                 j.btl[0] ? j.btl : "(one rank: none)");
    if (interrupted) return SLM_LAUNCH_PREEMPTED;
    // The report names the failing ranks and hosts.
    char *text = NULL;
    size_t len = 0;
    cJSON *rep = NULL;
    if (slm_file_read_all(report, &text, &len) == SLM_OK) rep = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *ok = rep ? cJSON_GetObjectItemCaseSensitive(rep, "ok") : NULL;
    if (!rep || !cJSON_IsBool(ok)) {
        cJSON_Delete(rep);
        if (!timed_out && launcher_refused(&j)) { // nothing about the hosts' health is known
            snprintf(r->message, sizeof r->message,
                     "the MPI start-up failed (%s exit status %d; no rank reported an error or "
                     "an exit): %s%s",
                     launcher_name(r), WIFEXITED(j.status) ? WEXITSTATUS(j.status) : -1,
                     j.first_error[0] ? "" : "Open MPI: ",
                     j.first_error[0] ? j.first_error : job_banner(&j));
            r->startup_failed = true;
            return SLM_LAUNCH_DETERMINISTIC;
        }
        char why[sizeof j.banner + 64];
        snprintf(why, sizeof why, "the health-check job %s without a report (%s)",
                 timed_out ? "timed out" : "ended",
                 j.first_error[0]    ? j.first_error
                 : j.reason[0]       ? j.reason
                 : job_banner(&j)[0] ? job_banner(&j)
                                     : j.signal_error);
        record_health(r, world, false, why);
        snprintf(r->message, sizeof r->message, "health check failed: %s", why);
        return SLM_LAUNCH_HEALTH;
    }
    if (cJSON_IsTrue(ok)) {
        cJSON_Delete(rep);
        record_health(r, world, true, "");
        slm_info("launch: health check passed on %d rank(s)", world);
        return 0;
    }
    char failed[1024] = "";
    size_t fl = 0;
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(rep, "ranks"), *x;
    cJSON_ArrayForEach(x, ranks) {
        const cJSON *rok = cJSON_GetObjectItemCaseSensitive(x, "ok");
        if (cJSON_IsTrue(rok)) continue;
        const cJSON *rk = cJSON_GetObjectItemCaseSensitive(x, "rank");
        const cJSON *hs = cJSON_GetObjectItemCaseSensitive(x, "host");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(x, "msg");
        const char *hname = cJSON_IsString(hs) ? hs->valuestring : "?";
        fl += (size_t)snprintf(failed + fl, sizeof failed > fl ? sizeof failed - fl : 0,
                               "%srank %d (host %s): %s", fl ? "; " : "",
                               cJSON_IsNumber(rk) ? rk->valueint : -1, hname,
                               cJSON_IsString(msg) ? msg->valuestring : "?");
        // Exclusion by the host the rank ran on. Open MPI names hosts as given in --host; the
        // report has gethostname(): match either, or the host whose slots held that rank.
        int hi = host_index(r, hname);
        if (hi < 0 && cJSON_IsNumber(rk) && !r->local) {
            int left = rk->valueint;
            for (int i = 0; i < r->n_hosts; i++) {
                if (r->excluded[i]) continue;
                if (left < r->slots[i]) {
                    hi = i;
                    break;
                }
                left -= r->slots[i];
            }
        }
        if (hi >= 0 && !r->local && !r->excluded[hi]) {
            r->excluded[hi] = true;
            slm_warn("launch: host %s excluded: it failed the health check", r->host[hi]);
            lm_host_excluded(r->host[hi], n_excluded(r));
        }
    }
    cJSON_Delete(rep);
    if (fl >= sizeof failed) failed[sizeof failed - 1] = 0;
    record_health(r, world, false, failed);
    slm_error("launch: health check FAILED: %s", failed);
    if (r->local || choose_world(r) == 0) {
        snprintf(r->message, sizeof r->message, "health check failed: %.1000s", failed);
        return SLM_LAUNCH_HEALTH;
    }
    return 0;
}

// Whether RUN_DIR/checkpoints holds saves the trainer's --train-from-scratch moves aside
// (committed step_N, or a step_N.tmp with its pending.json); *ino: the directory's inode (0: none).
static bool scratch_state(const char *run_dir, ino_t *ino) {
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoints", run_dir);
    struct stat sb;
    *ino = stat(path, &sb) == 0 ? sb.st_ino : 0;
    DIR *d = opendir(path);
    if (!d) return false;
    bool had = false;
    struct dirent *e;
    while (!had && (e = readdir(d))) {
        long long s;
        char tail[8] = "";
        int k = sscanf(e->d_name, "step_%lld%7s", &s, tail);
        if (k == 1) had = true;
        if (k == 2 && !strcmp(tail, ".tmp")) {
            char p[8192];
            snprintf(p, sizeof p, "%s/%s/pending.json", path, e->d_name);
            had = access(p, F_OK) == 0;
        }
    }
    closedir(d);
    return had;
}

// Whether a live process holds RUN_DIR/run.lock (the trainer's flock, "pid P on host H" in it:
// train/rundir.c): another training run, or the orphaned job of a launcher that was killed.
// The file is only probed (never created); *holder gets its text.
static bool run_lock_held(const char *run_dir, char *holder, size_t cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/run.lock", run_dir);
    holder[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (held) {
        ssize_t n = pread(fd, holder, cap - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
    } else {
        flock(fd, LOCK_UN);
    }
    close(fd);
    return held;
}

// The message for a held run lock (r->message and stderr): nothing is started or charged.
static void report_lock_holder(run *r, const char *holder) {
    snprintf(r->message, sizeof r->message,
             "%s is in use by a live training run (%s holds %s/run.lock): nothing started, no "
             "restart counted; wait for it to end or stop it, or give another --out",
             r->run_dir, holder[0] ? holder : "a process that has not written its pid yet",
             r->run_dir);
    slm_error("launch: %s", r->message);
}

static int64_t newest_checkpoint_step(const char *run_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoints", run_dir);
    DIR *d = opendir(path);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step_%lld%c", &s, &tail) == 1 && s > best) best = s;
    }
    closedir(d);
    return best;
}

// `shardlm flight RUN_DIR`'s verdict (its first lines), when that command exists.
static void flight_verdict(run *r, char *out, size_t cap) {
    out[0] = 0;
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) dup2(nul, 2), close(nul);
        close(fds[0]), close(fds[1]);
        execl(r->o->exe, r->o->exe, "flight", r->run_dir, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    double t0 = wall_now();
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    int st = 0;
    bool done = false;
    while (wall_now() - t0 < 20) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            ssize_t n = read(fds[0], out + len, cap - 1 - len);
            if (n > 0) len += (size_t)n;
            if (n == 0) break;
        }
        if (len >= cap - 1) break;
    }
    close(fds[0]);
    for (int i = 0; i < 100 && !done; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            done = true;
        else
            sleep_s(0.05);
    }
    if (!done) kill(pid, SIGKILL), waitpid(pid, &st, 0);
    out[len] = 0;
    // 0: a rank named; 3: every member entered (no culprit); 1 (no or bad dumps), 2: nothing
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 3)) out[0] = 0;
    while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == ' '))
        out[--len] = 0;
}

// The culprit of a hang from /proc: a rank of the job found stopped (state T).
static int stopped_rank(const hb_state *h, long *pid_out) {
    long pids[4096];
    int n = descendants(pids, 4096);
    for (int rk = 0; rk < h->world; rk++) {
        long pid = h->last[rk].pid;
        if (h->last[rk].step < 0 || pid <= 0) continue;
        bool ours = false;
        for (int i = 0; i < n; i++)
            ours |= pids[i] == pid;
        long pp;
        char st;
        if (ours && proc_stat(pid, &pp, &st) == 0 && (st == 'T' || st == 't')) {
            *pid_out = pid;
            return rk;
        }
    }
    return -1;
}

// A rank of this host whose heartbeat says it runs (start / train) but whose process is gone
// or a zombie: a crash seen before mpirun reports it. -1 when none.
static int dead_rank(const hb_state *h, const char *myhost, long *pid_out, int *n_dead) {
    int first = -1;
    *n_dead = 0;
    for (int rk = 0; rk < h->world; rk++) {
        const slm_heartbeat *b = &h->last[rk];
        if (b->step < 0 || b->pid <= 0 || strcmp(b->host, myhost) != 0) continue;
        if (strcmp(b->phase, "start") != 0 && strcmp(b->phase, "train") != 0) continue;
        long pp;
        char st;
        if (proc_stat(b->pid, &pp, &st) != 0 || st == 'Z' || st == 'X') {
            if (first < 0) first = rk, *pid_out = b->pid;
            ++*n_dead;
        }
    }
    return first;
}

// Seconds a job whose ranks all wrote their "end" record may take to exit before it counts
// as hung (covers the trainer's last-scrape wait, at most 15 s, with room for a loaded host).
#define END_EXIT_S 60.0

// Every rank's newest heartbeat record is its final "end" record (the trainer finished).
static bool all_ended(const hb_state *h) {
    for (int rk = 0; rk < h->world; rk++)
        if (h->last[rk].step < 0 || strcmp(h->last[rk].phase, "end") != 0) return false;
    return h->world > 0;
}

// One training attempt: returns when the job has ended and none of its processes is left.
static void run_attempt(run *r, attempt *at, int world) {
    const slm_launch_opts *o = r->o;
    memset(at, 0, sizeof *at);
    at->n = r->n_att + 1;
    at->world = world;
    at->culprit_rank = -1;
    at->exit_status = -1;
    at->start_step = at->steps_reached = -1;
    at->steps_lost = 0;
    at->grad_accum = (int)((int64_t)o->nproc * r->grad_accum / world);
    if (r->local)
        snprintf(at->hosts, sizeof at->hosts, "local:%d", world);
    else
        host_arg(r, world, at->hosts, sizeof at->hosts);
    char num[32];
    snprintf(num, sizeof num, "%d", at->n);
    setenv("SHARDLM_ATTEMPT", num, 1);
    // fresh heartbeats: none of the previous attempt's files may count as progress
    for (int rk = 0; rk < MAX_RANKS; rk++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/rank_%05d.json", r->hb_dir, rk);
        if (unlink(p) != 0 && rk >= o->nproc) break;
    }
    argv_t a = {0};
    launcher_prefix(r, &a, world, false);
    av_add(&a, o->exe);
    av_add(&a, "train");
    int first = o->train_argc > 0 && !strcmp(o->train_argv[0], "train") ? 1 : 0;
    // --train-from-scratch moves the earlier run's checkpoints aside once: a restart resumes this
    // launch's own checkpoints (--resume auto), unless that move has not happened yet.
    bool scratch = false;
    if (r->scratch_idx >= 0) {
        ino_t ino;
        (void)scratch_state(r->run_dir, &ino);
        scratch = at->n == 1 || (r->scratch_had && ino == r->scratch_ino);
    }
    for (int i = first; i < o->train_argc; i++) {
        if (i == r->scratch_idx && !scratch) continue;
        if (i == r->grad_accum_idx + 1 && r->grad_accum_idx >= 0) {
            snprintf(num, sizeof num, "%d", at->grad_accum);
            av_add(&a, num);
        } else {
            av_add(&a, o->train_argv[i]);
        }
    }
    if (r->grad_accum_idx < 0 && at->grad_accum != 1) {
        snprintf(num, sizeof num, "%d", at->grad_accum);
        av_add(&a, "--grad-accum");
        av_add(&a, num);
    }
    if (r->add_resume && !scratch) av_add(&a, "--resume"), av_add(&a, "auto");
    // A restart verifies every file of the checkpoint it resumes (--resume auto then falls back
    // to the newest one that verifies), so a corrupt checkpoint cannot cause a restart loop.
    if (at->n > 1 && !r->has_verify) av_add(&a, "--verify-on-resume");
    if (!r->has_grace) {
        snprintf(num, sizeof num, "%g", o->preempt_grace_s);
        av_add(&a, "--preempt-grace"), av_add(&a, num);
    }
    if (r->add_heartbeat) av_add(&a, "--heartbeat-dir"), av_add(&a, r->hb_dir);
    char *cmd = av_join(&a);
    slm_info("launch: attempt %d: %d rank(s)%s%s, grad accumulation %d: %s", at->n, world,
             r->local ? "" : " on ", r->local ? "" : at->hosts, at->grad_accum, cmd);
    free(cmd);
    const char *env_verbose[] = {"OMPI_MCA_pml_base_verbose", "10", "OMPI_MCA_btl_base_verbose",
                                 "10", NULL};
    bool probe = o->no_health_check && !r->transport[0];
    job j;
    at->start = wall_now();
    slm_metric_inc(g_m.attempts, 1);
    slm_metric_set(g_m.attempt, at->n);
    slm_metric_set(g_m.world, world);
    lm_state(ST_RUNNING);
    if (job_start(&j, a.v, probe ? env_verbose : NULL) != 0) {
        snprintf(at->result, sizeof at->result, "failed");
        snprintf(at->reason, sizeof at->reason, "cannot start %s: %s", a.v[0], strerror(errno));
        av_free(&a);
        at->end = at->detected = wall_now();
        return;
    }
    av_free(&a);
    hb_state h;
    hb_init(&h, world, at->start);
    int64_t resume_hint = newest_checkpoint_step(r->run_dir);
    double last_scan = 0, preempt_deadline = 0, dead_time = 0, lp_detect = 0;
    bool preempting = false, hang = false, coll_seen = false;
    int stop_rank = -1; // a rank found stopped (state T) while the job failed: the cause
    long stop_pid = 0;
    char myhost[128] = "";
    gethostname(myhost, sizeof myhost - 1);
    while (!j.exited) {
        job_drain(&j, 100);
        reap(&j);
        if (j.exited) break;
        double now = wall_now();
        if (now - last_scan >= (world <= 64 ? 0.1 : 1.0))
            hb_scan(&h, r->hb_dir, now), last_scan = now;
        long dpid = 0;
        int n_dead = 0;
        int drank = dead_time || preempting ? -1 : dead_rank(&h, myhost, &dpid, &n_dead);
        if (drank >= 0) { // read the heartbeats again: a rank that finished wrote its final
            // record ("end", "stopped", "error") before it exited, maybe after the last scan,
            // and is no crash (seen under load: a completed attempt taken for 4 dead ranks)
            hb_scan(&h, r->hb_dir, now), last_scan = now;
            drank = dead_rank(&h, myhost, &dpid, &n_dead);
        }
        // A rank that died, or a collective that timed out, may be the consequence of a rank
        // stopped inside a collective (the others wait for it, one times out and aborts): look
        // in /proc while the job is still there (the teardown removes the evidence).
        if ((drank >= 0 || (j.coll_timeout && !coll_seen)) && stop_rank < 0)
            stop_rank = stopped_rank(&h, &stop_pid);
        coll_seen |= j.coll_timeout;
        if (drank >= 0) { // a crash: mpirun will report it; it gets 3 s before the teardown
            dead_time = now, lp_detect = h.last_progress;
            if (n_dead == 1) { // several gone at once: mpirun's report says which was first
                at->culprit_rank = drank;
                snprintf(at->culprit_host, sizeof at->culprit_host, "%s", myhost);
                snprintf(at->reason, sizeof at->reason, "rank %d (pid %ld on %s) died", drank, dpid,
                         myhost);
            } else {
                snprintf(at->reason, sizeof at->reason, "%d ranks on %s died", n_dead, myhost);
            }
            slm_error("launch: %s", at->reason);
        }
        if (dead_time && now - dead_time > 3.0) {
            job_terminate(&j, o->kill_grace_s);
            break;
        }
        if (!preempting && (g_signal || (o->max_run_s > 0 && now - r->t0 >= o->max_run_s))) {
            preempting = true;
            preempt_deadline = now + o->preempt_grace_s;
            if (g_signal) {
                snprintf(at->result, sizeof at->result, "preempted");
                snprintf(at->reason, sizeof at->reason, "%s received: forwarded to the ranks",
                         sig_name(g_signal));
            } else {
                snprintf(at->result, sizeof at->result, "max-run");
                snprintf(at->reason, sizeof at->reason, "--max-run %.0f s reached", o->max_run_s);
            }
            slm_warn("launch: %s; SIGUSR1 to the job (checkpoint, then exit 75) within %.0f s",
                     at->reason, o->preempt_grace_s);
            kill(j.pid, SIGUSR1); // mpirun / srun forward it to every rank
        }
        if (preempting && now > preempt_deadline) {
            slm_warn("launch: the job did not stop within --preempt-grace; terminating it");
            snprintf(at->reason + strlen(at->reason), sizeof at->reason - strlen(at->reason),
                     "; not stopped within --preempt-grace %.0f s", o->preempt_grace_s);
            at->detected = now;
            job_terminate(&j, o->kill_grace_s);
            break;
        }
        // Until the first record the ranks are starting (MPI, model init, checkpoint load): a
        // slow start-up on a loaded host is not a hang.
        double limit = o->hang_timeout_s;
        if (!h.any_record)
            limit = o->startup_timeout_s > 0 ? o->startup_timeout_s : fmax(limit, 120.0);
        // Every rank wrote its final "end" record (after the final checkpoint and upload): what
        // is left is the exit (a trainer scraped by Prometheus serves one more scrape, at most
        // SLM_TRAIN_PROM_LINGER_MAX_S = 15 s, then MPI_Finalize). Silence there is not a hang;
        // a job that still has not exited after END_EXIT_S is one.
        if (all_ended(&h)) limit = fmax(limit, END_EXIT_S);
        if (!preempting && !dead_time && now - h.last_progress > limit) {
            hang = true;
            at->detected = now, lp_detect = h.last_progress;
            snprintf(at->result, sizeof at->result, "hang");
            long spid = 0;
            int srank = stopped_rank(&h, &spid);
            if (srank >= 0) {
                at->culprit_rank = srank;
                snprintf(at->culprit_host, sizeof at->culprit_host, "%s", h.last[srank].host);
                snprintf(at->reason, sizeof at->reason,
                         "no heartbeat progress for %.0f s (%s); rank %d (pid %ld on %s) is "
                         "stopped",
                         now - h.last_progress,
                         h.any_record ? "--hang-timeout" : "--startup-timeout", srank, spid,
                         h.last[srank].host);
            } else {
                snprintf(at->reason, sizeof at->reason, "no heartbeat progress for %.0f s (%s)",
                         now - h.last_progress,
                         h.any_record ? "--hang-timeout" : "--startup-timeout: no rank started");
            }
            slm_error("launch: hang: %s; SIGUSR2 to the ranks (flight recorder dumps)", at->reason);
            kill(j.pid, SIGUSR2);
            double t1 = wall_now();
            while (wall_now() - t1 < 2.0 && !j.exited)
                job_drain(&j, 100), reap(&j);
            job_terminate(&j, o->kill_grace_s);
            break;
        }
    }
    if (!at->detected) at->detected = dead_time ? dead_time : j.evidence_time;
    if (!at->detected) at->detected = j.exit_time;
    if (!at->detected) at->detected = wall_now();
    if (!lp_detect) lp_detect = h.last_progress; // before the teardown's records
    job_sweep(&j);
    hb_scan(&h, r->hb_dir, wall_now());
    at->end = wall_now();
    at->last_progress = lp_detect;
    at->first_step_time = h.first_step_time;
    // The start step: the trainer's resume line, else the heartbeat's start record, else 0 for
    // a run that had no checkpoint (a start record can be missed: it is replaced within ms).
    at->start_step = j.resumed_step >= 0 ? j.resumed_step : h.start_step;
    if (at->start_step < 0 && resume_hint < 0) at->start_step = 0;
    at->steps_reached = h.max_step >= 0 ? h.max_step : at->start_step;
    at->any_train = h.any_train;
    at->refused = launcher_refused(&j) && !h.any_record;
    if (WIFEXITED(j.status)) at->exit_status = WEXITSTATUS(j.status);
    if (WIFSIGNALED(j.status)) at->exit_signal = WTERMSIG(j.status);
    if (hang && at->exit_status == 0 && all_ended(&h)) {
        // The "hung" job finished during the teardown (a slow step, then the last ones): its
        // exit status and every rank's final "end" record say so. A success, as a preempted job
        // that finished before it could stop; no restart is spent and nobody is blamed.
        hang = false;
        snprintf(at->result, sizeof at->result, "success");
        char was[sizeof at->reason];
        snprintf(was, sizeof was, "%s", at->reason);
        snprintf(at->reason, sizeof at->reason,
                 "finished (exit 0, every rank at its end) during the teardown of a suspected "
                 "hang: %.400s",
                 was);
        at->culprit_rank = -1;
        at->culprit_host[0] = 0;
        slm_info("launch: the job finished during the hang teardown (exit 0, every rank ended)");
    }
    snprintf(at->error, sizeof at->error, "%s",
             j.fatal_error[0]                        ? j.fatal_error
             : j.first_error[0] || job_banner(&j)[0] ? j.first_error
                                                     : j.signal_error);
    if (!hang && !preempting) {
        if (at->exit_status == 0)
            snprintf(at->result, sizeof at->result, "success");
        else if (at->exit_status == SLM_LAUNCH_PREEMPTED)
            snprintf(at->result, sizeof at->result, "preempted");
        else
            snprintf(at->result, sizeof at->result, "failed");
        if (dead_time && at->exit_status == 0) snprintf(at->result, sizeof at->result, "failed");
        if (at->exit_status != 0 || dead_time) {
            if (j.reason[0])
                snprintf(at->reason, sizeof at->reason, "%s", j.reason);
            else if (dead_time)
                (void)0; // "rank R (pid P on H) died", set when it was seen
            else if (at->exit_signal)
                snprintf(at->reason, sizeof at->reason, "the job ended on signal %d",
                         at->exit_signal);
            else if (job_banner(&j)[0] && !j.first_error[0])
                snprintf(at->reason, sizeof at->reason,
                         "the job exited with status %d; Open MPI: %s", at->exit_status,
                         job_banner(&j));
            else
                snprintf(at->reason, sizeof at->reason, "the job exited with status %d",
                         at->exit_status);
            if (at->exit_status == SLM_LAUNCH_PREEMPTED)
                snprintf(at->reason, sizeof at->reason, "the ranks were preempted (exit 75)");
            if (j.culprit_rank >= 0 || !dead_time) {
                at->culprit_rank = j.culprit_rank;
                snprintf(at->culprit_host, sizeof at->culprit_host, "%s", j.culprit_host);
            }
            // The ranks exited on an error (no rank died of a signal): the rank whose error it
            // is, not the one mpirun saw exit first (all of them exit on an agreed error).
            if (j.err_rank >= 0 && j.err_rank < world && !j.culprit_signal && !dead_time &&
                !j.coll_timeout && at->exit_status != SLM_LAUNCH_PREEMPTED) {
                if (j.err_rank != at->culprit_rank)
                    snprintf(at->reason, sizeof at->reason,
                             "rank %d failed: the ranks exited on its error (status %d)",
                             j.err_rank, at->exit_status);
                at->culprit_rank = j.err_rank;
                at->culprit_host[0] = 0; // from its heartbeat, below
            }
        }
    } else if (preempting && at->exit_status == 0) {
        snprintf(at->result, sizeof at->result, "success"); // finished before it could stop
    }
    // The evidence agrees (issue 20 item 4): a rank stopped in /proc while the job failed is
    // the cause whatever died or aborted after it (a peer timing out in the collective it
    // blocks); on a collective timeout or a hang without one, the rank the flight recorder finds
    // missing from the collective the others wait in. The reason names the culprit either way.
    if (!strcmp(at->result, "failed") && stop_rank >= 0 && at->culprit_rank != stop_rank) {
        at->culprit_rank = stop_rank;
        at->culprit_host[0] = 0;
        size_t l = strlen(at->reason);
        snprintf(at->reason + l, sizeof at->reason - l, "%srank %d (pid %ld on %s) is stopped",
                 l ? "; the cause: " : "", stop_rank, stop_pid, h.last[stop_rank].host);
    }
    if (hang || j.coll_timeout) {
        flight_verdict(r, at->verdict, sizeof at->verdict);
        if (at->verdict[0]) {
            slm_info("launch: flight recorder verdict: %s", at->verdict);
            const char *m = strstr(at->verdict, "flight recorder: rank ");
            int v = m && strstr(m, " never entered") ? atoi(m + 22) : -1;
            // a hang's culprit is the stopped rank, if any; a collective timeout's is never the
            // rank that timed out waiting (it aborts or dies: a consequence)
            bool use = v >= 0 && v < world && (hang ? at->culprit_rank < 0 : stop_rank < 0);
            if (use && at->culprit_rank != v) {
                at->culprit_rank = v;
                at->culprit_host[0] = 0;
                size_t l = strlen(at->reason);
                snprintf(at->reason + l, sizeof at->reason - l,
                         "%srank %d never entered the collective the others wait in (flight "
                         "recorder)",
                         l ? "; the cause: " : "", v);
            }
        }
    }
    if (at->culprit_rank >= 0 && at->culprit_rank < world && !at->culprit_host[0])
        snprintf(at->culprit_host, sizeof at->culprit_host, "%s", h.last[at->culprit_rank].host);
    free(h.last);
}

static cJSON *num_or_null(double x, bool valid) {
    return valid ? cJSON_CreateNumber(x) : cJSON_CreateNull();
}

// The integer `key` of object x (def when absent or not a number).
static int json_int(const cJSON *x, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(x, key);
    return cJSON_IsNumber(v) ? v->valueint : def;
}

// An array of x (detached; empty when absent) whose objects all get "launch" (those of a file
// written before launches were numbered belong to launch 1).
static cJSON *take_array(cJSON *x, const char *key) {
    cJSON *a = cJSON_DetachItemFromObjectCaseSensitive(x, key);
    if (!cJSON_IsArray(a)) cJSON_Delete(a), a = cJSON_CreateArray();
    cJSON *it;
    cJSON_ArrayForEach(it,
                       a) if (cJSON_IsObject(it) && !cJSON_GetObjectItemCaseSensitive(it, "launch"))
        cJSON_AddNumberToObject(it, "launch", 1);
    return a;
}

// Reads the attempts.json earlier launches wrote into RUN_DIR (r->prev_*, r->launch_no). One
// that cannot be read is kept as attempts.json.bad (a warning says so) and a new history starts.
static void load_history(run *r) {
    r->prev_attempts = cJSON_CreateArray();
    r->prev_health = cJSON_CreateArray();
    r->prev_launches = cJSON_CreateArray();
    r->launch_no = 1;
    char path[4200], bad[4300];
    snprintf(path, sizeof path, "%s/attempts.json", r->run_dir);
    char *text = NULL;
    size_t len = 0;
    if (access(path, F_OK) != 0) return;
    cJSON *o = NULL;
    if (slm_file_read_all(path, &text, &len) == SLM_OK) o = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(o) || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "attempts"))) {
        cJSON_Delete(o);
        snprintf(bad, sizeof bad, "%s.bad", path);
        slm_warn("launch: %s is not an attempts file shardlm launch wrote; kept as %s, the "
                 "attempts of this launch start a new one",
                 path, rename(path, bad) == 0 ? bad : "(rename failed: overwritten)");
        return;
    }
    cJSON_Delete(r->prev_attempts), cJSON_Delete(r->prev_health), cJSON_Delete(r->prev_launches);
    r->prev_attempts = take_array(o, "attempts");
    r->prev_health = take_array(o, "health");
    r->prev_launches = take_array(o, "launches");
    if (cJSON_GetArraySize(r->prev_launches) == 0) { // one launch, before they were numbered
        cJSON *l = cJSON_CreateObject();
        cJSON_AddNumberToObject(l, "launch", 1);
        static const char *const keep[] = {"start",        "end",      "nproc",  "min_nproc",
                                           "max_restarts", "restarts", "result", "exit_code",
                                           "message",      NULL};
        for (int i = 0; keep[i]; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, keep[i]);
            if (v) cJSON_AddItemToObject(l, keep[i], cJSON_Duplicate(v, true));
        }
        cJSON_AddNumberToObject(l, "attempts", cJSON_GetArraySize(r->prev_attempts));
        cJSON_AddItemToArray(r->prev_launches, l);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, r->prev_launches) {
        int n = json_int(it, "launch", 0);
        if (n >= r->launch_no) r->launch_no = n + 1;
    }
    cJSON_ArrayForEach(it, r->prev_attempts) {
        int n = json_int(it, "launch", 0);
        if (n >= r->launch_no) r->launch_no = n + 1;
    }
    cJSON_Delete(o);
}

static void free_history(run *r) {
    cJSON_Delete(r->prev_attempts), cJSON_Delete(r->prev_health), cJSON_Delete(r->prev_launches);
    r->prev_attempts = r->prev_health = r->prev_launches = NULL;
}

// A copy of the earlier launches' array (an empty one when there is no history yet).
static cJSON *history_copy(const cJSON *a) {
    return a ? cJSON_Duplicate(a, true) : cJSON_CreateArray();
}

// What describes this launch, both at the top of attempts.json and in its launches[] entry.
static void launch_fields(cJSON *o, const run *r, const char *result) {
    cJSON_AddNumberToObject(o, "launch", r->launch_no);
    cJSON_AddNumberToObject(o, "nproc", r->o->nproc);
    cJSON_AddNumberToObject(o, "min_nproc", r->o->min_nproc);
    cJSON_AddNumberToObject(o, "max_restarts", r->o->max_restarts);
    cJSON_AddNumberToObject(o, "restarts", r->restarts);
    cJSON_AddStringToObject(o, "result", result);
    cJSON_AddNumberToObject(o, "exit_code", r->exit_code);
    cJSON_AddStringToObject(o, "message", r->message);
    cJSON_AddNumberToObject(o, "start", r->t0);
    cJSON_AddNumberToObject(o, "end", wall_now());
}

static void write_attempts(run *r, const char *result) {
    cJSON *o = cJSON_CreateObject();
    launch_fields(o, r, result);
    cJSON_AddStringToObject(o, "launcher", r->slurm ? "srun" : "mpirun");
    cJSON_AddStringToObject(o, "transport", r->transport);
    cJSON *ex = cJSON_CreateArray();
    for (int i = 0; i < r->n_hosts; i++)
        if (r->excluded[i]) cJSON_AddItemToArray(ex, cJSON_CreateString(r->host[i]));
    cJSON_AddItemToObject(o, "excluded_hosts", ex);
    cJSON *ls = history_copy(r->prev_launches), *l = cJSON_CreateObject();
    launch_fields(l, r, result);
    cJSON_AddNumberToObject(l, "attempts", r->n_att);
    cJSON_AddItemToArray(ls, l);
    cJSON_AddItemToObject(o, "launches", ls);
    cJSON *hs = history_copy(r->prev_health);
    for (int i = 0; i < r->n_health; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "launch", r->launch_no);
        cJSON_AddNumberToObject(x, "time", r->health[i].time);
        cJSON_AddNumberToObject(x, "world", r->health[i].world);
        cJSON_AddBoolToObject(x, "ok", r->health[i].ok);
        cJSON_AddStringToObject(x, "failed", r->health[i].failed);
        cJSON_AddItemToArray(hs, x);
    }
    cJSON_AddItemToObject(o, "health", hs);
    cJSON *as = history_copy(r->prev_attempts);
    for (int i = 0; i < r->n_att; i++) {
        const attempt *a = &r->att[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "launch", r->launch_no);
        cJSON_AddNumberToObject(x, "attempt", a->n);
        cJSON_AddNumberToObject(x, "start", a->start);
        cJSON_AddNumberToObject(x, "end", a->end);
        cJSON_AddNumberToObject(x, "detected", a->detected);
        cJSON_AddNumberToObject(x, "last_progress", a->last_progress);
        cJSON_AddItemToObject(x, "first_step_time",
                              num_or_null(a->first_step_time, a->first_step_time > 0));
        cJSON_AddNumberToObject(x, "world", a->world);
        cJSON_AddStringToObject(x, "hosts", a->hosts);
        cJSON_AddNumberToObject(x, "grad_accum", a->grad_accum);
        cJSON_AddStringToObject(x, "result", a->result);
        cJSON_AddStringToObject(x, "reason", a->reason);
        cJSON_AddItemToObject(x, "exit_status", num_or_null(a->exit_status, a->exit_status >= 0));
        cJSON_AddItemToObject(x, "exit_signal", num_or_null(a->exit_signal, a->exit_signal > 0));
        cJSON_AddItemToObject(x, "culprit_rank",
                              num_or_null(a->culprit_rank, a->culprit_rank >= 0));
        if (a->culprit_host[0])
            cJSON_AddStringToObject(x, "culprit_host", a->culprit_host);
        else
            cJSON_AddNullToObject(x, "culprit_host");
        cJSON_AddStringToObject(x, "flight_verdict", a->verdict);
        cJSON_AddStringToObject(x, "error", a->error);
        cJSON_AddItemToObject(x, "start_step",
                              num_or_null((double)a->start_step, a->start_step >= 0));
        cJSON_AddItemToObject(x, "steps_reached",
                              num_or_null((double)a->steps_reached, a->steps_reached >= 0));
        cJSON_AddNumberToObject(x, "steps_lost", (double)a->steps_lost);
        cJSON_AddItemToArray(as, x);
    }
    cJSON_AddItemToObject(o, "attempts", as);
    char path[4200];
    snprintf(path, sizeof path, "%s/attempts.json", r->run_dir);
    if (slm_json_write_file(path, o) != SLM_OK)
        slm_warn("launch: cannot write %s: %s", path, slm_errmsg());
    cJSON_Delete(o);
}

static char *summary_text(const run *r, const char *result, bool gone) {
    slm_buf b = {0};
    slm_buf_appendf(&b, "launch summary: %s (exit %d), %d restart(s) of at most %d%s%s\n", result,
                    r->exit_code, r->restarts, r->o->max_restarts, r->message[0] ? ": " : "",
                    r->message);
    int earlier = cJSON_GetArraySize(r->prev_attempts);
    if (r->launch_no > 1)
        slm_buf_appendf(&b,
                        "launch %d of %s: the %d attempt(s) of launches 1-%d stay in "
                        "attempts.json\n",
                        r->launch_no, r->run_dir, earlier, r->launch_no - 1);
    slm_buf_appendf(&b, "%-7s %-8s %-8s %-5s %-10s %-9s %-12s %-6s %s\n", "attempt", "start", "end",
                    "world", "result", "steps", "culprit", "lost", "reason");
    for (int i = 0; i < r->n_att; i++) {
        const attempt *a = &r->att[i];
        char steps[48], culprit[160], t1[32], t2[32];
        snprintf(steps, sizeof steps, "%lld-%lld",
                 (long long)(a->start_step < 0 ? 0 : a->start_step),
                 (long long)(a->steps_reached < 0 ? 0 : a->steps_reached));
        if (a->culprit_rank >= 0)
            snprintf(culprit, sizeof culprit, "rank %d%s%s", a->culprit_rank,
                     a->culprit_host[0] ? "@" : "", a->culprit_host);
        else
            snprintf(culprit, sizeof culprit, "-");
        snprintf(t1, sizeof t1, "+%.1fs", a->start - r->t0);
        snprintf(t2, sizeof t2, "+%.1fs", a->end - r->t0);
        slm_buf_appendf(&b, "%-7d %-8s %-8s %-5d %-10s %-9s %-12s %-6lld %s\n", a->n, t1, t2,
                        a->world, a->result, steps, culprit, (long long)a->steps_lost, a->reason);
    }
    char ex[1024];
    excluded_list(r, ex, sizeof ex, ',');
    if (ex[0]) slm_buf_appendf(&b, "excluded hosts: %s\n", ex);
    if (gone)
        slm_buf_appendf(&b, "%s removed: this launch created it and nothing ran\n", r->run_dir);
    else
        slm_buf_appendf(&b, "attempts written to %s/attempts.json\n", r->run_dir);
    slm_buf_append(&b, "", 1);
    return (char *)b.data;
}

static const char *find_arg(const slm_launch_opts *o, const char *name, int *idx) {
    *idx = -1;
    const char *v = NULL;
    for (int i = 0; i < o->train_argc; i++)
        if (!strcmp(o->train_argv[i], name)) {
            *idx = i;
            v = i + 1 < o->train_argc ? o->train_argv[i + 1] : NULL;
        }
    return v;
}

// Cuts path's last component ("a/b/" -> "a"); false when there is none left to cut.
static bool path_up(char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        path[--n] = 0;
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) return false;
    while (slash > path && slash[-1] == '/')
        slash--;
    *slash = 0;
    return true;
}

// out: the highest directory of path (path included) that does not exist ("" when path does).
static void first_missing(const char *path, char *out, size_t cap) {
    char cur[4096];
    struct stat sb;
    snprintf(cur, sizeof cur, "%s", path);
    out[0] = 0;
    do {
        if (stat(cur, &sb) == 0) break;
        snprintf(out, cap, "%s", cur);
    } while (path_up(cur));
}

// After a start-up failure (the MPI start-up failed, no rank reported) in a RUN_DIR this
// launch created: its health.json and empty heartbeat/ go, then RUN_DIR and the directories
// above it that the launch made, each only while empty. Returns whether RUN_DIR is gone.
static bool remove_made(const run *r) {
    if (!r->startup_failed || !r->made[0]) return false;
    char p[4200], cur[4096];
    snprintf(p, sizeof p, "%s/health.json", r->run_dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/heartbeat", r->run_dir);
    if (!strcmp(p, r->hb_dir)) rmdir(p);
    snprintf(p, sizeof p, "%s/attempts.json", r->run_dir); // only this launch's: RUN_DIR is new
    unlink(p);
    snprintf(cur, sizeof cur, "%s", r->run_dir);
    if (rmdir(cur) != 0) return false;
    while (strcmp(cur, r->made) != 0 && path_up(cur) && rmdir(cur) == 0) {
    }
    return true;
}

static int finish(run *r, int code, const char *result, char **summary) {
    r->exit_code = code;
    if (r->n_att > 0) { // the last attempt's lost steps: no attempt follows to resume them, so
        // those it reached beyond the newest committed checkpoint (the next launch's start)
        attempt *la = &r->att[r->n_att - 1];
        int64_t kept = newest_checkpoint_step(r->run_dir);
        if (kept < 0) kept = 0;
        if (strcmp(la->result, "success") != 0 && la->steps_reached > kept)
            la->steps_lost = la->steps_reached - kept;
    }
    bool gone = remove_made(r);
    if (!gone) write_attempts(r, result);
    *summary = summary_text(r, result, gone);
    for (int i = 0; i < r->n_hosts; i++)
        free(r->host[i]);
    lm_state(ST_DONE);
    if (g_m.srv && r->o->metrics_linger_s > 0) { // the final state, for the last scrapes
        slm_info("launch: done (%s, exit %d); /metrics stays up %.0f s (--metrics-linger; "
                 "SIGTERM / SIGINT ends it)",
                 result, code, r->o->metrics_linger_s);
        g_signal = 0;
        double t1 = wall_now();
        while (wall_now() - t1 < r->o->metrics_linger_s && !g_signal)
            sleep_s(0.05);
    }
    lm_stop();
    free_history(r);
    return code;
}

int slm_launch_run(const slm_launch_opts *o, char **summary) {
    *summary = NULL;
    run *r = calloc(1, sizeof *r);
    if (!r) slm_fatal("launch: out of memory");
    r->o = o;
    int idx;
    r->run_dir = find_arg(o, "--out", &idx);
    if (!r->run_dir) {
        slm_error("launch: the train arguments need --out RUN_DIR (the run directory the "
                  "launcher supervises and restarts from)");
        free(r);
        return SLM_LAUNCH_USAGE;
    }
    const char *resume = find_arg(o, "--resume", &idx);
    if (idx >= 0 && (!resume || strcmp(resume, "auto") != 0)) {
        slm_error("launch: --resume %s: the launcher always resumes with --resume auto (the "
                  "newest checkpoint of --out that verifies); leave --resume out",
                  resume ? resume : "");
        free(r);
        return SLM_LAUNCH_USAGE;
    }
    r->add_resume = idx < 0;
    find_arg(o, "--train-from-scratch", &r->scratch_idx);
    if (r->scratch_idx >= 0) r->scratch_had = scratch_state(r->run_dir, &r->scratch_ino);
    const char *hb = find_arg(o, "--heartbeat-dir", &idx);
    r->add_heartbeat = idx < 0;
    snprintf(r->hb_dir, sizeof r->hb_dir, "%s", hb ? hb : "");
    if (!hb) snprintf(r->hb_dir, sizeof r->hb_dir, "%s/heartbeat", r->run_dir);
    const char *ga = find_arg(o, "--grad-accum", &r->grad_accum_idx);
    r->grad_accum = 1;
    if (ga) {
        int64_t v;
        if (slm_parse_i64("--grad-accum", ga, 1, 1 << 20, &v) != SLM_OK) {
            slm_error("launch: train %s", slm_errmsg());
            free(r);
            return SLM_LAUNCH_USAGE;
        }
        r->grad_accum = (int)v;
    }
    r->shard_group = 1; // a shrunk world must keep whole HYBRID_SHARD groups (fsdp refuses)
    const char *shs = find_arg(o, "--sharding", &idx),
               *sgs = find_arg(o, "--shard-group-size", &idx);
    int64_t sg = 1;
    if (shs && sgs && !strcasecmp(shs, "HYBRID_SHARD") &&
        slm_parse_i64("--shard-group-size", sgs, 1, 1 << 20, &sg) == SLM_OK)
        r->shard_group = (int)sg;
    r->model = find_arg(o, "--model", &idx);
    find_arg(o, "--verify-on-resume", &idx);
    r->has_verify = idx >= 0;
    find_arg(o, "--preempt-grace", &idx);
    r->has_grace = idx >= 0;
    if (o->min_nproc > o->nproc) {
        slm_error("launch: --min-nproc %d is larger than --nproc %d", o->min_nproc, o->nproc);
        free(r);
        return SLM_LAUNCH_USAGE;
    }
    slm_launch_opts oo = *o;
    if (oo.min_nproc <= 0) oo.min_nproc = o->nproc;
    r->o = &oo;
    const char *sj = getenv("SLURM_JOB_ID");
    r->slurm = sj && *sj && !o->mpirun && !o->hosts && !o->hostfile;
    if (o->hosts || o->hostfile) {
        char *text = NULL;
        size_t len;
        if (o->hostfile && slm_file_read_all(o->hostfile, &text, &len) != SLM_OK) {
            slm_error("launch: --hostfile %s: %s", o->hostfile, slm_errmsg());
            free(r);
            return SLM_LAUNCH_USAGE;
        }
        r->n_hosts = slm_launch_parse_hosts(o->hostfile ? text : o->hosts, o->hostfile != NULL,
                                            r->host, r->slots, MAX_HOSTS);
        free(text);
        if (r->n_hosts < 0) {
            slm_error("launch: %s %s: %s", o->hostfile ? "--hostfile" : "--hosts",
                      o->hostfile ? o->hostfile : o->hosts, slm_errmsg());
            free(r);
            return SLM_LAUNCH_USAGE;
        }
        if (usable_slots(r) < oo.min_nproc) {
            slm_error("launch: the hosts have %d slot(s), fewer than --min-nproc %d%s",
                      usable_slots(r), oo.min_nproc,
                      o->min_nproc <= 0 ? " (without --min-nproc: --nproc)" : "");
            for (int i = 0; i < r->n_hosts; i++)
                free(r->host[i]);
            free(r);
            return SLM_LAUNCH_USAGE;
        }
    } else {
        r->local = !r->slurm;
        if (r->slurm) slurm_hosts(r);
    }
    // A live run holding the run directory (by hand, another launcher's, or the orphaned job
    // of a killed launcher) is said up front: no health check, no attempt, no restart, no
    // culprit, nothing written into its directory.
    char holder[256];
    if (run_lock_held(r->run_dir, holder, sizeof holder)) {
        report_lock_holder(r, holder);
        for (int i = 0; i < r->n_hosts; i++)
            free(r->host[i]);
        free(r);
        return SLM_LAUNCH_FAILED;
    }
    // The metrics server first: a port in use fails before anything is created or started.
    if (lm_start(o->metrics_addr) != SLM_OK) {
        slm_error("launch: --metrics-addr: %s", slm_errmsg());
        for (int i = 0; i < r->n_hosts; i++)
            free(r->host[i]);
        free(r);
        return SLM_LAUNCH_FAILED;
    }
    slm_metric_set(g_m.nproc, o->nproc);
    slm_metric_set(g_m.max_restarts, o->max_restarts);
    slm_metric_set(g_m.start_time, wall_now());
    lm_state(o->no_health_check ? ST_RUNNING : ST_HEALTH);
    first_missing(r->run_dir, r->made, sizeof r->made);
    if (slm_mkdir_p(r->run_dir) != SLM_OK || slm_mkdir_p(r->hb_dir) != SLM_OK) {
        slm_error("launch: %s", slm_errmsg());
        lm_stop();
        free(r);
        return SLM_LAUNCH_FAILED;
    }
    load_history(r);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    install_signals();
    r->t0 = wall_now();
    int code = SLM_LAUNCH_OK;
    const char *result = "success";
    slm_info("launch: %d rank(s)%s, at least %d, up to %d restart(s), hang timeout %.0f s, %s",
             o->nproc, r->local ? " on this host" : "", oo.min_nproc, o->max_restarts,
             o->hang_timeout_s, r->slurm ? "srun --mpi=pmix (Slurm allocation)" : "mpirun");
    for (;;) {
        if (!o->no_health_check) {
            lm_state(ST_HEALTH);
            int hc = run_health(r);
            if (!r->transport[0] && r->n_health == 1)
                snprintf(r->transport, sizeof r->transport, "not reported by the MPI launcher");
            if (r->n_health == 1) slm_info("launch: MPI transport: %s", r->transport);
            if (hc == SLM_LAUNCH_PREEMPTED) {
                code = hc, result = "preempted";
                snprintf(r->message, sizeof r->message, "%s during the health check",
                         sig_name(g_signal));
                break;
            }
            if (hc) {
                code = hc, result = hc == SLM_LAUNCH_HEALTH          ? "health check failed"
                                    : hc == SLM_LAUNCH_DETERMINISTIC ? "deterministic failure"
                                                                     : "failed";
                if (hc == SLM_LAUNCH_DETERMINISTIC)
                    slm_error("launch: START-UP FAILURE (not retried):\n\n    %s\n", r->message);
                break;
            }
        }
        int world = choose_world(r);
        if (world == 0) {
            code = SLM_LAUNCH_FAILED, result = "failed";
            snprintf(r->message, sizeof r->message,
                     "%d usable slot(s) left: no world in [--min-nproc %d, %d] divides the "
                     "global batch (%d ranks x --grad-accum %d)%s",
                     usable_slots(r), oo.min_nproc, o->nproc, o->nproc, r->grad_accum,
                     r->shard_group > 1 ? " and is a multiple of --shard-group-size" : "");
            break;
        }
        if (world != o->nproc)
            slm_warn("launch: running at %d rank(s) instead of %d: --grad-accum %d -> %lld keeps "
                     "the global batch",
                     world, o->nproc, r->grad_accum,
                     (long long)((int64_t)o->nproc * r->grad_accum / world));
        if (r->n_att == MAX_ATTEMPTS) {
            code = SLM_LAUNCH_FAILED, result = "failed";
            break;
        }
        if (run_lock_held(r->run_dir, holder, sizeof holder)) { // a run started meanwhile
            report_lock_holder(r, holder);
            code = SLM_LAUNCH_FAILED, result = "failed";
            break;
        }
        attempt *at = &r->att[r->n_att];
        run_attempt(r, at, world);
        r->n_att++;
        lm_exit(at->result, at->reason);
        if (r->n_att >= 2) { // the previous attempt's lost steps: it reached X, this one began at Y
            attempt *pv = &r->att[r->n_att - 2];
            int64_t resumed = at->start_step;
            if (pv->steps_reached >= 0 && resumed >= 0 && pv->steps_reached > resumed)
                pv->steps_lost = pv->steps_reached - resumed;
        }
        write_attempts(r, "running");
        slm_info("launch: attempt %d ended: %s%s%s", at->n, at->result, at->reason[0] ? ": " : "",
                 at->reason);
        if (!strcmp(at->result, "success")) break;
        if (!strcmp(at->result, "preempted") || !strcmp(at->result, "max-run")) {
            code = SLM_LAUNCH_PREEMPTED, result = at->result;
            snprintf(r->message, sizeof r->message, "%.4500s; resumable: launch again to continue",
                     at->reason);
            break;
        }
        // a failure: deterministic? (The messages below bound each %s so that r->message, as
        // large as at->reason, always holds them: gcc -Wformat-truncation.)
        const char *why = at->error[0] ? at->error : at->reason;
        if (at->refused) { // nothing ran: a start-up failure, whatever the attempt
            code = SLM_LAUNCH_DETERMINISTIC, result = "deterministic failure";
            r->startup_failed = true;
            snprintf(r->message, sizeof r->message,
                     "the MPI start-up failed (%.64s; no rank reported an error, an exit or a "
                     "heartbeat): %.4000s",
                     launcher_name(r), why);
            slm_error("launch: START-UP FAILURE (not retried):\n\n    %s\n", r->message);
            break;
        }
        if (r->n_att >= 2 && !at->any_train) {
            attempt *pv = &r->att[r->n_att - 2];
            const char *pwhy = pv->error[0] ? pv->error : pv->reason;
            if (!pv->any_train && strcmp(pv->result, "failed") == 0 &&
                strcmp(at->result, "failed") == 0 && !strcmp(why, pwhy)) {
                code = SLM_LAUNCH_DETERMINISTIC, result = "deterministic failure";
                snprintf(r->message, sizeof r->message,
                         "the job failed before its first step twice with the same error: %.4000s",
                         why);
                slm_error("launch: DETERMINISTIC START-UP FAILURE (not retried):\n\n    %s\n", why);
                break;
            }
        }
        if (r->restarts >= o->max_restarts) {
            code = SLM_LAUNCH_FAILED, result = "failed";
            snprintf(r->message, sizeof r->message, "gave up after %d restart(s): %.4000s",
                     r->restarts, at->reason);
            break;
        }
        // node replacement: a host named in two failures is excluded
        if (at->culprit_host[0] && !r->local) {
            int hi = host_index(r, at->culprit_host);
            if (hi >= 0 && ++r->failures[hi] >= 2 && !r->excluded[hi]) {
                r->excluded[hi] = true;
                slm_warn("launch: host %s excluded: named in %d failures", r->host[hi],
                         r->failures[hi]);
                lm_host_excluded(r->host[hi], n_excluded(r));
            }
        }
        r->restarts++;
        slm_metric_inc(g_m.restarts, 1);
        lm_state(ST_BACKOFF);
        double wait = o->backoff_s * pow(2.0, r->restarts - 1);
        if (wait > o->backoff_max_s) wait = o->backoff_max_s;
        slm_warn("launch: restart %d of %d in %.1f s (from the newest checkpoint that verifies)",
                 r->restarts, o->max_restarts, wait);
        double t1 = wall_now();
        while (wall_now() - t1 < wait && !g_signal)
            sleep_s(0.05), reap(NULL);
        if (g_signal) {
            code = SLM_LAUNCH_PREEMPTED, result = "preempted";
            snprintf(r->message, sizeof r->message, "%s during the restart backoff",
                     sig_name(g_signal));
            break;
        }
    }
    int rc = finish(r, code, result, summary);
    free(r);
    return rc;
}
