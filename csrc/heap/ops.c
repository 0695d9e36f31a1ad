/* The heap's guarded operations: encoder, bounds-checked decoder, the
 * server that checks and performs them on a partition, and the reply's
 * checker (see heap/ops.h for the format). */
#include "heap/ops.h"

#include <stdlib.h>
#include <string.h>

#include "dsm/heap.h"
#include "util/bytes.h"
#include "util/log.h"

static int is_atomic(uint8_t op) { return op == DSM_HEAP_OP_FADD || op == DSM_HEAP_OP_CAS || op == DSM_HEAP_OP_SWAP; }

size_t dsm_heap_op_req_bytes(const dsm_heap_op_t *op)
{
    return DSM_HEAP_OPS_ENTRY_LEN + (op->op == DSM_HEAP_OP_WRITE ? op->len : 0);
}

size_t dsm_heap_op_rep_bytes(const dsm_heap_op_t *op)
{
    return 4 + (op->op == DSM_HEAP_OP_READ ? op->len : is_atomic(op->op) ? 8 : 0);
}

size_t dsm_heap_ops_req_len(const dsm_heap_op_t *ops, uint32_t n)
{
    size_t len = DSM_HEAP_OPS_HEADER_LEN;
    for (uint32_t i = 0; i < n; i++)
        len += dsm_heap_op_req_bytes(&ops[i]);
    return len;
}

size_t dsm_heap_ops_rep_len(const dsm_heap_op_t *ops, uint32_t n)
{
    size_t len = DSM_HEAP_OPS_HEADER_LEN;
    for (uint32_t i = 0; i < n; i++)
        len += dsm_heap_op_rep_bytes(&ops[i]);
    return len;
}

static void put_header(uint8_t *buf, uint16_t type, size_t total, uint32_t n)
{
    dsm_put_msg_header(buf, DSM_HEAP_OPS_MAGIC, DSM_HEAP_OPS_VERSION, type, (uint32_t)(total - DSM_MSG_HEADER_LEN));
    dsm_put_u32(buf + 12, n);
}

size_t dsm_heap_ops_encode(const dsm_heap_op_t *ops, uint32_t n, uint8_t *buf)
{
    size_t total = dsm_heap_ops_req_len(ops, n);
    put_header(buf, DSM_HEAP_OPS_REQ, total, n);
    uint8_t *p = buf + DSM_HEAP_OPS_HEADER_LEN;
    for (uint32_t i = 0; i < n; i++) {
        const dsm_heap_op_t *o = &ops[i];
        p[0] = o->op;
        p[1] = o->flags;
        dsm_put_u16(p + 2, 0);
        dsm_put_u32(p + 4, o->len);
        dsm_put_u64(p + 8, o->gaddr);
        dsm_put_u64(p + 16, o->operand);
        dsm_put_u64(p + 24, o->operand2);
        p += DSM_HEAP_OPS_ENTRY_LEN;
        if (o->op == DSM_HEAP_OP_WRITE && o->len) {
            memcpy(p, o->data, o->len);
            p += o->len;
        }
    }
    return total;
}

static dsm_status_t take_header(const void *buf, size_t len, uint16_t want, dsm_reader_t *r, uint32_t *count)
{
    if (buf == NULL)
        return DSM_ERR_PROTO;
    *r = dsm_reader(buf, len);
    uint16_t type;
    uint32_t blen;
    if (!dsm_take_msg_header(r, DSM_HEAP_OPS_MAGIC, DSM_HEAP_OPS_VERSION, &type, &blen) || type != want ||
        blen != r->left)
        return DSM_ERR_PROTO;
    *count = dsm_take_u32(r);
    if (!r->ok || *count == 0 || *count > DSM_HEAP_OPS_MAX_COUNT)
        return DSM_ERR_PROTO;
    return DSM_OK;
}

dsm_status_t dsm_heap_ops_begin(const void *buf, size_t len, dsm_heap_ops_iter_t *it)
{
    memset(it, 0, sizeof *it);
    dsm_reader_t r;
    dsm_status_t st = take_header(buf, len, DSM_HEAP_OPS_REQ, &r, &it->count);
    it->p = r.p;
    it->left = r.left;
    return st;
}

dsm_status_t dsm_heap_ops_next(dsm_heap_ops_iter_t *it, dsm_heap_op_t *op)
{
    memset(op, 0, sizeof *op);
    if (it->next >= it->count)
        return DSM_ERR_PROTO;
    dsm_reader_t r = dsm_reader(it->p, it->left);
    const uint8_t *e = dsm_take(&r, DSM_HEAP_OPS_ENTRY_LEN);
    if (e == NULL)
        return DSM_ERR_PROTO;
    op->op = e[0];
    op->flags = e[1];
    op->len = dsm_get_u32(e + 4);
    op->gaddr = dsm_get_u64(e + 8);
    op->operand = dsm_get_u64(e + 16);
    op->operand2 = dsm_get_u64(e + 24);
    if (dsm_get_u16(e + 2) != 0 || (op->flags & ~DSM_HEAP_OP_EXACT) != 0)
        return DSM_ERR_PROTO;
    if (dsm_gaddr_colour(op->gaddr) > DSM_HEAP_GEN_MAX || dsm_gaddr_offset(op->gaddr) == 0)
        return DSM_ERR_PROTO;
    switch (op->op) {
    case DSM_HEAP_OP_READ:
    case DSM_HEAP_OP_WRITE:
        if (op->len == 0 || op->len > DSM_HEAP_OPS_MAX_DATA || op->operand != 0 || op->operand2 != 0)
            return DSM_ERR_PROTO;
        break;
    case DSM_HEAP_OP_FADD:
    case DSM_HEAP_OP_SWAP:
        if (op->operand2 != 0)
            return DSM_ERR_PROTO;
        /* fall through */
    case DSM_HEAP_OP_CAS:
        if (op->len != 8 || (dsm_gaddr_offset(op->gaddr) & 7) != 0)
            return DSM_ERR_PROTO;
        break;
    default:
        return DSM_ERR_PROTO;
    }
    if (op->op == DSM_HEAP_OP_WRITE) {
        op->data = dsm_take(&r, op->len);
        if (op->data == NULL)
            return DSM_ERR_PROTO;
    }
    it->p = r.p;
    it->left = r.left;
    it->next++;
    return DSM_OK;
}

