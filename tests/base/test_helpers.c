// base/'s shared helpers (issue 9 item 4: one home each): little-endian byte order against
// hand-written bytes, fp32 <-> bf16 / fp16 against hand-derived IEEE bit patterns (round to
// nearest even, overflow, subnormals, NaN), the dtype names, the checked JSON field readers
// (messages name file, field and expectation), full write + fsync, file copy, flat directory
// removal, the stop flag under a real signal and byte formatting.
#include "base/base.h"
#include "base/json.h"
#include "test.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_le(void) {
    uint8_t b[8];
    slm_put_le16(b, 0x1234);
    CHECK(b[0] == 0x34 && b[1] == 0x12);
    slm_put_le32(b, 0x01020304u);
    CHECK(b[0] == 4 && b[1] == 3 && b[2] == 2 && b[3] == 1);
    slm_put_le64(b, 0x0102030405060708ull);
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(b[i], 8 - i);
    const uint8_t x[8] = {0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01};
    CHECK(slm_get_le16(x) == 0xcdef);
    CHECK(slm_get_le32(x) == 0x89abcdefu);
    CHECK(slm_get_le64(x) == 0x0123456789abcdefull);
    // Unaligned addresses.
    uint8_t y[9] = {0};
    slm_put_le32(y + 1, 0xdeadbeefu);
    CHECK(slm_get_le32(y + 1) == 0xdeadbeefu && y[1] == 0xef && y[4] == 0xde);
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16(void) {
    // bf16 keeps 7 mantissa bits: 1 + 2^-8 is a tie between 1 (0x3f80) and 1 + 2^-7 (0x3f81) and
    // goes to the even 0x3f80; 1 + 3*2^-8 ties between 0x3f81 and 0x3f82 and goes to 0x3f82;
    // just above a tie rounds up.
    CHECK_EQ_INT(slm_f32_to_bf16_1(1.0f), 0x3f80);
    CHECK_EQ_INT(slm_f32_to_bf16_1(1.0f + 0x1p-8f), 0x3f80);
    CHECK_EQ_INT(slm_f32_to_bf16_1(1.0f + 3 * 0x1p-8f), 0x3f82);
    CHECK_EQ_INT(slm_f32_to_bf16_1(from_bits(0x3f808001u)), 0x3f81);
    CHECK_EQ_INT(slm_f32_to_bf16_1(-2.0f), 0xc000);
    CHECK_EQ_INT(slm_f32_to_bf16_1(65504.0f), 0x4780); // rounds up to 2^16
    CHECK_EQ_INT(slm_f32_to_bf16_1(INFINITY), 0x7f80);
    // The largest float rounds to inf (as torch does); a NaN with only low payload bits stays NaN.
    CHECK_EQ_INT(slm_f32_to_bf16_1(from_bits(0x7f7fffffu)), 0x7f80);
    uint16_t n = slm_f32_to_bf16_1(from_bits(0x7f800001u));
    CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
    CHECK(slm_bf16_to_f32_1(0x3f81) == 1.0f + 0x1p-7f);
    CHECK(slm_bf16_to_f32_1(0xc000) == -2.0f);
    float xs[3] = {1.0f, 0.5f, -3.0f}, back[3];
    uint16_t hs[3];
    slm_f32_to_bf16(xs, hs, 3);
    slm_bf16_to_f32(hs, back, 3);
    for (int i = 0; i < 3; i++)
        CHECK(back[i] == xs[i]);
}

