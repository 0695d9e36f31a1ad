/* A region's trace: marking (DFS/BFS), new objects, compaction. */
#include "mheap/trace.h"

#include <stdlib.h>
#include <string.h>

#include "mheap/layout.h"
#include "mheap/msg.h"

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
    /* The children's headers first, all in flight together: marking reads
     * each one, and would otherwise wait for one miss after another. */
    for (uint32_t i = 0; i < ti->nrefs; i++) {
        uint64_t v = load64(mem + off + DSM_MHEAP_OBJ_HDR + ti->refs[i]);
        if (v >= ustart && v - ustart < bp)
            __builtin_prefetch(mem + (v - ustart), 0, 3);
    }
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

uint32_t dsm_mheap_rtrace_end(const dsm_mheap_rtrace_t *t, const uint8_t *mem)
{
    for (uint32_t w = t->region_bytes / 512; w-- > 0;) {
        if (t->bitmap[w] == 0)
            continue;
        uint32_t off = w * 512 + (uint32_t)(63 - __builtin_clzll(t->bitmap[w])) * 8;
        uint32_t size = dsm_mheap_hdr_size(load64(mem + off));
        return size <= t->region_bytes - off ? off + size : off;
    }
    return DSM_MHEAP_REGION_HDR;
}

/* Which of the n regions holds universal address v, or -1. */
static int src_of(const dsm_mheap_evac_src_t *src, uint32_t n, uint32_t region_bytes, uint64_t v)
{
    for (uint32_t i = 0; i < n; i++)
        if (v >= src[i].ustart && v - src[i].ustart < region_bytes)
            return (int)i;
    return -1;
}

/* How far ahead of the copy the evacuation fetches. */
enum { EVAC_AHEAD = 8 };

/* A marked object's rank in its region (its place in address order): the
 * marked objects before its bitmap word (prefix) and below it in the word. */
static inline uint32_t rank_of(const uint64_t *bitmap, const uint32_t *prefix, uint32_t off)
{
    uint32_t w = off >> 9, b = (off >> 3) & 63;
    return prefix[w] + (uint32_t)__builtin_popcountll(bitmap[w] & ((1ull << b) - 1));
}

