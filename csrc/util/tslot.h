/* Thread slots for counters: a thread takes one of DSM_TSLOTS slots at its
 * first count and gives it back when it exits. A counter kept as one row per
 * slot has one writer per row (the slot's holder), so adding needs no atomic
 * instruction; threads beyond DSM_TSLOTS add atomically to a shared row. A
 * slot's row keeps its counts when its holder exits; the next holder goes on
 * adding to it (the free mask's atomics order the two holders). Internal. */
#ifndef DSM_UTIL_TSLOT_H
#define DSM_UTIL_TSLOT_H

#include <stddef.h>
#include <stdint.h>

enum { DSM_TSLOTS = 64 };

/* This thread's slot + 1 (0: none taken yet; DSM_TSLOTS + 1: none was free,
 * or the thread is exiting). */
extern _Thread_local unsigned dsm_tslot_cur;
/* Take a slot for this thread (given back at its exit); returns as
 * dsm_tslot_cur. */
unsigned dsm_tslot_take(void);
/* How many slots a reader must sum: every slot below it has been held. */
unsigned dsm_tslot_high(void);

/* This thread's slot + 1, taking one at its first call. */
static inline unsigned dsm_tslot(void)
{
    unsigned s = dsm_tslot_cur;
    return s ? s : dsm_tslot_take();
}

/* Add n to a counter of this thread's row (one writer: a plain add that a
 * concurrent reader sees whole). */
static inline void dsm_tslot_add(uint64_t *p, uint64_t n)
{
    __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* Add n to counter `field` of a per-slot table: rows[slot - 1] for a thread
 * holding a slot, the shared row otherwise. `rows` is an array of
 * DSM_TSLOTS row structs, `shared` one more. */
#define DSM_TSLOT_ADD(rows, shared, field, n)                                        \
    do {                                                                             \
        unsigned dsm_ts_ = dsm_tslot();                                              \
        if (dsm_ts_ <= DSM_TSLOTS)                                                   \
            dsm_tslot_add(&(rows)[dsm_ts_ - 1].field, (uint64_t)(n));                \
        else                                                                         \
            __atomic_fetch_add(&(shared).field, (uint64_t)(n), __ATOMIC_RELAXED);    \
    } while (0)

/* The counter at byte offset `off` of each row of a per-slot table (rows
 * `row_size` bytes apart) plus the shared row's: every held slot's counts. */
static inline uint64_t dsm_tslot_sum(const void *rows, size_t row_size, const void *shared, size_t off)
{
    uint64_t v = __atomic_load_n((const uint64_t *)((const char *)shared + off), __ATOMIC_RELAXED);
    const char *r = (const char *)rows + off;
    for (unsigned s = 0, h = dsm_tslot_high(); s < h; s++, r += row_size)
        v += __atomic_load_n((const uint64_t *)r, __ATOMIC_RELAXED);
    return v;
}

/* Every counter of a per-slot table whose rows are `words` uint64_t each:
 * out[i] = the shared row's word i plus every held slot's. */
static inline void dsm_tslot_sum_rows(uint64_t *out, const void *rows, const void *shared, size_t words)
{
    const uint64_t *sh = shared, *r = rows;
    for (size_t i = 0; i < words; i++)
        out[i] = __atomic_load_n(&sh[i], __ATOMIC_RELAXED);
    for (unsigned s = 0, h = dsm_tslot_high(); s < h; s++, r += words)
        for (size_t i = 0; i < words; i++)
            out[i] += __atomic_load_n(&r[i], __ATOMIC_RELAXED);
}

#endif
