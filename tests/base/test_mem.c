// The memory probe (src/base/mem.c): the ulimit -v headroom against this process's address space
// read independently from /proc/self/statm, the binding-limit name, slm_mem_check's refusal
// message (estimate and limit), and slm_fmt_bytes. Its own binary: it lowers RLIMIT_AS.
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"
#include "test.h"

#define MIB (1024.0 * 1024.0)

static double vm_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    unsigned long long pages = 0;
    int n = fscanf(f, "%llu", &pages);
    fclose(f);
    return n == 1 ? (double)pages * (double)sysconf(_SC_PAGE_SIZE) : -1;
}

static void test_fmt(void) {
    char b[32];
    CHECK(!strcmp(slm_fmt_bytes(100, b), "100 bytes"));
    CHECK(!strcmp(slm_fmt_bytes(1536, b), "1.50 KiB"));
    CHECK(!strcmp(slm_fmt_bytes(3.0 * 1024 * MIB, b), "3.00 GiB"));
}

static void test_unlimited(void) {
    slm_mem_info m;
    slm_mem_probe(&m);
    CHECK(m.meminfo > 0);
    CHECK(m.bytes > 0 && m.bytes <= m.meminfo);
    CHECK(slm_mem_check(1.0, "one byte") == SLM_OK);
    CHECK(slm_mem_check(NAN, "NaN bytes") == SLM_E_NOMEM);
}

static void test_rlimit(void) {
    double vm = vm_bytes();
    CHECK(vm > 0);
    struct rlimit rl = {(rlim_t)(vm + 256 * MIB), RLIM_INFINITY};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
    slm_mem_info m;
    slm_mem_probe(&m);
    // Headroom = limit - address space in use; a few MiB may have been mapped since vm_bytes().
    CHECK(m.rlimit_as <= 256 * MIB && m.rlimit_as >= 240 * MIB);
    if (m.meminfo > 512 * MIB && (m.cgroup < 0 || m.cgroup > 512 * MIB)) {
        CHECK(m.bytes == m.rlimit_as);
        CHECK(strstr(m.limit_name, "ulimit -v") != NULL);
        CHECK(slm_mem_check(512 * MIB, "a test of %d", 7) == SLM_E_NOMEM);
        const char *e = slm_errmsg();
        CHECK(strstr(e, "a test of 7 needs about 512.00 MiB of memory, more than the ") == e);
        CHECK(strstr(e, "MiB available (address-space limit (ulimit -v)") != NULL);
    }
    CHECK(slm_mem_check(16 * MIB, "16 MiB") == SLM_OK);
}

int main(void) {
    RUN(test_fmt);
    RUN(test_unlimited);
    RUN(test_rlimit);
    return TEST_SUMMARY();
}
