// Helpers shared by the train/ sources (not part of the public API).
#ifndef SLM_TRAIN_INTERNAL_H
#define SLM_TRAIN_INTERNAL_H

#include "ckpt/ckpt.h"
#include "data/data.h"
#include "train/train.h"

typedef struct slm_rundir slm_rundir;
typedef struct slm_train_fault_hook slm_train_fault_hook;

// A run's batch geometry: per-rank micro-batch B (--batch), sequence length T (--seq), gradient
// accumulation K (--grad-accum), world size W. A step's global batch is B x W x K sequences.
typedef struct slm_batch_geom {
    int B, T, K, W;
} slm_batch_geom;

// ---------------------------------------------------------------------------------------------
// One run's state (trainer.c; the library hooks in hooks.c read it). Everything it owns is
// released by slm_train_close.
struct slm_trainer {
    const slm_train_opts *o; // borrowed
    int W, rank, B, T, K;
    float min_lr; // resolved (o->min_lr < 0: lr / 10)
    slm_llama_config cfg;
    slm_device *dev; // the model's device: --device, or --simulate-compute's SLEEP device
                     // (NULL: the CPU device); opened by slm_train_open, closed last
    slm_llama model; // holds no buffers: fsdp owns the shards and points params / grads
    bool model_init;
    slm_fsdp fsdp;           // zeroed until init
    slm_fsdp_opts fsdp_opts; // o->fsdp normalised for the world (slm_fsdp_opts_for_world)
    slm_dataset ds;
    bool ds_open;
    slm_tokenizer *tok;
    slm_loader *train_l, *val_l;
    slm_loader_state val_start;
    int32_t *win, *inp, *tgt; // [K][B, T+1], [B, T], [B, T]
    // instruction data (masked dataset): per-token targets and sample positions of the windows
    bool masked;
    uint8_t *wtgt;       // [K][B, T+1] 1: token t is a loss target (slm_loader_next_ex)
    int32_t *wpos, *pos; // [K][B, T+1] positions in the sample; [B, T] of one micro-batch
    char *resume_path;   // checkpoint to resume from (NULL: fresh start)
    slm_rundir *rundir;  // rank 0 with out_dir: holds the run directory's lock
    slm_rng synth;       // synthetic tokens (and saved in checkpoints)
    double peak, fpt, t_start;
    int peak_src;       // where peak came from: 0 --peak-gflops, 1 the cache, 2 measured at start
    double peak_logged; // the peak last logged and cached (raises under 10 % are not logged)
    int64_t step, tokens_seen;
    int64_t step_tokens;  // global tokens the step being trained counts (plain: B T K W; masked:
                          // real, non-padding input tokens; draw_batch)
    int64_t step_targets; // global target tokens of that step (draw_batch; 0: skipped)
    int64_t n_empty;      // steps skipped for want of a target token
    double sum_tok, sum_dt, last_loss, last_val; // sum_*: the steps counted in the rates
    int64_t n_rate;
    double step_wait0, step_data_s, step_comm_s; // the last step's timing (metrics)
    double step_sim_s; // --simulate-compute: the last step's simulated compute, s
    bool done, started, interrupted;
    bool *hook_started; // [o->n_hooks]: on_start ran (so on_finish runs)
    slm_train_result res;
    uint64_t lora_base_xxh64; // LoRA: slm_hf_dir_xxh64 of the --init-from-hf base
    slm_fault_plan faults;    // SHARDLM_FAULT / SHARDLM_ATTEMPT (fault.c), read by the open phase
    bool fault_corrupted;     // corrupt-ckpt fired
    bool preempted;           // the agreed stop came with SIGTERM / SIGUSR1 on some rank
    double t_stop;            // slm_time_s() when the stop was agreed
    int64_t n_skipped, skip_run; // --on-nonfinite skip: skipped steps, and in a row now
    double *spike_hist;          // [o->spike_window] the last losses (ring), NULL when off
    int64_t spike_n;             // losses seen by the detector
    bool snap_one_host;          // snapshots: every rank on one host (snapshot.c)
    slm_ckpt *resume_ckpt;       // rank 0: the checkpoint opened for check_resume_batch, read by
                                 // resume_from (the batch checked is the one loaded)
    bool batch_changed;          // --allow-batch-change accepted another global batch
    slm_batch_geom batch_saved;  // then: the checkpoint's geometry (metrics "batch_change")

