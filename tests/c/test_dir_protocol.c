/* The directory baseline (csrc/dir) on a 3-node in-process cluster, over
 * shm and tcp: read misses register sharers and then hit; a write
 * invalidates every sharer by message (counted at the home) and the new
 * value is what every node reads next; a read recalls a modified copy; a
 * write on another node waits for a reader there to finish; lazy eviction
 * under a small budget; the exact message counts of each operation; and the
 * refusals (local borrow conflicts, bad and dropped handles, bad type). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cluster_util.h"
#include "dir/internal.h"
#include "dsm/dir.h"
#include "util/clock.h"

enum { N = 3, TYPE = 7, VEC = 64 };

static dsm_harness_t shm_cluster = {.transport = DSM_TRANSPORT_SHM};
static dsm_harness_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP};

static int setup_shm(void **state) { return test_cluster_setup(state, &shm_cluster, N); }
static int setup_tcp(void **state) { return test_cluster_setup(state, &tcp_cluster, N); }

static dsm_dir_stats_t stats(dsm_node_t *n)
{
    dsm_dir_stats_t s;
    dsm_dir_stats(n, &s);
    return s;
}

static void write_all(dsm_node_t *n, dsm_dobj_t o, uint64_t v)
{
    dsm_dir_mut_t m;
    assert_int_equal(dsm_dir_borrow_mut(n, o, &m), DSM_OK);
    assert_int_equal(m.size, VEC);
    for (int i = 0; i < VEC / 8; i++)
        ((uint64_t *)m.data)[i] = v + (uint64_t)i;
    assert_int_equal(dsm_dir_release_mut(n, &m), DSM_OK);
}

static void check_all(dsm_node_t *n, dsm_dobj_t o, uint64_t v)
{
    dsm_dir_ref_t r;
    assert_int_equal(dsm_dir_borrow(n, o, &r), DSM_OK);
    assert_int_equal(r.type, TYPE);
    for (int i = 0; i < VEC / 8; i++)
        assert_int_equal(((const uint64_t *)r.data)[i], v + (uint64_t)i);
    assert_int_equal(dsm_dir_release(n, &r), DSM_OK);
}

static uint64_t msgs(dsm_harness_t *c)
{
    uint64_t m = 0;
    for (int i = 0; i < N; i++)
        m += stats(c->nodes[i]).messages;
    return m;
}

static void test_sharers_and_invalidation(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1], *n2 = c->nodes[2];
    dsm_dobj_t o;
    assert_int_equal(dsm_dir_alloc(n0, TYPE, VEC, &o), DSM_OK);
    write_all(n0, o, 10);
    /* Read misses on 1 and 2 (one round trip each: READ 20 bytes, DATA
     * 24 + the object), then hits (none). */
    uint64_t m = msgs(c), b1 = stats(n1).bytes, deferred = stats(n0).home_deferred;
    check_all(n1, o, 10);
    assert_int_equal(stats(n1).bytes, b1 + 20 + 24 + 16 + VEC);
    check_all(n2, o, 10);
    assert_int_equal(msgs(c), m + 4);
    /* no writer elsewhere: the home served both in its handler */
    assert_int_equal(stats(n0).home_deferred, deferred);
    uint64_t h1 = stats(n1).cache_hits;
    check_all(n1, o, 10);
    check_all(n2, o, 10);
    assert_int_equal(msgs(c), m + 4);
    assert_int_equal(stats(n1).cache_hits, h1 + 1);

    /* A write on node 2: its request, and the home invalidates node 1
     * (node 2's own copy is upgraded, node 0's is the home's own). */
    uint64_t inv0 = stats(n0).invalidations, by0 = stats(n0).bytes;
    m = msgs(c);
    write_all(n2, o, 20);
    assert_int_equal(stats(n0).invalidations, inv0 + 1);
    assert_int_equal(stats(n0).bytes, by0 + 40);   /* INV and ACK, 20 bytes each */
    assert_int_equal(msgs(c), m + 4);
    assert_int_equal(stats(n0).moves >= 1, 1);
    assert_int_equal(stats(n0).home_deferred, deferred + 1);   /* it asked node 1: the request thread's */
    /* Node 1 misses; the home recalls node 2's modified copy (downgrade). */
    m = msgs(c);
    uint64_t miss1 = stats(n1).cache_misses;
    check_all(n1, o, 20);
    assert_int_equal(stats(n1).cache_misses, miss1 + 1);
    assert_int_equal(msgs(c), m + 4);
    assert_int_equal(stats(n0).home_deferred, deferred + 2);   /* the recall */
    check_all(n2, o, 20);   /* node 2 kept a shared copy: a hit */
    assert_int_equal(msgs(c), m + 4);
    check_all(n0, o, 20);   /* the home's memory was written back */
    assert_int_equal(msgs(c), m + 4);

    /* A write at the home invalidates both sharers: two invalidations. */
    inv0 = stats(n0).invalidations;
    m = msgs(c);
    write_all(n0, o, 30);
    assert_int_equal(stats(n0).invalidations, inv0 + 2);
    assert_int_equal(msgs(c), m + 4);
    check_all(n1, o, 30);
    check_all(n2, o, 30);
    /* A second write at the home, sharers again: they are invalidated again. */
    write_all(n0, o, 40);
    check_all(n2, o, 40);
    assert_int_equal(dsm_dir_drop(n1, o), DSM_OK);
    dsm_dir_ref_t r;
    assert_int_equal(dsm_dir_borrow(n2, o, &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_borrow(n0, o, &r), DSM_ERR_BAD_ADDR);
}

typedef struct writer {
    dsm_node_t *n;
    dsm_dobj_t o;
    dsm_status_t st;
} writer_t;

