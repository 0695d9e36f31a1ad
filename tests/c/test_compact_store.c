/* A CoRM store without a cluster: what happens while a compaction round
 * tells peers about its remaps (frees, releases and allocations in that
 * window must not lose data to the punch of the old pages), the range as
 * one mapping until blocks are aliased, the reuse of freed blocks, the
 * per-worker allocators a compaction round merges across, and their locks
 * (a merge does not stop other workers' operations), the pages a batch
 * drops before its remaps, and the kernel's limit on mappings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compact/layout.h"
#include "compact/store.h"
#include "dsm/log.h"
#include "util/bytes.h"

enum { SLOTS = 21, BLOCKS = 12, OBJS = SLOTS * BLOCKS };

typedef struct window {
    dsm_compact_store_t *s;
    dsm_compact_ptr_t *live;
    int nlive;
    dsm_compact_ptr_t fresh[OBJS];
    int nfresh;
    uint32_t notices;
} window_t;

static void fill(uint8_t *d, uint32_t tag) { memset(d, (int)(tag % 251) + 1, 150); }

/* A 64-block store with default settings but `workers` (0: the default). */
static dsm_compact_store_t *small_store(uint32_t workers, const dsm_compact_store_hooks_t *hooks)
{
    dsm_compact_config_t cfg;
    dsm_compact_config_init(&cfg);
    cfg.range_size = 64 * 4096;
    if (workers)
        cfg.workers = workers;
    dsm_compact_store_t *s = NULL;
    assert_int_equal(dsm_compact_store_create(&cfg, 0, 5, hooks, &s), DSM_OK);
    return s;
}

/* In the window between remap and punch of the round's first batch: free
 * everything that lives, then allocate and write new objects, which take
 * the just-retired blocks. */
static void during_notify(void *ctx, uint64_t seq, const uint8_t *pairs, uint32_t n)
{
    window_t *w = ctx;
    (void)pairs;
    assert_true(seq > 0);
    w->notices += n;
    if (w->nfresh)
        return;   /* later batches of the round: done already */
    for (int i = 0; i < w->nlive; i++)
        assert_int_equal(dsm_compact_store_free(w->s, &w->live[i]), DSM_OK);
    w->nlive = 0;
    uint8_t d[150];
    for (w->nfresh = 0; w->nfresh < OBJS / 2; w->nfresh++) {
        assert_int_equal(dsm_compact_store_alloc(w->s, 150, &w->fresh[w->nfresh]), DSM_OK);
        fill(d, 1000 + (uint32_t)w->nfresh);
        assert_int_equal(dsm_compact_store_write(w->s, &w->fresh[w->nfresh], d, 150), DSM_OK);
    }
}

static void test_punch_after_window(void **state)
{
    (void)state;
    static window_t w;
    memset(&w, 0, sizeof w);
    dsm_compact_store_hooks_t hooks = {.ctx = &w, .notify = during_notify};
    w.s = small_store(0, &hooks);
    static dsm_compact_ptr_t p[OBJS];
    uint8_t d[150], back[4096];
    for (int i = 0; i < OBJS; i++) {
        assert_int_equal(dsm_compact_store_alloc(w.s, 150, &p[i]), DSM_OK);
        fill(d, (uint32_t)i);
        assert_int_equal(dsm_compact_store_write(w.s, &p[i], d, 150), DSM_OK);
    }
    static dsm_compact_ptr_t live[OBJS];
    for (int i = 0; i < OBJS; i++) {
        if ((i % SLOTS) % 4 == 0)
            live[w.nlive++] = p[i];
        else
            assert_int_equal(dsm_compact_store_free(w.s, &p[i]), DSM_OK);
    }
    w.live = live;
    dsm_compact_stats_t st = {0};
    assert_int_equal(dsm_compact_store_compact(w.s, 2, &st), DSM_OK);
    assert_true(st.merges > 0);
    assert_true(w.notices >= st.merges);
    /* the objects written in the window survived the punch of the old pages */
    for (int i = 0; i < w.nfresh; i++) {
        size_t len = 0;
        assert_int_equal(dsm_compact_store_read(w.s, &w.fresh[i], back, sizeof back, &len), DSM_OK);
        fill(d, 1000 + (uint32_t)i);
        assert_int_equal(len, 150);
        assert_memory_equal(back, d, 150);
    }
    /* the blocks left empty were retired afterwards: no aliases remain */
    dsm_compact_usage_t u;
    dsm_compact_store_usage(w.s, &u);
    assert_int_equal(u.alias_blocks, 0);
    assert_int_equal(u.objects, (uint64_t)w.nfresh);
    dsm_compact_store_destroy(w.s);
}

