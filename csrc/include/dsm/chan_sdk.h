/* LOCO's channel objects (csrc/chan), what mechanism and workload authors
 * call beside the user API's objects (dsm/chan.h): endpoints and their
 * manager (every participant builds an endpoint of the same name; '/'
 * separates sub-channels, "app/queue/0", and each endpoint hosts named
 * regions of the same sizes on every node; dsm_chan_join allocates the
 * regions in the node's channel arena, one fabric region, and tells the
 * participants their offsets; a peer with that channel connects back, a
 * peer without it keeps the join for a bounded while; dsm_chan_wait_ready
 * waits, bounded, until the expected peers have connected, and names the
 * one that did not), ack keys (a bitset of this thread's operations in
 * flight), fences in three scopes, and the tuning of the user API's
 * objects.
 *
 * Part of the SDK (dsm/sdk.h). */
#ifndef DSM_CHAN_SDK_H
#define DSM_CHAN_SDK_H

#include "dsm/chan.h"

#ifdef __cplusplus
extern "C" {
#endif

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
/* Before join: the endpoint's shape, the n (0..DSM_CHAN_MAX_SHAPE)
 * arguments of its object that its peers' must equal, each named
 * (1..DSM_CHAN_SHAPE_NAME_MAX bytes of printable ASCII, for the error):
 * a kvstore's value size, slots and locks. Regions of equal sizes do not
 * prove equal objects (2 slots of 8-byte values fill what 1 of 40 does),
 * so a peer whose shape differs is refused with DSM_ERR_INVALID naming
 * both shapes. Default: none. */
enum { DSM_CHAN_MAX_SHAPE = 4, DSM_CHAN_SHAPE_NAME_MAX = 15 };
DSM_API dsm_status_t dsm_chan_set_shape(dsm_chan_t *c, const char *const *names, const uint64_t *values,
                                        uint32_t n);
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
 * of another kind, DSM_ERR_INVALID for one whose shape or regions differ,
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
struct dsm_chan_ack {
    uint64_t bits[DSM_CHAN_ACK_BITS / 64];
};

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
DSM_API dsm_status_t dsm_chan_fence_pair(dsm_chan_t *c, uint32_t peer);
DSM_API dsm_status_t dsm_chan_fence_thread(dsm_node_t *node);
DSM_API dsm_status_t dsm_chan_fence_global(dsm_node_t *node);

/* ---- objects (beside dsm/chan.h's) ---------------------------------------- */

DSM_API void dsm_chan_owned_set_settle_ms(dsm_chan_owned_t *v, uint32_t ms);
DSM_API dsm_chan_t *dsm_chan_owned_chan(dsm_chan_owned_t *v);

/* shared_region and sst (dsm/chan.h): their endpoints. */
DSM_API dsm_chan_t *dsm_chan_region_chan(dsm_chan_region_t *r);
DSM_API dsm_chan_t *dsm_chan_sst_chan(dsm_chan_sst_t *s);

DSM_API void dsm_chan_lock_set_handover(dsm_chan_lock_t *l, uint32_t handover);
/* Counters: acquisitions, of them by a local hand-over. */
DSM_API void dsm_chan_lock_counts(dsm_chan_lock_t *l, uint64_t *acquired, uint64_t *handed_over);

DSM_API void dsm_chan_kv_set_settle_ms(dsm_chan_kv_t *kv, uint32_t ms);
/* UNSAFE, for demonstrating why the fence matters: 0 drops the fence
 * between an update's write and the lock's release, so the write may be
 * placed after the next holder (or a reader) has gone on; 1 (the default)
 * keeps it. */
DSM_API void dsm_chan_kv_set_fence(dsm_chan_kv_t *kv, int on);

#ifdef __cplusplus
}
#endif
#endif