static void *write_thread(void *arg)
{
    writer_t *w = arg;
    dsm_dir_mut_t m;
    w->st = dsm_dir_borrow_mut(w->n, w->o, &m);
    if (w->st == DSM_OK) {
        for (int i = 0; i < VEC / 8; i++)
            ((uint64_t *)m.data)[i] = 500 + (uint64_t)i;
        w->st = dsm_dir_release_mut(w->n, &m);
    }
    return NULL;
}

static void test_writer_waits_for_reader(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1], *n2 = c->nodes[2];
    dsm_dobj_t o;
    assert_int_equal(dsm_dir_alloc(n0, TYPE, VEC, &o), DSM_OK);
    write_all(n0, o, 1);
    dsm_dir_ref_t r;
    assert_int_equal(dsm_dir_borrow(n1, o, &r), DSM_OK);
    uint64_t before = stats(n2).messages, busy = stats(n2).busy_retries;
    writer_t w = {n2, o, DSM_ERR_STATE};
    pthread_t th;
    pthread_create(&th, NULL, write_thread, &w);
    /* Wait until the writer was answered "busy" and asked again. The bound
     * only turns a hang into a failure: it is 20 s for a wait of ~100 us. */
    uint64_t deadline = dsm_deadline_ns(20000);
    struct timespec ms = {0, 1000000};
    while (stats(n2).busy_retries == busy && dsm_now_ns() < deadline)
        nanosleep(&ms, NULL);
    assert_true(stats(n2).busy_retries > busy);
    assert_true(stats(n2).messages >= before + 2);   /* the ask was a round trip */
    /* The reader still sees the old value, untouched. */
    for (int i = 0; i < VEC / 8; i++)
        assert_int_equal(((const uint64_t *)r.data)[i], 1 + (uint64_t)i);
    assert_int_equal(dsm_dir_release(n1, &r), DSM_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.st, DSM_OK);
    check_all(n1, o, 500);
    check_all(n0, o, 500);
    assert_int_equal(dsm_dir_drop(n0, o), DSM_OK);
}

static void test_eviction(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    enum { K = 8, OBJ = 16 + VEC };
    dsm_dobj_t o[K];
    for (int i = 0; i < K; i++) {
        assert_int_equal(dsm_dir_alloc(n0, TYPE, VEC, &o[i]), DSM_OK);
        write_all(n0, o[i], 1000u * (uint64_t)i);
    }
    assert_int_equal(dsm_dir_set_cache_budget(n1, 2 * OBJ), DSM_OK);
    uint64_t ev = stats(n1).evictions;
    for (int i = 0; i < K; i++) {
        check_all(n1, o[i], 1000u * (uint64_t)i);
        assert_true(stats(n1).cache_bytes <= 2 * OBJ);
    }
    assert_true(stats(n1).evictions >= ev + K - 2);
    /* An evicted sharer is still invalidated harmlessly by a write. */
    write_all(n0, o[0], 9);
    check_all(n1, o[0], 9);
    assert_int_equal(dsm_dir_set_cache_budget(n1, 64u << 20), DSM_OK);
    for (int i = 0; i < K; i++)
        assert_int_equal(dsm_dir_drop(n0, o[i]), DSM_OK);
}

static void test_bad_input(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    dsm_dobj_t o, x;
    dsm_dir_ref_t r, r2;
    dsm_dir_mut_t m;
    assert_int_equal(dsm_dir_alloc(n0, 0, VEC, &x), DSM_ERR_INVALID);
    assert_int_equal(dsm_dir_alloc(n0, TYPE, 64u << 20, &x), DSM_ERR_INVALID);
    assert_int_equal(dsm_dir_alloc(n0, TYPE, VEC, &o), DSM_OK);
    /* Local conflicts are refused at once, on the home and elsewhere. */
    for (int k = 0; k < 2; k++) {
        dsm_node_t *n = c->nodes[k];
        assert_int_equal(dsm_dir_borrow(n, o, &r), DSM_OK);
        assert_int_equal(dsm_dir_borrow(n, o, &r2), DSM_OK);
        assert_int_equal(dsm_dir_borrow_mut(n, o, &m), DSM_ERR_STATE);
        assert_int_equal(dsm_dir_drop(n, o), DSM_ERR_STATE);
        assert_int_equal(dsm_dir_release(n, &r2), DSM_OK);
        assert_int_equal(dsm_dir_release(n, &r), DSM_OK);
        assert_int_equal(dsm_dir_release(n, &r), DSM_ERR_STATE);
        assert_int_equal(dsm_dir_borrow_mut(n, o, &m), DSM_OK);
        assert_int_equal(dsm_dir_borrow(n, o, &r), DSM_ERR_STATE);
        assert_int_equal(dsm_dir_release_mut(n, &m), DSM_OK);
    }
    /* Handles that are not objects. */
    assert_int_equal(dsm_dir_borrow(n1, dsm_gaddr_with_colour(o, 1), &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_borrow(n1, dsm_gaddr_make(0, 0), &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_borrow(n1, dsm_gaddr_make(0, 8), &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_borrow(n1, o + 16, &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_borrow(n0, o + 16, &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_drop(n1, o), DSM_OK);
    assert_int_equal(dsm_dir_borrow(n1, o, &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_borrow_mut(n0, o, &m), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_drop(n0, o), DSM_ERR_BAD_ADDR);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharers_and_invalidation),
        cmocka_unit_test(test_writer_waits_for_reader),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_bad_input),
    };
    dsm_set_log_level(0);
    int failed = cmocka_run_group_tests_name("dir/shm", tests, setup_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("dir/tcp", tests, setup_tcp, test_cluster_teardown);
    return failed;
}
