/* dsm-bench-loco: LOCO's channel objects (csrc/chan) against what an MPI or
 * Redis user would run instead, in the same run on the same host.
 *
 * Setup: a coordinator and N nodes (--nodes, 2 or 3) in this process, one
 * busy benchmark thread per node (2 cores), progress threads blocking.
 * - shm: barrier, one contended ticket_lock guarding a word node 0 hosts,
 *   and transfers between 1M accounts striped over the nodes, each taking
 *   the stripe locks (of 64) of its two accounts in order, against Open MPI
 *   with N ranks over shared memory (dsm-mpi-loco): MPI_Barrier,
 *   MPI_Win_lock(EXCLUSIVE) + get/put + unlock, and transfers that lock the
 *   ranks of both accounts (windows by osc sm: mapped shared memory). The sums of all accounts must be conserved.
 * - tcp (loopback): the kvstore, 8-byte keys and values, 80% of the slots
 *   filled, node 0 the one client with W operations outstanding (a
 *   window's gets in one dsm_chan_kv_get_many), against redis-server
 *   without persistence on loopback with W commands pipelined over one
 *   connection; uniform and Zipf 0.99, read-only, 50:50 and write-only,
 *   W = 3 and 128, each side's cell its operations again until it has run
 *   at least 100 ms (300 in a full run), after one untimed pass of the
 *   headline's gets. And the fence's cost: an update with and without it.
 * Message-count predictions: the round trips an operation makes in
 * sequence times an 8-byte get's round trip measured in the same run.
 *
 * Every figure is the median of R interleaved repetitions (ours, then the
 * anchor), the JSON keeps each repetition; figures and anchors: the case
 * table below (--list). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/driver.h"
#include "bench/loco/loco.h"
#include "bench/report.h"
#include "dsm/log.h"

enum { OBJECTS, KV };
enum { MAX_REPS = DSM_FIGURE_MAX_REPS };

#define MPI_BARRIER "Open MPI MPI_Barrier, same ranks, shm"
#define MPI_WIN "Open MPI MPI_Win_lock(EXCLUSIVE) + get/put + unlock, same ranks, shm"
#define MPI_TXN "Open MPI transfers under MPI_Win_lock(EXCLUSIVE) of both accounts' ranks, shm"
#define REDIS "redis-server (no persistence), one connection, W pipelined, tcp loopback"

static const dsm_bench_case_t cases[] = {
    {"loco_barrier_vs_mpi/shm", MPI_BARRIER, "us", 0, OBJECTS, 0},
    {"loco_barrier_vs_predicted/shm", "predicted: 2 round trips (fence, arrival pushed and acked)", "us", 0,
     OBJECTS, 0},
    {"loco_lock_vs_mpi_win/shm", MPI_WIN, "Mops/s", 1, OBJECTS, 0},
    {"loco_lock_vs_predicted/shm", "predicted: 4 round trips (get, put + fence, release, next poll)", "us", 0,
     OBJECTS, 0},
    {"loco_transactions_vs_mpi/shm", MPI_TXN, "Mops/s", 1, OBJECTS, 0},
    {"loco_transactions_vs_predicted/shm", "predicted: 9 round trips x remote share", "us", 0, OBJECTS, 0},
    /* the headline: uniform keys, read-only, W = 128 */
    {"loco_kv_get_vs_redis/tcp", REDIS, "Mops/s", 1, KV, 0},
    /* every cell: distribution, put share, window */
    {"loco_kv_vs_redis/tcp/*", REDIS, "Mops/s", 1, KV, 0},
    {"loco_kv_fence_cost/tcp", "the same update without its fence (unsafe)", "us", 0, KV, 0},
    {"loco_kv_get_vs_predicted/tcp", "predicted: 1 round trip per window of 3 + local share", "us", 0, KV, 0},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static dsm_report_t rep;

static void emit(const char *name, const double *ours, const double *anchor, int n, const char *unit,
                 const char *label, int higher)
{
    (void)dsm_report_add_runs(&rep, name, ours, anchor, (size_t)n, unit, label, higher);
}

