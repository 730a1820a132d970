// The job's stderr: relayed line by line as it comes, and read for what the launcher decides
// on: the first errors, the rank mpirun reports dead, Open MPI's help banners, the transport.
#include "launch/launch_internal.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// The MPI start-up failed with no rank reporting anything: the launcher (mpirun / srun) could
// not be executed, or
// it exited with a help banner (refusing to run as root without Open MPI's variables, a bad
// MCA setting, too few slots) while no rank printed an error (nor a "terminated by" line) and it
// reported no rank's exit.
bool launcher_refused(const job *j) {
    if (!j->exited || j->reason[0] || j->signal_error[0]) return false; // a rank ran
    if (!strncmp(j->first_error, "error: launch: cannot execute", 29)) return true;
    return !j->first_error[0] && j->banner[0] && WIFEXITED(j->status) && WEXITSTATUS(j->status);
}

static void note_transport(job *j, const char *line) {
    // "[host:pid] select: component ob1 selected"
    const char *s = strstr(line, "] select: component ");
    if (s && strstr(s, " selected")) {
        char name[64] = "";
        if (sscanf(s + 20, "%63s", name) == 1 && !strstr(j->pml, name)) {
            size_t l = strlen(j->pml);
            snprintf(j->pml + l, sizeof j->pml - l, "%s%s", l ? "," : "", name);
        }
        return;
    }
    // "[host:pid] mca: bml: Using vader btl for send to [[J,1],R] on node H"
    s = strstr(line, "] mca: bml: Using ");
    if (!s || line[0] != '[') return;
    char src[128] = "", btl[32] = "", dst[128] = "";
    const char *colon = strchr(line + 1, ':');
    if (!colon || colon - line - 1 >= (long)sizeof src) return;
    memcpy(src, line + 1, (size_t)(colon - line - 1));
    if (sscanf(s + 18, "%31s", btl) != 1) return;
    const char *on = strstr(s, " on node ");
    if (!on || sscanf(on + 9, "%127s", dst) != 1) return;
    if (!strcmp(btl, "self")) return;
    char item[300];
    snprintf(item, sizeof item, "%s %s->%s", btl, src, dst);
    if (strstr(j->btl, item)) return;
    size_t l = strlen(j->btl);
    if (l + strlen(item) + 3 < sizeof j->btl)
        snprintf(j->btl + l, sizeof j->btl - l, "%s%s", l ? ", " : "", item);
}

static bool is_verbose_mca(const char *line) {
    return line[0] == '[' && (strstr(line, "] mca: ") || strstr(line, "] select: ") ||
                              strstr(line, "] check:select: ") || strstr(line, "] selected ") ||
                              strstr(line, "] btl: ") || strstr(line, "] pml: "));
}

// A banner ends: a warning is set aside (the first one) and the search goes on, else done.
static void banner_close(job *j) {
    if (!strncmp(j->banner, "WARNING", 7)) {
        if (!j->warn_banner[0]) snprintf(j->warn_banner, sizeof j->warn_banner, "%s", j->banner);
        j->banner[0] = 0;
        j->banner_state = 0;
    } else
        j->banner_state = 2;
}

// Open MPI's banner for the failure: the first that is not a warning, else the first warning.
const char *job_banner(const job *j) {
    return j->banner[0] ? j->banner : j->warn_banner;
}

// Collects the first Open MPI help banner (job.banner): a line of dashes opens it, the next
// closes it; blank lines are skipped, runs of spaces kept as one; cut at the buffer's size.
static void banner_line(job *j, const char *line) {
    if (j->banner_state == 2) return;
    size_t d = strspn(line, "-");
    if (d >= 20 && line[d] == 0) {
        if (j->banner_state == 0)
            j->banner_state = 1;
        else
            banner_close(j);
        return;
    }
    if (j->banner_state != 1) return;
    size_t len = strlen(j->banner);
    if (len > 0 && line[0] && len + 4 < sizeof j->banner) j->banner[len++] = ' ';
    for (const char *c = line; *c && len + 4 < sizeof j->banner; c++) {
        bool space = *c == ' ' || *c == '\t';
        if (space && (len == 0 || j->banner[len - 1] == ' ')) continue;
        j->banner[len++] = space ? ' ' : *c;
    }
    if (len + 4 >= sizeof j->banner) {
        memcpy(j->banner + sizeof j->banner - 4, "...", 4);
        banner_close(j);
        return;
    }
    while (len > 0 && j->banner[len - 1] == ' ')
        len--;
    j->banner[len] = 0;
}

