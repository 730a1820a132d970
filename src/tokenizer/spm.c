// SentencePiece model loading: a small reader of the protobuf wire format for ModelProto
// (sentencepiece_model.proto, proto2) and the checks that refuse what spm_encode.c cannot encode
// exactly like SentencePiece.
//
// Wire format (protobuf encoding guide): a message is a sequence of (tag, value) with
// tag = varint(field_number << 3 | wire_type); wire types 0 varint, 1 fixed64, 2 length-
// delimited (varint length + bytes), 3/4 start/end group (deprecated), 5 fixed32 (a float score
// is a little-endian IEEE-754 binary32). Unknown fields are skipped by wire type; a known field
// with the wrong wire type, a varint longer than 10 bytes, or a length running past its message
// is SLM_E_FORMAT naming the file, the field and the byte offset.
// proto2 semantics kept: for optional scalars the last occurrence wins; an embedded message that
// occurs twice is merged (parsing both into the same struct does exactly that).
#include "tokenizer/spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Wire reader

typedef struct pb_reader {
    const uint8_t *base; // start of the file (offsets in messages are relative to it)
    const uint8_t *p;    // next byte
    const uint8_t *end;  // end of the current message
    const char *path;    // for messages
    const char *msg;     // message being parsed ("ModelProto", "TrainerSpec", ...)
} pb_reader;

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_SGROUP = 3, PB_EGROUP = 4, PB_I32 = 5 };

static size_t pb_off(const pb_reader *r) {
    return (size_t)(r->p - r->base);
}

static slm_status pb_varint(pb_reader *r, uint64_t *out, const char *what) {
    uint64_t v = 0;
    size_t start = pb_off(r);
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end)
            return slm_fail(SLM_E_FORMAT, "%s: protobuf %s: truncated varint (%s) at offset %zu",
                            r->path, r->msg, what, start);
        uint8_t b = *r->p++;
        // The 10th byte may only carry bit 63.
        if (i == 9 && b > 1)
            return slm_fail(SLM_E_FORMAT,
                            "%s: protobuf %s: varint (%s) at offset %zu overflows 64 bits", r->path,
                            r->msg, what, start);
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return SLM_OK;
        }
    }
    return slm_fail(SLM_E_FORMAT, "%s: protobuf %s: varint (%s) at offset %zu longer than 10 bytes",
                    r->path, r->msg, what, start);
}

// Reads a tag; *field = field number, *wt = wire type.
static slm_status pb_tag(pb_reader *r, uint32_t *field, int *wt) {
    size_t start = pb_off(r);
    uint64_t tag = 0;
    slm_status st = pb_varint(r, &tag, "tag");
    if (st) return st;
    uint64_t f = tag >> 3;
    *wt = (int)(tag & 7);
    if (f == 0 || f > 536870911u)
        return slm_fail(SLM_E_FORMAT, "%s: protobuf %s: invalid field number %llu at offset %zu",
                        r->path, r->msg, (unsigned long long)f, start);
    if (*wt > 5)
        return slm_fail(SLM_E_FORMAT, "%s: protobuf %s: invalid wire type %d at offset %zu",
                        r->path, r->msg, *wt, start);
    *field = (uint32_t)f;
    return SLM_OK;
}

// Reads a length-delimited payload; *data/*len point into the input.
static slm_status pb_bytes(pb_reader *r, const uint8_t **data, size_t *len, const char *what) {
    size_t start = pb_off(r);
    uint64_t n = 0;
    slm_status st = pb_varint(r, &n, what);
    if (st) return st;
    if (n > (uint64_t)(r->end - r->p))
        return slm_fail(SLM_E_FORMAT,
                        "%s: protobuf %s: field %s at offset %zu has length %llu but only %zu "
                        "bytes remain in the message",
                        r->path, r->msg, what, start, (unsigned long long)n,
                        (size_t)(r->end - r->p));
    *data = r->p;
    *len = (size_t)n;
    r->p += n;
    return SLM_OK;
}

static slm_status pb_fixed(pb_reader *r, size_t n, uint8_t *out, const char *what) {
    if ((size_t)(r->end - r->p) < n)
        return slm_fail(SLM_E_FORMAT, "%s: protobuf %s: truncated fixed%zu (%s) at offset %zu",
                        r->path, r->msg, n * 8, what, pb_off(r));
    memcpy(out, r->p, n);
    r->p += n;
    return SLM_OK;
}

