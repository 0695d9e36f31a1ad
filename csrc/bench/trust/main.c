/* dsm-bench-trust: the Trust<T> evaluation in miniature (thesis §2.6-2.7) on
 * two threads, every figure beside its anchor measured in the same run:
 *   fetch-and-add over {1..1M} objects, uniform and zipf(1), one `pause` per
 *   critical section: apply / apply_then (shared and dedicated trustees) vs
 *   pthread_mutex, TTAS spinlock, MCS lock and a plain atomic_fetch_add, and
 *   the ceiling the measured `pause` puts on any of them;
 *   latency against offered load (mean, p99.9); the key-value store (8 B keys,
 *   16 B values, 5% writes) vs 512-shard mutex and rwlock tables; and the
 *   delegation memcached server vs stock memcached under one load generator.
 * (The server itself is the dsm-memcached program, csrc/apps/memcached.)
 * This file: options and the report; the benchmarks are bench_*.c, the
 * locks locks.h, the runs lock_run.c and deleg_run.c, the key streams
 * keys.c, the memcached load generator loadgen.c. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/report.h"
#include "bench/trust/trust.h"

int quick;
double dur_s = 0.3;
uint32_t only_objects;

int main(int argc, char **argv)
{
    const char *json = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--objects") && i + 1 < argc) only_objects = (uint32_t)strtoul(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--quick] [--json PATH] [--only faa|latency|kv|memcached] [--objects N]\n",
                    argv[0]);
            return 2;
        }
    }
    dur_s = quick ? 0.12 : 0.5;
    signal(SIGPIPE, SIG_IGN);
    dsm_report_t report;
    dsm_report_init(&report, "trust");
    if (!only || !strcmp(only, "faa")) bench_faa(&report);
    if (!only || !strcmp(only, "latency")) bench_latency(&report);
    if (!only || !strcmp(only, "kv")) bench_kv(&report);
    if (!only || !strcmp(only, "memcached")) bench_memcached(&report);
    dsm_report_env(&report, "threads", "2");
    dsm_report_env(&report, "cpus", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    dsm_report_env(&report, "quick", "%s", quick ? "true" : "false");
    dsm_report_env(&report, "duration_s", "%.3f", dur_s);
    int rc = json && dsm_report_write_json(&report, json) != 0 ? 1 : 0;
    dsm_report_free(&report);
    return rc;
}
