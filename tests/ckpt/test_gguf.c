// The GGUF reader on files built here byte by byte: a valid file's keys, arrays, alignment and
// tensors; dequantization of Q8_0 / Q4_0 / Q4_1 / F16 / BF16 blocks against values computed by
// hand from ggml's formulas; and every malformed input (each truncation, wrong magic, version,
// counts and lengths that overflow, unknown value and tensor types, a tensor outside the data
// section or misaligned, duplicates) -> a clean error naming the file and the key or tensor.
// The K-quants and the real-model checks are against gguf-py / transformers (gguf_cross.py,
// gguf_smollm2.py).
#include "ckpt/ckpt.h"
#include "ckpt/gguf_format.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A GGUF image under construction.
typedef struct gb {
    slm_buf b;
} gb;

static void u32(gb *g, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    slm_buf_append(&g->b, x, 4);
}
static void u64(gb *g, uint64_t v) {
    u32(g, (uint32_t)v);
    u32(g, (uint32_t)(v >> 32));
}
static void str(gb *g, const char *s) {
    u64(g, strlen(s));
    slm_buf_append(&g->b, s, strlen(s));
}
static void kv_u32(gb *g, const char *k, uint32_t v) {
    str(g, k);
    u32(g, SLM_GGUF_UINT32);
    u32(g, v);
}
static void kv_str(gb *g, const char *k, const char *v) {
    str(g, k);
    u32(g, SLM_GGUF_STRING);
    str(g, v);
}
static void pad_to(gb *g, size_t a) {
    while (g->b.len % a)
        slm_buf_append(&g->b, "", 1);
}

// f16 bits of small exact values used below.
#define H_HALF 0x3800 // 0.5
#define H_ONE 0x3c00  // 1.0
#define H_M2 0xc000   // -2.0

// A valid file: 4 keys (uint32, string, string array, alignment 64 when `align64`), tensors
// "a" F32 [3, 2] (ne {2, 3}), "q" Q8_0 [32], "h" F16 [4].
static void build_valid(gb *g, bool align64) {
    g->b.len = 0;
    u32(g, SLM_GGUF_MAGIC);
    u32(g, 3);
    u64(g, 3);               // tensors
    u64(g, align64 ? 4 : 3); // keys
    kv_u32(g, "llama.block_count", 7);
    kv_str(g, "general.architecture", "llama");
    str(g, "tokenizer.ggml.tokens");
    u32(g, SLM_GGUF_ARRAY);
    u32(g, SLM_GGUF_STRING);
    u64(g, 3);
    str(g, "a");
    str(g, "");
    str(g, "ccc");
    if (align64) kv_u32(g, "general.alignment", 64);
    size_t al = align64 ? 64 : 32;
    // infos
    str(g, "a");
    u32(g, 2);
    u64(g, 2);
    u64(g, 3);
    u32(g, SLM_GGML_F32);
    u64(g, 0);
    str(g, "q");
    u32(g, 1);
    u64(g, 32);
    u32(g, SLM_GGML_Q8_0);
    u64(g, al); // after a's 24 bytes, aligned
    str(g, "h");
    u32(g, 1);
    u64(g, 4);
    u32(g, SLM_GGML_F16);
    u64(g, (al + 34 + al - 1) / al * al);
    pad_to(g, al);
    size_t base = g->b.len;
    for (int i = 0; i < 6; i++) {
        float x = (float)i - 2.5f;
        slm_buf_append(&g->b, &x, 4);
    }
    pad_to(g, al);
    CHECK_EQ_INT(g->b.len - base, al);
    uint8_t q8[34] = {H_HALF & 0xff, H_HALF >> 8};
    for (int i = 0; i < 32; i++)
        q8[2 + i] = (uint8_t)(int8_t)(i - 16);
    slm_buf_append(&g->b, q8, 34);
    pad_to(g, al);
    uint16_t h[4] = {H_ONE, H_M2, H_HALF, 0x7bff}; // 65504, f16's largest
    slm_buf_append(&g->b, h, 8);
}

