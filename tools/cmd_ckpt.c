// shardlm ckpt inspect|verify|export: look into, check and convert training checkpoints.
#include "cmd.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "data/data.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"

typedef struct ckpt_args {
    const char *hf, *gguf, *chat_template;
    uint32_t gguf_type;
    bool overwrite;
    slm_dtype dtype;
    size_t max_shard;
    bool quiet;
    bool merge_lora;
    const char *lora_base;
} ckpt_args;

static slm_status parse_dtype(const char *opt, const char *v, void *dst) {
    return slm_dtype_parse(opt, v, dst);
}

static slm_status parse_gguf_type(const char *opt, const char *v, void *dst) {
    (void)opt;
    return slm_gguf_parse_type(v, dst);
}

static const slm_opt k_ckpt_opts[] = {
    {.name = "--hf",
     .type = SLM_OPT_STRING,
     .off = offsetof(ckpt_args, hf),
     .meta = "OUT_DIR",
     .help = "export: the Hugging Face directory to write (this or --gguf)"},
    {.name = "--gguf",
     .type = SLM_OPT_STRING,
     .off = offsetof(ckpt_args, gguf),
     .meta = "OUT.gguf",
     .help = "export: one GGUF file for llama.cpp instead (a LoRA checkpoint is merged)"},
    {.name = "--type",
     .type = SLM_OPT_CUSTOM,
     .off = offsetof(ckpt_args, gguf_type),
     .meta = "f32|f16|bf16|q8_0",
     .help = "export --gguf: type of the matrices (norms stay f32)",
     .parse = parse_gguf_type,
     .def = "f16"},
    {.name = "--overwrite",
     .type = SLM_OPT_FLAG,
     .off = offsetof(ckpt_args, overwrite),
     .help = "export --gguf: replace an existing OUT.gguf (else refused)"},
    {.name = "--chat-template",
     .type = SLM_OPT_STRING,
     .off = offsetof(ckpt_args, chat_template),
     .meta = "T",
     .help = "export --gguf: the chat template stored as tokenizer.chat_template: llama2, "
             "llama3, chatml or a template file (as prep --chat-template; written as Jinja), or a "
             "FILE.jinja stored as it is"},
    {.name = "--dtype",
     .type = SLM_OPT_CUSTOM,
     .off = offsetof(ckpt_args, dtype),
     .meta = "fp32|bf16|fp16",
     .help = "export: dtype of the weights",
     .parse = parse_dtype,
     .def = "fp32"},
    {.name = "--max-shard-size",
     .type = SLM_OPT_SIZE,
     .off = offsetof(ckpt_args, max_shard),
     .meta = "SIZE",
     .help = "export: split the weights into model-0000i-of-0000n.safetensors + "
             "model.safetensors.index.json above SIZE: 5GB, 500MB, 10KB (decimal, as HF's "
             "max_shard_size), 2GiB, 3MiB or a whole number of bytes >= 1",
     .def = "5GB"},
    {.name = "--quiet",
     .type = SLM_OPT_FLAG,
     .off = offsetof(ckpt_args, quiet),
     .help = "no progress lines while the checkpoint loads and the export writes (stderr)"},
    {.name = "--merge-lora",
     .type = SLM_OPT_FLAG,
     .off = offsetof(ckpt_args, merge_lora),
     .help = "export of a LoRA checkpoint: write the base with the adapters merged in "
             "(W + alpha/r B A) as Hugging Face LlamaForCausalLM files instead of a PEFT adapter"},
    {.name = "--lora-base",
     .type = SLM_OPT_STRING,
     .off = offsetof(ckpt_args, lora_base),
     .meta = "DIR",
     .help = "export of a LoRA checkpoint: its base Hugging Face directory, if moved from the "
             "path the checkpoint recorded (its XXH64 must match)"},
    {.type = SLM_OPT_END},
};

static const slm_cli k_ckpt_cli = {
    .cmd = "ckpt",
    .usage =
        "usage: shardlm ckpt inspect PATH      summary of a checkpoint; verifies every checksum\n"
        "       shardlm ckpt verify PATH       verifies every rank file (size, XXH64); exit 1 "
        "if bad\n"
        "       shardlm ckpt export PATH --hf OUT_DIR [--dtype fp32|bf16|fp16]\n"
        "                                      [--max-shard-size SIZE] [--merge-lora]\n"
        "                                      [--lora-base DIR] [--quiet]\n"
        "       shardlm ckpt export PATH --gguf OUT.gguf [--type f32|f16|bf16|q8_0]\n"
        "                                      [--chat-template T] [--overwrite]\n"
        "                                      [--lora-base DIR] [--quiet]\n"
        "PATH: a step directory, RUN_DIR/checkpoints or RUN_DIR (inspect / verify: the\n"
        "checkpoint `latest` names; export: the newest one that verifies); export also\n"
        "takes a Hugging Face directory (to change --dtype or --max-shard-size).\n"
        "A LoRA run's checkpoint (train --lora-rank) exports as a PEFT adapter directory\n"
        "(adapter_model.safetensors, adapter_config.json; peft.PeftModel.from_pretrained\n"
        "loads it onto the base), or with --merge-lora as the merged model (below).\n"
        "export writes Hugging Face LlamaForCausalLM files: model.safetensors (or shards above\n"
        "--max-shard-size), config.json, the run's tokenizer file and tokenizer_config.json,\n"
        "special_tokens_map.json, generation_config.json. --gguf writes one GGUF v3 file\n"
        "(llama architecture, tokenizer, weights; docs/formats.md \"GGUF export\").\n\n",
    .opts = k_ckpt_opts,
    .footer = "\nexit codes: 0 ok, 1 runtime error (bad checkpoint, I/O), 2 usage error\n",
    .max_positional = 1,
};

