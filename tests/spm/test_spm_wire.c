// SentencePiece model reader and BPE on hand-built ModelProto bytes (no external tools).
// The protobuf bytes are assembled here field by field from the wire-format rules; the expected
// segmentations are worked out by hand from bpe_model.cc's rule (highest-scoring adjacent pair
// first, leftmost on ties) and are commented at each check.
#include "test.h"
#include "tokenizer/tok_internal.h"

#include <pthread.h>
#include <unistd.h>

#define WS "\xE2\x96\x81" // U+2581

// ---------------------------------------------------------------------------------------------
// Protobuf writer

static void put_varint(slm_buf *b, uint64_t v) {
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) c |= 0x80;
        slm_buf_append(b, &c, 1);
    } while (v);
}
static void put_tag(slm_buf *b, uint32_t field, int wt) {
    put_varint(b, (uint64_t)field << 3 | (uint64_t)wt);
}
static void put_len(slm_buf *b, uint32_t field, const void *d, size_t n) {
    put_tag(b, field, 2);
    put_varint(b, n);
    slm_buf_append(b, d, n);
}
static void put_str(slm_buf *b, uint32_t field, const char *s) {
    put_len(b, field, s, strlen(s));
}
static void put_vfield(slm_buf *b, uint32_t field, uint64_t v) {
    put_tag(b, field, 0);
    put_varint(b, v);
}
static void put_float(slm_buf *b, uint32_t field, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    put_tag(b, field, 5);
    slm_buf_append(b, le, 4);
}
static void put_piece(slm_buf *model, const char *text, float score, int type) {
    slm_buf p = {0};
    put_str(&p, 1, text);
    put_float(&p, 2, score);
    if (type != 1) put_vfield(&p, 3, (uint64_t)type);
    put_vfield(&p, 200, 7); // an unknown extension field inside the piece
    put_len(model, 1, p.data, p.len);
    slm_buf_free(&p);
}

enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER = 4, UNUSED = 5, BYTE = 6 };

// Piece ids of the hand-built model.
enum {
    ID_UNK,
    ID_BOS,
    ID_EOS,
    ID_C3,
    ID_A9,
    ID_WS,
    ID_A,
    ID_B,
    ID_C,
    ID_AB,
    ID_BC,
    ID_WS_A,
    ID_WS_AB,
    ID_CC,
    ID_SEP,
    N_IDS
};

// Offsets at which a top-level ModelProto field ends (filled by build_model).
static size_t g_bounds[64];
static int g_nb;
static void mark(const slm_buf *b) {
    if (g_nb < 64) g_bounds[g_nb++] = b->len;
}

// Unknown fields of every wire type (ModelProto has no fields 99..103).
static void put_unknowns(slm_buf *b) {
    put_vfield(b, 99, 123456789012345ull);
    mark(b);
    put_tag(b, 100, 1);
    slm_buf_append(b, "12345678", 8);
    mark(b);
    put_str(b, 101, "ignored bytes");
    mark(b);
    put_tag(b, 102, 3); // group { 1: varint, 2: nested group {} }
    put_vfield(b, 1, 5);
    put_tag(b, 2, 3);
    put_tag(b, 2, 4);
    put_tag(b, 102, 4);
    mark(b);
    put_tag(b, 103, 5);
    slm_buf_append(b, "abcd", 4);
    mark(b);
}

