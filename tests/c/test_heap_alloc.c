/* Unit tests of the heap's allocator core and wire format on plain memory
 * (no node, no fabric): size classes, reuse, exhaustion, bad frees, large
 * runs, range checks, thread caches across several allocators, a
 * multi-threaded stress with cross-thread frees, global address encoding,
 * the alloc/free/check messages, the guarded operations' wire and server,
 * and the published partition value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dsm/heap.h"
#include "dsm/log.h"
#include "heap/alloc.h"
#include "heap/msg.h"
#include "heap/ops.h"
#include "heap/partition.h"
#include "runtime/region_offer.h"
#include "util/bytes.h"
#include "util/log.h"
#include "util/meminfo.h"

#define MiB (1024ull * 1024)
enum { DATA1M = 13 };   /* data blocks of a 1 MiB partition */

typedef struct region {
    void *base;
    uint64_t size;
    dsm_heap_alloc_t *a;
} region_t;

static region_t region_new(uint64_t size)
{
    region_t r = {0};
    r.size = size;
    r.base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(r.base != MAP_FAILED);
    assert_int_equal(dsm_heap_alloc_create(r.base, size, &r.a), DSM_OK);
    return r;
}

static void region_free(region_t *r)
{
    dsm_heap_alloc_destroy(r->a);
    munmap(r->base, r->size);
}

static uint64_t allocated(dsm_heap_alloc_t *a)
{
    uint64_t used, cap;
    dsm_heap_alloc_usage(a, &used, &cap);
    return used;
}

/* A byte pattern that depends on where the object is, so overlapping objects
 * would overwrite each other's pattern. */
static void fill(uint8_t *p, uint64_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)((off * 2654435761u >> 7) + i * 31);
}
static int check_fill(const uint8_t *p, uint64_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != (uint8_t)((off * 2654435761u >> 7) + i * 31))
            return 0;
    return 1;
}

static void test_size_classes(void **state)
{
    (void)state;
    assert_int_equal(dsm_heap_class_size(0), DSM_HEAP_MIN_CLASS);
    assert_int_equal(dsm_heap_class_size(DSM_HEAP_NCLASSES - 1), DSM_HEAP_MAX_CLASS);
    for (size_t s = 1; s <= DSM_HEAP_MAX_CLASS; s++) {
        unsigned c = dsm_heap_class_of(s);
        assert_true(c < DSM_HEAP_NCLASSES);
        assert_true(dsm_heap_class_size(c) >= s);
        if (c > 0)
            assert_true(dsm_heap_class_size(c - 1) < s);
    }
    for (unsigned c = 0; c < DSM_HEAP_NCLASSES; c++) {
        assert_int_equal(dsm_heap_class_size(c) % 16, 0);
        assert_int_equal(dsm_heap_class_of(dsm_heap_class_size(c)), c);
        /* Waste inside a class is bounded: at most 25% above 128 bytes. */
        if (c > 0 && dsm_heap_class_size(c) > 128)
            assert_true(dsm_heap_class_size(c) * 4 <= (dsm_heap_class_size(c - 1) + 1) * 5 + 4);
    }
}

static void test_create_rejects(void **state)
{
    (void)state;
    dsm_heap_alloc_t *a;
    static uint64_t small[1024];
    assert_int_equal(dsm_heap_alloc_create(small, sizeof small, &a), DSM_ERR_INVALID);
    assert_int_equal(dsm_heap_alloc_create(NULL, 4 * MiB, &a), DSM_ERR_INVALID);
    assert_int_equal(dsm_heap_alloc_create((char *)small + 1, 4 * MiB, &a), DSM_ERR_INVALID);
    assert_int_equal(dsm_heap_alloc_create(small, DSM_HEAP_MAX_PARTITION + 1, &a), DSM_ERR_INVALID);
}

static void test_layout(void **state)
{
    (void)state;
    region_t r = region_new(4 * MiB);
    dsm_heap_layout_t l;
    memcpy(&l, r.base, sizeof l);
    assert_true(l.magic == DSM_HEAP_LAYOUT_MAGIC);
    assert_int_equal(l.version, DSM_HEAP_LAYOUT_VERSION);
    assert_int_equal(l.nblocks, 64);
    /* header block, then the generation table (2 B per 16 B of blocks) */
    assert_int_equal(l.first_block, dsm_heap_first_block(64));
    assert_int_equal(l.first_block, 9);
    const uint64_t *st = (const uint64_t *)((char *)r.base + DSM_HEAP_STATE_OFF);
    assert_int_equal(st[0], DSM_HEAP_BLK_RESERVED);
    assert_int_equal(st[1], DSM_HEAP_BLK_RESERVED);   /* the generation table */
    assert_int_equal(st[9], DSM_HEAP_BLK_FREE);
    uint64_t off;
    assert_int_equal(dsm_heap_alloc(r.a, 100, &off, NULL), DSM_OK);
    assert_int_equal(dsm_heap_blk_kind(st[off >> DSM_HEAP_BLOCK_SHIFT]), DSM_HEAP_BLK_SMALL);
    assert_int_equal(dsm_heap_blk_arg(st[off >> DSM_HEAP_BLOCK_SHIFT]), dsm_heap_class_of(100));
    assert_int_equal(dsm_heap_free(r.a, off, 0), DSM_OK);
    region_free(&r);
}

/* Generations: every granule of an allocation holds its generation; a free
 * marks them; a reuse of the memory takes a generation above any it held, so
 * a stale tag never matches the new object; a free or an access check with
 * a stale tag is refused; DSM_CHECKED's exact check refuses overruns. */
