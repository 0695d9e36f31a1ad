/* One-sided operations: get, put, 64-bit fetch-add / compare-and-swap / swap
 * (non-blocking with a dsm_op_t handle, and blocking helpers), fence and
 * flush. Every operation is checked against the remote region table before
 * anything leaves; on a region mapped into this process (shm) it is done
 * directly with loads, stores and CPU atomics; over tcp (and auto) it is a
 * request to the target's DSM_AM_RMA_HANDLER (rma_emu.c); otherwise (shm
 * registered memory, verbs) UCX RMA/AMO. */
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "fabric/rma_wire.h"
#include "util/log.h"

/* Resolves (rank, region, offset, len) to an acquired peer, a remote address
 * and a key, and *direct to the region's local mapping at that offset (NULL
 * if the region is not mapped here). On success the caller must
 * dsm_fabric_peer_release(*peer). */
static inline dsm_status_t resolve(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                                   size_t len, bool atomic, dsm_peer_t **peer, uint64_t *addr,
                                   ucp_rkey_h *rkey, uint8_t **direct)
{
    dsm_status_t st = dsm_fabric_peer_acquire(f, rank, peer);
    if (st != DSM_OK)
        return st;
    if (region >= DSM_FABRIC_MAX_REGIONS)
        goto bad_addr;
    dsm_remote_region_t *rr = &(*peer)->regions[region];
    if (!atomic_load_explicit(&rr->valid, memory_order_acquire))
        goto bad_addr;
    if (offset > rr->length || len > rr->length - offset)
        goto bad_addr;
    if (atomic && ((rr->base + offset) & 7) != 0)
        goto bad_addr;
    *addr = rr->base + offset;
    *rkey = rr->rkey;
    *direct = rr->direct ? rr->direct + offset : NULL;
    return DSM_OK;
bad_addr:
    dsm_fabric_peer_release(*peer);
    return DSM_ERR_BAD_ADDR;
}

static dsm_status_t flush_blocking(dsm_fabric_t *f, uint32_t rank);

/* The endpoint (and in *rkey, the key) of a one-sided operation through UCX:
 * the calling thread's lane, if it has one on this fabric, else the shared. */
static inline ucp_ep_h route(dsm_fabric_t *f, dsm_peer_t *peer, uint32_t region, ucp_rkey_h *rkey)
{
    dsm_lane_t *l = dsm_fabric_lane_of(f);
    if (l == NULL)
        return peer->ep;
    ucp_ep_h ep;
    dsm_fabric_lane_route(l, peer, region, &ep, rkey);
    return ep;
}

/* From inside dsm_fabric_direct_enter: the region's mapping at `offset`
 * for len bytes, or NULL when the access cannot be direct right now (the
 * peer not alive, the region unknown or not mapped here, the range outside
 * it, a misaligned atomic, or a fence still to order it): the caller then
 * takes the regular path, which tells why or does it. No reference on the
 * peer: the mark of the entry keeps the mapping. */
static inline uint8_t *direct_at(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset, size_t len,
                                 bool atomic)
{
    if (rank >= DSM_FABRIC_MAX_PEERS || region >= DSM_FABRIC_MAX_REGIONS)
        return NULL;
    dsm_peer_t *peer = &f->peers[rank];
    if (atomic_load_explicit(&peer->state, memory_order_acquire) != DSM_PEER_ALIVE)
        return NULL;
    dsm_remote_region_t *rr = &peer->regions[region];
    if (!atomic_load_explicit(&rr->valid, memory_order_acquire))
        return NULL;
    uint8_t *d = rr->direct;
    if (d == NULL || offset > rr->length || len > rr->length - offset || (atomic && ((rr->base + offset) & 7)))
        return NULL;
    if (atomic_load_explicit(&peer->fence_seen, memory_order_relaxed) !=
        atomic_load_explicit(&f->fence_seq, memory_order_acquire))
        return NULL;
    return d + offset;
}

/* A CPU atomic on a mapped word: the old value (CSWAP: operand is the
 * compare value, reply_in the value swapped in). The same SEQ_CST atomics
 * UCX's shm transports and its software emulation at the target use, so all
 * three mix on one word. */
