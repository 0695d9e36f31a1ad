/* The weight a dead node held of exported properties comes back, over shm
 * and tcp, three nodes in this process: node 0 entrusts two properties and
 * shares them; node 2 imports trusts of both (clones some, drops some, keeps
 * some, hands one to node 1), and dies, between runs or mid-run. Node 0's
 * property that only node 2 still held is freed (its destructor runs
 * exactly once), the one node 1 also holds stays until node 1 drops it. And
 * the races of an import with a death, forced in order: the exporter of a
 * trust dies before the importer's move reaches the trustee (the move comes
 * after the exporter was written off, before or after node 0 settled): the
 * property lives while the importer holds the trust, and goes when it drops
 * it; or the property was freed by the write-off already, and the import is
 * refused instead of reviving it; the drop of a node served after the node
 * was written off is not taken twice. And an import inside a run, on a
 * runtime thread, whose move request waits there. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "deleg_cluster.h"
#include "deleg/remote.h"
#include "dsm/deleg.h"
#include "dsm/log.h"
#include "dsm/clock.h"

enum { N = 3, T = 2 };

static _Atomic int live_props;
static _Atomic int dtor_calls[2];

typedef struct obj {
    int id;
} obj_t;

static void obj_dtor(void *o)
{
    obj_t *x = o;
    atomic_fetch_add(&dtor_calls[x->id], 1);
    atomic_fetch_sub(&live_props, 1);
}

typedef struct wcl {
    dsm_harness_t c;
    dsm_deleg_rt_t *rt[N];
    int alive[N];
} wcl_t;

static void wcl_start(wcl_t *g, dsm_transport_t tr)
{
    memset(g, 0, sizeof *g);
    g->c.transport = tr;
    g->c.op_timeout_ms = 10000;
    dsm_deleg_config_t dc = {.threads = T};
    assert_int_equal(test_deleg_cluster_start(&g->c, N, &dc, g->rt), DSM_OK);
    for (int i = 0; i < N; i++) g->alive[i] = 1;
    atomic_store(&live_props, 0);
    atomic_store(&dtor_calls[0], 0);
    atomic_store(&dtor_calls[1], 0);
}

static void wcl_stop(wcl_t *g)
{
    for (int i = 0; i < N; i++) {
        if (g->alive[i]) dsm_deleg_rt_destroy(g->rt[i]);
    }
    dsm_harness_stop(&g->c);
}

static dsm_deleg_trust_t entrust(wcl_t *g, unsigned trustee, obj_t *o)
{
    dsm_deleg_trust_t t;
    assert_int_equal(dsm_deleg_entrust(g->rt[0], trustee, o, obj_dtor, 0, &t), DSM_OK);
    atomic_fetch_add(&live_props, 1);
    return t;
}

static dsm_deleg_trust_t share(wcl_t *g, dsm_deleg_trust_t *src, int to)
{
    uint8_t wire[DSM_DELEG_TRUST_WIRE];
    dsm_deleg_trust_t out;
    assert_int_equal(dsm_deleg_trust_export(src, wire, sizeof wire), DSM_OK);
    assert_int_equal(dsm_deleg_trust_import(g->rt[to], wire, sizeof wire, &out), DSM_OK);
    return out;
}

/* Node 0's record of rank r's share of t's property (t: node 0's own trust). */
static int64_t share_of(wcl_t *g, dsm_deleg_trust_t *t, uint32_t r)
{
    dsm_deleg_remote_t *R = g->rt[0]->remote;
    pthread_mutex_lock(&R->hlock);
    int64_t w = t->prop->shares ? t->prop->shares->w[r] : -1;
    pthread_mutex_unlock(&R->hlock);
    return w;
}

/* Node i's count of move requests received. */
static uint64_t moves_at(wcl_t *g, int i)
{
    dsm_stats_t st;
    dsm_fabric_stats(dsm_node_fabric(g->c.nodes[i]), &st);
    return st.am_recv_by_handler[DSM_AM_DELEG_MOVE];
}

