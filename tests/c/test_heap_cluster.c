/* The global heap across a 3-node in-process cluster, over shm and tcp:
 * alloc/free on every node from every node, read/write round trips of many
 * sizes, fetch_add from three nodes at once, cas/swap, and the refusals:
 * outside a partition, the header, a freed block, a misaligned atomic, a
 * rank that is not in the cluster, bad and double remote frees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/coord.h"
#include "dsm/heap.h"
#include "dsm/heap_sdk.h"
#include "dsm/log.h"
#include "dsm/node.h"
#include "harness/cluster.h"
#include "heap/alloc.h"
#include "heap/ids.h"
#include "heap/partition.h"
#include "runtime/internal.h"

#define SECRET "heap-cluster-secret"
#define PART (64ull << 20)
/* what a partition of PART takes, generation table included */
#define SERVED dsm_heap_partition_rounded(PART)
enum { N = 3 };


static void refuse_handler(void *ctx, const dsm_am_msg_t *msg)
{
    (void)ctx;
    (void)msg;
}

/* Before node i joins: its heap, and checks that a second attach and a
 * second owner of the heap's slot or ids are refused. */
static dsm_status_t attach_heap(void *ctx, int i, dsm_node_t *node)
{
    (void)i;
    dsm_status_t st = dsm_heap_attach(node);
    if (st != DSM_OK)
        return st;
    /* A second attach is refused and must not reformat the partition. */
    if (dsm_heap_attach(node) == DSM_OK)
        return DSM_ERR_STATE;
    /* The heap's ids are taken: another owner claiming them is refused. */
    if (dsm_node_set_module(node, dsm_heap_module.slot, ctx, NULL) != DSM_ERR_EXISTS ||
        dsm_fabric_am_register(dsm_node_fabric(node), DSM_AM_HEAP_ALLOC, refuse_handler, NULL) != DSM_ERR_EXISTS)
        return DSM_ERR_STATE;
    return DSM_OK;
}

static dsm_status_t cluster_start(dsm_harness_t *c)
{
    c->secret = SECRET;
    c->partition_size = PART;
    c->blocking_mask = ~0u;
    c->peer_timeout_ms = 3000;
    c->op_timeout_ms = 5000;
    c->wait_ms = 10000;
    c->attach = attach_heap;
    c->ctx = c;
    return dsm_harness_start(c, N);
}

static dsm_harness_t shm_cluster = {.transport = DSM_TRANSPORT_SHM};
static dsm_harness_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP};

static int setup(void **state, dsm_harness_t *c)
{
    *state = c;
    dsm_status_t st = cluster_start(c);
    if (st != DSM_OK)
        fprintf(stderr, "cluster start failed: %s\n", dsm_strerror(st));
    return st == DSM_OK ? 0 : -1;
}
static int setup_shm(void **state) { return setup(state, &shm_cluster); }
static int setup_tcp(void **state) { return setup(state, &tcp_cluster); }

static int teardown(void **state)
{
    dsm_harness_stop(*state);
    return 0;
}

static void pattern(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 8));
}

/* From every node, on every node: alloc, size, write, read from all three,
 * free from a third node, and the freed address is refused by a second free. */
static void test_alloc_matrix(void **state)
{
    dsm_harness_t *c = *state;
    for (int src = 0; src < N; src++) {
        for (uint32_t dst = 0; dst < N; dst++) {
            dsm_gaddr_t g;
            assert_int_equal(dsm_alloc(c->nodes[src], dst, 100, &g), DSM_OK);
            assert_int_equal(dsm_gaddr_node(g), dst);
            assert_true(dsm_gaddr_offset(g) >= DSM_HEAP_BLOCK_SIZE);
            for (int who = 0; who < N; who++) {
                size_t sz = 0;
                assert_int_equal(dsm_alloc_size(c->nodes[who], g, &sz), DSM_OK);
                assert_int_equal(sz, 112);
            }
            uint8_t out[100], in[100];
            pattern(out, sizeof out, (unsigned)(src * 3 + dst));
            assert_int_equal(dsm_write(c->nodes[src], g, out, sizeof out), DSM_OK);
            for (int who = 0; who < N; who++) {
                memset(in, 0, sizeof in);
                assert_int_equal(dsm_read(c->nodes[who], g, in, sizeof in), DSM_OK);
                assert_memory_equal(in, out, sizeof out);
            }
            /* The owner sees it in its own memory. */
            uint8_t *local = dsm_local_ptr(c->nodes[dst], g);
            assert_non_null(local);
            assert_memory_equal(local, out, sizeof out);
            assert_null(dsm_local_ptr(c->nodes[(dst + 1) % N], g));
            int freer = (src + 1) % N;
            assert_int_equal(dsm_free(c->nodes[freer], g), DSM_OK);
            assert_int_equal(dsm_free(c->nodes[src], g), DSM_ERR_BAD_ADDR);
            size_t sz;
            assert_int_equal(dsm_alloc_size(c->nodes[src], g, &sz), DSM_ERR_BAD_ADDR);
        }
    }
}

