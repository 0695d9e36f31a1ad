/* Which node a delegated run lost, for its fate-sharing report when the
 * delegation runtime's own record of the loss has not been made (the run
 * failed on an operation to the dead node before the runtime's notice). */
#ifndef DSM_APPS_FATE_H
#define DSM_APPS_FATE_H

#include <stdint.h>

#include "dsm/node.h"

/* The lowest daemon rank other than this node's that the fabric or the
 * runtime knows dead, waiting up to wait_ms for one of them to learn it
 * (the runtime's notice comes within its peer timeout); -1 if none. */
int dsm_apps_lost_rank(dsm_node_t *node, uint32_t wait_ms);

/* How long a report waits for that: the default peer timeout, and more. */
enum { LOST_RANK_WAIT_MS = 10000 };

#endif
