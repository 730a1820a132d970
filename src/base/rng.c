// xoshiro256** with splitmix64 seeding (Blackman & Vigna, "Scrambled linear pseudorandom
// number generators", 2018). Box-Muller for normals: deterministic, one value per call.
#include "base.h"

#include <math.h>

uint64_t slm_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void slm_rng_seed(slm_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        r->s[i] = slm_mix64(x);
        x += 0x9e3779b97f4a7c15ULL;
    }
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t slm_rng_u64(slm_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float slm_rng_uniform(slm_rng *r) {
    return (float)(slm_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

float slm_rng_normal(slm_rng *r) {
    // u1 in (0, 1] so log() is finite.
    double u1 = ((double)(slm_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(slm_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t slm_rng_below(slm_rng *r, uint64_t n) {
    // Lemire, "Fast random integer generation in an interval", 2019.
    __uint128_t m = (__uint128_t)slm_rng_u64(r) * n;
    uint64_t l = (uint64_t)m;
    if (l < n) {
        uint64_t t = -n % n;
        while (l < t) {
            m = (__uint128_t)slm_rng_u64(r) * n;
            l = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}
