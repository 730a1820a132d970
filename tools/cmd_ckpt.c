// shardlm ckpt inspect|verify|export: look into, check and convert training checkpoints.
#include "cmd.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

typedef struct ckpt_args {
    const char *hf;
    slm_st_dtype dtype;
    size_t max_shard;
} ckpt_args;

static slm_status parse_dtype(const char *opt, const char *v, void *dst) {
    (void)opt;
    return slm_st_parse_dtype(v, dst);
}

static const slm_opt k_ckpt_opts[] = {
    {.name = "--hf", .type = SLM_OPT_STRING, .off = offsetof(ckpt_args, hf), .meta = "OUT_DIR",
     .help = "export: the Hugging Face directory to write (required)"},
    {.name = "--dtype", .type = SLM_OPT_CUSTOM, .off = offsetof(ckpt_args, dtype),
     .meta = "fp32|bf16|fp16", .help = "export: dtype of the weights", .parse = parse_dtype,
     .def = "fp32"},
    {.name = "--max-shard-size", .type = SLM_OPT_SIZE, .off = offsetof(ckpt_args, max_shard),
     .meta = "SIZE",
     .help = "export: split the weights into model-0000i-of-0000n.safetensors + "
             "model.safetensors.index.json above SIZE: 5GB, 500MB, 10KB (decimal, as HF's "
             "max_shard_size), 2GiB, 3MiB or a whole number of bytes >= 1",
     .def = "5GB"},
    {.type = SLM_OPT_END},
};

static const slm_cli k_ckpt_cli = {
    .cmd = "ckpt",
    .usage =
        "usage: shardlm ckpt inspect PATH      summary of a checkpoint; verifies every checksum\n"
        "       shardlm ckpt verify PATH       verifies every rank file (size, XXH64); exit 1 "
        "if bad\n"
        "       shardlm ckpt export PATH --hf OUT_DIR [--dtype fp32|bf16|fp16]\n"
        "                                      [--max-shard-size SIZE]\n"
        "PATH: a step directory, RUN_DIR/checkpoints (uses `latest`) or RUN_DIR.\n"
        "export writes Hugging Face LlamaForCausalLM files: model.safetensors (or shards above\n"
        "--max-shard-size), config.json, the run's tokenizer file and tokenizer_config.json,\n"
        "special_tokens_map.json, generation_config.json.\n\n",
    .opts = k_ckpt_opts,
    .footer = "\nexit codes: 0 ok, 1 runtime error (bad checkpoint, I/O), 2 usage error\n",
    .max_positional = 1,
};

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

// Before any allocation: the manifest's model_config against its own unit layout (built without
// buffers), then the memory export needs (the full fp32 parameters, plus the gradient buffers
// slm_llama_init allocates beside them) against the memory probe.
static slm_status export_precheck(slm_ckpt *c, const slm_llama_config *cfg) {
    slm_llama lay;
    slm_status st = slm_llama_init(&lay, cfg, false);
    if (st) return st;
    st = slm_ckpt_check_model(c, &lay);
    double n = 0;
    for (int u = 0; u < lay.n_units; u++) n += (double)lay.units[u].numel;
    slm_llama_free(&lay);
    if (st) return st;
    return slm_mem_check(2.0 * n * sizeof(float),
                         "ckpt export of %s (%.3g parameters: fp32 weights and gradient buffers)",
                         slm_ckpt_dir(c), n);
}

static int do_export(slm_ckpt *c, const char *out, slm_st_dtype dt, size_t max_shard) {
    const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
    slm_llama m;
    slm_status st = export_precheck(c, &M->cfg);
    if (st) goto fail0;
    st = slm_llama_init(&m, &M->cfg, true);
    if (st) goto fail0;
    if ((st = slm_ckpt_check_model(c, &m))) goto fail;
    for (int u = 0; u < m.n_units && !st; u++)
        st = slm_ckpt_read_range(c, u, 0, m.units[u].numel, m.params[u], NULL, NULL);
    if (st) goto fail;
    if ((st = slm_hf_export(&m, out, dt, max_shard))) goto fail;
    if (M->tokenizer_file[0]) {
        // The tokenizer lives in the run directory: RUN_DIR/checkpoints/step_N/../../<file>.
        char rel[128];
        snprintf(rel, sizeof rel, "../../%s", M->tokenizer_file);
        char *src = slm_path_join(slm_ckpt_dir(c), rel);
        if (slm_is_file(src)) {
            char *txt = NULL;
            size_t len = 0;
            char *dst = slm_path_join(out, M->tokenizer_file);
            st = slm_file_read_all(src, &txt, &len);
            if (!st) {
                uint64_t h = slm_xxh64(txt, len, 0);
                if (M->has_tokenizer && h != M->tokenizer_xxh64)
                    slm_warn("%s: differs from the tokenizer the checkpoint recorded (xxh64)", src);
                st = slm_file_write_atomic(dst, txt, len);
                // tokenizer_config.json & co., bos/eos ids in config.json (for transformers)
                if (!st)
                    st = slm_hf_write_tokenizer_files(out, dst, M->cfg.max_position_embeddings);
            }
            free(txt);
            free(dst);
        } else {
            slm_warn("%s: not found; export has no tokenizer file", src);
        }
        free(src);
        if (st) goto fail;
    }
    slm_llama_free(&m);
    return SLM_EXIT_OK;
fail:
    slm_llama_free(&m);
fail0:
    slm_error("%s", slm_errmsg());
    return SLM_EXIT_ERROR;
}

