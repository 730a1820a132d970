// prep tests through slm_prep_run on a synthetic corpus (text files with awkward blank lines,
// a nested directory, a hidden file, JSONL with escapes) and a SentencePiece model trained here
// by Debian's spm_train. The reference is a naive re-implementation of the documented rules in
// this file: split documents line by line, encode each one alone with BOS/EOS, assign the split
// with XXH64 from the xxHash library. Datasets are compared as per-split multisets of documents.
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "data_test_util.h"
#include "test.h"

static char g_root[256], g_model[300], g_corpus[300];
static slm_tokenizer *g_tok;
static const uint64_t SEED = 77;
static const double VAL = 0.2;

// Order-independent summary of a multiset of documents (token sequences).
typedef struct {
    int64_t docs, tokens;
    uint64_t sum, xr;
} msum;

static void msum_add(msum *m, const int32_t *t, size_t n) {
    uint64_t h = slm_mix64(XXH64(t, n * sizeof *t, 0) + n);
    m->docs++;
    m->tokens += (int64_t)n;
    m->sum += h;
    m->xr ^= slm_mix64(h);
}

static int msum_eq(const msum *a, const msum *b) {
    return a->docs == b->docs && a->tokens == b->tokens && a->sum == b->sum && a->xr == b->xr;
}

// --- Corpus ---------------------------------------------------------------------------------

static const char *WORDS[] = {"the",   "king",   "and",         "queen",        "of",     "Denmark",
                              "shall", "speak",  "thou",        "art",          "naught", "but",
                              "a",     "shadow", "caf\xc3\xa9", "na\xc3\xafve", "1599",   "Rome!",
                              "why?",  "O",      "\xe2\x80\x94"};

static void gen_text(slm_rng *r, slm_buf *b, int n_docs) {
    for (int d = 0; d < n_docs; d++) {
        int lines = 1 + (int)slm_rng_below(r, 5);
        for (int l = 0; l < lines; l++) {
            int w = 1 + (int)slm_rng_below(r, 12);
            if (slm_rng_below(r, 10) == 0) slm_buf_append(b, "  ", 2); // indented line
            for (int i = 0; i < w; i++) {
                const char *s = WORDS[slm_rng_below(r, sizeof WORDS / sizeof *WORDS)];
                slm_buf_appendf(b, "%s%s", i ? " " : "", s);
            }
            if (slm_rng_below(r, 8) == 0)
                slm_buf_append(b, "\r\n", 2);
            else
                slm_buf_append(b, "\n", 1);
        }
        // Separators: one or more blank lines, some with spaces / tabs / CR.
        int seps = 1 + (int)slm_rng_below(r, 3);
        for (int s = 0; s < seps; s++) {
            static const char *BL[] = {"\n", " \n", "\t \n", "\r\n"};
            const char *x = BL[slm_rng_below(r, 4)];
            slm_buf_append(b, x, strlen(x));
        }
    }
}

static void write_file(const char *path, const char *data, size_t len) {
    if (slm_file_write_atomic(path, data, len)) {
        fprintf(stderr, "setup: %s\n", slm_errmsg());
        exit(2);
    }
}

