/* Private: delegation across nodes (Gossamer, thesis chapter 3) — deleg's ids
 * in the layers below (its module descriptor, dsm/module.h, whose slot and
 * handler ids the runtime assigns from the module table; fabric region 3),
 * the node's remote state (slot area, handle table, large-request inbox) and
 * each runtime thread's remote state (its endpoints to remote nodes, client
 * pairs and trustee pairs). remote.c runs the protocol, remote_slot.c owns
 * the squares and the slot writes, remote_wire.c the format, remote_share.c
 * who holds an exported property's weight. */
#ifndef DSM_DELEG_REMOTE_H
#define DSM_DELEG_REMOTE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "deleg/internal.h"
#include "deleg/remote_wire.h"
#include "dsm/module.h"
#include "dsm/node.h"

extern dsm_module_t dsm_deleg_module;
enum {
    DSM_DELEG_AM_PUT,   /* a slot write over tcp (RPUT) */
    DSM_DELEG_AM_LARGE, /* a request larger than a slot (RLARGE) */
    DSM_DELEG_AM_TERM,  /* termination probe: reply RTERM */
    DSM_DELEG_AM_SPILL, /* a response too large for its slot (RLARGE, resp) */
    DSM_DELEG_AM_BOARD, /* read the notice board: reply RBOARD */
    DSM_DELEG_AM_MOVE,  /* an imported trust's weight changes node (RMOVE) */
    DSM_DELEG_AM_COUNT,
};
#define DSM_AM_DELEG_PUT dsm_module_am(&dsm_deleg_module, DSM_DELEG_AM_PUT)
#define DSM_AM_DELEG_LARGE dsm_module_am(&dsm_deleg_module, DSM_DELEG_AM_LARGE)
#define DSM_AM_DELEG_TERM dsm_module_am(&dsm_deleg_module, DSM_DELEG_AM_TERM)
#define DSM_AM_DELEG_SPILL dsm_module_am(&dsm_deleg_module, DSM_DELEG_AM_SPILL)
#define DSM_AM_DELEG_BOARD dsm_module_am(&dsm_deleg_module, DSM_DELEG_AM_BOARD)
#define DSM_AM_DELEG_MOVE dsm_module_am(&dsm_deleg_module, DSM_DELEG_AM_MOVE)
enum { DSM_DELEG_REGION = 3 };  /* fabric region id of every node's slot area */
#define DSM_DELEG_PUBLISH_KEY "deleg.slots"
/* The registry kind of delegation closures (dsm_register_closure). */
enum { DSM_DELEG_CLOSURE_KIND = 3 };

/* Not started yet (not idle: others wait for it), running, finished. */
enum { RPHASE_ATTACHED = 0, RPHASE_RUNNING = 1, RPHASE_FINISHED = 2 };

/* Ranks that may take part (the squares are indexed by rank). */
enum { RMAX_NODES = 16 };
/* Batches in flight per (client, trustee) pair: one per slot block. Two on
 * the put path (shm: a slot write is a store, the round trip is short);
 * over tcp, where every slot write is a message through the target's
 * progress thread, four when the squares stay small (at most RINFLIGHT_MSG_MAX_T
 * threads), so more batches hide that latency: SSSP over tcp was bound by
 * two batches per round trip (R->inflight). */
enum { RINFLIGHT = 4, RINFLIGHT_PUT = 2, RINFLIGHT_MSG = 4, RINFLIGHT_MSG_MAX_T = 16 };
/* Slot writes on an endpoint between completion checks ("signalled" ones). */
enum { RSIGNAL_EVERY = 64 };
/* Bytes of large requests a node keeps waiting for their slot (bad peers). */
#define RINBOX_MAX (64u << 20)

/* A staging block: room for the tcp message header, then the block's
 * payload and metadata as they are written to the peer, then seq. */
enum { RSTAGE_HDR = RPUT_HDR, RSTAGE_SIZE = RSTAGE_HDR + RSLOT_PAYLOAD + RSLOT_META + 8 };
typedef struct rstage {
    _Alignas(64) uint8_t buf[RSTAGE_SIZE];
    uint64_t seq_word;    /* the seq the flag write reads from (put path) */
    dsm_op_t ops[2];      /* payload and flag puts (put path) */
    uint8_t live;         /* bit i: ops[i] still to reap before the block is reused */
} rstage_t;

