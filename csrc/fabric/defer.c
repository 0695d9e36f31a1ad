/* Deferred emulated requests: Nagle's rule for the one-sided operations a
 * fabric emulates with its own messages (rma_emu.c).
 *
 * A window of gets or puts issued back to back would otherwise leave as one
 * message (one send system call) per operation and reach the target a few
 * at a time, so its replies batch poorly too. Here a small request to a peer
 * that already has a request in flight waits in the fabric's queue; those
 * queued behind one another leave as one DSM_AM_KIND_REQUEST_BATCH message
 * when the issuing thread sends, waits or tests, when any thread progresses
 * the worker (the reply to the one in flight is such a pass), or when the
 * queue is full or turns to another peer.
 *
 * Why nothing waits forever: an entry stays queued only while the pending
 * table holds a request to its peer that is not queued (in flight, or about
 * to leave on the thread that linked it), whose reply or failure comes with
 * a progress pass, which flushes. The issuer appends first and counts the
 * table after; a completion uncounts and then looks at the queue (both
 * sequentially consistent), so one of them always sees the other.
 *
 * The queue is shared by the fabric's threads (lock), so an op waited for by
 * another thread than its issuer, or by none, still leaves. The lock is
 * taken before UCX's worker lock, never under it: never inside a handler.
 * A flush sends under the lock, so two flushers keep one thread's requests
 * in order; a thread's own later sends flush first (am.c), and so does a
 * write chaos takes (rma.c). A flush leaves on the fabric's shared
 * endpoint, so a thread with a lane (its own endpoints, whose order it
 * keeps) never defers; nor a handler.
 *
 * Under chaos (chaos.c) a flush goes through the peer's chaos queue like
 * any send, maybe delayed there, and chaos may hold a queue open past
 * progress passes (its releaser then sends it) or send it early. A thread
 * releasing chaos's queues sends their items straight out, in their order:
 * it neither defers nor flushes, since the queue may hold requests issued
 * after those items. */
#include "fabric/fabric_int.h"

_Thread_local int dsm_fabric_defer_sending;

void dsm_fabric_defer_init(dsm_fabric_t *f)
{
    pthread_mutex_init(&f->defer.lock, NULL);
    atomic_store(&f->defer.n, 0);
    atomic_store(&f->defer.requests, 0);
    atomic_store(&f->defer.batches, 0);
    f->defer.q.n = 0;
}

/* A count only the lock's holder adds to: no locked instruction. */
static inline void count(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

/* lock held */
static dsm_status_t flush_locked(dsm_fabric_t *f)
{
    dsm_defer_t *d = &f->defer;
    if (d->q.n == 0)
        return DSM_OK;
    /* entries for an incarnation of the peer that is gone were failed with
     * it: they must not reach its successor */
    uint32_t rank = d->q.rank;
    dsm_status_t st = DSM_OK;
    if (atomic_load_explicit(&f->peers[rank].incarnation, memory_order_relaxed) != d->incarnation)
        d->q.n = 0;
    else {
        count(&d->batches);
        dsm_fabric_defer_sending = 1;   /* its own send must not flush again */
        st = dsm_fabric_batch_send(&d->q);
        dsm_fabric_defer_sending = 0;
    }
    if (f->chaos != NULL)
        dsm_fabric_chaos_defer_closed(f);
    /* only once they are sent: a thread that finds the count 0 sends its
     * next message at once, which must not overtake them */
    atomic_store_explicit(&d->n, 0, memory_order_seq_cst);
    return st;
}

void dsm_fabric_defer_flush_slow(dsm_fabric_t *f, bool pass)
{
    if (f->chaos != NULL && (dsm_fabric_chaos_releasing || (pass && dsm_fabric_chaos_defer_held(f))))
        return;
    pthread_mutex_lock(&f->defer.lock);
    (void)flush_locked(f);   /* a failure fails the peer's requests */
    pthread_mutex_unlock(&f->defer.lock);
}

bool dsm_fabric_defer_request(dsm_fabric_t *f, uint32_t rank, uint64_t request_id, const void *req,
                              size_t req_len, const void *extra, size_t extra_len, dsm_status_t *st)
{
    dsm_defer_t *d = &f->defer;
    /* alone in the table (the caller's own entry): nothing to wait behind,
     * so it leaves as it always did, without the lock */
    if (rank >= DSM_FABRIC_MAX_PEERS || dsm_fabric_handler_depth != 0 || req_len + extra_len > DSM_BATCH_ENTRY_MAX ||
        atomic_load_explicit(&d->pending_to[rank], memory_order_seq_cst) <= 1 || dsm_fabric_lane_of(f) != NULL ||
        (f->chaos != NULL && dsm_fabric_chaos_releasing))
        return false;
    size_t len = req_len + extra_len;
    *st = DSM_OK;
    pthread_mutex_lock(&d->lock);
    if (!dsm_fabric_batch_fits(&d->q, f, rank, DSM_AM_KIND_REQUEST_BATCH, len))
        (void)flush_locked(f);   /* a failure fails that peer's requests */
    bool opened = d->q.n == 0;
    if (opened)
        d->incarnation = atomic_load_explicit(&f->peers[rank].incarnation, memory_order_relaxed);
    if (!dsm_fabric_batch_append(&d->q, f, rank, DSM_AM_KIND_REQUEST_BATCH, request_id, DSM_OK, req, req_len,
                                 extra, extra_len)) {
        pthread_mutex_unlock(&d->lock);
        return false;
    }
    count(&d->requests);
    atomic_store_explicit(&d->n, d->q.n, memory_order_seq_cst);
    /* every entry to rank in the table is queued: none in flight to bring a
     * progress pass, so they leave now */
    bool due = atomic_load_explicit(&d->pending_to[rank], memory_order_seq_cst) <= d->q.n;
    if (f->chaos != NULL) {
        if (opened)
            dsm_fabric_chaos_defer_opened(f);
        due = dsm_fabric_chaos_defer_send(f, due);
    }
    if (due)
        *st = flush_locked(f);
    pthread_mutex_unlock(&d->lock);
    return true;
}
