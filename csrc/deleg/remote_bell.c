/* A runtime thread's doorbell (see remote.h): how a thread of a runtime
 * attached to a node sleeps until a slot write for it lands, instead of
 * napping and looking again. The bell is a word in the node's slot area, so
 * over shm the peers that map the area ring it themselves (a shared futex:
 * it works across the processes that map the same memory). Handshake: the sleeper
 * stores 1 and fences, then looks for work once more before it waits; a
 * writer stores the slot's flag and fences, then loads the bell. One of
 * them sees the other's store, so a slot written while the thread falls
 * asleep is either found by its last look or rings it. */
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "deleg/remote.h"

static void futex_wait(_Atomic uint32_t *w, uint32_t val, long timeout_us)
{
    struct timespec ts = {timeout_us / 1000000L, (timeout_us % 1000000L) * 1000L};
    (void)syscall(SYS_futex, (uint32_t *)(uintptr_t)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w)
{
    (void)syscall(SYS_futex, (uint32_t *)(uintptr_t)w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

void dsm_rbell_arm(deleg_thread_t *th)
{
    dsm_deleg_remote_t *R = th->remote->R;
    atomic_store_explicit(rbell_at(R, R->base, th->idx), 1, memory_order_relaxed);
    deleg_full_fence();
}

void dsm_rbell_disarm(deleg_thread_t *th)
{
    dsm_deleg_remote_t *R = th->remote->R;
    atomic_store_explicit(rbell_at(R, R->base, th->idx), 0, memory_order_relaxed);
}

void dsm_rbell_wait(deleg_thread_t *th, long timeout_us)
{
    dsm_deleg_remote_t *R = th->remote->R;
    _Atomic uint32_t *bell = rbell_at(R, R->base, th->idx);
    /* a ring clears the word first: a wake-up before the wait makes it return at once */
    if (atomic_load_explicit(bell, memory_order_acquire)) futex_wait(bell, 1, timeout_us);
    atomic_store_explicit(bell, 0, memory_order_relaxed);
}

static void ring(_Atomic uint32_t *bell)
{
    /* only the ring that finds it armed makes the system call */
    if (atomic_load_explicit(bell, memory_order_relaxed) &&
        atomic_exchange_explicit(bell, 0, memory_order_acq_rel))
        futex_wake(bell);
}

void dsm_rbell_ring_local(dsm_deleg_remote_t *R, unsigned t)
{
    if (!R->bells_off || t >= R->T) return;
    deleg_full_fence();
    ring(rbell_at(R, R->base, t));
}

void dsm_rbell_ring(dsm_deleg_remote_t *R, uint32_t rank, unsigned t)
{
    if (!R->bells_off) return;
    deleg_full_fence();
    uint64_t len = 0;
    uint8_t *base = dsm_fabric_remote_map(R->fabric, rank, DSM_DELEG_REGION, &len);
    /* not mapped now (a fence to order first): the sleeper's timeout covers it */
    if (!base) return;
    if (R->bells_off + (size_t)(t + 1) * RBELL_STRIDE <= len) ring(rbell_at(R, base, t));
    dsm_fabric_remote_unmap(R->fabric, rank, DSM_COUNT_GET, 0, 0);
}