static void test_fp16(void) {
    CHECK_EQ_INT(slm_f32_to_f16_1(1.0f), 0x3c00);
    CHECK_EQ_INT(slm_f32_to_f16_1(-2.0f), 0xc000);
    CHECK_EQ_INT(slm_f32_to_f16_1(65504.0f), 0x7bff);            // the largest half
    CHECK_EQ_INT(slm_f32_to_f16_1(65519.0f), 0x7bff);            // below the 65520 tie
    CHECK_EQ_INT(slm_f32_to_f16_1(65520.0f), 0x7c00);            // tie to even: inf
    CHECK_EQ_INT(slm_f32_to_f16_1(1.0f + 0x1p-11f), 0x3c00);     // tie -> even
    CHECK_EQ_INT(slm_f32_to_f16_1(1.0f + 3 * 0x1p-11f), 0x3c02); // tie -> even
    CHECK_EQ_INT(slm_f32_to_f16_1(0x1p-24f), 0x0001);            // the smallest subnormal
    CHECK_EQ_INT(slm_f32_to_f16_1(0x1p-25f), 0x0000);            // tie with 0 -> 0
    CHECK_EQ_INT(slm_f32_to_f16_1(3 * 0x1p-25f), 0x0002);        // tie 1 / 2 -> 2
    CHECK_EQ_INT(slm_f32_to_f16_1(0x1p-14f), 0x0400);            // the smallest normal
    CHECK_EQ_INT(slm_f32_to_f16_1(-0.0f), 0x8000);
    CHECK_EQ_INT(slm_f32_to_f16_1(NAN) & 0x7e00, 0x7e00);
    CHECK(slm_f16_to_f32_1(0x0001) == 0x1p-24f);
    CHECK(slm_f16_to_f32_1(0x7bff) == 65504.0f);
    CHECK(isinf(slm_f16_to_f32_1(0xfc00)) && slm_f16_to_f32_1(0xfc00) < 0);
    CHECK(isnan(slm_f16_to_f32_1(0x7e00)));
    // Every finite half converts to fp32 and back to itself.
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7c00) != 0x7c00 && slm_f32_to_f16_1(slm_f16_to_f32_1((uint16_t)h)) != h) bad++;
    CHECK_EQ_INT(bad, 0);
}

static void test_dtype_names(void) {
    slm_dtype t;
    CHECK_OK(slm_dtype_parse("--dtype", "bf16", &t));
    CHECK(t == SLM_DTYPE_BF16);
    CHECK_OK(slm_dtype_parse("--dtype", "F16", &t));
    CHECK(t == SLM_DTYPE_F16);
    CHECK_OK(slm_dtype_parse("--dtype", "fp32", &t));
    CHECK(t == SLM_DTYPE_F32);
    CHECK_EQ_INT(slm_dtype_parse("--dtype", "int8", &t), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "--dtype") && strstr(slm_errmsg(), "int8") &&
          strstr(slm_errmsg(), "fp32, fp16 or bf16"));
    CHECK_EQ_STR(slm_dtype_st_name(SLM_DTYPE_BF16), "BF16");
    CHECK_EQ_INT(slm_dtype_bytes(SLM_DTYPE_F16), 2);
    CHECK_EQ_INT(slm_dtype_bytes(SLM_DTYPE_I64), 8);
    CHECK_EQ_INT(slm_dtype_bytes(SLM_DTYPE_U8), 1);
}

static bool has(const char *a, const char *b, const char *c) {
    const char *m = slm_errmsg();
    return strstr(m, a) && strstr(m, b) && (!c || strstr(m, c));
}

