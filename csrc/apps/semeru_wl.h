/* The Semeru workloads on a managed heap (apps/semeru_wl.c), shared by the
 * registered workload "semeru" (apps/semeru_run.c) and dsm-bench-semeru. */
#ifndef DSM_APPS_SEMERU_WL_H
#define DSM_APPS_SEMERU_WL_H

#include <stdint.h>
#include "dsm/mheap.h"
#include "dsm/node.h"

enum { DSM_SEMERU_GRAPH = 0, DSM_SEMERU_TEMPS = 1, DSM_SEMERU_BUFFERS = 2, DSM_SEMERU_NWL = 3 };

/* The workloads' type table (every heap that runs them registers it). */
extern const dsm_mheap_type_t dsm_semeru_types[];
extern const uint32_t dsm_semeru_ntypes;

/* "graph", "temps", "buffers"; NULL past the end. */
const char *dsm_semeru_wl_name(int wl);
/* The index of a name, or -1. */
int dsm_semeru_wl_find(const char *name);

typedef struct dsm_semeru_wl_out {
    double work_s;              /* the workload itself, up to the snapshot below */
    dsm_mheap_stats_t stats;    /* the heap's counters when the work ended */
    uint64_t digest;            /* of the data the workload kept (48 bits), the same under every design and cache */
    double trace_mbps;          /* with probe: Table 5's tracing throughput (MB/s of live objects) */
} dsm_semeru_wl_out_t;

/* Run workload `wl` on an empty heap created with dsm_semeru_types:
 *   graph    a Kronecker (R-MAT) graph of 2^size vertices and 6 edges each,
 *            kept across `iters` PageRank-like iterations, each replacing
 *            every vertex's rank object;
 *   temps    `size` chains of 4..15 short-lived objects, a quarter kept;
 *   buffers  `size` 16 KiB serialized buffers, each parsed into 64 small
 *            records, a window of the last max(160, size / 6) of both kept.
 * probe (graph, after the iterations): trace the graph once its pages are
 * all evicted, on the memory servers (msct) or by a CPU full GC. `stop`
 * (may be NULL) is polled: DSM_ERR_CANCELLED when it is raised. Handles are
 * freed on return. */
dsm_status_t dsm_semeru_wl_run(dsm_mheap_t *h, int wl, uint32_t size, uint32_t iters, int probe,
                               const dsm_stop_t *stop, dsm_semeru_wl_out_t *out);

#endif
