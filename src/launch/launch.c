// The training-job supervisor (launch.h): the options, the attempt loop and the end of a
// launch. One process, single-threaded: a poll loop over the job's stderr pipe, its exit
// status, the heartbeat files and this process's own signals. Its parts: launch_internal.h.
#include "launch/launch_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>

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
    if (lm_serving() && r->o->metrics_linger_s > 0) { // the final state, for the last scrapes
        slm_info("launch: done (%s, exit %d); /metrics stays up %.0f s (--metrics-linger; "
                 "SIGTERM / SIGINT ends it)",
                 result, code, r->o->metrics_linger_s);
        sig_clear();
        double t1 = wall_now();
        while (wall_now() - t1 < r->o->metrics_linger_s && !sig_pending())
            sleep_s(0.05);
    }
    lm_stop();
    free_history(r);
    return code;
}

// What the launcher adds to or checks in the train arguments: --out (required), --resume
// (auto or absent), --train-from-scratch, --heartbeat-dir, --grad-accum, HYBRID_SHARD's
// --shard-group-size, --model, --device, --verify-on-resume, --preempt-grace. SLM_LAUNCH_USAGE with
// the message printed for bad ones.
static int read_train_args(run *r, const slm_launch_opts *o) {
    int idx;
    r->run_dir = find_arg(o, "--out", &idx);
    if (!r->run_dir) {
        slm_error("launch: the train arguments need --out RUN_DIR (the run directory the "
                  "launcher supervises and restarts from)");
        return SLM_LAUNCH_USAGE;
    }
    const char *resume = find_arg(o, "--resume", &idx);
    if (idx >= 0 && (!resume || strcmp(resume, "auto") != 0)) {
        slm_error("launch: --resume %s: the launcher always resumes with --resume auto (the "
                  "newest checkpoint of --out that verifies); leave --resume out",
                  resume ? resume : "");
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
    r->device = find_arg(o, "--device", &idx);
    find_arg(o, "--verify-on-resume", &idx);
    r->has_verify = idx >= 0;
    find_arg(o, "--preempt-grace", &idx);
    r->has_grace = idx >= 0;
    return SLM_LAUNCH_OK;
}

// The hosts: --hosts / --hostfile (enough slots for --min-nproc), the Slurm allocation, or this
// machine. SLM_LAUNCH_USAGE with the message printed for a bad list.
static int read_hosts(run *r, const slm_launch_opts *o) {
    const char *sj = getenv("SLURM_JOB_ID");
    r->slurm = sj && *sj && !o->mpirun && !o->hosts && !o->hostfile;
    if (!o->hosts && !o->hostfile) {
        r->local = !r->slurm;
        if (r->slurm) slurm_hosts(r);
        return SLM_LAUNCH_OK;
    }
    char *text = NULL;
    size_t len;
    if (o->hostfile && slm_file_read_all(o->hostfile, &text, &len) != SLM_OK) {
        slm_error("launch: --hostfile %s: %s", o->hostfile, slm_errmsg());
        return SLM_LAUNCH_USAGE;
    }
    r->n_hosts = slm_launch_parse_hosts(o->hostfile ? text : o->hosts, o->hostfile != NULL, r->host,
                                        r->slots, MAX_HOSTS);
    free(text);
    if (r->n_hosts < 0) {
        r->n_hosts = 0;
        slm_error("launch: %s %s: %s", o->hostfile ? "--hostfile" : "--hosts",
                  o->hostfile ? o->hostfile : o->hosts, slm_errmsg());
        return SLM_LAUNCH_USAGE;
    }
    if (usable_slots(r) < r->o->min_nproc) {
        slm_error("launch: the hosts have %d slot(s), fewer than --min-nproc %d%s", usable_slots(r),
                  r->o->min_nproc, o->min_nproc <= 0 ? " (without --min-nproc: --nproc)" : "");
        return SLM_LAUNCH_USAGE;
    }
    return SLM_LAUNCH_OK;
}

// Claims what the launch needs before anything starts: a run directory no live run holds, the
// metrics server (a port in use fails here), RUN_DIR and its heartbeat directory, the earlier
// launches' history. SLM_LAUNCH_FAILED with the message printed otherwise.
static int claim(run *r, const slm_launch_opts *o) {
    // A live run holding the run directory (by hand, another launcher's, or the orphaned job
    // of a killed launcher) is said up front: no health check, no attempt, no restart, no
    // culprit, nothing written into its directory.
    char holder[256];
    if (run_lock_held(r->run_dir, holder, sizeof holder)) {
        report_lock_holder(r, holder);
        return SLM_LAUNCH_FAILED;
    }
    if (lm_start(o->metrics_addr) != SLM_OK) {
        slm_error("launch: --metrics-addr: %s", slm_errmsg());
        return SLM_LAUNCH_FAILED;
    }
    lm_launch(o->nproc, o->max_restarts, wall_now());
    lm_state(o->no_health_check ? ST_RUNNING : ST_HEALTH);
    first_missing(r->run_dir, r->made, sizeof r->made);
    if (slm_mkdir_p(r->run_dir) != SLM_OK || slm_mkdir_p(r->hb_dir) != SLM_OK) {
        slm_error("launch: %s", slm_errmsg());
        lm_stop();
        return SLM_LAUNCH_FAILED;
    }
    load_history(r);
    return SLM_LAUNCH_OK;
}

// Everything before the first attempt; SLM_LAUNCH_OK or the exit code (nothing started).
static int setup(run *r, const slm_launch_opts *o) {
    r->o = o;
    int code = read_train_args(r, o);
    if (code) return code;
    if (o->min_nproc > o->nproc) {
        slm_error("launch: --min-nproc %d is larger than --nproc %d", o->min_nproc, o->nproc);
        return SLM_LAUNCH_USAGE;
    }
    r->opts = *o;
    if (r->opts.min_nproc <= 0) r->opts.min_nproc = o->nproc;
    r->o = &r->opts;
    code = read_hosts(r, o);
    if (!code) code = claim(r, o);
    if (code) return code;
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    install_signals();
    r->t0 = wall_now();
    slm_info("launch: %d rank(s)%s, at least %d, up to %d restart(s), hang timeout %.0f s, %s",
             o->nproc, r->local ? " on this host" : "", r->o->min_nproc, o->max_restarts,
             o->hang_timeout_s, r->slurm ? "srun --mpi=pmix (Slurm allocation)" : "mpirun");
    return SLM_LAUNCH_OK;
}

// The attempt loop's steps return GO_ON, or the launch's exit code with *result set.
#define GO_ON (-1)

// The health check before an attempt.
static int preflight(run *r, const char **result) {
    lm_state(ST_HEALTH);
    int hc = run_health(r);
    if (!r->transport[0] && r->n_health == 1)
        snprintf(r->transport, sizeof r->transport, "not reported by the MPI launcher");
    if (r->n_health == 1) slm_info("launch: MPI transport: %s", r->transport);
    if (hc == SLM_LAUNCH_PREEMPTED) {
        *result = "preempted";
        snprintf(r->message, sizeof r->message, "%s during the health check",
                 sig_name(sig_pending()));
        return hc;
    }
    if (!hc) return GO_ON;
    *result = hc == SLM_LAUNCH_HEALTH          ? "health check failed"
              : hc == SLM_LAUNCH_DETERMINISTIC ? "deterministic failure"
                                               : "failed";
    if (hc == SLM_LAUNCH_DETERMINISTIC)
        slm_error("launch: START-UP FAILURE (not retried):\n\n    %s\n", r->message);
    return hc;
}

// The next attempt's world (*world), or the end: none fits, the attempts table is full, or a
// run took the run directory meanwhile.
static int next_world(run *r, int *world, const char **result) {
    const slm_launch_opts *o = r->o;
    *world = choose_world(r);
    if (*world == 0) {
        snprintf(r->message, sizeof r->message,
                 "%d usable slot(s) left: no world in [--min-nproc %d, %d] divides the "
                 "global batch (%d ranks x --grad-accum %d)%s",
                 usable_slots(r), o->min_nproc, o->nproc, o->nproc, r->grad_accum,
                 r->shard_group > 1 ? " and is a multiple of --shard-group-size" : "");
        *result = "failed";
        return SLM_LAUNCH_FAILED;
    }
    if (*world != o->nproc)
        slm_warn("launch: running at %d rank(s) instead of %d: --grad-accum %d -> %lld keeps "
                 "the global batch",
                 *world, o->nproc, r->grad_accum,
                 (long long)((int64_t)o->nproc * r->grad_accum / *world));
    char holder[256];
    if (r->n_att == MAX_ATTEMPTS) {
        *result = "failed";
        return SLM_LAUNCH_FAILED;
    }
    if (run_lock_held(r->run_dir, holder, sizeof holder)) { // a run started meanwhile
        report_lock_holder(r, holder);
        *result = "failed";
        return SLM_LAUNCH_FAILED;
    }
    return GO_ON;
}

// A failed attempt that must not be retried: nothing ran (a start-up failure), or the job
// failed before its first step twice with the same error. (The messages bound each %s so that
// r->message, as large as at->reason, always holds them: gcc -Wformat-truncation.)
static int deterministic(run *r, const attempt *at, const char **result) {
    const char *why = at->error[0] ? at->error : at->reason;
    if (at->refused) { // nothing ran: a start-up failure, whatever the attempt
        r->startup_failed = true;
        snprintf(r->message, sizeof r->message,
                 "the MPI start-up failed (%.64s; no rank reported an error, an exit or a "
                 "heartbeat): %.4000s",
                 launcher_name(r), why);
        slm_error("launch: START-UP FAILURE (not retried):\n\n    %s\n", r->message);
        *result = "deterministic failure";
        return SLM_LAUNCH_DETERMINISTIC;
    }
    if (r->n_att >= 2 && !at->any_train) {
        const attempt *pv = &r->att[r->n_att - 2];
        const char *pwhy = pv->error[0] ? pv->error : pv->reason;
        if (!pv->any_train && strcmp(pv->result, "failed") == 0 &&
            strcmp(at->result, "failed") == 0 && !strcmp(why, pwhy)) {
            snprintf(r->message, sizeof r->message,
                     "the job failed before its first step twice with the same error: %.4000s",
                     why);
            slm_error("launch: DETERMINISTIC START-UP FAILURE (not retried):\n\n    %s\n", why);
            *result = "deterministic failure";
            return SLM_LAUNCH_DETERMINISTIC;
        }
    }
    return GO_ON;
}

// Runs one attempt, records it, and judges its end: success, preempted, not to be retried,
// out of restarts, or GO_ON (restart).
static int one_attempt(run *r, int world, const char **result) {
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
    if (!strcmp(at->result, "success")) return SLM_LAUNCH_OK;
    if (!strcmp(at->result, "preempted") || !strcmp(at->result, "max-run")) {
        *result = at->result;
        snprintf(r->message, sizeof r->message, "%.4500s; resumable: launch again to continue",
                 at->reason);
        return SLM_LAUNCH_PREEMPTED;
    }
    int code = deterministic(r, at, result);
    if (code != GO_ON) return code;
    if (r->restarts >= r->o->max_restarts) {
        *result = "failed";
        snprintf(r->message, sizeof r->message, "gave up after %d restart(s): %.4000s", r->restarts,
                 at->reason);
        return SLM_LAUNCH_FAILED;
    }
    return GO_ON;
}

// Before a restart: a host named in two failures is excluded (node replacement), then the
// exponential backoff; a signal during it ends the launch (preempted).
static int restart(run *r, const char **result) {
    const slm_launch_opts *o = r->o;
    const attempt *at = &r->att[r->n_att - 1];
    if (at->culprit_host[0] && !r->local) {
        int hi = host_index(r, at->culprit_host);
        if (hi >= 0 && ++r->failures[hi] >= 2 && !r->excluded[hi]) {
            char why[64];
            snprintf(why, sizeof why, "named in %d failures", r->failures[hi]);
            exclude_host(r, hi, why);
        }
    }
    r->restarts++;
    lm_restart();
    lm_state(ST_BACKOFF);
    double wait = o->backoff_s * pow(2.0, r->restarts - 1);
    if (wait > o->backoff_max_s) wait = o->backoff_max_s;
    slm_warn("launch: restart %d of %d in %.1f s (from the newest checkpoint that verifies)",
             r->restarts, o->max_restarts, wait);
    double t1 = wall_now();
    while (wall_now() - t1 < wait && !sig_pending())
        sleep_s(0.05), job_reap(NULL);
    if (!sig_pending()) return GO_ON;
    *result = "preempted";
    snprintf(r->message, sizeof r->message, "%s during the restart backoff",
             sig_name(sig_pending()));
    return SLM_LAUNCH_PREEMPTED;
}

// Health check, attempt, restart, until one ends the launch; returns its exit code.
static int attempt_loop(run *r, const char **result) {
    for (;;) {
        int world = 0;
        int code = r->o->no_health_check ? GO_ON : preflight(r, result);
        if (code == GO_ON) code = next_world(r, &world, result);
        if (code == GO_ON) code = one_attempt(r, world, result);
        if (code == GO_ON) code = restart(r, result);
        if (code != GO_ON) return code;
    }
}

int slm_launch_run(const slm_launch_opts *o, char **summary) {
    *summary = NULL;
    run *r = calloc(1, sizeof *r);
    if (!r) slm_fatal("launch: out of memory");
    int rc = setup(r, o);
    if (rc == SLM_LAUNCH_OK) {
        const char *result = "success";
        int code = attempt_loop(r, &result);
        rc = finish(r, code, result, summary);
    } else {
        for (int i = 0; i < r->n_hosts; i++)
            free(r->host[i]);
    }
    free(r);
    return rc;
}
