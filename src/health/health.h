// health: the preflight health check of a job (`shardlm healthcheck`, run alone under mpirun or
// by `shardlm launch` before each training attempt). Every rank runs known-answer tests and the
// ranks then test their collectives together:
//  per rank   gemm      a fixed-input fp32 GEMM (slm_dev_linear_fwd on the CPU device, the
//                       one training computes on) against an fp64 reference computed here,
//                       within the rounding-error bound gamma_K * (|A| |B|)
//                       (Higham, Accuracy and Stability of Numerical Algorithms, 3.5), which
//                       holds for any summation order, blocking or FMA use;
//             model     one forward and backward of a tiny SwiGLU MLP with a cross-entropy head
//                       (the device ops training uses: linear, swiglu, fused cross-entropy) against
//                       an fp64 reference, each output within a first-order error bound
//                       propagated alongside the reference (see health.c);
//             bitwise   ranks whose hosts report the same CPU model string must produce
//                       bit-identical gemm and model outputs (a bad core computes within no
//                       bound but its own);
//             mem       allocate, write and read back a configurable number of bytes;
//             dir       the run directory (and its checkpoints/ when present) writable (a
//                       probe file written, fsync'ed, read back and removed) with free space
//                       for the estimated checkpoint;
//  collective allreduce, allgather, reduce_scatter on rank-dependent integer-valued data whose
//             exact results every rank checks; then the bandwidth of an all-reduce between one
//             rank of each pair of hosts (and two ranks of one host) in GB/s (bus bandwidth as
//             nccl-tests defines it: for two ranks, bytes / time), so a slow link is named.
// Fault injection (tests): SHARDLM_FAULT=fail-health:rank=R[:check=NAME][:always] (parsed by
// base/fault.h's slm_fault_*) corrupts check NAME (every check without check=) on world rank R: the
// data or result is altered, so the check's own comparison catches it; like every fault it
// fires only when SHARDLM_ATTEMPT is unset or 1, unless :always is appended.
#ifndef SLM_HEALTH_H
#define SLM_HEALTH_H

#include "base/base.h"

// The checks, as bits of slm_health_rank.failed.
enum {
    SLM_HEALTH_GEMM = 1,
    SLM_HEALTH_MODEL = 2,
    SLM_HEALTH_BITWISE = 4,
    SLM_HEALTH_MEM = 8,
    SLM_HEALTH_DIR = 16,
    SLM_HEALTH_ALLREDUCE = 32,
    SLM_HEALTH_ALLGATHER = 64,
    SLM_HEALTH_REDUCE_SCATTER = 128,
    SLM_HEALTH_ECC = 256, // uncorrected ECC errors on the rank's GPU (NVML); passes on a CPU
    SLM_HEALTH_N_CHECKS = 9,
};
// The name of check bit i ("gemm", "model", ...).
const char *slm_health_check_name(int i);

typedef struct slm_health_opts {
    size_t mem_bytes;            // memory test size per rank (0: skip)
    const char *run_dir;         // run directory to test (NULL: skip the dir check)
    double ckpt_bytes;           // free space required for one checkpoint (bytes; 0: none)
    size_t bw_bytes;             // all-reduce message size for the bandwidth test (0: skip)
    int bw_reps;                 // timed all-reduces per pair (best counts)
    double min_gbps;             // > 0: a pair below this fails the check (names both hosts)
    double collective_timeout_s; // bound on every collective wait
    const char *device;          // the device the known-answer GEMM runs on (device.h spec: "cpu",
                        // "cuda", "cuda:N"; NULL: the CPU). On a GPU the GEMM is bf16 compute,
                        // checked against fp64 with the bf16 bound; ECC errors are read (NVML)
} slm_health_opts;

// Defaults: 256 MiB memory, 8 MiB x 5 all-reduces, no minimum bandwidth, timeout 120 s.
void slm_health_opts_default(slm_health_opts *o);

// One rank's results (the same array on every rank after slm_health_run).
typedef struct slm_health_rank {
    int32_t rank;
    uint32_t failed;               // SLM_HEALTH_* bits that failed
    char host[64];                 // gethostname
    char cpu[96];                  // /proc/cpuinfo "model name" (or "unknown")
    char device[96];               // slm_device_describe of the checked device ("cpu", ...)
    double ecc;                    // uncorrected ECC errors of the GPU (-1: not a GPU / n/a)
    double gemm_err, gemm_bound;   // max |fp32 - fp64| / its bound's value (same element)
    double model_err, model_bound; // worst err / bound ratio's numerator and denominator
    uint64_t out_hash;             // XXH64 of the gemm and model fp32 outputs
    double free_bytes;             // free space of the run dir's file system (-1: not checked)
    char msg[192];                 // first failure in words ("" when ok)
} slm_health_rank;

// All-reduce bandwidth between two ranks (hosts a and b; a == b: within one host).
typedef struct slm_health_link {
    int rank_a, rank_b;
    char host_a[64], host_b[64];
    double gbps; // bus bandwidth, GB/s (1e9 bytes / s)
    bool slow;   // below min_gbps
} slm_health_link;

typedef struct slm_health_report {
    int world;
    slm_health_rank *ranks; // [world], owned
    int n_links;
    slm_health_link *links; // [n_links], owned
    bool ok;                // no rank failed and no link was slow
} slm_health_report;

// Runs every check on every rank (collective over the world; a world of one skips the
// collective checks' communication but still checks their local results). Fills `rep` on every
// rank. Returns SLM_OK when the checks ran (rep->ok says whether they passed); an error only
// when a check could not run at all (SLM_E_NOMEM for the test buffers; SLM_E_ARG for a bad
// SHARDLM_FAULT, on every rank alike).
slm_status slm_health_run(const slm_health_opts *o, slm_health_report *rep);
void slm_health_report_free(slm_health_report *rep);
// Writes the report as JSON to `path` (atomic replace):
//   {"ok":B,"world":N,"ranks":[{"rank":R,"host":"H","cpu":"C","ok":B,"failed":["gemm",...],
//    "gemm_err":E,"gemm_bound":E,"model_err":E,"model_bound":E,"free_bytes":F,"msg":"..."}...],
//    "links":[{"rank_a":A,"rank_b":B,"host_a":"H","host_b":"H","gbps":G,"slow":B}...],
//    "failed_hosts":["H",...]}
slm_status slm_health_write_json(const slm_health_report *rep, const char *path);

#endif
