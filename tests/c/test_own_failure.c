/* A node dying while it holds objects, under own and dir, over shm and tcp:
 * an access to an object the dead node held fails with DSM_ERR_PEER_DEAD
 * within the fabric's bounded time; the rest of the heap keeps working
 * (objects elsewhere are read, moved and written; dir drops a dead sharer
 * from the sharers a write must invalidate). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sched.h>
#include <string.h>

#include "cluster_util.h"
#include "dsm/dir.h"
#include "dsm/own.h"
#include "util/clock.h"

enum { N = 3, TYPE = 400 };

static void run(dsm_transport_t transport)
{
    dsm_harness_t c = {.transport = transport};
    assert_int_equal(dsm_own_type_register(TYPE, "failure.u64", 8), DSM_OK);
    assert_int_equal(test_cluster_start(&c, N, 1), DSM_OK);
    dsm_node_t *n0 = c.nodes[0], *n1 = c.nodes[1], *n2 = c.nodes[2];

    /* own: b0 lives on node 0; b2's object on node 2, its owner on node 0. */
    dsm_own_box_t b0, b2x, b2;
    assert_int_equal(dsm_own_box_alloc(n0, TYPE, 8, &b0), DSM_OK);
    assert_int_equal(dsm_own_box_alloc(n2, TYPE, 8, &b2x), DSM_OK);
    assert_int_equal(dsm_own_box_move(n2, b2x, 0, &b2), DSM_OK);
    dsm_own_ref_t r;
    assert_int_equal(dsm_own_box_borrow(n1, b0, &r), DSM_OK);
    assert_int_equal(dsm_own_box_release(n1, &r), DSM_OK);
    /* dir: o2 homed on node 2; o0 on node 0 with node 2 a sharer. */
    dsm_dir_obj_t o0, o2;
    assert_int_equal(dsm_dir_alloc(n0, TYPE, 8, &o0), DSM_OK);
    assert_int_equal(dsm_dir_alloc(n2, TYPE, 8, &o2), DSM_OK);
    dsm_dir_ref_t dr;
    assert_int_equal(dsm_dir_borrow(n2, o0, &dr), DSM_OK);
    assert_int_equal(dsm_dir_release(n2, &dr), DSM_OK);

    /* Copies of node 2's objects cached on the survivors: they must not
     * outlive their home. */
    assert_int_equal(dsm_own_box_borrow(n0, b2, &r), DSM_OK);
    assert_int_equal(dsm_own_box_release(n0, &r), DSM_OK);
    assert_int_equal(dsm_dir_borrow(n1, o2, &dr), DSM_OK);
    assert_int_equal(dsm_dir_release(n1, &dr), DSM_OK);

    dsm_node_destroy(n2);
    c.nodes[2] = NULL;

    /* Within the fabric's bounded time the dead node's objects say so. */
    uint64_t deadline = dsm_deadline_ns(20000);
    dsm_status_t st;
    while ((st = dsm_own_box_borrow(n0, b2, &r)) == DSM_OK && dsm_now_ns() < deadline) {
        assert_int_equal(dsm_own_box_release(n0, &r), DSM_OK);
        sched_yield();
    }
    assert_int_equal(st, DSM_ERR_PEER_DEAD);
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(n1, b2, &m), DSM_ERR_PEER_DEAD);
    while ((st = dsm_dir_borrow(n1, o2, &dr)) == DSM_OK && dsm_now_ns() < deadline) {
        assert_int_equal(dsm_dir_release(n1, &dr), DSM_OK);
        sched_yield();
    }
    assert_int_equal(st, DSM_ERR_PEER_DEAD);

    /* The rest works: own moves b0 to node 1 and back; dir writes o0. */
    assert_int_equal(dsm_own_box_borrow_mut(n1, b0, &m), DSM_OK);
    memcpy(m.data, &(uint64_t){77}, 8);
    assert_int_equal(dsm_own_box_release_mut(n1, &m), DSM_OK);
    assert_int_equal(dsm_own_box_borrow(n0, b0, &r), DSM_OK);
    assert_int_equal(*(const uint64_t *)r.data, 77);
    assert_int_equal(dsm_own_box_release(n0, &r), DSM_OK);
    dsm_dir_mut_t dm;
    assert_int_equal(dsm_dir_borrow_mut(n1, o0, &dm), DSM_OK);
    memcpy(dm.data, &(uint64_t){88}, 8);
    assert_int_equal(dsm_dir_release_mut(n1, &dm), DSM_OK);
    assert_int_equal(dsm_dir_borrow(n0, o0, &dr), DSM_OK);
    assert_int_equal(*(const uint64_t *)dr.data, 88);
    assert_int_equal(dsm_dir_release(n0, &dr), DSM_OK);
    assert_int_equal(dsm_own_box_drop(n0, b0), DSM_OK);
    assert_int_equal(dsm_dir_drop(n1, o0), DSM_OK);
    dsm_harness_stop(&c);
}

static void test_failure_shm(void **state)
{
    (void)state;
    run(DSM_TRANSPORT_SHM);
}
static void test_failure_tcp(void **state)
{
    (void)state;
    run(DSM_TRANSPORT_TCP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_failure_shm), cmocka_unit_test(test_failure_tcp)};
    dsm_set_log_level(0);
    return cmocka_run_group_tests_name("own+dir/failure", tests, NULL, NULL);
}
