// Checkpoint format: rank files, sidecars, the manifest, the atomic commit, reading with
// resharding and verification. Format: docs/formats.md "Checkpoints".
#include "ckpt/ckpt_internal.h"

#include "base/json.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

void slm_ckpt_meta_default(slm_ckpt_meta *meta, const slm_llama_config *cfg) {
    memset(meta, 0, sizeof *meta);
    meta->cfg = *cfg;
    meta->world = 1;
    snprintf(meta->strategy, sizeof meta->strategy, "NO_SHARD");
    meta->shard_group_size = 1;
}

char *slm_ckpt_step_dir(const char *root, int64_t step, bool tmp) {
    char name[64];
    snprintf(name, sizeof name, "step_%08" PRId64 "%s", step, tmp ? ".tmp" : "");
    return slm_path_join(root, name);
}

static void rank_names(int rank, char bin[32], char side[32]) {
    snprintf(bin, 32, "rank_%05d.bin", rank);
    snprintf(side, 32, "rank_%05d.json", rank);
}

// ---------------------------------------------------------------------------------------------
// Staging: the rank file image in memory

void slm_ckpt_image_free(slm_ckpt_image *im) {
    if (!im) return;
    free(im->data);
    free(im->ranges);
    free(im->segs);
    memset(im, 0, sizeof *im);
}

// Ranges, total length and header of an image (shared by stage and describe). Keeps im->data /
// im->cap; replaces ranges and segs.
static void image_layout(slm_ckpt_image *im, int rank, int world, int64_t step,
                         const slm_unit_layout *layout, int n_units, const slm_ckpt_shard *shards) {
    free(im->ranges);
    free(im->segs);
    im->segs = NULL;
    im->n_segs = 0;
    im->rank = rank;
    im->world = world;
    im->n_units = n_units;
    im->ranges = slm_xcalloc((size_t)n_units, sizeof *im->ranges);
    size_t off = SLM_CKPT_HEADER_BYTES;
    for (int u = 0; u < n_units; u++) {
        const slm_ckpt_shard *sh = &shards[u];
        SLM_ASSERT(sh->begin >= 0 && sh->end >= sh->begin);
        int64_t hi = sh->end < layout[u].numel ? sh->end : layout[u].numel;
        int64_t stored = hi > sh->begin ? hi - sh->begin : 0;
        im->ranges[u] = (slm_ckpt_range){sh->begin, sh->end, stored, (int64_t)off};
        off += 3 * (size_t)stored * sizeof(float);
    }
    im->len = off;
    uint8_t *h = im->hdr;
    memset(h, 0, SLM_CKPT_HEADER_BYTES);
    memcpy(h, SLM_CKPT_MAGIC, 8);
    slm_put_le32(h + 8, SLM_CKPT_FORMAT_VERSION);
    slm_put_le32(h + 12, (uint32_t)rank);
    slm_put_le32(h + 16, (uint32_t)world);
    slm_put_le32(h + 20, (uint32_t)n_units);
    slm_put_le64(h + 24, (uint64_t)step);
    slm_put_le64(h + 32, (uint64_t)(off - SLM_CKPT_HEADER_BYTES));
}

void slm_ckpt_describe(slm_ckpt_image *im, int rank, int world, int64_t step,
                       const slm_unit_layout *layout, int n_units, const slm_ckpt_shard *shards) {
    image_layout(im, rank, world, step, layout, n_units, shards);
    im->segs = slm_xcalloc((size_t)(1 + 3 * n_units), sizeof *im->segs);
    im->segs[im->n_segs++] = (slm_ckpt_seg){.p = im->hdr, .len = SLM_CKPT_HEADER_BYTES};
    for (int u = 0; u < n_units; u++) {
        size_t nb = (size_t)im->ranges[u].stored * sizeof(float);
        const slm_ckpt_shard *sh = &shards[u];
        const float *src[3] = {sh->params, sh->m, sh->v};
        for (int k = 0; k < 3 && nb > 0; k++) {
            SLM_ASSERT(src[k] != NULL || sh->read != NULL);
            im->segs[im->n_segs++] =
                sh->read ? (slm_ckpt_seg){NULL, nb, sh->read, sh->src, sh->src_unit, k}
                         : (slm_ckpt_seg){(const uint8_t *)src[k], nb, NULL, NULL, 0, 0};
        }
    }
}

// Elements [off, off + n) of array k of shard sh into dst (zeros for a NULL host array).
static void shard_copy(float *dst, const slm_ckpt_shard *sh, int k, int64_t off, int64_t n) {
    const float *src[3] = {sh->params, sh->m, sh->v};
    size_t nb = (size_t)n * sizeof(float);
    if (sh->read)
        sh->read(sh->src, sh->src_unit, k, off, n, dst);
    else if (src[k]) // host arrays: the CPU device's copy
        slm_dev_copy(NULL, dst, src[k] + off, nb, SLM_D2D);
    else
        slm_dev_zero(NULL, dst, nb);
}

// dst <- array k of shard sh, n elements: in one copy (`parallel`: the CPU device spreads a copy
// of 4 MiB or more over its threads), else in 1 MiB pieces (each copied on the calling thread).
static void stage_copy(float *dst, const slm_ckpt_shard *sh, int k, int64_t n, bool parallel) {
    const int64_t piece = parallel ? (n > 0 ? n : 1) : ((int64_t)1 << 20) / (int64_t)sizeof(float);
    for (int64_t off = 0; off < n; off += piece)
        shard_copy(dst + off, sh, k, off, n - off < piece ? n - off : piece);
}

void slm_ckpt_stage(slm_ckpt_image *im, int rank, int world, int64_t step,
                    const slm_unit_layout *layout, int n_units, const slm_ckpt_shard *shards,
                    bool parallel) {
    image_layout(im, rank, world, step, layout, n_units, shards);
    size_t off = im->len;
    if (!im->data || im->cap < off) {
        free(im->data);
        im->data = slm_xaligned(off);
        im->cap = off;
    }
    memcpy(im->data, im->hdr, SLM_CKPT_HEADER_BYTES);
    im->segs = slm_xcalloc(1, sizeof *im->segs);
    im->segs[0] = (slm_ckpt_seg){.p = im->data, .len = off};
    im->n_segs = 1;
    for (int u = 0; u < n_units; u++) {
        const slm_ckpt_range *r = &im->ranges[u];
        float *p = (float *)(im->data + r->offset); // offsets are multiples of 4 (64 + 4 n)
        for (int k = 0; k < 3 && r->stored > 0; k++)
            stage_copy(p + k * r->stored, &shards[u], k, r->stored, parallel);
    }
}

static void add_hex(cJSON *o, const char *key, uint64_t h) {
    char hex[17];
    slm_hex64(h, hex);
    cJSON_AddStringToObject(o, key, hex);
}

// Writes the segments to a new file `path` in pieces that end at chunk boundaries, hashing
// each piece (whole file and its chunk) right after writing it; fsyncs. On failure removes it.
// chunks[] receives ceil(len / SLM_CKPT_CHUNK_BYTES) hashes.
static slm_status write_segments(const char *path, const slm_ckpt_image *im, uint64_t *whole,
                                 uint64_t *chunks) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return slm_fail(SLM_E_IO, "%s: cannot create: %s", path, strerror(errno));
    XXH64_state_t *hw = XXH64_createState(), *hc = XXH64_createState();
    SLM_ASSERT(hw && hc);
    XXH64_reset(hw, 0);
    XXH64_reset(hc, 0);
    slm_status st = SLM_OK;
    size_t pos = 0;
    int64_t k = 0;
    float *bounce = NULL; // segments read through a shard's `read`: one chunk at a time
    for (int i = 0; i < im->n_segs && !st; i++) {
        const slm_ckpt_seg *sg = &im->segs[i];
        const uint8_t *p = sg->p;
        size_t left = sg->len;
        while (left > 0 && !st) {
            size_t room = SLM_CKPT_CHUNK_BYTES - pos % SLM_CKPT_CHUNK_BYTES;
            size_t take = left < room ? left : room;
            if (!sg->p) { // positions and lengths are multiples of 4 (whole floats)
                if (!bounce) bounce = slm_xaligned(SLM_CKPT_CHUNK_BYTES);
                int64_t off = (int64_t)(sg->len - left) / (int64_t)sizeof(float);
                sg->read(sg->src, sg->unit, sg->k, off, (int64_t)(take / sizeof(float)), bounce);
                p = (const uint8_t *)bounce;
            }
            st = slm_fd_write_all(fd, p, take, path);
            XXH64_update(hw, p, take);
            XXH64_update(hc, p, take);
            p += take;
            left -= take;
            pos += take;
            if (pos % SLM_CKPT_CHUNK_BYTES == 0) {
                chunks[k++] = XXH64_digest(hc);
                XXH64_reset(hc, 0);
            }
        }
    }
    free(bounce);
    if (pos % SLM_CKPT_CHUNK_BYTES) chunks[k++] = XXH64_digest(hc);
    *whole = XXH64_digest(hw);
    XXH64_freeState(hw);
    XXH64_freeState(hc);
    SLM_ASSERT(st || pos == im->len);
    if (!st)
        st = slm_fd_write_fsync_close(fd, NULL, 0, path); // all written above: fsync + close
    else
        close(fd);
    if (st) unlink(path);
    return st;
}