static int setup(void) {
    snprintf(g_root, sizeof g_root, "/tmp/slm_prep_test_XXXXXX");
    if (!mkdtemp(g_root)) return 1;
    snprintf(g_corpus, sizeof g_corpus, "%s/corpus", g_root);
    char p[512];
    snprintf(p, sizeof p, "%s/sub/deeper", g_corpus);
    if (slm_mkdir_p(p)) return 1;
    slm_rng r;
    slm_rng_seed(&r, 5);
    slm_buf a = {0}, b = {0};
    slm_buf_append(&a, "\n \n", 3); // leading blank lines
    gen_text(&r, &a, 700);
    slm_buf_append(&a, "last document without a newline", 31);
    snprintf(p, sizeof p, "%s/a.txt", g_corpus);
    write_file(p, a.data, a.len);
    gen_text(&r, &b, 150);
    snprintf(p, sizeof p, "%s/sub/deeper/b.txt", g_corpus);
    write_file(p, b.data, b.len);
    snprintf(p, sizeof p, "%s/sub/.hidden.txt", g_corpus);
    write_file(p, "hidden files are skipped\n", 25);
    snprintf(p, sizeof p, "%s/sub/empty.txt", g_corpus);
    write_file(p, "", 0);
    // JSONL: escapes, unicode, an empty text (no document) and a blank line (skipped).
    slm_buf j = {0};
    for (int i = 0; i < 80; i++) {
        slm_buf tmp = {0};
        gen_text(&r, &tmp, 1);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", tmp.data);
        cJSON_AddNumberToObject(o, "id", i);
        char *s = cJSON_PrintUnformatted(o);
        slm_buf_appendf(&j, "%s\n", s);
        cJSON_free(s);
        cJSON_Delete(o);
        slm_buf_free(&tmp);
        if (i == 40)
            slm_buf_appendf(
                &j, "{\"text\": \"\"}\n\n{\"text\": \"tab\\there \\\"q\\\" \\u00e9\\n\"}\n");
    }
    snprintf(p, sizeof p, "%s/sub/c.jsonl", g_corpus);
    write_file(p, j.data, j.len);
    slm_buf_free(&j);
    slm_buf_free(&b);
    // SentencePiece BPE, identity normalizer (what shardlm implements), trained on a.txt.
    snprintf(g_model, sizeof g_model, "%s/sp.model", g_root);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "spm_train --input=%s/a.txt --model_prefix=%s/sp --vocab_size=300 --model_type=bpe "
             "--byte_fallback=true --character_coverage=1.0 --normalization_rule_name=identity "
             "--remove_extra_whitespaces=false --minloglevel=2 >/dev/null 2>&1",
             g_corpus, g_root);
    slm_buf_free(&a);
    if (system(cmd) != 0) {
        fprintf(stderr, "setup: spm_train failed: %s\n", cmd);
        return 1;
    }
    if (slm_tokenizer_load(g_model, &g_tok)) {
        fprintf(stderr, "setup: %s\n", slm_errmsg());
        return 1;
    }
    return 0;
}

// --- Reference ----------------------------------------------------------------------------

static void ref_doc(const char *text, size_t len, msum out[2]) {
    if (len == 0) return;
    slm_ivec ids = {0};
    if (slm_tokenizer_encode(g_tok, text, len, SLM_ENC_ADD_BOS | SLM_ENC_ADD_EOS, &ids)) exit(2);
    uint64_t h = XXH64(text, len, SEED);
    int val = (double)(h >> 11) < VAL * 9007199254740992.0;
    msum_add(&out[val], ids.data, ids.len);
    slm_ivec_free(&ids);
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n\f\v", s[i])) return 0;
    return 1;
}

static void ref_file(const char *path, msum out[2]) {
    char *d = NULL;
    size_t n = 0;
    if (slm_file_read_all(path, &d, &n)) exit(2);
    if (strstr(path, ".jsonl")) {
        char *line = d;
        while (line < d + n) {
            char *e = memchr(line, '\n', (size_t)(d + n - line));
            size_t ll = e ? (size_t)(e - line) : (size_t)(d + n - line);
            if (!is_blank(line, ll)) {
                cJSON *o = cJSON_ParseWithLength(line, ll);
                const char *t = cJSON_GetObjectItem(o, "text")->valuestring;
                ref_doc(t, strlen(t), out);
                cJSON_Delete(o);
            }
            line += ll + 1;
        }
    } else {
        // Documents: runs of non-blank lines.
        size_t doc = 0, p = 0;
        int in_doc = 0;
        while (p < n) {
            char *e = memchr(d + p, '\n', n - p);
            size_t q = e ? (size_t)(e - d) + 1 : n;
            if (is_blank(d + p, q - p)) {
                if (in_doc) ref_doc(d + doc, p - doc, out);
                in_doc = 0;
            } else if (!in_doc) {
                in_doc = 1;
                doc = p;
            }
            p = q;
        }
        if (in_doc) ref_doc(d + doc, n - doc, out);
    }
    free(d);
}

static void ref_corpus(msum out[2]) {
    memset(out, 0, 2 * sizeof *out);
    const char *files[] = {"a.txt", "sub/c.jsonl", "sub/deeper/b.txt"};
    for (int i = 0; i < 3; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", g_corpus, files[i]);
        ref_file(p, out);
    }
}

