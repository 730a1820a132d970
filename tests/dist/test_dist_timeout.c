// A stuck peer ends the job instead of hanging it: rank 1 never joins the collective, rank 0's
// bounded wait expires after 1 s, logs the op, the context (step, FSDP unit) and the group, and
// calls MPI_Abort. Run by timeout_check.sh, which expects a non-zero exit and that message.
#include <unistd.h>

#include "dist/dist.h"

int main(int argc, char **argv) {
    if (slm_dist_init(&argc, &argv)) return 1;
    slm_dist_set_timeout(1.0);
    slm_comm *g = slm_comm_split(slm_comm_world(), 0, slm_dist_rank(), "shard group 0 of 1");
    slm_dist_set_context("step 7, backward, FSDP unit 3");
    if (slm_dist_rank() == 1) {
        sleep(30); // stuck: never reaches the collective (killed by the abort)
    } else {
        float x[4] = {0}, y[8];
        slm_dist_req q;
        slm_dist_iallgather(g, x, y, 4, SLM_DTYPE_F32, "all-gather (params)", &q);
        slm_dist_wait(&q);
    }
    slm_comm_free(g);
    slm_dist_finalize();
    return 0; // not reached on rank 0
}
