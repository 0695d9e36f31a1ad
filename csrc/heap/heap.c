/* The heap's node glue: which partition and allocator belong to which node,
 * the peers' partitions learnt at join, the alloc/free/check active-message
 * handlers, and dsm_alloc/free/read/write/atomics by global address — direct
 * memory on this node, one-sided fabric operations on a peer's partition
 * region, always checked against the peer's partition size and block state
 * table before anything is touched. */
#include "dsm/heap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/fabric.h"
#include "heap/alloc.h"
#include "heap/ids.h"
#include "heap/msg.h"
#include "heap/partition.h"
#include "util/log.h"

#define LOG_MOD "heap"

typedef struct heap_node {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    dsm_heap_alloc_t *alloc;    /* NULL if the node serves no memory */
    dsm_heap_partition_t part;  /* memfd kept for compaction (aliasing blocks) */
    uint8_t *base;              /* part.base, part.size */
    uint64_t size;
    /* Each member's partition size (0: none or unknown), set by the join
     * hook on the control thread, read by every remote access. */
    uint64_t peer_size[DSM_MAX_RANKS];
} heap_node_t;

/* The heap state of a node lives in the node's DSM_HEAP_MODULE slot; the
 * runtime frees it (heap_node_free) after the fabric has stopped. */
static inline heap_node_t *lookup(dsm_node_t *node)
{
    return node ? dsm_node_module(node, DSM_HEAP_MODULE) : NULL;
}

/* Set once in attach, before join, hence before any peer or other thread
 * can reach it; read atomically anyway since handlers run on another thread. */
static inline dsm_heap_alloc_t *local_alloc(heap_node_t *h)
{
    return __atomic_load_n(&h->alloc, __ATOMIC_ACQUIRE);
}

static void heap_node_free(void *state)
{
    heap_node_t *h = state;
    if (h == NULL)
        return;
    dsm_heap_alloc_destroy(h->alloc);
    dsm_heap_partition_destroy(&h->part);
    free(h);
}

/* ---- active-message handlers (progress context) ------------------------- */

static void serve(heap_node_t *h, const dsm_am_msg_t *msg, uint16_t type)
{
    uint8_t rep[DSM_HEAP_MSG_MAX_LEN];
    size_t rep_len = 0;
    dsm_status_t st = dsm_heap_msg_serve(local_alloc(h), dsm_node_rank(h->node), type, msg->data, msg->len,
                                         rep, &rep_len);
    if (msg->request_id == 0) {
        /* Every heap message expects an answer; a plain one is a confused peer. */
        DSM_WARN(LOG_MOD, "heap message from rank %u without a request id dropped", msg->src_rank);
        return;
    }
    dsm_status_t rs = dsm_fabric_am_reply(h->fabric, msg->src_rank, msg->request_id, st, rep, rep_len);
    if (rs != DSM_OK)
        DSM_DEBUG(LOG_MOD, "reply to rank %u failed: %s", msg->src_rank, dsm_strerror(rs));
}

static void on_alloc(void *ctx, const dsm_am_msg_t *msg) { serve(ctx, msg, DSM_HEAP_MSG_ALLOC_REQ); }
static void on_free(void *ctx, const dsm_am_msg_t *msg) { serve(ctx, msg, DSM_HEAP_MSG_FREE_REQ); }
static void on_check(void *ctx, const dsm_am_msg_t *msg) { serve(ctx, msg, DSM_HEAP_MSG_CHECK_REQ); }

/* ---- attach ---------------------------------------------------------------- */

/* A member became reachable (this node included): map its partition as
 * region DSM_HEAP_REGION if it published one. */
