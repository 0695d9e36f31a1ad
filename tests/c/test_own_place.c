/* own's placement and concurrency on 3 nodes, over shm and tcp: spawn_to
 * runs where the box's object is (and follows it when a write moves it);
 * spawn stays local while there is a free task slot, and otherwise goes
 * (with remote allocation) to the most vacant node; a TBox group moves in
 * one batch (the message count of one box, not of its members); reference
 * copies read through the cache; channels transfer boxes and carry plain
 * words; a box sent on a channel homed with its record keeps the record,
 * under a new generation, to a receiver there, and a receiver elsewhere
 * moves the record to itself, and a borrower racing the hand-off either is
 * refused or holds the box under a handle that stays valid. Bad input: spawn_to on a dropped or
 * forged box, an unregistered task, moving or mutably borrowing a group
 * with a borrowed member, a member past the count, sending a borrowed box,
 * a forged channel, receiving the wrong kind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "cluster_util.h"
#include "own/internal.h"
#include "dsm/own.h"

enum { N = 3, T_U64 = 310, T_BLOB = 311, T_GROUP = 312 };

static dsm_harness_t shm_cluster = {.transport = DSM_TRANSPORT_SHM, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};
static dsm_harness_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};

/* ---- tasks ----------------------------------------------------------------- */

/* Where it ran, and whether the box it was spawned to is local there (a
 * borrow that needs no cache). */
static dsm_status_t where_task(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap, size_t *ret_len)
{
    (void)args;
    (void)len;
    uint64_t out[2] = {dsm_node_rank(node), 0};
    dsm_own_box_t box = dsm_own_task_box();
    if (box) {
        dsm_own_ref_t r;
        dsm_status_t st = dsm_own_box_borrow(node, box, &r);
        if (st != DSM_OK)
            return st;
        out[1] = r.cached ? 2 : 1;
        (void)dsm_own_box_release(node, &r);
    }
    if (cap < sizeof out)
        return DSM_ERR_TOO_BIG;
    memcpy(ret, out, sizeof out);
    *ret_len = sizeof out;
    return DSM_OK;
}

/* Runs until the flag its argument names turns (or it is asked to stop). */
static volatile int release_busy;
static dsm_status_t busy_task(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap, size_t *ret_len)
{
    (void)node, (void)args, (void)len, (void)ret, (void)cap;
    *ret_len = 0;
    while (!__atomic_load_n(&release_busy, __ATOMIC_ACQUIRE) && !dsm_stop_requested(dsm_spawn_stop()))
        sched_yield();
    return DSM_OK;
}

static int setup(void **state, dsm_harness_t *c)
{
    if (dsm_own_type_register(T_U64, "place.u64", 8) != DSM_OK ||
        dsm_own_type_register(T_BLOB, "place.blob", 0) != DSM_OK ||
        dsm_own_type_register(T_GROUP, "place.group", 0) != DSM_OK ||
        dsm_own_task_register("place.where", where_task) != DSM_OK ||
        dsm_own_task_register("place.busy", busy_task) != DSM_OK)
        return -1;
    return test_cluster_setup(state, c, N);
}
static int setup_shm(void **state) { return setup(state, &shm_cluster); }
static int setup_tcp(void **state) { return setup(state, &tcp_cluster); }

static void join_where(dsm_task_t *t, uint64_t out[2])
{
    size_t rl = 0;
    assert_int_equal(dsm_join(t, out, 16, &rl, 0), DSM_OK);
    assert_int_equal(rl, 16);
}

/* A spawn_to the caller asked no rank of: its status, or its join's. */
static dsm_status_t spawn_to_outcome(dsm_node_t *n, dsm_own_box_t box, uint64_t out[2])
{
    dsm_task_t *t = NULL;
    dsm_status_t st = dsm_own_spawn_to(n, box, "place.where", NULL, 0, &t, NULL);
    if (st != DSM_OK) {
        assert_null(t);
        return st;
    }
    size_t rl = 0;
    st = dsm_join(t, out, 16, &rl, 0);
    if (st == DSM_OK)
        assert_int_equal(rl, 16);
    return st;
}

