// The CLI option-table engine (tools/opt.c) and the train table against src/train/agree.c:
//  - parsing: ints / reals / sizes / enums / flags / lists into the args struct, range errors
//    naming the option and the range, unknown options, missing values, bare arguments,
//    exclusion groups, exit codes (0 / 1 / 2);
//  - --help: every option, its range and its default from the defaults struct;
//  - train: every option of the table is either compared across ranks by slm_train_agree (its
//    name appears in agree.c's list) or marked per-rank, and the per-rank ones are exactly the
//    ones docs/cluster.md lists; every name agree.c compares is a train option.
#include <stddef.h>

#include "cmd.h"
#include "test.h"

typedef struct toy {
    int n;
    int64_t big;
    double x;
    float f;
    const char *s, *a, *b;
    bool flag;
    int mode;
    size_t size;
    slm_opt_list in;
} toy;

static const char *const k_modes[] = {"fast", "slow", "exact", NULL};

#define A(f) offsetof(toy, f)
static const slm_opt k_toy_opts[] = {
    {.name = "--n",
     .type = SLM_OPT_INT,
     .off = A(n),
     .meta = "N",
     .help = "count",
     .ilo = 1,
     .ihi = 100},
    {.name = "--big",
     .type = SLM_OPT_INT64,
     .off = A(big),
     .meta = "B",
     .help = "big",
     .ilo = 0,
     .ihi = INT64_MAX},
    {.name = "--x",
     .type = SLM_OPT_DOUBLE,
     .off = A(x),
     .meta = "X",
     .help = "fraction",
     .dlo = 0,
     .dhi = 1,
     .flags = SLM_OPTF_HI_OPEN},
    {.name = "--f",
     .type = SLM_OPT_FLOAT,
     .off = A(f),
     .meta = "F",
     .help = "rate",
     .dlo = 0,
     .dhi = INFINITY,
     .flags = SLM_OPTF_LO_OPEN},
    {.name = "--s", .type = SLM_OPT_STRING, .off = A(s), .meta = "S", .help = "text"},
    {.name = "--a", .type = SLM_OPT_STRING, .off = A(a), .meta = "DIR", .help = "a", .group = 1},
    {.name = "--b", .type = SLM_OPT_STRING, .off = A(b), .meta = "DIR", .help = "b", .group = 1},
    {.name = "--flag", .type = SLM_OPT_FLAG, .off = A(flag), .help = "on"},
    {.name = "--mode",
     .type = SLM_OPT_ENUM,
     .off = A(mode),
     .meta = "M",
     .help = "how",
     .choices = k_modes},
    {.name = "--size", .type = SLM_OPT_SIZE, .off = A(size), .meta = "SIZE", .help = "bytes"},
    {.name = "--in", .type = SLM_OPT_LIST, .off = A(in), .meta = "PATH", .help = "inputs"},
    {.type = SLM_OPT_END},
};
#undef A
static const slm_cli k_toy = {
    .cmd = "toy", .usage = "usage: toy\n", .opts = k_toy_opts, .max_positional = 1};

// Parses a NULL-terminated argument list (argv[0] = "toy") into *t (defaults: n 7, x 0.25).
static int parse(toy *t, slm_opt_seen *seen, const char *const *args) {
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"toy";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    slm_opt_list_free(&t->in);
    *t = (toy){.n = 7, .x = 0.25, .f = 1.0f};
    return slm_opt_parse(&k_toy, argc, argv, t, seen);
}
#define PARSE(t, seen, ...) parse(t, seen, (const char *const[]){__VA_ARGS__, NULL})

