// Shard file and manifest tests: byte layout against an independently built header (fields
// packed by hand here, hash from the xxHash library directly), round trips, and every corruption
// the loader must refuse at open with a message naming the file.
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "data_test_util.h"
#include "test.h"

static uint8_t *read_file(const char *path, size_t *len) {
    char *d = NULL;
    if (slm_file_read_all(path, &d, len)) return NULL;
    return (uint8_t *)d;
}

static void le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void check_layout(uint32_t vocab, int tb) {
    char *dir = tu_mkdtemp();
    char *p = slm_path_join(dir, "s.bin");
    int32_t toks[5] = {0, 1, 258, (int32_t)vocab - 1, 7};
    CHECK_OK(slm_shard_write(p, toks, 5, 2, vocab));
    size_t len = 0;
    uint8_t *d = read_file(p, &len);
    CHECK(d != NULL);
    CHECK_EQ_INT(len, 64 + 5 * tb);
    uint8_t want[64 + 20] = {0};
    memcpy(want, "SLMSHRD1", 8);
    le(want + 8, 1, 4);
    le(want + 12, (uint64_t)tb, 4);
    le(want + 16, 5, 8);
    le(want + 24, 2, 8);
    for (int i = 0; i < 5; i++)
        le(want + 64 + i * tb, (uint64_t)toks[i], tb);
    le(want + 32, XXH64(want + 64, (size_t)(5 * tb), 0), 8);
    le(want + 40, vocab, 4);
    CHECK_MSG(memcmp(d, want, len) == 0, "shard bytes differ from the hand-built layout");
    slm_shard_header h;
    CHECK_OK(slm_shard_verify(p, d, len, vocab, &h));
    CHECK_EQ_INT(h.n_tokens, 5);
    CHECK_EQ_INT(h.n_docs, 2);
    CHECK_EQ_INT(h.token_bytes, tb);
    CHECK_EQ_INT(h.vocab_size, vocab);
    free(d);
    free(p);
    tu_rmdir(dir);
}

static void test_layout_u16(void) {
    check_layout(32000, 2);
}
static void test_layout_u16_edge(void) {
    check_layout(65536, 2);
}
static void test_layout_u32(void) {
    check_layout(128256, 4);
}

static void test_write_rejects_token(void) {
    char *dir = tu_mkdtemp();
    char *p = slm_path_join(dir, "s.bin");
    int32_t toks[3] = {1, 1000, 2};
    CHECK_EQ_INT(slm_shard_write(p, toks, 3, 1, 1000), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "token 1 is 1000") != NULL);
    CHECK(!slm_is_file(p));
    int32_t neg[1] = {-1};
    CHECK_EQ_INT(slm_shard_write(p, neg, 1, 1, 1000), SLM_E_ARG);
    free(p);
    tu_rmdir(dir);
}

// Header parse on hand-damaged buffers.
static void test_header_errors(void) {
    uint8_t b[64 + 4] = {0};
    memcpy(b, "SLMSHRD1", 8);
    le(b + 8, 1, 4);
    le(b + 12, 2, 4);
    le(b + 16, 2, 8);
    le(b + 24, 1, 8);
    le(b + 40, 100, 4);
    slm_shard_header h;
    CHECK_OK(slm_shard_parse_header("x.bin", b, sizeof b, &h));
    CHECK_EQ_INT(slm_shard_parse_header("x.bin", b, 63, &h), SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "x.bin") && strstr(slm_errmsg(), "truncated"));
    CHECK_EQ_INT(slm_shard_parse_header("x.bin", b, sizeof b - 1, &h), SLM_E_FORMAT);
    uint8_t c[sizeof b];
    memcpy(c, b, sizeof b);
    c[0] = 'X';
    CHECK_EQ_INT(slm_shard_parse_header("x.bin", c, sizeof c, &h), SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "magic"));
    memcpy(c, b, sizeof b);
    c[8] = 2; // version 2
    CHECK_EQ_INT(slm_shard_parse_header("x.bin", c, sizeof c, &h), SLM_E_FORMAT);
    memcpy(c, b, sizeof b);
    c[12] = 4; // width 4 with a 100-token vocab
    CHECK_EQ_INT(slm_shard_parse_header("x.bin", c, sizeof c, &h), SLM_E_FORMAT);
    memcpy(c, b, sizeof b);
    c[50] = 1; // reserved byte
    CHECK_EQ_INT(slm_shard_parse_header("x.bin", c, sizeof c, &h), SLM_E_FORMAT);
    memcpy(c, b, sizeof b);
    le(c + 16, UINT64_MAX / 2, 8); // absurd token count must not overflow the size check
    CHECK_EQ_INT(slm_shard_parse_header("x.bin", c, sizeof c, &h), SLM_E_FORMAT);
}