// Builds the test model; g_bounds/g_nb receive the top-level field boundaries. The trainer_spec
// comes last, so any prefix that ends on a field boundary lacks model_type=BPE.
static void build_model(slm_buf *b, int model_type, const char *charsmap, bool byte_fallback) {
    g_nb = 0;
    static const struct {
        const char *text;
        float score;
        int type;
    } pieces[N_IDS] = {
        {"<unk>", 0, UNKNOWN}, {"<s>", 0, CONTROL}, {"</s>", 0, CONTROL}, {"<0xC3>", 0, BYTE},
        {"<0xA9>", 0, BYTE},   {WS, -10, NORMAL},   {"a", -11, NORMAL},   {"b", -12, NORMAL},
        {"c", -13, NORMAL},    {"ab", -1, NORMAL},  {"bc", -1, NORMAL},   {WS "a", -2, NORMAL},
        {WS "ab", -3, NORMAL}, {"cc", 5, UNUSED},   {"<sep>", 0, USER},
    };
    for (int i = 0; i < N_IDS; i++) {
        put_piece(b, pieces[i].text, pieces[i].score, pieces[i].type);
        mark(b);
    }
    slm_buf ns = {0};
    put_str(&ns, 1, "identity");
    if (charsmap) put_str(&ns, 2, charsmap);
    put_vfield(&ns, 3, 1); // add_dummy_prefix
    put_vfield(&ns, 4, 1); // remove_extra_whitespaces
    put_vfield(&ns, 5, 1); // escape_whitespaces
    put_len(b, 3, ns.data, ns.len);
    slm_buf_free(&ns);
    mark(b);
    put_unknowns(b);
    slm_buf ts = {0};
    put_str(&ts, 1, "input.txt");
    put_vfield(&ts, 3, (uint64_t)model_type);
    put_vfield(&ts, 4, N_IDS);
    put_vfield(&ts, 43, (uint64_t)-1); // pad_id = -1 as a 10-byte varint
    if (byte_fallback) put_vfield(&ts, 35, 1);
    put_tag(&ts, 250, 1); // unknown fixed64
    slm_buf_append(&ts, "\0\0\0\0\0\0\0\0", 8);
    put_len(b, 2, ts.data, ts.len);
    slm_buf_free(&ts);
}

static slm_status load(const slm_buf *b, slm_tokenizer *t) {
    memset(t, 0, sizeof *t);
    t->bos_id = t->eos_id = t->unk_id = t->pad_id = -1;
    return slm_spm_load("test.model", (const uint8_t *)b->data, b->len, t);
}

// Encodes `text` and compares with the expected ids (terminated by -1).
static bool enc_is(const slm_tokenizer *t, const char *text, int flags, const int *want) {
    slm_ivec ids = {0};
    bool ok = slm_spm_encode(t, text, strlen(text), flags, &ids) == SLM_OK;
    size_t n = 0;
    while (want[n] >= 0)
        n++;
    ok = ok && ids.len == n && (n == 0 || memcmp(ids.data, want, n * sizeof *want) == 0);
    if (!ok) {
        fprintf(stderr, "  encode \"%s\": got", text);
        for (size_t i = 0; i < ids.len; i++)
            fprintf(stderr, " %d", ids.data[i]);
        fprintf(stderr, "\n");
    }
    slm_ivec_free(&ids);
    return ok;
}

static bool dec_is(const slm_tokenizer *t, const int32_t *ids, size_t n, const char *want) {
    slm_buf out = {0};
    bool ok = slm_spm_decode(t, ids, n, &out) == SLM_OK && out.len == strlen(want) &&
              memcmp(out.data, want, out.len) == 0;
    if (!ok) fprintf(stderr, "  decode: got \"%.*s\", want \"%s\"\n", (int)out.len, out.data, want);
    slm_buf_free(&out);
    return ok;
}

// ---------------------------------------------------------------------------------------------

static void test_load_fields(void) {
    slm_buf b = {0};
    build_model(&b, 2, NULL, true);
    slm_tokenizer t;
    slm_status st = load(&b, &t);
    slm_buf_free(&b);
    CHECK_OK(st);
    CHECK_EQ_INT(t.type, SLM_TOK_SPM_BPE);
    CHECK_EQ_INT(t.vocab_size, N_IDS);
    CHECK_EQ_INT(t.unk_id, ID_UNK);
    CHECK_EQ_INT(t.bos_id, ID_BOS);
    CHECK_EQ_INT(t.eos_id, ID_EOS);
    CHECK_EQ_INT(t.pad_id, -1); // no "<pad>" piece
    CHECK_EQ_STR(slm_spm_piece(&t, ID_WS_AB), WS "ab");
    CHECK_EQ_STR(slm_spm_piece(&t, ID_SEP), "<sep>");
    slm_spm_free(t.impl);
}