dsm_status_t dsm_heap_ops_validate(const void *buf, size_t len, uint32_t *count, size_t *rep_len)
{
    dsm_heap_ops_iter_t it;
    dsm_status_t st = dsm_heap_ops_begin(buf, len, &it);
    size_t rl = DSM_HEAP_OPS_HEADER_LEN;
    dsm_heap_op_t op;
    for (uint32_t i = 0; st == DSM_OK && i < it.count; i++) {
        st = dsm_heap_ops_next(&it, &op);
        rl += dsm_heap_op_rep_bytes(&op);
        if (st == DSM_OK && rl > DSM_HEAP_OPS_MAX_REPLY)
            st = DSM_ERR_PROTO;
    }
    if (st == DSM_OK && it.left != 0)
        st = DSM_ERR_PROTO;
    *count = st == DSM_OK ? it.count : 0;
    *rep_len = st == DSM_OK ? rl : 0;
    return st;
}

/* Check one op as a local access is checked (heap.c's resolve). */
static dsm_status_t check_op(dsm_heap_alloc_t *a, uint32_t self_rank, const dsm_heap_op_t *op, uint8_t **mem)
{
    if (a == NULL || dsm_gaddr_node(op->gaddr) != (self_rank & 0xffu))
        return DSM_ERR_BAD_ADDR;
    uint64_t off = dsm_gaddr_offset(op->gaddr);
    uint16_t tag = dsm_gaddr_colour(op->gaddr);
    size_t size;
    if (dsm_heap_check_range(a, off, op->len) != DSM_OK || (tag && dsm_heap_gen_at(a, off) != tag) ||
        ((op->flags & DSM_HEAP_OP_EXACT) && dsm_heap_access_check(a, off, op->len, tag, &size) != DSM_OK))
        return DSM_ERR_BAD_ADDR;
    *mem = (uint8_t *)dsm_heap_alloc_base(a) + off;
    return DSM_OK;
}

dsm_status_t dsm_heap_ops_serve(dsm_heap_alloc_t *a, uint32_t self_rank, const void *req, size_t len,
                                uint8_t *rep_buf, size_t rep_cap, uint8_t **rep, size_t *rep_len)
{
    *rep = NULL;
    *rep_len = 0;
    uint32_t n;
    size_t rl;
    if (dsm_heap_ops_validate(req, len, &n, &rl) != DSM_OK) {
        DSM_WARN("heap", "malformed heap operations request (%zu bytes) refused", len);
        return DSM_ERR_PROTO;
    }
    uint8_t *out = rl <= rep_cap ? rep_buf : malloc(rl);
    if (out == NULL)
        return DSM_ERR_NOMEM;
    put_header(out, DSM_HEAP_OPS_REP, rl, n);
    uint8_t *p = out + DSM_HEAP_OPS_HEADER_LEN;
    dsm_heap_ops_iter_t it;
    dsm_heap_ops_begin(req, len, &it);
    for (uint32_t i = 0; i < n; i++) {
        dsm_heap_op_t op;
        dsm_heap_ops_next(&it, &op);   /* validated above */
        size_t res = dsm_heap_op_rep_bytes(&op) - 4;
        uint8_t *mem = NULL;
        dsm_status_t st = check_op(a, self_rank, &op, &mem);
        dsm_put_u32(p, (uint32_t)(int32_t)st);
        if (st == DSM_OK)
            dsm_heap_op_perform(&op, mem, p + 4);
        else
            memset(p + 4, 0, res);
        p += 4 + res;
    }
    *rep = out;
    *rep_len = rl;
    return DSM_OK;
}

dsm_status_t dsm_heap_ops_reply_check(const void *buf, size_t len, const dsm_heap_op_t *ops, uint32_t n)
{
    dsm_reader_t r;
    uint32_t count;
    if (take_header(buf, len, DSM_HEAP_OPS_REP, &r, &count) != DSM_OK || count != n ||
        len != dsm_heap_ops_rep_len(ops, n))
        return DSM_ERR_PROTO;
    /* every status is one the server gives */
    size_t pos = DSM_HEAP_OPS_HEADER_LEN;
    for (uint32_t i = 0; i < n; i++) {
        int32_t st = (int32_t)dsm_get_u32((const uint8_t *)buf + pos);
        if (st != DSM_OK && st != DSM_ERR_BAD_ADDR)
            return DSM_ERR_PROTO;
        pos += dsm_heap_op_rep_bytes(&ops[i]);
    }
    return DSM_OK;
}

dsm_status_t dsm_heap_ops_reply_next(const uint8_t *buf, size_t *pos, const dsm_heap_op_t *op,
                                     const uint8_t **result)
{
    dsm_status_t st = (dsm_status_t)(int32_t)dsm_get_u32(buf + *pos);
    *result = buf + *pos + 4;
    *pos += dsm_heap_op_rep_bytes(op);
    return st;
}
