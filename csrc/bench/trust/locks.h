/* The locks the trust benchmark compares delegation with: a TTAS spinlock
 * and an MCS queue lock (pthread_mutex and a plain atomic are the others),
 * and the lock-protected counter object they guard. */
#ifndef DSM_BENCH_TRUST_LOCKS_H
#define DSM_BENCH_TRUST_LOCKS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bench/trust/threads.h"

typedef struct { _Atomic int v; } spin_t;
static inline void spin_lock(spin_t *l)
{
    for (;;) {
        while (atomic_load_explicit(&l->v, memory_order_relaxed)) cpu_pause();
        if (!atomic_exchange_explicit(&l->v, 1, memory_order_acquire)) return;
    }
}
static inline void spin_unlock(spin_t *l) { atomic_store_explicit(&l->v, 0, memory_order_release); }

typedef struct mcs_node {
    _Atomic(struct mcs_node *) next;
    _Atomic int locked;
} mcs_node_t;
typedef struct { _Atomic(mcs_node_t *) tail; } mcs_t;
static inline void mcs_lock(mcs_t *l, mcs_node_t *me)
{
    atomic_store_explicit(&me->next, NULL, memory_order_relaxed);
    atomic_store_explicit(&me->locked, 1, memory_order_relaxed);
    mcs_node_t *prev = atomic_exchange_explicit(&l->tail, me, memory_order_acq_rel);
    if (!prev) return;
    atomic_store_explicit(&prev->next, me, memory_order_release);
    while (atomic_load_explicit(&me->locked, memory_order_acquire)) cpu_pause();
}
static inline void mcs_unlock(mcs_t *l, mcs_node_t *me)
{
    mcs_node_t *n = atomic_load_explicit(&me->next, memory_order_acquire);
    if (!n) {
        mcs_node_t *expect = me;
        if (atomic_compare_exchange_strong_explicit(&l->tail, &expect, NULL, memory_order_acq_rel,
                                                    memory_order_relaxed))
            return;
        while (!(n = atomic_load_explicit(&me->next, memory_order_acquire))) cpu_pause();
    }
    atomic_store_explicit(&n->locked, 0, memory_order_release);
}

typedef struct {
    union {
        pthread_mutex_t m;
        spin_t s;
        mcs_t q;
    };
    uint64_t count;
} __attribute__((aligned(64))) lobj_t;

#endif
