// The run directory as training opens it: refusing folders that are not run directories, the
// exclusive lock, what to do with the checkpoints an earlier run left (resume, refuse, or move
// them aside), and the tokenizer checks of a resume / --init-from-hf. Contract in
// train_internal.h.
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
    int lock_fd;         // RUN_DIR/run.lock, flock(LOCK_EX) held until slm_rundir_close
    int64_t resume_step; // --resume auto: the step picked (-1: none)
    bool resume_remote;  // ... from --ckpt-uri (newer than every local one)
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

// Renames DIR/checkpoints to DIR/checkpoints.replaced-YYYYmmdd-HHMMSS and moves the earlier
// run's metrics.jsonl, config.json and tokenizer copy into it (nothing is deleted).
static slm_status move_checkpoints_aside(const char *dir, const char *root, int n) {
    char stamp[64];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(stamp, sizeof stamp, "checkpoints.replaced-%Y%m%d-%H%M%S", localtime_r(&now, &tmv));
    char *dst = slm_path_join(dir, stamp);
    for (int k = 1; slm_is_dir(dst) || slm_is_file(dst); k++) {
        free(dst);
        char alt[96];
        snprintf(alt, sizeof alt, "%s.%d", stamp, k);
        dst = slm_path_join(dir, alt);
    }
    slm_status st = SLM_OK;
    if (rename(root, dst) != 0) {
        st = slm_fail(SLM_E_IO, "--train-from-scratch: cannot move %s to %s: %s", root, dst,
                      strerror(errno));
    } else {
        // The files the new run rewrites go with the checkpoints they describe, so the earlier
        // run's history, config and tokenizer stay together (nothing is overwritten).
        static const char *const keep[] = {"metrics.jsonl", "config.json", "tokenizer.json",
                                           "tokenizer.model"};
        for (size_t i = 0; !st && i < sizeof keep / sizeof *keep; i++) {
            char *src = slm_path_join(dir, keep[i]), *to = slm_path_join(dst, keep[i]);
            if (slm_is_file(src) && rename(src, to) != 0)
                st = slm_fail(SLM_E_IO, "--train-from-scratch: cannot move %s to %s: %s", src, to,
                              strerror(errno));
            free(src);
            free(to);
        }
        if (!st)
            slm_warn("--train-from-scratch: the earlier run's %d checkpoint%s (with its "
                     "metrics.jsonl, config.json and tokenizer) moved from %s to %s (not "
                     "deleted); training starts from a seeded init",
                     n, n == 1 ? "" : "s", root, dst);
    }
    free(dst);
    return st;
}

