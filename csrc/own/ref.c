/* Copies of a shared borrow (DRust's `&T` is Copy, §4.1.1): a node that
 * holds a shared borrow may hand its object's coloured address, with the
 * type and size, to others, which read the object through it without
 * touching the box's owner record: a local object directly, a remote one
 * through this node's cache keyed by that coloured address (Algorithm 2:
 * a hit costs nothing, a miss one read). A copy is valid while the
 * lender's borrow is live, which is what keeps the object unwritten. */
#include <string.h>

#include "dsm/heap.h"
#include "own/internal.h"
#include "own/object.h"
#include "util/log.h"

#define LOG_MOD "own"

typedef struct copy_ctx {
    own_node_t *o;
    uint32_t type;
    uint64_t size;
} copy_ctx_t;

static int header_is(const uint8_t *p, uint32_t type, uint64_t size)
{
    own_obj_header_t h;
    return own_obj_header_decode(p, OWN_OBJ_HEADER, &h) == DSM_OK && h.type == type && h.size == size;
}

static dsm_status_t fetch(void *ctx, uint64_t key, void *buf, size_t len)
{
    copy_ctx_t *c = ctx;
    dsm_status_t st = dsm_read(c->o->node, dsm_gaddr_strip(key), buf, len);
    own_count(c->o, C_MESSAGES, 2);
    own_count(c->o, C_BYTES, len);
    if (st == DSM_OK && !header_is(buf, c->type, c->size))
        st = DSM_ERR_BAD_ADDR;
    return st;
}

dsm_status_t dsm_own_ref_copy(dsm_node_t *node, dsm_gaddr_t g, uint32_t type, size_t size, dsm_own_ref_t *out)
{
    own_node_t *o = own_lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    memset(out, 0, sizeof *out);
    if (o == NULL)
        return DSM_ERR_STATE;
    if (dsm_gaddr_offset(g) == 0 || type == 0 || type > OWN_MAX_TYPE || (uint64_t)size > OWN_MAX_SIZE) {
        DSM_WARN(LOG_MOD, "reference copy of 0x%llx refused: not an object address, type and size",
                 (unsigned long long)g);
        return DSM_ERR_INVALID;
    }
    if (own_is_local(o, g)) {
        uint8_t *p = dsm_local_ptr(node, dsm_gaddr_strip(g));
        if (p == NULL || !header_is(p, type, size)) {
            DSM_WARN(LOG_MOD, "reference copy: 0x%llx is not a live object of type %u and %zu bytes",
                     (unsigned long long)g, type, size);
            return DSM_ERR_BAD_ADDR;
        }
        own_count(o, C_LOCAL, 1);
        out->data = p + OWN_OBJ_HEADER;
    } else {
        copy_ctx_t c = {o, type, size};
        const uint8_t *copy;
        int hit = 0;
        dsm_status_t st = own_cache_acquire(o->cache, g, OWN_OBJ_HEADER + size, fetch, &c, &copy, &hit);
        if (st != DSM_OK) {
            DSM_WARN(LOG_MOD, "reference copy of 0x%llx: unreadable: %s", (unsigned long long)g, dsm_strerror(st));
            return st;
        }
        own_count(o, hit ? C_HITS : C_MISSES, 1);
        out->data = copy + OWN_OBJ_HEADER;
        out->cached = 1;
    }
    out->g = g;
    out->size = size;
    out->type = type;
    return DSM_OK;
}

dsm_status_t dsm_own_ref_copy_release(dsm_node_t *node, dsm_own_ref_t *ref)
{
    own_node_t *o = own_lookup(node);
    if (ref == NULL)
        return DSM_ERR_INVALID;
    if (o == NULL)
        return DSM_ERR_STATE;
    if (ref->data == NULL || ref->box != 0) {
        DSM_WARN(LOG_MOD, "release of a reference copy that is not live (or is a borrow: dsm_own_box_release)");
        return DSM_ERR_STATE;
    }
    dsm_status_t st = ref->cached ? own_cache_release(o->cache, ref->g) : DSM_OK;
    ref->data = NULL;
    return st;
}
