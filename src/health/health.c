// The preflight health check (health.h). Error bounds, with u = 2^-24 (fp32 unit roundoff) and
// gamma_n = n u / (1 - n u):
//  - a dot product of length n computed in fp32 in any order (with or without FMA) differs from
//    the exact one by at most gamma_n sum |a_i b_i| (Higham 2002, eq. 3.5); inputs are fp32
//    values, so the fp64 reference sees them exactly; its own error (n 2^-53 sum |a b|) is added.
//  - the tiny model: absolute bounds e(.) are propagated to first order beside the fp64
//    reference, through products (e(xy) <= |y| e(x) + |x| e(y) + u |xy|), dot products (the
//    gamma term plus the inputs' bounds times the other factor's magnitude), silu (|silu'| <=
//    1.1, |silu''| <= 0.5) and the softmax (|d p_v| <= 2 p_v max_w |d z_w|, |d loss| <= 2 max
//    |d z|); the exponential of the kernels is accurate to ~2e-7 relative (kernels_internal.h), so
//    every elementwise exp / sigmoid / log contributes C_ELEM u relative with C_ELEM = 16. The
//    first-order total is doubled to cover second-order terms.
#include "health/health.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/fault.h"
#include "base/json.h"
#include "device/device.h"
#include "dist/dist.h"

#define U32 (1.0 / 16777216.0)
#define U64 (1.0 / 9007199254740992.0)
#define C_ELEM 16.0

static const char *const k_check_names[SLM_HEALTH_N_CHECKS] = {
    "gemm", "model", "bitwise", "mem", "dir", "allreduce", "allgather", "reduce_scatter", "ecc"};

const char *slm_health_check_name(int i) {
    return i >= 0 && i < SLM_HEALTH_N_CHECKS ? k_check_names[i] : "?";
}

void slm_health_opts_default(slm_health_opts *o) {
    memset(o, 0, sizeof *o);
    o->mem_bytes = (size_t)256 << 20;
    o->bw_bytes = (size_t)8 << 20;
    o->bw_reps = 5;
    o->collective_timeout_s = 120;
}

static double gamma_n(double n, double u) {
    return n * u / (1.0 - n * u);
}

// ---------------------------------------------------------------------------------------------
// Fault injection: fail-health entries of SHARDLM_FAULT (the other kinds are the trainer's).

// The checks SHARDLM_FAULT's armed fail-health faults corrupt on this rank (SLM_HEALTH_* bits;
// no check= names every check). SLM_E_ARG for a bad SHARDLM_FAULT or an unknown check name.
static slm_status injected_faults(int rank, int world, uint32_t *bits) {
    *bits = 0;
    slm_fault_plan plan;
    slm_status st = slm_fault_plan_from_env(&plan);
    if (!st) st = slm_fault_check_world(&plan, world);
    if (st) return st;
    for (int i = 0; i < plan.n; i++) {
        const slm_fault *f = &plan.f[i];
        if (f->kind != SLM_FAULT_FAIL_HEALTH || !slm_fault_armed(&plan, f)) continue;
        uint32_t mine = f->rank < 0 || f->rank == rank ? ~0u : 0u;
        if (!f->check[0]) {
            *bits |= mine & ((1u << SLM_HEALTH_N_CHECKS) - 1);
            continue;
        }
        int which = -1;
        for (int k = 0; k < SLM_HEALTH_N_CHECKS; k++)
            if (!strcmp(f->check, k_check_names[k])) which = k;
        if (which < 0)
            return slm_fail(SLM_E_ARG,
                            "SHARDLM_FAULT: fail-health check \"%s\" is unknown (expected gemm, "
                            "model, bitwise, mem, dir, allreduce, allgather, reduce_scatter or "
                            "ecc)",
                            f->check);
        *bits |= mine & (1u << which);
    }
    return SLM_OK;
}

