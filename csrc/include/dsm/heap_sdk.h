/* The global heap's calls for mechanisms and workloads, beyond dsm/heap.h:
 * an unchecked pointer into this node's own partition (what a mechanism
 * reads its own objects through) and the partition's usage.
 *
 * Part of the SDK (dsm/sdk.h). */
#ifndef DSM_HEAP_SDK_H
#define DSM_HEAP_SDK_H

#include <stdint.h>
#include "dsm/api.h"
#include "dsm/node.h"
#include "dsm/heap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A local pointer for an address in this node's own partition, or NULL. */
DSM_API void *dsm_local_ptr(dsm_node_t *node, dsm_gaddr_t addr);

/* Bytes allocated / capacity of this node's partition. */
DSM_API void dsm_heap_usage(dsm_node_t *node, uint64_t *allocated, uint64_t *capacity);

#ifdef __cplusplus
}
#endif
#endif
