/* Fate sharing of a delegation application across nodes, over shm and tcp:
 * three nodes run; one of them crashes mid-run (its runtime's threads stop
 * where they are and its node goes away) while the others have requests to
 * its trustee in flight. The others' runs end, reporting the dead node and
 * the trust left unanswered (dsm_deleg_rt_join gives DSM_ERR_PEER_DEAD,
 * dsm_deleg_rt_loss says which node, trustee and property) instead of
 * hanging; their nodes stay usable; a runtime that lost a node refuses to
 * run again until recovered. Then the next run on the same cluster works:
 * the survivors recover, a new node joins in the dead one's place, and an
 * application across the three counts every request exactly once. And a
 * termination probe that reaches a survivor in the middle of its recover
 * (held there by a test hook) gets sane counts. And a slot write or large
 * message of the lost run that arrives after a recover is dropped. */
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
    /* As if each free rank had been a live peer at an earlier recover: a new
     * node that takes one counts its runs from zero, so what the survivors
     * took as late from that rank must start again at its join. */
    for (int i = 0; i < 2; i++)
        for (uint32_t r = 0; r < RMAX_NODES; r++)
            if (r != rt[i]->remote->self && !atomic_load(&rt[i]->remote->peer_ok[r]))
                atomic_store(&rt[i]->remote->fresh_from[r], 7);
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
    for (int i = 0; i < 2; i++)
        assert_int_equal(atomic_load(&rt[i]->remote->fresh_from[dsm_node_rank(c.nodes[3])]), 0);
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

/* A run of nodes 0 and 1 after a loss: each worker adds 1 to the other
 * node's counter 2K times (two trusts on it), every count exact. The
 * counters, for the caller to free. */
static uint64_t *pair_run(dsm_deleg_rt_t **rt)
{
    uint64_t *next = calloc(2, 8);
    dsm_deleg_trust_t nm[2];
    for (int i = 0; i < 2; i++) assert_int_equal(dsm_deleg_entrust(rt[i], 1, &next[i], NULL, 0, &nm[i]), DSM_OK);
    next_ctx_t nx[2];
    memset(nx, 0, sizeof nx);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) nx[i].to[j] = share(rt[i], &nm[1 - i]);
    for (int i = 0; i < 2; i++) assert_int_equal(dsm_deleg_rt_start(rt[i], next_main, &nx[i]), DSM_OK);
    for (int i = 0; i < 2; i++) assert_int_equal(dsm_deleg_rt_join(rt[i]), DSM_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(atomic_load(&nx[i].bad), 0);
        assert_int_equal(next[i], 2 * T * K);
    }
    return next;
}

/* ---- a probe in the middle of recover ------------------------------------- */

/* rank's answer to a termination probe sent by node `from`'s fabric. */
static rterm_t probe_from(dsm_node_t *from, uint32_t rank)
{
    uint8_t reply[RTERM_LEN];
    size_t len = 0;
    rterm_t t;
    assert_int_equal(dsm_fabric_am_request(dsm_node_fabric(from), rank, DSM_AM_DELEG_TERM, NULL, 0, reply,
                                           sizeof reply, &len, 0),
                     DSM_OK);
    assert_int_equal(dsm_rterm_decode(reply, len, &t), DSM_OK);
    return t;
}

/* The recover hook: with recover held after thread i's reset, a peer's
 * probe of the recovering node, answered by that node's progress thread. */
static struct {
    dsm_node_t *from;
    uint32_t rank;
    unsigned calls;
    rterm_t mid[T];
} mid_reset;

static void probe_mid_reset(dsm_deleg_rt_t *rt, unsigned i)
{
    (void)rt;
    if (i < T) mid_reset.mid[i] = probe_from(mid_reset.from, mid_reset.rank);
    mid_reset.calls++;
}

/* Three nodes: a run across them with exact counts, then a run in which
 * node 2 crashes. Node 1 probes node 0 while node 0's recover is held in
 * the middle of resetting its threads' remote states: the answer is the
 * lost run's counts or zero (no freed memory read, no count taken below
 * zero), and the next run of nodes 0 and 1 counts every request exactly
 * once, in the properties and in the probes. */
