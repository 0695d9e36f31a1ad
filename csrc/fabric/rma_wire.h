/* The fabric's own emulation of one-sided operations over transports without
 * RDMA (tcp): the request an initiator sends to the target's internal handler
 * (DSM_AM_RMA_HANDLER), its encoder and its bounds-checked decoder. No UCX
 * here, so the decoder can be fuzzed and unit-tested on its own.
 *
 * Why not UCX's RMA/AMO over tcp: UCX emulates them in software with messages
 * through the target's progress anyway, and with UCX_PROTO_ENABLE=y (1.13)
 * those emulated requests cannot be purged: a peer that dies while one is
 * outstanding makes UCX abort the whole process. Doing the emulation with our
 * own active messages means no UCX RMA/AMO request ever exists on such an
 * endpoint, and failures complete through our pending table instead. */
#ifndef DSM_FABRIC_RMA_WIRE_H
#define DSM_FABRIC_RMA_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

/* Layout (little-endian, no padding), followed for a put by `length` bytes:
 *   0 u8 op   1..7 zero   8 u64 remote address   16 u64 length
 *  24 u64 operand (add value / compare value / swap value)
 *  32 u64 operand2 (cas: the value swapped in; 0 otherwise)
 * The address is the target's own virtual address, as the initiator learned
 * it with the region (dsm_fabric_remote_region_add); the target only acts on
 * it if [address, address + length) lies inside one of its registered regions.
 * Replies: get -> the data; atomics -> the old value as u64; put -> empty. */
enum {
    DSM_RMA_WIRE_LEN = 40,
    DSM_RMA_GET = 1,
    DSM_RMA_PUT = 2,
    DSM_RMA_FADD = 3,
    DSM_RMA_CAS = 4,
    DSM_RMA_SWAP = 5,
};

typedef struct dsm_rma_wire {
    uint8_t op;
    uint64_t addr;
    uint64_t length;
    uint64_t operand;
    uint64_t operand2;
    const uint8_t *data;   /* put payload inside the decoded buffer, else NULL */
} dsm_rma_wire_t;

void dsm_rma_wire_encode(const dsm_rma_wire_t *m, uint8_t out[DSM_RMA_WIRE_LEN]);

/* Decode a request payload of `len` bytes. DSM_OK or DSM_ERR_PROTO (short,
 * unknown op, nonzero reserved bytes, a length that does not match the op:
 * atomics are 8 bytes at an 8-aligned address, a put carries exactly its
 * data, a get or put is at most DSM_AM_MAX_PAYLOAD, address + length wraps). */
dsm_status_t dsm_rma_wire_decode(const void *buf, size_t len, dsm_rma_wire_t *out);

#endif
