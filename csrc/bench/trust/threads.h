/* The trust benchmark's two measuring threads: the pause every critical
 * section runs, pinning to cores, a timed run of two pthreads, and how
 * evenly the two shared the work. */
#ifndef DSM_BENCH_TRUST_THREADS_H
#define DSM_BENCH_TRUST_THREADS_H

#include <stdint.h>

static inline void cpu_pause(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Whether to pin benchmark threads (see threads.c). */
int bench_pin(void);
/* Pin the calling thread to the idx-th CPU of the process's affinity mask. */
void pin_thread(unsigned idx);
/* Runs `fn` on two threads over `arg` for dur_s seconds, releasing them
 * through *go and stopping them through *stop; returns the seconds elapsed. */
double run_two_threads(void *(*fn)(void *), void *arg, _Atomic int *go, _Atomic int *stop, double dur_s);
/* The less busy thread's share of the operations two threads did: 0.5 an
 * even split, 0 one thread alone (a lock that one thread keeps taking, a
 * trustee that serves itself before its peer). 0 when neither did any. */
static inline double bench_min_share(const uint64_t ops[2])
{
    uint64_t lo = ops[0] < ops[1] ? ops[0] : ops[1], sum = ops[0] + ops[1];
    return sum ? (double)lo / (double)sum : 0;
}

#endif
