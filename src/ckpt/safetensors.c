// Safetensors reading / writing and the Hugging Face LlamaForCausalLM bridge.
// Format: https://huggingface.co/docs/safetensors (and docs/formats.md "safetensors").
#include "ckpt/ckpt.h"
#include "base/json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20) // the reference implementation's limit, 100 MB

// --- Reading -----------------------------------------------------------------------------------

void slm_st_close(slm_st_file *f) {
    if (!f) return;
    if (f->owns_map) slm_map_free(&f->map);
    free(f->path);
    free(f->t);
    memset(f, 0, sizeof *f);
}

static int cmp_begin(const void *a, const void *b) {
    const slm_st_tensor *x = *(const slm_st_tensor *const *)a,
                        *y = *(const slm_st_tensor *const *)b;
    // (begin, end), as the reference implementation sorts: a zero-element tensor [b, b] sorts
    // before a tensor starting at b, so tensors tile the data whatever the JSON key order.
    if (x->begin != y->begin) return (x->begin > y->begin) - (x->begin < y->begin);
    return (x->end > y->end) - (x->end < y->end);
}

// "__metadata__": an object of strings (its values are not used).
static slm_status check_metadata(const char *name, const cJSON *e) {
    const cJSON *x;
    if (!cJSON_IsObject(e))
        return slm_fail(SLM_E_FORMAT, "%s: __metadata__ is not an object", name);
    cJSON_ArrayForEach(x, e) {
        if (!cJSON_IsString(x))
            return slm_fail(SLM_E_FORMAT, "%s: __metadata__.%s is not a string", name, x->string);
    }
    return SLM_OK;
}

// t->dtype from the header's dtype string d: F32, F16 or BF16; another safetensors dtype is
// SLM_E_UNSUPPORTED, anything else SLM_E_FORMAT.
static slm_status parse_dtype(const char *name, const char *d, slm_st_tensor *t) {
    if (!strcmp(d, "F32"))
        t->dtype = SLM_DTYPE_F32;
    else if (!strcmp(d, "F16"))
        t->dtype = SLM_DTYPE_F16;
    else if (!strcmp(d, "BF16"))
        t->dtype = SLM_DTYPE_BF16;
    else {
        static const char *known[] = {"F64", "I64", "I32",  "I16",     "I8",      "U64", "U32",
                                      "U16", "U8",  "BOOL", "F8_E4M3", "F8_E5M2", NULL};
        bool k = false;
        for (int i = 0; known[i]; i++)
            k |= !strcmp(d, known[i]);
        return slm_fail(k ? SLM_E_UNSUPPORTED : SLM_E_FORMAT,
                        "%s: tensor %s: dtype \"%.20s\" %s (expected F32, F16 or BF16)", name,
                        t->name, d, k ? "is not supported" : "is unknown");
    }
    return SLM_OK;
}

// t->ndim, t->shape and t->numel from the "shape" array: at most 4 whole numbers, the byte
// size representable.
static slm_status parse_shape(const char *name, const cJSON *shp, slm_st_tensor *t) {
    t->ndim = cJSON_GetArraySize(shp);
    if (t->ndim > 4)
        return slm_fail(SLM_E_UNSUPPORTED, "%s: tensor %s: %d dims (at most 4)", name, t->name,
                        t->ndim);
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        const cJSON *x = cJSON_GetArrayItem(shp, i);
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 1e15 ||
            x->valuedouble != floor(x->valuedouble))
            return slm_fail(SLM_E_FORMAT, "%s: tensor %s: bad shape entry %d", name, t->name, i);
        t->shape[i] = (int64_t)x->valuedouble;
        if (t->shape[i] && t->numel > INT64_MAX / 8 / t->shape[i])
            return slm_fail(SLM_E_FORMAT, "%s: tensor %s: shape too large", name, t->name);
        t->numel *= t->shape[i];
    }
    return SLM_OK;
}

