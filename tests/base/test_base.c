// base/: hashing against published XXH64 values, RNG determinism and ranges, buffers, atomic
// writes (a failed write leaves the old file), number parsing, host task parallelism.
#include "base/base.h"
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

static void test_xxh64_known_values(void) {
    // Reference values from the xxHash specification / xxhsum: XXH64("") = ef46db3751d8e999,
    // XXH64("a") = d24ec4f1a98c6e5b (seed 0).
    char hex[17];
    slm_hex64(slm_xxh64("", 0, 0), hex);
    CHECK_EQ_STR(hex, "ef46db3751d8e999");
    slm_hex64(slm_xxh64("a", 1, 0), hex);
    CHECK_EQ_STR(hex, "d24ec4f1a98c6e5b");
    uint64_t back = 0;
    CHECK(slm_parse_hex64(hex, &back));
    CHECK(back == 0xd24ec4f1a98c6e5bULL);
    CHECK(!slm_parse_hex64("d24ec4f1a98c6e5", &back));
    CHECK(!slm_parse_hex64("x24ec4f1a98c6e5b", &back));
}

static void test_rng(void) {
    slm_rng a, b;
    slm_rng_seed(&a, 42);
    slm_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++)
        CHECK(slm_rng_u64(&a) == slm_rng_u64(&b));
    slm_rng_seed(&b, 43);
    CHECK(slm_rng_u64(&a) != slm_rng_u64(&b));
    // Moments of the normal and uniform streams.
    double s = 0, s2 = 0, u = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = slm_rng_normal(&a);
        s += x;
        s2 += x * x;
        float f = slm_rng_uniform(&a);
        CHECK(f >= 0.0f && f < 1.0f);
        u += f;
        CHECK(slm_rng_below(&a, 7) < 7);
    }
    CHECK_CLOSE(s / n, 0.0, 0, 0.01);
    CHECK_CLOSE(s2 / n, 1.0, 0, 0.02);
    CHECK_CLOSE(u / n, 0.5, 0, 0.01);
}

static void test_buf(void) {
    slm_buf b = {0};
    for (int i = 0; i < 1000; i++)
        slm_buf_appendf(&b, "%d,", i);
    CHECK(b.len > 3000);
    CHECK(!strncmp(b.data, "0,1,2,", 6));
    CHECK(b.data[b.len] == 0);
    slm_buf_free(&b);
    slm_buf_free(&b); // safe twice
    slm_ivec v = {0};
    for (int i = 0; i < 100000; i++)
        slm_ivec_push(&v, i);
    CHECK_EQ_INT(v.len, 100000);
    CHECK_EQ_INT(v.data[99999], 99999);
    slm_ivec_free(&v);
}

static void test_atomic_write(void) {
    char dir[] = "/tmp/slm_test_base_XXXXXX";
    CHECK(mkdtemp(dir));
    char *p = slm_path_join(dir, "f.txt");
    CHECK_OK(slm_file_write_atomic(p, "hello", 5));
    char *data = NULL;
    size_t len = 0;
    CHECK_OK(slm_file_read_all(p, &data, &len));
    CHECK_EQ_INT(len, 5);
    CHECK(!memcmp(data, "hello", 5));
    free(data);
    // A write into a missing directory fails with a message naming the path.
    char *bad = slm_path_join(dir, "missing/f.txt");
    CHECK_EQ_INT(slm_file_write_atomic(bad, "x", 1), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "missing/f.txt") != NULL);
    CHECK_EQ_INT(slm_file_read_all(bad, &data, &len), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "cannot open") != NULL);
    // mkdir -p and map.
    char *deep = slm_path_join(dir, "a/b/c");
    CHECK_OK(slm_mkdir_p(deep));
    CHECK(slm_is_dir(deep));
    slm_map m;
    CHECK_OK(slm_map_file(p, &m));
    CHECK_EQ_INT(m.len, 5);
    uint64_t h = 0;
    CHECK_OK(slm_file_xxh64(p, &h));
    CHECK(h == slm_xxh64("hello", 5, 0));
    slm_map_free(&m);
    unlink(p);
    free(p);
    free(bad);
    free(deep);
}

static void test_parse(void) {
    int64_t v = 0;
    double d = 0;
    CHECK_OK(slm_parse_i64("--steps", "120", 1, 1000, &v));
    CHECK_EQ_INT(v, 120);
    CHECK_EQ_INT(slm_parse_i64("--steps", "12x", 1, 1000, &v), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "--steps") && strstr(slm_errmsg(), "12x"));
    CHECK_EQ_INT(slm_parse_i64("--steps", "0", 1, 1000, &v), SLM_E_ARG);
    CHECK_OK(slm_parse_f64("--lr", "3e-4", &d));
    CHECK_CLOSE(d, 3e-4, 1e-12, 0);
    CHECK_EQ_INT(slm_parse_f64("--lr", "", &d), SLM_E_ARG);
}

// slm_parallel_tasks runs every task index exactly once (tasks of very uneven sizes, so the
// dynamic schedule interleaves them) and nothing for n == 0.
typedef struct task_ctx {
    int calls[1000];
    double sink[1000];
} task_ctx;
static void count_task(void *ctx, int i) {
    task_ctx *c = ctx;
    c->calls[i]++;
    double s = 0;
    for (int k = 0; k < (i % 7) * 1000; k++)
        s += (double)k * 1e-9;
    c->sink[i] = s;
}
static void test_parallel_tasks(void) {
    task_ctx *c = calloc(1, sizeof *c);
    slm_parallel_tasks(1000, count_task, c);
    int bad = 0;
    for (int i = 0; i < 1000; i++)
        bad += c->calls[i] != 1;
    CHECK_EQ_INT(bad, 0);
    slm_parallel_tasks(0, count_task, c);
    CHECK_EQ_INT(c->calls[0], 1);
    free(c);
}

int main(void) {
    RUN(test_xxh64_known_values);
    RUN(test_rng);
    RUN(test_buf);
    RUN(test_atomic_write);
    RUN(test_parse);
    RUN(test_parallel_tasks);
    return TEST_SUMMARY();
}
