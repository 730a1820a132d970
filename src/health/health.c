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
#include "dist/dist.h"
#include "kernels/kernels.h"

#define U32 (1.0 / 16777216.0)
#define U64 (1.0 / 9007199254740992.0)
#define C_ELEM 16.0

static const char *const k_check_names[SLM_HEALTH_N_CHECKS] = {
    "gemm", "model", "bitwise", "mem", "dir", "allreduce", "allgather", "reduce_scatter"};

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
                            "model, bitwise, mem, dir, allreduce, allgather or reduce_scatter)",
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

// ---------------------------------------------------------------------------------------------
// gemm: out[N, O] = A[N, I] @ W[O, I]^T

enum { GN = 64, GI = 96, GO = 48 };

static void check_gemm(slm_health_rank *r, uint32_t inject, uint64_t *hash) {
    float *a = slm_xmalloc(sizeof(float) * GN * GI), *w = slm_xmalloc(sizeof(float) * GO * GI);
    float *out = slm_xmalloc(sizeof(float) * GN * GO);
    fill_uniform(a, GN * GI, 0x9e3779b97f4a7c15ull, 1.0f);
    fill_uniform(w, GO * GI, 0xd1b54a32d192ed03ull, 1.0f);
    slm_matmul_fwd(out, a, w, GN, GI, GO, false);
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
                         "%.3g",
                         n, o, out[n * GO + o], ref, err, bound);
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

