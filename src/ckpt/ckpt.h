// ckpt: sharded, atomic, optionally asynchronous training checkpoints with exact resume and
// resharding on load, and the Hugging Face safetensors bridge (export / --init-from-hf).
//
// On disk (docs/formats.md, "Checkpoints"): RUN_DIR/checkpoints/step_NNNNNNNN/ holds
// manifest.json (everything but the tensors) and one rank_RRRRR.bin per rank with that rank's
// shard of every unit: fp32 params, AdamW m and v. RUN_DIR/checkpoints/latest names the newest
// committed checkpoint.
//
// Invariants: a directory named step_N (without .tmp) is complete: every rank file was fsynced
// before rank 0 wrote and fsynced the manifest and renamed step_N.tmp -> step_N; `latest` is
// replaced atomically (temp + rename) only after that rename, and older checkpoints are deleted
// only after a newer one is committed. So a crash at any instant leaves `latest` naming a
// complete checkpoint (and --resume auto treats `latest` only as a hint: slm_ckpt_pick_resume).
// Every byte read back is checked against an XXH64 from the manifest
// (per 4 MiB chunk, so a resharding rank that reads only its byte ranges still verifies them);
// nothing unverified reaches the caller's buffers.
//
// Sharding model (designed with fsdp/): per unit, a rank holds the contiguous element range
// [begin, end) of the unit's (possibly padded) FlatParameter plus the AdamW m / v of that range.
// Elements at or beyond the unit's logical numel are padding: never stored, zero on load. A
// checkpoint saved with one set of ranges loads into any other (resharding): each reader preads
// only the chunks that overlap what it asks for.
//
// Threads: the background writer only writes + fsyncs its rank file; all MPI (barrier, status
// agreement) happens on the training thread inside slm_ckpt_saver_* calls.
// This module does not parse command lines and does not know the training loop.
#ifndef SLM_CKPT_H
#define SLM_CKPT_H

#include "base/base.h"
#include "data/data.h"
#include "model/model.h"
#include "optim/optim.h"

#define SLM_CKPT_FORMAT_VERSION 1
#define SLM_CKPT_MAGIC "SLMCKPT1"       // 8 bytes at offset 0 of every rank file
#define SLM_CKPT_HEADER_BYTES 64        // rank file header; data starts here
#define SLM_CKPT_CHUNK_BYTES (4u << 20) // checksum granularity of rank files, bytes

// ---------------------------------------------------------------------------------------------
// Training state besides the tensors

// Everything a checkpoint records besides the shards (all of it restored by resume).
typedef struct slm_ckpt_meta {
    int64_t step;             // optimizer steps completed
    int64_t tokens_seen;      // tokens trained on so far (docs/training.md "Token counts")
    slm_llama_config cfg;     // model config (checked on load)
    bool has_tokenizer;       // tokenizer_xxh64 is meaningful
    uint64_t tokenizer_xxh64; // XXH64 of the tokenizer file's bytes
    char tokenizer_file[64];  // its file name in the run directory ("" if none)
    slm_adamw_hparams adamw;
    int64_t opt_step; // AdamW step count t (bias correction)
    int64_t lr_step;  // LR-schedule position (step index fed to slm_lr_at next)
    int64_t lr_warmup, lr_total;
    float lr_min;
    slm_loader_state loader; // train loader position
    slm_rng rng;             // trainer RNG state (e.g. synthetic data stream)
    int world;               // ranks that saved
    char strategy[24];       // "NO_SHARD", "FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD"
    int shard_group_size;    // ranks per shard group (world for FULL_SHARD, 1 for NO_SHARD)
    // Batch geometry of the run that saved (manifest "batch"; false in manifests written before
    // it was recorded, and in checkpoints not written by the trainer): per-rank micro-batch
    // (--batch), sequence length (--seq, tokens per window) and gradient accumulation
    // (--grad-accum); with `world`, a step's global batch is batch x world x grad_accum
    // sequences of seq tokens. The trainer refuses to resume at another global batch or seq.
    bool has_batch;
    int batch, seq, grad_accum;
    // Per-run skip counters at `step` (manifest "skips"; all 0 when absent, as in manifests
    // written before they were recorded): steps whose update --on-nonfinite skip dropped, how
    // many of those came last in a row (--max-nonfinite-skips counts on from it), and steps
    // skipped because the global batch held no target token. The same on every rank (they
    // follow all-reduced values); a resume continues counting from them.
    int64_t nonfinite_skips, nonfinite_in_a_row, empty_skips;
    // LoRA checkpoint (lora.rank > 0): the units are the L adapter units (model.h's
    // lora_units), not the base's; the frozen base is referred to by the Hugging Face
    // directory it was loaded from and its slm_hf_dir_xxh64 (manifest "lora" object).
    slm_lora_config lora;
    char lora_base[1024];     // absolute path of the base HF directory
    uint64_t lora_base_xxh64; // its weights' identity
} slm_ckpt_meta;

// Fills a world-of-one NO_SHARD meta with zero step and the given config.
void slm_ckpt_meta_default(slm_ckpt_meta *meta, const slm_llama_config *cfg);

// Copies elements [off, off + n) of array k (0 params, 1 AdamW m, 2 AdamW v) of unit `unit`'s
// shard (element 0 = the shard's `begin`) into host[n]; `src` is the shard's `src`. Called on
// the training thread or on the saver's background thread (which copies while the training
// thread runs a forward / backward that only reads the shards).
typedef void (*slm_ckpt_read_fn)(const void *src, int unit, int k, int64_t off, int64_t n,
                                 float *host);