/* One endpoint per (runtime thread, remote node): the thread's lane
 * (rthread.lane) holds the UCX endpoint; here its completion accounting. */
typedef struct rep {
    uint64_t writes;      /* slot writes issued */
    uint64_t unsignalled; /* since the last completion check */
} rep_t;

/* Client side of one (this thread, remote trustee thread) pair. */
typedef struct rpair {
    uint64_t seq_pub;     /* last batch published */
    uint64_t seq_done;    /* last batch whose responses were delivered */
    uint32_t last_handle; /* the property handle of the last request issued (reports) */
    uint16_t flight[RINFLIGHT]; /* requests of the batch in block b (R->inflight used) */
    rstage_t *stage[RINFLIGHT]; /* the client staging square's row, lazily */
    comp_ring_t done;     /* completions in issue order */
    uint8_t *pend;        /* requests not yet in a batch, in long form */
    size_t pend_head, pend_len, pend_cap, pend_count;
} rpair_t;

/* Trustee side of one (remote client thread, this thread) pair. */
typedef struct rin {
    uint64_t seq;          /* last batch served */
    rstage_t *stage[RINFLIGHT]; /* response staging, lazily */
} rin_t;

/* A launched closure's client record, found by token when its result comes. */
typedef struct rlaunch {
    dsm_deleg_then_fn then;
    void *arg;
    uint32_t gen;
    int used;
} rlaunch_t;

typedef struct dsm_deleg_remote dsm_deleg_remote_t;

typedef struct rthread {
    dsm_deleg_remote_t *R;
    rep_t ep[RMAX_NODES];
    dsm_lane_t *lane;      /* its own endpoints to the other nodes, bound while it runs */
    rpair_t *out;          /* [RMAX_NODES * T], index rank * T + trustee */
    rin_t *in;             /* [RMAX_NODES * T], index rank * T + client */
    unsigned busy_out;     /* pairs with pending or in-flight requests */
    int polling;           /* progressing the node's worker (dsm_deleg_remote_polling) */
    /* per-thread caches: closure pointer -> id, id -> closure */
    struct { dsm_deleg_fn fn; uint32_t id; } idc[64];
    struct { uint32_t id; dsm_deleg_fn fn; } fnc[64];
    rlaunch_t *launch;
    uint32_t nlaunch, launch_cap;
    uint64_t tmp_cap;
    uint8_t *tmp;          /* a large request being assembled */
    _Atomic uint64_t rsent, rserved; /* requests published to / served for other nodes */
    /* counters of this thread's batches out (tests and benchmarks read them
     * once the runtime has stopped) */
    uint64_t batches, full_batches, large_out, spilled_out;
    uint64_t big_out;      /* large requests put into a big block (the others went by message) */
    uint64_t overlapped;   /* batches published while the pair's previous one was in flight */
    uint64_t inline_ids;   /* requests whose closure id was past the batch's id cache */
    uint16_t last_count;
} rthread_t;

/* The weight each other node holds of an exported property (remote_share.c),
 * kept on the trustee's node from the property's first export, under the
 * node's hlock; this node's own share is what the rest leaves of the total.
 * `due`: weight of nodes written off (dead) not yet taken from total_weight
 * by its trustee (negative: weight credited back). */
typedef struct dsm_deleg_shares {
    int64_t w[RMAX_NODES];
    int64_t due;
} dsm_deleg_shares_t;

/* A property handle: who may use it and which property it is. */
typedef struct hentry {
    _Atomic(dsm_deleg_prop_t *) prop;
    _Atomic uint32_t gen;
    _Atomic uint32_t trustee;
} hentry_t;
enum { RHANDLES = 1u << 16 };

typedef struct rlarge_msg {
    struct rlarge_msg *next;
    int resp;
    uint32_t rank, client, trustee, index;
    uint64_t seq;
    size_t len;
    uint8_t bytes[];
} rlarge_msg_t;

