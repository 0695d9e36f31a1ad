/* The directory baseline (csrc/dir) on a 3-node in-process cluster, over
 * shm and tcp: read misses register sharers and then hit; a write
 * invalidates every sharer by message (counted at the home) and the new
 * value is what every node reads next; a read recalls a modified copy; a
 * write on another node waits for a reader there to finish (the reader's
 * node holds the invalidation back, the writer asks once); a write
 * invalidates two sharers at once; writers on all nodes increment one
 * object without losing an update or showing a torn view; lazy eviction
 * under a small budget; the exact message counts of each operation; a
 * drop elsewhere than the home is posted (the home frees the object after
 * it returns); the round trips a home's INV or RECALL chained to a
 * transaction, counted to the node that waited for it; and the refusals
 * (local borrow conflicts, bad and dropped handles, bad type). */
#include <sched.h>
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

/* A drop from another node than the home is posted: wait until the home
 * has freed the object (frees_served past `before`), bounded generously
 * (30 s: a loaded host may keep the home's progress thread off the CPU). */
static void wait_freed(dsm_node_t *home, uint64_t before)
{
    uint64_t deadline = dsm_now_ns() + 30ull * 1000000000ull;
    while (stats(home).frees_served == before && dsm_now_ns() < deadline)
        sched_yield();
    assert_true(stats(home).frees_served > before);
}

static void write_all(dsm_node_t *n, dsm_dir_obj_t o, uint64_t v)
{
    dsm_dir_mut_t m;
    assert_int_equal(dsm_dir_borrow_mut(n, o, &m), DSM_OK);
    assert_int_equal(m.size, VEC);
    for (int i = 0; i < VEC / 8; i++)
        ((uint64_t *)m.data)[i] = v + (uint64_t)i;
    assert_int_equal(dsm_dir_release_mut(n, &m), DSM_OK);
}

static void check_all(dsm_node_t *n, dsm_dir_obj_t o, uint64_t v)
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

/* An object homed on node 0 holding v. */
static dsm_dir_obj_t fresh(dsm_harness_t *c, uint64_t v)
{
    dsm_dir_obj_t o;
    assert_int_equal(dsm_dir_alloc(c->nodes[0], TYPE, VEC, &o), DSM_OK);
    write_all(c->nodes[0], o, v);
    return o;
}

static void test_sharers_and_invalidation(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1], *n2 = c->nodes[2];
    dsm_dir_obj_t o = fresh(c, 10);
    /* Read misses on 1 and 2 (one round trip each: READ 20 bytes, DATA
     * 24 + the object), then hits (none). */
    uint64_t m = msgs(c), b1 = stats(n1).bytes, deferred = stats(n0).home_deferred;
    uint64_t ch0 = stats(n0).chained_round_trips, ch1 = stats(n1).chained_round_trips,
             ch2 = stats(n2).chained_round_trips;
    check_all(n1, o, 10);
    assert_int_equal(stats(n1).bytes, b1 + 20 + 24 + 16 + VEC);
    check_all(n2, o, 10);
    assert_int_equal(msgs(c), m + 4);
    /* answered at once: their requesters waited for their own round trips only */
    assert_int_equal(stats(n1).chained_round_trips, ch1);
    assert_int_equal(stats(n2).chained_round_trips, ch2);
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
    /* node 2's write waited for the home's INV to node 1 and its ACK too */
    assert_int_equal(stats(n2).chained_round_trips, ch2 + 1);
    assert_int_equal(stats(n1).chained_round_trips, ch1);
    /* Node 1 misses; the home recalls node 2's modified copy (downgrade). */
    m = msgs(c);
    uint64_t miss1 = stats(n1).cache_misses;
    check_all(n1, o, 20);
    assert_int_equal(stats(n1).cache_misses, miss1 + 1);
    assert_int_equal(msgs(c), m + 4);
    assert_int_equal(stats(n0).home_deferred, deferred + 2);   /* the recall */
    assert_int_equal(stats(n1).chained_round_trips, ch1 + 1);   /* node 1's read waited for it */
    assert_int_equal(stats(n0).chained_round_trips, ch0);
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
    /* the home's own write waited for both ACKs: one round trip (sent at once) */
    assert_int_equal(stats(n0).chained_round_trips, ch0 + 1);
    check_all(n1, o, 30);
    check_all(n2, o, 30);
    /* A second write at the home, sharers again: they are invalidated again. */
    write_all(n0, o, 40);
    check_all(n2, o, 40);
    uint64_t freed = stats(n0).frees_served;
    assert_int_equal(dsm_dir_drop(n1, o), DSM_OK);
    wait_freed(n0, freed);
    dsm_dir_ref_t r;
    assert_int_equal(dsm_dir_borrow(n2, o, &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_borrow(n0, o, &r), DSM_ERR_BAD_ADDR);
}

