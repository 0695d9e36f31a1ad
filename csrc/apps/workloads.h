/* Built-in workloads and the argument/result text formats they share with
 * the Python driver: arguments are "key=value" lines, results are
 * "name value unit" lines. */
#ifndef DSM_APPS_WORKLOADS_H
#define DSM_APPS_WORKLOADS_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/apps.h"
#include "dsm/fabric.h"
#include "dsm/deleg.h"
#include "dsm/heap.h"
#include "dsm/node.h"

/* Value of `key` in the argument text, or `fallback`. A present but
 * malformed value sets *bad. */
uint64_t dsm_param_u64(const void *args, size_t len, const char *key, uint64_t fallback, int *bad);
/* Copies the text value of `key` into out[0..cap) (NUL-terminated); returns
 * 1 if present, 0 if absent; a value that does not fit sets *bad. */
int dsm_param_str(const void *args, size_t len, const char *key, char *out, size_t cap, int *bad);
/* The CPU for workload thread `thread_index` by the placement in `args`:
 * pin=compact puts a node's threads on neighbouring CPUs, pin=scatter spreads
 * them with the other nodes' threads interleaved (rank_index and nodes say
 * where this node stands), over `cpus` CPUs; pin=none (the default) gives
 * *cpu = -1. DSM_ERR_INVALID for a bad placement. */
dsm_status_t dsm_workload_cpu(const void *args, size_t len, unsigned thread_index, long cpus, int *cpu);
/* Pins the calling thread where dsm_workload_cpu says. */
dsm_status_t dsm_workload_pin(const void *args, size_t len, unsigned thread_index);
/* Appends "name value unit\n" (15 significant digits: integers below 10^15
 * come back exact); returns DSM_ERR_TOO_BIG when out of room. */
dsm_status_t dsm_result_add(void *ret, size_t cap, size_t *ret_len, const char *name, double value,
                            const char *unit);

/* The first call of every described workload: checks its arguments against
 * its description; on a violation the message is the result text (the
 * driver shows it) and the status DSM_ERR_INVALID. */
dsm_status_t dsm_workload_begin(const dsm_workload_info_t *w, const void *args, size_t len, void *ret, size_t cap,
                                size_t *ret_len);

/* A workload's refusal of its arguments: the message (printf-style) becomes
 * the result text; returns DSM_ERR_INVALID. */
dsm_status_t dsm_workload_refuse(void *ret, size_t cap, size_t *ret_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

extern const dsm_workload_info_t dsm_fetch_add_info, dsm_echo_info, dsm_kv_info, dsm_semeru_info, dsm_sssp_info;
extern const dsm_workload_info_t dsm_gemm_info, dsm_dataframe_info, dsm_socialnet_info;
dsm_status_t dsm_workload_gemm(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                               size_t *ret_len);
dsm_status_t dsm_workload_dataframe(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                    size_t *ret_len);
/* The own tasks the workloads spawn (each process registers them). */
dsm_status_t dsm_dataframe_register_tasks(void);
dsm_status_t dsm_workload_socialnet(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                    size_t *ret_len);
dsm_status_t dsm_workload_fetch_add(dsm_node_t *node, const void *args, size_t len, void *ret,
                                    size_t cap, size_t *ret_len);
dsm_status_t dsm_workload_echo(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                               size_t *ret_len);
/* echo on a daemon's delegation runtime (echo_deleg.c): nodes is the
 * run's node count (0: not given). */
dsm_status_t dsm_workload_echo_deleg(dsm_node_t *node, dsm_deleg_rt_t *rt, uint64_t target, uint64_t iters,
                                     uint64_t size, uint64_t window, uint64_t nodes, void *ret, size_t cap,
                                     size_t *ret_len);
dsm_status_t dsm_workload_kv(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                             size_t *ret_len);
dsm_status_t dsm_workload_semeru(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                 size_t *ret_len);
dsm_status_t dsm_workload_sssp(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                               size_t *ret_len);

#endif
