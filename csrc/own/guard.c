/* Mutex<Box<T>> (see dsm/own.h): a mutex that owns one box. This file owns
 * adopting a box into a mutex and the borrows a lock holder makes through
 * its guard, which use the address the grant carried instead of an owner
 * record, and hand the new address back with the unlock. */
#include <string.h>

#include "own/internal.h"
#include "util/log.h"
#include "util/test_switch.h"

#define LOG_MOD "own"

dsm_status_t dsm_own_mutex_adopt(dsm_node_t *node, dsm_own_mutex_t m, dsm_own_box_t box, dsm_own_mutex_t *out)
{
    own_node_t *o = own_lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    *out = 0;
    if (o == NULL)
        return DSM_ERR_STATE;
    if (!own_is_local(o, m))
        return DSM_ERR_INVALID;
    own_record_t r;
    /* Check the mutex first: a refusal must leave the box alive. */
    own_grant_t none = {0};
    dsm_status_t st = own_mutex_adopt(o, m, &none, NULL);
    if (st != DSM_OK)
        return st;
    if ((st = own_box_take(o, box, &r)) != DSM_OK)
        return st;
    own_grant_t g = {.g = r.g, .size = r.size, .type = r.type};
    if ((st = own_mutex_adopt(o, m, &g, out)) != DSM_OK) {
        /* Taken meanwhile (adopt before sharing the mutex): do not leak the object. */
        DSM_WARN(LOG_MOD, "mutex 0x%llx was taken while adopting: the box's object is dropped",
                 (unsigned long long)m);
        (void)own_object_free(o, r.g, r.type);
    }
    return st;
}

dsm_status_t dsm_own_mutex_lock_guard(dsm_node_t *node, dsm_own_mutex_t m, dsm_own_guard_t *guard)
{
    own_node_t *o = own_lookup(node);
    if (guard == NULL)
        return DSM_ERR_INVALID;
    own_grant_t g;
    own_bounds_t b;
    if (o == NULL || !own_bounds_get(o, &b) || !own_mutex_lock_local(&b, m, &g)) {
        memset(guard, 0, sizeof *guard);
        if (o == NULL)
            return DSM_ERR_STATE;
        dsm_status_t st = own_mutex_lock_grant(o, m, &g);
        if (st != DSM_OK)
            return st;
    }
    *guard = (dsm_own_guard_t){.mutex = m, .g = g.g, .size = g.size, .type = g.type, .live = 1};
    return DSM_OK;
}

static own_record_t guard_record(const dsm_own_guard_t *guard)
{
    return (own_record_t){.g = guard->g, .type = guard->type, .size = guard->size};
}

/* A header mismatch with a size and type this node remembered for a
 * guarding CAS mutex (the mutex was freed and its address reused): read
 * them again. 1 if they changed (worth a second try). */
static int refresh(own_node_t *o, dsm_own_guard_t *guard, own_record_t *r)
{
    own_grant_t g = {.g = guard->g};
    if (own_mutex_refresh_grant(o, guard->mutex, &g) != DSM_OK || (g.size == guard->size && g.type == guard->type))
        return 0;
    guard->size = g.size;
    guard->type = g.type;
    *r = guard_record(guard);
    return 1;
}

/* A borrow through a guard: the lock held, no mutable borrow live (and for
 * a mutable one, no borrow at all). */
static dsm_status_t guard_check(own_node_t *o, const dsm_own_guard_t *guard, void *out, size_t n, int mut)
{
    if (out == NULL || guard == NULL)
        return DSM_ERR_INVALID;
    memset(out, 0, n);
    if (o == NULL)
        return DSM_ERR_STATE;
    if (!guard->live || guard->mut || (mut && guard->borrows)) {
        DSM_WARN(LOG_MOD, "%s through the guard of mutex 0x%llx refused: %s", mut ? "borrow_mut" : "borrow",
                 (unsigned long long)guard->mutex,
                 !guard->live ? "the lock is not held" : guard->mut ? "it is mutably borrowed" : "it is borrowed");
        return DSM_ERR_STATE;
    }
    return DSM_OK;
}

