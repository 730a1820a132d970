// Byte-level BPE unit tests: lossless round trip on random bytes, save/load identity,
// determinism across thread counts, special-token handling, thread-safe encode, clean errors.
// Exactness against an independent implementation (HF tokenizers) is in test_bpe_hf.py; the
// training algorithm against a naive recount-every-merge reference in test_bpe_train_ref.py.
#include <pthread.h>
#include <unistd.h>

#include "base/base.h"
#include "fixtures.h"
#include "test.h"
#include "tokenizer/bpe.h" // private to the module: the pre-tokenizer, for the chunking test
#include "tokenizer/tokenizer.h"

static char g_dir[256];      // temp dir for this run
static char g_corpus[512];   // ~200 KB of tinyshakespeare
static slm_tokenizer *g_tok; // trained on g_corpus with 1 thread
static char g_saved[512];    // g_tok saved

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_file(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) slm_fatal("cannot write %s", path);
    fputs(s, f);
    fclose(f);
}

static slm_tokenizer *train(int threads, int32_t vocab) {
    const char *inputs[] = {g_corpus};
    slm_bpe_train_opts o = {
        .inputs = inputs, .n_inputs = 1, .vocab_size = vocab, .threads = threads};
    slm_tokenizer *t = NULL;
    if (slm_bpe_train(&o, &t)) {
        fprintf(stderr, "train failed: %s\n", slm_errmsg());
        return NULL;
    }
    return t;
}

// encode -> decode must give the input back exactly.
static int roundtrip(const slm_tokenizer *t, const char *s, size_t n, int flags) {
    slm_ivec ids = {0};
    slm_buf out = {0};
    int ok = slm_tokenizer_encode(t, s, n, flags, &ids) == SLM_OK &&
             slm_tokenizer_decode(t, ids.data, ids.len, &out) == SLM_OK && out.len == n &&
             (n == 0 || memcmp(out.data, s, n) == 0);
    slm_ivec_free(&ids);
    slm_buf_free(&out);
    return ok;
}

static void test_train_shape(void) {
    CHECK(g_tok != NULL);
    CHECK_EQ_INT(slm_tokenizer_type(g_tok), SLM_TOK_BYTE_BPE);
    CHECK_EQ_INT(slm_tokenizer_vocab_size(g_tok), 800);
    // Specials are the last ids, in the order given (defaults: bos, eos, pad).
    CHECK_EQ_INT(slm_tokenizer_bos_id(g_tok), 797);
    CHECK_EQ_INT(slm_tokenizer_eos_id(g_tok), 798);
    CHECK_EQ_INT(slm_tokenizer_pad_id(g_tok), 799);
    CHECK_EQ_INT(slm_tokenizer_unk_id(g_tok), -1);
    CHECK_EQ_STR(slm_tokenizer_piece(g_tok, 797), "<|bos|>");
    // Byte ids are the byte values, written as GPT-2 byte symbols: ' ' -> U+0120, 'A' -> 'A'.
    CHECK_EQ_STR(slm_tokenizer_piece(g_tok, ' '), "\xc4\xa0");
    CHECK_EQ_STR(slm_tokenizer_piece(g_tok, 'A'), "A");
    CHECK_EQ_STR(slm_tokenizer_piece(g_tok, 0), "\xc4\x80");
    CHECK(slm_tokenizer_piece(g_tok, 800) == NULL);
    // Frequent words of the corpus became single tokens: " the" and "\n\n" in Shakespeare.
    slm_ivec ids = {0};
    CHECK_OK(slm_tokenizer_encode(g_tok, " the", 4, 0, &ids));
    CHECK_EQ_INT(ids.len, 1);
    CHECK_EQ_STR(slm_tokenizer_piece(g_tok, ids.data[0]), "\xc4\xa0the");
    slm_ivec_free(&ids);
}

