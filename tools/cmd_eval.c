// shardlm eval: mean loss / perplexity of a run's model on a prepared split or a token-id file,
// and the unigram entropy of a split (src/train/train.h).
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "ckpt/ckpt.h"
#include "train/modeldir.h"
#include "train/train.h"

static void eval_usage(FILE *f) {
    fprintf(f,
            "usage: shardlm eval --model DIR (--data DIR [--split val] | --token-ids FILE)\n"
            "       shardlm eval --data DIR --unigram-entropy [--split val]\n"
            "Mean cross-entropy (nats/token) and perplexity of a trained model.\n\n"
            "  --model DIR         a run directory written by shardlm train (its newest\n"
            "                      checkpoint that verifies), a checkpoint step_N directory,\n"
            "                      or an HF directory (config.json + safetensors)\n"
            "  --init-from-hf DIR  instead of --model: HF config.json + safetensors (+ tokenizer)\n"
            "  --data DIR          prepared dataset; windows of --seq + 1 tokens in order\n"
            "  --split NAME        train or val (default val)\n"
            "  --seq T             tokens per window (default min(256, max_position_embeddings))\n"
            "  --batch B           windows per forward (default 8)\n"
            "  --max-batches M     evaluate at most M batches (default 0 = the whole split)\n"
            "  --token-ids FILE    whitespace-separated ids, one sequence per line\n"
            "                      (inputs ids[:-1], targets ids[1:]); each line is its own\n"
            "                      window, so --seq, --batch, --max-batches and --split do not\n"
            "                      apply (giving them is a usage error)\n"
            "  --unigram-entropy   also print the split's unigram entropy (nats/token); works\n"
            "                      without --model\n"
            "  --threads N         OpenMP threads\n\n"
            "Output lines on stdout: loss, perplexity, tokens, sequences, unigram_entropy.\n"
            "exit codes: 0 ok, 1 runtime error (also a bad id in --token-ids FILE, or an\n"
            "empty --split), 2 usage error or mismatch (vocab, length)\n");
}

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
    const char *run = NULL, *data = NULL, *split = "val", *ids = NULL;
    bool hf = false; // --init-from-hf: an HF safetensors directory instead of a run
    int64_t B = 8, T = 0, max_batches = 0, threads = 0;
    bool unigram = false;
    const char *window_opt = NULL; // a --data-only option given (refused with --token-ids)
    slm_status st = SLM_OK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            eval_usage(stdout);
            return SLM_EXIT_OK;
        }
        if (!strcmp(a, "--unigram-entropy")) {
            unigram = true;
            continue;
        }
        static const char *const with_value[] = {
            "--model", "--init-from-hf", "--data", "--split", "--token-ids",
            "--seq",   "--batch",        "--max-batches", "--threads"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known = known || !strcmp(a, with_value[k]);
        if (strncmp(a, "--", 2) != 0) {
            slm_error("eval: unexpected argument \"%s\"", a);
            eval_usage(stderr);
            return SLM_EXIT_USAGE;
        }
        if (!known) {
            slm_error("eval: unknown option %s (see --help)", a);
            return SLM_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            slm_error("eval: option %s needs a value", a);
            return SLM_EXIT_USAGE;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--seq") || !strcmp(a, "--batch") || !strcmp(a, "--max-batches") ||
            !strcmp(a, "--split"))
            window_opt = a;
        if ((!strcmp(a, "--model") || !strcmp(a, "--init-from-hf")) && run) {
            slm_error("%s: %s %s: the model is already given (%s %s); --model and "
                      "--init-from-hf exclude each other and each is given once",
                      "eval", a, v, hf ? "--init-from-hf" : "--model", run);
            return SLM_EXIT_USAGE;
        }
        if (!strcmp(a, "--model")) run = v;
        else if (!strcmp(a, "--init-from-hf")) run = v, hf = true;
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--split")) split = v;
        else if (!strcmp(a, "--token-ids")) ids = v;
        else if (!strcmp(a, "--seq")) st = slm_parse_i64(a, v, 1, 1 << 24, &T);
        else if (!strcmp(a, "--batch")) st = slm_parse_i64(a, v, 1, 1 << 20, &B);
        else if (!strcmp(a, "--max-batches")) st = slm_parse_i64(a, v, 0, INT64_MAX, &max_batches);
        else st = slm_parse_i64(a, v, 1, 4096, &threads); // --threads
        if (st) {
            slm_error("eval: %s", slm_errmsg());
            return SLM_EXIT_USAGE;
        }
    }
    if ((!run && !unigram) || (run && !data && !ids) || (data && ids) || (unigram && !data)) {
        slm_error("eval: give --model RUN_DIR with exactly one of --data DIR or --token-ids "
                  "FILE (or --data DIR --unigram-entropy)");
        eval_usage(stderr);
        return SLM_EXIT_USAGE;
    }
    if (ids && window_opt) {
        slm_error("eval: %s applies to --data only; with --token-ids each line of the file is "
                  "one window",
                  window_opt);
        return SLM_EXIT_USAGE;
    }
    if (threads > 0) omp_set_num_threads((int)threads);
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
        slm_llama m;
        st = slm_model_dir_load_model(&d, &m);
        slm_model_dir_close(&d);
        if (st) goto fail;
        slm_eval_result r;
        if (ids) {
            st = slm_eval_token_ids(&m, ids, &r);
            if (st) { // every failure here is about the file's contents (or reading it)
                slm_llama_free(&m);
                slm_error("eval: %s", slm_errmsg());
                return SLM_EXIT_ERROR;
            }
        } else {
            if (T == 0) T = m.cfg.max_position_embeddings < 256 ? m.cfg.max_position_embeddings : 256;
            st = slm_eval_split(&m, data, split, (int)B, (int)T, max_batches, &r);
        }
        slm_llama_free(&m);
        if (st) goto fail;
        printf("loss %.6f\nperplexity %.4f\ntokens %lld\nsequences %lld\n", r.loss, r.perplexity,
               (long long)r.n_tokens, (long long)r.n_seqs);
    }
    return stdout_ok() ? SLM_EXIT_OK : SLM_EXIT_ERROR;
fail:
    slm_error("eval: %s", slm_errmsg());
    return st == SLM_E_ARG ? SLM_EXIT_USAGE : SLM_EXIT_ERROR;
}
