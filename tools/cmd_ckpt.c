// shardlm ckpt inspect|verify|export: look into, check and convert training checkpoints.
#include "cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: shardlm ckpt inspect PATH      summary of a checkpoint; verifies every checksum\n"
        "       shardlm ckpt verify PATH       verifies every rank file (size, XXH64); exit 1 "
        "if bad\n"
        "       shardlm ckpt export PATH --hf OUT_DIR [--dtype fp32|bf16|fp16]\n"
        "                                      [--max-shard-size SIZE]\n"
        "PATH: a step directory, RUN_DIR/checkpoints (uses `latest`) or RUN_DIR.\n"
        "export writes Hugging Face LlamaForCausalLM files: model.safetensors (or\n"
        "model-0000i-of-0000n.safetensors + model.safetensors.index.json above SIZE, e.g.\n"
        "5GB, 500MB, bytes; default 5GB), config.json and the run's tokenizer file.\n");
}

// "5GB" / "500MB" / "10KB" (decimal, as HF's max_shard_size) or plain bytes.
static int parse_size(const char *s, size_t *out) {
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    if (!strcmp(end, "GB"))
        mul = 1e9;
    else if (!strcmp(end, "MB"))
        mul = 1e6;
    else if (!strcmp(end, "KB"))
        mul = 1e3;
    else if (!strcmp(end, "GiB"))
        mul = 1073741824.0;
    else if (!strcmp(end, "MiB"))
        mul = 1048576.0;
    else if (*end)
        return -1;
    if (!(v > 0) || end == s) return -1;
    *out = (size_t)(v * mul);
    return 0;
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
            }
            free(txt);
            free(dst);
        } else {
            slm_warn("%s: not found; export has no tokenizer file", src);
        }
        free(src);
        if (st) goto fail;
    }
    printf("exported step %lld to %s\n", (long long)M->step, out);
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
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? SLM_EXIT_USAGE : SLM_EXIT_OK;
    }
    const char *sub = argv[1], *path = NULL, *out = NULL, *dtype = "fp32";
    size_t max_shard = 5000000000ull;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return SLM_EXIT_OK;
        } else if (!strcmp(a, "--hf") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(a, "--dtype") && i + 1 < argc) {
            dtype = argv[++i];
        } else if (!strcmp(a, "--max-shard-size") && i + 1 < argc) {
            if (parse_size(argv[++i], &max_shard)) {
                slm_error("--max-shard-size \"%s\": expected e.g. 5GB, 500MB or bytes", argv[i]);
                return SLM_EXIT_USAGE;
            }
        } else if (a[0] == '-' || path) {
            slm_error("ckpt %s: unexpected argument \"%s\"", sub, a);
            usage(stderr);
            return SLM_EXIT_USAGE;
        } else {
            path = a;
        }
    }
    bool is_export = !strcmp(sub, "export");
    if (strcmp(sub, "inspect") && strcmp(sub, "verify") && !is_export) {
        slm_error("ckpt: unknown subcommand \"%s\" (inspect, verify, export)", sub);
        return SLM_EXIT_USAGE;
    }
    if (!path || (is_export && !out)) {
        slm_error("ckpt %s: needs PATH%s", sub, is_export ? " and --hf OUT_DIR" : "");
        return SLM_EXIT_USAGE;
    }
    slm_st_dtype dt;
    if (slm_st_parse_dtype(dtype, &dt)) {
        slm_error("%s", slm_errmsg());
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
        rc = do_export(c, out, dt, max_shard);
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
    slm_ckpt_free(c);
    return rc;
}
