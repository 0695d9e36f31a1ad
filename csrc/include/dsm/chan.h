/* LOCO's channel objects (csrc/chan) as a program that drives a cluster
 * uses them: concurrent objects whose state is spread over the
 * participants' network memory, built from one-sided operations.
 *
 * Every participant builds the object under the same name and arguments;
 * the create call joins and waits, bounded, until the others have built
 * theirs, and names the one that did not. By default a node's
 * participants are the live daemons (a client among them too); a group
 * (dsm_chan_group) names other ones, such as several client processes
 * that share objects among themselves, as pydsm.chan does.
 *
 * Part of the user API (dsm/dsm.h): the groups and the objects atomic_var,
 * owned_var, shared_region, sst, barrier, ticket_lock, ringbuffer,
 * shared_queue and kvstore. Endpoints, ack keys, fences and the objects'
 * tuning are in dsm/chan_sdk.h. */
#ifndef DSM_CHAN_H
#define DSM_CHAN_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/node.h"
#include "dsm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    DSM_CHAN_NAME_MAX = 127,       /* bytes of a full channel name */
    DSM_CHAN_REGION_NAME_MAX = 15, /* bytes of a region's name */
    DSM_CHAN_MAX_REGIONS = 8,      /* regions per endpoint */
    DSM_CHAN_MAX_PEERS = 64,       /* participants per channel */
    DSM_CHAN_ACK_BITS = 128,       /* operations one thread has in flight */
    DSM_CHAN_MAX_GROUPS = 16,      /* groups one node defines at once */
};

/* What an endpoint is: peers must agree, or the name collides. */
typedef enum dsm_chan_kind {
    DSM_CHAN_PLAIN = 1,
    DSM_CHAN_ATOMIC_VAR = 2,
    DSM_CHAN_OWNED_VAR = 3,
    DSM_CHAN_SHARED_REGION = 4,
    DSM_CHAN_SST = 5,
    DSM_CHAN_BARRIER = 6,
    DSM_CHAN_TICKET_LOCK = 7,
    DSM_CHAN_RINGBUFFER = 8,
    DSM_CHAN_SHARED_QUEUE = 9,
    DSM_CHAN_KVSTORE = 10,
} dsm_chan_kind_t;

/* A group: the channels this node creates whose name starts with
 * "<prefix>/" take `ranks` (n of them, this node's among them, any member
 * kind) as their participants instead of the live daemons. Every
 * participant defines the same group. n = 0 forgets the group; channels
 * made in it keep their participants. DSM_ERR_EXISTS if the prefix names
 * a group of other ranks here, DSM_ERR_TOO_BIG past DSM_CHAN_MAX_GROUPS,
 * DSM_ERR_INVALID for a bad prefix, a repeated rank or ranks without this
 * node's. */
DSM_API dsm_status_t dsm_chan_group(dsm_node_t *node, const char *prefix, const uint32_t *ranks, uint32_t n);

/* A set of this thread's operations in flight (dsm/chan_sdk.h); the user
 * API passes NULL where one is asked for, and then waits. */
typedef struct dsm_chan_ack dsm_chan_ack_t;

/* Fences: writes this thread issued before are placed (not only complete)
 * before anything it issues after (dsm/chan_sdk.h has the calls). */
typedef enum dsm_chan_scope {
    DSM_CHAN_FENCE_PAIR = 0,
    DSM_CHAN_FENCE_THREAD = 1,
    DSM_CHAN_FENCE_GLOBAL = 2,
    DSM_CHAN_FENCE_NONE = 3,   /* for a release: the caller has fenced what matters */
} dsm_chan_scope_t;

