// The device collectives of dist.h (issue 22) under mpirun -np 2: NCCL and the host-staged MPI
// path against the host MPI collectives on the same random data (never zeros), device outputs
// poisoned (NaN bit patterns) before each run, the inputs written on a compute stream the
// collective must wait for, HYBRID_SHARD splits, the compute stream waiting on a collective
// through its event, and the bounded wait: a rank that never joins an NCCL all-reduce makes the
// other's wait abort the communicator and return SLM_E_TIMEOUT with the MPI path's message.
// Which paths run depends on the machine: NCCL needs one GPU per rank (2 GPUs); on one GPU both
// ranks share it, AUTO takes the staged path, and asking for NCCL must fail cleanly.
// Exit 77 (skip) without a GPU, checked before MPI starts, and in a world of one.
//
// Bounds: all-gather is a copy (bitwise). A sum over n ranks computed in any order with a
// rounding after each of its n - 1 additions is within (n - 1) u sum|x| of the exact sum (u =
// 2^-24 for fp32; 2^-8 for bf16, whose sum NCCL and the MPI user op both round to bf16 after each
// addition), so NCCL's ring / tree order and MPI's are within 2 (n - 1) u sum|x| of each other;
// sum|x| per element comes from a host all-reduce of |x| in fp64. (At n = 2 both are one
// rounding of the same exact sum and agree bitwise; the bound does not rely on it.)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "dist/dist.h"
#include "kernels/kernels.h"
#include "test.h"

#define CU(call)                                                                                   \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) SLM_TEST_FAIL_("%s: %s", #call, slm_cuda_strerror(rc_));                          \
    } while (0)

static int g_rank, g_world;
static void *g_compute; // the "compute" stream (cudaStream_t)
static slm_dcomm *g_dc; // the communicator under test
static const char *g_label;

// Rank-specific random data, never zero: fp32, or bf16 bit patterns of such values.
static void *gen(int64_t n, slm_dtype dt, uint64_t salt) {
    slm_rng r;
    slm_rng_seed(&r, 1000 + 7919 * (uint64_t)g_rank + salt);
    void *out = slm_xmalloc((size_t)n * slm_dtype_bytes(dt));
    for (int64_t i = 0; i < n; i++) {
        float v = slm_rng_normal(&r);
        if (v == 0.0f) v = 0.5f;
        if (dt == SLM_DTYPE_BF16)
            ((uint16_t *)out)[i] = slm_f32_to_bf16_1(v);
        else
            ((float *)out)[i] = v;
    }
    return out;
}

static double elem(const void *p, int64_t i, slm_dtype dt) {
    return dt == SLM_DTYPE_BF16 ? (double)slm_bf16_to_f32_1(((const uint16_t *)p)[i])
                                : (double)((const float *)p)[i];
}

// sum over the ranks of host of |x[i]| (fp64), i < n.
static double *abs_sum(slm_comm *host, const void *x, int64_t n, slm_dtype dt) {
    double *a = slm_xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        a[i] = fabs(elem(x, i, dt));
    slm_comm_allreduce(host, a, n, SLM_DTYPE_F64, SLM_OP_SUM, "test abs sums");
    return a;
}

