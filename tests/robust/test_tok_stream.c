// Streaming decode (issue 8 item 23): slm_tok_stream and slm_generate's emitted text.
//  - a 4-byte character sent as four SentencePiece byte-fallback tokens streams as one chunk,
//    no replacement character is ever shown for a half-received character, and the stream
//    equals the one-shot decode ("🚀 Hello", the literal the ids were built from);
//  - tokenizer decode --bytes semantics (slm_tokenizer_decode_bytes) keep malformed bytes raw;
//  - byte-level BPE: an emoji split over byte tokens arrives whole;
//  - slm_generate with a random model over a byte-fallback vocabulary (mostly byte tokens, so
//    incomplete and malformed sequences are frequent): the concatenation of the emitted chunks is
//    the one-shot decode of the generated ids, and every chunk is whole UTF-8.
#include <unistd.h>

#include "fixtures.h"
#include "test.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"

#define ROCKET "\xF0\x9F\x9A\x80" // U+1F680
#define FFFD "\xEF\xBF\xBD"

// --- a SentencePiece BPE model with byte fallback, built as protobuf -------------------------

static void pb_varint(slm_buf *b, uint64_t v) {
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) c |= 0x80;
        slm_buf_append(b, &c, 1);
    } while (v);
}
static void pb_bytes(slm_buf *b, uint32_t field, const void *d, size_t n) {
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    slm_buf_append(b, d, n);
}
static void pb_uint(slm_buf *b, uint32_t field, uint64_t v) {
    pb_varint(b, (uint64_t)field << 3);
    pb_varint(b, v);
}
static void pb_piece(slm_buf *model, const char *text, float score, int type) {
    slm_buf p = {0};
    pb_bytes(&p, 1, text, strlen(text));
    uint32_t u;
    memcpy(&u, &score, 4);
    uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    pb_varint(&p, 2 << 3 | 5);
    slm_buf_append(&p, le, 4);
    pb_uint(&p, 3, (uint64_t)type);
    pb_bytes(model, 1, p.data, p.len);
    slm_buf_free(&p);
}

enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, BYTE = 6 };
#define WS "\xE2\x96\x81" // U+2581
// ids: 0 <unk>, 1 <s>, 2 </s>, 3 + b: <0xbb>, then the normal pieces below
enum { ID_BOS = 1, ID_BYTE0 = 3, ID_WS = 259, ID_H, ID_E, ID_L, ID_O, ID_WS_H, ID_LL, N_IDS };

static slm_tokenizer *spm_tokenizer(void) {
    slm_buf b = {0};
    pb_piece(&b, "<unk>", 0, UNKNOWN);
    pb_piece(&b, "<s>", 0, CONTROL);
    pb_piece(&b, "</s>", 0, CONTROL);
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        pb_piece(&b, name, 0, BYTE);
    }
    const char *normal[] = {WS, "H", "e", "l", "o", WS "H", "ll"};
    for (int i = 0; i < 7; i++)
        pb_piece(&b, normal[i], -(float)i, NORMAL);
    slm_buf ns = {0};
    pb_bytes(&ns, 1, "identity", 8);
    pb_uint(&ns, 3, 1); // add_dummy_prefix
    pb_uint(&ns, 4, 1); // remove_extra_whitespaces
    pb_uint(&ns, 5, 1); // escape_whitespaces
    pb_bytes(&b, 3, ns.data, ns.len);
    slm_buf ts = {0};
    pb_uint(&ts, 3, 2); // model_type BPE
    pb_uint(&ts, 4, N_IDS);
    pb_uint(&ts, 35, 1); // byte_fallback
    pb_bytes(&b, 2, ts.data, ts.len);
    char path[] = "/tmp/slm_test_stream_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    slm_tokenizer *t = NULL;
    if (fd >= 0 && slm_file_write_atomic(path, b.data, b.len) == SLM_OK)
        (void)slm_tokenizer_load(path, &t);
    unlink(path);
    slm_buf_free(&b);
    slm_buf_free(&ns);
    slm_buf_free(&ts);
    return t;
}

// Whole UTF-8 (RFC 3629): every sequence complete and well-formed.
static bool utf8_whole(const char *s, size_t n) {
    const uint8_t *b = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        uint8_t c = b[i];
        size_t len = c < 0x80                   ? 1
                     : (c >= 0xC2 && c <= 0xDF) ? 2
                     : (c >= 0xE0 && c <= 0xEF) ? 3
                     : (c >= 0xF0 && c <= 0xF4) ? 4
                                                : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if ((b[i + k] & 0xC0) != 0x80) return false;
        if (len == 3 && ((c == 0xE0 && b[i + 1] < 0xA0) || (c == 0xED && b[i + 1] > 0x9F)))
            return false;
        if (len == 4 && ((c == 0xF0 && b[i + 1] < 0x90) || (c == 0xF4 && b[i + 1] > 0x8F)))
            return false;
        i += len;
    }
    return true;
}

