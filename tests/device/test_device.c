// device: the CPU backend's memory functions and vector ops against naive references written
// here (double precision, or the defining property: a bf16 cast is the nearest bf16 value, ties
// to even), the SLEEP backend's accounting (each GEMM-like op sleeps exactly its FLOPs / rate,
// every other op none), and slm_device_open's errors. The forward / backward ops are the
// kernels', tested against PyTorch in tests/kernels and tests/model.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "device/device.h"
#include "test.h"

#define N_ELEM 70001 // above the kernels' parallel threshold, not a multiple of any block

static float *host_rand(int64_t n, uint64_t seed, float scale) {
    float *x = slm_xmalloc((size_t)n * sizeof(float));
    slm_rng r;
    slm_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * slm_rng_normal(&r);
    return x;
}

// A device copy of host x[n].
static float *to_dev(slm_device *d, const float *x, int64_t n) {
    float *p = slm_dev_alloc_f32(d, n);
    slm_dev_copy(d, p, x, (size_t)n * sizeof(float), SLM_H2D);
    return p;
}

static float *to_host(slm_device *d, const float *p, int64_t n) {
    float *x = slm_xmalloc((size_t)n * sizeof(float));
    slm_dev_copy(d, x, p, (size_t)n * sizeof(float), SLM_D2H);
    return x;
}

static void test_memory(void) {
    slm_device *d = slm_device_cpu();
    CHECK(slm_device_kind_of(NULL) == SLM_DEVICE_CPU);
    CHECK_EQ_STR(slm_device_name(d), "cpu");
    // 5 MiB: through the parallel copy path; 100 bytes: the plain one.
    int64_t sizes[2] = {(int64_t)5 << 18, 25};
    for (int s = 0; s < 2; s++) {
        int64_t n = sizes[s];
        float *x = host_rand(n, 1 + (uint64_t)s, 1.0f);
        float *p = to_dev(d, x, n);
        CHECK((uintptr_t)p % 64 == 0);
        float *q = slm_dev_alloc_f32(d, n);
        slm_dev_copy(d, q, p, (size_t)n * 4, SLM_D2D);
        float *y = to_host(d, q, n);
        CHECK(memcmp(x, y, (size_t)n * 4) == 0);
        slm_dev_zero(d, q, (size_t)n * 4);
        slm_dev_copy(d, y, q, (size_t)n * 4, SLM_D2H);
        for (int64_t i = 0; i < n; i++)
            CHECK_MSG(y[i] == 0.0f && !signbit(y[i]), "zero: element %lld", (long long)i);
        slm_dev_fill(d, q, -2.5f, n);
        slm_dev_copy(d, y, q, (size_t)n * 4, SLM_D2H);
        for (int64_t i = 0; i < n; i++)
            CHECK_MSG(y[i] == -2.5f, "fill: element %lld", (long long)i);
        slm_dev_free(d, p);
        slm_dev_free(d, q);
        free(x);
        free(y);
    }
    slm_dev_free(d, NULL);
    // host staging: aligned, writable, freed by its own call (NULL is a no-op)
    uint8_t *h = slm_dev_host_alloc(d, 1000);
    CHECK((uintptr_t)h % 64 == 0);
    memset(h, 7, 1000);
    slm_dev_host_free(d, h);
    slm_dev_host_free(d, NULL);
    slm_stream *s = slm_dev_stream_create(d);
    slm_event *e = slm_dev_event_create(d);
    slm_dev_event_record(d, e, NULL);
    slm_dev_stream_wait(d, s, e);
    slm_dev_sync(d);
    slm_dev_event_destroy(d, e);
    slm_dev_stream_destroy(d, s);
}

