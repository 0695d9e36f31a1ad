/* The heap's allocator core: size classes, per-block object bitmaps, the
 * partition's block state table, runs of whole blocks for large objects, and
 * thread-local current blocks. Knows nothing of nodes or the fabric.
 *
 * Concurrency, in short:
 *  - a->lock guards block-level changes: the free-block map, the partial
 *    lists, formatting and releasing blocks, large runs, block ownership.
 *  - each small block has a descriptor with its own lock; a free takes only
 *    that lock (plus a->lock when the block must move between lists).
 *  - a block is "owned" by at most one thread's cache; only the owner sets
 *    bits in its bitmap, so the allocation fast path takes no lock at all
 *    (bits are cleared by frees with atomic and-not, from any thread).
 *  - an owned block is never released, so the owner's fast path can trust its
 *    descriptor; a block goes back to the partition when its last object is
 *    freed while no thread owns it, or when its owner lets go of it empty.
 *    A thread that exits only parks its empty blocks on the partial lists
 *    (no write to the partition, which may already be gone if the thread is
 *    a progress thread of a node being destroyed); parked blocks are reused
 *    first and released when a free run is needed (reclaim_empty).
 *  Lock order: registry lock -> a->lock -> descriptor lock. */
#include "heap/alloc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define LOG_MOD "heap"
#define NONE UINT32_MAX
enum { BITMAP_WORDS = DSM_HEAP_MAX_OBJS / 64, TC_SLOTS = 8 };

/* Process-local bookkeeping of one small block (kept in the process, not in
 * the partition, so a peer's stray write into freed memory can never corrupt
 * the allocator). Allocated the first time a block holds small objects and
 * kept, reformatted on reuse, until the allocator is destroyed. */
typedef struct blk_desc {
    pthread_mutex_t lock;
    uint32_t cls, obj_size, nobjs, words;
    uint32_t nused;             /* atomic: the owner adds without the lock */
    uint32_t hint;              /* owner only: bitmap word to scan first */
    bool active;                /* formatted as a small block right now */
    bool owned;                 /* some thread's current block */
    bool on_partial;            /* on a->partial[cls] */
    uint32_t prev, next;        /* partial-list links (block indices) */
    uint64_t used[BITMAP_WORDS];/* bit set = object allocated (atomic) */
} blk_desc_t;

struct dsm_heap_alloc {
    uint64_t id;                /* unique per process lifetime; keys thread caches */
    struct dsm_heap_alloc *reg_prev, *reg_next;
    uint8_t *base;
    uint64_t size, nblocks, first;
    uint64_t *state;            /* in the partition, at DSM_HEAP_STATE_OFF */
    uint16_t *gens;             /* in the partition: one per granule of the blocks */
    pthread_mutex_t lock;
    uint64_t *freemap;          /* bit set = block free */
    uint64_t free_hint;         /* no free block below this */
    blk_desc_t **descs;         /* by block index; atomic pointer loads */
    uint32_t partial[DSM_HEAP_NCLASSES];
};

/* ---- size classes ---------------------------------------------------- */

unsigned dsm_heap_class_of(size_t size)
{
    if (size <= 128)
        return size == 0 ? 0 : (unsigned)((size + 15) / 16 - 1);
    unsigned p = 63u - (unsigned)__builtin_clzll((unsigned long long)(size - 1)); /* >= 7 */
    size_t base = (size_t)1 << p;
    unsigned step = (unsigned)((size - 1 - base) / (base / 4));
    return 8 + (p - 7) * 4 + step;
}

size_t dsm_heap_class_size(unsigned cls)
{
    if (cls < 8)
        return 16u * (cls + 1);
    unsigned g = (cls - 8) / 4, i = (cls - 8) % 4;
    size_t base = (size_t)128 << g;
    return base + (i + 1) * (base / 4);
}

/* ---- registry of live allocators (for thread caches) ------------------ */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static dsm_heap_alloc_t *reg_head;
static uint64_t reg_next_id = 1;

/* ---- state words and the free-block map (a->lock held) ---------------- */

