/* SSSP on delegation across nodes (apps/sssp.c): on 2 and 3 nodes in this
 * process, over shm and tcp, the delegated run's distances equal the
 * single-process Dijkstra's on a small Kronecker graph, twice in a row on
 * the same runtimes (from two sources); the generator is deterministic and
 * symmetric; bad arguments are refused. One partition's side of the
 * algorithm (sssp_local.c), with relaxations carried by hand: alone it
 * settles each vertex once, as Dijkstra does; split in two, it sends a
 * vertex's owner only what beats what it sent before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/sssp.h"
#include "deleg_cluster.h"
#include "dsm/deleg.h"
#include "dsm/log.h"

enum { MAXN = 3, THREADS = 1, SCALE = 9, EDGE_FACTOR = 16 };

typedef struct scl {
    dsm_harness_t c;
    dsm_deleg_rt_t *rt[MAXN];
} scl_t;

static void scl_start(scl_t *s, dsm_transport_t tr, int n)
{
    memset(s, 0, sizeof *s);
    s->c.transport = tr;
    s->c.peer_timeout_ms = 5000;
    s->c.op_timeout_ms = 20000;
    dsm_deleg_config_t dc = {.threads = THREADS};
    assert_int_equal(test_deleg_cluster_start(&s->c, n, &dc, s->rt), DSM_OK);
}

static void scl_stop(scl_t *s)
{
    for (int i = 0; i < s->c.n; i++) dsm_deleg_rt_destroy(s->rt[i]);
    dsm_harness_stop(&s->c);
}

static void check_run(dsm_sssp_t *s, const dsm_sssp_graph_t *g, uint32_t src)
{
    uint64_t *want = malloc(g->n * sizeof *want), *got = malloc(g->n * sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    assert_int_equal(dsm_sssp_dijkstra(g, src, want), DSM_OK);
    uint64_t relax = 0;
    assert_int_equal(dsm_sssp_run(s, src, NULL, &relax), DSM_OK);
    dsm_sssp_distances(s, got);
    uint32_t reached = 0;
    for (uint32_t v = 0; v < g->n; v++) {
        if (want[v] != got[v]) fail_msg("vertex %u: delegated %llu, Dijkstra %llu", v, (unsigned long long)got[v],
                                        (unsigned long long)want[v]);
        reached += want[v] != DSM_SSSP_INF;
    }
    /* the run did something: the giant component, and at least one
     * relaxation per reached vertex */
    assert_true(reached > g->n / 4);
    assert_true(relax >= reached);
    free(want);
    free(got);
}

static void run_on(dsm_transport_t tr, int n)
{
    dsm_sssp_graph_t g;
    assert_int_equal(dsm_sssp_kronecker(SCALE, EDGE_FACTOR, 42, &g), DSM_OK);
    scl_t s;
    scl_start(&s, tr, n);
    dsm_sssp_t *run;
    dsm_deleg_rt_t *rts[MAXN];
    for (int i = 0; i < n; i++) rts[i] = s.rt[i];
    assert_int_equal(dsm_sssp_create(&g, rts, (unsigned)n, 0, 0, &run), DSM_OK);
    uint32_t src = dsm_sssp_source(&g);
    check_run(run, &g, src);
    /* again on the same runtimes, from another source */
    check_run(run, &g, g.dst[g.off[src]]);
    assert_int_equal(dsm_sssp_run(run, g.n, NULL, NULL), DSM_ERR_INVALID);
    dsm_sssp_destroy(run);
    scl_stop(&s);
    dsm_sssp_graph_free(&g);
}

static void test_shm_2(void **state) { (void)state; run_on(DSM_TRANSPORT_SHM, 2); }
static void test_shm_3(void **state) { (void)state; run_on(DSM_TRANSPORT_SHM, 3); }
static void test_tcp_2(void **state) { (void)state; run_on(DSM_TRANSPORT_TCP, 2); }
static void test_tcp_3(void **state) { (void)state; run_on(DSM_TRANSPORT_TCP, 3); }

static void test_graph(void **state)
{
    (void)state;
    dsm_sssp_graph_t a, b;
    assert_int_equal(dsm_sssp_kronecker(8, 8, 7, &a), DSM_OK);
    assert_int_equal(dsm_sssp_kronecker(8, 8, 7, &b), DSM_OK);
    assert_int_equal(a.n, 256);
    assert_int_equal(a.m, b.m);
    assert_true(a.m > 256 * 8);   /* both directions, few self loops dropped */
    assert_memory_equal(a.off, b.off, (a.n + 1) * sizeof *a.off);
    assert_memory_equal(a.dst, b.dst, a.m * sizeof *a.dst);
    /* symmetric: every edge has its reverse with the same weight */
    for (uint32_t v = 0; v < a.n; v++)
        for (uint64_t i = a.off[v]; i < a.off[v + 1]; i++) {
            uint32_t u = a.dst[i];
            int found = 0;
            for (uint64_t j = a.off[u]; j < a.off[u + 1] && !found; j++) found = a.dst[j] == v && a.w[j] == a.w[i];
            assert_true(found);
            assert_true(a.w[i] >= 1 && a.w[i] <= 255);
            assert_true(u != v);
        }
    dsm_sssp_graph_free(&b);
    dsm_sssp_graph_free(&a);
    assert_int_equal(dsm_sssp_kronecker(0, 16, 1, &a), DSM_ERR_INVALID);
    assert_int_equal(dsm_sssp_kronecker(10, 0, 1, &a), DSM_ERR_INVALID);
    uint64_t d[4];
    dsm_sssp_graph_t empty = {0};
    assert_int_equal(dsm_sssp_dijkstra(&empty, 0, d), DSM_ERR_INVALID);
    assert_int_equal(dsm_sssp_create(NULL, NULL, 1, 0, 0, NULL), DSM_ERR_INVALID);
}

