/* The memory-server side of the managed heap (internal): a test hook into
 * the tracer, so a test can act at a chosen point of a trace without
 * timing. */
#ifndef DSM_MHEAP_SERVER_H
#define DSM_MHEAP_SERVER_H

#include <stdint.h>

/* Called on a memory server's tracer thread after a TRACE has marked region
 * `region` and before it re-reads the region's tag; NULL for none.
 * Process-wide (tests only). */
typedef void (*dsm_mheap_trace_hook_t)(void *ctx, uint32_t region);
void dsm_mheap_set_trace_hook(dsm_mheap_trace_hook_t fn, void *ctx);

#endif
