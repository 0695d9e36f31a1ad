/* The store's messages (see wire.h): encoder and bounds-checked decoder. */
#include "compact/wire.h"

#include <string.h>

#include "util/bytes.h"

/* Fixed body bytes of a type before its variable part; SIZE_MAX if unknown. */
enum { USAGE_WORDS = 8 + 2 * DSM_COMPACT_CLASSES };

/* dsm_compact_usage_t as a flat array of words, in declaration order. */
static void usage_words(const dsm_compact_usage_t *u, uint64_t *w)
{
    uint64_t head[8] = {u->active_bytes, u->object_bytes, u->blocks, u->alias_blocks,
                        u->objects, u->map_budget, u->map_used, u->block_size};
    memcpy(w, head, sizeof head);
    memcpy(w + 8, u->class_blocks, sizeof u->class_blocks);
    memcpy(w + 8 + DSM_COMPACT_CLASSES, u->class_objects, sizeof u->class_objects);
}

static void usage_from(dsm_compact_usage_t *u, const uint64_t *w)
{
    u->active_bytes = w[0], u->object_bytes = w[1], u->blocks = w[2], u->alias_blocks = w[3];
    u->objects = w[4], u->map_budget = w[5], u->map_used = w[6], u->block_size = w[7];
    memcpy(u->class_blocks, w + 8, sizeof u->class_blocks);
    memcpy(u->class_objects, w + 8 + DSM_COMPACT_CLASSES, sizeof u->class_objects);
}

static size_t fixed_len(uint16_t type)
{
    switch (type) {
    case DSM_COMPACT_MSG_ALLOC_REQ: return 8;
    case DSM_COMPACT_MSG_ALLOC_REP:
    case DSM_COMPACT_MSG_FREE_REQ:
    case DSM_COMPACT_MSG_READ_REQ:
    case DSM_COMPACT_MSG_WRITE_REP:
    case DSM_COMPACT_MSG_RELEASE_REQ:
    case DSM_COMPACT_MSG_RELEASE_REP: return 16;
    case DSM_COMPACT_MSG_FREE_REP:
    case DSM_COMPACT_MSG_REMAP_REP:
    case DSM_COMPACT_MSG_REKEY_REP: return 0;
    case DSM_COMPACT_MSG_REKEY_REQ: return 12;
    case DSM_COMPACT_MSG_READ_REP:
    case DSM_COMPACT_MSG_WRITE_REQ: return 20;
    case DSM_COMPACT_MSG_COMPACT_REQ: return 4;
    case DSM_COMPACT_MSG_COMPACT_REP: return 36;
    case DSM_COMPACT_MSG_REMAP_REQ: return 12;
    case DSM_COMPACT_MSG_LAYOUT_REQ: return 4;
    case DSM_COMPACT_MSG_LAYOUT_REP: return 16;
    case DSM_COMPACT_MSG_USAGE_REQ: return 0;
    case DSM_COMPACT_MSG_USAGE_REP: return USAGE_WORDS * 8;
    default: return SIZE_MAX;
    }
}

static int has_data(uint16_t t) { return t == DSM_COMPACT_MSG_READ_REP || t == DSM_COMPACT_MSG_WRITE_REQ; }
static int has_ptr(uint16_t t) { return (fixed_len(t) == 16 && t != DSM_COMPACT_MSG_LAYOUT_REP) || has_data(t); }

