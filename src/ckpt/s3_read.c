// Checkpoints on S3, the reading side (docs/formats.md "Checkpoints on S3"): the remote layout,
// resolving an s3:// URI to a step, and the S3 source of the checkpoint reader (ckpt_internal.h
// "source"): rank files read through range GETs (only the chunks a reader needs, several in
// flight). Picking the newest remote checkpoint and the uploader are in remote.c.
//
// Remote layout under s3://BUCKET/PREFIX/ (mirrors the run directory):
//   PREFIX/checkpoints/step_N/manifest.json   the local manifest plus "s3_prefix_shards": K and
//                                              "s3_objects": [{rank, key, offset}] per rank file
//   PREFIX/checkpoints/step_N/host_H.bin      K = 1: the rank files of the host whose leader is
//                                              world rank H, concatenated in rank order (one PUT
//                                              per host: PUTs scale with hosts, not ranks)
//   PREFIX/sKK/checkpoints/step_N/host_H.bin  K > 1, KK = H mod K (two digits)
//   PREFIX/checkpoints/latest                 "step_N\n", written after step N's manifest
// A step_N without manifest.json is incomplete (an upload in progress or interrupted).
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "ckpt/ckpt_internal.h"
#include "objstore/objstore.h"

#define PREFETCH_BYTES ((size_t)8 * SLM_CKPT_CHUNK_BYTES) // one reader's range-GET window

void slm_ckpt_rlay_free(slm_ckpt_rlay *L) {
    free(L->bucket);
    free(L->prefix);
    memset(L, 0, sizeof *L);
}

slm_status slm_ckpt_rlay_parse(const char *uri, slm_ckpt_rlay *L) {
    memset(L, 0, sizeof *L);
    char *p = NULL;
    slm_status st = slm_s3_uri_parse(uri, &L->bucket, &p);
    if (st) return st;
    size_t n = strlen(p);
    while (n && p[n - 1] == '/')
        p[--n] = 0;
    slm_buf b = {0};
    slm_buf_appendf(&b, "%s%s", p, n ? "/" : "");
    slm_buf_append(&b, "", 0);
    free(p);
    L->prefix = b.data;
    L->shards = 1;
    return SLM_OK;
}

char *slm_ckpt_rlay_key_step(const slm_ckpt_rlay *L, int64_t step, const char *name) {
    slm_buf b = {0};
    slm_buf_appendf(&b, "%scheckpoints/step_%08" PRId64 "/%s", L->prefix, step, name);
    return b.data;
}

char *slm_ckpt_rlay_key_host(const slm_ckpt_rlay *L, int64_t step, int leader) {
    char name[32];
    snprintf(name, sizeof name, "host_%05d.bin", leader);
    if (L->shards <= 1) return slm_ckpt_rlay_key_step(L, step, name);
    slm_buf b = {0};
    slm_buf_appendf(&b, "%ss%02d/checkpoints/step_%08" PRId64 "/%s", L->prefix, leader % L->shards,
                    step, name);
    return b.data;
}

char *slm_ckpt_rlay_key_latest(const slm_ckpt_rlay *L) {
    slm_buf b = {0};
    slm_buf_appendf(&b, "%scheckpoints/latest", L->prefix);
    return b.data;
}

bool slm_ckpt_rlay_parse_step(const char *s, size_t len, int64_t *step) {
    if (len < 6 || strncmp(s, "step_", 5) != 0) return false;
    int64_t v = 0;
    size_t i = 5;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (INT64_MAX - 9) / 10) return false;
        v = v * 10 + (s[i] - '0');
    }
    if (i == 5) return false;
    for (; i < len; i++)
        if (s[i] != '\n' && s[i] != ' ' && s[i] != '\r') return false;
    *step = v;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Reading

typedef struct robj {
    int rank;
    char *key;      // object holding the rank's file
    int64_t offset; // where the file starts in it
    int64_t bytes;  // the file's size (manifest "files"; -1 until remote_expect)
} robj;

typedef struct slm_ckpt_remote {
    slm_s3 *s3;
    slm_ckpt_rlay L;
    int64_t step;
    robj *obj; // the manifest's "s3_objects"
    int n_obj;
    uint8_t *buf; // prefetched bytes [buf_off, buf_off + buf_len) of rank buf_rank's file
    int buf_rank;
    int64_t buf_off;
    size_t buf_len;
} slm_ckpt_remote;

static void remote_free(slm_ckpt_remote *r) {
    if (!r) return;
    for (int i = 0; i < r->n_obj; i++)
        free(r->obj[i].key);
    free(r->obj);
    slm_s3_close(r->s3);
    slm_ckpt_rlay_free(&r->L);
    free(r->buf);
    free(r);
}

