/* A CoRM store's server side (see store.h): the memfd-backed range and its
 * virtual blocks (free, primary = holds a block on its own page, alias = an
 * old block mapped onto the page of the block its objects went to), block
 * metadata, the operations on pointers, and compaction. */
#include "compact/store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "compact/layout.h"
#include "compact/wire.h"
#include "util/mix.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/log.h"

#define LOG_MOD "compact"

enum { VB_FREE = 0, VB_PRIMARY = 1, VB_ALIAS = 2 };
#define NONE UINT32_MAX

typedef struct block {
    uint32_t cls, slot_size, slots, used;
    uint32_t owner;          /* the worker allocator whose class list holds it (= its vblock's owner) */
    int offset_ids;          /* ID = slot + 1 (CoRM-0, or a class with more slots than IDs) */
    uint32_t alias_head;     /* first virtual block aliasing this one */
    uint16_t *slot_id;       /* slot -> ID, 0 free */
    dsm_compact_idtab_t tab;
} block_t;

/* Who guards what (locks taken in this order: worker locks by ascending
 * index, then the range lock):
 * - a worker's lock: its class lists, the blocks it owns (block_t), and the
 *   vblock fields of those primaries and of their aliases (refs, next_alias,
 *   punch_pending): so allocation, free, read, write and release on
 *   different workers' blocks run in parallel;
 * - the range lock: the free stack, the counts of primaries and aliases,
 *   every mmap of the range, every change of a vblock's state, target or
 *   remap_pending (also made under the owner's lock), the remap notices'
 *   pairs and sequence, the binding of threads to workers;
 * - the compaction lock: one round at a time. A merge holds the locks of
 *   both blocks' owners, then the range lock.
 * state, target and owner are also read without a lock (atomically) to find
 * which worker's lock guards a pointer's block, then checked under it. */
typedef struct vblock {
    uint8_t state;
    uint8_t punch_pending;   /* merged away; its page is punched once peers were told */
    uint8_t remap_pending;   /* merged (or aliasing a block merged) away, its mapping not yet moved */
    uint32_t owner;          /* primaries: the worker allocator owning the block */
    uint32_t target;         /* the primary whose page this block maps */
    uint32_t refs;           /* live objects whose origin is this block */
    uint32_t next_alias;     /* chain of the target's aliases */
    block_t *blk;            /* primaries only */
    /* Object IDs (unless offset-only): the k-th allocation made in this
     * block, over all its lives, draws 1 + (id_mul * k + id_add) mod the ID
     * space, skipping IDs the block holds. A freed object's pointer names
     * this block and an ID the block gives out again only after a whole
     * cycle of the space, so the pointer stays refused when the block
     * retires and serves again (an ID drawn at random per allocation comes
     * back once in 2^16 draws, and the pointer would read that object).
     * Blocks' sequences differ (random id_mul, id_add per block), so two
     * blocks share IDs about as seldom as random draws would. */
    uint32_t id_next;
    uint16_t id_mul, id_add;
} vblock_t;

typedef struct class_list {
    uint32_t *v;
    uint32_t n, cap, hint;
} class_list_t;

typedef struct pairs {
    uint8_t *b;
    uint32_t n, cap;
} pairs_t;

struct dsm_compact_store {
    pthread_mutex_t lock;          /* the range lock (see vblock_t) */
    pthread_mutex_t compact_lock;  /* one round at a time */
    pthread_mutex_t wlock[DSM_COMPACT_MAX_WORKERS];
    uint64_t gen;                  /* this store among all created (threads' worker cache) */
    dsm_compact_config_t cfg;
    dsm_compact_store_hooks_t hooks;
    uint32_t rank;
    uint16_t tag;
    int memfd;
    uint8_t *base;
    uint64_t size;
    uint32_t bsize, nblocks;
    uint32_t primaries, max_primaries;  /* blocks with a page of their own, and the bound */
    vblock_t *vb;
    uint32_t *free_stack, nfree;
    /* Per-worker allocators: each worker thread allocates from the blocks of
     * its own class lists; a compaction round (the leader) collects a
     * class's blocks from every worker, merges them, and the survivors go
     * back to their owners. */
    uint32_t nworkers, nbound;
    pthread_t worker_tid[DSM_COMPACT_MAX_WORKERS];
    class_list_t classes[DSM_COMPACT_MAX_WORKERS][DSM_COMPACT_NCLASSES];
    uint64_t wrng[DSM_COMPACT_MAX_WORKERS];   /* each worker's random offsets (offset-only IDs) */
    uint32_t aliases;        /* vblocks in state ALIAS */
    uint32_t alias_cap;      /* aliases the map budget allows */
    uint64_t objects;        /* atomic */
    uint64_t rng;
    uint32_t triggers;       /* atomic */
    /* per class, over every worker's blocks (atomic): for the trigger */
    uint64_t cls_used[DSM_COMPACT_NCLASSES], cls_slots[DSM_COMPACT_NCLASSES], cls_blocks[DSM_COMPACT_NCLASSES];
    pairs_t pending;         /* remaps (merges, identity restores) peers have not been told, in order */
    /* The compaction thread's own (under the compaction lock): merged-away
     * blocks whose mapping still shows their old page, {vblock, target},
     * and the old pages to punch once none is left. */
    pairs_t unmapped, late_punches;
    uint64_t remap_seq;      /* remap batches (notices) so far: the layout's sequence */
};

/* ---- small helpers ---------------------------------------------------------- */

