/* Encoder and checked decoder of the managed heap's control messages. */
#include "mheap/msg.h"

#include <string.h>

#include "mheap/layout.h"

static void put_array(dsm_writer_t *w, const uint8_t *p, size_t n)
{
    if (n)
        dsm_write_bytes(w, p, n);
}

/* The body of a TRACE_REP (also the tail of a TRACE_DONE). */
static void put_trace_rep(dsm_writer_t *w, const dsm_mheap_msg_t *m)
{
    dsm_write_u32(w, m->ok);
    dsm_write_u32(w, m->live_objs);
    dsm_write_u64(w, m->live_bytes);
    dsm_write_u64(w, m->traced_bytes);
}
static dsm_status_t take_trace_rep(dsm_reader_t *r, dsm_mheap_msg_t *out)
{
    out->ok = dsm_take_u32(r);
    out->live_objs = dsm_take_u32(r);
    out->live_bytes = dsm_take_u64(r);
    out->traced_bytes = dsm_take_u64(r);
    return r->ok && out->ok <= 1 && out->live_bytes <= DSM_MHEAP_MAX_REGION ? DSM_OK : DSM_ERR_PROTO;
}

void dsm_mheap_msg_encode(const dsm_mheap_msg_t *m, dsm_writer_t *w)
{
    size_t start = dsm_write_msg_begin(w, DSM_MHEAP_MSG_MAGIC, DSM_MHEAP_MSG_VERSION, m->type);
    dsm_write_u32(w, m->heap_id);
    switch (m->type) {
    case DSM_MHEAP_MSG_SETUP:
        dsm_write_u64(w, m->chunk);
        dsm_write_u64(w, m->ubase);
        dsm_write_u64(w, m->part_bytes);
        dsm_write_bytes(w, &m->region_shift, 1);
        dsm_write_bytes(w, &m->order, 1);
        dsm_write_u16(w, 0);
        dsm_mheap_types_encode(m->types, w);
        break;
    case DSM_MHEAP_MSG_TRACE:
        dsm_write_u32(w, m->region);
        dsm_write_u32(w, m->epoch);
        dsm_write_u32(w, m->bp);
        dsm_write_u32(w, m->nroots);
        put_array(w, m->roots, (size_t)m->nroots * 8);
        break;
    case DSM_MHEAP_MSG_REMARK:
        dsm_write_u32(w, m->region);
        dsm_write_u32(w, m->epoch);
        dsm_write_u32(w, m->old_bp);
        dsm_write_u32(w, m->bp);
        dsm_write_u32(w, m->flags);
        dsm_write_u32(w, m->nroots);
        put_array(w, m->roots, (size_t)m->nroots * 8);
        break;
    case DSM_MHEAP_MSG_EVAC:
        dsm_write_u32(w, m->region);
        dsm_write_u32(w, m->epoch);
        dsm_write_u32(w, m->nmore);
        put_array(w, m->more, (size_t)m->nmore * 4);
        break;
    case DSM_MHEAP_MSG_SLOTS:
    case DSM_MHEAP_MSG_SLOTS_REP:
        dsm_write_u32(w, m->nslots);
        put_array(w, m->slots, (size_t)m->nslots * 8);
        break;
    case DSM_MHEAP_MSG_BATCH:
    case DSM_MHEAP_MSG_BATCH_REP:
        dsm_write_u32(w, m->nitems);
        put_array(w, m->items, m->items_len);
        break;
    case DSM_MHEAP_MSG_PAGES:
        dsm_write_u32(w, m->region);
        dsm_write_u32(w, m->npages);
        put_array(w, m->pages, (size_t)m->npages * DSM_MHEAP_PAGE_ITEM);
        break;
    case DSM_MHEAP_MSG_FIXUP:
        dsm_write_u64(w, m->lo);
        dsm_write_u64(w, m->hi);
        dsm_write_u32(w, m->npairs);
        dsm_write_u32(w, m->nslots);
        put_array(w, m->pairs, (size_t)m->npairs * DSM_MHEAP_FIX_PAIR);
        put_array(w, m->slots, (size_t)m->nslots * 8);
        break;
    case DSM_MHEAP_MSG_TRACE_DONE:
        dsm_write_u32(w, m->region);
        dsm_write_u32(w, m->epoch);
        put_trace_rep(w, m);
        break;
    case DSM_MHEAP_MSG_TRACE_REP:
        put_trace_rep(w, m);
        break;
    case DSM_MHEAP_MSG_REMARK_REP:
        dsm_write_u32(w, m->live_objs);
        dsm_write_u64(w, m->live_bytes);
        break;
    case DSM_MHEAP_MSG_EVAC_REP:
        dsm_write_u32(w, m->new_bp);
        dsm_write_u32(w, m->npairs);
        put_array(w, m->pairs, (size_t)m->npairs * DSM_MHEAP_EVAC_PAIR);
        break;
    case DSM_MHEAP_MSG_FIXUP_REP:
        dsm_write_u32(w, m->fixed);
        break;
    default:   /* DESTROY, SETUP_REP, DESTROY_REP: no body */
        break;
    }
    dsm_write_msg_end(w, start);
}

