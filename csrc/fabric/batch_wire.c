/* Encoder and bounds-checked decoder of the batched reply's payload. */
#include "fabric/batch_wire.h"

#include <string.h>

#include "fabric/am_wire.h"
#include "util/bytes.h"

bool dsm_batch_wire_append(uint8_t *buf, size_t cap, size_t *used, uint64_t request_id, int32_t status,
                           const void *data, size_t len)
{
    if (len > UINT16_MAX || *used > cap || cap - *used < DSM_BATCH_ENTRY_HDR + len)
        return false;
    uint8_t *p = buf + *used;
    dsm_put_u64(p, request_id);
    dsm_put_u16(p + 8, (uint16_t)(int16_t)status);
    dsm_put_u16(p + 10, (uint16_t)len);
    if (len)
        memcpy(p + DSM_BATCH_ENTRY_HDR, data, len);
    *used += DSM_BATCH_ENTRY_HDR + len;
    return true;
}

/* One entry at *off without trusting anything: DSM_OK and *off advanced,
 * or DSM_ERR_PROTO. */
static dsm_status_t take_entry(const uint8_t *b, size_t len, size_t *off, dsm_batch_entry_t *out)
{
    if (*off > len || len - *off < DSM_BATCH_ENTRY_HDR)
        return DSM_ERR_PROTO;
    const uint8_t *p = b + *off;
    out->request_id = dsm_get_u64(p);
    out->status = (int16_t)dsm_get_u16(p + 8);
    out->len = dsm_get_u16(p + 10);
    if (out->request_id == 0 || out->status > 0 || out->status < DSM_AM_WIRE_MIN_STATUS ||
        len - *off - DSM_BATCH_ENTRY_HDR < out->len)
        return DSM_ERR_PROTO;
    out->data = out->len ? p + DSM_BATCH_ENTRY_HDR : NULL;
    *off += DSM_BATCH_ENTRY_HDR + out->len;
    return DSM_OK;
}

dsm_status_t dsm_batch_wire_check(const void *buf, size_t len, uint64_t count)
{
    if (buf == NULL || count == 0)
        return DSM_ERR_PROTO;
    size_t off = 0;
    dsm_batch_entry_t e;
    for (uint64_t i = 0; i < count; i++)
        if (take_entry(buf, len, &off, &e) != DSM_OK)
            return DSM_ERR_PROTO;
    return off == len ? DSM_OK : DSM_ERR_PROTO;
}

bool dsm_batch_wire_next(const void *buf, size_t len, size_t *off, dsm_batch_entry_t *out)
{
    return *off < len && take_entry(buf, len, off, out) == DSM_OK;
}
