/* dsm-bench-corm: CoRM's read paths and its memory figures.
 *
 * Latency (a coordinator and two nodes in this process: node 0 serves a
 * store, node 1 reads it; over shm node 1 maps the server's memfd, over tcp
 * every one-sided read is a message the server's progress thread answers):
 * per object size, a validated direct_read against the raw fabric get of
 * the same slot (the same bytes, unvalidated) and against the RPC read.
 * Each figure is measured R times, the three paths interleaved within a
 * repetition, and reported as the median over repetitions of the mean per
 * operation. On shm the raw get of the store's region goes through UCX
 * (cma: a system call per get) because the fabric does not map registered
 * memory; the mirror's memcpy is what direct_read pays instead.
 *
 * Throughput (the same cluster): YCSB-style 32-byte objects, 50:50 and
 * 95:5 read:write, uniform and zipf 0.99 keys, one client thread; reads
 * by direct_read (falling back to get) against reads by RPC, writes by RPC
 * in both. Beside each, the server node's CPU time per operation, read
 * from its own threads (its progress thread, which serves every request
 * and over tcp every emulated get, and its store thread): what the
 * one-sided path saves the server; also per request it served, and (env,
 * stdout) the client's progress thread and the rest of the process apart.
 * The headline is 50:50 uniform, the mix of the paper's ~1.8x (1,250K
 * against 700K req/s, §4.2.2); 95:5 stands beside it. With one client the
 * 50:50 ratio is at most 2 t_rpc / (t_write + t_direct), below 2; the
 * paper's ratio comes from a server bound by its CPU, which
 * corm_server_cpu_bound_vs_rpc shows: operations per second of server CPU.
 * The latency phase prints the client thread's and the server's CPU per
 * operation of each path, which shows where a tcp direct read's time goes
 * (one message served by the server's progress thread, as an RPC is).
 *
 * Compaction run (node 0 here, node 1 a process of its own, as a
 * deployment's client is): a scan_read client on node 1 reads
 * the live quarter of a fragmented store in a loop while node 0 compacts it
 * round after round, then keeps compacting under churn (fillers allocated
 * into the free slots and mostly freed again) for as long as the phases
 * before and after; completed reads are counted per 5 ms. Two controls
 * take their turns with the quiet and compacting windows: the compacting
 * thread only spinning, then spinning and remapping pages of a file of its
 * own, one a call, as often as the compaction merged blocks (what the
 * remaps would cost the reads unbatched, against the spinner; the store
 * drops a batch's pages in one call). Reported: the
 * read rate during compaction against the rate before it, and (on stderr
 * and in env) the longest run of empty 5 ms buckets in each phase: on a
 * loaded machine the scheduler makes gaps of its own, so a gap during
 * compaction means something only if it is longer than those before it.
 * The time series (reads/s per 5 ms, the compaction window shaded) goes to
 * the JSON as series "corm_scan_read_over_time/TRANSPORT", for the plot;
 * env "compaction_run_TRANSPORT" has the remap notices the round sent and
 * their mean round trip, and "compaction_run_breakdown_TRANSPORT", per kind
 * of window, where the reads went: the reader's CPU share and its reads
 * per CPU second (a read's own cost), the other threads' CPU shares (the
 * bench thread, the store thread the rounds run on, both progress
 * threads), the reader's faults, preemptions, scan RPCs, locked and
 * torn reads, and waits that slept, and the server progress thread's
 * wake-ups and CPU per read (over tcp each read is one wake-up there,
 * and on a virtual machine what a wake-up costs moves with the host).
 *
 * Active memory (one store, no cluster): allocate a spike of objects of one
 * class, free 50/75/90% at random, then compact until a round merges
 * nothing; active memory is the blocks holding objects. Compared: none (no
 * compaction), CoRM-0 (offset-only, Mesh), CoRM-8, CoRM-16, and the ideal
 * compactor (the live objects packed into the fewest blocks).
 *
 * The figures and their anchors: the case table below (--list prints it). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include "bench/corm/shootdown.h"
#include "bench/driver.h"
#include "bench/report.h"
#include "compact/internal.h"
#include "compact/layout.h"
#include "compact/store.h"
#include "dsm/compact.h"
#include "dsm/coord.h"
#include "dsm/log.h"
#include "dsm/node.h"
#include "dsm/stats.h"
#include "harness/cluster.h"
#include "dsm/runtime.h"
#include "util/clock.h"

#define SECRET "corm-bench-secret"

static void die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-corm: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

static uint64_t rng = 0x853c49e6748fea9bull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static uint64_t next_u64(void) { return next(); }

typedef struct cluster {
    dsm_harness_t h;
    dsm_compact_t *c[2];
} cluster_t;

/* The server's progress thread, chosen per transport as measured (idle,
 * quick, 50:50 direct/RPC): on shm it polls, as CoRM's server threads do
 * (2.07 polling against 0.32 blocking: a blocking server pays a wake-up for
 * each write that finds it asleep, and with direct reads every write does);
 * on tcp, where a direct read is itself a message to the server, it blocks
 * (0.99 against 0.71 polling). --server-progress overrides both. */
static int server_progress = -1;   /* -1: per transport; else a dsm_progress_mode_t */

static dsm_progress_mode_t server_progress_for(dsm_transport_t tr)
{
    if (server_progress >= 0)
        return (dsm_progress_mode_t)server_progress;
    return tr == DSM_TRANSPORT_SHM ? DSM_PROGRESS_BUSY : DSM_PROGRESS_BLOCKING;
}

/* Before node i joins: its CoRM store, the range on node 0 (the server). */
static dsm_status_t attach_compact(void *ctx, int i, dsm_node_t *node)
{
    (void)ctx;
    dsm_compact_config_t c;
    dsm_compact_config_init(&c);
    c.range_size = i == 0 ? 4u << 20 : 0;
    return dsm_compact_attach(node, &c);
}

/* The cluster's settings, in this process and in the compaction run's
 * reader: server_mode is node 0's; the client (node 1) keeps its default. */
static void cluster_settings(dsm_harness_t *h, dsm_transport_t tr, dsm_progress_mode_t server_mode)
{
    dsm_harness_bench_init(h, tr, SECRET, 0, server_mode == DSM_PROGRESS_BUSY ? 1u : 0);
    h->blocking_mask = server_mode == DSM_PROGRESS_BLOCKING ? 1u : 0;
    h->op_timeout_ms = 5000;
    h->peer_timeout_ms = 5000;
    h->wait_ms = 10000;
    h->attach = attach_compact;
}

/* The server (node 0) and, if n is 2, the client (node 1), in this process. */
static void cluster_start_n(cluster_t *k, dsm_transport_t tr, dsm_progress_mode_t server_mode, int n)
{
    cluster_settings(&k->h, tr, server_mode);
    dsm_status_t st = dsm_harness_start(&k->h, n);
    if (st != DSM_OK)
        die("cluster", st);
    for (int i = 0; i < 2; i++)
        k->c[i] = i < n ? dsm_compact_of(k->h.nodes[i]) : NULL;
}

static void cluster_start_with(cluster_t *k, dsm_transport_t tr, dsm_progress_mode_t server_mode)
{
    cluster_start_n(k, tr, server_mode, 2);
}

static void cluster_start(cluster_t *k, dsm_transport_t tr) { cluster_start_with(k, tr, server_progress_for(tr)); }

/* The compaction run's server progress thread: it blocks on both
 * transports. Over shm no read reaches it (they are loads from the
 * mirror), so a polling one would only take the core the compaction runs
 * on; CoRM's compaction leader is one of its polling workers, so there
 * compacting takes a poller's CPU, not one more core. Measured (quick, a
 * loaded 2-core machine, 5 pairs of windows): in the commit message. */
static dsm_progress_mode_t run_progress(void)
{
    return server_progress >= 0 ? (dsm_progress_mode_t)server_progress : DSM_PROGRESS_BLOCKING;
}

static void cluster_stop(cluster_t *k)
{
    dsm_harness_stop(&k->h);
}

enum { MAX_REPS = 15 };

static double thread_cpu_s(pthread_t t);
static double server_cpu_s(cluster_t *k);

/* Mean ns per operation of `ops` calls of one path; *cpu (if set): the
 * calling thread's and the server node's CPU ns per operation. */
static double run_path(cluster_t *k, int path, dsm_compact_ptr_t *p, uint32_t slot, int ops, double cpu[2])
{
    static uint8_t buf[8192];
    size_t len;
    dsm_compact_ptr_fields_t f;
    dsm_compact_ptr_decode(p, &f);
    double c0 = thread_cpu_s(pthread_self()), s0 = server_cpu_s(k);
    uint64_t t0 = dsm_now_ns();
    for (int i = 0; i < ops; i++) {
        dsm_status_t st;
        if (path == 0)
            st = dsm_compact_direct_read(k->c[1], p, buf, sizeof buf, &len);
        else if (path == 1)
            st = dsm_fabric_get(dsm_node_fabric(k->h.nodes[1]), 0, 1, f.offset, buf, slot);
        else
            st = dsm_compact_read(k->c[1], p, buf, sizeof buf, &len);
        if (st != DSM_OK)
            die("read", st);
    }
    double ns = (double)(dsm_now_ns() - t0) / ops;
    if (cpu) {
        cpu[0] = (thread_cpu_s(pthread_self()) - c0) * 1e9 / ops;
        cpu[1] = (server_cpu_s(k) - s0) * 1e9 / ops;
    }
    return ns;
}

