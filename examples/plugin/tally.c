/* An example workload plugin, built against pydsm's public headers alone:
 *
 *   cc -std=c11 -shared -fPIC -O2 -I"$(python -c 'import pydsm; print(pydsm.get_include())')" \
 *      -o libtally.so tally.c
 *
 * and run from Python (tests/py/test_example_plugin.py does):
 *
 *   with pydsm.Cluster.local(nodes=2, plugin="./libtally.so") as c:
 *       total = c.alloc(np.zeros(1, np.uint64), node=0)
 *       r = c.run("tally", total=total, adds=100)
 *       r.integer("last", node=0)      # exact, all 64 bits
 *
 * "tally": every node adds `step` to one shared 64-bit counter `adds` times
 * and reports the counter's value before its last add, exactly (an integer
 * figure), and its rate. The counter is the handle the nodes share: the
 * driver passes its global address as an "addr" parameter, the caller's
 * buffer or, when none is given, one the run makes (tally_scratch). */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "dsm/sdk.h"

static const dsm_param_info_t tally_params[] = {
    {"total", "addr", "0", "the shared 64-bit counter (0: the run makes one, zeroed)"},
    {"adds", "u64", "1000", "fetch-and-adds per node"},
    {"step", "u64", "1", "what each add adds"},
};

static dsm_status_t tally(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap, size_t *ret_len);

/* Shared memory the run makes for an addr parameter the caller left out:
 * 8 bytes for the counter. */
static uint64_t tally_scratch(const char *param, const void *args, size_t len, uint64_t nodes)
{
    (void)args, (void)len, (void)nodes;
    return strcmp(param, "total") == 0 ? 8 : 0;
}

static const dsm_workload_info_t tally_info = {
    .name = "tally",
    .help = "every node adds `step` to one shared counter `adds` times (last value seen, rate)",
    .fn = tally,
    .params = tally_params,
    .n_params = sizeof tally_params / sizeof tally_params[0],
    .scratch_bytes = tally_scratch,
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static dsm_status_t tally(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap, size_t *ret_len)
{
    /* Unknown or malformed arguments come back as one line naming the parameter. */
    dsm_status_t st = dsm_workload_begin(&tally_info, args, len, ret, cap, ret_len);
    if (st != DSM_OK) return st;
    int bad = 0;
    dsm_gaddr_t total = dsm_param_u64(args, len, "total", 0, &bad);
    uint64_t adds = dsm_param_u64(args, len, "adds", 1000, &bad);
    uint64_t step = dsm_param_u64(args, len, "step", 1, &bad);
    if (bad || adds == 0) return dsm_workload_refuse(ret, cap, ret_len, "tally: adds must be at least 1");
    if (total == 0) return dsm_workload_refuse(ret, cap, ret_len, "tally: total must be a counter's address");
    if ((st = dsm_workload_pin(args, len, 0)) != DSM_OK) return st;
    uint64_t last = 0;
    double start = now_s();
    for (uint64_t i = 0; i < adds && st == DSM_OK; i++) {
        st = dsm_fetch_add(node, total, step, &last);
        if ((i & 63) == 63 && dsm_stop_requested(dsm_spawn_stop())) st = DSM_ERR_CANCELLED;
    }
    if (st != DSM_OK) return st;
    double seconds = now_s() - start;
    if ((st = dsm_result_add_u64(ret, cap, ret_len, "last", last, "value")) != DSM_OK) return st;
    if ((st = dsm_result_add_u64(ret, cap, ret_len, "adds", adds, "ops")) != DSM_OK) return st;
    return dsm_result_add(ret, cap, ret_len, "adds_per_sec", (double)adds / (seconds > 0 ? seconds : 1e-9), "ops/s");
}

/* The entry point dsmd and the Python driver call after loading the plugin. */
DSM_API dsm_status_t dsm_plugin_init(void);
dsm_status_t dsm_plugin_init(void) { return dsm_register_workload(&tally_info); }
