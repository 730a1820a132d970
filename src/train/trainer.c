// The training run as phases: open (data, run directory, lock, resume decision), init (model,
// fsdp, buffers, schedule, initial state), step (one optimizer step), finish, close. One path for
// every world size: fsdp/ holds the parameters, gradients and AdamW state (a world of one is
// NO_SHARD over one-rank communicators). Contract in train.h.
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "data/data.h"
#include "dist/dist.h"
#include "train/train.h"
#include "train/train_internal.h"

// ---------------------------------------------------------------------------------------------
// Open

// The options' ranges and the rules between them: train/options.c, the one place.
static slm_status check_opts(const slm_train_opts *o) {
    return slm_train_opts_check(o);
}

// Up-front estimate of one rank's memory (before any allocation or file): parameters,
// gradients and AdamW m, v (slm_fsdp_estimate_bytes) and the activation workspace for B x T
// (slm_llama_act_bytes_estimate). Compared with the memory probe (slm_mem_probe: MemAvailable,
// ulimit -v, cgroup memory.max); too much is SLM_E_NOMEM (exit 1) naming the estimate, the limit
// and what to reduce. With a run directory, the asynchronous checkpoint's staging copy (params,
// m, v of the rank's shard: 3 x fp32 per parameter) is counted too: when only it does not fit,
// the run goes ahead and says that its checkpoints will be written synchronously, straight from
// the shards (the saver decides again at each save).
static slm_status check_memory(const slm_train_opts *o, const slm_llama_config *cfg, int W,
                               slm_device *dev) {
    double n = (double)slm_llama_n_params(cfg);
    double C = cfg->hidden_size, F = cfg->intermediate_size, V = cfg->vocab_size;
    double big_unit = 4 * C * C + 3 * F * C;
    if (2 * V * C > big_unit) big_unit = 2 * V * C;
    double state = slm_fsdp_estimate_bytes(&o->fsdp, W, n, big_unit);
    double staging = 3.0 * n * sizeof(float) / slm_fsdp_shard_group_for(&o->fsdp, W);
    if (o->lora.rank > 0) { // frozen base (params only) + adapters; checkpoints: adapters only
        double na = (double)slm_lora_n_params(cfg, &o->lora);
        state = slm_fsdp_estimate_bytes_lora(&o->fsdp, W, n, na, big_unit);
        staging = 3.0 * na * sizeof(float) / slm_fsdp_shard_group_for(&o->fsdp, W);
    }
    double acts = slm_llama_act_bytes_estimate(cfg, o->B, o->T, o->activation_checkpointing);
    if (o->lora.rank > 0) { // the adapters' saved activations [N, r] per target and block,
        // and the dropout scratch [N, widest input] x 2 (lora.c)
        double N = (double)o->B * o->T, in_max = cfg->intermediate_size;
        double hd = (double)cfg->num_attention_heads * slm_llama_head_dim(cfg);
        if (hd > in_max) in_max = hd;
        if (cfg->hidden_size > in_max) in_max = cfg->hidden_size;
        double blocks = o->activation_checkpointing ? 1 : cfg->num_hidden_layers;
        acts += (blocks * SLM_LORA_N_TARGETS + 1) * N * o->lora.rank * sizeof(float) +
                (o->lora.dropout > 0 ? 2 * N * in_max * sizeof(float) : 0);
    }
    if (slm_device_kind_of(dev) == SLM_DEVICE_CUDA) { // the state and activations live there
        char a[32], b[32], c[32];
        slm_status st = slm_dev_mem_check(
            dev, state + acts,
            "model %s (%.3g parameters) with --batch %d --seq %d (%s of parameters, gradients and "
            "AdamW state, %s of activations)",
            o->model ? o->model : "(default)", n, o->B, o->T, slm_fmt_bytes(state, a),
            slm_fmt_bytes(acts, b));
        if (st) return slm_fail_wrap(st, "on %s", slm_device_describe(dev));
        if (slm_dist_rank() == 0)
            slm_info("memory: about %s of %s memory (%s of parameters, gradients and AdamW state, "
                     "%s of activations)",
                     slm_fmt_bytes(state + acts, a), slm_device_describe(dev),
                     slm_fmt_bytes(state, b), slm_fmt_bytes(acts, c));
        return SLM_OK;
    }
    slm_mem_info mi;
    slm_mem_probe(&mi);
    double need = state + acts, avail = mi.bytes;
    char a[32], b[32], c[32], d[32], e[32];
    if (avail <= 0 || need <= avail) {
        // the start-up summary once (rank 0; under mpirun every rank would print a copy), the
        // synchronous-checkpoint note from any rank it applies to (memory differs per host)
        if (slm_dist_rank() == 0)
            slm_info(
                "memory: about %s per process (%s of parameters, gradients and AdamW state, %s "
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
                    mi.limit_name,
                    o->activation_checkpointing ? "" : ", add --activation-checkpointing");
}

// The model's device: --simulate-compute's SLEEP device, --device's, or the CPU (NULL). A GPU
// trains one rank for now: FSDP's collectives on device buffers (dist's slm_dcomm_*: NCCL, or
// host-staged MPI) are not wired into fsdp/ yet, so a larger world is refused up front.
static slm_status open_device(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    if (o->simulate_gflops > 0) {
        tr->dev = slm_device_sleep(o->simulate_gflops);
        return SLM_OK;
    }
    if (!o->device || strcmp(o->device, "cpu") == 0) return SLM_OK;
    if (tr->W > 1)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "--device %s with %d ranks: FSDP's collectives on GPU buffers (NCCL "
                        "through dist's device communicators) are not wired into fsdp/ yet; run "
                        "one rank on the GPU, or --device cpu",
                        o->device, tr->W);
    slm_status st = slm_device_open(o->device, &tr->dev);
    if (st) return slm_fail_wrap(st, "--device %s", o->device);
    if (tr->rank == 0) slm_info("train: device %s", slm_device_describe(tr->dev));
    return SLM_OK;
}

// The train loader (each rank reads its slice, B windows, of the global batch of B x W) and the
// val loader (every rank evaluates the same windows).
static slm_status open_loaders(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    int B = tr->B, T = tr->T, W = tr->W;
    uint64_t n_win = tr->ds.train.n_tokens > 0 ? (tr->ds.train.n_tokens - 1) / (uint64_t)T : 0;
    // instruction data: windows are packed samples; the loader counts them (and refuses too few)
    if (!tr->ds.masked && n_win < (uint64_t)B * (uint64_t)W)
        return slm_fail(SLM_E_ARG,
                        "dataset %s: the train split has %llu windows of --seq + 1 = %d tokens; "
                        "need at least %lld (--batch %d%s); reduce --batch or --seq, or "
                        "prepare more data",
                        o->data_dir, (unsigned long long)n_win, T + 1, (long long)B * W, B,
                        W > 1 ? " x the ranks" : "");
    if (o->no_packing && !tr->ds.masked && tr->rank == 0)
        slm_warn("--no-packing has no effect on dataset %s: it is plain (text) data, whose "
                 "windows are fixed slices of the token stream; the option applies to "
                 "instruction data (prep --format prompt-completion|chat)",
                 o->data_dir);
    slm_loader_opts lo = {.dir = o->data_dir,
                          .split = "train",
                          .T = T,
                          .B_global = B * W,
                          .rank = tr->rank,
                          .world = W,
                          .seed = o->seed,
                          .shuffle = true,
                          .no_packing = o->no_packing,
                          .max_T = tr->cfg.max_position_embeddings};
    slm_status st = slm_loader_open(&lo, &tr->train_l);
    if (st || o->eval_every <= 0) return st;
    if (tr->ds.masked ? tr->ds.val.n_docs == 0 : tr->ds.val.n_tokens < (uint64_t)T + 1) {
        slm_warn("dataset %s: the val split has %llu tokens, fewer than one window of %d; "
                 "validation is skipped",
                 o->data_dir, (unsigned long long)tr->ds.val.n_tokens, T + 1);
        return SLM_OK;
    }
    slm_loader_opts vo = lo;
    vo.split = "val";
    vo.B_global = 1;
    vo.rank = 0; // every rank evaluates the same windows
    vo.world = 1;
    vo.shuffle = false;
    st = slm_loader_open(&vo, &tr->val_l);
    if (!st) tr->val_start = slm_loader_get_state(tr->val_l);
    return st;
}

