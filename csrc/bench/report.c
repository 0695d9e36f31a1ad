/* The benchmarks' reporter (see report.h): the figures of one run, their
 * JSON file and their human table, and the median. */
#include "bench/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void dsm_report_init(dsm_report_t *r, const char *bench)
{
    memset(r, 0, sizeof *r);
    r->bench = bench;
    r->series_tail = &r->series;
}

void dsm_report_free(dsm_report_t *r)
{
    free(r->figs);
    r->figs = NULL;
    r->nfigs = r->cap = 0;
    free(r->env);
    r->env = NULL;
    r->env_len = r->env_cap = 0;
    while (r->series) {
        dsm_series_t *s = r->series;
        r->series = s->next;
        free(s->x);
        free(s->y);
        free(s);
    }
    r->series_tail = &r->series;
}

int dsm_report_series(dsm_report_t *r, const char *name, const char *x_unit, const char *y_unit, int higher,
                      const double *x, const double *y, size_t n, double shade_lo, double shade_hi)
{
    dsm_series_t *s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->x = malloc((n ? n : 1) * sizeof *s->x);
    s->y = malloc((n ? n : 1) * sizeof *s->y);
    if (!s->x || !s->y) {
        free(s->x);
        free(s->y);
        free(s);
        return -1;
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->x_unit, sizeof s->x_unit, "%s", x_unit);
    snprintf(s->y_unit, sizeof s->y_unit, "%s", y_unit);
    s->higher = higher;
    s->shade_lo = shade_lo;
    s->shade_hi = shade_hi;
    if (n) {
        memcpy(s->x, x, n * sizeof *x);
        memcpy(s->y, y, n * sizeof *y);
    }
    s->n = n;
    *r->series_tail = s;
    r->series_tail = &s->next;
    return 0;
}

static void write_numbers(FILE *f, const double *v, size_t n)
{
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%.6g", i ? "," : "", v[i]);
    fputc(']', f);
}

const dsm_figure_t *dsm_report_add(dsm_report_t *r, const char *name, double value, const char *unit,
                                   const char *anchor, double anchor_value, int higher)
{
    if (r->nfigs == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        dsm_figure_t *figs = realloc(r->figs, cap * sizeof *figs);
        if (!figs) return NULL;
        r->figs = figs;
        r->cap = cap;
    }
    dsm_figure_t *f = &r->figs[r->nfigs++];
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->unit, sizeof f->unit, "%s", unit);
    snprintf(f->anchor, sizeof f->anchor, "%s", anchor);
    f->value = value;
    f->anchor_value = anchor_value;
    /* A rate of zero or less is a run that failed; a lower-is-better
       figure may be a difference (time added), whose sign is the finding. */
    f->ratio = anchor_value > 0 && (value > 0 || !higher) ? value / anchor_value : 0;
    f->higher = higher;
    f->nreps = 0;
    f->printed = 0;
    return f;
}

/* The runs of figure g, and its ratio: where each run has its own anchor,
 * the median of the runs' ratios, which a shift of the host's state
 * between runs moves far less than the ratio of the two medians (runs
 * where only ours, or only the anchor, met a slow host pull those medians
 * apart). Returns the ratio of the medians it replaced. */
static double set_reps(dsm_figure_t *g, const double *ours, const double *anchor, size_t n)
{
    double was = g->ratio, run_ratio[DSM_FIGURE_MAX_REPS];
    int paired = anchor != NULL;
    g->nreps = n < DSM_FIGURE_MAX_REPS ? n : DSM_FIGURE_MAX_REPS;
    for (size_t i = 0; i < g->nreps; i++) {
        g->reps[i] = ours[i];
        g->anchor_reps[i] = anchor ? anchor[i] : g->anchor_value > 0 ? g->anchor_value : 0;
        paired &= g->anchor_reps[i] > 0;
        run_ratio[i] = paired ? ours[i] / g->anchor_reps[i] : 0;
    }
    /* a figure without a ratio (dsm_report_add) gets none */
    if (paired && g->nreps > 0 && g->anchor_value > 0 && (g->value > 0 || !g->higher))
        g->ratio = dsm_report_median(run_ratio, g->nreps);
    return was;
}

void dsm_report_reps(dsm_report_t *r, const dsm_figure_t *f, const double *ours, const double *anchor, size_t n)
{
    if (f == NULL || f < r->figs || f >= r->figs + r->nfigs) return;
    dsm_figure_t *g = &r->figs[f - r->figs];
    double medians = set_reps(g, ours, anchor, n);
    if (g->printed && fabs(g->ratio - medians) > 0.005 * fabs(medians))
        printf("  %s: ratio %.3g, the median of its %zu runs' own ratios (%.3g between the medians)\n", g->name,
               g->ratio, g->nreps, medians);
}

