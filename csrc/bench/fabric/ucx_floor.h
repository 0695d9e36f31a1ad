/* The raw-UCX floor of an active-message round trip on shm (ucx_floor.c). */
#ifndef DSM_BENCH_FABRIC_UCX_FLOOR_H
#define DSM_BENCH_FABRIC_UCX_FLOOR_H

#include <stddef.h>

/* µs per round trip of `len` payload bytes (median over `groups` groups of
 * `group`) from the calling process (pinned by the caller) to a forked
 * target pinned to `cpu_target`; -1 on failure. With `delivers`, each side
 * copies out the payload it received and the target echoes it. */
double dsm_bench_ucx_floor_am_us(int cpu_target, size_t len, int group, int groups, int delivers);
/* Messages per second of `len` payload bytes streamed the same way: `groups`
 * groups of `group` messages the target only counts, each group closed by
 * one it answers (not counted); -1 on failure. */
double dsm_bench_ucx_floor_am_rate(int cpu_target, size_t len, int group, int groups);

#endif