static void test_values(void) {
    toy t = {0};
    slm_opt_seen seen;
    CHECK_EQ_INT(PARSE(&t, &seen, "--n", "42", "--x", "0.5", "--f", "3e-4", "--s", "--n", "--flag",
                       "--mode", "exact", "--big", "9223372036854775807", "PATH"),
                 -1);
    CHECK_EQ_INT(t.n, 42);
    CHECK(t.x == 0.5);
    CHECK(t.f == 3e-4f);
    CHECK_EQ_STR(t.s, "--n"); // a value may start with -- unless strict_values
    CHECK(t.flag);
    CHECK_EQ_INT(t.mode, 2);
    CHECK(t.big == INT64_MAX);
    CHECK_EQ_INT(seen.n_positional, 1);
    CHECK_EQ_STR(seen.positional[0], "PATH");
    CHECK_EQ_INT(slm_opt_given(&k_toy, &seen, "--n"), 1);
    CHECK_EQ_INT(slm_opt_given(&k_toy, &seen, "--size"), 0);
    // untouched options keep the defaults
    CHECK_EQ_INT(PARSE(&t, &seen, "--flag"), -1);
    CHECK_EQ_INT(t.n, 7);
    CHECK(t.x == 0.25);
    // a later value wins
    CHECK_EQ_INT(PARSE(&t, &seen, "--n", "1", "--n", "100"), -1);
    CHECK_EQ_INT(t.n, 100);
    CHECK_EQ_INT(slm_opt_given(&k_toy, &seen, "--n"), 2);
    slm_opt_list_free(&t.in);
}

// The usage error's message (slm_errmsg) contains `want`.
static void expect_usage(toy *t, int rc, const char *want) {
    CHECK_EQ_INT(rc, SLM_EXIT_USAGE);
    CHECK_MSG(strstr(slm_errmsg(), want) != NULL, "message \"%s\" lacks \"%s\"", slm_errmsg(),
              want);
    slm_opt_list_free(&t->in);
}

static void test_errors(void) {
    toy t = {0};
    expect_usage(&t, PARSE(&t, NULL, "--n", "0"), "toy: --n: 0 is out of range [1, 100]");
    expect_usage(&t, PARSE(&t, NULL, "--n", "101"), "out of range [1, 100]");
    expect_usage(&t, PARSE(&t, NULL, "--n", "4x"), "--n: expected an integer, got \"4x\"");
    expect_usage(&t, PARSE(&t, NULL, "--big", "-1"), "--big: -1 is out of range");
    expect_usage(&t, PARSE(&t, NULL, "--x", "1"), "--x 1: must be in [0, 1)");
    expect_usage(&t, PARSE(&t, NULL, "--x", "-0.001"), "--x -0.001: must be in [0, 1)");
    expect_usage(&t, PARSE(&t, NULL, "--x", "nan"), "--x nan: must be in [0, 1)");
    expect_usage(&t, PARSE(&t, NULL, "--f", "0"), "--f 0: must be > 0 and finite");
    expect_usage(&t, PARSE(&t, NULL, "--f", "inf"), "--f inf: must be > 0 and finite");
    // finite as a double, not as a float
    expect_usage(&t, PARSE(&t, NULL, "--f", "1e300"), "--f 1e300: must be > 0 and finite");
    expect_usage(&t, PARSE(&t, NULL, "--mode", "quick"),
                 "--mode \"quick\": expected fast, slow or exact");
    expect_usage(&t, PARSE(&t, NULL, "--bogus"), "toy: unknown option --bogus (see --help)");
    expect_usage(&t, PARSE(&t, NULL, "-q"), "unknown option -q");
    expect_usage(&t, PARSE(&t, NULL, "--n"), "toy: option --n needs a value");
    expect_usage(&t, PARSE(&t, NULL, "P1", "P2"), "toy: unexpected argument \"P2\"");
    expect_usage(&t, PARSE(&t, NULL, "--a", "X", "--b", "Y"),
                 "--b Y: already given (--a X); --a and --b exclude each other");
    expect_usage(&t, PARSE(&t, NULL, "--a", "X", "--a", "Y"), "--a Y: already given (--a X)");
    expect_usage(&t, PARSE(&t, NULL, "--in", "--n", "3"), "option --in needs a value");
    // a bad value leaves the default in place
    PARSE(&t, NULL, "--x", "7");
    CHECK(t.x == 0.25);
}

