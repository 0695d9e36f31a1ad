/* Values exchanged at join time: what a node publishes (dsm_node_publish),
 * the copy of every member's values it keeps (dsm_node_peer_value), and the
 * hooks run for each member that becomes reachable (dsm_node_on_peer_join).
 * The values themselves travel in member entries (ctl_wire.h); node.c
 * records them and runs the hooks when a member is heard of. */
#include <stdlib.h>
#include <string.h>

#include "runtime/node_internal.h"
#include "util/log.h"

dsm_status_t dsm_node_publish(dsm_node_t *n, const char *key, const void *value, size_t len)
{
    if (!n || !key || (!value && len)) return DSM_ERR_INVALID;
    size_t key_len = strlen(key);
    if (key_len == 0 || key_len > DSM_NODE_MAX_KEY) return DSM_ERR_INVALID;
    if (n->joined) return DSM_ERR_STATE;
    if (len > DSM_NODE_MAX_VALUE_BYTES) return DSM_ERR_TOO_BIG;
    dsm_ctl_values_t next;
    if (n->published) next = *n->published;
    else memset(&next, 0, sizeof next);
    if (dsm_ctl_values_find(&next, key)) return DSM_ERR_EXISTS;
    if (next.count == DSM_NODE_MAX_VALUES) return DSM_ERR_TOO_BIG;
    next.v[next.count++] = (dsm_ctl_value_t){.key = key, .key_len = (uint8_t)key_len,
                                             .value = value, .value_len = (uint16_t)len};
    dsm_status_t st = dsm_ctl_values_check(&next);
    if (st != DSM_OK) return st;
    dsm_ctl_values_t *copy = dsm_ctl_values_dup(&next);
    if (!copy) return DSM_ERR_NOMEM;
    free(n->published);
    n->published = copy;
    return DSM_OK;
}

dsm_status_t dsm_node_peer_value(dsm_node_t *n, uint32_t rank, const char *key, void *out, size_t cap,
                                 size_t *len)
{
    if (!n || !key || (!out && cap)) return DSM_ERR_INVALID;
    if (rank >= DSM_MAX_RANKS) return DSM_ERR_NO_PEER;
    dsm_status_t st = DSM_OK;
    pthread_mutex_lock(&n->lock);
    const dsm_ctl_values_t *values = n->values[rank];
    const dsm_ctl_value_t *v = values ? dsm_ctl_values_find(values, key) : NULL;
    if (!values) {
        st = DSM_ERR_NO_PEER;
    } else if (!v) {
        st = DSM_ERR_INVALID;
    } else {
        if (len) *len = v->value_len;
        if (v->value_len > cap) st = DSM_ERR_TOO_BIG;
        else if (v->value_len) memcpy(out, v->value, v->value_len);
    }
    pthread_mutex_unlock(&n->lock);
    return st;
}

dsm_status_t dsm_node_on_peer_join(dsm_node_t *n, dsm_peer_join_cb_t cb, void *ctx)
{
    if (!n || !cb) return DSM_ERR_INVALID;
    if (n->joined) return DSM_ERR_STATE;
    if (n->n_join_cbs == DSM_NODE_MAX_JOIN_CBS) return DSM_ERR_TOO_BIG;
    n->join_cbs[n->n_join_cbs] = cb;
    n->join_ctx[n->n_join_cbs++] = ctx;
    return DSM_OK;
}

dsm_status_t dsm_node_member_values(dsm_node_t *n, uint32_t rank, const dsm_ctl_values_t *values)
{
    if (rank >= DSM_MAX_RANKS) return DSM_ERR_NO_PEER;
    dsm_ctl_values_t *copy = dsm_ctl_values_dup(values);
    if (!copy) return DSM_ERR_NOMEM;
    pthread_mutex_lock(&n->lock);
    dsm_ctl_values_t *old = n->values[rank];
    n->values[rank] = copy;
    pthread_mutex_unlock(&n->lock);
    free(old);
    return DSM_OK;
}

dsm_status_t dsm_node_run_join_hooks(dsm_node_t *n, uint32_t rank)
{
    /* The hooks were set before join: no lock needed to read them. */
    for (int i = 0; i < n->n_join_cbs; i++) {
        dsm_status_t st = n->join_cbs[i](n->join_ctx[i], rank);
        if (st != DSM_OK) {
            DSM_WARN("node", "rank %u: a join hook refused member %u: %s", n->rank, rank, dsm_strerror(st));
            return st;
        }
    }
    return DSM_OK;
}

void dsm_node_values_free(dsm_node_t *n)
{
    free(n->published);
    n->published = NULL;
    for (int r = 0; r < DSM_MAX_RANKS; r++) {
        free(n->values[r]);
        n->values[r] = NULL;
    }
}