// The collective `which` (0 all-gather, 1 reduce-scatter, 2 all-reduce) on g_dc against the
// host collective on the same input.
static void one(int which, slm_dtype dt) {
    slm_comm *host = slm_dcomm_host(g_dc);
    int n = slm_comm_size(host), me = slm_comm_rank(host);
    const int64_t count = 1031; // odd: no vector-width luck
    size_t esz = slm_dtype_bytes(dt);
    int64_t in_n = which == 1 ? count * n : count, out_n = which == 0 ? count * n : count;
    void *in = gen(in_n, dt, (uint64_t)which);
    void *want = slm_xmalloc((size_t)out_n * esz), *got = slm_xmalloc((size_t)out_n * esz);
    if (which == 0) slm_comm_allgather(host, in, want, count, dt, "test allgather (host)");
    if (which == 1)
        slm_comm_reduce_scatter(host, in, want, count, dt, SLM_OP_SUM,
                                "test reduce_scatter (host)");
    if (which == 2) {
        memcpy(want, in, (size_t)count * esz);
        slm_comm_allreduce(host, want, count, dt, SLM_OP_SUM, "test allreduce (host)");
    }
    double *as = which ? abs_sum(host, in, in_n, dt) : NULL;

    void *d_in = NULL, *d_out = NULL;
    CU(slm_cuda_malloc(&d_in, (size_t)in_n * esz));
    CU(slm_cuda_malloc(&d_out, (size_t)out_n * esz));
    CU(slm_cuda_memset_async(d_in, 0xff, (size_t)in_n * esz, NULL));
    CU(slm_cuda_memset_async(d_out, 0xff, (size_t)out_n * esz, NULL));
    CU(slm_cuda_stream_sync(NULL));
    // The input is written on the compute stream, not synchronized: the collective must be
    // ordered after it (its `after` stream), or it reads the poison.
    CU(slm_cuda_memcpy_async(d_in, in, (size_t)in_n * esz, g_compute));
    slm_dcomm_req q;
    slm_status st = SLM_OK;
    if (which == 0)
        st = slm_dcomm_iallgather(g_dc, d_in, d_out, count, dt, g_compute, "test allgather", &q);
    if (which == 1)
        st = slm_dcomm_ireduce_scatter(g_dc, d_in, d_out, count, dt, SLM_OP_SUM, g_compute,
                                       "test reduce_scatter", &q);
    if (which == 2) {
        CU(slm_cuda_memcpy_async(d_out, d_in, (size_t)count * esz, g_compute));
        st = slm_dcomm_iallreduce(g_dc, d_out, count, dt, SLM_OP_SUM, g_compute, "test allreduce",
                                  &q);
    }
    CHECK_OK(st);
    // The consumer: the compute stream waits on the collective's event; the host reads after
    // the compute stream, then the bounded wait releases the request.
    CHECK_OK(slm_dcomm_stream_wait(&q, g_compute));
    CU(slm_cuda_memcpy_async(got, d_out, (size_t)out_n * esz, g_compute));
    CU(slm_cuda_stream_sync(g_compute));
    CHECK_OK(slm_dcomm_wait(&q));
    CHECK(!q.active);
    double u = dt == SLM_DTYPE_BF16 ? 0x1p-8 : 0x1p-24;
    int bad = 0;
    for (int64_t i = 0; i < out_n && bad < 5; i++) {
        double g = elem(got, i, dt), w = elem(want, i, dt);
        bool ok;
        if (which == 0) {
            ok = memcmp((char *)got + i * esz, (char *)want + i * esz, esz) == 0;
        } else {
            double s = as[which == 1 ? (int64_t)me * count + i : i];
            ok = fabs(g - w) <= 2.0 * (n - 1) * u * s * 1.0001;
        }
        if (!ok) {
            fprintf(stderr, "  %s %s %s rank %d [%lld]: device %.9g, host %.9g\n", g_label,
                    which == 0   ? "allgather"
                    : which == 1 ? "reduce_scatter"
                                 : "allreduce",
                    dt == SLM_DTYPE_BF16 ? "bf16" : "fp32", g_rank, (long long)i, g, w);
            bad++;
        }
    }
    slm_cuda_free(d_in);
    slm_cuda_free(d_out);
    free(in), free(want), free(got), free(as);
    CHECK_MSG(bad == 0, "%s: device collective differs from the host one beyond the bound",
              g_label);
}

static void all_collectives(void) {
    for (int dt = 0; dt < 2; dt++)
        for (int which = 0; which < 3; which++) {
            one(which, dt ? SLM_DTYPE_BF16 : SLM_DTYPE_F32);
            if (slm_test_cur_failed_) return;
        }
}

// The flight recorder holds the device collectives like the MPI ones: the last "test
// allreduce" on the world is recorded there, done, with its bytes (1031 elements of bf16).
static void test_flight(void) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/slm_test_nccl_flight_%d_%d.json", (int)getpid(), g_rank);
    slm_flight_set_dump_path(path, g_rank, g_world);
    CHECK(slm_flight_dump("test"));
    slm_flight_set_dump_path(NULL, g_rank, g_world);
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(slm_file_read_all(path, &text, &len));
    remove(path);
    slm_flight_file f;
    slm_status st = slm_flight_parse(text, len, path, &f);
    free(text);
    CHECK_OK(st);
    int found = -1;
    for (int i = 0; i < f.n_entries; i++)
        if (f.entries[i].what && !strcmp(f.entries[i].what, "test allreduce") &&
            !strcmp(f.entries[i].group, "world"))
            found = i; // the newest
    bool ok = found >= 0 && !strcmp(f.entries[found].op, "allreduce") &&
              !strcmp(f.entries[found].state, "done") && f.entries[found].bytes == 1031 * 2;
    slm_flight_file_free(&f);
    CHECK_MSG(ok, "no done \"test allreduce\" entry of 2062 bytes on group world (found %d)",
              found);
}

static void run_kind(slm_dcomm_kind kind, const char *label) {
    slm_dcomm *dc = NULL;
    CHECK_OK(slm_dcomm_create(slm_comm_world(), kind, &dc));
    CHECK_EQ_INT(slm_dcomm_kind_of(dc), kind);
    g_dc = dc, g_label = label;
    all_collectives();
    if (!slm_test_cur_failed_) test_flight();
    if (!slm_test_cur_failed_) { // HYBRID_SHARD: shard groups of 2 ranks, replica groups across
        slm_dcomm *shard = NULL, *rep = NULL;
        CHECK_OK(slm_dcomm_split(dc, g_rank / 2, g_rank, "shard group", &shard));
        CHECK_OK(slm_dcomm_split(dc, g_rank % 2, g_rank, "replica group", &rep));
        g_dc = shard, g_label = "shard group";
        all_collectives();
        g_dc = rep, g_label = "replica group";
        if (!slm_test_cur_failed_) all_collectives();
        slm_dcomm_free(shard);
        slm_dcomm_free(rep);
    }
    slm_dcomm_free(dc);
}

