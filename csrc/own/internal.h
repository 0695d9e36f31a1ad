/* own's per-node state, shared by its files: the node glue and box
 * operations (own.c) and the mutexes serialised at their home (mutex.c). */
#ifndef DSM_OWN_INTERNAL_H
#define DSM_OWN_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "dsm/fabric.h"
#include "dsm/own.h"
#include "own/cache.h"
#include "own/colour.h"
#include "own/ids.h"

enum {
    C_MESSAGES, C_BYTES, C_HITS, C_MISSES, C_LOCAL, C_MOVES, C_BUMPS, C_FREES_SERVED, C_QUARANTINED,
    C_LOCKS, C_COUNT
};

typedef struct own_mutex_state own_mutex_state_t;
enum { OWN_MUTEX_BUCKETS = 1024 };

typedef struct own_node {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    own_cache_t *cache;
    own_colours_t *colours;
    int checks;
    uint16_t next_gen;
    uint64_t c[C_COUNT];
    /* mutexes homed here (mutex.c) */
    pthread_mutex_t mlock;
    own_mutex_state_t *mutexes[OWN_MUTEX_BUCKETS];
    /* placement and channels (spawn.c, chan.c) */
    struct own_place *place;
} own_node_t;

static inline own_node_t *own_lookup(dsm_node_t *node)
{
    return node ? dsm_node_module(node, DSM_OWN_MODULE) : NULL;
}
static inline void own_count(own_node_t *o, int which, uint64_t n)
{
    __atomic_fetch_add(&o->c[which], n, __ATOMIC_RELAXED);
}
/* The rank is assigned at join, after attach: ask the node each time. */
static inline uint32_t own_self(own_node_t *o) { return dsm_node_rank(o->node); }
static inline int own_is_local(own_node_t *o, uint64_t g)
{
    return dsm_gaddr_node(dsm_gaddr_strip(g)) == own_self(o);
}

/* mutex.c */
void own_mutexes_init(own_node_t *o);
void own_mutexes_destroy(own_node_t *o);
void own_on_lock(void *ctx, const dsm_am_msg_t *msg);
void own_on_unlock(void *ctx, const dsm_am_msg_t *msg);

/* spawn.c and chan.c: placement state, the task functions' registration
 * and the channels' handlers (registered at attach). */
dsm_status_t own_place_init(own_node_t *o);
void own_place_destroy(own_node_t *o);
void own_on_chan_send(void *ctx, const dsm_am_msg_t *msg);
void own_on_chan_recv(void *ctx, const dsm_am_msg_t *msg);

/* own.c, for chan.c's ownership transfer: take the owner (the object's
 * coloured address, its type and size) out of a box's record, which dies
 * (a borrowed, dropped, stale or forged box is refused, and nothing
 * changes); and make a new record on this node for an owner. */
dsm_status_t own_box_take_owner(own_node_t *o, dsm_box_t box, dsm_gaddr_t *g, uint32_t *type, uint64_t *size);
dsm_status_t own_box_from_owner(own_node_t *o, dsm_gaddr_t g, uint32_t type, uint64_t size, dsm_box_t *out);

#endif
