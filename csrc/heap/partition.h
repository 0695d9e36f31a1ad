/* The heap's partition: the memory a node serves, fabric region
 * DSM_HEAP_REGION on every node. Creation (memfd-backed and registered on
 * tcp/verbs, allocated by the fabric on shm/auto so that peers map it), the
 * value a node publishes for it at join ({base, size, packed key}) with its
 * checked decoder, and teardown. */
#ifndef DSM_HEAP_PARTITION_H
#define DSM_HEAP_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/fabric.h"
#include "dsm/node.h"
#include "dsm/status.h"

typedef struct dsm_heap_partition {
    void *base;             /* NULL if the node serves no memory */
    uint64_t size;          /* rounded up to whole pages */
    int memfd;              /* -1 where the fabric allocated the memory */
    dsm_region_t *region;
} dsm_heap_partition_t;

/* Bytes a partition serving at least `requested` bytes of blocks takes
 * (the header and generation table added, in whole pages); 0 for 0. */
uint64_t dsm_heap_partition_rounded(uint64_t requested);

/* Create and register a partition of `size` bytes (already rounded; 0 gives
 * an empty partition). On failure *p is left destroyable. */
dsm_status_t dsm_heap_partition_create(dsm_fabric_t *fabric, dsm_transport_t transport, uint64_t size,
                                       dsm_heap_partition_t *p);
/* Unregister and free. The fabric must have stopped (no handler may touch
 * the memory) and not yet be destroyed. */
void dsm_heap_partition_destroy(dsm_heap_partition_t *p);


/* For tests: this node's own partition as its heap holds it (NULL, size 0
 * if the heap is not attached or the node serves no memory). */
void *dsm_heap_local_partition(dsm_node_t *node, uint64_t *size);

/* Called only by the heap's module descriptor, and by tests and benchmarks that build a node by hand (not exported). */
/* Attach the heap to a node between dsm_node_create and dsm_node_join:
 * creates the node's partition (dsm_node_config_t.partition_size bytes,
 * rounded up to whole pages; none for 0), formats it, publishes it so that
 * peers can reach it, and registers the alloc/free handlers. */
dsm_status_t dsm_heap_attach(dsm_node_t *node);

#endif