// Finds the checkpoint's manifest under L: the URI is a step directory (has manifest.json), a
// checkpoints root (has latest) or a run prefix (has checkpoints/latest). On success *step_key is
// "…/checkpoints/step_N/" (owned) and *text / *len the manifest (owned; also set, for the caller
// to free, on some errors).
static slm_status find_manifest(slm_ckpt_remote *r, const slm_ckpt_rlay *L, const char *uri,
                                char **step_key, char **text, size_t *len) {
    char *data = NULL;
    size_t n = 0;
    bool found = false;
    slm_buf b = {0};
    slm_buf_appendf(&b, "%smanifest.json", L->prefix);
    slm_status st = slm_s3_get(r->s3, L->bucket, b.data, &data, &n, &found);
    *step_key = NULL;
    if (!st && found) {
        *step_key = slm_xstrdup(L->prefix);
        *text = data;
        *len = n;
        data = NULL;
    }
    for (int i = 0; !st && !*step_key && i < 2; i++) {
        b.len = 0;
        slm_buf_appendf(&b, "%s%slatest", L->prefix, i ? "checkpoints/" : "");
        free(data);
        data = NULL;
        st = slm_s3_get(r->s3, L->bucket, b.data, &data, &n, &found);
        if (st || !found) continue;
        int64_t s;
        if (!slm_ckpt_rlay_parse_step(data, n, &s)) {
            st = slm_fail(SLM_E_FORMAT, "s3://%s/%s: does not name a step_N checkpoint", L->bucket,
                          b.data);
            break;
        }
        slm_buf sk = {0};
        slm_buf_appendf(&sk, "%s%sstep_%08" PRId64 "/", L->prefix, i ? "checkpoints/" : "", s);
        *step_key = sk.data;
        free(data);
        data = NULL;
        b.len = 0;
        slm_buf_appendf(&b, "%smanifest.json", *step_key);
        st = slm_s3_get(r->s3, L->bucket, b.data, &data, &n, &found);
        if (!st && !found)
            st = slm_fail(SLM_E_IO, "s3://%s/%s: missing (`latest` names an incomplete checkpoint)",
                          L->bucket, b.data);
        if (!st) {
            *text = data;
            *len = n;
            data = NULL;
        }
    }
    free(data);
    slm_buf_free(&b);
    if (!st && !*step_key)
        st = slm_fail(
            SLM_E_IO,
            "%s: no checkpoint here (neither manifest.json, latest nor checkpoints/latest)", uri);
    if (st) {
        free(*step_key);
        *step_key = NULL;
    }
    return st;
}

// From step_key "…/checkpoints/step_N/" (its trailing '/' is cut): *step = N and L->prefix
// becomes the run prefix (the key without "checkpoints/step_N/"), where rank files live, spread
// over prefix shards as the manifest records.
static slm_status split_step_key(slm_ckpt_rlay *L, char *step_key, int64_t *step) {
    size_t sl = strlen(step_key);
    char *end = step_key + sl - 1; // the trailing '/'
    *end = 0;
    char *slash = strrchr(step_key, '/');
    const char *last = slash ? slash + 1 : step_key;
    if (!slm_ckpt_rlay_parse_step(last, strlen(last), step))
        return slm_fail(SLM_E_FORMAT, "s3://%s/%s: not a step_N checkpoint prefix", L->bucket,
                        step_key);
    free(L->prefix);
    size_t keep = slash ? (size_t)(slash - step_key) + 1 : 0; // ".../checkpoints/"
    const char *cp = "checkpoints/";
    if (keep >= strlen(cp) && strncmp(step_key + keep - strlen(cp), cp, strlen(cp)) == 0)
        keep -= strlen(cp);
    L->prefix = slm_xmalloc(keep + 1);
    memcpy(L->prefix, step_key, keep);
    L->prefix[keep] = 0;
    return SLM_OK;
}

