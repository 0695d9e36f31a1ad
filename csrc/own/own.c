/* own's node glue: per-node state (cache, colour memory, counters), the FREE
 * handler, and the box operations of DRust's Algorithms 1-3 (see dsm/own.h)
 * on top of the heap's reads, writes, atomics and allocation. */
#include "dsm/own.h"

#include <stdlib.h>
#include <string.h>

#include "dsm/fabric.h"
#include "own/cache.h"
#include "own/colour.h"
#include "own/ids.h"
#include "own/internal.h"
#include "own/msg.h"
#include "own/object.h"
#include "own/types.h"
#include "util/bytes.h"
#include "util/log.h"
#include "util/test_switch.h"
#include "util/zalloc.h"

#define LOG_MOD "own"
#define DEFAULT_BUDGET (64ull << 20)

static own_node_t *lookup(dsm_node_t *node) { return own_lookup(node); }
static void count(own_node_t *o, int which, uint64_t n) { own_count(o, which, n); }
static uint32_t self(own_node_t *o) { return own_self(o); }
static int is_local(own_node_t *o, dsm_gaddr_t g) { return own_is_local(o, g); }

/* A round trip to another node: request and reply, `bytes` of payload. */
static void round_trip(own_node_t *o, dsm_gaddr_t target, uint64_t bytes)
{
    if (!is_local(o, target)) {
        count(o, C_MESSAGES, 2);
        count(o, C_BYTES, bytes);
    }
}

static uint16_t new_gen(own_node_t *o)
{
    uint16_t g;
    do
        g = __atomic_fetch_add(&o->next_gen, 1, __ATOMIC_RELAXED);
    while (g == 0);
    return g;
}

static void own_node_free(void *state)
{
    own_node_t *o = state;
    if (o == NULL)
        return;
    own_cache_destroy(o->cache);
    own_colours_destroy(o->colours);
    own_mutexes_destroy(o);
    own_place_destroy(o);
    free(o->spares);
    free(o);
}

/* ---- freeing objects at their home --------------------------------------- */

/* Free an object of this node's partition with its final colour: the header
 * loses its magic (a stale reader's check fails), the slot's colour is
 * remembered, and the slot goes back to the heap unless quarantined. A
 * free this node decided (not a peer's FREE, whose colour is its word)
 * may keep the slot as this thread's spare, its next colour with it. */
static inline uint8_t *local_bytes(own_node_t *o, dsm_gaddr_t g, uint64_t len);

static dsm_status_t free_object_here(own_node_t *o, dsm_gaddr_t g, uint32_t type, int spare)
{
    dsm_gaddr_t a = dsm_gaddr_strip(g);
    size_t usable = 0;
    own_obj_header_t h;
    /* A free this node decided names an object own made (a record or a
     * grant said so): its header, which every free clears, says it is live,
     * and the bytes it claims must lie in this node's blocks. A peer's FREE
     * is checked against the heap's allocation as well. */
    uint8_t *p = spare ? local_bytes(o, a, OWN_OBJ_HEADER) : dsm_local_ptr(o->node, a);
    if (p == NULL || (!spare && (dsm_alloc_size(o->node, a, &usable) != DSM_OK || usable < OWN_OBJ_HEADER)) ||
        own_obj_header_decode(p, OWN_OBJ_HEADER, &h) != DSM_OK || h.type != type ||
        (spare ? local_bytes(o, a, OWN_OBJ_HEADER + h.size) == NULL : h.size > usable - OWN_OBJ_HEADER)) {
        DSM_WARN(LOG_MOD, "free of 0x%llx refused: not a live object of type %u", (unsigned long long)g, type);
        return DSM_ERR_BAD_ADDR;
    }
    memset(p, 0, OWN_OBJ_HEADER);
    uint16_t final = dsm_gaddr_colour(g);
    if (spare && final != UINT16_MAX) {
        own_spare_obj_t oldest;
        int kept = own_spare_obj_put(own_spares(o), a, OWN_OBJ_HEADER + h.size, (uint16_t)(final + 1), &oldest);
        if (kept == 1)
            return DSM_OK;
        if (kept == 2) {   /* the oldest spare goes back to the heap instead */
            a = oldest.addr;
            final = (uint16_t)(oldest.colour - 1);
        }
    }
    int r = own_colours_freed(o->colours, dsm_gaddr_offset(a), final);
    if (r < 0)
        return DSM_ERR_NOMEM;
    if (r == 0) {
        count(o, C_QUARANTINED, 1);
        return DSM_OK;
    }
    return dsm_free(o->node, a);
}

static dsm_status_t free_local_object(own_node_t *o, dsm_gaddr_t g, uint32_t type)
{
    return free_object_here(o, g, type, 1);
}

static void on_free(void *ctx, const dsm_am_msg_t *msg)
{
    own_node_t *o = ctx;
    own_msg_t m;
    dsm_status_t st = own_msg_decode(msg->data, msg->len, &m);
    if (st != DSM_OK)
        DSM_WARN(LOG_MOD, "malformed free from rank %u dropped", msg->src_rank);
    else if (!is_local(o, m.g))
        st = DSM_ERR_BAD_ADDR;
    else
        st = free_object_here(o, m.g, m.obj_type, 0);
    if (st == DSM_OK)
        count(o, C_FREES_SERVED, 1);
    if (msg->request_id != 0)
        (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, st, NULL, 0);
}

/* Free an object wherever it lives: here directly, elsewhere by a FREE
 * message, one-way after a move or a drop (the record already said the
 * object is live and the caller its owner; a free the home refuses is
 * logged there), a request where the caller needs the outcome. */
