/* DRust's protocol (csrc/own) on a 3-node in-process cluster, over shm and
 * tcp: a remote write makes every old cached copy unreachable and updates
 * the owner; a local write does the same by colour; colour overflow moves
 * the object; ABA through free and reallocation at the same address (of
 * objects, and of owner records one generation up per reuse);
 * eviction under a small budget; ownership transfer; and the refusals
 * (dropped box, borrow conflicts, move/drop of a borrowed box, unknown
 * type, forged and stale handles); counters exact from many threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cluster_util.h"
#include "dsm/own.h"
#include "own/internal.h"
#include "util/clock.h"

enum { N = 3, T_VEC = 100, T_ANY = 101, VEC = 64 };

static dsm_harness_t shm_cluster = {.transport = DSM_TRANSPORT_SHM};
static dsm_harness_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP};

static int setup(void **state, dsm_harness_t *c)
{
    if (dsm_own_type_register(T_VEC, "vec64", VEC) != DSM_OK ||
        dsm_own_type_register(T_ANY, "bytes", 0) != DSM_OK)
        return -1;
    return test_cluster_setup(state, c, N);
}
static int setup_shm(void **state) { return setup(state, &shm_cluster); }
static int setup_tcp(void **state) { return setup(state, &tcp_cluster); }

/* Put v in every word of the box's payload (a mutable borrow on node n). */
static void write_all(dsm_node_t *n, dsm_own_box_t b, uint64_t v, dsm_own_mut_t *used)
{
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(n, b, &m), DSM_OK);
    assert_int_equal(m.size, VEC);
    uint64_t *w = m.data;
    for (int i = 0; i < VEC / 8; i++)
        w[i] = v + (uint64_t)i;
    if (used)
        *used = m;
    assert_int_equal(dsm_own_box_release_mut(n, &m), DSM_OK);
}

/* Borrow on node n, check every word, release; returns whether it was cached. */
static int check_all(dsm_node_t *n, dsm_own_box_t b, uint64_t v)
{
    dsm_own_ref_t r;
    assert_int_equal(dsm_own_box_borrow(n, b, &r), DSM_OK);
    const uint64_t *w = r.data;
    for (int i = 0; i < VEC / 8; i++)
        assert_int_equal(w[i], v + (uint64_t)i);
    int cached = (int)r.cached;
    assert_int_equal(dsm_own_box_release(n, &r), DSM_OK);
    return cached;
}

static dsm_own_stats_t stats(dsm_node_t *n)
{
    dsm_own_stats_t s;
    dsm_own_stats(n, &s);
    return s;
}

/* Wait (bounded) until node n has served `want` frees of moved objects. */
static void wait_frees(dsm_node_t *n, uint64_t want)
{
    uint64_t deadline = dsm_now_ns() + 20000000000ull;
    struct timespec ms = {0, 1000000};
    while (stats(n).frees_served < want && dsm_now_ns() < deadline)
        nanosleep(&ms, NULL);   /* polling a counter, bounded: not a synchronisation */
    assert_true(stats(n).frees_served >= want);
}

static void test_remote_write_moves(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1], *n2 = c->nodes[2];
    dsm_own_box_t b;
    assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b), DSM_OK);
    write_all(n0, b, 1000, NULL);
    dsm_gaddr_t g0;
    assert_int_equal(dsm_own_box_addr(n0, b, &g0), DSM_OK);
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_strip(g0)), 0);

    /* Nodes 1 and 2 cache it; a second borrow on node 2 hits. */
    dsm_own_stats_t s2 = stats(n2);
    assert_true(check_all(n1, b, 1000));
    assert_true(check_all(n2, b, 1000));
    assert_true(check_all(n2, b, 1000));
    assert_int_equal(stats(n2).cache_misses, s2.cache_misses + 1);
    assert_int_equal(stats(n2).cache_hits, s2.cache_hits + 1);

    /* A write on node 1 moves the object there and updates the owner on node 0. */
    uint64_t frees0 = stats(n0).frees_served, moves1 = stats(n1).moves;
    dsm_own_mut_t m;
    write_all(n1, b, 2000, &m);
    assert_int_equal(m.moved, 1);
    assert_int_equal(stats(n1).moves, moves1 + 1);
    dsm_gaddr_t g1;
    assert_int_equal(dsm_own_box_addr(n0, b, &g1), DSM_OK);
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_strip(g1)), 1);
    assert_int_equal(dsm_gaddr_colour(g1), (uint16_t)(dsm_gaddr_colour(m.g) + 1));
    assert_true(g1 != g0);

    /* Every old copy is unreachable: node 2 misses and sees the new value,
     * node 1 reads its own memory, node 0 fetches. */
    s2 = stats(n2);
    assert_true(check_all(n2, b, 2000));
    assert_int_equal(stats(n2).cache_misses, s2.cache_misses + 1);
    assert_int_equal(stats(n2).cache_hits, s2.cache_hits);
    assert_false(check_all(n1, b, 2000));
    assert_true(check_all(n0, b, 2000));
    /* The old copy at node 0 is freed, asynchronously. */
    wait_frees(n0, frees0 + 1);
    assert_int_equal(dsm_own_box_drop(n2, b), DSM_OK);
}

