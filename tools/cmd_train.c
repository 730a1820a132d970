// shardlm train: option parsing for slm_train_run (src/train/train.h).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "dist/dist.h"
#include "train/train.h"

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: shardlm train --data DIR --model PRESET|config.json --batch B --seq T\n"
            "                     --steps N --out RUN_DIR [options]\n"
            "Trains a Llama model from a seeded init on a prepared dataset (shardlm prep).\n\n"
            "  --data DIR            prepared dataset (manifest.json, shards, tokenizer)\n"
            "  --synthetic           uniform random tokens instead of --data (benchmarks);\n"
            "                        --out is optional with it (nothing is saved without)\n"
            "  --model SPEC          preset (tiny, small, gqa, ...) or HF config.json\n"
            "  --vocab-size V        override the model's vocab_size (must match the data)\n"
            "  --batch B             sequences per micro-batch\n"
            "  --seq T               tokens per sequence (<= max_position_embeddings)\n"
            "  --grad-accum K        micro-batches per optimizer step (default 1)\n"
            "  --steps N             optimizer steps (length of the cosine schedule)\n"
            "  --lr LR               peak learning rate, > 0 (default 3e-4)\n"
            "  --min-lr LR           floor of the cosine decay, in [0, lr] (default lr/10)\n"
            "  --warmup W            linear warmup steps (default 0)\n"
            "  --weight-decay WD     AdamW decoupled weight decay on matmul weights (default 0.1)\n"
            "  --beta1 B1 --beta2 B2 AdamW betas, in [0, 1) (default 0.9, 0.95)\n"
            "  --eps E               AdamW epsilon, > 0 (default 1e-8)\n"
            "  --grad-clip G         max global gradient norm, 0 disables (default 1.0)\n"
            "  --seed S              weight init and data order (default 1337)\n"
            "  --eval-every K        validation loss every K steps and at the end (default 0)\n"
            "  --eval-batches M      validation batches of B sequences, 0 = all (default 20)\n"
            "  --activation-checkpointing   recompute block activations in backward\n"
            "  --threads N           OpenMP and BLAS threads (default: environment)\n"
            "  --max-minutes M       stop and save after M minutes of training (M > 0)\n"
            "  --time-schedule       with --max-minutes: the LR schedule follows the share of\n"
            "                        the time budget spent when that is ahead of step/steps\n"
            "  --peak-gflops G       MFU denominator, > 0 (default: measured sgemm peak)\n"
            "  --log-every K         step line every K steps (default 1)\n"
            "  under mpirun -np N (data parallel, FSDP; docs/cluster.md, docs/scaling.md):\n"
            "  --sharding S          FULL_SHARD (default), SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD\n"
            "  --shard-group-size G  HYBRID_SHARD: shard within groups of G consecutive ranks\n"
            "  --param-dtype D       fp32 (default) or bf16: dtype of all-gathered parameters\n"
            "  --reduce-dtype D      fp32 (default) or bf16: dtype of gradient communication\n"
            "  --limit-all-gathers K units gathered or in flight for prefetch (default 2)\n"
            "  --no-prefetch         no forward / backward prefetch of the next unit\n"
            "  --collective-timeout S  abort the whole job (MPI_Abort, naming the op, step and\n"
            "                        group) when one collective waits more than S seconds;\n"
            "                        S > 0 and finite (default 600). It bounds the wait for the\n"
            "                        slowest rank, so at scale keep it above the longest\n"
            "                        legitimate wait: the first step, a validation pass, a\n"
            "                        checkpoint commit, start-up on a slow file system\n"
            "  --progress-thread US  with world > 1 a thread polls MPI every US microseconds so\n"
            "                        all-gathers / reduce-scatters progress during compute\n"
            "                        (MPI_THREAD_MULTIPLE; default 0 = off; try 100)\n"
            "  --out RUN_DIR         run directory: config.json, tokenizer, metrics.jsonl,\n"
            "                        checkpoints/ (the weights; always one at the end / stop),\n"
            "                        run.lock (one run at a time); a non-empty directory that\n"
            "                        is not a run directory is refused\n"
            "  --ckpt-every-steps N  also checkpoint every N steps (asynchronous by default)\n"
            "  --ckpt-every-minutes M  also checkpoint every M minutes\n"
            "  --ckpt-keep K         keep the K newest checkpoints (default 0: all)\n"
            "  --ckpt-sync           write checkpoints on the training thread (no overlap)\n"
            "  --on-ckpt-error continue|abort   a failed save is logged (default) or fatal\n"
            "  --resume auto|PATH    continue bitwise from RUN_DIR's newest checkpoint that\n"
            "                        verifies (auto: if any; `latest` is only a hint, a bad\n"
            "                        newest one falls back to the previous with a warning)\n"
            "                        or from a checkpoint PATH\n"
            "  --verify-on-resume    also check every checkpoint file's XXH64 before resuming\n"
            "                        (default: manifest and file sizes)\n"
            "  --train-from-scratch  RUN_DIR holds checkpoints of an earlier run: move them to\n"
            "                        RUN_DIR/checkpoints.replaced-DATE (nothing is deleted) and\n"
            "                        train from a seeded init; without it such a run is refused\n"
            "  --init-from-hf DIR    initial weights from a Hugging Face safetensors directory\n"
            "                        (not with --resume PATH; with --resume auto only while\n"
            "                        RUN_DIR has no checkpoint)\n\n"
            "Under mpirun every rank must be given the same options (all but --threads,\n"
            "--log-every, --peak-gflops and --progress-thread): they are compared first and a\n"
            "difference stops every rank, naming the option and the ranks (exit 2; 1 when only\n"
            "the dataset's or model config's file contents differ between ranks).\n"
            "\n"
            "exit codes: 0 done, 1 runtime error (data, I/O, NaN, interrupted), 2 usage error\n");
}

