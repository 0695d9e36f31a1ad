/* A 3-node cluster in one process, over shm and over tcp: bootstrap, the
 * exchange of published values and the join hooks (a test region stands in
 * for the heap's partition), one-sided access through the exchanged keys,
 * barrier, spawn/join, stats, owned ids, and the refusals: wrong secret,
 * rank taken, garbage on the control port, operations on a node that left. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "cluster_util.h"
#include "dsm/clock.h"
#include "dsm/log.h"
#include "runtime/ctl_wire.h"
#include "runtime/sock.h"
#include "runtime/internal.h"
#include "fabric/fabric_int.h"

static void test_membership(void **state)
{
    dsm_harness_t *c = *state;
    for (int i = 0; i < 3; i++) {
        uint32_t ranks[8];
        assert_int_equal(dsm_node_daemons(c->nodes[i], ranks, 8), 3);
        assert_int_equal(ranks[0], 0);
        assert_int_equal(ranks[2], 2);
        assert_int_equal(dsm_node_rank(c->nodes[i]), (uint32_t)i);
        for (uint32_t r = 0; r < 3; r++) {
            assert_int_equal(dsm_node_peer_state(c->nodes[i], r), DSM_OK);
            assert_int_equal(dsm_fabric_remote_region_length(dsm_node_fabric(c->nodes[i]), r, TEST_REGION), 16u << 20);
        }
        assert_int_equal(dsm_node_peer_state(c->nodes[i], 7), DSM_ERR_NO_PEER);
        assert_int_equal(dsm_node_peer_state(c->nodes[i], 1000), DSM_ERR_NO_PEER);
    }
    uint32_t daemons;
    assert_int_equal(dsm_coord_members(c->coord, &daemons), 3);
    assert_int_equal(daemons, 3);
    assert_int_equal(dsm_node_wait_daemons(c->nodes[0], 4, 200), DSM_ERR_TIMEOUT);
}

typedef struct adder {
    dsm_node_t *node;
    dsm_status_t st;
} adder_t;

static void *add_many(void *arg)
{
    adder_t *a = arg;
    for (int i = 0; i < 500 && a->st == DSM_OK; i++) {
        uint64_t old;
        a->st = dsm_fabric_fetch_add(dsm_node_fabric(a->node), 0, TEST_REGION, 64, 1, &old);
    }
    return NULL;
}

static void test_rma_through_bootstrap(void **state)
{
    dsm_harness_t *c = *state;
    char msg[] = "written by rank 0 into rank 1's partition";
    assert_int_equal(dsm_fabric_put(dsm_node_fabric(c->nodes[0]), 1, TEST_REGION, 4096, msg, sizeof msg), DSM_OK);
    assert_int_equal(dsm_fabric_flush(dsm_node_fabric(c->nodes[0]), 1), DSM_OK);
    char got[sizeof msg] = {0};
    assert_int_equal(dsm_fabric_get(dsm_node_fabric(c->nodes[2]), 1, TEST_REGION, 4096, got, sizeof got), DSM_OK);
    assert_string_equal(got, msg);
    char *local = test_region_base(c->nodes[1]);
    assert_non_null(local);
    assert_string_equal(local + 4096, msg);

    /* Every node adds to one word of rank 0's partition at once. */
    pthread_t t[3];
    adder_t a[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (adder_t){c->nodes[i], DSM_OK};
        pthread_create(&t[i], NULL, add_many, &a[i]);
    }
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) assert_int_equal(a[i].st, DSM_OK);
    uint64_t total;
    assert_int_equal(dsm_fabric_get(dsm_node_fabric(c->nodes[1]), 0, TEST_REGION, 64, &total, 8), DSM_OK);
    assert_int_equal(total, 1500);
    /* Past the end of the exchanged partition: refused before sending. */
    assert_int_equal(dsm_fabric_get(dsm_node_fabric(c->nodes[0]), 1, TEST_REGION, 16u << 20, got, 8),
                     DSM_ERR_BAD_ADDR);
}

/* Each node counts its arrival for a round, passes the barrier, and then
 * must see every node's arrival for that round: a barrier that let anyone
 * through early would show a short count. */
enum { BARRIER_NODES = 3, BARRIER_ROUNDS = 5 };

typedef struct barrier_arg {
    dsm_node_t *node;
    int *arrived;      /* [BARRIER_ROUNDS], shared */
    int short_count;   /* rounds where fewer than all had arrived */
} barrier_arg_t;