static inline uint64_t load_state(const dsm_heap_alloc_t *a, uint64_t b)
{
    return __atomic_load_n(&a->state[b], __ATOMIC_ACQUIRE);
}
static inline void store_state(dsm_heap_alloc_t *a, uint64_t b, uint64_t w)
{
    __atomic_store_n(&a->state[b], w, __ATOMIC_RELEASE);
}
/* ---- generations (the granules of one allocation) -------------------- */

static inline uint16_t gen_load(const dsm_heap_alloc_t *a, uint64_t g)
{
    return __atomic_load_n(&a->gens[g], __ATOMIC_ACQUIRE);
}

/* Stamp a new allocation [off, off+len): its generation is one more than
 * any generation its granules held before (so no address that ever pointed
 * into them matches it until the counter wraps), then published. */
static uint16_t gen_stamp_alloc(dsm_heap_alloc_t *a, uint64_t off, uint64_t len)
{
    uint64_t g0 = off >> DSM_HEAP_GRANULE_SHIFT, n = len >> DSM_HEAP_GRANULE_SHIFT;
    unsigned top = 0;
    for (uint64_t g = g0; g < g0 + n; g++) {
        unsigned v = gen_load(a, g) & DSM_HEAP_GEN_MAX;
        if (v > top)
            top = v;
    }
    uint16_t gen = (uint16_t)(top >= DSM_HEAP_GEN_MAX ? 1 : top + 1);
    for (uint64_t g = g0; g < g0 + n; g++)
        __atomic_store_n(&a->gens[g], gen, __ATOMIC_RELEASE);
    return gen;
}

/* Mark a freed allocation's granules (before it can be reused). */
static void gen_stamp_free(dsm_heap_alloc_t *a, uint64_t off, uint64_t len)
{
    uint64_t g0 = off >> DSM_HEAP_GRANULE_SHIFT, n = len >> DSM_HEAP_GRANULE_SHIFT;
    for (uint64_t g = g0; g < g0 + n; g++)
        __atomic_fetch_or(&a->gens[g], (uint16_t)DSM_HEAP_GEN_FREED, __ATOMIC_ACQ_REL);
}

/* Whether an address tagged `tag` may name the allocation starting at off. */
static inline bool gen_matches(const dsm_heap_alloc_t *a, uint64_t off, uint16_t tag)
{
    return tag == 0 || gen_load(a, off >> DSM_HEAP_GRANULE_SHIFT) == tag;
}

uint16_t dsm_heap_gen_at(const dsm_heap_alloc_t *a, uint64_t off)
{
    if (off >= a->nblocks << DSM_HEAP_BLOCK_SHIFT)
        return 0;
    return gen_load(a, off >> DSM_HEAP_GRANULE_SHIFT);
}

static inline bool map_test(const uint64_t *m, uint64_t i) { return (m[i >> 6] >> (i & 63)) & 1; }
static inline void map_set(uint64_t *m, uint64_t i) { m[i >> 6] |= 1ull << (i & 63); }
static inline void map_clear(uint64_t *m, uint64_t i) { m[i >> 6] &= ~(1ull << (i & 63)); }

/* First set bit at or after i, or n. */
static uint64_t map_next(const uint64_t *m, uint64_t i, uint64_t n)
{
    while (i < n) {
        uint64_t w = m[i >> 6] >> (i & 63);
        if (w) {
            i += (uint64_t)__builtin_ctzll(w);
            return i < n ? i : n;
        }
        i = (i | 63) + 1;
    }
    return n;
}

/* First run of `count` free blocks, lowest address first; UINT64_MAX if none. */
static uint64_t find_run(dsm_heap_alloc_t *a, uint64_t count)
{
    uint64_t i = a->free_hint;
    while (i + count <= a->nblocks) {
        i = map_next(a->freemap, i, a->nblocks);
        if (i + count > a->nblocks)
            break;
        uint64_t j = i + 1, end = i + count;
        while (j < end) {
            if ((j & 63) == 0 && j + 64 <= end && a->freemap[j >> 6] == ~0ull) {
                j += 64;
                continue;
            }
            if (!map_test(a->freemap, j))
                break;
            j++;
        }
        if (j == end)
            return i;
        i = j + 1;
    }
    return UINT64_MAX;
}

