// Checkpoint format tests: save/load round trip (bitwise), meta round trip, resharding N -> M
// ranges against the full arrays, retention, crash leftovers, and every corruption case
// (truncated / flipped / missing rank file, wrong model, unsupported version) -> clean error.
#include "ckpt/ckpt_internal.h"
#include "test.h"

#include <fcntl.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[256];
static int g_vocab = 64, g_hidden = 16; // test_reshard_big raises them (files > 1 chunk)

static void small_cfg(slm_llama_config *c) {
    memset(c, 0, sizeof *c);
    c->vocab_size = g_vocab;
    c->hidden_size = g_hidden;
    c->intermediate_size = 40;
    c->num_hidden_layers = 2;
    c->num_attention_heads = 2;
    c->num_key_value_heads = 1;
    c->max_position_embeddings = 32;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->tie_word_embeddings = false;
    c->initializer_range = 0.02f;
}

// A model with random params and random AdamW moments m, v (owned arrays per unit).
typedef struct state {
    slm_llama model;
    float **m, **v;
} state;

static void state_init(state *s, uint64_t seed) {
    slm_llama_config c;
    small_cfg(&c);
    SLM_ASSERT(slm_llama_init(&s->model, &c, true) == SLM_OK);
    slm_llama_init_weights(&s->model, seed);
    s->m = slm_xcalloc((size_t)s->model.n_units, sizeof(float *));
    s->v = slm_xcalloc((size_t)s->model.n_units, sizeof(float *));
    slm_rng r;
    slm_rng_seed(&r, seed ^ 77);
    for (int u = 0; u < s->model.n_units; u++) {
        int64_t n = s->model.units[u].numel;
        s->m[u] = slm_xmalloc((size_t)n * 4);
        s->v[u] = slm_xmalloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) {
            s->m[u][i] = slm_rng_normal(&r);
            s->v[u][i] = slm_rng_uniform(&r);
        }
    }
}

static void state_free(state *s) {
    for (int u = 0; u < s->model.n_units; u++) {
        free(s->m[u]);
        free(s->v[u]);
    }
    free(s->m);
    free(s->v);
    slm_llama_free(&s->model);
}

static void full_shards(state *s, slm_ckpt_shard *sh) {
    for (int u = 0; u < s->model.n_units; u++)
        sh[u] = (slm_ckpt_shard){.begin = 0,
                                 .end = s->model.units[u].numel,
                                 .params = s->model.params[u],
                                 .m = s->m[u],
                                 .v = s->v[u]};
}

static void meta_for(slm_ckpt_meta *meta, const state *s, int64_t step) {
    slm_ckpt_meta_default(meta, &s->model.cfg);
    meta->step = step;
    meta->tokens_seen = step * 1000 + 7;
    meta->adamw = (slm_adamw_hparams){3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    meta->opt_step = step;
    meta->lr_step = step;
    meta->lr_warmup = 5;
    meta->lr_total = 100;
    meta->lr_min = 3e-5f;
    meta->loader = (slm_loader_state){0xdeadbeefcafef00dull, 2, 12345};
    slm_rng_seed(&meta->rng, (uint64_t)step * 31 + 1);
    meta->has_tokenizer = true;
    meta->tokenizer_xxh64 = 0x0123456789abcdefull;
    snprintf(meta->tokenizer_file, sizeof meta->tokenizer_file, "tokenizer.json");
}

static char *root_dir(const char *name) {
    char *d = slm_path_join(g_tmp, name);
    slm_ckpt_rmdir(d); // flat leftovers only; each test uses its own name
    return d;
}

static slm_status save_one(const char *root, state *s, int64_t step, bool sync, int keep) {
    slm_ckpt_saver_opts o = {.root = root, .sync = sync, .keep = keep, .rank = 0, .world = 1};
    slm_ckpt_saver *sv = NULL;
    slm_status st = slm_ckpt_saver_new(&o, &sv);
    if (st) return st;
    slm_ckpt_shard sh[8];
    full_shards(s, sh);
    slm_ckpt_meta meta;
    meta_for(&meta, s, step);
    st = slm_ckpt_saver_save(sv, &meta, s->model.units, s->model.n_units, sh);
    if (!st) st = slm_ckpt_saver_finish(sv);
    slm_ckpt_saver_free(sv);
    return st;
}

static int cmp_bits(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, (size_t)n * 4);
}

