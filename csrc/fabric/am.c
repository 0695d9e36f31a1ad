/* Active messages: the handler table, sending (fire-and-forget, request and
 * reply), the single UCX receive callback that validates our wire header and
 * dispatches (eager or rendezvous), and the table of requesters waiting for
 * replies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/am_wire.h"
#include "fabric/batch_wire.h"
#include "fabric/fabric_int.h"
#include "fabric/tsan_hb.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/relax.h"

_Thread_local int dsm_fabric_handler_depth;
_Thread_local ucp_ep_h dsm_fabric_reply_ep;

/* ------------------------------------------------------------ pending table */

void dsm_fabric_pending_link(dsm_fabric_t *f, dsm_am_pending_t *p)
{
    pthread_mutex_lock(&f->pending_lock);
    p->next = NULL;
    p->prev = f->pending_tail;
    if (f->pending_tail)
        f->pending_tail->next = p;
    else
        f->pending = p;
    f->pending_tail = p;
    if (p->rank < DSM_FABRIC_MAX_PEERS)   /* defer.c */
        atomic_fetch_add_explicit(&f->defer.pending_to[p->rank], 1, memory_order_seq_cst);
    pthread_mutex_unlock(&f->pending_lock);
}

/* pending_lock held */
void dsm_fabric_pending_unlink_locked(dsm_fabric_t *f, dsm_am_pending_t *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        f->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        f->pending_tail = p->prev;
    p->next = p->prev = NULL;
    if (p->rank < DSM_FABRIC_MAX_PEERS)
        atomic_fetch_sub_explicit(&f->defer.pending_to[p->rank], 1, memory_order_seq_cst);
}

/* Completes an entry: pending_lock held; the entry leaves the list, so the
 * waiter owns it again as soon as `done` is visible. */
void dsm_fabric_pending_complete_locked(dsm_fabric_t *f, dsm_am_pending_t *p, dsm_status_t status)
{
    dsm_fabric_pending_unlink_locked(f, p);
    /* read before `done`: a waiter on the stack may return as soon as it sees it */
    void (*on_done)(dsm_am_pending_t *) = p->on_done;
    p->status = status;
    atomic_store_explicit(&p->done, 1, memory_order_release);
    if (on_done)
        on_done(p);   /* may free nothing: the record lives until its op is released */
}

/* ----------------------------------------------------------- reply slots */

/* A slot request id: this bit, the generation in bits 6..54, the slot
 * below (DSM_TSLOTS = 64); bits 55..62 are the target's
 * (DSM_AM_ID_TAG_MASK). Ids of the pending list count up from 1 and never
 * reach bit 55. */
#define DSM_REPLY_SLOT_ID (UINT64_C(1) << 63)
enum { REPLY_SLOT_BITS = 6 };
_Static_assert(DSM_TSLOTS <= (1 << REPLY_SLOT_BITS), "a request id has room for every thread slot");
#define REPLY_GEN_MASK ((UINT64_C(1) << (DSM_AM_ID_TAG_SHIFT - REPLY_SLOT_BITS)) - 1)

/* The next generation's FREE word after `word` (the id carries the
 * generation modulo 2^49: no slot wraps in practice). */
static inline uint64_t reply_next_free(uint64_t word)
{
    return (((word >> 2) + 1) & REPLY_GEN_MASK) << 2 | DSM_REPLY_FREE;
}

/* The calling thread's slot, or NULL: no thread slot, or (a request made
 * from a callback inside another's wait) the slot is busy; the pending list
 * then. A slot its holder finished with is FREE: its last request was
 * completed by a claimer (before `done`) or abandoned by the holder. */
static inline dsm_reply_slot_t *reply_slot_mine(dsm_fabric_t *f, unsigned *index)
{
    unsigned s = dsm_tslot();
    if (s > DSM_TSLOTS)
        return NULL;
    dsm_reply_slot_t *slot = &f->reply_slots[s - 1];
    if ((atomic_load_explicit(&slot->word, memory_order_relaxed) & 3) != DSM_REPLY_FREE)
        return NULL;
    *index = s - 1;
    return slot;
}

/* The holder waits in `p` for a reply from `rank`; returns the request id. */
static uint64_t reply_slot_wait_for(dsm_reply_slot_t *s, unsigned index, dsm_am_pending_t *p, uint32_t rank)
{
    uint64_t word = atomic_load_explicit(&s->word, memory_order_relaxed);
    atomic_store_explicit(&s->pend, p, memory_order_relaxed);
    atomic_store_explicit(&s->rank, rank, memory_order_relaxed);
    /* pend and rank before WAITING: a claimer reads them after seeing it */
    atomic_store_explicit(&s->word, word | DSM_REPLY_WAITING, memory_order_release);
    return DSM_REPLY_SLOT_ID | (word >> 2) << REPLY_SLOT_BITS | index;
}

/* Claims a waiting slot (its word is `word`, WAITING) for a reply from
 * `rank`, or for a failure if rank is DSM_FABRIC_MAX_PEERS: the entry, or
 * NULL if it is no longer that generation's or waits for another rank. */
static dsm_am_pending_t *reply_slot_claim(dsm_reply_slot_t *s, uint64_t word, uint32_t rank)
{
    if (rank != DSM_FABRIC_MAX_PEERS && atomic_load_explicit(&s->rank, memory_order_relaxed) != rank)
        return NULL;   /* a rank read from a later generation fails the CAS below */
    uint64_t claimed = (word & ~UINT64_C(3)) | DSM_REPLY_CLAIMED;
    if (!atomic_compare_exchange_strong_explicit(&s->word, &word, claimed, memory_order_acquire,
                                                 memory_order_relaxed))
        return NULL;
    return atomic_load_explicit(&s->pend, memory_order_relaxed);
}

