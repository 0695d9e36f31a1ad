/* Private state of a fabric instance shared by fabric.c, region.c, rma.c and
 * am.c: the UCX context and worker, the peer table with its remote regions,
 * the active-message tables and the counters. Nothing here is public. */
#ifndef DSM_FABRIC_INT_H
#define DSM_FABRIC_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "dsm/clock.h"
#include "dsm/fabric.h"
#include "fabric/am_wire.h"
#include "util/linger.h"
#include "util/crowd.h"
#include "util/test_switch.h"
#include "util/tslot.h"

#define DSM_FABRIC_LOG "fabric"

/* The one UCX active-message id every fabric uses; our own header says which
 * dsm handler a message is for. */
enum { DSM_FABRIC_UCX_AM_ID = 7 };

/* Peer life cycle: NONE -> ALIVE -> DEAD (-> ALIVE again on reconnect). A
 * dead peer's endpoint stays open, unused, until reconnect or destroy. */
enum { DSM_PEER_NONE = 0, DSM_PEER_ALIVE = 1, DSM_PEER_DEAD = 2 };

/* A peer's region key that a newer one replaced (the peer registered the
 * region anew): an operation resolved before the swap may still hold it, so
 * it lives until its endpoint closes (dsm_fabric_remote_regions_clear, or a
 * lane's close). */
struct dsm_rkey_retired {
    ucp_rkey_h rkey;
    struct dsm_rkey_retired *next;
};

typedef struct dsm_remote_region {
    _Atomic int valid;        /* set last (release) when the slot is filled */
    uint64_t base;
    uint64_t length;
    ucp_rkey_h rkey;
    /* The region mapped into this process (ucp_rkey_ptr: UCX's sysv/posix
     * shared memory of a peer on this host), or NULL. One-sided operations
     * on it are then loads, stores and CPU atomics done here, without UCX.
     * Valid as long as the rkey, i.e. while the peer is acquired. */
    uint8_t *direct;
    struct dsm_rkey_retired *retired;   /* keys a rekey replaced (region.c) */
    /* The packed key as the peer sent it, for lanes (lane.c), which unpack
     * it on their own endpoints; `version` counts rekeys. Under f->lock. */
    void *packed;
    size_t packed_len;
    _Atomic uint32_t version;
} dsm_remote_region_t;

typedef struct dsm_peer {
    _Atomic int state;
    /* Threads between "peer is alive" and the end of their ucp_*_nbx call
     * (dsm_fabric_peer_acquire; a send's dsm_fabric_peer_enter marks its
     * thread slot instead). An endpoint is closed only once this drops to
     * zero and no slot is marked with the peer (and the peer is no longer
     * alive), so no thread ever hands UCX a closed endpoint. */
    _Atomic int users;
    ucp_ep_h ep;              /* NULL once closed */
    ucp_err_handling_mode_t err_mode;
    /* The fabric's fence_seq as of this peer's last direct access (see rma.c). */
    _Atomic uint64_t fence_seen;
    uint32_t rank;
    dsm_fabric_t *fabric;     /* for the endpoint error callback */
    /* The peer's worker address (lanes open endpoints to it) and how many
     * times it has connected: a lane's endpoint belongs to one incarnation.
     * Written by connect with no users on the peer. */
    void *address;
    size_t address_len;
    _Atomic uint64_t incarnation;
    dsm_remote_region_t regions[DSM_FABRIC_MAX_REGIONS];
} dsm_peer_t;

/* Counters: one row per thread slot (util/tslot.h), added to by the slot's
 * holder without an atomic instruction, and a shared row (`counters`, atomic
 * adds) for threads beyond DSM_TSLOTS; dsm_fabric_stats sums them. Same
 * layout of meaning as dsm_stats_t. Every field is a uint64_t. */
typedef struct dsm_fabric_counters {
    uint64_t gets, puts, atomics, bytes_read, bytes_written;
    uint64_t am_sent, am_recv, am_bytes_sent, am_bytes_recv, am_rejected;
    uint64_t errors;
    uint64_t waits, wait_sleeps, progress_wakeups, progress_parks, linger_backoffs, linger_crowded;
    uint64_t wait_spins_cut, progress_empty_wakeups, wait_kicks;
    uint64_t round_trips_waited, round_trip_wait_ns, round_trips_slept;
    uint64_t am_sent_by_handler[DSM_AM_MAX_HANDLERS];
    uint64_t am_recv_by_handler[DSM_AM_MAX_HANDLERS];
    /* rows stay a multiple of 128 bytes: two threads' adds share no cache line */
    uint64_t unused_to_a_block[9];
} dsm_fabric_counters_t;
_Static_assert(sizeof(dsm_fabric_counters_t) % 128 == 0, "counter rows are whole 128-byte blocks");

#define DSM_COUNT(f, field, n) DSM_TSLOT_ADD((f)->counter_slots, (f)->counters, field, n)
/* Counter `field` of `row` (dsm_fabric_counter_row), or of the shared row
 * if it is NULL. */
#define DSM_COUNT_ROW(f, row, field, n)                                              \
    do {                                                                             \
        if (row)                                                                     \
            dsm_tslot_add(&(row)->field, (uint64_t)(n));                             \
        else                                                                         \
            __atomic_fetch_add(&(f)->counters.field, (uint64_t)(n), __ATOMIC_RELAXED); \
    } while (0)
/* Counter `field` summed over the rows (as dsm_fabric_stats sees it). */
#define DSM_COUNTER(f, field) \
    dsm_tslot_sum((f)->counter_slots, sizeof(dsm_fabric_counters_t), &(f)->counters, offsetof(dsm_fabric_counters_t, field))

/* One thread slot's marks (direct.c), each written by the slot's holder
 * only and read by a thread about to close or unmap: `seq` is odd while the
 * holder is inside a direct access, `depth` counts nested entries (the
 * holder's alone); `use` is the peer a send of the holder is using: its
 * rank + 1 in the low 16 bits (0: none), above them a count of entries, so
 * a reader tells a later send from the one it saw. 128 bytes: two slots'
 * words never share a cache line, however the fabric is aligned. */
typedef struct dsm_direct_slot {
    _Atomic uint64_t seq;
    uint64_t depth;
    _Atomic uint64_t use;
    uint64_t pad[13];
} dsm_direct_slot_t;
_Static_assert(sizeof(dsm_direct_slot_t) == 128, "a direct slot is 128 bytes");

