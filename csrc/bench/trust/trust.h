/* dsm-bench-trust's options, shared by its parts, and its benchmarks: each
 * prints its table and adds its figures to the report. */
#ifndef DSM_BENCH_TRUST_TRUST_H
#define DSM_BENCH_TRUST_TRUST_H

#include <stdint.h>

#include "bench/report.h"

extern int quick;             /* --quick */
extern double dur_s;          /* seconds per timed run */
extern uint32_t only_objects; /* --objects N: one row of the sweep */
enum { MAX_HEADLINE_RUNS = 16 };
extern int headline_runs;     /* --runs N: interleaved runs behind each memcached headline (default 5) */

void bench_faa(dsm_report_t *r);
void bench_latency(dsm_report_t *r);
void bench_kv(dsm_report_t *r);
void bench_memcached(dsm_report_t *r);

#endif