static void take_run(dsm_heap_alloc_t *a, uint64_t b, uint64_t count)
{
    for (uint64_t i = b; i < b + count; i++)
        map_clear(a->freemap, i);
    if (b == a->free_hint)
        a->free_hint = b + count;
}

static void give_block(dsm_heap_alloc_t *a, uint64_t b)
{
    store_state(a, b, DSM_HEAP_BLK_FREE);
    map_set(a->freemap, b);
    if (b < a->free_hint)
        a->free_hint = b;
}

/* ---- partial lists (a->lock and the descriptor's lock held) ----------- */

static void partial_push(dsm_heap_alloc_t *a, uint32_t b, blk_desc_t *d)
{
    d->prev = NONE;
    d->next = a->partial[d->cls];
    if (d->next != NONE)
        a->descs[d->next]->prev = b;
    a->partial[d->cls] = b;
    d->on_partial = true;
}

static void partial_unlink(dsm_heap_alloc_t *a, uint32_t b, blk_desc_t *d)
{
    if (d->prev != NONE)
        a->descs[d->prev]->next = d->next;
    else
        a->partial[d->cls] = d->next;
    if (d->next != NONE)
        a->descs[d->next]->prev = d->prev;
    d->prev = d->next = NONE;
    d->on_partial = false;
    (void)b;
}

/* Put an unowned small block where it belongs: back to the partition if
 * empty (and may_release), else on its class's partial list if it has room
 * (an empty block parked there is released later by reclaim_empty). Both
 * locks held. */
static void settle(dsm_heap_alloc_t *a, uint32_t b, blk_desc_t *d, bool may_release)
{
    if (!d->active || d->owned)
        return;
    uint32_t n = __atomic_load_n(&d->nused, __ATOMIC_ACQUIRE);
    if (n == 0 && may_release) {
        if (d->on_partial)
            partial_unlink(a, b, d);
        d->active = false;
        give_block(a, b);
    } else if (n < d->nobjs && !d->on_partial) {
        partial_push(a, b, d);
    }
}

/* Release the empty blocks parked on partial lists (by thread exits); true
 * if any was. a->lock held. */
static bool reclaim_empty(dsm_heap_alloc_t *a)
{
    bool any = false;
    for (unsigned c = 0; c < DSM_HEAP_NCLASSES; c++) {
        uint32_t b = a->partial[c];
        while (b != NONE) {
            blk_desc_t *d = a->descs[b];
            pthread_mutex_lock(&d->lock);
            uint32_t next = d->next;
            if (__atomic_load_n(&d->nused, __ATOMIC_ACQUIRE) == 0) {
                partial_unlink(a, b, d);
                d->active = false;
                give_block(a, b);
                any = true;
            }
            pthread_mutex_unlock(&d->lock);
            b = next;
        }
    }
    return any;
}

/* A run of free blocks, reclaiming parked empty blocks if needed. a->lock held. */
static uint64_t find_run_reclaim(dsm_heap_alloc_t *a, uint64_t count)
{
    uint64_t b = find_run(a, count);
    if (b == UINT64_MAX && reclaim_empty(a))
        b = find_run(a, count);
    return b;
}

/* ---- block acquisition for a thread cache (a->lock held) -------------- */

/* An owned block of class cls with room, or NONE (partition exhausted). */
static uint32_t acquire_block(dsm_heap_alloc_t *a, unsigned cls)
{
    uint32_t b = a->partial[cls];
    if (b != NONE) {
        blk_desc_t *d = a->descs[b];
        pthread_mutex_lock(&d->lock);
        partial_unlink(a, b, d);
        d->owned = true;
        d->hint = 0;
        pthread_mutex_unlock(&d->lock);
        return b;
    }
    uint64_t fb = find_run_reclaim(a, 1);
    if (fb == UINT64_MAX)
        return NONE;
    blk_desc_t *d = a->descs[fb];
    if (d == NULL) {
        d = calloc(1, sizeof *d);
        if (d == NULL)
            return NONE;
        pthread_mutex_init(&d->lock, NULL);
        d->prev = d->next = NONE;
        __atomic_store_n(&a->descs[fb], d, __ATOMIC_RELEASE);
    }
    take_run(a, fb, 1);
    pthread_mutex_lock(&d->lock);
    d->cls = cls;
    d->obj_size = (uint32_t)dsm_heap_class_size(cls);
    d->nobjs = DSM_HEAP_BLOCK_SIZE / d->obj_size;
    d->words = (d->nobjs + 63) / 64;
    memset(d->used, 0, sizeof d->used);
    __atomic_store_n(&d->nused, 0, __ATOMIC_RELEASE);
    d->hint = 0;
    d->active = true;
    d->owned = true;
    d->on_partial = false;
    d->prev = d->next = NONE;
    pthread_mutex_unlock(&d->lock);
    store_state(a, fb, dsm_heap_blk_word(DSM_HEAP_BLK_SMALL, cls));
    return (uint32_t)fb;
}

