// Exact resume at the module level, independent of the trainer: a minimal training loop (loader
// batches, forward / backward, AdamW with the warmup + cosine LR, a trainer RNG that perturbs
// the targets) runs 20 steps straight, and separately 10 steps -> asynchronous checkpoint ->
// everything freed -> a fresh model (other seed) restored from the checkpoint (params, m, v,
// AdamW t, LR position, loader state, RNG) -> 10 more steps. Losses and the final params / m / v
// must be bitwise equal. The loader walks a small dataset across epoch boundaries.
#include "../data/data_test_util.h"
#include "ckpt/ckpt.h"
#include "fixtures.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

#define BATCH 2
#define SEQ 8
#define STEPS 20

static char *g_data;

typedef struct trainer {
    slm_llama model;
    float **m, **v;
    slm_decay_range **ranges;
    slm_loader *loader;
    slm_rng rng;
    int64_t step;
} trainer;

static void tr_init(trainer *t, uint64_t seed) {
    slm_llama_config c = slm_test_config(128, 16, 32, 2, 2, 1, 16, false);
    c.initializer_range = 0.1f;
    SLM_ASSERT(slm_llama_init(&t->model, &c, true) == SLM_OK);
    slm_llama_init_weights(&t->model, seed);
    slm_llama_set_shape(&t->model, BATCH, SEQ, false);
    int U = t->model.n_units;
    t->m = slm_xcalloc((size_t)U, sizeof *t->m);
    t->v = slm_xcalloc((size_t)U, sizeof *t->v);
    t->ranges = slm_xcalloc((size_t)U, sizeof *t->ranges);
    for (int u = 0; u < U; u++) {
        t->m[u] = slm_xcalloc((size_t)t->model.units[u].numel, 4);
        t->v[u] = slm_xcalloc((size_t)t->model.units[u].numel, 4);
        t->ranges[u] = slm_xcalloc((size_t)t->model.units[u].n_views, sizeof **t->ranges);
        for (int i = 0; i < t->model.units[u].n_views; i++) {
            const slm_param_view *pv = &t->model.units[u].views[i];
            t->ranges[u][i] =
                (slm_decay_range){pv->offset, pv->offset + pv->numel, pv->weight_decay};
        }
    }
    slm_loader_opts lo = {.dir = g_data,
                          .split = "train",
                          .T = SEQ,
                          .B_global = BATCH,
                          .rank = 0,
                          .world = 1,
                          .seed = 9,
                          .shuffle = true};
    SLM_ASSERT(slm_loader_open(&lo, &t->loader) == SLM_OK);
    slm_rng_seed(&t->rng, seed * 7 + 1);
    t->step = 0;
}

static void tr_free(trainer *t) {
    for (int u = 0; u < t->model.n_units; u++) {
        free(t->m[u]);
        free(t->v[u]);
        free(t->ranges[u]);
    }
    free(t->m);
    free(t->v);
    free(t->ranges);
    slm_loader_free(t->loader);
    slm_llama_free(&t->model);
}

static const slm_adamw_hparams k_h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};

// One step; the optimizer update comes after `fence` (an async save may still be copying).
static double tr_step(trainer *t, slm_ckpt_saver *fence) {
    int32_t win[BATCH * (SEQ + 1)], inp[BATCH * SEQ], tgt[BATCH * SEQ];
    slm_loader_next(t->loader, win);
    for (int b = 0; b < BATCH; b++)
        for (int i = 0; i < SEQ; i++) {
            inp[b * SEQ + i] = win[b * (SEQ + 1) + i];
            tgt[b * SEQ + i] = win[b * (SEQ + 1) + i + 1];
        }
    // the trainer's RNG: ignore one random target per step (a stand-in for dropout-like use)
    tgt[slm_rng_below(&t->rng, BATCH * SEQ)] = -1;
    slm_llama_zero_grad(&t->model);
    float loss = slm_llama_forward(&t->model, inp, tgt, BATCH, SEQ);
    slm_llama_backward(&t->model, 1.0f);
    slm_ckpt_saver_fence(fence);
    float lr = slm_lr_at(t->step, 3, STEPS, k_h.lr_peak, k_h.lr_peak / 10);
    for (int u = 0; u < t->model.n_units; u++)
        slm_adamw_step(NULL, t->model.params[u], t->model.grads[u], t->m[u], t->v[u],
                       t->model.units[u].numel, &k_h, lr, t->step + 1, t->ranges[u],
                       t->model.units[u].n_views);
    t->step++;
    return loss;
}

