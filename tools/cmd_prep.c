// shardlm prep: tokenize a corpus into token shards + manifest.json (src/data/prep.c).
#include "cmd.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "dist/dist.h"

static void prep_usage(FILE *f) {
    fprintf(
        f,
        "usage: shardlm prep --tokenizer FILE --input PATH [--input PATH ...] --out DIR\n"
        "                    [--shard-tokens N] [--val-fraction F] [--workers W] [--seed S]\n"
        "                    [--quiet]\n"
        "\n"
        "Tokenizes a corpus into token shards (DIR/train_*.bin, DIR/val_*.bin), copies the\n"
        "tokenizer into DIR and writes DIR/manifest.json (docs/formats.md).\n"
        "  --tokenizer FILE    tokenizer.json (byte-level BPE) or tokenizer.model (SentencePiece)\n"
        "  --input PATH        a text file (documents separated by blank lines), a *.jsonl file\n"
        "                      (one document per line, field \"text\"), a directory (recursive,\n"
        "                      sorted, dot-files skipped) or - for stdin (plain text); "
        "repeatable,\n"
        "                      and further paths may follow --input without repeating it\n"
        "  --out DIR           output directory (created). The dataset is built in a hidden\n"
        "                      sibling .DIR.prep-tmp.PID and swapped in only on success: a\n"
        "                      failed or interrupted run leaves an earlier dataset in DIR\n"
        "                      intact; other files in DIR are kept. DIR may lie inside an\n"
        "                      --input directory (it is skipped) but must not be one\n"
        "  --shard-tokens N    target tokens per shard file (default 16777216)\n"
        "  --val-fraction F    fraction of documents in val, by hash of content (default 0.01)\n"
        "  --workers W         worker threads per process (default: online CPUs / ranks)\n"
        "  --seed S            key of the train/val hash, 0 <= S < 2^53 (default 1234)\n"
        "  --quiet             no progress output and no summary line (errors and warnings\n"
        "                      are still printed, on stderr)\n"
        "  --unit-bytes N      work unit size (default 1 MiB; output multiset independent)\n"
        "  --collective-timeout S  under mpirun: abort the whole job when one collective waits\n"
        "                      more than S seconds, S > 0 and finite (default 600); keep it\n"
        "                      above the slowest rank's share of the corpus\n"
        "Under mpirun each rank prepares a disjoint part of the inputs; rank 0 writes the\n"
        "manifest. Every rank must get the same options (all but --workers and --quiet):\n"
        "they are compared first and a difference stops every rank naming the option and\n"
        "the ranks (exit 2; 1 when only the tokenizer file's contents differ).\n"
        "Exit codes: 0 ok, 1 runtime error (I/O, bad input), 2 usage error.\n");
}

