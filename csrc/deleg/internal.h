/* Private: the delegation runtime's shared structures — runtime, per-thread
 * state, slot layout and request encoding — used by rt.c, slot.c, apply.c and
 * trust.c. Cross-thread fields are marked; everything else is owned by one
 * thread and needs no synchronisation. */
#ifndef DSM_DELEG_INTERNAL_H
#define DSM_DELEG_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "deleg/fiber.h"
#include "util/crowd.h"
#include "util/linger.h"
#include "util/zalloc.h"
#include "dsm/api.h"
#include "dsm/deleg.h"

/* --- slots (§2.5.3) ------------------------------------------------------
 * Per (client c, trustee s): two request slots written only by c and two
 * response slots written only by s, each a 128-byte primary block plus a
 * 1024-byte overflow block. Two slots let two batches be in flight per pair
 * (the thesis keeps one; the issue asks for two): batch k uses slot k % 2,
 * the trustee serves the slots alternately, the client polls the oldest.
 * Primary blocks of all clients of one trustee are adjacent (the trustee
 * scans flags 256 bytes apart, two slots per client); so are the response
 * primaries of all trustees of one client. The header sits at the start of
 * the primary block; a batch is ready when the request toggle differs from
 * the response toggle of the same slot. Only acquire loads and release
 * stores touch the toggles. */
#define SLOT_INFLIGHT 2u
#define SLOT_PRIMARY 128u
#define SLOT_OVERFLOW 1024u
#define SLOT_HDR 16u
#define SLOT_PRIMARY_PAYLOAD (SLOT_PRIMARY - SLOT_HDR)

typedef struct slot_hdr {
    _Atomic uint32_t toggle; /* cross-thread: written by the slot's owner (release) */
    uint16_t count;          /* requests (or responses) in the batch */
    uint16_t primary_count;  /* how many of them sit in the primary block */
    /* Request slot: the batch's total minimum response footprint, so the
     * trustee can place responses in one pass instead of pre-scanning. */
    uint16_t resp_min;
    /* Bytes used in the overflow block: the reader prefetches (trustee) or
     * copies (client) exactly these instead of walking the batch first. */
    uint16_t ovf_len;
    uint16_t flags;          /* request slot: SLOT_HINTED */
    uint16_t pad;
} slot_hdr_t;
/* Some request of the batch carries a prefetch hint (REQF_HINT). */
#define SLOT_HINTED 1u
_Static_assert(sizeof(slot_hdr_t) == SLOT_HDR, "slot header size");

/* A request: {meta, fn, prop} then env (padded to 8) then args (inline and
 * padded, or spilled as {ptr, len}); 24 bytes at least, as in the thesis.
 * A request for the same fn and prop as the pair's previous one (REQF_SAME)
 * leaves the two out: 8 bytes and the env. Requests of a pair are served in
 * the order they were issued, so the trustee keeps the pair's last target
 * (pair_in_t) and one hot closure on one property, the common stream, moves
 * half the cache lines from client to trustee (a 4-byte env: 16 bytes a
 * request, not 32). */
#define REQ_META 8u
#define REQ_TARGET 16u
enum { REQ_USER = 0, REQ_SYS = 1, REQ_LAUNCH = 2 };
/* REQF_HINT: the first 8 bytes of env are a hint for the property's
 * prefetch hook (see dsm_deleg_prop), run over the whole batch before any
 * closure of it: the trustee then takes the batch's cache misses together
 * instead of one closure after another. */
enum { REQF_VAR = 1, REQF_ARGS_SPILL = 2, REQF_HINT = 4, REQF_SAME = 8 };

typedef struct req_meta {
    uint16_t env_len;
    uint16_t ret_size;   /* fixed response size when !REQF_VAR */
    uint16_t args_len;   /* inline args bytes (0 when spilled) */
    uint8_t kind;
    uint8_t flags;
} req_meta_t;

/* Fixed responses above this size travel as variable ones. */
#define RET_FIXED_MAX 256u
/* Variable response: {u32 len, u32 flags} then data, or {hdr, ptr} spilled. */
#define RESP_SPILLED 1u
#define RET_VAR_SIZE UINT32_MAX

