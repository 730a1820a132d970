// Checkpoints under mpirun: every rank saves its FULL_SHARD-style padded 1/N range through the
// asynchronous saver (collective commit), then each rank loads (a) the full arrays and (b) its
// range under a different layout (N + 1 ranges), bitwise against the seeded values. A second
// save with HYBRID-style replicas (ranks >= N/2 hold copies and write nothing) must give the
// same arrays from N/2 files. Run with mpirun -n 2 / -n 3 (also a world of one).
#include "ckpt/ckpt_internal.h"
#include "dist/dist.h"
#include "fixtures.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static slm_llama g_m;
static float **g_full; // [U][3 * numel]: params, m, v of every unit (identical on all ranks)
static char g_root[256];
static int g_rank, g_world;

static void setup(void) {
    slm_llama_config c = slm_test_config(96, 16, 40, 2, 2, 1, 16, false);
    SLM_ASSERT(slm_llama_init(&g_m, &c, false) == SLM_OK);
    g_full = slm_xcalloc((size_t)g_m.n_units, sizeof *g_full);
    for (int u = 0; u < g_m.n_units; u++) {
        int64_t n = g_m.units[u].numel;
        g_full[u] = slm_xmalloc((size_t)n * 12);
        slm_llama_init_unit_weights(&g_m, 3, u, g_full[u]);
        for (int64_t i = 0; i < n; i++) {
            g_full[u][n + i] = g_full[u][i] * 0.25f;
            g_full[u][2 * n + i] = g_full[u][i] * g_full[u][i];
        }
    }
}

// Shards of `parts` equal padded pieces; this rank holds piece `idx`. Buffers owned by caller.
static void make_shards(int parts, int idx, slm_ckpt_shard *sh) {
    for (int u = 0; u < g_m.n_units; u++) {
        int64_t n = g_m.units[u].numel, per = (n + parts - 1) / parts, b = idx * per;
        float *buf = slm_xcalloc((size_t)per * 3, 4);
        for (int k = 0; k < 3; k++)
            for (int64_t i = b; i < b + per && i < n; i++)
                buf[k * per + i - b] = g_full[u][k * n + i];
        sh[u] = (slm_ckpt_shard){
            .begin = b, .end = b + per, .params = buf, .m = buf + per, .v = buf + 2 * per};
    }
}

static void free_shards(slm_ckpt_shard *sh) {
    for (int u = 0; u < g_m.n_units; u++)
        free(sh[u].params);
}

static int check_load(const char *dir, int expect_files) {
    slm_ckpt *c = NULL;
    if (slm_ckpt_open(dir, &c)) return 1;
    int bad = slm_ckpt_verify(c) != SLM_OK;
    bad |= slm_ckpt_get_meta(c)->world != g_world;
    (void)expect_files;
    int M = g_world + 1;
    for (int u = 0; u < g_m.n_units && !bad; u++) {
        int64_t n = g_m.units[u].numel;
        float *p = slm_xmalloc((size_t)n * 12);
        bad |= slm_ckpt_read_range(c, u, 0, n, p, p + n, p + 2 * n) != SLM_OK;
        bad |= memcmp(p, g_full[u], (size_t)n * 12) != 0;
        free(p);
        // a range of another layout: piece g_rank of M, padding included
        int64_t per = (n + M - 1) / M, b = g_rank * per;
        float *q = slm_xmalloc((size_t)per * 12);
        bad |= slm_ckpt_read_range(c, u, b, b + per, q, q + per, q + 2 * per) != SLM_OK;
        for (int k = 0; k < 3 && !bad; k++)
            for (int64_t i = b; i < b + per; i++) {
                float want = i < n ? g_full[u][k * n + i] : 0.0f;
                if (memcmp(&q[k * per + i - b], &want, 4)) {
                    bad = 1;
                    break;
                }
            }
        free(q);
    }
    if (bad) fprintf(stderr, "  rank %d: %s: load differs (%s)\n", g_rank, dir, slm_errmsg());
    slm_ckpt_free(c);
    return bad;
}