// The manifest's S3 layout: s3_prefix_shards into L->shards, s3_objects into r->obj.
static slm_status parse_objects(slm_ckpt_remote *r, slm_ckpt_rlay *L, const char *dir,
                                const char *text, size_t len) {
    cJSON *o = cJSON_ParseWithLength(text, len);
    const cJSON *ks = o ? cJSON_GetObjectItemCaseSensitive(o, "s3_prefix_shards") : NULL;
    if (cJSON_IsNumber(ks) && ks->valuedouble >= 1 && ks->valuedouble <= 100)
        L->shards = (int)ks->valuedouble;
    const cJSON *ob = o ? cJSON_GetObjectItemCaseSensitive(o, "s3_objects") : NULL, *e;
    int no = cJSON_IsArray(ob) ? cJSON_GetArraySize(ob) : 0;
    r->obj = slm_xcalloc((size_t)(no ? no : 1), sizeof *r->obj);
    slm_status st = SLM_OK;
    cJSON_ArrayForEach(e, ob) {
        const cJSON *rk = cJSON_GetObjectItemCaseSensitive(e, "rank"),
                    *ky = cJSON_GetObjectItemCaseSensitive(e, "key"),
                    *of = cJSON_GetObjectItemCaseSensitive(e, "offset");
        if (!cJSON_IsNumber(rk) || !cJSON_IsString(ky) || !cJSON_IsNumber(of) ||
            of->valuedouble < 0) {
            st = slm_fail(SLM_E_FORMAT, "%s/manifest.json: bad s3_objects entry", dir);
            break;
        }
        r->obj[r->n_obj++] = (robj){(int)rk->valuedouble, slm_xstrdup(ky->valuestring),
                                    (int64_t)of->valuedouble, -1};
    }
    cJSON_Delete(o);
    return st;
}

static slm_status remote_resolve(const char *uri, slm_ckpt_remote **out, char **dir, char **text,
                                 size_t *len) {
    *out = NULL;
    *dir = *text = NULL;
    *len = 0;
    slm_ckpt_rlay L;
    slm_status st = slm_ckpt_rlay_parse(uri, &L);
    if (st) return st;
    slm_ckpt_remote *r = slm_xcalloc(1, sizeof *r);
    r->buf_rank = -1;
    char *step_key = NULL;
    st = slm_s3_open_default(NULL, NULL, &r->s3);
    if (!st) st = find_manifest(r, &L, uri, &step_key, text, len);
    if (!st) st = split_step_key(&L, step_key, &r->step);
    if (!st) {
        slm_buf d = {0};
        slm_buf_appendf(&d, "s3://%s/%s", L.bucket, step_key);
        *dir = d.data;
        st = parse_objects(r, &L, *dir, *text, *len);
    }
    free(step_key);
    if (st) goto fail;
    r->L = L;
    *out = r;
    return SLM_OK;
fail:
    free(*text);
    *text = NULL;
    *len = 0;
    free(*dir);
    *dir = NULL;
    slm_ckpt_rlay_free(&L);
    remote_free(r);
    return st;
}

// The object and offset of a rank's file: the manifest's s3_objects, else (a plain copy of a
// step directory) the file under the step prefix.
static const char *obj_of(slm_ckpt_remote *r, int rank, const char *name, int64_t *offset,
                          char **owned) {
    *owned = NULL;
    for (int i = 0; i < r->n_obj; i++)
        if (r->obj[i].rank == rank) {
            *offset = r->obj[i].offset;
            return r->obj[i].key;
        }
    *offset = 0;
    *owned = slm_ckpt_rlay_key_step(&r->L, r->step, name);
    return *owned;
}

static char *remote_where(slm_ckpt_remote *r, int rank, const char *name) {
    int64_t base;
    char *own;
    const char *key = obj_of(r, rank, name, &base, &own);
    slm_buf b = {0};
    slm_buf_appendf(&b, "; the file is in s3://%s/%s from byte %" PRId64, r->L.bucket, key, base);
    free(own);
    return b.data;
}

static void remote_expect(slm_ckpt_remote *r, int rank, int64_t bytes) {
    for (int i = 0; i < r->n_obj; i++)
        if (r->obj[i].rank == rank) r->obj[i].bytes = bytes;
}

static slm_status remote_head(slm_ckpt_remote *r, int rank, const char *name, const char *path,
                              int64_t bytes) {
    int64_t base;
    char *own;
    const char *key = obj_of(r, rank, name, &base, &own);
    // The object's size: this file's end, or (a host object) the end of the last file in it,
    // exactly, as a local rank file's size must equal the manifest's.
    int64_t want = base + bytes;
    for (int i = 0; !own && i < r->n_obj; i++)
        if (r->obj[i].bytes >= 0 && strcmp(r->obj[i].key, key) == 0 &&
            r->obj[i].offset + r->obj[i].bytes > want)
            want = r->obj[i].offset + r->obj[i].bytes;
    int64_t size = -1;
    bool found = false;
    slm_status st = slm_s3_head(r->s3, r->L.bucket, key, &size, &found);
    if (!st && !found)
        st = slm_fail(SLM_E_IO,
                      "%s: rank %d's object s3://%s/%s is missing; HINT: the checkpoint is "
                      "incomplete, resume from an older one with --resume",
                      path, rank, r->L.bucket, key);
    else if (!st && size != want)
        st = slm_fail(SLM_E_IO,
                      "%s: object s3://%s/%s has %" PRId64 " bytes, the manifest puts this file's "
                      "%" PRId64 " bytes at offset %" PRId64 " and the object's files end at byte "
                      "%" PRId64 " (%s?)",
                      path, r->L.bucket, key, size, bytes, base, want,
                      size < want ? "truncated" : "appended to");
    free(own);
    return st;
}

