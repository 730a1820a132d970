// The table of training options (options.h): one entry per option of slm_train_opts, and the
// checks that use it. --help's text is the entries' help, range and default text, so a change
// here is a change of `shardlm train --help`.
#include "train/options.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "objstore/objstore.h"
#include "train/train.h"

static slm_status parse_sharding(const char *opt, const char *v, void *dst) {
    (void)opt;
    return slm_sharding_parse(v, dst);
}
static void show_sharding(const void *dst, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", slm_sharding_name(*(const slm_sharding *)dst));
}

static slm_status parse_precision(const char *opt, const char *v, void *dst) {
    return slm_precision_parse(opt, v, dst);
}
static void show_precision(const void *dst, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", *(const slm_dtype *)dst == SLM_DTYPE_BF16 ? "bf16" : "fp32");
}

static slm_status parse_lora_targets(const char *opt, const char *v, void *dst) {
    (void)opt;
    return slm_lora_parse_targets(v, dst);
}
// "q_proj,v_proj", or "(none)".
static void show_lora_targets(const void *dst, char *buf, size_t cap) {
    uint32_t bits = *(const uint32_t *)dst;
    buf[0] = 0;
    for (int t = 0; t < SLM_LORA_N_TARGETS; t++)
        if (bits & (1u << t))
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? "," : "",
                     slm_lora_target_name(t));
    if (!buf[0]) snprintf(buf, cap, "(none)");
}

// --no-prefetch (a flag on the whole slm_fsdp_opts): both prefetches off.
static slm_status parse_no_prefetch(const char *opt, const char *v, void *dst) {
    (void)opt, (void)v;
    slm_fsdp_opts *f = dst;
    f->forward_prefetch = f->backward_prefetch = false;
    return SLM_OK;
}
static void show_prefetch(const void *dst, char *buf, size_t cap) {
    const slm_fsdp_opts *f = dst;
    snprintf(buf, cap, "forward prefetch %s, backward prefetch %s",
             f->forward_prefetch ? "on" : "off", f->backward_prefetch ? "on" : "off");
}

// HOST:PORT, :PORT or [IPV6]:PORT (slm_metrics_parse_addr), kept as given.
static slm_status parse_metrics_addr(const char *opt, const char *v, void *dst) {
    char host[256];
    int port;
    slm_status st = slm_metrics_parse_addr(v, host, sizeof host, &port);
    if (st) return slm_fail_wrap(st, "%s", opt);
    *(const char **)dst = v;
    return SLM_OK;
}

static const char *const k_ckpt_error[] = {"continue", "abort", NULL};
static const char *const k_nonfinite[] = {"abort", "skip", NULL};

// The field of slm_train_opts an entry stores into: its offset and size.
#define F(field)                                                                                   \
    .off = offsetof(slm_train_opts, field), .size = sizeof(((slm_train_opts *)0)->field)
