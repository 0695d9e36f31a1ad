/* Fate sharing of a delegation application across nodes, over shm and tcp:
 * three nodes run; one of them crashes mid-run (its runtime's threads stop
 * where they are and its node goes away) while the others have requests to
 * its trustee in flight. The others' runs end, reporting the dead node and
 * the trust left unanswered (dsm_deleg_rt_join gives DSM_ERR_PEER_DEAD,
 * dsm_deleg_rt_loss says which node, trustee and property) instead of
 * hanging; their nodes stay usable; a runtime that lost a node refuses to
 * run again until recovered. Then the next run on the same cluster works:
 * the survivors recover, a new node joins in the dead one's place, and an
 * application across the three counts every request exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deleg_cluster.h"
#include "deleg/remote.h"
#include "dsm/deleg.h"
#include "dsm/log.h"

enum { N = 3, T = 2, K = 200 };

static void add_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)args;
    (void)args_len;
    uint64_t *c = prop, v;
    memcpy(&v, env, 8);
    *c += v;
    dsm_deleg_return(ret, c, 8);
}

typedef struct node_ctx {
    dsm_deleg_trust_t doomed;  /* trustee on node 2 */
    dsm_deleg_trust_t peer;    /* trustee on the other survivor */
    _Atomic uint64_t applied;  /* answered requests to node 2 */
    int victim;
} node_ctx_t;

/* Survivors: keep applying to node 2 (and to each other) until the run is
 * stopped; the fiber that waits on node 2 when it dies is never answered. */
static void survivor_main(void *arg, unsigned worker)
{
    node_ctx_t *x = arg;
    if (x->victim) {
        for (;;) dsm_deleg_yield(); /* serves until it "crashes" */
    }
    uint64_t one = 1, back;
    for (;;) {
        dsm_deleg_trust_t *t = worker == 0 ? &x->doomed : &x->peer;
        if (dsm_deleg_apply(t, add_fn, &one, 8, &back, 8, NULL) != DSM_OK) return;
        if (worker == 0) atomic_fetch_add(&x->applied, 1);
    }
}

/* Requests of thread 0 of rt to trustee 0 of `rank`: issued, answered. */
static uint32_t issued_to(dsm_deleg_rt_t *rt, uint32_t rank)
{
    return __atomic_load_n(&rt->th[0].remote->out[rank * T + 0].done.tail, __ATOMIC_ACQUIRE);
}

static uint32_t answered_by(dsm_deleg_rt_t *rt, uint32_t rank)
{
    return __atomic_load_n(&rt->th[0].remote->out[rank * T + 0].done.head, __ATOMIC_ACQUIRE);
}

/* The next run: both workers of every node add 1 to every other node's
 * counter K times, synchronously (so in order per pair), and check that
 * the counter grew every time. */
typedef struct next_ctx {
    dsm_deleg_trust_t to[2];
    _Atomic int bad;
} next_ctx_t;

static void next_main(void *arg, unsigned worker)
{
    (void)worker;
    next_ctx_t *x = arg;
    uint64_t one = 1, last[2] = {0, 0};
    for (int k = 0; k < K; k++)
        for (int j = 0; j < 2; j++) {
            uint64_t back = 0;
            if (dsm_deleg_apply(&x->to[j], add_fn, &one, 8, &back, 8, NULL) != DSM_OK || back <= last[j])
                atomic_store(&x->bad, 1);
            last[j] = back;
        }
}

/* The end of the next run's application: worker 0 of each node drops its
 * trusts (the properties go once every share has come back). */
typedef struct drop_ctx {
    next_ctx_t *x;
    dsm_deleg_trust_t *mine;
} drop_ctx_t;

static void drop_main(void *arg, unsigned worker)
{
    drop_ctx_t *d = arg;
    if (worker != 0) return;
    for (int j = 0; j < 2; j++) dsm_deleg_trust_drop(&d->x->to[j]);
    dsm_deleg_trust_drop(d->mine);
}

