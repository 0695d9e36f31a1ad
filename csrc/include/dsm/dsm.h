/* libdsm's user API: the umbrella of the headers a program that runs on a
 * cluster, and Python, call (pydsm's CFFI declarations are generated from
 * it): errors and logging, the node and its coordinator, the global heap,
 * each mechanism's calls, workloads; and the one-call start of a node with
 * every module attached.
 *
 * Part of the user API. Plugin and mechanism authors include dsm/sdk.h,
 * which adds the SDK: the fabric, the runtime's module and hosting calls,
 * the module table and the workload-writing helpers. */
#ifndef DSM_DSM_H
#define DSM_DSM_H

#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/log.h"
#include "dsm/stats.h"
#include "dsm/transport.h"
#include "dsm/node.h"
#include "dsm/coord.h"
#include "dsm/heap.h"
#include "dsm/deleg.h"
#include "dsm/own.h"
#include "dsm/dir.h"
#include "dsm/compact.h"
#include "dsm/mheap.h"
#include "dsm/workload.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dsm_node_create + every module's attach + dsm_node_join. */
DSM_API dsm_status_t dsm_start(const dsm_node_config_t *config, dsm_node_t **out);
/* dsm_start with a delegation runtime made from deleg (not started) attached
 * before the join, so that it serves and reaches the other nodes' attached
 * runtimes (dsmd --deleg-threads; workloads find it with
 * dsm_deleg_node_rt). *rt_out gets it; destroy it after the node. */
DSM_API dsm_status_t dsm_start_deleg(const dsm_node_config_t *config, const dsm_deleg_config_t *deleg,
                                     dsm_node_t **out, dsm_deleg_rt_t **rt_out);
/* dsm_start_deleg with the CoRM store made from corm (NULL: the defaults of
 * dsm_corm_config_init; range_size is 0 on a node that serves no memory),
 * deleg NULL for no delegation runtime (rt_out may then be NULL): the
 * per-node settings dsmd takes as flags. */
DSM_API dsm_status_t dsm_start_with(const dsm_node_config_t *config, const dsm_corm_config_t *corm,
                                    const dsm_deleg_config_t *deleg, dsm_node_t **out, dsm_deleg_rt_t **rt_out);
DSM_API const char *dsm_version(void);

#ifdef __cplusplus
}
#endif
#endif
