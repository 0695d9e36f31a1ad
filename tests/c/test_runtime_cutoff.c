/* Members cut off from one another while both still reach the coordinator:
 * a node whose transport fails toward a peer tells the coordinator, which
 * declares one of the two dead once the peer timeout has passed with both
 * still members (the client if one is, else the one reported), so the
 * whole cluster agrees on who is out. The transport failure is the one the
 * fabric's endpoint error callback raises, driven here directly. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cluster_util.h"
#include "dsm/clock.h"
#include "fabric/fabric_int.h"
#include "runtime/internal.h"

/* The verdict comes one peer timeout (3 s here) after the report, at the
 * coordinator's next tick; a loaded host may not run its threads for
 * seconds more. */
enum { VERDICT_WAIT_MS = 60000 };

/* Whether every node in nodes[0..n) has `rank` dead in its fabric. */
static int dead_everywhere(dsm_node_t **nodes, int n, uint32_t rank)
{
    for (int i = 0; i < n; i++)
        if (dsm_fabric_peer_state(dsm_node_fabric(nodes[i]), rank) != DSM_ERR_PEER_DEAD) return 0;
    return 1;
}

static int wait_lost_and_dead(dsm_node_t *victim, dsm_node_t **others, int n)
{
    uint32_t rank = dsm_node_rank(victim);
    uint64_t deadline = dsm_now_ms() + VERDICT_WAIT_MS;
    while (dsm_now_ms() < deadline && !(dsm_node_closed(victim) == DSM_NODE_LOST && dead_everywhere(others, n, rank)))
        sched_yield();
    return dsm_node_closed(victim) == DSM_NODE_LOST && dead_everywhere(others, n, rank);
}

static void assert_daemons_live(dsm_harness_t *c, int n)
{
    uint32_t ranks[8];
    for (int i = 0; i < n; i++) assert_int_equal(dsm_node_daemons(c->nodes[i], ranks, 8), (uint32_t)n);
}

/* A node declared dead reaches no one: a call fails at once (no member
 * would answer it), not at its operation's timeout. */
static void assert_refused_at_once(dsm_node_t *x)
{
    uint64_t old;
    assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(x), 0, TEST_REGION, 0, 1, &old), DSM_ERR_PEER_DEAD);
}

/* Whichever side reports the failed endpoint between a client and a daemon
 * (rank 1), the client is the one declared dead: the daemon keeps serving
 * everyone else, and the client is not left waiting for answers the
 * daemon no longer gives. */
static void client_cut_off(dsm_harness_t *c, int client_reports)
{
    dsm_node_t *x;
    assert_int_equal(test_client_start(c, &x), DSM_OK);
    if (client_reports) dsm_fabric_peer_failed(dsm_node_fabric(x), 1);
    else dsm_fabric_peer_failed(dsm_node_fabric(c->nodes[1]), dsm_node_rank(x));
    assert_true(wait_lost_and_dead(x, c->nodes, c->n));
    assert_daemons_live(c, c->n);
    assert_refused_at_once(x);
    dsm_node_destroy(x);
}

static void test_client_cut_off_from_daemon(void **state) { client_cut_off(*state, 1); }
static void test_daemon_cut_off_from_client(void **state) { client_cut_off(*state, 0); }

/* Two daemons: the one reported is declared dead, the others go on. Last:
 * the cluster has two daemons after it. */
static void test_daemon_cut_off_from_daemon(void **state)
{
    dsm_harness_t *c = *state;
    dsm_fabric_peer_failed(dsm_node_fabric(c->nodes[0]), 2);
    assert_true(wait_lost_and_dead(c->nodes[2], c->nodes, 2));
    assert_int_equal(dsm_node_closed(c->nodes[0]), DSM_NODE_OPEN);
    assert_int_equal(dsm_node_closed(c->nodes[1]), DSM_NODE_OPEN);
}

int main(void)
{
    static dsm_harness_t shm = {.transport = DSM_TRANSPORT_SHM, .peer_timeout_ms = 3000},
                         tcp = {.transport = DSM_TRANSPORT_TCP, .peer_timeout_ms = 3000};
#define CUTOFF_TESTS(state)                                                                         \
    cmocka_unit_test_prestate(test_client_cut_off_from_daemon, state),                              \
        cmocka_unit_test_prestate(test_daemon_cut_off_from_client, state),                          \
        cmocka_unit_test_prestate(test_daemon_cut_off_from_daemon, state)
    const struct CMUnitTest shm_tests[] = {CUTOFF_TESTS(&shm)};
    const struct CMUnitTest tcp_tests[] = {CUTOFF_TESTS(&tcp)};
    int failed = 0;
    if (test_cluster_start(&tcp, 3, 0) != DSM_OK) return 1;
    failed += cmocka_run_group_tests_name("cutoff/tcp", tcp_tests, NULL, NULL);
    dsm_harness_stop(&tcp);
    if (test_cluster_start(&shm, 3, 0) != DSM_OK) return 1;
    failed += cmocka_run_group_tests_name("cutoff/shm", shm_tests, NULL, NULL);
    dsm_harness_stop(&shm);
    return failed;
}
