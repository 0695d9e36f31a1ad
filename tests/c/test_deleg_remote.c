/* Delegation across nodes (Gossamer), over shm and tcp, 2-3 nodes in this
 * process, each with its own delegation runtime attached: ordering per
 * (client, trustee) pair and no lost or duplicated request under stress from
 * many fibers on 3 nodes; sync apply, apply_with and var-size results; a
 * batch that exactly fills a slot and one that overflows; the large-request
 * and large-response fallbacks; refusals of bad requests (unknown closure,
 * a property that does not exist, a malformed batch written into the slot)
 * while the trustee keeps serving; launch; clone/drop across nodes; over tcp
 * the runtime threads progress their node's worker, and a node whose threads
 * are all busy still answers. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "deleg_cluster.h"
#include "deleg/remote.h"
#include "dsm/deleg.h"
#include "dsm/log.h"
#include "runtime/node_internal.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "runtime/internal.h"
#include "fabric/chaos.h"
#include "fabric/fabric_int.h"

enum { MAXN = 3, T = 2, MAXG = MAXN * T };

typedef struct gcl {
    dsm_harness_t c;
    dsm_deleg_rt_t *rt[MAXN];
} gcl_t;

static dsm_status_t gcl_start(gcl_t *g, dsm_transport_t tr, int n, uint64_t initial_weight)
{
    memset(g, 0, sizeof *g);
    g->c.transport = tr;
    g->c.peer_timeout_ms = 3000;
    g->c.op_timeout_ms = 10000;
    dsm_deleg_config_t dc = {.threads = T, .initial_weight = initial_weight};
    return test_deleg_cluster_start(&g->c, n, &dc, g->rt);
}

static void gcl_stop(gcl_t *g)
{
    for (int i = 0; i < g->c.n; i++) dsm_deleg_rt_destroy(g->rt[i]);
    dsm_harness_stop(&g->c);
}

/* Start every runtime, then join every one (each join is cluster-wide). */
static void gcl_run(gcl_t *g, dsm_deleg_main_fn fn, void **args)
{
    for (int i = 0; i < g->c.n; i++) assert_int_equal(dsm_deleg_rt_start(g->rt[i], fn, args[i]), DSM_OK);
    for (int i = 0; i < g->c.n; i++) assert_int_equal(dsm_deleg_rt_join(g->rt[i]), DSM_OK);
}

/* A trust entrusted on node `owner` thread `s`, exported, imported on `user`. */
static dsm_deleg_trust_t share(gcl_t *g, dsm_deleg_trust_t *src, int user)
{
    dsm_deleg_trust_t out;
    uint8_t wire[DSM_DELEG_TRUST_WIRE];
    assert_int_equal(dsm_deleg_trust_export(src, wire, sizeof wire), DSM_OK);
    assert_int_equal(dsm_deleg_trust_import(g->rt[user], wire, sizeof wire, &out), DSM_OK);
    return out;
}

/* Drop trusts in a run: node i's list on its thread 0 (remote drops must be
 * issued from a runtime thread). */
typedef struct drops {
    int n;
    dsm_deleg_trust_t *t[MAXG + 2];
} drops_t;

static void drop_main(void *arg, unsigned worker)
{
    drops_t *d = arg;
    if (!d || worker != 0) return;
    for (int i = 0; i < d->n; i++) assert_int_equal(dsm_deleg_trust_drop(d->t[i]), DSM_OK);
}

static void gcl_drop(gcl_t *g, drops_t *d)
{
    void *args[MAXN];
    for (int i = 0; i < g->c.n; i++) args[i] = &d[i];
    gcl_run(g, drop_main, args);
}

/* ---- closures ----------------------------------------------------------- */

typedef struct counter {
    uint64_t total;
    uint64_t last[MAXG];
    int bad;
} counter_t;

typedef struct cenv {
    uint32_t gid;
    uint32_t pad;
    uint64_t seq;
} cenv_t;

/* Counts a request and checks that each client's come in issue order. */
static void t_count(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)args;
    (void)args_len;
    counter_t *c = prop;
    cenv_t e;
    memcpy(&e, env, sizeof e);
    if (e.gid >= MAXG || e.seq <= c->last[e.gid]) c->bad = 1;
    else c->last[e.gid] = e.seq;
    c->total++;
    dsm_deleg_return(ret, &e.seq, 8);
}

static void t_echo(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)prop;
    (void)env;
    dsm_deleg_return(ret, args, args_len);
}

static void t_add(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)args;
    (void)args_len;
    uint64_t *c = prop, v;
    memcpy(&v, env, 8);
    *c += v;
    dsm_deleg_return(ret, c, 8);
}

/* Launched: may block (here: yield) while holding the latch. */
static void t_slow_inc(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)env;
    (void)args;
    (void)args_len;
    uint64_t *c = prop;
    uint64_t v = *c;
    dsm_deleg_yield();
    *c = v + 1; /* the latch keeps other launches out between read and write */
    dsm_deleg_return(ret, c, 8);
}

/* Ten distinct closures (more than a slot's id cache holds): each returns
 * its number plus the environment. */
#define NTH_FN(k)                                                                                                  \
    static void t_nth##k(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)   \
    {                                                                                                              \
        (void)prop;                                                                                                \
        (void)args;                                                                                                \
        (void)args_len;                                                                                            \
        uint64_t v;                                                                                                \
        memcpy(&v, env, 8);                                                                                        \
        v += k;                                                                                                    \
        dsm_deleg_return(ret, &v, 8);                                                                              \
    }
