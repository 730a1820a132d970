// shardlm ckpt inspect|verify|export: look into, check and convert training checkpoints.
#include "cmd.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "train/modeldir.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: shardlm ckpt inspect PATH      summary of a checkpoint; verifies every checksum\n"
        "       shardlm ckpt verify PATH       verifies every rank file (size, XXH64); exit 1 "
        "if bad\n"
        "       shardlm ckpt export PATH --hf OUT_DIR [--dtype fp32|bf16|fp16]\n"
        "                                      [--max-shard-size SIZE]\n"
        "PATH: a step directory, RUN_DIR/checkpoints or RUN_DIR (inspect / verify: the\n"
        "checkpoint `latest` names; export: the newest one that verifies); export also\n"
        "takes a Hugging Face directory (to change --dtype or --max-shard-size).\n"
        "export writes Hugging Face LlamaForCausalLM files: model.safetensors (or\n"
        "model-0000i-of-0000n.safetensors + model.safetensors.index.json above SIZE, e.g.\n"
        "5GB, 500MB, bytes; default 5GB), config.json, the run's tokenizer file and\n"
        "tokenizer_config.json, special_tokens_map.json, generation_config.json.\n");
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
    // At least one byte, finite, an integer count of bytes (0.5, 1e-300GB, inf and nan are
    // refused: (size_t)0 would mean "no limit").
    double bytes = v * mul;
    if (end == s || !(bytes >= 1) || !(bytes <= 1e18) || bytes != (double)(uint64_t)bytes)
        return -1;
    *out = (size_t)bytes;
    return 0;
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
                slm_error("--max-shard-size \"%s\": expected e.g. 5GB, 500MB or a whole number "
                          "of bytes >= 1 (finite)",
                          argv[i]);
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
    if (is_export) {
        // PATH is any model directory: a run's newest checkpoint that verifies, a named one, or
        // an HF directory (train/modeldir.h); the export itself is ckpt/'s.
        slm_model_dir d;
        slm_llama m;
        slm_status st = slm_model_dir_open(path, &d);
        if (!st) {
            st = slm_model_dir_load_model(&d, &m);
            if (!st) {
                st = slm_hf_export_dir(&m, d.weights_dir, d.tokenizer, out, dt, max_shard);
                slm_llama_free(&m);
            }
        }
        int rc = SLM_EXIT_OK;
        if (st) {
            slm_error("%s", slm_errmsg());
            rc = st == SLM_E_ARG ? SLM_EXIT_USAGE : SLM_EXIT_ERROR;
        } else if (d.step >= 0) {
            printf("exported step %lld to %s\n", (long long)d.step, out);
        } else {
            printf("exported %s to %s\n", path, out);
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
