/* memcached: the delegation server (the dsm-memcached program) vs stock
 * memcached, each its own process with 2 worker threads and eviction on
 * (64 MB, both servers' default), under the same load generator. A sweep of
 * connections {4, 16, 64} x requests in flight per connection {1, 8, 32};
 * two headlines as the median of interleaved runs (--runs, default 5): 8 x
 * 32 (pipelined, memcached_zipf_w5) and 16 x 1 (how most clients talk: one
 * request at a time, memcached_zipf_w5_depth1), each with the server CPU
 * per request of both (/server_cpu) and, per run, how many connections each
 * of our workers held (env *_connections_per_worker) and what each command
 * cost it in hand-offs, wake-ups and polls (env *_per_command); and once with a
 * working set above the memory limit (4 MB), where both servers evict as
 * they serve. The two headline shapes run again with 1 worker each
 * (*_1worker, against memcached -t 1), where no command waits on another
 * worker. The load generator is one thread with every connection on its
 * epoll set, as an outside client machine would be. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/driver.h"
#include "bench/trust/loadgen.h"
#include "bench/trust/trust.h"

/* The dsm-memcached program: beside this one (build dir, the package's
 * bin/), or $DSM_DELEG_MEMCACHED. */
const char *mc_deleg_path(char *buf, size_t cap)
{
    const char *env = getenv("DSM_DELEG_MEMCACHED");
    if (env) return env;
    return dsm_bench_sibling("dsm-memcached", buf, cap);
}

int mc_server_start(int deleg, const char *prog, unsigned workers, unsigned memory_mb, const char *progress,
                    server_t *s)
{
    s->port = free_port();
    char port[16], mem[16], threads[16];
    snprintf(port, sizeof port, "%u", s->port);
    snprintf(mem, sizeof mem, "%u", memory_mb);
    snprintf(threads, sizeof threads, "%u", workers);
    fflush(stdout); /* or the child's copy of the buffer is printed again */
    s->pid = fork();
    if (s->pid < 0) return -1;
    if (s->pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        if (deleg) {
            /* --progress last, left off (NULL ends the list) when not asked */
            char *argv[] = {(char *)prog, "--port", port, "--workers", threads, "--shards", "64", "--memory", mem,
                            progress ? "--progress" : NULL, (char *)progress, NULL};
            execv(prog, argv);
        } else if (geteuid() == 0) /* memcached refuses to run as root without -u */
            execl(prog, prog, "-p", port, "-U", "0", "-l", "127.0.0.1", "-t", threads, "-m", mem, "-c", "4096",
                  "-u", "root", (char *)NULL);
        else
            execl(prog, prog, "-p", port, "-U", "0", "-l", "127.0.0.1", "-t", threads, "-m", mem, "-c", "4096",
                  (char *)NULL);
        _exit(127);
    }
    return 0; /* the load generator retries its connects until the server listens */
}

