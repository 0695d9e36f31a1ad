/* Layouts of own's objects and owner records in global memory, and their
 * checked decoders. */
#include "own/object.h"

#include <string.h>

#include "dsm/heap.h"
#include "util/bytes.h"

void own_obj_header_encode(const own_obj_header_t *h, uint8_t out[OWN_OBJ_HEADER])
{
    dsm_put_u32(out, OWN_OBJ_MAGIC);
    dsm_put_u32(out + 4, h->type);
    dsm_put_u64(out + 8, h->size);
}

dsm_status_t own_obj_header_decode(const void *data, size_t len, own_obj_header_t *out)
{
    memset(out, 0, sizeof *out);
    if (data == NULL || len < OWN_OBJ_HEADER)
        return DSM_ERR_BAD_ADDR;
    const uint8_t *p = data;
    if (dsm_get_u32(p) != OWN_OBJ_MAGIC)
        return DSM_ERR_BAD_ADDR;
    out->type = dsm_get_u32(p + 4);
    out->size = dsm_get_u64(p + 8);
    if (out->type == 0 || out->type > OWN_MAX_TYPE || out->size > OWN_MAX_SIZE)
        return DSM_ERR_BAD_ADDR;
    return DSM_OK;
}

void own_record_encode(const own_record_t *r, uint8_t out[OWN_REC_SIZE])
{
    dsm_put_u64(out + OWN_REC_G, r->g);
    dsm_put_u64(out + OWN_REC_BORROW, r->borrow);
    dsm_put_u64(out + OWN_REC_TAG, own_record_tag(r->gen));
    dsm_put_u64(out + OWN_REC_META, ((uint64_t)r->type << 40) | (r->size & OWN_MAX_SIZE));
}

/* Word i of a record the caller has just stored word by word: read as one
 * word. Left to itself the compiler joins the first two into one 16-byte
 * load, which store forwarding cannot serve from two 8-byte stores, and
 * the stall dominates reading a local record. A relaxed atomic load is a plain load that is never joined. */
static inline uint64_t word_at(const uint64_t *w, size_t i) { return __atomic_load_n(&w[i], __ATOMIC_RELAXED); }

dsm_status_t own_record_from_words(const uint64_t w[OWN_REC_SIZE / 8], uint16_t gen, own_record_t *out)
{
    memset(out, 0, sizeof *out);
    uint64_t tag = word_at(w, OWN_REC_TAG / 8);
    if (tag != own_record_tag(gen) || gen == 0)
        return DSM_ERR_BAD_ADDR;
    out->g = word_at(w, OWN_REC_G / 8);
    out->borrow = word_at(w, OWN_REC_BORROW / 8);
    out->gen = gen;
    uint64_t meta = word_at(w, OWN_REC_META / 8);
    out->type = (uint32_t)(meta >> 40);
    out->size = meta & OWN_MAX_SIZE;
    if (out->type == 0)
        return DSM_ERR_BAD_ADDR;
    if (out->g != 0 && dsm_gaddr_offset(out->g) == 0)
        return DSM_ERR_BAD_ADDR;
    return DSM_OK;
}

dsm_status_t own_record_decode(const void *data, size_t len, uint16_t gen, own_record_t *out)
{
    memset(out, 0, sizeof *out);
    if (data == NULL || len < OWN_REC_SIZE)
        return DSM_ERR_BAD_ADDR;
    uint64_t w[OWN_REC_SIZE / 8];
    for (size_t i = 0; i < OWN_REC_SIZE / 8; i++)
        w[i] = dsm_get_u64((const uint8_t *)data + 8 * i);
    return own_record_from_words(w, gen, out);
}