// The Jinja text of --chat-template T for a GGUF: a FILE.jinja as it is, else a shardlm template
// (llama2, llama3, chatml, a template file) checked against the tokenizer and written as Jinja.
static slm_status gguf_chat_template(const char *spec, const char *tok_path, char **out) {
    *out = NULL;
    size_t n = strlen(spec), len = 0;
    if (n > 6 && !strcmp(spec + n - 6, ".jinja")) {
        slm_status st = slm_file_read_all(spec, out, &len);
        if (!st && (strlen(*out) != len || !len)) {
            free(*out);
            *out = NULL;
            st = slm_fail(SLM_E_FORMAT,
                          "--chat-template %s: empty or holds a NUL byte (expected Jinja text)",
                          spec);
        }
        return st;
    }
    slm_chat_template *t = NULL;
    slm_tokenizer *tok = NULL;
    slm_status st = slm_chat_template_load(spec, &t);
    if (!st && tok_path) st = slm_tokenizer_load(tok_path, &tok);
    if (!st && tok) st = slm_chat_template_check(t, tok);
    if (!st) *out = slm_chat_template_to_jinja(t);
    slm_tokenizer_free(tok);
    slm_chat_template_free(t);
    return st;
}

// Whether option `name` was given on the command line.
static bool seen_opt(const slm_opt_seen *seen, const char *name) {
    for (int i = 0; k_ckpt_opts[i].type != SLM_OPT_END; i++)
        if (!strcmp(k_ckpt_opts[i].name, name)) return seen->count[i] > 0;
    return false;
}

// --gguf OUT inside the directory the model is read from (the checkpoint step_N or HF
// directory), or OUT the source GGUF file itself: SLM_E_ARG naming both (with --overwrite the
// export would replace a file of its own source). realpath of OUT's directory against the source.
static slm_status gguf_out_in_source(const char *out, const slm_model_dir *d) {
    char *parent = slm_path_parent(out);
    char *rp = realpath(parent, NULL), *src = realpath(d->weights_dir, NULL);
    char *rout = rp && strrchr(out, '/') ? slm_path_join(rp, strrchr(out, '/') + 1)
                 : rp                    ? slm_path_join(rp, out)
                                         : NULL;
    slm_status st = SLM_OK;
    size_t n = src ? strlen(src) : 0;
    if (rout && src &&
        (!strcmp(rout, src) ||
         (!strncmp(rp, src, n) && (rp[n] == 0 || rp[n] == '/' || !strcmp(src, "/")))))
        st = slm_fail(SLM_E_ARG,
                      "ckpt export: --gguf %s lies inside the source model %s (%s); write it "
                      "outside the model directory",
                      out, d->path, src);
    free(parent);
    free(rp);
    free(src);
    free(rout);
    return st;
}

// Flushes stdout; false (after printing the reason) when a write to it failed (a full disk,
// a closed pipe): inspect / verify must not report success for output that was lost.
static bool stdout_written(void) {
    int err = 0;
    errno = 0;
    if (fflush(stdout) != 0) err = errno ? errno : EIO;
    if (ferror(stdout) && !err) err = errno ? errno : EIO;
    if (!err) return true;
    slm_error("ckpt: write to stdout failed: %s", strerror(err));
    return false;
}

