/* Workloads as a program that runs them sees them: the descriptions
 * registered under their names (their parameters, a line of help), the
 * runner's keys every workload takes, the check of an argument line, and
 * loading the plugins that register them. dsmd and the Python driver load
 * plugins and run what they register by name (dsm_spawn).
 *
 * Part of the user API (dsm/dsm.h). Writing a workload, a plugin's
 * registration, argument and result helpers, is the SDK's dsm/plugin.h. */
#ifndef DSM_WORKLOAD_H
#define DSM_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/node.h"
#include "dsm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A workload's parameter, as its registration declares it. */
typedef struct dsm_param_info {
    const char *name;
    const char *type;      /* "u64" (unsigned integer), "addr" (a global address;
                            * a pydsm GlobalBuffer passes its own), or
                            * "addr:DTYPE,..." (the same, naming the numpy
                            * dtypes the workload reads there, comma-separated:
                            * "addr:uint64,int64"; pydsm refuses a buffer of
                            * another dtype before the run), or "str" */
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
    /* Optional: bytes of zeroed shared memory the run needs for addr
     * parameter `param` when the caller gives none, for these arguments on
     * `nodes` nodes (0: none needed). The driver makes that buffer on the
     * run's first node, passes its address and frees it after the run, so
     * a workload's scratch memory is made the same way for every workload. */
    uint64_t (*scratch_bytes)(const char *param, const void *args, size_t len, uint64_t nodes);
} dsm_workload_info_t;

/* Loads the plugin at `path` into this process (once per path) and calls its
 * dsm_plugin_init. DSM_ERR_INVALID when it cannot be loaded or has no
 * dsm_plugin_init (dsm_last_error says why), else what the init returned. */
DSM_API dsm_status_t dsm_plugin_load(const char *path);
/* Loads the project's workloads, libdsm-apps.so, from beside the library
 * (or the program) that holds libdsm, or from $DSM_APPS_PLUGIN; "none"
 * there loads nothing. DSM_ERR_UNSUPPORTED when no copy is found. */
DSM_API dsm_status_t dsm_plugin_load_apps(void);

/* The description of a registered workload, or NULL (unknown, or registered
 * with plain dsm_register). */
DSM_API const dsm_workload_info_t *dsm_workload_info(const char *name);
/* Runner key `index` (threads, pin, trustees, memory_nodes, rank_index,
 * nodes); NULL past the end. */
DSM_API const char *dsm_workload_runner_key(uint32_t index);
/* Checks argument text ("key=value" lines) against `info`: every required
 * parameter is present, no key is unknown (the runner's keys aside), and
 * u64 and addr (addr:DTYPE,... too) values are numbers. On a violation
 * writes one line, "NAME: missing parameter 'target'" and the like, into
 * msg[0..cap) and returns DSM_ERR_INVALID. */
DSM_API dsm_status_t dsm_workload_check_args(const dsm_workload_info_t *info, const void *args, size_t len,
                                             char *msg, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
