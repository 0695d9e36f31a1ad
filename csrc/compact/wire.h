/* The store's active-message wire format: requests from clients (alloc,
 * free, read, write, release, compact) and the server's remap notice to
 * peers that mirror its blocks, their replies, the encoder and the
 * bounds-checked pure decoder (fuzzed by csrc/fuzz/fuzz_compact_msg.c).
 *
 * Every message (little-endian, no padding):
 *   0 u32 magic  4 u16 version  6 u16 type  8 u32 body length  12 body
 * Bodies (P = the 16-byte pointer, w[0] then w[1]):
 *   ALLOC_REQ   u64 size              ALLOC_REP   P
 *   FREE_REQ    P                     FREE_REP    (empty)
 *   READ_REQ    P                     READ_REP    P, u32 len, len bytes
 *   WRITE_REQ   P, u32 len, len bytes WRITE_REP   P
 *   RELEASE_REQ P                     RELEASE_REP P
 *   COMPACT_REQ i32 class (-1 all)    COMPACT_REP u64 merges, moved, kept, refused, i32 status
 *     (the round's status travels in the body: a round stopped at the
 *     mapping budget still reports what it merged)
 *   REMAP_REQ   u64 seq, u32 n, n x {u32 virtual block, u32 block it now maps}
 *   REMAP_REP   (empty)
 *     (seq numbers the server's remap batches: a peer applies a notice
 *     only if it is newer than the layout its view shows)
 *   LAYOUT_REQ  u32 start             LAYOUT_REP  u64 seq, u32 next, u32 n, n x {u32 vblock, u32 block}
 *     (the blocks from `start` on that do not map their own page, at layout
 *     seq; next = where the next page starts, 0 after the last page: a
 *     peer that attaches late maps the current layout, not the original)
 *   REKEY_REQ   u64 seq, u32 len, len bytes (1..DSM_COMPACT_MSG_MAX_KEY)   REKEY_REP (empty)
 *     (verbs: the store's range was registered anew after remap batch seq;
 *     the bytes are its new packed region key)
 *   USAGE_REQ   (empty)               USAGE_REP   u64 x (8 + 2 x 11): dsm_compact_usage_t in order
 * Errors travel as the fabric reply's status with no payload. */
#ifndef DSM_COMPACT_WIRE_H
#define DSM_COMPACT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/compact.h"
#include "dsm/status.h"
#include "util/bytes.h"

enum {
    DSM_COMPACT_MSG_MAGIC = 0x4d52434fu,  /* "OCRM" */
    DSM_COMPACT_MSG_VERSION = 2,
    DSM_COMPACT_MSG_HEADER_LEN = DSM_MSG_HEADER_LEN,
    DSM_COMPACT_MSG_MAX_DATA = 4096,      /* the largest class's capacity is below this */
    DSM_COMPACT_MSG_MAX_REMAP = 8192,     /* entries per remap notice */
    DSM_COMPACT_MSG_MAX_LAYOUT = 500,
    DSM_COMPACT_MSG_MAX_KEY = 1024,       /* a packed region key */     /* entries per layout page (fits a read reply's buffer) */
    DSM_COMPACT_MSG_MAX_LEN = DSM_COMPACT_MSG_HEADER_LEN + 12 + 8 * DSM_COMPACT_MSG_MAX_REMAP,
};

typedef enum dsm_compact_msg_type {
    DSM_COMPACT_MSG_ALLOC_REQ = 1, DSM_COMPACT_MSG_ALLOC_REP = 2,
    DSM_COMPACT_MSG_FREE_REQ = 3, DSM_COMPACT_MSG_FREE_REP = 4,
    DSM_COMPACT_MSG_READ_REQ = 5, DSM_COMPACT_MSG_READ_REP = 6,
    DSM_COMPACT_MSG_WRITE_REQ = 7, DSM_COMPACT_MSG_WRITE_REP = 8,
    DSM_COMPACT_MSG_RELEASE_REQ = 9, DSM_COMPACT_MSG_RELEASE_REP = 10,
    DSM_COMPACT_MSG_COMPACT_REQ = 11, DSM_COMPACT_MSG_COMPACT_REP = 12,
    DSM_COMPACT_MSG_REMAP_REQ = 13, DSM_COMPACT_MSG_REMAP_REP = 14,
    DSM_COMPACT_MSG_USAGE_REQ = 15, DSM_COMPACT_MSG_USAGE_REP = 16,
    DSM_COMPACT_MSG_LAYOUT_REQ = 17, DSM_COMPACT_MSG_LAYOUT_REP = 18,
    DSM_COMPACT_MSG_REKEY_REQ = 19, DSM_COMPACT_MSG_REKEY_REP = 20,
    DSM_COMPACT_MSG_TYPES = 21,
} dsm_compact_msg_type_t;

typedef struct dsm_compact_msg {
    uint16_t type;
    uint64_t size;                 /* ALLOC_REQ */
    dsm_compact_ptr_t ptr;            /* the types that carry P */
    const uint8_t *data;           /* READ_REP, WRITE_REQ, REKEY_REQ: points into the decoded buffer */
    uint32_t len;
    int32_t cls;                   /* COMPACT_REQ */
    dsm_compact_stats_t stats;/* COMPACT_REP */
    int32_t status;                /* COMPACT_REP: the round's status (0 or negative) */
    const uint8_t *remap;          /* REMAP_REQ, LAYOUT_REP: n pairs, points into the decoded buffer */
    uint32_t nremap;
    uint64_t seq;                  /* REMAP_REQ, LAYOUT_REP, REKEY_REQ */
    uint32_t start, next;          /* LAYOUT_REQ, LAYOUT_REP */
    dsm_compact_usage_t usage;        /* USAGE_REP */
} dsm_compact_msg_t;

/* Bytes m encodes to (0 for an unknown type or out-of-range counts). */
size_t dsm_compact_msg_size(const dsm_compact_msg_t *m);
/* Encode into buf (dsm_compact_msg_size(m) bytes); returns the length or 0. */
size_t dsm_compact_msg_encode(const dsm_compact_msg_t *m, uint8_t *buf);
/* Decode and validate: magic, version, known type, body length exactly what
 * the type and its counts need, data lengths <= DSM_COMPACT_MSG_MAX_DATA, remap
 * counts 1..DSM_COMPACT_MSG_MAX_REMAP, layout counts 0..DSM_COMPACT_MSG_MAX_LAYOUT, class -1..255, size <= 2^32, a
 * compaction status 0 or negative.
 * DSM_OK or DSM_ERR_PROTO. */
dsm_status_t dsm_compact_msg_decode(const void *data, size_t len, dsm_compact_msg_t *out);
/* Entry i of a decoded remap notice or layout page. */
void dsm_compact_msg_remap_at(const dsm_compact_msg_t *m, uint32_t i, uint32_t *vblock, uint32_t *target);

#endif