    // Where fault injection acts (slm_train_faults, set by init; see below).
    const slm_train_fault_hook *fault;
};

// Fills a checkpoint's meta and this rank's shards for the state after `step` steps
// (sh[n_units], caller-allocated). For the checkpoint hook.
void slm_trainer_ckpt_state(const slm_trainer *tr, int64_t step, slm_ckpt_meta *meta,
                            slm_ckpt_shard *sh);
// The unit layouts a checkpoint of this run holds (*n_units of them): the model's units, or
// with LoRA the adapter units. Borrowed.
const slm_unit_layout *slm_trainer_ckpt_layout(const slm_trainer *tr, int *n_units);

// Fault injection (SHARDLM_FAULT, tr->faults; docs/operations.md) enters a run only at these
// named points: the step calls them through tr->fault, the checkpoint hook calls after_ckpt. Each
// is a no-op unless an armed fault names this point, rank and step.
struct slm_train_fault_hook {
    // Before step tr->step + 1, ahead of its stop check: slow sleeps; kill, stop and exit of this
    // rank act (slm_fault_before_step).
    void (*step_start)(slm_trainer *tr);
    // After micro-batch k's forward: may replace its loss and the loss scale its backward gets
    // (nan-grad: NaN for both on micro-batch 0 of step S on rank R, with a warning).
    void (*micro_batch)(slm_trainer *tr, int k, float *loss, float *scale);
    // After each checkpoint poll: corrupt-ckpt (rank 0), once step S's checkpoint directory is
    // committed under out_dir/checkpoints, flips a byte of its rank_R file.
    void (*after_ckpt)(slm_trainer *tr);
};
// SHARDLM_FAULT's actions at those points (fault.c).
extern const slm_train_fault_hook slm_train_faults;

// Resolves a preset / config.json, applies a vocab override (> 0), validates, and checks
// T <= max_position_embeddings. Errors: SLM_E_ARG naming the spec and the field.
slm_status slm_train_resolve_config(const char *spec, int32_t vocab_override, int T,
                                    slm_llama_config *cfg);
// Tokenizer, manifest and model agree on the vocabulary size. Errors: SLM_E_ARG naming all three.
slm_status slm_train_check_vocab(const slm_dataset *ds, const slm_tokenizer *tok,
                                 const slm_llama_config *cfg, const char *model_spec);
// windows [b, T+1] -> inputs [b, T], targets [b, T]; returns the count of targets != -1.
int64_t slm_train_split_windows(const int32_t *win, int b, int T, int32_t *inp, int32_t *tgt);
// The same for a masked dataset's windows: targets[t] = win[t+1] where wtgt[t+1], else -1 (the
// ignore index); pos[b, T] = wpos[b, :T]. Returns the count of targets != -1.
int64_t slm_train_split_masked(const int32_t *win, const uint8_t *wtgt, const int32_t *wpos, int b,
                               int T, int32_t *inp, int32_t *tgt, int32_t *pos);
// Mean loss over up to max_batches (0: all) batches of B windows from a val loader opened with
// B_global 1, from its current position. Errors: SLM_E_NUMERIC on a non-finite loss.
slm_status slm_train_eval_loader(slm_llama *m, slm_loader *l, int B, int T, int64_t max_batches,
                                 slm_eval_result *res);

// ---------------------------------------------------------------------------------------------
// The node-local snapshot directory (snapdir.c; the hook is snapshot.c's). ROOT is
// slm_train_snapshot_root(o); its marker file names the run (absolute --out) that owns it.

