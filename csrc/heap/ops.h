/* The heap's guarded operations on the wire: one request carries one or
 * more reads, writes and 64-bit atomics by global address, and the target
 * checks each against its own block states and generations and performs it
 * in the same visit, so a checked access costs one round trip where the
 * fabric's one-sided operations are messages anyway (tcp). The encoder, the
 * bounds-checked decoder and the server that applies a request to a
 * partition; no node or fabric here, so it can be fuzzed on its own.
 *
 * Request (little-endian, no padding):
 *   0 u32 magic "DHOP"  4 u16 version  6 u16 type (1)  8 u32 body length
 *  12 u32 count, then `count` entries, each
 *      0 u8 op  1 u8 flags (bit 0: exact check)  2 u16 zero  4 u32 length
 *      8 u64 gaddr (tag: the generation or 0)  16 u64 operand  24 u64 operand2
 *     32 a write's `length` bytes (other ops: nothing)
 * Reply: the same header with type 2, then u32 count and per entry an i32
 * status followed by its result, present whatever the status (zeros on
 * failure): a read's `length` bytes, an atomic's old value (u64), nothing
 * for a write. The reply's length is thus known from the request alone.
 * Atomics are 8 bytes at an 8-aligned offset; a cas takes operand as the
 * expected and operand2 as the desired value, others need operand2 0. */
#ifndef DSM_HEAP_OPS_H
#define DSM_HEAP_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dsm/status.h"
#include "heap/alloc.h"
#include "util/bytes.h"

enum {
    DSM_HEAP_OPS_MAGIC = 0x504f4844u, /* "DHOP" */
    DSM_HEAP_OPS_VERSION = 1,
    DSM_HEAP_OPS_REQ = 1,
    DSM_HEAP_OPS_REP = 2,
    DSM_HEAP_OPS_HEADER_LEN = 16,     /* the message header and the count */
    DSM_HEAP_OPS_ENTRY_LEN = 32,
    DSM_HEAP_OPS_MAX_COUNT = 4096,
    /* A read's or a write's bytes, and a whole reply's, at most: larger
     * accesses take the one-sided path. */
    DSM_HEAP_OPS_MAX_DATA = 1 << 20,
    DSM_HEAP_OPS_MAX_REPLY = 4 << 20,
};

typedef enum dsm_heap_op_kind {
    DSM_HEAP_OP_READ = 1,
    DSM_HEAP_OP_WRITE = 2,
    DSM_HEAP_OP_FADD = 3,
    DSM_HEAP_OP_CAS = 4,
    DSM_HEAP_OP_SWAP = 5,
} dsm_heap_op_kind_t;

enum { DSM_HEAP_OP_EXACT = 1 };   /* flags: check against the exact allocation too */

typedef struct dsm_heap_op {
    uint8_t op, flags;
    uint32_t len;
    uint64_t gaddr;
    uint64_t operand, operand2;
    const uint8_t *data;   /* a write's bytes (the encoder's source, the decoder's view) */
} dsm_heap_op_t;

/* Bytes of the request and of its reply for ops[0..n). */
size_t dsm_heap_ops_req_len(const dsm_heap_op_t *ops, uint32_t n);
size_t dsm_heap_ops_rep_len(const dsm_heap_op_t *ops, uint32_t n);
/* Bytes an op adds to a request / a reply. */
size_t dsm_heap_op_req_bytes(const dsm_heap_op_t *op);
size_t dsm_heap_op_rep_bytes(const dsm_heap_op_t *op);

/* Encode ops[0..n) into buf (dsm_heap_ops_req_len bytes); returns the length. */
size_t dsm_heap_ops_encode(const dsm_heap_op_t *ops, uint32_t n, uint8_t *buf);

/* Walk a request: begin validates the header and the count, next decodes
 * and validates the next entry (known op, zero reserved bits, lengths the op
 * admits, aligned atomics, a gaddr with a nonzero offset and a tag of at
 * most DSM_HEAP_GEN_MAX). dsm_heap_ops_validate walks a whole request and
 * gives its count and its reply's length; DSM_OK or DSM_ERR_PROTO (trailing
 * bytes, a reply that would exceed DSM_HEAP_OPS_MAX_REPLY included). */
typedef struct dsm_heap_ops_iter {
    const uint8_t *p;
    size_t left;
    uint32_t count, next;
} dsm_heap_ops_iter_t;
dsm_status_t dsm_heap_ops_begin(const void *buf, size_t len, dsm_heap_ops_iter_t *it);
dsm_status_t dsm_heap_ops_next(dsm_heap_ops_iter_t *it, dsm_heap_op_t *op);
dsm_status_t dsm_heap_ops_validate(const void *buf, size_t len, uint32_t *count, size_t *rep_len);

/* Serve a request at the node of rank self_rank whose allocator is `a` (NULL
 * if none: every op then fails with DSM_ERR_BAD_ADDR). Each op is checked as
 * a local access is (its blocks live, its generation the address's tag, the
 * exact allocation with DSM_HEAP_OP_EXACT) and performed on the partition
 * (SEQ_CST CPU atomics, which mix with peers' direct ones). The reply goes
 * to rep_buf if it fits in rep_cap bytes, else to a malloc'd buffer that the
 * caller frees (*rep != rep_buf). DSM_ERR_PROTO for a malformed request,
 * DSM_ERR_NOMEM; the ops' own errors travel in the reply. */
dsm_status_t dsm_heap_ops_serve(dsm_heap_alloc_t *a, uint32_t self_rank, const void *req, size_t len,
                                uint8_t *rep_buf, size_t rep_cap, uint8_t **rep, size_t *rep_len);

/* Perform `op` (already checked) on the memory `mem` it names: a read's
 * bytes to out, a write's from op->data, an atomic's old value to out as a
 * little-endian u64 (SEQ_CST CPU atomics, which mix with the fabric's).
 * Inline: it is the whole access on the heap's mapped (shm) path. */
static inline void dsm_heap_op_perform(const dsm_heap_op_t *op, uint8_t *mem, uint8_t *out)
{
    uint64_t *w = (uint64_t *)(void *)mem, old;
    switch (op->op) {
    case DSM_HEAP_OP_READ: memcpy(out, mem, op->len); return;
    case DSM_HEAP_OP_WRITE: memcpy(mem, op->data, op->len); return;
    case DSM_HEAP_OP_FADD: old = __atomic_fetch_add(w, op->operand, __ATOMIC_SEQ_CST); break;
    case DSM_HEAP_OP_SWAP: old = __atomic_exchange_n(w, op->operand, __ATOMIC_SEQ_CST); break;
    default:
        old = op->operand;
        __atomic_compare_exchange_n(w, &old, op->operand2, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        break;   /* old: the value found, whether or not it was swapped */
    }
    dsm_put_u64(out, old);
}

/* Check a reply to ops[0..n): header, count and exact length. Then entry i's
 * status and result are read with dsm_heap_ops_reply_next, in order. */
dsm_status_t dsm_heap_ops_reply_check(const void *buf, size_t len, const dsm_heap_op_t *ops, uint32_t n);
/* The status of the next entry (for `op`) and a pointer to its result
 * bytes; advances *pos (start at DSM_HEAP_OPS_HEADER_LEN). */
dsm_status_t dsm_heap_ops_reply_next(const uint8_t *buf, size_t *pos, const dsm_heap_op_t *op,
                                     const uint8_t **result);

#endif
