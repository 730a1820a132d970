// The resume decision (src/train/resume.c, slm_resume_decide) at a world of one, case by case
// against the rules written at the top of resume.c: no --out (a PATH is taken as given, auto is
// refused), no --resume over an earlier run's checkpoints (refused, or moved aside with
// --train-from-scratch, nothing deleted), --resume auto over none (a fresh start) and over a
// checkpoint that does not verify (refused, naming what to do).
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "test.h"
#include "train/train_internal.h"

static char g_dir[64];

// A fresh run directory RUN under g_dir; with_step: it holds checkpoints/step_00000003/ (no
// manifest: a checkpoint that does not verify).
static void make_run(const char *run, bool with_step, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", g_dir, run);
    char p[256];
    snprintf(p, sizeof p, "%s/checkpoints%s", out, with_step ? "/step_00000003" : "");
    CHECK_OK(slm_mkdir_p(p));
}

static slm_status decide(const slm_train_opts *o, char **path) {
    slm_llama_config cfg;
    memset(&cfg, 0, sizeof cfg);
    slm_resume_in in = {.o = o, .rank = 0, .W = 1, .cfg = &cfg, .ds = NULL};
    bool one_host = false;
    return slm_resume_decide(&in, path, &one_host);
}

static void test_no_out(void) {
    slm_train_opts o;
    slm_train_opts_default(&o);
    char *path = (char *)1;
    CHECK_OK(decide(&o, &path)); // no --resume: a fresh start
    CHECK(path == NULL);
    o.resume = "/somewhere/checkpoints/step_00000007"; // a PATH is not opened here
    CHECK_OK(decide(&o, &path));
    CHECK_EQ_STR(path, "/somewhere/checkpoints/step_00000007");
    free(path);
    o.resume = "auto";
    CHECK_EQ_INT(decide(&o, &path), SLM_E_ARG);
    CHECK(path == NULL);
    CHECK_MSG(strstr(slm_errmsg(), "--resume auto needs a run directory (--out DIR)"), "got: %s",
              slm_errmsg());
}

static void test_earlier_checkpoints(void) {
    char run[128];
    make_run("earlier", true, run, sizeof run);
    slm_train_opts o;
    slm_train_opts_default(&o);
    o.out_dir = run;
    char *path = NULL;
    CHECK_EQ_INT(decide(&o, &path), SLM_E_ARG); // never trained over silently
    CHECK(path == NULL);
    CHECK_MSG(strstr(slm_errmsg(), "holds 1 checkpoint of an earlier run (the newest: step 3)") &&
                  strstr(slm_errmsg(), "--resume auto") &&
                  strstr(slm_errmsg(), "--train-from-scratch"),
              "got: %s", slm_errmsg());
    o.train_from_scratch = true; // moved aside, not deleted
    CHECK_OK(decide(&o, &path));
    CHECK(path == NULL);
    char p[1024];
    snprintf(p, sizeof p, "%s/checkpoints", run);
    CHECK(!slm_is_dir(p));
    DIR *d = opendir(run);
    int moved = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, "checkpoints.replaced-", 21)) continue;
        snprintf(p, sizeof p, "%s/%s/step_00000003", run, e->d_name);
        moved += slm_is_dir(p);
    }
    if (d) closedir(d);
    CHECK_EQ_INT(moved, 1);
}

static void test_auto(void) {
    char run[128];
    make_run("fresh", false, run, sizeof run);
    slm_train_opts o;
    slm_train_opts_default(&o);
    o.out_dir = run;
    o.resume = "auto";
    char *path = (char *)1;
    CHECK_OK(decide(&o, &path)); // an empty checkpoints/: a fresh start
    CHECK(path == NULL);
    make_run("bad", true, run, sizeof run);
    o.out_dir = run;
    CHECK_EQ_INT(decide(&o, &path), SLM_E_FORMAT); // the only checkpoint has no manifest
    CHECK(path == NULL);
    CHECK_MSG(strstr(slm_errmsg(), "--resume auto (") &&
                  strstr(slm_errmsg(), "none of its 1 checkpoints verifies") &&
                  strstr(slm_errmsg(), "manifest.json is missing"),
              "got: %s", slm_errmsg());
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/slm_test_resume_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    RUN(test_no_out);
    RUN(test_earlier_checkpoints);
    RUN(test_auto);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
    return TEST_SUMMARY();
}