static void test_recover_probed(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    dsm_harness_t c = {.transport = tr};
    dsm_deleg_rt_t *rt[N];
    dsm_deleg_config_t dc = {.threads = T};
    assert_int_equal(test_deleg_cluster_start(&c, N, &dc, rt), DSM_OK);
    uint32_t r0 = dsm_node_rank(c.nodes[0]), r1 = dsm_node_rank(c.nodes[1]);
    /* run 1: every worker adds 1 to both other nodes' counters K times, so
     * the next run's start counts something on every node */
    uint64_t *first = calloc(N, 8);
    dsm_deleg_trust_t mine[N];
    for (int i = 0; i < N; i++) assert_int_equal(dsm_deleg_entrust(rt[i], 1, &first[i], NULL, 0, &mine[i]), DSM_OK);
    next_ctx_t nx[N];
    memset(nx, 0, sizeof nx);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 2; j++) nx[i].to[j] = share(rt[i], &mine[(i + 1 + j) % N]);
    for (int i = 0; i < N; i++) assert_int_equal(dsm_deleg_rt_start(rt[i], next_main, &nx[i]), DSM_OK);
    for (int i = 0; i < N; i++) assert_int_equal(dsm_deleg_rt_join(rt[i]), DSM_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&nx[i].bad), 0);
        assert_int_equal(first[i], 2 * T * K);
    }
    rterm_t t = probe_from(c.nodes[1], r0);
    assert_int_equal(t.sent, 2 * T * K);
    assert_int_equal(t.served, 2 * T * K);
    /* run 2: node 2 crashes with requests of nodes 0 and 1 to it in flight */
    uint64_t *props = calloc(N, 8);
    dsm_deleg_trust_t own[N];
    for (int i = 0; i < N; i++) assert_int_equal(dsm_deleg_entrust(rt[i], 0, &props[i], NULL, 0, &own[i]), DSM_OK);
    node_ctx_t x[N];
    crash_run(&c, rt, own, x);
    dsm_deleg_rt_destroy(rt[2]);
    rterm_t pre = probe_from(c.nodes[1], r0);
    assert_int_equal(pre.phase, RPHASE_FINISHED);
    assert_int_equal(pre.lost, 2 + 1);
    assert_true(pre.sent > 0 && pre.sent < UINT32_MAX && pre.served < UINT32_MAX);
    rthread_t *before[T];
    for (unsigned i = 0; i < T; i++) before[i] = rt[0]->th[i].remote;
    memset(&mid_reset, 0, sizeof mid_reset);
    mid_reset.from = c.nodes[1];
    mid_reset.rank = r0;
    dsm_deleg_recover_hook = probe_mid_reset;
    dsm_status_t rs = dsm_deleg_rt_recover(rt[0], 10000);
    dsm_deleg_recover_hook = NULL;
    assert_int_equal(rs, DSM_OK);
    assert_int_equal(mid_reset.calls, T);
    for (unsigned i = 0; i < T; i++) {
        rterm_t *m = &mid_reset.mid[i];
        /* the lost run's counts, or zero for both: never a mix, never wild */
        int sane = (m->sent == pre.sent && m->served == pre.served) || (m->sent == 0 && m->served == 0);
        if (!sane)
            print_message("probe after thread %u's reset: sent %llu served %llu (before recover: %llu %llu)\n", i,
                          (unsigned long long)m->sent, (unsigned long long)m->served,
                          (unsigned long long)pre.sent, (unsigned long long)pre.served);
        assert_true(sane);
        assert_int_equal(m->runs, pre.runs);
        assert_int_equal(m->phase, RPHASE_FINISHED);
        /* reset where they were: nothing a probe reads was freed */
        assert_ptr_equal(rt[0]->th[i].remote, before[i]);
        rpair_t *p = &rt[0]->th[i].remote->out[2 * T + 0];
        assert_int_equal(p->done.head, 0);
        assert_int_equal(p->done.tail, 0);
        assert_int_equal(p->seq_pub, 0);
    }
    t = probe_from(c.nodes[1], r0);
    assert_int_equal(t.sent, 0);
    assert_int_equal(t.served, 0);
    assert_int_equal(t.lost, 0);
    assert_int_equal(dsm_deleg_rt_recover(rt[1], 10000), DSM_OK);
    /* run 3, nodes 0 and 1 */
    uint64_t *next = pair_run(rt);
    for (int i = 0; i < 2; i++) {
        t = probe_from(c.nodes[1 - i], i == 0 ? r0 : r1);
        assert_int_equal(t.phase, RPHASE_FINISHED);
        assert_int_equal(t.lost, 0);
        assert_int_equal(t.sent, 2 * T * K);
        assert_int_equal(t.served, 2 * T * K);
    }
    for (int i = 0; i < 2; i++) dsm_deleg_rt_destroy(rt[i]);
    dsm_node_destroy(c.nodes[0]);
    dsm_node_destroy(c.nodes[1]);
    dsm_coord_stop(c.coord);
    free(next);
    free(props);
    free(first);
}

