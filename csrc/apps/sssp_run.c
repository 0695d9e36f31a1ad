/* Workload "sssp": SSSP on delegation (the placement's threads and trustees
 * reach the delegation runtime here).
 * Params: scale (12: 2^12 vertices), edge_factor (16), seed (1); from the
 * Placement: threads (runtime threads, >= 2 with dedicated trustees) and
 * trustees: "shared" puts a partition on every thread, each also running
 * the client fiber that starts the run; "dedicated" gives the partitions to
 * threads that only serve, all but the last (the client). Each node builds
 * the same graph from the seed, runs Dijkstra and the delegated run, checks
 * the distances equal, and polls the stop flag between phases and in every
 * relaxation. On daemons started with a delegation runtime (dsmd
 * --deleg-threads, Cluster.local(placement=...)) the run spans every node:
 * each node's partitions live on its runtime's trustees, and each node
 * checks its own vertices; a node lost mid-run fails the run on every node
 * with the loss (which node, which trust) as its text. Results: seconds
 * (delegated run), dijkstra_seconds, relaxations, trustees (threads holding
 * a partition, per node), dedicated (1/0), across_nodes (nodes of the run),
 * vertices_checked (by this node), matches_dijkstra (1: every distance
 * checked equal). */
#include <stdlib.h>
#include <string.h>

#include "apps/sssp.h"
#include "apps/fate.h"
#include "apps/refuse.h"
#include "apps/workloads.h"
#include "dsm/clock.h"

static const dsm_param_info_t sssp_params[] = {
    {"scale", "u64", "12", "2^scale vertices (1..20)"},
    {"edge_factor", "u64", "16", "undirected edges per vertex (1..64)"},
    {"seed", "u64", "1", "graph seed (the same graph on every node)"},
};
const dsm_workload_info_t dsm_sssp_info = {
    "sssp",
    "shortest paths on a Kronecker graph, partitions entrusted to the placement's trustees, checked against "
    "Dijkstra (seconds, relaxations)",
    dsm_workload_sssp, sssp_params, sizeof sssp_params / sizeof sssp_params[0], NULL};

/* One run, checked against Dijkstra. Within the node (own == NULL: a runtime
 * made here from the placement) or, with the daemon's attached runtime
 * (dsmd --deleg-threads), across every node: this node's partitions live
 * here and this node checks its own vertices. */
static dsm_status_t run_checked(dsm_node_t *node, dsm_deleg_rt_t *attached, const dsm_sssp_graph_t *g,
                                unsigned threads, int dedicated, void *ret, size_t cap, size_t *ret_len)
{
    const dsm_stop_t *stop = dsm_spawn_stop();
    uint64_t *want = malloc((size_t)g->n * sizeof *want), *got = malloc((size_t)g->n * sizeof *got);
    dsm_deleg_rt_t *rt = attached;
    dsm_sssp_t *s = NULL;
    dsm_status_t st = want && got ? DSM_OK : DSM_ERR_NOMEM;
    uint32_t src = dsm_sssp_source(g);
    double t0 = dsm_now_s(), dijkstra = 0, delegated = 0;
    if (st == DSM_OK) st = dsm_sssp_dijkstra(g, src, want);
    dijkstra = dsm_now_s() - t0;
    if (st == DSM_OK && dsm_stop_requested(stop)) st = DSM_ERR_CANCELLED;
    /* dedicated: threads 0..threads-2 only serve, the last is the client */
    unsigned trustees = dedicated ? threads - 1 : threads;
    if (attached) {
        if (st == DSM_OK) st = dsm_sssp_create_node(g, rt, dsm_node_rank(node), 0, trustees, 30000, &s);
    } else {
        dsm_deleg_config_t dc = {.threads = threads, .dedicated = dedicated ? threads - 1 : 0};
        if (st == DSM_OK) st = dsm_deleg_rt_create(&dc, &rt);
        if (st == DSM_OK) st = dsm_sssp_create(g, &rt, 1, 0, trustees, &s);
    }
    uint64_t relax = 0;
    if (st == DSM_OK) {
        t0 = dsm_now_s();
        st = dsm_sssp_run(s, src, stop, &relax);
        delegated = dsm_now_s() - t0;
    }
    int equal = 0;
    uint64_t checked = 0;
    if (st == DSM_OK) {
        dsm_sssp_distances(s, got);
        equal = 1;
        for (uint32_t v = 0; v < g->n; v++)
            if (dsm_sssp_vertex_here(s, v)) {
                checked++;
                equal &= got[v] == want[v];
            }
    }
    dsm_deleg_loss_t loss = {.rank = -1, .trustee = -1};
    if (attached && s) dsm_sssp_loss(s, &loss);
    if (attached && st == DSM_ERR_PEER_DEAD && loss.rank < 0) loss.rank = dsm_apps_lost_rank(node, LOST_RANK_WAIT_MS);
    uint32_t nodes = attached ? dsm_deleg_peers(rt, NULL, 0) + 1 : 1;
    if (s) dsm_sssp_destroy(s);
    if (rt && !attached) dsm_deleg_rt_destroy(rt);
    free(want);
    free(got);
    if (st == DSM_ERR_PEER_DEAD && loss.rank >= 0) {
        /* fate sharing: say which node and which trust (the text goes with the status) */
        if (loss.trustee >= 0)
            dsm_workload_refuse(ret, cap, ret_len,
                                "sssp: rank %d died mid-run; the run stopped on every node (%llu requests of rank %u "
                                "to its trustee %d, property %#x, unanswered)",
                                loss.rank, (unsigned long long)loss.unanswered, dsm_node_rank(node), loss.trustee,
                                loss.handle);
        else
            dsm_workload_refuse(ret, cap, ret_len,
                                "sssp: rank %d died mid-run; the run stopped on every node (no request of rank %u "
                                "was waiting on its trustees)",
                                loss.rank, dsm_node_rank(node));
        return st;
    }
    if (st != DSM_OK) return st;
    if ((st = dsm_result_add(ret, cap, ret_len, "seconds", delegated, "s")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "dijkstra_seconds", dijkstra, "s")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "relaxations", (double)relax, "ops")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "trustees", trustees, "threads")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "dedicated", dedicated, "")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "across_nodes", nodes, "nodes")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "vertices_checked", (double)checked, "")) != DSM_OK)
        return st;
    return dsm_result_add(ret, cap, ret_len, "matches_dijkstra", equal, "");
}

