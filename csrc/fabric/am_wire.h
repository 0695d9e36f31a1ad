/* The active-message wire header: a fixed little-endian record carried as the
 * UCX AM header, its encoder and its bounds-checked decoder. No UCX here, so
 * the decoder can be fuzzed and unit-tested on its own. */
#ifndef DSM_FABRIC_AM_WIRE_H
#define DSM_FABRIC_AM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

/* Layout (little-endian, no padding):
 *   0 u32 magic   4 u16 version   6 u16 handler   8 u32 payload length
 *  12 u32 source rank  16 u64 request id  24 u16 flags  26 i32 status */
enum {
    DSM_AM_WIRE_MAGIC = 0x4d534450u, /* "PDSM" */
    DSM_AM_WIRE_VERSION = 1,
    DSM_AM_WIRE_HEADER_LEN = 30,
};

/* flags: what kind of message this is */
enum {
    DSM_AM_KIND_PLAIN = 0,    /* fire and forget */
    DSM_AM_KIND_REQUEST = 1,  /* the sender waits for a reply with request_id */
    DSM_AM_KIND_REPLY = 2,    /* answers request_id; status is meaningful */
};

/* Statuses a reply may carry: DSM_OK down to this. */
enum { DSM_AM_WIRE_MIN_STATUS = -64 };

typedef struct dsm_am_wire {
    uint16_t handler;
    uint16_t flags;
    uint32_t payload_len;
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
 * payload. DSM_OK, DSM_ERR_PROTO (malformed, length mismatch, payload over
 * DSM_AM_MAX_PAYLOAD) or DSM_ERR_NO_HANDLER (handler id out of range).
 * Whether the handler is registered is the caller's business. */
dsm_status_t dsm_am_wire_decode(const void *hdr, size_t hdr_len, size_t payload_len,
                                dsm_am_wire_t *out);

#endif
