/* dir's wire messages and object header: encoders and checked decoders. */
#include "dir/msg.h"

#include <string.h>

#include "dsm/heap.h"
#include "util/bytes.h"

static size_t body_len(const dir_msg_t *m)
{
    switch (m->type) {
    case DIR_MSG_READ: case DIR_MSG_WRITE: case DIR_MSG_DROP: case DIR_MSG_INV: case DIR_MSG_ACK: return 8;
    case DIR_MSG_RECALL: return 9;
    case DIR_MSG_DATA: case DIR_MSG_DATA_AFTER: return 12 + (size_t)m->len;
    default: return SIZE_MAX;
    }
}

size_t dir_msg_size(const dir_msg_t *m)
{
    size_t b = body_len(m);
    return b == SIZE_MAX ? 0 : DIR_MSG_HEADER_LEN + b;
}

size_t dir_msg_encode(const dir_msg_t *m, uint8_t *buf)
{
    size_t b = body_len(m);
    if (b == SIZE_MAX)
        return 0;
    uint8_t *p = dsm_put_msg_header(buf, DIR_MSG_MAGIC, DIR_MSG_VERSION, m->type, (uint32_t)b);
    dsm_put_u64(p, m->addr);
    if (m->type == DIR_MSG_RECALL)
        p[8] = m->mode;
    if (dir_msg_has_object(m->type)) {
        dsm_put_u32(p + 8, m->len);
        if (m->len)
            memcpy(p + 12, m->data, m->len);
    }
    return DIR_MSG_HEADER_LEN + b;
}

dsm_status_t dir_msg_decode(const void *data, size_t len, dir_msg_t *out)
{
    memset(out, 0, sizeof *out);
    dsm_reader_t r;
    uint16_t type;
    if (!dsm_take_msg_frame(&r, data, len, DIR_MSG_MAGIC, DIR_MSG_VERSION, &type))
        return DSM_ERR_PROTO;
    out->type = type;
    out->addr = dsm_take_u64(&r);
    if (!r.ok || dsm_gaddr_strip(out->addr) != out->addr || dsm_gaddr_offset(out->addr) == 0)
        return DSM_ERR_PROTO;
    switch (type) {
    case DIR_MSG_READ: case DIR_MSG_WRITE: case DIR_MSG_DROP: case DIR_MSG_INV: case DIR_MSG_ACK:
        break;
    case DIR_MSG_RECALL: {
        const uint8_t *m = dsm_take(&r, 1);
        if (m == NULL || *m > DIR_RECALL_INVALIDATE)
            return DSM_ERR_PROTO;
        out->mode = *m;
        break;
    }
    case DIR_MSG_DATA: case DIR_MSG_DATA_AFTER:
        out->len = dsm_take_u32(&r);
        if (!r.ok || out->len != r.left || out->len < DIR_OBJ_HEADER || out->len > DIR_MAX_OBJECT)
            return DSM_ERR_PROTO;
        out->data = dsm_take(&r, out->len);
        break;
    default:
        return DSM_ERR_PROTO;
    }
    if (!r.ok || r.left != 0)
        return DSM_ERR_PROTO;
    return DSM_OK;
}

void dir_obj_header_encode(uint32_t type, uint64_t size, uint8_t out[DIR_OBJ_HEADER])
{
    dsm_put_u32(out, DIR_OBJ_MAGIC);
    dsm_put_u32(out + 4, type);
    dsm_put_u64(out + 8, size);
}

dsm_status_t dir_obj_header_decode(const void *data, size_t len, uint64_t room, uint32_t *type, uint64_t *size)
{
    if (data == NULL || len < DIR_OBJ_HEADER)
        return DSM_ERR_BAD_ADDR;
    const uint8_t *p = data;
    uint32_t t = dsm_get_u32(p + 4);
    uint64_t s = dsm_get_u64(p + 8);
    if (dsm_get_u32(p) != DIR_OBJ_MAGIC || t == 0 || s > DIR_MAX_OBJECT - DIR_OBJ_HEADER ||
        s + DIR_OBJ_HEADER > room)
        return DSM_ERR_BAD_ADDR;
    *type = t;
    *size = s;
    return DSM_OK;
}