struct dsm_deleg_remote {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    uint32_t self;
    unsigned T;            /* runtime threads, the same on every node */
    int msg_put;           /* tcp: slot writes are RPUT messages */
    dsm_region_t *region;
    uint8_t *base;
    size_t size;
    uint8_t *own_mem;      /* base when we allocated it (tcp), else NULL */
    size_t big;            /* RBIG_SIZE when the area has big blocks (put path, few threads), else 0 */
    /* The doorbells (remote_bell.c) at the end of the area, one line per
     * runtime thread: a thread that sleeps waits on its own, and whoever
     * writes a slot for it rings it. 0 where not every writer can reach
     * them (tcp, verbs): threads nap. */
    size_t bells_off;
    unsigned inflight;     /* batches in flight per pair: blocks per pair and direction (<= RINFLIGHT) */
    _Atomic int peer_ok[RMAX_NODES];
    _Atomic uint32_t dead;  /* rank + 1 of an attached node that died, or 0 */
    int failed;            /* the last run lost a node: no start before dsm_deleg_rt_recover */
    int lost_props;        /* some run lost a node: its shared properties go at detach */
    dsm_deleg_loss_t loss; /* what the last failed run reported */
    /* Runs: every start counts one. seen[r] is the count rank r has while
     * it takes part in this node's current run (seen_known[r]: learnt from
     * a probe, then advanced at every start), which tells a peer still in
     * the last run (or not started) from one in this run or past it. */
    uint64_t runs;
    uint8_t *board;        /* the notice board (remote_board.c), under lock */
    size_t board_len;
    uint64_t board_tag;    /* runs when it was set, RBOARD_NONE before */
    uint64_t seen[RMAX_NODES];
    uint8_t seen_known[RMAX_NODES];
    /* Per peer, the first of its runs whose slot writes and large messages
     * are taken. Recover moves it past the lost run: over tcp a write sent
     * before the peer stopped travels on its thread's lane, not with the
     * probe's answer, and could land after the clear, where the next run's
     * sequence numbers would take it for their own. `applying` counts slot
     * write handlers between their check and their copy; recover waits for
     * none before it clears the area. */
    _Atomic uint32_t fresh_from[RMAX_NODES];
    _Atomic uint32_t applying;
    _Atomic uint64_t stale_dropped;  /* late writes and messages dropped */
    size_t handlers;       /* how many of our handler ids we registered */
    pthread_mutex_t lock;  /* rt, final counters */
    dsm_deleg_rt_t *rt;
    int phase;             /* RPHASE_*: what the probes report */
    uint32_t run_lost;     /* rank + 1 of the node whose death ended the current run, or 0 */
    uint64_t final_sent, final_served;
    /* The counts at this run's start: the waves count only the run's own
     * requests, so a node that served a peer's requests in an earlier run
     * and lost that peer between runs still balances. */
    uint64_t base_sent, base_served;
    pthread_mutex_t hlock; /* handle insertion, the properties' shares */
    uint32_t written;      /* under hlock: ranks whose shares were written off (bit per rank) */
    hentry_t *htab;
    uint32_t hnext;
    pthread_mutex_t inbox_lock;
    rlarge_msg_t *inbox;
    size_t inbox_bytes;
};

/* The squares in the slot area: requests for trustee s from (r, c), and
 * responses for client c from (r, s), block b. */
static inline size_t rsq_req_off(const dsm_deleg_remote_t *R, unsigned s, unsigned r, unsigned c, unsigned b)
{
    return ((((size_t)s * RMAX_NODES + r) * R->T + c) * R->inflight + b) * RSLOT_SIZE;
}
static inline size_t rsq_resp_off(const dsm_deleg_remote_t *R, unsigned c, unsigned r, unsigned s, unsigned b)
{
    return (size_t)R->T * RMAX_NODES * R->T * R->inflight * RSLOT_SIZE + rsq_req_off(R, c, r, s, b);
}
static inline size_t rsq_size(const dsm_deleg_remote_t *R)
{
    return 2 * (size_t)R->T * RMAX_NODES * R->T * R->inflight * RSLOT_SIZE;
}
/* The big blocks, after the squares (when R->big): the bytes of a request
 * past a slot for trustee s from (r, c), block b, put one-sided. */
