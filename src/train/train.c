// The training loop (world of one, or data parallel through fsdp/): seeded init, loader, gradient accumulation, global-norm
// clipping, AdamW with the warmup + cosine schedule, periodic validation, per-step hooks,
// metrics.jsonl, and the run directory. Contract in train.h.
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "dist/dist.h"
#include "kernels/kernels.h"
#include "train/train.h"
#include "train/train_internal.h"
#include "train/modeldir.h"
#include "ckpt/ckpt.h"

static volatile sig_atomic_t g_stop = 0;

// First SIGINT / SIGTERM: stop at the next micro-batch or step boundary (saved, resumable).
// A second SIGINT while that stop is pending exits at once (async-signal-safe write + _exit).
static void on_signal(int sig) {
    if (sig == SIGINT && g_stop) {
        static const char msg[] = "\nshardlm: second interrupt: exiting now without saving "
                                  "(the last committed checkpoint is kept)\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(1);
    }
    if (sig == SIGINT && !g_stop) { // SIGTERM (supervisors, mpirun's teardown) stays quiet
        static const char msg[] = "\nshardlm: stop requested: stopping at the next micro-batch "
                                  "boundary (interrupt again to exit at once, without saving)\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
    }
    g_stop = 1;
}

void slm_train_install_signal_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void slm_train_request_stop(void) { g_stop = 1; }
bool slm_train_stop_requested(void) { return g_stop != 0; }
void slm_train_reset_stop(void) { g_stop = 0; }

void slm_train_opts_default(slm_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->grad_accum = 1;
    o->adamw.lr_peak = 3e-4f;
    o->adamw.beta1 = 0.9f;
    o->adamw.beta2 = 0.95f;
    o->adamw.eps = 1e-8f;
    o->adamw.weight_decay = 0.1f;
    o->min_lr = -1.0f; // resolved to lr / 10 at run time
    o->grad_clip = 1.0f;
    o->seed = 1337;
    o->eval_batches = 20;
    o->log_every = 1;
    slm_fsdp_opts_default(&o->fsdp);
    o->collective_timeout_s = 600.0;
}

slm_status slm_train_add_hook(slm_train_opts *o, slm_step_hook_fn fn, void *ctx) {
    if (o->n_hooks >= SLM_TRAIN_MAX_HOOKS)
        return slm_fail(SLM_E_ARG, "too many step hooks (at most %d)", SLM_TRAIN_MAX_HOOKS);
    o->hooks[o->n_hooks].fn = fn;
    o->hooks[o->n_hooks].ctx = ctx;
    o->n_hooks++;
    return SLM_OK;
}

double slm_train_flops_per_token(const slm_llama_config *c, int T) {
    // 6N: forward 2N + backward 4N multiply-adds counted as 2 FLOPs each; 12 L C T: the
    // attention score and value products (QK^T and AV), forward and backward.
    return 6.0 * (double)slm_llama_n_matmul_params(c) +
           12.0 * (double)c->num_hidden_layers * (double)c->hidden_size * (double)T;
}

slm_status slm_train_resolve_config(const char *spec, int32_t vocab_override, int T,
                                    slm_llama_config *cfg) {
    if (!spec) return slm_fail(SLM_E_ARG, "no model given (--model PRESET|config.json)");
    slm_status st = slm_llama_config_resolve(spec, cfg);
    if (st) return st;
    if (vocab_override > 0) cfg->vocab_size = vocab_override;
    st = slm_llama_config_validate(cfg);
    if (st) return slm_fail_wrap(st, "model %s", spec);
    if (T > cfg->max_position_embeddings)
        return slm_fail(SLM_E_ARG,
                        "--seq %d is longer than the model's max_position_embeddings %d (%s); "
                        "HINT: use --seq <= %d or a config.json with a larger "
                        "max_position_embeddings",
                        T, cfg->max_position_embeddings, spec, cfg->max_position_embeddings);
    return SLM_OK;
}

slm_status slm_train_check_vocab(const slm_dataset *ds, const slm_tokenizer *tok,
                                 const slm_llama_config *cfg, const char *model_spec) {
    int32_t tv = slm_tokenizer_vocab_size(tok);
    if (tv != ds->vocab_size)
        return slm_fail(SLM_E_ARG,
                        "%s: the tokenizer %s has %d ids but manifest.json says vocab_size %d "
                        "(dataset prepared with another tokenizer?)",
                        ds->dir, ds->tokenizer_file, tv, ds->vocab_size);
    if (cfg->vocab_size != ds->vocab_size)
        return slm_fail(SLM_E_ARG,
                        "vocab mismatch: model %s has vocab_size %d but dataset %s (tokenizer %s) "
                        "has %d; HINT: pass --vocab-size %d or a config.json with vocab_size %d",
                        model_spec, cfg->vocab_size, ds->dir, ds->tokenizer_file, ds->vocab_size,
                        ds->vocab_size, ds->vocab_size);
    return SLM_OK;
}

// Splits windows[b, T+1] into inputs[b, T] = w[:, :-1] and targets[b, T] = w[:, 1:]; returns the
// number of targets that are not the ignore index.
int64_t slm_train_split_windows(const int32_t *win, int b, int T, int32_t *inp, int32_t *tgt) {
    int64_t n = 0;
    for (int i = 0; i < b; i++) {
        const int32_t *w = win + (int64_t)i * (T + 1);
        memcpy(inp + (int64_t)i * T, w, (size_t)T * sizeof(int32_t));
        memcpy(tgt + (int64_t)i * T, w + 1, (size_t)T * sizeof(int32_t));
        for (int t = 0; t < T; t++) n += w[t + 1] != -1;
    }
    return n;
}

