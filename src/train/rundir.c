// The run directory as training opens it: refusing folders that are not run directories, the
// exclusive lock, and the tokenizer checks of a resume / --init-from-hf. What to do with the
// checkpoints an earlier run left (resume, refuse, or move them aside) is resume.c's. Contract
// in train_internal.h.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "train/train_internal.h"

struct slm_rundir {
    int lock_fd; // RUN_DIR/run.lock, flock(LOCK_EX) held until slm_rundir_close
};

void slm_rundir_close(slm_rundir *rd) {
    if (!rd) return;
    if (rd->lock_fd >= 0) close(rd->lock_fd); // releases the flock
    free(rd);
}

// True if DIR has no entry besides . and .. and what `shardlm launch` writes before the first
// attempt's trainer runs (heartbeat/, logs/, attempts.json, health.json) (or cannot be listed).
static bool dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return true;
    struct dirent *e;
    bool empty = true;
    static const char *const launcher[] = {".",          "..", "heartbeat", "logs", "attempts.json",
                                           "health.json"};
    while (empty && (e = readdir(d))) {
        empty = false;
        for (size_t i = 0; i < sizeof launcher / sizeof launcher[0]; i++)
            empty |= !strcmp(e->d_name, launcher[i]);
    }
    closedir(d);
    return empty;
}

static bool has_entry(const char *dir, const char *name, bool want_dir) {
    char *p = slm_path_join(dir, name);
    bool ok = want_dir ? slm_is_dir(p) : slm_is_file(p);
    free(p);
    return ok;
}

// True if DIR/metrics.jsonl exists and its first line is the trainer's start event (hooks.c
// writes {"event":"start",...} first; an empty file or a user's own log is not one).
static bool metrics_starts_run(const char *dir) {
    char *p = slm_path_join(dir, "metrics.jsonl");
    FILE *f = slm_is_file(p) ? fopen(p, "r") : NULL;
    free(p);
    if (!f) return false;
    char *line = NULL;
    size_t cap = 0;
    bool ok = false;
    if (getline(&line, &cap, f) > 0) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
        ok = cJSON_IsString(ev) && !strcmp(ev->valuestring, "start");
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
    return ok;
}

// True if DIR/checkpoints holds a `latest` file or a step_N entry (committed or staging).
static bool has_checkpoint_entries(const char *dir) {
    char *root = slm_path_join(dir, "checkpoints");
    bool found = has_entry(root, "latest", false);
    DIR *d = found ? NULL : opendir(root);
    struct dirent *e;
    while (d && !found && (e = readdir(d))) {
        const char *q = e->d_name;
        if (strncmp(q, "step_", 5) != 0 || q[5] < '0' || q[5] > '9') continue;
        found = true;
    }
    if (d) closedir(d);
    free(root);
    return found;
}

bool slm_rundir_is_run_dir(const char *dir) {
    return has_entry(dir, SLM_RUNDIR_LOCK, false) || metrics_starts_run(dir) ||
           has_checkpoint_entries(dir);
}

// Takes the exclusive lock on DIR/run.lock (created) and writes "pid P on host H" into it.
static slm_status take_lock(const char *dir, int *fd_out) {
    char *lp = slm_path_join(dir, SLM_RUNDIR_LOCK);
    slm_status st = SLM_OK;
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = slm_fail(SLM_E_IO, "%s: cannot create the run lock: %s", lp, strerror(errno));
        goto out;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[256] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        close(fd);
        fd = -1;
        if (e == EWOULDBLOCK)
            st = slm_fail(SLM_E_IO,
                          "%s is in use by another training run (%s holds the lock %s); two "
                          "runs must not write one run directory: wait for it to finish, or "
                          "give another --out",
                          dir, holder[0] ? holder : "a process that has not written its pid yet",
                          lp);
        else
            st = slm_fail(SLM_E_IO, "%s: cannot lock: %s", lp, strerror(e));
        goto out;
    }
    char host[256] = "?";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    char txt[400];
    int len = snprintf(txt, sizeof txt, "pid %d on host %s\n", (int)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, txt, (size_t)len, 0) != len)
        slm_warn("%s: cannot record the holder's pid: %s", lp, strerror(errno));
