/* CoRM: compactable remote memory. A store of small objects per node whose
 * blocks can be merged (compacted) while peers keep reading them one-sidedly.
 * Objects are named by a 128-bit pointer {offset in the store, rank, size
 * class, object ID, version, store key tag}; the offset is only a hint, the
 * ID names the object inside its block. Reads are consistent during
 * compaction: every one-sided read is validated (ID, lock bits, per-cache-line
 * versions, origin block and a payload checksum) and never returns a torn,
 * moved or freed object.
 *
 * Part of the user API (dsm/dsm.h). */
#ifndef DSM_COMPACT_H
#define DSM_COMPACT_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/node.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsm_compact dsm_compact_t;

/* The client pointer, 128 bits. w[0]: bits 0..39 byte offset of the object
 * in its store's range, 40..55 rank, 56..63 size class. w[1]: bits 0..31
 * version, 32..47 object ID, 48..63 the store's key tag (a forged or stale
 * one is refused). */
typedef struct dsm_compact_ptr {
    uint64_t w[2];
} dsm_compact_ptr_t;

typedef struct dsm_compact_ptr_fields {
    uint64_t offset;
    uint32_t rank, size_class, version;
    uint16_t id, key_tag;
} dsm_compact_ptr_fields_t;
DSM_API void dsm_compact_ptr_decode(const dsm_compact_ptr_t *ptr, dsm_compact_ptr_fields_t *out);

enum { DSM_COMPACT_MAX_WORKERS = 16 };

typedef struct dsm_compact_config {
    uint64_t range_size;      /* memory this node serves (0: client only); default 16 MiB. The
                                 virtual range reserved is twice this: blocks compaction
                                 aliased keep their addresses while their pages serve again */
    uint32_t block_size;      /* a multiple of 4096 up to 1 MiB; default 4096 */
    uint32_t id_bits;         /* object ID width: 0 (offset-only, Mesh), 8, 12 or 16 (default) */
    uint32_t map_budget;      /* mappings aliasing may add (2 per aliased block);
                                 0 = a quarter of vm.max_map_count */
    uint32_t max_merges;      /* block merges per compaction round (default 256) */
    double frag_threshold;    /* a class whose free-slot ratio exceeds this is compacted in the
                                 background after a free; 0 disables (default 0) */
    uint32_t workers;         /* worker allocators: each of the first `workers` threads that
                                 allocate owns its blocks per size class (later threads share
                                 them); compaction merges across them. 1..DSM_COMPACT_MAX_WORKERS,
                                 0 = 1 (default 4) */
} dsm_compact_config_t;
DSM_API void dsm_compact_config_init(dsm_compact_config_t *config);

/* The node's store, or NULL if none is attached. */
DSM_API dsm_compact_t *dsm_compact_of(dsm_node_t *node);

/* The number of size classes. */
DSM_API uint32_t dsm_compact_class_count(void);

/* RPCs to the store of `rank` (or local calls on this node's own store).
 * Bad pointers (wrong ID, freed object, never-allocated block) give
 * DSM_ERR_BAD_ADDR, a forged key tag DSM_ERR_INVALID, a size over the
 * largest class DSM_ERR_TOO_BIG, an exhausted store DSM_ERR_NOMEM. The
 * calls that correct a pointer rewrite *ptr. */
DSM_API dsm_status_t dsm_compact_alloc(dsm_compact_t *c, uint32_t rank, size_t size, dsm_compact_ptr_t *out);
DSM_API dsm_status_t dsm_compact_free(dsm_compact_t *c, dsm_compact_ptr_t *ptr);
DSM_API dsm_status_t dsm_compact_read(dsm_compact_t *c, dsm_compact_ptr_t *ptr, void *buf, size_t cap, size_t *len);
/* Write the whole object (len <= the class's capacity: DSM_ERR_TOO_BIG). */
DSM_API dsm_status_t dsm_compact_write(dsm_compact_t *c, dsm_compact_ptr_t *ptr, const void *data, size_t len);
/* Declare *ptr's old block dead for this object: the pointer is rewritten to
 * the object's current block, and an old virtual block no live object came
 * from is unmapped and reused. */
DSM_API dsm_status_t dsm_compact_release_ptr(dsm_compact_t *c, dsm_compact_ptr_t *ptr);

