// The record of a launch: RUN_DIR/attempts.json (earlier launches' attempts kept, appended to)
// and the summary table printed at the end.
#include "launch/launch_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"

// A field of attempts.json: a number, a string (str set), or null (!valid).
typedef struct json_field {
    const char *key;
    double num;
    const char *str;
    bool valid;
} json_field;
#define NUM(key, x)                                                                                \
    { key, (double)(x), NULL, true }
#define NUM_OR_NULL(key, x, valid)                                                                 \
    { key, (double)(x), NULL, valid }
#define STR(key, s)                                                                                \
    { key, 0, s, true }

// Adds fields f[0..n) to object x, in order.
static void add_fields(cJSON *x, const json_field *f, size_t n) {
    for (size_t i = 0; i < n; i++) {
        cJSON *v = !f[i].valid ? cJSON_CreateNull()
                   : f[i].str  ? cJSON_CreateString(f[i].str)
                               : cJSON_CreateNumber(f[i].num);
        cJSON_AddItemToObject(x, f[i].key, v);
    }
}

// The integer `key` of object x (def when absent or not a number).
static int json_int(const cJSON *x, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(x, key);
    return cJSON_IsNumber(v) ? v->valueint : def;
}

// An array of x (detached; empty when absent) whose objects all get "launch" (those of a file
// written before launches were numbered belong to launch 1).
static cJSON *take_array(cJSON *x, const char *key) {
    cJSON *a = cJSON_DetachItemFromObjectCaseSensitive(x, key);
    if (!cJSON_IsArray(a)) cJSON_Delete(a), a = cJSON_CreateArray();
    cJSON *it;
    cJSON_ArrayForEach(it,
                       a) if (cJSON_IsObject(it) && !cJSON_GetObjectItemCaseSensitive(it, "launch"))
        cJSON_AddNumberToObject(it, "launch", 1);
    return a;
}

// Reads the attempts.json earlier launches wrote into RUN_DIR (r->prev_*, r->launch_no). One
// that cannot be read is kept as attempts.json.bad (a warning says so) and a new history starts.
void load_history(run *r) {
    r->prev_attempts = cJSON_CreateArray();
    r->prev_health = cJSON_CreateArray();
    r->prev_launches = cJSON_CreateArray();
    r->launch_no = 1;
    char path[4200], bad[4300];
    snprintf(path, sizeof path, "%s/attempts.json", r->run_dir);
    char *text = NULL;
    size_t len = 0;
    if (access(path, F_OK) != 0) return;
    cJSON *o = NULL;
    if (slm_file_read_all(path, &text, &len) == SLM_OK) o = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(o) || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "attempts"))) {
        cJSON_Delete(o);
        snprintf(bad, sizeof bad, "%s.bad", path);
        slm_warn("launch: %s is not an attempts file shardlm launch wrote; kept as %s, the "
                 "attempts of this launch start a new one",
                 path, rename(path, bad) == 0 ? bad : "(rename failed: overwritten)");
        return;
    }
    cJSON_Delete(r->prev_attempts), cJSON_Delete(r->prev_health), cJSON_Delete(r->prev_launches);
    r->prev_attempts = take_array(o, "attempts");
    r->prev_health = take_array(o, "health");
    r->prev_launches = take_array(o, "launches");
    if (cJSON_GetArraySize(r->prev_launches) == 0) { // one launch, before they were numbered
        cJSON *l = cJSON_CreateObject();
        cJSON_AddNumberToObject(l, "launch", 1);
        static const char *const keep[] = {"start",        "end",      "nproc",  "min_nproc",
                                           "max_restarts", "restarts", "result", "exit_code",
                                           "message",      NULL};
        for (int i = 0; keep[i]; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, keep[i]);
            if (v) cJSON_AddItemToObject(l, keep[i], cJSON_Duplicate(v, true));
        }
        cJSON_AddNumberToObject(l, "attempts", cJSON_GetArraySize(r->prev_attempts));
        cJSON_AddItemToArray(r->prev_launches, l);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, r->prev_launches) {
        int n = json_int(it, "launch", 0);
        if (n >= r->launch_no) r->launch_no = n + 1;
    }
    cJSON_ArrayForEach(it, r->prev_attempts) {
        int n = json_int(it, "launch", 0);
        if (n >= r->launch_no) r->launch_no = n + 1;
    }
    cJSON_Delete(o);
}

void free_history(run *r) {
    cJSON_Delete(r->prev_attempts), cJSON_Delete(r->prev_health), cJSON_Delete(r->prev_launches);
    r->prev_attempts = r->prev_health = r->prev_launches = NULL;
}

// A copy of the earlier launches' array (an empty one when there is no history yet).
static cJSON *history_copy(const cJSON *a) {
    return a ? cJSON_Duplicate(a, true) : cJSON_CreateArray();
}

// What describes this launch, both at the top of attempts.json and in its launches[] entry.
static void launch_fields(cJSON *o, const run *r, const char *result) {
    const json_field f[] = {
        NUM("launch", r->launch_no),
        NUM("nproc", r->o->nproc),
        NUM("min_nproc", r->o->min_nproc),
        NUM("max_restarts", r->o->max_restarts),
        NUM("restarts", r->restarts),
        STR("result", result),
        NUM("exit_code", r->exit_code),
        STR("message", r->message),
        NUM("start", r->t0),
        NUM("end", wall_now()),
    };
    add_fields(o, f, sizeof f / sizeof *f);
}

