// dist/: collectives give the right values in a world of one (singleton init) and under
// mpirun -np N; slm_dist_agree returns the failing rank's status and message on every rank.
#include "dist/dist.h"
#include "test.h"

static void test_allreduce_bcast_allgather(void) {
    int r = slm_dist_rank(), w = slm_dist_world();
    double x = r + 1;
    slm_dist_allreduce(&x, 1, SLM_DT_F64, SLM_OP_SUM, "test sum");
    CHECK_CLOSE(x, w * (w + 1) / 2.0, 0, 0);
    int64_t mx = r;
    slm_dist_allreduce(&mx, 1, SLM_DT_I64, SLM_OP_MAX, "test max");
    CHECK_EQ_INT(mx, w - 1);
    float f[3] = {0, 0, 0};
    if (r == 0) f[0] = 1.5f, f[1] = 2.5f, f[2] = -3.0f;
    slm_dist_bcast(f, 3, SLM_DT_F32, 0, "test bcast");
    CHECK_CLOSE(f[2], -3.0, 0, 0);
    int64_t mine = 10 * r, all[64];
    slm_dist_allgather(&mine, all, 1, SLM_DT_I64, "test allgather");
    for (int i = 0; i < w; i++) CHECK_EQ_INT(all[i], 10 * i);
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

int main(int argc, char **argv) {
    if (slm_dist_init(&argc, &argv)) {
        fprintf(stderr, "%s\n", slm_errmsg());
        return 1;
    }
    slm_dist_set_timeout(60);
    RUN(test_allreduce_bcast_allgather);
    RUN(test_agree);
    int rc = slm_dist_rank() == 0 ? TEST_SUMMARY() : (slm_test_failed_ ? 1 : 0);
    int64_t bad = rc;
    slm_dist_allreduce(&bad, 1, SLM_DT_I64, SLM_OP_MAX, "result");
    slm_dist_finalize();
    return bad ? 1 : 0;
}
