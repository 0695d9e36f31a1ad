/* own's active-message wire format, pure encoder and checked decoder:
 *  - FREE: the free of an object at its home node, carrying the object's
 *    final colour (the ABA rule: the home remembers it for the slot). Sent
 *    one-way after a MOVE (the asynchronous free of the old copy) and as a
 *    request by a drop.
 *  - LOCK (a request, answered when granted, with a GRANT naming the
 *    guarded object if the mutex guards one) and UNLOCK / UNLOCK_BOX
 *    (one-way) of a mutex, serialised at the mutex's home node.
 *
 *   0 u32 magic  4 u16 version  6 u16 type  8 u32 body length  12 body
 *   FREE    u64 coloured object address, u32 type id     (24 bytes in all)
 *   LOCK    u64 mutex address                           (20 bytes)
 *   UNLOCK  u64 mutex address                           (20 bytes)
 *   UNLOCK_BOX  u64 mutex address, u64 the guarded object's new coloured
 *               address (the owner update riding the unlock)  (28 bytes)
 *   ALLOC   u64 payload size, u32 type id: allocate a zeroed object at
 *           the receiving home (its colour memory gives the colour); the
 *           reply is a GRANT naming it                        (24 bytes)
 *   GRANT   u64 guarded object's coloured address, u64 payload size,
 *           u32 type id: the payload of a lock's reply when the mutex
 *           guards an object (Mutex<Box<T>>)                 (32 bytes)
 * Errors travel as the fabric reply's status. */
#ifndef DSM_OWN_MSG_H
#define DSM_OWN_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"
#include "util/bytes.h"

enum {
    OWN_MSG_MAGIC = 0x4e574f44u,   /* "DOWN" */
    OWN_MSG_VERSION = 1,
    OWN_MSG_HEADER_LEN = DSM_MSG_HEADER_LEN,
    OWN_MSG_FREE = 1,
    OWN_MSG_LOCK = 2,
    OWN_MSG_UNLOCK = 3,
    OWN_MSG_UNLOCK_BOX = 4,
    OWN_MSG_GRANT = 5,
    OWN_MSG_ALLOC = 6,
    OWN_MSG_MAX_LEN = OWN_MSG_HEADER_LEN + 20,
};

typedef struct own_msg {
    uint16_t type;
    uint64_t g;       /* FREE, GRANT: coloured object address; LOCK, UNLOCK(_BOX): the mutex (no colour); ALLOC: 0 */
    uint32_t obj_type;   /* FREE, GRANT, ALLOC */
    uint64_t arg;        /* UNLOCK_BOX: the object's new coloured address; GRANT, ALLOC: its payload size */
} own_msg_t;

/* Encode into buf[OWN_MSG_MAX_LEN]; returns the length (0 for an unknown type). */
size_t own_msg_encode(const own_msg_t *m, uint8_t *buf);
/* DSM_ERR_PROTO unless magic, version, type and exact length are right and
 * the address has a nonzero offset (and, for a mutex, no colour), the type
 * id is in range, UNLOCK_BOX's object address has a nonzero offset and a
 * GRANT's or ALLOC's size is at most OWN_MAX_SIZE. */
dsm_status_t own_msg_decode(const void *data, size_t len, own_msg_t *out);

#endif
