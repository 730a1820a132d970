// shardlm tokenizer train|encode|decode|info|from-gguf: byte-level BPE training and a stdin ->
// stdout front end to the generic tokenizer API (byte-level BPE tokenizer.json or SentencePiece
// tokenizer.model).
#include "cmd.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "tokenizer/tokenizer.h"

typedef struct tok_args {
    slm_opt_list inputs;
    const char *out, *special, *tokenizer;
    int64_t vocab, threads;
    bool quiet, bos, eos, allow_special, whole, bytes, overwrite;
} tok_args;

#define A(f) offsetof(tok_args, f)
#define TOKENIZER_OPT                                                                              \
    {                                                                                              \
        .name = "--tokenizer", .type = SLM_OPT_STRING, .off = A(tokenizer), .meta = "FILE",        \
        .help = "a tokenizer.json (byte-level BPE) or a SentencePiece tokenizer.model"             \
    }
static const slm_opt k_train_opts[] = {
    {.name = "--input",
     .type = SLM_OPT_LIST,
     .off = A(inputs),
     .meta = "PATH...",
     .help = "text files and directories (recursed; dot-files skipped)"},
    {.name = "--vocab-size",
     .type = SLM_OPT_INT64,
     .off = A(vocab),
     .meta = "N",
     .help = "ids in all, in [256 + number of special tokens, 4194304] (259 with the default "
             "specials); a corpus with fewer distinct pairs gives fewer ids (a warning says so)",
     .ilo = INT64_MIN,
     .ihi = INT64_MAX,
     .flags = SLM_OPTF_NODEF},
    {.name = "--out",
     .type = SLM_OPT_STRING,
     .off = A(out),
     .meta = "FILE",
     .help = "the tokenizer.json to write; must not be a file the --input walk reads, nor a new "
             "file inside an --input directory (a rerun would read it)"},
    {.name = "--special",
     .type = SLM_OPT_STRING,
     .off = A(special),
     .meta = "LIST",
     .help = "the added special tokens, comma-separated, at most 64; the first is BOS, the "
             "second EOS; \"\" for none",
     .def = "<|bos|>,<|eos|>,<|pad|>"},
    {.name = "--threads",
     .type = SLM_OPT_INT64,
     .off = A(threads),
     .meta = "N",
     .help = "count pairs in parallel (the result does not depend on it), 0 = the OpenMP default",
     .ilo = 0,
     .ihi = 1024},
    {.name = "--quiet", .type = SLM_OPT_FLAG, .off = A(quiet), .help = "no progress output"},
    {.type = SLM_OPT_END},
};
static const slm_opt k_encode_opts[] = {
    TOKENIZER_OPT,
    {.name = "--bos", .type = SLM_OPT_FLAG, .off = A(bos), .help = "prepend the BOS id"},
    {.name = "--eos", .type = SLM_OPT_FLAG, .off = A(eos), .help = "append the EOS id"},
    {.name = "--allow-special",
     .type = SLM_OPT_FLAG,
     .off = A(allow_special),
     .help = "special-token text becomes its id (else it is plain text)"},
    {.name = "--whole",
     .type = SLM_OPT_FLAG,
     .off = A(whole),
     .help = "encode all of stdin as one text (newlines included) and write one line of ids"},
    {.type = SLM_OPT_END},
};
static const slm_opt k_decode_opts[] = {
    TOKENIZER_OPT,
    {.name = "--bytes",
     .type = SLM_OPT_FLAG,
     .off = A(bytes),
     .help = "write the tokens' raw bytes (else SentencePiece byte-fallback bytes that are not "
             "valid UTF-8 become U+FFFD, as in SentencePiece)"},
    {.type = SLM_OPT_END},
};
static const slm_opt k_info_opts[] = {TOKENIZER_OPT, {.type = SLM_OPT_END}};
static const slm_opt k_gguf_opts[] = {
    {.name = "--gguf",
     .type = SLM_OPT_STRING,
     .off = A(tokenizer),
     .meta = "FILE",
     .help = "a llama.cpp GGUF file whose tokenizer.ggml.* metadata is a byte-level BPE (gpt2)"},
    {.name = "--out",
     .type = SLM_OPT_STRING,
     .off = A(out),
     .meta = "FILE",
     .help = "the tokenizer.json to write (for prep --tokenizer); its directory must exist"},
    {.name = "--overwrite",
     .type = SLM_OPT_FLAG,
     .off = A(overwrite),
     .help = "replace an existing --out file (else refused)"},
    {.type = SLM_OPT_END},
};
#undef A

