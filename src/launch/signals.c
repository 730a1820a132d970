// The launcher's own signals: recorded by the handler, acted on by the loops.
#include "launch/launch_internal.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_signal;

static void on_signal(int sig) {
    g_signal = sig;
}

void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

const char *sig_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : "?";
}

// The launcher's last signal not yet cleared (0: none).
int sig_pending(void) {
    return g_signal;
}

void sig_clear(void) {
    g_signal = 0;
}