NTH_FN(0) NTH_FN(1) NTH_FN(2) NTH_FN(3) NTH_FN(4) NTH_FN(5) NTH_FN(6) NTH_FN(7) NTH_FN(8) NTH_FN(9)
static const dsm_deleg_fn nth_fns[10] = {t_nth0, t_nth1, t_nth2, t_nth3, t_nth4,
                                         t_nth5, t_nth6, t_nth7, t_nth8, t_nth9};

static int setup(void **state)
{
    (void)state;
    dsm_set_log_level(1);
    for (int k = 0; k < 10; k++) {
        char name[32];
        snprintf(name, sizeof name, "test.remote.nth%d", k);
        assert_int_equal(dsm_deleg_register(name, nth_fns[k]), DSM_OK);
    }
    assert_int_equal(dsm_deleg_register("test.remote.count", t_count), DSM_OK);
    assert_int_equal(dsm_deleg_register("test.remote.echo", t_echo), DSM_OK);
    assert_int_equal(dsm_deleg_register("test.remote.add", t_add), DSM_OK);
    assert_int_equal(dsm_deleg_register("test.remote.slow_inc", t_slow_inc), DSM_OK);
    return 0;
}

/* ---- stress: ordering, nothing lost or duplicated ------------------------ */

enum { FIBERS = 4, PER_FIBER = 200 };

typedef struct stress_node {
    gcl_t *g;
    int node;
    int ntrusts;
    dsm_deleg_trust_t trusts[MAXG];
    /* per client thread (worker) */
    uint64_t seq[T];
    uint64_t done[T];
    uint64_t issued[T];
    uint64_t last_back[T][MAXG]; /* responses per pair come back in order */
    int bad_back;
    unsigned fibers_left[T];
    unsigned lanes_at_start[T]; /* the endpoints of the node's lanes as its run began */
} stress_node_t;

typedef struct stress_cb {
    stress_node_t *sn;
    unsigned worker, trust;
} stress_cb_t;

static void stress_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    stress_cb_t *cb = arg;
    uint64_t seq = 0;
    if (st != DSM_OK || len != 8) {
        cb->sn->bad_back = 1;
    } else {
        memcpy(&seq, ret, 8);
        if (seq <= cb->sn->last_back[cb->worker][cb->trust]) cb->sn->bad_back = 1;
        cb->sn->last_back[cb->worker][cb->trust] = seq;
    }
    cb->sn->done[cb->worker]++;
    free(cb);
}

typedef struct fiber_arg {
    stress_node_t *sn;
    unsigned worker, fiber;
} fiber_arg_t;

static void stress_fiber(void *arg)
{
    fiber_arg_t *fa = arg;
    stress_node_t *sn = fa->sn;
    unsigned w = fa->worker;
    uint32_t gid = (uint32_t)(sn->node * T + (int)w);
    for (unsigned i = 0; i < PER_FIBER; i++) {
        unsigned k = (i * 7 + fa->fiber * 3 + w) % (unsigned)sn->ntrusts;
        cenv_t e = {.gid = gid, .seq = ++sn->seq[w]};
        if (i % 5 == 0) {
            /* synchronous: the fiber waits, others keep the pair busy */
            uint64_t back = 0;
            assert_int_equal(dsm_deleg_apply(&sn->trusts[k], t_count, &e, sizeof e, &back, 8, NULL), DSM_OK);
            if (back != e.seq) sn->bad_back = 1;
            sn->issued[w]++;
            sn->done[w]++;
            continue;
        }
        stress_cb_t *cb = malloc(sizeof *cb);
        *cb = (stress_cb_t){sn, w, k};
        assert_int_equal(dsm_deleg_apply_then(&sn->trusts[k], t_count, &e, sizeof e, NULL, 0, 8, stress_then, cb),
                         DSM_OK);
        sn->issued[w]++;
        if (i % 16 == 15) dsm_deleg_yield();
    }
    free(fa);
    sn->fibers_left[w]--;
}

static void stress_main(void *arg, unsigned worker)
{
    stress_node_t *sn = arg;
    sn->lanes_at_start[worker] = dsm_fabric_lane_endpoints(sn->g->rt[sn->node]->th[worker].remote->lane);
    sn->fibers_left[worker] = FIBERS;
    for (unsigned f = 0; f < FIBERS; f++) {
        fiber_arg_t *fa = malloc(sizeof *fa);
        *fa = (fiber_arg_t){sn, worker, f};
        assert_int_equal(dsm_deleg_spawn(stress_fiber, fa), DSM_OK);
    }
    while (sn->fibers_left[worker] || sn->done[worker] != sn->issued[worker]) dsm_deleg_yield();
}

