// shardlm eval: mean loss / perplexity of a run's model on a prepared split or a token-id file,
// and the unigram entropy of a split (src/train/train.h).
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "ckpt/ckpt.h"
#include "device/device.h"
#include "train/train.h"

typedef struct eval_args {
    const char *model, *hf, *data, *split, *ids;
    int64_t B, T, max_batches, threads;
    slm_dtype compute_dtype;
    bool unigram, quiet;
} eval_args;

#define A(f) offsetof(eval_args, f)
static const slm_opt k_eval_opts[] = {
    SLM_MODEL_DIR_OPTS(A),
    {.name = "--data",
     .type = SLM_OPT_STRING,
     .off = A(data),
     .meta = "DIR",
     .help = "prepared dataset; windows of --seq + 1 tokens in order"},
    {.name = "--split",
     .type = SLM_OPT_STRING,
     .off = A(split),
     .meta = "NAME",
     .help = "train or val"},
    {.name = "--seq",
     .type = SLM_OPT_INT64,
     .off = A(T),
     .meta = "T",
     .help = "tokens per window",
     .ilo = 1,
     .ihi = 1 << 24,
     .def = "the run's --seq (its checkpoint), else min(256, max_position_embeddings)"},
    {.name = "--batch",
     .type = SLM_OPT_INT64,
     .off = A(B),
     .meta = "B",
     .help = "windows per forward",
     .ilo = 1,
     .ihi = 1 << 20},
    {.name = "--max-batches",
     .type = SLM_OPT_INT64,
     .off = A(max_batches),
     .meta = "M",
     .help = "evaluate at most M batches, 0 = the whole split",
     .ilo = 0,
     .ihi = INT64_MAX},
    {.name = "--token-ids",
     .type = SLM_OPT_STRING,
     .off = A(ids),
     .meta = "FILE",
     .help = "whitespace-separated ids, one sequence per line (inputs ids[:-1], targets "
             "ids[1:]); each line is its own window, so --seq, --batch, --max-batches and "
             "--split do not apply (giving them is a usage error)"},
    {.name = "--unigram-entropy",
     .type = SLM_OPT_FLAG,
     .off = A(unigram),
     .help = "also print the split's unigram entropy (nats/token); works without --model"},
    SLM_MODEL_RUN_OPTS(A),
    {.type = SLM_OPT_END},
};
#undef A

static const slm_cli k_eval_cli = {
    .cmd = "eval",
    .usage = "usage: shardlm eval --model DIR (--data DIR [--split val] | --token-ids FILE)\n"
             "       shardlm eval --data DIR --unigram-entropy [--split val]\n"
             "Mean cross-entropy (nats/token) and perplexity of a trained model.\n\n",
    .opts = k_eval_opts,
    .footer = "\nOutput lines on stdout: loss, perplexity, tokens, sequences, unigram_entropy,\n"
              "and \"over ...\": what the loss is over (the whole split or its first M batches,\n"
              "window length and where it came from).\n"
              "On instruction data (prep --format prompt-completion|chat) loss and tokens are\n"
              "over the completion / assistant tokens only (packed samples), and a line\n"
              "\"targets completion_only\" says so.\n"
              "exit codes: 0 ok, 1 runtime error (also a bad id in --token-ids FILE, or an\n"
              "empty --split), 2 usage error or mismatch (vocab, length)\n",
};

// Flushes stdout; false (after printing the reason) when a write to it failed.
static bool stdout_ok(void) {
    int err = 0;
    errno = 0;
    if (fflush(stdout) != 0) err = errno ? errno : EIO;
    if (ferror(stdout) && !err) err = errno ? errno : EIO;
    if (!err) return true;
    slm_error("eval: write to stdout failed: %s", strerror(err));
    return false;
}

