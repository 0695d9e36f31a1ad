/* Workload "echo" on daemons with a delegation runtime (dsmd --deleg-threads,
 * Cluster.local(placement=...), pydsm run --across-nodes): the round trips
 * are delegated requests across nodes (Gossamer) instead of active
 * messages. The target node entrusts an echo property to its runtime's
 * thread 0 and hands a trust to it to every other attached node through the
 * runtime's board; on every node the main fiber of thread 0 keeps `window`
 * apply_then in flight to it (the closure returns the request's bytes,
 * checked), then a second run drops the trusts. Every attached node takes
 * part in both runs (a run spans them all). A node lost mid-run fails the
 * run everywhere with the loss as the text, and the runtime is recovered
 * for the next run. */
#include <stdlib.h>
#include <string.h>

#include "apps/fate.h"
#include "apps/workloads.h"
#include "dsm/deleg.h"
#include "dsm/clock.h"
#include "dsm/log.h"

enum { MAX_RANKS_ON_BOARD = 64 };

static void echo_closure(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)prop;
    (void)env;
    dsm_deleg_return(ret, args, args_len);
}

typedef struct echo_run {
    dsm_deleg_trust_t trust;     /* to the target's echo property */
    dsm_deleg_trust_t own;       /* the target's: its own trust */
    int has_own;
    uint64_t iters, window, size;
    uint8_t *payload;
    uint64_t *t_issue;           /* by request, for the mean latency */
    uint64_t issued, done, lat_ns;
    int mismatch;
    dsm_status_t err;
    const dsm_stop_t *stop;
} echo_run_t;

static echo_run_t *cur; /* the node's run: one workload run at a time per node */

static void echo_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    if (st != DSM_OK && cur->err == DSM_OK) cur->err = st;
    if (st == DSM_OK && (len != cur->size || (len && memcmp(ret, cur->payload, len) != 0))) cur->mismatch = 1;
    cur->lat_ns += dsm_now_ns() - cur->t_issue[id];
    cur->done++;
}

static void echo_main(void *arg, unsigned worker)
{
    echo_run_t *e = arg;
    if (worker != 0) return;
    while (e->done < e->iters && e->err == DSM_OK) {
        if (dsm_stop_requested(e->stop)) {
            e->err = DSM_ERR_CANCELLED;
            break;
        }
        while (e->issued < e->iters && e->issued - e->done < e->window) {
            uint64_t id = e->issued++;
            e->t_issue[id] = dsm_now_ns();
            dsm_status_t st = dsm_deleg_apply_then(&e->trust, echo_closure, NULL, 0, e->payload, e->size, e->size,
                                                   echo_then, (void *)(uintptr_t)id);
            if (st != DSM_OK) {
                e->err = st;
                break;
            }
        }
        if (e->err != DSM_OK) break;
        dsm_deleg_wait_outstanding(e->issued < e->iters ? e->window - 1 : 0);
    }
    /* what is still outstanding completes before the run can end */
    dsm_deleg_wait_outstanding(0);
}

static void drop_main(void *arg, unsigned worker)
{
    echo_run_t *e = arg;
    if (worker != 0) return;
    if (e->trust.weight) dsm_deleg_trust_drop(&e->trust);
    if (e->has_own) dsm_deleg_trust_drop(&e->own);
}

/* A run of the attached runtime; a lost node is reported and recovered. */
static dsm_status_t run(dsm_deleg_rt_t *rt, dsm_deleg_main_fn fn, echo_run_t *e, dsm_node_t *node, void *ret,
                        size_t cap, size_t *ret_len)
{
    dsm_status_t st = dsm_deleg_rt_start(rt, fn, e);
    if (st != DSM_OK) return st;
    st = dsm_deleg_rt_join(rt);
    if (st != DSM_ERR_PEER_DEAD) return st;
    dsm_deleg_loss_t loss;
    dsm_deleg_rt_loss(rt, &loss);
    if (loss.rank < 0) loss.rank = dsm_apps_lost_rank(node, LOST_RANK_WAIT_MS);
    dsm_status_t r = dsm_deleg_rt_recover(rt, 30000);
    if (r != DSM_OK) DSM_ERROR("apps", "echo: the runtime did not recover: %s", dsm_strerror(r));
    /* fate sharing: which node, and what this node's requests lost (the text goes with the status) */
    dsm_workload_refuse(ret, cap, ret_len,
                        "echo: rank %d died mid-run; the run stopped on every node (%llu requests of rank %u "
                        "unanswered)",
                        loss.rank, (unsigned long long)loss.unanswered, dsm_node_rank(node));
    return DSM_ERR_PEER_DEAD;
}

