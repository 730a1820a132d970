// The preflight health check (`shardlm healthcheck` on every usable slot) and the exclusion of
// the hosts whose ranks fail it.
#include "launch/launch_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void record_health(run *r, int world, bool ok, const char *failed) {
    if (r->n_health >= MAX_ATTEMPTS) return;
    health_rec *h = &r->health[r->n_health++];
    h->time = wall_now(), h->world = world, h->ok = ok;
    snprintf(h->failed, sizeof h->failed, "%s", failed);
    if (!ok) lm_health_failed();
}

// Runs the health-check job to its end, bounded by --health-timeout (*timed_out) and ended
// early by a signal of the launcher (*interrupted). False when it could not be started
// (r->message says why). The transport its verbose output names goes to r->transport.
static bool health_job(run *r, int world, const char *report, job *j, bool *timed_out,
                       bool *interrupted) {
    const slm_launch_opts *o = r->o;
    argv_t a = {0};
    health_command(r, world, report, &a);
    char *cmd = av_join(&a);
    slm_info("launch: health check on %d rank(s): %s", world, cmd);
    free(cmd);
    if (job_start(j, a.v, k_verbose_mpi_env) != 0) {
        av_free(&a);
        snprintf(r->message, sizeof r->message, "cannot start the health check: %s",
                 strerror(errno));
        return false;
    }
    av_free(&a);
    double t0 = wall_now();
    *interrupted = false;
    while (!j->exited) {
        job_drain(j, 100);
        job_reap(j);
        if (sig_pending()) {
            *interrupted = true;
            break;
        }
        if (wall_now() - t0 > o->health_timeout_s) break;
    }
    *timed_out = !j->exited && !*interrupted;
    if (!j->exited) job_terminate(j, o->kill_grace_s);
    job_sweep(j);
    if (j->pml[0] || j->btl[0])
        snprintf(r->transport, sizeof r->transport, "pml %s; btl %s", j->pml[0] ? j->pml : "?",
                 j->btl[0] ? j->btl : "(one rank: none)");
    return true;
}

// The job left no report: the MPI start-up failed (SLM_LAUNCH_DETERMINISTIC, nothing is known
// about the hosts' health), else the check failed (SLM_LAUNCH_HEALTH) with the job's error.
static int health_no_report(run *r, const job *j, int world, bool timed_out) {
    if (!timed_out && launcher_refused(j)) {
        snprintf(r->message, sizeof r->message,
                 "the MPI start-up failed (%s exit status %d; no rank reported an error or "
                 "an exit): %s%s",
                 launcher_name(r), WIFEXITED(j->status) ? WEXITSTATUS(j->status) : -1,
                 j->first_error[0] ? "" : "Open MPI: ",
                 j->first_error[0] ? j->first_error : job_banner(j));
        r->startup_failed = true;
        return SLM_LAUNCH_DETERMINISTIC;
    }
    char why[sizeof j->banner + 64];
    snprintf(why, sizeof why, "the health-check job %s without a report (%s)",
             timed_out ? "timed out" : "ended",
             j->first_error[0]  ? j->first_error
             : j->reason[0]     ? j->reason
             : job_banner(j)[0] ? job_banner(j)
                                : j->signal_error);
    record_health(r, world, false, why);
    snprintf(r->message, sizeof r->message, "health check failed: %s", why);
    return SLM_LAUNCH_HEALTH;
}

// The report's failing ranks into failed ("rank 2 (host h2): gemm: ...; ..."), and their hosts
// excluded: by the name the report gives (gethostname(); Open MPI names hosts as given in
// --host: either matches) or as the host whose slots held that rank.
static void health_failed_ranks(run *r, const cJSON *rep, char *failed, size_t cap) {
    size_t fl = 0;
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(rep, "ranks"), *x;
    cJSON_ArrayForEach(x, ranks) {
        const cJSON *rok = cJSON_GetObjectItemCaseSensitive(x, "ok");
        if (cJSON_IsTrue(rok)) continue;
        const cJSON *rk = cJSON_GetObjectItemCaseSensitive(x, "rank");
        const cJSON *hs = cJSON_GetObjectItemCaseSensitive(x, "host");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(x, "msg");
        const char *hname = cJSON_IsString(hs) ? hs->valuestring : "?";
        fl += (size_t)snprintf(failed + fl, cap > fl ? cap - fl : 0, "%srank %d (host %s): %s",
                               fl ? "; " : "", cJSON_IsNumber(rk) ? rk->valueint : -1, hname,
                               cJSON_IsString(msg) ? msg->valuestring : "?");
        int hi = host_index(r, hname);
        if (hi < 0 && cJSON_IsNumber(rk) && !r->local) hi = host_of_rank(r, rk->valueint);
        if (hi >= 0 && !r->local && !r->excluded[hi])
            exclude_host(r, hi, "it failed the health check");
    }
    if (fl >= cap) failed[cap - 1] = 0;
}

// Runs the health check on every usable slot. Returns 0 when it passed (or the failing hosts
// were excluded and enough remain), SLM_LAUNCH_HEALTH when no healthy world is left, or
// SLM_LAUNCH_PREEMPTED when a signal arrived.
int run_health(run *r) {
    char num[32]; // the attempt this check precedes (faults of attempt 1 fire only before it)
    snprintf(num, sizeof num, "%d", r->n_att + 1);
    setenv("SHARDLM_ATTEMPT", num, 1);
    int world = r->local ? r->o->nproc : usable_slots(r);
    if (r->slurm) world = choose_world(r);
    char report[4096];
    snprintf(report, sizeof report, "%s/health.json", r->run_dir);
    unlink(report);
    job j;
    bool timed_out = false, interrupted = false;
    if (!health_job(r, world, report, &j, &timed_out, &interrupted)) return SLM_LAUNCH_FAILED;
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
        return health_no_report(r, &j, world, timed_out);
    }
    if (cJSON_IsTrue(ok)) {
        cJSON_Delete(rep);
        record_health(r, world, true, "");
        slm_info("launch: health check passed on %d rank(s)", world);
        return 0;
    }
    char failed[1024] = "";
    health_failed_ranks(r, rep, failed, sizeof failed);
    cJSON_Delete(rep);
    record_health(r, world, false, failed);
    slm_error("launch: health check FAILED: %s", failed);
    if (r->local || choose_world(r) == 0) {
        snprintf(r->message, sizeof r->message, "health check failed: %.1000s", failed);
        return SLM_LAUNCH_HEALTH;
    }
    return 0;
}
