// train: the loops that use a model — training (AdamW, warmup + cosine LR, global-norm
// clipping, gradient accumulation, periodic validation), evaluation (mean loss, perplexity) and
// generation (KV-cache decoding with temperature / top-k / top-p sampling) — plus the run
// directory they share.
//
// A run directory (written by training, read by eval and generate) holds:
//   config.json    HF LlamaConfig (model/ writes and reads it)
//   tokenizer.json / tokenizer.model   copied from the dataset
//   metrics.jsonl  one JSON object per line: {"event":"start",...}, {"event":"step",...},
//                  {"event":"eval",...}, {"event":"end",...} and more (docs/formats.md)
//   logs/          rank_NNNNN.log: every rank's log lines (UTC time, rank, host, level)
//   run.lock       flock'ed by rank 0 for the whole run; "pid P on host H" of the holder
//   checkpoints/   step_N/ checkpoints and `latest` (src/ckpt/ckpt.h): the run's weights;
//                  every run with a run directory ends with one (also when stopped)
// Readers open it through slm_model_dir_open (train/modeldir.h).
//
// Invariants: the same options, seed and thread count give bitwise-identical losses and
// weights. The loop polls the want_stop hooks (the stop flag set by SIGINT / SIGTERM through
// slm_train_install_signal_handlers, attached by slm_train_add_stop_hook) and --max-minutes at
// step boundaries and between micro-batches (the ranks agree on it with a small all-reduce, so
// all stop at the same micro-batch); a stop between micro-batches discards the partial step
// (loader position and synthetic RNG rewound to the step's start, so a resume replays the whole
// step bitwise). Then the hooks save and it returns SLM_E_INTERRUPTED (--max-minutes: SLM_OK).
// Under mpirun (world > 1) the run is data parallel through fsdp/: each rank
// trains on its slice of every global batch (B x world sequences per micro-batch) with the
// parameters, gradients and AdamW state sharded as opts.fsdp says (docs/cluster.md); rank 0
// alone writes the run directory. A world of one takes the same path: fsdp/ over one-rank
// communicators (no MPI launch needed), NO_SHARD, gradients written straight into the shards,
// so its arithmetic is that of a plain single-process trainer.
// This module does not parse command lines (tools/ does) and calls no exit().
#ifndef SLM_TRAIN_H
#define SLM_TRAIN_H

#include "base/base.h"
#include "base/fault.h"
#include "ckpt/ckpt.h"
#include "model/model.h"
#include "fsdp/fsdp.h"
#include "metrics/metrics.h"
#include "optim/optim.h"
#include "tokenizer/tokenizer.h"
#include "train/eval.h"     // evaluation
#include "train/flops.h"    // the FLOPs model of MFU, --simulate-compute
#include "train/generate.h" // generation
#include "train/modeldir.h" // model directories
#include "train/options.h"  // the option table (defaults, validation, agreement)

// ---------------------------------------------------------------------------------------------
// Per-step metrics and hooks (heartbeats, Prometheus and checkpoints attach here)

// What one optimizer step measured. Passed to every hook after the step (and after its eval).
typedef struct slm_step_metrics {
    int64_t step;            // 1-based index of the optimizer step just completed
    int64_t total_steps;     // planned steps
    double loss;             // mean training loss over all the step's target tokens, nats/token
    double lr;               // learning rate used by this step
    double grad_norm;        // global L2 norm of the gradient before clipping
    double tokens_per_s;     // tokens of this step / its wall time: every input position for
                             // plain data, the real (non-padding) ones for instruction data
    double mfu;              // model FLOPs utilisation, fraction (0..1) of the measured sgemm peak
    double ms_per_step;      // wall time of the step in milliseconds (eval excluded)
    double val_loss;         // validation loss if evaluated after this step, else NaN
    int64_t tokens_seen;     // tokens trained on so far (counted as tokens_per_s)
    double elapsed_s;        // wall seconds since training started
    bool skipped;            // --on-nonfinite skip: the loss or gradient norm was non-finite and no
                             // rank updated the weights or AdamW moments in this step
    int64_t nonfinite_skips; // steps skipped so far in this run (counted on across resumes)
    bool no_target;          // skipped because the global batch held no target token (instruction
                             // data: every window's targets cut off or padding); loss NaN
    int64_t empty_skips;     // steps skipped so far in this run for that reason
    bool loss_spike;         // the loss-spike detector flagged this step (slm_train_opts)
    double loss_z;           // its z-score against the preceding window (NaN until warm)
} slm_step_metrics;

