// The CUDA device (device/cuda.c, issue 22) against the CPU device, through device.h only: the
// same random host inputs (never zeros) go to both devices, every op runs on both, the results
// come back with D2H copies; device outputs are poisoned (NaN) first. Exit 77 (skip) without a
// GPU or without the CUDA backend: CI builds it, only a GPU machine runs it.
// Bounds (the derivations of tests/gpu/test_cuda_kernels.c): exact ops (fill, add, scale, bf16
// casts and rounding, bf16 accumulate, dropout, embedding forward, copies) bitwise; axpy two fp32
// roundings or one (FMA): 2u(|a x| + |y|); sums in double: n 2^-53 sum|x|; AdamW 1e-5 relative;
// row softmax 8u relative; the linear ops: both sides round the same operands to bf16 and
// accumulate in fp32, so they are within 2 gamma_K K max|a| max|b| of each other.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "device/device.h"
#include "test.h"
#include "gpu_test.h"

static slm_device *g_cu;
static slm_rng g_rng;

static float *put(slm_device *d, const float *h, int64_t n) {
    float *p = slm_dev_alloc_f32(d, n);
    slm_dev_copy(d, p, h, (size_t)n * 4, SLM_H2D);
    return p;
}

static float *nan_buf(slm_device *d, int64_t n) {
    float *h = slm_xmalloc((size_t)n * 4), *p;
    for (int64_t i = 0; i < n; i++)
        h[i] = NAN;
    p = put(d, h, n);
    free(h);
    return p;
}

static float *get(slm_device *d, const float *p, int64_t n) {
    float *h = slm_xmalloc((size_t)n * 4);
    slm_dev_copy(d, h, p, (size_t)n * 4, SLM_D2H);
    return h;
}

static void test_vector_ops(void) {
    int64_t n = 100003;
    float *x = gpu_randn(&g_rng, n, 1), *y = gpu_randn(&g_rng, n, 2);
    slm_device *cpu = slm_device_cpu();
    float *r[2][4];
    slm_device *dv[2] = {cpu, g_cu};
    for (int k = 0; k < 2; k++) {
        slm_device *d = dv[k];
        float *px = put(d, x, n), *py = put(d, y, n), *o = nan_buf(d, n);
        slm_dev_add(d, o, px, py, n);
        r[k][0] = get(d, o, n);
        slm_dev_scale(d, o, -0.3f, n);
        r[k][1] = get(d, o, n);
        slm_dev_axpy(d, py, 0.7f, px, n);
        r[k][2] = get(d, py, n);
        slm_dev_dropout(d, 0xfeedULL, 13107, 1.25f, px, o, NULL, n);
        r[k][3] = get(d, o, n);
        slm_dev_free(d, px), slm_dev_free(d, py), slm_dev_free(d, o);
    }
    CHECK_MSG(memcmp(r[0][0], r[1][0], (size_t)n * 4) == 0, "add not bitwise equal");
    CHECK_MSG(memcmp(r[0][1], r[1][1], (size_t)n * 4) == 0, "scale not bitwise equal");
    CHECK_MSG(memcmp(r[0][3], r[1][3], (size_t)n * 4) == 0, "dropout not bitwise equal");
    double u = ldexp(1.0, -24);
    for (int64_t i = 0; i < n; i++) {
        double ax = 0.7 * fabs(x[i]), e = r[0][2][i];
        CHECK_MSG(fabs(r[1][2][i] - e) <= 2 * u * (ax + fabs(y[i]) + fabs(e)), "axpy [%lld]",
                  (long long)i);
    }
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++)
            free(r[k][j]);
    free(x), free(y);
}