/* Drops in a run: each live node's list on its thread 0 (a remote drop is
 * issued from a runtime thread). */
typedef struct drops {
    int n;
    dsm_deleg_trust_t *t[4];
} drops_t;

static void drop_main(void *arg, unsigned worker)
{
    drops_t *d = arg;
    if (worker != 0) return;
    for (int i = 0; i < d->n; i++) assert_int_equal(dsm_deleg_trust_drop(d->t[i]), DSM_OK);
}

static void run_drops(wcl_t *g, drops_t *d)
{
    for (int i = 0; i < N; i++)
        if (g->alive[i]) assert_int_equal(dsm_deleg_rt_start(g->rt[i], drop_main, &d[i]), DSM_OK);
    for (int i = 0; i < N; i++)
        if (g->alive[i]) assert_int_equal(dsm_deleg_rt_join(g->rt[i]), DSM_OK);
}

/* Node `victim` is gone, and every live node has its death notice. The
 * bound is generous: the notice comes from the coordinator or the fabric's
 * peer timeout on a loaded host. */
static void kill_node(wcl_t *g, int victim)
{
    dsm_node_destroy(g->c.nodes[victim]);
    g->c.nodes[victim] = NULL;
    dsm_deleg_rt_destroy(g->rt[victim]);
    g->alive[victim] = 0;
    uint64_t deadline = dsm_deadline_ns(30000);
    for (int i = 0; i < N; i++) {
        if (!g->alive[i]) continue;
        while (atomic_load(&g->rt[i]->remote->peer_ok[victim])) {
            assert_true(dsm_now_ns() < deadline);
            sched_yield();
        }
    }
}

/* A run on the live nodes in which `victim` never ends (its thread 0
 * yields until it is aborted); the others are done at once. */
static void victim_main(void *arg, unsigned worker)
{
    _Atomic int *spin = arg;
    if (!spin || worker != 0) return;
    while (atomic_load(spin)) dsm_deleg_yield();
}

/* ---- a dead holder's share is written off -------------------------------- */