static void test_valid(void) {
    for (int a = 0; a < 2; a++) {
        gb g = {0};
        build_valid(&g, a);
        slm_gguf_file f;
        CHECK_OK(slm_gguf_parse((const uint8_t *)g.b.data, g.b.len, "t.gguf", &f));
        CHECK_EQ_INT(f.alignment, a ? 64 : 32);
        CHECK_EQ_INT(f.n_kv, a ? 4 : 3);
        CHECK_EQ_INT(f.n_tensors, 3);
        int64_t v = 0;
        CHECK_OK(slm_gguf_get_int(&f, "llama.block_count", 0, 100, &v, NULL));
        CHECK_EQ_INT(v, 7);
        const char *s;
        size_t n;
        CHECK_OK(slm_gguf_get_str(&f, "general.architecture", &s, &n, NULL));
        CHECK(n == 5 && !memcmp(s, "llama", 5));
        const slm_gguf_kv *arr;
        CHECK_OK(slm_gguf_get_array(&f, "tokenizer.ggml.tokens", SLM_GGUF_STRING, &arr));
        CHECK(arr && arr->count == 3);
        const char *ss[3];
        size_t ls[3];
        slm_gguf_array_strings(&f, arr, ss, ls);
        CHECK(ls[0] == 1 && ss[0][0] == 'a' && ls[1] == 0 && ls[2] == 3 &&
              !memcmp(ss[2], "ccc", 3));
        bool found = true;
        CHECK_OK(slm_gguf_get_int(&f, "nope", 0, 1, &v, &found));
        CHECK(!found);
        // wrong types and ranges name the key
        CHECK(slm_gguf_get_int(&f, "general.architecture", 0, 1, &v, NULL) == SLM_E_FORMAT);
        CHECK(strstr(slm_errmsg(), "t.gguf: key general.architecture is a string (expected an "
                                   "integer)") != NULL);
        CHECK(slm_gguf_get_int(&f, "llama.block_count", 0, 5, &v, NULL) == SLM_E_FORMAT);
        CHECK(strstr(slm_errmsg(), "llama.block_count is 7 (expected 0..5)") != NULL);
        CHECK(slm_gguf_get_array(&f, "tokenizer.ggml.tokens", SLM_GGUF_INT32, &arr) ==
              SLM_E_FORMAT);
        CHECK(strstr(slm_errmsg(), "is an array of string (expected an array of int32)") != NULL);
        CHECK(slm_gguf_get_int(&f, "missing.key", 0, 1, &v, NULL) == SLM_E_FORMAT);
        CHECK(strstr(slm_errmsg(), "key missing.key is missing") != NULL);

        const slm_gguf_tensor *t = slm_gguf_tensor_find(&f, "a");
        CHECK(t && t->n_dims == 2 && t->ne[0] == 2 && t->ne[1] == 3 && t->numel == 6);
        float x[32];
        slm_gguf_read_f32(&f, t, x);
        for (int i = 0; i < 6; i++)
            CHECK(x[i] == (float)i - 2.5f);
        t = slm_gguf_tensor_find(&f, "q");
        CHECK(t && t->nbytes == 34);
        slm_gguf_read_f32(&f, t, x);
        for (int i = 0; i < 32; i++) // Q8_0: q * d
            CHECK(x[i] == 0.5f * (float)(i - 16));
        t = slm_gguf_tensor_find(&f, "h");
        slm_gguf_read_f32(&f, t, x);
        CHECK(x[0] == 1.0f && x[1] == -2.0f && x[2] == 0.5f && x[3] == 65504.0f);
        slm_gguf_close(&f);
        slm_buf_free(&g.b);
    }
}

// Q4_0 / Q4_1 / BF16 blocks against ggml's formulas written out by hand.
static void test_dequant_small(void) {
    uint8_t b[20] = {H_HALF & 0xff, H_HALF >> 8};
    for (int l = 0; l < 16; l++)
        b[2 + l] = (uint8_t)(l | ((15 - l) << 4)); // low nibble l, high 15 - l
    float y[32];
    slm_gguf_dequant(SLM_GGML_Q4_0, b, 32, y);
    for (int l = 0; l < 16; l++) {
        CHECK(y[l] == 0.5f * (float)(l - 8));      // element l: low nibble
        CHECK(y[l + 16] == 0.5f * (float)(7 - l)); // element l + 16: high nibble
    }
    uint8_t c[20] = {H_HALF & 0xff, H_HALF >> 8, H_M2 & 0xff, H_M2 >> 8};
    for (int l = 0; l < 16; l++)
        c[4 + l] = (uint8_t)(l | ((15 - l) << 4));
    slm_gguf_dequant(SLM_GGML_Q4_1, c, 32, y);
    for (int l = 0; l < 16; l++) {
        CHECK(y[l] == 0.5f * (float)l - 2.0f);
        CHECK(y[l + 16] == 0.5f * (float)(15 - l) - 2.0f);
    }
    uint8_t bf[4] = {0x80, 0x3f, 0x49, 0xc0}; // 1.0, -3.140625
    slm_gguf_dequant(SLM_GGML_BF16, bf, 2, y);
    CHECK(y[0] == 1.0f && y[1] == -3.140625f);
}

