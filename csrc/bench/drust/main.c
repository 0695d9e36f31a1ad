/* dsm-bench-drust: ownership-guided coherence (DRust, own) against the
 * GAM-style directory (dir) and the single-process original (local), on the
 * same workloads, fabric and heap, in the same run.
 *
 * Setup: a coordinator and 3 nodes in this process (2 cores: one workload
 * thread per node), over shm and then tcp (loopback). Each workload of the
 * table below runs on 2 and on 3 of the nodes under own and dir, and as the
 * original (protocol=local: the nodes' streams one after the other on plain
 * memory, one thread); every run's checksum must equal the original's.
 * Throughput of a run: the nodes' operations over the longest node's
 * measured phase (each workload reports its "seconds"): kv's ops are per
 * node (the original runs the nodes' streams one after the other), gemm,
 * dataframe and socialnet split one fixed job over the nodes (the original
 * does the whole job). Messages and bytes per operation: every node's own and
 * dir counters (the locks are own's mutexes under both protocols).
 *
 * Figures are medians over R >= 5 interleaved repetitions, at least 7 for
 * the one-node ones: own, dir, original, ... in turn, own and dir swapping
 * which goes first each repetition, so drift on the shared machine hits
 * all alike; at 3 nodes after an untimed run, and with own run a second
 * time on dir's other side (W_own_vs_own, the A/A pair: the spread these
 * ratios have by chance). The figures and their anchors: the case table below (--list
 * prints it).
 * own and dir run with kv's default lock (lock=auto: cas over shm, deleg
 * over tcp, the faster of mutex_deleg_vs_cas in earlier runs), written to
 * env "mutex_default"; "mutex_faster_TRANSPORT" says which won this run. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

#include "bench/driver.h"
#include "apps/coh.h"
#include "apps/kvc.h"
#include "apps/workloads.h"
#include "bench/report.h"
#include "dsm/coord.h"
#include "dsm/sdk.h"
#include "dsm/log.h"
#include "dsm/own.h"
#include "harness/cluster.h"
#include "util/clock.h"

#define SECRET "drust-bench-secret"
enum { NODES = 3, RET_CAP = 2048, MAX_REPS = 16, MAX_WL = 8, ONE_NODE_REPS = 7 };

static void die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-drust: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

/* This process's CPU time (user + system) in seconds: against the wall
 * clock it says how much of the host the nodes got while other jobs ran. */
static double cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* ---- the workloads -----------------------------------------------------------
 * One entry each. A workload takes protocol=own|dir|local, rank_index,
 * nodes, directory (the global address of the zeroed shared bytes its
 * scratch_bytes asks for) and, for local, streams; it returns ops, ops_per_sec, checksum, messages
 * and bytes (as kv does). params: its own parameters, quick and full. */
typedef struct bench_workload {
    const dsm_workload_info_t *info;   /* its name, function and scratch memory (the directory's bytes) */
    const char *quick, *full;
    const char *one_node;   /* own_1node_vs_original's parameters, if not quick/full's */
    const char *floor;      /* the original's extra parameters for its leanest form, run beside it (or NULL) */
    const char *floor_is;   /* what that form is (the floor figure's anchor) */
    const char *coarse;     /* own_1node's parameters at a coarser grain, run beside it (or NULL) */
    const char *coarse_is;  /* what that grain is (the coarse figure's anchor) */
    const char *coarse_name;/* the coarse figures' suffix ("coarse" if NULL) */
    const char *shaped;     /* the original's extra parameters for one laid out as own's guarding mutex
                               (Mutex<Box<T>>: the object's address read from the lock), run beside the
                               original and at the coarse grain (or NULL) */
    const char *shaped_is;  /* what it is (the /boxed figures' anchor) */
    int streams;   /* kv: ops are per node, and the original runs `nodes` streams; the
                      others split one fixed job over the nodes, and the original does it all */
    const char *bare;       /* own's extra parameters for a run without boxes, beside own_1node (or NULL) */
    const char *strict;     /* the original's extra parameters for a stricter anchor, beside it (or NULL):
                               own's added time, /channels and /coarse are measured against it */
    const char *strict_name, *strict_is;   /* its figure's suffix and what it is */
    const char *orig_is;    /* what the original is, where "the original, 1 stream" does not say enough */
    const char *floor_name; /* the floor figure's suffix ("floor" if NULL) */
    int timing;             /* takes timing=1 (--profile's phases); the others refuse it */
    int parallel;           /* the original takes threads=N: as many threads as nodes, on this host's
                               cores, beside the runs (the work the nodes' threads can expect) */
} bench_workload_t;

/* kv's large table, and what it is against this host's caches (main
   fills it in: describe_large_table). */
#define LARGE_BUCKETS 131072
#define LARGE_KEYS 1048576
#define STR_(x) #x
#define STR(x) STR_(x)
static char large_is[192] = "the original, " STR(LARGE_BUCKETS) " buckets of 1M keys";

/* quick's kv and gemm make runs of tens of ms over tcp, not a few: a run
   that short on a shared host read anywhere from 0.3x to 3x its neighbours,
   a node thread descheduled once being most of it. */
static const bench_workload_t workloads[] = {
    /* kv on 1 node: enough operations (a few ms) that the clock's and the
       scheduler's noise do not decide the ratio. Its original's locks have
       own's shape (lock=spin, the default); pthread mutexes beside it, and
       an original laid out as own's Mutex<Box<T>> (lock=boxed). The large
       table (40 MiB of buckets, past a core's L2, as the paper's 48 GB
       store is past any cache) shows what a cache miss per lock and per
       bucket does to the ratio; its anchor says where the table stands
       against this host's last-level cache. */
    {.info = &dsm_kv_info,
     .quick = "buckets=64\nkeys=256\nops=1000\n",
     .full = "buckets=64\nkeys=256\nops=3000\n",
     .one_node = "buckets=64\nkeys=256\nops=200000\n",
     .floor = "lock=local\n",
     .floor_is = "the original with pthread mutexes",
     .floor_name = "pthread",
     .coarse = "buckets=" STR(LARGE_BUCKETS) "\nkeys=" STR(LARGE_KEYS) "\nops=200000\n",
     .coarse_is = large_is,
     .coarse_name = "large",
     .shaped = "lock=boxed\n",
     .shaped_is = "the original as Mutex<Box<T>> (the bucket's address read from its lock)",
     .streams = 1,
     .orig_is = "the original, 1 stream (own's lock shape: one exchange, one store)",
     .timing = 1},
    {.info = &dsm_gemm_info, .quick = "n=256\ntile=16\n", .full = "n=256\ntile=16\n", .parallel = 1},
    /* dataframe on 1 node: 1M rows in both modes. On 2 and 3 nodes
       12 chunks, so that every node queries as many rows (16 chunks left
       node 0 a third more than the others, and the time its own); quick
       keeps 768K rows: 2M ran a 2-node node 0 out of its heap. The query
       runs 16 times in the measured phase (tens of ms), each ending with
       its result on node 0, so that 3 nodes' threads time-sliced on 2 cores
       average out rather than one slice deciding. */
    {.info = &dsm_dataframe_info,
     .quick = "rows=786432\nchunk=65536\ngroups=16\nqueries=16\n",
     .full = "rows=1572864\nchunk=131072\ngroups=16\nqueries=16\n",
     .one_node = "rows=1048576\nchunk=65536\ngroups=16\n",
     .timing = 1,
     .parallel = 1},
    /* socialnet on 1 node: enough posts (tens of ms) for the same reason.
       Its original is the paper's, posts passed by value between the
       services; beside it, the stricter anchor passes pointers on plain
       memory (DRust's port without DSM), and the floor fuses the three
       services into one loop over one buffer. own's cost against pointers
       is per post, so the coarse grain (16x the text) shows where it falls
       within 3%. */
    {.info = &dsm_socialnet_info,
     .quick = "posts=100\ntext=256\n",
     .full = "posts=1000\ntext=256\n",
     .one_node = "posts=20000\ntext=256\n",
     .floor = "fused=1\n",
     .floor_is = "the original's floor (its services fused)",
     .coarse = "posts=4000\ntext=4096\n",
     .coarse_is = "the pointer original, 4096-byte posts (16x the work per post)",
     .bare = "boxes=0\n",
     .strict = "values=0\n",
     .strict_name = "pointers",
     .strict_is = "the original passing pointers on plain memory",
     .orig_is = "the paper's original, posts passed by value (a speedup as its Fig. 5b, not an overhead)",
     .timing = 1},
};
enum { NWL = sizeof workloads / sizeof workloads[0] };

/* ---- the cluster ---------------------------------------------------------------- */

/* --progress busy|blocking: the nodes' progress threads (default: the
 * node's default, blocking). */
static int node_progress = -1;

/* Each node's heap: the 3-node runs', and the 1-node runs' (kv's large
 * table, about 54 MiB under own, on a heap nothing else has used). */
enum { HEAP_BYTES = 64u << 20, ONE_NODE_HEAP_BYTES = 256u << 20 };

static void cluster_start_n(dsm_harness_t *c, dsm_transport_t tr, int nodes, size_t heap_bytes)
{
    dsm_harness_bench_init(c, tr, SECRET, heap_bytes, 0);
    c->op_timeout_ms = 60000;
    c->peer_timeout_ms = 20000;
    /* --progress, else the node's own default */
    c->blocking_mask = node_progress == DSM_PROGRESS_BLOCKING ? ~0u : 0;
    c->busy_mask = node_progress == DSM_PROGRESS_BUSY ? ~0u : 0;
    dsm_status_t st = dsm_harness_start(c, nodes);
    if (st != DSM_OK) die("cluster", st);
}

static void cluster_start(dsm_harness_t *c, dsm_transport_t tr) { cluster_start_n(c, tr, NODES, HEAP_BYTES); }

static void cluster_stop(dsm_harness_t *c)
{
    dsm_harness_stop(c);
}

/* ---- one run ---------------------------------------------------------------------- */

/* The fabric's counters over a run, summed over the run's nodes: what
 * went on the wire, whatever layer sent it, and the wake-ups it cost. */
typedef struct fab {
    double am_sent;      /* active messages, requests and replies (one-sided emulation's not among them) */
    double rma;          /* one-sided operations (over tcp each is a request and a reply) */
    double wakeups;      /* progress threads woken from their event fd */
    double sleeps;       /* waiting threads that slept on the event fd */
    double progress_cpu; /* s of CPU the progress threads used */
    double rt[NODES], rt_slept[NODES];   /* each node's round trips waited, and those that slept */
} fab_t;

typedef struct run {
    double ops, ops_per_sec, messages, bytes, checksum, held_back;
    double cpu_seconds;   /* the process's, over the run: every node's threads */
    double seconds;       /* the longest node's measured phase */
    fab_t fab;
    double wire_am, wire_onesided;   /* timing=1: the fabric's over the measured phases (fabric_am_sent, fabric_onesided) */
    double node_msgs[NODES], node_ops[NODES];   /* each node's messages (its counters) and operations */
    double node_waited[NODES];   /* each node's round trips waited in its measured phase (-1: not reported) */
    double node_wait_ns[NODES];  /* and the time the fabric's waits took */
    double phase_ns[NODES][8];   /* timing=1: each node's t_NAME_ns results (profile_phases' order) */
    double task_ns[3];           /* timing=1, dataframe: node 0's t_task_{start,run,tail}_ns */
} run_t;

/* The phases a workload reports with timing=1 (t_NAME_ns), in one list. */
enum { PH_ALLOC, PH_ACQUIRE, PH_WORK, PH_RELEASE, PH_SEND, PH_RECV, PH_DROP };
static const char *const profile_phases[8] = {[PH_ALLOC] = "alloc", [PH_ACQUIRE] = "acquire", [PH_WORK] = "work",
                                              [PH_RELEASE] = "release", [PH_SEND] = "send", [PH_RECV] = "recv",
                                              [PH_DROP] = "drop", NULL};

typedef struct node_run {
    const bench_workload_t *w;
    dsm_node_t *node;
    char args[512];
    char ret[RET_CAP];
    size_t ret_len;
    dsm_status_t st;
} node_run_t;

static void *node_thread(void *arg)
{
    node_run_t *r = arg;
    r->st = r->w->info->fn(r->node, r->args, strlen(r->args), r->ret, sizeof r->ret - 1, &r->ret_len);
    r->ret[r->ret_len] = '\0';
    return NULL;
}

