/* memcached: the delegation server (csrc/apps) vs stock memcached, both
 * under the same load generator. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apps/mc_server.h"
#include "bench/trust/loadgen.h"
#include "bench/trust/trust.h"

void bench_memcached(dsm_report_t *r)
{
    printf("\n== memcached, 2 worker threads, zipf keys, 5%% writes, 32 B values, same load generator ==\n");
    const char *mc = getenv("DSM_MEMCACHED") ? getenv("DSM_MEMCACHED") : "/usr/bin/memcached";
    unsigned nconns = 8, depth = 32;
    uint32_t nkeys = quick ? 10000 : 100000;
    double secs = quick ? 2.0 : 5.0;
    /* stock memcached */
    double stock = 0;
    if (access(mc, X_OK) == 0) {
        uint16_t port = free_port();
        char portbuf[16];
        snprintf(portbuf, sizeof portbuf, "%u", port);
        pid_t pid = fork();
        if (pid == 0) {
            /* memcached refuses to run as root without -u */
            if (geteuid() == 0)
                execl(mc, mc, "-p", portbuf, "-U", "0", "-l", "127.0.0.1", "-t", "2", "-m", "512", "-c", "4096",
                      "-u", "root", (char *)NULL);
            else
                execl(mc, mc, "-p", portbuf, "-U", "0", "-l", "127.0.0.1", "-t", "2", "-m", "512", "-c", "4096",
                      (char *)NULL);
            _exit(127);
        }
        usleep(200000);
        stock = loadgen(port, nconns, depth, nkeys, secs);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    } else {
        printf("(no %s: stock memcached skipped)\n", mc);
    }
    /* the delegation server, in this process */
    dsm_mc_config_t cfg = {.workers = 2, .shards = 64};
    dsm_mc_server_t *srv;
    double deleg = 0;
    if (dsm_mc_start(&cfg, &srv) == DSM_OK) {
        deleg = loadgen(dsm_mc_port(srv), nconns, depth, nkeys, secs);
        dsm_mc_stop(srv);
    }
    printf("%-24s %12s %12s %8s\n", "", "stock(kops)", "deleg(kops)", "ratio");
    printf("%-24s %12.1f %12.1f %8.2f\n", "zipf, 5% writes", stock / 1e3, deleg / 1e3, stock > 0 ? deleg / stock : 0);
    dsm_report_add(r, "memcached_zipf_w5", deleg / 1e3, "kops/s", "stock_memcached_1.6", stock / 1e3, 1);
}
