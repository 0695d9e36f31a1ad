/* The active-message wire header: a fixed little-endian record carried as the
 * UCX AM header, its encoder and its bounds-checked decoder. No UCX here, so
 * the decoder can be fuzzed and unit-tested on its own. */
#ifndef DSM_FABRIC_AM_WIRE_H
#define DSM_FABRIC_AM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

/* Layout (little-endian, no padding), 16 bytes:
 *   0 u8 magic   1 u8 version   2 u8 kind (flags)   3 u8 handler
 *   4 u16 source rank   6 i16 status   8 u64 request id
 * Small: UCX's shm transports place the header after the payload in a
 * 64-byte line that already holds 36 bytes of their own, so with a 16-byte
 * header an 8-byte request or reply is one cache line from sender to
 * receiver. The 30-byte header before (magic u32, version, payload length
 * and wider fields) spilled into a second line, which the receiver's decode
 * then fetched from the sender's core, and which the sender then had to take
 * back: ~160 ns of a ~510 ns round trip on shm (both layouts alternating in
 * one process). The payload's length is UCX's (not on the wire). */
enum {
    DSM_AM_WIRE_MAGIC = 0x50, /* 'P' */
    DSM_AM_WIRE_VERSION = 3,
    DSM_AM_WIRE_HEADER_LEN = 16,
};

/* A fabric address as peers exchange it (the join's member entry): a
 * 4-byte prefix {magic 'F', the active-message wire version, 0, 0}, then
 * the transport's own address bytes. Two nodes whose messages the other
 * could not read thus tell at the join, from the address alone, whichever
 * layer of the fabric changed its wire. */
enum { DSM_FABRIC_ADDR_MAGIC = 0x46, DSM_FABRIC_ADDR_PREFIX = 4 };
void dsm_fabric_addr_prefix(uint8_t out[DSM_FABRIC_ADDR_PREFIX]);
/* DSM_OK for an address of this wire version: *transport and *transport_len
 * are its transport's bytes (inside addr). DSM_ERR_PROTO otherwise, with
 * *version the version the prefix names (0: no fabric prefix at all). */
dsm_status_t dsm_fabric_addr_decode(const void *addr, size_t len, unsigned *version, const void **transport,
                                    size_t *transport_len);

/* flags: what kind of message this is */
enum {
    DSM_AM_KIND_PLAIN = 0,    /* fire and forget */
    DSM_AM_KIND_REQUEST = 1,  /* the sender waits for a reply with request_id */
    DSM_AM_KIND_REPLY = 2,    /* answers request_id; status is meaningful */
    /* several replies to this node (batch_wire.h); request_id: how many */
    DSM_AM_KIND_REPLY_BATCH = 3,
    /* several requests to DSM_AM_RMA_HANDLER, the same way */
    DSM_AM_KIND_REQUEST_BATCH = 4,
};

/* Statuses a reply may carry: DSM_OK down to this. */
enum { DSM_AM_WIRE_MIN_STATUS = -64 };

typedef struct dsm_am_wire {
    uint16_t handler;
    uint16_t flags;
    uint32_t payload_len;   /* decode: the length UCX reported; encode: ignored */
    uint32_t src_rank;
    uint64_t request_id;
    int32_t status;
    /* Set by the decoder when magic, version, header length and kind were
     * valid, so src_rank/request_id/flags can be trusted enough to address an
     * error reply even though the message itself is rejected. */
    int addressable;
} dsm_am_wire_t;

void dsm_am_wire_encode(const dsm_am_wire_t *h, uint8_t out[DSM_AM_WIRE_HEADER_LEN]);

/* Decode and validate a header that arrived with `payload_len` bytes of
 * payload. DSM_OK, DSM_ERR_PROTO (malformed, payload over
 * DSM_AM_MAX_PAYLOAD) or DSM_ERR_NO_HANDLER (handler id out of range).
 * Whether the handler is registered is the caller's business. */
dsm_status_t dsm_am_wire_decode(const void *hdr, size_t hdr_len, size_t payload_len,
                                dsm_am_wire_t *out);

#endif