// Reads a prepared dataset back (verifying every shard) into per-split multisets; documents
// are cut at the BOS id.
static int read_dataset(const char *dir, msum out[2], int *n_shards) {
    memset(out, 0, 2 * sizeof *out);
    slm_dataset ds;
    if (slm_dataset_open(dir, &ds)) {
        fprintf(stderr, "  %s\n", slm_errmsg());
        return 0;
    }
    int bos = ds.bos_id;
    *n_shards = ds.train.n_shards + ds.val.n_shards;
    for (int s = 0; s < 2; s++) {
        slm_split_info *sp = s ? &ds.val : &ds.train;
        int64_t docs = 0;
        for (int i = 0; i < sp->n_shards; i++) {
            char *p = slm_path_join(dir, sp->shards[i].file);
            slm_map m;
            slm_shard_header h;
            if (slm_map_file(p, &m) || slm_shard_verify(p, m.data, m.len, 0, &h)) {
                fprintf(stderr, "  %s\n", slm_errmsg());
                exit(2);
            }
            int32_t *t = malloc((h.n_tokens + 1) * sizeof *t);
            for (uint64_t k = 0; k < h.n_tokens; k++)
                t[k] = m.data[64 + 2 * k] | (m.data[64 + 2 * k + 1] << 8);
            uint64_t start = 0;
            for (uint64_t k = 1; k <= h.n_tokens; k++)
                if (k == h.n_tokens || t[k] == bos) {
                    msum_add(&out[s], t + start, k - start);
                    docs++;
                    start = k;
                }
            free(t);
            slm_map_free(&m);
            free(p);
        }
        if ((uint64_t)docs != sp->n_docs) {
            fprintf(stderr, "  split %d: %" PRId64 " docs in shards, manifest %" PRIu64 "\n", s,
                    docs, sp->n_docs);
            slm_dataset_free(&ds);
            return 0;
        }
    }
    slm_dataset_free(&ds);
    return 1;
}

static slm_status prep(const char *out, const char **inputs, int n, int workers, int64_t unit,
                       int64_t shard_tokens) {
    slm_prep_opts o;
    memset(&o, 0, sizeof o);
    o.tokenizer_path = g_model;
    o.inputs = inputs;
    o.n_inputs = n;
    o.out_dir = out;
    o.shard_tokens = shard_tokens;
    o.val_fraction = VAL;
    o.workers = workers;
    o.seed = SEED;
    o.unit_bytes = unit;
    return slm_prep_run(&o);
}

static char *out_dir(const char *name) {
    char *p = malloc(512);
    snprintf(p, 512, "%s/%s", g_root, name);
    return p;
}

// Files in dir that look like shards or manifests (also temp files).
static int count_data_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".bin") || strstr(e->d_name, "manifest")) n++;
    closedir(d);
    return n;
}

// --- Tests ----------------------------------------------------------------------------------

static void test_matches_reference_any_workers(void) {
    msum ref[2];
    ref_corpus(ref);
    CHECK(ref[0].docs > 500 && ref[1].docs > 100);
    const char *in[] = {g_corpus};
    int cfg[][3] = {{1, 0, 100000}, {2, 1000, 3000}, {4, 777, 2000}, {3, 4096, 1}};
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        char *out = out_dir("ds");
        CHECK_OK(prep(out, in, 1, cfg[c][0], cfg[c][1], cfg[c][2]));
        msum got[2];
        int ns = 0;
        int ok = read_dataset(out, got, &ns);
        free(out);
        CHECK(ok);
        for (int s = 0; s < 2; s++)
            CHECK_MSG(msum_eq(&got[s], &ref[s]),
                      "workers %d unit %d: split %d: %" PRId64 " docs / %" PRId64
                      " tokens vs reference %" PRId64 " / %" PRId64,
                      cfg[c][0], cfg[c][1], s, got[s].docs, got[s].tokens, ref[s].docs,
                      ref[s].tokens);
        if (cfg[c][2] == 1) CHECK_EQ_INT(ns, ref[0].docs + ref[1].docs); // one doc per shard
    }
}

static void test_loader_opens_prepared(void) {
    char *out = out_dir("ds_loader");
    const char *in[] = {g_corpus};
    CHECK_OK(prep(out, in, 1, 2, 5000, 4000));
    slm_loader_opts o = {out, "train", 32, 4, 1, 2, 3, true, false, 0};
    slm_loader *l = NULL;
    slm_status st = slm_loader_open(&o, &l);
    free(out);
    CHECK_OK(st);
    int32_t buf[2 * 33];
    slm_loader_next(l, buf);
    CHECK_EQ_STR(slm_loader_dataset(l)->tokenizer_type, "sentencepiece_bpe");
    CHECK_EQ_INT(slm_loader_dataset(l)->vocab_size, 300);
    slm_loader_free(l);
}