/* The owner lets go of its current block. may_release false keeps the
 * partition untouched (an empty block is parked instead of released): used
 * at thread exit, which for a fabric progress thread may happen while its
 * node is being torn down. */
static void relinquish(dsm_heap_alloc_t *a, uint32_t b, bool may_release)
{
    pthread_mutex_lock(&a->lock);
    blk_desc_t *d = a->descs[b];
    pthread_mutex_lock(&d->lock);
    d->owned = false;
    settle(a, b, d, may_release);
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_unlock(&a->lock);
}

/* Owner fast path: claim a clear bit. Only the owner sets bits and a free
 * clears its bit before decrementing nused, so nused < nobjs means a clear
 * bit exists. Returns the object index or -1 if the block is full. */
static int64_t claim_object(blk_desc_t *d)
{
    if (__atomic_load_n(&d->nused, __ATOMIC_ACQUIRE) >= d->nobjs)
        return -1;
    for (uint32_t k = 0; k < d->words; k++) {
        uint32_t w = (d->hint + k) % d->words;
        uint64_t free_bits = ~__atomic_load_n(&d->used[w], __ATOMIC_ACQUIRE);
        if (w == d->words - 1 && (d->nobjs & 63))
            free_bits &= (1ull << (d->nobjs & 63)) - 1;
        if (free_bits) {
            unsigned i = (unsigned)__builtin_ctzll(free_bits);
            __atomic_fetch_or(&d->used[w], 1ull << i, __ATOMIC_ACQ_REL);
            __atomic_fetch_add(&d->nused, 1, __ATOMIC_ACQ_REL);
            d->hint = w;
            return (int64_t)w * 64 + i;
        }
    }
    return -1;
}

/* ---- thread caches ----------------------------------------------------- */

typedef struct tc_entry {
    uint64_t heap_id;                    /* 0 = empty slot */
    uint32_t cur[DSM_HEAP_NCLASSES];     /* current block + 1; 0 = none */
} tc_entry_t;

typedef struct tcache {
    tc_entry_t e[TC_SLOTS];
    unsigned victim;
} tcache_t;

static _Thread_local tcache_t *tls_tc;
static pthread_key_t tc_key;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;

/* Give back an entry's blocks if its allocator still exists. */
static void tc_entry_flush(tc_entry_t *e, bool may_release)
{
    if (e->heap_id == 0)
        return;
    pthread_mutex_lock(&reg_lock);
    dsm_heap_alloc_t *a = reg_head;
    while (a && a->id != e->heap_id)
        a = a->reg_next;
    if (a) {
        for (unsigned c = 0; c < DSM_HEAP_NCLASSES; c++)
            if (e->cur[c])
                relinquish(a, e->cur[c] - 1, may_release);
    }
    pthread_mutex_unlock(&reg_lock);
    memset(e, 0, sizeof *e);
}

static void tc_destructor(void *p)
{
    tcache_t *tc = p;
    for (unsigned i = 0; i < TC_SLOTS; i++)
        tc_entry_flush(&tc->e[i], false);
    tls_tc = NULL;
    free(tc);
}

static void tc_key_init(void) { (void)pthread_key_create(&tc_key, tc_destructor); }