// The simplest hook: called on every rank after each step (and its eval) with its metrics.
typedef void (*slm_step_hook_fn)(void *ctx, const slm_step_metrics *m);

typedef struct slm_trainer slm_trainer; // one run's state, between slm_train_open and _close

// A step hook: what attaches to the training loop from outside it (tools/ installs step
// printing, metrics.jsonl, the stop flag and checkpoint scheduling this way; heartbeats and
// exporters attach the same way). Every member may be NULL. The contract:
//  - Hooks run on the training thread, on EVERY rank, in the order they were added, and must
//    not block for long. Work meant for one rank (printing, files) checks slm_trainer_rank.
//  - on_start: once per run, after slm_train_init restored the initial state (seeded, HF or
//    checkpoint) and before the run's first step; not called when nothing is trained (a resume
//    at --steps) or when open / init failed. Every hook's on_start runs even after an earlier
//    one failed; the statuses are then agreed over the ranks (slm_dist_agree) and a failure
//    ends the run (on_finish still runs for every started hook).
//  - want_stop: polled at each step boundary and between micro-batches; local (no collectives),
//    cheap. True on any rank stops every rank at the same boundary (the trainer agrees with a
//    small all-reduce); the partial step is discarded, the stop saved by on_finish.
//  - before_update: after the step's gradients are final, before the optimizer writes the
//    weights and AdamW state; local. (The checkpoint hook waits there for a background copy.)
//  - on_step / observe: after each optimizer step and its validation; `m` valid for the call.
//    They may read the run through the slm_trainer_* accessors and may call collectives only
//    if every rank has the hook (the checkpoint hook commits collectively); they must not
//    change weights, gradients or loader positions. A non-OK status from on_step ends the run
//    with it: a hook that can fail on some ranks only must agree its status itself.
//  - on_finish: once after the last step of a started run, also after a stop or an error
//    (st: the run's status so far; SLM_OK for a completed, --max-minutes or signal-stopped
//    run, whose result says which), before anything is freed: the final checkpoint and the
//    last log lines go here, and on an error the hook releases what it holds. Every started
//    hook's on_finish runs; the first non-OK status it returns while st is SLM_OK fails the
//    run. Collective under the same rule as on_step (all ranks reach it together).
typedef struct slm_train_hook {
    const char *name; // for messages ("checkpoints")
    void *ctx;        // borrowed, passed back to every callback
    slm_status (*on_start)(void *ctx, slm_trainer *tr);
    bool (*want_stop)(void *ctx);
    void (*before_update)(void *ctx, slm_trainer *tr);
    slm_status (*on_step)(void *ctx, slm_trainer *tr, const slm_step_metrics *m);
    slm_step_hook_fn observe;
    slm_status (*on_finish)(void *ctx, slm_trainer *tr, slm_status st);
} slm_train_hook;

#define SLM_TRAIN_MAX_HOOKS 12

// Prometheus metrics of a run (slm_train_prom_new, below; docs/observability.md).
typedef struct slm_train_metrics_opts {
    const char *addr;        // --metrics-addr HOST:PORT this rank serves /metrics on (rank 0 only
                             // unless all_ranks); NULL: none. Per rank (not agreed)
    bool all_ranks;          // --metrics-all-ranks: every rank with addr serves (PORT + rank when
                             // PORT > 0, so ranks of one host do not collide). Per rank
    int every;               // --metrics-every: steps between gathers of the per-rank values (>= 1)
    double straggler_factor; // --straggler-factor: a rank is slow when its busy time (iteration
                             // wall time minus collective waits) exceeds factor x the median
    int straggler_windows;   // --straggler-windows: ... for this many gathers in a row
} slm_train_metrics_opts;
#define SLM_TRAIN_SYNTH_SEED_XOR 0x5eedda7aull

// ---------------------------------------------------------------------------------------------
// Training

// The smallest --loss-spike-window besides 0 (off): the standard deviation of fewer losses is
// itself so noisy that ordinary step-to-step noise reads as a spike: for i.i.d. Gaussian losses
// z * sqrt((N-1)/(N+1)) is Student-t with N-1 degrees of freedom, so z > 5 happens about once in
// 9 steps with N = 2, once in 640 with N = 8 and once in 600,000 with N = 100.
#define SLM_SPIKE_WINDOW_MIN 8

