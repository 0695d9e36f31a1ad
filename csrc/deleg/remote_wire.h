/* Private: the wire format of delegation across nodes (Gossamer, thesis
 * §3.2.7) — remote request/response slots, the message that carries a slot
 * write over tcp, the large-request message, the termination probe, the
 * exported trust and the move of an imported trust's weight — with pure
 * encoders and checked decoders (fuzzed by csrc/fuzz/fuzz_deleg_rslot.c).
 *
 * A slot is one RSLOT_SIZE-byte block. Its payload is right-aligned against
 * the trailer, and the trailer (metadata) sits at the end of the block, so a
 * batch of L payload bytes is the single contiguous range
 * [RSLOT_PAYLOAD - L, RSLOT_SIZE) and one write carries batch and metadata:
 *
 *   [0 .. offset)              stale bytes, ignored
 *   [offset .. 960)            requests (or responses), packed, 8-aligned
 *   [960 .. 992)   u32 fn[8]   function-id cache: ids of this batch's closures
 *   [992]  u16 offset          where the payload starts (8-aligned, <= 960)
 *   [994]  u16 count           requests / responses in the batch
 *   [996]  u8  nfn             cache entries used
 *   [997]  u8  flags           RSLOT_LARGE: one request, sent by message;
 *                              with RSLOT_BIG it was put in the pair's big
 *                              block instead (at most RBIG_SIZE bytes);
 *                              RSLOT_SPILLS (responses): some response of
 *                              the batch comes by message (the client
 *                              waits for them before completing any)
 *   [998]  u16 magic           RSLOT_MAGIC
 *   [1000] u32 large_len       RSLOT_LARGE: the request's encoded length
 *   [1004 .. 1016)             zero
 *   [1016] u64 seq             ready flag: the batch's sequence number (>= 1)
 *
 * `inflight` blocks per (client thread, trustee thread) pair and direction
 * (2, or 4 over tcp: remote.h): batch `seq` uses block seq % inflight, so
 * that many batches can be in flight per pair. The reader waits for seq ==
 * expected; the writer stores seq last (release), after the rest of the block (see remote_slot.c for how, per transport).
 *
 * A request: 16-byte header {u8 fidx, u8 kind, u16 env_len, u32 args_len,
 * u32 handle, u32 ret_size}; fidx < nfn names fn[fidx], fidx 0xff means the
 * id follows inline as {u32 fn_id, u32 0}; then env and args, each padded to
 * 8 bytes. A response: {i32 status, u32 len} then len bytes padded to 8
 * (len's top bit RRESP_SPILLED: no bytes here, they come by message, or
 * with RRESP_INBIG too, they are in the batch's big block).
 * All integers little-endian. */
#ifndef DSM_DELEG_REMOTE_WIRE_H
#define DSM_DELEG_REMOTE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

enum {
    RSLOT_SIZE = 1024,
    RSLOT_TRAILER = 64,
    RSLOT_PAYLOAD = RSLOT_SIZE - RSLOT_TRAILER, /* 960 */
    RSLOT_SEQ_AT = RSLOT_SIZE - 8,              /* 1016 */
    RSLOT_META = RSLOT_SEQ_AT - RSLOT_PAYLOAD,  /* 56: trailer bytes written with the payload */
    RSLOT_FNCACHE = 8,
    RSLOT_MAGIC = 0x4753,                       /* "GS" */
    RSLOT_LARGE = 1,
    RSLOT_BIG = 2,
    RSLOT_SPILLS = 4,
    RBIG_SIZE = 8192,                           /* a big block: one request past a slot */
    RSLOT_MAX_COUNT = RSLOT_PAYLOAD / 8,        /* every entry takes >= 8 bytes */
    RREQ_HDR = 16,
    RREQ_LONG_HDR = 24,
    RREQ_FIDX_INLINE = 0xff,
    RRESP_HDR = 8,
};

/* Request kinds. */
enum {
    RK_USER = 0,        /* run fn on the property */
    RK_SUB = 1,         /* env u64: subtract a trust's weight (drop) */
    RK_ADD = 2,         /* env u64: add weight (refill of an exhausted clone) */
    RK_LAUNCH = 3,      /* env: u64 token, then the user's env; run fn in a fiber */
    RK_LAUNCH_DONE = 4, /* to the launch's client: env {u64 token, i32 status, u32 0}, args = result */
    RK_LAST = RK_LAUNCH_DONE,
};
#define RRET_VAR UINT32_MAX

