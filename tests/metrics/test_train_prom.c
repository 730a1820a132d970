// The trainer's Prometheus hook (src/train/prom.c) in a world of one, read through its registry
// by a hook attached after it (issue 20 items 10-12):
//  - after a resume, shardlm_checkpoint_last_step is the resumed checkpoint's step and
//    shardlm_checkpoint_last_timestamp_seconds the modification time of its manifest.json (read
//    here with stat), not -1 and the start time;
//  - a step skipped by --on-nonfinite skip (SHARDLM_FAULT nan-grad) counts in
//    shardlm_nonfinite_steps_total at that step;
//  - shardlm_run_completed is 0 while training and 1 after a completed run, 0 after a stopped
//    one; a completed run that was scraped serves a bounded while longer (the linger), one that
//    was never scraped does not.
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "test.h"
#include "train/train.h"

static char g_dir[256];
static char g_cfg[512];
static slm_train_std_hooks g_std;

static void write_tiny_config(void) {
    snprintf(g_cfg, sizeof g_cfg, "%s/config.json", g_dir);
    const char *json = "{\"vocab_size\": 97, \"hidden_size\": 32, \"intermediate_size\": 64,"
                       " \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
                       " \"num_key_value_heads\": 2, \"max_position_embeddings\": 32}";
    if (slm_file_write_atomic(g_cfg, json, strlen(json))) abort();
}

static void base_opts(slm_train_opts *o, const char *out, int64_t steps) {
    slm_train_opts_default(o);
    slm_train_add_std_hooks(o, &g_std);
    o->synthetic = true;
    o->model = g_cfg;
    o->out_dir = out;
    o->B = 2, o->T = 16, o->steps = steps, o->warmup = 1;
    o->log_every = 0;
    o->peak_gflops = 1.0; // no sgemm measurement
    o->ckpt_every_steps = 2;
    o->ckpt_sync = true;
    o->metrics.addr = "127.0.0.1:0";
}

