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

/* Active-message handler ids, one table for the whole library. */
enum {
    DSM_AM_RUNTIME_SPAWN = 1,
    DSM_AM_RUNTIME_STATS = 2,
    DSM_AM_RUNTIME_PING = 3,
    DSM_AM_HEAP_ALLOC = 8,
    DSM_AM_HEAP_FREE = 9,
    DSM_AM_HEAP_CHECK = 10,
    DSM_AM_DELEG_FIRST = 16,   /* 16..23 delegation */
    DSM_AM_TEST_FIRST = 56,    /* 56..63 tests and benchmarks */
};

typedef struct dsm_node_config {
    const char *coordinator;     /* "host:port" */
    const char *secret;          /* cluster secret (NUL-terminated); required */
    int32_t rank;                /* requested rank, or DSM_RANK_ANY */
    dsm_member_kind_t kind;
    dsm_transport_t transport;   /* AUTO: the one the coordinator names, if it does */
    dsm_progress_mode_t progress;
    const char *net_device;      /* see dsm_fabric_config_t */
    uint64_t partition_size;     /* bytes of memory this node serves; 0 for none */
    uint32_t heartbeat_ms;       /* 0 = 250 */
    uint32_t peer_timeout_ms;    /* missed heartbeats for this long = dead; 0 = 3000 */
    uint32_t op_timeout_ms;      /* blocking operations give up after this; 0 = 5000 */
    uint32_t join_timeout_ms;    /* 0 = 10000 */
} dsm_node_config_t;

/* Fill with defaults (rank any, daemon, auto transport, blocking progress). */
DSM_API void dsm_node_config_init(dsm_node_config_t *config);

/* Two-phase start: create the node (fabric up, partition mapped and
 * registered), let modules register their handlers, then join the cluster.
 * dsm_start() in dsm.h does all three. */
DSM_API dsm_status_t dsm_node_create(const dsm_node_config_t *config, dsm_node_t **out);
DSM_API dsm_status_t dsm_node_join(dsm_node_t *node);
/* Leave the cluster (tells the coordinator), stop threads, free everything. */
DSM_API void dsm_node_destroy(dsm_node_t *node);

DSM_API uint32_t dsm_node_rank(const dsm_node_t *node);
DSM_API dsm_fabric_t *dsm_node_fabric(dsm_node_t *node);
DSM_API const dsm_node_config_t *dsm_node_config(const dsm_node_t *node);

/* This node's partition, fabric region 0: a memfd mapped at base and
 * registered (tcp, verbs), or memory the fabric allocates itself so that shm
 * peers map it directly (shm, auto); *memfd is -1 where the fabric allocates
 * the partition itself. */
enum { DSM_REGION_PARTITION = 0 };
DSM_API void *dsm_node_partition(dsm_node_t *node, uint64_t *size, int *memfd);
/* Size of a peer's partition (0 if none or unknown). */
DSM_API uint64_t dsm_node_peer_partition_size(dsm_node_t *node, uint32_t rank);

/* Per-node state of the layers above the runtime (heap, mechanisms). The
 * destructor runs in dsm_node_destroy after the fabric has stopped (so no
 * handler can still be using the state) and before the partition is unmapped. */
typedef enum dsm_module_id {
    DSM_MODULE_HEAP = 0,
    DSM_MODULE_DELEG = 1,
    DSM_MODULE_MAX = 8,
} dsm_module_id_t;
typedef void (*dsm_module_destroy_t)(void *state);
DSM_API dsm_status_t dsm_node_set_module(dsm_node_t *node, dsm_module_id_t id, void *state,
                                 dsm_module_destroy_t destroy);
DSM_API void *dsm_node_module(const dsm_node_t *node, dsm_module_id_t id);

/* Membership. */
DSM_API dsm_status_t dsm_node_peer_state(dsm_node_t *node, uint32_t rank);
/* Live daemon ranks, ascending; returns how many (may exceed cap). */
DSM_API uint32_t dsm_node_daemons(dsm_node_t *node, uint32_t *ranks, uint32_t cap);
/* Wait until at least `count` daemons are live members. */
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
/* Names registered so far, one per call; index from 0; NULL past the end. */
DSM_API const char *dsm_registered_name(uint32_t index);

/* Run a registered function on a node; join waits for it and copies its
 * result. A spawn on a node that dies fails with DSM_ERR_PEER_DEAD. */
typedef struct dsm_task dsm_task_t;
enum { DSM_SPAWN_MAX_RESULT = 1024 * 1024 };
DSM_API dsm_status_t dsm_spawn(dsm_node_t *node, uint32_t rank, const char *fn,
                       const void *args, size_t len, dsm_task_t **out);
/* timeout_ms 0 waits forever (still bounded by peer failure detection). */
DSM_API dsm_status_t dsm_join(dsm_task_t *task, void *ret, size_t cap, size_t *ret_len, uint32_t timeout_ms);

/* Counters of this node, or of a peer (asked by message). */
DSM_API void dsm_node_stats(dsm_node_t *node, dsm_stats_t *out);
DSM_API dsm_status_t dsm_node_peer_stats(dsm_node_t *node, uint32_t rank, dsm_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
