// Progress of long work on stderr (base.h "Progress"): one updating line on a terminal, plain
// lines at every tenth of the work (and every 30 s) otherwise.
#include "base.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool g_enabled = false;
static double g_after_s = -1; // SHARDLM_PROGRESS_AFTER, read once
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static slm_progress *g_active = NULL; // the bar whose line is on the terminal now

void slm_progress_enable(bool on) {
    g_enabled = on;
    // A bar's line is drawn only after progress was enabled: from then on a log line erases it.
    if (on) slm_log_set_clear_line_(slm_progress_clear_line);
}

bool slm_progress_enabled(void) {
    return g_enabled;
}

static double after_s(void) {
    if (g_after_s < 0) {
        const char *e = getenv("SHARDLM_PROGRESS_AFTER");
        char *end = NULL;
        double v = e ? strtod(e, &end) : NAN;
        g_after_s = e && end != e && !*end && v >= 0 && v < 1e6 ? v : 2.0;
    }
    return g_after_s;
}

void slm_fmt_eta(double s, char out[16]) {
    if (!isfinite(s) || s < 0 || s > 360000 * 24.0) {
        snprintf(out, 16, "--:--");
        return;
    }
    int t = (int)(s + 0.5); // < 8.64e6 s: at most 4 digits of hours
    if (t >= 3600)
        snprintf(out, 16, "%d:%02d:%02d", t / 3600 % 10000, t / 60 % 60, t % 60);
    else
        snprintf(out, 16, "%d:%02d", t / 60 % 60, t % 60);
}

void slm_progress_begin(slm_progress *p, const char *what, double done0, double total) {
    memset(p, 0, sizeof *p);
    snprintf(p->what, sizeof p->what, "%s", what);
    p->total = total;
    p->done0 = done0;
    p->on = g_enabled;
    p->tty = isatty(2) == 1;
    p->t0 = p->last = slm_time_s();
    p->next_tenth = 1;
}

// Erases the line of the active bar (called with g_mu held).
static void clear_locked(void) {
    if (g_active && g_active->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        g_active->shown = false;
    }
}

void slm_progress_clear_line(void) {
    pthread_mutex_lock(&g_mu);
    clear_locked();
    pthread_mutex_unlock(&g_mu);
}

// Draws p's line; `fmt` (NULL: none) with `ap` formats the text after the percentage.
static void render(slm_progress *p, double done, const char *fmt, va_list ap, bool final) {
    char extra[256] = "";
    if (fmt) vsnprintf(extra, sizeof extra, fmt, ap);
    double now = slm_time_s(), dt = now - p->t0;
    double frac = p->total > 0 ? done / p->total : NAN;
    if (frac > 1) frac = 1;
    double rate = dt > 0 && done > p->done0 ? (done - p->done0) / dt : 0;
    char eta[16];
    slm_fmt_eta(p->total > 0 && rate > 0 ? (p->total - done) / rate : -1, eta);
    char line[512];
    int n;
    if (p->tty) {
        char bar[24];
        int width = 20, fill = isfinite(frac) ? (int)(width * frac + 1e-9) : 0;
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        n = snprintf(line, sizeof line, "\r\033[K%s [%s] %5.1f%% %s ETA %s", p->what, bar,
                     isfinite(frac) ? 100 * frac : 0.0, extra, final ? "0:00" : eta);
    } else {
        n = snprintf(line, sizeof line, "%s: %.0f%%, %s, ETA %s\n", p->what,
                     isfinite(frac) ? 100 * frac : 0.0, extra, final ? "0:00" : eta);
    }
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    pthread_mutex_lock(&g_mu);
    if (g_active && g_active != p) clear_locked();
    fwrite(line, 1, (size_t)n, stderr);
    if (p->tty && final) fputs("\n", stderr);
    fflush(stderr);
    p->shown = p->tty && !final;
    g_active = p->shown ? p : NULL;
    pthread_mutex_unlock(&g_mu);
    p->last = now;
    p->printed = true;
}

void slm_progress_update(slm_progress *p, double done, const char *fmt, ...) {
    if (!p->on) return;
    double now = slm_time_s();
    if (now - p->t0 < after_s()) return; // short work shows nothing
    double frac = p->total > 0 ? done / p->total : 0;
    bool due;
    if (!p->printed) // the first line: tenths already passed do not count
        while (frac * 10 >= p->next_tenth && p->next_tenth < 10)
            p->next_tenth++;
    if (p->tty) {
        due = now - p->last >= 0.2 || !p->printed;
    } else {
        due = now - p->last >= 30 || !p->printed || frac * 10 >= p->next_tenth;
        while (frac * 10 >= p->next_tenth)
            p->next_tenth++;
    }
    if (!due) return;
    va_list ap;
    va_start(ap, fmt);
    render(p, done, fmt, ap, false);
    va_end(ap);
}

void slm_progress_end(slm_progress *p, double done, const char *fmt, ...) {
    if (!p->on) return;
    if (!p->printed && slm_time_s() - p->t0 < after_s()) return; // short work shows nothing
    // A plain 100% line was printed already; a terminal line that other output erased is not
    // drawn again.
    if ((!p->tty && p->next_tenth > 10) || (p->tty && !p->shown)) {
        p->on = false;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    render(p, done, fmt, ap, true);
    va_end(ap);
    p->on = false;
}

void slm_progress_abandon(slm_progress *p) {
    pthread_mutex_lock(&g_mu);
    if (g_active == p) {
        clear_locked();
        g_active = NULL;
    }
    pthread_mutex_unlock(&g_mu);
    p->on = false;
}
