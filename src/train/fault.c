// Fault injection for tests (SHARDLM_FAULT): the actions the trainer fires (a slow, killed,
// stopped or exiting rank before a step; a flipped checkpoint byte). The parser and the attempt
// rule are base/fault.c; contract in train.h and base/fault.h; docs/operations.md.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train/train.h"

void slm_fault_before_step(const slm_fault_plan *p, int rank, int64_t step) {
    for (int i = 0; p && i < p->n; i++) {
        const slm_fault *f = &p->f[i];
        if (f->rank != rank || !slm_fault_armed(p, f)) continue;
        if (f->kind == SLM_FAULT_SLOW && (f->step == 0 || f->step == step) && f->ms > 0) {
            struct timespec ts = {(time_t)(f->ms / 1000), (long)(f->ms % 1000) * 1000000L};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            }
            continue;
        }
        if (f->step != step) continue;
        if (f->kind == SLM_FAULT_KILL) {
            slm_warn("fault injection (SHARDLM_FAULT): kill:rank=%d:step=%lld: SIGKILL to self "
                     "(pid %d) before step %lld",
                     rank, (long long)step, (int)getpid(), (long long)step);
            raise(SIGKILL);
        } else if (f->kind == SLM_FAULT_STOP) {
            slm_warn("fault injection (SHARDLM_FAULT): stop:rank=%d:step=%lld: SIGSTOP to self "
                     "(pid %d) before step %lld",
                     rank, (long long)step, (int)getpid(), (long long)step);
            raise(SIGSTOP);
        } else if (f->kind == SLM_FAULT_EXIT) {
            slm_warn("fault injection (SHARDLM_FAULT): exit:rank=%d:step=%lld: exiting with "
                     "status 1 before step %lld",
                     rank, (long long)step, (long long)step);
            fflush(NULL);
            _exit(1);
        }
    }
}

slm_status slm_fault_flip_byte(const char *path) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return slm_fail(SLM_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    slm_status st = SLM_OK;
    unsigned char c;
    off_t at = 0;
    if (fstat(fd, &sb) != 0 || sb.st_size < 1) {
        st = slm_fail(SLM_E_IO, "%s: empty or unreadable", path);
    } else {
        at = sb.st_size / 2;
        if (pread(fd, &c, 1, at) != 1) {
            st = slm_fail(SLM_E_IO, "%s: read failed: %s", path, strerror(errno));
        } else {
            c ^= 0xff;
            if (pwrite(fd, &c, 1, at) != 1 || fsync(fd) != 0)
                st = slm_fail(SLM_E_IO, "%s: write failed: %s", path, strerror(errno));
        }
    }
    close(fd);
    if (!st)
        slm_warn("fault injection (SHARDLM_FAULT): flipped byte %lld of %s", (long long)at, path);
    return st;
}
