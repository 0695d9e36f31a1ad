/* A TBox group's member table: layout and checked lookup (see tbox_layout.h). */
#include "own/tbox_layout.h"

#include "util/bytes.h"

static uint64_t table_end(uint32_t count) { return 8 + 16 * (uint64_t)count; }
static uint64_t align8(uint64_t v) { return (v + 7) & ~7ull; }

uint64_t own_tbox_size(uint32_t count, const size_t *sizes)
{
    if (count == 0 || count > OWN_TBOX_MAX || sizes == NULL)
        return 0;
    uint64_t at = table_end(count);
    for (uint32_t i = 0; i < count; i++) {
        if ((uint64_t)sizes[i] > (1ull << 40))
            return 0;
        at = align8(at + sizes[i]);
    }
    return at;
}

void own_tbox_layout(uint8_t *payload, uint32_t count, const size_t *sizes)
{
    dsm_put_u32(payload, OWN_TBOX_MAGIC);
    dsm_put_u32(payload + 4, count);
    uint64_t at = table_end(count);
    for (uint32_t i = 0; i < count; i++) {
        dsm_put_u64(payload + 8 + 16 * (uint64_t)i, at);
        dsm_put_u64(payload + 16 + 16 * (uint64_t)i, sizes[i]);
        at = align8(at + sizes[i]);
    }
}

dsm_status_t own_tbox_member(const void *payload, uint64_t len, uint32_t index, uint32_t *count,
                             uint64_t *offset, uint64_t *size)
{
    const uint8_t *p = payload;
    *offset = 0;
    *size = 0;
    if (count)
        *count = 0;
    if (p == NULL || len < 8 || dsm_get_u32(p) != OWN_TBOX_MAGIC)
        return DSM_ERR_BAD_ADDR;
    uint32_t n = dsm_get_u32(p + 4);
    if (n == 0 || n > OWN_TBOX_MAX || table_end(n) > len)
        return DSM_ERR_BAD_ADDR;
    uint64_t end = table_end(n);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off = dsm_get_u64(p + 8 + 16 * (uint64_t)i), sz = dsm_get_u64(p + 16 + 16 * (uint64_t)i);
        if (off < end || (off & 7) || sz > len || off > len - sz)
            return DSM_ERR_BAD_ADDR;
        if (i == index) {
            *offset = off;
            *size = sz;
        }
        end = off + sz;
    }
    if (count)
        *count = n;
    return index < n ? DSM_OK : DSM_ERR_INVALID;
}
