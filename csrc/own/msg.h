/* own's active-message wire format, pure encoder and checked decoder:
 *  - FREE: the free of an object at its home node, carrying the object's
 *    final colour (the ABA rule: the home remembers it for the slot). Sent
 *    one-way after a MOVE (the asynchronous free of the old copy) and as a
 *    request by a drop.
 *  - LOCK (a request, answered when granted) and UNLOCK (one-way) of a
 *    mutex, serialised at the mutex's home node.
 *
 *   0 u32 magic  4 u16 version  6 u16 type  8 u32 body length  12 body
 *   FREE    u64 coloured object address, u32 type id     (24 bytes in all)
 *   LOCK    u64 mutex address                           (20 bytes)
 *   UNLOCK  u64 mutex address                           (20 bytes)
 * Errors travel as the fabric reply's status. */
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
    OWN_MSG_LOCK = 2,
    OWN_MSG_UNLOCK = 3,
    OWN_MSG_MAX_LEN = OWN_MSG_HEADER_LEN + 12,
};

typedef struct own_msg {
    uint16_t type;
    uint64_t g;       /* FREE: coloured object address; LOCK, UNLOCK: the mutex (no colour) */
    uint32_t obj_type;   /* FREE */
} own_msg_t;

/* Encode into buf[OWN_MSG_MAX_LEN]; returns the length (0 for an unknown type). */
size_t own_msg_encode(const own_msg_t *m, uint8_t *buf);
/* DSM_ERR_PROTO unless magic, version, type and exact length are right and
 * the address has a nonzero offset (and, for a mutex, no colour), and the
 * type id is in range. */
dsm_status_t own_msg_decode(const void *data, size_t len, own_msg_t *out);

#endif
