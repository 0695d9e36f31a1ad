/* The remote slot area and slot writes (Gossamer §3.2.7-3.2.8). Each node's
 * area holds its two receive squares (requests for its trustees, responses
 * for its clients; remote.h has the index maths); the staging squares are
 * each thread's own memory (rstage_t). A batch is built in a staging block
 * and written to the peer's receive block in one operation, flag last:
 *
 * - put path (shm, verbs): the peer's area is fabric region DSM_DELEG_REGION.
 *   Over shm UCX maps it into this process, so the payload put is a memcpy
 *   into the peer's memory and the flag put an 8-byte store after a release
 *   fence. Where the put did not complete at once (UCX RMA, not mapped), a
 *   fabric fence orders the flag after it. Writes are unsignalled: their
 *   completions are reaped when the staging block is reused and every
 *   RSIGNAL_EVERY writes, never waited for one by one.
 * - message path (tcp): the fabric emulates a put as a message that the
 *   target's progress thread applies with memcpy, in no particular byte
 *   order, so a flag in the same bytes could be seen before the payload.
 *   Deleg sends the same single message to its own handler instead
 *   (DSM_AM_DELEG_PUT), which copies the bytes and then stores the flag with
 *   release: still one message per batch, and the flag is last.
 * And the inbox of what does not fit a slot: large requests and spilled
 * responses, kept by (peer, pair, batch, index) until their batch is read. */
#include <stdlib.h>
#include <string.h>

#include "deleg/remote.h"
#include "util/log.h"

dsm_status_t dsm_rslot_area_create(dsm_deleg_remote_t *R, dsm_transport_t transport)
{
    R->msg_put = transport == DSM_TRANSPORT_TCP;
    R->inflight = R->msg_put && R->T <= RINFLIGHT_MSG_MAX_T ? RINFLIGHT_MSG : RINFLIGHT_PUT;
    /* put path: a request past a slot is put into a big block (one more
     * store into the peer's memory) rather than sent by message */
    R->big = !R->msg_put && R->T <= RBIG_MAX_THREADS ? RBIG_SIZE : 0;
    size_t size = rsq_size(R) + 2 * (size_t)R->T * RMAX_NODES * R->T * R->inflight * R->big;
    /* bells where every writer reaches them: over shm a peer's area is
     * mapped here (tcp and verbs: threads nap) */
    if (transport == DSM_TRANSPORT_SHM) {
        R->bells_off = size;
        size += (size_t)R->T * RBELL_STRIDE;
    }
    dsm_status_t st;
    if (transport == DSM_TRANSPORT_SHM || transport == DSM_TRANSPORT_AUTO) {
        /* UCX's shared memory: peers on this host map it (see heap/partition.c) */
        st = dsm_fabric_region_alloc(R->fabric, size, &R->region);
        if (st != DSM_OK) return st;
        R->base = dsm_fabric_region_base(R->region);
    } else {
        if (posix_memalign((void **)&R->own_mem, 4096, size) != 0) return DSM_ERR_NOMEM;
        memset(R->own_mem, 0, size);
        R->base = R->own_mem;
        st = dsm_fabric_region_register(R->fabric, R->base, size, &R->region);
        if (st != DSM_OK) return st;
    }
    R->size = size;
    return DSM_OK;
}

void dsm_rslot_area_destroy(dsm_deleg_remote_t *R)
{
    if (R->region) dsm_fabric_region_unregister(R->region);
    R->region = NULL;
    free(R->own_mem);
    R->own_mem = NULL;
    R->base = NULL;
}

rstage_t *dsm_rstage_get(rstage_t **slot)
{
    if (!*slot) {
        *slot = aligned_alloc(64, sizeof(rstage_t));
        if (*slot) memset(*slot, 0, sizeof(rstage_t));
    }
    return *slot;
}

dsm_status_t dsm_rslot_reap(rstage_t *st, int wait)
{
    for (unsigned i = 0; i < 2; i++) {
        if (!(st->live & (1u << i))) continue;
        if (wait) dsm_fabric_wait(&st->ops[i]);
        else if (!dsm_fabric_test(&st->ops[i])) return DSM_ERR_STATE;
        st->live &= (uint8_t)~(1u << i);
    }
    return DSM_OK;
}