/* The claimer completes the entry: the slot is FREE for the next
 * generation before `done`, after which the holder may return and reuse it. */
static void reply_slot_complete(dsm_reply_slot_t *s, dsm_am_pending_t *p, dsm_status_t status)
{
    p->status = status;
    uint64_t word = atomic_load_explicit(&s->word, memory_order_relaxed);
    atomic_store_explicit(&s->word, reply_next_free(word), memory_order_relaxed);
    atomic_store_explicit(&p->done, 1, memory_order_release);
}

/* The holder gives up waiting: true if the slot was still waiting (now
 * FREE, a late reply finds nothing); false if a claimer got it first, in
 * which case its `done` follows at once. */
static bool reply_slot_abandon(dsm_reply_slot_t *s, dsm_am_pending_t *p)
{
    uint64_t word = atomic_load_explicit(&s->word, memory_order_relaxed);
    if ((word & 3) == DSM_REPLY_WAITING &&
        atomic_compare_exchange_strong_explicit(&s->word, &word, reply_next_free(word), memory_order_relaxed,
                                                memory_order_relaxed))
        return true;
    while (!atomic_load_explicit(&p->done, memory_order_acquire))
        dsm_cpu_relax();   /* the claimer is copying the reply */
    return false;
}

/* Copies a reply into its entry and completes it (list entries: pending_lock held). */
static void fill_reply(dsm_am_pending_t *p, const dsm_am_wire_t *h, const void *data, size_t len,
                       dsm_status_t *st)
{
    p->reply_len = len;
    *st = h->status;
    size_t n = len;
    if (len > p->cap) {
        n = p->cap;
        *st = DSM_ERR_TOO_BIG;
    }
    if (n)
        memcpy(p->reply, data, n);
}

void dsm_fabric_am_fail_pending(dsm_fabric_t *f, uint32_t rank, dsm_status_t status)
{
    for (unsigned i = 0; i < DSM_TSLOTS; i++) {
        dsm_reply_slot_t *s = &f->reply_slots[i];
        uint64_t word = atomic_load_explicit(&s->word, memory_order_acquire);
        if ((word & 3) != DSM_REPLY_WAITING || atomic_load_explicit(&s->rank, memory_order_relaxed) != rank)
            continue;
        dsm_am_pending_t *p = reply_slot_claim(s, word, rank);
        if (p)
            reply_slot_complete(s, p, status);
    }
    pthread_mutex_lock(&f->pending_lock);
    dsm_am_pending_t *p = f->pending;
    while (p) {
        dsm_am_pending_t *next = p->next;
        if (p->rank == rank)
            dsm_fabric_pending_complete_locked(f, p, status);
        p = next;
    }
    pthread_mutex_unlock(&f->pending_lock);
}

static void deliver_reply(dsm_fabric_t *f, const dsm_am_wire_t *h, const void *data, size_t len)
{
    dsm_am_pending_t *p;
    dsm_status_t st;
    if (h->request_id & DSM_REPLY_SLOT_ID) {
        dsm_reply_slot_t *s = &f->reply_slots[h->request_id & ((1u << REPLY_SLOT_BITS) - 1)];
        uint64_t want = ((h->request_id & ~DSM_REPLY_SLOT_ID) >> REPLY_SLOT_BITS) << 2 | DSM_REPLY_WAITING;
        p = (h->request_id & ((1u << REPLY_SLOT_BITS) - 1)) < DSM_TSLOTS &&
                    atomic_load_explicit(&s->word, memory_order_relaxed) == want
                ? reply_slot_claim(s, want, h->src_rank)
                : NULL;
        if (p) {
            fill_reply(p, h, data, len, &st);
            reply_slot_complete(s, p, st);
        }
    } else {
        pthread_mutex_lock(&f->pending_lock);
        p = f->pending;
        while (p && !(p->id == h->request_id && p->rank == h->src_rank))
            p = p->next;
        if (p) {
            fill_reply(p, h, data, len, &st);
            dsm_fabric_pending_complete_locked(f, p, st);
        }
        pthread_mutex_unlock(&f->pending_lock);
    }
    if (!p)
        DSM_DEBUG(DSM_FABRIC_LOG, "reply %llu from rank %u has no waiter (late), dropped",
                  (unsigned long long)h->request_id, h->src_rank);
}

/* Every entry of a batched reply, in order, as if it had come alone; a
 * malformed batch is rejected whole (its requesters then time out, as they
 * would had the peer sent them nothing). */
static void deliver_batch(dsm_fabric_t *f, const dsm_am_wire_t *h, const void *data, size_t len)
{
    if (dsm_batch_wire_check(data, len, h->request_id) != DSM_OK) {
        DSM_COUNT(f, am_rejected, 1);
        DSM_WARN(DSM_FABRIC_LOG, "rejected malformed batched reply from rank %u (%zu bytes)", h->src_rank, len);
        return;
    }
    dsm_batch_entry_t e;
    size_t off = 0;
    while (dsm_batch_wire_next(data, len, &off, &e)) {
        dsm_am_wire_t one = *h;
        one.flags = DSM_AM_KIND_REPLY;
        one.request_id = e.request_id;
        one.status = e.status;
        one.payload_len = (uint32_t)e.len;
        deliver_reply(f, &one, e.data, e.len);
    }
}

/* -------------------------------------------------------------- sending */

/* A reply (or error reply) that owns a copy of its header and payload, so it
 * can be sent from a handler without waiting: freed on completion. */
