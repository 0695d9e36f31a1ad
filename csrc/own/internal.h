/* own's per-node state, shared by its files: the node glue and box
 * operations (own.c) and the mutexes serialised at their home (mutex.c). */
#ifndef DSM_OWN_INTERNAL_H
#define DSM_OWN_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "dsm/fabric.h"
#include "dsm/heap_sdk.h"
#include "dsm/own_sdk.h"
#include "own/cache.h"
#include "own/colour.h"
#include "own/ids.h"
#include "own/object.h"
#include "own/spare.h"
#include "util/tslot.h"

enum {
    C_MESSAGES, C_BYTES, C_HITS, C_MISSES, C_LOCAL, C_MOVES, C_BUMPS, C_FREES_SERVED, C_QUARANTINED,
    C_COUNT
};

typedef struct own_mutex_state own_mutex_state_t;
enum { OWN_MUTEX_BUCKETS = 1024, OWN_META_SLOTS = 256 };
/* A mutex handle's colour: the kind (bits 0..7), and this bit once the
 * mutex guards a box (Mutex<Box<T>>). */
#define OWN_MUTEX_GUARDED 0x100u

/* A guarding CAS mutex's object size and type, as a node remembers them. */
typedef struct own_meta {
    uint64_t addr, size;
    uint32_t type;
} own_meta_t;

/* Counters: one row per thread slot (util/tslot.h: a slot has one writer at
 * a time, the thread that holds it, so its adds need no atomic instruction),
 * and the shared row `c` (atomic adds) for threads beyond OWN_COUNT_SLOTS. A
 * reader sums them all. */
enum { OWN_COUNT_SLOTS = DSM_TSLOTS };
typedef struct own_counts {
    uint64_t v[C_COUNT];
    uint64_t pad[16 - C_COUNT];   /* rows 128 bytes apart: two threads' adds share no cache line */
} own_counts_t;

typedef struct own_node {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    own_cache_t *cache;
    own_colours_t *colours;
    int checks;
    uint16_t next_gen;
    uint64_t c[C_COUNT];
    own_counts_t slot[OWN_COUNT_SLOTS];
    /* mutexes homed here (mutex.c) */
    pthread_mutex_t mlock;
    own_mutex_state_t *mutexes[OWN_MUTEX_BUCKETS];
    /* placement and channels (spawn.c, chan.c) */
    struct own_place *place;
    own_meta_t meta[OWN_META_SLOTS];   /* under mlock */
    /* This node's partition as own reads its objects (own.c, obj_local):
     * learned once from the heap (lbase published last, with release);
     * offsets [llo, lhi) are heap blocks. */
    uint8_t *lbase;
    uint64_t llo, lhi;
    uint32_t lrank;     /* this node's rank, learned with lbase */
    /* The same bounds as the fast paths test them (own_bounds_t), set
     * before lbase: lat is published (release) before it. */
    uint8_t *lat;       /* lbase + llo */
    uint64_t lkey;      /* dsm_gaddr_make(lrank, llo) */
    uint64_t lspan;     /* lhi - llo */
    own_spares_t *spares;   /* one per thread slot (spare.h) */
} own_node_t;

/* This thread's spares on node o, or NULL (a thread beyond the slots). */
static inline own_spares_t *own_spares(own_node_t *o)
{
    unsigned s = dsm_tslot();
    return o->spares != NULL && s <= DSM_TSLOTS ? &o->spares[s - 1] : NULL;
}

static inline own_node_t *own_lookup(dsm_node_t *node)
{
    return node ? dsm_module_state(node, &dsm_own_module) : NULL;
}
/* counters.c: own_count for a thread with no slot yet or none free. */
void own_count_slow(own_node_t *o, int which, uint64_t n);
/* A thread holding a slot adds inline; the rest is out of line, so a fast
 * path that counts needs no stack frame for the call. */
static inline void own_count(own_node_t *o, int which, uint64_t n)
{
    unsigned s = dsm_tslot_cur;
    if (s - 1u < OWN_COUNT_SLOTS)
        dsm_tslot_add(&o->slot[s - 1].v[which], n);
    else
        own_count_slow(o, which, n);
}
/* Counter `which`: the shared row and every slot. */
uint64_t own_counter(own_node_t *o, int which);
/* The rank is assigned at join, after attach: ask the node each time. */
static inline uint32_t own_self(own_node_t *o) { return dsm_node_rank(o->node); }
static inline int own_is_local(own_node_t *o, uint64_t g)
{
    return dsm_gaddr_node(dsm_gaddr_strip(g)) == own_self(o);
}

