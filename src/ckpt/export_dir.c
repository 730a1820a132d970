// Export staging: `ckpt export` writes into a hidden temp sibling of OUT_DIR and swaps it in
// once every file is written, so OUT_DIR never mixes files of two exports (no stale
// model-0000k-of-0000n.safetensors or model.safetensors.index.json from an earlier export can
// survive next to new weights). Contracts in ckpt.h.
#include "ckpt/ckpt.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void slm_export_dir_abort(const char *tmp) {
    if (tmp) slm_rmdir_flat_quiet(tmp);
}

slm_status slm_export_dir_begin(const char *out_dir, char **tmp) {
    *tmp = NULL;
    char *out = slm_publish_target(out_dir);
    struct stat st;
    slm_status rc = SLM_OK;
    if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
        rc = slm_fail(SLM_E_IO, "export: --hf %s exists and is not a directory", out_dir);
    } else {
        slm_publish p = {.what = "export: --hf", .shown = out_dir};
        char *t = slm_publish_sibling(out, "export-tmp", (int64_t)getpid());
        rc = slm_publish_begin(t, &p);
        if (rc)
            free(t);
        else
            *tmp = t;
    }
    free(out);
    return rc;
}

// A file of an earlier export that the new one replaces: HF weight files (whatever their shard
// count), the model / tokenizer / generation metadata an export may write (a stale
// tokenizer.model next to a new tokenizer.json would still be loaded by some readers), and any
// name the new export wrote.
static bool superseded(const char *name, const char *new_dir) {
    static const char *const meta[] = {"model.safetensors.index.json",
                                       "config.json",
                                       "generation_config.json",
                                       "tokenizer.json",
                                       "tokenizer.model",
                                       "tokenizer_config.json",
                                       "special_tokens_map.json",
                                       "adapter_model.safetensors",
                                       "adapter_config.json"};
    size_t n = strlen(name);
    if (!strncmp(name, "model", 5) && n > 12 && !strcmp(name + n - 12, ".safetensors")) return true;
    for (size_t i = 0; i < sizeof meta / sizeof *meta; i++)
        if (!strcmp(name, meta[i])) return true;
    char *p = slm_path_join(new_dir, name);
    struct stat st;
    bool taken = lstat(p, &st) == 0;
    free(p);
    return taken;
}

// slm_publish drop: the files of the previous export that the new one replaces (not directories).
static bool drop_superseded(const char *old, const char *name, const char *new_dir, void *arg) {
    (void)arg;
    if (!superseded(name, new_dir)) return false;
    char *p = slm_path_join(old, name);
    struct stat fs;
    bool file = lstat(p, &fs) == 0 && !S_ISDIR(fs.st_mode);
    free(p);
    return file;
}

slm_status slm_export_dir_commit(const char *tmp, const char *out_dir) {
    char *out = slm_publish_target(out_dir);
    char *old = slm_publish_sibling(out, "export-old", (int64_t)getpid());
    // The previous directory is retired: its export files go, anything else (a README, the
    // user's own files) moves into the new OUT_DIR.
    slm_publish p = {.what = "export: --hf", .shown = out_dir, .drop = drop_superseded};
    slm_status rc = slm_publish_dir(tmp, out, old, &p);
    free(out);
    free(old);
    return rc;
}
