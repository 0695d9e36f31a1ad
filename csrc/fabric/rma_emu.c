/* One-sided operations emulated with the fabric's own active messages, for
 * transports without RDMA (tcp; auto for regions not mapped here).
 *
 * UCX emulates RMA/AMO over tcp the same way (a message to the target, whose
 * progress performs the access and replies), but with UCX_PROTO_ENABLE=y its
 * 1.13 emulated requests cannot be purged when their endpoint fails: a peer
 * dying with one outstanding aborts the process. Here no UCX RMA/AMO request
 * exists on such an endpoint; the operation is a request to
 * DSM_AM_RMA_HANDLER, waiting in the pending table like dsm_fabric_am_request
 * but without blocking, so peer failure, the op timeout and fabric teardown
 * complete it exactly as they complete AM requests.
 *
 * Initiator: a record with one pending entry per fragment (gets and puts
 * longer than DSM_RMA_CHUNK are split so that no message exceeds the AM
 * payload limit); the dsm_op_t completes when the last fragment does.
 * Target: the handler decodes the request, finds the address range inside
 * one of its own registered regions (never trusting the initiator's idea of
 * them), performs the access with memcpy or SEQ_CST CPU atomics, which also
 * mix correctly with peers' direct (shm-mapped) atomics on the same word,
 * and replies. */
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "fabric/rma_wire.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/log.h"

enum { DSM_RMA_CHUNK = 4 * 1024 * 1024 };
/* Gets from this length on are answered from the region in place
 * (get_reply_inplace); shorter ones are copied, one snapshot each. */
enum { DSM_RMA_INPLACE_MIN = 64 * 1024 };

typedef struct dsm_emu {
    dsm_fabric_t *fabric;
    dsm_op_t *op;
    uint8_t opcode;           /* DSM_RMA_*, or EMU_AM_REQUEST */
    size_t left;              /* fragments not yet complete; pending_lock */
    dsm_status_t status;      /* first error of any fragment */
    uint8_t old[8];           /* an atomic's reply */
    size_t nfrag;
    dsm_am_pending_t frag[];
} dsm_emu_t;

/* Not an emulated one-sided op but a request to any handler whose reply
 * completes a dsm_op_t (dsm_fabric_am_request_nb); never on the wire. */
enum { EMU_AM_REQUEST = 0 };

static inline dsm_emu_t *emu_of(const dsm_op_t *op)
{
    return (dsm_emu_t *)((uintptr_t)op->request & ~DSM_EMU_TAG);
}

/* pending_lock held (see dsm_fabric_pending_complete_locked). */
static void frag_done(dsm_am_pending_t *p)
{
    dsm_emu_t *e = p->owner;
    dsm_status_t st = p->status;
    /* a reply of the wrong size is the peer's fault, not a partial success
     * (a request's reply may be shorter than its buffer) */
    if (st == DSM_OK && e->opcode != EMU_AM_REQUEST && p->reply_len != p->cap)
        st = DSM_ERR_PROTO;
    if (st != DSM_OK && e->status == DSM_OK)
        e->status = st;
    if (--e->left != 0)
        return;
    if (e->opcode == EMU_AM_REQUEST)
        e->op->result = p->reply_len;
    else if (e->status == DSM_OK && e->opcode != DSM_RMA_GET && e->opcode != DSM_RMA_PUT)
        e->op->result = dsm_get_u64(e->old);
    dsm_fabric_op_finish(e->op, e->status);
}

/* A record of nfrag fragments for `op`, tagged into op->request; NULL (op
 * finished with DSM_ERR_NOMEM) if out of memory. */
static dsm_emu_t *emu_new(dsm_fabric_t *f, dsm_op_t *op, uint8_t opcode, size_t nfrag)
{
    dsm_emu_t *e = calloc(1, sizeof *e + nfrag * sizeof e->frag[0]);
    if (e == NULL) {
        dsm_fabric_op_finish(op, DSM_ERR_NOMEM);
        return NULL;
    }
    e->fabric = f;
    e->op = op;
    e->opcode = opcode;
    e->left = nfrag;
    e->nfrag = nfrag;
    e->status = DSM_OK;
    op->request = (void *)((uintptr_t)e | DSM_EMU_TAG);
    return e;
}

/* Fragment p of e, to `rank`, its reply into reply[0..cap): a fresh request
 * id; flush and fence wait for it (emulated). Not yet linked. */