/* One-sided reads. direct_read reads the object's slot at the pointer's
 * offset and validates it, retrying with backoff while it is locked or torn:
 * DSM_OK, DSM_ERR_BAD_ADDR if another object or none is there (moved or
 * freed; the pointer is not corrected) or the object is under the
 * compaction bit (being moved: the server knows where it goes), DSM_ERR_TIMEOUT if it stayed locked
 * or torn through every retry. scan_read reads the whole block, finds the ID
 * and corrects the pointer. get tries direct_read, then scan_read, then the
 * RPC read: it fails only if the object does not exist. */
DSM_API dsm_status_t dsm_compact_direct_read(dsm_compact_t *c, const dsm_compact_ptr_t *ptr, void *buf, size_t cap,
                                          size_t *len);
DSM_API dsm_status_t dsm_compact_scan_read(dsm_compact_t *c, dsm_compact_ptr_t *ptr, void *buf, size_t cap, size_t *len);
DSM_API dsm_status_t dsm_compact_get(dsm_compact_t *c, dsm_compact_ptr_t *ptr, void *buf, size_t cap, size_t *len);

/* Which read dsm_compact_read_many makes of each object. */
typedef enum {
    DSM_COMPACT_READ_RPC = 1, /* dsm_compact_read */
    DSM_COMPACT_READ_DIRECT,  /* dsm_compact_direct_read */
    DSM_COMPACT_READ_SCAN,    /* dsm_compact_scan_read */
    DSM_COMPACT_READ_GET,     /* dsm_compact_get */
} dsm_compact_read_kind_t;
/* Reads ptrs[0..n) one after another as `how` says: object i into
 * buf + i * stride (at most stride bytes), its length into lens[i]; the
 * pointers are corrected as that read corrects them. Stops at the first
 * failure and returns its status; *done is how many were read. *elapsed_ns
 * (may be NULL) is the time of the reads alone, measured here: a caller in
 * a slower language (Python) measures CoRM's reads, not its own calls.
 * DSM_ERR_INVALID for an unknown `how`. */
DSM_API dsm_status_t dsm_compact_read_many(dsm_compact_t *c, dsm_compact_read_kind_t how, dsm_compact_ptr_t *ptrs, size_t n,
                                        void *buf, size_t stride, size_t *lens, size_t *done, uint64_t *elapsed_ns);

typedef struct dsm_compact_stats {
    uint64_t merges;          /* block pairs merged */
    uint64_t moved;           /* objects that changed offset */
    uint64_t kept;            /* objects that kept their offset */
    uint64_t refused_budget;  /* stops at the mapping limit: a merge past the budget, or remaps the kernel refused */
} dsm_compact_stats_t;
/* Compact size class `size_class` (or every class with -1) of `rank`'s store
 * now, on that store's thread (background priority), and wait for it; stats
 * may be NULL. DSM_ERR_NOMEM if the mapping budget stopped it (what was
 * merged before stays merged). */
DSM_API dsm_status_t dsm_compact_now(dsm_compact_t *c, uint32_t rank, int size_class,
                                      dsm_compact_stats_t *stats);

enum { DSM_COMPACT_CLASSES = 11 };
typedef struct dsm_compact_usage {
    uint64_t active_bytes;    /* bytes of blocks holding objects (physical pages in use) */
    uint64_t object_bytes;    /* bytes of the live objects' slots */
    uint64_t blocks;          /* primary blocks */
    uint64_t alias_blocks;    /* old virtual blocks still mapped onto another block */
    uint64_t objects;
    uint64_t map_budget, map_used;   /* mappings aliasing may add / adds now */
    uint64_t block_size;
    uint64_t class_blocks[DSM_COMPACT_CLASSES];    /* primary blocks per size class */
    uint64_t class_objects[DSM_COMPACT_CLASSES];   /* live objects per size class */
} dsm_compact_usage_t;
/* Figures of `rank`'s store (an RPC unless it is this node's). A class's
 * fragmentation is 1 - objects / (blocks * (block_size / slot bytes)). */
DSM_API dsm_status_t dsm_compact_usage(dsm_compact_t *c, uint32_t rank, dsm_compact_usage_t *out);
/* Slot bytes of a size class (0 for an unknown class). */
DSM_API uint32_t dsm_compact_class_slot_bytes(uint32_t size_class);

#ifdef __cplusplus
}
#endif
#endif
