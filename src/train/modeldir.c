// Opening a model directory (run directory, checkpoint or Hugging Face directory) for every
// reader of weights. Contract in train/modeldir.h.
#include "train/train.h"

#include <errno.h>
#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "objstore/objstore.h"
#include "train/train_internal.h"

static bool has_file(const char *dir, const char *name) {
    char *p = slm_path_join(dir, name);
    bool r = slm_is_file(p);
    free(p);
    return r;
}

static bool has_dir(const char *dir, const char *name) {
    char *p = slm_path_join(dir, name);
    bool r = slm_is_dir(p);
    free(p);
    return r;
}

// DIR/name if that file exists (owned), else NULL.
static char *file_in(const char *dir, const char *name) {
    char *p = slm_path_join(dir, name);
    if (slm_is_file(p)) return p;
    free(p);
    return NULL;
}

// The run directory of a step directory STEP: the directory above STEP's parent when that
// parent is named "checkpoints" (RUN_DIR/checkpoints/step_N, symlinks and ".." resolved); NULL
// for a step directory kept anywhere else (caller frees).
static char *run_dir_of_step(const char *step) {
    char real[PATH_MAX];
    if (!realpath(step, real)) return NULL;
    char *root = slm_path_parent(real); // .../checkpoints
    const char *base = strrchr(root, '/');
    char *run = base && !strcmp(base + 1, "checkpoints") ? slm_path_parent(root) : NULL;
    free(root);
    return run;
}

// RUN_DIR/NAME, the tokenizer copy a checkpoint recorded; warns when it is missing.
static char *recorded_tokenizer(const char *run_dir, const char *name) {
    char *p = file_in(run_dir, name);
    if (!p) slm_warn("%s/%s: not found (the checkpoint recorded it); no tokenizer", run_dir, name);
    return p;
}

// A checkpoints root (RUN_DIR/checkpoints): `latest` or committed step_N directories.
static bool is_ckpt_root(const char *dir) {
    int64_t *steps = NULL;
    int n = slm_ckpt_list_steps(dir, &steps);
    free(steps);
    return n > 0 || has_file(dir, "latest");
}

static bool close_f(float a, float b) {
    return fabsf(a - b) <= 1e-6f * fabsf(b);
}

// A run directory's config.json must describe the model its checkpoint holds.
static slm_status check_run_config(const char *cfg_path, const slm_ckpt *c) {
    slm_llama_config j;
    slm_status st = slm_llama_config_load(cfg_path, &j);
    if (st) return st;
    const slm_llama_config *k = &slm_ckpt_get_meta(c)->cfg;
    const char *field = NULL;
    double a = 0, b = 0;
#define CK(f)                                                                                      \
    if (!field && j.f != k->f) field = #f, a = (double)j.f, b = (double)k->f;
#define CKF(f)                                                                                     \
    if (!field && !close_f(j.f, k->f)) field = #f, a = (double)j.f, b = (double)k->f;
    CK(vocab_size)
    CK(hidden_size)
    CK(intermediate_size)
    CK(num_hidden_layers)
    CK(num_attention_heads)
    CK(num_key_value_heads)
    CK(max_position_embeddings)
    CK(tie_word_embeddings)
    CK(head_dim)
    CKF(rms_norm_eps)
    CKF(rope_theta)
    CK(rope_type)
    CKF(rope_factor)
    CKF(rope_low_freq_factor)
    CKF(rope_high_freq_factor)
    CK(rope_original_max_position_embeddings)
#undef CK
#undef CKF
    if (!field) return SLM_OK;
    return slm_fail(SLM_E_FORMAT,
                    "%s: %s is %g, but the checkpoint %s/manifest.json holds weights with %s %g: "
                    "the two files are from different models",
                    cfg_path, field, a, slm_ckpt_dir(c), field, b);
}