/* Mappings of the range in /proc/self/maps. */
static int range_maps(const uint8_t *base, uint64_t size)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo < (uintptr_t)base + size && hi > (uintptr_t)base)
            n++;
    }
    fclose(f);
    return n;
}

/* One VMA for the whole range until compaction aliases a block; then a
 * bounded number more (2 per aliased block at most); back to one when the
 * aliases are released. */
static void test_one_mapping(void **state)
{
    (void)state;
    dsm_compact_store_t *s = small_store(0, NULL);
    uint8_t *base = dsm_compact_store_base(s);
    uint64_t size = dsm_compact_store_size(s);
    static dsm_compact_ptr_t p[OBJS];
    for (int i = 0; i < OBJS; i++)
        assert_int_equal(dsm_compact_store_alloc(s, 150, &p[i]), DSM_OK);
    assert_int_equal(range_maps(base, size), 1);
    for (int i = 0; i < OBJS; i++)
        if (i % 4)
            assert_int_equal(dsm_compact_store_free(s, &p[i]), DSM_OK);
    dsm_compact_stats_t st = {0};
    assert_int_equal(dsm_compact_store_compact(s, 2, &st), DSM_OK);
    assert_true(st.merges > 0);
    dsm_compact_usage_t u;
    dsm_compact_store_usage(s, &u);
    int maps = range_maps(base, size);
    assert_true(maps > 1 && maps <= 1 + 2 * (int)u.alias_blocks);
    for (int i = 0; i < OBJS; i += 4)
        assert_int_equal(dsm_compact_store_release(s, &p[i]), DSM_OK);
    dsm_compact_store_usage(s, &u);
    assert_int_equal(u.alias_blocks, 0);
    /* restored identity mappings merge back with their neighbours */
    assert_int_equal(range_maps(base, size), 1);
    dsm_compact_store_destroy(s);
}

/* ---- per-worker allocators ------------------------------------------------- */

enum { WK_PER = 6 * SLOTS };   /* six blocks' worth per worker */

typedef struct worker {
    dsm_compact_store_t *s;
    pthread_barrier_t *bar;
    int keep;                  /* keep every keep-th object */
    uint32_t base;             /* payload tag of its first object */
    dsm_compact_ptr_t p[WK_PER];
    int owner;
    int fresh_owner;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    uint8_t d[150];
    pthread_barrier_wait(w->bar);   /* both threads allocate at once */
    for (int i = 0; i < WK_PER; i++) {
        assert_int_equal(dsm_compact_store_alloc(w->s, 150, &w->p[i]), DSM_OK);
        fill(d, w->base + (uint32_t)i);
        assert_int_equal(dsm_compact_store_write(w->s, &w->p[i], d, 150), DSM_OK);
    }
    w->owner = dsm_compact_store_owner(w->s, &w->p[0], NULL);
    for (int i = 0; i < WK_PER; i++) {
        assert_int_equal(dsm_compact_store_owner(w->s, &w->p[i], NULL), w->owner);
        if (i % w->keep)
            assert_int_equal(dsm_compact_store_free(w->s, &w->p[i]), DSM_OK);
    }
    pthread_barrier_wait(w->bar);   /* the leader compacts */
    pthread_barrier_wait(w->bar);
    /* after the round this worker allocates from its own blocks again */
    dsm_compact_ptr_t q;
    assert_int_equal(dsm_compact_store_alloc(w->s, 150, &q), DSM_OK);
    w->fresh_owner = dsm_compact_store_owner(w->s, &q, NULL);
    return NULL;
}

/* Two worker threads own their blocks; the leader's round collects the
 * class's blocks from both and merges across owners: no object is lost,
 * each keeps its ID, keeps its offset unless that slot was taken (the
 * round's `moved` counts exactly the ones whose offset changed), and every
 * worker allocates from its own blocks afterwards. */
