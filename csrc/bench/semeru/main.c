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
 * ablation without continuous tracing (every region traced in the pause)
 * and Table 5's tracing throughput (memory servers tracing an evicted graph
 * vs the CPU server's full GC pulling its pages). Headline ratios at 25%
 * over tcp: the geometric mean over workloads of medians of 3 interleaved
 * runs. --fetch-delay-us N adds N µs to every page fetch (both designs), to
 * stand in for a slower device than this machine's loopback. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/report.h"
#include "dsm/dsm.h"
#include "util/clock.h"

#define SECRET "semeru-bench"

static int quick;
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

/* ---- types ---------------------------------------------------------------- */

enum { T_VERTEX, T_EDGE, T_RANK, T_TEMP, T_BUF, T_REC, NTYPES };
static const uint32_t vertex_refs[] = {0, 8}, edge_refs[] = {0, 8}, temp_refs[] = {0}, rec_refs[] = {0};
static const dsm_mheap_type_t types[NTYPES] = {
    [T_VERTEX] = {.size = 32, .nrefs = 2, .ref_offsets = vertex_refs},   /* edges, rank, u64 id, double acc */
    [T_EDGE] = {.size = 16, .nrefs = 2, .ref_offsets = edge_refs},       /* next, dst */
    [T_RANK] = {.size = 504, .nrefs = 0, .ref_offsets = NULL},           /* double rank, history */
    [T_TEMP] = {.size = 120, .nrefs = 1, .ref_offsets = temp_refs},      /* next, bytes */
    [T_BUF] = {.size = 16384, .nrefs = 0, .ref_offsets = NULL},          /* a serialized batch */
    [T_REC] = {.size = 40, .nrefs = 1, .ref_offsets = rec_refs},         /* next, fields */
};

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#define CK(x)                                                                                                  \
    do {                                                                                                       \
        dsm_status_t st_ = (x);                                                                                \
        if (st_ != DSM_OK) {                                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, dsm_strerror(st_));                     \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

/* ---- workloads ------------------------------------------------------------ */

/* Table 5 in miniature: tracing throughput over the graph once its pages
 * are all evicted: a round of memory-server traces (Semeru), or the CPU
 * server's full GC pulling the pages (the baseline). MB/s of live objects. */
static double probe_trace(dsm_mheap_t *h, int msct)
{
    dsm_mheap_stats_t a, b;
    CK(dsm_mheap_collect(h, DSM_MHEAP_GC_AUTO));   /* roots for the servers' traces */
    CK(dsm_mheap_trace_wait(h));
    CK(dsm_mheap_evict(h, 0));
    dsm_mheap_stats(h, &a);
    uint64_t t0 = dsm_now_ns();
    if (msct) {
        CK(dsm_mheap_trace_start(h));
        CK(dsm_mheap_trace_wait(h));
    } else {
        CK(dsm_mheap_collect(h, DSM_MHEAP_GC_FULL));
    }
    double dt = (double)(dsm_now_ns() - t0) / 1e9;
    dsm_mheap_stats(h, &b);
    double bytes = msct ? (double)(b.bytes_traced_server - a.bytes_traced_server) : (double)b.used_bytes;
    return dt > 0 ? bytes / dt / 1e6 : 0;
}

static void wl_graph(dsm_mheap_t *h, uint32_t scale, int msct, double *probe)
{
    uint32_t nv = 1u << scale, ne = nv * 6;
    dsm_mheap_handle_t *v = malloc(nv * sizeof *v), e, t, r;
    CK(dsm_mheap_handle_new(h, &e));
    CK(dsm_mheap_handle_new(h, &t));
    CK(dsm_mheap_handle_new(h, &r));
    for (uint32_t i = 0; i < nv; i++) {
        CK(dsm_mheap_handle_new(h, &v[i]));
        CK(dsm_mheap_alloc(h, T_VERTEX, v[i]));
        uint64_t id = i;
        CK(dsm_mheap_write(h, v[i], 16, &id, 8));
    }
    uint64_t s = 1;
    for (uint32_t k = 0; k < ne; k++) {   /* R-MAT (0.57, 0.19, 0.19, 0.05) */
        uint32_t a = 0, b = 0;
        for (uint32_t bit = 0; bit < scale; bit++) {
            uint64_t p = rng_next(&s) % 100;
            a = a << 1 | (p >= 76);
            b = b << 1 | (p >= 57 && p < 76) | (p >= 95);
        }
        CK(dsm_mheap_alloc(h, T_EDGE, e));
        CK(dsm_mheap_load_ref(h, v[a], 0, t));
        CK(dsm_mheap_store_ref(h, e, 0, t));
        CK(dsm_mheap_store_ref(h, e, 8, v[b]));
        CK(dsm_mheap_store_ref(h, v[a], 0, e));
    }
    int iters = quick ? 5 : 8;
    for (int it = 0; it < iters; it++) {
        for (uint32_t i = 0; i < nv; i++) {   /* push rank along out-edges */
            double acc = 0;
            CK(dsm_mheap_load_ref(h, v[i], 8, r));
            if (dsm_mheap_addr(h, r))
                CK(dsm_mheap_read(h, r, 0, &acc, 8));
            CK(dsm_mheap_load_ref(h, v[i], 0, e));
            while (dsm_mheap_addr(h, e)) {
                CK(dsm_mheap_load_ref(h, e, 8, t));
                double d;
                CK(dsm_mheap_read(h, t, 24, &d, 8));
                d += acc / 6 + 1e-3;
                CK(dsm_mheap_write(h, t, 24, &d, 8));
                CK(dsm_mheap_load_ref(h, e, 0, e));
            }
        }
        for (uint32_t i = 0; i < nv; i++) {   /* every vertex gets a new rank object */
            double d;
            CK(dsm_mheap_read(h, v[i], 24, &d, 8));
            CK(dsm_mheap_alloc(h, T_RANK, r));
            CK(dsm_mheap_write(h, r, 0, &d, 8));
            CK(dsm_mheap_store_ref(h, v[i], 8, r));
            d = 0;
            CK(dsm_mheap_write(h, v[i], 24, &d, 8));
        }
    }
    if (probe)
        *probe = probe_trace(h, msct);
    for (uint32_t i = 0; i < nv; i++)
        dsm_mheap_handle_free(h, v[i]);
    free(v);
}

static void wl_temps(dsm_mheap_t *h, uint32_t ops)
{
    enum { KEEP = 2048 };
    dsm_mheap_handle_t keep[KEEP], a, b;
    for (int i = 0; i < KEEP; i++)
        CK(dsm_mheap_handle_new(h, &keep[i]));
    CK(dsm_mheap_handle_new(h, &a));
    CK(dsm_mheap_handle_new(h, &b));
    uint64_t s = 2;
    uint8_t bytes[112];
    memset(bytes, 7, sizeof bytes);
    for (uint32_t op = 0; op < ops; op++) {
        uint32_t len = 4 + (uint32_t)(rng_next(&s) % 12);
        CK(dsm_mheap_handle_set(h, a, 0));
        for (uint32_t k = 0; k < len; k++) {   /* a chain of temporaries */
            CK(dsm_mheap_alloc(h, T_TEMP, b));
            CK(dsm_mheap_write(h, b, 8, bytes, sizeof bytes));
            CK(dsm_mheap_store_ref(h, b, 0, a));
            CK(dsm_mheap_handle_set(h, a, b));
        }
        if (rng_next(&s) % 4 == 0)   /* a few survive, replacing old survivors */
            CK(dsm_mheap_handle_set(h, keep[rng_next(&s) % KEEP], a));
    }
    for (int i = 0; i < KEEP; i++)
        dsm_mheap_handle_free(h, keep[i]);
}

static void wl_buffers(dsm_mheap_t *h, uint32_t nbuf)
{
    enum { WINDOW = 160 };
    dsm_mheap_handle_t win[WINDOW], recs[WINDOW], b, r;
    for (int i = 0; i < WINDOW; i++) {
        CK(dsm_mheap_handle_new(h, &win[i]));
        CK(dsm_mheap_handle_new(h, &recs[i]));
    }
    CK(dsm_mheap_handle_new(h, &b));
    CK(dsm_mheap_handle_new(h, &r));
    static uint8_t buf[16384];
    for (uint32_t n = 0; n < nbuf; n++) {
        for (size_t k = 0; k < sizeof buf; k++)
            buf[k] = (uint8_t)(n + k);
        CK(dsm_mheap_alloc(h, T_BUF, b));        /* serialize */
        CK(dsm_mheap_write(h, b, 0, buf, sizeof buf));
        CK(dsm_mheap_handle_set(h, win[n % WINDOW], b));
        CK(dsm_mheap_handle_set(h, recs[n % WINDOW], 0));
        for (int k = 0; k < 64; k++) {           /* deserialize some records */
            CK(dsm_mheap_read(h, b, (uint32_t)k * 256, buf, 32));
            CK(dsm_mheap_alloc(h, T_REC, r));
            CK(dsm_mheap_write(h, r, 8, buf, 32));
            CK(dsm_mheap_store_ref(h, r, 0, recs[n % WINDOW]));
            CK(dsm_mheap_handle_set(h, recs[n % WINDOW], r));
        }
    }
    for (int i = 0; i < WINDOW; i++) {
        dsm_mheap_handle_free(h, win[i]);
        dsm_mheap_handle_free(h, recs[i]);
    }
}

/* ---- one run ----------------------------------------------------------------- */

typedef struct result {
    double total_s, gc_s, pause_ms;
    double gc_bytes, bytes, full, cssc, traced, trace_mbps;
} result_t;

static const char *wl_names[] = {"graph", "temps", "buffers"};

static result_t run(cluster_t *c, int wl, uint32_t pct, int msct, int msct_auto, int probe, uint64_t heap)
{
    static const uint32_t servers[] = {1, 2};
    dsm_mheap_config_t cfg;
    dsm_mheap_config_init(&cfg);
    cfg.memory_servers = servers;
    cfg.nservers = 2;
    cfg.heap_bytes = heap;
    cfg.cache_percent = pct;
    cfg.types = types;
    cfg.ntypes = NTYPES;
    cfg.msct = msct;
    cfg.msct_auto = msct_auto;
    cfg.handles = 1u << 16;
    cfg.fetch_delay_us = fetch_delay_us;
    dsm_mheap_t *h;
    CK(dsm_mheap_create(c->nodes[0], &cfg, &h));
    uint64_t t0 = dsm_now_ns();
    double mbps = 0;
    if (wl == 0)
        wl_graph(h, quick ? 12 : 13, msct, probe ? &mbps : NULL);
    else if (wl == 1)
        wl_temps(h, quick ? 20000 : 50000);
    else
        wl_buffers(h, quick ? 800 : 2000);
    double total = (double)(dsm_now_ns() - t0) / 1e9;
    dsm_mheap_stats_t st;
    dsm_mheap_stats(h, &st);
    dsm_mheap_destroy(h);
    result_t r = {.total_s = total, .gc_s = (double)st.gc_ns / 1e9, .pause_ms = (double)st.pause_max_ns / 1e6,
                  .gc_bytes = (double)st.fabric_bytes_gc, .bytes = (double)st.fabric_bytes,
                  .full = (double)st.full_gc_count, .cssc = (double)st.cssc_count,
                  .traced = (double)st.bytes_traced_server, .trace_mbps = mbps};
    return r;
}

int main(int argc, char **argv)
{
    const char *json = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--fetch-delay-us") && i + 1 < argc)
            fetch_delay_us = (uint32_t)strtoul(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--quick] [--json PATH] [--only graph|temps|buffers] [--fetch-delay-us N]\n", argv[0]);
            return 2;
        }
    }
    dsm_set_log_level(1);
    uint64_t heap = quick ? (8u << 20) : (16u << 20);
    dsm_report_t rep;
    dsm_report_init(&rep, "semeru");
    dsm_report_print_header(stdout);
    static const uint32_t pcts[] = {100, 50, 25};
    int reps = 3;
    /* Headline (tcp, 25% cache): medians over interleaved runs of all three
     * workloads, Semeru then baseline, as ratios summed over workloads. */
    double gc_ratio[8] = {0}, bytes_ratio[8] = {0}, total_ratio[8] = {0};
    for (int tr = 0; tr < 2; tr++) {
        dsm_transport_t t = tr ? DSM_TRANSPORT_TCP : DSM_TRANSPORT_SHM;
        cluster_t c;
        if (cluster_start(&c, t, heap / 2 + (8u << 20)) != 0) {
            fprintf(stderr, "cannot start the cluster\n");
            return 1;
        }
        for (int p = 0; p < 3; p++) {
            int n = (tr == 1 && pcts[p] == 25) ? reps : 1;
            for (int wl = 0; wl < 3; wl++) {
                if (only && strcmp(only, wl_names[wl]) != 0)
                    continue;
                double gs[8], gb[8], tt[8];
                result_t s = {0}, b = {0};
                for (int k = 0; k < n; k++) {
                    s = run(&c, wl, pcts[p], 1, 1, 0, heap);
                    b = run(&c, wl, pcts[p], 0, 0, 0, heap);
                    gs[k] = b.gc_s > 0 && s.gc_s > 0 ? b.gc_s / s.gc_s : 0;
                    gb[k] = b.gc_bytes > 0 && s.gc_bytes > 0 ? b.gc_bytes / s.gc_bytes : 0;
                    tt[k] = b.total_s / s.total_s;
                }
                char name[96], anchor[64];
                const char *tn = dsm_transport_name(t);
                snprintf(anchor, sizeof anchor, "baseline %s", wl_names[wl]);
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_gc_s", wl_names[wl], tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.gc_s, "s", anchor, b.gc_s, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_gc_bytes", wl_names[wl], tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.gc_bytes, "B", anchor, b.gc_bytes, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_total_s", wl_names[wl], tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.total_s, "s", anchor, b.total_s, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_pause_ms", wl_names[wl], tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.pause_ms, "ms", anchor, b.pause_ms, 0));
                snprintf(name, sizeof name, "semeru_%s_%s_%upct_full_gcs", wl_names[wl], tn, pcts[p]);
                dsm_report_print_figure(stdout, dsm_report_add(&rep, name, s.full, "n", anchor, b.full, 0));
                if (tr == 1 && pcts[p] == 25) {
                    /* The ablation: no continuous tracing (every region traced in the pause). */
                    result_t a = run(&c, wl, pcts[p], 1, 0, 0, heap);
                    snprintf(name, sizeof name, "semeru_%s_%s_%upct_no_msct_gc_s", wl_names[wl], tn, pcts[p]);
                    snprintf(anchor, sizeof anchor, "semeru %s", wl_names[wl]);
                    dsm_report_print_figure(stdout, dsm_report_add(&rep, name, a.gc_s, "s", anchor, s.gc_s, 0));
                }
                if (n == reps) {
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
                                                           "CPU full GC pulling pages",
                                                           dsm_report_median(bm, (size_t)reps), 1));
        }
        cluster_stop(&c);
    }
    /* Headlines: the geometric mean over workloads of the median ratios
     * (baseline / Semeru, higher is better), anchored at 1 (parity). */
    double g = 1, y = 1, z = 1;
    for (int wl = 0; wl < 3; wl++) {
        g *= gc_ratio[wl] > 0 ? gc_ratio[wl] : 1;
        y *= bytes_ratio[wl] > 0 ? bytes_ratio[wl] : 1;
        z *= total_ratio[wl] > 0 ? total_ratio[wl] : 1;
    }
    dsm_report_print_figure(stdout, dsm_report_add(&rep, "semeru_gc_time_25pct", cbrt(g), "x", "parity", 1, 1));
    dsm_report_print_figure(stdout, dsm_report_add(&rep, "semeru_gc_bytes_25pct", cbrt(y), "x", "parity", 1, 1));
    dsm_report_print_figure(stdout, dsm_report_add(&rep, "semeru_total_25pct", cbrt(z), "x", "parity", 1, 1));
    dsm_report_env(&rep, "quick", "%s", quick ? "true" : "false");
    dsm_report_env(&rep, "heap_bytes", "%llu", (unsigned long long)heap);
    dsm_report_env(&rep, "runs_headline", "%d", reps);
    dsm_report_env(&rep, "fetch_delay_us", "%u", fetch_delay_us);
    dsm_report_env(&rep, "cpus", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    int rc = json && dsm_report_write_json(&rep, json) != 0 ? 1 : 0;
    dsm_report_free(&rep);
    return rc;
}
