// Loader tests on synthetic datasets whose stream is token i = base + i, so every row of a batch
// names its window (row[0] - base = k*T) and its contents can be checked exactly.
// Ranks are simulated in one process: N loaders with rank r of world N.
#include "data_test_util.h"
#include "test.h"

enum { T = 8, BASE = 3 };
// 1001 train tokens -> (1001 - 1) / 8 = 125 windows; shards of odd sizes (one of a single
// token) so windows cross shard boundaries.
static const int64_t SIZES[] = {300, 1, 199, 501};
#define N_TRAIN 1001
#define N_WIN 125

static char *g_dir;

static slm_loader *open_loader(const char *split, int B, int rank, int world, uint64_t seed,
                               bool shuffle) {
    slm_loader_opts o = {g_dir, split, T, B, rank, world, seed, shuffle, false, 0};
    slm_loader *l = NULL;
    slm_status st = slm_loader_open(&o, &l);
    if (st) fprintf(stderr, "  loader_open: %s\n", slm_errmsg());
    return l;
}

// Window index of a row, or -1 if the row is not a genuine window of the stream.
static int64_t row_window(const int32_t *row) {
    int64_t s = row[0] - BASE;
    if (s < 0 || s % T != 0) return -1;
    for (int j = 0; j <= T; j++)
        if (row[j] != BASE + s + j) return -1;
    return s / T;
}

// Runs `steps` global batches on a world of `world` loaders (each starting from `st0` if given)
// and writes the window indices of the global sequence into out[steps * B].
static int run_world(int B, int world, int steps, const slm_loader_state *st0, int64_t *out,
                     slm_loader_state *end) {
    int Bl = B / world;
    slm_loader **ls = calloc((size_t)world, sizeof *ls);
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)Bl * (T + 1));
    int ok = 1;
    for (int r = 0; r < world; r++) {
        ls[r] = open_loader("train", B, r, world, 99, true);
        if (!ls[r])
            ok = 0;
        else if (st0 && slm_loader_set_state(ls[r], *st0))
            ok = 0;
    }
    for (int s = 0; s < steps && ok; s++)
        for (int r = 0; r < world; r++) {
            slm_loader_next(ls[r], buf);
            for (int i = 0; i < Bl; i++) {
                int64_t k = row_window(buf + (size_t)i * (T + 1));
                if (k < 0) ok = 0;
                out[(int64_t)s * B + r * Bl + i] = k;
            }
        }
    if (ok && end) *end = slm_loader_get_state(ls[0]);
    for (int r = 0; r < world; r++) {
        if (ok && end) {
            slm_loader_state e = slm_loader_get_state(ls[r]);
            if (e.epoch != end->epoch || e.pos != end->pos) ok = 0;
        }
        slm_loader_free(ls[r]);
    }
    free(ls);
    free(buf);
    return ok;
}

static void test_open_counts(void) {
    slm_loader *l = open_loader("train", 12, 0, 1, 1, true);
    CHECK(l != NULL);
    CHECK_EQ_INT(slm_loader_n_windows(l), N_WIN);
    const slm_dataset *ds = slm_loader_dataset(l);
    CHECK_EQ_INT(ds->train.n_tokens, N_TRAIN);
    CHECK_EQ_INT(ds->train.n_shards, 4);
    slm_loader_free(l);
}

// The union of all ranks' batches, in rank order, equals the world-of-one sequence.
static void test_partition_worlds(void) {
    enum { B = 12, STEPS = 40 }; // 480 windows: crosses three epoch boundaries
    int64_t *ref = malloc(sizeof(int64_t) * B * STEPS), *got = malloc(sizeof(int64_t) * B * STEPS);
    slm_loader_state e1, eN;
    CHECK(run_world(B, 1, STEPS, NULL, ref, &e1));
    for (int world = 2; world <= 4; world++) {
        CHECK(run_world(B, world, STEPS, NULL, got, &eN));
        for (int i = 0; i < B * STEPS; i++)
            CHECK_MSG(got[i] == ref[i], "world %d: position %d: window %" PRId64 " != %" PRId64,
                      world, i, got[i], ref[i]);
        CHECK_EQ_INT(eN.epoch, e1.epoch);
        CHECK_EQ_INT(eN.pos, e1.pos);
    }
    CHECK_EQ_INT(e1.epoch, (B * STEPS) / N_WIN);
    CHECK_EQ_INT(e1.pos, (B * STEPS) % N_WIN);
    free(ref);
    free(got);
}

