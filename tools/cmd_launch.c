// shardlm launch: the supervised training job (src/launch/launch.h). Parses the launcher's own
// options (before "--"), hands the train arguments (after "--") through, prints the attempts
// summary and returns the launcher's exit code.
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd.h"
#include "launch/launch.h"
#include "metrics/metrics.h"
#include "base/fault.h"

typedef struct launch_args {
    slm_launch_opts o;
    const char *mpi_args;
} launch_args;

// A duration: a number with an optional unit s, m, h or d (default seconds); > 0.
static slm_status parse_duration(const char *opt, const char *v, void *dst) {
    char *end = NULL;
    double x = strtod(v, &end);
    double mul = 1;
    if (end && *end) {
        if (!strcmp(end, "s"))
            mul = 1;
        else if (!strcmp(end, "m") || !strcmp(end, "min"))
            mul = 60;
        else if (!strcmp(end, "h"))
            mul = 3600;
        else if (!strcmp(end, "d"))
            mul = 86400;
        else
            mul = NAN;
    }
    if (end == v || !isfinite(x) || !isfinite(mul) || x <= 0)
        return slm_fail(SLM_E_ARG, "%s \"%s\": expected a duration > 0 such as 90, 90s, 30m, 2h",
                        opt, v);
    *(double *)dst = x * mul;
    return SLM_OK;
}

#define A(f) offsetof(launch_args, f)
static const slm_opt k_launch_opts[] = {
    {.name = "--nproc",
     .type = SLM_OPT_INT,
     .off = A(o.nproc),
     .meta = "N",
     .help = "ranks of the job (required)",
     .ilo = 1,
     .ihi = 1 << 20,
     .flags = SLM_OPTF_NODEF},
    {.name = "--hostfile",
     .type = SLM_OPT_STRING,
     .off = A(o.hostfile),
     .meta = "FILE",
     .help = "hosts, one a line: HOST slots=N (or HOST:N, or HOST for one slot); more slots "
             "than --nproc are spares",
     .flags = SLM_OPTF_NODEF,
     .group = 1},
    {.name = "--hosts",
     .type = SLM_OPT_STRING,
     .off = A(o.hosts),
     .meta = "H:S,...",
     .help = "hosts and slots inline: h1:2,h2:2 (default: this host, --nproc slots; inside a "
             "Slurm allocation: srun on its nodes)",
     .flags = SLM_OPTF_NODEF,
     .group = 1},
    {.name = "--min-nproc",
     .type = SLM_OPT_INT,
     .off = A(o.min_nproc),
     .meta = "M",
     .help = "smallest world a restart may use when hosts are excluded (the global batch is kept "
             "by scaling --grad-accum)",
     .ilo = 1,
     .ihi = 1 << 20,
     .def = "--nproc"},
    {.name = "--max-restarts",
     .type = SLM_OPT_INT,
     .off = A(o.max_restarts),
     .meta = "R",
     .help = "restarts after failures, counted for the whole job",
     .ilo = 0,
     .ihi = 100000},
    {.name = "--max-run",
     .type = SLM_OPT_CUSTOM,
     .off = A(o.max_run_s),
     .meta = "DURATION",
     .help = "stop after this long as if preempted: checkpoint, exit 75 (90s, 30m, 2h)",
     .parse = parse_duration,
     .def = "none"},
    {.name = "--hang-timeout",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.hang_timeout_s),
     .meta = "S",
     .help = "seconds without heartbeat progress on any rank that count as a hang (more than the "
             "longest step + validation + checkpoint)",
     .dlo = 0,
     .dhi = 1e7,
     .flags = SLM_OPTF_LO_OPEN},
    {.name = "--startup-timeout",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.startup_timeout_s),
     .meta = "S",
     .help = "an attempt's start-up (MPI, model init, checkpoint load: until the first heartbeat "
             "record) may take this long before it counts as a hang",
     .dlo = 0,
     .dhi = 1e7,
     .flags = SLM_OPTF_LO_OPEN,
     .def = "max(--hang-timeout, 120)"},
    {.name = "--preempt-grace",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.preempt_grace_s),
     .meta = "S",
     .help = "seconds the ranks get to checkpoint after a forwarded SIGTERM / SIGUSR1 or "
             "--max-run",
     .dlo = 0,
     .dhi = 1e7,
     .flags = SLM_OPTF_LO_OPEN},
    {.name = "--kill-grace",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.kill_grace_s),
     .meta = "S",
     .help = "seconds between SIGTERM and SIGKILL when a failed job is terminated",
     .dlo = 0,
     .dhi = 1e5},
    {.name = "--backoff",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.backoff_s),
     .meta = "S",
     .help = "wait before the first restart; doubles per restart up to --backoff-max",
     .dlo = 0,
     .dhi = 1e5},
    {.name = "--backoff-max",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.backoff_max_s),
     .meta = "S",
     .help = "longest wait between restarts",
     .dlo = 0,
     .dhi = 1e6},
    {.name = "--no-health-check",
     .type = SLM_OPT_FLAG,
     .off = A(o.no_health_check),
     .help = "skip the preflight `shardlm healthcheck` job before each attempt"},
    {.name = "--health-mem",
     .type = SLM_OPT_STRING,
     .off = A(o.health_mem),
     .meta = "SIZE",
     .help = "memory each rank's health check allocates and verifies",
     .def = "healthcheck's (256MiB)"},
    {.name = "--health-timeout",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.health_timeout_s),
     .meta = "S",
     .help = "bound on the health-check job",
     .dlo = 0,
     .dhi = 1e6,
     .flags = SLM_OPTF_LO_OPEN},
    {.name = "--mpirun",
     .type = SLM_OPT_STRING,
     .off = A(o.mpirun),
     .meta = "PROG",
     .help = "the MPI launcher (also used inside a Slurm allocation when given)",
     .def = "$MPIEXEC or mpirun"},
    {.name = "--mpi-args",
     .type = SLM_OPT_STRING,
     .off = A(mpi_args),
     .meta = "\"ARGS\"",
     .help = "extra launcher arguments, split at spaces (\"--mca btl tcp,self -x "
             "OMP_NUM_THREADS\")",
     .flags = SLM_OPTF_NODEF},
    {.name = "--metrics-addr",
     .type = SLM_OPT_CUSTOM,
     .off = A(o.metrics_addr),
     .meta = "HOST:PORT",
     .help = "the launcher serves its own /metrics (shardlm_launch_*: restarts, attempts, world "
             "size, health checks, excluded hosts, state, last heartbeat) on HOST:PORT; :PORT "
             "listens on 127.0.0.1, PORT 0 picks a free port (logged)",
     .parse = slm_opt_parse_metrics_addr,
     .def = "off"},
    {.name = "--metrics-linger",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.metrics_linger_s),
     .meta = "S",
     .help = "with --metrics-addr: keep serving /metrics S seconds after the job ended, so the "
             "last scrapes see the final state (done); SIGTERM ends the wait",
     .dlo = 0,
     .dhi = 1e6},
    {.type = SLM_OPT_END},
};
#undef A