// One unit's shard on this rank, as handed to save / filled by load.
//   params, m, v  [end - begin] f32 each, host memory (m / v may be NULL on load: not read)
// Saving state that lives on a device (fsdp/'s shards): params, m, v NULL and `read` set; the
// writer then copies through read(src, src_unit, k, ...) into its staging buffer or, writing
// without a staging copy, piece by piece into a small bounce buffer.
typedef struct slm_ckpt_shard {
    int64_t begin, end; // element range of the unit's flat buffer (end may exceed numel: padding)
    float *params, *m, *v; // borrowed host arrays (save: NULL stores zeros unless `read` is set)
    slm_ckpt_read_fn read; // save only: non-NULL: params, m and v are read through it
    const void *src;       // read's first argument (borrowed)
    int src_unit;          // read's unit argument
} slm_ckpt_shard;

// ---------------------------------------------------------------------------------------------
// Low level save (no MPI): each rank writes its file, rank 0 commits. The saver below wires
// them with a background thread and collectives; tests call them directly to fake N ranks.

// Writes DIR/rank_RRRRR.bin (header + per unit params, m, v of [begin, min(end, numel)) ) and
// its sidecar DIR/rank_RRRRR.json (ranges, offsets, size, XXH64 and chunk hashes), both
// fsynced. `layout` gives each unit's logical numel; NULL m / v store zeros.
// Errors: SLM_E_IO naming the file, the step (write/fsync) and errno text (e.g. ENOSPC).
slm_status slm_ckpt_write_rank(const char *dir, int rank, int world, int64_t step,
                               const slm_unit_layout *layout, int n_units,
                               const slm_ckpt_shard *shards);

// Rank 0's commit after every writing rank's file is durable in ROOT/step_N.tmp: merges the
// sidecars present (ranks 0..meta->world-1; ranks that hold only replicas write none) into
// ROOT/step_N.tmp/manifest.json (with meta and the unit layout), fsyncs it and the directory,
// renames step_N.tmp -> step_N, fsyncs ROOT, replaces ROOT/latest atomically, then deletes the
// oldest committed checkpoints beyond `keep` (0: keep all). Errors: SLM_E_IO / SLM_E_FORMAT naming
// the file; on error `latest` is unchanged.
slm_status slm_ckpt_commit(const char *root, const slm_ckpt_meta *meta,
                           const slm_unit_layout *layout, int n_units, int keep);

// Rank 0, when a save starts (before any rank writes): ROOT/step_N.tmp/pending.json, the
// manifest without its "files" (fsynced), so that a save every rank finished writing can be
// committed later even if the job ends before the commit barrier (slm_ckpt_recover_pending).
// Removed by the commit. Errors: SLM_E_IO naming the file.
slm_status slm_ckpt_write_pending(const char *root, const slm_ckpt_meta *meta,
                                  const slm_unit_layout *layout, int n_units);

// Rank 0 before a resume (no MPI): the newest ROOT/step_N.tmp newer than every committed
// checkpoint whose pending.json exists and whose every writing rank's sidecar matches its rank
// file (size and whole-file XXH64) is committed as slm_ckpt_commit would have (manifest from
// pending.json + sidecars, rename, `latest`, retention `keep`); a warning says so. An older or
// incomplete one is left for the next commit's sweep (an info line says why), and so is one
// whose merged manifest does not parse or whose commit fails (a warning; `latest` unchanged).
// *recovered: the step, -1 if none. Returns SLM_OK (a failed recovery never blocks a resume).
slm_status slm_ckpt_recover_pending(const char *root, int keep, int64_t *recovered);

// The step slm_ckpt_recover_pending would commit (the newest complete interrupted save newer
// than every committed checkpoint), -1 if none; reads only (no file written, nothing logged).
int64_t slm_ckpt_find_pending(const char *root);

// "ROOT/step_NNNNNNNN" (caller frees); with tmp, the ".tmp" staging name.
char *slm_ckpt_step_dir(const char *root, int64_t step, bool tmp);

// ---------------------------------------------------------------------------------------------
// The saver: schedule-free mechanics of synchronous and asynchronous saves.

typedef struct slm_ckpt_saver slm_ckpt_saver;

typedef struct slm_ckpt_saver_opts {
    const char *root; // RUN_DIR/checkpoints (created)
    bool sync;        // write on the training thread (--ckpt-sync)
    int keep;         // committed checkpoints kept (0: all)
    int rank, world;
    bool no_write; // this rank holds a replica of shards another rank writes (NO_SHARD /
                   // HYBRID_SHARD replica groups > 0): it writes no file, only takes part
} slm_ckpt_saver_opts;

// Creates a saver. Errors: SLM_E_IO if root cannot be created.
slm_status slm_ckpt_saver_new(const slm_ckpt_saver_opts *o, slm_ckpt_saver **out);
// Starts a save of this rank's shards at a step boundary: finishes (commits) the previous
// save first; a no-op when this saver just committed the same step; a step_N directory already
// on disk otherwise (complete or partial) is written again and replaced at the commit; sync: copies
// the shards into the staging buffer, writes and commits; async: a background thread copies them
// into the (reused) staging buffer, then writes the rank file, so the shard buffers are BORROWED
// until slm_ckpt_saver_fence returns: the caller may read them (forward / backward) but must call
// the fence before modifying them (optimizer step, load). `layout`, `meta` and the shard
// descriptors are copied. Returns the error of the previous or the sync save, agreed across ranks.
// Collective (every rank, same step).
slm_status slm_ckpt_saver_save(slm_ckpt_saver *s, const slm_ckpt_meta *meta,
                               const slm_unit_layout *layout, int n_units,
                               const slm_ckpt_shard *shards);