static dsm_status_t on_peer_join(void *ctx, uint32_t rank)
{
    heap_node_t *h = ctx;
    uint8_t value[DSM_NODE_MAX_VALUE_BYTES];
    size_t len = 0;
    dsm_status_t st = dsm_node_peer_value(h->node, rank, DSM_HEAP_PUBLISH_KEY, value, sizeof value, &len);
    if (st != DSM_OK) {
        /* No partition there (a client, or a node without the heap). */
        __atomic_store_n(&h->peer_size[rank], 0, __ATOMIC_RELEASE);
        return DSM_OK;
    }
    dsm_heap_partition_info_t info;
    if (dsm_heap_partition_decode(value, len, &info) != DSM_OK) {
        DSM_WARN(LOG_MOD, "rank %u published a malformed partition", rank);
        return DSM_ERR_PROTO;
    }
    st = dsm_fabric_remote_region_add(h->fabric, rank, DSM_HEAP_REGION, info.base, info.size, info.key,
                                      info.key_len);
    if (st != DSM_OK)
        return st;
    __atomic_store_n(&h->peer_size[rank], info.size, __ATOMIC_RELEASE);
    return DSM_OK;
}

dsm_status_t dsm_heap_attach(dsm_node_t *node)
{
    if (node == NULL)
        return DSM_ERR_INVALID;
    dsm_fabric_t *fabric = dsm_node_fabric(node);
    const dsm_node_config_t *config = dsm_node_config(node);
    if (fabric == NULL)
        return DSM_ERR_STATE;
    uint64_t size = dsm_heap_partition_rounded(config->partition_size);
    if (size > 0 && (size < DSM_HEAP_MIN_PARTITION || size > DSM_HEAP_MAX_PARTITION)) {
        DSM_ERROR(LOG_MOD, "partition of %llu bytes: the heap needs %llu..%llu",
                  (unsigned long long)size, (unsigned long long)DSM_HEAP_MIN_PARTITION,
                  (unsigned long long)DSM_HEAP_MAX_PARTITION);
        return DSM_ERR_INVALID;
    }
    heap_node_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        return DSM_ERR_NOMEM;
    h->node = node;
    h->fabric = fabric;
    h->part.memfd = -1;

    /* Claim the node's heap slot first: a second attach (or one after join)
     * is refused there, before any partition is made or formatted. From here
     * on the node owns h and frees it (and its partition) in
     * dsm_node_destroy, whatever fails below. */
    dsm_status_t st = dsm_node_set_module(node, DSM_HEAP_MODULE, h, heap_node_free);
    if (st != DSM_OK) {
        DSM_ERROR(LOG_MOD, "cannot attach the heap: %s", dsm_strerror(st));
        free(h);
        return st;
    }
    if ((st = dsm_heap_partition_create(fabric, config->transport, size, &h->part)) != DSM_OK)
        return st;
    h->base = h->part.base;
    h->size = h->part.size;
    if (h->size > 0) {
        dsm_heap_alloc_t *a;
        st = dsm_heap_alloc_create(h->base, h->size, &a);
        if (st != DSM_OK) {
            DSM_ERROR(LOG_MOD, "cannot format the partition: %s", dsm_strerror(st));
            return st;
        }
        __atomic_store_n(&h->alloc, a, __ATOMIC_RELEASE);
    }
    if ((st = dsm_heap_partition_publish(&h->part, node)) != DSM_OK ||
        (st = dsm_node_on_peer_join(node, on_peer_join, h)) != DSM_OK) {
        DSM_ERROR(LOG_MOD, "cannot offer the partition to peers: %s", dsm_strerror(st));
        return st;
    }
    static const struct {
        uint16_t id;
        dsm_am_handler_t fn;
    } handlers[] = {{DSM_AM_HEAP_ALLOC, on_alloc}, {DSM_AM_HEAP_FREE, on_free}, {DSM_AM_HEAP_CHECK, on_check}};
    for (unsigned i = 0; i < 3; i++) {
        st = dsm_fabric_am_register(h->fabric, handlers[i].id, handlers[i].fn, h);
        if (st != DSM_OK) {
            DSM_ERROR(LOG_MOD, "cannot register heap handler %u: %s", handlers[i].id, dsm_strerror(st));
            return st;
        }
    }
    DSM_DEBUG(LOG_MOD, "heap attached: partition %llu bytes", (unsigned long long)h->size);
    return DSM_OK;
}

uint64_t dsm_heap_partition_size(dsm_node_t *node, uint32_t rank)
{
    heap_node_t *h = lookup(node);
    if (h == NULL || rank >= DSM_MAX_RANKS)
        return 0;
    return __atomic_load_n(&h->peer_size[rank], __ATOMIC_ACQUIRE);
}

