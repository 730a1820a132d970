// The CLI option-table engine (tools/opt.c, base/opt.c) and the train option table
// (src/train/options.c):
//  - parsing: ints / reals / sizes / enums / flags / lists into the args struct, range errors
//    naming the option and the range, unknown options, missing values, bare arguments,
//    exclusion groups, exit codes (0 / 1 / 2);
//  - --help: every option, its range and its default from the defaults struct;
//  - train: the table covers every field of slm_train_opts with an entry of the field's type;
//    its defaults pass the library's checks; every agreed option's compared text changes with
//    its value; the library's checks word the errors the CLI prints; the per-rank options are
//    exactly the ones docs/cluster.md lists.
#include <stddef.h>

#include "cmd.h"
#include "test.h"
#include "train/train.h"

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

// The per-rank options of the train command line (library table and CLI-only ones) are exactly
// the ones docs/cluster.md lists as allowed to differ per rank.
static void test_train_per_rank_documented(void) {
    char *cluster = slurp("docs/cluster.md");
    CHECK_MSG(cluster != NULL, "cannot read docs/cluster.md");
    if (!cluster) return;
    // "Allowed to differ per rank ...: `--threads`, ... (train)"
    const char *doc = strstr(cluster, "Allowed to differ per rank");
    const char *doc_end = doc ? strstr(doc, "(train)") : NULL;
    CHECK_MSG(doc && doc_end, "docs/cluster.md has no per-rank list for train");
    const slm_cli *tc = slm_train_cli();
    int n_per_rank = 0;
    for (const slm_opt *o = tc->opts; doc && doc_end && o->type != SLM_OPT_END; o++) {
        if (o->type == SLM_OPT_SECTION) continue;
        char bq[96];
        snprintf(bq, sizeof bq, "`%s`", o->name);
        const char *in_doc = strstr(doc, bq);
        bool documented = in_doc && in_doc < doc_end;
        bool per_rank = o->flags & SLM_OPTF_PER_RANK;
        n_per_rank += per_rank;
        CHECK_MSG(documented == per_rank, "%s: %s per-rank, docs/cluster.md %s", o->name,
                  per_rank ? "" : "not", documented ? "lists it" : "does not");
    }
    CHECK_EQ_INT(n_per_rank, 7);
    free(cluster);
}

// The alignment a field of `size` bytes can need (scalars: their size; structs: at most 8).
static size_t align_of_size(size_t size) {
    return size >= 8 ? 8 : size >= 4 ? 4 : size >= 2 ? 2 : 1;
}

