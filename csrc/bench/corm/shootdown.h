/* What a block remap costs the other threads of the process that remaps
 * (shootdown.c): the price, on this host, of the interrupts that CoRM's
 * compaction sends to every CPU its server's process runs on, and how
 * many a batch's drop of its pages sends. */
#ifndef DSM_BENCH_CORM_SHOOTDOWN_H
#define DSM_BENCH_CORM_SHOOTDOWN_H

#include <stdint.h>

enum { DSM_SHOOTDOWN_MAX_REPS = 15 };

typedef struct dsm_shootdown {
    int reps;
    /* per repetition: the sibling's µs per pass over its buffer, with the
       remaps in its own process and in another; remaps per second in each */
    double pass_us_same[DSM_SHOOTDOWN_MAX_REPS], pass_us_other[DSM_SHOOTDOWN_MAX_REPS];
    double remaps_per_s_same[DSM_SHOOTDOWN_MAX_REPS], remaps_per_s_other[DSM_SHOOTDOWN_MAX_REPS];
    /* per repetition: the sibling's time lost per remap of its own process,
       beyond what the same remaps from another process cost it, µs */
    double lost_us_per_remap[DSM_SHOOTDOWN_MAX_REPS];
} dsm_shootdown_t;

/* A sibling thread pinned to cpu_sibling walks a 256 KiB buffer while a
 * thread pinned to cpu_remapper remaps 4 KiB pages of a memfd mapping
 * (MAP_FIXED over a page it had touched, as a compaction's merge does, and
 * touches the new one), in the sibling's process, then from a process of
 * its own (the anchor: the same work and cores, no shared address space);
 * `reps` pairs of windows of `window_s`, the order alternating. Measured in
 * a child process, away from the caller's threads. 0, or -1 if the two CPUs
 * are one or a process or thread could not start. */
int dsm_shootdown_measure(int cpu_sibling, int cpu_remapper, int reps, double window_s, dsm_shootdown_t *out);

/* One remapper: the pages of a memfd mapping of its own, each remapped in
 * turn onto another page of the file (MAP_FIXED over a page it had
 * touched) and the new one touched, as a compaction's merge does to a
 * block. open: 0, or -1 (nothing to close); step: one remap, 0 or -1. */
typedef struct dsm_remapper {
    int fd;
    uint8_t *base;
    uint64_t n;   /* remaps done */
} dsm_remapper_t;

int dsm_remapper_open(dsm_remapper_t *r);
int dsm_remapper_step(dsm_remapper_t *r);
void dsm_remapper_close(dsm_remapper_t *r);

/* The host's interrupts between CPUs so far, each summed over every CPU
 * (the "TLB:", "RES:" and "CAL:" rows of /proc/interrupts, read in one
 * pass; 0 where a row is missing). A remap interrupts every CPU its
 * process runs on (TLB shootdowns): a reader in the server's process
 * would pay for each block the server remaps. A wake-up of a thread on
 * another CPU that must run at once is a rescheduling interrupt, and on
 * a virtual machine every interrupt between CPUs is an exit to the host. */
void dsm_host_interrupts(uint64_t *tlb, uint64_t *resched, uint64_t *call);

enum { DSM_DROP_PAGES = 64 };

/* How a batch's pages are best dropped before its remaps: the host's TLB
 * shootdowns per call that drops DSM_DROP_PAGES touched pages of a memfd
 * mapping, every other page of a run, while a sibling thread of the process
 * runs on the other CPU (so every flush must interrupt it): as a list of
 * pages to process_madvise (list_*; -1 where the kernel refuses), and as
 * one madvise over the span that holds them (span_*). Measured in a child
 * process; 0, or -1. */
typedef struct dsm_drop_flushes {
    int reps;
    double list_per_call[DSM_SHOOTDOWN_MAX_REPS], span_per_call[DSM_SHOOTDOWN_MAX_REPS];
} dsm_drop_flushes_t;

int dsm_drop_flushes_measure(int cpu_sibling, int cpu_dropper, int reps, dsm_drop_flushes_t *out);

#endif