static slm_status remote_read(slm_ckpt_remote *r, int rank, const char *name, int64_t off,
                              size_t len, int64_t want_end, uint8_t *dst) {
    if (r->buf_rank == rank && off >= r->buf_off &&
        off + (int64_t)len <= r->buf_off + (int64_t)r->buf_len) {
        memcpy(dst, r->buf + (off - r->buf_off), len);
        return SLM_OK;
    }
    // Fetch [off, want_end) up to the window, as chunk-sized range GETs in parallel.
    int64_t end = want_end > off + (int64_t)len ? want_end : off + (int64_t)len;
    if (end - off > (int64_t)PREFETCH_BYTES) end = off + (int64_t)PREFETCH_BYTES;
    if (end < off + (int64_t)len) end = off + (int64_t)len;
    size_t span = (size_t)(end - off);
    if (!r->buf) r->buf = slm_xmalloc(PREFETCH_BYTES > len ? PREFETCH_BYTES : len);
    r->buf_rank = -1;
    int64_t base;
    char *own;
    const char *key = obj_of(r, rank, name, &base, &own);
    int n = (int)((span + SLM_CKPT_CHUNK_BYTES - 1) / SLM_CKPT_CHUNK_BYTES);
    slm_s3_range *rg = slm_xcalloc((size_t)n, sizeof *rg);
    for (int i = 0; i < n; i++) {
        int64_t a = off + (int64_t)i * SLM_CKPT_CHUNK_BYTES;
        int64_t b = a + SLM_CKPT_CHUNK_BYTES < end ? a + SLM_CKPT_CHUNK_BYTES : end;
        rg[i] =
            (slm_s3_range){.key = key, .offset = base + a, .len = b - a, .dst = r->buf + (a - off)};
    }
    slm_status st = slm_s3_get_ranges(r->s3, r->L.bucket, rg, n);
    free(rg);
    free(own);
    if (st) return st;
    r->buf_rank = rank;
    r->buf_off = off;
    r->buf_len = span;
    memcpy(dst, r->buf, len);
    return SLM_OK;
}

// ---------------------------------------------------------------------------------------------
// The reader's source

static void src_files(void *impl, const slm_ckpt_src_file *f, int n) {
    for (int i = 0; i < n; i++)
        remote_expect(impl, f[i].rank, f[i].bytes);
}

static slm_status src_head(void *impl, const slm_ckpt_src_file *f) {
    return remote_head(impl, f->rank, f->name, f->path, f->bytes);
}

static slm_status src_read(void *impl, const slm_ckpt_src_file *f, int64_t off, size_t len,
                           int64_t want_end, uint8_t *dst) {
    return remote_read(impl, f->rank, f->name, off, len, want_end, dst);
}

static char *src_where(void *impl, const slm_ckpt_src_file *f) {
    return remote_where(impl, f->rank, f->name);
}

static void src_free(void *impl) {
    remote_free(impl);
}

static const slm_ckpt_source_ops k_s3_source = {.files = src_files,
                                                .head = src_head,
                                                .read = src_read,
                                                .hash = NULL, // verify reads every chunk
                                                .where = src_where,
                                                .free = src_free};

slm_status slm_ckpt_open_s3(const char *uri, slm_ckpt **out) {
    *out = NULL;
    slm_ckpt_remote *r = NULL;
    char *dir = NULL, *text = NULL;
    size_t len = 0;
    slm_status st = remote_resolve(uri, &r, &dir, &text, &len);
    if (st) return st;
    slm_ckpt *c = slm_ckpt_alloc(dir);
    free(dir);
    slm_ckpt_set_source(c, (slm_ckpt_source){.ops = &k_s3_source, .impl = r});
    st = slm_ckpt_parse_manifest(c, text, len); // tells the source every file's size
    free(text);
    if (st) {
        slm_ckpt_free(c);
        return st;
    }
    *out = c;
    return SLM_OK;
}
