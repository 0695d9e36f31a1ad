/* own's mutexes, both kinds (delegated to the home, one-sided CAS), over
 * shm and tcp: threads on 3 nodes (two on the home) increment a counter
 * box under the mutex with borrow checks on, so a second holder would be
 * refused and counted, and no increment may be lost; the messages of an
 * uncontended lock and unlock; and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "cluster_util.h"
#include "dsm/own.h"

enum { N = 3, TYPE = 500, THREADS = 4 };

/* Generous timeouts: these tests keep every core busy. */
static test_cluster_t shm_cluster = {.transport = DSM_TRANSPORT_SHM, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};
static test_cluster_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};

static int setup(void **state, test_cluster_t *c)
{
    if (dsm_own_type_register(TYPE, "mutex.counter", 8) != DSM_OK || test_cluster_start(c, N, 1) != DSM_OK)
        return -1;
    *state = c;
    return 0;
}
static int setup_shm(void **state) { return setup(state, &shm_cluster); }
static int setup_tcp(void **state) { return setup(state, &tcp_cluster); }
static int teardown(void **state)
{
    test_cluster_stop(*state);
    return 0;
}

typedef struct incr {
    dsm_node_t *node;
    dsm_own_mutex_t mx;
    dsm_box_t box;
    int iters, errors;
} incr_t;

static void *incr_thread(void *arg)
{
    incr_t *t = arg;
    for (int i = 0; i < t->iters; i++) {
        if (dsm_own_mutex_lock(t->node, t->mx) != DSM_OK) {
            t->errors++;
            continue;
        }
        dsm_own_mut_t m;
        if (dsm_box_borrow_mut(t->node, t->box, &m) == DSM_OK) {
            (*(uint64_t *)m.data)++;
            if (dsm_box_release_mut(t->node, &m) != DSM_OK)
                t->errors++;
        } else {
            t->errors++;
        }
        if (dsm_own_mutex_unlock(t->node, t->mx) != DSM_OK)
            t->errors++;
    }
    return NULL;
}

static void counter_under(test_cluster_t *c, int kind)
{
    dsm_own_mutex_t mx;
    dsm_box_t box;
    assert_int_equal(dsm_own_mutex_new(c->nodes[0], kind, &mx), DSM_OK);
    assert_int_equal(dsm_box_alloc(c->nodes[0], TYPE, 8, &box), DSM_OK);
    int iters = c->transport == DSM_TRANSPORT_TCP ? 25 : 60;
    incr_t t[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        /* Threads 0 and 3 share the home node 0. */
        t[i] = (incr_t){.node = c->nodes[i % N], .mx = mx, .box = box, .iters = iters};
        pthread_create(&th[i], NULL, incr_thread, &t[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(t[i].errors, 0);
    }
    for (int i = 0; i < N; i++) {
        dsm_own_ref_t r;
        assert_int_equal(dsm_box_borrow(c->nodes[i], box, &r), DSM_OK);
        assert_int_equal(*(const uint64_t *)r.data, (uint64_t)THREADS * (uint64_t)iters);
        assert_int_equal(dsm_box_release(c->nodes[i], &r), DSM_OK);
    }

    /* Uncontended from another node: DELEG a round trip and a one-way
     * unlock (3 messages); CAS a round trip each (4). */
    dsm_own_stats_t s0, s1;
    dsm_own_stats(c->nodes[2], &s0);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[2], mx), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[2], mx), DSM_OK);
    dsm_own_stats(c->nodes[2], &s1);
    assert_int_equal(s1.messages - s0.messages, kind == DSM_OWN_MUTEX_DELEG ? 3 : 4);

    /* Refusals: unlock by a non-holder, free elsewhere than the home or
     * while held, forged kinds. */
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[0], mx), DSM_ERR_STATE);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[0], mx), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(c->nodes[0], mx), DSM_ERR_STATE);
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[0], mx), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(c->nodes[1], mx), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[1], dsm_gaddr_strip(mx)), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[1], dsm_gaddr_with_colour(mx, 9)), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_mutex_free(c->nodes[0], mx), DSM_OK);
    if (kind == DSM_OWN_MUTEX_DELEG) {
        /* A freed delegated mutex is gone at its home, from everywhere. */
        assert_int_equal(dsm_own_mutex_lock(c->nodes[1], mx), DSM_ERR_BAD_ADDR);
        assert_int_equal(dsm_own_mutex_lock(c->nodes[0], mx), DSM_ERR_BAD_ADDR);
    }
    assert_int_equal(dsm_box_drop(c->nodes[0], box), DSM_OK);
}

static void test_deleg(void **state) { counter_under(*state, DSM_OWN_MUTEX_DELEG); }
static void test_cas(void **state) { counter_under(*state, DSM_OWN_MUTEX_CAS); }

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_deleg), cmocka_unit_test(test_cas)};
    dsm_set_log_level(0);
    int failed = cmocka_run_group_tests_name("own-mutex/shm", tests, setup_shm, teardown);
    failed += cmocka_run_group_tests_name("own-mutex/tcp", tests, setup_tcp, teardown);
    return failed;
}
