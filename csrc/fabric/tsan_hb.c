/* ThreadSanitizer builds only: the words messages release and acquire on,
 * and the mappings of peers' regions with their owners' addresses, which
 * a CPU atomic through a mapping also releases and acquires at (see
 * tsan_hb.h). The table is read with relaxed loads, never under a lock:
 * a lock every mapped atomic took would order them all for TSan and hide
 * the races it is there to find. */
#include "fabric/tsan_hb.h"

#ifdef DSM_TSAN
#include <pthread.h>

char dsm_fabric_tsan_rank_word[256];

enum { TSAN_MAPS = 256 };
static struct {
    uintptr_t lo, hi, owner;
} maps[TSAN_MAPS];
static pthread_mutex_t maps_writer = PTHREAD_MUTEX_INITIALIZER;

void dsm_fabric_tsan_map_add(const void *mapped, uint64_t len, uint64_t owner_base)
{
    uintptr_t lo = (uintptr_t)mapped;
    pthread_mutex_lock(&maps_writer);
    int at = -1;
    for (int i = 0; i < TSAN_MAPS; i++) {
        uintptr_t l = __atomic_load_n(&maps[i].lo, __ATOMIC_RELAXED);
        if (l == lo || (at < 0 && l == 0))
            at = i;
        if (l == lo)
            break;
    }
    if (at >= 0) {
        __atomic_store_n(&maps[at].hi, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&maps[at].owner, (uintptr_t)owner_base, __ATOMIC_RELAXED);
        __atomic_store_n(&maps[at].lo, lo, __ATOMIC_RELAXED);
        __atomic_store_n(&maps[at].hi, lo + len, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&maps_writer);
}

void dsm_fabric_tsan_map_drop(const void *mapped)
{
    pthread_mutex_lock(&maps_writer);
    for (int i = 0; i < TSAN_MAPS; i++)
        if (__atomic_load_n(&maps[i].lo, __ATOMIC_RELAXED) == (uintptr_t)mapped) {
            __atomic_store_n(&maps[i].hi, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&maps[i].lo, 0, __ATOMIC_RELAXED);
        }
    pthread_mutex_unlock(&maps_writer);
}

void dsm_fabric_tsan_mapped_atomic(const void *mapped, int after)
{
    uintptr_t p = (uintptr_t)mapped;
    for (int i = 0; i < TSAN_MAPS; i++) {
        uintptr_t lo = __atomic_load_n(&maps[i].lo, __ATOMIC_RELAXED),
                  hi = __atomic_load_n(&maps[i].hi, __ATOMIC_RELAXED);
        if (lo != 0 && p >= lo && p < hi) {
            void *owner = (void *)(__atomic_load_n(&maps[i].owner, __ATOMIC_RELAXED) + (p - lo));
            if (after)
                __tsan_acquire(owner);
            else
                __tsan_release(owner);
            return;
        }
    }
}
#else
typedef int dsm_fabric_tsan_hb_unused;   /* ISO C: no empty translation unit */
#endif
