// Shared helpers of the data tests: temp directories and synthetic datasets written through the
// public API (slm_shard_write + slm_dataset_write), with no tokenizer involved.
#ifndef SLM_DATA_TEST_UTIL_H
#define SLM_DATA_TEST_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"

// Makes a fresh temp directory; returns an owned path.
static inline char *tu_mkdtemp(void) {
    char tmpl[] = "/tmp/slm_data_test_XXXXXX";
    char *d = mkdtemp(tmpl);
    if (!d) {
        perror("mkdtemp");
        exit(2);
    }
    return slm_xstrdup(d);
}

// Removes a flat directory (files only) and frees the path.
static inline void tu_rmdir(char *dir) {
    slm_rmdir_flat_quiet(dir);
    free(dir);
}

// Writes a dataset into `dir`: the train split is `n_shards` shards of sizes[i] tokens holding
// the stream value(i) = base + i (i = 0, 1, ... over the concatenation); the val split holds
// n_val tokens base + 0, 1, ... A dummy tokenizer file "tok.json" is written as well.
static inline slm_status tu_make_dataset(const char *dir, const int64_t *sizes, int n_shards,
                                         int64_t n_val, int32_t vocab, int32_t base) {
    slm_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.dir = slm_xstrdup(dir);
    ds.tokenizer_file = slm_path_join(dir, "tok.json");
    ds.tokenizer_type = slm_xstrdup("byte_bpe");
    const char *tok = "{\"dummy\": true}\n";
    slm_status st = slm_file_write_atomic(ds.tokenizer_file, tok, strlen(tok));
    ds.tokenizer_xxh64 = slm_xxh64(tok, strlen(tok), 0);
    ds.vocab_size = vocab;
    ds.bos_id = -1;
    ds.eos_id = -1;
    ds.token_bytes = (uint32_t)vocab <= 65536u ? 2 : 4;
    ds.seed = 7;
    ds.val_fraction = 0.1;
    ds.train.shards = slm_xcalloc((size_t)n_shards + 1, sizeof(slm_shard_info));
    ds.val.shards = slm_xcalloc(2, sizeof(slm_shard_info));
    int64_t next = 0;
    for (int s = 0; s < n_shards + 1 && st == SLM_OK; s++) {
        bool val = s == n_shards;
        int64_t n = val ? n_val : sizes[s];
        if (val && n == 0) break;
        int32_t *t = slm_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *t);
        int64_t first = val ? 0 : next;
        for (int64_t i = 0; i < n; i++)
            t[i] = base + (int32_t)(first + i);
        if (!val) next += n;
        char name[64];
        snprintf(name, sizeof name, "%s_%04d.bin", val ? "val" : "train", s);
        char *p = slm_path_join(dir, name);
        st = slm_shard_write(p, t, (uint64_t)n, n > 0 ? 1 : 0, (uint32_t)vocab);
        free(t);
        slm_split_info *sp = val ? &ds.val : &ds.train;
        slm_shard_info *si = &sp->shards[sp->n_shards++];
        si->file = slm_xstrdup(name);
        si->n_tokens = (uint64_t)n;
        si->n_docs = n > 0 ? 1 : 0;
        si->bytes = SLM_SHARD_HEADER_BYTES + (uint64_t)n * ds.token_bytes;
        if (st == SLM_OK) st = slm_file_xxh64(p, &si->xxh64);
        free(p);
        sp->n_tokens += si->n_tokens;
        sp->n_docs += si->n_docs;
    }
    if (st == SLM_OK) st = slm_dataset_write(&ds);
    slm_dataset_free(&ds);
    return st;
}

#endif
