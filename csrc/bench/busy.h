/* Where a benchmark's processes run: pinning, and busy processes for its
 * loaded state (one spinning process pinned on each of the first n cores,
 * started and stopped by the benchmark, dying with it whatever happens). */
#ifndef DSM_BENCH_BUSY_H
#define DSM_BENCH_BUSY_H

#include <sys/types.h>

enum { DSM_BENCH_BUSY_MAX = 8 };

/* Pin the calling thread (and the threads it starts) to `cpu`; with fewer
 * cores than asked it says so and measures unpinned. */
void dsm_bench_pin(int cpu);
/* Starts n (at most DSM_BENCH_BUSY_MAX) spinners, their pids in pids[]. */
void dsm_bench_busy_start(pid_t *pids, int n);
/* Kills and reaps them; pids[] back to 0. */
void dsm_bench_busy_stop(pid_t *pids, int n);

#endif