static inline size_t rpad8(size_t n) { return (n + 7) & ~(size_t)7; }

typedef struct rslot_view {
    const uint8_t *block;
    uint16_t offset, count;
    uint8_t nfn, flags;
    uint32_t large_len;
    uint64_t seq;
    uint32_t fn[RSLOT_FNCACHE];
} rslot_view_t;

typedef struct rreq {
    uint8_t kind;
    uint32_t fn_id;
    uint32_t handle;
    uint32_t ret_size;  /* RRET_VAR: variable */
    const uint8_t *env;
    size_t env_len;
    const uint8_t *args;
    size_t args_len;
} rreq_t;

typedef struct rresp {
    dsm_status_t status;
    int spilled;            /* data NULL: it comes by message (RSPILL) or is in the big block */
    int big;                /* spilled into the batch's big block (len <= RBIG_SIZE) */
    const uint8_t *data;
    size_t len;
} rresp_t;

/* Size of a request encoded with a cached (short) or inline (long) id. */
static inline size_t rreq_size(int inline_id, size_t env_len, size_t args_len)
{
    return (inline_id ? RREQ_LONG_HDR : RREQ_HDR) + rpad8(env_len) + rpad8(args_len);
}
/* Encode at dst (room checked by the caller); returns the size. */
size_t dsm_rreq_encode(uint8_t *dst, uint8_t fidx, uint32_t fn_id, uint8_t kind, uint32_t handle,
                       uint32_t ret_size, const void *env, size_t env_len, const void *args, size_t args_len);
/* Decode one request at p with `avail` bytes left in the payload; fn/nfn is
 * the batch's id cache. *used gets its size. DSM_ERR_PROTO if it does not fit
 * or names a cache entry past nfn or an unknown kind. */
dsm_status_t dsm_rreq_decode(const uint8_t *p, size_t avail, const uint32_t *fn, unsigned nfn, rreq_t *out,
                             size_t *used);

size_t dsm_rresp_encode(uint8_t *dst, dsm_status_t status, const void *data, size_t len);
/* An entry for a response of len bytes sent by message (8 bytes). */
size_t dsm_rresp_encode_spilled(uint8_t *dst, size_t len, int big);
dsm_status_t dsm_rresp_decode(const uint8_t *p, size_t avail, rresp_t *out, size_t *used);

/* Write the trailer (block bytes [960, 1016)) at `at`. */
void dsm_rslot_trailer_encode(uint8_t *at, uint16_t offset, uint16_t count, const uint32_t *fn, uint8_t nfn,
                              uint8_t flags, uint32_t large_len);
/* Check a whole block's trailer (len must be RSLOT_SIZE): offset 8-aligned
 * and <= 960, count <= RSLOT_MAX_COUNT, nfn <= 8, magic, a large batch has
 * count 1 and no payload. Does not look at the entries. */
dsm_status_t dsm_rslot_decode(const uint8_t *block, size_t len, rslot_view_t *out);

/* --- messages ------------------------------------------------------------ */
/* Slot write over tcp (deleg's "emulated put"): header then the block's
 * bytes [RSLOT_SEQ_AT - len, RSLOT_SEQ_AT); the target copies them into the
 * block at region offset `block_off` and then stores seq (release). `run`
 * is the writer's run count: a write of a run the target has recovered from
 * arrives late and is dropped. */
enum { RPUT_HDR = 24, RPUT_MAGIC = 0x54555047 /* "GPUT" */ };
typedef struct rput {
    uint32_t block_off;
    uint32_t run;
    uint64_t seq;
    const uint8_t *bytes;
    size_t len;
} rput_t;
void dsm_rput_encode_hdr(uint8_t *dst, uint32_t block_off, uint32_t len, uint32_t run, uint64_t seq);
dsm_status_t dsm_rput_decode(const void *msg, size_t len, rput_t *out);

/* What does not fit a slot travels by message, keyed by (pair, seq, index):
 * a request too large for a slot (the request in long form; its batch is a
 * flagged, empty one) or a response that does not fit its response slot
 * (the response's data; its entry in the slot has RRESP_SPILLED). `run` as
 * in a slot write. */
