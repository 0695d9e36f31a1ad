/* dsm-bench-trust: the Trust<T> evaluation in miniature (thesis §2.6-2.7) on
 * two threads, every figure beside its anchor measured in the same run (the
 * case table below names them; --list prints it).
 * (The server itself is the dsm-memcached program, csrc/apps/memcached.)
 * This file: the case table, options and the report; the benchmarks are
 * bench_*.c, the locks locks.h, the runs lock_run.c and deleg_run.c, the key streams
 * keys.c, the memcached load generator loadgen.c. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/driver.h"
#include "bench/report.h"
#include "bench/trust/trust.h"

int quick;
double dur_s = 0.3;
uint32_t only_objects;
int headline_runs = 5;

/* The parts; --only takes a part's name or a figure-name prefix. */
enum { PART_FAA, PART_LATENCY, PART_KV, PART_MEMCACHED, PART_MC_PROGRESS, N_PARTS };
static const struct {
    const char *name;
    void (*run)(dsm_report_t *);
} parts[N_PARTS] = {
    {"faa", bench_faa}, {"latency", bench_latency}, {"kv", bench_kv}, {"memcached", bench_memcached},
    {"memcached_progress", bench_memcached_progress},
};

/* '*' stands for what a run fills in: object counts {1..1M} and uniform or
 * zipf(1) keys, offered loads, the best lock measured. */
#define BEST_LOCK "best_lock(*): the best of pthread_mutex, TTAS spinlock and MCS lock"
static const dsm_bench_case_t cases[] = {
    /* fetch-and-add, one `pause` per critical section: the best delegation
     * (apply / apply_then, shared or dedicated trustee) and each mode */
    {"fetch_add_*obj_*", BEST_LOCK, "Mops/s", 1, PART_FAA, 0},
    {"fetch_add_*obj_*/apply_shared", BEST_LOCK, "Mops/s", 1, PART_FAA, 0},
    {"fetch_add_*obj_*/apply_dedicated", BEST_LOCK, "Mops/s", 1, PART_FAA, 0},
    {"fetch_add_*obj_*/apply_then_shared", BEST_LOCK, "Mops/s", 1, PART_FAA, 0},
    {"fetch_add_*obj_*/apply_then_dedicated", BEST_LOCK, "Mops/s", 1, PART_FAA, 0},
    {"fetch_add_*obj_*/atomic_faa", BEST_LOCK, "Mops/s", 1, PART_FAA, 0},
    /* what any scheme could reach: the measured pause's bound */
    {"fetch_add_*obj_*/pause_ceiling", BEST_LOCK, "Mops/s", 1, PART_FAA, 0},
    {"fetch_add_*obj_*/*_of_ceiling", "pause_ceiling", "Mops/s", 1, PART_FAA, 0},
    /* fairness at one object: the less busy thread's share */
    {"fetch_add_1obj_*_thread_share/*", "an even split", "share", 1, PART_FAA, 0},
    /* latency against offered load, 64 objects */
    {"latency_64obj_*Mops/*_mean", "mutex_mean", "us", 0, PART_LATENCY, 0},
    {"latency_64obj_*Mops/*_p999", "mutex_p999", "us", 0, PART_LATENCY, 0},
    /* the key-value store, 8 B keys, 16 B values, 5% writes */
    {"kv_*_*_w5", "mutex_512shard or rwlock_512shard, the better", "Mops/s", 1, PART_KV, 0},
    /* the delegation memcached server, zipf keys, 5% writes */
    {"memcached_zipf_w5", MC_STOCK, "kops/s", 1, PART_MEMCACHED, 0},
    {"memcached_zipf_w5_depth1", MC_STOCK, "kops/s", 1, PART_MEMCACHED, 0},
    /* the same two with 1 worker each (no hand-offs between workers) */
    {"memcached_zipf_w5*_1worker", MC_STOCK_T1, "kops/s", 1, PART_MEMCACHED, 0},
    /* ... and the server CPU per request behind each of those */
    {"memcached_zipf_w5*/server_cpu", MC_STOCK " (-t as ours)", "us/req", 0, PART_MEMCACHED, 0},
    {"memcached_zipf_w5_c*_d*", MC_STOCK, "kops/s", 1, PART_MEMCACHED, 0},
    {"memcached_zipf_w5_evicting", MC_STOCK, "kops/s", 1, PART_MEMCACHED, 0},
    /* how the server's idle workers wait, idle and beside two busy
     * processes: adaptive (its default) against the better fixed mode */
    {"progress_adaptive_vs_best/*/memcached_depth1", "the better of hybrid and blocking, same runs", "kops/s", 1,
     PART_MC_PROGRESS, 0},
    {"progress_control_vs_best/*/memcached_depth1", "the better of hybrid and blocking, same runs", "kops/s", 1,
     PART_MC_PROGRESS, 0},
    {"progress_hybrid_vs_blocking/*/memcached_depth1", "blocking, same runs", "kops/s", 1, PART_MC_PROGRESS, 0},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

int main(int argc, char **argv)
{
    const char *objects = NULL;
    const dsm_bench_flag_t flags[] = {{"--objects", "N", &objects}};
    dsm_bench_opts_t o;
    int done = dsm_bench_parse(argc, argv, cases, N_CASES, flags, 1, &o);
    if (done >= 0)
        return done;
    quick = o.quick;
    if (objects)
        only_objects = (uint32_t)strtoul(objects, NULL, 10);
    dur_s = quick ? 0.12 : 0.5;
    if (o.runs)
        headline_runs = o.runs < MAX_HEADLINE_RUNS ? o.runs : MAX_HEADLINE_RUNS;
    signal(SIGPIPE, SIG_IGN);
    dsm_report_t report;
    dsm_report_init(&report, "trust");
    /* memcached_progress runs only when --only asks for it: it starts two
     * busy processes on the host for a while */
    for (int p = 0; p < N_PARTS; p++)
        if (o.only ? strcmp(o.only, parts[p].name) == 0 || dsm_bench_run_wanted(&o, cases, N_CASES, p)
                   : p != PART_MC_PROGRESS)
            parts[p].run(&report);
    dsm_report_env(&report, "threads", "2");
    dsm_report_env(&report, "cpus", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    dsm_report_env(&report, "quick", "%s", quick ? "true" : "false");
    dsm_report_env(&report, "duration_s", "%.3f", dur_s);
    int rc = o.json && dsm_report_write_json(&report, o.json) != 0 ? 1 : 0;
    dsm_report_free(&report);
    return rc;
}
