/* own's wire messages: encoder and bounds-checked decoder. */
#include "own/msg.h"

#include <string.h>

#include "dsm/heap.h"
#include "own/object.h"
#include "util/bytes.h"

size_t own_msg_encode(const own_msg_t *m, uint8_t *buf)
{
    if (m->type != OWN_MSG_FREE)
        return 0;
    dsm_put_u32(buf, OWN_MSG_MAGIC);
    dsm_put_u16(buf + 4, OWN_MSG_VERSION);
    dsm_put_u16(buf + 6, m->type);
    dsm_put_u32(buf + 8, 12);
    dsm_put_u64(buf + 12, m->g);
    dsm_put_u32(buf + 20, m->obj_type);
    return OWN_MSG_MAX_LEN;
}

dsm_status_t own_msg_decode(const void *data, size_t len, own_msg_t *out)
{
    memset(out, 0, sizeof *out);
    if (data == NULL)
        return DSM_ERR_PROTO;
    dsm_reader_t r = dsm_reader(data, len);
    uint32_t magic = dsm_take_u32(&r);
    uint16_t version = dsm_take_u16(&r);
    uint16_t type = dsm_take_u16(&r);
    uint32_t blen = dsm_take_u32(&r);
    if (!r.ok || magic != OWN_MSG_MAGIC || version != OWN_MSG_VERSION || type != OWN_MSG_FREE)
        return DSM_ERR_PROTO;
    if (blen != 12 || r.left != 12)
        return DSM_ERR_PROTO;
    out->type = type;
    out->g = dsm_take_u64(&r);
    out->obj_type = dsm_take_u32(&r);
    if (dsm_gaddr_offset(out->g) == 0 || out->obj_type == 0 || out->obj_type > OWN_MAX_TYPE)
        return DSM_ERR_PROTO;
    return DSM_OK;
}
