/* The managed heap's ids in the name spaces below it (its module
 * descriptor, dsm/module.h, whose slot and handler ids the runtime assigns
 * from the module table; handler ids relative to its block) and its memory
 * layout, shared by the CPU server and the memory servers:
 *
 * Universal range: [DSM_MHEAP_UBASE, +heap_bytes), split evenly over the
 * memory servers in the config's order; server i holds part i. Each part is
 * a whole number of regions.
 * Region (1..4 MiB): word 0 is the eviction tag, words 1..7 reserved, then
 * objects packed from DSM_MHEAP_REGION_HDR up to the region's bump pointer
 * bp (the CPU server's descriptor holds bp). Objects never span regions and
 * there are no holes below bp.
 * Object: one header word {type:32 (low), size:32} (size = header + payload,
 * a multiple of 8), then the payload; reference fields are 8-byte universal
 * addresses (0 = null). Words are host byte order: the heap's memory is
 * moved as pages, never re-encoded (every supported host is little-endian).
 * Tag: {started:32 (high), finished:32} eviction counters, each bumped by a
 * fetch-and-add around a region's write-back. dirty = started - finished,
 * version = finished: a trace is kept only if the tag read before it shows
 * no write-back in flight and the tag read after it is unchanged. */
#ifndef DSM_MHEAP_LAYOUT_H
#define DSM_MHEAP_LAYOUT_H

#include <stdint.h>

#include "dsm/module.h"

extern dsm_module_t dsm_mheap_module;
enum {
    DSM_MHEAP_AM_CTL,          /* every control request (mheap/msg.h) */
    DSM_MHEAP_AM_DONE,         /* a memory server's TRACE_DONE, to the CPU server */
    DSM_MHEAP_AM_COUNT,
};
#define DSM_AM_MHEAP_CTL dsm_module_am(&dsm_mheap_module, DSM_MHEAP_AM_CTL)
#define DSM_AM_MHEAP_DONE dsm_module_am(&dsm_mheap_module, DSM_MHEAP_AM_DONE)

#define DSM_MHEAP_UBASE (1ull << 44)
enum { DSM_MHEAP_REGION_HDR = 64, DSM_MHEAP_OBJ_HDR = 8 };

static inline uint64_t dsm_mheap_hdr_make(uint32_t type, uint32_t size)
{
    return (uint64_t)type | ((uint64_t)size << 32);
}
static inline uint32_t dsm_mheap_hdr_type(uint64_t h) { return (uint32_t)h; }
static inline uint32_t dsm_mheap_hdr_size(uint64_t h) { return (uint32_t)(h >> 32); }

static inline uint64_t dsm_mheap_tag_started(uint64_t t) { return t >> 32; }
static inline uint64_t dsm_mheap_tag_finished(uint64_t t) { return t & 0xffffffffu; }
/* Added to the tag when a write-back starts / finishes. */
#define DSM_MHEAP_TAG_START (1ull << 32)
#define DSM_MHEAP_TAG_FINISH 1ull

#endif
