// shardlm train: option parsing for slm_train_run (src/train/train.h).
#include <math.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd.h"
#include "data/data.h"
#include "dist/dist.h"
#include "objstore/objstore.h"
#include "train/train.h"

// Parsed command line: the library's options plus the values that need a step after parsing.
typedef struct train_args {
    slm_train_opts o;
    bool no_prefetch;
    int on_ckpt_error; // index into k_ckpt_error
    int on_nonfinite;  // index into k_nonfinite
    int64_t seed;
    double progress_us;
    bool quiet;
    const char *s3_endpoint, *s3_region;
} train_args;

static slm_status parse_sharding(const char *opt, const char *v, void *dst) {
    (void)opt;
    return slm_sharding_parse(v, dst);
}

static slm_status parse_precision(const char *opt, const char *v, void *dst) {
    return slm_precision_parse(opt, v, dst);
}

static slm_status parse_lora_targets(const char *opt, const char *v, void *dst) {
    (void)opt;
    return slm_lora_parse_targets(v, dst);
}

static const char *const k_ckpt_error[] = {"continue", "abort", NULL};
static const char *const k_nonfinite[] = {"abort", "skip", NULL};

#define A(f) offsetof(train_args, f)
#define INF INFINITY
// ranges: integers [ilo, ihi]; reals by dlo / dhi and SLM_OPTF_LO_OPEN / HI_OPEN. Every train
// option is compared across ranks by slm_train_agree (src/train/agree.c) unless PER_RANK.
static const slm_opt k_train_opts[] = {
    {.name = "--data",
     .type = SLM_OPT_STRING,
     .off = A(o.data_dir),
     .meta = "DIR",
     .help = "prepared dataset (manifest.json, shards, tokenizer)"},
    {.name = "--synthetic",
     .type = SLM_OPT_FLAG,
     .off = A(o.synthetic),
     .help = "uniform random tokens instead of --data (benchmarks); --out is optional with it "
             "(nothing is saved without)"},
    {.name = "--model",
     .type = SLM_OPT_STRING,
     .off = A(o.model),
     .meta = "SPEC",
     .help = "preset (tiny, small, gqa, ...) or HF config.json"},
    {.name = "--vocab-size",
     .type = SLM_OPT_INT,
     .off = A(o.vocab_size),
     .meta = "V",
     .help = "override the model's vocab_size (must match the data)",
     .ilo = 1,
     .ihi = INT32_MAX,
     .flags = SLM_OPTF_NODEF},
    {.name = "--batch",
     .type = SLM_OPT_INT,
     .off = A(o.B),
     .meta = "B",
     .help = "sequences per micro-batch",
     .ilo = 1,
     .ihi = 1 << 20,
     .flags = SLM_OPTF_NODEF},
    {.name = "--seq",
     .type = SLM_OPT_INT,
     .off = A(o.T),
     .meta = "T",
     .help = "tokens per sequence (<= max_position_embeddings)",
     .ilo = 1,
     .ihi = 1 << 24,
     .flags = SLM_OPTF_NODEF},
    {.name = "--grad-accum",
     .type = SLM_OPT_INT,
     .off = A(o.grad_accum),
     .meta = "K",
     .help = "micro-batches per optimizer step",
     .ilo = 1,
     .ihi = 1 << 20},
    {.name = "--steps",
     .type = SLM_OPT_INT64,
     .off = A(o.steps),
     .meta = "N",
     .help = "optimizer steps (length of the cosine schedule)",
     .ilo = 1,
     .ihi = INT64_MAX / 2,
     .flags = SLM_OPTF_NODEF},
    {.name = "--lr",
     .type = SLM_OPT_FLOAT,
     .off = A(o.adamw.lr_peak),
     .meta = "LR",
     .help = "peak learning rate",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN},
    {.name = "--min-lr",
     .type = SLM_OPT_FLOAT,
     .off = A(o.min_lr),
     .meta = "LR",
     .help = "floor of the cosine decay, at most --lr",
     .dlo = 0,
     .dhi = INF,
     .def = "lr/10"},
    {.name = "--warmup",
     .type = SLM_OPT_INT64,
     .off = A(o.warmup),
     .meta = "W",
     .help = "linear warmup steps",
     .ilo = 0,
     .ihi = INT64_MAX / 2},
    {.name = "--weight-decay",
     .type = SLM_OPT_FLOAT,
     .off = A(o.adamw.weight_decay),
     .meta = "WD",
     .help = "AdamW decoupled weight decay on matmul weights",
     .dlo = 0,
     .dhi = INF},
    {.name = "--beta1",
     .type = SLM_OPT_FLOAT,
     .off = A(o.adamw.beta1),
     .meta = "B1",
     .help = "AdamW beta1",
     .dlo = 0,
     .dhi = 1,
     .flags = SLM_OPTF_HI_OPEN},
    {.name = "--beta2",
     .type = SLM_OPT_FLOAT,
     .off = A(o.adamw.beta2),
     .meta = "B2",
     .help = "AdamW beta2",
     .dlo = 0,
     .dhi = 1,
     .flags = SLM_OPTF_HI_OPEN},
    {.name = "--eps",
     .type = SLM_OPT_FLOAT,
     .off = A(o.adamw.eps),
     .meta = "E",
     .help = "AdamW epsilon",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN},
    {.name = "--grad-clip",
     .type = SLM_OPT_FLOAT,
     .off = A(o.grad_clip),
     .meta = "G",
     .help = "max global gradient norm, 0 disables",
     .dlo = 0,
     .dhi = INF,
     .range = ">= 0 and finite (0 = off)"},
    {.name = "--seed",
     .type = SLM_OPT_INT64,
     .off = A(seed),
     .meta = "S",
     .help = "weight init and data order",
     .ilo = 0,
     .ihi = INT64_MAX},
    {.name = "--eval-every",
     .type = SLM_OPT_INT64,
     .off = A(o.eval_every),
     .meta = "K",
     .help = "validation loss every K steps and at the end, 0 = off",
     .ilo = 0,
     .ihi = INT64_MAX / 2},
    {.name = "--eval-batches",
     .type = SLM_OPT_INT,
     .off = A(o.eval_batches),
     .meta = "M",
     .help = "validation batches of B sequences, 0 = all",
     .ilo = 0,
     .ihi = 1 << 30},
    {.name = "--activation-checkpointing",
     .type = SLM_OPT_FLAG,
     .off = A(o.activation_checkpointing),
     .help = "recompute block activations in backward"},
    {.name = "--threads",
     .type = SLM_OPT_INT,
     .off = A(o.threads),
     .meta = "N",
     .help = "OpenMP and BLAS threads",
     .ilo = 1,
     .ihi = 4096,
     .def = "environment",
     .flags = SLM_OPTF_PER_RANK},
    {.name = "--max-minutes",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.max_minutes),
     .meta = "M",
     .help = "stop and save after M minutes of training",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32 | SLM_OPTF_NODEF},
    {.name = "--time-schedule",
     .type = SLM_OPT_FLAG,
     .off = A(o.time_schedule),
     .help = "with --max-minutes: the LR schedule follows the share of the time budget spent "
             "when that is ahead of step/steps"},
    {.name = "--peak-gflops",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.peak_gflops),
     .meta = "G",
     .help = "MFU denominator",
     .dlo = 0,
     .dhi = INF,
     .def = "measured sgemm peak",
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32 | SLM_OPTF_PER_RANK},
    {.name = "--log-every",
     .type = SLM_OPT_INT,
     .off = A(o.log_every),
     .meta = "K",
     .help = "step line every K steps",
     .ilo = 0,
     .ihi = 1 << 30,
     .flags = SLM_OPTF_PER_RANK},
    {.name = "--quiet",
     .type = SLM_OPT_FLAG,
     .off = A(quiet),
     .help = "no progress line (rank 0, stderr: step, tokens/s, ETA to the last step; "
             "checkpoint load); step lines and logs stay",
     .flags = SLM_OPTF_PER_RANK},
    {.type = SLM_OPT_SECTION,
     .help = "  under mpirun -np N (data parallel, FSDP; docs/cluster.md, docs/scaling.md):"},
    {.name = "--sharding",
     .type = SLM_OPT_CUSTOM,
     .off = A(o.fsdp.sharding),
     .meta = "S",
     .help = "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD (any case)",
     .parse = parse_sharding,
     .def = "FULL_SHARD"},
    {.name = "--shard-group-size",
     .type = SLM_OPT_INT,
     .off = A(o.fsdp.shard_group_size),
     .meta = "G",
     .help = "HYBRID_SHARD: shard within groups of G consecutive ranks",
     .ilo = 1,
     .ihi = 1 << 20,
     .flags = SLM_OPTF_NODEF},
    {.name = "--param-dtype",
     .type = SLM_OPT_CUSTOM,
     .off = A(o.fsdp.param_dtype),
     .meta = "D",
     .help = "fp32 or bf16: dtype of all-gathered parameters",
     .parse = parse_precision,
     .def = "fp32"},
    {.name = "--reduce-dtype",
     .type = SLM_OPT_CUSTOM,
     .off = A(o.fsdp.reduce_dtype),
     .meta = "D",
     .help = "fp32 or bf16: dtype of gradient communication",
     .parse = parse_precision,
     .def = "fp32"},
    {.name = "--limit-all-gathers",
     .type = SLM_OPT_INT,
     .off = A(o.fsdp.limit_all_gathers),
     .meta = "K",
     .help = "units gathered or in flight for prefetch",
     .ilo = 0,
     .ihi = 1 << 20},
    {.name = "--no-prefetch",
     .type = SLM_OPT_FLAG,
     .off = A(no_prefetch),
     .help = "no forward / backward prefetch of the next unit"},
    {.name = "--collective-timeout",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.collective_timeout_s),
     .meta = "S",
     .help = "abort the whole job (MPI_Abort, naming the op, step and group) when one "
             "collective waits more than S seconds. It bounds the wait for the slowest rank, so "
             "at scale keep it above the longest legitimate wait: the first step, a validation "
             "pass, a checkpoint commit, start-up on a slow file system",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32,
     .range = "> 0 seconds and finite"},
    {.name = "--progress-thread",
     .type = SLM_OPT_DOUBLE,
     .off = A(progress_us),
     .meta = "US",
     .help = "with world > 1 a thread polls MPI every US microseconds so all-gathers / "
             "reduce-scatters progress during compute (MPI_THREAD_MULTIPLE; try 100)",
     .dlo = 0,
     .dhi = 1e6,
     .flags = SLM_OPTF_HI_OPEN | SLM_OPTF_F32 | SLM_OPTF_PER_RANK,
     .range = "in [0, 1e6) microseconds",
     .def = "0 = off"},
    {.name = "--simulate-compute",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.simulate_gflops),
     .meta = "GFLOPS",
     .help = "emulation (bench/scaling/, docs/scaling.md): every collective real, each unit's "
             "forward / backward arithmetic replaced by a wait of its FLOPs / GFLOPS; losses are "
             "meaningless and not printed, the step line shows step time, simulated compute and "
             "exposed communication",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32 | SLM_OPTF_NODEF,
     .range = "> 0 GFLOP/s and finite"},
    {.type = SLM_OPT_SECTION, .help = "  Prometheus metrics (docs/observability.md):"},
    {.name = "--metrics-addr",
     .type = SLM_OPT_CUSTOM,
     .off = A(o.metrics.addr),
     .meta = "HOST:PORT",
     .help = "rank 0 serves /metrics (Prometheus text format) on HOST:PORT; :PORT listens on "
             "127.0.0.1, PORT 0 picks a free port (logged)",
     .parse = slm_opt_parse_metrics_addr,
     .def = "off",
     .flags = SLM_OPTF_PER_RANK},
    {.name = "--metrics-all-ranks",
     .type = SLM_OPT_FLAG,
     .off = A(o.metrics.all_ranks),
     .help = "every rank given --metrics-addr serves its own /metrics, on PORT + rank (PORT "
             "0: a free port each)",
     .flags = SLM_OPTF_PER_RANK},
    {.name = "--metrics-every",
     .type = SLM_OPT_INT,
     .off = A(o.metrics.every),
     .meta = "N",
     .help = "gather the per-rank metrics (memory, CPU, busy time, stragglers) to rank 0 every "
             "N steps",
     .ilo = 1,
     .ihi = 1 << 30},
    {.name = "--straggler-factor",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.metrics.straggler_factor),
     .meta = "F",
     .help = "a rank whose busy time per step (iteration wall time minus collective waits) "
             "exceeds F x the median of the ranks, and the median by 10 ms, ...",
     .dlo = 1,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32},
    {.name = "--straggler-windows",
     .type = SLM_OPT_INT,
     .off = A(o.metrics.straggler_windows),
     .meta = "K",
     .help = "... in K gathers in a row is a straggler (logged, counted in "
             "shardlm_straggler_events_total)",
     .ilo = 1,
     .ihi = 1 << 20},
    {.type = SLM_OPT_SECTION, .help = "  run directory, checkpoints and resume:"},
    {.name = "--out",
     .type = SLM_OPT_STRING,
     .off = A(o.out_dir),
     .meta = "RUN_DIR",
     .help = "run directory: config.json, tokenizer, metrics.jsonl, checkpoints/ (the "
             "weights; always one at the end / stop), run.lock (one run at a time); a non-empty "
             "directory that is not a run directory is refused"},
    {.name = "--ckpt-every-steps",
     .type = SLM_OPT_INT64,
     .off = A(o.ckpt_every_steps),
     .meta = "N",
     .help = "also checkpoint every N steps (asynchronous by default), 0 = off",
     .ilo = 0,
     .ihi = INT64_MAX / 2},
    {.name = "--ckpt-every-minutes",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.ckpt_every_minutes),
     .meta = "M",
     .help = "also checkpoint every M minutes",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_F32,
     .range = ">= 0 and finite (0 = off)"},
    {.name = "--ckpt-keep",
     .type = SLM_OPT_INT,
     .off = A(o.ckpt_keep),
     .meta = "K",
     .help = "keep the K newest checkpoints, 0 = all",
     .ilo = 0,
     .ihi = 1 << 30},
    {.name = "--ckpt-sync",
     .type = SLM_OPT_FLAG,
     .off = A(o.ckpt_sync),
     .help = "write checkpoints on the training thread (no overlap)"},
    {.name = "--on-ckpt-error",
     .type = SLM_OPT_ENUM,
     .off = A(on_ckpt_error),
     .meta = "WHAT",
     .help = "a failed save is logged (continue) or fatal (abort)",
     .choices = k_ckpt_error},
    {.name = "--resume",
     .type = SLM_OPT_STRING,
     .off = A(o.resume),
     .meta = "auto|PATH",
     .help = "continue bitwise from RUN_DIR's newest checkpoint that verifies (auto: if any; "
             "`latest` is only a hint, a bad newest one falls back to the previous with a "
             "warning) or from a checkpoint PATH"},
    {.name = "--no-packing",
     .type = SLM_OPT_FLAG,
     .off = A(o.no_packing),
     .help = "instruction data (prep --format prompt-completion|chat): one sample per window, "
             "padded, instead of packing several per window (each attends only to itself "
             "either way; loss on completion / assistant tokens only); on a plain dataset it "
             "has no effect and is warned about"},
    {.name = "--verify-on-resume",
     .type = SLM_OPT_FLAG,
     .off = A(o.verify_on_resume),
     .help = "also check every checkpoint file's XXH64 before resuming (default: manifest and "
             "file sizes)"},
    {.name = "--allow-batch-change",
     .type = SLM_OPT_FLAG,
     .off = A(o.allow_batch_change),
     .help = "resume at another global batch (--batch x ranks x --grad-accum) than the "
             "checkpoint's, with a warning (default: refused, exit 2, naming the --grad-accum "
             "that keeps it; another world size with the same global batch needs no flag; "
             "--seq must always match)"},
    {.name = "--train-from-scratch",
     .type = SLM_OPT_FLAG,
     .off = A(o.train_from_scratch),
     .help = "RUN_DIR holds checkpoints of an earlier run: move them to "
             "RUN_DIR/checkpoints.replaced-DATE with the run's metrics.jsonl, config.json and "
             "tokenizer (nothing is deleted) and train from a seeded init; without it such a "
             "run is refused"},
    {.name = "--init-from-hf",
     .type = SLM_OPT_STRING,
     .off = A(o.init_from_hf),
     .meta = "DIR",
     .help = "initial weights from a Hugging Face safetensors directory (not with --resume "
             "PATH; with --resume auto only while RUN_DIR has no checkpoint)"},
    {.name = "--init-from-gguf",
     .type = SLM_OPT_STRING,
     .off = A(o.init_from_gguf),
     .meta = "FILE",
     .help = "initial weights from a llama.cpp GGUF file (llama architecture; dequantized to "
             "fp32); --model is the file (its metadata is the config; another --model is refused); "
             "prepare the data "
             "with its tokenizer (shardlm tokenizer from-gguf); as --init-from-hf otherwise"},
    {.type = SLM_OPT_SECTION,
     .help = "  LoRA fine-tuning (Hu et al. 2021, PEFT's arithmetic; docs/training.md):"},
    {.name = "--lora-rank",
     .type = SLM_OPT_INT,
     .off = A(o.lora.rank),
     .meta = "R",
     .help = "train rank-R adapters on the --lora-targets projections of the frozen "
             "--init-from-hf base (needs --init-from-hf); checkpoints hold the adapters only",
     .ilo = 1,
     .ihi = 1 << 16,
     .flags = SLM_OPTF_NODEF},
    {.name = "--lora-alpha",
     .type = SLM_OPT_FLOAT,
     .off = A(o.lora.alpha),
     .meta = "A",
     .help = "adapter scale alpha / R",
     .dlo = 0,
     .dhi = INF,
     .def = "2 x R",
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32},
    {.name = "--lora-dropout",
     .type = SLM_OPT_FLOAT,
     .off = A(o.lora.dropout),
     .meta = "P",
     .help = "dropout on the adapter input while training",
     .dlo = 0,
     .dhi = 1,
     .flags = SLM_OPTF_HI_OPEN | SLM_OPTF_F32},
    {.name = "--lora-targets",
     .type = SLM_OPT_CUSTOM,
     .off = A(o.lora.targets),
     .meta = "LIST",
     .help = "comma-separated projections among q_proj, k_proj, v_proj, o_proj, gate_proj, "
             "up_proj, down_proj, or all",
     .parse = parse_lora_targets,
     .def = "q_proj,v_proj"},
    {.type = SLM_OPT_SECTION, .help = "  operations (docs/operations.md):"},
    {.name = "--heartbeat-dir",
     .type = SLM_OPT_STRING,
     .off = A(o.heartbeat_dir),
     .meta = "DIR",
     .help = "every rank atomically replaces DIR/rank_RRRRR.json (rank, pid, host, step, unix "
             "time, loss, phase) at start, after each step and at the end, for a supervisor "
             "(shardlm launch passes RUN_DIR/heartbeat)"},
    {.name = "--preempt-grace",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.preempt_grace_s),
     .meta = "S",
     .help = "SIGTERM / SIGUSR1 (preemption): finish the current micro-batch, commit a "
             "checkpoint and exit 75; a save that took longer than S seconds after the signal "
             "is logged as a warning (set S to the scheduler's grace period)",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32,
     .range = "> 0 seconds and finite"},
    {.name = "--on-nonfinite",
     .type = SLM_OPT_ENUM,
     .off = A(on_nonfinite),
     .meta = "WHAT",
     .help = "a step whose loss or global gradient norm is NaN / inf stops the run (abort, exit "
             "1) or is skipped on every rank (skip: no update, weights and AdamW moments "
             "unchanged; the batch is consumed, counted in the log and metrics.jsonl)",
     .choices = k_nonfinite},
    {.name = "--max-nonfinite-skips",
     .type = SLM_OPT_INT,
     .off = A(o.max_nonfinite_skips),
     .meta = "K",
     .help = "with --on-nonfinite skip: more than K skipped steps in a row stop the run (exit 1)",
     .ilo = 0,
     .ihi = 1 << 30},
    {.name = "--loss-spike-window",
     .type = SLM_OPT_INT,
     .off = A(o.spike_window),
     .meta = "N",
     .help = "loss-spike detector: z-score of each step's loss against the previous N steps' "
             "losses (0 = off; else N >= 8: a smaller window flags ordinary noise)",
     .ilo = 0,
     .ihi = 1 << 20},
    {.name = "--loss-spike-z",
     .type = SLM_OPT_DOUBLE,
     .off = A(o.spike_z),
     .meta = "Z",
     .help = "a loss more than Z standard deviations above the window's mean is logged as a "
             "warning naming the step",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32,
     .range = "> 0 and finite"},
    {.name = "--snapshot-every-steps",
     .type = SLM_OPT_INT64,
     .off = A(o.snapshot_every_steps),
     .meta = "N",
     .help = "also keep the newest state every N steps in node-local shared memory (checkpoint "
             "format, synchronous); --resume auto prefers it when it is newer than the disk "
             "checkpoint and verifies (one host, same world and model), 0 = off",
     .ilo = 0,
     .ihi = INT64_MAX / 2},
    {.name = "--snapshot-dir",
     .type = SLM_OPT_STRING,
     .off = A(o.snapshot_dir),
     .meta = "DIR",
     .help = "where the snapshots go (a tmpfs; a new or empty directory, or this run's own: "
             "refused when it holds other files or another run's snapshots)",
     .def = "/dev/shm/shardlm-<XXH64 of the absolute --out>"},
    {.type = SLM_OPT_SECTION, .help = "  object storage (S3; docs/storage.md):"},
    {.name = "--ckpt-uri",
     .type = SLM_OPT_STRING,
     .off = A(o.ckpt_uri),
     .meta = "s3://BUCKET/PREFIX/",
     .help = "also upload every committed checkpoint there in the background (one uploader per "
             "host; manifest, then `latest`, last; --ckpt-keep applies remotely); --resume auto "
             "then picks the newest complete of RUN_DIR and the prefix (an empty disk resumes "
             "from S3 alone); --resume s3://... reads a remote checkpoint directly"},
    {.name = "--s3-prefix-shards",
     .type = SLM_OPT_INT,
     .off = A(o.s3_prefix_shards),
     .meta = "K",
     .help = "spread the rank files over K prefixes (PREFIX/sKK/...; S3 rate limits are per "
             "prefix), recorded in the remote manifest",
     .ilo = 1,
     .ihi = 100,
     .def = "1"},
    {.name = "--data-cache",
     .type = SLM_OPT_STRING,
     .off = A(o.data_cache),
     .meta = "DIR",
     .help = "with --data s3://...: the local copy the loader maps (objects streamed in large "
             "range GETs, XXH64-checked; verified files are reused; node-local NVMe is the place)",
     .def = "$TMPDIR/shardlm-data-HASH"},
    {.name = "--s3-endpoint",
     .type = SLM_OPT_STRING,
     .off = A(s3_endpoint),
     .meta = "URL",
     .help = "S3 endpoint (http[s]://HOST[:PORT]; default AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, "
             "the profile's endpoint_url, else AWS for the region)"},
    {.name = "--s3-region",
     .type = SLM_OPT_STRING,
     .off = A(s3_region),
     .meta = "REGION",
     .help = "S3 signing region (default AWS_REGION, AWS_DEFAULT_REGION, the profile's, else "
             "us-east-1)"},
    {.type = SLM_OPT_END},
};
#undef A
#undef INF