// RUN kind: the newest checkpoint under ROOT that verifies; RUN_DIR (may be NULL) has the
// config.json and tokenizer copy.
static slm_status open_run(slm_model_dir *d, const char *root, const char *run_dir) {
    int64_t *steps = NULL;
    int n = slm_ckpt_list_steps(root, &steps);
    free(steps);
    if (n == 0)
        return slm_fail(SLM_E_IO,
                        "%s: no committed checkpoint in %s (a run directory's weights are its "
                        "checkpoints, step_N directories written by shardlm train; this run "
                        "saved none)",
                        d->path, root);
    slm_status st = slm_ckpt_pick_newest(root, true, "loading", &d->weights_dir, &d->step);
    if (st) return st;
    d->kind = SLM_MODEL_DIR_RUN;
    if ((st = slm_ckpt_open(d->weights_dir, &d->ckpt))) return st;
    const slm_ckpt_meta *M = slm_ckpt_get_meta(d->ckpt);
    d->cfg = M->cfg;
    if (run_dir) {
        char *cp = file_in(run_dir, "config.json");
        if (cp) st = check_run_config(cp, d->ckpt);
        free(cp);
        if (st) return st;
        // The file the checkpoint recorded (training records the copy it made); a checkpoint
        // that recorded none (synthetic data) has none.
        if (M->tokenizer_file[0]) d->tokenizer = recorded_tokenizer(run_dir, M->tokenizer_file);
    }
    return SLM_OK;
}

// CKPT kind: PATH is a step directory; the run directory is PATH/../.. (RUN/checkpoints/step_N).
static slm_status open_step(slm_model_dir *d) {
    d->kind = SLM_MODEL_DIR_CKPT;
    d->weights_dir = slm_xstrdup(d->path);
    slm_status st = slm_ckpt_open(d->path, &d->ckpt);
    if (st) return st;
    if ((st = slm_ckpt_check_files(d->ckpt))) return st;
    const slm_ckpt_meta *M = slm_ckpt_get_meta(d->ckpt);
    d->cfg = M->cfg;
    d->step = M->step;
    char *run = M->tokenizer_file[0] ? run_dir_of_step(d->path) : NULL;
    if (run)
        d->tokenizer = recorded_tokenizer(run, M->tokenizer_file);
    else if (M->tokenizer_file[0])
        slm_warn("%s: not inside RUN_DIR/checkpoints/, so the tokenizer the checkpoint recorded "
                 "(%s) is not looked for",
                 d->path, M->tokenizer_file);
    free(run);
    return SLM_OK;
}

static slm_status open_hf(slm_model_dir *d) {
    d->kind = SLM_MODEL_DIR_HF;
    d->weights_dir = slm_xstrdup(d->path);
    char *cp = slm_path_join(d->path, "config.json");
    slm_status st = slm_llama_config_load(cp, &d->cfg);
    free(cp);
    if (st) return st;
    d->tokenizer = slm_train_find_tokenizer(d->path);
    return SLM_OK;
}

// Which kind PATH is, from the names in it alone (nothing is parsed); HF for anything else.
static slm_model_dir_kind kind_of(const char *p) {
    if (has_file(p, "manifest.json")) return SLM_MODEL_DIR_CKPT;
    if (has_dir(p, "checkpoints") || is_ckpt_root(p)) return SLM_MODEL_DIR_RUN;
    return SLM_MODEL_DIR_HF;
}

// A temp directory under $TMPDIR (owned path in *out).
static slm_status make_tmp_dir(const char *prefix, char **out) {
    const char *td = getenv("TMPDIR");
    char name[64];
    snprintf(name, sizeof name, "%s.XXXXXX", prefix);
    char *tmpl = slm_path_join(td && *td ? td : "/tmp", name);
    if (!mkdtemp(tmpl)) {
        slm_status st = slm_fail(SLM_E_IO, "%s: mkdtemp: %s", tmpl, strerror(errno));
        free(tmpl);
        return st;
    }
    *out = tmpl;
    return SLM_OK;
}

