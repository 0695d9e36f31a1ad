/* The global heap: 64-bit global addresses, a partition per node, a
 * size-class allocator, and reads, writes and atomics by global address.
 * Every access is checked: outside a partition or into a freed block gives
 * DSM_ERR_BAD_ADDR, never a crash of the target. (Unchecked local
 * pointers, for mechanisms and workloads, are the SDK's: dsm/heap_sdk.h.)
 *
 * Part of the user API (dsm/dsm.h). */
#ifndef DSM_HEAP_H
#define DSM_HEAP_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/node.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Global address: bits 0..39 offset in the node's partition, bits 40..47 node
 * rank, bits 48..63 a tag: for an address from dsm_alloc its allocation's
 * generation (1..0x7fff; a freed or reused allocation's address is refused),
 * 0 for a raw address (checked only against live blocks, exactly with
 * DSM_CHECKED=1), and in own's box handles a DRust colour (own strips it
 * before the heap sees it). 0 is the null address. */
typedef uint64_t dsm_gaddr_t;
enum { DSM_GADDR_OFFSET_BITS = 40, DSM_GADDR_NODE_BITS = 8, DSM_GADDR_COLOUR_SHIFT = 48 };

/* pydsm's CFFI build (DSM_CFFI) sees plain prototypes: its parser takes no
 * function bodies, and API mode compiles calls to these inline functions. */
#ifndef DSM_CFFI
static inline dsm_gaddr_t dsm_gaddr_make(uint32_t node, uint64_t offset)
{
    return ((uint64_t)(node & 0xffu) << DSM_GADDR_OFFSET_BITS) | (offset & ((1ull << DSM_GADDR_OFFSET_BITS) - 1));
}
static inline uint32_t dsm_gaddr_node(dsm_gaddr_t a) { return (uint32_t)((a >> DSM_GADDR_OFFSET_BITS) & 0xffu); }
static inline uint64_t dsm_gaddr_offset(dsm_gaddr_t a) { return a & ((1ull << DSM_GADDR_OFFSET_BITS) - 1); }
static inline uint16_t dsm_gaddr_colour(dsm_gaddr_t a) { return (uint16_t)(a >> DSM_GADDR_COLOUR_SHIFT); }
static inline dsm_gaddr_t dsm_gaddr_with_colour(dsm_gaddr_t a, uint16_t colour)
{
    return (a & ((1ull << DSM_GADDR_COLOUR_SHIFT) - 1)) | ((uint64_t)colour << DSM_GADDR_COLOUR_SHIFT);
}
/* The address without its colour (what the heap uses to locate memory). */
static inline dsm_gaddr_t dsm_gaddr_strip(dsm_gaddr_t a) { return a & ((1ull << DSM_GADDR_COLOUR_SHIFT) - 1); }
#else
dsm_gaddr_t dsm_gaddr_make(uint32_t node, uint64_t offset);
uint32_t dsm_gaddr_node(dsm_gaddr_t a);
uint64_t dsm_gaddr_offset(dsm_gaddr_t a);
uint16_t dsm_gaddr_colour(dsm_gaddr_t a);
dsm_gaddr_t dsm_gaddr_with_colour(dsm_gaddr_t a, uint16_t colour);
dsm_gaddr_t dsm_gaddr_strip(dsm_gaddr_t a);
#endif


/* DSM_OK if partitions of `bytes` in all (every node this host will run)
 * fit in the host's available memory and, when `in_shm` (the partitions
 * are shared-memory files), in /dev/shm; else DSM_ERR_NOMEM with, in `why`,
 * what there is. A node checks its own partition the same way when it starts. */
DSM_API dsm_status_t dsm_partitions_fit(uint64_t bytes, int in_shm, char *why, size_t why_cap);

/* Size of member `rank`'s partition as this node's heap knows it (0 if none,
 * unknown, or the heap is not attached). */
DSM_API uint64_t dsm_heap_partition_size(dsm_node_t *node, uint32_t rank);

/* Allocate `size` bytes on node `rank` (this node or a peer). Sizes up to the
 * largest size class come from thread-local blocks; larger ones take whole
 * blocks. Exhaustion gives DSM_ERR_NOMEM. */
DSM_API dsm_status_t dsm_alloc(dsm_node_t *node, uint32_t rank, size_t size, dsm_gaddr_t *out);
DSM_API dsm_status_t dsm_free(dsm_node_t *node, dsm_gaddr_t addr);
/* Usable size of an allocation. */
DSM_API dsm_status_t dsm_alloc_size(dsm_node_t *node, dsm_gaddr_t addr, size_t *size);

DSM_API dsm_status_t dsm_read(dsm_node_t *node, dsm_gaddr_t addr, void *dst, size_t len);
DSM_API dsm_status_t dsm_write(dsm_node_t *node, dsm_gaddr_t addr, const void *src, size_t len);
/* 64-bit atomics on an 8-byte aligned word. */
DSM_API dsm_status_t dsm_fetch_add(dsm_node_t *node, dsm_gaddr_t addr, uint64_t value, uint64_t *old);
DSM_API dsm_status_t dsm_cas(dsm_node_t *node, dsm_gaddr_t addr, uint64_t expected, uint64_t desired, uint64_t *old);
DSM_API dsm_status_t dsm_swap(dsm_node_t *node, dsm_gaddr_t addr, uint64_t value, uint64_t *old);

/* Batches: n operations of one kind on n addresses (any nodes), issued
 * non-blocking a window at a time and completed together, so that a batch
 * costs about one round trip per window rather than one per element. Each
 * element is checked as the single operation checks it; statuses[i] (when
 * not NULL) gets each element's status, and the first error is returned.
 * read: element i of elem_len bytes from addrs[i] into dst + i*elem_len;
 * write: from src + i*elem_len to addrs[i] (visible at the targets on
 * return); fetch_add: addrs[i] += values[i] (8-byte aligned words), the old
 * value into olds[i] (olds may be NULL). */
DSM_API dsm_status_t dsm_read_batch(dsm_node_t *node, const dsm_gaddr_t *addrs, void *dst, size_t elem_len,
                                    size_t n, dsm_status_t *statuses);
DSM_API dsm_status_t dsm_write_batch(dsm_node_t *node, const dsm_gaddr_t *addrs, const void *src,
                                     size_t elem_len, size_t n, dsm_status_t *statuses);
DSM_API dsm_status_t dsm_fetch_add_batch(dsm_node_t *node, const dsm_gaddr_t *addrs, const uint64_t *values,
                                         uint64_t *olds, size_t n, dsm_status_t *statuses);

#ifdef __cplusplus
}
#endif
#endif
