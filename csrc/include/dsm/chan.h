/* LOCO's channel objects (csrc/chan): concurrent objects whose state is
 * spread over the nodes' network memory, built from one-sided operations.
 *
 * An endpoint (dsm_chan_t) is one node's part of a channel. Every
 * participant builds an endpoint of the same name; '/' separates
 * sub-channels ("app/queue/0"), and each endpoint hosts named regions of
 * the same sizes on every node. dsm_chan_join allocates the regions (in
 * the node's channel arena, one fabric region) and tells the participants
 * their offsets; a peer with that channel connects back, a peer without it
 * keeps the join for a bounded while. dsm_chan_wait_ready waits, bounded,
 * until the expected peers have connected, and names the one that did not.
 *
 * On endpoints: ack keys (a bitset of this thread's operations in flight),
 * fences in three scopes, and the objects: atomic_var, owned_var,
 * shared_region, sst, barrier, ticket_lock, ringbuffer, shared_queue,
 * kvstore.
 *
 * Part of the SDK (dsm/sdk.h): Python does not call it yet. */
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

typedef struct dsm_chan dsm_chan_t;

/* ---- manager and endpoints ---------------------------------------------- */

/* A new endpoint named `name` (1..DSM_CHAN_NAME_MAX bytes of printable
 * ASCII, no empty '/' parts) on node; its participants are the node's live
 * daemons (dsm_chan_set_peers to choose), it expects all of them.
 * DSM_ERR_EXISTS if the node has an endpoint of that name. */
DSM_API dsm_status_t dsm_chan_create(dsm_node_t *node, const char *name, dsm_chan_kind_t kind, dsm_chan_t **out);
/* A sub-channel "<parent>/<leaf>" with the parent's participants; the
 * parent cannot be destroyed before it. */
DSM_API dsm_status_t dsm_chan_sub(dsm_chan_t *parent, const char *leaf, dsm_chan_kind_t kind, dsm_chan_t **out);
/* Before join: the participants (ranks, this node's among them). */
DSM_API dsm_status_t dsm_chan_set_peers(dsm_chan_t *c, const uint32_t *ranks, uint32_t n);
/* Before join: how many other participants must connect for ready
 * (default: all of them). */
DSM_API dsm_status_t dsm_chan_expect_num(dsm_chan_t *c, uint32_t n);
/* Before join: a region of `size` bytes hosted on every participant;
 * *index (may be NULL) gets its index. Zero-filled at join. Regions live
 * in the node's channel arena, DSM_CHAN_ARENA_MB MiB (1..4096, default 8;
 * read when chan attaches): DSM_ERR_NOMEM for a region larger than the
 * arena, from join when the arena has no room left. */
DSM_API dsm_status_t dsm_chan_add_region(dsm_chan_t *c, const char *name, size_t size, uint32_t *index);
/* Called when a peer connects (from the progress context or the joining
 * thread: it must not block). Before join. */
typedef void (*dsm_chan_connect_cb_t)(void *ctx, dsm_chan_t *c, uint32_t rank);
DSM_API dsm_status_t dsm_chan_on_connect(dsm_chan_t *c, dsm_chan_connect_cb_t cb, void *ctx);
/* Allocate the regions and send the joins; waits (bounded by the fabric's
 * op timeout) for the peers' answers, not for the peers to join. */
DSM_API dsm_status_t dsm_chan_join(dsm_chan_t *c);
/* Wait until the expected peers have connected. DSM_ERR_TIMEOUT after
 * timeout_ms (0: the node's join timeout) naming a missing peer in
 * dsm_last_error; DSM_ERR_EXISTS for a peer whose endpoint of this name is
 * of another kind, DSM_ERR_INVALID for one whose regions differ,
 * DSM_ERR_PEER_DEAD for one that died. */
DSM_API dsm_status_t dsm_chan_wait_ready(dsm_chan_t *c, uint32_t timeout_ms);
/* Leave the channel (peers are told) and free its regions. Peers must be
 * done writing to them (a barrier first): the arena reuses the space.
 * DSM_ERR_STATE (and nothing done) while it has sub-channels. */
DSM_API dsm_status_t dsm_chan_destroy(dsm_chan_t *c);

