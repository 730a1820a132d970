// FSDP training-step benchmark (not a test): a preset model on uniform random tokens, one
// optimizer step = forward + backward of B_local x T per rank, global-norm clipping, AdamW on
// the shards. Rank 0 prints one key=value line:
//   state_bytes    per-rank fp32 master + grad + AdamW m, v shards (max over ranks)
//   peak_bytes     state + the most gathered-parameter / full-gradient / staging bytes at once
//   rss_mib        peak resident set size (max over ranks)
//   tok_s          global target tokens per second (B_local x T x N / median step time)
//   exposed_ms     time per step blocked waiting on collectives (mean over ranks, median step)
//   comm_mib       MiB all-gathered + MiB reduced per step and rank
// Usage: mpirun -np N bench_fsdp [--model tiny] [--sharding S] [--shard-group-size G]
//        [--param-dtype D] [--reduce-dtype D] [--batch B_LOCAL] [--seq T] [--steps S]
//        [--threads K] [--limit-all-gathers K] [--no-prefetch] [--progress-thread POLL_US]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "device/device.h"
#include "dist/dist.h"
#include "fsdp/fsdp.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(void) {
    fprintf(stderr, "bench_fsdp: %s\n", slm_errmsg());
    slm_dist_finalize();
    exit(2);
}

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++) // must precede MPI init (thread level)
        if (!strcmp(argv[i], "--progress-thread"))
            slm_dist_request_progress_thread(atof(argv[i + 1]));
    if (slm_dist_init(&argc, &argv)) die();
    const char *model = "tiny";
    int B = 8, T = 256, steps = 6, threads = 1;
    slm_fsdp_opts fo;
    slm_fsdp_opts_default(&fo);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(o, "--no-prefetch")) {
            fo.forward_prefetch = fo.backward_prefetch = false;
            continue;
        }
        i++;
        if (!strcmp(o, "--model"))
            model = v;
        else if (!strcmp(o, "--sharding")) {
            if (slm_sharding_parse(v, &fo.sharding)) die();
        } else if (!strcmp(o, "--shard-group-size"))
            fo.shard_group_size = atoi(v);
        else if (!strcmp(o, "--param-dtype")) {
            if (slm_precision_parse(o, v, &fo.param_dtype)) die();
        } else if (!strcmp(o, "--reduce-dtype")) {
            if (slm_precision_parse(o, v, &fo.reduce_dtype)) die();
        } else if (!strcmp(o, "--batch"))
            B = atoi(v);
        else if (!strcmp(o, "--seq"))
            T = atoi(v);
        else if (!strcmp(o, "--steps"))
            steps = atoi(v);
        else if (!strcmp(o, "--threads"))
            threads = atoi(v);
        else if (!strcmp(o, "--limit-all-gathers"))
            fo.limit_all_gathers = atoi(v);
        else if (!strcmp(o, "--progress-thread"))
            continue; // handled before init
        else {
            slm_fail(SLM_E_ARG, "unknown option %s", o);
            die();
        }
    }
    slm_device_set_threads(NULL, threads); // the CPU device's compute threads
    int N = slm_dist_world(), R = slm_dist_rank();
    slm_llama_config cfg;
    if (slm_llama_config_preset(model, &cfg)) die();
    slm_llama m;
    if (slm_llama_init(&m, &cfg, false)) die();
    slm_fsdp f;
    if (slm_fsdp_init(&f, &m, &fo, 1337)) die();
    slm_llama_set_shape(&m, B, T, false);
    int32_t *inp = slm_xmalloc(sizeof(int32_t) * (size_t)B * T);
    int32_t *tgt = slm_xmalloc(sizeof(int32_t) * (size_t)B * T);
    slm_rng rng;
    slm_rng_seed(&rng, 99 + (uint64_t)R);
    slm_adamw_hparams h = {
        .lr_peak = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    double *dt = calloc((size_t)steps, sizeof(double)), *ex = calloc((size_t)steps, sizeof(double));
    double comm_mib = 0;
    for (int s = 0; s < steps; s++) {
        for (int64_t i = 0; i < (int64_t)B * T; i++) {
            inp[i] = (int32_t)slm_rng_below(&rng, (uint64_t)cfg.vocab_size);
            tgt[i] = (int32_t)slm_rng_below(&rng, (uint64_t)cfg.vocab_size);
        }
        slm_dist_barrier("bench step start");
        slm_fsdp_reset_stats(&f);
        double t0 = slm_time_s();
        slm_fsdp_zero_grad(&f);
        slm_llama_forward(&m, inp, tgt, B, T);
        slm_llama_backward(&m, 1.0f / (float)N);
        slm_fsdp_clip_grad_norm(&f, 1.0);
        slm_fsdp_optimizer_step(&f, &h, 3e-4f);
        double d = slm_time_s() - t0;
        slm_dist_allreduce(&d, 1, SLM_DTYPE_F64, SLM_OP_MAX, "bench time");
        slm_fsdp_stats fs = slm_fsdp_get_stats(&f);
        double e = fs.exposed_comm_s / N;
        slm_dist_allreduce(&e, 1, SLM_DTYPE_F64, SLM_OP_SUM, "bench exposed");
        dt[s] = d;
        ex[s] = e;
        comm_mib = (double)(fs.bytes_gathered + fs.bytes_reduced) / 1048576.0;
    }
    // median over the steps after the first (first-touch page faults, thread start-up)
    int n = steps > 1 ? steps - 1 : 1;
    double *d1 = dt + (steps > 1), *e1 = ex + (steps > 1);
    qsort(d1, (size_t)n, sizeof(double), cmp_d);
    qsort(e1, (size_t)n, sizeof(double), cmp_d);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss / 1024.0;
    double state = (double)slm_fsdp_state_bytes(&f), peak = (double)slm_fsdp_peak_bytes(&f);
    slm_dist_allreduce(&rss, 1, SLM_DTYPE_F64, SLM_OP_MAX, "bench rss");
    slm_dist_allreduce(&state, 1, SLM_DTYPE_F64, SLM_OP_MAX, "bench state");
    slm_dist_allreduce(&peak, 1, SLM_DTYPE_F64, SLM_OP_MAX, "bench peak");
    if (R == 0)
        printf("model=%s sharding=%s N=%d S=%d threads=%d B_local=%d T=%d param=%s reduce=%s "
               "state_bytes=%.0f peak_bytes=%.0f rss_mib=%.1f tok_s=%.1f step_ms=%.1f "
               "exposed_ms=%.2f comm_mib=%.2f\n",
               model, slm_sharding_name(fo.sharding), N, slm_fsdp_group_size(&f), threads, B, T,
               fo.param_dtype ? "bf16" : "fp32", fo.reduce_dtype ? "bf16" : "fp32", state, peak,
               rss, (double)B * T * N / d1[n / 2], d1[n / 2] * 1e3, e1[n / 2] * 1e3, comm_mib);
    free(dt), free(ex), free(inp), free(tgt);
    slm_fsdp_free(&f);
    slm_llama_free(&m);
    slm_dist_finalize();
    return 0;
}