// Validation over the first `max_batches` batches of B windows (0: all) of an open val loader
// (B_global 1: it fills the batch itself, so a split smaller than B still evaluates).
slm_status slm_train_eval_loader(slm_llama *m, slm_loader *l, int B, int T, int64_t max_batches,
                                 slm_eval_result *res) {
    int32_t *win = slm_xmalloc((size_t)B * (T + 1) * sizeof(int32_t));
    int32_t *inp = slm_xmalloc((size_t)B * T * sizeof(int32_t));
    int32_t *tgt = slm_xmalloc((size_t)B * T * sizeof(int32_t));
    double sum = 0;
    int64_t n_tok = 0, n_seq = 0;
    slm_status st = SLM_OK;
    bool was_loss_only = m->loss_only;
    m->loss_only = true; // no lm_head backward work during evaluation
    for (int64_t batch = 0; max_batches <= 0 || batch < max_batches; batch++) {
        int b = 0;
        while (b < B && slm_loader_next_val(l, win + (int64_t)b * (T + 1)) == 1) b++;
        if (b == 0) break;
        int64_t n = slm_train_split_windows(win, b, T, inp, tgt);
        float loss = slm_llama_forward(m, inp, tgt, b, T);
        if (!isfinite(loss)) {
            st = slm_fail(SLM_E_NUMERIC, "validation batch %lld: loss is %f",
                          (long long)batch, (double)loss);
            break;
        }
        sum += (double)loss * (double)n;
        n_tok += n;
        n_seq += b;
        if (b < B) break;
    }
    m->loss_only = was_loss_only;
    free(win), free(inp), free(tgt);
    if (st) return st;
    res->n_tokens = n_tok;
    res->n_seqs = n_seq;
    res->loss = n_tok ? sum / (double)n_tok : NAN;
    res->perplexity = exp(res->loss);
    return SLM_OK;
}

static slm_status copy_file(const char *src, const char *dst) {
    char *data = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(src, &data, &len);
    if (st) return st;
    st = slm_file_write_atomic(dst, data, len);
    free(data);
    return st;
}

// Everything one run owns, released in one place.
typedef struct run_state {
    slm_llama model;
    bool model_init;
    bool dp;        // world > 1: parameters, grads and AdamW state live in `fsdp` (shards)
    slm_fsdp fsdp;  // zeroed unless dp
    slm_dataset ds;
    bool ds_open;
    slm_tokenizer *tok;
    slm_loader *train_l, *val_l;
    slm_loader_state val_start;
    float **m, **v;           // AdamW moments per unit, same layout as the FlatParameter
    slm_decay_range **ranges; // per unit: one range per view
    int32_t *win, *inp, *tgt; // [K][B, T+1], [B, T], [B, T]
    FILE *jsonl;
    slm_ckpt_sched *ckpt; // checkpoint schedule + saver (NULL without out_dir)
    char *resume_path;    // checkpoint to resume from (NULL: fresh start)
    slm_rundir *rundir;   // rank 0 with out_dir: holds the run directory's lock
} run_state;

static void run_state_free(run_state *r) {
    slm_ckpt_sched_free(r->ckpt); // joins a background write before the shards are freed
    free(r->resume_path);
    if (r->m)
        for (int u = 0; u < r->model.n_units; u++) free(r->m[u]), free(r->v[u]), free(r->ranges[u]);
    free(r->m), free(r->v), free(r->ranges);
    free(r->win), free(r->inp), free(r->tgt);
    if (r->jsonl) fclose(r->jsonl);
    if (r->train_l) slm_loader_free(r->train_l);
    if (r->val_l) slm_loader_free(r->val_l);
    if (r->tok) slm_tokenizer_free(r->tok);
    if (r->ds_open) slm_dataset_free(&r->ds);
    if (r->dp) slm_fsdp_free(&r->fsdp);
    if (r->model_init) slm_llama_free(&r->model);
    slm_rundir_close(r->rundir); // last: the lock is held until everything is written
}

static slm_status check_opts(const slm_train_opts *o) {
    if (o->B < 1) return slm_fail(SLM_E_ARG, "--batch must be >= 1 (got %d)", o->B);
    if (o->T < 1) return slm_fail(SLM_E_ARG, "--seq must be >= 1 (got %d)", o->T);
    if (o->grad_accum < 1)
        return slm_fail(SLM_E_ARG, "--grad-accum must be >= 1 (got %d)", o->grad_accum);
    if (o->steps < 1) return slm_fail(SLM_E_ARG, "--steps must be >= 1 (got %lld)", (long long)o->steps);
    if (o->warmup < 0) return slm_fail(SLM_E_ARG, "--warmup must be >= 0");
    if (!(o->adamw.lr_peak > 0) || !isfinite(o->adamw.lr_peak))
        return slm_fail(SLM_E_ARG, "--lr must be a positive number");
    if (!(o->adamw.weight_decay >= 0)) return slm_fail(SLM_E_ARG, "--weight-decay must be >= 0");
    if (!o->synthetic && !o->data_dir)
        return slm_fail(SLM_E_ARG, "no dataset given (--data DIR, or --synthetic)");
    return SLM_OK;
}

