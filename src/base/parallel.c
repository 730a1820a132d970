// Host task parallelism (base.h slm_parallel_tasks): an OpenMP loop with a dynamic schedule of
// one task per chunk, so tasks of very different sizes (a norm weight and an embedding) spread
// over the threads.
#include "base/base.h"

void slm_parallel_tasks(int n, void (*fn)(void *ctx, int i), void *ctx) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++)
        fn(ctx, i);
}
