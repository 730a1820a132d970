// Heartbeat records (docs/operations.md "Heartbeat"): parsing one, and the scan of an
// attempt's heartbeat directory that tells progress and the steps reached.
#include "launch/launch_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

slm_status slm_launch_parse_heartbeat(const char *text, size_t len, slm_heartbeat *hb) {
    memset(hb, 0, sizeof *hb);
    cJSON *o = cJSON_ParseWithLength(text, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return slm_fail(SLM_E_FORMAT, "heartbeat: not a JSON object");
    }
    int64_t rank = 0, pid = 0, step = 0;
    double t = 0;
    const char *host = NULL, *phase = NULL;
    slm_status st = slm_json_i64("heartbeat", o, "rank", 0, MAX_RANKS * 1024, &rank);
    if (!st) st = slm_json_i64("heartbeat", o, "pid", 1, INT32_MAX, &pid);
    if (!st) st = slm_json_i64("heartbeat", o, "step", 0, INT64_MAX / 2, &step);
    if (!st) st = slm_json_num("heartbeat", o, "time", 0, 1e11, false, &t);
    if (!st) st = slm_json_str("heartbeat", o, "host", &host);
    if (!st) st = slm_json_str("heartbeat", o, "phase", &phase);
    if (!st) {
        hb->rank = (int)rank, hb->pid = (long)pid, hb->step = step, hb->time = t;
        snprintf(hb->host, sizeof hb->host, "%s", host);
        snprintf(hb->phase, sizeof hb->phase, "%s", phase);
    }
    cJSON_Delete(o);
    return st;
}

void hb_init(hb_state *h, int world, double now) {
    memset(h, 0, sizeof *h);
    h->world = world;
    h->last = calloc((size_t)world, sizeof *h->last);
    if (!h->last) slm_fatal("launch: out of memory");
    for (int r = 0; r < world; r++)
        h->last[r].step = -1;
    h->last_progress = now;
    h->start_step = -1;
    h->max_step = -1;
    h->newest_step = -1;
}

void hb_scan(hb_state *h, const char *dir, double now) {
    char path[4096];
    for (int r = 0; r < h->world; r++) {
        snprintf(path, sizeof path, "%s/rank_%05d.json", dir, r);
        char *text = NULL;
        size_t len = 0;
        if (slm_file_read_all(path, &text, &len) != SLM_OK) continue;
        slm_heartbeat hb;
        if (slm_launch_parse_heartbeat(text, len, &hb) == SLM_OK && hb.rank == r) {
            slm_heartbeat *p = &h->last[r];
            if (hb.step != p->step || strcmp(hb.phase, p->phase) != 0 || hb.pid != p->pid)
                h->last_progress = now;
            *p = hb;
            h->any_record = true;
            if (!strcmp(hb.phase, "start") && h->start_step < 0) h->start_step = hb.step;
            bool trained = !strcmp(hb.phase, "train");
            if (trained && !h->any_train) h->first_step_time = now;
            h->any_train |= trained;
            if (strcmp(hb.phase, "start") != 0 && hb.step > h->max_step) h->max_step = hb.step;
            if (hb.time > h->newest_time) h->newest_time = hb.time;
            if (hb.step > h->newest_step) h->newest_step = hb.step;
            lm_heartbeat(h->newest_time, h->newest_step);
        }
        free(text);
    }
}

// Every rank's newest heartbeat record is its final "end" record (the trainer finished).
bool all_ended(const hb_state *h) {
    for (int rk = 0; rk < h->world; rk++)
        if (h->last[rk].step < 0 || strcmp(h->last[rk].phase, "end") != 0) return false;
    return h->world > 0;
}
