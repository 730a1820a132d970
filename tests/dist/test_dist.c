// dist/: collectives give the right values in a world of one (singleton init) and under
// mpirun -np N; slm_dist_agree returns the failing rank's status and message on every rank.
#include "dist/dist.h"
#include "test.h"

static void test_allreduce_bcast_allgather(void) {
    int r = slm_dist_rank(), w = slm_dist_world();
    double x = r + 1;
    slm_dist_allreduce(&x, 1, SLM_DTYPE_F64, SLM_OP_SUM, "test sum");
    CHECK_CLOSE(x, w * (w + 1) / 2.0, 0, 0);
    int64_t mx = r;
    slm_dist_allreduce(&mx, 1, SLM_DTYPE_I64, SLM_OP_MAX, "test max");
    CHECK_EQ_INT(mx, w - 1);
    float f[3] = {0, 0, 0};
    if (r == 0) f[0] = 1.5f, f[1] = 2.5f, f[2] = -3.0f;
    slm_dist_bcast(f, 3, SLM_DTYPE_F32, 0, "test bcast");
    CHECK_CLOSE(f[2], -3.0, 0, 0);
    int64_t mine = 10 * r, all[64];
    slm_dist_allgather(&mine, all, 1, SLM_DTYPE_I64, "test allgather");
    for (int i = 0; i < w; i++)
        CHECK_EQ_INT(all[i], 10 * i);
    slm_dist_barrier("test barrier");
}

static void test_agree(void) {
    int r = slm_dist_rank(), w = slm_dist_world();
    CHECK_EQ_INT(slm_dist_agree(SLM_OK), SLM_OK);
    slm_status local = SLM_OK;
    if (r == w - 1) local = slm_fail(SLM_E_IO, "disk on fire");
    slm_status st = slm_dist_agree(local);
    CHECK_EQ_INT(st, SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "disk on fire") != NULL);
}

// slm_dist_agree_values: equal lists pass; a differing item gives its code and a message built
// here by hand from the rank layout (grouped rank runs, first differing item, "also differ").
static void expect_msg(const char *want) {
    if (strcmp(slm_errmsg(), want) != 0) {
        fprintf(stderr, "rank %d: got  \"%s\"\n         want \"%s\"\n", slm_dist_rank(),
                slm_errmsg(), want);
        CHECK(0);
    }
}