static void frag_init(dsm_fabric_t *f, dsm_emu_t *e, dsm_am_pending_t *p, uint32_t rank, void *reply, size_t cap)
{
    p->id = atomic_fetch_add_explicit(&f->next_request_id, 1, memory_order_relaxed);
    p->rank = rank;
    p->status = DSM_ERR_TIMEOUT;
    p->on_done = frag_done;
    p->owner = e;
    p->emulated = true;
    p->reply = reply;
    p->cap = cap;
}

dsm_status_t dsm_fabric_emu_start(dsm_fabric_t *f, uint32_t rank, uint8_t opcode, uint64_t addr,
                                  uint64_t len, uint64_t operand, uint64_t operand2,
                                  void *dst, const void *put_data, dsm_op_t *op)
{
    bool bulk = opcode == DSM_RMA_GET || opcode == DSM_RMA_PUT;
    size_t nfrag = bulk ? (size_t)((len + DSM_RMA_CHUNK - 1) / DSM_RMA_CHUNK) : 1;
    if (nfrag == 0)
        nfrag = 1;
    dsm_emu_t *e = emu_new(f, op, opcode, nfrag);
    if (e == NULL)
        return DSM_ERR_NOMEM;

    /* Every fragment is in the table before the first request leaves, so a
     * reply (or a peer failure) can never miss its entry. */
    for (size_t i = 0; i < nfrag; i++) {
        dsm_am_pending_t *p = &e->frag[i];
        uint64_t off = (uint64_t)i * DSM_RMA_CHUNK;
        uint64_t n = bulk ? (len - off < DSM_RMA_CHUNK ? len - off : DSM_RMA_CHUNK) : sizeof(uint64_t);
        if (opcode == DSM_RMA_GET)
            frag_init(f, e, p, rank, (uint8_t *)dst + off, (size_t)n);
        else if (opcode == DSM_RMA_PUT)
            frag_init(f, e, p, rank, NULL, 0);
        else
            frag_init(f, e, p, rank, e->old, sizeof e->old);
        dsm_fabric_pending_link(f, p);
    }

    dsm_status_t st = DSM_OK;
    for (size_t i = 0; i < nfrag && st == DSM_OK; i++) {
        uint64_t off = (uint64_t)i * DSM_RMA_CHUNK;
        uint64_t n = bulk ? (len - off < DSM_RMA_CHUNK ? len - off : DSM_RMA_CHUNK) : sizeof(uint64_t);
        dsm_rma_wire_t m = {
            .op = opcode, .addr = addr + off, .length = n, .operand = operand, .operand2 = operand2,
        };
        uint8_t hdr[DSM_RMA_WIRE_LEN];
        dsm_rma_wire_encode(&m, hdr);
        const void *extra = opcode == DSM_RMA_PUT ? (const uint8_t *)put_data + off : NULL;
        size_t extra_len = opcode == DSM_RMA_PUT ? (size_t)n : 0;
        /* inside dsm_fabric_batch_begin/end: with the thread's others to rank */
        if (nfrag == 1 && dsm_fabric_batch_request(f, rank, e->frag[i].id, hdr, sizeof hdr, extra, extra_len))
            continue;
        /* behind a request in flight to rank: with the ones queued after it */
        if (nfrag == 1 && dsm_fabric_defer_request(f, rank, e->frag[i].id, hdr, sizeof hdr, extra, extra_len, &st))
            continue;
        st = dsm_fabric_am_request_detached(f, rank, DSM_AM_RMA_HANDLER, e->frag[i].id, hdr, sizeof hdr, extra,
                                            extra_len);
    }
    /* An op that fails when submitted owns nothing afterwards, like every
     * other failing submission (callers do not wait on it): unlink what was
     * sent (a late reply then finds no entry) and free the record. */
    if (st != DSM_OK)
        return dsm_fabric_emu_abandon(op, st);
    return DSM_OK;
}

dsm_status_t dsm_fabric_emu_request(dsm_fabric_t *f, uint32_t rank, uint16_t handler, const void *req,
                                    size_t req_len, void *reply, size_t cap, dsm_op_t *op)
{
    dsm_emu_t *e = emu_new(f, op, EMU_AM_REQUEST, 1);
    if (e == NULL)
        return DSM_ERR_NOMEM;
    dsm_am_pending_t *p = &e->frag[0];
    frag_init(f, e, p, rank, reply, cap);
    dsm_fabric_pending_link(f, p);
    dsm_status_t st = dsm_fabric_am_request_detached(f, rank, handler, p->id, req, req_len, NULL, 0);
    return st == DSM_OK ? DSM_OK : dsm_fabric_emu_abandon(op, st);
}

