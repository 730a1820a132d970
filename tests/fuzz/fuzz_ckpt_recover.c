// libFuzzer target: recovering an interrupted checkpoint save (slm_ckpt_recover_pending): the
// input is ROOT/step_00000001.tmp/pending.json, then a NUL byte, then rank 0's sidecar
// rank_00000.json; rank_00000.bin holds 64 fixed bytes. Whatever the two files say, recovery
// must not crash, and a checkpoint it commits must open (its manifest parses).
#include "ckpt/ckpt_internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_root[256];

static void put(const char *dir, const char *name, const void *p, size_t n) {
    char *path = slm_path_join(dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        if (n) fwrite(p, 1, n, f);
        fclose(f);
    }
    free(path);
}

// At exit: the step directories, `latest` and the root go (nothing is left in /tmp).
static void cleanup(void) {
    char *tmp = slm_ckpt_step_dir(g_root, 1, true), *fin = slm_ckpt_step_dir(g_root, 1, false);
    char *latest = slm_path_join(g_root, "latest");
    slm_ckpt_rmdir(tmp);
    slm_ckpt_rmdir(fin);
    unlink(latest);
    rmdir(g_root);
    free(tmp);
    free(fin);
    free(latest);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_root[0]) {
        snprintf(g_root, sizeof g_root, "/tmp/fuzz_ckpt_recover_%d", (int)getpid());
        slm_mkdir_p(g_root);
        atexit(cleanup);
    }
    char *tmp = slm_ckpt_step_dir(g_root, 1, true), *fin = slm_ckpt_step_dir(g_root, 1, false);
    char *latest = slm_path_join(g_root, "latest");
    slm_ckpt_rmdir(tmp);
    slm_ckpt_rmdir(fin);
    unlink(latest);
    slm_mkdir_p(tmp);
    const uint8_t *nul = memchr(data, 0, size);
    size_t n1 = nul ? (size_t)(nul - data) : size;
    put(tmp, "pending.json", data, n1);
    if (nul) put(tmp, "rank_00000.json", nul + 1, size - n1 - 1);
    char bin[64];
    memset(bin, 'x', sizeof bin);
    put(tmp, "rank_00000.bin", bin, sizeof bin);
    int64_t rec = -1;
    slm_log_set_level(SLM_LOG_ERROR);
    if (slm_ckpt_recover_pending(g_root, 0, &rec) != SLM_OK) __builtin_trap();
    if (rec == 1) { // committed: it must open as a checkpoint of step 1
        slm_ckpt *c = NULL;
        if (slm_ckpt_open(fin, &c) != SLM_OK) __builtin_trap();
        slm_ckpt_free(c);
    }
    free(tmp);
    free(fin);
    free(latest);
    return 0;
}