// Skips the value of an unknown field of wire type `wt` (groups recursively, depth-limited).
static slm_status pb_skip(pb_reader *r, uint32_t field, int wt, int depth) {
    uint64_t v = 0;
    uint8_t tmp[8];
    const uint8_t *d = NULL;
    size_t n = 0;
    switch (wt) {
    case PB_VARINT:
        return pb_varint(r, &v, "unknown field");
    case PB_I64:
        return pb_fixed(r, 8, tmp, "unknown field");
    case PB_I32:
        return pb_fixed(r, 4, tmp, "unknown field");
    case PB_LEN:
        return pb_bytes(r, &d, &n, "unknown field");
    case PB_SGROUP:
        if (depth > 64)
            return slm_fail(SLM_E_FORMAT, "%s: protobuf %s: groups nested too deeply at offset %zu",
                            r->path, r->msg, pb_off(r));
        for (;;) {
            if (r->p >= r->end)
                return slm_fail(SLM_E_FORMAT,
                                "%s: protobuf %s: unterminated group (field %u) at offset %zu",
                                r->path, r->msg, field, pb_off(r));
            uint32_t f = 0;
            int w = 0;
            slm_status st = pb_tag(r, &f, &w);
            if (st) return st;
            if (w == PB_EGROUP) {
                if (f != field)
                    return slm_fail(SLM_E_FORMAT,
                                    "%s: protobuf %s: group end for field %u inside group %u at "
                                    "offset %zu",
                                    r->path, r->msg, f, field, pb_off(r));
                return SLM_OK;
            }
            st = pb_skip(r, f, w, depth + 1);
            if (st) return st;
        }
    default:
        return slm_fail(SLM_E_FORMAT,
                        "%s: protobuf %s: unexpected end-group (field %u) at offset %zu", r->path,
                        r->msg, field, pb_off(r));
    }
}

static slm_status pb_expect(pb_reader *r, uint32_t field, int wt, int want, const char *name) {
    if (wt == want) return SLM_OK;
    return slm_fail(SLM_E_FORMAT,
                    "%s: protobuf %s.%s (field %u) before offset %zu has wire type %d, expected %d",
                    r->path, r->msg, name, field, pb_off(r), wt, want);
}

// Reads the value of varint field `name`.
static slm_status pb_varint_field(pb_reader *r, uint32_t field, int wt, const char *name,
                                  uint64_t *v) {
    slm_status st = pb_expect(r, field, wt, PB_VARINT, name);
    return st ? st : pb_varint(r, v, name);
}

// A varint field as an int32 (proto int32/enum: the low 32 bits, two's complement).
static slm_status pb_int32(pb_reader *r, uint32_t field, int wt, const char *name, int32_t *out) {
    uint64_t v = 0;
    slm_status st = pb_varint_field(r, field, wt, name, &v);
    if (!st) *out = (int32_t)(uint32_t)v;
    return st;
}

static slm_status pb_bool(pb_reader *r, uint32_t field, int wt, const char *name, bool *out) {
    uint64_t v = 0;
    slm_status st = pb_varint_field(r, field, wt, name, &v);
    if (!st) *out = v != 0;
    return st;
}

// Reads a string/bytes field into a new owned NUL-terminated copy (replacing *out).
static slm_status pb_string(pb_reader *r, uint32_t field, int wt, const char *name, char **out,
                            size_t *out_len) {
    slm_status st = pb_expect(r, field, wt, PB_LEN, name);
    if (st) return st;
    const uint8_t *d = NULL;
    size_t n = 0;
    st = pb_bytes(r, &d, &n, name);
    if (st) return st;
    free(*out);
    *out = slm_xmalloc(n + 1);
    memcpy(*out, d, n);
    (*out)[n] = '\0';
    if (out_len) *out_len = n;
    return SLM_OK;
}

static pb_reader pb_sub(const pb_reader *r, const uint8_t *d, size_t n, const char *msg) {
    pb_reader s = {r->base, d, d + n, r->path, msg};
    return s;
}

// ---------------------------------------------------------------------------------------------
// ModelProto fields

