/* Workload "echo": round trips of an active message to another node, or,
 * on daemons with a delegation runtime, of delegated requests across nodes
 * (echo_deleg.c). Params: target (rank; the next daemon), iters (1000), size
 * (payload bytes, 8), window (requests in flight with delegation, 64). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/refuse.h"
#include "apps/workloads.h"
#include "dsm/clock.h"

static const dsm_param_info_t echo_params[] = {
    {"target", "u64", "next", "rank of the node that answers (default: the next live daemon after this one)"},
    {"iters", "u64", "1000", "round trips"},
    {"size", "u64", "8", "payload bytes per message (at most 1 MiB)"},
    {"window", "u64", "64", "requests in flight, on daemons with a delegation runtime (1..4096)"},
};
const dsm_workload_info_t dsm_echo_info = {
    "echo", "round trips of an active message to another node (latency, rate)", dsm_workload_echo,
    echo_params, sizeof echo_params / sizeof echo_params[0], NULL};

/* The live daemon after this node's rank (wrapping round), so that with no
 * target every node of a run echoes to another one; itself when alone. */
static uint64_t next_daemon(dsm_node_t *node)
{
    uint32_t ranks[DSM_MAX_RANKS];
    uint32_t n = dsm_node_daemons(node, ranks, DSM_MAX_RANKS), self = dsm_node_rank(node);
    if (n > DSM_MAX_RANKS) n = DSM_MAX_RANKS;
    for (uint32_t i = 0; i < n; i++)
        if (ranks[i] > self) return ranks[i];
    return n ? ranks[0] : self;
}

dsm_status_t dsm_workload_echo(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                               size_t *ret_len)
{
    dsm_status_t st = dsm_workload_begin(&dsm_echo_info, args, len, ret, cap, ret_len);
    if (st != DSM_OK) return st;
    int bad = 0;
    uint64_t target = dsm_param_u64(args, len, "target", next_daemon(node), &bad);
    uint64_t iters = dsm_param_u64(args, len, "iters", 1000, &bad);
    uint64_t size = dsm_param_u64(args, len, "size", 8, &bad);
    uint64_t window = dsm_param_u64(args, len, "window", 64, &bad);
    uint64_t nodes = dsm_param_u64(args, len, "nodes", 0, &bad);
    const dsm_workload_info_t *w = &dsm_echo_info;
    /* dsm_workload_begin has checked the numbers and that target is given */
    if (target >= DSM_MAX_RANKS ||
        (target != dsm_node_rank(node) && dsm_node_peer_state(node, (uint32_t)target) != DSM_OK))
        return dsm_apps_refuse_param(w, args, len, "target", ret, cap, ret_len, "the rank of a live node");
    if (iters == 0)
        return dsm_apps_refuse_param(w, args, len, "iters", ret, cap, ret_len, "at least 1");
    if (size > (1u << 20))
        return dsm_apps_refuse_param(w, args, len, "size", ret, cap, ret_len, "at most 1 MiB (1048576)");
    if (window == 0 || window > 4096)
        return dsm_apps_refuse_param(w, args, len, "window", ret, cap, ret_len, "1..4096");
    dsm_deleg_rt_t *rt = dsm_deleg_node_rt(node);
    if (rt) return dsm_workload_echo_deleg(node, rt, target, iters, size, window, nodes, ret, cap, ret_len);
    uint8_t *payload = calloc(1, size ? size : 1), *reply = malloc(size ? size : 1);
    if (!payload || !reply) {
        free(payload);
        free(reply);
        return DSM_ERR_NOMEM;
    }
    memset(payload, 0x5a, size);
    dsm_fabric_t *f = dsm_node_fabric(node);
    double start = dsm_now_s();
    const dsm_stop_t *stop = dsm_spawn_stop();
    for (uint64_t i = 0; i < iters && st == DSM_OK; i++) {
        if (dsm_stop_requested(stop)) {
            st = DSM_ERR_CANCELLED;
            break;
        }
        size_t got = 0;
        st = dsm_fabric_am_request(f, (uint32_t)target, DSM_AM_RUNTIME_PING, payload, size, reply, size, &got, 0);
        if (st == DSM_OK && (got != size || memcmp(reply, payload, size) != 0)) st = DSM_ERR_PROTO;
    }
    double seconds = dsm_now_s() - start;
    free(payload);
    free(reply);
    if (st != DSM_OK) return st;
    return dsm_echo_results(ret, cap, ret_len, target == dsm_node_rank(node), seconds * 1e6 / (double)iters,
                            (double)iters / seconds);
}

dsm_status_t dsm_echo_results(void *ret, size_t cap, size_t *ret_len, int to_self, double latency_us, double rate)
{
    dsm_status_t st = dsm_result_add(ret, cap, ret_len, to_self ? "self_latency_us" : "mean_latency_us", latency_us,
                                     "us");
    if (st != DSM_OK) return st;
    return dsm_result_add(ret, cap, ret_len, to_self ? "self_round_trips_per_sec" : "round_trips_per_sec", rate,
                          "ops/s");
}
