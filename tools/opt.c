// The option-table engine of the shardlm CLI (opt.h): argv parsing, usage errors and --help, all
// from one slm_opt table per subcommand (one value's parsing and range: base/opt.c).
#include "opt.h"

#include "fsdp/fsdp.h"
#include "metrics/metrics.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int slm_exit_code(slm_status st) {
    return st == SLM_OK ? SLM_EXIT_OK : st == SLM_E_ARG ? SLM_EXIT_USAGE : SLM_EXIT_ERROR;
}

const slm_opt *slm_opt_find(const slm_cli *cli, const char *name) {
    for (const slm_opt *o = cli->opts; o->type != SLM_OPT_END; o++)
        if (o->type != SLM_OPT_SECTION && !strcmp(o->name, name)) return o;
    return NULL;
}

int slm_opt_given(const slm_cli *cli, const slm_opt_seen *seen, const char *name) {
    const slm_opt *o = slm_opt_find(cli, name);
    return o ? seen->count[o - cli->opts] : 0;
}

static int usage_error(const slm_cli *cli, bool show_usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int usage_error(const slm_cli *cli, bool show_usage, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    slm_fail(SLM_E_ARG, "%s: %s", cli->cmd, msg); // also readable with slm_errmsg()
    slm_error("%s", slm_errmsg());
    if (show_usage) slm_opt_help(stderr, cli, NULL);
    return SLM_EXIT_USAGE;
}

// "--model and --init-from-hf": the names of one exclusion group.
static void group_names(const slm_cli *cli, int group, char *buf, size_t cap) {
    int n = 0, total = 0;
    for (const slm_opt *o = cli->opts; o->type != SLM_OPT_END; o++)
        total += o->type != SLM_OPT_SECTION && o->group == group;
    buf[0] = 0;
    for (const slm_opt *o = cli->opts; o->type != SLM_OPT_END; o++) {
        if (o->type == SLM_OPT_SECTION || o->group != group) continue;
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s",
                 n == 0           ? ""
                 : n + 1 == total ? " and "
                                  : ", ",
                 o->name);
        n++;
    }
}

int slm_opt_parse(const slm_cli *cli, int argc, char **argv, void *args, slm_opt_seen *seen) {
    slm_opt_seen local;
    if (!seen) seen = &local;
    memset(seen, 0, sizeof *seen);
    for (int i = 1; i < argc && cli->help_anywhere; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            slm_opt_help(stdout, cli, args);
            return SLM_EXIT_OK;
        }
    const char *group_val[8] = {0};
    const slm_opt *group_opt[8] = {0};
    const slm_opt *list = NULL; // the LIST option that bare arguments continue
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        // A bare argument ("-" is one: stdin); after a LIST option anything but --name is.
        if (a[0] != '-' || !a[1] || (list && strncmp(a, "--", 2) != 0)) {
            if (list) {
                slm_opt_list *l = (slm_opt_list *)((char *)args + list->off);
                l->v[l->n++] = a;
            } else if (seen->n_positional < cli->max_positional &&
                       seen->n_positional <
                           (int)(sizeof seen->positional / sizeof *seen->positional)) {
                seen->positional[seen->n_positional++] = a;
            } else {
                return usage_error(cli, true, "unexpected argument \"%s\"", a);
            }
            continue;
        }
        list = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            slm_opt_help(stdout, cli, args);
            return SLM_EXIT_OK;
        }
        const slm_opt *o = slm_opt_find(cli, a);
        if (!o) return usage_error(cli, false, "unknown option %s (see --help)", a);
        size_t idx = (size_t)(o - cli->opts);
        if (idx >= SLM_OPT_MAX || o->group < 0 || o->group >= 8) // a table that breaks opt.h
            slm_fatal("%s: option table entry %zu (%s): more than %d entries or group not in "
                      "[0, 8)",
                      cli->cmd, idx, o->name, SLM_OPT_MAX);
        if (seen->count[idx] < 255) seen->count[idx]++;
        if (o->type == SLM_OPT_FLAG) {
            slm_status st = slm_opt_set(o, NULL, args);
            if (st) return usage_error(cli, false, "%s", slm_errmsg());
            continue;
        }
        bool strict = cli->strict_values || o->type == SLM_OPT_LIST;
        if (i + 1 >= argc || (strict && !strncmp(argv[i + 1], "--", 2)))
            return usage_error(cli, false, "option %s needs a value", a);
        const char *v = argv[++i];
        if (o->group > 0) {
            if (group_opt[o->group]) {
                char names[256];
                group_names(cli, o->group, names, sizeof names);
                return usage_error(cli, false,
                                   "%s %s: already given (%s %s); %s exclude each other and "
                                   "each is given once",
                                   a, v, group_opt[o->group]->name, group_val[o->group], names);
            }
            group_opt[o->group] = o;
            group_val[o->group] = v;
        }
        if (o->type == SLM_OPT_LIST) {
            slm_opt_list *l = (slm_opt_list *)((char *)args + o->off);
            if (!l->v) l->v = slm_xcalloc((size_t)argc + 1, sizeof *l->v);
            l->v[l->n++] = v;
            list = o;
            continue;
        }
        slm_status st = slm_opt_set(o, v, args);
        if (st) return usage_error(cli, false, "%s", slm_errmsg());
    }
    return -1;
}