static void test_json(void) {
    cJSON *o = cJSON_Parse("{\"n\": 7, \"x\": 2.5, \"s\": \"hi\", \"h\": \"00000000000000ff\","
                           " \"neg\": -3, \"b\": true, \"z\": null, \"big\": 3e9,"
                           " \"o\": {}, \"a\": []}");
    CHECK(o != NULL);
    const char *f = "dir/manifest.json";
    double d = 0;
    int64_t i = 0;
    uint64_t u = 0;
    const char *s = NULL;
    CHECK_OK(slm_json_num(f, o, "x", 0, 10, false, &d));
    CHECK(d == 2.5);
    CHECK_OK(slm_json_i64(f, o, "n", 0, 100, &i));
    CHECK_EQ_INT(i, 7);
    CHECK_OK(slm_json_u64(f, o, "n", &u));
    CHECK(u == 7);
    CHECK_OK(slm_json_str(f, o, "s", &s));
    CHECK_EQ_STR(s, "hi");
    CHECK_OK(slm_json_hex64(f, o, "h", &u));
    CHECK(u == 255);
    // Missing, wrong type, out of range, not an integer: each names file, field, expectation.
    CHECK_EQ_INT(slm_json_u64(f, o, "nope", &u), SLM_E_FORMAT);
    CHECK(has(f, "\"nope\" is missing", "expected an integer in [0, 9007199254740992]"));
    CHECK_EQ_INT(slm_json_num(f, o, "s", 0, 1, false, &d), SLM_E_FORMAT);
    CHECK(has(f, "\"s\"", "got a string"));
    CHECK_EQ_INT(slm_json_i64(f, o, "neg", 0, 100, &i), SLM_E_FORMAT);
    CHECK(has(f, "\"neg\" is -3", "expected an integer in [0, 100]"));
    CHECK_EQ_INT(slm_json_i64(f, o, "x", 0, 100, &i), SLM_E_FORMAT);
    CHECK(has("\"x\" is 2.5", "expected an integer", NULL));
    CHECK_EQ_INT(i, 7); // unchanged on error
    CHECK_EQ_INT(slm_json_str(f, o, "n", &s), SLM_E_FORMAT);
    CHECK(has(f, "\"n\"", "expected a string, got a number"));
    CHECK_EQ_INT(slm_json_hex64(f, o, "s", &u), SLM_E_FORMAT);
    CHECK(has(f, "\"s\" is \"hi\"", "16 hex digits"));
    CHECK_EQ_INT(slm_json_hex64(f, o, "n", &u), SLM_E_FORMAT);
    CHECK(has(f, "\"n\" is a number", "16 hex digits"));
    // Optional readers: absent (or null when nullable) keeps the default.
    int32_t k = 42;
    float x = 1.0f;
    bool b = false;
    CHECK_OK(slm_json_opt_i32(f, o, "nope", false, &k));
    CHECK_OK(slm_json_opt_i32(f, o, "z", true, &k));
    CHECK_EQ_INT(k, 42);
    CHECK_EQ_INT(slm_json_opt_i32(f, o, "z", false, &k), SLM_E_FORMAT);
    CHECK(has(f, "\"z\"", "got null"));
    CHECK_EQ_INT(slm_json_opt_i32(f, o, "big", false, &k), SLM_E_FORMAT);
    CHECK(has("\"big\" is 3000000000", "[-2147483648, 2147483647]", NULL));
    CHECK_OK(slm_json_opt_i32(f, o, "neg", false, &k));
    CHECK_EQ_INT(k, -3);
    CHECK_OK(slm_json_opt_f32(f, o, "x", &x));
    CHECK(x == 2.5f);
    CHECK_EQ_INT(slm_json_opt_f32(f, o, "b", &x), SLM_E_FORMAT);
    CHECK(has(f, "\"b\": expected a number", "got a boolean"));
    CHECK_OK(slm_json_opt_bool(f, o, "b", &b));
    CHECK(b);
    CHECK_EQ_INT(slm_json_opt_bool(f, o, "n", &b), SLM_E_FORMAT);
    CHECK(has(f, "expected true or false", "got a number"));
    CHECK(slm_json_obj(o, "o") && !slm_json_obj(o, "a") && slm_json_arr(o, "a"));
    CHECK(slm_json_absent_or_null(NULL) && slm_json_absent_or_null(cJSON_GetObjectItem(o, "z")));
    CHECK(slm_json_true(cJSON_GetObjectItem(o, "b")) && !slm_json_true(NULL));
    cJSON_Delete(o);
}

static void test_files(void) {
    char dir[] = "/tmp/slm_test_helpers_XXXXXX";
    CHECK(mkdtemp(dir));
    char *a = slm_path_join(dir, "a.bin"), *b = slm_path_join(dir, "b.bin");
    char *sub = slm_path_join(dir, "sub");
    // 3 MiB + 1 so the write is not one page.
    size_t n = (3u << 20) + 1;
    uint8_t *data = slm_xmalloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 131 + 7);
    CHECK_OK(slm_file_write_durable(a, data, n));
    uint64_t h = 0;
    CHECK_OK(slm_file_copy(a, b, &h));
    CHECK(h == slm_xxh64(data, n, 0));
    char *got = NULL;
    size_t len = 0;
    CHECK_OK(slm_file_read_all(b, &got, &len));
    CHECK(len == n && !memcmp(got, data, n));
    free(got);
    // A descriptor that cannot be written: the message names the path and the step.
    int fd = open(a, O_RDONLY);
    CHECK(fd >= 0);
    CHECK_EQ_INT(slm_fd_write_fsync_close(fd, "x", 1, a), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), a) && strstr(slm_errmsg(), "write failed"));
    // Copying a missing file fails naming it; a failed durable write leaves no file.
    char *missing = slm_path_join(dir, "missing");
    CHECK_EQ_INT(slm_file_copy(missing, b, NULL), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "missing"));
    char *nodir = slm_path_join(dir, "nodir/x");
    CHECK_EQ_INT(slm_file_write_durable(nodir, "x", 1), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "nodir/x") && strstr(slm_errmsg(), "cannot create"));
    // Flat directory removal: files go, a missing directory is fine, a subdirectory is refused.
    CHECK_OK(slm_mkdir_p(sub));
    char *inner = slm_path_join(sub, "deeper");
    CHECK_OK(slm_mkdir_p(inner));
    CHECK_EQ_INT(slm_rmdir_flat(dir), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), dir) && strstr(slm_errmsg(), "rmdir"));
    CHECK(!slm_is_file(a) && slm_is_dir(sub)); // the plain files went
    // The quiet form keeps the message of the error being reported.
    slm_fail(SLM_E_IO, "the real error");
    slm_rmdir_flat_quiet(dir);
    CHECK_EQ_STR(slm_errmsg(), "the real error");
    rmdir(inner);
    rmdir(sub);
    CHECK_OK(slm_rmdir_flat(dir));
    CHECK(!slm_is_dir(dir));
    CHECK_OK(slm_rmdir_flat(dir));
    free(data);
    free(a), free(b), free(sub), free(missing), free(nodir), free(inner);
}

