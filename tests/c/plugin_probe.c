/* A dsmd plugin for test_dsmd: registers "plugin_probe", which answers with
 * the rank of the node it ran on and the library version it called, through
 * the public API of the dsmd that loaded it (the plugin links no libdsm),
 * and "plugin_stubborn", which ignores its stop flag (the daemon must end it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsm/sdk.h"

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

/* Adds 1 to the word at args' "started=ADDR" (so that a test knows it
 * runs), then sleeps for a minute in small steps and never looks at
 * dsm_spawn_stop(). */
static dsm_status_t plugin_stubborn(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                    size_t *ret_len)
{
    (void)ret, (void)cap;
    char text[64] = "";
    memcpy(text, args, len < sizeof text - 1 ? len : sizeof text - 1);
    const char *started = strstr(text, "started=");
    uint64_t old;
    if (started != NULL &&
        dsm_fetch_add(node, strtoull(started + strlen("started="), NULL, 10), 1, &old) != DSM_OK)
        return DSM_ERR_INVALID;
    for (int i = 0; i < 6000; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    *ret_len = 0;
    return DSM_OK;
}

DSM_API dsm_status_t dsm_plugin_init(void);
dsm_status_t dsm_plugin_init(void)
{
    dsm_status_t st = dsm_register("plugin_probe", plugin_probe);
    return st == DSM_OK ? dsm_register("plugin_stubborn", plugin_stubborn) : st;
}
