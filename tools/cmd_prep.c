// shardlm prep: tokenize a corpus into token shards + manifest.json (src/data/prep.c).
#include "cmd.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "dist/dist.h"
#include "objstore/objstore.h"

typedef struct prep_args {
    const char *tokenizer, *out, *format, *chat_template;
    slm_opt_list inputs;
    int64_t shard_tokens, unit_bytes, workers, seed;
    double val_fraction, timeout_s;
    bool quiet;
    const char *s3_endpoint, *s3_region;
} prep_args;

#define A(f) offsetof(prep_args, f)
static const slm_opt k_prep_opts[] = {
    {.name = "--tokenizer",
     .type = SLM_OPT_STRING,
     .off = A(tokenizer),
     .meta = "FILE",
     .help = "tokenizer.json (byte-level BPE) or tokenizer.model (SentencePiece)"},
    {.name = "--input",
     .type = SLM_OPT_LIST,
     .off = A(inputs),
     .meta = "PATH",
     .help = "a text file (documents separated by blank lines), a *.jsonl file (one document "
             "per line, field \"text\"), a directory (recursive, sorted, dot-files skipped) or - "
             "for stdin (plain text); repeatable, and further paths may follow --input without "
             "repeating it"},
    {.name = "--out",
     .type = SLM_OPT_STRING,
     .off = A(out),
     .meta = "DIR",
     .help = "output directory (created). The dataset is built in a hidden sibling "
             ".DIR.prep-tmp.PID and swapped in only on success: a failed or interrupted run "
             "leaves an earlier dataset in DIR intact; other files in DIR are kept. DIR may lie "
             "inside an --input directory (it is skipped) but must not be one. An "
             "s3://BUCKET/PREFIX/ is prepared in a local temp directory ($TMPDIR), then uploaded: "
             "shards and tokenizer first, manifest.json last (docs/storage.md)"},
    {.name = "--shard-tokens",
     .type = SLM_OPT_INT64,
     .off = A(shard_tokens),
     .meta = "N",
     .help = "target tokens per shard file",
     .ilo = 1,
     .ihi = INT64_MAX / 8},
    {.name = "--val-fraction",
     .type = SLM_OPT_DOUBLE,
     .off = A(val_fraction),
     .meta = "F",
     .help = "fraction of documents in val, by hash of content",
     .dlo = 0,
     .dhi = 1,
     .flags = SLM_OPTF_HI_OPEN},
    {.name = "--workers",
     .type = SLM_OPT_INT64,
     .off = A(workers),
     .meta = "W",
     .help = "worker threads per process",
     .ilo = 1,
     .ihi = 999,
     .def = "online CPUs / ranks, at most 64"},
    {.name = "--seed",
     .type = SLM_OPT_INT64,
     .off = A(seed),
     .meta = "S",
     .help = "key of the train/val hash, below 2^53",
     .ilo = 0,
     .ihi = (INT64_C(1) << 53) - 1},
    {.name = "--format",
     .type = SLM_OPT_STRING,
     .off = A(format),
     .meta = "F",
     .help = "text (documents), prompt-completion (JSONL {\"prompt\", \"completion\"}) or chat "
             "(JSONL {\"messages\": [{\"role\", \"content\"}, ...]}); the last two write a "
             "per-token loss mask (loss on completion / assistant tokens only; docs/formats.md "
             "\"Instruction data\")",
     .def = "text"},
    {.name = "--chat-template",
     .type = SLM_OPT_STRING,
     .off = A(chat_template),
     .meta = "T",
     .help = "llama2 ([INST] <<SYS>> form), llama3 (header form), chatml (<|im_start|> form) or a "
             "template file (JSON); "
             "required by --format chat, optional for prompt-completion"},
    {.name = "--quiet",
     .type = SLM_OPT_FLAG,
     .off = A(quiet),
     .help = "no progress output and no summary line (errors and warnings are still printed, "
             "on stderr)"},
    {.name = "--unit-bytes",
     .type = SLM_OPT_INT64,
     .off = A(unit_bytes),
     .meta = "N",
     .help = "work unit size (output multiset independent)",
     .ilo = 1,
     .ihi = INT64_C(1) << 40,
     .def = "1 MiB"},
    {.name = "--collective-timeout",
     .type = SLM_OPT_DOUBLE,
     .off = A(timeout_s),
     .meta = "S",
     .help = "under mpirun: abort the whole job when one collective waits more than S seconds; "
             "keep it above the slowest rank's share of the corpus",
     .dlo = 0,
     .dhi = INFINITY,
     .flags = SLM_OPTF_LO_OPEN,
     .range = "> 0 seconds and finite"},
    {.name = "--s3-endpoint",
     .type = SLM_OPT_STRING,
     .off = A(s3_endpoint),
     .meta = "URL",
     .help = "with --out s3://...: the S3 endpoint (default AWS_ENDPOINT_URL...; docs/storage.md)"},
    {.name = "--s3-region",
     .type = SLM_OPT_STRING,
     .off = A(s3_region),
     .meta = "REGION",
     .help = "with --out s3://...: the signing region (default AWS_REGION, ..., us-east-1)"},
    {.type = SLM_OPT_END},
};
#undef A

