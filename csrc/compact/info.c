/* The store's published value (see info.h): encoder and checked decoder. */
#include "compact/info.h"

#include <string.h>

#include "compact/layout.h"
#include "util/bytes.h"

size_t dsm_compact_info_encode(const dsm_compact_info_t *in, uint8_t *buf)
{
    dsm_put_u64(buf, in->base);
    dsm_put_u64(buf + 8, in->size);
    dsm_put_u32(buf + 16, in->block_size);
    dsm_put_u16(buf + 20, in->key_tag);
    dsm_put_u16(buf + 22, in->flags);
    dsm_put_u32(buf + 24, in->pid);
    dsm_put_u32(buf + 28, (uint32_t)in->memfd);
    if (in->key_len)
        memcpy(buf + DSM_COMPACT_INFO_HEADER, in->key, in->key_len);
    return DSM_COMPACT_INFO_HEADER + in->key_len;
}

dsm_status_t dsm_compact_info_decode(const void *value, size_t len, dsm_compact_info_t *out)
{
    memset(out, 0, sizeof *out);
    dsm_reader_t r = dsm_reader(value, len);
    out->base = dsm_take_u64(&r);
    out->size = dsm_take_u64(&r);
    out->block_size = dsm_take_u32(&r);
    out->key_tag = dsm_take_u16(&r);
    out->flags = dsm_take_u16(&r);
    out->pid = dsm_take_u32(&r);
    out->memfd = (int32_t)dsm_take_u32(&r);
    if (!r.ok || (out->flags & ~DSM_COMPACT_INFO_SERVES) != 0)
        return DSM_ERR_PROTO;
    out->key = r.left ? r.p : NULL;
    out->key_len = r.left;
    if (!(out->flags & DSM_COMPACT_INFO_SERVES))
        return out->key_len == 0 ? DSM_OK : DSM_ERR_PROTO;
    if (out->key_len == 0 || out->block_size < DSM_COMPACT_MIN_BLOCK || out->block_size > DSM_COMPACT_MAX_BLOCK ||
        out->block_size % 4096 || out->size == 0 || out->size % out->block_size || out->size >= (1ull << 40) ||
        out->base + out->size < out->base)
        return DSM_ERR_PROTO;
    return DSM_OK;
}