static inline bool direct_atomic(uint8_t *direct, ucp_atomic_op_t opcode, uint64_t operand, uint64_t reply_in,
                                 uint64_t *old)
{
    uint64_t *word = (uint64_t *)(void *)direct;
    bool known = true;
    DSM_FABRIC_TSAN_MAPPED_ATOMIC(word, 0);
    switch (opcode) {
    case UCP_ATOMIC_OP_ADD:
        *old = __atomic_fetch_add(word, operand, __ATOMIC_SEQ_CST);
        break;
    case UCP_ATOMIC_OP_SWAP:
        *old = __atomic_exchange_n(word, operand, __ATOMIC_SEQ_CST);
        break;
    case UCP_ATOMIC_OP_CSWAP: {
        uint64_t expected = operand;
        __atomic_compare_exchange_n(word, &expected, reply_in, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        *old = expected;   /* the old value, whether or not it was swapped */
        break;
    }
    default:
        known = false;
    }
    DSM_FABRIC_TSAN_MAPPED_ATOMIC(word, 1);
    return known;
}

/* Hands a resolved operation to the emulation (the peer reference is not
 * needed: the send takes its own and a peer failing meanwhile fails it). */
static inline dsm_status_t emulate(dsm_fabric_t *f, dsm_peer_t *peer, uint8_t opcode, uint64_t addr,
                                   uint64_t len, uint64_t operand, uint64_t operand2, void *dst,
                                   const void *src, dsm_op_t *op)
{
    uint32_t rank = peer->rank;
    dsm_fabric_peer_release(peer);
    return dsm_fabric_emu_start(f, rank, opcode, addr, len, operand, operand2, dst, src, op);
}

/* Whether a direct access to `peer` may go ahead now. A direct access is
 * performed when it is issued, so after a fence it must not overtake UCX
 * operations issued before the fence that are still in flight (atomics on
 * registered memory, emulated through the target's progress): the first
 * direct access after a fence flushes the endpoint. Where this thread cannot
 * wait (inside a handler) it takes the UCX path, which orders itself. */
static inline bool direct_ready(dsm_fabric_t *f, dsm_peer_t *peer, dsm_status_t *err)
{
    uint64_t seq = atomic_load_explicit(&f->fence_seq, memory_order_acquire);
    if (atomic_load_explicit(&peer->fence_seen, memory_order_relaxed) == seq)
        return true;
    dsm_status_t st;
    if (f->emulate_rma) {
        /* what is in flight to this peer is emulated: its replies order it */
        if (dsm_fabric_emu_outstanding(f, peer->rank)) {
            if (dsm_fabric_handler_depth > 0)
                return false;
            st = dsm_fabric_emu_quiesce(f, peer->rank);
        } else {
            st = DSM_OK;
        }
    } else {
        if (dsm_fabric_handler_depth > 0)
            return false;
        st = flush_blocking(f, peer->rank);
    }
    if (st != DSM_OK) {
        *err = st;
        return false;
    }
    atomic_store_explicit(&peer->fence_seen, seq, memory_order_relaxed);
    return true;
}

/* A direct access completed: the op is done, with `status`. */
static inline dsm_status_t direct_done(dsm_op_t *op, dsm_peer_t *peer, dsm_status_t status)
{
    dsm_fabric_peer_release(peer);
    dsm_fabric_op_finish(op, status);
    return status;
}

static inline dsm_status_t fail_early(dsm_op_t *op, dsm_status_t st)
{
    dsm_fabric_op_finish(op, st);
    return st;
}

static inline ucp_request_param_t op_param(dsm_op_t *op)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = dsm_fabric_op_complete_cb,
        .user_data = op,
    };
    return p;
}

/* A direct write: placed now, under chaos maybe in pieces. */
static inline void direct_write(dsm_fabric_t *f, uint8_t *d, const void *local, size_t len)
{
    if (__builtin_expect(f->chaos == NULL, 1))
        memcpy(d, local, len);
    else
        dsm_fabric_chaos_copy(f, d, local, len);
}

/* Chaos: a write that is valid now may complete before it is placed (the
 * releaser places it later, in order with what follows on its connection);
 * a read first lets the writes before it on its connection land. True if
 * the op was taken (completed, or failed on a bad address). */
