/* dsm-bench-path: what the heap's checks add to the fabric's one-sided path.
 * heap_fadd_8B_latency and heap_read_8B_latency are dsm_fetch_add / 8-byte
 * dsm_read from one node to a word in another node's partition (the block
 * state check included), each beside the bare fabric operation on the same
 * word from the same node (dsm_fabric_fetch_add / dsm_fabric_get), over shm
 * and tcp.
 *
 * Setup: a coordinator and two nodes (heap attached) in this process; over
 * tcp the target node's progress thread polls, as the fabric bench's target
 * and ucx_perftest's server do (blocking, each request would wake it: the
 * figures would be 15-35 us of wake-ups, hiding the checks they measure). Trust: R repetitions, ours and the anchor interleaved; per
 * repetition the median over groups of the group's mean per-op latency (the
 * clock read once per group of 64 ops on shm, per op on tcp); reported: the
 * median over repetitions of each. --only PREFIX measures only the figures
 * whose names start so (the JSON's env says which). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/cluster.h"
#include "bench/driver.h"
#include "bench/report.h"
#include "dsm/fabric.h"
#include "dsm/heap.h"
#include "dsm/log.h"
#include "dsm/node.h"
#include "heap/ids.h"
#include "heap/partition.h"
#include "util/clock.h"

enum { MAX_REPS = 15 };
static const char SECRET[] = "bench-path";

static void die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-path: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

static dsm_status_t attach_heap(void *ctx, int i, dsm_node_t *node)
{
    (void)ctx;
    (void)i;
    return dsm_heap_attach(node);
}

typedef enum { HEAP_FADD, FABRIC_FADD, HEAP_READ, FABRIC_GET } op_t;

static dsm_status_t one(dsm_harness_t *c, op_t op, dsm_gaddr_t addr)
{
    uint64_t v;
    dsm_fabric_t *f = dsm_node_fabric(c->nodes[0]);
    switch (op) {
    case HEAP_FADD: return dsm_fetch_add(c->nodes[0], addr, 1, &v);
    case FABRIC_FADD: return dsm_fabric_fetch_add(f, 1, DSM_HEAP_REGION, dsm_gaddr_offset(addr), 1, &v);
    case HEAP_READ: return dsm_read(c->nodes[0], addr, &v, 8);
    default: return dsm_fabric_get(f, 1, DSM_HEAP_REGION, dsm_gaddr_offset(addr), &v, 8);
    }
}

/* Median over `groups` groups of the mean µs per op of `group` ops. */
static double measure(dsm_harness_t *c, op_t op, dsm_gaddr_t addr, int group, int groups)
{
    double *v = malloc(sizeof(double) * (size_t)groups);
    dsm_status_t st = DSM_OK;
    for (int i = 0; i < group * (groups / 10 + 1) && st == DSM_OK; i++)
        st = one(c, op, addr);
    for (int g = 0; g < groups && st == DSM_OK; g++) {
        uint64_t t0 = dsm_now_ns();
        for (int i = 0; i < group && st == DSM_OK; i++)
            st = one(c, op, addr);
        v[g] = (double)(dsm_now_ns() - t0) / 1e3 / group;
    }
    if (st != DSM_OK) die("operation", st);
    double m = dsm_report_median(v, (size_t)groups);
    free(v);
    return m;
}

/* The figure catalogue (--list): each heap path beside the fabric operation under it. */
#define FADD_ANCHOR "dsm_fabric_fetch_add (the fabric's fadd_8B path)"
#define READ_ANCHOR "dsm_fabric_get (the fabric's get_8B path)"
static const dsm_bench_case_t cases[] = {
    {"heap_fadd_8B_latency/shm", FADD_ANCHOR, "us", 0, HEAP_FADD, 0},
    {"heap_read_8B_latency/shm", READ_ANCHOR, "us", 0, HEAP_READ, 0},
    {"heap_fadd_8B_latency/tcp", FADD_ANCHOR, "us", 0, HEAP_FADD, 0},
    {"heap_read_8B_latency/tcp", READ_ANCHOR, "us", 0, HEAP_READ, 0},
};