// s3://BUCKET/PREFIX (run prefix, checkpoints prefix or step prefix): the checkpoint through
// range GETs; the tokenizer it recorded is fetched from the run prefix (uploaded there by
// --ckpt-uri) into a temp directory under $TMPDIR.
static slm_status open_remote(slm_model_dir *d) {
    d->kind = SLM_MODEL_DIR_CKPT;
    slm_status st = slm_ckpt_open(d->path, &d->ckpt);
    if (!st) st = slm_ckpt_check_files(d->ckpt);
    if (st) return st;
    const slm_ckpt_meta *M = slm_ckpt_get_meta(d->ckpt);
    d->cfg = M->cfg;
    d->step = M->step;
    d->weights_dir = slm_xstrdup(slm_ckpt_dir(d->ckpt));
    if (!M->tokenizer_file[0]) return SLM_OK;
    // .../checkpoints/step_N -> the run prefix
    char *run = slm_xstrdup(d->weights_dir);
    for (int k = 0; k < 2; k++) {
        char *sl = strrchr(run, '/');
        if (sl && sl > run + 5) *sl = 0;
    }
    char *bucket = NULL, *prefix = NULL;
    st = slm_s3_uri_parse(run, &bucket, &prefix);
    free(run);
    if (st) return st;
    char *tmpl = NULL;
    st = make_tmp_dir("shardlm-tok", &tmpl);
    if (!st) {
        d->tmp_dir = tmpl;
        d->tmp_track[0] = slm_tmp_track(tmpl) + 1;
        slm_buf key = {0};
        slm_buf_appendf(&key, "%s%s%s", prefix, *prefix ? "/" : "", M->tokenizer_file);
        char *path = slm_path_join(tmpl, M->tokenizer_file);
        slm_s3 *s3 = NULL;
        st = slm_s3_open_default(NULL, NULL, &s3);
        int64_t size = 0;
        bool found = false;
        if (!st) st = slm_s3_head(s3, bucket, key.data, &size, &found);
        if (!st && found) st = slm_s3_get_file(s3, bucket, key.data, path);
        if (!st && found) {
            d->tmp_track[1] = slm_tmp_track(path) + 1;
            d->tokenizer = path;
            path = NULL;
        } else if (!st) {
            slm_warn("s3://%s/%s: missing, so the tokenizer the checkpoint recorded is not "
                     "included",
                     bucket, key.data);
        }
        slm_s3_close(s3);
        free(path);
        slm_buf_free(&key);
    }
    free(bucket);
    free(prefix);
    return st;
}

bool slm_is_gguf_file(const char *path) {
    if (!slm_is_file(path)) return false;
    FILE *f = fopen(path, "rb");
    char m[4] = {0};
    bool r = f && fread(m, 1, 4, f) == 4 && !memcmp(m, "GGUF", 4);
    if (f) fclose(f);
    return r;
}

// GGUF kind: config from the metadata; the tokenizer converted into a temp directory.
static slm_status open_gguf(slm_model_dir *d) {
    d->kind = SLM_MODEL_DIR_GGUF;
    d->weights_dir = slm_xstrdup(d->path);
    d->gguf = slm_xcalloc(1, sizeof *d->gguf);
    slm_status st = slm_gguf_open(d->path, d->gguf);
    if (!st) st = slm_gguf_llama_config(d->gguf, &d->cfg);
    if (st) return st;
    bool has_tpl = false;
    d->chat_template = slm_gguf_chat_template(d->gguf, &has_tpl);
    if ((st = make_tmp_dir("shardlm-gguf", &d->tmp_dir))) return st;
    d->tmp_track[0] = slm_tmp_track(d->tmp_dir) + 1;
    st = slm_gguf_write_tokenizer(d->gguf, d->tmp_dir, &d->tokenizer);
    if (!st && d->tokenizer) d->tmp_track[1] = slm_tmp_track(d->tokenizer) + 1;
    if (st == SLM_E_UNSUPPORTED) { // the weights are still usable (eval of prepared data)
        slm_warn("%s: no tokenizer: %s", d->path, slm_errmsg());
        st = SLM_OK;
    }
    return st;
}

