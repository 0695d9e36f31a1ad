/* The heap's allocator core: a size-class allocator over one (base, size)
 * memory range (a node's partition), with no knowledge of nodes or fabric so
 * it can be unit-tested and fuzzed on plain memory.
 *
 * Partition layout (offsets from base; every node of a cluster uses the same
 * constants, so a peer can find a block's state one-sidedly):
 *   0                      dsm_heap_layout_t (magic, version, geometry)
 *   DSM_HEAP_STATE_OFF     one u64 state word per block (host byte order,
 *                          i.e. little-endian on every supported target)
 *   dsm_heap_gen_table_off one u16 generation per 16-byte granule of the
 *                          blocks: every granule of a live allocation holds
 *                          its generation (1..DSM_HEAP_GEN_MAX), a freed one
 *                          that | DSM_HEAP_GEN_FREED, a never-used one 0. An
 *                          address's tag bits carry the generation, so a peer
 *                          refuses a freed or reused address one-sidedly.
 *   ... up to the first block boundary after the tables: reserved
 *   blocks of DSM_HEAP_BLOCK_SIZE bytes, each FREE, SMALL (objects of one
 *   size class), LARGE (head of a run of whole blocks) or CONT (rest of a run).
 * The reserved header blocks carry the RESERVED state, so offset 0 (the null
 * address) and the metadata are never handed out nor accessible by address. */
#ifndef DSM_HEAP_ALLOC_H
#define DSM_HEAP_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

enum {
    DSM_HEAP_BLOCK_SHIFT = 16,
    DSM_HEAP_BLOCK_SIZE = 1 << DSM_HEAP_BLOCK_SHIFT,   /* 64 KiB */
    DSM_HEAP_STATE_OFF = 4096,                          /* state table offset */
    DSM_HEAP_MIN_CLASS = 16,
    DSM_HEAP_MAX_CLASS = 32 * 1024,                     /* larger: whole blocks */
    DSM_HEAP_NCLASSES = 40,
    DSM_HEAP_MAX_OBJS = DSM_HEAP_BLOCK_SIZE / DSM_HEAP_MIN_CLASS, /* 4096 */
};
#define DSM_HEAP_LAYOUT_MAGIC 0x5041454850534d44ull /* "DMSPHEAP" */
#define DSM_HEAP_LAYOUT_VERSION 2u
/* Generations: 15 bits, the 16th marks a freed granule. */
#define DSM_HEAP_GEN_MAX 0x7fffu
#define DSM_HEAP_GEN_FREED 0x8000u
#define DSM_HEAP_GRANULE_SHIFT 4
/* Offsets are 40 bits in a global address, so a partition is at most 1 TiB. */
#define DSM_HEAP_MAX_PARTITION (1ull << 40)
/* Smallest partition that holds the header block and one data block. */
#define DSM_HEAP_MIN_PARTITION (2ull * DSM_HEAP_BLOCK_SIZE)

/* Block state words (low 8 bits kind, the rest an argument). 0 = free, so a
 * zero-filled memfd is a partition with every block free. */
enum {
    DSM_HEAP_BLK_FREE = 0,
    DSM_HEAP_BLK_RESERVED = 1,
    DSM_HEAP_BLK_SMALL = 2,  /* arg: size-class index */
    DSM_HEAP_BLK_LARGE = 3,  /* arg: run length in blocks */
    DSM_HEAP_BLK_CONT = 4,   /* arg: distance back to the run's head */
};
static inline unsigned dsm_heap_blk_kind(uint64_t w) { return (unsigned)(w & 0xffu); }
static inline uint64_t dsm_heap_blk_arg(uint64_t w) { return w >> 8; }
static inline uint64_t dsm_heap_blk_word(unsigned kind, uint64_t arg) { return (arg << 8) | kind; }
/* Whether a block may be read/written by address (it is part of an allocation). */
static inline int dsm_heap_blk_live(uint64_t w)
{
    unsigned k = dsm_heap_blk_kind(w);
    return k == DSM_HEAP_BLK_SMALL || k == DSM_HEAP_BLK_LARGE || k == DSM_HEAP_BLK_CONT;
}
/* Number of blocks of a partition of `size` bytes (the tail is unused). */
static inline uint64_t dsm_heap_nblocks(uint64_t size) { return size >> DSM_HEAP_BLOCK_SHIFT; }
/* Where block b's state word lives in the partition. */
static inline uint64_t dsm_heap_state_off(uint64_t block) { return DSM_HEAP_STATE_OFF + 8 * block; }
/* Where the generation table starts, and where granule `off`'s entry is. */
static inline uint64_t dsm_heap_gen_table_off(uint64_t nblocks) { return (dsm_heap_state_off(nblocks) + 63) & ~63ull; }
static inline uint64_t dsm_heap_gen_off(uint64_t nblocks, uint64_t off)
{
    return dsm_heap_gen_table_off(nblocks) + 2 * (off >> DSM_HEAP_GRANULE_SHIFT);
}
/* First data block: the one after the layout record and the two tables. */
static inline uint64_t dsm_heap_first_block(uint64_t nblocks)
{
    uint64_t end = dsm_heap_gen_off(nblocks, nblocks << DSM_HEAP_BLOCK_SHIFT);
    return (end + DSM_HEAP_BLOCK_SIZE - 1) >> DSM_HEAP_BLOCK_SHIFT;
}

