// optim: AdamW vs torch.optim.AdamW (decay / no-decay ranges, several steps, changing lr), the
// LR schedule vs the closed-form formula evaluated in Python (double), sum of squares vs a naive
// double loop, and global-norm clipping vs torch.nn.utils.clip_grad_norm_.
// The references run in $SLM_PYTHON (tests/optim/adamw_ref.py); data goes through temp files.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <omp.h>

#include "base/base.h"
#include "optim/optim.h"
#include "test.h"

static char g_dir[256];

static const char *python(void) {
    const char *p = getenv("SLM_PYTHON");
    return p ? p : "python3";
}

static const char *ref_script(void) {
    static char buf[1024];
    const char *s = getenv("SLM_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/tests/optim/adamw_ref.py", s ? s : ".");
    return buf;
}

static int run_ref(const char *mode, const char *in, const char *out) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "\"%s\" \"%s\" %s \"%s\" \"%s\"", python(), ref_script(), mode, in,
             out);
    return system(cmd);
}

static void wr(FILE *f, const void *p, size_t bytes) {
    fwrite(p, 1, bytes, f);
}

static void fill_normal(float *x, int64_t n, slm_rng *r, float s) {
    for (int64_t i = 0; i < n; i++)
        x[i] = s * slm_rng_normal(r);
}

// Max over i of |a - b| / (atol + rtol |b|); <= 1 passes.
static double worst(const float *a, const float *b, int64_t n, double rtol, double atol) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (atol + rtol * fabs((double)b[i]));
        if (!(e <= w)) w = e; // NaN propagates as a failure
    }
    return w;
}

