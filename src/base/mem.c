// Memory probe: how many more bytes this process can allocate, from the three limits that can
// stop it (free memory, ulimit -v, the memory cgroup), and the check every subcommand runs
// before a big allocation. Contract in base.h.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"

// The value of `key` (in kB) from /proc/meminfo, or -1.
static double meminfo_kb(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double out = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            out = strtod(line + kl + 1, NULL);
            break;
        }
    }
    fclose(f);
    return out;
}

// Address space this process uses now (bytes), from /proc/self/statm; -1 if unknown.
static double vm_size_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    unsigned long long pages = 0;
    int n = fscanf(f, "%llu", &pages);
    fclose(f);
    long psz = sysconf(_SC_PAGE_SIZE);
    return n == 1 && psz > 0 ? (double)pages * (double)psz : -1;
}

// Reads one number from a cgroup file ("max" -> -1); -2 if unreadable.
static double cgroup_value(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return -2;
    char buf[64] = {0};
    bool got = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!got) return -2;
    if (!strncmp(buf, "max", 3)) return -1;
    char *end = NULL;
    double v = strtod(buf, &end);
    return end != buf ? v : -2;
}

// Headroom under cgroup v2 memory.max (min over this cgroup and its ancestors); -1 if none.
static double cgroup_headroom(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[4096], rel[4096] = {0};
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "0::", 3)) { // the unified (v2) hierarchy
            snprintf(rel, sizeof rel, "%s", line + 3);
            rel[strcspn(rel, "\n")] = 0;
            found = true;
            break;
        }
    }
    fclose(f);
    if (!found) return -1;
    double best = -1;
    for (;;) {
        char dir[4224]; // "/sys/fs/cgroup" + rel
        snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", rel);
        double max = cgroup_value(dir, "memory.max"), cur = cgroup_value(dir, "memory.current");
        if (max >= 0 && cur >= 0) {
            double room = max > cur ? max - cur : 0;
            if (best < 0 || room < best) best = room;
        }
        char *slash = strrchr(rel, '/');
        if (!slash || !rel[0] || !strcmp(rel, "/")) break;
        if (slash == rel) {
            if (!rel[1]) break;
            rel[1] = 0; // parent is the root
        } else {
            *slash = 0;
        }
    }
    return best;
}

void slm_mem_probe(slm_mem_info *out) {
    memset(out, 0, sizeof *out);
    out->rlimit_as = -1;
    out->cgroup = -1;
    double kb = meminfo_kb("MemAvailable");
    if (kb >= 0) {
        out->meminfo = kb * 1024.0;
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
        if (pages > 0 && psz > 0) out->meminfo = (double)pages * (double)psz;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        double used = vm_size_bytes();
        double lim = (double)rl.rlim_cur;
        out->rlimit_as = used >= 0 ? (lim > used ? lim - used : 0) : lim;
    }
    out->cgroup = cgroup_headroom();
    out->bytes = out->meminfo;
    out->limit_name = "available memory (MemAvailable)";
    if (out->rlimit_as >= 0 && (out->bytes <= 0 || out->rlimit_as < out->bytes)) {
        out->bytes = out->rlimit_as;
        out->limit_name = "address-space limit (ulimit -v) less the space in use";
    }
    if (out->cgroup >= 0 && (out->bytes <= 0 || out->cgroup < out->bytes)) {
        out->bytes = out->cgroup;
        out->limit_name = "cgroup memory.max less memory.current";
    }
    if (out->bytes <= 0 && out->rlimit_as < 0 && out->cgroup < 0) out->limit_name = "unknown";
}

double slm_mem_available(void) {
    slm_mem_info m;
    slm_mem_probe(&m);
    return m.bytes;
}

const char *slm_fmt_bytes(double bytes, char buf[32]) {
    static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int i = 0;
    while (bytes >= 1024 && i < 6)
        bytes /= 1024, i++;
    snprintf(buf, 32, i ? "%.2f %s" : "%.0f %s", bytes, unit[i]);
    return buf;
}

slm_status slm_mem_check(double need_bytes, const char *fmt, ...) {
    slm_mem_info m;
    slm_mem_probe(&m);
    if (!(need_bytes == need_bytes)) need_bytes = 1e300; // NaN: treat as too much
    bool known = m.bytes > 0 || m.rlimit_as >= 0 || m.cgroup >= 0;
    if (!known || need_bytes <= m.bytes) return SLM_OK;
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char a[32], b[32];
    return slm_fail(SLM_E_NOMEM, "%s needs about %s of memory, more than the %s available (%s)",
                    what, slm_fmt_bytes(need_bytes, a), slm_fmt_bytes(m.bytes, b), m.limit_name);
}
