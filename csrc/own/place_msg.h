/* The wire formats of own's placement and concurrency (spawn.c, chan.c),
 * pure encoders and checked decoders (a peer's bytes are untrusted):
 *
 * A task envelope: the argument bytes of the runtime spawn of "_own.task"
 * (the trampoline that runs an own task where the controller or a box put
 * it); the user's argument bytes follow it.
 *   0 u32 magic "DOWT"  4 u16 version  6 u16 flags (0, or OWN_TASK_FIND
 *         with a box: the target holds the box's record and finds where
 *         its object is, running the task there)
 *   8 u32 task id (the function registry's closure id)
 *  12 u32 origin rank (who spawned it: the target counts the reply there)
 *  16 u64 box (0 for a plain spawn; otherwise a box handle: colour set,
 *         offset nonzero and 8-aligned)                        24 args...
 * A load report (the result of "_own.load"), exactly:
 *   0 u32 magic "DOWL"  4 u32 running own tasks  8 u64 free heap bytes
 * A channel message (handlers DSM_AM_OWN_CHAN_SEND / _RECV; a SEND is a
 * request, or one-way when posted, the others requests):
 *   0 u32 magic "DOWC" 4 u16 version 6 u16 type 8 u32 body length 12 body
 *   SEND  u64 channel, then an item
 *   RECV  u64 channel
 *   FLUSH u64 channel (on the RECV handler): answered after the posted
 *         SENDs that came before it on the same endpoint, with an empty
 *         reply or the oldest item the home refused from the sender on
 *         that channel (the refusal in the reply's status)
 * An item: u64 value, u32 kind, u32 type id, u64 size (24 bytes). Kind 1 is
 * a box in transit, as its owner (DRust's owner is the pointer): value the
 * object's coloured address (offset nonzero), type 1..2^24-1, size at most
 * 2^40-1; kind 2 a plain word, type and size 0. The channel is its home's
 * address with colour OWN_CHAN_COLOUR. A RECV's reply is empty (nothing
 * queued) or an item. */
#ifndef DSM_OWN_PLACE_MSG_H
#define DSM_OWN_PLACE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

enum {
    OWN_TASK_MAGIC = 0x54574f44u,   /* "DOWT" */
    OWN_LOAD_MAGIC = 0x4c574f44u,   /* "DOWL" */
    OWN_CHAN_MAGIC = 0x43574f44u,   /* "DOWC" */
    OWN_PLACE_VERSION = 1,
    OWN_TASK_HEADER = 24,
    OWN_TASK_FIND = 1,
    OWN_LOAD_LEN = 16,
    OWN_CHAN_SEND = 1,
    OWN_CHAN_RECV = 2,
    OWN_CHAN_FLUSH = 3,
    OWN_CHAN_ITEM_LEN = 24,
    OWN_CHAN_MAX_LEN = 12 + 8 + OWN_CHAN_ITEM_LEN,
    OWN_CHAN_BOX = 1,     /* a box's owner: the receiver makes a record for it */
    OWN_CHAN_WORD = 2,
    OWN_CHAN_REC = 3,     /* a box whose record stayed at the sender, retired to a new generation */
    OWN_CHAN_COLOUR = 0xc4a7,
};

typedef struct own_task_hdr {
    uint16_t flags;
    uint32_t task;
    uint32_t origin;
    uint64_t box;
} own_task_hdr_t;

typedef struct own_chan_item {
    uint64_t value;
    uint32_t kind;
    uint32_t type;    /* a box's type id; 0 for a word */
    uint64_t size;    /* a box's payload size; 0 for a word */
} own_chan_item_t;

typedef struct own_chan_msg {
    uint16_t type;
    uint64_t chan;
    own_chan_item_t item;   /* SEND */
} own_chan_msg_t;

void own_task_encode(const own_task_hdr_t *h, uint8_t out[OWN_TASK_HEADER]);
/* DSM_ERR_PROTO unless the header is whole and well formed; *args and
 * *args_len name the user's bytes after it. */
dsm_status_t own_task_decode(const void *data, size_t len, own_task_hdr_t *out, const void **args,
                             size_t *args_len);

/* The 16-byte record {u32 magic, u32 a, u64 b}: the load report
 * (OWN_LOAD_MAGIC, running, free bytes). DSM_ERR_PROTO unless exactly one
 * with that magic. */
void own_pair_encode(uint32_t magic, uint32_t a, uint64_t b, uint8_t out[16]);
dsm_status_t own_pair_decode(uint32_t magic, const void *data, size_t len, uint32_t *a, uint64_t *b);

/* Encode into buf[OWN_CHAN_MAX_LEN]; returns the length (0 for an unknown type). */
size_t own_chan_encode(const own_chan_msg_t *m, uint8_t *buf);
/* DSM_ERR_PROTO unless magic, version, type and exact length are right, the
 * channel carries OWN_CHAN_COLOUR and a nonzero 8-aligned offset, and a
 * SEND's item is well formed. */
dsm_status_t own_chan_decode(const void *data, size_t len, own_chan_msg_t *out);
void own_chan_item_encode(const own_chan_item_t *it, uint8_t out[OWN_CHAN_ITEM_LEN]);
/* A RECV reply's item: DSM_ERR_PROTO unless exactly one well-formed item. */
dsm_status_t own_chan_item_decode(const void *data, size_t len, own_chan_item_t *out);

/* A plausible box handle: colour (generation) set, offset nonzero, 8-aligned. */
int own_box_handle_ok(uint64_t box);

#endif