static void test_casts_and_sums(void) {
    int64_t n = 65539;
    float *x = gpu_randn(&g_rng, n, 3);
    slm_device *dv[2] = {slm_device_cpu(), g_cu};
    uint16_t *h[2];
    float *back[2], *acc[2], *rnd[2];
    double ss[2], s[2];
    for (int k = 0; k < 2; k++) {
        slm_device *d = dv[k];
        float *px = put(d, x, n), *o = nan_buf(d, n);
        uint16_t *b = slm_dev_alloc(d, (size_t)n * 2);
        slm_dev_f32_to_bf16(d, b, px, n);
        h[k] = slm_xmalloc((size_t)n * 2);
        slm_dev_copy(d, h[k], b, (size_t)n * 2, SLM_D2H);
        slm_dev_bf16_to_f32(d, o, b, n);
        back[k] = get(d, o, n);
        slm_dev_bf16_accumulate(d, o, b, n);
        acc[k] = get(d, o, n);
        slm_dev_copy(d, o, px, (size_t)n * 4, SLM_D2D);
        slm_dev_round_bf16(d, o, n);
        rnd[k] = get(d, o, n);
        ss[k] = slm_dev_sumsq(d, px, n);
        s[k] = slm_dev_sum(d, px, n);
        slm_dev_free(d, px), slm_dev_free(d, o), slm_dev_free(d, b);
    }
    CHECK_MSG(memcmp(h[0], h[1], (size_t)n * 2) == 0, "f32 -> bf16 not bitwise equal");
    CHECK_MSG(memcmp(back[0], back[1], (size_t)n * 4) == 0, "bf16 -> f32 not bitwise equal");
    CHECK_MSG(memcmp(acc[0], acc[1], (size_t)n * 4) == 0, "bf16 accumulate not bitwise equal");
    CHECK_MSG(memcmp(rnd[0], rnd[1], (size_t)n * 4) == 0, "bf16 rounding not bitwise equal");
    double sabs = 0, sq = 0;
    for (int64_t i = 0; i < n; i++)
        sabs += fabs(x[i]), sq += (double)x[i] * x[i];
    double b = 2 * (double)n * ldexp(1.0, -53);
    CHECK_CLOSE(ss[1], ss[0], b, 0);
    CHECK_CLOSE(s[1], s[0], 0, b * sabs);
    for (int k = 0; k < 2; k++)
        free(h[k]), free(back[k]), free(acc[k]), free(rnd[k]);
    free(x);
}

static void test_adamw_softmax(void) {
    int64_t n = 5000, rows = 9, cols = 517;
    float *p = gpu_randn(&g_rng, n, 1), *g = gpu_randn(&g_rng, n, 1),
          *m = gpu_randn(&g_rng, n, 0.1f), *v = gpu_randn(&g_rng, n, 0.1f);
    for (int64_t i = 0; i < n; i++)
        v[i] = v[i] * v[i] + 1e-3f;
    float *s = gpu_randn(&g_rng, rows * cols, 3);
    slm_device *dv[2] = {slm_device_cpu(), g_cu};
    float *rp[2], *rs[2];
    for (int k = 0; k < 2; k++) {
        slm_device *d = dv[k];
        float *pp = put(d, p, n), *pg = put(d, g, n), *pm = put(d, m, n), *pv = put(d, v, n);
        slm_dev_adamw(d, pp, pg, pm, pv, n, 0.9f, 0.95f, 1e-8f, 0.999f, 1e-3f, 0.3f);
        rp[k] = get(d, pp, n);
        float *ps = put(d, s, rows * cols);
        slm_dev_softmax_rows(d, ps, rows, cols, 0.2f);
        rs[k] = get(d, ps, rows * cols);
        slm_dev_free(d, pp), slm_dev_free(d, pg), slm_dev_free(d, pm), slm_dev_free(d, pv);
        slm_dev_free(d, ps);
    }
    gpu_close_to("AdamW", rp[1], rp[0], n, 1e-5, 1e-7);
    gpu_close_to("row softmax", rs[1], rs[0], rows * cols, 8 * ldexp(1.0, -24), 1e-12);
    for (int k = 0; k < 2; k++)
        free(rp[k]), free(rs[k]);
    free(p), free(g), free(m), free(v), free(s);
}