static void test_roundtrip_sync_and_async(void) {
    for (int mode = 0; mode < 2; mode++) {
        char *root = root_dir(mode ? "rt_async" : "rt_sync");
        state s;
        state_init(&s, 42);
        CHECK_OK(save_one(root, &s, 1200, mode == 0, 0));
        slm_ckpt *c = NULL;
        CHECK_OK(slm_ckpt_open(root, &c));
        CHECK_OK(slm_ckpt_verify(c));
        CHECK_OK(slm_ckpt_check_model(c, &s.model));
        const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
        slm_ckpt_meta want;
        meta_for(&want, &s, 1200);
        CHECK_EQ_INT(M->step, 1200);
        CHECK_EQ_INT(M->tokens_seen, want.tokens_seen);
        CHECK_EQ_INT(M->opt_step, 1200);
        CHECK_EQ_INT(M->lr_warmup, 5);
        CHECK_EQ_INT(M->lr_total, 100);
        CHECK(M->lr_min == want.lr_min && M->adamw.lr_peak == want.adamw.lr_peak &&
              M->adamw.beta2 == want.adamw.beta2 && M->adamw.eps == want.adamw.eps &&
              M->adamw.weight_decay == want.adamw.weight_decay);
        CHECK(M->loader.seed == want.loader.seed && M->loader.epoch == 2 && M->loader.pos == 12345);
        CHECK(!memcmp(M->rng.s, want.rng.s, sizeof want.rng.s));
        CHECK(M->has_tokenizer && M->tokenizer_xxh64 == want.tokenizer_xxh64);
        CHECK_EQ_STR(M->strategy, "NO_SHARD");
        for (int u = 0; u < s.model.n_units; u++) {
            int64_t n = s.model.units[u].numel;
            float *p = slm_xmalloc((size_t)n * 4), *m = slm_xmalloc((size_t)n * 4),
                  *v = slm_xmalloc((size_t)n * 4);
            slm_status st = slm_ckpt_read_range(c, u, 0, n, p, m, v);
            int bad = st || cmp_bits(p, s.model.params[u], n) || cmp_bits(m, s.m[u], n) ||
                      cmp_bits(v, s.v[u], n);
            free(p);
            free(m);
            free(v);
            CHECK_MSG(!bad, "unit %d differs after round trip (%s)", u, slm_errmsg());
        }
        // `latest` names the step directory and no staging directory is left.
        char *lp = slm_path_join(root, "latest"), *txt = NULL;
        size_t len;
        CHECK_OK(slm_file_read_all(lp, &txt, &len));
        CHECK_EQ_STR(txt, "step_00001200\n");
        free(txt);
        free(lp);
        char *tmpd = slm_ckpt_step_dir(root, 1200, true);
        CHECK(!slm_is_dir(tmpd));
        free(tmpd);
        slm_ckpt_free(c);
        state_free(&s);
        free(root);
    }
}

// Asynchronous save semantics: after the fence the caller may modify its shards; the checkpoint
// holds the values at save time. Two saves in a row reuse the staging buffer.
static void test_async_fence(void) {
    char *root = root_dir("fence");
    state s;
    state_init(&s, 21);
    int U = s.model.n_units;
    float **snap = slm_xcalloc((size_t)U, sizeof *snap);
    for (int u = 0; u < U; u++) {
        snap[u] = slm_xmalloc((size_t)s.model.units[u].numel * 4);
        memcpy(snap[u], s.model.params[u], (size_t)s.model.units[u].numel * 4);
    }
    slm_ckpt_saver_opts o = {.root = root, .keep = 0, .rank = 0, .world = 1};
    slm_ckpt_saver *sv = NULL;
    CHECK_OK(slm_ckpt_saver_new(&o, &sv));
    slm_ckpt_shard sh[8];
    full_shards(&s, sh);
    slm_ckpt_meta meta;
    for (int64_t step = 1; step <= 2; step++) {
        meta_for(&meta, &s, step);
        CHECK_OK(slm_ckpt_saver_save(sv, &meta, s.model.units, U, sh));
        slm_ckpt_saver_fence(sv);
        if (step == 1)
            for (int u = 0; u < U; u++) // "optimizer step": changes everything after the fence
                for (int64_t i = 0; i < s.model.units[u].numel; i++)
                    s.model.params[u][i] += 1.0f;
        CHECK_OK(slm_ckpt_saver_poll(sv));
    }
    CHECK_OK(slm_ckpt_saver_finish(sv));
    CHECK_EQ_INT(slm_ckpt_saver_last_committed(sv), 2);
    slm_ckpt_saver_free(sv);
    for (int64_t step = 1; step <= 2; step++) {
        char *d = slm_ckpt_step_dir(root, step, false);
        slm_ckpt *c = NULL;
        CHECK_OK(slm_ckpt_open(d, &c));
        free(d);
        for (int u = 0; u < U; u++) {
            int64_t n = s.model.units[u].numel;
            float *p = slm_xmalloc((size_t)n * 4);
            CHECK_OK(slm_ckpt_read_range(c, u, 0, n, p, NULL, NULL));
            int bad = cmp_bits(p, step == 1 ? snap[u] : s.model.params[u], n);
            free(p);
            CHECK_MSG(!bad, "step %d unit %d: not the values at save time", (int)step, u);
        }
        slm_ckpt_free(c);
    }
    for (int u = 0; u < U; u++)
        free(snap[u]);
    free(snap);
    state_free(&s);
    free(root);
}