typedef struct raw_spec {
    // TrainerSpec (defaults from sentencepiece_model.proto)
    int32_t model_type; // 1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR
    bool byte_fallback;
    bool treat_ws_as_suffix;
    char *unk_piece, *bos_piece, *eos_piece, *pad_piece, *unk_surface;
    size_t unk_surface_len;
    // NormalizerSpec
    char *norm_name;
    char *charsmap;
    size_t charsmap_len;
    bool add_dummy_prefix, remove_extra_ws, escape_ws;
    // denormalizer_spec
    bool has_denorm;
    char *denorm_name;
    char *denorm_charsmap;
    size_t denorm_charsmap_len;
    bool denorm_add_dummy_prefix, denorm_remove_extra_ws, denorm_escape_ws;
    // shardlm's extension (SPM_EXT_FIELD): ids unk, bos, eos, pad
    bool has_ext, ext_add_bos;
    int32_t ext_ids[4];
    // pieces (text copied into `strings`)
    slm_buf strings;
    spm_piece *pieces;
    int64_t n_pieces, cap_pieces;
} raw_spec;

static void raw_spec_free(raw_spec *s) {
    free(s->unk_piece);
    free(s->bos_piece);
    free(s->eos_piece);
    free(s->pad_piece);
    free(s->unk_surface);
    free(s->norm_name);
    free(s->charsmap);
    free(s->denorm_name);
    free(s->denorm_charsmap);
    slm_buf_free(&s->strings);
    free(s->pieces);
}

static slm_status parse_piece(pb_reader *r, raw_spec *s) {
    int64_t idx = s->n_pieces;
    if (idx >= INT32_MAX) return slm_fail(SLM_E_FORMAT, "%s: more than 2^31-1 pieces", r->path);
    const uint8_t *text = NULL;
    size_t text_len = 0;
    bool has_text = false;
    float score = 0.0f;
    int32_t type = SPM_NORMAL;
    size_t start = pb_off(r);
    while (r->p < r->end) {
        uint32_t f = 0;
        int wt = 0;
        slm_status st = pb_tag(r, &f, &wt);
        if (st) return st;
        if (f == 1) {
            st = pb_expect(r, f, wt, PB_LEN, "piece");
            if (!st) st = pb_bytes(r, &text, &text_len, "piece");
            has_text = true;
        } else if (f == 2) {
            uint8_t b[4] = {0};
            st = pb_expect(r, f, wt, PB_I32, "score");
            if (!st) st = pb_fixed(r, 4, b, "score");
            if (!st) {
                uint32_t u = slm_get_le32(b);
                memcpy(&score, &u, 4);
            }
        } else if (f == 3) {
            st = pb_int32(r, f, wt, "type", &type);
        } else {
            st = pb_skip(r, f, wt, 0);
        }
        if (st) return st;
    }
    if (!has_text || text_len == 0)
        return slm_fail(SLM_E_FORMAT, "%s: piece %lld (offset %zu): empty piece text", r->path,
                        (long long)idx, start);
    if (type < SPM_NORMAL || type > SPM_BYTE)
        return slm_fail(SLM_E_FORMAT,
                        "%s: piece %lld (offset %zu): type %d is not one of NORMAL=1 .. BYTE=6",
                        r->path, (long long)idx, start, type);
    if (text_len > UINT32_MAX / 2 || s->strings.len > UINT32_MAX / 2)
        return slm_fail(SLM_E_FORMAT, "%s: piece %lld: pieces too large", r->path, (long long)idx);
    if (s->n_pieces == s->cap_pieces) {
        s->cap_pieces = s->cap_pieces ? 2 * s->cap_pieces : 1024;
        s->pieces = slm_xrealloc(s->pieces, (size_t)s->cap_pieces * sizeof *s->pieces);
    }
    spm_piece *p = &s->pieces[s->n_pieces++];
    p->off = (uint32_t)s->strings.len;
    p->len = (uint32_t)text_len;
    p->score = score;
    p->type = type;
    slm_buf_append(&s->strings, text, text_len);
    slm_buf_append(&s->strings, "", 1);
    return SLM_OK;
}

