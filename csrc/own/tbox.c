/* TBox groups (DRust §4.1.3): members tied to one owner, laid out
 * contiguously in one object (tbox_layout.h), so the group moves to a
 * writer, or into a reader's cache, in one batch: one read for the whole
 * group, one free of the old copy, one owner update. A member's borrow is a
 * borrow of the group (the borrow checks see the group), so a group with a
 * borrowed member cannot be moved or mutably borrowed elsewhere. */
#include <stdlib.h>
#include <string.h>

#include "own/internal.h"
#include "own/tbox_layout.h"
#include "util/log.h"

#define LOG_MOD "own"

dsm_status_t dsm_own_tbox_new(dsm_node_t *node, uint32_t type, uint32_t count, const size_t *sizes, dsm_own_box_t *out)
{
    if (out == NULL)
        return DSM_ERR_INVALID;
    *out = 0;
    uint64_t size = own_tbox_size(count, sizes);
    if (size == 0) {
        DSM_WARN(LOG_MOD, "TBox group of %u members refused: 1..%u members of at most 2^40 bytes", count,
                 OWN_TBOX_MAX);
        return DSM_ERR_INVALID;
    }
    dsm_own_box_t box;
    dsm_status_t st = dsm_own_box_alloc(node, type, (size_t)size, &box);
    if (st != DSM_OK)
        return st;
    dsm_own_mut_t m;
    if ((st = dsm_own_box_borrow_mut(node, box, &m)) != DSM_OK) {
        (void)dsm_own_box_drop(node, box);
        return st;
    }
    own_tbox_layout(m.data, count, sizes);
    if ((st = dsm_own_box_release_mut(node, &m)) != DSM_OK) {
        (void)dsm_own_box_drop(node, box);
        return st;
    }
    *out = box;
    return DSM_OK;
}

static dsm_status_t member_of(const void *payload, size_t len, uint32_t index, dsm_own_box_t group, uint64_t *off,
                              uint64_t *size)
{
    uint32_t count = 0;
    dsm_status_t st = own_tbox_member(payload, len, index, &count, off, size);
    if (st == DSM_ERR_INVALID)
        DSM_WARN(LOG_MOD, "TBox group 0x%llx has %u members, not %u", (unsigned long long)group, count, index + 1);
    else if (st != DSM_OK)
        DSM_WARN(LOG_MOD, "box 0x%llx is not a TBox group", (unsigned long long)group);
    return st;
}

dsm_status_t dsm_own_tbox_borrow(dsm_node_t *node, dsm_own_box_t group, uint32_t member, dsm_own_tbox_ref_t *out)
{
    if (out == NULL)
        return DSM_ERR_INVALID;
    memset(out, 0, sizeof *out);
    dsm_status_t st = dsm_own_box_borrow(node, group, &out->group);
    if (st != DSM_OK)
        return st;
    uint64_t off, size;
    if ((st = member_of(out->group.data, out->group.size, member, group, &off, &size)) != DSM_OK) {
        (void)dsm_own_box_release(node, &out->group);
        return st;
    }
    out->data = (const uint8_t *)out->group.data + off;
    out->size = (size_t)size;
    out->member = member;
    return DSM_OK;
}

dsm_status_t dsm_own_tbox_release(dsm_node_t *node, dsm_own_tbox_ref_t *ref)
{
    if (ref == NULL)
        return DSM_ERR_INVALID;
    ref->data = NULL;
    return dsm_own_box_release(node, &ref->group);
}

dsm_status_t dsm_own_tbox_borrow_mut(dsm_node_t *node, dsm_own_box_t group, uint32_t member, dsm_own_tbox_mut_t *out)
{
    if (out == NULL)
        return DSM_ERR_INVALID;
    memset(out, 0, sizeof *out);
    dsm_status_t st = dsm_own_box_borrow_mut(node, group, &out->group);
    if (st != DSM_OK)
        return st;
    uint64_t off, size;
    if ((st = member_of(out->group.data, out->group.size, member, group, &off, &size)) != DSM_OK) {
        (void)dsm_own_box_release_mut(node, &out->group);
        return st;
    }
    out->data = (uint8_t *)out->group.data + off;
    out->size = (size_t)size;
    out->member = member;
    return DSM_OK;
}

dsm_status_t dsm_own_tbox_release_mut(dsm_node_t *node, dsm_own_tbox_mut_t *mut)
{
    if (mut == NULL)
        return DSM_ERR_INVALID;
    mut->data = NULL;
    return dsm_own_box_release_mut(node, &mut->group);
}

dsm_status_t dsm_own_tbox_member(const dsm_own_tbox_ref_t *whole, uint32_t member, const void **data, size_t *size)
{
    if (whole == NULL || data == NULL || size == NULL || whole->group.data == NULL)
        return DSM_ERR_INVALID;
    uint64_t off, sz;
    dsm_status_t st = member_of(whole->group.data, whole->group.size, member, whole->group.box, &off, &sz);
    *data = st == DSM_OK ? (const uint8_t *)whole->group.data + off : NULL;
    *size = st == DSM_OK ? (size_t)sz : 0;
    return st;
}

dsm_status_t dsm_own_tbox_member_mut(const dsm_own_tbox_mut_t *whole, uint32_t member, void **data, size_t *size)
{
    if (whole == NULL || data == NULL || size == NULL || whole->group.data == NULL)
        return DSM_ERR_INVALID;
    uint64_t off, sz;
    dsm_status_t st = member_of(whole->group.data, whole->group.size, member, whole->group.box, &off, &sz);
    *data = st == DSM_OK ? (uint8_t *)whole->group.data + off : NULL;
    *size = st == DSM_OK ? (size_t)sz : 0;
    return st;
}
