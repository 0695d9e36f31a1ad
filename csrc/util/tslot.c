/* The thread slots behind per-thread counter rows (tslot.h): the free mask,
 * the pthread key whose destructor gives a slot back at thread exit, and the
 * high-water mark readers sum up to. */
#include "tslot.h"

#include <pthread.h>

_Thread_local unsigned dsm_tslot_cur;

static uint64_t free_slots = ~0ull;   /* bit i: slot i is free */
static unsigned high;                  /* slots ever taken are below it */
static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static int slot_key_ok;

_Static_assert(DSM_TSLOTS == 64, "the free mask is one 64-bit word");

/* At thread exit, in the exiting thread: its later counts (other
 * destructors) go to the shared row. */
static void slot_give_back(void *v)
{
    unsigned s = (unsigned)(uintptr_t)v;
    dsm_tslot_cur = DSM_TSLOTS + 1;
    if (s >= 1 && s <= DSM_TSLOTS)
        __atomic_fetch_or(&free_slots, 1ull << (s - 1), __ATOMIC_RELEASE);
}

static void slot_key_make(void) { slot_key_ok = pthread_key_create(&slot_key, slot_give_back) == 0; }

unsigned dsm_tslot_take(void)
{
    (void)pthread_once(&slot_once, slot_key_make);
    uint64_t m = __atomic_load_n(&free_slots, __ATOMIC_RELAXED);
    unsigned s = DSM_TSLOTS + 1;
    while (slot_key_ok && m != 0) {
        uint64_t bit = m & -m;
        if (__atomic_compare_exchange_n(&free_slots, &m, m & ~bit, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            s = (unsigned)__builtin_ctzll(bit) + 1;
            if (pthread_setspecific(slot_key, (void *)(uintptr_t)s) != 0) {
                __atomic_fetch_or(&free_slots, bit, __ATOMIC_RELEASE);
                s = DSM_TSLOTS + 1;
                break;
            }
            /* before this thread's first add, so a reader that sees the add
             * (ordered by whatever made it see it) sums this slot */
            unsigned h = __atomic_load_n(&high, __ATOMIC_RELAXED);
            while (h < s && !__atomic_compare_exchange_n(&high, &h, s, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
                ;
            break;
        }
    }
    dsm_tslot_cur = s;
    return s;
}

unsigned dsm_tslot_high(void) { return __atomic_load_n(&high, __ATOMIC_ACQUIRE); }