void *dsm_heap_local_partition(dsm_node_t *node, uint64_t *size)
{
    heap_node_t *h = lookup(node);
    if (size)
        *size = h ? h->size : 0;
    return h ? h->base : NULL;
}

/* ---- helpers ---------------------------------------------------------------- */

/* Send one request and decode its reply, which must be of type `want`. */
static dsm_status_t request(heap_node_t *h, uint32_t rank, uint16_t handler, const dsm_heap_msg_t *req,
                            uint16_t want, dsm_heap_msg_t *rep)
{
    uint8_t out[DSM_HEAP_MSG_MAX_LEN], in[DSM_HEAP_MSG_MAX_LEN];
    size_t n = dsm_heap_msg_encode(req, out), in_len = 0;
    dsm_status_t st = dsm_fabric_am_request(h->fabric, rank, handler, out, n, in, sizeof in, &in_len, 0);
    if (st != DSM_OK)
        return st;
    if (in_len > sizeof in || dsm_heap_msg_decode(in, in_len, rep) != DSM_OK || rep->type != want) {
        DSM_WARN(LOG_MOD, "malformed heap reply from rank %u", rank);
        return DSM_ERR_PROTO;
    }
    return DSM_OK;
}

/* Where an access to a peer's partition may go: the peer must be a live
 * member and [off, off+len) inside its partition's blocks. Fills the range of
 * block indices whose state words guard the access. */
static dsm_status_t remote_bounds(heap_node_t *h, uint32_t rank, uint64_t off, uint64_t len,
                                  uint64_t *first, uint64_t *last)
{
    dsm_status_t st = dsm_fabric_peer_state(h->fabric, rank);
    if (st != DSM_OK)
        return st;
    uint64_t psize = rank < DSM_MAX_RANKS ? __atomic_load_n(&h->peer_size[rank], __ATOMIC_ACQUIRE) : 0;
    if (psize == 0 || off >= psize || len > psize - off)
        return DSM_ERR_BAD_ADDR;
    *first = off >> DSM_HEAP_BLOCK_SHIFT;
    *last = len ? (off + len - 1) >> DSM_HEAP_BLOCK_SHIFT : *first;
    /* Header blocks (offset 0 included) and the unused tail are never heap;
     * refuse them without a round trip (their state words would say so too). */
    uint64_t nblocks = dsm_heap_nblocks(psize);
    if (*last >= nblocks || *first < dsm_heap_first_block(nblocks))
        return DSM_ERR_BAD_ADDR;
    return DSM_OK;
}

static int states_live(const uint64_t *w, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (!dsm_heap_blk_live(w[i]))
            return 0;
    return 1;
}

/* A buffer for n state words: on the stack for the common small access. */
typedef struct state_buf {
    uint64_t small[8];
    uint64_t *w;
} state_buf_t;

static dsm_status_t state_buf_init(state_buf_t *b, uint64_t n)
{
    if (n <= 8) {
        b->w = b->small;
        return DSM_OK;
    }
    b->w = malloc((size_t)n * sizeof(uint64_t));
    return b->w ? DSM_OK : DSM_ERR_NOMEM;
}
static void state_buf_done(state_buf_t *b)
{
    if (b->w != b->small)
        free(b->w);
}

/* Check a peer's blocks before a write or an atomic (one blocking get). */

/* Everything a by-address operation needs to know about its target. */
typedef struct target {
    heap_node_t *h;
    uint32_t rank;
    uint64_t off;
    int local;
    uint8_t *ptr;       /* local only */
    uint64_t first, last;
} target_t;

static dsm_status_t resolve(dsm_node_t *node, dsm_gaddr_t addr, uint64_t len, target_t *t)
{
    t->h = lookup(node);
    if (t->h == NULL)
        return DSM_ERR_STATE;
    dsm_gaddr_t a = dsm_gaddr_strip(addr);
    t->rank = dsm_gaddr_node(a);
    t->off = dsm_gaddr_offset(a);
    t->local = t->rank == dsm_node_rank(node);
    if (t->local) {
        dsm_heap_alloc_t *al = local_alloc(t->h);
        if (al == NULL || dsm_heap_check_range(al, t->off, len) != DSM_OK)
            return DSM_ERR_BAD_ADDR;
        t->ptr = t->h->base + t->off;
        return DSM_OK;
    }
    return remote_bounds(t->h, t->rank, t->off, len, &t->first, &t->last);
}