typedef struct writer {
    dsm_node_t *n;
    dsm_dir_obj_t o;
    dsm_status_t st;
    int done;   /* atomic */
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
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Wait until node n has held back an INV or RECALL for a borrow (its
 * held_back passed `than`). The bound only turns a hang into a
 * failure: 20 s for a wait of a message's time. */
static void wait_held_back(dsm_node_t *n, uint64_t than)
{
    uint64_t deadline = dsm_deadline_ns(20000);
    while (stats(n).held_back <= than && dsm_now_ns() < deadline)
        sched_yield();
    assert_true(stats(n).held_back > than);
}

/* The writer has not been granted: the view r still holds v, untouched. */
static void still_waiting(writer_t *w, const dsm_dir_ref_t *r, uint64_t v)
{
    assert_int_equal(__atomic_load_n(&w->done, __ATOMIC_ACQUIRE), 0);
    for (int i = 0; i < VEC / 8; i++)
        assert_int_equal(((const uint64_t *)r->data)[i], v + (uint64_t)i);
}

/* The last reader lets go: the writer is granted and finishes. */
static void last_release(dsm_node_t *n, dsm_dir_ref_t *r, pthread_t th, writer_t *w)
{
    assert_int_equal(dsm_dir_release(n, r), DSM_OK);
    pthread_join(th, NULL);
    assert_int_equal(w->st, DSM_OK);
}

/* A write on node 2 while node 1 reads: the home queues nothing at node 2
 * (no "busy, ask again"); node 1 holds the INV back until its borrow ends,
 * and only then is the writer granted. */
static void test_writer_waits_for_reader(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1], *n2 = c->nodes[2];
    dsm_dir_obj_t o = fresh(c, 1);
    dsm_dir_ref_t r;
    assert_int_equal(dsm_dir_borrow(n1, o, &r), DSM_OK);
    uint64_t before = stats(n2).messages, held = stats(n1).held_back;
    writer_t w = {n2, o, DSM_ERR_STATE, 0};
    pthread_t th;
    pthread_create(&th, NULL, write_thread, &w);
    wait_held_back(n1, held);
    still_waiting(&w, &r, 1);
    last_release(n1, &r, th, &w);
    assert_int_equal(stats(n2).messages, before + 2);   /* one round trip: asked once */
    assert_int_equal(stats(n2).held_back, 0);
    check_all(n1, o, 500);
    check_all(n0, o, 500);
    assert_int_equal(dsm_dir_drop(n0, o), DSM_OK);
}

/* A write at the home invalidates two sharers at once: both hold the INV
 * back for their borrows at the same time (so the second was sent before
 * the first was answered), the write waits for both answers, and then
 * every node reads the new value. */
static void test_invalidate_sharers_at_once(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1], *n2 = c->nodes[2];
    dsm_dir_obj_t o = fresh(c, 7);
    dsm_dir_ref_t r1, r2;
    assert_int_equal(dsm_dir_borrow(n1, o, &r1), DSM_OK);
    assert_int_equal(dsm_dir_borrow(n2, o, &r2), DSM_OK);
    uint64_t h1 = stats(n1).held_back, h2 = stats(n2).held_back, inv0 = stats(n0).invalidations;
    uint64_t m = msgs(c);
    writer_t w = {n0, o, DSM_ERR_STATE, 0};
    pthread_t th;
    pthread_create(&th, NULL, write_thread, &w);
    wait_held_back(n1, h1);
    wait_held_back(n2, h2);
    assert_int_equal(stats(n0).invalidations, inv0 + 2);
    assert_int_equal(dsm_dir_release(n1, &r1), DSM_OK);
    still_waiting(&w, &r2, 7);   /* one answer of two */
    last_release(n2, &r2, th, &w);
    assert_int_equal(msgs(c), m + 4);   /* two INVs, two ACKs: the home's own write asks no one else */
    check_all(n1, o, 500);
    check_all(n2, o, 500);
    check_all(n0, o, 500);
    assert_int_equal(dsm_dir_drop(n2, o), DSM_OK);
}

enum { ROUNDS = 150 };

typedef struct counter_arg {
    dsm_node_t *n;
    dsm_dir_obj_t o;
    int bad;         /* a view whose words disagree, or that went back */
    dsm_status_t st;
} counter_arg_t;