void mc_server_stop(server_t *s)
{
    if (s->pid <= 0) return;
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

/* One headline: the median of interleaved runs, which server goes first
 * alternating so a change in the host's load falls on both alike; with
 * each run the server CPU per request of both, and how many of the run's
 * connections each of our workers held. */
static void headline(dsm_report_t *r, const char *name, const char *anchor, unsigned conns, unsigned depth,
                     const server_t *stock, const server_t *deleg, uint32_t nkeys, double secs)
{
    double sv[MAX_HEADLINE_RUNS], dv[MAX_HEADLINE_RUNS], ratio[MAX_HEADLINE_RUNS];
    double scpu[MAX_HEADLINE_RUNS], dcpu[MAX_HEADLINE_RUNS];
    double per[LG_COUNTERS][MAX_HEADLINE_RUNS]; /* our server's counters per command, each run */
    const int runs = headline_runs;
    char load[32], key[128], split[MAX_HEADLINE_RUNS * (LG_MAX_WORKERS * 6 + 4) + 4];
    size_t sl = 0;
    printf("%s: %u connections x %u in flight, one client thread, %d interleaved runs, load %s\n",
           name, conns, depth, runs, dsm_report_loadavg(load, sizeof load));
    snprintf(key, sizeof key, "%s_loadavg", name);
    dsm_report_env(r, key, "%s", load[0] ? load : "null");
    sl += (size_t)snprintf(split + sl, sizeof split - sl, "[");
    for (int k = 0; k < runs; k++) {
        lg_probe_t sp = {.server = stock->pid}, dp = {.server = deleg->pid, .want_split = 1};
        if (k % 2 == 0) {
            sv[k] = loadgen(stock->port, conns, depth, nkeys, secs, &sp);
            dv[k] = loadgen(deleg->port, conns, depth, nkeys, secs, &dp);
        } else {
            dv[k] = loadgen(deleg->port, conns, depth, nkeys, secs, &dp);
            sv[k] = loadgen(stock->port, conns, depth, nkeys, secs, &sp);
        }
        ratio[k] = sv[k] > 0 ? dv[k] / sv[k] : 0;
        scpu[k] = sp.cpu_us_per_req;
        dcpu[k] = dp.cpu_us_per_req;
        char who[LG_MAX_WORKERS * 6 + 4];
        size_t wl = 0;
        sl += (size_t)snprintf(split + sl, sizeof split - sl, "%s[", k ? "," : "");
        for (unsigned w = 0; w < dp.workers; w++) {
            wl += (size_t)snprintf(who + wl, sizeof who - wl, "%s%u", w ? "/" : "", dp.split[w]);
            sl += (size_t)snprintf(split + sl, sizeof split - sl, "%s%u", w ? "," : "", dp.split[w]);
        }
        sl += (size_t)snprintf(split + sl, sizeof split - sl, "]");
        if (!dp.workers) snprintf(who, sizeof who, "?");
        for (int q = 0; q < LG_COUNTERS; q++) per[q][k] = dp.per_command[q];
        printf("  run %d: stock %8.1f kops %5.2f us/req   deleg %8.1f kops %5.2f us/req   ratio %5.2f   "
               "connections per worker %s   per command: handed off %.2f, wake-ups %.2f, blocking polls %.2f\n",
               k, sv[k] / 1e3, scpu[k], dv[k] / 1e3, dcpu[k], ratio[k], who, per[LG_HANDED_OFF][k],
               per[LG_WAKEUPS][k], per[LG_BLOCKING_POLLS][k]);
    }
    snprintf(split + sl, sizeof split - sl, "]");
    snprintf(key, sizeof key, "%s_connections_per_worker", name);
    dsm_report_env(r, key, "%s", split);
    /* where our server's time per command goes besides the sockets:
       the hand-offs to the other worker's shards, the wake-ups they
       and their answers cost, the sleeps in epoll */
    static const struct { int counter; const char *name; } counted[] = {
        {LG_HANDED_OFF, "handed_off"}, {LG_WAKEUPS, "wakeups"}, {LG_POLLS, "polls"},
        {LG_BLOCKING_POLLS, "blocking_polls"}};
    for (size_t q = 0; q < sizeof counted / sizeof counted[0]; q++) {
        snprintf(key, sizeof key, "%s_%s_per_command", name, counted[q].name);
        dsm_report_env_spread(r, key, per[counted[q].counter], (size_t)runs);
    }
    for (int k = 0; k < runs; k++) sv[k] /= 1e3, dv[k] /= 1e3;
    dsm_report_add_runs(r, name, dv, sv, (size_t)runs, "kops/s", anchor, 1);
    double lo, hi;
    dsm_report_range(ratio, (size_t)runs, &lo, &hi);
    printf("  ratio per run: median %.2f (%.2f-%.2f)\n", dsm_report_median(ratio, (size_t)runs), lo, hi);
    snprintf(key, sizeof key, "%s/server_cpu", name);
    dsm_report_add_runs(r, key, dcpu, scpu, (size_t)runs, "us/req", anchor, 0);
}

void bench_memcached(dsm_report_t *r)
{
    printf("\n== memcached, 2 worker threads each, zipf keys, 5%% writes, 32 B values, eviction on (64 MB), "
           "both servers their own process, same load generator ==\n");
    const char *mc = getenv("DSM_MEMCACHED") ? getenv("DSM_MEMCACHED") : "/usr/bin/memcached";
    char buf[PATH_MAX];
    const char *dm = mc_deleg_path(buf, sizeof buf);
    if (access(mc, X_OK) != 0 || !dm || access(dm, X_OK) != 0) {
        printf("(memcached skipped: need %s and %s)\n", mc, dm ? dm : "dsm-memcached");
        return;
    }
    uint32_t nkeys = quick ? 10000 : 100000;
    double secs = quick ? 0.5 : 2.0;
    server_t stock, deleg;
    if (mc_server_start(0, mc, 2, 64, NULL, &stock) != 0 || mc_server_start(1, dm, 2, 64, NULL, &deleg) != 0) {
        mc_server_stop(&stock);
        printf("(memcached skipped: cannot start the servers)\n");
        return;
    }
    /* the sweep: one run per point */
    static const unsigned conns[] = {4, 16, 64}, depths[] = {1, 8, 32};
    printf("%-24s %12s %12s %8s\n", "connections x depth", "stock(kops)", "deleg(kops)", "ratio");
    for (size_t i = 0; i < sizeof conns / sizeof conns[0]; i++)
        for (size_t j = 0; j < sizeof depths / sizeof depths[0]; j++) {
            double s = loadgen(stock.port, conns[i], depths[j], nkeys, secs, NULL);
            double d = loadgen(deleg.port, conns[i], depths[j], nkeys, secs, NULL);
            char name[64];
            snprintf(name, sizeof name, "%u x %u", conns[i], depths[j]);
            printf("%-24s %12.1f %12.1f %8.2f\n", name, s / 1e3, d / 1e3, s > 0 ? d / s : 0);
            snprintf(name, sizeof name, "memcached_zipf_w5_c%u_d%u", conns[i], depths[j]);
            dsm_report_add(r, name, d / 1e3, "kops/s", MC_STOCK, s / 1e3, 1);
        }
    /* The headlines, 2 workers each: 8 x 32 (pipelined) and 16 x 1 (how
     * most clients talk). */
    headline(r, "memcached_zipf_w5", MC_STOCK, 8, 32, &stock, &deleg, nkeys, secs);
    headline(r, "memcached_zipf_w5_depth1", MC_STOCK, 16, 1, &stock, &deleg, nkeys, secs);
    mc_server_stop(&stock);
    mc_server_stop(&deleg);
    /* The same with 1 worker each: no command waits on another worker, so
     * what the 2-worker rows lose beside these is the hand-off. */
    if (mc_server_start(0, mc, 1, 64, NULL, &stock) == 0 && mc_server_start(1, dm, 1, 64, NULL, &deleg) == 0) {
        headline(r, "memcached_zipf_w5_1worker", MC_STOCK_T1, 8, 32, &stock, &deleg, nkeys, secs);
        headline(r, "memcached_zipf_w5_depth1_1worker", MC_STOCK_T1, 16, 1, &stock, &deleg, nkeys, secs);
    }
    mc_server_stop(&stock);
    mc_server_stop(&deleg);
    /* a working set above the memory limit: both evict while they serve */
    if (mc_server_start(0, mc, 2, 4, NULL, &stock) == 0 && mc_server_start(1, dm, 2, 4, NULL, &deleg) == 0) {
        uint32_t big = nkeys * 4; /* ~100 B per item: several times 4 MB */
        double s = loadgen(stock.port, 8, 32, big, secs, NULL), d = loadgen(deleg.port, 8, 32, big, secs, NULL);
        printf("%-24s %12.1f %12.1f %8.2f  (8 x 32, %u keys, 4 MB)\n", "working set > memory", s / 1e3, d / 1e3,
               s > 0 ? d / s : 0, big);
        dsm_report_add(r, "memcached_zipf_w5_evicting", d / 1e3, "kops/s", MC_STOCK, s / 1e3, 1);
    }
    mc_server_stop(&stock);
    mc_server_stop(&deleg);
}