static void test_adamw_vs_torch(void) {
    const int64_t n = 100003; // > the parallel threshold, odd size
    const int64_t K = 6;
    slm_adamw_hparams h = {
        .lr_peak = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    // Unsorted, with gaps (decayed), explicit decayed and non-decayed ranges.
    slm_decay_range ranges[] = {
        {.begin = 50000, .end = 50300, .decay = false},
        {.begin = 0, .end = 1000, .decay = false},
        {.begin = 2000, .end = 40000, .decay = true},
        {.begin = 99000, .end = 100003, .decay = false},
    };
    int nr = 4;
    float lrs[6] = {1e-3f, 2e-3f, 3e-3f, 2.5e-3f, 1e-3f, 1e-4f};
    float *p = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
    float *g = malloc(K * n * 4), *ref = malloc(3 * n * 4);
    slm_rng r;
    slm_rng_seed(&r, 7);
    fill_normal(p, n, &r, 0.5f);
    fill_normal(g, K * n, &r, 0.01f);
    for (int64_t i = 0; i < 100; i++)
        g[i] = 0.0f; // zero gradients: pure decay path

    char in[512], out[512];
    snprintf(in, sizeof in, "%s/adamw.in", g_dir);
    snprintf(out, sizeof out, "%s/adamw.out", g_dir);
    FILE *f = fopen(in, "wb");
    int64_t hdr[3] = {n, K, nr};
    wr(f, hdr, sizeof hdr);
    float hp[4] = {h.beta1, h.beta2, h.eps, h.weight_decay};
    wr(f, hp, sizeof hp);
    for (int i = 0; i < nr; i++) {
        int64_t t[3] = {ranges[i].begin, ranges[i].end, ranges[i].decay};
        wr(f, t, sizeof t);
    }
    wr(f, lrs, sizeof lrs);
    wr(f, p, n * 4);
    wr(f, g, K * n * 4);
    fclose(f);

    for (int64_t k = 0; k < K; k++)
        slm_adamw_step(NULL, p, g + k * n, m, v, n, &h, lrs[k], k + 1, ranges, nr);

    int rc = run_ref("adamw", in, out);
    CHECK_MSG(rc == 0, "reference failed (rc %d)", rc);
    f = fopen(out, "rb");
    CHECK(f != NULL);
    size_t got = fread(ref, 4, 3 * n, f);
    fclose(f);
    CHECK_EQ_INT(got, 3 * n);
    // Elementwise math only (no reductions, no BLAS): each of the ~10 fp32 operations per
    // element and step rounds by <= u = 6e-8 on either side (torch may fuse / vectorise
    // differently per CPU), ~1e-6 relative after 6 steps at worst; rtol 1e-5. The atols cover
    // values that are ~0 (m, v of zero gradients; p near 0) at a few ulps of their scale.
    double wp = worst(p, ref, n, 1e-5, 1e-7);
    double wm = worst(m, ref + n, n, 1e-5, 1e-9);
    double wv = worst(v, ref + 2 * n, n, 1e-5, 1e-12);
    fprintf(stderr, "  adamw vs torch: worst scaled error p %.3g m %.3g v %.3g\n", wp, wm, wv);
    CHECK_MSG(wp <= 1.0, "params differ from torch.optim.AdamW (worst %.3g)", wp);
    CHECK_MSG(wm <= 1.0, "exp_avg differs (worst %.3g)", wm);
    CHECK_MSG(wv <= 1.0, "exp_avg_sq differs (worst %.3g)", wv);
    // The no-decay range with zero gradient must not move at all (m = v = 0 -> update 0).
    CHECK(p[10] == ref[10]);
    free(p), free(m), free(v), free(g), free(ref);
}

static void test_adamw_deterministic_threads(void) {
    // Elementwise update: one thread, several threads and the same update applied in pieces (as
    // shards do) must give bitwise-identical params, m and v, over several steps (m, v nonzero
    // from step 2 on) with a decay mask. n > SLM_OPTIM_PAR_MIN so the parallel loop is taken.
    const int64_t n = 70001, steps = 3;
    slm_adamw_hparams h = {
        .lr_peak = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
    slm_decay_range ranges[] = {{.begin = 100, .end = 40000, .decay = false}};
    float *p[3], *m[3], *v[3];
    float *g = malloc(steps * n * 4);
    for (int k = 0; k < 3; k++) {
        p[k] = malloc(n * 4);
        m[k] = calloc(n, 4);
        v[k] = calloc(n, 4);
    }
    slm_rng r;
    slm_rng_seed(&r, 3);
    fill_normal(p[0], n, &r, 1.0f);
    fill_normal(g, steps * n, &r, 1.0f);
    memcpy(p[1], p[0], n * 4);
    memcpy(p[2], p[0], n * 4);
    int saved = omp_get_max_threads();
    int team = 0;
    for (int64_t t = 1; t <= steps; t++) {
        const float *gt = g + (t - 1) * n;
        float lr = 1e-3f * (float)t;
        omp_set_num_threads(1);
        slm_adamw_step(NULL, p[0], gt, m[0], v[0], n, &h, lr, t, ranges, 1);
        omp_set_num_threads(4); // more threads than this machine may have cores: still a team
#pragma omp parallel
        {
#pragma omp single
            team = omp_get_num_threads();
        }
        slm_adamw_step(NULL, p[1], gt, m[1], v[1], n, &h, lr, t, ranges, 1);
        for (int64_t off = 0; off < n; off += 1000) { // pieces, each with its ranges shifted
            int64_t len = off + 1000 < n ? 1000 : n - off;
            slm_decay_range rr = {
                .begin = ranges[0].begin - off, .end = ranges[0].end - off, .decay = false};
            if (rr.begin < 0) rr.begin = 0;
            if (rr.end < rr.begin) rr.end = rr.begin;
            slm_adamw_step(NULL, p[2] + off, gt + off, m[2] + off, v[2] + off, len, &h, lr, t, &rr,
                           1);
        }
    }
    omp_set_num_threads(saved);
    CHECK_MSG(team == 4, "the multi-thread call ran on %d threads", team);
    for (int k = 1; k < 3; k++) {
        const char *what = k == 1 ? "4 threads" : "in pieces";
        CHECK_MSG(memcmp(p[0], p[k], n * 4) == 0, "params: 1 thread != %s", what);
        CHECK_MSG(memcmp(m[0], m[k], n * 4) == 0, "m: 1 thread != %s", what);
        CHECK_MSG(memcmp(v[0], v[k], n * 4) == 0, "v: 1 thread != %s", what);
    }
    // The runs did update something (a no-op step would compare equal too).
    CHECK(m[0][0] != 0.0f && v[0][0] != 0.0f);
    for (int k = 0; k < 3; k++)
        free(p[k]), free(m[k]), free(v[k]);
    free(g);
}

static void test_lr_schedule(void) {
    // Python evaluates the documented formula independently in double.
    const int64_t warmup = 10, total = 100;
    const float peak = 6e-4f, floor_lr = 6e-5f;
    char cmd[4096], out[512];
    snprintf(out, sizeof out, "%s/lr.txt", g_dir);
    snprintf(cmd, sizeof cmd,
             "\"%s\" -c \"import math\n"
             "for s in range(0, 121):\n"
             "    if s < %d: lr = %.9g * (s + 1) / %d\n"
             "    elif s >= %d: lr = %.9g\n"
             "    else: lr = %.9g + 0.5 * (%.9g - %.9g) * (1 + math.cos(math.pi * (s - %d) / (%d - "
             "%d)))\n"
             "    print(repr(lr))\" > \"%s\"",
             python(), (int)warmup, (double)peak, (int)warmup, (int)total, (double)floor_lr,
             (double)floor_lr, (double)peak, (double)floor_lr, (int)warmup, (int)total, (int)warmup,
             out);
    CHECK_EQ_INT(system(cmd), 0);
    FILE *f = fopen(out, "r");
    CHECK(f != NULL);
    for (int s = 0; s <= 120; s++) {
        double want = 0;
        if (fscanf(f, "%lf", &want) != 1) {
            fclose(f);
            CHECK_MSG(0, "short reference output at step %d", s);
        }
        float got = slm_lr_at(s, warmup, total, peak, floor_lr);
        if (!(fabs(got - want) <= 1e-6 * want + 1e-12)) {
            fclose(f);
            CHECK_MSG(0, "lr at step %d: %.9g vs %.9g", s, (double)got, want);
        }
    }
    fclose(f);
    CHECK_CLOSE(slm_lr_at(warmup, warmup, total, peak, floor_lr), peak, 1e-6, 0);
    CHECK_CLOSE(slm_lr_at(total, warmup, total, peak, floor_lr), floor_lr, 1e-6, 0);
    CHECK_CLOSE(slm_lr_at(5, 0, 10, 1.0f, 0.0f), 0.5, 1e-6, 0); // no warmup: cos(pi/2)
}

static void test_sumsq_naive(void) {
    const int64_t n = 1000003;
    float *x = malloc(n * 4);
    slm_rng r;
    slm_rng_seed(&r, 11);
    fill_normal(x, n, &r, 2.0f);
    double naive = 0;
    for (int64_t i = 0; i < n; i++)
        naive += (double)x[i] * x[i];
    double s = slm_sumsq(x, n);
    CHECK_CLOSE(s, naive, 1e-12, 0);
    CHECK(slm_sumsq(x, 0) == 0.0);
    slm_scale(x, n, 0.5f);
    CHECK_CLOSE(slm_sumsq(x, n), naive * 0.25, 1e-12, 0);
    free(x);
}

static void test_clip_vs_torch(void) {
    // slm_clip_grad_norm (global norm over two buffers) vs torch.nn.utils.clip_grad_norm_.
    // Tolerances (no BLAS involved; valid for any CPU): ours sums squares in double (rel error
    // ~1e-13); torch computes each buffer's norm in fp32 (sum of n <= 5000 positive squares:
    // rel error <= (n - 1) u = 3e-4 for a naive sum, <= ~(log2 n + 2) u = 9e-7 for the blocked /
    // pairwise reductions torch uses on every CPU) and the norm of the norms; 1e-5 relative on
    // the norm covers the latter with a margin of 10. The clipped values are one fp32 multiply
    // each (0.5 ulp) by coefficients that differ by the norm's relative error: rel 1e-5.
    const int64_t na = 5000, nb = 777;
    const float max_norm = 1.0f;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *ref = malloc((na + nb) * 4);
    slm_rng r;
    slm_rng_seed(&r, 5);
    fill_normal(a, na, &r, 0.1f);
    fill_normal(b, nb, &r, 0.3f);
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/clip.in", g_dir);
    snprintf(out, sizeof out, "%s/clip.out", g_dir);
    FILE *f = fopen(in, "wb");
    int64_t hdr[2] = {na, nb};
    wr(f, hdr, sizeof hdr);
    wr(f, &max_norm, 4);
    wr(f, a, na * 4);
    wr(f, b, nb * 4);
    fclose(f);
    // The trainer's clipping (src/train/train.c calls it for a world of one).
    float *bufs[2] = {a, b};
    int64_t lens[2] = {na, nb};
    double norm = slm_clip_grad_norm(bufs, lens, 2, max_norm);
    CHECK_EQ_INT(run_ref("clip", in, out), 0);
    f = fopen(out, "rb");
    double tnorm = 0;
    CHECK(fread(&tnorm, 8, 1, f) == 1);
    size_t got = fread(ref, 4, na + nb, f);
    fclose(f);
    CHECK_EQ_INT(got, na + nb);
    CHECK(norm > max_norm); // the case exercises clipping
    CHECK_CLOSE(norm, tnorm, 1e-5, 0);
    CHECK(worst(a, ref, na, 1e-5, 1e-9) <= 1.0);
    CHECK(worst(b, ref + na, nb, 1e-5, 1e-9) <= 1.0);
    free(a), free(b), free(ref);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/slm_test_optim_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    RUN(test_adamw_vs_torch);
    RUN(test_adamw_deterministic_threads);
    RUN(test_lr_schedule);
    RUN(test_sumsq_naive);
    RUN(test_clip_vs_torch);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf \"%s\"", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
    return TEST_SUMMARY();
}