static void test_generations(void **state)
{
    (void)state;
    region_t r = region_new(4 * MiB);
    uint64_t a1, a2, big;
    uint16_t g1, g2, gb;
    size_t size;
    assert_int_equal(dsm_heap_alloc(r.a, 40, &a1, &g1), DSM_OK);   /* class 48: 3 granules */
    assert_true(g1 >= 1 && g1 <= DSM_HEAP_GEN_MAX);
    for (uint64_t o = a1; o < a1 + 48; o += 16) assert_int_equal(dsm_heap_gen_at(r.a, o), g1);
    assert_int_equal(dsm_heap_access_check(r.a, a1 + 16, 32, g1, &size), DSM_OK);
    assert_int_equal(dsm_heap_access_check(r.a, a1 + 16, 33, g1, &size), DSM_ERR_BAD_ADDR);  /* overrun */
    assert_int_equal(dsm_heap_access_check(r.a, a1, 0, (uint16_t)(g1 + 1), &size), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_free(r.a, a1, (uint16_t)(g1 + 1)), DSM_ERR_BAD_ADDR);          /* wrong tag */
    assert_int_equal(dsm_heap_free(r.a, a1, g1), DSM_OK);
    assert_int_equal(dsm_heap_gen_at(r.a, a1), g1 | DSM_HEAP_GEN_FREED);
    assert_int_equal(dsm_heap_access_check(r.a, a1, 8, g1, &size), DSM_ERR_BAD_ADDR);       /* freed */
    assert_int_equal(dsm_heap_alloc(r.a, 40, &a2, &g2), DSM_OK);   /* the same slot again */
    assert_int_equal(a2, a1);
    assert_true(g2 != g1);
    assert_int_equal(dsm_heap_access_check(r.a, a1, 8, g1, &size), DSM_ERR_BAD_ADDR);       /* stale */
    assert_int_equal(dsm_heap_free(r.a, a1, g1), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_access_check(r.a, a2, 8, g2, &size), DSM_OK);
    assert_int_equal(dsm_heap_free(r.a, a2, g2), DSM_OK);
    /* a large allocation: all its granules, CONT blocks included */
    assert_int_equal(dsm_heap_alloc(r.a, 3 * DSM_HEAP_BLOCK_SIZE, &big, &gb), DSM_OK);
    assert_int_equal(dsm_heap_gen_at(r.a, big + 2 * DSM_HEAP_BLOCK_SIZE + 4096), gb);
    uint64_t start;
    assert_int_equal(dsm_heap_object_of(r.a, big + 2 * DSM_HEAP_BLOCK_SIZE + 8, &start, &size), DSM_OK);
    assert_int_equal(start, big);
    assert_int_equal(size, 3 * DSM_HEAP_BLOCK_SIZE);
    assert_int_equal(dsm_heap_free(r.a, big, gb), DSM_OK);
    assert_int_equal(dsm_heap_object_of(r.a, big + 8, &start, &size), DSM_ERR_BAD_ADDR);
    region_free(&r);
}

/* Three blocks' worth of every class: alignment, usable size, no overlap,
 * then everything freed and the partition empty again. */
static void test_every_class(void **state)
{
    (void)state;
    region_t r = region_new(32 * MiB);
    uint8_t *base = r.base;
    for (unsigned c = 0; c < DSM_HEAP_NCLASSES; c++) {
        size_t sz = dsm_heap_class_size(c);
        size_t n = 3 * (DSM_HEAP_BLOCK_SIZE / sz) + 1;
        uint64_t *offs = calloc(n, sizeof *offs);
        for (size_t i = 0; i < n; i++) {
            size_t req = sz - (i % 16);  /* sizes just below the class size too */
            assert_int_equal(dsm_heap_alloc(r.a, req, &offs[i], NULL), DSM_OK);
            assert_true(offs[i] >= DSM_HEAP_BLOCK_SIZE);
            assert_true(offs[i] + sz <= r.size);
            assert_int_equal(offs[i] % 16, 0);
            size_t usable = 0;
            assert_int_equal(dsm_heap_usable(r.a, offs[i], &usable), DSM_OK);
            assert_int_equal(usable, sz);
            fill(base + offs[i], offs[i], sz);
        }
        assert_int_equal(allocated(r.a), n * sz);
        for (size_t i = 0; i < n; i++) {
            assert_true(check_fill(base + offs[i], offs[i], sz));
            assert_int_equal(dsm_heap_check_range(r.a, offs[i], sz), DSM_OK);
        }
        for (size_t i = 0; i < n; i++)
            assert_int_equal(dsm_heap_free(r.a, offs[i], 0), DSM_OK);
        assert_int_equal(allocated(r.a), 0);
        free(offs);
    }
    /* All but the thread's current blocks are back; after a flush all are. */
    dsm_heap_thread_flush(r.a);
    uint64_t cap, off;
    dsm_heap_alloc_usage(r.a, NULL, &cap);
    assert_int_equal(dsm_heap_alloc(r.a, cap, &off, NULL), DSM_OK);
    assert_int_equal(dsm_heap_free(r.a, off, 0), DSM_OK);
    region_free(&r);
}

static void test_reuse(void **state)
{
    (void)state;
    region_t r = region_new(4 * MiB);
    uint64_t a1, a2, b1;
    assert_int_equal(dsm_heap_alloc(r.a, 64, &a1, NULL), DSM_OK);
    assert_int_equal(dsm_heap_free(r.a, a1, 0), DSM_OK);
    assert_int_equal(dsm_heap_alloc(r.a, 60, &a2, NULL), DSM_OK);
    assert_int_equal(a1, a2);   /* lowest free slot of the current block */
    assert_int_equal(dsm_heap_alloc(r.a, 64, &b1, NULL), DSM_OK);
    assert_int_equal(b1, a1 + 64);
    /* Zero-byte requests get a real, distinct minimum-size object. */
    uint64_t z;
    size_t zs;
    assert_int_equal(dsm_heap_alloc(r.a, 0, &z, NULL), DSM_OK);
    assert_int_equal(dsm_heap_usable(r.a, z, &zs), DSM_OK);
    assert_int_equal(zs, DSM_HEAP_MIN_CLASS);
    assert_int_equal(dsm_heap_free(r.a, z, 0), DSM_OK);
    assert_int_equal(dsm_heap_free(r.a, a2, 0), DSM_OK);
    assert_int_equal(dsm_heap_free(r.a, b1, 0), DSM_OK);
    region_free(&r);
}

/* 1 MiB = 16 blocks, three of them the header and generation table: 13
 * data blocks (DATA1M). */