dsm_status_t dsm_workload_sssp(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                               size_t *ret_len)
{
    dsm_status_t st = dsm_workload_begin(&dsm_sssp_info, args, len, ret, cap, ret_len);
    if (st != DSM_OK) return st;
    int bad = 0;
    uint64_t scale = dsm_param_u64(args, len, "scale", 12, &bad);
    uint64_t ef = dsm_param_u64(args, len, "edge_factor", 16, &bad);
    uint64_t seed = dsm_param_u64(args, len, "seed", 1, &bad);
    uint64_t threads = dsm_param_u64(args, len, "threads", 1, &bad);
    char trustees[16] = "shared";
    dsm_param_str(args, len, "trustees", trustees, sizeof trustees, &bad);
    const dsm_workload_info_t *w = &dsm_sssp_info;
    int dedicated = !bad && !strcmp(trustees, "dedicated");
    if (!dedicated && (bad || strcmp(trustees, "shared") != 0))
        return dsm_apps_refuse_param(w, args, len, "trustees", ret, cap, ret_len, "dedicated or shared");
    if (scale < 1 || scale > 20)
        return dsm_apps_refuse_param(w, args, len, "scale", ret, cap, ret_len, "1..20");
    if (ef < 1 || ef > 64)
        return dsm_apps_refuse_param(w, args, len, "edge_factor", ret, cap, ret_len, "1..64");
    if (threads < 1 || threads > 64 || (dedicated && threads < 2))
        return dsm_workload_refuse(ret, cap, ret_len,
                                   "sssp: threads must be 1..64, and at least 2 with dedicated trustees (one "
                                   "client thread, the others serve), not %llu",
                                   (unsigned long long)threads);
    dsm_deleg_rt_t *rt = dsm_deleg_node_rt(node);
    if (rt) {
        /* across nodes: the placement must be the daemons' runtime, and the
         * run on every node that has one */
        uint64_t nodes = dsm_param_u64(args, len, "nodes", 1, &bad);
        uint32_t attached = dsm_deleg_peers(rt, NULL, 0) + 1;
        if (threads != dsm_deleg_rt_threads(rt))
            return dsm_workload_refuse(ret, cap, ret_len,
                                       "sssp: the daemons run delegation runtimes of %u threads (dsmd "
                                       "--deleg-threads); Placement(threads=%llu) must match",
                                       dsm_deleg_rt_threads(rt), (unsigned long long)threads);
        if (!bad && nodes != attached)
            return dsm_workload_refuse(ret, cap, ret_len,
                                       "sssp: runs on all %u nodes with a delegation runtime, not on %llu", attached,
                                       (unsigned long long)nodes);
    }
    dsm_sssp_graph_t g;
    if ((st = dsm_sssp_kronecker((unsigned)scale, (unsigned)ef, seed, &g)) != DSM_OK) return st;
    st = run_checked(node, rt, &g, (unsigned)threads, dedicated, ret, cap, ret_len);
    dsm_sssp_graph_free(&g);
    return st;
}