// Pushes ids one at a time; appends every chunk (and finish's) to *all; counts chunks that are
// not whole UTF-8 and records the chunk returned for each id in lens[i] (if non-NULL).
static slm_status stream_all(const slm_tokenizer *t, bool raw, const int32_t *ids, size_t n,
                             slm_buf *all, int *n_broken, size_t *lens) {
    slm_tok_stream s;
    slm_tok_stream_init(&s, t, raw);
    *n_broken = 0;
    slm_status st = SLM_OK;
    const char *p;
    size_t len;
    for (size_t i = 0; i < n && !st; i++) {
        st = slm_tok_stream_push(&s, &ids[i], 1, &p, &len);
        if (st) break;
        if (lens) lens[i] = len;
        if (!utf8_whole(p, len)) (*n_broken)++;
        slm_buf_append(all, p, len);
    }
    if (!st) {
        slm_tok_stream_finish(&s, &p, &len);
        slm_buf_append(all, p, len);
    }
    slm_tok_stream_free(&s);
    return st;
}

static bool buf_is(const slm_buf *b, const char *want) {
    size_t n = strlen(want);
    bool ok = b->len == n && (n == 0 || memcmp(b->data, want, n) == 0);
    if (!ok) {
        fprintf(stderr, "  got %zu bytes:", b->len);
        for (size_t i = 0; i < b->len; i++)
            fprintf(stderr, " %02x", (uint8_t)b->data[i]);
        fprintf(stderr, "\n  want \"%s\"\n", want);
    }
    return ok;
}

static void test_spm_rocket(void) {
    slm_tokenizer *t = spm_tokenizer();
    CHECK(t != NULL);
    // BOS, the rocket's four bytes as byte-fallback tokens, then " Hello".
    const int32_t ids[] = {ID_BOS,
                           ID_BYTE0 + 0xF0,
                           ID_BYTE0 + 0x9F,
                           ID_BYTE0 + 0x9A,
                           ID_BYTE0 + 0x80,
                           ID_WS_H,
                           ID_E,
                           ID_LL,
                           ID_O};
    size_t n = sizeof ids / sizeof *ids, lens[16];
    slm_buf one = {0}, all = {0};
    int broken = 0;
    CHECK_OK(slm_tokenizer_decode(t, ids, n, &one));
    bool ok = buf_is(&one, ROCKET " Hello");
    slm_status st = stream_all(t, false, ids, n, &all, &broken, lens);
    bool same = st == SLM_OK && buf_is(&all, ROCKET " Hello");
    slm_buf_free(&one);
    slm_buf_free(&all);
    slm_tokenizer_free(t);
    CHECK(ok);
    CHECK(same);
    CHECK_EQ_INT(broken, 0);
    // nothing shown until the fourth byte, then the whole character at once
    CHECK_EQ_INT(lens[1] + lens[2] + lens[3], 0);
    CHECK_EQ_INT(lens[4], 4);
}

