/* The host's state between two cores, which the benches measured on a
 * virtual machine report beside figures that cross them (core_rtt.c). */
#ifndef DSM_BENCH_CORE_RTT_H
#define DSM_BENCH_CORE_RTT_H

/* ns per round trip of one cache line between a thread pinned to `cpu_a`
 * and one pinned to `cpu_b`: the median over groups of the group's mean; -1
 * if the two are one core (each hand-over would be a time slice) or a thread
 * could not start (or a CPU is not online). */
double dsm_bench_core_rtt_ns(int cpu_a, int cpu_b);

#endif
