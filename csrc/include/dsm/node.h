/* The runtime: a node (one member of a cluster), its bootstrap through a
 * coordinator, membership and failure detection, the function registry,
 * spawn/join, barrier and stats. One process may host several nodes. */
#ifndef DSM_NODE_H
#define DSM_NODE_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/stats.h"
#include "dsm/fabric.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsm_node dsm_node_t;

/* Daemons serve memory and run work and take ranks [0, DSM_MAX_DAEMONS);
 * clients (the Python driver, tools) get ranks from DSM_FIRST_CLIENT_RANK. */
enum {
    DSM_MAX_DAEMONS = 128,
    DSM_FIRST_CLIENT_RANK = 128,
    DSM_MAX_RANKS = 256,
    DSM_RANK_ANY = -1,
};

typedef enum dsm_member_kind {
    DSM_MEMBER_DAEMON = 0,
    DSM_MEMBER_CLIENT = 1,
} dsm_member_kind_t;

/* The runtime's active-message handler ids: its block is 1..7 of the
 * fabric's handler space (see fabric.h for how the space is shared; the
 * modules above get theirs from the module table, dsm/module.h). */
enum {
    DSM_AM_RUNTIME_SPAWN = 1,
    DSM_AM_RUNTIME_STATS = 2,
    DSM_AM_RUNTIME_PING = 3,
    DSM_AM_RUNTIME_CANCEL = 4,
    DSM_AM_RUNTIME_LAST = 7,
};

typedef struct dsm_node_config {
    const char *coordinator;     /* "host:port" */
    const char *secret;          /* cluster secret (NUL-terminated); required */
    int32_t rank;                /* requested rank, or DSM_RANK_ANY */
    dsm_member_kind_t kind;
    dsm_transport_t transport;   /* AUTO: the one the coordinator names, if it does */
    dsm_progress_mode_t progress;
    const char *net_device;      /* see dsm_fabric_config_t */
    uint64_t partition_size;     /* bytes the heap serves here (dsm_heap_attach reads it); 0 for none */
    uint32_t heartbeat_ms;       /* 0 = 250 */
    uint32_t peer_timeout_ms;    /* missed heartbeats for this long = dead; 0 = 3000 */
    uint32_t op_timeout_ms;      /* blocking operations give up after this; 0 = 5000 */
    uint32_t join_timeout_ms;    /* 0 = 10000 */
    const char *chaos;           /* see dsm_fabric_config_t; NULL: $DSM_CHAOS */
} dsm_node_config_t;

/* Fill with defaults (rank any, daemon, auto transport, auto progress). */
DSM_API void dsm_node_config_init(dsm_node_config_t *config);

/* Two-phase start: create the node (fabric up), let modules register their
 * handlers and publish their values, then join the cluster. dsm_start() in
 * dsm.h does all three. */
DSM_API dsm_status_t dsm_node_create(const dsm_node_config_t *config, dsm_node_t **out);
DSM_API dsm_status_t dsm_node_join(dsm_node_t *node);
/* Leave the cluster (tells the coordinator), stop threads, free everything. */
DSM_API void dsm_node_destroy(dsm_node_t *node);

DSM_API uint32_t dsm_node_rank(const dsm_node_t *node);
DSM_API dsm_fabric_t *dsm_node_fabric(dsm_node_t *node);
DSM_API const dsm_node_config_t *dsm_node_config(const dsm_node_t *node);

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

/* Per-node state of the layers above the runtime (heap, mechanisms), in
 * slots 0..DSM_NODE_MAX_MODULES-1: a module's slot is assigned from the
 * module table (dsm/module.h, dsm_node_add_module); a slot already taken is
 * refused with DSM_ERR_EXISTS. Set between dsm_node_create and dsm_node_join (DSM_ERR_STATE
 * after). The destructor runs in dsm_node_destroy after the fabric has
 * stopped (so no handler can still be using the state), in decreasing slot
 * order, and before the fabric is destroyed (so a module can still
 * unregister its regions). */
enum { DSM_NODE_MAX_MODULES = 8 };
typedef void (*dsm_module_destroy_t)(void *state);
DSM_API dsm_status_t dsm_node_set_module(dsm_node_t *node, int id, void *state, dsm_module_destroy_t destroy);
/* The state in slot `id`, or NULL: O(1), lock-free (the slot is read-only once joined). */
DSM_API void *dsm_node_module(const dsm_node_t *node, int id);

/* Membership. */
DSM_API dsm_status_t dsm_node_peer_state(dsm_node_t *node, uint32_t rank);
/* Live daemon ranks, ascending; returns how many (may exceed cap). */
DSM_API uint32_t dsm_node_daemons(dsm_node_t *node, uint32_t *ranks, uint32_t cap);
/* Wait until at least `count` daemons are live members that every member
 * can reach (so work handed to any of them may involve any other). */
