// Fault injection for tests (SHARDLM_FAULT): the actions the trainer fires (a slow, killed,
// stopped or exiting rank before a step; NaN loss and gradients; a flipped checkpoint byte), and
// the hook (slm_train_faults) through which the run reaches them. The parser and the attempt
// rule are base/fault.c; contract in train.h and base/fault.h; docs/operations.md.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train/train.h"
#include "train/train_internal.h"

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

// ---------------------------------------------------------------------------------------------
// The trainer's fault hook (train_internal.h): the plan's actions at the run's named points

static void at_step_start(slm_trainer *tr) {
    slm_fault_before_step(&tr->faults, tr->rank, tr->step + 1);
}

// nan-grad:step=S[:rank=R]: this rank's first micro-batch of step S gets a NaN loss and
// (through a NaN loss scale) NaN gradients.
static void at_micro_batch(slm_trainer *tr, int k, float *loss, float *scale) {
    int64_t step = tr->step + 1;
    const slm_fault *f = k == 0 ? slm_fault_find(&tr->faults, SLM_FAULT_NAN_GRAD, step) : NULL;
    if (!f || (f->rank < 0 ? 0 : f->rank) != tr->rank) return;
    slm_warn("fault injection (SHARDLM_FAULT): nan-grad:step=%lld: NaN loss and gradients on "
             "rank %d",
             (long long)step, tr->rank);
    *loss = NAN;
    *scale = NAN;
}

static void at_after_ckpt(slm_trainer *tr) {
    const slm_fault *f = slm_fault_find(&tr->faults, SLM_FAULT_CORRUPT_CKPT, -1);
    if (!f || tr->fault_corrupted || tr->rank != 0 || !tr->o->out_dir) return;
    char name[96];
    snprintf(name, sizeof name, "checkpoints/step_%08lld", (long long)f->step);
    char *dir = slm_path_join(tr->o->out_dir, name);
    snprintf(name, sizeof name, "rank_%05d.bin", f->rank < 0 ? 0 : f->rank);
    char *file = slm_path_join(dir, name);
    if (slm_is_dir(dir)) {
        tr->fault_corrupted = true;
        if (slm_fault_flip_byte(file)) slm_warn("fault injection: %s", slm_errmsg());
    }
    free(file);
    free(dir);
}

const slm_train_fault_hook slm_train_faults = {
    .step_start = at_step_start, .micro_batch = at_micro_batch, .after_ckpt = at_after_ckpt};