slm_status slm_model_gguf_init_weights(const char *path, slm_llama *m) {
    slm_gguf_file g;
    slm_status st = slm_gguf_open(path, &g);
    if (!st) st = slm_gguf_load(m, &g);
    slm_gguf_close(&g);
    return st;
}

slm_status slm_model_gguf_check_shapes(const char *path, const slm_llama_config *cfg) {
    slm_gguf_file g;
    slm_status st = slm_gguf_open(path, &g);
    if (!st) st = slm_gguf_check_shapes(&g, cfg);
    slm_gguf_close(&g);
    return st;
}

static slm_status open_kind(slm_model_dir *d) {
    const char *p = d->path;
    if (slm_s3_is_uri(p)) return open_remote(d);
    if (slm_is_gguf_file(p)) return open_gguf(d);
    if (slm_is_file(p)) { // a file can only be a GGUF one: the reader says why this is not
        slm_gguf_file g;
        slm_status st = slm_gguf_open(p, &g);
        if (!st) { // the magic changed since slm_is_gguf_file looked
            slm_gguf_close(&g);
            return open_gguf(d);
        }
        char *why = slm_xstrdup(slm_errmsg());
        st = slm_fail(st,
                      "%s (a model given as a file must be a GGUF file; else a run directory, a "
                      "checkpoint step_N directory or a Hugging Face directory)",
                      why);
        free(why);
        return st;
    }
    if (!slm_is_dir(p))
        return slm_fail(SLM_E_IO,
                        "%s: %s (expected a run directory written by shardlm train, a "
                        "checkpoint step_N directory, a Hugging Face directory or a GGUF file)",
                        p, access(p, F_OK) ? strerror(errno) : "not a directory");
    if (kind_of(p) == SLM_MODEL_DIR_CKPT) return open_step(d);
    if (has_dir(p, "checkpoints")) {
        char *root = slm_path_join(p, "checkpoints");
        slm_status st = open_run(d, root, p);
        free(root);
        return st;
    }
    if (is_ckpt_root(p)) { // RUN_DIR/checkpoints
        char *run = slm_path_join(p, "..");
        slm_status st = open_run(d, p, run);
        free(run);
        return st;
    }
    if (has_file(p, "config.json") &&
        (has_file(p, "model.safetensors") || has_file(p, "model.safetensors.index.json") ||
         !slm_rundir_is_run_dir(p)))
        return open_hf(d); // a missing weights file is named by slm_hf_load
    if (slm_rundir_is_run_dir(p))
        return slm_fail(SLM_E_IO,
                        "%s: a run directory without checkpoints/ (its weights are its "
                        "checkpoints, written by shardlm train; this run saved none)",
                        p);
    return slm_fail(SLM_E_IO,
                    "%s: no weights here (neither checkpoints/, manifest.json nor config.json "
                    "with model.safetensors)",
                    p);
}

slm_status slm_model_dir_open(const char *path, slm_model_dir *d) {
    memset(d, 0, sizeof *d);
    d->path = slm_xstrdup(path);
    d->step = -1;
    slm_status st = open_kind(d);
    if (!st && d->ckpt && d->tokenizer) {
        const slm_ckpt_meta *M = slm_ckpt_get_meta(d->ckpt);
        uint64_t h = 0;
        st = slm_file_xxh64(d->tokenizer, &h);
        // The weights are only meaningful with the tokenizer they were trained with: a
        // tokenizer copy replaced since (e.g. --train-from-scratch on another dataset) is an
        // error, never a warning, so no export or sample pairs weights with the wrong ids.
        if (!st && M->has_tokenizer && h != M->tokenizer_xxh64)
            st = slm_fail(SLM_E_FORMAT,
                          "%s (xxh64 %016llx) is not the tokenizer the checkpoint %s was trained "
                          "with (xxh64 %016llx recorded in its manifest.json)",
                          d->tokenizer, (unsigned long long)h, d->weights_dir,
                          (unsigned long long)M->tokenizer_xxh64);
    }
    if (st) slm_model_dir_close(d);
    return st;
}

