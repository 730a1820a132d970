// One training attempt: its command, the supervision loop (exit, heartbeats, signals,
// --max-run), and its outcome: result, reason, culprit, steps.
#include "launch/launch_internal.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// Seconds a job whose ranks all wrote their "end" record may take to exit before it counts
// as hung (covers the trainer's last-scrape wait, at most 15 s, with room for a loaded host).
#define END_EXIT_S 60.0

// One training attempt: returns when the job has ended and none of its processes is left.
void run_attempt(run *r, attempt *at, int world) {
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
    lm_attempt(at->n, world);
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
        job_reap(&j);
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
        if (!preempting && (sig_pending() || (o->max_run_s > 0 && now - r->t0 >= o->max_run_s))) {
            preempting = true;
            preempt_deadline = now + o->preempt_grace_s;
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
                job_drain(&j, 100), job_reap(&j);
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
