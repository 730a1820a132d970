// Dataset manifest (manifest.json): reading, validating and writing. Format: docs/formats.md
// "Dataset manifest". Integers are JSON numbers (all below 2^53, so doubles hold them exactly);
// 64-bit hashes are 16-digit lowercase hex strings.
#include "data/data.h"

#include "base/json.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void slm_dataset_free(slm_dataset *ds) {
    if (!ds) return;
    slm_split_info *sp[2] = {&ds->train, &ds->val};
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < sp[s]->n_shards; i++)
            free(sp[s]->shards[i].file);
        free(sp[s]->shards);
    }
    free(ds->dir);
    free(ds->tokenizer_file);
    free(ds->tokenizer_type);
    free(ds->sample_format);
    free(ds->chat_template);
    memset(ds, 0, sizeof *ds);
}

// A file name inside the dataset directory: no path separators, no "..", printable ASCII.
static bool safe_name(const char *s) {
    if (!s || !*s || !strcmp(s, ".") || !strcmp(s, "..") || strlen(s) > 255) return false;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '/' || c == '\\' || c < 0x20 || c >= 0x7f) return false;
    }
    return true;
}

// The optional "samples" object of a version-2 manifest: the sample format and chat template.
static slm_status parse_samples(const char *what, const cJSON *samples, slm_dataset *ds) {
    slm_status st;
    char w[96];
    snprintf(w, sizeof w, "%s: samples", what);
    const char *sf = NULL;
    if (!cJSON_IsObject(samples)) return slm_fail(SLM_E_FORMAT, "%s: not an object", w);
    if ((st = slm_json_str(w, samples, "format", &sf))) return st;
    if (strcmp(sf, "prompt-completion") && strcmp(sf, "chat"))
        return slm_fail(SLM_E_FORMAT,
                        "%s: format \"%.40s\", expected \"prompt-completion\" or \"chat\"", w, sf);
    ds->sample_format = slm_xstrdup(sf);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(samples, "chat_template");
    if (ct && !cJSON_IsNull(ct)) {
        if (!cJSON_IsString(ct) || !ct->valuestring)
            return slm_fail(SLM_E_FORMAT, "%s: chat_template is not a string or null", w);
        ds->chat_template = slm_xstrdup(ct->valuestring);
    }
    return SLM_OK;
}

// The top-level scalars: format, format_version (and "samples" with it), seed, val_fraction,
// token_bytes.
static slm_status parse_header(const char *what, const cJSON *root, slm_dataset *ds) {
    slm_status st;
    double d = 0;
    const char *fmt = NULL;
    if ((st = slm_json_str(what, root, "format", &fmt))) return st;
    if (strcmp(fmt, "shardlm-dataset") != 0)
        return slm_fail(SLM_E_FORMAT, "%s: \"format\" is \"%.40s\", expected \"shardlm-dataset\"",
                        what, fmt);
    if ((st = slm_json_num(what, root, "format_version", 1, 2, true, &d))) return st;
    // Version 2: instruction samples with a per-token loss mask (version-2 shards).
    ds->masked = d == 2;
    const cJSON *samples = cJSON_GetObjectItemCaseSensitive(root, "samples");
    if (ds->masked != (samples != NULL))
        return slm_fail(SLM_E_FORMAT, "%s: format_version %.0f %s a \"samples\" object", what, d,
                        ds->masked ? "needs" : "does not allow");
    if (samples && (st = parse_samples(what, samples, ds))) return st;
    if ((st = slm_json_u64(what, root, "seed", &ds->seed))) return st;
    if ((st = slm_json_num(what, root, "val_fraction", 0, 1, false, &ds->val_fraction))) return st;
    if ((st = slm_json_num(what, root, "token_bytes", 2, 4, true, &d))) return st;
    ds->token_bytes = (uint32_t)d;
    if (ds->token_bytes == 3)
        return slm_fail(SLM_E_FORMAT, "%s: \"token_bytes\" is 3, expected 2 or 4", what);
    return SLM_OK;
}