static void train_footer(FILE *f);

static const slm_cli k_train_cli = {
    .cmd = "train",
    .usage = "usage: shardlm train --data DIR --model PRESET|config.json --batch B --seq T\n"
             "                     --steps N --out RUN_DIR [options]\n"
             "Trains a Llama model from a seeded init on a prepared dataset (shardlm prep).\n"
             "Options (range; default):\n",
    .opts = k_train_opts,
    .footer_fn = train_footer, // names the per-rank options from the table
};

const slm_cli *slm_train_cli(void) {
    return &k_train_cli;
}

// The agreement rule of --help, naming the table's per-rank options.
static void train_footer(FILE *f) {
    char text[1024];
    size_t len = (size_t)snprintf(
        text, sizeof text, "Under mpirun every rank must be given the same options (all but");
    int n = 0, total = 0;
    for (const slm_opt *o = k_train_opts; o->type != SLM_OPT_END; o++)
        total += (o->flags & SLM_OPTF_PER_RANK) != 0;
    for (const slm_opt *o = k_train_opts; o->type != SLM_OPT_END && len < sizeof text; o++)
        if (o->flags & SLM_OPTF_PER_RANK) {
            len += (size_t)snprintf(text + len, sizeof text - len, "%s %s",
                                    n == 0           ? ""
                                    : n + 1 == total ? " and"
                                                     : ",",
                                    o->name);
            n++;
        }
    if (len < sizeof text)
        snprintf(text + len, sizeof text - len,
                 "): they are compared first and a difference stops every rank, naming the "
                 "option and the ranks (exit 2; 1 when only the dataset's or model config's file "
                 "contents differ between ranks).");
    fputc('\n', f);
    slm_opt_wrap(f, text, 0, 0, 96);
    fprintf(f, "\nexit codes: 0 done, 1 runtime error (data, I/O, NaN, interrupted by SIGINT), 2 "
               "usage error, 75 preempted (SIGTERM / SIGUSR1: checkpoint committed, resume with "
               "--resume auto)\n");
}