// Returns the value of option argv[*i] (advancing *i), or NULL with a message.
static const char *opt_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        slm_error("train: option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

// Options taking a value (anything else starting with -- is unknown).
static bool takes_value(const char *a) {
    static const char *const names[] = {
        "--data", "--model", "--out", "--vocab-size", "--batch", "--seq", "--grad-accum",
        "--steps", "--warmup", "--seed", "--eval-every", "--eval-batches", "--threads",
        "--log-every", "--lr", "--min-lr", "--weight-decay", "--beta1", "--beta2", "--eps",
        "--grad-clip", "--max-minutes", "--ckpt-every-steps", "--ckpt-every-minutes",
        "--ckpt-keep", "--on-ckpt-error", "--resume", "--init-from-hf", "--peak-gflops",
        "--sharding", "--shard-group-size", "--param-dtype", "--reduce-dtype",
        "--limit-all-gathers", "--collective-timeout", "--progress-thread"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (!strcmp(a, names[k])) return true;
    return false;
}

// Parses a floating-point option and checks it against [lo, hi] (open ends with lo_open /
// hi_open; infinities and NaN are always refused), naming the option and the range.
static slm_status parse_real(const char *opt, const char *v, double lo, bool lo_open, double hi,
                             bool hi_open, const char *range, double *out) {
    double x = 0;
    slm_status st = slm_parse_f64(opt, v, &x);
    if (st) return st;
    bool ok = isfinite(x) && isfinite((float)x) && (lo_open ? x > lo : x >= lo) &&
              (hi_open ? x < hi : x <= hi);
    if (!ok) return slm_fail(SLM_E_ARG, "%s %s: must be %s", opt, v, range);
    *out = x;
    return SLM_OK;
}

static int exit_code(slm_status st) {
    return st == SLM_OK ? SLM_EXIT_OK : st == SLM_E_ARG ? SLM_EXIT_USAGE : SLM_EXIT_ERROR;
}

int slm_cmd_train(int argc, char **argv) {
    slm_train_opts o;
    slm_train_opts_default(&o);
    bool have_steps = false, have_batch = false, have_seq = false;
    // No MPI progress thread by default: on an idle machine with one rank per core it steals the
    // cores the kernels use (0.81 vs 0.94 of the 1 x 2-thread speed, docs/scaling.md); it helps
    // when ranks wait on each other's hooks under load (--progress-thread 100).
    slm_status st = SLM_OK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int64_t iv = 0;
        double dv = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            train_usage(stdout);
            return SLM_EXIT_OK;
        } else if (!strcmp(a, "--synthetic")) {
            o.synthetic = true;
            continue;
        } else if (!strcmp(a, "--time-schedule")) {
            o.time_schedule = true;
            continue;
        } else if (!strcmp(a, "--activation-checkpointing")) {
            o.activation_checkpointing = true;
            continue;
        } else if (!strcmp(a, "--ckpt-sync")) {
            o.ckpt_sync = true;
            continue;
        } else if (!strcmp(a, "--verify-on-resume")) {
            o.verify_on_resume = true;
            continue;
        } else if (!strcmp(a, "--train-from-scratch")) {
            o.train_from_scratch = true;
            continue;
        }
        if (!strcmp(a, "--no-prefetch")) {
            o.fsdp.forward_prefetch = o.fsdp.backward_prefetch = false;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            slm_error("train: unexpected argument \"%s\"", a);
            train_usage(stderr);
            return SLM_EXIT_USAGE;
        }
        if (!takes_value(a)) {
            slm_error("train: unknown option %s (see --help)", a);
            return SLM_EXIT_USAGE;
        }
        if (!(v = opt_value(argc, argv, &i))) return SLM_EXIT_USAGE;
        if (!strcmp(a, "--data")) o.data_dir = v;
        else if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--out")) o.out_dir = v;
        else if (!strcmp(a, "--vocab-size")) {
            if (!(st = slm_parse_i64(a, v, 1, INT32_MAX, &iv))) o.vocab_size = (int32_t)iv;
        } else if (!strcmp(a, "--batch")) {
            if (!(st = slm_parse_i64(a, v, 1, 1 << 20, &iv))) o.B = (int)iv, have_batch = true;
        } else if (!strcmp(a, "--seq")) {
            if (!(st = slm_parse_i64(a, v, 1, 1 << 24, &iv))) o.T = (int)iv, have_seq = true;
        } else if (!strcmp(a, "--grad-accum")) {
            if (!(st = slm_parse_i64(a, v, 1, 1 << 20, &iv))) o.grad_accum = (int)iv;
        } else if (!strcmp(a, "--steps")) {
            if (!(st = slm_parse_i64(a, v, 1, INT64_MAX / 2, &iv))) o.steps = iv, have_steps = true;
        } else if (!strcmp(a, "--warmup")) {
            if (!(st = slm_parse_i64(a, v, 0, INT64_MAX / 2, &iv))) o.warmup = iv;
        } else if (!strcmp(a, "--seed")) {
            if (!(st = slm_parse_i64(a, v, 0, INT64_MAX, &iv))) o.seed = (uint64_t)iv;
        } else if (!strcmp(a, "--eval-every")) {
            if (!(st = slm_parse_i64(a, v, 0, INT64_MAX / 2, &iv))) o.eval_every = iv;
        } else if (!strcmp(a, "--eval-batches")) {
            if (!(st = slm_parse_i64(a, v, 0, 1 << 30, &iv))) o.eval_batches = (int)iv;
        } else if (!strcmp(a, "--threads")) {
            if (!(st = slm_parse_i64(a, v, 1, 4096, &iv))) o.threads = (int)iv;
        } else if (!strcmp(a, "--log-every")) {
            if (!(st = slm_parse_i64(a, v, 0, 1 << 30, &iv))) o.log_every = (int)iv;
        } else if (!strcmp(a, "--lr")) {
            if (!(st = parse_real(a, v, 0, true, INFINITY, false, "> 0 and finite", &dv)))
                o.adamw.lr_peak = (float)dv;
        } else if (!strcmp(a, "--min-lr")) { // <= --lr: checked after all options
            if (!(st = parse_real(a, v, 0, false, INFINITY, false, ">= 0 and finite", &dv)))
                o.min_lr = (float)dv;
        } else if (!strcmp(a, "--weight-decay")) {
            if (!(st = parse_real(a, v, 0, false, INFINITY, false, ">= 0 and finite", &dv)))
                o.adamw.weight_decay = (float)dv;
        } else if (!strcmp(a, "--beta1")) {
            if (!(st = parse_real(a, v, 0, false, 1, true, "in [0, 1)", &dv)))
                o.adamw.beta1 = (float)dv;
        } else if (!strcmp(a, "--beta2")) {
            if (!(st = parse_real(a, v, 0, false, 1, true, "in [0, 1)", &dv)))
                o.adamw.beta2 = (float)dv;
        } else if (!strcmp(a, "--eps")) {
            if (!(st = parse_real(a, v, 0, true, INFINITY, false, "> 0 and finite", &dv)))
                o.adamw.eps = (float)dv;
        } else if (!strcmp(a, "--grad-clip")) {
            if (!(st = parse_real(a, v, 0, false, INFINITY, false, ">= 0 and finite (0 = off)",
                                  &dv)))
                o.grad_clip = (float)dv;
        } else if (!strcmp(a, "--max-minutes")) {
            if (!(st = parse_real(a, v, 0, true, INFINITY, false, "> 0 and finite", &dv)))
                o.max_minutes = dv;
        } else if (!strcmp(a, "--ckpt-every-steps")) {
            if (!(st = slm_parse_i64(a, v, 0, INT64_MAX / 2, &iv))) o.ckpt_every_steps = iv;
        } else if (!strcmp(a, "--ckpt-every-minutes")) {
            if (!(st = parse_real(a, v, 0, false, INFINITY, false, ">= 0 and finite (0 = off)",
                                  &dv)))
                o.ckpt_every_minutes = dv;
        } else if (!strcmp(a, "--ckpt-keep")) {
            if (!(st = slm_parse_i64(a, v, 0, 1 << 30, &iv))) o.ckpt_keep = (int)iv;
        } else if (!strcmp(a, "--on-ckpt-error")) {
            if (!strcmp(v, "abort") || !strcmp(v, "continue"))
                o.ckpt_abort_on_error = !strcmp(v, "abort");
            else
                st = slm_fail(SLM_E_ARG, "--on-ckpt-error \"%s\": expected continue or abort", v);
        } else if (!strcmp(a, "--resume")) {
            o.resume = v;
        } else if (!strcmp(a, "--init-from-hf")) {
            o.init_from_hf = v;
        } else if (!strcmp(a, "--peak-gflops")) {
            if (!(st = parse_real(a, v, 0, true, INFINITY, false, "> 0 and finite", &dv)))
                o.peak_gflops = dv;
        } else if (!strcmp(a, "--sharding")) {
            st = slm_sharding_parse(v, &o.fsdp.sharding);
        } else if (!strcmp(a, "--shard-group-size")) {
            if (!(st = slm_parse_i64(a, v, 1, 1 << 20, &iv))) o.fsdp.shard_group_size = (int)iv;
        } else if (!strcmp(a, "--param-dtype")) {
            st = slm_precision_parse(a, v, &o.fsdp.param_dtype);
        } else if (!strcmp(a, "--reduce-dtype")) {
            st = slm_precision_parse(a, v, &o.fsdp.reduce_dtype);
        } else if (!strcmp(a, "--limit-all-gathers")) {
            if (!(st = slm_parse_i64(a, v, 0, 1 << 20, &iv))) o.fsdp.limit_all_gathers = (int)iv;
        } else if (!strcmp(a, "--collective-timeout")) {
            if (!(st = parse_real(a, v, 0, true, INFINITY, false, "> 0 seconds and finite", &dv)))
                o.collective_timeout_s = dv;
        } else if (!strcmp(a, "--progress-thread")) {
            if (!(st = parse_real(a, v, 0, false, 1e6, true, "in [0, 1e6) microseconds", &dv)))
                slm_dist_request_progress_thread(dv);
        } else { // takes_value() lists an option not handled above
            slm_error("train: unknown option %s (see --help)", a);
            return SLM_EXIT_USAGE;
        }
        if (st) {
            slm_error("train: %s", slm_errmsg());
            return SLM_EXIT_USAGE;
        }
    }
    if (o.init_from_hf && o.resume && strcmp(o.resume, "auto") != 0) {
        // The checkpoint holds the weights: one of the two would be ignored.
        slm_error("train: --init-from-hf %s and --resume %s conflict (a checkpoint carries its "
                  "own weights); give one (--resume auto with --init-from-hf starts from the HF "
                  "weights only while RUN_DIR has no checkpoint)",
                  o.init_from_hf, o.resume);
        return SLM_EXIT_USAGE;
    }
    if (!o.model || !have_batch || !have_seq || !have_steps || (!o.data_dir && !o.synthetic)) {
        slm_error("train: --model, --batch, --seq, --steps and --data (or --synthetic) are "
                  "required");
        train_usage(stderr);
        return SLM_EXIT_USAGE;
    }
    if (o.synthetic && o.data_dir) {
        slm_error("train: --synthetic and --data exclude each other (synthetic tokens replace "
                  "the dataset)");
        return SLM_EXIT_USAGE;
    }
    if (!o.out_dir && !o.synthetic) {
        slm_error("train: --out RUN_DIR is required (only --synthetic runs may omit it; they "
                  "save nothing)");
        return SLM_EXIT_USAGE;
    }
    if (o.train_from_scratch && o.resume) {
        slm_error("train: --train-from-scratch and --resume exclude each other");
        return SLM_EXIT_USAGE;
    }
    if ((o.train_from_scratch || o.verify_on_resume) && !o.out_dir) {
        slm_error("train: %s needs --out RUN_DIR",
                  o.train_from_scratch ? "--train-from-scratch" : "--verify-on-resume");
        return SLM_EXIT_USAGE;
    }
    if (o.min_lr > o.adamw.lr_peak) {
        slm_error("train: --min-lr %g: must be in [0, lr] = [0, %g]", (double)o.min_lr,
                  (double)o.adamw.lr_peak);
        return SLM_EXIT_USAGE;
    }
    st = slm_dist_init(&argc, &argv);
    if (st) {
        slm_error("train: %s", slm_errmsg());
        return SLM_EXIT_ERROR;
    }
    slm_train_install_signal_handlers();
    // Ranks started with different options stop here, together, before anything else.
    slm_dist_set_timeout(o.collective_timeout_s);
    st = slm_train_agree(&o);
    if (st) {
        if (slm_dist_rank() == 0) slm_error("train: %s", slm_errmsg());
        slm_dist_finalize();
        return exit_code(st);
    }
    slm_train_result res;
    st = slm_train_run(&o, &res);
    if (st) {
        slm_error("train: %s", slm_errmsg());
    } else if (slm_dist_rank() == 0 && res.already_complete) {
        printf("done: the run is already complete at step %lld (--steps %lld); nothing trained\n",
               (long long)res.steps_done, (long long)o.steps);
    } else if (slm_dist_rank() == 0) {
        printf("done: %lld steps", (long long)res.steps_done);
        if (isfinite(res.final_loss)) printf(" | final loss %.4f", res.final_loss);
        if (isfinite(res.final_val_loss)) printf(" | val loss %.4f", res.final_val_loss);
        if (isfinite(res.tokens_per_s))
            printf(" | %.0f tok/s | MFU %.1f%%", res.tokens_per_s, 100.0 * res.mfu);
        printf("\n");
    }
    slm_dist_finalize();
    return exit_code(st);
}