slm_status slm_ckpt_write_image(const char *dir, const slm_ckpt_image *im) {
    char bin[32], side[32];
    rank_names(im->rank, bin, side);
    char *bpath = slm_path_join(dir, bin), *spath = slm_path_join(dir, side);
    int64_t n_chunks = (int64_t)((im->len + SLM_CKPT_CHUNK_BYTES - 1) / SLM_CKPT_CHUNK_BYTES);
    uint64_t whole = 0, *chunks = slm_xcalloc((size_t)(n_chunks ? n_chunks : 1), 8);
    slm_status st = write_segments(bpath, im, &whole, chunks);
    if (st) goto out;
    // Sidecar: what rank 0 needs for the manifest, so the commit needs no data exchange.
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", im->rank);
    cJSON_AddStringToObject(o, "file", bin);
    cJSON_AddNumberToObject(o, "bytes", (double)im->len);
    add_hex(o, "xxh64", whole);
    cJSON_AddNumberToObject(o, "chunk_bytes", SLM_CKPT_CHUNK_BYTES);
    cJSON *ch = cJSON_AddArrayToObject(o, "chunk_xxh64");
    for (int64_t k = 0; k < n_chunks; k++) {
        char hex[17];
        slm_hex64(chunks[k], hex);
        cJSON_AddItemToArray(ch, cJSON_CreateString(hex));
    }
    cJSON *us = cJSON_AddArrayToObject(o, "units");
    for (int u = 0; u < im->n_units; u++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "begin", (double)im->ranges[u].begin);
        cJSON_AddNumberToObject(r, "end", (double)im->ranges[u].end);
        cJSON_AddNumberToObject(r, "stored", (double)im->ranges[u].stored);
        cJSON_AddNumberToObject(r, "offset", (double)im->ranges[u].offset);
        cJSON_AddItemToArray(us, r);
    }
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    st = slm_file_write_durable(spath, txt, strlen(txt));
    free(txt);
    if (st) unlink(bpath);
out:
    free(chunks);
    free(bpath);
    free(spath);
    return st;
}

slm_status slm_ckpt_write_rank(const char *dir, int rank, int world, int64_t step,
                               const slm_unit_layout *layout, int n_units,
                               const slm_ckpt_shard *shards) {
    slm_ckpt_image im = {0};
    bool direct = true;
    for (int u = 0; u < n_units; u++)
        direct &= (shards[u].params && shards[u].m && shards[u].v) || shards[u].read;
    if (direct)
        slm_ckpt_describe(&im, rank, world, step, layout, n_units, shards);
    else
        slm_ckpt_stage(&im, rank, world, step, layout, n_units, shards, true);
    slm_status st = slm_ckpt_write_image(dir, &im);
    slm_ckpt_image_free(&im);
    return st;
}

// ---------------------------------------------------------------------------------------------
// Manifest writing and the commit

static cJSON *manifest_json(const slm_ckpt_meta *meta, const slm_unit_layout *layout, int n_units) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "shardlm-checkpoint");
    cJSON_AddNumberToObject(o, "format_version", SLM_CKPT_FORMAT_VERSION);
    cJSON_AddNumberToObject(o, "step", (double)meta->step);
    cJSON_AddNumberToObject(o, "tokens_seen", (double)meta->tokens_seen);
    slm_llama_config_to_json(&meta->cfg, false, cJSON_AddObjectToObject(o, "model_config"));
    cJSON *tk = cJSON_AddObjectToObject(o, "tokenizer");
    cJSON_AddStringToObject(tk, "file", meta->tokenizer_file);
    if (meta->has_tokenizer)
        add_hex(tk, "xxh64", meta->tokenizer_xxh64);
    else
        cJSON_AddNullToObject(tk, "xxh64");
    cJSON_AddNumberToObject(o, "world_size", meta->world);
    cJSON *sh = cJSON_AddObjectToObject(o, "sharding");
    cJSON_AddStringToObject(sh, "strategy", meta->strategy);
    cJSON_AddNumberToObject(sh, "shard_group_size", meta->shard_group_size);
    if (meta->has_batch) {
        int64_t g = (int64_t)meta->batch * meta->world * meta->grad_accum;
        cJSON *bt = cJSON_AddObjectToObject(o, "batch");
        cJSON_AddNumberToObject(bt, "micro_batch", meta->batch);
        cJSON_AddNumberToObject(bt, "seq", meta->seq);
        cJSON_AddNumberToObject(bt, "grad_accum", meta->grad_accum);
        cJSON_AddNumberToObject(bt, "world", meta->world);
        cJSON_AddNumberToObject(bt, "global_sequences", (double)g);
        cJSON_AddNumberToObject(bt, "global_tokens", (double)(g * meta->seq));
    }
    cJSON *sk = cJSON_AddObjectToObject(o, "skips");
    cJSON_AddNumberToObject(sk, "nonfinite", (double)meta->nonfinite_skips);
    cJSON_AddNumberToObject(sk, "nonfinite_in_a_row", (double)meta->nonfinite_in_a_row);
    cJSON_AddNumberToObject(sk, "no_target", (double)meta->empty_skips);
    if (meta->lora.rank > 0) {
        cJSON *lo = cJSON_AddObjectToObject(o, "lora");
        cJSON_AddNumberToObject(lo, "r", meta->lora.rank);
        cJSON_AddNumberToObject(lo, "lora_alpha", meta->lora.alpha);
        cJSON_AddNumberToObject(lo, "lora_dropout", meta->lora.dropout);
        cJSON *tm = cJSON_AddArrayToObject(lo, "target_modules");
        for (int t = 0; t < SLM_LORA_N_TARGETS; t++)
            if (meta->lora.targets & (1u << t))
                cJSON_AddItemToArray(tm, cJSON_CreateString(slm_lora_target_name(t)));
        cJSON *bm = cJSON_AddObjectToObject(lo, "base_model");
        cJSON_AddStringToObject(bm, "path", meta->lora_base);
        add_hex(bm, "xxh64", meta->lora_base_xxh64);
    }
    cJSON *us = cJSON_AddArrayToObject(o, "units");
    for (int u = 0; u < n_units; u++) {
        cJSON *uo = cJSON_CreateObject();
        cJSON_AddNumberToObject(uo, "index", u);
        cJSON_AddNumberToObject(uo, "numel", (double)layout[u].numel);
        cJSON *ts = cJSON_AddArrayToObject(uo, "tensors");
        for (int i = 0; i < layout[u].n_views; i++) {
            const slm_param_view *v = &layout[u].views[i];
            cJSON *t = cJSON_CreateObject();
            cJSON_AddStringToObject(t, "name", v->name);
            cJSON *shp = cJSON_AddArrayToObject(t, "shape");
            for (int d = 0; d < v->ndim; d++)
                cJSON_AddItemToArray(shp, cJSON_CreateNumber((double)v->shape[d]));
            cJSON_AddStringToObject(t, "dtype", "F32");
            cJSON_AddNumberToObject(t, "offset", (double)v->offset);
            cJSON_AddBoolToObject(t, "weight_decay", v->weight_decay);
            cJSON_AddItemToArray(ts, t);
        }
        cJSON_AddItemToArray(us, uo);
    }
    cJSON *op = cJSON_AddObjectToObject(o, "optimizer");
    cJSON_AddStringToObject(op, "name", "AdamW");
    cJSON_AddNumberToObject(op, "lr_peak", meta->adamw.lr_peak);
    cJSON_AddNumberToObject(op, "beta1", meta->adamw.beta1);
    cJSON_AddNumberToObject(op, "beta2", meta->adamw.beta2);
    cJSON_AddNumberToObject(op, "eps", meta->adamw.eps);
    cJSON_AddNumberToObject(op, "weight_decay", meta->adamw.weight_decay);
    cJSON_AddNumberToObject(op, "step", (double)meta->opt_step);
    cJSON *lr = cJSON_AddObjectToObject(o, "lr_schedule");
    cJSON_AddStringToObject(lr, "kind", "warmup_cosine");
    cJSON_AddNumberToObject(lr, "step", (double)meta->lr_step);
    cJSON_AddNumberToObject(lr, "warmup", (double)meta->lr_warmup);
    cJSON_AddNumberToObject(lr, "total", (double)meta->lr_total);
    cJSON_AddNumberToObject(lr, "lr_min", meta->lr_min);
    cJSON *ld = cJSON_AddObjectToObject(o, "loader");
    add_hex(ld, "seed", meta->loader.seed);
    cJSON_AddNumberToObject(ld, "epoch", (double)meta->loader.epoch);
    cJSON_AddNumberToObject(ld, "pos", (double)meta->loader.pos);
    cJSON *rng = cJSON_AddArrayToObject(o, "rng_state");
    for (int i = 0; i < 4; i++) {
        char hex[17];
        slm_hex64(meta->rng.s[i], hex);
        cJSON_AddItemToArray(rng, cJSON_CreateString(hex));
    }
    return o;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// Deletes a directory and the plain files in it (checkpoint directories are flat); a symlink or
// a non-directory entry at DIR is skipped with a warning (contract in ckpt_internal.h).
slm_status slm_ckpt_rmdir(const char *dir) {
    struct stat sb;
    if (lstat(dir, &sb) != 0)
        return errno == ENOENT ? SLM_OK : slm_fail(SLM_E_IO, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        if (S_ISLNK(sb.st_mode))
            slm_warn("%s is a symbolic link, not a checkpoint directory: skipped (not followed, "
                     "not deleted)",
                     dir);
        else
            slm_warn("%s is not a directory, so not a checkpoint: skipped (not deleted)", dir);
        return SLM_OK;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR) { // replaced since the lstat
            slm_warn("%s is no longer a directory: skipped (not followed, not deleted)", dir);
            return SLM_OK;
        }
        return slm_fail(SLM_E_IO, "%s: %s", dir, strerror(errno));
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return slm_fail(SLM_E_IO, "%s: %s", dir, strerror(e));
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        (void)unlinkat(fd, e->d_name, 0); // a subdirectory stays: rmdir below then fails
    }
    closedir(d); // closes fd
    if (rmdir(dir) != 0) return slm_fail(SLM_E_IO, "%s: rmdir: %s", dir, strerror(errno));
    return SLM_OK;
}

// lstat of a step entry: 0 when DIR is a real directory or missing, else a word for the log
// ("a symbolic link", "not a directory").
static const char *step_entry_kind(const char *dir) {
    struct stat sb;
    if (lstat(dir, &sb) != 0 || S_ISDIR(sb.st_mode)) return NULL;
    return S_ISLNK(sb.st_mode) ? "a symbolic link" : "not a directory";
}

