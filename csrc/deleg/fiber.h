/* Private: fibers (user-level threads on mmap'd stacks with a guard page) and
 * the per-thread FIFO scheduler that runs them. One scheduler per OS thread;
 * nothing here is shared between threads, so nothing here is atomic. */
#ifndef DSM_DELEG_FIBER_H
#define DSM_DELEG_FIBER_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

typedef struct dsm_fiber dsm_fiber_t;
typedef struct dsm_sched dsm_sched_t;

struct dsm_fiber {
    void *sp;                 /* saved stack pointer while switched out */
    uint8_t *map;             /* mapping: guard page, then the stack */
    size_t map_len;
    void (*fn)(void *);
    void *arg;
    dsm_fiber_t *next;        /* ready queue / free list link */
    dsm_fiber_t *lprev, *lnext; /* the scheduler's live fibers */
    dsm_sched_t *sched;
    int dead;
    void *tsan;               /* TSan fiber context (sanitizer builds) */
    void *asan_fake;          /* ASan fake-stack handle while switched out */
};

struct dsm_sched {
    dsm_fiber_t *cur;         /* running fiber, NULL in the scheduler context */
    void *sched_sp;           /* saved scheduler stack pointer */
    dsm_fiber_t *head, *tail; /* FIFO ready queue */
    size_t ready;
    size_t live;              /* spawned and not finished */
    dsm_fiber_t *live_head;   /* them, so that fini can free what a stopped run abandoned */
    dsm_fiber_t *free_list;   /* finished fibers whose stacks are reused */
    size_t free_count;
    size_t stack_size;
    void *tsan_sched;
    const void *asan_sched_bottom;
    size_t asan_sched_size;
};

void dsm_sched_init(dsm_sched_t *s, size_t stack_size);
/* Frees the cached stacks, and the fibers still live (a run stopped with
 * fibers waiting, as when a node of the application died): their stacks go
 * without unwinding. */
void dsm_sched_fini(dsm_sched_t *s);
/* Create a fiber and append it to the ready queue. */
dsm_status_t dsm_sched_spawn(dsm_sched_t *s, void (*fn)(void *), void *arg);
/* From the scheduler context: run up to max fibers from the ready queue, each
 * until it blocks, yields or ends. Returns how many ran. */
size_t dsm_sched_run(dsm_sched_t *s, size_t max);
/* From a fiber: back to the scheduler; someone must dsm_sched_wake() it. */
void dsm_sched_block(dsm_sched_t *s);
/* From a fiber: to the tail of the ready queue, back to the scheduler. */
void dsm_sched_yield(dsm_sched_t *s);
void dsm_sched_wake(dsm_sched_t *s, dsm_fiber_t *f);

#endif
