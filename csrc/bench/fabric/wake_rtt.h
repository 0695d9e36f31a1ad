/* The progress comparison's probe of the host's wake-ups (wake_rtt.c): what
 * waking a thread asleep on the other core costs, in time and in CPU. */
#ifndef DSM_BENCH_FABRIC_WAKE_RTT_H
#define DSM_BENCH_FABRIC_WAKE_RTT_H

typedef struct dsm_bench_wake {
    double round_trip_us;   /* two wake-ups: twice the median over the waits that slept of the time
                             * from a turn given to its side running */
    double cpu_us;          /* CPU both threads spent per wake-up (the waker's call, the sleeper's
                             * going to sleep and coming back) */
    double slept;           /* share of the waits that slept (the rest found the word changed) */
} dsm_bench_wake_t;

/* Two threads, the caller pinned to cpu_a for the probe's length and a
 * second one to cpu_b, hand a turn back and forth `rounds` times, each
 * waiting for its turn asleep in a futex, and each giving it only once the
 * other has been waiting a while (so that it sleeps). Returns 0, or -1 (out
 * untouched) if the two are one core, a CPU is not online or the thread
 * could not start. */
int dsm_bench_wake_rtt(int cpu_a, int cpu_b, int rounds, dsm_bench_wake_t *out);

#endif
