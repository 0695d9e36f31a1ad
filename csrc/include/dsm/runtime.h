/* The runtime's calls for mechanism authors and for programs that host a
 * node (dsmd): the two-phase start, the node's fabric, values exchanged at
 * join, hooks on peers joining and dying, module state, mechanism
 * closures, and a daemon's handling of its jobs and of the coordinator's
 * address checks.
 *
 * Part of the SDK (dsm/sdk.h); dsm/dsm.h, the user API, does not include
 * it (a program that runs on a node needs dsm/node.h only). */
#ifndef DSM_RUNTIME_H
#define DSM_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/fabric.h"
#include "dsm/node.h"
#include "dsm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime's active-message handler ids: its block is 1..7 of the
 * fabric's handler space (see fabric.h for how the space is shared; the
 * modules above get theirs from the module table, dsm/module.h). */
enum {
    DSM_AM_RUNTIME_SPAWN = 1,
    DSM_AM_RUNTIME_STATS = 2,
    DSM_AM_RUNTIME_PING = 3,
    DSM_AM_RUNTIME_CANCEL = 4,
    DSM_AM_RUNTIME_STARTED = 5,
    DSM_AM_RUNTIME_RESULT = 6,   /* a spawn's result, one way, by its token */
    DSM_AM_RUNTIME_LAST = 7,
};

/* Two-phase start: create the node (fabric up), let modules register their
 * handlers and publish their values, then join the cluster. dsm_start() in
 * dsm.h does all three (and attaches every module of the table). */
DSM_API dsm_status_t dsm_node_create(const dsm_node_config_t *config, dsm_node_t **out);
DSM_API dsm_status_t dsm_node_join(dsm_node_t *node);

/* The node's fabric instance (dsm/fabric.h). */
DSM_API dsm_fabric_t *dsm_node_fabric(dsm_node_t *node);

/* Values exchanged at join time (like a PMI/OpenSHMEM runtime's put/get):
 * between dsm_node_create and dsm_node_join a module publishes small (key,
 * value) pairs; they travel in this node's member entry, through the
 * coordinator's table and join announcements, to every member, and every
 * member can read every other's (its own included). At most
 * DSM_NODE_MAX_VALUES pairs per node, keys of 1..DSM_NODE_MAX_KEY bytes
 * (NUL-terminated strings, by convention "module.name"), and at most
 * DSM_NODE_MAX_VALUE_BYTES of values in all. */
enum { DSM_NODE_MAX_VALUES = 16, DSM_NODE_MAX_KEY = 31, DSM_NODE_MAX_VALUE_BYTES = 8192 };
/* DSM_ERR_STATE once joined, DSM_ERR_EXISTS for a key published twice,
 * DSM_ERR_TOO_BIG past the bounds above, DSM_ERR_INVALID for a bad key. */
DSM_API dsm_status_t dsm_node_publish(dsm_node_t *node, const char *key, const void *value, size_t len);
/* Copy member `rank`'s value for `key` into out[0..cap) and set *len to its
 * full length (DSM_ERR_TOO_BIG if longer than cap; out may be NULL when cap
 * is 0). DSM_ERR_NO_PEER if the rank is not (or not yet) a member,
 * DSM_ERR_INVALID if it published no such key. */
DSM_API dsm_status_t dsm_node_peer_value(dsm_node_t *node, uint32_t rank, const char *key, void *out,
                                         size_t cap, size_t *len);
/* Called once for every member this node comes to know, this node itself
 * included (at join, once it has its rank): for existing members when this
 * node joins, for newcomers when they are announced, and again for a rank
 * that died and came back. It runs on the runtime's control thread (or the
 * joining thread) after the fabric endpoint to the member is connected and
 * its values are readable, and before anyone is told the member can be
 * addressed, so a module can set up what its peers need (remote regions,
 * say) in time. A status other than DSM_OK marks the member unreachable.
 * Register between dsm_node_create and dsm_node_join; at most
 * DSM_NODE_MAX_JOIN_CBS. */
enum { DSM_NODE_MAX_JOIN_CBS = 8 };
typedef dsm_status_t (*dsm_peer_join_cb_t)(void *ctx, uint32_t rank);
DSM_API dsm_status_t dsm_node_on_peer_join(dsm_node_t *node, dsm_peer_join_cb_t cb, void *ctx);

/* A fabric region offered to every peer, as a heap partition or a
 * channel arena is: published under `key` as {base, size, remote key}, and
 * added on each member's join as remote region `region_id` of that rank.
 * The module keeps the offer in its per-node state (the join hook reads it
 * for the node's life); `seen`, if set, runs after each member's region is
 * added, with size 0 for a member that offered none. */
