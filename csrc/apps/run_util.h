/* What the coherence workloads (kv, gemm, dataframe, socialnet) share when
 * every node of a cluster runs one at once: the rendezvous of the nodes on
 * a shared counter, the common parameters (protocol, rank_index, nodes,
 * directory, checks), and the per-run counters of both protocols that each
 * reports in its result (messages, bytes, cache_hits, cache_misses, moves,
 * invalidations, and messages_per_op and bytes_per_op). */
#ifndef DSM_APPS_RUN_UTIL_H
#define DSM_APPS_RUN_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "apps/coh.h"
#include "dsm/heap.h"
#include "dsm/node.h"
#include "dsm/workload.h"
#include "dsm/mix.h"

/* The nodes' rendezvous: arrival k (1, 2, ...) of `nodes` adds one to the
 * counter at `counter` and waits (up to 120 s) for it to reach k * nodes.
 * It does not poll the stop flag: a cancelled run leaves its operation loop
 * and still meets the others, so that no node drops what it made while
 * another may still be using it (a run is cancelled on every node at once). */
dsm_status_t dsm_apps_rendezvous(dsm_node_t *node, dsm_gaddr_t counter, uint64_t k, uint64_t nodes);

/* Refuses (naming `directory`, in ret) a directory an earlier run used:
 * before this node's first arrival its rendezvous counter can hold at most
 * the other nodes' first arrivals (below `nodes`), so a larger value is a
 * run's leftovers, whose stale handles would be read as this run's. */
dsm_status_t dsm_apps_directory_fresh(const dsm_workload_info_t *w, dsm_node_t *node, dsm_gaddr_t directory,
                                      uint64_t nodes, uint64_t directory_bytes, const void *args, size_t len,
                                      void *ret, size_t cap, size_t *ret_len);

/* The parameters every coherence workload takes. */
struct dsm_apps_run;
/* Publish the handles this node made (the nonzero h[k]) in the directory's
 * words 1..n, meet the other nodes (arrival `round`), and read every
 * node's handles back into h[0..n). Nothing to do for local. */
dsm_status_t dsm_apps_share(const struct dsm_apps_run *r, uint64_t *h, uint64_t n, uint64_t round);
/* Meet the other nodes (arrival `round`; nothing for local). */
dsm_status_t dsm_apps_meet(const struct dsm_apps_run *r, uint64_t round);

typedef struct dsm_apps_run {
    dsm_node_t *node;       /* NULL for local */
    const dsm_coh_ops_t *ops;
    int local;              /* protocol=local: the single-process original */
    char proto[16];
    uint64_t index, nodes;  /* rank_index and nodes (the driver's) */
    dsm_gaddr_t directory;  /* shared zeroed words: [0] the rendezvous counter */
    uint64_t directory_bytes;   /* the size it needs */
    uint64_t checks;        /* own's borrow checks: 0, 1 or 2 (leave) */
    uint64_t seed;
    dsm_coh_stats_t before;
} dsm_apps_run_t;

/* Reads them from `args` (after dsm_workload_begin with `w`), checks them
 * (an unknown protocol, index >= nodes, no directory or node for own and
 * dir, a bad checks value: DSM_ERR_INVALID with a refusal naming the
 * parameter in ret; `directory_bytes`, the size the directory needs, is
 * named in its refusal), applies `checks`, and takes the counters'
 * starting values. */
/* `bytes` for the coherence workloads' "directory" under own or dir, 0
 * for any other parameter or protocol local (their scratch_bytes). */
uint64_t dsm_apps_directory_scratch(const char *param, const void *args, size_t len, uint64_t bytes);
dsm_status_t dsm_apps_run_begin(dsm_apps_run_t *r, const dsm_workload_info_t *w, dsm_node_t *node,
                                const void *args, size_t len, uint64_t directory_bytes, void *ret, size_t cap,
                                size_t *ret_len);
/* dsm_apps_directory_fresh for the run's directory (nothing for local):
 * called once the workload's own parameters are checked. */
