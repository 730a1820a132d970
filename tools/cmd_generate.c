// shardlm generate: KV-cache sampling from a trained run, streamed to stdout token by token
// (src/train/train.h).
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "ckpt/ckpt.h"
#include "train/modeldir.h"
#include "train/train.h"

static void generate_usage(FILE *f) {
    fprintf(f,
            "usage: shardlm generate --model DIR --prompt TEXT [options]\n"
            "Samples a continuation of TEXT with the run's model and tokenizer, printing the\n"
            "prompt and then each new token's text as it is produced.\n\n"
            "  --model DIR         a run directory written by shardlm train (its newest\n"
            "                      checkpoint that verifies), a checkpoint step_N directory,\n"
            "                      or an HF directory (config.json + safetensors)\n"
            "  --init-from-hf DIR  instead of --model: HF config.json + safetensors (+ tokenizer)\n"
            "  --prompt TEXT       text to continue (may be empty when the tokenizer has BOS)\n"
            "  --max-new N         tokens to generate (default 200); generation also stops\n"
            "                      when the context (max_position_embeddings) is full\n"
            "  --temperature t     softmax temperature, 0 = greedy (default 0.8)\n"
            "  --top-k k           keep the k most likely tokens, 0 = off (default 0)\n"
            "  --top-p p           nucleus sampling mass, 1 = off (default 0.95)\n"
            "  --seed s            sampling seed (default 1337): same seed, same text\n"
            "  --no-bos            do not prepend the tokenizer's BOS id\n"
            "  --stop-at-eos       stop when the EOS id is sampled\n"
            "  --ids               also print the generated ids on stderr at the end\n"
            "  --threads N         OpenMP threads\n\n"
            "exit codes: 0 ok, 1 runtime error, 2 usage error\n");
}

// Streaming state: the prompt is printed just before the first new token (so nothing reaches
// stdout when generation fails before it starts), and the first write error is kept.
typedef struct emit_ctx {
    const char *prompt;
    bool printed;
    int err; // errno of the first failed write to stdout, 0 if none
} emit_ctx;

static void put_stdout(emit_ctx *c, const char *bytes, size_t len) {
    errno = 0;
    if (len && fwrite(bytes, 1, len, stdout) != len && !c->err) c->err = errno ? errno : EIO;
    errno = 0;
    if (fflush(stdout) != 0 && !c->err) c->err = errno ? errno : EIO;
}

static void emit_prompt(emit_ctx *c) {
    if (c->printed) return;
    c->printed = true;
    put_stdout(c, c->prompt, strlen(c->prompt));
}

static void emit_stdout(void *ctx, int32_t token, const char *bytes, size_t len) {
    (void)token;
    emit_prompt(ctx);
    put_stdout(ctx, bytes, len);
}