static void set_fail(slm_health_rank *r, uint32_t bit, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_fail(slm_health_rank *r, uint32_t bit, const char *fmt, ...) {
    r->failed |= bit;
    if (r->msg[0]) return; // the first failure is the one named
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
}

static void fill_uniform(float *x, int64_t n, uint64_t seed, float scale) {
    slm_rng r;
    slm_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * (2.0f * slm_rng_uniform(&r) - 1.0f);
}

// The known-answer checks compute on the device the trainer computes on (device.h; NULL: the
// CPU device): inputs are made on the host, copied in, and the results copied back out.
// A device copy of host x [n floats] (slm_dev_free).
static float *dev_in(slm_device *d, const float *x, int64_t n) {
    float *p = slm_dev_alloc_f32(d, n);
    slm_dev_copy(d, p, x, sizeof(float) * (size_t)n, SLM_H2D);
    return p;
}

// A host copy (slm_xmalloc; free) of device x [n floats].
static float *dev_out(slm_device *d, const float *x, int64_t n) {
    float *h = slm_xmalloc(sizeof(float) * (size_t)n);
    slm_dev_copy(d, h, x, sizeof(float) * (size_t)n, SLM_D2H);
    return h;
}

// A zeroed device buffer of n floats (slm_dev_free).
static float *dev_zeros(slm_device *d, int64_t n) {
    float *p = slm_dev_alloc_f32(d, n);
    slm_dev_zero(d, p, sizeof(float) * (size_t)n);
    return p;
}

// ---------------------------------------------------------------------------------------------
// gemm: out[N, O] = A[N, I] @ W[O, I]^T

enum { GN = 64, GI = 96, GO = 48 };

// On a GPU (bf16 compute: operands rounded to bf16, products exact in fp32, fp32 accumulation)
// the reference is the fp64 product of the bf16-rounded operands and the bound is the fp32
// accumulation's gamma_GI; on the CPU (fp32) the fp64 product of the inputs themselves.
static void check_gemm(slm_device *d, slm_health_rank *r, uint32_t inject, uint64_t *hash) {
    bool bf16 = slm_device_kind_of(d) == SLM_DEVICE_CUDA;
    float *a = slm_xmalloc(sizeof(float) * GN * GI), *w = slm_xmalloc(sizeof(float) * GO * GI);
    fill_uniform(a, GN * GI, 0x9e3779b97f4a7c15ull, 1.0f);
    fill_uniform(w, GO * GI, 0xd1b54a32d192ed03ull, 1.0f);
    float *da = dev_in(d, a, GN * GI), *dw = dev_in(d, w, GO * GI);
    float *dout = slm_dev_alloc_f32(d, GN * GO);
    slm_dev_linear_fwd(d, bf16, dout, da, dw, GN, GI, GO, false);
    float *out = dev_out(d, dout, GN * GO);
    slm_dev_free(d, da), slm_dev_free(d, dw), slm_dev_free(d, dout);
    if (bf16) { // the operands as the device multiplied them
        for (int i = 0; i < GN * GI; i++)
            a[i] = slm_bf16_to_f32_1(slm_f32_to_bf16_1(a[i]));
        for (int i = 0; i < GO * GI; i++)
            w[i] = slm_bf16_to_f32_1(slm_f32_to_bf16_1(w[i]));
    }
    if (inject & SLM_HEALTH_GEMM) out[GN * GO / 2] += 1e-3f * (1.0f + fabsf(out[GN * GO / 2]));
    double worst = -1;
    for (int n = 0; n < GN; n++)
        for (int o = 0; o < GO; o++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < GI; i++) {
                ref += (double)a[n * GI + i] * w[o * GI + i];
                mag += fabs((double)a[n * GI + i] * w[o * GI + i]);
            }
            double bound = (gamma_n(GI, U32) + gamma_n(GI, U64)) * mag + 1e-30;
            double err = fabs(out[n * GO + o] - ref);
            if (err / bound > worst) worst = err / bound, r->gemm_err = err, r->gemm_bound = bound;
            if (err > bound && !(r->failed & SLM_HEALTH_GEMM))
                set_fail(r, SLM_HEALTH_GEMM,
                         "gemm: element [%d,%d] is %.9g, fp64 reference %.9g, error %.3g > bound "
                         "%.3g (%s)",
                         n, o, out[n * GO + o], ref, err, bound, r->device);
        }
    if (inject & SLM_HEALTH_BITWISE) { // one ulp: within the bound, but not bitwise equal
        uint32_t bits;
        memcpy(&bits, &out[0], 4);
        bits ^= 1u;
        memcpy(&out[0], &bits, 4);
    }
    *hash = slm_xxh64(out, sizeof(float) * GN * GO, *hash);
    free(a), free(w), free(out);
}

// ---------------------------------------------------------------------------------------------
// model: x [N, C] -> gate, up = x Wg^T, x Wu^T [N, F] -> h = silu(gate) up -> z = h Wo^T [N, V]
// -> mean cross-entropy over targets; backward to dWo, dx (and dWg, dWu through the same code).

enum { MN = 16, MC = 24, MF = 40, MV = 32 };

typedef struct mcheck {
    slm_health_rank *r;
    double worst;
} mcheck;

static void mcmp(mcheck *c, const char *what, const float *got, const double *ref,
                 const double *bound, int n) {
    for (int i = 0; i < n; i++) {
        double b = 2.0 * bound[i] + 1e-30, err = fabs(got[i] - ref[i]);
        if (err / b > c->worst) c->worst = err / b, c->r->model_err = err, c->r->model_bound = b;
        if (err > b && !(c->r->failed & SLM_HEALTH_MODEL))
            set_fail(c->r, SLM_HEALTH_MODEL,
                     "model: %s[%d] is %.9g, fp64 reference %.9g, error %.3g > bound %.3g", what, i,
                     got[i], ref[i], err, b);
    }
}

static double sigm(double g) {
    return 1.0 / (1.0 + exp(-g));
}

// The model's inputs (fixed by seed) and the fp32 results of the training kernels.
typedef struct mmodel {
    float *x, *wg, *wu, *wo; // [MN, MC], [MF, MC], [MF, MC], [MV, MF]
    int32_t tgt[MN];
    float loss;
    float *dwo, *dx; // [MV, MF], [MN, MC]
} mmodel;

