// File helpers: whole-file reads, full writes + fsync, atomic writes (temp + fsync + rename +
// dir fsync), copy, flat directory removal, mmap, and XXH64 hashing.
#include "base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

// Opens `path` read-only into *fd and fstats it into *st (on failure nothing stays open).
// Errors: SLM_E_IO "PATH: cannot open: ..." / "PATH: cannot stat: ...".
static slm_status open_read(const char *path, int *fd, struct stat *st) {
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return slm_fail(SLM_E_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(*fd, st) != 0) {
        int e = errno;
        close(*fd);
        *fd = -1;
        return slm_fail(SLM_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    return SLM_OK;
}

slm_status slm_file_read_all(const char *path, char **out, size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    int fd;
    struct stat st;
    slm_status rc = open_read(path, &fd, &st);
    if (rc) return rc;
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return slm_fail(SLM_E_IO, "%s: is a directory, expected a file", path);
    }
    slm_buf b = {0};
    slm_buf_reserve(&b, st.st_size > 0 ? (size_t)st.st_size : 4096);
    for (;;) {
        if (b.cap - b.len < 4096) slm_buf_reserve(&b, b.len + 65536);
        ssize_t n = read(fd, b.data + b.len, b.cap - 1 - b.len);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            slm_buf_free(&b);
            return slm_fail(SLM_E_IO, "%s: read failed: %s", path, strerror(e));
        }
        if (n == 0) break;
        b.len += (size_t)n;
    }
    close(fd);
    b.data[b.len] = 0;
    *out = b.data;
    if (len) *len = b.len;
    return SLM_OK;
}

slm_status slm_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return slm_fail(SLM_E_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return slm_fail(SLM_E_IO, "%s: fsync of directory failed: %s", dir, strerror(e));
    return SLM_OK;
}

slm_status slm_fd_write_all(int fd, const void *data, size_t len, const char *path) {
    const uint8_t *p = data;
    while (len > 0) {
        size_t chunk = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
        ssize_t n = write(fd, p, chunk);
        if (n < 0) {
            if (errno == EINTR) continue;
            return slm_fail(SLM_E_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return SLM_OK;
}

slm_status slm_fd_write_fsync_close(int fd, const void *data, size_t len, const char *path) {
    slm_status st = slm_fd_write_all(fd, data, len, path);
    if (!st && fsync(fd) != 0)
        st = slm_fail(SLM_E_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && !st)
        st = slm_fail(SLM_E_IO, "%s: close failed: %s", path, strerror(errno));
    return st;
}

slm_status slm_file_write_durable(const char *path, const void *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return slm_fail(SLM_E_IO, "%s: cannot create: %s", path, strerror(errno));
    slm_status st = slm_fd_write_fsync_close(fd, data, len, path);
    if (st) unlink(path);
    return st;
}

slm_status slm_file_write_atomic(const char *path, const void *data, size_t len) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return slm_fail(SLM_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    slm_status wst = slm_fd_write_fsync_close(fd, data, len, path);
    if (wst) {
        unlink(tmp);
        return wst;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return slm_fail(SLM_E_IO, "%s: rename from temp file failed: %s", path, strerror(e));
    }
    char *d = slm_path_parent(path);
    slm_status st = slm_fsync_dir(d);
    free(d);
    return st;
}

slm_status slm_file_copy(const char *src, const char *dst, uint64_t *xxh64) {
    char *data = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(src, &data, &len);
    if (st) return st;
    if (xxh64) *xxh64 = slm_xxh64(data, len, 0);
    st = slm_file_write_atomic(dst, data, len);
    free(data);
    return st;
}

slm_status slm_rmdir_flat(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? SLM_OK : slm_fail(SLM_E_IO, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = slm_path_join(dir, e->d_name);
        unlink(p);
        free(p);
    }
    closedir(d);
    if (rmdir(dir) != 0) return slm_fail(SLM_E_IO, "%s: rmdir: %s", dir, strerror(errno));
    return SLM_OK;
}

void slm_rmdir_flat_quiet(const char *dir) {
    char *keep = slm_xstrdup(slm_errmsg());
    (void)slm_rmdir_flat(dir);
    slm_set_errmsg(keep);
    free(keep);
}

slm_status slm_mkdir_p(const char *dir) {
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf) return slm_fail(SLM_E_ARG, "bad directory path \"%s\"", dir);
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return slm_fail(SLM_E_IO, "%s: cannot create directory: %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    if (!slm_is_dir(dir)) return slm_fail(SLM_E_IO, "%s: exists and is not a directory", dir);
    return SLM_OK;
}

bool slm_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool slm_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *slm_path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    bool slash = la > 0 && a[la - 1] != '/';
    char *out = slm_xmalloc(la + lb + 2);
    memcpy(out, a, la);
    if (slash) out[la++] = '/';
    memcpy(out + la, b, lb + 1);
    return out;
}

char *slm_path_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return slm_xstrdup(".");
    if (slash == path) return slm_xstrdup("/");
    char *p = slm_xstrdup(path);
    p[slash - path] = 0;
    return p;
}

slm_status slm_map_file(const char *path, slm_map *m) {
    m->data = NULL;
    m->len = 0;
    int fd;
    struct stat st;
    slm_status rc = open_read(path, &fd, &st);
    if (rc) return rc;
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return slm_fail(SLM_E_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return SLM_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return slm_fail(SLM_E_IO, "%s: mmap failed: %s", path, strerror(e));
    m->data = p;
    m->len = (size_t)st.st_size;
    return SLM_OK;
}

void slm_map_free(slm_map *m) {
    if (m->data) munmap((void *)m->data, m->len);
    m->data = NULL;
    m->len = 0;
}

uint64_t slm_xxh64(const void *data, size_t len, uint64_t seed) {
    return (uint64_t)XXH64(data, len, (XXH64_hash_t)seed);
}

slm_status slm_file_xxh64(const char *path, uint64_t *out) {
    slm_map m;
    slm_status st = slm_map_file(path, &m);
    if (st) return st;
    *out = slm_xxh64(m.data, m.len, 0);
    slm_map_free(&m);
    return SLM_OK;
}

void slm_hex64(uint64_t h, char out[17]) {
    snprintf(out, 17, "%016" PRIx64, h);
}

bool slm_parse_hex64(const char *s, uint64_t *out) {
    if (!s || strlen(s) != 16) return false;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : -1;
        if (d < 0) return false;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return true;
}
