// Training on the CUDA device (issue 22, gpu_check.sh items 2 and 3), through the same model,
// FSDP (a world of one) and AdamW code as the trainer, against the CPU device's bf16 compute:
//  1. eight steps of a small Llama (2 blocks, GQA, untied) on seeded batches: every step's loss
//     on the GPU within 2e-2 relative of the CPU's (the bound test_train_ref states against
//     PyTorch's autocast: both sides round the same operands to bf16; they differ in fp32
//     accumulation order, which grows over steps), and the final weights within 2e-2 relative
//     in the RMS sense;
//  2. the same GPU run twice: every loss and every final weight bitwise equal (determinism);
//  3. the training state across devices: 4 steps on one device, masters and AdamW m / v read to
//     the host (slm_fsdp_shard_read: what a checkpoint stores) and written into a fresh run on
//     the other device (slm_fsdp_shard_write: what a resume does), 4 more steps there: the losses
//     of steps 5-8 within the bound of the uninterrupted run's, GPU -> CPU and CPU -> GPU.
// Exit 77 (skip) without a GPU. SLM_GPU_TRAIN_DEVICE=cpu runs the "GPU" side on the CPU device
// too, which checks this harness on a machine without a GPU (every comparison is then exact).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "device/device.h"
#include "fixtures.h"
#include "fsdp/fsdp.h"
#include "model/model.h"
#include "test.h"

enum { STEPS = 8, HALF = 4, B = 4, T = 32 };
#define BOUND 2e-2

// The bound of a comparison: with SLM_GPU_TRAIN_DEVICE=cpu both sides are the CPU device and
// must agree bit for bit (that is the harness's own check: state transfer complete, same data).
static double bound(void);

static slm_device *g_gpu;
static slm_llama_config g_cfg;

static double bound(void) {
    return slm_device_kind_of(g_gpu) == SLM_DEVICE_CPU ? 0.0 : BOUND;
}

typedef struct run {
    slm_llama m;
    slm_fsdp f;
} run;

static void run_open(run *r, slm_device *d) {
    memset(r, 0, sizeof *r);
    if (slm_llama_init_on(&r->m, d, &g_cfg, false)) slm_fatal("init: %s", slm_errmsg());
    r->m.bf16_compute = true;
    slm_fsdp_opts o;
    slm_fsdp_opts_default(&o);
    slm_fsdp_opts_for_world(&o, 1);
    if (slm_fsdp_init(&r->f, &r->m, &o, 1234)) slm_fatal("fsdp: %s", slm_errmsg());
    slm_llama_set_shape(&r->m, B, T, false);
}

static void run_close(run *r) {
    slm_fsdp_free(&r->f);
    slm_llama_free(&r->m);
}