static void not_run(const char *figure, const char *why)
{
    fprintf(stderr, "dsm-bench-loco: %s not reported: %s\n", figure, why);
    char key[128];
    snprintf(key, sizeof key, "%s not run", figure);
    dsm_report_env_str(&rep, key, why);
}

/* ---- shm: barrier, lock, transactions ------------------------------------ */

static void objects(const loco_params_t *p, int reps)
{
    loco_cluster_t c;
    loco_start(&c, p);
    double rtt[MAX_REPS], bar[MAX_REPS], mbar[MAX_REPS], lk[MAX_REPS], mlk[MAX_REPS], tx[MAX_REPS],
        mtx[MAX_REPS];
    char why[3][512] = {"", "", ""};
    int ok[3] = {1, 1, 1};
    for (int r = 0; r < reps; r++) {
        double us, mops;
        rtt[r] = loco_rtt_us(&c);
        bar[r] = loco_barrier_us(&c);
        if (ok[0] && (ok[0] = loco_mpi(p->nodes, "barrier", p->barriers, 0, &us, &mops, why[0], 512) == 0))
            mbar[r] = us;
        lk[r] = loco_lock_mops(&c);
        if (ok[1] && (ok[1] = loco_mpi(p->nodes, "lock", p->lock_ops, 0, &us, &mops, why[1], 512) == 0))
            mlk[r] = mops;
        tx[r] = loco_txn_mops(&c);
        if (ok[2] && (ok[2] = loco_mpi(p->nodes, "txn", p->txn_ops, p->accounts, &us, &mops, why[2], 512) == 0))
            mtx[r] = mops;
    }
    loco_stop(&c);
    double pred[MAX_REPS], per[MAX_REPS];
    if (ok[0])
        emit("loco_barrier_vs_mpi/shm", bar, mbar, reps, "us", MPI_BARRIER, 0);
    else
        not_run("loco_barrier_vs_mpi/shm", why[0]);
    for (int r = 0; r < reps; r++) pred[r] = 2 * rtt[r];
    emit("loco_barrier_vs_predicted/shm", bar, pred, reps, "us", cases[1].anchor, 0);
    if (ok[1])
        emit("loco_lock_vs_mpi_win/shm", lk, mlk, reps, "Mops/s", MPI_WIN, 1);
    else
        not_run("loco_lock_vs_mpi_win/shm", why[1]);
    for (int r = 0; r < reps; r++) {
        per[r] = 1.0 / lk[r];
        pred[r] = 4 * rtt[r];
    }
    emit("loco_lock_vs_predicted/shm", per, pred, reps, "us", cases[3].anchor, 0);
    if (ok[2])
        emit("loco_transactions_vs_mpi/shm", tx, mtx, reps, "Mops/s", MPI_TXN, 1);
    else
        not_run("loco_transactions_vs_mpi/shm", why[2]);
    double remote = (double)(p->nodes - 1) / p->nodes;
    for (int r = 0; r < reps; r++) {
        per[r] = p->nodes / tx[r];   /* one thread's transfer, us */
        pred[r] = 9 * rtt[r] * remote;
    }
    emit("loco_transactions_vs_predicted/shm", per, pred, reps, "us", cases[5].anchor, 0);
    double lo, hi;
    dsm_report_range(rtt, (size_t)reps, &lo, &hi);
    dsm_report_env(&rep, "rtt_us_shm", "{\"median\": %.4g, \"min\": %.4g, \"max\": %.4g}",
                   dsm_report_median(rtt, (size_t)reps), lo, hi);
}

/* ---- tcp: the kvstore against Redis --------------------------------------- */

typedef struct cell {
    loco_dist_t dist;
    int put_pct;
    size_t window;
} cell_t;

