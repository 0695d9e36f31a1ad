/* Benchmark: time to bootstrap a local cluster of N dsmd processes (spawn,
 * authenticated join, table exchange, endpoints wired, client ready), beside
 * the time Open MPI's mpirun takes to launch and wire up N processes of a
 * trivial program on the same host, measured in the same run.
 * Flags: the shared ones (bench/driver.h) plus --nodes N and --dsmd PATH. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/driver.h"
#include "bench/report.h"
#include "dsm/sdk.h"
#include "util/clock.h"

/* The clusters' secret: 16 random bytes in hex, as pydsm makes one (a
 * fixed short one made every dsmd warn that it is weak). */
static const char *cluster_secret(void)
{
    static char hex[33];
    if (hex[0] == 0) {
        uint64_t w[2];
        if (getrandom(w, sizeof w, 0) != (ssize_t)sizeof w) {   /* no entropy source: unique is enough */
            uint64_t seed = dsm_now_ns() ^ (uint64_t)getpid();
            w[0] = dsm_splitmix64(&seed);
            w[1] = dsm_splitmix64(&seed);
        }
        snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)w[0], (unsigned long long)w[1]);
    }
    return hex;
}

/* One bootstrap: seconds until the client sees every daemon, or -1. */
static double bootstrap_once(const char *dsmd, int nodes, dsm_transport_t transport)
{
    double start = dsm_now_s();
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = cluster_secret()};
    dsm_coord_t *coord;
    if (dsm_coord_start(&cc, &coord) != DSM_OK) return -1;
    char coordinator[64], rank_s[16];
    snprintf(coordinator, sizeof coordinator, "127.0.0.1:%u", dsm_coord_port(coord));
    pid_t pids[DSM_MAX_DAEMONS];
    for (int r = 0; r < nodes; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            snprintf(rank_s, sizeof rank_s, "%d", r);
            setenv("DSM_SECRET", cluster_secret(), 1);
            execl(dsmd, "dsmd", "--coordinator", coordinator, "--rank", rank_s, "--transport",
                  dsm_transport_name(transport), "--net-device", transport == DSM_TRANSPORT_TCP ? "lo" : "all",
                  "--partition", "64MiB", "--log-level", "0", (char *)NULL);
            _exit(127);
        }
    }
    dsm_node_config_t cfg;
    dsm_node_config_init(&cfg);
    cfg.coordinator = coordinator;
    cfg.secret = cluster_secret();
    cfg.kind = DSM_MEMBER_CLIENT;
    cfg.transport = transport;
    cfg.net_device = transport == DSM_TRANSPORT_TCP ? "lo" : NULL;
    dsm_node_t *client = NULL;
    double elapsed = -1;
    if (dsm_start(&cfg, &client) == DSM_OK && dsm_node_wait_daemons(client, (uint32_t)nodes, 30000) == DSM_OK)
        elapsed = dsm_now_s() - start;
    if (client) dsm_node_destroy(client);
    dsm_coord_stop(coord);
    for (int r = 0; r < nodes; r++) waitpid(pids[r], NULL, 0);
    return elapsed;
}

/* The anchor: mpirun -np N of /bin/true (launch + wire-up + exit). */
static double mpirun_once(int nodes)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "mpirun --allow-run-as-root --oversubscribe -np %d --mca btl self,vader "
             "--mca pml ob1 true >/dev/null 2>&1",
             nodes);
    double start = dsm_now_s();
    int rc = system(cmd);
    return rc == 0 ? dsm_now_s() - start : -1;
}

/* The figure catalogue (--list), for the default 4 nodes (--nodes N names
 * bootstrap_Nnodes/...). */
static const dsm_bench_case_t cases[] = {
    {"bootstrap_4nodes/shm", "mpirun -np 4 true", "ms", 0, DSM_TRANSPORT_SHM, 4},
    {"bootstrap_4nodes/tcp", "mpirun -np 4 true", "ms", 0, DSM_TRANSPORT_TCP, 4},
};

int main(int argc, char **argv)
{
    const char *nodes_arg = NULL, *dsmd = getenv("DSM_DSMD");
    const dsm_bench_flag_t flags[] = {{"--nodes", "N", &nodes_arg}, {"--dsmd", "PATH", &dsmd}};
    dsm_bench_opts_t opts;
    int done = dsm_bench_parse(argc, argv, cases, sizeof cases / sizeof cases[0], flags,
                               sizeof flags / sizeof flags[0], &opts);
    if (done >= 0)
        return done;
    int nodes = nodes_arg ? atoi(nodes_arg) : 4, reps = opts.runs ? opts.runs : opts.quick ? 3 : 7;
    const char *json = opts.json;
    dsm_transport_t transports[2] = {DSM_TRANSPORT_SHM, DSM_TRANSPORT_TCP};
    int n_transports = 2;
    if (opts.transport_set) {
        transports[0] = opts.transport;
        n_transports = 1;
    }
    if (nodes < 1 || nodes > 64 || reps < 1 || reps > 100) {
        fprintf(stderr, "nodes must be 1..64 and reps 1..100\n");
        return 1;
    }
    if (!dsmd) dsmd = "./dsmd";
    if (access(dsmd, X_OK) != 0) {
        fprintf(stderr, "dsmd not found at %s (pass --dsmd or set DSM_DSMD)\n", dsmd);
        return 1;
    }
    dsm_set_log_level(0);
    signal(SIGPIPE, SIG_IGN);

    double *mpi = calloc((size_t)reps, sizeof *mpi), *ours = calloc((size_t)reps, sizeof *ours);
    for (int i = 0; i < reps; i++) mpi[i] = mpirun_once(nodes);
    double anchor = dsm_report_median(mpi, (size_t)reps);
    char anchor_name[64];
    snprintf(anchor_name, sizeof anchor_name, "mpirun -np %d true", nodes);
    dsm_report_t report;
    dsm_report_init(&report, "bootstrap");
    dsm_report_print_header(stdout);
    for (int t = 0; t < n_transports; t++) {
        for (int i = 0; i < reps; i++) {
            ours[i] = bootstrap_once(dsmd, nodes, transports[t]);
            fprintf(stderr, "\r%s rep %d/%d", dsm_transport_name(transports[t]), i + 1, reps);
        }
        fprintf(stderr, "\n");
        double median = dsm_report_median(ours, (size_t)reps);
        char name[64];
        snprintf(name, sizeof name, "bootstrap_%dnodes/%s", nodes, dsm_transport_name(transports[t]));
        const dsm_figure_t *f = dsm_report_add(&report, name, median * 1e3, "ms", anchor_name, anchor * 1e3, 0);
        double ours_ms[reps], mpi_ms[reps];
        for (int i = 0; i < reps; i++) ours_ms[i] = ours[i] * 1e3, mpi_ms[i] = mpi[i] * 1e3;
        dsm_report_reps(&report, f, ours_ms, anchor < 0 ? NULL : mpi_ms, (size_t)reps);
        if (f) dsm_report_print_figure(stdout, f);
    }
    if (anchor < 0) printf("(mpirun not available: install openmpi-bin for the anchor)\n");
    dsm_report_env(&report, "nodes", "%d", nodes);
    dsm_report_env(&report, "reps", "%d", reps);
    int rc = json && dsm_report_write_json(&report, json) != 0 ? 1 : 0;
    dsm_report_free(&report);
    free(mpi);
    free(ours);
    return rc;
}