// One tensor entry e of the header into *t: name, dtype, shape and data_offsets (inside the
// data_len bytes of data, spanning exactly numel elements of dtype).
static slm_status parse_tensor(const char *name, const cJSON *e, size_t data_len,
                               slm_st_tensor *t) {
    slm_status st;
    if (strlen(e->string) >= sizeof t->name || !cJSON_IsObject(e))
        return slm_fail(SLM_E_FORMAT, "%s: tensor \"%.60s\": name too long or entry not an object",
                        name, e->string);
    snprintf(t->name, sizeof t->name, "%s", e->string);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shp = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shp) || !cJSON_IsArray(off) ||
        cJSON_GetArraySize(off) != 2)
        return slm_fail(SLM_E_FORMAT, "%s: tensor %s: needs dtype, shape and data_offsets [2]",
                        name, t->name);
    const char *d = dt->valuestring;
    if ((st = parse_dtype(name, d, t)) || (st = parse_shape(name, shp, t))) return st;
    double b = cJSON_GetArrayItem(off, 0)->valuedouble,
           en = cJSON_GetArrayItem(off, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) ||
        !(b >= 0 && en >= b && en <= (double)data_len) || b != floor(b) || en != floor(en))
        return slm_fail(SLM_E_FORMAT,
                        "%s: tensor %s: data_offsets [%.0f, %.0f] outside the data (%zu bytes)",
                        name, t->name, b, en, data_len);
    t->begin = (size_t)b;
    t->end = (size_t)en;
    if ((uint64_t)(t->end - t->begin) != (uint64_t)t->numel * slm_dtype_bytes(t->dtype))
        return slm_fail(
            SLM_E_FORMAT, "%s: tensor %s: data_offsets span %zu bytes, shape x %s needs %" PRId64,
            name, t->name, t->end - t->begin, d, t->numel * (int64_t)slm_dtype_bytes(t->dtype));
    return SLM_OK;
}

// No overlaps and no holes: the tensors tile the data exactly (as the reference requires).
static slm_status check_tiling(const char *name, const slm_st_file *f, size_t data_len) {
    slm_status st = SLM_OK;
    const slm_st_tensor **order = slm_xcalloc((size_t)(f->n ? f->n : 1), sizeof *order);
    for (int i = 0; i < f->n; i++)
        order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    size_t pos = 0;
    for (int i = 0; i < f->n && !st; i++) {
        if (order[i]->begin < pos)
            st = slm_fail(SLM_E_FORMAT, "%s: tensor %s overlaps tensor %s (data_offsets)", name,
                          order[i]->name, order[i - 1]->name);
        else if (order[i]->begin > pos)
            st = slm_fail(SLM_E_FORMAT, "%s: hole in the data before tensor %s (byte %zu)", name,
                          order[i]->name, pos);
        pos = order[i]->end;
    }
    if (!st && pos != data_len)
        st = slm_fail(SLM_E_FORMAT, "%s: tensors cover %zu of %zu data bytes", name, pos, data_len);
    free(order);
    return st;
}

slm_status slm_st_parse(const uint8_t *data, size_t len, const char *name, slm_st_file *f) {
    memset(f, 0, sizeof *f);
    f->path = slm_xstrdup(name);
    f->map.data = data;
    f->map.len = len;
    if (len < 8)
        return slm_fail(SLM_E_FORMAT, "%s: %zu bytes, too short for a safetensors file", name, len);
    uint64_t n = slm_get_le64(data);
    if (n > len - 8)
        return slm_fail(SLM_E_FORMAT, "%s: header length %" PRIu64 " is beyond the file size %zu",
                        name, n, len);
    if (n > ST_MAX_HEADER)
        return slm_fail(SLM_E_FORMAT, "%s: header length %" PRIu64 " exceeds 100 MB", name, n);
    f->data_start = 8 + (size_t)n;
    size_t data_len = len - f->data_start;
    cJSON *o = cJSON_ParseWithLength((const char *)data + 8, (size_t)n);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return slm_fail(SLM_E_FORMAT, "%s: header is not a JSON object", name);
    }
    int cnt = cJSON_GetArraySize(o);
    f->t = slm_xcalloc((size_t)(cnt ? cnt : 1), sizeof *f->t);
    slm_status st = SLM_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, o) {
        if (!strcmp(e->string, "__metadata__"))
            st = check_metadata(name, e);
        else if (!(st = parse_tensor(name, e, data_len, &f->t[f->n])))
            f->n++;
        if (st) break;
    }
    if (!st) st = check_tiling(name, f, data_len);
    cJSON_Delete(o);
    return st;
}

slm_status slm_st_open(const char *path, slm_st_file *f) {
    memset(f, 0, sizeof *f);
    slm_map m;
    slm_status st = slm_map_file(path, &m);
    if (st) return st;
    st = slm_st_parse(m.data, m.len, path, f);
    f->owns_map = true;
    f->map = m;
    if (st) {
        slm_status keep = st;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", slm_errmsg());
        slm_st_close(f);
        slm_set_errmsg(msg);
        return keep;
    }
    return SLM_OK;
}

