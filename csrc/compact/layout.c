/* The store's layout (see layout.h): classes, slot format and its
 * validation, the pointer codec, the ID table, merge plans and the merge
 * probability. Pure functions, no store or node. */
#include "compact/layout.h"

#include <math.h>
#include <string.h>

#include "util/bytes.h"
#include "util/test_switch.h"

static const uint32_t class_slot[DSM_COMPACT_NCLASSES] = {64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096};

uint32_t dsm_compact_class_slot(uint32_t cls)
{
    return cls < DSM_COMPACT_NCLASSES ? class_slot[cls] : 0;
}

uint32_t dsm_compact_slot_capacity(uint32_t slot)
{
    if (slot < DSM_COMPACT_LINE || slot % DSM_COMPACT_LINE)
        return 0;
    uint32_t lines = slot / DSM_COMPACT_LINE;
    return (DSM_COMPACT_LINE - DSM_COMPACT_HDR) + (lines - 1) * (DSM_COMPACT_LINE - 1);
}

int dsm_compact_class_for(size_t size)
{
    for (uint32_t c = 0; c < DSM_COMPACT_NCLASSES; c++)
        if (size <= dsm_compact_slot_capacity(class_slot[c]))
            return (int)c;
    return -1;
}

uint32_t dsm_compact_class_count(void) { return DSM_COMPACT_NCLASSES; }
uint32_t dsm_compact_class_slot_bytes(uint32_t cls) { return dsm_compact_class_slot(cls); }
uint32_t dsm_compact_class_capacity(uint32_t cls) { return dsm_compact_slot_capacity(dsm_compact_class_slot(cls)); }

/* A word-at-a-time multiply-xorshift hash: cheap for 4 KiB objects, and any
 * mix of two versions of an object changes it with overwhelming odds. */