static void test_sizes_and_lists(void) {
    static const struct {
        const char *s;
        size_t v; // 0: refused
    } cases[] = {{"5GB", 5000000000ull},
                 {"500MB", 500000000ull},
                 {"1.5KB", 1500},
                 {"2GiB", 2147483648ull},
                 {"3MiB", 3145728},
                 {"2000", 2000},
                 {"1", 1},
                 {"0.5", 0},
                 {"0", 0},
                 {"1e-300GB", 0},
                 {"inf", 0},
                 {"nan", 0},
                 {"lots", 0},
                 {"5TB", 0},
                 {"", 0},
                 {"2e18", 0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        size_t v = 0;
        slm_status st = slm_opt_parse_size("--size", cases[k].s, &v);
        if (cases[k].v) {
            CHECK_MSG(st == SLM_OK && v == cases[k].v, "%s -> %d %zu", cases[k].s, st, v);
        } else {
            CHECK_MSG(st == SLM_E_ARG, "%s accepted as %zu", cases[k].s, v);
            CHECK(strstr(slm_errmsg(), "--size") != NULL);
        }
    }
    toy t = {0};
    slm_opt_seen seen;
    // a list takes the bare arguments after it (shell globs); "-" is a bare argument
    CHECK_EQ_INT(PARSE(&t, &seen, "--in", "a", "b", "-", "--flag", "c", "--in", "d"), -1);
    CHECK_EQ_INT(t.in.n, 4);
    if (t.in.n == 4) {
        CHECK_EQ_STR(t.in.v[0], "a");
        CHECK_EQ_STR(t.in.v[1], "b");
        CHECK_EQ_STR(t.in.v[2], "-");
        CHECK_EQ_STR(t.in.v[3], "d");
        CHECK(t.in.v[4] == NULL);
    }
    CHECK_EQ_INT(seen.n_positional, 1); // "c": after --flag, not part of the list
    CHECK_EQ_STR(seen.positional[0], "c");
    slm_opt_list_free(&t.in);
}

static void test_exit_codes(void) {
    CHECK_EQ_INT(slm_exit_code(SLM_OK), 0);
    CHECK_EQ_INT(slm_exit_code(SLM_E_ARG), 2);
    CHECK_EQ_INT(slm_exit_code(SLM_E_IO), 1);
    CHECK_EQ_INT(slm_exit_code(SLM_E_FORMAT), 1);
    CHECK_EQ_INT(slm_exit_code(SLM_E_NOMEM), 1);
}

// The --help text of cli with `defaults`, in a malloc'd string.
static char *help_text(const slm_cli *cli, const void *defaults) {
    FILE *f = tmpfile();
    if (!f) return NULL;
    slm_opt_help(f, cli, defaults);
    long n = ftell(f);
    rewind(f);
    char *s = calloc(1, (size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
    fclose(f);
    return s;
}

static void test_help(void) {
    toy d = {.n = 7, .x = 0.25, .f = 3e-4f, .mode = 1, .size = 5000};
    char *h = help_text(&k_toy, &d);
    CHECK(h != NULL);
    if (!h) return;
    static const char *const want[] = {"usage: toy\n",
                                       "--n N",
                                       "count (in [1, 100]; default 7)",
                                       "fraction (in [0, 1); default 0.25)",
                                       "rate (> 0 and finite; default 0.0003)",
                                       "(fast|slow|exact)",
                                       "default slow",
                                       "default 5000 bytes",
                                       "--flag",
                                       "--in PATH"};
    for (size_t k = 0; k < sizeof want / sizeof *want; k++)
        CHECK_MSG(strstr(h, want[k]) != NULL, "help lacks \"%s\":\n%s", want[k], h);
    for (const char *p = h; *p;) { // wrapped to 100 columns
        size_t n = strcspn(p, "\n");
        CHECK_MSG(n <= 100, "help line of %zu columns", n);
        p += n + (p[n] != 0);
    }
    free(h);
    // train: every option is in its help
    const slm_cli *tc = slm_train_cli();
    h = help_text(tc, NULL);
    CHECK(h != NULL);
    if (!h) return;
    for (const slm_opt *o = tc->opts; o->type != SLM_OPT_END; o++)
        if (o->type != SLM_OPT_SECTION)
            CHECK_MSG(strstr(h, o->name) != NULL, "train --help lacks %s", o->name);
    free(h);
}

// The file's contents (NULL-terminated) or NULL.
static char *slurp(const char *rel) {
    const char *src = getenv("SLM_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src ? src : "..", rel);
    char *txt = NULL;
    size_t len = 0;
    if (slm_file_read_all(path, &txt, &len)) return NULL;
    return txt;
}

// Whether `name` (e.g. "--lr") appears in text as the quoted string "\"--lr\"".
static bool has_quoted(const char *text, const char *name) {
    char q[96];
    snprintf(q, sizeof q, "\"%s\"", name);
    return strstr(text, q) != NULL;
}

static void test_train_table_vs_agree(void) {
    char *agree = slurp("src/train/agree.c");
    char *cluster = slurp("docs/cluster.md");
    CHECK_MSG(agree && cluster, "cannot read src/train/agree.c or docs/cluster.md");
    if (!agree || !cluster) goto out;
    const slm_cli *tc = slm_train_cli();
    // Options agree.c compares under another option's name (--synthetic is shown in --data's
    // value as "(--synthetic)").
    static const char *const compared_as[][2] = {{"--synthetic", "--data"}};
    // The per-rank list of docs/cluster.md ("Allowed to differ per rank ...: `--threads`, ...
    // (train)").
    const char *doc = strstr(cluster, "Allowed to differ per rank");
    const char *doc_end = doc ? strstr(doc, "(train)") : NULL;
    CHECK_MSG(doc && doc_end, "docs/cluster.md has no per-rank list for train");
    if (!doc || !doc_end) goto out;
    int n_per_rank = 0;
    for (const slm_opt *o = tc->opts; o->type != SLM_OPT_END; o++) {
        if (o->type == SLM_OPT_SECTION) continue;
        const char *name = o->name;
        for (size_t k = 0; k < sizeof compared_as / sizeof *compared_as; k++)
            if (!strcmp(name, compared_as[k][0])) name = compared_as[k][1];
        char bq[96];
        snprintf(bq, sizeof bq, "`%s`", o->name);
        const char *in_doc = strstr(doc, bq);
        bool documented = in_doc && in_doc < doc_end;
        if (o->flags & SLM_OPTF_PER_RANK) {
            n_per_rank++;
            CHECK_MSG(!has_quoted(agree, o->name), "%s is per-rank but agree.c compares it",
                      o->name);
            CHECK_MSG(documented, "%s is per-rank but docs/cluster.md does not say so", o->name);
        } else {
            CHECK_MSG(has_quoted(agree, name),
                      "train option %s is neither in agree.c's list nor marked per-rank", o->name);
            CHECK_MSG(!documented, "docs/cluster.md lists %s as per-rank; the table does not",
                      o->name);
        }
    }
    CHECK(n_per_rank == 7);
    // every "--name" agree.c compares is a train option (not a stale one)
    for (const char *p = agree; (p = strstr(p, "add(l, \"--")) != NULL;) {
        p += strlen("add(l, \"");
        size_t n = strcspn(p, "\" "); // "--init-from-hf config.json": a file read for it
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        const slm_opt *o = slm_opt_find(tc, name);
        CHECK_MSG(o != NULL, "agree.c compares %s, which train does not have", name);
        if (o) CHECK_MSG(!(o->flags & SLM_OPTF_PER_RANK), "agree.c compares per-rank %s", name);
    }
out:
    free(agree);
    free(cluster);
}

// The train table is well formed: unique --names, a help line, a value placeholder exactly for
// options with a value, non-empty ranges, fewer entries than SLM_OPT_MAX.
static void test_train_table_sane(void) {
    const slm_cli *tc = slm_train_cli();
    int n = 0;
    for (const slm_opt *o = tc->opts; o->type != SLM_OPT_END; o++, n++) {
        CHECK(o->help && o->help[0]);
        if (o->type == SLM_OPT_SECTION) continue;
        CHECK_MSG(!strncmp(o->name, "--", 2), "%s", o->name);
        CHECK_MSG(slm_opt_find(tc, o->name) == o, "%s given twice in the table", o->name);
        CHECK_MSG((o->type == SLM_OPT_FLAG) == (o->meta == NULL), "%s: placeholder", o->name);
        if (o->type == SLM_OPT_INT || o->type == SLM_OPT_INT64)
            CHECK_MSG(o->ilo <= o->ihi, "%s: empty range", o->name);
        if (o->type == SLM_OPT_DOUBLE || o->type == SLM_OPT_FLOAT)
            CHECK_MSG(o->dlo < o->dhi, "%s: empty range", o->name);
        if (o->type == SLM_OPT_CUSTOM) CHECK(o->parse != NULL);
        if (o->type == SLM_OPT_ENUM) CHECK(o->choices && o->choices[0]);
    }
    CHECK(n < SLM_OPT_MAX);
}

int main(void) {
    RUN(test_values);
    RUN(test_errors);
    RUN(test_sizes_and_lists);
    RUN(test_exit_codes);
    RUN(test_help);
    RUN(test_train_table_vs_agree);
    RUN(test_train_table_sane);
    return TEST_SUMMARY();
}