out:
    free(lp);
    *fd_out = fd;
    return st;
}

slm_status slm_rundir_prepare(const slm_train_opts *o, slm_rundir **out) {
    *out = NULL;
    const char *dir = o->out_dir;
    if (o->train_from_scratch && o->resume)
        return slm_fail(SLM_E_ARG, "--train-from-scratch and --resume exclude each other");
    if (!slm_is_dir(dir) && (slm_is_file(dir) || access(dir, F_OK) == 0))
        return slm_fail(SLM_E_ARG, "--out %s exists and is not a directory", dir);
    if (slm_is_dir(dir) && !dir_is_empty(dir) && !slm_rundir_is_run_dir(dir))
        return slm_fail(SLM_E_ARG,
                        "--out %s: the directory is not empty and is not a shardlm run "
                        "directory (it has no %s, no metrics.jsonl starting with a shardlm "
                        "start event, no checkpoints/ holding latest or step_N); training "
                        "would overwrite its files (config.json, tokenizer.json); "
                        "give a new or empty directory",
                        dir, SLM_RUNDIR_LOCK);
    slm_status st = slm_mkdir_p(dir);
    if (st) return st;
    slm_rundir *rd = slm_xcalloc(1, sizeof *rd);
    st = take_lock(dir, &rd->lock_fd);
    if (st) {
        slm_rundir_close(rd);
        return st;
    }
    *out = rd;
    return SLM_OK;
}

char *slm_train_find_tokenizer(const char *dir) {
    static const char *names[] = {"tokenizer.json", "tokenizer.model"};
    for (int i = 0; i < 2; i++) {
        char *p = slm_path_join(dir, names[i]);
        if (slm_is_file(p)) return p;
        free(p);
    }
    return NULL;
}

slm_status slm_train_check_dir_tokenizer(const char *dir, const slm_dataset *ds, const char *what,
                                         const char *hint) {
    char *tp = slm_train_find_tokenizer(dir);
    if (!tp) return SLM_OK;
    uint64_t h = 0;
    slm_status st = slm_file_xxh64(tp, &h);
    if (!st && h != ds->tokenizer_xxh64) {
        char a[17], b[17];
        slm_hex64(h, a);
        slm_hex64(ds->tokenizer_xxh64, b);
        st = slm_fail(SLM_E_FORMAT,
                      "%s %s has tokenizer %s (xxh64 %s), but dataset %s was prepared with "
                      "%s (xxh64 %s in its manifest.json): the token ids would mean other text; "
                      "%s",
                      what, dir, tp, a, ds->dir, ds->tokenizer_file, b, hint);
    }
    free(tp);
    return st;
}

slm_status slm_train_check_ckpt_tokenizer(bool has_tokenizer, uint64_t xxh64, const char *ckpt_dir,
                                          const slm_dataset *ds) {
    if (!has_tokenizer || xxh64 == ds->tokenizer_xxh64) return SLM_OK;
    char a[17], b[17];
    slm_hex64(xxh64, a);
    slm_hex64(ds->tokenizer_xxh64, b);
    return slm_fail(SLM_E_FORMAT,
                    "checkpoint %s was trained with a tokenizer of xxh64 %s, but dataset %s was "
                    "prepared with %s (xxh64 %s): the token ids would mean other text; resume "
                    "on data prepared with the run's tokenizer, or start a new run (another "
                    "--out)",
                    ckpt_dir, a, ds->dir, ds->tokenizer_file, b);
}

slm_status slm_train_check_resume_tokenizer(const char *run_dir, const char *resume_path,
                                            const slm_dataset *ds) {
    slm_ckpt *c = NULL;
    slm_status st = slm_ckpt_open(resume_path, &c);
    if (st) return slm_fail_wrap(st, "--resume %s", resume_path);
    const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
    st = slm_train_check_ckpt_tokenizer(M->has_tokenizer, M->tokenizer_xxh64, slm_ckpt_dir(c), ds);
    slm_ckpt_free(c);
    if (!st)
        st = slm_train_check_dir_tokenizer(
            run_dir, ds, "run directory",
            "resume on data prepared with the run's tokenizer, or start a new run (another "
            "--out); the run's checkpoints would otherwise export with the wrong tokenizer");
    return st;
}