static void latency(dsm_report_t *rep, dsm_transport_t tr, int reps, int quick)
{
    cluster_t k;
    cluster_start(&k, tr);
    static const uint32_t sizes[] = {8, 32, 256, 1024, 4000};
    int nsizes = quick ? 4 : 5;
    const uint32_t *use = sizes;
    static const uint32_t qsizes[] = {8, 32, 256, 4000};
    if (quick)
        use = qsizes;
    for (int s = 0; s < nsizes; s++) {
        uint32_t size = use[s];
        dsm_compact_ptr_t p;
        dsm_status_t st = dsm_compact_alloc(k.c[1], 0, size, &p);
        if (st != DSM_OK)
            die("alloc", st);
        uint8_t data[4096];
        memset(data, 0x3c, sizeof data);
        if ((st = dsm_compact_write(k.c[1], &p, data, size)) != DSM_OK)
            die("write", st);
        dsm_compact_ptr_fields_t f;
        dsm_compact_ptr_decode(&p, &f);
        uint32_t slot = dsm_compact_class_slot(f.size_class);
        int ops = tr == DSM_TRANSPORT_SHM ? (quick ? 20000 : 100000) : (quick ? 500 : 2000);
        double v[3][MAX_REPS], cpu[3][2][MAX_REPS];
        for (int path = 0; path < 3; path++)
            (void)run_path(&k, path, &p, slot, ops / 10 + 1, NULL);   /* warm up */
        for (int r = 0; r < reps; r++)
            for (int path = 0; path < 3; path++) {
                double c[2];
                v[path][r] = run_path(&k, path, &p, slot, ops, c);
                cpu[path][0][r] = c[0];
                cpu[path][1][r] = c[1];
            }
        /* where an operation's time goes: the client thread's CPU and the
         * server node's, per path (the rest is waiting: wire, wake-ups) */
        double mc[3][2];
        for (int path = 0; path < 3; path++)
            for (int q = 0; q < 2; q++)
                mc[path][q] = dsm_report_median(cpu[path][q], reps);
        double direct = dsm_report_median(v[0], reps), get = dsm_report_median(v[1], reps),
               rpc = dsm_report_median(v[2], reps);
        char name[96], anchor[64];
        const char *tn = dsm_transport_name(tr);
        snprintf(name, sizeof name, "corm_direct_read_vs_get/%s/%uB", tn, size);
        snprintf(anchor, sizeof anchor, "fabric get of the %u-byte slot", slot);
        const dsm_figure_t *fg = dsm_report_add(rep, name, direct / 1000, "us", anchor, get / 1000, 0);
        if (fg)
            dsm_report_print_figure(stdout, fg);
        snprintf(name, sizeof name, "corm_direct_read_latency_vs_rpc/%s/%uB", tn, size);
        fg = dsm_report_add(rep, name, direct / 1000, "us", "RPC read (dsm_compact_read)", rpc / 1000, 0);
        if (fg)
            dsm_report_print_figure(stdout, fg);
        char key[64];
        snprintf(key, sizeof key, "latency_cpu_ns_%s_%uB", tn, size);
        dsm_report_env(rep, key,
                       "{\"direct_read\": {\"client\": %.0f, \"server\": %.0f}, \"get\": {\"client\": %.0f, "
                       "\"server\": %.0f}, \"rpc_read\": {\"client\": %.0f, \"server\": %.0f}}",
                       mc[0][0], mc[0][1], mc[1][0], mc[1][1], mc[2][0], mc[2][1]);
        printf("  CPU ns per op (client thread / server node): direct_read %.0f / %.0f, get %.0f / %.0f, "
               "RPC read %.0f / %.0f\n",
               mc[0][0], mc[0][1], mc[1][0], mc[1][1], mc[2][0], mc[2][1]);
        if (size == 32) {
            /* the headlines: 32-byte objects (YCSB-style) */
            snprintf(name, sizeof name, "corm_direct_read_vs_get/%s", tn);
            snprintf(anchor, sizeof anchor, "fabric get of the %u-byte slot", slot);
            if ((fg = dsm_report_add(rep, name, direct / 1000, "us", anchor, get / 1000, 0)))
                dsm_report_print_figure(stdout, fg);
        }
    }
    cluster_stop(&k);
}

/* ---- throughput ---------------------------------------------------------------------- */

enum { KEYS = 1000 };