// Waits until the pending save no longer reads the shard buffers (no-op if none / sync).
// Local; cheap when the copy is done (it normally finishes during the forward / backward).
void slm_ckpt_saver_fence(slm_ckpt_saver *s);
// At a step boundary: if every rank's background write has finished, commits it (collective).
// Cheap otherwise (one all-reduce of a flag). Returns the save's agreed error, if any.
slm_status slm_ckpt_saver_poll(slm_ckpt_saver *s);
// Waits for the pending save and commits it (collective). Returns its agreed error.
slm_status slm_ckpt_saver_finish(slm_ckpt_saver *s);
// On an error exit: settles the pending save, if any. collective (every rank calls it, as after
// an error all ranks agreed on): waits for it and commits it (a message says so; a failed
// commit is logged); else (other ranks may be elsewhere): waits for this rank's writer and rank
// 0 removes the staging directory, with a warning. Returns the commit's error.
slm_status slm_ckpt_saver_settle(slm_ckpt_saver *s, bool collective);
// Saves this saver committed.
int64_t slm_ckpt_saver_n_committed(const slm_ckpt_saver *s);
// Seconds the training thread spent in the last slm_ckpt_saver_save plus its fence wait (the
// stall).
double slm_ckpt_saver_last_stall_s(const slm_ckpt_saver *s);
// Step of the last committed checkpoint (-1 if none).
int64_t slm_ckpt_saver_last_committed(const slm_ckpt_saver *s);
// Rank-file bytes this rank wrote into the saves committed so far (0 on a replica that writes
// none), and the last committed save's duration in seconds (its start on the training thread
// to its commit; 0 before the first).
void slm_ckpt_saver_io_stats(const slm_ckpt_saver *s, int64_t *bytes, double *last_duration_s);
// Waits for the background thread (without committing) and frees. Safe on NULL.
void slm_ckpt_saver_free(slm_ckpt_saver *s);

// ---------------------------------------------------------------------------------------------
// Training-loop glue: the schedule (--ckpt-every-steps / --ckpt-every-minutes / --ckpt-keep /
// --ckpt-sync / --on-ckpt-error) around a saver, so the loop calls one function per step.

typedef struct slm_ckpt_policy {
    const char *root;          // RUN_DIR/checkpoints
    int64_t every_steps;       // save when step % every_steps == 0 (0: off)
    double every_minutes;      // save when this many minutes passed since the last save (0: off);
                               // rank 0's clock decides (broadcast), so ranks agree
    int keep;                  // committed checkpoints kept (0: all)
    bool sync;                 // --ckpt-sync: write on the training thread
    bool abort_on_error;       // --on-ckpt-error abort (default continue: log, train on)
    const char *remote_uri;    // --ckpt-uri s3://...: upload committed checkpoints (NULL: off)
    int remote_prefix_shards;  // --s3-prefix-shards (0 or 1: one prefix)
    const slm_ckpt_meta *meta; // with remote_uri: this run's config / tokenizer (identity check)
    double preempt_grace_s;    // --preempt-grace (slm_ckpt_upload_opts)
} slm_ckpt_policy;

typedef struct slm_ckpt_sched slm_ckpt_sched;

// Creates the schedule and its saver. rank / world / no_write as in slm_ckpt_saver_opts.
// Errors: those of slm_ckpt_saver_new. Collective.
slm_status slm_ckpt_sched_new(const slm_ckpt_policy *p, int rank, int world, bool no_write,
                              slm_ckpt_sched **out);
// True if a save is due after `step` (steps or minutes; `force` always). Collective when
// every_minutes > 0 (a broadcast from rank 0).
bool slm_ckpt_sched_due(slm_ckpt_sched *s, int64_t step, bool force);
// At a step boundary: polls the pending save (commits it when every rank is done) and, if
// `save`, starts a new one of the given state. A failed save is logged and returns SLM_OK
// under --on-ckpt-error continue; under abort it returns the error. Collective.
slm_status slm_ckpt_sched_step(slm_ckpt_sched *s, bool save, const slm_ckpt_meta *meta,
                               const slm_unit_layout *layout, int n_units,
                               const slm_ckpt_shard *shards);
// slm_ckpt_saver_fence of the pending save: call before modifying the shards.
void slm_ckpt_sched_fence(slm_ckpt_sched *s);
// Waits for and commits the pending save (end of training). Error handling as above, except
// that the last save started must have committed (it holds the run's final weights): if it
// failed, SLM_E_IO naming its step, the newest committed checkpoint and the failure (the
// newest failed save's message: "rank R failed: ..." where another rank's write failed),
// whatever the policy.
slm_status slm_ckpt_sched_finish(slm_ckpt_sched *s);
// Number of saves committed (failed and no-op saves not counted), total and max
// training-thread stall of the saves, seconds.
void slm_ckpt_sched_stats(const slm_ckpt_sched *s, int64_t *n_saves, double *stall_total_s,
                          double *stall_max_s);
// The last committed save's step (-1: none yet) and slm_ckpt_saver_io_stats of the saver.
void slm_ckpt_sched_io_stats(const slm_ckpt_sched *s, int64_t *last_step, int64_t *bytes,
                             double *last_duration_s);
// Number of saves that failed (logged under --on-ckpt-error continue).
int64_t slm_ckpt_sched_n_failed(const slm_ckpt_sched *s);
// slm_ckpt_saver_settle on an error exit of the training loop (a finished async save is
// committed when `collective`); keeps the calling thread's error message. Safe on NULL.
void slm_ckpt_sched_settle(slm_ckpt_sched *s, bool collective);
void slm_ckpt_sched_free(slm_ckpt_sched *s);