DSM_API const char *dsm_chan_name(const dsm_chan_t *c);
/* Participants in rank order; this node's index among them. */
DSM_API uint32_t dsm_chan_peer_count(const dsm_chan_t *c);
DSM_API uint32_t dsm_chan_peer_rank(const dsm_chan_t *c, uint32_t index);
DSM_API uint32_t dsm_chan_self(const dsm_chan_t *c);
/* This node's copy of region `index` (after join), its length in *len. */
DSM_API void *dsm_chan_region_local(dsm_chan_t *c, uint32_t index, size_t *len);

/* The node's manager: joins it keeps for channels it does not have (yet),
 * after dropping those older than the keep time; and its counters. */
typedef struct dsm_chan_stats {
    uint64_t joins_sent, joins_received, joins_kept, joins_expired, refused, leaves;
} dsm_chan_stats_t;
DSM_API uint32_t dsm_chan_pending(dsm_node_t *node);
DSM_API void dsm_chan_stats(dsm_node_t *node, dsm_chan_stats_t *out);
/* How long a join for an unknown channel is kept (default: the node's
 * join timeout). */
DSM_API void dsm_chan_set_keep_ms(dsm_node_t *node, uint32_t ms);

/* ---- ack keys and fences ------------------------------------------------ */

/* A set of this thread's one-sided operations in flight. Keys union with
 * dsm_chan_ack_union; an operation's bit is free again once a test or wait
 * saw it done (a stale key then waits for whatever reuses the bit, which is
 * only slower). A thread with DSM_CHAN_ACK_BITS in flight blocks in the
 * next operation until one completes. */
typedef struct dsm_chan_ack {
    uint64_t bits[DSM_CHAN_ACK_BITS / 64];
} dsm_chan_ack_t;

static inline void dsm_chan_ack_union(dsm_chan_ack_t *into, const dsm_chan_ack_t *other)
{
    for (int i = 0; i < DSM_CHAN_ACK_BITS / 64; i++) into->bits[i] |= other->bits[i];
}
static inline int dsm_chan_ack_empty(const dsm_chan_ack_t *k)
{
    for (int i = 0; i < DSM_CHAN_ACK_BITS / 64; i++)
        if (k->bits[i]) return 0;
    return 1;
}
/* 1 when every operation of *key completed (their bits leave *key), 0 if
 * not; a failed operation's status goes to *status (may be NULL). */
DSM_API int dsm_chan_ack_test(dsm_chan_ack_t *key, dsm_status_t *status);
/* Wait until every operation of *key completed; the first failure. */
DSM_API dsm_status_t dsm_chan_ack_wait(dsm_chan_ack_t *key);

/* One-sided operations on a participant's copy of region `region`, adding
 * their bit to *key. A put's source up to 64 bytes is copied; a longer one,
 * and a get's destination, must stay valid until the key completes. On
 * this node's own copy they are local copies, done on return. */
DSM_API dsm_status_t dsm_chan_put_async(dsm_chan_t *c, uint32_t peer, uint32_t region, uint64_t offset,
                                        const void *src, size_t len, dsm_chan_ack_t *key);
DSM_API dsm_status_t dsm_chan_get_async(dsm_chan_t *c, uint32_t peer, uint32_t region, uint64_t offset,
                                        void *dst, size_t len, dsm_chan_ack_t *key);

/* Fences: writes this thread issued before are placed (not only complete)
 * before anything it issues after. Pair: to one participant of c; thread:
 * to every node it wrote to (a zero-length read on each connection with
 * unfenced writes); global: every thread of this node to every node (the
 * fabric's flush, worker-wide). */
typedef enum dsm_chan_scope {
    DSM_CHAN_FENCE_PAIR = 0,
    DSM_CHAN_FENCE_THREAD = 1,
    DSM_CHAN_FENCE_GLOBAL = 2,
    DSM_CHAN_FENCE_NONE = 3,   /* for a release: the caller has fenced what matters */
} dsm_chan_scope_t;
DSM_API dsm_status_t dsm_chan_fence_pair(dsm_chan_t *c, uint32_t peer);
DSM_API dsm_status_t dsm_chan_fence_thread(dsm_node_t *node);
DSM_API dsm_status_t dsm_chan_fence_global(dsm_node_t *node);

