/* dsm-bench-trust's options, shared by its parts, and its benchmarks: each
 * prints its table and adds its figures to the report. */
#ifndef DSM_BENCH_TRUST_TRUST_H
#define DSM_BENCH_TRUST_TRUST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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
void bench_memcached_progress(dsm_report_t *r);

/* The memcached anchors: stock memcached with as many worker threads as
 * ours, 2 (its name as every row reports it) or 1. */
#define MC_STOCK "stock_memcached_1.6"
#define MC_STOCK_T1 MC_STOCK " -t 1"

/* A memcached server of the benchmark, its own process (bench_memcached.c). */
typedef struct server {
    pid_t pid;
    uint16_t port;
} server_t;
/* The dsm-memcached program: beside this one (build dir, the package's
 * bin/), or $DSM_DELEG_MEMCACHED; NULL if neither. */
const char *mc_deleg_path(char *buf, size_t cap);
/* Starts `prog`, dsm-memcached (deleg; with --progress `progress` unless
 * NULL) or stock memcached, with `workers` worker threads and memory_mb of
 * items. */
int mc_server_start(int deleg, const char *prog, unsigned workers, unsigned memory_mb, const char *progress,
                    server_t *s);
void mc_server_stop(server_t *s);

#endif