// fp32 through the training ops on device d: loss, dW_out and dx (dx perturbed with inject).
static void model_fp32(slm_device *d, mmodel *m, uint32_t inject) {
    float *x = dev_in(d, m->x, MN * MC), *wg = dev_in(d, m->wg, MF * MC);
    float *wu = dev_in(d, m->wu, MF * MC), *wo = dev_in(d, m->wo, MV * MF);
    int32_t *tgt = slm_dev_alloc(d, sizeof m->tgt);
    slm_dev_copy(d, tgt, m->tgt, sizeof m->tgt, SLM_H2D);
    float *gate = slm_dev_alloc_f32(d, MN * MF), *up = slm_dev_alloc_f32(d, MN * MF);
    float *h = slm_dev_alloc_f32(d, MN * MF), *z = slm_dev_alloc_f32(d, MN * MV);
    float *dlosses = slm_dev_alloc_f32(d, MN), losses[MN];
    slm_dev_linear_fwd(d, false, gate, x, wg, MN, MC, MF, false);
    slm_dev_linear_fwd(d, false, up, x, wu, MN, MC, MF, false);
    slm_dev_swiglu_fwd(d, h, gate, up, MN, MF);
    slm_dev_linear_fwd(d, false, z, h, wo, MN, MF, MV, false);
    slm_dev_cross_entropy(d, z, dlosses, tgt, MN, MV, 1.0f / MN); // z becomes dloss/dz
    slm_dev_copy(d, losses, dlosses, sizeof losses, SLM_D2H);
    float loss = 0;
    for (int n = 0; n < MN; n++)
        loss += losses[n];
    m->loss = loss / MN;
    float *dh = dev_zeros(d, MN * MF), *dwo = dev_zeros(d, MV * MF), *dx = dev_zeros(d, MN * MC);
    float *dgate = slm_dev_alloc_f32(d, MN * MF), *dup = slm_dev_alloc_f32(d, MN * MF);
    slm_dev_linear_bwd(d, false, dh, dwo, z, h, wo, MN, MF, MV);
    slm_dev_swiglu_bwd(d, dgate, dup, dh, gate, up, MN, MF);
    slm_dev_linear_bwd(d, false, dx, NULL, dgate, x, wg, MN, MC, MF);
    slm_dev_linear_bwd(d, false, dx, NULL, dup, x, wu, MN, MC, MF);
    m->dwo = dev_out(d, dwo, MV * MF), m->dx = dev_out(d, dx, MN * MC);
    if (inject & SLM_HEALTH_MODEL) m->dx[5] += 1e-2f * (1.0f + fabsf(m->dx[5]));
    float *bufs[] = {x, wg, wu, wo, gate, up, h, z, dlosses, dh, dwo, dx, dgate, dup};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        slm_dev_free(d, bufs[i]);
    slm_dev_free(d, tgt);
}

// The fp64 reference: each value with its first-order absolute error bound (e*).
enum { NF = MN * MF, NV = MN * MV };
typedef struct mref {
    double *R; // one allocation holding all below
    double *g, *eg, *u, *eu, *s, *es, *hh, *eh, *dhr, *edh, *dgr, *edg, *dur, *edu; // [MN, MF]
    double *zr, *ez, *dz, *edz;                                                     // [MN, MV]
    double *dwor, *edwo;                                                            // [MV, MF]
    double *dxr, *edx;                                                              // [MN, MC]
    double loss, eloss;
} mref;

static void mref_alloc(mref *q) {
    double *R = calloc((size_t)16 * NF + 4 * NV + 2 * MV * MF + 2 * MN * MC, sizeof(double));
    if (!R) slm_fatal("healthcheck: out of memory");
    q->R = R;
    q->g = R, q->eg = q->g + NF, q->u = q->eg + NF, q->eu = q->u + NF, q->s = q->eu + NF;
    q->es = q->s + NF, q->hh = q->es + NF, q->eh = q->hh + NF, q->dhr = q->eh + NF;
    q->edh = q->dhr + NF, q->dgr = q->edh + NF, q->edg = q->dgr + NF, q->dur = q->edg + NF;
    q->edu = q->dur + NF, q->zr = q->edu + NF, q->ez = q->zr + NV, q->dz = q->ez + NV;
    q->edz = q->dz + NV, q->dwor = q->edz + NV, q->edwo = q->dwor + MV * MF;
    q->dxr = q->edwo + MV * MF, q->edx = q->dxr + MN * MC;
}

