/* The project's workloads, the apps plugin (libdsm-apps.so): each one's
 * description and function. The argument and result text they share with
 * the Python driver is the workload SDK's (dsm/workload.h). */
#ifndef DSM_APPS_WORKLOADS_H
#define DSM_APPS_WORKLOADS_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/workload.h"
#include "dsm/fabric.h"
#include "dsm/deleg.h"
#include "dsm/heap.h"
#include "dsm/node.h"
#include "dsm/plugin.h"
#include "dsm/runtime.h"

/* Registers the project's workloads (fetch_add, echo, kv, ...) in this
 * process: the apps plugin's dsm_plugin_init, and what programs that link
 * the apps objects (tests, benchmarks, dsm-memcached) call instead. */
dsm_status_t dsm_apps_register(void);

extern const dsm_workload_info_t dsm_fetch_add_info, dsm_echo_info, dsm_kv_info, dsm_semeru_info, dsm_sssp_info;
extern const dsm_workload_info_t dsm_gemm_info, dsm_dataframe_info, dsm_socialnet_info, dsm_chan_ops_info;
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
/* An echo's two figures, latency and rate. A node that echoes to itself
 * measures no network: its figures are named self_* so that they stay out
 * of the figures combined over the nodes. */
dsm_status_t dsm_echo_results(void *ret, size_t cap, size_t *ret_len, int to_self, double latency_us, double rate);
/* echo on a daemon's delegation runtime (echo_deleg.c): nodes is the
 * run's node count (0: not given). */
dsm_status_t dsm_workload_echo_deleg(dsm_node_t *node, dsm_deleg_rt_t *rt, uint64_t target, uint64_t iters,
                                     uint64_t size, uint64_t window, uint64_t nodes, void *ret, size_t cap,
                                     size_t *ret_len);
dsm_status_t dsm_workload_chan_ops(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                   size_t *ret_len);
dsm_status_t dsm_workload_kv(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                             size_t *ret_len);
dsm_status_t dsm_workload_semeru(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                 size_t *ret_len);
dsm_status_t dsm_workload_sssp(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                               size_t *ret_len);

#endif
