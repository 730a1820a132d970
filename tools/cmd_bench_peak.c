// shardlm bench-peak: the measured sgemm rate that MFU figures are relative to.
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cmd.h"
#include "kernels/kernels.h"

int slm_cmd_bench_peak(int argc, char **argv) {
    int64_t n = 2048, reps = 5, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: shardlm bench-peak [--n N] [--reps R] [--threads T]\n"
                   "Prints the best sgemm rate (GFLOP/s) of R square N x N fp32 GEMMs through\n"
                   "OpenBLAS, the denominator of shardlm's MFU figures (default N 2048, R 5).\n"
                   "exit codes: 0 ok, 1 write error, 2 usage error\n");
            return SLM_EXIT_OK;
        }
        slm_status st = SLM_OK;
        if (strcmp(a, "--n") && strcmp(a, "--reps") && strcmp(a, "--threads")) {
            slm_error("bench-peak: unknown option %s (see --help)", a);
            return SLM_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            slm_error("bench-peak: option %s needs a value", a);
            return SLM_EXIT_USAGE;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--n")) st = slm_parse_i64(a, v, 16, 16384, &n);
        else if (!strcmp(a, "--reps")) st = slm_parse_i64(a, v, 1, 1000, &reps);
        else st = slm_parse_i64(a, v, 1, 4096, &threads);
        if (st) {
            slm_error("bench-peak: %s", slm_errmsg());
            return SLM_EXIT_USAGE;
        }
    }
    if (threads > 0) omp_set_num_threads((int)threads); // kernels/ splits GEMMs over OpenMP
    double g = slm_sgemm_peak_gflops((int)n, (int)reps);
    printf("sgemm peak %.1f GFLOP/s (n %lld, best of %lld, %d threads)\n", g, (long long)n,
           (long long)reps, omp_get_max_threads());
    if (fflush(stdout) != 0 || ferror(stdout)) {
        slm_error("bench-peak: write to stdout failed: %s", strerror(errno ? errno : EIO));
        return SLM_EXIT_ERROR;
    }
    return SLM_EXIT_OK;
}