/* Append one member to the env: "key":value (value JSON text), after a
 * comma past the first; the buffer grows as needed. */
static void env_member(dsm_report_t *r, const char *key, const char *value)
{
    size_t need = r->env_len + strlen(key) + strlen(value) + 3;
    if (need > r->env_cap) {
        size_t cap = r->env_cap ? r->env_cap : 4096;
        while (cap < need) cap *= 2;
        char *env = realloc(r->env, cap);
        if (env == NULL) {
            fprintf(stderr, "bench report: out of memory for env member %s\n", key);
            return;
        }
        r->env = env;
        r->env_cap = cap;
    }
    r->env_len += (size_t)snprintf(r->env + r->env_len, r->env_cap - r->env_len, "%s%s:%s", r->env_len ? "," : "",
                                   key, value);
}

/* A JSON string: the text in quotes, with quotes, backslashes and control
 * characters escaped. */
static void json_string(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    if (cap < 3) return;
    out[n++] = '"';
    for (; *s && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n++] = '"';
    out[n] = 0;
}

void dsm_report_env(dsm_report_t *r, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *value = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (value == NULL) {
        fprintf(stderr, "bench report: cannot format env member %s\n", key);
        return;
    }
    va_start(ap, fmt);
    vsnprintf(value, (size_t)n + 1, fmt, ap);
    va_end(ap);
    char k[128];
    json_string(k, sizeof k, key);
    env_member(r, k, value);
    free(value);
}

void dsm_report_env_str(dsm_report_t *r, const char *key, const char *s)
{
    /* quoted, each character at most 6 when escaped (\uXXXX), with room
     * for the escaper's look-ahead */
    size_t cap = s ? strlen(s) * 6 + 16 : 8;
    char *value = malloc(cap);
    if (value == NULL) {
        fprintf(stderr, "bench report: out of memory for env member %s\n", key);
        return;
    }
    if (s) json_string(value, cap, s);
    else snprintf(value, cap, "null");
    dsm_report_env(r, key, "%s", value);
    free(value);
}

int dsm_report_write_json(const dsm_report_t *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    char bench[128], name[256], unit[64], anchor[512];
    json_string(bench, sizeof bench, r->bench);
    fprintf(f, "{\"bench\":%s,\"figures\":[", bench);
    for (size_t i = 0; i < r->nfigs; i++) {
        const dsm_figure_t *g = &r->figs[i];
        json_string(name, sizeof name, g->name);
        json_string(unit, sizeof unit, g->unit);
        json_string(anchor, sizeof anchor, g->anchor);
        fprintf(f, "%s\n{\"name\":%s,\"value\":%.6g,\"unit\":%s,\"anchor\":%s,\"anchor_value\":%.6g,"
                   "\"ratio\":%.6g,\"better\":\"%s\"",
                i ? "," : "", name, g->value, unit, anchor, g->anchor_value, g->ratio,
                g->higher ? "higher" : "lower");
        if (g->nreps) {
            fputs(",\"reps\":", f);
            write_numbers(f, g->reps, g->nreps);
            fputs(",\"anchor_reps\":", f);
            write_numbers(f, g->anchor_reps, g->nreps);
        }
        fputc('}', f);
    }
    fprintf(f, "\n],\"env\":{%s},\"series\":[", r->env ? r->env : "");
    for (const dsm_series_t *s = r->series; s; s = s->next) {
        char xu[64];
        json_string(name, sizeof name, s->name);
        json_string(xu, sizeof xu, s->x_unit);
        json_string(unit, sizeof unit, s->y_unit);
        fprintf(f, "%s\n{\"name\":%s,\"x_unit\":%s,\"y_unit\":%s,\"better\":\"%s\",\"shade\":", s == r->series ? "" : ",",
                name, xu, unit, s->higher ? "higher" : "lower");
        if (s->shade_hi >= s->shade_lo) fprintf(f, "[%.6g,%.6g]", s->shade_lo, s->shade_hi);
        else fputs("null", f);
        fputs(",\"x\":", f);
        write_numbers(f, s->x, s->n);
        fputs(",\"y\":", f);
        write_numbers(f, s->y, s->n);
        fputc('}', f);
    }
    fputs("\n]}\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        perror(path);
        return -1;
    }
    return 0;
}