typedef struct dsm_am_slot {
    _Atomic(dsm_am_handler_t) fn;
    void *_Atomic ctx;
} dsm_am_slot_t;

/* A requester waiting for a reply: on the stack of dsm_fabric_am_request, or
 * one fragment of an emulated one-sided operation (rma_emu.c). Linked into the
 * fabric's pending list while it waits. */
typedef struct dsm_am_pending {
    struct dsm_am_pending *next, *prev;
    uint64_t id;
    uint32_t rank;
    void *reply;
    size_t cap;
    size_t reply_len;
    dsm_status_t status;
    _Atomic int done;
    /* Emulated one-sided operations only (NULL / false otherwise): called with
     * pending_lock held once the entry has completed and left the list, so
     * it can complete the dsm_op_t without anyone waiting on this entry. */
    void (*on_done)(struct dsm_am_pending *p);
    void *owner;
    bool emulated;
} dsm_am_pending_t;

/* The reply slot of one thread slot (util/tslot.h) for its synchronous
 * requests (dsm_fabric_am_request; a thread waits for one at a time): the
 * request id names the slot and a generation, so a reply finds its waiter
 * without a lock or a search and claims it with one CAS, and a reply to an
 * earlier request (an older generation) finds nothing and is dropped.
 * `word` is gen << 2 | DSM_REPLY_*; `pend` and `rank` are written by the
 * slot's holder before it publishes WAITING (release) and read by whoever
 * claims it. One per 128 bytes: a slot's line is its holder's alone. */
enum { DSM_REPLY_FREE = 0, DSM_REPLY_WAITING = 1, DSM_REPLY_CLAIMED = 2 };
typedef struct dsm_reply_slot {
    _Atomic uint64_t word;
    _Atomic(dsm_am_pending_t *) pend;
    _Atomic uint32_t rank;
    uint8_t pad[128 - 2 * sizeof(uint64_t) - sizeof(uint32_t)];
} dsm_reply_slot_t;
_Static_assert(sizeof(dsm_reply_slot_t) == 128, "a reply slot is 128 bytes");

/* A batch of small messages to one peer (batch.c): room for a window of 64
 * small requests or replies, one tcp segment. */
enum { DSM_BATCH_CAP = 4096 };
typedef struct dsm_msg_batch {
    dsm_fabric_t *f;
    uint32_t rank;
    uint16_t kind;    /* DSM_AM_KIND_REPLY_BATCH or DSM_AM_KIND_REQUEST_BATCH */
    uint32_t n;
    size_t used;
    uint8_t buf[DSM_BATCH_CAP];
} dsm_msg_batch_t;

/* The emulated requests held back while earlier ones to the same peer are
 * in flight (defer.c). */
typedef struct dsm_defer {
    pthread_mutex_t lock;
    _Atomic uint32_t n;          /* q.n, for a check without the lock */
    uint64_t incarnation;        /* of q's peer when its first entry came */
    /* requests that waited in q, and the messages q left in (lock; read
     * by the stats without it) */
    _Atomic uint64_t requests, batches;
    /* entries of the pending table per rank (am.c keeps it) */
    _Atomic uint32_t pending_to[DSM_FABRIC_MAX_PEERS];
    dsm_msg_batch_t q;           /* lock */
} dsm_defer_t;

struct dsm_fabric {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *address;
    size_t address_len;
    uint8_t *wire_address;      /* the address peers get: prefix (am_wire.h) + address */
    size_t wire_address_len;
    dsm_transport_t transport;
    /* One-sided operations on peers' regions that are not mapped here go
     * through our own active messages (rma_emu.c), never UCX RMA/AMO: set
     * for tcp and auto (see dsm_fabric_create). */
    bool emulate_rma;
    struct dsm_chaos *chaos;    /* DSM_CHAOS: the fault injector, NULL when off (chaos.c) */
    dsm_progress_mode_t progress_mode;
    uint32_t op_timeout_ms;
    _Atomic uint32_t rank;
    /* Bumped by every fence; direct accesses compare it to peer->fence_seen. */
    _Atomic uint64_t fence_seq;

    /* progress thread */
    pthread_t thread;
    bool thread_started;
    _Atomic int thread_tid;   /* the kernel's id of that thread, once it runs */
    _Atomic int stop;
    _Atomic int handlers_closed;   /* set by dsm_fabric_stop: requests are refused */
    int worker_efd;           /* UCX's event fd (blocking mode) */
    int wake_fd;              /* eventfd: stop */
    int epoll_fd;
    /* Threads asleep in a wait (wait.c), and the eventfd they sleep on beside
     * the worker's: a pass of another thread (the progress thread, a poller,
     * another waiter) that found work while any sleep writes it, as the
     * answer one of them sleeps for may have been in it, and the worker's
     * fd then stays quiet for that sleeper. */
    _Atomic int sleepers;
    int kick_fd;
    /* Threads waiting on their own thread (wait.c); the progress thread
     * stands down while there are any, and a moment after the last left. */
    _Atomic int waiters;
    /* Waits for a peer's answer begun so far (wait.c; beside `waiters`, whose
     * cache line the waiter holds already), and the progress thread's own
     * view (blocking mode): that count when it last looked, and when it saw
     * it change. */
    _Atomic uint64_t answer_waits;
    uint64_t park_seen_waits, park_seen_ns;
    /* Threads polling the worker in their own loops (dsm_fabric_poller_begin),
     * their polls so far, and that count when the progress thread last looked. */
    _Atomic int pollers;
    _Atomic uint64_t polls;
    uint64_t park_seen_polls;
    _Atomic int progress_parked;   /* the progress thread stands down now (for stats) */
    _Atomic int wait_timing;       /* dsm_fabric_time_waits: on while above 0 */
    uint32_t wait_spin_us;    /* a waiter sleeps on the event fd once idle this long at most */
    uint32_t wait_spin_check; /* it reads the clock every this many idle spins (a power of 2) */
    bool wait_spin_set;       /* ... as $DSM_WAIT_SPIN_US says: not adapted */
    /* how often the answer came within wait_spin_us of a wait going idle
     * (linger.h's estimate, of DSM_LINGER_ONE), shared by the waiters */
    _Atomic uint32_t wait_spin_caught;
    _Atomic int32_t wait_spin_fixed;   /* >= 0: dsm_fabric_fix_wait_spin's budget, overriding both */
    uint32_t progress_linger_us;   /* the progress thread polls this long after activity */
    dsm_linger_t linger;           /* adaptive mode: how long it polls now (progress thread only) */
    /* the check for more runnable threads than cores, sampled by whichever
     * thread asks first (at most every ~2 ms): the linger (hybrid, adaptive) and the
     * waiters' spin budget */
    dsm_crowd_t crowd;

