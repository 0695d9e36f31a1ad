/* The memory-server side of the managed heap (internal): a test hook into
 * the tracer, so a test can act at a chosen point of a trace without
 * timing, and the registry of a node's CPU-side heaps. */
#ifndef DSM_MHEAP_SERVER_H
#define DSM_MHEAP_SERVER_H

#include <stdint.h>

#include "dsm/mheap.h"
#include "dsm/node.h"

/* Called on a memory server's tracer thread after a TRACE has marked region
 * `region` and before it re-reads the region's tag; NULL for none.
 * Process-wide (tests only). */
typedef void (*dsm_mheap_trace_hook_t)(void *ctx, uint32_t region);
void dsm_mheap_set_trace_hook(dsm_mheap_trace_hook_t fn, void *ctx);

/* The CPU-side heaps of this node, so that a memory server's TRACE_DONE
 * finds its heap (by id) in the node's DSM_AM_MHEAP_DONE handler.
 * DSM_ERR_STATE when the node serves no managed heap (dsm_mheap_attach was
 * not called): the heap then waits for its traces the blocking way. */
dsm_status_t mheap_server_add_heap(dsm_node_t *node, dsm_mheap_t *h, uint32_t heap_id);
void mheap_server_remove_heap(dsm_node_t *node, dsm_mheap_t *h);

/* Not exported: the module table attaches the managed heap. */
/* Serve the managed heap on this node (memory-server side): its handlers and
 * its tracer thread. Between dsm_node_create and dsm_node_join; dsm_start
 * calls it. */
dsm_status_t dsm_mheap_attach(dsm_node_t *node);

#endif