// Dataset, tokenizer, loaders: every mismatch is an error before anything is written.
// --init-from-gguf: the dataset must be prepared with the tokenizer the GGUF file carries (the
// tokenizer file `shardlm tokenizer from-gguf` writes, compared by XXH64).
static slm_status check_gguf_tokenizer(const char *path, const slm_dataset *ds) {
    slm_gguf_file g;
    slm_buf b = {0};
    slm_status st = slm_gguf_open(path, &g);
    if (!st) st = slm_gguf_tokenizer_file(&g, &b, NULL);
    slm_gguf_close(&g);
    uint64_t h = st ? 0 : slm_xxh64(b.data, b.len, 0);
    slm_buf_free(&b);
    if (st == SLM_E_UNSUPPORTED) { // nothing to compare with: the user's responsibility
        slm_warn("--init-from-gguf %s: %s; the dataset's tokenizer is not checked", path,
                 slm_errmsg());
        return SLM_OK;
    }
    if (!st && h != ds->tokenizer_xxh64) {
        char a[17], c[17];
        slm_hex64(h, a);
        slm_hex64(ds->tokenizer_xxh64, c);
        st = slm_fail(SLM_E_FORMAT,
                      "--init-from-gguf %s carries a tokenizer of xxh64 %s, but dataset %s was "
                      "prepared with %s (xxh64 %s): the token ids would mean other text; HINT: "
                      "shardlm tokenizer from-gguf --gguf %s --out TOKENIZER, then prep "
                      "--tokenizer TOKENIZER",
                      path, a, ds->dir, ds->tokenizer_file, c, path);
    }
    return st;
}

static slm_status open_data(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    if (o->synthetic) return SLM_OK;
    slm_status st = slm_dataset_open(o->data_dir, &tr->ds);
    if (st) return st;
    tr->ds_open = true;
    st = slm_tokenizer_load(tr->ds.tokenizer_file, &tr->tok);
    if (st) return slm_fail_wrap(st, "dataset %s", o->data_dir);
    st = slm_train_check_vocab(&tr->ds, tr->tok, &tr->cfg, o->model);
    if (!st && o->init_from_gguf) // the GGUF's token ids must be the dataset's
        st = check_gguf_tokenizer(o->init_from_gguf, &tr->ds);
    if (!st && o->init_from_hf) // the HF weights' token ids must be the dataset's
        st = slm_train_check_dir_tokenizer(o->init_from_hf, &tr->ds, "--init-from-hf",
                                           "prepare the dataset with that directory's "
                                           "tokenizer (shardlm prep --tokenizer)");
    return st ? st : open_loaders(tr);
}

// Rank 0, after the resume decision: the run directory's files. A fresh run never mixes with an
// earlier run's files: its checkpoints would be resumed by a later --resume auto (refused unless
// --train-from-scratch moves them aside; never deleted: resume.c), its metrics.jsonl starts
// empty.
static slm_status write_rundir(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    char *p = slm_path_join(o->out_dir, "config.json");
    slm_status st = slm_llama_config_save(&tr->cfg, p);
    free(p);
    if (!st && tr->tok) { // under its canonical name, where slm_model_dir_open looks for it
        p = slm_path_join(o->out_dir, slm_tokenizer_type(tr->tok) == SLM_TOK_SPM_BPE
                                          ? "tokenizer.model"
                                          : "tokenizer.json");
        st = slm_file_copy(tr->ds.tokenizer_file, p, NULL);
        free(p);
    }
    if (st) return st;
    p = slm_path_join(o->out_dir, "metrics.jsonl");
    // A resumed run appends (hooks.c), and so does a later attempt of `shardlm launch` that
    // found no checkpoint to resume: the earlier attempts' records are the same run's history.
    const char *att = getenv("SHARDLM_ATTEMPT");
    bool later_attempt = att && strtol(att, NULL, 10) > 1;
    FILE *f = fopen(p, tr->resume_path || later_attempt ? "a" : "w");
    if (!f)
        st = slm_fail(SLM_E_IO, "%s: cannot open for writing", p);
    else
        fclose(f);
    free(p);
    return st;
}

// Rank 0 locks the run directory (not a run directory, or locked by another run: refused,
// slm_rundir_prepare); every rank learns what to resume from (resume.c); then rank 0 writes the
// run directory's files. The others learn of rank 0's failures.
static slm_status open_rundir(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    slm_status st = SLM_OK;
    if (o->out_dir && tr->rank == 0) st = slm_rundir_prepare(o, &tr->rundir);
    st = slm_dist_agree(st);
    slm_resume_in in = {
        .o = o, .rank = tr->rank, .W = tr->W, .cfg = &tr->cfg, .ds = tr->ds_open ? &tr->ds : NULL};
    if (!st) st = slm_resume_decide(&in, &tr->resume_path, &tr->snap_one_host);
    if (st) return st; // agreed: every rank has it
    if (o->out_dir && tr->rank == 0) st = write_rundir(tr);
    return slm_dist_agree(st);
}

// Dumps of an earlier attempt in LOGS would mix with this attempt's in `shardlm flight` (a rank
// that does not dump this time, the one that hangs, would be judged by its old dump): each rank
// renames its own flight_rank_R.json to flight_rank_R.prev.json (which the reader skips), and
// rank 0 those of ranks >= W (a larger earlier world).
static void retire_flight_dumps(const char *logs, int rank, int W) {
    DIR *d = opendir(logs);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        int r;
        char tail[8];
        if (sscanf(e->d_name, "flight_rank_%d.jso%1[n]", &r, tail) != 2 ||
            strlen(e->d_name) != strlen("flight_rank_00000.json"))
            continue;
        if (!(r == rank || (rank == 0 && r >= W))) continue;
        char prev[64];
        snprintf(prev, sizeof prev, "flight_rank_%05d.prev.json", r);
        char *a = slm_path_join(logs, e->d_name), *b = slm_path_join(logs, prev);
        if (rename(a, b) != 0)
            slm_warn("%s: cannot move an earlier dump aside: %s", a, strerror(errno));
        free(a);
        free(b);
    }
    closedir(d);
}

// With a run directory, every rank's flight recorder dumps to RUN_DIR/logs/flight_rank_R.json
// (dist.h): on a collective timeout, a fatal signal or SIGUSR2 (the handlers are the caller's:
// slm_flight_install_signals).
static slm_status open_flight(slm_trainer *tr) {
    slm_flight_set_where(tr->step, "start");
    if (!tr->o->out_dir) return SLM_OK;
    char *logs = slm_path_join(tr->o->out_dir, "logs"), name[64];
    slm_status st = slm_mkdir_p(logs);
    snprintf(name, sizeof name, "flight_rank_%05d.json", tr->rank);
    char *p = slm_path_join(logs, name);
    if (!st) slm_flight_set_dump_path(p, tr->rank, tr->W);
    free(p);
    if (!st) retire_flight_dumps(logs, tr->rank, tr->W);
    free(logs);
    return slm_dist_agree(st);
}

// Rank 0, before the model is built: the checkpoint to resume fits this run
// (slm_train_check_resume_fit). Agreed by every rank. The opened checkpoint is kept for
// resume_from.
static slm_status check_resume_batch(slm_trainer *tr) {
    slm_status st = SLM_OK;
    if (tr->resume_path && tr->rank == 0)
        st = slm_train_check_resume_fit(tr->resume_path, tr->o,
                                        (slm_batch_geom){tr->B, tr->T, tr->K, tr->W}, tr->min_lr,
                                        &tr->resume_ckpt, &tr->batch_changed, &tr->batch_saved);
    return slm_dist_agree(st);
}

