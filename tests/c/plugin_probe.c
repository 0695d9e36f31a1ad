/* A dsmd plugin for test_dsmd: registers "plugin_probe", which answers with
 * the rank of the node it ran on and the library version it called, through
 * the public API of the dsmd that loaded it (the plugin links no libdsm). */
#include <stdio.h>

#include "dsm/dsm.h"

static dsm_status_t plugin_probe(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                 size_t *ret_len)
{
    (void)args;
    (void)len;
    int n = snprintf(ret, cap, "rank=%u version=%s", dsm_node_rank(node), dsm_version());
    if (n < 0 || (size_t)n >= cap) return DSM_ERR_TOO_BIG;
    *ret_len = (size_t)n;
    return DSM_OK;
}

DSM_API dsm_status_t dsm_plugin_init(void);
dsm_status_t dsm_plugin_init(void) { return dsm_register("plugin_probe", plugin_probe); }
