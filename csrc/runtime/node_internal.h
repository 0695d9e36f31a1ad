/* State of a node shared by the runtime's files (node, values, spawn,
 * registry). */
#ifndef DSM_RUNTIME_NODE_INTERNAL_H
#define DSM_RUNTIME_NODE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include "dsm/node.h"
#include "dsm/runtime.h"
#include "runtime/ctl_seal.h"
#include "runtime/ctl_wire.h"

enum { DSM_NODE_MAX_DEAD_CBS = 8 };

typedef struct dsm_peer_info {
    int known;   /* was a member at some point */
    int live;
    int ready;   /* every member can reach it (the coordinator said so) */
    uint16_t kind;
} dsm_peer_info_t;

struct dsm_node {
    dsm_node_config_t config;
    char *coordinator, *secret, *net_device;   /* owned copies */
    dsm_fabric_t *fabric;
    uint32_t rank;

    int ctl_fd;
    int wake_fd;
    pthread_t ctl_thread;
    int ctl_running;
    pthread_mutex_t send_lock;    /* one writer at a time on ctl_fd; the session's send_seq */
    /* From the coordinator's WELCOME on, every control frame both ways is
     * sealed (ctl_seal.h); recv_seq is the control thread's. */
    int sealed;
    dsm_ctl_session_t session;
    _Atomic uint64_t frames_refused;   /* frames that failed their seal check, dropped */
    /* The control thread's: leavers whose LEFT_ACK waits until no thread
     * here is inside a call toward them (dsm_fabric_peer_busy). */
    uint8_t left_unacked[DSM_MAX_RANKS];
    unsigned n_left_unacked;

    pthread_mutex_t lock;         /* everything below */
    pthread_cond_t cond;
    int ready, closed, joined;
    int leaving;                  /* destroy under way: a hang-up is expected */
    int left;                     /* the coordinator's LEFT for this node: every member let it go */
    dsm_peer_info_t peers[DSM_MAX_RANKS];
    int barrier_waiting, barrier_done;
    dsm_status_t barrier_status;
    dsm_peer_dead_cb_t dead_cbs[DSM_NODE_MAX_DEAD_CBS];
    void *dead_ctx[DSM_NODE_MAX_DEAD_CBS];
    int n_dead_cbs;
    int spawns_running;          /* peers' spawns running here (DSM_SPAWN_MAX_RUNNING bounds them) */
    int local_running;           /* this node's spawns to itself running here (unbounded) */
    struct spawn_entry *jobs;    /* spawn.c: functions running here, by (caller, token) */
    struct spawn_entry *tasks;   /* spawn.c: this node's spawns on peers, told apart by token */
    struct dsm_spawn_pool *pool; /* spawn_pool.c: the threads that run peers' spawns here */

    atomic_uint_fast64_t spawns_run;
    atomic_uint_fast64_t pokes;   /* one-way pings received (dsm_node_pokes) */

    void *modules[DSM_NODE_MAX_MODULES];     /* set before join, read-only after */
    dsm_module_destroy_t module_destroy[DSM_NODE_MAX_MODULES];

    /* values.c: what this node publishes (set before join, read-only after),
     * every member's values (owned copies, under lock), and the join hooks
     * (set before join, read-only after). */
    dsm_ctl_values_t *published;
    dsm_ctl_values_t *values[DSM_MAX_RANKS];
    dsm_peer_join_cb_t join_cbs[DSM_NODE_MAX_JOIN_CBS];
    void *join_ctx[DSM_NODE_MAX_JOIN_CBS];
    int n_join_cbs;
};

/* values.c: record a member's values (replacing older ones), then run the
 * join hooks for it; the first failing hook's status is returned. */
dsm_status_t dsm_node_member_values(dsm_node_t *node, uint32_t rank, const dsm_ctl_values_t *values);
dsm_status_t dsm_node_run_join_hooks(dsm_node_t *node, uint32_t rank);
/* module.c: DSM_OK unless this node and member `rank` both have modules
 * and their tables differ (logged, naming both). */
dsm_status_t dsm_node_modules_check(dsm_node_t *node, uint32_t rank);
/* values.c: free every copy (dsm_node_destroy). */
void dsm_node_values_free(dsm_node_t *node);
/* spawn.c: registers the spawn handler on a node's fabric (and makes its
 * job pool); dsm_spawn_detach, at destroy once no job runs and the fabric
 * has stopped, joins the pool's threads and fails the spawns still waiting
 * for a peer's result (DSM_ERR_CLOSED), so that a later join returns. */
dsm_status_t dsm_spawn_attach(dsm_node_t *node);
void dsm_spawn_detach(dsm_node_t *node);
/* spawn.c: a task whose request to a peer is `request` as it is, not one
 * dsm_spawn builds (tests: a malformed spawn comes back refused). */
dsm_status_t dsm_spawn_raw(dsm_node_t *node, uint32_t rank, const void *request, size_t len, dsm_task_t **out);
/* spawn_pool.c: a pool of job threads (see there). run hands fn(arg) to a
 * waiting thread or to a new one; DSM_ERR_CLOSED once destroy began.
 * destroy lets queued jobs run, then joins every thread. */
typedef struct dsm_spawn_pool dsm_spawn_pool_t;
dsm_spawn_pool_t *dsm_spawn_pool_new(void);
dsm_status_t dsm_spawn_pool_run(dsm_spawn_pool_t *pool, void (*fn)(void *arg), void *arg);
void dsm_spawn_pool_destroy(dsm_spawn_pool_t *pool);
/* The pool's threads, and those of them waiting for a job (tests). */
unsigned dsm_spawn_pool_threads(dsm_spawn_pool_t *pool);
unsigned dsm_spawn_pool_idle(dsm_spawn_pool_t *pool);
/* registry.c */
dsm_fn_t dsm_registry_find(uint32_t id, const char **name);
uint32_t dsm_registry_id(const char *name);

#endif