typedef struct slm_train_opts {
    const char *data_dir;    // prepared dataset (manifest.json); ignored when synthetic
    bool synthetic;          // uniform random tokens over the model's vocab (benchmarks), no eval:
                             // window by window, token by token, slm_rng_below(vocab_size) from
                             // one slm_rng seeded with seed ^ SLM_TRAIN_SYNTH_SEED_XOR
    const char *model;       // preset name or config.json path
    int32_t vocab_size;      // > 0: overrides the model config's vocab_size
    const char *out_dir;     // run directory to create / overwrite; NULL: save nothing
    int B;                   // sequences per micro-batch
    int T;                   // tokens per sequence (<= max_position_embeddings)
    int grad_accum;          // micro-batches per optimizer step (>= 1)
    int64_t steps;           // optimizer steps (the cosine schedule's length)
    int64_t warmup;          // linear warmup steps
    slm_adamw_hparams adamw; // lr_peak, betas, eps, weight_decay
    float min_lr;            // floor of the cosine decay; < 0 (the default): lr_peak / 10
    float grad_clip;         // max global grad norm; <= 0 disables clipping
    uint64_t seed;           // weight init and data order
    int64_t eval_every;      // validate every this many steps (and at the end); 0: never
    int eval_batches;        // micro-batches of B sequences per validation (0: the whole split)
    bool activation_checkpointing;
    slm_dtype compute_dtype; // SLM_DTYPE_F32, or SLM_DTYPE_BF16: matmul inputs rounded to bf16
                             // with fp32 accumulation (slm_llama.bf16_compute)
    const char *device;      // device the model computes on (device.h spec): "cpu" (NULL: the
                             // same), "cuda" / "cuda:N" (one rank; bf16 compute; issue 22)
    int threads;             // OpenMP / BLAS threads; 0: leave as configured
    double max_minutes;      // > 0: stop (and save) after this much wall time
    bool time_schedule;      // with max_minutes: the LR schedule's step is max(step, share of
                             // max_minutes elapsed x steps), so the cosine ends on time on a
                             // machine of unknown speed (not bitwise reproducible)
    double peak_gflops;      // > 0: MFU denominator; else this machine's cached peak (slm_peak_*),
                        // measured at start (slm_dev_gemm_peak_gflops) when none is cached. Either
                        // is raised to a step's rate when a step runs faster (logged)
    int log_every; // step line every this many steps (0: never; default 1); read by
                   // the printing hook of tools/, not by the library
    // Checkpoints (src/ckpt, docs/formats.md "Checkpoints") under out_dir/checkpoints when
    // out_dir is set: every ckpt_every_steps steps / ckpt_every_minutes minutes, and always at
    // the end and when stopped. Asynchronous (copy and write behind the next step) unless
    // ckpt_sync.
    int64_t ckpt_every_steps;   // 0: off
    double ckpt_every_minutes;  // 0: off
    int ckpt_keep;              // committed checkpoints kept, oldest deleted first (0: all)
    bool ckpt_sync;             // write on the training thread
    bool ckpt_abort_on_error;   // a failed save stops training (default: log and continue)
    const char *resume;         // "auto" (out_dir's newest checkpoint that verifies, if any;
                                // `latest` is a hint) | PATH | NULL:
                                // restores weights, AdamW m / v / t, step, LR position, tokens
                                // seen, loader position and RNG; the run continues bitwise
    bool verify_on_resume;      // check every rank file's XXH64 before resuming (auto falls back
                                // to an older checkpoint); default: manifest and sizes only
    bool allow_batch_change;    // resume at another global batch (B x world x grad_accum) than
                                // the checkpoint's, with a warning (default: refused, SLM_E_ARG)
    bool train_from_scratch;    // out_dir holds checkpoints: move them aside to
                                // checkpoints.replaced-DATE and train from a seeded init (without
                                // it such a run is refused); excludes resume
    const char *init_from_hf;   // HF directory (config.json + safetensors): initial weights
    const char *init_from_gguf; // llama.cpp GGUF file (llama architecture): initial weights
                                // instead of the seeded init (checked against the model config)
    const char *ckpt_uri;       // s3://BUCKET/PREFIX/: every committed checkpoint is also
                                // uploaded there in the background (one uploader per host,
                                // manifest then `latest` last; ckpt_keep applies remotely too);
                                // with resume "auto" the newest complete of local and remote
                                // is resumed (docs/storage.md)
    int s3_prefix_shards;       // rank files spread over this many prefixes (0 / 1: one)
    const char *data_cache;     // data_dir s3://...: the local copy tools/ streams it into
                                // (slm_dataset_fetch) before the run; NULL: $TMPDIR default
    bool no_packing; // instruction datasets: one sample per window (padded) instead of packing
                     // several (each attending only to itself); ignored for plain datasets
    int n_hooks;
    slm_train_hook hooks[SLM_TRAIN_MAX_HOOKS]; // slm_train_attach / slm_train_add_hook
    slm_fsdp_opts fsdp; // world > 1: sharding strategy, dtypes, prefetch (fsdp.h)
    // LoRA (lora.rank > 0; needs init_from_hf): adapters on lora.targets of the frozen
    // init_from_hf base (model.h); fsdp/ shards base and adapters, AdamW trains the adapters
    // only. Checkpoints hold the adapters plus the base's path and XXH64
    // (slm_hf_dir_xxh64), checked on resume. lora.targets defaults to q_proj,v_proj (PEFT's
    // Llama default) in slm_train_opts_default.
    slm_lora_config lora;
    double collective_timeout_s; // bound on every collective wait (default 600; <= 0: none)
    // Operations (issue 10; docs/operations.md)
    const char *heartbeat_dir;    // every rank's heartbeat file (slm_train_add_heartbeat_hook);
                                  // NULL: none
    double preempt_grace_s;       // a preemption's checkpoint should be committed within this many
                                  // seconds of the signal (default 60); a later one is a warning
    bool nonfinite_skip;          // --on-nonfinite skip: a step whose (all-reduced) loss or global
                                  // gradient norm is non-finite is skipped on every rank (no
                                  // update; data, LR schedule and step counter advance); default
                                  // (abort): SLM_E_NUMERIC
    int max_nonfinite_skips;      // with skip: more than this many skipped steps in a row is
                                  // SLM_E_NUMERIC (default 5)
    int spike_window;             // loss-spike detector: z-score of each loss against the previous
                                  // spike_window losses (default 100; 0: off; else at least
                                  // SLM_SPIKE_WINDOW_MIN)
    double spike_z;               // a loss more than spike_z standard deviations above the window's
                                  // mean is logged as a warning (default 5)
    int64_t snapshot_every_steps; // > 0 (with out_dir): node-local snapshots every N steps
                                  // (slm_train_add_snapshot_hook); 0: off
    const char *snapshot_dir;     // their directory; NULL: slm_train_snapshot_root's default
    slm_train_metrics_opts metrics; // Prometheus (read by slm_train_prom_new and its hook)
    double simulate_gflops;         // > 0: --simulate-compute: the model runs on the SLEEP
                                    // device (device.h): each GEMM-like op waits for its FLOPs /
                                    // (this x 1e9) instead of computing; collectives, buffers,
                                    // schedule, prefetch and the optimizer stay real; losses are
                                    // 0, meaningless (docs/scaling.md "Emulated cluster"). 0: off
} slm_train_opts;