static void test_worker_allocators(void **state)
{
    (void)state;
    dsm_compact_config_t bad;
    dsm_compact_config_init(&bad);
    bad.workers = DSM_COMPACT_MAX_WORKERS + 1;   /* more allocators than a store keeps: refused */
    dsm_compact_store_t *none = NULL;
    assert_int_equal(dsm_compact_store_create(&bad, 0, 5, NULL, &none), DSM_ERR_INVALID);
    assert_null(none);
    dsm_compact_store_t *s = small_store(2, NULL);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 3);
    /* worker a keeps few objects per block, b many: a's blocks are the
     * low-occupancy ones, b's the fullest that can take them */
    static worker_t wk[2];
    memset(wk, 0, sizeof wk);
    wk[0] = (worker_t){.s = s, .bar = &bar, .keep = 7, .base = 0};
    wk[1] = (worker_t){.s = s, .bar = &bar, .keep = 1, .base = 5000};
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&th[k], NULL, worker_main, &wk[k]), 0);
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    assert_true(wk[0].owner >= 0 && wk[1].owner >= 0 && wk[0].owner != wk[1].owner);
    /* b frees a few of its own so its blocks have room */
    for (int i = 0; i < WK_PER; i += 4)
        assert_int_equal(dsm_compact_store_free(s, &wk[1].p[i]), DSM_OK);
    dsm_compact_usage_t before, after;
    dsm_compact_store_usage(s, &before);
    static dsm_compact_ptr_t old[2][WK_PER];
    memcpy(old[0], wk[0].p, sizeof wk[0].p);
    memcpy(old[1], wk[1].p, sizeof wk[1].p);
    dsm_compact_stats_t st = {0};
    assert_int_equal(dsm_compact_store_compact(s, 2, &st), DSM_OK);
    assert_true(st.merges > 0);
    dsm_compact_store_usage(s, &after);
    assert_int_equal(after.objects, before.objects);
    assert_int_equal(after.blocks, before.blocks - st.merges);
    uint8_t d[150], back[4096];
    uint64_t live = 0, changed = 0, crossed = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < WK_PER; i++) {
            if ((k == 0 && i % 7) || (k == 1 && i % 4 == 0))
                continue;   /* freed */
            live++;
            dsm_compact_ptr_t p = old[k][i];
            size_t len = 0;
            assert_int_equal(dsm_compact_store_read(s, &p, back, sizeof back, &len), DSM_OK);
            fill(d, wk[k].base + (uint32_t)i);
            assert_int_equal(len, 150);
            assert_memory_equal(back, d, 150);
            dsm_compact_ptr_fields_t a, b;
            dsm_compact_ptr_decode(&old[k][i], &a);
            dsm_compact_ptr_decode(&p, &b);
            assert_int_equal(b.id, a.id);
            /* the pointer's block stays; only the slot may change */
            assert_int_equal(b.offset / 4096, a.offset / 4096);
            changed += b.offset != a.offset;
            int owner = dsm_compact_store_owner(s, &p, NULL);
            crossed += owner != wk[k].owner;
        }
    assert_int_equal(after.objects, live);
    assert_int_equal(changed, st.moved);
    /* worker a's sparse blocks went into worker b's */
    assert_true(crossed > 0);
    /* the layout a late peer fetches, in pages of two: every aliased block
     * once, onto a block that holds objects, at the round's sequence */
    uint32_t start = 0, total = 0, pages = 0;
    do {
        uint8_t pairs[16];
        uint32_t n = 0, next = 0;
        uint64_t seq = 0;
        assert_int_equal(dsm_compact_store_layout(s, start, pairs, 2, &n, &next, &seq), DSM_OK);
        assert_true(seq > 0);
        assert_true(next == 0 || next > start);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t v = dsm_get_u32(pairs + 8 * i), t = dsm_get_u32(pairs + 8 * i + 4);
            assert_true(v >= start && v != t);
        }
        total += n;
        pages++;
        start = next;
    } while (start != 0);
    assert_int_equal(total, after.alias_blocks);
    assert_int_equal(total, st.merges);
    assert_true(pages >= total / 2);
    pthread_barrier_wait(&bar);
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(wk[k].fresh_owner, wk[k].owner);
    }
    pthread_barrier_destroy(&bar);
    dsm_compact_store_destroy(s);
}

/* ---- per-worker locks --------------------------------------------------------- */

typedef struct in_merge {
    dsm_compact_store_t *s;
    dsm_compact_ptr_t other[4];   /* 32-byte objects of another worker's block */
    int calls, done;
} in_merge_t;