static void test_spawn_to_runs_where_the_box_is(void **state)
{
    dsm_harness_t *c = *state;
    dsm_own_box_t box;
    assert_int_equal(dsm_own_box_alloc(c->nodes[2], T_U64, 8, &box), DSM_OK);
    dsm_task_t *t;
    uint32_t rank = 99;
    uint64_t out[2];
    assert_int_equal(dsm_own_spawn_to(c->nodes[0], box, "place.where", NULL, 0, &t, &rank), DSM_OK);
    assert_int_equal(rank, 2);
    join_where(t, out);
    assert_int_equal(out[0], 2);     /* it ran on the box's node */
    assert_int_equal(out[1], 1);     /* and the box was local there */
    /* Without a rank asked for, the task goes to the record's node (2),
     * which runs it. */
    memset(out, 0, sizeof out);
    dsm_own_stats_t before, after;
    dsm_own_stats(c->nodes[0], &before);
    assert_int_equal(spawn_to_outcome(c->nodes[0], box, out), DSM_OK);
    dsm_own_stats(c->nodes[0], &after);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 1);
    assert_int_equal(after.messages - before.messages, 1);   /* the spawn alone: no record read */
    /* A write on node 1 moves the object there: spawn_to follows it, with
     * the rank (the caller reads the record) or without (node 2, which
     * holds the record, sends the task on). */
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(c->nodes[1], box, &m), DSM_OK);
    assert_int_equal(m.moved, 1);
    assert_int_equal(dsm_own_box_release_mut(c->nodes[1], &m), DSM_OK);
    assert_int_equal(dsm_own_spawn_to(c->nodes[0], box, "place.where", NULL, 0, &t, &rank), DSM_OK);
    join_where(t, out);
    assert_int_equal(rank, 1);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 1);
    memset(out, 0, sizeof out);
    assert_int_equal(spawn_to_outcome(c->nodes[0], box, out), DSM_OK);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 1);
    /* Bad input: an unregistered task, then a dropped box and forged ones,
     * refused before the task runs, with or without the rank. */
    assert_int_equal(dsm_own_spawn_to(c->nodes[0], box, "place.nothing", NULL, 0, &t, NULL), DSM_ERR_NO_HANDLER);
    assert_null(t);
    assert_int_equal(dsm_own_box_drop(c->nodes[0], box), DSM_OK);
    assert_int_equal(dsm_own_spawn_to(c->nodes[0], box, "place.where", NULL, 0, &t, &rank), DSM_ERR_BAD_ADDR);
    assert_null(t);
    assert_int_equal(spawn_to_outcome(c->nodes[0], box, out), DSM_ERR_BAD_ADDR);
    dsm_own_box_t forged = dsm_gaddr_with_colour(dsm_gaddr_make(1, 4096), 7);
    assert_int_equal(dsm_own_spawn_to(c->nodes[0], forged, "place.where", NULL, 0, &t, &rank), DSM_ERR_BAD_ADDR);
    assert_int_equal(spawn_to_outcome(c->nodes[0], forged, out), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_spawn_to(c->nodes[0], 0, "place.where", NULL, 0, &t, NULL), DSM_ERR_BAD_ADDR);
    assert_null(t);
}

static void wait_running(dsm_node_t *n, uint32_t want)
{
    while (dsm_own_tasks_running(n) != want)
        sched_yield();
}

/* A task forwarded by the record's node (the object moved) is cancelled
 * with the caller's task: the cancel reaches the forwarder, which passes it
 * on. */
static void test_forwarded_task_is_cancelled(void **state)
{
    dsm_harness_t *c = *state;
    dsm_own_box_t box;
    assert_int_equal(dsm_own_box_alloc(c->nodes[2], T_U64, 8, &box), DSM_OK);
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(c->nodes[1], box, &m), DSM_OK);   /* the object moves to node 1 */
    assert_int_equal(dsm_own_box_release_mut(c->nodes[1], &m), DSM_OK);
    __atomic_store_n(&release_busy, 0, __ATOMIC_RELEASE);
    dsm_task_t *t;
    assert_int_equal(dsm_own_spawn_to(c->nodes[0], box, "place.busy", NULL, 0, &t, NULL), DSM_OK);
    wait_running(c->nodes[1], 1);   /* it runs where the object is, sent on by node 2 */
    assert_int_equal(dsm_own_tasks_running(c->nodes[2]), 0);
    assert_int_equal(dsm_task_cancel(t), DSM_OK);
    /* Generous: a cancel takes a message and the forwarder's next look
     * (every 50 ms); a busy host may hold either back for seconds. Without
     * the cancel passed on the task never ends (release_busy stays 0). */
    size_t rl;
    dsm_status_t st = dsm_join(t, NULL, 0, &rl, 30000);
    __atomic_store_n(&release_busy, 1, __ATOMIC_RELEASE);
    if (st == DSM_ERR_TIMEOUT)
        (void)dsm_join(t, NULL, 0, &rl, 0);
    assert_int_equal(st, DSM_OK);
    wait_running(c->nodes[1], 0);
    assert_int_equal(dsm_own_box_drop(c->nodes[0], box), DSM_OK);
}

