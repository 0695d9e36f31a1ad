/* The directory baseline (GAM-style) for the ownership protocol in own.h:
 * the same heap and fabric, the same shape of API (alloc / borrow / release
 * / borrow_mut / release_mut / drop, the same counters), so a workload
 * switches protocol with one parameter.
 *
 * Every object has a home (the node that allocated it) whose directory
 * keeps its MSI state: the sharers of read copies, or the one node holding
 * it modified. A read miss asks the home, which recalls a modified copy
 * (downgrading it to shared) and registers the reader as a sharer. A write
 * asks the home, which invalidates every sharer by message and recalls a
 * modified copy before granting the writer the only copy (M); writes then
 * stay in the writer's copy (write-back) until a recall. Requests for an
 * object whose transaction is under way queue at its home, and a node
 * whose copy a borrow is using answers an invalidation or recall when the
 * borrow ends: a conflicting borrow on another node waits for the borrow
 * to end. On the node itself a conflicting borrow is DSM_ERR_STATE.
 *
 * Part of the SDK (dsm/sdk.h): a program reaches the directory through workloads (kv,
 * socialnet with protocol=dir), whose code calls
 * these. */
#ifndef DSM_DIR_H
#define DSM_DIR_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/node.h"
#include "dsm/heap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An object: its address at its home (no colour). */
typedef uint64_t dsm_dir_obj_t;

typedef struct dsm_dir_ref {
    dsm_dir_obj_t obj;
    const void *data;
    size_t size;
    uint32_t type;
    uint32_t cached;        /* 1 if data is a copy (this node is not the home) */
} dsm_dir_ref_t;

typedef struct dsm_dir_mut {
    dsm_dir_obj_t obj;
    void *data;
    size_t size;
    uint32_t type;
    uint32_t moved;         /* 1 if this borrow took the exclusive copy from elsewhere */
} dsm_dir_mut_t;

/* The same counters as dsm_own_stats_t (messages: one-way messages this
 * node initiated, a round trip counting 2; bytes: the messages' bytes,
 * fabric headers excluded). moves: exclusive (M) copies granted to a writer
 * on another node; invalidations: INV and invalidating RECALL messages sent
 * by this node as a home. colour_bumps and quarantined stay 0. */
typedef struct dsm_dir_stats {
    uint64_t messages, bytes;
    uint64_t cache_hits, cache_misses, local_reads;
    uint64_t moves;
    uint64_t colour_bumps;
    uint64_t invalidations;
    uint64_t evictions, cache_entries, cache_bytes;
    uint64_t frees_served, quarantined;
    /* peers' transactions this home could not answer as they arrived
     * (they asked other nodes, or queued behind a transaction that did);
     * it answered them as the last answer came */
    uint64_t home_deferred;
    /* a home's invalidations and recalls this node held back while a
     * borrow used its copy (answered when the borrow ended) */
    uint64_t held_back;
    /* round trips this node's threads waited for beyond their own
     * requests: its transactions (at a peer home or at its own) that the
     * home answered only after asking other nodes */
    uint64_t chained_round_trips;
} dsm_dir_stats_t;


/* A zero-filled object of `size` bytes (header included at most 8 MiB)
 * with type id `type` (nonzero), homed on this node. */
DSM_API dsm_status_t dsm_dir_alloc(dsm_node_t *node, uint32_t type, size_t size, dsm_dir_obj_t *out);
DSM_API dsm_status_t dsm_dir_borrow(dsm_node_t *node, dsm_dir_obj_t obj, dsm_dir_ref_t *out);
DSM_API dsm_status_t dsm_dir_release(dsm_node_t *node, dsm_dir_ref_t *ref);
DSM_API dsm_status_t dsm_dir_borrow_mut(dsm_node_t *node, dsm_dir_obj_t obj, dsm_dir_mut_t *out);
DSM_API dsm_status_t dsm_dir_release_mut(dsm_node_t *node, dsm_dir_mut_t *mut);
DSM_API dsm_status_t dsm_dir_drop(dsm_node_t *node, dsm_dir_obj_t obj);
DSM_API void dsm_dir_stats(dsm_node_t *node, dsm_dir_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