// Reference forward of the MLP: gate, up, silu(gate) and h.
static void ref_mlp(const mmodel *m, mref *q) {
    double gC = gamma_n(MC, U32);
    for (int n = 0; n < MN; n++)
        for (int f = 0; f < MF; f++) {
            double a = 0, ma = 0, b = 0, mb = 0;
            for (int c = 0; c < MC; c++) {
                double xv = m->x[n * MC + c];
                a += xv * m->wg[f * MC + c], ma += fabs(xv * m->wg[f * MC + c]);
                b += xv * m->wu[f * MC + c], mb += fabs(xv * m->wu[f * MC + c]);
            }
            int i = n * MF + f;
            q->g[i] = a, q->eg[i] = gC * ma, q->u[i] = b, q->eu[i] = gC * mb;
            q->s[i] = a * sigm(a);
            q->es[i] = 1.1 * q->eg[i] + C_ELEM * U32 * fabs(q->s[i]);
            q->hh[i] = q->s[i] * b;
            q->eh[i] = fabs(b) * q->es[i] + fabs(q->s[i]) * q->eu[i] + U32 * fabs(q->hh[i]);
        }
}

// Reference logits, mean cross-entropy and its gradient dz.
static void ref_loss(const mmodel *m, mref *q) {
    double gF = gamma_n(MF, U32), gN = gamma_n(MN, U32);
    double loss_ref = 0, eloss = 0;
    for (int n = 0; n < MN; n++) {
        double zmax = -INFINITY, ezmax = 0;
        for (int v = 0; v < MV; v++) {
            double a = 0, mm = 0, e = 0;
            for (int f = 0; f < MF; f++) {
                a += q->hh[n * MF + f] * m->wo[v * MF + f];
                mm += fabs(q->hh[n * MF + f] * m->wo[v * MF + f]);
                e += q->eh[n * MF + f] * fabs(m->wo[v * MF + f]);
            }
            q->zr[n * MV + v] = a, q->ez[n * MV + v] = gF * mm + e;
            if (a > zmax) zmax = a;
            if (q->ez[n * MV + v] > ezmax) ezmax = q->ez[n * MV + v];
        }
        double se = 0;
        for (int v = 0; v < MV; v++)
            se += exp(q->zr[n * MV + v] - zmax);
        double lse = zmax + log(se), ln = lse - q->zr[n * MV + m->tgt[n]];
        loss_ref += ln / MN;
        eloss +=
            (2 * ezmax + (MV + C_ELEM) * U32 * (fabs(lse) + fabs(q->zr[n * MV + m->tgt[n]]) + 1)) /
            MN;
        for (int v = 0; v < MV; v++) {
            double p = exp(q->zr[n * MV + v] - lse);
            q->dz[n * MV + v] = (p - (v == m->tgt[n])) / MN;
            q->edz[n * MV + v] =
                (2 * p * ezmax + (MV + C_ELEM) * U32 * p) / MN + U32 * fabs(q->dz[n * MV + v]);
        }
    }
    eloss += gN * fabs(loss_ref);
    q->loss = loss_ref, q->eloss = eloss;
}

// Reference backward through the output projection and the SwiGLU: dh, dgate, dup and dW_out.
static void ref_backward_out(const mmodel *m, mref *q) {
    double gV = gamma_n(MV, U32), gN = gamma_n(MN, U32);
    for (int n = 0; n < MN; n++)
        for (int f = 0; f < MF; f++) {
            double a = 0, mm = 0, e = 0;
            for (int v = 0; v < MV; v++) {
                a += q->dz[n * MV + v] * m->wo[v * MF + f];
                mm += fabs(q->dz[n * MV + v] * m->wo[v * MF + f]);
                e += q->edz[n * MV + v] * fabs(m->wo[v * MF + f]);
            }
            int i = n * MF + f;
            q->dhr[i] = a, q->edh[i] = gV * mm + e;
            double sg = sigm(q->g[i]), d1 = sg * (1 + q->g[i] * (1 - sg));
            q->dgr[i] = a * q->u[i] * d1;
            q->edg[i] = fabs(q->u[i] * d1) * q->edh[i] + fabs(a * d1) * q->eu[i] +
                        0.5 * fabs(a * q->u[i]) * q->eg[i] + C_ELEM * U32 * fabs(q->dgr[i]);
            q->dur[i] = a * q->s[i];
            q->edu[i] = fabs(q->s[i]) * q->edh[i] + fabs(a) * q->es[i] + U32 * fabs(q->dur[i]);
        }
    for (int v = 0; v < MV; v++)
        for (int f = 0; f < MF; f++) {
            double a = 0, mm = 0, e = 0;
            for (int n = 0; n < MN; n++) {
                a += q->dz[n * MV + v] * q->hh[n * MF + f];
                mm += fabs(q->dz[n * MV + v] * q->hh[n * MF + f]);
                e += q->edz[n * MV + v] * fabs(q->hh[n * MF + f]) +
                     fabs(q->dz[n * MV + v]) * q->eh[n * MF + f];
            }
            q->dwor[v * MF + f] = a, q->edwo[v * MF + f] = gN * mm + e;
        }
}

// Reference dx through the gate and up projections.
static void ref_backward_in(const mmodel *m, mref *q) {
    double g2F = gamma_n(2 * MF, U32);
    for (int n = 0; n < MN; n++)
        for (int c = 0; c < MC; c++) {
            double a = 0, mm = 0, e = 0;
            for (int f = 0; f < MF; f++) {
                int i = n * MF + f;
                a += q->dgr[i] * m->wg[f * MC + c] + q->dur[i] * m->wu[f * MC + c];
                mm += fabs(q->dgr[i] * m->wg[f * MC + c]) + fabs(q->dur[i] * m->wu[f * MC + c]);
                e += q->edg[i] * fabs(m->wg[f * MC + c]) + q->edu[i] * fabs(m->wu[f * MC + c]);
            }
            q->dxr[n * MC + c] = a, q->edx[n * MC + c] = g2F * mm + e;
        }
}