// N ranks save padded FULL_SHARD-style ranges; M other ranges read them back.
static void test_reshard_n_to_m(void) {
    char *root = root_dir(g_vocab == 64 ? "reshard" : "reshard_big");
    slm_mkdir_p(root);
    state s;
    state_init(&s, 7);
    int U = s.model.n_units;
    const int N = 3;
    char *tmp = slm_ckpt_step_dir(root, 10, true);
    slm_mkdir_p(tmp);
    for (int r = 0; r < N; r++) {
        slm_ckpt_shard sh[8];
        for (int u = 0; u < U; u++) {
            int64_t n = s.model.units[u].numel, per = (n + N - 1) / N; // padded to N * per
            int64_t b = r * per, e = b + per;
            // buffers of the padded shard: copies with the padding tail zero
            float *bufs[3];
            float *src[3] = {s.model.params[u], s.m[u], s.v[u]};
            for (int k = 0; k < 3; k++) {
                bufs[k] = slm_xcalloc((size_t)per, 4);
                for (int64_t i = b; i < e && i < n; i++)
                    bufs[k][i - b] = src[k][i];
            }
            sh[u] = (slm_ckpt_shard){
                .begin = b, .end = e, .params = bufs[0], .m = bufs[1], .v = bufs[2]};
        }
        slm_status st = slm_ckpt_write_rank(tmp, r, N, 10, s.model.units, U, sh);
        for (int u = 0; u < U; u++) {
            free(sh[u].params);
            free(sh[u].m);
            free(sh[u].v);
        }
        CHECK_OK(st);
    }
    slm_ckpt_meta meta;
    meta_for(&meta, &s, 10);
    meta.world = N;
    snprintf(meta.strategy, sizeof meta.strategy, "FULL_SHARD");
    meta.shard_group_size = N;
    CHECK_OK(slm_ckpt_commit(root, &meta, s.model.units, U, 0));
    slm_ckpt *c = NULL;
    CHECK_OK(slm_ckpt_open(root, &c));
    CHECK_OK(slm_ckpt_verify(c));
    CHECK_EQ_INT(slm_ckpt_get_meta(c)->world, N);
    const int Ms[3] = {1, 2, 5};
    for (int mi = 0; mi < 3; mi++) {
        int M = Ms[mi];
        for (int u = 0; u < U; u++) {
            int64_t n = s.model.units[u].numel, per = (n + M - 1) / M;
            for (int r = 0; r < M; r++) {
                int64_t b = r * per, e = b + per;
                float *p = slm_xmalloc((size_t)per * 4), *m = slm_xmalloc((size_t)per * 4),
                      *v = slm_xmalloc((size_t)per * 4);
                memset(p, 0xff, (size_t)per * 4);
                slm_status st = slm_ckpt_read_range(c, u, b, e, p, m, v);
                int bad = st != SLM_OK;
                for (int64_t i = b; !bad && i < e; i++) {
                    float wp = i < n ? s.model.params[u][i] : 0.0f, wm = i < n ? s.m[u][i] : 0.0f,
                          wv = i < n ? s.v[u][i] : 0.0f;
                    bad = memcmp(&p[i - b], &wp, 4) || memcmp(&m[i - b], &wm, 4) ||
                          memcmp(&v[i - b], &wv, 4);
                }
                free(p);
                free(m);
                free(v);
                CHECK_MSG(!bad, "M=%d unit %d rank %d: range differs (%s)", M, u, r, slm_errmsg());
            }
        }
    }
    slm_ckpt_free(c);
    free(tmp);
    state_free(&s);
    free(root);
}

// The same with rank files of several 4 MiB checksum chunks (ranges cross chunk boundaries).
static void test_reshard_big(void) {
    g_vocab = 4096;
    g_hidden = 128;
    test_reshard_n_to_m();
    g_vocab = 64;
    g_hidden = 16;
}

static void test_keep_and_crash_leftovers(void) {
    char *root = root_dir("keep");
    state s;
    state_init(&s, 3);
    for (int64_t step = 10; step <= 40; step += 10)
        CHECK_OK(save_one(root, &s, step, false, 2));
    for (int64_t step = 10; step <= 40; step += 10) {
        char *d = slm_ckpt_step_dir(root, step, false);
        CHECK_MSG(slm_is_dir(d) == (step >= 30), "step %d kept=%d", (int)step, slm_is_dir(d));
        free(d);
    }
    // A crash mid-save leaves step_N.tmp with partial files: `latest` still opens step 40.
    char *t = slm_ckpt_step_dir(root, 50, true);
    slm_mkdir_p(t);
    char *junk = slm_path_join(t, "rank_00000.bin");
    CHECK_OK(slm_file_write_atomic(junk, "partial", 7));
    slm_ckpt *c = NULL;
    CHECK_OK(slm_ckpt_open(root, &c));
    CHECK_EQ_INT(slm_ckpt_get_meta(c)->step, 40);
    CHECK_OK(slm_ckpt_verify(c));
    slm_ckpt_free(c);
    // The next commit removes the stale staging directory.
    CHECK_OK(save_one(root, &s, 60, true, 2));
    CHECK(!slm_is_dir(t));
    free(junk);
    free(t);
    state_free(&s);
    free(root);
}

// Helpers for corruption: a fresh valid checkpoint, then damage.
static char *fresh(const char *name, state *s) {
    char *root = root_dir(name);
    SLM_ASSERT(save_one(root, s, 5, true, 0) == SLM_OK);
    char *d = slm_ckpt_step_dir(root, 5, false);
    free(root);
    return d;
}

static slm_status open_and_read_all(const char *dir, state *s) {
    slm_ckpt *c = NULL;
    slm_status st = slm_ckpt_open(dir, &c);
    if (!st) st = slm_ckpt_check_model(c, &s->model);
    for (int u = 0; !st && u < s->model.n_units; u++) {
        int64_t n = s->model.units[u].numel;
        float *p = slm_xmalloc((size_t)n * 4);
        st = slm_ckpt_read_range(c, u, 0, n, p, NULL, NULL);
        free(p);
    }
    slm_ckpt_free(c);
    return st;
}