void dsm_fabric_emu_release(dsm_op_t *op)
{
    free(emu_of(op));
    op->request = NULL;
}

dsm_status_t dsm_fabric_emu_abandon(dsm_op_t *op, dsm_status_t why)
{
    dsm_emu_t *e = emu_of(op);
    dsm_fabric_t *f = e->fabric;
    pthread_mutex_lock(&f->pending_lock);
    for (size_t i = 0; i < e->nfrag; i++)
        if (!atomic_load_explicit(&e->frag[i].done, memory_order_relaxed))
            dsm_fabric_pending_unlink_locked(f, &e->frag[i]);
    bool done = __atomic_load_n(&op->done, __ATOMIC_ACQUIRE);
    if (!done)
        dsm_fabric_op_finish(op, why);
    pthread_mutex_unlock(&f->pending_lock);
    free(e);
    op->request = NULL;
    return op->status;
}

/* Is there an emulated entry to `rank` (any if MAX_PEERS) with id < before?
 * Optionally collects the ranks owing replies. pending_lock held. */
static bool outstanding_locked(dsm_fabric_t *f, uint32_t rank, uint64_t before, bool *ranks)
{
    bool any = false;
    for (dsm_am_pending_t *p = f->pending; p; p = p->next) {
        if (!p->emulated || p->id >= before)
            continue;
        if (rank != DSM_FABRIC_MAX_PEERS && p->rank != rank)
            continue;
        any = true;
        if (ranks == NULL)
            break;
        if (p->rank < DSM_FABRIC_MAX_PEERS)
            ranks[p->rank] = true;
    }
    return any;
}

bool dsm_fabric_emu_outstanding(dsm_fabric_t *f, uint32_t rank)
{
    pthread_mutex_lock(&f->pending_lock);
    bool any = outstanding_locked(f, rank, UINT64_MAX, NULL);
    pthread_mutex_unlock(&f->pending_lock);
    return any;
}

dsm_status_t dsm_fabric_emu_quiesce(dsm_fabric_t *f, uint32_t rank)
{
    /* Request ids only grow, so "issued before this call" is "id below the
     * next one now"; operations issued concurrently are not waited for. */
    uint64_t before = atomic_load_explicit(&f->next_request_id, memory_order_relaxed);
    dsm_waiter_t w;
    dsm_fabric_waiter_begin(f, &w, 0, DSM_WAIT_ANSWER);
    uint64_t t0 = 0;
    for (bool first = true;; first = false) {
        pthread_mutex_lock(&f->pending_lock);
        bool any = outstanding_locked(f, rank, before, NULL);
        pthread_mutex_unlock(&f->pending_lock);
        if (!any) {
            dsm_fabric_waiter_end(&w);
            DSM_COUNT_WAIT_TIME(f, t0);
            return DSM_OK;
        }
        if (first) {   /* the answers of those still in flight: one round trip */
            t0 = dsm_fabric_wait_clock(f);
            dsm_fabric_waiter_round_trip(&w);
        }
        if (!dsm_fabric_waiter_step(&w))
            continue;
        if (dsm_fabric_waiter_expired(&w))
            break;
    }
    dsm_fabric_waiter_end(&w);
    /* Peers still owing replies are failed, as a timed-out op fails its
     * peer; that completes their entries with DSM_ERR_PEER_DEAD. */
    bool *owing = calloc(DSM_FABRIC_MAX_PEERS, sizeof *owing);
    if (owing == NULL)
        return DSM_ERR_NOMEM;
    pthread_mutex_lock(&f->pending_lock);
    outstanding_locked(f, rank, before, owing);
    pthread_mutex_unlock(&f->pending_lock);
    for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++)
        if (owing[r])
            dsm_fabric_mark_dead(f, r, "flush timed out");
    free(owing);
    return DSM_ERR_TIMEOUT;
}

/* ----------------------------------------------------------- target side */

static void rma_reply(dsm_fabric_t *f, const dsm_am_msg_t *msg, dsm_status_t st,
                      const void *data, size_t len)
{
    if (msg->request_id == 0)
        return;   /* not a request: nobody to answer (and nothing done) */
    /* with the other replies to this requester from this progress pass,
     * unless it must go back through the arriving endpoint */
    if ((dsm_fabric_reply_ep == NULL || dsm_fabric_peer_state(f, msg->src_rank) == DSM_OK) &&
        dsm_fabric_batch_reply(f, msg->src_rank, msg->request_id, st, data, len))
        return;
    dsm_status_t rs = dsm_fabric_am_reply_via(f, msg->src_rank, msg->request_id, st, data, len);
    if (rs != DSM_OK)
        DSM_DEBUG(DSM_FABRIC_LOG, "emulated one-sided reply to rank %u: %s", msg->src_rank,
                  dsm_strerror(rs));
}

