/* chan's groups: a name prefix whose top-level channels take a chosen set
 * of participants instead of the node's live daemons, so that clients
 * (several Python processes, say) share objects among themselves. */
#include <string.h>

#include "chan/internal.h"
#include "util/log.h"

static chan_group_t *find_group(chan_mgr_t *m, const char *prefix)
{
    for (uint32_t i = 0; i < m->ngroups; i++)
        if (strcmp(m->groups[i].prefix, prefix) == 0)
            return &m->groups[i];
    return NULL;
}

dsm_status_t dsm_chan_group(dsm_node_t *node, const char *prefix, const uint32_t *ranks, uint32_t n)
{
    chan_mgr_t *m = chan_mgr(node);
    if (m == NULL)
        return DSM_ERR_STATE;
    size_t len = prefix ? strlen(prefix) : 0;
    /* room for "/x" after it; no empty '/' parts */
    if (len == 0 || len > DSM_CHAN_NAME_MAX - 2 || !chan_name_ok(prefix, len, DSM_CHAN_NAME_MAX) ||
        prefix[0] == '/' || prefix[len - 1] == '/' || strstr(prefix, "//") || n > DSM_CHAN_MAX_PEERS ||
        (n > 0 && ranks == NULL))
        return DSM_ERR_INVALID;
    chan_group_t g = {.n = n};
    memcpy(g.prefix, prefix, len + 1);
    int mine = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;   /* insertion sort: ascending, no repeats */
        while (j > 0 && g.ranks[j - 1] > ranks[i]) {
            g.ranks[j] = g.ranks[j - 1];
            j--;
        }
        if (j > 0 && g.ranks[j - 1] == ranks[i])
            return DSM_ERR_INVALID;
        g.ranks[j] = ranks[i];
        mine |= ranks[i] == dsm_node_rank(node);
    }
    if (n > 0 && !mine) {
        DSM_ERROR(LOG_MOD, "group '%s': this node (rank %u) is not among its ranks", prefix, dsm_node_rank(node));
        return DSM_ERR_INVALID;
    }
    dsm_status_t st = DSM_OK;
    pthread_mutex_lock(&m->lock);
    chan_group_t *old = find_group(m, prefix);
    if (n == 0) {
        if (old)
            *old = m->groups[--m->ngroups];
    } else if (old) {
        if (old->n != g.n || memcmp(old->ranks, g.ranks, n * sizeof g.ranks[0]) != 0)
            st = DSM_ERR_EXISTS;
    } else if (m->ngroups == DSM_CHAN_MAX_GROUPS) {
        st = DSM_ERR_TOO_BIG;
    } else {
        m->groups[m->ngroups++] = g;
    }
    pthread_mutex_unlock(&m->lock);
    if (st == DSM_ERR_EXISTS)
        DSM_ERROR(LOG_MOD, "group '%s' is defined on this node already, with other ranks", prefix);
    else if (st == DSM_ERR_TOO_BIG)
        DSM_ERROR(LOG_MOD, "group '%s': this node has %u groups already", prefix, (unsigned)DSM_CHAN_MAX_GROUPS);
    return st;
}

uint32_t chan_group_ranks(chan_mgr_t *m, const char *name, uint32_t ranks[DSM_CHAN_MAX_PEERS])
{
    uint32_t n = 0;
    size_t best = 0;
    pthread_mutex_lock(&m->lock);
    for (uint32_t i = 0; i < m->ngroups; i++) {
        const chan_group_t *g = &m->groups[i];
        size_t len = strlen(g->prefix);
        if (len > best && strncmp(name, g->prefix, len) == 0 && name[len] == '/') {
            best = len;
            n = g->n;
            memcpy(ranks, g->ranks, n * sizeof ranks[0]);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return n;
}
