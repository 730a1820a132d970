// slm_tokenizer_vocab_json (the GGUF import's tokenizer.json) on a small vocabulary built here:
// the special ids and add_bos it records are the ones loaded (not guessed from token names) and
// survive slm_tokenizer_save_json; a byte whose symbol the vocabulary lacks is dropped when
// encoding (as HF tokenizers does), a missing printable byte is refused; the smollm
// pre-tokenizer splits digits one by one and keeps a space run before a digit whole (as HF's
// Digits(individual_digits) + ByteLevel); an unknown pre-tokenizer name is refused naming it.
#include "tokenizer/tokenizer.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/slm_test_vocab_XXXXXX";

// GPT-2's byte -> symbol map, written out independently of src/tokenizer/.
static void symbol_of(int b, char *out) {
    int cp = b, extra = 0;
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable) {
        for (int k = 0; k < b; k++)
            extra += !((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE);
        cp = 256 + extra;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

// 256 byte tokens (0x04 left out when `drop4`: its slot gets "zz"), "ĠĠ", "ab", "<|x|>" (control),
// merges "Ġ Ġ", "a b"; bos 258 eos 1 pad 2.
static slm_status build(bool drop4, const char *pre, bool add_bos, const char *path) {
    static char sym[256][4];
    const char *tok[259];
    size_t len[259];
    int32_t type[259];
    for (int b = 0; b < 256; b++) {
        symbol_of(b, sym[b]);
        tok[b] = drop4 && b == 4 ? "zz" : sym[b];
        type[b] = 1;
    }
    tok[256] = "\xc4\xa0\xc4\xa0"; // ĠĠ
    tok[257] = "ab";
    tok[258] = "<|x|>";
    type[256] = type[257] = 1;
    type[258] = 3;
    for (int i = 0; i < 259; i++)
        len[i] = strlen(tok[i]);
    const char *merges[2] = {"\xc4\xa0 \xc4\xa0", "a b"};
    size_t mlen[2] = {strlen(merges[0]), strlen(merges[1])};
    slm_tok_vocab v = {.n_tokens = 259,
                       .tokens = tok,
                       .token_len = len,
                       .token_type = type,
                       .n_merges = 2,
                       .merges = merges,
                       .merge_len = mlen,
                       .pre = pre,
                       .bos_id = 258,
                       .eos_id = 1,
                       .pad_id = 2,
                       .unk_id = -1,
                       .add_bos = add_bos};
    slm_buf b = {0};
    slm_status st = slm_tokenizer_vocab_json(&v, "test vocab", &b);
    if (!st) st = slm_file_write_atomic(path, b.data, b.len);
    slm_buf_free(&b);
    return st;
}

static void encode(const slm_tokenizer *t, const char *s, slm_ivec *ids) {
    ids->len = 0;
    CHECK_OK(slm_tokenizer_encode(t, s, strlen(s), 0, ids));
}

static void test_vocab(void) {
    char path[128], path2[128];
    snprintf(path, sizeof path, "%s/t.json", g_dir);
    snprintf(path2, sizeof path2, "%s/t2.json", g_dir);
    CHECK_OK(build(true, "smollm", false, path));
    slm_tokenizer *t = NULL;
    CHECK_OK(slm_tokenizer_load(path, &t));
    CHECK_EQ_INT(slm_tokenizer_bos_id(t), 258);
    CHECK_EQ_INT(slm_tokenizer_eos_id(t), 1);
    CHECK_EQ_INT(slm_tokenizer_pad_id(t), 2);
    CHECK(!slm_tokenizer_add_bos(t));
    slm_ivec ids = {0};
    encode(t,
           "a\x04"
           "b",
           &ids); // three pieces ("a", "\x04", "b"), the middle one dropped
    CHECK(ids.len == 2 && ids.data[0] == 'a' && ids.data[1] == 'b');
    encode(t, "ab", &ids);
    CHECK(ids.len == 1 && ids.data[0] == 257);
    encode(t, "  12", &ids); // "  " whole (then ĠĠ), "1", "2"
    CHECK_MSG(ids.len == 3 && ids.data[0] == 256 && ids.data[1] == '1' && ids.data[2] == '2',
              "got %zu ids, first %d", ids.len, ids.len ? ids.data[0] : -1);
    encode(t, "  a", &ids); // GPT-2's split: " " then " a"
    CHECK(ids.len == 3 && ids.data[0] == ' ' && ids.data[1] == ' ' && ids.data[2] == 'a');
    ids.len = 0;
    CHECK_OK(slm_tokenizer_encode(t, "<|x|>", 5, SLM_ENC_ALLOW_SPECIAL, &ids));
    CHECK(ids.len == 1 && ids.data[0] == 258);
    // saved and loaded again: the same ids and policy
    CHECK_OK(slm_tokenizer_save_json(t, path2));
    slm_tokenizer *t2 = NULL;
    CHECK_OK(slm_tokenizer_load(path2, &t2));
    CHECK(t2 && slm_tokenizer_bos_id(t2) == 258 && slm_tokenizer_eos_id(t2) == 1 &&
          !slm_tokenizer_add_bos(t2));
    slm_tokenizer_free(t2);
    slm_tokenizer_free(t);
    slm_ivec_free(&ids);
    // unknown pre-tokenizer
    CHECK(build(false, "qwen9", true, path) == SLM_E_UNSUPPORTED);
    CHECK(strstr(slm_errmsg(), "pre-tokenizer \"qwen9\" is not implemented") != NULL);
}

// A vocabulary lacking a printable byte's symbol is refused.
static void test_missing_printable(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/p.json", g_dir);
    const char *js =
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
        "\"vocab\": {\"!\": 0}, \"merges\": []}}";
    CHECK_OK(slm_file_write_atomic(path, js, strlen(js)));
    slm_tokenizer *t = NULL;
    CHECK(slm_tokenizer_load(path, &t) == SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "every printable ASCII byte") != NULL);
}

int main(void) {
    if (!mkdtemp(g_dir)) slm_fatal("mkdtemp failed");
    RUN(test_vocab);
    RUN(test_missing_printable);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return TEST_SUMMARY();
}
