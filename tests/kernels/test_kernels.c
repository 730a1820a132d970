// CPU kernels vs naive double-precision references written here (plain loops, no shared code
// with src/kernels), on odd sizes. Each naive analytic backward is itself checked once against
// central finite differences of the naive forward (in double), so the chain is anchored in
// calculus rather than in the code under test. Also: causal attention with T not a multiple of
// the tile, GQA (KV < H) and KV = H, cross-entropy with ignored rows and huge logits, and
// bitwise determinism (run twice, memcmp).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "test.h"

#include <cblas.h> // last: it pulls in <complex.h>, whose macro I clashes with names above
#undef I

static slm_rng rng_;

static float *randn(int64_t n, float std) {
    float *x = slm_xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = slm_rng_normal(&rng_) * std;
    return x;
}
static double *to_d(const float *x, int64_t n) {
    double *y = slm_xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}
// max_i |a_i - b_i| / max(max_i |b_i|, 0.1): a scale-aware error for whole tensors (the floor
// keeps tensors that are analytically ~0, like dq at T = 1, from dividing by rounding noise).
static double max_err(const float *a, const double *b, int64_t n) {
    double mx = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (e > mx) mx = e;
        if (fabs(b[i]) > ref) ref = fabs(b[i]);
    }
    return mx / fmax(ref, 0.1);
}
// GEMM results against the componentwise error bound of floating-point dot products, which holds
// for any summation order, blocking and FMA use, i.e. for any BLAS kernel on any CPU (Higham 2002,
// eq. 3.5 / 3.13): |fl(C0 + sum_k a_k b_k) - exact| <= gamma_{K+1} (|C0| + sum_k |a_k b_k|),
// gamma_n = n u / (1 - n u), u = 2^-24. abs[i] holds |C0| + sum |a_k b_k| for element i (in
// double, whose own error ~1e-16 relative is negligible). Returns max_i |got - ref| / bound_i
// (<= 1 passes; NaN fails).
static double gemm_bound_ratio(const float *got, const double *ref, const double *abs, int64_t n,
                               int64_t K) {
    double u = ldexp(1.0, -24), g = (double)(K + 1) * u / (1.0 - (double)(K + 1) * u), w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (g * abs[i] + 1e-300);
        if (!(e <= w)) w = e;
    }
    return w;
}
static double *abs_d(const float *x, int64_t n) {
    double *y = slm_xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        y[i] = fabs((double)x[i]);
    return y;
}

// ---------------------------------------------------------------------------------------------
// matmul