slm_status slm_train_open(const slm_train_opts *o, slm_trainer **out) {
    *out = NULL;
    slm_status st = check_opts(o);
    if (st) return st;
    slm_trainer *tr = slm_xcalloc(1, sizeof *tr);
    tr->o = o;
    // Data parallel under mpirun: every rank runs the phases with the same options.
    tr->W = slm_dist_world();
    tr->rank = slm_dist_rank();
    tr->B = o->B, tr->T = o->T, tr->K = o->grad_accum;
    tr->min_lr = o->min_lr >= 0 ? o->min_lr : o->adamw.lr_peak / 10.0f;
    tr->last_loss = tr->last_val = NAN;
    slm_dist_set_timeout(o->collective_timeout_s);
    slm_dist_set_lazy_poll(o->simulate_gflops > 0); // emulated cluster: ranks share few cores
    st = slm_fault_plan_from_env(&tr->faults);
    if (st) {
        slm_train_close(tr);
        return st;
    }
    if (tr->faults.n && tr->rank == 0) {
        int armed = 0; // faults without :always are inert after the first attempt
        for (int i = 0; i < tr->faults.n; i++)
            armed += slm_fault_armed(&tr->faults, &tr->faults.f[i]);
        if (armed)
            slm_warn("fault injection active: SHARDLM_FAULT=%s (attempt %d)",
                     getenv("SHARDLM_FAULT"), tr->faults.attempt);
        else
            slm_info("fault injection inert: SHARDLM_FAULT=%s fires on attempt 1 only (this is "
                     "attempt %d; append :always to fire on every attempt)",
                     getenv("SHARDLM_FAULT"), tr->faults.attempt);
    }
    // The device's compute threads (CPU: kernels/ splits GEMMs over them itself; OpenBLAS stays
    // single-threaded); threads <= 0 leaves them as the environment set them.
    slm_device_set_threads(NULL, o->threads);
    st = slm_train_resolve_config(o->model, o->vocab_size, o->T, &tr->cfg);
    if (!st) st = open_device(tr);
    if (!st) st = check_memory(o, &tr->cfg, tr->W, tr->dev);
    if (!st && o->init_from_hf) { // the HF weights' shapes against the config, before allocating
        st = slm_hf_check_shapes(o->init_from_hf, &tr->cfg);
        if (st) st = slm_fail_wrap(st, "--init-from-hf %s", o->init_from_hf);
    }
    if (!st && o->init_from_gguf) {
        st = slm_model_gguf_check_shapes(o->init_from_gguf, &tr->cfg);
        if (st) st = slm_fail_wrap(st, "--init-from-gguf"); // the message names the file
    }
    if (!st) st = open_data(tr);
    if (!st) st = open_rundir(tr);
    if (!st) st = check_resume_batch(tr);
    if (!st) st = open_flight(tr);
    if (st) {
        slm_train_close(tr);
        return st;
    }
    *out = tr;
    return SLM_OK;
}

// ---------------------------------------------------------------------------------------------
// Init

// Restores weights, AdamW m / v, the step (AdamW t and the LR position follow it), tokens seen,
// the train loader position and the synthetic-data RNG from a checkpoint (src/ckpt). Each rank
// reads only its own shard's bytes, whatever world size / strategy saved them.
static slm_status resume_from(slm_trainer *tr, const char *path) {
    slm_ckpt *c = tr->resume_ckpt; // rank 0: opened by check_resume_batch
    tr->resume_ckpt = NULL;
    slm_status st = c ? SLM_OK : slm_ckpt_open(path, &c);
    bool lora = tr->model.lora.rank > 0;
    if (!st && lora != (slm_ckpt_get_meta(c)->lora.rank > 0))
        st = slm_fail(SLM_E_ARG,
                      "%s: a %s checkpoint; this run trains %s (give the same --lora-* options "
                      "as the run that saved it)",
                      slm_ckpt_dir(c), lora ? "full-model" : "LoRA",
                      lora ? "LoRA adapters" : "the full model");
    if (!st) st = slm_ckpt_check_model(c, &tr->model);
    if (!st && lora && slm_ckpt_get_meta(c)->lora_base_xxh64 != tr->lora_base_xxh64)
        st = slm_fail(SLM_E_FORMAT,
                      "%s: its adapters were trained on the base %s (xxh64 %016llx), but "
                      "--init-from-hf %s has xxh64 %016llx: not the same base weights",
                      slm_ckpt_dir(c), slm_ckpt_get_meta(c)->lora_base,
                      (unsigned long long)slm_ckpt_get_meta(c)->lora_base_xxh64,
                      tr->o->init_from_hf, (unsigned long long)tr->lora_base_xxh64);
    // A LoRA checkpoint's unit l is adapter unit n_units + l of fsdp/ (the base stays as
    // loaded from --init-from-hf).
    int u0 = lora ? tr->model.n_units : 0;
    int nu = lora ? tr->cfg.num_hidden_layers : tr->model.n_units;
    slm_progress pg; // rank 0's share of the reads (params, m, v)
    slm_progress_begin(&pg, "checkpoint load", 0, (double)nu);
    pg.on = pg.on && tr->rank == 0;
    float *host = NULL; // one unit's params, m, v at a time, then to the device (fsdp/)
    size_t cap = 0;
    for (int u = 0; !st && u < nu; u++) {
        int64_t b, e;
        slm_fsdp_shard_range(&tr->fsdp, u0 + u, &b, &e);
        size_t need = 3 * (size_t)(e - b) * sizeof(float);
        if (need > cap) {
            slm_dev_host_free(tr->model.dev, host);
            host = slm_dev_host_alloc(tr->model.dev, need);
            cap = need;
        }
        float *arr[3];
        for (int k = 0; k < 3; k++)
            arr[k] = slm_fsdp_shard_has(&tr->fsdp, u0 + u, (slm_fsdp_state)k)
                         ? host + (size_t)k * (size_t)(e - b)
                         : NULL;
        st = slm_ckpt_read_range(c, u, b, e, arr[0], arr[1], arr[2]);
        for (int k = 0; !st && k < 3; k++)
            if (arr[k])
                slm_fsdp_shard_write(&tr->fsdp, u0 + u, (slm_fsdp_state)k, 0, e - b, arr[k]);
        slm_progress_update(&pg, u + 1, "unit %d of %d", u + 1, nu);
    }
    slm_dev_host_free(tr->model.dev, host);
    if (st)
        slm_progress_abandon(&pg);
    else
        slm_progress_end(&pg, nu, "%d units", nu);
    slm_fsdp_release_all(&tr->fsdp);
    st = slm_dist_agree(st);
    if (!st && tr->ds_open) { // the token ids must mean what they meant when it was saved
        const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
        st = slm_train_check_ckpt_tokenizer(M->has_tokenizer, M->tokenizer_xxh64, slm_ckpt_dir(c),
                                            &tr->ds);
    }
    if (!st) {
        const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
        slm_fsdp_set_steps_done(&tr->fsdp, M->opt_step);
        tr->step = M->step;
        tr->tokens_seen = M->tokens_seen;
        tr->n_skipped = M->nonfinite_skips; // 0 from a manifest without "skips"
        tr->skip_run = M->nonfinite_in_a_row;
        tr->n_empty = M->empty_skips;
        tr->synth = M->rng;
        if (tr->train_l) st = slm_loader_set_state(tr->train_l, M->loader);
        if (!st) slm_info("resumed from %s (step %lld)", slm_ckpt_dir(c), (long long)M->step);
    }
    slm_ckpt_free(c);
    return st ? slm_fail_wrap(st, "--resume %s", path) : SLM_OK;
}

// A resume at or past --steps: the run is complete (SLM_OK, the result says so) or --steps is
// below the checkpoint (SLM_E_ARG).
static slm_status already_complete(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    if (tr->step > o->steps)
        return slm_fail(SLM_E_ARG,
                        "--steps %lld is below the checkpoint's step %lld: nothing to train; "
                        "give --steps > %lld to continue the run",
                        (long long)o->steps, (long long)tr->step, (long long)tr->step);
    if (tr->rank == 0)
        slm_info("the run is already complete: the checkpoint is at step %lld = --steps; "
                 "nothing to train (give a larger --steps to continue)",
                 (long long)tr->step);
    if (o->ckpt_uri && o->out_dir) {
        // The final upload of an earlier run may have failed: success only once the remote copy
        // has it too (there is no step boundary left to upload it at).
        slm_ckpt_meta meta;
        slm_ckpt_shard *sh = slm_xcalloc((size_t)tr->model.n_units, sizeof *sh);
        slm_trainer_ckpt_state(tr, tr->step, &meta, sh);
        free(sh);
        char *root = slm_path_join(o->out_dir, "checkpoints");
        slm_ckpt_upload_opts uo = {.uri = o->ckpt_uri,
                                   .root = root,
                                   .rank = tr->rank,
                                   .world = tr->W,
                                   .keep = o->ckpt_keep,
                                   .prefix_shards =
                                       o->s3_prefix_shards > 0 ? o->s3_prefix_shards : 1,
                                   .meta = &meta,
                                   .preempt_grace_s = o->preempt_grace_s};
        slm_status st = slm_ckpt_upload_catchup(&uo);
        free(root);
        if (st)
            return slm_fail_wrap(st,
                                 "the run is already complete locally (step %lld), but its "
                                 "final checkpoint could not be uploaded to --ckpt-uri",
                                 (long long)tr->step);
    }
    tr->done = true;
    tr->res.steps_done = tr->step;
    tr->res.final_loss = tr->res.final_val_loss = tr->res.tokens_per_s = tr->res.mfu = NAN;
    tr->res.already_complete = true;
    tr->res.nonfinite_skips = tr->n_skipped, tr->res.empty_skips = tr->n_empty;
    return SLM_OK;
}

