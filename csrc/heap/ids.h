/* The heap's ids in the name spaces of the layers below it: its module
 * descriptor (dsm/module.h; the runtime assigns its node slot and handler
 * ids from the module table), its handlers' ids relative to its block, the
 * fabric region id of every node's partition, and the key under which a
 * node publishes its partition at join. */
#ifndef DSM_HEAP_IDS_H
#define DSM_HEAP_IDS_H

#include "dsm/module.h"

extern dsm_module_t dsm_heap_module;

enum {
    DSM_HEAP_AM_ALLOC,
    DSM_HEAP_AM_FREE,
    DSM_HEAP_AM_CHECK,
    DSM_HEAP_AM_OPS,     /* guarded reads, writes, atomics (heap/ops.h) */
    DSM_HEAP_AM_COUNT,
};
#define DSM_AM_HEAP_ALLOC dsm_module_am(&dsm_heap_module, DSM_HEAP_AM_ALLOC)
#define DSM_AM_HEAP_FREE dsm_module_am(&dsm_heap_module, DSM_HEAP_AM_FREE)
#define DSM_AM_HEAP_CHECK dsm_module_am(&dsm_heap_module, DSM_HEAP_AM_CHECK)
#define DSM_AM_HEAP_OPS dsm_module_am(&dsm_heap_module, DSM_HEAP_AM_OPS)

enum { DSM_HEAP_REGION = 0 };      /* fabric region id of a node's partition, on every node */

#define DSM_HEAP_PUBLISH_KEY "heap.partition"

#endif