/* ---- objects ------------------------------------------------------------- */
/* Each is an endpoint of its own kind: created, joined and made ready by
 * one call (timeout_ms as dsm_chan_wait_ready), so every participant calls
 * it with the same name and arguments; destroyed with its _destroy. */

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
 * carries a version and a checksum and a read retries until they agree,
 * for at most the settle time (default: the node's op timeout), then gives
 * DSM_ERR_TIMEOUT. */
typedef struct dsm_chan_owned dsm_chan_owned_t;
typedef enum dsm_chan_mode { DSM_CHAN_PUSH = 0, DSM_CHAN_PULL = 1 } dsm_chan_mode_t;
DSM_API dsm_status_t dsm_chan_owned_create(dsm_node_t *node, const char *name, uint32_t owner, size_t size,
                                           dsm_chan_mode_t mode, uint32_t timeout_ms, dsm_chan_owned_t **out);
/* Owner only (DSM_ERR_STATE elsewhere). Push: key (may be NULL: wait) gets
 * the pushes' bits. */
DSM_API dsm_status_t dsm_chan_owned_store(dsm_chan_owned_t *v, const void *src, dsm_chan_ack_t *key);
DSM_API dsm_status_t dsm_chan_owned_load(dsm_chan_owned_t *v, void *dst);
DSM_API void dsm_chan_owned_set_settle_ms(dsm_chan_owned_t *v, uint32_t ms);
DSM_API dsm_chan_t *dsm_chan_owned_chan(dsm_chan_owned_t *v);
DSM_API void dsm_chan_owned_destroy(dsm_chan_owned_t *v);

/* shared_region: `size` bytes on every participant, no consistency. */
typedef struct dsm_chan_region dsm_chan_region_t;
DSM_API dsm_status_t dsm_chan_region_create(dsm_node_t *node, const char *name, size_t size,
                                            uint32_t timeout_ms, dsm_chan_region_t **out);
DSM_API void *dsm_chan_region_mine(dsm_chan_region_t *r, size_t *len);
DSM_API dsm_status_t dsm_chan_region_put(dsm_chan_region_t *r, uint32_t peer, uint64_t offset, const void *src,
                                         size_t len);
DSM_API dsm_status_t dsm_chan_region_get(dsm_chan_region_t *r, uint32_t peer, uint64_t offset, void *dst,
                                         size_t len);
DSM_API dsm_chan_t *dsm_chan_region_chan(dsm_chan_region_t *r);
DSM_API void dsm_chan_region_destroy(dsm_chan_region_t *r);

/* sst: a shared state table, one row of row_size bytes per participant,
 * each an owned_var its participant pushes to all. */
typedef struct dsm_chan_sst dsm_chan_sst_t;
DSM_API dsm_status_t dsm_chan_sst_create(dsm_node_t *node, const char *name, size_t row_size,
                                         uint32_t timeout_ms, dsm_chan_sst_t **out);
/* Write this node's row locally; push_broadcast sends it to every peer. */
DSM_API dsm_status_t dsm_chan_sst_store_mine(dsm_chan_sst_t *s, const void *src);
DSM_API dsm_status_t dsm_chan_sst_push_broadcast(dsm_chan_sst_t *s, dsm_chan_ack_t *key);
/* Read participant `peer`'s row from the local copy (checksum-settled). */
DSM_API dsm_status_t dsm_chan_sst_read(dsm_chan_sst_t *s, uint32_t peer, void *dst);
DSM_API dsm_chan_t *dsm_chan_sst_chan(dsm_chan_sst_t *s);
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
 * without going remote at most `handover` times in a row (default 4), then
 * releases it to the next ticket, so other nodes are served. */
typedef struct dsm_chan_lock dsm_chan_lock_t;
DSM_API dsm_status_t dsm_chan_lock_create(dsm_node_t *node, const char *name, uint32_t timeout_ms,
                                          dsm_chan_lock_t **out);
DSM_API void dsm_chan_lock_set_handover(dsm_chan_lock_t *l, uint32_t handover);
/* DSM_ERR_TIMEOUT after timeout_ms (0: the node's op timeout) with the
 * ticket taken: the lock is then broken for everyone (a ticket cannot be
 * handed back), so choose a bound no healthy holder reaches. */
DSM_API dsm_status_t dsm_chan_lock_acquire(dsm_chan_lock_t *l, uint32_t timeout_ms);
/* The fence before the release makes the holder's writes visible to the
 * next holder: thread scope unless the caller knows better (NONE: it
 * fenced the connections it wrote on itself). */
DSM_API dsm_status_t dsm_chan_lock_release(dsm_chan_lock_t *l, dsm_chan_scope_t fence);
/* Counters: acquisitions, of them by a local hand-over. */
DSM_API void dsm_chan_lock_counts(dsm_chan_lock_t *l, uint64_t *acquired, uint64_t *handed_over);
DSM_API void dsm_chan_lock_destroy(dsm_chan_lock_t *l);

/* ringbuffer: participant `sender` broadcasts messages of mixed sizes
 * (1..capacity/4 bytes) to every other participant, in order. A record is
 * {header: length, sequence} + payload, then its trailer (the full
 * sequence) as a separate write on the same connection, so a receiver
 * that sees the trailer sees the whole payload. Receivers ack what they
 * consumed into the sender's copy; the sender blocks (bounded) while the
 * slowest receiver lags by the whole capacity. */
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
DSM_API void dsm_chan_queue_destroy(dsm_chan_queue_t *q);


/* kvstore: a map of 64-bit keys to 64-bit values (LOCO §6). Every
 * participant hosts `slots` slots {key, value, counter << 1 | valid,
 * checksum of the three} and keeps a local index key -> (host, slot,
 * counter), fed by every other participant's tracker ringbuffer by a
 * thread of its own. put and delete take ticket lock key % locks
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
enum { DSM_CHAN_KV_MAX_SLOTS = 1u << 22, DSM_CHAN_KV_MAX_LOCKS = 64 };
/* slots per participant (1..DSM_CHAN_KV_MAX_SLOTS, 32 bytes each in the
 * channel arena: past 65,536 a larger DSM_CHAN_ARENA_MB), locks
 * (1..DSM_CHAN_KV_MAX_LOCKS): every participant passes the same. */
DSM_API dsm_status_t dsm_chan_kv_create(dsm_node_t *node, const char *name, uint32_t slots, uint32_t locks,
                                        uint32_t timeout_ms, dsm_chan_kv_t **out);
/* Insert or update. DSM_ERR_NOMEM if the key is new and every slot of this
 * node is taken (an insert lands in this node's slots). */
DSM_API dsm_status_t dsm_chan_kv_put(dsm_chan_kv_t *kv, uint64_t key, uint64_t value);
/* *found = 1 and *value, or *found = 0. */
DSM_API dsm_status_t dsm_chan_kv_get(dsm_chan_kv_t *kv, uint64_t key, uint64_t *value, int *found);
/* get for n keys (1..DSM_CHAN_ACK_BITS) at once: their slots' reads are
 * in flight together; values[i] and found[i] as get's for keys[i]. */
DSM_API dsm_status_t dsm_chan_kv_get_many(dsm_chan_kv_t *kv, const uint64_t *keys, uint32_t n, uint64_t *values,
                                          int *found);
/* *found (may be NULL) says whether the key was there. */
DSM_API dsm_status_t dsm_chan_kv_delete(dsm_chan_kv_t *kv, uint64_t key, int *found);
DSM_API void dsm_chan_kv_set_settle_ms(dsm_chan_kv_t *kv, uint32_t ms);
/* UNSAFE, for demonstrating why the fence matters: 0 drops the fence
 * between an update's write and the lock's release, so the write may be
 * placed after the next holder (or a reader) has gone on; 1 (the default)
 * keeps it. */
DSM_API void dsm_chan_kv_set_fence(dsm_chan_kv_t *kv, int on);
/* Keys in this node's index (racy while others write). */
DSM_API uint64_t dsm_chan_kv_count(dsm_chan_kv_t *kv);
/* Peers must be done with it (a barrier first). */
DSM_API void dsm_chan_kv_destroy(dsm_chan_kv_t *kv);

#ifdef __cplusplus
}
#endif
#endif