void slm_st_read_f32(const slm_st_file *f, const slm_st_tensor *t, float *out) {
    const uint8_t *p = f->map.data + f->data_start + t->begin;
    for (int64_t i = 0; i < t->numel; i++) {
        if (t->dtype == SLM_DTYPE_F32) {
            memcpy(&out[i], p + 4 * i, 4);
        } else {
            uint16_t h = slm_get_le16(p + 2 * i);
            out[i] = t->dtype == SLM_DTYPE_F16 ? slm_f16_to_f32_1(h) : slm_bf16_to_f32_1(h);
        }
    }
}

// --- Writing -----------------------------------------------------------------------------------

typedef struct st_item {
    const char *name;
    const slm_param_view *v;
    const float *data; // the unit's parameters, memory of the model's device
    int file;          // shard index
} st_item;

// Writes shard `file` of the items (their data on device `dev`, copied to the host piece by
// piece); pg counts the bytes of tensor data written (*written).
static slm_status write_st_file(slm_device *dev, const char *path, const st_item *items, int n,
                                int file, slm_dtype dt, slm_progress *pg, double *written) {
    cJSON *h = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(md, "format", "pt");
    size_t off = 0, es = slm_dtype_bytes(dt);
    for (int i = 0; i < n; i++) {
        if (items[i].file != file) continue;
        cJSON *t = cJSON_AddObjectToObject(h, items[i].name);
        cJSON_AddStringToObject(t, "dtype", slm_dtype_st_name(dt));
        cJSON *s = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < items[i].v->ndim; d++)
            cJSON_AddItemToArray(s, cJSON_CreateNumber((double)items[i].v->shape[d]));
        cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
        size_t nb = (size_t)items[i].v->numel * es;
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t jl = strlen(js), padded = (jl + 7) / 8 * 8;
    slm_buf hdr = {0};
    uint8_t n64[8];
    slm_put_le64(n64, padded);
    slm_buf_append(&hdr, n64, 8);
    slm_buf_append(&hdr, js, jl);
    for (size_t i = jl; i < padded; i++)
        slm_buf_append(&hdr, " ", 1);
    free(js);

    char *tmp = NULL;
    size_t tl = strlen(path) + 16;
    tmp = slm_xmalloc(tl);
    snprintf(tmp, tl, "%s.tmp", path);
    slm_status st = SLM_OK;
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        st = slm_fail(SLM_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    bool ok = fwrite(hdr.data, 1, hdr.len, fp) == hdr.len;
    size_t cap = 1 << 16;
    uint8_t *buf = slm_xmalloc(cap * 4);
    float *host = slm_dev_host_alloc(dev, cap * sizeof(float)); // device -> host staging
    for (int i = 0; ok && i < n; i++) {
        if (items[i].file != file) continue;
        const float *src = items[i].data + items[i].v->offset;
        for (int64_t b = 0; ok && b < items[i].v->numel; b += (int64_t)cap) {
            size_t k = (size_t)(items[i].v->numel - b < (int64_t)cap ? items[i].v->numel - b
                                                                     : (int64_t)cap);
            slm_dev_copy(dev, host, src + b, k * sizeof(float), SLM_D2H);
            for (size_t j = 0; j < k; j++) {
                float x = host[j];
                if (dt == SLM_DTYPE_F32)
                    memcpy(buf + 4 * j, &x, 4);
                else {
                    uint16_t hv = dt == SLM_DTYPE_F16 ? slm_f32_to_f16_1(x) : slm_f32_to_bf16_1(x);
                    slm_put_le16(buf + 2 * j, hv);
                }
            }
            ok = fwrite(buf, es, k, fp) == k;
            *written += (double)(k * es);
            slm_progress_update(pg, *written, "%.0f of %.0f MB", *written / 1e6, pg->total / 1e6);
        }
    }
    free(buf);
    slm_dev_host_free(dev, host);
    if (ok) ok = fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    int err = errno;
    if (fclose(fp) != 0) ok = false;
    if (!ok) {
        st = slm_fail(SLM_E_IO, "%s: write failed: %s", tmp, strerror(err));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        st = slm_fail(SLM_E_IO, "rename %s -> %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
    }
out:
    free(tmp);
    slm_buf_free(&hdr);
    return st;
}

// A float as the shortest decimal that reads back to it ("0.05", not "0.050000000745").
static void add_short_float(cJSON *o, const char *name, float v) {
    char buf[48];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    cJSON_AddItemToObject(o, name, cJSON_CreateRaw(buf));
}

slm_status slm_peft_export(const slm_llama *m, const char *base_ref, const char *out_dir,
                           slm_dtype dtype) {
    if (m->lora.rank < 1)
        return slm_fail(SLM_E_ARG, "export: the model has no LoRA adapters to export");
    slm_status st = slm_mkdir_p(out_dir);
    if (st) return st;
    int L = m->cfg.num_hidden_layers, n = 0;
    for (int l = 0; l < L; l++)
        n += m->lora_units[l].n_views;
    st_item *items = slm_xcalloc((size_t)n, sizeof *items);
    char(*names)[128] = slm_xcalloc((size_t)n, sizeof *names);
    int k = 0;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < m->lora_units[l].n_views; i++, k++) {
            const slm_param_view *v = &m->lora_units[l].views[i];
            snprintf(names[k], sizeof names[k], "base_model.model.%s", v->name); // PEFT's keys
            items[k] = (st_item){names[k], v, m->lora_params[l], 0};
        }
    char *p = slm_path_join(out_dir, "adapter_model.safetensors");
    slm_progress pg; // adapters are small: the progress line shows only for slow disks
    double written = 0, total = 0;
    for (int i = 0; i < n; i++)
        total += (double)items[i].v->numel * (double)slm_dtype_bytes(dtype);
    slm_progress_begin(&pg, "ckpt export", 0, total);
    st = write_st_file(m->dev, p, items, n, 0, dtype, &pg, &written);
    if (st)
        slm_progress_abandon(&pg);
    else
        slm_progress_end(&pg, written, "%.0f MB of adapters", written / 1e6);
    free(p);
    free(items);
    free(names);
    if (st) return st;
    // adapter_config.json: peft.LoraConfig's fields (a plain LoRA: no bias, DoRA, rsLoRA or
    // per-layer patterns)
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "base_model_name_or_path", base_ref ? base_ref : "");
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM");
    cJSON_AddNumberToObject(o, "r", m->lora.rank);
    add_short_float(o, "lora_alpha", m->lora.alpha);
    add_short_float(o, "lora_dropout", m->lora.dropout);
    cJSON *tm = cJSON_AddArrayToObject(o, "target_modules");
    for (int t = 0; t < SLM_LORA_N_TARGETS; t++)
        if (m->lora.targets & (1u << t))
            cJSON_AddItemToArray(tm, cJSON_CreateString(slm_lora_target_name(t)));
    cJSON_AddStringToObject(o, "bias", "none");
    cJSON_AddBoolToObject(o, "fan_in_fan_out", false);
    cJSON_AddBoolToObject(o, "inference_mode", true);
    cJSON_AddBoolToObject(o, "init_lora_weights", true);
    cJSON_AddBoolToObject(o, "use_rslora", false);
    cJSON_AddBoolToObject(o, "use_dora", false);
    cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddNullToObject(o, "layers_to_transform");
    cJSON_AddNullToObject(o, "layers_pattern");
    cJSON_AddObjectToObject(o, "rank_pattern");
    cJSON_AddObjectToObject(o, "alpha_pattern");
    cJSON_AddNullToObject(o, "revision");
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    p = slm_path_join(out_dir, "adapter_config.json");
    st = slm_file_write_atomic(p, txt, strlen(txt));
    free(p);
    free(txt);
    return st;
}

