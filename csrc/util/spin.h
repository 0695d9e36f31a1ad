/* A spin lock for critical sections of a few loads and stores (a channel's
 * ring): one exchange to take it and a plain release store to give it back,
 * where an uncontended pthread mutex costs two atomic read-modify-writes and
 * two calls. A waiter spins on a load, then yields the CPU every 64 tries so
 * a holder that was preempted (2 cores, progress threads) gets to finish. */
#ifndef DSM_UTIL_SPIN_H
#define DSM_UTIL_SPIN_H

#include <sched.h>

#include "util/relax.h"

typedef struct dsm_spin {
    int held;
} dsm_spin_t;

static inline void dsm_spin_lock(dsm_spin_t *s)
{
    unsigned tries = 0;
    while (__atomic_exchange_n(&s->held, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&s->held, __ATOMIC_RELAXED)) {
            if (++tries % 64 == 0)
                sched_yield();
            else
                dsm_cpu_relax();
        }
}

static inline void dsm_spin_unlock(dsm_spin_t *s) { __atomic_store_n(&s->held, 0, __ATOMIC_RELEASE); }

#endif
