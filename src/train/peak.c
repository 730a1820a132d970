// The MFU denominator as a property of the machine (issue 20 item 13): the best sgemm rate seen
// for this CPU model and thread count, kept in a small cache file across runs and raised
// whenever a training step runs faster than it (a peak measured on a loaded machine reads low;
// MFU above 100 % is then impossible, not a measurement).
//
// Cache file (docs/training.md "MFU"): DIR/sgemm_peak.tsv, DIR = $SHARDLM_CACHE_DIR (empty: no
// cache), else $XDG_CACHE_HOME/shardlm, else $HOME/.cache/shardlm. One line per key:
// "KEY<TAB>GFLOPS\n", KEY = "CPU model name|threads=N" (/proc/cpuinfo's first "model name",
// tabs and line feeds replaced by spaces). Lines that do not parse are kept as they are and
// ignored. Written atomically (slm_file_write_atomic), by rank 0 only.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

void slm_peak_key(int threads, char *out, size_t cap) {
    char model[128] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t')
            c++;
        snprintf(model, sizeof model, "%s", c);
        model[strcspn(model, "\r\n")] = 0;
        break;
    }
    if (f) fclose(f);
    for (char *p = model; *p; p++)
        if (*p == '\t' || *p == '|') *p = ' ';
    snprintf(out, cap, "%s|threads=%d", model, threads);
}

char *slm_peak_cache_path(void) {
    const char *d = getenv("SHARDLM_CACHE_DIR");
    if (d) return d[0] ? slm_path_join(d, "sgemm_peak.tsv") : NULL;
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    char *dir = x && x[0]   ? slm_path_join(x, "shardlm")
                : h && h[0] ? slm_path_join(h, ".cache/shardlm")
                            : NULL;
    if (!dir) return NULL;
    char *p = slm_path_join(dir, "sgemm_peak.tsv");
    free(dir);
    return p;
}

// The value of `key` in the cache text (NaN when absent); *line_at / *line_len locate its line.
static double find_key(const char *text, size_t len, const char *key, size_t *line_at,
                       size_t *line_len) {
    size_t kl = strlen(key);
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (text + i)) + 1 : len - i;
        if (n > kl && !memcmp(text + i, key, kl) && text[i + kl] == '\t') {
            char num[64];
            size_t m = n - kl - 1 < sizeof num - 1 ? n - kl - 1 : sizeof num - 1;
            memcpy(num, text + i + kl + 1, m);
            num[m] = 0;
            char *end;
            double v = strtod(num, &end);
            if (end != num && (*end == '\n' || *end == 0) && isfinite(v) && v > 0) {
                *line_at = i, *line_len = n;
                return v;
            }
        }
        i += n;
    }
    return NAN;
}

double slm_peak_cache_get(const char *key) {
    char *p = slm_peak_cache_path();
    char *text = NULL;
    size_t len = 0, at, n;
    double v = NAN;
    if (p && slm_is_file(p) && slm_file_read_all(p, &text, &len) == SLM_OK)
        v = find_key(text, len, key, &at, &n);
    free(text);
    free(p);
    return v;
}

slm_status slm_peak_cache_raise(const char *key, double gflops) {
    char *p = slm_peak_cache_path();
    if (!p || !(gflops > 0) || !isfinite(gflops)) {
        free(p);
        return SLM_OK;
    }
    char *text = NULL;
    size_t len = 0, at = 0, n = 0;
    if (slm_is_file(p) && slm_file_read_all(p, &text, &len) != SLM_OK) len = 0;
    double old = text ? find_key(text, len, key, &at, &n) : NAN;
    slm_status st = SLM_OK;
    if (!(old >= gflops)) {
        slm_buf b = {0};
        if (isfinite(old)) { // the other lines as they are, this one replaced
            slm_buf_append(&b, text, at);
            slm_buf_append(&b, text + at + n, len - at - n);
        } else if (len) {
            slm_buf_append(&b, text, len);
            if (text[len - 1] != '\n') slm_buf_appendf(&b, "\n");
        }
        slm_buf_appendf(&b, "%s\t%.6g\n", key, gflops);
        char *dir = slm_xstrdup(p);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        st = slash && dir[0] ? slm_mkdir_p(dir) : SLM_OK;
        if (!st) st = slm_file_write_atomic(p, b.data, b.len);
        if (st) st = slm_fail_wrap(st, "sgemm peak cache %s", p);
        free(dir);
        slm_buf_free(&b);
    }
    free(text);
    free(p);
    return st;
}