static void test_local_write_colour(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    dsm_own_box_t b;
    assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b), DSM_OK);
    write_all(n0, b, 7, NULL);
    dsm_gaddr_t g0, g1;
    assert_int_equal(dsm_own_box_addr(n0, b, &g0), DSM_OK);
    assert_true(check_all(n1, b, 7));
    assert_true(check_all(n1, b, 7));      /* hit */

    uint64_t bumps = stats(n0).colour_bumps, moves = stats(n0).moves;
    dsm_own_mut_t m;
    write_all(n0, b, 8, &m);
    assert_int_equal(m.moved, 0);
    assert_int_equal(stats(n0).colour_bumps, bumps + 1);
    assert_int_equal(stats(n0).moves, moves);
    assert_int_equal(dsm_own_box_addr(n0, b, &g1), DSM_OK);
    assert_int_equal(dsm_gaddr_strip(g1), dsm_gaddr_strip(g0));      /* same place */
    assert_int_equal(dsm_gaddr_colour(g1), (uint16_t)(dsm_gaddr_colour(g0) + 1));

    /* Node 1's copy keyed by the old colour is never found again. */
    dsm_own_stats_t s1 = stats(n1);
    assert_true(check_all(n1, b, 8));
    assert_int_equal(stats(n1).cache_misses, s1.cache_misses + 1);
    assert_int_equal(stats(n1).cache_hits, s1.cache_hits);
    /* An owner update travels no object: a local write costs node 0 no message. */
    dsm_own_stats_t s0 = stats(n0);
    write_all(n0, b, 9, NULL);
    assert_int_equal(stats(n0).messages, s0.messages);
    assert_int_equal(dsm_own_box_drop(n0, b), DSM_OK);
}

/* A new box on `node` with every word `value`, and its address. */
static dsm_own_box_t alloc_written(dsm_node_t *node, uint64_t value, dsm_gaddr_t *g)
{
    dsm_own_box_t b;
    assert_int_equal(dsm_own_box_alloc(node, T_VEC, VEC, &b), DSM_OK);
    write_all(node, b, value, NULL);
    assert_int_equal(dsm_own_box_addr(node, b, g), DSM_OK);
    return b;
}

static void test_colour_overflow(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    dsm_gaddr_t g;
    dsm_own_box_t b = alloc_written(n0, 50, &g);
    /* Local writes up to the last colour, without moving. */
    dsm_own_mut_t m;
    while (dsm_gaddr_colour(g) != UINT16_MAX) {
        assert_int_equal(dsm_own_box_borrow_mut(n0, b, &m), DSM_OK);
        assert_int_equal(dsm_own_box_release_mut(n0, &m), DSM_OK);
        g = m.g;
    }
    dsm_gaddr_t last;
    assert_int_equal(dsm_own_box_addr(n0, b, &last), DSM_OK);
    assert_int_equal(last, g);
    assert_true(check_all(n1, b, 50));     /* node 1 caches it at the last colour */

    uint64_t moves = stats(n0).moves, q = stats(n0).quarantined;
    write_all(n0, b, 60, NULL);
    dsm_gaddr_t now;
    assert_int_equal(dsm_own_box_addr(n0, b, &now), DSM_OK);
    assert_int_equal(stats(n0).moves, moves + 1);
    assert_true(dsm_gaddr_strip(now) != dsm_gaddr_strip(last));     /* a new address */
    assert_true(dsm_gaddr_colour(now) != UINT16_MAX);
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_strip(now)), 0);
    /* The old slot cannot carry a new colour without wrapping: quarantined. */
    assert_int_equal(stats(n0).quarantined, q + 1);
    dsm_own_stats_t s1 = stats(n1);
    assert_true(check_all(n1, b, 60));
    assert_int_equal(stats(n1).cache_hits, s1.cache_hits);
    assert_int_equal(dsm_own_box_drop(n0, b), DSM_OK);
}

