// Evidence of a failure beyond mpirun's output: ranks found dead or stopped in /proc, and the
// flight recorder's verdict (`shardlm flight RUN_DIR`).
#include "launch/launch_internal.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// `shardlm flight RUN_DIR`'s verdict (its first lines), when that command exists.
void flight_verdict(run *r, char *out, size_t cap) {
    out[0] = 0;
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) dup2(nul, 2), close(nul);
        close(fds[0]), close(fds[1]);
        execl(r->o->exe, r->o->exe, "flight", r->run_dir, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    double t0 = wall_now();
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    int st = 0;
    bool done = false;
    while (wall_now() - t0 < 20) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            ssize_t n = read(fds[0], out + len, cap - 1 - len);
            if (n > 0) len += (size_t)n;
            if (n == 0) break;
        }
        if (len >= cap - 1) break;
    }
    close(fds[0]);
    for (int i = 0; i < 100 && !done; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            done = true;
        else
            sleep_s(0.05);
    }
    if (!done) kill(pid, SIGKILL), waitpid(pid, &st, 0);
    out[len] = 0;
    // 0: a rank named; 3: every member entered (no culprit); 1 (no or bad dumps), 2: nothing
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 3)) out[0] = 0;
    while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == ' '))
        out[--len] = 0;
}

// The culprit of a hang from /proc: a rank of the job found stopped (state T).
int stopped_rank(const hb_state *h, long *pid_out) {
    long pids[4096];
    int n = proc_descendants(pids, 4096);
    for (int rk = 0; rk < h->world; rk++) {
        long pid = h->last[rk].pid;
        if (h->last[rk].step < 0 || pid <= 0) continue;
        bool ours = false;
        for (int i = 0; i < n; i++)
            ours |= pids[i] == pid;
        long pp;
        char st;
        if (ours && proc_stat(pid, &pp, &st) == 0 && (st == 'T' || st == 't')) {
            *pid_out = pid;
            return rk;
        }
    }
    return -1;
}

// A rank of this host whose heartbeat says it runs (start / train) but whose process is gone
// or a zombie: a crash seen before mpirun reports it. -1 when none.
int dead_rank(const hb_state *h, const char *myhost, long *pid_out, int *n_dead) {
    int first = -1;
    *n_dead = 0;
    for (int rk = 0; rk < h->world; rk++) {
        const slm_heartbeat *b = &h->last[rk];
        if (b->step < 0 || b->pid <= 0 || strcmp(b->host, myhost) != 0) continue;
        if (strcmp(b->phase, "start") != 0 && strcmp(b->phase, "train") != 0) continue;
        long pp;
        char st;
        if (proc_stat(b->pid, &pp, &st) != 0 || st == 'Z' || st == 'X') {
            if (first < 0) first = rk, *pid_out = b->pid;
            ++*n_dead;
        }
    }
    return first;
}
