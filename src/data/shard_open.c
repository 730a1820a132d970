// One verified shard open (the loader's and the unigram entropy's checks) and the unigram
// entropy of a split.
#include "data/data.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

slm_status slm_shard_open_verified(const slm_dataset *ds, const slm_shard_info *si, slm_map *map,
                                   slm_shard_header *h) {
    char *path = slm_path_join(ds->dir, si->file);
    slm_status st = slm_map_file(path, map);
    if (st) {
        free(path);
        return st;
    }
    if (map->len != si->bytes) {
        st = slm_fail(SLM_E_FORMAT,
                      "%s: file is %zu bytes, manifest says %" PRIu64 " (truncated or "
                      "replaced); HINT: rerun shardlm prep",
                      path, map->len, si->bytes);
    }
    if (!st) {
        uint64_t fh = slm_xxh64(map->data, map->len, 0);
        if (fh != si->xxh64) {
            char a[17], b[17];
            slm_hex64(si->xxh64, a);
            slm_hex64(fh, b);
            st = slm_fail(SLM_E_CHECKSUM,
                          "%s: checksum mismatch (manifest xxh64 %s, file %s): the shard is "
                          "corrupt; HINT: rerun shardlm prep",
                          path, a, b);
        }
    }
    if (!st) st = slm_shard_verify(path, map->data, map->len, (uint32_t)ds->vocab_size, h);
    if (!st && (h->n_tokens != si->n_tokens || h->n_docs != si->n_docs))
        st = slm_fail(SLM_E_FORMAT,
                      "%s: header has %" PRIu64 " tokens / %" PRIu64 " docs, manifest says %" PRIu64
                      " / %" PRIu64,
                      path, h->n_tokens, h->n_docs, si->n_tokens, si->n_docs);
    if (!st && h->masked != ds->masked)
        st = slm_fail(SLM_E_FORMAT, "%s: a version-%" PRIu32 " shard in a %s dataset", path,
                      h->version,
                      ds->masked ? "masked (format_version 2)" : "plain (format_version 1)");
    free(path);
    if (st) slm_map_free(map);
    return st;
}

slm_status slm_split_unigram_entropy(const char *data_dir, const char *split, double *nats,
                                     int64_t *n_tokens) {
    slm_dataset ds;
    slm_status st = slm_dataset_open(data_dir, &ds);
    if (st) return st;
    const slm_split_info *si = !strcmp(split, "train") ? &ds.train
                               : !strcmp(split, "val") ? &ds.val
                                                       : NULL;
    if (!si) {
        slm_dataset_free(&ds);
        return slm_fail(SLM_E_ARG, "unknown split \"%s\" (train or val)", split);
    }
    uint64_t *count = slm_xcalloc((size_t)ds.vocab_size, sizeof(uint64_t));
    uint64_t total = 0;
    for (int s = 0; s < si->n_shards && !st; s++) {
        slm_map map = {0};
        slm_shard_header h;
        st = slm_shard_open_verified(&ds, &si->shards[s], &map, &h);
        if (st) break;
        // Every token is < vocab_size: slm_shard_verify checked it.
        const uint8_t *d = map.data + SLM_SHARD_HEADER_BYTES;
        for (uint64_t i = 0; i < h.n_tokens; i++)
            count[slm_shard_token(d, h.token_bytes, i)]++;
        total += h.n_tokens;
        slm_map_free(&map);
    }
    if (!st && total == 0)
        st = slm_fail(SLM_E_FORMAT, "%s: split \"%s\" is empty", data_dir, split);
    if (!st) {
        double hsum = 0;
        for (int32_t v = 0; v < ds.vocab_size; v++)
            if (count[v]) {
                double pv = (double)count[v] / (double)total;
                hsum -= pv * log(pv);
            }
        *nats = hsum;
        if (n_tokens) *n_tokens = (int64_t)total;
    }
    free(count);
    slm_dataset_free(&ds);
    return st;
}