static inline size_t rsq_big_off(const dsm_deleg_remote_t *R, unsigned s, unsigned r, unsigned c, unsigned b)
{
    return rsq_size(R) + ((((size_t)s * RMAX_NODES + r) * R->T + c) * R->inflight + b) * R->big;
}
/* The big blocks of responses for client c from (r, s), block b. */
static inline size_t rsq_big_resp_off(const dsm_deleg_remote_t *R, unsigned c, unsigned r, unsigned s, unsigned b)
{
    return rsq_big_off(R, c, r, s, b) + (size_t)R->T * RMAX_NODES * R->T * R->inflight * R->big;
}
/* Big blocks only with at most this many threads (their square grows as T^2). */
enum { RBIG_MAX_THREADS = 8 };

/* Orders the stores before it (a slot's payload) before those after it (its
 * flag). GCC's TSan does not take atomic_thread_fence: there, the locked
 * no-op of deleg_full_fence (a full barrier). */
#ifdef DSM_TSAN
static inline void deleg_release_fence(void) { deleg_full_fence(); }
#else
static inline void deleg_release_fence(void) { atomic_thread_fence(memory_order_release); }
#endif

/* remote_bell.c: a runtime thread's doorbell, a word in its node's slot
 * area (over shm, where the peers map the area). A thread about to sleep
 * arms its bell, looks once more for work, then waits on the bell (a shared
 * futex); a slot write for a thread, once its flag is stored, rings the
 * thread's bell on the peer's mapping if armed, and so do a large message's
 * handler and a local wake. Ringing is a load when nobody sleeps. */
enum { RBELL_STRIDE = 64 };
static inline _Atomic uint32_t *rbell_at(const dsm_deleg_remote_t *R, uint8_t *base, unsigned t)
{
    return (_Atomic uint32_t *)(uintptr_t)(base + R->bells_off + (size_t)t * RBELL_STRIDE);
}
/* Arm this thread's bell (then the caller looks for work once more). */
void dsm_rbell_arm(deleg_thread_t *th);
/* Disarm it (the last look found work). */
void dsm_rbell_disarm(deleg_thread_t *th);
/* Wait on the armed bell until rung or timeout_us passes; disarms it. */
void dsm_rbell_wait(deleg_thread_t *th, long timeout_us);
/* Ring thread t's bell on this node (after its slot's flag is stored). */
void dsm_rbell_ring_local(dsm_deleg_remote_t *R, unsigned t);
/* Ring thread t's bell on node `rank` (after a slot write to it). */
void dsm_rbell_ring(dsm_deleg_remote_t *R, uint32_t rank, unsigned t);

/* remote_slot.c */
dsm_status_t dsm_rslot_area_create(dsm_deleg_remote_t *R, dsm_transport_t transport);
void dsm_rslot_area_destroy(dsm_deleg_remote_t *R);
/* The stage's batch (payload_len bytes at buf + RSTAGE_HDR followed by the
 * metadata) goes to block_off on `rank`, flag last, and rings the bell of
 * thread `to` there (the trustee of a request, the client of responses). */
dsm_status_t dsm_rslot_write(dsm_deleg_remote_t *R, rep_t *ep, uint32_t rank, unsigned to, size_t block_off,
                             rstage_t *st, size_t payload_len, uint64_t seq);
/* A request past a slot into the big block at big_off on `rank` (R->big):
 * complete when it returns, so the batch flag written next follows it. */
dsm_status_t dsm_rslot_put_big(dsm_deleg_remote_t *R, uint32_t rank, size_t big_off, const void *bytes, size_t len);
/* Reap the stage's write before the block is reused; DSM_OK when free. */
dsm_status_t dsm_rslot_reap(rstage_t *st, int wait);
/* The acquire-loaded ready flag of a block of this node's area. */
static inline uint64_t rslot_seq(const uint8_t *block)
{
    return atomic_load_explicit((_Atomic uint64_t *)(uintptr_t)(block + RSLOT_SEQ_AT), memory_order_acquire);
}
void dsm_rslot_put_handler(void *ctx, const dsm_am_msg_t *msg);
/* DSM_AM_DELEG_LARGE and _SPILL: keep the message in the inbox. */
void dsm_rinbox_handler(void *ctx, const dsm_am_msg_t *msg);
/* Find (and with take, unlink: the caller frees it) a message of the inbox. */
rlarge_msg_t *dsm_rinbox_find(dsm_deleg_remote_t *R, int resp, uint32_t rank, unsigned client, unsigned trustee,
                              uint64_t seq, uint32_t index, int take);
