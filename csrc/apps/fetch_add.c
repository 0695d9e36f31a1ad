/* Workload "fetch_add": every thread of a node hammers one 64-bit counter in
 * global memory with fetch-and-add; reports throughput and mean latency. The
 * counter's final value checks that no increment was lost.
 * Params: counter (global address, required), iters (per thread, 10000),
 * threads (1), and the placement's pin/rank_index/nodes. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "apps/refuse.h"
#include "apps/workloads.h"
#include "dsm/clock.h"
#include "dsm/thread.h"

typedef struct worker {
    dsm_node_t *node;
    const void *args;
    size_t args_len;
    unsigned index;
    dsm_gaddr_t counter;
    uint64_t iters;
    const dsm_stop_t *stop;
    dsm_status_t status;
    double seconds;
    pthread_t thread;
} worker_t;

static void *run(void *arg)
{
    worker_t *w = arg;
    dsm_workload_pin(w->args, w->args_len, w->index);
    double start = dsm_now_s();
    for (uint64_t i = 0; i < w->iters && w->status == DSM_OK; i++) {
        uint64_t old;
        w->status = dsm_fetch_add(w->node, w->counter, 1, &old);
        if ((i & 15) == 15 && dsm_stop_requested(w->stop)) w->status = DSM_ERR_CANCELLED;
    }
    w->seconds = dsm_now_s() - start;
    return NULL;
}

static const dsm_param_info_t fetch_add_params[] = {
    {"counter", "addr:uint64,int64", NULL, "the 64-bit counter every thread adds to"},
    {"iters", "u64", "10000", "fetch-and-adds per thread"},
};
const dsm_workload_info_t dsm_fetch_add_info = {
    "fetch_add", "every thread of every node adds 1 to one counter (rate, latency)", dsm_workload_fetch_add,
    fetch_add_params, sizeof fetch_add_params / sizeof fetch_add_params[0], NULL};

dsm_status_t dsm_workload_fetch_add(dsm_node_t *node, const void *args, size_t len, void *ret,
                                    size_t cap, size_t *ret_len)
{
    dsm_status_t st = dsm_workload_begin(&dsm_fetch_add_info, args, len, ret, cap, ret_len);
    if (st != DSM_OK) return st;
    int bad = 0;
    dsm_gaddr_t counter = dsm_param_u64(args, len, "counter", 0, &bad);
    uint64_t iters = dsm_param_u64(args, len, "iters", 10000, &bad);
    uint64_t threads = dsm_param_u64(args, len, "threads", 1, &bad);
    int cpu;
    const dsm_workload_info_t *w = &dsm_fetch_add_info;
    if (!counter || counter % 8)
        return dsm_apps_refuse_param(w, args, len, "counter", ret, cap, ret_len,
                                     "the global address of an 8-byte aligned 64-bit counter");
    if (threads == 0 || threads > 256)
        return dsm_apps_refuse_param(w, args, len, "threads", ret, cap, ret_len, "1..256");
    if (dsm_workload_cpu(args, len, 0, 1, &cpu) != DSM_OK)
        return dsm_apps_refuse_param(w, args, len, "pin", ret, cap, ret_len, "compact, scatter or none");
    (void)bad;   /* dsm_workload_begin has checked the numbers */
    worker_t *workers = calloc(threads, sizeof *workers);
    if (!workers) return DSM_ERR_NOMEM;
    uint64_t started = 0;
    for (; started < threads; started++) {
        workers[started] = (worker_t){.node = node, .args = args, .args_len = len,
                                      .index = (unsigned)started, .counter = counter, .iters = iters,
                                      .stop = dsm_spawn_stop()};
        if (dsm_thread_start(&workers[started].thread, NULL, run, &workers[started]) != 0) break;
    }
    st = started == threads ? DSM_OK : DSM_ERR_NOMEM;
    double slowest = 0;
    for (uint64_t i = 0; i < started; i++) {
        pthread_join(workers[i].thread, NULL);
        if (workers[i].status != DSM_OK) st = workers[i].status;
        if (workers[i].seconds > slowest) slowest = workers[i].seconds;
    }
    free(workers);
    if (st != DSM_OK) return st;
    double ops = (double)(iters * threads);
    if (slowest <= 0) slowest = 1e-9;
    if ((st = dsm_result_add(ret, cap, ret_len, "ops", ops, "ops")) != DSM_OK) return st;
    if ((st = dsm_result_add(ret, cap, ret_len, "ops_per_sec", ops / slowest, "ops/s")) != DSM_OK) return st;
    return dsm_result_add(ret, cap, ret_len, "mean_latency_us", slowest * 1e6 / (double)iters, "us");
}