static void test_matmul(void) {
    // Every GEMM result is checked against the kernel-independent bound of gemm_bound_ratio
    // (K = 40 for out, O = 29 for dinp, N = 37 for dW). Measured max ratios here and in
    // check_matmul_sliced: 0.002-0.095 with OPENBLAS_CORETYPE SkylakeX, Haswell and Prescott.
    const int64_t N = 37, I = 40, O = 29;
    float *x = randn(N * I, 1), *W = randn(O * I, 0.3f), *out = randn(N * O, 1);
    float *out0 = slm_xmalloc((size_t)(N * O) * sizeof(float));
    memcpy(out0, out, (size_t)(N * O) * sizeof(float));
    double *ref = slm_xcalloc((size_t)(N * O), sizeof(double));
    double *aref = slm_xcalloc((size_t)(N * O), sizeof(double));
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            double s = 0, a = 0;
            for (int64_t i = 0; i < I; i++) {
                s += (double)x[n * I + i] * W[o * I + i];
                a += fabs((double)x[n * I + i] * W[o * I + i]);
            }
            ref[n * O + o] = s;
            aref[n * O + o] = a;
        }
    slm_matmul_fwd(out, x, W, N, I, O, false);
    double r = gemm_bound_ratio(out, ref, aref, N * O, I);
    CHECK_MSG(r <= 1.0, "fwd: %g of the fp32 bound", r);
    for (int64_t i = 0; i < N * O; i++)
        ref[i] += out0[i], aref[i] += fabs((double)out0[i]);
    memcpy(out, out0, (size_t)(N * O) * sizeof(float));
    slm_matmul_fwd(out, x, W, N, I, O, true);
    r = gemm_bound_ratio(out, ref, aref, N * O, I);
    CHECK_MSG(r <= 1.0, "fwd accumulate: %g of the fp32 bound", r);

    // backward: dinp += dout W, dW += dout^T x, both accumulating onto existing values
    float *dout = randn(N * O, 1), *dx = randn(N * I, 1), *dW = randn(O * I, 1);
    double *rdx = to_d(dx, N * I), *rdW = to_d(dW, O * I);
    double *adx = abs_d(dx, N * I), *adW = abs_d(dW, O * I);
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < I; i++) {
                rdx[n * I + i] += (double)dout[n * O + o] * W[o * I + i];
                rdW[o * I + i] += (double)dout[n * O + o] * x[n * I + i];
                adx[n * I + i] += fabs((double)dout[n * O + o] * W[o * I + i]);
                adW[o * I + i] += fabs((double)dout[n * O + o] * x[n * I + i]);
            }
    slm_matmul_bwd(dx, dW, dout, x, W, N, I, O);
    r = gemm_bound_ratio(dx, rdx, adx, N * I, O);
    CHECK_MSG(r <= 1.0, "dinp: %g of the fp32 bound", r);
    r = gemm_bound_ratio(dW, rdW, adW, O * I, N);
    CHECK_MSG(r <= 1.0, "dW: %g of the fp32 bound", r);
    free(aref), free(adx), free(adW);
    // NULL outputs are skipped
    slm_matmul_bwd(NULL, NULL, dout, x, W, N, I, O);
    // the naive backward formulas vs central differences of L = sum(out * dout), in double
    for (int trial = 0; trial < 6; trial++) {
        bool wrt_w = trial % 2;
        int64_t n = (int64_t)slm_rng_below(&rng_, (uint64_t)N);
        int64_t o = (int64_t)slm_rng_below(&rng_, (uint64_t)O);
        int64_t i = (int64_t)slm_rng_below(&rng_, (uint64_t)I);
        double h = 1e-3, an = 0, lp = 0, lm = 0;
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            double l = 0;
            for (int64_t nn = 0; nn < N; nn++)
                for (int64_t oo = 0; oo < O; oo++) {
                    double acc = 0;
                    for (int64_t ii = 0; ii < I; ii++) {
                        double xv = x[nn * I + ii], wv = W[oo * I + ii];
                        if (!wrt_w && nn == n && ii == i) xv += sgn * h;
                        if (wrt_w && oo == o && ii == i) wv += sgn * h;
                        acc += xv * wv;
                    }
                    l += acc * dout[nn * O + oo];
                }
            if (sgn < 0)
                lm = l;
            else
                lp = l;
        }
        if (wrt_w)
            for (int64_t nn = 0; nn < N; nn++)
                an += (double)dout[nn * O + o] * x[nn * I + i];
        else
            for (int64_t oo = 0; oo < O; oo++)
                an += (double)dout[n * O + oo] * W[oo * I + i];
        CHECK_CLOSE(an, (lp - lm) / (2 * h), 1e-7, 1e-7);
    }
    free(x), free(W), free(out), free(out0), free(ref), free(dout), free(dx), free(dW), free(rdx),
        free(rdW);
}