// The linear ops through the device (operand casts into the backend's scratch, the transposes
// of forward, dinp and dW), bf16 compute on both.
static void test_linear(void) {
    int64_t N = 70, I = 300, O = 130;
    float *x = gpu_randn(&g_rng, N * I, 1), *W = gpu_randn(&g_rng, O * I, 1),
          *dy = gpu_randn(&g_rng, N * O, 1);
    float *init_dx = gpu_randn(&g_rng, N * I, 1), *init_dW = gpu_randn(&g_rng, O * I, 1);
    slm_device *dv[2] = {slm_device_cpu(), g_cu};
    float *y[2], *dx[2], *dW[2];
    for (int k = 0; k < 2; k++) {
        slm_device *d = dv[k];
        float *px = put(d, x, N * I), *pW = put(d, W, O * I), *pdy = put(d, dy, N * O);
        float *py = nan_buf(d, N * O), *pdx = put(d, init_dx, N * I), *pdW = put(d, init_dW, O * I);
        slm_dev_linear_fwd(d, true, py, px, pW, N, I, O, false);
        slm_dev_linear_bwd(d, true, pdx, pdW, pdy, px, pW, N, I, O);
        y[k] = get(d, py, N * O), dx[k] = get(d, pdx, N * I), dW[k] = get(d, pdW, O * I);
        slm_dev_free(d, px), slm_dev_free(d, pW), slm_dev_free(d, pdy), slm_dev_free(d, py);
        slm_dev_free(d, pdx), slm_dev_free(d, pdW);
    }
    double u = ldexp(1.0, -23);
    // |x|, |W|, |dy| < 6 (normal draws of std 1 with this seed stay well inside), plus the
    // accumulated initial values' rounding (one fp32 add: u |result|)
    double m = 6.0 * 6.0;
    gpu_close_to("linear fwd", y[1], y[0], N * O, 0, 2 * I * u / (1 - I * u) * I * m);
    gpu_close_to("linear dinp", dx[1], dx[0], N * I, 2 * u, 2 * O * u / (1 - O * u) * O * m);
    gpu_close_to("linear dW", dW[1], dW[0], O * I, 2 * u, 2 * N * u / (1 - N * u) * N * m);
    for (int k = 0; k < 2; k++)
        free(y[k]), free(dx[k]), free(dW[k]);
    free(x), free(W), free(dy), free(init_dx), free(init_dW);
}

// NVML's counters of the device (libnvidia-ml comes with the driver, so with a GPU they must be
// there): memory total equal to what CUDA reports, ranges physically possible.
static void test_stats(void) {
    slm_device_stats s;
    slm_device_stats_read(g_cu, &s);
    CHECK_MSG(s.valid, "NVML counters unavailable on a GPU machine (libnvidia-ml.so.1?)");
    double fr = 0, tot = 0;
    slm_device_mem_info(g_cu, &fr, &tot);
    CHECK(tot > 0 && fr <= tot);
    CHECK_CLOSE(s.mem_total_b, tot, 0.05, 0); // NVML counts a reserved region CUDA does not
    CHECK(s.mem_used_b > 0 && s.mem_used_b <= s.mem_total_b);
    CHECK(s.util_ratio >= 0 && s.util_ratio <= 1);
    CHECK(s.power_w > 0 && s.power_w < 2000);
    CHECK(s.temp_c > 0 && s.temp_c < 120);
    printf("device: %s; NVML: %.1f of %.1f GiB used, %.0f%% busy, %.0f W, %.0f C, ECC %g\n",
           slm_device_describe(g_cu), s.mem_used_b / 1073741824.0, s.mem_total_b / 1073741824.0,
           100 * s.util_ratio, s.power_w, s.temp_c, s.ecc_uncorrected);
}

int main(void) {
    slm_status st = slm_device_open("cuda:0", &g_cu);
    if (st == SLM_E_UNSUPPORTED) {
        printf("SKIP: %s\n", slm_errmsg());
        return 77;
    }
    if (st) {
        fprintf(stderr, "slm_device_open: %s\n", slm_errmsg());
        return 1;
    }
    slm_rng_seed(&g_rng, 7);
    RUN(test_vector_ops);
    RUN(test_casts_and_sums);
    RUN(test_adamw_softmax);
    RUN(test_linear);
    RUN(test_stats);
    slm_device_close(g_cu);
    return TEST_SUMMARY();
}