static dsm_status_t free_object(own_node_t *o, dsm_gaddr_t g, uint32_t type, int wait)
{
    if (is_local(o, g))
        return free_local_object(o, g, type);
    own_msg_t m = {.type = OWN_MSG_FREE, .g = g, .obj_type = type};
    uint8_t buf[OWN_MSG_MAX_LEN];
    size_t n = own_msg_encode(&m, buf);
    uint32_t home = dsm_gaddr_node(dsm_gaddr_strip(g));
    if (!wait) {
        count(o, C_MESSAGES, 1);
        count(o, C_BYTES, n);
        return dsm_fabric_am_send(o->fabric, home, DSM_AM_OWN_FREE, buf, n);
    }
    count(o, C_MESSAGES, 2);
    count(o, C_BYTES, n);
    size_t rl = 0;
    return dsm_fabric_am_request(o->fabric, home, DSM_AM_OWN_FREE, buf, n, NULL, 0, &rl, 0);
}

static dsm_status_t obj_new(own_node_t *o, uint32_t type, uint64_t size, const void *src, dsm_gaddr_t *g,
                            uint8_t **payload);

/* ALLOC at this home: a zeroed object, answered with a GRANT naming it. */
static void on_alloc(void *ctx, const dsm_am_msg_t *msg)
{
    own_node_t *o = ctx;
    own_msg_t m;
    dsm_gaddr_t g = 0;
    dsm_status_t st = own_msg_decode(msg->data, msg->len, &m);
    if (st != DSM_OK || m.type != OWN_MSG_ALLOC) {
        DSM_WARN(LOG_MOD, "malformed alloc from rank %u refused", msg->src_rank);
        st = DSM_ERR_PROTO;
    } else {
        st = obj_new(o, m.obj_type, m.arg, NULL, &g, NULL);
    }
    if (msg->request_id == 0)
        return;
    uint8_t buf[OWN_MSG_MAX_LEN];
    own_msg_t r = {.type = OWN_MSG_GRANT, .g = g, .obj_type = m.obj_type, .arg = m.arg};
    size_t n = st == DSM_OK ? own_msg_encode(&r, buf) : 0;
    (void)dsm_fabric_am_reply(o->fabric, msg->src_rank, msg->request_id, st, buf, n);
}

/* A new zeroed object on node `rank`: here directly, elsewhere by an ALLOC
 * request (the home's colour memory gives its colour). */
static dsm_status_t obj_new_on(own_node_t *o, uint32_t rank, uint32_t type, uint64_t size, dsm_gaddr_t *g)
{
    if (rank == self(o))
        return obj_new(o, type, size, NULL, g, NULL);
    own_msg_t m = {.type = OWN_MSG_ALLOC, .obj_type = type, .arg = size}, r;
    uint8_t buf[OWN_MSG_MAX_LEN], reply[OWN_MSG_MAX_LEN];
    size_t n = own_msg_encode(&m, buf), rl = 0;
    dsm_status_t st = dsm_fabric_am_request(o->fabric, rank, DSM_AM_OWN_ALLOC, buf, n, reply, sizeof reply, &rl, 0);
    count(o, C_MESSAGES, 2);
    count(o, C_BYTES, n + rl);
    if (st != DSM_OK)
        return st;
    if (own_msg_decode(reply, rl, &r) != DSM_OK || r.type != OWN_MSG_GRANT || r.obj_type != type || r.arg != size ||
        dsm_gaddr_node(dsm_gaddr_strip(r.g)) != rank) {
        DSM_WARN(LOG_MOD, "malformed answer to an alloc at rank %u", rank);
        return DSM_ERR_PROTO;
    }
    *g = r.g;
    return DSM_OK;
}

/* A node without a partition (a client) holds no objects: its mutable
 * borrows are staged (see dsm_own_mut_t). */
static int has_partition(own_node_t *o) { return dsm_node_config(o->node)->partition_size != 0; }

/* ---- attach and settings -------------------------------------------------- */

dsm_status_t dsm_own_attach(dsm_node_t *node)
{
    if (node == NULL)
        return DSM_ERR_INVALID;
    if (dsm_node_fabric(node) == NULL)
        return DSM_ERR_STATE;
    own_node_t *o = calloc(1, sizeof *o);
    if (o == NULL)
        return DSM_ERR_NOMEM;
    o->node = node;
    o->fabric = dsm_node_fabric(node);
    o->checks = 1;
    /* Generations start apart per node (the rank is known only after join). */
    o->next_gen = (uint16_t)(1 + (uint32_t)dsm_node_config(node)->rank * 4099u);
    dsm_status_t st = dsm_node_add_module(node, &dsm_own_module, o);
    if (st != DSM_OK) {
        DSM_ERROR(LOG_MOD, "cannot attach own: %s", dsm_strerror(st));
        free(o);
        return st;
    }
    if ((o->spares = dsm_zalloc_lines(DSM_TSLOTS * sizeof *o->spares)) == NULL)
        return DSM_ERR_NOMEM;
    if ((st = own_cache_create(DEFAULT_BUDGET, &o->cache)) != DSM_OK ||
        (st = own_colours_create(&o->colours)) != DSM_OK)
        return st;
    own_mutexes_init(o);
    return own_place_init(o);
}

static dsm_status_t attach(dsm_node_t *node, void *arg)
{
    (void)arg;
    return dsm_own_attach(node);
}

static const dsm_am_handler_t handlers[DSM_OWN_AM_COUNT] = {
    [DSM_OWN_AM_FREE] = on_free,
    [DSM_OWN_AM_LOCK] = own_on_lock,
    [DSM_OWN_AM_UNLOCK] = own_on_unlock,
    [DSM_OWN_AM_ALLOC] = on_alloc,
    [DSM_OWN_AM_CHAN_SEND] = own_on_chan_send,
    [DSM_OWN_AM_CHAN_RECV] = own_on_chan_recv,
};
dsm_module_t dsm_own_module = {
    .name = "own",
    .am_count = DSM_OWN_AM_COUNT,
    .handlers = handlers,
    .attach = attach,
    .detach = own_node_free,
};