static void test_full_shard_save_load(void) {
    slm_ckpt_shard sh[16];
    make_shards(g_world, g_rank, sh);
    slm_ckpt_saver_opts o = {.root = g_root, .keep = 0, .rank = g_rank, .world = g_world};
    slm_ckpt_saver *s = NULL;
    CHECK_OK(slm_ckpt_saver_new(&o, &s));
    slm_ckpt_meta meta;
    slm_ckpt_meta_default(&meta, &g_m.cfg);
    meta.step = 5;
    snprintf(meta.strategy, sizeof meta.strategy, "FULL_SHARD");
    meta.shard_group_size = g_world;
    slm_status st = slm_ckpt_saver_save(s, &meta, g_m.units, g_m.n_units, sh);
    slm_ckpt_saver_fence(s);
    if (!st) st = slm_ckpt_saver_poll(s);
    if (!st) st = slm_ckpt_saver_finish(s);
    slm_ckpt_saver_free(s);
    free_shards(sh);
    CHECK_OK(st);
    char *d = slm_ckpt_step_dir(g_root, 5, false);
    int64_t bad = check_load(d, g_world);
    free(d);
    slm_dist_allreduce(&bad, 1, SLM_DTYPE_I64, SLM_OP_MAX, "test");
    CHECK_EQ_INT(bad, 0);
}

static void test_hybrid_replicas_write_once(void) {
    int G = g_world >= 2 ? g_world / 2 : 1; // shard group size; ranks >= G are replicas
    slm_ckpt_shard sh[16];
    make_shards(G, g_rank % G, sh);
    slm_ckpt_saver_opts o = {.root = g_root,
                             .sync = true,
                             .keep = 1,
                             .rank = g_rank,
                             .world = g_world,
                             .no_write = g_rank >= G};
    slm_ckpt_saver *s = NULL;
    CHECK_OK(slm_ckpt_saver_new(&o, &s));
    slm_ckpt_meta meta;
    slm_ckpt_meta_default(&meta, &g_m.cfg);
    meta.step = 6;
    snprintf(meta.strategy, sizeof meta.strategy, "HYBRID_SHARD");
    meta.shard_group_size = G;
    slm_status st = slm_ckpt_saver_save(s, &meta, g_m.units, g_m.n_units, sh);
    if (!st) st = slm_ckpt_saver_finish(s);
    slm_ckpt_saver_free(s);
    free_shards(sh);
    CHECK_OK(st);
    int64_t bad = check_load(g_root, G);
    // keep = 1: step 5 was deleted after step 6 committed
    char *d5 = slm_ckpt_step_dir(g_root, 5, false);
    bad |= slm_is_dir(d5);
    free(d5);
    slm_dist_allreduce(&bad, 1, SLM_DTYPE_I64, SLM_OP_MAX, "test");
    CHECK_EQ_INT(bad, 0);
}

int main(int argc, char **argv) {
    if (slm_dist_init(&argc, &argv)) {
        fprintf(stderr, "%s\n", slm_errmsg());
        return 1;
    }
    g_rank = slm_dist_rank();
    g_world = slm_dist_world();
    int64_t tag = (int64_t)getpid();
    slm_dist_bcast(&tag, 1, SLM_DTYPE_I64, 0, "tag");
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_root, sizeof g_root, "%s/slm_test_ckpt_mpi_%lld", base, (long long)tag);
    setup();
    RUN(test_full_shard_save_load);
    RUN(test_hybrid_replicas_write_once);
    slm_dist_barrier("end");
    if (g_rank == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_root);
    }
    for (int u = 0; u < g_m.n_units; u++)
        free(g_full[u]);
    free(g_full);
    slm_llama_free(&g_m);
    int rc = TEST_SUMMARY();
    slm_dist_finalize();
    return rc;
}