slm_status slm_hf_export(const slm_llama *m, const char *out_dir, slm_dtype dtype,
                         size_t max_shard_bytes) {
    slm_status st = slm_mkdir_p(out_dir);
    if (st) return st;
    int n = 0;
    for (int u = 0; u < m->n_units; u++)
        n += m->units[u].n_views;
    st_item *items = slm_xcalloc((size_t)n, sizeof *items);
    // HF order: the embedding first, then the blocks, then norm and lm_head (the root is last
    // among units but its embedding goes first).
    int k = 0, L = m->n_units - 1;
    const slm_unit_layout *root = &m->units[L];
    for (int i = 0; i < root->n_views; i++)
        if (!strcmp(root->views[i].name, "model.embed_tokens.weight"))
            items[k++] = (st_item){root->views[i].name, &root->views[i], m->params[L], 0};
    for (int u = 0; u < m->n_units; u++)
        for (int i = 0; i < m->units[u].n_views; i++) {
            const slm_param_view *v = &m->units[u].views[i];
            if (u == L && !strcmp(v->name, "model.embed_tokens.weight")) continue;
            items[k++] = (st_item){v->name, v, m->params[u], 0};
        }
    size_t es = slm_dtype_bytes(dtype), cur = 0, total = 0;
    int n_files = 1;
    for (int i = 0; i < n; i++) {
        size_t nb = (size_t)items[i].v->numel * es;
        if (max_shard_bytes && cur > 0 && cur + nb > max_shard_bytes) {
            n_files++;
            cur = 0;
        }
        items[i].file = n_files - 1;
        cur += nb;
        total += nb;
    }
    char name[96];
    slm_progress pg;
    double written = 0;
    slm_progress_begin(&pg, "ckpt export", 0, (double)total);
    for (int f = 0; f < n_files && !st; f++) {
        if (n_files == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", f + 1, n_files);
        char *p = slm_path_join(out_dir, name);
        st = write_st_file(m->dev, p, items, n, f, dtype, &pg, &written);
        free(p);
    }
    if (st)
        slm_progress_abandon(&pg);
    else
        slm_progress_end(&pg, written, "%.0f MB in %d file%s", written / 1e6, n_files,
                         n_files == 1 ? "" : "s");
    if (!st && n_files > 1) {
        cJSON *o = cJSON_CreateObject();
        cJSON *md = cJSON_AddObjectToObject(o, "metadata");
        cJSON_AddNumberToObject(md, "total_size", (double)total);
        cJSON *wm = cJSON_AddObjectToObject(o, "weight_map");
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", items[i].file + 1,
                     n_files);
            cJSON_AddStringToObject(wm, items[i].name, name);
        }
        char *txt = cJSON_Print(o);
        cJSON_Delete(o);
        char *p = slm_path_join(out_dir, "model.safetensors.index.json");
        st = slm_file_write_atomic(p, txt, strlen(txt));
        free(p);
        free(txt);
    }
    if (!st) {
        // config.json names the dtype the tensors were written in (transformers loads with it)
        cJSON *o = cJSON_CreateObject();
        slm_llama_config_to_json(&m->cfg, true, o);
        cJSON_ReplaceItemInObject(o, "torch_dtype",
                                  cJSON_CreateString(dtype == SLM_DTYPE_BF16  ? "bfloat16"
                                                     : dtype == SLM_DTYPE_F16 ? "float16"
                                                                              : "float32"));
        char *p = slm_path_join(out_dir, "config.json");
        st = slm_json_write_file(p, o);
        free(p);
        cJSON_Delete(o);
    }
    if (!st) st = slm_fsync_dir(out_dir);
    free(items);
    return st;
}