/* Increments the counter ROUNDS times, every word of the object at once,
 * reading it between the writes: each view must have all words equal and
 * never be older than the last this node saw. */
static void *counter_thread(void *arg)
{
    counter_arg_t *a = arg;
    uint64_t seen = 0;
    for (int k = 0; k < ROUNDS && a->st == DSM_OK; k++) {
        dsm_dir_mut_t m;
        if ((a->st = dsm_dir_borrow_mut(a->n, a->o, &m)) != DSM_OK)
            break;
        uint64_t *w = m.data, v = w[0];
        for (int i = 1; i < VEC / 8; i++)
            a->bad |= w[i] != v;
        a->bad |= v < seen;
        for (int i = 0; i < VEC / 8; i++)
            w[i] = v + 1;
        seen = v + 1;
        if ((a->st = dsm_dir_release_mut(a->n, &m)) != DSM_OK)
            break;
        dsm_dir_ref_t r;
        if ((a->st = dsm_dir_borrow(a->n, a->o, &r)) != DSM_OK)
            break;
        const uint64_t *x = r.data;
        for (int i = 1; i < VEC / 8; i++)
            a->bad |= x[i] != x[0];
        a->bad |= x[0] < seen;
        seen = x[0];
        a->st = dsm_dir_release(a->n, &r);
    }
    return NULL;
}

/* Writers on all three nodes (the home among them) increment one object:
 * no increment is lost and no node ever sees a torn or older value. Then
 * the home's waits, which the racing phase shows only if its threads
 * overlapped (on a loaded 2-core host they may run one after another):
 * node 0's write after everyone read makes the home invalidate node 2's
 * copy, and node 2's write after it makes the home recall node 0's. */
static void test_concurrent_writers(void **state)
{
    dsm_harness_t *c = *state;
    dsm_dir_obj_t o;
    assert_int_equal(dsm_dir_alloc(c->nodes[1], TYPE, VEC, &o), DSM_OK);
    counter_arg_t a[N];
    pthread_t th[N];
    uint64_t moves = stats(c->nodes[1]).moves;
    for (int i = 0; i < N; i++) {
        a[i] = (counter_arg_t){c->nodes[i], o, 0, DSM_OK};
        pthread_create(&th[i], NULL, counter_thread, &a[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(a[i].st, DSM_OK);
        assert_int_equal(a[i].bad, 0);
    }
    for (int i = 0; i < N; i++) {
        dsm_dir_ref_t r;
        assert_int_equal(dsm_dir_borrow(c->nodes[i], o, &r), DSM_OK);
        for (int k = 0; k < VEC / 8; k++)
            assert_int_equal(((const uint64_t *)r.data)[k], (uint64_t)N * ROUNDS);
        assert_int_equal(dsm_dir_release(c->nodes[i], &r), DSM_OK);
    }
    assert_true(stats(c->nodes[1]).moves > moves);   /* the object did travel */
    uint64_t deferred = stats(c->nodes[1]).home_deferred;
    write_all(c->nodes[0], o, 1);
    assert_int_equal(stats(c->nodes[1]).home_deferred, deferred + 1);   /* node 2's copy invalidated */
    write_all(c->nodes[2], o, 2);
    assert_int_equal(stats(c->nodes[1]).home_deferred, deferred + 2);   /* node 0's copy recalled */
    check_all(c->nodes[1], o, 2);
    assert_int_equal(dsm_dir_drop(c->nodes[0], o), DSM_OK);
}

static void test_eviction(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *n0 = c->nodes[0], *n1 = c->nodes[1];
    enum { K = 8, OBJ = 16 + VEC };
    dsm_dir_obj_t o[K];
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
    dsm_dir_obj_t o, x;
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
    uint64_t freed = stats(n0).frees_served;
    assert_int_equal(dsm_dir_drop(n1, o), DSM_OK);
    wait_freed(n0, freed);
    assert_int_equal(dsm_dir_borrow(n1, o, &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_borrow_mut(n0, o, &m), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_dir_drop(n0, o), DSM_ERR_BAD_ADDR);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharers_and_invalidation),
        cmocka_unit_test(test_writer_waits_for_reader),
        cmocka_unit_test(test_invalidate_sharers_at_once),
        cmocka_unit_test(test_concurrent_writers),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_bad_input),
    };
    dsm_set_log_level(0);
    int failed = cmocka_run_group_tests_name("dir/shm", tests, setup_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("dir/tcp", tests, setup_tcp, test_cluster_teardown);
    return failed;
}
