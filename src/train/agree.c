// Cross-rank agreement on a training run's settings (slm_train_agree, train.h): the list of
// (name, canonical value) pairs every rank must hold identically, compared by
// slm_dist_agree_values before any other collective. The options come from the option table
// (train/options.c: every entry not marked SLM_OPTF_PER_RANK), then what they point at.
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "dist/dist.h"
#include "objstore/objstore.h"
#include "train/train.h"
#include "train/train_internal.h"

#define AGREE_CAP 128
#define AGREE_VAL 192

typedef struct agree_list {
    slm_agree_item items[AGREE_CAP];
    char vals[AGREE_CAP][AGREE_VAL];
    int n;
} agree_list;

// Appends one item; the value is formatted into the list's own storage.
static void add(agree_list *l, const char *name, slm_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(agree_list *l, const char *name, slm_status code, const char *fmt, ...) {
    if (l->n == AGREE_CAP) slm_fatal("train: more than %d agreed settings", AGREE_CAP);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->vals[l->n], AGREE_VAL, fmt, ap);
    va_end(ap);
    l->items[l->n] = (slm_agree_item){name, l->vals[l->n], code};
    l->n++;
}

static const char *on_off(bool b) {
    return b ? "on" : "off";
}
static const char *str_or_unset(const char *s) {
    return s ? s : "(unset)";
}

// "xxh64 0123456789abcdef" of a file, or why it cannot be read (the reason is the same text on
// ranks that fail the same way).
static void add_file_hash(agree_list *l, const char *name, const char *path) {
    uint64_t h = 0;
    if (slm_file_xxh64(path, &h) == SLM_OK)
        add(l, name, SLM_E_FORMAT, "xxh64 %016llx (%s)", (unsigned long long)h, path);
    else
        add(l, name, SLM_E_FORMAT, "unreadable (%s)", path);
}

// The run directory every rank writes into must be one directory: a relative --out is compared
// joined to the rank's working directory (mpirun --wdir / srun --chdir may differ per rank).
static void add_abs_path(agree_list *l, const char *name, const char *path) {
    if (!path) {
        add(l, name, SLM_E_ARG, "(unset)");
        return;
    }
    char cwd[4096];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd))
        add(l, name, SLM_E_ARG, "%s", path);
    else
        add(l, name, SLM_E_ARG, "%s/%s", cwd, path);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// One XXH64 over the --init-from-hf directory's weights: every *.safetensors file (and the
// index) in name order, each file's hash folded in, so ranks that would start from different
// weights of the same shapes (node-local copies of two exports) are told apart. Reads the
// weights once (about a second per few GB from the page cache).
static void add_hf_weights_hash(agree_list *l, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        add(l, "--init-from-hf weights", SLM_E_FORMAT, "unreadable (%s)", dir);
        return;
    }
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        bool st_file = len > 12 && !strcmp(e->d_name + len - 12, ".safetensors");
        bool index = !strcmp(e->d_name, "model.safetensors.index.json");
        if (!st_file && !index) continue;
        names = slm_xrealloc(names, (n + 1) * sizeof *names);
        names[n++] = slm_xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    uint64_t acc = 0;
    bool ok = n > 0;
    for (size_t i = 0; i < n; i++) {
        char *p = slm_path_join(dir, names[i]);
        uint64_t h = 0;
        if (slm_file_xxh64(p, &h) != SLM_OK) ok = false;
        uint64_t pair[2] = {acc, h};
        acc = slm_xxh64(pair, sizeof pair, 0);
        free(p);
        free(names[i]);
    }
    free(names);
    if (ok)
        add(l, "--init-from-hf weights", SLM_E_FORMAT, "xxh64 %016llx over %zu files (%s)",
            (unsigned long long)acc, n, dir);
    else
        add(l, "--init-from-hf weights", SLM_E_FORMAT, "unreadable (%s)", dir);
}

// The value ranks compare for the options whose field alone is not it: --data of a synthetic
// run, --min-lr as resolved (< 0: lr / 10), --s3-prefix-shards (0 is 1). False for the other
// options (their text is slm_opt_value_text's).
static bool compared_value(const slm_opt *e, const slm_train_opts *o, char *buf, size_t cap) {
    if (!strcmp(e->name, "--data"))
        snprintf(buf, cap, "%s", o->synthetic ? "(--synthetic)" : str_or_unset(o->data_dir));
    else if (!strcmp(e->name, "--min-lr"))
        snprintf(buf, cap, "%.9g", (double)(o->min_lr >= 0 ? o->min_lr : o->adamw.lr_peak / 10.0f));
    else if (!strcmp(e->name, "--s3-prefix-shards"))
        snprintf(buf, cap, "%d", o->s3_prefix_shards > 1 ? o->s3_prefix_shards : 1);
    else
        return false;
    return true;
}

