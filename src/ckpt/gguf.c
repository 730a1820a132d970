// GGUF v2 / v3 reading: a bounds-checked parser of the header, metadata and tensor infos over
// a mapped file, and dequantization of ggml's block types to fp32. Format and block layouts:
// gguf_format.h and docs/formats.md "GGUF".
#include "ckpt/ckpt.h"
#include "ckpt/gguf_format.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAX_NAME 127 // tensor names (ggml's limit is 63 bytes)

// A read cursor over the file; every read checks the bytes left.
typedef struct cur {
    const uint8_t *p;
    size_t len, pos;
    const char *path;
} cur;

static slm_status short_read(const cur *c, size_t need, const char *what) {
    return slm_fail(SLM_E_FORMAT,
                    "%s: truncated at byte %zu: %s needs %zu bytes, %zu left (file size %zu)",
                    c->path, c->pos, what, need, c->len - c->pos, c->len);
}

static slm_status rd_u32(cur *c, uint32_t *v, const char *what) {
    *v = 0;
    if (c->len - c->pos < 4) return short_read(c, 4, what);
    *v = slm_get_le32(c->p + c->pos);
    c->pos += 4;
    return SLM_OK;
}

static slm_status rd_u64(cur *c, uint64_t *v, const char *what) {
    *v = 0;
    if (c->len - c->pos < 8) return short_read(c, 8, what);
    *v = slm_get_le64(c->p + c->pos);
    c->pos += 8;
    return SLM_OK;
}

// A gguf string: u64 length + bytes. *s points into the file (not NUL-terminated).
static slm_status rd_str(cur *c, const char **s, uint64_t *n, const char *what) {
    *s = NULL;
    slm_status st = rd_u64(c, n, what);
    if (st) return st;
    if (*n > c->len - c->pos)
        return slm_fail(SLM_E_FORMAT,
                        "%s: %s at byte %zu: string length %" PRIu64 " runs past the end of the "
                        "file (%zu bytes left)",
                        c->path, what, c->pos - 8, *n, c->len - c->pos);
    *s = (const char *)c->p + c->pos;
    c->pos += (size_t)*n;
    return SLM_OK;
}

static size_t vtype_size(uint32_t t) {
    switch (t) {
    case SLM_GGUF_UINT8:
    case SLM_GGUF_INT8:
    case SLM_GGUF_BOOL:
        return 1;
    case SLM_GGUF_UINT16:
    case SLM_GGUF_INT16:
        return 2;
    case SLM_GGUF_UINT32:
    case SLM_GGUF_INT32:
    case SLM_GGUF_FLOAT32:
        return 4;
    case SLM_GGUF_UINT64:
    case SLM_GGUF_INT64:
    case SLM_GGUF_FLOAT64:
        return 8;
    default:
        return 0; // string, array: variable
    }
}

const char *slm_gguf_vtype_name(uint32_t t) {
    static const char *const names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                        "int32",  "float32", "bool",   "string", "array",
                                        "uint64", "int64",   "float64"};
    return t < SLM_GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