/* n items of `each` bytes, taken from r; NULL (r->ok = 0) if they are not there. */
static const uint8_t *take_array(dsm_reader_t *r, uint32_t n, size_t each)
{
    if ((uint64_t)n * each > r->left) {
        r->ok = 0;
        return NULL;
    }
    const uint8_t *p = r->p;
    dsm_take(r, (size_t)n * each);
    return p;
}

static int offset_ok(uint32_t off) { return off <= DSM_MHEAP_MAX_REGION; }

dsm_status_t dsm_mheap_msg_peek_type(const void *data, size_t len, uint16_t *type)
{
    dsm_reader_t r;
    return dsm_take_msg_frame(&r, data, len, DSM_MHEAP_MSG_MAGIC, DSM_MHEAP_MSG_VERSION, type) ? DSM_OK
                                                                                              : DSM_ERR_PROTO;
}

dsm_status_t dsm_mheap_msg_decode(const void *data, size_t len, dsm_mheap_msg_t *out,
                                  dsm_mheap_types_t *types)
{
    memset(out, 0, sizeof *out);
    dsm_reader_t r;
    if (!dsm_take_msg_frame(&r, data, len, DSM_MHEAP_MSG_MAGIC, DSM_MHEAP_MSG_VERSION, &out->type))
        return DSM_ERR_PROTO;
    out->heap_id = dsm_take_u32(&r);
    if (!r.ok)
        return DSM_ERR_PROTO;
    switch (out->type) {
    case DSM_MHEAP_MSG_SETUP: {
        out->chunk = dsm_take_u64(&r);
        out->ubase = dsm_take_u64(&r);
        out->part_bytes = dsm_take_u64(&r);
        const uint8_t *b = dsm_take(&r, 4);
        if (!r.ok || types == NULL)
            return DSM_ERR_PROTO;
        out->region_shift = b[0];
        out->order = b[1];
        if (out->region_shift < 20 || out->region_shift > 22 || out->order > 1 || b[2] || b[3] ||
            out->part_bytes == 0 || out->part_bytes > (1ull << 40) ||
            (out->part_bytes & ((1ull << out->region_shift) - 1)) != 0 || out->ubase == 0 ||
            out->ubase + out->part_bytes < out->ubase)
            return DSM_ERR_PROTO;
        if (dsm_mheap_types_decode(&r, 1u << out->region_shift, types) != DSM_OK)
            return DSM_ERR_PROTO;
        out->types = types;
        break;
    }
    case DSM_MHEAP_MSG_TRACE:
        out->region = dsm_take_u32(&r);
        out->epoch = dsm_take_u32(&r);
        out->bp = dsm_take_u32(&r);
        out->nroots = dsm_take_u32(&r);
        out->roots = take_array(&r, out->nroots, 8);
        if (!r.ok || !offset_ok(out->bp))
            return DSM_ERR_PROTO;
        break;
    case DSM_MHEAP_MSG_REMARK:
        out->region = dsm_take_u32(&r);
        out->epoch = dsm_take_u32(&r);
        out->old_bp = dsm_take_u32(&r);
        out->bp = dsm_take_u32(&r);
        out->flags = dsm_take_u32(&r);
        out->nroots = dsm_take_u32(&r);
        out->roots = take_array(&r, out->nroots, 8);
        if (!r.ok || !offset_ok(out->bp) || out->old_bp > out->bp || (out->flags & ~1u))
            return DSM_ERR_PROTO;
        break;
    case DSM_MHEAP_MSG_EVAC:
        out->region = dsm_take_u32(&r);
        out->epoch = dsm_take_u32(&r);
        out->nmore = dsm_take_u32(&r);
        if (!r.ok || out->nmore > DSM_MHEAP_EVAC_MAX_MORE)
            return DSM_ERR_PROTO;
        out->more = take_array(&r, out->nmore, 4);
        if (!r.ok)
            return DSM_ERR_PROTO;
        for (uint32_t i = 0; i < out->nmore; i++) {   /* distinct regions, none the destination */
            uint32_t x = dsm_get_u32(out->more + 4 * (size_t)i);
            if (x == out->region)
                return DSM_ERR_PROTO;
            for (uint32_t k = 0; k < i; k++)
                if (dsm_get_u32(out->more + 4 * (size_t)k) == x)
                    return DSM_ERR_PROTO;
        }
        break;
    case DSM_MHEAP_MSG_SLOTS:
    case DSM_MHEAP_MSG_SLOTS_REP:
        out->nslots = dsm_take_u32(&r);
        out->slots = take_array(&r, out->nslots, 8);
        if (!r.ok)
            return DSM_ERR_PROTO;
        break;
    case DSM_MHEAP_MSG_BATCH:
    case DSM_MHEAP_MSG_BATCH_REP: {
        out->nitems = dsm_take_u32(&r);
        if (!r.ok || out->nitems > DSM_MHEAP_BATCH_MAX)
            return DSM_ERR_PROTO;
        out->items = r.p;
        out->items_len = r.left;
        size_t pos = 0;
        for (uint32_t i = 0; i < out->nitems; i++) {
            const uint8_t *d;
            size_t n;
            dsm_status_t s;
            if (dsm_mheap_batch_item(out, &pos, &d, &n, &s) != DSM_OK)
                return DSM_ERR_PROTO;
        }
        if (pos != out->items_len)
            return DSM_ERR_PROTO;
        dsm_take(&r, r.left);
        break;
    }
    case DSM_MHEAP_MSG_PAGES:
        out->region = dsm_take_u32(&r);
        out->npages = dsm_take_u32(&r);
        out->pages = take_array(&r, out->npages, DSM_MHEAP_PAGE_ITEM);
        if (!r.ok)
            return DSM_ERR_PROTO;
        for (uint32_t i = 0; i < out->npages; i++)
            if (dsm_get_u32(out->pages + (size_t)i * DSM_MHEAP_PAGE_ITEM) >= DSM_MHEAP_MAX_REGION / DSM_MHEAP_PAGE)
                return DSM_ERR_PROTO;
        break;
    case DSM_MHEAP_MSG_FIXUP:
        out->lo = dsm_take_u64(&r);
        out->hi = dsm_take_u64(&r);
        out->npairs = dsm_take_u32(&r);
        out->nslots = dsm_take_u32(&r);
        out->pairs = take_array(&r, out->npairs, DSM_MHEAP_FIX_PAIR);
        out->slots = take_array(&r, out->nslots, 8);
        if (!r.ok || out->lo >= out->hi)
            return DSM_ERR_PROTO;
        break;
    case DSM_MHEAP_MSG_TRACE_DONE:
        out->region = dsm_take_u32(&r);
        out->epoch = dsm_take_u32(&r);
        if (take_trace_rep(&r, out) != DSM_OK)
            return DSM_ERR_PROTO;
        break;
    case DSM_MHEAP_MSG_TRACE_REP:
        if (take_trace_rep(&r, out) != DSM_OK)
            return DSM_ERR_PROTO;
        break;
    case DSM_MHEAP_MSG_REMARK_REP:
        out->live_objs = dsm_take_u32(&r);
        out->live_bytes = dsm_take_u64(&r);
        if (!r.ok || out->live_bytes > DSM_MHEAP_MAX_REGION)
            return DSM_ERR_PROTO;
        break;
    case DSM_MHEAP_MSG_EVAC_REP:
        out->new_bp = dsm_take_u32(&r);
        out->npairs = dsm_take_u32(&r);
        out->pairs = take_array(&r, out->npairs, DSM_MHEAP_EVAC_PAIR);
        if (!r.ok || !offset_ok(out->new_bp))
            return DSM_ERR_PROTO;
        break;
    case DSM_MHEAP_MSG_FIXUP_REP:
        out->fixed = dsm_take_u32(&r);
        break;
    case DSM_MHEAP_MSG_DESTROY:
    case DSM_MHEAP_MSG_SETUP_REP:
    case DSM_MHEAP_MSG_DESTROY_REP:
    case DSM_MHEAP_MSG_PAGES_REP:
        break;
    default:
        return DSM_ERR_PROTO;
    }
    if (!r.ok || r.left != 0)
        return DSM_ERR_PROTO;
    return DSM_OK;
}

