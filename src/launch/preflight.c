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

// Runs the health check on every usable slot. Returns 0 when it passed (or the failing hosts
// were excluded and enough remain), SLM_LAUNCH_HEALTH when no healthy world is left, or
// SLM_LAUNCH_PREEMPTED when a signal arrived.
int run_health(run *r) {
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
        job_reap(&j);
        if (sig_pending()) {
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