// True when paths a and b name the same existing file (or are the same string).
static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!strcmp(a, b)) return true;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

// Checks between options, after parsing; SLM_EXIT_USAGE after the message, -1 when fine.
static int train_check(const train_args *t, const slm_opt_seen *seen) {
    const slm_train_opts *o = &t->o;
    const slm_cli *cli = &k_train_cli;
    if (o->init_from_hf && slm_is_gguf_file(o->init_from_hf)) {
        slm_error("train: --init-from-hf %s: a GGUF file, not a Hugging Face directory; give it "
                  "as --init-from-gguf",
                  o->init_from_hf);
        return SLM_EXIT_USAGE;
    }
    if (o->init_from_hf && o->init_from_gguf) {
        slm_error("train: --init-from-hf and --init-from-gguf exclude each other");
        return SLM_EXIT_USAGE;
    }
    if (o->init_from_gguf && o->lora.rank > 0) {
        slm_error("train: --lora-rank with --init-from-gguf is not supported (LoRA checkpoints "
                  "record a Hugging Face base directory)");
        return SLM_EXIT_USAGE;
    }
    if (o->init_from_gguf && o->resume && strcmp(o->resume, "auto") != 0) {
        slm_error("train: --init-from-gguf %s and --resume %s conflict (a checkpoint carries its "
                  "own weights)",
                  o->init_from_gguf, o->resume);
        return SLM_EXIT_USAGE;
    }
    if (o->init_from_hf && o->resume && strcmp(o->resume, "auto") != 0) {
        // The checkpoint holds the weights: one of the two would be ignored.
        slm_error("train: --init-from-hf %s and --resume %s conflict (a checkpoint carries its "
                  "own weights); give one (--resume auto with --init-from-hf starts from the HF "
                  "weights only while RUN_DIR has no checkpoint)",
                  o->init_from_hf, o->resume);
        return SLM_EXIT_USAGE;
    }
    if (o->init_from_gguf && slm_opt_given(cli, seen, "--model") &&
        !same_file(o->model, o->init_from_gguf)) {
        slm_error("train: --model %s and --init-from-gguf %s exclude each other (the GGUF file "
                  "carries the model's shape; leave out --model)",
                  o->model, o->init_from_gguf);
        return SLM_EXIT_USAGE;
    }
    char miss[96] = ""; // what is missing, each as ", --opt"
    if (!o->model) strcat(miss, ", --model");
    if (!slm_opt_given(cli, seen, "--batch")) strcat(miss, ", --batch");
    if (!slm_opt_given(cli, seen, "--seq")) strcat(miss, ", --seq");
    if (!slm_opt_given(cli, seen, "--steps")) strcat(miss, ", --steps");
    if (!o->data_dir && !o->synthetic) strcat(miss, ", --data (or --synthetic)");
    if (miss[0]) {
        slm_error("train: missing %s (required: --model or --init-from-gguf, --batch, --seq, "
                  "--steps and --data or --synthetic)",
                  miss + 2);
        slm_opt_help(stderr, cli, NULL);
        return SLM_EXIT_USAGE;
    }
    if (o->synthetic && o->data_dir) {
        slm_error("train: --synthetic and --data exclude each other (synthetic tokens replace "
                  "the dataset)");
        return SLM_EXIT_USAGE;
    }
    if (!o->out_dir && !o->synthetic) {
        slm_error("train: --out RUN_DIR is required (only --synthetic runs may omit it; they "
                  "save nothing)");
        return SLM_EXIT_USAGE;
    }
    if (o->train_from_scratch && o->resume) {
        slm_error("train: --train-from-scratch and --resume exclude each other");
        return SLM_EXIT_USAGE;
    }
    if ((o->train_from_scratch || o->verify_on_resume) && !o->out_dir) {
        slm_error("train: %s needs --out RUN_DIR",
                  o->train_from_scratch ? "--train-from-scratch" : "--verify-on-resume");
        return SLM_EXIT_USAGE;
    }
    if (o->spike_window != 0 && o->spike_window < SLM_SPIKE_WINDOW_MIN) {
        slm_error("train: --loss-spike-window %d: must be 0 (off) or at least %d (fewer losses "
                  "give a standard deviation too noisy to judge a spike by)",
                  o->spike_window, SLM_SPIKE_WINDOW_MIN);
        return SLM_EXIT_USAGE;
    }
    bool lora_opt = slm_opt_given(cli, seen, "--lora-alpha") ||
                    slm_opt_given(cli, seen, "--lora-dropout") ||
                    slm_opt_given(cli, seen, "--lora-targets");
    if (lora_opt && o->lora.rank < 1) {
        slm_error("train: --lora-alpha, --lora-dropout and --lora-targets need --lora-rank R");
        return SLM_EXIT_USAGE;
    }
    if (o->lora.rank > 0 && !o->init_from_hf) {
        slm_error("train: --lora-rank trains adapters on a frozen base: give the base with "
                  "--init-from-hf DIR");
        return SLM_EXIT_USAGE;
    }
    if ((o->snapshot_every_steps > 0 || o->snapshot_dir) && !o->out_dir) {
        slm_error("train: --snapshot-every-steps / --snapshot-dir need --out RUN_DIR");
        return SLM_EXIT_USAGE;
    }
    if (o->ckpt_uri && (!o->out_dir || !slm_s3_is_uri(o->ckpt_uri))) {
        slm_error("train: --ckpt-uri %s: %s", o->ckpt_uri,
                  !o->out_dir
                      ? "needs --out RUN_DIR (checkpoints commit locally first, then upload)"
                      : "expected s3://BUCKET/PREFIX/");
        return SLM_EXIT_USAGE;
    }
    if (o->min_lr > o->adamw.lr_peak) {
        slm_error("train: --min-lr %g: must be in [0, lr] = [0, %g]", (double)o->min_lr,
                  (double)o->adamw.lr_peak);
        return SLM_EXIT_USAGE;
    }
    return -1;
}