static void test_spawn_places_on_the_most_vacant_node(void **state)
{
    dsm_harness_t *c = *state;
    uint32_t rank = 99;
    dsm_task_t *t, *busy[2];
    uint64_t out[2];
    /* A free slot here: the task runs here. */
    assert_int_equal(dsm_own_spawn(c->nodes[0], "place.where", NULL, 0, &t, &rank), DSM_OK);
    assert_int_equal(rank, 0);
    join_where(t, out);
    assert_int_equal(out[0], 0);
    /* Nodes 0 and 1 each run a task: node 2 is the most vacant. */
    __atomic_store_n(&release_busy, 0, __ATOMIC_RELEASE);
    assert_int_equal(dsm_own_spawn(c->nodes[0], "place.busy", NULL, 0, &busy[0], &rank), DSM_OK);
    assert_int_equal(rank, 0);
    wait_running(c->nodes[0], 1);
    dsm_own_box_t on1;
    assert_int_equal(dsm_own_box_alloc(c->nodes[1], T_U64, 8, &on1), DSM_OK);
    assert_int_equal(dsm_own_spawn_to(c->nodes[0], on1, "place.busy", NULL, 0, &busy[1], &rank), DSM_OK);
    assert_int_equal(rank, 1);
    wait_running(c->nodes[1], 1);
    assert_int_equal(dsm_own_vacant_node(c->nodes[1], &rank), DSM_OK);
    assert_int_equal(rank, 2);
    assert_int_equal(dsm_own_spawn(c->nodes[0], "place.where", NULL, 0, &t, &rank), DSM_OK);
    assert_int_equal(rank, 2);
    join_where(t, out);
    assert_int_equal(out[0], 2);
    dsm_own_box_t placed;
    dsm_gaddr_t g;
    assert_int_equal(dsm_own_box_alloc_on(c->nodes[0], DSM_OWN_VACANT, T_U64, 8, &placed), DSM_OK);
    assert_int_equal(dsm_own_box_addr(c->nodes[0], placed, &g), DSM_OK);
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_strip(g)), 2);
    __atomic_store_n(&release_busy, 1, __ATOMIC_RELEASE);
    size_t rl;
    assert_int_equal(dsm_join(busy[0], NULL, 0, &rl, 0), DSM_OK);
    assert_int_equal(dsm_join(busy[1], NULL, 0, &rl, 0), DSM_OK);
    /* All idle: the tie goes to the most free heap. Nodes 0 and 2 hold 1 MiB more. */
    dsm_gaddr_t big[2];
    assert_int_equal(dsm_alloc(c->nodes[0], 0, 1 << 20, &big[0]), DSM_OK);
    assert_int_equal(dsm_alloc(c->nodes[2], 2, 1 << 20, &big[1]), DSM_OK);
    wait_running(c->nodes[0], 0);
    wait_running(c->nodes[1], 0);
    assert_int_equal(dsm_own_vacant_node(c->nodes[0], &rank), DSM_OK);
    assert_int_equal(rank, 1);
    assert_int_equal(dsm_free(c->nodes[0], big[0]), DSM_OK);
    assert_int_equal(dsm_free(c->nodes[2], big[1]), DSM_OK);
    /* An explicit remote allocation, and a refused one (unknown type). */
    assert_int_equal(dsm_own_box_alloc_on(c->nodes[0], 1, T_U64, 8, &placed), DSM_OK);
    assert_int_equal(dsm_own_box_addr(c->nodes[0], placed, &g), DSM_OK);
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_strip(g)), 1);
    assert_int_equal(dsm_own_box_drop(c->nodes[0], placed), DSM_OK);
    assert_int_not_equal(dsm_own_box_alloc_on(c->nodes[0], 1, 9999, 8, &placed), DSM_OK);
    assert_int_equal(dsm_own_box_drop(c->nodes[1], on1), DSM_OK);
}

/* ---- TBox groups ---------------------------------------------------------- */

enum { MEMBERS = 8, MEMBER = 64 };

static uint64_t msgs(dsm_node_t *n)
{
    dsm_own_stats_t s;
    dsm_own_stats(n, &s);
    return s.messages;
}
static uint64_t moves(dsm_node_t *n)
{
    dsm_own_stats_t s;
    dsm_own_stats(n, &s);
    return s.moves;
}

