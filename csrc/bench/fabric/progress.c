/* dsm-bench-fabric's progress comparison (see progress.h): which progress
 * mode a tcp target should run, measured the way a client meets it.
 *
 * Setup. One initiator (this process, rank 0, blocking progress: its calls
 * wait on their own thread, as the driver's do) and four targets (ranks
 * 1-4), each its own process on the target's core: adaptive, hybrid,
 * blocking, and a second blocking one, the control. The control is held
 * against the better fixed mode exactly as adaptive is: what it reads is
 * the comparison's resolution on this host in these runs (on a crowded
 * host adaptive and hybrid skip their lingers, all four targets then
 * behave alike, and what separates them is the host's noise and the pick
 * of the lower of two noisy fixed modes). Workloads, each from the initiator to one target over
 * tcp, one operation at a time: fetch_add of 8 bytes (the driver's
 * latency), an 8-byte active-message echo (request and reply through the
 * target's handler), fetch_add with 25 µs of client work between
 * operations (the driver from Python: its next request comes tens of µs
 * after the reply, not a few), and with 250 µs (a client slower than any
 * linger: what a linger costs there is the target's CPU, reported per
 * operation beside the latency). Each is measured idle, and with two busy
 * processes (one pinned on each core, started and stopped here) beside.
 *
 * Interleaving. Every repetition runs idle then loaded; within a state each
 * workload's operations go to the four targets in CHUNKS turns, the order
 * of the targets rotating per turn, so that a drift of the host's load (other
 * jobs come and go) hits every mode alike. Per repetition and mode: the
 * mean µs per operation (stalls are what a crowded host costs, and a median
 * would hide them), after a warm-up of a tenth of the operations. Reported: medians over the repetitions, each beside the
 * better of the two fixed modes in the same repetitions. After each state's
 * workloads, the host's own wake-up round trip (wake_rtt.h) between the
 * initiator's core and the targets', beside the blocking target's. */
#include "bench/fabric/progress.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/busy.h"
#include "bench/fabric/pair.h"
#include "bench/fabric/wake_rtt.h"
#include "dsm/fabric.h"
#include "util/clock.h"

enum { MODES = 4, BLOCKING = 2, CONTROL = 3, REGION = 4096, H_ECHO = DSM_AM_USER_FIRST, GAP_US = 25, SLOW_US = 250, SPINNERS = 2, MAX_REPS = 15, CHUNKS = 20 };

static const dsm_progress_mode_t modes[MODES] = {DSM_PROGRESS_ADAPTIVE, DSM_PROGRESS_HYBRID, DSM_PROGRESS_BLOCKING,
                                                 DSM_PROGRESS_BLOCKING};
static const char *const target_names[MODES] = {"adaptive", "hybrid", "blocking", "control"};
static const char *const workload_names[PROGRESS_N_WORKLOADS] = {
    "fadd_8B_latency", "am_8B_latency", "fadd_8B_gap25us_latency", "fadd_8B_gap250us_latency"};
static const char *const state_names[2] = {"idle", "loaded"};

static void die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-fabric: progress: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

/* What a target tells the initiator when asked ('s'): its wake-ups,
 * skipped lingers, lingers a crowded host shortened and progress-thread
 * CPU so far. */
typedef struct target_counts {
    uint64_t wakeups, backoffs, crowded, cpu_ns;
} target_counts_t;

/* A target: its fabric in `mode`, a region for the fetch_adds, the echo
 * handler; serves until the initiator closes the socket. */
static void target_main(int fd, uint32_t rank, dsm_progress_mode_t mode, int cpu)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dsm_bench_pin(cpu);
    dsm_fabric_config_t cfg = {.transport = DSM_TRANSPORT_TCP, .progress = mode, .net_device = "lo",
                               .op_timeout_ms = 60000};   /* only a hang ends a run (see main.c) */
    dsm_fabric_t *f;
    dsm_region_t *region;
    dsm_status_t st = dsm_fabric_create(&cfg, &f);
    if (st != DSM_OK)
        die("target fabric", st);
    dsm_fabric_set_rank(f, rank);
    if ((st = dsm_fabric_region_alloc(f, REGION, &region)) != DSM_OK)
        die("region", st);
    dsm_fabric_am_register(f, H_ECHO, dsm_bench_echo_handler, f);
    dsm_bench_publish(fd, f, region);
    uint32_t n;
    void *peer = dsm_bench_recv_blob(fd, &n);
    if ((st = dsm_fabric_connect(f, 0, peer, n)) != DSM_OK)
        die("target connect", st);
    free(peer);
    char c;
    if (write(fd, "r", 1) != 1)
        exit(1);
    while (read(fd, &c, 1) == 1) {
        dsm_stats_t s;
        dsm_fabric_stats(f, &s);
        target_counts_t t = {s.progress_wakeups, s.linger_backoffs, s.linger_crowded, s.progress_cpu_ns};
        if (write(fd, &t, sizeof t) != (ssize_t)sizeof t)
            break;
    }
    dsm_fabric_region_unregister(region);
    dsm_fabric_destroy(f);
    exit(0);
}

