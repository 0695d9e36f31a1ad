/* A node's CoRM state, shared by the node glue (node.c: attach, handlers,
 * peers' stores and mirrors, the store's thread) and the client calls
 * (client.c). */
#ifndef DSM_COMPACT_INTERNAL_H
#define DSM_COMPACT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "compact/store.h"
#include "compact/wire.h"
#include "dsm/compact.h"
#include "dsm/fabric.h"
#include "dsm/node.h"

/* A remap notice that came before the view caught up (kept in order). */
typedef struct compact_notice {
    uint64_t seq;
    uint32_t n;
    struct compact_notice *next;
    uint8_t pairs[];
} compact_notice_t;

/* A peer's store as this node knows it. On shm, `mirror` maps the peer's
 * memfd read-only at matching offsets and follows its remap notices, so a
 * one-sided read is a load; elsewhere reads go through the fabric. The
 * mapping (`view`) is published as `mirror` only once it caught up with the
 * server's current layout (dsm_compact_mirror_catch_up, on the first one-sided
 * read): a peer that attaches after remaps maps what the blocks show now. */
typedef struct compact_peer {
    int attached;               /* attached the module (may mirror our store) */
    int serves;                 /* published a store */
    uint64_t size;
    uint32_t block_size;
    uint16_t key_tag;
    int memfd;                  /* our copy of the peer's memfd (-1 none) */
    uint8_t *mirror;            /* NULL: no mapping, use the fabric */
    pthread_mutex_t mlock;      /* the view's remaps (notices, catch-up) */
    uint8_t *view;              /* the mapping (mirror once caught up) */
    uint64_t seq;               /* the server's remap batch the view shows */
    int catching;               /* a thread is fetching the layout */
    compact_notice_t *held, **held_tail;   /* notices before the catch-up */
    uint32_t nheld;
    uint64_t dropped_seq;       /* the newest notice dropped from a full held list */
} compact_peer_t;

/* A compaction round for the store's thread: a peer's request (answered
 * there) or a local dsm_compact_now (local set: the caller waits for done
 * under the node's lock, and owns the job). */
typedef struct compact_job {
    uint32_t rank;
    uint64_t request_id;
    int cls;
    int local, done;
    dsm_status_t status;
    dsm_compact_stats_t stats;
    struct compact_job *next;
} compact_job_t;

struct dsm_compact {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    dsm_transport_t transport;
    dsm_compact_config_t cfg;
    dsm_compact_store_t *store;    /* NULL on a client-only node */
    dsm_region_t *region;
    uint16_t key_tag;
    compact_peer_t peers[DSM_MAX_RANKS];
    /* the store's thread: triggered compaction rounds and remote requests */
    pthread_t thread;
    int thread_started, stopping, triggered;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_cond_t done_cond;      /* a local job finished */
    compact_job_t *jobs;
    /* one-sided reads that saw a locked or torn copy and retried (for
     * tests and benchmarks: the races they show did happen) */
    uint64_t seen_locked, seen_torn;
    /* one-sided reads that found their object under the compaction bit
     * (moved away, or being copied) and asked the server at once, and
     * scan_reads the server answered */
    uint64_t seen_moving, scan_rpcs;
    /* remap notices sent (per peer) and the time spent waiting for their
     * answers (for benchmarks) */
    uint64_t notices, notice_ns;
    /* remap notices this node's mirrors applied, and the time applying them
     * took (the remaps, under the view's lock): the rest of a notice's round
     * trip is delivery and wake-ups */
    uint64_t applied, apply_ns;
    /* test hooks (NULL in use): copy_hook runs between the two halves of
     * direct_read's copy of a slot (while it is set, direct_read copies the
     * slot itself, as a software copy would), so a test can land a write
     * inside the copy; before_notice runs when a batch's remap notice is
     * about to go out (the merged-away blocks still show their objects
     * under the compaction bit to every mirror) */
    void (*copy_hook)(void *ctx, const dsm_compact_ptr_t *ptr);
    void (*before_notice)(void *ctx, const uint8_t *pairs, uint32_t n);
    void *hook_ctx;
    /* verbs: blocks were remapped since the range's last registration */
    int rekey_pending;
};

/* One compaction round of this node's store (class cls, -1 every class) on
 * the store's thread, which runs at background priority, waiting for it;
 * inline where there is no such thread. */
dsm_status_t dsm_compact_local_round(dsm_compact_t *c, int cls, dsm_compact_stats_t *stats);

/* Read `len` bytes at `offset` of `rank`'s store range one-sidedly: this
 * node's own memory, a mirror, or a fabric get. */
dsm_status_t dsm_compact_fetch(dsm_compact_t *c, uint32_t rank, uint64_t offset, void *dst, size_t len);

/* An RPC to rank's store: encode req, decode the reply (of type `want`) from in[cap]. */
dsm_status_t dsm_compact_rpc(dsm_compact_t *c, uint32_t rank, uint16_t handler, const dsm_compact_msg_t *req, uint16_t want,
                          dsm_compact_msg_t *rep, uint8_t *in, size_t cap);

/* Bring rank's view up to the server's current layout and publish it as the
 * mirror (the layout RPC, then its pairs and the notices held meanwhile).
 * Returns 1 if the mirror is published; 0 if another thread is at it or it
 * failed (reads use the fabric meanwhile, or for good after a failure). */
int dsm_compact_mirror_catch_up(dsm_compact_t *c, uint32_t rank);

/* Calls that only compact and its tests (and benchmarks) make (not exported). */
/* Attach the store to a node between dsm_node_create and dsm_node_join (NULL
 * config = defaults). Every node that reads or writes a store attaches one,
 * with range_size 0 if it serves none. */
dsm_status_t dsm_compact_attach(dsm_node_t *node, const dsm_compact_config_t *config);
/* Largest object of a size class. */
uint32_t dsm_compact_class_capacity(uint32_t size_class);

#endif
