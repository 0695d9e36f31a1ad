/* A region's trace: marking (DFS/BFS), new objects, compaction. */
#include "mheap/trace.h"

#include <stdlib.h>
#include <string.h>

#include "mheap/layout.h"

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void store64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static inline int bit_get(const uint64_t *b, uint32_t off) { return (b[off >> 9] >> ((off >> 3) & 63)) & 1; }
static inline void bit_set(uint64_t *b, uint32_t off) { b[off >> 9] |= 1ull << ((off >> 3) & 63); }

dsm_status_t dsm_mheap_rtrace_init(dsm_mheap_rtrace_t *t, uint32_t region_bytes)
{
    memset(t, 0, sizeof *t);
    t->region_bytes = region_bytes;
    size_t maxobj = region_bytes / 16;
    t->bitmap = calloc(region_bytes / 512, sizeof(uint64_t));
    t->order = malloc(maxobj * sizeof(uint32_t));
    t->stack = malloc(maxobj * sizeof(uint32_t));
    if (!t->bitmap || !t->order || !t->stack) {
        dsm_mheap_rtrace_free(t);
        return DSM_ERR_NOMEM;
    }
    return DSM_OK;
}

void dsm_mheap_rtrace_reset(dsm_mheap_rtrace_t *t)
{
    if (t->bitmap)
        memset(t->bitmap, 0, (t->region_bytes / 512) * sizeof(uint64_t));
    t->norder = 0;
    t->live_bytes = 0;
    t->traced_bytes = 0;
    t->valid = 0;
    t->epoch = 0;
    t->stopped = 0;
}

void dsm_mheap_rtrace_free(dsm_mheap_rtrace_t *t)
{
    free(t->bitmap);
    free(t->order);
    free(t->stack);
    t->bitmap = NULL;
    t->order = t->stack = NULL;
}

uint32_t dsm_mheap_object_at(const uint8_t *mem, uint32_t off, uint32_t bp, const dsm_mheap_types_t *types)
{
    if (off < DSM_MHEAP_REGION_HDR || off % 8 != 0 || off >= bp || bp - off < DSM_MHEAP_OBJ_HDR)
        return 0;
    uint64_t h = load64(mem + off);
    uint32_t type = dsm_mheap_hdr_type(h), size = dsm_mheap_hdr_size(h);
    if (type >= types->n || size != types->t[type].size || size > bp - off)
        return 0;
    return size;
}

/* Mark the object at off if it is one and not yet marked: 1 if newly marked. */
static int mark_one(dsm_mheap_rtrace_t *t, const uint8_t *mem, uint32_t off, uint32_t bp,
                    const dsm_mheap_types_t *types)
{
    if (off >= t->region_bytes || bit_get(t->bitmap, off & ~7u))
        return 0;
    uint32_t size = dsm_mheap_object_at(mem, off, bp, types);
    if (size == 0)
        return 0;
    bit_set(t->bitmap, off);
    t->live_bytes += size;
    return 1;
}

static void scan(dsm_mheap_rtrace_t *t, const uint8_t *mem, uint64_t ustart, uint32_t bp,
                 const dsm_mheap_types_t *types, int bfs, uint32_t off, uint32_t *sp)
{
    /* Re-read and re-check the header: the image may have changed since it
     * was marked, and the fields read below must lie inside the object. */
    uint64_t h = load64(mem + off);
    uint32_t type = dsm_mheap_hdr_type(h);
    if (type >= types->n || dsm_mheap_hdr_size(h) != types->t[type].size || types->t[type].size > bp - off)
        return;
    const dsm_mheap_tinfo_t *ti = &types->t[type];
    t->traced_bytes += ti->size;
    for (uint32_t i = 0; i < ti->nrefs; i++) {
        uint64_t v = load64(mem + off + DSM_MHEAP_OBJ_HDR + ti->refs[i]);
        if (v < ustart || v - ustart >= t->region_bytes)
            continue;   /* null or another region: its remset has it */
        uint32_t child = (uint32_t)(v - ustart);
        if (!mark_one(t, mem, child, bp, types))
            continue;
        if (bfs)
            t->order[t->norder++] = child;
        else
            t->stack[(*sp)++] = child;
    }
}