static void test_rw_sizes(void **state)
{
    dsm_harness_t *c = *state;
    static const size_t sizes[] = {1, 7, 8, 15, 16, 63, 64, 100, 1000, 4096, 8191, 32768, 32769,
                                   65536, 65537, 200000, (1u << 20) + 3, 5u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t len = sizes[k];
        int src = (int)(k % N);
        uint32_t dst = (uint32_t)((k + 1) % N);
        dsm_gaddr_t g;
        assert_int_equal(dsm_alloc(c->nodes[src], dst, len, &g), DSM_OK);
        uint8_t *out = malloc(len), *in = malloc(len);
        pattern(out, len, (unsigned)k);
        assert_int_equal(dsm_write(c->nodes[src], g, out, len), DSM_OK);
        memset(in, 0, len);
        assert_int_equal(dsm_read(c->nodes[src], g, in, len), DSM_OK);
        assert_memory_equal(in, out, len);
        memset(in, 0, len);
        assert_int_equal(dsm_read(c->nodes[dst], g, in, len), DSM_OK);   /* local path */
        assert_memory_equal(in, out, len);
        /* A piece in the middle, through an interior address (same tag). */
        if (len > 10) {
            dsm_gaddr_t mid = g + len / 3;
            size_t piece = len / 2;
            memset(in, 0, piece);
            assert_int_equal(dsm_read(c->nodes[(src + 2) % N], mid, in, piece), DSM_OK);
            assert_memory_equal(in, out + len / 3, piece);
        }
        /* Zero-length accesses are fine on a live address. */
        assert_int_equal(dsm_read(c->nodes[src], g, in, 0), DSM_OK);
        assert_int_equal(dsm_free(c->nodes[dst], g), DSM_OK);
        free(out);
        free(in);
    }
}

typedef struct adder {
    dsm_node_t *node;
    dsm_gaddr_t g;
    int n;
    dsm_status_t st;
    uint64_t *olds;
} adder_t;

static void *add_many(void *arg)
{
    adder_t *a = arg;
    for (int i = 0; i < a->n && a->st == DSM_OK; i++)
        a->st = dsm_fetch_add(a->node, a->g, 1, &a->olds[i]);
    return NULL;
}

/* Three threads, one per node (so one of them takes the local path), add to
 * one word: the total is exact and every old value was seen exactly once. */
static void test_fetch_add_threads(void **state)
{
    dsm_harness_t *c = *state;
    enum { PER = 1000 };
    dsm_gaddr_t g;
    assert_int_equal(dsm_alloc(c->nodes[0], 1, 8, &g), DSM_OK);
    uint64_t zero = 0;
    assert_int_equal(dsm_write(c->nodes[2], g, &zero, 8), DSM_OK);
    pthread_t t[N];
    adder_t a[N];
    for (int i = 0; i < N; i++) {
        a[i] = (adder_t){.node = c->nodes[i], .g = g, .n = PER, .st = DSM_OK,
                         .olds = calloc(PER, sizeof(uint64_t))};
        pthread_create(&t[i], NULL, add_many, &a[i]);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    uint8_t *seen = calloc(N * PER, 1);
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i].st, DSM_OK);
        for (int k = 0; k < PER; k++) {
            assert_true(a[i].olds[k] < N * PER);
            assert_int_equal(seen[a[i].olds[k]]++, 0);
        }
        free(a[i].olds);
    }
    free(seen);
    uint64_t total = 0;
    assert_int_equal(dsm_read(c->nodes[0], g, &total, 8), DSM_OK);
    assert_int_equal(total, N * PER);
    assert_int_equal(dsm_free(c->nodes[0], g), DSM_OK);
}

