/* The value a node publishes for a region it offers its peers
 * (dsm_node_offer_region), little-endian: u64 base, u64 size, then the
 * fabric's packed remote key (the rest, at least one byte). Pure codec. */
#ifndef DSM_RUNTIME_REGION_OFFER_H
#define DSM_RUNTIME_REGION_OFFER_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

enum { DSM_REGION_VALUE_HEADER = 16 };

typedef struct dsm_region_value {
    uint64_t base, size;
    const uint8_t *key;     /* points into the decoded buffer */
    size_t key_len;
} dsm_region_value_t;

/* Write the value into out[0..DSM_REGION_VALUE_HEADER + key_len). */
void dsm_region_value_encode(uint64_t base, uint64_t size, const void *key, size_t key_len, uint8_t *out);
/* DSM_ERR_PROTO unless the value holds a header, a key of at least one
 * byte, and a range of 1 byte..1 TiB that does not wrap. */
dsm_status_t dsm_region_value_decode(const void *value, size_t len, dsm_region_value_t *out);

#endif