static void launch_footer(FILE *f) {
    fprintf(f,
            "\nexit codes: %d success, %d failed after --max-restarts restarts, %d usage error, "
            "%d health check failed, %d deterministic start-up failure (not retried), %d "
            "preempted / --max-run reached (resumable: launch again)\n",
            SLM_LAUNCH_OK, SLM_LAUNCH_FAILED, SLM_LAUNCH_USAGE, SLM_LAUNCH_HEALTH,
            SLM_LAUNCH_DETERMINISTIC, SLM_LAUNCH_PREEMPTED);
}

static const slm_cli k_launch_cli = {
    .cmd = "launch",
    .usage =
        "usage: shardlm launch --nproc N [--hostfile F | --hosts h1:s,h2:s] [--min-nproc M]\n"
        "                      [--max-restarts R] [--max-run DURATION] [--hang-timeout S]\n"
        "                      [--preempt-grace S] [--no-health-check] [--metrics-addr H:P]\n"
        "                      -- <train arguments>\n"
        "Runs `shardlm train <train arguments> --resume auto --heartbeat-dir RUN_DIR/heartbeat`\n"
        "under mpirun (srun --mpi=pmix inside a Slurm allocation) after a preflight health\n"
        "check, supervises its exit status and heartbeats, restarts it from the newest valid\n"
        "checkpoint after a crash or hang (excluding failing hosts), forwards SIGTERM / SIGUSR1\n"
        "as a preemption, and writes RUN_DIR/attempts.json. docs/operations.md has the details.\n"
        "\n",
    .opts = k_launch_opts,
    .footer_fn = launch_footer,
};

int slm_cmd_launch(int argc, char **argv) {
    launch_args a;
    memset(&a, 0, sizeof a);
    slm_launch_opts_default(&a.o);
    int dd = argc;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--")) {
            dd = i;
            break;
        }
    slm_opt_seen seen;
    int rc = slm_opt_parse(&k_launch_cli, dd, argv, &a, &seen);
    if (rc >= 0) return rc;
    if (!slm_opt_given(&k_launch_cli, &seen, "--nproc")) {
        fprintf(stderr, "launch: --nproc N is required\n");
        return SLM_EXIT_USAGE;
    }
    if (dd >= argc - 1) {
        fprintf(stderr, "launch: give the train arguments after \"--\" (-- --data D --model M "
                        "--batch B --seq T --steps N --out RUN_DIR ...)\n");
        return SLM_EXIT_USAGE;
    }
    // SHARDLM_FAULT is the job's (exported to every rank): a bad value, or a fault naming a rank
    // beyond --nproc (it would never fire), is a usage error before anything starts.
    slm_fault_plan faults;
    slm_status fst = slm_fault_plan_from_env(&faults);
    if (!fst) fst = slm_fault_check_world(&faults, a.o.nproc);
    if (fst) {
        slm_error("launch: --nproc %d: %s", a.o.nproc, slm_errmsg());
        return SLM_EXIT_USAGE;
    }
    a.o.train_argc = argc - dd - 1;
    a.o.train_argv = argv + dd + 1;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "launch: cannot resolve /proc/self/exe\n");
        return SLM_EXIT_ERROR;
    }
    exe[n] = 0;
    a.o.exe = exe;
    char *margs = a.mpi_args ? slm_xstrdup(a.mpi_args) : NULL;
    const char *mv[256];
    int nm = 0;
    char *save = NULL;
    for (char *t = margs ? strtok_r(margs, " \t", &save) : NULL; t && nm < 256;
         t = strtok_r(NULL, " \t", &save))
        mv[nm++] = t;
    a.o.mpi_args = mv;
    a.o.n_mpi_args = nm;
    char *summary = NULL;
    rc = slm_launch_run(&a.o, &summary);
    if (summary) {
        printf("%s", summary);
        fflush(stdout);
    }
    free(summary);
    free(margs);
    return rc;
}