static void test_exhaustion(void **state)
{
    (void)state;
    region_t r = region_new(1 * MiB);
    uint64_t cap;
    dsm_heap_alloc_usage(r.a, NULL, &cap);
    assert_int_equal(cap, DATA1M * (uint64_t)DSM_HEAP_BLOCK_SIZE);
    uint64_t offs[DATA1M * 16 + 1];
    size_t n = 0;
    dsm_status_t st;
    while ((st = dsm_heap_alloc(r.a, 4096, &offs[n], NULL)) == DSM_OK) {
        n++;
        assert_true(n <= DATA1M * 16);
    }
    assert_int_equal(st, DSM_ERR_NOMEM);
    assert_int_equal(n, DATA1M * 16);
    uint64_t off;
    assert_int_equal(dsm_heap_alloc(r.a, 16, &off, NULL), DSM_ERR_NOMEM);
    assert_int_equal(dsm_heap_alloc(r.a, 100000, &off, NULL), DSM_ERR_NOMEM);
    assert_int_equal(dsm_heap_alloc(r.a, SIZE_MAX, &off, NULL), DSM_ERR_NOMEM);
    assert_int_equal(allocated(r.a), cap);
    /* Free one object: exactly that one comes back. */
    assert_int_equal(dsm_heap_free(r.a, offs[37], 0), DSM_OK);
    assert_int_equal(dsm_heap_alloc(r.a, 4000, &off, NULL), DSM_OK);
    assert_int_equal(off, offs[37]);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(dsm_heap_free(r.a, offs[i], 0), DSM_OK);
    assert_int_equal(allocated(r.a), 0);
    /* The thread still owns one (empty) current block, block 5 (it took
     * back offs[37]'s block), so the longest free run is blocks 6..15. */
    assert_int_equal(offs[37] >> DSM_HEAP_BLOCK_SHIFT, 5);
    assert_int_equal(dsm_heap_alloc(r.a, 11 * DSM_HEAP_BLOCK_SIZE, &off, NULL), DSM_ERR_NOMEM);
    assert_int_equal(dsm_heap_alloc(r.a, 10 * DSM_HEAP_BLOCK_SIZE, &off, NULL), DSM_OK);
    assert_int_equal(off, 6 * DSM_HEAP_BLOCK_SIZE);
    assert_int_equal(dsm_heap_free(r.a, off, 0), DSM_OK);
    dsm_heap_thread_flush(r.a);
    assert_int_equal(dsm_heap_alloc(r.a, DATA1M * DSM_HEAP_BLOCK_SIZE, &off, NULL), DSM_OK);
    assert_int_equal(dsm_heap_alloc(r.a, 16, &off, NULL), DSM_ERR_NOMEM);
    region_free(&r);
}

static void test_bad_free(void **state)
{
    (void)state;
    region_t r = region_new(4 * MiB);
    uint64_t s, l;
    assert_int_equal(dsm_heap_alloc(r.a, 48, &s, NULL), DSM_OK);
    assert_int_equal(dsm_heap_alloc(r.a, 3 * DSM_HEAP_BLOCK_SIZE, &l, NULL), DSM_OK);
    uint64_t bad[] = {0, 8, DSM_HEAP_STATE_OFF, DSM_HEAP_BLOCK_SIZE - 16, s + 1, s + 16, s + 48,
                      l + 16, l + DSM_HEAP_BLOCK_SIZE, l + 3 * DSM_HEAP_BLOCK_SIZE,
                      r.size, r.size + 4096, UINT64_MAX, 40 * DSM_HEAP_BLOCK_SIZE};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t u;
        assert_int_equal(dsm_heap_free(r.a, bad[i], 0), DSM_ERR_BAD_ADDR);
        assert_int_equal(dsm_heap_usable(r.a, bad[i], &u), DSM_ERR_BAD_ADDR);
    }
    assert_int_equal(dsm_heap_free(r.a, s, 0), DSM_OK);
    assert_int_equal(dsm_heap_free(r.a, s, 0), DSM_ERR_BAD_ADDR);   /* double free */
    assert_int_equal(dsm_heap_free(r.a, l, 0), DSM_OK);
    assert_int_equal(dsm_heap_free(r.a, l, 0), DSM_ERR_BAD_ADDR);
    assert_int_equal(allocated(r.a), 0);
    /* Still works afterwards. */
    uint64_t again;
    assert_int_equal(dsm_heap_alloc(r.a, 48, &again, NULL), DSM_OK);
    assert_int_equal(again, s);
    assert_int_equal(dsm_heap_free(r.a, again, 0), DSM_OK);
    region_free(&r);
}

static void test_large(void **state)
{
    (void)state;
    region_t r = region_new(16 * MiB);
    uint8_t *base = r.base;
    size_t sizes[] = {DSM_HEAP_MAX_CLASS + 1, DSM_HEAP_BLOCK_SIZE, DSM_HEAP_BLOCK_SIZE + 1,
                      1 * MiB, 3 * MiB + 17};
    uint64_t offs[5];
    for (int i = 0; i < 5; i++) {
        assert_int_equal(dsm_heap_alloc(r.a, sizes[i], &offs[i], NULL), DSM_OK);
        assert_int_equal(offs[i] % DSM_HEAP_BLOCK_SIZE, 0);
        size_t u;
        assert_int_equal(dsm_heap_usable(r.a, offs[i], &u), DSM_OK);
        assert_int_equal(u, (sizes[i] + DSM_HEAP_BLOCK_SIZE - 1) / DSM_HEAP_BLOCK_SIZE * DSM_HEAP_BLOCK_SIZE);
        assert_int_equal(dsm_heap_check_range(r.a, offs[i], u), DSM_OK);
        fill(base + offs[i], offs[i], u);
    }
    for (int i = 0; i < 5; i++) {
        size_t u;
        assert_int_equal(dsm_heap_usable(r.a, offs[i], &u), DSM_OK);
        assert_true(check_fill(base + offs[i], offs[i], u));
    }
    /* Free the middle one and reuse its hole for something that fits. */
    assert_int_equal(dsm_heap_free(r.a, offs[3], 0), DSM_OK);
    assert_int_equal(dsm_heap_check_range(r.a, offs[3], 1), DSM_ERR_BAD_ADDR);
    uint64_t o;
    assert_int_equal(dsm_heap_alloc(r.a, 1 * MiB, &o, NULL), DSM_OK);
    assert_int_equal(o, offs[3]);
    offs[3] = o;
    for (int i = 0; i < 5; i++)
        assert_int_equal(dsm_heap_free(r.a, offs[i], 0), DSM_OK);
    assert_int_equal(allocated(r.a), 0);
    region_free(&r);
}

static void test_check_range(void **state)
{
    (void)state;
    region_t r = region_new(4 * MiB);
    uint64_t l, s;
    assert_int_equal(dsm_heap_alloc(r.a, 2 * DSM_HEAP_BLOCK_SIZE, &l, NULL), DSM_OK);
    assert_int_equal(dsm_heap_alloc(r.a, 32, &s, NULL), DSM_OK);
    assert_int_equal(dsm_heap_check_range(r.a, l, 2 * DSM_HEAP_BLOCK_SIZE), DSM_OK);
    assert_int_equal(dsm_heap_check_range(r.a, l + 5, 2 * DSM_HEAP_BLOCK_SIZE - 5), DSM_OK);
    assert_int_equal(dsm_heap_check_range(r.a, l, 0), DSM_OK);
    assert_int_equal(dsm_heap_check_range(r.a, s, 32), DSM_OK);
    assert_int_equal(dsm_heap_check_range(r.a, 0, 8), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_check_range(r.a, DSM_HEAP_STATE_OFF, 8), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_check_range(r.a, r.size - 8, 8), DSM_ERR_BAD_ADDR); /* free block */
    assert_int_equal(dsm_heap_check_range(r.a, r.size, 1), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_check_range(r.a, l, UINT64_MAX), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_check_range(r.a, UINT64_MAX, 2), DSM_ERR_BAD_ADDR);
    /* Off the end of the large run into a free block. */
    assert_int_equal(dsm_heap_check_range(r.a, l, 4 * DSM_HEAP_BLOCK_SIZE), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_free(r.a, l, 0), DSM_OK);
    assert_int_equal(dsm_heap_check_range(r.a, l, 8), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_free(r.a, s, 0), DSM_OK);
    region_free(&r);
}