// --init-from-hf: with a shard group of one (a world of one, NO_SHARD) every rank holds whole
// units and loads straight into its shards; otherwise every rank loads the full weights once
// into a temporary model and keeps its shard of each unit.
static slm_status init_weights(const slm_train_opts *o, slm_llama *m) {
    return o->init_from_gguf ? slm_model_gguf_init_weights(o->init_from_gguf, m)
                             : slm_model_dir_init_weights(o->init_from_hf, m);
}

static slm_status load_hf(slm_trainer *tr) {
    slm_llama *m = &tr->model;
    if (slm_fsdp_bind_masters(&tr->fsdp)) { // the model's params are the master shards now
        slm_status st = init_weights(tr->o, m);
        slm_fsdp_unbind_masters(&tr->fsdp);
        return st;
    }
    slm_llama full;
    slm_status st = slm_llama_init(&full, &tr->cfg, true);
    if (st) return st;
    st = init_weights(tr->o, &full);
    for (int u = 0; !st && u < full.n_units; u++)
        slm_fsdp_load_unit(&tr->fsdp, u, full.params[u]);
    slm_llama_free(&full);
    return st;
}

// LoRA: the base's identity for the checkpoints (rank 0 reads the files; shared by a sum
// all-reduce in which the other ranks add 0).
static slm_status lora_base_hash(slm_trainer *tr) {
    uint64_t h = 0;
    slm_status st = SLM_OK;
    if (tr->rank == 0) st = slm_hf_dir_xxh64(tr->o->init_from_hf, &h);
    st = slm_dist_agree(st);
    int64_t v = 0;
    memcpy(&v, &h, sizeof v);
    if (!st) slm_dist_allreduce(&v, 1, SLM_DTYPE_I64, SLM_OP_SUM, "LoRA base hash");
    memcpy(&tr->lora_base_xxh64, &v, sizeof v);
    return st;
}

// Initial weights: --init-from-hf (load_hf) or the seeded init fsdp/ did; then a checkpoint's
// state if resuming.
static slm_status initial_state(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    slm_status st = SLM_OK;
    const char *init = o->init_from_hf ? o->init_from_hf : o->init_from_gguf;
    if (init) {
        st = load_hf(tr);
        if (!st && o->lora.rank > 0) st = lora_base_hash(tr);
        st = slm_dist_agree(st);
        if (st) return st;
        slm_info("initial weights from %s", init);
    }
    if (!tr->resume_path) return SLM_OK;
    st = resume_from(tr, tr->resume_path);
    if (st) return st;
    if (init && tr->rank == 0) // only --resume auto gets here (the CLI refuses PATH)
        slm_info("%s %s not used: the run continues from its checkpoint",
                 o->init_from_hf ? "--init-from-hf" : "--init-from-gguf", init);
    return tr->step >= o->steps ? already_complete(tr) : SLM_OK;
}

// Every hook's on_start (all of them, even after a failure: some are collective), agreed.
static slm_status start_hooks(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    slm_status st = SLM_OK;
    tr->started = true;
    for (int h = 0; h < o->n_hooks; h++) {
        tr->hook_started[h] = true;
        if (!o->hooks[h].on_start) continue;
        slm_status hs = o->hooks[h].on_start(o->hooks[h].ctx, tr);
        if (hs && !st) st = slm_fail_wrap(hs, "%s", o->hooks[h].name ? o->hooks[h].name : "hook");
    }
    return slm_dist_agree(st);
}

static const char *const k_peak_src[] = {"--peak-gflops", "cached for this CPU and thread count",
                                         "measured at start"};

// Records tr->peak as this machine's (rank 0; not a --peak-gflops value).
static void cache_peak(const slm_trainer *tr) {
    if (tr->rank != 0 || tr->peak_src == 0) return;
    char key[256];
    slm_peak_key(slm_device_threads(NULL), key, sizeof key);
    if (slm_peak_cache_raise(key, tr->peak)) slm_warn("MFU peak not cached: %s", slm_errmsg());
}

// The MFU denominator: --peak-gflops, else this machine's cached peak, else a measurement
// (n 2048, best of 5: n 1024 and single runs read low, too little work per thread) that is
// cached. Every rank resolves its own (a process's peak); rank 0 writes the cache.
static void init_peak(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    char key[256];
    slm_peak_key(slm_device_threads(NULL), key, sizeof key);
    double c = o->peak_gflops > 0 ? NAN : slm_peak_cache_get(key);
    if (o->peak_gflops > 0) {
        tr->peak = o->peak_gflops, tr->peak_src = 0;
    } else if (isfinite(c)) {
        tr->peak = c, tr->peak_src = 1;
    } else {
        tr->peak = slm_dev_gemm_peak_gflops(NULL, false, 2048, 5), tr->peak_src = 2; // this CPU
        cache_peak(tr);
    }
    tr->peak_logged = tr->peak;
}

// MFU of a step that trained `tokens_per_s` (global). A step faster than the peak proves the
// peak low (a start-up measurement on a loaded machine): it is raised to the step's rate,
// logged and (unless given by --peak-gflops) cached, so MFU never exceeds 1.
static double step_mfu(slm_trainer *tr, double tokens_per_s) {
    double rate = tokens_per_s * tr->fpt / (1e9 * tr->W); // GFLOP/s per process
    if (rate > tr->peak && isfinite(rate)) {
        tr->peak = rate;
        if (rate > 1.1 * tr->peak_logged) { // logged and cached 10 % above the last logged
            if (tr->rank == 0)
                slm_info("MFU: step %lld ran at %.1f GFLOP/s per process, above the peak %.1f "
                         "GFLOP/s (%s): the peak is raised to the step's rate",
                         (long long)tr->step, rate, tr->peak_logged, k_peak_src[tr->peak_src]);
            tr->peak_logged = rate;
            cache_peak(tr);
        }
    }
    return rate / tr->peak;
}

static void log_model(const slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    const slm_llama_config *c = &tr->cfg;
    slm_info("model %s: %lld parameters (%lld in matmuls), %d layers, hidden %d, vocab %d; "
             "B %d x T %d x accum %d = %lld tokens/step; activations %.1f MiB%s; peak %.1f "
             "GFLOP/s (%s); %.3g FLOPs/token",
             o->model, (long long)slm_llama_n_params(c), (long long)slm_llama_n_matmul_params(c),
             c->num_hidden_layers, c->hidden_size, c->vocab_size, tr->B, tr->T, tr->K,
             (long long)tr->B * tr->T * tr->K, (double)slm_llama_act_bytes(&tr->model) / 1048576.0,
             o->activation_checkpointing ? " (activation checkpointing)" : "", tr->peak,
             k_peak_src[tr->peak_src], tr->fpt);
}

// The persistent training state of this rank (what LoRA saves is visible here).
static void log_state(slm_trainer *tr) {
    const slm_llama_config *c = &tr->cfg;
    const slm_lora_config *lc = &tr->model.lora;
    int64_t n = slm_llama_n_params(c);
    size_t bytes = slm_fsdp_state_bytes(&tr->fsdp);
    tr->res.state_bytes = (int64_t)bytes;
    tr->res.trainable_params = lc->rank > 0 ? slm_lora_n_params(c, lc) : n;
    if (tr->rank != 0) return;
    char a[32];
    if (lc->rank > 0)
        slm_info("LoRA r %d alpha %g dropout %g: %lld trainable parameters (%.3f%% of the "
                 "%lld frozen); state per rank %s (%lld bytes: frozen base params + adapter "
                 "params, grads, AdamW m / v)",
                 lc->rank, (double)lc->alpha, (double)lc->dropout,
                 (long long)tr->res.trainable_params,
                 100.0 * (double)tr->res.trainable_params / (double)n, (long long)n,
                 slm_fmt_bytes((double)bytes, a), (long long)bytes);
    else
        slm_info("state per rank %s (%lld bytes: params, grads, AdamW m / v)",
                 slm_fmt_bytes((double)bytes, a), (long long)bytes);
}

