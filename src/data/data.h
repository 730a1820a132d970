// data: token shard files, the dataset manifest, corpus preparation (prep) and the
// deterministic distributed loader.
//
// A prepared dataset is a directory: manifest.json, the tokenizer file, and shard files
// (train_*.bin / val_*.bin), each a fixed header + little-endian tokens (docs/formats.md).
// Invariants: a shard or manifest is only ever visible under its final name once complete
// (temp name + fsync + rename). The loader refuses corrupt data (checksum, size, magic,
// token >= vocab) before yielding any batch. The loader's whole position is slm_loader_state,
// so a checkpoint can store it and a job with a different world size can resume from it.
// This module does not know about models.
#ifndef SLM_DATA_H
#define SLM_DATA_H

#include "base/base.h"
#include "tokenizer/tokenizer.h"

// --- Shard files ----------------------------------------------------------------------------

#define SLM_SHARD_MAGIC "SLMSHRD1" // 8 bytes at offset 0
#define SLM_SHARD_VERSION 1        // plain token shards (what text prep writes)
#define SLM_SHARD_VERSION_MASKED 2 // token shards with a per-token flags byte (instruction data)
#define SLM_SHARD_HEADER_BYTES 64
// Per-token flag bits of a version-2 shard (docs/formats.md "Shard file (version 2)").
enum {
    SLM_TOKF_TARGET = 1 << 0, // the loss predicts this token (from the one before it)
    SLM_TOKF_START = 1 << 1,  // this token starts a sample (positions restart, attention too)
};

// The parsed fixed header of a shard file (layout in docs/formats.md).
typedef struct slm_shard_header {
    uint32_t version;     // SLM_SHARD_VERSION
    uint32_t token_bytes; // 2 (uint16 tokens) or 4 (uint32 tokens)
    uint64_t n_tokens;    // tokens in the payload
    uint64_t n_docs;      // documents in the payload
    uint64_t payload_xxh64;
    uint32_t vocab_size; // vocab of the tokenizer that wrote it (all tokens are < this)
    bool masked;         // version 2: n_tokens flag bytes (SLM_TOKF_*) follow the tokens
} slm_shard_header;

// Writes `n` tokens (each < vocab_size) of `n_docs` documents as a shard file at `path`,
// atomically (temp name, fsync, rename). Token width: uint16 if vocab_size <= 65536 else uint32.
// Errors: SLM_E_IO; SLM_E_ARG if a token is >= vocab_size (names its index).
slm_status slm_shard_write(const char *path, const int32_t *tokens, uint64_t n, uint64_t n_docs,
                           uint32_t vocab_size);
// The same as a version-2 shard: after the tokens, flags[n] (SLM_TOKF_* bits; only those bits
// may be set, and SLM_TOKF_START must be set on token 0 and on exactly n_docs tokens).
// Errors: as slm_shard_write, plus SLM_E_ARG naming the first bad flags byte.
slm_status slm_shard_write_masked(const char *path, const int32_t *tokens, const uint8_t *flags,
                                  uint64_t n, uint64_t n_docs, uint32_t vocab_size);
// Parses and checks a shard header (version 1 or 2) against the file size; `data` is the whole
// mapped file. Errors: SLM_E_FORMAT naming `path` (short file, wrong magic, version, token width,
// size).
slm_status slm_shard_parse_header(const char *path, const uint8_t *data, size_t len,
                                  slm_shard_header *h);
// Full check of a mapped shard: the header (as slm_shard_parse_header), the payload XXH64
// against the header, the header's vocab_size <= vocab_size (pass the dataset's vocab; 0 uses
// the header's) and every token < the header's vocab_size. Errors: SLM_E_FORMAT (header, token out
// of range: names the token index and value), SLM_E_CHECKSUM (header vs payload hash), each naming
// `path`.
slm_status slm_shard_verify(const char *path, const uint8_t *data, size_t len, uint32_t vocab_size,
                            slm_shard_header *h);

// --- Instruction samples (src/data/sample.c; docs/formats.md "Instruction data") ------------

// slm_prep_opts.format: what a JSONL line holds.
enum {
    SLM_PREP_TEXT = 0,              // {"text": ...} documents (plain shards, no mask)
    SLM_PREP_PROMPT_COMPLETION = 1, // {"prompt": ..., "completion": ...}
    SLM_PREP_CHAT = 2,              // {"messages": [{"role": ..., "content": ...}, ...]}
};

