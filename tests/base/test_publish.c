// base/publish.c: publishing a directory atomically (issue 24 item 7), checked on a real file
// system against what base.h promises: sibling names, the target path, a first publication, a
// publication over a previous directory (the caller's files of it deleted, the user's moved in,
// a name taken in the new one keeps the old directory), and a target that is a file.
#include "base/base.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_root[64];

static char *at(const char *name) {
    return slm_path_join(g_root, name);
}

static void put(const char *dir, const char *name, const char *text) {
    char *p = slm_path_join(dir, name);
    slm_status st = slm_file_write_atomic(p, text, strlen(text));
    free(p);
    if (st) slm_fatal("test_publish: %s", slm_errmsg());
}

// dir/name holds exactly `want` (else says what it holds; "" when it cannot be read).
static bool text_is(const char *dir, const char *name, const char *want) {
    char *p = slm_path_join(dir, name), *t = NULL;
    if (slm_file_read_all(p, &t, NULL)) t = slm_xstrdup("");
    bool ok = !strcmp(t, want);
    if (!ok) fprintf(stderr, "  %s: \"%s\", expected \"%s\"\n", p, t, want);
    free(p);
    free(t);
    return ok;
}

static bool exists(const char *dir, const char *name) {
    char *p = slm_path_join(dir, name);
    struct stat st;
    bool e = lstat(p, &st) == 0;
    free(p);
    return e;
}

static void test_sibling_and_target(void) {
    char *s = slm_publish_sibling("/a/b/out", "prep-tmp", 42);
    CHECK_EQ_STR(s, "/a/b/.out.prep-tmp.42");
    free(s);
    s = slm_publish_sibling("/out", "export-old", 7);
    CHECK_EQ_STR(s, "/.out.export-old.7");
    free(s);
    s = slm_publish_sibling("out", "x", 1);
    CHECK_EQ_STR(s, ".out.x.1");
    free(s);
    char *missing = at("no/such/dir///");
    char *t = slm_publish_target(missing);
    char *want = at("no/such/dir");
    CHECK_EQ_STR(t, want);
    free(t), free(want), free(missing);
    // A symlink names the directory it points to.
    char *real = at("real"), *link = at("link");
    CHECK_OK(slm_mkdir_p(real));
    CHECK(symlink(real, link) == 0);
    t = slm_publish_target(link);
    CHECK_EQ_STR(t, real);
    free(t), free(real), free(link);
}

// drop: names starting with "own" belong to the previous publication.
static bool drop_own(const char *old, const char *name, const char *target, void *arg) {
    (void)old, (void)target;
    (*(int *)arg)++;
    return !strncmp(name, "own", 3);
}

static void test_publish(void) {
    char *out = at("pub/out");
    char *tmp = slm_publish_sibling(out, "t-tmp", 1), *old = slm_publish_sibling(out, "t-old", 1);
    slm_publish p = {.what = "test: --out", .shown = "OUT"};
    // First publication: the parent is created, nothing was there before.
    CHECK_OK(slm_publish_begin(tmp, &p));
    put(tmp, "own.bin", "new weights");
    CHECK_OK(slm_publish_dir(tmp, out, old, &p));
    CHECK(!slm_is_dir(tmp) && !slm_is_dir(old));
    CHECK(text_is(out, "own.bin", "new weights"));
    // Over a previous directory: own* deleted, the user's file moved in, the old one removed.
    put(out, "notes.txt", "mine");
    put(out, "own.old", "stale");
    CHECK_OK(slm_mkdir_p(tmp)); // a stale temp directory of the same name: begin clears it
    put(tmp, "stale-but-fresh", "x");
    CHECK_OK(slm_publish_begin(tmp, &p));
    CHECK(!exists(tmp, "stale-but-fresh"));
    put(tmp, "own.bin", "newer weights");
    int calls = 0;
    p.drop = drop_own, p.arg = &calls;
    CHECK_OK(slm_publish_dir(tmp, out, old, &p));
    CHECK_EQ_INT(calls, 3);
    CHECK(text_is(out, "own.bin", "newer weights"));
    CHECK(text_is(out, "notes.txt", "mine"));
    CHECK(!exists(out, "own.old") && !slm_is_dir(old) && !slm_is_dir(tmp));
    // A user's file whose name the new directory also has: the old directory is kept with it.
    CHECK_OK(slm_publish_begin(tmp, &p));
    put(tmp, "notes.txt", "generated");
    p.drop = NULL;
    CHECK_OK(slm_publish_dir(tmp, out, old, &p));
    CHECK(text_is(out, "notes.txt", "generated"));
    CHECK(text_is(old, "notes.txt", "mine"));
    // Without drop nothing is deleted: own.bin, free in the new directory, moved into it.
    CHECK(text_is(out, "own.bin", "newer weights"));
    CHECK(!exists(old, "own.bin"));
    free(out), free(tmp), free(old);
}

static void test_target_is_file(void) {
    char *out = at("file");
    put(g_root, "file", "not a directory");
    char *tmp = slm_publish_sibling(out, "t-tmp", 2), *old = slm_publish_sibling(out, "t-old", 2);
    slm_publish p = {.what = "test: --out", .shown = "FILE"};
    CHECK_OK(slm_publish_begin(tmp, &p));
    slm_status st = slm_publish_dir(tmp, out, old, &p);
    CHECK_EQ_INT(st, SLM_E_IO);
    CHECK_EQ_STR(slm_errmsg(), "test: --out FILE exists and is not a directory");
    CHECK(slm_is_dir(tmp) && slm_is_file(out));
    CHECK(text_is(g_root, "file", "not a directory"));
    slm_rmdir_flat_quiet(tmp);
    free(out), free(tmp), free(old);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/test_publish.XXXXXX");
    if (!mkdtemp(g_root)) return 1;
    RUN(test_sibling_and_target);
    RUN(test_publish);
    RUN(test_target_is_file);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_root);
    return TEST_SUMMARY();
}