slm_status slm_train_init(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    // The model holds no buffers; fsdp/ owns the shards and points params / grads at them
    // through the unit hooks. Its init equals slm_llama_init_weights. --simulate-compute runs it
    // on the SLEEP device (device.h): the real forward, backward, collectives and optimizer
    // calls, the GEMM-like ops waiting for their FLOPs / rate instead of computing.
    slm_status st = slm_llama_init_on(&tr->model, tr->dev, &tr->cfg, false);
    if (st) return st;
    tr->model_init = true;
    tr->fault = &slm_train_faults; // SHARDLM_FAULT's points (no-ops without a plan)
    if (o->lora.rank > 0 && (st = slm_llama_lora_init(&tr->model, &o->lora, false, o->seed)))
        return st;
    tr->fsdp_opts = o->fsdp;
    slm_fsdp_opts_for_world(&tr->fsdp_opts, tr->W);
    st = slm_fsdp_init(&tr->fsdp, &tr->model, &tr->fsdp_opts, o->seed);
    if (st) return st;
    tr->model.activation_checkpointing = o->activation_checkpointing;
    tr->model.bf16_compute = o->compute_dtype == SLM_DTYPE_BF16;
    if (tr->model.bf16_compute && tr->rank == 0)
        slm_log(SLM_LOG_INFO,
                "train: bf16 compute (matmul inputs rounded to bf16, fp32 "
                "accumulation); %s %s",
                slm_device_kind_of(tr->dev) == SLM_DEVICE_CPU ? "oneDNN reports this CPU as"
                                                              : "through",
                slm_dev_bf16_isa(tr->model.dev));
    slm_llama_set_shape(&tr->model, tr->B, tr->T, false);
    tr->win = slm_xmalloc((size_t)tr->K * tr->B * (tr->T + 1) * sizeof(int32_t));
    tr->inp = slm_xmalloc((size_t)tr->B * tr->T * sizeof(int32_t));
    tr->tgt = slm_xmalloc((size_t)tr->B * tr->T * sizeof(int32_t));
    tr->masked = tr->train_l && slm_loader_masked(tr->train_l);
    if (tr->masked) {
        tr->wtgt = slm_xmalloc((size_t)tr->K * tr->B * (tr->T + 1));
        tr->wpos = slm_xmalloc((size_t)tr->K * tr->B * (tr->T + 1) * sizeof(int32_t));
        tr->pos = slm_xmalloc((size_t)tr->B * tr->T * sizeof(int32_t));
    }
    tr->hook_started = slm_xcalloc((size_t)o->n_hooks + 1, sizeof(bool));
    init_peak(tr);
    tr->fpt = slm_train_flops_per_token(&tr->cfg, tr->T);
    if (o->lora.rank > 0) // frozen base: no weight-gradient GEMMs (4 N), the adapters 6 N_lora
        tr->fpt += -2.0 * (double)slm_llama_n_matmul_params(&tr->cfg) +
                   6.0 * (double)slm_lora_n_params(&tr->cfg, &o->lora);
    if (tr->rank == 0) log_model(tr); // once, not one copy per rank
    slm_rng_seed(&tr->synth, o->seed ^ SLM_TRAIN_SYNTH_SEED_XOR);
    tr->t_start = slm_time_s();
    st = initial_state(tr);
    if (st || tr->done) return st;
    log_state(tr);
    return start_hooks(tr);
}

// ---------------------------------------------------------------------------------------------
// Step

bool slm_train_done(const slm_trainer *tr) {
    return tr->done || tr->step >= tr->o->steps;
}

// The stop check at a step boundary or between micro-batches: 1 for a want_stop hook, 2 for
// --max-minutes, 0 to go on. The ranks agree (MAX all-reduce), so all leave at the same
// boundary and none is left alone in the collective schedule; the same all-reduce carries
// whether any rank received a preemption signal (SIGTERM / SIGUSR1), so a signal that reached
// one rank makes every rank's stop a preemption.
static int agree_stop(slm_trainer *tr, const char *what) {
    const slm_train_opts *o = tr->o;
    int64_t f[3] = {0, o->max_minutes > 0 && slm_time_s() - tr->t_start >= o->max_minutes * 60.0,
                    slm_stop_preempted()};
    for (int h = 0; h < o->n_hooks && !f[0]; h++)
        if (o->hooks[h].want_stop) f[0] = o->hooks[h].want_stop(o->hooks[h].ctx);
    slm_dist_allreduce(f, 3, SLM_DTYPE_I64, SLM_OP_MAX, what);
    if (f[0]) {
        tr->preempted = f[2] != 0;
        tr->t_stop = slm_time_s();
    }
    return f[0] ? 1 : f[1] ? 2 : 0;
}

// The loss-spike detector (as llm.c's): the z-score of this step's loss against the mean and
// standard deviation of the previous spike_window finite losses; above spike_z it is logged as
// a warning naming the step (rank 0) and flagged in the metrics. Local and deterministic (every
// rank sees the same all-reduced loss). Warm after spike_window losses.
static void spike_check(slm_trainer *tr, double loss, slm_step_metrics *m) {
    const slm_train_opts *o = tr->o;
    m->loss_z = NAN;
    int w = o->spike_window;
    if (w <= 1 || !isfinite(loss)) return;
    if (!tr->spike_hist) tr->spike_hist = slm_xcalloc((size_t)w, sizeof(double));
    if (tr->spike_n >= w) {
        double mean = 0, var = 0;
        for (int i = 0; i < w; i++)
            mean += tr->spike_hist[i];
        mean /= w;
        for (int i = 0; i < w; i++)
            var += (tr->spike_hist[i] - mean) * (tr->spike_hist[i] - mean);
        double sd = sqrt(var / w);
        if (sd > 0) {
            m->loss_z = (loss - mean) / sd;
            if (m->loss_z > o->spike_z) {
                m->loss_spike = true;
                if (tr->rank == 0)
                    slm_warn("loss spike at step %lld: loss %.4f is %.1f standard deviations "
                             "above the mean %.4f of the previous %d steps (threshold %.3g)",
                             (long long)tr->step, loss, m->loss_z, mean, w, o->spike_z);
            }
        }
    }
    tr->spike_hist[tr->spike_n % w] = loss;
    tr->spike_n++;
}

// Where a step started: what its timing counts from, and what a stop between micro-batches
// rewinds the loader and the synthetic RNG to.
typedef struct step_mark {
    double t0;
    slm_loader_state pos;
    slm_rng synth;
} step_mark;

static step_mark mark_step(slm_trainer *tr) {
    step_mark k = {.t0 = slm_time_s(), .synth = tr->synth};
    tr->step_wait0 = slm_dist_wait_seconds();
    if (tr->train_l) k.pos = slm_loader_get_state(tr->train_l);
    return k;
}

// An agreed stop (agree_stop's 1 or 2) ends the run. At the step boundary (partial NULL)
// nothing of the step ran. Between micro-batches (partial: the step's mark) the pending
// reduce-scatters complete (the partial gradients are dropped), the gathered units are released
// and the loader and the synthetic RNG rewind to the step's start, so the checkpoint resumes by
// replaying the whole step.
static slm_status stop_run(slm_trainer *tr, int stop, const step_mark *partial) {
    slm_status st = SLM_OK;
    if (partial) {
        slm_fsdp_sync_grads(&tr->fsdp);
        slm_fsdp_release_all(&tr->fsdp);
        if (tr->train_l) st = slm_loader_set_state(tr->train_l, partial->pos);
        tr->synth = partial->synth;
    }
    tr->done = true;
    tr->interrupted = stop == 1;
    if (stop == 2 && !partial)
        slm_info("--max-minutes %.3g reached after %lld steps; stopping", tr->o->max_minutes,
                 (long long)tr->step);
    else if (stop == 2)
        slm_info("--max-minutes %.3g reached during step %lld; stopping after %lld steps (the "
                 "partial step is discarded)",
                 tr->o->max_minutes, (long long)tr->step + 1, (long long)tr->step);
    return st;
}

// Draws the step's K micro-batches of windows (synthetic: every rank draws the global batch and
// keeps its slice) and returns the GLOBAL count of target tokens (>= 1).
static int64_t draw_batch(slm_trainer *tr) {
    int64_t per_win = (int64_t)tr->B * (tr->T + 1);
    int64_t real = 0;
    double t_data = slm_time_s();
    for (int k = 0; k < tr->K; k++) {
        int32_t *w = tr->win + k * per_win;
        if (tr->o->synthetic)
            for (int q = 0; q < tr->W; q++)
                for (int64_t i = 0; i < per_win; i++) {
                    int32_t tok = (int32_t)slm_rng_below(&tr->synth, (uint64_t)tr->cfg.vocab_size);
                    if (q == tr->rank) w[i] = tok;
                }
        else if (tr->masked) {
            slm_loader_next_ex(tr->train_l, w, tr->wtgt + k * per_win, tr->wpos + k * per_win);
            real += slm_loader_last_real_tokens(tr->train_l);
        } else
            slm_loader_next(tr->train_l, w);
    }
    tr->step_data_s = slm_time_s() - t_data; // the data wait (metrics; no effect on the math)
    // [0] targets, [1] real (non-padding) input tokens: one all-reduce for both
    int64_t n[2] = {0, real};
    if (tr->masked) // instruction data: the completion / assistant tokens (loader's target flags)
        for (int64_t i = 0; i < tr->K * per_win; i++)
            n[0] += tr->wtgt[i] != 0;
    else
        for (int64_t i = 0; i < tr->K * per_win; i++)
            n[0] += (i % (tr->T + 1)) != 0 && tr->win[i] != -1; // all tokens but the first
    slm_dist_allreduce(n, 2, SLM_DTYPE_I64, SLM_OP_SUM, "target token count");
    // Plain data keeps counting every input position (B T K W), as before; instruction data
    // counts the real tokens, so padding inflates neither tokens_seen nor tokens/s nor MFU.
    tr->step_tokens = tr->masked ? n[1] : (int64_t)tr->B * tr->T * tr->K * tr->W;
    tr->step_targets = n[0];
    return n[0] ? n[0] : 1;
}

