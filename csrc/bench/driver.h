/* The command line every dsm-bench-NAME program shares (--quick, --json,
 * --only, --runs, --transport, --list, --help), plus the flags one program
 * adds, and the table of cases a program declares as its figure catalogue:
 * --list prints that table, so the figures a program reports are named in
 * one place. Modelled on UCX libperf's one driver for many tests. */
#ifndef DSM_BENCH_DRIVER_H
#define DSM_BENCH_DRIVER_H

#include <stddef.h>
#include <stdio.h>

#include "dsm/fabric.h"

/* One figure a program may report: its JSON name, the anchor measured
 * beside it in the same run, its unit, the ratio's direction and how the
 * program measures it (`run` names one of the program's measurements, `arg`
 * is its parameter, such as a message size). A '*' in a figure name stands
 * for a part the run fills in (an object count, an offered load). */
typedef struct dsm_bench_case {
    const char *figure;
    const char *anchor;
    const char *unit;
    int higher;   /* 1: higher is better, 0: lower is better */
    int run;      /* the program's own measurement index */
    long arg;
} dsm_bench_case_t;

/* A program's own flag: with an arg, its value is stored as given in
 * *value; without (arg NULL), *value is set to "1" when the flag is given. */
typedef struct dsm_bench_flag {
    const char *name;    /* e.g. "--nodes" */
    const char *arg;     /* e.g. "N", for the usage line; NULL: takes no value */
    const char **value;
} dsm_bench_flag_t;

typedef struct dsm_bench_opts {
    int quick;
    const char *json;          /* NULL: no JSON file */
    const char *only;          /* NULL: every figure; else a figure-name prefix */
    int runs;                  /* 0: the program's default */
    int transport_set;         /* 0: every transport the program measures */
    dsm_transport_t transport;
} dsm_bench_opts_t;

/* A progress flag's value (flag names it in the error): busy or blocking,
 * the modes a benchmark compares. 0 and *out set; else the error printed
 * and 2, the exit status of a usage error. */
int dsm_bench_progress_flag(const char *flag, const char *value, dsm_progress_mode_t *out);

/* Parse argv into o. --reps is kept as another name for --runs (scripts use
 * it). Returns -1 when the program should go on, else the exit status it
 * should return with (0 after --list or --help, 2 on a usage error). */
int dsm_bench_parse(int argc, char **argv, const dsm_bench_case_t *cases, size_t n_cases,
                    const dsm_bench_flag_t *flags, size_t n_flags, dsm_bench_opts_t *o);

/* Print the case table, one figure a line (tab-separated: figure, unit,
 * better, anchor). */
void dsm_bench_list(FILE *out, const dsm_bench_case_t *cases, size_t n_cases);

/* Whether figure name is wanted under --only (a prefix match). */
int dsm_bench_wanted(const dsm_bench_opts_t *o, const char *figure);

/* Whether transport tr is measured: --transport names it, or no
 * --transport was given (every transport the program measures). */
int dsm_bench_transport_on(const dsm_bench_opts_t *o, dsm_transport_t tr);

/* Whether any case of measurement `run` is wanted under --only: --only is a
 * prefix of one of its figure names, a '*' there matching whatever the run
 * fills in. */
int dsm_bench_run_wanted(const dsm_bench_opts_t *o, const dsm_bench_case_t *cases, size_t n_cases, int run);

/* The path of program `name` in this program's directory (the build
 * directory, or the package's bin/), where the benchmarks' helpers and
 * anchors are installed beside them; NULL if /proc/self/exe cannot be read
 * or the path does not fit in cap bytes. */
const char *dsm_bench_sibling(const char *name, char *buf, size_t cap);

#endif
