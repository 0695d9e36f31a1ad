/* The in-process cluster of the C tests and the benchmarks: a coordinator
 * on loopback and n nodes of one transport in this process, each started
 * with every module (dsm_start) or given to an attach hook between its
 * create and its join. It uses the SDK alone (dsm/sdk.h), so it stands
 * outside the layers; tests and benchmarks link it (dsm_harness). */
#ifndef DSM_HARNESS_CLUSTER_H
#define DSM_HARNESS_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>
#include "dsm/sdk.h"

enum { DSM_HARNESS_MAX_NODES = 8 };
/* partition_size for nodes that serve no memory. */
#define DSM_HARNESS_NO_PARTITION UINT64_MAX
#define DSM_HARNESS_SECRET "cluster-test-secret"

/* Called for node i between create and join (attach modules, register
 * handlers, publish values). */
typedef dsm_status_t (*dsm_harness_attach_t)(void *ctx, int i, dsm_node_t *node);

/* Set the fields above `coord` before dsm_harness_start; 0 (or NULL) takes
 * the default named, a test's: failures show within seconds. Benchmarks set
 * longer timeouts, so that a loaded host is not taken for a dead peer. */
typedef struct dsm_harness {
    dsm_transport_t transport;
    const char *secret;             /* NULL: DSM_HARNESS_SECRET */
    uint64_t partition_size;        /* per node; 0: 16 MiB; DSM_HARNESS_NO_PARTITION: none */
    unsigned no_partition_mask;     /* bit i: node i serves no memory all the same (a CPU server) */
    unsigned busy_mask;             /* bit i: node i's progress thread polls */
    unsigned blocking_mask;         /* bit i (and not in busy_mask): it blocks; a node in neither:
                                     * `progress` if progress_set, else DSM_PROGRESS_AUTO */
    bool progress_set;
    dsm_progress_mode_t progress;
    uint32_t heartbeat_ms;          /* 0: 100 */
    uint32_t op_timeout_ms;         /* 0: 3000 */
    uint32_t peer_timeout_ms;       /* 0: 1500 (the coordinator's too) */
    uint32_t wait_ms;               /* how long start waits for every node to see all n; 0: 5000 */
    const char *chaos;              /* the nodes' chaos spec (dsm_node_config_t.chaos); NULL: $DSM_CHAOS */
    dsm_harness_attach_t attach;    /* NULL: dsm_start, every module of the table */
    void *ctx;                      /* attach's */
    /* Set by dsm_harness_start. */
    dsm_coord_t *coord;
    char coordinator[64];           /* "127.0.0.1:PORT" */
    int n;                          /* nodes started */
    dsm_node_t *nodes[DSM_HARNESS_MAX_NODES];
} dsm_harness_t;

/* A benchmark's settings: c zeroed, then transport tr, secret (kept by the
 * caller), partition_size bytes per node (0: none), every node's progress
 * thread blocking but those of busy_mask, and timeouts for a loaded host:
 * 20 s operations and waits, 10 s peers, the node's default heartbeat. */
void dsm_harness_bench_init(dsm_harness_t *c, dsm_transport_t tr, const char *secret, uint64_t partition_size,
                            unsigned busy_mask);

/* Start the coordinator and nodes 0..n-1 (ranks 0..n-1), then wait until
 * every node sees all n. On an error the nodes started so far stay in
 * c->nodes (c->n) for dsm_harness_stop, and a line on stderr names the step. */
dsm_status_t dsm_harness_start(dsm_harness_t *c, int n);
/* The config a node of c gets (rank: DSM_RANK_ANY for a client), for a
 * test that starts a further node itself. */
void dsm_harness_node_config(const dsm_harness_t *c, dsm_node_config_t *cfg, uint32_t rank);
/* Start one node with cfg the way c starts its own (i: what attach sees). */
dsm_status_t dsm_harness_node_start(const dsm_harness_t *c, const dsm_node_config_t *cfg, int i,
                                    dsm_node_t **out);
/* Destroy the nodes, the last rank first (rank 0 then sees no peer fail),
 * then stop the coordinator; c may be started again. NULL: nothing. */
void dsm_harness_stop(dsm_harness_t *c);

#endif