// Large enough (M*N*K >= 2e6) for the GEMMs to be sliced over the OpenMP threads: rows of the
// output when it is tall, columns when it is wide. Checked against double loops, and twice for
// bitwise determinism.
static void check_matmul_sliced(int64_t N, int64_t I, int64_t O) {
    float *x = randn(N * I, 1), *W = randn(O * I, 0.3f), *out = slm_xmalloc((size_t)(N * O) * 4);
    float *dout = randn(N * O, 1), *dx = randn(N * I, 1), *dW = randn(O * I, 1);
    double *ref = slm_xcalloc((size_t)(N * O), 8), *rdx = to_d(dx, N * I), *rdW = to_d(dW, O * I);
    double *aref = slm_xcalloc((size_t)(N * O), 8), *adx = abs_d(dx, N * I),
           *adW = abs_d(dW, O * I);
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            double s = 0, a = 0;
            for (int64_t i = 0; i < I; i++) {
                s += (double)x[n * I + i] * W[o * I + i];
                a += fabs((double)x[n * I + i] * W[o * I + i]);
                rdx[n * I + i] += (double)dout[n * O + o] * W[o * I + i];
                rdW[o * I + i] += (double)dout[n * O + o] * x[n * I + i];
                adx[n * I + i] += fabs((double)dout[n * O + o] * W[o * I + i]);
                adW[o * I + i] += fabs((double)dout[n * O + o] * x[n * I + i]);
            }
            ref[n * O + o] = s;
            aref[n * O + o] = a;
        }
    float *dx2 = slm_xmalloc((size_t)(N * I) * 4), *dW2 = slm_xmalloc((size_t)(O * I) * 4);
    float *out2 = slm_xmalloc((size_t)(N * O) * 4);
    memcpy(dx2, dx, (size_t)(N * I) * 4);
    memcpy(dW2, dW, (size_t)(O * I) * 4);
    slm_matmul_fwd(out, x, W, N, I, O, false);
    slm_matmul_bwd(dx, dW, dout, x, W, N, I, O);
    // the kernel-independent fp32 bound (gemm_bound_ratio), per element
    double r = gemm_bound_ratio(out, ref, aref, N * O, I);
    CHECK_MSG(r <= 1.0, "fwd: %g of the fp32 bound", r);
    r = gemm_bound_ratio(dx, rdx, adx, N * I, O);
    CHECK_MSG(r <= 1.0, "dinp: %g of the fp32 bound", r);
    r = gemm_bound_ratio(dW, rdW, adW, O * I, N);
    CHECK_MSG(r <= 1.0, "dW: %g of the fp32 bound", r);
    free(aref), free(adx), free(adW);
    slm_matmul_fwd(out2, x, W, N, I, O, false);
    slm_matmul_bwd(dx2, dW2, dout, x, W, N, I, O);
    CHECK(memcmp(out, out2, (size_t)(N * O) * 4) == 0);
    CHECK(memcmp(dx, dx2, (size_t)(N * I) * 4) == 0 && memcmp(dW, dW2, (size_t)(O * I) * 4) == 0);
    free(x), free(W), free(out), free(dout), free(dx), free(dW), free(ref), free(rdx), free(rdW),
        free(dx2), free(dW2), free(out2);
}
static void test_matmul_sliced_tall(void) {
    check_matmul_sliced(301, 64, 131);
}
static void test_matmul_sliced_wide(void) {
    check_matmul_sliced(70, 520, 93);
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

static void rms_fwd_d(double *y, const double *x, const double *w, int64_t N, int C, double eps) {
    for (int64_t n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < C; i++)
            ss += x[n * C + i] * x[n * C + i];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++)
            y[n * C + i] = x[n * C + i] * r * w[i];
    }
}
// Naive analytic backward (derived by hand: y_i = x_i r w_i, dr/dx_k = -r^3 x_k / C).
static void rms_bwd_d(double *dx, double *dw, const double *dy, const double *x, const double *w,
                      int64_t N, int C, double eps) {
    for (int64_t n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < C; i++)
            ss += x[n * C + i] * x[n * C + i];
        double r = 1.0 / sqrt(ss / C + eps);
        double dot = 0;
        for (int i = 0; i < C; i++)
            dot += dy[n * C + i] * w[i] * x[n * C + i];
        for (int k = 0; k < C; k++) {
            dx[n * C + k] += dy[n * C + k] * w[k] * r - dot * r * r * r * x[n * C + k] / C;
            dw[k] += dy[n * C + k] * x[n * C + k] * r;
        }
    }
}

static void test_rmsnorm(void) {
    const int64_t N = 37;
    const int C = 40;
    const float eps = 1e-5f;
    float *x = randn(N * C, 1), *w = randn(C, 1), *y = slm_xmalloc((size_t)(N * C) * 4);
    float *rstd = slm_xmalloc((size_t)N * 4);
    double *xd = to_d(x, N * C), *wd = to_d(w, C), *yd = slm_xmalloc((size_t)(N * C) * 8);
    rms_fwd_d(yd, xd, wd, N, C, eps);
    slm_rmsnorm_fwd(y, rstd, x, w, N, C, eps);
    CHECK(max_err(y, yd, N * C) < 2e-6);
    for (int64_t n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < C; i++)
            ss += xd[n * C + i] * xd[n * C + i];
        CHECK_CLOSE(rstd[n], 1.0 / sqrt(ss / C + eps), 1e-6, 0);
    }

    // backward vs naive analytic, both accumulating onto nonzero buffers
    float *dy = randn(N * C, 1), *dx = randn(N * C, 1), *dw = randn(C, 1);
    double *dyd = to_d(dy, N * C), *dxd = to_d(dx, N * C), *dwd = to_d(dw, C);
    rms_bwd_d(dxd, dwd, dyd, xd, wd, N, C, eps);
    slm_rmsnorm_bwd(dx, dw, dy, x, w, rstd, N, C);
    CHECK(max_err(dx, dxd, N * C) < 2e-6);
    CHECK(max_err(dw, dwd, C) < 2e-6);

    // the naive analytic backward vs finite differences of L = sum(y * dy)
    double *gx = slm_xcalloc((size_t)(N * C), 8), *gw = slm_xcalloc((size_t)C, 8);
    rms_bwd_d(gx, gw, dyd, xd, wd, N, C, eps);
    const double h = 1e-6;
    for (int trial = 0; trial < 12; trial++) {
        int64_t idx = (int64_t)slm_rng_below(&rng_, (uint64_t)(N * C));
        double *which = trial % 2 ? xd : wd;
        int64_t k = trial % 2 ? idx : idx % C;
        double save = which[k], lp = 0, lm = 0;
        which[k] = save + h;
        rms_fwd_d(yd, xd, wd, N, C, eps);
        for (int64_t i = 0; i < N * C; i++)
            lp += yd[i] * dyd[i];
        which[k] = save - h;
        rms_fwd_d(yd, xd, wd, N, C, eps);
        for (int64_t i = 0; i < N * C; i++)
            lm += yd[i] * dyd[i];
        which[k] = save;
        double fd = (lp - lm) / (2 * h), an = trial % 2 ? gx[k] : gw[k];
        CHECK_CLOSE(an, fd, 1e-5, 1e-7);
    }

    // determinism (dw is a cross-row reduction)
    float *dx2 = slm_xcalloc((size_t)(N * C), 4), *dw2 = slm_xcalloc((size_t)C, 4);
    float *dx3 = slm_xcalloc((size_t)(N * C), 4), *dw3 = slm_xcalloc((size_t)C, 4);
    slm_rmsnorm_bwd(dx2, dw2, dy, x, w, rstd, N, C);
    slm_rmsnorm_bwd(dx3, dw3, dy, x, w, rstd, N, C);
    CHECK(memcmp(dx2, dx3, (size_t)(N * C) * 4) == 0 && memcmp(dw2, dw3, (size_t)C * 4) == 0);
    free(x), free(w), free(y), free(rstd), free(xd), free(wd), free(yd), free(dy), free(dx),
        free(dw), free(dyd), free(dxd), free(dwd), free(gx), free(gw), free(dx2), free(dw2),
        free(dx3), free(dw3);
}