static bool chaos_transfer(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset, void *local, size_t len,
                           bool put, dsm_op_t *op)
{
    if (!put) {
        dsm_fabric_chaos_order(f, rank);
        return false;
    }
    dsm_peer_t *peer;
    uint64_t addr;
    ucp_rkey_h rkey;
    uint8_t *direct;
    dsm_status_t st = resolve(f, rank, region, offset, len, false, &peer, &addr, &rkey, &direct);
    if (st != DSM_OK) {
        fail_early(op, st);
        return true;
    }
    dsm_fabric_peer_release(peer);
    /* a write chaos queues for rank comes after the requests this thread
     * deferred, as a send does */
    bool flush_after = dsm_fabric_defer_flush_first(f);
    bool taken = len != 0 && dsm_fabric_chaos_put(f, rank, region, offset, local, len);
    if (flush_after)
        dsm_fabric_defer_flush(f);
    if (!taken)
        return false;
    DSM_COUNT(f, puts, 1);
    DSM_COUNT(f, bytes_written, len);
    fail_early(op, DSM_OK);
    return true;
}

/* get and put: the same path with the direction flipped. `local` is the
 * destination of a get and the source of a put. */
static dsm_status_t transfer_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                                void *local, size_t len, bool put, dsm_op_t *op)
{
    if (f == NULL || op == NULL || (local == NULL && len != 0))
        return DSM_ERR_INVALID;
    dsm_fabric_op_init(op, f, rank);
    if (f->chaos && chaos_transfer(f, rank, region, offset, local, len, put, op))
        return op->status;
    unsigned slot = dsm_fabric_direct_enter(f);
    if (slot) {
        uint8_t *d = direct_at(f, rank, region, offset, len, false);
        if (d) {
            if (put) {
                DSM_COUNT(f, puts, 1);
                DSM_COUNT(f, bytes_written, len);
                direct_write(f, d, local, len);
            } else {
                DSM_COUNT(f, gets, 1);
                DSM_COUNT(f, bytes_read, len);
                memcpy(local, d, len);
            }
            dsm_fabric_direct_exit(f, slot);
            return fail_early(op, DSM_OK);
        }
        dsm_fabric_direct_exit(f, slot);
    }
    /* The regular path: UCX, the emulation, or a direct access under a
     * reference on the peer (a fence to order first; a thread without a slot). */
    dsm_peer_t *peer;
    uint64_t addr;
    ucp_rkey_h rkey;
    uint8_t *direct;
    dsm_status_t st = resolve(f, rank, region, offset, len, false, &peer, &addr, &rkey, &direct);
    if (st != DSM_OK)
        return fail_early(op, st);
    if (put) {
        DSM_COUNT(f, puts, 1);
        DSM_COUNT(f, bytes_written, len);
    } else {
        DSM_COUNT(f, gets, 1);
        DSM_COUNT(f, bytes_read, len);
    }
    if (len == 0) {
        dsm_fabric_peer_release(peer);
        return fail_early(op, DSM_OK);
    }
    if (direct && direct_ready(f, peer, &st)) {
        if (put)
            direct_write(f, direct, local, len);
        else
            memcpy(local, direct, len);
        return direct_done(op, peer, DSM_OK);
    }
    if (st != DSM_OK)
        return direct_done(op, peer, st);
    if (f->emulate_rma)
        return put ? emulate(f, peer, DSM_RMA_PUT, addr, len, 0, 0, NULL, local, op)
                   : emulate(f, peer, DSM_RMA_GET, addr, len, 0, 0, local, NULL, op);
    ucp_request_param_t p = op_param(op);
    ucp_ep_h ep = route(f, peer, region, &rkey);
    ucs_status_ptr_t sp = put ? ucp_put_nbx(ep, local, len, addr, rkey, &p)
                              : ucp_get_nbx(ep, local, len, addr, rkey, &p);
    dsm_fabric_peer_release(peer);
    return dsm_fabric_op_submitted(op, sp);
}

dsm_status_t dsm_fabric_get_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                               void *dst, size_t len, dsm_op_t *op)
{
    return transfer_nb(f, rank, region, offset, dst, len, false, op);
}

dsm_status_t dsm_fabric_put_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                               const void *src, size_t len, dsm_op_t *op)
{
    /* A put only reads `src`: the cast serves the shared path. */
    return transfer_nb(f, rank, region, offset, (void *)(uintptr_t)src, len, true, op);
}

/* UCX reads the operand (and for CSWAP the swap value in the reply buffer)
 * lazily, possibly after this call returns, so both live in the op. */
