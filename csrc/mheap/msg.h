/* The managed heap's control messages between the CPU server and a memory
 * server (all requests to handler DSM_AM_MHEAP_CTL, answered by a reply),
 * their encoder and their pure, bounds-checked decoder.
 *
 * Every message (little-endian, no padding) is framed as every module's
 * (util/bytes.h), its body starting with the heap id:
 *   0 u32 magic  4 u16 version  6 u16 type  8 u32 body length  12 u32 heap id  16 the rest
 * Requests:
 *   SETUP    u64 chunk gaddr, u64 ubase, u64 part bytes, u8 region shift,
 *            u8 order, u16 0, types (mheap/types.h)
 *   TRACE    u32 region, u32 epoch, u32 bp, u32 nroots, u64 roots[nroots]
 *   REMARK   u32 region, u32 epoch, u32 old_bp, u32 bp, u32 flags, u32 nroots, u64 roots[]
 *            (flags bit 0 FRESH: forget any trace of the region, mark from these roots)
 *   EVAC     u32 region, u32 epoch, u32 nmore, u32 more[nmore]
 *            (the region is the destination; the survivors of the `more`
 *            regions, all traced in that epoch, are packed after its own)
 *   FIXUP    u64 lo, u64 hi, u32 npairs, u32 nslots, {u64 old, u64 new}[npairs], u64 slots[nslots]
 *   DESTROY  (empty)
 *   SLOTS    u32 nslots, u64 slots[nslots]: read these words (remset cleanup)
 *   PAGES    u32 region, u32 npages, {u32 page, u8 data[4096]}[npages]: a
 *            pause's write-back of the region's dirty pages (the page's
 *            index in the region; page 0 without the region header)
 *   BATCH    u32 n, {u32 len, a request of len bytes (not a BATCH)}[n]: served
 *            in order, one round trip for many regions
 * Replies:
 *   SETUP_REP, DESTROY_REP (empty)
 *   TRACE_REP   u32 ok (0 = discarded), u32 live objects, u64 live bytes, u64 traced bytes
 *   REMARK_REP  u32 live objects, u64 live bytes
 *   EVAC_REP    u32 new bp, u32 npairs, {u64 old, u64 new, u32 size}[npairs]
 *   FIXUP_REP   u32 slots fixed
 *   SLOTS_REP   u32 n, u64 values[n] (0 for a slot outside the server's part)
 *   PAGES_REP   (empty)
 *   BATCH_REP   u32 n, {u32 status, u32 len, a reply of len bytes (0 on error)}[n]
 * Errors travel as the fabric reply's status with no payload. */
#ifndef DSM_MHEAP_MSG_H
#define DSM_MHEAP_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"
#include "mheap/types.h"
#include "util/bytes.h"

enum {
    DSM_MHEAP_MSG_MAGIC = 0x50484d44u, /* "DMHP" */
    /* 3: PAGES and PAGES_REP; a node of another version refuses every message */
    DSM_MHEAP_MSG_VERSION = 3,
    DSM_MHEAP_MSG_HEADER_LEN = DSM_MSG_HEADER_LEN + 4, /* the framing, then the heap id */
    DSM_MHEAP_MSG_MAX_LEN = 16 * 1024 * 1024,
    DSM_MHEAP_REMARK_FRESH = 1,
    DSM_MHEAP_EVAC_MAX_MORE = 63,   /* regions evacuated into one besides itself */
    DSM_MHEAP_BATCH_MAX = 4096,     /* requests in one BATCH */
};

typedef enum dsm_mheap_msg_type {
    DSM_MHEAP_MSG_SETUP = 1,
    DSM_MHEAP_MSG_TRACE = 2,
    DSM_MHEAP_MSG_REMARK = 3,
    DSM_MHEAP_MSG_EVAC = 4,
    DSM_MHEAP_MSG_FIXUP = 5,
    DSM_MHEAP_MSG_DESTROY = 6,
    DSM_MHEAP_MSG_BATCH = 7,
    DSM_MHEAP_MSG_SLOTS = 8,
    DSM_MHEAP_MSG_PAGES = 9,
    DSM_MHEAP_MSG_SETUP_REP = 17,
    DSM_MHEAP_MSG_TRACE_REP = 18,
    DSM_MHEAP_MSG_REMARK_REP = 19,
    DSM_MHEAP_MSG_EVAC_REP = 20,
    DSM_MHEAP_MSG_FIXUP_REP = 21,
    DSM_MHEAP_MSG_DESTROY_REP = 22,
    /* A TRACE sent without waiting (fire and forget) is answered by this
     * one-way message to the CPU server's DSM_AM_MHEAP_DONE handler: the
     * region and epoch it traced, then TRACE_REP's body. */
    DSM_MHEAP_MSG_TRACE_DONE = 23,
    DSM_MHEAP_MSG_BATCH_REP = 24,
    DSM_MHEAP_MSG_SLOTS_REP = 25,
    DSM_MHEAP_MSG_PAGES_REP = 26,
} dsm_mheap_msg_type_t;