// Parses "step_NNNNNNNN" (committed) names; false for anything else (".tmp" included).
static bool parse_step_name(const char *name, int64_t *step) {
    if (strncmp(name, "step_", 5) != 0) return false;
    const char *p = name + 5;
    if (!*p) return false;
    int64_t s = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || s > INT64_MAX / 10 - 10) return false;
        s = s * 10 + (*p - '0');
    }
    *step = s;
    return true;
}

// Committed steps under root, ascending (caller frees *steps).
static int list_steps(const char *root, int64_t **steps) {
    int n = 0, cap = 0;
    *steps = NULL;
    DIR *d = opendir(root);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s;
        if (!parse_step_name(e->d_name, &s)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            *steps = slm_xrealloc(*steps, (size_t)cap * sizeof **steps);
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    if (n) qsort(*steps, (size_t)n, sizeof **steps, cmp_i64);
    return n;
}

int slm_ckpt_list_steps(const char *root, int64_t **steps) {
    return list_steps(root, steps);
}

// Puts the staged TMP in place of an existing FIN (a step saved again: after a failed `latest`
// update, a fallback resume, or a partial directory). Atomic where the file system supports
// RENAME_EXCHANGE (TMP then holds the old contents, removed); else FIN is first renamed aside
// to a ".tmp" name (swept with the other staging leftovers).
static slm_status replace_step_dir(const char *root, const char *tmp, const char *fin,
                                   int64_t step) {
    slm_status st = SLM_OK;
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, fin, RENAME_EXCHANGE) == 0) {
        if ((st = slm_fsync_dir(root))) return st;
        if (slm_ckpt_rmdir(tmp)) slm_warn("%s", slm_errmsg());
        slm_warn("checkpoint step %lld saved again: replaced the earlier %s", (long long)step, fin);
        return SLM_OK;
    }
    char name[64];
    snprintf(name, sizeof name, "step_%08" PRId64 ".replaced.tmp", step);
    char *aside = slm_path_join(root, name);
    slm_ckpt_rmdir(aside);
    if (rename(fin, aside) != 0)
        st = slm_fail(SLM_E_IO, "rename %s -> %s failed: %s", fin, aside, strerror(errno));
    else if (rename(tmp, fin) != 0)
        st = slm_fail(SLM_E_IO, "rename %s -> %s failed: %s", tmp, fin, strerror(errno));
    if (!st) {
        slm_ckpt_rmdir(aside);
        slm_warn("checkpoint step %lld saved again: replaced the earlier %s", (long long)step, fin);
    }
    free(aside);
    return st;
}

#define PENDING_NAME "pending.json"

slm_status slm_ckpt_write_pending(const char *root, const slm_ckpt_meta *meta,
                                  const slm_unit_layout *layout, int n_units) {
    char *tmp = slm_ckpt_step_dir(root, meta->step, true);
    char *p = slm_path_join(tmp, PENDING_NAME);
    cJSON *o = manifest_json(meta, layout, n_units);
    char *txt = cJSON_PrintUnformatted(o);
    slm_status st = slm_file_write_durable(p, txt, strlen(txt));
    free(txt);
    cJSON_Delete(o);
    free(p);
    free(tmp);
    return st;
}

// The commit's second half: O (the manifest without "files", consumed) gets the sidecars of
// TMP merged in, is written as TMP/manifest.json, and TMP becomes FIN; `latest`, retention.
// validate: the merged manifest must parse (slm_ckpt_parse_manifest) before anything is renamed.
static slm_status commit_manifest(const char *root, int64_t step, int world, cJSON *o, int keep,
                                  bool validate);

slm_status slm_ckpt_commit(const char *root, const slm_ckpt_meta *meta,
                           const slm_unit_layout *layout, int n_units, int keep) {
    return commit_manifest(root, meta->step, meta->world, manifest_json(meta, layout, n_units),
                           keep, false);
}

static slm_status commit_manifest(const char *root, int64_t step, int world, cJSON *o, int keep,
                                  bool validate) {
    char *tmp = slm_ckpt_step_dir(root, step, true);
    char *fin = slm_ckpt_step_dir(root, step, false);
    char *mpath = slm_path_join(tmp, "manifest.json");
    char *txt = NULL;
    cJSON *files = cJSON_AddArrayToObject(o, "files");
    slm_status st = SLM_OK;
    // Before anything in TMP changes: a recovered save whose pending.json and sidecars were
    // already merged away could not be recovered again once the entry is moved.
    const char *odd = step_entry_kind(fin);
    if (odd) { // never replaced (that would delete it) nor written through
        st = slm_fail(SLM_E_IO,
                      "%s is %s where checkpoint step %" PRId64 " goes: it is neither "
                      "followed nor replaced; move it away",
                      fin, odd, step);
        goto out;
    }
    for (int r = 0; r < world; r++) {
        char bin[32], side[32];
        rank_names(r, bin, side);
        char *sp = slm_path_join(tmp, side);
        char *text = NULL;
        size_t len = 0;
        if (r > 0 && !slm_is_file(sp)) { // a replica rank that wrote nothing
            free(sp);
            continue;
        }
        st = slm_file_read_all(sp, &text, &len);
        cJSON *so = st ? NULL : cJSON_ParseWithLength(text, len);
        if (!st && !so) st = slm_fail(SLM_E_FORMAT, "%s: sidecar is not valid JSON", sp);
        free(text);
        free(sp);
        if (st) goto out;
        cJSON_AddItemToArray(files, so);
    }
    txt = cJSON_Print(o);
    if (validate) { // a recovered pending.json: the manifest it makes must be a valid one
        slm_ckpt *c = slm_ckpt_alloc(tmp);
        st = slm_ckpt_parse_manifest(c, txt, strlen(txt));
        if (!st && slm_ckpt_get_meta(c)->step != step)
            st = slm_fail(SLM_E_FORMAT, "%s: names step %lld, not %lld", PENDING_NAME,
                          (long long)slm_ckpt_get_meta(c)->step, (long long)step);
        slm_ckpt_free(c);
        if (st) goto out;
    }
    st = slm_file_write_atomic(mpath, txt, strlen(txt));
    if (st) goto out;
    for (int r = 0; r < world; r++) {
        char bin[32], side[32];
        rank_names(r, bin, side);
        char *sp = slm_path_join(tmp, side);
        unlink(sp); // merged into the manifest
        free(sp);
    }
    {
        char *pp = slm_path_join(tmp, PENDING_NAME); // its content is the manifest now
        unlink(pp);
        free(pp);
    }
    if ((st = slm_fsync_dir(tmp))) goto out;
    if (slm_is_dir(fin)) { // an earlier (complete or partial) save of this step: replace it
        if ((st = replace_step_dir(root, tmp, fin, step))) goto out;
    } else if (rename(tmp, fin) != 0) {
        st = slm_fail(SLM_E_IO, "rename %s -> %s failed: %s", tmp, fin, strerror(errno));
        goto out;
    }
    if ((st = slm_fsync_dir(root))) goto out;
    {
        char name[64];
        int nl = snprintf(name, sizeof name, "step_%08" PRId64 "\n", step);
        char *lp = slm_path_join(root, "latest");
        st = slm_file_write_atomic(lp, name, (size_t)nl);
        free(lp);
        if (st) goto out;
    }
    // Retention and stale staging directories: only after `latest` names the new checkpoint.
    {
        int64_t *steps;
        int n = list_steps(root, &steps);
        for (int i = 0; keep > 0 && i < n - keep; i++) {
            if (steps[i] == step) continue;
            char *d = slm_ckpt_step_dir(root, steps[i], false);
            // a symlink / non-directory step entry: slm_ckpt_rmdir warns and leaves it
            if (slm_ckpt_rmdir(d)) slm_warn("%s", slm_errmsg());
            free(d);
        }
        free(steps);
        DIR *d = opendir(root);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (strncmp(e->d_name, "step_", 5) || l < 4 || strcmp(e->d_name + l - 4, ".tmp"))
                continue;
            char *p = slm_path_join(root, e->d_name);
            slm_ckpt_rmdir(p);
            free(p);
        }
        if (d) closedir(d);
    }
out:
    cJSON_Delete(o);
    free(txt);
    free(mpath);
    free(tmp);
    free(fin);
    return st;
}

