// Starting and stopping a job (the health check's or an attempt's mpirun / srun): its own
// process group, the teardown of every process it left, reaping.
#include "launch/launch_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

// Reaps every exited child (the job's launcher and re-parented orphans).
void job_reap(job *j) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        if (j && p == j->pid) j->exited = true, j->status = st, j->exit_time = wall_now();
    }
}

int job_start(job *j, char *const *argv, const char *const *env_add) {
    memset(j, 0, sizeof *j);
    j->culprit_rank = -1;
    j->err_rank = -1;
    j->pending_rank = -1;
    j->resumed_step = -1;
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fds[1], 2);
        close(fds[0]), close(fds[1]);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0), close(nul);
        signal(SIGPIPE, SIG_DFL);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGTERM, &sa, NULL), sigaction(SIGUSR1, &sa, NULL), sigaction(SIGINT, &sa, NULL);
        // The job dies with its supervisor (a kill -9 or OOM kill of the launcher): SIGTERM to
        // mpirun / srun, which forwards it to every rank (they checkpoint and exit 75, as on a
        // preemption, and a relaunch continues; Open MPI's mpirun also ends stopped ranks).
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) raise(SIGTERM); // the launcher died before the line above
        for (int i = 0; env_add && env_add[i]; i += 2)
            setenv(env_add[i], env_add[i + 1], 1);
        execvp(argv[0], argv);
        // Only async-signal-safe calls after fork: the launcher's path and why, in pieces.
        int err = errno;
        const char *why = err == ENOENT    ? ": no such file (or not on PATH)\n"
                          : err == EACCES  ? ": permission denied (not executable)\n"
                          : err == ENOEXEC ? ": not an executable format\n"
                                           : ": exec failed\n";
        static const char msg[] = "shardlm error: launch: cannot execute the MPI launcher ";
        ssize_t w = write(2, msg, sizeof msg - 1);
        if (w >= 0) w = write(2, argv[0], strlen(argv[0]));
        if (w >= 0) w = write(2, why, strlen(why));
        _exit(w < 0 ? 126 : 127);
    }
    setpgid(pid, pid);
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    j->pid = pid;
    j->err_fd = fds[0];
    return 0;
}

// SIGTERM to the job's process group (mpirun forwards it to its ranks), SIGKILL to every
// remaining process of the job after `grace` seconds; returns once none is left (bounded).
void job_terminate(job *j, double grace) {
    if (!j->exited) kill(-j->pid, SIGTERM);
    double t0 = wall_now();
    long pids[4096];
    while (wall_now() - t0 < grace) {
        job_drain(j, 50);
        job_reap(j);
        if (j->exited && proc_descendants(pids, 4096) == 0) break;
    }
    for (int round = 0; round < 100; round++) {
        int n = proc_descendants(pids, 4096);
        if (!j->exited) kill(-j->pid, SIGKILL);
        for (int i = 0; i < n; i++)
            kill((pid_t)pids[i], SIGKILL);
        job_drain(j, 50);
        job_reap(j);
        if (j->exited && n == 0) break;
    }
    while (j->err_fd >= 0)
        job_drain(j, 100);
}

// After the job's launcher exited by itself: its ranks are gone too, or are killed now (a rank
// that outlived mpirun, e.g. a stopped one, is re-parented here).
void job_sweep(job *j) {
    long pids[4096];
    double t0 = wall_now();
    while (j->err_fd >= 0 && wall_now() - t0 < 5)
        job_drain(j, 100);
    if (proc_descendants(pids, 4096) > 0) job_terminate(j, 2.0);
    if (j->err_fd >= 0) close(j->err_fd), j->err_fd = -1;
}