static void check_model(slm_health_rank *r, uint32_t inject, uint64_t *hash) {
    float *x = slm_xmalloc(sizeof(float) * MN * MC), *wg = slm_xmalloc(sizeof(float) * MF * MC);
    float *wu = slm_xmalloc(sizeof(float) * MF * MC), *wo = slm_xmalloc(sizeof(float) * MV * MF);
    fill_uniform(x, MN * MC, 11, 1.0f);
    fill_uniform(wg, MF * MC, 12, 0.5f);
    fill_uniform(wu, MF * MC, 13, 0.5f);
    fill_uniform(wo, MV * MF, 14, 0.5f);
    int32_t tgt[MN];
    for (int n = 0; n < MN; n++)
        tgt[n] = (n * 7 + 3) % MV;
    // fp32 through the training kernels
    float *gate = slm_xmalloc(sizeof(float) * MN * MF), *up = slm_xmalloc(sizeof(float) * MN * MF);
    float *h = slm_xmalloc(sizeof(float) * MN * MF), *z = slm_xmalloc(sizeof(float) * MN * MV);
    float losses[MN];
    slm_matmul_fwd(gate, x, wg, MN, MC, MF, false);
    slm_matmul_fwd(up, x, wu, MN, MC, MF, false);
    slm_swiglu_fwd(h, gate, up, MN, MF);
    slm_matmul_fwd(z, h, wo, MN, MF, MV, false);
    slm_cross_entropy_fused(z, losses, tgt, MN, MV, 1.0f / MN); // z becomes dloss/dz
    float loss = 0;
    for (int n = 0; n < MN; n++)
        loss += losses[n];
    loss /= MN;
    float *dh = calloc(MN * MF, sizeof(float)), *dwo = calloc(MV * MF, sizeof(float));
    float *dgate = slm_xmalloc(sizeof(float) * MN * MF),
          *dup = slm_xmalloc(sizeof(float) * MN * MF);
    float *dx = calloc(MN * MC, sizeof(float));
    if (!dh || !dwo || !dx) slm_fatal("healthcheck: out of memory");
    slm_matmul_bwd(dh, dwo, z, h, wo, MN, MF, MV);
    slm_swiglu_bwd(dgate, dup, dh, gate, up, MN, MF);
    slm_matmul_bwd(dx, NULL, dgate, x, wg, MN, MC, MF);
    slm_matmul_bwd(dx, NULL, dup, x, wu, MN, MC, MF);
    if (inject & SLM_HEALTH_MODEL) dx[5] += 1e-2f * (1.0f + fabsf(dx[5]));

    // fp64 reference with first-order absolute bounds (file comment)
    enum { NF = MN * MF, NV = MN * MV };
    double *R = calloc((size_t)16 * NF + 4 * NV + 2 * MV * MF + 2 * MN * MC, sizeof(double));
    if (!R) slm_fatal("healthcheck: out of memory");
    double *g = R, *eg = g + NF, *u = eg + NF, *eu = u + NF, *s = eu + NF, *es = s + NF;
    double *hh = es + NF, *eh = hh + NF, *dhr = eh + NF, *edh = dhr + NF, *dgr = edh + NF;
    double *edg = dgr + NF, *dur = edg + NF, *edu = dur + NF, *zr = edu + NF;
    double *ez = zr + NV, *dz = ez + NV, *edz = dz + NV, *dwor = edz + NV, *edwo = dwor + MV * MF;
    double *dxr = edwo + MV * MF, *edx = dxr + MN * MC;
    double gC = gamma_n(MC, U32), gF = gamma_n(MF, U32), gV = gamma_n(MV, U32);
    double gN = gamma_n(MN, U32), g2F = gamma_n(2 * MF, U32);
    for (int n = 0; n < MN; n++)
        for (int f = 0; f < MF; f++) {
            double a = 0, ma = 0, b = 0, mb = 0;
            for (int c = 0; c < MC; c++) {
                double xv = x[n * MC + c];
                a += xv * wg[f * MC + c], ma += fabs(xv * wg[f * MC + c]);
                b += xv * wu[f * MC + c], mb += fabs(xv * wu[f * MC + c]);
            }
            int i = n * MF + f;
            g[i] = a, eg[i] = gC * ma, u[i] = b, eu[i] = gC * mb;
            s[i] = a * sigm(a);
            es[i] = 1.1 * eg[i] + C_ELEM * U32 * fabs(s[i]);
            hh[i] = s[i] * b;
            eh[i] = fabs(b) * es[i] + fabs(s[i]) * eu[i] + U32 * fabs(hh[i]);
        }
    double loss_ref = 0, eloss = 0;
    for (int n = 0; n < MN; n++) {
        double zmax = -INFINITY, ezmax = 0;
        for (int v = 0; v < MV; v++) {
            double a = 0, m = 0, e = 0;
            for (int f = 0; f < MF; f++) {
                a += hh[n * MF + f] * wo[v * MF + f];
                m += fabs(hh[n * MF + f] * wo[v * MF + f]);
                e += eh[n * MF + f] * fabs(wo[v * MF + f]);
            }
            zr[n * MV + v] = a, ez[n * MV + v] = gF * m + e;
            if (a > zmax) zmax = a;
            if (ez[n * MV + v] > ezmax) ezmax = ez[n * MV + v];
        }
        double se = 0;
        for (int v = 0; v < MV; v++)
            se += exp(zr[n * MV + v] - zmax);
        double lse = zmax + log(se), ln = lse - zr[n * MV + tgt[n]];
        loss_ref += ln / MN;
        eloss +=
            (2 * ezmax + (MV + C_ELEM) * U32 * (fabs(lse) + fabs(zr[n * MV + tgt[n]]) + 1)) / MN;
        for (int v = 0; v < MV; v++) {
            double p = exp(zr[n * MV + v] - lse);
            dz[n * MV + v] = (p - (v == tgt[n])) / MN;
            edz[n * MV + v] =
                (2 * p * ezmax + (MV + C_ELEM) * U32 * p) / MN + U32 * fabs(dz[n * MV + v]);
        }
    }
    eloss += gN * fabs(loss_ref);
    for (int n = 0; n < MN; n++)
        for (int f = 0; f < MF; f++) {
            double a = 0, m = 0, e = 0;
            for (int v = 0; v < MV; v++) {
                a += dz[n * MV + v] * wo[v * MF + f];
                m += fabs(dz[n * MV + v] * wo[v * MF + f]);
                e += edz[n * MV + v] * fabs(wo[v * MF + f]);
            }
            int i = n * MF + f;
            dhr[i] = a, edh[i] = gV * m + e;
            double sg = sigm(g[i]), d1 = sg * (1 + g[i] * (1 - sg));
            dgr[i] = a * u[i] * d1;
            edg[i] = fabs(u[i] * d1) * edh[i] + fabs(a * d1) * eu[i] +
                     0.5 * fabs(a * u[i]) * eg[i] + C_ELEM * U32 * fabs(dgr[i]);
            dur[i] = a * s[i];
            edu[i] = fabs(s[i]) * edh[i] + fabs(a) * es[i] + U32 * fabs(dur[i]);
        }
    for (int v = 0; v < MV; v++)
        for (int f = 0; f < MF; f++) {
            double a = 0, m = 0, e = 0;
            for (int n = 0; n < MN; n++) {
                a += dz[n * MV + v] * hh[n * MF + f];
                m += fabs(dz[n * MV + v] * hh[n * MF + f]);
                e += edz[n * MV + v] * fabs(hh[n * MF + f]) + fabs(dz[n * MV + v]) * eh[n * MF + f];
            }
            dwor[v * MF + f] = a, edwo[v * MF + f] = gN * m + e;
        }
    for (int n = 0; n < MN; n++)
        for (int c = 0; c < MC; c++) {
            double a = 0, m = 0, e = 0;
            for (int f = 0; f < MF; f++) {
                int i = n * MF + f;
                a += dgr[i] * wg[f * MC + c] + dur[i] * wu[f * MC + c];
                m += fabs(dgr[i] * wg[f * MC + c]) + fabs(dur[i] * wu[f * MC + c]);
                e += edg[i] * fabs(wg[f * MC + c]) + edu[i] * fabs(wu[f * MC + c]);
            }
            dxr[n * MC + c] = a, edx[n * MC + c] = g2F * m + e;
        }
    mcheck mc = {r, -1};
    mcmp(&mc, "loss", &loss, &loss_ref, &eloss, 1);
    mcmp(&mc, "dW_out", dwo, dwor, edwo, MV * MF);
    mcmp(&mc, "dx", dx, dxr, edx, MN * MC);
    uint64_t hs = *hash;
    hs = slm_xxh64(&loss, sizeof loss, hs);
    hs = slm_xxh64(dwo, sizeof(float) * MV * MF, hs);
    hs = slm_xxh64(dx, sizeof(float) * MN * MC, hs);
    *hash = hs;
    free(R);
    free(x), free(wg), free(wu), free(wo), free(gate), free(up), free(h), free(z);
    free(dh), free(dwo), free(dgate), free(dup), free(dx);
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
    check_gemm(&me, inject, &hash);
    check_model(&me, inject, &hash);
    me.out_hash = hash;
    check_mem(&me, o->mem_bytes, inject);
    check_dirs(&me, o, inject);
    check_collectives(&me, rank, world, inject);

    rep->world = world;
    rep->ranks = calloc((size_t)world, sizeof *rep->ranks);
    if (!rep->ranks) return slm_fail(SLM_E_NOMEM, "healthcheck: out of memory");
    slm_dist_allgather(&me, rep->ranks, (int64_t)sizeof me, SLM_DTYPE_U8, "healthcheck results");
    // bitwise: within each CPU model, the majority's output hash is the reference; a rank
    // without a strict majority behind its hash (a tie) fails too (the bad core is unknown).
    // Ranks that already failed a bound (gemm, model) are named by it and do not vote.
    const uint32_t bounded = SLM_HEALTH_GEMM | SLM_HEALTH_MODEL;
    for (int i = 0; i < world; i++) {
        int same = 0, agree = 0;
        if (rep->ranks[i].failed & bounded) continue;
        for (int j = 0; j < world; j++) {
            if (rep->ranks[j].failed & bounded) continue;
            if (strcmp(rep->ranks[j].cpu, rep->ranks[i].cpu) != 0) continue;
            same++;
            agree += rep->ranks[j].out_hash == rep->ranks[i].out_hash;
        }
        if (same > 1 && 2 * agree <= same) {
            int other = -1;
            for (int j = 0; j < world && other < 0; j++)
                if (!(rep->ranks[j].failed & bounded) &&
                    !strcmp(rep->ranks[j].cpu, rep->ranks[i].cpu) &&
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