// Whether ROOT/step_STEP.tmp holds a save that every writing rank finished: rank 0's
// pending.json and, for each writing rank, a sidecar whose file exists with the sidecar's size
// and XXH64. On true, *pending is the parsed pending.json (caller owns) and *world its world.
static bool pending_complete(const char *tmp, cJSON **pending, int *world, char *why, size_t cap) {
    *pending = NULL;
    char *pp = slm_path_join(tmp, PENDING_NAME), *text = NULL;
    size_t len = 0;
    bool have = slm_is_file(pp) && slm_file_read_all(pp, &text, &len) == SLM_OK;
    free(pp);
    if (!have) {
        snprintf(why, cap, "no %s (rank 0 had not started the save)", PENDING_NAME);
        return false;
    }
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *w = o ? cJSON_GetObjectItemCaseSensitive(o, "world_size") : NULL;
    const cJSON *sh = o ? cJSON_GetObjectItemCaseSensitive(o, "sharding") : NULL;
    const cJSON *sg = sh ? cJSON_GetObjectItemCaseSensitive(sh, "shard_group_size") : NULL;
    if (!cJSON_IsNumber(w) || w->valuedouble < 1 || w->valuedouble > 1 << 24) {
        snprintf(why, cap, "%s has no valid world_size", PENDING_NAME);
        cJSON_Delete(o);
        return false;
    }
    int W = (int)w->valuedouble;
    // The ranks that write a file: those of shard group 0 (slm_fsdp_is_replica), all without one.
    int writers = cJSON_IsNumber(sg) && sg->valuedouble >= 1 && sg->valuedouble <= W
                      ? (int)sg->valuedouble
                      : W;
    for (int r = 0; r < W; r++) {
        char bin[32], side[32];
        rank_names(r, bin, side);
        char *sp = slm_path_join(tmp, side), *bp = slm_path_join(tmp, bin), *st_text = NULL;
        size_t sl = 0;
        bool ok = true;
        if (!slm_is_file(sp)) {
            if (r < writers) snprintf(why, cap, "rank %d had not finished writing %s", r, bin);
            ok = r >= writers;
        } else if (slm_file_read_all(sp, &st_text, &sl) != SLM_OK) {
            snprintf(why, cap, "%s: unreadable", side), ok = false;
        } else {
            cJSON *so = cJSON_ParseWithLength(st_text, sl);
            const cJSON *b = so ? cJSON_GetObjectItemCaseSensitive(so, "bytes") : NULL;
            const cJSON *h = so ? cJSON_GetObjectItemCaseSensitive(so, "xxh64") : NULL;
            struct stat sb;
            uint64_t got = 0;
            char hex[17] = "";
            if (!cJSON_IsNumber(b) || !cJSON_IsString(h) || stat(bp, &sb) != 0 ||
                (double)sb.st_size != b->valuedouble) {
                snprintf(why, cap, "%s does not match its sidecar %s (size)", bin, side),
                    ok = false;
            } else if (slm_file_xxh64(bp, &got) != SLM_OK ||
                       (slm_hex64(got, hex), strcmp(hex, h->valuestring) != 0)) {
                snprintf(why, cap, "%s does not match its sidecar %s (XXH64)", bin, side),
                    ok = false;
            }
            cJSON_Delete(so);
        }
        free(st_text);
        free(sp);
        free(bp);
        if (!ok) {
            cJSON_Delete(o);
            return false;
        }
    }
    *pending = o;
    *world = W;
    return true;
}

// The scan of slm_ckpt_recover_pending; with commit false nothing is written or logged and
// *recovered is the step that would be committed.
static slm_status scan_pending(const char *root, int keep, bool commit, int64_t *recovered) {
    *recovered = -1;
    int64_t *steps = NULL;
    int n = list_steps(root, &steps);
    int64_t newest = n ? steps[n - 1] : -1;
    free(steps);
    DIR *d = opendir(root);
    if (!d) return SLM_OK;
    enum { MAXC = 64 };
    int64_t cand[MAXC];
    int nc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        char name[64];
        int64_t s;
        if (l < 9 || l - 4 >= sizeof name || strcmp(e->d_name + l - 4, ".tmp") != 0) continue;
        memcpy(name, e->d_name, l - 4);
        name[l - 4] = 0;
        if (parse_step_name(name, &s) && s > newest && nc < MAXC) cand[nc++] = s;
    }
    closedir(d);
    if (nc) qsort(cand, (size_t)nc, sizeof *cand, cmp_i64);
    for (int i = nc - 1; i >= 0; i--) {
        char *tmp = slm_ckpt_step_dir(root, cand[i], true);
        char why[512] = "";
        cJSON *o = NULL;
        int world = 0;
        if (step_entry_kind(tmp) || !pending_complete(tmp, &o, &world, why, sizeof why)) {
            if (commit)
                slm_info("%s: an interrupted save, not recoverable: %s", tmp,
                         why[0] ? why : "not a directory");
            free(tmp);
            continue;
        }
        if (!commit) {
            cJSON_Delete(o);
            free(tmp);
            *recovered = cand[i];
            return SLM_OK;
        }
        slm_status st = commit_manifest(root, cand[i], world, o, keep, true);
        if (st) { // `latest` is unchanged: the committed checkpoints are resumed as before
            slm_warn("%s: an interrupted save, not recovered: %s", tmp, slm_errmsg());
            free(tmp);
            continue;
        } else {
            slm_warn("checkpoint step %lld recovered: every rank had written and fsynced its "
                     "shard into %s (sizes and XXH64 match), but the job ended before the commit "
                     "(a rank hung or died before the commit barrier); committed now",
                     (long long)cand[i], tmp);
            *recovered = cand[i];
        }
        free(tmp);
        return st;
    }
    return SLM_OK;
}

slm_status slm_ckpt_recover_pending(const char *root, int keep, int64_t *recovered) {
    return scan_pending(root, keep, true, recovered);
}

int64_t slm_ckpt_find_pending(const char *root) {
    int64_t step = -1;
    scan_pending(root, 0, false, &step);
    return step;
}

// ---------------------------------------------------------------------------------------------
// Reading

typedef struct ck_file {
    char name[32];
    char *path;
    int rank;
    int64_t bytes;
    uint64_t xxh64;
    int64_t n_chunks;
    uint64_t *chunk;        // [n_chunks]
    slm_ckpt_range *ranges; // [n_units]
    bool checked;           // the source's head succeeded (exists with its manifest size)
} ck_file;

struct slm_ckpt {
    char *dir;
    char *manifest_path;
    slm_ckpt_meta meta;
    int n_units;
    slm_unit_layout *units;
    int n_files;
    ck_file *files;
    // one-chunk cache (consecutive reads of params / m / v share boundary chunks)
    int cache_file;
    int64_t cache_chunk;
    uint8_t *cache;
    size_t cache_len;
    slm_ckpt_source src; // where the rank files are read from (local files or S3)
    int64_t want_end;    // end of the byte span read_bytes is reading (a source may prefetch)
};

// The file as the reader names it to its source.
static slm_ckpt_src_file src_file(const slm_ckpt *c, const ck_file *f) {
    return (slm_ckpt_src_file){.index = (int)(f - c->files),
                               .rank = f->rank,
                               .name = f->name,
                               .path = f->path,
                               .bytes = f->bytes};
}

const char *slm_ckpt_dir(const slm_ckpt *c) {
    return c->dir;
}
const slm_ckpt_meta *slm_ckpt_get_meta(const slm_ckpt *c) {
    return &c->meta;
}
int slm_ckpt_n_units(const slm_ckpt *c) {
    return c->n_units;
}
const slm_unit_layout *slm_ckpt_unit(const slm_ckpt *c, int u) {
    return &c->units[u];
}

void slm_ckpt_free(slm_ckpt *c) {
    if (!c) return;
    for (int u = 0; u < c->n_units; u++)
        free(c->units[u].views);
    free(c->units);
    for (int i = 0; i < c->n_files; i++) {
        free(c->files[i].path);
        free(c->files[i].chunk);
        free(c->files[i].ranges);
    }
    free(c->files);
    free(c->cache);
    c->src.ops->free(c->src.impl);
    free(c->dir);
    free(c->manifest_path);
    free(c);
}

// The rank and world size a rank file's header records (offsets 12 and 16) must be the ones the
// manifest gives for it (files[].rank, world_size): a file from another save is refused.
static slm_status check_rank_header(const slm_ckpt *c, const ck_file *f, const uint8_t *hdr) {
    uint32_t rank = slm_get_le32(hdr + 12), world = slm_get_le32(hdr + 16);
    if ((int64_t)world != c->meta.world || (int64_t)rank != f->rank)
        return slm_fail(SLM_E_FORMAT,
                        "%s: header records rank %" PRIu32 " of world %" PRIu32
                        " but the manifest %s lists it as rank %d of world_size %d",
                        f->path, rank, world, c->manifest_path, f->rank, c->meta.world);
    return SLM_OK;
}

static bool safe_file_name(const char *s) {
    if (!s || !*s || strlen(s) >= 32 || !strcmp(s, ".") || !strcmp(s, "..")) return false;
    for (const char *p = s; *p; p++)
        if (*p == '/' || *p == '\\' || (unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            return false;
    return true;
}

typedef struct iv {
    int64_t b, e;
} iv;
static int cmp_iv(const void *a, const void *b) {
    const iv *x = a, *y = b;
    return (x->b > y->b) - (x->b < y->b);
}

static slm_status parse_units(slm_ckpt *c, const char *mp, const cJSON *arr) {
    int n = cJSON_GetArraySize(arr);
    if (n < 1 || n > 1000000)
        return slm_fail(SLM_E_FORMAT, "%s: \"units\" must be a non-empty array", mp);
    c->n_units = n;
    c->units = slm_xcalloc((size_t)n, sizeof *c->units);
    slm_status st;
    for (int u = 0; u < n; u++) {
        const cJSON *uo = cJSON_GetArrayItem(arr, u);
        slm_unit_layout *L = &c->units[u];
        if (!cJSON_IsObject(uo))
            return slm_fail(SLM_E_FORMAT, "%s: units[%d] is not an object", mp, u);
        if ((st = slm_json_i64(mp, uo, "numel", 0, INT64_MAX, &L->numel))) return st;
        const cJSON *ts = slm_json_arr(uo, "tensors");
        if (!ts) return slm_fail(SLM_E_FORMAT, "%s: units[%d].tensors missing", mp, u);
        int nv = cJSON_GetArraySize(ts);
        L->views = slm_xcalloc((size_t)(nv ? nv : 1), sizeof *L->views);
        L->n_views = nv;
        for (int i = 0; i < nv; i++) {
            const cJSON *t = cJSON_GetArrayItem(ts, i);
            slm_param_view *v = &L->views[i];
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
            const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
            const cJSON *shp = slm_json_arr(t, "shape");
            if (!cJSON_IsString(nm) || strlen(nm->valuestring) >= sizeof v->name)
                return slm_fail(SLM_E_FORMAT, "%s: units[%d].tensors[%d].name missing/too long", mp,
                                u, i);
            snprintf(v->name, sizeof v->name, "%s", nm->valuestring);
            if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32"))
                return slm_fail(SLM_E_FORMAT, "%s: tensor %s: dtype must be \"F32\"", mp, v->name);
            int nd = shp ? cJSON_GetArraySize(shp) : 0;
            if (nd < 1 || nd > 2)
                return slm_fail(SLM_E_FORMAT, "%s: tensor %s: shape must have 1 or 2 dims", mp,
                                v->name);
            v->ndim = nd;
            v->numel = 1;
            for (int d = 0; d < nd; d++) {
                const cJSON *x = cJSON_GetArrayItem(shp, d);
                if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 1e12 ||
                    x->valuedouble != floor(x->valuedouble))
                    return slm_fail(SLM_E_FORMAT, "%s: tensor %s: bad shape", mp, v->name);
                v->shape[d] = (int64_t)x->valuedouble;
                v->numel *= v->shape[d];
            }
            if ((st = slm_json_i64(mp, t, "offset", 0, INT64_MAX, &v->offset))) return st;
            if (v->offset + v->numel > L->numel)
                return slm_fail(SLM_E_FORMAT,
                                "%s: tensor %s: offset %" PRId64 " + numel %" PRId64
                                " beyond unit %d numel %" PRId64,
                                mp, v->name, v->offset, v->numel, u, L->numel);
            v->weight_decay = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "weight_decay"));
        }
    }
    return SLM_OK;
}