static void test_cas_swap(void **state)
{
    dsm_harness_t *c = *state;
    for (uint32_t owner = 0; owner < N; owner++) {
        for (int who = 0; who < N; who++) {
            dsm_gaddr_t g;
            assert_int_equal(dsm_alloc(c->nodes[who], owner, 64, &g), DSM_OK);
            dsm_gaddr_t w = g + 8;
            uint64_t v = 10, old = 0;
            assert_int_equal(dsm_write(c->nodes[who], w, &v, 8), DSM_OK);
            assert_int_equal(dsm_cas(c->nodes[who], w, 11, 20, &old), DSM_OK);  /* fails */
            assert_int_equal(old, 10);
            assert_int_equal(dsm_cas(c->nodes[who], w, 10, 20, &old), DSM_OK);  /* succeeds */
            assert_int_equal(old, 10);
            assert_int_equal(dsm_swap(c->nodes[who], w, 99, &old), DSM_OK);
            assert_int_equal(old, 20);
            assert_int_equal(dsm_fetch_add(c->nodes[who], w, 1, &old), DSM_OK);
            assert_int_equal(old, 99);
            assert_int_equal(dsm_fetch_add(c->nodes[who], w, 0, NULL), DSM_OK);
            uint64_t now;
            assert_int_equal(dsm_read(c->nodes[(who + 1) % N], w, &now, 8), DSM_OK);
            assert_int_equal(now, 100);
            /* Misaligned: a caller error, nothing touched. */
            assert_int_equal(dsm_fetch_add(c->nodes[who], g + 4, 1, &old), DSM_ERR_INVALID);
            assert_int_equal(dsm_cas(c->nodes[who], g + 1, 0, 1, &old), DSM_ERR_INVALID);
            assert_int_equal(dsm_swap(c->nodes[who], g + 12, 0, &old), DSM_ERR_INVALID);
            assert_int_equal(dsm_free(c->nodes[who], g), DSM_OK);
        }
    }
}

/* Addresses that name no live memory are refused, for every operation, from
 * the owner and from peers. */
static void test_bad_addresses(void **state)
{
    dsm_harness_t *c = *state;
    dsm_gaddr_t big;   /* a live large object, to straddle its end */
    assert_int_equal(dsm_alloc(c->nodes[0], 1, 2 * DSM_HEAP_BLOCK_SIZE, &big), DSM_OK);
    uint64_t big_off = dsm_gaddr_offset(big);
    uint8_t buf[64] = {0};
    /* Straddling into the next block is refused only if that block is free:
     * look at rank 1's state table (it is in this process). */
    const uint64_t *states = (const uint64_t *)((const uint8_t *)dsm_heap_local_partition(c->nodes[1], NULL) +
                                                DSM_HEAP_STATE_OFF);
    int next_free = states[(big_off >> DSM_HEAP_BLOCK_SHIFT) + 2] == DSM_HEAP_BLK_FREE;
    for (int who = 0; who < N; who++) {
        dsm_node_t *n = c->nodes[who];
        dsm_gaddr_t bad[] = {
            dsm_gaddr_make(1, 0),                        /* null */
            dsm_gaddr_make(1, 8),                        /* header */
            dsm_gaddr_make(1, DSM_HEAP_STATE_OFF),       /* state table */
            dsm_gaddr_make(1, SERVED),                   /* just past the partition */
            dsm_gaddr_make(1, SERVED - 8),               /* a free block at the end */
            dsm_gaddr_make(1, (1ull << 40) - 64),        /* far outside */
            dsm_gaddr_make(1, big_off + 2 * DSM_HEAP_BLOCK_SIZE - 8), /* straddles the end of `big` */
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            uint64_t old;
            if (i == 6 && !next_free)
                continue;
            assert_int_equal(dsm_read(n, bad[i], buf, 16), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_write(n, bad[i], buf, 16), DSM_ERR_BAD_ADDR);
            if (i != 6) {
                assert_int_equal(dsm_fetch_add(n, bad[i], 1, &old), DSM_ERR_BAD_ADDR);
                assert_int_equal(dsm_cas(n, bad[i], 0, 1, &old), DSM_ERR_BAD_ADDR);
                assert_int_equal(dsm_swap(n, bad[i], 1, &old), DSM_ERR_BAD_ADDR);
                /* local_ptr maps heap blocks of the node's own partition,
                 * allocated or not; everything else is NULL. */
                if (who != 1 || i != 4)
                    assert_null(dsm_local_ptr(n, bad[i]));
            }
            if (i > 0)
                assert_int_equal(dsm_free(n, bad[i]), DSM_ERR_BAD_ADDR);
        }
        /* Interior pointers are not allocations. */
        assert_int_equal(dsm_free(n, big + 16), DSM_ERR_BAD_ADDR);
        assert_int_equal(dsm_free(n, big + DSM_HEAP_BLOCK_SIZE), DSM_ERR_BAD_ADDR);
        size_t sz;
        assert_int_equal(dsm_alloc_size(n, big + 16, &sz), DSM_ERR_BAD_ADDR);
        /* Reading right up to the end of `big` is fine. */
        assert_int_equal(dsm_read(n, big + 2 * DSM_HEAP_BLOCK_SIZE - 16, buf, 16), DSM_OK);
        /* free(NULL) is a no-op, like free(). */
        assert_int_equal(dsm_free(n, 0), DSM_OK);
    }
    /* Nothing above hurt the target: it still allocates and serves. */
    dsm_gaddr_t g;
    assert_int_equal(dsm_alloc(c->nodes[2], 1, 24, &g), DSM_OK);
    assert_int_equal(dsm_write(c->nodes[2], g, "still fine", 11), DSM_OK);
    assert_int_equal(dsm_free(c->nodes[0], g), DSM_OK);
    assert_int_equal(dsm_free(c->nodes[0], big), DSM_OK);
}

