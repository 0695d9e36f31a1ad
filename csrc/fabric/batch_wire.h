/* The payload of a batched reply (DSM_AM_KIND_REPLY_BATCH): several replies
 * to one requester in one message, its encoder and its bounds-checked
 * decoder. No UCX here, so the decoder can be fuzzed on its own.
 *
 * Why: over tcp every message costs each side a system call, and an
 * emulated one-sided operation is a request and a reply; a target that
 * answers a window of requests that arrived together with one message
 * instead of one each halves the messages of a pipelined stream. */
#ifndef DSM_FABRIC_BATCH_WIRE_H
#define DSM_FABRIC_BATCH_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

/* Layout: entries back to back, each (little-endian, no padding)
 *   0 u64 request id (nonzero)   8 i16 status   10 u16 length   12 data
 * The message header's request_id carries the number of entries (>= 1),
 * its status is 0. Statuses lie in [DSM_AM_WIRE_MIN_STATUS, 0]. */
enum { DSM_BATCH_ENTRY_HDR = 12 };

typedef struct dsm_batch_entry {
    uint64_t request_id;
    int32_t status;
    const uint8_t *data;   /* inside the decoded buffer; NULL when len is 0 */
    size_t len;
} dsm_batch_entry_t;

/* Appends an entry at buf + *used if it fits in cap (len <= UINT16_MAX);
 * false, nothing written, otherwise. */
bool dsm_batch_wire_append(uint8_t *buf, size_t cap, size_t *used, uint64_t request_id, int32_t status,
                           const void *data, size_t len);

/* Checks a whole payload: exactly `count` (>= 1) well-formed entries fill
 * its `len` bytes. DSM_OK or DSM_ERR_PROTO. */
dsm_status_t dsm_batch_wire_check(const void *buf, size_t len, uint64_t count);

/* The entry at *off of a payload that passed the check; advances *off.
 * False at the end. */
bool dsm_batch_wire_next(const void *buf, size_t len, size_t *off, dsm_batch_entry_t *out);

#endif
