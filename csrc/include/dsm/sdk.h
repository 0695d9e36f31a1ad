/* libdsm's SDK: the user API (dsm/dsm.h) and what plugin and mechanism
 * authors call besides: the fabric (dsm/fabric.h: regions, one-sided
 * operations, active messages), the runtime's calls for mechanisms and
 * hosts (dsm/runtime.h: two-phase start, join-time values, module state,
 * closures, a daemon's jobs), the module table (dsm/module.h), the helpers
 * that write workloads (dsm/plugin.h: registration, arguments, results) and
 * 64-bit mixing (dsm/mix.h); the mechanisms' calls that run inside
 * workloads: the heap's unchecked local pointers (dsm/heap_sdk.h), own's
 * placement, TBox groups, channels and mutexes (dsm/own_sdk.h), and the
 * mechanisms a program reaches only through workloads, delegation
 * (dsm/deleg.h), the directory (dsm/dir.h) and the managed heap
 * (dsm/mheap.h); LOCO's channel endpoints, ack keys, fences and the
 * objects Python does not bind (dsm/chan_sdk.h); and the start of a node
 * with per-node settings, below.
 * Two header-only helpers that need POSIX are SDK headers a plugin
 * includes by name: dsm/clock.h and dsm/thread.h. libdsm and dsmd export
 * all of it; a plugin built against the installed headers includes this
 * one.
 *
 * Part of the SDK. */
#ifndef DSM_SDK_H
#define DSM_SDK_H

#include "dsm/dsm.h"
#include "dsm/fabric.h"
#include "dsm/runtime.h"
#include "dsm/module.h"
#include "dsm/plugin.h"
#include "dsm/mix.h"
#include "dsm/zipf.h"
#include "dsm/heap_sdk.h"
#include "dsm/own_sdk.h"
#include "dsm/deleg.h"
#include "dsm/dir.h"
#include "dsm/mheap.h"
#include "dsm/chan_sdk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dsm_start with a delegation runtime made from deleg (not started) attached
 * before the join, so that it serves and reaches the other nodes' attached
 * runtimes (dsmd --deleg-threads; workloads find it with
 * dsm_deleg_node_rt). *rt_out gets it; destroy it after the node. */
DSM_API dsm_status_t dsm_start_deleg(const dsm_node_config_t *config, const dsm_deleg_config_t *deleg,
                                     dsm_node_t **out, dsm_deleg_rt_t **rt_out);
/* dsm_start_deleg with the CoRM store made from compact (NULL: the defaults of
 * dsm_compact_config_init; range_size is 0 on a node that serves no memory),
 * deleg NULL for no delegation runtime (rt_out may then be NULL): the
 * per-node settings dsmd takes as flags. */
DSM_API dsm_status_t dsm_start_with(const dsm_node_config_t *config, const dsm_compact_config_t *compact,
                                    const dsm_deleg_config_t *deleg, dsm_node_t **out, dsm_deleg_rt_t **rt_out);

#ifdef __cplusplus
}
#endif
#endif