static uint32_t gcd32(uint32_t a, uint32_t b)
{
    while (b) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static uint64_t rng_next(uint64_t *r)
{
    uint64_t x = *r;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *r = x;
}

static void cnt_add(uint64_t *c, int64_t d) { __atomic_fetch_add(c, (uint64_t)d, __ATOMIC_RELAXED); }
static uint64_t cnt_get(const uint64_t *c) { return __atomic_load_n(c, __ATOMIC_RELAXED); }

static int pairs_reserve(pairs_t *p, uint32_t more)
{
    if (p->n + more <= p->cap)
        return 1;
    uint32_t cap = p->cap ? p->cap : 64;
    while (cap < p->n + more)
        cap *= 2;
    uint8_t *b = realloc(p->b, 8 * (size_t)cap);
    if (b == NULL)
        return 0;
    p->b = b;
    p->cap = cap;
    return 1;
}

static int pairs_add(pairs_t *p, uint32_t v, uint32_t target)
{
    if (!pairs_reserve(p, 1))
        return 0;
    dsm_put_u32(p->b + 8 * (size_t)p->n, v);
    dsm_put_u32(p->b + 8 * (size_t)p->n + 4, target);
    p->n++;
    return 1;
}

static uint8_t *page(dsm_compact_store_t *s, uint32_t v) { return s->base + (size_t)v * s->bsize; }

/* Map virtual block v onto file page `target` (v itself restores identity). */
static int map_block(dsm_compact_store_t *s, uint32_t v, uint32_t target)
{
    /* the same flags as the range, so that identity mappings merge back into one VMA */
    void *p = mmap(page(s, v), s->bsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
                   s->memfd, (off_t)target * s->bsize);
    if (p == MAP_FAILED) {
        int e = errno;
        if (e == ENOMEM)   /* the process's mapping count is at vm.max_map_count: the caller says what it gives up */
            DSM_DEBUG(LOG_MOD, "cannot map virtual block %u onto page %u: %s", v, target, strerror(e));
        else
            DSM_ERROR(LOG_MOD, "cannot map virtual block %u onto page %u: %s", v, target, strerror(e));
        errno = e;
        return -1;
    }
    if (s->hooks.remapped)
        s->hooks.remapped(s->hooks.ctx, v);
    return 0;
}

static int by_vblock(const void *x, const void *y)
{
    uint32_t a = dsm_get_u32(x), b = dsm_get_u32(y);
    return a < b ? -1 : a > b;
}

/* Drop the pages of the listed blocks (sorted by block) from the range's
 * mapping, so that the remaps that follow replace mappings no CPU holds.
 * The kernel interrupts the other CPUs to flush their TLBs about once per
 * madvise call (per mapping it zaps in the call), however many pages it
 * drops, but once per entry of a process_madvise list: so the blocks go
 * as spans. A span also drops the pages of the blocks between, which
 * their next access faults back in (the file keeps their data); a flush
 * costs another thread about what a few faults do, so a span takes in no
 * more than SPAN_GAP_PAGES pages between two of its blocks, and stays
 * within 2 MiB (the kernel flushes at least once per 2 MiB it zaps). */
enum { SPAN_GAP_PAGES = 8 };

static void drop_pages(dsm_compact_store_t *s, const pairs_t *u)
{
    if (u->n < 2)
        return;
    uint32_t per_2mib = s->bsize >= (2u << 20) ? 1 : (2u << 20) / s->bsize;
    uint32_t pages = s->bsize / 4096;   /* a block is whole 4 KiB pages */
    for (uint32_t i = 0, j; i < u->n; i = j + 1) {
        uint32_t first = dsm_get_u32(u->b + 8 * (size_t)i), last = first;
        for (j = i; j + 1 < u->n; j++) {
            uint32_t next = dsm_get_u32(u->b + 8 * (size_t)(j + 1));
            if (next / per_2mib != first / per_2mib || (uint64_t)(next - last - 1) * pages > SPAN_GAP_PAGES)
                break;
            last = next;
        }
        if (madvise(page(s, first), (size_t)(last - first + 1) * s->bsize, MADV_DONTNEED) != 0)
            DSM_DEBUG(LOG_MOD, "blocks %u-%u remapped over their pages: %s", first, last, strerror(errno));
    }
}

/* Move the mappings of the blocks merged away since the last call onto
 * their targets (the range lock held), all pages dropped first. A block
 * the kernel would not remap (the process at vm.max_map_count) stays in
 * the list for the next call; until then its old page stays, its objects
 * locked, and readers ask the server. Returns how many it would not. */
static uint32_t apply_remaps(dsm_compact_store_t *s)
{
    pairs_t *u = &s->unmapped;
    if (u->n > 1)
        qsort(u->b, u->n, 8, by_vblock);
    uint32_t keep = 0;
    for (uint32_t i = 0; i < u->n; i++) {
        uint32_t v = dsm_get_u32(u->b + 8 * (size_t)i), t = dsm_get_u32(u->b + 8 * (size_t)i + 4);
        vblock_t *b = &s->vb[v];
        /* retired since (identity restored), or merged on again (the
         * latest entry), or already kept */
        if (!b->remap_pending || b->state != VB_ALIAS || b->target != t ||
            (keep && dsm_get_u32(u->b + 8 * (size_t)(keep - 1)) == v))
            continue;
        memmove(u->b + 8 * (size_t)keep++, u->b + 8 * (size_t)i, 8);
    }
    u->n = keep;
    drop_pages(s, u);
    uint32_t refused = 0;
    keep = 0;
    for (uint32_t i = 0; i < u->n; i++) {
        uint32_t v = dsm_get_u32(u->b + 8 * (size_t)i), t = dsm_get_u32(u->b + 8 * (size_t)i + 4);
        if (map_block(s, v, t) == 0) {
            s->vb[v].remap_pending = 0;
            continue;
        }
        refused++;
        memmove(u->b + 8 * (size_t)keep++, u->b + 8 * (size_t)i, 8);
    }
    u->n = keep;
    return refused;
}

static void punch(dsm_compact_store_t *s, uint32_t pg)
{
    if (fallocate(s->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)pg * s->bsize, s->bsize) != 0)
        DSM_WARN(LOG_MOD, "cannot release page %u: %s", pg, strerror(errno));
}

static void block_free(block_t *b)
{
    if (b) {
        free(b->slot_id);
        free(b->tab.ent);
        free(b);
    }
}

static void class_remove(class_list_t *l, uint32_t v)
{
    for (uint32_t i = 0; i < l->n; i++)
        if (l->v[i] == v) {
            l->v[i] = l->v[--l->n];
            return;
        }
}

static int class_add(class_list_t *l, uint32_t v)
{
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? 2 * l->cap : 16;
        uint32_t *n = realloc(l->v, cap * sizeof *n);
        if (n == NULL)
            return 0;
        l->v = n;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 1;
}

static uint64_t store_gen;   /* stores created so far */
static __thread uint64_t tl_gen;
static __thread uint32_t tl_worker;

/* The worker allocator of the calling thread (no lock held): the first
 * nworkers threads that allocate each bind one; later threads share them by
 * a hash of their thread id. Each thread remembers its worker for the last
 * store it used. */
static uint32_t worker_of(dsm_compact_store_t *s)
{
    if (tl_gen == s->gen)
        return tl_worker;
    pthread_t self = pthread_self();
    uint32_t w;
    pthread_mutex_lock(&s->lock);
    for (w = 0; w < s->nbound; w++)
        if (pthread_equal(s->worker_tid[w], self))
            break;
    if (w == s->nbound) {
        if (s->nbound < s->nworkers) {
            s->worker_tid[s->nbound] = self;
            w = s->nbound++;
        } else {
            uint64_t h = (uint64_t)(uintptr_t)self * DSM_MIX_GOLDEN;
            w = (uint32_t)(h >> 32) % s->nworkers;
        }
    }
    pthread_mutex_unlock(&s->lock);
    tl_gen = s->gen;
    tl_worker = w;
    return w;
}