// One message of a sample; role 0 system, 1 user, 2 assistant.
typedef struct slm_chat_msg {
    int role;
    char *content; // owned, UTF-8
} slm_chat_msg;

typedef struct slm_sample {
    int n_msgs;
    slm_chat_msg *msgs;     // owned
    bool prompt_completion; // from {"prompt", "completion"}: msgs = user prompt, assistant reply
} slm_sample;

// A chat template: built-in "llama2" ([INST] <<SYS>> form) "llama3" (header form) or "chatml"
// (<|im_start|>ROLE\n...<|im_end|>), or a
// template file (JSON: {"begin", "system", "user", "assistant", "trim"}, docs/formats.md).
typedef struct slm_chat_template slm_chat_template;

// Loads `spec` ("llama2", "llama3", "chatml" or a file path). Errors: SLM_E_ARG (neither), SLM_E_IO
// / SLM_E_FORMAT naming the file and field.
slm_status slm_chat_template_load(const char *spec, slm_chat_template **out);
// slm_chat_template_load for a command whose option is not --chat-template (generate's --chat):
// its messages name `opt` instead.
slm_status slm_chat_template_load_opt(const char *spec, const char *opt, slm_chat_template **out);
// A template file's JSON text [len bytes]; `name` (its path) names it in messages and gives the
// template's name (its base name). Errors: SLM_E_FORMAT naming the field.
slm_status slm_chat_template_parse(const char *text, size_t len, const char *name,
                                   slm_chat_template **out);
void slm_chat_template_free(slm_chat_template *t);
const char *slm_chat_template_name(const slm_chat_template *t);
// "system" / "user" / "assistant".
const char *slm_chat_role_name(int role);
// The Jinja text (as tokenizer.chat_template in a GGUF, transformers' apply_chat_template) that
// renders `messages` as `t` does, with add_generation_prompt for the assistant header; llama2
// uses the bos_token / eos_token variables. Message text goes through Jinja's `trim` (Python's
// str.strip: also Unicode whitespace, where shardlm strips ASCII whitespace). Returns an owned
// string.
char *slm_chat_template_to_jinja(const slm_chat_template *t);
// Checks that tokenizer `tok` can encode template `t` (NULL: no template): llama3 needs its
// four special tokens as single ids, llama2 BOS and EOS. Errors: SLM_E_ARG naming the token.
slm_status slm_chat_template_check(const slm_chat_template *t, const slm_tokenizer *tok);

// Reads one parsed JSONL object `j` (a cJSON *) of `format` (SLM_PREP_PROMPT_COMPLETION /
// SLM_PREP_CHAT) into *s (free with slm_sample_free). Returns false with a reason in why[cap]
// (missing or mistyped field, unknown role, a system message not first, no message).
struct cJSON;
bool slm_sample_from_json(const struct cJSON *j, int format, slm_sample *s, char *why, size_t cap);
void slm_sample_free(slm_sample *s);

// One piece of a rendered sample: text (owned; special tokens matched when `special`) or a
// bare token id (id >= 0, text NULL). `target`: its tokens are loss targets. `joined`: the text
// starts with a space that joins it to the text before in the template's one string; a
// SentencePiece tokenizer, which starts every encoded piece with its dummy-prefix "▁", encodes it
// without that space (so both kinds give the template string's tokens).
typedef struct slm_sample_seg {
    char *text;
    size_t len;
    int32_t id;
    bool target, special;
    bool joined;
} slm_sample_seg;

typedef struct slm_sample_segs {
    int n;
    slm_sample_seg *segs; // owned
} slm_sample_segs;

// Renders sample `s` with template `t` (NULL: prompt-completion as [BOS] prompt completion
// [EOS]) into segments; bos / eos are the tokenizer's ids (-1: none). With `gen` (generation
// prompt) a trailing assistant message is dropped, nothing is a target, and the template's
// assistant header is appended. Returns false with a reason in why (llama2 roles not
// alternating, a role the template file lacks, chat without a template).
bool slm_sample_render(const slm_chat_template *t, const slm_sample *s, bool gen, int32_t bos,
                       int32_t eos, slm_sample_segs *g, char *why, size_t cap);
void slm_sample_segs_free(slm_sample_segs *g);
// Encodes the segments, each on its own, appending ids to *ids and one SLM_TOKF_* byte per id to
// *flags (TARGET on target segments, START on the first id). Errors: the tokenizer's.
slm_status slm_sample_encode(const slm_sample_segs *g, const slm_tokenizer *tok, slm_ivec *ids,
                             slm_buf *flags);