static slm_status parse_files(slm_ckpt *c, const char *mp, const cJSON *arr) {
    int n = cJSON_GetArraySize(arr);
    if (n < 1 || n > 1000000)
        return slm_fail(SLM_E_FORMAT, "%s: \"files\" must be a non-empty array", mp);
    c->files = slm_xcalloc((size_t)n, sizeof *c->files);
    c->n_files = n;
    slm_status st;
    for (int i = 0; i < n; i++) {
        const cJSON *fo = cJSON_GetArrayItem(arr, i);
        ck_file *f = &c->files[i];
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fo, "file");
        if (!cJSON_IsString(nm) || !safe_file_name(nm->valuestring))
            return slm_fail(SLM_E_FORMAT, "%s: files[%d].file missing or not a plain name", mp, i);
        snprintf(f->name, sizeof f->name, "%s", nm->valuestring);
        f->path = slm_path_join(c->dir, f->name);
        double d = 0;
        if ((st = slm_json_num(mp, fo, "rank", 0, c->meta.world - 1, true, &d))) return st;
        f->rank = (int)d;
        if ((st = slm_json_i64(mp, fo, "bytes", SLM_CKPT_HEADER_BYTES, INT64_MAX, &f->bytes)))
            return st;
        if ((st = slm_json_hex64(mp, fo, "xxh64", &f->xxh64))) return st;
        if ((st = slm_json_num(mp, fo, "chunk_bytes", SLM_CKPT_CHUNK_BYTES, SLM_CKPT_CHUNK_BYTES,
                               true, &d)))
            return st;
        const cJSON *ch = slm_json_arr(fo, "chunk_xxh64");
        f->n_chunks = (f->bytes + SLM_CKPT_CHUNK_BYTES - 1) / SLM_CKPT_CHUNK_BYTES;
        if (!ch || cJSON_GetArraySize(ch) != f->n_chunks)
            return slm_fail(SLM_E_FORMAT, "%s: %s: chunk_xxh64 must list %" PRId64 " hashes", mp,
                            f->name, f->n_chunks);
        f->chunk = slm_xcalloc((size_t)f->n_chunks, sizeof *f->chunk);
        int64_t k = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, ch) {
            if (!cJSON_IsString(x) || !slm_parse_hex64(x->valuestring, &f->chunk[k]))
                return slm_fail(SLM_E_FORMAT, "%s: %s: chunk_xxh64[%" PRId64 "] not hex", mp,
                                f->name, k);
            k++;
        }
        const cJSON *us = slm_json_arr(fo, "units");
        if (!us || cJSON_GetArraySize(us) != c->n_units)
            return slm_fail(SLM_E_FORMAT, "%s: %s: \"units\" must list %d ranges", mp, f->name,
                            c->n_units);
        f->ranges = slm_xcalloc((size_t)c->n_units, sizeof *f->ranges);
        int64_t expect_off = SLM_CKPT_HEADER_BYTES;
        for (int u = 0; u < c->n_units; u++) {
            const cJSON *r = cJSON_GetArrayItem(us, u);
            slm_ckpt_range *R = &f->ranges[u];
            if ((st = slm_json_i64(mp, r, "begin", 0, INT64_MAX, &R->begin)) ||
                (st = slm_json_i64(mp, r, "end", 0, INT64_MAX, &R->end)) ||
                (st = slm_json_i64(mp, r, "stored", 0, INT64_MAX, &R->stored)) ||
                (st = slm_json_i64(mp, r, "offset", 0, INT64_MAX, &R->offset)))
                return st;
            int64_t hi = R->end < c->units[u].numel ? R->end : c->units[u].numel;
            int64_t want = hi > R->begin ? hi - R->begin : 0;
            if (R->end < R->begin || R->stored != want || R->offset != expect_off)
                return slm_fail(SLM_E_FORMAT,
                                "%s: %s: unit %d range [%" PRId64 ", %" PRId64 ") stored %" PRId64
                                " offset %" PRId64 " inconsistent (expected stored %" PRId64
                                ", offset %" PRId64 ")",
                                mp, f->name, u, R->begin, R->end, R->stored, R->offset, want,
                                expect_off);
            expect_off += 3 * R->stored * (int64_t)sizeof(float);
        }
        if (expect_off != f->bytes)
            return slm_fail(SLM_E_FORMAT, "%s: %s: bytes %" PRId64 " but ranges need %" PRId64, mp,
                            f->name, f->bytes, expect_off);
    }
    // Every unit's [0, numel) must be covered (overlaps are fine: replicas).
    iv *ivs = slm_xcalloc((size_t)n, sizeof *ivs);
    for (int u = 0; u < c->n_units; u++) {
        for (int i = 0; i < n; i++)
            ivs[i] = (iv){c->files[i].ranges[u].begin,
                          c->files[i].ranges[u].begin + c->files[i].ranges[u].stored};
        qsort(ivs, (size_t)n, sizeof *ivs, cmp_iv);
        int64_t covered = 0;
        for (int i = 0; i < n; i++)
            if (ivs[i].e > ivs[i].b && ivs[i].b <= covered && ivs[i].e > covered)
                covered = ivs[i].e;
        if (covered < c->units[u].numel) {
            free(ivs);
            return slm_fail(SLM_E_FORMAT,
                            "%s: unit %d: the files' ranges cover only [0, %" PRId64 ") of %" PRId64
                            " elements",
                            mp, u, covered, c->units[u].numel);
        }
    }
    free(ivs);
    return SLM_OK;
}

// An optional object member `name` of manifest object o: *out NULL when absent, an error when it
// is not an object; `what` ("MANIFEST: name") for the messages about its fields.
static slm_status optional_object(const char *mp, const cJSON *o, const char *name,
                                  const cJSON **out, char *what, size_t what_size) {
    *out = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!*out) return SLM_OK;
    if (!cJSON_IsObject(*out))
        return slm_fail(SLM_E_FORMAT, "%s: \"%s\" is not an object", mp, name);
    snprintf(what, what_size, "%s: %s", mp, name);
    return SLM_OK;
}

// The optional "batch" object (docs/formats.md): every field an integer >= 1, `world` equal to
// world_size and the two global counts the products of the others (a hand-edited or foreign
// manifest whose figures disagree is refused rather than one of them trusted).
static slm_status parse_batch(const char *mp, const cJSON *o, slm_ckpt_meta *M) {
    const cJSON *bt;
    char what[1100];
    slm_status st = optional_object(mp, o, "batch", &bt, what, sizeof what);
    if (st || !bt) return st;
    int64_t b, t, k, w, gs, gt;
    if ((st = slm_json_i64(what, bt, "micro_batch", 1, INT32_MAX, &b)) ||
        (st = slm_json_i64(what, bt, "seq", 1, INT32_MAX, &t)) ||
        (st = slm_json_i64(what, bt, "grad_accum", 1, INT32_MAX, &k)) ||
        (st = slm_json_i64(what, bt, "world", 1, INT32_MAX, &w)) ||
        (st = slm_json_i64(what, bt, "global_sequences", 1, INT64_MAX, &gs)) ||
        (st = slm_json_i64(what, bt, "global_tokens", 1, INT64_MAX, &gt)))
        return st;
    if (w != M->world)
        return slm_fail(SLM_E_FORMAT, "%s: batch.world %lld, but world_size is %d", mp,
                        (long long)w, M->world);
    // compared by exact division (b x w < 2^62 fits; the full products may not)
    int64_t bw = b * w;
    if (gs % bw || gs / bw != k || gt % t || gt / t != gs)
        return slm_fail(SLM_E_FORMAT,
                        "%s: batch: global_sequences %lld and global_tokens %lld, expected "
                        "micro_batch %lld x world %lld x grad_accum %lld and that x seq %lld",
                        mp, (long long)gs, (long long)gt, (long long)b, (long long)w, (long long)k,
                        (long long)t);
    M->has_batch = true;
    M->batch = (int)b, M->seq = (int)t, M->grad_accum = (int)k;
    return SLM_OK;
}

// The optional "skips" object (docs/formats.md; absent in manifests written before it: all 0):
// integers >= 0, the steps in a row no more than the non-finite skips, and the skips together no
// more than the steps.
static slm_status parse_skips(const char *mp, const cJSON *o, slm_ckpt_meta *M) {
    const cJSON *sk;
    char what[1100];
    slm_status st = optional_object(mp, o, "skips", &sk, what, sizeof what);
    if (st || !sk) return st;
    int64_t n, r, e;
    if ((st = slm_json_i64(what, sk, "nonfinite", 0, INT64_MAX, &n)) ||
        (st = slm_json_i64(what, sk, "nonfinite_in_a_row", 0, INT64_MAX, &r)) ||
        (st = slm_json_i64(what, sk, "no_target", 0, INT64_MAX, &e)))
        return st;
    if (r > n || n > M->step || e > M->step - n)
        return slm_fail(SLM_E_FORMAT,
                        "%s: skips: nonfinite %lld, nonfinite_in_a_row %lld, no_target %lld: "
                        "expected nonfinite_in_a_row <= nonfinite and nonfinite + no_target <= "
                        "step %lld",
                        mp, (long long)n, (long long)r, (long long)e, (long long)M->step);
    M->nonfinite_skips = n, M->nonfinite_in_a_row = r, M->empty_skips = e;
    return SLM_OK;
}

