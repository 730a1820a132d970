// Checked JSON field readers (contracts in json.h).
#include "base/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *slm_json_kind(const cJSON *x) {
    if (!x) return "missing";
    if (cJSON_IsNumber(x)) return "a number";
    if (cJSON_IsString(x)) return "a string";
    if (cJSON_IsBool(x)) return "a boolean";
    if (cJSON_IsNull(x)) return "null";
    if (cJSON_IsArray(x)) return "an array";
    if (cJSON_IsObject(x)) return "an object";
    return "an unknown value";
}

bool slm_json_absent_or_null(const cJSON *x) {
    return !x || cJSON_IsNull(x);
}

bool slm_json_true(const cJSON *x) {
    return x && cJSON_IsTrue(x);
}

const cJSON *slm_json_obj(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsObject(x) ? x : NULL;
}

const cJSON *slm_json_arr(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsArray(x) ? x : NULL;
}

// "an integer in [0, 9007199254740992]" / "a number in [-1e+30, 1e+30]" into buf.
static const char *expected_num(char buf[96], double lo, double hi, bool integer) {
    if (integer)
        snprintf(buf, 96, "an integer in [%.17g, %.17g]", lo, hi);
    else
        snprintf(buf, 96, "a number in [%g, %g]", lo, hi);
    return buf;
}

slm_status slm_json_check_num(const char *what, const char *field, const cJSON *x, double lo,
                              double hi, bool integer, double *out) {
    char exp[96];
    if (!x)
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\" is missing, expected %s", what, field,
                        expected_num(exp, lo, hi, integer));
    if (!cJSON_IsNumber(x))
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\": expected %s, got %s", what, field,
                        expected_num(exp, lo, hi, integer), slm_json_kind(x));
    double v = x->valuedouble;
    if (!(v >= lo && v <= hi) || (integer && v != floor(v)))
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\" is %.17g, expected %s", what, field, v,
                        expected_num(exp, lo, hi, integer));
    *out = v;
    return SLM_OK;
}

slm_status slm_json_num(const char *what, const cJSON *o, const char *key, double lo, double hi,
                        bool integer, double *out) {
    return slm_json_check_num(what, key, cJSON_GetObjectItemCaseSensitive(o, key), lo, hi, integer,
                              out);
}

slm_status slm_json_i64(const char *what, const cJSON *o, const char *key, int64_t lo, int64_t hi,
                        int64_t *out) {
    double h = (double)hi < SLM_JSON_MAX_EXACT ? (double)hi : SLM_JSON_MAX_EXACT;
    double l = (double)lo > -SLM_JSON_MAX_EXACT ? (double)lo : -SLM_JSON_MAX_EXACT;
    double d = 0;
    slm_status st = slm_json_num(what, o, key, l, h, true, &d);
    if (!st) *out = (int64_t)d;
    return st;
}

slm_status slm_json_u64(const char *what, const cJSON *o, const char *key, uint64_t *out) {
    double d = 0;
    slm_status st = slm_json_num(what, o, key, 0, SLM_JSON_MAX_EXACT, true, &d);
    if (!st) *out = (uint64_t)d;
    return st;
}

slm_status slm_json_str(const char *what, const cJSON *o, const char *key, const char **out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x)
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\" is missing, expected a string", what, key);
    if (!cJSON_IsString(x) || !x->valuestring)
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\": expected a string, got %s", what, key,
                        slm_json_kind(x));
    *out = x->valuestring;
    return SLM_OK;
}

slm_status slm_json_hex64(const char *what, const cJSON *o, const char *key, uint64_t *out) {
    const char *s = NULL;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || !cJSON_IsString(x) || !x->valuestring)
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\" is %s, expected a string of 16 hex digits",
                        what, key, slm_json_kind(x));
    s = x->valuestring;
    if (!slm_parse_hex64(s, out))
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\" is \"%.40s\", expected 16 hex digits", what,
                        key, s);
    return SLM_OK;
}

slm_status slm_json_opt_i32(const char *what, const cJSON *o, const char *key, bool nullable,
                            int32_t *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || (nullable && cJSON_IsNull(x))) return SLM_OK;
    double d = 0;
    slm_status st = slm_json_check_num(what, key, x, -2147483648.0, 2147483647.0, true, &d);
    if (!st) *out = (int32_t)d;
    return st;
}

slm_status slm_json_opt_f32(const char *what, const cJSON *o, const char *key, float *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) return SLM_OK;
    if (!cJSON_IsNumber(x))
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\": expected a number, got %s", what, key,
                        slm_json_kind(x));
    *out = (float)x->valuedouble;
    return SLM_OK;
}

slm_status slm_json_opt_bool(const char *what, const cJSON *o, const char *key, bool *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) return SLM_OK;
    if (!cJSON_IsBool(x))
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\": expected true or false, got %s", what, key,
                        slm_json_kind(x));
    *out = cJSON_IsTrue(x);
    return SLM_OK;
}

slm_status slm_json_write_file(const char *path, const cJSON *o) {
    char *txt = cJSON_Print(o);
    if (!txt) return slm_fail(SLM_E_NOMEM, "%s: cannot format JSON", path);
    size_t n = strlen(txt);
    char *withnl = slm_xmalloc(n + 2);
    memcpy(withnl, txt, n);
    withnl[n] = '\n';
    withnl[n + 1] = 0;
    cJSON_free(txt);
    slm_status st = slm_file_write_atomic(path, withnl, n + 1);
    free(withnl);
    return st;
}