// Appends the text of an option's default value (from `defaults`) to buf; false when there is
// none to show.
static bool default_text(const slm_opt *o, const void *defaults, char *buf, size_t cap) {
    if (o->def) {
        snprintf(buf, cap, "%s", o->def);
        return true;
    }
    if (!defaults || (o->flags & SLM_OPTF_NODEF)) return false;
    const char *p = (const char *)defaults + o->off;
    switch (o->type) {
    case SLM_OPT_INT:
        snprintf(buf, cap, "%d", *(const int *)p);
        return true;
    case SLM_OPT_INT64:
        snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p);
        return true;
    case SLM_OPT_DOUBLE:
        snprintf(buf, cap, "%g", *(const double *)p);
        return true;
    case SLM_OPT_FLOAT:
        snprintf(buf, cap, "%g", (double)*(const float *)p);
        return true;
    case SLM_OPT_STRING:
        if (!*(const char *const *)p) return false;
        snprintf(buf, cap, "%s", *(const char *const *)p);
        return true;
    case SLM_OPT_ENUM:
        snprintf(buf, cap, "%s",
                 o->choices[o->flags & SLM_OPTF_BOOL ? *(const bool *)p : *(const int *)p]);
        return true;
    case SLM_OPT_SIZE:
        snprintf(buf, cap, "%zu bytes", *(const size_t *)p);
        return true;
    default:
        return false;
    }
}

void slm_opt_wrap(FILE *f, const char *text, int col, int indent, int width) {
    const char *p = text;
    bool first_word = true;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p) break;
        size_t n = strcspn(p, " ");
        if (!first_word && col + 1 + (int)n > width) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (!first_word) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, n, f);
        col += (int)n;
        p += n;
        first_word = false;
    }
    fputc('\n', f);
}

static void help_to(FILE *f, const slm_cli *cli, const void *defaults) {
    enum { NAME_COL = 24, WIDTH = 100 };
    if (cli->usage) fputs(cli->usage, f);
    for (const slm_opt *o = cli->opts; o->type != SLM_OPT_END; o++) {
        if (o->type == SLM_OPT_SECTION) {
            fprintf(f, "%s\n", o->help);
            continue;
        }
        char head[96], text[1024], r[96], d[96];
        snprintf(head, sizeof head, "  %s%s%s", o->name, o->meta ? " " : "",
                 o->meta ? o->meta : "");
        slm_opt_range_text(o, r, sizeof r);
        bool has_def = default_text(o, defaults, d, sizeof d);
        size_t len = (size_t)snprintf(text, sizeof text, "%s", o->help ? o->help : "");
        if (o->type == SLM_OPT_ENUM && len < sizeof text) {
            len += (size_t)snprintf(text + len, sizeof text - len, " (");
            for (int k = 0; o->choices[k] && len < sizeof text; k++)
                len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", k ? "|" : "",
                                        o->choices[k]);
            if (len < sizeof text) len += (size_t)snprintf(text + len, sizeof text - len, ")");
        }
        if ((r[0] || has_def) && len < sizeof text)
            snprintf(text + len, sizeof text - len, " (%s%s%s%s)", r[0] ? r : "",
                     r[0] && has_def ? "; " : "", has_def ? "default " : "", has_def ? d : "");
        int col = (int)strlen(head);
        if (col + 2 > NAME_COL) {
            fprintf(f, "%s\n%*s", head, NAME_COL, "");
        } else {
            fprintf(f, "%-*s", NAME_COL, head);
        }
        slm_opt_wrap(f, text, NAME_COL, NAME_COL, WIDTH);
    }
    if (cli->footer) fputs(cli->footer, f);
    if (cli->footer_fn) cli->footer_fn(f);
}

void slm_opt_help(FILE *f, const slm_cli *cli, const void *defaults) {
    // Composed in memory and written at once: a reader that stops early (`| grep -q`) then
    // closes the pipe after the whole text is in it, not between two pieces (SIGPIPE).
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) {
        help_to(f, cli, defaults);
        return;
    }
    help_to(m, cli, defaults);
    fclose(m);
    fwrite(buf, 1, len, f);
    fflush(f);
    free(buf);
}

slm_status slm_opt_parse_compute_dtype(const char *opt, const char *v, void *dst) {
    return slm_precision_parse(opt, v, dst);
}

slm_status slm_opt_parse_metrics_addr(const char *opt, const char *v, void *dst) {
    char host[256];
    int port;
    slm_status st = slm_metrics_parse_addr(v, host, sizeof host, &port);
    if (st) return slm_fail_wrap(st, "%s", opt);
    *(const char **)dst = v;
    return SLM_OK;
}
