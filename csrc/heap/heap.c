/* The heap's node glue: which partition and allocator belong to which node,
 * the peers' partitions learnt at join, the alloc/free/check active-message
 * handlers, and dsm_alloc/free/read/write/atomics by global address — direct
 * memory on this node, one-sided fabric operations on a peer's partition
 * region, always checked against the peer's partition size and block state
 * table before anything is touched. */
#include "dsm/heap.h"
#include "dsm/heap_sdk.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/fabric.h"
#include "heap/alloc.h"
#include "heap/ids.h"
#include "heap/msg.h"
#include "heap/ops.h"
#include "heap/partition.h"
#include "util/bytes.h"
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
    dsm_region_offer_t offer;   /* the partition, offered to every peer */
    /* DSM_CHECKED=1: every access is checked against its allocation's exact
     * bounds (locally, or by a CHECK round trip to the target): slow, for
     * debugging. Otherwise an address is checked against its blocks' states
     * and, when it carries one, its allocation's generation. */
    int checked;
} heap_node_t;

/* The heap state of a node lives in the heap module's slot; the runtime
 * frees it (heap_node_free) after the fabric has stopped. */
static inline heap_node_t *lookup(dsm_node_t *node)
{
    return node ? dsm_module_state(node, &dsm_heap_module) : NULL;
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

/* Guarded operations (heap/ops.h): checked and performed here, one reply. */
static void on_ops(void *ctx, const dsm_am_msg_t *msg)
{
    heap_node_t *h = ctx;
    if (msg->request_id == 0) {
        DSM_WARN(LOG_MOD, "heap operations from rank %u without a request id dropped", msg->src_rank);
        return;
    }
    uint8_t small[512], *rep = NULL;
    size_t rep_len = 0;
    dsm_status_t st = dsm_heap_ops_serve(local_alloc(h), dsm_node_rank(h->node), msg->data, msg->len, small,
                                         sizeof small, &rep, &rep_len);
    dsm_status_t rs = dsm_fabric_am_reply(h->fabric, msg->src_rank, msg->request_id, st, rep, rep_len);
    if (rs != DSM_OK)
        DSM_DEBUG(LOG_MOD, "reply to rank %u failed: %s", msg->src_rank, dsm_strerror(rs));
    if (rep != small)
        free(rep);
}

/* ---- attach ---------------------------------------------------------------- */

/* A member became reachable (this node included): map its partition as
 * region DSM_HEAP_REGION if it published one. */
static void peer_partition_seen(void *ctx, uint32_t rank, uint64_t size)
{
    heap_node_t *h = ctx;
    __atomic_store_n(&h->peer_size[rank], size, __ATOMIC_RELEASE);
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
    const char *checked = getenv("DSM_CHECKED");
    h->checked = checked && *checked && strcmp(checked, "0") != 0;

    /* Claim the node's heap slot first: a second attach (or one after join)
     * is refused there, before any partition is made or formatted. From here
     * on the node owns h and frees it (and its partition) in
     * dsm_node_destroy, whatever fails below. */
    dsm_status_t st = dsm_node_add_module(node, &dsm_heap_module, h);
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
    h->offer = (dsm_region_offer_t){
        .key = DSM_HEAP_PUBLISH_KEY, .region_id = DSM_HEAP_REGION, .seen = peer_partition_seen, .ctx = h};
    if ((st = dsm_node_offer_region(node, &h->offer, h->part.region)) != DSM_OK) {
        DSM_ERROR(LOG_MOD, "cannot offer the partition to peers: %s", dsm_strerror(st));
        return st;
    }
    DSM_DEBUG(LOG_MOD, "heap attached: partition %llu bytes", (unsigned long long)h->size);
    return DSM_OK;
}

static dsm_status_t attach(dsm_node_t *node, void *arg)
{
    (void)arg;
    return dsm_heap_attach(node);
}

static const dsm_am_handler_t handlers[DSM_HEAP_AM_COUNT] = {
    [DSM_HEAP_AM_ALLOC] = on_alloc,
    [DSM_HEAP_AM_FREE] = on_free,
    [DSM_HEAP_AM_CHECK] = on_check,
    [DSM_HEAP_AM_OPS] = on_ops,
};
static const char *const keys[] = {DSM_HEAP_PUBLISH_KEY, NULL};
dsm_module_t dsm_heap_module = {
    .name = "heap",
    .am_count = DSM_HEAP_AM_COUNT,
    .handlers = handlers,
    .keys = keys,
    .attach = attach,
    .detach = heap_node_free,
};

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
    /* The peer's state is asked only to explain a refusal: on the way that
     * succeeds, the access itself finds a dead or unknown peer. */
    uint64_t psize = rank < DSM_MAX_RANKS ? __atomic_load_n(&h->peer_size[rank], __ATOMIC_ACQUIRE) : 0;
    dsm_status_t st = DSM_OK;
    if (psize == 0 || off >= psize || len > psize - off) {
        st = DSM_ERR_BAD_ADDR;
    } else {
        *first = off >> DSM_HEAP_BLOCK_SHIFT;
        *last = len ? (off + len - 1) >> DSM_HEAP_BLOCK_SHIFT : *first;
        /* Header blocks (offset 0 included) and the unused tail are never
         * heap; refuse them without a round trip (their state words would
         * say so too). */
        uint64_t nblocks = dsm_heap_nblocks(psize);
        if (*last >= nblocks || *first < dsm_heap_first_block(nblocks))
            st = DSM_ERR_BAD_ADDR;
    }
    if (st != DSM_OK) {
        dsm_status_t ps = dsm_fabric_peer_state(h->fabric, rank);
        return ps != DSM_OK ? ps : st;
    }
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
    uint16_t tag;       /* the address's allocation generation, 0 if none */
    int local;
    /* remote: one-sided operations to the peer are messages anyway (tcp), so
     * the access goes as one guarded request (heap/ops.h) instead */
    int emulated;
    uint8_t *ptr;       /* local only */
    uint64_t first, last;
    uint64_t gen_off;   /* remote, tagged: where the generation entry lives */
} target_t;

