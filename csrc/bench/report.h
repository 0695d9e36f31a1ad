/* The benchmarks' results: figures (each beside its anchor, measured in the
 * same run), the median the benchmarks report, the JSON file that pydsm
 * reads ({"bench", "figures": [{name, value, unit, anchor, anchor_value,
 * ratio, better, and for a median over repetitions reps and anchor_reps,
 * each repetition's values}], "env": {...}, "series": [{name, x_unit, y_unit, better,
 * shade: [from, to] or null, x: [...], y: [...]}]}) and the human table of
 * figures. A series is a curve for a plot (e.g. throughput over time), the
 * shaded x interval a window it marks. Shared by every dsm-bench-* program. */
#ifndef DSM_BENCH_REPORT_H
#define DSM_BENCH_REPORT_H

#include <stddef.h>
#include <stdio.h>

enum { DSM_FIGURE_MAX_REPS = 16 };

typedef struct dsm_figure {
    char name[96];
    double value;
    char unit[16];
    char anchor[224];  /* what it is measured against, in words (labels run long) */
    double anchor_value;
    double ratio;      /* value / anchor_value, 0 when either is not positive; with
                          runs that each have an anchor, the median of their ratios */
    int higher;        /* better: 1 "higher", 0 "lower" */
    /* the repetitions a median came from, ours and the anchor's (0: none
     * recorded), so a reader sees whether one or all of them were off */
    size_t nreps;
    double reps[DSM_FIGURE_MAX_REPS], anchor_reps[DSM_FIGURE_MAX_REPS];
    int printed;       /* its line went out (dsm_report_add_print) */
} dsm_figure_t;

typedef struct dsm_series {
    char name[96], x_unit[16], y_unit[16];
    int higher;               /* better: 1 "higher", 0 "lower" */
    double shade_lo, shade_hi;   /* shade_hi < shade_lo: none */
    double *x, *y;
    size_t n;
    struct dsm_series *next;
} dsm_series_t;

typedef struct dsm_report {
    const char *bench;
    dsm_figure_t *figs;
    size_t nfigs, cap;
    dsm_series_t *series, **series_tail;
    char *env;         /* the members of "env", as JSON text (NULL: none yet) */
    size_t env_len, env_cap;
} dsm_report_t;

void dsm_report_init(dsm_report_t *r, const char *bench);
void dsm_report_free(dsm_report_t *r);
/* Add a figure (ratio computed); returns it, or NULL when out of memory. */
const dsm_figure_t *dsm_report_add(dsm_report_t *r, const char *name, double value, const char *unit,
                                   const char *anchor, double anchor_value, int higher);
/* Record the n repetitions (at most DSM_FIGURE_MAX_REPS kept) whose
 * medians figure f reports; anchor NULL: the figure's anchor is a
 * constant (parity, an even split), each repetition's anchor_value (0
 * where it has none), so the runs' spread is their own. Where every
 * repetition has an anchor, f's ratio becomes the median of the
 * repetitions' ratios (a line says so when f's line went out with
 * another). */
void dsm_report_reps(dsm_report_t *r, const dsm_figure_t *f, const double *ours, const double *anchor, size_t n);
/* Add a series of n points (copied; shade_hi < shade_lo for no window);
 * returns 0, or -1 when out of memory. */
int dsm_report_series(dsm_report_t *r, const char *name, const char *x_unit, const char *y_unit, int higher,
                      const double *x, const double *y, size_t n, double shade_lo, double shade_hi);
/* An "env" member whose value is JSON text formatted like printf. */
void dsm_report_env(dsm_report_t *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An "env" member whose value is the string s (NULL: null). */
void dsm_report_env_str(dsm_report_t *r, const char *key, const char *s);
/* Write the JSON report to path; returns 0, or -1 (with a message). */
int dsm_report_write_json(const dsm_report_t *r, const char *path);

/* The human table: a header, then one line per figure. */
void dsm_report_print_header(FILE *out);
void dsm_report_print_figure(FILE *out, const dsm_figure_t *f);

/* dsm_report_add, then the figure's line on stdout (flushed). */
const dsm_figure_t *dsm_report_add_print(dsm_report_t *r, const char *name, double value, const char *unit,
                                         const char *anchor, double anchor_value, int higher);
/* A figure that is the median of n runs of ours beside n of anchor: added
 * with its runs, printed with their spread. */
const dsm_figure_t *dsm_report_add_runs(dsm_report_t *r, const char *name, const double *ours, const double *anchor,
                                        size_t n, const char *unit, const char *label, int higher);

/* One cell of a progress comparison: the runs of four targets that differ
 * only in how they wait for work. */
typedef struct dsm_progress_cell {
    const char *state;      /* "idle", "loaded" */
    const char *cell;       /* the workload, as the figures' names end: "am_8B_latency/tcp" */
    const char *waiter;     /* what waits, in labels: "progress", "workers" */
    const char *control;    /* what the control is, in labels: "target", "server" */
    const char *unit;
    int higher;             /* 1: a higher figure is better */
    const double *runs[4];  /* adaptive, hybrid, blocking, the control (a second blocking one) */
    size_t n;
} dsm_progress_cell_t;

/* The cell's figures: progress_adaptive_vs_best and progress_control_vs_best
 * (each against the better fixed mode of the same runs: what the control
 * reads is the comparison's resolution on this host), and
 * progress_hybrid_vs_blocking. */
void dsm_report_progress_cell(dsm_report_t *r, const dsm_progress_cell_t *c);

/* The 1-minute load average (/proc/loadavg) as text in buf ("" if unknown). */
const char *dsm_report_loadavg(char *buf, size_t len);

/* The median of v[0..n) (the mean of the middle two for even n; 0 for n 0),
 * v left as it was: a bench keeps its repetitions in the order they ran
 * (dsm_report_reps). */
double dsm_report_median(const double *v, size_t n);
/* The smallest and largest of v[0..n) (0 and 0 when n is 0): a figure's spread. */
void dsm_report_range(const double *v, size_t n, double *lo, double *hi);
/* Adds env key = {"median": m, "min": lo, "max": hi} of v[0..n): a
 * quantity measured beside the figures, per repetition. */
void dsm_report_env_spread(dsm_report_t *r, const char *key, const double *v, size_t n);

#endif