/* A full fence for the sleep handshake and termination waves. GCC's TSan
 * does not model atomic_thread_fence, so sanitizer builds use a locked no-op
 * on a private word instead (also a full barrier; never in the slot path). */
#ifdef DSM_TSAN
static inline void deleg_full_fence(void)
{
    static _Thread_local _Atomic int word;
    atomic_fetch_add_explicit(&word, 0, memory_order_seq_cst);
}
#else
static inline void deleg_full_fence(void) { atomic_thread_fence(memory_order_seq_cst); }
#endif

static inline size_t r8(size_t n) { return (n + 7) & ~(size_t)7; }

/* memcpy for the few-byte environments and results of typical closures: with
 * a size unknown at compile time memcpy is a libc call on every request;
 * the common sizes are inlined. */
static inline void deleg_copy(void *dst, const void *src, size_t n)
{
    switch (n) {
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 16: memcpy(dst, src, 16); break;
    default: memcpy(dst, src, n);
    }
}

/* --- properties ---------------------------------------------------------- */
/* Every call reads the first line (obj, trustee); the trustee writes the
 * second. Allocated on its own 128-byte block (trust.c): next to a hot user
 * object, a client's read of `trustee` missed on every call (perf: a fifth
 * of apply_then with 16 counters malloc'd beside their props). */
struct dsm_deleg_prop {
    void *obj;
    dsm_deleg_dtor_fn dtor;
    dsm_deleg_rt_t *rt;
    unsigned trustee;
    int latched;
    dsm_deleg_prefetch_fn prefetch; /* set before the first request, or NULL */
    uint32_t handle;        /* its handle for remote trusts (remote.c), 0 if none */
    _Alignas(64) uint64_t total_weight; /* trustee-owned: sum of live weights */
    /* Who holds the weight, once exported (remote_share.c; NULL before). */
    struct dsm_deleg_shares *shares;
    /* Latch<T>: a single-thread mutex, only touched on the trustee thread. */
    int latch_held;
    dsm_fiber_t *latch_head, *latch_tail;
};

/* --- client side of one (client, trustee) pair ---------------------------- */
typedef struct comp {
    dsm_deleg_then_fn then;  /* NULL: nothing to run */
    void *arg;
    uint32_t ret_size;       /* fixed size, or RET_VAR_SIZE */
    uint32_t pad;
} comp_t;

/* Completion records in issue order: a ring that doubles when full (its
 * size a power of two; head and tail count up and wrap). The local and the
 * remote client side keep one per pair. Only the pair's client thread
 * writes head and tail; it stores them atomically (COMP_SET) so another
 * thread may read how many requests wait. */
#define COMP_SET(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELEASE)
typedef struct comp_ring {
    comp_t *comp;
    uint32_t head, tail, mask;
} comp_ring_t;

/* The next record, filled in place by the caller; NULL when out of memory. */
comp_t *dsm_deleg_comp_push(comp_ring_t *r);

typedef struct pair_out {
    uint32_t toggle[SLOT_INFLIGHT]; /* last toggle published in each slot */
    uint8_t in_flight;        /* published batches awaiting responses (0..2) */
    uint8_t oldest;           /* slot of the oldest of them; staging goes to
                               * slot (oldest + in_flight) % 2 */
    uint8_t in_overflow;      /* staging has moved to the overflow block */
    uint16_t staged;          /* requests written into the slot, unpublished */
    uint16_t staged_primary;
    uint16_t flight_count[SLOT_INFLIGHT];
    uint16_t staged_flags;    /* SLOT_HINTED if a staged request is hinted */
    uint32_t plen, olen;      /* staged bytes in primary payload / overflow */
    uint32_t resp_min;        /* their minimum response footprint */
    /* completions in issue order (staged, in flight and pending) */
    comp_ring_t done;
    /* requests waiting for the slot, encoded as in the slot */
    uint8_t *pend;
    size_t pend_head, pend_len, pend_cap, pend_count;
    /* the target of the last request encoded (staged or pending): REQF_SAME */
    dsm_deleg_fn last_fn;
    dsm_deleg_prop_t *last_prop;
} pair_out_t;