/* A decoded message. Arrays point into the decoded buffer (read them with
 * dsm_get_u64); `types` is filled only for SETUP, by the caller's buffer. */
typedef struct dsm_mheap_msg {
    uint16_t type;
    uint32_t heap_id;
    /* SETUP */
    uint64_t chunk, ubase, part_bytes;
    uint8_t region_shift, order;
    dsm_mheap_types_t *types;
    /* TRACE, REMARK, EVAC */
    uint32_t region, epoch, bp, old_bp, flags;
    uint32_t nroots;
    const uint8_t *roots;
    /* EVAC: the other regions evacuated into `region` (u32 each) */
    uint32_t nmore;
    const uint8_t *more;
    /* BATCH, BATCH_REP: n items, each checked to lie inside the message
     * (read them with dsm_mheap_batch_item) */
    uint32_t nitems;
    const uint8_t *items;
    size_t items_len;
    /* FIXUP (slots), SLOTS (slots), SLOTS_REP (values in slots) */
    uint64_t lo, hi;
    uint32_t npairs, nslots;
    const uint8_t *pairs;   /* FIXUP: 16 bytes each; EVAC_REP: 20 bytes each */
    const uint8_t *slots;
    /* PAGES (with region): DSM_MHEAP_PAGE_ITEM bytes each */
    uint32_t npages;
    const uint8_t *pages;
    /* replies */
    uint32_t ok, live_objs, new_bp, fixed;
    uint64_t live_bytes, traced_bytes;
} dsm_mheap_msg_t;

enum { DSM_MHEAP_FIX_PAIR = 16, DSM_MHEAP_EVAC_PAIR = 20, DSM_MHEAP_PAGE_ITEM = 4 + DSM_MHEAP_PAGE };

/* Append the whole message (header and body) to w. Arrays are copied from
 * the pointers in m (roots: nroots u64, pairs, slots). */
void dsm_mheap_msg_encode(const dsm_mheap_msg_t *m, dsm_writer_t *w);

/* Decode and validate: magic, version, a known type, the body length exactly
 * what the type and its counts need, region shift 20..22, order 0/1, a part
 * of whole regions, bp and old_bp inside a region with old_bp <= bp, lo < hi,
 * PAGES' page indices inside the largest region.
 * `types` must point to storage for a SETUP. DSM_OK or DSM_ERR_PROTO. */
dsm_status_t dsm_mheap_msg_decode(const void *data, size_t len, dsm_mheap_msg_t *out,
                                  dsm_mheap_types_t *types);

/* The type of a whole frame (magic, version and body length right)
 * without decoding its body: what a handler needs to route a message it
 * hands on undecoded. DSM_OK or DSM_ERR_PROTO. */
dsm_status_t dsm_mheap_msg_peek_type(const void *data, size_t len, uint16_t *type);

/* Item i of a decoded BATCH or BATCH_REP, walking from *pos (0 for the
 * first; items are read in order): its bytes and, for a BATCH_REP, its
 * status. DSM_ERR_PROTO past the end. */
dsm_status_t dsm_mheap_batch_item(const dsm_mheap_msg_t *m, size_t *pos, const uint8_t **data, size_t *len,
                                  dsm_status_t *status);

/* Builds a BATCH (or a BATCH_REP): begin, then add the items, then end. */
typedef struct dsm_mheap_batch {
    dsm_writer_t w;
    uint32_t n;
    int rep;
} dsm_mheap_batch_t;
void dsm_mheap_batch_begin(dsm_mheap_batch_t *b, uint16_t type, uint32_t heap_id);
/* Encode m as the next item (a request; for a BATCH_REP, a reply with its
 * status: no bytes unless DSM_OK). */
void dsm_mheap_batch_add(dsm_mheap_batch_t *b, const dsm_mheap_msg_t *m, dsm_status_t status);
/* Patch the counts; the message is b->w (free it with dsm_writer_free). */
void dsm_mheap_batch_end(dsm_mheap_batch_t *b);

#endif