/* vblock fields read without a lock */
static uint32_t ld32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void st32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static uint8_t ld8(const uint8_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void st8(uint8_t *p, uint8_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

/* Lock the worker that guards virtual block v (the owner of the primary
 * whose page v shows) and return it; -1 (nothing locked) if v is free. */
static int lock_vblock(dsm_compact_store_t *s, uint32_t v)
{
    for (uint32_t tries = 0;; tries++) {
        vblock_t *b = &s->vb[v];
        if (ld8(&b->state) == VB_FREE)
            return -1;
        uint32_t t = ld32(&b->target);
        uint32_t o = t < s->nblocks ? ld32(&s->vb[t].owner) : NONE;
        if (o < s->nworkers) {
            pthread_mutex_lock(&s->wlock[o]);
            if (b->state == VB_FREE) {
                pthread_mutex_unlock(&s->wlock[o]);
                return -1;
            }
            t = b->target;
            if (s->vb[t].state == VB_PRIMARY && s->vb[t].owner == o)
                return (int)o;
            pthread_mutex_unlock(&s->wlock[o]);
        }
        if (tries > 100000) {   /* an invariant broke: never a caller's error */
            DSM_ERROR(LOG_MOD, "virtual block %u shows no block with an owner", v);
            return -1;
        }
        sched_yield();   /* it is being allocated, merged or retired right now */
    }
}

static void lock_all(dsm_compact_store_t *s)
{
    for (uint32_t w = 0; w < s->nworkers; w++)
        pthread_mutex_lock(&s->wlock[w]);
    pthread_mutex_lock(&s->lock);
}

static void unlock_all(dsm_compact_store_t *s)
{
    pthread_mutex_unlock(&s->lock);
    for (uint32_t w = s->nworkers; w-- > 0;)
        pthread_mutex_unlock(&s->wlock[w]);
}

/* ---- create / destroy --------------------------------------------------------- */

static uint32_t default_alias_cap(uint32_t budget)
{
    if (budget == 0) {
        unsigned long max = 65530;
        FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
        if (f) {
            if (fscanf(f, "%lu", &max) != 1)
                max = 65530;
            fclose(f);
        }
        budget = (uint32_t)(max / 4);
    }
    return budget / 2;   /* an alias splits its mapping in up to three: two more */
}

dsm_status_t dsm_compact_store_create(const dsm_compact_config_t *cfg, uint32_t rank, uint16_t key_tag,
                                   const dsm_compact_store_hooks_t *hooks, dsm_compact_store_t **out)
{
    if (cfg == NULL || out == NULL || cfg->range_size == 0 || cfg->block_size < DSM_COMPACT_MIN_BLOCK ||
        cfg->block_size > DSM_COMPACT_MAX_BLOCK || cfg->block_size % 4096 || cfg->range_size % cfg->block_size ||
        cfg->range_size / cfg->block_size >= (1u << 23) || cfg->range_size >= (1ull << 39) ||
        (cfg->id_bits != 0 && cfg->id_bits != 8 && cfg->id_bits != 12 && cfg->id_bits != 16) ||
        cfg->workers > DSM_COMPACT_MAX_WORKERS)
        return DSM_ERR_INVALID;
    dsm_compact_store_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return DSM_ERR_NOMEM;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->compact_lock, NULL);
    for (uint32_t w = 0; w < DSM_COMPACT_MAX_WORKERS; w++)
        pthread_mutex_init(&s->wlock[w], NULL);
    s->gen = __atomic_add_fetch(&store_gen, 1, __ATOMIC_RELAXED);
    s->cfg = *cfg;
    if (hooks)
        s->hooks = *hooks;
    s->rank = rank;
    s->tag = key_tag;
    s->bsize = cfg->block_size;
    s->nworkers = cfg->workers ? cfg->workers : 1;
    /* Twice the memory served in virtual blocks: old blocks that compaction
     * aliased keep their addresses while their pages are reused. */
    s->size = 2 * cfg->range_size;
    s->max_primaries = (uint32_t)(cfg->range_size / cfg->block_size);
    s->nblocks = 2 * s->max_primaries;
    s->alias_cap = default_alias_cap(cfg->map_budget);
    s->base = MAP_FAILED;
    if (getrandom(&s->rng, sizeof s->rng, 0) != sizeof s->rng || s->rng == 0)
        s->rng = DSM_MIX_GOLDEN ^ (uint64_t)(uintptr_t)s;
    /* Each worker's stream from the seed through a mixing function: seeded
     * with successive outputs of one xorshift, worker w + 1's stream would
     * be worker w's one draw later. */
    for (uint32_t w = 0; w < DSM_COMPACT_MAX_WORKERS; w++)
        while ((s->wrng[w] = dsm_mix64(s->rng + DSM_MIX_GOLDEN * (w + 1))) == 0)
            s->rng++;
    s->memfd = memfd_create("dsm-compact", MFD_CLOEXEC);
    s->vb = calloc(s->nblocks, sizeof *s->vb);
    s->free_stack = calloc(s->nblocks, sizeof *s->free_stack);
    if (s->memfd < 0 || s->vb == NULL || s->free_stack == NULL || ftruncate(s->memfd, (off_t)s->size) != 0) {
        DSM_ERROR(LOG_MOD, "cannot create a %llu-byte store: %s", (unsigned long long)s->size, strerror(errno));
        dsm_compact_store_destroy(s);
        return DSM_ERR_NOMEM;
    }
    /* One shared mapping of the whole file at matching offsets: the range is
     * one VMA until compaction aliases blocks. */
    s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, s->memfd, 0);
    if (s->base == MAP_FAILED) {
        DSM_ERROR(LOG_MOD, "cannot reserve the store's range: %s", strerror(errno));
        dsm_compact_store_destroy(s);
        return DSM_ERR_NOMEM;
    }
    uint32_t ids = (1u << s->cfg.id_bits) - 1;
    uint64_t seq = s->rng;
    for (uint32_t i = 0; i < s->nblocks; i++) {
        s->vb[i].target = i;
        s->vb[i].next_alias = NONE;
        s->free_stack[s->nfree++] = s->nblocks - 1 - i;   /* lowest block first */
        if (s->cfg.id_bits) {   /* a multiplier prime to the space: the sequence is a permutation */
            uint64_t r;
            do
                r = dsm_splitmix64(&seq);
            while (gcd32((uint32_t)(r % ids), ids) != 1);
            s->vb[i].id_mul = (uint16_t)(r % ids);
            s->vb[i].id_add = (uint16_t)((r >> 32) % ids);
        }
    }
    *out = s;
    return DSM_OK;
}

void dsm_compact_store_destroy(dsm_compact_store_t *s)
{
    if (s == NULL)
        return;
    if (s->vb)
        for (uint32_t i = 0; i < s->nblocks; i++)
            block_free(s->vb[i].blk);
    for (uint32_t w = 0; w < DSM_COMPACT_MAX_WORKERS; w++)
        for (int c = 0; c < DSM_COMPACT_NCLASSES; c++)
            free(s->classes[w][c].v);
    if (s->base != MAP_FAILED && s->base != NULL)
        munmap(s->base, s->size);
    if (s->memfd >= 0)
        close(s->memfd);
    free(s->vb);
    free(s->free_stack);
    free(s->pending.b);
    free(s->unmapped.b);
    free(s->late_punches.b);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->compact_lock);
    for (uint32_t w = 0; w < DSM_COMPACT_MAX_WORKERS; w++)
        pthread_mutex_destroy(&s->wlock[w]);
    free(s);
}

void dsm_compact_store_set_rank(dsm_compact_store_t *s, uint32_t rank) { st32(&s->rank, rank); }

