// The process's stop flag, set by SIGINT / SIGTERM (train and prep poll it).
#include "base.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop = 0, g_signal = 0;
static const char *volatile g_first_msg = NULL, *volatile g_second_msg = NULL;
static struct sigaction g_old_int, g_old_term;
static bool g_saved = false;

static void write_msg(const char *m) {
    ssize_t w = write(STDERR_FILENO, m, strlen(m)); // strlen is async-signal-safe
    (void)w;
}

static void on_signal(int sig) {
    if (sig == SIGINT && g_stop && g_second_msg) {
        write_msg(g_second_msg);
        _exit(1);
    }
    if (sig == SIGINT && !g_stop && g_first_msg) write_msg(g_first_msg);
    if (!g_signal) g_signal = sig;
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
    g_saved = true;
}

void slm_stop_restore(void) {
    if (!g_saved) return;
    sigaction(SIGINT, &g_old_int, NULL);
    sigaction(SIGTERM, &g_old_term, NULL);
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

void slm_stop_reset(void) {
    g_stop = 0;
    g_signal = 0;
}