    /* peers: connect/remote_region_add are serialised by `lock`;
     * the operation fast path reads the table without it. */
    pthread_mutex_t lock;
    dsm_peer_t peers[DSM_FABRIC_MAX_PEERS];
    _Atomic(dsm_peer_error_cb_t) error_cb;
    void *_Atomic error_ctx;

    /* active messages */
    dsm_am_slot_t handlers[DSM_AM_MAX_HANDLERS];
    pthread_mutex_t pending_lock;
    /* Doubly linked, oldest first: entries are appended at the tail and a
     * reply's search starts at the head, so replies that come back in the
     * order of their requests (a batch's window) are found at once. Holds
     * emulated ops' entries and the requests of threads without a slot;
     * their ids come from next_request_id, below DSM_REPLY_SLOT_ID. */
    dsm_am_pending_t *pending, *pending_tail;
    _Atomic uint64_t next_request_id;
    /* synchronous requests of threads with a thread slot (no lock) */
    dsm_reply_slot_t reply_slots[DSM_TSLOTS];
    /* emulated requests waiting for an earlier one's reply (defer.c) */
    dsm_defer_t defer;

    /* Local regions, for the emulation's target side: handlers hold the
     * read lock while they touch a region, unregister takes the write lock,
     * so memory is never unmapped under a handler. */
    pthread_rwlock_t regions_lock;
    dsm_region_t *local_regions;   /* singly linked through dsm_region.next */

    /* Direct accesses to mapped peer regions (direct.c): one mark per
     * thread slot; `direct_asym`: the process is registered for expedited
     * membarrier, so an entry needs no fence of its own (the unmapping side
     * issues it for every thread). */
    bool direct_asym;
    dsm_direct_slot_t direct_slots[DSM_TSLOTS];

    /* Membership as the fabric saw it (dsm_stats_t): endpoints handed to
     * UCX (each may connect), peers marked dead as failures and as
     * departures. Rare events: plain atomics. */
    _Atomic uint64_t endpoints_opened, peers_failed, peers_left;

    /* Lanes not closed yet (lane.c), under `lock`: destroy closes them; and
     * their endpoints' error contexts, freed once the worker is gone. */
    struct dsm_lane *lanes;
    struct dsm_lane_err *lane_errs;

    /* Rows on 128-byte boundaries (the struct is allocated so): at
     * calloc's alignment each row's last line was the next row's first. */
    _Alignas(128) dsm_fabric_counters_t counters;     /* the shared row */
    dsm_fabric_counters_t counter_slots[DSM_TSLOTS];  /* one row per thread slot */
};

/* A waited round trip's start, read only while dsm_fabric_time_waits is on:
 * two clock reads per wait would be a few percent of a shm round trip.
 * 0: not timed. */
static inline uint64_t dsm_fabric_wait_clock(dsm_fabric_t *f)
{
    return atomic_load_explicit(&f->wait_timing, memory_order_relaxed) > 0 ? dsm_now_ns() : 0;
}
/* Adds the wait begun at t0 (dsm_fabric_wait_clock) to round_trip_wait_ns. */
#define DSM_COUNT_WAIT_TIME(f, t0)                                     \
    do {                                                               \
        if (t0)                                                        \
            DSM_COUNT(f, round_trip_wait_ns, dsm_now_ns() - (t0));     \
    } while (0)

/* The calling thread's counter row, or NULL (no slot: the shared row), for
 * a path that counts several fields: it finds its slot once. */
static inline dsm_fabric_counters_t *dsm_fabric_counter_row(dsm_fabric_t *f)
{
    unsigned s = dsm_tslot();
    return s <= DSM_TSLOTS ? &f->counter_slots[s - 1] : NULL;
}

/* fabric.c */
dsm_status_t dsm_fabric_status_from_ucs(ucs_status_t status);
/* Take a reference on an alive peer so its endpoint stays open during a UCX
 * call; DSM_ERR_NO_PEER / DSM_ERR_PEER_DEAD otherwise. */
dsm_status_t dsm_fabric_peer_acquire(dsm_fabric_t *f, uint32_t rank, dsm_peer_t **out);
static inline void dsm_fabric_peer_release(dsm_peer_t *peer)
{
    atomic_fetch_sub_explicit(&peer->users, 1, memory_order_release);
}
/* Mark a peer dead (idempotent); `reason` is logged as a failure, NULL: the
 * peer left cleanly (logged as a departure). Safe from callbacks. */
void dsm_fabric_mark_dead(dsm_fabric_t *f, uint32_t rank, const char *reason);
/* Wait for an op on the calling thread, progressing the worker; one not
 * complete yet counts a round trip waited. */
dsm_status_t dsm_fabric_wait_op(dsm_op_t *op, uint32_t timeout_ms);
/* The same for a request's send once its reply came (no round trip: the
 * request's wait for the reply counted it). */
dsm_status_t dsm_fabric_wait_request_sent(dsm_op_t *op, uint32_t timeout_ms);
/* The same for an op whose completion is local (a send leaving). */
dsm_status_t dsm_fabric_wait_sent(dsm_op_t *op);
/* Start an op record; the op completes through dsm_fabric_op_complete_cb. */
void dsm_fabric_op_init(dsm_op_t *op, dsm_fabric_t *f, uint32_t rank);
void dsm_fabric_op_finish(dsm_op_t *op, dsm_status_t status);
/* Handle the return value of a ucp_*_nbx call made for `op`. */
dsm_status_t dsm_fabric_op_submitted(dsm_op_t *op, ucs_status_ptr_t sp);
void dsm_fabric_op_complete_cb(void *request, ucs_status_t status, void *user_data);

/* wait.c: a thread waiting for its operation or reply progresses the worker
 * itself. Use: begin; while (!done) { if (step) { expired/peer checks } }; end.
 * No clock is read on the way of a wait that completes within its first 64
 * idle rounds (a round trip on shm): the timeout starts at the first check. */