static double cpu_s(int who)
{
    if (who == 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    }
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU seconds of one thread of this process. */
static double thread_cpu_s(pthread_t t)
{
    clockid_t id;
    struct timespec ts;
    if (pthread_getcpuclockid(t, &id) != 0 || clock_gettime(id, &ts) != 0)
        return 0;
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU seconds of a node's progress thread. */
static double progress_cpu_s(dsm_node_t *n)
{
    dsm_stats_t st;
    dsm_fabric_stats(dsm_node_fabric(n), &st);
    return st.progress_cpu_ns / 1e9;
}

/* The server node's CPU: its progress thread (which serves every request
 * and, over tcp, every emulated get) and its store thread. */
static double server_cpu_s(cluster_t *k)
{
    return progress_cpu_s(k->h.nodes[0]) + (k->c[0]->thread_started ? thread_cpu_s(k->c[0]->thread) : 0);
}

/* The client node's progress thread (it stands down while the client
 * thread waits for a reply, and wakes a moment after the wait ends). */
static double client_progress_cpu_s(cluster_t *k)
{
    return progress_cpu_s(k->h.nodes[1]);
}

typedef struct ycsb_cpu {
    double server, client_progress, other;   /* CPU seconds per operation */
    double per_request;                      /* the server's CPU per request it served */
    double wakeups;                          /* the server's progress thread woke from sleep, per request */
} ycsb_cpu_t;

static uint64_t node_wakeups(cluster_t *k, int rank)
{
    dsm_stats_t st;
    dsm_fabric_stats(dsm_node_fabric(k->h.nodes[rank]), &st);
    return st.progress_wakeups;
}
static uint64_t server_wakeups(cluster_t *k) { return node_wakeups(k, 0); }

/* ops/s and CPU seconds per op, by who spent them, for one run. */
/* One YCSB operation from node 1: a read by direct_read (falling back to
 * get) or by RPC, or a 32-byte write by RPC. */
static uint8_t ycsb_data[32];   /* what writes write (0x5a, set by throughput()) */
static void ycsb_op(cluster_t *k, dsm_compact_ptr_t *p, int is_read, int direct)
{
    uint8_t buf[64];
    size_t len;
    dsm_status_t st;
    if (!is_read)
        st = dsm_compact_write(k->c[1], p, ycsb_data, sizeof ycsb_data);
    else if (!direct)
        st = dsm_compact_read(k->c[1], p, buf, sizeof buf, &len);
    else if ((st = dsm_compact_direct_read(k->c[1], p, buf, sizeof buf, &len)) != DSM_OK)
        st = dsm_compact_get(k->c[1], p, buf, sizeof buf, &len);
    if (st != DSM_OK)
        die("ycsb op", st);
}

/* The cost of one dsm_now_ns() call, taken off each timed operation: the
 * fastest of many short batches, since one long batch on a busy host
 * includes the times it was descheduled (once tens of microseconds a
 * call, which took every write's time to zero). */
static double clock_ns(void)
{
    static double ns = -1;
    if (ns < 0) {
        enum { BATCHES = 50, CALLS = 1000 };
        volatile uint64_t sink = 0;
        for (int b = 0; b < BATCHES; b++) {
            uint64_t t0 = dsm_now_ns();
            for (int i = 0; i < CALLS; i++)
                sink = dsm_now_ns();
            double per_call = (double)(dsm_now_ns() - t0) / CALLS;
            if (ns < 0 || per_call < ns)
                ns = per_call;
        }
        (void)sink;
    }
    return ns;
}

/* One mix of the YCSB run: the mean ns of a read and of a write in it
 * (split[0], split[1]), by the path the mode uses, and the client progress
 * thread's wake-ups from sleep per write (split[2]: a write's reply that
 * finds it asleep waits for the wake-up). Each write is timed on its own;
 * the mix's reads are then timed as one pass, since a direct read over shm
 * costs about what a clock read does and per-read timing would measure the
 * clock. Run apart from the untimed runs the ratios come from, so the clock
 * costs those nothing. */
static void ycsb_split(cluster_t *k, dsm_compact_ptr_t *ptrs, const uint32_t *keys, const uint8_t *is_read, int ops,
                       int direct, double split[3])
{
    uint64_t w0 = node_wakeups(k, 1);
    uint64_t write_ns = 0, writes = 0, reads = 0;
    for (int i = 0; i < ops; i++) {
        if (is_read[i]) {
            ycsb_op(k, &ptrs[keys[i]], 1, direct);
            continue;
        }
        uint64_t t0 = dsm_now_ns();
        ycsb_op(k, &ptrs[keys[i]], 0, direct);
        write_ns += dsm_now_ns() - t0;
        writes++;
    }
    split[2] = writes ? (double)(node_wakeups(k, 1) - w0) / (double)writes : 0;
    uint64_t t0 = dsm_now_ns();
    for (int i = 0; i < ops; i++)
        if (is_read[i]) {
            ycsb_op(k, &ptrs[keys[i]], 1, direct);
            reads++;
        }
    uint64_t read_ns = dsm_now_ns() - t0;
    split[0] = reads ? (double)read_ns / (double)reads : 0;
    double w = writes ? (double)write_ns / (double)writes - clock_ns() : 0;
    split[1] = w > 0 ? w : 0;
}

static void ycsb_run(cluster_t *k, dsm_compact_ptr_t *ptrs, const uint32_t *keys, const uint8_t *is_read, int ops,
                     int direct, int served_gets, double *rate, ycsb_cpu_t *cpu)
{
    double c0 = cpu_s(0), t0 = cpu_s(1), s0 = server_cpu_s(k), p0 = client_progress_cpu_s(k);
    uint64_t requests = 0, w0 = server_wakeups(k);
    uint64_t start = dsm_now_ns();
    for (int i = 0; i < ops; i++) {
        ycsb_op(k, &ptrs[keys[i]], is_read[i], direct);
        requests += !is_read[i] || !direct || served_gets;
    }
    double secs = (double)(dsm_now_ns() - start) / 1e9;
    double srv = server_cpu_s(k) - s0, prog = client_progress_cpu_s(k) - p0;
    double others = (cpu_s(0) - c0) - (cpu_s(1) - t0) - srv - prog;
    *rate = ops / secs;
    cpu->server = srv / ops;
    cpu->client_progress = prog / ops;
    cpu->other = (others > 0 ? others : 0) / ops;
    cpu->per_request = requests ? srv / requests : 0;
    cpu->wakeups = requests ? (double)(server_wakeups(k) - w0) / requests : 0;
}

/* The anchor of the RPC path's prediction: a bare active-message round
 * trip to node 0, answered in its handler with the bytes it carried. */
enum { RTT_BYTES = 48 };   /* between a read request (28 B) and its reply (64 B) */

static void on_echo(void *ctx, const dsm_am_msg_t *msg)
{
    if (msg->request_id)
        (void)dsm_fabric_am_reply(ctx, msg->src_rank, msg->request_id, DSM_OK, msg->data, msg->len);
}

/* Mean ns of `ops` round trips from node 1. */
static double round_trip_ns(cluster_t *k, int ops)
{
    uint8_t out[RTT_BYTES] = {0}, in[RTT_BYTES];
    size_t rl;
    uint64_t t0 = dsm_now_ns();
    for (int i = 0; i < ops; i++) {
        dsm_status_t st = dsm_fabric_am_request(dsm_node_fabric(k->h.nodes[1]), 0, DSM_AM_USER_FIRST, out, sizeof out,
                                                in, sizeof in, &rl, 0);
        if (st != DSM_OK)
            die("round trip", st);
    }
    return (double)(dsm_now_ns() - t0) / ops;
}

/* The YCSB runs. variant 0: every mix and figure with the server's
 * progress thread as chosen per transport; variant 1 (shm): only the 50:50
 * uniform headline again, the server's progress thread blocking (what the
 * headline would be without a polling server). */
/* zipf 0.99 over the keys, by its CDF */
static void zipf_cdf(double cdf[KEYS])
{
    double sum = 0, acc = 0;
    for (int i = 0; i < KEYS; i++)
        sum += 1.0 / pow(i + 1, 0.99);
    for (int i = 0; i < KEYS; i++) {
        acc += 1.0 / pow(i + 1, 0.99) / sum;
        cdf[i] = acc;
    }
}

static void ycsb_keys(uint32_t *keys, int ops, int zipf, const double cdf[KEYS])
{
    for (int i = 0; i < ops; i++) {
        if (!zipf) {
            keys[i] = (uint32_t)(next_u64() % KEYS);
            continue;
        }
        double u = (double)(next_u64() >> 11) / 9007199254740992.0;
        int lo = 0, hi = KEYS - 1;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (cdf[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        keys[i] = (uint32_t)lo;
    }
}

/* One mix's operations and what its repetitions measured. */
typedef struct ycsb_mix {
    cluster_t *k;
    dsm_compact_ptr_t *ptrs;
    const uint32_t *keys;
    uint8_t *is_read;
    int ops, reps, read_pct, zipf;
    dsm_transport_t tr;
    double rd[MAX_REPS], rr[MAX_REPS], rtt[MAX_REPS];   /* direct and RPC ops/s, bare round trip ns */
    ycsb_cpu_t cd[MAX_REPS], cr[MAX_REPS];
} ycsb_mix_t;

/* The direct and RPC paths interleaved, the first alternating (ABBA...):
 * neither always runs right after the other's warm caches or idle wait;
 * the bare round trip the RPC path is predicted from runs first or last
 * in turn. */
static void ycsb_measure(ycsb_mix_t *x)
{
    for (int r = 0; r < x->reps; r++) {
        int first = r & 1;
        if (first)
            x->rtt[r] = round_trip_ns(x->k, x->ops / 4);
        for (int j = 0; j < 2; j++) {
            int direct = j ^ first;
            ycsb_run(x->k, x->ptrs, x->keys, x->is_read, x->ops, direct, x->tr != DSM_TRANSPORT_SHM,
                     direct ? &x->rd[r] : &x->rr[r], direct ? &x->cd[r] : &x->cr[r]);
        }
        if (!first)
            x->rtt[r] = round_trip_ns(x->k, x->ops / 4);
    }
}

static void report_blocking_variant(dsm_report_t *rep, const ycsb_mix_t *x)
{
    const dsm_figure_t *fg = dsm_report_add(rep, "corm_direct_read_vs_rpc_blocking/shm", dsm_report_median(x->rd, x->reps),
                                            "ops/s",
                                            "YCSB 50:50 uniform, RPC reads; the server's progress thread blocking (shm: "
                                            "a direct read is a load from a local read-only mapping)",
                                            dsm_report_median(x->rr, x->reps), 1);
    if (fg) {
        dsm_report_reps(rep, fg, x->rd, x->rr, x->reps);
        dsm_report_print_figure(stdout, fg);
    }
}

/* The mix's throughput and who spent the CPU per op (the server node's own
 * threads, the client's progress thread, the rest), each the median over
 * repetitions, direct path against RPC reads. */
static void report_ycsb_cpu(dsm_report_t *rep, const ycsb_mix_t *x, double d, double rpc)
{
    double v[2][5][MAX_REPS], med[2][5];
    for (int r = 0; r < x->reps; r++)
        for (int path = 0; path < 2; path++) {
            const ycsb_cpu_t *c = path ? &x->cd[r] : &x->cr[r];
            v[path][0][r] = c->server;
            v[path][1][r] = c->client_progress;
            v[path][2][r] = c->other;
            v[path][3][r] = c->per_request;
            v[path][4][r] = c->wakeups * 1e-6;   /* (scaled back below) */
        }
    for (int path = 0; path < 2; path++)
        for (int q = 0; q < 5; q++)
            med[path][q] = dsm_report_median(v[path][q], x->reps) * 1e6;
    const char *tn = dsm_transport_name(x->tr), *dist = x->zipf ? "zipf" : "uniform";
    int rp = x->read_pct, wp = 100 - x->read_pct;
    char name[96];
    const dsm_figure_t *fg;
    snprintf(name, sizeof name, "corm_ycsb_%d_%d_%s/%s", rp, wp, dist, tn);
    if ((fg = dsm_report_add(rep, name, d, "ops/s", "the same with RPC reads", rpc, 1)))
        dsm_report_print_figure(stdout, fg);
    snprintf(name, sizeof name, "corm_ycsb_cpu_%d_%d_%s/%s", rp, wp, dist, tn);
    if ((fg = dsm_report_add(rep, name, med[1][0], "us/op", "server CPU per op with RPC reads", med[0][0], 0)))
        dsm_report_print_figure(stdout, fg);
    if (rp == 50 && !x->zipf && med[1][0] > 0 && med[0][0] > 0) {
        /* what a server bound by its CPU would serve (the paper's setting:
         * many clients, RPC throughput flat at the server's CPU):
         * operations per second of server CPU */
        snprintf(name, sizeof name, "corm_server_cpu_bound_vs_rpc/%s", tn);
        if ((fg = dsm_report_add(rep, name, 1e6 / med[1][0], "ops/cpu-s",
                                 "YCSB 50:50 uniform, RPC reads: ops per server CPU second", 1e6 / med[0][0], 1)))
            dsm_report_print_figure(stdout, fg);
    }
    snprintf(name, sizeof name, "corm_ycsb_cpu_per_request_%d_%d_%s/%s", rp, wp, dist, tn);
    if ((fg = dsm_report_add(rep, name, med[1][3], "us/request", "with RPC reads", med[0][3], 0)))
        dsm_report_print_figure(stdout, fg);
    char key[96];
    snprintf(key, sizeof key, "ycsb_cpu_%d_%d_%s_%s", rp, wp, dist, tn);
    dsm_report_env(rep, key,
                   "{\"us_per_op\": {\"direct\": {\"server\": %.3f, \"client_progress\": %.3f, "
                   "\"other\": %.3f}, \"rpc\": {\"server\": %.3f, \"client_progress\": %.3f, "
                   "\"other\": %.3f}}, \"server_us_per_request\": {\"direct\": %.3f, \"rpc\": %.3f}, "
                   "\"server_wakeups_per_request\": {\"direct\": %.3f, \"rpc\": %.3f}}",
                   med[1][0], med[1][1], med[1][2], med[0][0], med[0][1], med[0][2], med[1][3], med[0][3],
                   med[1][4], med[0][4]);
    printf("  server CPU per op (us): direct %.3f, RPC %.3f; per request served: direct %.3f, RPC %.3f "
           "(server wake-ups from sleep per request: direct %.2f, RPC %.2f); client progress thread per op: "
           "direct %.3f, RPC %.3f; other threads: direct %.3f, RPC %.3f\n",
           med[1][0], med[0][0], med[1][3], med[0][3], med[1][4], med[0][4], med[1][1], med[0][1], med[1][2],
           med[0][2]);
}

/* The same mix with every operation timed, the modes interleaved: what a
 * read and a write cost in each mode (RPC read, RPC write, direct read,
 * direct write in us, then client wake-ups per write: RPC, direct). */
static void ycsb_time_split(const ycsb_mix_t *x, double sp[6][MAX_REPS])
{
    for (int r = 0; r < x->reps; r++) {
        int first = r & 1;
        for (int j = 0; j < 2; j++) {
            int direct = j ^ first;
            double split[3];
            ycsb_split(x->k, x->ptrs, x->keys, x->is_read, x->ops, direct, split);
            sp[2 * direct][r] = split[0];
            sp[2 * direct + 1][r] = split[1];
            sp[4 + direct][r] = split[2];
        }
    }
}

/* The uniform mix's headline, the RPC path against its protocol, and where
 * the ratio comes from (the timed split). */
static void report_ycsb_headline(dsm_report_t *rep, const ycsb_mix_t *x, double sp[6][MAX_REPS], double d,
                                 double rpc)
{
    double t[6];
    const char *tn = dsm_transport_name(x->tr);
    int rp = x->read_pct, wp = 100 - x->read_pct, mostly_reads = rp != 50;
    char name[96], anchor[160];
    const dsm_figure_t *fg;
    /* The headline is 50:50 uniform: the paper's ~1.8x (1,250K against
     * 700K req/s) is its 50:50 figure; 95:5 beside it (the paper's
     * read-dominant mixes: 2.5x uniform, 3.1x zipf). */
    snprintf(name, sizeof name, "corm_direct_read_vs_rpc%s/%s", mostly_reads ? "_95_5" : "", tn);
    snprintf(anchor, sizeof anchor, "YCSB %d:%d uniform, RPC reads%s", rp, wp,
             x->tr == DSM_TRANSPORT_SHM ? " (shm: a direct read is a load from a local read-only mapping)"
                                        : " (tcp: a direct read is a get the server's progress thread serves)");
    double measured = rpc > 0 ? d / rpc : 0;
    if ((fg = dsm_report_add(rep, name, d, "ops/s", anchor, rpc, 1))) {
        dsm_report_reps(rep, fg, x->rd, x->rr, x->reps);
        dsm_report_print_figure(stdout, fg);
        measured = fg->ratio;   /* the runs' own ratios' median */
    }
    /* The RPC baseline against its protocol: every operation (read or
     * write) is one request answered in the server's handler, so it should
     * cost one bare round trip. */
    double us_op[MAX_REPS], us_rtt[MAX_REPS];
    for (int r = 0; r < x->reps; r++) {
        us_op[r] = x->rr[r] > 0 ? 1e6 / x->rr[r] : 0;
        us_rtt[r] = x->rtt[r] / 1000;
    }
    double rtt_us = dsm_report_median(us_rtt, x->reps);
    snprintf(name, sizeof name, "corm_rpc_time_vs_predicted%s/%s", mostly_reads ? "_95_5" : "", tn);
    snprintf(anchor, sizeof anchor, "1 msg round trip/op x the bare AM round trip (%.3g us, this run)", rtt_us);
    if ((fg = dsm_report_add(rep, name, dsm_report_median(us_op, x->reps), "us/op", anchor, rtt_us, 0))) {
        dsm_report_reps(rep, fg, us_op, us_rtt, x->reps);
        dsm_report_print_figure(stdout, fg);
    }
    /* With a fraction f of reads, RPC mode costs f t_rpc_read + (1-f)
     * t_rpc_write per op and direct mode f t_direct + (1-f) t_write, so the
     * ratio is their quotient; with free direct reads it would be the
     * bound, RPC mode's cost over (1-f) t_write: at 50:50 below 2 as soon
     * as a write costs more than the mean RPC op. */
    for (int q = 0; q < 6; q++)
        t[q] = dsm_report_median(sp[q], x->reps) / (q < 4 ? 1000 : 1);
    double f = rp / 100.0;
    double rpc_op = f * t[0] + (1 - f) * t[1], direct_op = f * t[2] + (1 - f) * t[3];
    double predicted = direct_op > 0 ? rpc_op / direct_op : 0;
    double bound = t[3] > 0 ? rpc_op / ((1 - f) * t[3]) : 0;
    printf("  %d:%d split (us per op, timed runs): RPC mode read %.3f, write %.3f; direct mode "
           "direct_read %.3f, write %.3f -> ratio they give %.3g (measured %.3g), bound with free "
           "direct reads %.3g; client progress wake-ups per write: RPC mode %.2f, direct mode %.2f\n",
           rp, wp, t[0], t[1], t[2], t[3], predicted, measured, bound, t[4], t[5]);
    char key[96];
    snprintf(key, sizeof key, "ycsb_split_%d_%d_uniform_%s", rp, wp, tn);
    dsm_report_env(rep, key,
                   "{\"read_fraction\": %.2f, \"us_per_op\": {\"rpc_read\": %.4f, \"rpc_write\": %.4f, "
                   "\"direct_read\": %.4f, \"direct_write\": %.4f}, \"ratio_predicted\": %.4f, "
                   "\"ratio_measured\": %.4f, \"ratio_bound_free_direct_reads\": %.4f, "
                   "\"client_wakeups_per_write\": {\"rpc\": %.3f, \"direct\": %.3f}, "
                   "\"clock_ns_taken_off_each_write\": %.1f}",
                   f, t[0], t[1], t[2], t[3], predicted, measured, bound, t[4], t[5], clock_ns());
}

static void throughput(dsm_report_t *rep, dsm_transport_t tr, int reps, int quick, int variant)
{
    cluster_t k;
    cluster_start_with(&k, tr, variant ? DSM_PROGRESS_BLOCKING : server_progress_for(tr));
    dsm_status_t rs = dsm_fabric_am_register(dsm_node_fabric(k.h.nodes[0]), DSM_AM_USER_FIRST, on_echo,
                                             dsm_node_fabric(k.h.nodes[0]));
    if (rs != DSM_OK)
        die("echo handler", rs);
    static dsm_compact_ptr_t ptrs[KEYS];
    uint8_t data[32] = {0};
    memset(ycsb_data, 0x5a, sizeof ycsb_data);
    for (int i = 0; i < KEYS; i++) {
        dsm_status_t st = dsm_compact_alloc(k.c[1], 0, 32, &ptrs[i]);
        if (st != DSM_OK || (st = dsm_compact_write(k.c[1], &ptrs[i], data, 32)) != DSM_OK)
            die("ycsb load", st);
    }
    int ops = tr == DSM_TRANSPORT_SHM ? (quick ? 20000 : 100000) : (quick ? 1000 : 4000);
    uint32_t *keys = malloc(ops * sizeof *keys);
    uint8_t *is_read = malloc(ops);
    static double cdf[KEYS];
    zipf_cdf(cdf);
    static const int mixes[] = {50, 95};
    if (!variant)
        printf("  (%s) headline: YCSB 50:50 uniform, the mix of the paper's ~1.8x (1,250K against 700K req/s, its "
               "section 4.2.2); 95:5 beside it. Server CPU: the server node's own threads.\n",
               dsm_transport_name(tr));
    static ycsb_mix_t x;
    for (int zipf = 0; zipf < (variant ? 1 : 2); zipf++) {
        ycsb_keys(keys, ops, zipf, cdf);
        for (int m = 0; m < (variant ? 1 : 2); m++) {
            for (int i = 0; i < ops; i++)
                is_read[i] = next_u64() % 100 < (uint64_t)mixes[m];
            x = (ycsb_mix_t){.k = &k, .ptrs = ptrs, .keys = keys, .is_read = is_read, .ops = ops, .reps = reps,
                             .read_pct = mixes[m], .zipf = zipf, .tr = tr};
            ycsb_measure(&x);
            if (variant) {
                report_blocking_variant(rep, &x);
                continue;
            }
            static double sp[6][MAX_REPS];
            if (!zipf)
                ycsb_time_split(&x, sp);
            double d = dsm_report_median(x.rd, reps), rpc = dsm_report_median(x.rr, reps);
            report_ycsb_cpu(rep, &x, d, rpc);
            if (!zipf)
                report_ycsb_headline(rep, &x, sp, d, rpc);
        }
    }
    free(keys);
    free(is_read);
    cluster_stop(&k);
}

/* ---- compaction run -------------------------------------------------------------------- */

enum { BUCKET_NS = 5000000, MAX_BUCKETS = 4000, RUN_OBJS = 21 * 240 };

/* The client node's counters, which its reader publishes (at most 1 ms
 * old) for the bench to sample at the windows' edges. */
typedef struct run_client {
    uint64_t reader_cpu_ns, progress_cpu_ns, wait_sleeps, scan_rpcs, locked, torn, moving, applied, apply_ns;
} run_client_t;

/* A run, shared with the reader's process (a memfd both map). The reader
 * is a process of its own, as a deployment's client is: in the bench's
 * process every block the server remaps would flush the TLB of the
 * reader's CPU too (see run_acct_t). It is this program again
 * (--scan-reader FD), whose node joins the cluster as rank 1. */
typedef struct run {
    char coordinator[64];
    int transport;
    dsm_compact_ptr_t ptr[RUN_OBJS];   /* the kept quarter (random: up to all of them) */
    int n;
    volatile int joined;   /* the reader's node: 1 joined (and read once), -1 failed */
    volatile int go, stop;
    uint64_t t0;
    uint32_t counts[MAX_BUCKETS];
    uint64_t failures;
    volatile pid_t pid, tid;   /* the reader's process and thread (their /proc entries) */
    volatile uint64_t done;    /* reads completed (the reader's count) */
    run_client_t client;
} run_t;

static void publish(run_t *r, dsm_compact_t *c, dsm_node_t *node)
{
    dsm_stats_t st;
    dsm_fabric_stats(dsm_node_fabric(node), &st);
    run_client_t *o = &r->client;
    __atomic_store_n(&o->reader_cpu_ns, dsm_thread_cpu_ns(), __ATOMIC_RELAXED);
    __atomic_store_n(&o->progress_cpu_ns, st.progress_cpu_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&o->wait_sleeps, st.wait_sleeps, __ATOMIC_RELAXED);
    __atomic_store_n(&o->scan_rpcs, c->scan_rpcs, __ATOMIC_RELAXED);
    __atomic_store_n(&o->locked, c->seen_locked, __ATOMIC_RELAXED);
    __atomic_store_n(&o->torn, c->seen_torn, __ATOMIC_RELAXED);
    __atomic_store_n(&o->moving, c->seen_moving, __ATOMIC_RELAXED);
    __atomic_store_n(&o->applied, c->applied, __ATOMIC_RELAXED);
    __atomic_store_n(&o->apply_ns, c->apply_ns, __ATOMIC_RELAXED);
}

static void scan_reader(run_t *r, dsm_compact_t *c, dsm_node_t *node)
{
    r->pid = getpid();
    r->tid = (pid_t)syscall(SYS_gettid);
    uint8_t buf[256];
    size_t len;
    uint64_t x = 0x9e3779b97f4a7c15ull, published = 0;
    while (!r->stop) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int i = (int)(x % (uint64_t)r->n);
        dsm_status_t st = dsm_compact_scan_read(c, &r->ptr[i], buf, sizeof buf, &len);
        if (st != DSM_OK || len != 150 || buf[0] != (uint8_t)(i % 251))
            __atomic_fetch_add(&r->failures, 1, __ATOMIC_RELAXED);
        uint64_t now = dsm_now_ns(), b = (now - r->t0) / BUCKET_NS;
        if (b < MAX_BUCKETS)
            __atomic_fetch_add(&r->counts[b], 1, __ATOMIC_RELAXED);
        r->done++;
        if (now - published >= 1000000u) {
            publish(r, c, node);
            published = now;
        }
    }
    publish(r, c, node);
}

/* The reader's process (--scan-reader FD): its node joins the cluster the
 * run names as rank 1 and reads once (over shm that maps the store); it
 * says so, then reads from the bench's go to its stop. */
static int scan_reader_main(const char *fd_arg)
{
    int fd = atoi(fd_arg);
    run_t *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (r == MAP_FAILED)
        return 1;
    dsm_set_log_level(0);
    dsm_harness_t h;
    cluster_settings(&h, (dsm_transport_t)r->transport, run_progress());
    snprintf(h.coordinator, sizeof h.coordinator, "%s", r->coordinator);
    dsm_node_config_t cfg;
    dsm_harness_node_config(&h, &cfg, 1);
    dsm_node_t *node = NULL;
    dsm_status_t st = dsm_harness_node_start(&h, &cfg, 1, &node);
    if (st != DSM_OK) {
        fprintf(stderr, "scan reader: node: %s\n", dsm_strerror(st));
        __atomic_store_n(&r->joined, -1, __ATOMIC_RELEASE);
        return 1;
    }
    dsm_compact_t *c = dsm_compact_of(node);
    /* over shm the first read brings the mirror of the store up to date */
    uint8_t buf[256];
    size_t len;
    if (r->n > 0)
        (void)dsm_compact_scan_read(c, &r->ptr[0], buf, sizeof buf, &len);
    __atomic_store_n(&r->joined, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&r->go, __ATOMIC_ACQUIRE) && !r->stop) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    scan_reader(r, c, node);
    dsm_node_destroy(node);
    return 0;
}

/* Reads and the longest gap (empty buckets in a row) over buckets [lo, hi). */
static uint64_t bucket_reads(const run_t *r, int lo, int hi, int *gap)
{
    uint64_t n = 0;
    int run_len = 0;
    for (int b = lo; b < hi && b < MAX_BUCKETS; b++) {
        n += r->counts[b];
        run_len = r->counts[b] ? 0 : run_len + 1;
        if (run_len > *gap)
            *gap = run_len;
    }
    return n;
}

/* Wait until the run's clock passes `until` ns without taking the CPU the
 * reader runs on (a quiet window: the server does nothing). */
static void idle_until(const run_t *r, uint64_t until)
{
    while (dsm_now_ns() - r->t0 < until) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

enum { RUN_PAIRS = 16 };

/* A store of `nobj` 150-byte objects with a quarter kept, at random
 * offsets (the blocks stay, a quarter full): the kept ones are the run's
 * objects to read. */
static void run_fragment(cluster_t *k, run_t *r, int nobj)
{
    static dsm_compact_ptr_t all[RUN_OBJS];
    uint8_t data[150];
    for (int i = 0; i < nobj; i++) {
        dsm_status_t st = dsm_compact_alloc(k->c[0], 0, 150, &all[i]);
        if (st != DSM_OK)
            die("run alloc", st);
    }
    for (int i = 0; i < nobj; i++) {
        dsm_status_t st;
        if (next_u64() % 4 == 0) {
            memset(data, (r->n % 251), sizeof data);
            if ((st = dsm_compact_write(k->c[0], &all[i], data, sizeof data)) != DSM_OK)
                die("run write", st);
            r->ptr[r->n++] = all[i];
        } else if ((st = dsm_compact_free(k->c[0], &all[i])) != DSM_OK) {
            die("run free", st);
        }
    }
}

/* The compacting windows' server work and what it did. */
typedef struct churn {
    dsm_compact_ptr_t fill[RUN_OBJS];
    int nfill;
    uint64_t merges, rounds, compact_ns;
} churn_t;

/* One round as a server under churn compacts: compaction until a round
 * merges nothing, then fillers allocated into the free slots (beside the
 * objects read) and three in four freed again. */
static void compact_under_churn(cluster_t *k, churn_t *c)
{
    for (;;) {
        dsm_compact_stats_t cs = {0};
        uint64_t t = dsm_now_ns();
        dsm_status_t st = dsm_compact_now(k->c[0], 0, 2, &cs);
        c->compact_ns += dsm_now_ns() - t;
        if (st != DSM_OK)
            die("compact", st);
        c->merges += cs.merges;
        c->rounds++;
        if (cs.merges == 0)
            break;
    }
    while (c->nfill < RUN_OBJS / 4 && dsm_compact_alloc(k->c[0], 0, 150, &c->fill[c->nfill]) == DSM_OK)
        c->nfill++;
    int keep = 0;
    for (int i = 0; i < c->nfill; i++)
        if (next_u64() % 4 == 0)
            c->fill[keep++] = c->fill[i];
        else if (dsm_compact_free(k->c[0], &c->fill[i]) != DSM_OK)
            die("run churn free", DSM_ERR_STATE);
    c->nfill = keep;
}

/* Where a window's time went: the reader's CPU and what it paid for
 * (faults, preemptions, reads the server answered, the host's TLB
 * shootdowns), the compacting thread's CPU, and each progress thread's.
 * Sampled at the windows' edges; a window's share is the difference. */
typedef struct run_acct {
    double reader_cpu, main_cpu, store_cpu, sprog_cpu, cprog_cpu, wall;
    double sprog_delay, reader_delay;   /* seconds each waited, ready, for a CPU */
    uint64_t reads, client_sleeps, reader_minflt, reader_nivcsw, proc_minflt, scan_rpcs, locked, torn, moving, applied;
    uint64_t sprog_minflt;   /* the server's progress thread's own page faults */
    uint64_t tlb_shootdowns, resched_ipis, call_ipis;   /* the host's, every CPU */
    uint64_t server_wakeups;   /* the server's progress thread woke on its event fd and found work */
} run_acct_t;

/* A counter of a thread's /proc status ("nonvoluntary_ctxt_switches")
 * or, for key NULL, its minor faults (field 10 of stat). */
static uint64_t task_counter(pid_t pid, pid_t tid, const char *key)
{
    char path[80], line[512];
    snprintf(path, sizeof path, "/proc/%d/task/%d/%s", (int)pid, (int)tid, key ? "status" : "stat");
    FILE *f = fopen(path, "r");
    uint64_t v = 0;
    if (f == NULL)
        return 0;
    if (key == NULL) {
        if (fgets(line, sizeof line, f)) {
            const char *q = strrchr(line, ')');
            unsigned long long flt = 0;
            if (q && sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %llu", &flt) == 1)
                v = flt;
        }
    } else {
        size_t kl = strlen(key);
        while (fgets(line, sizeof line, f))
            if (strncmp(line, key, kl) == 0 && line[kl] == ':')
                v = strtoull(line + kl + 1, NULL, 10);
    }
    fclose(f);
    return v;
}

/* How long a thread has waited, ready to run, for a CPU: the kernel's run
 * delay (/proc schedstat), in seconds; 0 where the kernel keeps none. */
static double task_run_delay_s(pid_t pid, pid_t tid)
{
    char path[80];
    snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", (int)pid, (int)tid);
    FILE *f = fopen(path, "r");
    unsigned long long run = 0, delay = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu %llu", &run, &delay) != 2)
        delay = 0;
    fclose(f);
    return delay / 1e9;
}

/* A client counter as its reader last published it. */
static uint64_t published(const uint64_t *field)
{
    return __atomic_load_n(field, __ATOMIC_RELAXED);
}

static void run_sample(cluster_t *k, const run_t *r, run_acct_t *a)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    dsm_stats_t server;
    dsm_fabric_stats(dsm_node_fabric(k->h.nodes[0]), &server);
    const run_client_t *cl = &r->client;
    pid_t sprog_tid = dsm_fabric_progress_tid(dsm_node_fabric(k->h.nodes[0]));
    *a = (run_acct_t){
        .reader_cpu = published(&cl->reader_cpu_ns) / 1e9,
        .main_cpu = thread_cpu_s(pthread_self()),
        .store_cpu = k->c[0]->thread_started ? thread_cpu_s(k->c[0]->thread) : 0,
        .sprog_cpu = progress_cpu_s(k->h.nodes[0]),
        .cprog_cpu = published(&cl->progress_cpu_ns) / 1e9,
        .sprog_delay = task_run_delay_s(getpid(), sprog_tid),
        .sprog_minflt = task_counter(getpid(), sprog_tid, NULL),
        .reader_delay = task_run_delay_s(r->pid, r->tid),
        .wall = dsm_now_ns() / 1e9,
        .reads = r->done,
        .client_sleeps = published(&cl->wait_sleeps),
        .reader_minflt = task_counter(r->pid, r->tid, NULL),
        .reader_nivcsw = task_counter(r->pid, r->tid, "nonvoluntary_ctxt_switches"),
        .proc_minflt = (uint64_t)ru.ru_minflt,
        .scan_rpcs = published(&cl->scan_rpcs),
        .locked = published(&cl->locked),
        .torn = published(&cl->torn),
        .moving = published(&cl->moving),
        .applied = published(&cl->applied),
        .server_wakeups = server.progress_wakeups,
    };
    dsm_host_interrupts(&a->tlb_shootdowns, &a->resched_ipis, &a->call_ipis);
}

/* acc += b - a */
static void run_acct_add(run_acct_t *acc, const run_acct_t *a, const run_acct_t *b)
{
    acc->reader_cpu += b->reader_cpu - a->reader_cpu;
    acc->main_cpu += b->main_cpu - a->main_cpu;
    acc->store_cpu += b->store_cpu - a->store_cpu;
    acc->sprog_cpu += b->sprog_cpu - a->sprog_cpu;
    acc->cprog_cpu += b->cprog_cpu - a->cprog_cpu;
    acc->sprog_delay += b->sprog_delay - a->sprog_delay;
    acc->reader_delay += b->reader_delay - a->reader_delay;
    acc->sprog_minflt += b->sprog_minflt - a->sprog_minflt;
    acc->wall += b->wall - a->wall;
    acc->reads += b->reads - a->reads;
    acc->client_sleeps += b->client_sleeps - a->client_sleeps;
    acc->reader_minflt += b->reader_minflt - a->reader_minflt;
    acc->reader_nivcsw += b->reader_nivcsw - a->reader_nivcsw;
    acc->proc_minflt += b->proc_minflt - a->proc_minflt;
    acc->scan_rpcs += b->scan_rpcs - a->scan_rpcs;
    acc->locked += b->locked - a->locked;
    acc->torn += b->torn - a->torn;
    acc->moving += b->moving - a->moving;
    acc->applied += b->applied - a->applied;
    acc->tlb_shootdowns += b->tlb_shootdowns - a->tlb_shootdowns;
    acc->resched_ipis += b->resched_ipis - a->resched_ipis;
    acc->call_ipis += b->call_ipis - a->call_ipis;
    acc->server_wakeups += b->server_wakeups - a->server_wakeups;
}

/* Starts the reader's process on the run (a memfd, fd) and waits until its
 * node joined and the server sees it attached; then its reads begin. */
static pid_t reader_start(cluster_t *k, run_t *r, int fd)
{
    char fd_arg[16];
    snprintf(fd_arg, sizeof fd_arg, "%d", fd);
    fflush(stdout);   /* or the child's copy of the buffer is printed again */
    pid_t parent = getpid(), pid = fork();
    if (pid < 0)
        die("the reader's process", DSM_ERR_NOMEM);
    if (pid == 0) {
        /* it ends with the bench, however the bench ends */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(1);
        execl("/proc/self/exe", "dsm-bench-corm", "--scan-reader", fd_arg, (char *)NULL);
        _exit(127);
    }
    /* Bounds for a loaded host: a node's join and a layout fetch. */
    uint64_t until = dsm_now_ns() + 30000000000ull;
    int status;
    while (__atomic_load_n(&r->joined, __ATOMIC_ACQUIRE) == 0 ||
           !__atomic_load_n(&k->c[0]->peers[1].attached, __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(&r->joined, __ATOMIC_ACQUIRE) < 0 || waitpid(pid, &status, WNOHANG) == pid ||
            dsm_now_ns() > until)
            die("the reader's node did not join (its process says why on stderr)", DSM_ERR_TIMEOUT);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return pid;
}

static void reader_stop(run_t *r, pid_t pid)
{
    r->stop = 1;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("the reader's process failed", DSM_ERR_STATE);
}

/* A figure of the compaction run: the median of one kind of window's
 * read rates against another's, each pair's in the reps. */
static void window_figure(dsm_report_t *rep, const char *stem, const char *tn, const char *anchor,
                          const double *ours, const double *theirs)
{
    char name[96];
    snprintf(name, sizeof name, "%s/%s", stem, tn);
    const dsm_figure_t *f = dsm_report_add(rep, name, dsm_report_median(ours, RUN_PAIRS), "reads/s", anchor,
                                           dsm_report_median(theirs, RUN_PAIRS), 1);
    if (f) {
        dsm_report_reps(rep, f, ours, theirs, RUN_PAIRS);
        dsm_report_print_figure(stdout, f);
    }
}

/* The compaction run's kinds of window, in the order of its first round. */
enum { W_QUIET, W_COMPACTING, W_SPINNER, W_REMAPPER, W_KINDS };

static void compaction_run(dsm_report_t *rep, dsm_transport_t tr, int quick)
{
    cluster_t k;
    cluster_start_n(&k, tr, run_progress(), 1);
    int fd = memfd_create("corm-run", 0);
    if (fd < 0 || ftruncate(fd, sizeof(run_t)) != 0)
        die("the run's shared memory", DSM_ERR_NOMEM);
    run_t *rp = mmap(NULL, sizeof *rp, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (rp == MAP_FAILED)
        die("the run's shared memory", DSM_ERR_NOMEM);
    rp->transport = (int)tr;
    snprintf(rp->coordinator, sizeof rp->coordinator, "%s", k.h.coordinator);
    run_fragment(&k, rp, quick ? RUN_OBJS / 2 : RUN_OBJS);
    dsm_compact_usage_t u0, u1;
    dsm_compact_usage(k.c[0], 0, &u0);
    pid_t reader = reader_start(&k, rp, fd);
    close(fd);
    rp->t0 = dsm_now_ns();
    __atomic_store_n(&rp->go, 1, __ATOMIC_RELEASE);
    /* RUN_PAIRS rounds of windows, a quiet one, a compacting one and a
     * control, their order rotating from round to round (quiet first in
     * round 0, so the first compaction, which merges the fragmented store,
     * has reads before it): each round's ratios see the same load from the
     * rest of the machine.
     * Short windows and many rounds: over tcp the read rate moves between
     * the host's modes, each lasting about 50-200 ms, and a round's
     * windows must fall in one mode while the rounds cover many. */
    uint64_t win = (quick ? 30 : 60) * 1000000ull, warm = 2 * BUCKET_NS;
    idle_until(rp, warm);
    while (rp->tid == 0)
        sched_yield();
    run_acct_t acct[W_KINDS] = {{0}};

    uint64_t notices0 = k.c[0]->notices, notice_ns0 = k.c[0]->notice_ns;
    const run_client_t *cl = &rp->client;
    uint64_t applied0 = published(&cl->applied), apply_ns0 = published(&cl->apply_ns);
    uint64_t locked0 = published(&cl->locked), moving0 = published(&cl->moving), rpcs0 = published(&cl->scan_rpcs);
    static churn_t churn;
    memset(&churn, 0, sizeof churn);
    /* Windows quiet, compacting, and two controls: in W_SPINNER the
     * compacting thread only spins, touching no store, which shows what
     * any server work costs the reader on this machine's cores; in
     * W_REMAPPER it spins and remaps pages of a file of its own as often
     * as the compaction has merged blocks per second so far (round 0
     * compacts first), which shows what the remaps alone cost. */
    uint64_t w_lo[W_KINDS][RUN_PAIRS], w_hi[W_KINDS][RUN_PAIRS];
    uint64_t compacting_wall_ns = 0, ctl_remaps = 0, ctl_wall_ns = 0;
    dsm_remapper_t remapper;
    if (dsm_remapper_open(&remapper) != 0)
        die("the remapping control's file", DSM_ERR_NOMEM);
    for (int p = 0; p < RUN_PAIRS; p++)
        for (int j = 0; j < W_KINDS; j++) {
            int kind = (j + p) % W_KINDS;
            run_acct_t s0, s1;
            run_sample(&k, rp, &s0);
            uint64_t lo = dsm_now_ns() - rp->t0;
            if (kind == W_QUIET) {
                idle_until(rp, lo + win);
            } else if (kind == W_SPINNER) {
                while (dsm_now_ns() - rp->t0 < lo + win)
                    ;
            } else if (kind == W_REMAPPER) {
                double per_ns = compacting_wall_ns ? (double)churn.merges / (double)compacting_wall_ns : 0;
                uint64_t done = 0;
                for (uint64_t at; (at = dsm_now_ns() - rp->t0) < lo + win;)
                    if ((double)(at - lo) * per_ns > (double)done) {
                        if (dsm_remapper_step(&remapper) != 0)
                            die("the remapping control's remap", DSM_ERR_STATE);
                        done++;
                    }
                ctl_remaps += done;
            } else {
                do
                    compact_under_churn(&k, &churn);
                while (dsm_now_ns() - rp->t0 < lo + win);
            }
            w_lo[kind][p] = lo;
            w_hi[kind][p] = dsm_now_ns() - rp->t0;
            if (kind == W_COMPACTING)
                compacting_wall_ns += w_hi[kind][p] - lo;
            else if (kind == W_REMAPPER)
                ctl_wall_ns += w_hi[kind][p] - lo;
            run_sample(&k, rp, &s1);
            run_acct_add(&acct[kind], &s0, &s1);
        }
    dsm_remapper_close(&remapper);
    uint64_t notices = k.c[0]->notices - notices0, notice_ns = k.c[0]->notice_ns - notice_ns0;
    uint64_t applied = published(&cl->applied) - applied0, apply_ns = published(&cl->apply_ns) - apply_ns0;
    uint64_t locked = published(&cl->locked) - locked0, moving = published(&cl->moving) - moving0,
             rpcs = published(&cl->scan_rpcs) - rpcs0;
    uint64_t tail = dsm_now_ns() - rp->t0;
    idle_until(rp, tail + 2 * BUCKET_NS);
    reader_stop(rp, reader);
    dsm_compact_usage(k.c[0], 0, &u1);
    uint64_t end = dsm_now_ns() - rp->t0;
    int bend = (int)(end / BUCKET_NS);
    if (bend > MAX_BUCKETS)
        bend = MAX_BUCKETS;
    /* Each window's rate over the buckets wholly inside it (a bucket split
     * between two windows counts for neither). */
    double rate[W_KINDS][RUN_PAIRS] = {{0}};
    int gap[W_KINDS] = {0};
    uint64_t reads[W_KINDS] = {0};
    for (int q = 0; q < W_KINDS; q++)
        for (int p = 0; p < RUN_PAIRS; p++) {
            int lo = (int)((w_lo[q][p] + BUCKET_NS - 1) / BUCKET_NS), hi = (int)(w_hi[q][p] / BUCKET_NS);
            uint64_t n = hi > lo ? bucket_reads(rp, lo, hi, &gap[q]) : 0;
            reads[q] += n;
            rate[q][p] = hi > lo ? n / ((hi - lo) * (BUCKET_NS / 1e9)) : 0;
        }
    double lo_r, hi_r, ratio[RUN_PAIRS], spin[RUN_PAIRS], remap[RUN_PAIRS];
    for (int p = 0; p < RUN_PAIRS; p++) {
        ratio[p] = rate[W_QUIET][p] > 0 ? rate[W_COMPACTING][p] / rate[W_QUIET][p] : 0;
        spin[p] = rate[W_QUIET][p] > 0 ? rate[W_SPINNER][p] / rate[W_QUIET][p] : 0;
        remap[p] = rate[W_SPINNER][p] > 0 ? rate[W_REMAPPER][p] / rate[W_SPINNER][p] : 0;
    }
    dsm_report_range(ratio, RUN_PAIRS, &lo_r, &hi_r);
    double spin_med = dsm_report_median(spin, RUN_PAIRS), remap_med = dsm_report_median(remap, RUN_PAIRS);
    const char *tn = dsm_transport_name(tr);
    char name[96];
    window_figure(rep, "corm_scan_read_during_compaction", tn,
                  tr == DSM_TRANSPORT_SHM
                      ? "the same client, quiet windows (shm: reads are loads from a local read-only mapping)"
                      : "the same client, quiet windows (tcp: each read is a get the server's progress thread serves)",
                  rate[W_COMPACTING], rate[W_QUIET]);
    /* The control beside it: the same windows with the compacting thread
     * spinning instead. Near 1 while the compacting windows dip, the dip is
     * the compaction's own work (faults, remaps, shootdowns), not a busy
     * core beside the reader. */
    window_figure(rep, "corm_scan_read_beside_a_spinner", tn,
                  "the same client, quiet windows (a control: a thread of the server's process spins, touching no "
                  "store)",
                  rate[W_SPINNER], rate[W_QUIET]);
    /* The second control against the first: the same spinning thread,
     * now remapping a page a call as often as the compaction merges.
     * Below 1, remaps made one at a time cost the reads that much; over
     * tcp they interrupt the server's progress thread, which serves every
     * read. The compaction drops a batch's pages in a few calls and pays less. */
    window_figure(rep, "corm_scan_read_beside_remaps", tn,
                  "the same client beside the spinner (a control: the spinner also remaps pages of a file of its "
                  "own, one a call, as often as the compaction merges blocks, touching no store)",
                  rate[W_REMAPPER], rate[W_SPINNER]);
    /* The first compacting window (pair 0: after a quiet one) is the one
     * the series shades and the env's reads_before/reads_during count. */
    uint64_t c0 = w_lo[W_COMPACTING][0], c1 = w_hi[W_COMPACTING][0];
    int b0 = (int)(c0 / BUCKET_NS), b1 = (int)((c1 + BUCKET_NS - 1) / BUCKET_NS);
    int g0 = 0, g1 = 0;
    uint64_t n_before = bucket_reads(rp, 1, b0, &g0), n_during = bucket_reads(rp, b0, b1, &g1);
    char pairs_json[RUN_PAIRS * 10], pairs_text[RUN_PAIRS * 8];
    size_t at_json = 0, at_text = 0;
    for (int p = 0; p < RUN_PAIRS; p++) {
        at_json += (size_t)snprintf(pairs_json + at_json, sizeof pairs_json - at_json, "%s%.3f", p ? ", " : "", ratio[p]);
        at_text += (size_t)snprintf(pairs_text + at_text, sizeof pairs_text - at_text, "%s%.2f", p ? " " : "", ratio[p]);
    }
    char key[64];
    snprintf(key, sizeof key, "compaction_run_%s", tn);
    dsm_report_env(rep, key,
                   "{\"merges\": %llu, \"rounds\": %llu, \"ms\": %.1f, \"windows\": %d, \"window_ms\": %.1f, "
                   "\"ratio_per_pair\": [%s], \"ratio_min\": %.3f, \"ratio_max\": %.3f, "
                   "\"ratio_cpu_spinner\": %.3f, \"ratio_remaps_vs_spinner\": %.3f, "
                   "\"merges_per_ms_compacting\": %.2f, \"remaps_per_ms_control\": %.2f, \"compacting_ms\": %.1f, "
                   "\"longest_gap_ms_quiet\": %d, \"longest_gap_ms_compacting\": %d, "
                   "\"remap_notices\": %llu, \"notice_ms\": %.3f, \"notice_apply_ms\": %.3f, "
                   "\"reads_locked\": %llu, \"reads_moving_to_rpc\": %llu, \"scan_reads_by_rpc\": %llu, "
                   "\"reads_quiet\": %llu, \"reads_compacting\": %llu, "
                   "\"reads_before\": %llu, \"reads_during\": %llu, \"failed_reads\": %llu, "
                   "\"blocks_before\": %llu, \"blocks_after\": %llu}",
                   (unsigned long long)churn.merges, (unsigned long long)churn.rounds, (c1 - c0) / 1e6, RUN_PAIRS,
                   win / 1e6, pairs_json, lo_r, hi_r, spin_med, remap_med,
                   compacting_wall_ns ? churn.merges * 1e6 / compacting_wall_ns : 0.0,
                   ctl_wall_ns ? ctl_remaps * 1e6 / ctl_wall_ns : 0.0, churn.compact_ns / 1e6,
                   gap[W_QUIET] * (BUCKET_NS / 1000000), gap[W_COMPACTING] * (BUCKET_NS / 1000000),
                   (unsigned long long)notices,
                   notices ? notice_ns / 1e6 / notices : 0.0, applied ? apply_ns / 1e6 / applied : 0.0,
                   (unsigned long long)locked, (unsigned long long)moving, (unsigned long long)rpcs,
                   (unsigned long long)reads[W_QUIET], (unsigned long long)reads[W_COMPACTING],
                   (unsigned long long)n_before,
                   (unsigned long long)n_during, (unsigned long long)rp->failures, (unsigned long long)u0.blocks,
                   (unsigned long long)u1.blocks);
    fprintf(stderr,
            "compaction run (%s): %llu merges (%.1f ms in compaction calls), %llu -> %llu blocks, %llu failed "
            "reads; ratio per pair %s (a CPU spinner instead: %.2f; remapping as it spins, against it: %.2f); "
            "longest gap %d ms quiet, %d ms compacting; %llu remap "
            "notices, %.2f ms round trip each, %.3f ms applying; %llu locked reads, %llu saw the compaction bit, "
            "%llu scan_reads answered by RPC\n",
            tn, (unsigned long long)churn.merges, churn.compact_ns / 1e6, (unsigned long long)u0.blocks,
            (unsigned long long)u1.blocks, (unsigned long long)rp->failures, pairs_text, spin_med, remap_med,
            gap[W_QUIET] * (BUCKET_NS / 1000000), gap[W_COMPACTING] * (BUCKET_NS / 1000000),
            (unsigned long long)notices,
            notices ? notice_ns / 1e6 / notices : 0.0, applied ? apply_ns / 1e6 / applied : 0.0,
            (unsigned long long)locked, (unsigned long long)moving, (unsigned long long)rpcs);
    /* Where the reads went, per kind of window: the reader's CPU share
     * (the scheduler's part) times its reads per CPU second (the work a
     * read costs: faults, retries, reads the server answered). */
    static const char *const kind_name[W_KINDS] = {"quiet", "compacting", "spinner", "remapper"};
    char acc_json[4096];
    size_t aj = 0;
    for (int q = 0; q < W_KINDS; q++) {
        const run_acct_t *a = &acct[q];
        double w = a->wall > 0 ? a->wall : 1, rc = a->reader_cpu > 0 ? a->reader_cpu : 1e-9;
        fprintf(stderr,
                "  %-10s %8.0f reads/s = %.2f reader CPU share x %9.0f reads/CPU-s; CPU share: bench thread "
                "%.2f, store thread %.2f, server progress %.2f, client progress %.2f; per ms: %.1f reader faults, %.1f process "
                "faults, %.2f preemptions, %.2f scan RPCs, %.2f locked, %.2f torn, %.2f notices applied, %.1f TLB shootdowns, "
                "%.1f rescheduling and %.1f function-call interrupts (host); "
                "%.3f waits slept per read; the server's progress thread %.2f wake-ups, %.1f us of CPU and %.1f us "
                "waiting for a CPU per read, %.3f faults of its own; the reader waited for a CPU %.1f us per read\n",
                kind_name[q], a->reads / w, a->reader_cpu / w, a->reads / rc, a->main_cpu / w, a->store_cpu / w, a->sprog_cpu / w,
                a->cprog_cpu / w, a->reader_minflt / (w * 1e3), a->proc_minflt / (w * 1e3),
                a->reader_nivcsw / (w * 1e3), a->scan_rpcs / (w * 1e3), a->locked / (w * 1e3), a->torn / (w * 1e3),
                a->applied / (w * 1e3), a->tlb_shootdowns / (w * 1e3), a->resched_ipis / (w * 1e3),
                a->call_ipis / (w * 1e3), a->reads ? (double)a->client_sleeps / a->reads : 0.0,
                a->reads ? (double)a->server_wakeups / a->reads : 0.0,
                a->reads ? a->sprog_cpu * 1e6 / a->reads : 0.0, a->reads ? a->sprog_delay * 1e6 / a->reads : 0.0,
                a->reads ? (double)a->sprog_minflt / a->reads : 0.0, a->reads ? a->reader_delay * 1e6 / a->reads : 0.0);
        aj += (size_t)snprintf(acc_json + aj, sizeof acc_json - aj,
                               "%s\"%s\": {\"reads\": %llu, \"reads_per_s\": %.0f, \"reader_cpu_share\": %.3f, \"reads_per_cpu_s\": %.0f, "
                               "\"bench_thread_cpu_share\": %.3f, \"store_thread_cpu_share\": %.3f, \"server_progress_cpu_share\": %.3f, "
                               "\"client_progress_cpu_share\": %.3f, \"reader_faults\": %llu, \"reader_preemptions\": %llu, "
                               "\"scan_rpcs\": %llu, \"locked\": %llu, \"torn\": %llu, \"client_wait_sleeps\": %llu, "
                               "\"tlb_shootdowns\": %llu, \"resched_ipis\": %llu, \"call_ipis\": %llu, "
                               "\"server_wakeups\": %llu, \"server_progress_cpu_us_per_read\": %.2f, "
                               "\"server_progress_run_delay_us_per_read\": %.2f, \"server_progress_faults\": %llu, "
                               "\"reader_run_delay_us_per_read\": %.2f}",
                               q ? ", " : "", kind_name[q], (unsigned long long)a->reads, a->reads / w, a->reader_cpu / w, a->reads / rc,
                               a->main_cpu / w, a->store_cpu / w, a->sprog_cpu / w, a->cprog_cpu / w,
                               (unsigned long long)a->reader_minflt, (unsigned long long)a->reader_nivcsw,
                               (unsigned long long)a->scan_rpcs, (unsigned long long)a->locked,
                               (unsigned long long)a->torn, (unsigned long long)a->client_sleeps,
                               (unsigned long long)a->tlb_shootdowns, (unsigned long long)a->resched_ipis,
                               (unsigned long long)a->call_ipis, (unsigned long long)a->server_wakeups,
                               a->reads ? a->sprog_cpu * 1e6 / a->reads : 0.0,
                               a->reads ? a->sprog_delay * 1e6 / a->reads : 0.0, (unsigned long long)a->sprog_minflt,
                               a->reads ? a->reader_delay * 1e6 / a->reads : 0.0);
    }
    snprintf(key, sizeof key, "compaction_run_breakdown_%s", tn);
    dsm_report_env(rep, key, "{%s}", acc_json);
    if (rp->failures)
        die("a scan_read failed during the compaction run", DSM_ERR_STATE);
    static double xs[MAX_BUCKETS], ys[MAX_BUCKETS];
    for (int b = 0; b < bend; b++) {
        xs[b] = b * (BUCKET_NS / 1e6);
        ys[b] = rp->counts[b] / (BUCKET_NS / 1e9);
    }
    snprintf(name, sizeof name, "corm_scan_read_over_time/%s", tn);
    if (dsm_report_series(rep, name, "ms", "reads/s", 1, xs, ys, (size_t)bend, c0 / 1e6, c1 / 1e6) != 0)
        die("series", DSM_ERR_NOMEM);
    munmap(rp, sizeof *rp);
    cluster_stop(&k);
}

/* ---- active memory ----------------------------------------------------------------- */


/* Active bytes after a spike of `count` objects of `size` bytes, `pct`%
 * freed at random, and compaction to a standstill with `bits`-bit IDs
 * (bits < 0: no compaction). */
static double active_after(int bits, uint32_t size, uint32_t count, int pct, uint64_t *live_slots)
{
    dsm_compact_config_t cfg;
    dsm_compact_config_init(&cfg);
    cfg.range_size = 64u << 20;
    cfg.id_bits = bits < 0 ? 16 : (uint32_t)bits;
    cfg.max_merges = 1u << 20;
    dsm_compact_store_t *s;
    dsm_status_t st = dsm_compact_store_create(&cfg, 0, 1, NULL, &s);
    if (st != DSM_OK)
        die("store", st);
    dsm_compact_ptr_t *p = malloc(count * sizeof *p);
    for (uint32_t i = 0; i < count; i++)
        if ((st = dsm_compact_store_alloc(s, size, &p[i])) != DSM_OK)
            die("spike", st);
    rng = 0x853c49e6748fea9bull;   /* the same frees for every compactor */
    uint64_t live = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (next() % 100 < (uint64_t)pct)
            (void)dsm_compact_store_free(s, &p[i]);
        else
            live++;
    }
    if (bits >= 0) {
        int cls = dsm_compact_class_for(size);
        for (int round = 0; round < 100; round++) {
            dsm_compact_stats_t cs = {0};
            if (dsm_compact_store_compact(s, cls, &cs) != DSM_OK || cs.merges == 0)
                break;
        }
    }
    dsm_compact_usage_t u;
    dsm_compact_store_usage(s, &u);
    dsm_compact_store_destroy(s);
    free(p);
    *live_slots = live;
    return (double)u.active_bytes;
}

static void memory(dsm_report_t *rep, int quick)
{
    static const uint32_t sizes[] = {32, 256, 1000, 1990};   /* slots of 64, 384 (256+hdr), 1024, 2048 B */
    static const int pcts[] = {50, 75, 90};
    uint32_t budget = quick ? (4u << 20) : (16u << 20);   /* bytes of slots in the spike */
    for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint32_t slot = dsm_compact_class_slot((uint32_t)dsm_compact_class_for(sizes[s]));
        uint32_t count = budget / slot;
        for (unsigned q = 0; q < sizeof pcts / sizeof pcts[0]; q++) {
            uint64_t live;
            double none = active_after(-1, sizes[s], count, pcts[q], &live);
            double mesh = active_after(0, sizes[s], count, pcts[q], &live);
            double c8 = active_after(8, sizes[s], count, pcts[q], &live);
            double c16 = active_after(16, sizes[s], count, pcts[q], &live);
            uint32_t per = 4096 / slot;
            double ideal = (double)((live + per - 1) / per) * 4096;
            char name[96];
            const char *label = slot == 2048 ? "2KiB" : NULL;
            char lb[16];
            if (!label) {
                snprintf(lb, sizeof lb, "%uB", sizes[s]);
                label = lb;
            }
            const dsm_figure_t *fg;
            snprintf(name, sizeof name, "corm16_vs_ideal_%s_%dpct", label, pcts[q]);
            if ((fg = dsm_report_add(rep, name, c16 / 1048576, "MiB", "ideal compactor", ideal / 1048576, 0)))
                dsm_report_print_figure(stdout, fg);
            snprintf(name, sizeof name, "corm16_vs_none_%s_%dpct", label, pcts[q]);
            if ((fg = dsm_report_add(rep, name, c16 / 1048576, "MiB", "no compaction", none / 1048576, 0)))
                dsm_report_print_figure(stdout, fg);
            snprintf(name, sizeof name, "corm8_vs_none_%s_%dpct", label, pcts[q]);
            if ((fg = dsm_report_add(rep, name, c8 / 1048576, "MiB", "no compaction", none / 1048576, 0)))
                dsm_report_print_figure(stdout, fg);
            /* the headlines: 2 KiB slots against the ideal at 75%, and 32-byte
             * objects against no compaction at 75% */
            if (slot == 2048 && pcts[q] == 75 &&
                (fg = dsm_report_add(rep, "corm16_vs_ideal_2KiB", c16 / 1048576, "MiB", "ideal compactor",
                                     ideal / 1048576, 0)))
                dsm_report_print_figure(stdout, fg);
            if (sizes[s] == 32 && pcts[q] == 75 &&
                (fg = dsm_report_add(rep, "corm16_vs_none_75pct", c16 / 1048576, "MiB", "no compaction",
                                     none / 1048576, 0)))
                dsm_report_print_figure(stdout, fg);
            snprintf(name, sizeof name, "corm16_vs_mesh_%s_%dpct", label, pcts[q]);
            if ((fg = dsm_report_add(rep, name, c16 / 1048576, "MiB", "CoRM-0 (offset-only, Mesh)", mesh / 1048576, 0)))
                dsm_report_print_figure(stdout, fg);
        }
    }
}

/* The program's phases, in the order they run (their --only names). */
enum { REMAP, LATENCY, THROUGHPUT, RUN, MEMORY };
static const char *const phase_names[] = {"remap", "latency", "throughput", "run", "memory"};

/* The figure catalogue (--list). A '*' is filled in by the run: the
 * transport (shm, tcp), an object size, the YCSB mix (50_50, 95_5) and key
 * distribution (uniform, zipf), the object class and the share freed. */
static const dsm_bench_case_t cases[] = {
    {"corm_direct_read_vs_get/*", "fabric get of the 32-byte object's slot", "us", 0, LATENCY, 32},
    {"corm_direct_read_vs_get/*/*B", "fabric get of the object's slot", "us", 0, LATENCY, 0},
    {"corm_direct_read_latency_vs_rpc/*/*B", "RPC read (dsm_compact_read)", "us", 0, LATENCY, 0},
    /* the headline, 50:50 uniform, the mix of the paper's ~1.8x */
    {"corm_direct_read_vs_rpc/*", "YCSB 50:50 uniform, RPC reads", "ops/s", 1, THROUGHPUT, 0},
    {"corm_direct_read_vs_rpc_95_5/*", "YCSB 95:5 uniform, RPC reads", "ops/s", 1, THROUGHPUT, 0},
    {"corm_direct_read_vs_rpc_blocking/shm", "YCSB 50:50 uniform, RPC reads; the server's progress thread blocking",
     "ops/s", 1, THROUGHPUT, 0},
    {"corm_ycsb_*_*_*/*", "the same with RPC reads", "ops/s", 1, THROUGHPUT, 0},
    {"corm_ycsb_cpu_*_*_*/*", "server CPU per op with RPC reads", "us/op", 0, THROUGHPUT, 0},
    {"corm_ycsb_cpu_per_request_*_*_*/*", "with RPC reads", "us/request", 0, THROUGHPUT, 0},
    /* what a server bound by its CPU would serve (the paper's setting) */
    {"corm_server_cpu_bound_vs_rpc/*", "YCSB 50:50 uniform, RPC reads: ops per server CPU second", "ops/cpu-s", 1,
     THROUGHPUT, 0},
    /* the RPC baseline against its protocol: one bare round trip per op */
    {"corm_rpc_time_vs_predicted/*", "1 msg round trip/op x the bare AM round trip (this run)", "us/op", 0,
     THROUGHPUT, 0},
    {"corm_rpc_time_vs_predicted_95_5/*", "1 msg round trip/op x the bare AM round trip (this run)", "us/op", 0,
     THROUGHPUT, 0},
    {"corm_scan_read_during_compaction/*", "the same client, quiet windows", "reads/s", 1, RUN, 0},
    /* the control: the same windows with a thread that only spins */
    {"corm_scan_read_beside_a_spinner/*", "the same client, quiet windows", "reads/s", 1, RUN, 0},
    {"corm_scan_read_beside_remaps/*", "the same client beside the spinner", "reads/s", 1, RUN, 0},
    /* what each of the compaction's remaps costs the server's other threads */
    {"corm_remaps_cost_a_sibling_thread", "the same remaps from another process", "us/pass", 0, REMAP, 0},
    /* ... and how a batch's pages are best dropped before its remaps */
    {"corm_batch_drop_tlb_shootdowns", "the same pages as a process_madvise list", "interrupts/call", 0, REMAP, 0},
    {"corm16_vs_ideal_2KiB", "ideal compactor", "MiB", 0, MEMORY, 0},
    {"corm16_vs_none_75pct", "no compaction", "MiB", 0, MEMORY, 0},
    {"corm16_vs_ideal_*_*pct", "ideal compactor", "MiB", 0, MEMORY, 0},
    {"corm16_vs_none_*_*pct", "no compaction", "MiB", 0, MEMORY, 0},
    {"corm8_vs_none_*_*pct", "no compaction", "MiB", 0, MEMORY, 0},
    {"corm16_vs_mesh_*_*pct", "CoRM-0 (offset-only, Mesh)", "MiB", 0, MEMORY, 0},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* The host's TLB shootdowns per call that drops a batch's pages before
 * its remaps (shootdown.h), as a span (the store's way) against a list
 * of pages to process_madvise: why the store drops spans. */
static void drop_cost(dsm_report_t *rep, int quick)
{
    dsm_drop_flushes_t d;
    int reps = quick ? 5 : 9;
    if (dsm_drop_flushes_measure(0, 1, reps, &d) != 0) {
        fprintf(stderr, "batch drop: not measured (it needs two CPUs and a child process)\n");
        return;
    }
    size_t n = (size_t)d.reps;
    int refused = d.list_per_call[0] < 0;
    double span = dsm_report_median(d.span_per_call, n), list = refused ? -1 : dsm_report_median(d.list_per_call, n);
    if (!refused)
        dsm_report_add_runs(rep, "corm_batch_drop_tlb_shootdowns", d.span_per_call, d.list_per_call, n,
                            "interrupts/call", "the same pages as a process_madvise list", 0);
    dsm_report_env(rep, "batch_drop",
                   "{\"pages_per_call\": %d, \"span_tlb_per_call\": %.1f, \"list_tlb_per_call\": %.1f, "
                   "\"list_refused\": %s, \"runs\": %zu}",
                   DSM_DROP_PAGES, span, list, refused ? "true" : "false", n);
    if (refused)
        fprintf(stderr, "batch drop: %d pages as one span cost %.1f TLB shootdowns a call (process_madvise refused)\n",
                DSM_DROP_PAGES, span);
    else
        fprintf(stderr, "batch drop: %d pages cost %.1f TLB shootdowns a call as one span, %.1f as a list\n",
                DSM_DROP_PAGES, span, list);
}

/* The price of one remap to the other threads of the remapping process
 * on this host (shootdown.h): what every block the compaction run's server
 * remaps costs its progress thread, which over tcp serves each read. */
static void remap_cost(dsm_report_t *rep, int quick)
{
    dsm_shootdown_t s;
    if (dsm_shootdown_measure(0, 1, quick ? 5 : 9, quick ? 0.1 : 0.3, &s) != 0) {
        fprintf(stderr, "remap cost: not measured (it needs two CPUs and a child process)\n");
        return;
    }
    size_t n = (size_t)s.reps;
    double lost = dsm_report_median(s.lost_us_per_remap, n);
    char anchor[160];
    snprintf(anchor, sizeof anchor, "the same remaps from another process (this run: a remap cost the sibling %.1f us)",
             lost);
    dsm_report_add_runs(rep, "corm_remaps_cost_a_sibling_thread", s.pass_us_same, s.pass_us_other, n, "us/pass", anchor,
                        0);
    double lo, hi;
    dsm_report_range(s.lost_us_per_remap, n, &lo, &hi);
    double same_rate = dsm_report_median(s.remaps_per_s_same, n), other_rate = dsm_report_median(s.remaps_per_s_other, n);
    dsm_report_env(rep, "remap_cost",
                   "{\"lost_us_per_remap\": %.3f, \"lost_us_per_remap_min\": %.3f, \"lost_us_per_remap_max\": %.3f, "
                   "\"remaps_per_s_same_process\": %.0f, \"remaps_per_s_other_process\": %.0f, \"runs\": %zu}",
                   lost, lo, hi, same_rate, other_rate, n);
    fprintf(stderr,
            "remap cost: a remap cost a sibling thread of its process %.1f us (%.1f-%.1f over %zu runs) beyond the same "
            "remaps from another process; %.0f remaps/s in its process, %.0f from another\n",
            lost, lo, hi, n, same_rate, other_rate);
}

/* Whether phase p runs: --only names it (as before) or a prefix of one of its figures. */
static int phase_on(const dsm_bench_opts_t *o, int p)
{
    return (o->only && strcmp(o->only, phase_names[p]) == 0) || dsm_bench_run_wanted(o, cases, N_CASES, p);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--scan-reader") == 0)
        return scan_reader_main(argv[2]);   /* the compaction run's reader process */
    const char *progress = NULL;
    const dsm_bench_flag_t flags[] = {{"--server-progress", "busy|blocking", &progress}};
    dsm_bench_opts_t o;
    int done = dsm_bench_parse(argc, argv, cases, N_CASES, flags, 1, &o);
    if (done >= 0)
        return done;
    if (progress) {
        dsm_progress_mode_t mode;
        if (dsm_bench_progress_flag("--server-progress", progress, &mode)) return 2;
        server_progress = (int)mode;
    }
    int quick = o.quick, reps = o.runs ? o.runs : quick ? 3 : 5;
    const char *json = o.json;
    if (reps < 1 || reps > MAX_REPS)
        reps = 5;
    dsm_set_log_level(0);
    dsm_report_t report;
    dsm_report_init(&report, "corm");
    dsm_report_print_header(stdout);
    if (phase_on(&o, REMAP)) {   /* first: their child processes fork before any cluster's threads exist */
        remap_cost(&report, quick);
        drop_cost(&report, quick);
    }
    /* --transport: the cluster phases measure that fabric alone */
    int shm = dsm_bench_transport_on(&o, DSM_TRANSPORT_SHM), tcp = dsm_bench_transport_on(&o, DSM_TRANSPORT_TCP);
    if (phase_on(&o, LATENCY)) {
        if (shm)
            latency(&report, DSM_TRANSPORT_SHM, reps, quick);
        if (tcp)
            latency(&report, DSM_TRANSPORT_TCP, reps, quick);
    }
    if (phase_on(&o, THROUGHPUT)) {
        if (shm)
            throughput(&report, DSM_TRANSPORT_SHM, reps, quick, 0);
        if (shm && server_progress < 0)
            throughput(&report, DSM_TRANSPORT_SHM, reps, quick, 1);
        if (tcp)
            throughput(&report, DSM_TRANSPORT_TCP, reps, quick, 0);
    }
    if (phase_on(&o, RUN)) {
        if (shm)
            compaction_run(&report, DSM_TRANSPORT_SHM, quick);
        if (tcp)
            compaction_run(&report, DSM_TRANSPORT_TCP, quick);
    }
    if (phase_on(&o, MEMORY))
        memory(&report, quick);
    dsm_report_env(&report, "quick", "%s", quick ? "true" : "false");
    dsm_report_env(&report, "repetitions", "%d", reps);
    dsm_report_env_str(&report, "setup", "one process: coordinator, server node 0, client node 1");
    dsm_report_env_str(&report, "block_size", "4096");
    dsm_report_env_str(&report, "server_progress_shm",
                       dsm_progress_name(server_progress_for(DSM_TRANSPORT_SHM)));
    dsm_report_env_str(&report, "server_progress_tcp",
                       dsm_progress_name(server_progress_for(DSM_TRANSPORT_TCP)));
    dsm_report_env_str(&report, "statistic", "median over repetitions of the mean per operation");
    int rc = json && dsm_report_write_json(&report, json) != 0 ? 1 : 0;
    dsm_report_free(&report);
    return rc;
}