static void test_stress(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    gcl_t g;
    assert_int_equal(gcl_start(&g, tr, MAXN, 0), DSM_OK);
    counter_t *props = calloc(MAXG, sizeof *props);
    dsm_deleg_trust_t owner[MAXG];
    for (int n = 0; n < MAXN; n++)
        for (unsigned s = 0; s < T; s++)
            assert_int_equal(dsm_deleg_entrust(g.rt[n], s, &props[n * T + (int)s], NULL, 0, &owner[n * T + (int)s]),
                             DSM_OK);
    stress_node_t *sn = calloc(MAXN, sizeof *sn);
    void *args[MAXN];
    for (int n = 0; n < MAXN; n++) {
        sn[n].g = &g;
        sn[n].node = n;
        sn[n].ntrusts = MAXG;
        for (int k = 0; k < MAXG; k++) {
            int own = k / T;
            if (own != n) sn[n].trusts[k] = share(&g, &owner[k], n);
            assert_int_equal(dsm_deleg_trust_node(&sn[n].trusts[k]), own == n ? -1 : own);
        }
        args[n] = &sn[n];
    }
    /* the owners' trusts after the exports split their weight */
    for (int k = 0; k < MAXG; k++) sn[k / T].trusts[k] = owner[k];
    gcl_run(&g, stress_main, args);
    uint64_t issued = 0, served = 0, rsent = 0, rserved = 0, batches = 0, overlapped = 0;
    for (int n = 0; n < MAXN; n++) {
        assert_false(sn[n].bad_back);
        for (unsigned w = 0; w < T; w++) {
            assert_int_equal(sn[n].issued[w], FIBERS * PER_FIBER);
            assert_int_equal(sn[n].done[w], sn[n].issued[w]);
            issued += sn[n].issued[w];
            deleg_thread_t *th = &g.rt[n]->th[w];
            rsent += th->remote->rsent;
            rserved += th->remote->rserved;
            batches += th->remote->batches;
            overlapped += th->remote->overlapped;
            /* one endpoint of its own per other node, every one connected
             * before the run (a peer dying mid-run finds no wire-up under
             * way with it) */
            unsigned eps = dsm_fabric_lane_endpoints(th->remote->lane);
            assert_int_equal(sn[n].lanes_at_start[w], MAXN - 1);
            assert_int_equal(eps, MAXN - 1);
            if (tr == DSM_TRANSPORT_TCP) {
                /* and its request batches (messages over tcp) left on them;
                 * under the fabric's chaos mode, what it holds back (and
                 * whatever queues behind it) leaves later from its
                 * releaser thread, on the node's shared endpoint */
                dsm_chaos_counts_t chaos;
                dsm_fabric_chaos_counts(dsm_node_fabric(g.c.nodes[n]), &chaos);
                if (!chaos.on) assert_true(dsm_fabric_lane_used(th->remote->lane) >= th->remote->batches);
            }
        }
    }
    for (int k = 0; k < MAXG; k++) {
        assert_false(props[k].bad);
        served += props[k].total;
    }
    /* every request ran exactly once, in order per client; batching happened */
    assert_int_equal(served, issued);
    assert_int_equal(rsent, rserved);
    assert_true(rsent > 0 && batches < rsent);
    /* two batches in flight per pair did happen */
    assert_true(overlapped > 0);
    drops_t d[MAXN] = {{0}};
    for (int n = 0; n < MAXN; n++)
        for (int k = 0; k < MAXG; k++) d[n].t[d[n].n++] = &sn[n].trusts[k];
    gcl_drop(&g, d);
    gcl_stop(&g);
    free(sn);
    free(props);
}

/* ---- slot boundaries and the large fallbacks ---------------------------- */

typedef struct edge_ctx {
    dsm_deleg_trust_t echo, count; /* both on node 1 thread 0 */
    int fails;
    uint64_t full_before, batches_before;
    uint64_t full_after_fill, batches_after_fill, last_fill;
    uint64_t full_after_over, batches_after_over, last_over;
    uint64_t large_out, big_out;
    uint64_t inline_ids;
    uint64_t nth_back[10];
    unsigned pending;
    int ran;
} edge_ctx_t;

typedef struct nth_cb {
    edge_ctx_t *x;
    int k;
} nth_cb_t;

static void nth_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    nth_cb_t *cb = arg;
    if (st == DSM_OK && len == 8) memcpy(&cb->x->nth_back[cb->k], ret, 8);
    cb->x->pending--;
}

typedef struct echo_cb {
    edge_ctx_t *x;
    size_t len;
    uint8_t fill;
} echo_cb_t;

static void echo_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    echo_cb_t *cb = arg;
    const uint8_t *p = ret;
    int ok = st == DSM_OK && len == cb->len;
    for (size_t i = 0; ok && i < len; i++) ok = p[i] == (uint8_t)(cb->fill + i);
    if (!ok) cb->x->fails++;
    cb->x->pending--;
    free(cb);
}

static void issue_echo(edge_ctx_t *x, size_t len, uint8_t fill)
{
    uint8_t *buf = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(fill + i);
    echo_cb_t *cb = malloc(sizeof *cb);
    *cb = (echo_cb_t){x, len, fill};
    x->pending++;
    assert_int_equal(dsm_deleg_apply_then(&x->echo, t_echo, NULL, 0, buf, len, DSM_DELEG_VARSIZE, echo_then, cb),
                     DSM_OK);
    free(buf);
}

static void drain(edge_ctx_t *x)
{
    while (x->pending) dsm_deleg_yield();
}

