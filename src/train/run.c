// Memory probe and byte formatting shared by training's up-front estimate and the model
// directory loader (train_internal.h).
#include <stdio.h>

#include <sys/resource.h>
#include <unistd.h>

#include "train/train_internal.h"

double slm_train_mem_available(void) {
    double avail = 0;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && psz > 0) avail = (double)pages * (double)psz;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (avail == 0 || (double)rl.rlim_cur < avail))
        avail = (double)rl.rlim_cur;
    return avail;
}

const char *slm_train_fmt_bytes(double bytes, char buf[32]) {
    static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int i = 0;
    while (bytes >= 1024 && i < 6) bytes /= 1024, i++;
    snprintf(buf, 32, i ? "%.2f %s" : "%.0f %s", bytes, unit[i]);
    return buf;
}