typedef struct target {
    pid_t pid;
    int fd;
    uint32_t rank;
} target_t;

/* Forked before the initiator's fabric exists (a child of a process that
 * runs UCX inherits its state half-made). It closes its copies of the
 * sockets to the targets before it (`earlier`, n of them): else those would
 * never see the initiator close theirs. */
static target_t fork_target(uint32_t rank, dsm_progress_mode_t mode, int cpu, const target_t *earlier, int n)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("socketpair");
        exit(1);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        for (int i = 0; i < n; i++)
            close(earlier[i].fd);
        target_main(sv[1], rank, mode, cpu);
    }
    close(sv[1]);
    return (target_t){pid, sv[0], rank};
}

static void connect_target(dsm_fabric_t *f, const target_t *t)
{
    uint32_t n1, n2, n3;
    void *addr = dsm_bench_recv_blob(t->fd, &n1), *key = dsm_bench_recv_blob(t->fd, &n2),
         *base = dsm_bench_recv_blob(t->fd, &n3);
    const void *mine;
    size_t mine_len;
    dsm_fabric_address(f, &mine, &mine_len);
    dsm_bench_send_blob(t->fd, mine, (uint32_t)mine_len);
    uint64_t peer_base;
    memcpy(&peer_base, base, 8);
    dsm_status_t st = dsm_fabric_connect(f, t->rank, addr, n1);
    if (st == DSM_OK)
        st = dsm_fabric_remote_region_add(f, t->rank, 0, peer_base, REGION, key, n2);
    if (st != DSM_OK)
        die("connect", st);
    free(addr);
    free(key);
    free(base);
    char ready;
    if (read(t->fd, &ready, 1) != 1) {
        fprintf(stderr, "dsm-bench-fabric: progress: a target did not start\n");
        exit(1);
    }
}