int slm_cmd_eval(int argc, char **argv) {
    eval_args x = {.split = "val", .B = 8};
    slm_opt_seen seen;
    int rc = slm_opt_parse(&k_eval_cli, argc, argv, &x, &seen);
    if (rc >= 0) return rc;
    if (x.quiet) slm_progress_enable(false);
    const char *run = x.model ? x.model : x.hf, *data = x.data, *split = x.split, *ids = x.ids;
    bool hf = x.hf != NULL; // --init-from-hf: an HF safetensors directory instead of a run
    int64_t B = x.B, T = x.T, max_batches = x.max_batches, threads = x.threads;
    bool unigram = x.unigram;
    const char *window_opt = NULL; // a --data-only option given (refused with --token-ids)
    static const char *const window_opts[] = {"--seq", "--batch", "--max-batches", "--split"};
    for (size_t k = 0; k < sizeof window_opts / sizeof *window_opts && !window_opt; k++)
        if (slm_opt_given(&k_eval_cli, &seen, window_opts[k])) window_opt = window_opts[k];
    slm_status st = SLM_OK;
    if ((!run && !unigram) || (run && !data && !ids) || (data && ids) || (unigram && !data)) {
        slm_error("eval: give --model RUN_DIR with exactly one of --data DIR or --token-ids "
                  "FILE (or --data DIR --unigram-entropy)");
        slm_opt_help(stderr, &k_eval_cli, NULL);
        return SLM_EXIT_USAGE;
    }
    if (ids && window_opt) {
        slm_error("eval: %s applies to --data only; with --token-ids each line of the file is "
                  "one window",
                  window_opt);
        return SLM_EXIT_USAGE;
    }
    slm_device_set_threads(NULL, (int)threads); // 0: as the environment set them
    if (unigram) {
        double h = 0;
        int64_t n = 0;
        st = slm_unigram_entropy(data, split, &h, &n);
        if (st) goto fail;
        printf("unigram_entropy %.6f\nunigram_tokens %lld\n", h, (long long)n);
    }
    if (run) {
        if (hf && (st = slm_model_dir_require_hf(run))) goto fail; // SLM_E_ARG: exit 2
        slm_model_dir d;
        st = slm_model_dir_open(run, &d);
        if (st) goto fail;
        // The model must have been trained with the dataset's tokenizer (same file hash); an
        // HF directory that ships a tokenizer is checked the same way.
        if (data && (st = slm_model_dir_check_dataset(&d, data))) {
            slm_model_dir_close(&d);
            slm_error("eval: %s", slm_errmsg());
            return SLM_EXIT_ERROR;
        }
        // --seq defaults to the run's own (the checkpoint's batch geometry), so that eval of a
        // run measures what its training validated; an HF directory has none.
        const char *t_from = "--seq";
        if (T == 0 && d.ckpt) {
            const slm_ckpt_meta *M = slm_ckpt_get_meta(d.ckpt);
            if (M->has_batch && M->seq > 0) T = M->seq, t_from = "the run's --seq";
        }
        if (T == 0 && !ids) t_from = "default: min(256, max_position_embeddings)";
        slm_llama m;
        st = slm_model_dir_load_model(&d, &m);
        slm_model_dir_close(&d);
        if (st) goto fail;
        m.bf16_compute = x.compute_dtype == SLM_DTYPE_BF16;
        slm_eval_result r;
        if (ids) {
            st = slm_eval_token_ids(&m, ids, &r);
            if (st) { // every failure here is about the file's contents (or reading it)
                slm_llama_free(&m);
                slm_error("eval: %s", slm_errmsg());
                return SLM_EXIT_ERROR;
            }
        } else {
            if (T == 0)
                T = m.cfg.max_position_embeddings < 256 ? m.cfg.max_position_embeddings : 256;
            st = slm_eval_split(&m, data, split, (int)B, (int)T, max_batches, &r);
        }
        slm_llama_free(&m);
        if (st) goto fail;
        printf("loss %.6f\nperplexity %.4f\ntokens %lld\nsequences %lld\n", r.loss, r.perplexity,
               (long long)r.n_tokens, (long long)r.n_seqs);
        if (ids)
            printf("over all %lld lines of %s\n", (long long)r.n_seqs, ids);
        else if (max_batches == 0 || r.n_seqs < max_batches * B)
            printf("over the whole %s split: %lld windows of %lld tokens (%s)\n", split,
                   (long long)r.n_seqs, (long long)T, t_from);
        else
            printf("over the first %lld batches of the %s split: %lld windows of %lld tokens "
                   "(%s)\n",
                   (long long)max_batches, split, (long long)r.n_seqs, (long long)T, t_from);
        if (r.completion_only) // instruction data: the loss and tokens are the target ones
            printf("targets completion_only\n");
    }
    return stdout_ok() ? SLM_EXIT_OK : SLM_EXIT_ERROR;
fail:
    slm_error("eval: %s", slm_errmsg());
    return slm_exit_code(st);
}