static slm_status tr_save(trainer *t, slm_ckpt_saver *s) {
    slm_ckpt_meta meta;
    slm_ckpt_meta_default(&meta, &t->model.cfg);
    meta.step = meta.opt_step = meta.lr_step = t->step;
    meta.adamw = k_h;
    meta.lr_warmup = 3;
    meta.lr_total = STEPS;
    meta.lr_min = k_h.lr_peak / 10;
    meta.loader = slm_loader_get_state(t->loader);
    meta.rng = t->rng;
    slm_ckpt_shard sh[8];
    for (int u = 0; u < t->model.n_units; u++)
        sh[u] = (slm_ckpt_shard){.begin = 0,
                                 .end = t->model.units[u].numel,
                                 .params = t->model.params[u],
                                 .m = t->m[u],
                                 .v = t->v[u]};
    return slm_ckpt_saver_save(s, &meta, t->model.units, t->model.n_units, sh);
}

static slm_status tr_restore(trainer *t, const char *path) {
    slm_ckpt *c = NULL;
    slm_status st = slm_ckpt_open(path, &c);
    if (!st) st = slm_ckpt_check_model(c, &t->model);
    for (int u = 0; !st && u < t->model.n_units; u++)
        st = slm_ckpt_read_range(c, u, 0, t->model.units[u].numel, t->model.params[u], t->m[u],
                                 t->v[u]);
    if (!st) {
        const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
        t->step = M->opt_step;
        t->rng = M->rng;
        st = slm_loader_set_state(t->loader, M->loader);
    }
    slm_ckpt_free(c);
    return st;
}

static void test_resume_bitwise(void) {
    char *root = slm_path_join(g_data, "ckpts");
    double straight[STEPS + 1], resumed[STEPS + 1];
    trainer a;
    tr_init(&a, 1);
    for (int s = 1; s <= STEPS; s++)
        straight[s] = tr_step(&a, NULL);

    trainer b;
    tr_init(&b, 1);
    slm_ckpt_saver_opts o = {.root = root, .rank = 0, .world = 1};
    slm_ckpt_saver *sv = NULL;
    CHECK_OK(slm_ckpt_saver_new(&o, &sv));
    for (int s = 1; s <= 10; s++) {
        resumed[s] = tr_step(&b, sv);
        if (s == 6 || s == 10) CHECK_OK(tr_save(&b, sv)); // async; 6 commits during step 7..
        CHECK_OK(slm_ckpt_saver_poll(sv));
    }
    // the save at 10 is pending: a step with its fence runs, then the trainer "dies"
    CHECK_OK(slm_ckpt_saver_finish(sv));
    slm_ckpt_saver_free(sv);
    tr_free(&b);

    trainer c;
    tr_init(&c, 12345); // other weights and RNG: everything must come from the checkpoint
    CHECK_OK(tr_restore(&c, root));
    CHECK_EQ_INT(c.step, 10);
    for (int s = 11; s <= STEPS; s++)
        resumed[s] = tr_step(&c, NULL);
    for (int s = 1; s <= STEPS; s++)
        CHECK_MSG(!memcmp(&straight[s], &resumed[s], sizeof(double)),
                  "step %d: loss %.17g straight vs %.17g resumed", s, straight[s], resumed[s]);
    for (int u = 0; u < a.model.n_units; u++) {
        size_t nb = (size_t)a.model.units[u].numel * 4;
        CHECK_MSG(!memcmp(a.model.params[u], c.model.params[u], nb) &&
                      !memcmp(a.m[u], c.m[u], nb) && !memcmp(a.v[u], c.v[u], nb),
                  "unit %d: final params / m / v differ", u);
    }
    slm_loader_state la = slm_loader_get_state(a.loader), lc = slm_loader_get_state(c.loader);
    CHECK(la.epoch == lc.epoch && la.pos == lc.pos && la.epoch >= 1);
    tr_free(&a);
    tr_free(&c);
    free(root);
}

int main(void) {
    g_data = tu_mkdtemp();
    const int64_t sizes[2] = {60, 55};
    if (tu_make_dataset(g_data, sizes, 2, 20, 128, 0)) {
        fprintf(stderr, "dataset: %s\n", slm_errmsg());
        return 1;
    }
    RUN(test_resume_bitwise);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_data);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_data);
    free(g_data);
    return TEST_SUMMARY();
}