static void *other_worker(void *arg)
{
    in_merge_t *m = arg;
    uint8_t d[32];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(dsm_compact_store_alloc(m->s, 32, &m->other[i]), DSM_OK);
        memset(d, 0x40 + i, sizeof d);
        assert_int_equal(dsm_compact_store_write(m->s, &m->other[i], d, sizeof d), DSM_OK);
    }
    return NULL;
}

/* Another worker's block written, read and freed from. */
static void *other_ops(void *arg)
{
    in_merge_t *m = arg;
    uint8_t d[32], back[64];
    size_t len = 0;
    memset(d, 0x7e, sizeof d);
    assert_int_equal(dsm_compact_store_write(m->s, &m->other[0], d, sizeof d), DSM_OK);
    assert_int_equal(dsm_compact_store_read(m->s, &m->other[0], back, sizeof back, &len), DSM_OK);
    assert_int_equal(len, sizeof d);
    assert_memory_equal(back, d, sizeof d);
    assert_int_equal(dsm_compact_store_free(m->s, &m->other[1]), DSM_OK);
    assert_int_equal(dsm_compact_store_read(m->s, &m->other[1], back, sizeof back, &len), DSM_ERR_BAD_ADDR);
    m->done = 1;
    return NULL;
}

/* Called in the middle of the first merge, while the leader holds the lock
 * of the merged blocks' owner and the range lock: another thread works on
 * another worker's block meanwhile, to the end (with one store lock it
 * would wait for the merge, which waits for it here: a hang). */
static void remapped_mid_merge(void *ctx, uint32_t vblock)
{
    in_merge_t *m = ctx;
    (void)vblock;
    if (m->calls++)
        return;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, other_ops, m), 0);
    pthread_join(th, NULL);
}

/* A merge holds only the locks of the two blocks' owners (and the range
 * lock): another worker's blocks serve writes, reads and frees meanwhile,
 * and the merge still moves every object intact. */
static void test_worker_locks(void **state)
{
    (void)state;
    static in_merge_t m;
    memset(&m, 0, sizeof m);
    dsm_compact_store_hooks_t hooks = {.ctx = &m, .remapped = remapped_mid_merge};
    m.s = small_store(2, &hooks);
    static dsm_compact_ptr_t p[OBJS];
    uint8_t d[150], back[4096];
    /* this thread binds worker 0: 150-byte objects, three in four freed */
    for (int i = 0; i < OBJS; i++) {
        assert_int_equal(dsm_compact_store_alloc(m.s, 150, &p[i]), DSM_OK);
        fill(d, (uint32_t)i);
        assert_int_equal(dsm_compact_store_write(m.s, &p[i], d, 150), DSM_OK);
    }
    for (int i = 0; i < OBJS; i++)
        if (i % 4)
            assert_int_equal(dsm_compact_store_free(m.s, &p[i]), DSM_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, other_worker, &m), 0);   /* binds worker 1 */
    pthread_join(th, NULL);
    assert_int_equal(dsm_compact_store_owner(m.s, &m.other[0], NULL), 1);
    assert_int_equal(dsm_compact_store_owner(m.s, &p[0], NULL), 0);
    dsm_compact_stats_t st = {0};
    assert_int_equal(dsm_compact_store_compact(m.s, dsm_compact_class_for(150), &st), DSM_OK);
    assert_true(st.merges > 0);
    assert_int_equal(m.done, 1);
    for (int i = 0; i < OBJS; i += 4) {
        size_t len = 0;
        assert_int_equal(dsm_compact_store_read(m.s, &p[i], back, sizeof back, &len), DSM_OK);
        fill(d, (uint32_t)i);
        assert_int_equal(len, 150);
        assert_memory_equal(back, d, 150);
    }
    dsm_compact_usage_t u;
    dsm_compact_store_usage(m.s, &u);
    assert_int_equal(u.objects, OBJS / 4 + 3);
    dsm_compact_store_destroy(m.s);
}

/* Worker threads allocate, write, read, release and free their own objects
 * (each payload names its object and write) while the leader compacts in a
 * loop: every read returns the last write, every free succeeds once, and
 * the counts add up. */
enum { ST_WORKERS = 3, ST_OBJS = 160, ST_MAX_SECONDS = 60, ST_MERGES = 8 };

typedef struct stress {
    dsm_compact_store_t *s;
    int stop;
    uint32_t seed;
    uint64_t live, errors;
    /* the first failure, to say what failed */
    const char *failed_op;
    dsm_status_t failed_st;
    uint64_t failed_at;
} stress_t;