/* After a (remote) free the block goes back to the partition, and every
 * access to it is refused. Large objects own their blocks, so their free is
 * immediately visible in the block state table. */
/* Batches over several windows, mixing local and remote elements: every
 * element done exactly once, old values right, a bad element reported in its
 * own status while the others go through. */
static void test_batches(void **state)
{
    dsm_harness_t *c = *state;
    enum { WORDS = 300, M = N * WORDS };
    dsm_node_t *n = c->nodes[0];
    dsm_gaddr_t bufs[N];
    for (uint32_t owner = 0; owner < N; owner++) {
        assert_int_equal(dsm_alloc(n, owner, WORDS * 8, &bufs[owner]), DSM_OK);
        uint64_t zero[WORDS] = {0};
        assert_int_equal(dsm_write(n, bufs[owner], zero, sizeof zero), DSM_OK);
    }
    static dsm_gaddr_t addrs[M];
    static uint64_t values[M], olds[M], back[M];
    static dsm_status_t sts[M];
    for (size_t i = 0; i < M; i++) {   /* interleave the owners */
        addrs[i] = bufs[i % N] + 8 * (i / N);
        values[i] = i + 1;
    }
    for (int round = 0; round < 2; round++) {
        assert_int_equal(dsm_fetch_add_batch(n, addrs, values, olds, M, sts), DSM_OK);
        for (size_t i = 0; i < M; i++) {
            assert_int_equal(sts[i], DSM_OK);
            assert_int_equal(olds[i], round * (i + 1));
        }
    }
    assert_int_equal(dsm_read_batch(n, addrs, back, 8, M, NULL), DSM_OK);
    for (size_t i = 0; i < M; i++)
        assert_int_equal(back[i], 2 * (i + 1));
    for (size_t i = 0; i < M; i++)
        values[i] = ~(uint64_t)i;
    assert_int_equal(dsm_write_batch(c->nodes[1], addrs, values, 8, M, NULL), DSM_OK);
    for (uint32_t owner = 0; owner < N; owner++) {   /* seen by a plain read from another node */
        uint64_t words[WORDS];
        assert_int_equal(dsm_read(c->nodes[2], bufs[owner], words, sizeof words), DSM_OK);
        for (size_t w = 0; w < WORDS; w++)
            assert_int_equal(words[w], ~(uint64_t)(w * N + owner));
    }
    /* one freed element (a small object inside a live block: its generation
     * says so) and one misaligned: reported, the rest done */
    dsm_gaddr_t gone, keep;
    assert_int_equal(dsm_alloc(n, 1, 64, &keep), DSM_OK);
    assert_int_equal(dsm_alloc(n, 1, 64, &gone), DSM_OK);
    assert_int_equal(dsm_free(n, gone), DSM_OK);
    dsm_gaddr_t mixed[4] = {addrs[0], gone, addrs[1] + 4, addrs[2]};
    uint64_t ones[4] = {1, 1, 1, 1}, mo[4];
    dsm_status_t ms[4];
    assert_int_equal(dsm_fetch_add_batch(n, mixed, ones, mo, 4, ms), DSM_ERR_BAD_ADDR);
    assert_int_equal(ms[0], DSM_OK);
    assert_int_equal(ms[1], DSM_ERR_BAD_ADDR);
    assert_int_equal(ms[2], DSM_ERR_INVALID);
    assert_int_equal(ms[3], DSM_OK);
    assert_int_equal(mo[0], ~(uint64_t)0);
    /* a run of elements in the same blocks shares one state read: the run in
     * freed memory fails as a whole, the live run after it does not */
    dsm_gaddr_t runs[6] = {gone, gone + 8, gone + 16, addrs[1], addrs[1], addrs[1]};
    uint64_t six[6] = {1, 1, 1, 1, 1, 1}, so[6];
    dsm_status_t ss[6];
    assert_int_equal(dsm_fetch_add_batch(n, runs, six, so, 6, ss), DSM_ERR_BAD_ADDR);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ss[i], DSM_ERR_BAD_ADDR);
    for (int i = 3; i < 6; i++) {
        assert_int_equal(ss[i], DSM_OK);
        assert_int_equal(so[i], ~(uint64_t)1 + (uint64_t)(i - 3));
    }
    assert_int_equal(dsm_free(n, keep), DSM_OK);
    assert_int_equal(dsm_read_batch(n, NULL, back, 8, 1, NULL), DSM_ERR_INVALID);
    assert_int_equal(dsm_read_batch(n, addrs, back, 8, 0, NULL), DSM_OK);
    for (uint32_t owner = 0; owner < N; owner++)
        assert_int_equal(dsm_free(n, bufs[owner]), DSM_OK);
}

