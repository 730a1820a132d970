// tokenizer: byte-level BPE (GPT-2 / Llama-3 family, Hugging Face tokenizer.json) and
// SentencePiece BPE models (tokenizer.model, the format Llama 2 ships), behind one interface.
//
// Invariants: a loaded tokenizer is immutable, so encode/decode may be called concurrently
// from many threads on the same object (each call keeps its own scratch state).
// Byte-level BPE is lossless: decode(encode(x)) == x for every byte string (except for bytes
// whose symbol the vocabulary lacks, which are dropped as Hugging Face tokenizers drops them).
// Special tokens (BOS/EOS/PAD/added tokens) in ordinary text are encoded as ordinary text
// unless the caller passes SLM_ENC_ALLOW_SPECIAL.
// A SentencePiece model whose normalizer or options shardlm does not implement exactly is
// refused at load with SLM_E_UNSUPPORTED, never encoded differently.
// This module does not know about shards, MPI or models.
#ifndef SLM_TOKENIZER_H
#define SLM_TOKENIZER_H

#include "base/base.h"

typedef enum slm_tok_type {
    SLM_TOK_BYTE_BPE = 1, // byte-level BPE, tokenizer.json (GPT-2 / Llama-3 family)
    SLM_TOK_SPM_BPE = 2   // SentencePiece BPE with byte fallback, tokenizer.model (Llama 2)
} slm_tok_type;

typedef struct slm_tokenizer slm_tokenizer;

// Per-call flags for slm_tokenizer_encode.
enum {
    SLM_ENC_ADD_BOS = 1 << 0,       // prepend the BOS id (if the tokenizer has one)
    SLM_ENC_ADD_EOS = 1 << 1,       // append the EOS id (if the tokenizer has one)
    SLM_ENC_ALLOW_SPECIAL = 1 << 2, // match special/added tokens' text in the input to their ids
};

// Loads a tokenizer file. The type is detected from the contents: a protobuf SentencePiece
// model (tokenizer.model) or a JSON tokenizer.json with model.type == "BPE" and a ByteLevel
// pre-tokenizer. Returns an owned object in *out (free with slm_tokenizer_free).
// Errors: SLM_E_IO (unreadable), SLM_E_FORMAT (malformed; names the path and the field),
// SLM_E_UNSUPPORTED (a valid file of a kind shardlm does not implement; names what).
slm_status slm_tokenizer_load(const char *path, slm_tokenizer **out);
void slm_tokenizer_free(slm_tokenizer *t);

slm_tok_type slm_tokenizer_type(const slm_tokenizer *t);
// "byte_bpe" or "sentencepiece_bpe".
const char *slm_tokenizer_type_name(const slm_tokenizer *t);
// Whether encoders should prepend BOS by default (SLM_ENC_ADD_BOS): true when the tokenizer has
// a BOS id, unless its file says otherwise (a GGUF import with add_bos_token false).
bool slm_tokenizer_add_bos(const slm_tokenizer *t);
// Number of ids (the model's vocab size must be >= this).
int32_t slm_tokenizer_vocab_size(const slm_tokenizer *t);
// Special ids, or -1 when the tokenizer has none.
int32_t slm_tokenizer_bos_id(const slm_tokenizer *t);
int32_t slm_tokenizer_eos_id(const slm_tokenizer *t);
int32_t slm_tokenizer_unk_id(const slm_tokenizer *t);
int32_t slm_tokenizer_pad_id(const slm_tokenizer *t);
// XXH64 of the file the tokenizer was loaded from (or of its saved JSON for a trained one).
uint64_t slm_tokenizer_hash(const slm_tokenizer *t);
// The text of token `id` as stored (byte-level symbols / SentencePiece piece); NULL if out of
// range. Borrowed; valid while `t` lives.
const char *slm_tokenizer_piece(const slm_tokenizer *t, int32_t id);

// Encodes `len` bytes of `text` and appends the ids to `out`.
// Errors: SLM_E_ARG on invalid flags. Never fails on any byte content for byte-level BPE;
// SentencePiece maps unknown characters through byte fallback (or UNK when the model has none).
// Thread-safe.
slm_status slm_tokenizer_encode(const slm_tokenizer *t, const char *text, size_t len, int flags,
                                slm_ivec *out);
// Decodes ids and appends the bytes to `out`. BOS/EOS/PAD ids produce no text.
// Errors: SLM_E_ARG naming the first id outside [0, vocab_size). Thread-safe.
slm_status slm_tokenizer_decode(const slm_tokenizer *t, const int32_t *ids, size_t n, slm_buf *out);

