/* Workload "semeru": one Semeru workload (apps/semeru_wl.c) on a managed
 * heap held by the memory servers named by the runner key memory_nodes,
 * run by the node it is spawned on (the CPU server), under one design:
 *   semeru    tracing on the memory servers (MSCT) and CSSC pauses;
 *   baseline  the same heap collected only by CPU full GCs pulling pages;
 *   g1        the G1-like baseline: a CPU thread marks concurrently, pulling
 *             pages, and pauses evacuate region by region on the CPU server;
 *   no_msct   Semeru without continuous tracing (traced in the pause).
 * Params: app (the workload), design, cache_pct, heap_mib, size, iters, order,
 * fetch_delay_us, gc_trigger_pct, probe. Results: mutator_s, gc_s,
 * total_s, pages_fetched, fabric_bytes, fabric_bytes_gc, full_gcs, csscs,
 * trigger_gcs, regions_dead, regions_colocated, ctl_requests, pauses, pause_max_ms, bytes_traced_server,
 * bytes_traced_cpu, trace_mbps,
 * digest (48 bits of the data kept: equal across designs and caches), then
 * one pause_ms line per collection, oldest first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/semeru_wl.h"
#include "apps/refuse.h"
#include "apps/workloads.h"

static const dsm_param_info_t semeru_params[] = {
    {"app", "str", "graph", "the workload: graph (PageRank-like on an R-MAT graph), temps (temporaries) or buffers"},
    {"design", "str", "semeru", "semeru (memory servers trace), baseline (CPU full GCs), g1 (CPU concurrent marking) or no_msct"},
    {"cache_pct", "u64", "25", "CPU page cache, % of the heap (1..100)"},
    {"heap_mib", "u64", "16", "heap size in MiB, split over the memory servers"},
    {"size", "u64", "0", "graph: log2 vertices; temps: chains; buffers: buffers (0: 12, 20000, 800)"},
    {"iters", "u64", "5", "graph: PageRank iterations"},
    {"order", "str", "dfs", "survivor order of memory-server evacuation: dfs or bfs"},
    {"fetch_delay_us", "u64", "0", "added to every page fetch (a slower device)"},
    {"gc_trigger_pct", "u64", "0", "also collect when heap use passes this % (0: when full)"},
    {"probe", "u64", "0", "graph: 1 measures tracing throughput at the end (trace_mbps)"},
};
const dsm_workload_info_t dsm_semeru_info = {
    "semeru", "Semeru's managed heap: a workload with GC on the memory servers or the CPU-only baseline",
    dsm_workload_semeru, semeru_params, sizeof semeru_params / sizeof semeru_params[0], NULL};

/* The ranks in "a,b,c" (at most cap); 0 on a malformed list. */
static uint32_t parse_ranks(const char *text, uint32_t *out, uint32_t cap)
{
    uint32_t n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || n == cap || v > UINT32_MAX)
            return 0;
        out[n++] = (uint32_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return 0;
    }
    return n;
}

