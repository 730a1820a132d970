// shardlm generate: KV-cache sampling from a trained run, streamed to stdout token by token
// (src/train/train.h).
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "ckpt/ckpt.h"
#include "data/data.h"
#include "device/device.h"
#include "train/train.h"

typedef struct generate_args {
    const char *model, *hf, *prompt, *chat, *system;
    int max_new, top_k;
    int64_t seed, threads;
    slm_dtype compute_dtype;
    float temperature, top_p;
    bool no_bos, stop_at_eos, ids, quiet;
} generate_args;

#define A(f) offsetof(generate_args, f)
static const slm_opt k_generate_opts[] = {
    SLM_MODEL_DIR_OPTS(A),
    {.name = "--prompt",
     .type = SLM_OPT_STRING,
     .off = A(prompt),
     .meta = "TEXT",
     .help = "text to continue (may be empty when the tokenizer has BOS)"},
    {.name = "--chat",
     .type = SLM_OPT_STRING,
     .off = A(chat),
     .meta = "T",
     .help = "treat --prompt as a user message and render it with chat template T (llama2, "
             "llama3, chatml or a template file, as prep --chat-template; `model`: the built-in "
             "one a GGUF --model's tokenizer.chat_template matches), the assistant header "
             "appended; prints only the reply and stops at the template's end of turn "
             "(<|eot_id|> for llama3, <|im_end|> for chatml, EOS for llama2)"},
    {.name = "--system",
     .type = SLM_OPT_STRING,
     .off = A(system),
     .meta = "TEXT",
     .help = "with --chat: a system message before the user message"},
    {.name = "--max-new",
     .type = SLM_OPT_INT,
     .off = A(max_new),
     .meta = "N",
     .help = "tokens to generate; generation also stops when the context "
             "(max_position_embeddings) is full",
     .ilo = 0,
     .ihi = 1 << 24},
    {.name = "--temperature",
     .type = SLM_OPT_FLOAT,
     .off = A(temperature),
     .meta = "t",
     .help = "softmax temperature, 0 = greedy",
     .dlo = 0,
     .dhi = INFINITY,
     .range = ">= 0 and finite (0 = greedy)"},
    {.name = "--top-k",
     .type = SLM_OPT_INT,
     .off = A(top_k),
     .meta = "k",
     .help = "keep the k most likely tokens, 0 = off",
     .ilo = 0,
     .ihi = 1 << 30},
    {.name = "--top-p",
     .type = SLM_OPT_FLOAT,
     .off = A(top_p),
     .meta = "p",
     .help = "nucleus sampling mass, 1 = off",
     .dlo = 0,
     .dhi = 1,
     .flags = SLM_OPTF_LO_OPEN,
     .range = "in (0, 1] (1 = off)"},
    {.name = "--seed",
     .type = SLM_OPT_INT64,
     .off = A(seed),
     .meta = "s",
     .help = "sampling seed: same seed, same text",
     .ilo = 0,
     .ihi = INT64_MAX},
    {.name = "--no-bos",
     .type = SLM_OPT_FLAG,
     .off = A(no_bos),
     .help = "do not prepend the tokenizer's BOS id"},
    {.name = "--stop-at-eos",
     .type = SLM_OPT_FLAG,
     .off = A(stop_at_eos),
     .help = "stop when the EOS id is sampled"},
    {.name = "--ids",
     .type = SLM_OPT_FLAG,
     .off = A(ids),
     .help = "also print the generated ids on stderr at the end"},
    SLM_MODEL_RUN_OPTS(A),
    {.type = SLM_OPT_END},
};
#undef A

