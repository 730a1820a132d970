// Byte-level BPE (GPT-2 / Llama-3 family): tokenizer.json load and save, encode, decode.
//
// Encoding follows Hugging Face `tokenizers` exactly for the forms accepted at load:
//   1. (SLM_ENC_ALLOW_SPECIAL only) split the text on added tokens, leftmost-longest match;
//   2. pre-tokenize each segment with the regex (GPT-2's, or the Split pattern), every match and
//      every unmatched run (only invalid UTF-8 can be unmatched) being one pre-token;
//   3. map the pre-token's bytes to their single-byte tokens and apply merges lowest rank first,
//      leftmost first among equal ranks (HF's Word::merge_all order), with a binary heap of
//      (rank, position) and stale entries skipped when popped.
// Pre-token -> ids results are cached per thread (pthread key, freed at thread exit), keyed
// by the model's serial number so a thread may switch between tokenizers safely.
#include "tokenizer/bpe.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

const char slm_bpe_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

uint32_t slm_bpe_byte_cp[256];
static int16_t cp_byte[324]; // code point -> byte (-1: not a byte symbol); symbols are < 324
static pthread_once_t bytemap_once = PTHREAD_ONCE_INIT;
static atomic_uint_fast64_t model_serial = 1;

// GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in increasing byte order, so every byte becomes one visible, non-space character.
static void bytemap_init_once(void) {
    for (int i = 0; i < 324; i++)
        cp_byte[i] = -1;
    uint32_t extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        slm_bpe_byte_cp[b] = printable ? (uint32_t)b : 256 + extra++;
        cp_byte[slm_bpe_byte_cp[b]] = (int16_t)b;
    }
}

void slm_bpe_init_bytemap(void) {
    pthread_once(&bytemap_once, bytemap_init_once);
}

