/* The managed heap's control messages between the CPU server and a memory
 * server (all requests to handler DSM_AM_MHEAP_CTL, answered by a reply),
 * their encoder and their pure, bounds-checked decoder.
 *
 * Every message (little-endian, no padding):
 *   0 u32 magic  4 u16 version  6 u16 type  8 u32 heap id  12 u32 body length  16 body
 * Requests:
 *   SETUP    u64 chunk gaddr, u64 ubase, u64 part bytes, u8 region shift,
 *            u8 order, u16 0, types (mheap/types.h)
 *   TRACE    u32 region, u32 epoch, u32 bp, u32 nroots, u64 roots[nroots]
 *   REMARK   u32 region, u32 epoch, u32 old_bp, u32 bp, u32 flags, u32 nroots, u64 roots[]
 *            (flags bit 0 FRESH: forget any trace of the region, mark from these roots)
 *   EVAC     u32 region, u32 epoch
 *   FIXUP    u64 lo, u64 hi, u32 npairs, u32 nslots, {u64 old, u64 new}[npairs], u64 slots[nslots]
 *   DESTROY  (empty)
 * Replies:
 *   SETUP_REP, DESTROY_REP (empty)
 *   TRACE_REP   u32 ok (0 = discarded), u32 live objects, u64 live bytes, u64 traced bytes
 *   REMARK_REP  u32 live objects, u64 live bytes
 *   EVAC_REP    u32 new bp, u32 npairs, {u64 old, u64 new, u32 size}[npairs]
 *   FIXUP_REP   u32 slots fixed
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
    DSM_MHEAP_MSG_VERSION = 1,
    DSM_MHEAP_MSG_HEADER_LEN = 16,
    DSM_MHEAP_MSG_MAX_LEN = 16 * 1024 * 1024,
    DSM_MHEAP_REMARK_FRESH = 1,
};

typedef enum dsm_mheap_msg_type {
    DSM_MHEAP_MSG_SETUP = 1,
    DSM_MHEAP_MSG_TRACE = 2,
    DSM_MHEAP_MSG_REMARK = 3,
    DSM_MHEAP_MSG_EVAC = 4,
    DSM_MHEAP_MSG_FIXUP = 5,
    DSM_MHEAP_MSG_DESTROY = 6,
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
    /* FIXUP */
    uint64_t lo, hi;
    uint32_t npairs, nslots;
    const uint8_t *pairs;   /* FIXUP: 16 bytes each; EVAC_REP: 20 bytes each */
    const uint8_t *slots;
    /* replies */
    uint32_t ok, live_objs, new_bp, fixed;
    uint64_t live_bytes, traced_bytes;
} dsm_mheap_msg_t;

enum { DSM_MHEAP_FIX_PAIR = 16, DSM_MHEAP_EVAC_PAIR = 20 };

/* Append the whole message (header and body) to w. Arrays are copied from
 * the pointers in m (roots: nroots u64, pairs, slots). */
void dsm_mheap_msg_encode(const dsm_mheap_msg_t *m, dsm_writer_t *w);

/* Decode and validate: magic, version, a known type, the body length exactly
 * what the type and its counts need, region shift 20..22, order 0/1, a part
 * of whole regions, bp and old_bp inside a region with old_bp <= bp, lo < hi.
 * `types` must point to storage for a SETUP. DSM_OK or DSM_ERR_PROTO. */
dsm_status_t dsm_mheap_msg_decode(const void *data, size_t len, dsm_mheap_msg_t *out,
                                  dsm_mheap_types_t *types);

#endif
