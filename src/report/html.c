// The HTML run report: one self-contained file (inline CSS and SVG; no scripts, fonts or
// network), charts drawn here as SVG paths with axes, ticks, units and legends.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_internal.h"

// Okabe & Ito's colour-blind-safe palette.
#define C_BLUE "#0072B2"
#define C_ORANGE "#E69F00"
#define C_GREEN "#009E73"
#define C_VERMILLION "#D55E00"
#define C_PURPLE "#CC79A7"
#define C_SKY "#56B4E9"
#define C_YELLOW "#F0E442"
#define C_GREY "#7F7F7F"
static const char *const k_rank_colours[] = {C_BLUE,   C_ORANGE, C_GREEN, C_VERMILLION,
                                             C_PURPLE, C_SKY,    C_GREY,  "#000000"};

// Escapes text for HTML / XML text and attribute values.
static void esc(slm_buf *b, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&':
            slm_buf_appendf(b, "&amp;");
            break;
        case '<':
            slm_buf_appendf(b, "&lt;");
            break;
        case '>':
            slm_buf_appendf(b, "&gt;");
            break;
        case '"':
            slm_buf_appendf(b, "&quot;");
            break;
        case '\'':
            slm_buf_appendf(b, "&#39;");
            break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t')
                slm_buf_appendf(b, " "); // not allowed in XML 1.0
            else
                slm_buf_append(b, s, 1);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Charts

enum { S_LINE, S_FAINT, S_DOTS, S_AREA };

typedef struct series {
    const char *name, *colour;
    double *x, *y; // owned (freed by chart_free)
    size_t n;
    int style;
} series;

#define MAX_SERIES 12

typedef struct chart {
    const char *id, *title, *ylabel, *note;
    series s[MAX_SERIES];
    int ns;
    bool y_zero;  // the y axis starts at 0
    bool stacked; // S_AREA series stack in order
    bool y_log;   // log10 y axis (learning rate spans decades only with warmup from ~0: off)
    const double *vlines; // restart steps
    size_t nv;
} chart;

static series *add_series(chart *c, const char *name, const char *colour, int style, size_t n) {
    if (c->ns == MAX_SERIES) return NULL;
    series *s = &c->s[c->ns++];
    s->name = name, s->colour = colour, s->style = style;
    s->x = slm_xmalloc((n ? n : 1) * sizeof(double));
    s->y = slm_xmalloc((n ? n : 1) * sizeof(double));
    s->n = 0;
    return s;
}

static void chart_free(chart *c) {
    for (int i = 0; i < c->ns; i++)
        free(c->s[i].x), free(c->s[i].y);
}

// A "nice" step (1, 2, 2.5 or 5 x 10^k) for about `target` intervals over `range`.
static double nice_step(double range, int target) {
    if (!(range > 0)) return 1;
    double raw = range / target, p = pow(10, floor(log10(raw))), f = raw / p;
    double m = f < 1.5 ? 1 : f < 2.25 ? 2 : f < 3.5 ? 2.5 : f < 7.5 ? 5 : 10;
    return m * p;
}

// Tick labels of an axis: n ticks at first + i x step, whose values reach amax in magnitude.
// One format for the whole axis: SI suffixes for large values (the suffix of amax), a common
// power of ten for small ones ("1.10e-3"), else plain decimals; as many decimals as the step
// needs (2.5 -> one), more while two labels would read the same (a flat series' narrow range).
#define MAX_TICKS 61
static void axis_labels(double first, double step, int n, double amax, char lab[][32]) {
    static const char *const suf[] = {"", "k", "M", "G", "T"};
    int mode = amax >= 1e4 && amax < 1e15 ? 1 : amax > 0 && amax < 1e-2 ? 2 : 0;
    int k = mode == 1 ? (int)floor(log10(amax) / 3 + 1e-9) : 0;
    if (k > 4) k = 4;
    int e = mode == 2 ? (int)floor(log10(amax) + 1e-9) : 0;
    double div = mode == 1 ? pow(1000, k) : mode == 2 ? pow(10, e) : 1;
    int dec = 0;
    double st = step / div;
    while (dec < 9 && fabs(st * pow(10, dec) - round(st * pow(10, dec))) > 1e-6)
        dec++;
    for (;; dec++) {
        for (int i = 0; i < n; i++) {
            double v = first + i * step;
            if (fabs(v) < step * 1e-6)
                snprintf(lab[i], 32, "0");
            else if (mode == 2)
                snprintf(lab[i], 32, "%.*fe%d", dec, v / div, e);
            else
                snprintf(lab[i], 32, "%.*f%s", dec, v / div, suf[k]);
        }
        bool same = false;
        for (int i = 1; i < n; i++)
            same |= !strcmp(lab[i], lab[i - 1]);
        if (!same || dec >= 12) break;
    }
}

#define CW 640.0
#define CH 320.0
#define ML 66.0
#define MR 16.0
#define MT 40.0
#define LEGEND_CHAR_W 7.8 // px per character of a 12 px legend label (estimate)
#define MB 44.0

typedef struct frame {
    double x0, x1, y0, y1;
    double mt; // top margin: MT, or more when the legend takes a row of its own
} frame;

// Pixel coordinates, clamped to a band around the plot (a value far outside the axes, e.g. a
// diverged loss, stays a short number in the path).
static double clamp_px(double v) {
    return v < -1000 ? -1000 : v > CW + 1000 ? CW + 1000 : v;
}
static double px(const frame *f, double x) {
    return clamp_px(ML + (f->x1 > f->x0 ? (x - f->x0) / (f->x1 - f->x0) : 0.5) * (CW - ML - MR));
}
static double py(const frame *f, double y) {
    return clamp_px(CH - MB -
                    (f->y1 > f->y0 ? (y - f->y0) / (f->y1 - f->y0) : 0.5) * (CH - f->mt - MB));
}

// M/L path of a series, broken at NaN values.
static void line_path(slm_buf *b, const frame *f, const series *s, const double *ys) {
    bool pen = false;
    for (size_t i = 0; i < s->n; i++) {
        if (!isfinite(ys[i]) || !isfinite(s->x[i])) {
            pen = false;
            continue;
        }
        slm_buf_appendf(b, "%s%.1f %.1f", pen ? " L" : (i ? " M" : "M"), px(f, s->x[i]),
                        py(f, ys[i]));
        pen = true;
    }
}

// The y values to draw, one array per series (stacked areas as running sums over the layers,
// which share the same x), and the data's bounds in f (x0 = +inf when nothing is drawable).
static double **stack_layers(const chart *c, frame *f) {
    size_t n_max = 0;
    for (int i = 0; i < c->ns; i++)
        if (c->s[i].n > n_max) n_max = c->s[i].n;
    double **tops = slm_xcalloc((size_t)c->ns + 1, sizeof *tops);
    double *acc = slm_xcalloc(n_max ? n_max : 1, sizeof *acc);
    for (int i = 0; i < c->ns; i++) {
        const series *s = &c->s[i];
        tops[i] = slm_xmalloc((s->n ? s->n : 1) * sizeof(double));
        for (size_t k = 0; k < s->n; k++) {
            double y = s->y[k];
            if (c->stacked && s->style == S_AREA) {
                acc[k] += isfinite(y) && y > 0 ? y : 0;
                y = acc[k];
            }
            tops[i][k] = y;
            if (!isfinite(y) || !isfinite(s->x[k])) continue;
            if (c->y_log && y <= 0) continue;
            double yy = c->y_log ? log10(y) : y;
            if (fabs(yy) > 1e15 || fabs(s->x[k]) > 1e15) continue; // no axis for such values
            if (s->x[k] < f->x0) f->x0 = s->x[k];
            if (s->x[k] > f->x1) f->x1 = s->x[k];
            if (yy < f->y0) f->y0 = yy;
            if (yy > f->y1) f->y1 = yy;
        }
    }
    free(acc);
    return tops;
}

// The axes' ranges from the data's bounds: a flat series gets a band around it, y ends on
// ticks (whole decades on a log axis). Returns the y tick step.
static double fit_axes(const chart *c, frame *f) {
    if (c->y_zero && !c->y_log && f->y0 > 0) f->y0 = 0;
    if (f->y1 <= f->y0) { // a flat series: drawn mid-height, its value labelled
        double d = f->y0 != 0 ? fabs(f->y0) * 0.05 : 1;
        if (c->y_zero && f->y0 == 0)
            f->y1 = d;
        else
            f->y0 -= d, f->y1 += d;
    }
    if (f->x1 <= f->x0) f->x0 -= 1, f->x1 += 1;
    double ystep = nice_step(f->y1 - f->y0, 5);
    if (!c->y_log) {
        f->y0 = c->y_zero && f->y0 >= 0 ? 0 : floor(f->y0 / ystep) * ystep;
        f->y1 = ceil(f->y1 / ystep - 1e-9) * ystep;
        if (f->y1 <= f->y0) f->y1 = f->y0 + ystep;
    } else {
        f->y0 = floor(f->y0), f->y1 = ceil(f->y1);
        if (f->y1 <= f->y0) f->y1 = f->y0 + 1;
        ystep = 1;
    }
    return ystep;
}

// The <svg> element's start: title, background and the title text.
static void chart_head(slm_buf *b, const chart *c) {
    slm_buf_appendf(b,
                    "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"%s\" "
                    "viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-labelledby=\"%s-t\">\n<title "
                    "id=\"%s-t\">",
                    c->id, CW, CH, c->id, c->id);
    esc(b, c->title);
    slm_buf_appendf(b,
                    "</title>\n<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" "
                    "fill=\"#ffffff\"/>\n",
                    CW, CH);
    slm_buf_appendf(b, "<text x=\"%.0f\" y=\"22\" class=\"ct\">", ML);
    esc(b, c->title);
    slm_buf_appendf(b, "</text>\n");
}

// Grid lines and labels of the y ticks. Ticks by count (at most MAX_TICKS): a step below the
// values' resolution cannot loop forever.
static void y_ticks(slm_buf *b, const chart *c, const frame *f, double ystep, char lab[][32]) {
    int nt = 0;
    while (nt < MAX_TICKS && f->y0 + nt * ystep <= f->y1 + ystep * 1e-6)
        nt++;
    axis_labels(f->y0, ystep, nt, fmax(fabs(f->y0), fabs(f->y1)), lab);
    for (int t = 0; t < nt; t++) {
        double y = f->y0 + t * ystep, yy = py(f, y);
        if (c->y_log) snprintf(lab[t], 32, "1e%d", (int)lround(y));
        slm_buf_appendf(b,
                        "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\"/><text x=\"%.0f\" "
                        "y=\"%.1f\" class=\"yt\">%s</text>",
                        ML, yy, CW - MR, yy, ML - 6, yy + 4, lab[t]);
    }
}

// Grid lines and labels of the x ticks: fewer while their labels (11 px, about 6.6 px per
// character) would not fit side by side.
static void x_ticks(slm_buf *b, const frame *f, char lab[][32]) {
    double xfirst = 0, xstep = 1;
    int nt = 0;
    for (int target = 6; target >= 1; target--) {
        xstep = fmax(1, nice_step(f->x1 - f->x0, target));
        xfirst = ceil(f->x0 / xstep) * xstep;
        nt = 0;
        while (nt < MAX_TICKS && xfirst + nt * xstep <= f->x1 + xstep * 1e-6)
            nt++;
        axis_labels(xfirst, xstep, nt, fmax(fabs(f->x0), fabs(f->x1)), lab);
        size_t w = 0;
        for (int t = 0; t < nt; t++)
            w = strlen(lab[t]) > w ? strlen(lab[t]) : w;
        if (nt < 2 || (6.6 * (double)w + 12) * nt <= CW - ML - MR) break;
    }
    for (int t = 0; t < nt; t++) {
        double x = xfirst + t * xstep, xx = px(f, x);
        // a label centred on a tick near the right edge would be cut: it ends at the tick
        bool edge = xx + 3.3 * (double)strlen(lab[t]) > CW - 2;
        slm_buf_appendf(b,
                        "<line class=\"xg\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\"/>"
                        "<text x=\"%.1f\" y=\"%.0f\" class=\"xt\"%s>%s</text>",
                        xx, f->mt, xx, CH - MB, xx, CH - MB + 16,
                        edge ? " style=\"text-anchor:end\"" : "", lab[t]);
    }
}

// The axes with their labels, and a marked line at each restart inside the x range.
static void axes_and_restarts(slm_buf *b, const chart *c, const frame *f) {
    slm_buf_appendf(b,
                    "<path class=\"axis\" d=\"M%.0f %.0f L%.0f %.0f L%.0f %.0f\"/>\n"
                    "<text class=\"xl\" x=\"%.0f\" y=\"%.0f\">step</text>\n"
                    "<text class=\"yl\" transform=\"translate(14 %.0f) rotate(-90)\">",
                    ML, f->mt, ML, CH - MB, CW - MR, CH - MB, (ML + CW - MR) / 2, CH - 8,
                    (f->mt + CH - MB) / 2);
    esc(b, c->ylabel);
    slm_buf_appendf(b, "</text>\n");
    for (size_t i = 0; i < c->nv; i++) {
        if (c->vlines[i] < f->x0 || c->vlines[i] > f->x1) continue;
        double xx = px(f, c->vlines[i]);
        slm_buf_appendf(b,
                        "<line class=\"restart\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" "
                        "y2=\"%.0f\"/><text class=\"rl\" x=\"%.1f\" y=\"%.0f\">restart</text>\n",
                        xx, f->mt, xx, CH - MB, xx + 3, f->mt + 10);
    }
}

// A filled area from ys down to the nearest area layer below with as many points (the x axis
// when none).
static void draw_area(slm_buf *b, const chart *c, const frame *f, int i, double **tops) {
    const series *s = &c->s[i];
    const double *ys = tops[i], *below = NULL;
    for (int j = i - 1; j >= 0; j--)
        if (c->s[j].style == S_AREA && c->s[j].n == s->n) {
            below = tops[j];
            break;
        }
    slm_buf_appendf(b, "<path class=\"area\" fill=\"%s\" d=\"", s->colour);
    for (size_t k = 0; k < s->n; k++)
        slm_buf_appendf(b, "%s%.1f %.1f", k ? " L" : "M", px(f, s->x[k]),
                        py(f, isfinite(ys[k]) ? ys[k] : 0));
    for (size_t k = s->n; k-- > 0;)
        slm_buf_appendf(b, " L%.1f %.1f", px(f, s->x[k]),
                        py(f, below && isfinite(below[k]) ? below[k] : f->y0));
    slm_buf_appendf(b, " Z\"/>\n");
}

// The series in order (areas, lines, dots as each one's style says); on a log axis tops
// becomes log10 of the values first.
static void draw_series(slm_buf *b, const chart *c, const frame *f, double **tops) {
    for (int i = 0; i < c->ns; i++) {
        const series *s = &c->s[i];
        if (s->n == 0) continue;
        double *ys = tops[i];
        if (c->y_log)
            for (size_t k = 0; k < s->n; k++)
                ys[k] = ys[k] > 0 ? log10(ys[k]) : NAN;
        if (s->style == S_AREA) {
            draw_area(b, c, f, i, tops);
        } else if (s->style == S_DOTS) {
            slm_buf_appendf(b, "<path class=\"dline\" stroke=\"%s\" d=\"", s->colour);
            line_path(b, f, s, ys);
            slm_buf_appendf(b, "\"/>\n<g fill=\"%s\">", s->colour);
            for (size_t k = 0; k < s->n && s->n <= 400; k++)
                if (isfinite(ys[k]))
                    slm_buf_appendf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>", px(f, s->x[k]),
                                    py(f, ys[k]));
            slm_buf_appendf(b, "</g>\n");
        } else {
            slm_buf_appendf(b, "<path class=\"%s\" stroke=\"%s\" d=\"",
                            s->style == S_FAINT ? "faint" : "line", s->colour);
            line_path(b, f, s, ys);
            slm_buf_appendf(b, "\"/>\n");
        }
    }
}