// Committed checkpoints (step_N directories, ".tmp" staging ones excluded) under ROOT: their
// steps ascending into *steps (caller frees; NULL when none). Returns the count (0 if ROOT is
// missing or empty).
int slm_ckpt_list_steps(const char *root, int64_t **steps);

// Picks the checkpoint --resume auto continues from: the newest step_N under ROOT that verifies
// (manifest parses, names step N, every rank file exists with its manifest size; with
// full_verify also every file's XXH64, as slm_ckpt_verify). `latest` is only a hint: a missing,
// stale or unreadable `latest` does not matter. Logs which checkpoint and why (e.g. "latest
// missing; resuming from step_00000020") and warns, naming the bad file, for every newer one
// skipped. *out_dir (caller frees) is NULL and *out_step -1 when ROOT holds no committed
// checkpoint (fresh start). Errors: SLM_E_FORMAT when checkpoints exist but none verifies,
// naming the newest one's problem (the caller adds what the user can do).
slm_status slm_ckpt_pick_resume(const char *root, bool full_verify, char **out_dir,
                                int64_t *out_step);
// The same pick for any reader (eval, generate, ckpt export): `use` is the verb of the log line
// ("resuming from", "loading"); slm_ckpt_pick_resume passes "resuming from".
slm_status slm_ckpt_pick_newest(const char *root, bool full_verify, const char *use, char **out_dir,
                                int64_t *out_step);
// Makes ROOT/latest name step_N (atomically; nothing is done when it already does), logging the
// repair. For the checkpoint slm_ckpt_pick_resume chose. Errors: SLM_E_IO naming the file.
slm_status slm_ckpt_repair_latest(const char *root, int64_t step);

// ---------------------------------------------------------------------------------------------
// Checkpoints on S3 (src/ckpt/s3_read.c reads, remote.c picks and uploads; docs/formats.md
// "Checkpoints on S3"). Every reader below (slm_ckpt_open, check_files, verify, read_range) also
// takes s3://BUCKET/PREFIX URIs: range GETs of only the chunks asked for, each verified against
// the manifest's XXH64.

// --resume auto's pick under the run prefix URI, with the local rules (slm_ckpt_pick_resume):
// of the step_N holding a manifest.json and newer than `above` (the local pick's step; -1:
// none), newest first, the first that verifies (manifest parses and names step N, every rank
// file's object exists with exactly the bytes of its files; with full_verify every chunk's
// XXH64 read back, as slm_ckpt_verify). `latest` is only a hint. Warns, naming the problem (the
// rank file and its object), for every one skipped; logs the one found. *step (-1: none newer
// than `above` verifies) and *step_uri (owned, NULL if none). Errors: the S3 client's
// (connection, 403, ...); SLM_E_FORMAT when above < 0 and none of the remote checkpoints
// verifies.
slm_status slm_ckpt_remote_pick(const char *uri, int64_t above, bool full_verify, int64_t *step,
                                char **step_uri);

// Background upload of committed checkpoints to S3, one uploader per host: the lowest world rank
// of each host (same host name, or SHARDLM_HOST_ID) uploads the rank files of its host's ranks
// (handed over through the local file system: the committed step directory); when every host is
// done (agreed at a step boundary), rank 0 uploads the manifest and then `latest`, then applies
// `keep` remotely (an older checkpoint is deleted only after a newer one is complete).
typedef struct slm_ckpt_uploader slm_ckpt_uploader;

typedef struct slm_ckpt_upload_opts {
    const char *uri;  // --ckpt-uri s3://BUCKET/PREFIX/
    const char *root; // the local RUN_DIR/checkpoints
    int rank, world;
    int keep;                  // --ckpt-keep (0: all)
    int prefix_shards;         // --s3-prefix-shards K (1..100): rank files over K prefixes
    const slm_ckpt_meta *meta; // this run's model config + tokenizer: a prefix whose latest
                               // checkpoint has others is refused (NULL: no check)
    double preempt_grace_s;    // --preempt-grace: after SIGTERM / SIGUSR1, finish abandons the
                               // uploads still running this long after the signal, less a
                               // margin (0: finish waits for them)
} slm_ckpt_upload_opts;

// Creates the uploader (collective: host discovery, status agreed). Errors: SLM_E_ARG for a bad
// URI / shard count or another run's prefix (naming both configs or tokenizer hashes), the S3
// client's errors.
slm_status slm_ckpt_uploader_new(const slm_ckpt_upload_opts *o, slm_ckpt_uploader **out);
// At a step boundary, after the checkpoint schedule's poll (collective; cheap: a non-blocking
// all-reduce of 3 integers, started at one boundary and completed at the next, at boundaries 0,
// 1, 2, 4, 8, 16, then every 16th after a hand-off): settles a finished upload and, when
// `committed` (the newest locally committed step, -1: none) is newer than the last one handed
// over, starts its upload;
// if the previous upload is still running it first waits for it (the stall, logged and counted)
// unless a stop (slm_stop_requested) reaches any rank meanwhile (then it returns and
// slm_ckpt_uploader_finish takes over). Upload failures are logged (the remote `latest` keeps
// naming the previous complete checkpoint) and never stop training; a failed upload is retried
// at later boundaries (at most 8 times, 2 s doubling to 60 s apart) until a newer checkpoint
// commits, which replaces it (a retry still running is cancelled for it). At the first call, a
// local checkpoint newer than the remote latest (an earlier run's unfinished upload) is
// uploaded. Returns SLM_OK.
slm_status slm_ckpt_uploader_step(slm_ckpt_uploader *u, int64_t committed);
// Uploads the newest committed step if not yet handed over and waits for every upload
// (collective). After a preemption signal (slm_stop_preempted) it waits only until
// --preempt-grace after the signal, less min(3 s, grace / 4), agreed over the ranks; then the
// uploads still running are cancelled (abandoned: the remote `latest` stays on the previous
// complete checkpoint; a later run catches up). Returns SLM_E_IO (agreed) when the newest
// committed step (or the catch-up) is not on S3 at the end (its upload failed past the retries),
// naming it and the step the remote latest names, unless the end is a preemption's (then a
// warning: the next run uploads it); logs a summary (uploads complete / failed / abandoned,
// PUTs, bytes, retries, stall, time at step boundaries).
slm_status slm_ckpt_uploader_finish(slm_ckpt_uploader *u);
// A run found already complete at the start (nothing to train): uploads o->root's newest
// committed checkpoint when the remote latest is older (the final upload of an earlier run
// failed) and waits for it: slm_ckpt_uploader_new, _step, _finish (collective). SLM_OK when the
// remote latest is at least as new as the local one; else the errors of those (SLM_E_IO when
// the remote copy stays behind).
slm_status slm_ckpt_upload_catchup(const slm_ckpt_upload_opts *o);
// This rank's PUT requests, uploads completed, seconds training waited for overlaps.
void slm_ckpt_uploader_stats(const slm_ckpt_uploader *u, int64_t *puts, int64_t *n_done,
                             double *stall_s);
