/* dir's wire format (the GAM-style directory protocol): requests to an
 * object's home, the home's invalidations and recalls to cachers, and the
 * answers. Pure encoder and checked decoder.
 *
 *   0 u32 magic  4 u16 version  6 u16 type  8 u32 body length  12 body
 *   READ, WRITE, DROP    u64 object address          (to the home)
 *   INV                  u64 object address          (home -> a sharer)
 *   RECALL               u64 object address, u8 mode (home -> the M holder;
 *                        mode 0 downgrade to S, 1 invalidate)
 *   DATA                 u64 object address, u32 n, n bytes: the whole
 *                        object (16-byte header + payload); the reply to
 *                        READ and WRITE, the answer to RECALL
 *   DATA_AFTER           as DATA: the reply to a READ or WRITE the home
 *                        answered only after asking other nodes (its
 *                        requester waited for their round trip too)
 *   ACK                  u64 object address; the reply to DROP, the answer
 *                        to INV (to RECALL: "no copy here")
 * Addresses carry no colour and have a nonzero offset. Requests are
 * answered by reply; INV and RECALL are posts, and so are their answers
 * (to the home's request handler), as a home's handler may not wait. */
#ifndef DSM_DIR_MSG_H
#define DSM_DIR_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"
#include "util/bytes.h"

enum {
    DIR_MSG_MAGIC = 0x52494444u,   /* "DDIR" */
    /* 3: DATA_AFTER; a node of another version refuses every message */
    DIR_MSG_VERSION = 3,
    DIR_MSG_HEADER_LEN = DSM_MSG_HEADER_LEN,
    DIR_MSG_FIXED_MAX = DIR_MSG_HEADER_LEN + 12,   /* every type but DATA fits */
    DIR_OBJ_HEADER = 16,
};
#define DIR_OBJ_MAGIC 0x44424f44u   /* "DOBD" */
#define DIR_MAX_OBJECT (8ull << 20)   /* header + payload, so one DATA fits an active message */

typedef enum dir_msg_type {
    DIR_MSG_READ = 1, DIR_MSG_WRITE = 2, DIR_MSG_DROP = 3,
    DIR_MSG_INV = 4, DIR_MSG_RECALL = 5, DIR_MSG_DATA = 6, DIR_MSG_ACK = 7, DIR_MSG_DATA_AFTER = 8,
} dir_msg_type_t;

/* DATA or DATA_AFTER: a message carrying the object. */
static inline int dir_msg_has_object(uint16_t type) { return type == DIR_MSG_DATA || type == DIR_MSG_DATA_AFTER; }

enum { DIR_RECALL_DOWNGRADE = 0, DIR_RECALL_INVALIDATE = 1 };

typedef struct dir_msg {
    uint16_t type;
    uint64_t addr;
    uint8_t mode;           /* RECALL */
    uint32_t len;           /* DATA, DATA_AFTER */
    const uint8_t *data;    /* DATA, DATA_AFTER: points into the decoded buffer */
} dir_msg_t;

/* Bytes the encoding of m takes. */
size_t dir_msg_size(const dir_msg_t *m);
/* Encode into buf[dir_msg_size(m)]; returns the length, 0 for an unknown type. */
size_t dir_msg_encode(const dir_msg_t *m, uint8_t *buf);
/* DSM_ERR_PROTO unless magic, version, type, exact length, address and (for
 * DATA) the object's length (a whole header, at most DIR_MAX_OBJECT) are right. */
dsm_status_t dir_msg_decode(const void *data, size_t len, dir_msg_t *out);

/* An object's header: u32 magic, u32 type id, u64 payload size. */
void dir_obj_header_encode(uint32_t type, uint64_t size, uint8_t out[DIR_OBJ_HEADER]);
/* DSM_ERR_BAD_ADDR unless the magic is right, the type nonzero and the
 * whole object (header + size) fits in `room` bytes and DIR_MAX_OBJECT. */
dsm_status_t dir_obj_header_decode(const void *data, size_t len, uint64_t room, uint32_t *type, uint64_t *size);

#endif
