/* chan's manager over shm and tcp, 3 nodes: endpoints that join in any
 * order (joins kept for a channel not yet there) become ready, with
 * sub-channels, callbacks, regions reachable one-sidedly and teardown; and
 * the bad input: a name taken twice, a name of another kind on a peer, a
 * region of another size, equal regions of another shape, a peer that
 * never joins, a join for a channel nobody creates, a malformed message;
 * and an arena sized by DSM_CHAN_ARENA_MB refusing what does not fit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan/wire.h"
#include "cluster_util.h"
#include "dsm/chan_sdk.h"
#include "dsm/clock.h"

enum { N = 3 };

static dsm_harness_t shm_cluster = {.transport = DSM_TRANSPORT_SHM, .op_timeout_ms = 10000,
                                      .peer_timeout_ms = 10000};
static dsm_harness_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP, .op_timeout_ms = 10000,
                                      .peer_timeout_ms = 10000};
static int setup_shm(void **state) { return test_cluster_setup(state, &shm_cluster, N); }
static int setup_tcp(void **state) { return test_cluster_setup(state, &tcp_cluster, N); }

static int connects[N];
static void on_connect(void *ctx, dsm_chan_t *c, uint32_t rank)
{
    (void)c;
    (void)rank;
    __atomic_fetch_add((int *)ctx, 1, __ATOMIC_RELAXED);
}

/* Endpoints made one node after another: each later one finds the earlier
 * ones' joins kept and connects them; the earlier ones get its join. */
static void test_join_ready(void **state)
{
    dsm_harness_t *c = *state;
    dsm_chan_t *app[N], *q[N];
    uint32_t r[N];
    memset(connects, 0, sizeof connects);
    for (int i = 0; i < N; i++) {
        assert_int_equal(dsm_chan_create(c->nodes[i], "app", DSM_CHAN_PLAIN, &app[i]), DSM_OK);
        assert_int_equal(dsm_chan_sub(app[i], "queue", DSM_CHAN_PLAIN, &q[i]), DSM_OK);
        assert_string_equal(dsm_chan_name(q[i]), "app/queue");
        assert_int_equal(dsm_chan_add_region(q[i], "data", 256, &r[i]), DSM_OK);
        assert_int_equal(dsm_chan_add_region(q[i], "data", 64, NULL), DSM_ERR_EXISTS);
        assert_int_equal(dsm_chan_on_connect(q[i], on_connect, &connects[i]), DSM_OK);
        assert_int_equal(dsm_chan_join(q[i]), DSM_OK);
        assert_int_equal(dsm_chan_join(q[i]), DSM_ERR_STATE);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(dsm_chan_wait_ready(q[i], 5000), DSM_OK);
        assert_int_equal(__atomic_load_n(&connects[i], __ATOMIC_RELAXED), N - 1);
        assert_int_equal(dsm_chan_peer_count(q[i]), N);
        assert_int_equal(dsm_chan_peer_rank(q[i], dsm_chan_self(q[i])), dsm_node_rank(c->nodes[i]));
        assert_int_equal(dsm_chan_pending(c->nodes[i]), 0);
    }
    /* Each node's region is reachable by the others at the offset it sent. */
    for (int i = 0; i < N; i++) {
        uint64_t v = 0x1000u + (uint64_t)i;
        dsm_chan_ack_t key = {{0}};
        for (uint32_t p = 0; p < N; p++)
            assert_int_equal(dsm_chan_put_async(q[i], p, r[i], 8 * (uint64_t)i, &v, 8, &key), DSM_OK);
        assert_false(dsm_chan_ack_empty(&key));
        assert_int_equal(dsm_chan_ack_wait(&key), DSM_OK);
        assert_true(dsm_chan_ack_empty(&key));
        assert_int_equal(dsm_chan_fence_thread(c->nodes[i]), DSM_OK);
    }
    assert_int_equal(dsm_chan_put_async(q[0], 1, r[0], 250, "0123456789", 10, &(dsm_chan_ack_t){{0}}),
                     DSM_ERR_BAD_ADDR);
    for (int i = 0; i < N; i++) {
        size_t len = 0;
        uint64_t *mine = dsm_chan_region_local(q[i], r[i], &len);
        assert_non_null(mine);
        assert_int_equal(len, 256);
        for (int j = 0; j < N; j++) assert_int_equal(__atomic_load_n(&mine[j], __ATOMIC_ACQUIRE), 0x1000u + (uint64_t)j);
        uint64_t got = 0;
        dsm_chan_ack_t key = {{0}};
        assert_int_equal(dsm_chan_get_async(q[i], (uint32_t)(i + 1) % N, r[i], 0, &got, 8, &key), DSM_OK);
        assert_int_equal(dsm_chan_ack_wait(&key), DSM_OK);
        assert_int_equal(got, 0x1000u);
    }
    /* Teardown: a parent goes after its sub-channels; peers hear the leave. */
    dsm_chan_stats_t before;
    dsm_chan_stats(c->nodes[1], &before);
    assert_int_equal(dsm_chan_destroy(app[0]), DSM_ERR_STATE);
    for (int i = 0; i < N; i++) {
        assert_int_equal(dsm_chan_destroy(q[i]), DSM_OK);
        assert_int_equal(dsm_chan_destroy(app[i]), DSM_OK);
    }
    uint64_t deadline = dsm_deadline_ns(5000);   /* the leaves are one-way messages */
    dsm_chan_stats_t after;
    for (dsm_chan_stats(c->nodes[1], &after); after.leaves < before.leaves + 1 && dsm_now_ns() < deadline;
         dsm_chan_stats(c->nodes[1], &after))
        sched_yield();
    assert_true(after.leaves >= before.leaves + 1);
}