static void test_stdin(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/a.txt", g_corpus);
    msum ref[2] = {{0}};
    ref_file(p, ref);
    int fd = open(p, O_RDONLY), saved = dup(0);
    CHECK(fd >= 0 && saved >= 0);
    dup2(fd, 0);
    close(fd);
    char *out = out_dir("ds_stdin");
    const char *in[] = {"-"};
    slm_status st = prep(out, in, 1, 2, 3000, 5000);
    dup2(saved, 0);
    close(saved);
    msum got[2];
    int ns, ok = st == SLM_OK && read_dataset(out, got, &ns);
    free(out);
    CHECK_OK(st);
    CHECK(ok);
    CHECK(msum_eq(&got[0], &ref[0]) && msum_eq(&got[1], &ref[1]));
}

static void check_bad_jsonl(const char *line3, const char *why) {
    char p[512];
    snprintf(p, sizeof p, "%s/bad.jsonl", g_root);
    slm_buf b = {0};
    slm_buf_appendf(&b, "{\"text\": \"one\"}\n\n%s\n{\"text\": \"four\"}\n", line3);
    write_file(p, b.data, b.len);
    slm_buf_free(&b);
    char *out = out_dir("ds_bad");
    // The corpus first, with tiny shards and units, so other workers have written shards by the
    // time the bad line is found: all of them must be removed.
    const char *in[] = {g_corpus, p};
    slm_status st = prep(out, in, 1 + 1, 3, 2000, 500);
    int left = count_data_files(out);
    free(out);
    unlink(p);
    CHECK_EQ_INT(st, SLM_E_FORMAT);
    char want[600];
    snprintf(want, sizeof want, "%s:3: %s", p, why);
    CHECK_MSG(strstr(slm_errmsg(), want), "message \"%s\" lacks \"%s\"", slm_errmsg(), want);
    CHECK_EQ_INT(left, 0);
}

static void test_jsonl_not_json(void) {
    check_bad_jsonl("{\"text\": \"unterminated}", "not valid JSON");
}
static void test_jsonl_no_text(void) {
    check_bad_jsonl("{\"txt\": \"x\"}", "no \"text\" field");
}
static void test_jsonl_text_not_string(void) {
    check_bad_jsonl("{\"text\": 42}", "field \"text\" is not a string");
}
static void test_jsonl_not_object(void) {
    check_bad_jsonl("[\"text\"]", "not a JSON object");
}

// Files directly in dir whose name starts with `prefix` (the hidden temp siblings of --out).
static int count_prefixed(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

// A failed run over an existing dataset leaves it intact and loadable, with the files prep did
// not write; no temp sibling is left next to it. A successful rerun replaces the dataset and
// keeps the unrelated files.
static void test_failed_rerun_keeps_dataset(void) {
    char *out = out_dir("ds_rerun");
    const char *in[] = {g_corpus};
    CHECK_OK(prep(out, in, 1, 2, 4000, 3000));
    int before = count_data_files(out);
    CHECK(before > 2);
    char note[600], fake[600];
    snprintf(note, sizeof note, "%s/NOTES.txt", out);
    snprintf(fake, sizeof fake, "%s/train_0000_000_999999.bin", out); // shard-like, not listed
    write_file(note, "mine\n", 5);
    write_file(fake, "x", 1);
    char missing[512];
    snprintf(missing, sizeof missing, "%s/no_such_file.txt", g_root);
    const char *in2[] = {g_corpus, missing};
    CHECK_EQ_INT(prep(out, in2, 2, 2, 4000, 3000), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "no_such_file.txt"));
    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad2.jsonl", g_root);
    write_file(bad, "nope\n", 5);
    const char *in3[] = {g_corpus, bad};
    CHECK_EQ_INT(prep(out, in3, 2, 2, 4000, 3000), SLM_E_FORMAT);
    unlink(bad);
    CHECK_EQ_INT(count_data_files(out), before + 1);
    CHECK_EQ_INT(count_prefixed(g_root, ".ds_rerun.prep-"), 0);
    slm_dataset ds;
    CHECK_OK(slm_dataset_open(out, &ds));
    slm_dataset_free(&ds);
    msum got[2];
    int ns = 0;
    CHECK(read_dataset(out, got, &ns));
    // Success with other shard sizes: new dataset, unrelated files kept, old shards gone.
    CHECK_OK(prep(out, in, 1, 1, 0, 100000));
    CHECK(read_dataset(out, got, &ns));
    CHECK(slm_is_file(note) && slm_is_file(fake));
    CHECK_EQ_INT(count_data_files(out), ns + 2); // shards + manifest + the fake shard
    CHECK_EQ_INT(count_prefixed(g_root, ".ds_rerun.prep-"), 0);
    free(out);
}

