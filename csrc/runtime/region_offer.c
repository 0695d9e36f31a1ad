/* Regions offered to peers at join (dsm_node_offer_region): a module's
 * region is published as a value, and each member's value, as the member
 * joins, becomes that rank's remote region. The heap's partition, chan's
 * arena and the tests' stand-in region share this one path. */
#include <stdlib.h>
#include <string.h>

#include "dsm/fabric.h"
#include "dsm/runtime.h"
#include "runtime/region_offer.h"
#include "util/bytes.h"
#include "util/log.h"

#define LOG_MOD "runtime"

void dsm_region_value_encode(uint64_t base, uint64_t size, const void *key, size_t key_len, uint8_t *out)
{
    dsm_put_u64(out, base);
    dsm_put_u64(out + 8, size);
    memcpy(out + DSM_REGION_VALUE_HEADER, key, key_len);
}

dsm_status_t dsm_region_value_decode(const void *value, size_t len, dsm_region_value_t *out)
{
    dsm_reader_t r = dsm_reader(value, len);
    out->base = dsm_take_u64(&r);
    out->size = dsm_take_u64(&r);
    if (!r.ok || r.left == 0)
        return DSM_ERR_PROTO;
    out->key = r.p;
    out->key_len = r.left;
    if (out->size == 0 || out->size > (1ull << 40) || out->base + out->size < out->base)
        return DSM_ERR_PROTO;
    return DSM_OK;
}

static dsm_status_t offer_join(void *ctx, uint32_t rank)
{
    dsm_region_offer_t *o = ctx;
    uint8_t value[DSM_NODE_MAX_VALUE_BYTES];
    size_t len = 0;
    if (dsm_node_peer_value(o->node, rank, o->key, value, sizeof value, &len) != DSM_OK) {
        /* Nothing offered there (a client, or a node without the module). */
        if (o->seen)
            o->seen(o->ctx, rank, 0);
        return DSM_OK;
    }
    dsm_region_value_t v;
    if (dsm_region_value_decode(value, len, &v) != DSM_OK) {
        DSM_WARN(LOG_MOD, "rank %u published a malformed region under '%s'", rank, o->key);
        return DSM_ERR_PROTO;
    }
    dsm_status_t st = dsm_fabric_remote_region_add(dsm_node_fabric(o->node), rank, o->region_id, v.base, v.size,
                                                   v.key, v.key_len);
    if (st != DSM_OK)
        return st;
    if (o->seen)
        o->seen(o->ctx, rank, v.size);
    return DSM_OK;
}

dsm_status_t dsm_node_offer_region(dsm_node_t *node, dsm_region_offer_t *offer, dsm_region_t *local)
{
    if (!node || !offer || !offer->key)
        return DSM_ERR_INVALID;
    offer->node = node;
    if (local) {
        const void *key;
        size_t key_len;
        dsm_status_t st = dsm_fabric_region_key(local, &key, &key_len);
        if (st != DSM_OK)
            return st;
        if (key_len == 0 || key_len > DSM_NODE_MAX_VALUE_BYTES - DSM_REGION_VALUE_HEADER)
            return DSM_ERR_TOO_BIG;
        uint8_t *v = malloc(DSM_REGION_VALUE_HEADER + key_len);
        if (!v)
            return DSM_ERR_NOMEM;
        dsm_region_value_encode((uint64_t)(uintptr_t)dsm_fabric_region_base(local), dsm_fabric_region_length(local),
                                key, key_len, v);
        st = dsm_node_publish(node, offer->key, v, DSM_REGION_VALUE_HEADER + key_len);
        free(v);
        if (st != DSM_OK)
            return st;
    }
    return dsm_node_on_peer_join(node, offer_join, offer);
}
