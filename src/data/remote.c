// Datasets on S3 (docs/storage.md): `prep --out s3://...` uploads a locally prepared dataset
// (shards and tokenizer first, manifest.json last, so a reader never sees a half-uploaded
// dataset); `train --data s3://...` streams each object sequentially into a local cache
// directory in large range GETs with read-ahead (never one GET per sample), verifying every
// object's XXH64 against the manifest as it arrives, then the loader maps the cache as any local
// dataset (so loader state and resume are unchanged).
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include "data/data.h"
#include "objstore/objstore.h"

#define PIECE_BYTES ((int64_t)16 << 20) // one range GET
#define READ_AHEAD 4                    // range GETs in flight per object

static char *join_key(const char *prefix, const char *name) {
    slm_buf b = {0};
    size_t n = strlen(prefix);
    slm_buf_appendf(&b, "%s%s%s", prefix, n && prefix[n - 1] != '/' ? "/" : "", name);
    return b.data;
}

// True if `path` exists with `bytes` bytes and whole-file XXH64 `h`.
static bool cached_ok(const char *path, uint64_t bytes, uint64_t h) {
    slm_map m = {0};
    if (!slm_is_file(path) || slm_map_file(path, &m)) return false;
    bool ok = m.len == bytes && slm_xxh64(m.data, m.len, 0) == h;
    slm_map_free(&m);
    return ok;
}

// Streams s3://bucket/key into `path` (temp + fsync + rename) in PIECE_BYTES range GETs,
// READ_AHEAD at a time, hashing as it writes; the XXH64 must equal `h`, the size `bytes`.
static slm_status stream_object(slm_s3 *s3, const char *bucket, const char *key, uint64_t bytes,
                                uint64_t h, const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return slm_fail(SLM_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    uint8_t *buf = slm_xmalloc((size_t)(PIECE_BYTES * READ_AHEAD));
    XXH64_state_t *hs = XXH64_createState();
    XXH64_reset(hs, 0);
    slm_status st = SLM_OK;
    for (uint64_t off = 0; off < bytes && !st;) {
        slm_s3_range rg[READ_AHEAD];
        int n = 0;
        uint64_t o = off;
        for (; n < READ_AHEAD && o < bytes; n++) {
            int64_t len = bytes - o < (uint64_t)PIECE_BYTES ? (int64_t)(bytes - o) : PIECE_BYTES;
            rg[n] = (slm_s3_range){.key = key,
                                   .offset = (int64_t)o,
                                   .len = len,
                                   .dst = buf + (size_t)n * (size_t)PIECE_BYTES};
            o += (uint64_t)len;
        }
        st = slm_s3_get_ranges(s3, bucket, rg, n);
        for (int i = 0; i < n && !st; i++) {
            XXH64_update(hs, rg[i].dst, (size_t)rg[i].len);
            const uint8_t *p = rg[i].dst;
            size_t left = (size_t)rg[i].len;
            while (left) {
                ssize_t w = write(fd, p, left);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) {
                    st = slm_fail(SLM_E_IO, "%s: write failed: %s", tmp, strerror(errno));
                    break;
                }
                p += w;
                left -= (size_t)w;
            }
        }
        off = o;
    }
    uint64_t got = XXH64_digest(hs);
    XXH64_freeState(hs);
    free(buf);
    if (!st && got != h) {
        char a[17], b[17];
        slm_hex64(h, a);
        slm_hex64(got, b);
        st = slm_fail(SLM_E_CHECKSUM,
                      "s3://%s/%s: checksum mismatch (manifest %s, object %s); HINT: the object "
                      "was changed or damaged after prep: rerun shardlm prep --out s3://...",
                      bucket, key, a, b);
    }
    if (!st && fsync(fd) != 0) st = slm_fail(SLM_E_IO, "%s: fsync: %s", tmp, strerror(errno));
    close(fd);
    if (!st && rename(tmp, path) != 0)
        st = slm_fail(SLM_E_IO, "%s: rename: %s", path, strerror(errno));
    if (st) unlink(tmp);
    return st;
}

static slm_status fetch_one(slm_s3 *s3, const char *bucket, const char *prefix, const char *dir,
                            const char *name, uint64_t bytes, uint64_t h, int64_t *fetched) {
    char *path = slm_path_join(dir, name);
    slm_status st = SLM_OK;
    if (!cached_ok(path, bytes, h)) {
        char *key = join_key(prefix, name);
        int64_t size = -1;
        bool found = false;
        st = slm_s3_head(s3, bucket, key, &size, &found);
        if (!st && !found)
            st = slm_fail(SLM_E_IO, "s3://%s/%s: missing (listed in the dataset's manifest.json)",
                          bucket, key);
        else if (!st && (uint64_t)size != bytes)
            st = slm_fail(SLM_E_IO,
                          "s3://%s/%s: %" PRId64 " bytes, the manifest says %" PRIu64
                          " (truncated?); HINT: rerun shardlm prep --out s3://...",
                          bucket, key, size, bytes);
        if (!st) st = stream_object(s3, bucket, key, bytes, h, path);
        if (!st) *fetched += (int64_t)bytes;
        free(key);
    }
    free(path);
    return st;
}

