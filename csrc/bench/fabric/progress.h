/* dsm-bench-fabric's comparison of the progress modes a tcp target can run
 * (progress.c): adaptive against hybrid and blocking, idle and beside two
 * busy processes. */
#ifndef DSM_BENCH_FABRIC_PROGRESS_H
#define DSM_BENCH_FABRIC_PROGRESS_H

#include "bench/report.h"

/* The workloads compared (the case table's `arg` of its progress figures). */
enum { PROGRESS_FADD, PROGRESS_AM, PROGRESS_FADD_GAP, PROGRESS_FADD_SLOW, PROGRESS_N_WORKLOADS };

/* Runs every workload against a target of each mode, `reps` interleaved
 * rounds of idle then loaded, `quick` with fewer operations; adds the
 * progress_* and host_wake_* figures of the case table to report. The calling process is
 * the initiator, pinned to cpu_initiator; the targets run on cpu_target. */
void dsm_bench_progress_compare(dsm_report_t *report, int reps, int quick, int cpu_initiator, int cpu_target);

#endif