// The weight files an HF directory names (defined below, with the shape checks).
static slm_status hf_weight_files(const char *dir, char ***files_out, int *n_out);

// --- Loading -----------------------------------------------------------------------------------

static bool cfg_close(float a, float b) {
    return fabsf(a - b) <= 1e-6f * fabsf(b);
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

// config.json of the directory (cp) must describe the model m was built with.
static slm_status check_hf_config(const char *cp, const slm_llama *m) {
    slm_llama_config cfg;
    slm_status st = slm_llama_config_load(cp, &cfg);
    if (st) return st;
    const slm_llama_config *a = &cfg, *b = &m->cfg;
    if (a->vocab_size != b->vocab_size || a->hidden_size != b->hidden_size ||
        a->intermediate_size != b->intermediate_size ||
        a->num_hidden_layers != b->num_hidden_layers ||
        a->num_attention_heads != b->num_attention_heads ||
        a->num_key_value_heads != b->num_key_value_heads ||
        a->tie_word_embeddings != b->tie_word_embeddings ||
        slm_llama_head_dim(a) != slm_llama_head_dim(b) ||
        !cfg_close(a->rms_norm_eps, b->rms_norm_eps) || !cfg_close(a->rope_theta, b->rope_theta) ||
        !slm_llama_rope_same(a, b))
        st = slm_fail(SLM_E_ARG,
                      "%s: config (V=%d C=%d F=%d L=%d H=%d KV=%d tie=%d, or its head dim, "
                      "rms eps / RoPE settings) differs from the model's (V=%d C=%d F=%d L=%d H=%d "
                      "KV=%d tie=%d)",
                      cp, a->vocab_size, a->hidden_size, a->intermediate_size, a->num_hidden_layers,
                      a->num_attention_heads, a->num_key_value_heads, a->tie_word_embeddings,
                      b->vocab_size, b->hidden_size, b->intermediate_size, b->num_hidden_layers,
                      b->num_attention_heads, b->num_key_value_heads, b->tie_word_embeddings);
    return st;
}

// What slm_hf_load has read so far.
typedef struct hf_load {
    slm_llama *m;
    bool *seen; // [view index over all units]: loaded
    // With tied embeddings an lm_head.weight in the files must equal the embedding (a copy, as
    // some exporters write); one that differs is refused (transformers would silently drop it).
    float *lm_head;
    char *lm_head_file;
    float *host; // [cap] host staging of one tensor on its way to the model's device
    int64_t cap;
} hf_load;

// A tied model's lm_head.weight (tensor t of file f, path p): kept to compare with the embedding.
static slm_status read_tied_lm_head(hf_load *L, const slm_st_file *f, const slm_st_tensor *t,
                                    const char *p) {
    int64_t V = L->m->cfg.vocab_size, C = L->m->cfg.hidden_size;
    if (L->lm_head || t->ndim != 2 || t->shape[0] != V || t->shape[1] != C)
        return slm_fail(SLM_E_FORMAT,
                        "%s: tensor lm_head.weight %s (tie_word_embeddings is true: "
                        "expected at most one copy of the embedding, [%" PRId64 ", %" PRId64 "])",
                        p, L->lm_head ? "appears twice" : "has the wrong shape", V, C);
    L->lm_head = slm_xmalloc((size_t)(V * C) * sizeof(float));
    slm_st_read_f32(f, t, L->lm_head);
    L->lm_head_file = slm_xstrdup(p);
    return SLM_OK;
}

// L->host with room for n floats (one tensor at a time: host memory grows to the largest).
static float *host_stage(hf_load *L, int64_t n) {
    if (L->cap < n) {
        slm_dev_host_free(L->m->dev, L->host);
        L->host = slm_dev_host_alloc(L->m->dev, (size_t)n * sizeof(float));
        L->cap = n;
    }
    return L->host;
}

// Tensor t of file f (path p) into the model parameter of its name (through host staging, then
// to the model's device): once, of the parameter's shape, finite.
static slm_status read_param(hf_load *L, const slm_st_file *f, const slm_st_tensor *t,
                             const char *p) {
    slm_llama *m = L->m;
    int unit;
    const slm_param_view *v = slm_llama_find(m, t->name, &unit);
    if (!v)
        return slm_fail(SLM_E_FORMAT, "%s: unexpected tensor %s (not a parameter of this model)", p,
                        t->name);
    int base = 0;
    for (int u = 0; u < unit; u++)
        base += m->units[u].n_views;
    int idx = base + (int)(v - m->units[unit].views);
    if (L->seen[idx]) return slm_fail(SLM_E_FORMAT, "%s: tensor %s appears twice", p, t->name);
    bool shape_ok = t->ndim == v->ndim && t->shape[0] == v->shape[0] &&
                    (v->ndim < 2 || t->shape[1] == v->shape[1]);
    if (!shape_ok)
        return slm_fail(SLM_E_FORMAT,
                        "%s: tensor %s has shape [%" PRId64 "%s%" PRId64 "] (%d dims), "
                        "expected [%" PRId64 "%s%" PRId64 "]",
                        p, t->name, t->ndim > 0 ? t->shape[0] : 0, t->ndim > 1 ? ", " : "",
                        t->ndim > 1 ? t->shape[1] : 0, t->ndim, v->shape[0],
                        v->ndim > 1 ? ", " : "", v->ndim > 1 ? v->shape[1] : 0);
    slm_st_read_f32(f, t, host_stage(L, v->numel));
    slm_status st =
        slm_check_finite(&m->units[unit], unit, v->offset, L->host, v->numel, "weights", p);
    if (st) return st;
    slm_dev_copy(m->dev, m->params[unit] + v->offset, L->host, (size_t)v->numel * sizeof(float),
                 SLM_H2D);
    L->seen[idx] = true;
    return SLM_OK;
}

// Every tensor of the weight file p.
static slm_status read_weight_file(hf_load *L, const char *p) {
    slm_st_file f;
    slm_status st = slm_st_open(p, &f);
    for (int i = 0; !st && i < f.n; i++) {
        const slm_st_tensor *t = &f.t[i];
        if (ends_with(t->name, "rotary_emb.inv_freq")) continue; // a buffer, not a weight
        if (L->m->cfg.tie_word_embeddings && !strcmp(t->name, "lm_head.weight"))
            st = read_tied_lm_head(L, &f, t, p);
        else
            st = read_param(L, &f, t, p);
    }
    slm_st_close(&f);
    return st;
}

// After every file: no parameter missing, and a tied lm_head.weight equal to the embedding.
static slm_status check_complete(hf_load *L, const char *dir) {
    const slm_llama *m = L->m;
    for (int u = 0, idx = 0; u < m->n_units; u++)
        for (int i = 0; i < m->units[u].n_views; i++, idx++)
            if (!L->seen[idx])
                return slm_fail(SLM_E_FORMAT, "%s: tensor %s missing", dir,
                                m->units[u].views[i].name);
    if (!L->lm_head) return SLM_OK;
    const slm_param_view *emb = slm_llama_find(m, "model.embed_tokens.weight", NULL);
    const float *e = host_stage(L, emb->numel); // the embedding as loaded, back from the device
    slm_dev_copy(m->dev, L->host, m->params[m->n_units - 1] + emb->offset,
                 (size_t)emb->numel * sizeof(float), SLM_D2H);
    for (int64_t i = 0; i < emb->numel; i++)
        if (memcmp(&L->lm_head[i], &e[i], sizeof(float)) != 0)
            return slm_fail(SLM_E_FORMAT,
                            "%s: tensor lm_head.weight differs from model.embed_tokens.weight "
                            "(first at element %" PRId64 ": %g vs %g) but %s/config.json has "
                            "tie_word_embeddings true, which uses the embedding as lm_head; "
                            "HINT: set tie_word_embeddings to false to use this lm_head, or "
                            "remove lm_head.weight to tie",
                            L->lm_head_file, i, (double)L->lm_head[i], (double)e[i], dir);
    return SLM_OK;
}

slm_status slm_hf_load(slm_llama *m, const char *dir) {
    char *cp = slm_path_join(dir, "config.json");
    slm_status st = check_hf_config(cp, m);
    free(cp);
    if (st) return st;
    // The file list: the index's weight_map values, or model.safetensors.
    int n_files = 0;
    char **files = NULL;
    st = hf_weight_files(dir, &files, &n_files);
    int total = 0;
    for (int u = 0; u < m->n_units; u++)
        total += m->units[u].n_views;
    hf_load L = {.m = m, .seen = slm_xcalloc((size_t)total + 1, 1)};
    for (int fi = 0; fi < n_files && !st; fi++) {
        char *p = slm_path_join(dir, files[fi]);
        st = read_weight_file(&L, p);
        free(p);
    }
    if (!st) st = check_complete(&L, dir);
    free(L.lm_head);
    free(L.lm_head_file);
    slm_dev_host_free(m->dev, L.host);
    for (int i = 0; i < n_files; i++)
        free(files[i]);
    free(files);
    free(L.seen);
    return st;
}

// The weight files an HF directory names: the index's weight_map values (deduplicated), or
// model.safetensors. *files owned by the caller (free each, then the array).
static slm_status hf_weight_files(const char *dir, char ***files_out, int *n_out) {
    int n_files = 0;
    char **files = NULL;
    slm_status st = SLM_OK;
    char *ip = slm_path_join(dir, "model.safetensors.index.json");
    if (slm_is_file(ip)) {
        char *txt = NULL;
        size_t len = 0;
        st = slm_file_read_all(ip, &txt, &len);
        cJSON *o = st ? NULL : cJSON_ParseWithLength(txt, len);
        free(txt);
        const cJSON *wm = o ? cJSON_GetObjectItemCaseSensitive(o, "weight_map") : NULL;
        if (!st && !cJSON_IsObject(wm))
            st = slm_fail(SLM_E_FORMAT, "%s: no \"weight_map\" object", ip);
        const cJSON *e;
        if (!st) cJSON_ArrayForEach(e, wm) {
                if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
                    st = slm_fail(SLM_E_FORMAT, "%s: weight_map[%s] is not a file name", ip,
                                  e->string);
                    break;
                }
                bool seen = false;
                for (int i = 0; i < n_files; i++)
                    seen |= !strcmp(files[i], e->valuestring);
                if (seen) continue;
                files = slm_xrealloc(files, (size_t)(n_files + 1) * sizeof *files);
                files[n_files++] = slm_xstrdup(e->valuestring);
            }
        cJSON_Delete(o);
    } else {
        files = slm_xmalloc(sizeof *files);
        files[n_files++] = slm_xstrdup("model.safetensors");
    }
    free(ip);
    *files_out = files;
    *n_out = n_files;
    return st;
}