static const slm_cli k_tok_cli[] = {
    {.cmd = "tokenizer train",
     .usage = "usage: shardlm tokenizer train --input PATH... --vocab-size N --out tokenizer.json\n"
              "                               [--special LIST] [--threads N] [--quiet]\n"
              "  learns a byte-level BPE (GPT-2 regex pre-tokenization, GPT-2 byte symbols) and\n"
              "  writes a Hugging Face tokenizer.json.\n",
     .opts = k_train_opts},
    {.cmd = "tokenizer encode",
     .usage = "usage: shardlm tokenizer encode --tokenizer FILE [--bos] [--eos] [--allow-special]"
              " [--whole]\n"
              "  reads text on stdin and writes, per input line (without its newline), the ids as\n"
              "  space-separated integers on one line.\n",
     .opts = k_encode_opts},
    {.cmd = "tokenizer decode",
     .usage = "usage: shardlm tokenizer decode --tokenizer FILE [--bytes]\n"
              "  reads lines of space-separated ids and writes each line's text and a newline.\n",
     .opts = k_decode_opts},
    {.cmd = "tokenizer info",
     .usage = "usage: shardlm tokenizer info --tokenizer FILE\n"
              "  prints the type, vocab size, BOS/EOS/UNK/PAD ids and the file's XXH64.\n",
     .opts = k_info_opts},
    {.cmd = "tokenizer from-gguf",
     .usage = "usage: shardlm tokenizer from-gguf --gguf FILE --out OUT [--overwrite]\n"
              "  writes the tokenizer a GGUF file carries as shardlm's tokenizer file (the one\n"
              "  eval, generate and train --init-from-gguf use for that file): tokenizer.json\n"
              "  text for a byte-level BPE (tokenizer.ggml.model gpt2), a SentencePiece\n"
              "  tokenizer.model for model llama; name OUT accordingly.\n",
     .opts = k_gguf_opts},
};
enum { TOK_TRAIN, TOK_ENCODE, TOK_DECODE, TOK_INFO, TOK_GGUF, TOK_N };

static const char k_tok_footer[] =
    "\nA read error on stdin (e.g. a directory) is a runtime error (exit 1).\n"
    "Exit status: 0 ok, 1 runtime error, 2 usage error.\n";

// The help of all the subcommands, written at once (a reader that stops early, `| grep -q`,
// must not make a later piece fail with SIGPIPE).
static void usage(FILE *f) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return;
    for (int k = 0; k < TOK_N; k++) {
        if (k) fputc('\n', m);
        slm_opt_help(m, &k_tok_cli[k], NULL);
    }
    fputs(k_tok_footer, m);
    fclose(m);
    fwrite(buf, 1, len, f);
    free(buf);
}

static int fail_usage(const char *msg, const char *arg) {
    slm_error("tokenizer: %s%s%s", msg, arg ? " " : "", arg ? arg : "");
    usage(stderr);
    return SLM_EXIT_USAGE;
}