static void test_name_taken_twice(void **state)
{
    dsm_harness_t *c = *state;
    dsm_chan_t *a, *b;
    assert_int_equal(dsm_chan_create(c->nodes[0], "dup", DSM_CHAN_PLAIN, &a), DSM_OK);
    dsm_clear_last_error();
    assert_int_equal(dsm_chan_create(c->nodes[0], "dup", DSM_CHAN_PLAIN, &b), DSM_ERR_EXISTS);
    assert_non_null(strstr(dsm_last_error(), "channel 'dup' exists on this node already"));
    assert_int_equal(dsm_chan_create(c->nodes[0], "bad//name", DSM_CHAN_PLAIN, &b), DSM_ERR_INVALID);
    assert_int_equal(dsm_chan_create(c->nodes[0], "/lead", DSM_CHAN_PLAIN, &b), DSM_ERR_INVALID);
    assert_int_equal(dsm_chan_create(c->nodes[0], "sp ace", DSM_CHAN_PLAIN, &b), DSM_ERR_INVALID);
    assert_int_equal(dsm_chan_destroy(a), DSM_OK);
}

/* Three endpoints of one name, node 1's differing as `differ` says. */
static void three(dsm_harness_t *c, const char *name, dsm_chan_kind_t kind1, size_t size1, dsm_chan_t **ch)
{
    for (int i = 0; i < N; i++) {
        assert_int_equal(dsm_chan_create(c->nodes[i], name, i == 1 ? kind1 : DSM_CHAN_PLAIN, &ch[i]), DSM_OK);
        assert_int_equal(dsm_chan_add_region(ch[i], "r", i == 1 ? size1 : 64, NULL), DSM_OK);
        assert_int_equal(dsm_chan_join(ch[i]), DSM_OK);
    }
}

static void test_kind_collision(void **state)
{
    dsm_harness_t *c = *state;
    dsm_chan_t *ch[N];
    three(c, "collide", DSM_CHAN_BARRIER, 64, ch);
    dsm_clear_last_error();
    assert_int_equal(dsm_chan_wait_ready(ch[0], 5000), DSM_ERR_EXISTS);
    assert_non_null(strstr(dsm_last_error(), "collision"));
    assert_non_null(strstr(dsm_last_error(), "rank 1"));
    assert_int_equal(dsm_chan_wait_ready(ch[1], 5000), DSM_ERR_EXISTS);
    for (int i = 0; i < N; i++) dsm_chan_destroy(ch[i]);
}

static void test_region_size_mismatch(void **state)
{
    dsm_harness_t *c = *state;
    dsm_chan_t *ch[N];
    three(c, "sized", DSM_CHAN_PLAIN, 128, ch);
    dsm_clear_last_error();
    assert_int_equal(dsm_chan_wait_ready(ch[2], 5000), DSM_ERR_INVALID);
    assert_non_null(strstr(dsm_last_error(), "128"));
    assert_non_null(strstr(dsm_last_error(), "rank 1"));
    assert_int_equal(dsm_chan_wait_ready(ch[1], 5000), DSM_ERR_INVALID);
    for (int i = 0; i < N; i++) dsm_chan_destroy(ch[i]);
}