static void edge_main(void *arg, unsigned worker)
{
    edge_ctx_t *x = arg;
    if (!x || worker != 0) return;
    rthread_t *rt = dsm_deleg_tls->remote;
    /* warm up the pair, then: 10 requests of 96 bytes fill the 960-byte
     * payload exactly (16-byte header with a cached id + 80 bytes of args) */
    issue_echo(x, 8, 1);
    drain(x);
    x->full_before = rt->full_batches;
    x->batches_before = rt->batches;
    for (int i = 0; i < 10; i++) issue_echo(x, 80, (uint8_t)i);
    drain(x);
    x->full_after_fill = rt->full_batches;
    x->batches_after_fill = rt->batches;
    x->last_fill = rt->last_count;
    /* 11 of them overflow into a second batch of one */
    for (int i = 0; i < 11; i++) issue_echo(x, 80, (uint8_t)(i + 40));
    drain(x);
    x->full_after_over = rt->full_batches;
    x->batches_after_over = rt->batches;
    x->last_over = rt->last_count;
    /* sizes across the slot: the large requests go into the pair's big
     * block over shm (by message past it, and over tcp), their echoes (too
     * big for a response slot) come back by message */
    for (size_t len = 0; len <= 4096; len = len < 900 ? len + 100 : len + 56) issue_echo(x, len, (uint8_t)len);
    issue_echo(x, RBIG_SIZE + 100, 7);
    drain(x);
    x->large_out = rt->large_out;
    x->big_out = rt->big_out;
    /* ten closures in one batch: eight ids in the slot's cache, two inline */
    uint64_t inl = rt->inline_ids;
    nth_cb_t cbs[10];
    for (int k = 0; k < 10; k++) {
        uint64_t v = 100 * (uint64_t)k;
        cbs[k] = (nth_cb_t){x, k};
        x->pending++;
        assert_int_equal(dsm_deleg_apply_then(&x->echo, nth_fns[k], &v, 8, NULL, 0, 8, nth_then, &cbs[k]), DSM_OK);
    }
    drain(x);
    x->inline_ids = rt->inline_ids - inl;
    /* a large request between small ones keeps its place in the order */
    static uint8_t big[3000];
    for (uint64_t s = 1; s <= 9; s++) {
        cenv_t e = {.gid = 0, .seq = s};
        uint64_t back = 0;
        size_t alen = s % 3 == 2 ? sizeof big : 0;
        assert_int_equal(dsm_deleg_apply_then(&x->count, t_count, &e, sizeof e, big, alen, 8, NULL, NULL), DSM_OK);
        if (s == 9) assert_int_equal(dsm_deleg_apply(&x->count, t_count, &(cenv_t){.gid = 0, .seq = 10}, sizeof e,
                                                     &back, 8, NULL), DSM_OK);
        if (s == 9) assert_true(back == 10);
    }
    /* apply_with and a var-size result through the synchronous path */
    uint8_t in[500], out[600];
    for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(i * 3);
    size_t got = 0;
    assert_int_equal(dsm_deleg_apply_with(&x->echo, t_echo, NULL, 0, in, sizeof in, out, sizeof out, &got), DSM_OK);
    assert_int_equal(got, sizeof in);
    assert_memory_equal(in, out, sizeof in);
    x->ran = 1;
}

static void test_edges(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    gcl_t g;
    assert_int_equal(gcl_start(&g, tr, 2, 0), DSM_OK);
    counter_t counter = {0};
    dsm_deleg_trust_t echo_own, count_own;
    assert_int_equal(dsm_deleg_entrust(g.rt[1], 0, &counter, NULL, 0, &echo_own), DSM_OK);
    assert_int_equal(dsm_deleg_entrust(g.rt[1], 0, &counter, NULL, 0, &count_own), DSM_OK);
    edge_ctx_t x = {0};
    x.echo = share(&g, &echo_own, 0);
    x.count = share(&g, &count_own, 0);
    void *args[2] = {&x, NULL};
    gcl_run(&g, edge_main, args);
    assert_true(x.ran);
    assert_int_equal(x.fails, 0);
    /* exactly full: one batch of 10 with a full payload */
    assert_int_equal(x.batches_after_fill - x.batches_before, 1);
    assert_int_equal(x.full_after_fill - x.full_before, 1);
    assert_int_equal(x.last_fill, 10);
    /* overflow: a full batch of 10, then one of 1 */
    assert_int_equal(x.batches_after_over - x.batches_after_fill, 2);
    assert_int_equal(x.full_after_over - x.full_after_fill, 1);
    assert_int_equal(x.last_over, 1);
    assert_true(x.large_out >= 11);
    if (tr == DSM_TRANSPORT_SHM) {
        /* every one that fits a big block went there, the one past it by message */
        assert_true(x.big_out >= 10);
        assert_int_equal(x.large_out - x.big_out, 1);
    } else {
        assert_int_equal(x.big_out, 0);
    }
    assert_int_equal(x.inline_ids, 2);
    for (int k = 0; k < 10; k++) assert_int_equal(x.nth_back[k], 101 * (uint64_t)k);
    assert_true(g.rt[1]->th[0].remote->spilled_out >= 10);
    assert_false(counter.bad);
    assert_int_equal(counter.total, 10);
    drops_t d[2] = {{2, {&x.echo, &x.count}}, {2, {&echo_own, &count_own}}};
    gcl_drop(&g, d);
    gcl_stop(&g);
}

/* ---- bad input ------------------------------------------------------------ */

typedef struct bad_ctx {
    dsm_deleg_trust_t add;   /* node 0 thread 0 */
    dsm_deleg_trust_t plain; /* not a latch */
    uint32_t handle;
    dsm_status_t unknown_fn, bad_handle, not_latch, after;
    uint64_t after_value;
    int done;
} bad_ctx_t;

static void status_cb(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)ret;
    (void)len;
    dsm_status_t *out = arg;
    *out = st;
}