// Parses the options of subcommand k; -1 to go on, else the exit code.
static int parse(int k, int argc, char **argv, tok_args *x, slm_opt_seen *seen) {
    slm_cli cli = k_tok_cli[k];
    cli.footer = k_tok_footer; // --help: the subcommand's options and the exit codes
    return slm_opt_parse(&cli, argc, argv, x, seen);
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

// What --out is checked against while walking the inputs as slm_bpe_train reads them (a file,
// or a directory's files recursively, dot-entries skipped, symlinks followed).
typedef struct out_check {
    struct stat out;    // --out, when it exists
    struct stat parent; // --out's directory, when --out does not exist yet
    bool out_exists, parent_known;
    char *hit;          // the input file that is --out, or the input directory holding it
    const char *hit_in; // the --input it was reached from
    bool inside;        // hit is a directory that would list --out on a rerun
} out_check;

// Walks PATH like the trainer's input walk; true (c->hit set) on the first conflict.
static bool walk_for_out(const char *path, const char *input, int depth, out_check *c) {
    struct stat sb;
    if (stat(path, &sb) != 0 || depth > 64) return false; // the trainer reports it
    if (S_ISREG(sb.st_mode)) {
        if (c->out_exists && sb.st_dev == c->out.st_dev && sb.st_ino == c->out.st_ino) {
            c->hit = slm_xstrdup(path), c->hit_in = input;
            return true;
        }
        return false;
    }
    if (!S_ISDIR(sb.st_mode)) return false;
    if (c->parent_known && sb.st_dev == c->parent.st_dev && sb.st_ino == c->parent.st_ino) {
        c->hit = slm_xstrdup(path), c->hit_in = input, c->inside = true;
        return true;
    }
    DIR *d = opendir(path);
    if (!d) return false;
    struct dirent *e;
    bool found = false;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *p = slm_path_join(path, e->d_name);
        found = walk_for_out(p, input, depth + 1, c);
        free(p);
    }
    closedir(d);
    return found;
}

// The tokenizer is written atomically over --out: never over a file the input walk reads, nor
// (a new --out) inside an --input directory, where a rerun would read it as training text.
// True after logging the error (usage: exit 2).
static bool out_is_input(const char *out_path, const char *const *inputs, int n_inputs) {
    out_check c = {0};
    c.out_exists = stat(out_path, &c.out) == 0;
    const char *base = strrchr(out_path, '/');
    base = base ? base + 1 : out_path;
    if (!c.out_exists && base[0] && base[0] != '.') { // a dot-file is not read by the walk
        char *dir = slm_xstrdup(out_path);
        char *slash = strrchr(dir, '/');
        if (!slash)
            strcpy(dir, ".");
        else if (slash == dir)
            slash[1] = 0;
        else
            *slash = 0;
        c.parent_known = stat(dir, &c.parent) == 0;
        free(dir);
    }
    bool found = false;
    for (int i = 0; i < n_inputs && !found; i++)
        found = walk_for_out(inputs[i], inputs[i], 0, &c);
    if (!found) return false;
    if (c.inside)
        slm_error("tokenizer train: --out %s lies inside the --input directory %s (reached "
                  "from --input %s): a rerun would read the tokenizer as training text; "
                  "write it outside the input directories",
                  out_path, c.hit, c.hit_in);
    else if (!strcmp(c.hit, c.hit_in))
        slm_error("tokenizer train: --out %s is the --input file %s; expected a new "
                  "file for the tokenizer (it would overwrite the corpus)",
                  out_path, c.hit);
    else
        slm_error("tokenizer train: --out %s is the input file %s (read from the --input "
                  "directory %s); expected a new file for the tokenizer (it would overwrite "
                  "the corpus)",
                  out_path, c.hit, c.hit_in);
    free(c.hit);
    return true;
}