// The legend (named series only), right-aligned in the title row or in a row of its own.
static void draw_legend(slm_buf *b, const chart *c, bool legend_row) {
    double lx = CW - MR, ly = legend_row ? 31 : 13;
    for (int i = c->ns - 1; i >= 0; i--) {
        if (!c->s[i].name) continue;
        double w = 22 + LEGEND_CHAR_W * (double)strlen(c->s[i].name);
        lx -= w;
        slm_buf_appendf(b,
                        "<rect x=\"%.1f\" y=\"%.0f\" width=\"12\" height=\"12\" rx=\"2\" "
                        "fill=\"%s\"/><text class=\"lg\" x=\"%.1f\" y=\"%.0f\">",
                        lx, ly, c->s[i].colour, lx + 16, ly + 10);
        esc(b, c->s[i].name);
        slm_buf_appendf(b, "</text>\n");
    }
}

static void render_chart(slm_buf *b, chart *c) {
    frame f = {INFINITY, -INFINITY, INFINITY, -INFINITY, MT};
    double **tops = stack_layers(c, &f);
    bool empty = !isfinite(f.x0);
    if (empty) f = (frame){0, 1, 0, 1, MT};
    // The legend sits right of the title; when both do not fit in one row it gets its own.
    double legend_w = 0;
    for (int i = 0; i < c->ns; i++)
        if (c->s[i].name) legend_w += 22 + LEGEND_CHAR_W * (double)strlen(c->s[i].name);
    bool legend_row = ML + 9.0 * (double)strlen(c->title) + 24 + legend_w > CW - MR;
    if (legend_row) f.mt = MT + 18;
    double ystep = fit_axes(c, &f);

    chart_head(b, c);
    slm_buf_appendf(b, "<g class=\"grid\">");
    char(*lab)[32] = slm_xmalloc(MAX_TICKS * sizeof *lab);
    y_ticks(b, c, &f, ystep, lab);
    x_ticks(b, &f, lab);
    free(lab);
    slm_buf_appendf(b, "</g>\n");
    axes_and_restarts(b, c, &f);
    draw_series(b, c, &f, tops);
    draw_legend(b, c, legend_row);
    if (empty || c->note) {
        slm_buf_appendf(b, "<text class=\"note\" x=\"%.0f\" y=\"%.0f\">", (ML + CW - MR) / 2,
                        (f.mt + CH - MB) / 2);
        esc(b, c->note ? c->note : "no data recorded for this chart");
        slm_buf_appendf(b, "</text>\n");
    }
    slm_buf_appendf(b, "</svg>\n");
    for (int i = 0; i < c->ns; i++)
        free(tops[i]);
    free(tops);
}