static void bad_main(void *arg, unsigned worker)
{
    bad_ctx_t *x = arg;
    if (!x) return;
    deleg_thread_t *th = dsm_deleg_tls;
    if (worker == 1) {
        /* the pretend client of the injected batch counts what it sent in
         * this run, as a real one would (the waves count a run's own) */
        atomic_fetch_add(&th->remote->rsent, 3);
        return;
    }
    uint64_t one = 1;
    x->unknown_fn = x->bad_handle = x->not_latch = 1;
    assert_int_equal(dsm_deleg_remote_issue(th, 0, 0, 0x5eed1234u, RK_USER, x->handle, 8, &one, 8, NULL, 0,
                                            status_cb, &x->unknown_fn),
                     DSM_OK);
    uint32_t add_id;
    assert_int_equal(dsm_lookup("test.remote.add", &add_id), DSM_ERR_NO_HANDLER); /* not a task */
    /* a handle no property has (index free, and a wrong generation) */
    assert_int_equal(dsm_deleg_remote_issue(th, 0, 0, 0, RK_USER, 0x00070fffu, 8, &one, 8, NULL, 0, status_cb,
                                            &x->bad_handle),
                     DSM_OK);
    assert_int_equal(dsm_deleg_launch_then(&x->plain, t_slow_inc, NULL, 0, NULL, 0, status_cb, &x->not_latch),
                     DSM_OK);
    /* and the trustee still serves this client normally */
    x->after = dsm_deleg_apply(&x->add, t_add, &one, 8, &x->after_value, 8, NULL);
    while (x->unknown_fn == 1 || x->bad_handle == 1 || x->not_latch == 1) dsm_deleg_yield();
    x->done = 1;
}

/* A batch written straight into node 0's receive square as if from node 1's
 * thread 1 (which sends nothing else to node 0 thread 0): a good request,
 * one whose length runs past the slot, and a count that claims one more. */
static void inject_bad_batch(gcl_t *g, uint32_t handle)
{
    dsm_deleg_remote_t *R = dsm_module_state(g->c.nodes[0], &dsm_deleg_module);
    assert_non_null(R);
    uint8_t *block = R->base + rsq_req_off(R, 0, 1, 1, 1);
    uint8_t pay[RSLOT_PAYLOAD];
    uint32_t add_id = dsm_registry_id("test.remote.add");
    uint64_t v = 5;
    size_t len = dsm_rreq_encode(pay, 0, add_id, RK_USER, handle, 8, &v, 8, NULL, 0);
    size_t l2 = dsm_rreq_encode(pay + len, 0, add_id, RK_USER, handle, 8, &v, 8, NULL, 0);
    dsm_put_u32(pay + len + 4, 5000); /* args_len past the slot */
    len += l2;
    memcpy(block + RSLOT_PAYLOAD - len, pay, len);
    uint32_t fn[1] = {add_id};
    dsm_rslot_trailer_encode(block + RSLOT_PAYLOAD, (uint16_t)(RSLOT_PAYLOAD - len), 3, fn, 1, 0, 0);
    uint64_t seq = 1;
    memcpy(block + RSLOT_SEQ_AT, &seq, 8);
}

static void test_bad_input(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    gcl_t g;
    assert_int_equal(gcl_start(&g, tr, 2, 0), DSM_OK);
    uint64_t counter = 0, plain = 0;
    dsm_deleg_trust_t add_own, plain_own;
    assert_int_equal(dsm_deleg_entrust(g.rt[0], 0, &counter, NULL, 0, &add_own), DSM_OK);
    assert_int_equal(dsm_deleg_entrust(g.rt[0], 0, &plain, NULL, 0, &plain_own), DSM_OK);
    bad_ctx_t x = {0};
    x.add = share(&g, &add_own, 1);
    x.plain = share(&g, &plain_own, 1);
    x.handle = trust_handle(&x.add);
    inject_bad_batch(&g, x.handle);
    /* Slot writes and large messages are one-way; a malformed one sent as a
     * request is answered with an error at once, not left to time out. */
    const uint8_t garbage[7] = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3};
    const uint16_t one_way[2] = {DSM_AM_DELEG_PUT, DSM_AM_DELEG_LARGE};
    for (int i = 0; i < 2; i++) {
        uint64_t t0 = dsm_now_ms();
        size_t got = 0;
        uint8_t reply[16];
        dsm_status_t st = dsm_fabric_am_request(dsm_node_fabric(g.c.nodes[0]), 1, one_way[i], garbage,
                                                sizeof garbage, reply, sizeof reply, &got, 30000);
        assert_int_equal(st, DSM_ERR_PROTO);
        assert_true(dsm_now_ms() - t0 < 20000);   /* an answer, not the op timeout (30 s) */
    }
    void *args[2] = {NULL, &x};
    gcl_run(&g, bad_main, args);
    assert_true(x.done);
    assert_int_equal(x.unknown_fn, DSM_ERR_NO_HANDLER);
    assert_int_equal(x.bad_handle, DSM_ERR_BAD_ADDR);
    assert_int_equal(x.not_latch, DSM_ERR_INVALID);
    assert_int_equal(x.after, DSM_OK);
    /* the injected batch: its good request ran (5), then this client's 1 */
    assert_int_equal(counter, 6);
    assert_true(x.after_value == 1 || x.after_value == 6);
    /* its responses, in node 1's response square: OK, then refusals */
    dsm_deleg_remote_t *R1 = dsm_module_state(g.c.nodes[1], &dsm_deleg_module);
    const uint8_t *rb = R1->base + rsq_resp_off(R1, 1, 0, 0, 1);
    rslot_view_t v;
    assert_int_equal(dsm_rslot_decode(rb, RSLOT_SIZE, &v), DSM_OK);
    assert_int_equal(v.seq, 1);
    assert_int_equal(v.count, 3);
    assert_int_equal(v.flags, 0); /* nothing came by message: decoded in one pass */
    /* RSLOT_SPILLS marks a response batch; it never goes with LARGE */
    uint8_t blk[RSLOT_SIZE] = {0};
    dsm_rslot_trailer_encode(blk + RSLOT_PAYLOAD, RSLOT_PAYLOAD - 8, 1, NULL, 0, RSLOT_SPILLS, 0);
    assert_int_equal(dsm_rslot_decode(blk, RSLOT_SIZE, &v), DSM_OK);
    assert_int_equal(v.flags, RSLOT_SPILLS);
    dsm_rslot_trailer_encode(blk + RSLOT_PAYLOAD, RSLOT_PAYLOAD, 1, NULL, 0, RSLOT_SPILLS | RSLOT_LARGE, 8);
    assert_int_equal(dsm_rslot_decode(blk, RSLOT_SIZE, &v), DSM_ERR_PROTO);
    dsm_rslot_trailer_encode(blk + RSLOT_PAYLOAD, RSLOT_PAYLOAD - 8, 1, NULL, 0, 8, 0);
    assert_int_equal(dsm_rslot_decode(blk, RSLOT_SIZE, &v), DSM_ERR_PROTO);
    assert_int_equal(dsm_rslot_decode(rb, RSLOT_SIZE, &v), DSM_OK);
    const uint8_t *p = rb + v.offset;
    dsm_status_t want[3] = {DSM_OK, DSM_ERR_PROTO, DSM_ERR_PROTO};
    for (int i = 0; i < 3; i++) {
        rresp_t r;
        size_t used;
        assert_int_equal(dsm_rresp_decode(p, (size_t)(rb + RSLOT_PAYLOAD - p), &r, &used), DSM_OK);
        assert_int_equal(r.status, want[i]);
        p += used;
    }
    drops_t d[2] = {{2, {&add_own, &plain_own}}, {2, {&x.add, &x.plain}}};
    gcl_drop(&g, d);
    gcl_stop(&g);
}