typedef struct am_detached {
    uint8_t hdr[DSM_AM_WIRE_HEADER_LEN];
    size_t cap;   /* bytes of data */
    uint8_t data[];
} am_detached_t;

/* A thread's spare copy: one that UCX sent in place (as it does every 4 KiB
 * reply on shm, past its short-message size) is kept for the thread's next
 * instead of freed, so such a reply costs its copy and no allocation. The
 * key frees it when the thread exits. */
enum { SPARE_MIN = 4096, SPARE_MAX = 16384 };
static _Thread_local am_detached_t *spare;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

static void spare_key_create(void) { (void)pthread_key_create(&spare_key, free); }

static am_detached_t *detached_alloc(size_t len)
{
    am_detached_t *m = spare;
    if (m != NULL && m->cap >= len) {
        spare = NULL;
        (void)pthread_setspecific(spare_key, NULL);
        return m;
    }
    size_t cap = len < SPARE_MIN ? SPARE_MIN : len;
    if ((m = malloc(sizeof *m + cap)) != NULL)
        m->cap = cap;
    return m;
}

static void detached_release(am_detached_t *m)
{
    if (spare == NULL && m->cap <= SPARE_MAX) {
        (void)pthread_once(&spare_once, spare_key_create);
        if (pthread_setspecific(spare_key, m) == 0) {
            spare = m;
            return;
        }
    }
    free(m);
}

static void detached_done(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    free(user_data);
    ucp_request_free(request);
}

/* Sends on `ep` a copy of header, `a` and `b`; `flags` are UCP_AM_SEND_FLAG_*.
 * A message of one part is first offered for immediate completion from the
 * caller's buffers (a small reply, the common case: no copy, no allocation);
 * only what UCX cannot send at once is copied and sent in the background. */
static dsm_status_t send_detached_ep(ucp_ep_h ep, const dsm_am_wire_t *h, const void *a, size_t a_len,
                                     const void *b, size_t b_len, uint32_t flags)
{
    if (b_len == 0) {
        uint8_t hdr[DSM_AM_WIRE_HEADER_LEN];
        dsm_am_wire_encode(h, hdr);
        ucp_request_param_t ip = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL,
            .flags = flags,
        };
        ucs_status_ptr_t sp = ucp_am_send_nbx(ep, DSM_FABRIC_UCX_AM_ID, hdr, sizeof hdr, a, a_len, &ip);
        if (sp == NULL)
            return DSM_OK;
        if (UCS_PTR_IS_ERR(sp) && UCS_PTR_STATUS(sp) != UCS_ERR_NO_RESOURCE)
            return dsm_fabric_status_from_ucs(UCS_PTR_STATUS(sp));
        /* UCS_ERR_NO_RESOURCE: not now; a request is never returned here */
    }
    size_t len = a_len + b_len;
    am_detached_t *m = detached_alloc(len);
    if (m == NULL)
        return DSM_ERR_NOMEM;
    dsm_am_wire_encode(h, m->hdr);
    if (a_len)
        memcpy(m->data, a, a_len);
    if (b_len)
        memcpy(m->data + a_len, b, b_len);
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send = detached_done,
        .user_data = m,
        .flags = flags,
    };
    ucs_status_ptr_t sp = ucp_am_send_nbx(ep, DSM_FABRIC_UCX_AM_ID, m->hdr, sizeof m->hdr, m->data, len, &p);
    if (UCS_PTR_IS_PTR(sp))
        return DSM_OK;   /* freed by detached_done */
    detached_release(m);
    if (UCS_PTR_IS_ERR(sp))
        return dsm_fabric_status_from_ucs(UCS_PTR_STATUS(sp));
    return DSM_OK;
}

/* Before a send of the calling thread: what it batched, and what it
 * deferred, goes first; true if the deferred requests are to follow the
 * send instead (dsm_fabric_defer_flush_first). */
static inline bool flush_before_send(dsm_fabric_t *f)
{
    dsm_fabric_batch_flush();
    return dsm_fabric_defer_flush_first(f);
}

/* `tag`: a reply's (DSM_AM_ID_TAG_MASK bits of its id), 0 for any other
 * message: checked once the peer is held, so a reconnect (which waits for
 * the hold) cannot slip between the check and the send. */
static dsm_status_t send_detached2(dsm_fabric_t *f, uint32_t rank, const dsm_am_wire_t *h,
                                   const void *a, size_t a_len, const void *b, size_t b_len,
                                   uint32_t flags, uint64_t tag)
{
    bool flush_after = flush_before_send(f);
    dsm_status_t st = DSM_OK;
    dsm_fabric_tsan_send(rank);
    if (!(f->chaos && dsm_fabric_chaos_send(f, rank, h, a, a_len, b, b_len))) {
        dsm_peer_hold_t hold;
        st = dsm_fabric_peer_enter(f, rank, &hold);
        if (st == DSM_OK) {
            if (dsm_fabric_reply_current(f, rank, tag))
                st = send_detached_ep(dsm_fabric_ep(f, hold.peer), h, a, a_len, b, b_len, flags);
            else
                st = DSM_ERR_PEER_DEAD;
            dsm_fabric_peer_exit(&hold);
        }
    }
    if (flush_after)
        dsm_fabric_defer_flush(f);
    return st;
}

static dsm_status_t send_detached(dsm_fabric_t *f, uint32_t rank, const dsm_am_wire_t *h,
                                  const void *data, size_t len)
{
    return send_detached2(f, rank, h, data, len, NULL, 0, 0, 0);
}