// Step s's batch: tokens [B, T + 1], each row a learnable sequence t' = (5 t + 3) mod V from a
// start drawn from a stream seeded by s (the same on every device).
static float train_step(run *r, int s) {
    int32_t tok[B * (T + 1)], inp[B * T], tgt[B * T];
    slm_rng g;
    slm_rng_seed(&g, 99 + (uint64_t)s);
    for (int b = 0; b < B; b++) {
        int32_t *row = tok + b * (T + 1);
        row[0] = (int32_t)slm_rng_below(&g, (uint64_t)g_cfg.vocab_size);
        for (int t = 1; t <= T; t++)
            row[t] = (5 * row[t - 1] + 3) % g_cfg.vocab_size;
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            inp[b * T + t] = tok[b * (T + 1) + t], tgt[b * T + t] = tok[b * (T + 1) + t + 1];
    slm_adamw_hparams h = {
        .lr_peak = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    slm_fsdp_zero_grad(&r->f);
    float loss = slm_llama_forward(&r->m, inp, tgt, B, T);
    slm_llama_backward(&r->m, 1.0f);
    slm_fsdp_sync_grads(&r->f);
    slm_fsdp_clip_grad_norm(&r->f, 1.0);
    slm_fsdp_optimizer_step(&r->f, &h, h.lr_peak);
    return loss;
}

// The whole state of a run on the host: per unit, masters then m then v of its shard.
static float *state_out(run *r, int64_t *n_out) {
    int64_t n = 0;
    for (int u = 0; u < r->m.n_units; u++) {
        int64_t b, e;
        slm_fsdp_shard_range(&r->f, u, &b, &e);
        n += 3 * (e - b);
    }
    float *x = slm_xmalloc((size_t)n * sizeof(float)), *p = x;
    for (int u = 0; u < r->m.n_units; u++) {
        int64_t b, e;
        slm_fsdp_shard_range(&r->f, u, &b, &e);
        for (int w = 0; w < 3; w++, p += e - b)
            slm_fsdp_shard_read(&r->f, u, (slm_fsdp_state)w, 0, e - b, p);
    }
    *n_out = n;
    return x;
}

static void state_in(run *r, const float *x, int64_t steps_done) {
    for (int u = 0; u < r->m.n_units; u++) {
        int64_t b, e;
        slm_fsdp_shard_range(&r->f, u, &b, &e);
        for (int w = 0; w < 3; w++, x += e - b)
            slm_fsdp_shard_write(&r->f, u, (slm_fsdp_state)w, 0, e - b, x);
    }
    slm_fsdp_set_steps_done(&r->f, steps_done);
}

// STEPS steps on d, losses into loss[], the final state returned (host).
static float *train(slm_device *d, float *loss, int64_t *n) {
    run r;
    run_open(&r, d);
    for (int s = 0; s < STEPS; s++)
        loss[s] = train_step(&r, s);
    float *st = state_out(&r, n);
    run_close(&r);
    return st;
}

static float g_cpu_loss[STEPS], g_gpu_loss[STEPS];
static float *g_cpu_state, *g_gpu_state;
static int64_t g_n;

static void test_gpu_vs_cpu(void) {
    int64_t n2 = 0;
    g_cpu_state = train(slm_device_cpu(), g_cpu_loss, &g_n);
    g_gpu_state = train(g_gpu, g_gpu_loss, &n2);
    CHECK_EQ_INT(n2, g_n);
    printf("step | CPU bf16 loss | %s loss | rel diff\n", slm_device_describe(g_gpu));
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs((double)g_gpu_loss[s] - g_cpu_loss[s]) / fabs((double)g_cpu_loss[s]);
        printf("%4d | %.6f | %.6f | %.2e\n", s + 1, g_cpu_loss[s], g_gpu_loss[s], rel);
        CHECK_MSG(isfinite(g_gpu_loss[s]) && rel <= bound(), "step %d: GPU %.6f vs CPU %.6f", s + 1,
                  g_gpu_loss[s], g_cpu_loss[s]);
    }
    CHECK(g_gpu_loss[STEPS - 1] < g_gpu_loss[0]); // it trains
    double d2 = 0, c2 = 0;
    for (int64_t i = 0; i < g_n; i++) {
        double dd = (double)g_gpu_state[i] - g_cpu_state[i];
        d2 += dd * dd, c2 += (double)g_cpu_state[i] * g_cpu_state[i];
    }
    printf("final state: relative RMS difference %.2e over %lld values\n", sqrt(d2 / c2),
           (long long)g_n);
    CHECK_MSG(sqrt(d2 / c2) <= bound(), "final state differs: relative RMS %.3g", sqrt(d2 / c2));
}

static void test_gpu_repeat(void) {
    float loss[STEPS];
    int64_t n = 0;
    float *st = train(g_gpu, loss, &n);
    CHECK_MSG(memcmp(loss, g_gpu_loss, sizeof loss) == 0, "GPU losses not bitwise repeatable");
    CHECK_MSG(n == g_n && memcmp(st, g_gpu_state, (size_t)n * sizeof(float)) == 0,
              "GPU final state not bitwise repeatable");
    free(st);
}

// HALF steps on `a`, the state moved to a fresh run on `b`, the rest there.
static void cross(slm_device *a, slm_device *b, const float *ref_loss, const char *what) {
    run r;
    run_open(&r, a);
    for (int s = 0; s < HALF; s++)
        train_step(&r, s);
    int64_t n = 0;
    float *st = state_out(&r, &n);
    run_close(&r);
    run_open(&r, b);
    state_in(&r, st, HALF);
    for (int s = HALF; s < STEPS; s++) {
        float l = train_step(&r, s);
        double rel = fabs((double)l - ref_loss[s]) / fabs((double)ref_loss[s]);
        printf("%s step %d: %.6f vs uninterrupted %.6f (rel %.2e)\n", what, s + 1, l, ref_loss[s],
               rel);
        CHECK_MSG(rel <= bound(), "%s: step %d loss %.6f vs %.6f", what, s + 1, l, ref_loss[s]);
    }
    run_close(&r);
    free(st);
}

static void test_cross_device(void) {
    cross(g_gpu, slm_device_cpu(), g_gpu_loss, "GPU -> CPU");
    cross(slm_device_cpu(), g_gpu, g_cpu_loss, "CPU -> GPU");
}

int main(void) {
    const char *as = getenv("SLM_GPU_TRAIN_DEVICE");
    slm_status st = slm_device_open(as ? as : "cuda:0", &g_gpu);
    if (st == SLM_E_UNSUPPORTED) {
        printf("SKIP: %s\n", slm_errmsg());
        return 77;
    }
    if (st) {
        fprintf(stderr, "device: %s\n", slm_errmsg());
        return 1;
    }
    g_cfg = slm_test_config(512, 64, 160, 2, 4, 2, T, false);
    RUN(test_gpu_vs_cpu);
    RUN(test_gpu_repeat);
    RUN(test_cross_device);
    free(g_cpu_state), free(g_gpu_state);
    slm_device_close(g_gpu);
    return TEST_SUMMARY();
}