/* Each object is an endpoint of its own kind: created, joined and made
 * ready by one call (timeout_ms bounds the wait for the other
 * participants, 0: the node's join timeout; DSM_ERR_TIMEOUT names one
 * that did not come in dsm_last_error, DSM_ERR_EXISTS one whose object
 * of this name is of another kind, DSM_ERR_INVALID one whose arguments
 * differ, naming both: the object's shape, as a kvstore's value size,
 * slots and locks, is compared, not only its bytes), so every
 * participant calls it with the same name and arguments; destroyed with
 * its _destroy once the others are done with it. A participant is named
 * by its index in rank order. */

/* atomic_var: one official 64-bit word hosted by participant `host`; every
 * access, the host's own too, goes through the fabric's atomics. */
typedef struct dsm_chan_atomic dsm_chan_atomic_t;
DSM_API dsm_status_t dsm_chan_atomic_create(dsm_node_t *node, const char *name, uint32_t host,
                                            uint32_t timeout_ms, dsm_chan_atomic_t **out);
DSM_API dsm_status_t dsm_chan_atomic_fetch_add(dsm_chan_atomic_t *a, uint64_t add, uint64_t *old);
DSM_API dsm_status_t dsm_chan_atomic_cas(dsm_chan_atomic_t *a, uint64_t expected, uint64_t desired,
                                         uint64_t *old);
DSM_API dsm_status_t dsm_chan_atomic_load(dsm_chan_atomic_t *a, uint64_t *value);
DSM_API void dsm_chan_atomic_destroy(dsm_chan_atomic_t *a);

/* owned_var: one writer (participant `owner`), every participant reads.
 * Push: the owner's store writes every reader's copy and a read is local;
 * pull: a read fetches the owner's copy. A value larger than 8 bytes
 * (at most 4096) carries a version and a checksum and a read retries
 * until they agree, for at most the settle time (default: the node's op
 * timeout), then gives DSM_ERR_TIMEOUT. */
typedef struct dsm_chan_owned dsm_chan_owned_t;
typedef enum dsm_chan_mode { DSM_CHAN_PUSH = 0, DSM_CHAN_PULL = 1 } dsm_chan_mode_t;
DSM_API dsm_status_t dsm_chan_owned_create(dsm_node_t *node, const char *name, uint32_t owner, size_t size,
                                           dsm_chan_mode_t mode, uint32_t timeout_ms, dsm_chan_owned_t **out);
/* Owner only (DSM_ERR_STATE elsewhere). Push: key (NULL: wait for the
 * pushes) gets the pushes' bits. */
DSM_API dsm_status_t dsm_chan_owned_store(dsm_chan_owned_t *v, const void *src, dsm_chan_ack_t *key);
DSM_API dsm_status_t dsm_chan_owned_load(dsm_chan_owned_t *v, void *dst);
DSM_API void dsm_chan_owned_destroy(dsm_chan_owned_t *v);

/* shared_region: `size` bytes hosted on every participant, read and
 * written one-sidedly with no consistency beyond the fabric's. put and
 * get reach participant `peer`'s copy (this node's own: a local copy) and
 * wait for completion; DSM_ERR_BAD_ADDR past the region's end. */
typedef struct dsm_chan_region dsm_chan_region_t;
DSM_API dsm_status_t dsm_chan_region_create(dsm_node_t *node, const char *name, size_t size,
                                            uint32_t timeout_ms, dsm_chan_region_t **out);
DSM_API dsm_status_t dsm_chan_region_put(dsm_chan_region_t *r, uint32_t peer, uint64_t offset, const void *src,
                                         size_t len);
DSM_API dsm_status_t dsm_chan_region_get(dsm_chan_region_t *r, uint32_t peer, uint64_t offset, void *dst,
                                         size_t len);
/* This node's copy, its bytes in *len (may be NULL): loads and stores
 * reach it directly (pydsm's zero-copy view); valid until the destroy,
 * which gives the bytes to the next channel. */
DSM_API void *dsm_chan_region_mine(dsm_chan_region_t *r, size_t *len);
DSM_API void dsm_chan_region_destroy(dsm_chan_region_t *r);