/* Messages an access to a peer costs, from the initiator's counters: over
 * tcp a checked read, write or atomic through a tagged address is one
 * guarded request (the target checks and performs it), a batch one request
 * per peer and window, and no emulated one-sided operation at all; over shm
 * none (the peer's partition is mapped). */
static void test_messages_per_access(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n = c->nodes[0];
    dsm_fabric_t *f = dsm_node_fabric(n);
    dsm_gaddr_t g;
    assert_int_equal(dsm_alloc(n, 1, 4096, &g), DSM_OK);
    int tcp = c->transport == DSM_TRANSPORT_TCP;
    dsm_stats_t before, after;
    uint64_t v = 5, old;
    dsm_fabric_stats(f, &before);
    assert_int_equal(dsm_write(n, g, &v, 8), DSM_OK);
    assert_int_equal(dsm_fetch_add(n, g, 1, &old), DSM_OK);
    assert_int_equal(old, 5);
    assert_int_equal(dsm_cas(n, g, 6, 9, &old), DSM_OK);
    assert_int_equal(old, 6);
    assert_int_equal(dsm_swap(n, g, 11, &old), DSM_OK);
    assert_int_equal(old, 9);
    assert_int_equal(dsm_read(n, g, &v, 8), DSM_OK);
    assert_int_equal(v, 11);
    dsm_fabric_stats(f, &after);
    assert_int_equal(after.am_sent_by_handler[DSM_AM_HEAP_OPS] - before.am_sent_by_handler[DSM_AM_HEAP_OPS],
                     tcp ? 5 : 0);
    assert_int_equal(after.atomics - before.atomics, 3);
    assert_int_equal(after.puts - before.puts, 1);
    assert_int_equal(after.gets - before.gets, 1);
    assert_int_equal(after.am_sent_by_handler[DSM_AM_RMA_HANDLER] - before.am_sent_by_handler[DSM_AM_RMA_HANDLER],
                     0);
    enum { M = 600 };   /* three windows */
    static dsm_gaddr_t addrs[M];
    static uint64_t ones[M], olds[M];
    for (size_t i = 0; i < M; i++) {
        addrs[i] = g + 8 * (i % 512);
        ones[i] = 1;
    }
    dsm_fabric_stats(f, &before);
    assert_int_equal(dsm_fetch_add_batch(n, addrs, ones, olds, M, NULL), DSM_OK);
    dsm_fabric_stats(f, &after);
    assert_int_equal(after.am_sent_by_handler[DSM_AM_HEAP_OPS] - before.am_sent_by_handler[DSM_AM_HEAP_OPS],
                     tcp ? 3 : 0);
    assert_int_equal(after.atomics - before.atomics, M);   /* counted as the fabric's own would be */
    assert_int_equal(after.am_sent_by_handler[DSM_AM_RMA_HANDLER] - before.am_sent_by_handler[DSM_AM_RMA_HANDLER],
                     0);
    assert_int_equal(olds[0], 11);
    assert_int_equal(olds[512], 12);   /* the second add to word 0 */
    assert_int_equal(dsm_free(n, g), DSM_OK);
}