// ---------------------------------------------------------------------------------------------
// RoPE

static void test_rope(void) {
    const int B = 2, T = 13, nh = 3, D = 24;
    const float theta = 10000.0f;
    const int pos0 = 4, TT = T + pos0;
    float *ct = slm_xmalloc((size_t)TT * D / 2 * 4), *st = slm_xmalloc((size_t)TT * D / 2 * 4);
    slm_rope_tables(ct, st, TT, D, theta);
    for (int t = 0; t < TT; t++)
        for (int i = 0; i < D / 2; i++) {
            double a = t * pow(theta, -2.0 * i / D);
            CHECK_CLOSE(ct[t * D / 2 + i], cos(a), 0, 2e-7);
            CHECK_CLOSE(st[t * D / 2 + i], sin(a), 0, 2e-7);
        }
    int64_t n = (int64_t)B * T * nh * D;
    float *x = randn(n, 1), *y = slm_xmalloc((size_t)n * 4);
    memcpy(y, x, (size_t)n * 4);
    slm_rope_apply(y, ct, st, B, T, nh, D, pos0, false);
    double *ref = slm_xmalloc((size_t)n * 8);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++) {
                int64_t o = (((int64_t)b * T + t) * nh + h) * D;
                for (int i = 0; i < D / 2; i++) {
                    double a = (t + pos0) * pow(theta, -2.0 * i / D);
                    double x1 = x[o + i], x2 = x[o + i + D / 2];
                    // HF: q * cos + rotate_half(q) * sin, rotate_half(q) = cat(-q2, q1)
                    ref[o + i] = x1 * cos(a) - x2 * sin(a);
                    ref[o + i + D / 2] = x2 * cos(a) + x1 * sin(a);
                }
            }
    CHECK(max_err(y, ref, n) < 1e-6);
    // the backward (inverse = true) is the adjoint: <R x, g> == <x, R^T g>
    float *g = randn(n, 1), *gT = slm_xmalloc((size_t)n * 4);
    memcpy(gT, g, (size_t)n * 4);
    slm_rope_apply(gT, ct, st, B, T, nh, D, pos0, true);
    double l1 = 0, l2 = 0;
    for (int64_t i = 0; i < n; i++)
        l1 += ref[i] * g[i], l2 += (double)x[i] * gT[i];
    CHECK_CLOSE(l2, l1, 1e-5, 1e-6);
    // and it undoes the forward
    slm_rope_apply(y, ct, st, B, T, nh, D, pos0, true);
    double e = 0;
    for (int64_t i = 0; i < n; i++)
        e = fmax(e, fabs(y[i] - x[i]));
    CHECK(e < 1e-5);
    free(ct), free(st), free(x), free(y), free(ref), free(g), free(gT);
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

static double silu_d(double g) {
    return g / (1.0 + exp(-g));
}

