// shardlm bench-peak: the measured sgemm rate that MFU figures are relative to.
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd.h"
#include "device/device.h"
#include "train/train.h"

typedef struct bench_args {
    int64_t n, reps, threads;
    bool bf16;
} bench_args;

static const slm_opt k_bench_opts[] = {
    {.name = "--n",
     .type = SLM_OPT_INT64,
     .off = offsetof(bench_args, n),
     .meta = "N",
     .help = "matrix size",
     .ilo = 16,
     .ihi = 16384},
    {.name = "--reps",
     .type = SLM_OPT_INT64,
     .off = offsetof(bench_args, reps),
     .meta = "R",
     .help = "GEMMs timed (the best counts)",
     .ilo = 1,
     .ihi = 1000},
    {.name = "--threads",
     .type = SLM_OPT_INT64,
     .off = offsetof(bench_args, threads),
     .meta = "T",
     .help = "OpenMP threads",
     .ilo = 1,
     .ihi = 4096,
     .def = "environment"},
    {.name = "--bf16",
     .type = SLM_OPT_FLAG,
     .off = offsetof(bench_args, bf16),
     .help = "also the bf16 GEMM rate (bf16 inputs, fp32 accumulation; oneDNN where the CPU "
             "has AVX512-BF16 or AMX) and the instruction set oneDNN reports; not cached"},
    {.type = SLM_OPT_END},
};

static const slm_cli k_bench_cli = {
    .cmd = "bench-peak",
    .usage = "usage: shardlm bench-peak [--n N] [--reps R] [--threads T] [--bf16]\n"
             "Prints the best sgemm rate (GFLOP/s) of R square N x N fp32 GEMMs through\n"
             "OpenBLAS, the denominator of shardlm's MFU figures, and records it as this\n"
             "machine's peak (CPU model and thread count) when it beats the cached one\n"
             "($SHARDLM_CACHE_DIR, else ~/.cache/shardlm; docs/training.md \"MFU\").\n\n",
    .opts = k_bench_opts,
    .footer = "\nexit codes: 0 ok, 1 write error, 2 usage error\n",
};

int slm_cmd_bench_peak(int argc, char **argv) {
    bench_args x = {.n = 2048, .reps = 5, .threads = 0};
    int rc = slm_opt_parse(&k_bench_cli, argc, argv, &x, NULL);
    if (rc >= 0) return rc;
    int64_t n = x.n, reps = x.reps, threads = x.threads;
    slm_device *dev = slm_device_cpu(); // the CPU's kernels split GEMMs over its OpenMP threads
    int nt = slm_device_set_threads(dev, (int)threads); // 0: as the environment set them
    double g = slm_dev_gemm_peak_gflops(dev, false, (int)n, (int)reps);
    printf("sgemm peak %.1f GFLOP/s (n %lld, best of %lld, %d threads)\n", g, (long long)n,
           (long long)reps, nt);
    if (x.bf16)
        printf("bf16 GEMM peak %.1f GFLOP/s (n %lld, best of %lld, %d threads; oneDNN ISA %s%s)\n",
               slm_dev_gemm_peak_gflops(dev, true, (int)n, (int)reps), (long long)n,
               (long long)reps, nt, slm_dev_bf16_isa(dev),
               getenv("SLM_BF16_GEMM") ? ", SLM_BF16_GEMM set" : "");
    char key[256];
    slm_peak_key(nt, key, sizeof key);
    if (slm_peak_cache_raise(key, g)) slm_warn("bench-peak: %s", slm_errmsg());
    char *path = slm_peak_cache_path();
    double c = slm_peak_cache_get(key);
    if (path && isfinite(c))
        printf("MFU peak of this machine: %.1f GFLOP/s (%s, in %s)\n", c, key, path);
    free(path);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        slm_error("bench-peak: write to stdout failed: %s", strerror(errno ? errno : EIO));
        return SLM_EXIT_ERROR;
    }
    return SLM_EXIT_OK;
}