static void test_corruption(void) {
    state s;
    state_init(&s, 11);
    char *d, *f;
    slm_status st;
    // flipped byte -> checksum error naming the file (read and verify)
    d = fresh("flip", &s);
    f = slm_path_join(d, "rank_00000.bin");
    {
        int fd = open(f, O_RDWR);
        unsigned char b;
        CHECK(pread(fd, &b, 1, 1000) == 1);
        b ^= 0x10;
        CHECK(pwrite(fd, &b, 1, 1000) == 1);
        close(fd);
    }
    st = open_and_read_all(d, &s);
    CHECK_EQ_INT(st, SLM_E_CHECKSUM);
    CHECK(strstr(slm_errmsg(), "rank_00000.bin") && strstr(slm_errmsg(), "checksum mismatch"));
    slm_ckpt *c = NULL;
    CHECK_OK(slm_ckpt_open(d, &c));
    CHECK_EQ_INT(slm_ckpt_verify(c), SLM_E_CHECKSUM);
    slm_ckpt_free(c);
    free(f);
    free(d);
    // truncated file
    d = fresh("trunc", &s);
    f = slm_path_join(d, "rank_00000.bin");
    CHECK(truncate(f, 500) == 0);
    st = open_and_read_all(d, &s);
    CHECK_EQ_INT(st, SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "rank_00000.bin") && strstr(slm_errmsg(), "truncated"));
    free(f);
    free(d);
    // missing rank file
    d = fresh("missing", &s);
    f = slm_path_join(d, "rank_00000.bin");
    unlink(f);
    st = open_and_read_all(d, &s);
    CHECK_EQ_INT(st, SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "rank_00000.bin") && strstr(slm_errmsg(), "cannot open"));
    free(f);
    free(d);
    // a model with another config
    d = fresh("othercfg", &s);
    {
        state o;
        state_init(&o, 1);
        slm_llama other;
        slm_llama_config cfg = o.model.cfg;
        cfg.intermediate_size = 48;
        CHECK_OK(slm_llama_init(&other, &cfg, false));
        CHECK_OK(slm_ckpt_open(d, &c));
        st = slm_ckpt_check_model(c, &other);
        CHECK_EQ_INT(st, SLM_E_ARG);
        CHECK(strstr(slm_errmsg(), "intermediate_size") && strstr(slm_errmsg(), "manifest.json"));
        slm_ckpt_free(c);
        slm_llama_free(&other);
        state_free(&o);
    }
    free(d);
    // unsupported format version, and a manifest that is not JSON
    d = fresh("version", &s);
    f = slm_path_join(d, "manifest.json");
    {
        char *txt;
        size_t len;
        CHECK_OK(slm_file_read_all(f, &txt, &len));
        char *p = strstr(txt, "\"format_version\":\t1");
        CHECK_MSG(p != NULL, "manifest has no format_version 1 field");
        p[strlen("\"format_version\":\t")] = '9';
        CHECK_OK(slm_file_write_atomic(f, txt, len));
        st = slm_ckpt_open(d, &c);
        CHECK_EQ_INT(st, SLM_E_UNSUPPORTED);
        CHECK(strstr(slm_errmsg(), "format_version 9"));
        CHECK_OK(slm_file_write_atomic(f, txt, len / 2));
        st = slm_ckpt_open(d, &c);
        CHECK_EQ_INT(st, SLM_E_FORMAT);
        CHECK(strstr(slm_errmsg(), "manifest.json"));
        free(txt);
    }
    free(f);
    free(d);
    // no checkpoint at all
    st = slm_ckpt_open(g_tmp, &c);
    CHECK_EQ_INT(st, SLM_E_IO);
    state_free(&s);
}

// The schedule: due every N steps or after M minutes; --on-ckpt-error continue / abort on a save
// that cannot create its staging directory (a plain file sits at step_N.tmp).
static void test_sched(void) {
    char *root = root_dir("sched");
    state s;
    state_init(&s, 2);
    slm_ckpt_shard sh[8];
    full_shards(&s, sh);
    slm_ckpt_meta meta;
    for (int abort_mode = 0; abort_mode < 2; abort_mode++) {
        slm_ckpt_policy p = {.root = root, .every_steps = 3, .abort_on_error = abort_mode == 1};
        slm_ckpt_sched *sc = NULL;
        CHECK_OK(slm_ckpt_sched_new(&p, 0, 1, false, &sc));
        CHECK(!slm_ckpt_sched_due(sc, 2, false) && slm_ckpt_sched_due(sc, 3, false) &&
              slm_ckpt_sched_due(sc, 4, true));
        char *blocker = slm_ckpt_step_dir(root, 5, true);
        CHECK_OK(slm_file_write_atomic(blocker, "x", 1));
        meta_for(&meta, &s, 5);
        slm_status st = slm_ckpt_sched_step(sc, true, &meta, s.model.units, s.model.n_units, sh);
        CHECK_EQ_INT(st, abort_mode ? SLM_E_IO : SLM_OK);
        unlink(blocker);
        free(blocker);
        meta_for(&meta, &s, 6);
        CHECK_OK(slm_ckpt_sched_step(sc, true, &meta, s.model.units, s.model.n_units, sh));
        slm_ckpt_sched_fence(sc);
        CHECK_OK(slm_ckpt_sched_finish(sc));
        int64_t n;
        double tot, mx;
        slm_ckpt_sched_stats(sc, &n, &tot, &mx);
        // Only committed saves count: step 5 failed (issue 8 item 5: it used to count as saved).
        CHECK_EQ_INT(n, 1);
        CHECK_EQ_INT(slm_ckpt_sched_n_failed(sc), 1);
        slm_ckpt_sched_free(sc);
    }
    // minutes: 0.0001 min = 6 ms
    slm_ckpt_policy p = {.root = root, .every_minutes = 0.0001};
    slm_ckpt_sched *sc = NULL;
    CHECK_OK(slm_ckpt_sched_new(&p, 0, 1, false, &sc));
    usleep(20000);
    CHECK(slm_ckpt_sched_due(sc, 1, false));
    meta_for(&meta, &s, 7);
    CHECK_OK(slm_ckpt_sched_step(sc, true, &meta, s.model.units, s.model.n_units, sh));
    CHECK(!slm_ckpt_sched_due(sc, 2, false)); // the clock restarted at the save
    CHECK_OK(slm_ckpt_sched_finish(sc));
    slm_ckpt_sched_free(sc);
    slm_ckpt *c = NULL;
    CHECK_OK(slm_ckpt_open(root, &c));
    CHECK_EQ_INT(slm_ckpt_get_meta(c)->step, 7);
    slm_ckpt_free(c);
    state_free(&s);
    free(root);
}

