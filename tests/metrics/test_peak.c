// The MFU denominator as a property of the machine (issue 20 item 13; src/train/peak.c): the
// cache file's lookup and raise on a hand-written file; a run uses the cached peak of its CPU
// model and thread count (no measurement); a step faster than the peak raises it, logs it and
// caches it, so no step's MFU exceeds 1; a --peak-gflops value is raised alike but not cached;
// with no cache line the peak is measured at start and cached. Nothing here asserts a timing:
// the peaks are chosen far below (1e-6 GFLOP/s) or far above (1e6) any machine's rate.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "test.h"
#include "train/train.h"

static char g_dir[256], g_cfg[512], g_cache[512], g_key[256];
static slm_train_std_hooks g_std;

static char *slurp(const char *path) {
    char *t = NULL;
    size_t n = 0;
    if (slm_file_read_all(path, &t, &n) != SLM_OK) return NULL;
    return t;
}

static void put(const char *path, const char *text) {
    if (slm_file_write_atomic(path, text, strlen(text))) abort();
}

// The key as docs/training.md defines it, from /proc/cpuinfo read here.
static void expected_key(int threads, char *out, size_t cap) {
    char model[256] = "unknown CPU", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            const char *c = strchr(line, ':') + 1;
            c += strspn(c, " \t");
            snprintf(model, sizeof model, "%.*s", (int)strcspn(c, "\n"), c);
            break;
        }
    if (f) fclose(f);
    for (char *p = model; *p; p++)
        if (*p == '\t' || *p == '|') *p = ' ';
    snprintf(out, cap, "%s|threads=%d", model, threads);
}

static void test_cache_file(void) {
    char key[256];
    slm_peak_key(1, key, sizeof key);
    CHECK_EQ_STR(key, g_key);
    char *p = slm_peak_cache_path();
    CHECK(p && !strcmp(p, g_cache));
    char text[1024];
    snprintf(text, sizeof text, "other cpu|threads=1\t5\nnot a line\n%s\t100\n", key);
    put(g_cache, text);
    CHECK(slm_peak_cache_get(key) == 100);
    CHECK(isnan(slm_peak_cache_get("nobody|threads=3")));
    CHECK_OK(slm_peak_cache_raise(key, 50)); // lower: unchanged
    char *t = slurp(g_cache);
    CHECK(t && !strcmp(t, text));
    free(t);
    CHECK_OK(slm_peak_cache_raise(key, 150.5)); // higher: replaced, the rest kept
    t = slurp(g_cache);
    char want[1024];
    snprintf(want, sizeof want, "other cpu|threads=1\t5\nnot a line\n%s\t150.5\n", key);
    CHECK_MSG(t && !strcmp(t, want), "cache: %s", t);
    free(t);
    CHECK_OK(slm_peak_cache_raise("new|threads=8", 7)); // a new key: appended
    CHECK(slm_peak_cache_get("new|threads=8") == 7 && slm_peak_cache_get(key) == 150.5);
    setenv("SHARDLM_CACHE_DIR", "", 1); // empty: no cache at all
    CHECK(slm_peak_cache_path() == NULL);
    CHECK(isnan(slm_peak_cache_get(key)));
    CHECK_OK(slm_peak_cache_raise(key, 1e9));
    setenv("SHARDLM_CACHE_DIR", g_dir, 1);
    CHECK(slm_peak_cache_get(key) == 150.5);
    free(p);
}

typedef struct mfu_log {
    int n;
    double max_mfu;
} mfu_log;

static void mfu_hook(void *ctx, const slm_step_metrics *m) {
    mfu_log *l = ctx;
    l->n++;
    if (!(m->mfu <= l->max_mfu)) l->max_mfu = m->mfu;
}

// A 3-step run with `peak` (0: from the cache or measured); stderr captured into *log; *st its
// status.
static slm_train_result run_st(double peak, mfu_log *ml, char **log, slm_status *st_out) {
    slm_train_opts o;
    slm_train_opts_default(&o);
    slm_train_add_std_hooks(&o, &g_std);
    o.synthetic = true;
    o.model = g_cfg;
    o.B = 2, o.T = 16, o.steps = 3, o.warmup = 1, o.threads = 1, o.log_every = 0;
    o.peak_gflops = peak;
    slm_train_add_hook(&o, mfu_hook, ml);
    char *cap = slm_path_join(g_dir, "stderr.txt");
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(cap, "w");
    if (!f || saved < 0) abort();
    dup2(fileno(f), 2);
    slm_train_result r = {0};
    slm_status st = slm_train_run(&o, &r);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    *st_out = st;
    *log = slurp(cap);
    free(cap);
    return r;
}