void slm_model_dir_close(slm_model_dir *d) {
    slm_ckpt_free(d->ckpt);
    free(d->path);
    free(d->weights_dir);
    free(d->tokenizer);
    slm_tmp_untrack(d->tmp_track[1] - 1);
    slm_tmp_untrack(d->tmp_track[0] - 1);
    if (d->tmp_dir) slm_rmdir_flat_quiet(d->tmp_dir);
    free(d->tmp_dir);
    slm_gguf_close(d->gguf);
    free(d->gguf);
    memset(d, 0, sizeof *d);
    d->step = -1;
}

// Elements [0, n) of checkpoint unit u's params into dst (memory of device dev), through host
// staging of at most 64 MiB at a time (no second copy of a big unit on the host).
static slm_status read_unit(slm_ckpt *c, int u, int64_t n, slm_device *dev, float *dst) {
    const int64_t piece = (int64_t)16 << 20; // floats
    int64_t k = n < piece ? n : piece;
    float *host = slm_dev_host_alloc(dev, (size_t)(k > 0 ? k : 1) * sizeof(float));
    slm_status st = SLM_OK;
    for (int64_t b = 0; b < n && !st; b += piece) {
        k = n - b < piece ? n - b : piece;
        st = slm_ckpt_read_range(c, u, b, b + k, host, NULL, NULL);
        if (!st) slm_dev_copy(dev, dst + b, host, (size_t)k * sizeof(float), SLM_H2D);
    }
    slm_dev_host_free(dev, host);
    return st;
}

// A LoRA checkpoint: the base from the HF directory it names (its XXH64 checked), then the
// adapters, merged into the base unless d->keep_lora.
static slm_status read_lora(slm_model_dir *d, slm_llama *m) {
    const slm_ckpt_meta *M = slm_ckpt_get_meta(d->ckpt);
    const char *base = d->lora_base ? d->lora_base : M->lora_base;
    uint64_t h = 0;
    slm_status st = slm_hf_dir_xxh64(base, &h);
    if (st && !d->lora_base) // the recorded path: say how to name a moved base
        return slm_fail_wrap(st,
                             "%s: the LoRA checkpoint's base model %s (recorded at training; if "
                             "it moved, `shardlm ckpt export RUN --hf OUT --lora-base NEW_DIR "
                             "[--merge-lora]` takes the moved copy, its XXH64 checked, and eval "
                             "/ generate read the merged OUT)",
                             d->weights_dir, base);
    if (st)
        return slm_fail_wrap(st, "%s: the LoRA checkpoint's base model %s", d->weights_dir, base);
    if (h != M->lora_base_xxh64)
        return slm_fail(SLM_E_FORMAT,
                        "%s: its adapters were trained on a base with xxh64 %016llx, but %s has "
                        "xxh64 %016llx (changed or another model)",
                        d->weights_dir, (unsigned long long)M->lora_base_xxh64, base,
                        (unsigned long long)h);
    if ((st = slm_hf_load(m, base))) return st;
    if (m->lora.rank < 1 && (st = slm_llama_lora_init(m, &M->lora, true, 0))) return st;
    if ((st = slm_ckpt_check_model(d->ckpt, m))) return st;
    for (int l = 0; l < m->cfg.num_hidden_layers && !st; l++)
        st = read_unit(d->ckpt, l, m->lora_units[l].numel, m->dev, m->lora_params[l]);
    if (!st && !d->keep_lora) slm_llama_lora_merge(m);
    return st;
}

bool slm_model_dir_is_lora(const slm_model_dir *d) {
    return d->ckpt && slm_ckpt_get_meta(d->ckpt)->lora.rank > 0;
}

