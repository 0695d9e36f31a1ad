/* Batched messages: what one thread sends one peer in a burst leaves as one
 * message (batch_wire.h). Two kinds, one batch per thread at a time:
 *  - replies: the small replies a thread's handlers give one requester
 *    during one pass of the worker's progress (DSM_AM_KIND_REPLY_BATCH),
 *    sent when that pass ends;
 *  - requests: the emulated one-sided requests a thread issues to one peer
 *    between dsm_fabric_batch_begin and _end (DSM_AM_KIND_REQUEST_BATCH to
 *    DSM_AM_RMA_HANDLER), sent at _end at the latest.
 *
 * The batch is the calling thread's own, so it needs no lock. It goes out,
 * in order, before anything else this thread sends and whenever the thread
 * progresses the worker (dsm_fabric_batch_flush in the send paths and in
 * dsm_fabric_progress): a connection keeps the order of everything sent on
 * it, batched or not, and a thread that waits for an op it batched sends it
 * first. A batch of one entry leaves as a plain message. The same batch
 * type, appended and sent by the functions below, is the fabric's queue of
 * deferred requests (defer.c). */
#include <string.h>

#include "fabric/batch_wire.h"
#include "fabric/fabric_int.h"
#include "util/bytes.h"
#include "util/log.h"

static _Thread_local dsm_msg_batch_t batch;
_Thread_local uint32_t dsm_fabric_batch_n;
/* the fabric this thread batches its requests for (begin/end), or NULL */
static _Thread_local dsm_fabric_t *corked;
static _Thread_local unsigned cork_depth;

dsm_status_t dsm_fabric_batch_send(dsm_msg_batch_t *b)
{
    dsm_fabric_t *f = b->f;
    uint32_t n = b->n;
    b->n = 0;
    if (n == 0 || f == NULL)
        return DSM_OK;
    bool requests = b->kind == DSM_AM_KIND_REQUEST_BATCH;
    dsm_am_wire_t h = {.src_rank = dsm_fabric_rank(f), .handler = requests ? DSM_AM_RMA_HANDLER : 0};
    const void *data = b->buf;
    size_t len = b->used;
    if (n == 1) {
        dsm_batch_entry_t e;
        size_t off = 0;
        dsm_batch_wire_next(b->buf, len, &off, &e);
        h.flags = requests ? DSM_AM_KIND_REQUEST : DSM_AM_KIND_REPLY;
        h.request_id = e.request_id;
        h.status = e.status;
        data = e.data;
        len = e.len;
    } else {
        h.flags = b->kind;
        h.request_id = n;
    }
    dsm_status_t st = dsm_fabric_am_send_now(f, b->rank, &h, data, len);
    if (st == DSM_OK) {
        DSM_COUNT(f, am_sent, 1);
        DSM_COUNT(f, am_bytes_sent, len);
        if (requests)
            DSM_COUNT(f, am_sent_by_handler[DSM_AM_RMA_HANDLER], 1);
        return DSM_OK;
    }
    DSM_COUNT(f, errors, 1);
    DSM_DEBUG(DSM_FABRIC_LOG, "%u batched %s to rank %u: %s", n, requests ? "requests" : "replies", b->rank,
              dsm_strerror(st));
    /* requests that never left would wait for their timeout: they fail now,
     * as a request that fails to leave does (its peer is gone) */
    if (requests)
        dsm_fabric_am_fail_pending(f, b->rank, st);
    return st;
}

void dsm_fabric_batch_flush_slow(void)
{
    /* emptied first: the send below must not flush again */
    dsm_fabric_batch_n = 0;
    (void)dsm_fabric_batch_send(&batch);
}

bool dsm_fabric_batch_fits(const dsm_msg_batch_t *b, dsm_fabric_t *f, uint32_t rank, uint16_t kind, size_t len)
{
    return b->n == 0 ||
           (b->f == f && b->rank == rank && b->kind == kind && sizeof b->buf - b->used >= DSM_BATCH_ENTRY_HDR + len);
}

bool dsm_fabric_batch_append(dsm_msg_batch_t *b, dsm_fabric_t *f, uint32_t rank, uint16_t kind, uint64_t id,
                             dsm_status_t status, const void *a, size_t a_len, const void *extra, size_t extra_len)
{
    size_t len = a_len + extra_len;
    if (len > DSM_BATCH_ENTRY_MAX || !dsm_fabric_batch_fits(b, f, rank, kind, len))
        return false;
    if (b->n == 0) {
        b->f = f;
        b->rank = rank;
        b->kind = kind;
        b->used = 0;
    }
    size_t at = b->used;
    if (!dsm_batch_wire_append(b->buf, sizeof b->buf, &b->used, id, status, a, a_len))
        return false;
    if (extra_len) {   /* a put's data after its request: one entry */
        memcpy(b->buf + b->used, extra, extra_len);
        b->used += extra_len;
        dsm_put_u16(b->buf + at + 10, (uint16_t)len);
    }
    b->n++;
    return true;
}

/* Appends to this thread's batch of `kind` to (f, rank), flushing first
 * what is batched for another peer or kind or leaves no room. */
static bool batch_add(dsm_fabric_t *f, uint32_t rank, uint16_t kind, uint64_t id, dsm_status_t status,
                      const void *a, size_t a_len, const void *extra, size_t extra_len)
{
    size_t len = a_len + extra_len;
    if (len > DSM_BATCH_ENTRY_MAX)
        return false;
    if (!dsm_fabric_batch_fits(&batch, f, rank, kind, len))
        dsm_fabric_batch_flush_slow();
    if (!dsm_fabric_batch_append(&batch, f, rank, kind, id, status, a, a_len, extra, extra_len))
        return false;
    dsm_fabric_batch_n = batch.n;
    return true;
}

bool dsm_fabric_batch_reply(dsm_fabric_t *f, uint32_t rank, uint64_t request_id, dsm_status_t status,
                            const void *data, size_t len)
{
    /* a reply to an earlier incarnation is refused alone (dsm_fabric_am_reply) */
    if (dsm_fabric_handler_depth == 0 || !dsm_fabric_reply_current(f, rank, request_id & DSM_AM_ID_TAG_MASK))
        return false;
    return batch_add(f, rank, DSM_AM_KIND_REPLY_BATCH, request_id & ~DSM_AM_ID_TAG_MASK, status, data, len, NULL,
                     0);
}

bool dsm_fabric_batch_request(dsm_fabric_t *f, uint32_t rank, uint64_t request_id, const void *req,
                              size_t req_len, const void *extra, size_t extra_len)
{
    if (corked != f)
        return false;
    return batch_add(f, rank, DSM_AM_KIND_REQUEST_BATCH, request_id, DSM_OK, req, req_len, extra, extra_len);
}

void dsm_fabric_batch_begin(dsm_fabric_t *f)
{
    if (f == NULL)
        return;
    if (cork_depth++ == 0)
        corked = f;
}

void dsm_fabric_batch_end(dsm_fabric_t *f)
{
    if (f == NULL || cork_depth == 0)
        return;
    if (--cork_depth == 0) {
        corked = NULL;
        dsm_fabric_batch_flush();
    }
}

void dsm_fabric_batch_forget(dsm_fabric_t *f)
{
    dsm_fabric_defer_flush(f);
    if (batch.n != 0 && batch.f == f)
        dsm_fabric_batch_flush_slow();
    if (corked == f) {
        corked = NULL;
        cork_depth = 0;
    }
}