// Fills the defaults: grad_accum 1, lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1,
// min_lr -1 (any value < 0 means lr / 10, resolved when the run opens), grad_clip 1.0, seed
// 1337, eval_batches 20, log_every 1, collective_timeout_s 600, fsdp defaults (fsdp.h), metrics
// every 5 steps, straggler factor 1.5 for 3 windows,
// everything else 0.
void slm_train_opts_default(slm_train_opts *o);
// Appends a hook (copied). Errors: SLM_E_ARG when SLM_TRAIN_MAX_HOOKS are already set.
slm_status slm_train_attach(slm_train_opts *o, const slm_train_hook *h);
// Appends an observe-only hook (fn(ctx, metrics) after every step). Errors: as slm_train_attach.
slm_status slm_train_add_hook(slm_train_opts *o, slm_step_hook_fn fn, void *ctx);

// The library's own hooks (src/train/hooks.c); tools/ installs them, as may any caller of
// slm_train_run that wants them. Each keeps its per-run state in caller-owned storage (zeroed
// before the run; one run at a time; on_finish releases it).
typedef struct slm_train_std_hooks {
    void *metrics, *ckpt, *heartbeat, *snapshot; // private state
} slm_train_std_hooks;
// The stop flag (slm_train_request_stop, SIGINT / SIGTERM) as a want_stop hook.
slm_status slm_train_add_stop_hook(slm_train_opts *o);
// Rank 0 with out_dir: metrics.jsonl (a "start" event at on_start, a "step" event per step, an
// "end" event at on_finish of a run that did not fail), appended to (a fresh run's open phase
// has emptied it). Flushed per line.
// Every rank, each step: a non-blocking all-gather of its queued warnings' size (and, every 10th
// step, its RSS, peak RSS, CPU utilisation, step / data / comm ms) started at the boundary and
// completed at the next one; queued lines follow the same way and rank 0 prints them with the
// rank named (slm_log_forwarded). With out_dir every rank also logs to out_dir/logs/rank_NNNNN.log.
// Rank 0 writes "eval", "checkpoint", "ranks", "restart", "nonfinite" and "error" events too
// (schema 2, docs/formats.md). Collective (every rank must install it).
slm_status slm_train_add_metrics_hook(slm_train_opts *o, slm_train_std_hooks *h);
// Appends {"event":EVENT,"step":STEP,"time":UNIX_S,FIELDS} to metrics.jsonl (rank 0 with
// out_dir, while the metrics hook runs; otherwise a no-op). FIELDS: JSON members without the
// surrounding braces ("\"rank\":3,\"ratio\":2.5"), or NULL. For other hooks' events (straggler,
// skipped step). Errors: none (SLM_OK).
slm_status slm_train_jsonl_event(const slm_train_std_hooks *h, const char *event, int64_t step,
                                 const char *fields);
