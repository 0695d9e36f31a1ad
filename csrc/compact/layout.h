/* The store's layout as pure functions, testable without a cluster: size
 * classes, the object slot format (header, a version byte in every cache
 * line, checksum), the 128-bit pointer, the per-block ID table, the merge
 * plan of two blocks and the merge probability.
 *
 * A slot is a whole number of 64-byte cache lines (so every line can carry
 * the version byte). Little-endian:
 *   0 u8 line version (low byte of the version; byte 0 of every later line too)
 *   1 u8 lock bits (1 write lock, 2 compaction)
 *   2 u16 object ID (0: free slot; zero-filled memory never validates)
 *   4 u32 version   8 u32 origin virtual block   12 u32 payload length
 *  16 u64 checksum over {ID, version, origin, length, payload}
 *  24 payload (40 bytes in the first line, 63 in each later line, after its
 *     version byte).
 * The checksum is the decision for torn reads: a software copy (tcp's
 * emulated get, a memcpy from a mapping) does not read a cache line
 * atomically, so per-line versions alone do not prove a consistent copy. */
#ifndef DSM_COMPACT_LAYOUT_H
#define DSM_COMPACT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/compact.h"
#include "dsm/status.h"

enum {
    DSM_COMPACT_LINE = 64,
    DSM_COMPACT_HDR = 24,
    DSM_COMPACT_LOCK_WRITE = 1,
    DSM_COMPACT_LOCK_COMPACT = 2,
    DSM_COMPACT_NCLASSES = DSM_COMPACT_CLASSES,
    DSM_COMPACT_MIN_BLOCK = 4096,
    DSM_COMPACT_MAX_BLOCK = 1 << 20,
    DSM_COMPACT_MAX_SLOT_COPY = 4096,  /* the largest class's slot */
};

/* Slot bytes of a class (64 .. 4096), 0 for an unknown class. */
uint32_t dsm_compact_class_slot(uint32_t cls);
/* Payload bytes a slot of `slot` bytes carries. */
uint32_t dsm_compact_slot_capacity(uint32_t slot);
/* Smallest class whose capacity holds `size`; -1 if none. */
int dsm_compact_class_for(size_t size);

/* 64-bit checksum of an object (never 0 for a real object, by construction). */
uint64_t dsm_compact_checksum(uint16_t id, uint32_t version, uint32_t origin, const void *data, uint32_t len);

/* Write a whole object into `slot` (lock byte left as given by `lock`). */
void dsm_compact_obj_pack(uint8_t *slot, uint32_t slot_size, uint8_t lock, uint16_t id, uint32_t version,
                       uint32_t origin, const void *data, uint32_t len);

typedef enum dsm_compact_check {
    DSM_COMPACT_VALID = 0,
    DSM_COMPACT_OTHER = 1,   /* another object, or none (ID differs, ID 0, origin differs) */
    DSM_COMPACT_LOCKED = 2,  /* write or compaction bit set */
    DSM_COMPACT_TORN = 3,    /* line versions or checksum disagree, or a bad length */
    DSM_COMPACT_SMALL = 4,   /* valid, but longer than the caller's buffer */
} dsm_compact_check_t;

typedef struct dsm_compact_hdr {
    uint8_t lock;
    uint16_t id;
    uint32_t version, origin, length;
} dsm_compact_hdr_t;

void dsm_compact_hdr_read(const uint8_t *slot, dsm_compact_hdr_t *out);

/* Validate a slot (a copy, or in place in memory others write) against the ID (and origin block, unless
 * UINT32_MAX) the pointer names, gathering the payload into out[0..cap)
 * and its length into *len. */
dsm_compact_check_t dsm_compact_obj_check(const uint8_t *slot, uint32_t slot_size, uint16_t want_id,
                                    uint32_t want_origin, void *out, size_t cap, size_t *len,
                                    dsm_compact_hdr_t *hdr);

/* Pointer codec. */
dsm_compact_ptr_t dsm_compact_ptr_make(const dsm_compact_ptr_fields_t *f);

/* Per-block ID -> slot table: open addressing with linear probing and
 * backward-shift deletion over `cap` (a power of two >= 2 * slots) entries,
 * each slot + 1 (0 empty); the keys are slot_id[]. */
typedef struct dsm_compact_idtab {
    uint16_t *ent;
    uint32_t cap;
    const uint16_t *slot_id;   /* the block's slot -> ID array */
} dsm_compact_idtab_t;
uint32_t dsm_compact_idtab_cap(uint32_t slots);
int dsm_compact_idtab_find(const dsm_compact_idtab_t *t, uint16_t id);   /* slot or -1 */
void dsm_compact_idtab_insert(dsm_compact_idtab_t *t, uint16_t id, uint32_t slot);
void dsm_compact_idtab_remove(dsm_compact_idtab_t *t, uint16_t id);

/* Merge plan: may the objects of `src` (slot -> ID, 0 free) join those of
 * `dst`? They may if they fit and no ID occurs in both. Each src object
 * keeps its slot when that slot is free in dst, else moves to a free dst
 * slot no kept object takes. On DSM_OK, to_slot[i] is the dst slot of src
 * slot i (meaningful for occupied i), *moved how many changed slot.
 * DSM_ERR_NOMEM if they do not fit, DSM_ERR_EXISTS on a shared ID. */
dsm_status_t dsm_compact_plan_merge(const uint16_t *src, const uint16_t *dst, uint32_t slots, uint16_t *to_slot,
                                 uint32_t *moved);

/* Probability that two blocks of s slots holding b1 and b2 objects with IDs
 * drawn without replacement from n merge: C(n-b1, b2) / C(n, b2) when
 * b1 + b2 <= s, else 0. n = slots for offset-only merging (Mesh, CoRM-0). */
double dsm_compact_merge_probability(uint32_t n, uint32_t s, uint32_t b1, uint32_t b2);

/* IDs a block of `slots` slots draws from with `bits`-bit IDs: the slot
 * index + 1 (offset-only) when bits is 0 or the class has more slots than
 * nonzero IDs (the hybrid), else 2^bits - 1. */
uint32_t dsm_compact_id_space(uint32_t bits, uint32_t slots);

#endif