static void *barrier_loop(void *arg)
{
    barrier_arg_t *a = arg;
    for (int i = 0; i < BARRIER_ROUNDS; i++) {
        /* A little skew so that early releases have a chance to show. */
        usleep((useconds_t)(dsm_node_rank(a->node) * 3000));
        __atomic_fetch_add(&a->arrived[i], 1, __ATOMIC_SEQ_CST);
        if (dsm_node_barrier(a->node, 5000) != DSM_OK) return (void *)1;
        if (__atomic_load_n(&a->arrived[i], __ATOMIC_SEQ_CST) != BARRIER_NODES) a->short_count++;
    }
    return NULL;
}

static void test_barrier(void **state)
{
    dsm_harness_t *c = *state;
    pthread_t t[BARRIER_NODES];
    barrier_arg_t a[BARRIER_NODES];
    int arrived[BARRIER_ROUNDS] = {0};
    void *rc[BARRIER_NODES];
    for (int i = 0; i < BARRIER_NODES; i++) {
        a[i] = (barrier_arg_t){.node = c->nodes[i], .arrived = arrived};
        pthread_create(&t[i], NULL, barrier_loop, &a[i]);
    }
    for (int i = 0; i < BARRIER_NODES; i++) pthread_join(t[i], &rc[i]);
    for (int i = 0; i < BARRIER_NODES; i++) {
        assert_null(rc[i]);
        assert_int_equal(a[i].short_count, 0);
    }
    for (int i = 0; i < BARRIER_ROUNDS; i++) assert_int_equal(arrived[i], BARRIER_NODES);
}

static dsm_status_t times_rank(dsm_node_t *n, const void *args, size_t len, void *ret, size_t cap, size_t *ret_len)
{
    if (len != 8 || cap < 8) return DSM_ERR_INVALID;
    uint64_t v;
    memcpy(&v, args, 8);
    v *= dsm_node_rank(n) + 1;
    memcpy(ret, &v, 8);
    *ret_len = 8;
    return DSM_OK;
}

static void test_spawn(void **state)
{
    dsm_harness_t *c = *state;
    assert_int_equal(dsm_register("test.times_rank", times_rank), DSM_OK);
    dsm_task_t *tasks[3];
    uint64_t arg = 21;
    for (uint32_t r = 0; r < 3; r++)
        assert_int_equal(dsm_spawn(c->nodes[0], r, "test.times_rank", &arg, 8, &tasks[r]), DSM_OK);
    for (uint32_t r = 0; r < 3; r++) {
        uint64_t out = 0;
        size_t len = 0;
        assert_int_equal(dsm_join(tasks[r], &out, 8, &len, 5000), DSM_OK);
        assert_int_equal(len, 8);
        assert_int_equal(out, 21 * (r + 1));
    }
    /* Errors travel back as statuses. */
    dsm_task_t *t;
    assert_int_equal(dsm_spawn(c->nodes[0], 1, "test.times_rank", "x", 1, &t), DSM_OK);
    assert_int_equal(dsm_join(t, NULL, 0, NULL, 5000), DSM_ERR_INVALID);
    assert_int_equal(dsm_spawn(c->nodes[0], 2, "test.nonexistent", NULL, 0, &t), DSM_OK);
    assert_int_equal(dsm_join(t, NULL, 0, NULL, 5000), DSM_ERR_NO_HANDLER);
    assert_int_equal(dsm_spawn(c->nodes[0], 0, "test.nonexistent", NULL, 0, &t), DSM_ERR_NO_HANDLER);
    assert_int_equal(dsm_spawn(c->nodes[0], 9, "test.times_rank", &arg, 8, &t), DSM_ERR_NO_PEER);

    dsm_stats_t s;
    assert_int_equal(dsm_node_peer_stats(c->nodes[0], 1, &s), DSM_OK);
    assert_true(s.spawns_run >= 2);
    assert_true(s.am_recv_by_handler[DSM_AM_RUNTIME_SPAWN] >= 2);
}

static dsm_status_t count_join(void *ctx, uint32_t rank)
{
    (void)rank;
    __atomic_fetch_add((int *)ctx, 1, __ATOMIC_SEQ_CST);
    return DSM_OK;
}

static void nop_handler(void *ctx, const dsm_am_msg_t *msg)
{
    (void)ctx;
    (void)msg;
}

/* A bare runtime node (nothing attached, partition_size set) publishes only
 * what it is told to; the bounds of dsm_node_publish; values read from both
 * sides; the join hooks run for every member, this node included, before the
 * member is acknowledged; ids already owned are refused. */
