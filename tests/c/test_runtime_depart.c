/* Members that leave: a clean departure is never reported as a failure,
 * and nothing a node sends afterwards (a message, a reply to a request the
 * leaver made, a one-sided operation, a flush, a lane's first use) hands
 * UCX an endpoint toward the departed rank. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cluster_util.h"
#include "dsm/clock.h"
#include "fabric/fabric_int.h"
#include "runtime/internal.h"

enum { HOLD_HANDLER = DSM_AM_USER_FIRST, LEAVES = 6 };

static dsm_stats_t stats_of(dsm_node_t *n)
{
    dsm_stats_t s;
    dsm_node_stats(n, &s);
    return s;
}

/* Clients that talked both ways with every daemon leave, one after
 * another (the same rank each time): once its destroy returns, every
 * daemon has it as gone, counted as a departure and never as a failure. A
 * leaver used to close its endpoints as soon as it had told the
 * coordinator, and a daemon whose transport saw them close before the
 * coordinator's notice came reported a failure. */
static void test_clean_leave_no_failure(void **state)
{
    dsm_harness_t *c = *state;
    for (int round = 0; round < LEAVES; round++) {
        dsm_node_t *x;
        assert_int_equal(test_client_start(c, &x), DSM_OK);
        uint32_t xr = dsm_node_rank(x);
        dsm_stats_t before[DSM_HARNESS_MAX_NODES];
        for (int i = 0; i < c->n; i++) {
            uint64_t old;
            assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(x), (uint32_t)i, TEST_REGION, 0, 1, &old), DSM_OK);
            assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(c->nodes[i]), xr, TEST_REGION, 8, 1, &old), DSM_OK);
            before[i] = stats_of(c->nodes[i]);
        }
        dsm_node_destroy(x);
        for (int i = 0; i < c->n; i++) {
            dsm_stats_t after = stats_of(c->nodes[i]);
            assert_int_equal(dsm_node_peer_state(c->nodes[i], xr), DSM_ERR_PEER_DEAD);
            assert_int_equal(after.peers_left, before[i].peers_left + 1);
            assert_int_equal(after.peers_failed, before[i].peers_failed);
        }
    }
}

/* The request a client made, held by its target's handler until the client
 * is gone. */
static _Atomic uint64_t held_id;
static _Atomic uint32_t held_from;

static void hold_handler(void *ctx, const dsm_am_msg_t *msg)
{
    (void)ctx;
    atomic_store(&held_from, msg->src_rank);
    atomic_store(&held_id, msg->request_id);
}

/* A client makes a request and leaves before the answer. The daemon then
 * replies to it, sends to it, operates on its memory, flushes it, and uses
 * it from a thread with a lane (whose first use would open an endpoint):
 * each is refused as DSM_ERR_PEER_DEAD, and no UCX endpoint is created. */