size_t dsm_compact_msg_size(const dsm_compact_msg_t *m)
{
    size_t body = fixed_len(m->type);
    if (body == SIZE_MAX)
        return 0;
    if (has_data(m->type)) {
        if (m->len > DSM_COMPACT_MSG_MAX_DATA || (m->len && m->data == NULL))
            return 0;
        body += m->len;
    }
    if (m->type == DSM_COMPACT_MSG_REMAP_REQ) {
        if (m->nremap == 0 || m->nremap > DSM_COMPACT_MSG_MAX_REMAP || m->remap == NULL)
            return 0;
        body += 8 * (size_t)m->nremap;
    }
    if (m->type == DSM_COMPACT_MSG_REKEY_REQ) {
        if (m->len == 0 || m->len > DSM_COMPACT_MSG_MAX_KEY || m->data == NULL)
            return 0;
        body += m->len;
    }
    if (m->type == DSM_COMPACT_MSG_LAYOUT_REP) {
        if (m->nremap > DSM_COMPACT_MSG_MAX_LAYOUT || (m->nremap && m->remap == NULL))
            return 0;
        body += 8 * (size_t)m->nremap;
    }
    return DSM_COMPACT_MSG_HEADER_LEN + body;
}

size_t dsm_compact_msg_encode(const dsm_compact_msg_t *m, uint8_t *buf)
{
    size_t n = dsm_compact_msg_size(m);
    if (n == 0)
        return 0;
    uint8_t *p = dsm_put_msg_header(buf, DSM_COMPACT_MSG_MAGIC, DSM_COMPACT_MSG_VERSION, m->type,
                                    (uint32_t)(n - DSM_COMPACT_MSG_HEADER_LEN));
    if (has_ptr(m->type)) {
        dsm_put_u64(p, m->ptr.w[0]);
        dsm_put_u64(p + 8, m->ptr.w[1]);
        p += 16;
    }
    switch (m->type) {
    case DSM_COMPACT_MSG_ALLOC_REQ: dsm_put_u64(p, m->size); break;
    case DSM_COMPACT_MSG_READ_REP:
    case DSM_COMPACT_MSG_WRITE_REQ:
        dsm_put_u32(p, m->len);
        if (m->len)
            memcpy(p + 4, m->data, m->len);
        break;
    case DSM_COMPACT_MSG_COMPACT_REQ: dsm_put_u32(p, (uint32_t)m->cls); break;
    case DSM_COMPACT_MSG_COMPACT_REP:
        dsm_put_u64(p, m->stats.merges);
        dsm_put_u64(p + 8, m->stats.moved);
        dsm_put_u64(p + 16, m->stats.kept);
        dsm_put_u64(p + 24, m->stats.refused_budget);
        dsm_put_u32(p + 32, (uint32_t)m->status);
        break;
    case DSM_COMPACT_MSG_REMAP_REQ:
        dsm_put_u64(p, m->seq);
        dsm_put_u32(p + 8, m->nremap);
        memcpy(p + 12, m->remap, 8 * (size_t)m->nremap);
        break;
    case DSM_COMPACT_MSG_LAYOUT_REQ: dsm_put_u32(p, m->start); break;
    case DSM_COMPACT_MSG_REKEY_REQ:
        dsm_put_u64(p, m->seq);
        dsm_put_u32(p + 8, m->len);
        memcpy(p + 12, m->data, m->len);
        break;
    case DSM_COMPACT_MSG_LAYOUT_REP:
        dsm_put_u64(p, m->seq);
        dsm_put_u32(p + 8, m->next);
        dsm_put_u32(p + 12, m->nremap);
        if (m->nremap)
            memcpy(p + 16, m->remap, 8 * (size_t)m->nremap);
        break;
    case DSM_COMPACT_MSG_USAGE_REP: {
        uint64_t w[USAGE_WORDS];
        usage_words(&m->usage, w);
        for (int i = 0; i < USAGE_WORDS; i++)
            dsm_put_u64(p + 8 * i, w[i]);
        break;
    }
    default: break;
    }
    return n;
}