static void test_published_values(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, 5);
    dsm_node_t *bare;
    assert_int_equal(dsm_node_create(&cfg, &bare), DSM_OK);

    assert_int_equal(dsm_node_publish(bare, "test.greeting", "hello", 5), DSM_OK);
    assert_int_equal(dsm_node_publish(bare, "test.greeting", "again", 5), DSM_ERR_EXISTS);
    assert_int_equal(dsm_node_publish(bare, "", "x", 1), DSM_ERR_INVALID);
    assert_int_equal(dsm_node_publish(bare, "0123456789abcdef0123456789abcdef", "x", 1), DSM_ERR_INVALID);
    static uint8_t big[DSM_NODE_MAX_VALUE_BYTES + 1];
    assert_int_equal(dsm_node_publish(bare, "test.big", big, sizeof big), DSM_ERR_TOO_BIG);
    /* The total is bounded, then the count. */
    assert_int_equal(dsm_node_publish(bare, "test.big", big, DSM_NODE_MAX_VALUE_BYTES - 5), DSM_OK);
    assert_int_equal(dsm_node_publish(bare, "test.more", "x", 1), DSM_ERR_TOO_BIG);
    for (int i = 2; i < DSM_NODE_MAX_VALUES; i++) {
        char key[16];
        snprintf(key, sizeof key, "test.k%d", i);
        assert_int_equal(dsm_node_publish(bare, key, NULL, 0), DSM_OK);
    }
    assert_int_equal(dsm_node_publish(bare, "test.one_too_many", NULL, 0), DSM_ERR_TOO_BIG);

    /* Module slots and handler ids are owned: a second claim is refused. */
    int slot_state = 0;
    assert_int_equal(dsm_node_set_module(bare, 3, &slot_state, NULL), DSM_OK);
    assert_int_equal(dsm_node_set_module(bare, 3, &slot_state, NULL), DSM_ERR_EXISTS);
    assert_int_equal(dsm_node_set_module(bare, DSM_NODE_MAX_MODULES, &slot_state, NULL), DSM_ERR_INVALID);
    assert_ptr_equal(dsm_node_module(bare, 3), &slot_state);
    assert_null(dsm_node_module(bare, TEST_MODULE));
    dsm_fabric_t *f = dsm_node_fabric(bare);
    assert_int_equal(dsm_fabric_am_register(f, DSM_AM_RUNTIME_PING, nop_handler, NULL), DSM_ERR_EXISTS);
    assert_int_equal(dsm_fabric_am_register(f, DSM_AM_USER_FIRST, nop_handler, NULL), DSM_OK);
    assert_int_equal(dsm_fabric_am_register(f, DSM_AM_USER_FIRST, nop_handler, NULL), DSM_ERR_EXISTS);

    int joins = 0;
    assert_int_equal(dsm_node_on_peer_join(bare, count_join, &joins), DSM_OK);
    test_region_t *r0 = dsm_node_module(c->nodes[0], TEST_MODULE);
    int r0_joins = __atomic_load_n(&r0->joins, __ATOMIC_SEQ_CST);
    assert_int_equal(dsm_node_join(bare), DSM_OK);
    /* Once joined: the hook ran for every member, this node included, and
     * every member ran its hooks for this node before acknowledging it. */
    assert_int_equal(__atomic_load_n(&joins, __ATOMIC_SEQ_CST), (int)dsm_node_daemons(bare, NULL, 0));
    assert_int_equal(__atomic_load_n(&r0->joins, __ATOMIC_SEQ_CST), r0_joins + 1);
    assert_int_equal(dsm_node_publish(bare, "test.late", "x", 1), DSM_ERR_STATE);
    assert_int_equal(dsm_node_on_peer_join(bare, count_join, &joins), DSM_ERR_STATE);
    assert_int_equal(dsm_node_set_module(bare, 4, &slot_state, NULL), DSM_ERR_STATE);

    char buf[16];
    size_t len = 0;
    dsm_node_t *n0 = c->nodes[0];
    assert_int_equal(dsm_node_peer_value(n0, 5, "test.greeting", buf, sizeof buf, &len), DSM_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(dsm_node_peer_value(n0, 5, "test.greeting", buf, 2, &len), DSM_ERR_TOO_BIG);
    assert_int_equal(len, 5);
    assert_int_equal(dsm_node_peer_value(n0, 5, "test.k7", NULL, 0, &len), DSM_OK);
    assert_int_equal(len, 0);
    assert_int_equal(dsm_node_peer_value(n0, 5, TEST_REGION_KEY, buf, sizeof buf, &len), DSM_ERR_INVALID);
    assert_int_equal(dsm_node_peer_value(n0, 99, "test.greeting", buf, sizeof buf, &len), DSM_ERR_NO_PEER);
    assert_int_equal(dsm_node_peer_value(n0, 1000, "test.greeting", buf, sizeof buf, &len), DSM_ERR_NO_PEER);
    /* partition_size alone publishes nothing: no region to reach there. */
    assert_int_equal(dsm_fabric_remote_region_length(dsm_node_fabric(n0), 5, TEST_REGION), 0);
    /* The newcomer reads the others' values, and its own. */
    assert_int_equal(dsm_node_peer_value(bare, 0, TEST_REGION_KEY, NULL, 0, &len), DSM_ERR_TOO_BIG);
    assert_true(len > 16);
    assert_int_equal(dsm_node_peer_value(bare, 5, "test.greeting", buf, sizeof buf, &len), DSM_OK);
    assert_int_equal(len, 5);
    dsm_node_destroy(bare);
}

