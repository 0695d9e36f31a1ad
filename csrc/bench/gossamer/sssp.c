/* dsm-bench-gossamer: SSSP across nodes (thesis §3.3.3). The same
 * label-correcting algorithm three ways, on the same Kronecker graph:
 *   - delegated (apps/sssp.c): a relaxation is a closure on the partition
 *     that owns its vertex, apply_then from inside the closure, Gossamer's
 *     slots carry them between nodes in batches;
 *   - naive RPC: a relaxation for another node is one active message
 *     (12 bytes) to it; its handler queues it for the node's worker thread,
 *     which relaxes and sends on; the run ends when no relaxation is in
 *     flight (a counter this one-process benchmark can share);
 *   - single process: Dijkstra (the reference the two must match, checked).
 * The first two run one partition's side of the algorithm alike
 * (dsm_sssp_relax): only how a relaxation reaches another node differs.
 * Figures: sssp_vs_naive_rpc/<tr> (seconds, delegated against naive) and
 * sssp_vs_single/<tr> (delegated against Dijkstra on one thread), medians
 * of repetitions in alternating order after an untimed run of each, each
 * repetition in the JSON; the load average beside them, as the delegated
 * run's trustees spin and are the side a busy host slows. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/sssp.h"
#include "dsm/fabric.h"
#include "dsm/runtime.h"
#include "bench/gossamer/gossamer.h"
#include "util/clock.h"

enum { H_RELAX = DSM_AM_USER_FIRST + 1, NODES = 2 };

typedef dsm_sssp_relaxation_t relax_msg_t;   /* an H_RELAX message's body */

/* ---- the naive RPC run ---------------------------------------------------------- */

typedef struct nnode {
    pthread_mutex_t lock;
    relax_msg_t *q;   /* relaxations queued for this node */
    size_t len, cap;
    dsm_sssp_local_t local;   /* the node's partition, as the delegated run's */
    dsm_fabric_t *f;
    unsigned rank;
    pthread_t thread;
    dsm_status_t err;
} nnode_t;

static struct {
    nnode_t node[NODES];
    _Atomic uint64_t inflight; /* relaxations sent or queued and not yet done */
} nv;

static int push(nnode_t *n, const relax_msg_t *m)
{
    pthread_mutex_lock(&n->lock);
    if (n->len == n->cap) {
        size_t cap = n->cap ? 2 * n->cap : 4096;
        relax_msg_t *q = realloc(n->q, cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&n->lock);
            return -1;
        }
        n->q = q;
        n->cap = cap;
    }
    n->q[n->len++] = *m;
    pthread_mutex_unlock(&n->lock);
    return 0;
}

static void relax_handler(void *ctx, const dsm_am_msg_t *msg)
{
    nnode_t *n = ctx;
    relax_msg_t m;
    if (msg->len != sizeof m) {
        n->err = DSM_ERR_PROTO;
        return;
    }
    memcpy(&m, msg->data, sizeof m);
    if (push(n, &m) != 0) n->err = DSM_ERR_NOMEM;
}

static dsm_status_t naive_send(void *ctx, uint32_t owner, uint32_t v, uint64_t d)
{
    nnode_t *n = ctx;
    relax_msg_t out = {.v = v, .d = d};
    atomic_fetch_add(&nv.inflight, 1);
    dsm_status_t st = dsm_fabric_am_send(n->f, owner, H_RELAX, &out, sizeof out);
    if (st != DSM_OK) atomic_fetch_sub(&nv.inflight, 1);   /* lost: the run ends, failed */
    return st;
}

static void *naive_worker(void *arg)
{
    nnode_t *n = arg;
    relax_msg_t *batch = NULL;
    size_t bcap = 0;
    unsigned idle = 0;
    while (atomic_load(&nv.inflight) > 0 && n->err == DSM_OK) {
        pthread_mutex_lock(&n->lock);
        relax_msg_t *q = n->q;
        size_t len = n->len, cap = n->cap;
        n->q = batch;
        n->cap = bcap;
        n->len = 0;
        pthread_mutex_unlock(&n->lock);
        batch = q;
        bcap = cap;
        if (len == 0) {
            if (++idle > 64) sched_yield();
            continue;
        }
        idle = 0;
        for (size_t i = 0; i < len; i++) {
            dsm_status_t st = dsm_sssp_relax(&n->local, batch[i].v, batch[i].d, naive_send, n);
            if (st != DSM_OK) n->err = st;
            atomic_fetch_sub(&nv.inflight, 1);
        }
    }
    free(batch);
    return NULL;
}