// The optional "lora" object of a manifest (a LoRA checkpoint).
static slm_status parse_lora(const char *mp, const cJSON *o, slm_ckpt_meta *M) {
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(o, "lora");
    if (!lo || cJSON_IsNull(lo)) return SLM_OK;
    if (!cJSON_IsObject(lo)) return slm_fail(SLM_E_FORMAT, "%s: \"lora\" must be an object", mp);
    double d = 0;
    slm_status st;
    if ((st = slm_json_num(mp, lo, "r", 1, 65536, true, &d))) return st;
    M->lora.rank = (int32_t)d;
    if ((st = slm_json_num(mp, lo, "lora_alpha", 0, 1e30, false, &d))) return st;
    M->lora.alpha = (float)d;
    if ((st = slm_json_num(mp, lo, "lora_dropout", 0, 1, false, &d))) return st;
    M->lora.dropout = (float)d;
    const cJSON *tm = slm_json_arr(lo, "target_modules");
    if (!tm) return slm_fail(SLM_E_FORMAT, "%s: lora.target_modules missing", mp);
    M->lora.targets = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, tm) {
        int found = -1;
        for (int t = 0; t < SLM_LORA_N_TARGETS && cJSON_IsString(it); t++)
            if (!strcmp(it->valuestring, slm_lora_target_name(t))) found = t;
        if (found < 0)
            return slm_fail(SLM_E_FORMAT,
                            "%s: lora.target_modules holds an unknown module (expected q_proj, "
                            "k_proj, v_proj, o_proj, gate_proj, up_proj or down_proj)",
                            mp);
        M->lora.targets |= 1u << found;
    }
    if (slm_lora_config_validate(&M->lora))
        return slm_fail(SLM_E_FORMAT, "%s: lora: %s", mp, slm_errmsg());
    const cJSON *bm = slm_json_obj(lo, "base_model");
    const cJSON *bp = bm ? cJSON_GetObjectItemCaseSensitive(bm, "path") : NULL;
    if (!cJSON_IsString(bp) || strlen(bp->valuestring) >= sizeof M->lora_base)
        return slm_fail(SLM_E_FORMAT, "%s: lora.base_model.path missing or too long", mp);
    snprintf(M->lora_base, sizeof M->lora_base, "%s", bp->valuestring);
    return slm_json_hex64(mp, bm, "xxh64", &M->lora_base_xxh64);
}

// The header: format, format_version, step, tokens_seen, model_config.
static slm_status parse_header(const char *mp, const cJSON *o, slm_ckpt_meta *M) {
    double d = 0;
    slm_status st;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "shardlm-checkpoint"))
        return slm_fail(SLM_E_FORMAT, "%s: \"format\" is not \"shardlm-checkpoint\"", mp);
    if ((st = slm_json_num(mp, o, "format_version", 0, 1e9, true, &d))) return st;
    if ((int)d != SLM_CKPT_FORMAT_VERSION)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: format_version %d is not supported (this shardlm reads version %d)",
                        mp, (int)d, SLM_CKPT_FORMAT_VERSION);
    if ((st = slm_json_i64(mp, o, "step", 0, INT64_MAX, &M->step)) ||
        (st = slm_json_i64(mp, o, "tokens_seen", 0, INT64_MAX, &M->tokens_seen)))
        return st;
    const cJSON *cfg = slm_json_obj(o, "model_config");
    if (!cfg) return slm_fail(SLM_E_FORMAT, "%s: \"model_config\" missing", mp);
    char *ct = cJSON_PrintUnformatted(cfg);
    st = slm_llama_config_parse(ct, strlen(ct), mp, &M->cfg);
    free(ct);
    return st;
}

// "tokenizer": {"file": plain name, "xxh64": hex} (optional).
static slm_status parse_tokenizer(const char *mp, const cJSON *o, slm_ckpt_meta *M) {
    const cJSON *tk = slm_json_obj(o, "tokenizer");
    if (!tk) return SLM_OK;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tk, "file");
    if (cJSON_IsString(fn) && fn->valuestring[0]) {
        // Export writes OUT_DIR/<file> and reads RUN_DIR/<file>: a plain name only, never
        // a path (the same rule as files[].file).
        if (!safe_file_name(fn->valuestring) || strlen(fn->valuestring) >= sizeof M->tokenizer_file)
            return slm_fail(SLM_E_FORMAT,
                            "%s: tokenizer.file \"%.40s\" is not a plain file name (expected "
                            "a name in the run directory: no '/', no \"..\", printable ASCII, "
                            "under 32 bytes)",
                            mp, fn->valuestring);
        snprintf(M->tokenizer_file, sizeof M->tokenizer_file, "%s", fn->valuestring);
    } else if (fn && !cJSON_IsNull(fn) && !cJSON_IsString(fn)) {
        return slm_fail(SLM_E_FORMAT, "%s: tokenizer.file must be a string", mp);
    }
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(tk, "xxh64");
    if (cJSON_IsString(h)) {
        slm_status st = slm_json_hex64(mp, tk, "xxh64", &M->tokenizer_xxh64);
        if (st) return st;
        M->has_tokenizer = true;
    }
    return SLM_OK;
}

// world_size and "sharding": {strategy, shard_group_size}.
static slm_status parse_sharding(const char *mp, const cJSON *o, slm_ckpt_meta *M) {
    double d = 0;
    slm_status st = slm_json_num(mp, o, "world_size", 1, 1e7, true, &d);
    if (st) return st;
    M->world = (int)d;
    const cJSON *sh = slm_json_obj(o, "sharding");
    if (!sh) return slm_fail(SLM_E_FORMAT, "%s: \"sharding\" missing", mp);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(sh, "strategy");
    if (!cJSON_IsString(s)) return slm_fail(SLM_E_FORMAT, "%s: sharding.strategy missing", mp);
    static const char *const known[] = {"NO_SHARD", "FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD"};
    bool ok = false;
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        ok = ok || !strcmp(s->valuestring, known[k]);
    if (!ok)
        return slm_fail(SLM_E_FORMAT,
                        "%s: sharding.strategy \"%.40s\", expected NO_SHARD, FULL_SHARD, "
                        "SHARD_GRAD_OP or HYBRID_SHARD",
                        mp, s->valuestring);
    snprintf(M->strategy, sizeof M->strategy, "%s", s->valuestring);
    if ((st = slm_json_num(mp, sh, "shard_group_size", 1, 1e7, true, &d))) return st;
    M->shard_group_size = (int)d;
    return SLM_OK;
}

// "optimizer", "lr_schedule", "loader" and "rng_state" (4 hex words).
static slm_status parse_train_state(const char *mp, const cJSON *o, slm_ckpt_meta *M) {
    const cJSON *op = slm_json_obj(o, "optimizer"), *lr = slm_json_obj(o, "lr_schedule"),
                *ld = slm_json_obj(o, "loader");
    const cJSON *rng = slm_json_arr(o, "rng_state");
    if (!op || !lr || !ld || !rng || cJSON_GetArraySize(rng) != 4)
        return slm_fail(SLM_E_FORMAT,
                        "%s: \"optimizer\", \"lr_schedule\", \"loader\" or \"rng_state\" (4 hex "
                        "words) missing",
                        mp);
    slm_status st;
    double v[5] = {0}, d = 0;
    const char *keys[5] = {"lr_peak", "beta1", "beta2", "eps", "weight_decay"};
    for (int i = 0; i < 5; i++)
        if ((st = slm_json_num(mp, op, keys[i], -1e30, 1e30, false, &v[i]))) return st;
    M->adamw = (slm_adamw_hparams){(float)v[0], (float)v[1], (float)v[2], (float)v[3], (float)v[4]};
    if ((st = slm_json_i64(mp, op, "step", 0, INT64_MAX, &M->opt_step))) return st;
    if ((st = slm_json_i64(mp, lr, "step", 0, INT64_MAX, &M->lr_step)) ||
        (st = slm_json_i64(mp, lr, "warmup", 0, INT64_MAX, &M->lr_warmup)) ||
        (st = slm_json_i64(mp, lr, "total", 0, INT64_MAX, &M->lr_total)) ||
        (st = slm_json_num(mp, lr, "lr_min", -1e30, 1e30, false, &d)))
        return st;
    M->lr_min = (float)d;
    if ((st = slm_json_hex64(mp, ld, "seed", &M->loader.seed)) ||
        (st = slm_json_i64(mp, ld, "epoch", 0, INT64_MAX, &M->loader.epoch)) ||
        (st = slm_json_i64(mp, ld, "pos", 0, INT64_MAX, &M->loader.pos)))
        return st;
    for (int i = 0; i < 4; i++) {
        const cJSON *x = cJSON_GetArrayItem(rng, i);
        if (!cJSON_IsString(x) || !slm_parse_hex64(x->valuestring, &M->rng.s[i]))
            return slm_fail(SLM_E_FORMAT, "%s: rng_state[%d] is not 16 hex digits", mp, i);
    }
    return SLM_OK;
}

// "units" and "files"; a source that needs every file's size gets them (S3).
static slm_status parse_layout(slm_ckpt *c, const char *mp, const cJSON *o) {
    const cJSON *us = slm_json_arr(o, "units");
    if (!us) return slm_fail(SLM_E_FORMAT, "%s: \"units\" missing", mp);
    slm_status st = parse_units(c, mp, us);
    if (st) return st;
    const cJSON *fs = slm_json_arr(o, "files");
    if (!fs) return slm_fail(SLM_E_FORMAT, "%s: \"files\" missing", mp);
    st = parse_files(c, mp, fs);
    if (!st && c->src.ops->files) { // every file, for a source that needs them all
        slm_ckpt_src_file *sf = slm_xcalloc((size_t)c->n_files, sizeof *sf);
        for (int i = 0; i < c->n_files; i++)
            sf[i] = src_file(c, &c->files[i]);
        c->src.ops->files(c->src.impl, sf, c->n_files);
        free(sf);
    }
    return st;
}