dsm_status_t dsm_fabric_am_send_now(dsm_fabric_t *f, uint32_t rank, const dsm_am_wire_t *h, const void *data,
                                    size_t len)
{
    return send_detached(f, rank, h, data, len);
}

/* Starts a send whose header buffer and payload belong to the caller, who
 * waits for `op` before letting them go. */
static dsm_status_t send_nb(dsm_fabric_t *f, uint32_t rank, const dsm_am_wire_t *h,
                            uint8_t hdr[DSM_AM_WIRE_HEADER_LEN], const void *data, size_t len,
                            dsm_op_t *op)
{
    dsm_fabric_op_init(op, f, rank);
    bool flush_after = flush_before_send(f);
    dsm_status_t st;
    dsm_fabric_tsan_send(rank);
    if (f->chaos && dsm_fabric_chaos_send(f, rank, h, data, len, NULL, 0)) {
        dsm_fabric_op_finish(op, DSM_OK);   /* the caller's buffers were copied */
        st = DSM_OK;
    } else {
        dsm_peer_hold_t hold;
        st = dsm_fabric_peer_enter(f, rank, &hold);
        if (st != DSM_OK) {
            dsm_fabric_op_finish(op, st);
        } else {
            dsm_am_wire_encode(h, hdr);
            ucp_request_param_t p = {
                .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                .cb.send = dsm_fabric_op_complete_cb,
                .user_data = op,
            };
            ucs_status_ptr_t sp = ucp_am_send_nbx(dsm_fabric_ep(f, hold.peer), DSM_FABRIC_UCX_AM_ID, hdr,
                                                  DSM_AM_WIRE_HEADER_LEN, data, len, &p);
            dsm_fabric_peer_exit(&hold);
            st = dsm_fabric_op_submitted(op, sp);
        }
    }
    if (flush_after)
        dsm_fabric_defer_flush(f);
    return st;
}

static void count_sent(dsm_fabric_t *f, uint16_t handler, size_t len)
{
    dsm_fabric_counters_t *row = dsm_fabric_counter_row(f);
    DSM_COUNT_ROW(f, row, am_sent, 1);
    DSM_COUNT_ROW(f, row, am_bytes_sent, len);
    if (handler < DSM_AM_MAX_HANDLERS)
        DSM_COUNT_ROW(f, row, am_sent_by_handler[handler], 1);
}

static dsm_status_t check_send_args(dsm_fabric_t *f, uint16_t handler, const void *data, size_t len)
{
    if (f == NULL || handler >= DSM_AM_MAX_HANDLERS || (data == NULL && len != 0))
        return DSM_ERR_INVALID;
    if (len > DSM_AM_MAX_PAYLOAD)
        return DSM_ERR_TOO_BIG;
    /* blocking here would progress the worker from inside its own callback */
    if (dsm_fabric_handler_depth > 0)
        return DSM_ERR_STATE;
    return DSM_OK;
}

dsm_status_t dsm_fabric_am_send(dsm_fabric_t *f, uint32_t rank, uint16_t handler,
                                const void *data, size_t len)
{
    dsm_status_t st = check_send_args(f, handler, data, len);
    if (st != DSM_OK)
        return st;
    dsm_am_wire_t h = {
        .handler = handler, .flags = DSM_AM_KIND_PLAIN,
        .src_rank = dsm_fabric_rank(f),
    };
    uint8_t hdr[DSM_AM_WIRE_HEADER_LEN];
    dsm_op_t op;
    st = send_nb(f, rank, &h, hdr, data, len, &op);
    if (st == DSM_OK)
        st = dsm_fabric_wait_sent(&op);
    if (st == DSM_OK)
        count_sent(f, handler, len);
    return st;
}

dsm_status_t dsm_fabric_am_post(dsm_fabric_t *f, uint32_t rank, uint16_t handler, const void *data, size_t len)
{
    if (f == NULL || handler >= DSM_AM_MAX_HANDLERS || handler == DSM_AM_RMA_HANDLER || (data == NULL && len != 0))
        return DSM_ERR_INVALID;
    if (len > DSM_AM_MAX_PAYLOAD)
        return DSM_ERR_TOO_BIG;
    dsm_am_wire_t h = {
        .handler = handler, .flags = DSM_AM_KIND_PLAIN,
        .src_rank = dsm_fabric_rank(f),
    };
    /* detached: never progresses the worker, so a handler may send */
    dsm_status_t st = send_detached(f, rank, &h, data, len);
    if (st == DSM_OK)
        count_sent(f, handler, len);
    return st;
}

