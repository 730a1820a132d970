// Cross-rank agreement on a training run's settings (slm_train_agree, train.h): the list of
// (name, canonical value) pairs every rank must hold identically, compared by
// slm_dist_agree_values before any other collective.
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
static const char *prec(slm_dtype p) {
    return p == SLM_DTYPE_BF16 ? "bf16" : "fp32";
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

slm_status slm_train_agree(const slm_train_opts *o) {
    if (slm_dist_world() == 1) return SLM_OK;
    agree_list *l = slm_xcalloc(1, sizeof *l);
    const slm_status A = SLM_E_ARG;
    // Options, as parsed (canonical numbers), in --help order.
    add(l, "--data", A, "%s", o->synthetic ? "(--synthetic)" : str_or_unset(o->data_dir));
    add(l, "--model", A, "%s", str_or_unset(o->model));
    add(l, "--vocab-size", A, "%d", o->vocab_size);
    add(l, "--batch", A, "%d", o->B);
    add(l, "--seq", A, "%d", o->T);
    add(l, "--grad-accum", A, "%d", o->grad_accum);
    add(l, "--steps", A, "%lld", (long long)o->steps);
    add(l, "--lr", A, "%.9g", (double)o->adamw.lr_peak);
    add(l, "--min-lr", A, "%.9g", (double)(o->min_lr >= 0 ? o->min_lr : o->adamw.lr_peak / 10.0f));
    add(l, "--warmup", A, "%lld", (long long)o->warmup);
    add(l, "--weight-decay", A, "%.9g", (double)o->adamw.weight_decay);
    add(l, "--beta1", A, "%.9g", (double)o->adamw.beta1);
    add(l, "--beta2", A, "%.9g", (double)o->adamw.beta2);
    add(l, "--eps", A, "%.9g", (double)o->adamw.eps);
    add(l, "--grad-clip", A, "%.9g", (double)o->grad_clip);
    add(l, "--seed", A, "%llu", (unsigned long long)o->seed);
    add(l, "--eval-every", A, "%lld", (long long)o->eval_every);
    add(l, "--eval-batches", A, "%d", o->eval_batches);
    add(l, "--activation-checkpointing", A, "%s", on_off(o->activation_checkpointing));
    add(l, "--max-minutes", A, "%.17g", o->max_minutes);
    add(l, "--time-schedule", A, "%s", on_off(o->time_schedule));
    add(l, "--sharding", A, "%s", slm_sharding_name(o->fsdp.sharding));
    add(l, "--shard-group-size", A, "%d", o->fsdp.shard_group_size);
    add(l, "--param-dtype", A, "%s", prec(o->fsdp.param_dtype));
    add(l, "--reduce-dtype", A, "%s", prec(o->fsdp.reduce_dtype));
    add(l, "--limit-all-gathers", A, "%d", o->fsdp.limit_all_gathers);
    add(l, "--no-prefetch", A, "forward prefetch %s, backward prefetch %s",
        on_off(o->fsdp.forward_prefetch), on_off(o->fsdp.backward_prefetch));
    add(l, "--collective-timeout", A, "%.17g", o->collective_timeout_s);
    add(l, "--simulate-compute", A, "%.17g", o->simulate_gflops);
    add(l, "--metrics-every", A, "%d", o->metrics.every); // the gather is a collective
    add(l, "--straggler-factor", A, "%.17g", o->metrics.straggler_factor);
    add(l, "--straggler-windows", A, "%d", o->metrics.straggler_windows);
    add(l, "--out", A, "%s", str_or_unset(o->out_dir));
    add_abs_path(l, "--out (from each rank's working directory)", o->out_dir);
    add(l, "--ckpt-every-steps", A, "%lld", (long long)o->ckpt_every_steps);
    add(l, "--ckpt-every-minutes", A, "%.17g", o->ckpt_every_minutes);
    add(l, "--ckpt-keep", A, "%d", o->ckpt_keep);
    add(l, "--ckpt-sync", A, "%s", on_off(o->ckpt_sync));
    add(l, "--on-ckpt-error", A, "%s", o->ckpt_abort_on_error ? "abort" : "continue");
    add(l, "--resume", A, "%s", str_or_unset(o->resume));
    add(l, "--init-from-hf", A, "%s", str_or_unset(o->init_from_hf));
    add(l, "--init-from-gguf", A, "%s", str_or_unset(o->init_from_gguf));
    add(l, "--verify-on-resume", A, "%s", on_off(o->verify_on_resume));
    add(l, "--allow-batch-change", A, "%s", on_off(o->allow_batch_change));
    add(l, "--no-packing", A, "%s", on_off(o->no_packing));
    add(l, "--train-from-scratch", A, "%s", on_off(o->train_from_scratch));
    add(l, "--lora-rank", A, "%d", o->lora.rank);
    add(l, "--lora-alpha", A, "%.9g", (double)o->lora.alpha);
    add(l, "--lora-dropout", A, "%.9g", (double)o->lora.dropout);
    char targets[128] = "";
    for (int t = 0; t < SLM_LORA_N_TARGETS; t++)
        if (o->lora.targets & (1u << t))
            snprintf(targets + strlen(targets), sizeof targets - strlen(targets), "%s%s",
                     targets[0] ? "," : "", slm_lora_target_name(t));
    add(l, "--lora-targets", A, "%s", targets[0] ? targets : "(none)");
    add_abs_path(l, "--heartbeat-dir", o->heartbeat_dir);
    add(l, "--preempt-grace", A, "%.17g", o->preempt_grace_s);
    add(l, "--on-nonfinite", A, "%s", o->nonfinite_skip ? "skip" : "abort");
    add(l, "--max-nonfinite-skips", A, "%d", o->max_nonfinite_skips);
    add(l, "--loss-spike-window", A, "%d", o->spike_window);
    add(l, "--loss-spike-z", A, "%.17g", o->spike_z);
    add(l, "--snapshot-every-steps", A, "%lld", (long long)o->snapshot_every_steps);
    add(l, "--snapshot-dir", A, "%s", str_or_unset(o->snapshot_dir));
    add(l, "--ckpt-uri", A, "%s", str_or_unset(o->ckpt_uri));
    add(l, "--data-cache", A, "%s", str_or_unset(o->data_cache));
    add(l, "--s3-prefix-shards", A, "%d", o->s3_prefix_shards > 1 ? o->s3_prefix_shards : 1);
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