/* ---- allocation ----------------------------------------------------------- */

dsm_status_t dsm_alloc(dsm_node_t *node, uint32_t rank, size_t size, dsm_gaddr_t *out)
{
    heap_node_t *h = lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    *out = 0;
    if (h == NULL)
        return DSM_ERR_STATE;
    uint32_t self = dsm_node_rank(node);
    if (rank == self) {
        dsm_heap_alloc_t *a = local_alloc(h);
        if (a == NULL)
            return DSM_ERR_NOMEM;
        uint64_t off;
        dsm_status_t st = dsm_heap_alloc(a, size, &off);
        if (st == DSM_OK)
            *out = dsm_gaddr_make(self, off);
        return st;
    }
    if (rank >= DSM_MAX_RANKS)
        return DSM_ERR_NO_PEER;
    dsm_status_t st = dsm_fabric_peer_state(h->fabric, rank);
    if (st != DSM_OK)
        return st;
    if ((uint64_t)size > DSM_HEAP_MAX_PARTITION)
        return DSM_ERR_NOMEM;
    dsm_heap_msg_t req = {.type = DSM_HEAP_MSG_ALLOC_REQ, .size = size}, rep;
    st = request(h, rank, DSM_AM_HEAP_ALLOC, &req, DSM_HEAP_MSG_ALLOC_REP, &rep);
    if (st != DSM_OK)
        return st;
    if (dsm_gaddr_node(rep.gaddr) != rank || rep.size < size) {
        DSM_WARN(LOG_MOD, "rank %u answered an alloc with a wrong address", rank);
        return DSM_ERR_PROTO;
    }
    *out = rep.gaddr;
    return DSM_OK;
}

dsm_status_t dsm_free(dsm_node_t *node, dsm_gaddr_t addr)
{
    heap_node_t *h = lookup(node);
    if (h == NULL)
        return DSM_ERR_STATE;
    dsm_gaddr_t a = dsm_gaddr_strip(addr);
    if (a == 0)
        return DSM_OK;   /* like free(NULL) */
    uint32_t rank = dsm_gaddr_node(a);
    if (rank == dsm_node_rank(node)) {
        dsm_heap_alloc_t *al = local_alloc(h);
        if (al == NULL)
            return DSM_ERR_BAD_ADDR;
        return dsm_heap_free(al, dsm_gaddr_offset(a));
    }
    dsm_status_t st = dsm_fabric_peer_state(h->fabric, rank);
    if (st != DSM_OK)
        return st;
    if (dsm_gaddr_offset(a) == 0)
        return DSM_ERR_BAD_ADDR;
    dsm_heap_msg_t req = {.type = DSM_HEAP_MSG_FREE_REQ, .gaddr = a}, rep;
    return request(h, rank, DSM_AM_HEAP_FREE, &req, DSM_HEAP_MSG_FREE_REP, &rep);
}

dsm_status_t dsm_alloc_size(dsm_node_t *node, dsm_gaddr_t addr, size_t *size)
{
    heap_node_t *h = lookup(node);
    if (size == NULL)
        return DSM_ERR_INVALID;
    if (h == NULL)
        return DSM_ERR_STATE;
    dsm_gaddr_t a = dsm_gaddr_strip(addr);
    uint32_t rank = dsm_gaddr_node(a);
    if (rank == dsm_node_rank(node)) {
        dsm_heap_alloc_t *al = local_alloc(h);
        return al ? dsm_heap_usable(al, dsm_gaddr_offset(a), size) : DSM_ERR_BAD_ADDR;
    }
    dsm_status_t st = dsm_fabric_peer_state(h->fabric, rank);
    if (st != DSM_OK)
        return st;
    if (dsm_gaddr_offset(a) == 0)
        return DSM_ERR_BAD_ADDR;
    dsm_heap_msg_t req = {.type = DSM_HEAP_MSG_CHECK_REQ, .gaddr = a}, rep;
    st = request(h, rank, DSM_AM_HEAP_CHECK, &req, DSM_HEAP_MSG_CHECK_REP, &rep);
    if (st == DSM_OK)
        *size = (size_t)rep.size;
    return st;
}

