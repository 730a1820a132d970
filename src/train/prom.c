// Prometheus metrics of a training run (train.h: slm_train_prom_*; the metric list with units is
// docs/observability.md). The hook updates the registry on the training thread after every
// step through handles made at on_start (no allocation, no lock per step); the /metrics server
// (metrics/) renders it on its own thread. Per-rank values (busy time, data wait, exposed
// communication, memory, CPU, checkpoint bytes) are all-gathered every --metrics-every steps at
// the same step on every rank; rank 0 derives min / max / median, the slowest rank and the
// stragglers from them.
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "train/train.h"
#include "train/train_internal.h"

// The per-rank vector all-gathered every `every` steps (means over the window where per step).
// Busy = wall time of an iteration (step to step) minus its collective waits.
// The V_DEV_* values are the rank's GPU counters (device.h slm_device_stats; NaN when it has none).
enum {
    V_BUSY,
    V_STEP,
    V_DATA,
    V_COMM,
    V_RSS,
    V_PEAK_RSS,
    V_CPU_S,
    V_CPU_CORES,
    V_CKPT_BYTES,
    V_DEV_MEM,
    V_DEV_UTIL,
    V_DEV_POWER,
    V_DEV_TEMP,
    V_DEV_ECC,
    NV
};

enum { PH_COMPUTE, PH_COMM, PH_DATA, PH_CKPT, N_PHASES };
static const char *const k_phase[N_PHASES] = {"compute", "comm", "data", "checkpoint"};

// Per rank series (index = rank).
typedef struct rank_series {
    slm_metric *busy, *data, *comm, *rss, *peak_rss, *cpu_s, *cpu_cores, *straggler, *events;
    // GPU gauges (registered only when some rank's device has counters: dev_gauges)
    slm_metric *dev_mem, *dev_peak, *dev_util, *dev_power, *dev_temp, *dev_ecc;
    double dev_peak_seen;
} rank_series;

struct slm_train_prom {
    slm_train_metrics_opts o;
    slm_metrics *reg;
    slm_metrics_server *srv;
    int rank, world;
    bool serving, active; // this rank serves; some rank serves (agreed at on_start)
    const slm_train_std_hooks *std;
    // global series
    slm_metric *step, *steps_planned, *tokens, *loss, *val_loss, *lr, *gnorm, *tps, *mfu;
    slm_metric *step_s, *phase[N_PHASES], *gathered, *reduced, *last_ts, *start_ts, *world_g;
    slm_metric *skipped, *nonfinite, *completed;
    slm_metric *ck_n, *ck_failed, *ck_bytes, *ck_dur, *ck_stall, *ck_last_step, *ck_last_ts;
    slm_metric *ck_every_s, *ck_every_steps;
    slm_metric *busy_min, *busy_max, *busy_median, *slowest, *n_stragglers;
    slm_metric_family *val_fam;
    rank_series *rs; // [world]
    slm_device *dev; // the model's device (counters sampled at each gather)
    bool dev_gauges; // some rank's device has counters: the shardlm_device_* series exist
    // window sums since the last gather (this rank)
    double w_busy, w_step, w_data, w_comm;
    int w_n;
    double cpu0, wall0;       // process CPU and wall time at the last gather
    double t_prev, wait_prev; // wall time and collective wait total at the last on_step
    double stall_seen;        // checkpoint stall total already attributed
    int64_t ck_last_seen;
    // Scrapes seen by the training thread (slm_metrics_server_requests at each step): the first
    // and last time the count changed, and the counts then. They bound the wait after a
    // completed run (slm_train_prom_free).
    uint64_t req_first, req_last;
    double t_req_first, t_req_last;
    bool linger; // the run completed: serve until one more scrape has read that
    double *vec, *all, *busy, *scratch; // [NV], [world * NV], [world], [world]
    int *streak, *newly;                // [world]
};