slm_status slm_model_dir_read_weights(slm_model_dir *d, slm_llama *m) {
    if (d->gguf) return slm_gguf_load(m, d->gguf);
    if (!d->ckpt) return slm_hf_load(m, d->weights_dir);
    if (slm_model_dir_is_lora(d)) return read_lora(d, m);
    slm_status st = slm_ckpt_check_model(d->ckpt, m);
    double total = 0, done = 0;
    for (int u = 0; u < m->n_units; u++)
        total += 4.0 * (double)m->units[u].numel;
    slm_progress pg;
    slm_progress_begin(&pg, "checkpoint load", 0, total);
    for (int u = 0; u < m->n_units && !st; u++) {
        st = read_unit(d->ckpt, u, m->units[u].numel, m->dev, m->params[u]);
        done += 4.0 * (double)m->units[u].numel;
        slm_progress_update(&pg, done, "unit %d of %d, %.0f MB", u + 1, m->n_units, done / 1e6);
    }
    if (st)
        slm_progress_abandon(&pg);
    else
        slm_progress_end(&pg, done, "%d units, %.0f MB", m->n_units, done / 1e6);
    return st;
}

// Before any allocation: the weights' shapes against d->cfg (the checkpoint's recorded layout
// against the config's, built without buffers; or the safetensors headers), so a config that
// declares a huge model fails naming the tensor instead of on memory.
static slm_status check_shapes(slm_model_dir *d) {
    if (d->gguf) return slm_gguf_check_shapes(d->gguf, &d->cfg);
    if (!d->ckpt) return slm_hf_check_shapes(d->weights_dir, &d->cfg);
    slm_llama lay;
    slm_status st = slm_llama_init(&lay, &d->cfg, false);
    if (st) return st;
    if (slm_model_dir_is_lora(d))
        st = slm_llama_lora_init(&lay, &slm_ckpt_get_meta(d->ckpt)->lora, false, 0);
    if (!st) st = slm_ckpt_check_model(d->ckpt, &lay);
    slm_llama_free(&lay);
    // The manifest's config disagrees with its own layout: a bad checkpoint (exit 1), not a
    // usage error.
    if (st == SLM_E_ARG) {
        char *msg = slm_xstrdup(slm_errmsg());
        st = slm_fail(SLM_E_FORMAT, "%s", msg);
        free(msg);
    }
    return st;
}

slm_status slm_model_dir_load_model(slm_model_dir *d, slm_llama *m) {
    slm_status st = check_shapes(d);
    if (st) return st;
    // Then the memory: parameters and gradients (slm_llama_init allocates both).
    double n = (double)slm_llama_n_params(&d->cfg);
    st = slm_mem_check(2.0 * n * sizeof(float),
                       "the model of %s (%.3g parameters: fp32 weights and gradients)", d->path, n);
    if (st) return st;
    if ((st = slm_llama_init(m, &d->cfg, true))) return st;
    if ((st = slm_model_dir_read_weights(d, m))) slm_llama_free(m);
    return st;
}

slm_status slm_model_dir_load_tokenizer(const slm_model_dir *d, slm_tokenizer **tok, bool need) {
    *tok = NULL;
    if (!d->tokenizer) {
        if (!need) return SLM_OK;
        return slm_fail(SLM_E_IO, "%s: no tokenizer.json or tokenizer.model%s", d->path,
                        d->kind == SLM_MODEL_DIR_HF     ? ""
                        : d->kind == SLM_MODEL_DIR_GGUF ? " (the GGUF file's tokenizer is not one "
                                                          "shardlm imports: see the warning)"
                                                        : " in the run directory");
    }
    slm_status st = slm_tokenizer_load(d->tokenizer, tok);
    if (st) return st;
    if (slm_tokenizer_vocab_size(*tok) > d->cfg.vocab_size) {
        st = slm_fail(SLM_E_ARG, "%s: tokenizer has %d ids but the model's vocab_size is %d",
                      d->tokenizer, slm_tokenizer_vocab_size(*tok), d->cfg.vocab_size);
        slm_tokenizer_free(*tok);
        *tok = NULL;
    }
    return st;
}

