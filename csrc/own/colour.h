/* The ABA rule (per-slot generation): a home node's memory of the last
 * colour each of its slots carried when own freed it, so that an object
 * allocated later at the same offset starts at a colour no cached copy of
 * an earlier object there can carry. A slot whose colour would wrap is
 * quarantined: never handed back to the allocator, since only a flush of
 * every node's zero-count copies could make it safe again. Pure: no node,
 * no fabric; one mutex. */
#ifndef DSM_OWN_COLOUR_H
#define DSM_OWN_COLOUR_H

#include <stdint.h>

#include "dsm/status.h"

typedef struct own_colours own_colours_t;

dsm_status_t own_colours_create(own_colours_t **out);
void own_colours_destroy(own_colours_t *t);
/* Colour for a new object at partition offset `off` (0 for a slot own never freed). */
uint16_t own_colours_start(own_colours_t *t, uint64_t off);
/* Record that the object at `off` is freed with final colour `colour`.
 * Returns 1 if the slot may be given back to the allocator, 0 if it is
 * quarantined (its colour would wrap), or DSM_ERR_NOMEM (negative). */
int own_colours_freed(own_colours_t *t, uint64_t off, uint16_t colour);
uint64_t own_colours_quarantined(own_colours_t *t);

#endif