dsm_status_t dsm_own_set_cache_budget(dsm_node_t *node, uint64_t bytes)
{
    own_node_t *o = lookup(node);
    if (o == NULL)
        return DSM_ERR_STATE;
    own_cache_set_budget(o->cache, bytes);
    own_cache_evict(o->cache, bytes);
    return DSM_OK;
}

dsm_status_t dsm_own_set_checks(dsm_node_t *node, int on)
{
    own_node_t *o = lookup(node);
    if (o == NULL)
        return DSM_ERR_STATE;
    __atomic_store_n(&o->checks, on ? 1 : 0, __ATOMIC_RELAXED);
    return DSM_OK;
}

static int checks(own_node_t *o) { return __atomic_load_n(&o->checks, __ATOMIC_RELAXED); }

/* ---- owner records -------------------------------------------------------- */

static dsm_gaddr_t rec_addr(dsm_own_box_t box) { return dsm_gaddr_strip(box); }

/* rec_here's first call: learns the heap's bounds. Out of line, so that
 * rec_here inlines: the call and its register saves were a tenth of a
 * local box's operations (perf). */
static __attribute__((noinline, cold)) uint64_t *rec_here_learn(own_node_t *o, dsm_gaddr_t a, uint64_t len)
{
    return own_local_at(o, a, len);
}

/* A record's words in this node's memory (8-aligned, inside its heap
 * blocks), or NULL: then the heap's one-sided operations reach it. Local
 * words are read, written and updated with CPU atomics, word by word, as
 * the heap's own local path does, so peers' one-sided atomics see them. */
static inline uint64_t *rec_here(own_node_t *o, dsm_gaddr_t a, uint64_t len)
{
    if (dsm_gaddr_offset(a) & 7)
        return NULL;
    void *p = own_fast_local(o, a, len);
    return p != NULL || __atomic_load_n(&o->lbase, __ATOMIC_ACQUIRE) != NULL ? p : rec_here_learn(o, a, len);
}

/* n words of a record from `a`, as numbers (the layout is little-endian
 * words): CPU atomics on a local record, one read of a remote one. */
static dsm_status_t rec_load(own_node_t *o, dsm_gaddr_t a, uint64_t *w, size_t n)
{
    const uint64_t *here = rec_here(o, a, 8 * n);
    if (here != NULL) {
        for (size_t i = 0; i < n; i++) {
            uint64_t v = __atomic_load_n(&here[i], __ATOMIC_ACQUIRE);
            w[i] = dsm_get_u64((const uint8_t *)&v);
        }
        return DSM_OK;
    }
    uint8_t buf[OWN_REC_SIZE];
    dsm_status_t st = dsm_read(o->node, a, buf, 8 * n);
    for (size_t i = 0; i < n; i++)
        w[i] = dsm_get_u64(buf + 8 * i);
    return st;
}

static dsm_status_t rec_store(own_node_t *o, dsm_gaddr_t a, const void *buf, size_t len)
{
    uint64_t *w = rec_here(o, a, len);
    if (w == NULL)
        return dsm_write(o->node, a, buf, len);
    for (size_t i = 0; i < len / 8; i++) {
        uint64_t v;
        memcpy(&v, (const uint8_t *)buf + i * 8, 8);
        __atomic_store_n(&w[i], v, __ATOMIC_RELEASE);
    }
    return DSM_OK;
}

/* Read and check the record a handle names. */
static dsm_status_t rec_read(own_node_t *o, dsm_own_box_t box, own_record_t *r)
{
    dsm_gaddr_t a = rec_addr(box);
    if (dsm_gaddr_colour(box) == 0 || dsm_gaddr_offset(a) == 0 || (dsm_gaddr_offset(a) & 7)) {
        DSM_WARN(LOG_MOD, "0x%llx is not a box handle", (unsigned long long)box);
        return DSM_ERR_BAD_ADDR;
    }
    uint64_t w[OWN_REC_SIZE / 8];
    dsm_status_t st = rec_load(o, a, w, OWN_REC_SIZE / 8);
    round_trip(o, a, OWN_REC_SIZE);
    if (st == DSM_OK)
        st = own_record_from_words(w, dsm_gaddr_colour(box), r);
    if (st == DSM_ERR_BAD_ADDR)
        DSM_WARN(LOG_MOD, "box 0x%llx is dropped, stale or forged", (unsigned long long)box);
    return st;
}

/* The object address again, once a borrow holds the record: the record
 * must still be this handle's (a transfer that kept the record retired the
 * handle, and a borrow that raced it is refused). */
static dsm_status_t rec_reread_g(own_node_t *o, dsm_own_box_t box, dsm_gaddr_t *g)
{
    uint64_t w[3], tag;
    const uint64_t *here = rec_here(o, rec_addr(box), OWN_REC_SIZE);
    if (here != NULL) {
        tag = __atomic_load_n(&here[OWN_REC_TAG / 8], __ATOMIC_ACQUIRE);
        w[OWN_REC_G / 8] = __atomic_load_n(&here[OWN_REC_G / 8], __ATOMIC_ACQUIRE);
    } else {
        dsm_status_t st = rec_load(o, rec_addr(box), w, 3);
        round_trip(o, rec_addr(box), 24);
        if (st != DSM_OK)
            return st;
        tag = w[OWN_REC_TAG / 8];
    }
    if (tag != own_record_tag(dsm_gaddr_colour(box))) {
        DSM_WARN(LOG_MOD, "box 0x%llx was sent or dropped while it was borrowed", (unsigned long long)box);
        return DSM_ERR_BAD_ADDR;
    }
    *g = w[OWN_REC_G / 8];
    return DSM_OK;
}

