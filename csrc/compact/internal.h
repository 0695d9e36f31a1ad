/* A node's CoRM state, shared by the node glue (node.c: attach, handlers,
 * peers' stores and mirrors, the store's thread) and the client calls
 * (client.c). */
#ifndef DSM_COMPACT_INTERNAL_H
#define DSM_COMPACT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "compact/store.h"
#include "dsm/compact.h"
#include "dsm/fabric.h"
#include "dsm/node.h"

/* A peer's store as this node knows it. On shm, `mirror` maps the peer's
 * memfd read-only at matching offsets and follows its remap notices, so a
 * one-sided read is a load; elsewhere reads go through the fabric. */
typedef struct corm_peer {
    int attached;               /* attached the module (may mirror our store) */
    int serves;                 /* published a store */
    uint64_t size;
    uint32_t block_size;
    uint16_t key_tag;
    int memfd;                  /* our copy of the peer's memfd (-1 none) */
    uint8_t *mirror;            /* NULL: no mapping, use the fabric */
} corm_peer_t;

typedef struct corm_job {
    uint32_t rank;
    uint64_t request_id;
    int cls;
    struct corm_job *next;
} corm_job_t;

struct dsm_corm {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    dsm_transport_t transport;
    dsm_corm_config_t cfg;
    dsm_corm_store_t *store;    /* NULL on a client-only node */
    dsm_region_t *region;
    uint16_t key_tag;
    corm_peer_t peers[DSM_MAX_RANKS];
    /* the store's thread: triggered compaction rounds and remote requests */
    pthread_t thread;
    int thread_started, stopping, triggered;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    corm_job_t *jobs;
    /* one-sided reads that saw a locked or torn copy and retried (for
     * tests and benchmarks: the races they show did happen) */
    uint64_t seen_locked, seen_torn;
};

/* Read `len` bytes at `offset` of `rank`'s store range one-sidedly: this
 * node's own memory, a mirror, or a fabric get. */
dsm_status_t dsm_corm_fetch(dsm_corm_t *c, uint32_t rank, uint64_t offset, void *dst, size_t len);

#endif
