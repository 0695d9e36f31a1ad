/* libFuzzer target for the remote delegation wire (deleg/remote_wire.c): the
 * input as a remote slot block (trailer, then every request and every
 * response it claims), as the tcp slot-write message, as a large-request or
 * spilled-response message, as a termination reply, as an exported trust,
 * as the move of an imported trust's weight and as a board reply. Whatever
 * decodes must lie inside its buffer, and the fixed-size ones re-encode to
 * the same bytes. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "deleg/remote_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const uint8_t *p, size_t len, const uint8_t *lo, const uint8_t *hi)
{
    if (len && (p < lo || p > hi || len > (size_t)(hi - p))) __builtin_trap();
}

static void walk_block(const uint8_t *block)
{
    rslot_view_t v;
    if (dsm_rslot_decode(block, RSLOT_SIZE, &v) != DSM_OK) return;
    const uint8_t *end = block + RSLOT_PAYLOAD;
    const uint8_t *p = block + v.offset;
    for (unsigned i = 0; i < v.count; i++) {
        rreq_t q;
        size_t used;
        if (dsm_rreq_decode(p, (size_t)(end - p), v.fn, v.nfn, &q, &used) != DSM_OK) break;
        if (used < RREQ_HDR || used > (size_t)(end - p) || (used & 7)) __builtin_trap();
        inside(q.env, q.env_len, p, end);
        inside(q.args, q.args_len, p, end);
        p += used;
    }
    p = block + v.offset;
    for (unsigned i = 0; i < v.count; i++) {
        rresp_t r;
        size_t used;
        if (dsm_rresp_decode(p, (size_t)(end - p), &r, &used) != DSM_OK) break;
        if (used < RRESP_HDR || used > (size_t)(end - p)) __builtin_trap();
        if (!r.spilled) inside(r.data, r.len, p, end);
        p += used;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* 1. a block: the input, zero-padded or cut to the slot size */
    static uint8_t block[RSLOT_SIZE];
    memset(block, 0, sizeof block);
    memcpy(block, data, size < sizeof block ? size : sizeof block);
    walk_block(block);
    /* and the input as the tail of a block, where a writer puts it */
    if (size <= sizeof block) {
        memset(block, 0, sizeof block);
        memcpy(block + sizeof block - size, data, size);
        walk_block(block);
    }

    /* 2. the tcp slot write */
    rput_t w;
    if (dsm_rput_decode(data, size, &w) == DSM_OK) {
        inside(w.bytes, w.len, data, data + size);
        if (w.len > RSLOT_SEQ_AT || w.block_off % RSLOT_SIZE) __builtin_trap();
        uint8_t again[RPUT_HDR];
        dsm_rput_encode_hdr(again, w.block_off, (uint32_t)w.len, w.run, w.seq);
        if (memcmp(again, data, RPUT_HDR) != 0) __builtin_trap();
    }

    /* 3. a large request / spilled response */
    rlarge_t l;
    if (dsm_rlarge_decode(data, size, &l) == DSM_OK) {
        inside(l.bytes, l.len, data, data + size);
        uint8_t again[RLARGE_HDR];
        dsm_rlarge_encode_hdr(again, l.resp, l.trustee, l.client, l.index, l.run, l.seq);
        if (memcmp(again, data, RLARGE_HDR) != 0) __builtin_trap();
        if (!l.resp) {
            rreq_t q;
            size_t used;
            if (dsm_rreq_decode(l.bytes, l.len, NULL, 0, &q, &used) == DSM_OK) {
                inside(q.env, q.env_len, l.bytes, l.bytes + l.len);
                inside(q.args, q.args_len, l.bytes, l.bytes + l.len);
            }
        }
    }

    /* 4. fixed-size messages re-encode to themselves */
    rterm_t t;
    if (dsm_rterm_decode(data, size, &t) == DSM_OK) {
        uint8_t again[RTERM_LEN];
        dsm_rterm_encode(again, &t);
        if (memcmp(again, data, RTERM_LEN) != 0) __builtin_trap();
    }
    rtrust_t tr;
    if (dsm_rtrust_decode(data, size, &tr) == DSM_OK) {
        uint8_t again[RTRUST_LEN];
        dsm_rtrust_encode(again, &tr);
        if (memcmp(again, data, RTRUST_LEN) != 0) __builtin_trap();
    }
    rmove_t mv;
    if (dsm_rmove_decode(data, size, &mv) == DSM_OK) {
        uint8_t again[RMOVE_LEN];
        dsm_rmove_encode(again, &mv);
        if (memcmp(again, data, RMOVE_LEN) != 0 || mv.weight == 0 || mv.handle == 0) __builtin_trap();
    }
    /* 5. a board reply: its bytes lie in the message, its header re-encodes */
    rboard_t bd;
    if (dsm_rboard_decode(data, size, &bd) == DSM_OK) {
        inside(bd.bytes, bd.len, data, data + size);
        uint8_t again[RBOARD_HDR];
        dsm_rboard_encode_hdr(again, &bd);
        if (memcmp(again, data, RBOARD_HDR) != 0) __builtin_trap();
    }
    return 0;
}