/* One naive run from src on c (handlers registered); seconds. */
static double naive_run(gossamer_cluster_t *c, const dsm_sssp_graph_t *g, uint32_t src, uint64_t *dist,
                        uint64_t *relaxations)
{
    for (unsigned i = 0; i < NODES; i++) {
        nnode_t *n = &nv.node[i];
        n->len = 0;
        n->err = DSM_OK;
        dsm_sssp_local_reset(&n->local);
    }
    relax_msg_t first = {.v = src, .d = 0};
    atomic_store(&nv.inflight, 1);
    push(&nv.node[dsm_sssp_part_of(src, NODES)], &first);
    uint64_t t0 = dsm_now_ns();
    for (unsigned i = 0; i < NODES; i++)
        if (pthread_create(&nv.node[i].thread, NULL, naive_worker, &nv.node[i]) != 0)
            gossamer_die("naive worker", DSM_ERR_NOMEM);
    for (unsigned i = 0; i < NODES; i++) pthread_join(nv.node[i].thread, NULL);
    double secs = (double)(dsm_now_ns() - t0) / 1e9;
    for (unsigned i = 0; i < NODES; i++)
        if (nv.node[i].err != DSM_OK) gossamer_die("naive sssp", nv.node[i].err);
    (void)c;
    *relaxations = 0;
    for (unsigned i = 0; i < NODES; i++) *relaxations += nv.node[i].local.relaxations;
    for (uint32_t v = 0; v < g->n; v++) dist[v] = nv.node[dsm_sssp_part_of(v, NODES)].local.dist[v / NODES];
    return secs;
}

/* ---- figures ------------------------------------------------------------------------ */

static void check(const char *what, const uint64_t *got, const uint64_t *want, uint32_t n)
{
    for (uint32_t v = 0; v < n; v++)
        if (got[v] != want[v]) {
            fprintf(stderr, "dsm-bench-gossamer: %s: vertex %u at %llu, Dijkstra says %llu\n", what, v,
                    (unsigned long long)got[v], (unsigned long long)want[v]);
            exit(1);
        }
}