/* Accesses too large for a guarded request take the one-sided path with its
 * guard (a read over 64 KiB, batch elements over 4 KiB): through tagged
 * addresses they work while the allocation lives and are refused after. */
static void test_large_elements(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n = c->nodes[0];
    enum { BIG = 128 * 1024, ELEM = 8192, K = 4 };
    dsm_gaddr_t g, elems[K];
    assert_int_equal(dsm_alloc(n, 1, BIG, &g), DSM_OK);
    uint8_t *src = malloc(BIG), *dst = malloc(BIG);
    pattern(src, BIG, 7);
    assert_int_equal(dsm_write(n, g, src, BIG), DSM_OK);
    memset(dst, 0, BIG);
    assert_int_equal(dsm_read(n, g, dst, BIG), DSM_OK);
    assert_memory_equal(dst, src, BIG);
    for (int k = 0; k < K; k++)
        elems[k] = g + (uint64_t)k * ELEM;
    pattern(src, K * ELEM, 9);
    assert_int_equal(dsm_write_batch(n, elems, src, ELEM, K, NULL), DSM_OK);
    memset(dst, 0, K * ELEM);
    assert_int_equal(dsm_read_batch(n, elems, dst, ELEM, K, NULL), DSM_OK);
    assert_memory_equal(dst, src, K * ELEM);
    assert_int_equal(dsm_free(n, g), DSM_OK);
    assert_int_equal(dsm_read(n, g, dst, BIG), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_write(n, g, src, BIG), DSM_ERR_BAD_ADDR);
    dsm_status_t sts[K];
    assert_int_equal(dsm_read_batch(n, elems, dst, ELEM, K, sts), DSM_ERR_BAD_ADDR);
    for (int k = 0; k < K; k++)
        assert_int_equal(sts[k], DSM_ERR_BAD_ADDR);
    free(src);
    free(dst);
}

static void test_access_after_free(void **state)
{
    dsm_harness_t *c = *state;
    for (uint32_t owner = 0; owner < N; owner++) {
        int who = (int)(owner + 1) % N;
        dsm_node_t *n = c->nodes[who];
        dsm_gaddr_t g;
        assert_int_equal(dsm_alloc(n, owner, 100000, &g), DSM_OK);
        uint8_t buf[256];
        pattern(buf, sizeof buf, owner);
        assert_int_equal(dsm_write(n, g + 70000, buf, sizeof buf), DSM_OK);
        assert_int_equal(dsm_free(n, g), DSM_OK);
        uint64_t old;
        for (int k = 0; k < N; k++) {
            assert_int_equal(dsm_read(c->nodes[k], g, buf, 8), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_read(c->nodes[k], g + 70000, buf, sizeof buf), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_write(c->nodes[k], g + 8, buf, 8), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_fetch_add(c->nodes[k], g, 1, &old), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_cas(c->nodes[k], g, 0, 1, &old), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_swap(c->nodes[k], g, 1, &old), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_free(c->nodes[k], g), DSM_ERR_BAD_ADDR);
        }
    }
}

/* A freed small object inside a live block, and then its memory reused by a
 * new object at the same address: the old address (its generation in the
 * tag bits) is refused on every path, from the owner and from peers, while
 * the new one works; a raw untagged address still reaches live memory. */
