// libFuzzer target: the metrics.jsonl reader of shardlm report (slm_run_log_parse) on arbitrary
// bytes, then the invariants the renderers rely on (steps sorted and unique, arrays sized).
#include "report/report.h"

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
    slm_run_log_free(&l);
    return 0;
}
