// The parts of dist/'s device collectives that run without a GPU: the local rank read from the
// launchers' variables (mpirun's OMPI_COMM_WORLD_LOCAL_RANK first, then srun's SLURM_LOCALID,
// then MPICH's MPI_LOCALRANKID; a bad value named), and on a machine without a GPU (or a build
// without CUDA) every entry point failing with a message instead of crashing. World of one, no
// mpirun.
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "dist/dist.h"
#include "test.h"

static void unset_all(void) {
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("SLURM_LOCALID");
    unsetenv("MPI_LOCALRANKID");
}

static void test_local_rank(void) {
    int lr = -1;
    unset_all();
    CHECK_OK(slm_dist_local_rank(&lr));
    CHECK_EQ_INT(lr, 0); // world of one, no launcher
    setenv("SLURM_LOCALID", "5", 1);
    CHECK_OK(slm_dist_local_rank(&lr));
    CHECK_EQ_INT(lr, 5);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1); // mpirun's wins over srun's
    CHECK_OK(slm_dist_local_rank(&lr));
    CHECK_EQ_INT(lr, 3);
    unset_all();
    setenv("MPI_LOCALRANKID", "2", 1);
    CHECK_OK(slm_dist_local_rank(&lr));
    CHECK_EQ_INT(lr, 2);
    const char *bad[] = {"x", "-1", "3x", "99999999999"};
    for (int i = 0; i < 4; i++) {
        setenv("SLURM_LOCALID", bad[i], 1);
        CHECK_EQ_INT(slm_dist_local_rank(&lr), SLM_E_ARG);
        CHECK_MSG(strstr(slm_errmsg(), "SLURM_LOCALID") && strstr(slm_errmsg(), bad[i]),
                  "message: %s", slm_errmsg());
    }
    unset_all();
}

// No GPU here (CI): selection and communicators fail with a status, no crash, nothing leaked
// to the caller. (On a machine with a GPU this test only checks the calls return.)
static void test_without_gpu(void) {
    int dev = 0;
    slm_status st = slm_dist_select_device(&dev);
    if (st == SLM_OK) { // a GPU is there: nothing to check here (tests/gpu covers it)
        printf("note: a GPU is present; the no-GPU checks are skipped\n");
        return;
    }
    CHECK(st == SLM_E_UNSUPPORTED);
    CHECK_EQ_INT(dev, -1);
    CHECK_MSG(strstr(slm_errmsg(), "CUDA") != NULL, "message: %s", slm_errmsg());
    slm_dcomm *dc = (slm_dcomm *)&dev;
    st = slm_dcomm_create(slm_comm_world(), SLM_DCOMM_AUTO, &dc);
    CHECK(st != SLM_OK);
    CHECK(dc == NULL);
    CHECK(slm_errmsg()[0] != 0);
    slm_dcomm_req q;
    memset(&q, 0, sizeof q);
    bool done = false;
    CHECK_OK(slm_dcomm_test(&q, &done)); // an inactive request is complete
    CHECK(done);
    CHECK_OK(slm_dcomm_wait(&q));
    slm_dcomm_free(NULL);
}

int main(void) {
    RUN(test_local_rank);
    RUN(test_without_gpu);
    return TEST_SUMMARY();
}