dsm_status_t dsm_fabric_am_request(dsm_fabric_t *f, uint32_t rank, uint16_t handler,
                                   const void *req, size_t req_len,
                                   void *reply, size_t cap, size_t *reply_len, uint32_t timeout_ms)
{
    dsm_status_t st = check_send_args(f, handler, req, req_len);
    if (st != DSM_OK)
        return st;
    if (reply == NULL && cap != 0)
        return DSM_ERR_INVALID;
    if (reply_len)
        *reply_len = 0;

    dsm_am_pending_t pend = {.rank = rank, .reply = reply, .cap = cap, .status = DSM_ERR_TIMEOUT};
    /* the thread's own reply slot, or else the locked list */
    unsigned index;
    dsm_reply_slot_t *slot = reply_slot_mine(f, &index);
    if (slot) {
        pend.id = reply_slot_wait_for(slot, index, &pend, rank);
    } else {
        pend.id = atomic_fetch_add_explicit(&f->next_request_id, 1, memory_order_relaxed);
        dsm_fabric_pending_link(f, &pend);
    }
    dsm_am_wire_t h = {
        .handler = handler, .flags = DSM_AM_KIND_REQUEST,
        .src_rank = dsm_fabric_rank(f), .request_id = pend.id,
    };
    uint8_t hdr[DSM_AM_WIRE_HEADER_LEN];
    dsm_op_t op;
    st = send_nb(f, rank, &h, hdr, req, req_len, &op);
    if (st == DSM_OK) {
        count_sent(f, handler, req_len);
        dsm_peer_t *peer = &f->peers[rank];
        /* progress our own worker while the progress thread stands down */
        dsm_waiter_t w;
        dsm_fabric_waiter_begin(f, &w, timeout_ms, DSM_WAIT_ANSWER);
        dsm_fabric_waiter_watch_reply(&w, &pend.done);
        uint64_t t0 = dsm_fabric_wait_clock(f);   /* before the count: a test reads the count as "t0 taken" */
        dsm_fabric_waiter_round_trip(&w);
        while (!atomic_load_explicit(&pend.done, memory_order_acquire)) {
            if (!dsm_fabric_waiter_step(&w))
                continue;
            if (__atomic_load_n(&op.done, __ATOMIC_ACQUIRE) && op.status != DSM_OK)
                break;   /* the request never left */
            if (atomic_load_explicit(&peer->state, memory_order_acquire) == DSM_PEER_DEAD)
                break;
            if (dsm_fabric_waiter_expired(&w))
                break;
        }
        dsm_fabric_waiter_end(&w);
        DSM_COUNT_WAIT_TIME(f, t0);
        if (!atomic_load_explicit(&pend.done, memory_order_acquire) && dsm_fabric_waiter_expired(&w) &&
            atomic_load_explicit(&peer->state, memory_order_acquire) != DSM_PEER_DEAD) {
            char what[96];
            snprintf(what, sizeof what, "request %#llx (handler %u, %s)", (unsigned long long)pend.id, handler,
                     slot ? "reply slot" : "pending table");
            dsm_fabric_describe_timeout(f, rank, what, w.timeout_ms);
        }
        /* The request's header and payload must be released by UCX before we
         * return; if it still hangs, wait_op fails the peer, which cancels it. */
        uint32_t left = __atomic_load_n(&op.done, __ATOMIC_ACQUIRE) ? 1 : dsm_fabric_waiter_left_ms(&w);
        dsm_status_t send_st = dsm_fabric_wait_request_sent(&op, left);
        if (send_st != DSM_OK)
            st = send_st;
    }

    /* Once `done` is seen the completer no longer touches `pend` (see
     * dsm_fabric_pending_complete_locked, reply_slot_complete): only an
     * entry still waiting needs to leave its slot or the list. */
    int done = atomic_load_explicit(&pend.done, memory_order_acquire);
    if (!done && slot) {
        done = !reply_slot_abandon(slot, &pend);
    } else if (!done) {
        pthread_mutex_lock(&f->pending_lock);
        done = atomic_load_explicit(&pend.done, memory_order_acquire);
        if (!done)
            dsm_fabric_pending_unlink_locked(f, &pend);
        pthread_mutex_unlock(&f->pending_lock);
    }

    if (done) {
        if (reply_len)
            *reply_len = pend.reply_len;
        return pend.status;
    }
    if (st != DSM_OK) {
        DSM_COUNT(f, errors, 1);
        return st;
    }
    DSM_COUNT(f, errors, 1);
    return dsm_fabric_peer_state(f, rank) == DSM_ERR_PEER_DEAD ? DSM_ERR_PEER_DEAD : DSM_ERR_TIMEOUT;
}

dsm_status_t dsm_fabric_am_request_nb(dsm_fabric_t *f, uint32_t rank, uint16_t handler, const void *req,
                                      size_t req_len, void *reply, size_t cap, dsm_op_t *op)
{
    if (op == NULL || (reply == NULL && cap != 0) || handler == DSM_AM_RMA_HANDLER)
        return DSM_ERR_INVALID;
    dsm_fabric_op_init(op, f, rank);
    /* a handler may issue (not wait): only the arguments are checked here */
    dsm_status_t st = f == NULL || handler >= DSM_AM_MAX_HANDLERS || (req == NULL && req_len != 0)
                          ? DSM_ERR_INVALID
                          : req_len > DSM_AM_MAX_PAYLOAD ? DSM_ERR_TOO_BIG : DSM_OK;
    if (st != DSM_OK) {
        dsm_fabric_op_finish(op, st);
        return st;
    }
    return dsm_fabric_emu_request(f, rank, handler, req, req_len, reply, cap, op);
}

dsm_status_t dsm_fabric_am_request_detached(dsm_fabric_t *f, uint32_t rank, uint16_t handler,
                                            uint64_t request_id, const void *a, size_t a_len,
                                            const void *b, size_t b_len)
{
    size_t len = a_len + b_len;
    if (len > DSM_AM_MAX_PAYLOAD)
        return DSM_ERR_TOO_BIG;
    dsm_am_wire_t h = {
        .handler = handler, .flags = DSM_AM_KIND_REQUEST,
        .src_rank = dsm_fabric_rank(f), .request_id = request_id,
    };
    /* Not UCP_AM_SEND_FLAG_REPLY (which would let a target that has not
     * connected to us answer through the arriving endpoint): UCX 1.13 smashes
     * its own stack sending with it to a destroyed tcp peer (seen in
     * test_destroyed_peer). So the target answers through its own endpoint
     * to us: both sides must be connected. dsm_fabric_am_reply_via still
     * uses a reply endpoint if one ever arrives. TODO(open): one-way setups. */
    dsm_status_t st = send_detached2(f, rank, &h, a, a_len, b, b_len, 0, 0);
    if (st == DSM_OK)
        count_sent(f, handler, len);
    return st;
}