dsm_status_t dsm_workload_echo_deleg(dsm_node_t *node, dsm_deleg_rt_t *rt, uint64_t target, uint64_t iters,
                                     uint64_t size, uint64_t window, uint64_t nodes, void *ret, size_t cap,
                                     size_t *ret_len)
{
    uint32_t self = dsm_node_rank(node);
    uint32_t ranks[MAX_RANKS_ON_BOARD];
    uint32_t peers = dsm_deleg_peers(rt, ranks, MAX_RANKS_ON_BOARD);
    if (nodes && nodes != peers + 1)
        return dsm_workload_refuse(ret, cap, ret_len,
                                   "echo: on daemons with a delegation runtime the run spans all %u of them, not %llu",
                                   peers + 1, (unsigned long long)nodes);
    int attached = target == self;
    for (uint32_t i = 0; i < peers && i < MAX_RANKS_ON_BOARD; i++) attached |= ranks[i] == target;
    if (!attached || target >= MAX_RANKS_ON_BOARD)
        return dsm_workload_refuse(ret, cap, ret_len, "echo: target %llu is not a node with a delegation runtime",
                                   (unsigned long long)target);
    if (window == 0 || window > 4096)
        return dsm_workload_refuse(ret, cap, ret_len, "echo: window must be 1..4096, not %llu",
                                   (unsigned long long)window);
    dsm_status_t st = dsm_deleg_register("apps.echo", echo_closure);
    if (st != DSM_OK && st != DSM_ERR_EXISTS) return st;
    echo_run_t e = {.iters = iters, .window = window, .size = size, .stop = dsm_spawn_stop()};
    e.payload = malloc(size ? size : 1);
    e.t_issue = malloc(iters * sizeof *e.t_issue);
    uint8_t *board = calloc(MAX_RANKS_ON_BOARD, DSM_DELEG_TRUST_WIRE);
    uint64_t *obj = calloc(1, sizeof *obj);
    if (!e.payload || !e.t_issue || !board || !obj) {
        st = DSM_ERR_NOMEM;
        goto out;
    }
    for (uint64_t i = 0; i < size; i++) e.payload[i] = (uint8_t)(0x5a + i * 7);
    size_t board_len = MAX_RANKS_ON_BOARD * (size_t)DSM_DELEG_TRUST_WIRE;
    if (target == self) {
        /* the target: its echo property on thread 0, a share for each peer
         * on the board (entry r for rank r), its own trust a clone */
        if ((st = dsm_deleg_entrust(rt, 0, obj, free, 0, &e.own)) != DSM_OK) goto out;
        obj = NULL;
        e.has_own = 1;
        for (uint32_t i = 0; i < peers; i++)
            if ((st = dsm_deleg_trust_export(&e.own, board + (size_t)ranks[i] * DSM_DELEG_TRUST_WIRE,
                                             DSM_DELEG_TRUST_WIRE)) != DSM_OK)
                goto out;
        if ((st = dsm_deleg_board_set(rt, board, board_len)) != DSM_OK) goto out;
        if ((st = dsm_deleg_trust_clone(&e.own, &e.trust)) != DSM_OK) goto out;
    } else {
        size_t len = 0;
        if ((st = dsm_deleg_board_get(rt, (uint32_t)target, board, board_len, &len, 30000)) != DSM_OK) goto out;
        if (len != board_len) {
            st = dsm_workload_refuse(ret, cap, ret_len, "echo: rank %llu's board is not an echo's (%zu bytes)",
                                     (unsigned long long)target, len);
            goto out;
        }
        if ((st = dsm_deleg_trust_import(rt, board + (size_t)self * DSM_DELEG_TRUST_WIRE, DSM_DELEG_TRUST_WIRE,
                                         &e.trust)) != DSM_OK)
            goto out;
    }
    cur = &e;
    double start = dsm_now_s();
    st = run(rt, echo_main, &e, node, ret, cap, ret_len);
    double seconds = dsm_now_s() - start;
    if (st == DSM_OK) {
        dsm_status_t ds = run(rt, drop_main, &e, node, ret, cap, ret_len);
        if (ds != DSM_OK) st = ds;
    }
    cur = NULL;
    if (st != DSM_OK) goto out;
    if (e.err != DSM_OK) {
        st = e.err;
        goto out;
    }
    if (e.mismatch || e.done != iters) {
        st = DSM_ERR_PROTO;
        goto out;
    }
    if ((st = dsm_echo_results(ret, cap, ret_len, target == self, (double)e.lat_ns / 1e3 / (double)iters,
                               (double)iters / seconds)) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "window", (double)window, "requests")) != DSM_OK)
        goto out;
    st = dsm_result_add(ret, cap, ret_len, "across_nodes", (double)(peers + 1), "nodes");
out:
    free(e.payload);
    free(e.t_issue);
    free(board);
    free(obj);
    return st;
}