static dsm_deleg_trust_t share(dsm_deleg_rt_t *to, dsm_deleg_trust_t *src)
{
    uint8_t wire[DSM_DELEG_TRUST_WIRE];
    dsm_deleg_trust_t out;
    assert_int_equal(dsm_deleg_trust_export(src, wire, sizeof wire), DSM_OK);
    assert_int_equal(dsm_deleg_trust_import(to, wire, sizeof wire, &out), DSM_OK);
    return out;
}

/* A run in which node 2 crashes: nodes 0 and 1 apply to a property on
 * node 2 (x[i].doomed) and to each other's (own[]: trustee 0 of each). */
static void crash_run(dsm_harness_t *c, dsm_deleg_rt_t **rt, dsm_deleg_trust_t *own, node_ctx_t *x)
{
    memset(x, 0, N * sizeof *x);
    x[0].doomed = share(rt[0], &own[2]);
    x[1].doomed = share(rt[1], &own[2]);
    x[0].peer = share(rt[0], &own[1]);
    x[1].peer = share(rt[1], &own[0]);
    x[2].victim = 1;
    for (int i = 0; i < N; i++) assert_int_equal(dsm_deleg_rt_start(rt[i], survivor_main, &x[i]), DSM_OK);
    /* let the survivors get going against node 2 */
    while (atomic_load(&x[0].applied) < 50 || atomic_load(&x[1].applied) < 50) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    /* node 2 crashes: its threads stop where they are (the survivors' next
     * requests to it stay unanswered), then its node goes away */
    dsm_deleg_rt_abort(rt[2]);
    /* Answers node 2 wrote before it stopped may still be on the wire; once
     * both survivors have every one of them and have asked again, what they
     * wait for can never come. */
    uint32_t served = (uint32_t)atomic_load(&rt[2]->th[0].remote->rserved);
    while (answered_by(rt[0], 2) + answered_by(rt[1], 2) != served || issued_to(rt[0], 2) == answered_by(rt[0], 2) ||
           issued_to(rt[1], 2) == answered_by(rt[1], 2)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    dsm_node_destroy(c->nodes[2]);
    c->nodes[2] = NULL;
    /* the application ends on the others, with the dead node reported */
    assert_int_equal(dsm_deleg_rt_join(rt[0]), DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_deleg_rt_join(rt[1]), DSM_ERR_PEER_DEAD);
}

static void test_node_dies(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    dsm_harness_t c = {.transport = tr};
    dsm_deleg_rt_t *rt[N];
    dsm_deleg_config_t dc = {.threads = T};
    assert_int_equal(test_deleg_cluster_start(&c, N, &dc, rt), DSM_OK);
    uint64_t *props = calloc(N, 8);
    dsm_deleg_trust_t own[N];
    for (int i = 0; i < N; i++) assert_int_equal(dsm_deleg_entrust(rt[i], 0, &props[i], NULL, 0, &own[i]), DSM_OK);
    node_ctx_t x[N];
    crash_run(&c, rt, own, x);
    /* which node and which trust: trustee 0 of rank 2, the doomed property */
    for (int i = 0; i < 2; i++) {
        dsm_deleg_loss_t loss;
        dsm_deleg_rt_loss(rt[i], &loss);
        assert_int_equal(loss.rank, 2);
        assert_int_equal(loss.trustee, 0);
        assert_int_equal(loss.handle, trust_handle(&x[i].doomed));
        assert_true(loss.unanswered >= 1);
    }
    /* a run that ends on a failed probe before the runtime's notice of the
     * death has come still names the node: the fabric knows it is gone.
     * Neither the runtime's record of the death nor its peer table says so
     * here (both as before the notice), so only the fabric can name it. */
    atomic_store(&rt[1]->remote->dead, 0);
    atomic_store(&rt[1]->remote->peer_ok[2], 1);
    assert_int_equal(dsm_fabric_peer_state(dsm_node_fabric(c.nodes[1]), 2), DSM_ERR_PEER_DEAD);
    dsm_deleg_remote_finished(rt[1], DSM_ERR_PEER_DEAD);
    atomic_store(&rt[1]->remote->peer_ok[2], 0);
    {
        dsm_deleg_loss_t loss;
        dsm_deleg_rt_loss(rt[1], &loss);
        assert_int_equal(loss.rank, 2);
        assert_int_equal(loss.trustee, 0);
    }
    /* and cannot be rerun on runtimes that lost a node before recovering */
    assert_int_equal(dsm_deleg_rt_start(rt[0], survivor_main, &x[0]), DSM_ERR_STATE);
    /* the survivors' nodes still work together */
    dsm_stats_t st;
    assert_int_equal(dsm_node_peer_stats(c.nodes[0], 1, &st), DSM_OK);
    assert_int_equal(dsm_node_peer_stats(c.nodes[1], 0, &st), DSM_OK);
    assert_int_not_equal(dsm_node_peer_state(c.nodes[0], 2), DSM_OK);
    dsm_deleg_rt_destroy(rt[2]);

    /* The next run on the same cluster: the survivors recover, a new node
     * takes the dead one's place, and a run across the three works. */
    assert_int_equal(dsm_deleg_rt_recover(rt[0], 10000), DSM_OK);
    assert_int_equal(dsm_deleg_rt_recover(rt[1], 10000), DSM_OK);
    {
        dsm_node_config_t cfg;
        dsm_harness_node_config(&c, &cfg, 3);
        cfg.partition_size = 0;
        assert_int_equal(dsm_node_create(&cfg, &c.nodes[3]), DSM_OK);
        c.n = 4;
        dsm_deleg_config_t dc = {.threads = T};
        assert_int_equal(dsm_deleg_rt_create(&dc, &rt[2]), DSM_OK);
        assert_int_equal(dsm_deleg_attach(c.nodes[3], rt[2]), DSM_OK);
        assert_int_equal(dsm_node_join(c.nodes[3]), DSM_OK);
    }
    dsm_node_t *live[3] = {c.nodes[0], c.nodes[1], c.nodes[3]};
    for (int i = 0; i < 3; i++) assert_int_equal(dsm_node_wait_daemons(live[i], 3, 10000), DSM_OK);
    uint64_t *counts = calloc(3, 8);
    dsm_deleg_trust_t mine[3];
    for (int i = 0; i < 3; i++) assert_int_equal(dsm_deleg_entrust(rt[i], 1, &counts[i], NULL, 0, &mine[i]), DSM_OK);
    next_ctx_t nx[3];
    memset(nx, 0, sizeof nx);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) nx[i].to[j] = share(rt[i], &mine[(i + 1 + j) % 3]);
    for (int i = 0; i < 3; i++) assert_int_equal(dsm_deleg_rt_start(rt[i], next_main, &nx[i]), DSM_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(dsm_deleg_rt_join(rt[i]), DSM_OK);
    for (int i = 0; i < 3; i++) {
        dsm_deleg_loss_t loss;
        dsm_deleg_rt_loss(rt[i], &loss);
        assert_int_equal(loss.rank, -1);
        assert_int_equal(atomic_load(&nx[i].bad), 0);
        /* two other nodes, two workers each, K requests: none lost, none twice */
        assert_int_equal(counts[i], 2 * T * K);
    }
    drop_ctx_t dx[3];
    for (int i = 0; i < 3; i++) {
        dx[i] = (drop_ctx_t){&nx[i], &mine[i]};
        assert_int_equal(dsm_deleg_rt_start(rt[i], drop_main, &dx[i]), DSM_OK);
    }
    for (int i = 0; i < 3; i++) assert_int_equal(dsm_deleg_rt_join(rt[i]), DSM_OK);
    for (int i = 0; i < N; i++) dsm_deleg_rt_destroy(rt[i]);
    dsm_node_destroy(c.nodes[3]);
    dsm_node_destroy(c.nodes[0]);
    dsm_node_destroy(c.nodes[1]);
    dsm_coord_stop(c.coord);
    free(counts);
    free(props);
}

static int setup(void **state)
{
    (void)state;
    dsm_set_log_level(1);
    return dsm_deleg_register("test.fate.add", add_fn) == DSM_OK ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_node_dies, (void *)(uintptr_t)DSM_TRANSPORT_SHM),
        cmocka_unit_test_prestate(test_node_dies, (void *)(uintptr_t)DSM_TRANSPORT_TCP),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