static slm_status parse_trainer(pb_reader *r, raw_spec *s) {
    static const char *const id_names[] = {"unk_id", "bos_id", "eos_id", "pad_id"};
    int32_t ignored;
    while (r->p < r->end) {
        uint32_t f = 0;
        int wt = 0;
        slm_status st = pb_tag(r, &f, &wt);
        if (st) return st;
        switch (f) {
        case 3:
            st = pb_int32(r, f, wt, "model_type", &s->model_type);
            break;
        case 24:
            st = pb_bool(r, f, wt, "treat_whitespace_as_suffix", &s->treat_ws_as_suffix);
            break;
        case 35:
            st = pb_bool(r, f, wt, "byte_fallback", &s->byte_fallback);
            break;
        // The processor finds the special pieces by text (bos_piece etc.) and checks their
        // types below, so the id fields are only validated.
        case 40:
        case 41:
        case 42:
        case 43:
            st = pb_int32(r, f, wt, id_names[f - 40], &ignored);
            break;
        case 44:
            st = pb_string(r, f, wt, "unk_surface", &s->unk_surface, &s->unk_surface_len);
            break;
        case 45:
            st = pb_string(r, f, wt, "unk_piece", &s->unk_piece, NULL);
            break;
        case 46:
            st = pb_string(r, f, wt, "bos_piece", &s->bos_piece, NULL);
            break;
        case 47:
            st = pb_string(r, f, wt, "eos_piece", &s->eos_piece, NULL);
            break;
        case 48:
            st = pb_string(r, f, wt, "pad_piece", &s->pad_piece, NULL);
            break;
        default:
            st = pb_skip(r, f, wt, 0);
            break;
        }
        if (st) return st;
    }
    return SLM_OK;
}

static slm_status parse_normalizer(pb_reader *r, char **name, char **charsmap, size_t *charsmap_len,
                                   bool *dummy, bool *remove_ws, bool *escape) {
    while (r->p < r->end) {
        uint32_t f = 0;
        int wt = 0;
        slm_status st = pb_tag(r, &f, &wt);
        if (st) return st;
        switch (f) {
        case 1:
            st = pb_string(r, f, wt, "name", name, NULL);
            break;
        case 2:
            st = pb_string(r, f, wt, "precompiled_charsmap", charsmap, charsmap_len);
            break;
        case 3:
            st = pb_bool(r, f, wt, "add_dummy_prefix", dummy);
            break;
        case 4:
            st = pb_bool(r, f, wt, "remove_extra_whitespaces", remove_ws);
            break;
        case 5:
            st = pb_bool(r, f, wt, "escape_whitespaces", escape);
            break;
        default:
            st = pb_skip(r, f, wt, 0);
            break;
        }
        if (st) return st;
    }
    return SLM_OK;
}

// shardlm's extension message (spm.h SPM_EXT_*).
static slm_status parse_ext(pb_reader *r, raw_spec *s) {
    static const char *const names[] = {"add_bos", "unk_id", "bos_id", "eos_id", "pad_id"};
    s->has_ext = true;
    while (r->p < r->end) {
        uint32_t f = 0;
        int wt = 0;
        slm_status st = pb_tag(r, &f, &wt);
        if (st) return st;
        if (f == SPM_EXT_ADD_BOS)
            st = pb_bool(r, f, wt, names[0], &s->ext_add_bos);
        else if (f >= SPM_EXT_UNK_ID && f < SPM_EXT_UNK_ID + 4)
            st = pb_int32(r, f, wt, names[f - SPM_EXT_ADD_BOS], &s->ext_ids[f - SPM_EXT_UNK_ID]);
        else
            st = pb_skip(r, f, wt, 0);
        if (st) return st;
    }
    return SLM_OK;
}

static slm_status parse_model(pb_reader *r, raw_spec *s) {
    while (r->p < r->end) {
        uint32_t f = 0;
        int wt = 0;
        slm_status st = pb_tag(r, &f, &wt);
        if (st) return st;
        const uint8_t *d = NULL;
        size_t n = 0;
        if (f == 1 || f == 2 || f == 3 || f == 5) {
            static const char *const names[] = {
                "", "pieces", "trainer_spec", "normalizer_spec", "", "denormalizer_spec"};
            st = pb_expect(r, f, wt, PB_LEN, names[f]);
            if (!st) st = pb_bytes(r, &d, &n, names[f]);
            if (st) return st;
            if (f == 1) {
                pb_reader sub = pb_sub(r, d, n, "ModelProto.SentencePiece");
                st = parse_piece(&sub, s);
            } else if (f == 2) {
                pb_reader sub = pb_sub(r, d, n, "TrainerSpec");
                st = parse_trainer(&sub, s);
            } else if (f == 3) {
                pb_reader sub = pb_sub(r, d, n, "NormalizerSpec");
                st = parse_normalizer(&sub, &s->norm_name, &s->charsmap, &s->charsmap_len,
                                      &s->add_dummy_prefix, &s->remove_extra_ws, &s->escape_ws);
            } else {
                pb_reader sub = pb_sub(r, d, n, "denormalizer_spec");
                s->has_denorm = true;
                st = parse_normalizer(&sub, &s->denorm_name, &s->denorm_charsmap,
                                      &s->denorm_charsmap_len, &s->denorm_add_dummy_prefix,
                                      &s->denorm_remove_extra_ws, &s->denorm_escape_ws);
            }
        } else if (f == SPM_EXT_FIELD) {
            st = pb_expect(r, f, wt, PB_LEN, "shardlm extension");
            if (!st) st = pb_bytes(r, &d, &n, "shardlm extension");
            pb_reader sub = pb_sub(r, d, n, "shardlm extension");
            if (!st) st = parse_ext(&sub, s);
        } else {
            st = pb_skip(r, f, wt, 0);
        }
        if (st) return st;
    }
    return SLM_OK;
}

