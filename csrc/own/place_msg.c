/* own's placement and concurrency wire formats: encoders and bounds-checked
 * decoders (see place_msg.h). */
#include "own/place_msg.h"

#include <string.h>

#include "dsm/heap.h"
#include "own/object.h"
#include "util/bytes.h"

int own_box_handle_ok(uint64_t box)
{
    uint64_t off = dsm_gaddr_offset(box);
    return dsm_gaddr_colour(box) != 0 && off != 0 && (off & 7) == 0;
}

void own_task_encode(const own_task_hdr_t *h, uint8_t out[OWN_TASK_HEADER])
{
    dsm_put_u32(out, OWN_TASK_MAGIC);
    dsm_put_u16(out + 4, OWN_PLACE_VERSION);
    dsm_put_u16(out + 6, h->flags);
    dsm_put_u32(out + 8, h->task);
    dsm_put_u32(out + 12, h->origin);
    dsm_put_u64(out + 16, h->box);
}

dsm_status_t own_task_decode(const void *data, size_t len, own_task_hdr_t *out, const void **args,
                             size_t *args_len)
{
    memset(out, 0, sizeof *out);
    *args = NULL;
    *args_len = 0;
    dsm_reader_t r = dsm_reader(data, data ? len : 0);
    uint32_t magic = dsm_take_u32(&r);
    uint16_t version = dsm_take_u16(&r);
    out->flags = dsm_take_u16(&r);
    out->task = dsm_take_u32(&r);
    out->origin = dsm_take_u32(&r);
    out->box = dsm_take_u64(&r);
    if (!r.ok || magic != OWN_TASK_MAGIC || version != OWN_PLACE_VERSION ||
        (out->flags & ~OWN_TASK_FIND) != 0 || (out->flags != 0 && out->box == 0) ||
        (out->box != 0 && !own_box_handle_ok(out->box)))
        return DSM_ERR_PROTO;
    *args = r.p;
    *args_len = r.left;
    return DSM_OK;
}

void own_pair_encode(uint32_t magic, uint32_t a, uint64_t b, uint8_t out[16])
{
    dsm_put_u32(out, magic);
    dsm_put_u32(out + 4, a);
    dsm_put_u64(out + 8, b);
}

dsm_status_t own_pair_decode(uint32_t magic, const void *data, size_t len, uint32_t *a, uint64_t *b)
{
    *a = 0;
    *b = 0;
    if (data == NULL || len != 16 || dsm_get_u32(data) != magic)
        return DSM_ERR_PROTO;
    *a = dsm_get_u32((const uint8_t *)data + 4);
    *b = dsm_get_u64((const uint8_t *)data + 8);
    return DSM_OK;
}

static uint32_t chan_body(uint16_t type)
{
    return type == OWN_CHAN_SEND ? 8 + OWN_CHAN_ITEM_LEN : type == OWN_CHAN_RECV || type == OWN_CHAN_FLUSH ? 8 : 0;
}

void own_chan_item_encode(const own_chan_item_t *it, uint8_t out[OWN_CHAN_ITEM_LEN])
{
    dsm_put_u64(out, it->value);
    dsm_put_u32(out + 8, it->kind);
    dsm_put_u32(out + 12, it->type);
    dsm_put_u64(out + 16, it->size);
}

static dsm_status_t item_take(dsm_reader_t *r, own_chan_item_t *it)
{
    it->value = dsm_take_u64(r);
    it->kind = dsm_take_u32(r);
    it->type = dsm_take_u32(r);
    it->size = dsm_take_u64(r);
    if (!r->ok)
        return DSM_ERR_PROTO;
    if (it->kind == OWN_CHAN_WORD)
        return it->type == 0 && it->size == 0 ? DSM_OK : DSM_ERR_PROTO;
    if (it->kind == OWN_CHAN_BOX || it->kind == OWN_CHAN_REC)
        return (it->kind == OWN_CHAN_BOX ? dsm_gaddr_offset(it->value) != 0 : own_box_handle_ok(it->value)) &&
                       it->type != 0 && it->type <= OWN_MAX_TYPE && it->size <= OWN_MAX_SIZE
                   ? DSM_OK
                   : DSM_ERR_PROTO;
    return DSM_ERR_PROTO;
}

size_t own_chan_encode(const own_chan_msg_t *m, uint8_t *buf)
{
    uint32_t body = chan_body(m->type);
    if (body == 0)
        return 0;
    dsm_put_msg_header(buf, OWN_CHAN_MAGIC, OWN_PLACE_VERSION, m->type, body);
    dsm_put_u64(buf + 12, m->chan);
    if (m->type == OWN_CHAN_SEND)
        own_chan_item_encode(&m->item, buf + 20);
    return 12 + body;
}

dsm_status_t own_chan_decode(const void *data, size_t len, own_chan_msg_t *out)
{
    memset(out, 0, sizeof *out);
    dsm_reader_t r;
    uint16_t type;
    if (!dsm_take_msg(&r, data, len, OWN_CHAN_MAGIC, OWN_PLACE_VERSION, chan_body, &type))
        return DSM_ERR_PROTO;
    out->type = type;
    out->chan = dsm_take_u64(&r);
    uint64_t off = dsm_gaddr_offset(out->chan);
    if (dsm_gaddr_colour(out->chan) != OWN_CHAN_COLOUR || off == 0 || (off & 7))
        return DSM_ERR_PROTO;
    return type == OWN_CHAN_SEND ? item_take(&r, &out->item) : DSM_OK;
}

dsm_status_t own_chan_item_decode(const void *data, size_t len, own_chan_item_t *out)
{
    memset(out, 0, sizeof *out);
    if (data == NULL || len != OWN_CHAN_ITEM_LEN)
        return DSM_ERR_PROTO;
    dsm_reader_t r = dsm_reader(data, len);
    return item_take(&r, out);
}
