/* dsm-bench-kv5: the designs side by side on one key-value workload, one
 * fabric and one heap: own's kv and dir's kv (kvc's bucket table under
 * each protocol), CoRM (compact: one-sided reads, RPC writes), LOCO's
 * kvstore (chan) and the delegation store (deleg: each node's keys
 * entrusted to its runtime's thread, every operation a delegated request,
 * one outstanding per client as in the other designs).
 *
 * Setup: a coordinator and 3 nodes in this process, one client thread per
 * node, over shm and then tcp (loopback). A cell: 1024 keys of 8 bytes
 * (64 buckets for kvc), 32-byte values in every design, zipf 0.99 or
 * uniform keys, 100/95/50 % GETs; each
 * node runs the same stream under every design (kvc's streams: see
 * streams.c). A SET of own, dir and deleg adds its delta to the value
 * (kvc's SET, under the bucket lock; deleg's at the trustee); CoRM and
 * LOCO have no read-modify-write, their SET puts a value naming its key
 * and writer.
 *
 * Checked every run: own and dir's final table's checksum, and every
 * value of deleg's tables, equal the sequential model's (adds commute, so
 * every order gives it), no GET torn or missing; CoRM and LOCO: every GET
 * read a value of its own key, and every key's final value is one a
 * sequential order of the same operations leaves (its initial value, or
 * some node's last write to it). A failed check fails the program.
 *
 * Per cell and design: throughput (all nodes' operations over the longest
 * node's time), messages and bytes per operation (dsm_stats_t, every node,
 * around the timed phase: active messages sent, and over shm the one-sided
 * operations, loads and stores on a peer's mapping; over tcp a one-sided
 * operation is an emulated request and reply, counted once as the two
 * messages it is), and the throughput the messages predict: nodes /
 * (msgs/op x half the AM round trip measured in the same repetition).
 * Figures are medians of the repetitions (5; 3 with --quick, env
 * "repetitions"), designs interleaved and rotated each repetition; each
 * figure's anchor is own's kv in the same cell and repetition, so the
 * ratios read "design vs own".
 *
 * The protocol's prediction (issue: a baseline's cost must be explained by
 * its protocol): round trips per operation, each the wait for a peer's
 * thread to answer (an active message and its reply, or a post and its
 * answer: half the active messages; over shm, deleg's request batch and
 * its responses, two slot writes of two puts each), times the active-
 * message round trip with the cell's concurrency (every node's client
 * echoing to the next node at once: three clients on this host's cores, as
 * in the cell), measured before every repetition of every cell and taken
 * as the median of the run on that fabric. The figure
 * kv5_DESIGN_time_vs_predicted/TR/SKEW/MIX sets the measured time per
 * operation of a node (its stream's time over its operations) against
 * that prediction; a design far above it has a cost its messages do not
 * explain. A one-sided operation over shm is a load or store, no round
 * trip. The idle round trip (one client alone) is reported beside it, and
 * so are the fabric's sleeps and wake-ups per operation (a waiter that
 * slept on its worker, a progress thread woken): a round trip that had to
 * wait for the scheduler. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/driver.h"
#include "bench/kv5/kv5.h"
#include "bench/report.h"
#include "dsm/clock.h"
#include "dsm/log.h"
#include "dsm/sdk.h"

#define SECRET "kv5-bench-secret"
enum { MAX_REPS = DSM_FIGURE_MAX_REPS, KEYS = 1024, H_ECHO = DSM_AM_USER_FIRST };

typedef struct design {
    const char *name;
    int (*run)(dsm_harness_t *c, const kv5_streams_t *s, kv5_result_t *out);
    /* over shm: one-sided operations a round trip takes (deleg's slot
       writes: payload and flag, each way), 0 if they are no round trips */
    int shm_puts_per_round_trip;
} design_t;

static int run_own(dsm_harness_t *c, const kv5_streams_t *s, kv5_result_t *out)
{
    return kv5_run_kvc(c, s, "own", out);
}
static int run_dir(dsm_harness_t *c, const kv5_streams_t *s, kv5_result_t *out)
{
    return kv5_run_kvc(c, s, "dir", out);
}

/* own first: every figure's anchor */
static const design_t designs[] = {
    {"own", run_own, 0},
    {"dir", run_dir, 0},
    {"corm", kv5_run_corm, 0},
    {"loco", kv5_run_loco, 0},
    {"deleg", kv5_run_deleg, 4},
};
enum { NDESIGNS = sizeof designs / sizeof designs[0] };