/* sst: a shared state table, one row of row_size bytes (1..4096) per
 * participant, each an owned value its participant writes (store_mine,
 * locally) and pushes to every peer's copy (push_broadcast: key gets the
 * pushes' bits; NULL waits for them). A read is local and, for rows over
 * 8 bytes, checksum-settled as owned_var's load. */
typedef struct dsm_chan_sst dsm_chan_sst_t;
DSM_API dsm_status_t dsm_chan_sst_create(dsm_node_t *node, const char *name, size_t row_size,
                                         uint32_t timeout_ms, dsm_chan_sst_t **out);
DSM_API dsm_status_t dsm_chan_sst_store_mine(dsm_chan_sst_t *s, const void *src);
DSM_API dsm_status_t dsm_chan_sst_push_broadcast(dsm_chan_sst_t *s, dsm_chan_ack_t *key);
DSM_API dsm_status_t dsm_chan_sst_read(dsm_chan_sst_t *s, uint32_t peer, void *dst);
DSM_API void dsm_chan_sst_destroy(dsm_chan_sst_t *s);

/* barrier: one thread per participant; nobody leaves round k before every
 * participant has entered it. A global fence first, so writes before the
 * barrier are placed before anyone leaves. DSM_ERR_TIMEOUT names a
 * participant that did not arrive. */
typedef struct dsm_chan_barrier dsm_chan_barrier_t;
DSM_API dsm_status_t dsm_chan_barrier_create(dsm_node_t *node, const char *name, uint32_t timeout_ms,
                                             dsm_chan_barrier_t **out);
DSM_API dsm_status_t dsm_chan_barrier_wait(dsm_chan_barrier_t *b, uint32_t timeout_ms);
DSM_API void dsm_chan_barrier_destroy(dsm_chan_barrier_t *b);

/* ticket_lock: next_ticket and now_serving atomic words on one host
 * participant (chosen from the name). Threads of one node queue locally
 * first; a release hands the lock to a waiting thread of the same node
 * without going remote at most `handover` times in a row (default 4,
 * dsm/chan_sdk.h), then releases it to the next ticket, so other nodes
 * are served. A thread releases the lock it acquired. */
typedef struct dsm_chan_lock dsm_chan_lock_t;
DSM_API dsm_status_t dsm_chan_lock_create(dsm_node_t *node, const char *name, uint32_t timeout_ms,
                                          dsm_chan_lock_t **out);
/* DSM_ERR_TIMEOUT after timeout_ms (0: the node's op timeout) with the
 * ticket taken: the lock is then broken for everyone (a ticket cannot be
 * handed back), so choose a bound no healthy holder reaches. */
DSM_API dsm_status_t dsm_chan_lock_acquire(dsm_chan_lock_t *l, uint32_t timeout_ms);
/* The fence before the release makes the holder's writes visible to the
 * next holder: thread scope unless the caller knows better (NONE: it
 * fenced the connections it wrote on itself). */
DSM_API dsm_status_t dsm_chan_lock_release(dsm_chan_lock_t *l, dsm_chan_scope_t fence);
DSM_API void dsm_chan_lock_destroy(dsm_chan_lock_t *l);

/* ringbuffer: participant `sender` broadcasts messages of mixed sizes
 * (1..capacity/4 bytes) to every other participant, in order. A record is
 * {header: length, sequence} + payload, then its trailer (the full
 * sequence) as a separate write on the same connection, so a receiver
 * that sees the trailer sees the whole payload. Receivers ack what they
 * consumed into the sender's copy; the sender blocks (bounded) while the
 * slowest receiver lags by the whole capacity (bytes, a multiple of 8
 * from 256). One thread of a receiver receives: its ack is in flight on
 * that thread's key. */
typedef struct dsm_chan_ring dsm_chan_ring_t;
DSM_API dsm_status_t dsm_chan_ring_create(dsm_node_t *node, const char *name, uint32_t sender, size_t capacity,
                                          uint32_t timeout_ms, dsm_chan_ring_t **out);
