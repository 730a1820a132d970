// Private to src/tokenizer/bpe*.c: the byte-level BPE model, the GPT-2 byte <-> symbol map and
// the regex pre-tokenizer shared by training (bpe_train.c) and encoding (bpe.c).
//
// Ids: a loaded model has ids [0, n_ids). Each id is a model token (in model.vocab), an added
// token (added_tokens[]), both (GPT-2 lists <|endoftext|> in both), or a gap (neither; never
// produced by encode, decodes to nothing). Every id has its stored piece (byte-level symbols,
// or the literal content of an added token) and its raw bytes (what decode emits).
#ifndef SLM_BPE_H
#define SLM_BPE_H

#include "tokenizer/tok_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

// The GPT-2 pre-tokenization regex (Radford et al. 2019, openai/gpt-2 encoder.py), which HF's
// ByteLevel pre-tokenizer applies when use_regex is true.
extern const char slm_bpe_gpt2_regex[];

enum {
    BPE_IN_VOCAB = 1, // listed in model.vocab
    BPE_ADDED = 2,    // listed in added_tokens
    BPE_SPECIAL = 4,  // added token with "special": true
};

// Pre-tokenizer forms shardlm implements exactly.
enum {
    BPE_PRE_BYTELEVEL = 0, // {"type": "ByteLevel", "use_regex": true, "add_prefix_space": false}
    BPE_PRE_SPLIT = 1,     // Sequence[Split(Regex, Isolated), ByteLevel(use_regex: false)]
};

typedef struct bpe_model {
    uint64_t serial; // unique per model in this process: keys the per-thread encode cache
    int32_t n_ids;
    char **piece;         // [n_ids] owned NUL-terminated strings ("" for a gap)
    uint8_t *flags;       // [n_ids] BPE_IN_VOCAB | BPE_ADDED | BPE_SPECIAL
    char *raw;            // raw bytes of every id, concatenated
    int64_t *raw_off;     // [n_ids + 1] offsets into raw
    int32_t byte_id[256]; // id of the single-byte token of each byte value

    // Merges by rank: (left, right) -> result.
    int32_t n_merges;
    int32_t *merge_left, *merge_right, *merge_new; // [n_merges]
    // Open-addressing map (left << 32 | right) -> rank; empty slots hold key UINT64_MAX.
    uint64_t *mkey;
    int32_t *mrank;
    size_t mcap; // power of two

    bool ignore_merges;    // Llama-3: a pre-token that is a whole vocab entry is emitted directly
    int32_t *vmap;         // raw bytes -> id map of model tokens (only when ignore_merges)
    size_t vcap;           // power of two
    int32_t n_added;       // added tokens, for SLM_ENC_ALLOW_SPECIAL matching
    int32_t *added_ids;    // [n_added]
    bool added_first[256]; // bytes that start some added token (skips most positions)
    char *unk_token;       // model.unk_token or NULL (owned)

    // model.shardlm_special_ids (written for GGUF imports, whose special ids tokenizer.json
    // cannot express): {"bos", "eos", "pad", "unk": id or -1, "add_bos": bool}; when present it
    // replaces the ids guessed from token contents.
    bool special_given;
    int32_t sp_ids[4]; // bos, eos, pad, unk
    bool sp_add_bos;

    int pre_form;   // BPE_PRE_*
    char *regex;    // pattern in use (owned)
    pcre2_code *re; // compiled (JIT when available)
} bpe_model;

// The split pattern of a llama.cpp pre-tokenizer name (tokenizer.ggml.pre), NULL when unknown;
// *ignore_merges: HF's ignore_merges for it (Llama 3).
const char *slm_bpe_named_regex(const char *name, bool *ignore_merges);

// Byte -> code point of its printable symbol (GPT-2 bytes_to_unicode).
extern uint32_t slm_bpe_byte_cp[256];
// Fills slm_bpe_byte_cp once (thread-safe).
void slm_bpe_init_bytemap(void);
// Appends the UTF-8 of the byte-level symbols of `n` raw bytes to `out`.
void slm_bpe_bytes_to_symbols(const uint8_t *p, size_t n, slm_buf *out);

// Compiles `pattern` with PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF and JITs it.
// Returns NULL and fills errbuf (size 256) with PCRE2's message on failure.
pcre2_code *slm_bpe_compile_regex(const char *pattern, char *errbuf);

// Per-thread matching state for pre-tokenization (match data, JIT stack).
typedef struct bpe_matcher {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
} bpe_matcher;
void slm_bpe_matcher_init(bpe_matcher *m);
void slm_bpe_matcher_free(bpe_matcher *m);

// Callback receiving one pre-token: bytes [p, p + n), n > 0.
typedef void (*bpe_piece_fn)(void *ctx, const uint8_t *p, size_t n);

// Splits text[start, stop) into pre-tokens with `re` (Split "Isolated" semantics: every match is
// a piece and so is every run of bytes between matches, e.g. invalid UTF-8), calling `fn` on
// each in order. The whole of text[0, len) is the regex subject so that look-aheads see past
// `stop`; `stop` must be a match boundary of the full-text scan (training picks such points).
// Lossless: the pieces concatenate to text[start, stop).
void slm_bpe_pretokenize(const pcre2_code *re, bpe_matcher *m, const uint8_t *text, size_t len,
                         size_t start, size_t stop, bpe_piece_fn fn, void *ctx);

// Builds the tokenizer.json text of a model (the format slm_bpe_load_json reads).
void slm_bpe_write_json(const bpe_model *m, slm_buf *out);
// Appends `s` (n bytes) as a JSON string literal with quotes.
void slm_bpe_json_string(slm_buf *out, const char *s, size_t n);

#endif