static void test_wrong_secret_refused(void **state)
{
    dsm_harness_t *c = *state;
    uint64_t refused = dsm_coord_refused(c->coord);
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, 5);
    cfg.secret = "not-the-secret";
    dsm_node_t *n;
    assert_int_equal(dsm_node_create(&cfg, &n), DSM_OK);
    assert_int_equal(dsm_node_join(n), DSM_ERR_AUTH);
    dsm_node_destroy(n);
    assert_int_equal(dsm_coord_refused(c->coord), refused + 1);
    /* A second daemon claiming a live rank. */
    dsm_harness_node_config(c, &cfg, 1);
    assert_int_equal(dsm_node_create(&cfg, &n), DSM_OK);
    assert_int_equal(dsm_node_join(n), DSM_ERR_RANK_TAKEN);
    dsm_node_destroy(n);
    assert_int_equal(dsm_coord_members(c->coord, NULL), 3);
}

static void send_raw(const char *coordinator, const void *bytes, size_t len)
{
    int fd;
    assert_int_equal(dsm_sock_connect(coordinator, 2000, &fd), DSM_OK);
    char challenge[64];
    assert_int_equal(dsm_sock_recv_all(fd, challenge, 16 + 32, 2000), DSM_OK);
    dsm_sock_send_all(fd, bytes, len);
    /* The coordinator answers garbage by hanging up (maybe after a refusal). */
    char buf[512];
    while (dsm_sock_recv_all(fd, buf, 1, 3000) == DSM_OK) {}
    close(fd);
}

static void test_garbage_on_control_port(void **state)
{
    dsm_harness_t *c = *state;
    uint64_t refused = dsm_coord_refused(c->coord);
    send_raw(c->coordinator, "GET / HTTP/1.0\r\n\r\n", 18);
    /* A valid header announcing more than the limit. */
    uint8_t oversized[16] = {0x4d, 0x43, 0x54, 0x4c, DSM_CTL_VERSION, 0, 2, 0, 0xff, 0xff, 0xff, 0x7f};
    send_raw(c->coordinator, oversized, sizeof oversized);
    /* A HELLO whose payload is too short for its fields. */
    uint8_t truncated[16 + 8] = {0x4d, 0x43, 0x54, 0x4c, DSM_CTL_VERSION, 0, 2, 0, 8, 0, 0, 0};
    send_raw(c->coordinator, truncated, sizeof truncated);
    assert_int_equal(dsm_coord_refused(c->coord), refused + 3);
    /* The cluster carries on. */
    uint64_t v = 0;
    assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(c->nodes[2]), 1, TEST_REGION, 128, 5, &v), DSM_OK);
    assert_int_equal(dsm_coord_members(c->coord, NULL), 3);
}

/* What the fabric logged about rank 3 leaving: as a failure or a departure. */
static int leave_failed_lines, leave_left_lines;
static void leave_sink(void *ctx, int level, const char *module, const char *message)
{
    (void)ctx;
    if (strcmp(module, "fabric") != 0 || strncmp(message, "rank 3: peer ", 13) != 0) return;
    if (level <= 1) __atomic_fetch_add(&leave_failed_lines, 1, __ATOMIC_RELAXED);
    else if (strstr(message, "left")) __atomic_fetch_add(&leave_left_lines, 1, __ATOMIC_RELAXED);
}

/* A member that leaves cleanly is dead to the others at once, and they log
 * it as a departure, not a failure (a bench or the demo tearing its
 * clusters down warned once per node about failed peers). */