/* The writer's run travels in both one-way headers; a large message's
 * spare word must be zero. */
static void test_run_in_headers(void **state)
{
    (void)state;
    uint8_t put[RPUT_HDR + RSLOT_META] = {0};
    dsm_rput_encode_hdr(put, 3 * RSLOT_SIZE, RSLOT_META, 0x01020304u, 9);
    rput_t w;
    assert_int_equal(dsm_rput_decode(put, sizeof put, &w), DSM_OK);
    assert_int_equal(w.run, 0x01020304u);
    assert_int_equal(w.seq, 9);
    assert_int_equal(w.block_off, 3 * RSLOT_SIZE);
    uint8_t large[RLARGE_HDR + 8] = {0};
    dsm_rlarge_encode_hdr(large, 1, 1, 0, 2, 0x0a0b0c0du, 5);
    rlarge_t l;
    assert_int_equal(dsm_rlarge_decode(large, sizeof large, &l), DSM_OK);
    assert_int_equal(l.run, 0x0a0b0c0du);
    assert_int_equal(l.seq, 5);
    assert_int_equal(l.index, 2);
    assert_int_equal(l.len, 8);
    large[RLARGE_HDR - 1] = 1;
    assert_int_equal(dsm_rlarge_decode(large, sizeof large, &l), DSM_ERR_PROTO);
}

/* ---- launch, clone and drop across nodes ----------------------------------- */

typedef struct rc_ctx {
    dsm_deleg_trust_t latch;  /* node 0 thread 1, a latch */
    dsm_deleg_trust_t obj;    /* node 0 thread 0, counted drops */
    uint64_t launch_sum;
    int launches_back;
    int failures;
} rc_ctx_t;

static int dtor_calls;
static void count_dtor(void *p)
{
    free(p);
    __atomic_fetch_add(&dtor_calls, 1, __ATOMIC_RELAXED);
}

static void launch_back(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    rc_ctx_t *x = arg;
    uint64_t v = 0;
    if (st != DSM_OK || len != 8) x->failures++;
    else memcpy(&v, ret, 8);
    x->launch_sum += v;
    x->launches_back++;
}

static void rc_main(void *arg, unsigned worker)
{
    rc_ctx_t *x = arg;
    if (!x) return;
    if (worker == 0) {
        /* launches: the closures yield while they hold the latch */
        for (int i = 0; i < 5; i++)
            assert_int_equal(dsm_deleg_launch_then(&x->latch, t_slow_inc, NULL, 0, NULL, 0, launch_back, x), DSM_OK);
        uint64_t v = 0;
        size_t len = 0;
        assert_int_equal(dsm_deleg_launch(&x->latch, t_slow_inc, NULL, 0, NULL, 0, &v, 8, &len), DSM_OK);
        assert_int_equal(len, 8);
        while (x->launches_back < 5) dsm_deleg_yield();
        x->launch_sum += v;
    } else {
        /* weight 4 split by export: clones exhaust it and refill remotely */
        dsm_deleg_trust_t c[6];
        c[0] = x->obj;
        for (int i = 1; i < 6; i++) assert_int_equal(dsm_deleg_trust_clone(&c[i - 1], &c[i]), DSM_OK);
        for (int i = 0; i < 6; i++) {
            uint64_t one = 1, back = 0;
            if (dsm_deleg_apply(&c[i], t_add, &one, 8, &back, 8, NULL) != DSM_OK) x->failures++;
            assert_int_equal(dsm_deleg_trust_drop(&c[i]), DSM_OK);
        }
    }
}

static void owner_main(void *arg, unsigned worker)
{
    dsm_deleg_trust_t *own = arg;
    if (own && worker == 0) assert_int_equal(dsm_deleg_trust_drop(own), DSM_OK);
}

