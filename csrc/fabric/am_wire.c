/* Encoders and bounds-checked decoders of the active-message wire header
 * and of the prefix of a fabric address. */
#include "fabric/am_wire.h"

#include <string.h>

#include "dsm/fabric.h"
#include "util/bytes.h"

_Static_assert(DSM_FABRIC_MAX_PEERS <= 0x10000 && DSM_AM_MAX_HANDLERS <= 0x100 &&
                   DSM_AM_WIRE_MIN_STATUS >= INT16_MIN,
               "ranks, handler ids and reply statuses fit their wire fields");

void dsm_am_wire_encode(const dsm_am_wire_t *h, uint8_t out[DSM_AM_WIRE_HEADER_LEN])
{
    out[0] = DSM_AM_WIRE_MAGIC;
    out[1] = DSM_AM_WIRE_VERSION;
    out[2] = (uint8_t)h->flags;
    out[3] = (uint8_t)h->handler;
    dsm_put_u16(out + 4, (uint16_t)h->src_rank);
    dsm_put_u16(out + 6, (uint16_t)(int16_t)h->status);
    dsm_put_u64(out + 8, h->request_id);
}

dsm_status_t dsm_am_wire_decode(const void *hdr, size_t hdr_len, size_t payload_len,
                                dsm_am_wire_t *out)
{
    memset(out, 0, sizeof *out);
    if (hdr == NULL || hdr_len != DSM_AM_WIRE_HEADER_LEN)
        return DSM_ERR_PROTO;

    const uint8_t *b = hdr;
    if (b[0] != DSM_AM_WIRE_MAGIC || b[1] != DSM_AM_WIRE_VERSION)
        return DSM_ERR_PROTO;
    out->flags = b[2];
    out->handler = b[3];
    out->src_rank = dsm_get_u16(b + 4);
    out->status = (int16_t)dsm_get_u16(b + 6);
    out->request_id = dsm_get_u64(b + 8);
    if (out->flags > DSM_AM_KIND_REQUEST_BATCH)
        return DSM_ERR_PROTO;
    if (out->flags != DSM_AM_KIND_PLAIN && out->request_id == 0)
        return DSM_ERR_PROTO;
    if (out->src_rank >= DSM_FABRIC_MAX_PEERS)
        return DSM_ERR_PROTO;
    out->addressable = 1;

    out->payload_len = payload_len > UINT32_MAX ? UINT32_MAX : (uint32_t)payload_len;
    if (payload_len > DSM_AM_MAX_PAYLOAD)
        return DSM_ERR_PROTO;
    if (out->flags == DSM_AM_KIND_REPLY) {
        if (out->status > 0 || out->status < DSM_AM_WIRE_MIN_STATUS)
            return DSM_ERR_PROTO;
    } else if (out->status != 0) {
        return DSM_ERR_PROTO;
    }
    if (out->handler >= DSM_AM_MAX_HANDLERS)
        return DSM_ERR_NO_HANDLER;
    return DSM_OK;
}

void dsm_fabric_addr_prefix(uint8_t out[DSM_FABRIC_ADDR_PREFIX])
{
    out[0] = DSM_FABRIC_ADDR_MAGIC;
    out[1] = DSM_AM_WIRE_VERSION;
    out[2] = out[3] = 0;
}

dsm_status_t dsm_fabric_addr_decode(const void *addr, size_t len, unsigned *version, const void **transport,
                                    size_t *transport_len)
{
    const uint8_t *b = addr;
    *version = 0;
    *transport = NULL;
    *transport_len = 0;
    if (b == NULL || len <= DSM_FABRIC_ADDR_PREFIX || b[0] != DSM_FABRIC_ADDR_MAGIC || b[2] != 0 || b[3] != 0)
        return DSM_ERR_PROTO;
    *version = b[1];
    if (b[1] != DSM_AM_WIRE_VERSION)
        return DSM_ERR_PROTO;
    *transport = b + DSM_FABRIC_ADDR_PREFIX;
    *transport_len = len - DSM_FABRIC_ADDR_PREFIX;
    return DSM_OK;
}
