/* A spawn on a peer that cannot run, or whose answer cannot come, ends in
 * an error for its caller, never a hang: a malformed spawn is refused
 * (DSM_ERR_PROTO) and one of a function the target does not have too
 * (DSM_ERR_NO_HANDLER); a spawn held on a cut link, a result held on one,
 * and a target reported dead fail the task (DSM_ERR_PEER_DEAD). Links are
 * cut with the fabric's chaos mode at the moment the test picks, for far
 * longer than any wait here, so only the caller's own watch can end them.
 * Each case runs on a cluster of its own (a cut leaves the target failed
 * on the caller), over shm (busy progress: the joiner sleeps on its task)
 * and tcp (blocking: the joiner attends the worker). No sleeps: every wait
 * is for a condition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "cluster_util.h"
#include "spawn_util.h"
#include "fabric/chaos.h"
#include "runtime/internal.h"
#include "runtime/node_internal.h"
#include "runtime/spawn_wire.h"
#include "util/bytes.h"

/* How long a join may take before it counts as a hang: a failure is due
 * within the op timeout (3 s here), plus a second before the ping for a
 * lost result; 60 s leaves a loaded host (and ASan) ample room. A cut
 * lasts ten times longer, so no cut ends within a join's wait. */
enum { WAIT_MS = 60000, CUT_MS = 600000, OP_TIMEOUT_MS = 3000 };

/* Chaos on, injecting nothing by itself: a cut of rank 0 at a send step
 * no node reaches. The tests cut with dsm_fabric_chaos_cut. */
#define CHAOS_IDLE "7:cut=0@4000000000+1"

/* Cuts this node's link to the caller (args: its rank, u32), then
 * returns: its result is held on the cut link. */
static dsm_status_t cut_then_return_fn(dsm_node_t *n, const void *args, size_t len, void *ret, size_t cap,
                                       size_t *ret_len)
{
    (void)ret, (void)cap;
    *ret_len = 0;
    if (len != 4) return DSM_ERR_INVALID;
    return dsm_fabric_chaos_cut(dsm_node_fabric(n), dsm_get_u32(args), CUT_MS);
}

static void register_fns(void)
{
    static const test_fn_entry_t fns[] = {
        {"test.fail_echo", test_echo_fn}, {"test.fail_cut", cut_then_return_fn}, {"test.fail_until_stopped", test_until_stopped_fn}};
    test_register_fns(fns, sizeof fns / sizeof fns[0]);
}

static void cluster_up(dsm_harness_t *c, dsm_transport_t tr)
{
    register_fns();
    *c = (dsm_harness_t){.transport = tr, .op_timeout_ms = OP_TIMEOUT_MS, .chaos = CHAOS_IDLE};
    assert_int_equal(test_cluster_start(c, 2, 0), DSM_OK);
}

/* Joins t, which must end with `want` (not by the join's timeout). */
static void expect_join(dsm_task_t *t, dsm_status_t want, const char *what)
{
    uint64_t t0 = dsm_now_ms();
    dsm_status_t st = dsm_join(t, NULL, 0, NULL, WAIT_MS);
    if (st != want)
        fail_msg("%s: join gave %s after %llu ms, expected %s", what, dsm_status_name(st),
                 (unsigned long long)(dsm_now_ms() - t0), dsm_status_name(want));
}

/* The target still runs a good spawn. */
static void expect_served(dsm_node_t *from, uint32_t rank)
{
    dsm_task_t *t;
    uint64_t v = 0x5eed, out = 0;
    size_t len = 0;
    assert_int_equal(dsm_spawn(from, rank, "test.fail_echo", &v, 8, &t), DSM_OK);
    assert_int_equal(dsm_join(t, &out, 8, &len, WAIT_MS), DSM_OK);
    assert_int_equal(len, 8);
    assert_int_equal(out, v);
}

/* Spawns the target cannot read are refused at once: too short for a
 * header, and a header whose token is 0. Before the acknowledgement such a
 * spawn was dropped, and its caller waited forever. */
static void test_malformed(void **state)
{
    dsm_harness_t c;
    cluster_up(&c, (dsm_transport_t)(uintptr_t)*state);
    dsm_task_t *t;
    static const uint8_t short_one[3] = {0xde, 0xad, 0x01};
    assert_int_equal(dsm_spawn_raw(c.nodes[0], 1, short_one, sizeof short_one, &t), DSM_OK);
    /* a refused task is done, so it counts as begun */
    assert_int_equal(dsm_task_wait_started(t, WAIT_MS), DSM_OK);
    expect_join(t, DSM_ERR_PROTO, "a 3-byte spawn");
    uint8_t zero_token[DSM_SPAWN_HEADER_LEN + 4] = {0};
    dsm_put_u32(zero_token, dsm_registry_id("test.fail_echo"));
    assert_int_equal(dsm_spawn_raw(c.nodes[0], 1, zero_token, sizeof zero_token, &t), DSM_OK);
    expect_join(t, DSM_ERR_PROTO, "a spawn with token 0");
    expect_served(c.nodes[0], 1);
    dsm_harness_stop(&c);
}