dsm_status_t dsm_apps_run_fresh(const dsm_apps_run_t *r, const dsm_workload_info_t *w, const void *args, size_t len,
                                void *ret, size_t cap, size_t *ret_len);
/* Both protocols' counters of the node (zeros for local). */
void dsm_apps_counters(dsm_node_t *node, dsm_coh_stats_t *out);
/* Appends the node's counters since `before`, and per operation. */
dsm_status_t dsm_apps_report_since(dsm_node_t *node, const dsm_coh_stats_t *before, double ops, void *ret, size_t cap,
                                   size_t *ret_len);
/* The same between two readings of dsm_apps_counters. */
dsm_status_t dsm_apps_report_between(const dsm_coh_stats_t *before, const dsm_coh_stats_t *after, double ops,
                                     void *ret, size_t cap, size_t *ret_len);
/* What the node's fabric sent, whatever layer sent it: active messages
 * (requests, replies, one-way) and one-sided operations (over tcp each
 * travels as a request and its reply); and the round trips the node's
 * threads waited on: the fabric's (a request's reply, a one-sided
 * operation that travels to its peer) and those a directory home's
 * INV/RECALL added to them (dir's chained_round_trips). Zeros without a
 * node. */
typedef struct dsm_apps_wire {
    uint64_t am, onesided, waited;
    uint64_t wait_ns;   /* the fabric's waits' time (round_trip_wait_ns) */
} dsm_apps_wire_t;
void dsm_apps_wire(dsm_node_t *node, dsm_apps_wire_t *out);
/* The same at a measured phase's start and end, the fabric timing its
 * waited round trips in between (dsm_fabric_time_waits). */
void dsm_apps_wire_begin(dsm_node_t *node, dsm_apps_wire_t *out);
void dsm_apps_wire_end(dsm_node_t *node, dsm_apps_wire_t *out);
/* Appends fabric_am_sent and fabric_onesided between two readings. */
dsm_status_t dsm_apps_report_wire(const dsm_apps_wire_t *before, const dsm_apps_wire_t *after, void *ret, size_t cap,
                                  size_t *ret_len);
/* Appends round_trips_waited and round_trip_wait_ns (the time the
 * fabric's waits took) between two readings: a node's time per operation
 * is its work's and its waited round trips' (see dsm-bench-drust). */
dsm_status_t dsm_apps_report_waited(const dsm_apps_wire_t *before, const dsm_apps_wire_t *after, void *ret,
                                    size_t cap, size_t *ret_len);
/* The same since dsm_apps_run_begin. */
dsm_status_t dsm_apps_report_counters(const dsm_apps_run_t *r, double ops, void *ret, size_t cap, size_t *ret_len);

/* The original on several threads (threads=N): fn runs on `threads`
 * threads at once, member i's argument at members + i * size, the calling
 * thread's being member 0; the others start only once all exist. Returns
 * after every member's fn has returned; DSM_ERR_NOMEM, fn run by none, if
 * a thread would not start. */
dsm_status_t dsm_apps_team_run(uint32_t threads, void (*fn)(void *member), void *members, size_t size);
/* The original's `threads` parameter into *threads: 1..DSM_APPS_TEAM_MAX,
 * above 1 only under protocol=local; else a refusal naming it (in ret).
 * Checked before dsm_apps_run_begin, as the other parameters are. */
enum { DSM_APPS_TEAM_MAX = 64 };
dsm_status_t dsm_apps_team_param(const dsm_workload_info_t *w, const void *args, size_t len, uint64_t *threads,
                                 void *ret, size_t cap, size_t *ret_len);
/* The parameters' descriptions, for a workload's table (protocol, seed,
 * checks, directory; the directory's help names `directory_help`). */
#define DSM_APPS_RUN_PARAMS(directory_help)                                                                   \
    {"protocol", "str", "own", "coherence: own (DRust), dir (GAM-style directory) or local (the original)"},  \
        {"seed", "u64", "42", "random seed"},                                                                 \
        {"checks", "u64", "2", "own's borrow checks for the run: 0 off, 1 on, 2 leave the node's setting"}, \
        {"directory", "addr", "0", directory_help}

#endif
