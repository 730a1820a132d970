// Dtypes and the fp32 <-> bf16 / fp16 conversions (one copy for dist/'s bf16 collectives,
// fsdp/'s mixed precision and safetensors' export / import).
#include "base.h"

#include <math.h>
#include <string.h>

// The formats store f32 / u16 payloads in host order with memcpy (base.h "Little-endian byte
// order"), which is their little-endian order only on a little-endian host.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shardlm's file formats are little-endian; big-endian hosts are not supported"
#endif

size_t slm_dtype_bytes(slm_dtype t) {
    switch (t) {
    case SLM_DTYPE_F32:
        return 4;
    case SLM_DTYPE_F16:
        return 2;
    case SLM_DTYPE_BF16:
        return 2;
    case SLM_DTYPE_F64:
        return 8;
    case SLM_DTYPE_I64:
        return 8;
    case SLM_DTYPE_U8:
        return 1;
    }
    slm_fatal("slm_dtype_bytes: bad dtype %d", (int)t);
}

const char *slm_dtype_st_name(slm_dtype t) {
    switch (t) {
    case SLM_DTYPE_F32:
        return "F32";
    case SLM_DTYPE_F16:
        return "F16";
    case SLM_DTYPE_BF16:
        return "BF16";
    case SLM_DTYPE_F64:
        return "F64";
    case SLM_DTYPE_I64:
        return "I64";
    case SLM_DTYPE_U8:
        return "U8";
    }
    slm_fatal("slm_dtype_st_name: bad dtype %d", (int)t);
}

slm_status slm_dtype_parse(const char *what, const char *s, slm_dtype *out) {
    if (s && (!strcmp(s, "F32") || !strcmp(s, "fp32") || !strcmp(s, "f32")))
        *out = SLM_DTYPE_F32;
    else if (s && (!strcmp(s, "F16") || !strcmp(s, "fp16") || !strcmp(s, "f16")))
        *out = SLM_DTYPE_F16;
    else if (s && (!strcmp(s, "BF16") || !strcmp(s, "bf16")))
        *out = SLM_DTYPE_BF16;
    else
        return slm_fail(SLM_E_ARG, "%s \"%s\": expected fp32, fp16 or bf16", what,
                        s ? s : "(null)");
    return SLM_OK;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// Round-to-nearest-even truncation of the low 16 bits (the usual bias trick: add 0x7fff plus the
// lowest kept bit, then shift). NaNs keep a quiet-NaN pattern so rounding cannot make them Inf.
uint16_t slm_f32_to_bf16_1(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float slm_bf16_to_f32_1(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

float slm_f16_to_f32_1(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) { // zero / subnormal: m * 2^-24
        float v = (float)m * 5.9604644775390625e-8f;
        return s ? -v : v;
    }
    if (e == 31) return bits_f32(s | 0x7f800000u | (m << 13));
    return bits_f32(s | ((e + 112) << 23) | (m << 13));
}

uint16_t slm_f32_to_f16_1(float f) {
    uint32_t u = f32_bits(f);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return s | 0x7e00;  // NaN
    if (a >= 0x477ff000u) return s | 0x7c00; // >= 65520 rounds to inf
    if (a < 0x38800000u) {                   // below 2^-14: subnormal or zero
        float v = bits_f32(a) * 16777216.0f; // in units of 2^-24
        float r = nearbyintf(v);             // default mode: ties to even
        return s | (uint16_t)r;
    }
    uint32_t m = a + 0xfffu + ((a >> 13) & 1); // round the 13 dropped bits
    return s | (uint16_t)((m - 0x38000000u) >> 13);
}

void slm_f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = slm_f32_to_bf16_1(x[i]);
}

void slm_bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = slm_bf16_to_f32_1(x[i]);
}
