// Loader batch-assembly throughput: opens a prepared dataset's train split and times
// slm_loader_next (shuffled windows gathered from mapped shards into int32 [B, T+1]).
// Usage: bench_loader DIR [T=1024] [B=8] [batches=2000]
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "data/data.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_loader DIR [T=1024] [B=8] [batches=2000]\n");
        return 2;
    }
    int T = argc > 2 ? atoi(argv[2]) : 1024, B = argc > 3 ? atoi(argv[3]) : 8;
    int n = argc > 4 ? atoi(argv[4]) : 2000;
    slm_loader_opts o = {argv[1], "train", T, B, 0, 1, 1234, true, false, 0};
    slm_loader *l = NULL;
    double t0 = slm_time_s();
    if (slm_loader_open(&o, &l)) {
        fprintf(stderr, "bench_loader: %s\n", slm_errmsg());
        return 1;
    }
    double t_open = slm_time_s() - t0;
    const slm_dataset *ds = slm_loader_dataset(l);
    int32_t *buf = slm_xmalloc(sizeof(int32_t) * (size_t)B * (size_t)(T + 1));
    uint64_t sink = 0;
    for (int i = 0; i < 20; i++)
        slm_loader_next(l, buf); // warm the page cache / TLB
    t0 = slm_time_s();
    for (int i = 0; i < n; i++) {
        slm_loader_next(l, buf);
        sink += (uint64_t)buf[(size_t)i % ((size_t)B * (size_t)(T + 1))];
    }
    double dt = slm_time_s() - t0;
    double toks = (double)n * B * (T + 1);
    printf("loader open+verify: %" PRIu64 " train tokens in %d shards, %.3f s (%.0f M tokens/s)\n",
           ds->train.n_tokens, ds->train.n_shards, t_open,
           (double)ds->train.n_tokens / t_open / 1e6);
    printf("loader next: B=%d T=%d, %d batches, %.3f s, %.1f M tokens/s (checksum %" PRIu64 ")\n",
           B, T, n, dt, toks / dt / 1e6, sink);
    free(buf);
    slm_loader_free(l);
    return 0;
}
