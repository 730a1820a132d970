// shardlm report: a run directory as one self-contained HTML page with charts (-o) or a short
// text summary for the terminal (src/report/report.h).
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "report/report.h"

typedef struct report_args {
    const char *out;
} report_args;

static const slm_opt k_report_opts[] = {
    {.name = "-o",
     .type = SLM_OPT_STRING,
     .off = offsetof(report_args, out),
     .meta = "FILE.html",
     .help = "write the HTML report there (replaced atomically); without it a text summary is "
             "printed"},
    {.type = SLM_OPT_END},
};

static const slm_cli k_report_cli = {
    .cmd = "report",
    .usage = "usage: shardlm report RUN_DIR [-o report.html]\n"
             "Reads RUN_DIR's metrics.jsonl, config.json, checkpoints/ and attempts.json (written\n"
             "by shardlm launch, if present) and writes one self-contained HTML file (inline SVG\n"
             "charts of loss, validation loss, learning rate, tokens/s, MFU, the step-time split\n"
             "and memory per rank; the config, checkpoints, attempts and events; no scripts, no\n"
             "network), or prints a short summary. RUN_DIR is only read.\n\n",
    .opts = k_report_opts,
    .footer = "\nexit codes: 0 ok, 1 unreadable run directory or write error, 2 usage error\n",
    .max_positional = 1,
};

int slm_cmd_report(int argc, char **argv) {
    report_args x = {0};
    slm_opt_seen seen;
    int rc = slm_opt_parse(&k_report_cli, argc, argv, &x, &seen);
    if (rc >= 0) return rc;
    if (seen.n_positional != 1) {
        slm_error("report: give the run directory (shardlm report RUN_DIR [-o report.html])");
        return SLM_EXIT_USAGE;
    }
    const char *dir = seen.positional[0];
    slm_status st;
    if (x.out) {
        st = slm_report_html(dir, x.out);
        if (!st) printf("report: wrote %s\n", x.out);
    } else {
        slm_buf b = {0};
        st = slm_report_text(dir, &b);
        if (!st) fwrite(b.data, 1, b.len, stdout);
        slm_buf_free(&b);
    }
    if (st) {
        slm_error("report: %s", slm_errmsg());
        return slm_exit_code(st);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        slm_error("report: write to stdout failed: %s", strerror(errno ? errno : EIO));
        return SLM_EXIT_ERROR;
    }
    return SLM_EXIT_OK;
}