// The "tokenizer" object; needs ds->token_bytes (checked against the vocabulary size).
static slm_status parse_tokenizer(const char *what, const cJSON *root, slm_dataset *ds) {
    slm_status st;
    double d = 0;
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    if (!cJSON_IsObject(tok))
        return slm_fail(SLM_E_FORMAT, "%s: missing object field \"tokenizer\"", what);
    const char *tfile = NULL, *ttype = NULL;
    if ((st = slm_json_str(what, tok, "file", &tfile))) return st;
    if (!safe_name(tfile))
        return slm_fail(SLM_E_FORMAT, "%s: tokenizer.file \"%.60s\" is not a plain file name", what,
                        tfile);
    if ((st = slm_json_str(what, tok, "type", &ttype))) return st;
    if ((st = slm_json_hex64(what, tok, "xxh64", &ds->tokenizer_xxh64))) return st;
    if ((st = slm_json_num(what, tok, "vocab_size", 1, 4294967295.0, true, &d))) return st;
    if (d > INT32_MAX)
        return slm_fail(SLM_E_FORMAT, "%s: tokenizer.vocab_size %.0f exceeds int32", what, d);
    ds->vocab_size = (int32_t)d;
    if ((st = slm_json_num(what, tok, "bos_id", -1, ds->vocab_size - 1, true, &d))) return st;
    ds->bos_id = (int32_t)d;
    if ((st = slm_json_num(what, tok, "eos_id", -1, ds->vocab_size - 1, true, &d))) return st;
    ds->eos_id = (int32_t)d;
    uint32_t want_tb = (uint32_t)ds->vocab_size <= 65536u ? 2u : 4u;
    if (ds->token_bytes != want_tb)
        return slm_fail(SLM_E_FORMAT,
                        "%s: token_bytes %" PRIu32 " but vocab_size %" PRId32 " needs %" PRIu32,
                        what, ds->token_bytes, ds->vocab_size, want_tb);
    ds->tokenizer_file = slm_path_join(ds->dir, tfile);
    ds->tokenizer_type = slm_xstrdup(ttype);
    return SLM_OK;
}

// One entry of "shards" (w names it): appended to its split, whose totals it adds to.
static slm_status parse_shard(const char *w, const cJSON *e, slm_dataset *ds) {
    slm_status st;
    if (!cJSON_IsObject(e)) return slm_fail(SLM_E_FORMAT, "%s: not an object", w);
    const char *file = NULL, *split = NULL;
    if ((st = slm_json_str(w, e, "file", &file))) return st;
    if (!safe_name(file))
        return slm_fail(SLM_E_FORMAT, "%s: file \"%.60s\" is not a plain file name", w, file);
    if ((st = slm_json_str(w, e, "split", &split))) return st;
    slm_split_info *sp;
    if (!strcmp(split, "train"))
        sp = &ds->train;
    else if (!strcmp(split, "val"))
        sp = &ds->val;
    else
        return slm_fail(SLM_E_FORMAT, "%s: split \"%.20s\", expected \"train\" or \"val\"", w,
                        split);
    slm_shard_info *si = &sp->shards[sp->n_shards];
    if ((st = slm_json_u64(w, e, "n_tokens", &si->n_tokens))) return st;
    if ((st = slm_json_u64(w, e, "n_docs", &si->n_docs))) return st;
    if ((st = slm_json_u64(w, e, "bytes", &si->bytes))) return st;
    if ((st = slm_json_hex64(w, e, "xxh64", &si->xxh64))) return st;
    uint64_t per = ds->token_bytes + (ds->masked ? 1u : 0u);
    if (si->n_tokens > (uint64_t)SLM_JSON_MAX_EXACT ||
        si->bytes != SLM_SHARD_HEADER_BYTES + si->n_tokens * per)
        return slm_fail(SLM_E_FORMAT,
                        "%s: bytes %" PRIu64 " != 64 + n_tokens %" PRIu64 " * %" PRIu64
                        " (token_bytes%s)",
                        w, si->bytes, si->n_tokens, per, ds->masked ? " + 1 flags byte" : "");
    si->file = slm_xstrdup(file);
    sp->n_shards++;
    sp->n_tokens += si->n_tokens;
    sp->n_docs += si->n_docs;
    if (sp->n_tokens > (uint64_t)SLM_JSON_MAX_EXACT)
        return slm_fail(SLM_E_FORMAT, "%s: split token count overflows", w);
    return SLM_OK;
}

// The "shards" array, into ds->train and ds->val.
static slm_status parse_shards(const char *what, const cJSON *root, slm_dataset *ds) {
    slm_status st;
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(root, "shards");
    if (!cJSON_IsArray(shards))
        return slm_fail(SLM_E_FORMAT, "%s: missing array field \"shards\"", what);
    int n = cJSON_GetArraySize(shards);
    ds->train.shards = slm_xcalloc((size_t)n + 1, sizeof(slm_shard_info));
    ds->val.shards = slm_xcalloc((size_t)n + 1, sizeof(slm_shard_info));
    int idx = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, shards) {
        char w[96];
        snprintf(w, sizeof w, "%s: shards[%d]", what, idx++);
        if ((st = parse_shard(w, e, ds))) return st;
    }
    return SLM_OK;
}