/* A function the target does not have: DSM_ERR_NO_HANDLER. */
static void test_unknown_function(void **state)
{
    dsm_harness_t c;
    cluster_up(&c, (dsm_transport_t)(uintptr_t)*state);
    dsm_task_t *t;
    assert_int_equal(dsm_spawn(c.nodes[0], 1, "test.fail_never_registered", NULL, 0, &t), DSM_OK);
    expect_join(t, DSM_ERR_NO_HANDLER, "an unknown function");
    expect_served(c.nodes[0], 1);
    dsm_harness_stop(&c);
}

/* The spawn is held on the caller's cut link to the target: no
 * acknowledgement within the op timeout, the target is failed. */
static void test_spawn_lost_on_cut(void **state)
{
    dsm_harness_t c;
    cluster_up(&c, (dsm_transport_t)(uintptr_t)*state);
    assert_int_equal(dsm_fabric_chaos_cut(dsm_node_fabric(c.nodes[0]), 1, CUT_MS), DSM_OK);
    dsm_task_t *t;
    uint64_t v = 1;
    assert_int_equal(dsm_spawn(c.nodes[0], 1, "test.fail_echo", &v, 8, &t), DSM_OK);
    expect_join(t, DSM_ERR_PEER_DEAD, "a spawn held on a cut link");
    dsm_harness_stop(&c);
}

/* The spawn is acknowledged and runs, and its result is held on the
 * target's cut link to the caller: the caller's ping goes unanswered too,
 * and the target is failed. Also through dsm_task_wait_started's slices
 * and join's, as a caller that polls would. */
static void test_result_lost_on_cut(void **state)
{
    dsm_harness_t c;
    cluster_up(&c, (dsm_transport_t)(uintptr_t)*state);
    uint8_t caller[4];
    dsm_put_u32(caller, 0);
    dsm_task_t *t;
    assert_int_equal(dsm_spawn(c.nodes[0], 1, "test.fail_cut", caller, sizeof caller, &t), DSM_OK);
    assert_int_equal(dsm_task_wait_started(t, WAIT_MS), DSM_OK);
    uint64_t t0 = dsm_now_ms();
    dsm_status_t st;
    while ((st = dsm_join(t, NULL, 0, NULL, 50)) == DSM_ERR_TIMEOUT && dsm_now_ms() - t0 < WAIT_MS) continue;
    if (st != DSM_ERR_PEER_DEAD)
        fail_msg("a result held on a cut link: join gave %s after %llu ms", dsm_status_name(st),
                 (unsigned long long)(dsm_now_ms() - t0));
    dsm_harness_stop(&c);
}

/* A running spawn whose target the fabric reports failed (as UCX reports a
 * broken endpoint) fails with DSM_ERR_PEER_DEAD. */
static void test_target_reported_dead(void **state)
{
    dsm_harness_t c;
    cluster_up(&c, (dsm_transport_t)(uintptr_t)*state);
    dsm_task_t *t;
    assert_int_equal(dsm_spawn(c.nodes[0], 1, "test.fail_until_stopped", NULL, 0, &t), DSM_OK);
    assert_int_equal(dsm_task_wait_started(t, WAIT_MS), DSM_OK);
    dsm_fabric_peer_failed(dsm_node_fabric(c.nodes[0]), 1);
    expect_join(t, DSM_ERR_PEER_DEAD, "a spawn on a target reported dead");
    dsm_node_stop_jobs(c.nodes[1]);
    dsm_harness_stop(&c);
}

int main(void)
{
    void *shm = (void *)(uintptr_t)DSM_TRANSPORT_SHM, *tcp = (void *)(uintptr_t)DSM_TRANSPORT_TCP;
#define CASES(tr)                                                                                           \
    cmocka_unit_test_prestate(test_malformed, tr), cmocka_unit_test_prestate(test_unknown_function, tr),    \
        cmocka_unit_test_prestate(test_spawn_lost_on_cut, tr),                                              \
        cmocka_unit_test_prestate(test_result_lost_on_cut, tr),                                             \
        cmocka_unit_test_prestate(test_target_reported_dead, tr)
    const struct CMUnitTest tests[] = {CASES(shm), CASES(tcp)};
    return cmocka_run_group_tests_name("spawn_fail", tests, NULL, NULL);
}
