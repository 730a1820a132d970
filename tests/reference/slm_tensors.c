// .slt tensor files (see slm_tensors.h and tests/reference/llama_ref.py).
#include "slm_tensors.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char k_magic[8] = {'S', 'L', 'M', 'T', 'N', 'S', '1', '\n'};
static const char *k_dtype_names[] = {"f32", "i32", "f64"};
static const size_t k_dtype_size[] = {4, 4, 8};

static size_t align64(size_t n) {
    return (n + 63) / 64 * 64;
}

void slm_tset_add(slm_tensor_set *s, const char *name, slm_tdtype dtype, int ndim,
                  const int64_t *shape, const void *data) {
    SLM_ASSERT(ndim >= 0 && ndim <= 4);
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->t = slm_xrealloc(s->t, (size_t)s->cap * sizeof *s->t);
    }
    slm_tensor *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    t->name = slm_xstrdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->numel *= shape[i];
    }
    size_t bytes = (size_t)t->numel * k_dtype_size[dtype];
    t->data = slm_xmalloc(bytes ? bytes : 1);
    if (bytes) memcpy(t->data, data, bytes);
}

void slm_tset_set_meta(slm_tensor_set *s, const char *json) {
    free(s->meta_json);
    s->meta_json = json ? slm_xstrdup(json) : NULL;
}

const slm_tensor *slm_tset_get(const slm_tensor_set *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0) return &s->t[i];
    return NULL;
}

void slm_tset_free(slm_tensor_set *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->t[i].name);
        free(s->t[i].data);
    }
    free(s->t);
    free(s->meta_json);
    memset(s, 0, sizeof *s);
}

slm_status slm_tset_save(const slm_tensor_set *s, const char *path) {
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(root, "tensors");
    size_t off = 0, end = 0; // end: bytes up to the last tensor's last byte (no tail padding)
    size_t *offs = slm_xcalloc((size_t)s->n + 1, sizeof *offs);
    for (int i = 0; i < s->n; i++) {
        const slm_tensor *t = &s->t[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", t->name);
        cJSON_AddStringToObject(e, "dtype", k_dtype_names[t->dtype]);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddNumberToObject(e, "offset", (double)off);
        cJSON_AddItemToArray(arr, e);
        offs[i] = off;
        end = off + (size_t)t->numel * k_dtype_size[t->dtype];
        off = align64(end);
    }
    cJSON_AddItemToObject(root, "meta", cJSON_CreateRaw(s->meta_json ? s->meta_json : "{}"));
    char *hdr = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t h = strlen(hdr);
    size_t data_start = align64(16 + h);
    size_t total = data_start + end;
    uint8_t *buf = slm_xcalloc(total, 1);
    memcpy(buf, k_magic, 8);
    uint64_t hl = h;
    for (int i = 0; i < 8; i++)
        buf[8 + i] = (uint8_t)(hl >> (8 * i)); // little-endian
    memcpy(buf + 16, hdr, h);
    cJSON_free(hdr);
    for (int i = 0; i < s->n; i++)
        memcpy(buf + data_start + offs[i], s->t[i].data,
               (size_t)s->t[i].numel * k_dtype_size[s->t[i].dtype]);
    free(offs);
    slm_status st = slm_file_write_atomic(path, buf, total);
    free(buf);
    return st;
}

slm_status slm_tset_load(slm_tensor_set *s, const char *path) {
    char *raw = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &raw, &len);
    if (st) return st;
    cJSON *root = NULL;
    if (len < 16 || memcmp(raw, k_magic, 8) != 0) {
        st = slm_fail(SLM_E_FORMAT, "%s: not a .slt tensor file (bad magic)", path);
        goto out;
    }
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h |= (uint64_t)(uint8_t)raw[8 + i] << (8 * i);
    if (h > len - 16) {
        st = slm_fail(SLM_E_FORMAT, "%s: header length %llu exceeds the file (%zu bytes)", path,
                      (unsigned long long)h, len);
        goto out;
    }
    size_t data_start = align64(16 + (size_t)h);
    root = cJSON_ParseWithLength(raw + 16, (size_t)h);
    const cJSON *arr = root ? cJSON_GetObjectItemCaseSensitive(root, "tensors") : NULL;
    if (!cJSON_IsArray(arr)) {
        st = slm_fail(SLM_E_FORMAT, "%s: header is not JSON with a \"tensors\" array", path);
        goto out;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "offset");
        if (!cJSON_IsString(nm) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) ||
            !cJSON_IsNumber(of) || cJSON_GetArraySize(sh) > 4) {
            st = slm_fail(SLM_E_FORMAT, "%s: malformed tensor entry", path);
            goto out;
        }
        int dtype = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(dt->valuestring, k_dtype_names[i]) == 0) dtype = i;
        if (dtype < 0) {
            st = slm_fail(SLM_E_FORMAT, "%s: tensor %s: unknown dtype \"%s\"", path,
                          nm->valuestring, dt->valuestring);
            goto out;
        }
        int64_t shape[4] = {0};
        int nd = 0;
        int64_t numel = 1;
        const cJSON *d;
        cJSON_ArrayForEach(d, sh) {
            if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e15) {
                st = slm_fail(SLM_E_FORMAT, "%s: tensor %s: bad shape", path, nm->valuestring);
                goto out;
            }
            shape[nd++] = (int64_t)d->valuedouble;
            numel *= shape[nd - 1];
        }
        size_t bytes = (size_t)numel * k_dtype_size[dtype];
        double o = of->valuedouble;
        if (o < 0 || o > (double)len || data_start + (size_t)o + bytes > len) {
            st = slm_fail(SLM_E_FORMAT, "%s: tensor %s runs past the end of the file", path,
                          nm->valuestring);
            goto out;
        }
        slm_tset_add(s, nm->valuestring, (slm_tdtype)dtype, nd, shape,
                     raw + data_start + (size_t)o);
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    if (meta) {
        char *mt = cJSON_PrintUnformatted(meta);
        slm_tset_set_meta(s, mt);
        cJSON_free(mt);
    }
out:
    cJSON_Delete(root);
    free(raw);
    if (st) slm_tset_free(s);
    return st;
}
