/* An in-process cluster for benchmarks: a coordinator on loopback and n
 * nodes of one transport, each given to an attach hook before it joins. */
#ifndef DSM_BENCH_CLUSTER_H
#define DSM_BENCH_CLUSTER_H

#include "dsm/coord.h"
#include "dsm/node.h"

enum { DSM_BENCH_MAX_NODES = 8 };

typedef struct dsm_bench_cluster {
    dsm_coord_t *coord;
    dsm_node_t *node[DSM_BENCH_MAX_NODES];
    int n;
} dsm_bench_cluster_t;

/* Called for node i between create and join (attach modules, register
 * handlers); a status other than DSM_OK ends the program. */
typedef dsm_status_t (*dsm_bench_attach_t)(void *ctx, int i, dsm_node_t *node);

/* Start it (partition_size bytes per node, 0 for none; busy_mask: the
 * nodes whose progress thread polls, bit i for node i, the others block)
 * and wait until every node sees all n; any failure ends the program with
 * a message naming the step. */
void dsm_bench_cluster_start(dsm_bench_cluster_t *c, int n, dsm_transport_t tr, const char *secret,
                             uint64_t partition_size, unsigned busy_mask, dsm_bench_attach_t attach, void *ctx);
/* Destroy the nodes, the last rank first (rank 0 then sees no peer fail),
 * then stop the coordinator. */
void dsm_bench_cluster_stop(dsm_bench_cluster_t *c);

#endif
