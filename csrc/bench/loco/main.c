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
 *   window's puts in one dsm_chan_kv_put_many, its gets in one
 *   dsm_chan_kv_get_many), against redis-server
 *   without persistence on loopback with W commands pipelined over one
 *   connection; uniform and Zipf 0.99, read-only, 50:50 and write-only,
 *   W = 3 and 128, each side's cell its operations again until it has run
 *   at least 100 ms (300 in a full run), after one untimed pass of the
 *   headline's gets. And the fence's cost: an update with and without it.
 * - both: the fence's scopes, node 0 putting 8 bytes to node 1 and then
 *   fencing that pair or its thread's peers against the worker-wide fence
 *   (the fabric's flush of every peer).
 * Message-count predictions: the round trips an operation makes in
 * sequence times an 8-byte get's round trip measured in the same run. And
 * where a get's and a put's time goes: one counted pass of each read cell
 * and of the write-only ones (put_many, and each put alone), its
 * messages, handler calls, waits and wake-ups per operation, in the
 * JSON's env.
 *
 * Every figure is the median of R interleaved repetitions (ours first in
 * every other one, the anchor first in the rest), the JSON keeps each
 * repetition; figures and anchors: the case table below (--list). */
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
#define FENCE_GLOBAL "the same 8-byte put and a global fence (the fabric's flush of every peer)"

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
    {"loco_kv_get_vs_predicted/tcp/w=128",
     "predicted: 1 round trip per window of 128 (one message each way) + local share", "us", 0, KV, 0},
    {"loco_kv_put_vs_predicted/tcp", "predicted: 3 round trips per window of 3 puts (locks, writes, releases)", "us",
     0, KV, 0},
    {"loco_kv_put_vs_predicted/tcp/w=128",
     "predicted: 3 round trips per window of 128 puts (locks, writes, releases)", "us", 0, KV, 0},
    /* the narrower fences against the worker-wide one, after a put to one peer */
    {"loco_fence_pair_vs_global/shm", FENCE_GLOBAL, "us", 0, OBJECTS, 0},
    {"loco_fence_thread_vs_global/shm", FENCE_GLOBAL, "us", 0, OBJECTS, 0},
    {"loco_fence_pair_vs_global/tcp", FENCE_GLOBAL, "us", 0, KV, 0},
    {"loco_fence_thread_vs_global/tcp", FENCE_GLOBAL, "us", 0, KV, 0},
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

/* The fence scopes' figures on one fabric from us[r][scope] (pair,
 * thread, global). */
static void emit_scopes(const char *tr, double (*us)[3], int reps)
{
    double pair[MAX_REPS], thread[MAX_REPS], global[MAX_REPS];
    char name[64];
    for (int r = 0; r < reps; r++) {
        pair[r] = us[r][0];
        thread[r] = us[r][1];
        global[r] = us[r][2];
    }
    snprintf(name, sizeof name, "loco_fence_pair_vs_global/%s", tr);
    emit(name, pair, global, reps, "us", FENCE_GLOBAL, 0);
    snprintf(name, sizeof name, "loco_fence_thread_vs_global/%s", tr);
    emit(name, thread, global, reps, "us", FENCE_GLOBAL, 0);
}

/* ---- shm: barrier, lock, transactions ------------------------------------ */

static void objects(const loco_params_t *p, int reps)
{
    loco_cluster_t c;
    loco_start(&c, p);
    double rtt[MAX_REPS], bar[MAX_REPS], mbar[MAX_REPS], lk[MAX_REPS], mlk[MAX_REPS], tx[MAX_REPS],
        mtx[MAX_REPS], scopes[MAX_REPS][3];
    char why[3][512] = {"", "", ""};
    int ok[3] = {1, 1, 1};
    for (int r = 0; r < reps; r++) {
        double us, mops;
        rtt[r] = loco_rtt_us(&c);
        loco_fence_scopes_us(&c, scopes[r]);
        /* ours first in even repetitions, Open MPI's in odd ones */
        for (int side = 0; side < 2; side++) {
            if ((side == 0) == (r % 2 == 0)) {
                bar[r] = loco_barrier_us(&c);
                lk[r] = loco_lock_mops(&c);
                tx[r] = loco_txn_mops(&c);
                continue;
            }
            if (ok[0] && (ok[0] = loco_mpi(p->nodes, "barrier", p->barriers, 0, &us, &mops, why[0], 512) == 0))
                mbar[r] = us;
            if (ok[1] && (ok[1] = loco_mpi(p->nodes, "lock", p->lock_ops, 0, &us, &mops, why[1], 512) == 0))
                mlk[r] = mops;
            if (ok[2] &&
                (ok[2] = loco_mpi(p->nodes, "txn", p->txn_ops, p->accounts, &us, &mops, why[2], 512) == 0))
                mtx[r] = mops;
        }
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
    emit_scopes("shm", scopes, reps);
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

static void cell_name(char *name, size_t cap, const cell_t *cl)
{
    snprintf(name, cap, "loco_kv_vs_redis/tcp/%s/put=%d%%/w=%zu", cl->dist == LOCO_ZIPF ? "zipf0.99" : "uniform",
             cl->put_pct, cl->window);
}

/* The counted events of one pass of a cell, per operation (with
 * one_by_one each put alone), into the JSON's env under key and on
 * stderr. */
static void report_counts(loco_cluster_t *c, const loco_ops_t *o, size_t window, int one_by_one, const char *key)
{
    loco_kv_counts_t k;
    loco_kv_count(c, o, window, one_by_one, &k);
    dsm_report_env(&rep, key,
                   "{\"us\": %.4g, \"client_msgs_sent\": %.4g, \"client_msgs_recv\": %.4g, "
                   "\"server_msgs_recv\": %.4g, \"server_msgs_sent\": %.4g, \"server_handler_calls\": %.4g, "
                   "\"client_deferred\": %.4g, \"client_deferred_batches\": %.4g, \"client_waits\": %.4g, "
                   "\"client_sleeps\": %.4g, \"server_progress_wakeups\": %.4g, \"server_progress_cpu_us\": %.4g, "
                   "\"context_switches\": %.4g}",
                   k.us, k.client_sent, k.client_recv, k.server_recv, k.server_sent, k.server_dispatches, k.deferred,
                   k.deferred_batches, k.client_waits, k.client_sleeps, k.server_wakeups, k.server_cpu_us,
                   k.ctx_switches);
    fprintf(stderr,
            "dsm-bench-loco: %s, per op: %.3g us; client sent %.3g msgs, received %.3g; server received %.3g, "
            "sent %.3g, handler calls %.3g; deferred %.3g in %.3g batches; client waits %.3g, sleeps %.3g; "
            "server wake-ups %.3g, progress CPU %.3g us; context switches %.3g\n",
            key, k.us, k.client_sent, k.client_recv, k.server_recv, k.server_sent, k.server_dispatches, k.deferred,
            k.deferred_batches, k.client_waits, k.client_sleeps, k.server_wakeups, k.server_cpu_us, k.ctx_switches);
}

static void kv(const loco_params_t *p, int reps, const dsm_bench_opts_t *o)
{
    static const cell_t cells[] = {
        {LOCO_UNIFORM, 0, 128}, {LOCO_UNIFORM, 0, 3},   {LOCO_UNIFORM, 50, 128}, {LOCO_UNIFORM, 50, 3},
        {LOCO_UNIFORM, 100, 128}, {LOCO_UNIFORM, 100, 3}, {LOCO_ZIPF, 0, 128},  {LOCO_ZIPF, 0, 3},
        {LOCO_ZIPF, 50, 128},   {LOCO_ZIPF, 50, 3},     {LOCO_ZIPF, 100, 128},  {LOCO_ZIPF, 100, 3},
    };
    enum { NCELLS = sizeof cells / sizeof cells[0] };
    /* under --only, the cells its figures need: the headline and the window
     * of 128's prediction read cell 0, the window of 3's cell 1 */
    int want[NCELLS], fence = dsm_bench_wanted(o, "loco_kv_fence_cost/tcp"),
        scoped = dsm_bench_wanted(o, "loco_fence_pair_vs_global/tcp") ||
                 dsm_bench_wanted(o, "loco_fence_thread_vs_global/tcp");
    for (int k = 0; k < NCELLS; k++) {
        char name[96];
        cell_name(name, sizeof name, &cells[k]);
        want[k] = dsm_bench_wanted(o, name) ||
                  (k == 0 && (dsm_bench_wanted(o, "loco_kv_get_vs_redis/tcp") ||
                              dsm_bench_wanted(o, "loco_kv_get_vs_predicted/tcp/w=128"))) ||
                  (k == 1 && dsm_bench_wanted(o, "loco_kv_get_vs_predicted/tcp")) ||
                  (k == 4 && dsm_bench_wanted(o, "loco_kv_put_vs_predicted/tcp/w=128")) ||
                  (k == 5 && dsm_bench_wanted(o, "loco_kv_put_vs_predicted/tcp"));
    }
    loco_cluster_t c;
    loco_start(&c, p);
    char why[512];
    loco_redis_t *redis = loco_redis_start(c.nkeys, why, sizeof why);
    if (!redis)
        not_run("loco_kv_get_vs_redis/tcp", why);
    static double ours[NCELLS][MAX_REPS], theirs[NCELLS][MAX_REPS];
    double rtt[MAX_REPS], fon[MAX_REPS], foff[MAX_REPS], scopes[MAX_REPS][3];
    loco_ops_t ops[NCELLS];
    for (int k = 0; k < NCELLS; k++)
        loco_ops_make(&ops[k], (size_t)p->kv_ops, c.nkeys, cells[k].dist, cells[k].put_pct, 1000 + (uint64_t)k);
    /* one untimed pass of the headline's gets on each side: the first
     * touches of either side's table are no part of its rate */
    (void)loco_kv_mops(&c, &ops[0], cells[0].window, 0);
    int anchored = redis != NULL;
    if (redis && loco_redis_mops(redis, &ops[0], cells[0].window, 0) < 0) {
        not_run("loco_kv_get_vs_redis/tcp", "redis-server failed a command or closed the connection");
        loco_redis_stop(redis);
        redis = NULL;
        anchored = 0;
    }
    for (int r = 0; r < reps; r++) {
        rtt[r] = loco_rtt_us(&c);
        if (fence)
            loco_fence_us(&c, &fon[r], &foff[r]);
        if (scoped)
            loco_fence_scopes_us(&c, scopes[r]);
        for (int k = 0; k < NCELLS; k++) {
            if (!want[k])
                continue;
            /* ours first in even repetitions, redis's in odd ones */
            if (r % 2 == 0)
                ours[k][r] = loco_kv_mops(&c, &ops[k], cells[k].window, p->kv_min_ms);
            if (redis && (theirs[k][r] = loco_redis_mops(redis, &ops[k], cells[k].window, p->kv_min_ms)) < 0) {
                not_run("loco_kv_get_vs_redis/tcp", "redis-server failed a command or closed the connection");
                loco_redis_stop(redis);
                redis = NULL;
                anchored = 0;
            }
            if (r % 2 == 1)
                ours[k][r] = loco_kv_mops(&c, &ops[k], cells[k].window, p->kv_min_ms);
        }
    }
    loco_redis_stop(redis);
    if (want[0])
        report_counts(&c, &ops[0], cells[0].window, 0, "kv_get_w128_per_get");
    if (want[1])
        report_counts(&c, &ops[1], cells[1].window, 0, "kv_get_w3_per_get");
    /* an update's messages: put_many's window against each put alone */
    if (want[4]) {
        report_counts(&c, &ops[4], cells[4].window, 0, "kv_put_w128_per_put");
        report_counts(&c, &ops[4], cells[4].window, 1, "kv_put_one_by_one_per_put");
    }
    if (want[5])
        report_counts(&c, &ops[5], cells[5].window, 0, "kv_put_w3_per_put");
    double pred[MAX_REPS], per[MAX_REPS];
    for (int k = 0; k < NCELLS && anchored; k++) {
        if (!want[k])
            continue;
        char name[96];
        cell_name(name, sizeof name, &cells[k]);
        if (k == 0)
            emit("loco_kv_get_vs_redis/tcp", ours[k], theirs[k], reps, "Mops/s", REDIS, 1);
        emit(name, ours[k], theirs[k], reps, "Mops/s", REDIS, 1);
    }
    if (fence)
        emit("loco_kv_fence_cost/tcp", fon, foff, reps, "us", cases[8].anchor, 0);
    if (scoped)
        emit_scopes("tcp", scopes, reps);
    /* a window of 3 gets: one round trip for the remote ones in flight
     * together, the local share as loads */
    if (want[1]) {
        for (int r = 0; r < reps; r++) {
            per[r] = 3.0 / ours[1][r];   /* us per window of 3, uniform read-only */
            pred[r] = rtt[r];
        }
        emit("loco_kv_get_vs_predicted/tcp", per, pred, reps, "us", cases[9].anchor, 0);
    }
    /* a window of 128: its remote reads leave as one message and come back
     * as one, so one round trip, the local share as loads meanwhile */
    if (want[0]) {
        for (int r = 0; r < reps; r++) {
            per[r] = 128.0 / ours[0][r];
            pred[r] = rtt[r];
        }
        emit("loco_kv_get_vs_predicted/tcp/w=128", per, pred, reps, "us", cases[10].anchor, 0);
    }
    /* a window of puts (write-only, uniform): a round trip for the locks'
     * CAS, one for the remote writes (over tcp a completed write is placed,
     * so the fence adds none), one for the releases */
    for (int k = 4; k <= 5; k++) {
        if (!want[k])
            continue;
        for (int r = 0; r < reps; r++) {
            per[r] = (double)cells[k].window / ours[k][r];
            pred[r] = 3 * rtt[r];
        }
        emit(k == 4 ? "loco_kv_put_vs_predicted/tcp/w=128" : "loco_kv_put_vs_predicted/tcp", per, pred, reps, "us",
             cases[k == 4 ? 12 : 11].anchor, 0);
    }
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
    int shm = dsm_bench_transport_on(&o, DSM_TRANSPORT_SHM);
    int tcp = dsm_bench_transport_on(&o, DSM_TRANSPORT_TCP);
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
        kv(&q, reps, &o);
    }
    dsm_report_env_str(&rep, "loadavg_end", dsm_report_loadavg(load, sizeof load));
    int rc = 0;
    if (o.json && dsm_report_write_json(&rep, o.json) != 0)
        rc = 1;
    dsm_report_free(&rep);
    return rc;
}
