// The GGUF export's q8_0 quantizer (slm_gguf_quant_q8_0) on blocks chosen to break a naive
// scale: for every block, against a double-precision oracle written here, the stored fp16 scale
// d is the smallest fp16 with 127 d >= max|x|, every q is round-half-away(x / d), and
// |x - d q| <= d / 2; zero blocks give d = 0; a block beyond fp16's range is refused.
#include "ckpt/ckpt_internal.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// fp16 bits -> double, written here (no shardlm conversion in the oracle).
static double half(uint16_t h) {
    int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

// Checks one quantized block of x[32] against the oracle.
static void check_block(const float *x, const uint8_t *blk) {
    double amax = 0;
    for (int j = 0; j < 32; j++)
        amax = fmax(amax, fabs((double)x[j]));
    uint16_t dh = (uint16_t)(blk[0] | blk[1] << 8);
    double d = half(dh);
    CHECK_MSG(!(dh & 0x8000), "scale %04x is negative", dh);
    CHECK_MSG(127 * d >= amax, "127 d = %.9g < max|x| = %.9g", 127 * d, amax);
    if (amax > 0) {
        CHECK_MSG(127 * half((uint16_t)(dh - 1)) < amax, "scale %04x is not the smallest", dh);
    } else {
        CHECK_MSG(dh == 0, "zero block: scale %04x", dh);
    }
    for (int j = 0; j < 32; j++) {
        int q = (int8_t)blk[2 + j];
        double want = d > 0 ? copysign(floor(fabs(x[j] / d) + 0.5), x[j]) : 0;
        CHECK_MSG(q == want, "x %.9g d %.9g: q %d, expected %g", (double)x[j], d, q, want);
        CHECK_MSG(fabs(x[j] - d * q) <= d / 2, "x %.9g: |x - d q| = %.3g > d/2 = %.3g",
                  (double)x[j], fabs(x[j] - d * q), d / 2);
    }
}

static void test_blocks(void) {
    enum { NB = 8 };
    float x[NB * 32];
    uint8_t out[NB * 34];
    slm_rng r;
    slm_rng_seed(&r, 7);
    // 0: zeros; 1: normal weights; 2: tiny (fp16-subnormal scale, where fp16(max/127) rounds
    // down by several percent); 3: a single nonzero at the bottom of fp16; 4: max at a tie
    // x / d = k + 0.5; 5: huge but in range; 6: mixed signs with max negative; 7: below fp16's
    // smallest subnormal times 127
    for (int i = 0; i < NB * 32; i++)
        x[i] = 0.02f * slm_rng_normal(&r);
    memset(x, 0, 32 * sizeof *x);
    for (int j = 0; j < 32; j++)
        x[64 + j] = 1.3e-5f * slm_rng_normal(&r);
    memset(x + 96, 0, 32 * sizeof *x);
    x[96 + 5] = 3e-7f;
    for (int j = 0; j < 32; j++)
        x[128 + j] = (float)(j - 16) * 0.5f;
    for (int j = 0; j < 32; j++)
        x[160 + j] = 8.0e6f * slm_rng_normal(&r) / 4;
    x[160] = 8.0e6f;
    x[192 + 3] = -0.9f;
    memset(x + 224, 0, 32 * sizeof *x);
    x[224 + 9] = -1e-9f;
    CHECK(slm_gguf_quant_q8_0(x, NB * 32, out));
    for (int b = 0; b < NB; b++)
        check_block(x + 32 * b, out + 34 * b);
    // beyond 127 x 65504: refused
    x[0] = 9e6f;
    CHECK(!slm_gguf_quant_q8_0(x, 32, out));
}

int main(void) {
    RUN(test_blocks);
    return TEST_SUMMARY();
}