/* DSM_CHECKED mode, remote: the target checks [off, off+len) against the
 * exact allocation (one round trip before the access). */
static dsm_status_t remote_exact_check(heap_node_t *h, uint32_t rank, dsm_gaddr_t a, uint64_t len)
{
    dsm_heap_msg_t req = {.type = DSM_HEAP_MSG_CHECK_REQ, .gaddr = a, .size = len ? len : 1}, rep;
    return request(h, rank, DSM_AM_HEAP_CHECK, &req, DSM_HEAP_MSG_CHECK_REP, &rep);
}

/* Up to how many bytes an access to an emulated peer goes as a guarded
 * request (heap/ops.h): a read larger than this takes the one-sided path,
 * one round trip too (its guard travels beside it) and no extra copy of the
 * data out of the reply; a write or an atomic up to DSM_HEAP_OPS_MAX_DATA,
 * which saves it the round trip its guard would take first. */
enum { GUARDED_READ_MAX = 64 * 1024 };

/* Resolve addr for an access of len bytes; one to an emulated peer is
 * marked for a guarded request when len <= guarded_max. */
static dsm_status_t resolve(dsm_node_t *node, dsm_gaddr_t addr, uint64_t len, uint64_t guarded_max, target_t *t)
{
    t->h = lookup(node);
    if (t->h == NULL)
        return DSM_ERR_STATE;
    t->tag = dsm_gaddr_colour(addr);
    if (t->tag > DSM_HEAP_GEN_MAX)
        return DSM_ERR_BAD_ADDR;   /* not a heap address (an own handle?) */
    dsm_gaddr_t a = dsm_gaddr_strip(addr);
    t->rank = dsm_gaddr_node(a);
    t->off = dsm_gaddr_offset(a);
    t->local = t->rank == dsm_node_rank(node);
    if (t->local) {
        dsm_heap_alloc_t *al = local_alloc(t->h);
        size_t size;
        if (al == NULL || dsm_heap_check_range(al, t->off, len) != DSM_OK ||
            (t->tag && dsm_heap_gen_at(al, t->off) != t->tag) ||
            (t->h->checked && dsm_heap_access_check(al, t->off, len ? len : 1, t->tag, &size) != DSM_OK))
            return DSM_ERR_BAD_ADDR;
        t->ptr = t->h->base + t->off;
        return DSM_OK;
    }
    dsm_status_t st = remote_bounds(t->h, t->rank, t->off, len, &t->first, &t->last);
    t->emulated = st == DSM_OK && len <= guarded_max &&
                  dsm_fabric_remote_emulated(t->h->fabric, t->rank, DSM_HEAP_REGION);
    if (st == DSM_OK && t->emulated)
        return DSM_OK;   /* the target checks (exactly too, in DSM_CHECKED mode) */
    if (st == DSM_OK && t->tag)
        t->gen_off = dsm_heap_gen_off(dsm_heap_nblocks(t->h->peer_size[t->rank]), t->off);
    if (st == DSM_OK && t->h->checked)
        st = remote_exact_check(t->h, t->rank, dsm_gaddr_with_colour(a, t->tag), len);
    return st;
}

/* Issue the read of a tagged target's generation entry (nothing if untagged). */
static dsm_status_t gen_issue(const target_t *t, uint16_t *gen, dsm_op_t *op, int *issued)
{
    *issued = 0;
    if (t->tag == 0)
        return DSM_OK;
    dsm_status_t st = dsm_fabric_get_nb(t->h->fabric, t->rank, DSM_HEAP_REGION, t->gen_off, gen, sizeof *gen, op);
    *issued = st == DSM_OK;
    return st;
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
        uint16_t gen;
        dsm_status_t st = dsm_heap_alloc(a, size, &off, &gen);
        if (st == DSM_OK)
            *out = dsm_gaddr_with_colour(dsm_gaddr_make(self, off), gen);
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
    uint16_t tag = dsm_gaddr_colour(addr);
    if (a == 0)
        return DSM_OK;   /* like free(NULL) */
    if (tag > DSM_HEAP_GEN_MAX)
        return DSM_ERR_BAD_ADDR;
    uint32_t rank = dsm_gaddr_node(a);
    if (rank == dsm_node_rank(node)) {
        dsm_heap_alloc_t *al = local_alloc(h);
        if (al == NULL)
            return DSM_ERR_BAD_ADDR;
        return dsm_heap_free(al, dsm_gaddr_offset(a), tag);
    }
    dsm_status_t st = dsm_fabric_peer_state(h->fabric, rank);
    if (st != DSM_OK)
        return st;
    if (dsm_gaddr_offset(a) == 0)
        return DSM_ERR_BAD_ADDR;
    dsm_heap_msg_t req = {.type = DSM_HEAP_MSG_FREE_REQ, .gaddr = dsm_gaddr_with_colour(a, tag)}, rep;
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
    uint16_t tag = dsm_gaddr_colour(addr);
    if (tag > DSM_HEAP_GEN_MAX)
        return DSM_ERR_BAD_ADDR;
    uint32_t rank = dsm_gaddr_node(a);
    if (rank == dsm_node_rank(node)) {
        dsm_heap_alloc_t *al = local_alloc(h);
        return al ? dsm_heap_access_check(al, dsm_gaddr_offset(a), 0, tag, size) : DSM_ERR_BAD_ADDR;
    }
    dsm_status_t st = dsm_fabric_peer_state(h->fabric, rank);
    if (st != DSM_OK)
        return st;
    if (dsm_gaddr_offset(a) == 0)
        return DSM_ERR_BAD_ADDR;
    dsm_heap_msg_t req = {.type = DSM_HEAP_MSG_CHECK_REQ, .gaddr = dsm_gaddr_with_colour(a, tag)}, rep;
    st = request(h, rank, DSM_AM_HEAP_CHECK, &req, DSM_HEAP_MSG_CHECK_REP, &rep);
    if (st == DSM_OK)
        *size = (size_t)rep.size;
    return st;
}