// Joins the thread (after its current job) and frees. Safe on NULL.
void slm_ckpt_uploader_free(slm_ckpt_uploader *u);

// ---------------------------------------------------------------------------------------------
// Reading

typedef struct slm_ckpt slm_ckpt;

// Opens a checkpoint: PATH is a step directory (has manifest.json), a checkpoints root (has
// `latest`) or a run directory (has checkpoints/latest). Parses and validates the manifest
// (format version, units, files, ranges covering every unit exactly once, sizes). Does not read
// the rank files. Errors: SLM_E_IO, SLM_E_FORMAT naming the manifest and the field,
// SLM_E_UNSUPPORTED for another format version.
slm_status slm_ckpt_open(const char *path, slm_ckpt **out);
void slm_ckpt_free(slm_ckpt *c);
// The step directory opened (borrowed).
const char *slm_ckpt_dir(const slm_ckpt *c);
// The recorded meta (borrowed).
const slm_ckpt_meta *slm_ckpt_get_meta(const slm_ckpt *c);
// Number of units and the recorded layout of unit u (borrowed).
int slm_ckpt_n_units(const slm_ckpt *c);
const slm_unit_layout *slm_ckpt_unit(const slm_ckpt *c, int u);
// Checks that the checkpoint fits a model: same config fields, same unit count, numel, and every
// tensor's name, shape and offset. A LoRA checkpoint is compared with m's adapter units (m must
// carry the same LoRA config: rank, alpha, dropout, targets). Errors: SLM_E_ARG naming the field /
// tensor, both values.
slm_status slm_ckpt_check_model(const slm_ckpt *c, const slm_llama *m);
// Reads elements [begin, end) of unit u's params / m / v (each may be NULL) from whichever rank
// files hold them (pread of the overlapping chunks only, each chunk verified). Elements >= the
// unit's numel (padding) are set to 0. Errors: SLM_E_IO (missing / short file), SLM_E_CHECKSUM
// naming the file and chunk.
slm_status slm_ckpt_read_range(slm_ckpt *c, int unit, int64_t begin, int64_t end, float *params,
                               float *m, float *v);
// Checks that every rank file exists and has the size the manifest gives (no hashing).
// Errors: SLM_E_IO naming the file, both sizes.
slm_status slm_ckpt_check_files(slm_ckpt *c);
// Verifies every rank file: exists, size, whole-file XXH64 (and header). Errors name the file.
slm_status slm_ckpt_verify(slm_ckpt *c);
// Writes a human summary (step, config, files, sizes) to f.
void slm_ckpt_print_summary(const slm_ckpt *c, void *file);

// ---------------------------------------------------------------------------------------------
// Safetensors (https://huggingface.co/docs/safetensors): u64 LE header length N, N bytes of
// JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}} padded with
// spaces to a multiple of 8, then the data (offsets relative to its start, row-major LE).

// Tensor dtypes are base/'s slm_dtype (SLM_DTYPE_F32, SLM_DTYPE_F16, SLM_DTYPE_BF16), parsed by
// slm_dtype_parse.

// One tensor of an open safetensors file.
typedef struct slm_st_tensor {
    char name[128];
    slm_dtype dtype;
    int ndim;
    int64_t shape[4];
    int64_t numel;
    size_t begin, end; // data_offsets, bytes from the data start
} slm_st_tensor;

// A mapped safetensors file.
typedef struct slm_st_file {
    char *path; // owned
    slm_map map;
    bool owns_map;     // slm_st_open mapped it (slm_st_parse borrows)
    size_t data_start; // 8 + header length
    int n;
    slm_st_tensor *t; // [n], owned
} slm_st_file;

// Parses a safetensors image in memory: header bound, JSON, dtypes, shapes, offsets inside the
// data and not overlapping, data fully covered. `name` only labels messages. *f borrows
// `data`; release with slm_st_close (which unmaps only what slm_st_open mapped).
// Errors: SLM_E_FORMAT / SLM_E_UNSUPPORTED naming the file and the tensor.
slm_status slm_st_parse(const uint8_t *data, size_t len, const char *name, slm_st_file *f);
// Maps and parses a file. Free with slm_st_close.
slm_status slm_st_open(const char *path, slm_st_file *f);
void slm_st_close(slm_st_file *f);
// Converts tensor t to f32 into out[numel].
void slm_st_read_f32(const slm_st_file *f, const slm_st_tensor *t, float *out);

