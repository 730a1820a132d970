// .slt tensor files: C write -> C read round trip, and clean errors on corrupt files.
#include "reference/slm_tensors.h"
#include "test.h"

#include <unistd.h>

static void test_roundtrip_and_corrupt(void) {
    char path[] = "/tmp/slm_tensors_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    slm_tensor_set s = {0}, r = {0};
    float a[6] = {1, -2, 3.5f, 4, 5, 6e-8f};
    int32_t b[3] = {7, -1, 2147483647};
    double c[1] = {0.1};
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    slm_tset_add(&s, "param/a", SLM_T_F32, 2, sa, a);
    slm_tset_add(&s, "tokens", SLM_T_I32, 1, sb, b);
    slm_tset_add(&s, "scalar", SLM_T_F64, 0, NULL, c);
    slm_tset_set_meta(&s, "{\"step\": 3}");
    CHECK_OK(slm_tset_save(&s, path));
    CHECK_OK(slm_tset_load(&r, path));
    CHECK_EQ_INT(r.n, 3);
    const slm_tensor *t = slm_tset_get(&r, "param/a");
    CHECK(t && t->dtype == SLM_T_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3);
    CHECK(memcmp(t->data, a, sizeof a) == 0);
    t = slm_tset_get(&r, "tokens");
    CHECK(t && t->dtype == SLM_T_I32 && memcmp(t->data, b, sizeof b) == 0);
    t = slm_tset_get(&r, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1 && ((double *)t->data)[0] == 0.1);
    CHECK(r.meta_json && strstr(r.meta_json, "\"step\":3"));
    CHECK(slm_tset_get(&r, "nope") == NULL);
    slm_tset_free(&r);

    // truncated: the last tensor runs past the end
    char *raw = NULL;
    size_t len = 0;
    CHECK_OK(slm_file_read_all(path, &raw, &len));
    CHECK_OK(slm_file_write_atomic(path, raw, len - 8));
    CHECK_EQ_INT(slm_tset_load(&r, path), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "past the end"), "message: %s", slm_errmsg());
    raw[0] = 'X'; // bad magic
    CHECK_OK(slm_file_write_atomic(path, raw, len));
    CHECK_EQ_INT(slm_tset_load(&r, path), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "magic"), "message: %s", slm_errmsg());
    free(raw);
    CHECK(r.n == 0 && r.t == NULL);
    unlink(path);
    CHECK_EQ_INT(slm_tset_load(&r, path), SLM_E_IO);
    slm_tset_free(&s);
}

int main(void) {
    RUN(test_roundtrip_and_corrupt);
    return TEST_SUMMARY();
}