uint8_t *dsm_compact_store_base(const dsm_compact_store_t *s) { return s->base; }
uint64_t dsm_compact_store_size(const dsm_compact_store_t *s) { return s->size; }
uint32_t dsm_compact_store_block_size(const dsm_compact_store_t *s) { return s->bsize; }
int dsm_compact_store_memfd(const dsm_compact_store_t *s) { return s->memfd; }

/* ---- virtual blocks ------------------------------------------------------------ */

static block_t *block_new(dsm_compact_store_t *s, uint32_t cls, uint32_t owner)
{
    block_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->cls = cls;
    b->owner = owner;
    b->slot_size = dsm_compact_class_slot(cls);
    b->slots = s->bsize / b->slot_size;
    b->offset_ids = s->cfg.id_bits == 0 || b->slots > (1u << s->cfg.id_bits) - 1;
    b->alias_head = NONE;
    b->slot_id = calloc(b->slots, sizeof *b->slot_id);
    b->tab.cap = dsm_compact_idtab_cap(b->slots);
    b->tab.ent = calloc(b->tab.cap, sizeof *b->tab.ent);
    b->tab.slot_id = b->slot_id;
    if (b->slot_id == NULL || b->tab.ent == NULL) {
        block_free(b);
        return NULL;
    }
    return b;
}

/* An alias nothing originates from any more (its owner's lock held): restore
 * its identity mapping (its own page was punched, so it reads zeros) and
 * make it reusable. Peers hear of it with the next notice; until then their
 * stale view of it fails validation (no live object has this block as
 * origin). */
static void alias_retire(dsm_compact_store_t *s, uint32_t v)
{
    vblock_t *a = &s->vb[v];
    /* Not before its old page is punched: reused now, the punch would hit
     * the new block's objects. The compaction round retires it then. */
    if (a->punch_pending)
        return;
    block_t *t = s->vb[a->target].blk;
    pthread_mutex_lock(&s->lock);
    if (map_block(s, v, v) != 0) {
        pthread_mutex_unlock(&s->lock);
        return;   /* stays an alias, harmlessly: no object names it */
    }
    for (uint32_t *pp = &t->alias_head; *pp != NONE; pp = &s->vb[*pp].next_alias)
        if (*pp == v) {
            *pp = a->next_alias;
            break;
        }
    st8(&a->state, VB_FREE);
    st32(&a->target, v);
    a->remap_pending = 0;
    a->next_alias = NONE;
    s->aliases--;
    s->free_stack[s->nfree++] = v;
    (void)pairs_add(&s->pending, v, v);
    pthread_mutex_unlock(&s->lock);
}

/* A primary with no objects and no aliases (its owner's lock held): release
 * its page and the virtual block. An empty primary that aliases still show
 * stays until the last of them is retired (a merged-away block waiting for
 * its punch). */
static void primary_maybe_retire(dsm_compact_store_t *s, uint32_t v)
{
    vblock_t *p = &s->vb[v];
    if (p->state != VB_PRIMARY || p->blk->used != 0 || p->blk->alias_head != NONE)
        return;
    block_t *b = p->blk;
    class_remove(&s->classes[b->owner][b->cls], v);
    cnt_add(&s->cls_slots[b->cls], -(int64_t)b->slots);
    cnt_add(&s->cls_blocks[b->cls], -1);
    pthread_mutex_lock(&s->lock);
    st8(&p->state, VB_FREE);
    p->blk = NULL;
    s->primaries--;
    punch(s, v);
    s->free_stack[s->nfree++] = v;
    pthread_mutex_unlock(&s->lock);
    block_free(b);
}

static void origin_unref(dsm_compact_store_t *s, uint32_t origin)
{
    vblock_t *o = &s->vb[origin];
    if (o->refs > 0)
        o->refs--;
    if (o->refs == 0 && o->state == VB_ALIAS)
        alias_retire(s, origin);
}

/* ---- pointers --------------------------------------------------------------------- */

typedef struct found {
    uint32_t v, primary, slot;
    int owner;               /* the worker whose lock the caller holds */
    block_t *blk;
    uint8_t *slotp;
    dsm_compact_ptr_fields_t f;
} found_t;

/* Find *ptr's object; on DSM_OK the owner's lock is held (unlock_found). */
static dsm_status_t resolve(dsm_compact_store_t *s, const dsm_compact_ptr_t *ptr, found_t *x)
{
    dsm_compact_ptr_decode(ptr, &x->f);
    uint32_t rank = ld32(&s->rank);
    if (x->f.key_tag != s->tag || x->f.rank != rank) {
        DSM_WARN(LOG_MOD, "pointer with key tag %u for rank %u refused: not this store's (tag %u, rank %u)",
                 x->f.key_tag, x->f.rank, s->tag, rank);
        return DSM_ERR_INVALID;
    }
    if (x->f.offset >= s->size || x->f.size_class >= DSM_COMPACT_NCLASSES || x->f.id == 0)
        return DSM_ERR_BAD_ADDR;
    x->v = (uint32_t)(x->f.offset / s->bsize);
    x->owner = lock_vblock(s, x->v);
    if (x->owner < 0) {
        DSM_DEBUG(LOG_MOD, "pointer into block %u, which holds no objects", x->v);
        return DSM_ERR_BAD_ADDR;
    }
    x->primary = s->vb[x->v].target;
    x->blk = s->vb[x->primary].blk;
    int slot = x->blk->cls == x->f.size_class ? dsm_compact_idtab_find(&x->blk->tab, x->f.id) : -1;
    if (slot >= 0) {
        x->slot = (uint32_t)slot;
        x->slotp = page(s, x->primary) + (size_t)slot * x->blk->slot_size;
        /* The ID names an object of this block only if it came from the
         * pointer's block: otherwise the pointer's object is gone. */
        if (dsm_get_u32(x->slotp + 8) == x->v)
            return DSM_OK;
    }
    pthread_mutex_unlock(&s->wlock[x->owner]);
    return DSM_ERR_BAD_ADDR;
}

static void unlock_found(dsm_compact_store_t *s, const found_t *x) { pthread_mutex_unlock(&s->wlock[x->owner]); }

static dsm_compact_ptr_t ptr_for(dsm_compact_store_t *s, const found_t *x, uint32_t v)
{
    dsm_compact_ptr_fields_t f = x->f;
    f.offset = (uint64_t)v * s->bsize + (uint64_t)x->slot * x->blk->slot_size;
    f.version = dsm_get_u32(x->slotp + 4);
    return dsm_compact_ptr_make(&f);
}

static void lock_slot(uint8_t *slotp) { __atomic_store_n(&slotp[1], DSM_COMPACT_LOCK_WRITE, __ATOMIC_SEQ_CST); }
static void unlock_slot(uint8_t *slotp) { __atomic_store_n(&slotp[1], 0, __ATOMIC_RELEASE); }