static void test_agree_values(void) {
    int r = slm_dist_rank(), w = slm_dist_world();
    slm_agree_item same[3] = {{"--lr", "0.0003", SLM_E_ARG},
                              {"--seed", "5", SLM_E_ARG},
                              {"dataset manifest", "xxh64 1", SLM_E_FORMAT}};
    CHECK_EQ_INT(slm_dist_agree_values(same, 3), SLM_OK);
    CHECK_EQ_INT(slm_dist_agree_values(same, 0), SLM_OK);
    if (w == 1) return; // a world of one always agrees
    char want[512], last[16];
    snprintf(last, sizeof last, w == 2 ? "rank %d" : "ranks 0-%d", w - 2);

    // The last rank differs in an option: SLM_E_ARG on every rank, the same message.
    slm_agree_item a[3] = {
        same[0], {"--param-dtype", r == w - 1 ? "fp32" : "bf16", SLM_E_ARG}, same[2]};
    CHECK_EQ_INT(slm_dist_agree_values(a, 3), SLM_E_ARG);
    snprintf(want, sizeof want, "ranks disagree on --param-dtype: %s bf16, rank %d fp32", last,
             w - 1);
    expect_msg(want);

    // Only a file's contents differ: that item's code (SLM_E_FORMAT); two more items differ and
    // are named after the first; a NULL value reads "(unset)".
    char hash[32];
    snprintf(hash, sizeof hash, "xxh64 %d", r == 0 ? 7 : 9);
    slm_agree_item b[4] = {{"dataset manifest", hash, SLM_E_FORMAT},
                           same[0],
                           {"--seed", r == 0 ? "1" : "2", SLM_E_ARG},
                           {"--resume", r == 0 ? NULL : "auto", SLM_E_ARG}};
    CHECK_EQ_INT(slm_dist_agree_values(b, 4), SLM_E_FORMAT);
    char rest[16]; // ranks 1 .. w-1
    snprintf(rest, sizeof rest, w == 2 ? "rank %d" : "ranks 1-%d", w - 1);
    snprintf(want, sizeof want,
             "ranks disagree on dataset manifest: rank 0 xxh64 7, %s xxh64 9; also differ: "
             "--seed, --resume",
             rest);
    expect_msg(want);
    slm_agree_item c[1] = {{"--resume", r == 0 ? NULL : "", SLM_E_ARG}};
    CHECK_EQ_INT(slm_dist_agree_values(c, 1), SLM_E_ARG);
    snprintf(want, sizeof want, "ranks disagree on --resume: rank 0 (unset), %s ", rest);
    expect_msg(want);

    // Interleaved values group into rank lists; a long value is cut to 157 bytes + "...".
    if (w == 4) {
        char longv[301];
        memset(longv, 'x', 300);
        longv[300] = 0;
        slm_agree_item d[1] = {{"--out", r % 2 ? longv : "run", SLM_E_ARG}};
        CHECK_EQ_INT(slm_dist_agree_values(d, 1), SLM_E_ARG);
        char cut[161];
        memset(cut, 'x', 157);
        memcpy(cut + 157, "...", 4);
        snprintf(want, sizeof want, "ranks disagree on --out: ranks 0,2 run, ranks 1,3 %s", cut);
        expect_msg(want);
    }

    // Different lists (another build): refused before any value is compared.
    slm_agree_item e[2] = {same[0], same[1]};
    CHECK_EQ_INT(slm_dist_agree_values(e, r == w - 1 ? 1 : 2), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "ranks disagree on which settings they compare") != NULL);
    slm_agree_item f[2] = {same[0], {r == w - 1 ? "--sead" : "--seed", "5", SLM_E_ARG}};
    CHECK_EQ_INT(slm_dist_agree_values(f, 2), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "with other names") != NULL);
    // Afterwards the ranks are still in step: equal lists pass again.
    CHECK_EQ_INT(slm_dist_agree_values(same, 3), SLM_OK);
}