enum { DSM_WAIT_LINGER_US = 1000 };
typedef struct dsm_waiter {
    dsm_fabric_t *f;
    unsigned spins;
    uint32_t timeout_ms;
    bool answer;         /* DSM_WAIT_ANSWER: its spin is observed (dsm_fabric_spin_observe) */
    bool spun;           /* an idle period of it had a spin budget (only those are observed) */
    uint64_t idle_since;
    uint64_t spin_ns;    /* the spin budget of this idle period */
    uint64_t slept_from; /* idle_since of the period that first ended in a sleep; 0: none */
    bool round_trip;     /* counted in round_trips_waited (dsm_fabric_waiter_round_trip) */
    uint64_t now;        /* the clock at the last check */
    uint64_t deadline;   /* set at the first check */
    /* The flag whose setting ends the wait, if the waiter names it
     * (dsm_fabric_waiter_watch_*): looked at once more as the waiter goes
     * to sleep, after it has counted itself among the sleepers. */
    const volatile int *op_done;
    const _Atomic int *reply_done;
} dsm_waiter_t;
static inline void dsm_fabric_waiter_watch_op(dsm_waiter_t *w, const dsm_op_t *op) { w->op_done = &op->done; }
static inline void dsm_fabric_waiter_watch_reply(dsm_waiter_t *w, const _Atomic int *done) { w->reply_done = done; }
/* The wait w is for a peer's answer that was not there as it began: one
 * round trip waited (and, if w sleeps before the answer, one slept). */
static inline void dsm_fabric_waiter_round_trip(dsm_waiter_t *w)
{
    DSM_COUNT(w->f, round_trips_waited, 1);
    w->round_trip = true;
}
/* timeout_ms 0: the fabric's op timeout. A wait for a peer's answer (a
 * reply, a one-sided op's completion) tells the progress thread to stay
 * down a moment after it ends, as the waiter's next request is likely near;
 * a wait for a send to leave (DSM_WAIT_SEND) does not: its thread goes back
 * to other work and leaves what arrives next to the progress thread. */
typedef enum { DSM_WAIT_ANSWER, DSM_WAIT_SEND } dsm_wait_kind_t;
void dsm_fabric_waiter_begin(dsm_fabric_t *f, dsm_waiter_t *w, uint32_t timeout_ms, dsm_wait_kind_t kind);
/* Progresses once; true every 64 idle rounds (time for the caller's checks),
 * when the waiter may also have slept on the worker's event fd. */
bool dsm_fabric_waiter_step(dsm_waiter_t *w);
/* After a step that returned true: whether the wait's timeout has passed. */
static inline bool dsm_fabric_waiter_expired(const dsm_waiter_t *w) { return w->now > w->deadline; }
/* ms left of the wait's timeout (at least 1; the whole timeout before the first check). */
uint32_t dsm_fabric_waiter_left_ms(const dsm_waiter_t *w);
void dsm_fabric_waiter_end(dsm_waiter_t *w);
/* The progress thread (blocking mode) only: whether it should stand down now
 * (a waiter is active, or one began less than ~DSM_WAIT_LINGER_US ago). */
bool dsm_fabric_progress_stands_down(dsm_fabric_t *f);
/* The spin budget of a waiter (µs) on `transport`; $DSM_WAIT_SPIN_US wins
 * (*set then true). */
uint32_t dsm_fabric_default_spin_us(dsm_transport_t transport, bool *set);
/* How many idle spins a waiter makes between clock reads on `transport`. */
uint32_t dsm_fabric_spin_check(dsm_transport_t transport);
/* A waiter's spin budget now (µs): $DSM_WAIT_SPIN_US if set, else the
 * transport's while spins catch their answers (none otherwise, but for a
 * probe now and then), at most 20 µs on a crowded host (dsm_linger_spin_us). */
uint32_t dsm_fabric_spin_budget_us(dsm_fabric_t *f, uint64_t now);
/* What a wait for an answer that spun saw: its answer came gap_ns after it
 * went idle (0: the spin caught it, UINT64_MAX: it slept). The waiter's
 * end calls it; exposed for tests. */
void dsm_fabric_spin_observe(dsm_fabric_t *f, uint64_t gap_ns);
/* How long (µs) a hybrid progress thread polls after activity before it
 * arms and sleeps (an adaptive one at most); $DSM_PROGRESS_LINGER_US wins. */
uint32_t dsm_fabric_default_linger_us(void);

/* direct.c: how a thread uses a peer's mapped region without a reference on
 * the peer. A mapping is unmapped only when its peer's endpoint closes
 * (reconnect after death, destroy), which happens only once the peer is no
 * longer alive. A thread marks its slot (enter), then checks that the peer is
 * alive, then uses the mapping, then unmarks (exit); the closing thread
 * marks the peer dead first, then waits for every thread inside a direct
 * access (dsm_fabric_direct_quiesce) before it unmaps. Enter returns 0 for a
 * thread without a slot (beyond DSM_TSLOTS): it takes a peer reference
 * instead. Entries nest. */
