// The launcher's own metrics (--metrics-addr; docs/observability.md "Launcher metrics"). Every
// handle is NULL without a registry, and the registry's updates ignore NULL handles, so the code
// below updates them unconditionally.
#include "launch/launch_internal.h"

#include <stdio.h>
#include <string.h>

#include "metrics/metrics.h"

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

// A counter or gauge of the launcher: where its handle goes, its name and help.
typedef struct metric_def {
    slm_metric **h;
    bool counter;
    const char *name, *help;
} metric_def;

// Registers defs[0..n) in order (their order on /metrics); false when one failed.
static bool add_metrics(slm_metrics *reg, const metric_def *defs, int n) {
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const metric_def *d = &defs[i];
        *d->h = d->counter ? slm_metrics_counter(reg, d->name, d->help)
                           : slm_metrics_gauge(reg, d->name, d->help);
        ok &= *d->h != NULL;
    }
    return ok;
}

// The labelled families: excluded hosts, the last attempt's result, the launcher's state.
static slm_status add_families(launch_metrics *m) {
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
    return st;
}

slm_status lm_start(const char *addr) {
    memset(&g_m, 0, sizeof g_m);
    if (!addr) return SLM_OK;
    launch_metrics *m = &g_m;
    m->reg = slm_metrics_new();
    // The scalars; the labelled families go between the first 8 and the rest (the order of
    // /metrics, unchanged).
    const metric_def defs[] = {
        {&m->restarts, true, "shardlm_launch_restarts_total",
         "Restarts of the job after a failed or hung attempt (counted for the whole job, at most "
         "--max-restarts)"},
        {&m->attempts, true, "shardlm_launch_attempts_started_total",
         "Training attempts started (mpirun / srun of shardlm train)"},
        {&m->attempt, false, "shardlm_launch_attempt",
         "Number of the current (or last) attempt, 1-based; 0 before the first"},
        {&m->world, false, "shardlm_launch_world_size",
         "Ranks of the current (or last) attempt; 0 before the first"},
        {&m->nproc, false, "shardlm_launch_nproc", "Ranks of a full-size attempt (--nproc)"},
        {&m->max_restarts, false, "shardlm_launch_max_restarts",
         "Restarts allowed (--max-restarts)"},
        {&m->health_fail, true, "shardlm_launch_health_check_failures_total",
         "Preflight health checks that failed"},
        {&m->excluded, false, "shardlm_launch_excluded_hosts",
         "Hosts excluded (failed a health check or named in two failures)"},
        {&m->hb_time, false, "shardlm_launch_last_heartbeat_timestamp_seconds",
         "Unix time in the newest heartbeat record of the current attempt (written by every rank "
         "each step); 0 before the first"},
        {&m->hb_step, false, "shardlm_launch_heartbeat_step",
         "Highest step in the heartbeat records of the current attempt"},
        {&m->start_time, false, "shardlm_launch_start_time_seconds",
         "Unix time the launcher started"},
    };
    enum { N_BEFORE = 8, N_DEFS = sizeof defs / sizeof *defs };
    bool ok = add_metrics(m->reg, defs, N_BEFORE);
    slm_status st = add_families(m);
    ok &= add_metrics(m->reg, defs + N_BEFORE, N_DEFS - N_BEFORE);
    if (!st && !ok) st = slm_fail(SLM_E_ARG, "launch metrics: %s", slm_errmsg());
    if (!st) st = slm_metrics_server_start(addr, m->reg, &m->srv);
    if (st) {
        slm_metrics_free(m->reg);
        memset(m, 0, sizeof *m);
        return st;
    }
    slm_info("launch: metrics: serving http://%s/metrics", slm_metrics_server_addr(m->srv));
    return SLM_OK;
}

void lm_stop(void) {
    slm_metrics_server_stop(g_m.srv);
    slm_metrics_free(g_m.reg);
    memset(&g_m, 0, sizeof g_m);
}

void lm_state(int s) {
    for (int i = 0; i < N_STATES; i++)
        slm_metric_set(g_m.state[i], i == s ? 1 : 0);
}

void lm_host_excluded(const char *host, int n_hosts_excluded) {
    slm_metric_set(g_m.excluded, n_hosts_excluded);
    slm_metric *s = NULL;
    if (g_m.host_excluded && slm_metrics_series(g_m.host_excluded, &host, &s) == SLM_OK)
        slm_metric_set(s, 1);
}

// The attempt that ended: its series of shardlm_launch_last_exit_info goes to 1, the previous
// one to 0 (reasons are bounded to 160 bytes; one series per distinct result + reason).
void lm_exit(const char *result, const char *reason) {
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

// Whether /metrics is served (--metrics-addr given and the server started).
bool lm_serving(void) {
    return g_m.srv != NULL;
}

// The launch's constants, set once before the first attempt.
void lm_launch(int nproc, int max_restarts, double start_time) {
    slm_metric_set(g_m.nproc, nproc);
    slm_metric_set(g_m.max_restarts, max_restarts);
    slm_metric_set(g_m.start_time, start_time);
}

// Attempt n (1-based) starts with `world` ranks.
void lm_attempt(int n, int world) {
    slm_metric_inc(g_m.attempts, 1);
    slm_metric_set(g_m.attempt, n);
    slm_metric_set(g_m.world, world);
}

void lm_restart(void) {
    slm_metric_inc(g_m.restarts, 1);
}

void lm_health_failed(void) {
    slm_metric_inc(g_m.health_fail, 1);
}

// The newest heartbeat record's time and the highest step of the current attempt.
void lm_heartbeat(double time, int64_t step) {
    slm_metric_set(g_m.hb_time, time);
    slm_metric_set(g_m.hb_step, (double)step);
}