int main(int argc, char **argv)
{
    dsm_bench_opts_t opts;
    int done = dsm_bench_parse(argc, argv, cases, sizeof cases / sizeof cases[0], NULL, 0, &opts);
    if (done >= 0)
        return done;
    int quick = opts.quick, reps = opts.runs;
    const char *json = opts.json, *only = opts.only;
    if (reps <= 0) reps = quick ? 3 : 5;
    if (reps > MAX_REPS) reps = MAX_REPS;
    dsm_set_log_level(0);
    char load_before[32], load_after[32];
    dsm_report_loadavg(load_before, sizeof load_before);

    dsm_report_t report;
    dsm_report_init(&report, "path");
    dsm_report_print_header(stdout);
    static const struct { dsm_transport_t tr; const char *name; } trs[] = {
        {DSM_TRANSPORT_SHM, "shm"}, {DSM_TRANSPORT_TCP, "tcp"},
    };
    static const struct { op_t ours, anchor; const char *name, *anchor_name; } pairs[] = {
        {HEAP_FADD, FABRIC_FADD, "heap_fadd_8B_latency", FADD_ANCHOR},
        {HEAP_READ, FABRIC_GET, "heap_read_8B_latency", READ_ANCHOR},
    };
    for (size_t t = 0; t < sizeof trs / sizeof trs[0]; t++) {
        int tcp = trs[t].tr == DSM_TRANSPORT_TCP;
        if (!dsm_bench_transport_on(&opts, trs[t].tr))
            continue;
        int wanted = 0;
        char name[96];
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
            snprintf(name, sizeof name, "%s/%s", pairs[p].name, trs[t].name);
            wanted |= dsm_bench_wanted(&opts, name);
        }
        if (!wanted)
            continue;   /* no figure of this transport asked for (--only) */
        dsm_harness_t c;
        dsm_harness_bench_init(&c, trs[t].tr, SECRET, 8u << 20, tcp ? 1u << 1 : 0);
        c.attach = attach_heap;
        dsm_status_t st = dsm_harness_start(&c, 2);
        if (st != DSM_OK) die("cluster", st);
        dsm_gaddr_t addr;
        st = dsm_alloc(c.nodes[0], 1, 64, &addr);
        if (st != DSM_OK) die("alloc", st);
        int group = tcp ? 1 : 64, groups = (tcp ? 2000 : 20000) / (quick ? 4 : 1);
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
            snprintf(name, sizeof name, "%s/%s", pairs[p].name, trs[t].name);
            if (!dsm_bench_wanted(&opts, name))
                continue;
            double ours[MAX_REPS], anch[MAX_REPS];
            for (int r = 0; r < reps; r++) {   /* which runs first alternates */
                if (r % 2) anch[r] = measure(&c, pairs[p].anchor, addr, group, groups);
                ours[r] = measure(&c, pairs[p].ours, addr, group, groups);
                if (!(r % 2)) anch[r] = measure(&c, pairs[p].anchor, addr, group, groups);
            }
            const dsm_figure_t *f = dsm_report_add(&report, name, dsm_report_median(ours, (size_t)reps), "us",
                                                   pairs[p].anchor_name, dsm_report_median(anch, (size_t)reps), 0);
            dsm_report_reps(&report, f, ours, anch, (size_t)reps);
            if (f) dsm_report_print_figure(stdout, f);
            fflush(stdout);
        }
        dsm_free(c.nodes[0], addr);
        dsm_harness_stop(&c);
    }
    dsm_report_loadavg(load_after, sizeof load_after);
    printf("loadavg (1 min) before %s, after %s; %d repetitions, medians\n", load_before, load_after, reps);
    dsm_report_env(&report, "quick", "%s", quick ? "true" : "false");
    dsm_report_env(&report, "repetitions", "%d", reps);
    if (only)
        dsm_report_env_str(&report, "only", only);   /* the figures measured: those named so */
    dsm_report_env_str(&report, "progress", "blocking, but the target polls over tcp");
    dsm_report_env(&report, "loadavg_before", "%s", load_before[0] ? load_before : "null");
    dsm_report_env(&report, "loadavg_after", "%s", load_after[0] ? load_after : "null");
    dsm_report_env_str(&report, "statistic",
                       "median over repetitions (ours and anchor interleaved, which first alternating) of the "
                       "median per-op latency over groups (64 ops per clock read on shm, 1 on tcp)");
    int rc = json && dsm_report_write_json(&report, json) != 0 ? 1 : 0;
    dsm_report_free(&report);
    return rc;
}