// ---------------------------------------------------------------------------------------------
// Hash tables (FNV-1a, then a splitmix finaliser so the low bits are usable as a slot index)

static uint64_t spm_hash(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 31; // splitmix64 finaliser
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

static bool piece_eq(const spm_model *m, int32_t id, const char *s, size_t len) {
    const spm_piece *p = &m->pieces[id];
    return p->len == len && memcmp(m->strings + p->off, s, len) == 0;
}

int32_t spm_table_find(const spm_model *m, const spm_table *tab, const char *s, size_t len) {
    if (!tab->slots) return -1;
    uint64_t h = spm_hash(s, len);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h;; i++) {
        const spm_slot *e = &tab->slots[i & tab->mask];
        if (e->id < 0) return -1;
        if (e->tag == tag && piece_eq(m, e->id, s, len)) return e->id;
    }
}

int32_t spm_piece_to_id(const spm_model *m, const char *s, size_t len) {
    int32_t id = spm_table_find(m, &m->reserved, s, len);
    if (id >= 0) return id;
    id = spm_table_find(m, &m->normal, s, len);
    return id >= 0 ? id : m->unk_id;
}

static void table_init(spm_table *tab, int64_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 4)
        cap <<= 1;
    tab->slots = slm_xmalloc(cap * sizeof *tab->slots);
    for (uint64_t i = 0; i < cap; i++)
        tab->slots[i] = (spm_slot){-1, 0};
    tab->mask = (uint32_t)(cap - 1);
}

// Inserts `id`; returns the id already stored under the same text, or -1 if it was new.
static int32_t table_insert(const spm_model *m, spm_table *tab, int32_t id) {
    const spm_piece *p = &m->pieces[id];
    const char *s = m->strings + p->off;
    uint64_t h = spm_hash(s, p->len);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h;; i++) {
        spm_slot *e = &tab->slots[i & tab->mask];
        if (e->id < 0) {
            *e = (spm_slot){id, tag};
            return -1;
        }
        if (e->tag == tag && piece_eq(m, e->id, s, p->len)) return e->id;
    }
}

// ---------------------------------------------------------------------------------------------
// Loading

static void spm_model_free(spm_model *m) {
    if (!m) return;
    free(m->strings);
    free(m->pieces);
    free(m->normal.slots);
    free(m->reserved.slots);
    free(m->user_defined.slots);
    free(m->special);
    free(m->unk_surface);
    free(m);
}

// "<0xXX>" with two uppercase hex digits -> 0..255, else -1 (SentencePiece's PieceToByte).
static int piece_to_byte(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9')
            v = v * 16 + (c - '0');
        else if (c >= 'A' && c <= 'F')
            v = v * 16 + (c - 'A' + 10);
        else
            return -1;
    }
    return v;
}

// Id of the special piece named `text` if its type is `want`, else -1 (SentencePiece's
// bos_id() etc.: PieceToId(bos_piece), kept only when it is a CONTROL / UNKNOWN piece).
static int32_t special_id(const spm_model *m, const char *text, int want) {
    int32_t id = spm_piece_to_id(m, text, strlen(text));
    return (id >= 0 && m->pieces[id].type == want) ? id : -1;
}