// --- Corruption seen through the loader ---------------------------------------------------

static const int64_t SIZES[] = {50, 60};

static slm_status open_at(const char *dir) {
    slm_loader_opts o = {dir, "train", 4, 2, 0, 1, 1, true, false, 0};
    slm_loader *l = NULL;
    slm_status st = slm_loader_open(&o, &l);
    slm_loader_free(l);
    return st;
}

static void patch_byte(const char *path, long off, int xor_with) {
    int fd = open(path, O_RDWR);
    uint8_t c = 0;
    if (pread(fd, &c, 1, off) == 1) {
        c ^= (uint8_t)xor_with;
        if (pwrite(fd, &c, 1, off) != 1) perror("pwrite");
    }
    close(fd);
}

static void test_loader_ok(void) {
    char *dir = tu_mkdtemp();
    CHECK_OK(tu_make_dataset(dir, SIZES, 2, 0, 1000, 0));
    CHECK_OK(open_at(dir));
    tu_rmdir(dir);
}

static void test_flip_payload_byte(void) {
    char *dir = tu_mkdtemp();
    CHECK_OK(tu_make_dataset(dir, SIZES, 2, 0, 1000, 0));
    char *p = slm_path_join(dir, "train_0001.bin");
    patch_byte(p, 64 + 17, 0x01);
    CHECK_EQ_INT(open_at(dir), SLM_E_CHECKSUM);
    CHECK_MSG(strstr(slm_errmsg(), "train_0001.bin") && strstr(slm_errmsg(), "checksum"), "%s",
              slm_errmsg());
    // The shard's own check (header hash vs payload) catches it without the manifest too.
    size_t len;
    uint8_t *d = read_file(p, &len);
    slm_shard_header h;
    CHECK_EQ_INT(slm_shard_verify(p, d, len, 0, &h), SLM_E_CHECKSUM);
    CHECK(strstr(slm_errmsg(), "train_0001.bin"));
    free(d);
    free(p);
    tu_rmdir(dir);
}

static void test_truncated(void) {
    char *dir = tu_mkdtemp();
    CHECK_OK(tu_make_dataset(dir, SIZES, 2, 0, 1000, 0));
    char *p = slm_path_join(dir, "train_0000.bin");
    CHECK(truncate(p, 64 + 2 * 50 - 3) == 0);
    CHECK_EQ_INT(open_at(dir), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "train_0000.bin") && strstr(slm_errmsg(), "truncated"), "%s",
              slm_errmsg());
    size_t len;
    uint8_t *d = read_file(p, &len);
    slm_shard_header h;
    CHECK_EQ_INT(slm_shard_verify(p, d, len, 0, &h), SLM_E_FORMAT);
    free(d);
    free(p);
    tu_rmdir(dir);
}

// Rewrites a manifest entry's hash so that only the shard-level check can catch the damage.
static void rehash_in_manifest(const char *dir, const char *shard) {
    slm_dataset ds;
    if (slm_dataset_open(dir, &ds)) return;
    for (int i = 0; i < ds.train.n_shards; i++)
        if (!strcmp(ds.train.shards[i].file, shard)) {
            char *p = slm_path_join(dir, shard);
            slm_file_xxh64(p, &ds.train.shards[i].xxh64);
            free(p);
        }
    slm_dataset_write(&ds);
    slm_dataset_free(&ds);
}

static void test_wrong_magic(void) {
    char *dir = tu_mkdtemp();
    CHECK_OK(tu_make_dataset(dir, SIZES, 2, 0, 1000, 0));
    char *p = slm_path_join(dir, "train_0000.bin");
    patch_byte(p, 3, 0x20);
    rehash_in_manifest(dir, "train_0000.bin");
    CHECK_EQ_INT(open_at(dir), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "train_0000.bin") && strstr(slm_errmsg(), "magic"), "%s",
              slm_errmsg());
    free(p);
    tu_rmdir(dir);
}