static dsm_status_t atomic_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                              ucp_atomic_op_t opcode, uint64_t operand, uint64_t reply_in,
                              dsm_op_t *op)
{
    if (f == NULL || op == NULL)
        return DSM_ERR_INVALID;
    dsm_fabric_op_init(op, f, rank);
    op->operand = operand;
    op->result = reply_in;
    if (f->chaos)
        dsm_fabric_chaos_order(f, rank);   /* after the writes before it on its connection */
    unsigned slot = dsm_fabric_direct_enter(f);
    if (slot) {
        uint8_t *d = direct_at(f, rank, region, offset, sizeof(uint64_t), true);
        if (d) {
            bool known = direct_atomic(d, opcode, operand, reply_in, &op->result);
            dsm_fabric_direct_exit(f, slot);
            if (known)
                DSM_COUNT(f, atomics, 1);
            return fail_early(op, known ? DSM_OK : DSM_ERR_INVALID);
        }
        dsm_fabric_direct_exit(f, slot);
    }
    dsm_peer_t *peer;
    uint64_t addr;
    ucp_rkey_h rkey;
    uint8_t *direct;
    dsm_status_t st = resolve(f, rank, region, offset, sizeof(uint64_t), true, &peer, &addr, &rkey, &direct);
    if (st != DSM_OK)
        return fail_early(op, st);
    DSM_COUNT(f, atomics, 1);
    if (direct && direct_ready(f, peer, &st))
        return direct_done(op, peer, direct_atomic(direct, opcode, operand, reply_in, &op->result)
                                         ? DSM_OK : DSM_ERR_INVALID);
    if (st != DSM_OK)
        return direct_done(op, peer, st);
    if (f->emulate_rma) {
        uint8_t code = opcode == UCP_ATOMIC_OP_ADD ? DSM_RMA_FADD
                     : opcode == UCP_ATOMIC_OP_SWAP ? DSM_RMA_SWAP : DSM_RMA_CAS;
        /* CSWAP: operand is the compare value, reply_in the value swapped in */
        return emulate(f, peer, code, addr, sizeof(uint64_t), operand,
                       code == DSM_RMA_CAS ? reply_in : 0, NULL, NULL, op);
    }
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER,
        .cb.send = dsm_fabric_op_complete_cb,
        .user_data = op,
        .datatype = ucp_dt_make_contig(sizeof(uint64_t)),
        .reply_buffer = &op->result,
    };
    ucp_ep_h ep = route(f, peer, region, &rkey);
    ucs_status_ptr_t sp = ucp_atomic_op_nbx(ep, opcode, &op->operand, 1, addr, rkey, &p);
    dsm_fabric_peer_release(peer);
    return dsm_fabric_op_submitted(op, sp);
}

dsm_status_t dsm_fabric_fetch_add_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                                     uint64_t value, dsm_op_t *op)
{
    return atomic_nb(f, rank, region, offset, UCP_ATOMIC_OP_ADD, value, 0, op);
}

dsm_status_t dsm_fabric_cas_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                               uint64_t expected, uint64_t desired, dsm_op_t *op)
{
    /* UCX CSWAP: the operand is the compare value, the reply buffer carries
     * the swap value in and the old value out. */
    return atomic_nb(f, rank, region, offset, UCP_ATOMIC_OP_CSWAP, expected, desired, op);
}

dsm_status_t dsm_fabric_swap_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                                uint64_t value, dsm_op_t *op)
{
    return atomic_nb(f, rank, region, offset, UCP_ATOMIC_OP_SWAP, value, 0, op);
}

/* ------------------------------------------------- mappings for layers above */

uint8_t *dsm_fabric_remote_map(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t *len)
{
    if (f == NULL || region >= DSM_FABRIC_MAX_REGIONS || rank >= DSM_FABRIC_MAX_PEERS)
        return NULL;
    dsm_remote_region_t *rr = &f->peers[rank].regions[region];
    unsigned slot = dsm_fabric_direct_enter(f);
    if (slot && direct_at(f, rank, region, 0, 0, false)) {
        if (len)
            *len = rr->length;
        return rr->direct;   /* held by the entry until dsm_fabric_remote_unmap */
    }
    if (slot)
        dsm_fabric_direct_exit(f, slot);
    /* Not mapped, not alive, or a fence to order first: under a reference. */
    dsm_peer_t *peer;
    if (dsm_fabric_peer_acquire(f, rank, &peer) != DSM_OK)
        return NULL;
    dsm_status_t st = DSM_OK;
    uint8_t *d = atomic_load_explicit(&rr->valid, memory_order_acquire) ? rr->direct : NULL;
    if (d == NULL || !direct_ready(f, peer, &st)) {
        dsm_fabric_peer_release(peer);
        return NULL;
    }
    if (len)
        *len = rr->length;
    if (slot) {
        /* hand the hold over to an entry: marked before the reference goes,
         * so an endpoint close (which waits for both) cannot slip between */
        dsm_fabric_direct_enter(f);
        dsm_fabric_peer_release(peer);
    }
    return d;
}


