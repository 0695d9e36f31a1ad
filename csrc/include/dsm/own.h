/* Ownership-guided coherence (DRust): boxes in the global heap, shared and
 * mutable borrows, ownership transfer and drop, with the coherence protocol
 * of DRust's Algorithms 1-3. No invalidation message is ever sent:
 *  - a shared borrow of a remote object reads it into this node's cache,
 *    keyed by its *coloured* global address (bits 48..63 of the address);
 *  - a mutable borrow of a remote object moves it here (new address), and
 *    asks the old home to free the old copy asynchronously;
 *  - the end of a mutable borrow writes the owner (synchronously) with the
 *    colour incremented, so any cached copy keyed by the old coloured
 *    address can never be looked up again; a colour that would overflow
 *    moves the object to a new address instead;
 *  - a home remembers the final colour of each freed slot, and an object
 *    later allocated there starts above it (no ABA through reuse).
 * A dsm_own_box_t names the box's owner record, which lives in global memory on
 * the node that holds the box (so a borrower anywhere can update it), with
 * the record's generation in its colour bits: a handle to a dropped box is
 * refused, never followed.
 *
 * Borrow checks (on by default, dsm_own_set_checks in dsm/own_sdk.h): every borrow is
 * recorded in the owner record; borrow_mut while borrowed, a borrow while
 * mutably borrowed, and move or drop of a borrowed box give DSM_ERR_STATE
 * (logged) and change nothing. With checks off the program must follow the
 * borrow rules itself (as safe Rust would) and borrows cost no atomics.
 *
 * This header is the Box API a program calls (pydsm's Box); placement,
 * TBox groups, channels, mutexes and the node's knobs are the SDK's,
 * dsm/own_sdk.h.
 *
 * Part of the user API (dsm/dsm.h). */
#ifndef DSM_OWN_H
#define DSM_OWN_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/node.h"
#include "dsm/heap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t dsm_own_box_t;

/* A shared borrow: data is valid (read-only) until dsm_own_box_release. */
typedef struct dsm_own_ref {
    dsm_own_box_t box;
    dsm_gaddr_t g;          /* the object's coloured address when borrowed */
    const void *data;
    size_t size;
    uint32_t type;
    uint32_t cached;        /* 1 if data is this node's cached copy */
} dsm_own_ref_t;

/* A mutable borrow: data is this node's (only) copy until dsm_own_box_release_mut. */
typedef struct dsm_own_mut {
    dsm_own_box_t box;
    dsm_gaddr_t g;
    void *data;
    size_t size;
    uint32_t type;
    uint32_t moved;         /* 1 if this borrow moved the object here */
    uint32_t staged;        /* 1 on a node without a partition (a client): data
                               is a private copy, and the release moves the
                               object to a new slot at its home with it */
} dsm_own_mut_t;

/* Per-node counters. messages: one-way network messages this node's
 * protocol caused (a round trip counts 2: request and reply; a one-way
 * free 1); bytes: payload bytes they carried (object data, addresses,
 * owner words), headers excluded. Both depend only on the protocol and
 * the operations, not on the machine. */
typedef struct dsm_own_stats {
    uint64_t messages, bytes;
    uint64_t cache_hits, cache_misses, local_reads;
    uint64_t moves;              /* remote borrow_mut moves + colour-overflow moves */
    uint64_t colour_bumps;       /* local write ends: colour + 1 */
    uint64_t invalidations;      /* invalidation messages sent (own sends none) */
    uint64_t evictions, cache_entries, cache_bytes;
    uint64_t frees_served, quarantined;
} dsm_own_stats_t;

/* Object types, process-wide: id 1..2^24-1, a name, and a fixed payload
 * size (0: any size). Registering the same id again with the same name and
 * size is a no-op; a different one is DSM_ERR_EXISTS. */
DSM_API dsm_status_t dsm_own_type_register(uint32_t id, const char *name, size_t size);

/* Allocate a zero-filled object of a registered type on this node; the box
 * is held by this node. DSM_ERR_INVALID for an unknown type id or a size
 * the type does not allow. */
DSM_API dsm_status_t dsm_own_box_alloc(dsm_node_t *node, uint32_t type, size_t size, dsm_own_box_t *out);
/* The same with the object and its owner record on node `rank` (this node
 * or another: the home allocates, so its colour memory applies), or on the
 * most vacant node for DSM_OWN_VACANT (one ALLOC message to its home); a
 * node without a partition (a client) allocates this way. */
enum { DSM_OWN_VACANT = 0xffffffffu };
DSM_API dsm_status_t dsm_own_box_alloc_on(dsm_node_t *node, uint32_t rank, uint32_t type, size_t size,
                                      dsm_own_box_t *out);
DSM_API dsm_status_t dsm_own_box_borrow(dsm_node_t *node, dsm_own_box_t box, dsm_own_ref_t *out);
DSM_API dsm_status_t dsm_own_box_release(dsm_node_t *node, dsm_own_ref_t *ref);
DSM_API dsm_status_t dsm_own_box_borrow_mut(dsm_node_t *node, dsm_own_box_t box, dsm_own_mut_t *out);
DSM_API dsm_status_t dsm_own_box_release_mut(dsm_node_t *node, dsm_own_mut_t *mut);
/* Ownership transfer: the box's owner record moves to node `to` (the
 * object stays where it is); *out names it there and `box` is dead. This
 * node's unreferenced cached copy is freed. */
DSM_API dsm_status_t dsm_own_box_move(dsm_node_t *node, dsm_own_box_t box, uint32_t to, dsm_own_box_t *out);
/* Free the object (at its home) and the owner record. */
DSM_API dsm_status_t dsm_own_box_drop(dsm_node_t *node, dsm_own_box_t box);
/* The object's current coloured address (what a borrow would look up). */
DSM_API dsm_status_t dsm_own_box_addr(dsm_node_t *node, dsm_own_box_t box, dsm_gaddr_t *g);

DSM_API void dsm_own_stats(dsm_node_t *node, dsm_own_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