slm_status slm_ckpt_parse_manifest(slm_ckpt *c, const char *text, size_t len) {
    const char *mp = c->manifest_path;
    cJSON *o = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return slm_fail(SLM_E_FORMAT, "%s: not a JSON object", mp);
    }
    slm_ckpt_meta *M = &c->meta;
    slm_status st = parse_header(mp, o, M);
    if (!st) st = parse_tokenizer(mp, o, M);
    if (!st) st = parse_sharding(mp, o, M);
    if (!st) st = parse_lora(mp, o, M);
    if (!st) st = parse_batch(mp, o, M);
    if (!st) st = parse_skips(mp, o, M);
    if (!st) st = parse_train_state(mp, o, M);
    if (!st) st = parse_layout(c, mp, o);
    cJSON_Delete(o);
    return st;
}

slm_ckpt *slm_ckpt_alloc(const char *dir) {
    slm_ckpt *c = slm_xcalloc(1, sizeof *c);
    c->dir = slm_xstrdup(dir);
    c->manifest_path = slm_path_join(dir, "manifest.json");
    c->cache_file = -1;
    c->src = slm_ckpt_local_source();
    return c;
}

void slm_ckpt_set_source(slm_ckpt *c, slm_ckpt_source src) {
    c->src.ops->free(c->src.impl);
    c->src = src;
}

// Resolves PATH to a step directory (see slm_ckpt_open); caller frees.
static slm_status resolve_dir(const char *path, char **out) {
    char *m = slm_path_join(path, "manifest.json");
    bool direct = slm_is_file(m);
    free(m);
    if (direct) {
        *out = slm_xstrdup(path);
        return SLM_OK;
    }
    const char *roots[2] = {path, NULL};
    char *sub = slm_path_join(path, "checkpoints");
    roots[1] = sub;
    for (int i = 0; i < 2; i++) {
        char *lp = slm_path_join(roots[i], "latest");
        char *txt = NULL;
        size_t len = 0;
        bool have = slm_is_file(lp) && slm_file_read_all(lp, &txt, &len) == SLM_OK;
        if (have) {
            while (len && (txt[len - 1] == '\n' || txt[len - 1] == ' '))
                txt[--len] = 0;
            int64_t s;
            if (!parse_step_name(txt, &s)) {
                slm_status st = slm_fail(SLM_E_FORMAT, "%s: does not name a step_N directory", lp);
                free(txt);
                free(lp);
                free(sub);
                return st;
            }
            *out = slm_path_join(roots[i], txt);
            free(txt);
            free(lp);
            free(sub);
            return SLM_OK;
        }
        free(txt);
        free(lp);
    }
    // No `latest` (a job killed between a commit's rename and its `latest` update, or one with
    // only an interrupted save): name what is there rather than "no checkpoint".
    for (int i = 0; i < 2; i++) {
        int64_t *steps = NULL, pend = slm_ckpt_find_pending(roots[i]);
        int n = list_steps(roots[i], &steps);
        int64_t newest = n ? steps[n - 1] : -1;
        free(steps);
        if (n == 0 && pend < 0) continue;
        char *d = slm_ckpt_step_dir(roots[i], n ? newest : pend, n == 0);
        slm_status st =
            slm_fail(SLM_E_IO, "%s: no latest, but %s %s (%s); %s", path,
                     n ? "it holds committed checkpoints, the newest"
                       : "an interrupted save every rank wrote is in",
                     d, n ? "`latest` missing: a job ended during a commit" : "not yet committed",
                     n ? "name a step directory, or let `train --resume auto` repair latest"
                       : "`train --resume auto` commits it");
        free(d);
        free(sub);
        return st;
    }
    free(sub);
    return slm_fail(SLM_E_IO,
                    "%s: no checkpoint here (neither manifest.json, latest nor checkpoints/latest)",
                    path);
}

slm_status slm_ckpt_open_local(const char *path, slm_ckpt **out) {
    *out = NULL;
    char *dir = NULL;
    slm_status st = resolve_dir(path, &dir);
    if (st) return st;
    slm_ckpt *c = slm_ckpt_alloc(dir);
    free(dir);
    char *text = NULL;
    size_t len = 0;
    st = slm_file_read_all(c->manifest_path, &text, &len);
    if (!st) st = slm_ckpt_parse_manifest(c, text, len);
    free(text);
    if (st) {
        slm_ckpt_free(c);
        return st;
    }
    *out = c;
    return SLM_OK;
}

// Checks once, through the source, that the file exists with its manifest size.
static slm_status open_file(slm_ckpt *c, ck_file *f) {
    if (f->checked) return SLM_OK;
    slm_ckpt_src_file sf = src_file(c, f);
    slm_status st = c->src.ops->head(c->src.impl, &sf);
    if (!st) f->checked = true;
    return st;
}

// Returns a pointer to verified chunk k of file fi (valid until the next call).
static slm_status get_chunk(slm_ckpt *c, int fi, int64_t k, const uint8_t **p, size_t *n) {
    ck_file *f = &c->files[fi];
    if (c->cache_file == fi && c->cache_chunk == k) {
        *p = c->cache;
        *n = c->cache_len;
        return SLM_OK;
    }
    slm_status st = open_file(c, f);
    if (st) return st;
    if (!c->cache) c->cache = slm_xmalloc(SLM_CKPT_CHUNK_BYTES);
    c->cache_file = -1;
    int64_t off = k * (int64_t)SLM_CKPT_CHUNK_BYTES;
    size_t len =
        (size_t)(f->bytes - off < SLM_CKPT_CHUNK_BYTES ? f->bytes - off : SLM_CKPT_CHUNK_BYTES);
    slm_ckpt_src_file sf = src_file(c, f);
    int64_t want = c->want_end < f->bytes ? c->want_end : f->bytes;
    st = c->src.ops->read(c->src.impl, &sf, off, len, want, c->cache);
    if (st) return st;
    uint64_t h = XXH64(c->cache, len, 0);
    if (h != f->chunk[k]) {
        char a[17], b[17];
        slm_hex64(f->chunk[k], a);
        slm_hex64(h, b);
        char *where = c->src.ops->where ? c->src.ops->where(c->src.impl, &sf) : NULL;
        st = slm_fail(SLM_E_CHECKSUM,
                      "%s: checksum mismatch in chunk %" PRId64 " (bytes %" PRId64 "..%" PRId64
                      "; manifest %s, file %s%s); HINT: resume from an older checkpoint with "
                      "--resume PATH",
                      f->path, k, off, off + (int64_t)len, a, b, where ? where : "");
        free(where);
        return st;
    }
    if (k == 0 && (memcmp(c->cache, SLM_CKPT_MAGIC, 8) != 0))
        return slm_fail(SLM_E_FORMAT, "%s: bad magic (not a shardlm checkpoint rank file)",
                        f->path);
    if (k == 0 && check_rank_header(c, f, c->cache)) return SLM_E_FORMAT;
    c->cache_file = fi;
    c->cache_chunk = k;
    c->cache_len = len;
    *p = c->cache;
    *n = len;
    return SLM_OK;
}

// Copies bytes [off, off + len) of file fi into dst, chunk by verified chunk.
static slm_status read_bytes(slm_ckpt *c, int fi, int64_t off, size_t len, uint8_t *dst) {
    c->want_end = off + (int64_t)len;
    while (len > 0) {
        int64_t k = off / SLM_CKPT_CHUNK_BYTES;
        const uint8_t *p = NULL;
        size_t n = 0;
        slm_status st = get_chunk(c, fi, k, &p, &n);
        if (st) return st;
        size_t in = (size_t)(off - k * (int64_t)SLM_CKPT_CHUNK_BYTES);
        size_t take = n - in < len ? n - in : len;
        memcpy(dst, p + in, take);
        dst += take;
        off += (int64_t)take;
        len -= take;
    }
    return SLM_OK;
}

slm_status slm_ckpt_read_range(slm_ckpt *c, int unit, int64_t begin, int64_t end, float *params,
                               float *m, float *v) {
    SLM_ASSERT(unit >= 0 && unit < c->n_units && begin >= 0 && end >= begin);
    int64_t numel = c->units[unit].numel;
    float *dst[3] = {params, m, v};
    // Padding first: zeros for [max(begin, numel), end).
    for (int k = 0; k < 3; k++)
        if (dst[k])
            for (int64_t i = begin > numel ? begin : numel; i < end; i++)
                dst[k][i - begin] = 0.0f;
    int64_t pos = begin, hi = end < numel ? end : numel;
    while (pos < hi) {
        // The file whose stored range holds `pos` and reaches furthest.
        int best = -1;
        int64_t best_end = pos;
        for (int i = 0; i < c->n_files; i++) {
            const slm_ckpt_range *R = &c->files[i].ranges[unit];
            int64_t re = R->begin + R->stored;
            if (R->begin <= pos && re > best_end) {
                best = i;
                best_end = re;
            }
        }
        if (best < 0)
            return slm_fail(SLM_E_FORMAT, "%s: unit %d element %" PRId64 " is in no rank file",
                            c->manifest_path, unit, pos);
        int64_t seg_end = best_end < hi ? best_end : hi;
        const slm_ckpt_range *R = &c->files[best].ranges[unit];
        for (int k = 0; k < 3; k++) {
            if (!dst[k]) continue;
            int64_t off = R->offset + ((int64_t)k * R->stored + (pos - R->begin)) * 4;
            slm_status st = read_bytes(c, best, off, (size_t)(seg_end - pos) * 4,
                                       (uint8_t *)(dst[k] + (pos - begin)));
            // A checksummed file can still hold NaN / inf (saved by a diverged run, or made by
            // hand): refuse it here, naming the tensor, rather than train or generate from it.
            static const char *what[3] = {"weights", "AdamW m", "AdamW v"};
            if (!st)
                st = slm_check_finite(&c->units[unit], unit, pos, dst[k] + (pos - begin),
                                      seg_end - pos, what[k], c->files[best].path);
            if (st) return st;
        }
        pos = seg_end;
    }
    return SLM_OK;
}