typedef struct span {
    size_t lo, hi;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

// Each entry of slm_train_options names a field of slm_train_opts of its type's size, and every
// field of slm_train_opts is an option's, or one of the hooks: the bytes no entry covers are
// padding (shorter than the next field's alignment). A new field without an entry shows as a
// gap (one small enough to pass for padding, e.g. a bool after a bool, is not caught).
static void test_train_table_covers_struct(void) {
    span s[SLM_OPT_MAX + 2];
    int n = 0;
    for (const slm_opt *o = slm_train_options; o->type != SLM_OPT_END; o++) {
        if (o->type == SLM_OPT_SECTION) continue;
        size_t want = 0;
        switch (o->type) {
        case SLM_OPT_INT:
        case SLM_OPT_FLOAT:
            want = 4;
            break;
        case SLM_OPT_INT64:
        case SLM_OPT_DOUBLE:
            want = 8;
            break;
        case SLM_OPT_STRING:
            want = sizeof(const char *);
            break;
        case SLM_OPT_FLAG:
            want = o->parse ? o->size : sizeof(bool);
            break;
        case SLM_OPT_ENUM:
            want = o->flags & SLM_OPTF_BOOL ? sizeof(bool) : sizeof(int);
            break;
        default:
            want = o->size; // CUSTOM: its parser's
        }
        CHECK_MSG(o->size > 0 && o->size == want, "%s: field of %zu bytes, type wants %zu", o->name,
                  o->size, want);
        CHECK_MSG(o->off + o->size <= sizeof(slm_train_opts), "%s: outside slm_train_opts",
                  o->name);
        bool agreed = !(o->flags & SLM_OPTF_PER_RANK);
        if (agreed && (o->type == SLM_OPT_CUSTOM || (o->type == SLM_OPT_FLAG && o->parse)))
            CHECK_MSG(o->show != NULL, "%s: no canonical text for slm_train_agree", o->name);
        s[n++] = (span){o->off, o->off + o->size, o->name};
    }
    s[n++] = (span){offsetof(slm_train_opts, n_hooks),
                    offsetof(slm_train_opts, n_hooks) + sizeof(int), "n_hooks"};
    s[n++] =
        (span){offsetof(slm_train_opts, hooks),
               offsetof(slm_train_opts, hooks) + sizeof(((slm_train_opts *)0)->hooks), "hooks"};
    qsort(s, (size_t)n, sizeof *s, cmp_span);
    size_t end = 0;
    for (int k = 0; k < n; k++) {
        if (s[k].lo > end)
            CHECK_MSG(s[k].lo - end < align_of_size(s[k].hi - s[k].lo),
                      "slm_train_opts bytes [%zu, %zu) before %s: a field without an option", end,
                      s[k].lo, s[k].name);
        if (s[k].hi > end) end = s[k].hi;
    }
    CHECK_MSG(sizeof(slm_train_opts) - end < 8,
              "slm_train_opts bytes [%zu, %zu) at the end: a "
              "field without an option",
              end, sizeof(slm_train_opts));
}

// The defaults (slm_train_opts_default, from the table) pass the library's own checks (the
// required options aside), and the rank-agreement text of every compared option changes with its
// value (so slm_train_agree tells any two different settings apart).
static void test_train_defaults_and_agreement(void) {
    slm_train_opts d;
    slm_train_opts_default(&d);
    for (const slm_opt *o = slm_train_options; o->type != SLM_OPT_END; o++) {
        if (o->type == SLM_OPT_SECTION) continue;
        slm_status st = slm_opt_check(o, &d);
        if (o->flags & SLM_OPTF_REQUIRED)
            CHECK_MSG(st == SLM_E_ARG, "%s: required, yet its zeroed field passes", o->name);
        else
            CHECK_MSG(st == SLM_OK, "%s: default fails its range: %s", o->name, slm_errmsg());
    }
    // a valid whole: the required options given
    d.B = d.T = 1;
    d.steps = 1;
    d.synthetic = true;
    CHECK_MSG(slm_train_opts_check(&d) == SLM_OK, "defaults: %s", slm_errmsg());
    // another value of each option, as text a command line could give
    static const char *const custom[][2] = {
        {"--sharding", "NO_SHARD"},  {"--param-dtype", "bf16"}, {"--reduce-dtype", "bf16"},
        {"--compute-dtype", "bf16"}, {"--lora-targets", "all"}, {"--metrics-addr", ":9100"}};
    for (const slm_opt *o = slm_train_options; o->type != SLM_OPT_END; o++) {
        if (o->type == SLM_OPT_SECTION || (o->flags & SLM_OPTF_PER_RANK)) continue;
        char v[64] = "x", before[256], after[256];
        if (o->type == SLM_OPT_INT || o->type == SLM_OPT_INT64)
            snprintf(v, sizeof v, "%lld", (long long)(o->ilo > 0 ? o->ilo + 1 : 7));
        else if (o->type == SLM_OPT_FLOAT || o->type == SLM_OPT_DOUBLE)
            snprintf(v, sizeof v, "%.17g", o->dlo + (o->dhi - o->dlo > 1 ? 0.625 : 0.25));
        else if (o->type == SLM_OPT_ENUM)
            snprintf(v, sizeof v, "%s", o->choices[1]);
        for (size_t k = 0; k < sizeof custom / sizeof *custom; k++)
            if (!strcmp(o->name, custom[k][0])) snprintf(v, sizeof v, "%s", custom[k][1]);
        slm_train_opts x;
        slm_train_opts_default(&x);
        slm_opt_value_text(o, &x, before, sizeof before);
        slm_status st = slm_opt_set(o, o->type == SLM_OPT_FLAG ? NULL : v, &x);
        CHECK_MSG(st == SLM_OK, "%s %s: %s", o->name, v, slm_errmsg());
        slm_opt_value_text(o, &x, after, sizeof after);
        CHECK_MSG(strcmp(before, after) != 0, "%s: agreement text \"%s\" unchanged by %s", o->name,
                  before, o->type == SLM_OPT_FLAG ? "the flag" : v);
    }
}

// The library checks what used to be checked twice (CLI and slm_train_open) and what only the
// CLI checked: the message is the library's, the CLI prints it after "train: ".
static void test_train_library_checks(void) {
    static const struct {
        const char *what, *want;
    } cases[] = {
        {"spike", "--loss-spike-window 3: must be 0 (off) or at least 8"},
        {"lora", "--lora-rank trains adapters on a frozen base: give the base with --init-from-hf"},
        {"minlr", "--min-lr 0.5: must be in [0, lr] = [0, 0.25]"},
        {"batch", "--batch: 0 is out of range [1, 1048576]"},
        {"beta", "--beta2 1: must be in [0, 1)"},
        {"timeout", "--collective-timeout"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        slm_train_opts o;
        slm_train_opts_default(&o);
        o.B = o.T = 1;
        o.steps = 1;
        o.synthetic = true;
        const char *w = cases[k].what;
        if (!strcmp(w, "spike")) o.spike_window = 3;
        if (!strcmp(w, "lora")) o.lora.rank = 4, o.lora.alpha = 8;
        if (!strcmp(w, "minlr")) o.adamw.lr_peak = 0.25f, o.min_lr = 0.5f;
        if (!strcmp(w, "batch")) o.B = 0;
        if (!strcmp(w, "beta")) o.adamw.beta2 = 1.0f;
        if (!strcmp(w, "timeout")) o.collective_timeout_s = 1e300; // not finite as a float
        CHECK_EQ_INT(slm_train_opts_check(&o), SLM_E_ARG);
        CHECK_MSG(strstr(slm_errmsg(), cases[k].want) != NULL, "%s: \"%s\" lacks \"%s\"", w,
                  slm_errmsg(), cases[k].want);
    }
    // the "not given" values pass: min-lr < 0 (lr/10), threads / vocab-size / lora-rank 0
    slm_train_opts o;
    slm_train_opts_default(&o);
    o.B = o.T = 1;
    o.steps = 1;
    o.synthetic = true;
    o.min_lr = -1;
    o.threads = 0;
    CHECK_EQ_INT(slm_train_opts_check(&o), SLM_OK);
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
    RUN(test_train_per_rank_documented);
    RUN(test_train_table_covers_struct);
    RUN(test_train_defaults_and_agreement);
    RUN(test_train_library_checks);
    RUN(test_train_table_sane);
    return TEST_SUMMARY();
}