// Up-front estimate of one rank's memory (before any allocation or file): parameters,
// gradients and AdamW m, v (4 x fp32 per parameter; under FSDP each rank keeps 1/S of them plus
// the gathered full parameters and gradients of about two units at a time), and the
// activation workspace for B x T (slm_llama_act_bytes_estimate). Compared with the memory probe
// (slm_mem_probe: MemAvailable, ulimit -v, cgroup memory.max); too much is SLM_E_NOMEM (exit 1)
// naming the estimate, the limit and what to reduce. With a run directory, the asynchronous
// checkpoint's staging copy (params, m, v of the rank's shard: 3 x fp32 per parameter) is
// counted too: when only it does not fit, the run goes ahead and says that its checkpoints will
// be written synchronously, straight from the shards (the saver decides again at each save).
static slm_status check_memory(const slm_train_opts *o, const slm_llama_config *cfg, int W) {
    double n = (double)slm_llama_n_params(cfg);
    double state = 4.0 * n * sizeof(float);
    double staging = 3.0 * n * sizeof(float);
    if (W > 1) {
        int S = W; // ranks one copy of the state is sharded over
        if (o->fsdp.sharding == SLM_NO_SHARD) S = 1;
        else if (o->fsdp.sharding == SLM_HYBRID_SHARD && o->fsdp.shard_group_size > 0)
            S = o->fsdp.shard_group_size;
        double C = cfg->hidden_size, F = cfg->intermediate_size, V = cfg->vocab_size;
        double big_unit = 4 * C * C + 3 * F * C;
        if (2 * V * C > big_unit) big_unit = 2 * V * C;
        state = state / S + 2.0 * 2.0 * big_unit * sizeof(float);
        staging /= S;
    }
    double acts = slm_llama_act_bytes_estimate(cfg, o->B, o->T, o->activation_checkpointing);
    slm_mem_info mi;
    slm_mem_probe(&mi);
    double need = state + acts, avail = mi.bytes;
    char a[32], b[32], c[32], d[32], e[32];
    if (avail <= 0 || need <= avail) {
        slm_info("memory: about %s per process (%s of parameters, gradients and AdamW state, %s "
                 "of activations%s%s%s); %s available (%s)",
                 slm_fmt_bytes(need, a), slm_fmt_bytes(state, b), slm_fmt_bytes(acts, c),
                 o->out_dir ? ", plus " : "", o->out_dir ? slm_fmt_bytes(staging, e) : "",
                 o->out_dir ? " for a checkpoint's staging copy" : "",
                 avail > 0 ? slm_fmt_bytes(avail, d) : "unknown", mi.limit_name);
        if (o->out_dir && avail > 0 && !o->ckpt_sync && need + staging > avail)
            slm_info("memory: the training state needs about %s and a checkpoint's staging copy "
                     "%s more, beyond the %s available (%s); checkpoints will be written "
                     "synchronously, straight from the shards (bounded memory)",
                     slm_fmt_bytes(need, a), slm_fmt_bytes(staging, b), slm_fmt_bytes(avail, c),
                     mi.limit_name);
        return SLM_OK;
    }
    return slm_fail(SLM_E_NOMEM,
                    "model %s (%.3g parameters) with --batch %d --seq %d needs about %s of memory "
                    "per process (%s of parameters, gradients and AdamW state, %s of "
                    "activations), more than the %s available (%s); "
                    "reduce --batch or --seq, use a smaller model%s or train with FSDP over "
                    "more ranks (mpirun)",
                    o->model ? o->model : "(default)", n, o->B, o->T, slm_fmt_bytes(need, a),
                    slm_fmt_bytes(state, b), slm_fmt_bytes(acts, c), slm_fmt_bytes(avail, d),
                    mi.limit_name, o->activation_checkpointing ? "" : ", add --activation-checkpointing");
}

static void jsonl_num(slm_buf *b, const char *key, double x) {
    if (isfinite(x))
        slm_buf_appendf(b, ",\"%s\":%.9g", key, x);
    else
        slm_buf_appendf(b, ",\"%s\":null", key);
}

static void write_step_json(FILE *f, const slm_step_metrics *s) {
    if (!f) return;
    slm_buf b = {0};
    slm_buf_appendf(&b, "{\"event\":\"step\",\"step\":%lld", (long long)s->step);
    jsonl_num(&b, "loss", s->loss);
    jsonl_num(&b, "lr", s->lr);
    jsonl_num(&b, "grad_norm", s->grad_norm);
    jsonl_num(&b, "tokens_per_s", s->tokens_per_s);
    jsonl_num(&b, "mfu", s->mfu);
    jsonl_num(&b, "ms_per_step", s->ms_per_step);
    jsonl_num(&b, "val_loss", s->val_loss);
    slm_buf_appendf(&b, ",\"tokens\":%lld", (long long)s->tokens_seen);
    jsonl_num(&b, "elapsed_s", s->elapsed_s);
    slm_buf_appendf(&b, "}\n");
    fputs(b.data, f);
    fflush(f);
    slm_buf_free(&b);
}

// Restores weights, AdamW m / v, the step (AdamW t and the LR position follow it), tokens seen,
// the train loader position and the synthetic-data RNG from a checkpoint (src/ckpt).
static slm_status resume_from(run_state *r, const char *path, slm_rng *synth, int64_t *step,
                              int64_t *tokens_seen) {
    slm_ckpt *c = NULL;
    slm_status st = slm_ckpt_open(path, &c);
    if (!st) st = slm_ckpt_check_model(c, &r->model);
    // Each rank reads only its own shard's bytes, whatever world size / strategy saved them.
    for (int u = 0; !st && u < r->model.n_units; u++) {
        if (r->dp) {
            slm_fsdp_unit *x = &r->fsdp.units[u];
            st = slm_ckpt_read_range(c, u, x->shard_begin, x->shard_begin + x->shard_numel,
                                     x->master, x->m, x->v);
        } else {
            st = slm_ckpt_read_range(c, u, 0, r->model.units[u].numel, r->model.params[u],
                                     r->m[u], r->v[u]);
        }
    }
    if (r->dp) {
        slm_fsdp_release_all(&r->fsdp);
        st = slm_dist_agree(st);
    }
    if (!st && r->ds_open) { // the token ids must mean what they meant when it was saved
        const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
        st = slm_train_check_ckpt_tokenizer(M->has_tokenizer, M->tokenizer_xxh64,
                                            slm_ckpt_dir(c), &r->ds);
    }
    if (!st) {
        const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
        if (r->dp) r->fsdp.t = M->opt_step;
        *step = M->step;
        *tokens_seen = M->tokens_seen;
        *synth = M->rng;
        if (r->train_l) st = slm_loader_set_state(r->train_l, M->loader);
        if (!st) slm_info("resumed from %s (step %lld)", slm_ckpt_dir(c), (long long)M->step);
    }
    slm_ckpt_free(c);
    return st ? slm_fail_wrap(st, "--resume %s", path) : SLM_OK;
}

