/* Encoder and bounds-checked decoder of the active-message wire header. */
#include "fabric/am_wire.h"

#include <string.h>

#include "dsm/fabric.h"
#include "util/bytes.h"

void dsm_am_wire_encode(const dsm_am_wire_t *h, uint8_t out[DSM_AM_WIRE_HEADER_LEN])
{
    dsm_put_u32(out + 0, DSM_AM_WIRE_MAGIC);
    dsm_put_u16(out + 4, DSM_AM_WIRE_VERSION);
    dsm_put_u16(out + 6, h->handler);
    dsm_put_u32(out + 8, h->payload_len);
    dsm_put_u32(out + 12, h->src_rank);
    dsm_put_u64(out + 16, h->request_id);
    dsm_put_u16(out + 24, h->flags);
    dsm_put_u32(out + 26, (uint32_t)h->status);
}

dsm_status_t dsm_am_wire_decode(const void *hdr, size_t hdr_len, size_t payload_len,
                                dsm_am_wire_t *out)
{
    memset(out, 0, sizeof *out);
    if (hdr == NULL || hdr_len != DSM_AM_WIRE_HEADER_LEN)
        return DSM_ERR_PROTO;

    dsm_reader_t r = dsm_reader(hdr, hdr_len);
    uint32_t magic = dsm_take_u32(&r);
    uint16_t version = dsm_take_u16(&r);
    out->handler = dsm_take_u16(&r);
    out->payload_len = dsm_take_u32(&r);
    out->src_rank = dsm_take_u32(&r);
    out->request_id = dsm_take_u64(&r);
    out->flags = dsm_take_u16(&r);
    out->status = (int32_t)dsm_take_u32(&r);
    if (!r.ok || r.left != 0 || magic != DSM_AM_WIRE_MAGIC || version != DSM_AM_WIRE_VERSION)
        return DSM_ERR_PROTO;
    if (out->flags > DSM_AM_KIND_REPLY)
        return DSM_ERR_PROTO;
    if (out->flags != DSM_AM_KIND_PLAIN && out->request_id == 0)
        return DSM_ERR_PROTO;
    if (out->src_rank >= DSM_FABRIC_MAX_PEERS)
        return DSM_ERR_PROTO;
    out->addressable = 1;

    if (out->payload_len > DSM_AM_MAX_PAYLOAD || (size_t)out->payload_len != payload_len)
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