// With out_dir: checkpoints under out_dir/checkpoints as opts' ckpt_* fields say (every N steps
// / M minutes, async unless ckpt_sync, keep K), always one at on_finish of a run that did not
// fail (end, --max-minutes, stop): the run's weights, so its failure fails the run whatever
// ckpt_abort_on_error says; then a summary line (slm_info); on an error exit a save that
// finished writing is committed (world of one, or a non-finite loss every rank agreed on) or
// discarded. Collective (every rank must install it).
slm_status slm_train_add_ckpt_hook(slm_train_opts *o, slm_train_std_hooks *h);
// With o->heartbeat_dir (else nothing is added): every rank atomically replaces (write to a
// temporary file, rename; no fsync) DIR/rank_%05d.json with one line
//   {"rank":R,"pid":P,"host":"H","step":S,"time":UNIX_SECONDS,"loss":L,"phase":"..."}
// at on_start (phase "start", step = the start step, loss null), after every step ("train",
// that step and its loss) and at on_finish ("end", "stopped" after a stop / preemption, or
// "error"; the last step). DIR is created at on_start (its failure fails the start); a failed
// write later is one warning and training goes on. Local (no collectives).
slm_status slm_train_add_heartbeat_hook(slm_train_opts *o, slm_train_std_hooks *h);
// One heartbeat record as above (the hook's writer; `loss` non-finite is written as null).
// Errors: SLM_E_IO naming the file.
slm_status slm_heartbeat_write(const char *dir, int rank, int64_t step, double loss,
                               const char *phase);
// Node-local snapshots (o->snapshot_every_steps > 0, else nothing is added): every N steps
// every rank writes its shard (params, AdamW m, v; checkpoint format, src/ckpt) synchronously
// into the snapshot directory (tmpfs), rank 0 commits it there, the newest one is kept. A
// restart with --resume auto whose run directory has a disk checkpoint resumes from the newest
// snapshot instead when it is newer, verifies in full (every file's XXH64), was saved by the
// same world size and model, and all ranks run on one host (snapshots are node-local; on
// several hosts none are taken). A run that ends without an error with its final checkpoint
// committed removes its snapshots. Collective (every rank must install it).
slm_status slm_train_add_snapshot_hook(slm_train_opts *o, slm_train_std_hooks *h);
// The snapshot directory: o->snapshot_dir, else /dev/shm/shardlm-XXXXXXXXXXXXXXXX (XXH64 of
// the absolute --out path, so reruns of one run directory find it). Owned by the caller.
char *slm_train_snapshot_root(const slm_train_opts *o);
// Stop, checkpoint, metrics and (with heartbeat_dir) heartbeat and (with snapshot_every_steps)
// snapshot hooks in that order (what `shardlm train` installs before its printing hook).
slm_status slm_train_add_std_hooks(slm_train_opts *o, slm_train_std_hooks *h);