void dsm_fabric_direct_init(dsm_fabric_t *f);
static inline unsigned dsm_fabric_direct_enter(dsm_fabric_t *f)
{
    unsigned s = dsm_tslot();
    if (s > DSM_TSLOTS)
        return 0;
    dsm_direct_slot_t *d = &f->direct_slots[s - 1];
    if (d->depth++ == 0) {
        atomic_store_explicit(&d->seq, atomic_load_explicit(&d->seq, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        /* the mark before the peer-state load that follows: with expedited
         * membarrier the closing side supplies the fence for this thread */
        if (f->direct_asym)
            atomic_signal_fence(memory_order_seq_cst);
        else
            atomic_thread_fence(memory_order_seq_cst);
    }
    return s;
}
static inline void dsm_fabric_direct_exit(dsm_fabric_t *f, unsigned s)
{
    dsm_direct_slot_t *d = &f->direct_slots[s - 1];
    if (--d->depth == 0)   /* every access of the mapping before the unmark */
        atomic_store_explicit(&d->seq, atomic_load_explicit(&d->seq, memory_order_relaxed) + 1,
                              memory_order_release);
}
/* The caller has made the peers it will unmap non-alive: returns once no
 * thread can still be using a mapping it saw them alive with, nor (rank <
 * DSM_FABRIC_MAX_PEERS) be inside a send it saw `rank` alive for
 * (dsm_fabric_peer_enter). */
void dsm_fabric_direct_quiesce(dsm_fabric_t *f, uint32_t rank);
/* The send half alone: `rank` is no longer alive; returns once no thread is
 * inside a send it saw it alive for. */
void dsm_fabric_peer_sends_quiesce(dsm_fabric_t *f, uint32_t rank);

/* A send's hold on a peer without a shared atomic: the thread's slot is
 * marked with the peer (a plain store; expedited membarrier on the closing
 * side supplies the fence, as for direct accesses), then the peer is checked
 * alive; the closing side makes it non-alive, then waits for every slot
 * marked with it (dsm_fabric_peer_sends_quiesce). The per-peer count of
 * dsm_fabric_peer_acquire serves a thread without a slot, or one already
 * inside a send (a hold does not nest). Held as a reference is: across one
 * send, never across a wait. */
typedef struct dsm_peer_hold {
    dsm_peer_t *peer;
    _Atomic uint64_t *use;   /* the slot's mark; NULL: a reference is held */
} dsm_peer_hold_t;
enum { DSM_PEER_USE_RANK_BITS = 16 };
_Static_assert(DSM_FABRIC_MAX_PEERS < (1u << DSM_PEER_USE_RANK_BITS), "a rank + 1 fits the mark's low bits");
static inline dsm_status_t dsm_fabric_peer_enter(dsm_fabric_t *f, uint32_t rank, dsm_peer_hold_t *h)
{
    unsigned s = dsm_tslot();
    _Atomic uint64_t *use = s <= DSM_TSLOTS ? &f->direct_slots[s - 1].use : NULL;
    uint64_t w = use ? atomic_load_explicit(use, memory_order_relaxed) : 1;
    if (__builtin_expect(rank >= DSM_FABRIC_MAX_PEERS || (w & ((1u << DSM_PEER_USE_RANK_BITS) - 1)) != 0, 0)) {
        h->use = NULL;
        return dsm_fabric_peer_acquire(f, rank, &h->peer);
    }
    uint64_t next = ((w >> DSM_PEER_USE_RANK_BITS) + 1) << DSM_PEER_USE_RANK_BITS;
    atomic_store_explicit(use, next | (rank + 1), memory_order_relaxed);
    /* the mark before the state load that follows */
    if (f->direct_asym)
        atomic_signal_fence(memory_order_seq_cst);
    else
        atomic_thread_fence(memory_order_seq_cst);
    dsm_peer_t *peer = &f->peers[rank];
    int state = atomic_load_explicit(&peer->state, memory_order_acquire);
    if (state != DSM_PEER_ALIVE) {
        atomic_store_explicit(use, next, memory_order_release);
        return state == DSM_PEER_DEAD ? DSM_ERR_PEER_DEAD : DSM_ERR_NO_PEER;
    }
    h->peer = peer;
    h->use = use;
    return DSM_OK;
}
static inline void dsm_fabric_peer_exit(dsm_peer_hold_t *h)
{
    if (h->use == NULL) {
        dsm_fabric_peer_release(h->peer);
        return;
    }
    /* the UCX call before the unmark; the next entry count, no peer */
    uint64_t w = atomic_load_explicit(h->use, memory_order_relaxed);
    atomic_store_explicit(h->use, w & ~(uint64_t)((1u << DSM_PEER_USE_RANK_BITS) - 1), memory_order_release);
}

/* region.c */
void dsm_fabric_remote_regions_clear(dsm_peer_t *peer);
/* Register a region anew over the same range and swap in the new key (what
 * dsm_fabric_region_remapped does on verbs; callable on any transport, for
 * tests). The old key pointer from dsm_fabric_region_key is released. */
dsm_status_t dsm_fabric_region_reregister(dsm_region_t *r);
/* The local memory at [addr, addr + len) if it lies inside one registered
 * region of `f` (its region in *region, when not NULL), with regions_lock
 * read-held (release with dsm_fabric_local_release); NULL (lock not held)
 * otherwise. */
uint8_t *dsm_fabric_local_acquire(dsm_fabric_t *f, uint64_t addr, uint64_t len, dsm_region_t **region);
void dsm_fabric_local_release(dsm_fabric_t *f);
/* A reply sent from a region's memory in place: begun with regions_lock
 * held (the region is registered), it keeps the region's memory until its
 * end, which unregister waits for. _end takes the region as a void * to
 * serve as the send's completion callback. */
void dsm_fabric_region_send_begin(dsm_region_t *r);
void dsm_fabric_region_send_end(void *region);
/* Its replies in flight from it (for tests). */
unsigned dsm_fabric_region_sends(const dsm_region_t *r);

/* lane.c: a thread's own endpoints. The lane bound to the calling thread,
 * if any (of any fabric: check lane->fabric). */
/* What a lane endpoint's error callback needs: a failure of an endpoint to
 * an earlier incarnation must not mark the peer's new one dead. Kept until
 * the fabric goes (a callback may come while the endpoint closes). */
typedef struct dsm_lane_err {
    dsm_peer_t *peer;
    uint64_t incarnation;
    struct dsm_lane_err *next;   /* in fabric->lane_errs */
} dsm_lane_err_t;
typedef struct dsm_lane_peer {
    ucp_ep_h ep;
    uint64_t incarnation;     /* of the peer, when ep was opened */
    ucp_rkey_h rkey[DSM_FABRIC_MAX_REGIONS];
    uint32_t key_version[DSM_FABRIC_MAX_REGIONS];
} dsm_lane_peer_t;
struct dsm_lane {
    dsm_fabric_t *fabric;
    struct dsm_lane *next, **prevp;   /* in fabric->lanes */
    unsigned opened;                  /* endpoints opened so far */
    uint64_t used;                    /* operations that went through them */
    struct dsm_rkey_retired *retired; /* keys replaced by a rekey */
    dsm_lane_peer_t *peers[DSM_FABRIC_MAX_PEERS];   /* at first use */
};
extern _Thread_local struct dsm_lane *dsm_fabric_lane_tls;
/* Slow path of dsm_fabric_ep: the lane's endpoint to the acquired peer,
 * opened (or reopened for a new incarnation) now; the shared one if that
 * fails. */
ucp_ep_h dsm_fabric_lane_ep(struct dsm_lane *lane, dsm_peer_t *peer);
/* The lane's own endpoint to the acquired peer, opened now if need be; NULL
 * when the shared one serves it. */
ucp_ep_h dsm_fabric_lane_own_ep(struct dsm_lane *lane, dsm_peer_t *peer);
/* The endpoint and key a thread with `lane` uses for a one-sided operation
 * on an acquired peer's valid, unmapped region of the lane's fabric: the
 * lane's, or the shared ones. */
void dsm_fabric_lane_route(struct dsm_lane *lane, dsm_peer_t *peer, uint32_t region, ucp_ep_h *ep, ucp_rkey_h *rkey);
/* The lane bound to the calling thread on f, or NULL (none, or another fabric's). */
static inline struct dsm_lane *dsm_fabric_lane_of(const dsm_fabric_t *f)
{
    struct dsm_lane *l = dsm_fabric_lane_tls;
    return __builtin_expect(l != NULL && l->fabric == f, 0) ? l : NULL;
}
/* The endpoint the calling thread sends on to an acquired peer. */
static inline ucp_ep_h dsm_fabric_ep(dsm_fabric_t *f, dsm_peer_t *peer)
{
    struct dsm_lane *l = dsm_fabric_lane_of(f);
    return l == NULL ? peer->ep : dsm_fabric_lane_ep(l, peer);
}
/* The calling thread's lane endpoint to `rank` if it has one open now, for
 * a flush that must cover it too; NULL otherwise. */
ucp_ep_h dsm_fabric_lane_open_ep(dsm_fabric_t *f, uint32_t rank);
/* destroy: close the lanes still open (no thread may use them any more);
 * once the worker is gone, free the lane endpoints' error contexts. */
void dsm_fabric_lanes_close_all(dsm_fabric_t *f);
void dsm_fabric_lane_errs_free(dsm_fabric_t *f);
/* An endpoint to the worker at `addr` on f's worker, whose failures call
 * on_error(arg) (fabric.c). */
ucs_status_t dsm_fabric_ep_create(dsm_fabric_t *f, const void *addr, ucp_err_handling_mode_t mode,
                                  ucp_err_handler_cb_t on_error, void *arg, ucp_ep_h *ep);
/* Close endpoints with a flush, bounded by a second in all (fabric.c; see
 * close_endpoint there). NULL entries are skipped. */
void dsm_fabric_close_eps(dsm_fabric_t *f, ucp_ep_h *eps, unsigned n);

/* am.c */
/* A request's id as its handler sees it carries, in bits 55..62, the
 * requester's incarnation here when the request arrived (1..255; 0: the
 * requester was not connected then); a reply strips it and is refused
 * (DSM_ERR_PEER_DEAD) if the rank has connected again since: a new process
 * under the same rank (a departed client's rank reused) must not receive a
 * reply to a request of the one before it, whose ids it reuses. Requesters
 * leave these bits 0 (a request with any of them set is refused). */
enum { DSM_AM_ID_TAG_SHIFT = 55 };
#define DSM_AM_ID_TAG_MASK (UINT64_C(0xff) << DSM_AM_ID_TAG_SHIFT)
/* The tag of rank's current incarnation if it is alive here, else 0. */
static inline uint64_t dsm_fabric_peer_tag(dsm_fabric_t *f, uint32_t rank)
{
    dsm_peer_t *peer = &f->peers[rank];
    /* the state before the incarnation: connect counts one, then publishes ALIVE */
    if (atomic_load_explicit(&peer->state, memory_order_acquire) != DSM_PEER_ALIVE)
        return 0;
    uint64_t inc = atomic_load_explicit(&peer->incarnation, memory_order_relaxed);
    return (inc % 255 + 1) << DSM_AM_ID_TAG_SHIFT;
}
/* Whether a reply whose id carries `tag` (its bits 55..62, in place) may
 * still go to rank: untagged, or the requester's incarnation is current. */
static inline bool dsm_fabric_reply_current(dsm_fabric_t *f, uint32_t rank, uint64_t tag)
{
    return tag == 0 || (rank < DSM_FABRIC_MAX_PEERS && dsm_fabric_peer_tag(f, rank) == tag);
}
/* > 0 while this thread runs an AM handler (inside UCX progress), where
 * blocking calls, which progress the worker themselves, are not allowed. */
extern _Thread_local int dsm_fabric_handler_depth;
/* The endpoint the message being handled on this thread came in on, if its
 * sender asked for replies that way (UCP_AM_SEND_FLAG_REPLY), else NULL. */
extern _Thread_local ucp_ep_h dsm_fabric_reply_ep;
/* dsm_fabric_am_reply, but through dsm_fabric_reply_ep when this fabric has
 * no live endpoint of its own to dst_rank (a peer that reached us before we
 * connected to it). Only from inside the handler of the request. */
dsm_status_t dsm_fabric_am_reply_via(dsm_fabric_t *f, uint32_t dst_rank, uint64_t request_id,
                                     dsm_status_t status, const void *data, size_t len);
/* A successful reply whose data UCX reads from `data` in place, with no
 * copy, until it calls done(arg) (at once when sent at once); on any error
 * done is not called and the data is the caller's again.
 * DSM_ERR_UNSUPPORTED where only a copy can go (chaos on, or an answer
 * through the arriving endpoint): send one with dsm_fabric_am_reply_via.
 * Only from inside the handler of the request. */
dsm_status_t dsm_fabric_am_reply_inplace(dsm_fabric_t *f, uint32_t dst_rank, uint64_t request_id, const void *data,
                                         size_t len, void (*done)(void *arg), void *arg);
dsm_status_t dsm_fabric_am_init(dsm_fabric_t *f);
/* Fail every pending request to `rank` with `status`. */
void dsm_fabric_am_fail_pending(dsm_fabric_t *f, uint32_t rank, dsm_status_t status);
void dsm_fabric_pending_link(dsm_fabric_t *f, dsm_am_pending_t *p);
/* pending_lock held: unlink, set status and done, run on_done. */
void dsm_fabric_pending_complete_locked(dsm_fabric_t *f, dsm_am_pending_t *p, dsm_status_t status);
void dsm_fabric_pending_unlink_locked(dsm_fabric_t *f, dsm_am_pending_t *p);
/* Send a request for `handler` without waiting: header, `a` and `b` are
 * copied into one buffer that UCX frees on completion. Counts it as sent. */
dsm_status_t dsm_fabric_am_request_detached(dsm_fabric_t *f, uint32_t rank, uint16_t handler,
                                            uint64_t request_id, const void *a, size_t a_len,
                                            const void *b, size_t b_len);

/* batch.c: messages batched per peer (see there). A reply of at most
 * DSM_BATCH_ENTRY_MAX bytes given inside a handler, or an emulated request
 * (with its put data) issued between dsm_fabric_batch_begin and _end, may
 * wait in the calling thread's batch (the functions return false if not
 * taken: the caller then sends it alone); every progress call on the
 * thread ends with a flush, and every send of the thread begins with one,
 * so the batch never overtakes or trails what the thread sends. */
enum { DSM_BATCH_ENTRY_MAX = 256 };
extern _Thread_local uint32_t dsm_fabric_batch_n;   /* entries waiting in this thread's batch */
bool dsm_fabric_batch_reply(dsm_fabric_t *f, uint32_t rank, uint64_t request_id, dsm_status_t status,
                            const void *data, size_t len);
bool dsm_fabric_batch_request(dsm_fabric_t *f, uint32_t rank, uint64_t request_id, const void *req,
                              size_t req_len, const void *extra, size_t extra_len);
void dsm_fabric_batch_flush_slow(void);
/* Sends b as one message (a plain one if it holds one entry) and empties
 * it; requests that could not leave fail as their peer's. */
dsm_status_t dsm_fabric_batch_send(dsm_msg_batch_t *b);
/* Whether an entry of len bytes of `kind` to (f, rank) may join b now. */
bool dsm_fabric_batch_fits(const dsm_msg_batch_t *b, dsm_fabric_t *f, uint32_t rank, uint16_t kind, size_t len);
/* Appends an entry (a request's `extra` bytes after it); false if it does
 * not fit (dsm_fabric_batch_fits) or exceeds DSM_BATCH_ENTRY_MAX. */
bool dsm_fabric_batch_append(dsm_msg_batch_t *b, dsm_fabric_t *f, uint32_t rank, uint16_t kind, uint64_t id,
                             dsm_status_t status, const void *a, size_t a_len, const void *extra, size_t extra_len);
/* dsm_fabric_stop: the calling thread's batch for f leaves now, and a
 * dsm_fabric_batch_begin on f left open ends (f is going away). */
void dsm_fabric_batch_forget(dsm_fabric_t *f);
static inline void dsm_fabric_batch_flush(void)
{
    if (__builtin_expect(dsm_fabric_batch_n != 0, 0))
        dsm_fabric_batch_flush_slow();
}
/* defer.c: Nagle for emulated requests. A small emulated request to a
 * peer that already has a request of this fabric in flight waits in the
 * fabric's queue and leaves with the others queued behind it as one
 * message, at the next progress pass of any thread (the reply to the one
 * in flight brings one), the next send or wait of the issuing thread, or
 * when the queue fills. The queue is the fabric's, not the thread's, so an
 * op waited for by another thread, or by none, still leaves. Not used in
 * handlers or by threads with a lane; under chaos, chaos.c times it. */
void dsm_fabric_defer_init(dsm_fabric_t *f);
/* Takes the request (true; *st: the status of a send it made now), or
 * leaves it to the caller (false). Its pending entry is linked. */
bool dsm_fabric_defer_request(dsm_fabric_t *f, uint32_t rank, uint64_t request_id, const void *req,
                              size_t req_len, const void *extra, size_t extra_len, dsm_status_t *st);
/* Sends the queue; `pass`: for a progress pass, which chaos may skip
 * (the queue held open). */
void dsm_fabric_defer_flush_slow(dsm_fabric_t *f, bool pass);
/* set while this thread sends the queue (under its lock) */
extern _Thread_local int dsm_fabric_defer_sending;
/* Whether the queue holds requests that the calling thread may send now. */
static inline bool dsm_fabric_defer_due(dsm_fabric_t *f)
{
    /* a handler runs inside UCX's progress: the queue's lock is taken
     * before UCX's, never under it */
    return __builtin_expect(atomic_load_explicit(&f->defer.n, memory_order_seq_cst) != 0, 0) &&
           dsm_fabric_handler_depth == 0 && !dsm_fabric_defer_sending;
}
/* Before the calling thread sends anything (or chaos takes a write of
 * it): its deferred requests go first, as its connection keeps its order. */
static inline void dsm_fabric_defer_flush(dsm_fabric_t *f)
{
    if (dsm_fabric_defer_due(f))
        dsm_fabric_defer_flush_slow(f, false);
}
/* The same, for a send or chaos write about to happen; true if instead the
 * caller is to flush after it: under chaos, in a test build with the
 * negative switch defer_order, which lets the thread's later message or
 * write overtake its deferred requests (a check must then catch it). */
static inline bool dsm_fabric_defer_flush_first(dsm_fabric_t *f)
{
#ifdef DSM_TEST_SWITCHES
    if (f->chaos != NULL && dsm_fabric_defer_due(f) && dsm_test_switch("defer_order"))
        return true;
#endif
    dsm_fabric_defer_flush(f);
    return false;
}
/* Waits the calling thread is in (wait.c): 0 on the progress thread. */
extern _Thread_local int dsm_fabric_waiting;
/* After a pass that found work: wakes the sleepers, if any (see
 * dsm_fabric_t.sleepers). Only a thread that is not the one waiter can
 * have taken a sleeper's answer, so the single waiter's own passes, the
 * common case, look at one counter. The fence orders the pass's
 * completions before the look at the sleepers, as a sleeper counts itself
 * before its last look at its flag. */
void dsm_fabric_kick_sleepers_slow(dsm_fabric_t *f);
static inline void dsm_fabric_kick_sleepers(dsm_fabric_t *f)
{
    if (atomic_load_explicit(&f->waiters, memory_order_relaxed) <= (dsm_fabric_waiting ? 1 : 0))
        return;
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&f->sleepers, memory_order_relaxed) > 0)
        dsm_fabric_kick_sleepers_slow(f);
}
/* One pass of the worker's progress on the calling thread, then what its
 * handlers batched leaves, and the deferred requests. Every progress call
 * of the fabric goes here. */