void slm_bpe_bytes_to_symbols(const uint8_t *p, size_t n, slm_buf *out) {
    slm_buf_reserve(out, out->len + 2 * n + 1);
    char *o = out->data + out->len;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = slm_bpe_byte_cp[p[i]];
        if (cp < 0x80) {
            *o++ = (char)cp;
        } else { // all symbols are < U+0800: two UTF-8 bytes
            *o++ = (char)(0xC0 | (cp >> 6));
            *o++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    out->len = (size_t)(o - out->data);
    out->data[out->len] = 0;
}

// Raw bytes of a byte-level piece: each symbol maps back to its byte. Returns false (having
// appended the bytes decoded so far) at the first character that is not a byte-level symbol.
static bool symbols_to_bytes(const char *s, slm_buf *out) {
    const uint8_t *p = (const uint8_t *)s;
    while (*p) {
        uint32_t cp;
        if (p[0] < 0x80) {
            cp = p[0];
            p++;
        } else if ((p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) {
            cp = ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
            p += 2;
        } else {
            return false;
        }
        if (cp >= 324 || cp_byte[cp] < 0) return false;
        uint8_t c = (uint8_t)cp_byte[cp];
        slm_buf_append(out, &c, 1);
    }
    return true;
}

pcre2_code *slm_bpe_compile_regex(const char *pattern, char *errbuf) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
    if (!re) {
        char msg[200];
        pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
        snprintf(errbuf, 256, "%s at offset %zu", msg, (size_t)off);
        return NULL;
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // the interpreter is the fallback
    return re;
}

void slm_bpe_matcher_init(bpe_matcher *m) {
    m->md = pcre2_match_data_create(32, NULL);
    m->mc = pcre2_match_context_create(NULL);
    // Long whitespace runs make `\s+(?!\S)` backtrack; give the JIT room (grows on demand).
    m->js = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    if (!m->md || !m->mc || !m->js) slm_fatal("pcre2: out of memory creating match state");
    pcre2_jit_stack_assign(m->mc, NULL, m->js);
}

void slm_bpe_matcher_free(bpe_matcher *m) {
    if (m->md) pcre2_match_data_free(m->md);
    if (m->mc) pcre2_match_context_free(m->mc);
    if (m->js) pcre2_jit_stack_free(m->js);
    memset(m, 0, sizeof *m);
}

void slm_bpe_pretokenize(const pcre2_code *re, bpe_matcher *m, const uint8_t *text, size_t len,
                         size_t start, size_t stop, bpe_piece_fn fn, void *ctx) {
    size_t pos = start, gap = start;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    while (pos < stop) {
        int rc = pcre2_match(re, text, len, pos, 0, m->md, m->mc);
        if (rc < 0) break; // no match (or a matching error): the rest is one unmatched run
        size_t s = ov[0], e = ov[1];
        if (s >= stop) break;
        if (e > stop) e = stop; // only for a `stop` that is not a boundary; stays lossless
        if (e == s) {           // an empty match (a user regex): not a piece, step past it
            pos = s + 1;
            continue;
        }
        if (s > gap) fn(ctx, text + gap, s - gap);
        fn(ctx, text + s, e - s);
        pos = gap = e;
    }
    if (stop > gap) fn(ctx, text + gap, stop - gap);
}

// ---------------------------------------------------------------------------------------------
// Hash maps

static uint64_t hash_bytes(const void *p, size_t n) {
    return slm_xxh64(p, n, 0x5eed);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

static int32_t merge_rank(const bpe_model *m, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = m->mcap - 1;
    for (size_t i = slm_mix64(key) & mask;; i = (i + 1) & mask) {
        if (m->mkey[i] == key) return m->mrank[i];
        if (m->mkey[i] == UINT64_MAX) return -1;
    }
}

static void merge_map_put(bpe_model *m, int32_t a, int32_t b, int32_t rank) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = m->mcap - 1;
    for (size_t i = slm_mix64(key) & mask;; i = (i + 1) & mask) {
        if (m->mkey[i] == key || m->mkey[i] == UINT64_MAX) {
            m->mkey[i] = key; // a repeated pair keeps its last rank, as HF's HashMap does
            m->mrank[i] = rank;
            return;
        }
    }
}

static const char *raw_of(const bpe_model *m, int32_t id, size_t *n) {
    *n = (size_t)(m->raw_off[id + 1] - m->raw_off[id]);
    return m->raw + m->raw_off[id];
}

// Looks up raw bytes in the model-token map (ignore_merges); -1 when absent.
static int32_t vmap_get(const bpe_model *m, const uint8_t *p, size_t n) {
    size_t mask = m->vcap - 1;
    for (size_t i = hash_bytes(p, n) & mask;; i = (i + 1) & mask) {
        int32_t id = m->vmap[i];
        if (id < 0) return -1;
        size_t k;
        const char *r = raw_of(m, id, &k);
        if (k == n && memcmp(r, p, n) == 0) return id;
    }
}

// Piece string -> id, used while loading (merges name tokens by their pieces).
typedef struct piece_map {
    int32_t *slot;
    size_t cap;
} piece_map;

static int32_t piece_map_get(const piece_map *pm, char *const *piece, const char *s, size_t n) {
    size_t mask = pm->cap - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = pm->slot[i];
        if (id < 0) return -1;
        if (strlen(piece[id]) == n && memcmp(piece[id], s, n) == 0) return id;
    }
}

// Inserts id; returns the id already holding that piece, or -1 if it was new.
static int32_t piece_map_put(piece_map *pm, char *const *piece, int32_t id) {
    size_t n = strlen(piece[id]), mask = pm->cap - 1;
    for (size_t i = hash_bytes(piece[id], n) & mask;; i = (i + 1) & mask) {
        int32_t o = pm->slot[i];
        if (o < 0) {
            pm->slot[i] = id;
            return -1;
        }
        if (strcmp(piece[o], piece[id]) == 0) return o;
    }
}

// ---------------------------------------------------------------------------------------------
// Load

void slm_bpe_free(void *impl) {
    bpe_model *m = impl;
    if (!m) return;
    if (m->piece)
        for (int32_t i = 0; i < m->n_ids; i++)
            free(m->piece[i]);
    free(m->piece);
    free(m->flags);
    free(m->raw);
    free(m->raw_off);
    free(m->merge_left);
    free(m->merge_right);
    free(m->merge_new);
    free(m->mkey);
    free(m->mrank);
    free(m->vmap);
    free(m->added_ids);
    free(m->unk_token);
    free(m->regex);
    if (m->re) pcre2_code_free(m->re);
    free(m);
}

// Largest id accepted in a tokenizer.json (keeps a corrupt file from allocating gigabytes).
#define BPE_MAX_IDS (1 << 22)

static const char *json_type_name(const cJSON *obj) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

static slm_status check_bytelevel(const char *path, const char *field, const cJSON *bl,
                                  bool want_regex) {
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(bl, "add_prefix_space");
    if (slm_json_true(ap))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: %s.add_prefix_space is true; shardlm implements only false (a "
                        "prefix space would not round-trip)",
                        path, field);
    const cJSON *ur = cJSON_GetObjectItemCaseSensitive(bl, "use_regex");
    bool use_regex = ur ? cJSON_IsTrue(ur) : true; // HF's default is true
    if (use_regex != want_regex)
        return slm_fail(SLM_E_UNSUPPORTED, "%s: %s.use_regex is %s; expected %s here", path, field,
                        use_regex ? "true" : "false", want_regex ? "true" : "false");
    return SLM_OK;
}

// Accepts ByteLevel(use_regex) or Sequence[Split(Regex, Isolated), ByteLevel(no regex)].
static slm_status parse_pre_tokenizer(const char *path, const cJSON *pt, bpe_model *m) {
    if (slm_json_absent_or_null(pt))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: pre_tokenizer is null; shardlm implements byte-level BPE with a "
                        "ByteLevel pre-tokenizer",
                        path);
    const char *ty = json_type_name(pt);
    if (ty && !strcmp(ty, "ByteLevel")) {
        slm_status st = check_bytelevel(path, "pre_tokenizer", pt, true);
        if (st) return st;
        m->pre_form = BPE_PRE_BYTELEVEL;
        m->regex = slm_xstrdup(slm_bpe_gpt2_regex);
        return SLM_OK;
    }
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        const cJSON *sp = cJSON_GetArrayItem(seq, 0), *bl = cJSON_GetArrayItem(seq, 1);
        const char *t0 = sp ? json_type_name(sp) : NULL, *t1 = bl ? json_type_name(bl) : NULL;
        if (!cJSON_IsArray(seq) || cJSON_GetArraySize(seq) != 2 || !t0 || !t1 ||
            strcmp(t0, "Split") || strcmp(t1, "ByteLevel"))
            return slm_fail(SLM_E_UNSUPPORTED,
                            "%s: pre_tokenizer.pretokenizers: shardlm implements only "
                            "[Split(Regex), ByteLevel(use_regex: false)]",
                            path);
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sp, "pattern");
        const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(sp, "behavior");
        if (!cJSON_IsString(rx))
            return slm_fail(SLM_E_UNSUPPORTED,
                            "%s: pre_tokenizer.pretokenizers[0].pattern: expected {\"Regex\": ...}",
                            path);
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated"))
            return slm_fail(SLM_E_UNSUPPORTED,
                            "%s: pre_tokenizer.pretokenizers[0].behavior: shardlm implements "
                            "only \"Isolated\"",
                            path);
        if (slm_json_true(cJSON_GetObjectItemCaseSensitive(sp, "invert")))
            return slm_fail(SLM_E_UNSUPPORTED,
                            "%s: pre_tokenizer.pretokenizers[0].invert: true is not implemented",
                            path);
        slm_status st = check_bytelevel(path, "pre_tokenizer.pretokenizers[1]", bl, false);
        if (st) return st;
        m->pre_form = BPE_PRE_SPLIT;
        m->regex = slm_xstrdup(rx->valuestring);
        return SLM_OK;
    }
    return slm_fail(SLM_E_UNSUPPORTED,
                    "%s: pre_tokenizer.type \"%s\": shardlm implements ByteLevel or "
                    "Sequence[Split, ByteLevel]",
                    path, ty ? ty : "(missing)");
}

