/* libdsm's user API: the umbrella of the headers a program that runs on a
 * cluster, and Python, call (pydsm's CFFI declarations are generated from
 * it): errors and logging, the node and its coordinator, the global heap,
 * the Box API of own, CoRM's calls and LOCO's channel objects (the
 * mechanisms a program uses directly), workloads; and the one-call start
 * of a node with every module attached.
 *
 * Part of the user API. Plugin and mechanism authors include dsm/sdk.h,
 * which adds the SDK: the fabric, the runtime's module and hosting calls,
 * the module table, the workload-writing helpers, and the mechanisms'
 * calls that run inside workloads (delegation, the directory, the managed
 * heap, own's placement, channels and mutexes, chan's endpoints). */
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
#include "dsm/own.h"
#include "dsm/compact.h"
#include "dsm/chan.h"
#include "dsm/workload.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dsm_node_create + every module's attach + dsm_node_join. */
DSM_API dsm_status_t dsm_start(const dsm_node_config_t *config, dsm_node_t **out);
DSM_API const char *dsm_version(void);

#ifdef __cplusplus
}
#endif
#endif