static const slm_cli k_prep_cli = {
    .cmd = "prep",
    .usage = "usage: shardlm prep --tokenizer FILE --input PATH [--input PATH ...] --out DIR\n"
             "                    [--shard-tokens N] [--val-fraction F] [--workers W] [--seed S]\n"
             "                    [--format text|prompt-completion|chat] [--chat-template T]\n"
             "                    [--quiet]\n"
             "\n"
             "Tokenizes a corpus into token shards (DIR/train_*.bin, DIR/val_*.bin), copies the\n"
             "tokenizer into DIR and writes DIR/manifest.json (docs/formats.md).\n\n",
    .opts = k_prep_opts,
    .footer = "\nUnder mpirun each rank prepares a disjoint part of the inputs; rank 0 writes the\n"
              "manifest. Every rank must get the same options (all but --workers and --quiet):\n"
              "they are compared first and a difference stops every rank naming the option and\n"
              "the ranks (exit 2; 1 when only the tokenizer file's contents differ).\n"
              "Exit codes: 0 ok, 1 runtime error (I/O, bad input), 2 usage error.\n",
    .strict_values = true,
    .help_anywhere = true,
};

int slm_cmd_prep(int argc, char **argv) {
    prep_args x = {.shard_tokens = 16777216,
                   .val_fraction = 0.01,
                   .seed = 1234,
                   .timeout_s = 600.0}; // dist/'s default deadline
    int rc = slm_opt_parse(&k_prep_cli, argc, argv, &x, NULL);
    slm_status st = SLM_OK;
    if (rc < 0 && !x.tokenizer)
        st = slm_fail(SLM_E_ARG, "prep: --tokenizer FILE is required");
    else if (rc < 0 && !x.out)
        st = slm_fail(SLM_E_ARG, "prep: --out DIR is required");
    else if (rc < 0 && x.inputs.n == 0)
        st = slm_fail(SLM_E_ARG, "prep: --input PATH is required");
    if (st) {
        slm_error("%s", slm_errmsg());
        rc = SLM_EXIT_USAGE;
    }
    if (rc >= 0) {
        slm_opt_list_free(&x.inputs);
        return rc;
    }
    slm_prep_opts o;
    memset(&o, 0, sizeof o);
    o.tokenizer_path = x.tokenizer;
    o.out_dir = x.out;
    o.shard_tokens = x.shard_tokens;
    o.val_fraction = x.val_fraction;
    o.seed = (uint64_t)x.seed;
    o.unit_bytes = x.unit_bytes;
    o.progress = !x.quiet;
    o.chat_template = x.chat_template;
    if (!x.format || !strcmp(x.format, "text"))
        o.format = SLM_PREP_TEXT;
    else if (!strcmp(x.format, "prompt-completion"))
        o.format = SLM_PREP_PROMPT_COMPLETION;
    else if (!strcmp(x.format, "chat"))
        o.format = SLM_PREP_CHAT;
    else {
        slm_error("prep: --format %s: expected text, prompt-completion or chat", x.format);
        slm_opt_list_free(&x.inputs);
        return SLM_EXIT_USAGE;
    }
    const char **inputs = x.inputs.v;
    int n_in = x.inputs.n;
    int64_t workers = x.workers;
    double timeout_s = x.timeout_s;
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
        return slm_exit_code(st);
    }
    if (workers == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        workers = cpus > 0 ? cpus / slm_dist_world() : 1;
        if (workers < 1) workers = 1;
        if (workers > 64) workers = 64;
    }
    o.workers = (int)workers;
    slm_s3_set_defaults(x.s3_endpoint, x.s3_region);
    // --out s3://...: prepare into a local staging directory named after the URI (the same on
    // every rank of a host), upload it from rank 0, remove it.
    char *stage = NULL;
    if (slm_s3_is_uri(x.out)) {
        const char *td = getenv("TMPDIR");
        char name[64];
        snprintf(name, sizeof name, "shardlm-prep-%016llx",
                 (unsigned long long)slm_xxh64(x.out, strlen(x.out), 0));
        stage = slm_path_join(td && *td ? td : "/tmp", name);
        o.out_dir = stage;
    }
    st = slm_prep_run(&o);
    if (!st && stage && slm_dist_rank() == 0) {
        st = slm_dataset_upload(stage, x.out);
        if (!st && !x.quiet) printf("uploaded to %s\n", x.out);
    }
    if (stage) slm_dist_barrier("prep upload");
    if (stage && slm_dist_rank() == 0) {
        slm_rmdir_flat_quiet(stage);
    }
    free(stage);
    if (st) slm_error("%s", slm_errmsg());
    free(inputs);
    slm_dist_finalize();
    return st == SLM_OK ? SLM_EXIT_OK : SLM_EXIT_ERROR;
}