static tc_entry_t *tc_get(dsm_heap_alloc_t *a)
{
    tcache_t *tc = tls_tc;
    if (tc == NULL) {
        pthread_once(&tc_once, tc_key_init);
        tc = calloc(1, sizeof *tc);
        if (tc == NULL)
            return NULL;
        if (pthread_setspecific(tc_key, tc) != 0) {
            free(tc);
            return NULL;
        }
        tls_tc = tc;
    }
    for (unsigned i = 0; i < TC_SLOTS; i++)
        if (tc->e[i].heap_id == a->id)
            return &tc->e[i];
    tc_entry_t *e = NULL;
    for (unsigned i = 0; i < TC_SLOTS && !e; i++)
        if (tc->e[i].heap_id == 0)
            e = &tc->e[i];
    if (e == NULL) {
        /* More allocators than slots in this thread: evict round-robin. */
        e = &tc->e[tc->victim++ % TC_SLOTS];
        tc_entry_flush(e, true);
    }
    e->heap_id = a->id;
    return e;
}

void dsm_heap_thread_flush(dsm_heap_alloc_t *a)
{
    tcache_t *tc = tls_tc;
    if (tc == NULL)
        return;
    for (unsigned i = 0; i < TC_SLOTS; i++)
        if (tc->e[i].heap_id == a->id)
            tc_entry_flush(&tc->e[i], true);
}

/* ---- create / destroy --------------------------------------------------- */

dsm_status_t dsm_heap_alloc_create(void *base, uint64_t size, dsm_heap_alloc_t **out)
{
    *out = NULL;
    if (base == NULL || ((uintptr_t)base & 7) || size < DSM_HEAP_MIN_PARTITION ||
        size > DSM_HEAP_MAX_PARTITION)
        return DSM_ERR_INVALID;
    uint64_t nblocks = dsm_heap_nblocks(size);
    uint64_t first = dsm_heap_first_block(nblocks);
    if (first >= nblocks)
        return DSM_ERR_INVALID;

    dsm_heap_alloc_t *a = calloc(1, sizeof *a);
    if (a == NULL)
        return DSM_ERR_NOMEM;
    a->freemap = calloc((size_t)((nblocks + 63) / 64), sizeof(uint64_t));
    a->descs = calloc((size_t)nblocks, sizeof(blk_desc_t *));
    if (a->freemap == NULL || a->descs == NULL) {
        free(a->freemap);
        free(a->descs);
        free(a);
        return DSM_ERR_NOMEM;
    }
    pthread_mutex_init(&a->lock, NULL);
    a->base = base;
    a->size = size;
    a->nblocks = nblocks;
    a->first = first;
    a->free_hint = first;
    a->state = (uint64_t *)(a->base + DSM_HEAP_STATE_OFF);
    a->gens = (uint16_t *)(a->base + dsm_heap_gen_table_off(nblocks));
    for (unsigned c = 0; c < DSM_HEAP_NCLASSES; c++)
        a->partial[c] = NONE;

    /* Format: layout record, then every block's state word. */
    dsm_heap_layout_t layout = {
        .magic = DSM_HEAP_LAYOUT_MAGIC, .version = DSM_HEAP_LAYOUT_VERSION,
        .block_shift = DSM_HEAP_BLOCK_SHIFT, .size = size, .nblocks = nblocks, .first_block = first,
    };
    memcpy(a->base, &layout, sizeof layout);
    for (uint64_t b = 0; b < nblocks; b++) {
        if (b < first) {
            store_state(a, b, DSM_HEAP_BLK_RESERVED);
        } else {
            store_state(a, b, DSM_HEAP_BLK_FREE);
            map_set(a->freemap, b);
        }
    }

    pthread_mutex_lock(&reg_lock);
    a->id = reg_next_id++;
    a->reg_next = reg_head;
    if (reg_head)
        reg_head->reg_prev = a;
    reg_head = a;
    pthread_mutex_unlock(&reg_lock);
    *out = a;
    return DSM_OK;
}

