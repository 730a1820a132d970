// shardlm healthcheck: the preflight checks of src/health/ on every rank (alone under mpirun,
// or run by `shardlm launch` before each attempt). Prints one line per rank and per measured
// link (rank 0), writes --report JSON, exits 3 when a check failed.
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cmd.h"
#include "dist/dist.h"
#include "health/health.h"
#include "model/model.h"

#define SLM_EXIT_HEALTH 3

typedef struct hc_args {
    size_t mem, bw, ckpt_bytes;
    int bw_reps;
    double min_gbps, timeout;
    const char *run_dir, *model, *report, *device;
} hc_args;

#define A(f) offsetof(hc_args, f)
static const slm_opt k_hc_opts[] = {
    {.name = "--mem",
     .type = SLM_OPT_SIZE,
     .off = A(mem),
     .meta = "SIZE",
     .help = "bytes each rank allocates, writes and reads back"},
    {.name = "--run-dir",
     .type = SLM_OPT_STRING,
     .off = A(run_dir),
     .meta = "DIR",
     .help = "run directory whose root and checkpoints/ must be writable (created if missing)",
     .flags = SLM_OPTF_NODEF},
    {.name = "--ckpt-bytes",
     .type = SLM_OPT_SIZE,
     .off = A(ckpt_bytes),
     .meta = "SIZE",
     .help = "free space checkpoints/ must have (default: from --model, two checkpoints of "
             "fp32 weights + AdamW m and v, 12 bytes per parameter each)",
     .flags = SLM_OPTF_NODEF},
    {.name = "--model",
     .type = SLM_OPT_STRING,
     .off = A(model),
     .meta = "SPEC",
     .help = "model preset or config.json, to estimate the checkpoint size",
     .flags = SLM_OPTF_NODEF},
    {.name = "--bw-bytes",
     .type = SLM_OPT_SIZE,
     .off = A(bw),
     .meta = "SIZE",
     .help = "all-reduce message size of the bandwidth test between each pair of hosts"},
    {.name = "--bw-reps",
     .type = SLM_OPT_INT,
     .off = A(bw_reps),
     .meta = "N",
     .help = "timed all-reduces per pair (the fastest counts)",
     .ilo = 1,
     .ihi = 1000},
    {.name = "--min-gbps",
     .type = SLM_OPT_DOUBLE,
     .off = A(min_gbps),
     .meta = "G",
     .help = "fail when a pair's all-reduce bus bandwidth is below G GB/s (0: report only)",
     .dlo = 0,
     .dhi = 1e6},
    {.name = "--device",
     .type = SLM_OPT_STRING,
     .off = A(device),
     .meta = "DEV",
     .help = "device the known-answer GEMM runs on: cpu, cuda or cuda:N (on a GPU: bf16 compute "
             "against fp64, and its uncorrected ECC errors through NVML)",
     .def = "cpu"},
    {.name = "--collective-timeout",
     .type = SLM_OPT_DOUBLE,
     .off = A(timeout),
     .meta = "S",
     .help = "bound on every collective wait in seconds (a dead peer aborts the job)",
     .dlo = 0,
     .dhi = 1e6,
     .flags = SLM_OPTF_LO_OPEN},
    {.name = "--report",
     .type = SLM_OPT_STRING,
     .off = A(report),
     .meta = "FILE",
     .help = "write the results as JSON (rank 0; format in docs/operations.md)",
     .flags = SLM_OPTF_NODEF},
    {.type = SLM_OPT_END},
};
#undef A

static const slm_cli k_hc_cli = {
    .cmd = "healthcheck",
    .usage = "usage: mpirun -np N shardlm healthcheck [--run-dir DIR] [--model SPEC] [options]\n"
             "Per rank: a fixed-input GEMM and one forward / backward of a tiny model against\n"
             "fp64 references within derived error bounds, bitwise agreement of ranks on the\n"
             "same CPU model and device, a memory test, the run directory writable with free\n"
             "space, uncorrected ECC errors of a GPU (--device cuda); across\n"
             "ranks: all-reduce / all-gather / reduce-scatter results and the all-reduce\n"
             "bandwidth between each pair of hosts. `shardlm launch` runs it before training.\n\n",
    .opts = k_hc_opts,
    .footer = "\nexit codes: 0 all checks passed, 1 runtime error, 2 usage error, 3 a check "
              "failed (the ranks and hosts are named)\n",
};