// The last save holds a run's final weights: under --on-ckpt-error continue a failed last save
// is logged at the step, but slm_ckpt_sched_finish returns an error naming it (and the newest
// committed checkpoint), so a run never ends "successfully" without its weights.
static void test_sched_final_save_must_commit(void) {
    char *root = root_dir("sched_final");
    state s;
    state_init(&s, 2);
    slm_ckpt_shard sh[8];
    full_shards(&s, sh);
    slm_ckpt_meta meta;
    for (int earlier = 0; earlier < 2; earlier++) {
        slm_ckpt_policy p = {.root = root, .sync = earlier == 1};
        slm_ckpt_sched *sc = NULL;
        CHECK_OK(slm_ckpt_sched_new(&p, 0, 1, false, &sc));
        if (earlier) { // step 3 commits first
            meta_for(&meta, &s, 3);
            CHECK_OK(slm_ckpt_sched_step(sc, true, &meta, s.model.units, s.model.n_units, sh));
        }
        char *blocker = slm_ckpt_step_dir(root, 5, true);
        CHECK_OK(slm_file_write_atomic(blocker, "x", 1));
        meta_for(&meta, &s, 5);
        CHECK_OK(slm_ckpt_sched_step(sc, true, &meta, s.model.units, s.model.n_units, sh));
        CHECK_EQ_INT(slm_ckpt_sched_finish(sc), SLM_E_IO);
        CHECK_MSG(strstr(slm_errmsg(), "final checkpoint (step 5) was not saved") &&
                      strstr(slm_errmsg(), earlier ? "step_00000003" : "no checkpoint"),
                  "%s", slm_errmsg());
        unlink(blocker);
        free(blocker);
        slm_ckpt_sched_free(sc);
    }
    // A final save that commits: finish is OK (also when the same step was saved just before).
    slm_ckpt_policy p = {.root = root};
    slm_ckpt_sched *sc = NULL;
    CHECK_OK(slm_ckpt_sched_new(&p, 0, 1, false, &sc));
    meta_for(&meta, &s, 8);
    CHECK_OK(slm_ckpt_sched_step(sc, true, &meta, s.model.units, s.model.n_units, sh));
    CHECK_OK(slm_ckpt_sched_step(sc, true, &meta, s.model.units, s.model.n_units, sh));
    CHECK_OK(slm_ckpt_sched_finish(sc));
    slm_ckpt_sched_free(sc);
    state_free(&s);
    free(root);
}

// Reads ROOT/latest ("" if missing) into buf[64].
static const char *read_latest(const char *root, char buf[64]) {
    char *lp = slm_path_join(root, "latest"), *txt = NULL;
    size_t len = 0;
    buf[0] = 0;
    if (slm_file_read_all(lp, &txt, &len) == SLM_OK) snprintf(buf, 64, "%s", txt);
    free(txt);
    free(lp);
    return buf;
}

// Flips the middle byte of PATH in place.
static slm_status flip_middle_byte(const char *path) {
    char *txt = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &txt, &len);
    if (st) return st;
    txt[len / 2] ^= 0xff;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(txt, 1, len, f) == len;
    if (f) fclose(f);
    free(txt);
    return ok ? SLM_OK : slm_fail(SLM_E_IO, "%s: cannot rewrite", path);
}

static void overwrite_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    SLM_ASSERT(f && fwrite(data, 1, len, f) == len);
    fclose(f);
}

// Issue 8 item 3: a step whose directory already exists is saved again (it used to be skipped,
// leaving a stale `latest`): after a failed `latest` update, and over a partial directory.
static void test_resave_existing_step(void) {
    char *root = root_dir("resave");
    state a, b;
    state_init(&a, 11);
    state_init(&b, 12);
    CHECK_OK(save_one(root, &a, 4, false, 0));
    CHECK_OK(save_one(root, &a, 8, false, 0));
    char buf[64];
    // step_8 committed, then writing `latest` failed: it still names step 4.
    char *lp = slm_path_join(root, "latest");
    overwrite_file(lp, "step_00000004\n", 14);
    free(lp);
    CHECK_OK(save_one(root, &b, 8, false, 0)); // b: tells the new contents from the old
    CHECK_EQ_STR(read_latest(root, buf), "step_00000008\n");
    slm_ckpt *c = NULL;
    CHECK_OK(slm_ckpt_open(root, &c));
    CHECK_OK(slm_ckpt_verify(c));
    int64_t n0 = b.model.units[0].numel;
    float *got = slm_xmalloc((size_t)n0 * 4);
    CHECK_OK(slm_ckpt_read_range(c, 0, 0, n0, got, NULL, NULL));
    CHECK_EQ_INT(cmp_bits(got, b.model.params[0], n0), 0);
    slm_ckpt_free(c);
    free(got);
    // A partial step_12 (a stray short rank file, no manifest) is replaced by a full save.
    char *d12 = slm_ckpt_step_dir(root, 12, false);
    CHECK(mkdir(d12, 0755) == 0);
    char *junk = slm_path_join(d12, "rank_00000.bin");
    overwrite_file(junk, "partial", 7);
    free(junk);
    CHECK_OK(save_one(root, &b, 12, true, 0));
    CHECK_EQ_STR(read_latest(root, buf), "step_00000012\n");
    CHECK_OK(slm_ckpt_open(d12, &c));
    CHECK_EQ_INT(slm_ckpt_get_meta(c)->step, 12);
    CHECK_OK(slm_ckpt_verify(c));
    slm_ckpt_free(c);
    free(d12);
    state_free(&a);
    state_free(&b);
    free(root);
}

