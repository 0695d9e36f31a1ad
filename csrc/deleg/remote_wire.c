/* Encoders and checked decoders of the remote delegation wire format (the
 * layout is described in remote_wire.h). Pure functions: no state, no
 * allocation; every length read from a peer is checked before use. */
#include "deleg/remote_wire.h"

#include <string.h>

#include "util/bytes.h"

size_t dsm_rreq_encode(uint8_t *dst, uint8_t fidx, uint32_t fn_id, uint8_t kind, uint32_t handle,
                       uint32_t ret_size, const void *env, size_t env_len, const void *args, size_t args_len)
{
    dst[0] = fidx;
    dst[1] = kind;
    dsm_put_u16(dst + 2, (uint16_t)env_len);
    dsm_put_u32(dst + 4, (uint32_t)args_len);
    dsm_put_u32(dst + 8, handle);
    dsm_put_u32(dst + 12, ret_size);
    uint8_t *p = dst + RREQ_HDR;
    if (fidx == RREQ_FIDX_INLINE) {
        dsm_put_u32(p, fn_id);
        dsm_put_u32(p + 4, 0);
        p += 8;
    }
    if (env_len) memcpy(p, env, env_len);
    if (rpad8(env_len) > env_len) memset(p + env_len, 0, rpad8(env_len) - env_len);
    p += rpad8(env_len);
    if (args_len) memcpy(p, args, args_len);
    if (rpad8(args_len) > args_len) memset(p + args_len, 0, rpad8(args_len) - args_len);
    p += rpad8(args_len);
    return (size_t)(p - dst);
}

dsm_status_t dsm_rreq_decode(const uint8_t *p, size_t avail, const uint32_t *fn, unsigned nfn, rreq_t *out,
                             size_t *used)
{
    if (avail < RREQ_HDR) return DSM_ERR_PROTO;
    uint8_t fidx = p[0];
    out->kind = p[1];
    out->env_len = dsm_get_u16(p + 2);
    out->args_len = dsm_get_u32(p + 4);
    out->handle = dsm_get_u32(p + 8);
    out->ret_size = dsm_get_u32(p + 12);
    if (out->kind > RK_LAST) return DSM_ERR_PROTO;
    size_t hdr = RREQ_HDR;
    if (fidx == RREQ_FIDX_INLINE) {
        if (avail < RREQ_LONG_HDR) return DSM_ERR_PROTO;
        out->fn_id = dsm_get_u32(p + RREQ_HDR);
        hdr = RREQ_LONG_HDR;
    } else if (fidx < nfn && fidx < RSLOT_FNCACHE) {
        out->fn_id = fn[fidx];
    } else {
        return DSM_ERR_PROTO;
    }
    /* in 64 bits: args_len comes from the peer and may be near 2^32 */
    uint64_t need = (uint64_t)hdr + rpad8(out->env_len) + rpad8((uint64_t)out->args_len);
    if (need > avail) return DSM_ERR_PROTO;
    out->env = p + hdr;
    out->args = out->env + rpad8(out->env_len);
    *used = (size_t)need;
    return DSM_OK;
}

size_t dsm_rresp_encode_spilled(uint8_t *dst, size_t len, int big)
{
    dsm_put_u32(dst, 0);
    dsm_put_u32(dst + 4, (uint32_t)len | RRESP_SPILLED | (big ? RRESP_INBIG : 0));
    return RRESP_HDR;
}

size_t dsm_rresp_encode(uint8_t *dst, dsm_status_t status, const void *data, size_t len)
{
    dsm_put_u32(dst, (uint32_t)(int32_t)status);
    dsm_put_u32(dst + 4, (uint32_t)len);
    if (len) memcpy(dst + RRESP_HDR, data, len);
    if (rpad8(len) > len) memset(dst + RRESP_HDR + len, 0, rpad8(len) - len);
    return RRESP_HDR + rpad8(len);
}