// One attempt's entry of attempts.json.
static cJSON *attempt_json(const run *r, const attempt *a) {
    const json_field f[] = {
        NUM("launch", r->launch_no),
        NUM("attempt", a->n),
        NUM("start", a->start),
        NUM("end", a->end),
        NUM("detected", a->detected),
        NUM("last_progress", a->last_progress),
        NUM_OR_NULL("first_step_time", a->first_step_time, a->first_step_time > 0),
        NUM("world", a->world),
        STR("hosts", a->hosts),
        NUM("grad_accum", a->grad_accum),
        STR("result", a->result),
        STR("reason", a->reason),
        NUM_OR_NULL("exit_status", a->exit_status, a->exit_status >= 0),
        NUM_OR_NULL("exit_signal", a->exit_signal, a->exit_signal > 0),
        NUM_OR_NULL("culprit_rank", a->culprit_rank, a->culprit_rank >= 0),
        {"culprit_host", 0, a->culprit_host, a->culprit_host[0] != 0},
        STR("flight_verdict", a->verdict),
        STR("error", a->error),
        NUM_OR_NULL("start_step", a->start_step, a->start_step >= 0),
        NUM_OR_NULL("steps_reached", a->steps_reached, a->steps_reached >= 0),
        NUM("steps_lost", a->steps_lost),
    };
    cJSON *x = cJSON_CreateObject();
    add_fields(x, f, sizeof f / sizeof *f);
    return x;
}

void write_attempts(run *r, const char *result) {
    cJSON *o = cJSON_CreateObject();
    launch_fields(o, r, result);
    cJSON_AddStringToObject(o, "launcher", r->slurm ? "srun" : "mpirun");
    cJSON_AddStringToObject(o, "transport", r->transport);
    cJSON *ex = cJSON_CreateArray();
    for (int i = 0; i < r->n_hosts; i++)
        if (r->excluded[i]) cJSON_AddItemToArray(ex, cJSON_CreateString(r->host[i]));
    cJSON_AddItemToObject(o, "excluded_hosts", ex);
    cJSON *ls = history_copy(r->prev_launches), *l = cJSON_CreateObject();
    launch_fields(l, r, result);
    cJSON_AddNumberToObject(l, "attempts", r->n_att);
    cJSON_AddItemToArray(ls, l);
    cJSON_AddItemToObject(o, "launches", ls);
    cJSON *hs = history_copy(r->prev_health);
    for (int i = 0; i < r->n_health; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "launch", r->launch_no);
        cJSON_AddNumberToObject(x, "time", r->health[i].time);
        cJSON_AddNumberToObject(x, "world", r->health[i].world);
        cJSON_AddBoolToObject(x, "ok", r->health[i].ok);
        cJSON_AddStringToObject(x, "failed", r->health[i].failed);
        cJSON_AddItemToArray(hs, x);
    }
    cJSON_AddItemToObject(o, "health", hs);
    cJSON *as = history_copy(r->prev_attempts);
    for (int i = 0; i < r->n_att; i++)
        cJSON_AddItemToArray(as, attempt_json(r, &r->att[i]));
    cJSON_AddItemToObject(o, "attempts", as);
    char path[4200];
    snprintf(path, sizeof path, "%s/attempts.json", r->run_dir);
    if (slm_json_write_file(path, o) != SLM_OK)
        slm_warn("launch: cannot write %s: %s", path, slm_errmsg());
    cJSON_Delete(o);
}

char *summary_text(const run *r, const char *result, bool gone) {
    slm_buf b = {0};
    slm_buf_appendf(&b, "launch summary: %s (exit %d), %d restart(s) of at most %d%s%s\n", result,
                    r->exit_code, r->restarts, r->o->max_restarts, r->message[0] ? ": " : "",
                    r->message);
    int earlier = cJSON_GetArraySize(r->prev_attempts);
    if (r->launch_no > 1)
        slm_buf_appendf(&b,
                        "launch %d of %s: the %d attempt(s) of launches 1-%d stay in "
                        "attempts.json\n",
                        r->launch_no, r->run_dir, earlier, r->launch_no - 1);
    slm_buf_appendf(&b, "%-7s %-8s %-8s %-5s %-10s %-9s %-12s %-6s %s\n", "attempt", "start", "end",
                    "world", "result", "steps", "culprit", "lost", "reason");
    for (int i = 0; i < r->n_att; i++) {
        const attempt *a = &r->att[i];
        char steps[48], culprit[160], t1[32], t2[32];
        snprintf(steps, sizeof steps, "%lld-%lld",
                 (long long)(a->start_step < 0 ? 0 : a->start_step),
                 (long long)(a->steps_reached < 0 ? 0 : a->steps_reached));
        if (a->culprit_rank >= 0)
            snprintf(culprit, sizeof culprit, "rank %d%s%s", a->culprit_rank,
                     a->culprit_host[0] ? "@" : "", a->culprit_host);
        else
            snprintf(culprit, sizeof culprit, "-");
        snprintf(t1, sizeof t1, "+%.1fs", a->start - r->t0);
        snprintf(t2, sizeof t2, "+%.1fs", a->end - r->t0);
        slm_buf_appendf(&b, "%-7d %-8s %-8s %-5d %-10s %-9s %-12s %-6lld %s\n", a->n, t1, t2,
                        a->world, a->result, steps, culprit, (long long)a->steps_lost, a->reason);
    }
    char ex[1024];
    excluded_list(r, ex, sizeof ex, ',');
    if (ex[0]) slm_buf_appendf(&b, "excluded hosts: %s\n", ex);
    if (gone)
        slm_buf_appendf(&b, "%s removed: this launch created it and nothing ran\n", r->run_dir);
    else
        slm_buf_appendf(&b, "attempts written to %s/attempts.json\n", r->run_dir);
    slm_buf_append(&b, "", 1);
    return (char *)b.data;
}