// What the step-line hook keeps: the options and rank 0's progress bar.
typedef struct step_printer {
    const slm_train_opts *o;
    slm_progress pg;
    bool begun;
    double frac;        // the share of the run done at the last step (progress_frac)
    int64_t first_step; // the first step this process trained (its tokens/s count from it)
} step_printer;

// What a training validation loss is over: --eval-batches batches of --batch windows per rank
// from the val split's start (trainer.c validate), or the whole split (--eval-batches 0).
static void val_over(const slm_train_opts *o, char *buf, size_t n) {
    if (o->eval_batches <= 0)
        snprintf(buf, n, "whole val split");
    else
        snprintf(buf, n, "first %lld val windows",
                 (long long)o->eval_batches * slm_dist_world() * o->B);
}

// The share of the run done after `step` at `elapsed_s`: steps over --steps, or, with
// --max-minutes, whichever is further along of that and the time budget spent (training stops
// at the budget: a 13.5-minute run ends at 100%, not at the 66% of its step count).
static double progress_frac(const slm_train_opts *o, double step, double total, double elapsed_s) {
    double f = total > 0 ? step / total : 0;
    if (o->max_minutes > 0 && elapsed_s / (o->max_minutes * 60.0) > f)
        f = elapsed_s / (o->max_minutes * 60.0);
    return f < 1 ? f : 1;
}