typedef struct dsm_region_offer {
    const char *key;
    uint32_t region_id;
    void (*seen)(void *ctx, uint32_t rank, uint64_t size);
    void *ctx;
    dsm_node_t *node;   /* set by dsm_node_offer_region */
} dsm_region_offer_t;
/* Publish `local` (NULL: offer nothing, only add peers' regions) and
 * register the join hook; between dsm_node_create and dsm_node_join. A
 * malformed value from a member marks it unreachable (DSM_ERR_PROTO). */
DSM_API dsm_status_t dsm_node_offer_region(dsm_node_t *node, dsm_region_offer_t *offer, dsm_region_t *local);

/* Per-node state of the layers above the runtime (heap, mechanisms), in
 * slots 0..DSM_NODE_MAX_MODULES-1: a module's slot is assigned from the
 * module table (dsm/module.h): dsm_node_add_module sets it between
 * dsm_node_create and dsm_node_join. The destructor runs in dsm_node_destroy after the fabric has
 * stopped (so no handler can still be using the state), in decreasing slot
 * order, and before the fabric is destroyed (so a module can still
 * unregister its regions). */
enum { DSM_NODE_MAX_MODULES = 16 };
typedef void (*dsm_module_destroy_t)(void *state);
/* The state in slot `id`, or NULL: O(1), lock-free (the slot is read-only once joined). */
DSM_API void *dsm_node_module(const dsm_node_t *node, int id);

/* Called when a peer is declared dead (by the coordinator or the fabric). */
typedef void (*dsm_peer_dead_cb_t)(void *ctx, uint32_t rank);
DSM_API void dsm_node_on_peer_dead(dsm_node_t *node, dsm_peer_dead_cb_t cb, void *ctx);

/* Why a node closed: 0 while open; dsmd exits on it. */
enum { DSM_NODE_OPEN = 0, DSM_NODE_STOPPED = 1, DSM_NODE_LOST = 2 };
DSM_API int dsm_node_closed(const dsm_node_t *node);
/* Block until closed or timeout; DSM_OK if closed. */
DSM_API dsm_status_t dsm_node_wait_closed(dsm_node_t *node, uint32_t timeout_ms);

/* A wake-up for a peer that waits on its own memory for something this
 * node made happen (the last arrival at a rendezvous): one one-way message
 * to `rank`, which counts it. A waiter reads dsm_node_pokes before it looks
 * and sleeps on its fabric until the count moves, so a poke that comes
 * between its look and its sleep is not lost. */
DSM_API dsm_status_t dsm_node_poke(dsm_node_t *node, uint32_t rank);
DSM_API uint64_t dsm_node_pokes(const dsm_node_t *node);

/* Closures of a mechanism (delegation's remote requests), in the same table
 * and id space as tasks: `kind` (> 0) is the mechanism's own type tag, and a
 * lookup finds an id only under the kind it was registered with, so neither
 * dsm_spawn nor another mechanism can run it under the wrong signature. The
 * mechanism casts fn back to its own type. *id gets the id (may be NULL). */
typedef void (*dsm_closure_t)(void);
DSM_API dsm_status_t dsm_register_closure(const char *name, int kind, dsm_closure_t fn, uint32_t *id);
/* The closure registered as `id` under `kind`, or NULL. */
DSM_API dsm_closure_t dsm_closure_find(uint32_t id, int kind);

/* How many functions spawned on this node still run grace_ms after they
 * were cancelled (they do not poll their stop flag). A thread cannot be
 * stopped safely from outside, so the daemon ends such a function by exiting
 * (dsmd --cancel-grace-ms). `what` (may be NULL) gets a line naming the
 * longest-overdue one. */
DSM_API int dsm_node_overdue_job(dsm_node_t *node, uint32_t grace_ms, char *what, size_t cap);
/* Raise the stop flag of every function spawned on this node that still
 * runs (as a cancel of each would); returns how many run. A daemon that is
 * told to stop calls it until none runs, or one is overdue. */
DSM_API int dsm_node_stop_jobs(dsm_node_t *node);

/* dsmd --check-addresses: the coordinator's address checker, the child
 * process that proves a joining member's worker address usable before any
 * member hands it to UCX (which aborts on malformed bytes). Serves checks
 * on file descriptor 3, the socket its parent gave it, after closing every
 * other descriptor above it; returns the process's exit code. */
DSM_API int dsm_addr_checker_main(dsm_transport_t transport);

#ifdef __cplusplus
}
#endif
#endif