static void test_leave_makes_peer_dead(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, 3);
    dsm_node_t *extra;
    assert_int_equal(test_node_start(&cfg, 0, &extra), DSM_OK);
    assert_int_equal(dsm_node_wait_daemons(c->nodes[0], 4, 3000), DSM_OK);
    uint64_t v;
    assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(c->nodes[0]), 3, TEST_REGION, 0, 1, &v), DSM_OK);
    int level = dsm_get_log_level();
    dsm_set_log_level(2);
    leave_failed_lines = leave_left_lines = 0;
    dsm_set_log_sink(leave_sink, NULL);
    dsm_node_destroy(extra);
    /* The coordinator tells everyone; the notice lands in milliseconds on an
       idle host, the bound (60 s) only catches a notice that never comes. */
    dsm_status_t st = dsm_node_peer_state(c->nodes[0], 3);
    for (uint64_t deadline = dsm_now_ms() + 60000;
         (st == DSM_OK || __atomic_load_n(&leave_left_lines, __ATOMIC_RELAXED) < 3) && dsm_now_ms() < deadline;) {
        sched_yield();
        st = dsm_node_peer_state(c->nodes[0], 3);
    }
    dsm_set_log_sink(NULL, NULL);
    dsm_set_log_level(level);
    assert_int_equal(st, DSM_ERR_PEER_DEAD);
    assert_int_equal(__atomic_load_n(&leave_failed_lines, __ATOMIC_RELAXED), 0);
    assert_true(__atomic_load_n(&leave_left_lines, __ATOMIC_RELAXED) >= 1); /* up to one per other node */
    assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(c->nodes[0]), 3, TEST_REGION, 0, 1, &v),
                     DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_node_daemons(c->nodes[1], NULL, 0), 3);
    /* The rank is free again for a restarted daemon. */
    assert_int_equal(test_node_start(&cfg, 0, &extra), DSM_OK);
    dsm_node_destroy(extra);
}

typedef struct joiner {
    dsm_harness_t *c;
    int rank;
    dsm_node_t *node;
    dsm_status_t st;
} joiner_t;

static void *join_one(void *arg)
{
    joiner_t *j = arg;
    dsm_node_config_t cfg;
    dsm_harness_node_config(j->c, &cfg, j->rank);
    j->st = test_node_start(&cfg, 0, &j->node);
    return NULL;
}

/* A client joined to c, then three daemons (ranks first..first+2) joining
 * concurrently from threads t, which the caller joins. */
static dsm_node_t *client_and_joiners(dsm_harness_t *c, int first, joiner_t j[3], pthread_t t[3])
{
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, DSM_RANK_ANY);
    cfg.kind = DSM_MEMBER_CLIENT;
    cfg.partition_size = 0;
    dsm_node_t *client;
    assert_int_equal(test_node_start(&cfg, 0, &client), DSM_OK);
    for (int i = 0; i < 3; i++) {
        j[i] = (joiner_t){.c = c, .rank = first + i};
        pthread_create(&t[i], NULL, join_one, &j[i]);
    }
    return client;
}

/* Whoever sees a member may talk to it at once and be answered: daemons join
 * concurrently while a client pings each the moment it becomes visible. */
static void test_visible_members_answer_at_once(void **state)
{
    dsm_harness_t *c = *state;
    joiner_t j[3];
    pthread_t t[3];
    dsm_node_t *client = client_and_joiners(c, 4, j, t);
    int answered[DSM_MAX_DAEMONS] = {0}, total = 0;
    for (int spins = 0; spins < 20000 && total < 6; spins++) {
        uint32_t ranks[16];
        uint32_t n = dsm_node_daemons(client, ranks, 16);
        for (uint32_t k = 0; k < n && k < 16; k++) {
            if (answered[ranks[k]]) continue;
            char reply[8];
            size_t len;
            assert_int_equal(dsm_fabric_am_request(dsm_node_fabric(client), ranks[k], DSM_AM_RUNTIME_PING, "ping", 4,
                                                   reply, sizeof reply, &len, 1000),
                             DSM_OK);
            answered[ranks[k]] = 1;
            total++;
        }
        usleep(100);
    }
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    assert_int_equal(total, 6);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(j[i].st, DSM_OK);
        /* And the newcomers can reach the client. */
        char reply[8];
        size_t len;
        assert_int_equal(dsm_fabric_am_request(dsm_node_fabric(j[i].node), dsm_node_rank(client),
                                               DSM_AM_RUNTIME_PING, "pong", 4, reply, sizeof reply, &len, 1000),
                         DSM_OK);
    }
    for (int i = 0; i < 3; i++) dsm_node_destroy(j[i].node);
    dsm_node_destroy(client);
}

/* A client that has waited for n daemons may hand any of them work that
 * involves any other: by then every daemon knows every other (a daemon that
 * had not yet heard of a newcomer answered NO_PEER before). */