// Rank 0's progress line (stderr): step, tokens/s, loss, and the ETA at the mean rate of this
// process so far, in shares of the run (progress_frac): the step-count ETA, or with
// --max-minutes the sooner of it and the budget's end.
static void progress_step(step_printer *sp, const slm_step_metrics *m) {
    double tot = (double)m->total_steps;
    sp->frac = progress_frac(sp->o, (double)m->step, tot, m->elapsed_s);
    if (!sp->begun) { // the clock starts with the step just done
        slm_progress_begin(
            &sp->pg, "train",
            progress_frac(sp->o, (double)m->step - 1, tot, m->elapsed_s - m->ms_per_step / 1e3),
            1.0);
        sp->pg.t0 -= m->ms_per_step / 1e3;
        sp->first_step = m->step;
        sp->begun = true;
    }
    char tps[32];
    double dt = slm_time_s() - sp->pg.t0;
    double rate = dt > 0 && sp->first_step > 0 ? (double)m->tokens_seen / (double)m->step *
                                                     (double)(m->step - sp->first_step + 1) / dt
                                               : NAN;
    snprintf(tps, sizeof tps, isfinite(rate) ? "%.0f" : "?", rate);
    slm_progress_update(&sp->pg, sp->frac, "step %lld/%lld, %s tok/s, loss %.4f",
                        (long long)m->step, (long long)m->total_steps, tps, m->loss);
}

