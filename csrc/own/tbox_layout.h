/* The layout of a TBox group in global memory: the members of one group
 * are allocated contiguously in one object, addressed by offsets relative
 * to the group's payload, so the group moves (or is copied into a cache) in
 * one batch, one read, with no pointer to relocate (DRust §4.1.3).
 *   0 u32 magic "DTBX"  4 u32 member count (1..OWN_TBOX_MAX)
 *   8 count x {u64 offset, u64 size}   then the members, each 8-aligned
 * Offsets are ascending, members do not overlap the table or each other,
 * and every member lies inside the payload. Pure code; what a peer's
 * memory says is untrusted input. */
#ifndef DSM_OWN_TBOX_LAYOUT_H
#define DSM_OWN_TBOX_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

#define OWN_TBOX_MAGIC 0x58425444u   /* "DTBX" */
enum { OWN_TBOX_MAX = 4096 };

/* The payload size of a group of `count` members of sizes[]; 0 if the
 * count is out of range or the sizes overflow. */
uint64_t own_tbox_size(uint32_t count, const size_t *sizes);
/* Write the table of a group laid out by own_tbox_size into payload. */
void own_tbox_layout(uint8_t *payload, uint32_t count, const size_t *sizes);
/* Check the whole table of a payload of `len` bytes and give member
 * `index`'s offset and size (DSM_ERR_INVALID for an index past the count,
 * DSM_ERR_BAD_ADDR for a malformed table). *count may be NULL. */
dsm_status_t own_tbox_member(const void *payload, uint64_t len, uint32_t index, uint32_t *count,
                             uint64_t *offset, uint64_t *size);

#endif