static void test_bpe_rules(void) {
    slm_buf b = {0};
    build_model(&b, 2, NULL, true);
    slm_tokenizer t;
    slm_status st = load(&b, &t);
    slm_buf_free(&b);
    CHECK_OK(st);
    // "▁abc": pairs ▁a(-2) ab(-1) bc(-1): tie -> leftmost ab; then ▁ab(-3); "abc" is no piece.
    CHECK(enc_is(&t, "abc", 0, (const int[]){ID_WS_AB, ID_C, -1}));
    // "▁bcab": bc(-1) and ab(-1) tie -> bc first (leftmost), then ab; ▁bc is no piece.
    CHECK(enc_is(&t, "bcab", 0, (const int[]){ID_WS, ID_BC, ID_AB, -1}));
    // "cc" is UNUSED (score 5): merged first, then split back into c c.
    CHECK(enc_is(&t, "cc", 0, (const int[]){ID_WS, ID_C, ID_C, -1}));
    // user-defined symbols are atomic: ▁a <sep> b (no "a<" or "<sep>b" merges).
    CHECK(enc_is(&t, "a<sep>b", 0, (const int[]){ID_WS_A, ID_SEP, ID_B, -1}));
    // remove_extra_whitespaces: leading/trailing spaces dropped, inner runs collapsed.
    CHECK(enc_is(&t, "  a   b  ", 0, (const int[]){ID_WS_A, ID_WS, ID_B, -1}));
    CHECK(enc_is(&t, "   ", 0, (const int[]){-1}));
    CHECK(enc_is(&t, "", SLM_ENC_ADD_BOS | SLM_ENC_ADD_EOS, (const int[]){ID_BOS, ID_EOS, -1}));
    // byte fallback: é = C3 A9 (both byte pieces exist); ü = C3 BC (no <0xBC>: UNK id).
    CHECK(enc_is(&t, "\xC3\xA9", SLM_ENC_ADD_BOS, (const int[]){ID_BOS, ID_WS, ID_C3, ID_A9, -1}));
    CHECK(enc_is(&t, "\xC3\xBC", 0, (const int[]){ID_WS, ID_C3, ID_UNK, -1}));
    // malformed UTF-8 byte 0xFF becomes U+FFFD (EF BF BD): no byte pieces -> 3 UNK ids.
    CHECK(enc_is(&t, "\xFF", 0, (const int[]){ID_WS, ID_UNK, ID_UNK, ID_UNK, -1}));
    // control text in the input is ordinary text ...
    CHECK(enc_is(&t, "<s>", 0, (const int[]){ID_WS, ID_UNK, ID_UNK, ID_UNK, -1}));
    // ... unless SLM_ENC_ALLOW_SPECIAL: then each span between specials is encoded on its own.
    CHECK(enc_is(&t, "ab<s>ab</s>", SLM_ENC_ALLOW_SPECIAL,
                 (const int[]){ID_WS_AB, ID_BOS, ID_WS_AB, ID_EOS, -1}));
    CHECK(enc_is(&t, "<unk><s", SLM_ENC_ALLOW_SPECIAL,
                 (const int[]){ID_UNK, ID_WS, ID_UNK, ID_UNK, -1}));
    CHECK(enc_is(&t, "</s></s>", SLM_ENC_ALLOW_SPECIAL | SLM_ENC_ADD_BOS,
                 (const int[]){ID_BOS, ID_EOS, ID_EOS, -1}));

    CHECK(dec_is(&t, (const int32_t[]){ID_BOS, ID_WS_AB, ID_C, ID_EOS}, 4, "abc"));
    CHECK(dec_is(&t, (const int32_t[]){ID_WS_A, ID_WS, ID_B}, 3, "a b"));
    CHECK(dec_is(&t, (const int32_t[]){ID_C3, ID_A9, ID_WS_A}, 3, "\xC3\xA9 a"));
    CHECK(dec_is(&t, (const int32_t[]){ID_C3, ID_B}, 2,
                 "\xEF\xBF\xBD"
                 "b")); // lone lead byte
    CHECK(dec_is(&t, (const int32_t[]){ID_B, ID_UNK}, 2, "b \xE2\x81\x87 "));
    // remove_extra_whitespaces: every leading ▁ is dropped until text appears
    CHECK(dec_is(&t, (const int32_t[]){ID_WS, ID_WS_A}, 2, "a"));
    CHECK(dec_is(&t, (const int32_t[]){0}, 0, ""));
    slm_spm_free(t.impl);
}

typedef struct thread_arg {
    const slm_tokenizer *t;
    int ok;
} thread_arg;