// A fatal line of the trainer (job.fatal_error): whose error it is. "shardlm[rank R/W] error:"
// (or "shardlm[rank R/W on HOST, forwarded] error:") printed it; "rank N failed: " in the
// message is slm_dist_agree's: rank N's error, which every rank stops on.
static void note_fatal(job *j, const char *line, const char *msg) {
    int who = -1;
    bool agreed = false;
    for (const char *f = strstr(msg, "rank "); f && who < 0; f = strstr(f + 5, "rank ")) {
        int rk = -1, used = 0;
        if (sscanf(f, "rank %d failed: %n", &rk, &used) == 1 && used > 0 && rk >= 0)
            who = rk, agreed = true;
    }
    const char *pre = strstr(line, "shardlm[rank ");
    if (who < 0 && pre && pre < msg) who = atoi(pre + 13);
    if (!j->fatal_error[0]) snprintf(j->fatal_error, sizeof j->fatal_error, "%s", msg);
    if (who >= 0 && (j->err_rank < 0 || (agreed && !j->err_agreed)))
        j->err_rank = who, j->err_agreed = agreed;
}

static void job_line(job *j, char *line) {
    if (is_verbose_mca(line)) {
        note_transport(j, line);
        return;
    }
    size_t n = strlen(line);
    line[n] = '\n';
    if (write(2, line, n + 1) < 0) { // relayed as it came
    }
    line[n] = 0;
    const char *e = strstr(line, " error: ");
    if (!e && !strncmp(line, "error: ", 7)) e = line - 1;
    if (e && (!strncmp(e + 1, "error: terminated by SIG", 24) ||
              !strncmp(e + 1, "error: interrupted by SIG", 25))) {
        if (!j->signal_error[0]) snprintf(j->signal_error, sizeof j->signal_error, "%s", e + 1);
    } else if (e && !strstr(e, "(training continues")) {
        if (!j->first_error[0]) snprintf(j->first_error, sizeof j->first_error, "%s", e + 1);
        if (!strncmp(e + 1, "error: train: ", 14)) note_fatal(j, line, e + 1);
    }
    if (strstr(line, "timed out after") && strstr(line, "collective")) j->coll_timeout = true;
    banner_line(j, line);
    const char *rs = strstr(line, "resumed from ");
    if (rs && (rs = strstr(rs, "(step ")) && j->resumed_step < 0) j->resumed_step = atoll(rs + 6);
    long r = 0, pid = 0;
    int sig = 0;
    char host[128] = "", signame[64] = "";
    const char *m = strstr(line, "noticed that process rank ");
    if (m && sscanf(m,
                    "noticed that process rank %ld with PID %ld on node %127s exited on signal "
                    "%d (%63[^)])",
                    &r, &pid, host, &sig, signame) >= 4) {
        j->culprit_rank = (int)r;
        j->culprit_signal = true;
        if (!j->evidence_time) j->evidence_time = wall_now();
        snprintf(j->culprit_host, sizeof j->culprit_host, "%s", host);
        snprintf(j->reason, sizeof j->reason, "rank %ld on %s exited on signal %d (%s)", r, host,
                 sig, signame);
        return;
    }
    m = strstr(line, "Process name: [[");
    if (m) {
        const char *c = strstr(m, "],");
        if (c) j->pending_rank = atoi(c + 2);
        return;
    }
    m = strstr(line, "Exit code:");
    if (m && j->pending_rank >= 0 && !j->reason[0]) {
        j->culprit_rank = j->pending_rank;
        if (!j->evidence_time) j->evidence_time = wall_now();
        snprintf(j->reason, sizeof j->reason, "rank %d exited with status %d", j->pending_rank,
                 atoi(m + 10));
        return;
    }
    m = strstr(line, "MPI_ABORT was invoked on rank ");
    if (m && !j->reason[0])
        snprintf(j->reason, sizeof j->reason, "rank %d called MPI_Abort%s", atoi(m + 30),
                 j->coll_timeout ? " after a collective timeout" : "");
}

void job_drain(job *j, int timeout_ms) {
    if (j->err_fd < 0) return;
    struct pollfd p = {.fd = j->err_fd, .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    if (rc <= 0) return;
    for (;;) {
        ssize_t n = read(j->err_fd, j->part + j->part_len, sizeof j->part - 1 - j->part_len);
        if (n == 0) {
            if (j->part_len) j->part[j->part_len] = 0, job_line(j, j->part);
            j->part_len = 0;
            close(j->err_fd);
            j->err_fd = -1;
            return;
        }
        if (n < 0) return; // EAGAIN: nothing more now
        j->part_len += (size_t)n;
        char *start = j->part, *nl;
        while ((nl = memchr(start, '\n', j->part_len - (size_t)(start - j->part)))) {
            *nl = 0;
            job_line(j, start);
            start = nl + 1;
        }
        size_t rest = j->part_len - (size_t)(start - j->part);
        memmove(j->part, start, rest);
        j->part_len = rest;
        if (j->part_len == sizeof j->part - 1) { // an overlong line: pass it on in pieces
            j->part[j->part_len] = 0;
            job_line(j, j->part);
            j->part_len = 0;
        }
    }
}