// Centered moving average of y over a window of w points (NaN-aware).
static void smooth(const double *y, size_t n, size_t w, double *out) {
    for (size_t i = 0; i < n; i++) {
        size_t a = i >= w / 2 ? i - w / 2 : 0, z = i + w / 2 + 1 < n ? i + w / 2 + 1 : n;
        double s = 0;
        size_t k = 0;
        for (size_t j = a; j < z; j++)
            if (isfinite(y[j])) s += y[j], k++;
        out[i] = k ? s / (double)k : NAN;
    }
}

// Adds the step records' field (via `get`) as a series, averaged into at most `max_pts` buckets
// of consecutive steps so a long run's path stays small.
static series *step_series(chart *c, const slm_run_log *l, const char *name, const char *colour,
                           int style, double (*get)(const slm_run_step *), double scale) {
    size_t n = l->n_steps, max_pts = 1500, per = n > max_pts ? (n + max_pts - 1) / max_pts : 1;
    series *s = add_series(c, name, colour, style, n / per + 1);
    if (!s) return NULL;
    for (size_t i = 0; i < n; i += per) {
        double sx = 0, sy = 0;
        size_t k = 0;
        for (size_t j = i; j < i + per && j < n; j++) {
            double v = get(&l->steps[j]);
            if (!isfinite(v)) continue;
            sx += (double)l->steps[j].step, sy += v * scale, k++;
        }
        s->x[s->n] = k ? sx / (double)k : (double)l->steps[i].step;
        s->y[s->n] = k ? sy / (double)k : NAN;
        s->n++;
    }
    return s;
}