static void test_tbox_group_moves_in_one_batch(void **state)
{
    dsm_harness_t *c = *state;
    size_t sizes[MEMBERS];
    for (int i = 0; i < MEMBERS; i++)
        sizes[i] = MEMBER;
    dsm_own_box_t group;
    assert_int_equal(dsm_own_tbox_new(c->nodes[0], T_GROUP, MEMBERS, sizes, &group), DSM_OK);
    for (uint32_t i = 0; i < MEMBERS; i++) {
        dsm_own_tbox_mut_t m;
        assert_int_equal(dsm_own_tbox_borrow_mut(c->nodes[0], group, i, &m), DSM_OK);
        assert_int_equal(m.size, MEMBER);
        memset(m.data, 'a' + (int)i, MEMBER);
        assert_int_equal(dsm_own_tbox_release_mut(c->nodes[0], &m), DSM_OK);
    }
    /* One box of the group's size, and the members as separate boxes. */
    dsm_own_ref_t whole;
    assert_int_equal(dsm_own_box_borrow(c->nodes[0], group, &whole), DSM_OK);
    size_t gsize = whole.size;
    assert_int_equal(dsm_own_box_release(c->nodes[0], &whole), DSM_OK);
    dsm_own_box_t single, parts[MEMBERS];
    assert_int_equal(dsm_own_box_alloc(c->nodes[0], T_BLOB, gsize, &single), DSM_OK);
    for (int i = 0; i < MEMBERS; i++)
        assert_int_equal(dsm_own_box_alloc(c->nodes[0], T_BLOB, MEMBER, &parts[i]), DSM_OK);

    dsm_node_t *n1 = c->nodes[1];
    uint64_t m0 = msgs(n1), v0 = moves(n1);
    dsm_own_tbox_mut_t gm;
    assert_int_equal(dsm_own_tbox_borrow_mut(n1, group, 3, &gm), DSM_OK);
    assert_int_equal(gm.group.moved, 1);
    /* Every member came along. */
    for (uint32_t i = 0; i < MEMBERS; i++) {
        void *d;
        size_t sz;
        assert_int_equal(dsm_own_tbox_member_mut(&gm, i, &d, &sz), DSM_OK);
        assert_int_equal(sz, MEMBER);
        assert_int_equal(((uint8_t *)d)[MEMBER - 1], 'a' + i);
    }
    assert_int_equal(dsm_own_tbox_release_mut(n1, &gm), DSM_OK);
    uint64_t group_msgs = msgs(n1) - m0, group_moves = moves(n1) - v0;

    m0 = msgs(n1), v0 = moves(n1);
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(n1, single, &m), DSM_OK);
    assert_int_equal(dsm_own_box_release_mut(n1, &m), DSM_OK);
    uint64_t single_msgs = msgs(n1) - m0;

    m0 = msgs(n1), v0 = moves(n1);
    for (int i = 0; i < MEMBERS; i++) {
        assert_int_equal(dsm_own_box_borrow_mut(n1, parts[i], &m), DSM_OK);
        assert_int_equal(dsm_own_box_release_mut(n1, &m), DSM_OK);
    }
    uint64_t parts_msgs = msgs(n1) - m0, parts_moves = moves(n1) - v0;
    printf("TBox move of %d members: %llu messages; as one box %llu; as %d boxes %llu\n", MEMBERS,
           (unsigned long long)group_msgs, (unsigned long long)single_msgs, MEMBERS, (unsigned long long)parts_msgs);
    assert_int_equal(group_moves, 1);
    assert_int_equal(parts_moves, MEMBERS);
    assert_int_equal(group_msgs, single_msgs);
    assert_int_equal(parts_msgs, MEMBERS * single_msgs);

    /* Bad input: a member past the count; moving or mutably borrowing a
     * group with a borrowed member. Nothing changes. */
    dsm_own_tbox_ref_t r;
    assert_int_equal(dsm_own_tbox_borrow(c->nodes[2], group, MEMBERS, &r), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_tbox_borrow(c->nodes[2], group, 2, &r), DSM_OK);
    assert_int_equal(((const uint8_t *)r.data)[0], 'c');
    assert_int_equal(dsm_own_tbox_borrow_mut(c->nodes[0], group, 5, &gm), DSM_ERR_STATE);
    dsm_own_box_t moved;
    assert_int_equal(dsm_own_box_move(c->nodes[0], group, 0, &moved), DSM_ERR_STATE);
    assert_int_equal(moved, 0);
    assert_int_equal(dsm_own_tbox_release(c->nodes[2], &r), DSM_OK);
    assert_int_equal(dsm_own_tbox_borrow_mut(c->nodes[0], group, 5, &gm), DSM_OK);
    assert_int_equal(((uint8_t *)gm.data)[0], 'f');
    assert_int_equal(dsm_own_tbox_release_mut(c->nodes[0], &gm), DSM_OK);
    /* A plain box is not a group. */
    assert_int_equal(dsm_own_tbox_borrow(c->nodes[0], single, 0, &r), DSM_ERR_BAD_ADDR);
    size_t none[1] = {8};
    assert_int_equal(dsm_own_tbox_new(c->nodes[0], T_GROUP, 0, none, &moved), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_box_drop(c->nodes[0], group), DSM_OK);
    assert_int_equal(dsm_own_box_drop(c->nodes[0], single), DSM_OK);
    for (int i = 0; i < MEMBERS; i++)
        assert_int_equal(dsm_own_box_drop(c->nodes[0], parts[i]), DSM_OK);
}

/* ---- reference copies ------------------------------------------------------ */