/* Allocate on n0 until an object lands in ga's slot again; it must start
 * above ga's final colour, so node 1, which cached ga's object, cannot hit
 * that stale copy: it reads the new zeros. Returns how many allocations
 * came before it (all dropped again). */
static int reuse_is_above(dsm_node_t *n0, dsm_node_t *n1, dsm_gaddr_t ga)
{
    enum { TRIES = 256 };
    dsm_own_box_t kept[TRIES];
    int nkept = 0, found = -1;
    dsm_gaddr_t gb = 0;
    for (int i = 0; i < TRIES && found < 0; i++) {
        assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &kept[i]), DSM_OK);
        nkept++;
        assert_int_equal(dsm_own_box_addr(n0, kept[i], &gb), DSM_OK);
        if (dsm_gaddr_strip(gb) == dsm_gaddr_strip(ga))
            found = i;
    }
    assert_true(found >= 0);
    assert_true(dsm_gaddr_colour(gb) > dsm_gaddr_colour(ga));
    dsm_own_stats_t s1 = stats(n1);
    dsm_own_ref_t r;
    assert_int_equal(dsm_own_box_borrow(n1, kept[found], &r), DSM_OK);
    for (int i = 0; i < VEC / 8; i++)
        assert_int_equal(((const uint64_t *)r.data)[i], 0);
    assert_int_equal(dsm_own_box_release(n1, &r), DSM_OK);
    assert_int_equal(stats(n1).cache_hits, s1.cache_hits);
    for (int i = 0; i < nkept; i++)
        assert_int_equal(dsm_own_box_drop(n0, kept[i]), DSM_OK);
    return found;
}

static void test_aba_reuse(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    dsm_gaddr_t ga;
    dsm_own_box_t a = alloc_written(n0, 111, &ga);
    assert_true(check_all(n1, a, 111));     /* a zero-count copy stays on node 1 */
    assert_int_equal(dsm_own_box_drop(n0, a), DSM_OK);
    (void)reuse_is_above(n0, n1, ga);
}

/* A thread keeps the objects it dropped last as spares (eight): a ninth
 * drop gives the oldest back to the heap, with its colour remembered, so
 * a later object in that slot still starts above it and a stale copy of
 * the old one is never hit. */
static void test_aba_through_an_evicted_spare(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    enum { DROPS = 9 };
    dsm_own_box_t b[DROPS];
    for (int i = 0; i < DROPS; i++)
        assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b[i]), DSM_OK);
    write_all(n0, b[0], 77, NULL);
    dsm_gaddr_t ga;
    assert_int_equal(dsm_own_box_addr(n0, b[0], &ga), DSM_OK);
    assert_true(check_all(n1, b[0], 77));   /* a zero-count copy stays on node 1 */
    for (int i = 0; i < DROPS; i++)          /* the first is the oldest: the last drop evicts it */
        assert_int_equal(dsm_own_box_drop(n0, b[i]), DSM_OK);
    /* not from the spares (the eight newest): the heap gave the slot back */
    assert_true(reuse_is_above(n0, n1, ga) >= DROPS - 1);
}

/* A record slot a drop leaves is the next box's, one generation up (the
 * ABA rule per slot, through the wrap, never 0): the old handle is refused. */
