/* The heap's active-message wire format (remote alloc / free / check), its
 * encoder, its bounds-checked decoder, and the server side that applies a
 * request to an allocator core. No node or fabric here, so the decoder and
 * the server can be fuzzed on their own.
 *
 * Every message (little-endian, no padding):
 *   0 u32 magic  4 u16 version  6 u16 type  8 u32 body length  12 body
 * Bodies:
 *   ALLOC_REQ  u64 size                 ALLOC_REP  u64 gaddr, u64 usable size
 *   FREE_REQ   u64 gaddr                FREE_REP   (empty)
 *   CHECK_REQ  u64 gaddr, u64 len       CHECK_REP  u64 usable size
 * An address may carry its allocation's generation in its tag bits (48..62;
 * 0 = none): a free or check of a freed or reused allocation is refused.
 * CHECK with len 0 names an allocation's start; with len > 0 it asks whether
 * [gaddr, gaddr+len) lies inside one live allocation (DSM_CHECKED mode).
 * Errors travel as the fabric reply's status with no payload. */
#ifndef DSM_HEAP_MSG_H
#define DSM_HEAP_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"
#include "heap/alloc.h"
#include "util/bytes.h"

enum {
    DSM_HEAP_MSG_MAGIC = 0x50454844u, /* "DHEP" */
    DSM_HEAP_MSG_VERSION = 2,
    DSM_HEAP_MSG_HEADER_LEN = DSM_MSG_HEADER_LEN,
    DSM_HEAP_MSG_MAX_LEN = DSM_HEAP_MSG_HEADER_LEN + 16,
};

typedef enum dsm_heap_msg_type {
    DSM_HEAP_MSG_ALLOC_REQ = 1,
    DSM_HEAP_MSG_ALLOC_REP = 2,
    DSM_HEAP_MSG_FREE_REQ = 3,
    DSM_HEAP_MSG_FREE_REP = 4,
    DSM_HEAP_MSG_CHECK_REQ = 5,
    DSM_HEAP_MSG_CHECK_REP = 6,
} dsm_heap_msg_type_t;

typedef struct dsm_heap_msg {
    uint16_t type;
    uint64_t size;    /* ALLOC_REQ: requested; ALLOC_REP, CHECK_REP: usable; CHECK_REQ: len */
    uint64_t gaddr;   /* ALLOC_REP, FREE_REQ, CHECK_REQ (tag: the generation or 0) */
} dsm_heap_msg_t;

/* Encode into buf (at least DSM_HEAP_MSG_MAX_LEN bytes); returns the length. */
size_t dsm_heap_msg_encode(const dsm_heap_msg_t *m, uint8_t *buf);

/* Decode and validate: magic, version, known type, body length exactly what
 * the type needs, sizes and addresses in range (sizes <= 2^40, addresses
 * with a nonzero offset and a tag of at most DSM_HEAP_GEN_MAX). DSM_OK or DSM_ERR_PROTO. */
dsm_status_t dsm_heap_msg_decode(const void *data, size_t len, dsm_heap_msg_t *out);

/* Serve one request that arrived for handler `expect` (ALLOC_REQ, FREE_REQ
 * or CHECK_REQ) at the node of rank self_rank, whose allocator is `a` (NULL
 * if the node has no partition). Writes the reply payload (possibly empty)
 * to reply[DSM_HEAP_MSG_MAX_LEN] and returns the status to reply with. */
dsm_status_t dsm_heap_msg_serve(dsm_heap_alloc_t *a, uint32_t self_rank, uint16_t expect,
                                const void *req, size_t len, uint8_t *reply, size_t *reply_len);

#endif