/* Counts a failure and keeps the first's operation and status. */
static void stress_failed(stress_t *w, const char *op, dsm_status_t st, int at)
{
    if (w->errors++ == 0) {
        w->failed_op = op;
        w->failed_st = st;
        w->failed_at = (uint64_t)at;
    }
}

static void stamp(uint8_t *d, uint32_t obj, uint32_t gen)
{
    for (int i = 0; i < 150; i++)
        d[i] = (uint8_t)(obj * 31 + gen * 7 + (uint32_t)i);
}

static void *stress_worker(void *arg)
{
    stress_t *w = arg;
    dsm_compact_ptr_t p[ST_OBJS];
    uint32_t gen[ST_OBJS];
    int have[ST_OBJS] = {0};
    uint8_t d[150], back[4096];
    uint64_t x = 0x9e3779b97f4a7c15ull * (w->seed + 1);
    /* a spike first (every object allocated), then random operations */
    /* until the leader merged enough */
    for (int op = 0; !__atomic_load_n(&w->stop, __ATOMIC_RELAXED); op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t i = op < ST_OBJS ? (uint32_t)op : (uint32_t)(x % ST_OBJS), what = (uint32_t)(x >> 32) % 8;
        if (!have[i]) {
            if (what >= 1 && op >= ST_OBJS)
                continue;   /* about a quarter live: blocks with room to merge */
            if (dsm_compact_store_alloc(w->s, 150, &p[i]) != DSM_OK)
                continue;   /* full: the leader frees blocks soon */
            have[i] = 1;
            gen[i] = 0;
            what = 1;
        }
        size_t len = 0;
        dsm_status_t st;
        if (what <= 1) {   /* write */
            stamp(d, i, ++gen[i]);
            if ((st = dsm_compact_store_write(w->s, &p[i], d, 150)) != DSM_OK)
                stress_failed(w, "write", st, op);
        } else if (what <= 3) {   /* read */
            stamp(d, i, gen[i]);
            if ((st = dsm_compact_store_read(w->s, &p[i], back, sizeof back, &len)) != DSM_OK)
                stress_failed(w, "read", st, op);
            else if (gen[i] && (len != 150 || memcmp(back, d, 150) != 0))
                stress_failed(w, "read (wrong bytes)", DSM_OK, op);
        } else if (what == 4) {
            if ((st = dsm_compact_store_release(w->s, &p[i])) != DSM_OK)
                stress_failed(w, "release", st, op);
        } else {
            if ((st = dsm_compact_store_free(w->s, &p[i])) != DSM_OK)
                stress_failed(w, "free", st, op);
            else if ((st = dsm_compact_store_read(w->s, &p[i], back, sizeof back, &len)) != DSM_ERR_BAD_ADDR)
                stress_failed(w, "read after free", st, op);
            have[i] = 0;
        }
    }
    for (int i = 0; i < ST_OBJS; i++)
        w->live += (uint64_t)have[i];
    return NULL;
}

static void test_worker_stress(void **state)
{
    (void)state;
    dsm_compact_config_t cfg;
    dsm_compact_config_init(&cfg);
    cfg.range_size = 256 * 4096;
    cfg.workers = ST_WORKERS;
    cfg.frag_threshold = 0;
    dsm_compact_store_t *s = NULL;
    assert_int_equal(dsm_compact_store_create(&cfg, 0, 5, NULL, &s), DSM_OK);
    static stress_t w[ST_WORKERS];
    pthread_t th[ST_WORKERS];
    for (int k = 0; k < ST_WORKERS; k++) {
        w[k] = (stress_t){.s = s, .seed = (uint32_t)k};
        assert_int_equal(pthread_create(&th[k], NULL, stress_worker, &w[k]), 0);
    }
    uint64_t merges = 0;
    int running = ST_WORKERS, joined[ST_WORKERS] = {0};
    /* (a bound in time, not in rounds, which a loaded machine may spend
     * before the workers ran, keeps a broken leader from hanging the test:
     * the merge count is checked after) */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (running) {
        dsm_compact_stats_t st = {0};
        assert_int_equal(dsm_compact_store_compact(s, -1, &st), DSM_OK);
        merges += st.merges;
        clock_gettime(CLOCK_MONOTONIC, &t);
        int expired = t.tv_sec - t0.tv_sec >= ST_MAX_SECONDS;
        for (int k = 0; k < ST_WORKERS && (merges >= ST_MERGES || expired); k++)
            __atomic_store_n(&w[k].stop, 1, __ATOMIC_RELAXED);
        for (int k = 0; k < ST_WORKERS; k++)
            if (!joined[k] && pthread_tryjoin_np(th[k], NULL) == 0) {
                joined[k] = 1;
                running--;
            }
        if (running)
            sched_yield();
    }
    uint64_t live = 0;
    for (int k = 0; k < ST_WORKERS; k++) {
        if (w[k].errors)
            fprintf(stderr, "worker %d: %llu failed operations, the first a %s at operation %llu: %s\n", k,
                    (unsigned long long)w[k].errors, w[k].failed_op, (unsigned long long)w[k].failed_at,
                    dsm_strerror(w[k].failed_st));
        assert_int_equal(w[k].errors, 0);
        live += w[k].live;
    }
    assert_true(merges >= ST_MERGES);
    dsm_compact_usage_t u;
    dsm_compact_store_usage(s, &u);
    assert_int_equal(u.objects, live);
    dsm_compact_store_destroy(s);
}