/* A result's value, or `otherwise` if the workload returned none. */
static double result_or(const node_run_t *r, const char *name, double otherwise)
{
    size_t n = strlen(name);
    for (const char *p = r->ret; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
    return otherwise;
}

static fab_t fab_now(dsm_harness_t *c, int nodes)
{
    fab_t f = {0};
    for (int i = 0; c && i < nodes; i++) {
        dsm_stats_t s;
        dsm_fabric_stats(dsm_node_fabric(c->nodes[i]), &s);
        f.am_sent += (double)s.am_sent;
        f.rma += (double)(s.gets + s.puts + s.atomics);
        f.wakeups += (double)s.progress_wakeups;
        f.sleeps += (double)s.wait_sleeps;
        f.progress_cpu += (double)s.progress_cpu_ns / 1e9;
        f.rt[i] = (double)s.round_trips_waited;
        f.rt_slept[i] = (double)s.round_trips_slept;
    }
    return f;
}

static double result(const node_run_t *r, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = r->ret; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
    fprintf(stderr, "dsm-bench-drust: %s returned no %s:\n%s\n", r->w->info->name, name, r->ret);
    exit(1);
}

/* Run workload w on nodes 0..nodes-1 of c under proto (own or dir), or the
 * original (c NULL: `nodes` streams in this thread). extra: more params. */
static run_t run_once(dsm_harness_t *c, const bench_workload_t *w, const char *params, const char *proto,
                      int nodes, const char *extra)
{
    node_run_t r[NODES];
    pthread_t th[NODES];
    dsm_gaddr_t dir = 0;
    int n = c ? nodes : 1;
    for (int i = 0; i < n; i++) {
        r[i] = (node_run_t){.w = w, .node = c ? c->nodes[i] : NULL};
        snprintf(r[i].args, sizeof r[i].args, "%sprotocol=%s\nrank_index=%d\nnodes=%d\n%s", params, proto, i,
                 c ? nodes : 1, extra ? extra : "");
    }
    if (c) {
        /* the shared directory, as large as the workload says these arguments need */
        uint64_t bytes = w->info->scratch_bytes("directory", r[0].args, strlen(r[0].args), (uint64_t)nodes);
        if (bytes == 0) die("directory (the workload asks for none)", DSM_ERR_INVALID);
        dsm_status_t st = dsm_alloc(c->nodes[0], 0, bytes, &dir);
        if (st != DSM_OK) die("directory", st);
        uint8_t *p = dsm_local_ptr(c->nodes[0], dir);
        if (p == NULL) die("directory", DSM_ERR_STATE);
        memset(p, 0, bytes);
    }
    fab_t f0 = fab_now(c, n);
    double cpu0 = cpu_seconds();
    for (int i = 0; i < n; i++) {
        size_t l = strlen(r[i].args);
        if (c) snprintf(r[i].args + l, sizeof r[i].args - l, "directory=%llu\n", (unsigned long long)dir);
        else if (w->streams) snprintf(r[i].args + l, sizeof r[i].args - l, "streams=%d\n", nodes);
        if (pthread_create(&th[i], NULL, node_thread, &r[i]) != 0) die("thread", DSM_ERR_NOMEM);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    run_t out = {.cpu_seconds = cpu_seconds() - cpu0};
    fab_t f1 = fab_now(c, n);
    out.fab = (fab_t){.am_sent = f1.am_sent - f0.am_sent, .rma = f1.rma - f0.rma, .wakeups = f1.wakeups - f0.wakeups,
                      .sleeps = f1.sleeps - f0.sleeps, .progress_cpu = f1.progress_cpu - f0.progress_cpu};
    for (int i = 0; i < n; i++) {
        out.fab.rt[i] = f1.rt[i] - f0.rt[i];
        out.fab.rt_slept[i] = f1.rt_slept[i] - f0.rt_slept[i];
    }
    double seconds = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].st != DSM_OK) {
            fprintf(stderr, "dsm-bench-drust: %s protocol=%s nodes=%d: node %d: %s\n%s", w->info->name, proto, nodes, i,
                    dsm_strerror(r[i].st), r[i].ret);
            exit(1);
        }
        out.ops += result(&r[i], "ops");
        double s = result(&r[i], "seconds");
        if (s > seconds) seconds = s;
        out.messages += result(&r[i], "messages");
        out.node_msgs[i] = result(&r[i], "messages");
        out.node_ops[i] = result(&r[i], "ops");
        out.node_waited[i] = result_or(&r[i], "round_trips_waited", -1);
        out.node_wait_ns[i] = result_or(&r[i], "round_trip_wait_ns", 0);
        out.bytes += result(&r[i], "bytes");
        if (c) out.held_back += result(&r[i], "held_back");
        out.wire_am += result_or(&r[i], "fabric_am_sent", 0);
        out.wire_onesided += result_or(&r[i], "fabric_onesided", 0);
        for (int k = 0; profile_phases[k]; k++) {
            char pn[32];
            snprintf(pn, sizeof pn, "t_%s_ns", profile_phases[k]);
            out.phase_ns[i][k] = result_or(&r[i], pn, 0);
        }
    }
    out.task_ns[0] = result_or(&r[0], "t_task_start_ns", 0);
    out.task_ns[1] = result_or(&r[0], "t_task_run_ns", 0);
    out.task_ns[2] = result_or(&r[0], "t_task_tail_ns", 0);
    out.seconds = seconds;
    out.ops_per_sec = out.ops / (seconds > 0 ? seconds : 1e-9);
    out.checksum = result(&r[0], "checksum");
    if (c) (void)dsm_free(c->nodes[0], dir);
    return out;
}

/* One untimed run of each protocol before a workload's timed ones: its
 * first run on a cluster pays for what every later run finds made (the
 * nodes' first heap blocks for its objects, its types and tasks, the
 * peers' first messages) and read a quarter of the speed of the next. */
static void warm_up(dsm_harness_t *c, const bench_workload_t *w, const char *params, int nodes)
{
    (void)run_once(c, w, params, "own", nodes, NULL);
    if (nodes > 1) (void)run_once(c, w, params, "dir", nodes, NULL);
    else (void)run_once(NULL, w, params, "local", 1, NULL);
}

/* ---- local dereference cycles --------------------------------------------------- */

static uint64_t cycles(void)
{
#ifdef HAVE_TSC
    return __rdtsc();
#else
    return dsm_now_ns();
#endif
}

enum { DEREF_TYPE = 0x4452, DEREF_ROUNDS = 15 };   /* rounds of 20000 */

static double min_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] < m) m = v[i];
    return m;
}

static double max_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] > m) m = v[i];
    return m;
}

/* Cycles per (borrow, 8-byte load, release) of a local object, by guard
 * (guard = 1) or by box; and of a plain 8-byte load (the anchor), each the
 * fastest of reps rounds (another thread on the core only adds cycles). */
static void deref_cycles(dsm_node_t *node, int reps, double *guarded, double *boxed, double *plain)
{
    enum { N = 20000 };
    dsm_status_t st = dsm_own_type_register(DEREF_TYPE, "bench.word", 8);
    if (st != DSM_OK) die("type", st);
    dsm_own_box_t box, inner;
    dsm_own_mutex_t mx;
    if ((st = dsm_own_box_alloc(node, DEREF_TYPE, 8, &box)) != DSM_OK || (st = dsm_own_box_alloc(node, DEREF_TYPE, 8, &inner)) != DSM_OK ||
        (st = dsm_own_mutex_new(node, DSM_OWN_MUTEX_DELEG, &mx)) != DSM_OK ||
        (st = dsm_own_mutex_adopt(node, mx, inner, &mx)) != DSM_OK)
        die("deref setup", st);
    (void)dsm_own_set_checks(node, 0);
    dsm_own_guard_t g;
    if ((st = dsm_own_mutex_lock_guard(node, mx, &g)) != DSM_OK) die("lock", st);
    static volatile uint64_t word = 7;
    double gv[MAX_REPS], bv[MAX_REPS], pv[MAX_REPS];
    uint64_t sink = 0;
    for (int k = 0; k < reps; k++) {
        uint64_t t0 = cycles();
        for (int i = 0; i < N; i++) sink += word;
        uint64_t t1 = cycles();
        for (int i = 0; i < N; i++) {
            dsm_own_ref_t r;
            if (dsm_own_guard_borrow(node, &g, &r) != DSM_OK) die("guard borrow", DSM_ERR_STATE);
            sink += *(const volatile uint64_t *)r.data;
            (void)dsm_own_guard_release(node, &g, &r);
        }
        uint64_t t2 = cycles();
        for (int i = 0; i < N; i++) {
            dsm_own_ref_t r;
            if (dsm_own_box_borrow(node, box, &r) != DSM_OK) die("borrow", DSM_ERR_STATE);
            sink += *(const volatile uint64_t *)r.data;
            (void)dsm_own_box_release(node, &r);
        }
        uint64_t t3 = cycles();
        pv[k] = (double)(t1 - t0) / N;
        gv[k] = (double)(t2 - t1) / N;
        bv[k] = (double)(t3 - t2) / N;
    }
    if (sink == 1) fprintf(stderr, " ");
    *plain = min_of(pv, reps);
    *guarded = min_of(gv, reps);
    *boxed = min_of(bv, reps);
    (void)dsm_own_mutex_unlock_guard(node, &g);
    (void)dsm_own_set_checks(node, 1);
    (void)dsm_own_mutex_free(node, mx);
    (void)dsm_own_box_drop(node, box);
}

/* Cycles per kv read's lock path on one node, as kv runs it (the
 * workload's own tables, apps/coh.h): own's lock-and-borrow, an 8-byte
 * load and release-and-unlock of a local Mutex<Box<T>> (a CAS mutex and
 * its object here), and the original's spin lock, borrow, load, release
 * and unlock on process memory; over 64 locks in turn, each the fastest
 * of reps rounds. What own adds is its check of the handle and of the
 * object the lock word names, which the original's pointers need not. */
static void lock_cycles(dsm_node_t *node, int reps, double *own, double *orig)
{
    enum { N = 20000, NL = 64 };
    const dsm_coh_ops_t *ops = dsm_coh_ops("own"), *local = dsm_coh_ops("local");
    const dsm_coh_lock_ops_t *cas = dsm_coh_locks("cas"), *spin = dsm_coh_locks("spin");
    uint64_t guarded[NL], obj[NL], lk[NL];
    dsm_status_t st = DSM_OK;
    for (int i = 0; i < NL && st == DSM_OK; i++) {
        uint64_t h, l;
        if ((st = ops->alloc(node, DEREF_TYPE, 8, &h)) == DSM_OK && (st = cas->lock_new(node, &l)) == DSM_OK &&
            (st = ops->adopt(node, l, h, &guarded[i])) == DSM_OK && (st = local->alloc(NULL, 0, 8, &obj[i])) == DSM_OK)
            st = spin->lock_new(NULL, &lk[i]);
    }
    if (st != DSM_OK) die("lock cycles setup", st);
    double ov[MAX_REPS], sv[MAX_REPS];
    uint64_t sink = 0;
    for (int k = 0; k < reps; k++) {
        uint64_t t0 = cycles();
        for (int i = 0; i < N; i++) {
            dsm_coh_ref_t r;
            if (ops->lock_borrow(node, guarded[i & (NL - 1)], &r) != DSM_OK) die("lock_borrow", DSM_ERR_STATE);
            sink += *(const volatile uint64_t *)r.data;
            (void)ops->unlock_release(node, &r);
        }
        uint64_t t1 = cycles();
        for (int i = 0; i < N; i++) {
            dsm_coh_ref_t r;
            (void)spin->lock(NULL, lk[i & (NL - 1)]);
            (void)local->borrow(NULL, obj[i & (NL - 1)], &r);
            sink += *(const volatile uint64_t *)r.data;
            (void)local->release(NULL, &r);
            (void)spin->unlock(NULL, lk[i & (NL - 1)]);
        }
        uint64_t t2 = cycles();
        ov[k] = (double)(t1 - t0) / N;
        sv[k] = (double)(t2 - t1) / N;
    }
    if (sink == 1) fprintf(stderr, " ");
    *own = min_of(ov, reps);
    *orig = min_of(sv, reps);
    for (int i = 0; i < NL; i++) {
        cas->lock_free(node, guarded[i]);   /* frees the object it guards */
        (void)local->drop(NULL, obj[i]);
        spin->lock_free(NULL, lk[i]);
    }
}

/* ---- figures ------------------------------------------------------------------------ */

static const dsm_figure_t *emit(dsm_report_t *rep, const char *name, double v, const char *unit, const char *anchor,
                                double a, int higher)
{
    return dsm_report_add_print(rep, name, v, unit, anchor, a, higher);
}

static void same_result(const char *what, const run_t *a, const run_t *original)
{
    if (a->checksum != original->checksum) {
        fprintf(stderr, "dsm-bench-drust: %s: checksum %.0f differs from the original's %.0f\n", what, a->checksum,
                original->checksum);
        exit(1);
    }
}

/* The round trip of one repetition, idle in each wait mode (the waiter
 * spinning until its answer; the waiter asleep at once, so that each
 * answer wakes it), and with nodes 1 and 2 echoing beside it; the
 * process's CPU time per spinning round trip (every thread's: both nodes'
 * progress threads and the caller). */
typedef struct rtt {
    double spin_us, sleep_us, loaded_us, cpu_us;
} rtt_t;

/* One run of a 1-node round: whether the workload has it, its cluster
 * (NULL: the original, in process), workload parameters, protocol and
 * extra parameters, what it is (for a checksum mismatch), where its ops/s
 * go, and the run whose checksum it must match (ONE_ANCHOR: none, it is an
 * anchor). Indexed by one_node_kind. */
