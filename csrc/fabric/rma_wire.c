/* Encoder and bounds-checked decoder of the emulated one-sided request. */
#include "fabric/rma_wire.h"

#include <string.h>

#include "dsm/fabric.h"
#include "util/bytes.h"

void dsm_rma_wire_encode(const dsm_rma_wire_t *m, uint8_t out[DSM_RMA_WIRE_LEN])
{
    memset(out, 0, 8);
    out[0] = m->op;
    dsm_put_u64(out + 8, m->addr);
    dsm_put_u64(out + 16, m->length);
    dsm_put_u64(out + 24, m->operand);
    dsm_put_u64(out + 32, m->operand2);
}

dsm_status_t dsm_rma_wire_decode(const void *buf, size_t len, dsm_rma_wire_t *out)
{
    memset(out, 0, sizeof *out);
    if (buf == NULL || len < DSM_RMA_WIRE_LEN)
        return DSM_ERR_PROTO;
    dsm_reader_t r = dsm_reader(buf, len);
    const uint8_t *head = dsm_take(&r, 8);
    out->addr = dsm_take_u64(&r);
    out->length = dsm_take_u64(&r);
    out->operand = dsm_take_u64(&r);
    out->operand2 = dsm_take_u64(&r);
    if (!r.ok || head == NULL)
        return DSM_ERR_PROTO;
    out->op = head[0];
    for (int i = 1; i < 8; i++)
        if (head[i] != 0)
            return DSM_ERR_PROTO;
    if (out->addr + out->length < out->addr)
        return DSM_ERR_PROTO;
    size_t extra = len - DSM_RMA_WIRE_LEN;
    switch (out->op) {
    case DSM_RMA_GET:
        if (extra != 0 || out->length > DSM_AM_MAX_PAYLOAD)
            return DSM_ERR_PROTO;
        break;
    case DSM_RMA_PUT:
        if (out->length > DSM_AM_MAX_PAYLOAD || extra != out->length)
            return DSM_ERR_PROTO;
        out->data = out->length ? (const uint8_t *)buf + DSM_RMA_WIRE_LEN : NULL;
        break;
    case DSM_RMA_FADD:
    case DSM_RMA_CAS:
    case DSM_RMA_SWAP:
        if (extra != 0 || out->length != sizeof(uint64_t) || (out->addr & 7) != 0)
            return DSM_ERR_PROTO;
        if (out->op != DSM_RMA_CAS && out->operand2 != 0)
            return DSM_ERR_PROTO;
        break;
    default:
        return DSM_ERR_PROTO;
    }
    return DSM_OK;
}