static slm_status parse_model_options(const char *path, const cJSON *model, bpe_model *m) {
    const char *ty = json_type_name(model);
    if (!ty) return slm_fail(SLM_E_FORMAT, "%s: model.type: expected a string (\"BPE\")", path);
    if (strcmp(ty, "BPE"))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: model.type is \"%s\"; shardlm reads byte-level \"BPE\" only", path,
                        ty);
    if (slm_json_true(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        return slm_fail(SLM_E_UNSUPPORTED, "%s: model.byte_fallback true is not implemented", path);
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!slm_json_absent_or_null(dr) && !(cJSON_IsNumber(dr) && dr->valuedouble == 0.0))
        return slm_fail(SLM_E_UNSUPPORTED, "%s: model.dropout: BPE dropout is not implemented",
                        path);
    const char *affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(model, affix[i]);
        if (!slm_json_absent_or_null(x) && !(cJSON_IsString(x) && x->valuestring[0] == 0))
            return slm_fail(SLM_E_UNSUPPORTED, "%s: model.%s is not implemented", path, affix[i]);
    }
    m->ignore_merges = slm_json_true(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(model, "shardlm_special_ids");
    if (!slm_json_absent_or_null(sp)) {
        if (!cJSON_IsObject(sp))
            return slm_fail(SLM_E_FORMAT, "%s: model.shardlm_special_ids: expected an object",
                            path);
        static const char *const k[4] = {"bos", "eos", "pad", "unk"};
        for (int i = 0; i < 4; i++) {
            char name[48];
            snprintf(name, sizeof name, "model.shardlm_special_ids.%s", k[i]);
            double d = -1;
            slm_status st =
                slm_json_check_num(path, name, cJSON_GetObjectItemCaseSensitive(sp, k[i]), -1,
                                   BPE_MAX_IDS - 1, true, &d);
            if (st) return st;
            m->sp_ids[i] = (int32_t)d;
        }
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(sp, "add_bos");
        if (!cJSON_IsBool(ab))
            return slm_fail(SLM_E_FORMAT, "%s: model.shardlm_special_ids.add_bos: expected a bool",
                            path);
        m->sp_add_bos = cJSON_IsTrue(ab);
        m->special_given = true;
    }
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(unk)) m->unk_token = slm_xstrdup(unk->valuestring);
    return SLM_OK;
}

static slm_status get_id(const char *path, const char *field, int idx, const cJSON *v,
                         int32_t *out) {
    char name[64];
    snprintf(name, sizeof name, "%s[%d]", field, idx);
    double d = 0;
    slm_status st = slm_json_check_num(path, name, v, 0, BPE_MAX_IDS - 1, true, &d);
    if (!st) *out = (int32_t)d;
    return st;
}

// First added token whose content is one of `names`, or -1.
static int32_t find_named(const bpe_model *m, const char *const *names) {
    for (int k = 0; names[k]; k++)
        for (int32_t i = 0; i < m->n_added; i++)
            if (!strcmp(m->piece[m->added_ids[i]], names[k])) return m->added_ids[i];
    return -1;
}

// BOS / EOS / PAD / UNK ids. tokenizer.json does not name them, so: well-known contents first
// (shardlm's <|bos|>/<|eos|>/<|pad|>, GPT-2's <|endoftext|>, Llama-3's, SentencePiece-style
// <s>/</s>), else the first two special added tokens in id order are BOS and EOS (the order
// `shardlm tokenizer train --special` writes them); a single one is BOS (no EOS).
static void assign_special_ids(bpe_model *m, slm_tokenizer *t) {
    static const char *const bos[] = {"<|bos|>", "<|begin_of_text|>", "<s>", "<|endoftext|>", NULL};
    static const char *const eos[] = {"<|eos|>", "<|end_of_text|>", "</s>", "<|endoftext|>", NULL};
    static const char *const pad[] = {"<|pad|>", "<pad>", "[PAD]", NULL};
    t->bos_id = find_named(m, bos);
    t->eos_id = find_named(m, eos);
    t->pad_id = find_named(m, pad);
    if (t->bos_id < 0 && t->eos_id < 0) {
        int32_t sp[2] = {-1, -1}, n = 0;
        for (int32_t id = 0; id < m->n_ids && n < 2; id++)
            if (m->flags[id] & BPE_SPECIAL) sp[n++] = id;
        if (n >= 1) t->bos_id = sp[0]; // one special token: BOS only (tokenizer train --special)
        if (n == 2) t->eos_id = sp[1];
    }
    t->unk_id = -1;
    if (m->unk_token)
        for (int32_t id = 0; id < m->n_ids; id++)
            if (!strcmp(m->piece[id], m->unk_token)) {
                t->unk_id = id;
                break;
            }
}