static void test_staged(void) {
    run_kind(SLM_DCOMM_STAGED, "staged");
}
static void test_nccl(void) {
    run_kind(SLM_DCOMM_NCCL, "nccl");
}

// Ranks sharing a GPU: NCCL refused with a message, no hang.
static void test_nccl_refused(void) {
    slm_dcomm *dc = NULL;
    slm_status st = slm_dcomm_create(slm_comm_world(), SLM_DCOMM_NCCL, &dc);
    CHECK_EQ_INT(st, SLM_E_UNSUPPORTED);
    CHECK(dc == NULL);
    CHECK_MSG(strstr(slm_errmsg(), "share one GPU") != NULL, "message: %s", slm_errmsg());
}

// Rank 1 never joins: rank 0's start or wait gives up after 2 s, aborts the communicator and
// returns the MPI path's message shape; the communicator refuses further collectives.
static void test_timeout(void) {
    slm_dcomm *dc = NULL;
    CHECK_OK(slm_dcomm_create(slm_comm_world(), SLM_DCOMM_NCCL, &dc));
    if (g_rank != 0) return; // its communicator is left as it is (freeing it would flush)
    slm_dist_set_timeout(2.0);
    slm_dist_set_context("step 7, backward, FSDP unit 3");
    float *d = NULL;
    CU(slm_cuda_malloc((void **)&d, 64 * sizeof(float)));
    CU(slm_cuda_memset_async(d, 0, 64 * sizeof(float), NULL));
    slm_dcomm_req q;
    // NCCL may connect to the peer inside the call (lazy connection set-up): the deadline then
    // expires in the start, with the same message; otherwise in the wait.
    slm_status st =
        slm_dcomm_iallreduce(dc, d, 64, SLM_DTYPE_F32, SLM_OP_SUM, NULL, "all-reduce (grads)", &q);
    if (st == SLM_OK) st = slm_dcomm_wait(&q);
    slm_dist_set_timeout(60.0);
    slm_dist_set_context("");
    CHECK_EQ_INT(st, SLM_E_TIMEOUT);
    const char *want[] = {"collective all-reduce (grads) timed out after 2 s",
                          "step 7, backward, FSDP unit 3", "group: world, 2 ranks",
                          "NCCL communicator aborted"};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(strstr(slm_errmsg(), want[i]) != NULL, "message lacks \"%s\": %s", want[i],
                  slm_errmsg());
    CHECK(!q.active);
    CHECK_EQ_INT(
        slm_dcomm_iallreduce(dc, d, 64, SLM_DTYPE_F32, SLM_OP_SUM, NULL, "after abort", &q),
        SLM_E_COMM);
    slm_dcomm_free(dc);
    slm_cuda_free(d);
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (slm_cuda_device_count(&ndev) != 0 || ndev == 0) {
        printf("skip: no CUDA device (test_nccl needs a GPU)\n");
        return 77;
    }
    if (slm_dist_init(&argc, &argv)) return 1;
    g_rank = slm_dist_rank(), g_world = slm_dist_world();
    if (g_world < 2) {
        printf("skip: run under mpirun -np 2 (world of one)\n");
        slm_dist_finalize();
        return 77;
    }
    slm_dist_set_timeout(60.0);
    int dev = -1;
    if (slm_dist_select_device(&dev) || slm_cuda_stream_create(&g_compute)) {
        fprintf(stderr, "rank %d: %s\n", g_rank, slm_errmsg());
        return 1;
    }
    slm_dcomm *probe = NULL;
    if (slm_dcomm_create(slm_comm_world(), SLM_DCOMM_AUTO, &probe)) {
        fprintf(stderr, "rank %d: %s\n", g_rank, slm_errmsg());
        return 1;
    }
    bool nccl = slm_dcomm_kind_of(probe) == SLM_DCOMM_NCCL;
    slm_dcomm_free(probe);
    if (g_rank == 0)
        printf("%d ranks, %d GPU(s) on rank 0; AUTO chose %s\n", g_world, ndev,
               nccl ? "NCCL" : "the host-staged path");
    RUN(test_staged);
    if (nccl) {
        RUN(test_nccl);
        RUN(test_timeout);
        slm_dist_barrier("after the timeout probe"); // rank 1 waits here for rank 0
    } else if (slm_dcomm_available(SLM_DCOMM_NCCL)) {
        RUN(test_nccl_refused);
    }
    slm_cuda_stream_destroy(g_compute);
    int rc = TEST_SUMMARY();
    slm_dist_finalize();
    return rc;
}