/* --- trustee side of one (client, trustee) pair --------------------------- */
typedef struct pair_in {
    uint32_t toggle[SLOT_INFLIGHT]; /* last response toggle of each slot */
    uint8_t next;                   /* the slot the client's next batch is in */
    /* the target of the last request served: what REQF_SAME refers to */
    dsm_deleg_fn last_fn;
    dsm_deleg_prop_t *last_prop;
} pair_in_t;

typedef struct deleg_thread {
    dsm_deleg_rt_t *rt;
    unsigned idx;
    dsm_sched_t sched;
    pair_out_t *out;          /* [threads] client side, per trustee */
    pair_in_t *in;            /* [threads] trustee side, per client */
    int depth;                /* > 0 in delegated context */
    unsigned inline_run;      /* own closures run inline since this thread last served */
    uint64_t outstanding;     /* completions + launches not yet delivered */
    uint64_t sent_local, served_local;
    uint64_t wakeups;         /* eventfd writes to threads asleep (dsm_deleg_counters) */
    uint64_t overlapped;      /* batches published while the pair's other slot was in flight */
    dsm_fiber_t *window_waiter; /* blocked in dsm_deleg_wait_outstanding, or NULL */
    uint64_t window_max;
    unsigned busy_pairs;      /* pairs with staged, in-flight or pending work */
    int main_done;
    int inited;
    int efd;                  /* eventfd for idle sleep */
    int wake_ep;              /* the epoll set efd was added to (dsm_deleg_idle_epoll), or -1 */
    dsm_linger_t linger;      /* the idle wait's (cfg.idle_progress) */
    pthread_t tid;
    struct rthread *remote;   /* its remote side (remote.c) once attached to a node */
    /* cross-thread (termination detection and sleep). On their own 128-byte
     * block: idle trustees poll `idle` of every thread, and sharing a line
     * with `outstanding` (written per request) bounced it on every check. */
    _Alignas(128) _Atomic int idle;
    _Atomic int sleeping;
    _Atomic uint64_t sent;
    _Atomic uint64_t served;
} __attribute__((aligned(128))) deleg_thread_t;

struct dsm_deleg_rt {
    dsm_deleg_config_t cfg;
    unsigned n;
    uint8_t *req_primary;     /* [trustee][client] 128 B */
    uint8_t *req_overflow;    /* [trustee][client] 1024 B */
    uint8_t *resp_primary;    /* [client][trustee] 128 B */
    uint8_t *resp_overflow;   /* [client][trustee] 1024 B */
    deleg_thread_t *th;
    dsm_deleg_main_fn main_fn;
    void *main_arg;
    unsigned spin_limit;      /* idle polls before yielding (rt.c) */
    dsm_crowd_t crowd;        /* attached: past spin_limit, nap instead of yield on a crowded host */
    _Atomic int running;
    _Atomic int stop;
    int started;
    struct dsm_deleg_remote *remote; /* attached to a node (remote.c), or NULL */
};

static inline size_t slot_index(dsm_deleg_rt_t *rt, unsigned x, unsigned y, unsigned b)
{
    return ((size_t)x * rt->n + y) * SLOT_INFLIGHT + b;
}
static inline slot_hdr_t *req_hdr(dsm_deleg_rt_t *rt, unsigned s, unsigned c, unsigned b)
{
    return (slot_hdr_t *)(rt->req_primary + slot_index(rt, s, c, b) * SLOT_PRIMARY);
}
static inline uint8_t *req_ovf(dsm_deleg_rt_t *rt, unsigned s, unsigned c, unsigned b)
{
    return rt->req_overflow + slot_index(rt, s, c, b) * SLOT_OVERFLOW;
}
static inline slot_hdr_t *resp_hdr(dsm_deleg_rt_t *rt, unsigned c, unsigned s, unsigned b)
{
    return (slot_hdr_t *)(rt->resp_primary + slot_index(rt, c, s, b) * SLOT_PRIMARY);
}
static inline uint8_t *resp_ovf(dsm_deleg_rt_t *rt, unsigned c, unsigned s, unsigned b)
{
    return rt->resp_overflow + slot_index(rt, c, s, b) * SLOT_OVERFLOW;
}

