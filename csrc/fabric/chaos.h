/* The fabric's chaos mode as its users see it: whether it is on and what it
 * did (chaos.c; the spec in chaos_spec.h). */
#ifndef DSM_FABRIC_CHAOS_H
#define DSM_FABRIC_CHAOS_H

#include <stdint.h>

#include "dsm/fabric.h"

typedef struct dsm_chaos_counts {
    int on;
    uint64_t delayed;    /* messages sent after a drawn delay */
    uint64_t late;       /* one-sided writes completed before they were placed */
    uint64_t split;      /* writes placed as 8-byte pieces in random order */
    uint64_t dropped;    /* delayed items whose peer was gone when they were due */
    uint64_t unordered;  /* a handler's get or flush that could not wait for its queue */
    /* on the deferred emulated requests (defer.c) */
    uint64_t defer_held;    /* batches sent after a drawn delay */
    uint64_t defer_opened;  /* queues held open for a drawn time */
    uint64_t defer_early;   /* queues sent at once when a request joined */
} dsm_chaos_counts_t;

/* Cut the link to `rank` now for ms milliseconds, as a cut= item does at
 * its send step (tests that must cut at a moment of their choosing, not a
 * step count); DSM_ERR_STATE when chaos is off on f. */
dsm_status_t dsm_fabric_chaos_cut(dsm_fabric_t *f, uint32_t rank, uint32_t ms);

/* What chaos did on f so far (all zero, on 0, when it is off). */
void dsm_fabric_chaos_counts(dsm_fabric_t *f, dsm_chaos_counts_t *out);

#endif