/* Equal regions, node 1's shape differs: refused, both shapes named, on
 * the node that found it (node 2: node 1's join) and on node 1 (node 0's
 * join, kept; in the second round node 1 keeps no join, so node 0's
 * refusal, which carries node 0's shape, is what tells it). */
static void test_shape_mismatch(void **state)
{
    dsm_harness_t *c = *state;
    static const char *const names[] = {"width", "count"};
    for (int round = 0; round < 2; round++) {
        dsm_chan_t *ch[N];
        dsm_chan_set_keep_ms(c->nodes[1], round ? 0 : 10000);
        for (int i = 0; i < N; i++) {
            const uint64_t shape[] = {i == 1 ? 40 : 8, i == 1 ? 1 : 2};
            assert_int_equal(dsm_chan_create(c->nodes[i], "shaped", DSM_CHAN_PLAIN, &ch[i]), DSM_OK);
            assert_int_equal(dsm_chan_set_shape(ch[i], names, shape, 2), DSM_OK);
            assert_int_equal(dsm_chan_add_region(ch[i], "r", 64, NULL), DSM_OK);
            assert_int_equal(dsm_chan_join(ch[i]), DSM_OK);
        }
        assert_int_equal(dsm_chan_set_shape(ch[0], names, (uint64_t[]){1, 1}, 2), DSM_ERR_STATE);
        for (int i = 2; i >= 1; i--) {
            dsm_clear_last_error();
            assert_int_equal(dsm_chan_wait_ready(ch[i], 5000), DSM_ERR_INVALID);
            const char *why = dsm_last_error();
            assert_non_null(strstr(why, "shape differs"));
            assert_non_null(strstr(why, i == 1 ? "width 40, count 1 here" : "width 8, count 2 here"));
            assert_non_null(strstr(why, i == 1 ? "; width 8, count 2 at rank 0" : "; width 40, count 1 at rank 1"));
        }
        for (int i = 0; i < N; i++) dsm_chan_destroy(ch[i]);
    }
    dsm_chan_set_keep_ms(c->nodes[1], 10000);
    /* bad shapes */
    dsm_chan_t *b;
    assert_int_equal(dsm_chan_create(c->nodes[0], "shaped/bad", DSM_CHAN_PLAIN, &b), DSM_OK);
    static const char *const spaced[] = {"has space"}, *const long_name[] = {"sixteen_bytes_xx"};
    uint64_t five[DSM_CHAN_MAX_SHAPE + 1] = {0};
    const char *five_names[DSM_CHAN_MAX_SHAPE + 1] = {"a", "b", "c", "d", "e"};
    assert_int_equal(dsm_chan_set_shape(b, spaced, five, 1), DSM_ERR_INVALID);
    assert_int_equal(dsm_chan_set_shape(b, long_name, five, 1), DSM_ERR_INVALID);
    assert_int_equal(dsm_chan_set_shape(b, five_names, five, DSM_CHAN_MAX_SHAPE + 1), DSM_ERR_INVALID);
    assert_int_equal(dsm_chan_set_shape(b, NULL, five, 1), DSM_ERR_INVALID);
    assert_int_equal(dsm_chan_set_shape(b, five_names, five, DSM_CHAN_MAX_SHAPE), DSM_OK);
    assert_int_equal(dsm_chan_destroy(b), DSM_OK);
}

/* Node 2 never makes the channel: the others time out naming it; node 2
 * keeps their joins for its keep time, then drops them, counted. */
