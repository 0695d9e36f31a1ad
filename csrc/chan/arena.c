/* The channel arena's space (arena.h): a sorted, coalesced free list. */
#include <string.h>

#include "chan/arena.h"

static uint64_t round_up(uint64_t len) { return (len + CHAN_ARENA_ALIGN - 1) & ~(uint64_t)(CHAN_ARENA_ALIGN - 1); }

void chan_arena_init(chan_arena_t *a, uint64_t size)
{
    memset(a, 0, sizeof *a);
    a->size = size;
    if (size > CHAN_ARENA_ALIGN) {
        a->free[0].off = CHAN_ARENA_ALIGN;
        a->free[0].len = (size - CHAN_ARENA_ALIGN) & ~(uint64_t)(CHAN_ARENA_ALIGN - 1);
        a->nfree = 1;
    }
}

dsm_status_t chan_arena_alloc(chan_arena_t *a, uint64_t len, uint64_t *off)
{
    len = round_up(len ? len : 1);
    for (uint32_t i = 0; i < a->nfree; i++) {
        if (a->free[i].len < len)
            continue;
        *off = a->free[i].off;
        a->free[i].off += len;
        a->free[i].len -= len;
        if (a->free[i].len == 0) {
            memmove(&a->free[i], &a->free[i + 1], (a->nfree - i - 1) * sizeof a->free[0]);
            a->nfree--;
        }
        return DSM_OK;
    }
    return DSM_ERR_NOMEM;
}

void chan_arena_free(chan_arena_t *a, uint64_t off, uint64_t len)
{
    len = round_up(len ? len : 1);
    uint32_t i = 0;
    while (i < a->nfree && a->free[i].off < off) i++;
    int prev = i > 0 && a->free[i - 1].off + a->free[i - 1].len == off;
    int next = i < a->nfree && off + len == a->free[i].off;
    if (prev && next) {
        a->free[i - 1].len += len + a->free[i].len;
        memmove(&a->free[i], &a->free[i + 1], (a->nfree - i - 1) * sizeof a->free[0]);
        a->nfree--;
    } else if (prev) {
        a->free[i - 1].len += len;
    } else if (next) {
        a->free[i].off = off;
        a->free[i].len += len;
    } else if (a->nfree < CHAN_ARENA_MAX_FREE) {
        memmove(&a->free[i + 1], &a->free[i], (a->nfree - i) * sizeof a->free[0]);
        a->free[i].off = off;
        a->free[i].len = len;
        a->nfree++;
    }
    /* else: the list is full and the extent is lost until a neighbour
     * coalesces with it; channels are few and long-lived. */
}
