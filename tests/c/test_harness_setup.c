/* The test harness on a setup that fails: a cluster whose start fails part
 * way leaves what it started to the group teardown, which must stop it (the
 * coordinator, the nodes up so far) and not take the fixture's state for a
 * started cluster when the setup never handed one over. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cluster_util.h"

/* A malformed chaos spec fails every node's fabric, after the coordinator
 * is up: the start fails part way. */
static void failed_setup_is_torn_down(void **unused)
{
    (void)unused;
    dsm_harness_t c = {.transport = DSM_TRANSPORT_SHM, .chaos = "not a chaos spec"};
    void *state = NULL;
    assert_int_not_equal(test_cluster_setup(&state, &c, 2), 0);
    assert_non_null(c.coord);   /* the coordinator was started before the node failed */
    assert_int_equal(c.n, 0);
    assert_ptr_equal(state, &c);   /* handed over all the same, for the teardown */
    assert_int_equal(test_cluster_teardown(&state), 0);
    assert_null(c.coord);
    assert_int_equal(c.n, 0);
}

/* A teardown given no cluster (a setup that failed before it had one). */
static void stop_without_a_cluster(void **unused)
{
    (void)unused;
    void *state = NULL;
    assert_int_equal(test_cluster_teardown(&state), 0);
    dsm_harness_t c = {.transport = DSM_TRANSPORT_SHM};
    assert_int_not_equal(dsm_harness_start(&c, 0), DSM_OK);   /* refused before anything started */
    dsm_harness_stop(&c);
    assert_null(c.coord);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(failed_setup_is_torn_down),
        cmocka_unit_test(stop_without_a_cluster),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
