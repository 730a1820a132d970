// The SHARDLM_FAULT / SHARDLM_ATTEMPT parser and the plan's queries (base/fault.h); the
// trainer's actions are in src/train/fault.c.
#include "base/fault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_kind_names[] = {
    [SLM_FAULT_KILL] = "kill",
    [SLM_FAULT_STOP] = "stop",
    [SLM_FAULT_EXIT] = "exit",
    [SLM_FAULT_FAIL_HEALTH] = "fail-health",
    [SLM_FAULT_CORRUPT_CKPT] = "corrupt-ckpt",
    [SLM_FAULT_SLOW] = "slow",
    [SLM_FAULT_NAN_GRAD] = "nan-grad",
};
#define N_KINDS ((int)(sizeof k_kind_names / sizeof k_kind_names[0]))

// Fields each kind takes: bit 0 rank, 1 step, 2 ms, 3 check; required ones in the second mask.
enum { F_RANK = 1, F_STEP = 2, F_MS = 4, F_CHECK = 8 };
static const unsigned k_allowed[] = {
    [SLM_FAULT_KILL] = F_RANK | F_STEP,         [SLM_FAULT_STOP] = F_RANK | F_STEP,
    [SLM_FAULT_EXIT] = F_RANK | F_STEP,         [SLM_FAULT_FAIL_HEALTH] = F_RANK | F_CHECK,
    [SLM_FAULT_CORRUPT_CKPT] = F_STEP | F_RANK, [SLM_FAULT_SLOW] = F_RANK | F_MS | F_STEP,
    [SLM_FAULT_NAN_GRAD] = F_STEP | F_RANK,
};
static const unsigned k_required[] = {
    [SLM_FAULT_KILL] = F_RANK | F_STEP, [SLM_FAULT_STOP] = F_RANK | F_STEP,
    [SLM_FAULT_EXIT] = F_RANK | F_STEP, [SLM_FAULT_FAIL_HEALTH] = F_RANK,
    [SLM_FAULT_CORRUPT_CKPT] = F_STEP,  [SLM_FAULT_SLOW] = F_RANK | F_MS,
    [SLM_FAULT_NAN_GRAD] = F_STEP,
};

const char *slm_fault_kind_name(slm_fault_kind k) {
    return (int)k >= 0 && (int)k < N_KINDS ? k_kind_names[k] : "?";
}