// The prompt ids of a chat turn for generation: [system (optional, NULL: none)] + user message
// rendered with `t` and the assistant header appended (slm_sample_render with gen), encoded
// (slm_sample_encode). *stop_id: the id that ends the assistant's reply (llama3 <|eot_id|>, a
// template file's assistant suffix when it is one token), else the tokenizer's EOS (-1: none).
// Errors: slm_chat_template_check's, SLM_E_ARG for a role the template lacks.
slm_status slm_chat_prompt_ids(const slm_chat_template *t, const slm_tokenizer *tok,
                               const char *system, const char *user, slm_ivec *ids,
                               int32_t *stop_id);

// --- Preparation ----------------------------------------------------------------------------

typedef struct slm_prep_opts {
    const char *tokenizer_path;
    const char *const *inputs; // files, directories (recursive), *.jsonl (field "text"), "-"
    int n_inputs;
    const char *out_dir;
    int64_t shard_tokens; // target tokens per shard file
    double val_fraction;  // fraction of documents assigned to val, by hash(content, seed)
    int workers;          // threads per process
    uint64_t seed;
    bool progress;      // progress bar (terminal) / log lines
    int64_t unit_bytes; // work unit size in bytes (0: 1 MiB); the output's token multiset does
                        // not depend on it (tests use small units to cut documents across units)
    int format;         // SLM_PREP_TEXT (default) / _PROMPT_COMPLETION / _CHAT (JSONL only)
    const char *chat_template; // "llama2", "llama3", a template file, or NULL
} slm_prep_opts;

// Prepares a corpus into `out_dir` (see the module comment). Rank 0 first removes stale temp
// directories of earlier runs for the same --out whose pid is no longer running (logged).
// Under MPI (world > 1, via dist/) each rank takes a disjoint part of the inputs and rank 0
// writes the manifest after all ranks finished. Collective when world > 1. Document rules
// (blank-line separated text, JSONL "text", stdin), the train/val hash, the work split and what
// does / does not depend on workers and ranks: docs/formats.md "Token shards". Starts opts->workers
// threads; installs SIGINT/SIGTERM handlers for its duration (restored on return). Errors: SLM_E_IO
// / SLM_E_FORMAT naming the file and line (bad JSONL, missing "text", two objects on a line, a
// \u0000 escape, a lone UTF-16 surrogate escape), SLM_E_ARG for an empty corpus or bad options,
// SLM_E_INTERRUPTED on SIGINT/SIGTERM. On error every file this run wrote is removed (shards,
// manifest, tokenizer copy); shards carry a
// ".partial" suffix until the whole run succeeded, so even a killed run leaves no shard-named
// file and no manifest.
slm_status slm_prep_run(const slm_prep_opts *opts);
// Under mpirun, before slm_prep_run: checks that every rank holds the same settings
// (slm_dist_agree_values): --tokenizer (path, and the XXH64 of the file each rank reads),
// --input (the list, in order), --out, --shard-tokens, --val-fraction, --unit-bytes, --seed and
// the collective timeout, --format and --chat-template. Not compared: workers and progress (they
// may differ per rank). Collective; SLM_OK in a world of one. Errors: SLM_E_ARG when an option
// differs, SLM_E_FORMAT when only the tokenizer file's contents differ, naming the setting and the
// ranks.
slm_status slm_prep_agree(const slm_prep_opts *opts, double collective_timeout_s);

// --- Manifest ---------------------------------------------------------------------------------

typedef struct slm_shard_info {
    char *file; // name relative to the dataset directory (owned)
    uint64_t n_tokens, n_docs, bytes, xxh64;
} slm_shard_info;

typedef struct slm_split_info {
    int n_shards;
    slm_shard_info *shards; // owned
    uint64_t n_tokens, n_docs;
} slm_split_info;

