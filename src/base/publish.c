// Publishing a directory atomically: a new directory built in a hidden temp sibling of the
// target is swapped in whole (prep's dataset, export's HF directory). Contracts in base.h
// "Publishing a directory".
#include "base/base.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *slm_publish_target(const char *path) {
    struct stat st;
    char real[PATH_MAX];
    if (lstat(path, &st) == 0 && realpath(path, real)) return slm_xstrdup(real);
    char *p = slm_xstrdup(path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = 0;
    return p;
}

char *slm_publish_sibling(const char *target, const char *tag, int64_t pid) {
    const char *slash = strrchr(target, '/');
    slm_buf b = {0};
    if (slash == target)
        slm_buf_appendf(&b, "/");
    else if (slash)
        slm_buf_appendf(&b, "%.*s/", (int)(slash - target), target);
    slm_buf_appendf(&b, ".%s.%s.%" PRId64, slash ? slash + 1 : target, tag, pid);
    return b.data;
}

slm_status slm_publish_begin(const char *tmp, const slm_publish *p) {
    char *parent = slm_path_parent(tmp);
    slm_status st = slm_mkdir_p(parent);
    free(parent);
    if (st) return st;
    slm_rmdir_flat_quiet(tmp); // a stale one of a killed run that had the same pid
    if (mkdir(tmp, 0777) != 0)
        return slm_fail(SLM_E_IO, "%s %s: cannot create temp directory %s: %s", p->what, p->shown,
                        tmp, strerror(errno));
    return SLM_OK;
}

// After the swap: `old` is the previous target directory. The entries p->drop claims (the
// previous publication's own files) are deleted; everything else is moved into the new `target`
// unless that name is taken there. What cannot be deleted or moved stays in `old`, named in a
// warning. Failures here only warn: the new directory is in place.
static void retire_old(const char *old, const char *target, const slm_publish *p) {
    int kept = 0;
    DIR *d = opendir(old);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *from = slm_path_join(old, e->d_name), *to = slm_path_join(target, e->d_name);
            struct stat fs;
            if (p->drop && p->drop(old, e->d_name, target, p->arg)) {
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
        slm_warn("%s %s: %d file(s) of the previous directory could not be removed or moved into "
                 "the new one; they are kept in %s",
                 p->what, p->shown, kept, old);
}

slm_status slm_publish_dir(const char *tmp, const char *target, const char *old,
                           const slm_publish *p) {
    slm_status st = slm_fsync_dir(tmp);
    if (st) return st;
    struct stat sb;
    bool had_old = lstat(target, &sb) == 0;
    if (had_old && !S_ISDIR(sb.st_mode))
        return slm_fail(SLM_E_IO, "%s %s exists and is not a directory", p->what, p->shown);
    if (had_old && rename(target, old) != 0)
        return slm_fail(SLM_E_IO, "%s %s: cannot move the previous directory aside to %s: %s",
                        p->what, p->shown, old, strerror(errno));
    if (rename(tmp, target) != 0) {
        int e = errno;
        if (had_old && rename(old, target) != 0)
            return slm_fail(SLM_E_IO,
                            "%s %s: rename of %s into place failed (%s) and the previous "
                            "directory could not be moved back from %s: %s",
                            p->what, p->shown, tmp, strerror(e), old, strerror(errno));
        return slm_fail(SLM_E_IO, "%s %s: rename of %s into place failed: %s", p->what, p->shown,
                        tmp, strerror(e));
    }
    char *parent = slm_path_parent(target);
    st = slm_fsync_dir(parent);
    free(parent);
    if (had_old) retire_old(old, target, p);
    return st;
}