static void test_peer_never_joins(void **state)
{
    dsm_harness_t *c = *state;
    dsm_chan_t *ch[2];
    dsm_chan_stats_t before, after;
    dsm_chan_stats(c->nodes[2], &before);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(dsm_chan_create(c->nodes[i], "lonely", DSM_CHAN_PLAIN, &ch[i]), DSM_OK);
        assert_int_equal(dsm_chan_join(ch[i]), DSM_OK);
    }
    assert_int_equal(dsm_chan_pending(c->nodes[2]), 2);
    dsm_clear_last_error();
    assert_int_equal(dsm_chan_wait_ready(ch[0], 300), DSM_ERR_TIMEOUT);
    assert_non_null(strstr(dsm_last_error(), "rank 2 did not join"));
    assert_non_null(strstr(dsm_last_error(), "no endpoint of that name"));
    /* Expecting one peer only, node 0 is ready with node 1. */
    dsm_chan_t *two;
    assert_int_equal(dsm_chan_create(c->nodes[0], "lonely2", DSM_CHAN_PLAIN, &two), DSM_OK);
    assert_int_equal(dsm_chan_expect_num(two, 1), DSM_OK);
    assert_int_equal(dsm_chan_join(two), DSM_OK);
    dsm_chan_t *two1;
    assert_int_equal(dsm_chan_create(c->nodes[1], "lonely2", DSM_CHAN_PLAIN, &two1), DSM_OK);
    assert_int_equal(dsm_chan_join(two1), DSM_OK);
    assert_int_equal(dsm_chan_wait_ready(two, 5000), DSM_OK);
    dsm_chan_set_keep_ms(c->nodes[2], 100);
    uint64_t deadline = dsm_deadline_ns(5000);   /* 50x the keep time */
    while (dsm_chan_pending(c->nodes[2]) != 0 && dsm_now_ns() < deadline) sched_yield();
    assert_int_equal(dsm_chan_pending(c->nodes[2]), 0);
    dsm_chan_stats(c->nodes[2], &after);
    assert_true(after.joins_expired >= before.joins_expired + 4);
    dsm_chan_set_keep_ms(c->nodes[2], 10000);
    dsm_chan_destroy(ch[0]);
    dsm_chan_destroy(ch[1]);
    dsm_chan_destroy(two);
    dsm_chan_destroy(two1);
}

/* Bytes that are no join are refused; a leave for a channel nobody has is
 * counted and changes nothing. */
/* A group gives the channels under its prefix the chosen participants
 * (nodes 0 and 2 here): node 1 hears nothing of them; forgotten, the
 * prefix's channels take the daemons again. And each bad definition. */
