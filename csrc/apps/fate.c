/* Which node a delegated run lost (see fate.h). */
#include "apps/fate.h"

#include "dsm/clock.h"

static int known_dead(dsm_node_t *node)
{
    uint32_t self = dsm_node_rank(node);
    for (uint32_t r = 0; r < DSM_MAX_DAEMONS; r++)
        if (r != self && dsm_node_peer_state(node, r) == DSM_ERR_PEER_DEAD)
            return (int)r;
    return -1;
}

int dsm_apps_lost_rank(dsm_node_t *node, uint32_t wait_ms)
{
    uint64_t deadline = dsm_deadline_ns(wait_ms);
    long pause_ns = 100000;
    for (;;) {
        int r = known_dead(node);
        if (r >= 0 || dsm_now_ns() > deadline) return r;
        dsm_backoff_sleep(&pause_ns, 10000000);
    }
}