int slm_cmd_ckpt(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        slm_opt_help(argc < 2 ? stderr : stdout, &k_ckpt_cli, NULL);
        return argc < 2 ? SLM_EXIT_USAGE : SLM_EXIT_OK;
    }
    const char *sub = argv[1];
    ckpt_args x = {.dtype = SLM_ST_F32, .max_shard = 5000000000ull};
    slm_opt_seen seen;
    int rc0 = slm_opt_parse(&k_ckpt_cli, argc - 1, argv + 1, &x, &seen);
    if (rc0 >= 0) return rc0;
    const char *path = seen.n_positional ? seen.positional[0] : NULL, *out = x.hf;
    slm_st_dtype dt = x.dtype;
    size_t max_shard = x.max_shard;
    bool is_export = !strcmp(sub, "export");
    if (strcmp(sub, "inspect") && strcmp(sub, "verify") && !is_export) {
        slm_error("ckpt: unknown subcommand \"%s\" (inspect, verify, export)", sub);
        return SLM_EXIT_USAGE;
    }
    if (!path || (is_export && !out)) {
        slm_error("ckpt %s: needs PATH%s", sub, is_export ? " and --hf OUT_DIR" : "");
        return SLM_EXIT_USAGE;
    }
    slm_ckpt *c = NULL;
    slm_status st = slm_ckpt_open(path, &c);
    if (st) {
        slm_error("%s", slm_errmsg());
        return SLM_EXIT_ERROR;
    }
    int rc = SLM_EXIT_OK;
    if (is_export) {
        // Everything is written into a temp sibling of OUT_DIR and swapped in at the end, so
        // OUT_DIR never mixes two exports (ckpt.h slm_export_dir_commit).
        char *tmp = NULL;
        char ro[PATH_MAX], rc_dir[PATH_MAX];
        size_t n = 0;
        if (realpath(out, ro) && realpath(slm_ckpt_dir(c), rc_dir)) n = strlen(ro);
        if (n && !strncmp(rc_dir, ro, n) && (rc_dir[n] == '/' || rc_dir[n] == 0 || n == 1)) {
            // The swap would move the run (or the checkpoint) itself.
            slm_error("export: --hf %s is or contains the checkpoint %s; expected an output "
                      "directory outside the run directory",
                      out, slm_ckpt_dir(c));
            rc = SLM_EXIT_USAGE;
        } else if (slm_export_dir_begin(out, &tmp)) {
            slm_error("%s", slm_errmsg());
            rc = SLM_EXIT_ERROR;
        } else {
            rc = do_export(c, tmp, dt, max_shard);
            if (rc == SLM_EXIT_OK && slm_export_dir_commit(tmp, out)) {
                slm_error("%s", slm_errmsg());
                rc = SLM_EXIT_ERROR;
            }
            if (rc != SLM_EXIT_OK) slm_export_dir_abort(tmp);
            else printf("exported step %lld to %s\n", (long long)slm_ckpt_get_meta(c)->step, out);
            free(tmp);
        }
    } else {
        if (!strcmp(sub, "inspect")) slm_ckpt_print_summary(c, stdout);
        st = slm_ckpt_verify(c);
        if (st) {
            slm_error("%s", slm_errmsg());
            rc = SLM_EXIT_ERROR;
        } else {
            printf("%s: OK (%d units, every rank file's size and XXH64 match the manifest)\n",
                   slm_ckpt_dir(c), slm_ckpt_n_units(c));
        }
    }
    if (!stdout_written()) rc = SLM_EXIT_ERROR;
    slm_ckpt_free(c);
    return rc;
}