// Micro-batch k's forward (its windows split into inputs and targets); *n: its target count.
static float forward(slm_trainer *tr, int k, int64_t *n) {
    int64_t off = k * (int64_t)tr->B * (tr->T + 1);
    // LoRA dropout masks: a function of (seed, step, micro-batch, rank) only, so a resume
    // replays them bitwise.
    tr->model.lora_dropout_key =
        slm_mix64(slm_mix64(slm_mix64(tr->o->seed ^ 0x10a4d40ull) ^ (uint64_t)tr->step) ^
                  ((uint64_t)k << 32 | (uint64_t)(uint32_t)tr->rank));
    if (tr->masked) { // packed samples; loss on target tokens only (the rest are -1)
        *n = slm_train_split_masked(tr->win + off, tr->wtgt + off, tr->wpos + off, tr->B, tr->T,
                                    tr->inp, tr->tgt, tr->pos);
        return slm_llama_forward_packed(&tr->model, tr->inp, tr->tgt, tr->pos, tr->B, tr->T);
    }
    *n = slm_train_split_windows(tr->win + off, tr->B, tr->T, tr->inp, tr->tgt);
    return slm_llama_forward(&tr->model, tr->inp, tr->tgt, tr->B, tr->T);
}

// What forward_backward saw on this rank.
typedef struct fb_sums {
    double loss_sum; // loss x target tokens, summed over the micro-batches
    int bad;         // the first micro-batch with a non-finite loss (-1: none)
    float bad_loss;  // its loss
} fb_sums;

// Forward and backward of the K micro-batches, each loss scaled by its share of the global
// step's target tokens (fsdp/ sums the gradients over the ranks). A non-finite loss goes on
// (fb->bad), so no rank leaves the collective schedule alone. Returns the agreed stop
// (agree_stop) if one came between micro-batches, else 0.
static int forward_backward(slm_trainer *tr, int64_t n_total, fb_sums *fb) {
    *fb = (fb_sums){.bad = -1};
    slm_fsdp_zero_grad(&tr->fsdp);
    double slept0 = slm_device_slept_s(tr->model.dev); // the SLEEP device's waits (else 0)
    tr->step_sim_s = 0;
    for (int k = 0; k < tr->K; k++) {
        int stop = k > 0 ? agree_stop(tr, "stop flags (micro-batch)") : 0;
        if (stop) return stop;
        int64_t n;
        float loss = forward(tr, k, &n);
        if (tr->o->simulate_gflops > 0) loss = 0; // the SLEEP device computes no values
        // d(mean over the step's tokens)/dp = sum_k (n_k / n_total) d(mean_k)/dp
        float scale = (float)((double)n / (double)n_total);
        tr->fault->micro_batch(tr, k, &loss, &scale);
        if (!isfinite(loss) && fb->bad < 0) fb->bad = k, fb->bad_loss = loss;
        slm_llama_backward(&tr->model, scale);
        fb->loss_sum += (double)loss * (double)n;
        tr->step_sim_s = slm_device_slept_s(tr->model.dev) - slept0;
    }
    return 0;
}

// How a step ends.
typedef enum {
    STEP_UPDATED,   // clipped AdamW update
    STEP_NONFINITE, // --on-nonfinite skip: non-finite loss or gradient norm, no update
    STEP_EMPTY,     // no target token in the global batch, no update
} step_outcome;

// A non-finite loss without --on-nonfinite skip, naming the micro-batch when it was this rank's.
static slm_status nonfinite_loss(const slm_trainer *tr, double loss, const fb_sums *fb) {
    float lr = tr->o->adamw.lr_peak;
    if (fb->bad >= 0)
        return slm_fail(SLM_E_NUMERIC,
                        "step %lld, micro-batch %d: training loss is %f; HINT: lower --lr (now "
                        "%g) or --grad-clip",
                        (long long)tr->step + 1, fb->bad, (double)fb->bad_loss, (double)lr);
    return slm_fail(SLM_E_NUMERIC,
                    "step %lld: training loss is %f (on another rank); HINT: lower --lr (now %g) "
                    "or --grad-clip",
                    (long long)tr->step + 1, loss, (double)lr);
}

// The step's outcome once its gradients are summed: an empty batch (the all-reduced target
// count is 0: nothing to learn), a non-finite loss or global gradient norm (skipped under
// --on-nonfinite skip, else SLM_E_NUMERIC naming the step), else an update. Every rank decides
// alike (loss, count and norm are all-reduced). *gnorm: the norm before clipping (0 if empty).
static slm_status clip_or_skip(slm_trainer *tr, double loss, const fb_sums *fb, double *gnorm,
                               step_outcome *out) {
    const slm_train_opts *o = tr->o;
    *gnorm = 0;
    *out = STEP_EMPTY;
    if (tr->step_targets == 0) return SLM_OK;
    if (!isfinite(loss) && !o->nonfinite_skip) return nonfinite_loss(tr, loss, fb);
    // Global norm over the shards and clipping (a non-finite norm scales nothing). Collective.
    *gnorm = slm_fsdp_clip_grad_norm(&tr->fsdp, o->grad_clip);
    *out = isfinite(loss) && isfinite(*gnorm) ? STEP_UPDATED : STEP_NONFINITE;
    if (*out == STEP_NONFINITE && !o->nonfinite_skip)
        return slm_fail(SLM_E_NUMERIC,
                        "step %lld: gradient norm is %f (loss %.4f); HINT: lower --lr",
                        (long long)tr->step + 1, *gnorm, loss);
    return SLM_OK;
}

// The learning rate of this step. With time_schedule the schedule advances by whichever is
// further along: steps or the share of max_minutes spent, so it completes within the budget.
// Collective under --time-schedule: every rank calls it alike, whatever the outcome.
static float step_lr(const slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    int64_t sched_step = tr->step;
    if (o->time_schedule && o->max_minutes > 0) {
        double frac = (slm_time_s() - tr->t_start) / (o->max_minutes * 60.0);
        int64_t by_time = (int64_t)(frac * (double)o->steps);
        if (by_time > sched_step) sched_step = by_time;
        slm_dist_allreduce(&sched_step, 1, SLM_DTYPE_I64, SLM_OP_MAX, "LR step");
    }
    return slm_lr_at(sched_step, o->warmup, o->steps, o->adamw.lr_peak, tr->min_lr);
}

// Validation of the current weights from the val split's start. Eval batches are of the
// per-rank B: W times as many cover the same windows as a world of one with batch B x W.
static slm_status validate(slm_trainer *tr, double *val_loss) {
    slm_eval_result er;
    slm_status st = slm_loader_set_state(tr->val_l, tr->val_start);
    if (!st)
        st = slm_train_eval_loader(&tr->model, tr->val_l, tr->B, tr->T,
                                   (int64_t)tr->o->eval_batches * tr->W, &er);
    if (!st) *val_loss = tr->last_val = er.loss;
    return st;
}

// The before_update hooks (the gradients are final), then AdamW on this rank's shards.
static slm_status update(slm_trainer *tr, float lr) {
    const slm_train_opts *o = tr->o;
    tr->skip_run = 0;
    for (int h = 0; h < o->n_hooks; h++)
        if (o->hooks[h].before_update) o->hooks[h].before_update(o->hooks[h].ctx, tr);
    slm_fsdp_optimizer_step(&tr->fsdp, &o->adamw, lr);
    return SLM_OK;
}