slm_status slm_train_agree(const slm_train_opts *o) {
    if (slm_dist_world() == 1) return SLM_OK;
    agree_list *l = slm_xcalloc(1, sizeof *l);
    const slm_status A = SLM_E_ARG;
    // The options of the table (options.c) that ranks must agree on, in --help order, as
    // canonical text (slm_opt_value_text) or as the run resolves them (compared_value).
    for (const slm_opt *e = slm_train_options; e->type != SLM_OPT_END; e++) {
        if (e->type == SLM_OPT_SECTION || (e->flags & SLM_OPTF_PER_RANK)) continue;
        if (!strcmp(e->name, "--heartbeat-dir")) { // one directory, seen from every rank
            add_abs_path(l, e->name, o->heartbeat_dir);
            continue;
        }
        char v[AGREE_VAL];
        if (!compared_value(e, o, v, sizeof v)) slm_opt_value_text(e, o, v, sizeof v);
        add(l, e->name, A, "%s", v);
        if (!strcmp(e->name, "--out"))
            add_abs_path(l, "--out (from each rank's working directory)", o->out_dir);
    }
    {
        // Endpoint and region as each rank resolves them (option, environment, profile).
        slm_s3_config c;
        bool s3 = o->ckpt_uri || slm_s3_is_uri(o->data_dir) || slm_s3_is_uri(o->resume);
        if (s3 && slm_s3_config_load(&c, NULL, NULL) == SLM_OK) {
            add(l, "--s3-endpoint", A, "%s", c.endpoint);
            add(l, "--s3-region", A, "%s", c.region);
            slm_s3_config_free(&c);
        } else {
            add(l, "--s3-endpoint", A, "%s", "(unused)");
            add(l, "--s3-region", A, "%s", "(unused)");
        }
    }
    // What the options point at, read on every rank (a node-local copy may differ).
    slm_llama_config c;
    if (slm_train_resolve_config(o->model, o->vocab_size, o->T, &c) == SLM_OK) {
        add(l, "model config", SLM_E_FORMAT,
            "vocab %d, hidden %d, intermediate %d, layers %d, heads %d, kv heads %d, max "
            "positions %d, rms eps %.9g, rope theta %.9g, tied %s, init std %.9g, head dim %d",
            c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
            c.num_attention_heads, c.num_key_value_heads, c.max_position_embeddings,
            (double)c.rms_norm_eps, (double)c.rope_theta, on_off(c.tie_word_embeddings),
            (double)c.initializer_range, slm_llama_head_dim(&c));
        // its own item, so that a message names it (the line above is long)
        add(l, "model config rope scaling", SLM_E_FORMAT,
            "%s factor %.9g low %.9g high %.9g original positions %d",
            slm_rope_type_name(c.rope_type), (double)c.rope_factor, (double)c.rope_low_freq_factor,
            (double)c.rope_high_freq_factor, (int)c.rope_original_max_position_embeddings);
    } else {
        add(l, "model config", SLM_E_FORMAT, "invalid (%.120s)", slm_errmsg());
        add(l, "model config rope scaling", SLM_E_FORMAT, "(invalid model config)");
    }
    // Always the same items on every rank (a missing one would read as a different build).
    if (o->synthetic || !o->data_dir) {
        add(l, "dataset manifest", SLM_E_FORMAT, "(none)");
        add(l, "dataset tokenizer", SLM_E_FORMAT, "(none)");
    } else {
        char *p = slm_path_join(o->data_dir, "manifest.json");
        add_file_hash(l, "dataset manifest", p);
        free(p);
        slm_dataset ds;
        if (slm_dataset_open(o->data_dir, &ds) == SLM_OK) {
            add_file_hash(l, "dataset tokenizer", ds.tokenizer_file);
            slm_dataset_free(&ds);
        } else {
            add(l, "dataset tokenizer", SLM_E_FORMAT, "unknown (dataset does not open)");
        }
    }
    if (o->init_from_hf) {
        char *p = slm_path_join(o->init_from_hf, "config.json");
        add_file_hash(l, "--init-from-hf config.json", p);
        free(p);
        add_hf_weights_hash(l, o->init_from_hf);
    } else {
        add(l, "--init-from-hf config.json", SLM_E_FORMAT, "(none)");
        add(l, "--init-from-hf weights", SLM_E_FORMAT, "(none)");
    }
    if (o->init_from_gguf)
        add_file_hash(l, "--init-from-gguf file", o->init_from_gguf);
    else
        add(l, "--init-from-gguf file", SLM_E_FORMAT, "(none)");
    slm_status st = slm_dist_agree_values(l->items, l->n);
    free(l);
    return st;
}