static void test_stale_address_after_reuse(void **state)
{
    dsm_harness_t *c = *state;
    for (uint32_t owner = 0; owner < N; owner++) {
        dsm_node_t *n = c->nodes[(owner + 1) % N];
        dsm_gaddr_t keep, old, fresh;
        assert_int_equal(dsm_alloc(n, owner, 48, &keep), DSM_OK);   /* keeps the block live */
        assert_int_equal(dsm_alloc(n, owner, 48, &old), DSM_OK);
        assert_int_equal(dsm_free(n, old), DSM_OK);
        /* the owner's allocator hands the slot out again */
        assert_int_equal(dsm_alloc(n, owner, 48, &fresh), DSM_OK);
        assert_int_equal(dsm_gaddr_strip(fresh), dsm_gaddr_strip(old));
        assert_true(dsm_gaddr_colour(fresh) != dsm_gaddr_colour(old));
        uint64_t v = 7, got, prev;
        assert_int_equal(dsm_write(n, fresh, &v, 8), DSM_OK);
        for (int k = 0; k < N; k++) {
            dsm_node_t *m = c->nodes[k];
            dsm_gaddr_t olds[2] = {old, old + 8}, news[2] = {fresh, fresh + 8};
            uint64_t vals[2] = {1, 1}, outs[2];
            assert_int_equal(dsm_read(m, old, &got, 8), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_read(m, old + 16, &got, 8), DSM_ERR_BAD_ADDR);   /* interior */
            assert_int_equal(dsm_write(m, old, &v, 8), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_fetch_add(m, old, 1, &prev), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_cas(m, old, 7, 8, &prev), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_fetch_add_batch(m, olds, vals, outs, 2, NULL), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_read_batch(m, olds, outs, 8, 2, NULL), DSM_ERR_BAD_ADDR);
            size_t sz;
            assert_int_equal(dsm_alloc_size(m, old, &sz), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_free(m, old), DSM_ERR_BAD_ADDR);
            assert_int_equal(dsm_read(m, fresh, &got, 8), DSM_OK);
            assert_int_equal(got, 7);
            assert_int_equal(dsm_read_batch(m, news, outs, 8, 2, NULL), DSM_OK);
            assert_int_equal(dsm_read(m, dsm_gaddr_strip(fresh), &got, 8), DSM_OK);   /* raw */
            assert_int_equal(dsm_alloc_size(m, fresh, &sz), DSM_OK);
            assert_int_equal(dsm_read(m, dsm_gaddr_with_colour(fresh, 0x8001), &got, 8), DSM_ERR_BAD_ADDR);
        }
        assert_int_equal(dsm_free(n, fresh), DSM_OK);
        assert_int_equal(dsm_free(n, keep), DSM_OK);
    }
}

static void test_no_peer(void **state)
{
    dsm_harness_t *c = *state;
    dsm_gaddr_t g = dsm_gaddr_make(7, DSM_HEAP_BLOCK_SIZE);
    uint8_t buf[8];
    uint64_t old;
    size_t sz;
    for (int who = 0; who < N; who++) {
        dsm_node_t *n = c->nodes[who];
        dsm_gaddr_t out = 1;
        assert_int_equal(dsm_alloc(n, 7, 64, &out), DSM_ERR_NO_PEER);
        assert_int_equal(out, 0);
        assert_int_equal(dsm_alloc(n, 300, 64, &out), DSM_ERR_NO_PEER);
        assert_int_equal(dsm_read(n, g, buf, 8), DSM_ERR_NO_PEER);
        assert_int_equal(dsm_write(n, g, buf, 8), DSM_ERR_NO_PEER);
        assert_int_equal(dsm_fetch_add(n, g, 1, &old), DSM_ERR_NO_PEER);
        assert_int_equal(dsm_cas(n, g, 0, 1, &old), DSM_ERR_NO_PEER);
        assert_int_equal(dsm_swap(n, g, 1, &old), DSM_ERR_NO_PEER);
        assert_int_equal(dsm_free(n, g), DSM_ERR_NO_PEER);
        assert_int_equal(dsm_alloc_size(n, g, &sz), DSM_ERR_NO_PEER);
    }
}

/* Every node knows every partition (its own included) from what the heaps
 * published at join. */
static void test_partition_sizes(void **state)
{
    dsm_harness_t *c = *state;
    for (int who = 0; who < N; who++) {
        for (uint32_t r = 0; r < N; r++)
            assert_int_equal(dsm_heap_partition_size(c->nodes[who], r), SERVED);
        assert_int_equal(dsm_heap_partition_size(c->nodes[who], 7), 0);
        assert_int_equal(dsm_heap_partition_size(c->nodes[who], 1000), 0);
        uint64_t size;
        assert_non_null(dsm_heap_local_partition(c->nodes[who], &size));
        assert_int_equal(size, SERVED);
    }
}

static void test_nomem_and_usage(void **state)
{
    dsm_harness_t *c = *state;
    uint64_t used0, cap;
    dsm_heap_usage(c->nodes[2], &used0, &cap);
    uint64_t nb = dsm_heap_nblocks(SERVED);
    assert_int_equal(cap, (nb - dsm_heap_first_block(nb)) * DSM_HEAP_BLOCK_SIZE);
    assert_true(cap >= PART);   /* at least what was asked for */
    dsm_gaddr_t g;
    assert_int_equal(dsm_alloc(c->nodes[0], 2, PART, &g), DSM_ERR_NOMEM);
    assert_int_equal(dsm_alloc(c->nodes[0], 2, 1ull << 41, &g), DSM_ERR_NOMEM);
    assert_int_equal(dsm_alloc(c->nodes[2], 2, PART, &g), DSM_ERR_NOMEM);
    /* Most of the partition in one piece, allocated remotely, shows in usage. */
    assert_int_equal(dsm_alloc(c->nodes[0], 2, 32ull << 20, &g), DSM_OK);
    uint64_t used1;
    dsm_heap_usage(c->nodes[2], &used1, NULL);
    assert_int_equal(used1, used0 + (32ull << 20));
    assert_int_equal(dsm_free(c->nodes[1], g), DSM_OK);
    dsm_heap_usage(c->nodes[2], &used1, NULL);
    assert_int_equal(used1, used0);
}