extern _Thread_local deleg_thread_t *dsm_deleg_tls;

/* The result writer behind dsm_deleg_ret_t. */
enum { RET_SLOT, RET_BUF };
struct resp_writer;
struct dsm_deleg_ret {
    int mode;
    int var;
    int done;
    size_t fixed;             /* fixed result size when !var */
    /* RET_SLOT */
    struct resp_writer *w;
    uint32_t min_after;       /* min footprint of the responses after this one */
    /* both: where the result went */
    uint8_t *data;
    size_t len;
    /* RET_BUF: a growable heap buffer (local calls, launch) */
    uint8_t *heap;
    size_t heap_cap;
    uint8_t inline_buf[64];
};

/* A result written in place (RET_SLOT): a fixed-size one straight into
 * `data`, zeroed to its 8-byte-rounded size so a short result reads as
 * zero-padded (a constant size makes the common 8-byte case one store, not a
 * call); or, with data NULL, a variable one that writer `w` places when the
 * closure returns it. Field by field: an initializer would also zero the
 * 64-byte inline buffer (RET_BUF's), once per request. Used by the trustee
 * for slot responses and by local calls for small results. */
static inline void deleg_ret_init_inplace(dsm_deleg_ret_t *r, uint8_t *data, size_t fixed, struct resp_writer *w,
                                          uint32_t min_after)
{
    r->mode = RET_SLOT;
    r->var = data == NULL;
    r->done = 0;
    r->fixed = fixed;
    r->w = w;
    r->min_after = min_after;
    r->data = data;
    r->len = data ? fixed : 0;
    r->heap = NULL;
    r->heap_cap = 0;
    if (data) {
        if (r8(fixed) == 8) memset(data, 0, 8);
        else memset(data, 0, r8(fixed));
    }
}

/* slot.c */
/* req_flags: 0 or REQF_HINT (env then starts with the 8-byte hint). */
dsm_status_t dsm_deleg_issue(deleg_thread_t *th, unsigned trustee, dsm_deleg_fn fn, dsm_deleg_prop_t *prop,
                             int kind, const void *env, size_t env_len, const void *args, size_t args_len,
                             size_t ret_size, dsm_deleg_then_fn then, void *cb_arg, unsigned req_flags);
/* serve incoming, poll responses, publish staged; returns nonzero if it did work */
int dsm_deleg_step(deleg_thread_t *th);
/* Serve the batches waiting for this trustee now, from a fiber between two
 * of its own inline calls (apply.c): see DELEG_INLINE_RUN. */
void dsm_deleg_serve_between(deleg_thread_t *th);
int dsm_deleg_thread_quiet(const deleg_thread_t *th);
void dsm_deleg_pairs_free(deleg_thread_t *th);

void *dsm_deleg_slot_reserve(dsm_deleg_ret_t *r, size_t len);

/* apply.c */
/* dsm_deleg_apply_then with request flags (REQF_HINT): the public
 * apply_then is this with none, apply_then_hinted with REQF_HINT. */
dsm_status_t dsm_deleg_apply_then_flags(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                        const void *args, size_t args_len, size_t ret_size, dsm_deleg_then_fn then,
                                        void *cb_arg, unsigned req_flags);
/* The calling runtime thread for a call on prop, or NULL with *st set:
 * DSM_OK means "no runtime thread and the runtime is stopped: run inline".
 * The common case, a thread of prop's runtime, is inline: every apply asks. */
deleg_thread_t *dsm_deleg_caller_slow(dsm_deleg_prop_t *prop, dsm_status_t *st);
static inline deleg_thread_t *dsm_deleg_caller(dsm_deleg_prop_t *prop, dsm_status_t *st)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (__builtin_expect(th != NULL && prop != NULL && th->rt == prop->rt, 1)) {
        *st = DSM_OK;
        return th;
    }
    return dsm_deleg_caller_slow(prop, st);
}
/* Blocking is allowed: in a fiber, not in delegated context. Logs if not
 * (out of line: the allowed case is inline, as the caller's check). */
