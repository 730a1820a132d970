// bf16 GEMMs of the CUDA backend through cuBLASLt (issue 22): bf16 operands, fp32 accumulation
// (CUBLAS_COMPUTE_32F), fp32 output, row-major as the CPU kernels (kernels.h slm_gemm_bf16, whose
// numerics this matches: the CPU path is the reference it is checked against). One handle and one
// fixed workspace per context; the algorithm for a shape is chosen once by cuBLASLt's heuristic
// and kept (pinned), so a shape always runs the same kernel and repeats bit for bit.
//
// Row-major C[M, N] = op(A) op(B) is column-major C^T[N, M] = op(B)^T op(A)^T: cuBLASLt's "A" is
// our B and its "B" our A, each described by its stored (column-major view) layout.
#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "cuda_common.cuh"

// cuBLASLt is opened on first use (dlopen), not linked: its library (about 540 MB for CUDA 13)
// would otherwise be mapped into every shardlm process, CPU runs included, and loading it made
// about 200 MB of it resident at start-up (measured: `shardlm --help`, 228 MB vs 18 MB of peak
// RSS). The entry points used are resolved once; their types come from cublasLt.h.
#define LT_FUNCS(X)                                                                                \
    X(cublasLtCreate)                                                                              \
    X(cublasLtDestroy)                                                                             \
    X(cublasLtMatmul)                                                                              \
    X(cublasLtMatmulAlgoGetHeuristic)                                                              \
    X(cublasLtMatmulDescCreate)                                                                    \
    X(cublasLtMatmulDescDestroy)                                                                   \
    X(cublasLtMatmulDescSetAttribute)                                                              \
    X(cublasLtMatmulPreferenceCreate)                                                              \
    X(cublasLtMatmulPreferenceDestroy)                                                             \
    X(cublasLtMatmulPreferenceSetAttribute)                                                        \
    X(cublasLtMatrixLayoutCreate)                                                                  \
    X(cublasLtMatrixLayoutDestroy)

static struct {
#define LT_FIELD(f) decltype(&::f) f;
    LT_FUNCS(LT_FIELD)
#undef LT_FIELD
    bool ok;
} g_lt;
static pthread_once_t g_lt_once = PTHREAD_ONCE_INIT;

#define LT_STR2(x) #x
#define LT_STR(x) LT_STR2(x)

static void lt_load(void) {
    void *h = dlopen("libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
#define LT_SYM(f)                                                                                  \
    g_lt.f = (decltype(g_lt.f))dlsym(h, #f);                                                       \
    if (!g_lt.f) return;
    LT_FUNCS(LT_SYM)
#undef LT_SYM
    g_lt.ok = true;
}

// Every cublasLt call below goes through the resolved pointers.
#define cublasLtCreate g_lt.cublasLtCreate
#define cublasLtDestroy g_lt.cublasLtDestroy
#define cublasLtMatmul g_lt.cublasLtMatmul
#define cublasLtMatmulAlgoGetHeuristic g_lt.cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmulDescCreate g_lt.cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy g_lt.cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute g_lt.cublasLtMatmulDescSetAttribute
#define cublasLtMatmulPreferenceCreate g_lt.cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy g_lt.cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute g_lt.cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatrixLayoutCreate g_lt.cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy g_lt.cublasLtMatrixLayoutDestroy

enum { GEMM_CACHE = 64 };
static const size_t k_workspace_bytes = (size_t)32 << 20; // 32 MiB: enough for Hopper's kernels

typedef struct gemm_key {
    int64_t M, N, K, lda, ldb, ldc;
    int ta, tb, accumulate;
} gemm_key;

typedef struct gemm_entry {
    gemm_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} gemm_entry;

struct slm_cuda_gemm_ctx {
    cublasLtHandle_t lt;
    void *workspace;
    gemm_entry cache[GEMM_CACHE];
    int n;
};

#define LT_TRY(call)                                                                               \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) return SLM_CUDA_CUBLAS_BASE + (int)s_;                    \
    } while (0)

static void entry_free(gemm_entry *e) {
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
    if (e->la) cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) cublasLtMatrixLayoutDestroy(e->lb);
    if (e->lc) cublasLtMatrixLayoutDestroy(e->lc);
    memset(e, 0, sizeof *e);
}