static double g_loss(const slm_run_step *s) {
    return s->loss;
}
static double g_lr(const slm_run_step *s) {
    return s->lr;
}
static double g_tps(const slm_run_step *s) {
    return s->tokens_per_s;
}
static double g_mfu(const slm_run_step *s) {
    return s->mfu;
}
static double g_ms(const slm_run_step *s) {
    return s->ms_per_step;
}
static double g_data(const slm_run_step *s) {
    return s->data_ms;
}
static double g_comm(const slm_run_step *s) {
    return s->comm_ms;
}
static double g_ckpt(const slm_run_step *s) {
    return isfinite(s->data_ms) ? (isfinite(s->ckpt_ms) ? s->ckpt_ms : 0) : NAN;
}
static double g_compute(const slm_run_step *s) {
    if (!isfinite(s->data_ms) || !isfinite(s->comm_ms)) return NAN;
    double v = s->ms_per_step - s->data_ms - s->comm_ms;
    return v > 0 ? v : 0;
}

// A faint raw series plus its moving average (noisy per-step figures).
static void raw_and_smooth(chart *c, const slm_run_log *l, const char *name, const char *colour,
                           double (*get)(const slm_run_step *), double scale) {
    series *raw = step_series(c, l, NULL, colour, S_FAINT, get, scale);
    if (!raw || raw->n < 20) {
        if (raw) raw->style = S_LINE, raw->name = name;
        return;
    }
    series *sm = add_series(c, name, colour, S_LINE, raw->n);
    if (!sm) return;
    memcpy(sm->x, raw->x, raw->n * sizeof(double));
    smooth(raw->y, raw->n, raw->n / 30 + 1, sm->y);
    sm->n = raw->n;
}

static void chart_loss(slm_buf *b, const report_run *r, const double *vl, size_t nv) {
    const slm_run_log *l = &r->log;
    chart c = {.id = "chart-loss",
               .title = "Loss",
               .ylabel = "cross-entropy (nats / token)",
               .vlines = vl,
               .nv = nv};
    raw_and_smooth(&c, l, "train", C_BLUE, g_loss, 1);
    // validation: the step records' values and the end event's (the validation at the end of a
    // run stopped early); no legend entry for a run that never validated
    series *v = isfinite(r->final_val)
                    ? add_series(&c, "validation", C_ORANGE, S_DOTS, l->n_steps + 1)
                    : NULL;
    for (size_t i = 0; v && i < l->n_steps; i++)
        if (isfinite(l->steps[i].val_loss)) {
            v->x[v->n] = (double)l->steps[i].step;
            v->y[v->n++] = l->steps[i].val_loss;
        }
    if (v && r->final_val_end) {
        v->x[v->n] = (double)r->final_val_step;
        v->y[v->n++] = r->final_val;
    }
    render_chart(b, &c);
    chart_free(&c);
}

static void chart_simple(slm_buf *b, const report_run *r, const char *id, const char *title,
                         const char *ylabel, const char *colour,
                         double (*get)(const slm_run_step *), double scale, bool smooth_it,
                         const double *vl, size_t nv) {
    chart c = {.id = id, .title = title, .ylabel = ylabel, .y_zero = true, .vlines = vl, .nv = nv};
    if (smooth_it)
        raw_and_smooth(&c, &r->log, NULL, colour, get, scale);
    else
        step_series(&c, &r->log, NULL, colour, S_LINE, get, scale);
    if (!strcmp(id, "chart-lr")) c.y_zero = false;
    render_chart(b, &c);
    chart_free(&c);
}

static void chart_split(slm_buf *b, const report_run *r, const double *vl, size_t nv) {
    const slm_run_log *l = &r->log;
    chart c = {.id = "chart-time",
               .title = "Step time split",
               .ylabel = "milliseconds per step",
               .y_zero = true,
               .stacked = true,
               .vlines = vl,
               .nv = nv};
    bool split = false;
    for (size_t i = 0; i < l->n_steps && !split; i++)
        split = isfinite(l->steps[i].data_ms);
    if (split) {
        step_series(&c, l, "compute", C_BLUE, S_AREA, g_compute, 1);
        step_series(&c, l, "exposed comm", C_ORANGE, S_AREA, g_comm, 1);
        step_series(&c, l, "data wait", C_GREEN, S_AREA, g_data, 1);
        step_series(&c, l, "checkpoint stall", C_VERMILLION, S_AREA, g_ckpt, 1);
    } else {
        step_series(&c, l, "step time", C_BLUE, S_LINE, g_ms, 1);
        c.note = "this run's metrics.jsonl (schema 1) has no split: total only";
    }
    render_chart(b, &c);
    chart_free(&c);
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++) // insertion sort: n ranks, small
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : NAN;
}