// Groups of 2 consecutive ranks (like HYBRID_SHARD's shard groups) and the cross groups; every
// non-blocking collective against values computed by hand.
static void test_groups_nonblocking(void) {
    int r = slm_dist_rank(), w = slm_dist_world();
    int G = w % 2 == 0 ? 2 : 1;
    slm_comm *sg = slm_comm_split(slm_comm_world(), r / G, r, "test shard group");
    slm_comm *rg = slm_comm_split(slm_comm_world(), r % G, r, "test replica group");
    CHECK_EQ_INT(slm_comm_size(sg), G);
    CHECK_EQ_INT(slm_comm_rank(sg), r % G);
    CHECK_EQ_INT(slm_comm_size(rg), w / G);
    CHECK_EQ_INT(slm_comm_rank(rg), r / G);
    // all-gather in the shard group: element j of block k = 100 * (group base + k) + j
    enum { n = 5 };
    float mine[n], all[2 * n], want[2 * n];
    for (int j = 0; j < n; j++)
        mine[j] = (float)(100 * r + j);
    slm_dist_req q1, q2;
    slm_dist_iallgather(sg, mine, all, n, SLM_DTYPE_F32, "test iallgather", &q1);
    // a second collective in flight on another communicator at the same time
    double x = r;
    slm_dist_iallreduce(rg, &x, 1, SLM_DTYPE_F64, SLM_OP_SUM, "test iallreduce", &q2);
    while (!slm_dist_test(&q1)) {
    }
    slm_dist_wait(&q2);
    for (int k = 0; k < G; k++)
        for (int j = 0; j < n; j++)
            want[k * n + j] = (float)(100 * ((r / G) * G + k) + j);
    for (int i = 0; i < G * n; i++)
        CHECK_CLOSE(all[i], want[i], 0, 0);
    double xs = 0; // sum of ranks with the same r % G
    for (int i = r % G; i < w; i += G)
        xs += i;
    CHECK_CLOSE(x, xs, 0, 0);
    // reduce-scatter over the world: send[i] = r + i; rank r gets sum_k (k + r*n + j)
    float *send = malloc(sizeof(float) * (size_t)w * n), recv[n];
    for (int i = 0; i < w * n; i++)
        send[i] = (float)(r + i);
    slm_dist_ireduce_scatter(slm_comm_world(), send, recv, n, SLM_DTYPE_F32, SLM_OP_SUM,
                             "test ireduce_scatter", &q1);
    slm_dist_wait(&q1);
    for (int j = 0; j < n; j++)
        CHECK_CLOSE(recv[j], w * (w - 1) / 2.0 + (double)w * (r * n + j), 0, 0);
    free(send);
    // bf16 sum through the user-defined op, on values whose sums are exact in bf16.
    uint16_t hb[3], hr[3];
    float fv[3] = {0.5f * (float)(r + 1), -1.0f, 3.0f}, fo[3];
    slm_f32_to_bf16(fv, hb, 3);
    slm_comm_allreduce(slm_comm_world(), hb, 3, SLM_DTYPE_BF16, SLM_OP_SUM, "test bf16 sum");
    slm_bf16_to_f32(hb, fo, 3);
    CHECK_CLOSE(fo[0], 0.25 * w * (w + 1), 0, 0);
    CHECK_CLOSE(fo[1], -w, 0, 0);
    CHECK_CLOSE(fo[2], 3.0 * w, 0, 0);
    slm_comm_reduce_scatter(slm_comm_world(), hb, hr, 0, SLM_DTYPE_BF16, SLM_OP_SUM, "empty rs");
    // bcast + barrier in a group
    int64_t b = r;
    slm_comm_bcast(sg, &b, 1, SLM_DTYPE_I64, 0, "test group bcast");
    CHECK_EQ_INT(b, (r / G) * G);
    slm_comm_barrier(rg, "test group barrier");
    slm_comm_free(sg);
    slm_comm_free(rg);
}

// Round to nearest even against hand-computed bit patterns (bf16 = top 16 bits of fp32).
static void test_bf16_rounding(void) {
    float x[6] = {1.0f,
                  1.00390625f /* 1 + 2^-8: tie, even -> 1 */,
                  1.01171875f /* 1 + 3*2^-8: tie, odd -> up */,
                  -2.5f,
                  65504.0f,
                  1e-40f};
    uint16_t want[6] = {0x3f80, 0x3f80, 0x3f82, 0xc020, 0x4780, 0x0001};
    uint16_t h[6];
    slm_f32_to_bf16(x, h, 6);
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(h[i], want[i]);
    float back[6];
    slm_bf16_to_f32(h, back, 6);
    CHECK_CLOSE(back[3], -2.5, 0, 0);
    CHECK_CLOSE(back[4], 65536.0, 0, 0); // 65504 rounds up to 2^16 in bf16
    float nan = NAN;
    slm_f32_to_bf16(&nan, h, 1);
    slm_bf16_to_f32(h, back, 1);
    CHECK(isnan(back[0]));
}

int main(int argc, char **argv) {
    // "--progress-thread US": the same checks with MPI_THREAD_MULTIPLE and the progress thread.
    if (argc > 2 && !strcmp(argv[1], "--progress-thread"))
        slm_dist_request_progress_thread(atof(argv[2]));
    if (slm_dist_init(&argc, &argv)) {
        fprintf(stderr, "%s\n", slm_errmsg());
        return 1;
    }
    slm_dist_set_timeout(60);
    RUN(test_allreduce_bcast_allgather);
    RUN(test_agree);
    RUN(test_agree_values);
    RUN(test_groups_nonblocking);
    RUN(test_bf16_rounding);
    int rc = slm_dist_rank() == 0 ? TEST_SUMMARY() : (slm_test_failed_ ? 1 : 0);
    int64_t bad = rc;
    slm_dist_allreduce(&bad, 1, SLM_DTYPE_I64, SLM_OP_MAX, "result");
    slm_dist_finalize();
    return bad ? 1 : 0;
}