/* The one failure test_worker_stress once counted, forced: a worker frees
 * the last object of a block, the block retires, another allocation takes
 * it for a new life, and allocations there draw IDs; once one draws the
 * freed object's ID, the freed pointer (same block, same ID, that block as
 * origin) reads the new object. A block gives an ID out again only after a
 * whole cycle of the ID space: with 8-bit IDs, 255 allocations. Drawn at
 * random per allocation, the ID came back after 255 draws or more in about
 * a third of trials, so 20 trials all pass by chance once in 10^9. */
enum { REUSE_TRIALS = 20 };

static void test_freed_pointer_in_reused_block(void **state)
{
    (void)state;
    dsm_compact_config_t cfg;
    dsm_compact_config_init(&cfg);
    cfg.range_size = 64 * 4096;
    cfg.workers = 1;
    cfg.id_bits = 8;
    const int ids = 255;
    dsm_compact_store_t *s = NULL;
    assert_int_equal(dsm_compact_store_create(&cfg, 0, 5, NULL, &s), DSM_OK);
    uint32_t bsize = dsm_compact_store_block_size(s);
    uint8_t back[4096];
    size_t len = 0;
    for (int t = 0; t < REUSE_TRIALS; t++) {
        dsm_compact_ptr_t x, anchor, y;
        dsm_compact_ptr_fields_t fx, fa, fy;
        assert_int_equal(dsm_compact_store_alloc(s, 150, &x), DSM_OK);
        dsm_compact_ptr_decode(&x, &fx);
        assert_int_equal(dsm_compact_store_free(s, &x), DSM_OK);
        /* the block retired; the next block taken is that one */
        assert_int_equal(dsm_compact_store_alloc(s, 150, &anchor), DSM_OK);
        dsm_compact_ptr_decode(&anchor, &fa);
        assert_int_equal(fa.offset / bsize, fx.offset / bsize);
        /* allocations there (the anchor keeps the block) until one draws x's ID */
        int draws = 0;
        for (;;) {
            assert_true(draws < 4 * ids);
            assert_int_equal(dsm_compact_store_alloc(s, 150, &y), DSM_OK);
            draws++;
            dsm_compact_ptr_decode(&y, &fy);
            assert_int_equal(fy.offset / bsize, fx.offset / bsize);
            if (fy.id == fx.id)
                break;
            assert_int_equal(dsm_compact_store_free(s, &y), DSM_OK);
            assert_int_equal(dsm_compact_store_read(s, &x, back, sizeof back, &len), DSM_ERR_BAD_ADDR);
        }
        /* x's ID came back no sooner than a whole cycle after x's own */
        assert_true(draws >= ids - 1);
        assert_int_equal(dsm_compact_store_free(s, &y), DSM_OK);
        assert_int_equal(dsm_compact_store_free(s, &anchor), DSM_OK);
    }
    dsm_compact_store_destroy(s);
}

/* ---- the kernel's mapping limit ------------------------------------------------ */

/* One log sink for the program (set once in main: a sink is never freed):
 * lines go to stderr, except the refusal test_kernel_map_limit waits for. */
static int g_capture, g_kernel_refusals;
static void map_limit_sink(void *ctx, int level, const char *module, const char *message)
{
    (void)ctx;
    if (g_capture && level == 0 && strcmp(module, "compact") == 0 && strstr(message, "compaction refused") &&
        strstr(message, "vm.max_map_count")) {
        g_kernel_refusals++;
        return;
    }
    fprintf(stderr, "[%s] %s\n", module, message);
}