// What SentencePiece itself refuses, and what shardlm does not implement.
static slm_status check_spec(const char *path, const raw_spec *s) {
    if (s->model_type != 2) {
        static const char *const kinds[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
        return slm_fail(
            SLM_E_UNSUPPORTED,
            "%s: SentencePiece model_type %s (%d): shardlm implements only BPE (2)", path,
            (s->model_type >= 1 && s->model_type <= 4) ? kinds[s->model_type] : "unknown",
            s->model_type);
    }
    if (s->charsmap_len > 0)
        return slm_fail(
            SLM_E_UNSUPPORTED,
            "%s: normalizer \"%s\" uses a precompiled_charsmap (%zu bytes); shardlm "
            "implements only the identity normalizer (as in Llama 2's tokenizer.model). "
            "HINT: train with --normalization_rule_name=identity",
            path, s->norm_name ? s->norm_name : "", s->charsmap_len);
    if (!s->escape_ws)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: normalizer_spec.escape_whitespaces=false is not implemented", path);
    if (s->has_denorm && s->denorm_charsmap_len > 0)
        return slm_fail(
            SLM_E_UNSUPPORTED,
            "%s: denormalizer_spec \"%s\" with a precompiled_charsmap is not implemented", path,
            s->denorm_name ? s->denorm_name : "");
    if (s->treat_ws_as_suffix)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: trainer_spec.treat_whitespace_as_suffix=true is not implemented",
                        path);
    if (s->n_pieces == 0) return slm_fail(SLM_E_FORMAT, "%s: ModelProto has no pieces", path);
    return SLM_OK;
}

// A model that takes over the spec's pieces, strings and unk surface (s keeps the rest).
static spm_model *model_from_spec(raw_spec *s) {
    spm_model *m = slm_xcalloc(1, sizeof *m);
    m->n_pieces = (int32_t)s->n_pieces;
    m->pieces = s->pieces;
    s->pieces = NULL;
    m->strings = s->strings.data;
    s->strings = (slm_buf){0};
    m->unk_id = -1;
    for (int i = 0; i < 256; i++)
        m->byte_id[i] = -1;
    m->byte_fallback = s->byte_fallback;
    m->add_dummy_prefix = s->add_dummy_prefix;
    m->remove_extra_ws = s->remove_extra_ws;
    if (s->unk_surface) {
        m->unk_surface = s->unk_surface;
        m->unk_surface_len = s->unk_surface_len;
        s->unk_surface = NULL;
    } else {
        m->unk_surface = slm_xstrdup(" \xE2\x81\x87 "); // " ⁇ " (U+2047), the proto default
        m->unk_surface_len = strlen(m->unk_surface);
    }
    return m;
}

// Piece i of type CONTROL / UNKNOWN / BYTE into m's special list, unk id and byte table.
static slm_status index_special(const char *path, spm_model *m, int32_t i) {
    const spm_piece *p = &m->pieces[i];
    const char *text = m->strings + p->off;
    if (p->type == SPM_CONTROL || p->type == SPM_UNKNOWN) {
        if (m->n_special % 16 == 0)
            m->special = slm_xrealloc(m->special, (size_t)(m->n_special + 16) * sizeof(int32_t));
        m->special[m->n_special++] = i;
        uint8_t b = (uint8_t)text[0];
        m->special_first[b >> 3] |= (uint8_t)(1u << (b & 7));
    }
    if (p->type == SPM_UNKNOWN) {
        if (m->unk_id >= 0)
            return slm_fail(SLM_E_FORMAT, "%s: pieces %d and %d are both of type UNKNOWN", path,
                            m->unk_id, i);
        m->unk_id = i;
    }
    if (p->type == SPM_BYTE) {
        if (!m->byte_fallback)
            return slm_fail(SLM_E_FORMAT,
                            "%s: byte piece %d \"%s\" found although trainer_spec.byte_fallback "
                            "is false",
                            path, i, text);
        int b = piece_to_byte(text, p->len);
        if (b < 0)
            return slm_fail(SLM_E_FORMAT, "%s: piece %d \"%s\" of type BYTE is not <0xXX>", path, i,
                            text);
        m->byte_id[b] = i;
    }
    return SLM_OK;
}