/* ---- reads, writes, atomics ------------------------------------------------ */

/* A remote data operation travels with the read of its blocks' state words:
 * both are issued before either is waited for (one round trip, not two), and
 * a block found free turns the result into DSM_ERR_BAD_ADDR. An access racing
 * a free may so have touched free memory: harmless, since the allocator keeps
 * its metadata in process memory, and the caller is told. (Checking first
 * would not be safer: the block could be freed and reused in between.) */
typedef dsm_status_t (*data_op_t)(const target_t *t, void *arg, dsm_op_t *op);

static dsm_status_t checked_remote(const target_t *t, data_op_t issue, void *arg, dsm_op_t *dop, int flush)
{
    state_buf_t sb;
    uint64_t n = t->last - t->first + 1;
    dsm_status_t st = state_buf_init(&sb, n);
    if (st != DSM_OK)
        return st;
    dsm_op_t sop;
    memset(&sop, 0, sizeof sop);
    memset(dop, 0, sizeof *dop);
    dsm_status_t s1 = dsm_fabric_get_nb(t->h->fabric, t->rank, DSM_HEAP_REGION, dsm_heap_state_off(t->first),
                                        sb.w, (size_t)n * sizeof(uint64_t), &sop);
    dsm_status_t s2 = s1 == DSM_OK ? issue(t, arg, dop) : s1;
    /* A put completes when its source may be reused, not when the target
     * holds the data: the flush makes a write return only once the bytes are
     * in the target's memory, so any node that reads afterwards sees them. */
    dsm_status_t s3 = s2 == DSM_OK && flush ? dsm_fabric_flush(t->h->fabric, t->rank) : DSM_OK;
    /* Each issued operation is waited for, whatever happened to the other:
     * the handles live on this stack. */
    if (s1 == DSM_OK)
        s1 = dsm_fabric_wait(&sop);
    if (s2 == DSM_OK)
        s2 = dsm_fabric_wait(dop);
    st = s1 != DSM_OK ? s1 : s2 != DSM_OK ? s2 : s3;
    if (st == DSM_OK && !states_live(sb.w, n))
        st = DSM_ERR_BAD_ADDR;
    state_buf_done(&sb);
    return st;
}

typedef struct bytes_arg {
    void *dst;
    const void *src;
    size_t len;
} bytes_arg_t;

static dsm_status_t issue_get(const target_t *t, void *arg, dsm_op_t *op)
{
    bytes_arg_t *b = arg;
    return dsm_fabric_get_nb(t->h->fabric, t->rank, DSM_HEAP_REGION, t->off, b->dst, b->len, op);
}

static dsm_status_t issue_put(const target_t *t, void *arg, dsm_op_t *op)
{
    bytes_arg_t *b = arg;
    return dsm_fabric_put_nb(t->h->fabric, t->rank, DSM_HEAP_REGION, t->off, b->src, b->len, op);
}

dsm_status_t dsm_read(dsm_node_t *node, dsm_gaddr_t addr, void *dst, size_t len)
{
    if (dst == NULL && len > 0)
        return DSM_ERR_INVALID;
    target_t t;
    dsm_status_t st = resolve(node, addr, len, &t);
    if (st != DSM_OK || len == 0)
        return st;
    if (t.local) {
        memcpy(dst, t.ptr, len);
        return DSM_OK;
    }
    /* dst may hold whatever freed memory held when this fails. */
    bytes_arg_t b = {.dst = dst, .len = len};
    dsm_op_t op;
    return checked_remote(&t, issue_get, &b, &op, 0);
}