enum one_node_kind {
    ONE_OWN, ONE_ORIG, ONE_NOCHECKS, ONE_FLOOR, ONE_STRICT, ONE_BARE, ONE_SHAPED,
    ONE_COARSE_OWN, ONE_COARSE_ORIG, ONE_COARSE_SHAPED, ONE_KINDS, ONE_ANCHOR = -1
};
typedef struct one_node_run {
    int on;
    dsm_harness_t *c;
    const char *params, *proto, *extra, *what;
    double *out;
    int anchor;
} one_node_run_t;

/* Per transport and workload: medians of the runs. */
typedef struct wl_meds {
    double own[2], dir[2], orig[2];          /* ops/s at [0] 2 nodes, [1] 3 nodes */
    double own_msgs, dir_msgs, own_bytes, dir_bytes;   /* per op, 3 nodes */
    double deleg, deleg_msgs, cas, cas_msgs; /* kv: own with each mutex kind, 3 nodes */
    double compute_us;                       /* the original's time per op, 3 nodes' job, one thread */
    double parallel_us;                      /* the original on 3 threads: a thread's time per op (0: not run) */
    rtt_t rtt;                               /* the round trips measured beside the runs */
    double own_cpu_us, dir_cpu_us;           /* the process's CPU time per op, 3 nodes */
    int by_waits;                            /* every run reported each node's round trips waited */
    /* per node, 3 nodes, [0] own [1] dir, per operation of a node's thread
       (the unit of the time per operation: the run's ops / nodes): the
       round trips it waited on, and its share of the work (its ops over
       that unit) */
    double waited[2][NODES], work_share[2][NODES];
    double seen_rtt[2][NODES];   /* the round trip each node's waits saw, us (their time over their count) */
    /* [own, dir]: the share of the round trips waited that slept before
       their answer, per node and over the nodes (the fabric's counters) */
    double slept[2][NODES], slept_all[2];
} wl_meds_t;

/* ---- the round trip the predictions use ----------------------------------------
 * An active message's round trip between two of the cluster's nodes (an
 * echo answered in the handler), measured in the same run as the
 * workloads: a protocol's time per operation should be its messages per
 * operation times half of it (a one-way message is half a round trip). */
enum { H_ECHO = DSM_AM_USER_FIRST, RTT_WARMUP = 200, RTT_BATCH = 400, RTT_BATCHES = 5, RTT_PER_REP = 3 };

static void echo_handler(void *ctx, const dsm_am_msg_t *msg)
{
    (void)dsm_fabric_am_reply((dsm_fabric_t *)ctx, msg->src_rank, msg->request_id, DSM_OK, msg->data, msg->len);
}

/* The load the workloads run under: every node's thread asking another
 * node at once, on a host with fewer cores than nodes. For the loaded
 * round trip, nodes 1 and 2 each send the same echo to the next node in a
 * loop while node 0's are timed, so all three threads and their progress
 * threads compete as in a workload. */
typedef struct echo_load {
    dsm_harness_t *c;
    int from;
} echo_load_t;

static volatile int load_stop;

static void *echo_loader(void *arg)
{
    const echo_load_t *l = arg;
    dsm_fabric_t *f = dsm_node_fabric(l->c->nodes[l->from]);
    uint32_t to = dsm_node_rank(l->c->nodes[(l->from + 1) % NODES]);
    uint64_t word = 7, back = 0;
    while (!__atomic_load_n(&load_stop, __ATOMIC_RELAXED)) {
        size_t got = 0;
        dsm_status_t st = dsm_fabric_am_request(f, to, H_ECHO, &word, sizeof word, &back, sizeof back, &got, 0);
        if (st != DSM_OK) die("echo (load)", st);
    }
    return NULL;
}

/* The round trips measured: idle with node 0's waiter spinning until its
 * answer or asleep at once (the fabric's adaptive spin, left alone, picks
 * either by its state, and the two differ by the wake-up a sleeper pays),
 * or loaded (nodes 1 and 2 echoing beside it, every node's waiter asleep
 * at once, as most of the 3-node workloads' waits are; left adaptive, it
 * moved several-fold between the repetitions of a run). */
enum rtt_mode { RTT_SPIN, RTT_SLEEP, RTT_LOADED };
enum { RTT_SPIN_FOREVER_US = 1000000000 };   /* longer than any answer takes */

/* Median over `batches` batches of node 0's mean round trip to node 1 in
 * us, in `mode`; *cpu_us (if not NULL) the process's CPU time per round
 * trip over the batches. */
static double am_rtt_us(dsm_harness_t *c, enum rtt_mode mode, int batches, double *cpu_us)
{
    int loaded = mode == RTT_LOADED;
    pthread_t lt[NODES];
    echo_load_t la[NODES];
    for (int i = 0; i < NODES; i++) {
        dsm_fabric_t *f = dsm_node_fabric(c->nodes[i]);
        dsm_status_t rs = dsm_fabric_am_register(f, H_ECHO, echo_handler, f);
        if (rs != DSM_OK) die("echo handler", rs);
    }
    int fixed = loaded ? NODES : 1;   /* the nodes whose waiters are fixed */
    for (int i = 0; i < fixed; i++)
        dsm_fabric_fix_wait_spin(dsm_node_fabric(c->nodes[i]), mode == RTT_SPIN ? RTT_SPIN_FOREVER_US : 0);
    __atomic_store_n(&load_stop, 0, __ATOMIC_RELAXED);
    for (int i = 1; loaded && i < NODES; i++) {
        la[i] = (echo_load_t){.c = c, .from = i};
        if (pthread_create(&lt[i], NULL, echo_loader, &la[i]) != 0) die("echo load", DSM_ERR_NOMEM);
    }
    dsm_fabric_t *cli = dsm_node_fabric(c->nodes[0]);
    dsm_status_t st;
    uint32_t to = dsm_node_rank(c->nodes[1]);
    uint64_t word = 42, back = 0;
    double batch[RTT_BATCHES], cpu0 = 0;
    if (batches > RTT_BATCHES) batches = RTT_BATCHES;
    for (int b = -1; b < batches; b++) {
        int n = b < 0 ? RTT_WARMUP : RTT_BATCH;
        if (b == 0) cpu0 = cpu_seconds();
        uint64_t t0 = dsm_now_ns();
        for (int i = 0; i < n; i++) {
            size_t got = 0;
            st = dsm_fabric_am_request(cli, to, H_ECHO, &word, sizeof word, &back, sizeof back, &got, 0);
            if (st != DSM_OK) die("echo", st);
        }
        if (b >= 0) batch[b] = (double)(dsm_now_ns() - t0) / 1e3 / n;
    }
    if (cpu_us) *cpu_us = (cpu_seconds() - cpu0) * 1e6 / ((double)batches * RTT_BATCH);
    __atomic_store_n(&load_stop, 1, __ATOMIC_RELAXED);
    for (int i = 1; loaded && i < NODES; i++) pthread_join(lt[i], NULL);
    for (int i = 0; i < fixed; i++) dsm_fabric_fix_wait_spin(dsm_node_fabric(c->nodes[i]), -1);
    for (int i = 0; i < NODES; i++) (void)dsm_fabric_am_register(dsm_node_fabric(c->nodes[i]), H_ECHO, NULL, NULL);
    return dsm_report_median(batch, (size_t)batches);
}

/* One repetition's round trips, taken beside its workload runs (the
 * host's load drifts between repetitions; a round trip measured once
 * before every workload would predict runs made under another load). */
static rtt_t rtt_now(dsm_harness_t *c, int batches)
{
    rtt_t r;
    r.spin_us = am_rtt_us(c, RTT_SPIN, batches, &r.cpu_us);
    r.sleep_us = am_rtt_us(c, RTT_SLEEP, batches, NULL);
    r.loaded_us = am_rtt_us(c, RTT_LOADED, batches, NULL);
    return r;
}

/* A protocol's measured time per operation against what its messages and
 * its work predict. Each node's thread runs its operations one after
 * another, all nodes at once, so the time per operation of one thread is
 * the longest node's phase over its operations (nodes / the run's ops/s).
 * An operation costs its local work (the original's time per operation
 * in the same repetition: what the same job takes on plain memory) and
 * its messages, each half a round trip (one-way messages, as own's unlock,
 * are counted as one message each). Idle: the round trip alone, as the
 * workload's waits took it: a waiter that spun until its answer pays the
 * spinning round trip, one that slept also its wake-up (the sleeping round
 * trip); the share of the workload's round trips that slept (the fabric
 * counts them) weighs the two, both measured in the repetition. Loaded:
 * the round trip with every node echoing at once, and the work slowed by
 * the nodes' threads sharing the host's cores (nodes / cores when there
 * are more nodes than cores); both are what a 3-node run on this host can
 * expect. Then own against dir as the predictions have it.
 *
 * Where a workload reports each node's round trips waited over its
 * measured phase (round_trips_waited: gemm, socialnet), the prediction is
 * per node instead, from what the node's thread waited on in that phase
 * (a request's reply, a one-sided read; a dir home's recall counted to
 * the requester that waited for it) per operation, each a whole round
 * trip, plus its share of the work; the busiest node's is the time per
 * operation. socialnet is a pipeline, each node one service: it is as
 * fast as its slowest stage, and averaging messages over the nodes spread
 * the busiest stage's round trips over idle ones. gemm's message counters
 * take in its setup and checksum, outside the measured phase. One-way
 * messages (a free, a posted drop) cost the node that sends them no wait
 * and are not in it; kv, whose unlock is one, keeps its messages. */
typedef struct prediction {
    double us;      /* predicted time per operation */
    int node;       /* by round trips waited: the busiest node (-1: messages averaged over the nodes) */
    double count;   /* its messages (averaged) or round trips waited per operation */
    double work;    /* its work per operation */
    double rtt;     /* the round trip it was priced at, us */
    double slept;   /* idle: the share of its round trips that slept */
} prediction_t;

/* The idle round trip of waits of which a share `slept` slept. */
static double idle_rtt(const rtt_t *r, double slept)
{
    return r->spin_us + slept * (r->sleep_us - r->spin_us);
}

static prediction_t predict(const wl_meds_t *m, int proto, int loaded, double work_scale)
{
    prediction_t best = {0, -1, proto ? m->dir_msgs : m->own_msgs, m->compute_us * work_scale, 0, 0};
    if (!m->by_waits) {
        best.slept = m->slept_all[proto];
        best.rtt = loaded ? m->rtt.loaded_us : idle_rtt(&m->rtt, best.slept);
        best.us = best.work + best.count * best.rtt / 2;
        return best;
    }
    for (int i = 0; i < NODES; i++) {
        double slept = m->slept[proto][i];
        double rtt = loaded ? m->rtt.loaded_us : idle_rtt(&m->rtt, slept);
        prediction_t p = {0, i, m->waited[proto][i], m->compute_us * work_scale * m->work_share[proto][i], rtt, slept};
        p.us = p.work + p.count * rtt;
        if (best.node < 0 || p.us > best.us) best = p;
    }
    return best;
}

/* A prediction in words: its work, its count and the round trip it was
 * priced at. */
static void prediction_words(char *buf, size_t cap, const wl_meds_t *m, const prediction_t *p, int loaded)
{
    char rtt[128];
    if (loaded)
        snprintf(rtt, sizeof rtt, "the loaded AM round trip, every waiter asleep (%.3g us, this run)", p->rtt);
    else
        snprintf(rtt, sizeof rtt, "the AM round trip, %.0f%% of its waits asleep (%.3g us: %.3g spinning, %.3g "
                 "asleep; this run)", 100 * p->slept, p->rtt, m->rtt.spin_us, m->rtt.sleep_us);
    if (p->node >= 0)
        snprintf(buf, cap, "the busiest node (%d): %.3g us work/op + %.3g round trips waited/op x %s", p->node, p->work,
                 p->count, rtt);
    else
        snprintf(buf, cap, "%.3g us work/op (the original's) + %.3g msgs/op x half %s", p->work, p->count, rtt);
}

/* What the predictions take from one repetition's own and dir runs at one
 * cluster size, per operation of a node's thread (the run's ops / nodes). */
typedef struct pred_reps {
    double msgs[2][MAX_REPS], work[MAX_REPS];   /* [own, dir] */
    double waited[2][NODES][MAX_REPS], share[2][NODES][MAX_REPS], slept[2][NODES][MAX_REPS];
    double slept_all[2][MAX_REPS];
    int by_waits;   /* every run reported each node's round trips waited */
} pred_reps_t;

static void pred_collect(pred_reps_t *pr, int k, int nodes, const run_t *o, const run_t *d, double work_us)
{
    pr->work[k] = work_us;
    for (int p = 0; p < 2; p++) {
        const run_t *r = p ? d : o;
        double rt = 0, rs = 0;
        pr->msgs[p][k] = r->messages / r->ops;
        for (int i = 0; i < NODES; i++) {
            int in = i < nodes;
            pr->by_waits = pr->by_waits && r->node_waited[i] >= 0;
            pr->waited[p][i][k] = in ? r->node_waited[i] * nodes / r->ops : 0;
            pr->share[p][i][k] = in ? r->node_ops[i] * nodes / r->ops : 0;
            pr->slept[p][i][k] = in && r->fab.rt[i] > 0 ? r->fab.rt_slept[i] / r->fab.rt[i] : 0;
            rt += in ? r->fab.rt[i] : 0;
            rs += in ? r->fab.rt_slept[i] : 0;
        }
        pr->slept_all[p][k] = rt > 0 ? rs / rt : 0;
    }
}