static void test_swiglu(void) {
    const int64_t N = 37, F = 301;
    const int64_t n = N * F;
    float *g = randn(n, 3), *u = randn(n, 1), *h = slm_xmalloc((size_t)n * 4);
    g[0] = 95.0f, g[1] = -95.0f, g[2] = 0.0f; // saturated sigmoid both ways
    double *ref = slm_xmalloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++)
        ref[i] = silu_d(g[i]) * u[i];
    slm_swiglu_fwd(h, g, u, N, F);
    CHECK(max_err(h, ref, n) < 1e-6);
    float *dh = randn(n, 1), *dg = slm_xmalloc((size_t)n * 4), *du = slm_xmalloc((size_t)n * 4);
    slm_swiglu_bwd(dg, du, dh, g, u, N, F);
    // reference gradients by central finite differences in double of silu(g) * u
    double *rg = slm_xmalloc((size_t)n * 8), *ru = slm_xmalloc((size_t)n * 8);
    const double eps = 1e-5;
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i], ui = u[i];
        rg[i] = dh[i] * ui * (silu_d(gi + eps) - silu_d(gi - eps)) / (2 * eps);
        ru[i] = dh[i] * silu_d(gi);
    }
    CHECK(max_err(dg, rg, n) < 1e-6);
    CHECK(max_err(du, ru, n) < 1e-6);
    free(g), free(u), free(h), free(ref), free(dh), free(dg), free(du), free(rg), free(ru);
}

// ---------------------------------------------------------------------------------------------
// Embedding

static void test_embedding(void) {
    const int64_t N = 37, V = 11;
    const int C = 40;
    int32_t tok[37];
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)slm_rng_below(&rng_, (uint64_t)V);
    tok[3] = tok[5] = tok[30] = 7; // repeats accumulate
    float *table = randn(V * C, 1), *out = slm_xmalloc((size_t)(N * C) * 4);
    slm_embedding_fwd(out, tok, table, N, C);
    for (int64_t n = 0; n < N; n++)
        CHECK(memcmp(out + n * C, table + (int64_t)tok[n] * C, (size_t)C * 4) == 0);
    float *dout = randn(N * C, 1), *dt = randn(V * C, 1), *dt2 = slm_xmalloc((size_t)(V * C) * 4);
    memcpy(dt2, dt, (size_t)(V * C) * 4);
    double *ref = to_d(dt, V * C);
    for (int64_t n = 0; n < N; n++)
        for (int i = 0; i < C; i++)
            ref[(int64_t)tok[n] * C + i] += dout[n * C + i];
    slm_embedding_bwd(dt, tok, dout, N, C);
    CHECK(max_err(dt, ref, V * C) < 1e-6);
    slm_embedding_bwd(dt2, tok, dout, N, C);
    CHECK(memcmp(dt, dt2, (size_t)(V * C) * 4) == 0);
    free(table), free(out), free(dout), free(dt), free(dt2), free(ref);
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy

static void test_cross_entropy(void) {
    const int64_t N = 9, V = 301;
    float *z = randn(N * V, 4);
    for (int64_t j = 0; j < V; j++)
        z[2 * V + j] += 1000.0f; // max subtraction must save this row
    int32_t y[9] = {5, 300, 0, -1, 17, -1, 150, 299, 1};
    const float dscale = 1.0f / 7.0f; // 7 non-ignored rows (mean reduction)
    float *zc = slm_xmalloc((size_t)(N * V) * 4);
    memcpy(zc, z, (size_t)(N * V) * 4);
    double *rloss = slm_xcalloc((size_t)N, 8), *rgrad = slm_xcalloc((size_t)(N * V), 8);
    for (int64_t n = 0; n < N; n++) {
        if (y[n] < 0) continue;
        double m = -1e300, s = 0;
        for (int64_t j = 0; j < V; j++)
            m = fmax(m, z[n * V + j]);
        for (int64_t j = 0; j < V; j++)
            s += exp((double)z[n * V + j] - m);
        rloss[n] = m + log(s) - z[n * V + y[n]];
        for (int64_t j = 0; j < V; j++)
            rgrad[n * V + j] = (exp((double)z[n * V + j] - m) / s - (j == y[n])) * dscale;
    }
    // finite-difference check of the reference gradient on one row
    {
        int64_t n = 4, j = 17;
        double h = 1e-4, lp, lm, m = -1e300, s;
        double *row = to_d(z + n * V, V);
        for (int64_t i = 0; i < V; i++)
            m = fmax(m, row[i]);
        row[j] += h, s = 0;
        for (int64_t i = 0; i < V; i++)
            s += exp(row[i] - m);
        lp = m + log(s) - row[y[n]];
        row[j] -= 2 * h, s = 0;
        for (int64_t i = 0; i < V; i++)
            s += exp(row[i] - m);
        lm = m + log(s) - row[y[n]];
        CHECK_CLOSE(rgrad[n * V + j], (lp - lm) / (2 * h) * dscale, 1e-6, 1e-9);
        free(row);
    }
    float losses[9];
    slm_cross_entropy_fused(z, losses, y, N, V, 0.0f);
    CHECK(memcmp(z, zc, (size_t)(N * V) * 4) == 0); // dscale == 0: logits untouched
    for (int64_t n = 0; n < N; n++)
        CHECK_CLOSE(losses[n], rloss[n], 1e-5, 1e-5);
    slm_cross_entropy_fused(z, losses, y, N, V, dscale);
    for (int64_t n = 0; n < N; n++)
        CHECK_CLOSE(losses[n], rloss[n], 1e-5, 1e-5);
    CHECK(max_err(z, rgrad, N * V) < 1e-6);
    for (int64_t j = 0; j < V; j++)
        CHECK(z[3 * V + j] == 0.0f && z[5 * V + j] == 0.0f);
    free(z), free(zc), free(rloss), free(rgrad);
}

