/* The two things own keeps in global memory, their layouts and their pure
 * checked decoders (what a peer's memory says is untrusted input):
 *
 * An object: a 16-byte header then the payload, one heap allocation.
 *   0 u32 magic  4 u32 type id  8 u64 payload size
 * An owner record (the Box): 32 bytes, one heap allocation on the node that
 * holds the box. A dsm_own_box_t is the record's address with the record's
 * generation in the colour bits, so a handle to a dropped or reused record
 * is recognised.
 *   0 u64 object address, coloured (0 once dropped)
 *   8 u64 borrow state: bit 63 a mutable borrow, bits 0..31 shared borrows
 *  16 u64 tag: OWN_REC_MAGIC << 16 | generation
 *  24 u64 type id << 40 | payload size
 * All words little-endian (host order on every supported target). */
#ifndef DSM_OWN_OBJECT_H
#define DSM_OWN_OBJECT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dsm/status.h"

enum {
    OWN_OBJ_HEADER = 16,
    OWN_REC_SIZE = 32,
    OWN_REC_G = 0, OWN_REC_BORROW = 8, OWN_REC_TAG = 16, OWN_REC_META = 24,
};
#define OWN_OBJ_MAGIC 0x4a424f44u              /* "DOBJ" */
#define OWN_REC_MAGIC 0x4345524e574full        /* "OWNREC", 48 bits */
#define OWN_BORROW_MUT (1ull << 63)
#define OWN_MAX_SIZE ((1ull << 40) - 1)        /* payload sizes fit the record's 40 bits */
#define OWN_MAX_TYPE ((1u << 24) - 1)

typedef struct own_obj_header {
    uint32_t type;
    uint64_t size;
} own_obj_header_t;

typedef struct own_record {
    uint64_t g;         /* coloured object address; 0 dropped */
    uint64_t borrow;
    uint16_t gen;
    uint32_t type;
    uint64_t size;
} own_record_t;

void own_obj_header_encode(const own_obj_header_t *h, uint8_t out[OWN_OBJ_HEADER]);
/* DSM_ERR_BAD_ADDR unless the magic is right, the type nonzero and below
 * 2^24 and the size at most OWN_MAX_SIZE. */
dsm_status_t own_obj_header_decode(const void *data, size_t len, own_obj_header_t *out);

/* The local fast paths' header check, one compare: the header's two words
 * against the magic, type and size the record (or grant) says (a valid
 * record's type and size make a valid header; little-endian, as laid out
 * above). */
static inline int own_obj_header_is(const uint8_t *p, uint32_t type, uint64_t size)
{
    uint64_t w0, w1;
    memcpy(&w0, p, 8);
    memcpy(&w1, p + 8, 8);
    return ((w0 ^ ((uint64_t)type << 32 | OWN_OBJ_MAGIC)) | (w1 ^ size)) == 0;
}

/* A record's tag word for generation gen (the layout above). */
static inline uint64_t own_record_tag(uint16_t gen) { return (OWN_REC_MAGIC << 16) | gen; }

void own_record_encode(const own_record_t *r, uint8_t out[OWN_REC_SIZE]);
/* Decode a record read from memory and check it against the handle's
 * generation: DSM_ERR_BAD_ADDR if the tag is not a record's, or is another
 * generation's (a stale or forged handle), or the object address or type is
 * malformed. A dropped record (g 0) decodes fine: the caller says so. */
dsm_status_t own_record_decode(const void *data, size_t len, uint16_t gen, own_record_t *out);
/* The same on the record's four words as loaded (host order, the layout's
 * order): a local record is read word by word with no byte buffer between. */
dsm_status_t own_record_from_words(const uint64_t w[OWN_REC_SIZE / 8], uint16_t gen, own_record_t *out);

#endif
