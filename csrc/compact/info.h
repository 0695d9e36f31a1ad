/* What a node publishes about its store at join, and its checked decoder:
 * little-endian u64 base, u64 size, u32 block size, u16 key tag, u16 flags
 * (bit 0: serves a store), u32 pid, i32 memfd (for peers on this host that
 * map it), then the fabric's packed key of the range (the rest; empty when
 * no store is served). A node attached as a client only publishes flags 0. */
#ifndef DSM_COMPACT_INFO_H
#define DSM_COMPACT_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

enum { DSM_COMPACT_INFO_HEADER = 32, DSM_COMPACT_INFO_SERVES = 1 };

typedef struct dsm_compact_info {
    uint64_t base, size;
    uint32_t block_size;
    uint16_t key_tag, flags;
    uint32_t pid;
    int32_t memfd;
    const uint8_t *key;   /* points into the decoded buffer */
    size_t key_len;
} dsm_compact_info_t;

/* Encode into buf (DSM_COMPACT_INFO_HEADER + key_len bytes). */
size_t dsm_compact_info_encode(const dsm_compact_info_t *info, uint8_t *buf);
/* DSM_ERR_PROTO unless: the header is complete; a serving store has a
 * nonempty key, a size that is a nonzero multiple of a block size of
 * 4 KiB..1 MiB (a multiple of 4 KiB) below 2^40, and base + size does not
 * wrap; a client-only entry has no key. */
dsm_status_t dsm_compact_info_decode(const void *value, size_t len, dsm_compact_info_t *out);

#endif
