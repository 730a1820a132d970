// shardlm tokenizer train|encode|decode|info: byte-level BPE training and a stdin -> stdout
// front end to the generic tokenizer API (byte-level BPE tokenizer.json or SentencePiece
// tokenizer.model).
#include "cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: shardlm tokenizer train --input PATH... --vocab-size N --out tokenizer.json\n"
        "                               [--special \"<|bos|>,<|eos|>,<|pad|>\"] [--threads N] "
        "[--quiet]\n"
        "       shardlm tokenizer encode --tokenizer FILE [--bos] [--eos] [--allow-special] "
        "[--whole]\n"
        "       shardlm tokenizer decode --tokenizer FILE [--bytes]\n"
        "       shardlm tokenizer info   --tokenizer FILE\n"
        "\n"
        "train   learns a byte-level BPE (GPT-2 regex pre-tokenization, GPT-2 byte symbols)\n"
        "        from text files and directories (recursed; dot-files skipped) and writes a\n"
        "        Hugging Face tokenizer.json. --special lists the added special tokens\n"
        "        (comma-separated; the first is BOS, the second EOS; \"\" for none). --threads\n"
        "        counts in parallel (the result does not depend on it). --vocab-size is\n"
        "        in [256 + number of special tokens, 4194304] (259 with the default specials);\n"
        "        a corpus with fewer distinct pairs gives fewer ids (a warning says so).\n"
        "        --out must not be one of the --input files.\n"
        "encode  reads text on stdin and writes, per input line (without its newline), the\n"
        "        ids as space-separated integers on one line. BOS/EOS only with --bos/--eos;\n"
        "        special-token text is plain text unless --allow-special. --whole encodes all of\n"
        "        stdin as one text (newlines included) and writes one line of ids.\n"
        "decode  reads lines of space-separated ids and writes each line's text and a newline.\n"
        "        SentencePiece byte-fallback bytes that are not valid UTF-8 become U+FFFD, as\n"
        "        in SentencePiece; --bytes writes the tokens' raw bytes instead.\n"
        "A read error on stdin (e.g. a directory) is a runtime error (exit 1).\n"
        "info    prints the type, vocab size, BOS/EOS/UNK/PAD ids and the file's XXH64.\n"
        "FILE is a tokenizer.json (byte-level BPE) or a SentencePiece tokenizer.model.\n"
        "Exit status: 0 ok, 1 runtime error, 2 usage error.\n");
}

static int fail_usage(const char *msg, const char *arg) {
    slm_error("tokenizer: %s%s%s", msg, arg ? " " : "", arg ? arg : "");
    usage(stderr);
    return SLM_EXIT_USAGE;
}

// An option this subcommand does not know, or a known option without its value.
static int fail_option(const char *opt, bool known) {
    if (known)
        slm_error("tokenizer: option %s needs a value", opt);
    else
        slm_error("tokenizer: unknown option %s (see --help)", opt);
    return SLM_EXIT_USAGE;
}

// Flushes stdout; on a write error (now or earlier, e.g. a full disk) prints "write to stdout
// failed" with the reason and returns false. `err` is an errno already seen, or 0.
static bool stdout_ok(int err) {
    errno = 0;
    if (fflush(stdout) != 0 && !err) err = errno ? errno : EIO;
    if (ferror(stdout) && !err) err = errno ? errno : EIO;
    if (!err) return true;
    slm_error("tokenizer: write to stdout failed: %s", strerror(err));
    return false;
}

static int fail_runtime(void) {
    slm_error("%s", slm_errmsg());
    return SLM_EXIT_ERROR;
}

// Splits a comma-separated list in place into `out` (at most `max` items).
static int split_commas(char *s, const char **out, int max) {
    int n = 0;
    if (!*s) return 0;
    for (char *p = s;;) {
        char *c = strchr(p, ',');
        if (c) *c = 0;
        if (n < max) out[n] = p;
        n++;
        if (!c) break;
        p = c + 1;
    }
    return n;
}

