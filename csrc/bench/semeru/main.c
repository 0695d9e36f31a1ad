/* dsm-bench-semeru: the managed heap (Semeru) in miniature, 1 CPU server +
 * 2 memory servers in this process, each figure beside its anchor measured
 * in the same run: the Semeru design (tracing and compaction on the memory
 * servers, CSSC) against the CPU-only baseline (the same heap, allocator,
 * barriers, cache and LRU, collected by full GCs on the CPU server pulling
 * pages), at 100/50/25% cache, on three workloads shaped like the paper's:
 *   graph    a Kronecker (R-MAT) graph kept across PageRank-like iterations,
 *            each iteration replacing every vertex's rank object;
 *   temps    temporaries-heavy: chains of short-lived objects, a few promoted;
 *   buffers  serialized buffers: large byte objects written then parsed into
 *            small ones, a window of recent ones kept.
 * Reported per (workload, cache): GC time, bytes over the fabric during GC,
 * total time, the longest pause and full-GC counts; at 25% over tcp also the
 * ablation without continuous tracing (every region traced in the pause),
 * the G1-like baseline (a CPU thread marks concurrently pulling pages, the
 * pauses evacuate region by region on the CPU server; its ratios to Semeru
 * are semeru_gc_time_vs_g1_25pct and semeru_total_vs_g1_25pct, the same
 * geometric mean of medians) and Table 5's tracing throughput (memory servers tracing an evicted graph
 * vs the CPU server marking it through its cache, pulling its pages). Headline ratios at 25%
 * over tcp: the geometric mean over workloads of medians of 3 interleaved
 * runs. --fetch-delay-us N adds N µs to every page fetch (both designs), to
 * stand in for a slower device than this machine's loopback. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apps/semeru_wl.h"
#include "bench/report.h"
#include "dsm/dsm.h"
#include "util/clock.h"

#define SECRET "semeru-bench"

static int quick;   /* 1 --quick, 2 --tiny (notebooks: a few seconds a run) */
static uint32_t fetch_delay_us;

typedef struct cluster {
    dsm_coord_t *coord;
    dsm_node_t *nodes[3];
} cluster_t;

static int cluster_start(cluster_t *c, dsm_transport_t tr, uint64_t part)
{
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = SECRET, .peer_timeout_ms = 5000, .transport = tr};
    if (dsm_coord_start(&cc, &c->coord) != DSM_OK)
        return -1;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", dsm_coord_port(c->coord));
    for (int i = 0; i < 3; i++) {
        dsm_node_config_t cfg;
        dsm_node_config_init(&cfg);
        cfg.coordinator = addr;
        cfg.secret = SECRET;
        cfg.rank = i;
        cfg.transport = tr;
        cfg.net_device = tr == DSM_TRANSPORT_TCP ? "lo" : NULL;
        cfg.partition_size = i == 0 ? 0 : part;
        cfg.peer_timeout_ms = 10000;
        cfg.op_timeout_ms = 30000;
        if (dsm_start(&cfg, &c->nodes[i]) != DSM_OK)
            return -1;
    }
    return dsm_node_wait_daemons(c->nodes[0], 3, 10000) == DSM_OK ? 0 : -1;
}

static void cluster_stop(cluster_t *c)
{
    for (int i = 0; i < 3; i++)
        dsm_node_destroy(c->nodes[i]);
    dsm_coord_stop(c->coord);
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
    double gc_bytes, bytes, full, cssc, traced, trace_mbps;
} result_t;

/* msct 1: Semeru (msct_auto 0: the ablation); 0: the full-GC baseline; 2:
 * the G1-like baseline (CPU concurrent marking, CPU evacuation pauses). */
static result_t run(cluster_t *c, int wl, uint32_t pct, int msct, int msct_auto, int probe, uint64_t heap)
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
    double total = o.work_s, mbps = o.trace_mbps;
    result_t r = {.total_s = total, .gc_s = (double)s->gc_ns / 1e9, .pause_ms = (double)s->pause_max_ns / 1e6,
                  .pages = (double)s->pages_fetched, .gc_bytes = (double)s->fabric_bytes_gc,
                  .bytes = (double)s->fabric_bytes, .full = (double)s->full_gc_count, .cssc = (double)s->cssc_count,
                  .traced = (double)s->bytes_traced_server, .trace_mbps = mbps};
    return r;
}