dsm_status_t dsm_rresp_decode(const uint8_t *p, size_t avail, rresp_t *out, size_t *used)
{
    if (avail < RRESP_HDR) return DSM_ERR_PROTO;
    int32_t st = (int32_t)dsm_get_u32(p);
    uint32_t raw = dsm_get_u32(p + 4);
    uint64_t len = raw & RRESP_MAX_LEN;
    if (st > 0 || st < DSM_ERR_STATE) return DSM_ERR_PROTO;
    out->status = (dsm_status_t)st;
    out->len = (size_t)len;
    out->spilled = (raw & RRESP_SPILLED) != 0;
    out->big = (raw & RRESP_INBIG) != 0;
    if (out->big && (!out->spilled || len > RBIG_SIZE)) return DSM_ERR_PROTO;
    if (!out->spilled && len > RRESP_MAX_LEN) return DSM_ERR_PROTO;
    if (out->spilled) {
        /* the data comes by message or is in the big block: nothing inline */
        if (st != DSM_OK) return DSM_ERR_PROTO;
        out->data = NULL;
        *used = RRESP_HDR;
        return DSM_OK;
    }
    if (RRESP_HDR + rpad8(len) > avail) return DSM_ERR_PROTO;
    out->data = p + RRESP_HDR;
    *used = RRESP_HDR + (size_t)rpad8(len);
    return DSM_OK;
}

void dsm_rslot_trailer_encode(uint8_t *at, uint16_t offset, uint16_t count, const uint32_t *fn, uint8_t nfn,
                              uint8_t flags, uint32_t large_len)
{
    for (unsigned i = 0; i < RSLOT_FNCACHE; i++) dsm_put_u32(at + 4 * i, i < nfn ? fn[i] : 0);
    uint8_t *m = at + 4 * RSLOT_FNCACHE;
    dsm_put_u16(m, offset);
    dsm_put_u16(m + 2, count);
    m[4] = nfn;
    m[5] = flags;
    dsm_put_u16(m + 6, RSLOT_MAGIC);
    dsm_put_u32(m + 8, large_len);
    memset(m + 12, 0, RSLOT_META - 4 * RSLOT_FNCACHE - 12);
}

dsm_status_t dsm_rslot_decode(const uint8_t *block, size_t len, rslot_view_t *out)
{
    if (len != RSLOT_SIZE) return DSM_ERR_PROTO;
    const uint8_t *t = block + RSLOT_PAYLOAD;
    for (unsigned i = 0; i < RSLOT_FNCACHE; i++) out->fn[i] = dsm_get_u32(t + 4 * i);
    const uint8_t *m = t + 4 * RSLOT_FNCACHE;
    out->block = block;
    out->offset = dsm_get_u16(m);
    out->count = dsm_get_u16(m + 2);
    out->nfn = m[4];
    out->flags = m[5];
    out->large_len = dsm_get_u32(m + 8);
    out->seq = dsm_get_u64(block + RSLOT_SEQ_AT);
    if (dsm_get_u16(m + 6) != RSLOT_MAGIC) return DSM_ERR_PROTO;
    if (out->offset > RSLOT_PAYLOAD || (out->offset & 7) || out->count > RSLOT_MAX_COUNT ||
        out->nfn > RSLOT_FNCACHE || (out->flags & ~(RSLOT_LARGE | RSLOT_BIG | RSLOT_SPILLS)))
        return DSM_ERR_PROTO;
    if ((out->flags & RSLOT_SPILLS) && (out->flags & RSLOT_LARGE)) return DSM_ERR_PROTO;
    if ((out->flags & RSLOT_BIG) && (!(out->flags & RSLOT_LARGE) || out->large_len > RBIG_SIZE))
        return DSM_ERR_PROTO;
    if ((out->flags & RSLOT_LARGE) && (out->count != 1 || out->offset != RSLOT_PAYLOAD || out->large_len == 0))
        return DSM_ERR_PROTO;
    return DSM_OK;
}