/* A staging block, allocated on first use. */
rstage_t *dsm_rstage_get(rstage_t **slot);

/* remote.c, for remote_serve.c and remote_term.c */
dsm_deleg_fn dsm_deleg_rfn_find(rthread_t *rt, uint32_t id);
dsm_deleg_prop_t *dsm_deleg_rhandle_find(dsm_deleg_remote_t *R, uint32_t handle, unsigned s);
/* Fate sharing: node `rank` died (also the node's dead-peer callback). */
void dsm_deleg_rpeer_dead(void *ctx, uint32_t rank);

/* remote_serve.c: serve the next batch of client (rank, c) if it is there */
int dsm_deleg_rserve_pair(deleg_thread_t *th, uint32_t rank, unsigned c, rin_t *in);

/* remote_term.c: the termination probe (DSM_AM_DELEG_TERM) */
void dsm_deleg_rterm_handler(void *ctx, const dsm_am_msg_t *msg);
/* remote_board.c: the notice board (DSM_AM_DELEG_BOARD) */
void dsm_deleg_rboard_handler(void *ctx, const dsm_am_msg_t *msg);

/* remote.c, called by the local code */
void dsm_deleg_remote_thread_init(deleg_thread_t *th);
void dsm_deleg_remote_thread_free(deleg_thread_t *th);
/* Recover (the thread has stopped): the state as _init makes it, in place,
 * but for rsent and rserved, which the caller zeroes with R's bases under
 * R->lock. Not under R->lock: completing the lost run's writes progresses
 * the fabric, whose probe handler takes it. */
void dsm_deleg_remote_thread_reset(deleg_thread_t *th);
int dsm_deleg_remote_step(deleg_thread_t *th);
/* A batch or its responses from another node wait for this thread. */
int dsm_deleg_remote_incoming(deleg_thread_t *th);
/* Over tcp a slot write is a message: a runtime thread progresses its node's
 * worker itself while it runs (on = 1), so that no message waits for the
 * progress thread to wake; off (0) before it sleeps or exits. */
void dsm_deleg_remote_polling(deleg_thread_t *th, int on);
/* A runtime thread sends on its own endpoints (its lane) while it runs:
 * bind (on = 1) at its start, unbind (0) at its end. */
void dsm_deleg_remote_bind(deleg_thread_t *th, int on);
dsm_status_t dsm_deleg_remote_join(dsm_deleg_rt_t *rt);
/* The application's phase on this node, for the other nodes' probes. */
void dsm_deleg_remote_started(dsm_deleg_rt_t *rt);
/* The run ended with status st (the join's): records what a dead node left
 * unanswered, for dsm_deleg_rt_loss. */
void dsm_deleg_remote_finished(dsm_deleg_rt_t *rt, dsm_status_t st);
/* DSM_ERR_STATE after a run that lost a node, until recovered. */
dsm_status_t dsm_deleg_remote_can_start(dsm_deleg_rt_t *rt);
/* The remote half of dsm_deleg_rt_recover (the threads have stopped). */
dsm_status_t dsm_deleg_remote_recover(dsm_deleg_rt_t *rt, uint32_t timeout_ms);
#ifdef DSM_TEST_SWITCHES
/* Test builds: attach fails to make thread i's remote state (UINT_MAX: none). */
extern unsigned dsm_deleg_thread_init_fail_at;
/* Test builds: recover calls it, no lock held, after it has reset thread
 * i's state, so a test can probe the node in the middle of the reset. */
extern void (*dsm_deleg_recover_hook)(dsm_deleg_rt_t *rt, unsigned i);
#endif
void dsm_deleg_remote_detach(dsm_deleg_rt_t *rt);

/* remote_share.c: who holds an exported property's weight. */
/* The shares of a property at its first export (under hlock). */
dsm_status_t dsm_deleg_shares_new(dsm_deleg_prop_t *p);
/* A remote drop (delta < 0) or refill (> 0) from rank, as the trustee
 * serves it (before it changes total_weight). */