static void test_roundtrip_random(void) {
    slm_rng r;
    slm_rng_seed(&r, 1234);
    // Fragments that stress the pre-tokenizer: UTF-8 pieces cut anywhere, spaces, contractions.
    static const char *frag[] = {" ",
                                 "  ",
                                 "\t",
                                 "\n",
                                 "\r\n",
                                 "'s",
                                 "'ll",
                                 "a",
                                 "Zz",
                                 "7",
                                 "12",
                                 "\xc3\xa9",
                                 "\xe4\xb8\xad",
                                 "\xf0\x9f\x98\x80",
                                 "\xcc\x81",
                                 "\xe2\x80\x8d",
                                 "\xc2\xa0",
                                 "\xe3\x80\x80",
                                 "<|bos|>",
                                 "!?",
                                 "\xff",
                                 "\xc3",
                                 "\xe4\xb8",
                                 "\x80",
                                 "\0"};
    const int n_frag = (int)(sizeof frag / sizeof *frag);
    char buf[2048];
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 0, want = slm_rng_below(&r, 400);
        int mode = (int)slm_rng_below(&r, 2);
        while (n < want) {
            if (mode == 0) { // raw random bytes: mostly invalid UTF-8
                buf[n++] = (char)slm_rng_below(&r, 256);
            } else {
                const char *f = frag[slm_rng_below(&r, (uint64_t)n_frag)];
                size_t k = f[0] ? strlen(f) : 1;
                if (n + k > sizeof buf) break;
                memcpy(buf + n, f, k);
                n += k;
            }
        }
        // "<|bos|>" in the text is plain text here (it would decode to nothing if matched).
        CHECK_MSG(roundtrip(g_tok, buf, n, 0), "round trip failed: iter %d, %zu bytes", iter, n);
    }
}

static void test_roundtrip_edge(void) {
    CHECK(roundtrip(g_tok, "", 0, 0));
    CHECK(roundtrip(g_tok, "\0\0\0", 3, 0));
    // Long runs: whitespace (regex backtracking on \s+(?!\S)), letters, invalid bytes.
    size_t n = 200000;
    char *s = slm_xmalloc(n + 1);
    const char fill[] = {' ', '\n', 'e', '\xff', '\t'};
    for (int k = 0; k < 5; k++) {
        memset(s, fill[k], n);
        s[n - 1] = 'x';
        CHECK_MSG(roundtrip(g_tok, s, n, 0), "run of 0x%02x", (unsigned char)fill[k]);
    }
    free(s);
    const char *t =
        "Hello \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd world \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96"
        "\xe7\x95\x8c e\xcc\x81\xcc\x81 tab\tCRLF\r\n   x  \n\n";
    CHECK(roundtrip(g_tok, t, strlen(t), 0));
}

static void test_save_load_identical(void) {
    slm_tokenizer *t = NULL;
    CHECK_OK(slm_tokenizer_load(g_saved, &t));
    CHECK_EQ_INT(slm_tokenizer_vocab_size(t), slm_tokenizer_vocab_size(g_tok));
    for (int32_t id = 0; id < slm_tokenizer_vocab_size(t); id++)
        CHECK_EQ_STR(slm_tokenizer_piece(t, id), slm_tokenizer_piece(g_tok, id));
    CHECK_EQ_INT(slm_tokenizer_bos_id(t), slm_tokenizer_bos_id(g_tok));
    CHECK_EQ_INT(slm_tokenizer_eos_id(t), slm_tokenizer_eos_id(g_tok));
    CHECK_EQ_INT(slm_tokenizer_pad_id(t), slm_tokenizer_pad_id(g_tok));
    // The hash is the XXH64 of the file; the trained tokenizer's is that of the same JSON.
    uint64_t fh = 0;
    CHECK_OK(slm_file_xxh64(g_saved, &fh));
    CHECK(slm_tokenizer_hash(t) == fh);
    CHECK(slm_tokenizer_hash(g_tok) == fh);
    // Saving the loaded tokenizer gives the same bytes (vocab, merges, everything).
    const char *again = tmp_path("again.json");
    CHECK_OK(slm_tokenizer_save_json(t, again));
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK_OK(slm_file_read_all(g_saved, &a, &na));
    CHECK_OK(slm_file_read_all(again, &b, &nb));
    int same = na == nb && memcmp(a, b, na) == 0;
    free(a);
    free(b);
    CHECK(same);
    // Encodes identically on the whole corpus.
    char *text = NULL;
    size_t nt = 0;
    CHECK_OK(slm_file_read_all(g_corpus, &text, &nt));
    slm_ivec x = {0}, y = {0};
    CHECK_OK(slm_tokenizer_encode(g_tok, text, nt, 0, &x));
    CHECK_OK(slm_tokenizer_encode(t, text, nt, 0, &y));
    int eq = x.len == y.len && memcmp(x.data, y.data, x.len * sizeof *x.data) == 0;
    CHECK_MSG(eq, "encodings differ (%zu vs %zu ids)", x.len, y.len);
    // The corpus compresses: well under one token per byte.
    CHECK_MSG(x.len < nt / 2, "%zu ids for %zu bytes", x.len, nt);
    free(text);
    slm_ivec_free(&x);
    slm_ivec_free(&y);
    slm_tokenizer_free(t);
}

