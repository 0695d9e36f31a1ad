/* Fibers and the per-thread FIFO scheduler: stacks are mmap'd with a
 * PROT_NONE guard page below them (an overflow faults instead of corrupting a
 * neighbour), switching is the hand-written dsm_deleg_ctx_switch (switch.S),
 * and finished fibers keep their stacks for the next spawn because mmap and
 * mprotect cost microseconds while a launch() wants a fiber in nanoseconds.
 * Every switch goes fiber -> scheduler -> fiber; the scheduler context is the
 * thread's own stack. Sanitizer builds tell TSan/ASan about each switch. */
#include "deleg/fiber.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/log.h"
#include "dsm/api.h"

#ifdef DSM_TSAN
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
#endif
#ifdef DSM_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
void __asan_unpoison_memory_region(const volatile void *addr, size_t size);
#endif

void dsm_deleg_ctx_switch(void **save_sp, void *new_sp);
void dsm_deleg_ctx_trampoline(void);

/* Cached stacks beyond this many are unmapped when a fiber ends. */
#define FIBER_CACHE_MAX 1024

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

void dsm_sched_init(dsm_sched_t *s, size_t stack_size)
{
    memset(s, 0, sizeof *s);
    size_t ps = page_size();
    if (stack_size < 4 * ps) stack_size = 4 * ps;
    s->stack_size = (stack_size + ps - 1) & ~(ps - 1);
#ifdef DSM_TSAN
    s->tsan_sched = __tsan_get_current_fiber();
#endif
}

static void fiber_unmap(dsm_fiber_t *f)
{
#ifdef DSM_TSAN
    if (f->tsan) __tsan_destroy_fiber(f->tsan);
#endif
#ifdef DSM_ASAN
    /* Clear the redzones its last frames left (they never returned): the
     * range may next be mapped for something else (a peer's shared memory),
     * whose accesses would otherwise be reported as stack overflows. */
    __asan_unpoison_memory_region(f->map + page_size(), f->map_len - page_size());
#endif
    munmap(f->map, f->map_len);
    free(f);
}

void dsm_sched_fini(dsm_sched_t *s)
{
    if (s->live) DSM_WARN("deleg", "scheduler finished with %zu live fibers (abandoned)", s->live);
    while (s->live_head) {
        dsm_fiber_t *f = s->live_head;
        s->live_head = f->lnext;
        fiber_unmap(f);
    }
    s->live = 0;
    s->head = s->tail = NULL;
    s->ready = 0;
    while (s->free_list) {
        dsm_fiber_t *f = s->free_list;
        s->free_list = f->next;
        fiber_unmap(f);
    }
    s->free_count = 0;
}

/* Switch from the current context to `to` (a fiber, or the scheduler when to
 * is NULL). `dying` tells ASan the old stack's fake frames can go. */
static void switch_to(dsm_sched_t *s, void **save, dsm_fiber_t *to, void *to_sp, int dying)
{
#ifdef DSM_TSAN
    __tsan_switch_to_fiber(to ? to->tsan : s->tsan_sched, 0);
#endif
#ifdef DSM_ASAN
    void *fake = NULL;
    if (to)
        __sanitizer_start_switch_fiber(dying ? NULL : &fake, to->map + page_size(),
                                       to->map_len - page_size());
    else
        __sanitizer_start_switch_fiber(dying ? NULL : &fake, s->asan_sched_bottom, s->asan_sched_size);
#else
    (void)dying;
    (void)to;
#endif
    dsm_deleg_ctx_switch(save, to_sp);
#ifdef DSM_ASAN
    /* Back here: whoever switched to us started the switch. When the
     * scheduler resumes, learn its own stack bounds from the fiber side. */
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    (void)s;
}

static void fiber_entry(dsm_fiber_t *f)
{
    dsm_sched_t *s = f->sched;
#ifdef DSM_ASAN
    __sanitizer_finish_switch_fiber(NULL, &s->asan_sched_bottom, &s->asan_sched_size);
#endif
    f->fn(f->arg);
    f->dead = 1;
    s->cur = NULL;
    void *dummy;
    switch_to(s, &dummy, NULL, s->sched_sp, 1);
    __builtin_unreachable();
}