static int entry_init(slm_cuda_gemm_ctx *g, gemm_entry *e, const gemm_key *k) {
    memset(e, 0, sizeof *e);
    e->key = *k;
    cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLASLt's A = our B
    cublasOperation_t opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLASLt's B = our A
    LT_TRY(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    // stored layouts, column-major views: our B is [K, N] (N x K col-major) or [N, K] when tb
    LT_TRY(cublasLtMatrixLayoutCreate(&e->la, CUDA_R_16BF, k->tb ? k->K : k->N, k->tb ? k->N : k->K,
                                      k->ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&e->lb, CUDA_R_16BF, k->ta ? k->M : k->K, k->ta ? k->K : k->M,
                                      k->lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&e->lc, CUDA_R_32F, k->N, k->M, k->ldc));
    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t st =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &k_workspace_bytes, sizeof k_workspace_bytes);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(g->lt, e->desc, e->la, e->lb, e->lc, e->lc, pref, 1,
                                            &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return SLM_CUDA_CUBLAS_BASE + (int)st;
    if (found < 1) return SLM_CUDA_CUBLAS_BASE + (int)CUBLAS_STATUS_NOT_SUPPORTED;
    e->algo = res.algo;
    return 0;
}

extern "C" {

int slm_cuda_gemm_create(slm_cuda_gemm_ctx **out) {
    *out = NULL;
    pthread_once(&g_lt_once, lt_load);
    if (!g_lt.ok) return (int)cudaErrorSharedObjectInitFailed; // libcublasLt not found / complete
    slm_cuda_gemm_ctx *g = (slm_cuda_gemm_ctx *)calloc(1, sizeof *g);
    if (!g) return (int)cudaErrorMemoryAllocation;
    cublasStatus_t s = cublasLtCreate(&g->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return SLM_CUDA_CUBLAS_BASE + (int)s;
    }
    cudaError_t e = cudaMalloc(&g->workspace, k_workspace_bytes);
    if (e != cudaSuccess) {
        cublasLtDestroy(g->lt);
        free(g);
        return (int)e;
    }
    *out = g;
    return 0;
}

void slm_cuda_gemm_destroy(slm_cuda_gemm_ctx *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++)
        entry_free(&g->cache[i]);
    cudaFree(g->workspace);
    cublasLtDestroy(g->lt);
    free(g);
}

int slm_cuda_gemm_bf16(slm_cuda_gemm_ctx *g, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       const void *A, int64_t lda, const void *B, int64_t ldb, bool accumulate,
                       float *Cm, int64_t ldc, void *stream) {
    if (M <= 0 || N <= 0) return 0;
    gemm_key k;
    memset(&k, 0, sizeof k); // padding bytes too: the key is compared with memcmp
    k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
    k.ta = ta, k.tb = tb, k.accumulate = accumulate;
    gemm_entry *e = NULL;
    for (int i = 0; i < g->n && !e; i++)
        if (memcmp(&g->cache[i].key, &k, sizeof k) == 0) e = &g->cache[i];
    if (!e) {
        if (g->n == GEMM_CACHE) { // full: start over (a model has a handful of shapes)
            for (int i = 0; i < g->n; i++)
                entry_free(&g->cache[i]);
            g->n = 0;
        }
        e = &g->cache[g->n];
        int rc = entry_init(g, e, &k);
        if (rc) {
            entry_free(e);
            return rc;
        }
        g->n++;
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    LT_TRY(cublasLtMatmul(g->lt, e->desc, &alpha, B, e->la, A, e->lb, &beta, Cm, e->lc, Cm, e->lc,
                          &e->algo, g->workspace, k_workspace_bytes, slm_cuda_stream_(stream)));
    return 0;
}

} // extern "C"