void dsm_rput_encode_hdr(uint8_t *dst, uint32_t block_off, uint32_t len, uint32_t run, uint64_t seq)
{
    dsm_put_u32(dst, RPUT_MAGIC);
    dsm_put_u32(dst + 4, block_off);
    dsm_put_u32(dst + 8, len);
    dsm_put_u32(dst + 12, run);
    dsm_put_u64(dst + 16, seq);
}

dsm_status_t dsm_rput_decode(const void *msg, size_t len, rput_t *out)
{
    const uint8_t *p = msg;
    if (len < RPUT_HDR || dsm_get_u32(p) != RPUT_MAGIC) return DSM_ERR_PROTO;
    out->block_off = dsm_get_u32(p + 4);
    uint32_t n = dsm_get_u32(p + 8);
    out->run = dsm_get_u32(p + 12);
    out->seq = dsm_get_u64(p + 16);
    /* at least the trailer, at most the whole block below seq, and exactly the message */
    if (n < RSLOT_META || n > RSLOT_SEQ_AT || n != len - RPUT_HDR || out->seq == 0 ||
        (out->block_off % RSLOT_SIZE) != 0)
        return DSM_ERR_PROTO;
    out->bytes = p + RPUT_HDR;
    out->len = n;
    return DSM_OK;
}

void dsm_rlarge_encode_hdr(uint8_t *dst, int resp, uint32_t trustee, uint32_t client, uint32_t index,
                           uint32_t run, uint64_t seq)
{
    dsm_put_u32(dst, resp ? RSPILL_MAGIC : RLARGE_MAGIC);
    dsm_put_u32(dst + 4, trustee);
    dsm_put_u32(dst + 8, client);
    dsm_put_u32(dst + 12, index);
    dsm_put_u64(dst + 16, seq);
    dsm_put_u32(dst + 24, run);
    dsm_put_u32(dst + 28, 0);
}

dsm_status_t dsm_rlarge_decode(const void *msg, size_t len, rlarge_t *out)
{
    const uint8_t *p = msg;
    if (len < RLARGE_HDR) return DSM_ERR_PROTO;
    uint32_t magic = dsm_get_u32(p);
    if (magic != RLARGE_MAGIC && magic != RSPILL_MAGIC) return DSM_ERR_PROTO;
    out->resp = magic == RSPILL_MAGIC;
    out->trustee = dsm_get_u32(p + 4);
    out->client = dsm_get_u32(p + 8);
    out->index = dsm_get_u32(p + 12);
    out->seq = dsm_get_u64(p + 16);
    out->run = dsm_get_u32(p + 24);
    if (dsm_get_u32(p + 28) != 0 || out->seq == 0 || out->index >= RSLOT_MAX_COUNT || (!out->resp && (out->index != 0 || len < RLARGE_HDR + RREQ_LONG_HDR)))
        return DSM_ERR_PROTO;
    out->bytes = p + RLARGE_HDR;
    out->len = len - RLARGE_HDR;
    return DSM_OK;
}

void dsm_rterm_encode(uint8_t *dst, const rterm_t *t)
{
    dsm_put_u32(dst, RTERM_MAGIC);
    dsm_put_u32(dst + 4, t->idle);
    dsm_put_u64(dst + 8, t->sent);
    dsm_put_u64(dst + 16, t->served);
    dsm_put_u64(dst + 24, t->runs);
    dsm_put_u32(dst + 32, t->phase);
    dsm_put_u32(dst + 36, t->lost);
}

dsm_status_t dsm_rterm_decode(const void *msg, size_t len, rterm_t *out)
{
    const uint8_t *p = msg;
    if (len != RTERM_LEN || dsm_get_u32(p) != RTERM_MAGIC) return DSM_ERR_PROTO;
    out->idle = dsm_get_u32(p + 4);
    out->sent = dsm_get_u64(p + 8);
    out->served = dsm_get_u64(p + 16);
    out->runs = dsm_get_u64(p + 24);
    out->phase = dsm_get_u32(p + 32);
    out->lost = dsm_get_u32(p + 36);
    if (out->idle > 1 || out->phase > 2 || out->lost > 0xffff) return DSM_ERR_PROTO;
    return DSM_OK;
}