// Issue 8 item 2: --resume auto's pick. `latest` is a hint; the newest checkpoint that verifies
// wins; a truncated newest one falls back to the previous; a flipped byte is caught only with
// full_verify; none verifying is an error naming the newest one's bad file.
static void test_pick_resume(void) {
    char *root = root_dir("pick");
    char *dir = NULL;
    int64_t step = 0;
    CHECK_OK(slm_ckpt_pick_resume(root, false, &dir, &step)); // no checkpoints/: fresh start
    CHECK(dir == NULL && step == -1);
    CHECK_OK(slm_mkdir_p(root)); // an empty checkpoints/ holds none either
    CHECK_OK(slm_ckpt_pick_resume(root, false, &dir, &step));
    CHECK(dir == NULL && step == -1);
    state s;
    state_init(&s, 21);
    for (int k = 1; k <= 3; k++)
        CHECK_OK(save_one(root, &s, 2 * k, false, 0));
    char *lp = slm_path_join(root, "latest");
    unlink(lp); // SIGKILL before the first `latest` write
    CHECK_OK(slm_ckpt_pick_resume(root, false, &dir, &step));
    CHECK_EQ_INT(step, 6);
    CHECK(dir && strstr(dir, "step_00000006"));
    free(dir);
    overwrite_file(lp, "step_00000099\n", 14); // names a checkpoint that does not exist
    CHECK_OK(slm_ckpt_pick_resume(root, false, &dir, &step));
    CHECK_EQ_INT(step, 6);
    free(dir);
    overwrite_file(lp, "step_00000002\n", 14); // stale: older than the newest
    CHECK_OK(slm_ckpt_pick_resume(root, false, &dir, &step));
    CHECK_EQ_INT(step, 6);
    free(dir);
    free(lp);
    char *d6 = slm_ckpt_step_dir(root, 6, false), *d4 = slm_ckpt_step_dir(root, 4, false);
    char *f6 = slm_path_join(d6, "rank_00000.bin"), *f4 = slm_path_join(d4, "rank_00000.bin");
    CHECK(truncate(f6, 100) == 0);
    CHECK_OK(slm_ckpt_pick_resume(root, false, &dir, &step));
    CHECK_EQ_INT(step, 4);
    free(dir);
    int fd = open(f4, O_RDWR); // same size, one byte flipped
    unsigned char x = 0;
    CHECK(fd >= 0 && pread(fd, &x, 1, 200) == 1);
    x ^= 0xff;
    CHECK(pwrite(fd, &x, 1, 200) == 1);
    close(fd);
    CHECK_OK(slm_ckpt_pick_resume(root, false, &dir, &step)); // sizes only: not caught
    CHECK_EQ_INT(step, 4);
    free(dir);
    CHECK_OK(slm_ckpt_pick_resume(root, true, &dir, &step)); // checksums: falls back
    CHECK_EQ_INT(step, 2);
    free(dir);
    char *d2 = slm_ckpt_step_dir(root, 2, false), *m2 = slm_path_join(d2, "manifest.json");
    unlink(m2);
    slm_status st = slm_ckpt_pick_resume(root, true, &dir, &step);
    CHECK_EQ_INT(st, SLM_E_FORMAT);
    CHECK(dir == NULL);
    CHECK_MSG(strstr(slm_errmsg(), "none of its 3 checkpoints") &&
                  strstr(slm_errmsg(), "step_00000006/rank_00000.bin"),
              "message: %s", slm_errmsg());
    free(m2), free(d2), free(f6), free(f4), free(d6), free(d4);
    state_free(&s);
    free(root);
}

// Issue 8 item 4: on an error exit, a finished asynchronous save is committed (collective) or
// its staging directory removed (not collective); never left as a written step_N.tmp.
static void test_settle(void) {
    char *root = root_dir("settle");
    state s;
    state_init(&s, 31);
    slm_ckpt_shard sh[8];
    full_shards(&s, sh);
    slm_ckpt_meta meta;
    char buf[64];
    slm_ckpt_saver_opts o = {.root = root, .rank = 0, .world = 1};
    slm_ckpt_saver *sv = NULL;
    CHECK_OK(slm_ckpt_saver_new(&o, &sv));
    meta_for(&meta, &s, 3);
    CHECK_OK(slm_ckpt_saver_save(sv, &meta, s.model.units, s.model.n_units, sh));
    CHECK_OK(slm_ckpt_saver_settle(sv, true));
    CHECK_EQ_STR(read_latest(root, buf), "step_00000003\n");
    CHECK_EQ_INT(slm_ckpt_saver_n_committed(sv), 1);
    meta_for(&meta, &s, 5);
    CHECK_OK(slm_ckpt_saver_save(sv, &meta, s.model.units, s.model.n_units, sh));
    CHECK_OK(slm_ckpt_saver_settle(sv, false));
    slm_ckpt_saver_free(sv);
    char *t5 = slm_ckpt_step_dir(root, 5, true);
    CHECK(!slm_is_dir(t5));
    free(t5);
    CHECK_EQ_STR(read_latest(root, buf), "step_00000003\n");
    slm_ckpt *c = NULL;
    CHECK_OK(slm_ckpt_open(root, &c));
    CHECK_OK(slm_ckpt_verify(c));
    slm_ckpt_free(c);
    state_free(&s);
    free(root);
}