// The step line on stdout (rank 0, every log_every steps, the first and last, and any step with
// a validation), and the validation of an early stop at the end.
static void print_step(void *ctx, const slm_step_metrics *m) {
    step_printer *sp = ctx;
    const slm_train_opts *o = sp->o;
    bool last = m->step == o->steps;
    if (slm_dist_rank() != 0) return;
    if (o->log_every <= 0 ||
        !(m->step % o->log_every == 0 || last || m->step == 1 || isfinite(m->val_loss))) {
        progress_step(sp, m);
        return;
    }
    char line[320], val[128] = "", over[64];
    val_over(o, over, sizeof over);
    if (isfinite(m->val_loss))
        snprintf(val, sizeof val, " | val loss %.4f (%s)", m->val_loss, over);
    if (m->skipped)
        snprintf(val + strlen(val), sizeof val - strlen(val), " | update skipped (%s)",
                 m->no_target ? "no target token" : "non-finite");
    snprintf(line, sizeof line,
             "step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tok/s | MFU %.1f%% | "
             "%.1f ms/step%s",
             (long long)m->step, (long long)o->steps, m->loss, m->lr, m->grad_norm, m->tokens_per_s,
             100.0 * m->mfu, m->ms_per_step, val);
    slm_progress_clear_line(); // a terminal's progress line gives way to the step line
    printf("%s\n", line);
    fflush(stdout);
    slm_log_file_only(SLM_LOG_INFO, "%s", line); // rank 0's log has the step lines too
    progress_step(sp, m);
}