static void test_departed_peer_refused(void **state)
{
    dsm_harness_t *c = *state;
    dsm_fabric_t *f = dsm_node_fabric(c->nodes[0]);
    atomic_store(&held_id, 0);
    assert_int_equal(dsm_fabric_am_register(f, HOLD_HANDLER, hold_handler, NULL), DSM_OK);
    dsm_node_t *x;
    assert_int_equal(test_client_start(c, &x), DSM_OK);
    uint32_t xr = dsm_node_rank(x);
    uint64_t word = 7, old;
    assert_int_equal(dsm_fabric_put(f, xr, TEST_REGION, 0, &word, sizeof word), DSM_OK);
    uint8_t reply[8];
    dsm_op_t op;
    assert_int_equal(dsm_fabric_am_request_nb(dsm_node_fabric(x), 0, HOLD_HANDLER, "q", 1, reply, sizeof reply, &op),
                     DSM_OK);
    /* Generous: one message, but a loaded host may hold the target's
     * progress back for seconds. */
    uint64_t deadline = dsm_now_ms() + 30000;
    while (atomic_load(&held_id) == 0 && dsm_now_ms() < deadline)
        sched_yield();
    assert_int_not_equal(atomic_load(&held_id), 0);
    assert_int_equal(atomic_load(&held_from), xr);
    dsm_node_destroy(x);
    /* the client's destroy failed its request; finishing the completed
     * handle frees its record and needs no fabric */
    assert_int_equal(dsm_fabric_wait(&op), DSM_ERR_CLOSED);

    uint64_t opened = stats_of(c->nodes[0]).endpoints_opened;
    assert_int_equal(dsm_fabric_am_reply(f, xr, atomic_load(&held_id), DSM_OK, "r", 1), DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_fabric_am_send(f, xr, HOLD_HANDLER, "m", 1), DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_fabric_am_post(f, xr, HOLD_HANDLER, "m", 1), DSM_ERR_PEER_DEAD);
    size_t len;
    assert_int_equal(dsm_fabric_am_request(f, xr, HOLD_HANDLER, "q", 1, reply, sizeof reply, &len, 1000),
                     DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_fabric_put(f, xr, TEST_REGION, 0, &word, sizeof word), DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_fabric_get(f, xr, TEST_REGION, 0, &word, sizeof word), DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_fabric_fetch_add(f, xr, TEST_REGION, 0, 1, &old), DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_fabric_flush(f, xr), DSM_ERR_PEER_DEAD);
    dsm_lane_t *lane;
    assert_int_equal(dsm_fabric_lane_open(f, &lane), DSM_OK);
    dsm_fabric_lane_bind(lane);
    assert_int_equal(dsm_fabric_am_send(f, xr, HOLD_HANDLER, "m", 1), DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_fabric_put(f, xr, TEST_REGION, 0, &word, sizeof word), DSM_ERR_PEER_DEAD);
    dsm_fabric_lane_bind(NULL);
    dsm_fabric_lane_close(lane);
    assert_int_equal(stats_of(c->nodes[0]).endpoints_opened, opened);
    /* the daemons still reach each other, on the endpoints they had */
    assert_int_equal(dsm_fabric_fetch_add(f, 1, TEST_REGION, 0, 1, &old), DSM_OK);
    assert_int_equal(stats_of(c->nodes[0]).endpoints_opened, opened);
    dsm_fabric_am_register(f, HOLD_HANDLER, NULL, NULL);
}

/* Two clients x and y that have each reached the other (both ways). */
static void two_talking_clients(dsm_harness_t *c, dsm_node_t **x, dsm_node_t **y)
{
    assert_int_equal(test_client_start(c, x), DSM_OK);
    assert_int_equal(test_client_start(c, y), DSM_OK);
    uint64_t old;
    assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(*x), dsm_node_rank(*y), TEST_REGION, 0, 1, &old), DSM_OK);
    assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(*y), dsm_node_rank(*x), TEST_REGION, 0, 1, &old), DSM_OK);
}

/* Two clients leave at once: each waits for the other's acknowledgement
 * too, and neither sees the other fail. */
static void test_simultaneous_leaves(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *x, *y;
    two_talking_clients(c, &x, &y);
    dsm_stats_t before = stats_of(c->nodes[0]);
    /* x's LEAVE, then y's before x is let go: y still owes x its word */
    dsm_node_destroy(x);
    dsm_stats_t ys = stats_of(y);
    assert_int_equal(ys.peers_failed, 0);
    assert_int_equal(ys.peers_left, 1);
    dsm_node_destroy(y);
    dsm_stats_t after = stats_of(c->nodes[0]);
    assert_int_equal(after.peers_left, before.peers_left + 2);
    assert_int_equal(after.peers_failed, before.peers_failed);
}

/* Node 1's control thread, held in its dead-peer callback for one rank
 * until the test opens the gate: what the coordinator tells node 1 next
 * waits behind it. */
static _Atomic uint32_t gate_rank = UINT32_MAX;
static _Atomic int gate_entered, gate_open;

static void gate_cb(void *ctx, uint32_t rank)
{
    (void)ctx;
    if (rank != atomic_load(&gate_rank)) return;
    atomic_store(&gate_entered, 1);
    while (!atomic_load(&gate_open))
        sched_yield();
}

static _Atomic int destroyed;

static void *destroy_main(void *arg)
{
    dsm_node_destroy(arg);
    atomic_fetch_add(&destroyed, 1);
    return NULL;
}

/* Bounded waits on a loaded host: a few control messages, but its threads
 * may not run for seconds. */
static int wait_true(int (*cond)(void *), void *arg)
{
    uint64_t deadline = dsm_now_ms() + 30000;
    while (!cond(arg) && dsm_now_ms() < deadline)
        sched_yield();
    return cond(arg);
}

static int entered(void *arg)
{
    (void)arg;
    return atomic_load(&gate_entered);
}

