/* Built-in workloads and the argument/result text formats they share with
 * the Python driver: arguments are "key=value" lines, results are
 * "name value unit" lines. */
#ifndef DSM_APPS_WORKLOADS_H
#define DSM_APPS_WORKLOADS_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/dsm.h"

/* Value of `key` in the argument text, or `fallback`. A present but
 * malformed value sets *bad. */
uint64_t dsm_param_u64(const void *args, size_t len, const char *key, uint64_t fallback, int *bad);
/* Appends "name value unit\n"; returns DSM_ERR_TOO_BIG when out of room. */
dsm_status_t dsm_result_add(void *ret, size_t cap, size_t *ret_len, const char *name, double value,
                            const char *unit);

dsm_status_t dsm_workload_fetch_add(dsm_node_t *node, const void *args, size_t len, void *ret,
                                    size_t cap, size_t *ret_len);
dsm_status_t dsm_workload_echo(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                               size_t *ret_len);

#endif
