// The checkpoint reader's source for local rank files (ckpt_internal.h "source"): a file is
// opened and its size checked on its head, read with pread, hashed in one pass for verification
// and closed when the source is freed.
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct local_src {
    int *fd; // [n] by the file's index in the manifest; -1 until opened
    int n;
} local_src;

static slm_status local_head(void *impl, const slm_ckpt_src_file *f) {
    local_src *L = impl;
    if (f->index >= L->n) {
        L->fd = slm_xrealloc(L->fd, (size_t)(f->index + 1) * sizeof *L->fd);
        for (int i = L->n; i <= f->index; i++)
            L->fd[i] = -1;
        L->n = f->index + 1;
    }
    if (L->fd[f->index] >= 0) return SLM_OK;
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return slm_fail(SLM_E_IO, "%s: cannot open rank %d's file: %s%s", f->path, f->rank,
                        strerror(errno),
                        errno == ENOENT ? "; HINT: the checkpoint is incomplete, resume from an "
                                          "older one with --resume PATH"
                                        : "");
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size != f->bytes) {
        close(fd);
        return slm_fail(SLM_E_IO, "%s: size %lld, manifest says %" PRId64 " bytes (truncated?)",
                        f->path, (long long)sb.st_size, f->bytes);
    }
    L->fd[f->index] = fd;
    return SLM_OK;
}

static slm_status local_read(void *impl, const slm_ckpt_src_file *f, int64_t off, size_t len,
                             int64_t want_end, uint8_t *dst) {
    local_src *L = impl;
    (void)want_end; // the page cache reads ahead
    SLM_ASSERT(f->index < L->n && L->fd[f->index] >= 0);
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(L->fd[f->index], dst + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return slm_fail(SLM_E_IO, "%s: read at byte %" PRId64 " failed: %s", f->path,
                            off + (int64_t)got, r < 0 ? strerror(errno) : "unexpected end of file");
        got += (size_t)r;
    }
    return SLM_OK;
}

static slm_status local_hash(void *impl, const slm_ckpt_src_file *f, uint64_t *out) {
    (void)impl;
    return slm_file_xxh64(f->path, out);
}

static void local_free(void *impl) {
    local_src *L = impl;
    if (!L) return;
    for (int i = 0; i < L->n; i++)
        if (L->fd[i] >= 0) close(L->fd[i]);
    free(L->fd);
    free(L);
}

static const slm_ckpt_source_ops k_local_source = {.files = NULL,
                                                   .head = local_head,
                                                   .read = local_read,
                                                   .hash = local_hash,
                                                   .where = NULL,
                                                   .free = local_free};

slm_ckpt_source slm_ckpt_local_source(void) {
    return (slm_ckpt_source){.ops = &k_local_source, .impl = slm_xcalloc(1, sizeof(local_src))};
}