/* Their medians over repetitions first..first+n-1, into m (n 1: that
 * repetition's own, for its prediction). */
static void pred_take(const pred_reps_t *pr, int first, int n, wl_meds_t *m)
{
    size_t len = (size_t)n;
    m->own_msgs = dsm_report_median(pr->msgs[0] + first, len);
    m->dir_msgs = dsm_report_median(pr->msgs[1] + first, len);
    m->compute_us = dsm_report_median(pr->work + first, len);
    m->by_waits = pr->by_waits;
    for (int p = 0; p < 2; p++) {
        for (int i = 0; i < NODES; i++) {
            m->waited[p][i] = dsm_report_median(pr->waited[p][i] + first, len);
            m->work_share[p][i] = dsm_report_median(pr->share[p][i] + first, len);
            m->slept[p][i] = dsm_report_median(pr->slept[p][i] + first, len);
        }
        m->slept_all[p] = dsm_report_median(pr->slept_all[p] + first, len);
    }
}

/* A node's thread's time per operation at `nodes` nodes (2 or 3), us. */
static double time_per_op(const wl_meds_t *m, int proto, int nodes)
{
    double ops = proto ? m->dir[nodes - 2] : m->own[nodes - 2];
    return ops > 0 ? nodes / ops * 1e6 : 0;
}

/* The _threads prediction: the original on as many threads as nodes (a
 * thread's time per operation), then the messages at the loaded round
 * trip (by waits: the round trips the busiest node, as the loaded
 * prediction finds it, waited on, each a whole one). *count: those. */
static double threads_prediction(const wl_meds_t *m, int proto, double share, double *count)
{
    prediction_t busiest = predict(m, proto, 1, share);
    *count = m->by_waits ? busiest.count : proto ? m->dir_msgs : m->own_msgs;
    return m->parallel_us + *count * (m->by_waits ? m->rtt.loaded_us : m->rtt.loaded_us / 2);
}

/* The prediction rows at 3 nodes from the medians m, each with its
 * repetitions' own times and predictions (per_rep[k]: repetition k's
 * round trips, counts and ops/s) for its spread. */
static void emit_predictions(dsm_report_t *rep, const char *wname, const char *tn, const wl_meds_t *m,
                             const wl_meds_t *per_rep, int reps, double *pred_log, int *npred)
{
    char name[96], anchor[240];
    const double nodes = NODES;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double share = cpus > 0 && nodes > (double)cpus ? nodes / (double)cpus : 1.0;
    double own_us = time_per_op(m, 0, NODES), dir_us = time_per_op(m, 1, NODES);
    double ours[MAX_REPS], theirs[MAX_REPS];
    const struct {
        int proto;
        const char *suffix;
        int loaded;
        double work_scale;
    } rows[4] = {
        {0, "", 0, 1.0},
        {1, "", 0, 1.0},
        {0, "_loaded", 1, share},
        {1, "_loaded", 1, share},
    };
    for (int i = 0; i < 4; i++) {
        prediction_t p = predict(m, rows[i].proto, rows[i].loaded, rows[i].work_scale);
        prediction_words(anchor, sizeof anchor, m, &p, rows[i].loaded);
        snprintf(name, sizeof name, "%s_%s_time_vs_predicted%s/%s", wname, rows[i].proto ? "dir" : "own",
                 rows[i].suffix, tn);
        for (int k = 0; k < reps; k++) {
            ours[k] = time_per_op(&per_rep[k], rows[i].proto, NODES);
            theirs[k] = predict(&per_rep[k], rows[i].proto, rows[i].loaded, rows[i].work_scale).us;
        }
        dsm_report_reps(rep, emit(rep, name, time_per_op(m, rows[i].proto, NODES), "us/op", anchor, p.us, 0), ours,
                        theirs, (size_t)reps);
    }
    /* Against the original on as many threads as nodes on this host: the
       work the nodes' threads get from its cores as the scheduler hands
       them out, where work x nodes/cores assumes they are shared evenly
       at every instant; then the messages at the loaded round trip. */
    for (int proto = 0; proto < 2 && m->parallel_us > 0; proto++) {
        double count, predicted = threads_prediction(m, proto, share, &count);
        snprintf(anchor, sizeof anchor, "the original on %d threads (%.3g us/op a thread, this run) + %.3g %s/op x %s"
                 "loaded AM round trip, every waiter asleep (%.3g us, this run)", NODES, m->parallel_us, count,
                 m->by_waits ? "round trips waited (the busiest node's)" : "msgs", m->by_waits ? "the " : "half the ",
                 m->rtt.loaded_us);
        snprintf(name, sizeof name, "%s_%s_time_vs_predicted_threads/%s", wname, proto ? "dir" : "own", tn);
        for (int k = 0; k < reps; k++) {
            double c;
            ours[k] = time_per_op(&per_rep[k], proto, NODES);
            theirs[k] = threads_prediction(&per_rep[k], proto, share, &c);
        }
        dsm_report_reps(rep, emit(rep, name, proto ? dir_us : own_us, "us/op", anchor, predicted, 0), ours, theirs,
                        (size_t)reps);
    }
    if (m->parallel_us > 0) {
        snprintf(name, sizeof name, "%s_original_threads_%s", wname, tn);
        dsm_report_env(rep, name, "{\"threads\": %d, \"thread_us_per_op\": %.4g, \"one_thread_us_per_op\": %.4g, "
                       "\"cpus\": %ld}", NODES, m->parallel_us, m->compute_us, cpus);
    }
    if (m->by_waits) {
        /* Each node's round trips waited per operation; the round trip its
           waits saw (their time over their count); the time per operation
           those round trips account for (the busiest node's work + waited x
           the round trip it saw: where the measured time goes); and what
           the messages averaged over the nodes would have predicted. */
        double seen_us[2] = {0, 0};
        for (int p = 0; p < 2; p++)
            for (int i = 0; i < NODES; i++) {
                double t = m->compute_us * m->work_share[p][i] + m->waited[p][i] * m->seen_rtt[p][i];
                if (t > seen_us[p]) seen_us[p] = t;
            }
        snprintf(name, sizeof name, "%s_round_trips_waited_%s", wname, tn);
        dsm_report_env(rep, name,
                       "{\"own\": [%.3f, %.3f, %.3f], \"dir\": [%.3f, %.3f, %.3f], "
                       "\"own_seen_rtt_us\": [%.2f, %.2f, %.2f], \"dir_seen_rtt_us\": [%.2f, %.2f, %.2f], "
                       "\"own_by_seen_rtt_us\": %.3f, \"dir_by_seen_rtt_us\": %.3f, "
                       "\"own_by_messages_us\": %.3f, \"dir_by_messages_us\": %.3f}",
                       m->waited[0][0], m->waited[0][1], m->waited[0][2], m->waited[1][0], m->waited[1][1],
                       m->waited[1][2], m->seen_rtt[0][0], m->seen_rtt[0][1], m->seen_rtt[0][2], m->seen_rtt[1][0],
                       m->seen_rtt[1][1], m->seen_rtt[1][2], seen_us[0], seen_us[1],
                       m->compute_us + m->own_msgs * idle_rtt(&m->rtt, m->slept_all[0]) / 2,
                       m->compute_us + m->dir_msgs * idle_rtt(&m->rtt, m->slept_all[1]) / 2);
    }
    /* where the time goes: the host's CPU per operation (every thread of
     * the 3 nodes) against the messages' CPU at the idle round trip's */
    snprintf(name, sizeof name, "%s_cpu_us_per_op_%s", wname, tn);
    dsm_report_env(rep, name, "{\"own\": %.3f, \"dir\": %.3f, \"per_message_cpu_us\": %.3f}", m->own_cpu_us,
                   m->dir_cpu_us, m->rtt.cpu_us / 2);
    double own_pred = predict(m, 0, 0, 1.0).us, dir_pred = predict(m, 1, 0, 1.0).us;
    if (own_pred > 0 && dir_pred > 0) {
        /* the predicted speedup, in ops/s of one node's thread */
        snprintf(name, sizeof name, "%s_own_vs_dir_predicted/%s", wname, tn);
        emit(rep, name, 1e6 / own_pred, "ops/s", "dir as its messages and work predict", 1e6 / dir_pred, 1);
        pred_log[(*npred)++] = log(dir_pred / own_pred);
    }
}

/* At 2 nodes, the idle predictions alone: on this 2-core host the nodes'
 * threads then have a core each, so the gap to 3 nodes' is what a third
 * node sharing the cores adds. */
static void emit_predictions_n2(dsm_report_t *rep, const char *wname, const char *tn, const wl_meds_t *m,
                                const wl_meds_t *per_rep, int reps)
{
    for (int proto = 0; proto < 2; proto++) {
        if (time_per_op(m, proto, 2) <= 0) continue;
        char name[96], anchor[224];
        double ours[MAX_REPS], theirs[MAX_REPS];
        prediction_t p = predict(m, proto, 0, 1.0);
        prediction_words(anchor, sizeof anchor, m, &p, 0);
        snprintf(name, sizeof name, "%s_%s_time_vs_predicted/%s/n=2", wname, proto ? "dir" : "own", tn);
        for (int k = 0; k < reps; k++) {
            ours[k] = time_per_op(&per_rep[k], proto, 2);
            theirs[k] = predict(&per_rep[k], proto, 0, 1.0).us;
        }
        dsm_report_reps(rep, emit(rep, name, time_per_op(m, proto, 2), "us/op", anchor, p.us, 0), ours, theirs,
                        (size_t)reps);
    }
}

static unsigned long ops_override;   /* --ops N: kv's ops per node */
static const char *only_workloads;   /* --workloads a,b: run these alone */
static int one_node_only;            /* --one-node: only the 1-node figures (shm) */