// Fills piece/flags from model.vocab and added_tokens; sets n_ids.
static slm_status parse_vocab(const char *path, const cJSON *vocab, const cJSON *added,
                              bpe_model *m) {
    if (!cJSON_IsObject(vocab))
        return slm_fail(SLM_E_FORMAT, "%s: model.vocab: expected an object {token: id}", path);
    if (!slm_json_absent_or_null(added) && !cJSON_IsArray(added))
        return slm_fail(SLM_E_FORMAT, "%s: added_tokens: expected an array", path);
    int32_t max_id = -1;
    int idx = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = 0;
        slm_status st = get_id(path, "model.vocab", idx++, it, &id);
        if (st) return st;
        if (id > max_id) max_id = id;
    }
    idx = 0;
    cJSON_ArrayForEach(it, added) {
        int32_t id = 0;
        slm_status st =
            get_id(path, "added_tokens", idx, cJSON_GetObjectItemCaseSensitive(it, "id"), &id);
        if (st) return st;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsString(c) || !c->valuestring[0])
            return slm_fail(SLM_E_FORMAT,
                            "%s: added_tokens[%d].content: expected a non-empty string", path, idx);
        const char *opt[3] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++)
            if (slm_json_true(cJSON_GetObjectItemCaseSensitive(it, opt[k])))
                return slm_fail(SLM_E_UNSUPPORTED,
                                "%s: added_tokens[%d].%s true is not implemented", path, idx,
                                opt[k]);
        if (id > max_id) max_id = id;
        idx++;
    }
    if (max_id < 0) return slm_fail(SLM_E_FORMAT, "%s: model.vocab is empty", path);
    m->n_ids = max_id + 1;
    m->piece = slm_xcalloc((size_t)m->n_ids, sizeof *m->piece);
    m->flags = slm_xcalloc((size_t)m->n_ids, 1);
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = (int32_t)it->valuedouble;
        if (m->piece[id])
            return slm_fail(SLM_E_FORMAT, "%s: model.vocab: id %d is given to \"%s\" and \"%s\"",
                            path, id, m->piece[id], it->string);
        m->piece[id] = slm_xstrdup(it->string);
        m->flags[id] = BPE_IN_VOCAB;
    }
    idx = 0;
    cJSON_ArrayForEach(it, added) {
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        if (m->flags[id] & BPE_ADDED)
            return slm_fail(SLM_E_FORMAT, "%s: added_tokens[%d]: id %d is listed twice", path, idx,
                            id);
        if (m->piece[id] && strcmp(m->piece[id], content))
            return slm_fail(SLM_E_FORMAT,
                            "%s: added_tokens[%d]: id %d is \"%s\" but model.vocab has \"%s\"",
                            path, idx, id, content, m->piece[id]);
        if (!m->piece[id]) m->piece[id] = slm_xstrdup(content);
        m->flags[id] |= BPE_ADDED;
        if (slm_json_true(cJSON_GetObjectItemCaseSensitive(it, "special")))
            m->flags[id] |= BPE_SPECIAL;
        idx++;
    }
    m->added_ids = slm_xcalloc((size_t)idx + 1, sizeof *m->added_ids);
    for (int32_t id = 0; id < m->n_ids; id++) {
        if (!m->piece[id]) m->piece[id] = slm_xstrdup("");
        if (m->flags[id] & BPE_ADDED) m->added_ids[m->n_added++] = id;
    }
    return SLM_OK;
}

static slm_status parse_merges(const char *path, const cJSON *merges, const piece_map *pm,
                               bpe_model *m) {
    if (!cJSON_IsArray(merges))
        return slm_fail(SLM_E_FORMAT, "%s: model.merges: expected an array", path);
    int n = cJSON_GetArraySize(merges);
    m->merge_left = slm_xmalloc(((size_t)n + 1) * sizeof(int32_t));
    m->merge_right = slm_xmalloc(((size_t)n + 1) * sizeof(int32_t));
    m->merge_new = slm_xmalloc(((size_t)n + 1) * sizeof(int32_t));
    m->mcap = pow2_at_least(2 * (size_t)n + 2);
    m->mkey = slm_xmalloc(m->mcap * sizeof *m->mkey);
    m->mrank = slm_xmalloc(m->mcap * sizeof *m->mrank);
    memset(m->mkey, 0xff, m->mcap * sizeof *m->mkey);
    slm_buf cat = {0};
    slm_status st = SLM_OK;
    int r = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (cJSON_IsString(it)) { // "a b" (older files, GPT-2 merges.txt style)
            const char *sp = strchr(it->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) { // exactly two parts, as HF requires
                a = it->valuestring;
                na = (size_t)(sp - a);
                b = sp + 1;
                nb = strlen(b);
            }
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) { // ["a", "b"] (tokenizers >= 0.20)
            a = cJSON_GetArrayItem(it, 0)->valuestring;
            b = cJSON_GetArrayItem(it, 1)->valuestring;
            na = strlen(a);
            nb = strlen(b);
        }
        if (!a || !na || !nb) {
            st = slm_fail(SLM_E_FORMAT,
                          "%s: model.merges[%d]: expected \"left right\" or [\"left\", \"right\"]",
                          path, r);
            goto out;
        }
        int32_t ia = piece_map_get(pm, m->piece, a, na), ib = piece_map_get(pm, m->piece, b, nb);
        cat.len = 0;
        slm_buf_append(&cat, a, na);
        slm_buf_append(&cat, b, nb);
        int32_t in = piece_map_get(pm, m->piece, cat.data, cat.len);
        if (ia < 0 || ib < 0 || in < 0) {
            st = slm_fail(SLM_E_FORMAT,
                          "%s: model.merges[%d]: \"%.*s\" + \"%.*s\": %s is not in "
                          "model.vocab",
                          path, r, (int)na, a, (int)nb, b,
                          ia < 0   ? "the left token"
                          : ib < 0 ? "the right token"
                                   : "the merged token");
            goto out;
        }
        m->merge_left[r] = ia;
        m->merge_right[r] = ib;
        m->merge_new[r] = in;
        merge_map_put(m, ia, ib, r);
        r++;
    }
    m->n_merges = r;
out:
    slm_buf_free(&cat);
    return st;
}

// The error for JSON that does not parse: the line and byte near `end` (cJSON's stop).
static slm_status json_syntax_error(const char *path, const char *data, size_t len,
                                    const char *end) {
    size_t off = end && end >= data && end <= data + len ? (size_t)(end - data) : 0;
    int line = 1;
    for (size_t i = 0; i < off; i++)
        line += data[i] == '\n';
    return slm_fail(SLM_E_FORMAT, "%s: malformed JSON near line %d (byte %zu)", path, line, off);
}

// The top level: an object with a "model" object (returned in *model), a null normalizer and a
// ByteLevel (or null) decoder.
static slm_status check_top_level(const char *path, const cJSON *root, const cJSON **model) {
    if (!cJSON_IsObject(root))
        return slm_fail(SLM_E_FORMAT, "%s: expected a JSON object at the top level", path);
    *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(*model))
        return slm_fail(SLM_E_FORMAT, "%s: model: expected an object", path);
    return SLM_OK;
}

