/* chan's wire format: the manager's JOIN (an endpoint's name, kind, shape
 * and region descriptors, to every participant), its answer CONNECT (the
 * same of the peer's endpoint, also the body of a refusal) and LEAVE (the
 * name alone). Pure encoder and checked decoder, no I/O (fuzzed by
 * csrc/fuzz/fuzz_chan_wire.c).
 *
 *   0 u32 magic  4 u16 version  6 u16 type  8 u32 body length  12 body
 *   body: u32 kind, u8 name length n, n name bytes, u8 region count k,
 *         k x {u8 name length m, m name bytes, u64 size, u64 offset},
 *         u8 shape count s, s x u64 shape value
 * Names are printable ASCII (no NUL); a channel name is 1..DSM_CHAN_NAME_MAX
 * bytes, a region's 1..DSM_CHAN_REGION_NAME_MAX; sizes are nonzero and
 * offset + size does not overflow; s is at most DSM_CHAN_MAX_SHAPE. LEAVE
 * has kind 0, no regions and no shape. */
#ifndef DSM_CHAN_WIRE_H
#define DSM_CHAN_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/chan_sdk.h"
#include "dsm/status.h"

enum {
    CHAN_MSG_MAGIC = 0x4e414843u,   /* "CHAN" */
    CHAN_MSG_VERSION = 2,
    CHAN_MSG_MAX_LEN = 12 + 4 + 1 + DSM_CHAN_NAME_MAX + 1 +
                       DSM_CHAN_MAX_REGIONS * (1 + DSM_CHAN_REGION_NAME_MAX + 16) + 1 + DSM_CHAN_MAX_SHAPE * 8,
};

typedef enum chan_msg_type { CHAN_MSG_JOIN = 1, CHAN_MSG_CONNECT = 2, CHAN_MSG_LEAVE = 3 } chan_msg_type_t;

typedef struct chan_wire_region {
    char name[DSM_CHAN_REGION_NAME_MAX + 1];
    uint64_t size, offset;
} chan_wire_region_t;

typedef struct chan_msg {
    uint16_t type;
    uint32_t kind;
    char name[DSM_CHAN_NAME_MAX + 1];
    uint8_t nregions;
    chan_wire_region_t regions[DSM_CHAN_MAX_REGIONS];
    uint8_t nshape;
    uint64_t shape[DSM_CHAN_MAX_SHAPE];
} chan_msg_t;

/* Encode into buf[CHAN_MSG_MAX_LEN]; the length, 0 if m breaks the rules above. */
size_t chan_msg_encode(const chan_msg_t *m, uint8_t *buf);
/* DSM_ERR_PROTO unless the bytes are exactly one message by the rules above. */
dsm_status_t chan_msg_decode(const void *data, size_t len, chan_msg_t *out);
/* Whether s[0..n) may be a name: printable ASCII, 1..max bytes. */
int chan_name_ok(const char *s, size_t n, size_t max);

#endif