static void test_deterministic_threads(void) {
    slm_tokenizer *t2 = train(2, 800);
    CHECK(t2 != NULL);
    const char *p2 = tmp_path("t2.json");
    CHECK_OK(slm_tokenizer_save_json(t2, p2));
    uint64_t h1 = 0, h2 = 0;
    CHECK_OK(slm_file_xxh64(g_saved, &h1));
    CHECK_OK(slm_file_xxh64(p2, &h2));
    CHECK_MSG(h1 == h2, "1-thread and 2-thread tokenizer.json differ");
    slm_tokenizer_free(t2);
}

static void test_specials(void) {
    const char *s = "<|bos|>Hi<|eos|> <|pad|>";
    slm_ivec ids = {0};
    CHECK_OK(slm_tokenizer_encode(g_tok, s, strlen(s), 0, &ids));
    for (size_t i = 0; i < ids.len; i++)
        CHECK(ids.data[i] < 797); // plain text only
    ids.len = 0;
    CHECK_OK(slm_tokenizer_encode(g_tok, s, strlen(s), SLM_ENC_ALLOW_SPECIAL, &ids));
    CHECK(ids.len >= 4);
    CHECK_EQ_INT(ids.data[0], 797);
    CHECK_EQ_INT(ids.data[ids.len - 1], 799);
    int n_eos = 0;
    for (size_t i = 0; i < ids.len; i++)
        n_eos += ids.data[i] == 798;
    CHECK_EQ_INT(n_eos, 1);
    // BOS/EOS/PAD decode to nothing.
    slm_buf out = {0};
    CHECK_OK(slm_tokenizer_decode(g_tok, ids.data, ids.len, &out));
    CHECK_EQ_STR(out.data, "Hi ");
    slm_buf_free(&out);
    // --bos / --eos flags.
    ids.len = 0;
    CHECK_OK(slm_tokenizer_encode(g_tok, "x", 1, SLM_ENC_ADD_BOS | SLM_ENC_ADD_EOS, &ids));
    CHECK_EQ_INT(ids.len, 3);
    CHECK_EQ_INT(ids.data[0], 797);
    CHECK_EQ_INT(ids.data[1], 'x');
    CHECK_EQ_INT(ids.data[2], 798);
    // Out-of-range ids are refused.
    int32_t bad = 800;
    CHECK_EQ_INT(slm_tokenizer_decode(g_tok, &bad, 1, &out), SLM_E_ARG);
    slm_buf_free(&out);
    slm_ivec_free(&ids);
}

typedef struct job {
    const slm_tokenizer *t;
    const char *text;
    size_t len;
    slm_ivec ids;
} job;