// axpy (two fp32 roundings: product, sum), scale and add (one each) against double.
static void test_elementwise(void) {
    int64_t n = N_ELEM;
    float *x = host_rand(n, 11, 1.0f), *y = host_rand(n, 12, 3.0f);
    float *dx = to_dev(NULL, x, n), *dy = to_dev(NULL, y, n);
    slm_dev_axpy(NULL, dy, 0.375f, dx, n);
    float *r = to_host(NULL, dy, n);
    const double u = ldexp(1.0, -24); // unit roundoff of fp32
    for (int64_t i = 0; i < n; i++) {
        // two roundings: of the product a x, then of the sum
        double ax = 0.375 * (double)x[i], e = (double)y[i] + ax;
        CHECK_MSG(fabs(r[i] - e) <= u * (fabs(ax) + fabs(e)) * 1.0000001, "axpy %lld: %.9g vs %.9g",
                  (long long)i, r[i], e);
    }
    slm_dev_scale(NULL, dy, -0.1f, n);
    float *s = to_host(NULL, dy, n);
    for (int64_t i = 0; i < n; i++) {
        double e = (double)r[i] * (double)-0.1f;
        CHECK_MSG(fabs(s[i] - e) <= u * fabs(e) * 1.0000001, "scale %lld", (long long)i);
    }
    slm_dev_add(NULL, dy, dy, dx, n); // aliasing out == a
    float *a = to_host(NULL, dy, n);
    for (int64_t i = 0; i < n; i++) {
        double e = (double)s[i] + (double)x[i];
        CHECK_MSG(fabs(a[i] - e) <= u * fabs(e) * 1.0000001, "add %lld", (long long)i);
    }
    free(x), free(y), free(r), free(s), free(a);
    slm_dev_free(NULL, dx), slm_dev_free(NULL, dy);
}

// Sums in double over fp32 inputs: each of the n additions rounds by at most 2^-53 of a partial
// sum, so |error| <= n * 2^-53 * sum |terms| (Higham, "Accuracy and Stability", 4.2).
static void test_sums(void) {
    int64_t n = N_ELEM;
    float *x = host_rand(n, 21, 2.0f);
    float *dx = to_dev(NULL, x, n);
    double ss = 0, sa = 0, s = 0, sabs = 0;
    for (int64_t i = 0; i < n; i++) {
        ss += (double)x[i] * x[i];
        s += x[i];
        sabs += fabs(x[i]);
    }
    sa = ss;
    double bound = (double)n * ldexp(1.0, -53);
    CHECK_CLOSE(slm_dev_sumsq(NULL, dx, n), sa, 2 * bound, 0);
    CHECK_CLOSE(slm_dev_sum(NULL, dx, n), s, 0, 2 * bound * sabs);
    CHECK(slm_dev_sumsq(NULL, dx, 0) == 0.0);
    // thread-count independence: the same bits on 1 thread and on the machine's count
    int th = slm_device_threads(NULL);
    double a = slm_dev_sumsq(NULL, dx, n);
    CHECK_EQ_INT(slm_device_set_threads(NULL, 1), 1);
    double b = slm_dev_sumsq(NULL, dx, n);
    slm_device_set_threads(NULL, th);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    free(x);
    slm_dev_free(NULL, dx);
}

