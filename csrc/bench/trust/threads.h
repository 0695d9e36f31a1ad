/* The trust benchmark's two measuring threads: the pause every critical
 * section runs, pinning to cores, and a timed run of two pthreads. */
#ifndef DSM_BENCH_TRUST_THREADS_H
#define DSM_BENCH_TRUST_THREADS_H

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

#endif