// --on-nonfinite skip: every rank got the same non-finite loss or gradient norm (both are
// all-reduced), so every rank skips the same update: weights, gradients' effect and AdamW
// m / v / t unchanged; the batch is consumed and the step counter and LR schedule advance (so
// the data order and the rest of the run are those of a run without the bad batch's update).
// More than --max-nonfinite-skips in a row is SLM_E_NUMERIC.
static slm_status skip_nonfinite(slm_trainer *tr, double loss, double gnorm) {
    const slm_train_opts *o = tr->o;
    slm_fsdp_release_all(&tr->fsdp);
    tr->n_skipped++;
    tr->skip_run++;
    const char *what = isfinite(loss) ? "gradient norm" : "loss";
    if (tr->skip_run > o->max_nonfinite_skips)
        return slm_fail(SLM_E_NUMERIC,
                        "step %lld: non-finite %s (loss %f, gradient norm %f) in %lld steps in "
                        "a row, more than --max-nonfinite-skips %d; HINT: lower --lr (now %g) or "
                        "--grad-clip",
                        (long long)tr->step + 1, what, loss, gnorm, (long long)tr->skip_run,
                        o->max_nonfinite_skips, (double)o->adamw.lr_peak);
    if (tr->rank == 0)
        slm_warn("step %lld: non-finite %s (loss %f, gradient norm %f): update skipped on every "
                 "rank (--on-nonfinite skip; %lld in a row, %lld in this run)",
                 (long long)tr->step + 1, what, loss, gnorm, (long long)tr->skip_run,
                 (long long)tr->n_skipped);
    return SLM_OK;
}

// A step whose global batch holds no target token (instruction data with --no-packing and
// samples whose targets lie beyond the window, or all-padding windows): every rank sees the
// all-reduced count 0 and skips alike. Nothing to learn from: no update (weights, AdamW m / v / t
// unchanged; the zero gradients are dropped), warned and counted like an --on-nonfinite skip;
// the batch is consumed and the step counter and LR schedule advance.
static slm_status skip_empty(slm_trainer *tr) {
    slm_fsdp_sync_grads(&tr->fsdp);
    slm_fsdp_release_all(&tr->fsdp);
    tr->n_empty++;
    if (tr->rank == 0)
        slm_warn("step %lld: no target (completion / assistant) token in the global batch of %d "
                 "window(s): update skipped on every rank (%lld such steps in this run); HINT: "
                 "raise --seq or drop --no-packing",
                 (long long)tr->step + 1, tr->B * tr->K * tr->W, (long long)tr->n_empty);
    return SLM_OK;
}

// Ends a step, whatever its outcome: its wall time and exposed communication from the mark,
// tokens (global, draw_batch's count), the step counter, and its metrics into *m (val_loss NaN
// until after_step). An empty step's loss is NaN and not the run's last loss; only an update's
// loss feeds the spike detector, and only updates count in the run's token rate (the first step
// pays for first-touch page faults and thread start-up: kept out when there is more than one).
static void finish_step(slm_trainer *tr, step_outcome out, double loss, double gnorm, float lr,
                        const step_mark *mark, slm_step_metrics *m) {
    const slm_train_opts *o = tr->o;
    double dt = slm_time_s() - mark->t0;
    tr->step_comm_s = slm_dist_wait_seconds() - tr->step_wait0; // exposed communication
    tr->tokens_seen += tr->step_tokens;
    tr->step++;
    *m = (slm_step_metrics){.step = tr->step,
                            .total_steps = o->steps,
                            .loss = out == STEP_EMPTY ? NAN : loss,
                            .lr = lr,
                            .grad_norm = gnorm,
                            .tokens_per_s = (double)tr->step_tokens / dt,
                            .ms_per_step = dt * 1e3,
                            .val_loss = NAN,
                            .tokens_seen = tr->tokens_seen,
                            .skipped = out != STEP_UPDATED,
                            .nonfinite_skips = tr->n_skipped,
                            .no_target = out == STEP_EMPTY,
                            .empty_skips = tr->n_empty,
                            .loss_z = NAN};
    m->mfu = step_mfu(tr, m->tokens_per_s); // peak is one process's
    if (out == STEP_EMPTY) return;
    tr->last_loss = loss;
    if (out == STEP_NONFINITE) return;
    spike_check(tr, loss, m);
    if (tr->step > 1 || o->steps == 1) {
        tr->sum_tok += (double)tr->step_tokens;
        tr->sum_dt += dt;
        tr->n_rate++;
    }
}

// Validation when due, then the on_step / observe hooks.
static slm_status after_step(slm_trainer *tr, slm_step_metrics *m) {
    const slm_train_opts *o = tr->o;
    slm_status st = SLM_OK;
    if (tr->val_l && (tr->step % o->eval_every == 0 || tr->step == o->steps)) {
        slm_flight_set_where(tr->step, "eval");
        st = validate(tr, &m->val_loss);
    }
    if (st) return slm_fail_wrap(st, "step %lld", (long long)tr->step);
    m->elapsed_s = slm_time_s() - tr->t_start;
    slm_flight_set_where(tr->step, "step hooks (checkpoint, logs)");
    for (int h = 0; h < o->n_hooks && !st; h++) {
        if (o->hooks[h].observe) o->hooks[h].observe(o->hooks[h].ctx, m);
        if (o->hooks[h].on_step) st = o->hooks[h].on_step(o->hooks[h].ctx, tr, m);
    }
    return st;
}

// One optimizer step, top-down: stop check, the K micro-batches' forward / backward with the
// gradients summed over micro-batches and ranks, the global loss, then clip and AdamW (or a
// skip), the step's metrics, validation and the hooks. Fault injection acts at the named points
// of tr->fault (no-ops without SHARDLM_FAULT).
slm_status slm_train_step(slm_trainer *tr, slm_step_metrics *m) {
    *m = (slm_step_metrics){.val_loss = NAN};
    if (slm_train_done(tr)) return SLM_OK;
    tr->fault->step_start(tr);
    slm_flight_set_where(tr->step + 1, "step start");
    int stop = agree_stop(tr, "stop flags");
    if (stop) return stop_run(tr, stop, NULL);
    step_mark mark = mark_step(tr);
    // All micro-batches first, so the loss scale is known before the first backward.
    slm_flight_set_where(tr->step + 1, "data");
    int64_t n_total = draw_batch(tr);
    slm_flight_set_where(tr->step + 1, "forward/backward");
    fb_sums fb;
    stop = forward_backward(tr, n_total, &fb);
    if (stop) return stop_run(tr, stop, &mark);
    slm_dist_allreduce(&fb.loss_sum, 1, SLM_DTYPE_F64, SLM_OP_SUM, "step loss");
    double loss = fb.loss_sum / (double)n_total, gnorm;
    // Clip and AdamW, or no update (an empty batch; a non-finite loss or norm under
    // --on-nonfinite skip); either way the step is counted and its metrics made once.
    slm_flight_set_where(tr->step + 1, "optimizer");
    step_outcome out;
    slm_status st = clip_or_skip(tr, loss, &fb, &gnorm, &out);
    if (st) return st;
    float lr = step_lr(tr);
    st = out == STEP_UPDATED     ? update(tr, lr)
         : out == STEP_NONFINITE ? skip_nonfinite(tr, loss, gnorm)
                                 : skip_empty(tr);
    if (st) return st;
    finish_step(tr, out, loss, gnorm, lr, &mark, m);
    return after_step(tr, m);
}

// ---------------------------------------------------------------------------------------------
// Finish

// A run that ended without an error: a stop before the planned end still evaluates what it
// has (so the run has a val loss), then the result. (The weights are the final checkpoint,
// written by the checkpoint hook's on_finish.)
static slm_status finish_ok(slm_trainer *tr) {
    const slm_train_opts *o = tr->o;
    slm_status st = SLM_OK;
    slm_train_result *r = &tr->res;
    if (tr->val_l && tr->step > 0 && tr->step < o->steps && !tr->interrupted) {
        double v;
        st = validate(tr, &v);
        r->stop_evaluated = !st;
    }
    r->steps_done = tr->step;
    r->final_loss = tr->last_loss;
    r->final_val_loss = tr->last_val;
    // Tokens over time of the counted steps (not a mean of per-step rates, which a few fast
    // steps on a busy machine inflate).
    r->tokens_per_s = tr->n_rate && tr->sum_dt > 0 ? tr->sum_tok / tr->sum_dt : NAN;
    r->mfu = r->tokens_per_s * tr->fpt / (tr->peak * 1e9 * tr->W);
    r->peak_gflops = tr->peak;
    if (tr->peak > tr->peak_logged) cache_peak(tr); // raises under 10 % since the last one
    r->flops_per_token = tr->fpt;
    r->interrupted = tr->interrupted;
    r->preempted = tr->interrupted && tr->preempted;
    r->nonfinite_skips = tr->n_skipped;
    r->empty_skips = tr->n_empty;
    return st;
}

