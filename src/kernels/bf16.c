// bf16 GEMMs on the CPU (issue 21, "bf16 compute"): the inputs are rounded to bfloat16 (round to
// nearest even), the products accumulate in fp32 and the result is fp32, as tensor cores and
// PyTorch's autocast(bfloat16) compute. Two paths give those numerics:
//  - oneDNN's matmul primitive (Debian's libdnnl 2.6) on bf16 copies of the operands: its brgemm
//    kernels use AVX512-BF16 (vdpbf16ps) or AMX tiles where the CPU has them. One primitive per
//    shape, created at first use and kept (a small table under a mutex); oneDNN's choice of
//    implementation (e.g. "brg:avx512_core_bf16") is logged once per shape.
//  - where oneDNN has no bf16 matmul for the CPU (AVX2-only parts) or SLM_BF16_GEMM=sgemm: the
//    operands rounded to bf16 and widened back to fp32, then OpenBLAS's sgemm (kernels/blas.c).
//    A product of two bf16 values (8-bit significands) is exact in fp32 (24 bits), so this is the
//    same arithmetic up to the order of the fp32 additions; slower, said once in the log.
// Both keep the same error bound (tests/kernels/test_bf16.c states it), and both are
// deterministic for a fixed shape and thread count (no atomics; fixed partitioning).
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

enum { PRIM_CACHE = 64 };

typedef struct prim_key {
    int64_t M, N, K, lda, ldb, ldc;
    bool ta, tb, accumulate;
} prim_key;

typedef struct prim_entry {
    prim_key key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a_md, b_md, c_md;
} prim_entry;

static struct {
    pthread_mutex_t mu;
    bool tried, ok; // engine / stream created (tried once)
    bool warned;    // the slow-path message was logged
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    prim_entry cache[PRIM_CACHE];
    int n_cache;
} g_dnnl = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool force_sgemm(void) {
    const char *e = getenv("SLM_BF16_GEMM");
    return e && strcmp(e, "sgemm") == 0;
}

// Creates the CPU engine and stream once. Under g_dnnl.mu.
static bool dnnl_ready(void) {
    if (!g_dnnl.tried) {
        g_dnnl.tried = true;
        g_dnnl.ok = dnnl_engine_create(&g_dnnl.eng, dnnl_cpu, 0) == dnnl_success &&
                    dnnl_stream_create(&g_dnnl.stream, g_dnnl.eng, dnnl_stream_default_flags) ==
                        dnnl_success;
    }
    return g_dnnl.ok;
}

// Row-major [rows, cols] with leading dimension ld, read transposed when `t`: logical [r, c]
// of op(X) has strides {1, ld} (transposed) or {ld, 1}.
static dnnl_status_t md_init(dnnl_memory_desc_t *md, int64_t r, int64_t c, int64_t ld, bool t,
                             dnnl_data_type_t dt) {
    dnnl_dims_t dims = {r, c};
    dnnl_dims_t strides = {t ? 1 : ld, t ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

// The primitive for `k` (created and cached on first use), or NULL when oneDNN has no bf16
// matmul for this CPU. Under g_dnnl.mu.
static prim_entry *prim_get(const prim_key *k) {
    for (int i = 0; i < g_dnnl.n_cache; i++)
        if (memcmp(&g_dnnl.cache[i].key, k, sizeof *k) == 0) return &g_dnnl.cache[i];
    prim_entry e = {.key = *k};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    bool ok = md_init(&e.a_md, k->M, k->K, k->lda, k->ta, dnnl_bf16) == dnnl_success &&
              md_init(&e.b_md, k->K, k->N, k->ldb, k->tb, dnnl_bf16) == dnnl_success &&
              md_init(&e.c_md, k->M, k->N, k->ldc, false, dnnl_f32) == dnnl_success &&
              dnnl_matmul_desc_init(&desc, &e.a_md, &e.b_md, NULL, &e.c_md) == dnnl_success &&
              dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && k->accumulate) // C = A B + 1.0 * C, the sum in fp32
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &desc, attr, g_dnnl.eng, NULL) == dnnl_success &&
         dnnl_primitive_create(&e.prim, pd) == dnnl_success;
    if (ok) {
        const char *impl = NULL;
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        slm_log(SLM_LOG_INFO, "kernels: bf16 matmul %lldx%lldx%lld%s%s: oneDNN %s (CPU ISA %s)",
                (long long)k->M, (long long)k->N, (long long)k->K, k->ta ? " A^T" : "",
                k->tb ? " B^T" : "", impl ? impl : "?", slm_bf16_gemm_isa());
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) return NULL;
    if (g_dnnl.n_cache == PRIM_CACHE) { // full: drop the oldest half (a model has few shapes)
        for (int i = 0; i < PRIM_CACHE / 2; i++)
            dnnl_primitive_destroy(g_dnnl.cache[i].prim);
        memmove(g_dnnl.cache, g_dnnl.cache + PRIM_CACHE / 2,
                sizeof g_dnnl.cache[0] * (PRIM_CACHE - PRIM_CACHE / 2));
        g_dnnl.n_cache -= PRIM_CACHE / 2;
    }
    g_dnnl.cache[g_dnnl.n_cache] = e;
    return &g_dnnl.cache[g_dnnl.n_cache++];
}

// dst[r * ld_dst + c] = bf16(src[r * ld + c]) for r < rows, c < cols; ld_dst = cols.
static void round_rows_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols,
                            int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; r++)
        slm_f32_to_bf16(src + r * ld, dst + r * cols, cols);
}

