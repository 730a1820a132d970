// Minimal test harness: checks print both values, the binary ends with "N passed, N failed".
//
//   #include "test.h"
//   static void test_add(void) { CHECK_EQ_INT(1 + 1, 2); }
//   int main(void) { RUN(test_add); return TEST_SUMMARY(); }
//
// A failing check records the failure and returns from the current test function; other tests
// still run. Exit status: 0 when every check passed, 1 otherwise.
#ifndef SLM_TEST_H
#define SLM_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int slm_test_passed_, slm_test_failed_, slm_test_cur_failed_;

#define SLM_TEST_FAIL_(...)                                                                        \
    do {                                                                                           \
        fprintf(stderr, "  FAIL %s:%d: ", __FILE__, __LINE__);                                     \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        slm_test_cur_failed_ = 1;                                                                  \
        return;                                                                                    \
    } while (0)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) SLM_TEST_FAIL_("CHECK(%s)", #cond);                                           \
    } while (0)
#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) SLM_TEST_FAIL_(__VA_ARGS__);                                                  \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) SLM_TEST_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_);                    \
    } while (0)
#define CHECK_EQ_STR(a, b)                                                                         \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                     \
            SLM_TEST_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",               \
                           b_ ? b_ : "(null)");                                                    \
    } while (0)
// |a - b| <= atol + rtol * |b|
#define CHECK_CLOSE(a, b, rtol, atol)                                                              \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        if (!(fabs(a_ - b_) <= (atol) + (rtol)*fabs(b_)))                                          \
            SLM_TEST_FAIL_("%s ~= %s: %.9g vs %.9g (rtol %g, atol %g)", #a, #b, a_, b_,            \
                           (double)(rtol), (double)(atol));                                        \
    } while (0)
// Status-returning call must give SLM_OK; prints the recorded message otherwise.
#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        int st_ = (int)(call);                                                                     \
        if (st_ != 0) SLM_TEST_FAIL_("%s -> status %d: %s", #call, st_, slm_errmsg());             \
    } while (0)

#define RUN(fn)                                                                                    \
    do {                                                                                           \
        slm_test_cur_failed_ = 0;                                                                  \
        fn();                                                                                      \
        if (slm_test_cur_failed_) {                                                                \
            slm_test_failed_++;                                                                    \
            fprintf(stderr, "[FAIL] %s\n", #fn);                                                   \
        } else {                                                                                   \
            slm_test_passed_++;                                                                    \
            fprintf(stderr, "[ ok ] %s\n", #fn);                                                   \
        }                                                                                          \
    } while (0)

#define TEST_SUMMARY()                                                                             \
    (printf("%d passed, %d failed\n", slm_test_passed_, slm_test_failed_), slm_test_failed_ ? 1 : 0)

// Path of a file in the shared/ data folder (SLM_SHARED_DIR), in a static buffer.
static inline const char *slm_test_shared(const char *rel) {
    static char buf[4096];
    const char *d = getenv("SLM_SHARED_DIR");
    snprintf(buf, sizeof buf, "%s/%s", d ? d : "../shared", rel);
    return buf;
}

#endif