/* own.c: this node's memory at g (len bytes inside its heap blocks), or
 * NULL if g is not local or not inside them; no heap call once the blocks'
 * bounds are learned. Whether the bytes are allocated is the caller's to
 * check (as with dsm_local_ptr). */
void *own_local_at(own_node_t *o, dsm_gaddr_t g, uint64_t len);

/* The fast paths' local test (guard.c): this node's heap bounds as
 * own_local_at learned them, copied once per call (they are written once
 * and never change), so a lock's fast path checks its lock word and its
 * object against one copy. An address is local and inside the blocks iff
 * its uncoloured value minus key (this node's rank and first block offset)
 * is below span: one subtraction and one compare cover the node, both
 * bounds (a lower address wraps to a huge value) and, for a handle whose
 * colour is added to key, the colour too. own_bounds_get: 0 if they are
 * not learned yet (the slow path learns them). */
typedef struct own_bounds {
    uint8_t *at;   /* the memory at key */
    uint64_t key, span;
} own_bounds_t;
static inline int own_bounds_get(own_node_t *o, own_bounds_t *b)
{
    b->at = __atomic_load_n(&o->lat, __ATOMIC_ACQUIRE);
    b->key = o->lkey;
    b->span = o->lspan;
    return b->at != NULL;
}
/* Memory at distance d past key, len bytes, or NULL if not all inside. */
static inline void *own_bounds_off(const own_bounds_t *b, uint64_t d, uint64_t len)
{
    return d < b->span && b->span - d >= len ? b->at + d : NULL;
}
/* This node's memory at g (its colour ignored), len bytes, or NULL if g
 * is not local or the bytes are not inside its heap blocks. */
static inline void *own_bounds_at(const own_bounds_t *b, dsm_gaddr_t g, uint64_t len)
{
    return own_bounds_off(b, dsm_gaddr_strip(g) - b->key, len);
}
static inline void *own_fast_local(own_node_t *o, dsm_gaddr_t g, uint64_t len)
{
    own_bounds_t b;
    return own_bounds_get(o, &b) ? own_bounds_at(&b, g, len) : NULL;
}

/* own.c: the borrow cores on an object already found (in an owner record
 * or a mutex's grant; r->g nonzero), shared by boxes and guards. */
dsm_status_t own_borrow_at(own_node_t *o, const own_record_t *r, dsm_own_ref_t *out);
dsm_status_t own_borrow_mut_at(own_node_t *o, const own_record_t *r, dsm_own_mut_t *out);
dsm_status_t own_mut_finish(own_node_t *o, dsm_own_mut_t *m, dsm_gaddr_t *g);
/* Take a box's object out of its owner record (which dies): *r says where
 * the object is. The box must not be borrowed (with checks on). */
dsm_status_t own_box_take(own_node_t *o, dsm_own_box_t box, own_record_t *r);
/* Free an object (here or at its home, waiting for the answer). */
dsm_status_t own_object_free(own_node_t *o, dsm_gaddr_t g, uint32_t type);

/* mutex.c: the guarded object a mutex carries (Mutex<Box<T>>, guard.c);
 * g 0: the mutex guards nothing. */
typedef struct own_grant {
    uint64_t g, size;
    uint32_t type;
} own_grant_t;
/* Lock or unlock a mutex (its handle checked). A guarding mutex takes a
 * grant, filled by the lock with the guarded object's place and given back
 * by the unlock (changed: a mutable borrow changed its address); any other
 * takes NULL. */
dsm_status_t own_mutex_lock_grant(own_node_t *o, dsm_own_mutex_t m, own_grant_t *grant);
dsm_status_t own_mutex_unlock_grant(own_node_t *o, dsm_own_mutex_t m, const own_grant_t *grant, int changed);
/* The local fast path of a guarding CAS mutex homed on this node: 1 if
 * the lock was taken (one swap: *grant filled) or given back with the
 * object's address g (a check and a store), 0 to take the slow path (a
 * remote or delegated mutex, a held one, a malformed word). The lock word
 * holds the object's coloured address while the mutex is free and
 * OWN_CAS_HELD while it is held (mutex.c says more); the object's size and
 * type follow in words 2 and 3. Inline: a kv operation takes both, and the
 * two calls were 2% of it. */
