// The process's stop flag, set by SIGINT / SIGTERM / SIGUSR1 (train and prep poll it).
#include "base.h"

#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop = 0, g_signal = 0, g_preempt = 0;
static volatile double g_stop_time = 0; // CLOCK_MONOTONIC seconds of the first signal
static const char *volatile g_first_msg = NULL, *volatile g_second_msg = NULL;
static struct sigaction g_old_int, g_old_term, g_old_usr1;
static bool g_saved = false;

static void write_msg(const char *m) {
    ssize_t w = write(STDERR_FILENO, m, strlen(m)); // strlen is async-signal-safe
    (void)w;
}

static void on_signal(int sig) {
    if (sig == SIGINT && g_stop && g_second_msg) {
        write_msg(g_second_msg);
        slm_tmp_remove_tracked();
        _exit(1);
    }
    if (sig == SIGINT && !g_stop && g_first_msg) write_msg(g_first_msg);
    if (!g_signal) {
        struct timespec ts; // clock_gettime is async-signal-safe
        clock_gettime(CLOCK_MONOTONIC, &ts);
        g_stop_time = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
        g_signal = sig;
    }
    if (sig == SIGTERM || sig == SIGUSR1) g_preempt = 1;
    g_stop = 1;
}

void slm_stop_install(const char *sigint_msg, const char *second_sigint_msg) {
    g_first_msg = sigint_msg;
    g_second_msg = second_sigint_msg;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
    sigaction(SIGUSR1, &sa, &g_old_usr1);
    g_saved = true;
}

void slm_stop_restore(void) {
    if (!g_saved) return;
    sigaction(SIGINT, &g_old_int, NULL);
    sigaction(SIGTERM, &g_old_term, NULL);
    sigaction(SIGUSR1, &g_old_usr1, NULL);
    g_saved = false;
}

void slm_stop_request(void) {
    g_stop = 1;
}

bool slm_stop_requested(void) {
    return g_stop != 0;
}

int slm_stop_signal(void) {
    return (int)g_signal;
}

bool slm_stop_preempted(void) {
    return g_preempt != 0;
}

double slm_stop_signal_time(void) {
    return g_signal ? g_stop_time : 0;
}

void slm_stop_reset(void) {
    g_stop = 0;
    g_signal = 0;
    g_preempt = 0;
    g_stop_time = 0;
}

// --- temporary paths removed on a signal --------------------------------------------------------
// A slot's path is written while the slot is free and only then marked used, so a handler that
// runs in between sees it free (the path is then left, as without tracking).
static char g_tmp_path[SLM_TMP_TRACK_MAX][4096];
static volatile sig_atomic_t g_tmp_used[SLM_TMP_TRACK_MAX];

int slm_tmp_track(const char *path) {
    size_t n = strlen(path);
    if (n >= sizeof g_tmp_path[0]) return -1;
    for (int i = 0; i < SLM_TMP_TRACK_MAX; i++) {
        if (g_tmp_used[i]) continue;
        memcpy(g_tmp_path[i], path, n + 1);
        g_tmp_used[i] = 1;
        return i;
    }
    return -1;
}

void slm_tmp_untrack(int slot) {
    if (slot >= 0 && slot < SLM_TMP_TRACK_MAX) g_tmp_used[slot] = 0;
}

void slm_tmp_remove_tracked(void) {
    for (int i = 0; i < SLM_TMP_TRACK_MAX; i++)
        if (g_tmp_used[i]) (void)unlink(g_tmp_path[i]); // a directory fails here (EISDIR)
    for (int i = 0; i < SLM_TMP_TRACK_MAX; i++)
        if (g_tmp_used[i]) (void)rmdir(g_tmp_path[i]);
}