/* Split `region` (npages pages, PROT_NONE) into one mapping per page by
 * making every other page readable, until the kernel refuses a split: the
 * process is then at vm.max_map_count (or one short of it). */
static size_t exhaust_mappings(uint8_t *region, size_t npages)
{
    size_t splits = 0;
    for (size_t i = 1; i + 1 < npages; i += 2) {
        if (mprotect(region + i * 4096, 4096, PROT_READ) != 0) {
            assert_int_equal(errno, ENOMEM);
            return splits;
        }
        splits++;
    }
    fail_msg("the region did not reach the mapping limit");
    return splits;
}

/* How the store's own mapping shows the object p names, as a one-sided
 * reader sees it: the block of its pointer scanned for its ID. */
static dsm_compact_check_t view_check(dsm_compact_store_t *s, const dsm_compact_ptr_t *p)
{
    dsm_compact_ptr_fields_t f;
    dsm_compact_ptr_decode(p, &f);
    uint32_t bs = dsm_compact_store_block_size(s), slot = dsm_compact_class_slot(f.size_class);
    const uint8_t *block = dsm_compact_store_base(s) + f.offset / bs * bs;
    dsm_compact_check_t seen = DSM_COMPACT_OTHER;
    uint8_t buf[4096];
    for (uint32_t i = 0; i + slot <= bs; i += slot) {
        size_t n = 0;
        dsm_compact_check_t r =
            dsm_compact_obj_check(block + i, slot, f.id, (uint32_t)(f.offset / bs), buf, sizeof buf, &n, NULL);
        if (r == DSM_COMPACT_VALID)
            return r;
        if (r == DSM_COMPACT_LOCKED)
            seen = r;
    }
    return seen;
}

/* OBJS objects of 150 bytes, object i filled with tag i. */
static void alloc_filled(dsm_compact_store_t *s, dsm_compact_ptr_t *p)
{
    uint8_t d[150];
    for (int i = 0; i < OBJS; i++) {
        assert_int_equal(dsm_compact_store_alloc(s, 150, &p[i]), DSM_OK);
        fill(d, (uint32_t)i);
        assert_int_equal(dsm_compact_store_write(s, &p[i], d, 150), DSM_OK);
    }
}

/* Object i reads back with its data, through the store and through the
 * store's own mapping. */
static void assert_reads_back(dsm_compact_store_t *s, const dsm_compact_ptr_t *p, int i)
{
    uint8_t d[150], back[4096];
    size_t len = 0;
    dsm_compact_ptr_t q = p[i];
    assert_int_equal(dsm_compact_store_read(s, &q, back, sizeof back, &len), DSM_OK);
    fill(d, (uint32_t)i);
    assert_int_equal(len, 150);
    assert_memory_equal(back, d, 150);
    assert_int_equal(view_check(s, &p[i]), DSM_COMPACT_VALID);
}

/* Even blocks stay full; odd ones keep two objects each and merge away. */
static int stays_beside_spans(int i) { return (i / SLOTS) % 2 == 0 || i % SLOTS < 2; }

/* A batch drops its merged blocks' pages as spans of the range, which take
 * the pages of blocks that stay between them too: full blocks alternate
 * with sparse ones that merge away, every object read through the store's
 * own mapping first (its pages mapped), and afterwards every object still
 * reads, through the store and through that mapping, with its data. */
static void test_span_drop_keeps_neighbours(void **state)
{
    (void)state;
    dsm_compact_store_t *s = small_store(1, NULL);
    static dsm_compact_ptr_t p[OBJS];
    alloc_filled(s, p);
    int kept = 0;
    for (int i = 0; i < OBJS; i++) {
        if (!stays_beside_spans(i)) {
            assert_int_equal(dsm_compact_store_free(s, &p[i]), DSM_OK);
            continue;
        }
        assert_int_equal(view_check(s, &p[i]), DSM_COMPACT_VALID);   /* its page now mapped */
        kept++;
    }
    dsm_compact_stats_t st = {0};
    assert_int_equal(dsm_compact_store_compact(s, 2, &st), DSM_OK);
    assert_true(st.merges >= BLOCKS / 2 - 2);   /* the sparse blocks merge, the full ones cannot */
    dsm_compact_usage_t u;
    dsm_compact_store_usage(s, &u);
    assert_int_equal(u.objects, (uint64_t)kept);
    for (int i = 0; i < OBJS; i++)
        if (stays_beside_spans(i))
            assert_reads_back(s, p, i);
    dsm_compact_store_destroy(s);
}

