/* Ack keys and fences: each thread's table of one-sided operations in
 * flight (a key is a bitset of its slots), and the three fence scopes.
 *
 * A thread fence is a read on every connection this thread wrote to since
 * its last fence: a read on one connection completes only after the
 * writes before it are placed (LOCO §2.2; the chaos fabric releases a
 * rank's late writes before a get to it), so only the peers this thread
 * touched pay, and other threads' writes are not waited for. The global
 * fence is the fabric's flush of every peer, worker-wide. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "chan/ids.h"
#include "chan/internal.h"
#include "util/log.h"

enum { SCRATCH = 64, MAX_UNFENCED = 64 };

typedef struct chan_slot {
    dsm_op_t op;
    uint8_t scratch[SCRATCH];   /* a small put's source, copied */
} chan_slot_t;

typedef struct chan_tl {
    chan_slot_t slot[DSM_CHAN_ACK_BITS];
    uint64_t used[DSM_CHAN_ACK_BITS / 64];
    dsm_status_t sticky;        /* a failure reaped to free a slot, for the next test/wait */
    struct {
        dsm_fabric_t *f;
        uint32_t rank;
    } unfenced[MAX_UNFENCED];
    uint32_t nunfenced;
} chan_tl_t;

static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;
static _Thread_local chan_tl_t *tl;

static void tl_free(void *p) { free(p); }
static void tl_init(void) { (void)pthread_key_create(&tl_key, tl_free); }

/* This thread's table, made at its first use; freed at thread exit. */
static chan_tl_t *table(void)
{
    if (tl == NULL) {
        pthread_once(&tl_once, tl_init);
        tl = calloc(1, sizeof *tl);
        if (tl)
            (void)pthread_setspecific(tl_key, tl);
    }
    return tl;
}

static int used(const chan_tl_t *t, unsigned i) { return (t->used[i / 64] >> (i % 64)) & 1; }
static void release(chan_tl_t *t, unsigned i) { t->used[i / 64] &= ~(1ull << (i % 64)); }

static dsm_status_t reap(chan_tl_t *t, unsigned i)
{
    dsm_status_t st = dsm_fabric_wait(&t->slot[i].op);
    release(t, i);
    return st;
}

/* A free slot; with none, the lowest one in flight is waited for. */
static int take(chan_tl_t *t)
{
    for (unsigned w = 0; w < DSM_CHAN_ACK_BITS / 64; w++)
        if (~t->used[w]) {
            unsigned i = w * 64 + (unsigned)__builtin_ctzll(~t->used[w]);
            t->used[w] |= 1ull << (i % 64);
            return (int)i;
        }
    dsm_status_t st = reap(t, 0);
    if (st != DSM_OK && t->sticky == DSM_OK)
        t->sticky = st;
    t->used[0] |= 1;
    return 0;
}

void chan_unfenced(dsm_fabric_t *f, uint32_t rank)
{
    chan_tl_t *t = table();
    if (t == NULL)
        return;
    for (uint32_t i = 0; i < t->nunfenced; i++)
        if (t->unfenced[i].f == f && t->unfenced[i].rank == rank)
            return;
    if (t->nunfenced == MAX_UNFENCED) {
        /* full: fence the oldest now rather than forget it */
        uint64_t word;
        (void)dsm_fabric_get(t->unfenced[0].f, t->unfenced[0].rank, DSM_CHAN_REGION, 0, &word, sizeof word);
        t->unfenced[0] = t->unfenced[--t->nunfenced];
    }
    t->unfenced[t->nunfenced].f = f;
    t->unfenced[t->nunfenced].rank = rank;
    t->nunfenced++;
}

static dsm_status_t region_check(dsm_chan_t *c, uint32_t peer, uint32_t region, uint64_t offset, size_t len)
{
    if (c == NULL || c->state != CHAN_JOINED || peer >= c->npeers || region >= c->nregions)
        return DSM_ERR_INVALID;
    if (offset > c->regions[region].size || len > c->regions[region].size - offset)
        return DSM_ERR_BAD_ADDR;
    if (peer != c->self && !__atomic_load_n(&c->peers[peer].connected, __ATOMIC_ACQUIRE))
        return DSM_ERR_STATE;
    return DSM_OK;
}

static uint64_t remote_off(const dsm_chan_t *c, uint32_t peer, uint32_t region, uint64_t offset)
{
    return peer == c->self ? c->regions[region].offset + offset : chan_remote_off(c, peer, region, offset);
}