// Whose snapshots ROOT holds: 1 this run's, 0 no marker, -1 another run's (that run's --out into
// other[cap] when other is not NULL). Keeps the thread's error message.
int slm_snapdir_owner(const slm_train_opts *o, const char *root, char *other, size_t cap);
// Removes ROOT's snapshot entries (step_N, `latest`, the marker) and ROOT when that leaves it
// empty; anything else is left alone. Only for a ROOT this run owns. Errors are ignored.
void slm_snapdir_remove(const slm_train_opts *o, const char *root);
// Rank 0 at start: makes ROOT this run's snapshot directory (marker written); `fresh` (no
// resume) clears this run's earlier snapshots. Errors: SLM_E_ARG for a ROOT holding another
// run's snapshots, or a non-empty --snapshot-dir without a marker; SLM_E_IO.
slm_status slm_snapdir_claim(const slm_train_opts *o, const char *root, bool fresh);
// True when every rank runs on one host (snapshots are node-local). Collective.
bool slm_snapdir_one_host(void);
// Rank 0: the step of the newest snapshot under ROOT that verifies in full (every file's XXH64),
// is newer than disk_step and was saved by W ranks of the model cfg; -1 otherwise, with the
// reason logged (another run's ROOT, none newer, another world or model).
int64_t slm_snapdir_usable(const slm_train_opts *o, const slm_llama_config *cfg, int W,
                           const char *root, int64_t disk_step);

// Straggler detection over one gather window (prom.c): busy[W] is each rank's mean busy time
// per step (iteration wall time minus collective waits); med = their median (the mean of the two
// middle values for even W). A rank with busy > factor x med and busy - med >= min_excess_s
// (med > 0) extends its streak[r] (updated in place), any other rank's streak restarts at 0.
// Returns the count of ranks whose streak just reached `windows` (newly flagged, listed in
// newly[]); scratch[W] is a work buffer. The trainer passes SLM_STRAGGLER_MIN_EXCESS_S: below
// 10 ms per step a difference is scheduling noise, not a slow rank.
#define SLM_STRAGGLER_MIN_EXCESS_S 0.010
int slm_train_stragglers(const double *busy, int W, double factor, double min_excess_s, int windows,
                         int *streak, int *newly, double *scratch, double *median_out);

// ---------------------------------------------------------------------------------------------
// The run directory as training opens it (rundir.c)

#define SLM_RUNDIR_LOCK "run.lock" // RUN_DIR's lock file; names the holder ("pid P on host H")

// True if DIR looks like a shardlm run directory: it has run.lock (what every training run
// creates first), a metrics.jsonl whose first line is the trainer's {"event":"start"} record, or
// a checkpoints/ holding a `latest` file or a step_N entry. An empty checkpoints/ or a
// metrics.jsonl of other content alone does not make one (a user's folder).
bool slm_rundir_is_run_dir(const char *dir);
// Rank 0, before anything is written: refuses --train-from-scratch with --resume (SLM_E_ARG),
// an --out that exists and is not a directory, or is a non-empty directory that is not a run
// directory (SLM_E_ARG); creates it; takes the exclusive flock on RUN_DIR/run.lock for the whole
// run (SLM_E_IO naming the holder's pid and host when another run has it). *out: release with
// slm_rundir_close, which drops the lock. What to do with the checkpoints an earlier run left is
// slm_resume_decide's.
slm_status slm_rundir_prepare(const slm_train_opts *o, slm_rundir **out);
// Releases the lock and frees. Safe on NULL.
void slm_rundir_close(slm_rundir *rd);
// DIR/tokenizer.json, else DIR/tokenizer.model (caller frees); NULL if DIR has neither.
char *slm_train_find_tokenizer(const char *dir);
// If DIR ships a tokenizer (tokenizer.json / tokenizer.model), its XXH64 must equal the one the
// dataset was prepared with. `what` names DIR's role in the message ("--init-from-hf"), `hint`
// says what to do. Errors: SLM_E_FORMAT naming both files and both hashes; SLM_E_IO.
slm_status slm_train_check_dir_tokenizer(const char *dir, const slm_dataset *ds, const char *what,
                                         const char *hint);
// A checkpoint that recorded its tokenizer hash resumes only on a dataset of that tokenizer.
// Errors: SLM_E_FORMAT naming the checkpoint, the dataset and both hashes.
slm_status slm_train_check_ckpt_tokenizer(bool has_tokenizer, uint64_t xxh64, const char *ckpt_dir,
                                          const slm_dataset *ds);
