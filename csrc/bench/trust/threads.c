/* The trust benchmark's threads: pinning and the timed two-thread run. */
#include "bench/trust/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"

/* Pin each benchmark thread to its own core when there are enough cores
 * (DSM_BENCH_PIN=0 turns it off, any other value forces it): unpinned, the
 * scheduler may stack both threads on one core, and a polling protocol then
 * advances once per time slice instead of once per microsecond. */
int bench_pin(void)
{
    const char *e = getenv("DSM_BENCH_PIN");
    if (e) return strcmp(e, "0") != 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    return CPU_COUNT(&set) >= 2;
}

void pin_thread(unsigned idx)
{
    cpu_set_t set, one;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    int n = CPU_COUNT(&set);
    if (n <= 0) return;
    int want = (int)(idx % (unsigned)n), seen = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        if (seen++ == want) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            return;
        }
    }
}

double run_two_threads(void *(*fn)(void *), void *arg, _Atomic int *go, _Atomic int *stop, double dur_s)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, fn, arg);
    atomic_store(go, 1);
    double t0 = dsm_now_s();
    usleep((useconds_t)(dur_s * 1e6));
    atomic_store(stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return dsm_now_s() - t0;
}
