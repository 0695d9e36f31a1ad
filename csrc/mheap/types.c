/* The type table: validation, the wire form and field queries. */
#include "mheap/types.h"

#include <stdlib.h>
#include <string.h>

#include "mheap/layout.h"

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* One type from raw fields; 0 if it is refused. Offsets are sorted into t. */
static int one(uint32_t payload, uint32_t nrefs, const uint32_t *offs, uint32_t max_obj, dsm_mheap_tinfo_t *t)
{
    if (payload == 0 || max_obj < DSM_MHEAP_OBJ_HDR || payload > max_obj - DSM_MHEAP_OBJ_HDR ||
        nrefs > DSM_MHEAP_MAX_REFS)
        return 0;
    uint32_t size = (DSM_MHEAP_OBJ_HDR + payload + 7u) & ~7u;
    if (size > max_obj)
        return 0;
    t->size = size;
    t->nrefs = nrefs;
    for (uint32_t i = 0; i < nrefs; i++) {
        if (offs[i] % 8 != 0 || offs[i] > payload || payload - offs[i] < 8)
            return 0;
        t->refs[i] = offs[i];
    }
    qsort(t->refs, nrefs, sizeof t->refs[0], cmp_u32);
    /* Aligned 8-byte fields overlap exactly when two offsets are equal. */
    for (uint32_t i = 1; i < nrefs; i++)
        if (t->refs[i] == t->refs[i - 1])
            return 0;
    return 1;
}

dsm_status_t dsm_mheap_types_build(const dsm_mheap_type_t *types, uint32_t n, uint32_t max_obj,
                                   dsm_mheap_types_t *out)
{
    if (types == NULL || n == 0 || n > DSM_MHEAP_MAX_TYPES)
        return DSM_ERR_INVALID;
    out->n = n;
    for (uint32_t i = 0; i < n; i++) {
        if (types[i].nrefs > 0 && types[i].ref_offsets == NULL)
            return DSM_ERR_INVALID;
        if (!one(types[i].size, types[i].nrefs, types[i].ref_offsets, max_obj, &out->t[i]))
            return DSM_ERR_INVALID;
    }
    return DSM_OK;
}

void dsm_mheap_types_encode(const dsm_mheap_types_t *t, dsm_writer_t *w)
{
    dsm_write_u32(w, t->n);
    for (uint32_t i = 0; i < t->n; i++) {
        dsm_write_u32(w, t->t[i].size - DSM_MHEAP_OBJ_HDR);
        dsm_write_u32(w, t->t[i].nrefs);
        for (uint32_t j = 0; j < t->t[i].nrefs; j++)
            dsm_write_u32(w, t->t[i].refs[j]);
    }
}

dsm_status_t dsm_mheap_types_decode(dsm_reader_t *r, uint32_t max_obj, dsm_mheap_types_t *out)
{
    uint32_t n = dsm_take_u32(r);
    if (!r->ok || n == 0 || n > DSM_MHEAP_MAX_TYPES)
        return DSM_ERR_PROTO;
    out->n = n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t payload = dsm_take_u32(r), nrefs = dsm_take_u32(r);
        if (!r->ok || nrefs > DSM_MHEAP_MAX_REFS)
            return DSM_ERR_PROTO;
        uint32_t offs[DSM_MHEAP_MAX_REFS];
        for (uint32_t j = 0; j < nrefs; j++)
            offs[j] = dsm_take_u32(r);
        if (!r->ok || !one(payload, nrefs, offs, max_obj, &out->t[i]))
            return DSM_ERR_PROTO;
    }
    return DSM_OK;
}

int dsm_mheap_types_covers_ref(const dsm_mheap_tinfo_t *t, uint32_t off, uint32_t len)
{
    for (uint32_t i = 0; i < t->nrefs; i++)
        if (t->refs[i] < (uint64_t)off + len && off < t->refs[i] + 8u)
            return 1;
    return 0;
}

int dsm_mheap_types_is_ref(const dsm_mheap_tinfo_t *t, uint32_t off)
{
    for (uint32_t i = 0; i < t->nrefs; i++)
        if (t->refs[i] == off)
            return 1;
    return 0;
}