/* ---- a late write of the lost run ---------------------------------------- */

/* Over tcp a slot write is a message on the writer's lane, so one sent just
 * before a peer stopped can arrive after the recovering node has probed the
 * peer and cleared its area; the next run's sequence numbers restart, so the
 * late batch would look like the next run's first. Such a write (and a
 * large message of the lost run) is dropped with an answer of
 * DSM_ERR_STATE, the area and inbox stay clear, and the next run counts
 * exactly. */
static void test_late_write_dropped(void **state)
{
    dsm_transport_t tr = (dsm_transport_t)(uintptr_t)*state;
    dsm_harness_t c = {.transport = tr};
    dsm_deleg_rt_t *rt[N];
    dsm_deleg_config_t dc = {.threads = T};
    assert_int_equal(test_deleg_cluster_start(&c, N, &dc, rt), DSM_OK);
    uint32_t r0 = dsm_node_rank(c.nodes[0]), r1 = dsm_node_rank(c.nodes[1]);
    uint64_t *props = calloc(N, 8);
    dsm_deleg_trust_t own[N];
    for (int i = 0; i < N; i++) assert_int_equal(dsm_deleg_entrust(rt[i], 0, &props[i], NULL, 0, &own[i]), DSM_OK);
    node_ctx_t x[N];
    crash_run(&c, rt, own, x);
    dsm_deleg_rt_destroy(rt[2]);
    uint32_t lost_run = (uint32_t)rt[1]->remote->runs;
    assert_int_equal(dsm_deleg_rt_recover(rt[0], 10000), DSM_OK);
    assert_int_equal(dsm_deleg_rt_recover(rt[1], 10000), DSM_OK);

    /* node 1's batch for trustee 0 of node 0, from its client 0, as its
     * thread would have written it in the lost run */
    dsm_deleg_remote_t *R0 = rt[0]->remote;
    size_t block_off = rsq_req_off(R0, 0, r1, 0, 0);
    uint8_t put[RPUT_HDR + RSLOT_META];
    memset(put, 0xab, sizeof put);
    dsm_rput_encode_hdr(put, (uint32_t)block_off, RSLOT_META, lost_run, 1);
    dsm_fabric_t *f1 = dsm_node_fabric(c.nodes[1]);
    size_t len = 0;
    /* generous: the answer is immediate; 10 s covers a loaded 2-core host */
    assert_int_equal(dsm_fabric_am_request(f1, r0, DSM_AM_DELEG_PUT, put, sizeof put, NULL, 0, &len, 10000),
                     DSM_ERR_STATE);
    uint8_t large[RLARGE_HDR + RREQ_LONG_HDR];
    memset(large, 0, sizeof large);
    dsm_rlarge_encode_hdr(large, 0, 0, 0, 0, lost_run, 1);
    assert_int_equal(dsm_fabric_am_request(f1, r0, DSM_AM_DELEG_LARGE, large, sizeof large, NULL, 0, &len, 10000),
                     DSM_ERR_STATE);
    assert_int_equal(atomic_load(&R0->stale_dropped), 2);
    for (size_t i = 0; i < RSLOT_SIZE; i++) assert_int_equal(R0->base[block_off + i], 0);
    assert_null(R0->inbox);

    /* the next run of nodes 0 and 1: its writes are taken */
    uint64_t *next = pair_run(rt);
    assert_int_equal(atomic_load(&R0->stale_dropped), 2);
    for (int i = 0; i < 2; i++) dsm_deleg_rt_destroy(rt[i]);
    dsm_node_destroy(c.nodes[0]);
    dsm_node_destroy(c.nodes[1]);
    dsm_coord_stop(c.coord);
    free(next);
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
        cmocka_unit_test_prestate(test_recover_probed, (void *)(uintptr_t)DSM_TRANSPORT_SHM),
        cmocka_unit_test_prestate(test_recover_probed, (void *)(uintptr_t)DSM_TRANSPORT_TCP),
        cmocka_unit_test_prestate(test_late_write_dropped, (void *)(uintptr_t)DSM_TRANSPORT_TCP),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