static void test_record_generations(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0];
    dsm_own_box_t prev;
    assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &prev), DSM_OK);
    assert_int_equal(dsm_own_box_drop(n0, prev), DSM_OK);
    dsm_gaddr_t g;
    int wrapped = 0;
    for (int i = 0; i < 65600; i++) {
        dsm_own_box_t b;
        assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b), DSM_OK);
        assert_int_equal(dsm_gaddr_strip(b), dsm_gaddr_strip(prev));
        uint16_t want = (uint16_t)(dsm_gaddr_colour(prev) + 1);
        assert_int_equal(dsm_gaddr_colour(b), want ? want : 1);
        wrapped |= want == 0;
        if (i % 4096 == 0 || want <= 1)
            assert_int_equal(dsm_own_box_addr(n0, prev, &g), DSM_ERR_BAD_ADDR);
        assert_int_equal(dsm_own_box_addr(n0, b, &g), DSM_OK);
        assert_int_equal(dsm_own_box_drop(n0, b), DSM_OK);
        prev = b;
    }
    assert_true(wrapped);
}

static void test_eviction_budget(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    enum { K = 10, OBJ = 16 + VEC };
    dsm_own_box_t b[K];
    for (int i = 0; i < K; i++) {
        assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b[i]), DSM_OK);
        write_all(n0, b[i], 100u * (uint64_t)i, NULL);
    }
    (void)dsm_own_cache_flush(n1);
    assert_int_equal(dsm_own_set_cache_budget(n1, 3 * OBJ), DSM_OK);
    uint64_t ev = stats(n1).evictions;
    /* Hold a borrow of b[0] all along: a referenced copy is never evicted. */
    dsm_own_ref_t held;
    assert_int_equal(dsm_own_box_borrow(n1, b[0], &held), DSM_OK);
    for (int i = 1; i < K; i++) {
        assert_true(check_all(n1, b[i], 100u * (uint64_t)i));
        assert_true(stats(n1).cache_bytes <= 3 * OBJ);
    }
    assert_true(stats(n1).evictions >= ev + K - 3);
    for (int i = 0; i < VEC / 8; i++)
        assert_int_equal(((const uint64_t *)held.data)[i], (uint64_t)i);
    /* b[0] is still cached (a hit) while held. */
    dsm_own_stats_t s1 = stats(n1);
    assert_true(check_all(n1, b[0], 0));
    assert_int_equal(stats(n1).cache_hits, s1.cache_hits + 1);
    assert_int_equal(dsm_own_box_release(n1, &held), DSM_OK);
    /* An evicted copy is fetched again (a miss). */
    s1 = stats(n1);
    assert_true(check_all(n1, b[1], 100));
    assert_int_equal(stats(n1).cache_misses, s1.cache_misses + 1);
    assert_int_equal(dsm_own_set_cache_budget(n1, 64u << 20), DSM_OK);
    for (int i = 0; i < K; i++)
        assert_int_equal(dsm_own_box_drop(n0, b[i]), DSM_OK);
}

static void test_ownership_transfer(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1], *n2 = c->nodes[2];
    dsm_own_box_t b, b2;
    assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b), DSM_OK);
    write_all(n0, b, 5, NULL);
    assert_true(check_all(n2, b, 5));
    assert_int_equal(dsm_own_box_move(n0, b, 2, &b2), DSM_OK);
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_strip(b2)), 2);       /* the owner lives on node 2 now */
    dsm_own_ref_t r;
    assert_int_equal(dsm_own_box_borrow(n0, b, &r), DSM_ERR_BAD_ADDR);  /* the old handle is dead */
    /* Node 2 writes: the object moves to node 2, the owner there is updated locally. */
    write_all(n2, b2, 6, NULL);
    dsm_gaddr_t g;
    assert_int_equal(dsm_own_box_addr(n1, b2, &g), DSM_OK);
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_strip(g)), 2);
    assert_true(check_all(n1, b2, 6));
    assert_false(check_all(n2, b2, 6));
    assert_int_equal(dsm_own_box_drop(n1, b2), DSM_OK);
}