// ---------------------------------------------------------------------------------------------
// Attention

// Naive causal GQA attention in double; also returns lse. Layouts as in kernels.h.
static void attn_fwd_d(double *o, double *lse, const double *q, const double *k, const double *v,
                       int B, int T, int H, int KV, int D) {
    double sc = 1.0 / sqrt((double)D), *p = slm_xmalloc((size_t)T * 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / KV);
            for (int t = 0; t < T; t++) {
                const double *qr = q + (((int64_t)b * T + t) * H + h) * D;
                double m = -1e300, s = 0;
                for (int u = 0; u <= t; u++) {
                    const double *kr = k + (((int64_t)b * T + u) * KV + g) * D;
                    double d = 0;
                    for (int i = 0; i < D; i++)
                        d += qr[i] * kr[i];
                    p[u] = d * sc;
                    m = fmax(m, p[u]);
                }
                for (int u = 0; u <= t; u++)
                    s += (p[u] = exp(p[u] - m));
                double *orow = o + (((int64_t)b * T + t) * H + h) * D;
                for (int i = 0; i < D; i++)
                    orow[i] = 0;
                for (int u = 0; u <= t; u++)
                    for (int i = 0; i < D; i++)
                        orow[i] += p[u] / s * v[(((int64_t)b * T + u) * KV + g) * D + i];
                if (lse) lse[((int64_t)b * H + h) * T + t] = m + log(s);
            }
        }
    free(p);
}

// Naive analytic backward in double (the textbook softmax Jacobian, with rowsum(P * dP) rather
// than the kernel's rowsum(dO * O)). dq, dk, dv are accumulated into (caller zeroes them).
static void attn_bwd_d(double *dq, double *dk, double *dv, const double *dout, const double *q,
                       const double *k, const double *v, int B, int T, int H, int KV, int D) {
    double sc = 1.0 / sqrt((double)D);
    double *p = slm_xmalloc((size_t)T * 8), *dp = slm_xmalloc((size_t)T * 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / KV);
            for (int t = 0; t < T; t++) {
                const double *qr = q + (((int64_t)b * T + t) * H + h) * D;
                const double *dor = dout + (((int64_t)b * T + t) * H + h) * D;
                double m = -1e300, s = 0, pd = 0;
                for (int u = 0; u <= t; u++) {
                    const double *kr = k + (((int64_t)b * T + u) * KV + g) * D;
                    double d = 0;
                    for (int i = 0; i < D; i++)
                        d += qr[i] * kr[i];
                    p[u] = d * sc;
                    m = fmax(m, p[u]);
                }
                for (int u = 0; u <= t; u++)
                    s += (p[u] = exp(p[u] - m));
                for (int u = 0; u <= t; u++) {
                    p[u] /= s;
                    const double *vr = v + (((int64_t)b * T + u) * KV + g) * D;
                    double d = 0;
                    for (int i = 0; i < D; i++)
                        d += dor[i] * vr[i];
                    dp[u] = d;
                    pd += p[u] * d;
                }
                for (int u = 0; u <= t; u++) {
                    double ds = p[u] * (dp[u] - pd) * sc;
                    int64_t ko = (((int64_t)b * T + u) * KV + g) * D;
                    for (int i = 0; i < D; i++) {
                        dv[ko + i] += p[u] * dor[i];
                        dq[(((int64_t)b * T + t) * H + h) * D + i] += ds * k[ko + i];
                        dk[ko + i] += ds * qr[i];
                    }
                }
            }
        }
    free(p), free(dp);
}