void dsm_report_print_header(FILE *out)
{
    fprintf(out, "%-36s %12s %-8s %12s %7s  %s\n", "figure", "value", "unit", "anchor", "ratio", "anchor is");
}

void dsm_report_print_figure(FILE *out, const dsm_figure_t *f)
{
    fprintf(out, "%-36s %12.4g %-8s %12.4g %7.2f  %s (%s is better)\n", f->name, f->value, f->unit,
            f->anchor_value, f->ratio, f->anchor, f->higher ? "higher" : "lower");
    fflush(out);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double dsm_report_median(const double *v, size_t n)
{
    if (n == 0) return 0;
    double small[64], *s = n <= 64 ? small : malloc(n * sizeof *s);
    if (s == NULL) {
        fprintf(stderr, "dsm_report_median: out of memory for %zu values\n", n);
        abort();
    }
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    if (s != small) free(s);
    return m;
}

void dsm_report_range(const double *v, size_t n, double *lo, double *hi)
{
    *lo = *hi = n ? v[0] : 0;
    for (size_t i = 1; i < n; i++) {
        if (v[i] < *lo) *lo = v[i];
        if (v[i] > *hi) *hi = v[i];
    }
}

void dsm_report_env_spread(dsm_report_t *r, const char *key, const double *v, size_t n)
{
    double lo, hi;
    dsm_report_range(v, n, &lo, &hi);
    dsm_report_env(r, key, "{\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}", dsm_report_median(v, n), lo, hi);
}

const char *dsm_report_loadavg(char *buf, size_t len)
{
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = 0;
    if (f) {
        if (fgets(buf, (int)len, f))
            buf[strcspn(buf, " ")] = 0;   /* 1-minute average */
        fclose(f);
    }
    return buf;
}

const dsm_figure_t *dsm_report_add_print(dsm_report_t *r, const char *name, double value, const char *unit,
                                         const char *anchor, double anchor_value, int higher)
{
    const dsm_figure_t *f = dsm_report_add(r, name, value, unit, anchor, anchor_value, higher);
    if (f) {
        dsm_report_print_figure(stdout, f);
        r->figs[f - r->figs].printed = 1;
    }
    fflush(stdout);
    return f;
}

const dsm_figure_t *dsm_report_add_runs(dsm_report_t *r, const char *name, const double *ours, const double *anchor,
                                        size_t n, const char *unit, const char *label, int higher)
{
    const dsm_figure_t *f =
        dsm_report_add(r, name, dsm_report_median(ours, n), unit, label, dsm_report_median(anchor, n), higher);
    if (!f)
        return NULL;
    set_reps(&r->figs[f - r->figs], ours, anchor, n);
    dsm_report_print_figure(stdout, f);
    double lo, hi, alo, ahi;
    dsm_report_range(ours, n, &lo, &hi);
    dsm_report_range(anchor, n, &alo, &ahi);
    if (n > 1)
        printf("  (spread over %zu: %.4g-%.4g, anchor %.4g-%.4g)\n", n, lo, hi, alo, ahi);
    fflush(stdout);
    return f;
}

void dsm_report_progress_cell(dsm_report_t *r, const dsm_progress_cell_t *c)
{
    static const char *const fixed[3] = {NULL, "hybrid", "blocking"};
    double hybrid = dsm_report_median(c->runs[1], c->n), blocking = dsm_report_median(c->runs[2], c->n);
    int best = (c->higher ? hybrid >= blocking : hybrid <= blocking) ? 1 : 2;
    char name[128], label[192];
    snprintf(name, sizeof name, "progress_adaptive_vs_best/%s/%s", c->state, c->cell);
    snprintf(label, sizeof label, "%s %s, the better fixed mode here (%s: %.4g %s), same runs", fixed[best],
             c->waiter, fixed[3 - best], best == 1 ? blocking : hybrid, c->unit);
    dsm_report_add_runs(r, name, c->runs[0], c->runs[best], c->n, c->unit, label, c->higher);
    snprintf(name, sizeof name, "progress_control_vs_best/%s/%s", c->state, c->cell);
    snprintf(label, sizeof label, "%s %s, the better fixed mode here, same runs (control: a second blocking %s)",
             fixed[best], c->waiter, c->control);
    dsm_report_add_runs(r, name, c->runs[3], c->runs[best], c->n, c->unit, label, c->higher);
    snprintf(name, sizeof name, "progress_hybrid_vs_blocking/%s/%s", c->state, c->cell);
    snprintf(label, sizeof label, "blocking %s, same runs", c->waiter);
    dsm_report_add_runs(r, name, c->runs[1], c->runs[2], c->n, c->unit, label, c->higher);
}
