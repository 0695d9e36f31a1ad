/* Fate sharing of a delegation application across nodes, over shm and tcp:
 * three nodes run; one of them crashes mid-run (its runtime's threads stop
 * where they are and its node goes away) while the others have requests to
 * its trustee in flight. The others' runs end, reporting the dead node
 * (dsm_deleg_rt_join gives DSM_ERR_PEER_DEAD) instead of hanging; their
 * nodes stay usable; a runtime that lost a node refuses to run again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_util.h"
#include "deleg/internal.h"
#include "dsm/deleg.h"
#include "dsm/log.h"

enum { N = 3, T = 2 };

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

static dsm_deleg_trust_t share(dsm_deleg_rt_t *to, dsm_deleg_trust_t *src)
{
    uint8_t wire[DSM_DELEG_TRUST_WIRE];
    dsm_deleg_trust_t out;
    assert_int_equal(dsm_deleg_trust_export(src, wire, sizeof wire), DSM_OK);
    assert_int_equal(dsm_deleg_trust_import(to, wire, sizeof wire, &out), DSM_OK);
    return out;
}

static void test_node_dies(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    test_cluster_t c = {.transport = tr};
    dsm_deleg_rt_t *rt[N];
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = TEST_SECRET, .peer_timeout_ms = 1500, .transport = tr};
    assert_int_equal(dsm_coord_start(&cc, &c.coord), DSM_OK);
    snprintf(c.coordinator, sizeof c.coordinator, "127.0.0.1:%u", dsm_coord_port(c.coord));
    for (int i = 0; i < N; i++) {
        dsm_node_config_t cfg;
        test_node_config(&c, &cfg, i);
        cfg.partition_size = 0;
        assert_int_equal(dsm_node_create(&cfg, &c.nodes[i]), DSM_OK);
        c.n = i + 1;
        dsm_deleg_config_t dc = {.threads = T};
        assert_int_equal(dsm_deleg_rt_create(&dc, &rt[i]), DSM_OK);
        assert_int_equal(dsm_deleg_attach(c.nodes[i], rt[i]), DSM_OK);
        assert_int_equal(dsm_node_join(c.nodes[i]), DSM_OK);
    }
    for (int i = 0; i < N; i++) assert_int_equal(dsm_node_wait_daemons(c.nodes[i], N, 10000), DSM_OK);
    uint64_t *props = calloc(N, 8);
    dsm_deleg_trust_t own[N];
    for (int i = 0; i < N; i++) assert_int_equal(dsm_deleg_entrust(rt[i], 0, &props[i], NULL, 0, &own[i]), DSM_OK);
    node_ctx_t x[N];
    memset(x, 0, sizeof x);
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
    /* node 2 crashes: its threads stop where they are, its node goes away */
    dsm_deleg_rt_abort(rt[2]);
    dsm_node_destroy(c.nodes[2]);
    c.nodes[2] = NULL;
    /* the application ends on the others, with the dead node reported */
    assert_int_equal(dsm_deleg_rt_join(rt[0]), DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_deleg_rt_join(rt[1]), DSM_ERR_PEER_DEAD);
    /* and cannot be rerun on runtimes that lost a node */
    assert_int_equal(dsm_deleg_rt_start(rt[0], survivor_main, &x[0]), DSM_ERR_STATE);
    /* the survivors' nodes still work together */
    dsm_stats_t st;
    assert_int_equal(dsm_node_peer_stats(c.nodes[0], 1, &st), DSM_OK);
    assert_int_equal(dsm_node_peer_stats(c.nodes[1], 0, &st), DSM_OK);
    assert_int_not_equal(dsm_node_peer_state(c.nodes[0], 2), DSM_OK);
    for (int i = 0; i < N; i++) dsm_deleg_rt_destroy(rt[i]);
    dsm_node_destroy(c.nodes[0]);
    dsm_node_destroy(c.nodes[1]);
    dsm_coord_stop(c.coord);
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