/* A partition whose size is not a block multiple: the tail is never used. */
static void test_odd_size(void **state)
{
    (void)state;
    region_t r = region_new(2 * MiB + 12345);
    uint64_t cap, off;
    dsm_heap_alloc_usage(r.a, NULL, &cap);
    assert_int_equal(cap, (32 - dsm_heap_first_block(32)) * (uint64_t)DSM_HEAP_BLOCK_SIZE);
    assert_int_equal(dsm_heap_alloc(r.a, cap, &off, NULL), DSM_OK);
    assert_int_equal(dsm_heap_check_range(r.a, 2 * MiB, 8), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_free(r.a, 2 * MiB, 0), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_heap_free(r.a, off, 0), DSM_OK);
    region_free(&r);
}

/* More allocators than a thread cache has slots: eviction gives blocks back. */
static void test_many_allocators(void **state)
{
    (void)state;
    enum { N = 12 };
    region_t r[N];
    uint64_t off[N][3];
    for (int i = 0; i < N; i++)
        r[i] = region_new(1 * MiB);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N; i++)
            assert_int_equal(dsm_heap_alloc(r[i].a, 100, &off[i][round], NULL), DSM_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(off[i][1], off[i][0] + 112);
        for (int round = 0; round < 3; round++)
            assert_int_equal(dsm_heap_free(r[i].a, off[i][round], 0), DSM_OK);
        assert_int_equal(allocated(r[i].a), 0);
    }
    /* Destroy some while this thread's cache still names them; the rest
     * keep working, and after a flush each is one free run again. */
    for (int i = 0; i < N; i += 2)
        region_free(&r[i]);
    for (int i = 1; i < N; i += 2) {
        uint64_t o;
        assert_int_equal(dsm_heap_alloc(r[i].a, 100, &o, NULL), DSM_OK);
        assert_int_equal(dsm_heap_free(r[i].a, o, 0), DSM_OK);
    }
    for (int i = 1; i < N; i += 2) {
        uint64_t o;
        dsm_heap_thread_flush(r[i].a);
        assert_int_equal(dsm_heap_alloc(r[i].a, DATA1M * DSM_HEAP_BLOCK_SIZE - 1, &o, NULL), DSM_OK);
        assert_int_equal(dsm_heap_free(r[i].a, o, 0), DSM_OK);
        region_free(&r[i]);
    }
}

/* A thread that exits writes nothing into the partition: its empty block is
 * parked (still SMALL in the state table) and reclaimed when a run of blocks
 * is needed. */
static region_t *g_exit_region;
static uint64_t g_exit_off;
static void *alloc_free_exit(void *p)
{
    (void)p;
    if (dsm_heap_alloc(g_exit_region->a, 200, &g_exit_off, NULL) == DSM_OK)
        (void)dsm_heap_free(g_exit_region->a, g_exit_off, 0);
    return NULL;
}

static void test_thread_exit_parks(void **state)
{
    (void)state;
    region_t r = region_new(1 * MiB);
    g_exit_region = &r;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, alloc_free_exit, NULL), 0);
    pthread_join(t, NULL);
    const uint64_t *st = (const uint64_t *)((char *)r.base + DSM_HEAP_STATE_OFF);
    uint64_t b = g_exit_off >> DSM_HEAP_BLOCK_SHIFT;
    assert_int_equal(dsm_heap_blk_kind(st[b]), DSM_HEAP_BLK_SMALL);
    /* Reused first by the next thread that needs that class ... */
    uint64_t o;
    assert_int_equal(dsm_heap_alloc(r.a, 200, &o, NULL), DSM_OK);
    assert_int_equal(o >> DSM_HEAP_BLOCK_SHIFT, b);
    assert_int_equal(dsm_heap_free(r.a, o, 0), DSM_OK);
    dsm_heap_thread_flush(r.a);
    assert_int_equal(dsm_heap_blk_kind(st[b]), DSM_HEAP_BLK_FREE);
    /* ... and released when the whole capacity is asked for. */
    assert_int_equal(pthread_create(&t, NULL, alloc_free_exit, NULL), 0);
    pthread_join(t, NULL);
    assert_int_equal(dsm_heap_alloc(r.a, DATA1M * DSM_HEAP_BLOCK_SIZE, &o, NULL), DSM_OK);
    assert_int_equal(dsm_heap_free(r.a, o, 0), DSM_OK);
    region_free(&r);
}

/* ---- multi-threaded stress --------------------------------------------- */

enum { STRESS_THREADS = 4, STRESS_SLOTS = 512, STRESS_OPS = 40000 };

typedef struct stress {
    region_t r;
    uint64_t slots[STRESS_SLOTS];   /* 0 or (size << 40 | offset), exchanged atomically */
    int failed;
} stress_t;

typedef struct stress_arg {
    stress_t *s;
    unsigned seed;
} stress_arg_t;

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