static target_counts_t target_counts(const target_t *t)
{
    target_counts_t c = {0};
    if (write(t->fd, "s", 1) != 1 || read(t->fd, &c, sizeof c) != (ssize_t)sizeof c)
        fprintf(stderr, "dsm-bench-fabric: progress: target %u did not answer\n", t->rank);
    return c;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* One operation of workload w on target rank; returns its µs (the client's
 * work of the gap workload excluded, done before it). */
static double one_op_us(dsm_fabric_t *f, int w, uint32_t rank)
{
    static uint8_t msg[8], reply[64];
    if (w == PROGRESS_FADD_GAP || w == PROGRESS_FADD_SLOW) {
        uint64_t until = dsm_now_ns() + (uint64_t)(w == PROGRESS_FADD_GAP ? GAP_US : SLOW_US) * 1000u;
        while (dsm_now_ns() < until)
            ;
    }
    uint64_t old, t0 = dsm_now_ns();
    size_t rlen;
    dsm_status_t st = w == PROGRESS_AM ? dsm_fabric_am_request(f, rank, H_ECHO, msg, sizeof msg, reply,
                                                               sizeof reply, &rlen, 0)
                                       : dsm_fabric_fetch_add(f, rank, 0, 0, 1, &old);
    if (st != DSM_OK)
        die(workload_names[w], st);
    return (double)(dsm_now_ns() - t0) / 1e3;
}

/* The sum of n operations' µs. */
static double run_sum_us(dsm_fabric_t *f, int w, uint32_t rank, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += one_op_us(f, w, rank);
    return sum;
}
typedef struct cell {
    double us[MAX_REPS];
    double wakeups_per_op[MAX_REPS], backoffs_per_op[MAX_REPS], crowded_per_op[MAX_REPS], cpu_us_per_op[MAX_REPS];
} cell_t;

/* [state][workload][mode] */
static cell_t cells[2][PROGRESS_N_WORKLOADS][MODES];
/* [state][repetition]: the host's wake-up probe after the state's workloads */
static dsm_bench_wake_t wakes[2][MAX_REPS];

/* The host's two wake-ups (wake_rtt.h) beside the blocking target's
 * fetch_add round trip, which pays them too: the share of that round trip
 * that is the host's. Their CPU per wake-up goes to the env. */
static void emit_wakes(dsm_report_t *report, int s, int reps)
{
    double rtt[MAX_REPS], blocking[MAX_REPS], cpu[MAX_REPS], slept[MAX_REPS];
    int measured = 0;
    for (int r = 0; r < reps; r++) {
        rtt[r] = wakes[s][r].round_trip_us;
        blocking[r] = cells[s][PROGRESS_FADD][BLOCKING].us[r];
        cpu[r] = wakes[s][r].cpu_us;
        slept[r] = wakes[s][r].slept;
        measured |= rtt[r] > 0;
    }
    if (!measured) {   /* one core: the probe needs two */
        printf("  host wake-ups (%s): not measured (the initiator and the targets share a core)\n", state_names[s]);
        return;
    }
    char name[96], key[48];
    snprintf(name, sizeof name, "host_wake_round_trip/%s", state_names[s]);
    dsm_report_add_runs(report, name, rtt, blocking, (size_t)reps, "us",
                        "the blocking target's fadd_8B round trip over tcp, same runs", 0);
    double lo, hi;
    dsm_report_range(cpu, (size_t)reps, &lo, &hi);
    snprintf(key, sizeof key, "host_wake_cpu_us_%s", state_names[s]);
    dsm_report_env_spread(report, key, cpu, (size_t)reps);
    snprintf(key, sizeof key, "host_wake_slept_%s", state_names[s]);
    dsm_report_env(report, key, "%.3f", dsm_report_median(slept, (size_t)reps));
    printf("  host wake-ups (%s): %.3g us a round trip of two, %.3g us of CPU each (%.3g-%.3g), %.0f%% of waits "
           "slept\n",
           state_names[s], dsm_report_median(rtt, (size_t)reps), dsm_report_median(cpu, (size_t)reps), lo, hi,
           100 * dsm_report_median(slept, (size_t)reps));
}

static void emit(dsm_report_t *report, int s, int w, int reps)
{
    char cell[96];
    snprintf(cell, sizeof cell, "%s/tcp", workload_names[w]);
    dsm_report_progress_cell(report, &(dsm_progress_cell_t){
                                         .state = state_names[s], .cell = cell, .waiter = "progress",
                                         .control = "target", .unit = "us", .higher = 0,
                                         .runs = {cells[s][w][0].us, cells[s][w][1].us, cells[s][w][2].us,
                                                  cells[s][w][CONTROL].us},
                                         .n = (size_t)reps});
    if (w == PROGRESS_FADD_SLOW) {   /* what lingers that catch nothing cost */
        char name[96];
        snprintf(name, sizeof name, "progress_adaptive_cpu_vs_hybrid/%s/fadd_8B_gap250us/tcp", state_names[s]);
        dsm_report_add_runs(report, name, cells[s][w][0].cpu_us_per_op, cells[s][w][1].cpu_us_per_op, (size_t)reps,
                            "us", "the target's progress CPU per operation under hybrid progress, same runs", 0);
    }
    for (int m = 0; m < MODES; m++) {
        const cell_t *c = &cells[s][w][m];
        double lo, hi, wlo, whi;
        dsm_report_range(c->us, (size_t)reps, &lo, &hi);
        dsm_report_range(c->wakeups_per_op, (size_t)reps, &wlo, &whi);
        printf("  %-8s %.3g us (%.3g-%.3g); target per op: wake-ups %.3f (%.3f-%.3f), skipped lingers %.3f, "
               "shortened %.3f, CPU %.3g us\n",
               target_names[m], dsm_report_median(c->us, (size_t)reps), lo, hi,
               dsm_report_median(c->wakeups_per_op, (size_t)reps), wlo, whi,
               dsm_report_median(c->backoffs_per_op, (size_t)reps),
               dsm_report_median(c->crowded_per_op, (size_t)reps),
               dsm_report_median(c->cpu_us_per_op, (size_t)reps));
    }
}

void dsm_bench_progress_compare(dsm_report_t *report, int reps, int quick, int cpu_initiator, int cpu_target)
{
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    target_t t[MODES];
    for (int m = 0; m < MODES; m++)
        t[m] = fork_target((uint32_t)m + 1, modes[m], cpu_target, t, m);
    dsm_bench_pin(cpu_initiator);
    dsm_fabric_config_t cfg = {.transport = DSM_TRANSPORT_TCP, .progress = DSM_PROGRESS_BLOCKING, .net_device = "lo",
                               .op_timeout_ms = 60000};   /* only a hang ends a run (see main.c) */
    /* A client per target: a waiter's spin adapts to the answers it gets,
     * and one client shared by the modes carried what a blocking target had
     * taught it (sleep, do not spin) into the next mode's turn. */
    dsm_fabric_t *client[MODES];
    for (int m = 0; m < MODES; m++) {
        dsm_status_t st = dsm_fabric_create(&cfg, &client[m]);
        if (st != DSM_OK)
            die("fabric", st);
        dsm_fabric_set_rank(client[m], 0);
        connect_target(client[m], &t[m]);
    }
    int n = quick ? 1000 : 3000;
    pid_t spin[SPINNERS] = {0};
    char loads[2][MAX_REPS][32];
    for (int r = 0; r < reps; r++) {
        for (int s = 0; s < 2; s++) {
            if (s == 1) {
                dsm_bench_busy_start(spin, SPINNERS);
                sleep_ms(50);   /* the host's samples see them before the first operation */
            }
            for (int w = 0; w < PROGRESS_N_WORKLOADS; w++) {
                target_counts_t before[MODES];
                double sum[MODES] = {0};
                for (int m = 0; m < MODES; m++) {
                    (void)run_sum_us(client[m], w, t[m].rank, n / 10);
                    before[m] = target_counts(&t[m]);
                }
                int per = (w == PROGRESS_FADD_SLOW ? n / 4 : n) / CHUNKS;   /* the slow client: fewer */
                for (int k = 0; k < CHUNKS * MODES; k++) {
                    int m = (k + k / MODES + r) % MODES;   /* each turn begins with the next mode */
                    sum[m] += run_sum_us(client[m], w, t[m].rank, per);
                }
                for (int m = 0; m < MODES; m++) {
                    target_counts_t after = target_counts(&t[m]);
                    cell_t *c = &cells[s][w][m];
                    int ops = per * CHUNKS;
                    c->cpu_us_per_op[r] = (double)(after.cpu_ns - before[m].cpu_ns) / 1e3 / ops;
                    c->us[r] = sum[m] / ops;
                    c->wakeups_per_op[r] = (double)(after.wakeups - before[m].wakeups) / ops;
                    c->backoffs_per_op[r] = (double)(after.backoffs - before[m].backoffs) / ops;
                    c->crowded_per_op[r] = (double)(after.crowded - before[m].crowded) / ops;
                }
            }
            if (dsm_bench_wake_rtt(cpu_initiator, cpu_target, quick ? 480 : 2000, &wakes[s][r]) != 0)
                wakes[s][r] = (dsm_bench_wake_t){0};
            dsm_report_loadavg(loads[s][r], sizeof loads[s][r]);
            if (s == 1)
                dsm_bench_busy_stop(spin, SPINNERS);
        }
    }
    for (int s = 0; s < 2; s++) {
        for (int w = 0; w < PROGRESS_N_WORKLOADS; w++)
            emit(report, s, w, reps);
        emit_wakes(report, s, reps);
    }
    for (int m = 0; m < MODES; m++) {
        dsm_fabric_peer_left(client[m], t[m].rank);
        close(t[m].fd);
        waitpid(t[m].pid, NULL, 0);
        dsm_fabric_destroy(client[m]);
    }
    /* A guest kernel that halts an idle virtual CPU at once (halt polling
     * off) makes every wake-up of it the hypervisor's: the probe's figure
     * follows this setting more than anything here. */
    FILE *poll = fopen("/sys/module/haltpoll/parameters/guest_halt_poll_ns", "r");
    long poll_ns = -1;
    if (poll) {
        if (fscanf(poll, "%ld", &poll_ns) != 1)
            poll_ns = -1;
        fclose(poll);
    }
    if (poll_ns >= 0)
        dsm_report_env(report, "host_guest_halt_poll_ns", "%ld", poll_ns);
    else
        dsm_report_env(report, "host_guest_halt_poll_ns", "null");
    dsm_report_env(report, "progress_ops_per_run", "%d", n);
    dsm_report_env(report, "progress_busy_processes", "%d", SPINNERS);
    dsm_report_env(report, "progress_gap_us", "%d", GAP_US);
    dsm_report_env(report, "progress_slow_gap_us", "%d", SLOW_US);
    /* the host's 1-minute load at the end of each state, per repetition:
     * "idle" is this bench's own idleness, not the host's */
    for (int s = 0; s < 2; s++) {
        char list[MAX_REPS * 34 + 4] = "[";
        for (int r = 0; r < reps; r++) {
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s", r ? "," : "", loads[s][r][0] ? loads[s][r] : "null");
        }
        strcat(list, "]");
        char key[48];
        snprintf(key, sizeof key, "progress_loadavg_%s", state_names[s]);
        dsm_report_env(report, key, "%s", list);
        printf("loadavg (1 min) at the end of each %s state: %s\n", state_names[s], list);
    }
}