/* Rewrite an object in place under its write lock with a new version. */
static void rewrite(uint8_t *slotp, uint32_t slot_size, uint16_t id, uint32_t origin, const void *data, uint32_t len)
{
    uint32_t version = dsm_get_u32(slotp + 4) + 1;
    if (version == 0)
        version = 1;
    lock_slot(slotp);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    dsm_compact_obj_pack(slotp, slot_size, DSM_COMPACT_LOCK_WRITE, id, version, origin, data, len);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    unlock_slot(slotp);
}

/* ---- operations ------------------------------------------------------------------------ */

/* A new primary of class cls for worker w (w's lock held); NONE if none is left. */
static uint32_t primary_new(dsm_compact_store_t *s, uint32_t cls, uint32_t w)
{
    block_t *b = block_new(s, cls, w);
    class_list_t *l = &s->classes[w][cls];
    if (b == NULL || !class_add(l, NONE)) {
        block_free(b);
        return NONE;
    }
    pthread_mutex_lock(&s->lock);
    if (s->nfree == 0 || s->primaries >= s->max_primaries) {
        pthread_mutex_unlock(&s->lock);
        l->n--;
        block_free(b);
        return NONE;
    }
    uint32_t v = s->free_stack[--s->nfree];
    vblock_t *p = &s->vb[v];
    p->blk = b;
    p->refs = 0;
    st32(&p->owner, w);
    st32(&p->target, v);
    st8(&p->state, VB_PRIMARY);   /* last: a lock-free reader sees the owner first */
    s->primaries++;
    pthread_mutex_unlock(&s->lock);
    l->v[l->n - 1] = v;
    l->hint = l->n - 1;
    cnt_add(&s->cls_slots[cls], b->slots);
    cnt_add(&s->cls_blocks[cls], 1);
    return v;
}

dsm_status_t dsm_compact_store_alloc(dsm_compact_store_t *s, uint64_t size, dsm_compact_ptr_t *out)
{
    int cls = dsm_compact_class_for(size);
    if (cls < 0 || dsm_compact_class_slot((uint32_t)cls) > s->bsize)
        return DSM_ERR_TOO_BIG;
    uint32_t w = worker_of(s);
    pthread_mutex_lock(&s->wlock[w]);
    class_list_t *l = &s->classes[w][cls];
    uint32_t v = NONE;
    for (uint32_t k = 0; k < l->n; k++) {
        uint32_t i = (l->hint + k) % l->n;
        block_t *b = s->vb[l->v[i]].blk;
        if (b->used < b->slots) {
            v = l->v[i];
            l->hint = i;
            break;
        }
    }
    if (v == NONE && (v = primary_new(s, (uint32_t)cls, w)) == NONE) {
        pthread_mutex_unlock(&s->wlock[w]);
        /* any class's merge frees a block this one can use */
        __atomic_fetch_or(&s->triggers, (1u << DSM_COMPACT_NCLASSES) - 1, __ATOMIC_RELAXED);
        if (s->hooks.trigger)
            s->hooks.trigger(s->hooks.ctx);
        return DSM_ERR_NOMEM;
    }
    block_t *b = s->vb[v].blk;
    uint32_t slot = 0;
    if (b->offset_ids) {
        /* Offset-only merging needs random offsets (Mesh). */
        uint32_t start = (uint32_t)(rng_next(&s->wrng[w]) % b->slots);
        for (uint32_t k = 0; k < b->slots; k++)
            if (b->slot_id[(start + k) % b->slots] == 0) {
                slot = (start + k) % b->slots;
                break;
            }
    } else {
        while (b->slot_id[slot] != 0)
            slot++;
    }
    uint16_t id;
    if (b->offset_ids) {
        id = (uint16_t)(slot + 1);
    } else {
        /* ends within one cycle: a block that is not offset-only has no
         * more slots than IDs, and one of them is free */
        uint32_t ids = (1u << s->cfg.id_bits) - 1;
        vblock_t *vb = &s->vb[v];
        do
            id = (uint16_t)(1 + ((uint64_t)vb->id_mul * (vb->id_next++ % ids) + vb->id_add) % ids);
        while (dsm_compact_idtab_find(&b->tab, id) >= 0);
    }
    b->slot_id[slot] = id;
    dsm_compact_idtab_insert(&b->tab, id, slot);
    b->used++;
    s->vb[v].refs++;
    cnt_add(&s->objects, 1);
    cnt_add(&s->cls_used[cls], 1);
    found_t x = {.v = v, .primary = v, .slot = slot, .blk = b};
    x.slotp = page(s, v) + (size_t)slot * b->slot_size;
    rewrite(x.slotp, b->slot_size, id, v, NULL, 0);
    x.f = (dsm_compact_ptr_fields_t){.rank = ld32(&s->rank), .size_class = (uint32_t)cls, .id = id, .key_tag = s->tag};
    *out = ptr_for(s, &x, v);
    pthread_mutex_unlock(&s->wlock[w]);
    return DSM_OK;
}

/* Free slots over the class's blocks above the threshold (counters read
 * without a lock: a trigger is a hint). */
static int class_fragmented(dsm_compact_store_t *s, uint32_t cls)
{
    if (s->cfg.frag_threshold <= 0)
        return 0;
    uint64_t used = cnt_get(&s->cls_used[cls]), slots = cnt_get(&s->cls_slots[cls]);
    return cnt_get(&s->cls_blocks[cls]) >= 2 && slots > 0 && 1.0 - (double)used / (double)slots > s->cfg.frag_threshold;
}

dsm_status_t dsm_compact_store_free(dsm_compact_store_t *s, const dsm_compact_ptr_t *ptr)
{
    found_t x;
    dsm_status_t st = resolve(s, ptr, &x);
    if (st != DSM_OK)
        return st;
    block_t *b = x.blk;
    uint32_t cls = b->cls;
    /* ID 0 under the lock, then a new version: readers see "no object". */
    rewrite(x.slotp, b->slot_size, 0, 0, NULL, 0);
    dsm_compact_idtab_remove(&b->tab, x.f.id);
    b->slot_id[x.slot] = 0;
    b->used--;
    cnt_add(&s->objects, -1);
    cnt_add(&s->cls_used[cls], -1);
    origin_unref(s, x.v);
    primary_maybe_retire(s, x.primary);
    unlock_found(s, &x);
    if (class_fragmented(s, cls)) {
        __atomic_fetch_or(&s->triggers, 1u << cls, __ATOMIC_RELAXED);
        if (s->hooks.trigger)
            s->hooks.trigger(s->hooks.ctx);
    }
    return DSM_OK;
}

dsm_status_t dsm_compact_store_read(dsm_compact_store_t *s, dsm_compact_ptr_t *ptr, void *buf, size_t cap, size_t *len)
{
    found_t x;
    dsm_status_t st = resolve(s, ptr, &x);
    if (st != DSM_OK)
        return st;
    size_t n = 0;
    dsm_compact_check_t c = dsm_compact_obj_check(x.slotp, x.blk->slot_size, x.f.id, x.v, buf, cap, &n, NULL);
    if (c == DSM_COMPACT_SMALL)
        st = DSM_ERR_TOO_BIG;
    else if (c != DSM_COMPACT_VALID)
        st = DSM_ERR_STATE;   /* cannot happen under the lock: a bug, not an input */
    if (len)
        *len = n;
    *ptr = ptr_for(s, &x, x.v);
    unlock_found(s, &x);
    return st;
}