/* Whether the trace's owner asked it to stop (looked at every STOP_EVERY
 * objects scanned: an atomic load is cheap, but not per object). */
enum { STOP_EVERY = 256 };
static int must_stop(dsm_mheap_rtrace_t *t, uint32_t *scanned)
{
    if (t->stop == NULL || ++*scanned % STOP_EVERY != 0)
        return 0;
    if (__atomic_load_n(t->stop, __ATOMIC_ACQUIRE) == t->stop_gen)
        return 0;
    t->stopped = 1;
    return 1;
}

void dsm_mheap_rtrace_mark(dsm_mheap_rtrace_t *t, const uint8_t *mem, uint64_t ustart, uint32_t bp,
                           const dsm_mheap_types_t *types, int bfs, const uint8_t *roots, uint32_t nroots)
{
    if (bp > t->region_bytes)
        bp = t->region_bytes;
    uint32_t sp = 0, head = t->norder, scanned = 0;
    for (uint32_t i = 0; i < nroots && !t->stopped; i++) {
        uint64_t v = dsm_get_u64(roots + 8 * (size_t)i);
        if (v < ustart || v - ustart >= t->region_bytes)
            continue;
        uint32_t off = (uint32_t)(v - ustart);
        if (!mark_one(t, mem, off, bp, types))
            continue;
        if (bfs) {
            t->order[t->norder++] = off;
            while (head < t->norder && !must_stop(t, &scanned))
                scan(t, mem, ustart, bp, types, 1, t->order[head++], &sp);
        } else {
            t->stack[sp++] = off;
            while (sp > 0 && !must_stop(t, &scanned)) {
                uint32_t o = t->stack[--sp];
                t->order[t->norder++] = o;
                scan(t, mem, ustart, bp, types, 0, o, &sp);
            }
        }
    }
}

dsm_status_t dsm_mheap_rtrace_mark_new(dsm_mheap_rtrace_t *t, const uint8_t *mem, uint32_t old_bp, uint32_t bp,
                                       const dsm_mheap_types_t *types)
{
    if (bp > t->region_bytes || old_bp > bp)
        return DSM_ERR_PROTO;
    uint32_t off = old_bp < DSM_MHEAP_REGION_HDR ? DSM_MHEAP_REGION_HDR : old_bp;
    while (off < bp) {
        uint32_t size = dsm_mheap_object_at(mem, off, bp, types);
        if (size == 0)
            return DSM_ERR_PROTO;
        if (!bit_get(t->bitmap, off)) {
            bit_set(t->bitmap, off);
            t->live_bytes += size;
            t->order[t->norder++] = off;
        }
        off += size;
    }
    return DSM_OK;
}

/* A survivor's move: its universal address before, its offset in the
 * destination after; sorted by old address, the forward table. */
typedef struct fwd {
    uint64_t old;
    uint32_t new_off, size;
} fwd_t;

static int fwd_cmp(const void *a, const void *b)
{
    uint64_t x = ((const fwd_t *)a)->old, y = ((const fwd_t *)b)->old;
    return x < y ? -1 : x > y;
}

static const fwd_t *fwd_find(const fwd_t *f, uint32_t n, uint64_t old)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (f[mid].old < old)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && f[lo].old == old ? &f[lo] : NULL;
}

/* Which of the n regions holds universal address v, or -1. */
static int src_of(const dsm_mheap_evac_src_t *src, uint32_t n, uint32_t region_bytes, uint64_t v)
{
    for (uint32_t i = 0; i < n; i++)
        if (v >= src[i].ustart && v - src[i].ustart < region_bytes)
            return (int)i;
    return -1;
}