// A decimal integer in [lo, hi] spanning exactly [s, e).
static bool parse_int(const char *s, const char *e, int64_t lo, int64_t hi, int64_t *out) {
    if (s == e || e - s > 18) return false;
    int64_t v = 0;
    for (const char *p = s; p < e; p++) {
        if (*p < '0' || *p > '9') return false;
        v = v * 10 + (*p - '0');
    }
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

// One item "kind[:key=value...][:always]" spanning [s, e). Errors name the item and the field.
static slm_status parse_item(const char *s, const char *e, int idx, slm_fault *f) {
    int len = (int)(e - s);
    const char *colon = memchr(s, ':', (size_t)(e - s));
    const char *kend = colon ? colon : e;
    memset(f, 0, sizeof *f);
    f->rank = -1;
    snprintf(f->item, sizeof f->item, "%.*s", len, s);
    int kind = -1;
    for (int k = 0; k < N_KINDS; k++)
        if ((size_t)(kend - s) == strlen(k_kind_names[k]) &&
            !memcmp(s, k_kind_names[k], (size_t)(kend - s)))
            kind = k;
    if (kind < 0)
        return slm_fail(SLM_E_ARG,
                        "SHARDLM_FAULT item %d \"%.*s\": unknown fault kind \"%.*s\" (expected "
                        "kill, stop, exit, fail-health, corrupt-ckpt, slow or nan-grad)",
                        idx, len, s, (int)(kend - s), s);
    f->kind = (slm_fault_kind)kind;
    unsigned seen = 0;
    for (const char *p = kend; p < e;) {
        p++; // the ':'
        const char *fe = memchr(p, ':', (size_t)(e - p));
        if (!fe) fe = e;
        const char *eq = memchr(p, '=', (size_t)(fe - p));
        if (!eq) {
            if (fe - p == 6 && !memcmp(p, "always", 6) && !f->always) {
                f->always = true;
                p = fe;
                continue;
            }
            return slm_fail(SLM_E_ARG,
                            "SHARDLM_FAULT item %d \"%.*s\": \"%.*s\" is not key=value or "
                            "(once) always",
                            idx, len, s, (int)(fe - p), p);
        }
        unsigned bit = 0;
        size_t kl = (size_t)(eq - p);
        if (kl == 4 && !memcmp(p, "rank", 4)) bit = F_RANK;
        if (kl == 4 && !memcmp(p, "step", 4)) bit = F_STEP;
        if (kl == 2 && !memcmp(p, "ms", 2)) bit = F_MS;
        if (kl == 5 && !memcmp(p, "check", 5)) bit = F_CHECK;
        if (!bit || !(k_allowed[kind] & bit))
            return slm_fail(SLM_E_ARG, "SHARDLM_FAULT item %d \"%.*s\": %s takes no field \"%.*s\"",
                            idx, len, s, k_kind_names[kind], (int)kl, p);
        if (seen & bit)
            return slm_fail(SLM_E_ARG, "SHARDLM_FAULT item %d \"%.*s\": field \"%.*s\" given twice",
                            idx, len, s, (int)kl, p);
        seen |= bit;
        const char *v = eq + 1;
        int64_t x = 0;
        bool good = true;
        if (bit == F_RANK) {
            good = parse_int(v, fe, 0, 1 << 24, &x);
            f->rank = (int)x;
        } else if (bit == F_STEP) {
            good = parse_int(v, fe, 1, INT64_MAX / 4, &x);
            f->step = x;
        } else if (bit == F_MS) {
            good = parse_int(v, fe, 0, 3600 * 1000, &x);
            f->ms = x;
        } else {
            good = fe > v && (size_t)(fe - v) < sizeof f->check;
            if (good) memcpy(f->check, v, (size_t)(fe - v));
        }
        if (!good)
            return slm_fail(SLM_E_ARG, "SHARDLM_FAULT item %d \"%.*s\": %.*s=\"%.*s\": expected %s",
                            idx, len, s, (int)kl, p, (int)(fe - v), v,
                            bit == F_RANK   ? "a world rank, an integer >= 0"
                            : bit == F_STEP ? "a step, an integer >= 1"
                            : bit == F_MS   ? "milliseconds, an integer in [0, 3600000]"
                                            : "a health check name of 1 to 31 characters");
        p = fe;
    }
    unsigned missing = k_required[kind] & ~seen;
    if (missing)
        return slm_fail(SLM_E_ARG, "SHARDLM_FAULT item %d \"%.*s\": %s needs %s=", idx, len, s,
                        k_kind_names[kind],
                        missing & F_RANK   ? "rank"
                        : missing & F_STEP ? "step"
                                           : "ms");
    return SLM_OK;
}

slm_status slm_fault_parse(const char *spec, slm_fault_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->attempt = 1;
    if (!spec || !*spec) return SLM_OK;
    const char *s = spec;
    for (int idx = 1;; idx++) {
        const char *e = strchr(s, ',');
        if (!e) e = s + strlen(s);
        if (e == s || plan->n == SLM_FAULT_MAX) {
            plan->n = 0;
            if (e == s)
                return slm_fail(SLM_E_ARG, "SHARDLM_FAULT \"%s\": item %d is empty", spec, idx);
            return slm_fail(SLM_E_ARG, "SHARDLM_FAULT \"%s\": more than %d faults", spec,
                            SLM_FAULT_MAX);
        }
        slm_status st = parse_item(s, e, idx, &plan->f[plan->n]);
        if (st) {
            plan->n = 0;
            return st;
        }
        plan->n++;
        if (!*e) break;
        s = e + 1;
    }
    return SLM_OK;
}

slm_status slm_fault_parse_attempt(const char *text, int *attempt) {
    *attempt = 1;
    if (!text || !*text) return SLM_OK;
    int64_t v;
    if (!parse_int(text, text + strlen(text), 1, 1 << 30, &v))
        return slm_fail(SLM_E_ARG,
                        "SHARDLM_ATTEMPT \"%s\": expected the attempt number, an "
                        "integer >= 1 (the launcher's first attempt is 1)",
                        text);
    *attempt = (int)v;
    return SLM_OK;
}

slm_status slm_fault_plan_from_env(slm_fault_plan *plan) {
    int attempt;
    slm_status st = slm_fault_parse(getenv("SHARDLM_FAULT"), plan);
    if (!st) st = slm_fault_parse_attempt(getenv("SHARDLM_ATTEMPT"), &attempt);
    if (st) {
        memset(plan, 0, sizeof *plan);
        plan->attempt = 1;
        return st;
    }
    plan->attempt = attempt;
    return SLM_OK;
}

slm_status slm_fault_check_world(const slm_fault_plan *p, int world) {
    for (int i = 0; p && i < p->n; i++) {
        const slm_fault *f = &p->f[i];
        if (f->rank < world || !slm_fault_armed(p, f)) continue;
        return slm_fail(SLM_E_ARG,
                        "SHARDLM_FAULT item %d \"%s\": rank=%d is not a rank of this world of %d "
                        "rank%s (0..%d): the fault would never fire",
                        i + 1, f->item, f->rank, world, world == 1 ? "" : "s", world - 1);
    }
    return SLM_OK;
}

bool slm_fault_armed(const slm_fault_plan *p, const slm_fault *f) {
    return f->always || p->attempt <= 1;
}

const slm_fault *slm_fault_find(const slm_fault_plan *p, slm_fault_kind kind, int64_t step) {
    for (int i = 0; p && i < p->n; i++) {
        const slm_fault *f = &p->f[i];
        if (f->kind == kind && slm_fault_armed(p, f) && (step < 0 || f->step == step)) return f;
    }
    return NULL;
}

bool slm_fault_health_fails(const slm_fault_plan *p, int rank, const char *check) {
    for (int i = 0; p && i < p->n; i++) {
        const slm_fault *f = &p->f[i];
        if (f->kind != SLM_FAULT_FAIL_HEALTH || f->rank != rank || !slm_fault_armed(p, f)) continue;
        if (!f->check[0] || !check || !strcmp(f->check, check)) return true;
    }
    return false;
}