static inline unsigned dsm_fabric_progress(dsm_fabric_t *f)
{
    unsigned n = ucp_worker_progress(f->worker);
    if (n != 0)
        dsm_fabric_kick_sleepers(f);
    dsm_fabric_batch_flush();
    if (dsm_fabric_defer_due(f))
        dsm_fabric_defer_flush_slow(f, true);
    return n;
}

/* rma_emu.c: one-sided operations emulated with our own active messages. */
/* The op record of an emulated op is tagged in dsm_op_t.request with this
 * bit, so wait/test/abandon tell it from a UCX request. */
#define DSM_EMU_TAG ((uintptr_t)1)
static inline bool dsm_fabric_op_is_emulated(const dsm_op_t *op)
{
    return ((uintptr_t)op->request & DSM_EMU_TAG) != 0;
}
/* Start `m` (op, target address, length, operands) to `rank`: a get lands in
 * dst, an atomic's old value in op->result, a put sends put_data. The op
 * completes when every reply has arrived, the peer fails, or it is abandoned. */
dsm_status_t dsm_fabric_emu_start(dsm_fabric_t *f, uint32_t rank, uint8_t opcode, uint64_t addr,
                                  uint64_t len, uint64_t operand, uint64_t operand2,
                                  void *dst, const void *put_data, dsm_op_t *op);