/* ---- reads, writes, atomics ------------------------------------------------ */

/* A remote data operation travels with the read of its blocks' state words
 * (and, for a tagged address, of its allocation's generation): for a read,
 * all are issued before any is waited for (one round trip, not two), and a
 * block found free or a generation that moved turns the result into
 * DSM_ERR_BAD_ADDR. A read racing a free may so have read freed memory:
 * harmless, the caller is told. A write or an atomic through a tagged
 * address waits for the check first (a second round trip), so that it can
 * never land on a new object that reuses a freed one's memory; untagged
 * (raw, internal) addresses keep the single round trip and promise only
 * that the blocks are live. */
enum { ACCESS_READ = 0, ACCESS_MODIFY = 1, ACCESS_MODIFY_FLUSH = 2 };
typedef dsm_status_t (*data_op_t)(const target_t *t, void *arg, dsm_op_t *op);

/* The state words (and generation) of a target, read one-sidedly. */
typedef struct guard {
    state_buf_t sb;
    uint64_t n;
    uint16_t gen;
    dsm_op_t sop, gop;
    int state_issued, gen_issued;
} guard_t;

static dsm_status_t guard_issue(const target_t *t, guard_t *g)
{
    memset(g, 0, sizeof *g);
    g->n = t->last - t->first + 1;
    dsm_status_t st = state_buf_init(&g->sb, g->n);
    if (st != DSM_OK)
        return st;
    st = dsm_fabric_get_nb(t->h->fabric, t->rank, DSM_HEAP_REGION, dsm_heap_state_off(t->first), g->sb.w,
                           (size_t)g->n * sizeof(uint64_t), &g->sop);
    g->state_issued = st == DSM_OK;
    return st == DSM_OK ? gen_issue(t, &g->gen, &g->gop, &g->gen_issued) : st;
}

/* Wait for what guard_issue issued (all of it, whatever failed: the handles
 * live in g) and judge it; frees g's buffer. */
static dsm_status_t guard_wait(const target_t *t, guard_t *g, dsm_status_t issued)
{
    dsm_status_t w0 = g->state_issued ? dsm_fabric_wait(&g->sop) : DSM_OK;
    dsm_status_t w1 = g->gen_issued ? dsm_fabric_wait(&g->gop) : DSM_OK;
    dsm_status_t st = issued != DSM_OK ? issued : w0 != DSM_OK ? w0 : w1;
    if (st == DSM_OK && (!states_live(g->sb.w, g->n) || g->gen != t->tag))
        st = DSM_ERR_BAD_ADDR;
    if (g->sb.w)
        state_buf_done(&g->sb);
    g->sb.w = NULL;
    return st;
}

/* How the fabric counts an op done without its operations (dsm_fabric_count_ops). */
static dsm_count_kind_t count_kind(uint8_t op)
{
    return op == DSM_HEAP_OP_READ ? DSM_COUNT_GET : op == DSM_HEAP_OP_WRITE ? DSM_COUNT_PUT : DSM_COUNT_ATOMIC;
}

/* The guarded op a target stands for (len bytes; the caller fills operands). */
static dsm_heap_op_t target_op(const target_t *t, uint8_t kind, uint64_t len)
{
    dsm_heap_op_t o = {
        .op = kind, .flags = t->h->checked ? DSM_HEAP_OP_EXACT : 0, .len = (uint32_t)len,
        .gaddr = dsm_gaddr_with_colour(dsm_gaddr_make(t->rank, t->off), t->tag),
    };
    return o;
}

/* One guarded op to an emulated target, one round trip: the result (a
 * read's bytes, an atomic's old value) goes to `result`. */
static dsm_status_t guarded_one(const target_t *t, const dsm_heap_op_t *o, void *result)
{
    uint8_t qs[256], rs[256];
    size_t qlen = dsm_heap_ops_req_len(o, 1), rlen = dsm_heap_ops_rep_len(o, 1), got = 0;
    uint8_t *q = qlen <= sizeof qs ? qs : malloc(qlen), *r = rlen <= sizeof rs ? rs : malloc(rlen);
    dsm_status_t st = q && r ? DSM_OK : DSM_ERR_NOMEM;
    if (st == DSM_OK) {
        dsm_heap_ops_encode(o, 1, q);
        st = dsm_fabric_am_request(t->h->fabric, t->rank, DSM_AM_HEAP_OPS, q, qlen, r, rlen, &got, 0);
    }
    if (st == DSM_OK && dsm_heap_ops_reply_check(r, got, o, 1) != DSM_OK) {
        DSM_WARN(LOG_MOD, "malformed heap operations reply from rank %u", t->rank);
        st = DSM_ERR_PROTO;
    }
    if (st == DSM_OK) {
        size_t pos = DSM_HEAP_OPS_HEADER_LEN;
        const uint8_t *res;
        st = dsm_heap_ops_reply_next(r, &pos, o, &res);
        if (st == DSM_OK && result)
            memcpy(result, res, dsm_heap_op_rep_bytes(o) - 4);
        if (st == DSM_OK)
            dsm_fabric_count_ops(t->h->fabric, count_kind(o->op), 1, o->len);
    }
    if (q != qs) free(q);
    if (r != rs) free(r);
    return st;
}

/* shm: the peer's partition is mapped here at `base`, so the guard is a few
 * loads and the access a memcpy or a CPU atomic, as on this node's own
 * partition. The guard: the state words of blocks first..last and, for a
 * tagged address, its generation entry at gen_off. A modify is checked
 * first (as checked_remote waits for the guard), a read after its copy (a
 * read racing a free is told, as by checked_remote). op: DSM_HEAP_OP_*; io:
 * a read's destination, a write's source; an atomic's old value to *old. */