// dst = fp32(bf16(src)) for the same layout as round_rows_bf16.
static void round_rows_f32(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * cols + c] = slm_bf16_to_f32_1(slm_f32_to_bf16_1(src[r * ld + c]));
}

// The fallback: operands rounded through bf16, then the fp32 GEMM.
static void gemm_rounded_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                               int64_t lda, const float *B, int64_t ldb, bool accumulate, float *Cm,
                               int64_t ldc) {
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *a = slm_xaligned((size_t)(ar * ac) * sizeof(float));
    float *b = slm_xaligned((size_t)(br * bc) * sizeof(float));
    round_rows_f32(a, A, ar, ac, lda);
    round_rows_f32(b, B, br, bc, ldb);
    slm_sgemm_rowmajor(ta, tb, M, N, K, a, ac, b, bc, accumulate ? 1.0f : 0.0f, Cm, ldc);
    free(a);
    free(b);
}

void slm_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                   const float *B, int64_t ldb, bool accumulate, float *Cm, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int64_t i = 0; i < M; i++)
                memset(Cm + i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    prim_entry *e = NULL;
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    // The bf16 copies are dense: leading dimensions ac and bc.
    prim_key key = {.M = M,
                    .N = N,
                    .K = K,
                    .lda = ac,
                    .ldb = bc,
                    .ldc = ldc,
                    .ta = ta,
                    .tb = tb,
                    .accumulate = accumulate};
    pthread_mutex_lock(&g_dnnl.mu);
    if (!force_sgemm() && dnnl_ready()) e = prim_get(&key);
    if (!e && !g_dnnl.warned) {
        g_dnnl.warned = true;
        slm_log(SLM_LOG_WARN,
                "kernels: bf16 matmul %s: operands rounded to bf16, then the fp32 sgemm (the same "
                "numerics, slower than a CPU with AVX512-BF16 or AMX)",
                force_sgemm() ? "forced by SLM_BF16_GEMM=sgemm"
                              : "not available from oneDNN on this CPU (ISA "
                                "below AVX-512)");
    }
    if (!e) {
        pthread_mutex_unlock(&g_dnnl.mu);
        gemm_rounded_sgemm(ta, tb, M, N, K, A, lda, B, ldb, accumulate, Cm, ldc);
        return;
    }
    uint16_t *a = slm_xaligned((size_t)(ar * ac) * sizeof(uint16_t));
    uint16_t *b = slm_xaligned((size_t)(br * bc) * sizeof(uint16_t));
    round_rows_bf16(a, A, ar, ac, lda);
    round_rows_bf16(b, B, br, bc, ldb);
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    bool ok = dnnl_memory_create(&ma, &e->a_md, g_dnnl.eng, a) == dnnl_success &&
              dnnl_memory_create(&mb, &e->b_md, g_dnnl.eng, b) == dnnl_success &&
              dnnl_memory_create(&mc, &e->c_md, g_dnnl.eng, Cm) == dnnl_success;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    ok = ok && dnnl_primitive_execute(e->prim, g_dnnl.stream, 3, args) == dnnl_success &&
         dnnl_stream_wait(g_dnnl.stream) == dnnl_success;
    pthread_mutex_unlock(&g_dnnl.mu);
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    free(a);
    free(b);
    SLM_ASSERT(ok && "oneDNN bf16 matmul failed after its primitive was created");
}

void slm_linear_fwd(bool bf16, float *out, const float *inp, const float *W, int64_t N, int64_t I,
                    int64_t O, bool accumulate) {
    if (!bf16) {
        slm_matmul_fwd(out, inp, W, N, I, O, accumulate);
        return;
    }
    if (N <= 0 || O <= 0) return;
    slm_gemm_bf16(false, true, N, O, I, inp, I, W, I, accumulate, out, O); // inp W^T
}

void slm_linear_bwd(bool bf16, float *dinp, float *dW, const float *dout, const float *inp,
                    const float *W, int64_t N, int64_t I, int64_t O) {
    if (!bf16) {
        slm_matmul_bwd(dinp, dW, dout, inp, W, N, I, O);
        return;
    }
    if (N <= 0 || O <= 0 || I <= 0) return;
    if (dinp) slm_gemm_bf16(false, false, N, I, O, dout, O, W, I, true, dinp, I); // dout W
    if (dW) slm_gemm_bf16(true, false, O, I, N, dout, O, inp, I, true, dW, I);    // dout^T inp
}

void slm_round_bf16(float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        x[i] = slm_bf16_to_f32_1(slm_f32_to_bf16_1(x[i]));
}

const char *slm_bf16_gemm_isa(void) {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_amx:
        return "avx512_core_amx (AMX-BF16)";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "avx512_core_bf16 (AVX512-BF16)";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "avx512_core_vnni (no bf16 instructions)";
    case dnnl_cpu_isa_avx512_core:
        return "avx512_core (no bf16 instructions)";
    case dnnl_cpu_isa_avx2_vnni:
        return "avx2_vnni (no bf16 matmul in oneDNN)";
    case dnnl_cpu_isa_avx2:
        return "avx2 (no bf16 matmul in oneDNN)";
    default:
        return "below avx2 (no bf16 matmul in oneDNN)";
    }
}

static void gemm_bf16_square(int n, const float *a, const float *b, float *c) {
    slm_gemm_bf16(false, true, n, n, n, a, n, b, n, false, c, n);
}

double slm_bf16_gemm_peak_gflops(int n, int reps) {
    return slm_square_gemm_peak(n, reps, gemm_bf16_square);
}