dsm_status_t dsm_compact_msg_decode(const void *data, size_t len, dsm_compact_msg_t *out)
{
    memset(out, 0, sizeof *out);
    dsm_reader_t r;
    uint16_t type;
    if (!dsm_take_msg_frame(&r, data, len, DSM_COMPACT_MSG_MAGIC, DSM_COMPACT_MSG_VERSION, &type))
        return DSM_ERR_PROTO;
    size_t fixed = fixed_len(type);
    if (fixed == SIZE_MAX || r.left < fixed)
        return DSM_ERR_PROTO;
    out->type = type;
    if (has_ptr(type)) {
        out->ptr.w[0] = dsm_take_u64(&r);
        out->ptr.w[1] = dsm_take_u64(&r);
    }
    switch (type) {
    case DSM_COMPACT_MSG_ALLOC_REQ:
        out->size = dsm_take_u64(&r);
        if (out->size > (1ull << 32))
            return DSM_ERR_PROTO;
        break;
    case DSM_COMPACT_MSG_READ_REP:
    case DSM_COMPACT_MSG_WRITE_REQ:
        out->len = dsm_take_u32(&r);
        if (out->len > DSM_COMPACT_MSG_MAX_DATA || out->len != r.left)
            return DSM_ERR_PROTO;
        out->data = dsm_take(&r, out->len);
        break;
    case DSM_COMPACT_MSG_COMPACT_REQ:
        out->cls = (int32_t)dsm_take_u32(&r);
        if (out->cls < -1 || out->cls > 255)
            return DSM_ERR_PROTO;
        break;
    case DSM_COMPACT_MSG_COMPACT_REP:
        out->stats.merges = dsm_take_u64(&r);
        out->stats.moved = dsm_take_u64(&r);
        out->stats.kept = dsm_take_u64(&r);
        out->stats.refused_budget = dsm_take_u64(&r);
        out->status = (int32_t)dsm_take_u32(&r);
        if (out->status > 0 || out->status < -1000)
            return DSM_ERR_PROTO;
        break;
    case DSM_COMPACT_MSG_REMAP_REQ:
        out->seq = dsm_take_u64(&r);
        out->nremap = dsm_take_u32(&r);
        if (out->nremap == 0 || out->nremap > DSM_COMPACT_MSG_MAX_REMAP || r.left != 8 * (size_t)out->nremap)
            return DSM_ERR_PROTO;
        out->remap = dsm_take(&r, 8 * (size_t)out->nremap);
        break;
    case DSM_COMPACT_MSG_LAYOUT_REQ: out->start = dsm_take_u32(&r); break;
    case DSM_COMPACT_MSG_REKEY_REQ:
        out->seq = dsm_take_u64(&r);
        out->len = dsm_take_u32(&r);
        if (out->len == 0 || out->len > DSM_COMPACT_MSG_MAX_KEY || out->len != r.left)
            return DSM_ERR_PROTO;
        out->data = dsm_take(&r, out->len);
        break;
    case DSM_COMPACT_MSG_LAYOUT_REP:
        out->seq = dsm_take_u64(&r);
        out->next = dsm_take_u32(&r);
        out->nremap = dsm_take_u32(&r);
        if (out->nremap > DSM_COMPACT_MSG_MAX_LAYOUT || r.left != 8 * (size_t)out->nremap)
            return DSM_ERR_PROTO;
        out->remap = out->nremap ? dsm_take(&r, 8 * (size_t)out->nremap) : NULL;
        break;
    case DSM_COMPACT_MSG_USAGE_REP: {
        uint64_t w[USAGE_WORDS];
        for (int i = 0; i < USAGE_WORDS; i++)
            w[i] = dsm_take_u64(&r);
        usage_from(&out->usage, w);
        break;
    }
    default: break;
    }
    if (!r.ok || r.left != 0)
        return DSM_ERR_PROTO;
    return DSM_OK;
}

void dsm_compact_msg_remap_at(const dsm_compact_msg_t *m, uint32_t i, uint32_t *vblock, uint32_t *target)
{
    *vblock = dsm_get_u32(m->remap + 8 * (size_t)i);
    *target = dsm_get_u32(m->remap + 8 * (size_t)i + 4);
}