static const slm_cli k_generate_cli = {
    .cmd = "generate",
    .usage = "usage: shardlm generate --model DIR --prompt TEXT [options]\n"
             "Samples a continuation of TEXT with the run's model and tokenizer, printing the\n"
             "prompt and then each new token's text as it is produced.\n\n",
    .opts = k_generate_opts,
    .footer = "\nexit codes: 0 ok, 1 runtime error, 2 usage error\n",
};

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
    generate_args x = {
        .max_new = 200, .temperature = 0.8f, .top_k = 0, .top_p = 0.95f, .seed = 1337};
    int rc = slm_opt_parse(&k_generate_cli, argc, argv, &x, NULL);
    if (rc >= 0) return rc;
    if (x.quiet) slm_progress_enable(false);
    const char *run = x.model ? x.model : x.hf, *prompt = x.prompt;
    bool hf = x.hf != NULL; // --init-from-hf: an HF safetensors directory instead of a run
    slm_gen_opts o = {.max_new = x.max_new,
                      .temperature = x.temperature,
                      .top_k = x.top_k,
                      .top_p = x.top_p,
                      .seed = (uint64_t)x.seed,
                      .add_bos = !x.no_bos,
                      .stop_at_eos = x.stop_at_eos};
    bool print_ids = x.ids;
    slm_device_set_threads(NULL, (int)x.threads); // 0: as the environment set them
    slm_status st = SLM_OK;
    if (!run || !prompt) {
        slm_error("generate: --model RUN_DIR and --prompt TEXT are required");
        slm_opt_help(stderr, &k_generate_cli, NULL);
        return SLM_EXIT_USAGE;
    }
    slm_llama m;
    slm_tokenizer *tok = NULL;
    st = slm_model_dir_load(run, hf, &m, &tok, true);
    if (st) {
        slm_error("generate: %s", slm_errmsg());
        return slm_exit_code(st);
    }
    m.bf16_compute = x.compute_dtype == SLM_DTYPE_BF16;
    // A tokenizer whose file says not to prepend BOS (a GGUF import with add_bos_token false)
    if (!slm_tokenizer_add_bos(tok)) o.add_bos = false;
    slm_ivec ids = {0};
    slm_ivec chat_ids = {0};
    if (x.chat && !strcmp(x.chat, "model")) { // the template a GGUF file's Jinja text matches
        slm_gguf_file g;
        bool present = false;
        st = slm_is_gguf_file(run) ? slm_gguf_open(run, &g)
                                   : slm_fail(SLM_E_ARG,
                                              "--chat model: %s is not a GGUF file (only a GGUF "
                                              "--model carries a chat template); give --chat "
                                              "llama2|llama3|chatml|FILE",
                                              run);
        if (!st) {
            x.chat = slm_gguf_chat_template(&g, &present);
            if (!x.chat)
                st = slm_fail(SLM_E_ARG,
                              "--chat model: %s %s; give the template with --chat FILE (a "
                              "template file, docs/formats.md)",
                              run,
                              present ? "has a tokenizer.chat_template that is not ChatML, "
                                        "Llama 2 or Llama 3"
                                      : "has no tokenizer.chat_template");
            slm_gguf_close(&g);
        }
        if (st) {
            slm_error("generate: %s", slm_errmsg());
            slm_tokenizer_free(tok);
            slm_llama_free(&m);
            return slm_exit_code(st);
        }
    }
    if (x.system && !x.chat) {
        slm_error("generate: --system needs --chat T");
        st = SLM_E_ARG;
    } else if (x.chat) { // the template's prompt ids; the reply ends at its end-of-turn id
        slm_chat_template *tpl = NULL;
        st = slm_chat_template_load_opt(x.chat, "--chat", &tpl);
        if (!st) st = slm_chat_prompt_ids(tpl, tok, x.system, prompt, &chat_ids, &o.stop_id);
        o.stop_at_id = !st && o.stop_id >= 0;
        slm_chat_template_free(tpl);
        if (st) slm_error("generate: %s", slm_errmsg());
    }
    if (st) {
        slm_ivec_free(&chat_ids);
        slm_tokenizer_free(tok);
        slm_llama_free(&m);
        return slm_exit_code(st);
    }
    // The prompt's length in tokens: a warning when --max-new runs past the context (too long
    // a prompt is refused by slm_generate).
    if (x.chat) {
        for (size_t i = 0; i < chat_ids.len; i++)
            slm_ivec_push(&ids, chat_ids.data[i]);
    }
    if (x.chat ||
        !slm_tokenizer_encode(tok, prompt, strlen(prompt), o.add_bos ? SLM_ENC_ADD_BOS : 0, &ids)) {
        int64_t maxT = m.cfg.max_position_embeddings;
        if ((int64_t)ids.len <= maxT && (int64_t)ids.len + o.max_new > maxT)
            slm_warn("generate: --max-new %d with a %zu-token prompt goes past the context; "
                     "generation stops at max_position_embeddings = %lld tokens (%lld new)",
                     o.max_new, ids.len, (long long)maxT, (long long)(maxT - (int64_t)ids.len));
    }
    ids.len = 0;
    emit_ctx ec = {.prompt = x.chat ? "" : prompt}; // chat: the reply only
    st = x.chat ? slm_generate_ids(&m, tok, chat_ids.data, chat_ids.len, &o, emit_stdout, &ec, &ids)
                : slm_generate(&m, tok, prompt, &o, emit_stdout, &ec, &ids);
    slm_ivec_free(&chat_ids);
    if (!st) emit_prompt(&ec); // no new token (--max-new 0, EOS first): the prompt alone
    if (ec.printed) put_stdout(&ec, "\n", 1);
    if (!st && print_ids) {
        for (size_t i = 0; i < ids.len; i++)
            fprintf(stderr, "%s%d", i ? " " : "", ids.data[i]);
        fprintf(stderr, "\n");
    }
    slm_ivec_free(&ids);
    slm_tokenizer_free(tok);
    slm_llama_free(&m);
    if (st) {
        slm_error("generate: %s", slm_errmsg());
        return slm_exit_code(st);
    }
    if (!ec.err && ferror(stdout)) ec.err = EIO;
    if (ec.err) {
        slm_error("generate: write to stdout failed: %s", strerror(ec.err));
        return SLM_EXIT_ERROR;
    }
    return SLM_EXIT_OK;
}
