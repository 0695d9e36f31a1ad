/* own's per-node counters (messages, bytes, hits, ...): the sum a reader
 * sees of the shared row and the thread slots' rows (util/tslot.h owns the
 * slots; own_count in internal.h adds to them). */
#include <stddef.h>

#include "own/internal.h"

uint64_t own_counter(own_node_t *o, int which)
{
    return dsm_tslot_sum(o->slot, sizeof o->slot[0], o->c, offsetof(own_counts_t, v) + (size_t)which * sizeof(uint64_t));
}

void own_count_slow(own_node_t *o, int which, uint64_t n)
{
    unsigned s = dsm_tslot();   /* takes a slot at the thread's first count */
    if (s <= OWN_COUNT_SLOTS)
        dsm_tslot_add(&o->slot[s - 1].v[which], n);
    else
        __atomic_fetch_add(&o->c[which], n, __ATOMIC_RELAXED);
}