// Prometheus metrics (src/train/prom.c; metric list in docs/observability.md). One per process.
typedef struct slm_train_prom slm_train_prom;
// Local (no collectives): makes the registry and, when this rank serves (o->addr set and rank
// 0, or o->all_ranks), starts the /metrics server on it (slm_metrics_server_start: bound and
// listening on return, so a port in use fails here, before training) and logs
// "metrics: serving http://HOST:PORT/metrics" (the chosen port for :0). *out owned (free with
// slm_train_prom_free after the run). Errors: those of slm_metrics_server_start (SLM_E_ARG,
// SLM_E_IO); callers under mpirun agree them (slm_dist_agree).
slm_status slm_train_prom_new(const slm_train_metrics_opts *o, slm_train_prom **out);
// The registry (the launcher and checkpointing may add their own families); the server's
// address ("HOST:PORT") or NULL when this rank does not serve.
slm_metrics *slm_train_prom_registry(slm_train_prom *p);
const char *slm_train_prom_addr(const slm_train_prom *p);
// The hook that keeps the trainer's metrics in p's registry: every rank must install it (it
// agrees at on_start whether any rank serves, then gathers per-rank values every
// o->metrics.every steps with one all-gather; nothing at all when no rank serves). `std`
// (borrowed, may be NULL) is read for the checkpoint statistics: install it after
// slm_train_add_std_hooks. Errors: as slm_train_attach.
slm_status slm_train_add_prom_hook(slm_train_opts *o, slm_train_prom *p,
                                   const slm_train_std_hooks *std);
// After a completed run (every planned step, or --max-minutes) that Prometheus scraped during
// training: how long slm_train_prom_free keeps serving for the scrape that reads
// shardlm_run_completed 1: twice the mean interval between the scrapes seen, plus 1 s, at most
// SLM_TRAIN_PROM_LINGER_MAX_S seconds (that much after a single scrape: the interval unknown).
// 0 otherwise (failed or interrupted run, no scrape seen, not serving, NULL).
#define SLM_TRAIN_PROM_LINGER_MAX_S 15.0
double slm_train_prom_linger_s(const slm_train_prom *p);
// Serves until one more scrape arrives or slm_train_prom_linger_s seconds passed, then stops
// the server and frees; safe on NULL.
void slm_train_prom_free(slm_train_prom *p);

// What a finished (or stopped) run reports.
typedef struct slm_train_result {
    int64_t steps_done;
    double final_loss;     // last step's training loss
    double final_val_loss; // last validation loss (NaN if never evaluated)
    double tokens_per_s;   // target tokens / wall time of the steps after the first (all if one)
    double mfu;            // tokens_per_s x FLOPs per token / (peak x world)
    double peak_gflops;    // the MFU denominator used (at the end: raised by any faster step)
    double flops_per_token;
    int64_t state_bytes;      // this rank's persistent parameter / gradient / AdamW bytes
    int64_t trainable_params; // parameters AdamW updates (the adapters with LoRA)
    bool already_complete;    // resumed at step == steps: nothing trained (the rest is NaN)
    bool interrupted;         // stopped by a want_stop hook (the stop flag); saved by the hooks
    bool preempted;           // interrupted, and SIGTERM / SIGUSR1 reached some rank (a preemption:
                              // `shardlm train` exits 75 once the checkpoint is committed)
    bool stop_evaluated;      // stopped before --steps (not interrupted): final_val_loss is the
                              // validation of the weights it stopped with
    int64_t nonfinite_skips;  // steps --on-nonfinite skip skipped in the whole run (resumed
                              // attempts included: checkpoints carry the count)
    int64_t empty_skips;      // steps skipped for want of a target token, likewise
} slm_train_result;