/* A reply's header (the id's tag bits are ours, not the wire's). */
static dsm_am_wire_t reply_header(dsm_fabric_t *f, uint64_t request_id, dsm_status_t status)
{
    return (dsm_am_wire_t){
        .handler = 0, .flags = DSM_AM_KIND_REPLY,
        .src_rank = dsm_fabric_rank(f), .request_id = request_id & ~DSM_AM_ID_TAG_MASK, .status = status,
    };
}

static dsm_status_t count_reply(dsm_fabric_t *f, dsm_status_t st, size_t len)
{
    if (st == DSM_OK) {
        dsm_fabric_counters_t *row = dsm_fabric_counter_row(f);
        DSM_COUNT_ROW(f, row, am_sent, 1);
        DSM_COUNT_ROW(f, row, am_bytes_sent, len);
    } else {
        DSM_COUNT(f, errors, 1);
    }
    return st;
}

/* A reply to `request_id`, through `ep` when given (a reply endpoint UCX
 * handed the handler) or else through our own endpoint to dst_rank. */
static dsm_status_t send_reply(dsm_fabric_t *f, ucp_ep_h ep, uint32_t dst_rank, uint64_t request_id,
                               dsm_status_t status, const void *data, size_t len)
{
    if (f == NULL || request_id == 0 || (data == NULL && len != 0) || status > 0 ||
        (int)status < (int)DSM_AM_WIRE_MIN_STATUS)
        return DSM_ERR_INVALID;
    if (len > DSM_AM_MAX_PAYLOAD)
        return DSM_ERR_TOO_BIG;
    uint64_t tag = request_id & DSM_AM_ID_TAG_MASK;
    dsm_am_wire_t h = reply_header(f, request_id, status);
    dsm_status_t st;
    if (!dsm_fabric_reply_current(f, dst_rank, tag))
        st = DSM_ERR_PEER_DEAD;   /* before chaos, which would hold it for the new incarnation */
    else if (ep) {
        dsm_fabric_tsan_send(dst_rank);
        st = send_detached_ep(ep, &h, data, len, NULL, 0, 0);
    } else {
        st = send_detached2(f, dst_rank, &h, data, len, NULL, 0, 0, tag);
    }
    return count_reply(f, st, len);
}

/* A reply sent from the caller's memory in place: only its header is
 * copied; `done(arg)` runs once UCX no longer reads the data. */
typedef struct am_inplace {
    uint8_t hdr[DSM_AM_WIRE_HEADER_LEN];
    void (*done)(void *arg);
    void *arg;
} am_inplace_t;

static void inplace_done(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    am_inplace_t *m = user_data;
    m->done(m->arg);
    free(m);
    ucp_request_free(request);
}

dsm_status_t dsm_fabric_am_reply_inplace(dsm_fabric_t *f, uint32_t dst_rank, uint64_t request_id, const void *data,
                                         size_t len, void (*done)(void *arg), void *arg)
{
    if (f == NULL || request_id == 0 || data == NULL || done == NULL)
        return DSM_ERR_INVALID;
    if (len > DSM_AM_MAX_PAYLOAD)
        return DSM_ERR_TOO_BIG;
    /* chaos holds or splits what it sends, and an answer through the
     * arriving endpoint is for peers not connected to us: both copy */
    if (f->chaos || (dsm_fabric_reply_ep != NULL && dsm_fabric_peer_state(f, dst_rank) != DSM_OK))
        return DSM_ERR_UNSUPPORTED;
    uint64_t tag = request_id & DSM_AM_ID_TAG_MASK;
    am_inplace_t *m = malloc(sizeof *m);
    if (m == NULL)
        return DSM_ERR_NOMEM;
    dsm_am_wire_t h = reply_header(f, request_id, DSM_OK);
    dsm_am_wire_encode(&h, m->hdr);
    m->done = done;
    m->arg = arg;
    bool flush_after = flush_before_send(f);
    dsm_fabric_tsan_send(dst_rank);
    dsm_peer_hold_t hold;
    dsm_status_t st = dsm_fabric_peer_enter(f, dst_rank, &hold);
    if (st == DSM_OK) {
        if (dsm_fabric_reply_current(f, dst_rank, tag)) {
            ucp_request_param_t p = {
                .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                .cb.send = inplace_done,
                .user_data = m,
            };
            ucs_status_ptr_t sp = ucp_am_send_nbx(dsm_fabric_ep(f, hold.peer), DSM_FABRIC_UCX_AM_ID, m->hdr,
                                                  sizeof m->hdr, data, len, &p);
            if (UCS_PTR_IS_PTR(sp))
                m = NULL;   /* inplace_done calls done */
            else if (UCS_PTR_IS_ERR(sp))
                st = dsm_fabric_status_from_ucs(UCS_PTR_STATUS(sp));
        } else {
            st = DSM_ERR_PEER_DEAD;
        }
        dsm_fabric_peer_exit(&hold);
    }
    if (flush_after)
        dsm_fabric_defer_flush(f);
    if (m != NULL) {   /* sent at once, or not at all: the data is the caller's again */
        free(m);
        if (st == DSM_OK)
            done(arg);
    }
    return count_reply(f, st, len);
}