// A token >= vocab with a consistent header hash and manifest: caught by the token scan.
static void test_token_out_of_vocab(void) {
    char *dir = tu_mkdtemp();
    CHECK_OK(tu_make_dataset(dir, SIZES, 2, 0, 1000, 0));
    char *p = slm_path_join(dir, "train_0001.bin");
    size_t len;
    uint8_t *d = read_file(p, &len);
    le(d + 64 + 2 * 10, 1000, 2); // token 10 := 1000 = vocab
    le(d + 32, XXH64(d + 64, len - 64, 0), 8);
    CHECK_OK(slm_file_write_atomic(p, d, len));
    free(d);
    rehash_in_manifest(dir, "train_0001.bin");
    CHECK_EQ_INT(open_at(dir), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "train_0001.bin") && strstr(slm_errmsg(), "token 10 is 1000"),
              "%s", slm_errmsg());
    free(p);
    tu_rmdir(dir);
}

static void test_missing_shard_and_tokenizer(void) {
    char *dir = tu_mkdtemp();
    CHECK_OK(tu_make_dataset(dir, SIZES, 2, 0, 1000, 0));
    char *p = slm_path_join(dir, "train_0001.bin");
    unlink(p);
    CHECK_EQ_INT(open_at(dir), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "train_0001.bin"));
    free(p);
    tu_rmdir(dir);
    dir = tu_mkdtemp();
    CHECK_OK(tu_make_dataset(dir, SIZES, 2, 0, 1000, 0));
    p = slm_path_join(dir, "tok.json");
    CHECK_OK(slm_file_write_atomic(p, "{}", 2));
    CHECK_EQ_INT(open_at(dir), SLM_E_CHECKSUM);
    CHECK(strstr(slm_errmsg(), "tok.json"));
    free(p);
    tu_rmdir(dir);
}

static void test_manifest_missing(void) {
    char *dir = tu_mkdtemp();
    slm_dataset ds;
    CHECK_EQ_INT(slm_dataset_open(dir, &ds), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "no manifest.json") && strstr(slm_errmsg(), dir));
    slm_dataset_free(&ds);
    tu_rmdir(dir);
}

// Parses a manifest made from the good one with one textual replacement.
static slm_status parse_variant(const char *good, const char *from, const char *to) {
    const char *at = strstr(good, from);
    if (!at) {
        fprintf(stderr, "  (variant source \"%s\" not found)\n", from);
        return SLM_E_ARG;
    }
    slm_buf b = {0};
    slm_buf_append(&b, good, (size_t)(at - good));
    slm_buf_append(&b, to, strlen(to));
    slm_buf_append(&b, at + strlen(from), strlen(at + strlen(from)));
    slm_dataset ds;
    slm_status st = slm_dataset_parse("/d", "/d/manifest.json", b.data, b.len, &ds);
    slm_dataset_free(&ds);
    slm_buf_free(&b);
    return st;
}