static void test_waited_daemons_know_each_other(void **state)
{
    dsm_harness_t *c = *state;
    joiner_t j[3];
    pthread_t t[3];
    dsm_node_t *client = client_and_joiners(c, 7, j, t);
    assert_int_equal(dsm_node_wait_daemons(client, (uint32_t)c->n + 3, 10000), DSM_OK);
    /* at once, before the joiners' dsm_node_join calls are seen to return */
    for (int i = 0; i < c->n; i++)
        for (int k = 0; k < 3; k++) assert_int_equal(dsm_node_peer_state(c->nodes[i], j[k].rank), DSM_OK);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(j[i].st, DSM_OK);
        for (int k = 0; k < 3; k++) assert_int_equal(dsm_node_peer_state(j[i].node, j[k].rank), DSM_OK);
        for (int k = 0; k < c->n; k++)
            assert_int_equal(dsm_node_peer_state(j[i].node, dsm_node_rank(c->nodes[k])), DSM_OK);
    }
    for (int i = 0; i < 3; i++) dsm_node_destroy(j[i].node);
    dsm_node_destroy(client);
}

/* A client that says "auto" takes the transport the coordinator names. */
static void test_auto_client_takes_cluster_transport(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, DSM_RANK_ANY);
    cfg.kind = DSM_MEMBER_CLIENT;
    cfg.transport = DSM_TRANSPORT_AUTO;
    cfg.net_device = NULL;
    cfg.partition_size = 0;
    dsm_node_t *client;
    assert_int_equal(test_node_start(&cfg, 0, &client), DSM_OK);
    assert_int_equal(dsm_node_config(client)->transport, c->transport);
    uint64_t old;
    assert_int_equal(dsm_fabric_fetch_add(dsm_node_fabric(client), 2, TEST_REGION, 256, 1, &old), DSM_OK);
    char reply[8];
    size_t len;
    assert_int_equal(dsm_fabric_am_request(dsm_node_fabric(client), 1, DSM_AM_RUNTIME_PING, "hi", 2, reply,
                                           sizeof reply, &len, 2000), DSM_OK);
    dsm_node_destroy(client);
}

/* ---- limits and malformed requests -------------------------------------- */

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static int hold_running, hold_release;

static dsm_status_t hold_until_released(dsm_node_t *n, const void *args, size_t len, void *ret, size_t cap,
                                        size_t *ret_len)
{
    (void)n, (void)args, (void)len, (void)ret, (void)cap;
    *ret_len = 0;
    pthread_mutex_lock(&hold_lock);
    hold_running++;
    pthread_cond_broadcast(&hold_cond);
    while (!hold_release) pthread_cond_wait(&hold_cond, &hold_lock);
    hold_running--;
    pthread_mutex_unlock(&hold_lock);
    return DSM_OK;
}

/* hold_until_released registered (once per process: both groups run in
 * one) and its jobs held until released. */
static dsm_status_t hold_begin(void)
{
    dsm_status_t st = dsm_register("test.hold_until_released", hold_until_released);
    if (st != DSM_OK && st != DSM_ERR_EXISTS) fail_msg("register: %s", dsm_status_name(st));
    pthread_mutex_lock(&hold_lock);
    hold_release = 0;
    pthread_mutex_unlock(&hold_lock);
    return DSM_OK;
}

/* A node runs at most DSM_SPAWN_MAX_RUNNING spawns for its peers; one more
 * is refused with DSM_ERR_BUSY (not a thread per request without end), and
 * the node serves spawns again once its jobs finish. Runs in both groups of
 * one process: the function is registered once, the second time is EXISTS. */