// Optional (older manifests lack it): documents read / written / skipped_empty by prep.
static slm_status parse_doc_counts(const char *what, const cJSON *root, slm_dataset *ds) {
    slm_status st;
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(root, "documents");
    if (!docs) return SLM_OK;
    char w[96];
    snprintf(w, sizeof w, "%s: documents", what);
    if (!cJSON_IsObject(docs)) return slm_fail(SLM_E_FORMAT, "%s: not an object", w);
    uint64_t written = 0;
    if ((st = slm_json_u64(w, docs, "read", &ds->docs_read)) ||
        (st = slm_json_u64(w, docs, "written", &written)) ||
        (st = slm_json_u64(w, docs, "skipped_empty", &ds->docs_skipped)))
        return st;
    if (written + ds->docs_skipped != ds->docs_read || written != ds->train.n_docs + ds->val.n_docs)
        return slm_fail(SLM_E_FORMAT,
                        "%s: read %" PRIu64 ", written %" PRIu64 ", skipped_empty %" PRIu64
                        ": expected read = written + skipped_empty and written = the splits' "
                        "n_docs (%" PRIu64 ")",
                        w, ds->docs_read, written, ds->docs_skipped,
                        ds->train.n_docs + ds->val.n_docs);
    ds->has_doc_counts = true;
    return SLM_OK;
}

// The split totals are redundant; checking them catches a hand-edited or mixed manifest.
static slm_status check_split_totals(const char *what, const cJSON *root, slm_dataset *ds) {
    slm_status st;
    const cJSON *splits = cJSON_GetObjectItemCaseSensitive(root, "splits");
    if (!cJSON_IsObject(splits))
        return slm_fail(SLM_E_FORMAT, "%s: missing object field \"splits\"", what);
    const char *names[2] = {"train", "val"};
    slm_split_info *sps[2] = {&ds->train, &ds->val};
    for (int s = 0; s < 2; s++) {
        char w[96];
        snprintf(w, sizeof w, "%s: splits.%s", what, names[s]);
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(splits, names[s]);
        if (!cJSON_IsObject(o)) return slm_fail(SLM_E_FORMAT, "%s: missing object", w);
        uint64_t nt, nd, ns;
        if ((st = slm_json_u64(w, o, "n_tokens", &nt)) ||
            (st = slm_json_u64(w, o, "n_docs", &nd)) || (st = slm_json_u64(w, o, "n_shards", &ns)))
            return st;
        if (nt != sps[s]->n_tokens || nd != sps[s]->n_docs || ns != (uint64_t)sps[s]->n_shards)
            return slm_fail(SLM_E_FORMAT,
                            "%s: totals (%" PRIu64 " tokens, %" PRIu64 " docs, %" PRIu64
                            " shards) do not match the shard list (%" PRIu64 ", %" PRIu64 ", %d)",
                            w, nt, nd, ns, sps[s]->n_tokens, sps[s]->n_docs, sps[s]->n_shards);
    }
    return SLM_OK;
}

static slm_status parse_doc(const char *what, const cJSON *root, slm_dataset *ds) {
    slm_status st;
    if (!cJSON_IsObject(root)) return slm_fail(SLM_E_FORMAT, "%s: not a JSON object", what);
    if ((st = parse_header(what, root, ds))) return st;
    if ((st = parse_tokenizer(what, root, ds))) return st;
    if ((st = parse_shards(what, root, ds))) return st;
    if ((st = parse_doc_counts(what, root, ds))) return st;
    return check_split_totals(what, root, ds);
}

slm_status slm_dataset_parse(const char *dir, const char *what, const char *json, size_t len,
                             slm_dataset *ds) {
    memset(ds, 0, sizeof *ds);
    ds->dir = slm_xstrdup(dir);
    ds->bos_id = ds->eos_id = -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root) {
        size_t off = end && end >= json ? (size_t)(end - json) : 0;
        int line = 1;
        for (size_t i = 0; i < off && i < len; i++)
            line += json[i] == '\n';
        return slm_fail(SLM_E_FORMAT, "%s:%d: malformed JSON (near byte %zu)", what, line, off);
    }
    slm_status st = parse_doc(what, root, ds);
    cJSON_Delete(root);
    return st;
}

