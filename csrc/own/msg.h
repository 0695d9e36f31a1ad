/* own's active-message wire format: the free of an object at its home node,
 * carrying the object's final colour (the ABA rule: the home remembers it
 * for the slot). Sent one-way after a MOVE (the asynchronous free of the old
 * copy) and as a request by a drop. Pure encoder and checked decoder.
 *
 *   0 u32 magic  4 u16 version  6 u16 type  8 u32 body length  12 body
 *   FREE  u64 coloured object address, u32 type id     (24 bytes in all)
 * Errors of a requested free travel as the fabric reply's status. */
#ifndef DSM_OWN_MSG_H
#define DSM_OWN_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

enum {
    OWN_MSG_MAGIC = 0x4e574f44u,   /* "DOWN" */
    OWN_MSG_VERSION = 1,
    OWN_MSG_HEADER_LEN = 12,
    OWN_MSG_FREE = 1,
    OWN_MSG_MAX_LEN = OWN_MSG_HEADER_LEN + 12,
};

typedef struct own_msg {
    uint16_t type;
    uint64_t g;       /* coloured */
    uint32_t obj_type;
} own_msg_t;

/* Encode into buf[OWN_MSG_MAX_LEN]; returns the length (0 for an unknown type). */
size_t own_msg_encode(const own_msg_t *m, uint8_t *buf);
/* DSM_ERR_PROTO unless magic, version, type and exact length are right and
 * the address has a nonzero offset and the type id is in range. */
dsm_status_t own_msg_decode(const void *data, size_t len, own_msg_t *out);

#endif