static slm_status check_normalizer_decoder(const char *path, const cJSON *root) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (!slm_json_absent_or_null(norm)) {
        const char *ty = json_type_name(norm);
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: normalizer \"%s\": shardlm implements only null for "
                        "byte-level BPE",
                        path, ty ? ty : "?");
    }
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (!slm_json_absent_or_null(dec) &&
        (!json_type_name(dec) || strcmp(json_type_name(dec), "ByteLevel")))
        return slm_fail(SLM_E_UNSUPPORTED, "%s: decoder.type \"%s\": shardlm implements ByteLevel",
                        path, json_type_name(dec) ? json_type_name(dec) : "?");
    return SLM_OK;
}

// Piece -> id over model tokens, for merges and the byte table; a piece listed twice is an error.
static slm_status build_piece_map(const char *path, const bpe_model *m, piece_map *pm) {
    pm->cap = pow2_at_least(2 * (size_t)m->n_ids + 2);
    pm->slot = slm_xmalloc(pm->cap * sizeof *pm->slot);
    memset(pm->slot, 0xff, pm->cap * sizeof *pm->slot);
    for (int32_t id = 0; id < m->n_ids; id++) {
        int32_t dup = (m->flags[id] & BPE_IN_VOCAB) ? piece_map_put(pm, m->piece, id) : -1;
        if (dup >= 0)
            return slm_fail(SLM_E_FORMAT, "%s: model.vocab: \"%s\" is listed twice (ids %d and %d)",
                            path, m->piece[id], dup, id);
    }
    return SLM_OK;
}

// The id of each byte's symbol. A byte whose symbol is not in the vocabulary is dropped when
// encoding, as HF tokenizers' BPE does with unk_token null: SmolLM2's vocabulary lacks a few
// control bytes and bytes that are rare or invalid in UTF-8. Such a tokenizer is not lossless
// for those bytes (a warning says so at load). A missing printable ASCII byte is refused: no
// real byte-level vocabulary lacks one, a file that does is not one.
static slm_status map_bytes(const char *path, const piece_map *pm, bpe_model *m) {
    slm_buf tmp = {0};
    slm_status st = SLM_OK;
    int n_missing = 0, first_missing = -1;
    for (int b = 0; b < 256 && !st; b++) {
        uint8_t c = (uint8_t)b;
        tmp.len = 0;
        slm_bpe_bytes_to_symbols(&c, 1, &tmp);
        m->byte_id[b] = piece_map_get(pm, m->piece, tmp.data, tmp.len);
        if (m->byte_id[b] >= 0) continue;
        if (b >= 0x20 && b < 0x7f)
            st = slm_fail(SLM_E_FORMAT,
                          "%s: model.vocab lacks \"%s\", the byte-level symbol of byte 0x%02x "
                          "(a byte-level BPE needs every printable ASCII byte)",
                          path, tmp.data, b);
        else if (n_missing++ == 0)
            first_missing = b;
    }
    slm_buf_free(&tmp);
    if (!st && n_missing)
        slm_warn("%s: model.vocab lacks the byte-level symbols of %d byte value(s) (the first "
                 "0x%02x); those bytes are dropped when encoding, as Hugging Face tokenizers "
                 "does",
                 path, n_missing, first_missing);
    return st;
}

// Raw bytes of every id: model tokens are byte-level symbols (so a merge's bytes are its parts'
// bytes and encode/decode round-trip), tokens only in added_tokens literal text.
static slm_status build_raw(const char *path, bpe_model *m) {
    slm_buf tmp = {0};
    m->raw_off = slm_xmalloc(((size_t)m->n_ids + 1) * sizeof *m->raw_off);
    for (int32_t id = 0; id < m->n_ids; id++) {
        m->raw_off[id] = (int64_t)tmp.len;
        if (!(m->flags[id] & BPE_IN_VOCAB)) { // added token only: literal text
            slm_buf_append(&tmp, m->piece[id], strlen(m->piece[id]));
        } else if (!symbols_to_bytes(m->piece[id], &tmp)) {
            slm_buf_free(&tmp);
            return slm_fail(SLM_E_UNSUPPORTED,
                            "%s: model.vocab token %d \"%.40s\" has a character outside the 256 "
                            "byte-level symbols (not a byte-level BPE vocab)",
                            path, id, m->piece[id]);
        }
    }
    m->raw_off[m->n_ids] = (int64_t)tmp.len;
    m->raw = slm_xmalloc(tmp.len + 1);
    if (tmp.len) memcpy(m->raw, tmp.data, tmp.len);
    slm_buf_free(&tmp);
    return SLM_OK;
}

// ignore_merges: raw bytes -> id over model tokens (the first id wins), for whole-word lookups.
static void build_vocab_map(bpe_model *m) {
    m->vcap = pow2_at_least(2 * (size_t)m->n_ids + 2);
    m->vmap = slm_xmalloc(m->vcap * sizeof *m->vmap);
    memset(m->vmap, 0xff, m->vcap * sizeof *m->vmap);
    for (int32_t id = 0; id < m->n_ids; id++) {
        if (!(m->flags[id] & BPE_IN_VOCAB)) continue;
        size_t n;
        const char *r = raw_of(m, id, &n);
        if (vmap_get(m, (const uint8_t *)r, n) >= 0) continue; // first id wins
        size_t mask = m->vcap - 1, i = hash_bytes(r, n) & mask;
        while (m->vmap[i] >= 0)
            i = (i + 1) & mask;
        m->vmap[i] = id;
    }
}

// The pre-tokenizer regex compiled, the added tokens' first bytes, and the tokenizer's type,
// size and special ids (model.shardlm_special_ids when given).
static slm_status finish_model(const char *path, bpe_model *m, slm_tokenizer *t) {
    char err[256];
    m->re = slm_bpe_compile_regex(m->regex, err);
    if (!m->re)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: pre_tokenizer regex does not compile with PCRE2: %s", path, err);
    for (int32_t k = 0; k < m->n_added; k++) {
        size_t n;
        const char *r = raw_of(m, m->added_ids[k], &n);
        if (n) m->added_first[(uint8_t)r[0]] = true;
    }
    m->serial = atomic_fetch_add(&model_serial, 1);
    t->type = SLM_TOK_BYTE_BPE;
    t->vocab_size = m->n_ids;
    assign_special_ids(m, t);
    if (m->special_given) {
        int32_t *dst[4] = {&t->bos_id, &t->eos_id, &t->pad_id, &t->unk_id};
        for (int i = 0; i < 4; i++) {
            if (m->sp_ids[i] >= m->n_ids)
                return slm_fail(SLM_E_FORMAT,
                                "%s: model.shardlm_special_ids: id %d is outside the vocabulary "
                                "[0, %d)",
                                path, m->sp_ids[i], m->n_ids);
            *dst[i] = m->sp_ids[i];
        }
        t->no_default_bos = !m->sp_add_bos;
    }
    return SLM_OK;
}