int slm_cmd_ckpt(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        slm_opt_help(argc < 2 ? stderr : stdout, &k_ckpt_cli, NULL);
        return argc < 2 ? SLM_EXIT_USAGE : SLM_EXIT_OK;
    }
    const char *sub = argv[1];
    ckpt_args x = {.dtype = SLM_DTYPE_F32, .max_shard = 5000000000ull, .gguf_type = 1};
    slm_opt_seen seen;
    int rc0 = slm_opt_parse(&k_ckpt_cli, argc - 1, argv + 1, &x, &seen);
    if (rc0 >= 0) return rc0;
    if (x.quiet) slm_progress_enable(false);
    const char *path = seen.n_positional ? seen.positional[0] : NULL, *out = x.hf;
    const char *dest = x.gguf ? x.gguf : out;
    slm_dtype dt = x.dtype;
    size_t max_shard = x.max_shard;
    bool is_export = !strcmp(sub, "export");
    if (strcmp(sub, "inspect") && strcmp(sub, "verify") && !is_export) {
        slm_error("ckpt: unknown subcommand \"%s\" (inspect, verify, export)", sub);
        return SLM_EXIT_USAGE;
    }
    if (!path || (is_export && !out == !x.gguf)) {
        slm_error("ckpt %s: needs PATH%s", sub,
                  is_export ? " and one of --hf OUT_DIR or --gguf OUT.gguf" : "");
        return SLM_EXIT_USAGE;
    }
    if (!x.gguf && (x.overwrite || x.chat_template || seen_opt(&seen, "--type"))) {
        slm_error("ckpt %s: --type, --overwrite and --chat-template apply to --gguf only", sub);
        return SLM_EXIT_USAGE;
    }
    if (x.gguf &&
        (x.merge_lora || seen_opt(&seen, "--dtype") || seen_opt(&seen, "--max-shard-size"))) {
        slm_error("ckpt export: --dtype, --max-shard-size and --merge-lora apply to --hf only "
                  "(--gguf takes --type, and merges a LoRA checkpoint's adapters)");
        return SLM_EXIT_USAGE;
    }
    if (is_export) {
        // PATH is any model directory: a run's newest checkpoint that verifies, a named one, or
        // an HF directory (slm_model_dir_open, train/train.h); the export itself is ckpt/'s.
        slm_model_dir d;
        slm_llama m;
        slm_status st = slm_model_dir_open(path, &d);
        bool peft = false;
        if (!st && (x.merge_lora || x.lora_base) && !slm_model_dir_is_lora(&d)) {
            slm_error("ckpt export: --merge-lora / --lora-base: %s is not a LoRA checkpoint "
                      "(train --lora-rank)",
                      path);
            slm_model_dir_close(&d);
            return SLM_EXIT_USAGE;
        }
        if (!st) {
            peft = slm_model_dir_is_lora(&d) && !x.merge_lora && !x.gguf;
            d.keep_lora = peft;
            d.lora_base = x.lora_base;
            if (x.gguf) st = gguf_out_in_source(x.gguf, &d); // before the model is loaded
            if (!st) st = slm_model_dir_load_model(&d, &m);
            if (!st && peft) {
                // adapter_config's base_model_name_or_path: absolute, as train records it (a
                // relative --lora-base would resolve against the loader's working directory)
                char *abs = x.lora_base ? realpath(x.lora_base, NULL) : NULL;
                const char *base =
                    x.lora_base ? (abs ? abs : x.lora_base) : slm_ckpt_get_meta(d.ckpt)->lora_base;
                st = slm_peft_export_dir(&m, d.weights_dir, base, out, dt);
                free(abs);
                slm_llama_free(&m);
            } else if (!st && x.gguf) {
                char *tpl = NULL;
                if (x.chat_template) st = gguf_chat_template(x.chat_template, d.tokenizer, &tpl);
                slm_gguf_export_opts go = {.tokenizer_path = d.tokenizer,
                                           .chat_template = tpl,
                                           .type = x.gguf_type,
                                           .overwrite = x.overwrite};
                if (!st) st = slm_gguf_export(&m, x.gguf, &go);
                free(tpl);
                slm_llama_free(&m);
            } else if (!st) {
                st = slm_hf_export_dir(&m, d.weights_dir, d.tokenizer, out, dt, max_shard);
                slm_llama_free(&m);
            }
        }
        int rc = SLM_EXIT_OK;
        if (st) {
            slm_error("%s", slm_errmsg());
            rc = slm_exit_code(st);
        } else if (d.step >= 0) {
            printf("exported step %lld to %s%s\n", (long long)d.step, dest,
                   peft                                                    ? " (PEFT LoRA adapter)"
                   : x.merge_lora || (x.gguf && slm_model_dir_is_lora(&d)) ? " (LoRA merged)"
                                                                           : "");
        } else {
            printf("exported %s to %s\n", path, dest);
        }
        slm_model_dir_close(&d);
        if (!stdout_written()) rc = SLM_EXIT_ERROR;
        return rc;
    }
    slm_ckpt *c = NULL;
    slm_status st = slm_ckpt_open(path, &c);
    if (st) {
        slm_error("%s", slm_errmsg());
        return SLM_EXIT_ERROR;
    }
    int rc = SLM_EXIT_OK;
    if (!strcmp(sub, "inspect")) slm_ckpt_print_summary(c, stdout);
    st = slm_ckpt_verify(c);
    if (st) {
        slm_error("%s", slm_errmsg());
        rc = SLM_EXIT_ERROR;
    } else {
        printf("%s: OK (%d units, every rank file's size and XXH64 match the manifest)\n",
               slm_ckpt_dir(c), slm_ckpt_n_units(c));
    }
    if (!stdout_written()) rc = SLM_EXIT_ERROR;
    slm_ckpt_free(c);
    return rc;
}
