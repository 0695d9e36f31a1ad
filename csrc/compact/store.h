/* The server side of a CoRM store, without a node or fabric: one reserved
 * virtual range backed by one memfd (virtual block v maps file page v until
 * compaction aliases it onto another block's page), the blocks' metadata,
 * alloc/free/read/write/release on pointers, the compaction of a size class,
 * and the serving of decoded requests. Thread-safe: each worker allocator
 * has its own lock over its blocks, so operations on different workers'
 * blocks do not serialise; a range lock guards the mapping; compaction
 * rounds are serialised by a third, and a merge takes only the locks of the
 * two blocks' owners (store.c, vblock_t, says who guards what). */
#ifndef DSM_COMPACT_STORE_H
#define DSM_COMPACT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/compact.h"
#include "dsm/status.h"

typedef struct dsm_compact_store dsm_compact_store_t;

typedef struct dsm_compact_store_hooks {
    void *ctx;
    /* virtual block v of the range now maps another page (under the range lock) */
    void (*remapped)(void *ctx, uint32_t vblock);
    /* peers mapping the memfd must apply these {u32 vblock, u32 page} pairs
     * (little-endian, in order) before the old pages are punched; seq numbers
     * the batch (1, 2, ...: see dsm_compact_store_layout); called without the
     * store lock; may block */
    void (*notify)(void *ctx, uint64_t seq, const uint8_t *pairs, uint32_t n);
    /* a trigger fired (fragmentation after a free, or an allocation failure):
     * a compaction round should run soon, not on this thread */
    void (*trigger)(void *ctx);
} dsm_compact_store_hooks_t;

/* config is complete (dsm_compact_config_init + changes); range_size > 0. */
dsm_status_t dsm_compact_store_create(const dsm_compact_config_t *config, uint32_t rank, uint16_t key_tag,
                                   const dsm_compact_store_hooks_t *hooks, dsm_compact_store_t **out);
void dsm_compact_store_destroy(dsm_compact_store_t *s);
/* The node's rank is known only once it joined: pointers carry it. */
void dsm_compact_store_set_rank(dsm_compact_store_t *s, uint32_t rank);
uint8_t *dsm_compact_store_base(const dsm_compact_store_t *s);
uint64_t dsm_compact_store_size(const dsm_compact_store_t *s);
uint32_t dsm_compact_store_block_size(const dsm_compact_store_t *s);
int dsm_compact_store_memfd(const dsm_compact_store_t *s);

dsm_status_t dsm_compact_store_alloc(dsm_compact_store_t *s, uint64_t size, dsm_compact_ptr_t *out);
dsm_status_t dsm_compact_store_free(dsm_compact_store_t *s, const dsm_compact_ptr_t *ptr);
dsm_status_t dsm_compact_store_read(dsm_compact_store_t *s, dsm_compact_ptr_t *ptr, void *buf, size_t cap, size_t *len);
dsm_status_t dsm_compact_store_write(dsm_compact_store_t *s, dsm_compact_ptr_t *ptr, const void *data, size_t len);
dsm_status_t dsm_compact_store_release(dsm_compact_store_t *s, dsm_compact_ptr_t *ptr);
/* One round over class cls (-1: every class); adds to *stats. */
dsm_status_t dsm_compact_store_compact(dsm_compact_store_t *s, int cls, dsm_compact_stats_t *stats);
/* The current layout for a peer that maps the memfd late: up to `max`
 * {u32 vblock, u32 page} pairs of the virtual blocks from `start` on that do
 * not map their own page, *next where to continue (0: none left), and *seq
 * the last remap batch the layout includes (notices with a larger seq are
 * newer). */
dsm_status_t dsm_compact_store_layout(dsm_compact_store_t *s, uint32_t start, uint8_t *pairs, uint32_t max,
                                   uint32_t *n, uint32_t *next, uint64_t *seq);
/* The worker allocator owning the block that holds *ptr's object now (-1 if
 * the pointer names none), and that block (its primary virtual block). */
int dsm_compact_store_owner(dsm_compact_store_t *s, const dsm_compact_ptr_t *ptr, uint32_t *primary);
/* Classes a trigger asked for (bit per class), cleared by the read. */
uint32_t dsm_compact_store_take_triggers(dsm_compact_store_t *s);
void dsm_compact_store_usage(dsm_compact_store_t *s, dsm_compact_usage_t *out);

/* Serve one encoded request (any client type; REMAP is not the store's) into
 * reply[cap]; returns the status to reply with. */
dsm_status_t dsm_compact_store_serve(dsm_compact_store_t *s, const void *req, size_t len, uint8_t *reply, size_t cap,
                                  size_t *reply_len);

#endif
