/* dsm-bench-semeru: the managed heap (Semeru) in miniature, 1 CPU server +
 * 2 memory servers in this process, each figure beside its anchor measured
 * in the same run, on three workloads shaped like the paper's:
 *   graph    a Kronecker (R-MAT) graph kept across PageRank-like iterations,
 *            each iteration replacing every vertex's rank object;
 *   temps    temporaries-heavy: chains of short-lived objects, a few promoted;
 *   buffers  serialized buffers: large byte objects written then parsed into
 *            small ones, a window of recent ones kept.
 * Three collectors on the same heap, allocator, barriers, cache (with a
 * swap-like readahead) and LRU: Semeru (tracing and evacuation on the
 * memory servers, CSSC), the G1-like baseline (young pauses whenever its
 * eden, sized to half the cache, is full; a CPU thread marks from the
 * roots through the cache while the program runs, SATB, from an adaptive
 * IHOP on; a mixed pause then evacuates the live objects of the old
 * regions with garbage too, on the CPU server) and the stop-the-world
 * one (full GCs on the CPU server pulling pages). Every cell (shm and tcp, 100/50/25% cache,
 * each workload) runs all three in rotating order: GC time, GC traffic
 * (every byte the GC caused, in any phase), total and mutator time,
 * pages fetched, the longest pause, full GCs. Headlines: Semeru against
 * G1 at 50% and 25% over tcp, the geometric mean over workloads of medians
 * of --runs rotating runs (5; 3 in quick mode; at most 16), the spread in
 * the reps; the figures, each with its anchor, are the case table below
 * (--list).
 * --fetch-delay-us N adds N us to every fetch request (all collectors), to
 * stand in for a slower device than this loopback; the figures then name
 * their fabric tcp+Nus (shm+Nus), and the stop-the-world headlines and the
 * tracing probe, which name none, are left out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apps/semeru_wl.h"
#include "bench/driver.h"
#include "bench/report.h"
#include "harness/cluster.h"
#include "dsm/sdk.h"
#include "util/clock.h"

#define SECRET "semeru-bench"

static int quick;   /* 1 --quick, 2 --tiny (notebooks: a few seconds a run) */
static uint32_t fetch_delay_us;

/* Node 0 is the CPU server and serves no memory; 1 and 2 are the memory
 * servers, part bytes each. */
static int cluster_start(dsm_harness_t *c, dsm_transport_t tr, uint64_t part)
{
    dsm_harness_bench_init(c, tr, SECRET, part, 0);
    c->no_partition_mask = 1u;
    c->blocking_mask = 0;   /* the node's default progress */
    c->op_timeout_ms = 30000;
    c->peer_timeout_ms = 5000;
    c->wait_ms = 10000;
    return dsm_harness_start(c, 3) == DSM_OK ? 0 : -1;
}

static void cluster_stop(dsm_harness_t *c)
{
    dsm_harness_stop(c);
}