void gossamer_sssp(dsm_report_t *rep, dsm_transport_t tr, unsigned scale, int reps)
{
    const char *tn = dsm_transport_name(tr);
    dsm_sssp_graph_t g;
    dsm_status_t st = dsm_sssp_kronecker(scale, 16, 1, &g);
    if (st != DSM_OK) gossamer_die("kronecker graph", st);
    uint32_t src = dsm_sssp_source(&g);
    uint64_t *want = malloc(g.n * sizeof *want), *got = malloc(g.n * sizeof *got);
    if (!want || !got) gossamer_die("distances", DSM_ERR_NOMEM);

    gossamer_cluster_t gc, nc;
    gossamer_cluster_start(&gc, tr, NODES, 0, 1);
    dsm_sssp_t *s;
    if ((st = dsm_sssp_create(&g, gc.rt, NODES, 0, 0, &s)) != DSM_OK) gossamer_die("sssp create", st);
    gossamer_cluster_start(&nc, tr, NODES, 0, 0);
    for (unsigned i = 0; i < NODES; i++) {
        nnode_t *n = &nv.node[i];
        pthread_mutex_init(&n->lock, NULL);
        n->q = NULL;
        n->cap = 0;
        n->rank = i;
        n->f = dsm_node_fabric(nc.k.nodes[i]);
        if ((st = dsm_sssp_local_init(&n->local, &g, i, NODES)) != DSM_OK) gossamer_die("naive partition", st);
        if ((st = dsm_fabric_am_register(n->f, H_RELAX, relax_handler, n)) != DSM_OK)
            gossamer_die("naive handler", st);
    }

    dsm_stats_t before[NODES], after[NODES];
    double ts[DSM_FIGURE_MAX_REPS], tn_[DSM_FIGURE_MAX_REPS], t1[DSM_FIGURE_MAX_REPS];
    uint64_t relax_d = 0, relax_n = 0;
    /* One untimed run of each side first: a cluster's first run pays for
     * its cold state (connections and slots first used, pages first
     * touched), up to 3x a later one's time over tcp; the repetitions
     * compare the two in steady state. */
    if ((st = dsm_sssp_run(s, src, NULL, &relax_d)) != DSM_OK) gossamer_die("delegated sssp (warm-up)", st);
    (void)naive_run(&nc, &g, src, got, &relax_n);
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = dsm_now_ns();
        if ((st = dsm_sssp_dijkstra(&g, src, want)) != DSM_OK) gossamer_die("dijkstra", st);
        t1[r] = (double)(dsm_now_ns() - t0) / 1e9;
        /* the order alternates: neither side always runs on a host the
         * other has just warmed (or loaded) */
        for (int side = 0; side < 2; side++) {
            if ((side == 0) == (r % 2 == 0)) {
                for (unsigned i = 0; i < NODES; i++) dsm_fabric_stats(dsm_node_fabric(gc.k.nodes[i]), &before[i]);
                t0 = dsm_now_ns();
                if ((st = dsm_sssp_run(s, src, NULL, &relax_d)) != DSM_OK) gossamer_die("delegated sssp", st);
                ts[r] = (double)(dsm_now_ns() - t0) / 1e9;
                for (unsigned i = 0; i < NODES; i++) dsm_fabric_stats(dsm_node_fabric(gc.k.nodes[i]), &after[i]);
                dsm_sssp_distances(s, got);
                check("delegated sssp", got, want, g.n);
            } else {
                tn_[r] = naive_run(&nc, &g, src, got, &relax_n);
                check("naive sssp", got, want, g.n);
            }
        }
    }
    char name[64], label[160];
    snprintf(name, sizeof name, "sssp_vs_naive_rpc/%s", tn);
    gossamer_emit(rep, name, ts, tn_, reps, "s",
                  gossamer_label(label, sizeof label, "same algorithm, 1 AM per relaxation", tr), 0);
    snprintf(name, sizeof name, "sssp_vs_single/%s", tn);
    gossamer_emit(rep, name, ts, t1, reps, "s", gossamer_label(label, sizeof label, "Dijkstra, one thread", tr), 0);
    char load[64];
    snprintf(name, sizeof name, "sssp_loadavg_%s", tn);
    dsm_report_env_str(rep, name, dsm_report_loadavg(load, sizeof load));
    dsm_report_env(rep, "sssp_scale", "%u", scale);
    dsm_report_env(rep, "sssp_edges", "%llu", (unsigned long long)g.m);
    char text[160];
    /* the last run's active messages: the delegated run's batches (each a
     * slot write over tcp) against the naive run's one per relaxation */
    snprintf(name, sizeof name, "sssp_messages_%s", tn);
    snprintf(text, sizeof text, "delegated run: %llu active messages (node 0), %llu (node 1)",
             (unsigned long long)(after[0].am_sent - before[0].am_sent),
             (unsigned long long)(after[1].am_sent - before[1].am_sent));
    dsm_report_env_str(rep, name, text);
    /* where the messages wait: threads that waited on their own, their
     * sleeps, and the progress threads' parks (standing down for a waiter)
     * and wake-ups, both nodes, the last run */
    snprintf(name, sizeof name, "sssp_fabric_waits_%s", tn);
    snprintf(text, sizeof text, "waits %llu, wait_sleeps %llu, progress_parks %llu, progress_wakeups %llu",
             (unsigned long long)(after[0].waits - before[0].waits + after[1].waits - before[1].waits),
             (unsigned long long)(after[0].wait_sleeps - before[0].wait_sleeps + after[1].wait_sleeps -
                                  before[1].wait_sleeps),
             (unsigned long long)(after[0].progress_parks - before[0].progress_parks + after[1].progress_parks -
                                  before[1].progress_parks),
             (unsigned long long)(after[0].progress_wakeups - before[0].progress_wakeups +
                                  after[1].progress_wakeups - before[1].progress_wakeups));
    dsm_report_env_str(rep, name, text);
    snprintf(name, sizeof name, "sssp_relaxations_%s", tn);
    snprintf(text, sizeof text, "delegated %llu, naive %llu", (unsigned long long)relax_d,
             (unsigned long long)relax_n);
    dsm_report_env_str(rep, name, text);

    dsm_sssp_destroy(s);
    gossamer_cluster_stop(&gc);
    for (unsigned i = 0; i < NODES; i++) dsm_fabric_am_register(nv.node[i].f, H_RELAX, NULL, NULL);
    gossamer_cluster_stop(&nc);
    for (unsigned i = 0; i < NODES; i++) {
        free(nv.node[i].q);
        dsm_sssp_local_free(&nv.node[i].local);
        pthread_mutex_destroy(&nv.node[i].lock);
    }
    free(want);
    free(got);
    dsm_sssp_graph_free(&g);
}