static void test_dead_holder(void **state, int midrun)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    wcl_t g;
    wcl_start(&g, tr);
    obj_t op = {0}, oq = {1};
    dsm_deleg_trust_t p = entrust(&g, 0, &op), q = entrust(&g, 1, &oq);
    /* node 2: three trusts of p, two of q */
    dsm_deleg_trust_t p2[3], q2[2], p2c;
    uint64_t held = 0;
    for (int i = 0; i < 3; i++) {
        p2[i] = share(&g, &p, 2);
        held += p2[i].weight;
    }
    /* each move landed on node 0 before its import returned */
    assert_int_equal(share_of(&g, &p, 2), (int64_t)held);
    assert_int_equal(share_of(&g, &p, 1), 0);
    for (int i = 0; i < 2; i++) q2[i] = share(&g, &q, 2);
    assert_int_equal(dsm_deleg_trust_clone(&p2[0], &p2c), DSM_OK);
    /* node 2 hands a trust of q on to node 1: the weight moves from node
     * 2's share to node 1's */
    int64_t q_at_2 = share_of(&g, &q, 2);
    dsm_deleg_trust_t q1 = share(&g, &q2[1], 1);
    assert_int_equal(share_of(&g, &q, 1), (int64_t)q1.weight);
    assert_int_equal(share_of(&g, &q, 2), q_at_2 - (int64_t)q1.weight);
    assert_int_equal(dsm_deleg_trust_node(&q1), 0);

    /* a run: node 0 drops its own trusts, node 2 drops a clone and a trust */
    drops_t d[N] = {{2, {&p, &q}}, {0, {NULL}}, {2, {&p2c, &p2[2]}}};
    run_drops(&g, d);
    assert_int_equal(atomic_load(&live_props), 2); /* node 2 still holds both */
    assert_int_equal(atomic_load(&dtor_calls[0]), 0);

    if (midrun) {
        /* node 2 dies while the run waits for it: fate sharing ends the run
         * on the others, and their recovery writes off its shares */
        _Atomic int spin = 1;
        for (int i = 0; i < N; i++)
            assert_int_equal(dsm_deleg_rt_start(g.rt[i], victim_main, i == 2 ? (void *)&spin : NULL), DSM_OK);
        dsm_deleg_rt_abort(g.rt[2]);
        atomic_store(&spin, 0);
        kill_node(&g, 2);
        for (int i = 0; i < 2; i++) assert_int_equal(dsm_deleg_rt_join(g.rt[i]), DSM_ERR_PEER_DEAD);
        dsm_deleg_loss_t loss;
        dsm_deleg_rt_loss(g.rt[0], &loss);
        assert_int_equal(loss.rank, 2);
        assert_int_equal(atomic_load(&dtor_calls[0]), 0); /* not before recovery */
        assert_int_equal(dsm_deleg_rt_recover(g.rt[1], 10000), DSM_OK);
        assert_int_equal(dsm_deleg_rt_recover(g.rt[0], 10000), DSM_OK);
    } else {
        /* between runs: node 0 settles at its recover (or its next start) */
        kill_node(&g, 2);
        assert_int_equal(dsm_deleg_rt_recover(g.rt[0], 10000), DSM_OK);
    }
    /* p: only node 2 held it, so it went, once; q: node 1 holds a share */
    assert_int_equal(atomic_load(&dtor_calls[0]), 1);
    assert_int_equal(atomic_load(&dtor_calls[1]), 0);
    assert_int_equal(atomic_load(&live_props), 1);
    assert_int_equal(dsm_deleg_rt_recover(g.rt[0], 10000), DSM_OK); /* nothing twice */
    assert_int_equal(atomic_load(&dtor_calls[0]), 1);

    /* node 1 drops q: the last live share */
    drops_t d2[N] = {{0, {NULL}}, {1, {&q1}}, {0, {NULL}}};
    run_drops(&g, d2);
    assert_int_equal(atomic_load(&dtor_calls[1]), 1);
    assert_int_equal(atomic_load(&dtor_calls[0]), 1);
    assert_int_equal(atomic_load(&live_props), 0);
    wcl_stop(&g);
}

static void test_dead_holder_between_runs(void **state) { test_dead_holder(state, 0); }
static void test_dead_holder_mid_run(void **state) { test_dead_holder(state, 1); }

/* ---- the exporter dies before the importer's move ------------------------ */

enum { MOVE_BEFORE_SETTLE, MOVE_AFTER_SETTLE, FREED_FIRST };

static void test_exporter_dies(void **state, int order)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    wcl_t g;
    wcl_start(&g, tr);
    obj_t op = {0};
    dsm_deleg_trust_t p = entrust(&g, 0, &op);
    dsm_deleg_trust_t p1 = share(&g, &p, 1);
    /* node 1 exports a share of its trust, and dies before node 2 imports it */
    uint8_t wire[DSM_DELEG_TRUST_WIRE];
    assert_int_equal(dsm_deleg_trust_export(&p1, wire, sizeof wire), DSM_OK);
    if (order == FREED_FIRST) {
        drops_t d[N] = {{1, {&p}}, {0, {NULL}}, {0, {NULL}}};
        run_drops(&g, d);
    }
    kill_node(&g, 1);
    dsm_deleg_trust_t p2;
    if (order == MOVE_BEFORE_SETTLE) {
        /* node 1 is written off but node 0 has not settled yet */
        assert_int_equal(dsm_deleg_trust_import(g.rt[2], wire, sizeof wire, &p2), DSM_OK);
        assert_int_equal(dsm_deleg_rt_recover(g.rt[0], 10000), DSM_OK);
    } else {
        assert_int_equal(dsm_deleg_rt_recover(g.rt[0], 10000), DSM_OK);
        if (order == FREED_FIRST) {
            /* nobody alive held p: it went with node 1's share, and the
             * trust node 1 had exported cannot bring it back */
            assert_int_equal(atomic_load(&dtor_calls[0]), 1);
            assert_int_equal(dsm_deleg_trust_import(g.rt[2], wire, sizeof wire, &p2), DSM_ERR_BAD_ADDR);
            assert_int_equal(atomic_load(&live_props), 0);
            wcl_stop(&g);
            return;
        }
        assert_int_equal(dsm_deleg_trust_import(g.rt[2], wire, sizeof wire, &p2), DSM_OK);
    }
    assert_int_equal(share_of(&g, &p, 2), (int64_t)p2.weight);
    assert_int_equal(share_of(&g, &p, 1), 0);
    /* node 0 drops its own trust: node 2's keeps p alive */
    drops_t d[N] = {{1, {&p}}, {0, {NULL}}, {0, {NULL}}};
    run_drops(&g, d);
    assert_int_equal(atomic_load(&dtor_calls[0]), 0);
    assert_int_equal(atomic_load(&live_props), 1);
    /* and p goes with node 2's drop */
    drops_t d2[N] = {{0, {NULL}}, {0, {NULL}}, {1, {&p2}}};
    run_drops(&g, d2);
    assert_int_equal(atomic_load(&dtor_calls[0]), 1);
    assert_int_equal(atomic_load(&live_props), 0);
    wcl_stop(&g);
}

