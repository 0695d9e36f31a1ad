/* Single-source shortest paths on delegation across nodes (Gossamer, thesis
 * §3.3.3; an application of the apps layer, internal to it): a Kronecker
 * graph, its single-process Dijkstra (the reference), and the distributed
 * run in which the vertices are split into partitions, one per trustee of
 * every attached node, and a relaxation is a closure delegated to the
 * partition that owns its vertex. */
#ifndef DSM_APPS_SSSP_H
#define DSM_APPS_SSSP_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/deleg.h"
#include "dsm/node.h"

#define DSM_SSSP_INF UINT64_MAX

/* A directed graph in compressed rows: the edges of v are
 * dst[off[v]..off[v+1]) with weights w[...] (1..255). */
typedef struct dsm_sssp_graph {
    uint32_t n;
    uint64_t m;
    uint64_t *off;
    uint32_t *dst;
    uint32_t *w;
} dsm_sssp_graph_t;

/* The Graph500 Kronecker generator (A = 0.57, B = C = 0.19): 2^scale
 * vertices, edge_factor * 2^scale undirected edges (both directions kept),
 * self loops dropped, vertex ids permuted, weights uniform in 1..255; the
 * same seed gives the same graph on every node. scale 1..26. */
dsm_status_t dsm_sssp_kronecker(unsigned scale, unsigned edge_factor, uint64_t seed, dsm_sssp_graph_t *out);
void dsm_sssp_graph_free(dsm_sssp_graph_t *g);
/* The source the runs start from: the vertex of highest degree (in the
 * giant component of a Kronecker graph). */
uint32_t dsm_sssp_source(const dsm_sssp_graph_t *g);
/* Single-process Dijkstra: dist[0..n) (DSM_SSSP_INF when unreachable). */
dsm_status_t dsm_sssp_dijkstra(const dsm_sssp_graph_t *g, uint32_t src, uint64_t *dist);

/* The owner of vertex v among `parts` partitions (round robin: Kronecker
 * degrees are skewed, so neighbouring ids share the load). */
static inline uint32_t dsm_sssp_part_of(uint32_t v, uint32_t parts) { return v % parts; }

/* A relaxation: vertex v reached at distance d. The delegated run's
 * closure environment, the naive run's message and a pending entry of a
 * partition's heap alike (the padding zeroed, so its 16 bytes are
 * defined wherever they are copied). */
typedef struct dsm_sssp_relaxation {
    uint32_t v;
    uint32_t pad;
    uint64_t d;
} dsm_sssp_relaxation_t;

/* One partition's side of the label-correcting algorithm, whichever way
 * relaxations travel between partitions (sssp_local.c): its distances, the
 * least distance it sent for each other partition's vertex, and the heap
 * of relaxations pending within it. Plain state of the one thread that
 * runs the partition. */
typedef struct dsm_sssp_local {
    const dsm_sssp_graph_t *g;
    uint32_t id, parts;
    uint64_t *dist;   /* dist of vertices id, id + parts, ... */
    uint64_t *sent;   /* by vertex: the least distance sent to its owner this run */
    dsm_sssp_relaxation_t *heap;
    size_t len, cap;
    uint64_t relaxations;   /* relaxations looked at this run */
} dsm_sssp_local_t;
/* Sends relaxation (v, d) to partition `owner`. */
typedef dsm_status_t (*dsm_sssp_send_fn)(void *ctx, uint32_t owner, uint32_t v, uint64_t d);
/* Partition id of parts, reset for a run (every distance infinite). */
dsm_status_t dsm_sssp_local_init(dsm_sssp_local_t *l, const dsm_sssp_graph_t *g, uint32_t id, uint32_t parts);
void dsm_sssp_local_reset(dsm_sssp_local_t *l);
void dsm_sssp_local_free(dsm_sssp_local_t *l);
/* Relaxation (v, d) arriving at this partition: settles v and the vertices
 * here it improves in turn, sending on each improvement for another
 * partition that beats what was sent for it before. DSM_ERR_INVALID if v
 * is not this partition's; else the first failure of a send (the rest of
 * the relaxation still runs), or DSM_ERR_NOMEM. */
dsm_status_t dsm_sssp_relax(dsm_sssp_local_t *l, uint32_t v, uint64_t d, dsm_sssp_send_fn send, void *ctx);

/* The delegated run. Each node's trustee threads [first, first + trustees)
 * hold one partition each (trustees 0: every thread from first): partition
 * p lives on node p / trustees, thread first + p % trustees; every
 * partition holds a trust to every other (imported on its own node, cloned
 * on the same runtime). The runtimes of all nodes are given together (one
 * process: tests, benchmarks); several must be attached and joined, a
 * single one need not be. The run starts on each node's first client
 * thread (worker 0), so a runtime needs a client thread. */
typedef struct dsm_sssp dsm_sssp_t;
dsm_status_t dsm_sssp_create(const dsm_sssp_graph_t *g, dsm_deleg_rt_t *const *rts, unsigned nodes,
                             unsigned first, unsigned trustees, dsm_sssp_t **out);
/* One node's share of a run across processes (dsmd --deleg-threads on
 * every node): rt is this node's attached runtime, the run's nodes are this
 * one (rank self_rank) and every attached peer, in rank order. This node's
 * partitions are entrusted here and handed to the other nodes through the
 * runtime's board, whose boards are read (waiting at most timeout_ms for
 * each). Every node calls it, then dsm_sssp_run and dsm_sssp_destroy, at the
 * same time; distances are known for this node's partitions only (the
 * others read DSM_SSSP_INF). A run that loses a node gives
 * DSM_ERR_PEER_DEAD and leaves the runtime recovered for the next. */
dsm_status_t dsm_sssp_create_node(const dsm_sssp_graph_t *g, dsm_deleg_rt_t *rt, uint32_t self_rank, unsigned first,
                                  unsigned trustees, uint32_t timeout_ms, dsm_sssp_t **out);
/* Does partition of vertex v live in this process? */
int dsm_sssp_vertex_here(const dsm_sssp_t *s, uint32_t v);
/* One run from src: resets the distances, starts every runtime, joins them
 * (the runtimes' cluster-wide termination detection ends it). *relaxations
 * (may be NULL) gets the number of relaxations done. A stop flag (may be
 * NULL), polled by every relaxation, ends the run early: DSM_ERR_CANCELLED. */
dsm_status_t dsm_sssp_run(dsm_sssp_t *s, uint32_t src, const dsm_stop_t *stop, uint64_t *relaxations);
/* The distances of the last run, gathered into dist[0..n). */
void dsm_sssp_distances(const dsm_sssp_t *s, uint64_t *dist);
/* What the last run lost when a node died (rank -1: nothing), as the
 * runtime said before it recovered for the next run. */
void dsm_sssp_loss(const dsm_sssp_t *s, dsm_deleg_loss_t *out);
/* Drops the trusts (a run on every runtime), then frees the partitions; call
 * before destroying the runtimes. */
void dsm_sssp_destroy(dsm_sssp_t *s);

#endif