const char *slm_ggml_type_name(uint32_t t) {
    // ggml's numbering; the ones shardlm does not read are named so the refusal can say which.
    static const char *const names[] = {
        "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
        "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
        "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
        "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
        "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
        "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

// Checks one value of type t at the cursor and steps past it (arrays: their elements; an array
// of arrays is refused, as ggml's own reader does).
static slm_status skip_value(cur *c, uint32_t t, const char *key, bool in_array) {
    size_t n = vtype_size(t);
    if (n) {
        if (c->len - c->pos < n) return short_read(c, n, key);
        c->pos += n;
        return SLM_OK;
    }
    if (t == SLM_GGUF_STRING) {
        const char *s;
        uint64_t len;
        return rd_str(c, &s, &len, key);
    }
    if (t == SLM_GGUF_ARRAY && !in_array) {
        uint32_t et;
        uint64_t cnt;
        slm_status st = rd_u32(c, &et, key);
        if (!st) st = rd_u64(c, &cnt, key);
        if (st) return st;
        if (et >= SLM_GGUF_VTYPE_COUNT || et == SLM_GGUF_ARRAY)
            return slm_fail(SLM_E_FORMAT,
                            "%s: key %s: array element type %u is %s (expected a scalar or string "
                            "type 0..12 other than 9)",
                            c->path, key, et, et == SLM_GGUF_ARRAY ? "an array" : "unknown");
        size_t es = vtype_size(et);
        size_t min = es ? es : 8; // a string takes at least its 8-byte length
        if (cnt > (c->len - c->pos) / min)
            return slm_fail(SLM_E_FORMAT,
                            "%s: key %s: array of %" PRIu64 " %s values does not fit in the %zu "
                            "bytes left",
                            c->path, key, cnt, slm_gguf_vtype_name(et), c->len - c->pos);
        if (es) {
            c->pos += (size_t)cnt * es;
            return SLM_OK;
        }
        for (uint64_t i = 0; i < cnt; i++)
            if ((st = skip_value(c, et, key, true))) return st;
        return SLM_OK;
    }
    return slm_fail(SLM_E_FORMAT, "%s: key %s: value type %u is unknown (expected 0..12)", c->path,
                    key, t);
}

void slm_gguf_close(slm_gguf_file *f) {
    if (!f) return;
    if (f->owns_map) slm_map_free(&f->map);
    for (int64_t i = 0; i < f->n_kv; i++)
        free(f->kv[i].key);
    free(f->kv);
    free(f->t);
    free(f->path);
    memset(f, 0, sizeof *f);
}

static int cmp_off(const void *a, const void *b) {
    const slm_gguf_tensor *x = *(const slm_gguf_tensor *const *)a,
                          *y = *(const slm_gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

// Tensor infos: name, dims, type, offset; shapes and sizes checked here, placement after the
// data section is known.
static slm_status parse_tensor(cur *c, slm_gguf_file *f, int64_t i) {
    slm_gguf_tensor *t = &f->t[i];
    char what[64];
    snprintf(what, sizeof what, "tensor info %" PRId64 " name", i);
    const char *s;
    uint64_t n;
    slm_status st = rd_str(c, &s, &n, what);
    if (st) return st;
    if (n == 0 || n > GGUF_MAX_NAME || memchr(s, 0, (size_t)n))
        return slm_fail(SLM_E_FORMAT,
                        "%s: tensor info %" PRId64 ": name of %" PRIu64 " bytes (expected 1..%d "
                        "bytes without NUL)",
                        f->path, i, n, GGUF_MAX_NAME);
    memcpy(t->name, s, (size_t)n);
    t->name[n] = 0;
    uint32_t nd;
    if ((st = rd_u32(c, &nd, t->name))) return st;
    if (nd < 1 || nd > SLM_GGUF_MAX_DIMS)
        return slm_fail(SLM_E_FORMAT, "%s: tensor %s: %u dims (expected 1..%d)", f->path, t->name,
                        nd, SLM_GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    t->numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        if ((st = rd_u64(c, &ne, t->name))) return st;
        if (ne > (uint64_t)INT64_MAX || (ne && (uint64_t)t->numel > ((uint64_t)1 << 50) / ne))
            return slm_fail(SLM_E_FORMAT,
                            "%s: tensor %s: dimension %u is %" PRIu64 ": the element count "
                            "overflows (at most 2^50)",
                            f->path, t->name, d, ne);
        t->ne[d] = (int64_t)ne;
        t->numel *= (int64_t)ne;
    }
    for (uint32_t d = nd; d < SLM_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    if ((st = rd_u32(c, &t->type, t->name))) return st;
    int bs = slm_ggml_block_size(t->type);
    static const char reads[] = "shardlm reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K";
    if (!bs && strcmp(slm_ggml_type_name(t->type), "unknown"))
        return slm_fail(SLM_E_UNSUPPORTED, "%s: tensor %s: ggml type %u (%s) is not supported (%s)",
                        f->path, t->name, t->type, slm_ggml_type_name(t->type), reads);
    if (!bs)
        return slm_fail(SLM_E_FORMAT,
                        "%s: tensor %s: ggml type %u is unknown (not a ggml type; %s)", f->path,
                        t->name, t->type, reads);
    if (t->ne[0] % bs)
        return slm_fail(SLM_E_FORMAT,
                        "%s: tensor %s: first dimension %" PRId64 " is not a multiple of %s's "
                        "block of %d elements",
                        f->path, t->name, t->ne[0], slm_ggml_type_name(t->type), bs);
    t->nbytes = (size_t)(t->numel / bs) * (size_t)slm_ggml_type_size(t->type);
    if ((st = rd_u64(c, &t->offset, t->name))) return st;
    for (int64_t j = 0; j < i; j++)
        if (!strcmp(f->t[j].name, t->name))
            return slm_fail(SLM_E_FORMAT,
                            "%s: tensor %s is listed twice (infos %" PRId64 " and %" PRId64 ")",
                            f->path, t->name, j, i);
    return SLM_OK;
}

slm_status slm_gguf_parse(const uint8_t *data, size_t len, const char *name, slm_gguf_file *f) {
    memset(f, 0, sizeof *f);
    f->path = slm_xstrdup(name);
    f->map.data = data;
    f->map.len = len;
    f->alignment = SLM_GGUF_DEFAULT_ALIGNMENT;
    cur c = {data, len, 0, f->path};
    uint32_t magic;
    slm_status st = rd_u32(&c, &magic, "the magic");
    if (st) return st;
    if (magic != SLM_GGUF_MAGIC)
        return slm_fail(SLM_E_FORMAT,
                        "%s: not a GGUF file: magic %02x %02x %02x %02x (expected \"GGUF\")", name,
                        data[0], data[1], data[2], data[3]);
    if ((st = rd_u32(&c, &f->version, "the version"))) return st;
    if (f->version != 2 && f->version != 3)
        return slm_fail(f->version == 1 ? SLM_E_UNSUPPORTED : SLM_E_FORMAT,
                        "%s: GGUF version %u (shardlm reads versions 2 and 3 in little-endian; a "
                        "big-endian file reads as %u)",
                        name, f->version, 3u << 24);
    uint64_t nt, nkv;
    if ((st = rd_u64(&c, &nt, "the tensor count")) || (st = rd_u64(&c, &nkv, "the key count")))
        return st;
    // Each key takes at least 8 + 4 + 1 bytes, each tensor info 8 + 4 + 8 + 4 + 8: counts the
    // file cannot hold are refused before anything is allocated.
    if (nkv > (len - c.pos) / 13 || nt > (len - c.pos) / 32)
        return slm_fail(SLM_E_FORMAT,
                        "%s: %" PRIu64 " keys and %" PRIu64 " tensors cannot fit in the %zu "
                        "bytes of the file",
                        name, nkv, nt, len);
    f->kv = slm_xcalloc((size_t)nkv + 1, sizeof *f->kv);
    for (uint64_t i = 0; i < nkv; i++) {
        slm_gguf_kv *kv = &f->kv[i];
        char what[64];
        snprintf(what, sizeof what, "key %" PRIu64 "'s name", i);
        const char *s;
        uint64_t n;
        if ((st = rd_str(&c, &s, &n, what))) return st;
        if (n == 0 || n > 65535 || memchr(s, 0, (size_t)n))
            return slm_fail(SLM_E_FORMAT,
                            "%s: key %" PRIu64 ": name of %" PRIu64 " bytes (expected 1..65535 "
                            "without NUL)",
                            name, i, n);
        kv->key = slm_xmalloc((size_t)n + 1);
        memcpy(kv->key, s, (size_t)n);
        kv->key[n] = 0;
        f->n_kv = (int64_t)i + 1;
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(f->kv[j].key, kv->key))
                return slm_fail(SLM_E_FORMAT, "%s: key %s appears twice", name, kv->key);
        if ((st = rd_u32(&c, &kv->type, kv->key))) return st;
        kv->count = 1;
        kv->elem_type = kv->type;
        if (kv->type == SLM_GGUF_ARRAY && c.len - c.pos >= 12) {
            kv->elem_type = slm_get_le32(c.p + c.pos);
            kv->count = slm_get_le64(c.p + c.pos + 4);
            kv->off = c.pos + 12;
        } else {
            kv->off = c.pos;
        }
        if ((st = skip_value(&c, kv->type, kv->key, false))) return st;
    }
    const slm_gguf_kv *al = slm_gguf_find(f, SLM_GGUF_KEY_ALIGNMENT);
    if (al) {
        if (al->type != SLM_GGUF_UINT32)
            return slm_fail(SLM_E_FORMAT, "%s: key %s is a %s (expected uint32)", name,
                            SLM_GGUF_KEY_ALIGNMENT, slm_gguf_vtype_name(al->type));
        uint32_t a = slm_get_le32(data + al->off);
        if (a == 0 || (a & (a - 1)) || a > (1u << 20))
            return slm_fail(SLM_E_FORMAT,
                            "%s: key %s is %u (expected a power of two, at most 2^20)", name,
                            SLM_GGUF_KEY_ALIGNMENT, a);
        f->alignment = a;
    }
    f->t = slm_xcalloc((size_t)nt + 1, sizeof *f->t);
    for (uint64_t i = 0; i < nt; i++) {
        f->n_tensors = (int64_t)i + 1;
        if ((st = parse_tensor(&c, f, (int64_t)i))) return st;
    }
    // The data section starts at the next multiple of the alignment.
    size_t start = (c.pos + f->alignment - 1) / f->alignment * f->alignment;
    f->data_start = start;
    size_t data_len = start <= len ? len - start : 0;
    f->data_len = data_len;
    slm_gguf_tensor **order = slm_xcalloc((size_t)nt + 1, sizeof *order);
    for (int64_t i = 0; i < f->n_tensors && !st; i++) {
        slm_gguf_tensor *t = &f->t[i];
        order[i] = t;
        if (t->offset % f->alignment)
            st = slm_fail(SLM_E_FORMAT,
                          "%s: tensor %s: offset %" PRIu64 " is not a multiple of the alignment "
                          "%u",
                          name, t->name, t->offset, f->alignment);
        else if (t->offset > data_len || t->nbytes > data_len - t->offset)
            st = slm_fail(SLM_E_FORMAT,
                          "%s: tensor %s: bytes [%" PRIu64 ", %" PRIu64 ") of the data section "
                          "lie outside it (%zu bytes from file offset %zu; %s)",
                          name, t->name, t->offset, t->offset + (uint64_t)t->nbytes, data_len,
                          start, start > len ? "the file ends before it" : "truncated file?");
    }
    if (!st && f->n_tensors > 1) {
        qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_off);
        for (int64_t i = 1; i < f->n_tensors && !st; i++)
            if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
                st = slm_fail(SLM_E_FORMAT,
                              "%s: tensors %s and %s overlap in the data section (offsets %" PRIu64
                              " + %zu bytes and %" PRIu64 ")",
                              name, order[i - 1]->name, order[i]->name, order[i - 1]->offset,
                              order[i - 1]->nbytes, order[i]->offset);
    }
    free(order);
    return st;
}

slm_status slm_gguf_open(const char *path, slm_gguf_file *f) {
    memset(f, 0, sizeof *f);
    slm_map m;
    slm_status st = slm_map_file(path, &m);
    if (st) return st;
    st = slm_gguf_parse(m.data, m.len, path, f);
    f->owns_map = true;
    f->map = m;
    if (st) {
        char *msg = slm_xstrdup(slm_errmsg());
        slm_gguf_close(f);
        slm_set_errmsg(msg);
        free(msg);
    }
    return st;
}

const slm_gguf_kv *slm_gguf_find(const slm_gguf_file *f, const char *key) {
    for (int64_t i = 0; i < f->n_kv; i++)
        if (!strcmp(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const slm_gguf_tensor *slm_gguf_tensor_find(const slm_gguf_file *f, const char *name) {
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

static slm_status type_err(const slm_gguf_file *f, const slm_gguf_kv *kv, const char *want) {
    return slm_fail(SLM_E_FORMAT, "%s: key %s is a%s %s (expected %s)", f->path, kv->key,
                    kv->type == SLM_GGUF_ARRAY || kv->type == SLM_GGUF_INT8 ||
                            kv->type == SLM_GGUF_INT16 || kv->type == SLM_GGUF_INT32 ||
                            kv->type == SLM_GGUF_INT64 || kv->type == SLM_GGUF_UINT8 ||
                            kv->type == SLM_GGUF_UINT16 || kv->type == SLM_GGUF_UINT32 ||
                            kv->type == SLM_GGUF_UINT64
                        ? "n"
                        : "",
                    slm_gguf_vtype_name(kv->type), want);
}

// An integer value of any integer type at p.
static bool int_at(uint32_t t, const uint8_t *p, int64_t *v, bool *too_big) {
    *too_big = false;
    switch (t) {
    case SLM_GGUF_UINT8:
        *v = p[0];
        return true;
    case SLM_GGUF_INT8:
        *v = (int8_t)p[0];
        return true;
    case SLM_GGUF_UINT16:
        *v = slm_get_le16(p);
        return true;
    case SLM_GGUF_INT16:
        *v = (int16_t)slm_get_le16(p);
        return true;
    case SLM_GGUF_UINT32:
        *v = slm_get_le32(p);
        return true;
    case SLM_GGUF_INT32:
        *v = (int32_t)slm_get_le32(p);
        return true;
    case SLM_GGUF_UINT64: {
        uint64_t u = slm_get_le64(p);
        *too_big = u > (uint64_t)INT64_MAX;
        *v = (int64_t)(u & (uint64_t)INT64_MAX);
        return true;
    }
    case SLM_GGUF_INT64:
        *v = (int64_t)slm_get_le64(p);
        return true;
    default:
        return false;
    }
}

slm_status slm_gguf_get_int(const slm_gguf_file *f, const char *key, int64_t lo, int64_t hi,
                            int64_t *out, bool *found) {
    const slm_gguf_kv *kv = slm_gguf_find(f, key);
    if (found) *found = kv != NULL;
    if (!kv) {
        if (found) return SLM_OK;
        return slm_fail(SLM_E_FORMAT, "%s: key %s is missing (expected an integer)", f->path, key);
    }
    int64_t v;
    bool big;
    if (!int_at(kv->type, f->map.data + kv->off, &v, &big)) return type_err(f, kv, "an integer");
    if (big || v < lo || v > hi)
        return slm_fail(SLM_E_FORMAT,
                        "%s: key %s is %s%" PRId64 " (expected %" PRId64 "..%" PRId64 ")", f->path,
                        key, big ? "> 2^63, " : "", v, lo, hi);
    *out = v;
    return SLM_OK;
}

slm_status slm_gguf_get_float(const slm_gguf_file *f, const char *key, double *out, bool *found) {
    const slm_gguf_kv *kv = slm_gguf_find(f, key);
    if (found) *found = kv != NULL;
    if (!kv) {
        if (found) return SLM_OK;
        return slm_fail(SLM_E_FORMAT, "%s: key %s is missing (expected a number)", f->path, key);
    }
    const uint8_t *p = f->map.data + kv->off;
    if (kv->type == SLM_GGUF_FLOAT32) {
        uint32_t u = slm_get_le32(p);
        float x;
        memcpy(&x, &u, 4);
        *out = x;
    } else if (kv->type == SLM_GGUF_FLOAT64) {
        uint64_t u = slm_get_le64(p);
        memcpy(out, &u, 8);
    } else {
        int64_t v;
        bool big;
        if (!int_at(kv->type, p, &v, &big)) return type_err(f, kv, "a number");
        *out = big ? 9.3e18 : (double)v;
    }
    return SLM_OK;
}

slm_status slm_gguf_get_bool(const slm_gguf_file *f, const char *key, bool *out, bool *found) {
    const slm_gguf_kv *kv = slm_gguf_find(f, key);
    if (found) *found = kv != NULL;
    if (!kv) {
        if (found) return SLM_OK;
        return slm_fail(SLM_E_FORMAT, "%s: key %s is missing (expected a bool)", f->path, key);
    }
    if (kv->type != SLM_GGUF_BOOL) return type_err(f, kv, "a bool");
    uint8_t b = f->map.data[kv->off];
    if (b > 1)
        return slm_fail(SLM_E_FORMAT, "%s: key %s: bool byte is %u (expected 0 or 1)", f->path, key,
                        b);
    *out = b;
    return SLM_OK;
}

slm_status slm_gguf_get_str(const slm_gguf_file *f, const char *key, const char **s, size_t *len,
                            bool *found) {
    const slm_gguf_kv *kv = slm_gguf_find(f, key);
    if (found) *found = kv != NULL;
    if (!kv) {
        if (found) return SLM_OK;
        return slm_fail(SLM_E_FORMAT, "%s: key %s is missing (expected a string)", f->path, key);
    }
    if (kv->type != SLM_GGUF_STRING) return type_err(f, kv, "a string");
    *len = (size_t)slm_get_le64(f->map.data + kv->off);
    *s = (const char *)f->map.data + kv->off + 8;
    return SLM_OK;
}

slm_status slm_gguf_get_array(const slm_gguf_file *f, const char *key, uint32_t elem_type,
                              const slm_gguf_kv **out) {
    const slm_gguf_kv *kv = slm_gguf_find(f, key);
    *out = NULL;
    if (!kv) return SLM_OK;
    if (kv->type != SLM_GGUF_ARRAY || kv->elem_type != elem_type) {
        char want[48];
        snprintf(want, sizeof want, "an array of %s", slm_gguf_vtype_name(elem_type));
        if (kv->type == SLM_GGUF_ARRAY)
            return slm_fail(SLM_E_FORMAT, "%s: key %s is an array of %s (expected %s)", f->path,
                            key, slm_gguf_vtype_name(kv->elem_type), want);
        return type_err(f, kv, want);
    }
    *out = kv;
    return SLM_OK;
}

void slm_gguf_array_strings(const slm_gguf_file *f, const slm_gguf_kv *kv, const char **s,
                            size_t *len) {
    size_t pos = kv->off;
    for (uint64_t i = 0; i < kv->count; i++) {
        len[i] = (size_t)slm_get_le64(f->map.data + pos);
        s[i] = (const char *)f->map.data + pos + 8;
        pos += 8 + len[i];
    }
}

// --- Dequantization ----------------------------------------------------------------------------
// Each follows ggml's dequantize_row_* (ggml-quants.c): the same products in the same order in
// fp32, so results are bitwise those of ggml and of gguf-py's numpy version (which evaluates the
// same expressions elementwise in float32).

static float h2f(const uint8_t *p) {
    return slm_f16_to_f32_1(slm_get_le16(p));
}

// a * b - c with the product rounded to fp32 first, as ggml's compiled code and numpy compute it:
// two statements, so that no compiler contracts them into one fused multiply-add (clang's
// default -ffp-contract=on fuses within an expression only).
static float mul_sub(float a, float b, float c) {
    float p = a * b;
    return p - c;
}

// The 6-bit scale and min of sub-block j from a K-quant's 12 packed bytes.
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Q4_K and Q5_K: 8 sub-blocks of 32 values, each with a 6-bit scale and min; Q5_K adds a fifth
// bit per value from qh (NULL for Q4_K), two bit planes per 64 values.
static void deq_q45_k(const uint8_t *b, const uint8_t *qh, const uint8_t *q, float *y) {
    const float d = h2f(b), min = h2f(b + 2);
    const uint8_t *sc = b + 4;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < SLM_GGML_QK_K; j += 64, is += 2) {
        uint8_t s, m;
        scale_min_k4(is, sc, &s, &m);
        const float d1 = d * s, m1 = min * m;
        scale_min_k4(is + 1, sc, &s, &m);
        const float d2 = d * s, m2 = min * m;
        for (int l = 0; l < 32; l++)
            *y++ = mul_sub(d1, (float)((q[l] & 0xF) + (qh && (qh[l] & u1) ? 16 : 0)), m1);
        for (int l = 0; l < 32; l++)
            *y++ = mul_sub(d2, (float)((q[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)), m2);
        q += 32;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

static void deq_q4_k(const uint8_t *b, float *y) {
    deq_q45_k(b, NULL, b + 4 + SLM_GGML_K_SCALE_SIZE, y);
}

static void deq_q5_k(const uint8_t *b, float *y) {
    const uint8_t *qh = b + 4 + SLM_GGML_K_SCALE_SIZE;
    deq_q45_k(b, qh, qh + SLM_GGML_QK_K / 8, y);
}

static void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + SLM_GGML_QK_K / 2;
    const int8_t *sc = (const int8_t *)(b + SLM_GGML_QK_K / 2 + SLM_GGML_QK_K / 4);
    const float d = h2f(b + SLM_GGML_QK_K / 2 + SLM_GGML_QK_K / 4 + SLM_GGML_QK_K / 16);
    for (int n = 0; n < SLM_GGML_QK_K; n += 128) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

void slm_gguf_dequant(uint32_t type, const uint8_t *src, int64_t n, float *dst) {
    const int bs = slm_ggml_block_size(type), sz = slm_ggml_type_size(type);
    for (int64_t i = 0; i < n / bs; i++) {
        const uint8_t *b = src + (size_t)i * (size_t)sz;
        float *y = dst + i * bs;
        switch (type) {
        case SLM_GGML_F32:
            memcpy(y, b, 4);
            break;
        case SLM_GGML_F16:
            *y = h2f(b);
            break;
        case SLM_GGML_BF16:
            *y = slm_bf16_to_f32_1(slm_get_le16(b));
            break;
        case SLM_GGML_Q8_0: {
            const float d = h2f(b);
            for (int l = 0; l < SLM_GGML_QK; l++)
                y[l] = (float)(int8_t)b[2 + l] * d;
            break;
        }
        case SLM_GGML_Q4_0: {
            const float d = h2f(b);
            for (int l = 0; l < SLM_GGML_QK / 2; l++) {
                y[l] = (float)((b[2 + l] & 0xF) - 8) * d;
                y[l + SLM_GGML_QK / 2] = (float)((b[2 + l] >> 4) - 8) * d;
            }
            break;
        }
        case SLM_GGML_Q4_1: {
            const float d = h2f(b), m = h2f(b + 2);
            for (int l = 0; l < SLM_GGML_QK / 2; l++) {
                y[l] = mul_sub((float)(b[4 + l] & 0xF), d, -m);
                y[l + SLM_GGML_QK / 2] = mul_sub((float)(b[4 + l] >> 4), d, -m);
            }
            break;
        }
        case SLM_GGML_Q4_K:
            deq_q4_k(b, y);
            break;
        case SLM_GGML_Q5_K:
            deq_q5_k(b, y);
            break;
        case SLM_GGML_Q6_K:
            deq_q6_k(b, y);
            break;
        default:
            slm_fatal("slm_gguf_dequant: type %u has no dequantizer", type);
        }
    }
}

void slm_gguf_read_f32(const slm_gguf_file *f, const slm_gguf_tensor *t, float *out) {
    slm_gguf_dequant(t->type, f->map.data + f->data_start + t->offset, t->numel, out);
}
