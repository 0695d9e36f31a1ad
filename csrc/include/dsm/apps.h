/* The applications built into libdsm: workloads that dsmd and the Python
 * driver run by name through the function registry. */
#ifndef DSM_APPS_H
#define DSM_APPS_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/node.h"
#include "dsm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Register the built-in workloads ("fetch_add", "echo", ...) in the function
 * registry of this process. */
DSM_API void dsm_register_builtin_workloads(void);

/* A workload's parameter, as its registration declares it. */
typedef struct dsm_param_info {
    const char *name;
    const char *type;      /* "u64" (unsigned integer), "addr" (a global address;
                            * a pydsm GlobalBuffer passes its own), "str" */
    const char *fallback;  /* the default, as text; NULL when required */
    const char *help;      /* one line */
} dsm_param_info_t;

/* A workload: its function, a line of help and the parameters it takes.
 * Besides them every workload takes the runner's keys, which the driver
 * sets from its Placement and node list (dsm_workload_runner_key). */
typedef struct dsm_workload_info {
    const char *name;
    const char *help;
    dsm_fn_t fn;
    const dsm_param_info_t *params;
    uint32_t n_params;
} dsm_workload_info_t;

/* Registers info->fn under info->name in the function registry and keeps
 * the description, which must outlive the process's use of it (static
 * storage). A plugin describes its workloads this way too. */
DSM_API dsm_status_t dsm_register_workload(const dsm_workload_info_t *info);
/* The description of a registered workload, or NULL (unknown, or registered
 * with plain dsm_register). */
DSM_API const dsm_workload_info_t *dsm_workload_info(const char *name);
/* Runner key `index` (threads, pin, trustees, memory_nodes, rank_index,
 * nodes); NULL past the end. */
DSM_API const char *dsm_workload_runner_key(uint32_t index);
/* Checks argument text ("key=value" lines) against `info`: every required
 * parameter is present, no key is unknown (the runner's keys aside), and
 * u64/addr values are numbers. On a violation writes one line,
 * "NAME: missing parameter 'target'" and the like, into msg[0..cap) and
 * returns DSM_ERR_INVALID. */
DSM_API dsm_status_t dsm_workload_check_args(const dsm_workload_info_t *info, const void *args, size_t len,
                                             char *msg, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