slm_status slm_ckpt_check_files(slm_ckpt *c) {
    for (int i = 0; i < c->n_files; i++) {
        slm_status st = open_file(c, &c->files[i]);
        if (st) return st;
    }
    return SLM_OK;
}

slm_status slm_ckpt_verify(slm_ckpt *c) {
    for (int i = 0; i < c->n_files; i++) {
        ck_file *f = &c->files[i];
        slm_status st = open_file(c, f);
        if (st) return st;
        slm_ckpt_src_file sf = src_file(c, f);
        if (!c->src.ops
                 ->hash) { // every chunk's XXH64 (the chunks cover the whole file), the header
            c->want_end = f->bytes;
            for (int64_t k = 0; k < f->n_chunks; k++) {
                const uint8_t *p;
                size_t n;
                if ((st = get_chunk(c, i, k, &p, &n))) return st;
            }
            continue;
        }
        uint64_t h;
        if ((st = c->src.ops->hash(c->src.impl, &sf, &h))) return st;
        if (h != f->xxh64) {
            char a[17], b[17];
            slm_hex64(f->xxh64, a);
            slm_hex64(h, b);
            return slm_fail(SLM_E_CHECKSUM,
                            "%s: checksum mismatch (manifest %s, file %s); HINT: resume from an "
                            "older checkpoint with --resume PATH",
                            f->path, a, b);
        }
        uint8_t hdr[SLM_CKPT_HEADER_BYTES];
        if (c->src.ops->read(c->src.impl, &sf, 0, sizeof hdr, sizeof hdr, hdr))
            return slm_fail(SLM_E_IO, "%s: cannot read the header", f->path);
        if (memcmp(hdr, SLM_CKPT_MAGIC, 8) || slm_get_le32(hdr + 8) != SLM_CKPT_FORMAT_VERSION ||
            (int)slm_get_le32(hdr + 20) != c->n_units)
            return slm_fail(SLM_E_FORMAT,
                            "%s: header does not match the manifest (magic, version or units)",
                            f->path);
        if ((st = check_rank_header(c, f, hdr))) return st;
    }
    return SLM_OK;
}

static bool close_f(float a, float b) {
    return fabsf(a - b) <= 1e-6f * fabsf(b);
}

slm_status slm_ckpt_check_model(const slm_ckpt *c, const slm_llama *m) {
    const slm_llama_config *a = &c->meta.cfg, *b = &m->cfg;
    const char *mp = c->manifest_path;
#define CK_INT(f)                                                                                  \
    if (a->f != b->f)                                                                              \
        return slm_fail(SLM_E_ARG, "%s: model_config.%s is %d, the model has %d", mp, #f,          \
                        (int)a->f, (int)b->f);
    CK_INT(vocab_size)
    CK_INT(hidden_size)
    CK_INT(intermediate_size)
    CK_INT(num_hidden_layers)
    CK_INT(num_attention_heads)
    CK_INT(num_key_value_heads)
    CK_INT(tie_word_embeddings)
    CK_INT(head_dim)
#undef CK_INT
    if (!close_f(a->rms_norm_eps, b->rms_norm_eps) || !close_f(a->rope_theta, b->rope_theta))
        return slm_fail(SLM_E_ARG,
                        "%s: model_config rms_norm_eps / rope_theta differ (%g/%g vs %g/%g)", mp,
                        a->rms_norm_eps, a->rope_theta, b->rms_norm_eps, b->rope_theta);
    if (!slm_llama_rope_same(a, b))
        return slm_fail(SLM_E_ARG,
                        "%s: model_config RoPE scaling differs (rope_type %s factor %g vs "
                        "rope_type %s factor %g, or its llama3 bands)",
                        mp, slm_rope_type_name(a->rope_type), (double)a->rope_factor,
                        slm_rope_type_name(b->rope_type), (double)b->rope_factor);
    const slm_lora_config *la = &c->meta.lora;
    if (la->rank > 0 && !(m->lora.rank > 0 && slm_lora_config_same(la, &m->lora)))
        return slm_fail(SLM_E_ARG,
                        "%s: a LoRA checkpoint (r %d, alpha %g, dropout %g) and a model %s (r %d, "
                        "alpha %g, dropout %g, or other target modules)",
                        mp, la->rank, (double)la->alpha, (double)la->dropout,
                        m->lora.rank > 0 ? "with other adapters" : "without adapters", m->lora.rank,
                        (double)m->lora.alpha, (double)m->lora.dropout);
    const slm_unit_layout *mu = la->rank > 0 ? m->lora_units : m->units;
    int mn = la->rank > 0 ? m->cfg.num_hidden_layers : m->n_units;
    if (c->n_units != mn)
        return slm_fail(SLM_E_ARG, "%s: %d units, the model has %d", mp, c->n_units, mn);
    for (int u = 0; u < c->n_units; u++) {
        const slm_unit_layout *x = &c->units[u], *y = &mu[u];
        if (x->numel != y->numel || x->n_views != y->n_views)
            return slm_fail(SLM_E_ARG,
                            "%s: unit %d has %" PRId64 " elements in %d tensors, the model %" PRId64
                            " in %d",
                            mp, u, x->numel, x->n_views, y->numel, y->n_views);
        for (int i = 0; i < x->n_views; i++) {
            const slm_param_view *p = &x->views[i], *q = &y->views[i];
            if (strcmp(p->name, q->name) || p->offset != q->offset || p->ndim != q->ndim ||
                p->shape[0] != q->shape[0] || (p->ndim > 1 && p->shape[1] != q->shape[1]))
                return slm_fail(SLM_E_ARG,
                                "%s: unit %d tensor %d: %s [%" PRId64 "%s] at %" PRId64
                                " vs the model's %s at %" PRId64,
                                mp, u, i, p->name, p->shape[0], p->ndim > 1 ? ", ..." : "",
                                p->offset, q->name, q->offset);
        }
    }
    return SLM_OK;
}

void slm_ckpt_print_summary(const slm_ckpt *c, void *file) {
    FILE *f = file;
    const slm_ckpt_meta *M = &c->meta;
    int64_t total = 0;
    for (int u = 0; u < c->n_units; u++)
        total += c->units[u].numel;
    fprintf(f, "checkpoint   %s\n", c->dir);
    fprintf(f, "format       shardlm-checkpoint v%d\n", SLM_CKPT_FORMAT_VERSION);
    fprintf(f, "step         %" PRId64 " (optimizer t %" PRId64 ", lr step %" PRId64 ")\n", M->step,
            M->opt_step, M->lr_step);
    fprintf(f, "tokens_seen  %" PRId64 "\n", M->tokens_seen);
    fprintf(f,
            "model        L=%d C=%d F=%d H=%d KV=%d D=%d%s V=%d tie=%d, %" PRId64
            " params in %d units\n",
            M->cfg.num_hidden_layers, M->cfg.hidden_size, M->cfg.intermediate_size,
            M->cfg.num_attention_heads, M->cfg.num_key_value_heads, slm_llama_head_dim(&M->cfg),
            M->cfg.head_dim > 0 ? " (head_dim)" : "", M->cfg.vocab_size,
            (int)M->cfg.tie_word_embeddings, total, c->n_units);
    fprintf(f, "sharding     %s, world %d, shard group %d\n", M->strategy, M->world,
            M->shard_group_size);
    fprintf(f, "optimizer    AdamW lr %g betas (%g, %g) eps %g wd %g\n", M->adamw.lr_peak,
            M->adamw.beta1, M->adamw.beta2, M->adamw.eps, M->adamw.weight_decay);
    fprintf(f, "loader       epoch %" PRId64 " pos %" PRId64 "\n", M->loader.epoch, M->loader.pos);
    if (M->has_batch) {
        int64_t g = (int64_t)M->batch * M->world * M->grad_accum;
        fprintf(f,
                "batch        --batch %d x %d rank%s x --grad-accum %d = %" PRId64
                " sequences of %d tokens per step (a resume must keep both)\n",
                M->batch, M->world, M->world == 1 ? "" : "s", M->grad_accum, g, M->seq);
    } else
        fprintf(f, "batch        not recorded (an older checkpoint: a resume cannot check it)\n");
    if (M->nonfinite_skips || M->empty_skips)
        fprintf(f,
                "skips        %" PRId64 " non-finite (%" PRId64 " in a row at the end), %" PRId64
                " without a target token\n",
                M->nonfinite_skips, M->nonfinite_in_a_row, M->empty_skips);
    if (M->lora.rank > 0) { // the units above are the adapters
        char h[17];
        slm_hex64(M->lora_base_xxh64, h);
        fprintf(f, "lora         r %d alpha %g dropout %g targets", M->lora.rank,
                (double)M->lora.alpha, (double)M->lora.dropout);
        for (int t = 0; t < SLM_LORA_N_TARGETS; t++)
            if (M->lora.targets & (1u << t)) fprintf(f, " %s", slm_lora_target_name(t));
        fprintf(f, "; adapters only, base %s xxh64 %s\n", M->lora_base, h);
    }
    if (M->has_tokenizer) {
        char h[17];
        slm_hex64(M->tokenizer_xxh64, h);
        fprintf(f, "tokenizer    %s xxh64 %s\n", M->tokenizer_file, h);
    }
    for (int i = 0; i < c->n_files; i++) {
        char h[17];
        slm_hex64(c->files[i].xxh64, h);
        fprintf(f, "file         %s rank %d %" PRId64 " bytes xxh64 %s\n", c->files[i].name,
                c->files[i].rank, c->files[i].bytes, h);
    }
}