static void test_path_parent_and_json_file(void) {
    const char *in[] = {"a/b/c.txt", "/top", "plain", "/x/y/"};
    const char *want[] = {"a/b", "/", ".", "/x/y"};
    for (int i = 0; i < 4; i++) {
        char *p = slm_path_parent(in[i]);
        CHECK_EQ_STR(p, want[i]);
        free(p);
    }
    char dir[] = "/tmp/slm_test_json_XXXXXX";
    CHECK(mkdtemp(dir));
    char *f = slm_path_join(dir, "o.json");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n", 3);
    CHECK_OK(slm_json_write_file(f, o));
    cJSON_Delete(o);
    char *txt = NULL;
    size_t len = 0;
    CHECK_OK(slm_file_read_all(f, &txt, &len));
    CHECK_EQ_STR(txt, "{\n\t\"n\":\t3\n}\n");
    free(txt);
    CHECK_OK(slm_rmdir_flat(dir));
    free(f);
}

static void test_stop_flag(void) {
    slm_stop_reset();
    CHECK(!slm_stop_requested());
    slm_stop_install(NULL, NULL);
    raise(SIGTERM); // the handler records it instead of ending the process
    CHECK(slm_stop_requested());
    CHECK_EQ_INT(slm_stop_signal(), SIGTERM);
    raise(SIGINT); // quiet: no messages were given; the first signal stays recorded
    CHECK_EQ_INT(slm_stop_signal(), SIGTERM);
    slm_stop_restore();
    struct sigaction now;
    sigaction(SIGTERM, NULL, &now);
    CHECK(now.sa_handler == SIG_DFL);
    CHECK(slm_stop_preempted()); // SIGTERM is a preemption
    CHECK(slm_stop_signal_time() > 0 && slm_stop_signal_time() <= slm_time_s());
    slm_stop_reset();
    CHECK(!slm_stop_requested() && slm_stop_signal() == 0 && !slm_stop_preempted());
    CHECK(slm_stop_signal_time() == 0);
    slm_stop_request();
    CHECK(slm_stop_requested() && slm_stop_signal() == 0 && !slm_stop_preempted());
    slm_stop_reset();
    // SIGINT stops without preempting; a later SIGUSR1 marks the stop as a preemption
    slm_stop_install(NULL, NULL);
    raise(SIGINT);
    CHECK(slm_stop_requested() && !slm_stop_preempted());
    raise(SIGUSR1);
    CHECK(slm_stop_preempted());
    CHECK_EQ_INT(slm_stop_signal(), SIGINT);
    slm_stop_restore();
    struct sigaction usr1;
    sigaction(SIGUSR1, NULL, &usr1);
    CHECK(usr1.sa_handler == SIG_DFL);
    slm_stop_reset();
}

// Byte formatting (the memory probe has its own test, test_mem).
static void test_sizes(void) {
    char buf[32];
    CHECK_EQ_STR(slm_fmt_bytes(512, buf), "512 bytes");
    CHECK_EQ_STR(slm_fmt_bytes(1536, buf), "1.50 KiB");
    CHECK_EQ_STR(slm_fmt_bytes(3.0 * 1024 * 1024 * 1024, buf), "3.00 GiB");
}

int main(void) {
    RUN(test_le);
    RUN(test_bf16);
    RUN(test_fp16);
    RUN(test_dtype_names);
    RUN(test_json);
    RUN(test_files);
    RUN(test_path_parent_and_json_file);
    RUN(test_stop_flag);
    RUN(test_sizes);
    return TEST_SUMMARY();
}