// One AdamW segment against the formula in double; inputs bounded away from 0 so the relative
// bound of a few fp32 roundings per quantity holds.
static void test_adamw(void) {
    int64_t n = 4096;
    float *p = host_rand(n, 31, 1.0f), *g = host_rand(n, 32, 1.0f), *m = host_rand(n, 33, 0.1f);
    float *v = host_rand(n, 34, 0.1f);
    for (int64_t i = 0; i < n; i++)
        v[i] = v[i] * v[i] + 1e-3f;
    float *dp = to_dev(NULL, p, n), *dg = to_dev(NULL, g, n), *dm = to_dev(NULL, m, n);
    float *dv = to_dev(NULL, v, n);
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, dec = 0.999f, step = 1e-3f, bc2s = 0.3f;
    slm_dev_adamw(NULL, dp, dg, dm, dv, n, b1, b2, eps, dec, step, bc2s);
    float *rp = to_host(NULL, dp, n), *rm = to_host(NULL, dm, n), *rv = to_host(NULL, dv, n);
    for (int64_t i = 0; i < n; i++) {
        double mi = (double)b1 * m[i] + (1.0 - (double)b1) * g[i];
        double vi = (double)b2 * v[i] + (1.0 - (double)b2) * (double)g[i] * g[i];
        double pi = (double)p[i] * dec - (double)step * mi / (sqrt(vi) / bc2s + eps);
        CHECK_CLOSE(rm[i], mi, 1e-6, 1e-7 * fabs(g[i]) + 1e-9);
        CHECK_CLOSE(rv[i], vi, 1e-6, 0);
        CHECK_CLOSE(rp[i], pi, 1e-6, 1e-9);
    }
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
    slm_dev_free(NULL, dp), slm_dev_free(NULL, dg), slm_dev_free(NULL, dm), slm_dev_free(NULL, dv);
}

static float widen(uint16_t h) {
    uint32_t w = (uint32_t)h << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
}

// fp32 -> bf16 is the nearest bf16 value (ties: even mantissa); bf16 -> fp32 exact; the
// accumulate adds exactly that widened value with one fp32 rounding.
static void test_bf16(void) {
    int64_t n = 20000;
    float *x = host_rand(n, 41, 10.0f);
    x[0] = 1.0f + ldexpf(1.0f, -8);     // a tie: 1 + half a bf16 ulp rounds to even (1.0)
    x[1] = 1.0f + 3 * ldexpf(1.0f, -8); // a tie rounding up to 1 + 2^-6
    float *dx = to_dev(NULL, x, n);
    uint16_t *dh = slm_dev_alloc(NULL, (size_t)n * 2), *h = slm_xmalloc((size_t)n * 2);
    slm_dev_f32_to_bf16(NULL, dh, dx, n);
    slm_dev_copy(NULL, h, dh, (size_t)n * 2, SLM_D2H);
    CHECK(widen(h[0]) == 1.0f);
    CHECK(widen(h[1]) == 1.0f + ldexpf(1.0f, -6));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - widen(h[i]));
        double up = fabs((double)x[i] - widen((uint16_t)(h[i] + 1)));
        double dn = fabs((double)x[i] - widen((uint16_t)(h[i] - 1)));
        CHECK_MSG(e <= up && e <= dn, "bf16(%.9g) = %.9g is not the nearest", x[i], widen(h[i]));
        CHECK_MSG(e < up || (h[i] & 1) == 0, "tie of %.9g not to even", x[i]);
    }
    float *dy = slm_dev_alloc_f32(NULL, n);
    slm_dev_bf16_to_f32(NULL, dy, dh, n);
    float *y = to_host(NULL, dy, n);
    for (int64_t i = 0; i < n; i++)
        CHECK(y[i] == widen(h[i]));
    slm_dev_bf16_accumulate(NULL, dx, dh, n); // x + bf16(x)
    float *z = to_host(NULL, dx, n);
    for (int64_t i = 0; i < n; i++)
        CHECK(z[i] == (float)((double)x[i] + (double)widen(h[i])));
    free(x), free(h), free(y), free(z);
    slm_dev_free(NULL, dx), slm_dev_free(NULL, dh), slm_dev_free(NULL, dy);
}

