// The heartbeat hook (--heartbeat-dir DIR): every rank atomically replaces DIR/rank_%05d.json
// with its liveness record at start, after every step and at the end, for a supervisor
// (shardlm launch) to detect a lost rank or a hung job. Contract in train.h.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train/train.h"

// Wall-clock seconds since the Unix epoch (CLOCK_REALTIME, so hosts compare).
static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

slm_status slm_heartbeat_write(const char *dir, int rank, int64_t step, double loss,
                               const char *phase) {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
    for (char *c = host; *c; c++) // hostnames are [A-Za-z0-9.-]; anything else is not JSON-safe
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '_';
    char loss_s[40] = "null";
    if (isfinite(loss)) snprintf(loss_s, sizeof loss_s, "%.9g", loss);
    char rec[512];
    int n = snprintf(rec, sizeof rec,
                     "{\"rank\":%d,\"pid\":%d,\"host\":\"%s\",\"step\":%lld,\"time\":%.6f,"
                     "\"loss\":%s,\"phase\":\"%s\"}\n",
                     rank, (int)getpid(), host, (long long)step, unix_now(), loss_s, phase);
    char name[64], tmpname[96];
    snprintf(name, sizeof name, "rank_%05d.json", rank);
    snprintf(tmpname, sizeof tmpname, ".rank_%05d.json.tmp.%d", rank, (int)getpid());
    char *path = slm_path_join(dir, name), *tmp = slm_path_join(dir, tmpname);
    slm_status st = SLM_OK;
    // No fsync: a heartbeat is about liveness, not durability; rename(2) keeps readers from
    // ever seeing a partial record.
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = slm_fail(SLM_E_IO, "--heartbeat-dir: %s: cannot create: %s", tmp, strerror(errno));
    } else {
        ssize_t w = write(fd, rec, (size_t)n);
        int werr = w == n ? 0 : w < 0 ? errno : EIO;
        if (close(fd) != 0 && !werr) werr = errno;
        if (werr)
            st = slm_fail(SLM_E_IO, "--heartbeat-dir: %s: write failed: %s", tmp, strerror(werr));
        else if (rename(tmp, path) != 0)
            st = slm_fail(SLM_E_IO, "--heartbeat-dir: rename %s -> %s failed: %s", tmp, path,
                          strerror(errno));
        if (st) unlink(tmp);
    }
    free(path);
    free(tmp);
    return st;
}

// The hook's per-run state, in the caller's slm_train_std_hooks (heartbeat): made by on_start,
// freed by on_finish.
typedef struct hb_state {
    bool warned; // a failed write is reported once per run, then training goes on
} hb_state;

static slm_status hb_start(void *ctx, slm_trainer *tr) {
    hb_state **hb = ctx;
    *hb = slm_xcalloc(1, sizeof **hb);
    const char *dir = slm_trainer_opts(tr)->heartbeat_dir;
    slm_status st = slm_mkdir_p(dir);
    if (!st)
        st = slm_heartbeat_write(dir, slm_trainer_rank(tr), slm_trainer_steps_done(tr), NAN,
                                 "start");
    return st;
}

// A failed write is one warning.
static void hb_put(hb_state *hb, slm_trainer *tr, int64_t step, double loss, const char *phase) {
    slm_status st = slm_heartbeat_write(slm_trainer_opts(tr)->heartbeat_dir, slm_trainer_rank(tr),
                                        step, loss, phase);
    if (st && !hb->warned) {
        if (!strcmp(phase, "train"))
            slm_warn("%s (training goes on; a supervisor may take this rank for hung)",
                     slm_errmsg());
        else
            slm_warn("%s (the final heartbeat record, phase %s)", slm_errmsg(), phase);
        hb->warned = true;
    }
}

static slm_status hb_step(void *ctx, slm_trainer *tr, const slm_step_metrics *m) {
    hb_put(*(hb_state **)ctx, tr, m->step, m->loss, "train");
    return SLM_OK;
}

static slm_status hb_finish(void *ctx, slm_trainer *tr, slm_status st) {
    hb_state **hb = ctx;
    const slm_train_result *r = slm_trainer_result(tr);
    hb_put(*hb, tr, slm_trainer_steps_done(tr), st ? NAN : r->final_loss,
           st               ? "error"
           : r->interrupted ? "stopped"
                            : "end");
    free(*hb);
    *hb = NULL;
    return SLM_OK;
}

slm_status slm_train_add_heartbeat_hook(slm_train_opts *o, slm_train_std_hooks *h) {
    if (!o->heartbeat_dir) return SLM_OK;
    slm_train_hook k = {.name = "heartbeat",
                        .ctx = &h->heartbeat,
                        .on_start = hb_start,
                        .on_step = hb_step,
                        .on_finish = hb_finish};
    return slm_train_attach(o, &k);
}