/* Sender only. DSM_ERR_TIMEOUT (naming the slowest receiver) after
 * timeout_ms (0: the op timeout) without room. */
DSM_API dsm_status_t dsm_chan_ring_send(dsm_chan_ring_t *r, const void *data, size_t len, uint32_t timeout_ms);
/* Receivers: the next message into buf[0..cap), its length in *len;
 * DSM_ERR_TOO_BIG (not consumed, *len set) if cap is short;
 * DSM_ERR_TIMEOUT if none came within timeout_ms (0: the op timeout). */
DSM_API dsm_status_t dsm_chan_ring_recv(dsm_chan_ring_t *r, void *buf, size_t cap, size_t *len,
                                        uint32_t timeout_ms);
DSM_API void dsm_chan_ring_destroy(dsm_chan_ring_t *r);

/* shared_queue: a global FIFO of 64-bit values, `capacity` slots striped
 * over the participants, head and tail atomic_vars on one host. A push
 * takes ticket t by CAS on tail (refused while tail - head = capacity),
 * a pop ticket h by CAS on head (only while head < tail), so every ticket
 * taken is one push and one pop: each pop matches exactly one push. Slot
 * t % capacity carries a state word {cycle t / capacity, full} changed
 * only by the fabric's swap, beside its value word. */
typedef struct dsm_chan_queue dsm_chan_queue_t;
DSM_API dsm_status_t dsm_chan_queue_create(dsm_node_t *node, const char *name, uint32_t capacity,
                                           uint32_t timeout_ms, dsm_chan_queue_t **out);
/* DSM_ERR_BUSY if the queue stayed full for timeout_ms (0: the op timeout).
 * Once a push or pop has its ticket it waits for its slot up to the op
 * timeout whatever timeout_ms says: a ticket cannot be handed back. */
DSM_API dsm_status_t dsm_chan_queue_push(dsm_chan_queue_t *q, uint64_t value, uint32_t timeout_ms);
/* *got = 0 (and DSM_OK) if the queue was empty. */
DSM_API dsm_status_t dsm_chan_queue_pop(dsm_chan_queue_t *q, uint64_t *value, int *got, uint32_t timeout_ms);
/* A pop that waits while the queue is empty: DSM_ERR_TIMEOUT if no value
 * came within timeout_ms (0: the op timeout). */
DSM_API dsm_status_t dsm_chan_queue_pop_wait(dsm_chan_queue_t *q, uint64_t *value, uint32_t timeout_ms);
DSM_API void dsm_chan_queue_destroy(dsm_chan_queue_t *q);

/* kvstore: a map of 64-bit keys to values of value_size bytes, fixed at
 * creation (LOCO §6). Every participant hosts `slots` slots {key, value,
 * counter << 1 | valid, checksum of the rest} and keeps a local index
 * key -> (host, slot, counter), fed by every other participant's tracker
 * ringbuffer by a thread of its own. put and delete take ticket lock key % locks
 * (participants' sub-channels "<name>/lock/<i>"):
 *   insert: write a free slot of this node with valid 0, broadcast it on
 *           this node's tracker, wait for every participant's ack (all
 *           indexes have it), set valid, release;
 *   update: write the slot where it lives, fence that connection (a
 *           completed write is not yet a placed one), release;
 *   delete: clear valid where it lives, fence, broadcast, wait for the
 *           acks, release; the slot's host frees it once told.
 * get takes no lock: the local index, then one read of the slot; a
 * checksum that disagrees (a write being placed) reads again, for at most
 * the settle time (default: the op timeout), then DSM_ERR_TIMEOUT; valid
 * unset or another counter is a miss. Linearizable (LOCO App. C). */