typedef struct slm_dataset {
    char *dir;            // owned copy of the dataset directory
    char *tokenizer_file; // path of the tokenizer inside dir (owned)
    uint64_t tokenizer_xxh64;
    int32_t vocab_size;
    int32_t bos_id, eos_id; // -1 if none
    slm_split_info train, val;
    char *tokenizer_type; // "byte_bpe" / "sentencepiece_bpe" (owned; may be NULL if unknown)
    uint32_t token_bytes; // 2 or 4: the width every shard of this dataset uses
    uint64_t seed;        // prep's --seed (train/val assignment hash key), < 2^53
    double val_fraction;  // prep's --val-fraction
    // "documents" in the manifest (absent in manifests of older prep runs: has_doc_counts
    // false): documents prep read, and those it skipped as empty (no text, or encoded to no
    // token); written = train.n_docs + val.n_docs = docs_read - docs_skipped.
    bool has_doc_counts;
    uint64_t docs_read, docs_skipped;
    // Instruction data (manifest format_version 2, "samples"): every shard is a version-2 shard
    // whose documents are samples with a per-token loss mask. sample_format is
    // "prompt-completion" or "chat", chat_template the --chat-template given ("llama2",
    // "llama3", a file's base name) or NULL for none (owned strings).
    bool masked;
    char *sample_format, *chat_template;
} slm_dataset;

// Reads DIR/manifest.json. Errors: SLM_E_IO (missing: "no manifest.json in DIR; run shardlm
// prep"), SLM_E_FORMAT naming the field.
slm_status slm_dataset_open(const char *dir, slm_dataset *ds);
// Parses manifest JSON text (`len` bytes, need not be NUL-terminated) for the dataset in `dir`
// into *ds (owned; free with slm_dataset_free, also on error). `what` names the source in
// messages. Checks types and ranges of every field and that the split totals add up.
// Errors: SLM_E_FORMAT naming `what` and the field.
slm_status slm_dataset_parse(const char *dir, const char *what, const char *json, size_t len,
                             slm_dataset *ds);
// Writes ds->dir/manifest.json atomically from *ds (format in docs/formats.md).
// Errors: SLM_E_IO.
slm_status slm_dataset_write(const slm_dataset *ds);
// Frees what *ds owns and zeroes it; safe on a zeroed struct.
void slm_dataset_free(slm_dataset *ds);

// Maps the shard `si` of dataset `ds` (ds->dir/si->file) and verifies it against its manifest
// entry and against itself: file size and whole-file XXH64 (manifest), then header, payload
// hash and every token < ds->vocab_size (slm_shard_verify), then the header's n_tokens / n_docs
// (manifest). On success *map holds the mapping (release with slm_map_free) and *h the header;
// on error nothing stays mapped. Errors: SLM_E_IO / SLM_E_FORMAT / SLM_E_CHECKSUM naming the
// shard's path, with a HINT to rerun shardlm prep where the file is corrupt.
slm_status slm_shard_open_verified(const slm_dataset *ds, const slm_shard_info *si, slm_map *map,
                                   slm_shard_header *h);
// The flags byte (SLM_TOKF_*) of token i of a masked (version-2) shard payload of n_tokens.
static inline uint8_t slm_shard_flags(const uint8_t *payload, uint32_t token_bytes,
                                      uint64_t n_tokens, uint64_t i) {
    return payload[n_tokens * token_bytes + i];
}
// Token i of a shard payload of `token_bytes` (2 or 4) little-endian bytes per token.
static inline uint32_t slm_shard_token(const uint8_t *payload, uint32_t token_bytes, uint64_t i) {
    return token_bytes == 2 ? slm_get_le16(payload + 2 * i) : slm_get_le32(payload + 4 * i);
}
// Unigram entropy, in nats, of the token frequencies of a split ("train" / "val") of the
// dataset in data_dir: H = -sum_v p(v) ln p(v) over the split's tokens (every shard opened with
// slm_shard_open_verified). *n_tokens (optional) receives the split's token count.
// Errors: those of slm_dataset_open / slm_shard_open_verified; SLM_E_ARG for an unknown split;
// SLM_E_FORMAT for an empty split.
slm_status slm_split_unigram_entropy(const char *data_dir, const char *split, double *nats,
                                     int64_t *n_tokens);

// --- Datasets on S3 (src/data/remote.c, docs/storage.md) --------------------------------------

// Makes CACHE_DIR a local copy of the dataset at s3://BUCKET/PREFIX (created; ranks sharing it
// take turns through an flock): GETs manifest.json, then streams the tokenizer and every shard
// not already there with the manifest's size and XXH64, sequentially per object in 16 MiB range
// GETs, 4 in flight, hashing as the bytes arrive; writes manifest.json last. Then CACHE_DIR opens
// as any dataset (slm_loader_open). Errors: SLM_E_IO (missing object, size differs: "truncated?",
// S3 errors), SLM_E_CHECKSUM naming s3://BUCKET/KEY, SLM_E_FORMAT for the manifest.
slm_status slm_dataset_fetch(const char *uri, const char *cache_dir);
// Uploads the prepared dataset DIR to s3://BUCKET/PREFIX: tokenizer and shards (multipart when
// large), manifest.json last. Errors: those of slm_dataset_open and the S3 client.
slm_status slm_dataset_upload(const char *dir, const char *uri);