// Trains a model from a seeded init (slm_llama_init_weights) as described in the module comment:
// per step, grad_accum micro-batches of B x T from the loader, loss scaled so the gradient is
// that of the mean over all the step's target tokens, global-norm clipping, AdamW with no decay
// on norms and embeddings (slm_param_view.weight_decay), LR from slm_lr_at. Writes the run
// directory (config.json, tokenizer; the final checkpoint, metrics.jsonl, the stop flag and step
// lines come from the hooks in o: slm_train_add_std_hooks; nothing is printed to stdout by the
// library). `res` may be NULL (filled on SLM_OK and SLM_E_INTERRUPTED).
// Equivalent to: slm_train_open, slm_train_init, slm_train_step until slm_train_done,
// slm_train_finish, slm_train_close (below).
// Errors: SLM_E_ARG (bad option; unknown preset; vocab mismatch between tokenizer, dataset and
// model; T > max_position_embeddings), SLM_E_IO (no manifest, unwritable run dir),
// SLM_E_FORMAT / SLM_E_CHECKSUM (bad data), SLM_E_NUMERIC (NaN/Inf loss or gradient, naming the
// step), SLM_E_INTERRUPTED (the stop flag was set: the checkpoint is saved first),
// SLM_E_ARG for FSDP options that do not fit the world size. Reaching max_minutes is not an error:
// it saves and returns SLM_OK. Before any allocation or file: SLM_E_NOMEM when the memory estimate
// (parameters, gradients, AdamW m / v — shards under FSDP — and slm_llama_act_bytes_estimate for B
// x T) exceeds what slm_mem_probe allows, naming both and what to reduce; SLM_E_ARG when the train
// split has fewer than B x world windows of T + 1 tokens; SLM_E_ARG for a fresh run (resume NULL,
// no train_from_scratch) into an out_dir holding checkpoints (step_N directories; never
// deleted: resume it or use another out_dir); SLM_E_ARG for an out_dir that is a non-empty
// directory but no run directory (slm_rundir_prepare); SLM_E_IO when another run holds
// out_dir's lock; SLM_E_FORMAT when the checkpoint to resume (or out_dir's tokenizer copy, or an
// init_from_hf directory's tokenizer) was made with another tokenizer than the dataset's;
// resuming a checkpoint at step == steps returns SLM_OK with res->already_complete, one past
// is SLM_E_ARG. On an error exit a checkpoint that finished writing is committed (world of one,
// or errors every rank agreed on) or discarded with a warning. The final checkpoint is the
// run's weights: its failure is an error even under --on-ckpt-error continue.
slm_status slm_train_run(const slm_train_opts *o, slm_train_result *res);

// ---------------------------------------------------------------------------------------------
// The run as phases (slm_train_run composes them). Under mpirun every rank calls each phase;
// each is collective and returns the same status on every rank.

// Open: checks the options, resolves the model config, estimates memory, opens the dataset,
// tokenizer and loaders, then (rank 0) prepares the run directory: lock, resume decision
// (slm_rundir_prepare), config.json, tokenizer copy, an empty metrics.jsonl for a fresh run,
// shared with the other ranks. Nothing is allocated for the model yet. *out owned (close it
// with slm_train_close, which releases the lock last); NULL on error. `o` is borrowed until
// slm_train_close. Errors: those listed for slm_train_run before any allocation.
slm_status slm_train_open(const slm_train_opts *o, slm_trainer **out);
// Init: the model, its FSDP sharding (a world of one: NO_SHARD over one-rank communicators),
// the batch buffers, the LR schedule and MFU denominator, then the initial state (seeded init,
// --init-from-hf weights, or everything restored from the checkpoint the open phase chose),
// then every hook's on_start. A resume at --steps leaves the run done with nothing to train.
slm_status slm_train_init(slm_trainer *tr);
// True when no step is left: --steps reached, a stop agreed, or a resume at --steps.
bool slm_train_done(const slm_trainer *tr);
// Step: one optimizer step (grad_accum micro-batches, clipping, AdamW, validation when due,
// then the on_step hooks); *m receives its metrics. A stop agreed at the step boundary or
// between micro-batches trains nothing (m->step == 0, the partial step discarded) and makes
// the run done. Errors: SLM_E_NUMERIC (non-finite loss or gradient norm, naming the step),
// a hook's status.
slm_status slm_train_step(slm_trainer *tr, slm_step_metrics *m);
// Finish: with st == SLM_OK, an early stop's validation and the result; then every
// started hook's on_finish (with st). Returns st, else a hook's failure, else
// SLM_E_INTERRUPTED after a stop hook stopped the run, else SLM_OK. tr may be NULL (returns st).
slm_status slm_train_finish(slm_trainer *tr, slm_status st);
// The result of a finished run (valid after slm_train_finish; also for the on_finish hooks).
const slm_train_result *slm_trainer_result(const slm_trainer *tr);
// Frees everything (joins nothing a hook still holds: on_finish released that); safe on NULL.
void slm_train_close(slm_trainer *tr);
// Accessors for hooks.
const slm_train_opts *slm_trainer_opts(const slm_trainer *tr);
int slm_trainer_rank(const slm_trainer *tr);
int slm_trainer_world(const slm_trainer *tr);
// Optimizer steps done so far (resumed steps included).
int64_t slm_trainer_steps_done(const slm_trainer *tr);
// Where this rank's last step went (for the Prometheus hook; read in on_step / observe). The
// step's wall time is slm_step_metrics.ms_per_step; compute is what the other parts leave.
typedef struct slm_step_timing {
    double data_s;          // drawing its micro-batches (loader reads, synthetic tokens), s
    double comm_s;          // blocked in collective waits (slm_dist_wait_seconds), s
    int64_t bytes_gathered; // all-gathered bytes received since the start (fsdp stats)
    int64_t bytes_reduced;  // bytes sent into reduce-scatters / all-reduces since the start
    double sim_compute_s;   // --simulate-compute: the step's simulated compute waits, s (else 0)
} slm_step_timing;
void slm_trainer_step_timing(const slm_trainer *tr, slm_step_timing *t);