// A sample's value in the registry's exposition text (NaN when absent).
static double sample(slm_metrics *reg, const char *name) {
    slm_buf b = {0};
    slm_metrics_render(reg, &b);
    double v = NAN;
    size_t n = strlen(name);
    for (const char *p = b.data; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
    slm_buf_free(&b);
    return v;
}

// One plain HTTP GET of /metrics (a scrape); true when the server answered.
static bool scrape(const char *addr) {
    int port = atoi(strrchr(addr, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    ok = ok && write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1);
    char buf[4096];
    ssize_t got = 0, r;
    while (ok && (r = read(fd, buf, sizeof buf)) > 0)
        got += r;
    if (fd >= 0) close(fd);
    return ok && got > 0;
}

typedef struct probe {
    slm_train_prom *prom;
    double ck_step, ck_ts, start_ts;               // at on_start
    double nonfinite[8], skipped[8], completed[8]; // after step s (index s)
    bool scrape_each;
    int scrape_failed;
} probe;

static slm_status probe_start(void *ctx, slm_trainer *tr) {
    (void)tr;
    probe *p = ctx;
    slm_metrics *reg = slm_train_prom_registry(p->prom);
    p->ck_step = sample(reg, "shardlm_checkpoint_last_step");
    p->ck_ts = sample(reg, "shardlm_checkpoint_last_timestamp_seconds");
    p->start_ts = sample(reg, "shardlm_start_timestamp_seconds");
    return SLM_OK;
}

static slm_status probe_step(void *ctx, slm_trainer *tr, const slm_step_metrics *m) {
    (void)tr;
    probe *p = ctx;
    slm_metrics *reg = slm_train_prom_registry(p->prom);
    if (m->step < 8) {
        p->nonfinite[m->step] = sample(reg, "shardlm_nonfinite_steps_total");
        p->skipped[m->step] = sample(reg, "shardlm_skipped_steps_total");
        p->completed[m->step] = sample(reg, "shardlm_run_completed");
    }
    if (p->scrape_each && !scrape(slm_train_prom_addr(p->prom))) p->scrape_failed++;
    return SLM_OK;
}

// A run of `o` with a fresh prom hook and the probe after it; the hook is freed by the caller.
static slm_status run_probed(slm_train_opts *o, probe *p, slm_train_result *res) {
    slm_status st = slm_train_prom_new(&o->metrics, &p->prom);
    if (!st) st = slm_train_add_prom_hook(o, p->prom, &g_std);
    slm_train_hook h = {.name = "probe", .ctx = p, .on_start = probe_start, .on_step = probe_step};
    if (!st) st = slm_train_attach(o, &h);
    return st ? st : slm_train_run(o, res);
}

static void test_resume_checkpoint_step(void) {
    char *out = slm_path_join(g_dir, "resume");
    slm_train_opts o;
    base_opts(&o, out, 4); // checkpoints at steps 2 and 4
    o.metrics.addr = NULL; // the hook installed, nothing served (as shardlm train does)
    probe n = {0};
    CHECK_OK(run_probed(&o, &n, NULL));
    CHECK(slm_train_prom_linger_s(n.prom) == 0);
    slm_train_prom_free(n.prom);
    char *mf = slm_path_join(out, "checkpoints/step_00000004/manifest.json");
    struct stat sb;
    CHECK(stat(mf, &sb) == 0);
    double mtime = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;

    base_opts(&o, out, 6);
    o.resume = "auto";
    probe p = {0};
    CHECK_OK(run_probed(&o, &p, NULL));
    CHECK_MSG(p.ck_step == 4, "checkpoint_last_step after resuming step 4: %g", p.ck_step);
    CHECK_MSG(fabs(p.ck_ts - mtime) < 1e-6, "checkpoint time %.6f, manifest mtime %.6f", p.ck_ts,
              mtime);
    CHECK(p.ck_ts < p.start_ts);
    slm_train_prom_free(p.prom);

    // a fresh run: no checkpoint yet (-1, the start time)
    char *out2 = slm_path_join(g_dir, "fresh");
    base_opts(&o, out2, 1);
    probe q = {0};
    CHECK_OK(run_probed(&o, &q, NULL));
    CHECK_EQ_INT((int)q.ck_step, -1);
    CHECK(q.ck_ts == q.start_ts);
    slm_train_prom_free(q.prom);
    free(out), free(out2), free(mf);
}

static void test_nonfinite_skip_counted(void) {
    char *out = slm_path_join(g_dir, "nan");
    slm_train_opts o;
    base_opts(&o, out, 4);
    o.nonfinite_skip = true;
    setenv("SHARDLM_FAULT", "nan-grad:step=2", 1);
    probe p = {0};
    slm_train_result r;
    slm_status st = run_probed(&o, &p, &r);
    unsetenv("SHARDLM_FAULT");
    CHECK_OK(st);
    CHECK_EQ_INT(r.nonfinite_skips, 1);
    CHECK_EQ_INT((int)p.skipped[2], 1);
    CHECK_MSG(p.nonfinite[1] == 0 && p.nonfinite[2] == 1 && p.nonfinite[4] == 1,
              "nonfinite_steps_total after steps 1, 2, 4: %g %g %g", p.nonfinite[1], p.nonfinite[2],
              p.nonfinite[4]);
    slm_train_prom_free(p.prom);
    free(out);
}

static void test_completed_and_linger(void) {
    // completed, never scraped: flag 1, no linger
    char *out = slm_path_join(g_dir, "done");
    slm_train_opts o;
    base_opts(&o, out, 3);
    probe p = {0};
    CHECK_OK(run_probed(&o, &p, NULL));
    CHECK(p.completed[1] == 0 && p.completed[3] == 0); // not before the run has ended
    CHECK(sample(slm_train_prom_registry(p.prom), "shardlm_run_completed") == 1);
    CHECK(slm_train_prom_linger_s(p.prom) == 0);
    slm_train_prom_free(p.prom);

    // completed and scraped at every step: it lingers, for at most the bound
    char *out2 = slm_path_join(g_dir, "done_scraped");
    base_opts(&o, out2, 3);
    probe q = {.scrape_each = true};
    CHECK_OK(run_probed(&o, &q, NULL));
    CHECK_EQ_INT(q.scrape_failed, 0);
    double l = slm_train_prom_linger_s(q.prom);
    CHECK_MSG(l > 1 && l <= SLM_TRAIN_PROM_LINGER_MAX_S, "linger %g s", l);
    slm_train_prom_free(q.prom); // returns within l (no scrape comes)

    // stopped (the stop flag) after step 1 of 3: not completed, no linger
    char *out3 = slm_path_join(g_dir, "stopped");
    base_opts(&o, out3, 3);
    probe s = {.scrape_each = true};
    CHECK_OK(slm_train_prom_new(&o.metrics, &s.prom));
    CHECK_OK(slm_train_add_prom_hook(&o, s.prom, &g_std));
    slm_train_hook h = {.name = "probe", .ctx = &s, .on_start = probe_start, .on_step = probe_step};
    CHECK_OK(slm_train_attach(&o, &h));
    slm_trainer *tr = NULL;
    CHECK_OK(slm_train_open(&o, &tr));
    CHECK_OK(slm_train_init(tr));
    slm_step_metrics m;
    CHECK_OK(slm_train_step(tr, &m));
    slm_train_request_stop();
    slm_status st = SLM_OK;
    while (!st && !slm_train_done(tr))
        st = slm_train_step(tr, &m);
    CHECK_EQ_INT(slm_train_finish(tr, st), SLM_E_INTERRUPTED);
    CHECK(slm_trainer_result(tr)->interrupted);
    slm_train_close(tr);
    slm_train_reset_stop();
    CHECK(sample(slm_train_prom_registry(s.prom), "shardlm_run_completed") == 0);
    CHECK(slm_train_prom_linger_s(s.prom) == 0);
    slm_train_prom_free(s.prom);
    free(out), free(out2), free(out3);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/slm_test_train_prom_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    write_tiny_config();
    RUN(test_resume_checkpoint_step);
    RUN(test_nonfinite_skip_counted);
    RUN(test_completed_and_linger);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf \"%s\"", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
    return TEST_SUMMARY();
}