/* This node's own copy: plain loads and stores, no slot and nothing to
 * fence (its readers are local threads). Whole aligned words go as
 * relaxed atomics, since peers' writes land in the same memory. */
static void local_copy(uint8_t *dst, const uint8_t *src, size_t len)
{
    if (((uintptr_t)dst | (uintptr_t)src | len) % 8 == 0) {
        for (size_t i = 0; i < len; i += 8) {
            uint64_t w = __atomic_load_n((const uint64_t *)(const void *)(src + i), __ATOMIC_RELAXED);
            __atomic_store_n((uint64_t *)(void *)(dst + i), w, __ATOMIC_RELAXED);
        }
        __atomic_thread_fence(__ATOMIC_RELEASE);
    } else {
        memcpy(dst, src, len);
    }
}

/* The checks an async operation starts with; *t gets this thread's table. */
static dsm_status_t op_start(dsm_chan_t *c, uint32_t peer, uint32_t region, uint64_t offset, size_t len,
                             const dsm_chan_ack_t *key, chan_tl_t **t)
{
    dsm_status_t st = region_check(c, peer, region, offset, len);
    if (st != DSM_OK)
        return st;
    if (key == NULL)
        return DSM_ERR_INVALID;
    return (*t = table()) == NULL ? DSM_ERR_NOMEM : DSM_OK;
}

static void mark(dsm_chan_ack_t *key, int i)
{
    key->bits[i / 64] |= 1ull << (i % 64);
}

dsm_status_t dsm_chan_put_async(dsm_chan_t *c, uint32_t peer, uint32_t region, uint64_t offset, const void *src,
                                size_t len, dsm_chan_ack_t *key)
{
    chan_tl_t *t = NULL;
    dsm_status_t st = op_start(c, peer, region, offset, len, key, &t);
    if (st != DSM_OK)
        return st;
    if (peer == c->self) {
        local_copy(chan_local(c, region) + offset, src, len);
        return DSM_OK;
    }
    int i = take(t);
    chan_slot_t *s = &t->slot[i];
    if (len <= SCRATCH) {
        memcpy(s->scratch, src, len);
        src = s->scratch;
    }
    uint32_t rank = c->peers[peer].rank;
    st = dsm_fabric_put_nb(c->m->fabric, rank, DSM_CHAN_REGION, remote_off(c, peer, region, offset), src, len,
                           &s->op);
    if (st != DSM_OK) {
        release(t, (unsigned)i);
        return st;
    }
    mark(key, i);
    chan_unfenced(c->m->fabric, rank);
    return DSM_OK;
}

dsm_status_t dsm_chan_get_async(dsm_chan_t *c, uint32_t peer, uint32_t region, uint64_t offset, void *dst,
                                size_t len, dsm_chan_ack_t *key)
{
    chan_tl_t *t = NULL;
    dsm_status_t st = op_start(c, peer, region, offset, len, key, &t);
    if (st != DSM_OK)
        return st;
    if (peer == c->self) {
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        local_copy(dst, chan_local(c, region) + offset, len);
        return DSM_OK;
    }
    int i = take(t);
    st = dsm_fabric_get_nb(c->m->fabric, c->peers[peer].rank, DSM_CHAN_REGION, remote_off(c, peer, region, offset),
                           dst, len, &t->slot[i].op);
    if (st != DSM_OK) {
        release(t, (unsigned)i);
        return st;
    }
    mark(key, i);
    return DSM_OK;
}

/* Keys and the used set are walked bit by bit over their set bits only:
 * a key holds a few operations of the 128. */
int dsm_chan_ack_test(dsm_chan_ack_t *key, dsm_status_t *status)
{
    chan_tl_t *t = table();
    if (t == NULL || key == NULL)
        return 1;
    for (unsigned w = 0; w < DSM_CHAN_ACK_BITS / 64; w++)
        for (uint64_t bits = key->bits[w]; bits; bits &= bits - 1) {
            unsigned i = w * 64 + (unsigned)__builtin_ctzll(bits);
            if (used(t, i)) {
                if (!dsm_fabric_test(&t->slot[i].op))
                    continue;
                if (t->slot[i].op.status != DSM_OK && status)
                    *status = t->slot[i].op.status;
                release(t, i);
            }
            key->bits[w] &= ~(1ull << (i % 64));
        }
    if (t->sticky != DSM_OK && status) {
        *status = t->sticky;
        t->sticky = DSM_OK;
    }
    return dsm_chan_ack_empty(key);
}

