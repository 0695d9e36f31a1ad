/* own's wire messages: encoder and bounds-checked decoder. */
#include "own/msg.h"

#include <string.h>

#include "dsm/heap.h"
#include "own/object.h"
#include "util/bytes.h"

static uint32_t body_len(uint16_t type)
{
    switch (type) {
    case OWN_MSG_FREE: return 12;
    case OWN_MSG_LOCK: case OWN_MSG_UNLOCK: return 8;
    case OWN_MSG_UNLOCK_BOX: return 16;
    case OWN_MSG_GRANT: return 20;
    case OWN_MSG_ALLOC: return 12;
    default: return 0;
    }
}

size_t own_msg_encode(const own_msg_t *m, uint8_t *buf)
{
    uint32_t body = body_len(m->type);
    if (body == 0)
        return 0;
    uint8_t *p = dsm_put_msg_header(buf, OWN_MSG_MAGIC, OWN_MSG_VERSION, m->type, body);
    if (m->type == OWN_MSG_ALLOC) {
        dsm_put_u64(p, m->arg);
        dsm_put_u32(p + 8, m->obj_type);
        return OWN_MSG_HEADER_LEN + body;
    }
    dsm_put_u64(p, m->g);
    if (m->type == OWN_MSG_FREE)
        dsm_put_u32(p + 8, m->obj_type);
    if (m->type == OWN_MSG_UNLOCK_BOX || m->type == OWN_MSG_GRANT)
        dsm_put_u64(p + 8, m->arg);
    if (m->type == OWN_MSG_GRANT)
        dsm_put_u32(p + 16, m->obj_type);
    return OWN_MSG_HEADER_LEN + body;
}

dsm_status_t own_msg_decode(const void *data, size_t len, own_msg_t *out)
{
    memset(out, 0, sizeof *out);
    dsm_reader_t r;
    uint16_t type;
    if (!dsm_take_msg(&r, data, len, OWN_MSG_MAGIC, OWN_MSG_VERSION, body_len, &type))
        return DSM_ERR_PROTO;
    out->type = type;
    if (type == OWN_MSG_ALLOC) {
        out->arg = dsm_take_u64(&r);
        out->obj_type = dsm_take_u32(&r);
        return out->arg <= OWN_MAX_SIZE && out->obj_type != 0 && out->obj_type <= OWN_MAX_TYPE ? DSM_OK
                                                                                                 : DSM_ERR_PROTO;
    }
    out->g = dsm_take_u64(&r);
    if (dsm_gaddr_offset(out->g) == 0)
        return DSM_ERR_PROTO;
    if (type == OWN_MSG_UNLOCK_BOX) {
        out->arg = dsm_take_u64(&r);
        if (dsm_gaddr_offset(out->arg) == 0)
            return DSM_ERR_PROTO;
    }
    if (type == OWN_MSG_GRANT) {
        out->arg = dsm_take_u64(&r);
        if (out->arg > OWN_MAX_SIZE)
            return DSM_ERR_PROTO;
    }
    if (type != OWN_MSG_FREE && type != OWN_MSG_GRANT)
        return dsm_gaddr_strip(out->g) == out->g ? DSM_OK : DSM_ERR_PROTO;
    out->obj_type = dsm_take_u32(&r);
    if (out->obj_type == 0 || out->obj_type > OWN_MAX_TYPE)
        return DSM_ERR_PROTO;
    return DSM_OK;
}
