// The GGUF export's tokenizer.ggml.pre: a byte-level BPE whose tokenizer.json pre-tokenizes as
// llama.cpp's pre-tokenizer NAME does (the GGUF import's tokenizer.json for NAME, from
// slm_tokenizer_vocab_json) is exported with the name llama.cpp reads for that split: gpt2 ->
// "gpt-2", smollm (SmolLM2, GPT-2 with digits one by one) -> "smollm" (before issue 23's
// fine-tuning quick start it was refused, so a fine-tuned SmolLM2 could not be exported),
// llama-bpe -> "llama-bpe"; the exported file's tokenizer reads back with the same split.
#include "ckpt/ckpt.h"
#include "fixtures.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/slm_test_gguf_pre_XXXXXX";

// A 256-token byte-level vocabulary (GPT-2's byte symbols, written out here) with pre-tokenizer
// `pre`, as tokenizer.json at path.
static void write_tokenizer(const char *pre, const char *path) {
    static char sym[256][4];
    const char *tok[256];
    size_t len[256];
    for (int b = 0, n = 0; b < 256; b++) { // GPT-2: unprintable bytes map to 256, 257, ...
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int cp = keep ? b : 256 + n++;
        char *o = sym[b];
        if (cp >= 0x80) *o++ = (char)(0xC0 | (cp >> 6));
        *o = (char)(cp < 0x80 ? cp : 0x80 | (cp & 0x3F));
        tok[b] = sym[b];
        len[b] = strlen(sym[b]);
    }
    slm_tok_vocab v = {.n_tokens = 256,
                       .tokens = tok,
                       .token_len = len,
                       .pre = pre,
                       .bos_id = 1,
                       .eos_id = 2,
                       .pad_id = -1,
                       .unk_id = -1};
    slm_buf b = {0};
    CHECK_OK(slm_tokenizer_vocab_json(&v, "test vocab", &b));
    CHECK_OK(slm_file_write_atomic(path, b.data, b.len));
    slm_buf_free(&b);
}

static void export_with(const char *pre, const char *want) {
    char tj[256], gg[256];
    snprintf(tj, sizeof tj, "%s/%s.json", g_dir, pre);
    snprintf(gg, sizeof gg, "%s/%s.gguf", g_dir, pre);
    write_tokenizer(pre, tj);
    slm_llama_config cfg = slm_test_tiny_config(256);
    slm_llama m;
    CHECK_OK(slm_llama_init(&m, &cfg, true));
    slm_llama_init_weights(&m, 1);
    slm_gguf_export_opts o = {.tokenizer_path = tj};
    CHECK_OK(slm_gguf_parse_type("f32", &o.type));
    CHECK_OK(slm_gguf_export(&m, gg, &o));
    slm_llama_free(&m);
    slm_gguf_file f;
    CHECK_OK(slm_gguf_open(gg, &f));
    const char *s = NULL;
    size_t n = 0;
    CHECK_OK(slm_gguf_get_str(&f, "tokenizer.ggml.pre", &s, &n, NULL));
    CHECK_MSG(n == strlen(want) && !memcmp(s, want, n),
              "%s: tokenizer.ggml.pre \"%.*s\", expected %s", pre, (int)n, s ? s : "", want);
    // read back: the imported tokenizer.json splits as the exported one
    slm_buf b = {0};
    CHECK_OK(slm_gguf_tokenizer_file(&f, &b, NULL));
    slm_gguf_close(&f);
    char tj2[256];
    snprintf(tj2, sizeof tj2, "%s/%s.back.json", g_dir, pre);
    CHECK_OK(slm_file_write_atomic(tj2, b.data, b.len));
    slm_buf_free(&b);
    slm_tokenizer *t1 = NULL, *t2 = NULL;
    CHECK_OK(slm_tokenizer_load(tj, &t1));
    CHECK_OK(slm_tokenizer_load(tj2, &t2));
    CHECK_MSG(!strcmp(slm_tokenizer_pretok_regex(t1), slm_tokenizer_pretok_regex(t2)),
              "%s: the re-imported tokenizer splits differently", pre);
    slm_tokenizer_free(t1);
    slm_tokenizer_free(t2);
}

static void test_names(void) {
    export_with("gpt2", "gpt-2");
    export_with("smollm", "smollm");
    export_with("llama-bpe", "llama-bpe");
}

int main(void) {
    if (!mkdtemp(g_dir)) return 1;
    RUN(test_names);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) return 1;
    return TEST_SUMMARY();
}