static const struct { const char *name; double theta; } skews[] = {{"zipf", 0.99}, {"uniform", 0.0}};
static const struct { const char *name; uint32_t get_pct; } mixes[] = {{"ro", 100}, {"95", 95}, {"50", 50}};

enum { THROUGHPUT, MESSAGES, PREDICTED, RTT };
#define OWN_CELL "own's kv, same cell and repetition"
#define PRED_TIME "round trips/op x the AM round trip with 3 clients, median of the run"
#define IDLE_RTT "the AM round trip with one client, same repetition"
static const dsm_bench_case_t cases[] = {
    /* kv5/TR/SKEW/MIX/DESIGN: TR shm|tcp, SKEW zipf|uniform, MIX ro|95|50 (GET %),
     * DESIGN own|dir|corm|loco|deleg */
    {"kv5/*", OWN_CELL, "ops/s", 1, THROUGHPUT, 0},
    {"kv5_msgs_per_op/*", OWN_CELL, "msgs", 0, MESSAGES, 0},
    {"kv5_bytes_per_op/*", OWN_CELL, "B", 0, MESSAGES, 0},
    {"kv5_round_trips_per_op/*", OWN_CELL, "RT", 0, MESSAGES, 0},
    /* a waiter's sleep on its worker or a progress thread's wake-up: each
       a round trip that waited for the scheduler */
    {"kv5_wakeups_per_op/*", OWN_CELL, "wakeups", 0, MESSAGES, 0},
    /* measured against nodes / (msgs/op x half the AM round trip) */
    {"kv5_vs_predicted/*", "the throughput its messages predict (env am_rtt_us_TR)", "ops/s", 1, PREDICTED, 0},
    /* kv5_DESIGN_time_vs_predicted/TR/SKEW/MIX: a node's time per operation */
    {"kv5_*_time_vs_predicted/*", PRED_TIME, "us", 0, PREDICTED, 0},
    /* kv5_am_rtt_loaded/TR: the round trip with the cell's 3 clients */
    {"kv5_am_rtt_loaded/*", IDLE_RTT, "us", 0, RTT, 0},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static void die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-kv5: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

static void echo_handler(void *ctx, const dsm_am_msg_t *msg)
{
    (void)dsm_fabric_am_reply((dsm_fabric_t *)ctx, msg->src_rank, msg->request_id, DSM_OK, msg->data, msg->len);
}

/* Node `from`'s mean active-message round trip to the next node, in us. */
static double echo_us(dsm_harness_t *c, int from, int n)
{
    dsm_fabric_t *f = dsm_node_fabric(c->nodes[from]);
    uint32_t to = dsm_node_rank(c->nodes[(from + 1) % KV5_NODES]);
    uint64_t word = 42, back = 0, t0 = 0;
    for (int i = -n / 4; i < n; i++) {
        if (i == 0) t0 = dsm_now_ns();
        size_t got = 0;
        dsm_status_t st = dsm_fabric_am_request(f, to, H_ECHO, &word, sizeof word, &back, sizeof back, &got, 0);
        if (st != DSM_OK) die("echo", st);
    }
    return (double)(dsm_now_ns() - t0) / 1e3 / n;
}

/* Node 0's round trip to node 1, the only client. */
static double am_rtt_us(dsm_harness_t *c, int n) { return echo_us(c, 0, n); }

typedef struct echo_job {
    dsm_harness_t *c;
    int n;
    double us[KV5_NODES];
} echo_job_t;

static int echo_node(void *ctx, int i)
{
    echo_job_t *j = ctx;
    j->us[i] = echo_us(j->c, i, j->n);
    return 0;
}

/* The round trip with the cell's concurrency: every node's client echoing
 * to the next node at once; the mean of the nodes' means, in us. */
static double am_rtt_loaded_us(dsm_harness_t *c, int n)
{
    echo_job_t j = {.c = c, .n = n};
    kv5_result_t r;
    if (kv5_run_nodes(c, echo_node, &j, &r) != 0) die("echo", DSM_ERR_STATE);
    double sum = 0;
    for (int i = 0; i < KV5_NODES; i++) sum += j.us[i];
    return sum / KV5_NODES;
}

static const dsm_figure_t *emit(dsm_report_t *rep, const char *name, double v, const char *unit, const char *anchor,
                                double a, int higher)
{
    return dsm_report_add_print(rep, name, v, unit, anchor, a, higher);
}

typedef struct cell_reps {
    double tput[NDESIGNS][MAX_REPS], msgs[NDESIGNS][MAX_REPS], bytes[NDESIGNS][MAX_REPS];
    double pred[NDESIGNS][MAX_REPS];
    double rts[NDESIGNS][MAX_REPS], t_op[NDESIGNS][MAX_REPS], t_pred[NDESIGNS][MAX_REPS];
    double wake[NDESIGNS][MAX_REPS];
    int on[NDESIGNS];
    char name[64];
} cell_reps_t;

/* One figure against a same-run series (each the median over reps),
 * unless --only leaves it out or `skip_zero` and the anchor is 0. */
static void cell_figure(dsm_report_t *rep, const dsm_bench_opts_t *o, const char *name, const double *ours,
                        const double *anchor, size_t n, const char *unit, const char *what, int higher, int skip_zero)
{
    double a = dsm_report_median(anchor, n);
    if (!dsm_bench_wanted(o, name) || (skip_zero && a <= 0)) return;
    dsm_report_reps(rep, emit(rep, name, dsm_report_median(ours, n), unit, what, a, higher), ours, anchor, n);
}

static void report_cell(dsm_report_t *rep, const dsm_bench_opts_t *o, const char *cell, const cell_reps_t *r,
                        const int *on, int reps)
{
    char name[96];
    size_t n = (size_t)reps;
    for (int d = 0; d < NDESIGNS; d++) {
        if (!on[d]) continue;
        /* each against own's in the same cell */
        const struct {
            const char *prefix, *unit;
            const double *series;
            int higher;
        } per_cell[] = {
            {"kv5", "ops/s", r->tput[0], 1},         {"kv5_msgs_per_op", "msgs", r->msgs[0], 0},
            {"kv5_bytes_per_op", "B", r->bytes[0], 0}, {"kv5_round_trips_per_op", "RT", r->rts[0], 0},
            {"kv5_wakeups_per_op", "wakeups", r->wake[0], 0},
        };
        for (size_t k = 0; k < sizeof per_cell / sizeof per_cell[0]; k++) {
            snprintf(name, sizeof name, "%s/%s/%s", per_cell[k].prefix, cell, designs[d].name);
            const double *ours = per_cell[k].series + (size_t)d * MAX_REPS;
            cell_figure(rep, o, name, ours, per_cell[k].series, n, per_cell[k].unit, OWN_CELL, per_cell[k].higher,
                        0);
        }
        /* measured against what its round trips predict; none where it has
           no round trip (shm's one-sided reads are loads) */
        snprintf(name, sizeof name, "kv5_%s_time_vs_predicted/%s", designs[d].name, cell);
        cell_figure(rep, o, name, r->t_op[d], r->t_pred[d], n, "us", PRED_TIME, 0, 1);
        /* no prediction where a design sent no message (shm's one-sided
           reads are loads): the messages do not bound it */
        snprintf(name, sizeof name, "kv5_vs_predicted/%s/%s", cell, designs[d].name);
        cell_figure(rep, o, name, r->tput[d], r->pred[d], n, "ops/s",
                    "the throughput its messages predict (env am_rtt_us_TR)", 1, 1);
    }
}

static void measure_transport(dsm_transport_t tr, const dsm_bench_opts_t *o, int reps, uint64_t nops,
                              dsm_report_t *rep)
{
    const char *trn = dsm_transport_name(tr);
    dsm_harness_t c;
    dsm_harness_bench_init(&c, tr, SECRET, 64u << 20, 0);
    c.attach = kv5_deleg_attach;
    /* as dsm-bench-drust: the host runs other jobs beside these 3 nodes on
       2 cores, so a slow peer is not taken for a dead one */
    c.op_timeout_ms = 60000;
    c.peer_timeout_ms = 20000;
    dsm_status_t st = dsm_harness_start(&c, KV5_NODES);
    if (st != DSM_OK) die("cluster", st);
    for (int i = 0; i < KV5_NODES; i++) {
        dsm_fabric_t *f = dsm_node_fabric(c.nodes[i]);
        if ((st = dsm_fabric_am_register(f, H_ECHO, echo_handler, f)) != DSM_OK) die("echo handler", st);
    }
    double rtts[64], loaded[64];
    size_t nrtt = 0, ncells = 0;
    enum { NCELLS = (sizeof skews / sizeof skews[0]) * (sizeof mixes / sizeof mixes[0]) };
    cell_reps_t *cells = calloc(NCELLS, sizeof *cells);
    if (cells == NULL) die("cells", DSM_ERR_NOMEM);
    for (size_t si = 0; si < sizeof skews / sizeof skews[0]; si++)
        for (size_t mi = 0; mi < sizeof mixes / sizeof mixes[0]; mi++) {
            char cell[64], name[96];
            snprintf(cell, sizeof cell, "%s/%s/%s", trn, skews[si].name, mixes[mi].name);
            /* a design runs when --only names one of its figures here; own
               (the anchor) whenever another does */
            int on[NDESIGNS], any = 0;
            static const char *const kinds[] = {"kv5", "kv5_msgs_per_op", "kv5_bytes_per_op", "kv5_vs_predicted",
                                                "kv5_round_trips_per_op", "kv5_wakeups_per_op"};
            for (int d = 0; d < NDESIGNS; d++) {
                snprintf(name, sizeof name, "kv5_%s_time_vs_predicted/%s", designs[d].name, cell);
                on[d] = dsm_bench_wanted(o, name);
                for (size_t q = 0; q < sizeof kinds / sizeof kinds[0]; q++) {
                    snprintf(name, sizeof name, "%s/%s/%s", kinds[q], cell, designs[d].name);
                    on[d] |= dsm_bench_wanted(o, name);
                }
                any |= on[d];
            }
            if (!any) continue;
            on[0] = 1;
            kv5_cell_t k = {.keys = KEYS, .theta = skews[si].theta, .get_pct = mixes[mi].get_pct, .nops = nops,
                            .seed = 42};
            kv5_streams_t s;
            if (kv5_streams_make(&s, &k) != 0) die("streams", DSM_ERR_NOMEM);
            if (ncells == NCELLS) die("cells", DSM_ERR_STATE);
            cell_reps_t *rp = &cells[ncells];
            memset(rp, 0, sizeof *rp);
            for (int rep_i = 0; rep_i < reps; rep_i++) {
                double rtt = am_rtt_us(&c, o->quick ? 200 : 1000);
                double rtt3 = am_rtt_loaded_us(&c, o->quick ? 200 : 1000);
                if (nrtt < sizeof rtts / sizeof rtts[0]) {
                    rtts[nrtt] = rtt;
                    loaded[nrtt++] = rtt3;
                }
                for (int dd = 0; dd < NDESIGNS; dd++) {
                    int d = (dd + rep_i) % NDESIGNS;   /* rotated: drift hits every design alike */
                    if (!on[d]) continue;
                    kv5_result_t res = {0};
                    if (designs[d].run(&c, &s, &res) != 0) {
                        fprintf(stderr, "dsm-bench-kv5: %s, %s: the check failed\n", cell, designs[d].name);
                        exit(1);
                    }
                    double ops = res.ops > 0 ? res.ops : (double)KV5_NODES * (double)nops;
                    int shm = tr == DSM_TRANSPORT_SHM;
                    rp->tput[d][rep_i] = ops / (res.seconds > 0 ? res.seconds : 1e-9);
                    /* over tcp the one-sided operations are among the messages */
                    rp->msgs[d][rep_i] = (res.am + (shm ? res.onesided : 0)) / ops;
                    rp->bytes[d][rep_i] = (res.am_bytes + (shm ? res.onesided_bytes : 0)) / ops;
                    double t_op = rp->msgs[d][rep_i] * rtt / 2;   /* us per op on one node */
                    rp->pred[d][rep_i] = t_op > 0 ? KV5_NODES * 1e6 / t_op : 0;
                    int ppr = shm ? designs[d].shm_puts_per_round_trip : 0;
                    rp->rts[d][rep_i] = (res.am / 2 + (ppr ? res.onesided / ppr : 0)) / ops;
                    /* a node's time per op: its stream's time over its ops */
                    rp->t_op[d][rep_i] = res.seconds * 1e6 / (ops / KV5_NODES);
                    rp->wake[d][rep_i] = res.wakeups / ops;
                }
            }
            memcpy(rp->on, on, sizeof on);
            snprintf(rp->name, sizeof rp->name, "%s", cell);
            ncells++;
            kv5_streams_free(&s);
        }
    /* The predictions take the round trip with 3 clients as the median of
       every repetition of every cell here: one burst of echoes swings with
       what else the host runs at that moment, the median of all of them,
       interleaved with the cells, is the round trip the cells saw. */
    double rtt3 = nrtt ? dsm_report_median(loaded, nrtt) : 0;
    for (size_t k = 0; k < ncells; k++) {
        cell_reps_t *rp = &cells[k];
        for (int d = 0; d < NDESIGNS; d++)
            for (int i = 0; i < reps; i++) rp->t_pred[d][i] = rp->rts[d][i] * rtt3;
        report_cell(rep, o, rp->name, rp, rp->on, reps);
    }
    free(cells);
    kv5_corm_close();
    kv5_loco_close();
    kv5_deleg_close();
    char key[64];
    snprintf(key, sizeof key, "am_rtt_us_%s", trn);
    dsm_report_env_spread(rep, key, rtts, nrtt);
    snprintf(key, sizeof key, "am_rtt_loaded_us_%s", trn);
    dsm_report_env_spread(rep, key, loaded, nrtt);
    /* what 3 clients at once make of a round trip on this host */
    char name[64];
    snprintf(name, sizeof name, "kv5_am_rtt_loaded/%s", trn);
    if (nrtt && dsm_bench_wanted(o, name))
        dsm_report_reps(rep,
                        emit(rep, name, dsm_report_median(loaded, nrtt), "us", IDLE_RTT,
                             dsm_report_median(rtts, nrtt), 0),
                        loaded, rtts, nrtt);
    for (int i = 0; i < KV5_NODES; i++) (void)dsm_fabric_am_register(dsm_node_fabric(c.nodes[i]), H_ECHO, NULL, NULL);
    dsm_harness_stop(&c);
    kv5_deleg_destroy();
}

int main(int argc, char **argv)
{
    const char *ops = NULL;
    const dsm_bench_flag_t flags[] = {{"--ops", "N per node", &ops}};
    dsm_bench_opts_t o;
    int done = dsm_bench_parse(argc, argv, cases, N_CASES, flags, 1, &o);
    if (done >= 0) return done;
    int reps = o.runs ? o.runs : o.quick ? 3 : 5;
    if (reps > MAX_REPS) {
        fprintf(stderr, "dsm-bench-kv5: --runs at most %d\n", MAX_REPS);
        return 2;
    }
    uint64_t nops = o.quick ? 400 : 3000;
    if (ops) {
        char *end;
        nops = strtoull(ops, &end, 10);
        if (*end || nops == 0 || nops > 10000000ull) {
            fprintf(stderr, "dsm-bench-kv5: --ops takes a positive count, not %s\n", ops);
            return 2;
        }
    }
    dsm_set_log_level(1);
    dsm_report_t rep;
    dsm_report_init(&rep, "kv5");
    char load[32];
    dsm_report_env(&rep, "cpus", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    dsm_report_env_str(&rep, "loadavg", dsm_report_loadavg(load, sizeof load));
    dsm_report_env(&rep, "nodes", "%d", KV5_NODES);
    dsm_report_env(&rep, "threads_per_node", "1");
    dsm_report_env(&rep, "quick", "%d", o.quick);
    dsm_report_env(&rep, "repetitions", "%d", reps);
    dsm_report_env(&rep, "ops_per_node", "%llu", (unsigned long long)nops);
    dsm_report_env(&rep, "keys", "%d", KEYS);
    dsm_report_env(&rep, "key_bytes", "8");
    dsm_report_env(&rep, "value_bytes", "%d", KV5_VALUE_WORDS * 8);
    dsm_report_env(&rep, "designs", "[\"own\", \"dir\", \"corm\", \"loco\", \"deleg\"]");
    dsm_report_env(&rep, "designs_missing", "[]");
    dsm_report_env_str(&rep, "deleg_runtime", "1 thread per node, idle_sleep; its runtime's start and join are inside the timed phase");
    dsm_report_env_str(&rep, "anchor", "own's kv in the same cell and repetition");
    dsm_report_env_str(&rep, "kvc_lock", "cas over shm, deleg over tcp (kv's lock=auto)");
    dsm_report_print_header(stdout);
    const dsm_transport_t trs[2] = {DSM_TRANSPORT_SHM, DSM_TRANSPORT_TCP};
    for (int ti = 0; ti < 2; ti++) {
        if (!dsm_bench_transport_on(&o, trs[ti])) continue;
        measure_transport(trs[ti], &o, reps, nops, &rep);
    }
    int rc = 0;
    if (o.json && dsm_report_write_json(&rep, o.json) != 0) rc = 1;
    dsm_report_free(&rep);
    return rc;
}