void dsm_heap_alloc_destroy(dsm_heap_alloc_t *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&reg_lock);
    if (a->reg_prev)
        a->reg_prev->reg_next = a->reg_next;
    else
        reg_head = a->reg_next;
    if (a->reg_next)
        a->reg_next->reg_prev = a->reg_prev;
    pthread_mutex_unlock(&reg_lock);
    /* This thread's cache entry would otherwise linger until evicted. */
    tcache_t *tc = tls_tc;
    if (tc)
        for (unsigned i = 0; i < TC_SLOTS; i++)
            if (tc->e[i].heap_id == a->id)
                memset(&tc->e[i], 0, sizeof tc->e[i]);
    for (uint64_t b = 0; b < a->nblocks; b++) {
        if (a->descs[b]) {
            pthread_mutex_destroy(&a->descs[b]->lock);
            free(a->descs[b]);
        }
    }
    pthread_mutex_destroy(&a->lock);
    free(a->descs);
    free(a->freemap);
    free(a);
}

/* ---- allocate ----------------------------------------------------------- */

static dsm_status_t alloc_large(dsm_heap_alloc_t *a, size_t size, uint64_t *off, uint16_t *gen)
{
    if (size > a->size)
        return DSM_ERR_NOMEM;
    uint64_t count = ((uint64_t)size + DSM_HEAP_BLOCK_SIZE - 1) >> DSM_HEAP_BLOCK_SHIFT;
    pthread_mutex_lock(&a->lock);
    uint64_t b = find_run_reclaim(a, count);
    if (b == UINT64_MAX) {
        pthread_mutex_unlock(&a->lock);
        return DSM_ERR_NOMEM;
    }
    take_run(a, b, count);
    uint16_t g = gen_stamp_alloc(a, b << DSM_HEAP_BLOCK_SHIFT, count << DSM_HEAP_BLOCK_SHIFT);
    for (uint64_t i = 1; i < count; i++)
        store_state(a, b + i, dsm_heap_blk_word(DSM_HEAP_BLK_CONT, i));
    store_state(a, b, dsm_heap_blk_word(DSM_HEAP_BLK_LARGE, count));
    pthread_mutex_unlock(&a->lock);
    *off = b << DSM_HEAP_BLOCK_SHIFT;
    if (gen)
        *gen = g;
    return DSM_OK;
}

dsm_status_t dsm_heap_alloc(dsm_heap_alloc_t *a, size_t size, uint64_t *off, uint16_t *gen)
{
    if (size > DSM_HEAP_MAX_CLASS)
        return alloc_large(a, size, off, gen);
    unsigned cls = dsm_heap_class_of(size);
    tc_entry_t *e = tc_get(a);
    if (e == NULL)
        return DSM_ERR_NOMEM;
    for (;;) {
        if (e->cur[cls]) {
            uint32_t b = e->cur[cls] - 1;
            blk_desc_t *d = a->descs[b];
            int64_t i = claim_object(d);
            if (i >= 0) {
                *off = ((uint64_t)b << DSM_HEAP_BLOCK_SHIFT) + (uint64_t)i * d->obj_size;
                /* the slot is ours alone: its last free stamped it first */
                uint16_t g = gen_stamp_alloc(a, *off, d->obj_size);
                if (gen)
                    *gen = g;
                return DSM_OK;
            }
            e->cur[cls] = 0;
            relinquish(a, b, true);
        }
        pthread_mutex_lock(&a->lock);
        uint32_t b = acquire_block(a, cls);
        pthread_mutex_unlock(&a->lock);
        if (b == NONE)
            return DSM_ERR_NOMEM;
        e->cur[cls] = b + 1;
    }
}

/* ---- free / inspect ----------------------------------------------------- */

/* Validate off as a small object's start under d->lock; the bit index or -1. */
static int64_t small_index(const blk_desc_t *d, uint64_t b, uint64_t off)
{
    if (!d->active)
        return -1;
    uint64_t rel = off - (b << DSM_HEAP_BLOCK_SHIFT);
    if (rel % d->obj_size)
        return -1;
    uint64_t i = rel / d->obj_size;
    if (i >= d->nobjs)
        return -1;
    return (int64_t)i;
}

static dsm_status_t bad_free(const char *why, uint64_t off)
{
    DSM_WARN(LOG_MOD, "free of offset 0x%llx refused: %s", (unsigned long long)off, why);
    return DSM_ERR_BAD_ADDR;
}

