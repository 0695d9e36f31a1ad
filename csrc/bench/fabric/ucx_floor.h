/* The raw-UCX floor of an active-message round trip or stream (ucx_floor.c). */
#ifndef DSM_BENCH_FABRIC_UCX_FLOOR_H
#define DSM_BENCH_FABRIC_UCX_FLOOR_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dsm/clock.h"

/* What a sending thread spent posting a stream's messages, each group's
 * closing round trip left out: its own CPU time and the wall time, over
 * `msgs` messages. CPU well under wall means the sender waited off its
 * core; CPU near wall, that posting itself costs that much. */
typedef struct dsm_bench_post_clock {
    uint64_t cpu_ns, wall_ns, msgs;
} dsm_bench_post_clock_t;

/* Adds to c the posting of `msgs` messages begun at wall0_ns (dsm_now_ns)
 * and cpu0_ns (dsm_thread_cpu_ns), ending now. */
static inline void dsm_bench_post_clock_add(dsm_bench_post_clock_t *c, uint64_t wall0_ns, uint64_t cpu0_ns,
                                            uint64_t msgs)
{
    c->cpu_ns += dsm_thread_cpu_ns() - cpu0_ns;
    c->wall_ns += dsm_now_ns() - wall0_ns;
    c->msgs += msgs;
}

/* µs per round trip of `len` payload bytes (median over `groups` groups of
 * `group`) from the calling process (pinned by the caller) to a forked
 * target pinned to `cpu_target`, over the UCX transports `tls` (the
 * fabric's for the transport measured); -1 on failure. With `delivers`,
 * each side copies out the payload it received and the target echoes it. */
double dsm_bench_ucx_floor_am_us(const char *tls, int cpu_target, size_t len, int group, int groups, int delivers);
/* Messages per second of `len` payload bytes streamed the same way: `groups`
 * groups of `group` messages the target only counts, each group closed by
 * one it answers (not counted); -1 on failure. `posts` (may be NULL) gets
 * the sender's clock over the posts of the timed groups. */
double dsm_bench_ucx_floor_am_rate(const char *tls, int cpu_target, size_t len, int group, int groups,
                                   dsm_bench_post_clock_t *posts);

/* In main() first: the floor's target is this program run with a private
 * flag; returns its exit code, or -1 when argv is not that. */
int dsm_bench_ucx_floor_target_main(int argc, char **argv);
#endif