// Exports a model's weights as HF LlamaForCausalLM files in OUT_DIR: model.safetensors, or
// model-0000i-of-0000n.safetensors + model.safetensors.index.json when larger than
// max_shard_bytes (0: no limit); config.json. Weights are read from params[u]. Atomic per file.
// Errors: SLM_E_IO naming the file.
slm_status slm_hf_export(const slm_llama *m, const char *out_dir, slm_dtype dtype,
                         size_t max_shard_bytes);
// `ckpt export`: writes m's weights (slm_hf_export) and, if tokenizer_path is non-NULL, a copy
// of that file under its own name plus the transformers-side files
// (slm_hf_write_tokenizer_files) into a temp sibling of OUT_DIR, then swaps it in
// (slm_export_dir_commit); on any error the temp directory is removed and OUT_DIR is unchanged.
// SRC_DIR is where the weights came from. Errors: SLM_E_ARG when OUT_DIR is SRC_DIR or
// contains it (the swap would move the source), those of the steps, naming the file.
slm_status slm_hf_export_dir(const slm_llama *m, const char *src_dir, const char *tokenizer_path,
                             const char *out_dir, slm_dtype dtype, size_t max_shard_bytes);
// Exports m's LoRA adapters as a PEFT adapter directory in OUT_DIR: adapter_model.safetensors
// (PEFT's keys "base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight" [r, in] and
// ".lora_B.weight" [out, r], in `dtype`) and adapter_config.json (peft_type LORA, task_type
// CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules, base_model_name_or_path = base_ref),
// which peft.PeftModel.from_pretrained(base, OUT_DIR) loads. Errors: SLM_E_ARG without
// adapters, SLM_E_IO naming the file.
slm_status slm_peft_export(const slm_llama *m, const char *base_ref, const char *out_dir,
                           slm_dtype dtype);
// The same staged in a temp sibling and swapped in, as slm_hf_export_dir (SRC_DIR: where the
// adapters came from).
slm_status slm_peft_export_dir(const slm_llama *m, const char *src_dir, const char *base_ref,
                               const char *out_dir, slm_dtype dtype);
// Export staging (ckpt export): the files go into a hidden temp sibling of OUT_DIR,
// "<parent>/.<name>.export-tmp.<pid>", which slm_export_dir_begin creates (with OUT_DIR's
// parent; a stale one of the same name is removed) and returns in *tmp (owned). Errors: SLM_E_IO
// (OUT_DIR exists and is not a directory, or mkdir failed).
slm_status slm_export_dir_begin(const char *out_dir, char **tmp);
// Swaps the finished temp directory in (slm_publish_dir): tmp fsynced, an existing OUT_DIR
// renamed aside, tmp renamed to OUT_DIR and the parent fsynced; then the previous directory is
// retired: its HF weight files (model*.safetensors, model.safetensors.index.json), HF metadata
// (config.json, generation_config.json, tokenizer.json, tokenizer.model, tokenizer_config.json,
// special_tokens_map.json) and every name the new export also wrote are deleted, any other file
// (the user's own) is moved into the new OUT_DIR (if that fails the old directory is kept and named
// in a warning). So no file of an earlier export survives next to the new weights. Errors: SLM_E_IO
// naming the rename that failed (OUT_DIR then is unchanged).
slm_status slm_export_dir_commit(const char *tmp, const char *out_dir);
// Removes the temp directory and the plain files in it (after a failed export); NULL: no-op.
void slm_export_dir_abort(const char *tmp);
// Writes the transformers-side tokenizer files into OUT_DIR for the tokenizer at
// `tokenizer_path` (already copied there, left unchanged): bos/eos/pad_token_id added to
// OUT_DIR/config.json, generation_config.json (the same ids), special_tokens_map.json and
// tokenizer_config.json (LlamaTokenizerFast for tokenizer.json, LlamaTokenizer for
// tokenizer.model; add_bos_token true when the tokenizer has a BOS, as `shardlm generate`
// prepends it; model_max_length = max_positions). Errors: the tokenizer loader's, SLM_E_IO.
slm_status slm_hf_write_tokenizer_files(const char *out_dir, const char *tokenizer_path,
                                        int32_t max_positions);
// Loads HF weights from DIR (config.json + model.safetensors or model.safetensors.index.json)
// into an initialised model whose params are allocated: checks the config matches m->cfg, every
// expected tensor present once with the right shape and a float dtype (F32/F16/BF16), and no
// extra tensor (rotary inv_freq buffers are ignored). Errors name the file and tensor.
slm_status slm_hf_load(slm_llama *m, const char *dir);
// Checks an HF directory against `cfg` without reading any tensor data or allocating parameter
// buffers: config.json's shape fields equal cfg's, and the safetensors headers (index or
// model.safetensors) hold exactly the tensors the config implies, each with the config's shape.
// Call before slm_llama_init allocates (a vocab_size of 2^31-1, or an empty config.json whose
// defaults are Llama-2-7B, then fails naming the tensor instead of aborting on memory).
// Errors: SLM_E_ARG (configs differ), SLM_E_FORMAT naming file and tensor, SLM_E_IO.
slm_status slm_hf_check_shapes(const char *dir, const slm_llama_config *cfg);

// --- GGUF export (gguf_write.c) ----------------------------------------------------------------

