/* The heap's alloc/free/check messages: encoder, bounds-checked decoder and
 * the server that applies a decoded request to the local allocator core. */
#include "heap/msg.h"

#include <string.h>

#include "dsm/heap.h"
#include "util/bytes.h"
#include "util/log.h"

static size_t body_len(uint16_t type)
{
    switch (type) {
    case DSM_HEAP_MSG_ALLOC_REQ: return 8;
    case DSM_HEAP_MSG_ALLOC_REP: return 16;
    case DSM_HEAP_MSG_FREE_REQ: return 8;
    case DSM_HEAP_MSG_FREE_REP: return 0;
    case DSM_HEAP_MSG_CHECK_REQ: return 16;
    case DSM_HEAP_MSG_CHECK_REP: return 8;
    default: return SIZE_MAX;
    }
}

size_t dsm_heap_msg_encode(const dsm_heap_msg_t *m, uint8_t *buf)
{
    size_t body = body_len(m->type);
    if (body == SIZE_MAX)
        return 0;
    uint8_t *p = dsm_put_msg_header(buf, DSM_HEAP_MSG_MAGIC, DSM_HEAP_MSG_VERSION, m->type, (uint32_t)body);
    switch (m->type) {
    case DSM_HEAP_MSG_ALLOC_REQ: dsm_put_u64(p, m->size); break;
    case DSM_HEAP_MSG_ALLOC_REP: dsm_put_u64(p, m->gaddr); dsm_put_u64(p + 8, m->size); break;
    case DSM_HEAP_MSG_FREE_REQ: dsm_put_u64(p, m->gaddr); break;
    case DSM_HEAP_MSG_CHECK_REQ: dsm_put_u64(p, m->gaddr); dsm_put_u64(p + 8, m->size); break;
    case DSM_HEAP_MSG_CHECK_REP: dsm_put_u64(p, m->size); break;
    default: break;
    }
    return DSM_HEAP_MSG_HEADER_LEN + body;
}

/* An address a peer may name: a nonzero offset, a tag that is a generation or 0. */
static int gaddr_ok(uint64_t g) { return dsm_gaddr_colour(g) <= DSM_HEAP_GEN_MAX && dsm_gaddr_offset(g) != 0; }

dsm_status_t dsm_heap_msg_decode(const void *data, size_t len, dsm_heap_msg_t *out)
{
    memset(out, 0, sizeof *out);
    dsm_reader_t r;
    uint16_t type;
    if (!dsm_take_msg_frame(&r, data, len, DSM_HEAP_MSG_MAGIC, DSM_HEAP_MSG_VERSION, &type))
        return DSM_ERR_PROTO;
    size_t want = body_len(type);
    if (want == SIZE_MAX || r.left != want)
        return DSM_ERR_PROTO;
    out->type = type;
    switch (type) {
    case DSM_HEAP_MSG_ALLOC_REQ:
        out->size = dsm_take_u64(&r);
        if (out->size > DSM_HEAP_MAX_PARTITION)
            return DSM_ERR_PROTO;
        break;
    case DSM_HEAP_MSG_ALLOC_REP:
        out->gaddr = dsm_take_u64(&r);
        out->size = dsm_take_u64(&r);
        if (!gaddr_ok(out->gaddr) || out->size == 0 || out->size > DSM_HEAP_MAX_PARTITION)
            return DSM_ERR_PROTO;
        break;
    case DSM_HEAP_MSG_FREE_REQ:
        out->gaddr = dsm_take_u64(&r);
        if (!gaddr_ok(out->gaddr))
            return DSM_ERR_PROTO;
        break;
    case DSM_HEAP_MSG_CHECK_REQ:
        out->gaddr = dsm_take_u64(&r);
        out->size = dsm_take_u64(&r);
        if (!gaddr_ok(out->gaddr) || out->size > DSM_HEAP_MAX_PARTITION)
            return DSM_ERR_PROTO;
        break;
    case DSM_HEAP_MSG_CHECK_REP:
        out->size = dsm_take_u64(&r);
        if (out->size == 0 || out->size > DSM_HEAP_MAX_PARTITION)
            return DSM_ERR_PROTO;
        break;
    default: /* FREE_REP: empty body */
        break;
    }
    if (!r.ok || r.left != 0)
        return DSM_ERR_PROTO;
    return DSM_OK;
}

dsm_status_t dsm_heap_msg_serve(dsm_heap_alloc_t *a, uint32_t self_rank, uint16_t expect,
                                const void *req, size_t len, uint8_t *reply, size_t *reply_len)
{
    *reply_len = 0;
    dsm_heap_msg_t m, rep = {0};
    if (dsm_heap_msg_decode(req, len, &m) != DSM_OK || m.type != expect) {
        DSM_WARN("heap", "malformed heap request (%zu bytes) refused", len);
        return DSM_ERR_PROTO;
    }
    if (m.type == DSM_HEAP_MSG_ALLOC_REQ) {
        if (a == NULL)
            return DSM_ERR_NOMEM;
        uint64_t off;
        uint16_t gen;
        size_t usable;
        dsm_status_t st = dsm_heap_alloc(a, (size_t)m.size, &off, &gen);
        if (st == DSM_OK)
            st = dsm_heap_usable(a, off, &usable);
        if (st != DSM_OK)
            return st;
        rep.type = DSM_HEAP_MSG_ALLOC_REP;
        rep.gaddr = dsm_gaddr_with_colour(dsm_gaddr_make(self_rank, off), gen);
        rep.size = usable;
    } else {
        /* A request for another node's address is a confused peer, not ours to act on. */
        if (a == NULL || dsm_gaddr_node(m.gaddr) != (self_rank & 0xffu))
            return DSM_ERR_BAD_ADDR;
        uint64_t off = dsm_gaddr_offset(m.gaddr);
        uint16_t tag = dsm_gaddr_colour(m.gaddr);
        if (m.type == DSM_HEAP_MSG_FREE_REQ) {
            dsm_status_t st = dsm_heap_free(a, off, tag);
            if (st != DSM_OK)
                return st;
            rep.type = DSM_HEAP_MSG_FREE_REP;
        } else {
            size_t usable;
            dsm_status_t st = dsm_heap_access_check(a, off, m.size, tag, &usable);
            if (st != DSM_OK)
                return st;
            rep.type = DSM_HEAP_MSG_CHECK_REP;
            rep.size = usable;
        }
    }
    *reply_len = dsm_heap_msg_encode(&rep, reply);
    return DSM_OK;
}