// --simulate-compute: the step line without loss values (they are meaningless): step time and
// its split into simulated compute, exposed communication (collective waits) and the rest
// (optimizer, hook polling, data).
static slm_status print_sim_step(void *ctx, slm_trainer *tr, const slm_step_metrics *m) {
    const slm_train_opts *o = ((const step_printer *)ctx)->o;
    bool last = m->step == o->steps;
    if (slm_trainer_rank(tr) != 0 || o->log_every <= 0) return SLM_OK;
    if (!(m->step % o->log_every == 0 || last || m->step == 1)) return SLM_OK;
    slm_step_timing t;
    slm_trainer_step_timing(tr, &t);
    double comp = t.sim_compute_s * 1e3, comm = t.comm_s * 1e3;
    printf("step %6lld/%lld | simulated | %.1f ms/step | compute %.1f ms | exposed comm %.1f ms | "
           "other %.1f ms | %.0f tok/s\n",
           (long long)m->step, (long long)o->steps, m->ms_per_step, comp, comm,
           m->ms_per_step - comp - comm, m->tokens_per_s);
    fflush(stdout);
    return SLM_OK;
}

static slm_status print_finish(void *ctx, slm_trainer *tr, slm_status st) {
    step_printer *sp = ctx;
    if (sp->begun && st)
        slm_progress_abandon(&sp->pg);
    else if (sp->begun)
        slm_progress_end(&sp->pg, slm_trainer_result(tr)->interrupted ? sp->frac : 1.0,
                         "%lld steps", (long long)slm_trainer_steps_done(tr));
    const slm_train_result *r = slm_trainer_result(tr);
    if (!st && r->stop_evaluated && slm_trainer_rank(tr) == 0) {
        char over[64];
        val_over(sp->o, over, sizeof over);
        printf("step %6lld | val loss %.4f (%s)\n", (long long)r->steps_done, r->final_val_loss,
               over);
        fflush(stdout);
    }
    return SLM_OK;
}

// The hooks `shardlm train` attaches: stop flag, checkpoints, metrics.jsonl, the Prometheus
// metrics (after the checkpoints, whose counters it reads), then the step line and progress
// (the supervisor heartbeat attaches here the same way).
static slm_status install_hooks(slm_train_opts *o, slm_train_std_hooks *std, slm_train_prom *prom,
                                step_printer *sp) {
    slm_status st = slm_train_add_std_hooks(o, std);
    if (!st) st = slm_train_add_prom_hook(o, prom, std);
    sp->o = o;
    slm_train_hook print = {
        .name = "step line", .ctx = sp, .observe = print_step, .on_finish = print_finish};
    if (o->simulate_gflops > 0) print.observe = NULL, print.on_step = print_sim_step;
    return st ? st : slm_train_attach(o, &print);
}

