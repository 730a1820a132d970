// Disk full during a save: on a 1 MiB tmpfs one checkpoint (~0.66 MB) fits and a second does
// not. The second save (async and sync) must fail with a clear ENOSPC message, leave `latest`
// naming the first, the first must still verify, and no staging directory may remain.
// Skipped (exit 77, CTest's SKIP_RETURN_CODE: reported as skipped, not passed) where mounting a
// tmpfs is not allowed.
#include "ckpt/ckpt_internal.h"
#include "fixtures.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char g_mnt[256];
static bool g_mounted;

static void test_disk_full(void) {
    slm_llama_config c = slm_test_config(512, 48, 64, 1, 2, 2, 16, false);
    slm_llama m;
    CHECK_OK(slm_llama_init(&m, &c, true));
    slm_llama_init_weights(&m, 1);
    slm_ckpt_shard sh[8];
    for (int u = 0; u < m.n_units; u++)
        sh[u] = (slm_ckpt_shard){.begin = 0,
                                 .end = m.units[u].numel,
                                 .params = m.params[u],
                                 .m = m.params[u],
                                 .v = m.params[u]};
    char *root = slm_path_join(g_mnt, "checkpoints");
    for (int sync = 0; sync < 2; sync++) {
        slm_ckpt_saver_opts o = {.root = root, .sync = sync == 1, .rank = 0, .world = 1};
        slm_ckpt_saver *s = NULL;
        CHECK_OK(slm_ckpt_saver_new(&o, &s));
        slm_ckpt_meta meta;
        slm_ckpt_meta_default(&meta, &c);
        meta.step = 100;
        if (sync == 0) {
            CHECK_OK(slm_ckpt_saver_save(s, &meta, m.units, m.n_units, sh));
            CHECK_OK(slm_ckpt_saver_finish(s));
        }
        meta.step = 200 + sync;
        slm_status st = slm_ckpt_saver_save(s, &meta, m.units, m.n_units, sh);
        if (!st) st = slm_ckpt_saver_finish(s);
        slm_ckpt_saver_free(s);
        CHECK_EQ_INT(st, SLM_E_IO);
        CHECK_MSG(strstr(slm_errmsg(), "No space left") && strstr(slm_errmsg(), "rank_00000") &&
                      strstr(slm_errmsg(), "not saved"),
                  "message: %s", slm_errmsg());
        slm_ckpt *ck = NULL;
        CHECK_OK(slm_ckpt_open(root, &ck));
        CHECK_EQ_INT(slm_ckpt_get_meta(ck)->step, 100);
        CHECK_OK(slm_ckpt_verify(ck));
        slm_ckpt_free(ck);
        char *t = slm_ckpt_step_dir(root, meta.step, true);
        CHECK(!slm_is_dir(t));
        free(t);
    }
    free(root);
    slm_llama_free(&m);
}

int main(void) {
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_mnt, sizeof g_mnt, "%s/slm_test_diskfull_%d", base, (int)getpid());
    slm_mkdir_p(g_mnt);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=1m tmpfs '%s' 2>/dev/null", g_mnt);
    g_mounted = system(cmd) == 0;
    if (!g_mounted) {
        fprintf(stderr, "SKIP: cannot mount a tmpfs at %s here (needs root / CAP_SYS_ADMIN)\n",
                g_mnt);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_mnt);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_mnt);
        return 77;
    }
    RUN(test_disk_full);
    if (g_mounted) {
        snprintf(cmd, sizeof cmd, "umount '%s'", g_mnt);
        if (system(cmd) != 0) fprintf(stderr, "could not unmount %s\n", g_mnt);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_mnt);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_mnt);
    return TEST_SUMMARY();
}
