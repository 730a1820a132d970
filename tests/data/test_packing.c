// Instruction data on disk and in the loader: version-2 shards (per-token flags) written,
// verified and refused when inconsistent; masked datasets packed into windows (greedy, whole
// samples, cut to T+1, padded) or one sample per window (no_packing), with the expected targets
// and positions worked out by hand from docs/formats.md "Instruction data".
#include "data_test_util.h"
#include "test.h"

#define V 1000
#define EOS (V - 1)

// Sample lengths (stream order) and their split over two shards: 3 + 5 + 9 | 2 + 12 + 4.
static const int k_lens[] = {3, 5, 9, 2, 12, 4};
#define N_SAMPLES 6
static char *g_dir;

// Token i of the stream is 10 + i; its target flag is set iff i % 3 != 0.
static slm_status make_masked(const char *dir) {
    slm_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.dir = slm_xstrdup(dir);
    ds.tokenizer_file = slm_path_join(dir, "tok.json");
    ds.tokenizer_type = slm_xstrdup("byte_bpe");
    const char *tok = "{\"dummy\": true}\n";
    slm_status st = slm_file_write_atomic(ds.tokenizer_file, tok, strlen(tok));
    ds.tokenizer_xxh64 = slm_xxh64(tok, strlen(tok), 0);
    ds.vocab_size = V;
    ds.bos_id = -1;
    ds.eos_id = EOS;
    ds.token_bytes = 2;
    ds.seed = 1;
    ds.masked = true;
    ds.sample_format = slm_xstrdup("chat");
    ds.chat_template = slm_xstrdup("llama3");
    ds.train.shards = slm_xcalloc(2, sizeof(slm_shard_info));
    int64_t next = 0;
    for (int s = 0; s < 2 && !st; s++) {
        int32_t ids[64];
        uint8_t fl[64];
        int64_t n = 0;
        for (int k = 3 * s; k < 3 * s + 3; k++)
            for (int j = 0; j < k_lens[k]; j++, n++, next++) {
                ids[n] = (int32_t)(10 + next);
                fl[n] = (uint8_t)((next % 3 ? SLM_TOKF_TARGET : 0) | (j == 0 ? SLM_TOKF_START : 0));
            }
        char name[32];
        snprintf(name, sizeof name, "train_%d.bin", s);
        char *p = slm_path_join(dir, name);
        st = slm_shard_write_masked(p, ids, fl, (uint64_t)n, 3, V);
        slm_shard_info *si = &ds.train.shards[ds.train.n_shards++];
        si->file = slm_xstrdup(name);
        si->n_tokens = (uint64_t)n;
        si->n_docs = 3;
        si->bytes = SLM_SHARD_HEADER_BYTES + (uint64_t)n * 3;
        if (!st) st = slm_file_xxh64(p, &si->xxh64);
        free(p);
        ds.train.n_tokens += si->n_tokens;
        ds.train.n_docs += si->n_docs;
    }
    if (!st) st = slm_dataset_write(&ds);
    slm_dataset_free(&ds);
    return st;
}

static int64_t sample_start(int k) {
    int64_t s = 0;
    for (int i = 0; i < k; i++)
        s += k_lens[i];
    return s;
}

// Checks window `w` [T+1] against the samples first..last (stream order), cut to T+1.
static void check_window(const int32_t *tok, const uint8_t *tg, const int32_t *pos, int T,
                         int first, int last) {
    int t = 0;
    for (int k = first; k <= last; k++) {
        int64_t s0 = sample_start(k);
        for (int j = 0; j < k_lens[k] && t <= T; j++, t++) {
            CHECK_EQ_INT(tok[t], 10 + (int)(s0 + j));
            CHECK_EQ_INT(tg[t], j > 0 && (s0 + j) % 3 != 0);
            CHECK_EQ_INT(pos[t], j);
        }
    }
    for (int j = 0; t <= T; t++, j++) { // padding: EOS, never a target, positions from 0
        CHECK_EQ_INT(tok[t], EOS);
        CHECK_EQ_INT(tg[t], 0);
        CHECK_EQ_INT(pos[t], j);
    }
}

static void walk(bool no_packing, const int (*want)[2], int n_want) {
    const int T = 9; // windows of 10 tokens
    slm_loader_opts o = {g_dir, "train", T, 1, 0, 1, 1, false, no_packing, 0};
    slm_loader *l = NULL;
    CHECK_OK(slm_loader_open(&o, &l));
    if (!l) return;
    CHECK(slm_loader_masked(l));
    CHECK_EQ_INT(slm_loader_n_windows(l), n_want);
    int32_t tok[10], pos[10];
    uint8_t tg[10];
    for (int w = 0; w < n_want; w++) {
        CHECK_EQ_INT(slm_loader_next_val_ex(l, tok, tg, pos), 1);
        check_window(tok, tg, pos, T, want[w][0], want[w][1]);
    }
    CHECK_EQ_INT(slm_loader_next_val_ex(l, tok, tg, pos), 0);
    slm_loader_free(l);
}