/* (inline: it is half the work of an unmap) */
static inline __attribute__((always_inline)) void count_ops(dsm_fabric_t *f, dsm_count_kind_t kind, uint64_t n, uint64_t bytes)
{
    switch (kind) {
    case DSM_COUNT_GET:
        DSM_COUNT(f, gets, n);
        DSM_COUNT(f, bytes_read, bytes);
        break;
    case DSM_COUNT_PUT:
        DSM_COUNT(f, puts, n);
        DSM_COUNT(f, bytes_written, bytes);
        break;
    default:
        DSM_COUNT(f, atomics, n);
        break;
    }
}

void dsm_fabric_remote_unmap(dsm_fabric_t *f, uint32_t rank, dsm_count_kind_t kind, uint64_t n, uint64_t bytes)
{
    if (f == NULL || rank >= DSM_FABRIC_MAX_PEERS)
        return;
    if (n)
        count_ops(f, kind, n, bytes);
    unsigned slot = dsm_tslot_cur;   /* taken by the map */
    if (slot >= 1 && slot <= DSM_TSLOTS)
        dsm_fabric_direct_exit(f, slot);
    else
        dsm_fabric_peer_release(&f->peers[rank]);
}

void dsm_fabric_count_ops(dsm_fabric_t *f, dsm_count_kind_t kind, uint64_t n, uint64_t bytes)
{
    if (f != NULL)
        count_ops(f, kind, n, bytes);
}

/* ------------------------------------------------------------------ blocking */

/* A blocking call progresses the worker, which UCX forbids inside its own
 * callbacks, i.e. inside an AM handler: refuse instead of deadlocking. */
#define NOT_IN_HANDLER() \
    do { if (dsm_fabric_handler_depth > 0) return DSM_ERR_STATE; } while (0)

static inline dsm_status_t finish_blocking(dsm_op_t *op, dsm_status_t submitted)
{
    if (submitted != DSM_OK)
        return submitted;
    return dsm_fabric_wait_op(op, 0);   /* also releases the request */
}

dsm_status_t dsm_fabric_get(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                            void *dst, size_t len)
{
    dsm_op_t op;
    NOT_IN_HANDLER();
    return finish_blocking(&op, dsm_fabric_get_nb(f, rank, region, offset, dst, len, &op));
}

dsm_status_t dsm_fabric_put(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                            const void *src, size_t len)
{
    dsm_op_t op;
    NOT_IN_HANDLER();
    return finish_blocking(&op, dsm_fabric_put_nb(f, rank, region, offset, src, len, &op));
}

static inline dsm_status_t atomic_blocking(dsm_op_t *op, dsm_status_t submitted, uint64_t *old)
{
    dsm_status_t st = finish_blocking(op, submitted);
    if (st == DSM_OK && old)
        *old = op->result;
    return st;
}

dsm_status_t dsm_fabric_fetch_add(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                                  uint64_t value, uint64_t *old)
{
    dsm_op_t op;
    NOT_IN_HANDLER();
    return atomic_blocking(&op, dsm_fabric_fetch_add_nb(f, rank, region, offset, value, &op), old);
}

dsm_status_t dsm_fabric_cas(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                            uint64_t expected, uint64_t desired, uint64_t *old)
{
    dsm_op_t op;
    NOT_IN_HANDLER();
    return atomic_blocking(&op, dsm_fabric_cas_nb(f, rank, region, offset, expected, desired, &op), old);
}

dsm_status_t dsm_fabric_swap(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                             uint64_t value, uint64_t *old)
{
    dsm_op_t op;
    NOT_IN_HANDLER();
    return atomic_blocking(&op, dsm_fabric_swap_nb(f, rank, region, offset, value, &op), old);
}