static int selected(const bench_workload_t *w)
{
    if (only_workloads == NULL) return 1;
    size_t n = strlen(w->info->name);
    for (const char *p = only_workloads; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, w->info->name, n) == 0 && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

/* A workload's parameters for this run: quick or full, with --ops applied
 * (its ops line replaced). */
static const char *params_of(const bench_workload_t *w, int quick, char *buf, size_t cap)
{
    const char *p = quick ? w->quick : w->full;
    if (ops_override == 0 || !w->streams) return p;
    size_t n = 0;
    buf[0] = '\0';
    for (const char *line = p; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : line + strlen(line)) {
        size_t len = strchr(line, '\n') ? (size_t)(strchr(line, '\n') - line) + 1 : strlen(line);
        if (strncmp(line, "ops=", 4) != 0 && n + len < cap) {
            memcpy(buf + n, line, len);
            n += len;
            buf[n] = '\0';
        }
    }
    snprintf(buf + n, cap - n, "ops=%lu\n", ops_override);
    return buf;
}

/* kv own at 3 nodes with each mutex kind, in MUTEX_ROUNDS_PER_REP * reps
 * paired rounds (the pair's order alternating, so drift and the order hit
 * both alike): the medians are the figure, the rounds' ratios its spread
 * (in the JSON's env), and the faster median the kind lock=auto should use
 * on this transport. */
enum { MUTEX_ROUNDS_PER_REP = 3, MUTEX_MAX_ROUNDS = MAX_REPS * MUTEX_ROUNDS_PER_REP };

static void mutex_pair(dsm_harness_t *c, const bench_workload_t *w, const char *params, const char *tn, int reps,
                       dsm_report_t *rep, wl_meds_t *m)
{
    double deleg[MUTEX_MAX_ROUNDS], cas[MUTEX_MAX_ROUNDS], dmsg[MUTEX_MAX_ROUNDS], cmsg[MUTEX_MAX_ROUNDS];
    double ratio[MUTEX_MAX_ROUNDS];
    int rounds = reps * MUTEX_ROUNDS_PER_REP, deleg_won = 0;
    run_t l = run_once(NULL, w, params, "local", NODES, NULL);
    for (int k = 0; k < rounds; k++) {
        run_t dl, cs;
        if (k % 2 == 0) {
            dl = run_once(c, w, params, "own", NODES, "lock=deleg\n");
            cs = run_once(c, w, params, "own", NODES, "lock=cas\n");
        } else {
            cs = run_once(c, w, params, "own", NODES, "lock=cas\n");
            dl = run_once(c, w, params, "own", NODES, "lock=deleg\n");
        }
        same_result("kv own+deleg", &dl, &l);
        same_result("kv own+cas", &cs, &l);
        deleg[k] = dl.ops_per_sec;
        cas[k] = cs.ops_per_sec;
        dmsg[k] = dl.messages / dl.ops;
        cmsg[k] = cs.messages / cs.ops;
        ratio[k] = cs.ops_per_sec > 0 ? dl.ops_per_sec / cs.ops_per_sec : 0;
        deleg_won += dl.ops_per_sec > cs.ops_per_sec;
    }
    m->deleg = dsm_report_median(deleg, (size_t)rounds);
    m->cas = dsm_report_median(cas, (size_t)rounds);
    m->deleg_msgs = dsm_report_median(dmsg, (size_t)rounds);
    m->cas_msgs = dsm_report_median(cmsg, (size_t)rounds);
    char name[96], key[64];
    snprintf(name, sizeof name, "mutex_deleg_vs_cas/%s", tn);
    dsm_report_reps(rep, emit(rep, name, m->deleg, "ops/s", "kv own, CAS mutexes", m->cas, 1), deleg, cas,
                    (size_t)rounds);
    snprintf(name, sizeof name, "kv_msgs_per_op/%s/deleg", tn);
    emit(rep, name, m->deleg_msgs, "msgs", "kv own, CAS mutexes", m->cas_msgs, 0);
    double lo, hi;
    dsm_report_range(ratio, (size_t)rounds, &lo, &hi);
    double med = dsm_report_median(ratio, (size_t)rounds);
    snprintf(key, sizeof key, "mutex_ratio_%s", tn);
    dsm_report_env(rep, key, "{\"rounds\": %d, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f, \"deleg_won\": %d}",
                   rounds, med, lo, hi, deleg_won);
    fprintf(stderr, "  mutex deleg/cas over %s: %d paired rounds, ratio median %.2f (%.2f..%.2f), deleg faster in %d\n",
            tn, rounds, med, lo, hi, deleg_won);
    snprintf(key, sizeof key, "mutex_faster_%s", tn);
    dsm_report_env_str(rep, key, m->deleg > m->cas ? "deleg" : "cas");
}

static double mean_of(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n > 0 ? s / n : 0;
}

static void measure_transport(dsm_transport_t tr, int reps, int quick, dsm_report_t *rep, int *ngeo,
                              double *pred_log, int *npred, double *rep_log)
{
    char pbuf[512];
    const char *tn = dsm_transport_name(tr);
    dsm_harness_t c;
    if (!one_node_only) cluster_start(&c, tr);
    char name[96];
    /* every repetition's round trips, over the workloads: the env's */
    double all_spin[MAX_WL * MAX_REPS], all_sleep[MAX_WL * MAX_REPS], all_loaded[MAX_WL * MAX_REPS];
    int nall = 0;
    for (size_t wi = 0; wi < NWL && !one_node_only; wi++) {
        const bench_workload_t *w = &workloads[wi];
        if (!selected(w)) continue;
        const char *params = params_of(w, quick, pbuf, sizeof pbuf);
        double cpu0 = cpu_seconds();
        uint64_t wall0 = dsm_now_ns();
        int is_kv = strcmp(w->info->name, "kv") == 0, is_df = strcmp(w->info->name, "dataframe") == 0;
        double own[2][MAX_REPS], dir[2][MAX_REPS], orig[2][MAX_REPS], own_chunk[MAX_REPS], ocm[MAX_REPS];
        double own_again[MAX_REPS];   /* own's second run at 3 nodes (the A/A pair) */
        double ob[MAX_REPS], db[MAX_REPS], dheld[MAX_REPS];
        double par[MAX_REPS], ocpu[MAX_REPS], dcpu[MAX_REPS], rspin[MAX_REPS], rsleep[MAX_REPS], rload[MAX_REPS];
        double rcpu[MAX_REPS];
        double seen[2][NODES][MAX_REPS];   /* [own, dir][node][rep], 3 nodes */
        pred_reps_t pr[2];                 /* what the predictions take, at [0] 2 nodes, [1] 3 nodes */
        pr[0].by_waits = pr[1].by_waits = 1;
        warm_up(&c, w, params, NODES);
        for (int k = 0; k < reps; k++) {
            rtt_t rt = rtt_now(&c, RTT_PER_REP);
            rspin[k] = all_spin[nall] = rt.spin_us;
            rsleep[k] = all_sleep[nall] = rt.sleep_us;
            rload[k] = all_loaded[nall++] = rt.loaded_us;
            rcpu[k] = rt.cpu_us;
            for (int ni = 0; ni < 2; ni++) {
                int nodes = 2 + ni;
                char what[128];
                run_t o, d, a = {0};
                /* alternate which protocol runs first; at 3 nodes own runs a
                   second time on dir's other side (the A/A pair, swapping
                   order too), its ratio the noise own_vs_dir is read against.
                   The third node sat idle through the 2-node runs, and
                   whichever 3-node run came first after them was the slow
                   one: an untimed run takes that place. */
                if (nodes == 3) (void)run_once(&c, w, params, (k & 1) ? "own" : "dir", nodes, NULL);
                if (k & 1) {
                    if (nodes == 3) a = run_once(&c, w, params, "own", nodes, NULL);
                    d = run_once(&c, w, params, "dir", nodes, NULL);
                    o = run_once(&c, w, params, "own", nodes, NULL);
                } else {
                    o = run_once(&c, w, params, "own", nodes, NULL);
                    d = run_once(&c, w, params, "dir", nodes, NULL);
                    if (nodes == 3) a = run_once(&c, w, params, "own", nodes, NULL);
                }
                run_t l = run_once(NULL, w, params, "local", nodes, NULL);
                snprintf(what, sizeof what, "%s own/%s n=%d", w->info->name, tn, nodes);
                same_result(what, &o, &l);
                snprintf(what, sizeof what, "%s dir/%s n=%d", w->info->name, tn, nodes);
                same_result(what, &d, &l);
                own[ni][k] = o.ops_per_sec;
                dir[ni][k] = d.ops_per_sec;
                orig[ni][k] = l.ops_per_sec;
                if (nodes == 3 && is_df) {
                    /* own's other placement, one task per chunk, after the pair */
                    run_t oc = run_once(&c, w, params, "own", nodes, "per_node=0\n");
                    same_result("dataframe own per chunk", &oc, &l);
                    own_chunk[k] = oc.ops_per_sec;
                    ocm[k] = oc.messages / oc.ops;
                }
                /* the work per operation: the original's, or its
                   stricter form where the original adds costs of its
                   own (socialnet's by-value RPCs) */
                run_t wk = w->strict ? run_once(NULL, w, params, "local", nodes, w->strict) : l;
                same_result("the stricter original", &wk, &l);
                pred_collect(&pr[ni], k, nodes, &o, &d, wk.ops_per_sec > 0 ? 1e6 / wk.ops_per_sec : 0);
                if (nodes == 3) {
                    snprintf(what, sizeof what, "%s own again/%s n=%d", w->info->name, tn, nodes);
                    same_result(what, &a, &l);
                    own_again[k] = a.ops_per_sec;
                    ob[k] = o.bytes / o.ops;
                    db[k] = d.bytes / d.ops;
                    dheld[k] = d.held_back / d.ops;
                    ocpu[k] = o.cpu_seconds * 1e6 / o.ops;
                    dcpu[k] = d.cpu_seconds * 1e6 / d.ops;
                    for (int i = 0; i < NODES; i++) {
                        seen[0][i][k] = o.node_waited[i] > 0 ? o.node_wait_ns[i] / o.node_waited[i] / 1e3 : 0;
                        seen[1][i][k] = d.node_waited[i] > 0 ? d.node_wait_ns[i] / d.node_waited[i] / 1e3 : 0;
                    }
                    par[k] = 0;
                    if (w->parallel) {
                        char threads[32];
                        snprintf(threads, sizeof threads, "threads=%d\n", NODES);
                        run_t pl = run_once(NULL, w, params, "local", nodes, threads);
                        same_result("the original on threads", &pl, &l);
                        par[k] = pl.ops_per_sec > 0 ? NODES / pl.ops_per_sec * 1e6 : 0;
                    }
                }
            }
            fprintf(stderr, "  %s/%s: repetition %d of %d done\n", w->info->name, tn, k + 1, reps);
        }
        /* the cores the nodes had (of the host's) and the host's load */
        char la[32];
        double wall = (double)(dsm_now_ns() - wall0) / 1e9;
        snprintf(name, sizeof name, "%s_cpus_used_%s", w->info->name, tn);
        dsm_report_env(rep, name, "{\"cpus\": %.3f, \"loadavg\": \"%s\"}",
                       wall > 0 ? (cpu_seconds() - cpu0) / wall : 0, dsm_report_loadavg(la, sizeof la));
        wl_meds_t m;
        for (int ni = 0; ni < 2; ni++) {
            m.own[ni] = dsm_report_median(own[ni], (size_t)reps);
            m.dir[ni] = dsm_report_median(dir[ni], (size_t)reps);
            m.orig[ni] = dsm_report_median(orig[ni], (size_t)reps);
        }
        m.own_bytes = dsm_report_median(ob, (size_t)reps);
        m.dir_bytes = dsm_report_median(db, (size_t)reps);
        m.parallel_us = w->parallel ? dsm_report_median(par, (size_t)reps) : 0;
        m.own_cpu_us = dsm_report_median(ocpu, (size_t)reps);
        pred_take(&pr[1], 0, reps, &m);
        for (int p = 0; p < 2; p++)
            for (int i = 0; i < NODES; i++) m.seen_rtt[p][i] = dsm_report_median(seen[p][i], (size_t)reps);
        m.dir_cpu_us = dsm_report_median(dcpu, (size_t)reps);
        m.rtt = (rtt_t){dsm_report_median(rspin, (size_t)reps), dsm_report_median(rsleep, (size_t)reps),
                        dsm_report_median(rload, (size_t)reps), dsm_report_median(rcpu, (size_t)reps)};
        double rlo, rhi, zlo, zhi, llo, lhi;
        dsm_report_range(rspin, (size_t)reps, &rlo, &rhi);
        dsm_report_range(rsleep, (size_t)reps, &zlo, &zhi);
        dsm_report_range(rload, (size_t)reps, &llo, &lhi);
        snprintf(name, sizeof name, "%s_am_rtt_us_%s", w->info->name, tn);
        dsm_report_env(rep, name,
                       "{\"spin\": %.3f, \"spin_min\": %.3f, \"spin_max\": %.3f, \"sleep\": %.3f, "
                       "\"sleep_min\": %.3f, \"sleep_max\": %.3f, \"loaded\": %.3f, "
                       "\"loaded_min\": %.3f, \"loaded_max\": %.3f, \"own_slept\": %.3f, \"dir_slept\": %.3f, "
                       "\"work_us\": %.4g}",
                       m.rtt.spin_us, rlo, rhi, m.rtt.sleep_us, zlo, zhi, m.rtt.loaded_us, llo, lhi, m.slept_all[0],
                       m.slept_all[1], m.compute_us);
        /* how often a node held a home's INV or RECALL back for a borrow (GAM's
         * queueing at the cacher; no request asks again) */
        snprintf(name, sizeof name, "%s_dir_held_back_per_op_%s", w->info->name, tn);
        dsm_report_env(rep, name, "%.4g", dsm_report_median(dheld, (size_t)reps));
        snprintf(name, sizeof name, "%s_own_vs_dir/%s", w->info->name, tn);
        char anchor[160];
        snprintf(anchor, sizeof anchor, "dir (GAM-style), 3 nodes%s%s",
                 strcmp(w->info->name, "dataframe") ? "" : "; each with its best placement (own one task a node, dir affinity=1)",
                 tr == DSM_TRANSPORT_SHM ? "; shm measures the implementation" : "");
        const dsm_figure_t *f = emit(rep, name, m.own[1], "ops/s", anchor, m.dir[1], 1);
        dsm_report_reps(rep, f, own[1], dir[1], (size_t)reps);
        double ratio[MAX_REPS], lo, hi;
        for (int k = 0; k < reps; k++) {
            ratio[k] = dir[1][k] > 0 ? own[1][k] / dir[1][k] : 0;
            if (ratio[k] > 0) rep_log[k] += log(ratio[k]);
        }
        dsm_report_range(ratio, (size_t)reps, &lo, &hi);
        snprintf(name, sizeof name, "%s_own_vs_dir_spread_%s", w->info->name, tn);
        dsm_report_env(rep, name, "{\"reps\": %d, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f}", reps,
                       dsm_report_median(ratio, (size_t)reps), lo, hi);
        if (m.dir[1] > 0 && m.own[1] > 0)
            (*ngeo)++;   /* a workload in the geomean (rep_log holds each run's) */
        /* each repetition on its own, for the predictions' spreads; at
           2 nodes as many nodes' threads as the host has cores */
        wl_meds_t mk[MAX_REPS], mk2[MAX_REPS];
        for (int k = 0; k < reps; k++) {
            mk[k] = m;
            for (int ni = 0; ni < 2; ni++) {
                mk[k].own[ni] = own[ni][k];
                mk[k].dir[ni] = dir[ni][k];
            }
            mk[k].rtt = (rtt_t){rspin[k], rsleep[k], rload[k], rcpu[k]};
            mk[k].parallel_us = w->parallel ? par[k] : 0;
            mk2[k] = mk[k];
            pred_take(&pr[1], k, 1, &mk[k]);
            pred_take(&pr[0], k, 1, &mk2[k]);
        }
        emit_predictions(rep, w->info->name, tn, &m, mk, reps, pred_log, npred);
        wl_meds_t m2 = m;
        pred_take(&pr[0], 0, reps, &m2);
        emit_predictions_n2(rep, w->info->name, tn, &m2, mk2, reps);
        if (is_df) {
            snprintf(name, sizeof name, "%s_own_per_chunk_vs_dir/%s", w->info->name, tn);
            f = emit(rep, name, dsm_report_median(own_chunk, (size_t)reps), "ops/s",
                     "dir (GAM-style), 3 nodes, affinity=1; own with one task per chunk", m.dir[1], 1);
            dsm_report_reps(rep, f, own_chunk, dir[1], (size_t)reps);
            snprintf(name, sizeof name, "%s_msgs_per_op/%s/per_chunk", w->info->name, tn);
            emit(rep, name, dsm_report_median(ocm, (size_t)reps), "msgs", "dir, 3 nodes", m.dir_msgs, 0);
        }
        /* own against itself, the same repetitions: how far from 1 a ratio
           of these runs goes with no difference between the protocols */
        snprintf(name, sizeof name, "%s_own_vs_own/%s", w->info->name, tn);
        dsm_report_reps(rep,
                        emit(rep, name, m.own[1], "ops/s", "own run again, dir between them (A/A), 3 nodes",
                             dsm_report_median(own_again, (size_t)reps), 1),
                        own[1], own_again, (size_t)reps);
        snprintf(name, sizeof name, "%s_own_vs_dir/%s/n=2", w->info->name, tn);
        emit(rep, name, m.own[0], "ops/s", "dir (GAM-style), 2 nodes", m.dir[0], 1);
        snprintf(name, sizeof name, "%s_msgs_per_op/%s", w->info->name, tn);
        emit(rep, name, m.own_msgs, "msgs", "dir, 3 nodes", m.dir_msgs, 0);
        snprintf(name, sizeof name, "%s_bytes_per_op/%s", w->info->name, tn);
        emit(rep, name, m.own_bytes, "B", "dir, 3 nodes", m.dir_bytes, 0);
        snprintf(name, sizeof name, "%s_own_vs_original/%s", w->info->name, tn);
        emit(rep, name, m.own[1], "ops/s", w->streams ? "the original, 3 streams" : "the original", m.orig[1], 1);
        snprintf(name, sizeof name, "%s_dir_vs_original/%s", w->info->name, tn);
        emit(rep, name, m.dir[1], "ops/s", w->streams ? "the original, 3 streams" : "the original", m.orig[1], 1);
        if (is_kv) mutex_pair(&c, w, params, tn, reps, rep, &m);
    }
    if (nall > 0) {
        snprintf(name, sizeof name, "am_rtt_us_%s", tn);
        dsm_report_env(rep, name, "%.3f", dsm_report_median(all_spin, (size_t)nall));
        snprintf(name, sizeof name, "am_rtt_us_sleeping_%s", tn);
        dsm_report_env(rep, name, "%.3f", dsm_report_median(all_sleep, (size_t)nall));
        snprintf(name, sizeof name, "am_rtt_us_loaded_%s", tn);
        dsm_report_env(rep, name, "%.3f", dsm_report_median(all_loaded, (size_t)nall));
    }
    if (!one_node_only) cluster_stop(&c);
    if (tr == DSM_TRANSPORT_SHM) {
        /* On a cluster of their own: after the 3-node runs on node 0's
         * heap, kv's large table found no room in one run of three. */
        cluster_start_n(&c, tr, 1, ONE_NODE_HEAP_BYTES);
        /* own on 1 node against the original's one stream, interleaved, in
         * at least ONE_NODE_REPS rounds: these runs take milliseconds, and
         * at dataframe's 1.5 ns a row the median of 3 still swung 5%
         * between demos (0.946, 0.951 against 0.97-1.01 alone). */
        const int reps1 = reps > ONE_NODE_REPS ? reps : ONE_NODE_REPS;
        for (size_t wi = 0; wi < NWL; wi++) {
            const bench_workload_t *w = &workloads[wi];
            if (!selected(w)) continue;
            const char *params = w->one_node ? w->one_node : params_of(w, quick, pbuf, sizeof pbuf);
            double o1[MAX_REPS], l1[MAX_REPS], n1[MAX_REPS], f1[MAX_REPS], co1[MAX_REPS], cl1[MAX_REPS],
                b1[MAX_REPS], s1[MAX_REPS], sh1[MAX_REPS], csh1[MAX_REPS];
            /* Each round's runs, in turn forward and backward, so that no
               side always runs first; each checked against its anchor's
               checksum (the original's, or the coarse original's). */
            const one_node_run_t runs[ONE_KINDS] = {
                [ONE_OWN] = {1, &c, params, "own", "checks=1\n", "own, 1 node", o1, ONE_ORIG},
                [ONE_ORIG] = {1, NULL, params, "local", NULL, "the original", l1, ONE_ANCHOR},
                [ONE_NOCHECKS] = {1, &c, params, "own", "checks=0\n", "own, 1 node, no borrow checks", n1, ONE_ORIG},
                [ONE_FLOOR] = {!!w->floor, NULL, params, "local", w->floor, "the original's floor", f1, ONE_ORIG},
                [ONE_STRICT] = {!!w->strict, NULL, params, "local", w->strict, "the stricter original", s1, ONE_ORIG},
                [ONE_BARE] = {!!w->bare, &c, params, "own", w->bare, "own, 1 node, no boxes", b1, ONE_ORIG},
                [ONE_SHAPED] = {!!w->shaped, NULL, params, "local", w->shaped, "the original shaped as own", sh1,
                                ONE_ORIG},
                [ONE_COARSE_OWN] = {!!w->coarse, &c, w->coarse, "own", "checks=1\n", "own, 1 node, coarse grain", co1,
                                    ONE_COARSE_ORIG},
                [ONE_COARSE_ORIG] = {!!w->coarse, NULL, w->coarse, "local", w->strict, "the coarse original", cl1,
                                     ONE_ANCHOR},
                [ONE_COARSE_SHAPED] = {w->coarse && w->shaped, NULL, w->coarse, "local", w->shaped,
                                       "the original shaped as own, coarse grain", csh1, ONE_COARSE_ORIG},
            };
            warm_up(&c, w, params, 1);
            for (int k = 0; k < reps1; k++) {
                run_t got[ONE_KINDS];
                for (int j = 0; j < ONE_KINDS; j++) {
                    const one_node_run_t *r = &runs[(k & 1) ? ONE_KINDS - 1 - j : j];
                    if (!r->on) continue;
                    got[r - runs] = run_once(r->c, w, r->params, r->proto, 1, r->extra);
                    r->out[k] = got[r - runs].ops_per_sec;
                }
                for (int i = 0; i < ONE_KINDS; i++)
                    if (runs[i].on && runs[i].anchor != ONE_ANCHOR)
                        same_result(runs[i].what, &got[i], &got[runs[i].anchor]);
            }
            double own_med = dsm_report_median(o1, (size_t)reps1), orig_med = dsm_report_median(l1, (size_t)reps1);
            /* The stricter anchor, where there is one: own's added time,
               /channels and /coarse are against it. */
            double strict_med = w->strict ? dsm_report_median(s1, (size_t)reps1) : orig_med;
            snprintf(name, sizeof name, "own_1node_vs_original/%s", w->info->name);
            const char *orig_is = w->orig_is ? w->orig_is : "the original, 1 stream";
            /* each figure's runs, beside the anchor's run of the same round */
            const double *strict_runs = w->strict ? s1 : l1;
            dsm_report_reps(rep, emit(rep, name, own_med, "ops/s", orig_is, orig_med, 1), o1, l1, (size_t)reps1);
            if (w->strict) {
                snprintf(name, sizeof name, "own_1node_vs_original/%s/%s", w->info->name, w->strict_name);
                dsm_report_reps(rep, emit(rep, name, own_med, "ops/s", w->strict_is, strict_med, 1), o1, s1,
                                (size_t)reps1);
            }
            /* What own adds to each operation, in time: a fixed cost per
               operation, so the ratio above depends on how much work an
               operation does. */
            snprintf(name, sizeof name, "own_1node_added_ns/%s", w->info->name);
            double added[MAX_REPS], base_ns[MAX_REPS];
            for (int k = 0; k < reps1; k++)
                added[k] = 1e9 / o1[k] - 1e9 / strict_runs[k], base_ns[k] = 1e9 / strict_runs[k];
            dsm_report_reps(rep,
                            emit(rep, name, 1e9 / own_med - 1e9 / strict_med, "ns/op",
                                 w->strict ? "the pointer original's time per operation"
                                           : "the original's time per operation",
                                 1e9 / strict_med, 0),
                            added, base_ns, (size_t)reps1);
            /* The fastest run of each: another thread on the core only
               slows a run, so on a loaded machine this is the steadier
               comparison (the median is the headline). */
            snprintf(name, sizeof name, "own_1node_vs_original/%s/best", w->info->name);
            emit(rep, name, max_of(o1, reps1), "ops/s", "the original's fastest run", max_of(l1, reps1), 1);
            /* Without the debug-mode borrow checks (as a release build of
               DRust, whose borrows Rust checks at compile time). */
            snprintf(name, sizeof name, "own_1node_vs_original/%s/nochecks", w->info->name);
            dsm_report_reps(rep,
                            emit(rep, name, dsm_report_median(n1, (size_t)reps1), "ops/s", orig_is,
                                 dsm_report_median(l1, (size_t)reps1), 1),
                            n1, l1, (size_t)reps1);
            if (w->floor) {
                snprintf(name, sizeof name, "own_1node_vs_original/%s/%s", w->info->name,
                         w->floor_name ? w->floor_name : "floor");
                dsm_report_reps(rep, emit(rep, name, own_med, "ops/s", w->floor_is, dsm_report_median(f1, (size_t)reps1), 1),
                                o1, f1, (size_t)reps1);
            }
            if (w->bare) {
                /* The original's plain pointers through own's channels: what
                   the channels alone leave of the original's speed (the
                   stricter one's, where there is one), the ceiling against
                   it whatever boxes and borrows cost. */
                snprintf(name, sizeof name, "own_1node_vs_original/%s/channels", w->info->name);
                dsm_report_reps(rep,
                                emit(rep, name, dsm_report_median(b1, (size_t)reps1), "ops/s",
                                     w->strict ? w->strict_is : "the original, 1 stream", strict_med, 1),
                                b1, strict_runs, (size_t)reps1);
            }
            if (w->shaped) {
                snprintf(name, sizeof name, "own_1node_vs_original/%s/boxed", w->info->name);
                dsm_report_reps(rep,
                                emit(rep, name, own_med, "ops/s", w->shaped_is,
                                     dsm_report_median(sh1, (size_t)reps1), 1),
                                o1, sh1, (size_t)reps1);
            }
            if (w->coarse) {
                const char *cname = w->coarse_name ? w->coarse_name : "coarse";
                double co_med = dsm_report_median(co1, (size_t)reps1), cl_med = dsm_report_median(cl1, (size_t)reps1);
                snprintf(name, sizeof name, "own_1node_vs_original/%s/%s", w->info->name, cname);
                dsm_report_reps(rep, emit(rep, name, co_med, "ops/s", w->coarse_is, cl_med, 1), co1, cl1,
                                (size_t)reps1);
                snprintf(name, sizeof name, "own_1node_added_ns/%s/%s", w->info->name, cname);
                double cadded[MAX_REPS], cbase[MAX_REPS];
                for (int k = 0; k < reps1; k++)
                    cadded[k] = 1e9 / co1[k] - 1e9 / cl1[k], cbase[k] = 1e9 / cl1[k];
                char cbase_is[256];
                snprintf(cbase_is, sizeof cbase_is, "%s: its time per operation", w->coarse_is);
                dsm_report_reps(rep, emit(rep, name, 1e9 / co_med - 1e9 / cl_med, "ns/op", cbase_is, 1e9 / cl_med, 0),
                                cadded, cbase, (size_t)reps1);
                if (w->shaped) {
                    snprintf(name, sizeof name, "own_1node_vs_original/%s/%s/boxed", w->info->name, cname);
                    dsm_report_reps(rep,
                                    emit(rep, name, co_med, "ops/s", w->shaped_is,
                                         dsm_report_median(csh1, (size_t)reps1), 1),
                                    co1, csh1, (size_t)reps1);
                }
            }
        }
        double g, b, p;
        deref_cycles(c.nodes[0], DEREF_ROUNDS, &g, &b, &p);
        const char *unit =
#ifdef HAVE_TSC
            "cycles";
#else
            "ns";
#endif
        emit(rep, "local_deref_cycles", g, unit, "plain 8-byte load", p, 0);
        emit(rep, "local_deref_cycles/box", b, unit, "plain 8-byte load", p, 0);
        double lo, ls;
        lock_cycles(c.nodes[0], DEREF_ROUNDS, &lo, &ls);
        emit(rep, "local_lock_cycles", lo, unit, "the original's spin lock, borrow, release and unlock", ls, 0);
        cluster_stop(&c);
    }
}

/* --profile: where one operation's time goes, own and dir at 3 nodes and
 * then at 2, in R interleaved runs with timing=1 where the workload takes
 * it (each node's phases timed; gemm reports none; dataframe per query,
 * profile_dataframe) beside the round trip of the same repetition. Per
 * protocol, medians of: the time per operation of a node's thread, its
 * messages (own's and dir's counters) and what the fabric sent (active
 * messages, one-sided operations), the prediction (messages x half the
 * round trip), wake-ups and CPU (and what the CPU alone would allow, the
 * nodes' CPU over the host's cores), and each node's phases in us per
 * operation of that node. Printed, and written to env W_profile_PROTO_TR
 * (3 nodes) and W_profile_PROTO_TR/n=2. */
enum { PROF_PHASES = 7 };

/* dataframe's --profile: one query is the operation, at 2 and 3 nodes.
 * Medians (min-max) in us per query of: the measured phase, node 0's
 * phases (own: spawn calls, in-place chunks, joins; dir: its chunks, its
 * part written and shared, the parts read) and own's tasks' (spawn call to
 * the task's start, its run, the last task's end to the last join's
 * return), beside the idle AM round trip measured before the runs.
 * Printed, and written to env dataframe_profile_PROTO_TR/n=N. */
static void profile_dataframe(dsm_harness_t *c, const bench_workload_t *w, const char *params, const char *tn,
                              int reps, dsm_report_t *rep)
{
    enum { DF_COLS = 7 };
    static const char *const col[DF_COLS] = {"query", "spawn", "work", "join", "task_start", "task_run", "task_tail"};
    static const char *const dcol[DF_COLS] = {"query", "share", "work", "gather", NULL, NULL, NULL};
    for (int nodes = 2; nodes <= NODES; nodes++) {
        double v[2][DF_COLS][MAX_REPS];
        for (int k = 0; k < reps; k++)
            for (int j = 0; j < 2; j++) {
                int p = (k & 1) ? 1 - j : j;
                run_t r = run_once(c, w, params, p ? "dir" : "own", nodes, "timing=1\n");
                v[p][0][k] = r.seconds * 1e6;
                v[p][1][k] = r.phase_ns[0][PH_SEND] / 1e3;
                v[p][2][k] = r.phase_ns[0][PH_WORK] / 1e3;
                v[p][3][k] = r.phase_ns[0][PH_RECV] / 1e3;
                for (int q = 0; q < 3; q++) v[p][4 + q][k] = r.task_ns[q] / 1e3;
            }
        char la[32], js[512], name[96];
        double rtt = am_rtt_us(c, RTT_SPIN, RTT_BATCHES, NULL);
        fprintf(stderr,
                "dataframe/%s n=%d: %d runs each, us per query, median (min-max), load %s, AM round trip %.1f us (a spinning waiter)\n",
                tn, nodes, reps, dsm_report_loadavg(la, sizeof la), rtt);
        for (int p = 0; p < 2; p++) {
            int n = snprintf(js, sizeof js, "{\"am_rtt_us\": %.3f, ", rtt);
            fprintf(stderr, "  %s:", p ? "dir" : "own");
            for (int q = 0; q < DF_COLS; q++) {
                const char *cn = p ? dcol[q] : col[q];
                if (cn == NULL) continue;
                double lo, hi, m = dsm_report_median(v[p][q], (size_t)reps);
                dsm_report_range(v[p][q], (size_t)reps, &lo, &hi);
                fprintf(stderr, " %s %.0f (%.0f-%.0f)", cn, m, lo, hi);
                n += snprintf(js + n, sizeof js - (size_t)n, "%s\"%s_us\": %.3f", q ? ", " : "", cn, m);
            }
            fprintf(stderr, "\n");
            snprintf(js + n, sizeof js - (size_t)n, "}");
            snprintf(name, sizeof name, "dataframe_profile_%s_%s/n=%d", p ? "dir" : "own", tn, nodes);
            dsm_report_env(rep, name, "%s", js);
        }
    }
}

/* One workload's profile at `nodes` nodes (env suffix /n=N below NODES). */
static void profile_workload(dsm_harness_t *c, const bench_workload_t *w, const char *params, const char *tn,
                             int reps, int nodes, dsm_report_t *rep)
{
    char la[32], name[96];
    /* [proto][rep]: 0 own, 1 dir */
    double us[2][MAX_REPS], msgs[2][MAX_REPS], am[2][MAX_REPS], rma[2][MAX_REPS], wk[2][MAX_REPS],
        sl[2][MAX_REPS], pcpu[2][MAX_REPS], cpu[2][MAX_REPS], rtt[MAX_REPS];
    double ph[2][NODES][PROF_PHASES][MAX_REPS], nm[2][NODES][MAX_REPS], nw[2][NODES][MAX_REPS];
    double ns[2][NODES][MAX_REPS];   /* the round trip each node's waits saw, us */
    warm_up(c, w, params, nodes);
    for (int k = 0; k < reps; k++) {
        rtt[k] = am_rtt_us(c, RTT_SPIN, RTT_PER_REP, NULL);
        for (int j = 0; j < 2; j++) {
            int p = (k & 1) ? 1 - j : j;
            run_t r = run_once(c, w, params, p ? "dir" : "own", nodes, w->timing ? "timing=1\n" : NULL);
            double per_node = r.ops / nodes;
            us[p][k] = r.seconds * 1e6 / per_node;
            msgs[p][k] = r.messages / r.ops;
            am[p][k] = r.wire_am / r.ops;
            rma[p][k] = r.wire_onesided / r.ops;
            wk[p][k] = r.fab.wakeups / r.ops;
            sl[p][k] = r.fab.sleeps / r.ops;
            pcpu[p][k] = r.fab.progress_cpu * 1e6 / r.ops;
            cpu[p][k] = r.cpu_seconds * 1e6 / r.ops;
            for (int i = 0; i < nodes; i++) {
                nm[p][i][k] = r.node_ops[i] > 0 ? r.node_msgs[i] / r.node_ops[i] : 0;
                nw[p][i][k] = r.node_waited[i] > 0 ? r.node_waited[i] / per_node : 0;
                ns[p][i][k] = r.node_waited[i] > 0 ? r.node_wait_ns[i] / r.node_waited[i] / 1e3 : 0;
                for (int q = 0; q < PROF_PHASES; q++) ph[p][i][q][k] = r.phase_ns[i][q] / 1e3 / per_node;
            }
        }
    }
    double rt = dsm_report_median(rtt, (size_t)reps);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(stderr, "%s/%s n=%d: %d runs each, AM round trip %.1f us (median, a spinning waiter), load %s\n",
            w->info->name, tn, nodes, reps, rt, dsm_report_loadavg(la, sizeof la));
    for (int p = 0; p < 2; p++) {
        double m_us = dsm_report_median(us[p], (size_t)reps), m_msgs = dsm_report_median(msgs[p], (size_t)reps);
        double m_am = dsm_report_median(am[p], (size_t)reps), m_rma = dsm_report_median(rma[p], (size_t)reps);
        double m_wk = dsm_report_median(wk[p], (size_t)reps), m_sl = dsm_report_median(sl[p], (size_t)reps);
        double m_cpu = dsm_report_median(cpu[p], (size_t)reps), m_pcpu = dsm_report_median(pcpu[p], (size_t)reps);
        double lo, hi;
        dsm_report_range(us[p], (size_t)reps, &lo, &hi);
        fprintf(stderr,
                "  %s: %.1f us/op (%.1f..%.1f); %.2f msgs/op (counters), fabric in the phase %.2f AMs + %.2f one-sided/op; "
                "predicted %.1f us (msgs x rtt/2); %.2f progress wake-ups, %.2f waiter sleeps/op; "
                "CPU %.1f us/op (progress threads %.1f)\n",
                p ? "dir" : "own", m_us, lo, hi, m_msgs, m_am, m_rma, m_msgs * rt / 2, m_wk, m_sl, m_cpu, m_pcpu);
        char js[1536], wjs[128];
        int nwait = 0;
        wjs[0] = '\0';
        int n = snprintf(js, sizeof js,
                         "{\"us_per_op\": %.3f, \"msgs_per_op\": %.3f, \"fabric_am_per_op\": %.3f, "
                         "\"fabric_onesided_per_op\": %.3f, \"am_rtt_us\": %.3f, \"wakeups_per_op\": %.3f, "
                         "\"sleeps_per_op\": %.3f, \"cpu_us_per_op\": %.3f, \"progress_cpu_us_per_op\": %.3f, "
                         "\"phases_us_per_op\": [",
                         m_us, m_msgs, m_am, m_rma, rt, m_wk, m_sl, m_cpu, m_pcpu);
        fprintf(stderr, "    CPU-bound: %d nodes x %.1f us CPU/op over %ld cores = %.1f us/op\n", nodes, m_cpu, cores,
                cores > 0 ? nodes * m_cpu / (double)cores : 0);
        for (int i = 0; i < nodes; i++) {
            double mi = dsm_report_median(nm[p][i], (size_t)reps), wi = dsm_report_median(nw[p][i], (size_t)reps);
            double si = dsm_report_median(ns[p][i], (size_t)reps);
            fprintf(stderr,
                    "    node %d: %.2f msgs/op (%.1f us at rtt/2), %.2f round trips waited (%.1f us at rtt; "
                    "each took %.1f us: %.1f us);",
                    i, mi, mi * rt / 2, wi, wi * rt, si, wi * si);
            n += snprintf(js + n, sizeof js - (size_t)n, "%s{", i ? ", " : "");
            nwait += snprintf(wjs + nwait, sizeof wjs - (size_t)nwait, "%s%.3f", i ? ", " : "", wi);
            for (int q = 0; q < PROF_PHASES; q++) {
                double v = dsm_report_median(ph[p][i][q], (size_t)reps);
                if (v > 0) fprintf(stderr, " %s %.1f", profile_phases[q], v);
                n += snprintf(js + n, sizeof js - (size_t)n, "%s\"%s\": %.3f", q ? ", " : "", profile_phases[q], v);
            }
            n += snprintf(js + n, sizeof js - (size_t)n, "}");
            fprintf(stderr, " (us/op)\n");
        }
        snprintf(js + n, sizeof js - (size_t)n, "], \"round_trips_waited_per_op\": [%s]}", wjs);
        snprintf(name, sizeof name, "%s_profile_%s_%s", w->info->name, p ? "dir" : "own", tn);
        if (nodes != NODES) snprintf(name + strlen(name), sizeof name - strlen(name), "/n=%d", nodes);
        dsm_report_env(rep, name, "%s", js);
    }
}

static void profile_transport(dsm_transport_t tr, int reps, int quick, dsm_report_t *rep)
{
    char pbuf[512];
    const char *tn = dsm_transport_name(tr);
    dsm_harness_t c;
    cluster_start(&c, tr);
    for (size_t wi = 0; wi < NWL; wi++) {
        const bench_workload_t *w = &workloads[wi];
        if (!selected(w)) continue;
        const char *params = params_of(w, quick, pbuf, sizeof pbuf);
        if (strcmp(w->info->name, "dataframe") == 0) {
            warm_up(&c, w, params, NODES);
            profile_dataframe(&c, w, params, tn, reps, rep);
            continue;
        }
        for (int nodes = NODES; nodes >= 2; nodes--) profile_workload(&c, w, params, tn, reps, nodes, rep);
    }
    cluster_stop(&c);
}

/* What measures each figure (the case table's runs). */
enum { WORKLOAD, PREDICTION, GEOMEAN, MUTEX, ONE_NODE, DEREF };

/* The figure catalogue (--list). W is a workload (kv, gemm, dataframe,
 * socialnet), TR a transport (tcp, shm): a '*' stands for either. */
#define DIR3 "dir (GAM-style), 3 nodes"
#define HALF_RTT                                                                                              \
    "the original's work/op + msgs/op x half the AM round trip as its waits took it (a spinning waiter's, "  \
    "a sleeping one's for the share that slept; each repetition's, env W_am_rtt_us_TR); "                    \
    "gemm, socialnet: the busiest node's work/op + its round trips waited/op x the round trip"
#define HALF_LOADED                                                                                           \
    "work/op x nodes/cores + msgs/op x half the AM round trip with the other nodes echoing, every waiter "  \
    "asleep (gemm, "                                                                                          \
    "socialnet: the busiest node's round trips waited x that round trip)"
#define HALF_THREADS                                                                                          \
    "the original on 3 threads (a thread's time/op, env W_original_threads_TR) + msgs/op x half the loaded AM "  \
    "round trip (gemm: the busiest node's round trips waited x that round trip)"
static const dsm_bench_case_t cases[] = {
    /* 3 nodes, own against dir: the headline (the ratio's spread in env
     * W_own_vs_dir_spread_TR; shm measures the implementation, not the protocol) */
    {"*_own_vs_dir/*", DIR3, "ops/s", 1, WORKLOAD, 3},
    {"*_own_vs_dir/*/n=2", "dir (GAM-style), 2 nodes", "ops/s", 1, WORKLOAD, 2},
    /* own against its own second run in each repetition (the A/A pair): the
     * spread a ratio of these runs has when the two sides do not differ */
    {"*_own_vs_own/*", "own run again, dir between them (A/A), 3 nodes", "ops/s", 1, WORKLOAD, 3},
    /* dataframe's own with its other placement, one task per chunk */
    {"dataframe_own_per_chunk_vs_dir/*", DIR3 ", affinity=1; own with one task per chunk", "ops/s", 1, WORKLOAD, 3},
    {"dataframe_msgs_per_op/*/per_chunk", "dir, 3 nodes", "msgs", 0, WORKLOAD, 3},
    /* machine-independent */
    {"*_msgs_per_op/*", "dir, 3 nodes", "msgs", 0, WORKLOAD, 3},
    {"*_bytes_per_op/*", "dir, 3 nodes", "B", 0, WORKLOAD, 3},
    {"*_own_vs_original/*", "the original (3 streams for kv)", "ops/s", 1, WORKLOAD, 3},
    {"*_dir_vs_original/*", "the original (3 streams for kv)", "ops/s", 1, WORKLOAD, 3},
    /* a node thread's time per operation against its messages' round trips */
    {"*_own_time_vs_predicted/*", HALF_RTT, "us/op", 0, PREDICTION, 3},
    {"*_dir_time_vs_predicted/*", HALF_RTT, "us/op", 0, PREDICTION, 3},
    {"*_own_time_vs_predicted_loaded/*", HALF_LOADED, "us/op", 0, PREDICTION, 3},
    {"*_dir_time_vs_predicted_loaded/*", HALF_LOADED, "us/op", 0, PREDICTION, 3},
    {"*_own_vs_dir_predicted/*", "dir as its messages and work predict", "ops/s", 1, PREDICTION, 3},
    /* gemm, dataframe: the work as the original on 3 threads of this host gets it */
    {"*_own_time_vs_predicted_threads/*", HALF_THREADS, "us/op", 0, PREDICTION, 3},
    {"*_dir_time_vs_predicted_threads/*", HALF_THREADS, "us/op", 0, PREDICTION, 3},
    /* the geometric mean of W_own_vs_dir over the workloads run (value x,
     * anchor 1; each repetition's in reps, env own_vs_dir_geomean_spread_TR) */
    {"own_vs_dir_geomean/*", "dir (1.0)", "x", 1, GEOMEAN, 3},
    {"own_vs_dir_geomean_vs_predicted/*", "the geomean the message counts predict", "x", 1, GEOMEAN, 3},
    /* kv own at 3 nodes with delegated mutexes */
    {"mutex_deleg_vs_cas/*", "kv own, CAS mutexes", "ops/s", 1, MUTEX, 3},
    {"kv_msgs_per_op/*/deleg", "kv own, CAS mutexes", "msgs", 0, MUTEX, 3},
    /* own on 1 node (shm) against the original's one stream: the overhead
     * (target within 3%) for kv (200000 operations), gemm and dataframe;
     * for socialnet the analogue of the paper's one-node speedup (Fig. 5b),
     * the original passing its 20000 posts by value, no target */
    {"own_1node_vs_original/*", "the original, 1 stream", "ops/s", 1, ONE_NODE, 1},
    {"own_1node_vs_original/kv/pthread", "the original with pthread mutexes", "ops/s", 1, ONE_NODE, 1},
    /* kv against an original laid out as own's Mutex<Box<T>>, at 256 keys
       and at the large table (131072 buckets, 1M keys) */
    {"own_1node_vs_original/kv/boxed", "the original as Mutex<Box<T>>", "ops/s", 1, ONE_NODE, 1},
    {"own_1node_vs_original/kv/large", "the original, 131072 buckets of 1M keys", "ops/s", 1, ONE_NODE, 1},
    {"own_1node_vs_original/kv/large/boxed", "the original as Mutex<Box<T>>, 131072 buckets", "ops/s", 1,
     ONE_NODE, 1},
    {"own_1node_vs_original/socialnet/pointers", "the original passing pointers on plain memory", "ops/s", 1,
     ONE_NODE, 1},
    /* what own adds per operation (socialnet: against the pointer original) */
    {"own_1node_added_ns/*", "the original's time per operation", "ns/op", 0, ONE_NODE, 1},
    {"own_1node_vs_original/*/best", "the original's fastest run", "ops/s", 1, ONE_NODE, 1},
    /* without the debug-mode borrow checks (the headline runs checks=1) */
    {"own_1node_vs_original/*/nochecks", "the original, 1 stream", "ops/s", 1, ONE_NODE, 1},
    {"own_1node_vs_original/socialnet/floor", "the original's floor (its services fused)", "ops/s", 1, ONE_NODE, 1},
    /* /pointers at 4096-byte posts (16x the work per post, 4000 posts) */
    {"own_1node_vs_original/socialnet/coarse", "the pointer original, 4096-byte posts", "ops/s", 1, ONE_NODE, 1},
    /* own with boxes=0: the ceiling own's channels alone set */
    {"own_1node_vs_original/socialnet/channels", "the original passing pointers on plain memory", "ops/s", 1,
     ONE_NODE, 1},
    /* a local 8-byte dereference through a borrow (the address in hand, as
     * a DRust reference has it), fastest of 15 rounds; /box through
     * dsm_own_box_borrow (reads the owner record, checks off) */
    {"local_deref_cycles", "plain 8-byte load", "cycles", 0, DEREF, 1},
    {"local_deref_cycles/box", "plain 8-byte load", "cycles", 0, DEREF, 1},
    /* a kv read's lock path on one node through kv's own tables: own's
     * lock_borrow, load, unlock_release of a local Mutex<Box<T>> */
    {"local_lock_cycles", "the original's spin lock, borrow, release and unlock", "cycles", 0, DEREF, 1},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* large_is and env large_table: the large table's bytes against this
 * host's L2 (a core's) and last-level cache, as glibc reads them from the
 * CPU (0: unknown). On a host whose last-level cache holds the table, its
 * misses are a core's L2's only, and the anchor says so. */
static void describe_large_table(dsm_report_t *rep)
{
    dsm_kvc_config_t c;
    dsm_kvc_config_default(&c);
    uint64_t bytes = (uint64_t)LARGE_BUCKETS * dsm_kvc_bucket_bytes(&c);
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    l2 = l2 > 0 ? l2 : 0;
    llc = llc > 0 ? llc : 0;
    const double mib = 1024.0 * 1024.0;
    size_t n = strlen(large_is);
    if (llc > 0 && bytes > (uint64_t)llc)
        snprintf(large_is + n, sizeof large_is - n, " (%.0f MiB: past this host's %.0f MiB last-level cache)",
                 (double)bytes / mib, (double)llc / mib);
    else if (llc > 0 && l2 > 0 && bytes > (uint64_t)l2)
        snprintf(large_is + n, sizeof large_is - n,
                 " (%.0f MiB: past a core's %.0f MiB L2, within this host's %.0f MiB last-level cache)",
                 (double)bytes / mib, (double)l2 / mib, (double)llc / mib);
    else
        snprintf(large_is + n, sizeof large_is - n, " (%.0f MiB)", (double)bytes / mib);
    dsm_report_env(rep, "large_table", "{\"bytes\": %llu, \"l2_bytes\": %ld, \"llc_bytes\": %ld}",
                   (unsigned long long)bytes, l2, llc);
}

int main(int argc, char **argv)
{
    const char *one_node = NULL, *progress = NULL, *workloads_arg = NULL, *ops = NULL, *profile = NULL;
    const dsm_bench_flag_t flags[] = {
        {"--profile", NULL, &profile},
        {"--ops", "N per node (kv)", &ops},
        {"--workloads", "kv,gemm,dataframe,socialnet", &workloads_arg},
        {"--one-node", NULL, &one_node},
        {"--progress", "busy|blocking", &progress},
    };
    dsm_bench_opts_t o;
    int done = dsm_bench_parse(argc, argv, cases, N_CASES, flags, sizeof flags / sizeof flags[0], &o);
    if (done >= 0)
        return done;
    if (o.only) {
        /* the runs share their clusters and anchors: choose with --workloads and --one-node */
        fprintf(stderr, "dsm-bench-drust: --only is not supported; use --workloads and --one-node\n");
        return 2;
    }
    int quick = o.quick, only = o.transport_set ? (int)o.transport : -1, reps = o.runs;
    const char *json = o.json;
    one_node_only = one_node != NULL;
    if (progress) {
        dsm_progress_mode_t mode;
        if (dsm_bench_progress_flag("--progress", progress, &mode)) return 2;
        node_progress = (int)mode;
    }
    if (workloads_arg) {
        only_workloads = workloads_arg;
        int known = 0;
        for (size_t wi = 0; wi < NWL; wi++) known += selected(&workloads[wi]);
        if (known == 0) {
            fprintf(stderr, "dsm-bench-drust: --workloads names none of kv, gemm, dataframe, socialnet: %s\n",
                    only_workloads);
            return 2;
        }
    }
    if (ops) {
        char *end;
        ops_override = strtoul(ops, &end, 10);
        if (*end || ops_override == 0 || ops_override > 100000000ul) {
            fprintf(stderr, "dsm-bench-drust: --ops takes a positive count, not %s\n", ops);
            return 2;
        }
    }
    if (reps == 0) reps = 5;
    if (reps < 3 || reps > MAX_REPS) {
        fprintf(stderr, "dsm-bench-drust: --reps must be 3..%d (headlines are medians of >= 3 runs)\n", MAX_REPS);
        return 2;
    }
    dsm_set_log_level(1);
    dsm_report_t rep;
    dsm_report_init(&rep, "drust");
    dsm_report_env(&rep, "cpus", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    describe_large_table(&rep);
    dsm_report_env(&rep, "threads_per_node", "1");
    dsm_report_env(&rep, "nodes", "[2, 3]");
    dsm_report_env(&rep, "quick", "%d", quick);
    dsm_report_env(&rep, "repetitions", "%d", reps);
    dsm_report_env(&rep, "ops_override", "%lu", ops_override);
    dsm_report_env(&rep, "one_node_only", "%d", one_node_only);
    dsm_report_env(&rep, "profile", "%d", profile != NULL);
    dsm_report_env_str(&rep, "progress", node_progress < 0 ? "default" : dsm_progress_name((dsm_progress_mode_t)node_progress));
    dsm_report_env_str(&rep, "mutex_default", "kv lock=auto: cas over shm, deleg over tcp");
    char wl[256] = "[";
    for (size_t wi = 0; wi < NWL; wi++)
        if (selected(&workloads[wi]))
            snprintf(wl + strlen(wl), sizeof wl - strlen(wl), "%s\"%s\"", wl[1] ? ", " : "", workloads[wi].info->name);
    snprintf(wl + strlen(wl), sizeof wl - strlen(wl), "]");
    dsm_report_env(&rep, "workloads", "%s", wl);
    dsm_report_print_header(stdout);
    const dsm_transport_t trs[2] = {DSM_TRANSPORT_TCP, DSM_TRANSPORT_SHM};
    for (int ti = 0; ti < 2 && profile; ti++) {
        if (only >= 0 && (int)trs[ti] != only) continue;
        profile_transport(trs[ti], reps, quick, &rep);
    }
    for (int ti = 0; ti < 2 && !profile; ti++) {
        if (only >= 0 && (int)trs[ti] != only) continue;
        if (one_node_only && trs[ti] != DSM_TRANSPORT_SHM) continue;   /* the 1-node figures run on shm */
        double pred[MAX_WL], rep_log[MAX_REPS] = {0};
        int ngeo = 0, npred = 0;
        measure_transport(trs[ti], reps, quick, &rep, &ngeo, pred, &npred, rep_log);
        char name[96];
        /* each repetition's geomean over the workloads: the headline is
         * their median and the spread their range, as every other headline
         * is the median of its runs' ratios (a geomean of the workloads'
         * medians can lie outside the runs' range) */
        double g[MAX_REPS], geomean = 0;
        if (ngeo > 0) {
            for (int k = 0; k < reps; k++) g[k] = exp(rep_log[k] / ngeo);
            geomean = dsm_report_median(g, (size_t)reps);
            double lo, hi;
            dsm_report_range(g, (size_t)reps, &lo, &hi);
            snprintf(name, sizeof name, "own_vs_dir_geomean/%s", dsm_transport_name(trs[ti]));
            const dsm_figure_t *f =
                emit(&rep, name, geomean, "x",
                     trs[ti] == DSM_TRANSPORT_SHM ? "dir (1.0); shm measures the implementation, not the protocol"
                                                  : "dir (1.0)",
                     1.0, 1);
            dsm_report_reps(&rep, f, g, NULL, (size_t)reps);
            snprintf(name, sizeof name, "own_vs_dir_geomean_spread_%s", dsm_transport_name(trs[ti]));
            dsm_report_env(&rep, name, "{\"reps\": %d, \"min\": %.3f, \"max\": %.3f}", reps, lo, hi);
        }
        if (ngeo > 0 && npred == ngeo) {
            /* measured against what the message counts predict */
            snprintf(name, sizeof name, "own_vs_dir_geomean_vs_predicted/%s", dsm_transport_name(trs[ti]));
            emit(&rep, name, geomean, "x", "the geomean the message counts predict",
                 exp(mean_of(pred, npred)), 1);
        }
    }
    int rc = 0;
    if (json && dsm_report_write_json(&rep, json) != 0) rc = 1;
    dsm_report_free(&rep);
    return rc;
}