int slm_cmd_train(int argc, char **argv) {
    train_args t = {0};
    slm_train_opts_default(&t.o);
    t.seed = (int64_t)t.o.seed;
    t.on_ckpt_error = t.o.ckpt_abort_on_error;
    // No MPI progress thread by default: on an idle machine with one rank per core it steals the
    // cores the kernels use (0.81 vs 0.94 of the 1 x 2-thread speed, docs/scaling.md); it helps
    // when ranks wait on each other's hooks under load (--progress-thread 100).
    t.progress_us = 0;
    slm_opt_seen seen;
    int rc = slm_opt_parse(&k_train_cli, argc, argv, &t, &seen);
    if (rc >= 0) return rc;
    if (!t.o.model && t.o.init_from_gguf) t.o.model = t.o.init_from_gguf; // its metadata
    if ((rc = train_check(&t, &seen)) >= 0) return rc;
    slm_fault_plan faults; // SHARDLM_FAULT / SHARDLM_ATTEMPT: a bad value is a usage error
    if (slm_fault_plan_from_env(&faults)) {
        slm_error("train: %s", slm_errmsg());
        return SLM_EXIT_USAGE;
    }
    slm_train_opts o = t.o;
    o.seed = (uint64_t)t.seed;
    o.ckpt_abort_on_error = t.on_ckpt_error == 1;
    o.nonfinite_skip = t.on_nonfinite == 1;
    if (t.no_prefetch) o.fsdp.forward_prefetch = o.fsdp.backward_prefetch = false;
    if (t.quiet) slm_progress_enable(false);
    slm_s3_set_defaults(t.s3_endpoint, t.s3_region);
    if (o.lora.rank > 0 && !slm_opt_given(&k_train_cli, &seen, "--lora-alpha"))
        o.lora.alpha = 2.0f * (float)o.lora.rank;
    if (slm_opt_given(&k_train_cli, &seen, "--progress-thread"))
        slm_dist_request_progress_thread(t.progress_us);
    slm_status st;
    st = slm_dist_init(&argc, &argv);
    if (st) {
        slm_error("train: %s", slm_errmsg());
        return SLM_EXIT_ERROR;
    }
    // A fault naming a rank beyond the world would never fire: a usage error, now that the
    // world size is known (every rank checks the same environment; agreed, rank 0 reports).
    slm_status fst = slm_fault_check_world(&faults, slm_dist_world());
    if (slm_dist_agree(fst)) {
        if (slm_dist_rank() == 0)
            slm_error("train: %s", fst ? slm_errmsg() : "SHARDLM_FAULT differs across ranks");
        slm_dist_finalize();
        return SLM_EXIT_USAGE;
    }
    slm_train_install_signal_handlers();
    slm_flight_install_signals(); // SIGUSR2 and fatal signals dump the flight recorder
    // Ranks started with different options stop here, together, before anything else.
    slm_dist_set_timeout(o.collective_timeout_s);
    st = slm_train_agree(&o);
    if (st) {
        if (slm_dist_rank() == 0) slm_error("train: %s", slm_errmsg());
        slm_dist_finalize();
        return slm_exit_code(st);
    }
    // --data s3://...: stream the dataset into the local cache; the loader maps that copy.
    char *cache = NULL;
    const char *data_uri = o.data_dir;
    if (slm_s3_is_uri(o.data_dir)) {
        if (o.data_cache) {
            cache = slm_xstrdup(o.data_cache);
        } else {
            const char *td = getenv("TMPDIR");
            char name[64];
            snprintf(name, sizeof name, "shardlm-data-%016llx",
                     (unsigned long long)slm_xxh64(o.data_dir, strlen(o.data_dir), 0));
            cache = slm_path_join(td && *td ? td : "/tmp", name);
        }
        st = slm_dist_agree(slm_dataset_fetch(o.data_dir, cache));
        if (st) {
            slm_error("train: --data %s: %s", data_uri, slm_errmsg());
            free(cache);
            slm_dist_finalize();
            return slm_exit_code(st);
        }
        o.data_dir = cache;
    }
    // The metrics server binds before anything is trained: a port in use stops every rank here.
    slm_train_prom *prom = NULL;
    st = slm_dist_agree(slm_train_prom_new(&o.metrics, &prom));
    if (st) {
        if (slm_dist_rank() == 0) slm_error("train: %s", slm_errmsg());
        slm_train_prom_free(prom);
        free(cache);
        slm_dist_finalize();
        return slm_exit_code(st);
    }
    slm_train_result res = {0};
    slm_train_std_hooks std = {0};
    step_printer sp = {0};
    st = install_hooks(&o, &std, prom, &sp);
    if (!st) st = slm_train_run(&o, &res);
    slm_train_prom_free(prom);
    if (st == SLM_E_INTERRUPTED && res.preempted) {
        if (slm_dist_rank() == 0) slm_info("train: %s", slm_errmsg());
        slm_dist_finalize();
        return SLM_EXIT_PREEMPTED;
    }
    if (st) {
        slm_error("train: %s", slm_errmsg());
    } else if (slm_dist_rank() == 0 && res.already_complete) {
        printf("done: the run is already complete at step %lld (--steps %lld); nothing trained\n",
               (long long)res.steps_done, (long long)o.steps);
    } else if (slm_dist_rank() == 0) {
        printf("done: %lld steps", (long long)res.steps_done);
        if (isfinite(res.final_loss) && !(o.simulate_gflops > 0))
            printf(" | final loss %.4f", res.final_loss);
        if (isfinite(res.final_val_loss)) {
            char over[64];
            val_over(&o, over, sizeof over);
            printf(" | val loss %.4f (%s)", res.final_val_loss, over);
        }
        if (isfinite(res.tokens_per_s))
            printf(" | %.0f tok/s | MFU %.1f%%", res.tokens_per_s, 100.0 * res.mfu);
        if (res.nonfinite_skips)
            printf(" | %lld skipped (non-finite)", (long long)res.nonfinite_skips);
        if (res.empty_skips)
            printf(" | %lld skipped (no target token)", (long long)res.empty_skips);
        printf("\n");
    }
    free(cache);
    slm_dist_finalize();
    return slm_exit_code(st);
}