/* ------------------------------------------------------------ fence / flush */

/* UCX only fences a whole worker, so a per-peer fence is the worker fence:
 * stronger than asked (it orders operations to every peer), never weaker. */
/* Emulated (tcp): an operation is performed at the target before its reply,
 * so waiting for the replies of everything issued before the fence orders it
 * (a put, rendezvous-sized or not, is acked only after its memcpy). Stronger
 * than a fence needs to be, and a wait: from inside a handler it is refused
 * if anything is still outstanding. */
static dsm_status_t emu_fence(dsm_fabric_t *f, uint32_t rank)
{
    atomic_fetch_add_explicit(&f->fence_seq, 1, memory_order_release);
    if (!dsm_fabric_emu_outstanding(f, rank))
        return DSM_OK;
    if (dsm_fabric_handler_depth > 0)
        return DSM_ERR_STATE;
    return dsm_fabric_emu_quiesce(f, rank);
}

dsm_status_t dsm_fabric_fence(dsm_fabric_t *f, uint32_t rank)
{
    if (f == NULL)
        return DSM_ERR_INVALID;
    dsm_peer_t *peer;
    dsm_status_t st = dsm_fabric_peer_acquire(f, rank, &peer);
    if (st != DSM_OK)
        return st;
    if (f->emulate_rma) {
        dsm_fabric_peer_release(peer);
        return emu_fence(f, rank);
    }
    atomic_fetch_add_explicit(&f->fence_seq, 1, memory_order_release);
    ucs_status_t us = ucp_worker_fence(f->worker);
    dsm_fabric_peer_release(peer);
    return dsm_fabric_status_from_ucs(us);
}

dsm_status_t dsm_fabric_fence_all(dsm_fabric_t *f)
{
    if (f == NULL)
        return DSM_ERR_INVALID;
    if (f->emulate_rma)
        return emu_fence(f, DSM_FABRIC_MAX_PEERS);
    atomic_fetch_add_explicit(&f->fence_seq, 1, memory_order_release);
    return dsm_fabric_status_from_ucs(ucp_worker_fence(f->worker));
}

/* Flushes the shared endpoint to rank, or `lane`'s own, opened first if it
 * has none to the peer's incarnation (DSM_ERR_NO_PEER if the shared one
 * serves the lane: nothing to flush). A new endpoint's flush completes once
 * its wire-up has. */
static dsm_status_t flush_nb(dsm_fabric_t *f, uint32_t rank, dsm_lane_t *lane, dsm_op_t *op)
{
    dsm_fabric_op_init(op, f, rank);
    dsm_peer_t *peer;
    dsm_status_t st = dsm_fabric_peer_acquire(f, rank, &peer);
    if (st != DSM_OK)
        return fail_early(op, st);
    ucp_ep_h ep = lane ? dsm_fabric_lane_own_ep(lane, peer) : peer->ep;
    if (ep == NULL) {
        dsm_fabric_peer_release(peer);
        return fail_early(op, DSM_ERR_NO_PEER);
    }
    ucp_request_param_t p = op_param(op);
    ucs_status_ptr_t sp = ucp_ep_flush_nbx(ep, &p);
    dsm_fabric_peer_release(peer);
    return dsm_fabric_op_submitted(op, sp);
}

/* The calling thread's own endpoint to rank first, if it has one, then the shared one. */
static dsm_status_t flush_blocking(dsm_fabric_t *f, uint32_t rank)
{
    dsm_op_t op;
    if (dsm_fabric_lane_open_ep(f, rank) != NULL) {
        dsm_status_t st = finish_blocking(&op, flush_nb(f, rank, dsm_fabric_lane_of(f), &op));
        if (st != DSM_OK && st != DSM_ERR_NO_PEER)
            return st;
    }
    return finish_blocking(&op, flush_nb(f, rank, NULL, &op));
}

dsm_status_t dsm_fabric_lane_connect(dsm_lane_t *lane, uint32_t rank)
{
    if (lane == NULL || rank >= DSM_FABRIC_MAX_PEERS)
        return DSM_ERR_INVALID;
    NOT_IN_HANDLER();
    dsm_op_t op;
    dsm_status_t st = finish_blocking(&op, flush_nb(lane->fabric, rank, lane, &op));
    /* no endpoint of its own: the shared one serves a live peer */
    return st == DSM_ERR_NO_PEER ? dsm_fabric_peer_state(lane->fabric, rank) : st;
}