// Rank r of N's padded FULL_SHARD shard of s, written into DIR (as the saver's writer does).
static slm_status write_rank_of(const char *dir, state *s, int r, int N, int64_t step) {
    int U = s->model.n_units;
    SLM_ASSERT(U <= 8);
    slm_ckpt_shard sh[8] = {{0}};
    for (int u = 0; u < U; u++) {
        int64_t n = s->model.units[u].numel, per = (n + N - 1) / N, b = r * per, e = b + per;
        float *bufs[3], *src[3] = {s->model.params[u], s->m[u], s->v[u]};
        for (int k = 0; k < 3; k++) {
            bufs[k] = slm_xcalloc((size_t)per, 4);
            for (int64_t i = b; i < e && i < n; i++)
                bufs[k][i - b] = src[k][i];
        }
        sh[u] =
            (slm_ckpt_shard){.begin = b, .end = e, .params = bufs[0], .m = bufs[1], .v = bufs[2]};
    }
    slm_status st = slm_ckpt_write_rank(dir, r, N, step, s->model.units, U, sh);
    for (int u = 0; u < U; u++) {
        free(sh[u].params);
        free(sh[u].m);
        free(sh[u].v);
    }
    return st;
}

// A save every rank wrote but nobody committed (the job ended before the commit barrier) is
// committed by slm_ckpt_recover_pending; one with a rank file missing or not matching its
// sidecar is not; neither is one older than the newest committed checkpoint.
static void test_recover_pending(void) {
    char *root = root_dir("recover");
    state s;
    state_init(&s, 11);
    int U = s.model.n_units;
    CHECK_OK(save_one(root, &s, 5, true, 0)); // committed: step 5
    const int N = 2;
    slm_ckpt_meta meta;
    meta_for(&meta, &s, 7);
    meta.world = N;
    snprintf(meta.strategy, sizeof meta.strategy, "FULL_SHARD");
    meta.shard_group_size = N;
    char *tmp = slm_ckpt_step_dir(root, 7, true), *fin = slm_ckpt_step_dir(root, 7, false);
    slm_mkdir_p(tmp);
    CHECK_OK(slm_ckpt_write_pending(root, &meta, s.model.units, U));
    CHECK_OK(write_rank_of(tmp, &s, 0, N, 7));
    int64_t rec = 0;
    char buf[64];
    CHECK_OK(slm_ckpt_recover_pending(root, 0, &rec)); // rank 1 has not written
    CHECK_EQ_INT(rec, -1);
    CHECK(!slm_is_dir(fin));
    CHECK_EQ_STR(read_latest(root, buf), "step_00000005\n");
    CHECK_OK(write_rank_of(tmp, &s, 1, N, 7));
    char *b1 = slm_path_join(tmp, "rank_00001.bin");
    CHECK_OK(flip_middle_byte(b1));
    CHECK_OK(slm_ckpt_recover_pending(root, 0, &rec)); // rank 1's file != its sidecar
    CHECK_EQ_INT(rec, -1);
    CHECK(!slm_is_dir(fin));
    CHECK_OK(write_rank_of(tmp, &s, 1, N, 7)); // rewritten: complete now
    CHECK_OK(slm_ckpt_recover_pending(root, 0, &rec));
    CHECK_EQ_INT(rec, 7);
    CHECK(slm_is_dir(fin) && !slm_is_dir(tmp));
    CHECK_EQ_STR(read_latest(root, buf), "step_00000007\n");
    char *pend = slm_path_join(fin, "pending.json"), *side = slm_path_join(fin, "rank_00000.json");
    CHECK(!slm_is_file(pend) && !slm_is_file(side)); // merged into manifest.json
    slm_ckpt *c = NULL;
    CHECK_OK(slm_ckpt_open(root, &c));
    CHECK_OK(slm_ckpt_verify(c));
    CHECK_EQ_INT(slm_ckpt_get_meta(c)->step, 7);
    CHECK_EQ_INT(slm_ckpt_get_meta(c)->world, N);
    CHECK_EQ_INT(slm_ckpt_get_meta(c)->loader.pos, 12345);
    for (int u = 0; u < U; u++) {
        int64_t n = s.model.units[u].numel;
        float *p = slm_xmalloc((size_t)n * 4), *m = slm_xmalloc((size_t)n * 4),
              *v = slm_xmalloc((size_t)n * 4);
        CHECK_OK(slm_ckpt_read_range(c, u, 0, n, p, m, v));
        CHECK(!cmp_bits(p, s.model.params[u], n) && !cmp_bits(m, s.m[u], n) &&
              !cmp_bits(v, s.v[u], n));
        free(p);
        free(m);
        free(v);
    }
    slm_ckpt_free(c);
    // an interrupted save older than the newest committed one is never recovered
    char *old = slm_ckpt_step_dir(root, 6, true), *oldfin = slm_ckpt_step_dir(root, 6, false);
    slm_mkdir_p(old);
    meta_for(&meta, &s, 6);
    meta.world = 1;
    CHECK_OK(slm_ckpt_write_pending(root, &meta, s.model.units, U));
    CHECK_OK(write_rank_of(old, &s, 0, 1, 6));
    CHECK_OK(slm_ckpt_recover_pending(root, 0, &rec));
    CHECK_EQ_INT(rec, -1);
    CHECK(!slm_is_dir(oldfin));
    CHECK_EQ_STR(read_latest(root, buf), "step_00000007\n");
    free(old);
    free(oldfin);
    free(pend);
    free(side);
    free(b1);
    free(tmp);
    free(fin);
    state_free(&s);
    free(root);
}