slm_status slm_hf_check_shapes(const char *dir, const slm_llama_config *cfg) {
    // config.json's shape fields first (the friendlier message when the configs differ).
    char *cp = slm_path_join(dir, "config.json");
    slm_llama_config hc;
    slm_status st = slm_llama_config_load(cp, &hc);
    if (!st && (hc.vocab_size != cfg->vocab_size || hc.hidden_size != cfg->hidden_size ||
                hc.intermediate_size != cfg->intermediate_size ||
                hc.num_hidden_layers != cfg->num_hidden_layers ||
                hc.num_attention_heads != cfg->num_attention_heads ||
                hc.num_key_value_heads != cfg->num_key_value_heads ||
                slm_llama_head_dim(&hc) != slm_llama_head_dim(cfg) ||
                hc.tie_word_embeddings != cfg->tie_word_embeddings))
        st = slm_fail(SLM_E_ARG,
                      "%s: config (V=%d C=%d F=%d L=%d H=%d KV=%d tie=%d, or its head dim) "
                      "differs from the model's (V=%d C=%d F=%d L=%d H=%d KV=%d tie=%d)",
                      cp, hc.vocab_size, hc.hidden_size, hc.intermediate_size, hc.num_hidden_layers,
                      hc.num_attention_heads, hc.num_key_value_heads, hc.tie_word_embeddings,
                      cfg->vocab_size, cfg->hidden_size, cfg->intermediate_size,
                      cfg->num_hidden_layers, cfg->num_attention_heads, cfg->num_key_value_heads,
                      cfg->tie_word_embeddings);
    free(cp);
    if (st) return st;
    slm_llama lay; // the layout only: no parameter buffers
    if ((st = slm_llama_init(&lay, cfg, false))) return st;
    char **files = NULL;
    int n_files = 0;
    st = hf_weight_files(dir, &files, &n_files);
    int total = 0;
    for (int u = 0; u < lay.n_units; u++)
        total += lay.units[u].n_views;
    bool *seen = slm_xcalloc((size_t)total + 1, 1);
    for (int fi = 0; fi < n_files && !st; fi++) {
        char *p = slm_path_join(dir, files[fi]);
        slm_st_file f;
        st = slm_st_open(p, &f); // maps the file and parses its header; reads no tensor data
        for (int i = 0; !st && i < f.n; i++) {
            const slm_st_tensor *t = &f.t[i];
            if (ends_with(t->name, "rotary_emb.inv_freq")) continue;
            if (cfg->tie_word_embeddings && !strcmp(t->name, "lm_head.weight")) continue;
            int unit;
            const slm_param_view *v = slm_llama_find(&lay, t->name, &unit);
            if (!v) {
                st = slm_fail(SLM_E_FORMAT,
                              "%s: unexpected tensor %s (not a parameter of this model)", p,
                              t->name);
                break;
            }
            int idx = 0;
            for (int u = 0; u < unit; u++)
                idx += lay.units[u].n_views;
            idx += (int)(v - lay.units[unit].views);
            bool shape_ok = t->ndim == v->ndim && t->shape[0] == v->shape[0] &&
                            (v->ndim < 2 || t->shape[1] == v->shape[1]);
            if (!shape_ok) {
                st = slm_fail(SLM_E_FORMAT,
                              "%s: tensor %s has shape [%" PRId64 "%s%" PRId64 "] (%d dims), "
                              "but the config asks for [%" PRId64 "%s%" PRId64 "]",
                              p, t->name, t->ndim > 0 ? t->shape[0] : 0, t->ndim > 1 ? ", " : "",
                              t->ndim > 1 ? t->shape[1] : 0, t->ndim, v->shape[0],
                              v->ndim > 1 ? ", " : "", v->ndim > 1 ? v->shape[1] : 0);
                break;
            }
            seen[idx] = true;
        }
        slm_st_close(&f); // safe after a failed open (zeroed)
        free(p);
    }
    for (int u = 0, idx = 0; !st && u < lay.n_units; u++)
        for (int i = 0; i < lay.units[u].n_views; i++, idx++)
            if (!seen[idx]) {
                st = slm_fail(SLM_E_FORMAT, "%s: tensor %s missing (the config asks for it)", dir,
                              lay.units[u].views[i].name);
                break;
            }
    for (int i = 0; i < n_files; i++)
        free(files[i]);
    free(files);
    free(seen);
    slm_llama_free(&lay);
    return st;
}