static void kv(const loco_params_t *p, int reps)
{
    loco_cluster_t c;
    loco_start(&c, p);
    char why[512];
    loco_redis_t *redis = loco_redis_start(c.nkeys, why, sizeof why);
    if (!redis)
        not_run("loco_kv_get_vs_redis/tcp", why);
    static const cell_t cells[] = {
        {LOCO_UNIFORM, 0, 128}, {LOCO_UNIFORM, 0, 3},   {LOCO_UNIFORM, 50, 128}, {LOCO_UNIFORM, 50, 3},
        {LOCO_UNIFORM, 100, 128}, {LOCO_UNIFORM, 100, 3}, {LOCO_ZIPF, 0, 128},  {LOCO_ZIPF, 0, 3},
        {LOCO_ZIPF, 50, 128},   {LOCO_ZIPF, 50, 3},     {LOCO_ZIPF, 100, 128},  {LOCO_ZIPF, 100, 3},
    };
    enum { NCELLS = sizeof cells / sizeof cells[0] };
    static double ours[NCELLS][MAX_REPS], theirs[NCELLS][MAX_REPS];
    double rtt[MAX_REPS], fon[MAX_REPS], foff[MAX_REPS];
    loco_ops_t ops[NCELLS];
    for (int k = 0; k < NCELLS; k++)
        loco_ops_make(&ops[k], (size_t)p->kv_ops, c.nkeys, cells[k].dist, cells[k].put_pct, 1000 + (uint64_t)k);
    /* one untimed pass of the headline's gets on each side: the first
     * touches of either side's table are no part of its rate */
    (void)loco_kv_mops(&c, &ops[0], cells[0].window, 0);
    if (redis && loco_redis_mops(redis, &ops[0], cells[0].window, 0) < 0) {
        not_run("loco_kv_get_vs_redis/tcp", "redis-server failed a command or closed the connection");
        loco_redis_stop(redis);
        redis = NULL;
    }
    for (int r = 0; r < reps; r++) {
        rtt[r] = loco_rtt_us(&c);
        loco_fence_us(&c, &fon[r], &foff[r]);
        for (int k = 0; k < NCELLS; k++) {
            ours[k][r] = loco_kv_mops(&c, &ops[k], cells[k].window, p->kv_min_ms);
            if (redis && (theirs[k][r] = loco_redis_mops(redis, &ops[k], cells[k].window, p->kv_min_ms)) < 0) {
                not_run("loco_kv_get_vs_redis/tcp", "redis-server failed a command or closed the connection");
                loco_redis_stop(redis);
                redis = NULL;
            }
        }
    }
    loco_redis_stop(redis);
    /* a window of 3 gets: one round trip for the remote ones in flight
     * together, the local share as loads */
    double pred[MAX_REPS], per[MAX_REPS];
    for (int k = 0; k < NCELLS && (redis || theirs[0][0] > 0); k++) {
        char name[96];
        snprintf(name, sizeof name, "loco_kv_vs_redis/tcp/%s/put=%d%%/w=%zu",
                 cells[k].dist == LOCO_ZIPF ? "zipf0.99" : "uniform", cells[k].put_pct, cells[k].window);
        if (k == 0)
            emit("loco_kv_get_vs_redis/tcp", ours[k], theirs[k], reps, "Mops/s", REDIS, 1);
        emit(name, ours[k], theirs[k], reps, "Mops/s", REDIS, 1);
    }
    emit("loco_kv_fence_cost/tcp", fon, foff, reps, "us", cases[8].anchor, 0);
    for (int r = 0; r < reps; r++) {
        per[r] = 3.0 / ours[1][r];   /* us per window of 3, uniform read-only */
        pred[r] = rtt[r];
    }
    emit("loco_kv_get_vs_predicted/tcp", per, pred, reps, "us", cases[9].anchor, 0);
    for (int k = 0; k < NCELLS; k++) loco_ops_free(&ops[k]);
    double lo, hi;
    dsm_report_range(rtt, (size_t)reps, &lo, &hi);
    dsm_report_env(&rep, "rtt_us_tcp", "{\"median\": %.4g, \"min\": %.4g, \"max\": %.4g}",
                   dsm_report_median(rtt, (size_t)reps), lo, hi);
    loco_stop(&c);
}