// Parses an export --type: "f32" (or fp32), "f16" (fp16), "bf16", "q8_0" into the ggml tensor type
// (gguf_format.h numbers). Errors: SLM_E_ARG naming the accepted values.
slm_status slm_gguf_parse_type(const char *s, uint32_t *out);
// What slm_gguf_export writes besides the weights.
typedef struct slm_gguf_export_opts {
    const char *tokenizer_path; // the run's tokenizer file (required: a GGUF carries its vocab)
    const char *chat_template;  // Jinja text for tokenizer.chat_template, or NULL (none)
    const char *name;           // general.name, or NULL ("shardlm export")
    uint32_t type;              // ggml type of the matrices: F32, F16, BF16 or Q8_0
    bool overwrite;             // replace an existing OUT (else SLM_E_IO naming it)
} slm_gguf_export_opts;
// Writes m as one GGUF v3 file for llama.cpp (architecture "llama"; format and keys in
// docs/formats.md "GGUF export"): the config as llama.* keys, the tokenizer (byte-level BPE as
// tokenizer.ggml.model "gpt2" with tokens, token types, merges and the pre-tokenizer's name;
// SentencePiece as "llama" with tokens, scores and types; BOS / EOS / UNK / PAD ids), the chat
// template, and the tensors under llama.cpp's names with GGUF's fastest-first dimensions, the
// Q / K rows of each head reordered for llama.cpp's RoPE, norms in f32 and the matrices in
// o->type (Q8_0: blocks of 32, the smallest fp16 scale d with 127 d >= max|x|, so every element
// is within d/2; a row length not a multiple of 32 falls back to f16 with a warning). The file is
// written to "<dir>/.<name>.export-tmp.<pid>", fsynced, and published by
// renameat2(RENAME_NOREPLACE) (rename with o->overwrite), then the directory is fsynced: OUT is
// either absent / unchanged or complete. Errors: SLM_E_ARG (OUT a directory, OUT's directory
// missing (not created), no tokenizer, vocab larger than the model's, a q8_0 block above 127 x
// 65504), SLM_E_IO (OUT exists without overwrite, write failures, naming the file),
// SLM_E_UNSUPPORTED (a pre-tokenizer llama.cpp has no name for), the tokenizer loader's.
slm_status slm_gguf_export(const slm_llama *m, const char *out_path, const slm_gguf_export_opts *o);
// ---------------------------------------------------------------------------------------------
// GGUF (llama.cpp / ggml's file format; gguf_format.h and docs/formats.md "GGUF"): reading a
// mapped file's metadata and tensors, dequantized to fp32, and importing a `llama` model from it.

// One metadata key of an open GGUF file. `off` is the byte offset in the file of the value (of
// the first element for an array); `count` the element count (1 for a scalar).
typedef struct slm_gguf_kv {
    char *key;          // owned, NUL-terminated
    uint32_t type;      // slm_gguf_vtype (gguf_format.h)
    uint32_t elem_type; // arrays: the element type; else == type
    uint64_t count;
    size_t off;
} slm_gguf_kv;

// One tensor info. ne[] is GGUF's order: ne[0] varies fastest (HF's last dimension), so an HF
// weight [out, in] has ne = {in, out}; unused trailing dims are 1.
typedef struct slm_gguf_tensor {
    char name[128];
    uint32_t type; // ggml type (slm_gguf_ttype)
    int n_dims;
    int64_t ne[4];
    int64_t numel;
    uint64_t offset; // bytes from the start of the data section (a multiple of the alignment)
    size_t nbytes;
} slm_gguf_tensor;

// A parsed GGUF file (version 2 or 3, little-endian).
typedef struct slm_gguf_file {
    char *path; // owned
    slm_map map;
    bool owns_map; // slm_gguf_open mapped it (slm_gguf_parse borrows)
    uint32_t version, alignment;
    int64_t n_kv, n_tensors;
    slm_gguf_kv *kv;    // [n_kv] owned
    slm_gguf_tensor *t; // [n_tensors] owned
    size_t data_start;  // file offset of the data section
    size_t data_len;    // its bytes (to the end of the file)
} slm_gguf_file;

// Parses a GGUF image in memory: magic, version, counts against the bytes present, every key and
// value (array element types, string lengths; no arrays of arrays), general.alignment (uint32,
// a power of two), tensor infos (name unique and < 128 bytes, 1..4 dims, element count < 2^50,
// a type shardlm reads, first dim a multiple of the type's block), each tensor's bytes aligned,
// inside the data section and not overlapping another's. `name` labels messages; *f borrows
// data. Release with slm_gguf_close. Errors: SLM_E_FORMAT naming the file and the key or
// tensor with what was expected; SLM_E_UNSUPPORTED for a known ggml type shardlm does not
// dequantize (named) or GGUF version 1.
slm_status slm_gguf_parse(const uint8_t *data, size_t len, const char *name, slm_gguf_file *f);
// Maps and parses PATH. Errors: slm_map_file's, slm_gguf_parse's.
slm_status slm_gguf_open(const char *path, slm_gguf_file *f);
// Releases what f owns (unmaps only what slm_gguf_open mapped); safe on a zeroed struct.
void slm_gguf_close(slm_gguf_file *f);
// The key or tensor of that name, or NULL (borrowed from f).
const slm_gguf_kv *slm_gguf_find(const slm_gguf_file *f, const char *key);
const slm_gguf_tensor *slm_gguf_tensor_find(const slm_gguf_file *f, const char *name);
// Typed getters. With found != NULL a missing key is SLM_OK with *found false (*out unchanged);
// with found NULL it is SLM_E_FORMAT naming the key. A value of the wrong type is SLM_E_FORMAT
// naming the key, its type and the one expected.
//   int: any integer type, in [lo, hi] (else SLM_E_FORMAT naming the value and range)
//   float: float32 / float64 (or an integer)
//   str: *s points into the file, *len bytes, not NUL-terminated
slm_status slm_gguf_get_int(const slm_gguf_file *f, const char *key, int64_t lo, int64_t hi,
                            int64_t *out, bool *found);