static int two_leaving(void *arg)
{
    return dsm_coord_leaving(((dsm_harness_t *)arg)->coord) == 2;
}

/* A leaver is let go only once every member has the departure: z leaves
 * and node 1's control thread is held in its callback for z, so node 1 has
 * not heard that x, which talked to it, leaves next. Both wait (node 1
 * owes both its word), x's endpoints still open; once node 1 goes on, both
 * are let go and node 1 counts two departures, no failure. Before, x
 * closed its endpoints at once and node 1's transport saw a failure. */
static void test_leaver_waits_for_every_member(void **state)
{
    dsm_harness_t *c = *state;
    /* a callback stays: once per cluster, told apart by its harness (a
     * node of the second may reuse the address of the first's) */
    static dsm_harness_t *hooked[2];
    if (hooked[0] != c && hooked[1] != c) {
        dsm_node_on_peer_dead(c->nodes[1], gate_cb, NULL);
        hooked[hooked[0] != NULL] = c;
    }
    dsm_node_t *z, *x;
    assert_int_equal(test_client_start(c, &z), DSM_OK);
    assert_int_equal(test_client_start(c, &x), DSM_OK);
    uint64_t old;
    assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(x), 1, TEST_REGION, 0, 1, &old), DSM_OK);
    assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(c->nodes[1]), dsm_node_rank(x), TEST_REGION, 0, 1, &old),
                     DSM_OK);
    dsm_stats_t before = stats_of(c->nodes[1]);
    atomic_store(&gate_rank, dsm_node_rank(z));
    atomic_store(&gate_entered, 0);
    atomic_store(&gate_open, 0);
    atomic_store(&destroyed, 0);
    pthread_t tz, tx;
    /* checked once the gate is open: a failed check must not leave node 1 held */
    assert_int_equal(pthread_create(&tz, NULL, destroy_main, z), 0);
    int held = wait_true(entered, NULL);
    assert_int_equal(pthread_create(&tx, NULL, destroy_main, x), 0);
    int both_wait = held && wait_true(two_leaving, c);
    int let_go = atomic_load(&destroyed);
    uint64_t failed_meanwhile = stats_of(c->nodes[1]).peers_failed;
    atomic_store(&gate_open, 1);
    pthread_join(tz, NULL);
    pthread_join(tx, NULL);
    atomic_store(&gate_rank, UINT32_MAX);
    assert_true(held);
    assert_true(both_wait);
    assert_int_equal(let_go, 0);
    assert_int_equal(failed_meanwhile, before.peers_failed);
    assert_int_equal(dsm_coord_leaving(c->coord), 0);
    dsm_stats_t after = stats_of(c->nodes[1]);
    assert_int_equal(after.peers_left, before.peers_left + 2);
    assert_int_equal(after.peers_failed, before.peers_failed);
}

static int left_here(void *arg)
{
    dsm_node_t **xy = arg;   /* {the member, the leaver} */
    return dsm_fabric_peer_state(dsm_node_fabric(xy[0]), dsm_node_rank(xy[1])) == DSM_ERR_PEER_DEAD;
}

static int one_destroyed(void *arg)
{
    (void)arg;
    return atomic_load(&destroyed) >= 1;
}

/* A thread of node 1 inside a call toward x (here: holding x as a call
 * does; a mapping or a fence may hold it for an operation's timeout) when
 * x leaves: node 1 owes x its word until the thread is out, but its control
 * thread goes on meanwhile. y leaves after x and is let go (node 1 handled
 * y's LEFT behind x's), while x still waits; x goes once the thread is
 * out. Before, node 1's control thread waited in x's LEFT for the thread,
 * and y (and node 1's heartbeats) waited behind it. */