static void chart_memory(slm_buf *b, const report_run *r, const double *vl, size_t nv) {
    const slm_run_log *l = &r->log;
    int W = 0;
    double top = 0;
    for (size_t i = 0; i < l->n_ranks; i++) {
        if (l->ranks[i].n_ranks > W) W = l->ranks[i].n_ranks;
        for (int k = 0; l->ranks[i].rss_bytes && k < l->ranks[i].n_ranks; k++)
            if (l->ranks[i].rss_bytes[k] > top) top = l->ranks[i].rss_bytes[k];
    }
    bool gib = top >= 4.0 * 1073741824.0;
    double scale = gib ? 1.0 / 1073741824.0 : 1.0 / 1048576.0;
    chart c = {.id = "chart-memory",
               .title = "Memory per rank (resident set)",
               .ylabel = gib ? "RSS (GiB)" : "RSS (MiB)",
               .y_zero = true,
               .vlines = vl,
               .nv = nv};
    static char names[8][24];
    if (W <= 8) {
        for (int k = 0; k < W; k++) {
            snprintf(names[k], sizeof names[k], "rank %d", k);
            series *s = add_series(&c, names[k], k_rank_colours[k], S_LINE, l->n_ranks);
            for (size_t i = 0; i < l->n_ranks; i++) {
                const slm_run_ranks *rk = &l->ranks[i];
                if (!rk->rss_bytes || k >= rk->n_ranks) continue;
                s->x[s->n] = (double)rk->step;
                s->y[s->n++] = rk->rss_bytes[k] * scale;
            }
        }
    } else {
        series *mx = add_series(&c, "max", C_VERMILLION, S_LINE, l->n_ranks);
        series *md = add_series(&c, "median", C_BLUE, S_LINE, l->n_ranks);
        series *mn = add_series(&c, "min", C_GREEN, S_LINE, l->n_ranks);
        double *tmp = slm_xmalloc((size_t)W * sizeof *tmp);
        for (size_t i = 0; i < l->n_ranks; i++) {
            const slm_run_ranks *rk = &l->ranks[i];
            int m = 0;
            for (int k = 0; rk->rss_bytes && k < rk->n_ranks; k++)
                if (isfinite(rk->rss_bytes[k])) tmp[m++] = rk->rss_bytes[k] * scale;
            if (!m) continue;
            double med = median(tmp, m);
            mx->x[mx->n] = md->x[md->n] = mn->x[mn->n] = (double)rk->step;
            mx->y[mx->n++] = tmp[m - 1], md->y[md->n++] = med, mn->y[mn->n++] = tmp[0];
        }
        free(tmp);
    }
    if (!l->n_ranks) c.note = "no per-rank figures in this run's metrics.jsonl (schema 1)";
    render_chart(b, &c);
    chart_free(&c);
}

// ---------------------------------------------------------------------------------------------
// Page

static const char k_css[] =
    "*{box-sizing:border-box}"
    "body{margin:0;background:#f3f4f6;color:#111827;font:14px/1.45 system-ui,-apple-system,"
    "'Segoe UI',Roboto,'DejaVu Sans',sans-serif}"
    "header{background:#1f2937;color:#f9fafb;padding:18px 28px}"
    "header h1{margin:0;font-size:22px;font-weight:600}"
    "header .sub{color:#d1d5db;font-size:13px;margin-top:4px;word-break:break-all}"
    "main{max-width:1360px;margin:0 auto;padding:18px 24px 40px}"
    ".tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(132px,1fr));gap:10px;"
    "margin-bottom:18px}"
    ".tile{background:#fff;border-radius:8px;padding:10px 14px;box-shadow:0 1px 2px #0000001a}"
    ".tile .k{font-size:12px;color:#6b7280;text-transform:uppercase;letter-spacing:.04em}"
    ".tile{min-width:0}.tiles .tile:first-child{grid-column:span 2}"
    ".tile .v{font-size:20px;font-weight:600;margin-top:2px;overflow-wrap:anywhere}"
    ".scope{font-size:13px;color:#4b5563;margin:-8px 0 14px}"
    ".tile .s{font-size:12px;color:#6b7280}"
    ".ok{color:#047857}.warn{color:#b45309}.bad{color:#b91c1c}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:14px}"
    ".card{background:#fff;border-radius:8px;padding:8px;box-shadow:0 1px 2px #0000001a}"
    "svg.chart{width:100%;height:auto;display:block}"
    "svg .ct{font-size:15px;font-weight:600;fill:#111827}"
    "svg .grid line{stroke:#e5e7eb;stroke-width:1}"
    "svg .yt{font-size:11px;fill:#4b5563;text-anchor:end}"
    "svg .xt{font-size:11px;fill:#4b5563;text-anchor:middle}"
    "svg .xl,svg .yl{font-size:12px;fill:#374151;text-anchor:middle}"
    "svg .axis{stroke:#6b7280;stroke-width:1;fill:none}"
    "svg .line{fill:none;stroke-width:2;stroke-linejoin:round;stroke-linecap:round}"
    "svg .faint{fill:none;stroke-width:1;stroke-opacity:.3}"
    "svg .dline{fill:none;stroke-width:1.5;stroke-dasharray:4 3}"
    "svg .area{fill-opacity:.85;stroke:none}"
    "svg .lg{font-size:12px;fill:#374151}"
    "svg .note{font-size:13px;fill:#6b7280;text-anchor:middle}"
    "svg .restart{stroke:#9ca3af;stroke-width:1;stroke-dasharray:3 3}"
    "svg .rl{font-size:10px;fill:#6b7280}"
    "h2{font-size:17px;margin:26px 0 10px}"
    "table{border-collapse:collapse;background:#fff;border-radius:8px;overflow:hidden;"
    "box-shadow:0 1px 2px #0000001a;font-size:13px}"
    "th,td{padding:6px 12px;text-align:left;border-bottom:1px solid #e5e7eb;vertical-align:top}"
    "th{background:#f9fafb;font-weight:600;color:#374151}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}"
    "tr:last-child td{border-bottom:none}"
    "#attempts th,#attempts td{padding:5px 6px}"
    "#attempts td.t{white-space:nowrap}#attempts td.w{overflow-wrap:anywhere}"
    "#attempts tr.d td{font-size:12px;color:#4b5563;padding-top:0}"
    "#attempts tr:has(+tr.d) td{border-bottom:none}"
    ".cols{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}"
    "code{font:12px ui-monospace,'DejaVu Sans Mono',monospace;word-break:break-all}"
    "footer{color:#6b7280;font-size:12px;margin-top:28px}";

static void tile2(slm_buf *b, const char *k, const char *v, const char *cls, const char *sub) {
    slm_buf_appendf(b, "<div class=\"tile\"><div class=\"k\">");
    esc(b, k);
    slm_buf_appendf(b, "</div><div class=\"v%s%s\">", cls ? " " : "", cls ? cls : "");
    esc(b, v);
    slm_buf_appendf(b, "</div>");
    if (sub) {
        slm_buf_appendf(b, "<div class=\"s\">");
        esc(b, sub);
        slm_buf_appendf(b, "</div>");
    }
    slm_buf_appendf(b, "</div>\n");
}