// Polls the pending checkpoint and, if `save`, starts one of the current state (after `step`).
static slm_status ckpt_step(run_state *r, const slm_train_opts *o, const slm_rng *synth,
                            int64_t step, int64_t tokens_seen, float min_lr, bool save) {
    slm_ckpt_meta meta;
    slm_ckpt_meta_default(&meta, &r->model.cfg);
    meta.step = meta.opt_step = meta.lr_step = step;
    meta.tokens_seen = tokens_seen;
    meta.adamw = o->adamw;
    meta.lr_warmup = o->warmup;
    meta.lr_total = o->steps;
    meta.lr_min = min_lr;
    if (r->train_l) meta.loader = slm_loader_get_state(r->train_l);
    meta.rng = *synth;
    if (r->tok && r->ds_open) {
        meta.has_tokenizer = true;
        meta.tokenizer_xxh64 = r->ds.tokenizer_xxh64;
        snprintf(meta.tokenizer_file, sizeof meta.tokenizer_file, "%s",
                 slm_tokenizer_type(r->tok) == SLM_TOK_SPM_BPE ? "tokenizer.model"
                                                               : "tokenizer.json");
    }
    int NU = r->model.n_units;
    slm_ckpt_shard *sh = slm_xcalloc((size_t)NU, sizeof *sh);
    for (int u = 0; u < NU; u++) {
        if (r->dp) { // this rank's FSDP shard: masters and AdamW state of [begin, end)
            slm_fsdp_unit *x = &r->fsdp.units[u];
            sh[u] = (slm_ckpt_shard){x->shard_begin, x->shard_begin + x->shard_numel, x->master,
                                     x->m, x->v};
        } else {
            sh[u] = (slm_ckpt_shard){0, r->model.units[u].numel, r->model.params[u], r->m[u],
                                     r->v[u]};
        }
    }
    if (r->dp) {
        snprintf(meta.strategy, sizeof meta.strategy, "%s", slm_sharding_name(o->fsdp.sharding));
        meta.shard_group_size = r->fsdp.S;
    }
    slm_status st = slm_ckpt_sched_step(r->ckpt, save, &meta, r->model.units, NU, sh);
    free(sh);
    return st;
}

// A resume at or past --steps: the run is complete (step == steps, SLM_OK, res says so) or
// --steps is below the checkpoint (SLM_E_ARG).
static slm_status already_complete(const slm_train_opts *o, int64_t step, slm_train_result *res) {
    if (step > o->steps)
        return slm_fail(SLM_E_ARG,
                        "--steps %lld is below the checkpoint's step %lld: nothing to train; "
                        "give --steps > %lld to continue the run",
                        (long long)o->steps, (long long)step, (long long)step);
    if (slm_dist_rank() == 0)
        slm_info("the run is already complete: the checkpoint is at step %lld = --steps; "
                 "nothing to train (give a larger --steps to continue)",
                 (long long)step);
    if (res) {
        memset(res, 0, sizeof *res);
        res->steps_done = step;
        res->final_loss = res->final_val_loss = res->tokens_per_s = res->mfu = NAN;
        res->already_complete = true;
    }
    return SLM_OK;
}

// The stop check between micro-batches: 1 for a stop signal, 2 for --max-minutes, 0 to go on.
// Under FSDP (dp) the ranks agree (MAX all-reduce), so all leave the step at the same
// micro-batch and none is left alone in the collective schedule.
static int micro_batch_stop(bool dp, double max_minutes, double t_start) {
    int64_t f[2] = {g_stop != 0, max_minutes > 0 && slm_time_s() - t_start >= max_minutes * 60.0};
    if (dp) slm_dist_allreduce(f, 2, SLM_DT_I64, SLM_OP_MAX, "stop flags (micro-batch)");
    return f[0] ? 1 : f[1] ? 2 : 0;
}