static dsm_status_t write_put(dsm_deleg_remote_t *R, uint32_t rank, size_t block_off, rstage_t *st, size_t len,
                              uint64_t seq)
{
    size_t at = block_off + RSLOT_SEQ_AT - len;
    dsm_status_t s = dsm_fabric_put_nb(R->fabric, rank, DSM_DELEG_REGION, at, st->buf + RSTAGE_HDR, len,
                                       &st->ops[0]);
    st->live |= 1;
    if (s != DSM_OK) return s;
    if (__atomic_load_n(&st->ops[0].done, __ATOMIC_ACQUIRE)) {
        /* done: a store into the mapped area; order the flag's store after it */
        deleg_release_fence();
    } else if ((s = dsm_fabric_fence(R->fabric, rank)) != DSM_OK) {
        return s;
    }
    st->seq_word = seq;
    s = dsm_fabric_put_nb(R->fabric, rank, DSM_DELEG_REGION, block_off + RSLOT_SEQ_AT, &st->seq_word, 8,
                          &st->ops[1]);
    st->live |= 2;
    return s;
}

dsm_status_t dsm_rslot_put_big(dsm_deleg_remote_t *R, uint32_t rank, size_t big_off, const void *bytes, size_t len)
{
    dsm_op_t op;
    memset(&op, 0, sizeof op);
    dsm_status_t s = dsm_fabric_put_nb(R->fabric, rank, DSM_DELEG_REGION, big_off, bytes, len, &op);
    if (s != DSM_OK) return s;
    /* into the mapped area it is a store, done at once; else wait: the
     * bytes are the caller's and the flag written next must follow them */
    dsm_fabric_wait(&op);
    return op.status;
}

dsm_status_t dsm_rslot_write(dsm_deleg_remote_t *R, rep_t *ep, uint32_t rank, unsigned to, size_t block_off,
                             rstage_t *st, size_t payload_len, uint64_t seq)
{
    size_t len = payload_len + RSLOT_META;
    dsm_status_t s;
    if (R->msg_put) {
        /* header right before the bytes: one contiguous message */
        uint8_t *msg = st->buf + RSTAGE_HDR - RPUT_HDR;
        dsm_rput_encode_hdr(msg, (uint32_t)block_off, (uint32_t)len, (uint32_t)R->runs, seq);
        s = dsm_fabric_am_send(R->fabric, rank, DSM_AM_DELEG_PUT, msg, RPUT_HDR + len);
    } else {
        s = write_put(R, rank, block_off, st, len, seq);
        if (s == DSM_OK) dsm_rbell_ring(R, rank, to);
    }
    ep->writes++;
    if (++ep->unsignalled >= RSIGNAL_EVERY) {
        /* the periodic completion: everything this endpoint wrote before is
         * complete once the flush returns (at once for stores into shm) */
        ep->unsignalled = 0;
        if (!R->msg_put && s == DSM_OK) s = dsm_rslot_reap(st, 1);
    }
    return s;
}

/* DSM_AM_DELEG_PUT: a peer's slot write over tcp. Only blocks of the peer's
 * own column (it is the client of a request block or the trustee of a
 * response block) may be written; anything else is dropped and logged. */
/* Slot writes and large messages are one-way; a sender that asked for an
 * answer anyway gets the refusal at once instead of its op timeout. */
static void refuse(dsm_deleg_remote_t *R, const dsm_am_msg_t *msg, dsm_status_t st)
{
    if (msg->request_id) dsm_fabric_am_reply(R->fabric, msg->src_rank, msg->request_id, st, NULL, 0);
}

/* A write or large message of a run this node has recovered from: late,
 * not malformed. Counted, and refused if it asked for an answer. */
static void stale(dsm_deleg_remote_t *R, const dsm_am_msg_t *msg, uint32_t run)
{
    atomic_fetch_add_explicit(&R->stale_dropped, 1, memory_order_relaxed);
    DSM_DEBUG("deleg", "a late message of rank %u's lost run %u dropped", msg->src_rank, run);
    refuse(R, msg, DSM_ERR_STATE);
}