static void tile(slm_buf *b, const char *k, const char *v, const char *cls) {
    tile2(b, k, v, cls, NULL);
}

static void tiles(slm_buf *b, const report_run *r) {
    char v[96], a[32], c[32], sub[192];
    slm_buf_appendf(b, "<div class=\"tiles\">\n");
    // short words in the tile, the rest below them
    bool no_end = !strncmp(r->status, "running", 7);
    tile2(b, "status", no_end ? "no end event" : r->status,
          !strcmp(r->status, "complete") ? "ok"
          : !strcmp(r->status, "failed") ? "bad"
                                         : "warn",
          no_end ? "running, or ended without one" : NULL);
    snprintf(v, sizeof v, "%lld", (long long)r->steps_done);
    if (r->steps_planned > 0)
        snprintf(sub, sizeof sub, "of %lld planned", (long long)r->steps_planned);
    tile2(b, "steps", v, NULL, r->steps_planned > 0 ? sub : NULL);
    snprintf(v, sizeof v, isfinite(r->final_loss) ? "%.4f" : "n/a", r->final_loss);
    snprintf(sub, sizeof sub, "step %lld", (long long)r->steps_done);
    tile2(b, "train loss", v, NULL, isfinite(r->final_loss) ? sub : NULL);
    snprintf(v, sizeof v, isfinite(r->final_val) ? "%.4f" : "n/a", r->final_val);
    snprintf(sub, sizeof sub, "%s step %lld", r->final_val_end ? "end, after" : "after",
             (long long)r->final_val_step);
    tile2(b, "val loss", v, NULL, isfinite(r->final_val) ? sub : "not evaluated");
    report_fmt_si(r->tokens, a);
    tile(b, "tokens", a, NULL);
    report_fmt_si(r->mean_tps, a);
    tile2(b, "throughput", a, NULL, "tokens/s, all ranks");
    snprintf(v, sizeof v, isfinite(r->mean_mfu) ? "%.1f%%" : "n/a", 100 * r->mean_mfu);
    tile(b, "MFU", v, NULL);
    report_fmt_duration(r->wall_s, c);
    tile(b, "training time", c, NULL);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(r->start, "sharding");
    if (r->world > 0)
        snprintf(v, sizeof v, "%d rank%s", r->world, r->world == 1 ? "" : "s");
    else
        snprintf(v, sizeof v, "not recorded");
    tile2(b, "world", v, NULL, cJSON_IsString(sh) ? sh->valuestring : NULL);
    slm_buf_appendf(b, "</div>\n");
    // what each loss is over
    char tr[160], va[160];
    report_loss_scope(r, false, tr, sizeof tr);
    report_loss_scope(r, true, va, sizeof va);
    if (tr[0] || (va[0] && isfinite(r->final_val))) {
        slm_buf_appendf(b, "<p class=\"scope\">");
        if (tr[0]) {
            slm_buf_appendf(b, "Train loss: the mean cross-entropy of a step, ");
            esc(b, tr);
            slm_buf_appendf(b, ". ");
        }
        if (va[0] && isfinite(r->final_val)) {
            slm_buf_appendf(b, "Validation loss: ");
            esc(b, va);
            slm_buf_appendf(b, ".");
        }
        slm_buf_appendf(b, "</p>\n");
    }
}

static void json_value_text(slm_buf *b, const cJSON *x) {
    if (!x || cJSON_IsNull(x)) return; // null: not applicable, an empty cell
    if (cJSON_IsString(x)) {
        esc(b, x->valuestring);
        return;
    }
    if (cJSON_IsNumber(x)) { // no float32 noise: lr 0.0003, not 0.000300000014
        char t[40];
        report_fmt_num(x->valuedouble, t);
        esc(b, t);
        return;
    }
    char *t = cJSON_PrintUnformatted(x);
    esc(b, t ? t : "");
    free(t);
}

static bool looks_like_time(const char *key, const cJSON *x) {
    static const char *const hints[] = {"time",     "start",    "end", "_at",
                                        "detected", "progress", NULL};
    bool named = false;
    for (int i = 0; hints[i]; i++)
        named |= strstr(key, hints[i]) != NULL;
    return named && cJSON_IsNumber(x) && x->valuedouble > 1e9 && x->valuedouble < 4e10;
}

// key / value rows of a JSON object.
static void kv_table(slm_buf *b, const char *title, const cJSON *o, const char *const *skip) {
    slm_buf_appendf(b, "<table><tr><th colspan=\"2\">");
    esc(b, title);
    slm_buf_appendf(b, "</th></tr>\n");
    const cJSON *x;
    cJSON_ArrayForEach(x, o) {
        bool sk = false;
        for (int i = 0; skip && skip[i]; i++)
            sk |= x->string && !strcmp(x->string, skip[i]);
        if (sk || !x->string) continue;
        slm_buf_appendf(b, "<tr><td>");
        esc(b, x->string);
        slm_buf_appendf(b, "</td><td><code>");
        if (looks_like_time(x->string, x)) { // Unix seconds: a date, not 1796161536.125
            char t[32];
            report_fmt_utc(x->valuedouble, t);
            esc(b, t);
        } else {
            json_value_text(b, x);
        }
        slm_buf_appendf(b, "</code></td></tr>\n");
    }
    slm_buf_appendf(b, "</table>\n");
}

// The launcher's attempt keys in reading order (docs/operations.md); others follow.
static const char *const k_attempt_cols[] = {
    "attempt",      "start",      "end",           "world",       "hosts",
    "result",       "reason",     "exit_status",   "exit_signal", "culprit_rank",
    "culprit_host", "start_step", "steps_reached", "steps_lost",  "flight_verdict",
    "error",        NULL};

// Column headings for the attempt keys (docs/operations.md); another key reads with its
// underscores as spaces.
static const char *const k_attempt_labels[][2] = {
    {"attempt", "#"},
    {"start", "started (UTC)"},
    {"end", "ended"},
    {"world", "ranks"},
    {"exit_status", "exit code"},
    {"exit_signal", "signal"},
    {"culprit_rank", "culprit rank"},
    {"culprit_host", "culprit host"},
    {"start_step", "from step"},
    {"steps_reached", "to step"},
    {"steps_lost", "steps lost"},
    {"flight_verdict", "flight recorder"},
    {"last_progress", "last progress"},
    {"first_step_time", "first step"},
    {"grad_accum", "grad accum"},
};