int slm_cmd_prep(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            prep_usage(stdout);
            return SLM_EXIT_OK;
        }
    slm_prep_opts o;
    memset(&o, 0, sizeof o);
    o.shard_tokens = 16777216;
    o.val_fraction = 0.01;
    o.seed = 1234;
    o.progress = true;
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    int n_in = 0;
    int64_t workers = 0;
    double timeout_s = 600.0; // dist/'s default deadline
    slm_status st = SLM_OK;
    bool in_inputs = false;
    for (int i = 1; i < argc && st == SLM_OK; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--quiet")) {
            o.progress = false;
            in_inputs = false;
        } else if (a[0] == '-' && a[1] == '-') {
            in_inputs = false;
            static const char *const known[] = {"--tokenizer",    "--out",          "--input",
                                                "--shard-tokens", "--val-fraction", "--unit-bytes",
                                                "--workers",      "--seed",
                                                "--collective-timeout"};
            bool is_known = false;
            for (size_t k = 0; k < sizeof known / sizeof *known; k++)
                is_known = is_known || !strcmp(a, known[k]);
            if (!is_known) {
                st = slm_fail(SLM_E_ARG, "prep: unknown option %s (see shardlm prep --help)", a);
                break;
            }
            // A value never starts with "--": `--input --out DIR` lacks the input path.
            if (!has_val || !strncmp(argv[i + 1], "--", 2)) {
                st = slm_fail(SLM_E_ARG, "prep: option %s needs a value", a);
                break;
            }
            const char *v = argv[++i];
            int64_t x = 0;
            if (!strcmp(a, "--tokenizer"))
                o.tokenizer_path = v;
            else if (!strcmp(a, "--out"))
                o.out_dir = v;
            else if (!strcmp(a, "--input")) {
                inputs[n_in++] = v;
                in_inputs = true;
            } else if (!strcmp(a, "--shard-tokens")) {
                st = slm_parse_i64("--shard-tokens", v, 1, INT64_MAX / 8, &x);
                o.shard_tokens = x;
            } else if (!strcmp(a, "--val-fraction"))
                st = slm_parse_f64("--val-fraction", v, &o.val_fraction);
            else if (!strcmp(a, "--unit-bytes")) {
                st = slm_parse_i64("--unit-bytes", v, 1, INT64_C(1) << 40, &x);
                o.unit_bytes = x;
            } else if (!strcmp(a, "--workers"))
                st = slm_parse_i64("--workers", v, 1, 999, &workers);
            else if (!strcmp(a, "--collective-timeout")) {
                st = slm_parse_f64("--collective-timeout", v, &timeout_s);
                if (st == SLM_OK && !(isfinite(timeout_s) && timeout_s > 0))
                    st = slm_fail(SLM_E_ARG, "prep: --collective-timeout %s: must be > 0 seconds "
                                  "and finite", v);
            } else if (!strcmp(a, "--seed")) {
                st = slm_parse_i64("--seed", v, 0, (INT64_C(1) << 53) - 1, &x);
                o.seed = (uint64_t)x;
            } else
                st = slm_fail(SLM_E_ARG, "prep: unknown option %s (see shardlm prep --help)", a);
        } else if (in_inputs) {
            inputs[n_in++] = a; // shell globs: --input a.txt b.txt c.txt
        } else {
            st = slm_fail(SLM_E_ARG, "prep: unexpected argument \"%s\"", a);
        }
    }
    if (st == SLM_OK && !o.tokenizer_path)
        st = slm_fail(SLM_E_ARG, "prep: --tokenizer FILE is required");
    if (st == SLM_OK && !o.out_dir) st = slm_fail(SLM_E_ARG, "prep: --out DIR is required");
    if (st == SLM_OK && n_in == 0) st = slm_fail(SLM_E_ARG, "prep: --input PATH is required");
    if (st == SLM_OK && !(o.val_fraction >= 0 && o.val_fraction < 1))
        st = slm_fail(SLM_E_ARG, "prep: --val-fraction %g, expected in [0, 1)", o.val_fraction);
    if (st) {
        slm_error("%s", slm_errmsg());
        free(inputs);
        return SLM_EXIT_USAGE;
    }
    o.inputs = inputs;
    o.n_inputs = n_in;

    st = slm_dist_init(&argc, &argv);
    if (st) {
        slm_error("%s", slm_errmsg());
        free(inputs);
        return SLM_EXIT_ERROR;
    }
    slm_dist_set_timeout(timeout_s);
    // Ranks started with different options stop here, together, with one message.
    st = slm_prep_agree(&o, timeout_s);
    if (st) {
        if (slm_dist_rank() == 0) slm_error("prep: %s", slm_errmsg());
        free(inputs);
        slm_dist_finalize();
        return st == SLM_E_ARG ? SLM_EXIT_USAGE : SLM_EXIT_ERROR;
    }
    if (workers == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        workers = cpus > 0 ? cpus / slm_dist_world() : 1;
        if (workers < 1) workers = 1;
        if (workers > 64) workers = 64;
    }
    o.workers = (int)workers;
    st = slm_prep_run(&o);
    if (st) slm_error("%s", slm_errmsg());
    free(inputs);
    slm_dist_finalize();
    return st == SLM_OK ? SLM_EXIT_OK : SLM_EXIT_ERROR;
}
