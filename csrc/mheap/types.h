/* The type table: what every object's header type id means (object size,
 * which payload words are references), its validation, and its wire form
 * (shipped to memory servers in SETUP). Pure: no node, no fabric. */
#ifndef DSM_MHEAP_TYPES_H
#define DSM_MHEAP_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/mheap.h"
#include "util/bytes.h"

typedef struct dsm_mheap_tinfo {
    uint32_t size;          /* whole object: header + payload, rounded to 8 */
    uint32_t nrefs;
    uint32_t refs[DSM_MHEAP_MAX_REFS];   /* payload offsets, ascending */
} dsm_mheap_tinfo_t;

typedef struct dsm_mheap_types {
    uint32_t n;
    dsm_mheap_tinfo_t t[DSM_MHEAP_MAX_TYPES];
} dsm_mheap_types_t;

/* Validate and copy: DSM_ERR_INVALID unless 1..MAX_TYPES types, each with a
 * payload of 1 byte .. max_obj - header, at most MAX_REFS references at
 * 8-aligned offsets inside the payload, no two overlapping. */
dsm_status_t dsm_mheap_types_build(const dsm_mheap_type_t *types, uint32_t n, uint32_t max_obj,
                                   dsm_mheap_types_t *out);

/* Wire: u32 n, then per type u32 payload size, u32 nrefs, u32 offsets[nrefs]. */
void dsm_mheap_types_encode(const dsm_mheap_types_t *t, dsm_writer_t *w);
/* Decode and validate exactly as dsm_mheap_types_build (DSM_ERR_PROTO). */
dsm_status_t dsm_mheap_types_decode(dsm_reader_t *r, uint32_t max_obj, dsm_mheap_types_t *out);

/* 1 if payload bytes [off, off+len) overlap a reference field of type t. */
int dsm_mheap_types_covers_ref(const dsm_mheap_tinfo_t *t, uint32_t off, uint32_t len);
/* 1 if off is one of t's reference offsets. */
int dsm_mheap_types_is_ref(const dsm_mheap_tinfo_t *t, uint32_t off);

#endif