// The naive backward against finite differences of L = sum(O * G), all in double.
static void test_attention_ref_fd(void) {
    const int B = 1, T = 5, H = 4, KV = 2, D = 6;
    int64_t nq = (int64_t)B * T * H * D, nk = (int64_t)B * T * KV * D;
    float *qf = randn(nq, 1), *kf = randn(nk, 1), *vf = randn(nk, 1), *gf = randn(nq, 1);
    double *q = to_d(qf, nq), *k = to_d(kf, nk), *v = to_d(vf, nk), *G = to_d(gf, nq);
    double *o = slm_xmalloc((size_t)nq * 8);
    double *dq = slm_xcalloc((size_t)nq, 8), *dk = slm_xcalloc((size_t)nk, 8),
           *dv = slm_xcalloc((size_t)nk, 8);
    attn_bwd_d(dq, dk, dv, G, q, k, v, B, T, H, KV, D);
    double *bufs[3] = {q, k, v}, *grads[3] = {dq, dk, dv};
    int64_t sizes[3] = {nq, nk, nk};
    const double h = 1e-6;
    for (int which = 0; which < 3; which++)
        for (int64_t i = 0; i < sizes[which]; i++) {
            double save = bufs[which][i], lp = 0, lm = 0;
            bufs[which][i] = save + h;
            attn_fwd_d(o, NULL, q, k, v, B, T, H, KV, D);
            for (int64_t j = 0; j < nq; j++)
                lp += o[j] * G[j];
            bufs[which][i] = save - h;
            attn_fwd_d(o, NULL, q, k, v, B, T, H, KV, D);
            for (int64_t j = 0; j < nq; j++)
                lm += o[j] * G[j];
            bufs[which][i] = save;
            CHECK_CLOSE(grads[which][i], (lp - lm) / (2 * h), 1e-6, 1e-8);
        }
    free(qf), free(kf), free(vf), free(gf), free(q), free(k), free(v), free(G), free(o), free(dq),
        free(dk), free(dv);
}

static void check_attention(int B, int T, int H, int KV, int D) {
    int64_t nq = (int64_t)B * T * H * D, nk = (int64_t)B * T * KV * D, nl = (int64_t)B * H * T;
    float *q = randn(nq, 1), *k = randn(nk, 1), *v = randn(nk, 1), *dout = randn(nq, 1);
    // a few large scores so the online max actually moves between tiles
    for (int64_t i = 0; i < nq; i += 97)
        q[i] *= 6.0f;
    float *out = slm_xmalloc((size_t)nq * 4), *lse = slm_xmalloc((size_t)nl * 4);
    double *qd = to_d(q, nq), *kd = to_d(k, nk), *vd = to_d(v, nk), *dod = to_d(dout, nq);
    double *od = slm_xmalloc((size_t)nq * 8), *lsed = slm_xmalloc((size_t)nl * 8);
    attn_fwd_d(od, lsed, qd, kd, vd, B, T, H, KV, D);
    slm_attention_fwd(out, lse, q, k, v, B, T, H, KV, D);
    CHECK_MSG(max_err(out, od, nq) < 2e-6, "out err %g (B%d T%d H%d KV%d D%d)",
              max_err(out, od, nq), B, T, H, KV, D);
    CHECK_MSG(max_err(lse, lsed, nl) < 2e-6, "lse err %g", max_err(lse, lsed, nl));

    // dq/dk/dv are written (=): start from garbage to prove it
    float *dq = randn(nq, 9), *dk = randn(nk, 9), *dv = randn(nk, 9);
    double *dqd = slm_xcalloc((size_t)nq, 8), *dkd = slm_xcalloc((size_t)nk, 8),
           *dvd = slm_xcalloc((size_t)nk, 8);
    attn_bwd_d(dqd, dkd, dvd, dod, qd, kd, vd, B, T, H, KV, D);
    slm_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KV, D);
    CHECK_MSG(max_err(dq, dqd, nq) < 1e-5, "dq err %g", max_err(dq, dqd, nq));
    CHECK_MSG(max_err(dk, dkd, nk) < 1e-5, "dk err %g", max_err(dk, dkd, nk));
    CHECK_MSG(max_err(dv, dvd, nk) < 1e-5, "dv err %g", max_err(dv, dvd, nk));

    // determinism: bitwise-identical second run
    float *out2 = slm_xmalloc((size_t)nq * 4), *lse2 = slm_xmalloc((size_t)nl * 4);
    float *dq2 = slm_xmalloc((size_t)nq * 4), *dk2 = slm_xmalloc((size_t)nk * 4),
          *dv2 = slm_xmalloc((size_t)nk * 4);
    slm_attention_fwd(out2, lse2, q, k, v, B, T, H, KV, D);
    slm_attention_bwd(dq2, dk2, dv2, dout, q, k, v, out2, lse2, B, T, H, KV, D);
    CHECK(memcmp(out, out2, (size_t)nq * 4) == 0 && memcmp(lse, lse2, (size_t)nl * 4) == 0);
    CHECK(memcmp(dq, dq2, (size_t)nq * 4) == 0 && memcmp(dk, dk2, (size_t)nk * 4) == 0 &&
          memcmp(dv, dv2, (size_t)nk * 4) == 0);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(qd), free(kd), free(vd),
        free(dod), free(od), free(lsed), free(dq), free(dk), free(dv), free(dqd), free(dkd),
        free(dvd), free(out2), free(lse2), free(dq2), free(dk2), free(dv2);
}