typedef struct dsm_heap_layout {
    uint64_t magic;
    uint32_t version;
    uint32_t block_shift;
    uint64_t size;
    uint64_t nblocks;
    uint64_t first_block;   /* first data block (after the header) */
} dsm_heap_layout_t;

/* Size classes: 16..128 in steps of 16, then four steps per power of two up
 * to 32 KiB. Index of the smallest class holding `size` (1..MAX_CLASS). */
unsigned dsm_heap_class_of(size_t size);
size_t dsm_heap_class_size(unsigned cls);

typedef struct dsm_heap_alloc dsm_heap_alloc_t;

/* Format [base, base+size) as an empty partition and build the allocator's
 * process-local state. DSM_ERR_INVALID if size is outside
 * [DSM_HEAP_MIN_PARTITION, DSM_HEAP_MAX_PARTITION] or base is not 8-aligned,
 * DSM_ERR_NOMEM if local metadata cannot be allocated. */
dsm_status_t dsm_heap_alloc_create(void *base, uint64_t size, dsm_heap_alloc_t **out);
/* Frees the process-local state (not the range). No thread may be inside
 * the allocator; threads' caches that still name it are dropped lazily. */
void dsm_heap_alloc_destroy(dsm_heap_alloc_t *a);

/* Allocate; *off is the object's offset in the range (never 0), *gen its
 * generation (may be NULL), which every granule of the object now holds. */
dsm_status_t dsm_heap_alloc(dsm_heap_alloc_t *a, size_t size, uint64_t *off, uint16_t *gen);
/* DSM_ERR_BAD_ADDR (logged) unless off is the start of a live allocation
 * whose generation is `tag` (0: any; an internal address without a tag). */
dsm_status_t dsm_heap_free(dsm_heap_alloc_t *a, uint64_t off, uint16_t tag);
dsm_status_t dsm_heap_usable(dsm_heap_alloc_t *a, uint64_t off, size_t *size);
/* The generation entry of the granule holding off (off inside the blocks). */
uint16_t dsm_heap_gen_at(const dsm_heap_alloc_t *a, uint64_t off);
/* The live allocation holding off: its start and usable size; else
 * DSM_ERR_BAD_ADDR. The exact check of DSM_CHECKED mode. */
dsm_status_t dsm_heap_object_of(dsm_heap_alloc_t *a, uint64_t off, uint64_t *start, size_t *size);
/* len 0: off starts a live allocation (its usable size in *size); len > 0:
 * [off, off+len) lies inside one live allocation (its size in *size). With
 * a tag, the allocation's generation must be that tag. Else DSM_ERR_BAD_ADDR. */
dsm_status_t dsm_heap_access_check(dsm_heap_alloc_t *a, uint64_t off, uint64_t len, uint16_t tag, size_t *size);
/* DSM_OK if [off, off+len) lies in blocks that are part of allocations (the
 * check a one-sided access makes), else DSM_ERR_BAD_ADDR. len 0 checks off. */
dsm_status_t dsm_heap_check_range(dsm_heap_alloc_t *a, uint64_t off, uint64_t len);
void dsm_heap_alloc_usage(dsm_heap_alloc_t *a, uint64_t *allocated, uint64_t *capacity);
void *dsm_heap_alloc_base(const dsm_heap_alloc_t *a);
uint64_t dsm_heap_alloc_size(const dsm_heap_alloc_t *a);

/* Give back the calling thread's current blocks of this allocator (a thread
 * that stops allocating; also done automatically at thread exit). */
void dsm_heap_thread_flush(dsm_heap_alloc_t *a);

#endif