slm_status slm_rundir_prepare(const slm_train_opts *o, slm_rundir **out, char **resume_path) {
    *out = NULL;
    *resume_path = NULL;
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
    rd->resume_step = -1;
    st = take_lock(dir, &rd->lock_fd);
    if (st) {
        slm_rundir_close(rd);
        return st;
    }
    char *root = slm_path_join(dir, "checkpoints");
    int64_t *steps = NULL;
    int n = slm_ckpt_list_steps(root, &steps); // an empty checkpoints/ holds none
    int64_t newest = n ? steps[n - 1] : -1;
    free(steps);
    // A save every rank wrote but nobody committed is a checkpoint too (--resume auto commits
    // it): never trained over from scratch, nor swept by this run's first commit.
    int64_t pending = o->resume ? -1 : slm_ckpt_find_pending(root);
    if (o->train_from_scratch) {
        if (n > 0 || pending >= 0) st = move_checkpoints_aside(dir, root, n + (pending >= 0));
    } else if (!o->resume) {
        if (n > 0 || pending >= 0)
            st = slm_fail(SLM_E_ARG,
                          "%s holds %d checkpoint%s of an earlier run (the newest: step "
                          "%" PRId64 "%s); continue it with --resume auto, or train from a "
                          "seeded init with --train-from-scratch (moves them to "
                          "checkpoints.replaced-DATE; nothing is deleted), or give another --out",
                          root, n + (pending >= 0), n + (pending >= 0) == 1 ? "" : "s",
                          pending >= 0 ? pending : newest,
                          pending >= 0 ? ", a save every rank wrote before the job ended, not "
                                         "yet committed: --resume auto commits it"
                                       : "");
    } else if (!strcmp(o->resume, "auto")) {
        char resume_hint[1024];
        snprintf(resume_hint, sizeof resume_hint,
                 "a run directory holding checkpoints is never trained from scratch silently: "
                 "resume one explicitly with --resume %s/step_N, or move them aside with "
                 "--train-from-scratch",
                 root);
        // A save every rank had written but the job did not live to commit (a rank hung or died
        // before the commit barrier, the job torn down) is committed first: it is the newest.
        int64_t rec = -1;
        st = slm_ckpt_recover_pending(root, o->ckpt_keep, &rec);
        if (!st)
            st = slm_ckpt_pick_resume(root, o->verify_on_resume, resume_path, &rd->resume_step);
        char *local_bad = NULL; // none of the local checkpoints verifies: a remote one may
        if (st == SLM_E_FORMAT && o->ckpt_uri) {
            local_bad = slm_xstrdup(slm_errmsg());
            st = SLM_OK;
        }
        if (!st && rd->resume_step < 0 && !local_bad && (rec = slm_ckpt_find_pending(root)) >= 0)
            st = slm_fail(SLM_E_IO,
                          "%s/step_%08" PRId64 ".tmp holds a save every rank wrote that could "
                          "not be committed (see the warning above) and there is no committed "
                          "checkpoint: training from step 0 would sweep it away",
                          root, rec);
        if (!st && rd->resume_step >= 0) // `latest` names what is resumed, even if this run
            st = slm_ckpt_repair_latest(root, rd->resume_step); // fails before its first save
        else if (st)
            st = slm_fail_wrap(st, "--resume auto (%s)", resume_hint);
        if (!st && o->ckpt_uri) { // the newest that verifies of local and remote (same rules)
            int64_t rs = -1;
            char *ru = NULL;
            st = slm_ckpt_remote_pick(o->ckpt_uri, rd->resume_step, o->verify_on_resume, &rs, &ru);
            if (st) {
                st = slm_fail_wrap(st, "--resume auto with --ckpt-uri %s", o->ckpt_uri);
            } else if (rs > rd->resume_step) {
                slm_info("--resume auto: %s (step %" PRId64 ") %s; resuming from S3", ru, rs,
                         rd->resume_step >= 0 ? "is newer than the newest local checkpoint"
                         : local_bad          ? "verifies, no local checkpoint does"
                                              : "found, no local checkpoint");
                free(*resume_path);
                *resume_path = ru;
                rd->resume_step = rs;
                rd->resume_remote = true;
            } else {
                free(ru);
            }
            if (!st && local_bad && !rd->resume_remote)
                st = slm_fail(SLM_E_FORMAT, "--resume auto (%s): %s; and --ckpt-uri %s holds none",
                              resume_hint, local_bad, o->ckpt_uri);
        }
        free(local_bad);
    } else {
        *resume_path = slm_xstrdup(o->resume);
        int64_t pend = slm_ckpt_find_pending(root);
        if (pend >= 0)
            slm_warn("--resume %s: %s/step_%08" PRId64 ".tmp holds a save of step %" PRId64
                     " every rank wrote but the job did not commit; --resume auto would commit and "
                     "resume it; this run's first checkpoint removes it",
                     o->resume, root, pend, pend);
        if (o->verify_on_resume) {
            slm_ckpt *c = NULL;
            st = slm_ckpt_open(o->resume, &c);
            if (!st) st = slm_ckpt_verify(c);
            slm_ckpt_free(c);
            if (st) st = slm_fail_wrap(st, "--verify-on-resume: --resume %s", o->resume);
        }
    }
    free(root);
    if (st) {
        free(*resume_path);
        *resume_path = NULL;
        slm_rundir_close(rd);
        return st;
    }
    *out = rd;
    return SLM_OK;
}

slm_status slm_rundir_share_resume(const slm_train_opts *o, const slm_rundir *rd, int rank,
                                   char **resume_path) {
    if (!o->resume) return SLM_OK;
    bool is_auto = !strcmp(o->resume, "auto");
    int64_t pick[2] = {rank == 0 && rd ? rd->resume_step : -1,
                       rank == 0 && rd ? rd->resume_remote : 0};
    if (is_auto) slm_dist_bcast(pick, 2, SLM_DTYPE_I64, 0, "--resume auto step");
    int64_t step = pick[0];
    if (rank == 0) return SLM_OK;
    free(*resume_path);
    *resume_path = NULL;
    if (!is_auto) {
        *resume_path = slm_xstrdup(o->resume);
    } else if (step >= 0 && pick[1]) {
        slm_buf b = {0};
        size_t n = strlen(o->ckpt_uri);
        while (n > 5 && o->ckpt_uri[n - 1] == '/')
            n--;
        slm_buf_appendf(&b, "%.*s/checkpoints/step_%08" PRId64, (int)n, o->ckpt_uri, step);
        *resume_path = b.data;
    } else if (step >= 0) {
        char *root = slm_path_join(o->out_dir, "checkpoints");
        *resume_path = slm_ckpt_step_dir(root, step, false);
        free(root);
    }
    return SLM_OK;
}

// DIR's tokenizer.json / tokenizer.model (caller frees), NULL if it has none.
static char *find_tokenizer(const char *dir) {
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
    char *tp = find_tokenizer(dir);
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
