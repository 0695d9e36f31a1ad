/* The runtime: a node (one member of a cluster), its bootstrap through a
 * coordinator, membership and failure detection, the function registry,
 * spawn/join, barrier and stats. One process may host several nodes.
 *
 * Part of the user API (dsm/dsm.h): what a program that runs on a node
 * calls. Mechanism authors and hosts (dsmd) find the rest of the runtime,
 * the two-phase start, join-time values, module state, closures and the
 * daemon's calls, in dsm/runtime.h (the SDK). */
#ifndef DSM_NODE_H
#define DSM_NODE_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/stats.h"
#include "dsm/transport.h"

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

typedef struct dsm_node_config {
    const char *coordinator;     /* "host:port" */
    const char *secret;          /* cluster secret (NUL-terminated); required */
    int32_t rank;                /* requested rank, or DSM_RANK_ANY */
    dsm_member_kind_t kind;
    dsm_transport_t transport;   /* AUTO: the one the coordinator names, if it does */
    dsm_progress_mode_t progress;
    const char *net_device;      /* see dsm_fabric_config_t */
    uint64_t partition_size;     /* bytes the heap serves here (the heap serves them); 0 for none */
    uint32_t heartbeat_ms;       /* 0 = 250 */
    uint32_t peer_timeout_ms;    /* missed heartbeats for this long = dead; 0 = 3000 */
    uint32_t op_timeout_ms;      /* blocking operations give up after this; 0 = 5000 */
    uint32_t join_timeout_ms;    /* 0 = 10000 */
    const char *chaos;           /* see dsm_fabric_config_t; NULL: $DSM_CHAOS */
} dsm_node_config_t;

/* Fill with defaults (rank any, daemon, auto transport, auto progress). */
DSM_API void dsm_node_config_init(dsm_node_config_t *config);

/* A node starts with dsm_start (dsm/dsm.h). Leave the cluster (tells the
 * coordinator), stop threads, free everything. */
DSM_API void dsm_node_destroy(dsm_node_t *node);

DSM_API uint32_t dsm_node_rank(const dsm_node_t *node);
DSM_API const dsm_node_config_t *dsm_node_config(const dsm_node_t *node);

/* Membership. */
DSM_API dsm_status_t dsm_node_peer_state(dsm_node_t *node, uint32_t rank);
/* Live daemon ranks, ascending; returns how many (may exceed cap). */
DSM_API uint32_t dsm_node_daemons(dsm_node_t *node, uint32_t *ranks, uint32_t cap);
/* Wait until at least `count` daemons are live members that every member
 * can reach (so work handed to any of them may involve any other). */
DSM_API dsm_status_t dsm_node_wait_daemons(dsm_node_t *node, uint32_t count, uint32_t timeout_ms);
/* Barrier over all live daemons (clients may not call it). */
DSM_API dsm_status_t dsm_node_barrier(dsm_node_t *node, uint32_t timeout_ms);

/* Function registry: process-wide, by name; ids are a hash of the name so
 * every node of the same binary agrees without talking. */
typedef dsm_status_t (*dsm_fn_t)(dsm_node_t *node, const void *args, size_t len,
                                 void *ret, size_t cap, size_t *ret_len);
DSM_API dsm_status_t dsm_register(const char *name, dsm_fn_t fn);
/* Task names registered so far, one per call; index from 0; NULL past the
 * end. A name that starts with '_' is a mechanism's internal task (own's
 * placement trampolines): dsm_spawn runs it, this list leaves it out. */
DSM_API const char *dsm_registered_name(uint32_t index);
/* Run a registered function on a node; join waits for it and copies its
 * result. A spawn the target refuses fails with its reason
 * (DSM_ERR_NO_HANDLER: no such function there; DSM_ERR_BUSY; DSM_ERR_PROTO:
 * it could not read it). A spawn on a node that dies, or that leaves the
 * spawn or, while its result is awaited, a ping unanswered for the op
 * timeout (a cut link), fails with DSM_ERR_PEER_DEAD. A
 * function that fails may leave a message as its result text: join returns
 * its status and copies the text too (at most cap bytes; *ret_len is the
 * full length). */
typedef struct dsm_task dsm_task_t;
enum { DSM_SPAWN_MAX_RESULT = 1024 * 1024 };

/* Spawns a node runs at once for its peers (each on a thread of its job pool):
 * one more is refused with DSM_ERR_BUSY, so a peer cannot exhaust threads.
 * A node's spawns to itself run on the same pool, with no message, outside
 * this bound; its destroy raises their stop flags and waits for them (they
 * may be joined after). */
enum { DSM_SPAWN_MAX_RUNNING = 64 };
DSM_API dsm_status_t dsm_spawn(dsm_node_t *node, uint32_t rank, const char *fn,
                       const void *args, size_t len, dsm_task_t **out);
/* timeout_ms 0 waits forever (still bounded by peer failure detection). */
DSM_API dsm_status_t dsm_join(dsm_task_t *task, void *ret, size_t cap, size_t *ret_len, uint32_t timeout_ms);
/* Whether the function has begun to run on its node (a peer says so in a
 * message as its thread starts, except for internal tasks on a peer, whose
 * start is known only by their end; a finished task has begun too). The wait
 * returns DSM_OK once it has, DSM_ERR_TIMEOUT if it has not within
 * timeout_ms (0 waits forever, as join does); the task stays joinable. */
DSM_API int dsm_task_started(dsm_task_t *task);
DSM_API dsm_status_t dsm_task_wait_started(dsm_task_t *task, uint32_t timeout_ms);
/* Ask a spawned function to stop (one message; the task must still be
 * joined). Cancellation is cooperative: the function sees its stop flag and
 * returns, by convention DSM_ERR_CANCELLED; one that never looks runs on. */
DSM_API dsm_status_t dsm_task_cancel(dsm_task_t *task);
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