// Incomplete and malformed byte runs: the stream still equals the one-shot decode (U+FFFD per
// malformed byte, as SentencePiece), and --bytes keeps the raw bytes.
static void test_spm_malformed(void) {
    slm_tokenizer *t = spm_tokenizer();
    CHECK(t != NULL);
    struct {
        int32_t ids[8];
        size_t n;
        const char *text, *bytes;
    } cases[] = {
        {{ID_BYTE0 + 0xF0, ID_BYTE0 + 0x9F}, 2, FFFD FFFD, "\xF0\x9F"},            // ends inside
        {{ID_BYTE0 + 0xF0, ID_BYTE0 + 0x9F, ID_H}, 3, FFFD FFFD "H", "\xF0\x9FH"}, // cut by a piece
        {{ID_BYTE0 + 0xE0, ID_BYTE0 + 0x80, ID_BYTE0 + 0x80},
         3,
         FFFD FFFD FFFD,
         "\xE0\x80\x80"},                                                  // overlong
        {{ID_BYTE0 + 0xC3, 2, ID_BYTE0 + 0xA9}, 3, FFFD FFFD, "\xC3\xA9"}, // split by </s>
        {{ID_BYTE0 + 0xC3, ID_BYTE0 + 0xA9, ID_BYTE0 + 0x9F}, 3, "\xC3\xA9" FFFD, "\xC3\xA9\x9F"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        slm_buf one = {0}, raw = {0}, all = {0}, all_raw = {0};
        int broken = 0, broken_raw = 0;
        bool ok = slm_tokenizer_decode(t, cases[c].ids, cases[c].n, &one) == SLM_OK &&
                  buf_is(&one, cases[c].text);
        ok = ok && slm_tokenizer_decode_bytes(t, cases[c].ids, cases[c].n, &raw) == SLM_OK &&
             buf_is(&raw, cases[c].bytes);
        ok = ok && stream_all(t, false, cases[c].ids, cases[c].n, &all, &broken, NULL) == SLM_OK &&
             buf_is(&all, cases[c].text);
        ok = ok &&
             stream_all(t, true, cases[c].ids, cases[c].n, &all_raw, &broken_raw, NULL) == SLM_OK &&
             buf_is(&all_raw, cases[c].bytes);
        slm_buf_free(&one);
        slm_buf_free(&raw);
        slm_buf_free(&all);
        slm_buf_free(&all_raw);
        if (!ok) slm_tokenizer_free(t);
        CHECK_MSG(ok, "case %zu", c);
        CHECK_EQ_INT(broken, 0); // decoded text chunks are always whole UTF-8
    }
    slm_tokenizer_free(t);
}

// Byte-level BPE trained on ASCII text: the rocket is four single-byte tokens.
static void test_bpe_rocket(void) {
    char path[] = "/tmp/slm_test_stream_corpus_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    const char *txt = "Hello hello world. Hello there, world!\n";
    slm_buf corpus = {0};
    for (int i = 0; i < 50; i++)
        slm_buf_append(&corpus, txt, strlen(txt));
    slm_status st = slm_file_write_atomic(path, corpus.data, corpus.len);
    slm_buf_free(&corpus);
    CHECK_OK(st);
    const char *inputs[] = {path};
    slm_bpe_train_opts o = {.inputs = inputs, .n_inputs = 1, .vocab_size = 280};
    slm_tokenizer *t = NULL;
    st = slm_bpe_train(&o, &t);
    unlink(path);
    CHECK_OK(st);
    slm_ivec ids = {0};
    const char *text = ROCKET " Hello";
    st = slm_tokenizer_encode(t, text, strlen(text), 0, &ids);
    size_t lens[64] = {0};
    slm_buf all = {0};
    int broken = 0;
    bool ok = st == SLM_OK && ids.len >= 5 && ids.len < 64;
    ok = ok && stream_all(t, false, ids.data, ids.len, &all, &broken, lens) == SLM_OK &&
         buf_is(&all, text);
    size_t n_ids = ids.len;
    slm_ivec_free(&ids);
    slm_buf_free(&all);
    slm_tokenizer_free(t);
    CHECK(ok);
    CHECK(n_ids >= 5); // the rocket is not one token in this vocabulary
    CHECK_EQ_INT(broken, 0);
    CHECK_EQ_INT(lens[0], 0); // the first byte of the rocket alone shows nothing
}

typedef struct {
    slm_buf text;
    int broken, calls;
    bool saw_final;
} sink;

static void collect(void *ctx, int32_t token, const char *bytes, size_t len) {
    sink *s = ctx;
    s->calls++;
    if (token < 0) s->saw_final = true;
    if (!utf8_whole(bytes, len)) s->broken++;
    slm_buf_append(&s->text, bytes, len);
}

// A random model over the byte-fallback vocabulary samples mostly byte tokens: incomplete and
// malformed UTF-8 at almost every step. The streamed text must be the one-shot decode.
static void test_generate_stream(void) {
    slm_tokenizer *t = spm_tokenizer();
    CHECK(t != NULL);
    slm_llama_config c = slm_test_tiny_config(N_IDS);
    c.max_position_embeddings = 256;
    slm_llama m;
    slm_status st = slm_llama_init(&m, &c, true);
    if (st) slm_tokenizer_free(t);
    CHECK_OK(st);
    int total_broken = 0, mismatches = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        slm_llama_init_weights(&m, seed);
        slm_gen_opts o = {.max_new = 120,
                          .temperature = 1.0f,
                          .top_k = 0,
                          .top_p = 1.0f,
                          .seed = seed,
                          .add_bos = true,
                          .stop_at_eos = false};
        sink s = {0};
        slm_ivec ids = {0};
        st = slm_generate(&m, t, "Hello", &o, collect, &s, &ids);
        slm_ivec prompt = {0};
        slm_buf full = {0}, head = {0};
        if (!st) st = slm_tokenizer_encode(t, "Hello", 5, SLM_ENC_ADD_BOS, &prompt);
        if (!st) st = slm_tokenizer_decode(t, ids.data, ids.len, &full);
        if (!st) st = slm_tokenizer_decode(t, prompt.data, prompt.len, &head);
        // stream == decode(all ids) minus the decoded prompt
        bool same = !st && full.len >= head.len && memcmp(full.data, head.data, head.len) == 0 &&
                    s.text.len == full.len - head.len &&
                    memcmp(s.text.data, full.data + head.len, s.text.len) == 0;
        if (!same) {
            mismatches++;
            fprintf(stderr, "  seed %" PRIu64 ": streamed %zu bytes, one-shot %zu\n", seed,
                    s.text.len, full.len - head.len);
        }
        total_broken += s.broken;
        slm_ivec_free(&ids);
        slm_ivec_free(&prompt);
        slm_buf_free(&full);
        slm_buf_free(&head);
        slm_buf_free(&s.text);
        if (st) break;
    }
    slm_llama_free(&m);
    slm_tokenizer_free(t);
    CHECK_OK(st);
    CHECK_EQ_INT(mismatches, 0);
    CHECK_EQ_INT(total_broken, 0);
}

int main(void) {
    RUN(test_spm_rocket);
    RUN(test_spm_malformed);
    RUN(test_bpe_rocket);
    RUN(test_generate_stream);
    return TEST_SUMMARY();
}