int main(int argc, char **argv)
{
    const char *nodes_arg = NULL;
    const dsm_bench_flag_t flags[] = {{"--nodes", "N (2 or 3)", &nodes_arg}};
    dsm_bench_opts_t o;
    int done = dsm_bench_parse(argc, argv, cases, N_CASES, flags, 1, &o);
    if (done >= 0)
        return done;
    int nodes = nodes_arg ? atoi(nodes_arg) : 2;
    if (nodes < 2 || nodes > LOCO_MAX_NODES) {
        fprintf(stderr, "dsm-bench-loco: --nodes takes 2 or 3\n");
        return 2;
    }
    int quick = o.quick, reps = o.runs ? (o.runs < MAX_REPS ? o.runs : MAX_REPS) : quick ? 3 : 5;
    loco_params_t p = {.nodes = nodes,
                       .barriers = quick ? 2000 : 20000,
                       .lock_ops = quick ? 1000 : 10000,
                       .txn_ops = quick ? 1000 : 10000,
                       .accounts = 1000000,
                       .kv_slots = quick ? 1024 : 65536,
                       .kv_ops = quick ? 1000 : 30000,
                       /* a read cell's 1000 operations take under a ms, a
                        * scheduler's slice on a shared host */
                       .kv_min_ms = quick ? 100 : 300,
                       .fence_ops = quick ? 500 : 5000,
                       .rtt_ops = quick ? 1000 : 10000};
    /* the accounts (8 MiB over the nodes) and the kvstore's slots beside the
     * objects: more than chan's default arena */
    setenv("DSM_CHAN_ARENA_MB", "64", 0);
    dsm_set_log_level(1);
    dsm_report_init(&rep, "loco");
    dsm_report_env(&rep, "cpus", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    dsm_report_env(&rep, "nodes", "%d", nodes);
    dsm_report_env(&rep, "threads_per_node", "1");
    dsm_report_env(&rep, "quick", "%d", quick);
    dsm_report_env(&rep, "repetitions", "%d", reps);
    char load[32];
    dsm_report_env_str(&rep, "loadavg_start", dsm_report_loadavg(load, sizeof load));
    dsm_report_env(&rep, "accounts", "%ld", p.accounts);
    dsm_report_env(&rep, "txn_stripe_locks", "%d", LOCO_TXN_LOCKS);
    dsm_report_env(&rep, "kv_slots_per_node", "%u", p.kv_slots);
    dsm_report_env(&rep, "kv_ops_per_cell", "%ld", p.kv_ops);
    dsm_report_env(&rep, "kv_min_ms_per_cell", "%ld", p.kv_min_ms);
    dsm_report_env_str(&rep, "chan_arena_mb", getenv("DSM_CHAN_ARENA_MB"));
    dsm_report_env_str(&rep, "mpi", "mpirun -np NODES --mca btl self,vader --mca osc sm --mca mpi_yield_when_idle 1 dsm-mpi-loco");
    dsm_report_env_str(&rep, "kv_headline", "uniform keys, read-only, 128 outstanding (one get_many / one pipeline)");
    if (o.only)
        dsm_report_env_str(&rep, "only", o.only);
    dsm_report_print_header(stdout);
    int shm = !o.transport_set || o.transport == DSM_TRANSPORT_SHM;
    int tcp = !o.transport_set || o.transport == DSM_TRANSPORT_TCP;
    if (shm && dsm_bench_run_wanted(&o, cases, N_CASES, OBJECTS)) {
        loco_params_t q = p;
        q.transport = DSM_TRANSPORT_SHM;
        q.txn = 1;
        objects(&q, reps);
    }
    if (tcp && dsm_bench_run_wanted(&o, cases, N_CASES, KV)) {
        loco_params_t q = p;
        q.transport = DSM_TRANSPORT_TCP;
        q.kv = 1;
        kv(&q, reps);
    }
    dsm_report_env_str(&rep, "loadavg_end", dsm_report_loadavg(load, sizeof load));
    int rc = 0;
    if (o.json && dsm_report_write_json(&rep, o.json) != 0)
        rc = 1;
    dsm_report_free(&rep);
    return rc;
}