static void test_spawn_bound(void **state)
{
    dsm_harness_t *c = *state;
    dsm_status_t st = hold_begin();
    enum { N = DSM_SPAWN_MAX_RUNNING };
    static dsm_task_t *tasks[N];
    for (int i = 0; i < N; i++)
        if ((st = dsm_spawn(c->nodes[0], 1, "test.hold_until_released", NULL, 0, &tasks[i])) != DSM_OK)
            fail_msg("spawn %d of %d: %s", i, N, dsm_status_name(st));
    /* Every job must be running before the extra one is sent, else it could
     * overtake a job still in flight and be accepted. 60 s is far beyond
     * starting 64 threads: under ASan on a host at load 30, 61 had started
     * after 20 s. */
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 60;
    pthread_mutex_lock(&hold_lock);
    int rc = 0;
    while (hold_running < N && rc == 0) rc = pthread_cond_timedwait(&hold_cond, &hold_lock, &deadline);
    int running = hold_running;
    if (running != N) {
        /* released first: held jobs would hold the node's teardown */
        hold_release = 1;
        pthread_cond_broadcast(&hold_cond);
    }
    pthread_mutex_unlock(&hold_lock);
    if (running != N) fail_msg("only %d of %d held spawns started within 60 s", running, N);

    dsm_task_t *extra;
    if ((st = dsm_spawn(c->nodes[0], 1, "test.hold_until_released", NULL, 0, &extra)) != DSM_OK)
        fail_msg("extra spawn: %s", dsm_status_name(st));
    dsm_status_t extra_st = dsm_join(extra, NULL, 0, NULL, 10000);
    /* released before checking, so a failure leaves no job blocked */
    pthread_mutex_lock(&hold_lock);
    hold_release = 1;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
    if (extra_st != DSM_ERR_BUSY)
        fail_msg("spawn %d (over the limit) gave %s, expected DSM_ERR_BUSY", N + 1, dsm_status_name(extra_st));
    for (int i = 0; i < N; i++)
        if ((st = dsm_join(tasks[i], NULL, 0, NULL, 20000)) != DSM_OK)
            fail_msg("held spawn %d: %s", i, dsm_status_name(st));
    /* the jobs' slots are free again */
    if ((st = dsm_spawn(c->nodes[0], 1, "test.hold_until_released", NULL, 0, &extra)) != DSM_OK ||
        (st = dsm_join(extra, NULL, 0, NULL, 10000)) != DSM_OK)
        fail_msg("spawn after the held ones finished: %s", dsm_status_name(st));
}

/* A caller can wait for its spawn to be running: the wait returns while
 * the function is still held (so not when it ends), on a peer and on the
 * caller's own node. Start notices that are malformed or name no task of
 * the receiver are dropped, and the receiver goes on answering. */