slm_status slm_gguf_get_float(const slm_gguf_file *f, const char *key, double *out, bool *found);
slm_status slm_gguf_get_bool(const slm_gguf_file *f, const char *key, bool *out, bool *found);
slm_status slm_gguf_get_str(const slm_gguf_file *f, const char *key, const char **s, size_t *len,
                            bool *found);
// The array KEY with elements of elem_type in *out (NULL when the key is absent). Errors:
// SLM_E_FORMAT when KEY is not an array of elem_type.
slm_status slm_gguf_get_array(const slm_gguf_file *f, const char *key, uint32_t elem_type,
                              const slm_gguf_kv **out);
// The strings of a string array kv: s[i] / len[i] for i < kv->count (caller's arrays; pointers
// into the file, not NUL-terminated).
void slm_gguf_array_strings(const slm_gguf_file *f, const slm_gguf_kv *kv, const char **s,
                            size_t *len);
// Names of value types ("uint32") and ggml tensor types ("Q4_K"; "unknown" past the table).
const char *slm_gguf_vtype_name(uint32_t t);
const char *slm_ggml_type_name(uint32_t t);
// Dequantizes n elements (a multiple of the type's block size) of ggml type `type` (one
// slm_ggml_block_size returns non-zero for) from src into dst[n], exactly as ggml's
// dequantize_row_* (fp32 products in the same order).
void slm_gguf_dequant(uint32_t type, const uint8_t *src, int64_t n, float *dst);
// Tensor t of f dequantized into out[t->numel], in GGUF's element order.
void slm_gguf_read_f32(const slm_gguf_file *f, const slm_gguf_tensor *t, float *out);

// The `llama` architecture's metadata of f as a config: block_count, embedding_length,
// feed_forward_length, attention.head_count(_kv), context_length, layer_norm_rms_epsilon,
// rope.freq_base (default 10000), key_length / value_length (head dim), rope.dimension_count,
// RoPE scaling (none or linear: rope.scaling.type / .factor, or the older rope.scale_linear);
// vocab_size from token_embd.weight's rows (llama.vocab_size must agree); tied embeddings when
// output.weight is absent; initializer_range 0.02. Anything that changes the math and is not
// implemented (another architecture, yarn / llama3 RoPE scaling or rope_freqs.weight, partial
// rotary, experts, ALiBi, clamping, logit / embedding / residual scales, LayerNorm, ...) is
// SLM_E_UNSUPPORTED naming the key or tensor; other unknown llama.* keys are warned about.
// Errors: SLM_E_FORMAT naming a missing or mistyped key, slm_llama_config_validate's.
slm_status slm_gguf_llama_config(const slm_gguf_file *f, slm_llama_config *cfg);
// Checks, without reading tensor data or allocating parameters, that f holds exactly the
// tensors cfg implies (llama.cpp names, blk.N.attn_q.weight ...), each with cfg's shape in GGUF
// order. Errors: SLM_E_FORMAT naming the tensor and both shapes; SLM_E_UNSUPPORTED for a tensor
// shardlm's Llama has no place for (biases, ...).
slm_status slm_gguf_check_shapes(const slm_gguf_file *f, const slm_llama_config *cfg);
// Reads f's weights, dequantized to fp32, into an initialised model with allocated params
// whose config is f's (slm_gguf_llama_config; else SLM_E_ARG naming both), undoing llama.cpp's
// Q / K row permutation back to HF's rotate-half layout. Every weight is checked finite.
// Errors: those of slm_gguf_check_shapes, SLM_E_NUMERIC naming a non-finite weight.
slm_status slm_gguf_load(slm_llama *m, const slm_gguf_file *f);

// The tokenizer f carries, as the bytes of the shardlm tokenizer file it converts to, appended
// to out, and that file's name in *name (static; NULL allowed): tokenizer.ggml.model gpt2
// (tokens, token types, merges, the pre-tokenizer named by tokenizer.ggml.pre, BOS / EOS / pad
// ids, add_bos_token default false) -> tokenizer.json text (slm_tokenizer_vocab_json); llama
// (SentencePiece BPE: tokens, scores, token types, BOS / EOS / UNK / pad ids, add_bos_token
// default true, add_space_prefix default true) -> a tokenizer.model (slm_tokenizer_vocab_spm).
// Deterministic bytes (train --init-from-gguf compares their XXH64 with the dataset's).
// Errors: SLM_E_UNSUPPORTED naming tokenizer.ggml.model (another model), tokenizer.ggml.pre
// (an unknown pre-tokenizer) or tokenizer.ggml.add_eos_token (true: shardlm never appends EOS
// by default); SLM_E_FORMAT naming the file and a missing, mistyped or inconsistent key (scores
// or types not one per token, a token type outside 1..6, an empty token, ...).
slm_status slm_gguf_tokenizer_file(const slm_gguf_file *f, slm_buf *out, const char **name);
// Writes that tokenizer as DIR/tokenizer.json or DIR/tokenizer.model (atomically), loads it
// back once, and returns the path in *path (owned). Errors: those of slm_gguf_tokenizer_file,
// SLM_E_IO, the loader's.
slm_status slm_gguf_write_tokenizer(const slm_gguf_file *f, const char *dir, char **path);
// The built-in chat template ("chatml", "llama3", "llama2") whose markers the Jinja text in
// tokenizer.chat_template writes; NULL when none matches or the key is absent (*present says
// which).
const char *slm_gguf_chat_template(const slm_gguf_file *f, bool *present);

#endif
