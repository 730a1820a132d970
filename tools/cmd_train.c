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

// Parsed command line: the library's options (train/options.h) and the CLI's own.
typedef struct train_args {
    slm_train_opts o; // first: the library table's offsets are offsets into train_args too
    double progress_us;
    bool quiet;
    const char *s3_endpoint, *s3_region;
} train_args;
_Static_assert(offsetof(train_args, o) == 0, "slm_train_options' offsets index train_args");

// The options that are not training options (they set up the process: progress line, MPI
// progress thread, S3 defaults), each shown in --help after the training option it names.
#define A(f) offsetof(train_args, f), .size = sizeof(((train_args *)0)->f)
static const struct {
    const char *after;
    slm_opt opt;
} k_cli_only[] = {
    {"--log-every",
     {.name = "--quiet",
      .type = SLM_OPT_FLAG,
      .off = A(quiet),
      .help = "no progress line (rank 0, stderr: step, tokens/s, ETA to the last step; "
              "checkpoint load); step lines and logs stay",
      .flags = SLM_OPTF_PER_RANK}},
    {"--collective-timeout",
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
      .def = "0 = off"}},
    {"--data-cache",
     {.name = "--s3-endpoint",
      .type = SLM_OPT_STRING,
      .off = A(s3_endpoint),
      .meta = "URL",
      .help = "S3 endpoint (http[s]://HOST[:PORT]; default AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, "
              "the profile's endpoint_url, else AWS for the region)"}},
    {"--s3-endpoint",
     {.name = "--s3-region",
      .type = SLM_OPT_STRING,
      .off = A(s3_region),
      .meta = "REGION",
      .help = "S3 signing region (default AWS_REGION, AWS_DEFAULT_REGION, the profile's, else "
              "us-east-1)"}},
};
#undef A

// The train command line: slm_train_options with k_cli_only merged in (built once).
static slm_opt k_train_opts[SLM_OPT_MAX];

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

// Fills k_train_opts once: the library's table, each CLI-only option after the one it names.
const slm_cli *slm_train_cli(void) {
    size_t n = 0, n_cli = sizeof k_cli_only / sizeof *k_cli_only;
    if (k_train_opts[0].type != SLM_OPT_END) return &k_train_cli;
    for (const slm_opt *o = slm_train_options;; o++) {
        const char *last = o->name;
        k_train_opts[n++] = *o;
        if (o->type == SLM_OPT_END) break;
        for (bool more = last != NULL; more;) { // a CLI-only option may follow another
            more = false;
            for (size_t k = 0; k < n_cli; k++)
                if (!strcmp(k_cli_only[k].after, last)) {
                    k_train_opts[n++] = k_cli_only[k].opt;
                    last = k_cli_only[k].opt.name;
                    more = true;
                }
        }
        if (n + n_cli + 1 > SLM_OPT_MAX) slm_fatal("train: more than %d options", SLM_OPT_MAX);
    }
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

// Checks of the command line as a whole, after parsing: what was given (required options,
// --model with --init-from-gguf, LoRA settings without --lora-rank) and the CLI's own rules
// (--out unless --synthetic; --synthetic or --data); then the library's checks of the options
// (slm_train_opts_check: ranges and rules between options). SLM_EXIT_USAGE after the message,
// -1 when fine.
static int train_check(const train_args *t, const slm_opt_seen *seen) {
    const slm_train_opts *o = &t->o;
    const slm_cli *cli = &k_train_cli;
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
    bool lora_opt = slm_opt_given(cli, seen, "--lora-alpha") ||
                    slm_opt_given(cli, seen, "--lora-dropout") ||
                    slm_opt_given(cli, seen, "--lora-targets");
    if (lora_opt && o->lora.rank < 1) {
        slm_error("train: --lora-alpha, --lora-dropout and --lora-targets need --lora-rank R");
        return SLM_EXIT_USAGE;
    }
    if (slm_train_opts_check(o)) {
        slm_error("train: %s", slm_errmsg());
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
    // No MPI progress thread by default: on an idle machine with one rank per core it steals the
    // cores the kernels use (0.81 vs 0.94 of the 1 x 2-thread speed, docs/scaling.md); it helps
    // when ranks wait on each other's hooks under load (--progress-thread 100).
    t.progress_us = 0;
    slm_opt_seen seen;
    int rc = slm_opt_parse(slm_train_cli(), argc, argv, &t, &seen);
    if (rc >= 0) return rc;
    if (!t.o.model && t.o.init_from_gguf) t.o.model = t.o.init_from_gguf; // its metadata
    if (t.o.lora.rank > 0 && !slm_opt_given(&k_train_cli, &seen, "--lora-alpha"))
        t.o.lora.alpha = 2.0f * (float)t.o.lora.rank; // --help: "default 2 x R"
    if ((rc = train_check(&t, &seen)) >= 0) return rc;
    slm_fault_plan faults; // SHARDLM_FAULT / SHARDLM_ATTEMPT: a bad value is a usage error
    if (slm_fault_plan_from_env(&faults)) {
        slm_error("train: %s", slm_errmsg());
        return SLM_EXIT_USAGE;
    }
    slm_train_opts o = t.o;
    if (t.quiet) slm_progress_enable(false);
    slm_s3_set_defaults(t.s3_endpoint, t.s3_region);
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
