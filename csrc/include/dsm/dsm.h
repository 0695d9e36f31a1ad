/* libdsm's umbrella header (every public header of include/dsm; pydsm's CFFI
 * declarations are generated from it), and the one-call start of a node with
 * every module attached. */
#ifndef DSM_DSM_H
#define DSM_DSM_H

#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/log.h"
#include "dsm/stats.h"
#include "dsm/fabric.h"
#include "dsm/node.h"
#include "dsm/coord.h"
#include "dsm/heap.h"
#include "dsm/deleg.h"
#include "dsm/own.h"
#include "dsm/dir.h"
#include "dsm/compact.h"
#include "dsm/mheap.h"
#include "dsm/apps.h"

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