static void *encode_job(void *p) {
    job *j = p;
    for (int rep = 0; rep < 3; rep++) {
        j->ids.len = 0;
        if (slm_tokenizer_encode(j->t, j->text, j->len, 0, &j->ids)) return p;
    }
    return NULL;
}

static void test_concurrent_encode(void) {
    char *text = NULL;
    size_t nt = 0;
    CHECK_OK(slm_file_read_all(g_corpus, &text, &nt));
    slm_ivec ref[4] = {{0}};
    job jobs[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        size_t a = nt * (size_t)k / 4, b = nt * (size_t)(k + 1) / 4;
        CHECK_OK(slm_tokenizer_encode(g_tok, text + a, b - a, 0, &ref[k]));
        jobs[k] = (job){g_tok, text + a, b - a, {0}};
    }
    for (int k = 0; k < 4; k++)
        CHECK(pthread_create(&th[k], NULL, encode_job, &jobs[k]) == 0);
    int ok = 1;
    for (int k = 0; k < 4; k++) {
        void *rv = NULL;
        pthread_join(th[k], &rv);
        ok &= rv == NULL && jobs[k].ids.len == ref[k].len &&
              !memcmp(jobs[k].ids.data, ref[k].data, ref[k].len * sizeof(int32_t));
        slm_ivec_free(&jobs[k].ids);
        slm_ivec_free(&ref[k]);
    }
    free(text);
    CHECK(ok);
}

// Loads `json` from a file and expects status `want` with `needle` in the message.
static void expect_load_error(const char *json, slm_status want, const char *needle) {
    const char *p = tmp_path("bad.json");
    write_file(p, json);
    slm_tokenizer *t = NULL;
    slm_status st = slm_tokenizer_load(p, &t);
    if (t) slm_tokenizer_free(t);
    if (st != want || !strstr(slm_errmsg(), needle) || !strstr(slm_errmsg(), p))
        fprintf(stderr, "  got status %d message: %s\n", st, slm_errmsg());
    slm_test_cur_failed_ |= st != want || !strstr(slm_errmsg(), needle) || !strstr(slm_errmsg(), p);
}

static void test_bad_input(void) {
    slm_tokenizer *t = NULL;
    char missing[600];
    snprintf(missing, sizeof missing, "%s", tmp_path("does-not-exist.json"));
    CHECK_EQ_INT(slm_tokenizer_load(missing, &t), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), missing) != NULL);
    expect_load_error("{\"model\": {\"type\": \"BPE\",\n \"vocab\": {\"a\": 0,,}}}", SLM_E_FORMAT,
                      "line 2");
    expect_load_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", SLM_E_UNSUPPORTED,
                      "model.type");
    expect_load_error("{\"model\": {\"vocab\": {}}}", SLM_E_FORMAT, "model.type");
    expect_load_error(
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
        "\"vocab\": {\"a\": 0}, \"merges\": []}}",
        SLM_E_FORMAT, "byte-level symbol");
    expect_load_error("{\"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": "
                      "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}",
                      SLM_E_UNSUPPORTED, "normalizer");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": "
                      "\"BPE\", \"vocab\": {\"a\": 0}}}",
                      SLM_E_UNSUPPORTED, "pre_tokenizer.type");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true}, "
                      "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}",
                      SLM_E_UNSUPPORTED, "add_prefix_space");
    expect_load_error(
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
        "\"vocab\": {\"a\": -3}}}",
        SLM_E_FORMAT, "model.vocab[0]");
    // A merge naming a token that is not in the vocab: take the saved file, append a bad merge.
    char *js = NULL;
    size_t n = 0;
    CHECK_OK(slm_file_read_all(g_saved, &js, &n));
    char *m = strstr(js, "\"merges\": [");
    CHECK(m != NULL);
    slm_buf b = {0};
    slm_buf_append(&b, js, (size_t)(m - js) + 11);
    slm_buf_appendf(&b, "\n      [\"qqq\", \"zz\"],");
    slm_buf_append(&b, m + 11, n - (size_t)(m - js) - 11);
    expect_load_error(b.data, SLM_E_FORMAT, "model.merges[0]");
    slm_buf_free(&b);
    free(js);
    // Training errors.
    const char *in[] = {missing};
    slm_bpe_train_opts o = {.inputs = in, .n_inputs = 1, .vocab_size = 1000};
    CHECK_EQ_INT(slm_bpe_train(&o, &t), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), missing) != NULL);
    const char *in2[] = {g_corpus};
    o.inputs = in2;
    o.vocab_size = 200;
    CHECK_EQ_INT(slm_bpe_train(&o, &t), SLM_E_ARG);
    const char *empty = tmp_path("empty.txt");
    write_file(empty, "");
    const char *in3[] = {empty};
    o.inputs = in3;
    o.vocab_size = 300;
    CHECK_EQ_INT(slm_bpe_train(&o, &t), SLM_E_FORMAT);
    CHECK(t == NULL);
}