/* Send a request to `handler` whose reply (at most cap bytes, into reply)
 * completes `op` (op->result: the reply's length), through the same pending
 * record as an emulated op: peer failure, the op timeout, flush and abandon
 * treat it alike. */
dsm_status_t dsm_fabric_emu_request(dsm_fabric_t *f, uint32_t rank, uint16_t handler, const void *req,
                                    size_t req_len, void *reply, size_t cap, dsm_op_t *op);
/* Free the record of a completed emulated op. */
void dsm_fabric_emu_release(dsm_op_t *op);
/* Give up on an emulated op: its entries leave the pending table (a late
 * reply is then dropped, never copied), and it completes with `why` unless
 * it already had. Returns its status. */
dsm_status_t dsm_fabric_emu_abandon(dsm_op_t *op, dsm_status_t why);
/* Wait until every emulated op to `rank` (or to every peer if rank is
 * DSM_FABRIC_MAX_PEERS) issued before this call has completed. Bounded by
 * the op timeout: peers still owing replies then are failed. */
dsm_status_t dsm_fabric_emu_quiesce(dsm_fabric_t *f, uint32_t rank);
/* Whether emulated ops to `rank` (or any) are outstanding. */
bool dsm_fabric_emu_outstanding(dsm_fabric_t *f, uint32_t rank);
/* Registers the target side (DSM_AM_RMA_HANDLER). */
void dsm_fabric_emu_init(dsm_fabric_t *f);