static void check_model(slm_device *d, slm_health_rank *r, uint32_t inject, uint64_t *hash) {
    mmodel m = {0};
    m.x = slm_xmalloc(sizeof(float) * MN * MC), m.wg = slm_xmalloc(sizeof(float) * MF * MC);
    m.wu = slm_xmalloc(sizeof(float) * MF * MC), m.wo = slm_xmalloc(sizeof(float) * MV * MF);
    fill_uniform(m.x, MN * MC, 11, 1.0f);
    fill_uniform(m.wg, MF * MC, 12, 0.5f);
    fill_uniform(m.wu, MF * MC, 13, 0.5f);
    fill_uniform(m.wo, MV * MF, 14, 0.5f);
    for (int n = 0; n < MN; n++)
        m.tgt[n] = (n * 7 + 3) % MV;
    model_fp32(d, &m, inject);
    // fp64 reference with first-order absolute bounds (file comment)
    mref q;
    mref_alloc(&q);
    ref_mlp(&m, &q);
    ref_loss(&m, &q);
    ref_backward_out(&m, &q);
    ref_backward_in(&m, &q);
    mcheck mc = {r, -1};
    mcmp(&mc, "loss", &m.loss, &q.loss, &q.eloss, 1);
    mcmp(&mc, "dW_out", m.dwo, q.dwor, q.edwo, MV * MF);
    mcmp(&mc, "dx", m.dx, q.dxr, q.edx, MN * MC);
    uint64_t hs = *hash;
    hs = slm_xxh64(&m.loss, sizeof m.loss, hs);
    hs = slm_xxh64(m.dwo, sizeof(float) * MV * MF, hs);
    hs = slm_xxh64(m.dx, sizeof(float) * MN * MC, hs);
    *hash = hs;
    free(q.R);
    free(m.x), free(m.wg), free(m.wu), free(m.wo), free(m.dwo), free(m.dx);
}

// ---------------------------------------------------------------------------------------------
// memory and directories

static void check_mem(slm_health_rank *r, size_t bytes, uint32_t inject) {
    if (!bytes) return;
    size_t n = bytes / 8;
    uint64_t *p = malloc(n * 8);
    char buf[32];
    if (!p) {
        set_fail(r, SLM_HEALTH_MEM, "mem: cannot allocate %s", slm_fmt_bytes((double)bytes, buf));
        return;
    }
    for (size_t i = 0; i < n; i++)
        p[i] = slm_mix64(i ^ 0xa5a5a5a5ull);
    if (inject & SLM_HEALTH_MEM) ((volatile uint8_t *)p)[n * 4 + 3] ^= 0x10;
    for (size_t i = 0; i < n; i++)
        if (p[i] != slm_mix64(i ^ 0xa5a5a5a5ull)) {
            set_fail(r, SLM_HEALTH_MEM, "mem: word %zu of %s read back 0x%016llx, wrote 0x%016llx",
                     i, slm_fmt_bytes((double)bytes, buf), (unsigned long long)p[i],
                     (unsigned long long)slm_mix64(i ^ 0xa5a5a5a5ull));
            break;
        }
    free(p);
}

static void check_dir_one(slm_health_rank *r, const char *dir, bool inject) {
    slm_status st = slm_mkdir_p(dir);
    if (st != SLM_OK) {
        set_fail(r, SLM_HEALTH_DIR, "dir: %s", slm_errmsg());
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s%s/.healthcheck_rank_%05d", dir,
             inject ? "/.no_such_dir_injected" : "", r->rank);
    enum { PROBE = 65536 };
    uint8_t *data = slm_xmalloc(PROBE);
    for (int i = 0; i < PROBE; i++)
        data[i] = (uint8_t)(slm_mix64((uint64_t)i + r->rank) >> 7);
    st = slm_file_write_durable(path, data, PROBE);
    if (st != SLM_OK) {
        set_fail(r, SLM_HEALTH_DIR, "dir: %s not writable: %s", dir, slm_errmsg());
    } else {
        char *back = NULL;
        size_t len = 0;
        st = slm_file_read_all(path, &back, &len);
        if (st != SLM_OK || len != PROBE || memcmp(back, data, PROBE) != 0)
            set_fail(r, SLM_HEALTH_DIR, "dir: probe file %s did not read back as written", path);
        free(back);
        unlink(path);
    }
    free(data);
}