// A shard read through a `read` source (device memory: fsdp/'s shards) gives the same rank file,
// bit for bit, as the same values in host arrays, on each path: the direct write (bounce buffer
// of one chunk), the staging copy on the training thread (one copy per array) and on the
// background writer (pieces of at most 1 MiB). Unit 0 spans more than one 4 MiB chunk; shard
// ends run past numel into the padding (not stored).
typedef struct src_log {
    float *arr[2][3]; // the arrays the source reads (as the host shards hold them)
    int64_t max_n;    // the largest piece asked for
    int64_t calls;
} src_log;

static void read_from_log(const void *src, int unit, int k, int64_t off, int64_t n, float *host) {
    src_log *L = (src_log *)src;
    SLM_ASSERT(unit >= 0 && unit < 2 && k >= 0 && k < 3 && off >= 0 && n > 0);
    memcpy(host, L->arr[unit][k] + off, (size_t)n * sizeof(float));
    if (n > L->max_n) L->max_n = n;
    L->calls++;
}

static char *rank_file(const char *dir) {
    char *p = slm_path_join(dir, "rank_00000.bin"), *data = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(p, &data, &len);
    free(p);
    return st ? NULL : data;
}

static void test_read_source(void) {
    slm_unit_layout lay[2] = {{.numel = (int64_t)1500000 + 3}, {.numel = 1000}};
    int64_t len[2] = {lay[0].numel + 5, lay[1].numel}; // unit 0's shard ends in padding
    src_log L = {0};
    slm_ckpt_shard host[2], dev[2];
    for (int u = 0; u < 2; u++) {
        for (int k = 0; k < 3; k++) {
            L.arr[u][k] = slm_xcalloc((size_t)len[u], sizeof(float));
            for (int64_t i = 0; i < lay[u].numel; i++)
                L.arr[u][k][i] = (float)(i % 1009) * 0.25f - (float)(k + 3 * u);
        }
        host[u] = (slm_ckpt_shard){
            .begin = 0, .end = len[u], .params = L.arr[u][0], .m = L.arr[u][1], .v = L.arr[u][2]};
        dev[u] = (slm_ckpt_shard){
            .begin = 0, .end = len[u], .read = read_from_log, .src = &L, .src_unit = u};
    }
    char *a = root_dir("src_host"), *b = root_dir("src_read");
    slm_mkdir_p(a);
    slm_mkdir_p(b);
    CHECK_OK(slm_ckpt_write_rank(a, 0, 1, 3, lay, 2, host));
    CHECK_OK(slm_ckpt_write_rank(b, 0, 1, 3, lay, 2, dev)); // direct: through the bounce buffer
    CHECK(L.calls > 3 && L.max_n <= (int64_t)SLM_CKPT_CHUNK_BYTES / 4);
    size_t bytes = SLM_CKPT_HEADER_BYTES + 3 * 4 * (size_t)(lay[0].numel + lay[1].numel);
    char *fa = rank_file(a), *fb = rank_file(b);
    CHECK(fa && fb && memcmp(fa, fb, bytes) == 0);
    for (int par = 0; par < 2; par++) {
        slm_ckpt_image im = {0};
        L.max_n = 0;
        slm_ckpt_stage(&im, 0, 1, 3, lay, 2, dev, par == 1);
        CHECK_EQ_INT((int64_t)im.len, (int64_t)bytes);
        CHECK(memcmp(im.data, fa, bytes) == 0);
        // background writer: 1 MiB pieces; training thread: one read per array
        CHECK_EQ_INT(L.max_n, (par ? lay[0].numel : ((int64_t)1 << 20) / 4));
        slm_ckpt_image_free(&im);
    }
    free(fa);
    free(fb);
    for (int u = 0; u < 2; u++)
        for (int k = 0; k < 3; k++)
            free(L.arr[u][k]);
    free(a);
    free(b);
}

int main(void) {
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_tmp, sizeof g_tmp, "%s/slm_test_ckpt_%d", base, (int)getpid());
    slm_mkdir_p(g_tmp);
    RUN(test_roundtrip_sync_and_async);
    RUN(test_async_fence);
    RUN(test_reshard_n_to_m);
    RUN(test_reshard_big);
    RUN(test_keep_and_crash_leftovers);
    RUN(test_corruption);
    RUN(test_sched);
    RUN(test_sched_final_save_must_commit);
    RUN(test_resave_existing_step);
    RUN(test_pick_resume);
    RUN(test_settle);
    RUN(test_recover_pending);
    RUN(test_read_source);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return TEST_SUMMARY();
}