static dsm_status_t rec_add(own_node_t *o, dsm_own_box_t box, uint64_t v, uint64_t *old)
{
    round_trip(o, rec_addr(box), 16);
    uint64_t *w = rec_here(o, rec_addr(box) + OWN_REC_BORROW, 8);
    if (w == NULL)
        return dsm_fetch_add(o->node, rec_addr(box) + OWN_REC_BORROW, v, old);
    uint64_t prev = __atomic_fetch_add(w, v, __ATOMIC_SEQ_CST);
    if (old)
        *old = prev;
    return DSM_OK;
}

static void rec_unclaim(own_node_t *o, dsm_own_box_t box)
{
    (void)rec_add(o, box, OWN_BORROW_MUT, NULL);   /* bit 63 set: adding it clears it */
}

/* Take the record exclusively (a mutable borrow, a move, a drop). */
static dsm_status_t rec_claim(own_node_t *o, dsm_own_box_t box, const char *what)
{
    uint64_t old = 0;
    round_trip(o, rec_addr(box), 24);
    uint64_t *rec = rec_here(o, rec_addr(box), OWN_REC_SIZE), *w = rec ? rec + OWN_REC_BORROW / 8 : NULL;
    dsm_status_t st = DSM_OK;
    if (w == NULL)
        st = dsm_cas(o->node, rec_addr(box) + OWN_REC_BORROW, 0, OWN_BORROW_MUT, &old);
    else
        __atomic_compare_exchange_n(w, &old, OWN_BORROW_MUT, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    if (st == DSM_OK && old != 0) {
        DSM_WARN(LOG_MOD, "%s of box 0x%llx refused: it is %s", what, (unsigned long long)box,
                 (old & OWN_BORROW_MUT) ? "mutably borrowed" : "borrowed");
        return DSM_ERR_STATE;
    }
    /* A local record may have been handed on in place (own_box_retag)
     * between the caller's read and this claim: the claim holds only if
     * the tag is still this handle's. (A remote record is not read again:
     * that would be a round trip per claim; there a handle used while it
     * is being sent races as a dropped record's reuse does.) */
    if (st == DSM_OK && rec != NULL &&
        __atomic_load_n(&rec[OWN_REC_TAG / 8], __ATOMIC_ACQUIRE) != own_record_tag(dsm_gaddr_colour(box))) {
        rec_unclaim(o, box);
        DSM_WARN(LOG_MOD, "%s of box 0x%llx refused: it was sent or dropped meanwhile", what, (unsigned long long)box);
        return DSM_ERR_BAD_ADDR;
    }
    return st;
}

static dsm_status_t rec_write(own_node_t *o, dsm_gaddr_t at, const own_record_t *r)
{
    uint8_t buf[OWN_REC_SIZE];
    own_record_encode(r, buf);
    round_trip(o, at, sizeof buf);
    return rec_store(o, at, buf, sizeof buf);
}

/* Tombstone a record (its tag is gone: any handle to it is refused) and free it. */
static dsm_status_t rec_kill(own_node_t *o, dsm_own_box_t box)
{
    uint8_t zero[OWN_REC_SIZE] = {0};
    round_trip(o, rec_addr(box), sizeof zero);
    dsm_status_t st = rec_store(o, rec_addr(box), zero, sizeof zero);
    uint16_t next = (uint16_t)(dsm_gaddr_colour(box) + 1);
    if (st == DSM_OK &&
        !(is_local(o, box) && own_spare_rec_put(own_spares(o), dsm_gaddr_with_colour(rec_addr(box), next ? next : 1)))) {
        round_trip(o, rec_addr(box), 8);
        st = dsm_free(o->node, rec_addr(box));
    }
    return st;
}

static dsm_status_t rec_new(own_node_t *o, uint32_t rank, const own_record_t *r0, dsm_own_box_t *out)
{
    dsm_gaddr_t at;
    if (rank != self(o))
        count(o, C_MESSAGES, 2), count(o, C_BYTES, 24);
    /* A spare slot's next generation is its own (the ABA rule per slot);
     * a fresh slot's comes from the node's counter. */
    uint64_t spare = 0;
    int spared = rank == self(o) && own_spare_rec_take(own_spares(o), &spare);
    dsm_status_t st = spared ? DSM_OK : dsm_alloc(o->node, rank, OWN_REC_SIZE, &at);
    if (st != DSM_OK)
        return st;
    own_record_t r = *r0;
    r.gen = spared ? dsm_gaddr_colour(spare) : new_gen(o);
    if (spared)
        at = dsm_gaddr_strip(spare);
    r.borrow = 0;
    if ((st = rec_write(o, at, &r)) != DSM_OK) {
        (void)dsm_free(o->node, at);
        return st;
    }
    *out = dsm_gaddr_with_colour(at, r.gen);
    return DSM_OK;
}

/* ---- objects -------------------------------------------------------------- */

/* A new object of this node's partition, payload copied from src (zeroed
 * if NULL), at the colour the slot's memory says. */
static dsm_status_t obj_new(own_node_t *o, uint32_t type, uint64_t size, const void *src, dsm_gaddr_t *g,
                            uint8_t **payload)
{
    dsm_gaddr_t a;
    own_spare_obj_t spare;
    int spared = own_spare_obj_take(own_spares(o), OWN_OBJ_HEADER + size, &spare);
    dsm_status_t st = spared ? DSM_OK : dsm_alloc(o->node, self(o), (size_t)(OWN_OBJ_HEADER + size), &a);
    if (st != DSM_OK)
        return st;
    if (spared)
        a = spare.addr;
    uint8_t *p = spared ? own_local_at(o, a, OWN_OBJ_HEADER + size) : dsm_local_ptr(o->node, a);
    if (p == NULL) {
        (void)dsm_free(o->node, a);
        return DSM_ERR_STATE;
    }
    own_obj_header_t h = {.type = type, .size = size};
    own_obj_header_encode(&h, p);
    if (src)
        memcpy(p + OWN_OBJ_HEADER, src, size);
    else
        memset(p + OWN_OBJ_HEADER, 0, size);
    *g = dsm_gaddr_with_colour(a, spared ? spare.colour : own_colours_start(o->colours, dsm_gaddr_offset(a)));
    if (payload)
        *payload = p + OWN_OBJ_HEADER;
    return DSM_OK;
}

/* Learn where this node's heap blocks are (once): the partition's size from
 * the heap, the first block the heap hands out (dsm_local_ptr refuses the
 * blocks before it), and the mapping's base. */
static uint8_t *local_base(own_node_t *o)
{
    uint8_t *base = __atomic_load_n(&o->lbase, __ATOMIC_ACQUIRE);
    if (base != NULL)
        return base;
    uint32_t me = own_self(o);
    uint64_t size = dsm_heap_partition_size(o->node, me), step = 1ull << 16;
    for (uint64_t off = step; off < size; off += step) {
        uint8_t *p = dsm_local_ptr(o->node, dsm_gaddr_make(me, off));
        if (p != NULL) {
            o->llo = off;
            o->lhi = size;
            o->lrank = me;
            o->lkey = dsm_gaddr_make(me, off);
            o->lspan = size - off;
            __atomic_store_n(&o->lat, p, __ATOMIC_RELEASE);
            __atomic_store_n(&o->lbase, p - off, __ATOMIC_RELEASE);
            return p - off;
        }
    }
    return NULL;
}


/* own_local_at for an address known to be this node's. */
static inline uint8_t *local_bytes(own_node_t *o, dsm_gaddr_t g, uint64_t len)
{
    uint8_t *base = local_base(o);
    uint64_t off = dsm_gaddr_offset(g);
    if (base == NULL || off < o->llo || off >= o->lhi || o->lhi - off < len)
        return NULL;
    return base + off;
}

void *own_local_at(own_node_t *o, dsm_gaddr_t g, uint64_t len)
{
    return own_is_local(o, g) ? local_bytes(o, g, len) : NULL;
}

/* The payload of a local object, its header checked against the record:
 * inside the heap's blocks (a bounds compare on the learned range), then
 * the header (one compare). */
static dsm_status_t obj_local(own_node_t *o, dsm_gaddr_t g, const own_record_t *r, uint8_t **payload)
{
    uint8_t *p = local_bytes(o, g, OWN_OBJ_HEADER + r->size);   /* the callers checked is_local */
    if (p == NULL || !own_obj_header_is(p, r->type, r->size)) {
        DSM_WARN(LOG_MOD, "object 0x%llx is not what its box says", (unsigned long long)g);
        return DSM_ERR_BAD_ADDR;
    }
    *payload = p + OWN_OBJ_HEADER;
    return DSM_OK;
}

/* Check a fetched copy's header against what the record says. */
static dsm_status_t obj_check_copy(const uint8_t *copy, const own_record_t *r)
{
    own_obj_header_t h;
    if (own_obj_header_decode(copy, OWN_OBJ_HEADER, &h) != DSM_OK || h.type != r->type || h.size != r->size)
        return DSM_ERR_BAD_ADDR;
    return DSM_OK;
}

/* ---- box operations ------------------------------------------------------- */

/* Drop this node's cached copy of an object whose owner goes: the cache
 * holds copies of other nodes' objects only, so a local one skips its lock. */
static void forget_copy(own_node_t *o, dsm_gaddr_t g)
{
    if (!is_local(o, g))
        (void)own_cache_forget(o->cache, g);
}

dsm_status_t own_box_alloc_at(dsm_node_t *node, uint32_t rank, uint32_t type, size_t size, dsm_own_box_t *out)
{
    own_node_t *o = lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    *out = 0;
    if (o == NULL)
        return DSM_ERR_STATE;
    if ((uint64_t)size > OWN_MAX_SIZE)
        return DSM_ERR_INVALID;
    dsm_status_t st = own_type_check(type, size);
    if (st != DSM_OK)
        return st;
    dsm_gaddr_t g;
    if ((st = obj_new_on(o, rank, type, size, &g)) != DSM_OK)
        return st;
    own_record_t r = {.g = g, .type = type, .size = size};
    if ((st = rec_new(o, rank, &r, out)) != DSM_OK)
        (void)free_object(o, g, type, 1);
    return st;
}

dsm_status_t dsm_own_box_alloc(dsm_node_t *node, uint32_t type, size_t size, dsm_own_box_t *out)
{
    own_node_t *o = lookup(node);
    if (o == NULL || out == NULL) {
        if (out)
            *out = 0;
        return out ? DSM_ERR_STATE : DSM_ERR_INVALID;
    }
    return own_box_alloc_at(node, self(o), type, size, out);
}

typedef struct fetch_ctx {
    own_node_t *o;
    const own_record_t *r;
} fetch_ctx_t;

/* Algorithm 2's COPY: one read of the whole object (header and payload). */
static dsm_status_t fetch_copy(void *ctx, uint64_t key, void *buf, size_t len)
{
    fetch_ctx_t *f = ctx;
    dsm_status_t st = dsm_read(f->o->node, dsm_gaddr_strip(key), buf, len);
    round_trip(f->o, key, len);
    if (st == DSM_OK)
        st = obj_check_copy(buf, f->r);
    return st;
}

/* Algorithms 1-2's DEREF on an object the caller has found (in its owner
 * record, or in a mutex's grant): local objects directly, remote ones
 * through this node's cache keyed by the coloured address. Fills all of
 * *out but the box. */
dsm_status_t own_borrow_at(own_node_t *o, const own_record_t *r, dsm_own_ref_t *out)
{
    dsm_status_t st;
    uint8_t *payload = NULL;
    if (is_local(o, r->g)) {
        if ((st = obj_local(o, r->g, r, &payload)) != DSM_OK)
            return st;
        count(o, C_LOCAL, 1);
        out->data = payload;
    } else {
        fetch_ctx_t f = {o, r};
        const uint8_t *copy;
        int hit = 0;
        /* A copy cached here must not outlive its home: once the fabric
         * has declared the home dead, its objects say so. */
        if (dsm_fabric_peer_state(o->fabric, dsm_gaddr_node(dsm_gaddr_strip(r->g))) == DSM_ERR_PEER_DEAD)
            return DSM_ERR_PEER_DEAD;
        st = own_cache_acquire(o->cache, r->g, (size_t)(OWN_OBJ_HEADER + r->size), fetch_copy, &f, &copy, &hit);
        if (st != DSM_OK) {
            DSM_WARN(LOG_MOD, "borrow of object 0x%llx: unreadable: %s", (unsigned long long)r->g,
                     dsm_strerror(st));
            return st;
        }
        count(o, hit ? C_HITS : C_MISSES, 1);
        out->data = copy + OWN_OBJ_HEADER;
        out->cached = 1;
    }
    out->g = r->g;
    out->size = (size_t)r->size;
    out->type = r->type;
    return DSM_OK;
}

/* The start of every borrow: a cleared view, the node's state and the box's
 * owner record (a stale or forged box is refused here). */
static dsm_status_t borrow_begin(dsm_node_t *node, dsm_own_box_t box, void *out, size_t out_size, own_node_t **o,
                                 own_record_t *r)
{
    *o = lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    memset(out, 0, out_size);
    if (*o == NULL)
        return DSM_ERR_STATE;
    return rec_read(*o, box, r);
}

dsm_status_t dsm_own_box_borrow(dsm_node_t *node, dsm_own_box_t box, dsm_own_ref_t *out)
{
    own_node_t *o;
    own_record_t r;
    dsm_status_t st = borrow_begin(node, box, out, sizeof *out, &o, &r);
    if (st != DSM_OK)
        return st;
    int chk = checks(o);
    if (chk) {
        uint64_t old = 0;
        if ((st = rec_add(o, box, 1, &old)) != DSM_OK)
            return st;
        if (old & OWN_BORROW_MUT) {
            (void)rec_add(o, box, (uint64_t)-1, NULL);
            DSM_WARN(LOG_MOD, "borrow of box 0x%llx refused: it is mutably borrowed", (unsigned long long)box);
            return DSM_ERR_STATE;
        }
        /* A mutable borrow may have ended between the read and the claim. */
        if ((st = rec_reread_g(o, box, &r.g)) != DSM_OK)
            goto undo;
    }
    if (r.g == 0) {
        DSM_WARN(LOG_MOD, "borrow of box 0x%llx refused: it is dropped", (unsigned long long)box);
        st = DSM_ERR_BAD_ADDR;
        goto undo;
    }
    if ((st = own_borrow_at(o, &r, out)) != DSM_OK)
        goto undo;
    out->box = box;
    return DSM_OK;
undo:
    if (chk)
        (void)rec_add(o, box, (uint64_t)-1, NULL);
    return st;
}

dsm_status_t dsm_own_box_release(dsm_node_t *node, dsm_own_ref_t *ref)
{
    own_node_t *o = lookup(node);
    if (ref == NULL)
        return DSM_ERR_INVALID;
    if (o == NULL)
        return DSM_ERR_STATE;
    if (ref->data == NULL) {
        DSM_WARN(LOG_MOD, "release of a borrow that is not live (released twice?)");
        return DSM_ERR_STATE;
    }
    dsm_status_t st = DSM_OK;
    if (ref->cached)
        st = own_cache_release(o->cache, ref->g);
    if (st == DSM_OK && checks(o))
        st = rec_add(o, ref->box, (uint64_t)-1, NULL);
    ref->data = NULL;
    return st;
}

/* Algorithm 1's DEREFMUT on an object the caller has found: a local one
 * directly; a remote one is moved here (one read of the whole object into
 * this node's heap, then a one-way request to the old home to free the old
 * copy, sent only once the read has completed). Fills all of *out but the
 * box; out->g is the object's (possibly new) address. */
dsm_status_t own_borrow_mut_at(own_node_t *o, const own_record_t *r, dsm_own_mut_t *out)
{
    dsm_status_t st;
    uint8_t *payload = NULL;
    if (is_local(o, r->g)) {
        if ((st = obj_local(o, r->g, r, &payload)) != DSM_OK)
            return st;
        out->g = r->g;
    } else if (!has_partition(o)) {
        /* Staged: a private copy now; the release moves the object. */
        uint8_t *whole = malloc((size_t)(OWN_OBJ_HEADER + r->size));
        if (whole == NULL)
            return DSM_ERR_NOMEM;
        st = dsm_read(o->node, dsm_gaddr_strip(r->g), whole, (size_t)(OWN_OBJ_HEADER + r->size));
        round_trip(o, r->g, OWN_OBJ_HEADER + r->size);
        if (st == DSM_OK)
            st = obj_check_copy(whole, r);
        if (st != DSM_OK) {
            free(whole);
            return st;
        }
        payload = whole + OWN_OBJ_HEADER;
        out->g = r->g;
        out->staged = 1;
    } else {
        dsm_gaddr_t g;
        if ((st = obj_new(o, r->type, r->size, NULL, &g, &payload)) != DSM_OK)
            return st;
        uint8_t *whole = payload - OWN_OBJ_HEADER;
        uint8_t hdr[OWN_OBJ_HEADER];
        memcpy(hdr, whole, OWN_OBJ_HEADER);
        st = dsm_read(o->node, dsm_gaddr_strip(r->g), whole, (size_t)(OWN_OBJ_HEADER + r->size));
        round_trip(o, r->g, OWN_OBJ_HEADER + r->size);
        if (st == DSM_OK)
            st = obj_check_copy(whole, r);
        if (st != DSM_OK) {
            memcpy(whole, hdr, OWN_OBJ_HEADER);
            (void)free_local_object(o, g, r->type);
            DSM_WARN(LOG_MOD, "borrow_mut of object 0x%llx: unreadable: %s", (unsigned long long)r->g,
                     dsm_strerror(st));
            return st;
        }
        dsm_status_t fs = free_object(o, r->g, r->type, 0);
        if (fs != DSM_OK)
            DSM_WARN(LOG_MOD, "free of the moved object 0x%llx not sent: %s", (unsigned long long)r->g,
                     dsm_strerror(fs));
        count(o, C_MOVES, 1);
        out->g = g;
        out->moved = 1;
    }
    out->data = payload;
    out->size = (size_t)r->size;
    out->type = r->type;
    return DSM_OK;
}

/* The end of a mutable borrow, before anyone learns of it: the colour goes
 * up by one, or, when it would overflow, the object moves to a new address
 * (whose colour the slot's memory gives) and the old slot is freed with its
 * final colour. *g: the address the owner must learn. */
dsm_status_t own_mut_finish(own_node_t *o, dsm_own_mut_t *m, dsm_gaddr_t *g)
{
    uint16_t c = dsm_gaddr_colour(m->g);
    if (m->staged) {
        /* A staged write: the copy goes to a new slot at the object's home
         * (its address changes, as a move's does), the old one is freed. */
        dsm_gaddr_t ng;
        uint32_t home = dsm_gaddr_node(dsm_gaddr_strip(m->g));
        dsm_status_t st = obj_new_on(o, home, m->type, m->size, &ng);
        if (st == DSM_OK) {
            st = dsm_write(o->node, dsm_gaddr_strip(ng) + OWN_OBJ_HEADER, m->data, m->size);
            round_trip(o, ng, m->size);
            if (st != DSM_OK)
                (void)free_object(o, ng, m->type, 1);
        }
        if (st != DSM_OK)
            return st;   /* the borrow stays live: the caller may retry */
        (void)free_object(o, m->g, m->type, 0);
        free((uint8_t *)m->data - OWN_OBJ_HEADER);
        m->staged = 0;
        *g = ng;
        count(o, C_MOVES, 1);
        return DSM_OK;
    }
    if (c == UINT16_MAX) {
        dsm_gaddr_t ng;
        dsm_status_t st = obj_new(o, m->type, m->size, m->data, &ng, NULL);
        if (st != DSM_OK)
            return st;   /* the borrow stays live: the caller may retry */
        (void)free_local_object(o, m->g, m->type);
        *g = ng;
        count(o, C_MOVES, 1);
    } else if (dsm_test_switch("own_colour")) {
        *g = m->g;   /* the negative test: copies cached elsewhere stay valid */
    } else {
        *g = dsm_gaddr_with_colour(m->g, (uint16_t)(c + 1));
        count(o, C_BUMPS, 1);
    }
    return DSM_OK;
}

dsm_status_t dsm_own_box_borrow_mut(dsm_node_t *node, dsm_own_box_t box, dsm_own_mut_t *out)
{
    own_node_t *o;
    own_record_t r;
    dsm_status_t st = borrow_begin(node, box, out, sizeof *out, &o, &r);
    if (st != DSM_OK)
        return st;
    int chk = checks(o);
    if (chk) {
        if ((st = rec_claim(o, box, "borrow_mut")) != DSM_OK)
            return st;
        if ((st = rec_reread_g(o, box, &r.g)) != DSM_OK)
            goto undo;
    }
    if (r.g == 0) {
        DSM_WARN(LOG_MOD, "borrow_mut of box 0x%llx refused: it is dropped", (unsigned long long)box);
        st = DSM_ERR_BAD_ADDR;
        goto undo;
    }
    if ((st = own_borrow_mut_at(o, &r, out)) != DSM_OK)
        goto undo;
    out->box = box;
    return DSM_OK;
undo:
    if (chk)
        rec_unclaim(o, box);
    return st;
}

dsm_status_t dsm_own_box_release_mut(dsm_node_t *node, dsm_own_mut_t *m)
{
    own_node_t *o = lookup(node);
    if (m == NULL)
        return DSM_ERR_INVALID;
    if (o == NULL)
        return DSM_ERR_STATE;
    if (m->data == NULL) {
        DSM_WARN(LOG_MOD, "release_mut of a borrow that is not live (released twice?)");
        return DSM_ERR_STATE;
    }
    dsm_gaddr_t g;
    dsm_status_t fin = own_mut_finish(o, m, &g);
    if (fin != DSM_OK)
        return fin;
    /* DROPMUTREF: the owner learns the new coloured address before the
     * borrow ends (the heap's remote write returns once the bytes are in
     * the target's memory). */
    uint8_t buf[8];
    memcpy(buf, &g, 8);
    round_trip(o, rec_addr(m->box), 8);
    dsm_status_t st = rec_store(o, rec_addr(m->box) + OWN_REC_G, buf, 8);
    if (st != DSM_OK)
        return st;
    if (checks(o))
        rec_unclaim(o, m->box);
    m->g = g;
    m->data = NULL;
    return DSM_OK;
}

/* The start of an ownership transfer: the record read and claimed (a
 * borrowed, dropped, stale or forged box is refused). */
static dsm_status_t claim_owner(own_node_t *o, dsm_own_box_t box, own_record_t *r, const char *what)
{
    dsm_status_t st = rec_read(o, box, r);
    if (st != DSM_OK)
        return st;
    if (checks(o) && (st = rec_claim(o, box, what)) != DSM_OK)
        return st;
    if (r->g == 0) {
        if (checks(o))
            rec_unclaim(o, box);
        return DSM_ERR_BAD_ADDR;
    }
    return DSM_OK;
}

dsm_status_t dsm_own_box_move(dsm_node_t *node, dsm_own_box_t box, uint32_t to, dsm_own_box_t *out)
{
    own_node_t *o = lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    *out = 0;
    if (o == NULL)
        return DSM_ERR_STATE;
    own_record_t r;
    dsm_status_t st = claim_owner(o, box, &r, "move");
    if (st != DSM_OK)
        return st;
    if ((st = rec_new(o, to, &r, out)) != DSM_OK) {
        if (checks(o))
            rec_unclaim(o, box);
        return st;
    }
    forget_copy(o, r.g);
    return rec_kill(o, box);
}

dsm_status_t own_box_take_owner(own_node_t *o, dsm_own_box_t box, dsm_gaddr_t *g, uint32_t *type, uint64_t *size)
{
    own_record_t r;
    dsm_status_t st = own_box_take(o, box, &r);
    if (st != DSM_OK)
        return st;
    forget_copy(o, r.g);
    *g = r.g;
    *type = r.type;
    *size = r.size;
    return DSM_OK;
}

dsm_status_t own_box_from_owner(own_node_t *o, dsm_gaddr_t g, uint32_t type, uint64_t size, dsm_own_box_t *out)
{
    own_record_t r = {.g = g, .type = type, .size = size};
    return rec_new(o, self(o), &r, out);
}

dsm_status_t own_box_retag(own_node_t *o, dsm_own_box_t box, dsm_own_box_t *next, uint32_t *type, uint64_t *size)
{
    *next = 0;
    if (!is_local(o, box) || rec_here(o, rec_addr(box), OWN_REC_SIZE) == NULL)
        return DSM_ERR_INVALID;
    own_record_t r;
    dsm_status_t st = claim_owner(o, box, &r, "send");
    if (st != DSM_OK)
        return st;
    uint64_t *w = rec_here(o, rec_addr(box), OWN_REC_SIZE);
    uint16_t gen = (uint16_t)(dsm_gaddr_colour(box) + 1);
    gen = gen ? gen : 1;
    /* The tag first: once the claim goes, a borrow through the old handle
     * that slips in finds the new tag on its second read and backs out.
     * The claim goes as rec_unclaim's does, by an add: a borrower that
     * found it held may not have taken its add back yet. */
    __atomic_store_n(&w[OWN_REC_TAG / 8], own_record_tag(gen), __ATOMIC_RELEASE);
    if (checks(o))
        rec_unclaim(o, box);
    *next = dsm_gaddr_with_colour(rec_addr(box), gen);
    *type = r.type;
    *size = r.size;
    return DSM_OK;
}

dsm_status_t own_box_take(own_node_t *o, dsm_own_box_t box, own_record_t *r)
{
    dsm_status_t st = claim_owner(o, box, r, "take");
    return st != DSM_OK ? st : rec_kill(o, box);
}

dsm_status_t own_object_free(own_node_t *o, dsm_gaddr_t g, uint32_t type)
{
    forget_copy(o, g);
    return free_object(o, g, type, 1);
}

dsm_status_t dsm_own_box_drop(dsm_node_t *node, dsm_own_box_t box)
{
    own_node_t *o = lookup(node);
    if (o == NULL)
        return DSM_ERR_STATE;
    own_record_t r;
    dsm_status_t st = rec_read(o, box, &r);
    if (st != DSM_OK)
        return st;
    if (checks(o) && (st = rec_claim(o, box, "drop")) != DSM_OK)
        return st;
    if ((st = rec_kill(o, box)) != DSM_OK)
        return st;
    if (r.g == 0)
        return DSM_OK;
    forget_copy(o, r.g);
    return free_object(o, r.g, r.type, 0);
}

dsm_status_t dsm_own_box_addr(dsm_node_t *node, dsm_own_box_t box, dsm_gaddr_t *g)
{
    own_node_t *o = lookup(node);
    if (g == NULL)
        return DSM_ERR_INVALID;
    *g = 0;
    if (o == NULL)
        return DSM_ERR_STATE;
    own_record_t r;
    dsm_status_t st = rec_read(o, box, &r);
    if (st == DSM_OK)
        *g = r.g;
    return st;
}

uint64_t dsm_own_cache_flush(dsm_node_t *node)
{
    own_node_t *o = lookup(node);
    return o ? own_cache_evict(o->cache, 0) : 0;
}

void dsm_own_stats(dsm_node_t *node, dsm_own_stats_t *out)
{
    memset(out, 0, sizeof *out);
    own_node_t *o = lookup(node);
    if (o == NULL)
        return;
    uint64_t v[C_COUNT];
    for (int i = 0; i < C_COUNT; i++)
        v[i] = own_counter(o, i);
    out->messages = v[C_MESSAGES];
    out->bytes = v[C_BYTES];
    out->cache_hits = v[C_HITS];
    out->cache_misses = v[C_MISSES];
    out->local_reads = v[C_LOCAL];
    out->moves = v[C_MOVES];
    out->colour_bumps = v[C_BUMPS];
    out->frees_served = v[C_FREES_SERVED];
    out->quarantined = v[C_QUARANTINED];
    own_cache_usage(o->cache, &out->cache_entries, &out->cache_bytes, &out->evictions);
}
