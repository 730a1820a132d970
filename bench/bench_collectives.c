// All-gather / reduce-scatter / all-reduce bandwidth of the dist/ layer on this machine (not a
// test). Run under mpirun -np N; rank 0 prints one row per op and size:
//   algbw = bytes of the full buffer / time;  busbw = algbw x (N-1)/N (all-gather,
//   reduce-scatter) or x 2(N-1)/N (all-reduce), the nccl-tests convention, which is the per-rank
//   link bandwidth the ring algorithm needs and so compares across N.
// Usage: mpirun -np N bench_collectives [MAX_MIB] [REPS]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

int main(int argc, char **argv) {
    if (slm_dist_init(&argc, &argv)) return 1;
    int max_mib = argc > 1 ? atoi(argv[1]) : 64, reps = argc > 2 ? atoi(argv[2]) : 5;
    int N = slm_dist_world(), r = slm_dist_rank();
    slm_comm *w = slm_comm_world();
    size_t max_bytes = (size_t)max_mib << 20;
    float *full = slm_xaligned(max_bytes), *shard = slm_xaligned(max_bytes);
    memset(full, 0, max_bytes);
    memset(shard, 0, max_bytes);
    if (r == 0)
        printf("| op | N | MiB (full buffer) | ms | algbw GB/s | busbw GB/s "
               "|\n|---|---:|---:|---:|---:|---:|\n");
    const char *ops[3] = {"all-gather", "reduce-scatter", "all-reduce"};
    for (size_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 4) {
        int64_t n_full = (int64_t)(bytes / 4) / N * N, n_shard = n_full / N;
        for (int op = 0; op < 3; op++) {
            double best = 1e30;
            for (int i = 0; i < reps + 1; i++) {
                slm_comm_barrier(w, "bench barrier");
                double t0 = slm_time_s();
                if (op == 0)
                    slm_comm_allgather(w, shard, full, n_shard, SLM_DTYPE_F32, "bench all-gather");
                else if (op == 1)
                    slm_comm_reduce_scatter(w, full, shard, n_shard, SLM_DTYPE_F32, SLM_OP_SUM,
                                            "bench reduce-scatter");
                else
                    slm_comm_allreduce(w, full, n_full, SLM_DTYPE_F32, SLM_OP_SUM,
                                       "bench all-reduce");
                double dt = slm_time_s() - t0;
                slm_dist_allreduce(&dt, 1, SLM_DTYPE_F64, SLM_OP_MAX, "bench time");
                if (i > 0 && dt < best) best = dt; // first run warms up
            }
            double alg = (double)n_full * 4 / best / 1e9;
            double bus = alg * (op == 2 ? 2.0 : 1.0) * (N - 1) / (double)N;
            if (r == 0)
                printf("| %s | %d | %.0f | %.3f | %.2f | %.2f |\n", ops[op], N,
                       (double)n_full * 4 / 1048576.0, best * 1e3, alg, bus);
        }
    }
    free(full);
    free(shard);
    slm_dist_finalize();
    return 0;
}
