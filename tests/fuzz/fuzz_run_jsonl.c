// libFuzzer target: the metrics.jsonl reader of shardlm report (slm_run_log_parse) on arbitrary
// bytes, then the invariants the renderers rely on (steps sorted and unique, arrays sized).
#include "report/report_internal.h"

#include <stdlib.h>
#include <string.h>

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    slm_run_log l;
    if (slm_run_log_parse((const char *)data, size, "fuzz.jsonl", &l) != SLM_OK) return 0;
    for (size_t i = 1; i < l.n_steps; i++)
        if (l.steps[i].step <= l.steps[i - 1].step) __builtin_trap();
    volatile double sum = 0; // reads every per-rank element (ASan checks the bounds)
    for (size_t i = 0; i < l.n_ranks; i++)
        for (int k = 0; k < l.ranks[i].n_ranks; k++) {
            const slm_run_ranks *r = &l.ranks[i];
            if (r->rss_bytes) sum += r->rss_bytes[k];
            if (r->peak_rss_bytes) sum += r->peak_rss_bytes[k];
            if (r->cpu_util) sum += r->cpu_util[k];
            if (r->step_ms) sum += r->step_ms[k];
        }
    (void)sum;
    for (size_t i = 0; i < l.n_events; i++)
        if (!l.events[i].json || !l.events[i].name[0]) __builtin_trap();
    // Both renderers on what was parsed (no files): bounded output, no hang, no NaN in a path.
    report_run r;
    memset(&r, 0, sizeof r);
    r.dir = strdup("fuzz-run");
    r.log = l;
    report_run_derive(&r);
    slm_buf b = {0};
    report_render_html(&r, &b);
    if (!b.data) __builtin_trap();
    for (const char *p = b.data; (p = strstr(p, " d=\"")) != NULL;) // paths: numbers and M L Z
        for (p += 4; *p != '"'; p++)
            if (!strchr("MLZ0123456789.- ", *p)) __builtin_trap();
    slm_buf_free(&b);
    report_render_text(&r, &b);
    slm_buf_free(&b);
    report_run_close(&r); // frees r.log too
    return 0;
}