static void test_packed_windows(void) {
    // greedy into 10 tokens: [3 5] [9] [2] [12 -> cut to 10] [4]
    static const int want[][2] = {{0, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}};
    walk(false, want, 5);
}

static void test_no_packing(void) {
    static const int want[][2] = {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}};
    walk(true, want, 6);
}

static void test_shuffled_cover(void) {
    // a shuffled epoch of 5 windows holds every window once (the permutation acts on windows)
    slm_loader_opts o = {g_dir, "train", 9, 5, 0, 1, 3, true, false, 0};
    slm_loader *l = NULL;
    CHECK_OK(slm_loader_open(&o, &l));
    if (!l) return;
    int32_t tok[50], pos[50];
    uint8_t tg[50];
    slm_loader_next_ex(l, tok, tg, pos);
    int seen[5] = {0};
    static const int first_tok[5] = {10, 18, 27, 29, 41};
    for (int w = 0; w < 5; w++)
        for (int k = 0; k < 5; k++)
            seen[k] += tok[w * 10] == first_tok[k];
    for (int k = 0; k < 5; k++)
        CHECK_EQ_INT(seen[k], 1);
    slm_loader_free(l);
}

static void test_bad_flags(void) {
    char *d = tu_mkdtemp();
    char *p = slm_path_join(d, "x.bin");
    int32_t ids[4] = {1, 2, 3, 4};
    uint8_t no_start[4] = {0, 1, 1, 1}, bad_bit[4] = {2, 4, 1, 1}, ok[4] = {2, 1, 3, 1};
    CHECK_EQ_INT(slm_shard_write_masked(p, ids, no_start, 4, 1, V), SLM_E_ARG);
    CHECK_EQ_INT(slm_shard_write_masked(p, ids, bad_bit, 4, 1, V), SLM_E_ARG);
    CHECK_EQ_INT(slm_shard_write_masked(p, ids, ok, 4, 1, V), SLM_E_ARG); // 2 starts, n_docs 1
    CHECK_OK(slm_shard_write_masked(p, ids, ok, 4, 2, V));
    slm_map m = {0};
    slm_shard_header h;
    CHECK_OK(slm_map_file(p, &m));
    CHECK_OK(slm_shard_verify(p, m.data, m.len, V, &h));
    CHECK(h.masked && h.version == 2 && h.n_tokens == 4 && h.n_docs == 2);
    CHECK_EQ_INT(m.len, 64 + 4 * 3);
    CHECK_EQ_INT(slm_shard_flags(m.data + 64, h.token_bytes, h.n_tokens, 2), 3);
    // a truncated flags array is refused by the size check
    CHECK_EQ_INT(slm_shard_parse_header(p, m.data, m.len - 1, &h), SLM_E_FORMAT);
    slm_map_free(&m);
    free(p);
    tu_rmdir(d);
}

static void test_plain_dataset_refuses_v2_shard(void) {
    // a version-2 shard listed by a format_version 1 manifest is refused naming the file
    char *d = tu_mkdtemp();
    int64_t sizes[1] = {20};
    CHECK_OK(tu_make_dataset(d, sizes, 1, 0, V, 0));
    char *p = slm_path_join(d, "train_0000.bin");
    int32_t ids[20];
    uint8_t fl[20];
    for (int i = 0; i < 20; i++)
        ids[i] = i, fl[i] = i == 0 ? SLM_TOKF_START : SLM_TOKF_TARGET;
    CHECK_OK(slm_shard_write_masked(p, ids, fl, 20, 1, V));
    slm_dataset ds;
    CHECK_OK(slm_dataset_open(d, &ds));
    ds.train.shards[0].bytes = 64 + 20 * 3;
    CHECK_OK(slm_file_xxh64(p, &ds.train.shards[0].xxh64));
    slm_map m = {0};
    slm_shard_header h;
    CHECK_EQ_INT(slm_shard_open_verified(&ds, &ds.train.shards[0], &m, &h), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "train_0000.bin") && strstr(slm_errmsg(), "version-2"), "%s",
              slm_errmsg());
    slm_dataset_free(&ds);
    free(p);
    tu_rmdir(d);
}

int main(void) {
    g_dir = tu_mkdtemp();
    if (make_masked(g_dir)) {
        fprintf(stderr, "cannot make dataset: %s\n", slm_errmsg());
        return 1;
    }
    RUN(test_packed_windows);
    RUN(test_no_packing);
    RUN(test_shuffled_cover);
    RUN(test_bad_flags);
    RUN(test_plain_dataset_refuses_v2_shard);
    tu_rmdir(g_dir);
    return TEST_SUMMARY();
}
