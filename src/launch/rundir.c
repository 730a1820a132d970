// The run directory as the launcher sees it: the run lock, the checkpoints, and the
// directories this launch created (removed again after a start-up failure).
#include "launch/launch_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

// Whether RUN_DIR/checkpoints holds saves the trainer's --train-from-scratch moves aside
// (committed step_N, or a step_N.tmp with its pending.json); *ino: the directory's inode (0: none).
bool scratch_state(const char *run_dir, ino_t *ino) {
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoints", run_dir);
    struct stat sb;
    *ino = stat(path, &sb) == 0 ? sb.st_ino : 0;
    DIR *d = opendir(path);
    if (!d) return false;
    bool had = false;
    struct dirent *e;
    while (!had && (e = readdir(d))) {
        long long s;
        char tail[8] = "";
        int k = sscanf(e->d_name, "step_%lld%7s", &s, tail);
        if (k == 1) had = true;
        if (k == 2 && !strcmp(tail, ".tmp")) {
            char p[8192];
            snprintf(p, sizeof p, "%s/%s/pending.json", path, e->d_name);
            had = access(p, F_OK) == 0;
        }
    }
    closedir(d);
    return had;
}

// Whether a live process holds RUN_DIR/run.lock (the trainer's flock, "pid P on host H" in it:
// train/rundir.c): another training run, or the orphaned job of a launcher that was killed.
// The file is only probed (never created); *holder gets its text.
bool run_lock_held(const char *run_dir, char *holder, size_t cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/run.lock", run_dir);
    holder[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (held) {
        ssize_t n = pread(fd, holder, cap - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
    } else {
        flock(fd, LOCK_UN);
    }
    close(fd);
    return held;
}

// The message for a held run lock (r->message and stderr): nothing is started or charged.
void report_lock_holder(run *r, const char *holder) {
    snprintf(r->message, sizeof r->message,
             "%s is in use by a live training run (%s holds %s/run.lock): nothing started, no "
             "restart counted; wait for it to end or stop it, or give another --out",
             r->run_dir, holder[0] ? holder : "a process that has not written its pid yet",
             r->run_dir);
    slm_error("launch: %s", r->message);
}

int64_t newest_checkpoint_step(const char *run_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoints", run_dir);
    DIR *d = opendir(path);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step_%lld%c", &s, &tail) == 1 && s > best) best = s;
    }
    closedir(d);
    return best;
}

// Cuts path's last component ("a/b/" -> "a"); false when there is none left to cut.
static bool path_up(char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        path[--n] = 0;
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) return false;
    while (slash > path && slash[-1] == '/')
        slash--;
    *slash = 0;
    return true;
}

// out: the highest directory of path (path included) that does not exist ("" when path does).
void first_missing(const char *path, char *out, size_t cap) {
    char cur[4096];
    struct stat sb;
    snprintf(cur, sizeof cur, "%s", path);
    out[0] = 0;
    do {
        if (stat(cur, &sb) == 0) break;
        snprintf(out, cap, "%s", cur);
    } while (path_up(cur));
}

// After a start-up failure (the MPI start-up failed, no rank reported) in a RUN_DIR this
// launch created: its health.json and empty heartbeat/ go, then RUN_DIR and the directories
// above it that the launch made, each only while empty. Returns whether RUN_DIR is gone.
bool remove_made(const run *r) {
    if (!r->startup_failed || !r->made[0]) return false;
    char p[4200], cur[4096];
    snprintf(p, sizeof p, "%s/health.json", r->run_dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/heartbeat", r->run_dir);
    if (!strcmp(p, r->hb_dir)) rmdir(p);
    snprintf(p, sizeof p, "%s/attempts.json", r->run_dir); // only this launch's: RUN_DIR is new
    unlink(p);
    snprintf(cur, sizeof cur, "%s", r->run_dir);
    if (rmdir(cur) != 0) return false;
    while (strcmp(cur, r->made) != 0 && path_up(cur) && rmdir(cur) == 0) {
    }
    return true;
}