slm_status slm_train_run(const slm_train_opts *o, slm_train_result *res) {
    run_state r;
    memset(&r, 0, sizeof r);
    slm_status st = check_opts(o);
    if (st) return st;
    // Data parallel under mpirun: every rank runs this function with the same options.
    const int W = slm_dist_world(), RANK = slm_dist_rank();
    slm_dist_set_timeout(o->collective_timeout_s);
    // kernels/ splits GEMMs over the OpenMP threads itself (OpenBLAS stays single-threaded).
    if (o->threads > 0) omp_set_num_threads(o->threads);
    const int B = o->B, T = o->T, K = o->grad_accum;
    float min_lr = o->min_lr >= 0 ? o->min_lr : o->adamw.lr_peak / 10.0f;

    // --- Config, dataset, tokenizer: every mismatch is an error before any allocation.
    slm_llama_config cfg;
    st = slm_train_resolve_config(o->model, o->vocab_size, T, &cfg);
    if (st) goto out;
    st = check_memory(o, &cfg, W);
    if (st) goto out;
    if (o->init_from_hf) { // the HF weights' shapes against the config, before allocating
        st = slm_hf_check_shapes(o->init_from_hf, &cfg);
        if (st) {
            st = slm_fail_wrap(st, "--init-from-hf %s", o->init_from_hf);
            goto out;
        }
    }
    if (!o->synthetic) {
        st = slm_dataset_open(o->data_dir, &r.ds);
        if (st) goto out;
        r.ds_open = true;
        st = slm_tokenizer_load(r.ds.tokenizer_file, &r.tok);
        if (st) {
            st = slm_fail_wrap(st, "dataset %s", o->data_dir);
            goto out;
        }
        st = slm_train_check_vocab(&r.ds, r.tok, &cfg, o->model);
        if (!st && o->init_from_hf) // the HF weights' token ids must be the dataset's
            st = slm_train_check_dir_tokenizer(o->init_from_hf, &r.ds, "--init-from-hf",
                                               "prepare the dataset with that directory's "
                                               "tokenizer (shardlm prep --tokenizer)");
        if (st) goto out;
        // Each rank reads its slice (B windows) of the global batch of B x W windows.
        uint64_t n_win = r.ds.train.n_tokens > 0 ? (r.ds.train.n_tokens - 1) / (uint64_t)T : 0;
        if (n_win < (uint64_t)B * (uint64_t)W) {
            st = slm_fail(SLM_E_ARG,
                          "dataset %s: the train split has %llu windows of --seq + 1 = %d tokens; "
                          "need at least %lld (--batch %d%s); reduce --batch or --seq, or "
                          "prepare more data",
                          o->data_dir, (unsigned long long)n_win, T + 1, (long long)B * W, B,
                          W > 1 ? " x the ranks" : "");
            goto out;
        }
        slm_loader_opts lo = {.dir = o->data_dir, .split = "train", .T = T, .B_global = B * W,
                              .rank = RANK, .world = W, .seed = o->seed, .shuffle = true};
        st = slm_loader_open(&lo, &r.train_l);
        if (st) goto out;
        if (o->eval_every > 0) {
            if (r.ds.val.n_tokens < (uint64_t)T + 1) {
                slm_warn("dataset %s: the val split has %llu tokens, fewer than one window of "
                         "%d; validation is skipped",
                         o->data_dir, (unsigned long long)r.ds.val.n_tokens, T + 1);
            } else {
                slm_loader_opts vo = lo;
                vo.split = "val";
                vo.B_global = 1;
                vo.rank = 0; // every rank evaluates the same windows (the hooks are collective)
                vo.world = 1;
                vo.shuffle = false;
                st = slm_loader_open(&vo, &r.val_l);
                if (st) goto out;
                r.val_start = slm_loader_get_state(r.val_l);
            }
        }
    }

    // --- Run directory: config, tokenizer copy, metrics log.
    if (o->out_dir && RANK == 0) {
        // A fresh run never mixes with an earlier run's files: its checkpoints would be resumed
        // by a later --resume auto (refused unless --train-from-scratch moves them aside; they
        // are never deleted). Not a run directory, or locked by another run: refused
        // (slm_rundir_prepare).
        st = slm_rundir_prepare(o, &r.rundir, &r.resume_path);
        if (st) goto run_dir_done;
        if (r.resume_path && r.ds_open) { // before the dataset's tokenizer replaces the run's
            st = slm_train_check_resume_tokenizer(o->out_dir, r.resume_path, &r.ds);
            if (st) goto run_dir_done;
        }
        char *p = slm_path_join(o->out_dir, "config.json");
        st = slm_llama_config_save(&cfg, p);
        free(p);
        if (st) goto run_dir_done;
        if (r.tok) {
            // Under its canonical name, where slm_model_dir_open looks for it.
            p = slm_path_join(o->out_dir, slm_tokenizer_type(r.tok) == SLM_TOK_SPM_BPE
                                              ? "tokenizer.model"
                                              : "tokenizer.json");
            st = copy_file(r.ds.tokenizer_file, p);
            free(p);
            if (st) goto run_dir_done;
        }
        p = slm_path_join(o->out_dir, "metrics.jsonl");
        r.jsonl = fopen(p, r.resume_path ? "a" : "w"); // a resumed run appends
        if (!r.jsonl) st = slm_fail(SLM_E_IO, "%s: cannot open for writing", p);
        free(p);
        if (st) goto run_dir_done;
    }
run_dir_done:
    // Rank 0 alone writes the run directory; the others learn of its failure here.
    if (W > 1) st = slm_dist_agree(st);
    if (st) goto out;
    if (o->out_dir && W > 1) { // rank 0 resolved --resume with the run directory
        st = slm_rundir_share_resume(o, r.rundir, RANK, &r.resume_path);
        if (st) goto out;
    }

    // --- Model, optimizer state.
    // World > 1: the model holds no buffers; fsdp/ owns the shards and points params / grads at
    // gathered units through the unit hooks. Its init equals slm_llama_init_weights.
    r.dp = W > 1;
    st = slm_llama_init(&r.model, &cfg, !r.dp);
    if (st) goto out;
    r.model_init = true;
    if (r.dp) {
        st = slm_fsdp_init(&r.fsdp, &r.model, &o->fsdp, o->seed);
        if (st) {
            r.dp = false;
            goto out;
        }
    } else {
        slm_llama_init_weights(&r.model, o->seed);
    }
    r.model.activation_checkpointing = o->activation_checkpointing;
    slm_llama_set_shape(&r.model, B, T, false);
    int NU = r.model.n_units;
    if (!r.dp) { // single process: full-unit AdamW state (fsdp/ keeps shards otherwise)
        r.m = slm_xcalloc((size_t)NU, sizeof(float *));
        r.v = slm_xcalloc((size_t)NU, sizeof(float *));
        r.ranges = slm_xcalloc((size_t)NU, sizeof(slm_decay_range *));
    }
    for (int u = 0; u < NU && !r.dp; u++) {
        size_t bytes = (size_t)r.model.units[u].numel * sizeof(float);
        r.m[u] = slm_xaligned(bytes);
        r.v[u] = slm_xaligned(bytes);
        memset(r.m[u], 0, bytes);
        memset(r.v[u], 0, bytes);
        // One decay range per view (matmul weights decayed; norms and embedding not).
        r.ranges[u] = slm_xmalloc((size_t)r.model.units[u].n_views * sizeof(slm_decay_range));
        for (int i = 0; i < r.model.units[u].n_views; i++) {
            const slm_param_view *pv = &r.model.units[u].views[i];
            r.ranges[u][i] = (slm_decay_range){pv->offset, pv->offset + pv->numel,
                                               pv->weight_decay};
        }
    }
    r.win = slm_xmalloc((size_t)K * B * (T + 1) * sizeof(int32_t));
    r.inp = slm_xmalloc((size_t)B * T * sizeof(int32_t));
    r.tgt = slm_xmalloc((size_t)B * T * sizeof(int32_t));

    // n 2048, best of 5: n 1024 and single runs read low (too little work per thread, and a
    // shared machine).
    double peak = o->peak_gflops > 0 ? o->peak_gflops : slm_sgemm_peak_gflops(2048, 5);
    double fpt = slm_train_flops_per_token(&cfg, T);
    slm_info("model %s: %lld parameters (%lld in matmuls), %d layers, hidden %d, vocab %d; "
             "B %d x T %d x accum %d = %lld tokens/step; activations %.1f MiB%s; peak %.1f "
             "GFLOP/s; %.3g FLOPs/token",
             o->model, (long long)slm_llama_n_params(&cfg),
             (long long)slm_llama_n_matmul_params(&cfg), cfg.num_hidden_layers, cfg.hidden_size,
             cfg.vocab_size, B, T, K, (long long)B * T * K,
             (double)slm_llama_act_bytes(&r.model) / 1048576.0,
             o->activation_checkpointing ? " (activation checkpointing)" : "", peak, fpt);
    if (r.jsonl) {
        fprintf(r.jsonl,
                "{\"event\":\"start\",\"model\":\"%s\",\"n_params\":%lld,\"batch\":%d,\"seq\":%d,"
                "\"grad_accum\":%d,\"steps\":%lld,\"warmup\":%lld,\"lr\":%.9g,\"min_lr\":%.9g,"
                "\"weight_decay\":%.9g,\"grad_clip\":%.9g,\"seed\":%llu,\"threads\":%d,"
                "\"peak_gflops\":%.6g,\"flops_per_token\":%.9g}\n",
                o->model, (long long)slm_llama_n_params(&cfg), B, T, K, (long long)o->steps,
                (long long)o->warmup, (double)o->adamw.lr_peak, (double)min_lr,
                (double)o->adamw.weight_decay, (double)o->grad_clip,
                (unsigned long long)o->seed, omp_get_max_threads(), peak, fpt);
        fflush(r.jsonl);
    }

    slm_rng synth;
    slm_rng_seed(&synth, o->seed ^ SLM_TRAIN_SYNTH_SEED_XOR);
    double t_start = slm_time_s();
    double sum_tps = 0, sum_mfu = 0, last_loss = NAN, last_val = NAN;
    int64_t n_rate = 0, tokens_seen = 0, step = 0;
    bool interrupted = false;
    // --- Initial state: HF weights, or everything from a checkpoint; then the saver.
    if (o->init_from_hf && r.dp) {
        // Every rank loads the full weights once and keeps its shard of each unit.
        slm_llama full;
        st = slm_llama_init(&full, &cfg, true);
        if (!st) {
            st = slm_model_dir_init_weights(o->init_from_hf, &full);
            for (int u = 0; !st && u < NU; u++) slm_fsdp_load_unit(&r.fsdp, u, full.params[u]);
            slm_llama_free(&full);
        }
        st = slm_dist_agree(st);
        if (st) goto out;
        slm_info("initial weights from %s", o->init_from_hf);
    } else if (o->init_from_hf) {
        st = slm_model_dir_init_weights(o->init_from_hf, &r.model);
        if (st) goto out;
        slm_info("initial weights from %s", o->init_from_hf);
    }
    if (!o->out_dir) { // with a run directory this was resolved above ("auto" needs one)
        st = slm_ckpt_resolve_resume(o->resume, NULL, &r.resume_path);
        if (st) goto out;
    }
    if (r.resume_path) {
        st = resume_from(&r, r.resume_path, &synth, &step, &tokens_seen);
        if (st) goto out;
        if (o->init_from_hf && RANK == 0) // only --resume auto gets here (the CLI refuses PATH)
            slm_info("--init-from-hf %s not used: the run continues from its checkpoint",
                     o->init_from_hf);
        if (step >= o->steps) { // nothing to train: say so (no NaN loss, no rate)
            st = already_complete(o, step, res);
            goto out;
        }
    }
    if (o->out_dir) {
        // Under FSDP every rank writes its shard file, except replicas (shard group > 0: NO_SHARD
        // / HYBRID_SHARD), whose shards equal shard group 0's.
        char *root = slm_path_join(o->out_dir, "checkpoints");
        slm_ckpt_policy pol = {.root = root, .every_steps = o->ckpt_every_steps,
                               .every_minutes = o->ckpt_every_minutes, .keep = o->ckpt_keep,
                               .sync = o->ckpt_sync, .abort_on_error = o->ckpt_abort_on_error};
        st = slm_ckpt_sched_new(&pol, RANK, W, r.dp && RANK / r.fsdp.S != 0, &r.ckpt);
        free(root);
        if (st) goto out;
    }
    for (; step < o->steps; step++) {
        // Ranks see a signal or the clock at different moments: agree, so all stop together.
        int64_t stop_now[2] = {g_stop != 0,
                               o->max_minutes > 0 && slm_time_s() - t_start >= o->max_minutes * 60.0};
        if (r.dp) slm_dist_allreduce(stop_now, 2, SLM_DT_I64, SLM_OP_MAX, "stop flags");
        if (stop_now[0]) {
            interrupted = true;
            break;
        }
        if (stop_now[1]) {
            slm_info("--max-minutes %.3g reached after %lld steps; stopping", o->max_minutes,
                     (long long)step);
            break;
        }
        double t0 = slm_time_s();
        // A stop between micro-batches discards the partial step: the loader and the synthetic
        // RNG go back to the step's start, so the checkpoint resumes by replaying the whole step.
        slm_loader_state step_pos = {0};
        if (r.train_l) step_pos = slm_loader_get_state(r.train_l);
        slm_rng step_synth = synth;
        // All micro-batches first, so the loss scale (this micro-batch's share of the step's
        // target tokens) is known before the first backward.
        int64_t per_win = (int64_t)B * (T + 1);
        for (int k = 0; k < K; k++) {
            int32_t *w = r.win + k * per_win;
            if (o->synthetic) // every rank draws the global batch and keeps its slice
                for (int q = 0; q < W; q++)
                    for (int64_t i = 0; i < per_win; i++) {
                        int32_t tok = (int32_t)slm_rng_below(&synth, (uint64_t)cfg.vocab_size);
                        if (q == RANK) w[i] = tok;
                    }
            else
                slm_loader_next(r.train_l, w);
        }
        int64_t n_total = 0;
        for (int64_t i = 0; i < K * per_win; i++)
            n_total += (i % (T + 1)) != 0 && r.win[i] != -1; // targets: every token but the first
        // The loss scale is each micro-batch's share of the GLOBAL step's tokens; fsdp/ sums
        // the gradients over the ranks.
        if (r.dp) slm_dist_allreduce(&n_total, 1, SLM_DT_I64, SLM_OP_SUM, "target token count");
        if (n_total == 0) n_total = 1;
        if (r.dp)
            slm_fsdp_zero_grad(&r.fsdp);
        else
            slm_llama_zero_grad(&r.model);
        double loss_sum = 0;
        int mb_stop = 0; // 1: stop signal, 2: --max-minutes, agreed between micro-batches
        for (int k = 0; k < K; k++) {
            if (k > 0 && (mb_stop = micro_batch_stop(r.dp, o->max_minutes, t_start))) break;
            int64_t n = slm_train_split_windows(r.win + k * per_win, B, T, r.inp, r.tgt);
            float loss = slm_llama_forward(&r.model, r.inp, r.tgt, B, T);
            // Under FSDP a rank must not leave the collective schedule alone: a non-finite
            // local loss reaches every rank through the step-loss all-reduce below (NaN / Inf
            // propagate through the sum) and all ranks fail there together.
            if (!isfinite(loss) && !r.dp) {
                st = slm_fail(SLM_E_NUMERIC,
                              "step %lld, micro-batch %d: training loss is %f; HINT: lower --lr "
                              "(now %g) or --grad-clip",
                              (long long)step + 1, k, (double)loss, (double)o->adamw.lr_peak);
                goto out;
            }
            // d(mean over the step's tokens)/dp = sum_k (n_k / n_total) d(mean_k)/dp
            slm_llama_backward(&r.model, (float)((double)n / (double)n_total));
            loss_sum += (double)loss * (double)n;
        }
        if (mb_stop) {
            // Every rank stops at the same micro-batch: finish its pending reduce-scatters (the
            // partial gradients are dropped) and release the gathered units before saving.
            if (r.dp) {
                slm_fsdp_sync_grads(&r.fsdp);
                slm_fsdp_release_all(&r.fsdp);
            }
            if (r.train_l) st = slm_loader_set_state(r.train_l, step_pos);
            if (st) goto out;
            synth = step_synth;
            if (mb_stop == 1) interrupted = true;
            else
                slm_info("--max-minutes %.3g reached during step %lld; stopping after %lld "
                         "steps (the partial step is discarded)",
                         o->max_minutes, (long long)step + 1, (long long)step);
            break;
        }
        if (r.dp) slm_dist_allreduce(&loss_sum, 1, SLM_DT_F64, SLM_OP_SUM, "step loss");
        double loss = loss_sum / (double)n_total;
        if (!isfinite(loss)) {
            st = slm_fail(SLM_E_NUMERIC,
                          "step %lld: training loss is %f (on at least one rank); HINT: lower "
                          "--lr (now %g) or --grad-clip",
                          (long long)step + 1, loss, (double)o->adamw.lr_peak);
            goto out;
        }
        double gnorm;
        if (r.dp) { // global norm over the shards, and clipping (same formula as below)
            gnorm = slm_fsdp_clip_grad_norm(&r.fsdp, o->grad_clip);
        } else { // world of one: the same clipping through optim/ (before the finiteness check:
                 // a non-finite norm scales nothing)
            int64_t *lens = slm_xmalloc((size_t)NU * sizeof *lens);
            for (int u = 0; u < NU; u++) lens[u] = r.model.units[u].numel;
            gnorm = slm_clip_grad_norm(r.model.grads, lens, NU, o->grad_clip);
            free(lens);
        }
        if (!isfinite(gnorm)) {
            st = slm_fail(SLM_E_NUMERIC,
                          "step %lld: gradient norm is %f (loss %.4f); HINT: lower --lr",
                          (long long)step + 1, gnorm, loss);
            goto out;
        }
        // With time_schedule the schedule advances by whichever is further along: steps or
        // the share of max_minutes spent, so it completes within the time budget.
        int64_t sched_step = step;
        if (o->time_schedule && o->max_minutes > 0) {
            double frac = (slm_time_s() - t_start) / (o->max_minutes * 60.0);
            int64_t by_time = (int64_t)(frac * (double)o->steps);
            if (by_time > sched_step) sched_step = by_time;
            if (r.dp) slm_dist_allreduce(&sched_step, 1, SLM_DT_I64, SLM_OP_MAX, "LR step");
        }
        float lr = slm_lr_at(sched_step, o->warmup, o->steps, o->adamw.lr_peak, min_lr);
        slm_ckpt_sched_fence(r.ckpt); // an async save may still be copying params / m / v
        if (r.dp)
            slm_fsdp_optimizer_step(&r.fsdp, &o->adamw, lr); // AdamW on this rank's shards
        else
            for (int u = 0; u < NU; u++)
                slm_adamw_step(r.model.params[u], r.model.grads[u], r.m[u], r.v[u],
                               r.model.units[u].numel, &o->adamw, lr, step + 1, r.ranges[u],
                               r.model.units[u].n_views);
        double dt = slm_time_s() - t0;
        int64_t step_tokens = (int64_t)B * T * K * W; // global
        tokens_seen += step_tokens;
        slm_step_metrics sm = {.step = step + 1, .total_steps = o->steps, .loss = loss,
                               .lr = lr, .grad_norm = gnorm,
                               .tokens_per_s = (double)step_tokens / dt,
                               .ms_per_step = dt * 1e3, .val_loss = NAN,
                               .tokens_seen = tokens_seen};
        sm.mfu = sm.tokens_per_s * fpt / (peak * 1e9 * W); // peak is one process's
        last_loss = loss;
        // The first step pays for first-touch page faults and thread start-up: kept out of the
        // means when there is more than one step.
        if (step > 0 || o->steps == 1) {
            sum_tps += sm.tokens_per_s;
            sum_mfu += sm.mfu;
            n_rate++;
        }
        bool last = step + 1 == o->steps;
        if (r.val_l && ((step + 1) % o->eval_every == 0 || last)) {
            slm_eval_result er;
            st = slm_loader_set_state(r.val_l, r.val_start);
            if (st) goto out;
            // eval batches are of the per-rank B: W times as many cover the same windows as
            // a world of one with batch B x W (every rank evaluates all of them)
            st = slm_train_eval_loader(&r.model, r.val_l, B, T, (int64_t)o->eval_batches * W, &er);
            if (st) {
                st = slm_fail_wrap(st, "step %lld", (long long)step + 1);
                goto out;
            }
            sm.val_loss = last_val = er.loss;
        }
        sm.elapsed_s = slm_time_s() - t_start;
        if (RANK == 0 && o->log_every > 0 &&
            ((step + 1) % o->log_every == 0 || last || step == 0 || isfinite(sm.val_loss))) {
            printf("step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tok/s | "
                   "MFU %.1f%% | %.1f ms/step",
                   (long long)sm.step, (long long)o->steps, sm.loss, sm.lr, sm.grad_norm,
                   sm.tokens_per_s, 100.0 * sm.mfu, sm.ms_per_step);
            if (isfinite(sm.val_loss)) printf(" | val loss %.4f", sm.val_loss);
            printf("\n");
            fflush(stdout);
        }
        write_step_json(r.jsonl, &sm);
        for (int h = 0; h < o->n_hooks; h++) o->hooks[h].fn(o->hooks[h].ctx, &sm);
        if (r.ckpt) {
            st = ckpt_step(&r, o, &synth, step + 1, tokens_seen, min_lr,
                           slm_ckpt_sched_due(r.ckpt, step + 1, false));
            if (st) goto out;
        }
    }
    // The final state (end, --max-minutes or a stop signal) is always checkpointed.
    if (r.ckpt) {
        st = ckpt_step(&r, o, &synth, step, tokens_seen, min_lr, true);
        if (!st) st = slm_ckpt_sched_finish(r.ckpt);
        if (st) goto out;
        int64_t n_saves;
        double stall_total, stall_max;
        slm_ckpt_sched_stats(r.ckpt, &n_saves, &stall_total, &stall_max);
        int64_t n_failed = slm_ckpt_sched_n_failed(r.ckpt);
        char failed[64] = "";
        if (n_failed)
            snprintf(failed, sizeof failed, " (%lld failed, see the errors above)",
                     (long long)n_failed);
        slm_info("checkpoints: %lld saved%s under %s/checkpoints, training stall %.1f ms max, "
                 "%.1f ms total",
                 (long long)n_saves, failed, o->out_dir, stall_max * 1e3, stall_total * 1e3);
    }

    // A stop before the planned end still evaluates what it has, so the run has a val loss.
    if (r.val_l && step > 0 && step < o->steps && !interrupted) {
        slm_eval_result er;
        st = slm_loader_set_state(r.val_l, r.val_start);
        if (!st) st = slm_train_eval_loader(&r.model, r.val_l, B, T, (int64_t)o->eval_batches * W, &er);
        if (st) goto out;
        last_val = er.loss;
        if (RANK == 0) printf("step %6lld | val loss %.4f\n", (long long)step, er.loss);
        fflush(stdout);
    }
    if (r.jsonl) {
        slm_buf b = {0};
        slm_buf_appendf(&b, "{\"event\":\"end\",\"steps\":%lld", (long long)step);
        jsonl_num(&b, "loss", last_loss);
        jsonl_num(&b, "val_loss", last_val);
        jsonl_num(&b, "tokens_per_s", n_rate ? sum_tps / (double)n_rate : NAN);
        jsonl_num(&b, "mfu", n_rate ? sum_mfu / (double)n_rate : NAN);
        slm_buf_appendf(&b, ",\"interrupted\":%s}\n", interrupted ? "true" : "false");
        fputs(b.data, r.jsonl);
        slm_buf_free(&b);
    }
    if (res) {
        res->steps_done = step;
        res->final_loss = last_loss;
        res->final_val_loss = last_val;
        res->tokens_per_s = n_rate ? sum_tps / (double)n_rate : NAN;
        res->mfu = n_rate ? sum_mfu / (double)n_rate : NAN;
        res->peak_gflops = peak;
        res->flops_per_token = fpt;
    }
    if (interrupted)
        st = slm_fail(SLM_E_INTERRUPTED, "interrupted by a signal after step %lld%s%s%s",
                      (long long)step, o->out_dir ? "; checkpoint saved under " : "",
                      o->out_dir ? o->out_dir : "", o->out_dir ? "/checkpoints" : "");
out:
    // A save that finished writing is committed on an error exit too: every rank gets here
    // together in a world of one and after a non-finite loss (agreed by the all-reduce);
    // otherwise it is discarded with a warning (a commit is collective).
    if (st && r.ckpt) slm_ckpt_sched_settle(r.ckpt, W == 1 || st == SLM_E_NUMERIC);
    run_state_free(&r);
    return st;
}
