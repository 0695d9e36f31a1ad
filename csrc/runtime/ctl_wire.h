/* The control-plane wire format between the coordinator and its members:
 * a 16-byte little-endian header {magic, version, type, length} and one
 * payload per message type. Decoders trust nothing: every length and range is
 * checked, and pointers in decoded messages point into the caller's buffer. */
#ifndef DSM_RUNTIME_CTL_WIRE_H
#define DSM_RUNTIME_CTL_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/node.h"
#include "dsm/runtime.h"
#include "dsm/status.h"
#include "util/bytes.h"

enum {
    DSM_CTL_MAGIC = 0x4c54434du, /* "MCTL" */
    /* 2: member entries carry published values; 3: MEMBER_READY; 4: LEFT;
     * 5: none here, but the fabric's active messages changed (a 16-byte
     * header, version 2): nodes that could not exchange them must not join.
     * Since then a fabric address names its active-message version and the
     * coordinator refuses a joining node of another (coord.c), so a change
     * of the fabric's wire needs no bump here. 6: frames after the
     * handshake are sealed (ctl_seal.h). 7: LEFT is acknowledged
     * (LEFT_ACK), and the leaver waits for its own LEFT. 8: none here, but
     * a spawn's request is answered by an acknowledgement and its result
     * comes as a RESULT message (spawn.c): a node of 7 would wait forever
     * for one from a node of 8, and the other way round. */
    DSM_CTL_VERSION = 9,
    DSM_CTL_HEADER_LEN = 16,
    DSM_CTL_MAX_PAYLOAD = 1 << 20,
    /* A sealed frame's trailer (ctl_seal.h): its length counts in the
     * header's, beside the payload's. */
    DSM_CTL_SEAL_LEN = 8 + 32,
    DSM_CTL_FLAG_SEALED = 1,   /* the header's flags word */
    DSM_CTL_NONCE_LEN = 32,
    DSM_CTL_MAC_LEN = 32,
    DSM_CTL_MAX_ADDR = 64 * 1024,
    DSM_CTL_MAX_REASON = 200,
    /* The largest HELLO payload: mac, nonce, a member entry with the
     * largest address and published values. Before authentication nothing
     * longer is read. */
    DSM_CTL_MAX_HELLO = DSM_CTL_MAC_LEN + DSM_CTL_NONCE_LEN + 12 + DSM_CTL_MAX_ADDR + 2 +
                        DSM_NODE_MAX_VALUES * (1 + DSM_NODE_MAX_KEY + 2) + DSM_NODE_MAX_VALUE_BYTES,
};

typedef enum dsm_ctl_type {
    DSM_CTL_CHALLENGE = 1,    /* coordinator -> member: nonce, the cluster's transport */
    DSM_CTL_HELLO = 2,        /* member -> coordinator: mac, nonce, who I am */
    DSM_CTL_WELCOME = 3,      /* coordinator -> member: your rank, mac, timing */
    DSM_CTL_REFUSE = 4,       /* coordinator -> member: status, reason */
    DSM_CTL_MEMBER = 5,       /* coordinator -> members: a member's table entry */
    DSM_CTL_READY = 6,        /* coordinator -> new member: table sent */
    DSM_CTL_DEAD = 7,         /* coordinator -> members: rank died (or its connection dropped) */
    DSM_CTL_HEARTBEAT = 8,    /* both ways */
    DSM_CTL_BARRIER = 9,      /* daemon -> coordinator: arrived at epoch */
    DSM_CTL_BARRIER_DONE = 10,/* coordinator -> daemons: epoch released */
    DSM_CTL_LEAVE = 11,       /* member -> coordinator: leaving cleanly */
    DSM_CTL_STOP = 12,        /* coordinator -> members: cluster stops */
    DSM_CTL_MEMBER_ACK = 13,  /* member -> coordinator: I can reach that rank now */
    DSM_CTL_TABLE_END = 14,   /* coordinator -> new member: the whole table was sent */
    DSM_CTL_MEMBER_READY = 15,/* coordinator -> members: every member can reach that rank now */
    DSM_CTL_LEFT = 16,        /* coordinator -> members: rank left cleanly (DSM_CTL_LEAVE);
                               * -> the leaver: every member has acknowledged it, go */
    DSM_CTL_LEFT_ACK = 17,    /* member -> coordinator: that rank is gone here, nothing reaches it */
    DSM_CTL_SUSPECT = 18,     /* member -> coordinator: my endpoint to that rank failed */
    DSM_CTL_TYPE_MAX = 18,
} dsm_ctl_type_t;