/* Each node's thread allocates on random nodes, writes, reads back and frees,
 * while the others do the same: remote allocs run on the targets' progress
 * threads concurrently with local allocs there. */
typedef struct churn {
    dsm_harness_t *c;
    int me;
    int ops;
    int failed;
} churn_t;

static void *churn_thread(void *arg)
{
    churn_t *t = arg;
    dsm_node_t *n = t->c->nodes[t->me];
    enum { LIVE = 16 };
    dsm_gaddr_t live[LIVE] = {0};
    size_t lens[LIVE] = {0};
    unsigned seed = 1234u + (unsigned)t->me;
    uint8_t out[3000], in[3000];
    for (int i = 0; i < t->ops && !t->failed; i++) {
        seed = seed * 1103515245u + 12345u;
        int slot = (int)((seed >> 8) % LIVE);
        if (live[slot]) {
            pattern(out, lens[slot], (unsigned)(live[slot] >> 4));
            if (dsm_read(n, live[slot], in, lens[slot]) != DSM_OK || memcmp(in, out, lens[slot]) != 0 ||
                dsm_free(n, live[slot]) != DSM_OK)
                t->failed = 1;
            live[slot] = 0;
        } else {
            uint32_t dst = (seed >> 4) % N;
            size_t len = 1 + (seed >> 12) % sizeof out;
            dsm_gaddr_t g;
            if (dsm_alloc(n, dst, len, &g) != DSM_OK) {
                t->failed = 2;
                break;
            }
            pattern(out, len, (unsigned)(g >> 4));
            if (dsm_write(n, g, out, len) != DSM_OK)
                t->failed = 3;
            live[slot] = g;
            lens[slot] = len;
        }
    }
    for (int s = 0; s < LIVE; s++)
        if (live[s] && dsm_free(n, live[s]) != DSM_OK)
            t->failed = 4;
    return NULL;
}

static void test_concurrent_churn(void **state)
{
    dsm_harness_t *c = *state;
    uint64_t before[N];
    for (int i = 0; i < N; i++)
        dsm_heap_usage(c->nodes[i], &before[i], NULL);
    pthread_t th[N];
    churn_t t[N];
    for (int i = 0; i < N; i++) {
        t[i] = (churn_t){.c = c, .me = i, .ops = c->transport == DSM_TRANSPORT_TCP ? 600 : 2000};
        pthread_create(&th[i], NULL, churn_thread, &t[i]);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        assert_int_equal(t[i].failed, 0);
        uint64_t after;
        dsm_heap_usage(c->nodes[i], &after, NULL);
        assert_int_equal(after, before[i]);
    }
}

int main(void)
{
#define HEAP_TESTS                                                                                  \
    cmocka_unit_test(test_alloc_matrix), cmocka_unit_test(test_rw_sizes),                          \
        cmocka_unit_test(test_fetch_add_threads), cmocka_unit_test(test_cas_swap),                 \
        cmocka_unit_test(test_bad_addresses), cmocka_unit_test(test_access_after_free),           \
        cmocka_unit_test(test_stale_address_after_reuse),                                         \
        cmocka_unit_test(test_no_peer), cmocka_unit_test(test_partition_sizes),                   \
        cmocka_unit_test(test_nomem_and_usage), cmocka_unit_test(test_batches), cmocka_unit_test(test_messages_per_access), cmocka_unit_test(test_large_elements),                   \
        cmocka_unit_test(test_concurrent_churn)
    const struct CMUnitTest tests[] = {HEAP_TESTS};
    /* Refused frees log a warning each; that is expected noise here. */
    dsm_set_log_level(0);
    int failed = cmocka_run_group_tests_name("heap/shm", tests, setup_shm, teardown);
    failed += cmocka_run_group_tests_name("heap/tcp", tests, setup_tcp, teardown);
    return failed;
}