dsm_status_t dsm_compact_store_write(dsm_compact_store_t *s, dsm_compact_ptr_t *ptr, const void *data, size_t len)
{
    found_t x;
    dsm_status_t st = resolve(s, ptr, &x);
    if (st != DSM_OK)
        return st;
    if (len > dsm_compact_slot_capacity(x.blk->slot_size)) {
        st = DSM_ERR_TOO_BIG;
    } else {
        rewrite(x.slotp, x.blk->slot_size, x.f.id, x.v, data, (uint32_t)len);
        *ptr = ptr_for(s, &x, x.v);
    }
    unlock_found(s, &x);
    return st;
}

dsm_status_t dsm_compact_store_release(dsm_compact_store_t *s, dsm_compact_ptr_t *ptr)
{
    found_t x;
    dsm_status_t st = resolve(s, ptr, &x);
    if (st != DSM_OK)
        return st;
    if (x.v != x.primary) {
        uint32_t len = dsm_get_u32(x.slotp + 12);
        uint8_t tmp[4096];
        size_t n = 0;
        if (dsm_compact_obj_check(x.slotp, x.blk->slot_size, x.f.id, x.v, tmp, sizeof tmp, &n, NULL) != DSM_COMPACT_VALID ||
            n != len) {
            st = DSM_ERR_STATE;
        } else {
            rewrite(x.slotp, x.blk->slot_size, x.f.id, x.primary, tmp, len);
            s->vb[x.primary].refs++;
            origin_unref(s, x.v);
        }
    }
    if (st == DSM_OK)
        *ptr = ptr_for(s, &x, x.primary);
    unlock_found(s, &x);
    return st;
}

int dsm_compact_store_owner(dsm_compact_store_t *s, const dsm_compact_ptr_t *ptr, uint32_t *primary)
{
    found_t x;
    if (resolve(s, ptr, &x) != DSM_OK)
        return -1;
    if (primary)
        *primary = x.primary;
    int owner = (int)x.blk->owner;
    unlock_found(s, &x);
    return owner;
}

uint32_t dsm_compact_store_take_triggers(dsm_compact_store_t *s)
{
    return __atomic_exchange_n(&s->triggers, 0, __ATOMIC_RELAXED);
}

void dsm_compact_store_usage(dsm_compact_store_t *s, dsm_compact_usage_t *out)
{
    memset(out, 0, sizeof *out);
    lock_all(s);
    for (uint32_t w = 0; w < s->nworkers; w++)
        for (int c = 0; c < DSM_COMPACT_NCLASSES; c++) {
            class_list_t *l = &s->classes[w][c];
            out->blocks += l->n;
            out->class_blocks[c] += l->n;
            for (uint32_t i = 0; i < l->n; i++) {
                block_t *b = s->vb[l->v[i]].blk;
                out->object_bytes += (uint64_t)b->used * b->slot_size;
                out->class_objects[c] += b->used;
            }
        }
    out->active_bytes = out->blocks * s->bsize;
    out->alias_blocks = s->aliases;
    out->objects = cnt_get(&s->objects);
    out->map_budget = 2ull * s->alias_cap;
    out->map_used = 2ull * s->aliases;
    out->block_size = s->bsize;
    unlock_all(s);
}

/* ---- compaction ---------------------------------------------------------------------------- */

/* Merge primary src into primary dst (both owners' locks held; takes the
 * range lock). The source objects get the compaction bit and keep it: a
 * reader whose view still maps the source page sees them locked until the
 * page is punched, then zeros. The remaps join the pending pairs, in order
 * with every other remap. */
static dsm_status_t merge(dsm_compact_store_t *s, uint32_t src, uint32_t dst, pairs_t *punches,
                          dsm_compact_stats_t *stats)
{
    block_t *a = s->vb[src].blk, *b = s->vb[dst].blk;
    uint16_t to[a->slots];
    uint32_t moved = 0;
    if (dsm_compact_plan_merge(a->slot_id, b->slot_id, a->slots, to, &moved) != DSM_OK)
        return DSM_ERR_EXISTS;
    pthread_mutex_lock(&s->lock);
    uint32_t k = 1;
    for (uint32_t w = a->alias_head; w != NONE; w = s->vb[w].next_alias)
        k++;
    if (s->aliases + 1 > s->alias_cap) {
        stats->refused_budget++;
        DSM_ERROR(LOG_MOD,
                  "compaction refused: aliasing %u more block would pass the mapping budget "
                  "(%u aliased blocks of %u allowed, 2 mappings each; see vm.max_map_count)",
                  1u, s->aliases, s->alias_cap);
        pthread_mutex_unlock(&s->lock);
        return DSM_ERR_NOMEM;
    }
    if (!pairs_reserve(&s->unmapped, k)) {
        pthread_mutex_unlock(&s->lock);
        return DSM_ERR_NOMEM;
    }
    uint8_t *sp = page(s, src), *dp = page(s, dst);
    uint32_t ss = a->slot_size;
    for (uint32_t i = 0; i < a->slots; i++)
        if (a->slot_id[i])
            __atomic_fetch_or(&sp[(size_t)i * ss + 1], DSM_COMPACT_LOCK_COMPACT, __ATOMIC_SEQ_CST);
    for (uint32_t i = 0; i < a->slots; i++) {
        if (!a->slot_id[i])
            continue;
        uint8_t *d = dp + (size_t)to[i] * ss;
        memcpy(d, sp + (size_t)i * ss, ss);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        unlock_slot(d);
        b->slot_id[to[i]] = a->slot_id[i];
        dsm_compact_idtab_insert(&b->tab, a->slot_id[i], to[i]);
        b->used++;
    }
    /* Every virtual block that showed src's page now shows dst's: its
     * mapping moves with the batch's (apply_remaps); until then it shows
     * src's page, whose objects stay locked. */
    uint32_t chain[k], n = 0;
    chain[n++] = src;
    for (uint32_t w = a->alias_head; w != NONE; w = s->vb[w].next_alias)
        chain[n++] = w;
    for (uint32_t i = 0; i < n; i++) {
        (void)pairs_add(&s->unmapped, chain[i], dst);   /* reserved above */
        s->vb[chain[i]].remap_pending = 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        vblock_t *w = &s->vb[chain[i]];
        st32(&w->target, dst);
        st8(&w->state, VB_ALIAS);
        w->next_alias = b->alias_head;
        b->alias_head = chain[i];
        if (!pairs_add(&s->pending, chain[i], dst))
            DSM_WARN(LOG_MOD, "remap notice truncated (no memory): peers fall back to slower reads");
    }
    s->aliases += 1;   /* src's own aliases were aliases already */
    s->primaries--;
    pthread_mutex_unlock(&s->lock);
    class_remove(&s->classes[a->owner][a->cls], src);
    cnt_add(&s->cls_slots[a->cls], -(int64_t)a->slots);
    cnt_add(&s->cls_blocks[a->cls], -1);
    (void)pairs_add(punches, src, src);
    s->vb[src].punch_pending = 1;
    stats->merges++;
    stats->moved += moved;
    stats->kept += a->used - moved;
    s->vb[src].blk = NULL;
    block_free(a);
    return DSM_OK;
}