static void test_manifest_malformed(void) {
    char *dir = tu_mkdtemp();
    CHECK_OK(tu_make_dataset(dir, SIZES, 2, 7, 1000, 0));
    char *mp = slm_path_join(dir, "manifest.json");
    char *good = NULL;
    size_t len = 0;
    CHECK_OK(slm_file_read_all(mp, &good, &len));
    slm_dataset ds;
    CHECK_OK(slm_dataset_parse(dir, mp, good, len, &ds));
    CHECK_EQ_INT(ds.train.n_shards, 2);
    CHECK_EQ_INT(ds.train.n_tokens, 110);
    CHECK_EQ_INT(ds.val.n_tokens, 7);
    CHECK_EQ_INT(ds.vocab_size, 1000);
    CHECK_EQ_INT(ds.token_bytes, 2);
    CHECK_EQ_INT(ds.seed, 7);
    CHECK_CLOSE(ds.val_fraction, 0.1, 0, 0);
    slm_dataset_free(&ds);
    // Truncated JSON.
    CHECK_EQ_INT(slm_dataset_parse(dir, mp, good, len / 2, &ds), SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "manifest.json") && strstr(slm_errmsg(), "malformed JSON"));
    slm_dataset_free(&ds);
    CHECK_EQ_INT(parse_variant(good, "\"n_tokens\"", "\"n_tokenz\""), SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "n_tokens"));
    CHECK_EQ_INT(parse_variant(good, "\"train_0000.bin\"", "\"../etc/passwd\""), SLM_E_FORMAT);
    CHECK_EQ_INT(parse_variant(good, "\"split\":\t\"train\"", "\"split\":\t\"test\""),
                 SLM_E_FORMAT);
    CHECK_EQ_INT(parse_variant(good, "\"format_version\":\t1", "\"format_version\":\t2"),
                 SLM_E_FORMAT);
    CHECK_EQ_INT(parse_variant(good, "\"token_bytes\":\t2", "\"token_bytes\":\t4"), SLM_E_FORMAT);
    CHECK_EQ_INT(parse_variant(good, "\"vocab_size\":\t1000", "\"vocab_size\":\t\"1000\""),
                 SLM_E_FORMAT);
    CHECK_EQ_INT(parse_variant(good, "\"n_tokens\":\t50", "\"n_tokens\":\t51"), SLM_E_FORMAT);
    CHECK_EQ_INT(parse_variant(good, "{", "["), SLM_E_FORMAT);
    free(good);
    free(mp);
    tu_rmdir(dir);
}

// One verified open (issue 9 item 4): the loader and the unigram entropy go through
// slm_shard_open_verified; its mapping is released on every error.
static void test_open_verified_and_entropy(void) {
    char *dir = tu_mkdtemp();
    CHECK_OK(tu_make_dataset(dir, SIZES, 2, 0, 1000, 0));
    slm_dataset ds;
    CHECK_OK(slm_dataset_open(dir, &ds));
    slm_map map = {0};
    slm_shard_header h;
    CHECK_OK(slm_shard_open_verified(&ds, &ds.train.shards[1], &map, &h));
    CHECK(map.len == SLM_SHARD_HEADER_BYTES + 2 * 60 && h.n_tokens == 60 && h.token_bytes == 2);
    // The second shard continues the stream 0, 1, ...: its first token is 50.
    CHECK_EQ_INT(slm_shard_token(map.data + SLM_SHARD_HEADER_BYTES, h.token_bytes, 0), 50);
    CHECK_EQ_INT(slm_shard_token(map.data + SLM_SHARD_HEADER_BYTES, h.token_bytes, 59), 109);
    slm_map_free(&map);
    // 110 distinct tokens, once each: H = ln 110.
    double nats = 0;
    int64_t n = 0;
    CHECK_OK(slm_split_unigram_entropy(dir, "train", &nats, &n));
    CHECK_EQ_INT(n, 110);
    CHECK_CLOSE(nats, log(110.0), 1e-12, 0);
    CHECK_EQ_INT(slm_split_unigram_entropy(dir, "test", &nats, &n), SLM_E_ARG);
    // A corrupt shard: the same checksum refusal as the loader's, nothing left mapped.
    char *p = slm_path_join(dir, "train_0001.bin");
    patch_byte(p, 64 + 17, 0x01);
    CHECK_EQ_INT(slm_shard_open_verified(&ds, &ds.train.shards[1], &map, &h), SLM_E_CHECKSUM);
    CHECK(map.data == NULL && map.len == 0);
    CHECK_EQ_INT(slm_split_unigram_entropy(dir, "train", &nats, &n), SLM_E_CHECKSUM);
    CHECK_MSG(strstr(slm_errmsg(), "train_0001.bin") && strstr(slm_errmsg(), "HINT: rerun"), "%s",
              slm_errmsg());
    free(p);
    slm_dataset_free(&ds);
    tu_rmdir(dir);
}

int main(void) {
    RUN(test_layout_u16);
    RUN(test_layout_u16_edge);
    RUN(test_layout_u32);
    RUN(test_write_rejects_token);
    RUN(test_header_errors);
    RUN(test_loader_ok);
    RUN(test_flip_payload_byte);
    RUN(test_truncated);
    RUN(test_wrong_magic);
    RUN(test_token_out_of_vocab);
    RUN(test_missing_shard_and_tokenizer);
    RUN(test_manifest_missing);
    RUN(test_manifest_malformed);
    RUN(test_open_verified_and_entropy);
    return TEST_SUMMARY();
}