DSM_API dsm_status_t dsm_node_wait_daemons(dsm_node_t *node, uint32_t count, uint32_t timeout_ms);
/* Called when a peer is declared dead (by the coordinator or the fabric). */
typedef void (*dsm_peer_dead_cb_t)(void *ctx, uint32_t rank);
DSM_API void dsm_node_on_peer_dead(dsm_node_t *node, dsm_peer_dead_cb_t cb, void *ctx);
/* Why a node closed: 0 while open; dsmd exits on it. */
enum { DSM_NODE_OPEN = 0, DSM_NODE_STOPPED = 1, DSM_NODE_LOST = 2 };
DSM_API int dsm_node_closed(const dsm_node_t *node);
/* Block until closed or timeout; DSM_OK if closed. */
DSM_API dsm_status_t dsm_node_wait_closed(dsm_node_t *node, uint32_t timeout_ms);

/* Barrier over all live daemons (clients may not call it). */
DSM_API dsm_status_t dsm_node_barrier(dsm_node_t *node, uint32_t timeout_ms);

/* Function registry: process-wide, by name; ids are a hash of the name so
 * every node of the same binary agrees without talking. */
typedef dsm_status_t (*dsm_fn_t)(dsm_node_t *node, const void *args, size_t len,
                                 void *ret, size_t cap, size_t *ret_len);
DSM_API dsm_status_t dsm_register(const char *name, dsm_fn_t fn);
DSM_API dsm_status_t dsm_lookup(const char *name, uint32_t *id);
/* Task names registered so far, one per call; index from 0; NULL past the
 * end. A name that starts with '_' is a mechanism's internal task (own's
 * placement trampolines): dsm_spawn runs it, this list leaves it out. */
DSM_API const char *dsm_registered_name(uint32_t index);
/* Closures of a mechanism (delegation's remote requests), in the same table
 * and id space as tasks: `kind` (> 0) is the mechanism's own type tag, and a
 * lookup finds an id only under the kind it was registered with, so neither
 * dsm_spawn nor another mechanism can run it under the wrong signature. The
 * mechanism casts fn back to its own type. *id gets the id (may be NULL). */
typedef void (*dsm_closure_t)(void);
DSM_API dsm_status_t dsm_register_closure(const char *name, int kind, dsm_closure_t fn, uint32_t *id);
/* The closure registered as `id` under `kind`, or NULL. */
DSM_API dsm_closure_t dsm_closure_find(uint32_t id, int kind);

/* Run a registered function on a node; join waits for it and copies its
 * result. A spawn on a node that dies fails with DSM_ERR_PEER_DEAD. A
 * function that fails may leave a message as its result text: join returns
 * its status and copies the text too (at most cap bytes; *ret_len is the
 * full length). */
typedef struct dsm_task dsm_task_t;
enum { DSM_SPAWN_MAX_RESULT = 1024 * 1024 };

/* Spawns a node runs at once for its peers (each on a thread of its own):
 * one more is refused with DSM_ERR_BUSY, so a peer cannot exhaust threads. */
enum { DSM_SPAWN_MAX_RUNNING = 64 };
DSM_API dsm_status_t dsm_spawn(dsm_node_t *node, uint32_t rank, const char *fn,
                       const void *args, size_t len, dsm_task_t **out);
/* timeout_ms 0 waits forever (still bounded by peer failure detection). */
DSM_API dsm_status_t dsm_join(dsm_task_t *task, void *ret, size_t cap, size_t *ret_len, uint32_t timeout_ms);
/* Ask a spawned function to stop (one message; the task must still be
 * joined). Cancellation is cooperative: the function sees its stop flag and
 * returns, by convention DSM_ERR_CANCELLED; one that never looks runs on. */
DSM_API dsm_status_t dsm_task_cancel(dsm_task_t *task);
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

/* The stop flag of the spawned function running on the calling thread (a
 * flag that never turns outside a spawn). A long function polls it with
 * dsm_stop_requested, and hands the pointer to the threads it starts. */
typedef struct dsm_stop dsm_stop_t;
DSM_API const dsm_stop_t *dsm_spawn_stop(void);
DSM_API int dsm_stop_requested(const dsm_stop_t *stop);

/* Counters of this node, or of a peer (asked by message). */
DSM_API void dsm_node_stats(dsm_node_t *node, dsm_stats_t *out);
DSM_API dsm_status_t dsm_node_peer_stats(dsm_node_t *node, uint32_t rank, dsm_stats_t *out);
/* The handler id (the index of dsm_stats_t's per-handler counters) of
 * message `rel` of the mechanism named `module` ("heap", "deleg", ...),
 * as the module table assigns it; -1 for an unknown module or message. */
DSM_API int dsm_module_handler_id(const char *module, unsigned rel);

#ifdef __cplusplus
}
#endif
#endif