static int cmd_train(int argc, char **argv) {
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    const char *specials[64];
    char *special_arg = NULL;
    const char *out_path = NULL;
    int n_inputs = 0, n_specials = -1, rc = SLM_EXIT_OK;
    int64_t vocab = 0, threads = 0;
    bool quiet = false, have_vocab = false;
    slm_tokenizer *t = NULL;
    if (!inputs) return fail_runtime();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--input")) {
            if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)) {
                rc = fail_option(a, true);
                goto out;
            }
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
                inputs[n_inputs++] = argv[++i];
        } else if ((!strcmp(a, "--vocab-size") || !strcmp(a, "--threads") ||
                    !strcmp(a, "--out") || !strcmp(a, "--special")) &&
                   i + 1 >= argc) {
            rc = fail_option(a, true);
            goto out;
        } else if (!strcmp(a, "--vocab-size")) {
            // Range checked below, once the number of special tokens is known.
            if (slm_parse_i64("--vocab-size", argv[++i], INT64_MIN, INT64_MAX, &vocab)) {
                rc = fail_usage(slm_errmsg(), NULL);
                goto out;
            }
            have_vocab = true;
        } else if (!strcmp(a, "--threads")) {
            if (slm_parse_i64("--threads", argv[++i], 0, 1024, &threads)) {
                rc = fail_usage(slm_errmsg(), NULL);
                goto out;
            }
        } else if (!strcmp(a, "--out")) {
            out_path = argv[++i];
        } else if (!strcmp(a, "--special")) {
            free(special_arg);
            special_arg = slm_xstrdup(argv[++i]);
            n_specials = split_commas(special_arg, specials, 64);
            if (n_specials > 64) {
                rc = fail_usage("at most 64 --special tokens", NULL);
                goto out;
            }
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            goto out;
        } else {
            rc = fail_option(a, false);
            goto out;
        }
    }
    if (!n_inputs || !have_vocab || !out_path) {
        rc = fail_usage("train needs --input, --vocab-size and --out", NULL);
        goto out;
    }
    {
        // The tokenizer is written atomically over --out: never over a corpus file.
        struct stat so, si;
        if (stat(out_path, &so) == 0)
            for (int i = 0; i < n_inputs; i++)
                if (stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
                    slm_error("tokenizer train: --out %s is the --input file %s; expected a new "
                              "file for the tokenizer (it would overwrite the corpus)",
                              out_path, inputs[i]);
                    rc = SLM_EXIT_USAGE;
                    goto out;
                }
    }
    {
        // 256 byte symbols + the special tokens (default <|bos|>, <|eos|>, <|pad|>).
        int64_t lo = 256 + (n_specials >= 0 ? n_specials : 3), hi = (int64_t)1 << 22;
        if (vocab < lo || vocab > hi) {
            slm_error("tokenizer: --vocab-size %lld is out of range [%lld, %lld] (256 byte "
                      "symbols + %lld special tokens at least)",
                      (long long)vocab, (long long)lo, (long long)hi, (long long)(lo - 256));
            rc = SLM_EXIT_USAGE;
            goto out;
        }
    }
    slm_bpe_train_opts o = {
        .inputs = inputs,
        .n_inputs = n_inputs,
        .vocab_size = (int32_t)vocab,
        .specials = n_specials >= 0 ? specials : NULL, // NULL: <|bos|>,<|eos|>,<|pad|>
        .n_specials = n_specials >= 0 ? n_specials : 0,
        .threads = (int)threads,
        .verbose = !quiet,
    };
    if (slm_bpe_train(&o, &t) || slm_tokenizer_save_json(t, out_path)) {
        rc = fail_runtime();
        goto out;
    }
    char hex[17];
    slm_hex64(slm_tokenizer_hash(t), hex);
    if (!quiet)
        slm_info("wrote %s: %d ids, bos %d, eos %d, pad %d, xxh64 %s", out_path,
                 slm_tokenizer_vocab_size(t), slm_tokenizer_bos_id(t), slm_tokenizer_eos_id(t),
                 slm_tokenizer_pad_id(t), hex);
out:
    slm_tokenizer_free(t);
    free(special_arg);
    free(inputs);
    return rc;
}

// Appends the decimal of x and a separator.
static void put_int(slm_buf *b, int32_t x, char sep) {
    char tmp[16];
    int n = 0;
    uint32_t u = x < 0 ? (uint32_t)(-(int64_t)x) : (uint32_t)x;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    slm_buf_reserve(b, b->len + (size_t)n + 2);
    if (x < 0) b->data[b->len++] = '-';
    while (n)
        b->data[b->len++] = tmp[--n];
    b->data[b->len++] = sep;
}

// Writes out the buffered output once it is large (or always with `force`); on a short write
// records errno in *err (first error only) and returns false.
static bool flush_out(slm_buf *b, bool force, int *err) {
    if (!b->len || (!force && b->len < (1 << 16))) return true; // nothing (b->data may be NULL)
    errno = 0;
    bool ok = fwrite(b->data, 1, b->len, stdout) == b->len;
    if (!ok && !*err) *err = errno ? errno : EIO;
    b->len = 0;
    return ok;
}

