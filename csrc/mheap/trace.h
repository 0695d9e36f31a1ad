/* One region's trace as a memory server keeps it (MSCT): the live bitmap
 * (1 bit per 8 bytes), the order in which objects were reached (DFS or BFS),
 * which is also the forward table (an object's new offset is the sum of the
 * sizes before it in that order), and the compaction that moves survivors
 * to those offsets and fixes the region's internal pointers. Pure functions
 * over a region image: the image may be changing under the tracer (it is
 * the memory one-sided writes land in), so every pointer, type id and size
 * is checked before use, and a result is kept only if the region's tag says
 * no write-back overlapped it (the caller checks). */
#ifndef DSM_MHEAP_TRACE_H
#define DSM_MHEAP_TRACE_H

#include <stdint.h>

#include "dsm/mheap.h"
#include "mheap/types.h"
#include "util/bytes.h"

typedef struct dsm_mheap_rtrace {
    uint32_t region_bytes;
    uint64_t *bitmap;     /* region_bytes / 8 bits */
    uint32_t *order;      /* marked offsets in traversal order */
    uint32_t norder;
    uint32_t *stack;      /* DFS work list */
    uint64_t live_bytes;
    uint64_t traced_bytes;
    uint32_t epoch;
    int valid;            /* a trace of `epoch` that was not discarded */
    /* With stop set, marking gives up (stopped = 1) once *stop no longer
     * holds stop_gen: a memory server's trace that a pause overtook. */
    const uint32_t *stop;
    uint32_t stop_gen;
    int stopped;
} dsm_mheap_rtrace_t;

dsm_status_t dsm_mheap_rtrace_init(dsm_mheap_rtrace_t *t, uint32_t region_bytes);
void dsm_mheap_rtrace_reset(dsm_mheap_rtrace_t *t);
void dsm_mheap_rtrace_free(dsm_mheap_rtrace_t *t);

/* The object at region offset off, if its header is a valid object of
 * `types` that ends at or before bp: its size, else 0. */
uint32_t dsm_mheap_object_at(const uint8_t *mem, uint32_t off, uint32_t bp, const dsm_mheap_types_t *types);

/* Mark transitively from `nroots` roots (u64 universal addresses, raw
 * little-endian) over the image mem of the region starting at universal
 * address ustart, objects below bp. Roots and fields pointing outside the
 * region, below the header, unaligned or at no valid object are ignored;
 * marked objects are not rescanned (which is why a remark needs the SATB
 * log). Adds to traced_bytes. Returns early, with stopped set, if t->stop
 * says so (checked every few hundred objects). */
void dsm_mheap_rtrace_mark(dsm_mheap_rtrace_t *t, const uint8_t *mem, uint64_t ustart, uint32_t bp,
                           const dsm_mheap_types_t *types, int bfs, const uint8_t *roots, uint32_t nroots);

/* Mark the objects allocated since the last collection, [old_bp, bp), as
 * live without tracing them. DSM_ERR_PROTO if they do not parse. */
dsm_status_t dsm_mheap_rtrace_mark_new(dsm_mheap_rtrace_t *t, const uint8_t *mem, uint32_t old_bp, uint32_t bp,
                                       const dsm_mheap_types_t *types);

/* Where the marked object at the highest offset ends, by its header: the
 * region's bump pointer as far as the trace's objects go (the region
 * header if none is marked; that object's offset if its header does not
 * fit the region, which evacuation then refuses). */
uint32_t dsm_mheap_rtrace_end(const dsm_mheap_rtrace_t *t, const uint8_t *mem);

/* Move the marked objects, in traversal order (new objects last), packed
 * from the region header on, through `scratch` (region_bytes), fix the
 * moved objects' pointers into the region and zero the rest below bp.
 * Appends {u64 old, u64 new, u32 size} per survivor, ascending by old, to
 * pairs and sets *new_bp. A pointer into the region at an unmarked object
 * is set to null and counted in *dangling (a sound trace has none). */
dsm_status_t dsm_mheap_rtrace_compact(dsm_mheap_rtrace_t *t, uint8_t *mem, uint64_t ustart, uint32_t bp,
                                      const dsm_mheap_types_t *types, uint8_t *scratch, dsm_writer_t *pairs,
                                      uint32_t *new_bp, uint32_t *dangling);

/* One region of an evacuation: its trace, its image, where it starts and
 * its bump pointer. */
typedef struct dsm_mheap_evac_src {
    const dsm_mheap_rtrace_t *t;
    uint8_t *mem;
    uint64_t ustart;
    uint32_t bp;
} dsm_mheap_evac_src_t;

/* Evacuate the marked objects of nsrc regions (src[0] is the destination)
 * into src[0], packed from the region header on in traversal order, region
 * after region, so that regions which reference each other end up in one
 * (co-location). Pointers between the moved objects are fixed (a pointer
 * into a source at an unmarked object is nulled and counted in *dangling);
 * src[0] is zeroed above *new_bp up to its bp, the other sources below
 * their bp. Appends {u64 old, u64 new, u32 size} per survivor, ascending
 * by old. DSM_ERR_PROTO if the survivors do not parse or do not fit, or
 * a trace's marks and order disagree (a trace stopped part way). */
dsm_status_t dsm_mheap_rtrace_evacuate(const dsm_mheap_evac_src_t *src, uint32_t nsrc,
                                       const dsm_mheap_types_t *types, uint8_t *scratch, dsm_writer_t *pairs,
                                       uint32_t *new_bp, uint32_t *dangling);

#endif