slm_status slm_dataset_open(const char *dir, slm_dataset *ds) {
    memset(ds, 0, sizeof *ds);
    char *path = slm_path_join(dir, "manifest.json");
    if (!slm_is_file(path)) {
        slm_status st = slm_fail(SLM_E_IO, "no manifest.json in %s; HINT: run shardlm prep", dir);
        free(path);
        return st;
    }
    char *text = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &text, &len);
    if (st == SLM_OK) st = slm_dataset_parse(dir, path, text, len, ds);
    free(text);
    free(path);
    return st;
}

static cJSON *num(double v) {
    return cJSON_CreateNumber(v);
}

static cJSON *hex(uint64_t h) {
    char s[17];
    slm_hex64(h, s);
    return cJSON_CreateString(s);
}

// Base name of a path (the part after the last '/').
static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

slm_status slm_dataset_write(const slm_dataset *ds) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "shardlm-dataset");
    cJSON_AddItemToObject(root, "format_version", num(ds->masked ? 2 : 1));
    cJSON_AddItemToObject(root, "seed", num((double)ds->seed));
    cJSON_AddItemToObject(root, "val_fraction", num(ds->val_fraction));
    cJSON_AddItemToObject(root, "token_bytes", num(ds->token_bytes));
    cJSON *tok = cJSON_AddObjectToObject(root, "tokenizer");
    cJSON_AddStringToObject(tok, "file", ds->tokenizer_file ? base_name(ds->tokenizer_file) : "");
    cJSON_AddStringToObject(tok, "type", ds->tokenizer_type ? ds->tokenizer_type : "");
    cJSON_AddItemToObject(tok, "xxh64", hex(ds->tokenizer_xxh64));
    cJSON_AddItemToObject(tok, "vocab_size", num(ds->vocab_size));
    cJSON_AddItemToObject(tok, "bos_id", num(ds->bos_id));
    cJSON_AddItemToObject(tok, "eos_id", num(ds->eos_id));
    if (ds->has_doc_counts) {
        cJSON *docs = cJSON_AddObjectToObject(root, "documents");
        cJSON_AddItemToObject(docs, "read", num((double)ds->docs_read));
        cJSON_AddItemToObject(docs, "written", num((double)(ds->train.n_docs + ds->val.n_docs)));
        cJSON_AddItemToObject(docs, "skipped_empty", num((double)ds->docs_skipped));
    }
    if (ds->masked) {
        cJSON *sm = cJSON_AddObjectToObject(root, "samples");
        cJSON_AddStringToObject(sm, "format", ds->sample_format ? ds->sample_format : "chat");
        if (ds->chat_template)
            cJSON_AddStringToObject(sm, "chat_template", ds->chat_template);
        else
            cJSON_AddNullToObject(sm, "chat_template");
    }
    cJSON *splits = cJSON_AddObjectToObject(root, "splits");
    cJSON *shards = cJSON_AddArrayToObject(root, "shards");
    const char *names[2] = {"train", "val"};
    const slm_split_info *sps[2] = {&ds->train, &ds->val};
    for (int s = 0; s < 2; s++) {
        cJSON *o = cJSON_AddObjectToObject(splits, names[s]);
        cJSON_AddItemToObject(o, "n_tokens", num((double)sps[s]->n_tokens));
        cJSON_AddItemToObject(o, "n_docs", num((double)sps[s]->n_docs));
        cJSON_AddItemToObject(o, "n_shards", num(sps[s]->n_shards));
        for (int i = 0; i < sps[s]->n_shards; i++) {
            const slm_shard_info *si = &sps[s]->shards[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "file", si->file);
            cJSON_AddStringToObject(e, "split", names[s]);
            cJSON_AddItemToObject(e, "n_tokens", num((double)si->n_tokens));
            cJSON_AddItemToObject(e, "n_docs", num((double)si->n_docs));
            cJSON_AddItemToObject(e, "bytes", num((double)si->bytes));
            cJSON_AddItemToObject(e, "xxh64", hex(si->xxh64));
            cJSON_AddItemToArray(shards, e);
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return slm_fail(SLM_E_NOMEM, "manifest.json: cannot format JSON");
    slm_buf b = {0};
    slm_buf_append(&b, text, strlen(text));
    slm_buf_append(&b, "\n", 1);
    cJSON_free(text);
    char *path = slm_path_join(ds->dir, "manifest.json");
    slm_status st = slm_file_write_atomic(path, b.data, b.len);
    free(path);
    slm_buf_free(&b);
    return st;
}