void dsm_deleg_shares_note(dsm_deleg_remote_t *R, dsm_deleg_prop_t *p, uint32_t rank, int64_t delta);
/* The handler of DSM_AM_DELEG_MOVE, and the same move on this node for an
 * import or export here: weight moves from rank `from` to rank `to`;
 * `named`: `to` was named by an export, refused (DSM_ERR_NO_PEER) if it was
 * written off. */
void dsm_deleg_rmove_handler(void *ctx, const dsm_am_msg_t *msg);
dsm_status_t dsm_deleg_shares_move(dsm_deleg_remote_t *R, uint32_t handle, unsigned trustee, uint32_t from,
                                   uint32_t to, uint64_t weight, int named);
/* Node `rank` died: its shares are written off (taken from the totals by
 * the trustees later: dsm_deleg_shares_settle). A node that joins later in
 * its rank starts with none (dsm_deleg_shares_rank_joined). */
void dsm_deleg_shares_lose(dsm_deleg_remote_t *R, uint32_t rank);
void dsm_deleg_shares_rank_joined(dsm_deleg_remote_t *R, uint32_t rank);
/* The runtime is stopped: take every property's due from its total, and
 * free those that reach zero (their destructors run here). */
void dsm_deleg_shares_settle(dsm_deleg_rt_t *rt);
/* The trustee's total of exported p reached zero: fold in its due; 1 if it
 * is still zero (its handle forgotten, the caller frees p), 0 if not. */
int dsm_deleg_shares_release(dsm_deleg_prop_t *p);
/* The trustee's total of exported p is short of w: fold in its due. */
void dsm_deleg_shares_fold(dsm_deleg_prop_t *p);

/* A remote trust's `remote`: the holder's rank + 1 (the node it was
 * imported on: the exporter of its shares) in bits 56-63, the trustee's
 * rank + 1 in 48-55, the trustee thread in 32-47, the handle below. */
static inline uint64_t trust_remote_of(uint32_t holder, uint32_t rank, unsigned trustee, uint32_t handle)
{
    return ((uint64_t)(holder + 1) << 56) | ((uint64_t)(rank + 1) << 48) | ((uint64_t)trustee << 32) | handle;
}
static inline int trust_is_remote(const dsm_deleg_trust_t *t) { return t->remote != 0; }
static inline uint32_t trust_holder(const dsm_deleg_trust_t *t) { return (uint32_t)(t->remote >> 56) - 1; }
static inline uint32_t trust_rank(const dsm_deleg_trust_t *t) { return (uint32_t)((t->remote >> 48) & 0xff) - 1; }
static inline unsigned trust_thread(const dsm_deleg_trust_t *t) { return (unsigned)((t->remote >> 32) & 0xffff); }
static inline uint32_t trust_handle(const dsm_deleg_trust_t *t) { return (uint32_t)t->remote; }

dsm_status_t dsm_deleg_remote_apply(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                    const void *args, size_t args_len, void *ret, size_t ret_cap, size_t *ret_len);
dsm_status_t dsm_deleg_remote_apply_then(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                         const void *args, size_t args_len, size_t ret_size,
                                         dsm_deleg_then_fn then, void *cb_arg);
dsm_status_t dsm_deleg_remote_launch(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                     const void *args, size_t args_len, dsm_deleg_then_fn then, void *cb_arg);
dsm_status_t dsm_deleg_remote_clone(dsm_deleg_trust_t *src, dsm_deleg_trust_t *out);
dsm_status_t dsm_deleg_remote_drop(dsm_deleg_trust_t *t);
/* Queue a request in its wire terms (apply_then on a remote trust without
 * the closure-pointer lookup); tests use it to send what no API call would. */
dsm_status_t dsm_deleg_remote_issue(deleg_thread_t *th, uint32_t rank, unsigned s, uint32_t fn_id, uint8_t kind,
                                    uint32_t handle, uint32_t ret_size, const void *env, size_t env_len,
                                    const void *args, size_t args_len, dsm_deleg_then_fn then, void *cb_arg);
/* A launched closure of a remote client finished: send it its result. */
void dsm_deleg_remote_launch_done(deleg_thread_t *th, uint32_t rank, unsigned client, uint64_t token,
                                  dsm_status_t st, const void *data, size_t len);

#endif