static void test_reference_copies_read_through_the_cache(void **state)
{
    dsm_harness_t *c = *state;
    dsm_own_box_t box;
    assert_int_equal(dsm_own_box_alloc(c->nodes[0], T_U64, 8, &box), DSM_OK);
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(c->nodes[0], box, &m), DSM_OK);
    memcpy(m.data, &(uint64_t){77}, 8);
    assert_int_equal(dsm_own_box_release_mut(c->nodes[0], &m), DSM_OK);
    dsm_own_ref_t lender, copy;
    assert_int_equal(dsm_own_box_borrow(c->nodes[0], box, &lender), DSM_OK);
    /* Node 1: a miss (one read: 2 messages), then hits that cost nothing. */
    uint64_t m0 = msgs(c->nodes[1]);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dsm_own_ref_copy(c->nodes[1], lender.g, T_U64, 8, &copy), DSM_OK);
        assert_int_equal(*(const uint64_t *)copy.data, 77);
        assert_int_equal(copy.cached, 1);
        assert_int_equal(dsm_own_ref_copy_release(c->nodes[1], &copy), DSM_OK);
    }
    assert_int_equal(msgs(c->nodes[1]) - m0, 2);
    /* The lender's node reads its own object directly. */
    assert_int_equal(dsm_own_ref_copy(c->nodes[0], lender.g, T_U64, 8, &copy), DSM_OK);
    assert_int_equal(copy.cached, 0);
    assert_int_equal(dsm_own_ref_copy_release(c->nodes[0], &copy), DSM_OK);
    /* Bad input: the wrong type or size, a forged address, a double release,
     * releasing a borrow as a copy. */
    assert_int_equal(dsm_own_ref_copy(c->nodes[2], lender.g, T_BLOB, 8, &copy), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_ref_copy(c->nodes[2], lender.g, T_U64, 16, &copy), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_ref_copy(c->nodes[2], dsm_gaddr_make(0, 8192), T_U64, 8, &copy), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_ref_copy(c->nodes[2], lender.g, 0, 8, &copy), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_ref_copy_release(c->nodes[1], &copy), DSM_ERR_STATE);
    assert_int_equal(dsm_own_ref_copy_release(c->nodes[0], &lender), DSM_ERR_STATE);
    assert_int_equal(dsm_own_box_release(c->nodes[0], &lender), DSM_OK);
    assert_int_equal(dsm_own_box_drop(c->nodes[0], box), DSM_OK);
}

/* ---- channels ------------------------------------------------------------- */

static void test_channel_transfers_boxes(void **state)
{
    dsm_harness_t *c = *state;
    dsm_own_chan_t ch;
    assert_int_equal(dsm_own_chan_new(c->nodes[1], &ch), DSM_OK);
    dsm_own_box_t box, sent;
    assert_int_equal(dsm_own_box_alloc(c->nodes[0], T_U64, 8, &box), DSM_OK);
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(c->nodes[0], box, &m), DSM_OK);
    memcpy(m.data, &(uint64_t){4242}, 8);
    /* A borrowed box is not sent, and stays the sender's. */
    sent = box;
    assert_int_equal(dsm_own_chan_send(c->nodes[0], ch, &sent), DSM_ERR_STATE);
    assert_int_equal(sent, box);
    assert_int_equal(dsm_own_box_release_mut(c->nodes[0], &m), DSM_OK);
    assert_int_equal(dsm_own_chan_send(c->nodes[0], ch, &sent), DSM_OK);
    assert_int_equal(sent, 0);
    /* The sender's handle is dead. */
    dsm_gaddr_t g;
    assert_int_equal(dsm_own_box_addr(c->nodes[0], box, &g), DSM_ERR_BAD_ADDR);
    /* Receiving it as a word is refused, and it stays queued. */
    uint64_t w;
    assert_int_equal(dsm_own_chan_recv_word(c->nodes[2], ch, 1000, &w), DSM_ERR_STATE);
    dsm_own_box_t got;
    assert_int_equal(dsm_own_chan_recv(c->nodes[2], ch, 1000, &got), DSM_OK);
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_strip(got)), 2);   /* its record is the receiver's */
    dsm_own_ref_t r;
    assert_int_equal(dsm_own_box_borrow(c->nodes[2], got, &r), DSM_OK);
    assert_int_equal(*(const uint64_t *)r.data, 4242);
    assert_int_equal(dsm_own_box_release(c->nodes[2], &r), DSM_OK);
    assert_int_equal(dsm_own_box_drop(c->nodes[2], got), DSM_OK);
    /* Plain words, in order, from any node; a box where a word is expected. */
    for (uint64_t i = 1; i <= 3; i++)
        assert_int_equal(dsm_own_chan_send_word(c->nodes[i % N], ch, 100 + i), DSM_OK);
    for (uint64_t i = 1; i <= 3; i++) {
        assert_int_equal(dsm_own_chan_recv_word(c->nodes[0], ch, 1000, &w), DSM_OK);
        assert_int_equal(w, 100 + i);
    }
    /* Many in flight, the queue wrapping and growing under them: FIFO. */
    uint64_t next_sent = 0, next_got = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 70; i++, next_sent++)
            assert_int_equal(dsm_own_chan_send_word(c->nodes[next_sent % N], ch, 1000 + next_sent), DSM_OK);
        for (int i = 0; i < 45; i++, next_got++) {
            assert_int_equal(dsm_own_chan_recv_word(c->nodes[(next_got + 1) % N], ch, 1000, &w), DSM_OK);
            assert_int_equal(w, 1000 + next_got);
        }
    }
    for (; next_got < next_sent; next_got++) {
        assert_int_equal(dsm_own_chan_recv_word(c->nodes[0], ch, 1000, &w), DSM_OK);
        assert_int_equal(w, 1000 + next_got);
    }
    assert_int_equal(dsm_own_chan_send_word(c->nodes[2], ch, 7), DSM_OK);
    assert_int_equal(dsm_own_chan_recv(c->nodes[0], ch, 1000, &got), DSM_ERR_STATE);
    assert_int_equal(dsm_own_chan_free(c->nodes[1], ch), DSM_ERR_STATE);   /* not empty */
    assert_int_equal(dsm_own_chan_recv_word(c->nodes[1], ch, 1000, &w), DSM_OK);
    assert_int_equal(w, 7);
    /* Empty: a receive times out. A forged channel; a free off its home. */
    assert_int_equal(dsm_own_chan_recv_word(c->nodes[0], ch, 20, &w), DSM_ERR_TIMEOUT);
    dsm_own_chan_t forged = dsm_gaddr_with_colour(dsm_gaddr_make(1, 4096), 0xc4a7);
    assert_int_equal(dsm_own_chan_send_word(c->nodes[0], forged, 1), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_chan_send_word(c->nodes[0], ch & ((1ull << 48) - 1), 1), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_chan_free(c->nodes[0], ch), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_chan_free(c->nodes[1], ch), DSM_OK);
    assert_int_equal(dsm_own_chan_send_word(c->nodes[0], ch, 1), DSM_ERR_BAD_ADDR);
}