static void *encode_many(void *p) {
    thread_arg *a = p;
    a->ok = 1;
    for (int i = 0; i < 2000; i++) {
        slm_ivec ids = {0};
        const char *text = "abc bcab cc a<sep>b \xC3\xA9";
        slm_spm_encode(a->t, text, strlen(text), 0, &ids);
        const int want[] = {ID_WS_AB, ID_C,    ID_WS,  ID_BC, ID_AB, ID_WS, ID_C,
                            ID_C,     ID_WS_A, ID_SEP, ID_B,  ID_WS, ID_C3, ID_A9};
        if (ids.len != 14 || memcmp(ids.data, want, sizeof want) != 0) a->ok = 0;
        slm_ivec_free(&ids);
    }
    return NULL;
}

static void test_threads(void) {
    slm_buf b = {0};
    build_model(&b, 2, NULL, true);
    slm_tokenizer t;
    slm_status st = load(&b, &t);
    slm_buf_free(&b);
    CHECK_OK(st);
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){&t, 0};
        pthread_create(&th[i], NULL, encode_many, &args[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    slm_spm_free(t.impl);
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(args[i].ok, 1);
}

static void test_truncated(void) {
    slm_buf b = {0};
    build_model(&b, 2, NULL, true);
    // Every proper prefix is refused: FORMAT when it cuts a field, UNSUPPORTED (no
    // trainer_spec, so model_type defaults to UNIGRAM) when it ends on a top-level boundary.
    int bad = 0;
    for (size_t k = 0; k < b.len; k++) {
        bool boundary = k == 0;
        for (int i = 0; i < g_nb; i++)
            boundary |= g_bounds[i] == k;
        slm_tokenizer t;
        slm_status st = load(&(slm_buf){b.data, k, k}, &t);
        slm_status want = boundary ? SLM_E_UNSUPPORTED : SLM_E_FORMAT;
        if (st != want) {
            if (bad++ < 5)
                fprintf(stderr, "  prefix %zu/%zu: status %d, want %d (%s)\n", k, b.len, st, want,
                        slm_errmsg());
        }
        if (st == SLM_OK) slm_spm_free(t.impl);
    }
    slm_buf_free(&b);
    CHECK_EQ_INT(bad, 0);
}

// Loads `b` and checks the status and that the message mentions `needle`.
static bool refused(slm_buf *b, slm_status want, const char *needle) {
    slm_tokenizer t;
    slm_status st = load(b, &t);
    slm_buf_free(b);
    if (st == SLM_OK) slm_spm_free(t.impl);
    bool ok = st == want && strstr(slm_errmsg(), needle) && strstr(slm_errmsg(), "test.model");
    if (!ok) fprintf(stderr, "  status %d (want %d): %s\n", st, want, slm_errmsg());
    return ok;
}

static void test_malformed(void) {
    slm_buf b = {0};
    build_model(&b, 1, NULL, true); // UNIGRAM
    CHECK(refused(&b, SLM_E_UNSUPPORTED, "UNIGRAM"));
    build_model(&b, 4, NULL, true); // CHAR
    CHECK(refused(&b, SLM_E_UNSUPPORTED, "CHAR"));
    build_model(&b, 2, "\x01\x02\x03", true); // a normalizer with a charsmap
    CHECK(refused(&b, SLM_E_UNSUPPORTED, "precompiled_charsmap"));
    build_model(&b, 2, NULL, false); // BYTE pieces without byte_fallback
    CHECK(refused(&b, SLM_E_FORMAT, "byte_fallback"));

    // a piece text sent as a varint: wrong wire type for a known field
    slm_buf p = {0};
    put_vfield(&p, 1, 5);
    put_len(&b, 1, p.data, p.len);
    slm_buf_free(&p);
    CHECK(refused(&b, SLM_E_FORMAT, "piece"));
    // an 11-byte varint
    put_tag(&b, 99, 0);
    slm_buf_append(&b, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
    CHECK(refused(&b, SLM_E_FORMAT, "varint"));
    // field number 0
    slm_buf_append(&b, "\x00\x01", 2);
    CHECK(refused(&b, SLM_E_FORMAT, "field number 0"));
    // wire type 7
    put_tag(&b, 9, 7);
    CHECK(refused(&b, SLM_E_FORMAT, "wire type 7"));
    // a group closed by the wrong field
    put_tag(&b, 9, 3);
    put_tag(&b, 8, 4);
    CHECK(refused(&b, SLM_E_FORMAT, "group"));
    // an unterminated group
    put_tag(&b, 9, 3);
    put_vfield(&b, 1, 1);
    CHECK(refused(&b, SLM_E_FORMAT, "unterminated group"));
    // a length past the end of the nested message
    put_tag(&b, 2, 2);
    put_varint(&b, 3);
    put_tag(&b, 45, 2); // unk_piece with length 10 inside a 3-byte message
    put_varint(&b, 10);
    slm_buf_append(&b, "x", 1);
    CHECK(refused(&b, SLM_E_FORMAT, "unk_piece"));

    // duplicate pieces, missing <unk>, a malformed byte piece
    slm_buf ts = {0};
    put_vfield(&ts, 3, 2);
    put_vfield(&ts, 35, 1);
    put_piece(&b, "<unk>", 0, UNKNOWN);
    put_piece(&b, "a", 0, NORMAL);
    put_piece(&b, "a", 0, NORMAL);
    put_len(&b, 2, ts.data, ts.len);
    CHECK(refused(&b, SLM_E_FORMAT, "already defined"));
    put_piece(&b, "a", 0, NORMAL);
    put_len(&b, 2, ts.data, ts.len);
    CHECK(refused(&b, SLM_E_FORMAT, "UNKNOWN"));
    put_piece(&b, "<unk>", 0, UNKNOWN);
    put_piece(&b, "<0xg1>", 0, BYTE);
    put_len(&b, 2, ts.data, ts.len);
    CHECK(refused(&b, SLM_E_FORMAT, "<0xXX>"));
    put_piece(&b, "<unk>", 0, UNKNOWN);
    put_piece(&b, "", 0, NORMAL);
    put_len(&b, 2, ts.data, ts.len);
    CHECK(refused(&b, SLM_E_FORMAT, "empty piece"));
    put_piece(&b, "<unk>", 0, 9);
    put_len(&b, 2, ts.data, ts.len);
    CHECK(refused(&b, SLM_E_FORMAT, "type 9"));
    slm_buf_free(&ts);
}

// Through the public API: type detection from the file, ids, encode/decode, id range check.
static void test_front_door(void) {
    slm_buf b = {0};
    build_model(&b, 2, NULL, true);
    char path[] = "/tmp/slm_test_spm_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    slm_status st = slm_file_write_atomic(path, b.data, b.len);
    slm_buf_free(&b);
    CHECK_OK(st);
    slm_tokenizer *t = NULL;
    st = slm_tokenizer_load(path, &t);
    remove(path);
    CHECK_OK(st);
    CHECK_EQ_STR(slm_tokenizer_type_name(t), "sentencepiece_bpe");
    CHECK_EQ_INT(slm_tokenizer_vocab_size(t), N_IDS);
    CHECK_EQ_INT(slm_tokenizer_bos_id(t), ID_BOS);
    CHECK_EQ_STR(slm_tokenizer_piece(t, ID_WS_A), WS "a");
    slm_ivec ids = {0};
    slm_buf out = {0};
    st = slm_tokenizer_encode(t, "abc", 3, SLM_ENC_ADD_BOS, &ids);
    bool ok = st == SLM_OK && ids.len == 3 && ids.data[0] == ID_BOS && ids.data[1] == ID_WS_AB &&
              ids.data[2] == ID_C;
    if (ok) ok = slm_tokenizer_decode(t, ids.data, ids.len, &out) == SLM_OK;
    if (ok) ok = out.len == 3 && memcmp(out.data, "abc", 3) == 0;
    int32_t bad = N_IDS;
    slm_status st_bad = slm_tokenizer_decode(t, &bad, 1, &out);
    slm_ivec_free(&ids);
    slm_buf_free(&out);
    slm_tokenizer_free(t);
    CHECK(ok);
    CHECK_EQ_INT(st_bad, SLM_E_ARG);
}

int main(void) {
    RUN(test_load_fields);
    RUN(test_bpe_rules);
    RUN(test_threads);
    RUN(test_truncated);
    RUN(test_malformed);
    RUN(test_front_door);
    return TEST_SUMMARY();
}