static void test_exporter_dies_move_before_settle(void **state) { test_exporter_dies(state, MOVE_BEFORE_SETTLE); }
static void test_exporter_dies_move_after_settle(void **state) { test_exporter_dies(state, MOVE_AFTER_SETTLE); }
static void test_exporter_dies_freed_first(void **state) { test_exporter_dies(state, FREED_FIRST); }

/* ---- a drop served after its node was written off ------------------------ */

/* A node drops a trust and dies at once: node 0 may have its death notice
 * (and write its share off) before it serves the drop. Forced here by
 * writing node 2 off on node 0 first, then letting node 2's drop be
 * served: the drop must not be taken from the total a second time when
 * node 0 settles. */
static void test_late_drop_of_written_off_node(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    wcl_t g;
    wcl_start(&g, tr);
    obj_t op = {0};
    dsm_deleg_trust_t p = entrust(&g, 0, &op);
    dsm_deleg_trust_t p2 = share(&g, &p, 2);
    dsm_deleg_remote_t *R = g.rt[0]->remote;
    dsm_deleg_shares_lose(R, 2);
    drops_t d[N] = {{0, {NULL}}, {0, {NULL}}, {1, {&p2}}};
    run_drops(&g, d);
    /* what node 0 counts, due taken off, is its own trust's weight alone:
     * node 2's share was written off once (the run's start settled it)
     * and its drop, served after, credited back rather than taken again */
    pthread_mutex_lock(&R->hlock);
    uint64_t counted = p.prop->total_weight - (uint64_t)p.prop->shares->due;
    pthread_mutex_unlock(&R->hlock);
    assert_int_equal(counted, p.weight);
    assert_int_equal(dsm_deleg_rt_recover(g.rt[0], 10000), DSM_OK);
    assert_int_equal(atomic_load(&dtor_calls[0]), 0); /* node 0 holds p */
    drops_t d2[N] = {{1, {&p}}, {0, {NULL}}, {0, {NULL}}};
    run_drops(&g, d2);
    assert_int_equal(atomic_load(&dtor_calls[0]), 1);
    assert_int_equal(atomic_load(&live_props), 0);
    wcl_stop(&g);
}

/* ---- an export that names its importer ------------------------------------ */

/* Nodes 0 and 1 each export a trust of node 0's p to node 2 by name, and
 * node 2 dies before it imports either (whether the bytes reached it or its
 * import had begun, nobody but node 2 knew): the weight was node 2's from
 * the export on, so node 2's write-off takes it, and p goes exactly when
 * nodes 0 and 1 drop theirs, not before. With plain exports that weight
 * stayed in nodes 0 and 1's shares and p outlived every trust. An export
 * to a node the trustee's node has written off (its death notice came
 * there first) is refused, and the exporting trust keeps the weight. */