static void attempt_label(slm_buf *b, const char *key) {
    for (size_t i = 0; i < sizeof k_attempt_labels / sizeof *k_attempt_labels; i++)
        if (!strcmp(key, k_attempt_labels[i][0])) {
            esc(b, k_attempt_labels[i][1]);
            return;
        }
    for (const char *p = key; *p; p++) {
        char one[2] = {*p == '_' ? ' ' : *p, 0};
        esc(b, one);
    }
}

// Free-text keys of an attempt: shown in a row of their own under the attempt's row (spanning
// the table), so that the table of figures fits a 1280 px wide window.
static const char *const k_attempt_text[] = {"reason", "flight_verdict", "error", NULL};

static bool is_attempt_text(const char *key) {
    for (int i = 0; k_attempt_text[i]; i++)
        if (!strcmp(key, k_attempt_text[i])) return true;
    return false;
}

static void attempts_table(slm_buf *b, const report_run *r) {
    slm_buf_appendf(b, "<h2>Attempts</h2>\n");
    if (!r->attempts) {
        slm_buf_appendf(b, "<p>");
        esc(b, r->attempts_note ? r->attempts_note
                                : "no attempts.json: the run was not started by shardlm launch");
        slm_buf_appendf(b, "</p>\n");
        return;
    }
    const char *cols[24];
    int nc = 0;
    const cJSON *a, *x;
    for (int k = 0; k_attempt_cols[k]; k++) {
        if (is_attempt_text(k_attempt_cols[k])) continue;
        bool any = false;
        cJSON_ArrayForEach(a, r->attempts) any |=
            cJSON_GetObjectItemCaseSensitive(a, k_attempt_cols[k]) != NULL;
        if (any) cols[nc++] = k_attempt_cols[k];
    }
    cJSON_ArrayForEach(a, r->attempts) {
        cJSON_ArrayForEach(x, a) {
            if (!x->string || is_attempt_text(x->string)) continue;
            bool have = false;
            for (int i = 0; i < nc; i++)
                have |= !strcmp(cols[i], x->string);
            if (!have && nc < 24) cols[nc++] = x->string;
        }
    }
    slm_buf_appendf(b, "<table id=\"attempts\"><tr>");
    for (int i = 0; i < nc; i++) { // key in data-key, its label as the text
        slm_buf_appendf(b, "<th data-key=\"");
        esc(b, cols[i]);
        slm_buf_appendf(b, "\">");
        attempt_label(b, cols[i]);
        slm_buf_appendf(b, "</th>");
    }
    slm_buf_appendf(b, "</tr>\n");
    cJSON_ArrayForEach(a, r->attempts) {
        slm_buf_appendf(b, "<tr>");
        const cJSON *t0 = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, "start") : NULL;
        for (int i = 0; i < nc; i++) {
            const cJSON *v =
                cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, cols[i]) : NULL;
            bool when = v && looks_like_time(cols[i], v);
            // start in UTC on one line; the attempt's other times (end, detected, ...) as
            // seconds after its start (narrow columns: the table fits a 1280 px window)
            bool rel = when && strcmp(cols[i], "start") != 0 && t0 && looks_like_time("start", t0);
            bool wrap = cJSON_IsString(v) && strstr(cols[i], "host");
            slm_buf_appendf(b, "<td%s>",
                            when                ? " class=\"n t\""
                            : cJSON_IsNumber(v) ? " class=\"n\""
                            : wrap              ? " class=\"w\""
                                                : "");
            if (rel) {
                char t[48];
                snprintf(t, sizeof t, "+%.1f s", v->valuedouble - t0->valuedouble);
                esc(b, t);
            } else if (when) {
                char t[32];
                report_fmt_utc(v->valuedouble, t);
                esc(b, t);
            } else if (v) {
                json_value_text(b, v);
            }
            slm_buf_appendf(b, "</td>");
        }
        slm_buf_appendf(b, "</tr>\n");
        bool text = false;
        for (int k = 0; k_attempt_text[k]; k++) {
            const cJSON *v =
                cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(a, k_attempt_text[k]) : NULL;
            if (!v || cJSON_IsNull(v) || (cJSON_IsString(v) && !v->valuestring[0])) continue;
            if (text)
                slm_buf_appendf(b, "<br>");
            else
                slm_buf_appendf(b, "<tr class=\"d\"><td colspan=\"%d\">", nc);
            slm_buf_appendf(b, "<b>");
            attempt_label(b, k_attempt_text[k]);
            slm_buf_appendf(b, ":</b> ");
            text = true;
            json_value_text(b, v);
        }
        if (text) slm_buf_appendf(b, "</td></tr>\n");
    }
    slm_buf_appendf(b, "</table>\n");
}

static void checkpoints_table(slm_buf *b, const report_run *r) {
    slm_buf_appendf(b, "<h2>Checkpoints</h2>\n");
    if (!r->n_ckpts) {
        slm_buf_appendf(b, "<p>no committed checkpoint under <code>");
        esc(b, r->dir);
        slm_buf_appendf(b, "/checkpoints</code></p>\n");
        return;
    }
    slm_buf_appendf(b, "<table id=\"checkpoints\"><tr><th>checkpoint</th><th>step</th>"
                       "<th>size</th><th>written</th><th>training stall</th></tr>\n");
    for (size_t i = 0; i < r->n_ckpts; i++) {
        const report_ckpt *c = &r->ckpts[i];
        char sz[32], t[32];
        slm_fmt_bytes(c->bytes, sz);
        report_fmt_utc(c->mtime, t);
        slm_buf_appendf(b,
                        "<tr><td><code>%s</code>%s</td><td class=\"n\">%lld</td><td "
                        "class=\"n\">%s</td><td>%s</td><td class=\"n\">",
                        c->name, c->latest ? " (latest)" : "", (long long)c->step, sz, t);
        if (isfinite(c->stall_ms))
            slm_buf_appendf(b, c->stall_ms < 10 ? "%.2f ms" : "%.0f ms", c->stall_ms);
        slm_buf_appendf(b, "</td></tr>\n");
    }
    slm_buf_appendf(b, "</table>\n");
}