dsm_status_t dsm_fabric_flush(dsm_fabric_t *f, uint32_t rank)
{
    if (f == NULL)
        return DSM_ERR_INVALID;
    NOT_IN_HANDLER();
    if (f->chaos)
        dsm_fabric_chaos_order(f, rank);
    if (f->emulate_rma) {
        /* every emulated op completes on its reply: wait for those issued
         * so far; a peer that died meanwhile may have lost writes */
        dsm_peer_t *peer;
        dsm_status_t st = dsm_fabric_peer_acquire(f, rank, &peer);
        if (st != DSM_OK) {
            DSM_COUNT(f, errors, 1);   /* as a failed flush op counts */
            return st;
        }
        dsm_fabric_peer_release(peer);
        st = dsm_fabric_emu_quiesce(f, rank);
        if (st == DSM_OK)
            st = dsm_fabric_peer_state(f, rank);
        return st;
    }
    return flush_blocking(f, rank);
}

/* Per-endpoint flushes rather than ucp_worker_flush_nbx, so that a peer that
 * stops answering is known by rank and can be failed on timeout. Dead peers
 * are skipped: nothing they had in flight can complete anyway. */
dsm_status_t dsm_fabric_flush_all(dsm_fabric_t *f)
{
    if (f == NULL)
        return DSM_ERR_INVALID;
    NOT_IN_HANDLER();
    if (f->chaos)
        dsm_fabric_chaos_order_all(f);
    if (f->emulate_rma) {
        /* as dsm_fabric_flush: peers dead before are skipped, one that dies
         * during the flush makes it fail */
        bool *alive = calloc(DSM_FABRIC_MAX_PEERS, sizeof *alive);
        if (alive == NULL)
            return DSM_ERR_NOMEM;
        for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++)
            alive[r] = atomic_load_explicit(&f->peers[r].state, memory_order_acquire) == DSM_PEER_ALIVE;
        dsm_status_t st = dsm_fabric_emu_quiesce(f, DSM_FABRIC_MAX_PEERS);
        for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS && st == DSM_OK; r++) {
            if (alive[r] && dsm_fabric_peer_state(f, r) == DSM_ERR_PEER_DEAD) {
                DSM_WARN(DSM_FABRIC_LOG, "flush rank %u: %s", r, dsm_strerror(DSM_ERR_PEER_DEAD));
                st = DSM_ERR_PEER_DEAD;
            }
        }
        free(alive);
        return st;
    }
    /* each peer's shared endpoint and the calling thread's own, if open */
    dsm_op_t *ops = malloc(sizeof(dsm_op_t) * 2 * DSM_FABRIC_MAX_PEERS);
    uint32_t *ranks = malloc(sizeof(uint32_t) * 2 * DSM_FABRIC_MAX_PEERS);
    if (ops == NULL || ranks == NULL) {
        free(ops);
        free(ranks);
        return DSM_ERR_NOMEM;
    }
    int n = 0;
    dsm_status_t ret = DSM_OK;
    for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++) {
        if (atomic_load_explicit(&f->peers[r].state, memory_order_acquire) != DSM_PEER_ALIVE)
            continue;
        for (int lane = 0; lane < 2; lane++) {
            if (lane && dsm_fabric_lane_open_ep(f, r) == NULL)
                continue;
            dsm_status_t st = flush_nb(f, r, lane ? dsm_fabric_lane_of(f) : NULL, &ops[n]);
            if (st == DSM_OK)
                ranks[n++] = r;
            else if (st != DSM_ERR_PEER_DEAD && st != DSM_ERR_NO_PEER && ret == DSM_OK)
                ret = st;   /* a peer that was dead before the flush is skipped */
        }
    }
    for (int i = 0; i < n; i++) {
        dsm_status_t st = dsm_fabric_wait_op(&ops[i], 0);
        if (st != DSM_OK && ret == DSM_OK) {   /* died during the flush: its writes may be lost */
            DSM_WARN(DSM_FABRIC_LOG, "flush rank %u: %s", ranks[i], dsm_strerror(st));
            ret = st;
        }
    }
    free(ops);
    free(ranks);
    return ret;
}