static void test_named_importer_dies(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    wcl_t g;
    wcl_start(&g, tr);
    obj_t op = {0};
    dsm_deleg_trust_t p = entrust(&g, 0, &op);
    dsm_deleg_trust_t p1 = share(&g, &p, 1);
    uint8_t w0[DSM_DELEG_TRUST_WIRE], w1[DSM_DELEG_TRUST_WIRE], w2[DSM_DELEG_TRUST_WIRE];
    uint64_t p_before = p.weight, p1_before = p1.weight;
    int64_t at_1 = share_of(&g, &p, 1);
    assert_int_equal(dsm_deleg_trust_export_to(g.rt[0], &p, 2, w0, sizeof w0), DSM_OK);
    assert_int_equal(dsm_deleg_trust_export_to(g.rt[1], &p1, 2, w1, sizeof w1), DSM_OK);
    uint64_t from_0 = p_before - p.weight, from_1 = p1_before - p1.weight;
    assert_true(from_0 > 0 && from_1 > 0);
    /* node 2's before it saw the bytes; node 1's share lost what it gave */
    assert_int_equal(share_of(&g, &p, 2), (int64_t)(from_0 + from_1));
    assert_int_equal(share_of(&g, &p, 1), at_1 - (int64_t)from_1);
    /* node 0 has node 2's death first; node 1 does not yet, and exports */
    dsm_deleg_shares_lose(g.rt[0]->remote, 2);
    uint64_t p1_kept = p1.weight;
    assert_int_equal(dsm_deleg_trust_export_to(g.rt[1], &p1, 2, w2, sizeof w2), DSM_ERR_NO_PEER);
    assert_int_equal(p1.weight, p1_kept);
    assert_int_equal(share_of(&g, &p, 1), at_1 - (int64_t)from_1);
    kill_node(&g, 2);
    assert_int_equal(dsm_deleg_rt_recover(g.rt[0], 10000), DSM_OK);
    assert_int_equal(dsm_deleg_rt_recover(g.rt[1], 10000), DSM_OK);
    assert_int_equal(atomic_load(&dtor_calls[0]), 0); /* nodes 0 and 1 hold p */
    drops_t d[N] = {{1, {&p}}, {0, {NULL}}, {0, {NULL}}};
    run_drops(&g, d);
    assert_int_equal(atomic_load(&dtor_calls[0]), 0); /* node 1 still does */
    drops_t d2[N] = {{0, {NULL}}, {1, {&p1}}, {0, {NULL}}};
    run_drops(&g, d2);
    assert_int_equal(atomic_load(&dtor_calls[0]), 1);
    assert_int_equal(atomic_load(&live_props), 0);
    assert_int_equal(dsm_deleg_rt_recover(g.rt[0], 10000), DSM_OK); /* nothing twice */
    assert_int_equal(atomic_load(&dtor_calls[0]), 1);
    wcl_stop(&g);
}

/* A trust exported to node 1 by name imports there without a request and
 * anywhere else as a plain export does (from node 1's share). */
