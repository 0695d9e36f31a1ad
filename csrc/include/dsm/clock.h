/* The C core's clocks: monotonic time for durations, timeouts and
 * benchmarks (dsm_now_ns/ms/s, dsm_deadline_ns), a thread's CPU time
 * (dsm_thread_cpu_ns), and an absolute
 * CLOCK_REALTIME deadline for pthread_cond_timedwait (whose default clock it
 * is). Timestamps of log lines and memcached's unix times read their own
 * wall clocks on purpose.
 *
 * Part of the SDK, but not in dsm/sdk.h: header-only, it needs POSIX
 * (clock_gettime), so a plugin defines _POSIX_C_SOURCE 200809L (or
 * _GNU_SOURCE) before its first #include and includes dsm/clock.h.
 * libdsm's own files include it as util/clock.h. */
#ifndef DSM_CLOCK_H
#define DSM_CLOCK_H

#include <stdint.h>
#include <time.h>

#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#error "dsm/clock.h needs POSIX: define _POSIX_C_SOURCE 200809L (or _GNU_SOURCE) before any #include"
#endif

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline uint64_t dsm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Milliseconds on CLOCK_MONOTONIC. */
static inline uint64_t dsm_now_ms(void) { return dsm_now_ns() / 1000000u; }

/* Seconds on CLOCK_MONOTONIC, as a double (benchmarks, workload timings). */
static inline double dsm_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Nanoseconds of CPU the calling thread has run (CLOCK_THREAD_CPUTIME_ID):
 * what a benchmark's thread spent, beside the wall time it took. */
static inline uint64_t dsm_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The dsm_now_ns() value timeout_ms milliseconds from now. */
static inline uint64_t dsm_deadline_ns(uint32_t timeout_ms) { return dsm_now_ns() + (uint64_t)timeout_ms * 1000000u; }

/* Sleep *pause_ns, then double it up to max_ns: exponential backoff for a
 * poll (spinning would starve the awaited thread of a small machine's CPU). */
static inline void dsm_backoff_sleep(long *pause_ns, long max_ns)
{
    struct timespec ts = {*pause_ns / 1000000000L, *pause_ns % 1000000000L};
    nanosleep(&ts, NULL);
    if (*pause_ns < max_ns)
        *pause_ns *= 2;
}

/* The CLOCK_REALTIME time timeout_ms milliseconds from now, for
 * pthread_cond_timedwait. */
static inline void dsm_realtime_deadline(struct timespec *ts, uint32_t timeout_ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += timeout_ms / 1000;
    ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

#endif