slm_status slm_model_dir_check_dataset(const slm_model_dir *d, const char *data_dir) {
    if (!d->tokenizer) return SLM_OK; // nothing to compare
    slm_dataset ds;
    slm_status st = slm_dataset_open(data_dir, &ds);
    uint64_t h = 0;
    if (!st) st = slm_file_xxh64(d->tokenizer, &h);
    if (!st && h != ds.tokenizer_xxh64) {
        char a[17], b[17];
        slm_hex64(h, a);
        slm_hex64(ds.tokenizer_xxh64, b);
        st = slm_fail(SLM_E_FORMAT,
                      "%s (xxh64 %s) differs from the tokenizer dataset %s was prepared with "
                      "(%s, xxh64 %s in manifest.json): the token ids would mean other text; "
                      "evaluate on data prepared with the run's tokenizer",
                      d->tokenizer, a, data_dir, ds.tokenizer_file, b);
    }
    slm_dataset_free(&ds); // zeroed by slm_dataset_open, so safe on its errors too
    return st;
}

slm_status slm_model_dir_require_hf(const char *path) {
    if (slm_is_gguf_file(path))
        return slm_fail(SLM_E_ARG,
                        "--init-from-hf %s: a GGUF file, not a Hugging Face directory; give it "
                        "as --init-from-gguf (train) or --model (eval, generate)",
                        path);
    slm_model_dir_kind k = kind_of(path);
    if (k == SLM_MODEL_DIR_HF) return SLM_OK;
    return slm_fail(SLM_E_ARG,
                    "--init-from-hf %s: a %s, not a Hugging Face directory (config.json + "
                    "model.safetensors)%s",
                    path, k == SLM_MODEL_DIR_RUN ? "run directory" : "checkpoint",
                    k == SLM_MODEL_DIR_RUN ? "; give it as --model" : "");
}

slm_status slm_model_dir_load(const char *path, bool hf_only, slm_llama *m, slm_tokenizer **tok,
                              bool need_tokenizer) {
    if (tok) *tok = NULL;
    slm_status st = hf_only ? slm_model_dir_require_hf(path) : SLM_OK;
    if (st) return st;
    slm_model_dir d;
    if ((st = slm_model_dir_open(path, &d))) return st;
    st = slm_model_dir_load_model(&d, m);
    if (!st && tok) {
        st = slm_model_dir_load_tokenizer(&d, tok, need_tokenizer);
        if (st) slm_llama_free(m);
    }
    slm_model_dir_close(&d);
    return st;
}

slm_status slm_model_dir_init_weights(const char *dir, slm_llama *m) {
    // The kind only (slm_hf_load reads config.json itself: one read, one set of warnings).
    slm_status st = slm_model_dir_require_hf(dir);
    return st ? st : slm_hf_load(m, dir);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

slm_status slm_hf_dir_xxh64(const char *dir, uint64_t *out) {
    *out = 0;
    DIR *dd = opendir(dir);
    if (!dd) return slm_fail(SLM_E_IO, "%s: cannot open the directory", dir);
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(dd));) {
        size_t len = strlen(e->d_name);
        bool keep = (len > 12 && !strcmp(e->d_name + len - 12, ".safetensors")) ||
                    !strcmp(e->d_name, "model.safetensors.index.json") ||
                    !strcmp(e->d_name, "config.json");
        if (!keep) continue;
        names = slm_xrealloc(names, (n + 1) * sizeof *names);
        names[n++] = slm_xstrdup(e->d_name);
    }
    closedir(dd);
    qsort(names, n, sizeof *names, cmp_name);
    slm_status st = n ? SLM_OK : slm_fail(SLM_E_IO, "%s: no config.json or *.safetensors", dir);
    uint64_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        char *p = slm_path_join(dir, names[i]);
        uint64_t h = 0;
        if (!st) st = slm_file_xxh64(p, &h);
        uint64_t pair[2] = {acc, h};
        acc = slm_xxh64(pair, sizeof pair, 0);
        free(p);
        free(names[i]);
    }
    free(names);
    if (!st) *out = acc;
    return st;
}
