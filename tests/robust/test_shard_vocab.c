// Shard header vocab_size (issue 8 item 30): a shard whose header claims a smaller vocabulary
// than its ids use is refused even when the dataset's vocabulary covers the ids; a header vocab
// above the dataset's is refused; a consistent shard passes.
#include <unistd.h>

#include "data/data.h"
#include "test.h"

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_header_vocab(void) {
    char path[] = "/tmp/slm_test_shard_vocab_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    const int32_t toks[] = {1, 7, 150, 3}; // id 150 needs a vocabulary of at least 151
    CHECK_OK(slm_shard_write(path, toks, 4, 1, 200));
    char *data = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &data, &len);
    unlink(path);
    CHECK_OK(st);
    uint8_t *d = (uint8_t *)data;
    slm_shard_header h;
    st = slm_shard_verify("s.bin", d, len, 200, &h);
    slm_status st_big = slm_shard_verify("s.bin", d, len, 151, &h); // dataset vocab < header's
    put_u32(d + 40, 100); // the header now claims vocab 100 (the payload checksum is unchanged)
    slm_status st_small = slm_shard_verify("s.bin", d, len, 200, &h);
    bool named = strstr(slm_errmsg(), "token 2 is 150") != NULL;
    slm_status st_small0 = slm_shard_verify("s.bin", d, len, 0, &h);
    put_u32(d + 40, 151); // the smallest vocabulary that holds id 150
    slm_status st_tight = slm_shard_verify("s.bin", d, len, 200, &h);
    free(data);
    CHECK_OK(st);
    CHECK_EQ_INT(st_big, SLM_E_FORMAT);
    CHECK_EQ_INT(st_small, SLM_E_FORMAT);
    CHECK_MSG(named, "message: %s", slm_errmsg());
    CHECK_EQ_INT(st_small0, SLM_E_FORMAT);
    CHECK_OK(st_tight);
}

int main(void) {
    RUN(test_header_vocab);
    return TEST_SUMMARY();
}