typedef struct cand {
    uint32_t v, owner, used;
} cand_t;

static int by_used(const void *x, const void *y)
{
    uint32_t a = ((const cand_t *)x)->used, b = ((const cand_t *)y)->used;
    return a < b ? -1 : a > b;
}

/* Lock the owners of two candidates (ascending) and check that both are
 * still primaries of class cls owned by them; 0 (nothing locked) if not. */
static int lock_pair(dsm_compact_store_t *s, const cand_t *x, const cand_t *y, uint32_t cls)
{
    uint32_t lo = x->owner < y->owner ? x->owner : y->owner, hi = x->owner ^ y->owner ^ lo;
    pthread_mutex_lock(&s->wlock[lo]);
    if (hi != lo)
        pthread_mutex_lock(&s->wlock[hi]);
    const cand_t *c[2] = {x, y};
    for (int i = 0; i < 2; i++) {
        vblock_t *b = &s->vb[c[i]->v];
        if (b->state != VB_PRIMARY || b->owner != c[i]->owner || b->blk->cls != cls) {
            if (hi != lo)
                pthread_mutex_unlock(&s->wlock[hi]);
            pthread_mutex_unlock(&s->wlock[lo]);
            return 0;
        }
    }
    return 1;
}

static void unlock_pair(dsm_compact_store_t *s, const cand_t *x, const cand_t *y)
{
    if (x->owner != y->owner)
        pthread_mutex_unlock(&s->wlock[y->owner]);
    pthread_mutex_unlock(&s->wlock[x->owner]);
}

static dsm_status_t compact_class(dsm_compact_store_t *s, uint32_t cls, dsm_compact_stats_t *stats,
                                  pairs_t *punches, uint32_t batch, uint32_t *budget_left, uint64_t deadline)
{
    /* The leader collects the class's blocks that have room from every
     * worker's allocator, one worker's lock at a time; a merge takes only
     * the locks of the two blocks' owners, leaves the destination with its
     * owner and takes the source out of its owner's list. */
    uint32_t n = 0, cap = 0;
    cand_t *cand = NULL;
    for (uint32_t w = 0; w < s->nworkers; w++) {
        pthread_mutex_lock(&s->wlock[w]);
        class_list_t *l = &s->classes[w][cls];
        if (n + l->n > cap) {
            cand_t *c = realloc(cand, (n + l->n) * sizeof *c);
            if (c == NULL) {
                pthread_mutex_unlock(&s->wlock[w]);
                free(cand);
                return DSM_ERR_NOMEM;
            }
            cand = c;
            cap = n + l->n;
        }
        for (uint32_t i = 0; i < l->n; i++) {
            block_t *b = s->vb[l->v[i]].blk;
            if (b->used < b->slots)
                cand[n++] = (cand_t){.v = l->v[i], .owner = w, .used = b->used};
        }
        pthread_mutex_unlock(&s->wlock[w]);
    }
    uint8_t *role = calloc(n + 1, 1);   /* 1 merged away, 2 received */
    if (role == NULL) {
        free(cand);
        return DSM_ERR_NOMEM;
    }
    if (n > 1)
        qsort(cand, n, sizeof *cand, by_used);
    dsm_status_t st = DSM_OK;
    /* The least-used blocks go first (§3.1.4), into the fullest that takes them. */
    /* (a batch merges at least once, however late: a preempted leader
     * must not end the round) */
    for (uint32_t i = 0; i < n && *budget_left > 0 && st == DSM_OK && (*budget_left == batch || dsm_now_ns() < deadline);
         i++) {
        if (role[i])
            continue;
        for (uint32_t j = n; j-- > i + 1;) {
            if (role[j] == 1)
                continue;
            if (!lock_pair(s, &cand[i], &cand[j], cls)) {
                /* one of them was retired (or reused) since it was collected */
                continue;
            }
            dsm_status_t m = merge(s, cand[i].v, cand[j].v, punches, stats);
            unlock_pair(s, &cand[i], &cand[j]);
            if (m == DSM_OK) {
                role[i] = 1;
                role[j] = 2;
                (*budget_left)--;
                break;
            }
            if (m == DSM_ERR_NOMEM) {
                st = m;
                break;
            }
        }
    }
    free(cand);
    free(role);
    return st;
}

/* An old page of a merged-away block (src), once no mapping of the range
 * shows it: punched, and the block retired if nothing originates there. */
static void punch_merged(dsm_compact_store_t *s, uint32_t src)
{
    int o = lock_vblock(s, src);   /* an alias until its punch: never free here */
    punch(s, src);
    if (o < 0)
        return;
    vblock_t *a = &s->vb[src];
    a->punch_pending = 0;
    /* A merged-away block none of whose objects originated there,
     * and the block it shows if that emptied meanwhile. */
    if (a->state == VB_ALIAS && a->refs == 0) {
        uint32_t dst = a->target;
        alias_retire(s, src);
        primary_maybe_retire(s, dst);
    }
    pthread_mutex_unlock(&s->wlock[o]);
}

/* A batch: no lock is held for more than one merge, and peers hear of a
 * batch's remaps (one notice each, a round trip to every mirroring peer)
 * before its old pages are punched, so neither RPCs nor one-sided readers
 * wait for a whole round (§4.3.2: an unbounded run stalled RPCs for 700 ms).
 * A batch ends after MERGE_BATCH merges or BATCH_NS of merging, whichever
 * comes first: merges cost microseconds, a notice's round trip more, so
 * batches as large as the bound allows send the fewest notices and the
 * fewest TLB flushes (apply_remaps). */
enum { MERGE_BATCH = 64, BATCH_NS = 1000000 };