// After a preemption's final checkpoint: how long it took from the signal (this rank's own, or
// the agreed stop on a rank the signal did not reach), against --preempt-grace.
static void report_preemption(const slm_trainer *tr) {
    double sig = slm_stop_signal_time(), now = slm_time_s();
    bool own = slm_stop_preempted() && sig > 0;
    double dt = now - (own ? sig : tr->t_stop);
    const char *since = own ? "the signal" : "the agreed stop";
    if (dt > tr->o->preempt_grace_s)
        slm_warn("preemption: the final checkpoint (step %lld) took %.1f s after %s, beyond "
                 "--preempt-grace %.3g s: a scheduler may kill the job before it commits; "
                 "checkpoint more often (--ckpt-every-steps / --ckpt-every-minutes) or raise "
                 "the scheduler's grace period",
                 (long long)tr->step, dt, since, tr->o->preempt_grace_s);
    else if (tr->rank == 0)
        slm_info("preemption: final checkpoint (step %lld) committed %.2f s after %s "
                 "(--preempt-grace %.3g s)",
                 (long long)tr->step, dt, since, tr->o->preempt_grace_s);
}

slm_status slm_train_finish(slm_trainer *tr, slm_status st) {
    if (!tr || tr->res.already_complete || !tr->started) return st;
    // The hooks see the status of the training itself: an error in the final validation does
    // not cost the final checkpoint.
    slm_flight_set_where(tr->step, "finish (final checkpoint)");
    // SHARDLM_FLIGHT_DUMP=end: every rank dumps its flight recorder once training ended (before
    // the final checkpoint), e.g. to compare a --simulate-compute run's collectives with a real
    // one's (docs/operations.md "Flight recorder").
    const char *fd = getenv("SHARDLM_FLIGHT_DUMP");
    if (fd && strcmp(fd, "end") == 0) slm_flight_dump("end of training (SHARDLM_FLIGHT_DUMP=end)");
    slm_status fin = st ? st : finish_ok(tr);
    const slm_train_opts *o = tr->o;
    // The message of the first error is the run's: a hook that fails (or only logs a failure,
    // like a heartbeat write) after it must not replace it.
    char *msg = fin ? slm_xstrdup(slm_errmsg()) : NULL;
    for (int h = 0; h < o->n_hooks; h++) {
        if (!tr->hook_started[h] || !o->hooks[h].on_finish) continue;
        slm_status hs = o->hooks[h].on_finish(o->hooks[h].ctx, tr, st);
        if (hs && !fin) {
            fin = hs;
            msg = slm_xstrdup(slm_errmsg());
        }
    }
    if (msg) {
        slm_set_errmsg(msg);
        free(msg);
    }
    if (!fin && tr->interrupted && tr->preempted) {
        report_preemption(tr);
        fin = slm_fail(SLM_E_INTERRUPTED,
                       "preempted (SIGTERM / SIGUSR1) after step %lld%s%s%s; continue with "
                       "--resume auto",
                       (long long)tr->step, o->out_dir ? "; checkpoint saved under " : "",
                       o->out_dir ? o->out_dir : "", o->out_dir ? "/checkpoints" : "");
    } else if (!fin && tr->interrupted) {
        fin = slm_fail(SLM_E_INTERRUPTED, "interrupted by a signal after step %lld%s%s%s",
                       (long long)tr->step, o->out_dir ? "; checkpoint saved under " : "",
                       o->out_dir ? o->out_dir : "", o->out_dir ? "/checkpoints" : "");
    }
    return fin;
}

// ---------------------------------------------------------------------------------------------
// Close and accessors

void slm_train_close(slm_trainer *tr) {
    if (!tr) return;
    free(tr->resume_path);
    slm_ckpt_free(tr->resume_ckpt); // NULL once resume_from took it
    free(tr->win), free(tr->inp), free(tr->tgt);
    free(tr->wtgt), free(tr->wpos), free(tr->pos);
    free(tr->hook_started);
    free(tr->spike_hist);
    if (tr->train_l) slm_loader_free(tr->train_l);
    if (tr->val_l) slm_loader_free(tr->val_l);
    if (tr->tok) slm_tokenizer_free(tr->tok);
    if (tr->ds_open) slm_dataset_free(&tr->ds);
    slm_fsdp_free(&tr->fsdp);
    if (tr->model_init) slm_llama_free(&tr->model);
    slm_device_close(tr->dev);    // after everything allocated on it
    slm_rundir_close(tr->rundir); // last: the lock is held until everything is written
    free(tr);
}

const slm_train_result *slm_trainer_result(const slm_trainer *tr) {
    return &tr->res;
}
const slm_train_opts *slm_trainer_opts(const slm_trainer *tr) {
    return tr->o;
}
int slm_trainer_rank(const slm_trainer *tr) {
    return tr->rank;
}
int slm_trainer_world(const slm_trainer *tr) {
    return tr->W;
}
int64_t slm_trainer_steps_done(const slm_trainer *tr) {
    return tr->step;
}
void slm_trainer_step_timing(const slm_trainer *tr, slm_step_timing *t) {
    slm_fsdp_stats fs = slm_fsdp_get_stats(&tr->fsdp);
    *t = (slm_step_timing){.data_s = tr->step_data_s,
                           .comm_s = tr->step_comm_s,
                           .bytes_gathered = fs.bytes_gathered,
                           .bytes_reduced = fs.bytes_reduced,
                           .sim_compute_s = tr->step_sim_s};
}

// The checkpoint writer's source of a shard's params / m / v (slm_ckpt_read_fn): fsdp/'s copy
// to the host. k is slm_fsdp_state's value (0 master, 1 m, 2 v).
static void read_shard(const void *src, int unit, int k, int64_t off, int64_t n, float *host) {
    slm_fsdp_shard_read(src, unit, (slm_fsdp_state)k, off, n, host);
}

void slm_trainer_ckpt_state(const slm_trainer *tr, int64_t step, slm_ckpt_meta *meta,
                            slm_ckpt_shard *sh) {
    const slm_train_opts *o = tr->o;
    slm_ckpt_meta_default(meta, &tr->model.cfg);
    meta->step = meta->lr_step = step;
    meta->opt_step = slm_fsdp_steps_done(&tr->fsdp); // below step by the skipped steps
    meta->tokens_seen = tr->tokens_seen;
    meta->adamw = o->adamw;
    meta->lr_warmup = o->warmup;
    meta->lr_total = o->steps;
    meta->lr_min = tr->min_lr;
    if (tr->train_l) meta->loader = slm_loader_get_state(tr->train_l);
    meta->rng = tr->synth;
    meta->has_batch = true; // the run's geometry, checked by a resume (check_resume_batch)
    meta->batch = tr->B, meta->seq = tr->T, meta->grad_accum = tr->K;
    meta->nonfinite_skips = tr->n_skipped; // counted on after a resume (resume_from)
    meta->nonfinite_in_a_row = tr->skip_run;
    meta->empty_skips = tr->n_empty;
    if (tr->tok && tr->ds_open) {
        meta->has_tokenizer = true;
        meta->tokenizer_xxh64 = tr->ds.tokenizer_xxh64;
        snprintf(meta->tokenizer_file, sizeof meta->tokenizer_file, "%s",
                 slm_tokenizer_type(tr->tok) == SLM_TOK_SPM_BPE ? "tokenizer.model"
                                                                : "tokenizer.json");
    }
    snprintf(meta->strategy, sizeof meta->strategy, "%s",
             slm_sharding_name(tr->fsdp_opts.sharding));
    meta->shard_group_size = slm_fsdp_group_size(&tr->fsdp);
    int u0 = 0, nu = tr->model.n_units;
    if (tr->model.lora.rank > 0) { // the adapters only, and which base they belong to
        meta->lora = tr->model.lora;
        meta->lora_base_xxh64 = tr->lora_base_xxh64;
        char *abs = realpath(o->init_from_hf, NULL);
        snprintf(meta->lora_base, sizeof meta->lora_base, "%s", abs ? abs : o->init_from_hf);
        free(abs);
        u0 = tr->model.n_units;
        nu = tr->cfg.num_hidden_layers;
    }
    for (int u = 0; u < nu; u++) { // this rank's shard: masters, AdamW m / v (device memory)
        sh[u] = (slm_ckpt_shard){.read = read_shard, .src = &tr->fsdp, .src_unit = u0 + u};
        slm_fsdp_shard_range(&tr->fsdp, u0 + u, &sh[u].begin, &sh[u].end);
    }
}

const slm_unit_layout *slm_trainer_ckpt_layout(const slm_trainer *tr, int *n_units) {
    bool lora = tr->model.lora.rank > 0;
    *n_units = lora ? tr->cfg.num_hidden_layers : tr->model.n_units;
    return lora ? tr->model.lora_units : tr->model.units;
}