/* At the kernel's mapping limit (with map_budget set above what it leaves)
 * compaction refuses with DSM_ERR_NOMEM and one clear line and loses
 * nothing: what it merged stays merged, but the blocks it could not remap
 * keep showing their old pages, the moved objects locked there (a
 * one-sided reader asks the server), and every object reads. Once
 * mappings are free again the next round remaps them and goes on. */
static void test_kernel_map_limit(void **state)
{
    (void)state;
    dsm_compact_config_t cfg;
    dsm_compact_config_init(&cfg);
    cfg.range_size = 64 * 4096;
    cfg.workers = 1;
    cfg.map_budget = 1u << 30;   /* only the kernel stops it */
    dsm_compact_store_t *s = NULL;
    assert_int_equal(dsm_compact_store_create(&cfg, 0, 5, NULL, &s), DSM_OK);
    static dsm_compact_ptr_t p[OBJS];
    uint8_t d[150], back[4096];
    alloc_filled(s, p);
    for (int i = 0; i < OBJS; i++)
        if ((i % SLOTS) % 4)
            assert_int_equal(dsm_compact_store_free(s, &p[i]), DSM_OK);
    dsm_compact_usage_t u0, u;
    dsm_compact_store_usage(s, &u0);

    unsigned long max = 0;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%lu", &max), 1);
    fclose(f);
    size_t npages = 2 * (size_t)max + 16;
    uint8_t *region = mmap(NULL, npages * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    assert_true(region != MAP_FAILED);
    g_kernel_refusals = 0;
    g_capture = 1;
    assert_true(exhaust_mappings(region, npages) > 0);
    dsm_compact_stats_t st = {0};
    dsm_status_t rc = dsm_compact_store_compact(s, 2, &st);
    assert_int_equal(munmap(region, npages * 4096), 0);   /* the mappings are free again */
    g_capture = 0;
    assert_int_equal(rc, DSM_ERR_NOMEM);
    assert_int_equal(st.refused_budget, 1);
    assert_int_equal(g_kernel_refusals, 1);
    dsm_compact_store_usage(s, &u);
    assert_int_equal(u.objects, u0.objects);
    assert_true(st.merges > 0);
    assert_int_equal(u.blocks, u0.blocks - st.merges);
    assert_int_equal(u.alias_blocks, st.merges);
    uint8_t *base = dsm_compact_store_base(s);
    uint64_t size = dsm_compact_store_size(s);
    int maps = range_maps(base, size);   /* before the refused remaps are made */
    int locked = 0;
    for (int i = 0; i < OBJS; i++) {
        if ((i % SLOTS) % 4)
            continue;
        size_t len = 0;
        assert_int_equal(dsm_compact_store_read(s, &p[i], back, sizeof back, &len), DSM_OK);
        fill(d, (uint32_t)i);
        assert_int_equal(len, 150);
        assert_memory_equal(back, d, 150);
        dsm_compact_check_t v = view_check(s, &p[i]);
        assert_true(v == DSM_COMPACT_VALID || v == DSM_COMPACT_LOCKED);
        locked += v == DSM_COMPACT_LOCKED;
    }
    assert_true(locked > 0);   /* the merged-away blocks' objects, in their old pages */
    /* with mappings to spare, the next round remaps them and goes on */
    dsm_compact_stats_t st2 = {0};
    assert_int_equal(dsm_compact_store_compact(s, 2, &st2), DSM_OK);
    assert_int_equal(st2.refused_budget, 0);
    assert_true(range_maps(base, size) > maps);
    for (int i = 0; i < OBJS; i++)
        if ((i % SLOTS) % 4 == 0)
            assert_reads_back(s, p, i);
    dsm_compact_store_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_punch_after_window),
        cmocka_unit_test(test_one_mapping),
        cmocka_unit_test(test_worker_allocators),
        cmocka_unit_test(test_worker_locks),
        cmocka_unit_test(test_worker_stress),
        cmocka_unit_test(test_freed_pointer_in_reused_block),
        cmocka_unit_test(test_span_drop_keeps_neighbours),
        cmocka_unit_test(test_kernel_map_limit),
    };
    dsm_set_log_sink(map_limit_sink, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