// As slm_tokenizer_decode, but the bytes exactly as the tokens hold them: SentencePiece
// byte-fallback pieces are appended verbatim, also when they do not form valid UTF-8 (decode
// puts U+FFFD for each byte of a malformed sequence). Byte-level BPE: the same as decode.
// Errors: those of slm_tokenizer_decode. Thread-safe.
slm_status slm_tokenizer_decode_bytes(const slm_tokenizer *t, const int32_t *ids, size_t n,
                                      slm_buf *out);

// Incremental decoding for streaming (generate): ids are pushed as they come, and each push
// returns only bytes that no later id can change. A multi-byte UTF-8 character that arrives as
// several tokens (byte fallback, or byte-level BPE tokens that split a character) is held back
// until complete, so no chunk ends inside a character and no replacement character is shown for
// a half-received one. Invariant: the concatenation of every push's bytes and finish's bytes
// equals slm_tokenizer_decode (or _decode_bytes with `raw`) of all ids at once.
typedef struct slm_tok_stream {
    const slm_tokenizer *tok; // borrowed
    bool raw;                 // decode_bytes semantics instead of decode
    slm_ivec ids;             // every id pushed (owned)
    slm_buf text;             // decode of ids (owned)
    size_t shown;             // bytes of text already returned
} slm_tok_stream;
// Starts an empty stream over `t` (which must outlive it).
void slm_tok_stream_init(slm_tok_stream *s, const slm_tokenizer *t, bool raw);
// Appends n ids; *bytes / *len receive the newly final bytes (borrowed, valid until the next
// call; *len may be 0). Errors: SLM_E_ARG for an id out of range (nothing is appended then).
slm_status slm_tok_stream_push(slm_tok_stream *s, const int32_t *ids, size_t n, const char **bytes,
                               size_t *len);
// Returns every byte not yet returned (what was held back when the ids end inside a character:
// then the one-shot decode's bytes, e.g. U+FFFD for an incomplete byte-fallback sequence).
void slm_tok_stream_finish(slm_tok_stream *s, const char **bytes, size_t *len);
// Frees what the stream owns.
void slm_tok_stream_free(slm_tok_stream *s);

// --- Byte-level BPE training ----------------------------------------------------------------

typedef struct slm_bpe_train_opts {
    const char *const *inputs; // text files (and directories, recursively) to learn from
    int n_inputs;
    int32_t vocab_size;          // total ids: 256 byte tokens + merges + specials
    const char *const *specials; // added special tokens, e.g. {"<|bos|>", "<|eos|>", "<|pad|>"}
    int n_specials;              // the first is BOS, the second EOS (when present)
    int threads;                 // counting threads (0: OpenMP default)
    bool verbose;                // progress lines on stderr
} slm_bpe_train_opts;

// Trains a byte-level BPE on the inputs: GPT-2 regex pre-tokenization (PCRE2, Unicode
// properties), the 256 bytes mapped to printable symbols (GPT-2 bytes_to_unicode), merges
// chosen by pair frequency with ties broken by the lexicographically smallest
// (left symbol, right symbol) byte strings, pair counts updated incrementally after each merge.
// Deterministic: the result does not depend on the thread count.
// Returns an owned tokenizer in *out; when the corpus runs out of pairs to merge first, it has
// fewer ids than vocab_size and a warning says how many. Errors: SLM_E_IO on inputs, SLM_E_ARG
// if vocab_size is smaller than 256 + n_specials, SLM_E_FORMAT on an empty corpus.
// Source: Sennrich et al. 2016 (BPE); Radford et al. 2019 (GPT-2 byte-level BPE).
slm_status slm_bpe_train(const slm_bpe_train_opts *opts, slm_tokenizer **out);

// Parses one line of whitespace-separated (space, tab, CR) token ids in [0, vocab) from `s`,
// up to its NUL or first '\n', into `ids` (cleared first). `what` prefixes messages with the
// source and line ("ids.txt:3"); columns count from 1; `vocab_name` names the range ("the
// model's vocabulary"). Errors: SLM_E_FORMAT "WHAT:COL: expected a token id, found 'x'";
// SLM_E_ARG "WHAT:COL: token id N is outside VOCAB_NAME [0, vocab)".
slm_status slm_token_ids_parse_line(const char *what, const char *s, int32_t vocab,
                                    const char *vocab_name, slm_ivec *ids);

// Writes a byte-level BPE tokenizer as a Hugging Face tokenizer.json (model BPE, vocab, merges,
// ByteLevel pre-tokenizer and decoder, added_tokens) atomically.
// Errors: SLM_E_IO; SLM_E_UNSUPPORTED for a SentencePiece tokenizer.
slm_status slm_tokenizer_save_json(const slm_tokenizer *t, const char *path);

// --- Vocabulary export (GGUF writer: ckpt/) --------------------------------------------------