// Parses and expects an error whose message holds every needle.
static void expect_fail(const gb *g, slm_status code, const char *n1, const char *n2) {
    slm_gguf_file f;
    slm_status st = slm_gguf_parse((const uint8_t *)g->b.data, g->b.len, "bad.gguf", &f);
    CHECK_MSG(st == code, "status %d, expected %d (%s)", st, code, slm_errmsg());
    CHECK_MSG(strstr(slm_errmsg(), "bad.gguf") != NULL, "no file name in: %s", slm_errmsg());
    CHECK_MSG(strstr(slm_errmsg(), n1) != NULL, "no \"%s\" in: %s", n1, slm_errmsg());
    if (n2) CHECK_MSG(strstr(slm_errmsg(), n2) != NULL, "no \"%s\" in: %s", n2, slm_errmsg());
    slm_gguf_close(&f);
}

// Offset in the valid file of tensor info `name`'s type field.
static size_t info_field(const gb *g, const char *name, int field) {
    // find "\x01\0\0\0\0\0\0\0<name>" followed by the dims
    const char *d = g->b.data;
    for (size_t i = 24; i + 9 < g->b.len; i++)
        if (slm_get_le64((const uint8_t *)d + i) == strlen(name) &&
            !memcmp(d + i + 8, name, strlen(name)) && d[i + 8 + strlen(name)] < 5 &&
            d[i + 8 + strlen(name)] > 0) {
            size_t p = i + 8 + strlen(name);
            uint32_t nd = slm_get_le32((const uint8_t *)d + p);
            size_t type_at = p + 4 + 8 * nd;
            return field == 0 ? type_at : field == 1 ? type_at + 4 : p + 4; // type, offset, ne[0]
        }
    return 0;
}