/* The fast path of a borrow through a guard: a live guard, no mutable
 * borrow through it, its object in this node's memory (bounds b) with the
 * header the grant says (the checks of guard_check and obj_local, inline).
 * NULL: take the slow path, which says why. */
static inline uint8_t *guard_local_in(const own_bounds_t *b, const dsm_own_guard_t *guard, int mut)
{
    if (!guard->live || guard->mut || (mut && guard->borrows))
        return NULL;
    uint8_t *p = own_bounds_at(b, guard->g, OWN_OBJ_HEADER + guard->size);
    return p != NULL && own_obj_header_is(p, guard->type, guard->size) ? p + OWN_OBJ_HEADER : NULL;
}
static inline uint8_t *guard_local(own_node_t *o, const dsm_own_guard_t *guard, int mut)
{
    own_bounds_t b;
    if (o == NULL || guard == NULL || !own_bounds_get(o, &b))
        return NULL;
    return guard_local_in(&b, guard, mut);
}

dsm_status_t dsm_own_guard_borrow(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_ref_t *out)
{
    own_node_t *o = own_lookup(node);
    uint8_t *p = out ? guard_local(o, guard, 0) : NULL;
    if (p != NULL) {
        *out = (dsm_own_ref_t){.g = guard->g, .data = p, .size = (size_t)guard->size, .type = guard->type};
        guard->borrows++;
        own_count(o, C_LOCAL, 1);
        return DSM_OK;
    }
    dsm_status_t st = guard_check(o, guard, out, sizeof *out, 0);
    if (st != DSM_OK)
        return st;
    own_record_t r = guard_record(guard);
    if ((st = own_borrow_at(o, &r, out)) == DSM_ERR_BAD_ADDR && refresh(o, guard, &r))
        st = own_borrow_at(o, &r, out);
    if (st == DSM_OK)
        guard->borrows++;
    return st;
}

dsm_status_t dsm_own_guard_release(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_ref_t *ref)
{
    own_node_t *o = own_lookup(node);
    if (guard == NULL || ref == NULL)
        return DSM_ERR_INVALID;
    if (o == NULL)
        return DSM_ERR_STATE;
    if (ref->data == NULL || guard->borrows == 0) {
        DSM_WARN(LOG_MOD, "release of a guard borrow that is not live (released twice?)");
        return DSM_ERR_STATE;
    }
    dsm_status_t st = ref->cached ? own_cache_release(o->cache, ref->g) : DSM_OK;
    guard->borrows--;
    ref->data = NULL;
    return st;
}

dsm_status_t dsm_own_guard_borrow_mut(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_mut_t *out)
{
    own_node_t *o = own_lookup(node);
    uint8_t *p = out ? guard_local(o, guard, 1) : NULL;
    if (p != NULL) {
        *out = (dsm_own_mut_t){.g = guard->g, .data = p, .size = (size_t)guard->size, .type = guard->type};
        guard->mut = 1;
        return DSM_OK;
    }
    dsm_status_t st = guard_check(o, guard, out, sizeof *out, 1);
    if (st != DSM_OK)
        return st;
    own_record_t r = guard_record(guard);
    if ((st = own_borrow_mut_at(o, &r, out)) == DSM_ERR_BAD_ADDR && refresh(o, guard, &r))
        st = own_borrow_mut_at(o, &r, out);
    if (st != DSM_OK)
        return st;
    if (out->moved) {
        /* The old copy is being freed: the object is here now. */
        guard->g = out->g;
        guard->changed = 1;
    }
    guard->mut = 1;
    return DSM_OK;
}

dsm_status_t dsm_own_guard_release_mut(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_mut_t *mut)
{
    own_node_t *o = own_lookup(node);
    if (guard == NULL || mut == NULL)
        return DSM_ERR_INVALID;
    if (o == NULL)
        return DSM_ERR_STATE;
    if (mut->data == NULL || !guard->mut) {
        DSM_WARN(LOG_MOD, "release_mut of a guard borrow that is not live (released twice?)");
        return DSM_ERR_STATE;
    }
    dsm_gaddr_t g;
    dsm_status_t st = own_mut_finish(o, mut, &g);
    if (st != DSM_OK)
        return st;
    /* DROPMUTREF with the owner in the mutex: the guard learns the new
     * coloured address now, the home with the unlock. */
    guard->g = mut->g = g;
    guard->changed = 1;
    guard->mut = 0;
    mut->data = NULL;
    return DSM_OK;
}

