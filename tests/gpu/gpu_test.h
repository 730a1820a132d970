// Helpers shared by the GPU tests (after test.h): random inputs that are never zero, and the
// element-wise bound check that reports the first element outside it.
#ifndef SLM_GPU_TEST_H
#define SLM_GPU_TEST_H

#include <math.h>
#include <stdint.h>

#include "base/base.h"
#include "test.h"

// n floats ~ N(0, std^2) from r, a zero draw replaced by std (slm_xmalloc; free).
static inline float *gpu_randn(slm_rng *r, int64_t n, float std) {
    float *x = slm_xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        float v = slm_rng_normal(r) * std;
        x[i] = v == 0.0f ? std : v;
    }
    return x;
}

// Fails the current test unless |got[i] - want[i]| <= atol + rtol |want[i]| for every i (NaN
// fails), naming how many elements are outside and the first one.
static inline void gpu_close_to(const char *what, const float *got, const float *want, int64_t n,
                                double rtol, double atol) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs((double)want[i]))) {
            if (first < 0) first = i;
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "%s: %lld of %lld outside the bound (first [%lld]: %.9g vs %.9g)", what,
              (long long)bad, (long long)n, (long long)first, first >= 0 ? got[first] : 0.0,
              first >= 0 ? want[first] : 0.0);
}

#endif