static void test_group(void **state)
{
    dsm_harness_t *c = *state;
    uint32_t pair[2] = {dsm_node_rank(c->nodes[2]), dsm_node_rank(c->nodes[0])};
    uint32_t other[2] = {dsm_node_rank(c->nodes[0]), dsm_node_rank(c->nodes[1])};
    uint32_t twice[2] = {pair[0], pair[0]};
    dsm_chan_stats_t before, after;
    dsm_chan_stats(c->nodes[1], &before);
    for (int i = 0; i < N; i += 2) assert_int_equal(dsm_chan_group(c->nodes[i], "pair", pair, 2), DSM_OK);
    assert_int_equal(dsm_chan_group(c->nodes[0], "pair", pair, 2), DSM_OK);   /* the same again */
    assert_int_equal(dsm_chan_group(c->nodes[0], "pair", other, 2), DSM_ERR_EXISTS);
    assert_int_equal(dsm_chan_group(c->nodes[2], "elsewhere", other, 2), DSM_ERR_INVALID);   /* not its rank */
    assert_int_equal(dsm_chan_group(c->nodes[0], "twice", twice, 2), DSM_ERR_INVALID);
    const char *bad[] = {"", "/a", "a/", "a//b", "sp ace"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        assert_int_equal(dsm_chan_group(c->nodes[0], bad[k], pair, 2), DSM_ERR_INVALID);
    char name[16];
    for (int g = 1; g < DSM_CHAN_MAX_GROUPS; g++) {   /* "pair" is the first */
        snprintf(name, sizeof name, "g%d", g);
        assert_int_equal(dsm_chan_group(c->nodes[0], name, pair, 2), DSM_OK);
    }
    assert_int_equal(dsm_chan_group(c->nodes[0], "one-too-many", pair, 2), DSM_ERR_TOO_BIG);
    for (int g = 1; g < DSM_CHAN_MAX_GROUPS; g++) {
        snprintf(name, sizeof name, "g%d", g);
        assert_int_equal(dsm_chan_group(c->nodes[0], name, NULL, 0), DSM_OK);
    }

    dsm_chan_t *ch[N] = {0};
    for (int i = 0; i < N; i += 2) {
        assert_int_equal(dsm_chan_create(c->nodes[i], "pair/x", DSM_CHAN_PLAIN, &ch[i]), DSM_OK);
        assert_int_equal(dsm_chan_add_region(ch[i], "r", 64, NULL), DSM_OK);
        assert_int_equal(dsm_chan_join(ch[i]), DSM_OK);
    }
    for (int i = 0; i < N; i += 2) {
        assert_int_equal(dsm_chan_wait_ready(ch[i], 5000), DSM_OK);
        assert_int_equal(dsm_chan_peer_count(ch[i]), 2);
        assert_int_equal(dsm_chan_peer_rank(ch[i], dsm_chan_self(ch[i])), dsm_node_rank(c->nodes[i]));
    }
    for (int i = 0; i < N; i += 2) assert_int_equal(dsm_chan_destroy(ch[i]), DSM_OK);
    dsm_chan_stats(c->nodes[1], &after);
    assert_int_equal(after.joins_received, before.joins_received);
    assert_int_equal(dsm_chan_pending(c->nodes[1]), 0);

    assert_int_equal(dsm_chan_group(c->nodes[0], "pair", NULL, 0), DSM_OK);
    dsm_chan_t *all = NULL;
    assert_int_equal(dsm_chan_create(c->nodes[0], "pair/y", DSM_CHAN_PLAIN, &all), DSM_OK);
    assert_int_equal(dsm_chan_peer_count(all), N);
    assert_int_equal(dsm_chan_destroy(all), DSM_OK);   /* never joined: nobody to tell */
    assert_int_equal(dsm_chan_group(c->nodes[2], "pair", NULL, 0), DSM_OK);
}

static void test_malformed_and_unknown(void **state)
{
    dsm_harness_t *c = *state;
    dsm_fabric_t *f = dsm_node_fabric(c->nodes[0]);
    int join_id = dsm_module_handler_id("chan", 0), leave_id = dsm_module_handler_id("chan", 1);
    assert_true(join_id > 0 && leave_id > 0);
    uint8_t junk[40];
    memset(junk, 0x5a, sizeof junk);
    size_t rl = 0;
    assert_int_equal(dsm_fabric_am_request(f, 1, (uint16_t)join_id, junk, sizeof junk, NULL, 0, &rl, 0),
                     DSM_ERR_PROTO);
    chan_msg_t leave = {.type = CHAN_MSG_LEAVE};
    strcpy(leave.name, "nobody/has/this");
    uint8_t buf[CHAN_MSG_MAX_LEN];
    size_t n = chan_msg_encode(&leave, buf);
    assert_true(n > 0);
    /* A CONNECT sent where a JOIN belongs is refused too. */
    chan_msg_t conn = {.type = CHAN_MSG_CONNECT, .kind = DSM_CHAN_PLAIN};
    strcpy(conn.name, "x");
    uint8_t cbuf[CHAN_MSG_MAX_LEN];
    size_t cn = chan_msg_encode(&conn, cbuf);
    assert_int_equal(dsm_fabric_am_request(f, 1, (uint16_t)join_id, cbuf, cn, NULL, 0, &rl, 0), DSM_ERR_PROTO);
    dsm_chan_stats_t before, after;
    dsm_chan_stats(c->nodes[1], &before);
    assert_int_equal(dsm_fabric_am_send(f, 1, (uint16_t)leave_id, buf, n), DSM_OK);
    uint64_t deadline = dsm_deadline_ns(5000);   /* one one-way message, on a loaded host */
    for (dsm_chan_stats(c->nodes[1], &after); after.leaves == before.leaves && dsm_now_ns() < deadline;
         dsm_chan_stats(c->nodes[1], &after))
        sched_yield();
    assert_int_equal(after.leaves, before.leaves + 1);
    assert_int_equal(dsm_chan_pending(c->nodes[1]), 0);
}

/* The codec on its own: round trip, and the rules it refuses. */
static void test_wire(void **state)
{
    (void)state;
    chan_msg_t m = {.type = CHAN_MSG_JOIN, .kind = DSM_CHAN_SST, .nregions = 2};
    strcpy(m.name, "kv/tracker/3");
    strcpy(m.regions[0].name, "rows");
    m.regions[0].size = 192;
    m.regions[0].offset = 64;
    strcpy(m.regions[1].name, "sst.ov0");
    m.regions[1].size = 8;
    m.regions[1].offset = 4096;
    m.nshape = DSM_CHAN_MAX_SHAPE;
    for (int i = 0; i < DSM_CHAN_MAX_SHAPE; i++) m.shape[i] = UINT64_MAX - (uint64_t)i;
    uint8_t buf[CHAN_MSG_MAX_LEN];
    size_t n = chan_msg_encode(&m, buf);
    assert_true(n > 0);
    chan_msg_t d;
    assert_int_equal(chan_msg_decode(buf, n, &d), DSM_OK);
    assert_memory_equal(&d, &m, sizeof m);
    assert_int_equal(chan_msg_decode(buf, n - 1, &d), DSM_ERR_PROTO);
    m.regions[1].size = 0;
    assert_int_equal(chan_msg_encode(&m, buf), 0);
    m.regions[1].size = 8;
    m.regions[1].offset = UINT64_MAX - 3;
    assert_int_equal(chan_msg_encode(&m, buf), 0);
    m.regions[1].offset = 0;
    assert_int_equal(chan_msg_encode(&m, buf), n);
    buf[n - 8 * DSM_CHAN_MAX_SHAPE - 1] = DSM_CHAN_MAX_SHAPE + 1;   /* the shape's count byte */
    assert_int_equal(chan_msg_decode(buf, n, &d), DSM_ERR_PROTO);
    m.nshape = DSM_CHAN_MAX_SHAPE + 1;
    assert_int_equal(chan_msg_encode(&m, buf), 0);
    m.nshape = 1;
    chan_msg_t leave = {.type = CHAN_MSG_LEAVE, .nshape = 1};
    strcpy(leave.name, "x");
    assert_int_equal(chan_msg_encode(&leave, buf), 0);
    strcpy(m.name, "has space");
    assert_int_equal(chan_msg_encode(&m, buf), 0);
}

/* ---- the arena's size from DSM_CHAN_ARENA_MB ---- */

static dsm_harness_t one_node = {.transport = DSM_TRANSPORT_SHM};

static void test_arena_size(void **state)
{
    (void)state;
    /* not a size: the node does not start (chan refuses to attach) */
    setenv("DSM_CHAN_ARENA_MB", "0", 1);
    dsm_harness_t bad = one_node;
    assert_int_not_equal(test_cluster_start(&bad, 1, 1), DSM_OK);
    dsm_harness_stop(&bad);
    /* 1 MiB: a region larger than it is refused at once, a second one
     * that no longer fits at its join, naming the arena */
    setenv("DSM_CHAN_ARENA_MB", "1", 1);
    dsm_harness_t c = one_node;
    dsm_status_t st = test_cluster_start(&c, 1, 1);
    unsetenv("DSM_CHAN_ARENA_MB");
    assert_int_equal(st, DSM_OK);
    dsm_node_t *node = c.nodes[0];
    dsm_chan_t *a, *b, *big;
    assert_int_equal(dsm_chan_create(node, "arena/big", DSM_CHAN_PLAIN, &big), DSM_OK);
    assert_int_equal(dsm_chan_add_region(big, "r", (2u << 20), NULL), DSM_ERR_NOMEM);
    assert_non_null(strstr(dsm_last_error(), "DSM_CHAN_ARENA_MB"));
    assert_int_equal(dsm_chan_destroy(big), DSM_OK);
    assert_int_equal(dsm_chan_create(node, "arena/a", DSM_CHAN_PLAIN, &a), DSM_OK);
    assert_int_equal(dsm_chan_add_region(a, "r", 600u << 10, NULL), DSM_OK);
    assert_int_equal(dsm_chan_join(a), DSM_OK);
    assert_int_equal(dsm_chan_create(node, "arena/b", DSM_CHAN_PLAIN, &b), DSM_OK);
    assert_int_equal(dsm_chan_add_region(b, "r", 600u << 10, NULL), DSM_OK);
    assert_int_equal(dsm_chan_join(b), DSM_ERR_NOMEM);
    assert_non_null(strstr(dsm_last_error(), "1048576-byte arena"));
    assert_int_equal(dsm_chan_destroy(b), DSM_OK);
    assert_int_equal(dsm_chan_destroy(a), DSM_OK);
    dsm_harness_stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_ready),
        cmocka_unit_test(test_name_taken_twice),
        cmocka_unit_test(test_kind_collision),
        cmocka_unit_test(test_region_size_mismatch),
        cmocka_unit_test(test_shape_mismatch),
        cmocka_unit_test(test_peer_never_joins),
        cmocka_unit_test(test_malformed_and_unknown),
        cmocka_unit_test(test_group),
    };
    const struct CMUnitTest units[] = {cmocka_unit_test(test_wire)};
    const struct CMUnitTest arena[] = {cmocka_unit_test(test_arena_size)};
    int failed = cmocka_run_group_tests_name("chan-wire", units, NULL, NULL);
    failed += cmocka_run_group_tests_name("chan-arena", arena, NULL, NULL);
    failed += cmocka_run_group_tests_name("chan-manager/shm", tests, setup_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("chan-manager/tcp", tests, setup_tcp, test_cluster_teardown);
    return failed;
}