static double now_unix(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_seconds(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return NAN;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

// Resident set size now (/proc/self/statm, second field, in pages) and at peak (ru_maxrss, KiB).
static void rss_bytes(double *now, double *peak) {
    *now = NAN;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC); // open / read: no allocation
    if (fd >= 0) {
        char buf[128];
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        unsigned long long size, res;
        if (n > 0) {
            buf[n] = 0;
            if (sscanf(buf, "%llu %llu", &size, &res) == 2)
                *now = (double)res * (double)sysconf(_SC_PAGESIZE);
        }
    }
    struct rusage ru;
    *peak = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : NAN;
}

slm_status slm_train_prom_new(const slm_train_metrics_opts *o, slm_train_prom **out) {
    *out = NULL;
    slm_train_prom *p = slm_xcalloc(1, sizeof *p);
    p->o = *o;
    p->rank = slm_dist_rank();
    p->world = slm_dist_world();
    p->reg = slm_metrics_new();
    p->serving = o->addr && (p->rank == 0 || o->all_ranks);
    if (p->serving) {
        const char *addr = o->addr;
        char shifted[300];
        char host[256];
        int port = 0;
        slm_status st = slm_metrics_parse_addr(o->addr, host, sizeof host, &port);
        if (!st && o->all_ranks && port > 0 && p->rank > 0) { // PORT + rank
            if (port + p->rank > 65535)
                st = slm_fail(SLM_E_ARG,
                              "--metrics-addr %s with --metrics-all-ranks: rank %d's port %d "
                              "is above 65535",
                              o->addr, p->rank, port + p->rank);
            snprintf(shifted, sizeof shifted, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
                     port + p->rank);
            addr = shifted;
        }
        if (!st) st = slm_metrics_server_start(addr, p->reg, &p->srv);
        if (st) {
            slm_train_prom_free(p);
            return slm_fail_wrap(st, "--metrics-addr");
        }
        slm_info("metrics: serving http://%s/metrics", slm_metrics_server_addr(p->srv));
    }
    *out = p;
    return SLM_OK;
}

slm_metrics *slm_train_prom_registry(slm_train_prom *p) {
    return p->reg;
}

const char *slm_train_prom_addr(const slm_train_prom *p) {
    return p && p->srv ? slm_metrics_server_addr(p->srv) : NULL;
}

void slm_train_prom_free(slm_train_prom *p) {
    if (!p) return;
    // A completed run that Prometheus was scraping: answer one more scrape (it reads
    // shardlm_run_completed 1, so ShardlmNoProgress tells the finished job from a dead one),
    // waiting at most about two scrape intervals.
    double wait = slm_train_prom_linger_s(p), t0 = slm_time_s();
    uint64_t req0 = wait > 0 ? slm_metrics_server_requests(p->srv) : 0; // srv non-NULL then
    if (wait > 0) slm_info("metrics: serving until the next scrape (at most %.0f s)", wait);
    // A stop request (SIGTERM / SIGINT: a launcher tearing the job down) ends the wait.
    while (wait > 0 && slm_time_s() - t0 < wait && slm_metrics_server_requests(p->srv) == req0 &&
           !slm_stop_requested()) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    slm_metrics_server_stop(p->srv); // first: it renders the registry
    slm_metrics_free(p->reg);
    free(p->rs);
    free(p->vec), free(p->all), free(p->busy), free(p->scratch);
    free(p->streak), free(p->newly);
    free(p);
}

// ---------------------------------------------------------------------------------------------
// Stragglers

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int slm_train_stragglers(const double *busy, int W, double factor, double min_excess_s, int windows,
                         int *streak, int *newly, double *scratch, double *median_out) {
    memcpy(scratch, busy, (size_t)W * sizeof *scratch);
    qsort(scratch, (size_t)W, sizeof *scratch, cmp_double);
    double med = W % 2 ? scratch[W / 2] : 0.5 * (scratch[W / 2 - 1] + scratch[W / 2]);
    *median_out = med;
    int n = 0;
    for (int r = 0; r < W; r++) {
        if (med > 0 && busy[r] > factor * med && busy[r] - med >= min_excess_s) {
            if (++streak[r] == windows) newly[n++] = r;
        } else {
            streak[r] = 0;
        }
    }
    return n;
}

// ---------------------------------------------------------------------------------------------
// Registration (on_start)

// The GPU gauges per rank, as DCGM's exporter names them in spirit (NVML's counters of the
// rank's device, sampled at each gather).
// One per-rank family (label rank = 0 .. world-1) per table entry, each series stored at its
// offset in p->rs[rank].
typedef struct rank_metric {
    size_t off; // of the slm_metric * in rank_series
    slm_metric_type t;
    const char *name, *help;
} rank_metric;

static slm_status register_rank_table(slm_train_prom *p, const rank_metric *k, size_t n) {
    const char *rl = "rank";
    for (size_t i = 0; i < n; i++) {
        slm_metric_family *f;
        slm_status st =
            slm_metrics_family(p->reg, k[i].t, k[i].name, k[i].help, 1, &rl, 0, NULL, &f);
        for (int q = 0; !st && q < p->world; q++) {
            char rv[16];
            snprintf(rv, sizeof rv, "%d", q);
            const char *v = rv;
            st = slm_metrics_series(f, &v, (slm_metric **)((char *)&p->rs[q] + k[i].off));
        }
        if (st) return st;
    }
    return SLM_OK;
}

static slm_status register_device(slm_train_prom *p) {
    static const rank_metric k[] = {
        {offsetof(rank_series, dev_mem), SLM_METRIC_GAUGE, "shardlm_device_memory_used_bytes",
         "Device memory in use on the rank's GPU (all processes; NVML)."},
        {offsetof(rank_series, dev_peak), SLM_METRIC_GAUGE, "shardlm_device_memory_peak_bytes",
         "Highest device memory in use seen on the rank's GPU at a sample."},
        {offsetof(rank_series, dev_util), SLM_METRIC_GAUGE, "shardlm_device_utilization_ratio",
         "Fraction of the last NVML sample period the rank's GPU was busy."},
        {offsetof(rank_series, dev_power), SLM_METRIC_GAUGE, "shardlm_device_power_watts",
         "Board power draw of the rank's GPU."},
        {offsetof(rank_series, dev_temp), SLM_METRIC_GAUGE, "shardlm_device_temperature_celsius",
         "Temperature of the rank's GPU."},
        {offsetof(rank_series, dev_ecc), SLM_METRIC_GAUGE, "shardlm_device_ecc_uncorrected_errors",
         "Uncorrected ECC errors of the rank's GPU since the driver loaded (NaN: no ECC)."},
    };
    return register_rank_table(p, k, sizeof k / sizeof *k);
}

static slm_status register_all(slm_train_prom *p) {
    slm_metrics *r = p->reg;
#define G(field, name, help)                                                                       \
    if (!(p->field = slm_metrics_gauge(r, name, help))) return SLM_E_ARG
#define C(field, name, help)                                                                       \
    if (!(p->field = slm_metrics_counter(r, name, help))) return SLM_E_ARG
    G(step, "shardlm_step", "Last completed optimizer step (resumed steps included).");
    G(steps_planned, "shardlm_steps_planned", "Planned optimizer steps (--steps).");
    C(tokens, "shardlm_tokens_total",
      "Tokens trained on so far, all ranks (instruction data: non-padding).");
    G(loss, "shardlm_train_loss", "Training loss of the last step, nats per target token.");
    G(lr, "shardlm_learning_rate", "Learning rate of the last step.");
    G(gnorm, "shardlm_grad_norm", "Global L2 norm of the last step's gradient before clipping.");
    G(tps, "shardlm_tokens_per_second",
      "Tokens per second of the last step, all ranks (instruction data: non-padding).");
    G(mfu, "shardlm_mfu_ratio", "Model FLOPs utilisation of the last step (0..1 of the peak).");
    G(last_ts, "shardlm_last_step_timestamp_seconds",
      "Unix time when the last optimizer step completed.");
    G(start_ts, "shardlm_start_timestamp_seconds", "Unix time when training started.");
    G(world_g, "shardlm_world_size", "Ranks of the data-parallel world.");
    C(gathered, "shardlm_all_gathered_bytes_total",
      "Bytes received by FSDP parameter all-gathers on this rank.");
    C(reduced, "shardlm_reduce_scattered_bytes_total",
      "Bytes sent into gradient reduce-scatters and all-reduces on this rank.");
    C(skipped, "shardlm_skipped_steps_total", "Optimizer steps skipped (not applied).");
    C(nonfinite, "shardlm_nonfinite_steps_total",
      "Steps whose loss or gradient norm was not finite (skipped under --on-nonfinite skip, or "
      "the one that stopped the run).");
    G(completed, "shardlm_run_completed",
      "1 once the run ended as planned (--steps reached, or --max-minutes), else 0.");
    C(ck_n, "shardlm_checkpoints_total", "Checkpoints committed by this run.");
    C(ck_failed, "shardlm_checkpoint_failures_total", "Checkpoint saves that failed.");
    C(ck_bytes, "shardlm_checkpoint_bytes_total",
      "Rank-file bytes of the committed checkpoints, all ranks (updated at each gather).");
    G(ck_dur, "shardlm_checkpoint_duration_seconds",
      "Duration of the last committed checkpoint, from its start to its commit.");
    C(ck_stall, "shardlm_checkpoint_stall_seconds_total",
      "Training-thread time spent starting checkpoints and waiting for their copy.");
    G(ck_last_step, "shardlm_checkpoint_last_step", "Step of the last committed checkpoint.");
    G(ck_last_ts, "shardlm_checkpoint_last_timestamp_seconds",
      "Unix time of the last committed checkpoint (the start of training before the first).");
    G(ck_every_s, "shardlm_checkpoint_interval_seconds",
      "Configured time between checkpoints (--ckpt-every-minutes), 0 when off.");
    G(ck_every_steps, "shardlm_checkpoint_interval_steps",
      "Configured steps between checkpoints (--ckpt-every-steps), 0 when off.");
    G(busy_min, "shardlm_rank_busy_seconds_min", "Fastest rank's busy time per step (window).");
    G(busy_max, "shardlm_rank_busy_seconds_max", "Slowest rank's busy time per step (window).");
    G(busy_median, "shardlm_rank_busy_seconds_median", "Median busy time per step over ranks.");
    G(slowest, "shardlm_slowest_rank", "Rank with the largest busy time in the last window.");
    G(n_stragglers, "shardlm_stragglers",
      "Ranks flagged as stragglers now (busy time above --straggler-factor x the median for "
      "--straggler-windows gathers in a row).");
#undef G
#undef C
    // Step time and its split (this rank). Bounds from 1 ms to 5 min, about x2.5 apart.
    static const double b[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                               0.5,   1,      2.5,   5,    10,    25,   60,  300};
    int nb = (int)(sizeof b / sizeof *b);
    p->step_s = slm_metrics_histogram(r, "shardlm_step_seconds",
                                      "Wall time of optimizer steps on this rank (validation "
                                      "excluded).",
                                      nb, b);
    if (!p->step_s) return SLM_E_ARG;
    slm_metric_family *ph;
    const char *phl = "phase";
    slm_status st = slm_metrics_family(r, SLM_METRIC_HISTOGRAM, "shardlm_step_phase_seconds",
                                       "Step time on this rank split into compute, exposed "
                                       "communication (comm), data wait and checkpoint stall.",
                                       1, &phl, nb, b, &ph);
    for (int i = 0; !st && i < N_PHASES; i++)
        st = slm_metrics_series(ph, &k_phase[i], &p->phase[i]);
    if (st) return st;
    const char *vl = "split";
    st = slm_metrics_family(r, SLM_METRIC_GAUGE, "shardlm_val_loss",
                            "Validation loss of the last evaluation, nats per target token.", 1,
                            &vl, 0, NULL, &p->val_fam);
    if (st) return st;
    // per rank
    static const rank_metric k[] = {
        {offsetof(rank_series, busy), SLM_METRIC_GAUGE, "shardlm_rank_busy_seconds",
         "Mean busy time per step (iteration wall time minus collective waits) over the last "
         "gather window."},
        {offsetof(rank_series, data), SLM_METRIC_GAUGE, "shardlm_rank_data_wait_seconds",
         "Mean data wait per step over the last gather window."},
        {offsetof(rank_series, comm), SLM_METRIC_GAUGE, "shardlm_rank_comm_seconds",
         "Mean exposed communication per step over the last gather window."},
        {offsetof(rank_series, rss), SLM_METRIC_GAUGE, "shardlm_rss_bytes",
         "Resident set size of the rank's process."},
        {offsetof(rank_series, peak_rss), SLM_METRIC_GAUGE, "shardlm_peak_rss_bytes",
         "Peak resident set size of the rank's process."},
        {offsetof(rank_series, cpu_s), SLM_METRIC_COUNTER, "shardlm_process_cpu_seconds_total",
         "User and system CPU time of the rank's process."},
        {offsetof(rank_series, cpu_cores), SLM_METRIC_GAUGE, "shardlm_process_cpu_cores",
         "CPU utilisation of the rank's process over the last gather window, in cores."},
        {offsetof(rank_series, straggler), SLM_METRIC_GAUGE, "shardlm_straggler",
         "1 while the rank is flagged as a straggler, else 0."},
        {offsetof(rank_series, events), SLM_METRIC_COUNTER, "shardlm_straggler_events_total",
         "Times the rank was flagged as a straggler."},
    };
    p->rs = slm_xcalloc((size_t)p->world, sizeof *p->rs);
    st = register_rank_table(p, k, sizeof k / sizeof *k);
    if (st) return st;
    return p->dev_gauges ? register_device(p) : SLM_OK;
}

// ---------------------------------------------------------------------------------------------
// The hook

static slm_status prom_start(void *ctx, slm_trainer *tr) {
    slm_train_prom *p = ctx;
    int64_t any = p->o.addr != NULL;
    if (tr->W > 1)
        slm_dist_allreduce(&any, 1, SLM_DTYPE_I64, SLM_OP_MAX, "metrics: any rank serves");
    p->active = any != 0;
    if (!p->active) return SLM_OK;
    p->world = tr->W; // the trainer's world
    p->dev = tr->model.dev;
    slm_device_stats ds;
    slm_device_stats_read(p->dev, &ds);
    int64_t dev_any = ds.valid;
    if (tr->W > 1)
        slm_dist_allreduce(&dev_any, 1, SLM_DTYPE_I64, SLM_OP_MAX, "metrics: any GPU counters");
    p->dev_gauges = dev_any != 0;
    p->vec = slm_xcalloc(NV, sizeof *p->vec);
    p->all = slm_xcalloc((size_t)tr->W * NV, sizeof *p->all);
    p->busy = slm_xcalloc((size_t)tr->W, sizeof *p->busy);
    p->scratch = slm_xcalloc((size_t)tr->W, sizeof *p->scratch);
    p->streak = slm_xcalloc((size_t)tr->W, sizeof *p->streak);
    p->newly = slm_xcalloc((size_t)tr->W, sizeof *p->newly);
    slm_status st = register_all(p);
    if (st) return slm_fail_wrap(st, "metrics");
    const slm_train_opts *o = tr->o;
    double t = now_unix();
    slm_metric_set(p->start_ts, t);
    slm_metric_set(p->ck_last_ts, t);
    slm_metric_set(p->ck_last_step, -1);
    if (tr->resume_path && tr->step > 0) { // the checkpoint resumed is the last committed one
        slm_metric_set(p->ck_last_step, (double)tr->step);
        char *mf = slm_path_join(tr->resume_path, "manifest.json"); // written last at its commit
        struct stat sb;
        if (stat(mf, &sb) == 0)
            slm_metric_set(p->ck_last_ts,
                           (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec);
        free(mf);
    }
    slm_metric_set(p->world_g, tr->W);
    slm_metric_set(p->steps_planned, (double)o->steps);
    slm_metric_set(p->step, (double)tr->step);
    slm_metric_set(p->tokens, (double)tr->tokens_seen);
    slm_metric_set(p->ck_every_s, o->ckpt_every_minutes * 60.0);
    slm_metric_set(p->ck_every_steps, (double)o->ckpt_every_steps);
    p->cpu0 = cpu_seconds();
    p->wall0 = p->t_prev = slm_time_s();
    p->wait_prev = slm_dist_wait_seconds();
    p->ck_last_seen = -1;
    return SLM_OK;
}

// The checkpoint schedule's counters (the std checkpoint hook ran before this one).
static double ckpt_update(slm_train_prom *p, double *bytes_local) {
    *bytes_local = 0;
    slm_ckpt_sched *cs = p->std ? (slm_ckpt_sched *)p->std->ckpt : NULL;
    if (!cs) return 0;
    int64_t n, last, bytes;
    double stall_total, stall_max, dur;
    slm_ckpt_sched_stats(cs, &n, &stall_total, &stall_max);
    slm_ckpt_sched_io_stats(cs, &last, &bytes, &dur);
    *bytes_local = (double)bytes;
    slm_metric_set(p->ck_n, (double)n);
    slm_metric_set(p->ck_failed, (double)slm_ckpt_sched_n_failed(cs));
    slm_metric_set(p->ck_stall, stall_total);
    if (last >= 0 && last != p->ck_last_seen) {
        p->ck_last_seen = last;
        slm_metric_set(p->ck_last_step, (double)last);
        slm_metric_set(p->ck_last_ts, now_unix());
        slm_metric_set(p->ck_dur, dur);
    }
    double d = stall_total - p->stall_seen;
    p->stall_seen = stall_total;
    return d > 0 ? d : 0;
}

// Every rank: all-gather the window's per-rank vector; serving ranks publish it.
static void gather(slm_train_prom *p, int64_t step, double ck_bytes_local) {
    double n = p->w_n > 0 ? p->w_n : 1, cpu = cpu_seconds(), wall = slm_time_s();
    double *v = p->vec;
    v[V_BUSY] = p->w_busy / n;
    v[V_STEP] = p->w_step / n;
    v[V_DATA] = p->w_data / n;
    v[V_COMM] = p->w_comm / n;
    rss_bytes(&v[V_RSS], &v[V_PEAK_RSS]);
    v[V_CPU_S] = cpu;
    v[V_CPU_CORES] = wall > p->wall0 ? (cpu - p->cpu0) / (wall - p->wall0) : 0;
    v[V_CKPT_BYTES] = ck_bytes_local;
    slm_device_stats ds;
    slm_device_stats_read(p->dev, &ds);
    v[V_DEV_MEM] = ds.valid ? ds.mem_used_b : NAN;
    v[V_DEV_UTIL] = ds.valid ? ds.util_ratio : NAN;
    v[V_DEV_POWER] = ds.valid ? ds.power_w : NAN;
    v[V_DEV_TEMP] = ds.valid ? ds.temp_c : NAN;
    v[V_DEV_ECC] = ds.valid && ds.ecc_uncorrected >= 0 ? ds.ecc_uncorrected : NAN;
    p->cpu0 = cpu, p->wall0 = wall;
    p->w_busy = p->w_step = p->w_data = p->w_comm = 0;
    p->w_n = 0;
    int W = p->world;
    if (W > 1)
        slm_dist_allgather(v, p->all, NV, SLM_DTYPE_F64, "metrics: per-rank values");
    else
        memcpy(p->all, v, NV * sizeof *v);
    double lo = INFINITY, hi = -INFINITY, bytes = 0;
    int slowest = 0;
    for (int r = 0; r < W; r++) {
        const double *a = p->all + (size_t)r * NV;
        p->busy[r] = a[V_BUSY];
        if (a[V_BUSY] < lo) lo = a[V_BUSY];
        if (a[V_BUSY] > hi) hi = a[V_BUSY], slowest = r;
        bytes += a[V_CKPT_BYTES];
    }
    double med = 0;
    int n_new = slm_train_stragglers(p->busy, W, p->o.straggler_factor, SLM_STRAGGLER_MIN_EXCESS_S,
                                     p->o.straggler_windows, p->streak, p->newly, p->scratch, &med);
    int flagged = 0;
    for (int r = 0; r < W; r++)
        flagged += p->streak[r] >= p->o.straggler_windows;
    if (p->rank == 0)
        for (int i = 0; i < n_new; i++) {
            int r = p->newly[i];
            slm_warn("straggler: rank %d busy %.1f ms per step over the last %d windows of %d "
                     "steps (median of the ranks %.1f ms, factor %.3g) at step %lld",
                     r, 1e3 * p->busy[r], p->o.straggler_windows, p->o.every, 1e3 * med,
                     p->o.straggler_factor, (long long)step);
            char fields[256]; // the same in metrics.jsonl (docs/formats.md)
            snprintf(fields, sizeof fields,
                     "\"rank\":%d,\"busy_ms\":%.3f,\"median_ms\":%.3f,\"factor\":%.6g,"
                     "\"windows\":%d",
                     r, 1e3 * p->busy[r], 1e3 * med, p->o.straggler_factor, p->o.straggler_windows);
            slm_train_jsonl_event(p->std, "straggler", step, fields);
        }
    if (!p->serving) return;
    for (int r = 0; r < W; r++) {
        const double *a = p->all + (size_t)r * NV;
        rank_series *s = &p->rs[r];
        slm_metric_set(s->busy, a[V_BUSY]);
        slm_metric_set(s->data, a[V_DATA]);
        slm_metric_set(s->comm, a[V_COMM]);
        slm_metric_set(s->rss, a[V_RSS]);
        slm_metric_set(s->peak_rss, a[V_PEAK_RSS]);
        slm_metric_set(s->cpu_s, a[V_CPU_S]);
        slm_metric_set(s->cpu_cores, a[V_CPU_CORES]);
        slm_metric_set(s->straggler, p->streak[r] >= p->o.straggler_windows);
        if (!p->dev_gauges) continue;
        if (a[V_DEV_MEM] > s->dev_peak_seen) s->dev_peak_seen = a[V_DEV_MEM];
        slm_metric_set(s->dev_mem, a[V_DEV_MEM]);
        slm_metric_set(s->dev_peak, s->dev_peak_seen);
        slm_metric_set(s->dev_util, a[V_DEV_UTIL]);
        slm_metric_set(s->dev_power, a[V_DEV_POWER]);
        slm_metric_set(s->dev_temp, a[V_DEV_TEMP]);
        slm_metric_set(s->dev_ecc, a[V_DEV_ECC]);
    }
    for (int i = 0; i < n_new; i++)
        slm_metric_inc(p->rs[p->newly[i]].events, 1);
    slm_metric_set(p->busy_min, lo);
    slm_metric_set(p->busy_max, hi);
    slm_metric_set(p->busy_median, med);
    slm_metric_set(p->slowest, slowest);
    slm_metric_set(p->n_stragglers, flagged);
    slm_metric_set(p->ck_bytes, bytes);
}

static slm_status prom_step(void *ctx, slm_trainer *tr, const slm_step_metrics *m) {
    slm_train_prom *p = ctx;
    if (!p->active) return SLM_OK;
    slm_step_timing t;
    slm_trainer_step_timing(tr, &t);
    double ck_bytes;
    double stall = ckpt_update(p, &ck_bytes);
    double step_s = m->ms_per_step * 1e-3;
    double compute = step_s - t.data_s - t.comm_s;
    if (compute < 0) compute = 0;
    // Busy time: the whole iteration since the last call (the step, its validation, every
    // hook, whatever delays the rank between steps) minus the time it waited in collectives.
    // The ranks of a synchronous job take equally long per iteration; only the waits differ.
    double now = slm_time_s(), waited = slm_dist_wait_seconds();
    double busy = (now - p->t_prev) - (waited - p->wait_prev);
    p->t_prev = now, p->wait_prev = waited;
    p->w_busy += busy > 0 ? busy : 0;
    p->w_step += step_s;
    p->w_data += t.data_s;
    p->w_comm += t.comm_s;
    p->w_n++;
    if (p->serving) {
        slm_metric_set(p->step, (double)m->step);
        slm_metric_set(p->tokens, (double)m->tokens_seen);
        slm_metric_set(p->loss, m->loss);
        slm_metric_set(p->lr, m->lr);
        slm_metric_set(p->gnorm, m->grad_norm);
        slm_metric_set(p->tps, m->tokens_per_s);
        slm_metric_set(p->mfu, m->mfu);
        if (m->skipped) slm_metric_inc(p->skipped, 1);
        if (m->skipped && !m->no_target) slm_metric_inc(p->nonfinite, 1); // --on-nonfinite skip
        slm_metric_observe(p->step_s, step_s);
        slm_metric_observe(p->phase[PH_COMPUTE], compute);
        slm_metric_observe(p->phase[PH_COMM], t.comm_s);
        slm_metric_observe(p->phase[PH_DATA], t.data_s);
        slm_metric_observe(p->phase[PH_CKPT], stall);
        slm_metric_set(p->gathered, (double)t.bytes_gathered);
        slm_metric_set(p->reduced, (double)t.bytes_reduced);
        if (isfinite(m->val_loss)) {
            if (!p->val_loss) { // made at the first validation (set-up, not per step)
                const char *v = "val";
                slm_metrics_series(p->val_fam, &v, &p->val_loss);
            }
            slm_metric_set(p->val_loss, m->val_loss);
        }
    }
    if (m->step % p->o.every == 0 || m->step == m->total_steps) gather(p, m->step, ck_bytes);
    if (p->serving) {
        slm_metric_set(p->last_ts, now_unix()); // last: the step is fully recorded
        uint64_t req = slm_metrics_server_requests(p->srv);
        if (req != p->req_last) {
            if (!p->req_first) p->req_first = req, p->t_req_first = now;
            p->req_last = req, p->t_req_last = now;
        }
    }
    return SLM_OK;
}

static slm_status prom_finish(void *ctx, slm_trainer *tr, slm_status st) {
    slm_train_prom *p = ctx;
    if (!p->active) return SLM_OK;
    if (st == SLM_E_NUMERIC) slm_metric_inc(p->nonfinite, 1); // the step that stopped the run
    const slm_train_result *r = slm_trainer_result(tr);
    if (st == SLM_OK && !r->interrupted && p->serving) {
        slm_metric_set(p->completed, 1);
        p->linger = true;
    }
    return SLM_OK;
}

double slm_train_prom_linger_s(const slm_train_prom *p) {
    if (!p || !p->linger || !p->srv || !p->req_first) return 0;
    if (p->req_last == p->req_first) return SLM_TRAIN_PROM_LINGER_MAX_S; // interval unknown
    double every = (p->t_req_last - p->t_req_first) / (double)(p->req_last - p->req_first);
    double s = 2 * every + 1;
    return s < SLM_TRAIN_PROM_LINGER_MAX_S ? s : SLM_TRAIN_PROM_LINGER_MAX_S;
}

slm_status slm_train_add_prom_hook(slm_train_opts *o, slm_train_prom *p,
                                   const slm_train_std_hooks *std) {
    p->std = std;
    slm_train_hook h = {.name = "prometheus metrics",
                        .ctx = p,
                        .on_start = prom_start,
                        .on_step = prom_step,
                        .on_finish = prom_finish};
    return slm_train_attach(o, &h);
}
