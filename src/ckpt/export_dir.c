// Export staging: `ckpt export` writes into a hidden temp sibling of OUT_DIR and swaps it in
// once every file is written, so OUT_DIR never mixes files of two exports (no stale
// model-0000k-of-0000n.safetensors or model.safetensors.index.json from an earlier export can
// survive next to new weights). Contracts in ckpt.h.
#include "ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// OUT_DIR as the path to operate on: its real path when it exists (a symlink, "." or a trailing
// '/' name the directory itself), else the path without trailing slashes.
static char *resolve(const char *out) {
    struct stat st;
    char real[PATH_MAX];
    if (lstat(out, &st) == 0 && realpath(out, real)) return slm_xstrdup(real);
    char *p = slm_xstrdup(out);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = 0;
    return p;
}

// "<parent>/.<base>.export-<tag>.<pid>".
static char *sibling(const char *path, const char *tag) {
    const char *slash = strrchr(path, '/');
    slm_buf b = {0};
    if (slash) slm_buf_appendf(&b, "%.*s/", (int)(slash - path) + (slash == path), path);
    slm_buf_appendf(&b, ".%s.export-%s.%" PRId64, slash ? slash + 1 : path, tag, (int64_t)getpid());
    return b.data;
}

void slm_export_dir_abort(const char *tmp) {
    if (tmp) slm_rmdir_flat_quiet(tmp);
}

slm_status slm_export_dir_begin(const char *out_dir, char **tmp) {
    *tmp = NULL;
    char *out = resolve(out_dir);
    struct stat st;
    slm_status rc = SLM_OK;
    if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
        rc = slm_fail(SLM_E_IO, "export: --hf %s exists and is not a directory", out_dir);
    } else {
        char *parent = slm_path_parent(out);
        rc = slm_mkdir_p(parent);
        free(parent);
    }
    if (!rc) {
        char *t = sibling(out, "tmp");
        slm_export_dir_abort(t); // a stale one of a killed export that had the same pid
        if (mkdir(t, 0777) != 0) {
            rc = slm_fail(SLM_E_IO, "export: cannot create temp directory %s: %s", t,
                          strerror(errno));
            free(t);
        } else {
            *tmp = t;
        }
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

slm_status slm_export_dir_commit(const char *tmp, const char *out_dir) {
    char *out = resolve(out_dir), *old = sibling(out, "old");
    struct stat st;
    bool had_old = lstat(out, &st) == 0;
    slm_status rc = SLM_OK;
    if (had_old && !S_ISDIR(st.st_mode)) {
        rc = slm_fail(SLM_E_IO, "export: --hf %s exists and is not a directory", out_dir);
        goto done;
    }
    if (had_old && rename(out, old) != 0) {
        rc = slm_fail(SLM_E_IO, "export: %s: cannot move the previous directory aside to %s: %s",
                      out_dir, old, strerror(errno));
        goto done;
    }
    if (rename(tmp, out) != 0) {
        int e = errno;
        if (had_old && rename(old, out) != 0)
            rc = slm_fail(SLM_E_IO,
                          "export: rename of %s to %s failed (%s) and the previous directory "
                          "could not be moved back from %s: %s",
                          tmp, out_dir, strerror(e), old, strerror(errno));
        else
            rc = slm_fail(SLM_E_IO, "export: rename of %s to %s failed: %s", tmp, out_dir,
                          strerror(e));
        goto done;
    }
    {
        char *parent = slm_path_parent(out);
        rc = slm_fsync_dir(parent);
        free(parent);
    }
    if (had_old) {
        // Retire the previous directory: its export files go, anything else (a README, the
        // user's own files) moves into the new OUT_DIR.
        int kept = 0;
        DIR *d = opendir(old);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char *from = slm_path_join(old, e->d_name), *to = slm_path_join(out, e->d_name);
                struct stat fs;
                if (superseded(e->d_name, out) && lstat(from, &fs) == 0 && !S_ISDIR(fs.st_mode)) {
                    if (unlink(from) != 0) kept++;
                } else if (lstat(to, &fs) == 0 || rename(from, to) != 0) {
                    kept++;
                }
                free(from);
                free(to);
            }
            closedir(d);
        }
        if (kept || rmdir(old) != 0)
            slm_warn("export: %s: %d file(s) of the previous directory could not be removed or "
                     "moved into the new export; they are kept in %s",
                     out_dir, kept, old);
    }
done:
    free(out);
    free(old);
    return rc;
}