void dsm_rslot_put_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_deleg_remote_t *R = ctx;
    rput_t p;
    if (dsm_rput_decode(msg->data, msg->len, &p) != DSM_OK || p.block_off + (size_t)RSLOT_SIZE > rsq_size(R) ||
        msg->src_rank >= RMAX_NODES) {
        DSM_WARN("deleg", "malformed slot write from rank %u dropped", msg->src_rank);
        refuse(R, msg, DSM_ERR_PROTO);
        return;
    }
    size_t blk = p.block_off / RSLOT_SIZE;
    size_t per_square = (size_t)R->T * RMAX_NODES * R->T * R->inflight;
    size_t in_sq = blk % per_square;
    unsigned r = (unsigned)((in_sq / ((size_t)R->T * R->inflight)) % RMAX_NODES);
    if (r != msg->src_rank) {
        DSM_WARN("deleg", "rank %u wrote a slot that is not its own; dropped", msg->src_rank);
        refuse(R, msg, DSM_ERR_PROTO);
        return;
    }
    /* seq_cst, with recover's store of fresh_from and its load of
     * applying: either recover waits for this copy, or this sees the new
     * fresh_from and drops the write */
    atomic_fetch_add(&R->applying, 1);
    if (p.run < atomic_load(&R->fresh_from[r])) {
        atomic_fetch_sub(&R->applying, 1);
        stale(R, msg, p.run);
        return;
    }
    uint8_t *block = R->base + p.block_off;
    memcpy(block + RSLOT_SEQ_AT - p.len, p.bytes, p.len);
    atomic_store_explicit((_Atomic uint64_t *)(uintptr_t)(block + RSLOT_SEQ_AT), p.seq, memory_order_release);
    atomic_fetch_sub_explicit(&R->applying, 1, memory_order_release);
}

/* ---- the inbox ----------------------------------------------------------- */

void dsm_rinbox_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_deleg_remote_t *R = ctx;
    rlarge_t l;
    if (dsm_rlarge_decode(msg->data, msg->len, &l) != DSM_OK || msg->src_rank >= RMAX_NODES ||
        l.resp != (msg->handler == DSM_AM_DELEG_SPILL) || l.trustee >= R->T || l.client >= R->T) {
        DSM_WARN("deleg", "malformed large message from rank %u dropped", msg->src_rank);
        refuse(R, msg, DSM_ERR_PROTO);
        return;
    }
    pthread_mutex_lock(&R->inbox_lock);
    /* under the lock recover clears the inbox with */
    if (l.run < atomic_load(&R->fresh_from[msg->src_rank])) {
        pthread_mutex_unlock(&R->inbox_lock);
        stale(R, msg, l.run);
        return;
    }
    if (R->inbox_bytes + l.len > RINBOX_MAX) {
        pthread_mutex_unlock(&R->inbox_lock);
        DSM_WARN("deleg", "large messages from rank %u exceed %u bytes waiting; dropped", msg->src_rank, RINBOX_MAX);
        refuse(R, msg, DSM_ERR_TOO_BIG);
        return;
    }
    rlarge_msg_t *m = malloc(sizeof *m + l.len);
    if (m) {
        *m = (rlarge_msg_t){.resp = l.resp, .rank = msg->src_rank, .client = l.client, .trustee = l.trustee,
                            .index = l.index, .seq = l.seq, .len = l.len};
        memcpy(m->bytes, l.bytes, l.len);
        m->next = R->inbox;
        R->inbox = m;
        R->inbox_bytes += l.len;
    }
    pthread_mutex_unlock(&R->inbox_lock);
    /* a batch flagged before its message came waits for it: wake its reader */
    if (m) dsm_rbell_ring_local(R, l.resp ? l.client : l.trustee);
}

/* Find (and with take, unlink) a message; the caller frees a taken one. */
rlarge_msg_t *dsm_rinbox_find(dsm_deleg_remote_t *R, int resp, uint32_t rank, unsigned client, unsigned trustee,
                                uint64_t seq, uint32_t index, int take)
{
    pthread_mutex_lock(&R->inbox_lock);
    rlarge_msg_t **pp = &R->inbox, *m = NULL;
    for (; *pp; pp = &(*pp)->next) {
        rlarge_msg_t *c = *pp;
        if (c->resp == resp && c->rank == rank && c->client == client && c->trustee == trustee && c->seq == seq &&
            c->index == index) {
            m = c;
            if (take) {
                *pp = c->next;
                R->inbox_bytes -= c->len;
            }
            break;
        }
    }
    pthread_mutex_unlock(&R->inbox_lock);
    return m;
}