dsm_status_t dsm_own_mutex_unlock_guard(dsm_node_t *node, dsm_own_guard_t *guard)
{
    own_node_t *o = own_lookup(node);
    if (guard == NULL)
        return DSM_ERR_INVALID;
    if (o == NULL)
        return DSM_ERR_STATE;
    if (!guard->live || guard->borrows || guard->mut) {
        DSM_WARN(LOG_MOD, "unlock of mutex 0x%llx refused: %s", (unsigned long long)guard->mutex,
                 !guard->live ? "the guard does not hold it" : "a borrow through the guard is live");
        return DSM_ERR_STATE;
    }
    own_bounds_t b;
    if (own_bounds_get(o, &b) && own_mutex_unlock_local(&b, guard->mutex, guard->g)) {
        guard->live = 0;
        return DSM_OK;
    }
    own_grant_t g = {.g = guard->g, .size = guard->size, .type = guard->type};
    dsm_status_t st = own_mutex_unlock_grant(o, guard->mutex, &g, (int)guard->changed);
    if (st == DSM_OK)
        guard->live = 0;
    return st;
}

/* Lock and borrow in one call (Rust's `*m.lock()`), and release and unlock
 * in one: the same checks and refusals as the four calls, one node lookup
 * each way; for a CAS mutex and its object both here, one swap and a
 * header compare, then a check and a store, the heap's bounds loaded once
 * for the lock word and the object. Everything else is in the *_rest
 * functions, out of line: the fast paths then need no stack frame (the
 * saves and restores of the slow paths' registers were a fifth of what the
 * fused calls executed per kv operation). */
static __attribute__((noinline)) dsm_status_t lock_borrow_rest(dsm_node_t *node, dsm_own_mutex_t m,
                                                               dsm_own_guard_t *guard, dsm_own_ref_t *out, int locked)
{
    if (!locked) {
        dsm_status_t st = dsm_own_mutex_lock_guard(node, m, guard);
        if (st != DSM_OK)
            return st;
    }
    dsm_status_t st = dsm_own_guard_borrow(node, guard, out);
    if (st != DSM_OK)
        (void)dsm_own_mutex_unlock_guard(node, guard);
    return st;
}

dsm_status_t dsm_own_mutex_lock_borrow(dsm_node_t *node, dsm_own_mutex_t m, dsm_own_guard_t *guard,
                                       dsm_own_ref_t *out)
{
    own_node_t *o = own_lookup(node);
    own_grant_t g;
    own_bounds_t b;
    if (o == NULL || guard == NULL || out == NULL || !own_bounds_get(o, &b) || !own_mutex_lock_local(&b, m, &g))
        return lock_borrow_rest(node, m, guard, out, 0);
    *guard = (dsm_own_guard_t){.mutex = m, .g = g.g, .size = g.size, .type = g.type, .live = 1};
    uint8_t *p = guard_local_in(&b, guard, 0);
    if (p == NULL)
        return lock_borrow_rest(node, m, guard, out, 1);
    *out = (dsm_own_ref_t){.g = guard->g, .data = p, .size = (size_t)guard->size, .type = guard->type};
    guard->borrows = 1;
    own_count(o, C_LOCAL, 1);
    return DSM_OK;
}

static __attribute__((noinline)) dsm_status_t release_unlock_rest(dsm_node_t *node, dsm_own_guard_t *guard,
                                                                  dsm_own_ref_t *ref)
{
    dsm_status_t st = dsm_own_guard_release(node, guard, ref);
    dsm_status_t us = dsm_own_mutex_unlock_guard(node, guard);   /* refused while a borrow is live */
    return st != DSM_OK ? st : us;
}