slm_status slm_dataset_fetch(const char *uri, const char *cache_dir) {
    char *bucket = NULL, *prefix = NULL;
    slm_status st = slm_s3_uri_parse(uri, &bucket, &prefix);
    if (st) return slm_fail_wrap(st, "--data");
    slm_s3 *s3 = NULL;
    int lock = -1;
    char *text = NULL;
    size_t len = 0;
    slm_dataset ds = {0};
    st = slm_mkdir_p(cache_dir);
    if (!st) st = slm_s3_open_default(NULL, NULL, &s3);
    if (st) goto out;
    // One fetcher at a time per cache directory (ranks of a host share it); the others then
    // find verified files.
    char *lp = slm_path_join(cache_dir, ".fetch.lock");
    lock = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0 || flock(lock, LOCK_EX) != 0)
        st = slm_fail(SLM_E_IO, "%s: cannot lock: %s", lp, strerror(errno));
    free(lp);
    if (st) goto out;
    char *mk = join_key(prefix, "manifest.json");
    bool found = false;
    st = slm_s3_get(s3, bucket, mk, &text, &len, &found);
    if (!st && !found)
        st = slm_fail(SLM_E_IO,
                      "s3://%s/%s: missing; HINT: prepare the dataset with shardlm prep "
                      "--out %s",
                      bucket, mk, uri);
    if (!st) {
        slm_buf what = {0};
        slm_buf_appendf(&what, "s3://%s/%s", bucket, mk);
        st = slm_dataset_parse(cache_dir, what.data, text, len, &ds);
        slm_buf_free(&what);
    }
    free(mk);
    if (st) goto out;
    double t0 = slm_time_s();
    int64_t fetched = 0;
    // The tokenizer file (its name inside the dataset) and every shard of both splits.
    const char *tok = strrchr(ds.tokenizer_file, '/');
    tok = tok ? tok + 1 : ds.tokenizer_file;
    {
        char *key = join_key(prefix, tok);
        char *path = slm_path_join(cache_dir, tok);
        uint64_t h = 0;
        bool ok =
            slm_is_file(path) && slm_file_xxh64(path, &h) == SLM_OK && h == ds.tokenizer_xxh64;
        if (!ok) {
            st = slm_s3_get_file(s3, bucket, key, path);
            if (!st && (slm_file_xxh64(path, &h) || h != ds.tokenizer_xxh64)) {
                char a[17], b[17];
                slm_hex64(ds.tokenizer_xxh64, a);
                slm_hex64(h, b);
                st = slm_fail(SLM_E_CHECKSUM,
                              "s3://%s/%s: checksum mismatch (manifest %s, object %s)", bucket, key,
                              a, b);
            }
        }
        free(key);
        free(path);
    }
    const slm_split_info *sp[2] = {&ds.train, &ds.val};
    for (int k = 0; k < 2 && !st; k++)
        for (int i = 0; i < sp[k]->n_shards && !st; i++) {
            const slm_shard_info *si = &sp[k]->shards[i];
            st = fetch_one(s3, bucket, prefix, cache_dir, si->file, si->bytes, si->xxh64, &fetched);
        }
    if (!st) {
        // manifest last: the cache is a complete dataset only once it is there
        char *mp = slm_path_join(cache_dir, "manifest.json");
        st = slm_file_write_atomic(mp, text, len);
        free(mp);
    }
    if (!st && fetched > 0) {
        double dt = slm_time_s() - t0;
        char b[32];
        slm_info("--data %s: fetched %s into %s in %.2f s (%.1f MiB/s), every object's XXH64 "
                 "verified",
                 uri, slm_fmt_bytes((double)fetched, b), cache_dir, dt,
                 (double)fetched / (1 << 20) / (dt > 0 ? dt : 1e-9));
    }
out:
    if (lock >= 0) close(lock);
    slm_dataset_free(&ds);
    free(text);
    slm_s3_close(s3);
    free(bucket);
    free(prefix);
    return st;
}

slm_status slm_dataset_upload(const char *dir, const char *uri) {
    char *bucket = NULL, *prefix = NULL;
    slm_status st = slm_s3_uri_parse(uri, &bucket, &prefix);
    if (st) return st;
    slm_dataset ds = {0};
    slm_s3 *s3 = NULL;
    st = slm_dataset_open(dir, &ds);
    if (!st) st = slm_s3_open_default(NULL, NULL, &s3);
    const char *tok = ds.tokenizer_file ? strrchr(ds.tokenizer_file, '/') : NULL;
    tok = tok ? tok + 1 : ds.tokenizer_file;
    const slm_split_info *sp[2] = {&ds.train, &ds.val};
    for (int k = -1; k < 2 && !st; k++) {
        int n = k < 0 ? 1 : sp[k]->n_shards;
        for (int i = 0; i < n && !st; i++) {
            const char *name = k < 0 ? tok : sp[k]->shards[i].file;
            char *path = slm_path_join(dir, name), *key = join_key(prefix, name);
            st = slm_s3_put_file(s3, bucket, key, path);
            free(path);
            free(key);
        }
    }
    if (!st) { // the manifest last: readers see the dataset only when every shard is there
        char *path = slm_path_join(dir, "manifest.json"), *key = join_key(prefix, "manifest.json");
        st = slm_s3_put_file(s3, bucket, key, path);
        free(path);
        free(key);
    }
    slm_s3_close(s3);
    slm_dataset_free(&ds);
    free(bucket);
    free(prefix);
    return st ? slm_fail_wrap(st, "prep --out %s", uri) : SLM_OK;
}