static void test_malformed(void) {
    gb g = {0};
    build_valid(&g, false);
    size_t full = g.b.len;
    // Every truncation that cuts into the header, keys, infos or a tensor's bytes is refused,
    // never read past (ASan would see it).
    size_t data_end_q = 0;
    {
        slm_gguf_file f;
        CHECK_OK(slm_gguf_parse((const uint8_t *)g.b.data, full, "t.gguf", &f));
        data_end_q = f.data_start + 96 + 8;
        slm_gguf_close(&f);
    }
    CHECK_EQ_INT(data_end_q, full);
    for (size_t n = 0; n < full; n++) {
        slm_gguf_file f;
        slm_status st = slm_gguf_parse((const uint8_t *)g.b.data, n, "cut.gguf", &f);
        CHECK_MSG(st == SLM_E_FORMAT, "truncated to %zu bytes of %zu: status %d", n, full, st);
        CHECK(strstr(slm_errmsg(), "cut.gguf") != NULL);
        slm_gguf_close(&f);
    }
    gb b = {0};
    // wrong magic
    slm_buf_append(&b.b, g.b.data, full);
    memcpy(b.b.data, "GGML", 4);
    expect_fail(&b, SLM_E_FORMAT, "not a GGUF file", "expected \"GGUF\"");
    // version 1 / big-endian
    memcpy(b.b.data, g.b.data, full);
    b.b.data[4] = 1;
    expect_fail(&b, SLM_E_UNSUPPORTED, "GGUF version 1", NULL);
    b.b.data[4] = 0;
    b.b.data[7] = 3;
    expect_fail(&b, SLM_E_FORMAT, "big-endian", NULL);
    // counts that overflow
    memcpy(b.b.data, g.b.data, full);
    memset(b.b.data + 16, 0xff, 8); // n_kv = 2^64 - 1
    expect_fail(&b, SLM_E_FORMAT, "cannot fit", NULL);
    memcpy(b.b.data, g.b.data, full);
    memset(b.b.data + 8, 0xff, 7); // n_tensors huge
    expect_fail(&b, SLM_E_FORMAT, "cannot fit", NULL);
    // a key's name length past the end
    memcpy(b.b.data, g.b.data, full);
    memset(b.b.data + 24, 0xff, 8);
    expect_fail(&b, SLM_E_FORMAT, "key 0's name", "runs past the end");
    // unknown value type of the first key (after its 8 + 17 byte name)
    memcpy(b.b.data, g.b.data, full);
    b.b.data[24 + 8 + 17] = 13;
    expect_fail(&b, SLM_E_FORMAT, "key llama.block_count: value type 13 is unknown", NULL);
    // the string array's count overflowing, and an array of arrays
    size_t arr = 0;
    for (size_t i = 0; i + 21 < full; i++)
        if (!memcmp(g.b.data + i, "tokenizer.ggml.tokens", 21)) arr = i + 21;
    CHECK(arr > 0);
    memcpy(b.b.data, g.b.data, full);
    memset(b.b.data + arr + 8, 0xff, 8);
    expect_fail(&b, SLM_E_FORMAT, "key tokenizer.ggml.tokens: array of", "does not fit");
    memcpy(b.b.data, g.b.data, full);
    b.b.data[arr + 4] = SLM_GGUF_ARRAY;
    expect_fail(&b, SLM_E_FORMAT, "tokenizer.ggml.tokens: array element type 9 is an array", NULL);
    // unknown / unsupported tensor types
    size_t ty = info_field(&g, "q", 0);
    CHECK(ty > 0);
    memcpy(b.b.data, g.b.data, full);
    b.b.data[ty] = 99;
    expect_fail(&b, SLM_E_FORMAT, "tensor q: ggml type 99 is unknown (not a ggml type", NULL);
    b.b.data[ty] = 6;
    expect_fail(&b, SLM_E_UNSUPPORTED, "tensor q: ggml type 6 (Q5_0) is not supported", NULL);
    // a tensor outside the data section, misaligned, overlapping
    size_t off = info_field(&g, "h", 1);
    memcpy(b.b.data, g.b.data, full);
    b.b.data[off] = (char)(uint8_t)160;
    expect_fail(&b, SLM_E_FORMAT, "tensor h: bytes [160, 168) of the data section", "outside");
    memset(b.b.data + off, 0xff, 8);
    expect_fail(&b, SLM_E_FORMAT, "tensor h: offset 18446744073709551615 is not a multiple", NULL);
    memset(b.b.data + off, 0, 8);
    expect_fail(&b, SLM_E_FORMAT, "overlap", NULL);
    // element count overflow
    size_t ne = info_field(&g, "a", 2);
    memcpy(b.b.data, g.b.data, full);
    memset(b.b.data + ne, 0xff, 7);
    expect_fail(&b, SLM_E_FORMAT, "tensor a: dimension 0", "overflows");
    // first dim not a multiple of the block
    ne = info_field(&g, "q", 2);
    memcpy(b.b.data, g.b.data, full);
    b.b.data[ne] = 16;
    expect_fail(&b, SLM_E_FORMAT, "tensor q: first dimension 16 is not a multiple of Q8_0's block",
                NULL);
    // duplicate tensor name ("h" renamed "q")
    memcpy(b.b.data, g.b.data, full);
    b.b.data[info_field(&g, "h", 2) - 4 - 1] = 'q';
    expect_fail(&b, SLM_E_FORMAT, "tensor q is listed twice", NULL);
    // alignment not a power of two
    gb c = {0};
    build_valid(&c, true);
    for (size_t i = 0; i + 17 < c.b.len; i++)
        if (!memcmp(c.b.data + i, "general.alignment", 17)) c.b.data[i + 17 + 4] = 48;
    expect_fail(&c, SLM_E_FORMAT, "key general.alignment is 48", "power of two");
    slm_buf_free(&b.b);
    slm_buf_free(&c.b);
    slm_buf_free(&g.b);
}

int main(void) {
    RUN(test_valid);
    RUN(test_dequant_small);
    RUN(test_malformed);
    return TEST_SUMMARY();
}