dsm_status_t dsm_own_guard_release_unlock(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_ref_t *ref)
{
    own_node_t *o;
    own_bounds_t b;
    if (guard == NULL || ref == NULL || ref->data == NULL || ref->cached || !guard->live || guard->borrows != 1 ||
        guard->mut || (o = own_lookup(node)) == NULL || !own_bounds_get(o, &b) ||
        !own_mutex_unlock_local(&b, guard->mutex, guard->g))
        return release_unlock_rest(node, guard, ref);
    guard->borrows = 0;
    guard->live = 0;
    ref->data = NULL;
    return DSM_OK;
}

/* The same for a mutable borrow (kv's SET): lock and borrow_mut in one
 * call, release_mut and unlock in one. Locally (a CAS mutex and its object
 * here, not staged) the release is what own_mut_finish does for an object
 * in place, the colour bump, with the new address riding the unlock's
 * store; a colour at its last value (the object moves) or anything else
 * takes the two calls. */
static __attribute__((noinline)) dsm_status_t lock_borrow_mut_rest(dsm_node_t *node, dsm_own_mutex_t m,
                                                                   dsm_own_guard_t *guard, dsm_own_mut_t *out,
                                                                   int locked)
{
    if (!locked) {
        dsm_status_t st = dsm_own_mutex_lock_guard(node, m, guard);
        if (st != DSM_OK)
            return st;
    }
    dsm_status_t st = dsm_own_guard_borrow_mut(node, guard, out);
    if (st != DSM_OK)
        (void)dsm_own_mutex_unlock_guard(node, guard);
    return st;
}

dsm_status_t dsm_own_mutex_lock_borrow_mut(dsm_node_t *node, dsm_own_mutex_t m, dsm_own_guard_t *guard,
                                           dsm_own_mut_t *out)
{
    own_node_t *o = own_lookup(node);
    own_grant_t g;
    own_bounds_t b;
    if (o == NULL || guard == NULL || out == NULL || !own_bounds_get(o, &b) || !own_mutex_lock_local(&b, m, &g))
        return lock_borrow_mut_rest(node, m, guard, out, 0);
    *guard = (dsm_own_guard_t){.mutex = m, .g = g.g, .size = g.size, .type = g.type, .live = 1};
    uint8_t *p = guard_local_in(&b, guard, 1);
    if (p == NULL)
        return lock_borrow_mut_rest(node, m, guard, out, 1);
    *out = (dsm_own_mut_t){.g = guard->g, .data = p, .size = (size_t)guard->size, .type = guard->type};
    guard->mut = 1;
    return DSM_OK;
}

static __attribute__((noinline)) dsm_status_t release_mut_unlock_rest(dsm_node_t *node, dsm_own_guard_t *guard,
                                                                      dsm_own_mut_t *mut)
{
    dsm_status_t st = dsm_own_guard_release_mut(node, guard, mut);
    if (st != DSM_OK)
        return st;   /* still borrowed: the unlock would be refused */
    return dsm_own_mutex_unlock_guard(node, guard);
}

dsm_status_t dsm_own_guard_release_mut_unlock(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_mut_t *mut)
{
    own_node_t *o;
    own_bounds_t b;
    if (guard == NULL || mut == NULL || mut->data == NULL || mut->staged || !guard->live || !guard->mut ||
        guard->borrows != 0 || dsm_gaddr_colour(mut->g) == UINT16_MAX || dsm_test_switch("own_colour") ||
        (o = own_lookup(node)) == NULL || !own_bounds_get(o, &b))
        return release_mut_unlock_rest(node, guard, mut);
    dsm_gaddr_t ng = dsm_gaddr_with_colour(mut->g, (uint16_t)(dsm_gaddr_colour(mut->g) + 1));
    if (!own_mutex_unlock_local(&b, guard->mutex, ng))
        return release_mut_unlock_rest(node, guard, mut);
    own_count(o, C_BUMPS, 1);
    guard->g = mut->g = ng;
    guard->changed = 1;
    guard->mut = 0;
    guard->live = 0;
    mut->data = NULL;
    return DSM_OK;
}
