// The run directory: model.bin (weights, unit by unit), config.json and the tokenizer copy.
// Format in train.h; the checkpoint issue replaces model.bin with sharded checkpoints.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include <sys/resource.h>
#include <unistd.h>

#include "train/train.h"
#include "data/data.h"
#include "train/train_internal.h"

#define MODEL_MAGIC "SLMMODL1"
#define MODEL_VERSION 1u
#define MODEL_HEADER_BYTES 64

static void put_u32(uint8_t *p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) x |= (uint32_t)p[i] << (8 * i);
    return x;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x |= (uint64_t)p[i] << (8 * i);
    return x;
}

double slm_train_mem_available(void) { return slm_mem_available(); }

const char *slm_train_fmt_bytes(double bytes, char buf[32]) { return slm_fmt_bytes(bytes, buf); }

// Writes `n` bytes to `f` (named `path` in the message).
static slm_status put_bytes(FILE *f, const void *p, size_t n, const char *path) {
    if (n && fwrite(p, 1, n, f) != n)
        return slm_fail(SLM_E_IO, "%s: write failed: %s", path, strerror(errno ? errno : EIO));
    return SLM_OK;
}

// Streams the header, the unit index and each unit's parameters into `path` atomically
// (path.tmp.<pid>, fsync, rename, fsync of the directory): no copy of the weights is made, so
// saving needs no memory beyond the model itself.
slm_status slm_model_save(const slm_llama *m, const char *path) {
    int64_t total = 0;
    for (int u = 0; u < m->n_units; u++) total += m->units[u].numel;
    XXH64_state_t *hs = XXH64_createState();
    if (!hs) return slm_fail(SLM_E_NOMEM, "%s: cannot allocate a hash state", path);
    XXH64_reset(hs, 0);
    for (int u = 0; u < m->n_units; u++) // the host is little-endian: f32 bytes as they are
        XXH64_update(hs, m->params[u], (size_t)m->units[u].numel * sizeof(float));
    uint64_t hash = XXH64_digest(hs);
    XXH64_freeState(hs);
    uint8_t h[MODEL_HEADER_BYTES] = {0};
    memcpy(h, MODEL_MAGIC, 8);
    put_u32(h + 8, MODEL_VERSION);
    put_u32(h + 12, (uint32_t)m->n_units);
    put_u64(h + 16, (uint64_t)total);
    put_u64(h + 24, hash);
    size_t pl = strlen(path) + 32;
    char *tmp = slm_xmalloc(pl);
    snprintf(tmp, pl, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        slm_status st = slm_fail(SLM_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    errno = 0;
    slm_status st = put_bytes(f, h, sizeof h, tmp);
    for (int u = 0; !st && u < m->n_units; u++) {
        uint8_t n8[8];
        put_u64(n8, (uint64_t)m->units[u].numel);
        st = put_bytes(f, n8, 8, tmp);
    }
    for (int u = 0; !st && u < m->n_units; u++)
        st = put_bytes(f, m->params[u], (size_t)m->units[u].numel * sizeof(float), tmp);
    if (!st && fflush(f) != 0)
        st = slm_fail(SLM_E_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (!st && fsync(fileno(f)) != 0)
        st = slm_fail(SLM_E_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && !st) st = slm_fail(SLM_E_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0)
        st = slm_fail(SLM_E_IO, "%s: rename to %s failed: %s", tmp, path, strerror(errno));
    if (st) {
        remove(tmp);
    } else {
        char *dir = slm_xstrdup(path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        st = slm_fsync_dir(slash ? (dir[0] ? dir : "/") : ".");
        free(dir);
    }
    free(tmp);
    return st;
}

slm_status slm_model_load(slm_llama *m, const char *path) {
    slm_map map = {0};
    slm_status st = slm_map_file(path, &map);
    if (st) return st;
    const uint8_t *d = map.data;
    int64_t total = 0;
    for (int u = 0; u < m->n_units; u++) total += m->units[u].numel;
    size_t index_bytes = (size_t)m->n_units * 8;
    size_t want = MODEL_HEADER_BYTES + index_bytes + (size_t)total * sizeof(float);
    if (map.len < MODEL_HEADER_BYTES || memcmp(d, MODEL_MAGIC, 8) != 0) {
        st = slm_fail(SLM_E_FORMAT, "%s: not a shardlm model.bin (magic \"%s\" expected)", path,
                      MODEL_MAGIC);
        goto out;
    }
    if (get_u32(d + 8) != MODEL_VERSION) {
        st = slm_fail(SLM_E_FORMAT, "%s: version %u, expected %u", path, get_u32(d + 8),
                      MODEL_VERSION);
        goto out;
    }
    if (get_u32(d + 12) != (uint32_t)m->n_units || get_u64(d + 16) != (uint64_t)total) {
        st = slm_fail(SLM_E_FORMAT,
                      "%s: %u units / %llu elements, but config.json describes %d units / %lld "
                      "elements (weights from another model?)",
                      path, get_u32(d + 12), (unsigned long long)get_u64(d + 16), m->n_units,
                      (long long)total);
        goto out;
    }
    if (map.len != want) {
        st = slm_fail(SLM_E_FORMAT, "%s: %zu bytes, expected %zu (truncated?)", path, map.len,
                      want);
        goto out;
    }
    for (int u = 0; u < m->n_units; u++) {
        uint64_t n = get_u64(d + MODEL_HEADER_BYTES + 8 * (size_t)u);
        if (n != (uint64_t)m->units[u].numel) {
            st = slm_fail(SLM_E_FORMAT, "%s: unit %d has %llu elements, expected %lld", path, u,
                          (unsigned long long)n, (long long)m->units[u].numel);
            goto out;
        }
    }
    const uint8_t *payload = d + MODEL_HEADER_BYTES + index_bytes;
    uint64_t h = slm_xxh64(payload, (size_t)total * sizeof(float), 0);
    if (h != get_u64(d + 24)) {
        char a[17], b[17];
        slm_hex64(get_u64(d + 24), a);
        slm_hex64(h, b);
        st = slm_fail(SLM_E_CHECKSUM, "%s: payload checksum mismatch (header %s, data %s)", path,
                      a, b);
        goto out;
    }
    size_t off = 0;
    for (int u = 0; u < m->n_units; u++) {
        memcpy(m->params[u], payload + off, (size_t)m->units[u].numel * sizeof(float));
        off += (size_t)m->units[u].numel * sizeof(float);
        st = slm_check_finite(&m->units[u], u, 0, m->params[u], m->units[u].numel, "weights",
                              path);
        if (st) goto out;
    }
out:
    slm_map_free(&map);
    return st;
}

static slm_status check_model_file(const char *cfg_path, const char *bin_path,
                                   const slm_llama_config *cfg) {
    slm_llama lay;
    slm_status st = slm_llama_init(&lay, cfg, false); // the unit layout only
    if (st) return st;
    int n_units = lay.n_units;
    int64_t total = 0;
    for (int u = 0; u < n_units; u++) total += lay.units[u].numel;
    slm_llama_free(&lay);
    FILE *f = fopen(bin_path, "rb");
    if (!f) return slm_fail(SLM_E_IO, "%s: cannot open", bin_path);
    uint8_t h[MODEL_HEADER_BYTES];
    size_t got = fread(h, 1, sizeof h, f);
    long long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = (long long)ftell(f);
    fclose(f);
    if (got < sizeof h || memcmp(h, MODEL_MAGIC, 8) != 0)
        return slm_fail(SLM_E_FORMAT, "%s: not a shardlm model.bin (magic \"%s\" expected)",
                        bin_path, MODEL_MAGIC);
    double want = MODEL_HEADER_BYTES + 8.0 * n_units + (double)total * sizeof(float);
    if (get_u32(h + 12) != (uint32_t)n_units || get_u64(h + 16) != (uint64_t)total ||
        (double)len != want)
        return slm_fail(SLM_E_FORMAT,
                        "%s: %u units / %llu elements (%lld bytes), but %s describes %d units / "
                        "%lld elements (%.0f bytes): the two files are from different models",
                        bin_path, get_u32(h + 12), (unsigned long long)get_u64(h + 16), len,
                        cfg_path, n_units, (long long)total, want);
    // Parameters and gradients (slm_llama_init allocates both).
    double need = 2.0 * (double)total * sizeof(float), avail = slm_train_mem_available();
    if (avail > 0 && need > avail) {
        char a[32], b[32];
        return slm_fail(SLM_E_NOMEM,
                        "%s: the model needs %s for its parameters and gradients, more than the "
                        "%s of memory available (physical memory / ulimit -v)",
                        cfg_path, slm_train_fmt_bytes(need, a), slm_train_fmt_bytes(avail, b));
    }
    return SLM_OK;
}

slm_status slm_run_open(const char *run_dir, slm_llama *m, slm_tokenizer **tok,
                        bool need_tokenizer) {
    if (tok) *tok = NULL;
    if (!slm_is_dir(run_dir))
        return slm_fail(SLM_E_IO, "%s: not a directory (expected a run directory written by "
                                  "shardlm train)", run_dir);
    char *cfg_path = slm_path_join(run_dir, "config.json");
    char *bin_path = slm_path_join(run_dir, "model.bin");
    slm_llama_config cfg;
    slm_status st = slm_llama_config_load(cfg_path, &cfg);
    if (st) goto out;
    // model.bin's header and size against config.json's layout before any big allocation: a
    // config.json that does not describe these weights (or that would not fit) fails cleanly.
    st = check_model_file(cfg_path, bin_path, &cfg);
    if (st) goto out;
    st = slm_llama_init(m, &cfg, true);
    if (st) goto out;
    st = slm_model_load(m, bin_path);
    if (st) goto fail_model;
    if (tok) {
        static const char *names[] = {"tokenizer.json", "tokenizer.model"};
        for (int i = 0; i < 2 && !*tok; i++) {
            char *p = slm_path_join(run_dir, names[i]);
            if (slm_is_file(p)) st = slm_tokenizer_load(p, tok);
            free(p);
            if (st) goto fail_model;
        }
        if (!*tok && need_tokenizer) {
            st = slm_fail(SLM_E_IO, "%s: no tokenizer.json or tokenizer.model in the run "
                                    "directory", run_dir);
            goto fail_model;
        }
        if (*tok && slm_tokenizer_vocab_size(*tok) > cfg.vocab_size) {
            st = slm_fail(SLM_E_ARG, "%s: tokenizer has %d ids but the model's vocab_size is %d",
                          run_dir, slm_tokenizer_vocab_size(*tok), cfg.vocab_size);
            slm_tokenizer_free(*tok);
            *tok = NULL;
            goto fail_model;
        }
    }
    goto out;
fail_model:
    slm_llama_free(m);
out:
    free(cfg_path);
    free(bin_path);
    return st;
}

slm_status slm_run_check_dataset(const char *run_dir, const char *data_dir) {
    static const char *names[] = {"tokenizer.json", "tokenizer.model"};
    char *tp = NULL;
    for (int i = 0; i < 2 && !tp; i++) {
        char *p = slm_path_join(run_dir, names[i]);
        if (slm_is_file(p)) tp = p;
        else free(p);
    }
    if (!tp) return SLM_OK; // a run without a tokenizer copy: nothing to compare
    slm_dataset ds;
    slm_status st = slm_dataset_open(data_dir, &ds);
    uint64_t h = 0;
    if (!st) st = slm_file_xxh64(tp, &h);
    if (!st && h != ds.tokenizer_xxh64) {
        char a[17], b[17];
        slm_hex64(h, a);
        slm_hex64(ds.tokenizer_xxh64, b);
        st = slm_fail(SLM_E_FORMAT,
                      "%s (xxh64 %s) differs from the tokenizer dataset %s was prepared with "
                      "(%s, xxh64 %s in manifest.json): the token ids would mean other text; "
                      "evaluate on data prepared with the run's tokenizer",
                      tp, a, data_dir, ds.tokenizer_file, b);
    }
    slm_dataset_free(&ds); // zeroed by slm_dataset_open, so safe on its errors too
    free(tp);
    return st;
}