#define OWN_CAS_HELD 1ull
enum { OWN_MUTEX_BYTES = 32 };
static inline uint64_t *own_cas_box_local_word(const own_bounds_t *b, dsm_own_mutex_t m)
{
    /* the handle's colour is part of what must match (own_bounds_t); the
       first block's offset is 64 KiB aligned, so d & 7 is the offset's */
    uint64_t d = m - (((uint64_t)(DSM_OWN_MUTEX_CAS | OWN_MUTEX_GUARDED) << DSM_GADDR_COLOUR_SHIFT) | b->key);
    return (d & 7) ? NULL : own_bounds_off(b, d, OWN_MUTEX_BYTES);
}
static inline int own_mutex_lock_local(const own_bounds_t *b, dsm_own_mutex_t m, own_grant_t *grant)
{
    uint64_t *w = own_cas_box_local_word(b, m);
    if (w == NULL)
        return 0;
    uint64_t old = __atomic_exchange_n(w, OWN_CAS_HELD, __ATOMIC_ACQUIRE);
    if (old == OWN_CAS_HELD)
        return 0;   /* held: the slow path waits (a swap over OWN_CAS_HELD changed nothing) */
    uint64_t size = __atomic_load_n(&w[2], __ATOMIC_RELAXED), type = __atomic_load_n(&w[3], __ATOMIC_RELAXED);
    if (dsm_gaddr_offset(old) == 0 || size > OWN_MAX_SIZE || type == 0 || type > OWN_MAX_TYPE) {
        __atomic_store_n(w, old, __ATOMIC_RELEASE);   /* give the word back: the slow path reports it */
        return 0;
    }
    *grant = (own_grant_t){.g = old, .size = size, .type = (uint32_t)type};
    return 1;
}
static inline int own_mutex_unlock_local(const own_bounds_t *b, dsm_own_mutex_t m, uint64_t g)
{
    uint64_t *w = own_cas_box_local_word(b, m);
    /* Only the holder moves the word off OWN_CAS_HELD (a waiter's swap
     * leaves it), so a check then a store is the unlock's swap without the
     * atomic read-modify-write. */
    if (w == NULL || __atomic_load_n(w, __ATOMIC_RELAXED) != OWN_CAS_HELD)
        return 0;   /* not held: the slow path reports it */
    __atomic_store_n(w, g, __ATOMIC_RELEASE);
    return 1;
}
/* A guarding CAS mutex's remembered size and type read again (after a
 * header mismatch); DSM_ERR_BAD_ADDR for the delegated kind. */
dsm_status_t own_mutex_refresh_grant(own_node_t *o, dsm_own_mutex_t m, own_grant_t *grant);
/* On the home, with the mutex free and guarding nothing: it guards *grant
 * now (grant->g 0 only checks it could), and *out (if not NULL) is its
 * guarding handle. */
dsm_status_t own_mutex_adopt(own_node_t *o, dsm_own_mutex_t m, const own_grant_t *grant, dsm_own_mutex_t *out);
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
/* A box whose object and owner record live on `rank` (this node, or one
 * ALLOC message to that home). */
dsm_status_t own_box_alloc_at(dsm_node_t *node, uint32_t rank, uint32_t type, size_t size, dsm_own_box_t *out);
dsm_status_t own_box_take_owner(own_node_t *o, dsm_own_box_t box, dsm_gaddr_t *g, uint32_t *type, uint64_t *size);
dsm_status_t own_box_from_owner(own_node_t *o, dsm_gaddr_t g, uint32_t type, uint64_t size, dsm_own_box_t *out);
/* A transfer whose owner stays on this node (chan.c, a send on a channel
 * homed here): the box's record, if it is here, keeps its object and takes
 * the next generation, so the old handle is refused from then on as a
 * dead record's is, and *next names the record; *type and *size are the
 * object's. A claim and two stores, where a take and a new record are a
 * claim, a kill, a spare's round trip and a record's four stores. Refused
 * as own_box_take_owner refuses; DSM_ERR_INVALID (nothing changed) if the
 * record is not here. */
dsm_status_t own_box_retag(own_node_t *o, dsm_own_box_t box, dsm_own_box_t *next, uint32_t *type, uint64_t *size);

/* Own's calls that only own and its tests make (not exported). Attach own to a node between dsm_node_create and dsm_node_join, after
 * the heap (dsm_start does both). */
dsm_status_t dsm_own_attach(dsm_node_t *node);
/* Own tasks running on this node; the node with the most task slots free. */
uint32_t dsm_own_tasks_running(dsm_node_t *node);
dsm_status_t dsm_own_vacant_node(dsm_node_t *node, uint32_t *rank);
/* Evict this node's unreferenced cached copies now; returns how many. */
uint64_t dsm_own_cache_flush(dsm_node_t *node);

#endif