dsm_status_t dsm_write(dsm_node_t *node, dsm_gaddr_t addr, const void *src, size_t len)
{
    if (src == NULL && len > 0)
        return DSM_ERR_INVALID;
    target_t t;
    dsm_status_t st = resolve(node, addr, len, &t);
    if (st != DSM_OK || len == 0)
        return st;
    if (t.local) {
        memcpy(t.ptr, src, len);
        return DSM_OK;
    }
    bytes_arg_t b = {.src = src, .len = len};
    dsm_op_t op;
    return checked_remote(&t, issue_put, &b, &op, 1);
}

enum { ATOMIC_ADD, ATOMIC_CAS, ATOMIC_SWAP };

typedef struct atomic_arg {
    int kind;
    uint64_t v1, v2;
} atomic_arg_t;

static dsm_status_t issue_atomic(const target_t *t, void *arg, dsm_op_t *op)
{
    atomic_arg_t *a = arg;
    dsm_fabric_t *f = t->h->fabric;
    switch (a->kind) {
    case ATOMIC_ADD: return dsm_fabric_fetch_add_nb(f, t->rank, DSM_HEAP_REGION, t->off, a->v1, op);
    case ATOMIC_CAS: return dsm_fabric_cas_nb(f, t->rank, DSM_HEAP_REGION, t->off, a->v1, a->v2, op);
    default: return dsm_fabric_swap_nb(f, t->rank, DSM_HEAP_REGION, t->off, a->v1, op);
    }
}