dsm_status_t dsm_mheap_rtrace_evacuate(const dsm_mheap_evac_src_t *src, uint32_t nsrc,
                                       const dsm_mheap_types_t *types, uint8_t *scratch, dsm_writer_t *pairs,
                                       uint32_t *new_bp, uint32_t *dangling)
{
    *dangling = 0;
    if (nsrc == 0)
        return DSM_ERR_INVALID;
    uint32_t rb = src[0].t->region_bytes, total = 0;
    for (uint32_t i = 0; i < nsrc; i++) {
        if (src[i].t->region_bytes != rb || src[i].bp > rb)
            return DSM_ERR_PROTO;
        total += src[i].t->norder;
    }
    fwd_t *f = malloc((total ? total : 1) * sizeof *f);
    if (f == NULL)
        return DSM_ERR_NOMEM;
    /* New offsets in traversal order, region after region: the forward
     * table. Sizes are re-read and checked: the images are quiet now (the
     * CPU server is paused and has evicted them), but a trace may be from
     * before a write-back. */
    uint32_t at = DSM_MHEAP_REGION_HDR, n = 0;
    for (uint32_t i = 0; i < nsrc; i++) {
        const dsm_mheap_rtrace_t *t = src[i].t;
        for (uint32_t k = 0; k < t->norder; k++) {
            uint32_t off = t->order[k];
            uint32_t size = dsm_mheap_object_at(src[i].mem, off, src[i].bp, types);
            /* Overlapping "objects" (a corrupt image, or roots into the
             * middle of objects) could add up to more than a region. */
            if (size == 0 || size > rb - at) {
                free(f);
                return DSM_ERR_PROTO;
            }
            memcpy(scratch + at, src[i].mem + off, size);
            uint64_t h = load64(scratch + at);   /* the copy is what gets fixed: check it */
            if (dsm_mheap_hdr_type(h) >= types->n || dsm_mheap_hdr_size(h) != size) {
                free(f);
                return DSM_ERR_PROTO;
            }
            f[n++] = (fwd_t){src[i].ustart + off, at, size};
            at += size;
        }
    }
    qsort(f, n, sizeof *f, fwd_cmp);
    uint64_t dst = src[0].ustart;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *obj = scratch + f[i].new_off;
        const dsm_mheap_tinfo_t *ti = &types->t[dsm_mheap_hdr_type(load64(obj))];
        for (uint32_t k = 0; k < ti->nrefs; k++) {
            uint8_t *slot = obj + DSM_MHEAP_OBJ_HDR + ti->refs[k];
            uint64_t v = load64(slot);
            if (src_of(src, nsrc, rb, v) < 0)
                continue;   /* null or a region not moved here: its remset has it */
            const fwd_t *g = fwd_find(f, n, v);
            if (g == NULL) {
                (*dangling)++;
                store64(slot, 0);
            } else {
                store64(slot, dst + g->new_off);
            }
        }
    }
    memcpy(src[0].mem + DSM_MHEAP_REGION_HDR, scratch + DSM_MHEAP_REGION_HDR, at - DSM_MHEAP_REGION_HDR);
    if (src[0].bp > at)
        memset(src[0].mem + at, 0, src[0].bp - at);
    for (uint32_t i = 1; i < nsrc; i++)   /* emptied: zeros, as a new region */
        if (src[i].bp > DSM_MHEAP_REGION_HDR)
            memset(src[i].mem + DSM_MHEAP_REGION_HDR, 0, src[i].bp - DSM_MHEAP_REGION_HDR);
    for (uint32_t i = 0; i < n; i++) {
        dsm_write_u64(pairs, f[i].old);
        dsm_write_u64(pairs, dst + f[i].new_off);
        dsm_write_u32(pairs, f[i].size);
    }
    free(f);
    *new_bp = at;
    return pairs->ok || n == 0 ? DSM_OK : DSM_ERR_NOMEM;
}

dsm_status_t dsm_mheap_rtrace_compact(dsm_mheap_rtrace_t *t, uint8_t *mem, uint64_t ustart, uint32_t bp,
                                      const dsm_mheap_types_t *types, uint8_t *scratch, dsm_writer_t *pairs,
                                      uint32_t *new_bp, uint32_t *dangling)
{
    dsm_mheap_evac_src_t one = {.t = t, .mem = mem, .ustart = ustart, .bp = bp};
    return dsm_mheap_rtrace_evacuate(&one, 1, types, scratch, pairs, new_bp, dangling);
}