// --out inside an input directory: the second run must not read the first run's output.
// --out equal to an input directory is refused before anything is written.
static void test_out_inside_input(void) {
    char dir[600], out[700], txt[700];
    snprintf(dir, sizeof dir, "%s/cdir", g_root);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(txt, sizeof txt, "%s/c.txt", dir);
    CHECK_OK(slm_mkdir_p(dir));
    char src[512];
    snprintf(src, sizeof src, "%s/a.txt", g_corpus);
    char *data = NULL;
    size_t len = 0;
    CHECK_OK(slm_file_read_all(src, &data, &len));
    write_file(txt, data, len);
    free(data);
    msum ref[2] = {{0}}, got[2];
    ref_file(txt, ref);
    const char *in[] = {dir};
    int ns = 0;
    for (int k = 0; k < 2; k++) {
        CHECK_OK(prep(out, in, 1, 2, 3000, 5000));
        CHECK(read_dataset(out, got, &ns));
        CHECK(msum_eq(&got[0], &ref[0]) && msum_eq(&got[1], &ref[1]));
    }
    CHECK_EQ_INT(prep(dir, in, 1, 2, 3000, 5000), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "is or contains --input"));
    CHECK(slm_is_file(txt));
    CHECK(read_dataset(out, got, &ns));
}

static void test_empty_corpus(void) {
    char e1[512], e2[512];
    snprintf(e1, sizeof e1, "%s/empty1.txt", g_root);
    snprintf(e2, sizeof e2, "%s/blank.txt", g_root);
    write_file(e1, "", 0);
    write_file(e2, "\n  \n\t\r\n", 7);
    char *out = out_dir("ds_empty");
    const char *in[] = {e1, e2};
    CHECK_EQ_INT(prep(out, in, 2, 2, 0, 1000), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "empty corpus"));
    CHECK_EQ_INT(count_data_files(out), 0);
    char tok[512];
    snprintf(tok, sizeof tok, "%s/sp.model", out);
    CHECK(!slm_is_file(tok)); // the tokenizer copy is removed too
    free(out);
}

static void test_bad_options(void) {
    char *out = out_dir("ds_opts");
    const char *in[] = {g_corpus};
    slm_prep_opts o;
    memset(&o, 0, sizeof o);
    o.tokenizer_path = g_model;
    o.inputs = in;
    o.n_inputs = 1;
    o.out_dir = out;
    o.shard_tokens = 100;
    o.workers = 1;
    o.val_fraction = 1.0;
    CHECK_EQ_INT(slm_prep_run(&o), SLM_E_ARG);
    o.val_fraction = 0;
    o.workers = 0;
    CHECK_EQ_INT(slm_prep_run(&o), SLM_E_ARG);
    o.workers = 1;
    o.tokenizer_path = "/nonexistent/tokenizer.model";
    CHECK_EQ_INT(slm_prep_run(&o), SLM_E_IO);
    CHECK(strstr(slm_errmsg(), "/nonexistent/tokenizer.model"));
    free(out);
}

int main(void) {
    if (setup()) return 1;
    RUN(test_matches_reference_any_workers);
    RUN(test_loader_opens_prepared);
    RUN(test_stdin);
    RUN(test_jsonl_not_json);
    RUN(test_jsonl_no_text);
    RUN(test_jsonl_text_not_string);
    RUN(test_jsonl_not_object);
    RUN(test_failed_rerun_keeps_dataset);
    RUN(test_out_inside_input);
    RUN(test_empty_corpus);
    RUN(test_bad_options);
    slm_tokenizer_free(g_tok);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", g_root);
    return TEST_SUMMARY();
}
