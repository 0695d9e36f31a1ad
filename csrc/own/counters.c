/* own's per-node counters (messages, bytes, hits, ...): the thread slots
 * that let a thread add to them without an atomic instruction, and the sum
 * a reader sees. A thread takes a slot at its first count and gives it
 * back when it exits; a slot's row stays in the sums, and its next holder
 * goes on adding to it (the free mask's atomics order the two holders). */
#include <pthread.h>

#include "own/internal.h"

_Thread_local unsigned own_tslot;

static uint64_t free_slots = ~0ull;   /* bit i: slot i is free (OWN_COUNT_SLOTS == 64) */
static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static int slot_key_ok;

_Static_assert(OWN_COUNT_SLOTS == 64, "the free mask is one 64-bit word");

/* At thread exit, in the exiting thread: its later counts (other
 * destructors) go to the shared row. */
static void slot_give_back(void *v)
{
    unsigned s = (unsigned)(uintptr_t)v;
    own_tslot = OWN_COUNT_SLOTS + 1;
    if (s >= 1 && s <= OWN_COUNT_SLOTS)
        __atomic_fetch_or(&free_slots, 1ull << (s - 1), __ATOMIC_RELEASE);
}

static void slot_key_make(void) { slot_key_ok = pthread_key_create(&slot_key, slot_give_back) == 0; }

unsigned own_count_slot(void)
{
    (void)pthread_once(&slot_once, slot_key_make);
    uint64_t m = __atomic_load_n(&free_slots, __ATOMIC_RELAXED);
    unsigned s = OWN_COUNT_SLOTS + 1;
    while (slot_key_ok && m != 0) {
        uint64_t bit = m & -m;
        if (__atomic_compare_exchange_n(&free_slots, &m, m & ~bit, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            s = (unsigned)__builtin_ctzll(bit) + 1;
            if (pthread_setspecific(slot_key, (void *)(uintptr_t)s) != 0) {
                __atomic_fetch_or(&free_slots, bit, __ATOMIC_RELEASE);
                s = OWN_COUNT_SLOTS + 1;
            }
            break;
        }
    }
    own_tslot = s;
    return s;
}

uint64_t own_counter(own_node_t *o, int which)
{
    uint64_t v = __atomic_load_n(&o->c[which], __ATOMIC_RELAXED);
    for (unsigned s = 0; s < OWN_COUNT_SLOTS; s++)
        v += __atomic_load_n(&o->slot[s].v[which], __ATOMIC_RELAXED);
    return v;
}
