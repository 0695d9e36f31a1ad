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

#include "bench/report.h"
#include "util/clock.h"

/* Short groups, as the core-to-core probe's (core_rtt.c): the median over
 * groups keeps the host's state while both threads run. */
enum { GROUP = 16 };

typedef struct wake_pair {
    _Alignas(64) _Atomic uint32_t turn;   /* odd: side b's turn; even: side a's */
    _Alignas(64) _Atomic uint32_t group_slept;   /* waits of the current group that slept */
    int groups;
    double *us;                           /* per group: µs per round trip */
    uint8_t *all_slept;                   /* per group: every wait in it slept */
} wake_pair_t;

typedef struct wake_side {
    wake_pair_t *p;
    struct wake_side *other;
    int cpu, first;
    _Alignas(64) _Atomic uint32_t waiting;   /* the turn this side waits to see change (UINT32_MAX: none) */
    uint64_t cpu_ns, waits, slept;
} wake_side_t;

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);   /* unpinned if not: the probe still ends */
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleeps until the turn is no longer `was`. A second's timeout only keeps a
 * lost thread from hanging the bench; a wake-up is never lost on a futex. */
static void wait_turn(wake_side_t *s, uint32_t was)
{
    int slept = 0;
    atomic_store_explicit(&s->waiting, was, memory_order_release);
    while (atomic_load_explicit(&s->p->turn, memory_order_acquire) == was) {
        struct timespec second = {1, 0};
        long rc = syscall(SYS_futex, &s->p->turn, FUTEX_WAIT_PRIVATE, was, &second, NULL, 0);
        if (rc == 0 || errno == ETIMEDOUT)
            slept = 1;
    }
    s->waits++;
    s->slept += (uint64_t)slept;
    /* counted once the wait is over, so after the turn that ended it: side
     * a reads the group's count only after its own last wait */
    if (slept)
        atomic_fetch_add_explicit(&s->p->group_slept, 1, memory_order_relaxed);
}

/* Hands the turn over once the other side waits for it, so that it is
 * asleep or about to be: two threads both awake would otherwise catch each
 * other's turns without sleeping at all. */
static void give_turn(wake_side_t *s, uint32_t next)
{
    wake_pair_t *p = s->p;
    for (unsigned spins = 1; atomic_load_explicit(&s->other->waiting, memory_order_acquire) != next - 1; spins++)
        if (spins % 1024 == 0)
            sched_yield();   /* the two on one core (pinning refused): let the other run */
    atomic_store_explicit(&p->turn, next, memory_order_release);
    syscall(SYS_futex, &p->turn, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *side_main(void *arg)
{
    wake_side_t *s = arg;
    pin(s->cpu);
    wake_pair_t *p = s->p;
    uint64_t c0 = thread_cpu_ns();
    uint32_t v = 0;
    for (int g = -1; g < p->groups; g++) {   /* group -1: the warm-up */
        if (s->first)
            atomic_store_explicit(&p->group_slept, 0, memory_order_relaxed);
        uint64_t t0 = dsm_now_ns();
        for (int i = 0; i < GROUP; i++, v += 2) {
            if (s->first) {
                give_turn(s, v + 1);
                wait_turn(s, v + 1);
            } else {
                wait_turn(s, v);
                give_turn(s, v + 2);
            }
        }
        if (g >= 0 && s->first) {
            p->us[g] = (double)(dsm_now_ns() - t0) / 1e3 / GROUP;
            p->all_slept[g] = atomic_load_explicit(&p->group_slept, memory_order_relaxed) == 2 * GROUP;
        }
    }
    s->cpu_ns = thread_cpu_ns() - c0;
    return NULL;
}

int dsm_bench_wake_rtt(int cpu_a, int cpu_b, int rounds, dsm_bench_wake_t *out)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpu_a == cpu_b || cpu_a < 0 || cpu_b < 0 || cpu_a >= online || cpu_b >= online || rounds < GROUP)
        return -1;
    wake_pair_t p = {.groups = rounds / GROUP};
    p.us = calloc((size_t)p.groups, sizeof *p.us);
    p.all_slept = calloc((size_t)p.groups, 1);
    cpu_set_t mine;
    if (p.us == NULL || p.all_slept == NULL || sched_getaffinity(0, sizeof mine, &mine) != 0) {
        free(p.us);
        free(p.all_slept);
        return -1;
    }
    wake_side_t a = {.p = &p, .cpu = cpu_a, .first = 1, .waiting = UINT32_MAX},
                b = {.p = &p, .cpu = cpu_b, .first = 0, .waiting = UINT32_MAX};
    a.other = &b;
    b.other = &a;
    pthread_t t;
    if (pthread_create(&t, NULL, side_main, &b) != 0) {
        free(p.us);
        free(p.all_slept);
        return -1;
    }
    side_main(&a);
    pthread_join(t, NULL);
    sched_setaffinity(0, sizeof mine, &mine);
    /* The groups in which every wait slept: two threads that both stay
     * awake catch each other's turns without sleeping, which is no
     * wake-up; if no group slept throughout, all of them (`slept` says). */
    size_t n = 0;
    for (int g = 0; g < p.groups; g++)
        if (p.all_slept[g])
            p.us[n++] = p.us[g];
    if (n == 0)
        n = (size_t)p.groups;
    uint64_t wakes = 2 * (uint64_t)(p.groups + 1) * GROUP;   /* the warm-up's too, as its CPU is counted */
    *out = (dsm_bench_wake_t){
        .round_trip_us = dsm_report_median(p.us, n),
        .cpu_us = (double)(a.cpu_ns + b.cpu_ns) / 1e3 / (double)wakes,
        .slept = (double)(a.slept + b.slept) / (double)(a.waits + b.waits),
    };
    free(p.us);
    free(p.all_slept);
    return 0;
}