slm_status slm_bpe_load_json(const char *path, const char *data, size_t len, slm_tokenizer *t) {
    slm_bpe_init_bytemap();
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(data, len, &end, 0);
    if (!root) return json_syntax_error(path, data, len, end);
    bpe_model *m = slm_xcalloc(1, sizeof *m);
    piece_map pm = {0};
    const cJSON *model = NULL;
    slm_status st = check_top_level(path, root, &model);
    if (!st) st = parse_model_options(path, model, m);
    if (!st) st = check_normalizer_decoder(path, root);
    if (!st)
        st = parse_pre_tokenizer(path, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), m);
    if (!st)
        st = parse_vocab(path, cJSON_GetObjectItemCaseSensitive(model, "vocab"),
                         cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), m);
    if (!st) st = build_piece_map(path, m, &pm);
    if (!st) st = map_bytes(path, &pm, m);
    if (!st) st = parse_merges(path, cJSON_GetObjectItemCaseSensitive(model, "merges"), &pm, m);
    if (!st) st = build_raw(path, m);
    if (!st && m->ignore_merges) build_vocab_map(m);
    if (!st) st = finish_model(path, m, t);
    if (!st) t->impl = m;
    free(pm.slot);
    cJSON_Delete(root);
    if (st) slm_bpe_free(m);
    return st;
}

// ---------------------------------------------------------------------------------------------
// Save

void slm_bpe_json_string(slm_buf *out, const char *s, size_t n) {
    slm_buf_append(out, "\"", 1);
    size_t run = 0; // bytes copied verbatim, flushed lazily
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        slm_buf_append(out, s + i - run, run);
        run = 0;
        switch (c) {
        case '"':
            slm_buf_append(out, "\\\"", 2);
            break;
        case '\\':
            slm_buf_append(out, "\\\\", 2);
            break;
        case '\n':
            slm_buf_append(out, "\\n", 2);
            break;
        case '\r':
            slm_buf_append(out, "\\r", 2);
            break;
        case '\t':
            slm_buf_append(out, "\\t", 2);
            break;
        default:
            slm_buf_appendf(out, "\\u%04x", c);
            break;
        }
    }
    slm_buf_append(out, s + n - run, run);
    slm_buf_append(out, "\"", 1);
}

static void json_str(slm_buf *out, const char *s) {
    slm_bpe_json_string(out, s, strlen(s));
}

void slm_bpe_write_json(const bpe_model *m, slm_buf *out) {
    slm_buf_appendf(out,
                    "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
                    "  \"added_tokens\": [");
    int k = 0;
    for (int32_t i = 0; i < m->n_added; i++) {
        int32_t id = m->added_ids[i];
        bool special = (m->flags[id] & BPE_SPECIAL) != 0;
        slm_buf_appendf(out, "%s\n    {\"id\": %d, \"content\": ", k++ ? "," : "", id);
        json_str(out, m->piece[id]);
        slm_buf_appendf(out,
                        ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                        "\"normalized\": %s, \"special\": %s}",
                        special ? "false" : "true", special ? "true" : "false");
    }
    slm_buf_appendf(out, "%s],\n  \"normalizer\": null,\n  \"pre_tokenizer\": ", k ? "\n  " : "");
    if (m->pre_form == BPE_PRE_BYTELEVEL) {
        slm_buf_appendf(out, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                             "\"trim_offsets\": true, \"use_regex\": true},\n");
    } else {
        slm_buf_appendf(out, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                             "\"pattern\": {\"Regex\": ");
        json_str(out, m->regex);
        slm_buf_appendf(out, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
                             "\"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                             "\"use_regex\": false}]},\n");
    }
    // post_processor: BOS before each sequence when there is one (as Llama 3's file has), so
    // that HF libraries add it by default: transformers 5 takes BOS only from here (it ignores
    // tokenizer_config.json's add_bos_token when a tokenizer.json is present). shardlm itself
    // ignores the field (callers ask for BOS).
    slm_tokenizer ids = {0};
    assign_special_ids((bpe_model *)m, &ids);
    if (ids.bos_id >= 0) {
        const char *b = m->piece[ids.bos_id];
        slm_buf_appendf(out, "  \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
                             "[{\"SpecialToken\": {\"id\": ");
        json_str(out, b);
        slm_buf_appendf(out,
                        ", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
                        "\"pair\": [{\"SpecialToken\": {\"id\": ");
        json_str(out, b);
        slm_buf_appendf(out, ", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
                             "{\"SpecialToken\": {\"id\": ");
        json_str(out, b);
        slm_buf_appendf(out,
                        ", \"type_id\": 1}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], "
                        "\"special_tokens\": {");
        json_str(out, b);
        slm_buf_appendf(out, ": {\"id\": ");
        json_str(out, b);
        slm_buf_appendf(out, ", \"ids\": [%d], \"tokens\": [", ids.bos_id);
        json_str(out, b);
        slm_buf_appendf(out, "]}}},\n");
    } else {
        slm_buf_appendf(out, "  \"post_processor\": null,\n");
    }
    slm_buf_appendf(out, "  \"decoder\": {\"type\": \"ByteLevel\", "
                         "\"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": "
                         "true},\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n"
                         "    \"unk_token\": ");
    if (m->unk_token)
        json_str(out, m->unk_token);
    else
        slm_buf_appendf(out, "null");
    slm_buf_appendf(out,
                    ",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": "
                    "null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    "
                    "\"ignore_merges\": %s,\n",
                    m->ignore_merges ? "true" : "false");
    if (m->special_given)
        slm_buf_appendf(out,
                        "    \"shardlm_special_ids\": {\"bos\": %d, \"eos\": %d, \"pad\": %d, "
                        "\"unk\": %d, \"add_bos\": %s},\n",
                        m->sp_ids[0], m->sp_ids[1], m->sp_ids[2], m->sp_ids[3],
                        m->sp_add_bos ? "true" : "false");
    slm_buf_appendf(out, "    \"vocab\": {");
    k = 0;
    for (int32_t id = 0; id < m->n_ids; id++) {
        if (!(m->flags[id] & BPE_IN_VOCAB)) continue;
        slm_buf_appendf(out, "%s\n      ", k++ ? "," : "");
        json_str(out, m->piece[id]);
        slm_buf_appendf(out, ": %d", id);
    }
    slm_buf_appendf(out, "\n    },\n    \"merges\": [");
    for (int32_t r = 0; r < m->n_merges; r++) {
        slm_buf_appendf(out, "%s\n      [", r ? "," : "");
        json_str(out, m->piece[m->merge_left[r]]);
        slm_buf_append(out, ", ", 2);
        json_str(out, m->piece[m->merge_right[r]]);
        slm_buf_append(out, "]", 1);
    }
    slm_buf_appendf(out, "\n    ]\n  }\n}\n");
}