/* Posted sends: in order, a flush finding every one queued; a post the
 * home refuses (the channel freed) is kept there for its sender, whose
 * flushes take the items back one at a time, a box under a new handle with
 * its contents, a word as it was; another sender's flush finds none. */
static void test_channel_posts(void **state)
{
    dsm_harness_t *c = *state;
    dsm_own_chan_t ch;
    assert_int_equal(dsm_own_chan_new(c->nodes[1], &ch), DSM_OK);
    uint64_t w, word;
    dsm_own_box_t box, sent, got, back;
    for (uint64_t i = 0; i < 50; i++)
        assert_int_equal(dsm_own_chan_post_word(c->nodes[0], ch, 500 + i), DSM_OK);
    assert_int_equal(dsm_own_box_alloc(c->nodes[0], T_U64, 8, &box), DSM_OK);
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(c->nodes[0], box, &m), DSM_OK);
    memcpy(m.data, &(uint64_t){4343}, 8);
    /* Borrowed: refused at once, and the handle stays the sender's. */
    sent = box;
    assert_int_equal(dsm_own_chan_post(c->nodes[0], ch, &sent), DSM_ERR_STATE);
    assert_int_equal(sent, box);
    assert_int_equal(dsm_own_box_release_mut(c->nodes[0], &m), DSM_OK);
    assert_int_equal(dsm_own_chan_post(c->nodes[0], ch, &sent), DSM_OK);
    assert_int_equal(sent, 0);
    assert_int_equal(dsm_own_chan_flush(c->nodes[0], ch, &back, &word), DSM_OK);
    assert_int_equal(back, 0);
    assert_int_equal(word, 0);
    for (uint64_t i = 0; i < 50; i++) {
        assert_int_equal(dsm_own_chan_recv_word(c->nodes[2], ch, 1000, &w), DSM_OK);
        assert_int_equal(w, 500 + i);
    }
    assert_int_equal(dsm_own_chan_recv(c->nodes[2], ch, 1000, &got), DSM_OK);
    dsm_own_ref_t r;
    assert_int_equal(dsm_own_box_borrow(c->nodes[2], got, &r), DSM_OK);
    assert_int_equal(*(const uint64_t *)r.data, 4343);
    assert_int_equal(dsm_own_box_release(c->nodes[2], &r), DSM_OK);
    /* Freed: the home refuses the posts and keeps them for node 2. */
    assert_int_equal(dsm_own_chan_free(c->nodes[1], ch), DSM_OK);
    sent = got;
    assert_int_equal(dsm_own_chan_post(c->nodes[2], ch, &sent), DSM_OK);
    assert_int_equal(sent, 0);
    assert_int_equal(dsm_own_chan_post_word(c->nodes[2], ch, 99), DSM_OK);
    assert_int_equal(dsm_own_chan_flush(c->nodes[0], ch, &back, &word), DSM_OK);
    assert_int_equal(dsm_own_chan_flush(c->nodes[2], ch, &back, &word), DSM_ERR_BAD_ADDR);
    assert_int_not_equal(back, 0);
    assert_int_equal(word, 0);
    assert_int_equal(dsm_own_box_borrow(c->nodes[2], back, &r), DSM_OK);
    assert_int_equal(*(const uint64_t *)r.data, 4343);
    assert_int_equal(dsm_own_box_release(c->nodes[2], &r), DSM_OK);
    assert_int_equal(dsm_own_box_drop(c->nodes[2], back), DSM_OK);
    assert_int_equal(dsm_own_chan_flush(c->nodes[2], ch, &back, &word), DSM_ERR_BAD_ADDR);
    assert_int_equal(back, 0);
    assert_int_equal(word, 99);
    assert_int_equal(dsm_own_chan_flush(c->nodes[2], ch, &back, &word), DSM_OK);
    /* A home on the poster's node answers at once. */
    dsm_own_chan_t mine;
    assert_int_equal(dsm_own_chan_new(c->nodes[2], &mine), DSM_OK);
    assert_int_equal(dsm_own_chan_free(c->nodes[2], mine), DSM_OK);
    assert_int_equal(dsm_own_chan_post_word(c->nodes[2], mine, 1), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_chan_flush(c->nodes[2], mine, &back, &word), DSM_OK);
    assert_int_equal(dsm_own_chan_flush(c->nodes[2], ch, NULL, &word), DSM_ERR_INVALID);
}