enum { RLARGE_HDR = 32, RLARGE_MAGIC = 0x47524c47 /* "GLRG" */, RSPILL_MAGIC = 0x50535247 /* "GRSP" */ };
typedef struct rlarge {
    int resp;               /* a spilled response, else a large request */
    uint32_t trustee, client;
    uint32_t index;         /* the response's index in its batch (0 for a request) */
    uint32_t run;
    uint64_t seq;
    const uint8_t *bytes;
    size_t len;
} rlarge_t;
void dsm_rlarge_encode_hdr(uint8_t *dst, int resp, uint32_t trustee, uint32_t client, uint32_t index,
                           uint32_t run, uint64_t seq);
dsm_status_t dsm_rlarge_decode(const void *msg, size_t len, rlarge_t *out);
/* A response entry whose data came by message: the top bit of its length. */
#define RRESP_SPILLED 0x80000000u
/* With RRESP_SPILLED: the data is in the batch's big block. */
#define RRESP_INBIG 0x40000000u
/* The longest response (the length's top two bits are flags). */
#define RRESP_MAX_LEN 0x3fffffffu

/* Reply to the termination probe: {magic, idle, sent, served, runs, phase,
 * lost}: whether the node is quiet, its remote requests published and served
 * (since attach or the last recover), how many runs it has started, its phase (RPHASE_*) and
 * the rank + 1 of the node whose death ended that run (0: none). */
enum { RTERM_LEN = 40, RTERM_MAGIC = 0x4d524554 /* "TERM" */ };
typedef struct rterm {
    uint32_t idle;
    uint64_t sent, served;
    uint64_t runs;
    uint32_t phase, lost;
} rterm_t;
void dsm_rterm_encode(uint8_t *dst, const rterm_t *t);
dsm_status_t dsm_rterm_decode(const void *msg, size_t len, rterm_t *out);

/* Reply to a board request: {magic, phase, runs, tag, len, 0} then len
 * bytes: the node's notice board for a run (tag: its run count when the
 * board was set, RBOARD_NONE before any) and where its runs are. */
enum { RBOARD_HDR = 32, RBOARD_MAX = 4096, RBOARD_MAGIC = 0x44524f42 /* "BORD" */ };
#define RBOARD_NONE UINT64_MAX
typedef struct rboard {
    uint32_t phase;
    uint64_t runs, tag;
    const uint8_t *bytes;
    size_t len;
} rboard_t;
void dsm_rboard_encode_hdr(uint8_t *dst, const rboard_t *b);
dsm_status_t dsm_rboard_decode(const void *msg, size_t len, rboard_t *out);

/* An exported trust: {magic, rank, u16 trustee, u16 exporter, handle, u64
 * weight}: the trustee's node, thread and property handle, the node whose
 * share of the weight the trust's weight was (the trustee's node counts it
 * there until an importer tells it otherwise, RMOVE) and the weight. */
enum { RTRUST_LEN = 24, RTRUST_MAGIC = 0x32525447 /* "GTR2" */ };
typedef struct rtrust {
    uint32_t rank, trustee, exporter, handle;
    uint64_t weight;
} rtrust_t;
void dsm_rtrust_encode(uint8_t *dst, const rtrust_t *t);
dsm_status_t dsm_rtrust_decode(const void *msg, size_t len, rtrust_t *out);

/* A trust's weight moves from one node's share to another's, on the
 * trustee's node: {magic, u16 trustee, u16 from, handle, u16 to + 1, u16 0,
 * u64 weight}. `to` is the sender (RMOVE_TO_SENDER, 0 on the wire) for an
 * import, the named importer for an export to it (it must not have been
 * written off: the move is then refused); the reply carries only a status. */
enum { RMOVE_LEN = 24, RMOVE_MAGIC = 0x564f4d47 /* "GMOV" */, RMOVE_TO_SENDER = 0xffff };
typedef struct rmove {
    uint32_t trustee, from, handle, to;
    uint64_t weight;
} rmove_t;
void dsm_rmove_encode(uint8_t *dst, const rmove_t *m);
dsm_status_t dsm_rmove_decode(const void *msg, size_t len, rmove_t *out);

#endif