static void check_dirs(slm_health_rank *r, const slm_health_opts *o, uint32_t inject) {
    r->free_bytes = -1;
    if (!o->run_dir) return;
    // checkpoints/ is probed when it exists (a fresh run directory stays empty: the trainer
    // refuses to start in a non-empty directory that is no run directory)
    char *ck = slm_path_join(o->run_dir, "checkpoints");
    bool has_ck = slm_is_dir(ck);
    check_dir_one(r, o->run_dir, (inject & SLM_HEALTH_DIR) && !has_ck);
    if (has_ck) check_dir_one(r, ck, inject & SLM_HEALTH_DIR);
    struct statvfs sv;
    if (statvfs(has_ck ? ck : o->run_dir, &sv) == 0) {
        r->free_bytes = (double)sv.f_bavail * (double)sv.f_frsize;
        if (r->free_bytes < o->ckpt_bytes) {
            char a[32], b[32];
            set_fail(r, SLM_HEALTH_DIR, "dir: %s has %s free, the estimated checkpoint needs %s",
                     has_ck ? ck : o->run_dir, slm_fmt_bytes(r->free_bytes, a),
                     slm_fmt_bytes(o->ckpt_bytes, b));
        }
    }
    free(ck);
}

// ---------------------------------------------------------------------------------------------
// collectives

// ecc: a GPU whose memory has reported uncorrected errors since the driver loaded is not fit to
// train on (its results may already be wrong). CPUs and GPUs without ECC pass (ecc = -1).
static void check_ecc(slm_device *d, slm_health_rank *r, uint32_t inject) {
    slm_device_stats s;
    slm_device_stats_read(d, &s);
    r->ecc = s.valid ? s.ecc_uncorrected : -1;
    if (inject & SLM_HEALTH_ECC) r->ecc = r->ecc > 0 ? r->ecc + 1 : 1;
    if (r->ecc > 0)
        set_fail(r, SLM_HEALTH_ECC,
                 "ecc: %.0f uncorrected ECC error(s) on %s since the driver loaded%s", r->ecc,
                 r->device, inject & SLM_HEALTH_ECC ? " (injected)" : "");
}

static void check_collectives(slm_health_rank *r, int rank, int world, uint32_t inject) {
    slm_comm *w = slm_comm_world();
    enum { CN = 1031 };
    double *buf = slm_xmalloc(sizeof(double) * CN);
    for (int i = 0; i < CN; i++)
        buf[i] = (double)(rank + 1) * (i % 101) + rank;
    slm_comm_allreduce(w, buf, CN, SLM_DTYPE_F64, SLM_OP_SUM, "healthcheck allreduce");
    if (inject & SLM_HEALTH_ALLREDUCE) buf[17] += 1;
    double tri = (double)world * (world + 1) / 2, tri0 = (double)world * (world - 1) / 2;
    for (int i = 0; i < CN; i++)
        if (buf[i] != (i % 101) * tri + tri0) {
            set_fail(r, SLM_HEALTH_ALLREDUCE, "allreduce: element %d is %.17g, expected %.17g", i,
                     buf[i], (i % 101) * tri + tri0);
            break;
        }
    free(buf);

    int64_t *send = slm_xmalloc(sizeof(int64_t) * CN);
    int64_t *recv = slm_xmalloc(sizeof(int64_t) * CN * world);
    for (int i = 0; i < CN; i++)
        send[i] = (int64_t)rank * 1000003 + i;
    slm_comm_allgather(w, send, recv, CN, SLM_DTYPE_I64, "healthcheck allgather");
    if (inject & SLM_HEALTH_ALLGATHER) recv[(int64_t)CN * world - 1] ^= 4;
    for (int64_t k = 0; k < (int64_t)CN * world; k++)
        if (recv[k] != (k / CN) * 1000003 + k % CN) {
            set_fail(r, SLM_HEALTH_ALLGATHER,
                     "allgather: block of rank %lld element %lld is %lld, expected %lld",
                     (long long)(k / CN), (long long)(k % CN), (long long)recv[k],
                     (long long)((k / CN) * 1000003 + k % CN));
            break;
        }
    free(send), free(recv);

    double *rs = slm_xmalloc(sizeof(double) * CN * world), *out = slm_xmalloc(sizeof(double) * CN);
    for (int s = 0; s < world; s++)
        for (int i = 0; i < CN; i++)
            rs[(int64_t)s * CN + i] = (double)(rank + 1) * (s + 1) + i;
    slm_comm_reduce_scatter(w, rs, out, CN, SLM_DTYPE_F64, SLM_OP_SUM,
                            "healthcheck reduce-scatter");
    if (inject & SLM_HEALTH_REDUCE_SCATTER) out[3] = -out[3];
    for (int i = 0; i < CN; i++) {
        double want = (rank + 1) * tri + (double)world * i;
        if (out[i] != want) {
            set_fail(r, SLM_HEALTH_REDUCE_SCATTER,
                     "reduce_scatter: element %d of block %d is %.17g, expected %.17g", i, rank,
                     out[i], want);
            break;
        }
    }
    free(rs), free(out);
}