// Before a resumed run copies the dataset's tokenizer into RUN_DIR: the checkpoint to resume
// (opened: its manifest's tokenizer hash, slm_train_check_ckpt_tokenizer) and RUN_DIR's own
// tokenizer copy (slm_train_check_dir_tokenizer) must both match the dataset. Errors: those
// checks', and slm_ckpt_open's wrapped with "--resume PATH".
slm_status slm_train_check_resume_tokenizer(const char *run_dir, const char *resume_path,
                                            const slm_dataset *ds);

// ---------------------------------------------------------------------------------------------
// Resume (resume.c): what a run continues from, decided in one place (the rules are written at
// the top of resume.c: no --resume, --resume PATH, --resume auto's local, remote and snapshot
// candidates).

// What the decision reads of the run being opened (all borrowed).
typedef struct slm_resume_in {
    const slm_train_opts *o;
    int rank, W;
    const slm_llama_config *cfg; // the run's model: a snapshot must hold it
    const slm_dataset *ds;       // the dataset (tokenizer checks); NULL: --synthetic
} slm_resume_in;
// Every rank, after rank 0's slm_rundir_prepare (with --out) succeeded: *path is the checkpoint
// to resume from (a step directory, an s3:// step URI or a node-local snapshot; caller frees;
// NULL: fresh start), the same on every rank. Rank 0 applies the rules with --out (moving
// checkpoints aside for --train-from-scratch, committing a pending save, repairing `latest`) and
// checks the pick's tokenizer. *snap_one_host (written only with --out and
// --snapshot-every-steps): every rank runs on one host. Errors (agreed by every rank): the
// rules' refusals (SLM_E_ARG, SLM_E_FORMAT, SLM_E_IO naming the checkpoint and the options that
// fix it) and the tokenizer checks'. Collective.
slm_status slm_resume_decide(const slm_resume_in *in, char **path, bool *snap_one_host);

// ---------------------------------------------------------------------------------------------
// A resume keeps the run's batch geometry (resume_batch.c)

// B x W x K (sequences per optimizer step).
int64_t slm_batch_global(slm_batch_geom g);
// "--batch B x W ranks x --grad-accum K = G sequences" into buf[n].
void slm_batch_geom_describe(slm_batch_geom g, char *buf, size_t n);
// Resuming checkpoint `ckpt_dir` (its meta M) at geometry `now`: the global batch and T must be
// the checkpoint's. Another world (or --batch / --grad-accum split) with the same global batch
// is resharding: fine. A different global batch is refused unless allow_change
// (--allow-batch-change), which sets *changed (the caller warns and logs it). A different T is
// always refused (the loader position counts windows of T tokens). A manifest without a batch
// record (M->has_batch false) is not checked (SLM_OK; the caller says so).
// Errors: SLM_E_ARG naming the checkpoint, saved and current geometry (B x W x K = G) and the
// fix: the --grad-accum that keeps G at this world, else --batch / --grad-accum pairs, else
// world sizes that divide G; and --allow-batch-change.
slm_status slm_train_check_resume_batch(const slm_ckpt_meta *M, const char *ckpt_dir,
                                        slm_batch_geom now, bool allow_change, bool *changed);
// Rank 0, before the model is built: opens the checkpoint to resume at PATH (*ckpt, kept for the
// restore; caller frees) and checks that it fits this run at geometry `now`: its global batch
// and --seq (slm_train_check_resume_batch with o->allow_batch_change; a change accepted there is
// warned about, *changed set and the checkpoint's geometry in *saved, for the metrics.jsonl
// "batch_change" event, hooks.c); a checkpoint without a batch record is warned about; another
// --steps than it was scheduled for is warned about (the LR at the resumed step under both,
// min_lr the run's resolved minimum LR). Errors: slm_ckpt_open's and the batch check's,
// wrapped with "--resume PATH".
slm_status slm_train_check_resume_fit(const char *path, const slm_train_opts *o, slm_batch_geom now,
                                      float min_lr, slm_ckpt **ckpt, bool *changed,
                                      slm_batch_geom *saved);

#endif