// Events a reader looks for: restarts, stragglers, non-finite steps, errors, and any other kind
// this version does not chart (steps, ranks, evals, checkpoints and the start / end are shown
// elsewhere).
static void events_table(slm_buf *b, const report_run *r) {
    static const char *const shown[] = {"start", "end", "eval", "checkpoint", NULL};
    size_t n = 0;
    for (size_t i = 0; i < r->log.n_events; i++) {
        bool sk = false;
        for (int k = 0; shown[k]; k++)
            sk |= !strcmp(r->log.events[i].name, shown[k]);
        if (sk) continue;
        if (n++ == 0)
            slm_buf_appendf(b, "<h2>Events</h2>\n<table id=\"events\"><tr><th>event</th><th>step"
                               "</th><th>time</th><th>details</th></tr>\n");
        if (n > 500) continue;
        const slm_run_event *e = &r->log.events[i];
        char t[32];
        report_fmt_utc(e->time, t);
        slm_buf_appendf(b, "<tr><td class=\"%s\">", strcmp(e->name, "restart") ? "bad" : "warn");
        esc(b, e->name);
        slm_buf_appendf(b, "</td><td class=\"n\">%lld</td><td>%s</td><td><code>",
                        (long long)e->step, t);
        esc(b, e->json);
        slm_buf_appendf(b, "</code></td></tr>\n");
    }
    if (n) slm_buf_appendf(b, "</table>\n");
    if (n > 500) slm_buf_appendf(b, "<p>%zu more events not shown</p>\n", n - 500);
}

void report_render_html(const report_run *rp, slm_buf *out) {
    report_run r = *rp; // the renderers read the struct by value below
    const char *run_dir = r.dir;
    const slm_run_log *l = &r.log;
    slm_buf b = *out;
    slm_buf_appendf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                        "<title>shardlm run report: ");
    esc(&b, run_dir);
    slm_buf_appendf(&b,
                    "</title>\n<style>%s</style>\n</head>\n<body>\n<header><h1>shardlm run "
                    "report</h1><div class=\"sub\">",
                    k_css);
    esc(&b, run_dir);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(r.start, "model");
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(r.start, "n_params");
    if (cJSON_IsString(model)) {
        char a[32];
        report_fmt_si(cJSON_IsNumber(np) ? np->valuedouble : NAN, a);
        slm_buf_appendf(&b, " &#183; model ");
        esc(&b, model->valuestring);
        slm_buf_appendf(&b, " (%s parameters)", a);
    }
    char now[32];
    report_fmt_utc(slm_unix_time_s(), now);
    slm_buf_appendf(&b, " &#183; generated %s</div></header>\n<main>\n", now);
    tiles(&b, &r);
    // restart markers: the steps where a later start event resumed
    double *vl = slm_xmalloc((l->n_events + 1) * sizeof *vl);
    size_t nv = 0;
    for (size_t i = 0; i < l->n_events; i++)
        if (!strcmp(l->events[i].name, "restart") && l->events[i].step >= 0)
            vl[nv++] = (double)l->events[i].step;
    slm_buf_appendf(&b, "<div class=\"charts\">\n<div class=\"card\">\n");
    chart_loss(&b, &r, vl, nv);
    slm_buf_appendf(&b, "</div>\n<div class=\"card\">\n");
    chart_simple(&b, &r, "chart-lr", "Learning rate", "learning rate", C_GREEN, g_lr, 1, false, vl,
                 nv);
    slm_buf_appendf(&b, "</div>\n<div class=\"card\">\n");
    chart_simple(&b, &r, "chart-throughput", "Throughput", "tokens / second (all ranks)", C_PURPLE,
                 g_tps, 1, true, vl, nv);
    slm_buf_appendf(&b, "</div>\n<div class=\"card\">\n");
    // MFU: every step against one peak (the run's, as raised by its fastest step); without the
    // start event's figures, the steps' own MFU (scaled to the fastest step if above 100 %)
    char mfu_label[80];
    double mfu_scale = 100;
    double (*mfu_get)(const slm_run_step *) = g_mfu;
    if (isfinite(r.mfu_per_tps)) {
        mfu_get = g_tps, mfu_scale = 100 * r.mfu_per_tps;
        snprintf(mfu_label, sizeof mfu_label, "MFU (%% of %.1f GFLOP/s per rank)", r.peak_eff);
    } else {
        if (r.max_step_mfu > 1) mfu_scale /= r.max_step_mfu;
        snprintf(mfu_label, sizeof mfu_label, "MFU (%% of %s)",
                 r.max_step_mfu > 1 ? "the fastest step" : "measured peak");
    }
    chart_simple(&b, &r, "chart-mfu", "Model FLOPs utilisation", mfu_label, C_VERMILLION, mfu_get,
                 mfu_scale, true, vl, nv);
    slm_buf_appendf(&b, "</div>\n<div class=\"card\">\n");
    chart_split(&b, &r, vl, nv);
    slm_buf_appendf(&b, "</div>\n<div class=\"card\">\n");
    chart_memory(&b, &r, vl, nv);
    slm_buf_appendf(&b, "</div>\n</div>\n");
    free(vl);
    attempts_table(&b, &r);
    report_sessions_html(&r, &b);
    events_table(&b, &r);
    checkpoints_table(&b, &r);
    slm_buf_appendf(&b, "<h2>Configuration</h2>\n<div class=\"cols\">\n");
    if (r.start) {
        static const char *const skip[] = {"event", "hosts", NULL};
        kv_table(&b, "training options (newest start event)", r.start, skip);
    }
    if (r.config) kv_table(&b, "model (config.json)", r.config, NULL);
    if (!r.start && !r.config) slm_buf_appendf(&b, "<p>no start event and no config.json</p>\n");
    slm_buf_appendf(&b, "</div>\n<footer>metrics.jsonl: %lld lines, schema %d, %zu steps",
                    (long long)l->n_lines, l->schema, l->n_steps);
    if (l->n_bad)
        slm_buf_appendf(&b, ", %lld malformed line%s skipped (first: line %lld)",
                        (long long)l->n_bad, l->n_bad == 1 ? "" : "s", (long long)l->first_bad);
    slm_buf_appendf(&b, ". Written by shardlm report.</footer>\n</main>\n</body>\n</html>\n");
    *out = b;
}

slm_status slm_report_html(const char *run_dir, const char *out_path) {
    report_run r;
    slm_status st = report_run_open(run_dir, &r);
    if (st) return st;
    slm_buf b = {0};
    report_render_html(&r, &b);
    st = slm_file_write_atomic(out_path, b.data, b.len);
    slm_buf_free(&b);
    report_run_close(&r);
    return st;
}