int slm_cmd_generate(int argc, char **argv) {
    const char *run = NULL, *prompt = NULL;
    bool hf = false; // --init-from-hf: an HF safetensors directory instead of a run
    slm_gen_opts o = {.max_new = 200, .temperature = 0.8f, .top_k = 0, .top_p = 0.95f,
                      .seed = 1337, .add_bos = true, .stop_at_eos = false};
    bool print_ids = false;
    int64_t iv = 0;
    double dv = 0;
    slm_status st = SLM_OK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            generate_usage(stdout);
            return SLM_EXIT_OK;
        }
        if (!strcmp(a, "--no-bos")) {
            o.add_bos = false;
            continue;
        }
        if (!strcmp(a, "--stop-at-eos")) {
            o.stop_at_eos = true;
            continue;
        }
        if (!strcmp(a, "--ids")) {
            print_ids = true;
            continue;
        }
        static const char *const with_value[] = {
            "--model", "--init-from-hf", "--prompt", "--max-new", "--top-k",
            "--seed",  "--threads",      "--temperature", "--top-p"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known = known || !strcmp(a, with_value[k]);
        if (strncmp(a, "--", 2) != 0) {
            slm_error("generate: unexpected argument \"%s\"", a);
            generate_usage(stderr);
            return SLM_EXIT_USAGE;
        }
        if (!known) {
            slm_error("generate: unknown option %s (see --help)", a);
            return SLM_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            slm_error("generate: option %s needs a value", a);
            return SLM_EXIT_USAGE;
        }
        const char *v = argv[++i];
        if ((!strcmp(a, "--model") || !strcmp(a, "--init-from-hf")) && run) {
            slm_error("%s: %s %s: the model is already given (%s %s); --model and "
                      "--init-from-hf exclude each other and each is given once",
                      "generate", a, v, hf ? "--init-from-hf" : "--model", run);
            return SLM_EXIT_USAGE;
        }
        if (!strcmp(a, "--model")) run = v;
        else if (!strcmp(a, "--init-from-hf")) run = v, hf = true;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--max-new")) {
            if (!(st = slm_parse_i64(a, v, 0, 1 << 24, &iv))) o.max_new = (int)iv;
        } else if (!strcmp(a, "--top-k")) {
            if (!(st = slm_parse_i64(a, v, 0, 1 << 30, &iv))) o.top_k = (int)iv;
        } else if (!strcmp(a, "--seed")) {
            if (!(st = slm_parse_i64(a, v, 0, INT64_MAX, &iv))) o.seed = (uint64_t)iv;
        } else if (!strcmp(a, "--threads")) {
            if (!(st = slm_parse_i64(a, v, 1, 4096, &iv))) omp_set_num_threads((int)iv);
        } else if (!strcmp(a, "--temperature")) {
            if (!(st = slm_parse_f64(a, v, &dv))) {
                if (!(dv >= 0 && isfinite((float)dv)))
                    st = slm_fail(SLM_E_ARG, "--temperature %s: must be >= 0 and finite "
                                             "(0 = greedy)", v);
                else
                    o.temperature = (float)dv;
            }
        } else { // --top-p
            if (!(st = slm_parse_f64(a, v, &dv))) {
                if (!(dv > 0 && dv <= 1))
                    st = slm_fail(SLM_E_ARG, "--top-p %s: must be in (0, 1] (1 = off)", v);
                else
                    o.top_p = (float)dv;
            }
        }
        if (st) {
            slm_error("generate: %s", slm_errmsg());
            return SLM_EXIT_USAGE;
        }
    }
    if (!run || !prompt) {
        slm_error("generate: --model RUN_DIR and --prompt TEXT are required");
        generate_usage(stderr);
        return SLM_EXIT_USAGE;
    }
    slm_llama m;
    slm_tokenizer *tok = NULL;
    st = slm_model_dir_load(run, hf, &m, &tok, true);
    if (st) {
        slm_error("generate: %s", slm_errmsg());
        return st == SLM_E_ARG ? SLM_EXIT_USAGE : SLM_EXIT_ERROR;
    }
    slm_ivec ids = {0};
    // The prompt's length in tokens: a warning when --max-new runs past the context (too long
    // a prompt is refused by slm_generate).
    if (!slm_tokenizer_encode(tok, prompt, strlen(prompt), o.add_bos ? SLM_ENC_ADD_BOS : 0,
                              &ids)) {
        int64_t maxT = m.cfg.max_position_embeddings;
        if ((int64_t)ids.len <= maxT && (int64_t)ids.len + o.max_new > maxT)
            slm_warn("generate: --max-new %d with a %zu-token prompt goes past the context; "
                     "generation stops at max_position_embeddings = %lld tokens (%lld new)",
                     o.max_new, ids.len, (long long)maxT, (long long)(maxT - (int64_t)ids.len));
    }
    ids.len = 0;
    emit_ctx ec = {.prompt = prompt};
    st = slm_generate(&m, tok, prompt, &o, emit_stdout, &ec, &ids);
    if (!st) emit_prompt(&ec); // no new token (--max-new 0, EOS first): the prompt alone
    if (ec.printed) put_stdout(&ec, "\n", 1);
    if (!st && print_ids) {
        for (size_t i = 0; i < ids.len; i++) fprintf(stderr, "%s%d", i ? " " : "", ids.data[i]);
        fprintf(stderr, "\n");
    }
    slm_ivec_free(&ids);
    slm_tokenizer_free(tok);
    slm_llama_free(&m);
    if (st) {
        slm_error("generate: %s", slm_errmsg());
        return st == SLM_E_ARG ? SLM_EXIT_USAGE : SLM_EXIT_ERROR;
    }
    if (!ec.err && ferror(stdout)) ec.err = EIO;
    if (ec.err) {
        slm_error("generate: write to stdout failed: %s", strerror(ec.err));
        return SLM_EXIT_ERROR;
    }
    return SLM_EXIT_OK;
}