static dsm_status_t atomic_op(dsm_node_t *node, dsm_gaddr_t addr, int kind, uint64_t v1, uint64_t v2,
                              uint64_t *old)
{
    if (dsm_gaddr_offset(addr) & 7)
        return DSM_ERR_INVALID;   /* a caller's mistake, not a bad address */
    target_t t;
    dsm_status_t st = resolve(node, addr, 8, &t);
    if (st != DSM_OK)
        return st;
    uint64_t prev = 0;
    if (t.local) {
        uint64_t *p = (uint64_t *)(void *)t.ptr;
        switch (kind) {
        case ATOMIC_ADD: prev = __atomic_fetch_add(p, v1, __ATOMIC_SEQ_CST); break;
        case ATOMIC_CAS:
            prev = v1;
            __atomic_compare_exchange_n(p, &prev, v2, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            break;
        default: prev = __atomic_exchange_n(p, v1, __ATOMIC_SEQ_CST); break;
        }
    } else {
        atomic_arg_t a = {.kind = kind, .v1 = v1, .v2 = v2};
        dsm_op_t op;
        if ((st = checked_remote(&t, issue_atomic, &a, &op, 0)) != DSM_OK)
            return st;
        prev = op.result;
    }
    if (old)
        *old = prev;
    return DSM_OK;
}

/* ---- batches ---------------------------------------------------------------- */

/* One element of a batch in flight: its target, its state words and the two
 * operations (state get, data op) that checked_remote would issue for it. */
typedef struct batch_slot {
    target_t t;
    state_buf_t sb;
    dsm_op_t sop, dop;
    int sb_ready, state_issued, op_issued;
    dsm_status_t st;
    /* The slot whose state read covers this one's blocks: itself, or an
     * earlier slot of the window on the same rank and blocks (one read per
     * run of elements in the same blocks, e.g. many adds to one counter). */
    struct batch_slot *state_owner;
    dsm_status_t state_st;   /* owner: its state read's status */
    int live;                /* owner: its blocks were live */
} batch_slot_t;

enum { BATCH_WINDOW = 256, BATCH_READ, BATCH_WRITE, BATCH_FADD };

typedef struct batch {
    dsm_node_t *node;
    int kind;
    const dsm_gaddr_t *addrs;
    size_t elem_len;
    uint8_t *dst;
    const uint8_t *src;
    const uint64_t *values;
    uint64_t *olds;
} batch_t;

/* Element i: done at once when local; else its data operation issued, with
 * a read of its blocks' states unless `prev` (the window's last slot that
 * read states) covers the same blocks: the read is issued in the same window
 * as the operations it guards, like checked_remote's. */
static void batch_issue(const batch_t *b, size_t i, batch_slot_t *s, batch_slot_t *prev)
{
    memset(s, 0, sizeof *s);
    uint64_t len = b->kind == BATCH_FADD ? 8 : b->elem_len;
    if (b->kind == BATCH_FADD && (dsm_gaddr_offset(b->addrs[i]) & 7)) {
        s->st = DSM_ERR_INVALID;
        return;
    }
    if ((s->st = resolve(b->node, b->addrs[i], len, &s->t)) != DSM_OK || len == 0)
        return;
    if (s->t.local) {
        switch (b->kind) {
        case BATCH_READ: memcpy(b->dst + i * b->elem_len, s->t.ptr, len); break;
        case BATCH_WRITE: memcpy(s->t.ptr, b->src + i * b->elem_len, len); break;
        default: {
            uint64_t old = __atomic_fetch_add((uint64_t *)(void *)s->t.ptr, b->values[i], __ATOMIC_SEQ_CST);
            if (b->olds) b->olds[i] = old;
        }
        }
        return;
    }
    dsm_fabric_t *f = s->t.h->fabric;
    if (prev && prev->t.rank == s->t.rank && prev->t.first == s->t.first && prev->t.last == s->t.last) {
        s->state_owner = prev;
    } else {
        uint64_t words = s->t.last - s->t.first + 1;
        if ((s->st = state_buf_init(&s->sb, words)) != DSM_OK)
            return;
        s->sb_ready = 1;
        s->st = dsm_fabric_get_nb(f, s->t.rank, DSM_HEAP_REGION, dsm_heap_state_off(s->t.first), s->sb.w,
                                  (size_t)words * sizeof(uint64_t), &s->sop);
        s->state_issued = s->st == DSM_OK;
        if (s->st != DSM_OK)
            return;
        s->state_owner = s;
    }
    switch (b->kind) {
    case BATCH_READ:
        s->st = dsm_fabric_get_nb(f, s->t.rank, DSM_HEAP_REGION, s->t.off, b->dst + i * b->elem_len, len, &s->dop);
        break;
    case BATCH_WRITE:
        s->st = dsm_fabric_put_nb(f, s->t.rank, DSM_HEAP_REGION, s->t.off, b->src + i * b->elem_len, len, &s->dop);
        break;
    default:
        s->st = dsm_fabric_fetch_add_nb(f, s->t.rank, DSM_HEAP_REGION, s->t.off, b->values[i], &s->dop);
    }
    s->op_issued = s->st == DSM_OK;
}

/* Wait for element i's operations (each issued one, whatever happened to the
 * other: the handles live in the slot) and check its blocks' states. */
static dsm_status_t batch_complete(const batch_t *b, size_t i, batch_slot_t *s)
{
    if (s->state_issued) {   /* an owner completes before the slots it covers */
        s->state_st = dsm_fabric_wait(&s->sop);
        s->live = s->state_st == DSM_OK && states_live(s->sb.w, s->t.last - s->t.first + 1);
    }
    const batch_slot_t *o = s->state_owner;
    dsm_status_t s1 = o ? o->state_st : DSM_OK;
    dsm_status_t s2 = s->op_issued ? dsm_fabric_wait(&s->dop) : DSM_OK;
    dsm_status_t st = s->st != DSM_OK ? s->st : s1 != DSM_OK ? s1 : s2;
    if (st == DSM_OK && o && !o->live)
        st = DSM_ERR_BAD_ADDR;
    if (st == DSM_OK && s->op_issued && b->kind == BATCH_FADD && b->olds)
        b->olds[i] = s->dop.result;
    if (s->sb_ready)
        state_buf_done(&s->sb);
    return st;
}

static dsm_status_t batch_run(const batch_t *b, size_t n, dsm_status_t *statuses)
{
    if (n && (!b->addrs || (b->kind == BATCH_FADD && !b->values) || (b->kind == BATCH_READ && !b->dst) ||
              (b->kind == BATCH_WRITE && !b->src)))
        return DSM_ERR_INVALID;
    batch_slot_t *slots = malloc((n < BATCH_WINDOW ? n : BATCH_WINDOW) * sizeof *slots + 1);
    if (!slots)
        return DSM_ERR_NOMEM;
    dsm_status_t first = DSM_OK;
    for (size_t base = 0; base < n; base += BATCH_WINDOW) {
        size_t m = n - base < BATCH_WINDOW ? n - base : BATCH_WINDOW;
        int remote_writes = 0;
        batch_slot_t *reader = NULL;   /* the window's last slot that read states */
        for (size_t k = 0; k < m; k++) {
            batch_issue(b, base + k, &slots[k], reader);
            if (slots[k].state_issued)
                reader = &slots[k];
            remote_writes |= slots[k].op_issued && b->kind == BATCH_WRITE;
        }
        /* as dsm_write: return only once the bytes are in the targets' memory */
        dsm_status_t fl = remote_writes ? dsm_fabric_flush_all(lookup(b->node)->fabric) : DSM_OK;
        for (size_t k = 0; k < m; k++) {
            dsm_status_t st = batch_complete(b, base + k, &slots[k]);
            if (st == DSM_OK && slots[k].op_issued && b->kind == BATCH_WRITE) st = fl;
            if (statuses) statuses[base + k] = st;
            if (first == DSM_OK) first = st;
        }
    }
    free(slots);
    return first;
}

dsm_status_t dsm_read_batch(dsm_node_t *node, const dsm_gaddr_t *addrs, void *dst, size_t elem_len, size_t n,
                            dsm_status_t *statuses)
{
    batch_t b = {.node = node, .kind = BATCH_READ, .addrs = addrs, .elem_len = elem_len, .dst = dst};
    return batch_run(&b, n, statuses);
}

dsm_status_t dsm_write_batch(dsm_node_t *node, const dsm_gaddr_t *addrs, const void *src, size_t elem_len,
                             size_t n, dsm_status_t *statuses)
{
    batch_t b = {.node = node, .kind = BATCH_WRITE, .addrs = addrs, .elem_len = elem_len, .src = src};
    return batch_run(&b, n, statuses);
}

dsm_status_t dsm_fetch_add_batch(dsm_node_t *node, const dsm_gaddr_t *addrs, const uint64_t *values,
                                 uint64_t *olds, size_t n, dsm_status_t *statuses)
{
    batch_t b = {.node = node, .kind = BATCH_FADD, .addrs = addrs, .values = values, .olds = olds};
    return batch_run(&b, n, statuses);
}

dsm_status_t dsm_fetch_add(dsm_node_t *node, dsm_gaddr_t addr, uint64_t value, uint64_t *old)
{
    return atomic_op(node, addr, ATOMIC_ADD, value, 0, old);
}

dsm_status_t dsm_cas(dsm_node_t *node, dsm_gaddr_t addr, uint64_t expected, uint64_t desired, uint64_t *old)
{
    return atomic_op(node, addr, ATOMIC_CAS, expected, desired, old);
}

dsm_status_t dsm_swap(dsm_node_t *node, dsm_gaddr_t addr, uint64_t value, uint64_t *old)
{
    return atomic_op(node, addr, ATOMIC_SWAP, value, 0, old);
}

/* ---- local views ------------------------------------------------------------ */

void *dsm_local_ptr(dsm_node_t *node, dsm_gaddr_t addr)
{
    heap_node_t *h = lookup(node);
    if (h == NULL || local_alloc(h) == NULL)
        return NULL;
    dsm_gaddr_t a = dsm_gaddr_strip(addr);
    if (dsm_gaddr_node(a) != dsm_node_rank(node))
        return NULL;
    uint64_t off = dsm_gaddr_offset(a);
    uint64_t nblocks = dsm_heap_nblocks(h->size), b = off >> DSM_HEAP_BLOCK_SHIFT;
    /* Only heap blocks: never the header (offset 0 is the null address).
     * Whether the block is allocated right now is the caller's business. */
    if (b < dsm_heap_first_block(nblocks) || b >= nblocks)
        return NULL;
    return h->base + off;
}

void dsm_heap_usage(dsm_node_t *node, uint64_t *allocated, uint64_t *capacity)
{
    heap_node_t *h = lookup(node);
    dsm_heap_alloc_t *a = h ? local_alloc(h) : NULL;
    if (a == NULL) {
        if (allocated)
            *allocated = 0;
        if (capacity)
            *capacity = 0;
        return;
    }
    dsm_heap_alloc_usage(a, allocated, capacity);
}