dsm_status_t dsm_fabric_am_reply_via(dsm_fabric_t *f, uint32_t dst_rank, uint64_t request_id,
                                     dsm_status_t status, const void *data, size_t len)
{
    /* our own endpoint whenever the peer is connected to us; none to a
     * peer that died or left (the arriving endpoint would reconnect to it) */
    ucp_ep_h ep = dsm_fabric_reply_ep;
    dsm_status_t state = ep != NULL && f != NULL ? dsm_fabric_peer_state(f, dst_rank) : DSM_OK;
    if (state == DSM_ERR_PEER_DEAD) {
        DSM_COUNT(f, errors, 1);
        return DSM_ERR_PEER_DEAD;
    }
    if (state == DSM_OK)
        ep = NULL;
    return send_reply(f, ep, dst_rank, request_id, status, data, len);
}

dsm_status_t dsm_fabric_am_reply(dsm_fabric_t *f, uint32_t dst_rank, uint64_t request_id,
                                 dsm_status_t status, const void *data, size_t len)
{
    return send_reply(f, NULL, dst_rank, request_id, status, data, len);
}

/* ------------------------------------------------------------- receiving */

dsm_status_t dsm_fabric_am_register(dsm_fabric_t *f, uint16_t handler, dsm_am_handler_t fn, void *ctx)
{
    /* the emulation's handler is the fabric's own (see fabric.h) */
    if (f == NULL || handler >= DSM_AM_MAX_HANDLERS || handler == DSM_AM_RMA_HANDLER)
        return DSM_ERR_INVALID;
    dsm_am_slot_t *slot = &f->handlers[handler];
    if (fn == NULL) {   /* unregister */
        atomic_store(&slot->fn, NULL);
        return DSM_OK;
    }
    dsm_status_t ret = DSM_OK;
    pthread_mutex_lock(&f->lock);
    if (atomic_load(&slot->fn) != NULL) {
        ret = DSM_ERR_EXISTS;
    } else {
        atomic_store(&slot->ctx, ctx);
        atomic_store_explicit(&slot->fn, fn, memory_order_release);   /* ctx first */
    }
    pthread_mutex_unlock(&f->lock);
    if (ret == DSM_ERR_EXISTS)
        DSM_WARN(DSM_FABRIC_LOG, "handler id %u is already registered: refused (two owners for one id?)",
                 handler);
    return ret;
}

static void reject(dsm_fabric_t *f, const dsm_am_wire_t *h, dsm_status_t why)
{
    DSM_COUNT(f, am_rejected, 1);
    if (why == DSM_ERR_CLOSED)   /* this node is stopping: not the sender's fault */
        DSM_DEBUG(DSM_FABRIC_LOG, "refused active message from rank %u: stopping", h->src_rank);
    else if (h->addressable)
        DSM_WARN(DSM_FABRIC_LOG, "rejected active message from rank %u (handler %u, kind %u, %u bytes): %s",
                 h->src_rank, h->handler, h->flags, h->payload_len, dsm_strerror(why));
    else
        DSM_WARN(DSM_FABRIC_LOG, "rejected malformed active message: %s", dsm_strerror(why));
    /* Tell a requester at once rather than let it wait for its timeout. */
    if (h->addressable && h->flags == DSM_AM_KIND_REQUEST) {
        dsm_am_wire_t r = {
            .handler = 0, .flags = DSM_AM_KIND_REPLY, .src_rank = dsm_fabric_rank(f),
            .request_id = h->request_id, .status = why,
        };
        dsm_status_t st = send_detached(f, h->src_rank, &r, NULL, 0);
        if (st != DSM_OK)
            DSM_DEBUG(DSM_FABRIC_LOG, "error reply to rank %u: %s", h->src_rank, dsm_strerror(st));
    }
}

static void deliver_one(dsm_fabric_t *f, const dsm_am_wire_t *h, const void *data, size_t len,
                        ucp_ep_h reply_ep);

/* Every request of a batch (DSM_AM_RMA_HANDLER's only), in order, as if it
 * had come alone: each is answered, or refused, on its own. A malformed
 * batch is rejected whole (its requesters then time out). */
static void deliver_requests(dsm_fabric_t *f, const dsm_am_wire_t *h, const void *data, size_t len,
                             ucp_ep_h reply_ep)
{
    if (h->handler != DSM_AM_RMA_HANDLER || dsm_batch_wire_check(data, len, h->request_id) != DSM_OK) {
        DSM_COUNT(f, am_rejected, 1);
        DSM_WARN(DSM_FABRIC_LOG, "rejected malformed batch of requests from rank %u (%zu bytes)", h->src_rank,
                 len);
        return;
    }
    dsm_batch_entry_t e;
    size_t off = 0;
    while (dsm_batch_wire_next(data, len, &off, &e)) {
        dsm_am_wire_t one = *h;
        one.flags = DSM_AM_KIND_REQUEST;
        one.request_id = e.request_id;
        one.status = DSM_OK;
        one.payload_len = (uint32_t)e.len;
        deliver_one(f, &one, e.data, e.len, reply_ep);
    }
}

/* A message as it came, counted once, whatever it holds. */
static void deliver(dsm_fabric_t *f, const dsm_am_wire_t *h, const void *data, size_t len,
                    ucp_ep_h reply_ep)
{
    dsm_fabric_counters_t *row = dsm_fabric_counter_row(f);
    DSM_COUNT_ROW(f, row, am_recv, 1);
    DSM_COUNT_ROW(f, row, am_bytes_recv, len);
    deliver_one(f, h, data, len, reply_ep);
}