static void test_spawn_started(void **state)
{
    dsm_harness_t *c = *state;
    dsm_status_t st = hold_begin();
    dsm_task_t *t[2] = {NULL, NULL};
    const uint32_t on[2] = {1, 0};
    char why[256] = "";
    for (int i = 0; i < 2 && !why[0]; i++) {
        if ((st = dsm_spawn(c->nodes[0], on[i], "test.hold_until_released", NULL, 0, &t[i])) != DSM_OK) {
            snprintf(why, sizeof why, "spawn on rank %u: %s", on[i], dsm_status_name(st));
            t[i] = NULL;
        /* 20 s: far beyond a message and a thread's start on a loaded host */
        } else if ((st = dsm_task_wait_started(t[i], 20000)) != DSM_OK || !dsm_task_started(t[i])) {
            snprintf(why, sizeof why, "spawn on rank %u not started within 20 s: %s", on[i], dsm_status_name(st));
        } else if ((st = dsm_join(t[i], NULL, 0, NULL, 1)) != DSM_ERR_TIMEOUT) {
            snprintf(why, sizeof why, "held spawn on rank %u ended: %s", on[i], dsm_status_name(st));
            t[i] = NULL;   /* joined */
        }
    }
    dsm_fabric_t *f = dsm_node_fabric(c->nodes[0]);
    uint8_t unknown[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, reply[8];
    size_t len = 0;
    dsm_status_t bad = dsm_fabric_am_send(f, 1, DSM_AM_RUNTIME_STARTED, unknown, 3),
                 stray = dsm_fabric_am_send(f, 1, DSM_AM_RUNTIME_STARTED, unknown, sizeof unknown),
                 ping = dsm_fabric_am_request(f, 1, DSM_AM_RUNTIME_PING, "ok", 2, reply, sizeof reply, &len, 5000);
    /* released before any check fails: a held job would hold the node's
     * teardown */
    pthread_mutex_lock(&hold_lock);
    hold_release = 1;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
    for (int i = 0; i < 2; i++)
        if (t[i] && (st = dsm_join(t[i], NULL, 0, NULL, 20000)) != DSM_OK && !why[0])
            snprintf(why, sizeof why, "held spawn on rank %u: %s", on[i], dsm_status_name(st));
    if (why[0]) fail_msg("%s", why);
    assert_int_equal(bad, DSM_OK);
    assert_int_equal(stray, DSM_OK);
    assert_int_equal(ping, DSM_OK);
}

/* A malformed cancel that asks for an answer gets DSM_ERR_PROTO at once,
 * not silence until the sender's op timeout (5 s here); the node then
 * still answers a good request. The bound, 1 s, is a fifth of that timeout
 * and far above a loopback round trip (well under a millisecond), so it
 * tells an answer from a timeout without depending on the machine's load. */
static void test_malformed_cancel_answered(void **state)
{
    dsm_harness_t *c = *state;
    dsm_fabric_t *f = dsm_node_fabric(c->nodes[0]);
    uint8_t reply[8];
    size_t len = 0;
    const uint8_t shapes[][12] = {{1, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
    const size_t lens[] = {3, 12};
    for (int k = 0; k < 2; k++) {
        uint64_t t0 = dsm_now_ms();
        dsm_status_t st = dsm_fabric_am_request(f, 1, DSM_AM_RUNTIME_CANCEL, shapes[k], lens[k], reply, sizeof reply,
                                                &len, 5000);
        uint64_t took = dsm_now_ms() - t0;
        if (st != DSM_ERR_PROTO) fail_msg("%zu-byte cancel gave %s, expected DSM_ERR_PROTO", lens[k], dsm_status_name(st));
        if (took >= 1000) fail_msg("%zu-byte cancel answered after %llu ms", lens[k], (unsigned long long)took);
    }
    assert_int_equal(dsm_fabric_am_request(f, 1, DSM_AM_RUNTIME_PING, "ok", 2, reply, sizeof reply, &len, 5000), DSM_OK);
    assert_int_equal(len, 2);
}

/* A poke is a one-way ping its target counts; a ping that asks for an
 * answer is answered and not counted; a poke of oneself counts at once,
 * and one of a rank that is no member is refused. */
static void test_poke(void **state)
{
    dsm_harness_t *c = *state;
    uint64_t before = dsm_node_pokes(c->nodes[1]);
    uint8_t reply[8];
    size_t len = 0;
    assert_int_equal(dsm_fabric_am_request(dsm_node_fabric(c->nodes[0]), 1, DSM_AM_RUNTIME_PING, "ok", 2, reply,
                                           sizeof reply, &len, 5000),
                     DSM_OK);
    assert_int_equal(dsm_node_pokes(c->nodes[1]), before);
    assert_int_equal(dsm_node_poke(c->nodes[0], 1), DSM_OK);
    /* Generous: one message, but a loaded host may hold the target's
     * progress back for seconds. */
    uint64_t deadline = dsm_now_ms() + 30000;
    while (dsm_node_pokes(c->nodes[1]) == before && dsm_now_ms() < deadline)
        sched_yield();
    assert_int_equal(dsm_node_pokes(c->nodes[1]), before + 1);
    uint64_t self = dsm_node_pokes(c->nodes[2]);
    assert_int_equal(dsm_node_poke(c->nodes[2], 2), DSM_OK);
    assert_int_equal(dsm_node_pokes(c->nodes[2]), self + 1);
    assert_int_not_equal(dsm_node_poke(c->nodes[0], 200), DSM_OK);
}

int main(void)
{
    static dsm_harness_t shm = {.transport = DSM_TRANSPORT_SHM}, tcp = {.transport = DSM_TRANSPORT_TCP};
#define CLUSTER_TESTS(state)                                                                        \
    cmocka_unit_test_prestate(test_membership, state),                                              \
        cmocka_unit_test_prestate(test_rma_through_bootstrap, state),                               \
        cmocka_unit_test_prestate(test_barrier, state), cmocka_unit_test_prestate(test_spawn, state), \
        cmocka_unit_test_prestate(test_published_values, state),                                    \
        cmocka_unit_test_prestate(test_wrong_secret_refused, state),                                \
        cmocka_unit_test_prestate(test_garbage_on_control_port, state),                             \
        cmocka_unit_test_prestate(test_leave_makes_peer_dead, state),                               \
        cmocka_unit_test_prestate(test_visible_members_answer_at_once, state),                      \
        cmocka_unit_test_prestate(test_waited_daemons_know_each_other, state),                      \
        cmocka_unit_test_prestate(test_auto_client_takes_cluster_transport, state),                 \
        cmocka_unit_test_prestate(test_spawn_bound, state),                                         \
        cmocka_unit_test_prestate(test_spawn_started, state),                                       \
        cmocka_unit_test_prestate(test_malformed_cancel_answered, state),                           \
        cmocka_unit_test_prestate(test_poke, state)
    const struct CMUnitTest shm_tests[] = {CLUSTER_TESTS(&shm)};
    const struct CMUnitTest tcp_tests[] = {CLUSTER_TESTS(&tcp)};
    int failed = 0;
    if (test_cluster_start(&shm, 3, 0) != DSM_OK) return 1;
    failed += cmocka_run_group_tests_name("cluster/shm", shm_tests, NULL, NULL);
    dsm_harness_stop(&shm);
    if (test_cluster_start(&tcp, 3, 0) != DSM_OK) return 1;
    failed += cmocka_run_group_tests_name("cluster/tcp", tcp_tests, NULL, NULL);
    dsm_harness_stop(&tcp);
    return failed;
}