dsm_status_t dsm_workload_semeru(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                 size_t *ret_len)
{
    dsm_status_t st = dsm_workload_begin(&dsm_semeru_info, args, len, ret, cap, ret_len);
    if (st != DSM_OK)
        return st;
    int bad = 0;
    char wlname[16] = "graph", design[16] = "semeru", order[8] = "dfs", ranks_text[256] = "";
    dsm_param_str(args, len, "app", wlname, sizeof wlname, &bad);
    dsm_param_str(args, len, "design", design, sizeof design, &bad);
    dsm_param_str(args, len, "order", order, sizeof order, &bad);
    int have_ranks = dsm_param_str(args, len, "memory_nodes", ranks_text, sizeof ranks_text, &bad);
    uint64_t pct = dsm_param_u64(args, len, "cache_pct", 25, &bad);
    uint64_t heap_mib = dsm_param_u64(args, len, "heap_mib", 16, &bad);
    uint64_t size = dsm_param_u64(args, len, "size", 0, &bad);
    uint64_t iters = dsm_param_u64(args, len, "iters", 5, &bad);
    uint64_t delay = dsm_param_u64(args, len, "fetch_delay_us", 0, &bad);
    uint64_t trigger = dsm_param_u64(args, len, "gc_trigger_pct", 0, &bad);
    uint64_t probe = dsm_param_u64(args, len, "probe", 0, &bad);
    int wl = dsm_semeru_wl_find(wlname);
    uint32_t servers[DSM_MHEAP_MAX_SERVERS];
    uint32_t nservers = have_ranks ? parse_ranks(ranks_text, servers, DSM_MHEAP_MAX_SERVERS) : 0;
    int msct = strcmp(design, "baseline") != 0 && strcmp(design, "g1") != 0;
    const dsm_workload_info_t *w = &dsm_semeru_info;
    /* dsm_workload_begin has checked the numbers: bad is a name too long
     * (refused below as unknown) or a memory_nodes list too long */
    if (wl < 0)
        return dsm_apps_refuse_param(w, args, len, "app", ret, cap, ret_len, "graph, temps or buffers");
    if (strcmp(design, "semeru") && strcmp(design, "baseline") && strcmp(design, "g1") && strcmp(design, "no_msct"))
        return dsm_apps_refuse_param(w, args, len, "design", ret, cap, ret_len, "semeru, baseline, g1 or no_msct");
    if (strcmp(order, "dfs") && strcmp(order, "bfs"))
        return dsm_apps_refuse_param(w, args, len, "order", ret, cap, ret_len, "dfs or bfs");
    if (nservers == 0 || (bad && have_ranks))
        return dsm_apps_refuse_param(w, args, len, "memory_nodes", ret, cap, ret_len,
                                     "a list of 1..%d memory server ranks (Placement(memory_nodes=[...]), "
                                     "pydsm run --memory-nodes)",
                                     DSM_MHEAP_MAX_SERVERS);
    if (pct < 1 || pct > 100)
        return dsm_apps_refuse_param(w, args, len, "cache_pct", ret, cap, ret_len, "1..100");
    if (heap_mib < 2 || heap_mib > 65536)
        return dsm_apps_refuse_param(w, args, len, "heap_mib", ret, cap, ret_len, "2..65536");
    if (trigger > 99)
        return dsm_apps_refuse_param(w, args, len, "gc_trigger_pct", ret, cap, ret_len, "0..99");
    if (iters > 1000)
        return dsm_apps_refuse_param(w, args, len, "iters", ret, cap, ret_len, "0..1000");
    if (delay > 1000000)
        return dsm_apps_refuse_param(w, args, len, "fetch_delay_us", ret, cap, ret_len, "0..1000000");
    if (size > 100000000 || (wl == DSM_SEMERU_GRAPH && size > 20))
        return dsm_apps_refuse_param(w, args, len, "size", ret, cap, ret_len, "%s",
                                     wl == DSM_SEMERU_GRAPH ? "0..20 for app graph" : "0..100000000");
    if (probe > 1)
        return dsm_apps_refuse_param(w, args, len, "probe", ret, cap, ret_len, "0 or 1");
    if (node == NULL)
        return DSM_ERR_INVALID;
    static const uint32_t default_size[DSM_SEMERU_NWL] = {12, 20000, 800};
    if (size == 0)
        size = default_size[wl];

    dsm_mheap_config_t cfg;
    dsm_mheap_config_init(&cfg);
    cfg.memory_servers = servers;
    cfg.nservers = nservers;
    cfg.heap_bytes = heap_mib << 20;
    cfg.cache_percent = (uint32_t)pct;
    cfg.types = dsm_semeru_types;
    cfg.ntypes = dsm_semeru_ntypes;
    cfg.msct = msct;
    cfg.msct_auto = !strcmp(design, "semeru") || !strcmp(design, "g1");
    cfg.cpu_marking = !strcmp(design, "g1");
    cfg.order = strcmp(order, "bfs") ? DSM_MHEAP_ORDER_DFS : DSM_MHEAP_ORDER_BFS;
    cfg.handles = 1u << 16;
    cfg.fetch_delay_us = (uint32_t)delay;
    cfg.gc_trigger_percent = (uint32_t)trigger;
    if (wl == DSM_SEMERU_GRAPH && ((uint64_t)2 << size) + 64 > cfg.handles)
        cfg.handles = (uint32_t)((2ull << size) + 64);
    dsm_mheap_t *h;
    if ((st = dsm_mheap_create(node, &cfg, &h)) != DSM_OK) {
        dsm_workload_refuse(ret, cap, ret_len, "semeru: cannot create a %llu MiB heap on %u memory servers: %s",
                            (unsigned long long)heap_mib, nservers, dsm_strerror(st));
        return st;
    }
    dsm_semeru_wl_out_t o;
    st = dsm_semeru_wl_run(h, wl, (uint32_t)size, (uint32_t)iters, (int)probe, dsm_spawn_stop(), &o);
    size_t npauses = st == DSM_OK ? dsm_mheap_pauses(h, NULL, 0) : 0;
    uint64_t *pauses = npauses ? malloc(npauses * sizeof *pauses) : NULL;
    if (pauses == NULL)
        npauses = 0;
    else if (dsm_mheap_pauses(h, pauses, npauses) < npauses)
        npauses = 0;   /* never: pauses are only added */
    dsm_mheap_destroy(h);
    if (st != DSM_OK) {
        free(pauses);
        snprintf(ret, cap, "semeru: %s %s failed: %s", wlname, design, dsm_strerror(st));
        *ret_len = strnlen(ret, cap);
        return st;
    }
    const dsm_mheap_stats_t *s = &o.stats;
    double gc_s = (double)s->gc_ns / 1e9;
    *ret_len = 0;
    struct {
        const char *name;
        double value;
        const char *unit;
    } rows[] = {
        {"mutator_s", o.work_s - gc_s, "s"},
        {"gc_s", gc_s, "s"},
        {"total_s", o.work_s, "s"},
        {"pages_fetched", (double)s->pages_fetched, "count"},
        /* a readahead brings several pages in one request */
        {"fetch_requests", (double)(s->pages_fetched - s->pages_readahead), "count"},
        {"fabric_bytes", (double)s->fabric_bytes, "B"},
        {"fabric_bytes_gc", (double)s->fabric_bytes_gc, "B"},
        {"full_gcs", (double)s->full_gc_count, "count"},
        {"csscs", (double)s->cssc_count, "count"},
        {"trigger_gcs", (double)s->trigger_gcs, "count"},
        {"regions_dead", (double)s->regions_dead, "count"},
        {"regions_colocated", (double)s->regions_colocated, "count"},
        {"ctl_requests", (double)s->ctl_requests, "count"},
        {"pauses", (double)s->pauses, "count"},
        {"pause_max_ms", (double)s->pause_max_ns / 1e6, "ms"},
        {"bytes_traced_server", (double)s->bytes_traced_server, "B"},
        {"bytes_traced_cpu", (double)s->bytes_traced_cpu, "B"},
        {"trace_mbps", o.trace_mbps, "MB/s"},
        {"digest", (double)o.digest, "hash"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0] && st == DSM_OK; i++)
        st = dsm_result_add(ret, cap, ret_len, rows[i].name, rows[i].value, rows[i].unit);
    /* The pauses of the work itself (the probe and the digest come after). */
    for (size_t i = 0; i < npauses && i < s->pauses && st == DSM_OK; i++)
        st = dsm_result_add(ret, cap, ret_len, "pause_ms", (double)pauses[i] / 1e6, "ms");
    free(pauses);
    return st;
}
