/* State of a node shared by the runtime's files (node, spawn, registry). */
#ifndef DSM_RUNTIME_NODE_INTERNAL_H
#define DSM_RUNTIME_NODE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include "dsm/node.h"

enum { DSM_NODE_MAX_DEAD_CBS = 8 };

typedef struct dsm_peer_info {
    int known;   /* was a member at some point */
    int live;
    uint16_t kind;
    uint64_t partition_size;
} dsm_peer_info_t;

struct dsm_node {
    dsm_node_config_t config;
    char *coordinator, *secret, *net_device;   /* owned copies */
    dsm_fabric_t *fabric;
    uint32_t rank;

    int memfd;
    void *partition;
    uint64_t partition_size;
    dsm_region_t *region;

    int ctl_fd;
    int wake_fd;
    pthread_t ctl_thread;
    int ctl_running;
    pthread_mutex_t send_lock;    /* one writer at a time on ctl_fd */

    pthread_mutex_t lock;         /* everything below */
    pthread_cond_t cond;
    int ready, closed, joined;
    int leaving;                  /* destroy under way: a hang-up is expected */
    dsm_peer_info_t peers[DSM_MAX_RANKS];
    int barrier_waiting, barrier_done;
    dsm_status_t barrier_status;
    dsm_peer_dead_cb_t dead_cbs[DSM_NODE_MAX_DEAD_CBS];
    void *dead_ctx[DSM_NODE_MAX_DEAD_CBS];
    int n_dead_cbs;
    int spawns_running;

    atomic_uint_fast64_t spawns_run;

    void *modules[DSM_MODULE_MAX];     /* set before join, read-only after */
    dsm_module_destroy_t module_destroy[DSM_MODULE_MAX];
};

/* spawn.c: registers the spawn handler on a node's fabric. */
dsm_status_t dsm_spawn_attach(dsm_node_t *node);
/* registry.c */
dsm_fn_t dsm_registry_find(uint32_t id, const char **name);
uint32_t dsm_registry_id(const char *name);

#endif
