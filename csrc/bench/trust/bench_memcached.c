/* memcached: the delegation server (the dsm-memcached program) vs stock
 * memcached, each its own process with 2 worker threads and eviction on
 * (64 MB, both servers' default), under the same load generator. A sweep of
 * connections {4, 16, 64} x requests in flight per connection {1, 8, 32};
 * two headlines as the median of interleaved runs: 8 x 32 (pipelined,
 * memcached_zipf_w5) and 16 x 1 (how most clients talk: one request at a
 * time, memcached_zipf_w5_depth1); and once with a working set above the
 * memory limit (4 MB), where both servers evict as they serve. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/trust/loadgen.h"
#include "bench/trust/trust.h"

typedef struct server {
    pid_t pid;
    uint16_t port;
} server_t;

/* The dsm-memcached program: beside this one (build dir, the package's
 * bin/), or $DSM_DELEG_MEMCACHED. */
static const char *deleg_path(char *buf, size_t cap)
{
    const char *env = getenv("DSM_DELEG_MEMCACHED");
    if (env) return env;
    ssize_t n = readlink("/proc/self/exe", buf, cap - 32);
    if (n <= 0) return NULL;
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) return NULL;
    strcpy(slash + 1, "dsm-memcached");
    return buf;
}

static int start_server(int deleg, const char *prog, unsigned memory_mb, server_t *s)
{
    s->port = free_port();
    char port[16], mem[16];
    snprintf(port, sizeof port, "%u", s->port);
    snprintf(mem, sizeof mem, "%u", memory_mb);
    fflush(stdout); /* or the child's copy of the buffer is printed again */
    s->pid = fork();
    if (s->pid < 0) return -1;
    if (s->pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        if (deleg)
            execl(prog, prog, "--port", port, "--workers", "2", "--shards", "64", "--memory", mem, (char *)NULL);
        else if (geteuid() == 0) /* memcached refuses to run as root without -u */
            execl(prog, prog, "-p", port, "-U", "0", "-l", "127.0.0.1", "-t", "2", "-m", mem, "-c", "4096",
                  "-u", "root", (char *)NULL);
        else
            execl(prog, prog, "-p", port, "-U", "0", "-l", "127.0.0.1", "-t", "2", "-m", mem, "-c", "4096",
                  (char *)NULL);
        _exit(127);
    }
    return 0; /* the load generator retries its connects until the server listens */
}

static void stop_server(server_t *s)
{
    if (s->pid <= 0) return;
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

void bench_memcached(dsm_report_t *r)
{
    printf("\n== memcached, 2 worker threads each, zipf keys, 5%% writes, 32 B values, eviction on (64 MB), "
           "both servers their own process, same load generator ==\n");
    const char *mc = getenv("DSM_MEMCACHED") ? getenv("DSM_MEMCACHED") : "/usr/bin/memcached";
    char buf[PATH_MAX];
    const char *dm = deleg_path(buf, sizeof buf);
    if (access(mc, X_OK) != 0 || !dm || access(dm, X_OK) != 0) {
        printf("(memcached skipped: need %s and %s)\n", mc, dm ? dm : "dsm-memcached");
        return;
    }
    uint32_t nkeys = quick ? 10000 : 100000;
    double secs = quick ? 0.5 : 2.0;
    server_t stock, deleg;
    if (start_server(0, mc, 64, &stock) != 0 || start_server(1, dm, 64, &deleg) != 0) {
        stop_server(&stock);
        printf("(memcached skipped: cannot start the servers)\n");
        return;
    }
    /* the sweep: one run per point */
    static const unsigned conns[] = {4, 16, 64}, depths[] = {1, 8, 32};
    printf("%-24s %12s %12s %8s\n", "connections x depth", "stock(kops)", "deleg(kops)", "ratio");
    for (size_t i = 0; i < sizeof conns / sizeof conns[0]; i++)
        for (size_t j = 0; j < sizeof depths / sizeof depths[0]; j++) {
            double s = loadgen(stock.port, conns[i], depths[j], nkeys, secs);
            double d = loadgen(deleg.port, conns[i], depths[j], nkeys, secs);
            char name[64];
            snprintf(name, sizeof name, "%u x %u", conns[i], depths[j]);
            printf("%-24s %12.1f %12.1f %8.2f\n", name, s / 1e3, d / 1e3, s > 0 ? d / s : 0);
            snprintf(name, sizeof name, "memcached_zipf_w5_c%u_d%u", conns[i], depths[j]);
            dsm_report_add(r, name, d / 1e3, "kops/s", "stock_memcached_1.6", s / 1e3, 1);
        }
    /* the headlines: the median ratio of interleaved runs */
    static const struct { const char *name; unsigned conns, depth; } heads[] = {
        {"memcached_zipf_w5", 8, 32}, {"memcached_zipf_w5_depth1", 16, 1}};
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++) {
        double sv[MAX_HEADLINE_RUNS], dv[MAX_HEADLINE_RUNS], ratio[MAX_HEADLINE_RUNS];
        const int runs = headline_runs;
        for (int k = 0; k < runs; k++) {
            sv[k] = loadgen(stock.port, heads[h].conns, heads[h].depth, nkeys, secs);
            dv[k] = loadgen(deleg.port, heads[h].conns, heads[h].depth, nkeys, secs);
            ratio[k] = sv[k] > 0 ? dv[k] / sv[k] : 0;
        }
        double s = dsm_report_median(sv, (size_t)runs), d = dsm_report_median(dv, (size_t)runs);
        double rm = dsm_report_median(ratio, (size_t)runs);
        printf("%-24s %12.1f %12.1f %8.2f  (%s, median of %d; median ratio %.2f)\n", "headline", s / 1e3, d / 1e3,
               s > 0 ? d / s : 0, heads[h].name, runs, rm);
        for (int k = 0; k < runs; k++) sv[k] /= 1e3, dv[k] /= 1e3;
        dsm_report_reps(r, dsm_report_add(r, heads[h].name, d / 1e3, "kops/s", "stock_memcached_1.6", s / 1e3, 1),
                        dv, sv, (size_t)runs);
    }
    stop_server(&stock);
    stop_server(&deleg);
    /* a working set above the memory limit: both evict while they serve */
    if (start_server(0, mc, 4, &stock) == 0 && start_server(1, dm, 4, &deleg) == 0) {
        uint32_t big = nkeys * 4; /* ~100 B per item: several times 4 MB */
        double s = loadgen(stock.port, 8, 32, big, secs), d = loadgen(deleg.port, 8, 32, big, secs);
        printf("%-24s %12.1f %12.1f %8.2f  (8 x 32, %u keys, 4 MB)\n", "working set > memory", s / 1e3, d / 1e3,
               s > 0 ? d / s : 0, big);
        dsm_report_add(r, "memcached_zipf_w5_evicting", d / 1e3, "kops/s", "stock_memcached_1.6", s / 1e3, 1);
    }
    stop_server(&stock);
    stop_server(&deleg);
}