// Bandwidth of an all-reduce of o->bw_bytes between the two ranks of each measured pair: every
// pair of distinct hosts (their lowest ranks), and each host with two or more ranks (its two
// lowest). Above 16 hosts only neighbouring hosts in rank order are paired (H pairs, not H^2/2).
static void measure_links(const slm_health_opts *o, slm_health_report *rep, int rank) {
    int world = rep->world, nh = 0;
    int *first = slm_xmalloc(sizeof(int) * world), *second = slm_xmalloc(sizeof(int) * world);
    for (int i = 0; i < world; i++) {
        int hix = -1;
        for (int k = 0; k < nh; k++)
            if (!strcmp(rep->ranks[first[k]].host, rep->ranks[i].host)) hix = k;
        if (hix < 0)
            first[nh] = i, second[nh] = -1, nh++;
        else if (second[hix] < 0)
            second[hix] = i;
    }
    int cap = nh * (nh + 1) / 2 + nh;
    slm_health_link *L = calloc((size_t)cap, sizeof *L);
    if (!L) slm_fatal("healthcheck: out of memory");
    int n = 0;
    for (int a = 0; a < nh; a++) {
        if (second[a] >= 0) L[n].rank_a = first[a], L[n].rank_b = second[a], n++;
        for (int b = a + 1; b < nh; b++) {
            if (nh > 16 && b != a + 1) continue;
            L[n].rank_a = first[a], L[n].rank_b = first[b], n++;
        }
    }
    int64_t count = (int64_t)(o->bw_bytes / 4);
    float *buf = calloc((size_t)count, sizeof(float));
    double *gbps = calloc((size_t)n + 1, sizeof(double));
    if (!buf || !gbps) slm_fatal("healthcheck: out of memory");
    for (int k = 0; k < n; k++) {
        bool in = rank == L[k].rank_a || rank == L[k].rank_b;
        slm_comm *c = slm_comm_split(slm_comm_world(), in ? 0 : 1, rank, "healthcheck pair");
        if (in) {
            slm_comm_allreduce(c, buf, count, SLM_DTYPE_F32, SLM_OP_SUM, "healthcheck bandwidth");
            double best = INFINITY;
            for (int rep_i = 0; rep_i < o->bw_reps; rep_i++) {
                double t0 = slm_time_s();
                slm_comm_allreduce(c, buf, count, SLM_DTYPE_F32, SLM_OP_SUM,
                                   "healthcheck bandwidth");
                double t = slm_time_s() - t0;
                if (t < best) best = t;
            }
            if (rank == L[k].rank_a) gbps[k] = (double)count * 4 / best / 1e9;
        }
        slm_comm_free(c);
    }
    slm_comm_allreduce(slm_comm_world(), gbps, n, SLM_DTYPE_F64, SLM_OP_MAX,
                       "healthcheck bandwidth");
    for (int k = 0; k < n; k++) {
        L[k].gbps = gbps[k];
        snprintf(L[k].host_a, sizeof L[k].host_a, "%s", rep->ranks[L[k].rank_a].host);
        snprintf(L[k].host_b, sizeof L[k].host_b, "%s", rep->ranks[L[k].rank_b].host);
        L[k].slow = o->min_gbps > 0 && gbps[k] < o->min_gbps;
        if (L[k].slow) rep->ok = false;
    }
    rep->links = L, rep->n_links = n;
    free(buf), free(gbps), free(first), free(second);
}

static void cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t')
            c++;
        c[strcspn(c, "\n")] = 0;
        snprintf(out, cap, "%s", c);
        break;
    }
    fclose(f);
}