// --- Loader ---------------------------------------------------------------------------------

// Position of the loader in the global window sequence: a checkpoint stores these integers.
typedef struct slm_loader_state {
    uint64_t seed;
    int64_t epoch; // completed passes over the split
    int64_t pos;   // windows consumed by all ranks together in the current epoch
} slm_loader_state;

typedef struct slm_loader slm_loader;

typedef struct slm_loader_opts {
    const char *dir;   // prepared dataset directory
    const char *split; // "train" or "val"
    int T;             // sequence length; a window is T+1 tokens
    int B_global;      // windows per global batch (all ranks together)
    int rank, world;   // this rank's slice: B_global / world windows (world must divide B_global)
    uint64_t seed;
    bool shuffle;    // train: true (per-epoch permutation of windows); val: false
    bool no_packing; // masked datasets: one sample per window (padded) instead of packing
} slm_loader_opts;

// Opens the split: maps shards, verifies every shard (size, magic, checksum, tokens < vocab).
// Windows: the split's shards concatenated in manifest order, window k = tokens
// [k*T, k*T + T] (T+1 tokens); per epoch a seeded permutation of the windows.
// Errors: SLM_E_IO / SLM_E_FORMAT / SLM_E_CHECKSUM naming the shard; SLM_E_ARG if world does not
// divide B_global, or the split has fewer windows than B_global (shuffle) / no window at all
// (shuffle = false: a validation walk may end with a ragged batch).
slm_status slm_loader_open(const slm_loader_opts *opts, slm_loader **out);
void slm_loader_free(slm_loader *l);

// Fills tokens[B_local, T+1] (int32) with this rank's slice of the next global batch and
// advances the global position by B_global. A batch that reaches the end of an epoch continues
// with the next epoch's permutation (nothing is dropped: every window appears exactly once per
// epoch; epoch/pos wrap accordingly). The concatenation over ranks 0..world-1 equals the
// world-of-one batch. No I/O errors are possible here: all shards were verified at open.
// Permutation: a keyed Feistel network with cycle walking (details in loader.c).
void slm_loader_next(slm_loader *l, int32_t *tokens);
// Validation walk: fills this rank's slice of the next batch in order and returns the number of
// windows written (< B_local at the end, 0 when the split is exhausted); no epoch wrap.
int slm_loader_next_val(slm_loader *l, int32_t *tokens);
// slm_loader_next / slm_loader_next_val that also fill, when not NULL, target[B_local, T+1]
// (1: token t is a loss target, predicted from token t-1; 0 for t = 0) and pos[B_local, T+1]
// (token t's position in its sample, restarting at 0 per sample). Plain datasets: target = 1
// for t > 0, pos = t. Masked datasets (instruction data): a window is whole samples packed back
// to back in stream order while they fit in T+1 tokens (one per window with no_packing;
// samples longer than T+1 cut to T+1, counted in a warning at open), then padding (EOS, or 0
// without one; never a target; its own run of positions); target = the tokens' target flag
// except at each sample's first token.
void slm_loader_next_ex(slm_loader *l, int32_t *tokens, uint8_t *target, int32_t *pos);
int slm_loader_next_val_ex(slm_loader *l, int32_t *tokens, uint8_t *target, int32_t *pos);
// Real (non-padding) input tokens, summed over the windows the last slm_loader_next* /
// next_val* call wrote (this rank's slice): per window the sample tokens among its first T (the
// model's inputs). Plain datasets: T per window; masked datasets: T minus the padding there.
int64_t slm_loader_last_real_tokens(const slm_loader *l);
// Whether the split is instruction data (manifest format_version 2): per-token targets.
bool slm_loader_masked(const slm_loader *l);
int64_t slm_loader_n_windows(const slm_loader *l);
slm_loader_state slm_loader_get_state(const slm_loader *l);
// Restores a position (possibly saved under another world size). Errors: SLM_E_ARG if the
// state is outside the split.
slm_status slm_loader_set_state(slm_loader *l, slm_loader_state s);
const slm_dataset *slm_loader_dataset(const slm_loader *l);

#endif