/* A box whose record is on the channel's home: the send keeps the record
 * and retires the sender's handle (a new generation); a receiver on the
 * home takes the record as it is, one elsewhere moves it to itself. */
static void test_channel_keeps_a_local_record(void **state)
{
    dsm_harness_t *c = *state;
    dsm_own_chan_t ch;
    assert_int_equal(dsm_own_chan_new(c->nodes[1], &ch), DSM_OK);
    dsm_own_box_t box, sent, got, got2;
    assert_int_equal(dsm_own_box_alloc(c->nodes[1], T_U64, 8, &box), DSM_OK);
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(c->nodes[1], box, &m), DSM_OK);
    memcpy(m.data, &(uint64_t){777}, 8);
    sent = box = m.box;
    /* Borrowed: refused, and the handle stays the sender's. */
    assert_int_equal(dsm_own_chan_send(c->nodes[1], ch, &sent), DSM_ERR_STATE);
    assert_int_equal(sent, box);
    assert_int_equal(dsm_own_box_release_mut(c->nodes[1], &m), DSM_OK);
    assert_int_equal(dsm_own_chan_send(c->nodes[1], ch, &sent), DSM_OK);
    assert_int_equal(sent, 0);
    /* The sender's handle is dead: every use of it is refused. */
    dsm_gaddr_t g;
    dsm_own_ref_t r;
    assert_int_equal(dsm_own_box_addr(c->nodes[1], box, &g), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_borrow(c->nodes[1], box, &r), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_drop(c->nodes[1], box), DSM_ERR_BAD_ADDR);
    sent = box;
    assert_int_equal(dsm_own_chan_send(c->nodes[1], ch, &sent), DSM_ERR_BAD_ADDR);
    /* A word receive is refused and leaves it queued. */
    uint64_t w;
    assert_int_equal(dsm_own_chan_recv_word(c->nodes[1], ch, 1000, &w), DSM_ERR_STATE);
    /* Received on the home: the same record, another generation. */
    assert_int_equal(dsm_own_chan_recv(c->nodes[1], ch, 1000, &got), DSM_OK);
    assert_int_equal(dsm_gaddr_strip(got), dsm_gaddr_strip(box));
    assert_int_not_equal(dsm_gaddr_colour(got), dsm_gaddr_colour(box));
    assert_int_equal(dsm_own_box_borrow(c->nodes[1], got, &r), DSM_OK);
    assert_int_equal(*(const uint64_t *)r.data, 777);
    assert_int_equal(dsm_own_box_release(c->nodes[1], &r), DSM_OK);
    /* Received elsewhere: the record moves to the receiver, and the
     * handle the item named is dead too. */
    sent = got;
    assert_int_equal(dsm_own_chan_send(c->nodes[1], ch, &sent), DSM_OK);
    assert_int_equal(dsm_own_chan_recv(c->nodes[2], ch, 1000, &got2), DSM_OK);
    assert_int_equal(dsm_gaddr_node(dsm_gaddr_strip(got2)), 2);
    assert_int_equal(dsm_own_box_borrow(c->nodes[2], got2, &r), DSM_OK);
    assert_int_equal(*(const uint64_t *)r.data, 777);
    assert_int_equal(dsm_own_box_release(c->nodes[2], &r), DSM_OK);
    assert_int_equal(dsm_own_box_addr(c->nodes[1], got, &g), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_addr(c->nodes[2], got, &g), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_box_drop(c->nodes[2], got2), DSM_OK);
    assert_int_equal(dsm_own_chan_free(c->nodes[1], ch), DSM_OK);
}