typedef struct dsm_chan_kv dsm_chan_kv_t;
enum { DSM_CHAN_KV_MAX_SLOTS = 1u << 22, DSM_CHAN_KV_MAX_LOCKS = 64, DSM_CHAN_KV_MAX_VALUE = 256 };
/* slots per participant (1..DSM_CHAN_KV_MAX_SLOTS, 24 bytes + the value
 * rounded up to 8 each in the channel arena: 32 for 8-byte values; the
 * default 8 MiB arena fits 65,536 of those with room to spare, more need
 * a larger DSM_CHAN_ARENA_MB), locks
 * (1..DSM_CHAN_KV_MAX_LOCKS), value_size (1..DSM_CHAN_KV_MAX_VALUE bytes;
 * 8 holds a uint64_t): every participant passes the same. */
DSM_API dsm_status_t dsm_chan_kv_create(dsm_node_t *node, const char *name, uint32_t slots, uint32_t locks,
                                        size_t value_size, uint32_t timeout_ms, dsm_chan_kv_t **out);
/* create, with the values' type among the shape every participant must
 * pass alike: value_type is a nonzero tag of the caller's choosing (Python
 * packs a numpy dtype and shape into it), so that values of one size but
 * another type (a float64, a uint64) are refused as another shape is. A
 * typed store meets an untyped one (value_type 0: create's) as another
 * shape too. */
DSM_API dsm_status_t dsm_chan_kv_create_typed(dsm_node_t *node, const char *name, uint32_t slots, uint32_t locks,
                                              size_t value_size, uint64_t value_type, uint32_t timeout_ms,
                                              dsm_chan_kv_t **out);
/* Insert or update key with value_size bytes at value. DSM_ERR_NOMEM if
 * the key is new and every slot of this node is taken (an insert lands in
 * this node's slots). */
DSM_API dsm_status_t dsm_chan_kv_put(dsm_chan_kv_t *kv, uint64_t key, const void *value);
/* *found = 1 and value_size bytes at value, or *found = 0. */
DSM_API dsm_status_t dsm_chan_kv_get(dsm_chan_kv_t *kv, uint64_t key, void *value, int *found);
/* get for n keys (1..DSM_CHAN_ACK_BITS) at once: their slots' reads are
 * in flight together; key i's value at values + i * value_size, found[i]
 * as get's. */
DSM_API dsm_status_t dsm_chan_kv_get_many(dsm_chan_kv_t *kv, const uint64_t *keys, uint32_t n, void *values,
                                          int *found);
/* *found (may be NULL) says whether the key was there. */
DSM_API dsm_status_t dsm_chan_kv_delete(dsm_chan_kv_t *kv, uint64_t key, int *found);
/* put for n keys (1..DSM_CHAN_ACK_BITS) at once, key i's value at
 * values + i * value_size: the window's locks are taken together (one CAS
 * each, in flight together, where no one else holds or waits for them),
 * the updates' writes and fences go host by host, and the locks are
 * released together; a key whose lock was busy is then put alone, a new
 * key inserted alone. A key given twice ends with its last value. The
 * puts are concurrent: each linearises between the call and its return. */
DSM_API dsm_status_t dsm_chan_kv_put_many(dsm_chan_kv_t *kv, const uint64_t *keys, uint32_t n, const void *values);
/* delete for n keys at once, as put_many takes and releases their locks;
 * the window's tracker messages go as one (or a few) and are acked
 * together. found[i] as delete's; of a key given twice, the first finds
 * what there was and the later ones nothing. */
DSM_API dsm_status_t dsm_chan_kv_delete_many(dsm_chan_kv_t *kv, const uint64_t *keys, uint32_t n, int *found);
/* Keys in this node's index (racy while others write). */
DSM_API uint64_t dsm_chan_kv_count(dsm_chan_kv_t *kv);
/* Peers must be done with it (a barrier first). */
DSM_API void dsm_chan_kv_destroy(dsm_chan_kv_t *kv);

#ifdef __cplusplus
}
#endif
#endif
