// The process tree in /proc: a process's state and this process's live descendants (orphans of
// the job are re-parented here: the launcher is a child subreaper).
#include "launch/launch_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int proc_stat(long pid, long *ppid, char *state) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    if (!rp || sscanf(rp + 1, " %c %ld", state, ppid) != 2) return -1;
    return 0;
}

// Live (non-zombie) descendants of this process into pids[cap]; returns the count.
int proc_descendants(long *pids, int cap) {
    enum { SCAN = 65536 };
    long *all = malloc(sizeof(long) * SCAN * 2);
    if (!all) return 0;
    int n_all = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) && n_all < SCAN) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        long pid = atol(e->d_name), pp;
        char stc;
        if (proc_stat(pid, &pp, &stc) != 0 || stc == 'Z') continue;
        all[2 * n_all] = pid, all[2 * n_all + 1] = pp, n_all++;
    }
    if (d) closedir(d);
    int n = 0;
    long self = (long)getpid();
    // breadth first from self
    long frontier_start = 0;
    for (int i = 0; i < n_all && n < cap; i++)
        if (all[2 * i + 1] == self) pids[n++] = all[2 * i];
    while (frontier_start < n) {
        long parent = pids[frontier_start++];
        for (int i = 0; i < n_all && n < cap; i++)
            if (all[2 * i + 1] == parent) pids[n++] = all[2 * i];
    }
    free(all);
    return n;
}