slm_status slm_tokenizer_save_json(const slm_tokenizer *t, const char *path) {
    if (t->type != SLM_TOK_BYTE_BPE)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: only byte-level BPE tokenizers can be saved as tokenizer.json", path);
    slm_buf b = {0};
    slm_bpe_write_json(t->impl, &b);
    slm_status st = slm_file_write_atomic(path, b.data, b.len);
    slm_buf_free(&b);
    return st;
}

const char *slm_bpe_piece(const slm_tokenizer *t, int32_t id) {
    const bpe_model *m = t->impl;
    return m->piece[id];
}

// ---------------------------------------------------------------------------------------------
// Encode

typedef struct cache_entry {
    uint64_t h; // 0: empty slot
    uint32_t koff, klen, voff, vlen;
} cache_entry;

#define CACHE_SLOTS (1u << 16)
#define CACHE_MAX_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_MAX_WORD 128 // longer pre-tokens are not cached

// Per-thread encode state: matcher, pre-token cache, merge work arrays.
typedef struct bpe_scratch {
    bpe_matcher mt;
    uint64_t serial; // model the cache belongs to
    cache_entry *slots;
    uint32_t n_entries;
    slm_buf keys;
    slm_ivec vals;
    int32_t *sym, *prv, *nxt; // [wcap]
    uint64_t *heap;           // [wcap] (rank << 32 | position)
    size_t wcap;
} bpe_scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_destroy(void *p) {
    bpe_scratch *s = p;
    if (!s) return;
    slm_bpe_matcher_free(&s->mt);
    free(s->slots);
    slm_buf_free(&s->keys);
    slm_ivec_free(&s->vals);
    free(s->sym);
    free(s->prv);
    free(s->nxt);
    free(s->heap);
    free(s);
}

static void scratch_key_init(void) {
    if (pthread_key_create(&scratch_key, scratch_destroy))
        slm_fatal("tokenizer: pthread_key_create failed");
}

static bpe_scratch *get_scratch(const bpe_model *m) {
    pthread_once(&scratch_once, scratch_key_init);
    bpe_scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = slm_xcalloc(1, sizeof *s);
        slm_bpe_matcher_init(&s->mt);
        s->slots = slm_xcalloc(CACHE_SLOTS, sizeof *s->slots);
        if (pthread_setspecific(scratch_key, s)) slm_fatal("tokenizer: pthread_setspecific failed");
    }
    if (s->serial != m->serial) { // another model: drop its cached pre-tokens
        memset(s->slots, 0, CACHE_SLOTS * sizeof *s->slots);
        s->n_entries = 0;
        s->keys.len = 0;
        s->vals.len = 0;
        s->serial = m->serial;
    }
    return s;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

// BPE merges on one pre-token (n < 2^32 bytes), ids appended to out.
static void merge_word(const bpe_model *m, bpe_scratch *s, const uint8_t *p, size_t n,
                       slm_ivec *out) {
    if (n > s->wcap) {
        s->wcap = n + n / 2 + 16;
        s->sym = slm_xrealloc(s->sym, s->wcap * sizeof *s->sym);
        s->prv = slm_xrealloc(s->prv, s->wcap * sizeof *s->prv);
        s->nxt = slm_xrealloc(s->nxt, s->wcap * sizeof *s->nxt);
        s->heap = slm_xrealloc(s->heap, s->wcap * sizeof *s->heap);
    }
    int32_t *sym = s->sym, *prv = s->prv, *nxt = s->nxt;
    uint64_t *heap = s->heap;
    size_t nh = 0;
    int32_t ni = (int32_t)n; // positions fit: callers split pre-tokens at 2^30 bytes
    int32_t k = 0;
    for (int32_t i = 0; i < ni; i++) {
        sym[k] = m->byte_id[p[i]];
        if (sym[k] < 0) continue; // a byte the vocabulary lacks: dropped (HF, unk_token null)
        prv[k] = k - 1;
        nxt[k] = k + 1;
        k++;
    }
    ni = k;
    for (int32_t i = 0; i + 1 < ni; i++) {
        int32_t r = merge_rank(m, sym[i], sym[i + 1]);
        if (r >= 0) heap_push(heap, &nh, ((uint64_t)r << 32) | (uint32_t)i);
    }
    while (nh) {
        uint64_t top = heap_pop(heap, &nh);
        int32_t r = (int32_t)(top >> 32), i = (int32_t)(top & 0xffffffffu);
        if (sym[i] < 0) continue; // absorbed by a merge on its left
        int32_t j = nxt[i];
        if (j >= ni || merge_rank(m, sym[i], sym[j]) != r) continue; // stale entry
        sym[i] = m->merge_new[r];
        sym[j] = -1;
        nxt[i] = nxt[j];
        if (nxt[j] < ni) prv[nxt[j]] = i;
        if (prv[i] >= 0) {
            int32_t rl = merge_rank(m, sym[prv[i]], sym[i]);
            if (rl >= 0) heap_push(heap, &nh, ((uint64_t)rl << 32) | (uint32_t)prv[i]);
        }
        if (nxt[i] < ni) {
            int32_t rr = merge_rank(m, sym[i], sym[nxt[i]]);
            if (rr >= 0) heap_push(heap, &nh, ((uint64_t)rr << 32) | (uint32_t)i);
        }
    }
    for (int32_t i = 0; i < ni; i = nxt[i])
        slm_ivec_push(out, sym[i]);
}