static void test_held_leaver_holds_only_itself(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *x, *y;
    assert_int_equal(test_client_start(c, &x), DSM_OK);
    assert_int_equal(test_client_start(c, &y), DSM_OK);
    dsm_fabric_t *f1 = dsm_node_fabric(c->nodes[1]);
    uint64_t old;
    assert_int_equal(dsm_fabric_fetch_add(f1, dsm_node_rank(x), TEST_REGION, 0, 1, &old), DSM_OK);
    dsm_peer_t *held;
    assert_int_equal(dsm_fabric_peer_acquire(f1, dsm_node_rank(x), &held), DSM_OK);
    atomic_store(&destroyed, 0);
    pthread_t tx, ty;
    assert_int_equal(pthread_create(&tx, NULL, destroy_main, x), 0);
    dsm_node_t *n1x[2] = {c->nodes[1], x};
    int x_gone_here = wait_true(left_here, n1x);
    assert_int_equal(pthread_create(&ty, NULL, destroy_main, y), 0);
    /* y's destroy returns once every member let it go: well within the
     * coordinator's bound on a leaver (the peer timeout, 60 s here) */
    int y_let_go = x_gone_here && wait_true(one_destroyed, NULL);
    pthread_join(ty, NULL);
    int x_owed = atomic_load(&destroyed) == 1 && dsm_fabric_peer_busy(f1, dsm_node_rank(x)) &&
                 dsm_coord_leaving(c->coord) == 1;
    dsm_fabric_peer_release(held);
    pthread_join(tx, NULL);
    assert_true(x_gone_here);
    assert_true(y_let_go);
    assert_true(x_owed);
    assert_int_equal(atomic_load(&destroyed), 2);
    assert_int_equal(dsm_coord_leaving(c->coord), 0);
}

/* A leaver still waiting for its own word hears of the departures that
 * come after its own: node 1 holds x, so x waits; y, which talked to x,
 * leaves meanwhile and is let go only once x has it as gone. x counts y's
 * departure and no failure. Before, only members were told: y was let go
 * at once and closed its endpoints under x, whose transport (tcp) saw y
 * fail, and over shm x never learnt that y had gone. */
static void test_leaver_hears_later_departures(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *x, *y;
    two_talking_clients(c, &x, &y);
    uint64_t old;
    dsm_fabric_t *f1 = dsm_node_fabric(c->nodes[1]);
    assert_int_equal(dsm_fabric_fetch_add(f1, dsm_node_rank(x), TEST_REGION, 0, 1, &old), DSM_OK);
    dsm_peer_t *held;
    assert_int_equal(dsm_fabric_peer_acquire(f1, dsm_node_rank(x), &held), DSM_OK);
    dsm_stats_t xs_before = stats_of(x);
    atomic_store(&destroyed, 0);
    pthread_t tx;
    assert_int_equal(pthread_create(&tx, NULL, destroy_main, x), 0);
    dsm_node_t *n1x[2] = {c->nodes[1], x};
    int x_leaving = wait_true(left_here, n1x);
    dsm_node_destroy(y);   /* returns once every member and x let it go */
    dsm_stats_t xs = stats_of(x);   /* x waits on node 1: still there */
    int x_still_waits = atomic_load(&destroyed) == 0;
    dsm_fabric_peer_release(held);
    pthread_join(tx, NULL);
    assert_true(x_leaving);
    assert_true(x_still_waits);
    assert_int_equal(xs.peers_left, xs_before.peers_left + 1);
    assert_int_equal(xs.peers_failed, xs_before.peers_failed);
}

int main(void)
{
    /* A member held in a test's callback sends no heartbeats: a peer
     * timeout far above the test's holds keeps it a member. */
    static dsm_harness_t shm = {.transport = DSM_TRANSPORT_SHM, .peer_timeout_ms = 60000},
                         tcp = {.transport = DSM_TRANSPORT_TCP, .peer_timeout_ms = 60000};
#define DEPART_TESTS(state)                                                                         \
    cmocka_unit_test_prestate(test_clean_leave_no_failure, state),                                  \
        cmocka_unit_test_prestate(test_departed_peer_refused, state),                               \
        cmocka_unit_test_prestate(test_simultaneous_leaves, state),                                 \
        cmocka_unit_test_prestate(test_leaver_waits_for_every_member, state),                       \
        cmocka_unit_test_prestate(test_held_leaver_holds_only_itself, state),                       \
        cmocka_unit_test_prestate(test_leaver_hears_later_departures, state)
    const struct CMUnitTest shm_tests[] = {DEPART_TESTS(&shm)};
    const struct CMUnitTest tcp_tests[] = {DEPART_TESTS(&tcp)};
    int failed = 0;
    if (test_cluster_start(&tcp, 3, 0) != DSM_OK) return 1;
    failed += cmocka_run_group_tests_name("depart/tcp", tcp_tests, NULL, NULL);
    dsm_harness_stop(&tcp);
    if (test_cluster_start(&shm, 3, 0) != DSM_OK) return 1;
    failed += cmocka_run_group_tests_name("depart/shm", shm_tests, NULL, NULL);
    dsm_harness_stop(&shm);
    return failed;
}