static inline dsm_status_t mapped_access(uint8_t *base, uint64_t off, uint64_t first, uint64_t last,
                                         uint64_t gen_off, uint16_t tag, uint8_t op, uint64_t len, void *io,
                                         uint64_t v1, uint64_t v2, uint64_t *old)
{
    const uint64_t *states = (const uint64_t *)(const void *)(base + dsm_heap_state_off(first));
    uint8_t *mem = base + off;
    if (op == DSM_HEAP_OP_READ) {
        memcpy(io, mem, len);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);   /* the guard's loads come after the data's */
    }
    int live = 1;
    for (uint64_t b = 0; b <= last - first; b++)
        live &= dsm_heap_blk_live(__atomic_load_n(&states[b], __ATOMIC_ACQUIRE));
    if (tag && __atomic_load_n((const uint16_t *)(const void *)(base + gen_off), __ATOMIC_ACQUIRE) != tag)
        live = 0;
    if (!live)
        return DSM_ERR_BAD_ADDR;
    if (op == DSM_HEAP_OP_READ)
        return DSM_OK;
    if (op == DSM_HEAP_OP_WRITE) {
        memcpy(mem, io, len);
        return DSM_OK;
    }
    uint64_t *w = (uint64_t *)(void *)mem;
    DSM_FABRIC_TSAN_MAPPED_ATOMIC(w, 0);
    switch (op) {
    case DSM_HEAP_OP_FADD: *old = __atomic_fetch_add(w, v1, __ATOMIC_SEQ_CST); break;
    case DSM_HEAP_OP_SWAP: *old = __atomic_exchange_n(w, v1, __ATOMIC_SEQ_CST); break;
    default:
        *old = v1;
        __atomic_compare_exchange_n(w, old, v2, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        break;   /* *old: the value found, whether or not it was swapped */
    }
    DSM_FABRIC_TSAN_MAPPED_ATOMIC(w, 1);
    return DSM_OK;
}

/* mapped_access for a resolved target and its op (an atomic's old value to
 * result, little-endian). */
static dsm_status_t direct_access(const target_t *t, const dsm_heap_op_t *o, uint8_t *base, void *result)
{
    uint64_t old = 0;
    dsm_status_t st = mapped_access(base, t->off, t->first, t->last, t->gen_off, t->tag, o->op, o->len,
                                    o->op == DSM_HEAP_OP_READ ? result : (void *)(uintptr_t)o->data, o->operand,
                                    o->operand2, &old);
    if (st == DSM_OK && o->op != DSM_HEAP_OP_READ && o->op != DSM_HEAP_OP_WRITE)
        dsm_put_u64(result, old);
    return st;
}

/* The peer's partition mapped at `base` (dsm_fabric_remote_map; NULL if
 * not mapped here or not the partition we know: the fabric's path checks). */
static uint8_t *direct_map(heap_node_t *h, uint32_t rank, uint64_t psize)
{
    uint64_t maplen;
    uint8_t *base = dsm_fabric_remote_map(h->fabric, rank, DSM_HEAP_REGION, &maplen);
    if (base && maplen < psize) {
        dsm_fabric_remote_unmap(h->fabric, rank, DSM_COUNT_GET, 0, 0);
        return NULL;
    }
    return base;
}

/* The checks of the shm fast path: `addr` names [off, off+len) within the
 * blocks of a peer's partition, which may be mapped here. Fills t's rank,
 * off, tag, first, last and gen_off, and *psize. 0 when it does not apply:
 * a local address, DSM_CHECKED mode unless the caller did the exact check
 * (exact_done), an address outside the peer's blocks; the general path then
 * does the access or tells why. */
static inline __attribute__((always_inline)) int direct_target(heap_node_t *h, uint32_t self, dsm_gaddr_t addr,
                                                               int exact_done, uint64_t len, target_t *t,
                                                               uint64_t *psize)
{
    uint16_t tag = dsm_gaddr_colour(addr);
    dsm_gaddr_t a = dsm_gaddr_strip(addr);
    uint32_t rank = dsm_gaddr_node(a);
    uint64_t off = dsm_gaddr_offset(a);
    if ((h->checked && !exact_done) || tag > DSM_HEAP_GEN_MAX || rank == self || rank >= DSM_MAX_RANKS)
        return 0;
    uint64_t size = __atomic_load_n(&h->peer_size[rank], __ATOMIC_ACQUIRE);
    if (off >= size || len > size - off)
        return 0;
    uint64_t nblocks = dsm_heap_nblocks(size);
    uint64_t first = off >> DSM_HEAP_BLOCK_SHIFT, last = (off + len - 1) >> DSM_HEAP_BLOCK_SHIFT;
    if (last >= nblocks || first < dsm_heap_first_block(nblocks))
        return 0;
    t->h = h;
    t->rank = rank;
    t->off = off;
    t->tag = tag;
    t->first = first;
    t->last = last;
    t->gen_off = dsm_heap_gen_off(nblocks, off);
    *psize = size;
    return 1;
}

/* A single access through the mapping, from the address on: `addr` on a
 * peer whose partition is mapped here, resolved, guarded and done with the
 * checks of direct_target and none of resolve()'s generality (the shm fast
 * path). 0 (nothing done, nothing counted) when it does not apply: as
 * direct_target, or a partition not mapped here (tcp) or not the one we
 * know. len >= 1 (8 for an atomic); the rest as mapped_access. Inlined into
 * each caller, where the op is a constant and the rest of the access folds. */
static inline __attribute__((always_inline)) int direct_fast(heap_node_t *h, uint32_t self, dsm_gaddr_t addr,
                                                             int exact_done, uint8_t op, uint64_t len,
                                                             void *io, uint64_t v1, uint64_t v2, uint64_t *old,
                                                             dsm_status_t *st)
{
    target_t t;
    uint64_t psize;
    if (!direct_target(h, self, addr, exact_done, len, &t, &psize))
        return 0;
    uint8_t *base = direct_map(h, t.rank, psize);
    if (base == NULL)
        return 0;
    *st = mapped_access(base, t.off, t.first, t.last, t.gen_off, t.tag, op, len, io, v1, v2, old);
    dsm_fabric_remote_unmap(h->fabric, t.rank, count_kind(op), *st == DSM_OK, len);
    return 1;
}