// Every window appears exactly once per epoch; epochs differ; the order is not the identity.
static void test_epochs(void) {
    enum { B = 12, STEPS = 63 }; // 756 windows = 6 full epochs + 6
    int64_t *seq = malloc(sizeof(int64_t) * B * STEPS);
    CHECK(run_world(B, 1, STEPS, NULL, seq, NULL));
    int seen[N_WIN];
    for (int e = 0; e < 6; e++) {
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < N_WIN; i++) {
            int64_t k = seq[e * N_WIN + i];
            CHECK(k >= 0 && k < N_WIN);
            seen[k]++;
        }
        for (int k = 0; k < N_WIN; k++)
            CHECK_MSG(seen[k] == 1, "epoch %d: window %d seen %d times", e, k, seen[k]);
    }
    int diff01 = 0, fixed = 0;
    for (int i = 0; i < N_WIN; i++) {
        diff01 += seq[i] != seq[N_WIN + i];
        fixed += seq[i] == i;
    }
    CHECK_MSG(diff01 > N_WIN / 2, "epochs 0 and 1 differ in only %d positions", diff01);
    CHECK_MSG(fixed < N_WIN / 4, "epoch 0 has %d fixed points: not shuffled", fixed);
    free(seq);
}

// Another seed gives another order.
static void test_seed(void) {
    slm_loader *a = open_loader("train", 5, 0, 1, 1, true),
               *b = open_loader("train", 5, 0, 1, 2, true);
    CHECK(a && b);
    int32_t x[5 * (T + 1)], y[5 * (T + 1)];
    int diff = 0;
    for (int s = 0; s < 5; s++) {
        slm_loader_next(a, x);
        slm_loader_next(b, y);
        diff += memcmp(x, y, sizeof x) != 0;
    }
    CHECK(diff > 0);
    slm_loader_free(a);
    slm_loader_free(b);
}

// Save after k steps at world w1, resume at world w2: continues the uninterrupted sequence.
static void check_resume(int w1, int w2, int k) {
    enum { B = 12, STEPS = 30 };
    int64_t *ref = malloc(sizeof(int64_t) * B * STEPS), *part = malloc(sizeof(int64_t) * B * STEPS);
    slm_loader_state mid, end;
    int ok = run_world(B, 1, STEPS, NULL, ref, NULL) && run_world(B, w1, k, NULL, part, &mid) &&
             run_world(B, w2, STEPS - k, &mid, part + (int64_t)k * B, &end);
    if (!ok) {
        free(ref);
        free(part);
        CHECK_MSG(0, "resume %d -> %d failed to run", w1, w2);
    }
    int bad = -1;
    for (int i = 0; i < B * STEPS && bad < 0; i++)
        if (part[i] != ref[i]) bad = i;
    free(ref);
    free(part);
    CHECK_MSG(bad < 0, "resume %d -> %d after %d steps: differs at position %d", w1, w2, k, bad);
}

static void test_resume_2_to_3(void) {
    check_resume(2, 3, 7);
}
static void test_resume_4_to_1(void) {
    check_resume(4, 1, 11);
}
static void test_resume_3_to_4(void) {
    check_resume(3, 4, 10);
} // crosses an epoch first

// A different global batch size after resume still continues the same window sequence.
static void test_resume_other_batch(void) {
    int64_t ref[240];
    CHECK(run_world(12, 1, 20, NULL, ref, NULL));
    slm_loader *a = open_loader("train", 12, 0, 1, 99, true);
    int32_t buf[12 * (T + 1)];
    for (int s = 0; s < 3; s++)
        slm_loader_next(a, buf);
    slm_loader_state st = slm_loader_get_state(a);
    slm_loader_free(a);
    slm_loader *b = open_loader("train", 8, 0, 1, 99, true);
    CHECK_OK(slm_loader_set_state(b, st));
    for (int s = 0; s < 10; s++) {
        slm_loader_next(b, buf);
        for (int i = 0; i < 8; i++)
            CHECK_EQ_INT(row_window(buf + i * (T + 1)), ref[36 + s * 8 + i]);
    }
    slm_loader_free(b);
}

