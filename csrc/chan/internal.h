/* chan's internals shared by its files: the node's manager (the arena, the
 * endpoints by name, joins kept for channels not yet here) and an
 * endpoint's state (its regions, its participants and their offsets). */
#ifndef DSM_CHAN_INTERNAL_H
#define DSM_CHAN_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include "chan/arena.h"
#include "chan/wire.h"
#include "dsm/chan_sdk.h"
#include "dsm/fabric.h"
#include "dsm/module.h"
#include "dsm/runtime.h"
#include "util/clock.h"

#define LOG_MOD "chan"

/* The arena's size: DSM_CHAN_ARENA_MB (1..CHAN_ARENA_MAX_MB) in the
 * environment when the module attaches, else the default. */
enum { CHAN_ARENA_DEFAULT_MB = 8, CHAN_ARENA_MAX_MB = 4096, CHAN_MAX_KEPT = 64 };
#define CHAN_ARENA_ENV "DSM_CHAN_ARENA_MB"


typedef struct chan_kept {
    uint32_t src;
    uint64_t at_ns;
    chan_msg_t msg;
} chan_kept_t;

/* A group: top-level channels named "<prefix>/..." take these
 * participants (group.c). */
typedef struct chan_group {
    char prefix[DSM_CHAN_NAME_MAX + 1];
    uint32_t n;
    uint32_t ranks[DSM_CHAN_MAX_PEERS];   /* ascending */
} chan_group_t;

typedef struct chan_mgr {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    dsm_region_t *region;
    dsm_region_offer_t offer;   /* the arena, offered to every peer */
    uint8_t *base;
    pthread_mutex_t lock;        /* below: held briefly, handlers take it too */
    chan_arena_t arena;
    dsm_chan_t *chans;
    chan_kept_t kept[CHAN_MAX_KEPT];
    uint32_t nkept;
    uint32_t keep_ms;
    dsm_chan_stats_t stats;
    chan_group_t groups[DSM_CHAN_MAX_GROUPS];
    uint32_t ngroups;
} chan_mgr_t;

enum { CHAN_NEW = 0, CHAN_JOINED = 1 };

typedef struct chan_peer {
    uint32_t rank;
    int connected;               /* set (release) once off[] is written */
    int answered;                /* its reply to our join came (CONNECT or kept) */
    dsm_status_t error;          /* a refusal: kind or regions differ */
    uint64_t off[DSM_CHAN_MAX_REGIONS];
} chan_peer_t;

struct dsm_chan {
    chan_mgr_t *m;
    char name[DSM_CHAN_NAME_MAX + 1];
    uint32_t kind;
    int state;
    dsm_chan_t *parent;
    int children;
    uint32_t nregions;
    chan_wire_region_t regions[DSM_CHAN_MAX_REGIONS];   /* offsets: this node's */
    uint32_t nshape;             /* the object's arguments peers must equal */
    uint64_t shape[DSM_CHAN_MAX_SHAPE];
    char shape_names[DSM_CHAN_MAX_SHAPE][DSM_CHAN_SHAPE_NAME_MAX + 1];
    uint32_t npeers, self, expect;
    chan_peer_t peers[DSM_CHAN_MAX_PEERS];
    char why[512];               /* the first refusal, said by the thread that reports it */
    dsm_chan_connect_cb_t cb;
    void *cb_ctx;
    dsm_chan_t *next;
};

/* The calling node's manager; NULL if chan is not attached. */
chan_mgr_t *chan_mgr(dsm_node_t *node);
/* The fabric address of participant `peer`'s copy of region r at offset. */
static inline uint64_t chan_remote_off(const dsm_chan_t *c, uint32_t peer, uint32_t r, uint64_t offset)
{
    return c->peers[peer].off[r] + offset;
}
static inline uint8_t *chan_local(const dsm_chan_t *c, uint32_t r)
{
    return c->m->base + c->regions[r].offset;
}
/* The objects' setup once their regions are added (st: how that went):
 * join and wait until ready; on any failure the endpoint is destroyed. */
dsm_status_t chan_finish(dsm_chan_t *c, dsm_status_t st, uint32_t timeout_ms);
/* A new endpoint with one region and the shape names[0..n) = values[0..n)
 * (dsm_chan_set_shape), joined and ready. */