/* A long get's reply is sent from the region itself: the copy a reply
 * makes costs as much as the wire over tcp. The region is held by its
 * send count, not its lock, until UCX is done with it; like an RDMA read,
 * such a get sees writes made while it is on the wire. Called with the
 * regions lock held; releases it. */
static void get_reply_inplace(dsm_fabric_t *f, const dsm_am_msg_t *msg, dsm_region_t *region, const uint8_t *mem,
                              size_t len)
{
    dsm_fabric_region_send_begin(region);
    dsm_fabric_local_release(f);
    dsm_status_t st =
        dsm_fabric_am_reply_inplace(f, msg->src_rank, msg->request_id, mem, len, dsm_fabric_region_send_end, region);
    if (st == DSM_ERR_UNSUPPORTED)
        rma_reply(f, msg, DSM_OK, mem, len);
    else if (st != DSM_OK)
        DSM_DEBUG(DSM_FABRIC_LOG, "emulated get's reply to rank %u: %s", msg->src_rank, dsm_strerror(st));
    if (st != DSM_OK)
        dsm_fabric_region_send_end(region);
}

static void rma_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_fabric_t *f = ctx;
    dsm_rma_wire_t m;
    dsm_status_t st = dsm_rma_wire_decode(msg->data, msg->len, &m);
    if (st == DSM_OK && msg->request_id == 0)
        st = DSM_ERR_PROTO;   /* a one-sided op is always a request */
    if (st != DSM_OK) {
        DSM_COUNT(f, am_rejected, 1);
        DSM_WARN(DSM_FABRIC_LOG, "rejected emulated one-sided request from rank %u (%zu bytes)",
                 msg->src_rank, msg->len);
        rma_reply(f, msg, st, NULL, 0);
        return;
    }
    if (m.length == 0) {
        rma_reply(f, msg, DSM_OK, NULL, 0);
        return;
    }
    dsm_region_t *region;
    uint8_t *mem = dsm_fabric_local_acquire(f, m.addr, m.length, &region);
    if (mem == NULL) {
        DSM_DEBUG(DSM_FABRIC_LOG, "emulated one-sided request from rank %u outside our regions",
                  msg->src_rank);
        rma_reply(f, msg, DSM_ERR_BAD_ADDR, NULL, 0);
        return;
    }
    uint64_t *word = (uint64_t *)(void *)mem;
    uint64_t old = 0;
    uint8_t out[8];
    switch (m.op) {
    case DSM_RMA_GET:
        if (m.length >= DSM_RMA_INPLACE_MIN) {
            get_reply_inplace(f, msg, region, mem, (size_t)m.length);
            return;
        }
        /* the reply copies the data before the region lock is dropped */
        rma_reply(f, msg, DSM_OK, mem, (size_t)m.length);
        dsm_fabric_local_release(f);
        return;
    case DSM_RMA_PUT:
        if (f->chaos)
            dsm_fabric_chaos_copy(f, mem, m.data, (size_t)m.length);
        else
            memcpy(mem, m.data, (size_t)m.length);
        dsm_fabric_local_release(f);
        rma_reply(f, msg, DSM_OK, NULL, 0);
        return;
    case DSM_RMA_FADD:
        old = __atomic_fetch_add(word, m.operand, __ATOMIC_SEQ_CST);
        break;
    case DSM_RMA_SWAP:
        old = __atomic_exchange_n(word, m.operand, __ATOMIC_SEQ_CST);
        break;
    case DSM_RMA_CAS:
        old = m.operand;
        __atomic_compare_exchange_n(word, &old, m.operand2, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        break;   /* old: the value found, whether or not it was swapped */
    default:
        break;   /* the decoder admits no other op */
    }
    dsm_fabric_local_release(f);
    dsm_put_u64(out, old);
    rma_reply(f, msg, DSM_OK, out, sizeof out);
}

void dsm_fabric_emu_init(dsm_fabric_t *f)
{
    dsm_fabric_defer_init(f);
    dsm_am_slot_t *slot = &f->handlers[DSM_AM_RMA_HANDLER];
    atomic_store(&slot->ctx, f);
    atomic_store_explicit(&slot->fn, rma_handler, memory_order_release);
}
