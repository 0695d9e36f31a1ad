/* Batched replies: the small replies a thread's handlers give one requester
 * during one pass of the worker's progress leave as one message
 * (DSM_AM_KIND_REPLY_BATCH, batch_wire.h) when that pass ends.
 *
 * The batch is the calling thread's own (handlers run on the thread that
 * progresses), so it needs no lock. It holds replies to one (fabric, rank)
 * at a time. It goes out, in order, before anything else this thread sends
 * (dsm_fabric_batch_flush in the send paths): a connection keeps the order
 * of everything sent on it, batched or not. A batch of one entry leaves as
 * a plain reply. */
#include <string.h>

#include "fabric/batch_wire.h"
#include "fabric/fabric_int.h"
#include "util/log.h"

/* Room for a tcp window of 8-byte gets, well under one tcp segment. */
enum { BATCH_CAP = 2048 };

typedef struct reply_batch {
    dsm_fabric_t *f;
    uint32_t rank;
    uint32_t n;
    size_t used;
    uint8_t buf[BATCH_CAP];
} reply_batch_t;

static _Thread_local reply_batch_t batch;
_Thread_local uint32_t dsm_fabric_batch_n;

void dsm_fabric_batch_flush_slow(void)
{
    reply_batch_t *b = &batch;
    dsm_fabric_t *f = b->f;
    uint32_t n = b->n;
    /* emptied first: the send below must not flush again */
    b->n = 0;
    dsm_fabric_batch_n = 0;
    if (n == 0 || f == NULL)
        return;
    dsm_status_t st;
    size_t len = b->used;
    if (n == 1) {
        dsm_batch_entry_t e;
        size_t off = 0;
        dsm_batch_wire_next(b->buf, len, &off, &e);
        dsm_am_wire_t h = {
            .flags = DSM_AM_KIND_REPLY, .src_rank = dsm_fabric_rank(f),
            .request_id = e.request_id, .status = e.status,
        };
        st = dsm_fabric_am_send_now(f, b->rank, &h, e.data, e.len);
        len = e.len;
    } else {
        dsm_am_wire_t h = {
            .flags = DSM_AM_KIND_REPLY_BATCH, .src_rank = dsm_fabric_rank(f), .request_id = n,
        };
        st = dsm_fabric_am_send_now(f, b->rank, &h, b->buf, len);
    }
    if (st == DSM_OK) {
        DSM_COUNT(f, am_sent, 1);
        DSM_COUNT(f, am_bytes_sent, len);
    } else {
        DSM_COUNT(f, errors, 1);
        DSM_DEBUG(DSM_FABRIC_LOG, "%u batched replies to rank %u: %s", n, b->rank, dsm_strerror(st));
    }
}

bool dsm_fabric_batch_reply(dsm_fabric_t *f, uint32_t rank, uint64_t request_id, dsm_status_t status,
                            const void *data, size_t len)
{
    reply_batch_t *b = &batch;
    if (len > DSM_BATCH_REPLY_MAX || dsm_fabric_handler_depth == 0)
        return false;
    if (b->n != 0 && (b->f != f || b->rank != rank))
        dsm_fabric_batch_flush_slow();
    if (b->n != 0 && !dsm_batch_wire_append(b->buf, sizeof b->buf, &b->used, request_id, status, data, len))
        dsm_fabric_batch_flush_slow();
    if (b->n == 0) {
        b->f = f;
        b->rank = rank;
        b->used = 0;
        if (!dsm_batch_wire_append(b->buf, sizeof b->buf, &b->used, request_id, status, data, len))
            return false;
    }
    b->n++;
    dsm_fabric_batch_n = b->n;
    return true;
}
