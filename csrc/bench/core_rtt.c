/* The benches' probe of the host: how long one cache line takes to go from
 * one core to another and back. A figure that crosses the two cores (an
 * active message over shm, ucx_perftest's atomics, a loopback socket's
 * buffers) moves several such lines per operation, and on a virtual machine
 * that cost is the host's: where it runs the two virtual CPUs (one cache
 * domain or two) changes within a run, moving ours and the anchor alike by
 * several times. Measured beside a figure, it says which state a
 * repetition was measured in. */
#include "bench/core_rtt.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "bench/busy.h"
#include "bench/report.h"
#include "util/clock.h"

/* Short groups, many of them: on a crowded host either side loses its core
 * now and then, which inflates the one group it falls in, and the median
 * over groups keeps the state of the cores while both run. */
enum { GROUP = 16, GROUPS = 401 };

typedef struct ping {
    _Alignas(64) _Atomic uint64_t line;
    _Alignas(64) double ns[GROUPS];
} ping_t;

typedef struct side {
    ping_t *p;
    int cpu, first;   /* first: the side that starts each round trip and times it */
} side_t;

static void *side_main(void *arg)
{
    side_t *s = arg;
    dsm_bench_pin(s->cpu);   /* unpinned if refused: the probe still ends */
    ping_t *p = s->p;
    uint64_t v = 0;
    for (int g = -1; g < GROUPS; g++) {   /* group -1: the other side starting */
        uint64_t t0 = dsm_now_ns();
        for (int i = 0; i < GROUP; i++, v += 2) {
            if (s->first)
                atomic_store_explicit(&p->line, v + 1, memory_order_release);
            else
                while (atomic_load_explicit(&p->line, memory_order_acquire) != v + 1)
                    ;
            if (s->first)
                while (atomic_load_explicit(&p->line, memory_order_acquire) != v + 2)
                    ;
            else
                atomic_store_explicit(&p->line, v + 2, memory_order_release);
        }
        if (g >= 0 && s->first)
            p->ns[g] = (double)(dsm_now_ns() - t0) / GROUP;
    }
    return NULL;
}

double dsm_bench_core_rtt_ns(int cpu_a, int cpu_b)
{
    static ping_t p;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpu_a == cpu_b || cpu_a < 0 || cpu_b < 0 || cpu_a >= online || cpu_b >= online)
        return -1;   /* one core: each hand-over would wait a time slice */
    atomic_store(&p.line, 0);
    /* the caller is side a for the probe's length, its own affinity kept */
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0)
        return -1;
    side_t a = {&p, cpu_a, 1}, b = {&p, cpu_b, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, side_main, &b) != 0)
        return -1;
    side_main(&a);
    pthread_join(t, NULL);
    sched_setaffinity(0, sizeof mine, &mine);
    return dsm_report_median(p.ns, GROUPS);
}