static void deliver_one(dsm_fabric_t *f, const dsm_am_wire_t *h, const void *data, size_t len,
                        ucp_ep_h reply_ep)
{
    if (h->flags == DSM_AM_KIND_REPLY) {
        deliver_reply(f, h, data, len);
        return;
    }
    if (h->flags == DSM_AM_KIND_REPLY_BATCH) {
        deliver_batch(f, h, data, len);
        return;
    }
    if (h->flags == DSM_AM_KIND_REQUEST_BATCH) {
        deliver_requests(f, h, data, len, reply_ep);
        return;
    }
    if (atomic_load_explicit(&f->handlers_closed, memory_order_acquire)) {
        reject(f, h, DSM_ERR_CLOSED);
        return;
    }
    dsm_am_slot_t *slot = &f->handlers[h->handler];
    dsm_am_handler_t fn = atomic_load_explicit(&slot->fn, memory_order_acquire);
    if (fn == NULL) {   /* unregistered while a rendezvous was in flight */
        reject(f, h, DSM_ERR_NO_HANDLER);
        return;
    }
    uint64_t request_id = 0;
    if (h->flags == DSM_AM_KIND_REQUEST) {
        if (h->request_id & DSM_AM_ID_TAG_MASK) {   /* bits a requester leaves to us */
            reject(f, h, DSM_ERR_PROTO);
            return;
        }
        request_id = h->request_id | dsm_fabric_peer_tag(f, h->src_rank);
    }
    DSM_COUNT(f, am_recv_by_handler[h->handler], 1);
    dsm_am_msg_t msg = {
        .src_rank = h->src_rank, .handler = h->handler, .flags = h->flags,
        .request_id = request_id,
        .data = data, .len = len,
    };
    ucp_ep_h outer = dsm_fabric_reply_ep;
    dsm_fabric_reply_ep = reply_ep;
    dsm_fabric_handler_depth++;
    fn(atomic_load_explicit(&slot->ctx, memory_order_relaxed), &msg);
    dsm_fabric_handler_depth--;
    dsm_fabric_reply_ep = outer;
}

typedef struct am_rndv {
    dsm_fabric_t *fabric;
    ucp_ep_h reply_ep;
    dsm_am_wire_t header;
    size_t len;
    uint8_t data[];
} am_rndv_t;

static void rndv_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
    am_rndv_t *r = user_data;
    if (status == UCS_OK && length == r->len)
        deliver(r->fabric, &r->header, r->data, r->len, r->reply_ep);
    else
        reject(r->fabric, &r->header, status == UCS_OK ? DSM_ERR_PROTO : DSM_ERR_PEER_DEAD);
    free(r);
    ucp_request_free(request);
}

static ucs_status_t am_recv_cb(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    dsm_fabric_t *f = arg;
    dsm_fabric_tsan_deliver(dsm_fabric_rank(f));
    dsm_am_wire_t h;
    dsm_status_t st = dsm_am_wire_decode(header, header_length, length, &h);
    if (st == DSM_OK && h.flags != DSM_AM_KIND_REPLY && h.flags != DSM_AM_KIND_REPLY_BATCH &&
        atomic_load_explicit(&f->handlers[h.handler].fn, memory_order_acquire) == NULL)
        st = DSM_ERR_NO_HANDLER;
    if (st != DSM_OK && !h.addressable) {
        /* no sender to answer: say what arrived, so a stray can be traced */
        char first[16] = "";
        const uint8_t *b = header;
        for (size_t i = 0, n = 0; b != NULL && i < header_length && i < 4; i++)
            n += (size_t)snprintf(first + n, sizeof first - n, "%s%02x", i ? " " : "", b[i]);
        DSM_COUNT(f, am_rejected, 1);
        DSM_WARN(DSM_FABRIC_LOG, "rejected malformed active message (%zu-byte header [%s...], %zu-byte payload): %s",
                 header_length, first, length, dsm_strerror(st));
        return UCS_OK;
    }
    if (st != DSM_OK) {
        reject(f, &h, st);
        return UCS_OK;   /* drops a rendezvous descriptor too */
    }
    ucp_ep_h reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        /* Eager (with or without UCP_AM_RECV_ATTR_FLAG_DATA): the handler sees
         * the data in place and we never keep it past the callback. */
        deliver(f, &h, data, length, reply_ep);
        return UCS_OK;
    }

    am_rndv_t *r = malloc(sizeof *r + length);
    if (r == NULL) {
        reject(f, &h, DSM_ERR_NOMEM);
        return UCS_OK;
    }
    r->fabric = f;
    r->reply_ep = reply_ep;
    r->header = h;
    r->len = length;
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am = rndv_done,
        .user_data = r,
    };
    ucs_status_ptr_t sp = ucp_am_recv_data_nbx(f->worker, data, r->data, length, &p);
    if (sp == NULL) {
        deliver(f, &h, r->data, length, reply_ep);
        free(r);
    } else if (UCS_PTR_IS_ERR(sp)) {
        DSM_WARN(DSM_FABRIC_LOG, "rendezvous receive from rank %u: %s", h.src_rank,
                 ucs_status_string(UCS_PTR_STATUS(sp)));
        reject(f, &h, DSM_ERR_FABRIC);
        free(r);
    }
    return UCS_INPROGRESS;   /* the descriptor now belongs to the receive */
}

dsm_status_t dsm_fabric_am_init(dsm_fabric_t *f)
{
    ucp_am_handler_param_t p = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = DSM_FABRIC_UCX_AM_ID,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = am_recv_cb,
        .arg = f,
    };
    ucs_status_t st = ucp_worker_set_am_recv_handler(f->worker, &p);
    if (st != UCS_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(st));
        return DSM_ERR_FABRIC;
    }
    dsm_fabric_emu_init(f);
    return DSM_OK;
}