static void test_bad_input(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    dsm_own_box_t b, x;
    dsm_own_ref_t r, r2;
    dsm_own_mut_t m;
    /* Unknown type id, wrong size for a fixed-size type. */
    assert_int_equal(dsm_own_box_alloc(n0, 4242, 8, &x), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC + 8, &x), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_type_register(T_VEC, "other", VEC), DSM_ERR_EXISTS);
    assert_int_equal(dsm_own_box_alloc(n0, T_ANY, 3, &x), DSM_OK);

    assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b), DSM_OK);
    write_all(n0, b, 77, NULL);
    /* borrow_mut, move and drop of a borrowed box: refused, nothing changes. */
    assert_int_equal(dsm_own_box_borrow(n1, b, &r), DSM_OK);
    assert_int_equal(dsm_own_box_borrow_mut(n0, b, &m), DSM_ERR_STATE);
    assert_int_equal(dsm_own_box_borrow_mut(n1, b, &m), DSM_ERR_STATE);
    assert_int_equal(dsm_own_box_move(n0, b, 1, &x), DSM_ERR_STATE);
    assert_int_equal(dsm_own_box_drop(n0, b), DSM_ERR_STATE);
    assert_int_equal(dsm_own_box_borrow(n0, b, &r2), DSM_OK);     /* shared borrows coexist */
    assert_int_equal(dsm_own_box_release(n0, &r2), DSM_OK);
    assert_int_equal(dsm_own_box_release(n1, &r), DSM_OK);
    assert_int_equal(dsm_own_box_release(n1, &r), DSM_ERR_STATE);  /* released twice */
    /* A borrow while mutably borrowed. */
    assert_int_equal(dsm_own_box_borrow_mut(n0, b, &m), DSM_OK);
    assert_int_equal(dsm_own_box_borrow(n1, b, &r), DSM_ERR_STATE);
    dsm_own_mut_t m2;
    assert_int_equal(dsm_own_box_borrow_mut(n1, b, &m2), DSM_ERR_STATE);
    assert_int_equal(dsm_own_box_release_mut(n0, &m), DSM_OK);
    assert_true(check_all(n1, b, 77));

    /* Forged handles: no generation, the null address, a partition header,
     * a live object that is not a record, a record with the wrong generation. */
    dsm_gaddr_t g;
    assert_int_equal(dsm_own_box_addr(n0, b, &g), DSM_OK);
    assert_int_equal(dsm_own_box_borrow(n1, dsm_gaddr_strip(b), &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_borrow(n1, dsm_gaddr_with_colour(0, 3), &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_borrow(n1, dsm_gaddr_with_colour(dsm_gaddr_make(0, 8), 3), &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_borrow(n1, dsm_gaddr_with_colour(dsm_gaddr_strip(g), 3), &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_borrow_mut(n1, dsm_gaddr_with_colour(b, (uint16_t)(dsm_gaddr_colour(b) + 1)), &m),
                     DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_drop(n1, dsm_gaddr_with_colour(dsm_gaddr_make(9, 4096), 1)), DSM_ERR_NO_PEER);
    /* A dropped box: every operation refuses its handle, on every node. */
    assert_int_equal(dsm_own_box_drop(n0, b), DSM_OK);
    assert_int_equal(dsm_own_box_borrow(n0, b, &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_borrow(n1, b, &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_borrow_mut(n1, b, &m), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_move(n1, b, 0, &x), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_drop(n0, b), DSM_ERR_BAD_ADDR);
}

/* Messages and bytes per operation, checks off (what a program that keeps
 * the borrow rules pays), with the box held by the node that uses it: a
 * read miss is one read of header and payload, a hit nothing, a remote
 * write a read plus a one-way free, a local write nothing, a drop a
 * one-way free where the object is elsewhere and nothing where it is here. */
static void test_costs(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    enum { OBJ = 16 + VEC, FREE_MSG = 24 };
    dsm_own_box_t b0, b;
    assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b0), DSM_OK);
    write_all(n0, b0, 3, NULL);
    assert_int_equal(dsm_own_box_move(n0, b0, 1, &b), DSM_OK);   /* node 1 holds the box */
    for (int i = 0; i < N; i++)
        assert_int_equal(dsm_own_set_checks(c->nodes[i], 0), DSM_OK);
    dsm_own_stats_t s = stats(n1);
    assert_true(check_all(n1, b, 3));                          /* miss */
    assert_int_equal(stats(n1).messages, s.messages + 2);
    assert_int_equal(stats(n1).bytes, s.bytes + OBJ);
    s = stats(n1);
    assert_true(check_all(n1, b, 3));                          /* hit */
    assert_int_equal(stats(n1).messages, s.messages);
    s = stats(n1);
    uint64_t frees0 = stats(n0).frees_served;
    write_all(n1, b, 4, NULL);                                 /* move */
    assert_int_equal(stats(n1).messages, s.messages + 3);
    assert_int_equal(stats(n1).bytes, s.bytes + OBJ + FREE_MSG);
    s = stats(n1);
    write_all(n1, b, 5, NULL);                                 /* local: colour */
    assert_false(check_all(n1, b, 5));
    assert_int_equal(stats(n1).messages, s.messages);
    wait_frees(n0, frees0 + 1);
    assert_int_equal(dsm_own_box_drop(n1, b), DSM_OK);             /* here: no message */
    assert_int_equal(stats(n1).messages, s.messages);
    /* A drop of an object elsewhere: one one-way FREE to its home. */
    assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b0), DSM_OK);
    assert_int_equal(dsm_own_box_move(n0, b0, 1, &b), DSM_OK);
    s = stats(n1);
    frees0 = stats(n0).frees_served;
    assert_int_equal(dsm_own_box_drop(n1, b), DSM_OK);
    assert_int_equal(stats(n1).messages, s.messages + 1);
    assert_int_equal(stats(n1).bytes, s.bytes + FREE_MSG);
    wait_frees(n0, frees0 + 1);
    for (int i = 0; i < N; i++)
        assert_int_equal(dsm_own_set_checks(c->nodes[i], 1), DSM_OK);
}

/* Counters from many threads at once: more threads than own's counter
 * slots (64) borrow a local box together, so both the per-thread slots and
 * the shared row take counts; every borrow is counted once, and a second
 * generation of threads (the slots given back and taken again) adds to the
 * same totals. */
enum { CT_THREADS = 80, CT_BORROWS = 50 };
typedef struct ct_arg {
    dsm_node_t *node;
    dsm_own_box_t box;
    pthread_barrier_t *bar;
    int ok;
} ct_arg_t;
static void *ct_main(void *p)
{
    ct_arg_t *a = p;
    pthread_barrier_wait(a->bar);   /* all alive at once: slots run out */
    a->ok = 1;
    for (int i = 0; i < CT_BORROWS; i++) {
        dsm_own_ref_t r;
        if (dsm_own_box_borrow(a->node, a->box, &r) != DSM_OK || dsm_own_box_release(a->node, &r) != DSM_OK)
            a->ok = 0;
    }
    return NULL;
}
static void test_counters_threads(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0];
    dsm_own_box_t b;
    assert_int_equal(dsm_own_box_alloc(n0, T_VEC, VEC, &b), DSM_OK);
    dsm_own_stats_t s0, s1;
    dsm_own_stats(n0, &s0);
    for (int gen = 0; gen < 2; gen++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, CT_THREADS);
        pthread_t th[CT_THREADS];
        ct_arg_t a[CT_THREADS];
        for (int i = 0; i < CT_THREADS; i++) {
            a[i] = (ct_arg_t){.node = n0, .box = b, .bar = &bar};
            assert_int_equal(pthread_create(&th[i], NULL, ct_main, &a[i]), 0);
        }
        for (int i = 0; i < CT_THREADS; i++) {
            pthread_join(th[i], NULL);
            assert_true(a[i].ok);
        }
        pthread_barrier_destroy(&bar);
        dsm_own_stats(n0, &s1);
        assert_int_equal(s1.local_reads - s0.local_reads, (uint64_t)(gen + 1) * CT_THREADS * CT_BORROWS);
    }
    assert_int_equal(s1.messages, s0.messages);   /* all local */
    assert_int_equal(dsm_own_box_drop(n0, b), DSM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remote_write_moves), cmocka_unit_test(test_local_write_colour),
        cmocka_unit_test(test_colour_overflow),    cmocka_unit_test(test_aba_reuse),
        cmocka_unit_test(test_aba_through_an_evicted_spare),
        cmocka_unit_test(test_record_generations),
        cmocka_unit_test(test_eviction_budget),    cmocka_unit_test(test_ownership_transfer),
        cmocka_unit_test(test_bad_input),          cmocka_unit_test(test_costs),
        cmocka_unit_test(test_counters_threads),
    };
    dsm_set_log_level(0);   /* the refusals log a warning each */
    int failed = cmocka_run_group_tests_name("own/shm", tests, setup_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("own/tcp", tests, setup_tcp, test_cluster_teardown);
    return failed;
}
