// One training attempt: its command, the supervision loop (exit, heartbeats, signals,
// --max-run), and its outcome: result, reason, culprit, steps.
#include "launch/launch_internal.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// Seconds a job whose ranks all wrote their "end" record may take to exit before it counts
// as hung (covers the trainer's last-scrape wait, at most 15 s, with room for a loaded host).
#define END_EXIT_S 60.0

// What the supervision of one attempt knows (run_attempt's state, passed to its steps).
typedef struct watch {
    run *r;
    const slm_launch_opts *o;
    attempt *at;
    job j;
    hb_state h;
    int64_t resume_hint; // the newest checkpoint's step at the start (-1: none)
    double last_scan, preempt_deadline;
    double dead_time; // when a rank was seen dead (0: never)
    double lp_detect; // the heartbeats' last progress when the failure was detected
    bool preempting, hang, coll_seen;
    int stop_rank; // a rank found stopped (state T) while the job failed: the cause
    long stop_pid;
    char myhost[128];
} watch;

// Appends to at->reason (cut at its size, as one snprintf would).
static void reason_append(attempt *at, const char *fmt, ...) {
    size_t l = strlen(at->reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(at->reason + l, sizeof at->reason - l, fmt, ap);
    va_end(ap);
}

// The evidence names `rank` the culprit (its host from its heartbeat, later); the reason says
// why, after what it said before ("...; the cause: ...").
static void name_cause(attempt *at, int rank, const char *fmt, ...) {
    at->culprit_rank = rank;
    at->culprit_host[0] = 0;
    if (at->reason[0]) reason_append(at, "; the cause: ");
    size_t l = strlen(at->reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(at->reason + l, sizeof at->reason - l, fmt, ap);
    va_end(ap);
}

// The attempt's record before it starts; SHARDLM_ATTEMPT for the job; no heartbeat file of the
// previous attempt may count as progress.
static void attempt_init(const run *r, attempt *at, int world) {
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
    for (int rk = 0; rk < MAX_RANKS; rk++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/rank_%05d.json", r->hb_dir, rk);
        if (unlink(p) != 0 && rk >= o->nproc) break;
    }
}

// --train-from-scratch moves the earlier run's checkpoints aside once: a restart resumes this
// launch's own checkpoints (--resume auto), unless that move has not happened yet.
static bool attempt_scratch(const run *r, const attempt *at) {
    if (r->scratch_idx < 0) return false;
    ino_t ino;
    (void)scratch_state(r->run_dir, &ino);
    return at->n == 1 || (r->scratch_had && ino == r->scratch_ino);
}

// Starts the attempt's job (w->j); false when it could not be started (the attempt failed).
static bool attempt_start(watch *w) {
    run *r = w->r;
    attempt *at = w->at;
    argv_t a = {0};
    train_command(r, at, attempt_scratch(r, at), &a);
    char *cmd = av_join(&a);
    slm_info("launch: attempt %d: %d rank(s)%s%s, grad accumulation %d: %s", at->n, at->world,
             r->local ? "" : " on ", r->local ? "" : at->hosts, at->grad_accum, cmd);
    free(cmd);
    bool probe = w->o->no_health_check && !r->transport[0];
    at->start = wall_now();
    lm_attempt(at->n, at->world);
    lm_state(ST_RUNNING);
    if (job_start(&w->j, a.v, probe ? k_verbose_mpi_env : NULL) != 0) {
        snprintf(at->result, sizeof at->result, "failed");
        snprintf(at->reason, sizeof at->reason, "cannot start %s: %s", a.v[0], strerror(errno));
        av_free(&a);
        at->end = at->detected = wall_now();
        return false;
    }
    av_free(&a);
    return true;
}

// A rank of this host gone while its heartbeat says it runs: a crash, named at once (mpirun
// reports it too; the job gets 3 s for that before the teardown). A rank that died, or a
// collective that timed out, may be the consequence of a rank stopped inside a collective (the
// others wait for it, one times out and aborts): /proc is read while the job is still there
// (the teardown removes the evidence).
static void watch_crash(watch *w, double now) {
    attempt *at = w->at;
    long dpid = 0;
    int n_dead = 0;
    int drank = w->dead_time || w->preempting ? -1 : dead_rank(&w->h, w->myhost, &dpid, &n_dead);
    if (drank >= 0) { // read the heartbeats again: a rank that finished wrote its final record
        // ("end", "stopped", "error") before it exited, maybe after the last scan, and is no
        // crash (seen under load: a completed attempt taken for 4 dead ranks)
        hb_scan(&w->h, w->r->hb_dir, now), w->last_scan = now;
        drank = dead_rank(&w->h, w->myhost, &dpid, &n_dead);
    }
    if ((drank >= 0 || (w->j.coll_timeout && !w->coll_seen)) && w->stop_rank < 0)
        w->stop_rank = stopped_rank(&w->h, &w->stop_pid);
    w->coll_seen |= w->j.coll_timeout;
    if (drank < 0) return;
    w->dead_time = now, w->lp_detect = w->h.last_progress;
    if (n_dead == 1) { // several gone at once: mpirun's report says which was first
        at->culprit_rank = drank;
        snprintf(at->culprit_host, sizeof at->culprit_host, "%s", w->myhost);
        snprintf(at->reason, sizeof at->reason, "rank %d (pid %ld on %s) died", drank, dpid,
                 w->myhost);
    } else {
        snprintf(at->reason, sizeof at->reason, "%d ranks on %s died", n_dead, w->myhost);
    }
    slm_error("launch: %s", at->reason);
}

// A signal of the launcher or --max-run: SIGUSR1 forwarded (the ranks checkpoint and exit 75);
// the job is terminated when it has not stopped within --preempt-grace. True: it was.
static bool watch_preempt(watch *w, double now) {
    const slm_launch_opts *o = w->o;
    attempt *at = w->at;
    if (!w->preempting && (sig_pending() || (o->max_run_s > 0 && now - w->r->t0 >= o->max_run_s))) {
        w->preempting = true;
        w->preempt_deadline = now + o->preempt_grace_s;
        if (sig_pending()) {
            snprintf(at->result, sizeof at->result, "preempted");
            snprintf(at->reason, sizeof at->reason, "%s received: forwarded to the ranks",
                     sig_name(sig_pending()));
        } else {
            snprintf(at->result, sizeof at->result, "max-run");
            snprintf(at->reason, sizeof at->reason, "--max-run %.0f s reached", o->max_run_s);
        }
        slm_warn("launch: %s; SIGUSR1 to the job (checkpoint, then exit 75) within %.0f s",
                 at->reason, o->preempt_grace_s);
        kill(w->j.pid, SIGUSR1); // mpirun / srun forward it to every rank
    }
    if (!w->preempting || now <= w->preempt_deadline) return false;
    slm_warn("launch: the job did not stop within --preempt-grace; terminating it");
    reason_append(at, "; not stopped within --preempt-grace %.0f s", o->preempt_grace_s);
    at->detected = now;
    job_terminate(&w->j, o->kill_grace_s);
    return true;
}

// How long the heartbeats may stand still before the job counts as hung.
static double hang_limit(const watch *w) {
    const slm_launch_opts *o = w->o;
    // Until the first record the ranks are starting (MPI, model init, checkpoint load): a slow
    // start-up on a loaded host is not a hang.
    double limit = o->hang_timeout_s;
    if (!w->h.any_record)
        limit = o->startup_timeout_s > 0 ? o->startup_timeout_s : fmax(limit, 120.0);
    // Every rank wrote its final "end" record (after the final checkpoint and upload): what is
    // left is the exit (a trainer scraped by Prometheus serves one more scrape, at most
    // SLM_TRAIN_PROM_LINGER_MAX_S = 15 s, then MPI_Finalize). Silence there is not a hang; a
    // job that still has not exited after END_EXIT_S is one.
    if (all_ended(&w->h)) limit = fmax(limit, END_EXIT_S);
    return limit;
}

// No heartbeat progress for the limit: a hang. Its culprit is a rank found stopped, if any;
// SIGUSR2 makes the ranks dump their flight recorders, then the job is terminated. True: it was.
static bool watch_hang(watch *w, double now) {
    attempt *at = w->at;
    const hb_state *h = &w->h;
    if (w->preempting || w->dead_time || now - h->last_progress <= hang_limit(w)) return false;
    w->hang = true;
    at->detected = now, w->lp_detect = h->last_progress;
    snprintf(at->result, sizeof at->result, "hang");
    long spid = 0;
    int srank = stopped_rank(h, &spid);
    if (srank >= 0) {
        at->culprit_rank = srank;
        snprintf(at->culprit_host, sizeof at->culprit_host, "%s", h->last[srank].host);
        snprintf(at->reason, sizeof at->reason,
                 "no heartbeat progress for %.0f s (%s); rank %d (pid %ld on %s) is stopped",
                 now - h->last_progress, h->any_record ? "--hang-timeout" : "--startup-timeout",
                 srank, spid, h->last[srank].host);
    } else {
        snprintf(at->reason, sizeof at->reason, "no heartbeat progress for %.0f s (%s)",
                 now - h->last_progress,
                 h->any_record ? "--hang-timeout" : "--startup-timeout: no rank started");
    }
    slm_error("launch: hang: %s; SIGUSR2 to the ranks (flight recorder dumps)", at->reason);
    kill(w->j.pid, SIGUSR2);
    double t1 = wall_now();
    while (wall_now() - t1 < 2.0 && !w->j.exited)
        job_drain(&w->j, 100), job_reap(&w->j);
    job_terminate(&w->j, w->o->kill_grace_s);
    return true;
}

// Supervises the running job until it exits or is torn down (a crash, a preemption that
// outlasted its grace, a hang).
static void watch_job(watch *w) {
    while (!w->j.exited) {
        job_drain(&w->j, 100);
        job_reap(&w->j);
        if (w->j.exited) break;
        double now = wall_now();
        if (now - w->last_scan >= (w->at->world <= 64 ? 0.1 : 1.0))
            hb_scan(&w->h, w->r->hb_dir, now), w->last_scan = now;
        watch_crash(w, now);
        if (w->dead_time && now - w->dead_time > 3.0) {
            job_terminate(&w->j, w->o->kill_grace_s);
            break;
        }
        if (watch_preempt(w, now) || watch_hang(w, now)) break;
    }
}

// After the end: when the failure was detected, the last of the job's processes gone, the
// final heartbeats read, and the attempt's steps and exit status.
static void attempt_collect(watch *w) {
    attempt *at = w->at;
    const job *j = &w->j;
    hb_state *h = &w->h;
    if (!at->detected) at->detected = w->dead_time ? w->dead_time : j->evidence_time;
    if (!at->detected) at->detected = j->exit_time;
    if (!at->detected) at->detected = wall_now();
    if (!w->lp_detect) w->lp_detect = h->last_progress; // before the teardown's records
    job_sweep(&w->j);
    hb_scan(h, w->r->hb_dir, wall_now());
    at->end = wall_now();
    at->last_progress = w->lp_detect;
    at->first_step_time = h->first_step_time;
    // The start step: the trainer's resume line, else the heartbeat's start record, else 0 for
    // a run that had no checkpoint (a start record can be missed: it is replaced within ms).
    at->start_step = j->resumed_step >= 0 ? j->resumed_step : h->start_step;
    if (at->start_step < 0 && w->resume_hint < 0) at->start_step = 0;
    at->steps_reached = h->max_step >= 0 ? h->max_step : at->start_step;
    at->any_train = h->any_train;
    at->refused = launcher_refused(j) && !h->any_record;
    if (WIFEXITED(j->status)) at->exit_status = WEXITSTATUS(j->status);
    if (WIFSIGNALED(j->status)) at->exit_signal = WTERMSIG(j->status);
}

// The "hung" job finished during the teardown (a slow step, then the last ones): its exit
// status and every rank's final "end" record say so. A success, as a preempted job that
// finished before it could stop; no restart is spent and nobody is blamed.
static void hang_finished(watch *w) {
    attempt *at = w->at;
    if (!w->hang || at->exit_status != 0 || !all_ended(&w->h)) return;
    w->hang = false;
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

// A job that exited by itself (neither hung nor preempted) with an error, or whose rank died:
// the reason and the culprit from mpirun's report and the ranks' errors.
static void failure_cause(watch *w) {
    attempt *at = w->at;
    const job *j = &w->j;
    if (j->reason[0])
        snprintf(at->reason, sizeof at->reason, "%s", j->reason);
    else if (w->dead_time)
        (void)0; // "rank R (pid P on H) died", set when it was seen
    else if (at->exit_signal)
        snprintf(at->reason, sizeof at->reason, "the job ended on signal %d", at->exit_signal);
    else if (job_banner(j)[0] && !j->first_error[0])
        snprintf(at->reason, sizeof at->reason, "the job exited with status %d; Open MPI: %s",
                 at->exit_status, job_banner(j));
    else
        snprintf(at->reason, sizeof at->reason, "the job exited with status %d", at->exit_status);
    if (at->exit_status == SLM_LAUNCH_PREEMPTED)
        snprintf(at->reason, sizeof at->reason, "the ranks were preempted (exit 75)");
    if (j->culprit_rank >= 0 || !w->dead_time) {
        at->culprit_rank = j->culprit_rank;
        snprintf(at->culprit_host, sizeof at->culprit_host, "%s", j->culprit_host);
    }
    // The ranks exited on an error (no rank died of a signal): the rank whose error it is, not
    // the one mpirun saw exit first (all of them exit on an agreed error).
    if (j->err_rank >= 0 && j->err_rank < at->world && !j->culprit_signal && !w->dead_time &&
        !j->coll_timeout && at->exit_status != SLM_LAUNCH_PREEMPTED) {
        if (j->err_rank != at->culprit_rank)
            snprintf(at->reason, sizeof at->reason,
                     "rank %d failed: the ranks exited on its error (status %d)", j->err_rank,
                     at->exit_status);
        at->culprit_rank = j->err_rank;
        at->culprit_host[0] = 0; // from its heartbeat, below
    }
}

// The attempt's error line and its result ("success", "preempted", "failed"; a hang or a
// preemption keeps the result it got when it was seen, unless the job finished anyway).
static void attempt_outcome(watch *w) {
    attempt *at = w->at;
    const job *j = &w->j;
    hang_finished(w);
    snprintf(at->error, sizeof at->error, "%s",
             j->fatal_error[0]                       ? j->fatal_error
             : j->first_error[0] || job_banner(j)[0] ? j->first_error
                                                     : j->signal_error);
    if (w->hang || w->preempting) {
        if (w->preempting && at->exit_status == 0)
            snprintf(at->result, sizeof at->result, "success"); // finished before it could stop
        return;
    }
    if (at->exit_status == 0)
        snprintf(at->result, sizeof at->result, "success");
    else if (at->exit_status == SLM_LAUNCH_PREEMPTED)
        snprintf(at->result, sizeof at->result, "preempted");
    else
        snprintf(at->result, sizeof at->result, "failed");
    if (w->dead_time && at->exit_status == 0) snprintf(at->result, sizeof at->result, "failed");
    if (at->exit_status != 0 || w->dead_time) failure_cause(w);
}

// The evidence agrees (issue 20 item 4): a rank stopped in /proc while the job failed is the
// cause whatever died or aborted after it (a peer timing out in the collective it blocks); on a
// collective timeout or a hang without one, the rank the flight recorder finds missing from the
// collective the others wait in. The reason names the culprit either way.
static void attempt_evidence(watch *w) {
    attempt *at = w->at;
    const hb_state *h = &w->h;
    if (!strcmp(at->result, "failed") && w->stop_rank >= 0 && at->culprit_rank != w->stop_rank)
        name_cause(at, w->stop_rank, "rank %d (pid %ld on %s) is stopped", w->stop_rank,
                   w->stop_pid, h->last[w->stop_rank].host);
    if (w->hang || w->j.coll_timeout) {
        flight_verdict(w->r, at->verdict, sizeof at->verdict);
        if (at->verdict[0]) {
            slm_info("launch: flight recorder verdict: %s", at->verdict);
            const char *m = strstr(at->verdict, "flight recorder: rank ");
            int v = m && strstr(m, " never entered") ? atoi(m + 22) : -1;
            // a hang's culprit is the stopped rank, if any; a collective timeout's is never the
            // rank that timed out waiting (it aborts or dies: a consequence)
            bool use =
                v >= 0 && v < at->world && (w->hang ? at->culprit_rank < 0 : w->stop_rank < 0);
            if (use && at->culprit_rank != v)
                name_cause(at, v,
                           "rank %d never entered the collective the others wait in (flight "
                           "recorder)",
                           v);
        }
    }
    if (at->culprit_rank >= 0 && at->culprit_rank < at->world && !at->culprit_host[0])
        snprintf(at->culprit_host, sizeof at->culprit_host, "%s", h->last[at->culprit_rank].host);
}

// One training attempt: returns when the job has ended and none of its processes is left.
void run_attempt(run *r, attempt *at, int world) {
    attempt_init(r, at, world);
    watch *w = calloc(1, sizeof *w);
    if (!w) slm_fatal("launch: out of memory");
    w->r = r, w->o = r->o, w->at = at;
    if (attempt_start(w)) {
        hb_init(&w->h, world, at->start);
        w->resume_hint = newest_checkpoint_step(r->run_dir);
        w->stop_rank = -1;
        gethostname(w->myhost, sizeof w->myhost - 1);
        watch_job(w);
        attempt_collect(w);
        attempt_outcome(w);
        attempt_evidence(w);
        free(w->h.last);
    }
    free(w);
}