// A Llama-3 style file (Sequence[Split(regex), ByteLevel], ignore_merges) made from the saved one:
// loads, round-trips, and differs from the GPT-2 split where the regexes differ (digits).
static void test_llama3_style(void) {
    char *js = NULL;
    size_t n = 0;
    CHECK_OK(slm_file_read_all(g_saved, &js, &n));
    const char *pre = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": "
                      "true, \"use_regex\": true}";
    const char *seq =
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
        "{\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
        "\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
        "\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}";
    char *a = strstr(js, pre), *b = strstr(js, "\"ignore_merges\": false");
    CHECK(a != NULL && b != NULL && a < b);
    slm_buf o = {0};
    slm_buf_append(&o, js, (size_t)(a - js));
    slm_buf_append(&o, seq, strlen(seq));
    slm_buf_append(&o, a + strlen(pre), (size_t)(b - a) - strlen(pre));
    slm_buf_appendf(&o, "\"ignore_merges\": true");
    slm_buf_append(&o, b + strlen("\"ignore_merges\": false"),
                   n - (size_t)(b - js) - strlen("\"ignore_merges\": false"));
    free(js);
    const char *p = tmp_path("llama3.json");
    CHECK_OK(slm_file_write_atomic(p, o.data, o.len));
    slm_buf_free(&o);
    slm_tokenizer *t = NULL;
    CHECK_OK(slm_tokenizer_load(p, &t));
    // GPT-2 keeps " 12345" as one pre-token; Llama-3 splits digits in groups of three.
    slm_ivec x = {0}, y = {0};
    CHECK_OK(slm_tokenizer_encode(t, "12345", 5, 0, &x));
    CHECK_OK(slm_tokenizer_encode(g_tok, "12345", 5, 0, &y));
    CHECK(x.len >= 2);
    slm_rng r;
    slm_rng_seed(&r, 99);
    char buf[512];
    int ok = 1;
    for (int iter = 0; iter < 500 && ok; iter++) {
        size_t len = slm_rng_below(&r, sizeof buf);
        for (size_t i = 0; i < len; i++) {
            uint64_t k = slm_rng_below(&r, 256);
            buf[i] = iter % 2 ? (char)k : " \n\rab'1\xc3\xa9"[k % 9];
        }
        ok = roundtrip(t, buf, len, 0);
    }
    CHECK_MSG(ok, "llama3-style round trip failed");
    slm_ivec_free(&x);
    slm_ivec_free(&y);
    slm_tokenizer_free(t);
}

typedef struct ends {
    size_t *v, n, cap, base;
} ends;

static void record_end(void *ctx, const uint8_t *p, size_t n) {
    ends *e = ctx;
    (void)p;
    if (e->n == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 1024;
        e->v = slm_xrealloc(e->v, e->cap * sizeof *e->v);
    }
    e->base += n;
    e->v[e->n++] = e->base;
}