typedef struct encode_ctx {
    const bpe_model *m;
    bpe_scratch *s;
    slm_ivec *out;
} encode_ctx;

static void encode_piece(void *vctx, const uint8_t *p, size_t n) {
    encode_ctx *c = vctx;
    const bpe_model *m = c->m;
    bpe_scratch *s = c->s;
    if (n == 1) {
        if (m->byte_id[p[0]] >= 0) slm_ivec_push(c->out, m->byte_id[p[0]]);
        return;
    }
    if (m->ignore_merges) {
        int32_t id = vmap_get(m, p, n);
        if (id >= 0) {
            slm_ivec_push(c->out, id);
            return;
        }
    }
    if (n > CACHE_MAX_WORD) {
        const size_t max_piece = (size_t)1 << 30; // positions stay int32
        for (size_t off = 0; off < n; off += max_piece)
            merge_word(m, s, p + off, n - off < max_piece ? n - off : max_piece, c->out);
        return;
    }
    uint64_t h = hash_bytes(p, n) | 1; // never 0 (the empty-slot mark)
    uint32_t mask = CACHE_SLOTS - 1, i = (uint32_t)h & mask;
    for (;; i = (i + 1) & mask) {
        cache_entry *e = &s->slots[i];
        if (e->h == 0) break;
        if (e->h == h && e->klen == n && !memcmp(s->keys.data + e->koff, p, n)) {
            const int32_t *v = s->vals.data + e->voff;
            slm_ivec_reserve(c->out, c->out->len + e->vlen);
            memcpy(c->out->data + c->out->len, v, e->vlen * sizeof *v);
            c->out->len += e->vlen;
            return;
        }
    }
    size_t first = c->out->len;
    merge_word(m, s, p, n, c->out);
    if (s->n_entries >= CACHE_MAX_ENTRIES) { // full: start over (simple, bounded memory)
        memset(s->slots, 0, CACHE_SLOTS * sizeof *s->slots);
        s->n_entries = 0;
        s->keys.len = 0;
        s->vals.len = 0;
        for (i = (uint32_t)h & mask; s->slots[i].h; i = (i + 1) & mask) {
        }
    }
    cache_entry *e = &s->slots[i];
    e->h = h;
    e->koff = (uint32_t)s->keys.len;
    e->klen = (uint32_t)n;
    e->voff = (uint32_t)s->vals.len;
    e->vlen = (uint32_t)(c->out->len - first);
    slm_buf_append(&s->keys, p, n);
    for (size_t k = first; k < c->out->len; k++)
        slm_ivec_push(&s->vals, c->out->data[k]);
    s->n_entries++;
}

// Longest added token starting at text[pos], or -1.
static int32_t match_added(const bpe_model *m, const char *text, size_t len, size_t pos,
                           size_t *mlen) {
    int32_t best = -1;
    size_t best_len = 0;
    for (int32_t k = 0; k < m->n_added; k++) {
        int32_t id = m->added_ids[k];
        size_t n;
        const char *r = raw_of(m, id, &n);
        if (n > best_len && n <= len - pos && r[0] == text[pos] && !memcmp(r, text + pos, n)) {
            best = id;
            best_len = n;
        }
    }
    *mlen = best_len;
    return best;
}

slm_status slm_bpe_encode(const slm_tokenizer *t, const char *text, size_t len, int flags,
                          slm_ivec *out) {
    const bpe_model *m = t->impl;
    if ((flags & SLM_ENC_ADD_BOS) && t->bos_id >= 0) slm_ivec_push(out, t->bos_id);
    encode_ctx c = {m, get_scratch(m), out};
    const uint8_t *u = (const uint8_t *)text;
    if ((flags & SLM_ENC_ALLOW_SPECIAL) && m->n_added) {
        size_t seg = 0;
        for (size_t pos = 0; pos < len;) {
            if (!m->added_first[u[pos]]) {
                pos++;
                continue;
            }
            size_t n;
            int32_t id = match_added(m, text, len, pos, &n);
            if (id < 0) {
                pos++;
                continue;
            }
            if (pos > seg)
                slm_bpe_pretokenize(m->re, &c.s->mt, u + seg, pos - seg, 0, pos - seg, encode_piece,
                                    &c);
            slm_ivec_push(out, id);
            pos += n;
            seg = pos;
        }
        if (len > seg)
            slm_bpe_pretokenize(m->re, &c.s->mt, u + seg, len - seg, 0, len - seg, encode_piece,
                                &c);
    } else if (len) {
        slm_bpe_pretokenize(m->re, &c.s->mt, u, len, 0, len, encode_piece, &c);
    }
    if ((flags & SLM_ENC_ADD_EOS) && t->eos_id >= 0) slm_ivec_push(out, t->eos_id);
    return SLM_OK;
}

slm_status slm_bpe_decode(const slm_tokenizer *t, const int32_t *ids, size_t n, slm_buf *out) {
    const bpe_model *m = t->impl;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id == t->bos_id || id == t->eos_id || id == t->pad_id) continue;
        size_t k;
        const char *r = raw_of(m, id, &k);
        slm_buf_append(out, r, k);
    }
    if (!out->data) slm_buf_append(out, "", 0); // a valid (empty, NUL-terminated) buffer
    return SLM_OK;
}