dsm_status_t dsm_heap_free(dsm_heap_alloc_t *a, uint64_t off, uint16_t tag)
{
    uint64_t b = off >> DSM_HEAP_BLOCK_SHIFT;
    if (off >= a->size || b >= a->nblocks || b < a->first)
        return bad_free("outside the heap", off);
    uint64_t w = load_state(a, b);
    switch (dsm_heap_blk_kind(w)) {
    case DSM_HEAP_BLK_SMALL: {
        blk_desc_t *d = __atomic_load_n(&a->descs[b], __ATOMIC_ACQUIRE);
        if (d == NULL)
            return bad_free("block has no descriptor", off);
        pthread_mutex_lock(&d->lock);
        int64_t i = small_index(d, b, off);
        if (i < 0) {
            pthread_mutex_unlock(&d->lock);
            return bad_free("not the start of an object", off);
        }
        uint64_t mask = 1ull << (i & 63);
        /* A live object cannot be freed and reused while we hold d->lock:
         * its tag is checked, and its granules marked, before its bit goes
         * (the owner may claim the slot the moment the bit is clear). */
        if (!((__atomic_load_n(&d->used[i >> 6], __ATOMIC_ACQUIRE) & mask))) {
            pthread_mutex_unlock(&d->lock);
            return bad_free("object is not allocated (double free?)", off);
        }
        if (!gen_matches(a, off, tag)) {
            pthread_mutex_unlock(&d->lock);
            return bad_free("stale address (the object was freed and its memory reused)", off);
        }
        gen_stamp_free(a, off, d->obj_size);
        __atomic_fetch_and(&d->used[i >> 6], ~mask, __ATOMIC_ACQ_REL);
        uint32_t n = __atomic_sub_fetch(&d->nused, 1, __ATOMIC_ACQ_REL);
        bool slow = !d->owned && (n == 0 || !d->on_partial);
        pthread_mutex_unlock(&d->lock);
        if (slow) {
            pthread_mutex_lock(&a->lock);
            pthread_mutex_lock(&d->lock);
            settle(a, (uint32_t)b, d, true);
            pthread_mutex_unlock(&d->lock);
            pthread_mutex_unlock(&a->lock);
        }
        return DSM_OK;
    }
    case DSM_HEAP_BLK_LARGE: {
        if (off & (DSM_HEAP_BLOCK_SIZE - 1))
            return bad_free("not the start of an allocation", off);
        pthread_mutex_lock(&a->lock);
        w = load_state(a, b);   /* a racing free of the same run may have won */
        uint64_t count = dsm_heap_blk_arg(w);
        if (dsm_heap_blk_kind(w) != DSM_HEAP_BLK_LARGE || count == 0 || count > a->nblocks - b) {
            pthread_mutex_unlock(&a->lock);
            return bad_free("allocation is not live (double free?)", off);
        }
        if (!gen_matches(a, off, tag)) {
            pthread_mutex_unlock(&a->lock);
            return bad_free("stale address (the allocation was freed and its memory reused)", off);
        }
        gen_stamp_free(a, off, count << DSM_HEAP_BLOCK_SHIFT);
        for (uint64_t i = 0; i < count; i++)
            give_block(a, b + i);
        pthread_mutex_unlock(&a->lock);
        return DSM_OK;
    }
    case DSM_HEAP_BLK_CONT:
        return bad_free("inside a large allocation", off);
    default:
        return bad_free("block is free (double free?)", off);
    }
}