slm_status slm_health_run(const slm_health_opts *o, slm_health_report *rep) {
    memset(rep, 0, sizeof *rep);
    int rank = slm_dist_rank(), world = slm_dist_world();
    if (o->collective_timeout_s > 0) slm_dist_set_timeout(o->collective_timeout_s);
    slm_health_rank me;
    memset(&me, 0, sizeof me);
    me.rank = rank;
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
    cpu_model(me.cpu, sizeof me.cpu);
    uint32_t inject = 0;
    slm_status st = injected_faults(rank, world, &inject);
    if (st) return st;
    uint64_t hash = 0;
    slm_device *dev = NULL; // the CPU device, unless o->device names another
    if (o->device && (st = slm_device_open(o->device, &dev)))
        return slm_fail_wrap(st, "healthcheck --device %s (rank %d)", o->device, rank);
    snprintf(me.device, sizeof me.device, "%s", slm_device_describe(dev));
    check_gemm(dev, &me, inject, &hash);
    // The tiny model's bounds are derived for fp32 compute: it runs on the CPU device (its
    // kernels are the CPU path's), the GEMM above on the device the trainer will use.
    check_model(NULL, &me, inject, &hash);
    me.out_hash = hash;
    check_mem(&me, o->mem_bytes, inject);
    check_dirs(&me, o, inject);
    check_ecc(dev, &me, inject);
    slm_device_close(dev);
    check_collectives(&me, rank, world, inject);

    rep->world = world;
    rep->ranks = calloc((size_t)world, sizeof *rep->ranks);
    if (!rep->ranks) return slm_fail(SLM_E_NOMEM, "healthcheck: out of memory");
    slm_dist_allgather(&me, rep->ranks, (int64_t)sizeof me, SLM_DTYPE_U8, "healthcheck results");
    // bitwise: within each CPU model and device, the majority's output hash is the reference; a
    // rank without a strict majority behind its hash (a tie) fails too (the bad core is unknown).
    // Ranks that already failed a bound (gemm, model) are named by it and do not vote.
    const uint32_t bounded = SLM_HEALTH_GEMM | SLM_HEALTH_MODEL;
    for (int i = 0; i < world; i++) {
        int same = 0, agree = 0;
        if (rep->ranks[i].failed & bounded) continue;
        for (int j = 0; j < world; j++) {
            if (rep->ranks[j].failed & bounded) continue;
            if (strcmp(rep->ranks[j].cpu, rep->ranks[i].cpu) != 0 ||
                strcmp(rep->ranks[j].device, rep->ranks[i].device) != 0)
                continue;
            same++;
            agree += rep->ranks[j].out_hash == rep->ranks[i].out_hash;
        }
        if (same > 1 && 2 * agree <= same) {
            int other = -1;
            for (int j = 0; j < world && other < 0; j++)
                if (!(rep->ranks[j].failed & bounded) &&
                    !strcmp(rep->ranks[j].cpu, rep->ranks[i].cpu) &&
                    !strcmp(rep->ranks[j].device, rep->ranks[i].device) &&
                    rep->ranks[j].out_hash != rep->ranks[i].out_hash)
                    other = j;
            set_fail(&rep->ranks[i], SLM_HEALTH_BITWISE,
                     "bitwise: outputs differ from rank %d's on the same CPU model (%s): %d of %d "
                     "such ranks agree with this one",
                     other, rep->ranks[i].cpu, agree, same);
        }
    }
    rep->ok = true;
    for (int i = 0; i < world; i++)
        if (rep->ranks[i].failed) rep->ok = false;
    if (world > 1 && o->bw_bytes >= 4) measure_links(o, rep, rank);
    return SLM_OK;
}

void slm_health_report_free(slm_health_report *rep) {
    free(rep->ranks);
    free(rep->links);
    memset(rep, 0, sizeof *rep);
}

slm_status slm_health_write_json(const slm_health_report *rep, const char *path) {
    cJSON *o = cJSON_CreateObject(), *ranks = cJSON_CreateArray(), *links = cJSON_CreateArray();
    cJSON *fh = cJSON_CreateArray();
    cJSON_AddBoolToObject(o, "ok", rep->ok);
    cJSON_AddNumberToObject(o, "world", rep->world);
    for (int i = 0; i < rep->world; i++) {
        const slm_health_rank *r = &rep->ranks[i];
        cJSON *x = cJSON_CreateObject(), *f = cJSON_CreateArray();
        cJSON_AddNumberToObject(x, "rank", r->rank);
        cJSON_AddStringToObject(x, "host", r->host);
        cJSON_AddStringToObject(x, "cpu", r->cpu);
        cJSON_AddStringToObject(x, "device", r->device);
        if (r->ecc >= 0) cJSON_AddNumberToObject(x, "ecc_uncorrected", r->ecc);
        cJSON_AddBoolToObject(x, "ok", r->failed == 0);
        for (int b = 0; b < SLM_HEALTH_N_CHECKS; b++)
            if (r->failed & (1u << b))
                cJSON_AddItemToArray(f, cJSON_CreateString(k_check_names[b]));
        cJSON_AddItemToObject(x, "failed", f);
        cJSON_AddNumberToObject(x, "gemm_err", r->gemm_err);
        cJSON_AddNumberToObject(x, "gemm_bound", r->gemm_bound);
        cJSON_AddNumberToObject(x, "model_err", r->model_err);
        cJSON_AddNumberToObject(x, "model_bound", r->model_bound);
        cJSON_AddNumberToObject(x, "free_bytes", r->free_bytes);
        cJSON_AddStringToObject(x, "msg", r->msg);
        cJSON_AddItemToArray(ranks, x);
        if (r->failed) {
            bool dup = false;
            for (int j = 0; j < i; j++)
                if (rep->ranks[j].failed && !strcmp(rep->ranks[j].host, r->host)) dup = true;
            if (!dup) cJSON_AddItemToArray(fh, cJSON_CreateString(r->host));
        }
    }
    for (int k = 0; k < rep->n_links; k++) {
        const slm_health_link *l = &rep->links[k];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "rank_a", l->rank_a);
        cJSON_AddNumberToObject(x, "rank_b", l->rank_b);
        cJSON_AddStringToObject(x, "host_a", l->host_a);
        cJSON_AddStringToObject(x, "host_b", l->host_b);
        cJSON_AddNumberToObject(x, "gbps", l->gbps);
        cJSON_AddBoolToObject(x, "slow", l->slow);
        cJSON_AddItemToArray(links, x);
    }
    cJSON_AddItemToObject(o, "ranks", ranks);
    cJSON_AddItemToObject(o, "links", links);
    cJSON_AddItemToObject(o, "failed_hosts", fh);
    slm_status st = slm_json_write_file(path, o);
    cJSON_Delete(o);
    return st;
}
