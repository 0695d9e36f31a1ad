/* The coherent-object operation tables (see coh.h): own and dir map onto
 * their APIs; local is malloc'd memory with CPU atomics, the plain
 * single-process original. The lock tables map onto own's mutexes (both
 * kinds), whose unlock the heap orders after the critical section's writes
 * (a remote write returns once it is in the target's memory). The
 * original's locks are process memory: a pthread mutex, or a spin word. */
#include "apps/coh.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/heap.h"

/* ---- locks: own's mutexes -------------------------------------------------- */

static dsm_status_t deleg_new(dsm_node_t *n, uint64_t *lock) { return dsm_own_mutex_new(n, DSM_OWN_MUTEX_DELEG, lock); }
static dsm_status_t cas_new(dsm_node_t *n, uint64_t *lock) { return dsm_own_mutex_new(n, DSM_OWN_MUTEX_CAS, lock); }
static void mutex_free(dsm_node_t *n, uint64_t lock) { (void)dsm_own_mutex_free(n, lock); }

/* ---- own ---------------------------------------------------------------------- */

static dsm_status_t own_borrow(dsm_node_t *n, uint64_t h, dsm_coh_ref_t *r)
{
    dsm_status_t st = dsm_own_box_borrow(n, h, &r->u.own);
    r->data = r->u.own.data;
    r->size = r->u.own.size;
    return st;
}
static dsm_status_t own_release(dsm_node_t *n, dsm_coh_ref_t *r) { return dsm_own_box_release(n, &r->u.own); }
static dsm_status_t own_borrow_mut(dsm_node_t *n, uint64_t h, dsm_coh_mut_t *m)
{
    dsm_status_t st = dsm_own_box_borrow_mut(n, h, &m->u.own);
    m->data = m->u.own.data;
    m->size = m->u.own.size;
    return st;
}
static dsm_status_t own_release_mut(dsm_node_t *n, dsm_coh_mut_t *m) { return dsm_own_box_release_mut(n, &m->u.own); }
static void own_stats(dsm_node_t *n, dsm_coh_stats_t *out)
{
    dsm_own_stats_t s;
    dsm_own_stats(n, &s);
    *out = (dsm_coh_stats_t){s.messages, s.bytes, s.cache_hits, s.cache_misses, s.moves, s.invalidations, 0,
                             s.evictions, 0};
}

/* Mutex<Box<T>>: lock and borrow in one step, release and unlock in one
 * (a failed borrow gives the lock back). */
static dsm_status_t own_lock_borrow(dsm_node_t *n, uint64_t lock, dsm_coh_ref_t *r)
{
    dsm_status_t st = dsm_own_mutex_lock_borrow(n, lock, &r->guard, &r->u.own);
    r->data = r->u.own.data;
    r->size = r->u.own.size;
    return st;
}
static dsm_status_t own_unlock_release(dsm_node_t *n, dsm_coh_ref_t *r)
{
    return dsm_own_guard_release_unlock(n, &r->guard, &r->u.own);
}
static dsm_status_t own_lock_borrow_mut(dsm_node_t *n, uint64_t lock, dsm_coh_mut_t *m)
{
    dsm_status_t st = dsm_own_mutex_lock_borrow_mut(n, lock, &m->guard, &m->u.own);
    m->data = m->u.own.data;
    m->size = m->u.own.size;
    return st;
}
static dsm_status_t own_unlock_release_mut(dsm_node_t *n, dsm_coh_mut_t *m)
{
    return dsm_own_guard_release_mut_unlock(n, &m->guard, &m->u.own);
}

/* ---- dir ---------------------------------------------------------------------- */

static dsm_status_t dir_borrow(dsm_node_t *n, uint64_t h, dsm_coh_ref_t *r)
{
    dsm_status_t st = dsm_dir_borrow(n, h, &r->u.dir);
    r->data = r->u.dir.data;
    r->size = r->u.dir.size;
    return st;
}
static dsm_status_t dir_release(dsm_node_t *n, dsm_coh_ref_t *r) { return dsm_dir_release(n, &r->u.dir); }
static dsm_status_t dir_borrow_mut(dsm_node_t *n, uint64_t h, dsm_coh_mut_t *m)
{
    dsm_status_t st = dsm_dir_borrow_mut(n, h, &m->u.dir);
    m->data = m->u.dir.data;
    m->size = m->u.dir.size;
    return st;
}
static dsm_status_t dir_release_mut(dsm_node_t *n, dsm_coh_mut_t *m) { return dsm_dir_release_mut(n, &m->u.dir); }
static void dir_stats(dsm_node_t *n, dsm_coh_stats_t *out)
{
    dsm_dir_stats_t s;
    dsm_dir_stats(n, &s);
    *out = (dsm_coh_stats_t){s.messages, s.bytes, s.cache_hits, s.cache_misses, s.moves, s.invalidations,
                             s.held_back, 0, s.chained_round_trips};
}