#define INF INFINITY
// Ranges: integers [ilo, ihi]; reals by dlo / dhi and SLM_OPTF_LO_OPEN / HI_OPEN. `init` is the
// default (slm_train_opts_default); ZERO_OFF / NEG_OFF name the library's "not given" values
// (off, automatic) that a command line cannot give. Every option is compared across ranks by
// slm_train_agree (agree.c) unless PER_RANK.
const slm_opt slm_train_options[] = {
    {.name = "--data",
     .type = SLM_OPT_STRING,
     F(data_dir),
     .meta = "DIR",
     .help = "prepared dataset (manifest.json, shards, tokenizer)"},
    {.name = "--synthetic",
     .type = SLM_OPT_FLAG,
     F(synthetic),
     .help = "uniform random tokens instead of --data (benchmarks); --out is optional with it "
             "(nothing is saved without)"},
    {.name = "--model",
     .type = SLM_OPT_STRING,
     F(model),
     .meta = "SPEC",
     .help = "preset (tiny, small, gqa, ...) or HF config.json"},
    {.name = "--vocab-size",
     .type = SLM_OPT_INT,
     F(vocab_size),
     .meta = "V",
     .help = "override the model's vocab_size (must match the data)",
     .ilo = 1,
     .ihi = INT32_MAX,
     .flags = SLM_OPTF_NODEF | SLM_OPTF_ZERO_OFF | SLM_OPTF_NEG_OFF},
    {.name = "--batch",
     .type = SLM_OPT_INT,
     F(B),
     .meta = "B",
     .help = "sequences per micro-batch",
     .ilo = 1,
     .ihi = 1 << 20,
     .flags = SLM_OPTF_NODEF | SLM_OPTF_REQUIRED},
    {.name = "--seq",
     .type = SLM_OPT_INT,
     F(T),
     .meta = "T",
     .help = "tokens per sequence (<= max_position_embeddings)",
     .ilo = 1,
     .ihi = 1 << 24,
     .flags = SLM_OPTF_NODEF | SLM_OPTF_REQUIRED},
    {.name = "--grad-accum",
     .type = SLM_OPT_INT,
     F(grad_accum),
     .meta = "K",
     .help = "micro-batches per optimizer step",
     .ilo = 1,
     .ihi = 1 << 20,
     .init = "1"},
    {.name = "--steps",
     .type = SLM_OPT_INT64,
     F(steps),
     .meta = "N",
     .help = "optimizer steps (length of the cosine schedule)",
     .ilo = 1,
     .ihi = INT64_MAX / 2,
     .flags = SLM_OPTF_NODEF | SLM_OPTF_REQUIRED},
    {.name = "--lr",
     .type = SLM_OPT_FLOAT,
     F(adamw.lr_peak),
     .meta = "LR",
     .help = "peak learning rate",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN,
     .init = "3e-4"},
    {.name = "--min-lr",
     .type = SLM_OPT_FLOAT,
     F(min_lr),
     .meta = "LR",
     .help = "floor of the cosine decay, at most --lr",
     .dlo = 0,
     .dhi = INF,
     .def = "lr/10",
     .flags = SLM_OPTF_NEG_OFF,
     .init = "-1"},
    {.name = "--warmup",
     .type = SLM_OPT_INT64,
     F(warmup),
     .meta = "W",
     .help = "linear warmup steps",
     .ilo = 0,
     .ihi = INT64_MAX / 2},
    {.name = "--weight-decay",
     .type = SLM_OPT_FLOAT,
     F(adamw.weight_decay),
     .meta = "WD",
     .help = "AdamW decoupled weight decay on matmul weights",
     .dlo = 0,
     .dhi = INF,
     .init = "0.1"},
    {.name = "--beta1",
     .type = SLM_OPT_FLOAT,
     F(adamw.beta1),
     .meta = "B1",
     .help = "AdamW beta1",
     .dlo = 0,
     .dhi = 1,
     .flags = SLM_OPTF_HI_OPEN,
     .init = "0.9"},
    {.name = "--beta2",
     .type = SLM_OPT_FLOAT,
     F(adamw.beta2),
     .meta = "B2",
     .help = "AdamW beta2",
     .dlo = 0,
     .dhi = 1,
     .flags = SLM_OPTF_HI_OPEN,
     .init = "0.95"},
    {.name = "--eps",
     .type = SLM_OPT_FLOAT,
     F(adamw.eps),
     .meta = "E",
     .help = "AdamW epsilon",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN,
     .init = "1e-8"},
    {.name = "--grad-clip",
     .type = SLM_OPT_FLOAT,
     F(grad_clip),
     .meta = "G",
     .help = "max global gradient norm, 0 disables",
     .dlo = 0,
     .dhi = INF,
     .range = ">= 0 and finite (0 = off)",
     .flags = SLM_OPTF_ZERO_OFF | SLM_OPTF_NEG_OFF,
     .init = "1"},
    {.name = "--seed",
     .type = SLM_OPT_INT64,
     F(seed),
     .meta = "S",
     .help = "weight init and data order",
     .ilo = 0,
     .ihi = INT64_MAX,
     .init = "1337"},
    {.name = "--eval-every",
     .type = SLM_OPT_INT64,
     F(eval_every),
     .meta = "K",
     .help = "validation loss every K steps and at the end, 0 = off",
     .ilo = 0,
     .ihi = INT64_MAX / 2},
    {.name = "--eval-batches",
     .type = SLM_OPT_INT,
     F(eval_batches),
     .meta = "M",
     .help = "validation batches of B sequences, 0 = all",
     .ilo = 0,
     .ihi = 1 << 30,
     .init = "20"},
    {.name = "--activation-checkpointing",
     .type = SLM_OPT_FLAG,
     F(activation_checkpointing),
     .help = "recompute block activations in backward"},
    {.name = "--compute-dtype",
     .type = SLM_OPT_CUSTOM,
     F(compute_dtype),
     .meta = "D",
     .help = "fp32 or bf16: bf16 rounds every matmul's inputs (weights, activations, gradients) "
             "to bf16 and accumulates in fp32, as autocast(bfloat16) and tensor cores do (oneDNN's "
             "AVX512-BF16 / AMX kernels where the CPU has them); norms, softmax, loss, optimizer "
             "and master weights stay fp32",
     .parse = parse_precision,
     .show = show_precision,
     .def = "fp32"},
    {.name = "--device",
     .type = SLM_OPT_STRING,
     F(device),
     .meta = "DEV",
     .help = "cpu, cuda or cuda:N: the device the model computes on; a GPU needs "
             "--compute-dtype bf16 and (for now) one rank (docs/training.md)",
     .def = "cpu"},
    {.name = "--threads",
     .type = SLM_OPT_INT,
     F(threads),
     .meta = "N",
     .help = "OpenMP and BLAS threads",
     .ilo = 1,
     .ihi = 4096,
     .def = "environment",
     .flags = SLM_OPTF_PER_RANK | SLM_OPTF_ZERO_OFF | SLM_OPTF_NEG_OFF},
    {.name = "--max-minutes",
     .type = SLM_OPT_DOUBLE,
     F(max_minutes),
     .meta = "M",
     .help = "stop and save after M minutes of training",
     .dlo = 0,
     .dhi = INF,
     .flags =
         SLM_OPTF_LO_OPEN | SLM_OPTF_F32 | SLM_OPTF_NODEF | SLM_OPTF_ZERO_OFF | SLM_OPTF_NEG_OFF},
    {.name = "--time-schedule",
     .type = SLM_OPT_FLAG,
     F(time_schedule),
     .help = "with --max-minutes: the LR schedule follows the share of the time budget spent "
             "when that is ahead of step/steps"},
    {.name = "--peak-gflops",
     .type = SLM_OPT_DOUBLE,
     F(peak_gflops),
     .meta = "G",
     .help = "MFU denominator",
     .dlo = 0,
     .dhi = INF,
     .def = "measured sgemm peak",
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32 | SLM_OPTF_PER_RANK | SLM_OPTF_ZERO_OFF |
              SLM_OPTF_NEG_OFF},
    {.name = "--log-every",
     .type = SLM_OPT_INT,
     F(log_every),
     .meta = "K",
     .help = "step line every K steps",
     .ilo = 0,
     .ihi = 1 << 30,
     .flags = SLM_OPTF_PER_RANK,
     .init = "1"},
    {.type = SLM_OPT_SECTION,
     .help = "  under mpirun -np N (data parallel, FSDP; docs/cluster.md, docs/scaling.md):"},
    {.name = "--sharding",
     .type = SLM_OPT_CUSTOM,
     F(fsdp.sharding),
     .meta = "S",
     .help = "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD (any case)",
     .parse = parse_sharding,
     .show = show_sharding,
     .def = "FULL_SHARD"},
    {.name = "--shard-group-size",
     .type = SLM_OPT_INT,
     F(fsdp.shard_group_size),
     .meta = "G",
     .help = "HYBRID_SHARD: shard within groups of G consecutive ranks",
     .ilo = 1,
     .ihi = 1 << 20,
     .flags = SLM_OPTF_NODEF | SLM_OPTF_ZERO_OFF},
    {.name = "--param-dtype",
     .type = SLM_OPT_CUSTOM,
     F(fsdp.param_dtype),
     .meta = "D",
     .help = "fp32 or bf16: dtype of all-gathered parameters",
     .parse = parse_precision,
     .show = show_precision,
     .def = "fp32"},
    {.name = "--reduce-dtype",
     .type = SLM_OPT_CUSTOM,
     F(fsdp.reduce_dtype),
     .meta = "D",
     .help = "fp32 or bf16: dtype of gradient communication",
     .parse = parse_precision,
     .show = show_precision,
     .def = "fp32"},
    {.name = "--limit-all-gathers",
     .type = SLM_OPT_INT,
     F(fsdp.limit_all_gathers),
     .meta = "K",
     .help = "units gathered or in flight for prefetch",
     .ilo = 0,
     .ihi = 1 << 20},
    {.name = "--no-prefetch",
     .type = SLM_OPT_FLAG,
     F(fsdp),
     .parse = parse_no_prefetch,
     .show = show_prefetch,
     .help = "no forward / backward prefetch of the next unit"},
    {.name = "--collective-timeout",
     .type = SLM_OPT_DOUBLE,
     F(collective_timeout_s),
     .meta = "S",
     .help = "abort the whole job (MPI_Abort, naming the op, step and group) when one "
             "collective waits more than S seconds. It bounds the wait for the slowest rank, so "
             "at scale keep it above the longest legitimate wait: the first step, a validation "
             "pass, a checkpoint commit, start-up on a slow file system",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32 | SLM_OPTF_ZERO_OFF | SLM_OPTF_NEG_OFF,
     .range = "> 0 seconds and finite",
     .init = "600"},
    {.name = "--simulate-compute",
     .type = SLM_OPT_DOUBLE,
     F(simulate_gflops),
     .meta = "GFLOPS",
     .help = "emulation (bench/scaling/, docs/scaling.md): every collective real, each unit's "
             "forward / backward arithmetic replaced by a wait of its FLOPs / GFLOPS; losses are "
             "meaningless and not printed, the step line shows step time, simulated compute and "
             "exposed communication",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32 | SLM_OPTF_NODEF | SLM_OPTF_ZERO_OFF,
     .range = "> 0 GFLOP/s and finite"},
    {.type = SLM_OPT_SECTION, .help = "  Prometheus metrics (docs/observability.md):"},
    {.name = "--metrics-addr",
     .type = SLM_OPT_CUSTOM,
     F(metrics.addr),
     .meta = "HOST:PORT",
     .help = "rank 0 serves /metrics (Prometheus text format) on HOST:PORT; :PORT listens on "
             "127.0.0.1, PORT 0 picks a free port (logged)",
     .parse = parse_metrics_addr,
     .def = "off",
     .flags = SLM_OPTF_PER_RANK},
    {.name = "--metrics-all-ranks",
     .type = SLM_OPT_FLAG,
     F(metrics.all_ranks),
     .help = "every rank given --metrics-addr serves its own /metrics, on PORT + rank (PORT "
             "0: a free port each)",
     .flags = SLM_OPTF_PER_RANK},
    {.name = "--metrics-every",
     .type = SLM_OPT_INT,
     F(metrics.every),
     .meta = "N",
     .help = "gather the per-rank metrics (memory, CPU, busy time, stragglers) to rank 0 every "
             "N steps",
     .ilo = 1,
     .ihi = 1 << 30,
     .init = "5"},
    {.name = "--straggler-factor",
     .type = SLM_OPT_DOUBLE,
     F(metrics.straggler_factor),
     .meta = "F",
     .help = "a rank whose busy time per step (iteration wall time minus collective waits) "
             "exceeds F x the median of the ranks, and the median by 10 ms, ...",
     .dlo = 1,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32,
     .init = "1.5"},
    {.name = "--straggler-windows",
     .type = SLM_OPT_INT,
     F(metrics.straggler_windows),
     .meta = "K",
     .help = "... in K gathers in a row is a straggler (logged, counted in "
             "shardlm_straggler_events_total)",
     .ilo = 1,
     .ihi = 1 << 20,
     .init = "3"},
    {.type = SLM_OPT_SECTION, .help = "  run directory, checkpoints and resume:"},
    {.name = "--out",
     .type = SLM_OPT_STRING,
     F(out_dir),
     .meta = "RUN_DIR",
     .help = "run directory: config.json, tokenizer, metrics.jsonl, checkpoints/ (the "
             "weights; always one at the end / stop), run.lock (one run at a time); a non-empty "
             "directory that is not a run directory is refused"},
    {.name = "--ckpt-every-steps",
     .type = SLM_OPT_INT64,
     F(ckpt_every_steps),
     .meta = "N",
     .help = "also checkpoint every N steps (asynchronous by default), 0 = off",
     .ilo = 0,
     .ihi = INT64_MAX / 2},
    {.name = "--ckpt-every-minutes",
     .type = SLM_OPT_DOUBLE,
     F(ckpt_every_minutes),
     .meta = "M",
     .help = "also checkpoint every M minutes",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_F32,
     .range = ">= 0 and finite (0 = off)"},
    {.name = "--ckpt-keep",
     .type = SLM_OPT_INT,
     F(ckpt_keep),
     .meta = "K",
     .help = "keep the K newest checkpoints, 0 = all",
     .ilo = 0,
     .ihi = 1 << 30},
    {.name = "--ckpt-sync",
     .type = SLM_OPT_FLAG,
     F(ckpt_sync),
     .help = "write checkpoints on the training thread (no overlap)"},
    {.name = "--on-ckpt-error",
     .type = SLM_OPT_ENUM,
     F(ckpt_abort_on_error),
     .meta = "WHAT",
     .help = "a failed save is logged (continue) or fatal (abort)",
     .choices = k_ckpt_error,
     .flags = SLM_OPTF_BOOL},
    {.name = "--resume",
     .type = SLM_OPT_STRING,
     F(resume),
     .meta = "auto|PATH",
     .help = "continue bitwise from RUN_DIR's newest checkpoint that verifies (auto: if any; "
             "`latest` is only a hint, a bad newest one falls back to the previous with a "
             "warning) or from a checkpoint PATH"},
    {.name = "--no-packing",
     .type = SLM_OPT_FLAG,
     F(no_packing),
     .help = "instruction data (prep --format prompt-completion|chat): one sample per window, "
             "padded, instead of packing several per window (each attends only to itself "
             "either way; loss on completion / assistant tokens only); on a plain dataset it "
             "has no effect and is warned about"},
    {.name = "--verify-on-resume",
     .type = SLM_OPT_FLAG,
     F(verify_on_resume),
     .help = "also check every checkpoint file's XXH64 before resuming (default: manifest and "
             "file sizes)"},
    {.name = "--allow-batch-change",
     .type = SLM_OPT_FLAG,
     F(allow_batch_change),
     .help = "resume at another global batch (--batch x ranks x --grad-accum) than the "
             "checkpoint's, with a warning (default: refused, exit 2, naming the --grad-accum "
             "that keeps it; another world size with the same global batch needs no flag; "
             "--seq must always match)"},
    {.name = "--train-from-scratch",
     .type = SLM_OPT_FLAG,
     F(train_from_scratch),
     .help = "RUN_DIR holds checkpoints of an earlier run: move them to "
             "RUN_DIR/checkpoints.replaced-DATE with the run's metrics.jsonl, config.json and "
             "tokenizer (nothing is deleted) and train from a seeded init; without it such a "
             "run is refused"},
    {.name = "--init-from-hf",
     .type = SLM_OPT_STRING,
     F(init_from_hf),
     .meta = "DIR",
     .help = "initial weights from a Hugging Face safetensors directory (not with --resume "
             "PATH; with --resume auto only while RUN_DIR has no checkpoint)"},
    {.name = "--init-from-gguf",
     .type = SLM_OPT_STRING,
     F(init_from_gguf),
     .meta = "FILE",
     .help = "initial weights from a llama.cpp GGUF file (llama architecture; dequantized to "
             "fp32); --model is the file (its metadata is the config; another --model is refused); "
             "prepare the data "
             "with its tokenizer (shardlm tokenizer from-gguf); as --init-from-hf otherwise"},
    {.type = SLM_OPT_SECTION,
     .help = "  LoRA fine-tuning (Hu et al. 2021, PEFT's arithmetic; docs/training.md):"},
    {.name = "--lora-rank",
     .type = SLM_OPT_INT,
     F(lora.rank),
     .meta = "R",
     .help = "train rank-R adapters on the --lora-targets projections of the frozen "
             "--init-from-hf base (needs --init-from-hf); checkpoints hold the adapters only",
     .ilo = 1,
     .ihi = 1 << 16,
     .flags = SLM_OPTF_NODEF | SLM_OPTF_ZERO_OFF | SLM_OPTF_NEG_OFF},
    {.name = "--lora-alpha",
     .type = SLM_OPT_FLOAT,
     F(lora.alpha),
     .meta = "A",
     .help = "adapter scale alpha / R",
     .dlo = 0,
     .dhi = INF,
     .def = "2 x R",
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32 | SLM_OPTF_ZERO_OFF},
    {.name = "--lora-dropout",
     .type = SLM_OPT_FLOAT,
     F(lora.dropout),
     .meta = "P",
     .help = "dropout on the adapter input while training",
     .dlo = 0,
     .dhi = 1,
     .flags = SLM_OPTF_HI_OPEN | SLM_OPTF_F32},
    {.name = "--lora-targets",
     .type = SLM_OPT_CUSTOM,
     F(lora.targets),
     .meta = "LIST",
     .help = "comma-separated projections among q_proj, k_proj, v_proj, o_proj, gate_proj, "
             "up_proj, down_proj, or all",
     .parse = parse_lora_targets,
     .show = show_lora_targets,
     .def = "q_proj,v_proj",
     .init = "q_proj,v_proj"},
    {.type = SLM_OPT_SECTION, .help = "  operations (docs/operations.md):"},
    {.name = "--heartbeat-dir",
     .type = SLM_OPT_STRING,
     F(heartbeat_dir),
     .meta = "DIR",
     .help = "every rank atomically replaces DIR/rank_RRRRR.json (rank, pid, host, step, unix "
             "time, loss, phase) at start, after each step and at the end, for a supervisor "
             "(shardlm launch passes RUN_DIR/heartbeat)"},
    {.name = "--preempt-grace",
     .type = SLM_OPT_DOUBLE,
     F(preempt_grace_s),
     .meta = "S",
     .help = "SIGTERM / SIGUSR1 (preemption): finish the current micro-batch, commit a "
             "checkpoint and exit 75; a save that took longer than S seconds after the signal "
             "is logged as a warning (set S to the scheduler's grace period)",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32,
     .range = "> 0 seconds and finite",
     .init = "60"},
    {.name = "--on-nonfinite",
     .type = SLM_OPT_ENUM,
     F(nonfinite_skip),
     .meta = "WHAT",
     .help = "a step whose loss or global gradient norm is NaN / inf stops the run (abort, exit "
             "1) or is skipped on every rank (skip: no update, weights and AdamW moments "
             "unchanged; the batch is consumed, counted in the log and metrics.jsonl)",
     .choices = k_nonfinite,
     .flags = SLM_OPTF_BOOL},
    {.name = "--max-nonfinite-skips",
     .type = SLM_OPT_INT,
     F(max_nonfinite_skips),
     .meta = "K",
     .help = "with --on-nonfinite skip: more than K skipped steps in a row stop the run (exit 1)",
     .ilo = 0,
     .ihi = 1 << 30,
     .init = "5"},
    {.name = "--loss-spike-window",
     .type = SLM_OPT_INT,
     F(spike_window),
     .meta = "N",
     .help = "loss-spike detector: z-score of each step's loss against the previous N steps' "
             "losses (0 = off; else N >= 8: a smaller window flags ordinary noise)",
     .ilo = 0,
     .ihi = 1 << 20,
     .init = "100"},
    {.name = "--loss-spike-z",
     .type = SLM_OPT_DOUBLE,
     F(spike_z),
     .meta = "Z",
     .help = "a loss more than Z standard deviations above the window's mean is logged as a "
             "warning naming the step",
     .dlo = 0,
     .dhi = INF,
     .flags = SLM_OPTF_LO_OPEN | SLM_OPTF_F32,
     .range = "> 0 and finite",
     .init = "5"},
    {.name = "--snapshot-every-steps",
     .type = SLM_OPT_INT64,
     F(snapshot_every_steps),
     .meta = "N",
     .help = "also keep the newest state every N steps in node-local shared memory (checkpoint "
             "format, synchronous); --resume auto prefers it when it is newer than the disk "
             "checkpoint and verifies (one host, same world and model), 0 = off",
     .ilo = 0,
     .ihi = INT64_MAX / 2},
    {.name = "--snapshot-dir",
     .type = SLM_OPT_STRING,
     F(snapshot_dir),
     .meta = "DIR",
     .help = "where the snapshots go (a tmpfs; a new or empty directory, or this run's own: "
             "refused when it holds other files or another run's snapshots)",
     .def = "/dev/shm/shardlm-<XXH64 of the absolute --out>"},
    {.type = SLM_OPT_SECTION, .help = "  object storage (S3; docs/storage.md):"},
    {.name = "--ckpt-uri",
     .type = SLM_OPT_STRING,
     F(ckpt_uri),
     .meta = "s3://BUCKET/PREFIX/",
     .help = "also upload every committed checkpoint there in the background (one uploader per "
             "host; manifest, then `latest`, last; --ckpt-keep applies remotely); --resume auto "
             "then picks the newest complete of RUN_DIR and the prefix (an empty disk resumes "
             "from S3 alone); --resume s3://... reads a remote checkpoint directly"},
    {.name = "--s3-prefix-shards",
     .type = SLM_OPT_INT,
     F(s3_prefix_shards),
     .meta = "K",
     .help = "spread the rank files over K prefixes (PREFIX/sKK/...; S3 rate limits are per "
             "prefix), recorded in the remote manifest",
     .ilo = 1,
     .ihi = 100,
     .def = "1",
     .flags = SLM_OPTF_ZERO_OFF},
    {.name = "--data-cache",
     .type = SLM_OPT_STRING,
     F(data_cache),
     .meta = "DIR",
     .help = "with --data s3://...: the local copy the loader maps (objects streamed in large "
             "range GETs, XXH64-checked; verified files are reused; node-local NVMe is the place)",
     .def = "$TMPDIR/shardlm-data-HASH"},
    {.type = SLM_OPT_END},
};
#undef F
#undef INF