dsm_status_t chan_open(dsm_node_t *node, const char *name, dsm_chan_kind_t kind, const char *region, size_t size,
                       const char *const *names, const uint64_t *values, uint32_t n, uint32_t timeout_ms,
                       dsm_chan_t **out);
/* Read the value of `size` bytes whose slot is at offset `at` of region r
 * of participant `peer` (this node's copy: local loads; another's: a
 * get), again until its checksum settles, for at most settle_ms; then
 * DSM_ERR_TIMEOUT naming `what`. */
dsm_status_t chan_read_settled(dsm_chan_t *c, uint32_t peer, uint32_t r, uint64_t at, size_t size, void *dst,
                               uint32_t settle_ms, const char *what);
/* The participants of a top-level channel named `name` if a group of m
 * covers it (the longest prefix): their ranks, ascending, into ranks[],
 * and how many; 0 if none does. Takes m->lock. */
uint32_t chan_group_ranks(chan_mgr_t *m, const char *name, uint32_t ranks[DSM_CHAN_MAX_PEERS]);
/* The node's op timeout in ms. */
uint32_t chan_op_timeout(const dsm_chan_t *c);
/* A poll loop's pause. A peer's one-sided write wakes nobody, so the
 * fabric's backoff sleeps its whole pause past it: the first
 * CHAN_SPIN_POLLS polls of a wait only yield the CPU, then the backoff
 * (growing to max_ns) spares a shared host. */
enum { CHAN_SPIN_POLLS = 256 };
static inline void chan_pause(dsm_fabric_t *f, unsigned *polls, long *pause_ns, long max_ns)
{
    if (*polls < CHAN_SPIN_POLLS) {
        ++*polls;
        sched_yield();
        return;
    }
    dsm_fabric_backoff(f, pause_ns, max_ns);
}
/* A window's locks without waiting for anyone (kvstore.c's put_many):
 * each ls[i] that is free now, at this node and at its host, is held on
 * return with got[i] = 1 (released by chan_lock_release_many or
 * dsm_chan_lock_release); the others are left as they were, got[i] = 0.
 * The tickets travel together, one message a host where emulated: a CAS
 * of next from now_serving as this node's last release left it, then for
 * the rest a read of now_serving and a CAS from that. Since it never waits
 * while holding, it cannot deadlock with other holders. On an error the
 * locks with got[i] are held all the same. */
dsm_status_t chan_lock_try_many(dsm_chan_lock_t *const *ls, uint32_t n, uint8_t *got);
/* Release ls[0..n) (held by this thread) with no fence, the releases in
 * flight together. */
dsm_status_t chan_lock_release_many(dsm_chan_lock_t *const *ls, uint32_t n);
/* chan_lock_release_many in two halves, for a caller that sends the
 * releases among its own requests (in its batch): _issue starts each
 * release's fetch-add on op[i] (issued[i]) or, with `hand`, may hand the
 * lock to a local thread instead (then the caller's writes under it must
 * be placed already); _finish waits for them and lets the locks go. */
dsm_status_t chan_lock_release_issue(dsm_chan_lock_t *const *ls, uint32_t n, int hand, dsm_op_t *op,
                                     uint8_t *issued);
dsm_status_t chan_lock_release_finish(dsm_chan_lock_t *const *ls, uint32_t n, dsm_op_t *op, const uint8_t *issued);
/* The rank of the node that holds l's words. */
uint32_t chan_lock_host_rank(const dsm_chan_lock_t *l);
/* Release l (held by this thread) after this thread's writes to `peer` of
 * c, issued and maybe not complete: as a pair fence of (c, peer) and then
 * the release, but where the lock's host is that peer the release's
 * atomic orders the writes, with no fence of its own. */
dsm_status_t chan_lock_release_after(dsm_chan_lock_t *l, dsm_chan_t *c, uint32_t peer);
/* Note that this thread wrote to rank over f without a fence since. */
void chan_unfenced(dsm_fabric_t *f, uint32_t rank);
/* An atomic of this thread's to `peer` of c has completed: the writes it
 * issued there before are placed (the atomic was ordered after them, as a
 * read is), so complete them and forget that they were not fenced. */
dsm_status_t chan_fenced_by_atomic(dsm_chan_t *c, uint32_t peer);

#endif