// Dropout: the mask rule of device.h recomputed here; kept elements scaled, dropped zero; the
// accumulate form adds exactly the kept scaled values; the kept fraction is within 5 sigma of
// 1 - thr / 65536.
static void test_dropout(void) {
    int64_t n = 100003;
    float *x = host_rand(n, 51, 1.0f);
    float *dx = to_dev(NULL, x, n), *dy = slm_dev_alloc_f32(NULL, n);
    const uint64_t key = 0x1234567890abcdefULL;
    const uint32_t thr = 19661; // p = 0.3
    const float scale = 1.0f / 0.7f;
    slm_dev_dropout(NULL, key, thr, scale, dx, dy, NULL, n);
    float *y = to_host(NULL, dy, n);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = slm_mix64(key ^ (uint64_t)(i / 4));
        bool k = ((h >> (16 * (i % 4))) & 0xffffu) >= thr;
        kept += k;
        CHECK_MSG(y[i] == (k ? x[i] * scale : 0.0f), "dropout element %lld", (long long)i);
    }
    double pk = 1.0 - thr / 65536.0, sd = sqrt(n * pk * (1 - pk));
    CHECK_MSG(fabs((double)kept - n * pk) < 5 * sd, "kept %lld of %lld", (long long)kept,
              (long long)n);
    slm_dev_fill(NULL, dy, 1.0f, n);
    slm_dev_dropout(NULL, key, thr, scale, dx, NULL, dy, n);
    float *a = to_host(NULL, dy, n);
    for (int64_t i = 0; i < n; i++)
        CHECK(a[i] == (y[i] != 0.0f || x[i] == 0.0f ? 1.0f + y[i] : 1.0f));
    free(x), free(y), free(a);
    slm_dev_free(NULL, dx), slm_dev_free(NULL, dy);
}

// Row softmax against double: each output within a few fp32 ulps (expf is correctly rounded to
// within 1 ulp in glibc; one multiply by the rounded reciprocal).
static void test_softmax(void) {
    int64_t rows = 7, n = 333;
    float *x = host_rand(rows * n, 61, 4.0f);
    float *dx = to_dev(NULL, x, rows * n);
    slm_dev_softmax_rows(NULL, dx, rows, n, 0.125f);
    float *y = to_host(NULL, dx, rows * n);
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++)
            mx = fmax(mx, 0.125 * x[r * n + j]);
        for (int64_t j = 0; j < n; j++)
            sum += exp(0.125 * x[r * n + j] - mx);
        for (int64_t j = 0; j < n; j++) {
            double e = exp(0.125 * x[r * n + j] - mx) / sum;
            CHECK_CLOSE(y[r * n + j], e, 8 * ldexp(1.0, -24), 0);
        }
    }
    free(x), free(y);
    slm_dev_free(NULL, dx);
}

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// The SLEEP device: linear / attention account exactly their FLOPs / rate (the rule of
// device.h and sleep.c: 2 N I O per product; attention 4 B H D T^2 forward, as the MFU formula
// 6N + 12 L C T counts it (no causal halving), twice that backward); other ops account nothing and
// compute nothing; memory is real. The wall clock passes at least the accounted time (absolute
// deadline), asserted only as a lower bound.
static void test_sleep(void) {
    slm_device *d = NULL;
    CHECK_OK(slm_device_open("sleep:2000", &d));
    CHECK(slm_device_kind_of(d) == SLM_DEVICE_SLEEP);
    CHECK_EQ_STR(slm_device_name(d), "sleep");
    float *x = host_rand(1000, 71, 1.0f);
    float *p = to_dev(d, x, 1000), *q = slm_dev_alloc_f32(d, 1000);
    float *y = to_host(d, p, 1000);
    CHECK(memcmp(x, y, 4000) == 0);
    double t0 = mono_s();
    slm_dev_linear_fwd(d, false, q, p, p, 64, 128, 256, false);
    double want = 2.0 * 64 * 128 * 256 / 2e12;
    CHECK_CLOSE(slm_device_slept_s(d), want, 1e-12, 0);
    slm_dev_linear_bwd(d, true, q, q, p, p, p, 64, 128, 256);
    want += 2 * 2.0 * 64 * 128 * 256 / 2e12;
    slm_dev_linear_bwd(d, false, NULL, q, p, p, p, 64, 128, 256); // dW only
    want += 2.0 * 64 * 128 * 256 / 2e12;
    CHECK_CLOSE(slm_device_slept_s(d), want, 1e-12, 0);
    slm_dev_attention_fwd(d, q, q, p, p, p, NULL, 2, 64, 4, 2, 16);
    slm_dev_attention_bwd(d, q, q, q, p, p, p, p, p, p, NULL, 2, 64, 4, 2, 16);
    want += 3 * 4.0 * 2 * 4 * 16 * 64 * 64 / 2e12;
    CHECK_CLOSE(slm_device_slept_s(d), want, 1e-12, 0);
    slm_dev_copy(d, q, x, 4000, SLM_H2D);
    slm_dev_scale(d, q, 2.0f, 1000);
    slm_dev_rmsnorm_fwd(d, q, q, p, p, 10, 100, 1e-5f);
    CHECK(slm_dev_sumsq(d, q, 1000) == 0.0);
    CHECK_CLOSE(slm_device_slept_s(d), want, 1e-12, 0);
    slm_dev_copy(d, y, q, 4000, SLM_D2H);
    CHECK(memcmp(x, y, 4000) == 0); // nothing computed
    CHECK(mono_s() - t0 >= want * 0.999);
    CHECK(slm_dev_gemm_peak_gflops(d, true, 0, 0) == 2000.0);
    slm_dev_free(d, p), slm_dev_free(d, q);
    free(x), free(y);
    slm_device_close(d);
}