static void test_launch_refcount(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    gcl_t g;
    assert_int_equal(gcl_start(&g, tr, 2, 4), DSM_OK);
    uint64_t latched = 0, *obj = calloc(1, 8);
    dsm_deleg_trust_t latch_own, obj_own;
    assert_int_equal(dsm_deleg_entrust(g.rt[0], 1, &latched, NULL, 1, &latch_own), DSM_OK);
    assert_int_equal(dsm_deleg_entrust(g.rt[0], 0, obj, count_dtor, 0, &obj_own), DSM_OK);
    rc_ctx_t x = {0};
    x.latch = share(&g, &latch_own, 1);
    x.obj = share(&g, &obj_own, 1);
    uint8_t wire[DSM_DELEG_TRUST_WIRE];
    dtor_calls = 0;
    void *args[2] = {NULL, &x};
    gcl_run(&g, rc_main, args);
    assert_int_equal(x.failures, 0);
    /* 6 launches, each +1 under the latch: 1+2+...+6 in some order of returns */
    assert_int_equal(latched, 6);
    assert_int_equal(x.launch_sum, 21);
    assert_int_equal(*obj, 6); /* still alive: node 0 holds a share */
    assert_int_equal(dtor_calls, 0); /* node 0 still holds its share */
    /* export once more while alive, then drop the owner's share in a run */
    assert_int_equal(dsm_deleg_trust_export(&obj_own, wire, sizeof wire), DSM_OK);
    dsm_deleg_trust_t back;
    assert_int_equal(dsm_deleg_trust_import(g.rt[0], wire, sizeof wire, &back), DSM_OK);
    assert_int_equal(dsm_deleg_trust_node(&back), -1); /* imported at home: local */
    void *args2[2] = {&back, NULL};
    gcl_run(&g, owner_main, args2);
    assert_int_equal(dtor_calls, 0);
    void *args3[2] = {&obj_own, NULL};
    gcl_run(&g, owner_main, args3);
    assert_int_equal(dtor_calls, 1);
    /* its handle is gone: importing it again is refused */
    assert_int_equal(dsm_deleg_trust_import(g.rt[0], wire, sizeof wire, &back), DSM_ERR_BAD_ADDR);
    drops_t d[2] = {{1, {&latch_own}}, {1, {&x.latch}}};
    gcl_drop(&g, d);
    gcl_stop(&g);
}

/* ---- over tcp the runtime threads poll their node's worker ---------------------- */

enum { POLL_REQUESTS = 1000, STALL_MS = 300 };

typedef struct poll_ctx {
    dsm_deleg_trust_t echo; /* node 1 thread 0's, used from node 0 */
    int fails;
} poll_ctx_t;

/* One request at a time: each one's slot write and response are messages. */
static void poll_main(void *arg, unsigned worker)
{
    poll_ctx_t *x = arg;
    if (!x || worker != 0) return;
    for (uint64_t i = 0; i < POLL_REQUESTS; i++) {
        uint64_t back = ~i;
        if (dsm_deleg_apply_with(&x->echo, t_echo, NULL, 0, &i, 8, &back, 8, NULL) != DSM_OK || back != i) x->fails++;
    }
}

static uint64_t wakeups(gcl_t *g)
{
    uint64_t n = 0;
    for (int i = 0; i < g->c.n; i++) {
        dsm_stats_t s;
        dsm_fabric_stats(dsm_node_fabric(g->c.nodes[i]), &s);
        n += s.progress_wakeups;
    }
    return n;
}

/* Every runtime thread without a poll for STALL_MS: on node 1 (arg
 * non-NULL) thread 0 busy, the others asleep, so that the progress threads
 * and the test have the other core (spinning threads on both cores starve a
 * woken thread for as long as they spin). */
static unsigned stalled_on_node1;   /* node 1's threads that have begun their stall */

static void stall_main(void *arg, unsigned worker)
{
    if (arg)
        __atomic_fetch_add(&stalled_on_node1, 1, __ATOMIC_SEQ_CST);
    uint64_t until = dsm_now_ns() + STALL_MS * 1000000ull, now;
    while ((now = dsm_now_ns()) < until) {
        if (!arg || worker != 0) {
            struct timespec ts = {0, (long)(until - now)}; /* again if a signal cut it short */
            nanosleep(&ts, NULL);
        }
    }
}

static void ping_handler(void *ctx, const dsm_am_msg_t *msg)
{
    (void)dsm_fabric_am_reply(ctx, msg->src_rank, msg->request_id, DSM_OK, msg->data, msg->len);
}

/* The runtime threads stand in for the progress threads while they poll: a
 * thousand requests one at a time wake a progress thread (four hand-offs
 * each otherwise) hardly at all. And while every thread of a node is busy
 * in a long function, the progress thread takes over again: a message to
 * the node is answered long before the threads poll again. */