/* The values a member published (dsm_node_publish), as a list of (key,
 * value) pairs. Keys are 1..DSM_NODE_MAX_KEY bytes without a NUL, distinct
 * within a list; values add up to at most DSM_NODE_MAX_VALUE_BYTES. Decoded
 * lists point into the caller's buffer; dsm_ctl_values_dup makes an owned
 * copy. */
typedef struct dsm_ctl_value {
    const char *key;       /* key_len bytes, not NUL-terminated */
    uint8_t key_len;
    const uint8_t *value;
    uint16_t value_len;
} dsm_ctl_value_t;

typedef struct dsm_ctl_values {
    uint16_t count;
    dsm_ctl_value_t v[DSM_NODE_MAX_VALUES];
} dsm_ctl_values_t;

/* One allocation holding the list and its bytes (free() it); NULL if out of
 * memory. A NULL list gives an empty one. */
dsm_ctl_values_t *dsm_ctl_values_dup(const dsm_ctl_values_t *in);
/* The entry for key (a NUL-terminated string), or NULL. */
const dsm_ctl_value_t *dsm_ctl_values_find(const dsm_ctl_values_t *values, const char *key);
/* DSM_OK if the list is within the bounds above (what the decoder accepts). */
dsm_status_t dsm_ctl_values_check(const dsm_ctl_values_t *values);

/* A member's entry in the cluster table. On the wire (little-endian):
 *   i32 rank, u16 kind, u16 flags, u32 addr_len, addr bytes,
 *   u16 value count, then per value: u8 key_len, key bytes, u16 value_len,
 *   value bytes. */
typedef struct dsm_ctl_member {
    int32_t rank;
    uint16_t kind;
    uint16_t flags;        /* DSM_CTL_MEMBER_* flags below */
    const uint8_t *addr;   /* UCX worker address */
    uint32_t addr_len;
    dsm_ctl_values_t values;
} dsm_ctl_member_t;

/* ACK_WANTED on announcements; READY on table entries of members that every
 * member can already reach (later ones get a DSM_CTL_MEMBER_READY). */
enum { DSM_CTL_MEMBER_ACK_WANTED = 1, DSM_CTL_MEMBER_READY_FLAG = 2 };

typedef struct dsm_ctl_msg {
    uint16_t type;
    union {
        struct { uint8_t nonce[DSM_CTL_NONCE_LEN]; uint16_t transport; } challenge;
        struct {
            uint8_t mac[DSM_CTL_MAC_LEN];
            const uint8_t *body;   /* what the mac covers */
            size_t body_len;
            uint8_t nonce[DSM_CTL_NONCE_LEN];
            dsm_ctl_member_t self;
        } hello;
        struct {
            int32_t rank;
            uint8_t mac[DSM_CTL_MAC_LEN];
            uint32_t heartbeat_ms;
            uint32_t peer_timeout_ms;
        } welcome;
        struct { int32_t status; char reason[DSM_CTL_MAX_REASON + 1]; } refuse;
        dsm_ctl_member_t member;
        struct { uint32_t rank; } dead;   /* also LEFT, LEFT_ACK, MEMBER_ACK and MEMBER_READY */
        struct { uint64_t epoch; int32_t status; } barrier;
    } u;
} dsm_ctl_msg_t;

typedef struct dsm_ctl_header {
    uint16_t version;   /* set whenever the magic matched: a refusal can name it */
    uint16_t type;
    uint32_t length;    /* what follows the header: the payload, and a sealed frame's trailer */
    uint32_t flags;     /* DSM_CTL_FLAG_SEALED */
} dsm_ctl_header_t;

/* The capacity a receive buffer holding len unparsed bytes should have
 * before the next read, for frames of at most max_payload bytes: it grows
 * with the bytes that arrived, never with a length a peer declared. 0 if
 * it can take no more (the peer sent more than a frame can be). */
size_t dsm_ctl_rx_capacity(size_t cap, size_t len, size_t max_payload);

dsm_status_t dsm_ctl_header_decode(const uint8_t *buf, size_t len, dsm_ctl_header_t *out);
/* Decode one payload of a given type. */
dsm_status_t dsm_ctl_decode(uint16_t type, const uint8_t *payload, size_t len, dsm_ctl_msg_t *out);
/* Append header + payload for msg to w. For HELLO, the body is encoded from
 * u.hello.nonce/self and the mac is computed by the caller through mac_fn. */
dsm_status_t dsm_ctl_encode(const dsm_ctl_msg_t *msg, dsm_writer_t *w);
/* The HELLO body (what its mac covers), for the member to sign. */
dsm_status_t dsm_ctl_encode_hello_body(const dsm_ctl_msg_t *msg, dsm_writer_t *w);

#endif
