/* How the delegation memcached server's idle workers should wait, measured
 * the way an unpipelined client meets it: 16 connections with one request
 * in flight each (memcached_zipf_w5_depth1's shape), against four servers
 * that differ only in --progress: adaptive (the program's default), hybrid,
 * blocking, and a second blocking one, the control (held against the
 * better fixed mode as adaptive is: what it reads is the comparison's
 * resolution on this host). Each repetition measures every server idle,
 * then beside two busy processes (one pinned on each of the first two
 * cores), the servers' order rotating per repetition so that a drift of
 * the host's load hits every mode alike. Reported: the median over the
 * repetitions of each, beside the better of the two fixed modes, and each
 * server's CPU per request (what a linger costs, or saves: a wake-up). */
#include <limits.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "bench/busy.h"
#include "bench/trust/loadgen.h"
#include "bench/trust/trust.h"

enum { MODES = 4, CONTROL = 3, BUSY = 2, CONNS = 16 };

static const char *const modes[MODES] = {"adaptive", "hybrid", "blocking", "blocking"};
static const char *const target_names[MODES] = {"adaptive", "hybrid", "blocking", "control"};
static const char *const state_names[2] = {"idle", "loaded"};

static void emit(dsm_report_t *r, int s, double kops[MODES][MAX_HEADLINE_RUNS], double cpu[MODES][MAX_HEADLINE_RUNS],
                 int reps)
{
    dsm_report_progress_cell(r, &(dsm_progress_cell_t){.state = state_names[s], .cell = "memcached_depth1",
                                                    .waiter = "workers", .control = "server", .unit = "kops/s",
                                                    .higher = 1, .runs = {kops[0], kops[1], kops[2], kops[CONTROL]},
                                                    .n = (size_t)reps});
    char key[64];
    snprintf(key, sizeof key, "memcached_progress_server_cpu_us_per_req_%s", state_names[s]);
    dsm_report_env(r, key, "{\"adaptive\": %.2f, \"hybrid\": %.2f, \"blocking\": %.2f, \"control\": %.2f}",
                   dsm_report_median(cpu[0], (size_t)reps), dsm_report_median(cpu[1], (size_t)reps),
                   dsm_report_median(cpu[2], (size_t)reps), dsm_report_median(cpu[3], (size_t)reps));
    for (int m = 0; m < MODES; m++) {
        double lo, hi;
        dsm_report_range(kops[m], (size_t)reps, &lo, &hi);
        printf("  %-7s %-8s %8.1f kops/s (%.1f-%.1f), server CPU %.2f us/request\n", state_names[s],
               target_names[m], dsm_report_median(kops[m], (size_t)reps), lo, hi,
               dsm_report_median(cpu[m], (size_t)reps));
    }
}

void bench_memcached_progress(dsm_report_t *r)
{
    printf("\n== memcached at depth 1 (%d connections x 1 in flight, one client thread): how idle workers wait, "
           "idle and beside %d busy processes ==\n", CONNS, BUSY);
    char buf[PATH_MAX];
    const char *dm = mc_deleg_path(buf, sizeof buf);
    if (!dm || access(dm, X_OK) != 0) {
        printf("(memcached progress skipped: need %s)\n", dm ? dm : "dsm-memcached");
        return;
    }
    server_t srv[MODES] = {{0, 0}};
    for (int m = 0; m < MODES; m++)
        if (mc_server_start(1, dm, 2, 64, modes[m], &srv[m]) != 0) {
            printf("(memcached progress skipped: cannot start the servers)\n");
            for (int k = 0; k < m; k++) mc_server_stop(&srv[k]);
            return;
        }
    const uint32_t nkeys = quick ? 10000 : 100000;
    const double secs = quick ? 0.3 : 1.0;
    const int reps = headline_runs;
    static double kops[2][MODES][MAX_HEADLINE_RUNS], cpu[2][MODES][MAX_HEADLINE_RUNS];
    pid_t busy[BUSY] = {0};
    for (int k = 0; k < reps; k++) {
        for (int s = 0; s < 2; s++) {
            if (s == 1) {
                dsm_bench_busy_start(busy, BUSY);
                /* the servers' load samples (every 2 ms) see them first */
                struct timespec ts = {0, 50 * 1000000L};
                nanosleep(&ts, NULL);
            }
            for (int i = 0; i < MODES; i++) {
                int m = (i + k) % MODES;
                lg_probe_t probe = {.server = srv[m].pid};
                kops[s][m][k] = loadgen(srv[m].port, CONNS, 1, nkeys, secs, &probe) / 1e3;
                cpu[s][m][k] = probe.cpu_us_per_req;
            }
            if (s == 1) dsm_bench_busy_stop(busy, BUSY);
        }
        printf("  run %d: idle %.1f/%.1f/%.1f/%.1f  loaded %.1f/%.1f/%.1f/%.1f kops/s "
               "(adaptive/hybrid/blocking/control)\n", k, kops[0][0][k], kops[0][1][k], kops[0][2][k],
               kops[0][3][k], kops[1][0][k], kops[1][1][k], kops[1][2][k], kops[1][3][k]);
        fflush(stdout);
    }
    for (int s = 0; s < 2; s++) emit(r, s, kops[s], cpu[s], reps);
    dsm_report_env(r, "memcached_progress_busy_processes", "%d", BUSY);
    for (int m = 0; m < MODES; m++) mc_server_stop(&srv[m]);
}