static dsm_status_t checked_remote(const target_t *t, data_op_t issue, void *arg, dsm_op_t *dop, int access)
{
    guard_t g;
    memset(dop, 0, sizeof *dop);
    dsm_status_t gs = guard_issue(t, &g);
    if (access != ACCESS_READ && t->tag) {
        dsm_status_t st = guard_wait(t, &g, gs);
        if (st != DSM_OK)
            return st;
        st = issue(t, arg, dop);
        dsm_status_t fl = st == DSM_OK && access == ACCESS_MODIFY_FLUSH ? dsm_fabric_flush(t->h->fabric, t->rank)
                                                                       : DSM_OK;
        st = st == DSM_OK ? dsm_fabric_wait(dop) : st;
        return st != DSM_OK ? st : fl;
    }
    dsm_status_t s2 = gs == DSM_OK ? issue(t, arg, dop) : gs;
    /* A put completes when its source may be reused, not when the target
     * holds the data: the flush makes a write return only once the bytes are
     * in the target's memory, so any node that reads afterwards sees them. */
    dsm_status_t s3 = s2 == DSM_OK && access == ACCESS_MODIFY_FLUSH ? dsm_fabric_flush(t->h->fabric, t->rank)
                                                                    : DSM_OK;
    dsm_status_t w2 = s2 == DSM_OK ? dsm_fabric_wait(dop) : DSM_OK;
    dsm_status_t st = guard_wait(t, &g, gs);
    return st != DSM_OK ? st : s2 != DSM_OK ? s2 : w2 != DSM_OK ? w2 : s3;
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

/* Every read but the shm fast path's (dsm_read). */
static __attribute__((noinline)) dsm_status_t read_general(dsm_node_t *node, dsm_gaddr_t addr, void *dst, size_t len)
{
    target_t t;
    dsm_status_t st = resolve(node, addr, len, GUARDED_READ_MAX, &t);
    if (st != DSM_OK || len == 0)
        return st;
    if (t.local) {
        memcpy(dst, t.ptr, len);
        return DSM_OK;
    }
    dsm_heap_op_t o = target_op(&t, DSM_HEAP_OP_READ, len);
    if (t.emulated)
        return guarded_one(&t, &o, dst);
    /* DSM_CHECKED: the exact check done, the mapping serves as above */
    if (t.h->checked && direct_fast(t.h, dsm_node_rank(node), addr, 1, DSM_HEAP_OP_READ, len, dst, 0, 0, NULL, &st))
        return st;
    /* dst may hold whatever freed memory held when this fails. */
    bytes_arg_t b = {.dst = dst, .len = len};
    dsm_op_t op;
    return checked_remote(&t, issue_get, &b, &op, ACCESS_READ);
}

dsm_status_t dsm_read(dsm_node_t *node, dsm_gaddr_t addr, void *dst, size_t len)
{
    if (dst == NULL && len > 0)
        return DSM_ERR_INVALID;
    heap_node_t *h = lookup(node);
    dsm_status_t st;
    if (h && len && direct_fast(h, dsm_node_rank(node), addr, 0, DSM_HEAP_OP_READ, len, dst, 0, 0, NULL, &st))
        return st;
    return read_general(node, addr, dst, len);
}

dsm_status_t dsm_write(dsm_node_t *node, dsm_gaddr_t addr, const void *src, size_t len)
{
    if (src == NULL && len > 0)
        return DSM_ERR_INVALID;
    heap_node_t *h = lookup(node);
    dsm_status_t st;
    if (h && len && direct_fast(h, dsm_node_rank(node), addr, 0, DSM_HEAP_OP_WRITE, len, (void *)(uintptr_t)src, 0, 0,
                                NULL, &st))
        return st;
    target_t t;
    st = resolve(node, addr, len, DSM_HEAP_OPS_MAX_DATA, &t);
    if (st != DSM_OK || len == 0)
        return st;
    if (t.local) {
        memcpy(t.ptr, src, len);
        return DSM_OK;
    }
    dsm_heap_op_t o = target_op(&t, DSM_HEAP_OP_WRITE, len);
    o.data = src;
    if (t.emulated)
        return guarded_one(&t, &o, NULL);
    if (t.h->checked &&
        direct_fast(t.h, dsm_node_rank(node), addr, 1, DSM_HEAP_OP_WRITE, len, (void *)(uintptr_t)src, 0, 0, NULL, &st))
        return st;
    bytes_arg_t b = {.src = src, .len = len};
    dsm_op_t op;
    return checked_remote(&t, issue_put, &b, &op, ACCESS_MODIFY_FLUSH);
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

static const uint8_t atomic_kinds[] = {[ATOMIC_ADD] = DSM_HEAP_OP_FADD, [ATOMIC_CAS] = DSM_HEAP_OP_CAS,
                                       [ATOMIC_SWAP] = DSM_HEAP_OP_SWAP};

/* Every atomic but the shm fast path's (atomic_op). */
static __attribute__((noinline)) dsm_status_t atomic_general(dsm_node_t *node, dsm_gaddr_t addr, int kind,
                                                             uint64_t v1, uint64_t v2, uint64_t *old)
{
    target_t t;
    uint8_t res[8];
    uint64_t was = 0;
    dsm_status_t st = resolve(node, addr, 8, 8, &t);
    if (st != DSM_OK)
        return st;
    dsm_heap_op_t o = target_op(&t, atomic_kinds[kind], 8);
    o.operand = v1;
    o.operand2 = kind == ATOMIC_CAS ? v2 : 0;
    if (t.local) {
        dsm_heap_op_perform(&o, t.ptr, res);
    } else if (t.emulated) {
        st = guarded_one(&t, &o, res);
    } else if (t.h->checked &&
               direct_fast(t.h, dsm_node_rank(node), addr, 1, atomic_kinds[kind], 8, NULL, v1, v2, &was, &st)) {
        dsm_put_u64(res, was);
    } else {
        atomic_arg_t a = {.kind = kind, .v1 = v1, .v2 = v2};
        dsm_op_t op;
        st = checked_remote(&t, issue_atomic, &a, &op, ACCESS_MODIFY);
        dsm_put_u64(res, op.result);
    }
    if (st == DSM_OK && old)
        *old = dsm_get_u64(res);
    return st;
}

static inline dsm_status_t atomic_op(dsm_node_t *node, dsm_gaddr_t addr, int kind, uint64_t v1, uint64_t v2,
                                     uint64_t *old)
{
    if (dsm_gaddr_offset(addr) & 7)
        return DSM_ERR_INVALID;   /* a caller's mistake, not a bad address */
    heap_node_t *h = lookup(node);
    dsm_status_t st;
    uint64_t was = 0;
    if (h && direct_fast(h, dsm_node_rank(node), addr, 0, atomic_kinds[kind], 8, NULL, v1, v2, &was, &st)) {
        if (st == DSM_OK && old)
            *old = was;
        return st;
    }
    return atomic_general(node, addr, kind, v1, v2, old);
}

/* ---- batches ---------------------------------------------------------------- */

/* One element of a batch in flight: its target, its state words and the two
 * operations (state get, data op) that checked_remote would issue for it. */
/* One element of a batch in flight: its target, its guard (state words and
 * generation) and its data operation. Consecutive elements on the same
 * blocks and generation entry share the first one's guard (one read per run
 * of elements, e.g. many adds to one counter). */
typedef struct batch_slot {
    target_t t;
    guard_t g;
    dsm_op_t dop;
    struct batch_slot *guard_owner;   /* the slot whose guard covers this one */
    int remote, guard_judged, op_issued;
    int grouped;                      /* travels in its peer's guarded request (ops_group_t) */
    dsm_status_t st;
    dsm_status_t guard_st;            /* owner: its guard's verdict, once judged */
} batch_slot_t;

enum { BATCH_WINDOW = 256, BATCH_READ, BATCH_WRITE, BATCH_FADD };
/* Elements of at most this many bytes to an emulated peer travel in one
 * guarded request per peer and window (at most 1 MiB of data a request). */
enum { BATCH_GROUP_MAX_ELEM = DSM_HEAP_OPS_MAX_DATA / BATCH_WINDOW };

/* A window's hold on one peer's mapped partition (shm): the elements to it
 * that follow each other use it without mapping each, and are counted once
 * when it is let go, which is before anything else is issued (nothing
 * blocks while it is held) and at the end of the window's issue. */
typedef struct map_hold {
    heap_node_t *h;
    uint32_t rank;
    uint8_t *base;          /* NULL: nothing held */
    uint64_t n, bytes;      /* accesses done through it */
    uint32_t unmapped;      /* 1 + the last peer whose partition could not be mapped (tcp), or 0 */
} map_hold_t;

static void hold_release(map_hold_t *m, dsm_count_kind_t kind)
{
    if (m->base == NULL)
        return;
    dsm_fabric_remote_unmap(m->h->fabric, m->rank, kind, m->n, m->bytes);
    m->base = NULL;
    m->n = m->bytes = 0;
}

/* The mapping of t's peer, taken into m (what m held before let go). */
static uint8_t *hold_take(map_hold_t *m, const target_t *t, dsm_count_kind_t kind)
{
    if (m->base && m->rank == t->rank)
        return m->base;
    hold_release(m, kind);
    m->h = t->h;
    m->rank = t->rank;
    m->base = direct_map(t->h, t->rank, __atomic_load_n(&t->h->peer_size[t->rank], __ATOMIC_ACQUIRE));
    return m->base;
}

typedef struct batch {
    dsm_node_t *node;
    heap_node_t *h;         /* node's heap, and its rank */
    uint32_t self;
    int kind;
    const dsm_gaddr_t *addrs;
    size_t elem_len;
    uint8_t *dst;
    const uint8_t *src;
    const uint64_t *values;
    uint64_t *olds;
    map_hold_t *hold;
} batch_t;

static void batch_issue_op(const batch_t *b, size_t i, batch_slot_t *s)
{
    dsm_fabric_t *f = s->t.h->fabric;
    uint64_t len = b->kind == BATCH_FADD ? 8 : b->elem_len;
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

/* The guarded op kind of a batch's elements. */
static uint8_t batch_op_kind(const batch_t *b)
{
    return b->kind == BATCH_READ ? DSM_HEAP_OP_READ : b->kind == BATCH_WRITE ? DSM_HEAP_OP_WRITE : DSM_HEAP_OP_FADD;
}

static dsm_heap_op_t batch_op(const batch_t *b, size_t i, const batch_slot_t *s)
{
    dsm_heap_op_t o = target_op(&s->t, batch_op_kind(b), b->kind == BATCH_FADD ? 8 : b->elem_len);
    if (b->kind == BATCH_WRITE)
        o.data = b->src + i * b->elem_len;
    else if (b->kind == BATCH_FADD)
        o.operand = b->values[i];
    return o;
}

/* Element i by the shm fast path (direct_target's checks, through the
 * window's held mapping): done here, with only the slot fields the later
 * passes read set. 0 when it does not apply (resolve() then decides): a
 * general batch element costs twice a single dsm_fetch_add. */
static int batch_direct(const batch_t *b, size_t i, uint64_t len, batch_slot_t *s)
{
    uint64_t psize;
    if (b->h == NULL || len == 0 || len > UINT32_MAX ||
        !direct_target(b->h, b->self, b->addrs[i], 0, len, &s->t, &psize) || b->hold->unmapped == s->t.rank + 1)
        return 0;
    uint8_t op = batch_op_kind(b);
    uint8_t *base = hold_take(b->hold, &s->t, count_kind(op));
    if (base == NULL) {
        b->hold->unmapped = s->t.rank + 1;
        return 0;
    }
    s->remote = s->grouped = s->op_issued = 0;
    s->guard_owner = NULL;
    uint64_t old = 0;
    void *io = b->kind == BATCH_READ ? b->dst + i * b->elem_len
             : b->kind == BATCH_WRITE ? (void *)(uintptr_t)(b->src + i * b->elem_len) : NULL;
    s->st = mapped_access(base, s->t.off, s->t.first, s->t.last, s->t.gen_off, s->t.tag, op, len, io,
                          b->kind == BATCH_FADD ? b->values[i] : 0, 0, &old);
    if (s->st == DSM_OK) {
        b->hold->n++;
        b->hold->bytes += len;
        if (b->kind == BATCH_FADD && b->olds)
            b->olds[i] = old;
    }
    return 1;
}

/* Element i: done at once when local or mapped; else its guard issued (or
 * shared with `prev`, the window's last slot that issued one, when it covers
 * the same blocks and generation entry), and its data operation too unless
 * it must wait for the guard (as checked_remote). */
static void batch_issue(const batch_t *b, size_t i, batch_slot_t *s, batch_slot_t *prev)
{
    uint64_t len = b->kind == BATCH_FADD ? 8 : b->elem_len;
    int misaligned = b->kind == BATCH_FADD && (dsm_gaddr_offset(b->addrs[i]) & 7);
    if (!misaligned && batch_direct(b, i, len, s))
        return;
    memset(s, 0, sizeof *s);
    if (misaligned) {
        s->st = DSM_ERR_INVALID;
        return;
    }
    if ((s->st = resolve(b->node, b->addrs[i], len, BATCH_GROUP_MAX_ELEM, &s->t)) != DSM_OK || len == 0)
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
    dsm_heap_op_t o = batch_op(b, i, s);
    uint8_t *mapped = s->t.emulated || len > UINT32_MAX ? NULL : hold_take(b->hold, &s->t, count_kind(o.op));
    if (mapped) {
        uint8_t res[8];
        void *out = b->kind == BATCH_READ ? b->dst + i * b->elem_len : res;
        if ((s->st = direct_access(&s->t, &o, mapped, out)) == DSM_OK) {
            b->hold->n++;
            b->hold->bytes += len;
            if (b->kind == BATCH_FADD && b->olds)
                b->olds[i] = dsm_get_u64(res);
        }
        return;
    }
    hold_release(b->hold, count_kind(o.op));   /* the paths below may wait */
    s->remote = 1;
    if (s->t.emulated) {   /* (resolve marks only elements that fit a group) */
        s->grouped = 1;
        return;
    }
    if (prev && prev->t.rank == s->t.rank && prev->t.first == s->t.first && prev->t.last == s->t.last &&
        prev->t.tag == s->t.tag && (s->t.tag == 0 || prev->t.gen_off == s->t.gen_off)) {
        s->guard_owner = prev;
    } else {
        s->guard_owner = s;
        s->st = s->guard_st = guard_issue(&s->t, &s->g);   /* until judged: how the issue went */
    }
    if (s->st == DSM_OK && (b->kind == BATCH_READ || s->t.tag == 0))
        batch_issue_op(b, i, s);
}

/* The verdict of the guard covering s (judged once, by its owner). */
static dsm_status_t batch_guard(batch_slot_t *s)
{
    batch_slot_t *o = s->guard_owner;
    if (!o->guard_judged) {
        o->guard_st = guard_wait(&o->t, &o->g, o->guard_st);
        o->guard_judged = 1;
    }
    return o->guard_st;
}

/* A modifying element through a tagged address: judge its guard, then issue. */
static void batch_issue_guarded(const batch_t *b, size_t i, batch_slot_t *s)
{
    if (!s->remote || s->grouped || s->st != DSM_OK || b->kind == BATCH_READ || s->t.tag == 0)
        return;
    if ((s->st = batch_guard(s)) == DSM_OK)
        batch_issue_op(b, i, s);
}

/* Wait for element i's data operation and, if not judged yet, its guard. */
static dsm_status_t batch_complete(const batch_t *b, size_t i, batch_slot_t *s)
{
    dsm_status_t w = s->op_issued ? dsm_fabric_wait(&s->dop) : DSM_OK;
    dsm_status_t st = s->st != DSM_OK ? s->st : w;
    if (s->remote && s->guard_owner) {
        dsm_status_t gs = batch_guard(s);
        st = st != DSM_OK ? st : gs;
    }
    if (st == DSM_OK && s->op_issued && b->kind == BATCH_FADD && b->olds)
        b->olds[i] = s->dop.result;
    return st;
}

/* A window's grouped elements to one peer: one guarded request, in flight
 * beside the window's one-sided operations. */
typedef struct ops_group {
    uint32_t rank, n;
    size_t *elem;           /* the window index of each op */
    dsm_heap_op_t *ops;
    uint8_t *req, *rep;
    size_t rep_len;
    dsm_op_t op;
    dsm_status_t st;
} ops_group_t;

/* Build and send one request per peer for the window's grouped slots
 * (window elements base..base+m). Returns the number of groups. */
static size_t groups_issue(const batch_t *b, size_t base, size_t m, batch_slot_t *slots, ops_group_t *g,
                           size_t *elems, dsm_heap_op_t *ops)
{
    size_t ng = 0;
    for (size_t k = 0; k < m; k++) {
        if (!slots[k].grouped)
            continue;
        size_t j = 0;
        while (j < ng && g[j].rank != slots[k].t.rank)
            j++;
        if (j == ng) {
            /* a new peer: its ops take the next run of the window's arrays */
            memset(&g[ng], 0, sizeof g[ng]);
            g[ng].rank = slots[k].t.rank;
            ng++;
        }
    }
    /* lay the groups out contiguously in elems/ops */
    size_t at = 0;
    for (size_t j = 0; j < ng; j++) {
        g[j].elem = elems + at;
        g[j].ops = ops + at;
        for (size_t k = 0; k < m; k++)
            if (slots[k].grouped && slots[k].t.rank == g[j].rank) {
                g[j].elem[g[j].n] = k;
                g[j].ops[g[j].n] = batch_op(b, base + k, &slots[k]);
                g[j].n++;
            }
        at += g[j].n;
    }
    dsm_fabric_t *f = lookup(b->node)->fabric;
    for (size_t j = 0; j < ng; j++) {
        ops_group_t *gr = &g[j];
        size_t qlen = dsm_heap_ops_req_len(gr->ops, gr->n);
        gr->rep_len = dsm_heap_ops_rep_len(gr->ops, gr->n);
        gr->req = malloc(qlen);
        gr->rep = malloc(gr->rep_len);
        if (gr->req == NULL || gr->rep == NULL) {
            free(gr->req);   /* (the reply buffer goes in groups_complete) */
            gr->req = NULL;
            gr->st = DSM_ERR_NOMEM;
            continue;
        }
        dsm_heap_ops_encode(gr->ops, gr->n, gr->req);
        gr->st = dsm_fabric_am_request_nb(f, gr->rank, DSM_AM_HEAP_OPS, gr->req, qlen, gr->rep, gr->rep_len,
                                          &gr->op);
        free(gr->req);   /* copied by the send */
        gr->req = NULL;
        if (gr->st == DSM_OK)
            gr->st = DSM_ERR_TIMEOUT;   /* until waited for */
        else
            gr->op.request = NULL;
    }
    return ng;
}

/* Wait for each group's reply and hand its results to its slots. */
static void groups_complete(const batch_t *b, size_t base, batch_slot_t *slots, ops_group_t *g, size_t ng)
{
    for (size_t j = 0; j < ng; j++) {
        ops_group_t *gr = &g[j];
        dsm_status_t st = gr->st;
        if (st == DSM_ERR_TIMEOUT) {
            st = dsm_fabric_wait(&gr->op);
            if (st == DSM_OK && dsm_heap_ops_reply_check(gr->rep, (size_t)gr->op.result, gr->ops, gr->n) != DSM_OK) {
                DSM_WARN(LOG_MOD, "malformed heap operations reply from rank %u", gr->rank);
                st = DSM_ERR_PROTO;
            }
        }
        size_t pos = DSM_HEAP_OPS_HEADER_LEN;
        uint64_t done = 0, bytes = 0;
        for (uint32_t e = 0; e < gr->n; e++) {
            size_t k = gr->elem[e], i = base + k;
            const uint8_t *res;
            dsm_status_t es = st == DSM_OK ? dsm_heap_ops_reply_next(gr->rep, &pos, &gr->ops[e], &res) : st;
            slots[k].st = es;
            if (es != DSM_OK)
                continue;
            done++;
            bytes += gr->ops[e].len;
            if (b->kind == BATCH_READ)
                memcpy(b->dst + i * b->elem_len, res, b->elem_len);
            else if (b->kind == BATCH_FADD && b->olds)
                b->olds[i] = dsm_get_u64(res);
        }
        if (done)
            dsm_fabric_count_ops(lookup(b->node)->fabric, count_kind(batch_op_kind(b)), done, bytes);
        free(gr->rep);
        gr->rep = NULL;
    }
}

static dsm_status_t batch_run(const batch_t *b0, size_t n, dsm_status_t *statuses)
{
    map_hold_t hold = {0};
    batch_t with_hold = *b0;
    with_hold.hold = &hold;
    with_hold.h = lookup(b0->node);
    with_hold.self = dsm_node_rank(b0->node);
    const batch_t *b = &with_hold;
    if (n && (!b->addrs || (b->kind == BATCH_FADD && !b->values) || (b->kind == BATCH_READ && !b->dst) ||
              (b->kind == BATCH_WRITE && !b->src)))
        return DSM_ERR_INVALID;
    size_t w = n < BATCH_WINDOW ? n : BATCH_WINDOW;
    batch_slot_t *slots = malloc(w * sizeof *slots + 1);
    ops_group_t *groups = malloc(w * sizeof *groups + 1);
    size_t *elems = malloc(w * sizeof *elems + 1);
    dsm_heap_op_t *ops = malloc(w * sizeof *ops + 1);
    if (!slots || !groups || !elems || !ops) {
        free(slots), free(groups), free(elems), free(ops);
        return DSM_ERR_NOMEM;
    }
    dsm_status_t first = DSM_OK;
    for (size_t base = 0; base < n; base += BATCH_WINDOW) {
        size_t m = n - base < BATCH_WINDOW ? n - base : BATCH_WINDOW;
        int remote_writes = 0;
        batch_slot_t *owner = NULL;   /* the window's last slot that issued a guard */
        for (size_t k = 0; k < m; k++) {
            batch_issue(b, base + k, &slots[k], owner);
            if (slots[k].guard_owner == &slots[k])
                owner = &slots[k];
        }
        hold_release(b->hold, count_kind(batch_op_kind(b)));
        size_t ng = groups_issue(b, base, m, slots, groups, elems, ops);
        for (size_t k = 0; k < m; k++) {
            batch_issue_guarded(b, base + k, &slots[k]);
            remote_writes |= slots[k].op_issued && b->kind == BATCH_WRITE;
        }
        /* as dsm_write: return only once the bytes are in the targets' memory */
        dsm_status_t fl = remote_writes ? dsm_fabric_flush_all(lookup(b->node)->fabric) : DSM_OK;
        groups_complete(b, base, slots, groups, ng);
        for (size_t k = 0; k < m; k++) {
            dsm_status_t st = batch_complete(b, base + k, &slots[k]);
            if (st == DSM_OK && slots[k].op_issued && b->kind == BATCH_WRITE) st = fl;
            if (statuses) statuses[base + k] = st;
            if (first == DSM_OK) first = st;
        }
    }
    free(slots), free(groups), free(elems), free(ops);
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