// Under mpirun, before any other collective: checks that every rank was started with the same
// settings (slm_dist_agree_values), so mismatched ranks stop together with one message instead
// of corrupting memory, failing inside MPI or training an inconsistent model. Compared: every
// option of slm_train_opts that changes the math, the collective schedule or the run directory
// (data, model, vocab, batch, seq, grad-accum, steps, lr, min-lr, warmup, weight decay, betas,
// eps, grad clip, seed, eval, activation checkpointing, max-minutes, time schedule, sharding,
// shard group size, param / reduce dtypes, all-gather limit, prefetch, collective timeout, out,
// checkpoint policy, resume, init-from-hf, the LoRA options), as parsed values; then, read on each
// rank, the resolved model config, the XXH64 of the dataset's manifest.json and tokenizer file and
// of the
// --init-from-hf config.json. Not compared (they may differ per rank): threads, log_every,
// peak_gflops, hooks, and the MPI progress thread. Collective; SLM_OK in a world of one.
// Errors: SLM_E_ARG when an option differs, SLM_E_FORMAT when only file contents differ, with
// a message naming the first differing setting and which ranks hold which value.
slm_status slm_train_agree(const slm_train_opts *o);

// SIGINT / SIGTERM / SIGUSR1 set the stop flag the loop checks at step and micro-batch
// boundaries (the first SIGINT prints a notice on stderr). SIGTERM / SIGUSR1 (preemption) on any
// rank make the agreed stop a preemption on every rank (slm_train_result.preempted). A second
// SIGINT while a stop is pending writes a message and exits the process at once with status 1
// (_exit: nothing saved; the last committed checkpoint stays).
void slm_train_install_signal_handlers(void);
// Sets / reads the stop flag (async-signal-safe setter).
void slm_train_request_stop(void);
bool slm_train_stop_requested(void);
// Clears the stop flag (tests, or a caller that starts another run in the same process).
void slm_train_reset_stop(void);

// ---------------------------------------------------------------------------------------------
// Fault injection (tests of the supervisor; docs/operations.md "Fault injection"): the
// SHARDLM_FAULT syntax, slm_fault_plan and its parser are in base/fault.h; the trainer's
// actions are these two (src/train/fault.c).

// The trainer calls this on every rank before step `step` (1-based): slow sleeps; kill, stop
// and exit of this rank at this step act (a warning line first). p may be NULL.
void slm_fault_before_step(const slm_fault_plan *p, int rank, int64_t step);
// corrupt-ckpt's action: flips (XOR 0xff) the byte at size / 2 of `path` in place and fsyncs,
// with a warning naming the file and offset. Errors: SLM_E_IO naming the file.
slm_status slm_fault_flip_byte(const char *path);

#endif