void dsm_rboard_encode_hdr(uint8_t *dst, const rboard_t *b)
{
    dsm_put_u32(dst, RBOARD_MAGIC);
    dsm_put_u32(dst + 4, b->phase);
    dsm_put_u64(dst + 8, b->runs);
    dsm_put_u64(dst + 16, b->tag);
    dsm_put_u32(dst + 24, (uint32_t)b->len);
    dsm_put_u32(dst + 28, 0);
}

dsm_status_t dsm_rboard_decode(const void *msg, size_t len, rboard_t *out)
{
    const uint8_t *p = msg;
    if (len < RBOARD_HDR || dsm_get_u32(p) != RBOARD_MAGIC || dsm_get_u32(p + 28) != 0) return DSM_ERR_PROTO;
    out->phase = dsm_get_u32(p + 4);
    out->runs = dsm_get_u64(p + 8);
    out->tag = dsm_get_u64(p + 16);
    out->len = dsm_get_u32(p + 24);
    out->bytes = p + RBOARD_HDR;
    if (out->phase > 2 || out->len > RBOARD_MAX || out->len != len - RBOARD_HDR) return DSM_ERR_PROTO;
    return DSM_OK;
}

void dsm_rtrust_encode(uint8_t *dst, const rtrust_t *t)
{
    dsm_put_u32(dst, RTRUST_MAGIC);
    dsm_put_u32(dst + 4, t->rank);
    dsm_put_u16(dst + 8, (uint16_t)t->trustee);
    dsm_put_u16(dst + 10, (uint16_t)t->exporter);
    dsm_put_u32(dst + 12, t->handle);
    dsm_put_u64(dst + 16, t->weight);
}

dsm_status_t dsm_rtrust_decode(const void *msg, size_t len, rtrust_t *out)
{
    const uint8_t *p = msg;
    if (len != RTRUST_LEN || dsm_get_u32(p) != RTRUST_MAGIC) return DSM_ERR_PROTO;
    out->rank = dsm_get_u32(p + 4);
    out->trustee = dsm_get_u16(p + 8);
    out->exporter = dsm_get_u16(p + 10);
    out->handle = dsm_get_u32(p + 12);
    out->weight = dsm_get_u64(p + 16);
    if (out->rank >= 0xffff || out->exporter == 0xffff || out->handle == 0 || out->weight == 0) return DSM_ERR_PROTO;
    return DSM_OK;
}

void dsm_rmove_encode(uint8_t *dst, const rmove_t *m)
{
    dsm_put_u32(dst, RMOVE_MAGIC);
    dsm_put_u16(dst + 4, (uint16_t)m->trustee);
    dsm_put_u16(dst + 6, (uint16_t)m->from);
    dsm_put_u32(dst + 8, m->handle);
    dsm_put_u16(dst + 12, (uint16_t)(m->to == RMOVE_TO_SENDER ? 0 : m->to + 1));
    dsm_put_u16(dst + 14, 0);
    dsm_put_u64(dst + 16, m->weight);
}

dsm_status_t dsm_rmove_decode(const void *msg, size_t len, rmove_t *out)
{
    const uint8_t *p = msg;
    if (len != RMOVE_LEN || dsm_get_u32(p) != RMOVE_MAGIC || dsm_get_u16(p + 14) != 0) return DSM_ERR_PROTO;
    out->trustee = dsm_get_u16(p + 4);
    out->from = dsm_get_u16(p + 6);
    out->handle = dsm_get_u32(p + 8);
    uint16_t to = dsm_get_u16(p + 12);
    out->to = to == 0 ? RMOVE_TO_SENDER : (uint32_t)to - 1;
    out->weight = dsm_get_u64(p + 16);
    if (out->from == 0xffff || out->handle == 0 || out->weight == 0) return DSM_ERR_PROTO;
    return DSM_OK;
}