static int cmd_codec(int argc, char **argv, bool encode) {
    const char *path = NULL;
    int flags = 0;
    bool whole = false, raw = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tokenizer") && i + 1 >= argc)
            return fail_option(a, true);
        else if (!strcmp(a, "--tokenizer"))
            path = argv[++i];
        else if (encode && !strcmp(a, "--whole"))
            whole = true;
        else if (encode && !strcmp(a, "--bos"))
            flags |= SLM_ENC_ADD_BOS;
        else if (encode && !strcmp(a, "--eos"))
            flags |= SLM_ENC_ADD_EOS;
        else if (encode && !strcmp(a, "--allow-special"))
            flags |= SLM_ENC_ALLOW_SPECIAL;
        else if (!encode && !strcmp(a, "--bytes"))
            raw = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return SLM_EXIT_OK;
        } else
            return fail_option(a, false);
    }
    if (!path) return fail_usage("--tokenizer FILE is required", NULL);
    slm_tokenizer *t = NULL;
    if (slm_tokenizer_load(path, &t)) return fail_runtime();
    int werr = 0; // errno of the first failed write to stdout
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    slm_buf ob = {0};
    slm_ivec ids = {0};
    int rc = SLM_EXIT_OK;
    int64_t lineno = 0;
    if (whole) { // all of stdin as one text: read it as one "line" without stripping
        slm_buf in = {0};
        char chunk[1 << 16];
        size_t k;
        while ((k = fread(chunk, 1, sizeof chunk, stdin)) > 0)
            slm_buf_append(&in, chunk, k);
        if (ferror(stdin)) {
            slm_error("tokenizer %s: read from stdin failed: %s", encode ? "encode" : "decode",
                      strerror(errno ? errno : EIO));
            slm_buf_free(&in);
            slm_tokenizer_free(t);
            return SLM_EXIT_ERROR;
        }
        if (!in.data) slm_buf_append(&in, "", 0);
        line = in.data;
        n = (ssize_t)in.len;
    }
    while (whole || (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        if (!whole && len && line[len - 1] == '\n') len--;
        ids.len = 0;
        if (encode) {
            if (slm_tokenizer_encode(t, line, len, flags, &ids)) {
                rc = fail_runtime();
                break;
            }
            for (size_t k = 0; k < ids.len; k++)
                put_int(&ob, ids.data[k], k + 1 < ids.len ? ' ' : '\n');
            if (!ids.len) slm_buf_append(&ob, "\n", 1);
        } else {
            line[len] = 0;
            char what[64];
            snprintf(what, sizeof what, "tokenizer decode: stdin line %lld", (long long)lineno);
            if (slm_token_ids_parse_line(what, line, INT32_MAX, "the int32 range", &ids)) {
                slm_error("%s", slm_errmsg());
                rc = SLM_EXIT_ERROR;
                goto done;
            }
            if (raw ? slm_tokenizer_decode_bytes(t, ids.data, ids.len, &ob)
                    : slm_tokenizer_decode(t, ids.data, ids.len, &ob)) {
                slm_error("stdin line %lld: %s", (long long)lineno, slm_errmsg());
                rc = SLM_EXIT_ERROR;
                break;
            }
            slm_buf_append(&ob, "\n", 1);
        }
        if (!flush_out(&ob, false, &werr) || whole) break; // a failed write: reported below
    }
    if (!whole && rc == SLM_EXIT_OK && ferror(stdin)) { // getline's -1 was an error, not EOF
        slm_error("tokenizer %s: read from stdin failed after line %lld: %s",
                  encode ? "encode" : "decode", (long long)lineno, strerror(errno ? errno : EIO));
        rc = SLM_EXIT_ERROR;
    }
done:
    flush_out(&ob, true, &werr);
    if (!stdout_ok(werr)) rc = SLM_EXIT_ERROR;
    free(line);
    slm_buf_free(&ob);
    slm_ivec_free(&ids);
    slm_tokenizer_free(t);
    return rc;
}

static int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 >= argc)
            return fail_option(argv[i], true);
        else if (!strcmp(argv[i], "--tokenizer"))
            path = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return SLM_EXIT_OK;
        } else
            return fail_option(argv[i], false);
    }
    if (!path) return fail_usage("--tokenizer FILE is required", NULL);
    slm_tokenizer *t = NULL;
    if (slm_tokenizer_load(path, &t)) return fail_runtime();
    char hex[17];
    slm_hex64(slm_tokenizer_hash(t), hex);
    printf("type: %s\nvocab_size: %d\nbos_id: %d\neos_id: %d\nunk_id: %d\npad_id: %d\n"
           "hash: %s\n",
           slm_tokenizer_type_name(t), slm_tokenizer_vocab_size(t), slm_tokenizer_bos_id(t),
           slm_tokenizer_eos_id(t), slm_tokenizer_unk_id(t), slm_tokenizer_pad_id(t), hex);
    slm_tokenizer_free(t);
    return stdout_ok(0) ? SLM_EXIT_OK : SLM_EXIT_ERROR;
}

int slm_cmd_tokenizer(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return SLM_EXIT_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
        usage(stdout);
        return SLM_EXIT_OK;
    }
    if (!strcmp(sub, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(sub, "encode")) return cmd_codec(argc - 1, argv + 1, true);
    if (!strcmp(sub, "decode")) return cmd_codec(argc - 1, argv + 1, false);
    if (!strcmp(sub, "info")) return cmd_info(argc - 1, argv + 1);
    return fail_usage("unknown subcommand", sub);
}