// Memory checks: the CPU device's is base.h's (a huge need fails naming the device's view, a
// small one passes); free <= total.
static void test_mem_check(void) {
    double fr = 0, tot = 0;
    slm_device_mem_info(NULL, &fr, &tot);
    CHECK(fr >= 0 && fr <= tot);
    CHECK_OK(slm_dev_mem_check(NULL, 1024.0, "a small model"));
    CHECK_EQ_INT(slm_dev_mem_check(NULL, 1e18, "model \"%s\"", "huge"), SLM_E_NOMEM);
    CHECK_MSG(strstr(slm_errmsg(), "model \"huge\" needs about"), "message: %s", slm_errmsg());
    CHECK_EQ_INT(slm_dev_mem_check(NULL, NAN, "nan"), SLM_E_NOMEM);
    // the CPU device has no GPU counters: reported as unavailable, not as zeros
    slm_device_stats s;
    slm_device_stats_read(NULL, &s);
    CHECK(!s.valid && s.ecc_uncorrected == -1);
    CHECK_EQ_STR(slm_device_describe(NULL), "cpu");
    slm_device *d = slm_device_sleep(250);
    CHECK_EQ_STR(slm_device_describe(d), "sleep (250 GFLOP/s)");
    slm_device_close(d);
}

static void test_open_errors(void) {
    slm_device *d = (slm_device *)1;
    CHECK_OK(slm_device_open("cpu", &d));
    CHECK(d == slm_device_cpu());
    slm_device_close(d); // the singleton: ignored
    const char *bad[] = {"gpu", "sleep:", "sleep:0", "sleep:-3", "sleep:1e99", "sleep:12x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(slm_device_open(bad[i], &d), SLM_E_ARG);
        CHECK(d == NULL);
        CHECK_MSG(strstr(slm_errmsg(), "sleep:GFLOPS"), "message: %s", slm_errmsg());
    }
    CHECK_EQ_INT(slm_device_open("cuda:0", &d), SLM_E_UNSUPPORTED);
    CHECK(strstr(slm_errmsg(), "cuda:0") != NULL);
}

int main(void) {
    RUN(test_memory);
    RUN(test_elementwise);
    RUN(test_sums);
    RUN(test_adamw);
    RUN(test_bf16);
    RUN(test_dropout);
    RUN(test_softmax);
    RUN(test_sleep);
    RUN(test_mem_check);
    RUN(test_open_errors);
    return TEST_SUMMARY();
}