static void test_attention_gqa_short(void) {
    check_attention(2, 37, 6, 2, 24);
}
static void test_attention_mha_short(void) {
    check_attention(2, 37, 6, 6, 24);
}
// T = 150 spans three 64-row tiles, the last one partial.
static void test_attention_gqa_tiles(void) {
    check_attention(1, 150, 6, 2, 24);
}
static void test_attention_mha_tiles(void) {
    check_attention(2, 150, 3, 3, 24);
}
// D = 128 shrinks the tile to 32 rows; T = 70 gives three tiles, the last of 6 rows.
static void test_attention_d128(void) {
    check_attention(1, 70, 2, 1, 128);
}
static void test_attention_t1(void) {
    check_attention(3, 1, 4, 2, 8);
}
// D = 48 (the `tiny` preset), GQA 4:1, T = 100.
static void test_attention_d48(void) {
    check_attention(1, 100, 4, 1, 48);
}

// ---------------------------------------------------------------------------------------------

static void test_add_and_exp(void) {
    const int64_t n = 301;
    float *a = randn(n, 1), *b = randn(n, 1), *c = slm_xmalloc((size_t)n * 4);
    slm_add(c, a, b, n);
    for (int64_t i = 0; i < n; i++)
        CHECK(c[i] == a[i] + b[i]);
    slm_add(a, a, b, n); // aliasing out == a
    CHECK(memcmp(a, c, (size_t)n * 4) == 0);
    // the vectorizable exp vs libm in double over the range the kernels use
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -87.0f + 175.0f * (float)i / 200000.0f;
        double r = exp((double)x), e = fabs(slm_expf_fast(x) - r) / r;
        if (x <= 88.0f && e > worst) worst = e;
    }
    CHECK_MSG(worst < 4e-7, "expf_fast max rel err %g", worst);
    CHECK(slm_expf_fast(-INFINITY) == 0.0f && slm_expf_fast(-100.0f) == 0.0f);
    CHECK(slm_expf_fast(0.0f) == 1.0f);
    free(a), free(b), free(c);
}

// The peak is a positive rate; after any kernel call OpenBLAS is single-threaded and, on a CPU
// with AVX2 + FMA, not on its generic SSE3 "Prescott" fallback (a 2.4x slower sgemm).
static void test_sgemm_peak_and_blas_setup(void) {
    double g = slm_sgemm_peak_gflops(64, 2);
    CHECK(g > 0 && isfinite(g));
    CHECK_EQ_INT(openblas_get_num_threads(), 1);
    __builtin_cpu_init();
    const char *core = openblas_get_corename();
    if (!getenv("OPENBLAS_CORETYPE") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        CHECK_MSG(strcmp(core, "Prescott") != 0, "OpenBLAS core %s", core);
    fprintf(stderr, "  OpenBLAS core: %s\n", core);
}

int main(void) {
    slm_rng_seed(&rng_, 1234);
    RUN(test_matmul);
    RUN(test_matmul_sliced_tall);
    RUN(test_matmul_sliced_wide);
    RUN(test_rmsnorm);
    RUN(test_rope);
    RUN(test_swiglu);
    RUN(test_embedding);
    RUN(test_cross_entropy);
    RUN(test_attention_ref_fd);
    RUN(test_attention_gqa_short);
    RUN(test_attention_mha_short);
    RUN(test_attention_gqa_tiles);
    RUN(test_attention_mha_tiles);
    RUN(test_attention_d128);
    RUN(test_attention_t1);
    RUN(test_attention_d48);
    RUN(test_add_and_exp);
    RUN(test_sgemm_peak_and_blas_setup);
    return TEST_SUMMARY();
}