static int cmd_train(int argc, char **argv) {
    tok_args x = {0};
    slm_opt_seen seen;
    int rc = parse(TOK_TRAIN, argc, argv, &x, &seen);
    if (rc >= 0) {
        slm_opt_list_free(&x.inputs);
        return rc;
    }
    rc = SLM_EXIT_OK;
    const char **inputs = x.inputs.v;
    const char *specials[64];
    char *special_arg = NULL;
    const char *out_path = x.out;
    int n_inputs = x.inputs.n, n_specials = -1;
    int64_t vocab = x.vocab, threads = x.threads;
    bool quiet = x.quiet, have_vocab = slm_opt_given(&k_tok_cli[TOK_TRAIN], &seen, "--vocab-size");
    slm_tokenizer *t = NULL;
    if (x.special) {
        special_arg = slm_xstrdup(x.special);
        n_specials = split_commas(special_arg, specials, 64);
        if (n_specials > 64) {
            rc = fail_usage("at most 64 --special tokens", NULL);
            goto out;
        }
    }
    if (!n_inputs || !have_vocab || !out_path) {
        rc = fail_usage("train needs --input, --vocab-size and --out", NULL);
        goto out;
    }
    if (out_is_input(out_path, inputs, n_inputs)) {
        rc = SLM_EXIT_USAGE;
        goto out;
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
    if (quiet) slm_progress_enable(false);
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
    slm_opt_list_free(&x.inputs);
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
    tok_args x = {0};
    int rc0 = parse(encode ? TOK_ENCODE : TOK_DECODE, argc, argv, &x, NULL);
    if (rc0 >= 0) return rc0;
    const char *path = x.tokenizer;
    int flags = (x.bos ? SLM_ENC_ADD_BOS : 0) | (x.eos ? SLM_ENC_ADD_EOS : 0) |
                (x.allow_special ? SLM_ENC_ALLOW_SPECIAL : 0);
    bool whole = x.whole, raw = x.bytes;
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
    tok_args x = {0};
    int rc = parse(TOK_INFO, argc, argv, &x, NULL);
    if (rc >= 0) return rc;
    const char *path = x.tokenizer;
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

static int cmd_from_gguf(int argc, char **argv) {
    tok_args x = {0};
    int rc = parse(TOK_GGUF, argc, argv, &x, NULL);
    if (rc >= 0) return rc;
    if (!x.tokenizer || !x.out) return fail_usage("--gguf FILE and --out FILE are required", NULL);
    // --out up front: a file name in an existing directory, not replacing a file unasked
    struct stat sb;
    char *dir = slm_path_parent(x.out);
    bool dir_ok = slm_is_dir(dir);
    size_t n = strlen(x.out);
    rc = SLM_EXIT_OK;
    if (!n || x.out[n - 1] == '/' || (stat(x.out, &sb) == 0 && S_ISDIR(sb.st_mode))) {
        slm_error("tokenizer from-gguf: --out %s is a directory; expected a file name", x.out);
        rc = SLM_EXIT_USAGE;
    } else if (!dir_ok) {
        slm_error("tokenizer from-gguf: --out %s: the directory %s does not exist (or is not a "
                  "directory); create it first",
                  x.out, dir);
        rc = SLM_EXIT_USAGE;
    } else if (!x.overwrite && lstat(x.out, &sb) == 0) {
        slm_error("tokenizer from-gguf: --out %s exists; pass --overwrite to replace it", x.out);
        rc = SLM_EXIT_ERROR;
    }
    free(dir);
    if (rc) return rc;
    slm_gguf_file g;
    slm_buf b = {0};
    slm_status st = slm_gguf_open(x.tokenizer, &g);
    if (!st) st = slm_gguf_tokenizer_file(&g, &b, NULL);
    if (!st) st = slm_file_write_atomic(x.out, b.data, b.len);
    slm_buf_free(&b);
    slm_gguf_close(&g);
    if (st) {
        slm_error("tokenizer from-gguf: %s", slm_errmsg());
        return slm_exit_code(st);
    }
    return SLM_EXIT_OK;
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
    if (!strcmp(sub, "from-gguf")) return cmd_from_gguf(argc - 1, argv + 1);
    return fail_usage("unknown subcommand", sub);
}