// run_st after writing the cache file with one line for this machine holding `cached` (NULL: no
// cache file; "": the file as it is).
static slm_train_result run_with(const char *cached, double peak, mfu_log *ml, char **log,
                                 slm_status *st) {
    if (!cached) {
        unlink(g_cache);
    } else if (cached[0]) {
        char text[512];
        snprintf(text, sizeof text, "%s\t%s\n", g_key, cached);
        put(g_cache, text);
    }
    *ml = (mfu_log){0};
    return run_st(peak, ml, log, st);
}

static void test_cached_peak_used(void) {
    mfu_log ml;
    char *log = NULL;
    slm_status st;
    slm_train_result r = run_with("1e+06", 0, &ml, &log, &st);
    CHECK_OK(st);
    CHECK_MSG(r.peak_gflops == 1e6, "peak %g, not the cached 1e6", r.peak_gflops);
    CHECK(log && strstr(log, "peak 1000000.0 GFLOP/s (cached for this CPU and thread count)"));
    CHECK(!strstr(log, "MFU: step"));
    CHECK_EQ_INT(ml.n, 3);
    free(log);
}

static void test_faster_step_raises(void) {
    mfu_log ml;
    char *log = NULL;
    slm_status st;
    slm_train_result r = run_with("1e-06", 0, &ml, &log, &st);
    CHECK_OK(st);
    CHECK(r.peak_gflops > 1e-6);
    CHECK_MSG(ml.max_mfu <= 1 + 1e-12, "a step's MFU %g", ml.max_mfu);
    CHECK(r.mfu <= 1 + 1e-12);
    CHECK(log && strstr(log, "MFU: step 1 ran at") && strstr(log, "(cached for this CPU"));
    double c = slm_peak_cache_get(g_key); // the raised peak, cached (written with %.6g)
    CHECK_MSG(fabs(c - r.peak_gflops) <= 1e-5 * r.peak_gflops, "cached %g, peak %g", c,
              r.peak_gflops);
    free(log);

    // --peak-gflops: raised alike, logged, not cached
    char *before = slurp(g_cache);
    r = run_with("", 1e-6, &ml, &log, &st);
    CHECK_OK(st);
    CHECK_MSG(ml.max_mfu <= 1 + 1e-12, "a step's MFU %g with --peak-gflops 1e-6", ml.max_mfu);
    CHECK(r.mfu <= 1 + 1e-12 && r.peak_gflops > 1e-6);
    CHECK(log && strstr(log, "(--peak-gflops)"));
    char *after = slurp(g_cache);
    CHECK(before && after && !strcmp(before, after));
    free(before), free(after), free(log);
}

static void test_measured_and_cached(void) {
    mfu_log ml;
    char *log = NULL;
    slm_status st;
    slm_train_result r = run_with(NULL, 0, &ml, &log, &st);
    CHECK_OK(st);
    CHECK(log && strstr(log, "GFLOP/s (measured at start)"));
    double c = slm_peak_cache_get(g_key);
    CHECK_MSG(fabs(c - r.peak_gflops) <= 1e-5 * r.peak_gflops, "cached %g, peak %g", c,
              r.peak_gflops);
    free(log);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/slm_test_peak_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    snprintf(g_cfg, sizeof g_cfg, "%s/config.json", g_dir);
    put(g_cfg, "{\"vocab_size\": 97, \"hidden_size\": 32, \"intermediate_size\": 64,"
               " \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
               " \"num_key_value_heads\": 2, \"max_position_embeddings\": 32}");
    snprintf(g_cache, sizeof g_cache, "%s/sgemm_peak.tsv", g_dir);
    setenv("SHARDLM_CACHE_DIR", g_dir, 1);
    expected_key(1, g_key, sizeof g_key);
    RUN(test_cache_file);
    RUN(test_cached_peak_used);
    RUN(test_faster_step_raises);
    RUN(test_measured_and_cached);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf \"%s\"", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
    return TEST_SUMMARY();
}