dsm_status_t dsm_heap_object_of(dsm_heap_alloc_t *a, uint64_t off, uint64_t *start, size_t *size)
{
    uint64_t b = off >> DSM_HEAP_BLOCK_SHIFT;
    if (off >= a->size || b >= a->nblocks || b < a->first)
        return DSM_ERR_BAD_ADDR;
    uint64_t w = load_state(a, b);
    if (dsm_heap_blk_kind(w) == DSM_HEAP_BLK_CONT) {
        uint64_t back = dsm_heap_blk_arg(w);
        if (back == 0 || back > b - a->first)
            return DSM_ERR_BAD_ADDR;
        b -= back;
        w = load_state(a, b);
    }
    if (dsm_heap_blk_kind(w) == DSM_HEAP_BLK_LARGE) {
        *start = b << DSM_HEAP_BLOCK_SHIFT;
        *size = (size_t)(dsm_heap_blk_arg(w) << DSM_HEAP_BLOCK_SHIFT);
        return off - *start < *size ? DSM_OK : DSM_ERR_BAD_ADDR;
    }
    if (dsm_heap_blk_kind(w) != DSM_HEAP_BLK_SMALL)
        return DSM_ERR_BAD_ADDR;
    blk_desc_t *d = __atomic_load_n(&a->descs[b], __ATOMIC_ACQUIRE);
    if (d == NULL)
        return DSM_ERR_BAD_ADDR;
    dsm_status_t st = DSM_ERR_BAD_ADDR;
    pthread_mutex_lock(&d->lock);
    if (d->active) {
        uint64_t i = (off - (b << DSM_HEAP_BLOCK_SHIFT)) / d->obj_size;
        if (i < d->nobjs && (__atomic_load_n(&d->used[i >> 6], __ATOMIC_ACQUIRE) >> (i & 63)) & 1) {
            *start = (b << DSM_HEAP_BLOCK_SHIFT) + i * d->obj_size;
            *size = d->obj_size;
            st = DSM_OK;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return st;
}

dsm_status_t dsm_heap_usable(dsm_heap_alloc_t *a, uint64_t off, size_t *size)
{
    uint64_t start;
    dsm_status_t st = dsm_heap_object_of(a, off, &start, size);
    return st == DSM_OK && start != off ? DSM_ERR_BAD_ADDR : st;   /* only an allocation's start */
}

dsm_status_t dsm_heap_check_range(dsm_heap_alloc_t *a, uint64_t off, uint64_t len)
{
    if (off >= a->size || len > a->size - off)
        return DSM_ERR_BAD_ADDR;
    uint64_t first = off >> DSM_HEAP_BLOCK_SHIFT;
    uint64_t last = len ? (off + len - 1) >> DSM_HEAP_BLOCK_SHIFT : first;
    if (last >= a->nblocks)
        return DSM_ERR_BAD_ADDR;
    for (uint64_t b = first; b <= last; b++)
        if (!dsm_heap_blk_live(load_state(a, b)))
            return DSM_ERR_BAD_ADDR;
    return DSM_OK;
}

void dsm_heap_alloc_usage(dsm_heap_alloc_t *a, uint64_t *allocated, uint64_t *capacity)
{
    uint64_t total = 0;
    pthread_mutex_lock(&a->lock);
    for (uint64_t b = a->first; b < a->nblocks; b++) {
        uint64_t w = load_state(a, b);
        if (dsm_heap_blk_kind(w) == DSM_HEAP_BLK_LARGE) {
            total += dsm_heap_blk_arg(w) << DSM_HEAP_BLOCK_SHIFT;
        } else if (dsm_heap_blk_kind(w) == DSM_HEAP_BLK_SMALL && a->descs[b]) {
            blk_desc_t *d = a->descs[b];
            total += (uint64_t)__atomic_load_n(&d->nused, __ATOMIC_RELAXED) * d->obj_size;
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (allocated)
        *allocated = total;
    if (capacity)
        *capacity = (a->nblocks - a->first) << DSM_HEAP_BLOCK_SHIFT;
}

void *dsm_heap_alloc_base(const dsm_heap_alloc_t *a) { return a->base; }
uint64_t dsm_heap_alloc_size(const dsm_heap_alloc_t *a) { return a->size; }

dsm_status_t dsm_heap_access_check(dsm_heap_alloc_t *a, uint64_t off, uint64_t len, uint16_t tag, size_t *size)
{
    uint64_t start;
    dsm_status_t st = len == 0 ? dsm_heap_usable(a, off, size) : dsm_heap_object_of(a, off, &start, size);
    if (st != DSM_OK)
        return st;
    if (len && (off - start) + len > *size)
        return DSM_ERR_BAD_ADDR;   /* runs past the allocation's end */
    return tag == 0 || dsm_heap_gen_at(a, off) == tag ? DSM_OK : DSM_ERR_BAD_ADDR;
}