int dsm_deleg_can_block_slow(deleg_thread_t *th, const char *what);
static inline int dsm_deleg_can_block(deleg_thread_t *th, const char *what)
{
    if (__builtin_expect(th->depth == 0 && th->sched.cur != NULL, 1))
        return 1;
    return dsm_deleg_can_block_slow(th, what);
}
/* Wait for one completion in the current fiber. */
typedef struct waitrec {
    deleg_thread_t *th;
    dsm_fiber_t *fiber;
    void *dst;
    size_t cap;
    size_t *len_out;
    int done;
    dsm_status_t status;
} waitrec_t;
void dsm_deleg_wait_cb(void *arg, dsm_status_t st, const void *data, size_t len);
void dsm_deleg_wait(waitrec_t *w);
/* The result of a RET_BUF closure run (zero-padded to the fixed size). */
void dsm_deleg_ret_result(dsm_deleg_ret_t *r, const uint8_t **data, size_t *len);
void dsm_deleg_ret_init_buf(dsm_deleg_ret_t *r, size_t fixed, int var);
void dsm_deleg_ret_fini(dsm_deleg_ret_t *r);

/* launch.c */
void dsm_deleg_start_launch(deleg_thread_t *th, unsigned client, dsm_deleg_fn fn, dsm_deleg_prop_t *prop,
                            const void *env, size_t env_len, const void *args, size_t args_len);
/* A launch for client thread `client` of node `rank`; its result goes back
 * as RK_LAUNCH_DONE with `token` (remote.c). */
dsm_status_t dsm_deleg_start_launch_remote(deleg_thread_t *th, uint32_t rank, unsigned client, uint64_t token,
                                           dsm_deleg_fn fn, dsm_deleg_prop_t *prop, const void *env,
                                           size_t env_len, const void *args, size_t args_len);

/* trust.c: the weight operations, run on the trustee (SYS closures) */
void dsm_deleg_sys_sub_weight(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len);
void dsm_deleg_sys_add_weight(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len);

/* rt.c */
void dsm_deleg_wake_thread(dsm_deleg_rt_t *rt, unsigned idx);
/* Wake the window waiter once outstanding requests fell to its bound. */
static inline void deleg_window_check(deleg_thread_t *th)
{
    if (th->window_waiter && th->outstanding <= th->window_max) {
        dsm_fiber_t *f = th->window_waiter;
        th->window_waiter = NULL;
        dsm_sched_wake(&th->sched, f);
    }
}
/* Every thread idle and every local request answered (two waves). */
int dsm_deleg_rt_quiet(dsm_deleg_rt_t *rt);
/* Stop the threads now, whatever they were doing (a node's crash, as far as
 * its runtime goes: tests of fate sharing); the runtime cannot run again. */
void dsm_deleg_rt_abort(dsm_deleg_rt_t *rt);

/* Delegation's calls that only deleg and its tests make (not exported). */
/* Attach rt (created, not started) to node between dsm_node_create and
 * dsm_node_join. Every attached node must run the same number of threads.
 * dsm_deleg_rt_join of an attached runtime returns once the application has
 * finished on every attached node (every main function and fiber done, every
 * request answered, cluster-wide); DSM_ERR_PEER_DEAD (after stopping this
 * runtime, whatever its fibers were waiting for) if an attached node dies
 * first: fate sharing. Such a runtime does not start again until
 * recovered (dsm_deleg_rt_recover); the node and the cluster stay usable. */
dsm_status_t dsm_deleg_attach(dsm_node_t *node, dsm_deleg_rt_t *rt);
/* 1 while a closure or a continuation runs on this thread (blocking forbidden). */
int dsm_deleg_in_delegated_context(void);
unsigned dsm_deleg_trust_trustee(const dsm_deleg_trust_t *t);
/* The rank of the node whose trustee t names, or -1 for a local trust. */
int32_t dsm_deleg_trust_node(const dsm_deleg_trust_t *t);

#endif
