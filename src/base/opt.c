// Option descriptors (opt.h): one value parsed into its field, a stored value checked against
// its range, a value's canonical text.
#include "base/opt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

_Static_assert(sizeof(int) == sizeof(int32_t), "SLM_OPT_INT also stores int32_t fields");

void slm_opt_list_free(slm_opt_list *l) {
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

// %g without an exponent for the round numbers of ranges (1e6 prints as 1000000).
static void fmt_real(char *buf, size_t cap, double x) {
    if (x == floor(x) && fabs(x) < 1e15)
        snprintf(buf, cap, "%.0f", x);
    else
        snprintf(buf, cap, "%g", x);
}

void slm_opt_range_text(const slm_opt *o, char *buf, size_t cap) {
    buf[0] = 0;
    if (o->type == SLM_OPT_INT || o->type == SLM_OPT_INT64) {
        if (o->ihi >= (INT64_C(1) << 30) && o->ilo > INT64_MIN)
            snprintf(buf, cap, ">= %lld", (long long)o->ilo);
        else if (o->ilo > INT64_MIN)
            snprintf(buf, cap, "in [%lld, %lld]", (long long)o->ilo, (long long)o->ihi);
    } else if (o->type == SLM_OPT_DOUBLE || o->type == SLM_OPT_FLOAT) {
        if (o->range) {
            snprintf(buf, cap, "%s", o->range);
            return;
        }
        bool lo_open = o->flags & SLM_OPTF_LO_OPEN, hi_open = o->flags & SLM_OPTF_HI_OPEN;
        char lo[32], hi[32];
        fmt_real(lo, sizeof lo, o->dlo);
        fmt_real(hi, sizeof hi, o->dhi);
        if (isinf(o->dhi))
            snprintf(buf, cap, "%s %s and finite", lo_open ? ">" : ">=", lo);
        else
            snprintf(buf, cap, "in %c%s, %s%c", lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    }
}

slm_status slm_opt_parse_size(const char *opt, const char *s, size_t *out) {
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    // Suffixes in any case, as transformers' convert_file_size_to_int (GB / MB / KB decimal,
    // GiB / MiB / KiB binary).
    if (!strcasecmp(end, "GB"))
        mul = 1e9;
    else if (!strcasecmp(end, "MB"))
        mul = 1e6;
    else if (!strcasecmp(end, "KB"))
        mul = 1e3;
    else if (!strcasecmp(end, "GiB"))
        mul = 1073741824.0;
    else if (!strcasecmp(end, "MiB"))
        mul = 1048576.0;
    else if (!strcasecmp(end, "KiB"))
        mul = 1024.0;
    else if (*end)
        end = (char *)s; // an unknown suffix: refused below
    // At least one byte, finite, an integer count of bytes (0.5, 1e-300GB, inf and nan are
    // refused: (size_t)0 would mean "no limit").
    double bytes = v * mul;
    if (end == s || !(bytes >= 1) || !(bytes <= 1e18) || bytes != (double)(uint64_t)bytes)
        return slm_fail(SLM_E_ARG,
                        "%s \"%s\": expected e.g. 5GB, 500MB or a whole number of bytes >= 1 "
                        "(finite)",
                        opt, s);
    *out = (size_t)bytes;
    return SLM_OK;
}

// Whether the real dv is in o's range (finite, as a float too where the field is one).
static bool real_in_range(const slm_opt *o, double dv) {
    bool f32 = o->type == SLM_OPT_FLOAT || (o->flags & SLM_OPTF_F32);
    bool lo_ok = o->flags & SLM_OPTF_LO_OPEN ? dv > o->dlo : dv >= o->dlo;
    bool hi_ok = o->flags & SLM_OPTF_HI_OPEN ? dv < o->dhi : dv <= o->dhi;
    return isfinite(dv) && (!f32 || isfinite((float)dv)) && lo_ok && hi_ok;
}

static slm_status real_range_error(const slm_opt *o, const char *v) {
    char r[96];
    slm_opt_range_text(o, r, sizeof r);
    return slm_fail(SLM_E_ARG, "%s %s: must be %s", o->name, v, r);
}

// Parses v into the field at dst; `check`: the range applies.
static slm_status store(const slm_opt *o, const char *v, void *dst, bool check) {
    int64_t iv = 0;
    double dv = 0;
    slm_status st = SLM_OK;
    switch (o->type) {
    case SLM_OPT_FLAG:
        if (o->parse) return o->parse(o->name, NULL, dst);
        *(bool *)dst = true;
        return SLM_OK;
    case SLM_OPT_INT:
    case SLM_OPT_INT64:
        if ((st = slm_parse_i64(o->name, v, check ? o->ilo : INT64_MIN, check ? o->ihi : INT64_MAX,
                                &iv)))
            return st;
        if (o->type == SLM_OPT_INT)
            *(int *)dst = (int)iv;
        else
            *(int64_t *)dst = iv;
        return SLM_OK;
    case SLM_OPT_DOUBLE:
    case SLM_OPT_FLOAT:
        if ((st = slm_parse_f64(o->name, v, &dv))) return st;
        if (check && !real_in_range(o, dv)) return real_range_error(o, v);
        if (o->type == SLM_OPT_FLOAT)
            *(float *)dst = (float)dv;
        else
            *(double *)dst = dv;
        return SLM_OK;
    case SLM_OPT_STRING:
        *(const char **)dst = v;
        return SLM_OK;
    case SLM_OPT_ENUM: {
        for (int k = 0; o->choices[k]; k++)
            if (!strcmp(v, o->choices[k])) {
                if (o->flags & SLM_OPTF_BOOL)
                    *(bool *)dst = k == 1;
                else
                    *(int *)dst = k;
                return SLM_OK;
            }
        char list[160] = "";
        for (int k = 0; o->choices[k]; k++) {
            size_t n = strlen(list);
            snprintf(list + n, sizeof list - n, "%s%s",
                     k == 0              ? ""
                     : o->choices[k + 1] ? ", "
                                         : " or ",
                     o->choices[k]);
        }
        return slm_fail(SLM_E_ARG, "%s \"%s\": expected %s", o->name, v, list);
    }
    case SLM_OPT_SIZE:
        return slm_opt_parse_size(o->name, v, (size_t *)dst);
    case SLM_OPT_CUSTOM:
        return o->parse(o->name, v, dst);
    default:
        return slm_fail(SLM_E_ARG, "%s: not an option with a value", o->name);
    }
}

slm_status slm_opt_set(const slm_opt *o, const char *v, void *args) {
    return store(o, v, (char *)args + o->off, true);
}

void slm_opt_defaults(const slm_opt *table, void *args) {
    for (const slm_opt *o = table; o->type != SLM_OPT_END; o++)
        if (o->init && store(o, o->init, (char *)args + o->off, false))
            slm_fatal("option table: %s: default \"%s\": %s", o->name, o->init, slm_errmsg());
}

slm_status slm_opt_check(const slm_opt *o, const void *args) {
    const char *p = (const char *)args + o->off;
    bool zero_off = o->flags & SLM_OPTF_ZERO_OFF, neg_off = o->flags & SLM_OPTF_NEG_OFF;
    if (o->type == SLM_OPT_INT || o->type == SLM_OPT_INT64) {
        int64_t v = o->type == SLM_OPT_INT ? *(const int *)p : *(const int64_t *)p;
        if ((zero_off && v == 0) || (neg_off && v < 0) || (v >= o->ilo && v <= o->ihi))
            return SLM_OK;
        return slm_fail(SLM_E_ARG, "%s: %lld is out of range [%lld, %lld]", o->name, (long long)v,
                        (long long)o->ilo, (long long)o->ihi);
    }
    if (o->type == SLM_OPT_DOUBLE || o->type == SLM_OPT_FLOAT) {
        double v = o->type == SLM_OPT_FLOAT ? (double)*(const float *)p : *(const double *)p;
        if ((zero_off && v == 0) || (neg_off && v < 0) || real_in_range(o, v)) return SLM_OK;
        char text[32];
        snprintf(text, sizeof text, "%g", v);
        return real_range_error(o, text);
    }
    return SLM_OK;
}

void slm_opt_value_text(const slm_opt *o, const void *args, char *buf, size_t cap) {
    const char *p = (const char *)args + o->off;
    buf[0] = 0;
    switch (o->type) {
    case SLM_OPT_FLAG:
        if (o->show)
            o->show(p, buf, cap);
        else
            snprintf(buf, cap, "%s", *(const bool *)p ? "on" : "off");
        break;
    case SLM_OPT_INT:
        snprintf(buf, cap, "%d", *(const int *)p);
        break;
    case SLM_OPT_INT64:
        snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p);
        break;
    case SLM_OPT_FLOAT:
        snprintf(buf, cap, "%.9g", (double)*(const float *)p);
        break;
    case SLM_OPT_DOUBLE:
        snprintf(buf, cap, "%.17g", *(const double *)p);
        break;
    case SLM_OPT_STRING: {
        const char *s = *(const char *const *)p;
        snprintf(buf, cap, "%s", s ? s : "(unset)");
        break;
    }
    case SLM_OPT_ENUM: {
        int k = o->flags & SLM_OPTF_BOOL ? *(const bool *)p : *(const int *)p;
        snprintf(buf, cap, "%s", o->choices[k]);
        break;
    }
    case SLM_OPT_SIZE:
        snprintf(buf, cap, "%zu", *(const size_t *)p);
        break;
    case SLM_OPT_CUSTOM:
        if (o->show) o->show(p, buf, cap);
        break;
    default:
        break;
    }
}