// A token's kind, numbered as SentencePiece's ModelProto and GGUF's tokenizer.ggml.token_type:
// 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. Byte-level BPE: special
// added tokens are control, other added tokens user-defined, ids without a piece unused, the rest
// normal. 0 for an id out of range.
int slm_tokenizer_token_kind(const slm_tokenizer *t, int32_t id);
// The SentencePiece score of `id` (0 for byte-level BPE or an id out of range).
float slm_tokenizer_score(const slm_tokenizer *t, int32_t id);
// Merges of a byte-level BPE, by rank (0 for SentencePiece).
int32_t slm_tokenizer_n_merges(const slm_tokenizer *t);
// The pieces merge `rank` joins (borrowed, byte-level symbols); false when out of range.
bool slm_tokenizer_merge(const slm_tokenizer *t, int32_t rank, const char **left,
                         const char **right);
// The pre-tokenization regex of a byte-level BPE (borrowed): GPT-2's for a ByteLevel
// pre-tokenizer, the Split pattern otherwise; NULL for SentencePiece.
const char *slm_tokenizer_pretok_regex(const slm_tokenizer *t);
// GPT-2's pre-tokenization regex (what a ByteLevel pre-tokenizer with use_regex applies).
const char *slm_tokenizer_gpt2_regex(void);
// llama.cpp's tokenizer.ggml.pre name of a byte-level BPE's pre-tokenizer ("gpt-2", "smollm",
// "llama-bpe": the one whose pattern and ignore_merges it has), or NULL (none, or SentencePiece).
const char *slm_tokenizer_pre_name(const slm_tokenizer *t);
// Whether a byte-level BPE emits a pre-token that is a whole vocabulary entry without merging
// (tokenizer.json model.ignore_merges, Llama 3); false for SentencePiece.
bool slm_tokenizer_ignores_merges(const slm_tokenizer *t);
// Whether a SentencePiece model prepends a space (normalizer add_dummy_prefix); false for
// byte-level BPE.
bool slm_tokenizer_adds_space_prefix(const slm_tokenizer *t);
// Whether a SentencePiece model collapses runs of spaces and strips them at the ends
// (normalizer remove_extra_whitespaces); false for byte-level BPE.
bool slm_tokenizer_removes_extra_spaces(const slm_tokenizer *t);
// A vocabulary given as arrays (GGUF's tokenizer.ggml.* metadata): byte-level BPE (model gpt2)
// or SentencePiece (model llama: scores and token types, no merges).
typedef struct slm_tok_vocab {
    int32_t n_tokens;
    const char *const *tokens; // [n_tokens] byte-level symbol spelling (not NUL-terminated)
    const size_t *token_len;   // [n_tokens]
    const int32_t *token_type; // [n_tokens] GGUF token types (3 control, 4 user-defined), or NULL
    int32_t n_merges;
    const char *const *merges; // [n_merges] "left right"
    const size_t *merge_len;
    const char *pre; // pre-tokenizer name (tokenizer.ggml.pre): gpt2, smollm, starcoder, llama-bpe
    int32_t bos_id, eos_id, pad_id, unk_id; // -1: none
    bool add_bos;
    const float *scores;   // [n_tokens] SentencePiece scores (NULL for byte-level BPE)
    bool add_space_prefix; // SentencePiece: prepend a space (tokenizer.ggml.add_space_prefix)
} slm_tok_vocab;
// Appends the tokenizer.json text of vocabulary v to out: model BPE (vocab, merges; control
// tokens added as special, user-defined ones as plain added tokens), the pre-tokenizer as
// Sequence[Split(the named pattern), ByteLevel], ByteLevel decoder, and the special ids in
// model.shardlm_special_ids (which transformers' tokenizers ignore). `what` names the source in
// messages. Errors: SLM_E_UNSUPPORTED naming an unknown pre-tokenizer; SLM_E_FORMAT for a
// special id outside the vocabulary or a merge that is not two tokens.
slm_status slm_tokenizer_vocab_json(const slm_tok_vocab *v, const char *what, slm_buf *out);
// Appends a SentencePiece ModelProto (tokenizer.model bytes) of vocabulary v to out: BPE, every
// token a piece with its score and type (1 normal .. 6 byte; byte fallback when there are byte
// pieces), the identity normalizer with v->add_space_prefix and spaces kept, and in shardlm's
// extension field v's special ids and add_bos (SentencePiece ignores it). The bytes are loaded
// once before returning. Errors (messages name `what`): SLM_E_ARG without scores or types;
// SLM_E_FORMAT for a special id outside the vocabulary, an empty or duplicate piece, a type
// outside 1..6, no UNKNOWN piece, a BYTE piece that is not <0xXX>.
slm_status slm_tokenizer_vocab_spm(const slm_tok_vocab *v, const char *what, slm_buf *out);

#endif