static inline uint64_t mix(uint64_t h, uint64_t w)
{
    h ^= w;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

uint64_t dsm_compact_checksum(uint16_t id, uint32_t version, uint32_t origin, const void *data, uint32_t len)
{
    uint64_t h = 0x243f6a8885a308d3ull;
    h = mix(h, ((uint64_t)id << 32) | version);
    h = mix(h, ((uint64_t)origin << 32) | len);
    const uint8_t *p = data;
    uint32_t i = 0;
    for (; i + 8 <= len; i += 8)
        h = mix(h, dsm_get_u64(p + i));
    uint64_t tail = 0;
    for (uint32_t k = 0; i < len; i++, k++)
        tail |= (uint64_t)p[i] << (8 * k);
    h = mix(h, tail ^ 0xff);
    h = mix(h, h >> 17);
    return h ? h : 1;
}

/* Scatter/gather the payload around the line version bytes. */
static void payload_put(uint8_t *slot, uint32_t slot_size, uint8_t lv, const uint8_t *data, uint32_t len)
{
    uint32_t n = len < DSM_COMPACT_LINE - DSM_COMPACT_HDR ? len : DSM_COMPACT_LINE - DSM_COMPACT_HDR;
    if (n)
        memcpy(slot + DSM_COMPACT_HDR, data, n);
    uint32_t done = n;
    for (uint32_t line = 1; line < slot_size / DSM_COMPACT_LINE; line++) {
        uint8_t *l = slot + line * DSM_COMPACT_LINE;
        l[0] = lv;
        uint32_t m = len - done < DSM_COMPACT_LINE - 1 ? len - done : DSM_COMPACT_LINE - 1;
        if (m)
            memcpy(l + 1, data + done, m);
        done += m;
    }
}

void dsm_compact_obj_pack(uint8_t *slot, uint32_t slot_size, uint8_t lock, uint16_t id, uint32_t version,
                       uint32_t origin, const void *data, uint32_t len)
{
    slot[0] = (uint8_t)version;
    slot[1] = lock;
    dsm_put_u16(slot + 2, id);
    dsm_put_u32(slot + 4, version);
    dsm_put_u32(slot + 8, origin);
    dsm_put_u32(slot + 12, len);
    dsm_put_u64(slot + 16, dsm_compact_checksum(id, version, origin, data, len));
    payload_put(slot, slot_size, (uint8_t)version, data, len);
}

void dsm_compact_hdr_read(const uint8_t *slot, dsm_compact_hdr_t *out)
{
    out->lock = slot[1];
    out->id = dsm_get_u16(slot + 2);
    out->version = dsm_get_u32(slot + 4);
    out->origin = dsm_get_u32(slot + 8);
    out->length = dsm_get_u32(slot + 12);
}

dsm_compact_check_t dsm_compact_obj_check(const uint8_t *slot, uint32_t slot_size, uint16_t want_id,
                                    uint32_t want_origin, void *out, size_t cap, size_t *len,
                                    dsm_compact_hdr_t *hdr)
{
    dsm_compact_hdr_t h;
    dsm_compact_hdr_read(slot, &h);
    /* The slot may be live memory another process writes (a mirror): what
     * follows uses this one reading of the header (the length bounds the
     * copy), never a second load the compiler might make. */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (hdr)
        *hdr = h;
    if (h.id == 0 || h.id != want_id)
        return DSM_COMPACT_OTHER;
    if (want_origin != UINT32_MAX && h.origin != want_origin)
        return DSM_COMPACT_OTHER;
    if (h.lock != 0)
        return DSM_COMPACT_LOCKED;
    uint8_t lv = (uint8_t)h.version;
    if (h.length > dsm_compact_slot_capacity(slot_size))
        return DSM_COMPACT_TORN;
    /* The negative test (test_compact_cluster) removes the torn-copy checks:
     * the line versions here and the checksum below. */
    int check = !dsm_test_switch("compact_check");
    if (check && slot[0] != lv)
        return DSM_COMPACT_TORN;
    uint32_t lines = slot_size / DSM_COMPACT_LINE;
    for (uint32_t line = 1; check && line < lines; line++)
        if (slot[line * DSM_COMPACT_LINE] != lv)
            return DSM_COMPACT_TORN;
    if (h.length > cap) {
        if (len)
            *len = h.length;
        return DSM_COMPACT_SMALL;
    }
    uint8_t *o = out;
    uint32_t n = h.length < DSM_COMPACT_LINE - DSM_COMPACT_HDR ? h.length : DSM_COMPACT_LINE - DSM_COMPACT_HDR;
    if (n)
        memcpy(o, slot + DSM_COMPACT_HDR, n);
    uint32_t done = n;
    for (uint32_t line = 1; done < h.length; line++) {
        uint32_t m = h.length - done < DSM_COMPACT_LINE - 1 ? h.length - done : DSM_COMPACT_LINE - 1;
        memcpy(o + done, slot + line * DSM_COMPACT_LINE + 1, m);
        done += m;
    }
    if (check && dsm_compact_checksum(h.id, h.version, h.origin, o, h.length) != dsm_get_u64(slot + 16))
        return DSM_COMPACT_TORN;
    if (len)
        *len = h.length;
    return DSM_COMPACT_VALID;
}

/* ---- pointer ---------------------------------------------------------------- */

dsm_compact_ptr_t dsm_compact_ptr_make(const dsm_compact_ptr_fields_t *f)
{
    dsm_compact_ptr_t p;
    p.w[0] = (f->offset & ((1ull << 40) - 1)) | ((uint64_t)(f->rank & 0xffffu) << 40) |
             ((uint64_t)(f->size_class & 0xffu) << 56);
    p.w[1] = (uint64_t)f->version | ((uint64_t)f->id << 32) | ((uint64_t)f->key_tag << 48);
    return p;
}

void dsm_compact_ptr_decode(const dsm_compact_ptr_t *p, dsm_compact_ptr_fields_t *f)
{
    f->offset = p->w[0] & ((1ull << 40) - 1);
    f->rank = (uint32_t)((p->w[0] >> 40) & 0xffffu);
    f->size_class = (uint32_t)(p->w[0] >> 56);
    f->version = (uint32_t)p->w[1];
    f->id = (uint16_t)(p->w[1] >> 32);
    f->key_tag = (uint16_t)(p->w[1] >> 48);
}

/* ---- ID table ----------------------------------------------------------------- */

uint32_t dsm_compact_idtab_cap(uint32_t slots)
{
    uint32_t cap = 4;
    while (cap < 2 * slots)
        cap <<= 1;
    return cap;
}

static inline uint32_t id_hash(uint16_t id, uint32_t cap) { return ((uint32_t)id * 40503u) & (cap - 1); }

int dsm_compact_idtab_find(const dsm_compact_idtab_t *t, uint16_t id)
{
    if (id == 0)
        return -1;
    for (uint32_t i = id_hash(id, t->cap), n = 0; n < t->cap; i = (i + 1) & (t->cap - 1), n++) {
        uint16_t e = t->ent[i];
        if (e == 0)
            return -1;
        if (t->slot_id[e - 1] == id)
            return e - 1;
    }
    return -1;
}

void dsm_compact_idtab_insert(dsm_compact_idtab_t *t, uint16_t id, uint32_t slot)
{
    uint32_t i = id_hash(id, t->cap);
    while (t->ent[i] != 0)
        i = (i + 1) & (t->cap - 1);
    t->ent[i] = (uint16_t)(slot + 1);
}

/* Removes id (still present in slot_id[] when called) and shifts the
 * entries of its probe run back so lookups never stop early. */
void dsm_compact_idtab_remove(dsm_compact_idtab_t *t, uint16_t id)
{
    uint32_t mask = t->cap - 1, i = id_hash(id, t->cap);
    for (uint32_t n = 0;; i = (i + 1) & mask, n++) {
        if (t->ent[i] == 0 || n >= t->cap)
            return;
        if (t->slot_id[t->ent[i] - 1] == id)
            break;
    }
    uint32_t hole = i;
    for (uint32_t j = (hole + 1) & mask; t->ent[j] != 0; j = (j + 1) & mask) {
        uint32_t home = id_hash(t->slot_id[t->ent[j] - 1], t->cap);
        /* j's entry may fill the hole if its home is not in (hole, j] */
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t->ent[hole] = t->ent[j];
            hole = j;
        }
    }
    t->ent[hole] = 0;
}