/* ---- local: the original ------------------------------------------------------ */

typedef struct local_obj {
    size_t size;
    uint8_t data[];
} local_obj_t;

static dsm_status_t local_alloc(dsm_node_t *n, uint32_t type, size_t size, uint64_t *h)
{
    (void)n;
    (void)type;
    local_obj_t *o = calloc(1, sizeof *o + size);
    if (o == NULL)
        return DSM_ERR_NOMEM;
    o->size = size;
    *h = (uint64_t)(uintptr_t)o;
    return DSM_OK;
}
static dsm_status_t local_borrow(dsm_node_t *n, uint64_t h, dsm_coh_ref_t *r)
{
    (void)n;
    local_obj_t *o = (local_obj_t *)(uintptr_t)h;
    r->data = o->data;
    r->size = o->size;
    return DSM_OK;
}
static dsm_status_t local_release(dsm_node_t *n, dsm_coh_ref_t *r)
{
    (void)n;
    (void)r;
    return DSM_OK;
}
static dsm_status_t local_borrow_mut(dsm_node_t *n, uint64_t h, dsm_coh_mut_t *m)
{
    (void)n;
    local_obj_t *o = (local_obj_t *)(uintptr_t)h;
    m->data = o->data;
    m->size = o->size;
    return DSM_OK;
}
static dsm_status_t local_release_mut(dsm_node_t *n, dsm_coh_mut_t *m)
{
    (void)n;
    (void)m;
    return DSM_OK;
}
static dsm_status_t local_drop(dsm_node_t *n, uint64_t h)
{
    (void)n;
    free((void *)(uintptr_t)h);
    return DSM_OK;
}
/* The original's locks: "spin", the default, has own's lock's shape (one
 * exchange to take, a store to give back), so a comparison with own weighs
 * the protocol and not the lock; "local" is a pthread mutex, as a plain C
 * program's hash table takes, reported beside it. */
static dsm_status_t local_lock_new(dsm_node_t *n, uint64_t *lock)
{
    (void)n;
    pthread_mutex_t *m = malloc(sizeof *m);
    if (m == NULL)
        return DSM_ERR_NOMEM;
    pthread_mutex_init(m, NULL);
    *lock = (uint64_t)(uintptr_t)m;
    return DSM_OK;
}
static dsm_status_t local_lock(dsm_node_t *n, uint64_t lock)
{
    (void)n;
    return pthread_mutex_lock((pthread_mutex_t *)(uintptr_t)lock) == 0 ? DSM_OK : DSM_ERR_STATE;
}
static dsm_status_t local_unlock(dsm_node_t *n, uint64_t lock)
{
    (void)n;
    return pthread_mutex_unlock((pthread_mutex_t *)(uintptr_t)lock) == 0 ? DSM_OK : DSM_ERR_STATE;
}
static void local_lock_free(dsm_node_t *n, uint64_t lock)
{
    (void)n;
    pthread_mutex_destroy((pthread_mutex_t *)(uintptr_t)lock);
    free((void *)(uintptr_t)lock);
}
/* The original's spin lock: a word taken by one exchange and given back by
 * one store. Its object's pointer sits beside the word, set only by a
 * "boxed" lock's adoption: the original's Mutex<Box<T>>, whose holder reads
 * the object's address from the lock as own's guarding mutex hands it over.
 * (The two words take the 32 bytes malloc gives the one word anyway.) */
typedef struct spin_lock_obj {
    uint64_t word;
    local_obj_t *obj;   /* "boxed" after adoption; NULL otherwise */
} spin_lock_t;