/* Send UCX's log lines through libdsm's log (once per process). */
void dsm_fabric_route_ucx_log(void);

/* Chaos mode (chaos.c). start: from spec ("SEED:SPEC"), or when it is NULL
 * from DSM_CHAOS, if set ("" is off; a malformed spec
 * fails the fabric's creation); stop: what is queued goes out first. send
 * and put: true if chaos took the message or write (the caller is done with
 * it: a write is then "completed before it is placed"); order: whatever is
 * queued to rank (every rank: order_all) goes first; copy: the placement of
 * a write, maybe split into 8-byte pieces in random order. Only called with
 * f->chaos set. */
dsm_status_t dsm_fabric_chaos_start(dsm_fabric_t *f, const char *spec);
void dsm_fabric_chaos_stop(dsm_fabric_t *f);
bool dsm_fabric_chaos_send(dsm_fabric_t *f, uint32_t rank, const dsm_am_wire_t *h, const void *a, size_t a_len,
                           const void *b, size_t b_len);
bool dsm_fabric_chaos_put(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset, const void *src,
                          size_t len);
void dsm_fabric_chaos_order(dsm_fabric_t *f, uint32_t rank);
void dsm_fabric_chaos_order_all(dsm_fabric_t *f);
void dsm_fabric_chaos_copy(dsm_fabric_t *f, void *dst, const void *src, size_t len);
/* Set on a thread while it sends queued items (straight out: it neither
 * defers requests nor sends the deferred queue). */
extern _Thread_local int dsm_fabric_chaos_releasing;
/* The deferred requests' queue under chaos (opened, send and closed with
 * its lock held; held without it): opened: it got
 * its first entry, and may be held open for a drawn time (the releaser then
 * sends it when the time is up); send: whether it leaves now that a
 * request joined it (`due`: nothing else is in flight to its peer), false
 * while it is held open, else due or a drawn early send; held: whether a
 * progress pass leaves it be; closed: it was sent. */
void dsm_fabric_chaos_defer_opened(dsm_fabric_t *f);
bool dsm_fabric_chaos_defer_send(dsm_fabric_t *f, bool due);
bool dsm_fabric_chaos_defer_held(dsm_fabric_t *f);
void dsm_fabric_chaos_defer_closed(dsm_fabric_t *f);
/* What chaos holds for `rank` now, as text (diag.c); the length written. */
size_t dsm_fabric_chaos_describe(dsm_fabric_t *f, uint32_t rank, char *buf, size_t len);
/* An active message sent now, past chaos (its releaser's). */
dsm_status_t dsm_fabric_am_send_now(dsm_fabric_t *f, uint32_t rank, const dsm_am_wire_t *h, const void *data,
                                    size_t len);

/* diag.c: a wait for `rank` timed out; logs at warning what this fabric
 * knows of it (`what`: the wait, e.g. "request 5 (handler 9)"), so that a
 * stuck message can be told from a lost reply or an unattended worker. */
void dsm_fabric_describe_timeout(dsm_fabric_t *f, uint32_t rank, const char *what, uint32_t waited_ms);

/* Calls only the fabric and its tests make (not exported). */
uint32_t dsm_fabric_rank(const dsm_fabric_t *fabric);
/* Length of a peer's region, or 0 if unknown. */
uint64_t dsm_fabric_remote_region_length(dsm_fabric_t *fabric, uint32_t rank, uint32_t region_id);
/* How many endpoints the lane has opened so far, and how many messages and
 * UCX operations have left through them (read by the thread using it, or
 * once it is done). */
unsigned dsm_fabric_lane_endpoints(const dsm_lane_t *lane);
uint64_t dsm_fabric_lane_used(const dsm_lane_t *lane);

#endif