/* The geometric mean of the ratios of the workloads that ran (> 0); *n
 * of them. */
static double geomean(const double *ratio, int *n)
{
    double p = 1;
    *n = 0;
    for (int wl = 0; wl < 3; wl++)
        if (ratio[wl] > 0) {
            p *= ratio[wl];
            (*n)++;
        }
    return *n ? pow(p, 1.0 / *n) : 0;
}

int main(int argc, char **argv)
{
    const char *json = NULL, *only = NULL, *only_transport = NULL;
    int reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = quick > 1 ? quick : 1;
        else if (!strcmp(argv[i], "--tiny"))
            quick = 2;
        else if (!strcmp(argv[i], "--transport") && i + 1 < argc)
            only_transport = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--fetch-delay-us") && i + 1 < argc)
            fetch_delay_us = (uint32_t)strtoul(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--quick|--tiny] [--json PATH] [--only graph|temps|buffers] [--transport shm|tcp] "
                            "[--reps N (1..8)] [--fetch-delay-us N]\n", argv[0]);
            return 2;
        }
    }
    dsm_set_log_level(1);
    if (reps < 1 || reps > 8 || (only_transport && strcmp(only_transport, "shm") && strcmp(only_transport, "tcp"))) {
        fprintf(stderr, "--reps takes 1..8, --transport shm or tcp\n");
        return 2;
    }
    uint64_t heap = quick == 2 ? (4u << 20) : quick ? (8u << 20) : (16u << 20);
    dsm_report_t rep;
    dsm_report_init(&rep, "semeru");
    dsm_report_print_header(stdout);
    static const uint32_t pcts[] = {100, 50, 25};
    /* Headline (tcp, 25% cache): medians over interleaved runs of all three
     * workloads, Semeru then baseline, as ratios summed over workloads. */
    double gc_ratio[8] = {0}, bytes_ratio[8] = {0}, total_ratio[8] = {0}, g1_gc_ratio[8] = {0},
           g1_total_ratio[8] = {0};
    for (int tr = 0; tr < 2; tr++) {
        dsm_transport_t t = tr ? DSM_TRANSPORT_TCP : DSM_TRANSPORT_SHM;
        if (only_transport && strcmp(only_transport, dsm_transport_name(t)) != 0)
            continue;
        cluster_t c;
        if (cluster_start(&c, t, heap / 2 + (8u << 20)) != 0) {
            fprintf(stderr, "cannot start the cluster\n");
            return 1;
        }
        for (int p = 0; p < 3; p++) {
            int n = (tr == 1 && pcts[p] == 25) ? reps : 1;
            for (int wl = 0; wl < 3; wl++) {
                if (only && strcmp(only, dsm_semeru_wl_name(wl)) != 0)
                    continue;
                double gs[8], gb[8], tt[8], g1g[8], g1t[8];
                int headline = tr == 1 && pcts[p] == 25;
                result_t s = {0}, b = {0}, g = {0};
                for (int k = 0; k < n; k++) {
                    s = run(&c, wl, pcts[p], 1, 1, 0, heap);
                    b = run(&c, wl, pcts[p], 0, 0, 0, heap);
                    if (headline)   /* the G1-like baseline, interleaved */
                        g = run(&c, wl, pcts[p], 2, 1, 0, heap);
                    gs[k] = b.gc_s > 0 && s.gc_s > 0 ? b.gc_s / s.gc_s : 0;
                    gb[k] = b.gc_bytes > 0 && s.gc_bytes > 0 ? b.gc_bytes / s.gc_bytes : 0;
                    tt[k] = b.total_s / s.total_s;
                    g1g[k] = g.gc_s > 0 && s.gc_s > 0 ? g.gc_s / s.gc_s : 0;
                    g1t[k] = g.total_s / s.total_s;
                }
                char name[96], anchor[64];
                const char *tn = dsm_transport_name(t);
                snprintf(anchor, sizeof anchor, "baseline %s", dsm_semeru_wl_name(wl));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_gc_s", dsm_semeru_wl_name(wl), tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.gc_s, "s", anchor, b.gc_s, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_gc_bytes", dsm_semeru_wl_name(wl), tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.gc_bytes, "B", anchor, b.gc_bytes, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_total_s", dsm_semeru_wl_name(wl), tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.total_s, "s", anchor, b.total_s, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_mutator_s", dsm_semeru_wl_name(wl), tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.total_s - s.gc_s, "s", anchor,
                                                               b.total_s - b.gc_s, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_pages_fetched", dsm_semeru_wl_name(wl), tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.pages, "pages", anchor, b.pages, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_pause_ms", dsm_semeru_wl_name(wl), tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.pause_ms, "ms", anchor, b.pause_ms, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_full_gcs", dsm_semeru_wl_name(wl), tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.full, "n", anchor, b.full, 0));
                if (headline) {
                    /* The ablation: no continuous tracing (every region traced in the pause). */
                    result_t a = run(&c, wl, pcts[p], 1, 0, 0, heap);
                    snprintf(name, sizeof name, "semeru_%s_%s_%upct_no_msct_gc_s", dsm_semeru_wl_name(wl), tn, pcts[p]);
                    snprintf(anchor, sizeof anchor, "semeru %s", dsm_semeru_wl_name(wl));
                    dsm_report_print_figure(stdout, dsm_report_add(&rep, name, a.gc_s, "s", anchor, s.gc_s, 0));
                    /* The G1-like baseline (last repetition), against Semeru. */
                    static const char *const what[] = {"gc_s", "gc_bytes", "total_s", "full_gcs"};
                    const double gv[] = {g.gc_s, g.gc_bytes, g.total_s, g.full},
                                 sv[] = {s.gc_s, s.gc_bytes, s.total_s, s.full};
                    static const char *const units[] = {"s", "B", "s", "n"};
                    for (int q = 0; q < 4; q++) {
                        snprintf(name, sizeof name, "semeru_%s_%s_%upct_g1_%s", dsm_semeru_wl_name(wl), tn, pcts[p],
                                 what[q]);
                        dsm_report_print_figure(stdout, dsm_report_add(&rep, name, gv[q], units[q], anchor, sv[q], 0));
                    }
                    g1_gc_ratio[wl] = dsm_report_median(g1g, (size_t)n);
                    g1_total_ratio[wl] = dsm_report_median(g1t, (size_t)n);
                }
                if (tr == 1 && pcts[p] == 25) {   /* the headline cell */
                    double g = dsm_report_median(gs, (size_t)n), y = dsm_report_median(gb, (size_t)n),
                           z = dsm_report_median(tt, (size_t)n);
                    gc_ratio[wl] = g;
                    bytes_ratio[wl] = y;
                    total_ratio[wl] = z;
                }
            }
        }
        if (tr == 1 && (!only || !strcmp(only, "graph"))) {
            double sm[8], bm[8];
            for (int k = 0; k < reps; k++) {
                sm[k] = run(&c, 0, 25, 1, 0, 1, heap).trace_mbps;
                bm[k] = run(&c, 0, 25, 0, 0, 1, heap).trace_mbps;
            }
            dsm_report_print_figure(stdout, dsm_report_add(&rep, "semeru_trace_mbps_tcp_25pct",
                                                           dsm_report_median(sm, (size_t)reps), "MB/s",
                                                           "CPU marking pulling pages",
                                                           dsm_report_median(bm, (size_t)reps), 1));
        }
        cluster_stop(&c);
    }
    /* Headlines: the geometric mean over workloads of the median ratios
     * (baseline / Semeru, higher is better), anchored at 1 (parity); the
     * same against the G1-like baseline (CPU concurrent marking). */
    int nw = 0, ng = 0;
    const struct {
        const char *name;
        const double *ratios;
        int *n;
    } heads[] = {
        {"semeru_gc_time_25pct", gc_ratio, &nw},           {"semeru_gc_bytes_25pct", bytes_ratio, &nw},
        {"semeru_total_25pct", total_ratio, &nw},          {"semeru_gc_time_vs_g1_25pct", g1_gc_ratio, &ng},
        {"semeru_total_vs_g1_25pct", g1_total_ratio, &ng},
    };
    for (size_t k = 0; k < sizeof heads / sizeof heads[0]; k++) {
        double v = geomean(heads[k].ratios, heads[k].n);
        if (*heads[k].n > 0)   /* else not run (--only, --transport shm) */
            dsm_report_print_figure(stdout, dsm_report_add(&rep, heads[k].name, v, "x", "parity", 1, 1));
    }
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