static void test_named_import_anywhere(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    wcl_t g;
    wcl_start(&g, tr);
    obj_t op = {0};
    dsm_deleg_trust_t p = entrust(&g, 0, &op);
    uint8_t w1[DSM_DELEG_TRUST_WIRE], w2[DSM_DELEG_TRUST_WIRE];
    assert_int_equal(dsm_deleg_trust_export_to(g.rt[0], &p, 1, w1, sizeof w1), DSM_OK);
    assert_int_equal(dsm_deleg_trust_export_to(g.rt[0], &p, 1, w2, sizeof w2), DSM_OK);
    dsm_deleg_trust_t t1, t2;
    int64_t both = share_of(&g, &p, 1);
    uint64_t moves = moves_at(&g, 0);
    assert_int_equal(dsm_deleg_trust_import(g.rt[1], w1, sizeof w1, &t1), DSM_OK);
    assert_int_equal(moves_at(&g, 0), moves); /* no request */
    assert_int_equal(share_of(&g, &p, 1), both);
    assert_int_equal(dsm_deleg_trust_import(g.rt[2], w2, sizeof w2, &t2), DSM_OK);
    assert_int_equal((int64_t)(t1.weight + t2.weight), both);
    assert_int_equal(share_of(&g, &p, 1), (int64_t)t1.weight);
    assert_int_equal(share_of(&g, &p, 2), (int64_t)t2.weight);
    drops_t d[N] = {{1, {&p}}, {1, {&t1}}, {1, {&t2}}};
    run_drops(&g, d);
    assert_int_equal(atomic_load(&dtor_calls[0]), 1);
    assert_int_equal(atomic_load(&live_props), 0);
    wcl_stop(&g);
}

/* ---- an import inside a run ------------------------------------------------ */

/* Node 1's thread 0 imports a trust node 2 exported, in the run, and drops
 * it: the move's request waits on a runtime thread (over tcp, the node's
 * poller) without stalling the run. */
typedef struct in_run {
    wcl_t *g;
    const uint8_t *wire;
    dsm_status_t imported, dropped;
} in_run_t;

static void import_main(void *arg, unsigned worker)
{
    in_run_t *x = arg;
    if (!x || worker != 0) return;
    dsm_deleg_trust_t t;
    x->imported = dsm_deleg_trust_import(x->g->rt[1], x->wire, DSM_DELEG_TRUST_WIRE, &t);
    if (x->imported == DSM_OK) x->dropped = dsm_deleg_trust_drop(&t);
}

static void test_import_in_run(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    wcl_t g;
    wcl_start(&g, tr);
    obj_t op = {0};
    dsm_deleg_trust_t p = entrust(&g, 0, &op);
    dsm_deleg_trust_t p2 = share(&g, &p, 2);
    uint8_t wire[DSM_DELEG_TRUST_WIRE];
    assert_int_equal(dsm_deleg_trust_export(&p2, wire, sizeof wire), DSM_OK);
    in_run_t x = {&g, wire, DSM_ERR_STATE, DSM_ERR_STATE};
    for (int i = 0; i < N; i++)
        assert_int_equal(dsm_deleg_rt_start(g.rt[i], import_main, i == 1 ? (void *)&x : NULL), DSM_OK);
    for (int i = 0; i < N; i++) assert_int_equal(dsm_deleg_rt_join(g.rt[i]), DSM_OK);
    assert_int_equal(x.imported, DSM_OK);
    assert_int_equal(x.dropped, DSM_OK);
    /* moved to node 1, dropped there: node 1 holds nothing */
    assert_int_equal(share_of(&g, &p, 1), 0);
    drops_t d[N] = {{1, {&p}}, {0, {NULL}}, {1, {&p2}}};
    run_drops(&g, d);
    assert_int_equal(atomic_load(&dtor_calls[0]), 1);
    assert_int_equal(atomic_load(&live_props), 0);
    wcl_stop(&g);
}

static int setup(void **state)
{
    (void)state;
    dsm_set_log_level(1);
    return 0;
}

#define BOTH(fn)                                                                                                       \
    cmocka_unit_test_prestate(fn, (void *)(uintptr_t)DSM_TRANSPORT_SHM),                                               \
        cmocka_unit_test_prestate(fn, (void *)(uintptr_t)DSM_TRANSPORT_TCP)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_dead_holder_between_runs),
        BOTH(test_dead_holder_mid_run),
        BOTH(test_exporter_dies_move_before_settle),
        BOTH(test_exporter_dies_move_after_settle),
        BOTH(test_exporter_dies_freed_first),
        BOTH(test_late_drop_of_written_off_node),
        BOTH(test_import_in_run),
        BOTH(test_named_importer_dies),
        BOTH(test_named_import_anywhere),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