static void test_bad_state_and_opts(void) {
    slm_loader *l = open_loader("train", 4, 0, 1, 1, true);
    CHECK(l);
    slm_loader_state s = {1, 0, N_WIN};
    CHECK_EQ_INT(slm_loader_set_state(l, s), SLM_E_ARG);
    s.pos = -1;
    CHECK_EQ_INT(slm_loader_set_state(l, s), SLM_E_ARG);
    slm_loader_free(l);
    slm_loader_opts o = {g_dir, "train", T, 10, 0, 3, 1, true, false, 0}; // 3 does not divide 10
    CHECK_EQ_INT(slm_loader_open(&o, &l), SLM_E_ARG);
    slm_loader_opts o2 = {g_dir, "train", T, 126, 0, 1, 1, true, false, 0}; // more than 125 windows
    CHECK_EQ_INT(slm_loader_open(&o2, &l), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "fewer than B_global") != NULL);
    slm_loader_opts o3 = {g_dir, "test", T, 1, 0, 1, 1, true, false, 0};
    CHECK_EQ_INT(slm_loader_open(&o3, &l), SLM_E_ARG);
}

// The validation walk covers the val split once, in order, split over the ranks.
static void test_val_walk(void) {
    // val: 100 tokens -> 12 windows of T = 8; B_global 6 over 3 ranks, then B 8 over 2 ranks
    // (a ragged last batch: 12 = 8 + 4).
    // Also B 32 over 2 ranks: more than the 12 windows, allowed for a sequential walk.
    int cfg[3][2] = {{6, 3}, {8, 2}, {32, 2}};
    for (int c = 0; c < 3; c++) {
        int B = cfg[c][0], world = cfg[c][1], Bl = B / world;
        slm_loader *ls[3] = {0};
        for (int r = 0; r < world; r++)
            CHECK((ls[r] = open_loader("val", B, r, world, 5, false)));
        CHECK_EQ_INT(slm_loader_n_windows(ls[0]), 12);
        int64_t next = 0;
        int32_t buf[16 * (T + 1)];
        for (int step = 0; step < 10; step++) {
            int total = 0;
            for (int r = 0; r < world; r++) {
                int n = slm_loader_next_val(ls[r], buf);
                CHECK(n >= 0 && n <= Bl);
                for (int i = 0; i < n; i++)
                    CHECK_EQ_INT(row_window(buf + i * (T + 1)), next++);
                total += n;
            }
            if (total == 0) break;
        }
        CHECK_EQ_INT(next, 12);
        for (int r = 0; r < world; r++) {
            CHECK_EQ_INT(slm_loader_next_val(ls[r], buf), 0);
            slm_loader_free(ls[r]);
        }
    }
}

// uint32 tokens (vocab > 65536) and a split of T = 1 windows with n_windows = 4097 (Feistel
// domain 4^7 = 16384: exercises cycle walking); one epoch covers all windows once.
static void test_u32_and_bijection(void) {
    char *dir = tu_mkdtemp();
    int64_t sizes[2] = {2000, 2098}; // 4098 tokens -> 4097 windows of 2 tokens
    CHECK_OK(tu_make_dataset(dir, sizes, 2, 0, 100000, 70000));
    slm_loader_opts o = {dir, "train", 1, 1, 0, 1, 42, true, false, 0};
    slm_loader *l = NULL;
    CHECK_OK(slm_loader_open(&o, &l));
    CHECK_EQ_INT(slm_loader_n_windows(l), 4097);
    char *seen = calloc(4097, 1);
    int dup = 0, bad = 0;
    for (int i = 0; i < 4097; i++) {
        int32_t w[2];
        slm_loader_next(l, w);
        int64_t k = (int64_t)w[0] - 70000;
        if (k < 0 || k >= 4097 || w[1] != w[0] + 1) {
            bad++;
            continue;
        }
        dup += seen[k]++;
    }
    free(seen);
    slm_loader_state s = slm_loader_get_state(l);
    slm_loader_free(l);
    tu_rmdir(dir);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(dup, 0);
    CHECK_EQ_INT(s.epoch, 1);
    CHECK_EQ_INT(s.pos, 0);
}

int main(void) {
    g_dir = tu_mkdtemp();
    if (tu_make_dataset(g_dir, SIZES, 4, 100, 65536, BASE)) {
        fprintf(stderr, "cannot make dataset: %s\n", slm_errmsg());
        return 1;
    }
    RUN(test_open_counts);
    RUN(test_partition_worlds);
    RUN(test_epochs);
    RUN(test_seed);
    RUN(test_resume_2_to_3);
    RUN(test_resume_4_to_1);
    RUN(test_resume_3_to_4);
    RUN(test_resume_other_batch);
    RUN(test_bad_state_and_opts);
    RUN(test_val_walk);
    RUN(test_u32_and_bijection);
    tu_rmdir(g_dir);
    return TEST_SUMMARY();
}