// The lookup tables over m's pieces (normal, reserved, user-defined), the special pieces, the
// byte pieces and the unknown piece; duplicates and malformed pieces are refused.
static slm_status index_pieces(const char *path, spm_model *m) {
    int64_t n_user = 0;
    for (int32_t i = 0; i < m->n_pieces; i++)
        if (m->pieces[i].type == SPM_USER_DEFINED) n_user++;
    table_init(&m->normal, m->n_pieces);
    table_init(&m->reserved, m->n_pieces);
    if (n_user) table_init(&m->user_defined, n_user);
    for (int32_t i = 0; i < m->n_pieces; i++) {
        const spm_piece *p = &m->pieces[i];
        const char *text = m->strings + p->off;
        bool normal = p->type == SPM_NORMAL || p->type == SPM_USER_DEFINED || p->type == SPM_UNUSED;
        int32_t prev = table_insert(m, normal ? &m->normal : &m->reserved, i);
        if (prev >= 0)
            return slm_fail(SLM_E_FORMAT, "%s: piece %d \"%s\" is already defined as piece %d",
                            path, i, text, prev);
        if (normal && p->len > m->max_normal_len) m->max_normal_len = p->len;
        if (p->type == SPM_UNUSED) m->has_unused = true;
        if (p->type == SPM_USER_DEFINED) {
            table_insert(m, &m->user_defined, i);
            if (p->len > m->max_user_len) m->max_user_len = p->len;
            uint8_t b = (uint8_t)text[0];
            m->user_first[b >> 3] |= (uint8_t)(1u << (b & 7));
        }
        slm_status st = index_special(path, m, i);
        if (st) return st;
    }
    if (m->unk_id < 0)
        return slm_fail(SLM_E_FORMAT, "%s: no piece of type UNKNOWN (SentencePiece requires <unk>)",
                        path);
    return SLM_OK;
}

// t's special ids: by the spec's piece names, or a GGUF import's ids as given (and its
// add_bos_token).
static slm_status set_special_ids(const char *path, const raw_spec *s, const spm_model *m,
                                  slm_tokenizer *t) {
    t->unk_id = special_id(m, s->unk_piece ? s->unk_piece : "<unk>", SPM_UNKNOWN);
    t->bos_id = special_id(m, s->bos_piece ? s->bos_piece : "<s>", SPM_CONTROL);
    t->eos_id = special_id(m, s->eos_piece ? s->eos_piece : "</s>", SPM_CONTROL);
    t->pad_id = special_id(m, s->pad_piece ? s->pad_piece : "<pad>", SPM_CONTROL);
    if (!s->has_ext) return SLM_OK;
    int32_t *dst[4] = {&t->unk_id, &t->bos_id, &t->eos_id, &t->pad_id};
    for (int i = 0; i < 4; i++) {
        if (s->ext_ids[i] < -1 || s->ext_ids[i] >= m->n_pieces)
            return slm_fail(SLM_E_FORMAT,
                            "%s: shardlm extension: special id %d is outside the vocabulary "
                            "[0, %d)",
                            path, s->ext_ids[i], m->n_pieces);
        *dst[i] = s->ext_ids[i];
    }
    t->no_default_bos = !s->ext_add_bos;
    return SLM_OK;
}

slm_status slm_spm_load(const char *path, const uint8_t *data, size_t len, slm_tokenizer *t) {
    raw_spec s = {0};
    s.model_type = 1;
    s.ext_ids[0] = s.ext_ids[1] = s.ext_ids[2] = s.ext_ids[3] = -1;
    s.add_dummy_prefix = s.remove_extra_ws = s.escape_ws = true;
    s.denorm_add_dummy_prefix = s.denorm_remove_extra_ws = s.denorm_escape_ws = true;
    spm_model *m = NULL;
    pb_reader r = {data, data, data + len, path, "ModelProto"};
    slm_status st = parse_model(&r, &s);
    if (!st) st = check_spec(path, &s);
    if (!st) {
        m = model_from_spec(&s);
        st = index_pieces(path, m);
    }
    if (!st) {
        t->type = SLM_TOK_SPM_BPE;
        t->vocab_size = m->n_pieces;
        st = set_special_ids(path, &s, m, t);
    }
    if (!st) {
        t->impl = m;
        m = NULL;
    }
    spm_model_free(m);
    raw_spec_free(&s);
    return st;
}

void slm_spm_free(void *impl) {
    spm_model_free(impl);
}

const char *slm_spm_piece(const slm_tokenizer *t, int32_t id) {
    const spm_model *m = t->impl;
    if (id < 0 || id >= m->n_pieces) return NULL;
    return m->strings + m->pieces[id].off;
}
