/* The heap's ids in the name spaces of the layers below it: its block of
 * active-message handler ids (8..15 of the fabric's space, see dsm/fabric.h),
 * its module slot on a node, the fabric region id of every node's partition,
 * and the key under which a node publishes its partition at join. */
#ifndef DSM_HEAP_IDS_H
#define DSM_HEAP_IDS_H

#include "dsm/node.h"

enum {
    DSM_AM_HEAP_ALLOC = 8,
    DSM_AM_HEAP_FREE = 9,
    DSM_AM_HEAP_CHECK = 10,
    DSM_AM_HEAP_OPS = 11,     /* guarded reads, writes, atomics (heap/ops.h) */
    DSM_AM_HEAP_LAST = 15,    /* 12..15 reserved for the heap */
};

enum { DSM_HEAP_MODULE = 0 };      /* dsm_node_set_module slot */
enum { DSM_HEAP_REGION = 0 };      /* fabric region id of a node's partition, on every node */

#define DSM_HEAP_PUBLISH_KEY "heap.partition"

#endif