/* ---- merging ------------------------------------------------------------------- */

dsm_status_t dsm_compact_plan_merge(const uint16_t *src, const uint16_t *dst, uint32_t slots, uint16_t *to_slot,
                                 uint32_t *moved)
{
    uint32_t nsrc = 0, ndst = 0;
    for (uint32_t i = 0; i < slots; i++) {
        nsrc += src[i] != 0;
        ndst += dst[i] != 0;
    }
    if (nsrc + ndst > slots)
        return DSM_ERR_NOMEM;
    /* Shared IDs: quadratic in the worst case is too slow for 1 MiB blocks of
     * 64-byte slots, so mark the destination's IDs in a bitmap. */
    uint64_t seen[65536 / 64];
    memset(seen, 0, sizeof seen);
    for (uint32_t i = 0; i < slots; i++)
        if (dst[i])
            seen[dst[i] / 64] |= 1ull << (dst[i] % 64);
    for (uint32_t i = 0; i < slots; i++)
        if (src[i] && (seen[src[i] / 64] >> (src[i] % 64) & 1))
            return DSM_ERR_EXISTS;
    /* Kept offsets first, so a moved object never takes a slot a kept one needs. */
    uint32_t nmoved = 0;
    for (uint32_t i = 0; i < slots; i++)
        if (src[i] && dst[i] == 0)
            to_slot[i] = (uint16_t)i;
    uint32_t free_slot = 0;
    for (uint32_t i = 0; i < slots; i++) {
        if (src[i] == 0 || dst[i] == 0)
            continue;
        while (free_slot < slots && (dst[free_slot] != 0 || src[free_slot] != 0))
            free_slot++;
        if (free_slot >= slots)
            return DSM_ERR_NOMEM;   /* cannot happen when the counts fit */
        to_slot[i] = (uint16_t)free_slot++;
        nmoved++;
    }
    if (moved)
        *moved = nmoved;
    return DSM_OK;
}

double dsm_compact_merge_probability(uint32_t n, uint32_t s, uint32_t b1, uint32_t b2)
{
    if ((uint64_t)b1 + b2 > s || b1 > n || b2 > n)
        return 0.0;
    if (b2 > n - b1)
        return 0.0;
    /* C(n-b1, b2) / C(n, b2) = prod_{i<b2} (n-b1-i) / (n-i), in logs for range */
    double lp = lgamma((double)(n - b1) + 1) - lgamma((double)(n - b1 - b2) + 1) - lgamma((double)n + 1) +
                lgamma((double)(n - b2) + 1);
    return exp(lp);
}

uint32_t dsm_compact_id_space(uint32_t bits, uint32_t slots)
{
    if (bits == 0)
        return slots;
    uint32_t ids = (1u << bits) - 1;
    return slots > ids ? slots : ids;
}
