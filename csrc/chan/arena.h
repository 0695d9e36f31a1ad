/* The channel arena's space: first-fit extents of one registered region,
 * so every channel's regions share one fabric region (the fabric has
 * DSM_FABRIC_MAX_REGIONS ids per peer, channels are many). Offsets are
 * 64-byte aligned; the first line is the fence word (never handed out),
 * which fences read. Not thread-safe: the manager's lock guards it. */
#ifndef DSM_CHAN_ARENA_H
#define DSM_CHAN_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

enum { CHAN_ARENA_ALIGN = 64, CHAN_ARENA_MAX_FREE = 256 };

typedef struct chan_arena {
    uint64_t size;
    uint32_t nfree;
    struct { uint64_t off, len; } free[CHAN_ARENA_MAX_FREE];   /* sorted by offset, coalesced */
} chan_arena_t;

void chan_arena_init(chan_arena_t *a, uint64_t size);
/* DSM_ERR_NOMEM when no extent fits. */
dsm_status_t chan_arena_alloc(chan_arena_t *a, uint64_t len, uint64_t *off);
void chan_arena_free(chan_arena_t *a, uint64_t off, uint64_t len);

#endif
