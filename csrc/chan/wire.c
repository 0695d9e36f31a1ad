/* chan's wire format (wire.h): JOIN / CONNECT / LEAVE encode and decode. */
#include <string.h>

#include "chan/wire.h"
#include "util/bytes.h"

int chan_name_ok(const char *s, size_t n, size_t max)
{
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return 0;
    return 1;
}

static int msg_ok(const chan_msg_t *m)
{
    if (m->type < CHAN_MSG_JOIN || m->type > CHAN_MSG_LEAVE || m->nregions > DSM_CHAN_MAX_REGIONS ||
        m->nshape > DSM_CHAN_MAX_SHAPE)
        return 0;
    if (m->type == CHAN_MSG_LEAVE && (m->kind != 0 || m->nregions != 0 || m->nshape != 0))
        return 0;
    if (!chan_name_ok(m->name, strnlen(m->name, sizeof m->name), DSM_CHAN_NAME_MAX))
        return 0;
    for (unsigned i = 0; i < m->nregions; i++) {
        const chan_wire_region_t *r = &m->regions[i];
        if (!chan_name_ok(r->name, strnlen(r->name, sizeof r->name), DSM_CHAN_REGION_NAME_MAX) || r->size == 0 ||
            r->offset + r->size < r->offset)
            return 0;
    }
    return 1;
}

size_t chan_msg_encode(const chan_msg_t *m, uint8_t *buf)
{
    if (!msg_ok(m))
        return 0;
    uint8_t *p = buf + DSM_MSG_HEADER_LEN;
    dsm_put_u32(p, m->kind);
    p += 4;
    size_t n = strlen(m->name);
    *p++ = (uint8_t)n;
    memcpy(p, m->name, n);
    p += n;
    *p++ = m->nregions;
    for (unsigned i = 0; i < m->nregions; i++) {
        const chan_wire_region_t *r = &m->regions[i];
        size_t k = strlen(r->name);
        *p++ = (uint8_t)k;
        memcpy(p, r->name, k);
        p += k;
        dsm_put_u64(p, r->size);
        dsm_put_u64(p + 8, r->offset);
        p += 16;
    }
    *p++ = m->nshape;
    for (unsigned i = 0; i < m->nshape; i++, p += 8) dsm_put_u64(p, m->shape[i]);
    size_t len = (size_t)(p - buf);
    dsm_put_msg_header(buf, CHAN_MSG_MAGIC, CHAN_MSG_VERSION, m->type, (uint32_t)(len - DSM_MSG_HEADER_LEN));
    return len;
}

/* A length-prefixed name into out (NUL-terminated), checked. */
static int take_name(dsm_reader_t *r, char *out, size_t max)
{
    const uint8_t *lp = dsm_take(r, 1);
    if (lp == NULL)
        return 0;
    const uint8_t *s = dsm_take(r, *lp);
    if (s == NULL || !chan_name_ok((const char *)s, *lp, max))
        return 0;
    memcpy(out, s, *lp);
    out[*lp] = '\0';
    return 1;
}

dsm_status_t chan_msg_decode(const void *data, size_t len, chan_msg_t *out)
{
    dsm_reader_t r;
    uint16_t type;
    if (!dsm_take_msg_frame(&r, data, len, CHAN_MSG_MAGIC, CHAN_MSG_VERSION, &type))
        return DSM_ERR_PROTO;
    memset(out, 0, sizeof *out);
    out->type = type;
    out->kind = dsm_take_u32(&r);
    if (!take_name(&r, out->name, DSM_CHAN_NAME_MAX))
        return DSM_ERR_PROTO;
    const uint8_t *np = dsm_take(&r, 1);
    if (np == NULL || *np > DSM_CHAN_MAX_REGIONS)
        return DSM_ERR_PROTO;
    out->nregions = *np;
    for (unsigned i = 0; i < out->nregions; i++) {
        chan_wire_region_t *reg = &out->regions[i];
        if (!take_name(&r, reg->name, DSM_CHAN_REGION_NAME_MAX))
            return DSM_ERR_PROTO;
        reg->size = dsm_take_u64(&r);
        reg->offset = dsm_take_u64(&r);
    }
    const uint8_t *sp = dsm_take(&r, 1);
    if (sp == NULL || *sp > DSM_CHAN_MAX_SHAPE)
        return DSM_ERR_PROTO;
    out->nshape = *sp;
    for (unsigned i = 0; i < out->nshape; i++) out->shape[i] = dsm_take_u64(&r);
    if (!r.ok || r.left != 0 || !msg_ok(out))
        return DSM_ERR_PROTO;
    return DSM_OK;
}