/* A borrower racing the hand-off: one thread sends its box on a channel
 * homed with the record and takes it back, over and over (a new handle
 * each time, published for the other); the other borrows through whatever
 * handle it last saw. A borrow either is refused or holds the box: while
 * it holds, the handle stays the box's (no hand-off under a borrow) and
 * reads the box's value. */
typedef struct race {
    dsm_node_t *node;
    dsm_own_box_t cur;    /* the latest handle (atomic) */
    int started, done;   /* atomic */
    long held, refused, broken;
} race_t;

static void *race_borrower(void *arg)
{
    race_t *r = arg;
    __atomic_store_n(&r->started, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) {
        dsm_own_box_t h = __atomic_load_n(&r->cur, __ATOMIC_ACQUIRE);
        dsm_own_ref_t ref;
        dsm_status_t st = dsm_own_box_borrow(r->node, h, &ref);
        if (st != DSM_OK) {
            r->refused += st == DSM_ERR_BAD_ADDR || st == DSM_ERR_STATE;
            r->broken += st != DSM_ERR_BAD_ADDR && st != DSM_ERR_STATE;
            continue;
        }
        dsm_gaddr_t g;
        r->broken += *(const uint64_t *)ref.data != 777 || dsm_own_box_addr(r->node, h, &g) != DSM_OK;
        r->broken += dsm_own_box_release(r->node, &ref) != DSM_OK;
        __atomic_fetch_add(&r->held, 1, __ATOMIC_RELAXED);
        for (int k = 0; k < 64; k++)   /* room for the sender's claim */
            __atomic_signal_fence(__ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void test_channel_hand_off_races_a_borrower(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *node = c->nodes[1];
    dsm_own_chan_t ch;
    assert_int_equal(dsm_own_chan_new(node, &ch), DSM_OK);
    dsm_own_box_t box;
    assert_int_equal(dsm_own_box_alloc(node, T_U64, 8, &box), DSM_OK);
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_box_borrow_mut(node, box, &m), DSM_OK);
    memcpy(m.data, &(uint64_t){777}, 8);
    assert_int_equal(dsm_own_box_release_mut(node, &m), DSM_OK);
    race_t r = {.node = node, .cur = m.box};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, race_borrower, &r), 0);
    long sent = 0, busy = 0;
    while (!__atomic_load_n(&r.started, __ATOMIC_ACQUIRE))
        sched_yield();
    /* Fewer hand-offs than generations, so no retired handle comes back;
     * enough, once the borrower runs, for the two to meet often. */
    for (long i = 0; sent < 60000 && i < 2000000 && (sent < 20000 || __atomic_load_n(&r.held, __ATOMIC_RELAXED) < 1000);
         i++) {
        dsm_own_box_t h = __atomic_load_n(&r.cur, __ATOMIC_RELAXED), got = h;
        dsm_status_t st = dsm_own_chan_send(node, ch, &got);
        if (st == DSM_ERR_STATE) {   /* borrowed just now: the handle stays */
            assert_int_equal(got, h);
            busy++;
            continue;
        }
        assert_int_equal(st, DSM_OK);
        assert_int_equal(dsm_own_chan_recv(node, ch, 1000, &got), DSM_OK);
        __atomic_store_n(&r.cur, got, __ATOMIC_RELEASE);
        sent++;
    }
    __atomic_store_n(&r.done, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    assert_int_equal(r.broken, 0);
    if (!(sent > 0 && r.held > 0)) print_message("sent %ld busy %ld held %ld refused %ld\n", sent, busy, r.held, r.refused);
    assert_true(sent > 0 && r.held > 0);
    assert_int_equal(dsm_own_box_drop(node, r.cur), DSM_OK);
    assert_int_equal(dsm_own_chan_free(node, ch), DSM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spawn_to_runs_where_the_box_is),
        cmocka_unit_test(test_spawn_places_on_the_most_vacant_node),
        cmocka_unit_test(test_forwarded_task_is_cancelled),
        cmocka_unit_test(test_tbox_group_moves_in_one_batch),
        cmocka_unit_test(test_reference_copies_read_through_the_cache),
        cmocka_unit_test(test_channel_transfers_boxes),
        cmocka_unit_test(test_channel_posts),
        cmocka_unit_test(test_channel_keeps_a_local_record),
        cmocka_unit_test(test_channel_hand_off_races_a_borrower),
    };
    dsm_set_log_level(getenv("DSM_TEST_LOG") ? 1 : 0);
    int failed = cmocka_run_group_tests_name("place/shm", tests, setup_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("place/tcp", tests, setup_tcp, test_cluster_teardown);
    return failed;
}