static dsm_status_t spin_new(dsm_node_t *n, uint64_t *lock)
{
    (void)n;
    spin_lock_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return DSM_ERR_NOMEM;
    *lock = (uint64_t)(uintptr_t)l;
    return DSM_OK;
}
static dsm_status_t spin_lock(dsm_node_t *n, uint64_t lock)
{
    (void)n;
    uint64_t *w = (uint64_t *)(uintptr_t)lock;
    while (__atomic_exchange_n(w, 1, __ATOMIC_ACQUIRE) != 0)
        while (__atomic_load_n(w, __ATOMIC_RELAXED) != 0)
            sched_yield();
    return DSM_OK;
}
static dsm_status_t spin_unlock(dsm_node_t *n, uint64_t lock)
{
    (void)n;
    __atomic_store_n((uint64_t *)(uintptr_t)lock, 0, __ATOMIC_RELEASE);
    return DSM_OK;
}
static void spin_free(dsm_node_t *n, uint64_t lock)
{
    (void)n;
    spin_lock_t *l = (spin_lock_t *)(uintptr_t)lock;
    free(l->obj);
    free(l);
}
/* The workloads adopt only into a lock whose kind guards: for the original,
 * a boxed one. */
static dsm_status_t local_adopt(dsm_node_t *n, uint64_t lock, uint64_t h, uint64_t *guarding_lock)
{
    (void)n;
    spin_lock_t *l = (spin_lock_t *)(uintptr_t)lock;
    if (l->obj != NULL)
        return DSM_ERR_STATE;
    l->obj = (local_obj_t *)(uintptr_t)h;
    *guarding_lock = lock;
    return DSM_OK;
}
/* A boxed lock taken: its object, whose address the lock holds. */
static local_obj_t *boxed_take(dsm_node_t *n, uint64_t lock)
{
    (void)spin_lock(n, lock);
    return ((spin_lock_t *)(uintptr_t)lock)->obj;
}
static dsm_status_t local_lock_borrow(dsm_node_t *n, uint64_t lock, dsm_coh_ref_t *r)
{
    const local_obj_t *o = boxed_take(n, lock);
    r->data = o->data;
    r->size = o->size;
    r->guard.mutex = lock;   /* set alone: the original's borrow writes nothing else */
    return DSM_OK;
}
static dsm_status_t local_unlock_release(dsm_node_t *n, dsm_coh_ref_t *r) { return spin_unlock(n, r->guard.mutex); }
static dsm_status_t local_lock_borrow_mut(dsm_node_t *n, uint64_t lock, dsm_coh_mut_t *m)
{
    local_obj_t *o = boxed_take(n, lock);
    m->data = o->data;
    m->size = o->size;
    m->guard.mutex = lock;
    return DSM_OK;
}
static dsm_status_t local_unlock_release_mut(dsm_node_t *n, dsm_coh_mut_t *m)
{
    return spin_unlock(n, m->guard.mutex);
}

static void local_stats(dsm_node_t *n, dsm_coh_stats_t *out)
{
    (void)n;
    memset(out, 0, sizeof *out);
}

static const dsm_coh_ops_t tables[] = {
    {"own", dsm_own_box_alloc, own_borrow, own_release, own_borrow_mut, own_release_mut, dsm_own_box_drop, own_stats,
     dsm_own_mutex_adopt, own_lock_borrow, own_unlock_release, own_lock_borrow_mut, own_unlock_release_mut},
    {"dir", dsm_dir_alloc, dir_borrow, dir_release, dir_borrow_mut, dir_release_mut, dsm_dir_drop, dir_stats,
     NULL, NULL, NULL, NULL, NULL},
    {"local", local_alloc, local_borrow, local_release, local_borrow_mut, local_release_mut, local_drop,
     local_stats, local_adopt, local_lock_borrow, local_unlock_release, local_lock_borrow_mut,
     local_unlock_release_mut},
};

static const dsm_coh_lock_ops_t lock_tables[] = {
    {"deleg", 0, 1, deleg_new, dsm_own_mutex_lock, dsm_own_mutex_unlock, mutex_free},
    {"cas", 0, 1, cas_new, dsm_own_mutex_lock, dsm_own_mutex_unlock, mutex_free},
    {"local", 1, 0, local_lock_new, local_lock, local_unlock, local_lock_free},
    {"spin", 1, 0, spin_new, spin_lock, spin_unlock, spin_free},
    {"boxed", 1, 1, spin_new, spin_lock, spin_unlock, spin_free},
};

const dsm_coh_lock_ops_t *dsm_coh_locks(const char *name)
{
    for (size_t i = 0; name && i < sizeof lock_tables / sizeof lock_tables[0]; i++)
        if (strcmp(lock_tables[i].name, name) == 0)
            return &lock_tables[i];
    return NULL;
}

const dsm_coh_ops_t *dsm_coh_ops(const char *name)
{
    for (size_t i = 0; name && i < sizeof tables / sizeof tables[0]; i++)
        if (strcmp(tables[i].name, name) == 0)
            return &tables[i];
    return NULL;
}
