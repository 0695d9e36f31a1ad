/* The progress comparison's probe of the host: how long waking a thread
 * asleep on the other core takes, and the CPU it costs. A blocking progress
 * thread pays one such wake-up per message it sleeps for, and a blocking
 * client another for the reply; on a virtual machine the wake-up is an
 * inter-processor interrupt the hypervisor delivers, its cost the host's
 * and not the fabric's. Measured in the same runs as the progress modes, it
 * says how much of a blocking round trip is the host's two wake-ups. */
#include "bench/fabric/wake_rtt.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench/busy.h"
#include "bench/report.h"
#include "util/clock.h"

/* How long the side about to give the turn lets the other sleep first: a
 * thread still on its way into the futex, or two threads both awake,
 * would catch the turn without sleeping, which is no wake-up. */
enum { SETTLE_NS = 20000 };

typedef struct wake_pair {
    _Alignas(64) _Atomic uint32_t turn;      /* odd: side b's turn; even: side a's */
    _Alignas(64) _Atomic uint64_t given_ns;  /* when the current turn was given */
} wake_pair_t;

typedef struct wake_side {
    wake_pair_t *p;
    struct wake_side *other;
    int cpu, first, rounds;
    _Alignas(64) _Atomic uint32_t waiting;   /* the turn this side waits to see change (UINT32_MAX: none) */
    double *us;                              /* per wait that slept: µs from the turn given to this side running */
    int n;
    uint64_t cpu_ns, waits, slept;           /* CPU in its waits and wake calls; waits; waits that slept */
} wake_side_t;

/* Sleeps until the turn is no longer `was`, and records how long after the
 * turn was given this side ran again. A second's timeout only keeps a lost
 * thread from hanging the bench; a wake-up is never lost on a futex. */
static void wait_turn(wake_side_t *s, uint32_t was, int record)
{
    int slept = 0;
    uint64_t c0 = dsm_thread_cpu_ns();
    atomic_store_explicit(&s->waiting, was, memory_order_release);
    while (atomic_load_explicit(&s->p->turn, memory_order_acquire) == was) {
        struct timespec second = {1, 0};
        long rc = syscall(SYS_futex, &s->p->turn, FUTEX_WAIT_PRIVATE, was, &second, NULL, 0);
        if (rc == 0 || errno == ETIMEDOUT)
            slept = 1;
    }
    uint64_t now = dsm_now_ns();
    s->cpu_ns += dsm_thread_cpu_ns() - c0;
    s->waits++;
    s->slept += (uint64_t)slept;
    if (slept && record)
        s->us[s->n++] = (double)(now - atomic_load_explicit(&s->p->given_ns, memory_order_relaxed)) / 1e3;
}

/* Hands the turn over once the other side has waited for it SETTLE_NS. */
static void give_turn(wake_side_t *s, uint32_t next)
{
    wake_pair_t *p = s->p;
    for (unsigned spins = 1; atomic_load_explicit(&s->other->waiting, memory_order_acquire) != next - 1; spins++)
        if (spins % 1024 == 0)
            sched_yield();   /* the two on one core (pinning refused): let the other run */
    for (uint64_t until = dsm_now_ns() + SETTLE_NS; dsm_now_ns() < until;)
        ;
    uint64_t c0 = dsm_thread_cpu_ns();
    atomic_store_explicit(&p->given_ns, dsm_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&p->turn, next, memory_order_release);
    syscall(SYS_futex, &p->turn, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    s->cpu_ns += dsm_thread_cpu_ns() - c0;
}

static void *side_main(void *arg)
{
    wake_side_t *s = arg;
    dsm_bench_pin(s->cpu);   /* unpinned if refused: the probe still ends */
    uint32_t v = 0;
    for (int i = -8; i < s->rounds; i++, v += 2) {   /* the first 8: the warm-up */
        if (s->first) {
            give_turn(s, v + 1);
            wait_turn(s, v + 1, i >= 0);
        } else {
            wait_turn(s, v, i >= 0);
            give_turn(s, v + 2);
        }
    }
    return NULL;
}

int dsm_bench_wake_rtt(int cpu_a, int cpu_b, int rounds, dsm_bench_wake_t *out)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpu_a == cpu_b || cpu_a < 0 || cpu_b < 0 || cpu_a >= online || cpu_b >= online || rounds < 1)
        return -1;
    wake_pair_t p = {0};
    wake_side_t a = {.p = &p, .cpu = cpu_a, .first = 1, .rounds = rounds, .waiting = UINT32_MAX},
                b = {.p = &p, .cpu = cpu_b, .first = 0, .rounds = rounds, .waiting = UINT32_MAX};
    a.other = &b;
    b.other = &a;
    a.us = calloc(2 * (size_t)rounds, sizeof *a.us);   /* both sides' samples end up in a's */
    b.us = calloc((size_t)rounds, sizeof *b.us);
    cpu_set_t mine;
    pthread_t t;
    if (a.us == NULL || b.us == NULL || sched_getaffinity(0, sizeof mine, &mine) != 0 ||
        pthread_create(&t, NULL, side_main, &b) != 0) {
        free(a.us);
        free(b.us);
        return -1;
    }
    side_main(&a);
    pthread_join(t, NULL);
    sched_setaffinity(0, sizeof mine, &mine);
    for (int i = 0; i < b.n; i++)
        a.us[a.n++] = b.us[i];
    uint64_t waits = a.waits + b.waits;
    *out = (dsm_bench_wake_t){
        .round_trip_us = a.n ? 2 * dsm_report_median(a.us, (size_t)a.n) : 0,
        .cpu_us = (double)(a.cpu_ns + b.cpu_ns) / 1e3 / (double)waits,
        .slept = (double)(a.slept + b.slept) / (double)waits,
    };
    free(a.us);
    free(b.us);
    return 0;
}