dsm_status_t dsm_mheap_rtrace_evacuate(const dsm_mheap_evac_src_t *src, uint32_t nsrc,
                                       const dsm_mheap_types_t *types, uint8_t *scratch, dsm_writer_t *pairs,
                                       uint32_t *new_bp, uint32_t *dangling)
{
    *dangling = 0;
    if (nsrc == 0)
        return DSM_ERR_INVALID;
    uint32_t rb = src[0].t->region_bytes, words = rb / 512, total = 0;
    for (uint32_t i = 0; i < nsrc; i++) {
        if (src[i].t->region_bytes != rb || src[i].bp > rb)
            return DSM_ERR_PROTO;
        total += src[i].t->norder;
    }
    /* Each source's objects by address (prefix counts over its bitmap, one
     * marked bit per object of its order) and, by rank, where each went:
     * a pointer's new place without a search. */
    uint32_t *prefix = malloc((size_t)nsrc * words * sizeof *prefix);
    uint32_t *newoff = malloc(2 * (size_t)(total ? total : 1) * sizeof *newoff);
    uint32_t *newsize = newoff ? newoff + total : NULL;   /* by rank, as newoff */
    uint32_t *base = malloc(2 * (size_t)nsrc * sizeof *base), *by_addr = base ? base + nsrc : NULL;
    dsm_status_t st = prefix && newoff && base ? DSM_OK : DSM_ERR_NOMEM;
    for (uint32_t i = 0, at = 0; i < nsrc && st == DSM_OK; i++) {
        uint32_t c = 0;
        base[i] = at;
        for (uint32_t w = 0; w < words; w++) {
            prefix[(size_t)i * words + w] = c;
            c += (uint32_t)__builtin_popcountll(src[i].t->bitmap[w]);
        }
        if (c != src[i].t->norder)
            st = DSM_ERR_PROTO;   /* a trace whose marks and order disagree */
        at += c;
    }
    /* New offsets in traversal order, region after region. Sizes are
     * re-read and checked: the images are quiet now (the CPU server is
     * paused and has evicted them), but a trace may be from before a
     * write-back. */
    uint32_t at = DSM_MHEAP_REGION_HDR;
    for (uint32_t i = 0; i < nsrc && st == DSM_OK; i++) {
        const dsm_mheap_rtrace_t *t = src[i].t;
        for (uint32_t k = 0; k < t->norder && st == DSM_OK; k++) {
            uint32_t off = t->order[k];
            /* Traversal order jumps about the region: the object a few
             * ahead is fetched while this one is copied. */
            if (k + EVAC_AHEAD < t->norder) {
                const uint8_t *ahead = src[i].mem + t->order[k + EVAC_AHEAD];
                __builtin_prefetch(ahead, 0, 0);
                __builtin_prefetch(ahead + 64, 0, 0);
            }
            uint32_t size = dsm_mheap_object_at(src[i].mem, off, src[i].bp, types);
            /* Overlapping "objects" (a corrupt image, or roots into the
             * middle of objects) could add up to more than a region. */
            if (size == 0 || size > rb - at || !bit_get(t->bitmap, off)) {
                st = DSM_ERR_PROTO;
                break;
            }
            memcpy(scratch + at, src[i].mem + off, size);
            uint64_t h = load64(scratch + at);   /* the copy is what gets fixed: check it */
            if (dsm_mheap_hdr_type(h) >= types->n || dsm_mheap_hdr_size(h) != size) {
                st = DSM_ERR_PROTO;
                break;
            }
            uint32_t r = base[i] + rank_of(t->bitmap, prefix + (size_t)i * words, off);
            newoff[r] = at;
            newsize[r] = size;
            at += size;
        }
    }
    /* The pairs' room before anything moves: no memory, nothing moved. */
    if (st == DSM_OK && total && !dsm_writer_reserve(pairs, (size_t)total * DSM_MHEAP_EVAC_PAIR))
        st = DSM_ERR_NOMEM;
    if (st != DSM_OK) {
        free(prefix);
        free(newoff);
        free(base);
        return st;
    }
    /* The copies lie packed in scratch: fix their pointers into the sources. */
    uint64_t dst = src[0].ustart;
    for (uint32_t p = DSM_MHEAP_REGION_HDR; p < at; p += dsm_mheap_hdr_size(load64(scratch + p))) {
        uint8_t *obj = scratch + p;
        const dsm_mheap_tinfo_t *ti = &types->t[dsm_mheap_hdr_type(load64(obj))];
        for (uint32_t k = 0; k < ti->nrefs; k++) {
            uint8_t *slot = obj + DSM_MHEAP_OBJ_HDR + ti->refs[k];
            uint64_t v = load64(slot);
            int i = src_of(src, nsrc, rb, v);
            if (i < 0)
                continue;   /* null or a region not moved here: its remset has it */
            uint32_t off = (uint32_t)(v - src[i].ustart);
            if (off % 8 || !bit_get(src[i].t->bitmap, off)) {
                (*dangling)++;
                store64(slot, 0);
            } else {
                store64(slot, dst + newoff[base[i] + rank_of(src[i].t->bitmap, prefix + (size_t)i * words, off)]);
            }
        }
    }
    memcpy(src[0].mem + DSM_MHEAP_REGION_HDR, scratch + DSM_MHEAP_REGION_HDR, at - DSM_MHEAP_REGION_HDR);
    if (src[0].bp > at)
        memset(src[0].mem + at, 0, src[0].bp - at);
    for (uint32_t i = 1; i < nsrc; i++)   /* emptied: zeros, as a new region */
        if (src[i].bp > DSM_MHEAP_REGION_HDR)
            memset(src[i].mem + DSM_MHEAP_REGION_HDR, 0, src[i].bp - DSM_MHEAP_REGION_HDR);
    /* The pairs ascending by old address: the sources by address, each
     * one's marked objects in bitmap order. */
    for (uint32_t i = 0; i < nsrc; i++) {
        uint32_t j = i;
        for (; j > 0 && src[by_addr[j - 1]].ustart > src[i].ustart; j--)
            by_addr[j] = by_addr[j - 1];
        by_addr[j] = i;
    }
    uint8_t *out = total ? pairs->buf + pairs->len : NULL;   /* reserved above */
    for (uint32_t x = 0; x < nsrc; x++) {
        uint32_t i = by_addr[x], r = base[i];
        for (uint32_t w = 0; w < words; w++)
            for (uint64_t bits = src[i].t->bitmap[w]; bits; bits &= bits - 1, r++, out += DSM_MHEAP_EVAC_PAIR) {
                uint32_t off = w * 512 + (uint32_t)__builtin_ctzll(bits) * 8;
                dsm_put_u64(out, src[i].ustart + off);
                dsm_put_u64(out + 8, dst + newoff[r]);
                dsm_put_u32(out + 16, newsize[r]);
            }
    }
    pairs->len += (size_t)total * DSM_MHEAP_EVAC_PAIR;
    free(prefix);
    free(newoff);
    free(base);
    *new_bp = at;
    return DSM_OK;
}

dsm_status_t dsm_mheap_rtrace_compact(dsm_mheap_rtrace_t *t, uint8_t *mem, uint64_t ustart, uint32_t bp,
                                      const dsm_mheap_types_t *types, uint8_t *scratch, dsm_writer_t *pairs,
                                      uint32_t *new_bp, uint32_t *dangling)
{
    dsm_mheap_evac_src_t one = {.t = t, .mem = mem, .ustart = ustart, .bp = bp};
    return dsm_mheap_rtrace_evacuate(&one, 1, types, scratch, pairs, new_bp, dangling);
}