// The rules between options (after every value is in its range), in the order the command line
// has always reported them.
static slm_status check_between(const slm_train_opts *o) {
    const char *hf = o->init_from_hf, *gguf = o->init_from_gguf;
    bool resume_path = o->resume && strcmp(o->resume, "auto") != 0;
    if (hf && slm_is_gguf_file(hf))
        return slm_fail(SLM_E_ARG,
                        "--init-from-hf %s: a GGUF file, not a Hugging Face directory; give it "
                        "as --init-from-gguf",
                        hf);
    if (hf && gguf)
        return slm_fail(SLM_E_ARG, "--init-from-hf and --init-from-gguf exclude each other");
    if (gguf && o->lora.rank > 0)
        return slm_fail(SLM_E_ARG, "--lora-rank with --init-from-gguf is not supported (LoRA "
                                   "checkpoints record a Hugging Face base directory)");
    if (gguf && resume_path)
        return slm_fail(SLM_E_ARG,
                        "--init-from-gguf %s and --resume %s conflict (a checkpoint carries its "
                        "own weights)",
                        gguf, o->resume);
    if (hf && resume_path) // the checkpoint holds the weights: one of the two would be ignored
        return slm_fail(SLM_E_ARG,
                        "--init-from-hf %s and --resume %s conflict (a checkpoint carries its "
                        "own weights); give one (--resume auto with --init-from-hf starts from "
                        "the HF weights only while RUN_DIR has no checkpoint)",
                        hf, o->resume);
    if (!o->synthetic && !o->data_dir)
        return slm_fail(SLM_E_ARG, "no dataset given (--data DIR, or --synthetic)");
    if (o->train_from_scratch && o->resume)
        return slm_fail(SLM_E_ARG, "--train-from-scratch and --resume exclude each other");
    if ((o->train_from_scratch || o->verify_on_resume) && !o->out_dir)
        return slm_fail(SLM_E_ARG, "%s needs --out RUN_DIR",
                        o->train_from_scratch ? "--train-from-scratch" : "--verify-on-resume");
    if (o->spike_window != 0 && o->spike_window < SLM_SPIKE_WINDOW_MIN)
        return slm_fail(SLM_E_ARG,
                        "--loss-spike-window %d: must be 0 (off) or at least %d (fewer losses "
                        "give a standard deviation too noisy to judge a spike by)",
                        o->spike_window, SLM_SPIKE_WINDOW_MIN);
    if (o->lora.rank > 0 && !hf)
        return slm_fail(SLM_E_ARG, "--lora-rank trains adapters on a frozen base: give the base "
                                   "with --init-from-hf DIR");
    if ((o->snapshot_every_steps > 0 || o->snapshot_dir) && !o->out_dir)
        return slm_fail(SLM_E_ARG, "--snapshot-every-steps / --snapshot-dir need --out RUN_DIR");
    if (o->ckpt_uri && (!o->out_dir || !slm_s3_is_uri(o->ckpt_uri)))
        return slm_fail(SLM_E_ARG, "--ckpt-uri %s: %s", o->ckpt_uri,
                        !o->out_dir ? "needs --out RUN_DIR (checkpoints commit locally first, "
                                      "then upload)"
                                    : "expected s3://BUCKET/PREFIX/");
    if (o->min_lr >= 0 && o->min_lr > o->adamw.lr_peak)
        return slm_fail(SLM_E_ARG, "--min-lr %g: must be in [0, lr] = [0, %g]", (double)o->min_lr,
                        (double)o->adamw.lr_peak);
    if (o->simulate_gflops > 0 && o->eval_every > 0 && !o->synthetic)
        return slm_fail(SLM_E_ARG, "--simulate-compute: validation losses would be meaningless (no "
                                   "arithmetic runs); HINT: use --eval-every 0");
    if (o->device && strcmp(o->device, "cpu") != 0) {
        const char *d = o->device;
        bool cuda = strcmp(d, "cuda") == 0 || (strncmp(d, "cuda:", 5) == 0 && d[5] &&
                                               strspn(d + 5, "0123456789") == strlen(d + 5));
        if (!cuda) return slm_fail(SLM_E_ARG, "--device %s: expected cpu, cuda or cuda:N", d);
        if (o->simulate_gflops > 0)
            return slm_fail(SLM_E_ARG,
                            "--device %s: --simulate-compute runs on its own SLEEP "
                            "device; use one or the other",
                            d);
        if (o->compute_dtype != SLM_DTYPE_BF16)
            return slm_fail(SLM_E_ARG,
                            "--device %s: fp32 compute is not implemented on the GPU; "
                            "add --compute-dtype bf16 (tensor-core numerics, checked "
                            "against the CPU's bf16 path)",
                            d);
    }
    if (o->simulate_gflops > 0 && o->lora.rank > 0)
        return slm_fail(SLM_E_ARG, "--simulate-compute: its FLOP count is that of full training, "
                                   "not of LoRA adapters (--lora-rank); use one or the other");
    return o->lora.rank > 0 ? slm_lora_config_validate(&o->lora) : SLM_OK;
}

slm_status slm_train_opts_check(const slm_train_opts *o) {
    for (const slm_opt *e = slm_train_options; e->type != SLM_OPT_END; e++) {
        slm_status st = slm_opt_check(e, o);
        if (st) return st;
    }
    return check_between(o);
}