dsm_status_t dsm_compact_store_compact(dsm_compact_store_t *s, int cls, dsm_compact_stats_t *stats)
{
    if (cls < -1 || cls >= DSM_COMPACT_NCLASSES)
        return DSM_ERR_INVALID;
    dsm_compact_stats_t local = {0};
    pairs_t notice = {0}, punches = {0};
    pthread_mutex_lock(&s->compact_lock);
    uint32_t budget = s->cfg.max_merges ? s->cfg.max_merges : 256;
    dsm_status_t st = DSM_OK;
    for (;;) {
        uint32_t batch = budget < MERGE_BATCH ? budget : MERGE_BATCH, left = batch;
        punches.n = 0;
        uint64_t batch_end = dsm_now_ns() + BATCH_NS;
        for (int c = cls < 0 ? 0 : cls; c <= (cls < 0 ? DSM_COMPACT_NCLASSES - 1 : cls) && st == DSM_OK && left; c++)
            st = compact_class(s, (uint32_t)c, &local, &punches, batch, &left, batch_end);
        /* The batch's remaps (and any the kernel refused before), then the
         * notice: every remap since the last one (identity restores from
         * frees and releases, this batch's merges), in the order the range
         * lock saw them. */
        pthread_mutex_lock(&s->lock);
        uint32_t refused = apply_remaps(s);
        int unmapped = s->unmapped.n > 0;
        pairs_t t = notice;
        notice = s->pending;
        s->pending = t;
        s->pending.n = 0;
        uint64_t seq = notice.n ? ++s->remap_seq : s->remap_seq;
        pthread_mutex_unlock(&s->lock);
        if (refused) {
            DSM_ERROR(LOG_MOD,
                      "compaction refused: the kernel would not move %u merged block%s onto %s target (the "
                      "process's mappings are at vm.max_map_count, or map_budget is above what it leaves); "
                      "what was merged stays merged, read through the server until a later round remaps it",
                      refused, refused == 1 ? "" : "s", refused == 1 ? "its" : "their");
            local.refused_budget++;
            if (st == DSM_OK)
                st = DSM_ERR_NOMEM;
        }
        /* Peers that map the memfd remap their views before the old pages go. */
        if (notice.n && s->hooks.notify)
            s->hooks.notify(s->hooks.ctx, seq, notice.b, notice.n);
        /* An old page goes once no mapping shows it: while a remap waits,
         * every punch waits with it (an alias of a waiting block shows its
         * old page too). */
        if (unmapped) {
            for (uint32_t i = 0; i < punches.n; i++) {
                uint32_t src = dsm_get_u32(punches.b + 8 * (size_t)i);
                if (!pairs_add(&s->late_punches, src, src))
                    DSM_WARN(LOG_MOD, "block %u keeps its old page (no memory to remember it)", src);
            }
        } else {
            for (uint32_t i = 0; i < s->late_punches.n; i++)
                punch_merged(s, dsm_get_u32(s->late_punches.b + 8 * (size_t)i));
            s->late_punches.n = 0;
            for (uint32_t i = 0; i < punches.n; i++)
                punch_merged(s, dsm_get_u32(punches.b + 8 * (size_t)i));
        }
        budget -= batch - left;
        if (st != DSM_OK || left == batch || budget == 0)
            break;
    }
    pthread_mutex_unlock(&s->compact_lock);
    free(notice.b);
    free(punches.b);
    if (stats) {
        stats->merges += local.merges;
        stats->moved += local.moved;
        stats->kept += local.kept;
        stats->refused_budget += local.refused_budget;
    }
    return st;
}

dsm_status_t dsm_compact_store_layout(dsm_compact_store_t *s, uint32_t start, uint8_t *pairs, uint32_t max,
                                   uint32_t *n, uint32_t *next, uint64_t *seq)
{
    *n = 0;
    *next = 0;
    if (start >= s->nblocks || max == 0)
        return start >= s->nblocks ? DSM_ERR_BAD_ADDR : DSM_ERR_INVALID;
    pthread_mutex_lock(&s->lock);
    *seq = s->remap_seq;
    for (uint32_t v = start; v < s->nblocks; v++) {
        if (s->vb[v].target == v)
            continue;
        if (*n == max) {
            *next = v;
            break;
        }
        dsm_put_u32(pairs + 8 * (size_t)*n, v);
        dsm_put_u32(pairs + 8 * (size_t)*n + 4, s->vb[v].target);
        (*n)++;
    }
    pthread_mutex_unlock(&s->lock);
    return DSM_OK;
}

/* ---- serving requests ------------------------------------------------------------------------- */

dsm_status_t dsm_compact_store_serve(dsm_compact_store_t *s, const void *req, size_t len, uint8_t *reply, size_t cap,
                                  size_t *reply_len)
{
    *reply_len = 0;
    dsm_compact_msg_t m, r;
    if (dsm_compact_msg_decode(req, len, &m) != DSM_OK) {
        DSM_WARN(LOG_MOD, "malformed request (%zu bytes) refused", len);
        return DSM_ERR_PROTO;
    }
    memset(&r, 0, sizeof r);
    dsm_status_t st;
    uint8_t data[DSM_COMPACT_MSG_MAX_DATA];
    size_t n = 0;
    switch (m.type) {
    case DSM_COMPACT_MSG_ALLOC_REQ:
        r.type = DSM_COMPACT_MSG_ALLOC_REP;
        st = dsm_compact_store_alloc(s, m.size, &r.ptr);
        break;
    case DSM_COMPACT_MSG_FREE_REQ:
        r.type = DSM_COMPACT_MSG_FREE_REP;
        st = dsm_compact_store_free(s, &m.ptr);
        break;
    case DSM_COMPACT_MSG_READ_REQ:
        r.type = DSM_COMPACT_MSG_READ_REP;
        r.ptr = m.ptr;
        st = dsm_compact_store_read(s, &r.ptr, data, sizeof data, &n);
        r.data = data;
        r.len = (uint32_t)n;
        break;
    case DSM_COMPACT_MSG_WRITE_REQ:
        r.type = DSM_COMPACT_MSG_WRITE_REP;
        r.ptr = m.ptr;
        st = dsm_compact_store_write(s, &r.ptr, m.data, m.len);
        break;
    case DSM_COMPACT_MSG_RELEASE_REQ:
        r.type = DSM_COMPACT_MSG_RELEASE_REP;
        r.ptr = m.ptr;
        st = dsm_compact_store_release(s, &r.ptr);
        break;
    case DSM_COMPACT_MSG_USAGE_REQ:
        r.type = DSM_COMPACT_MSG_USAGE_REP;
        dsm_compact_store_usage(s, &r.usage);
        st = DSM_OK;
        break;
    case DSM_COMPACT_MSG_LAYOUT_REQ: {
        r.type = DSM_COMPACT_MSG_LAYOUT_REP;
        uint32_t max = (uint32_t)((cap - DSM_COMPACT_MSG_HEADER_LEN - 16) / 8);
        if (max > DSM_COMPACT_MSG_MAX_LAYOUT)
            max = DSM_COMPACT_MSG_MAX_LAYOUT;
        if (max > sizeof data / 8)
            max = sizeof data / 8;
        st = dsm_compact_store_layout(s, m.start, data, max, &r.nremap, &r.next, &r.seq);
        r.remap = data;
        break;
    }
    case DSM_COMPACT_MSG_COMPACT_REQ:
        /* Not from a handler: the node glue runs it on its own thread. */
        return DSM_ERR_STATE;
    default:
        DSM_WARN(LOG_MOD, "message type %u is not a request to the store", m.type);
        return DSM_ERR_PROTO;
    }
    if (st != DSM_OK)
        return st;
    size_t need = dsm_compact_msg_size(&r);
    if (need == 0 || need > cap)
        return DSM_ERR_TOO_BIG;
    *reply_len = dsm_compact_msg_encode(&r, reply);
    return DSM_OK;
}