static void *stress_thread(void *p)
{
    stress_arg_t *arg = p;
    stress_t *s = arg->s;
    uint8_t *base = s->r.base;
    for (int op = 0; op < STRESS_OPS && !__atomic_load_n(&s->failed, __ATOMIC_RELAXED); op++) {
        unsigned x = rnd(&arg->seed);
        size_t size;
        if (x % 100 == 0)
            size = DSM_HEAP_MAX_CLASS + 1 + x % (3 * DSM_HEAP_BLOCK_SIZE);
        else if (x % 10 == 0)
            size = 1 + x % DSM_HEAP_MAX_CLASS;
        else
            size = 1 + x % 512;
        uint64_t off, val = 0;
        dsm_status_t st = dsm_heap_alloc(s->r.a, size, &off, NULL);
        if (st == DSM_OK) {
            fill(base + off, off, size);
            val = ((uint64_t)size << 40) | off;
        } else if (st != DSM_ERR_NOMEM) {
            __atomic_store_n(&s->failed, 1, __ATOMIC_RELAXED);
            break;
        }
        /* Swap into a random slot; whatever was there (maybe another thread's
         * object) is checked and freed here. */
        uint64_t old = __atomic_exchange_n(&s->slots[rnd(&arg->seed) % STRESS_SLOTS], val, __ATOMIC_ACQ_REL);
        if (old) {
            uint64_t o = old & ((1ull << 40) - 1);
            size_t sz = (size_t)(old >> 40);
            if (!check_fill(base + o, o, sz) || dsm_heap_free(s->r.a, o, 0) != DSM_OK)
                __atomic_store_n(&s->failed, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

static void test_threads_stress(void **state)
{
    (void)state;
    stress_t *s = calloc(1, sizeof *s);
    s->r = region_new(64 * MiB);
    pthread_t th[STRESS_THREADS];
    stress_arg_t args[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        args[i].s = s;
        args[i].seed = 77u + (unsigned)i * 1000003u;
        assert_int_equal(pthread_create(&th[i], NULL, stress_thread, &args[i]), 0);
    }
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(s->failed, 0);
    uint8_t *base = s->r.base;
    for (int i = 0; i < STRESS_SLOTS; i++) {
        if (s->slots[i]) {
            uint64_t o = s->slots[i] & ((1ull << 40) - 1);
            assert_true(check_fill(base + o, o, (size_t)(s->slots[i] >> 40)));
            assert_int_equal(dsm_heap_free(s->r.a, o, 0), DSM_OK);
        }
    }
    assert_int_equal(allocated(s->r.a), 0);
    /* The threads have exited: their caches gave every block back, so the
     * whole capacity is one free run again. */
    uint64_t cap, off;
    dsm_heap_thread_flush(s->r.a);
    dsm_heap_alloc_usage(s->r.a, NULL, &cap);
    assert_int_equal(dsm_heap_alloc(s->r.a, cap, &off, NULL), DSM_OK);
    assert_int_equal(dsm_heap_free(s->r.a, off, 0), DSM_OK);
    region_free(&s->r);
    free(s);
}

/* Racing double frees of the same objects from two threads: exactly one
 * free of each object succeeds. */
typedef struct race {
    region_t r;
    uint64_t offs[2000];
    int ok[2];
} race_t;

static race_t *g_race;
static void *race_free(void *p)
{
    int me = (int)(intptr_t)p;
    for (int i = 0; i < 2000; i++)
        if (dsm_heap_free(g_race->r.a, g_race->offs[i], 0) == DSM_OK)
            __atomic_fetch_add(&g_race->ok[me], 1, __ATOMIC_RELAXED);
    return NULL;
}

static void test_racing_double_free(void **state)
{
    (void)state;
    g_race = calloc(1, sizeof *g_race);
    g_race->r = region_new(8 * MiB);
    for (int i = 0; i < 2000; i++)
        assert_int_equal(dsm_heap_alloc(g_race->r.a, 1 + (size_t)(i % 300), &g_race->offs[i], NULL), DSM_OK);
    dsm_heap_thread_flush(g_race->r.a);
    int prev = dsm_log_enabled(DSM_LOG_WARN);
    dsm_set_log_level(DSM_LOG_ERROR);   /* 2000 expected warnings */
    pthread_t t[2];
    pthread_create(&t[0], NULL, race_free, (void *)0);
    pthread_create(&t[1], NULL, race_free, (void *)1);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    dsm_set_log_level(prev ? DSM_LOG_INFO : DSM_LOG_ERROR);
    assert_int_equal(g_race->ok[0] + g_race->ok[1], 2000);
    assert_int_equal(allocated(g_race->r.a), 0);
    region_free(&g_race->r);
    free(g_race);
}

/* ---- addresses and messages -------------------------------------------- */

static void test_gaddr(void **state)
{
    (void)state;
    uint32_t nodes[] = {0, 1, 7, 127, 200, 255};
    uint64_t offs[] = {0, 1, 4096, 123456789, (1ull << 40) - 1};
    for (size_t i = 0; i < 6; i++) {
        for (size_t j = 0; j < 5; j++) {
            dsm_gaddr_t g = dsm_gaddr_make(nodes[i], offs[j]);
            assert_int_equal(dsm_gaddr_node(g), nodes[i]);
            assert_int_equal(dsm_gaddr_offset(g), offs[j]);
            assert_int_equal(dsm_gaddr_colour(g), 0);
            dsm_gaddr_t c = dsm_gaddr_with_colour(g, 0xbeef);
            assert_int_equal(dsm_gaddr_colour(c), 0xbeef);
            assert_int_equal(dsm_gaddr_node(c), nodes[i]);
            assert_int_equal(dsm_gaddr_offset(c), offs[j]);
            assert_int_equal(dsm_gaddr_strip(c), g);
            assert_int_equal(dsm_gaddr_with_colour(c, 0), g);
        }
    }
    assert_int_equal(dsm_gaddr_make(0, 0), 0);
    /* Offsets beyond 40 bits do not spill into the node. */
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_make(3, 1ull << 40)), 3);
}

static void test_msg_roundtrip(void **state)
{
    (void)state;
    dsm_heap_msg_t in[] = {
        {.type = DSM_HEAP_MSG_ALLOC_REQ, .size = 12345},
        {.type = DSM_HEAP_MSG_ALLOC_REP, .gaddr = dsm_gaddr_make(3, 65536), .size = 16},
        {.type = DSM_HEAP_MSG_FREE_REQ, .gaddr = dsm_gaddr_make(200, 99999)},
        {.type = DSM_HEAP_MSG_FREE_REP},
        {.type = DSM_HEAP_MSG_CHECK_REQ, .gaddr = dsm_gaddr_make(1, 1)},
        {.type = DSM_HEAP_MSG_CHECK_REP, .size = 1 << 20},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        uint8_t buf[DSM_HEAP_MSG_MAX_LEN];
        size_t n = dsm_heap_msg_encode(&in[i], buf);
        assert_true(n >= DSM_HEAP_MSG_HEADER_LEN && n <= DSM_HEAP_MSG_MAX_LEN);
        dsm_heap_msg_t out;
        assert_int_equal(dsm_heap_msg_decode(buf, n, &out), DSM_OK);
        assert_int_equal(out.type, in[i].type);
        assert_int_equal(out.size, in[i].size);
        assert_int_equal(out.gaddr, in[i].gaddr);
        /* Every truncation and one extra byte are refused. */
        for (size_t k = 0; k < n; k++)
            assert_int_equal(dsm_heap_msg_decode(buf, k, &out), DSM_ERR_PROTO);
        uint8_t longer[DSM_HEAP_MSG_MAX_LEN + 1];
        memcpy(longer, buf, n);
        longer[n] = 0;
        assert_int_equal(dsm_heap_msg_decode(longer, n + 1, &out), DSM_ERR_PROTO);
    }
    assert_int_equal(dsm_heap_msg_decode(NULL, 0, &(dsm_heap_msg_t){0}), DSM_ERR_PROTO);
}

static void test_msg_rejects(void **state)
{
    (void)state;
    uint8_t buf[DSM_HEAP_MSG_MAX_LEN];
    dsm_heap_msg_t m = {.type = DSM_HEAP_MSG_FREE_REQ, .gaddr = dsm_gaddr_make(1, 4096)}, out;
    size_t n = dsm_heap_msg_encode(&m, buf);
    uint8_t bad[DSM_HEAP_MSG_MAX_LEN];
    memcpy(bad, buf, n); bad[0] ^= 1;                      /* magic */
    assert_int_equal(dsm_heap_msg_decode(bad, n, &out), DSM_ERR_PROTO);
    memcpy(bad, buf, n); dsm_put_u16(bad + 4, DSM_HEAP_MSG_VERSION + 1); /* version */
    assert_int_equal(dsm_heap_msg_decode(bad, n, &out), DSM_ERR_PROTO);
    memcpy(bad, buf, n); dsm_put_u16(bad + 6, 99);         /* type */
    assert_int_equal(dsm_heap_msg_decode(bad, n, &out), DSM_ERR_PROTO);
    memcpy(bad, buf, n); dsm_put_u32(bad + 8, 9);          /* body length */
    assert_int_equal(dsm_heap_msg_decode(bad, n, &out), DSM_ERR_PROTO);
    memcpy(bad, buf, n); dsm_put_u32(bad + 8, 0xffffffffu);
    assert_int_equal(dsm_heap_msg_decode(bad, n, &out), DSM_ERR_PROTO);
    memcpy(bad, buf, n); dsm_put_u64(bad + 12, dsm_gaddr_with_colour(m.gaddr, 5));  /* a generation */
    assert_int_equal(dsm_heap_msg_decode(bad, n, &out), DSM_OK);
    memcpy(bad, buf, n); dsm_put_u64(bad + 12, dsm_gaddr_with_colour(m.gaddr, 0x8001)); /* not one */
    assert_int_equal(dsm_heap_msg_decode(bad, n, &out), DSM_ERR_PROTO);
    memcpy(bad, buf, n); dsm_put_u64(bad + 12, dsm_gaddr_make(1, 0));             /* null */
    assert_int_equal(dsm_heap_msg_decode(bad, n, &out), DSM_ERR_PROTO);
    dsm_heap_msg_t big = {.type = DSM_HEAP_MSG_ALLOC_REQ, .size = DSM_HEAP_MAX_PARTITION + 1};
    n = dsm_heap_msg_encode(&big, buf);
    assert_int_equal(dsm_heap_msg_decode(buf, n, &out), DSM_ERR_PROTO);
    dsm_heap_msg_t unknown = {.type = 77};
    assert_int_equal(dsm_heap_msg_encode(&unknown, buf), 0);
}

static void test_msg_serve(void **state)
{
    (void)state;
    region_t r = region_new(2 * MiB);
    uint8_t req[DSM_HEAP_MSG_MAX_LEN], rep[DSM_HEAP_MSG_MAX_LEN];
    size_t rep_len;
    dsm_heap_msg_t m = {.type = DSM_HEAP_MSG_ALLOC_REQ, .size = 100}, out;
    size_t n = dsm_heap_msg_encode(&m, req);
    assert_int_equal(dsm_heap_msg_serve(r.a, 5, DSM_HEAP_MSG_ALLOC_REQ, req, n, rep, &rep_len), DSM_OK);
    assert_int_equal(dsm_heap_msg_decode(rep, rep_len, &out), DSM_OK);
    assert_int_equal(out.type, DSM_HEAP_MSG_ALLOC_REP);
    assert_int_equal(dsm_gaddr_node(out.gaddr), 5);
    assert_int_equal(out.size, 112);
    dsm_gaddr_t g = out.gaddr;
    /* A request sent to the wrong handler is refused. */
    assert_int_equal(dsm_heap_msg_serve(r.a, 5, DSM_HEAP_MSG_FREE_REQ, req, n, rep, &rep_len), DSM_ERR_PROTO);
    /* check, then free, then both refuse. */
    m = (dsm_heap_msg_t){.type = DSM_HEAP_MSG_CHECK_REQ, .gaddr = g};
    n = dsm_heap_msg_encode(&m, req);
    assert_int_equal(dsm_heap_msg_serve(r.a, 5, DSM_HEAP_MSG_CHECK_REQ, req, n, rep, &rep_len), DSM_OK);
    assert_int_equal(dsm_heap_msg_decode(rep, rep_len, &out), DSM_OK);
    assert_int_equal(out.size, 112);
    /* ... but not at another node's rank. */
    assert_int_equal(dsm_heap_msg_serve(r.a, 6, DSM_HEAP_MSG_CHECK_REQ, req, n, rep, &rep_len), DSM_ERR_BAD_ADDR);
    dsm_heap_msg_t f = {.type = DSM_HEAP_MSG_FREE_REQ, .gaddr = g};
    size_t fn = dsm_heap_msg_encode(&f, req);
    assert_int_equal(dsm_heap_msg_serve(r.a, 5, DSM_HEAP_MSG_FREE_REQ, req, fn, rep, &rep_len), DSM_OK);
    assert_int_equal(rep_len, DSM_HEAP_MSG_HEADER_LEN);
    assert_int_equal(dsm_heap_msg_serve(r.a, 5, DSM_HEAP_MSG_FREE_REQ, req, fn, rep, &rep_len), DSM_ERR_BAD_ADDR);
    assert_int_equal(rep_len, 0);
    n = dsm_heap_msg_encode(&m, req);
    assert_int_equal(dsm_heap_msg_serve(r.a, 5, DSM_HEAP_MSG_CHECK_REQ, req, n, rep, &rep_len), DSM_ERR_BAD_ADDR);
    /* Exhaustion travels as a status; no allocator means no memory. */
    m = (dsm_heap_msg_t){.type = DSM_HEAP_MSG_ALLOC_REQ, .size = 4 * MiB};
    n = dsm_heap_msg_encode(&m, req);
    assert_int_equal(dsm_heap_msg_serve(r.a, 5, DSM_HEAP_MSG_ALLOC_REQ, req, n, rep, &rep_len), DSM_ERR_NOMEM);
    assert_int_equal(dsm_heap_msg_serve(NULL, 5, DSM_HEAP_MSG_ALLOC_REQ, req, n, rep, &rep_len), DSM_ERR_NOMEM);
    region_free(&r);
}

/* Guarded operations: a request round-trips through the decoder; the
 * server checks each op as a local access is checked (live blocks, the
 * generation in the tag, the exact allocation on request, the node) and
 * performs the ones that pass; the reply checker refuses a reply of the
 * wrong length or with a status the server never gives. */
static void test_ops_serve(void **state)
{
    (void)state;
    region_t r = region_new(2 * MiB);
    uint64_t keep, off, gone;
    uint16_t gkeep, gen, ggone;
    assert_int_equal(dsm_heap_alloc(r.a, 64, &keep, &gkeep), DSM_OK);
    assert_int_equal(dsm_heap_alloc(r.a, 64, &off, &gen), DSM_OK);
    assert_int_equal(dsm_heap_alloc(r.a, 64, &gone, &ggone), DSM_OK);
    assert_int_equal(dsm_heap_free(r.a, gone, ggone), DSM_OK);
    dsm_gaddr_t g = dsm_gaddr_with_colour(dsm_gaddr_make(5, off), gen);
    uint64_t *word = (uint64_t *)((uint8_t *)r.base + off);
    *word = 40;
    uint8_t data[16];
    memset(data, 0xab, sizeof data);
    dsm_heap_op_t ops[] = {
        {.op = DSM_HEAP_OP_FADD, .len = 8, .gaddr = g, .operand = 2},                 /* 40 -> 42 */
        {.op = DSM_HEAP_OP_CAS, .len = 8, .gaddr = g, .operand = 42, .operand2 = 7},  /* 42 -> 7 */
        {.op = DSM_HEAP_OP_SWAP, .len = 8, .gaddr = g, .operand = 9},                 /* 7 -> 9 */
        {.op = DSM_HEAP_OP_WRITE, .len = 16, .gaddr = g + 16, .data = data},
        {.op = DSM_HEAP_OP_READ, .len = 8, .gaddr = g},
        /* freed: its granules carry the freed mark, not the tag */
        {.op = DSM_HEAP_OP_FADD, .len = 8, .gaddr = dsm_gaddr_with_colour(dsm_gaddr_make(5, gone), ggone),
         .operand = 1},
        /* a tag that is not the allocation's generation */
        {.op = DSM_HEAP_OP_READ, .len = 8, .gaddr = dsm_gaddr_with_colour(g, (uint16_t)(gen + 1))},
        /* inside live blocks, but past the 64-byte allocation: only the exact check refuses it */
        {.op = DSM_HEAP_OP_READ, .len = 8, .gaddr = dsm_gaddr_make(5, off + 64), .flags = DSM_HEAP_OP_EXACT},
        {.op = DSM_HEAP_OP_READ, .len = 8, .gaddr = dsm_gaddr_make(5, keep)},            /* raw: live blocks */
        {.op = DSM_HEAP_OP_READ, .len = 8, .gaddr = dsm_gaddr_make(6, off)},             /* another node's */
        {.op = DSM_HEAP_OP_READ, .len = 8, .gaddr = dsm_gaddr_make(5, 8)},               /* the header */
    };
    enum { NOPS = sizeof ops / sizeof ops[0] };
    size_t qlen = dsm_heap_ops_req_len(ops, NOPS);
    uint8_t *q = malloc(qlen);
    assert_int_equal(dsm_heap_ops_encode(ops, NOPS, q), qlen);
    uint32_t count;
    size_t rlen;
    assert_int_equal(dsm_heap_ops_validate(q, qlen, &count, &rlen), DSM_OK);
    assert_int_equal(count, NOPS);
    assert_int_equal(rlen, dsm_heap_ops_rep_len(ops, NOPS));
    dsm_heap_ops_iter_t it;
    dsm_heap_op_t back;
    assert_int_equal(dsm_heap_ops_begin(q, qlen, &it), DSM_OK);
    for (int i = 0; i < NOPS; i++) {
        assert_int_equal(dsm_heap_ops_next(&it, &back), DSM_OK);
        assert_int_equal(back.op, ops[i].op);
        assert_int_equal(back.gaddr, ops[i].gaddr);
        assert_int_equal(back.operand, ops[i].operand);
        assert_int_equal(back.flags, ops[i].flags);
    }
    assert_int_equal(dsm_heap_ops_next(&it, &back), DSM_ERR_PROTO);   /* no more */

    uint8_t small[64], *rep;
    size_t rep_len;
    assert_int_equal(dsm_heap_ops_serve(r.a, 5, q, qlen, small, sizeof small, &rep, &rep_len), DSM_OK);
    assert_true(rep != small);   /* too long for the caller's buffer */
    assert_int_equal(rep_len, rlen);
    assert_int_equal(dsm_heap_ops_reply_check(rep, rep_len, ops, NOPS), DSM_OK);
    assert_int_equal(dsm_heap_ops_reply_check(rep, rep_len - 1, ops, NOPS), DSM_ERR_PROTO);
    assert_int_equal(dsm_heap_ops_reply_check(rep, rep_len, ops, NOPS - 1), DSM_ERR_PROTO);
    static const dsm_status_t want[NOPS] = {DSM_OK, DSM_OK, DSM_OK, DSM_OK, DSM_OK, DSM_ERR_BAD_ADDR,
                                            DSM_ERR_BAD_ADDR, DSM_ERR_BAD_ADDR, DSM_OK, DSM_ERR_BAD_ADDR,
                                            DSM_ERR_BAD_ADDR};
    static const uint64_t olds[5] = {40, 42, 7, 0, 9};
    size_t pos = DSM_HEAP_OPS_HEADER_LEN;
    for (int i = 0; i < NOPS; i++) {
        const uint8_t *res;
        assert_int_equal(dsm_heap_ops_reply_next(rep, &pos, &ops[i], &res), want[i]);
        if (i < 5 && i != 3)
            assert_int_equal(dsm_get_u64(res), olds[i]);
    }
    assert_int_equal(pos, rep_len);
    assert_int_equal(*word, 9);
    assert_memory_equal((uint8_t *)r.base + off + 16, data, sizeof data);
    /* a status the server never gives */
    dsm_put_u32(rep + DSM_HEAP_OPS_HEADER_LEN, (uint32_t)(int32_t)DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_heap_ops_reply_check(rep, rep_len, ops, NOPS), DSM_ERR_PROTO);
    free(rep);
    /* no partition: every op fails, the request is still answered */
    assert_int_equal(dsm_heap_ops_serve(NULL, 5, q, qlen, small, sizeof small, &rep, &rep_len), DSM_OK);
    pos = DSM_HEAP_OPS_HEADER_LEN;
    for (int i = 0; i < NOPS; i++) {
        const uint8_t *res;
        assert_int_equal(dsm_heap_ops_reply_next(rep, &pos, &ops[i], &res), DSM_ERR_BAD_ADDR);
    }
    free(rep);
    /* malformed requests: refused whole, nothing performed */
    *word = 100;
    uint8_t bad[256];
    dsm_heap_op_t one = {.op = DSM_HEAP_OP_FADD, .len = 8, .gaddr = g, .operand = 1};
    size_t blen = dsm_heap_ops_encode(&one, 1, bad);
    struct { size_t at; uint8_t v; } pokes[] = {
        {0, 0},                         /* magic */
        {6, 2},                         /* type: a reply */
        {12, 0},                        /* count 0 */
        {16, 9},                        /* unknown op */
        {17, 2},                        /* unknown flag */
        {18, 1},                        /* reserved */
        {20, 4},                        /* an atomic of 4 bytes */
        {24, 4},                        /* misaligned */
        {31, 0x80},                     /* tag above the generations */
        {40, 1},                        /* operand2 of a fadd */
    };
    for (size_t i = 0; i < sizeof pokes / sizeof pokes[0]; i++) {
        uint8_t copy[256];
        memcpy(copy, bad, blen);
        copy[pokes[i].at] = pokes[i].v;
        assert_int_equal(dsm_heap_ops_serve(r.a, 5, copy, blen, small, sizeof small, &rep, &rep_len),
                         DSM_ERR_PROTO);
    }
    assert_int_equal(dsm_heap_ops_serve(r.a, 5, bad, blen - 1, small, sizeof small, &rep, &rep_len), DSM_ERR_PROTO);
    bad[blen] = 0;   /* a trailing byte (the header's length says so too) */
    dsm_put_u32(bad + 8, (uint32_t)(blen + 1 - 12));
    assert_int_equal(dsm_heap_ops_serve(r.a, 5, bad, blen + 1, small, sizeof small, &rep, &rep_len), DSM_ERR_PROTO);
    dsm_heap_op_t zero = {.op = DSM_HEAP_OP_READ, .len = 0, .gaddr = g};
    blen = dsm_heap_ops_encode(&zero, 1, bad);
    assert_int_equal(dsm_heap_ops_serve(r.a, 5, bad, blen, small, sizeof small, &rep, &rep_len), DSM_ERR_PROTO);
    assert_int_equal(*word, 100);
    free(q);
    region_free(&r);
}

/* What a peer published for its partition: {u64 base, u64 size, key}. */
static void test_partition_value(void **state)
{
    (void)state;
    uint8_t v[16 + 3];
    dsm_put_u64(v, 0x7f0000000000ull);
    dsm_put_u64(v + 8, 64 * MiB);
    memcpy(v + 16, "key", 3);
    dsm_region_value_t info;
    assert_int_equal(dsm_region_value_decode(v, sizeof v, &info), DSM_OK);
    assert_int_equal(info.base, 0x7f0000000000ull);
    assert_int_equal(info.size, 64 * MiB);
    assert_int_equal(info.key_len, 3);
    assert_memory_equal(info.key, "key", 3);
    /* Truncated anywhere up to an empty key: refused. */
    for (size_t cut = 0; cut <= 16; cut++)
        assert_int_equal(dsm_region_value_decode(v, cut, &info), DSM_ERR_PROTO);
    assert_int_equal(dsm_region_value_decode(NULL, 0, &info), DSM_ERR_PROTO);
    dsm_put_u64(v + 8, 0);   /* no memory */
    assert_int_equal(dsm_region_value_decode(v, sizeof v, &info), DSM_ERR_PROTO);
    dsm_put_u64(v + 8, (1ull << 40) + 4096);   /* beyond a global address */
    assert_int_equal(dsm_region_value_decode(v, sizeof v, &info), DSM_ERR_PROTO);
    dsm_put_u64(v, UINT64_MAX - 4095);   /* wraps */
    dsm_put_u64(v + 8, 8192);
    assert_int_equal(dsm_region_value_decode(v, sizeof v, &info), DSM_ERR_PROTO);
    for (uint64_t want = 1; want < (1ull << 39); want = want * 3 + 4097) {
        uint64_t got = dsm_heap_partition_rounded(want), nb = dsm_heap_nblocks(got);
        assert_int_equal(got % 4096, 0);
        assert_true((nb - dsm_heap_first_block(nb)) * DSM_HEAP_BLOCK_SIZE >= want);   /* served */
        assert_true(got <= want + want / 6 + 4 * DSM_HEAP_BLOCK_SIZE);                /* not much more */
    }
    assert_int_equal(dsm_heap_partition_rounded(0), 0);
}

/* A partition the host cannot hold is refused before anything is
 * allocated (no fabric is touched: none is given), saying what there is. */
static void test_oversized_partition_refused(void **state)
{
    (void)state;
    uint64_t mem = dsm_mem_available(), shm = dsm_shm_available();
    assert_true(mem != UINT64_MAX && mem > 0);   /* Linux has both */
    assert_true(shm != UINT64_MAX);
    char why[160];
    assert_int_equal(dsm_partitions_fit(1ull << 20, 1, why, sizeof why), DSM_OK);
    assert_int_equal(dsm_partitions_fit(mem + (1ull << 30), 0, why, sizeof why), DSM_ERR_NOMEM);
    assert_non_null(strstr(why, "MemAvailable"));
    dsm_heap_partition_t p;
    for (int t = DSM_TRANSPORT_SHM; t <= DSM_TRANSPORT_TCP; t++) {
        dsm_clear_last_error();
        assert_int_equal(dsm_heap_partition_create(NULL, (dsm_transport_t)t, 1ull << 50, &p), DSM_ERR_NOMEM);
        assert_non_null(strstr(dsm_last_error(), "does not fit"));
        assert_null(p.base);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_classes),
        cmocka_unit_test(test_oversized_partition_refused),
        cmocka_unit_test(test_create_rejects),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_generations),
        cmocka_unit_test(test_every_class),
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_exhaustion),
        cmocka_unit_test(test_bad_free),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_check_range),
        cmocka_unit_test(test_odd_size),
        cmocka_unit_test(test_many_allocators),
        cmocka_unit_test(test_thread_exit_parks),
        cmocka_unit_test(test_threads_stress),
        cmocka_unit_test(test_racing_double_free),
        cmocka_unit_test(test_gaddr),
        cmocka_unit_test(test_msg_roundtrip),
        cmocka_unit_test(test_msg_rejects),
        cmocka_unit_test(test_msg_serve),
        cmocka_unit_test(test_ops_serve),
        cmocka_unit_test(test_partition_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