static void print_report(const slm_health_report *rep) {
    for (int i = 0; i < rep->world; i++) {
        const slm_health_rank *r = &rep->ranks[i];
        /* the comparison printed is the one that holds, so a failed bound reads "err > bound" */
        printf("health rank %d host %s: %s | gemm err %.2e %s %.2e | model err %.2e %s %.2e",
               r->rank, r->host, r->failed ? "FAILED" : "ok", r->gemm_err,
               r->gemm_err <= r->gemm_bound ? "<=" : ">", r->gemm_bound, r->model_err,
               r->model_err <= r->model_bound ? "<=" : ">", r->model_bound);
        if (r->free_bytes >= 0) {
            char b[32];
            printf(" | disk free %s (run dir)", slm_fmt_bytes(r->free_bytes, b));
        }
        if (r->failed) {
            printf(" | failed:");
            for (int b = 0; b < SLM_HEALTH_N_CHECKS; b++)
                if (r->failed & (1u << b)) printf(" %s", slm_health_check_name(b));
            printf(" | %s", r->msg);
        }
        printf(" | cpu %s", r->cpu);
        if (strcmp(r->device, "cpu") != 0) printf(" | device %s", r->device);
        if (r->ecc >= 0) printf(" | ECC uncorrected %.0f", r->ecc);
        printf("\n");
    }
    for (int k = 0; k < rep->n_links; k++) {
        const slm_health_link *l = &rep->links[k];
        printf("health link rank %d (%s) <-> rank %d (%s): all-reduce %.2f GB/s%s\n", l->rank_a,
               l->host_a, l->rank_b, l->host_b, l->gbps, l->slow ? " SLOW" : "");
    }
    if (rep->ok) {
        printf("health: all checks passed on %d rank(s)\n", rep->world);
    } else {
        printf("health: FAILED on");
        for (int i = 0; i < rep->world; i++)
            if (rep->ranks[i].failed)
                printf(" rank %d (host %s)", rep->ranks[i].rank, rep->ranks[i].host);
        for (int k = 0; k < rep->n_links; k++)
            if (rep->links[k].slow)
                printf(" link %s <-> %s", rep->links[k].host_a, rep->links[k].host_b);
        printf("\n");
    }
    fflush(stdout);
}

int slm_cmd_healthcheck(int argc, char **argv) {
    slm_health_opts ho;
    slm_health_opts_default(&ho);
    hc_args a = {.mem = ho.mem_bytes,
                 .bw = ho.bw_bytes,
                 .bw_reps = ho.bw_reps,
                 .timeout = ho.collective_timeout_s};
    slm_opt_seen seen;
    int rc = slm_opt_parse(&k_hc_cli, argc, argv, &a, &seen);
    if (rc >= 0) return rc;
    ho.mem_bytes = a.mem, ho.bw_bytes = a.bw, ho.bw_reps = a.bw_reps, ho.min_gbps = a.min_gbps;
    ho.collective_timeout_s = a.timeout, ho.run_dir = a.run_dir, ho.device = a.device;
    if (slm_opt_given(&k_hc_cli, &seen, "--ckpt-bytes")) {
        ho.ckpt_bytes = (double)a.ckpt_bytes;
    } else if (a.model) {
        slm_llama_config c;
        slm_status st = slm_llama_config_resolve(a.model, &c);
        if (st) {
            slm_error("healthcheck: --model %s: %s", a.model, slm_errmsg());
            return SLM_EXIT_USAGE;
        }
        ho.ckpt_bytes = 2.0 * 12.0 * (double)slm_llama_n_params(&c);
    }
    slm_status st = slm_dist_init(&argc, &argv);
    if (st) {
        slm_error("healthcheck: %s", slm_errmsg());
        return SLM_EXIT_ERROR;
    }
    slm_health_report rep;
    st = slm_health_run(&ho, &rep);
    if (st) {
        slm_error("healthcheck: %s", slm_errmsg());
        slm_dist_finalize();
        return slm_exit_code(st);
    }
    rc = rep.ok ? SLM_EXIT_OK : SLM_EXIT_HEALTH;
    if (slm_dist_rank() == 0) {
        print_report(&rep);
        if (a.report && (st = slm_health_write_json(&rep, a.report)) != SLM_OK) {
            slm_error("healthcheck: --report %s: %s", a.report, slm_errmsg());
            rc = SLM_EXIT_ERROR;
        }
    }
    slm_health_report_free(&rep);
    slm_dist_finalize();
    return rc;
}