/* Partitions of one process whose relaxations for each other wait in one
 * FIFO; each send is checked against the last sent for its vertex. */
typedef struct by_hand {
    dsm_sssp_local_t part[2];
    struct { uint32_t owner, v; uint64_t d; } *q;
    size_t head, len, cap;
    uint64_t *last_sent;
    uint64_t sends, not_better;
} by_hand_t;

static dsm_status_t send_by_hand(void *ctx, uint32_t owner, uint32_t v, uint64_t d)
{
    by_hand_t *h = ctx;
    h->sends++;
    h->not_better += d >= h->last_sent[v];
    h->last_sent[v] = d;
    if (h->len == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 1024;
        h->q = realloc(h->q, h->cap * sizeof *h->q);
        assert_non_null(h->q);
    }
    h->q[h->len].owner = owner;
    h->q[h->len].v = v;
    h->q[h->len++].d = d;
    return DSM_OK;
}

/* Hands every queued relaxation to its partition, and what those send. */
static void deliver_all(by_hand_t *h)
{
    while (h->head < h->len) {
        uint32_t owner = h->q[h->head].owner, v = h->q[h->head].v;
        uint64_t d = h->q[h->head++].d;
        assert_int_equal(dsm_sssp_relax(&h->part[owner], v, d, send_by_hand, h), DSM_OK);
    }
}

static void test_partition_side(void **state)
{
    (void)state;
    dsm_sssp_graph_t g;
    assert_int_equal(dsm_sssp_kronecker(SCALE, EDGE_FACTOR, 5, &g), DSM_OK);
    uint32_t src = dsm_sssp_source(&g);
    uint64_t *want = malloc(g.n * sizeof *want);
    assert_non_null(want);
    assert_int_equal(dsm_sssp_dijkstra(&g, src, want), DSM_OK);
    uint32_t reached = 0;
    for (uint32_t v = 0; v < g.n; v++) reached += want[v] != DSM_SSSP_INF;

    /* one partition: nearest first settles every vertex once, so it looks
     * at no more relaxations than there are edges into reached vertices */
    by_hand_t h = {0};
    h.last_sent = malloc(g.n * sizeof *h.last_sent);
    assert_non_null(h.last_sent);
    for (uint32_t v = 0; v < g.n; v++) h.last_sent[v] = DSM_SSSP_INF;
    assert_int_equal(dsm_sssp_local_init(&h.part[0], &g, 0, 1), DSM_OK);
    assert_int_equal(dsm_sssp_relax(&h.part[0], src, 0, send_by_hand, &h), DSM_OK);
    assert_int_equal(h.sends, 0);
    assert_memory_equal(h.part[0].dist, want, g.n * sizeof *want);
    assert_true(h.part[0].relaxations <= g.m + 1);
    assert_true(h.part[0].relaxations >= reached);
    dsm_sssp_local_free(&h.part[0]);

    /* two partitions: the same distances; every send beats the last for
     * its vertex, and a vertex not of the partition is refused */
    for (uint32_t p = 0; p < 2; p++) assert_int_equal(dsm_sssp_local_init(&h.part[p], &g, p, 2), DSM_OK);
    assert_int_equal(dsm_sssp_relax(&h.part[1 - src % 2], src, 0, send_by_hand, &h), DSM_ERR_INVALID);
    assert_int_equal(dsm_sssp_relax(&h.part[src % 2], src, 0, send_by_hand, &h), DSM_OK);
    deliver_all(&h);
    assert_true(h.sends > 0);
    assert_int_equal(h.not_better, 0);
    for (uint32_t v = 0; v < g.n; v++) assert_int_equal(h.part[v % 2].dist[v / 2], want[v]);
    /* a reset forgets what was sent: the same run sends as much again */
    uint64_t sends = h.sends;
    for (uint32_t p = 0; p < 2; p++) dsm_sssp_local_reset(&h.part[p]);
    for (uint32_t v = 0; v < g.n; v++) h.last_sent[v] = DSM_SSSP_INF;
    h.head = h.len = 0;
    assert_int_equal(dsm_sssp_relax(&h.part[src % 2], src, 0, send_by_hand, &h), DSM_OK);
    deliver_all(&h);
    assert_int_equal(h.sends, 2 * sends);
    for (uint32_t p = 0; p < 2; p++) dsm_sssp_local_free(&h.part[p]);
    free(h.q);
    free(h.last_sent);
    free(want);
    dsm_sssp_graph_free(&g);
}

int main(void)
{
    dsm_set_log_level(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph),  cmocka_unit_test(test_partition_side), cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3),
        cmocka_unit_test(test_tcp_2), cmocka_unit_test(test_tcp_3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