dsm_status_t dsm_chan_ack_wait(dsm_chan_ack_t *key)
{
    chan_tl_t *t = table();
    if (t == NULL || key == NULL)
        return DSM_OK;
    dsm_status_t first = t->sticky;
    t->sticky = DSM_OK;
    for (unsigned w = 0; w < DSM_CHAN_ACK_BITS / 64; w++) {
        for (uint64_t bits = key->bits[w]; bits; bits &= bits - 1) {
            unsigned i = w * 64 + (unsigned)__builtin_ctzll(bits);
            if (used(t, i)) {
                dsm_status_t st = reap(t, i);
                if (st != DSM_OK && first == DSM_OK)
                    first = st;
            }
        }
        key->bits[w] = 0;
    }
    return first;
}

/* Complete this thread's operations on f (to rank, or to all: UINT32_MAX). */
static dsm_status_t complete(chan_tl_t *t, dsm_fabric_t *f, uint32_t rank)
{
    dsm_status_t first = DSM_OK;
    for (unsigned w = 0; w < DSM_CHAN_ACK_BITS / 64; w++)
        for (uint64_t bits = t->used[w]; bits; bits &= bits - 1) {
            unsigned i = w * 64 + (unsigned)__builtin_ctzll(bits);
            if (t->slot[i].op.fabric == f && (rank == UINT32_MAX || t->slot[i].op.rank == rank)) {
                dsm_status_t st = reap(t, i);
                if (st != DSM_OK && first == DSM_OK)
                    first = st;
            }
        }
    return first;
}

/* The zero-length read, made an 8-byte one: the fence word at the arena's
 * start. Where one-sided operations are emulated (tcp) a write completes
 * only once placed, so the fabric's flush of that one peer suffices and
 * costs no round trip when nothing is outstanding (a read cost twice the
 * worker-wide flush there). */
static dsm_status_t read_fence(dsm_fabric_t *f, uint32_t rank)
{
    if (dsm_fabric_remote_emulated(f, rank, DSM_CHAN_REGION))
        return dsm_fabric_flush(f, rank);
    uint64_t word;
    return dsm_fabric_get(f, rank, DSM_CHAN_REGION, 0, &word, sizeof word);
}

/* Complete this thread's operations to peer of c, then, with `read`, the
 * read that places its writes there; either way its unfenced mark goes. */
static dsm_status_t fence_peer(dsm_chan_t *c, uint32_t peer, int read)
{
    chan_tl_t *t = table();
    if (c == NULL || peer >= c->npeers || t == NULL)
        return DSM_ERR_INVALID;
    dsm_fabric_t *f = c->m->fabric;
    uint32_t rank = c->peers[peer].rank;
    dsm_status_t st = complete(t, f, rank);
    for (uint32_t i = 0; i < t->nunfenced; i++)
        if (t->unfenced[i].f == f && t->unfenced[i].rank == rank) {
            dsm_status_t fs = read ? read_fence(f, rank) : DSM_OK;
            if (st == DSM_OK)
                st = fs;
            t->unfenced[i] = t->unfenced[--t->nunfenced];
            break;
        }
    return st;
}

dsm_status_t dsm_chan_fence_pair(dsm_chan_t *c, uint32_t peer) { return fence_peer(c, peer, 1); }
dsm_status_t chan_fenced_by_atomic(dsm_chan_t *c, uint32_t peer) { return fence_peer(c, peer, 0); }

/* A thread or global fence on node's fabric: this thread's operations
 * complete, then a read of every peer it wrote to (thread) or the
 * fabric's flush of all (global); either way its unfenced marks go. */
static dsm_status_t fence_node(dsm_node_t *node, int global)
{
    chan_tl_t *t = table();
    dsm_fabric_t *f = node ? dsm_node_fabric(node) : NULL;
    if (f == NULL || t == NULL)
        return DSM_ERR_INVALID;
    dsm_status_t st = complete(t, f, UINT32_MAX);
    dsm_status_t fs = global ? dsm_fabric_flush_all(f) : DSM_OK;
    if (st == DSM_OK)
        st = fs;
    for (uint32_t i = 0; i < t->nunfenced;) {
        if (t->unfenced[i].f != f) {
            i++;
            continue;
        }
        if (!global && (fs = read_fence(f, t->unfenced[i].rank)) != DSM_OK && st == DSM_OK)
            st = fs;
        t->unfenced[i] = t->unfenced[--t->nunfenced];
    }
    return st;
}

dsm_status_t dsm_chan_fence_thread(dsm_node_t *node) { return fence_node(node, 0); }
dsm_status_t dsm_chan_fence_global(dsm_node_t *node) { return fence_node(node, 1); }