dsm_status_t dsm_mheap_batch_item(const dsm_mheap_msg_t *m, size_t *pos, const uint8_t **data, size_t *len,
                                  dsm_status_t *status)
{
    int rep = m->type == DSM_MHEAP_MSG_BATCH_REP;
    size_t head = rep ? 8 : 4;
    if (*pos > m->items_len || m->items_len - *pos < head)
        return DSM_ERR_PROTO;
    const uint8_t *p = m->items + *pos;
    int32_t code = rep ? (int32_t)dsm_get_u32(p) : 0;
    uint32_t n = dsm_get_u32(p + head - 4);
    if (m->items_len - *pos - head < n || (code != 0 && n != 0) || code > 0 || code < -1000)
        return DSM_ERR_PROTO;
    if (!rep && n < DSM_MHEAP_MSG_HEADER_LEN)
        return DSM_ERR_PROTO;
    *data = p + head;
    *len = n;
    if (status)
        *status = (dsm_status_t)code;
    *pos += head + n;
    return DSM_OK;
}

void dsm_mheap_batch_begin(dsm_mheap_batch_t *b, uint16_t type, uint32_t heap_id)
{
    memset(b, 0, sizeof *b);
    b->rep = type == DSM_MHEAP_MSG_BATCH_REP;
    dsm_mheap_msg_t m = {.type = type, .heap_id = heap_id};
    dsm_mheap_msg_encode(&m, &b->w);   /* header and a zero count, patched at the end */
}

void dsm_mheap_batch_add(dsm_mheap_batch_t *b, const dsm_mheap_msg_t *m, dsm_status_t status)
{
    if (b->rep)
        dsm_write_u32(&b->w, (uint32_t)(int32_t)status);
    size_t at = b->w.len;
    dsm_write_u32(&b->w, 0);
    if (!b->rep || status == DSM_OK)
        dsm_mheap_msg_encode(m, &b->w);
    if (b->w.ok)
        dsm_put_u32(b->w.buf + at, (uint32_t)(b->w.len - at - 4));
    b->n++;
}

void dsm_mheap_batch_end(dsm_mheap_batch_t *b)
{
    if (!b->w.ok || b->w.len < DSM_MHEAP_MSG_HEADER_LEN + 4)
        return;
    dsm_write_msg_end(&b->w, 0);
    dsm_put_u32(b->w.buf + DSM_MHEAP_MSG_HEADER_LEN, b->n);
}