static void test_runtime_polls(void **state)
{
    (void)state;
    gcl_t g;
    assert_int_equal(gcl_start(&g, DSM_TRANSPORT_TCP, 2, 0), DSM_OK);
    counter_t unused = {0};
    dsm_deleg_trust_t echo_own;
    assert_int_equal(dsm_deleg_entrust(g.rt[1], 0, &unused, NULL, 0, &echo_own), DSM_OK);
    poll_ctx_t x = {.echo = share(&g, &echo_own, 0)};
    void *args[2] = {&x, NULL};
    /* Without the polling 2,840-3,010 wake-ups (about 3 per request); with
     * it 5-50 on an idle machine, 90-830 beside two busy loops on 2 cores.
     * Beside other sanitized tests one run took 2,160: a descheduled poller
     * hands its node to the progress thread by design. So the best of up to
     * three runs must show the stand-in (without it, every run fails). */
    uint64_t woke = UINT64_MAX;
    for (int run = 0; run < 3 && woke >= POLL_REQUESTS; run++) {
        uint64_t before = wakeups(&g);
        gcl_run(&g, poll_main, args);
        woke = wakeups(&g) - before;
        print_message("%d requests one at a time: %llu progress-thread wake-ups\n", POLL_REQUESTS,
                      (unsigned long long)woke);
        assert_int_equal(x.fails, 0);
    }
    assert_true(woke < POLL_REQUESTS);

    dsm_fabric_t *f1 = dsm_node_fabric(g.c.nodes[1]);
    assert_int_equal(dsm_fabric_am_register(f1, DSM_AM_USER_FIRST, ping_handler, f1), DSM_OK);
    assert_int_equal(dsm_deleg_rt_start(g.rt[0], stall_main, NULL), DSM_OK);
    __atomic_store_n(&stalled_on_node1, 0, __ATOMIC_SEQ_CST);
    assert_int_equal(dsm_deleg_rt_start(g.rt[1], stall_main, &g), DSM_OK);
    /* send once every thread of node 1 is in its stall; threads that start
     * late on a loaded host only shorten it, which makes the check easier
     * to pass, never a false failure */
    uint64_t started_by = dsm_deadline_ns(60000);   /* a thread start, however loaded the host */
    while (__atomic_load_n(&stalled_on_node1, __ATOMIC_SEQ_CST) < dsm_deleg_rt_threads(g.rt[1]) &&
           dsm_now_ns() < started_by)
        sched_yield();
    assert_int_equal(__atomic_load_n(&stalled_on_node1, __ATOMIC_SEQ_CST), dsm_deleg_rt_threads(g.rt[1]));
    uint64_t ping = 7, pong = 0, t0 = dsm_now_ns();
    size_t len = 0;
    assert_int_equal(dsm_fabric_am_request(dsm_node_fabric(g.c.nodes[0]), 1, DSM_AM_USER_FIRST, &ping, 8, &pong,
                                           8, &len, 0),
                     DSM_OK);
    double ms = (double)(dsm_now_ns() - t0) / 1e6;
    print_message("a message to a node whose threads are all busy for %d ms: answered in %.1f ms\n", STALL_MS, ms);
    assert_int_equal(pong, 7);
    assert_true(ms < STALL_MS / 2);
    for (int i = 0; i < 2; i++) assert_int_equal(dsm_deleg_rt_join(g.rt[i]), DSM_OK);
    assert_int_equal(dsm_fabric_am_register(f1, DSM_AM_USER_FIRST, NULL, NULL), DSM_OK);
    drops_t d[2] = {{1, {&x.echo}}, {1, {&echo_own}}};
    gcl_drop(&g, d);
    gcl_stop(&g);
}

/* An attach that fails partway (test switch: thread 1's remote state cannot
 * be made) leaves the runtime as it was: no remote half and no thread
 * state, seen as attach returns, before the node is torn down. The same
 * runtime then attaches to a node and runs. */
typedef struct failing_attach {
    dsm_deleg_rt_t *rt;
    dsm_status_t st;
    int remote_left, states_left;
} failing_attach_t;

static dsm_status_t attach_and_look(void *ctx, int i, dsm_node_t *node)
{
    (void)i;
    failing_attach_t *a = ctx;
    a->st = dsm_deleg_attach(node, a->rt);
    a->remote_left = a->rt->remote != NULL;
    for (unsigned k = 0; k < dsm_deleg_rt_threads(a->rt); k++) a->states_left += a->rt->th[k].remote != NULL;
    return a->st;
}

static void noop_main(void *arg, unsigned worker) { (void)arg, (void)worker; }

static void test_attach_all_or_nothing(void **state)
{
    (void)state;
    dsm_deleg_config_t dc = {.threads = T};
    failing_attach_t a = {0};
    assert_int_equal(dsm_deleg_rt_create(&dc, &a.rt), DSM_OK);
    dsm_harness_t c = {.transport = DSM_TRANSPORT_SHM, .partition_size = DSM_HARNESS_NO_PARTITION,
                       .attach = attach_and_look, .ctx = &a};
    dsm_deleg_thread_init_fail_at = 1;
    assert_int_equal(dsm_harness_start(&c, 1), DSM_ERR_NOMEM);
    dsm_deleg_thread_init_fail_at = UINT_MAX;
    dsm_harness_stop(&c);
    assert_int_equal(a.st, DSM_ERR_NOMEM);
    assert_int_equal(a.remote_left, 0);
    assert_int_equal(a.states_left, 0);
    a = (failing_attach_t){.rt = a.rt};
    assert_int_equal(dsm_harness_start(&c, 1), DSM_OK);
    assert_int_equal(a.st, DSM_OK);
    assert_int_equal(a.states_left, T);
    assert_int_equal(dsm_deleg_rt_run(a.rt, noop_main, NULL), DSM_OK);
    dsm_deleg_rt_destroy(a.rt);
    dsm_harness_stop(&c);
}

int main(void)
{
    void *shm = (void *)(uintptr_t)DSM_TRANSPORT_SHM, *tcp = (void *)(uintptr_t)DSM_TRANSPORT_TCP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_stress, shm),
        cmocka_unit_test_prestate(test_stress, tcp),
        cmocka_unit_test_prestate(test_edges, shm),
        cmocka_unit_test_prestate(test_edges, tcp),
        cmocka_unit_test_prestate(test_bad_input, shm),
        cmocka_unit_test_prestate(test_bad_input, tcp),
        cmocka_unit_test_prestate(test_launch_refcount, shm),
        cmocka_unit_test_prestate(test_launch_refcount, tcp),
        cmocka_unit_test(test_run_in_headers),
        cmocka_unit_test(test_runtime_polls),
        cmocka_unit_test(test_attach_all_or_nothing),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
