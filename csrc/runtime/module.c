/* The module table's ids: slots and handler-id blocks assigned once per
 * process in table order, the table's signature ("name:count ..."), a
 * module's attach to a node (slot, handlers, the published signature), and
 * the check that a peer runs the same table (dsm/module.h). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dsm/module.h"
#include "runtime/internal.h"
#include "runtime/node_internal.h"
#include "util/log.h"

/* Every name and count, with room to spare: at most DSM_NODE_MAX_MODULES
 * entries of a short name and a count below 64. */
enum { SIGNATURE_MAX = DSM_NODE_MAX_MODULES * (DSM_NODE_MAX_KEY + 8) };

static pthread_once_t assign_once = PTHREAD_ONCE_INIT;
static dsm_status_t assign_status;
static char signature[SIGNATURE_MAX];

static int key_taken(size_t upto, const char *key)
{
    for (size_t i = 0; i < upto; i++)
        for (const char *const *k = dsm_module_table[i]->keys; k && *k; k++)
            if (strcmp(*k, key) == 0) return 1;
    return 0;
}

static dsm_status_t assign_all(void)
{
    if (dsm_module_count > DSM_NODE_MAX_MODULES) {
        DSM_ERROR("module", "the module table has %zu modules, a node %d slots", dsm_module_count,
                  (int)DSM_NODE_MAX_MODULES);
        return DSM_ERR_TOO_BIG;
    }
    unsigned next = DSM_AM_MODULE_FIRST;
    size_t at = 0;
    for (size_t i = 0; i < dsm_module_count; i++) {
        dsm_module_t *m = dsm_module_table[i];
        for (size_t j = 0; j < i; j++)
            if (strcmp(dsm_module_table[j]->name, m->name) == 0) {
                DSM_ERROR("module", "two modules are named '%s'", m->name);
                return DSM_ERR_EXISTS;
            }
        for (size_t k = 0; m->keys && m->keys[k]; k++)
            if (key_taken(i, m->keys[k]) || strcmp(m->keys[k], DSM_MODULES_PUBLISH_KEY) == 0) {
                DSM_ERROR("module", "module '%s' publishes '%s', which another owns", m->name, m->keys[k]);
                return DSM_ERR_EXISTS;
            }
        if (next + m->am_count > DSM_AM_USER_FIRST) {
            DSM_ERROR("module", "module '%s' needs %u handler ids: the modules' range %d..%d is full", m->name,
                      m->am_count, (int)DSM_AM_MODULE_FIRST, (int)DSM_AM_USER_FIRST - 1);
            return DSM_ERR_TOO_BIG;
        }
        m->slot = (int)i;
        m->am_base = (uint16_t)next;
        next += m->am_count;
        int w = snprintf(signature + at, sizeof signature - at, "%s%s:%u", i ? " " : "", m->name, m->am_count);
        if (w < 0 || (size_t)w >= sizeof signature - at) return DSM_ERR_TOO_BIG;
        at += (size_t)w;
    }
    return DSM_OK;
}

static void assign_once_fn(void) { assign_status = assign_all(); }

dsm_status_t dsm_modules_assign(void)
{
    pthread_once(&assign_once, assign_once_fn);
    return assign_status;
}

const char *dsm_modules_signature(void)
{
    return dsm_modules_assign() == DSM_OK ? signature : "";
}

const dsm_module_t *dsm_module_find(const char *name)
{
    for (size_t i = 0; name && i < dsm_module_count; i++)
        if (strcmp(dsm_module_table[i]->name, name) == 0) return dsm_module_table[i];
    return NULL;
}

int dsm_module_handler_id(const char *module, unsigned rel)
{
    if (dsm_modules_assign() != DSM_OK) return -1;
    const dsm_module_t *m = dsm_module_find(module);
    return m && rel < m->am_count ? (int)(m->am_base + rel) : -1;
}

dsm_status_t dsm_node_add_module(dsm_node_t *node, const dsm_module_t *m, void *state)
{
    if (!m || !state) return DSM_ERR_INVALID;
    dsm_status_t st = dsm_modules_assign();
    if (st != DSM_OK) return st;
    if (m->am_base == 0 || m->slot < 0 || (size_t)m->slot >= dsm_module_count ||
        dsm_module_table[m->slot] != m) {
        DSM_ERROR("module", "module '%s' is not in the module table (a dsm_layer(... MODULE) line)", m->name);
        return DSM_ERR_STATE;
    }
    if (!node) return DSM_ERR_INVALID;
    if (node->joined) return DSM_ERR_STATE;
    if (dsm_node_module(node, m->slot)) {
        DSM_ERROR("module", "%s is attached to this node already", m->name);
        return DSM_ERR_EXISTS;
    }
    /* All or nothing, so that on an error the caller still owns state: the
     * handlers first (no peer can send before the join), then the table's
     * list (the first module publishes it; peers compare it with theirs in
     * dsm_node_modules_check), the slot last. */
    uint16_t i = 0;
    for (; i < m->am_count; i++) {
        if (!m->handlers || !m->handlers[i]) continue;
        if ((st = dsm_fabric_am_register(node->fabric, dsm_module_am(m, i), m->handlers[i], state)) != DSM_OK) {
            DSM_ERROR("module", "cannot register %s's handler %u (id %u): %s", m->name, i, dsm_module_am(m, i),
                      dsm_strerror(st));
            break;
        }
    }
    if (st == DSM_OK && (!node->published || !dsm_ctl_values_find(node->published, DSM_MODULES_PUBLISH_KEY)))
        st = dsm_node_publish(node, DSM_MODULES_PUBLISH_KEY, signature, strlen(signature));
    if (st == DSM_OK) st = dsm_node_set_module(node, m->slot, state, m->detach);
    if (st != DSM_OK)
        while (i-- > 0)
            if (m->handlers && m->handlers[i]) dsm_fabric_am_register(node->fabric, dsm_module_am(m, i), NULL, NULL);
    return st;
}

dsm_status_t dsm_node_modules_check(dsm_node_t *node, uint32_t rank)
{
    if (!node->published || !dsm_ctl_values_find(node->published, DSM_MODULES_PUBLISH_KEY)) return DSM_OK;
    char theirs[SIGNATURE_MAX];
    size_t len = 0;
    dsm_status_t st = dsm_node_peer_value(node, rank, DSM_MODULES_PUBLISH_KEY, theirs, sizeof theirs - 1, &len);
    if (st == DSM_ERR_INVALID) return DSM_OK;   /* a runtime-only member sends no module message */
    if (st == DSM_OK) {
        theirs[len] = '\0';
        if (strcmp(theirs, signature) == 0) return DSM_OK;
    } else {
        snprintf(theirs, sizeof theirs, "(unreadable: %s)", dsm_strerror(st));
    }
    DSM_ERROR("module",
              "rank %u: refusing member %u: its modules are [%s], this node's [%s] (another build: their "
              "handler ids differ; every node must run the same)",
              node->rank, rank, theirs, signature);
    return DSM_ERR_PROTO;
}