// Training cuts files just after a '\n' followed by printable ASCII and scans each chunk with the
// whole file as the regex subject. Scanning chunk by chunk that way must give exactly the
// pre-tokens of one whole-text scan, also with blanks before newlines (`\s+(?!\S)` looks ahead).
static void test_chunk_boundaries(void) {
    slm_buf t = {0};
    static const char *tails[] = {"", " ", "\t ", "   ", " \r"};
    static const char *heads[] = {"Word", "'s", "!x", "1 2", "<|bos|>", "a\xc3\xa9"};
    for (int i = 0; i < 3000; i++)
        slm_buf_appendf(&t, "%s line %d%s\n%s", heads[i % 6], i, tails[i % 5],
                        i % 7 ? "" : "\n  \n");
    char errbuf[256];
    pcre2_code *re = slm_bpe_compile_regex(slm_bpe_gpt2_regex, errbuf);
    CHECK(re != NULL);
    bpe_matcher m;
    slm_bpe_matcher_init(&m);
    const uint8_t *u = (const uint8_t *)t.data;
    ends whole = {0}, chunked = {0};
    slm_bpe_pretokenize(re, &m, u, t.len, 0, t.len, record_end, &whole);
    size_t start = 0, n_chunks = 0;
    for (size_t i = 1; i <= t.len; i++) {
        if (i < t.len && !(u[i - 1] == '\n' && u[i] > 0x20 && u[i] < 0x7f)) continue;
        slm_bpe_pretokenize(re, &m, u, t.len, start, i, record_end, &chunked);
        start = i;
        n_chunks++;
    }
    CHECK(n_chunks >= 2900);
    int same = whole.n == chunked.n && !memcmp(whole.v, chunked.v, whole.n * sizeof *whole.v);
    free(whole.v);
    free(chunked.v);
    slm_bpe_matcher_free(&m);
    pcre2_code_free(re);
    slm_buf_free(&t);
    CHECK_MSG(same, "chunked pre-tokenization differs from the whole-text scan");
}

static void test_directory_input(void) {
    // A directory is recursed; the result equals training on its one file.
    const char *sub = tmp_path("dir/a/b");
    CHECK_OK(slm_mkdir_p(sub));
    char *text = NULL;
    size_t nt = 0;
    CHECK_OK(slm_file_read_all(g_corpus, &text, &nt));
    const char *f = tmp_path("dir/a/b/corpus.txt");
    CHECK_OK(slm_file_write_atomic(f, text, nt));
    free(text);
    const char *inputs[] = {tmp_path("dir")};
    slm_bpe_train_opts o = {.inputs = inputs, .n_inputs = 1, .vocab_size = 800, .threads = 2};
    slm_tokenizer *t = NULL;
    CHECK_OK(slm_bpe_train(&o, &t));
    CHECK(slm_tokenizer_hash(t) == slm_tokenizer_hash(g_tok));
    slm_tokenizer_free(t);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/slm_test_bpe_XXXXXX");
    if (!mkdtemp(g_dir)) slm_fatal("mkdtemp failed");
    // ~200 KB of tinyshakespeare (cut at a line end) keeps the test fast under ASan.
    snprintf(g_corpus, sizeof g_corpus, "%s/corpus.txt", g_dir);
    if (slm_test_corpus(g_corpus, 200000)) slm_fatal("%s", slm_errmsg());
    g_tok = train(1, 800);
    snprintf(g_saved, sizeof g_saved, "%s/tokenizer.json", g_dir);
    if (!g_tok || slm_tokenizer_save_json(g_tok, g_saved)) slm_fatal("%s", slm_errmsg());

    RUN(test_train_shape);
    RUN(test_roundtrip_random);
    RUN(test_roundtrip_edge);
    RUN(test_save_load_identical);
    RUN(test_deterministic_threads);
    RUN(test_specials);
    RUN(test_concurrent_encode);
    RUN(test_bad_input);
    RUN(test_llama3_style);
    RUN(test_chunk_boundaries);
    RUN(test_directory_input);

    slm_tokenizer_free(g_tok);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return TEST_SUMMARY();
}