/* Lay out the initial frame that dsm_deleg_ctx_switch pops (see switch.S). */
static void ctx_init(dsm_fiber_t *f)
{
    uintptr_t top = (uintptr_t)(f->map + f->map_len) & ~(uintptr_t)15;
#ifdef DSM_ASAN
    /* A reused stack still carries the redzones of the frames its last fiber
     * died in (they never returned to unpoison them). */
    __asan_unpoison_memory_region(f->map + page_size(), f->map_len - page_size());
#endif
#if defined(__x86_64__)
    /* [mxcsr|fpucw][r15][r14][r13][r12][rbx][rbp][ret]; after the pops and the
     * ret, rsp = top - 16, so the trampoline's call sees an aligned stack. */
    uint64_t *sp = (uint64_t *)(top - 80);
    uint32_t ctrl[2] = {0x1F80, 0x037F};
    memcpy(&sp[0], ctrl, sizeof ctrl);
    sp[1] = 0;                          /* r15 */
    sp[2] = 0;                          /* r14 */
    sp[3] = (uint64_t)(uintptr_t)fiber_entry; /* r13: entry */
    sp[4] = (uint64_t)(uintptr_t)f;     /* r12: the fiber */
    sp[5] = 0;                          /* rbx */
    sp[6] = 0;                          /* rbp: end of frame chain */
    sp[7] = (uint64_t)(uintptr_t)dsm_deleg_ctx_trampoline;
    f->sp = sp;
#elif defined(__aarch64__)
    uint64_t *sp = (uint64_t *)(top - 160);
    memset(sp, 0, 160);
    sp[0] = (uint64_t)(uintptr_t)f;           /* x19 */
    sp[1] = (uint64_t)(uintptr_t)fiber_entry; /* x20 */
    sp[10] = 0;                               /* x29 */
    sp[11] = (uint64_t)(uintptr_t)dsm_deleg_ctx_trampoline; /* x30 */
    f->sp = sp;
#endif
}

static void enqueue(dsm_sched_t *s, dsm_fiber_t *f)
{
    f->next = NULL;
    if (s->tail) s->tail->next = f;
    else s->head = f;
    s->tail = f;
    s->ready++;
}

dsm_status_t dsm_sched_spawn(dsm_sched_t *s, void (*fn)(void *), void *arg)
{
    dsm_fiber_t *f = s->free_list;
    if (f) {
        s->free_list = f->next;
        s->free_count--;
    } else {
        f = calloc(1, sizeof *f);
        if (!f) return DSM_ERR_NOMEM;
        size_t ps = page_size();
        f->map_len = s->stack_size + ps;
        f->map = mmap(NULL, f->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (f->map == MAP_FAILED) {
            free(f);
            return DSM_ERR_NOMEM;
        }
        /* The guard page: stacks grow down, so it sits at the lowest address. */
        if (mprotect(f->map, ps, PROT_NONE) != 0) {
            munmap(f->map, f->map_len);
            free(f);
            return DSM_ERR_NOMEM;
        }
#ifdef DSM_TSAN
        f->tsan = __tsan_create_fiber(0);
#endif
    }
    f->sched = s;
    f->fn = fn;
    f->arg = arg;
    f->dead = 0;
    ctx_init(f);
    s->live++;
    f->lprev = NULL;
    f->lnext = s->live_head;
    if (s->live_head) s->live_head->lprev = f;
    s->live_head = f;
    enqueue(s, f);
    return DSM_OK;
}

size_t dsm_sched_run(dsm_sched_t *s, size_t max)
{
    size_t n = 0;
    while (n < max && s->head) {
        dsm_fiber_t *f = s->head;
        s->head = f->next;
        if (!s->head) s->tail = NULL;
        s->ready--;
        s->cur = f;
        switch_to(s, &s->sched_sp, f, f->sp, 0);
        s->cur = NULL;
        n++;
        if (f->dead) {
            s->live--;
            if (f->lprev) f->lprev->lnext = f->lnext;
            else s->live_head = f->lnext;
            if (f->lnext) f->lnext->lprev = f->lprev;
            if (s->free_count < FIBER_CACHE_MAX) {
                f->next = s->free_list;
                s->free_list = f;
                s->free_count++;
            } else {
                fiber_unmap(f);
            }
        }
    }
    return n;
}

void dsm_sched_block(dsm_sched_t *s)
{
    dsm_fiber_t *f = s->cur;
    s->cur = NULL;
    switch_to(s, &f->sp, NULL, s->sched_sp, 0);
}

void dsm_sched_yield(dsm_sched_t *s)
{
    enqueue(s, s->cur);
    dsm_sched_block(s);
}

void dsm_sched_wake(dsm_sched_t *s, dsm_fiber_t *f) { enqueue(s, f); }