#define CK(x)                                                                                                  \
    do {                                                                                                       \
        dsm_status_t st_ = (x);                                                                                \
        if (st_ != DSM_OK) {                                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, dsm_strerror(st_));                     \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

/* ---- one run ----------------------------------------------------------------- */

typedef struct result {
    double total_s, gc_s, pause_ms, pages;
    double gc_bytes, bytes, full, cssc, traced, trace_mbps, marks_started, marks_finished, round_trips;
    double phase_s[DSM_MHEAP_PHASES], pauses, traces_at_pause, ctl;
} result_t;

/* msct 1: Semeru (msct_auto 0: the ablation); 0: the full-GC baseline; 2:
 * the G1-like baseline (CPU concurrent marking, CPU evacuation pauses). */
static result_t run(dsm_harness_t *c, int wl, uint32_t pct, int msct, int msct_auto, int probe, uint64_t heap)
{
    static const uint32_t servers[] = {1, 2};
    dsm_mheap_config_t cfg;
    dsm_mheap_config_init(&cfg);
    cfg.memory_servers = servers;
    cfg.nservers = 2;
    cfg.heap_bytes = heap;
    cfg.cache_percent = pct;
    cfg.types = dsm_semeru_types;
    cfg.ntypes = dsm_semeru_ntypes;
    cfg.msct = msct == 1;
    cfg.cpu_marking = msct == 2;
    cfg.msct_auto = msct_auto;
    cfg.handles = 1u << 16;
    cfg.fetch_delay_us = fetch_delay_us;
    dsm_mheap_t *h;
    CK(dsm_mheap_create(c->nodes[0], &cfg, &h));
    static const uint32_t sizes[3][3] = {{13, 50000, 2000}, {12, 20000, 800}, {10, 5000, 400}};
    static const uint32_t iters[3] = {8, 5, 8};
    dsm_semeru_wl_out_t o;
    CK(dsm_semeru_wl_run(h, wl, sizes[quick][wl], iters[quick], probe, NULL, &o));
    dsm_mheap_destroy(h);
    const dsm_mheap_stats_t *s = &o.stats;
    result_t r = {.total_s = o.work_s, .gc_s = (double)s->gc_ns / 1e9, .pause_ms = (double)s->pause_max_ns / 1e6,
                  .pages = (double)s->pages_fetched, .gc_bytes = (double)s->fabric_bytes_gc,
                  .bytes = (double)s->fabric_bytes, .full = (double)s->full_gc_count, .cssc = (double)s->cssc_count,
                  .traced = (double)s->bytes_traced_server, .trace_mbps = o.trace_mbps,
                  .marks_started = (double)s->marks_started, .marks_finished = (double)s->marks_finished,
                  .round_trips = (double)s->pause_round_trips, .pauses = (double)s->pauses,
                  .traces_at_pause = (double)s->traces_at_pause, .ctl = (double)s->ctl_requests};
    for (int k = 0; k < DSM_MHEAP_PHASES; k++)
        r.phase_s[k] = (double)s->phase_ns[k] / 1e9;
    return r;
}

/* The round trip of an 8-byte read from the CPU server to a memory server,
 * the median of 201 (us): what a message costs in this run. */
static double round_trip_us(dsm_harness_t *c)
{
    enum { N = 201 };
    double v[N];
    dsm_gaddr_t g;
    uint64_t x;
    CK(dsm_alloc(c->nodes[0], 1, 4096, &g));
    for (int i = 0; i < N; i++) {
        uint64_t t0 = dsm_now_ns();
        CK(dsm_read(c->nodes[0], g, &x, sizeof x));
        v[i] = (double)(dsm_now_ns() - t0) / 1e3;
    }
    CK(dsm_free(c->nodes[0], g));
    return dsm_report_median(v, N);
}

/* The geometric mean of v[0..n) (all > 0, else 0). */
static double geo(const double *v, int n)
{
    double p = 1;
    for (int i = 0; i < n; i++) {
        if (!(v[i] > 0))
            return 0;
        p *= v[i];
    }
    return n ? pow(p, 1.0 / n) : 0;
}

enum { SEM = 0, STW = 1, G1 = 2, NCOLL = 3, MAXREP = DSM_FIGURE_MAX_REPS };
static const int coll_msct[NCOLL] = {1, 0, 2};
static const char *const coll_name[NCOLL] = {"semeru", "stw", "g1"};

/* One cell (transport, cache, workload): every run of each collector. */
typedef struct cell {
    int n;
    result_t r[NCOLL][MAXREP];
} cell_t;

static double field(const result_t *r, int f)
{
    switch (f) {
    case 0: return r->gc_s;
    case 1: return r->total_s;
    case 2: return r->gc_bytes;
    case 3: return r->total_s - r->gc_s;
    case 4: return r->pages;
    case 5: return r->pause_ms;
    case 7: return r->round_trips;
    default: return r->full;
    }
}

/* Each collector's runs of field f in a cell, and their median. */
static double cell_med(const cell_t *c, int coll, int f, double *v)
{
    for (int k = 0; k < c->n; k++)
        v[k] = field(&c->r[coll][k], f);
    return dsm_report_median(v, (size_t)c->n);
}

/* A figure from a cell: collector a's median of field f beside b's, with
 * their runs. */
static void cell_fig(dsm_report_t *rep, const cell_t *c, const char *name, int a, int b, int f, const char *unit,
                     const char *anchor)
{
    double va[MAXREP], vb[MAXREP];
    double ma = cell_med(c, a, f, va), mb = cell_med(c, b, f, vb);
    const dsm_figure_t *fig = dsm_report_add(rep, name, ma, unit, anchor, mb, 0);
    dsm_report_reps(rep, fig, va, vb, (size_t)c->n);
    dsm_report_print_figure(stdout, fig);
}

/* A headline over workloads: the geometric mean of each workload's median
 * ratio den's field(fden) / num's field(fnum), as x against parity; its
 * spread is the geometric mean of the ratios of each round (the three
 * workloads' k-th runs), min..max in the reps. */
/* The geometric mean over the workloads of each one's median ratio
 * den/num (field fden of collector den over field fnum of num), and in
 * per[0..*n) the same mean run by run. */
static double ratio_geo(const cell_t *cells, int nwl, int num, int fnum, int den, int fden, double *per, int *n)
{
    double med[3], v[MAXREP];
    *n = MAXREP;
    for (int w = 0; w < nwl; w++) {
        for (int k = 0; k < cells[w].n; k++)
            v[k] = field(&cells[w].r[num][k], fnum) > 0
                       ? field(&cells[w].r[den][k], fden) / field(&cells[w].r[num][k], fnum)
                       : 0;
        med[w] = dsm_report_median(v, (size_t)cells[w].n);
        *n = cells[w].n < *n ? cells[w].n : *n;
    }
    for (int k = 0; k < *n; k++) {
        double rr[3];
        for (int w = 0; w < nwl; w++)
            rr[w] = field(&cells[w].r[num][k], fnum) > 0
                        ? field(&cells[w].r[den][k], fden) / field(&cells[w].r[num][k], fnum)
                        : 0;
        per[k] = geo(rr, nwl);
    }
    return geo(med, nwl);
}

static void ratio_fig(dsm_report_t *rep, cell_t *cells, int nwl, const char *name, int num, int fnum, int den,
                      int fden, const char *anchor)
{
    double per[MAXREP];
    int n;
    double value = ratio_geo(cells, nwl, num, fnum, den, fden, per, &n);
    const dsm_figure_t *fig = dsm_report_add(rep, name, value, "x", anchor, 1, 1);
    dsm_report_reps(rep, fig, per, NULL, (size_t)n);
    dsm_report_print_figure(stdout, fig);
}

/* Where each collector's GC time went in a cell: the median over its runs
 * of its GC time, pauses, round trips in pauses, regions traced afresh at
 * a pause, and each phase (ms; dsm/mheap.h, DSM_MHEAP_PHASE_*: the
 * pauses' phases, then the GC work outside pauses and the program's
 * faults), on stderr and in the JSON's env as
 * gc_phases_ms_TRANSPORT_PCTpct_WORKLOAD. */
static const char *const phase_name[DSM_MHEAP_PHASES] = {
    "cut", "remset", "writeback", "remark", "local", "evac", "fixup", "finish", "full",
    "trace_writeback", "trace_wait", "mark", "mark_read", "fault", "evict"};
static void phase_table(dsm_report_t *rep, const cell_t *c, const char *wn, const char *tn, uint32_t pct)
{
    char js[4096];
    size_t at = 0;
    at += (size_t)snprintf(js + at, sizeof js - at, "{");
    for (int co = 0; co < NCOLL; co++) {
        double v[MAXREP];
        for (int k = 0; k < c->n; k++)
            v[k] = c->r[co][k].gc_s;
        double gc = 1e3 * dsm_report_median(v, (size_t)c->n);
        for (int k = 0; k < c->n; k++)
            v[k] = c->r[co][k].pauses;
        double np = dsm_report_median(v, (size_t)c->n);
        for (int k = 0; k < c->n; k++)
            v[k] = c->r[co][k].round_trips;
        double rt = dsm_report_median(v, (size_t)c->n);
        for (int k = 0; k < c->n; k++)
            v[k] = c->r[co][k].traces_at_pause;
        double fresh = dsm_report_median(v, (size_t)c->n);
        fprintf(stderr, "phases %-7s %s %3u%% %-6s gc %7.1f ms, %3.0f pauses, %4.0f round trips, %3.0f fresh |", wn,
                tn, pct, coll_name[co], gc, np, rt, fresh);
        at += (size_t)snprintf(js + at, sizeof js - at,
                               "%s\"%s\": {\"gc\": %.3f, \"pauses\": %.0f, \"pause_round_trips\": %.0f, "
                               "\"traces_at_pause\": %.0f",
                               co ? ", " : "", coll_name[co], gc, np, rt, fresh);
        for (int ph = 0; ph < DSM_MHEAP_PHASES && at < sizeof js; ph++) {
            for (int k = 0; k < c->n; k++)
                v[k] = c->r[co][k].phase_s[ph];
            double m = 1e3 * dsm_report_median(v, (size_t)c->n);
            if (m > 0)
                fprintf(stderr, " %s %.1f", phase_name[ph], m);
            at += (size_t)snprintf(js + at, sizeof js - at, ", \"%s\": %.3f", phase_name[ph], m);
        }
        fprintf(stderr, "\n");
        if (at < sizeof js)
            at += (size_t)snprintf(js + at, sizeof js - at, "}");
    }
    if (at < sizeof js - 1) {
        snprintf(js + at, sizeof js - at, "}");
        char key[96];
        snprintf(key, sizeof key, "gc_phases_ms_%s_%upct_%s", tn, pct, wn);
        dsm_report_env(rep, key, "%s", js);
    }
}

/* The figures, '*' standing for what a run fills in: a workload (graph,
 * temps, buffers), a transport (shm, tcp), a cache share (100, 50, 25) or a
 * collector (semeru, stw, g1). One measurement makes them all: every cell
 * runs the three collectors in rotating order. */
#define STW_WL "stop-the-world baseline, the same workload"
#define SEM_WL "semeru, the same workload"
static const dsm_bench_case_t cases[] = {
    /* per cell: Semeru beside the stop-the-world baseline */
    {"semeru_*_*_*pct_gc_s", STW_WL, "s", 0, 0, 0},
    {"semeru_*_*_*pct_total_s", STW_WL, "s", 0, 0, 0},
    {"semeru_*_*_*pct_gc_traffic_bytes", STW_WL, "B", 0, 0, 0},
    {"semeru_*_*_*pct_mutator_s", STW_WL, "s", 0, 0, 0},
    {"semeru_*_*_*pct_pages_fetched", STW_WL, "pages", 0, 0, 0},
    {"semeru_*_*_*pct_pause_ms", STW_WL, "ms", 0, 0, 0},
    {"semeru_*_*_*pct_full_gcs", STW_WL, "n", 0, 0, 0},
    /* per cell: the G1-like baseline beside Semeru, and beside stop the world */
    {"semeru_*_*_*pct_g1_gc_s", SEM_WL, "s", 0, 0, 0},
    {"semeru_*_*_*pct_g1_total_s", SEM_WL, "s", 0, 0, 0},
    {"semeru_*_*_*pct_g1_gc_traffic_bytes", SEM_WL, "B", 0, 0, 0},
    {"semeru_*_*_*pct_g1_full_gcs", SEM_WL, "n", 0, 0, 0},
    {"semeru_*_*_*pct_g1_vs_stw_total_s", STW_WL, "s", 0, 0, 0},
    /* per cell: Semeru's GC time as its pauses' round trips predict it
     * (round trips x this run's round trip), beside the measured one */
    {"semeru_*_*_*pct_gc_predicted_s", "semeru GC time measured, the same workload", "s", 0, 0, 0},
    /* the ablation at 25% over tcp: no continuous tracing */
    {"semeru_*_tcp*_25pct_no_msct_gc_s", SEM_WL, "s", 0, 0, 0},
    {"semeru_*_tcp*_25pct_no_msct_mutator_s", SEM_WL, "s", 0, 0, 0},
    /* headlines over the workloads (geometric means of median ratios) */
    {"semeru_total_vs_g1_*pct/*", "parity: G1-like / Semeru", "x", 1, 0, 0},
    {"semeru_gc_time_vs_g1_*pct/*", "parity: G1-like / Semeru", "x", 1, 0, 0},
    /* the total a GC that cost nothing would give Semeru on these workloads */
    {"semeru_total_vs_g1_gc_free_bound_*pct/*", "parity: G1-like total / Semeru's mutator alone", "x", 1, 0, 0},
    {"semeru_g1_vs_stw_total_*pct/*", "parity: stop the world / G1-like", "x", 1, 0, 0},
    {"semeru_gc_time_25pct", "parity: stop the world / Semeru", "x", 1, 0, 0},
    {"semeru_total_25pct", "parity: stop the world / Semeru", "x", 1, 0, 0},
    /* GC traffic summed over the workloads */
    {"semeru_gc_traffic_bytes_*pct/*", "G1-like, summed over the workloads", "B", 0, 0, 0},
    {"semeru_gc_traffic_bytes_vs_stw_*pct/*", "stop the world, summed over the workloads", "B", 0, 0, 0},
    /* Table 3's view: each collector at 50% and 25% cache over its own 100% */
    {"semeru_table3_*_gc_*pct/*", "its own time at 100% cache", "x", 0, 0, 0},
    {"semeru_table3_*_total_*pct/*", "its own time at 100% cache", "x", 0, 0, 0},
    /* the share of the G1-like concurrent markings that ended which the
     * marker finished before a pause had to */
    {"semeru_g1_marks_finished/*", "G1-like concurrent markings ended (target: 90% finished)", "%", 1, 0, 0},
    /* Table 5: tracing throughput at 25% over tcp, graph */
    {"semeru_trace_mbps_tcp_25pct", "CPU marking pulling pages", "MB/s", 1, 0, 0},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

int main(int argc, char **argv)
{
    const char *tiny = NULL, *delay = NULL;
    const dsm_bench_flag_t flags[] = {{"--tiny", NULL, &tiny}, {"--fetch-delay-us", "N", &delay}};
    dsm_bench_opts_t o;
    int done = dsm_bench_parse(argc, argv, cases, N_CASES, flags, sizeof flags / sizeof flags[0], &o);
    if (done >= 0)
        return done;
    /* --only takes a workload's name (graph, temps, buffers). */
    const char *json = o.json, *only = o.only;
    const char *only_transport = o.transport_set ? dsm_transport_name(o.transport) : NULL;
    quick = tiny ? 2 : o.quick ? 1 : 0;
    if (delay)
        fetch_delay_us = (uint32_t)strtoul(delay, NULL, 10);
    int reps = o.runs;   /* 0: 5, or 3 in quick mode (the demo's time budget) */
    dsm_set_log_level(1);
    if (reps == 0)
        reps = quick ? 3 : 5;
    if (reps < 1 || reps > MAXREP || (only_transport && strcmp(only_transport, "shm") && strcmp(only_transport, "tcp"))) {
        fprintf(stderr, "--runs takes 1..%d, --transport shm or tcp\n", MAXREP);
        return 2;
    }
    if (only && strcmp(only, "graph") && strcmp(only, "temps") && strcmp(only, "buffers")) {
        fprintf(stderr, "--only takes a workload: graph, temps or buffers\n");
        return 2;
    }
    uint64_t heap = quick == 2 ? (4u << 20) : quick ? (8u << 20) : (16u << 20);
    dsm_report_t rep;
    dsm_report_init(&rep, "semeru");
    dsm_report_print_header(stdout);
    static const uint32_t pcts[] = {100, 50, 25};
    static const char *const fname[] = {"gc_s", "total_s", "gc_traffic_bytes", "mutator_s", "pages_fetched",
                                        "pause_ms", "full_gcs"};
    static const char *const funit[] = {"s", "s", "B", "s", "pages", "ms", "n"};
    const char *shm_note = " [shm: no network: remote memory is a local mapping]";
    static cell_t cells[2][3][3];   /* transport, cache, workload */
    int nwl = 0, wls[3];
    for (int wl = 0; wl < 3; wl++)
        if (!only || !strcmp(only, dsm_semeru_wl_name(wl)))
            wls[nwl++] = wl;
    double marks[2][2] = {{0}};   /* per transport: G1 markings ended, finished by the marker */
    for (int tr = 0; tr < 2; tr++) {
        dsm_transport_t t = tr ? DSM_TRANSPORT_TCP : DSM_TRANSPORT_SHM;
        if (only_transport && strcmp(only_transport, dsm_transport_name(t)) != 0)
            continue;
        const char *tn = dsm_transport_name(t);
        char tn_delayed[32], note[160];
        snprintf(note, sizeof note, "%s", tr ? "" : shm_note);
        if (fetch_delay_us) {
            snprintf(tn_delayed, sizeof tn_delayed, "%s+%uus", tn, fetch_delay_us);
            tn = tn_delayed;
            snprintf(note + strlen(note), sizeof note - strlen(note),
                     " [+%u us on every page fetch: a slower device]", fetch_delay_us);
        }
        dsm_harness_t c;
        if (cluster_start(&c, t, heap / 2 + (8u << 20)) != 0) {
            fprintf(stderr, "cannot start the cluster\n");
            return 1;
        }
        double rtt_us = round_trip_us(&c);
        dsm_report_env(&rep, tr ? "round_trip_us_tcp" : "round_trip_us_shm", "%.2f", rtt_us);
        for (int p = 0; p < 3; p++) {
            /* The headline cells (tcp, 50% and 25%) get every run; the
             * others fewer in quick mode (what each is, the JSON says). */
            int n = tr == 1 && pcts[p] < 100 ? reps : quick ? 1 : (reps < 3 ? reps : 3);
            for (int x = 0; x < nwl; x++) {
                int wl = wls[x];
                cell_t *ce = &cells[tr][p][x];
                ce->n = n;
                /* Rotating order: each collector goes first, second and
                 * third in turn. */
                for (int k = 0; k < n; k++)
                    for (int q = 0; q < NCOLL; q++) {
                        int co = (k + q) % NCOLL;
                        ce->r[co][k] = run(&c, wl, pcts[p], coll_msct[co], co != STW, 0, heap);
                        if (co == G1) {
                            marks[tr][0] += ce->r[co][k].marks_started;
                            marks[tr][1] += ce->r[co][k].marks_finished;
                        }
                    }
                const char *wn = dsm_semeru_wl_name(wl);
                char name[96], anchor[256];
                phase_table(&rep, ce, wn, tn, pcts[p]);
                for (int f = 0; f < 7; f++) {
                    snprintf(anchor, sizeof anchor, "stop-the-world baseline %s%s", wn, note);
                    snprintf(name, sizeof name, "semeru_%s_%s_%upct_%s", wn, tn, pcts[p], fname[f]);
                    cell_fig(&rep, ce, name, SEM, STW, f, funit[f], anchor);
                }
                for (int f = 0; f < 3; f++) {
                    snprintf(anchor, sizeof anchor, "semeru %s%s", wn, note);
                    snprintf(name, sizeof name, "semeru_%s_%s_%upct_g1_%s", wn, tn, pcts[p], fname[f]);
                    cell_fig(&rep, ce, name, G1, SEM, f, funit[f], anchor);
                }
                snprintf(anchor, sizeof anchor, "semeru %s%s", wn, note);
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_g1_full_gcs", wn, tn, pcts[p]);
                cell_fig(&rep, ce, name, G1, SEM, 6, "n", anchor);
                snprintf(anchor, sizeof anchor, "stop-the-world baseline %s%s", wn, note);
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_g1_vs_stw_total_s", wn, tn, pcts[p]);
                cell_fig(&rep, ce, name, G1, STW, 1, "s", anchor);
                {
                    double rt[MAXREP], gs[MAXREP];
                    double pred = cell_med(ce, SEM, 7, rt) * rtt_us / 1e6, meas = cell_med(ce, SEM, 0, gs);
                    snprintf(anchor, sizeof anchor, "semeru GC time measured %s (%.0f round trips x %.1f us)%s", wn,
                             cell_med(ce, SEM, 7, rt), rtt_us, note);
                    snprintf(name, sizeof name, "semeru_%s_%s_%upct_gc_predicted_s", wn, tn, pcts[p]);
                    dsm_report_print_figure(stdout, dsm_report_add(&rep, name, pred, "s", anchor, meas, 0));
                }
                if (tr == 1 && pcts[p] == 25) {
                    /* The ablation: no continuous tracing (every region traced in the pause). */
                    result_t ab = run(&c, wl, pcts[p], 1, 0, 0, heap);
                    double sg[MAXREP];
                    snprintf(name, sizeof name, "semeru_%s_%s_%upct_no_msct_gc_s", wn, tn, pcts[p]);
                    snprintf(anchor, sizeof anchor, "semeru %s", wn);
                    dsm_report_print_figure(stdout, dsm_report_add(&rep, name, ab.gc_s, "s", anchor,
                                                                   cell_med(ce, SEM, 0, sg), 0));
                    snprintf(name, sizeof name, "semeru_%s_%s_%upct_no_msct_mutator_s", wn, tn, pcts[p]);
                    dsm_report_print_figure(stdout, dsm_report_add(&rep, name, ab.total_s - ab.gc_s, "s", anchor,
                                                                   cell_med(ce, SEM, 3, sg), 0));
                }
            }
            if (nwl == 0)
                continue;
            /* Every cell's ratios over the workloads, Semeru against G1
             * (the headline at tcp 50/25%) and against stop the world. */
            char name[96], anchor[256], unquotable[128] = "";
            cell_t *row = cells[tr][p];
            /* A G1-like baseline slower in total than the stop-the-world
             * collector it should improve on makes every figure against
             * it unquotable in this cell: their anchors say so. */
            double per[MAXREP];
            int nper;
            double g1_vs_stw = ratio_geo(row, nwl, G1, 1, STW, 1, per, &nper);
            if (g1_vs_stw < 1)
                snprintf(unquotable, sizeof unquotable,
                         " [not to be quoted: the G1-like is slower than stop the world here, %.2fx]",
                         g1_vs_stw);
            snprintf(anchor, sizeof anchor, "parity: G1-like / Semeru%s%s", note, unquotable);
            snprintf(name, sizeof name, "semeru_total_vs_g1_%upct/%s", pcts[p], tn);
            ratio_fig(&rep, row, nwl, name, SEM, 1, G1, 1, anchor);
            snprintf(name, sizeof name, "semeru_gc_time_vs_g1_%upct/%s", pcts[p], tn);
            ratio_fig(&rep, row, nwl, name, SEM, 0, G1, 0, anchor);
            /* The most Semeru could gain in total on these workloads: G1's
             * total over Semeru's mutator time alone, as if its GC cost
             * nothing. */
            snprintf(anchor, sizeof anchor, "parity: G1-like total / Semeru's mutator alone%s%s", note, unquotable);
            snprintf(name, sizeof name, "semeru_total_vs_g1_gc_free_bound_%upct/%s", pcts[p], tn);
            ratio_fig(&rep, row, nwl, name, SEM, 3, G1, 1, anchor);
            snprintf(anchor, sizeof anchor, "parity: stop the world / G1-like%s", note);
            snprintf(name, sizeof name, "semeru_g1_vs_stw_total_%upct/%s", pcts[p], tn);
            ratio_fig(&rep, row, nwl, name, G1, 1, STW, 1, anchor);
            if (tr == 1 && pcts[p] == 25 && !fetch_delay_us) {   /* the second anchor, as before: stop the world */
                ratio_fig(&rep, row, nwl, "semeru_gc_time_25pct", SEM, 0, STW, 0, "parity: stop the world / Semeru");
                ratio_fig(&rep, row, nwl, "semeru_total_25pct", SEM, 1, STW, 1, "parity: stop the world / Semeru");
            }
            /* GC traffic: per workload above; here the sum over workloads
             * (no ratio of ratios: a near-zero denominator would rule it). */
            double sum[NCOLL] = {0}, v[MAXREP];
            for (int co = 0; co < NCOLL; co++)
                for (int x = 0; x < nwl; x++)
                    sum[co] += cell_med(&row[x], co, 2, v);
            snprintf(anchor, sizeof anchor, "G1-like, summed over the workloads%s", note);
            snprintf(name, sizeof name, "semeru_gc_traffic_bytes_%upct/%s", pcts[p], tn);
            dsm_report_print_figure(stdout, dsm_report_add(&rep, name, sum[SEM], "B", anchor, sum[G1], 0));
            snprintf(anchor, sizeof anchor, "stop the world, summed over the workloads%s", note);
            snprintf(name, sizeof name, "semeru_gc_traffic_bytes_vs_stw_%upct/%s", pcts[p], tn);
            dsm_report_print_figure(stdout, dsm_report_add(&rep, name, sum[SEM], "B", anchor, sum[STW], 0));
        }
        /* Table 3's view: each collector's time at 50% and 25% cache over
         * its own at 100% (geometric mean over the workloads of the
         * ratios of medians; lower is better). */
        for (int co = 0; co < NCOLL && nwl > 0; co++)
            for (int p = 1; p < 3; p++)
                for (int f = 0; f < 2; f++) {
                    double rr[3], v[MAXREP];
                    for (int x = 0; x < nwl; x++) {
                        double base = cell_med(&cells[tr][0][x], co, f, v);
                        rr[x] = base > 0 ? cell_med(&cells[tr][p][x], co, f, v) / base : 0;
                    }
                    char name[96], anchor[256];
                    snprintf(name, sizeof name, "semeru_table3_%s_%s_%upct/%s", coll_name[co], f ? "total" : "gc",
                             pcts[p], tn);
                    snprintf(anchor, sizeof anchor, "its own time at 100%% cache%s", note);
                    dsm_report_print_figure(stdout, dsm_report_add(&rep, name, geo(rr, nwl), "x", anchor, 1, 0));
                }
        if (marks[tr][0] > 0) {
            char name[96], anchor[256];
            snprintf(name, sizeof name, "semeru_g1_marks_finished/%s", tn);
            snprintf(anchor, sizeof anchor, "G1-like concurrent markings ended (%.0f; target: 90%% finished)%s",
                     marks[tr][0], note);
            dsm_report_print_figure(stdout, dsm_report_add(&rep, name, 100.0 * marks[tr][1] / marks[tr][0], "%",
                                                           anchor, 100, 1));
        }
        if (tr == 1 && (!only || !strcmp(only, "graph")) && !fetch_delay_us) {
            double sm[MAXREP], bm[MAXREP];
            for (int k = 0; k < reps; k++) {   /* which runs first alternates */
                if (k % 2) bm[k] = run(&c, 0, 25, 0, 0, 1, heap).trace_mbps;
                sm[k] = run(&c, 0, 25, 1, 0, 1, heap).trace_mbps;
                if (!(k % 2)) bm[k] = run(&c, 0, 25, 0, 0, 1, heap).trace_mbps;
            }
            const dsm_figure_t *f = dsm_report_add(&rep, "semeru_trace_mbps_tcp_25pct",
                                                   dsm_report_median(sm, (size_t)reps), "MB/s",
                                                   "CPU marking pulling pages", dsm_report_median(bm, (size_t)reps), 1);
            dsm_report_reps(&rep, f, sm, bm, (size_t)reps);
            dsm_report_print_figure(stdout, f);
        }
        cluster_stop(&c);
    }
    int nw = nwl;
    dsm_report_env(&rep, "headline_workloads", "%d", nw);
    dsm_report_env(&rep, "quick", "%s", quick ? "true" : "false");
    dsm_report_env(&rep, "tiny", "%s", quick == 2 ? "true" : "false");
    dsm_report_env(&rep, "heap_bytes", "%llu", (unsigned long long)heap);
    dsm_report_env(&rep, "runs_headline", "%d", reps);
    dsm_report_env(&rep, "fetch_delay_us", "%u", fetch_delay_us);
    dsm_report_env(&rep, "cpus", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    int rc = json && dsm_report_write_json(&rep, json) != 0 ? 1 : 0;
    dsm_report_free(&rep);
    return rc;
}
