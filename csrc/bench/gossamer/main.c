/* dsm-bench-gossamer: delegation across nodes (Gossamer, thesis §3.3.1-3.3.2)
 * against RPC over active messages on the same fabric, in the same run.
 *
 * Setup: a coordinator and two nodes in this process, over shm and then tcp
 * (loopback); each node runs a delegation runtime of one thread (2 cores:
 * one thread per node), attached to it. A client keeps W echo requests
 * outstanding against a trust whose trustee is the other node's thread:
 * async apply_then with 32 bytes of arguments, the closure returns them.
 * In the headline both nodes' threads are clients and servers, as the
 * thesis's echo (§3.3.1) has every thread; elsewhere node 0's is the only
 * client.
 * Both sides are timed after WARMUP untimed requests, and only the runs
 * that give p99.9 read a clock per request.
 * A slot write is a store into the peer's mapped memory over shm; over tcp
 * it is an emulated one-sided write, one active message that the target's
 * handler applies, not RDMA (the tcp rows' labels say so).
 *
 * Anchors, each on its own two nodes created per measurement (so that their
 * threads never compete with Gossamer's runs): one active message per
 * request and one per reply, node i's handler answering in place
 * (dsm_fabric_am_reply).
 * - naive RPC: one client, one request outstanding (dsm_fabric_am_request,
 *   polling node 0's worker), node 1's progress thread busy-polling: the
 *   fabric's AM round trip, latency-bound.
 * - windowed RPC: Gossamer's headline clients and window (both nodes'
 *   threads, 64 outstanding each, dsm_fabric_am_request_nb), each thread
 *   the poller of its own worker, so that its replies and the other's
 *   requests are handled on it. A thread woken per message instead (blocking
 *   progress, a server thread beside the handler) costs scheduler hand-offs
 *   per round trip on 2 cores and falls into lock-step, so W does not
 *   batch; polled, the window is bound by the message rate. UCX's shm FIFO
 *   is sized for its 2 x 64 messages in flight to a node (main).
 *
 * Each figure is the median over R interleaved repetitions, Gossamer first
 * in every other one and last in the rest, so drift on the shared machine
 * and the order hit all alike; the JSON keeps every repetition. The figures
 * and their anchors: the case table below (--list prints it); SSSP is
 * sssp.c.
 * On a machine shared with other work the runtimes' spinning threads wait
 * for cores and every figure swings: read them as indicative. */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/core_rtt.h"
#include "bench/driver.h"
#include "bench/gossamer/gossamer.h"
#include "bench/report.h"
#include "dsm/coord.h"
#include "dsm/deleg.h"
#include "dsm/log.h"
#include "dsm/node.h"
#include "dsm/runtime.h"
#include "util/clock.h"

enum { H_REQ = DSM_AM_USER_FIRST, H_SINK, MAX_PAYLOAD = 4096 };
#define die gossamer_die

/* The program's measurements (the case table's runs). */
enum { ECHO, SSSP };

#define NAIVE_ANCHOR "naive AM RPC, 1 client, 1 outstanding (latency-bound)"
#define MPI_ANCHOR "Open MPI send/recv, 1 client, w=64"

/* ---- the two nodes -------------------------------------------------------- */

typedef struct bench_cluster {
    gossamer_cluster_t g;
    dsm_transport_t tr;
    dsm_node_t *node[2];
    dsm_deleg_rt_t *rt[2];
    dsm_deleg_trust_t echo[2];  /* on node i, trustee node 1 - i thread 0 */
    dsm_deleg_trust_t owner[2]; /* the property of node i's thread */
} bench_cluster_t;

static uint64_t server_obj[2];

static void echo_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)prop;
    (void)env;
    dsm_deleg_return(ret, args, args_len);
}

/* ---- naive RPC ---------------------------------------------------------------- */

/* Node 1's handler: the echo, answered in place (a detached send). */
static void naive_req_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_status_t st = dsm_fabric_am_reply((dsm_fabric_t *)ctx, msg->src_rank, msg->request_id, DSM_OK, msg->data,
                                          msg->len);
    if (st != DSM_OK) fprintf(stderr, "dsm-bench-gossamer: naive reply: %s\n", dsm_strerror(st));
}

/* ---- one measurement ------------------------------------------------------- */

typedef struct run {
    size_t n, window, size;
    int both;    /* Gossamer and windowed RPC: both nodes' threads are clients (n each) */
    int latency; /* time every request (the p99.9 figures); the throughput
                  * headlines read no clock per request, on either side */
    double secs;
    double p999_us;
    /* the fabric's counters over the run, both nodes (Gossamer's and the
     * windowed RPC's runs):
     * threads that waited on their own (a send that did not complete at
     * once), and the progress threads' parks (standing down ~1 ms for such a
     * waiter: messages wait meanwhile) and wake-ups; and how long this
     * process's threads were runnable but waited for a core (the
     * scheduler's run-queue wait, /proc/self/task/N/schedstat): a spinning
     * runtime thread that waits a time slice for its core leaves its
     * peer's requests unserved that long, which tells a run slowed by the
     * host's other load from one slowed by the fabric */
    uint64_t waits, parks, wakeups;
    double core_wait_ms;   /* all its threads, the run with its warm-up and start */
    /* Gossamer's runs: the runtimes' polling threads' wait over the timed
     * part, and its length (-1: not measured) */
    double trust_wait_ms, wait_window_secs;
    /* the host's state between the nodes' two cores just before the run
     * (core_rtt.h): on a virtual machine a cache line's round trip between
     * them changes within a run, and every message crosses them */
    double core_rtt_ns;
} run_t;

/* Requests before the timed ones, on both sides: the first requests of a
 * run pay thread start-up and first touches, not the fabric. */
enum { WARMUP = 256 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double p999(double *lat, size_t n)
{
    qsort(lat, n, sizeof *lat, cmp_double);
    size_t i = (size_t)((double)n * 0.999);
    return lat[i < n ? i : n - 1];
}

/* The fabric counters' change over a run, both nodes (run_t). */
/* How long (ns) this process's live threads have waited on a run queue
 * (the second field of each /proc/self/task/N/schedstat), and of that the
 * delegation runtimes' polling threads (dsm-trust-N) in *trust; 0 where the
 * kernel keeps no schedstats. A run's threads all live from before it
 * starts (the runtimes') or start at 0 (its own), so a difference over a
 * run is that run's wait. */
static uint64_t core_wait_ns(uint64_t *trust)
{
    *trust = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    uint64_t sum = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[300], comm[32] = "";   /* a d_name is up to 255 bytes */
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && !fgets(comm, sizeof comm, f)) comm[0] = 0;
        if (f) fclose(f);
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
        f = fopen(path, "r");
        unsigned long long run, wait;
        if (f && fscanf(f, "%llu %llu", &run, &wait) == 2) {
            sum += wait;
            if (strncmp(comm, "dsm-trust", 9) == 0) *trust += wait;
        }
        if (f) fclose(f);
    }
    closedir(d);
    return sum;
}

static void count_waits(run_t *r, const dsm_stats_t before[2], const dsm_stats_t after[2])
{
    r->waits = r->parks = r->wakeups = 0;
    for (int i = 0; i < 2; i++) {
        r->waits += after[i].waits - before[i].waits;
        r->parks += after[i].progress_parks - before[i].progress_parks;
        r->wakeups += after[i].progress_wakeups - before[i].progress_wakeups;
    }
}

static void naive_measure(dsm_transport_t tr, run_t *r)
{
    gossamer_cluster_t c;
    gossamer_cluster_start(&c, tr, 2, 1u << 1, 0);
    dsm_status_t st = dsm_fabric_am_register(dsm_node_fabric(c.k.nodes[1]), H_REQ, naive_req_handler,
                                             dsm_node_fabric(c.k.nodes[1]));
    if (st != DSM_OK) die("naive handler", st);
    dsm_fabric_t *f = dsm_node_fabric(c.k.nodes[0]);
    double *lat = calloc(r->n, sizeof *lat);
    uint8_t *msg = malloc(r->size), *reply = malloc(r->size);
    if (!lat || !msg || !reply) die("naive buffers", DSM_ERR_NOMEM);
    memset(msg, 0x5a, r->size);
    uint64_t t0 = 0;
    for (uint64_t i = 0; i < WARMUP + r->n; i++) {
        if (i == WARMUP) t0 = dsm_now_ns();
        uint64_t t = r->latency ? dsm_now_ns() : 0;
        size_t got = 0;
        st = dsm_fabric_am_request(f, 1, H_REQ, msg, r->size, reply, r->size, &got, 0);
        if (st == DSM_OK && got != r->size) st = DSM_ERR_PROTO;
        if (st != DSM_OK) die("naive request", st);
        if (r->latency && i >= WARMUP) lat[i - WARMUP] = (double)(dsm_now_ns() - t) / 1e3;
    }
    r->secs = (double)(dsm_now_ns() - t0) / 1e9;
    r->p999_us = r->latency ? p999(lat, r->n) : 0;
    free(lat);
    free(msg);
    free(reply);
    gossamer_cluster_stop(&c);
}

/* ---- windowed RPC --------------------------------------------------------------- */

/* One node's thread in the windowed RPC: client of the other node with
 * `window` requests outstanding (dsm_fabric_am_request_nb, a request id
 * each) and, through its handler, server of the other's requests. It polls
 * its own worker (a poller: the progress thread stands down), so replies,
 * requests and answers are all handled here, with no thread hand-off. */
typedef struct wnode {
    _Alignas(64) dsm_fabric_t *f; /* a cache line of its own: no false sharing with the other's */
    uint32_t self, peer;
    const run_t *r;
    int client, stream;
    const struct wnode *other;     /* the other node's thread */
    atomic_int *running;           /* threads not yet done with their part */
    atomic_uint_least64_t received; /* the stream's messages that reached this node */
    uint64_t t0, t1;
} wnode_t;

/* The stream's sink: counts (the handler runs on this node's poller). */
static void sink_handler(void *ctx, const dsm_am_msg_t *msg)
{
    (void)msg;
    atomic_fetch_add_explicit(&((wnode_t *)ctx)->received, 1, memory_order_relaxed);
}

/* As the delegation runtime pins node i's thread: on CPU i. */
static void pin_self(unsigned cpu)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu <= 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % (unsigned)ncpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Idle polls before each further idle poll yields, as the delegation
 * runtime attached to a node does: the same idle policy as Gossamer's
 * threads (with other work on the machine, a poller that never yields
 * holds a core the thread it waits for may need). */
enum { W_SPIN = 64 };

static void w_idle(unsigned *spins, int busy)
{
    if (busy) *spins = 0;
    else if (++*spins >= W_SPIN) sched_yield();
}

/* Retire completed requests in issue order (replies come back in order:
 * one endpoint, one server), each slot free for the next issue. */
static size_t w_retire(const wnode_t *w, dsm_op_t *op, size_t done, size_t issued)
{
    size_t W = w->r->window;
    for (; done < issued && __atomic_load_n(&op[done % W].done, __ATOMIC_ACQUIRE); done++) {
        dsm_op_t *o = &op[done % W];
        dsm_fabric_test(o); /* releases the request */
        if (o->status != DSM_OK || o->result != w->r->size)
            die("windowed reply", o->status != DSM_OK ? o->status : DSM_ERR_PROTO);
    }
    return done;
}

static void w_rpc(wnode_t *w)
{
    const run_t *r = w->r;
    size_t W = r->window, total = WARMUP + r->n, issued = 0, done = 0;
    unsigned spins = 0;
    dsm_op_t *op = calloc(W, sizeof *op);
    uint8_t *reply = malloc(W * r->size), msg[MAX_PAYLOAD];
    if (!op || !reply) die("windowed buffers", DSM_ERR_NOMEM);
    memset(msg, 0x5a, r->size);
    while (done < total) {
        /* the warm-up drained before the timed requests, as Gossamer's */
        if (done == WARMUP && !w->t0) w->t0 = dsm_now_ns();
        size_t stop = done < WARMUP ? WARMUP : total;
        for (; issued < stop && issued - done < W; issued++) {
            size_t k = issued % W;
            dsm_status_t st = dsm_fabric_am_request_nb(w->f, w->peer, H_REQ, msg, r->size, reply + k * r->size,
                                                       r->size, &op[k]);
            if (st != DSM_OK) die("windowed request", st);
        }
        size_t was = done;
        unsigned got = dsm_fabric_poll(w->f);
        done = w_retire(w, op, done, issued);
        w_idle(&spins, got || done != was);
    }
    w->t1 = dsm_now_ns();
    free(op);
    free(reply);
}

/* The base figure of the windowed RPC's prediction: both threads stream
 * plain messages to each other, as many as their requests, each thread
 * sending and receiving as in the RPC (a request costs two such messages).
 * At most as many in flight to a node as the RPC has (W requests and W
 * replies), judged by the receiver's count: an unbounded stream would
 * measure a full FIFO instead. */
static void w_stream(wnode_t *w)
{
    size_t n = w->r->n, credit = 2 * w->r->window, sent = 0, got = 0;
    unsigned spins = 0;
    uint8_t msg[MAX_PAYLOAD];
    memset(msg, 0x5a, w->r->size);
    w->t0 = dsm_now_ns();
    while (sent < n || atomic_load_explicit(&w->received, memory_order_relaxed) < n) {
        /* the other's count (a line its handler writes) read only when
         * the credit it last gave is used up */
        if (sent < n && sent - got >= credit) got = atomic_load_explicit(&w->other->received, memory_order_relaxed);
        /* one send per poll: each thread takes its messages as they come */
        int busy = sent < n && sent - got < credit;
        if (busy) {
            dsm_status_t st = dsm_fabric_am_send(w->f, w->peer, H_SINK, msg, w->r->size);
            if (st != DSM_OK) die("message stream", st);
            sent++;
        }
        w_idle(&spins, dsm_fabric_poll(w->f) || busy);
    }
    w->t1 = dsm_now_ns();
}

static void *w_thread(void *arg)
{
    wnode_t *w = arg;
    pin_self(w->self);
    dsm_fabric_poller_begin(w->f);
    if (w->client) (w->stream ? w_stream : w_rpc)(w);
    atomic_fetch_sub_explicit(w->running, 1, memory_order_acq_rel);
    /* serve the other node until it is done too */
    for (unsigned spins = 0; atomic_load_explicit(w->running, memory_order_acquire) > 0;)
        w_idle(&spins, dsm_fabric_poll(w->f) != 0);
    dsm_fabric_poller_end(w->f);
    return NULL;
}

/* Both nodes' threads through one part (rpc or stream); seconds from the
 * first timed start to the last end. */
static double w_run(wnode_t *w, int stream)
{
    atomic_int running = 2;
    pthread_t th[2];
    /* both reset before either starts: node 0's first messages may reach
     * node 1 (through its progress thread) before node 1's thread starts,
     * and a count reset after them would never give their credit back */
    for (int i = 0; i < 2; i++) {
        w[i].stream = stream;
        w[i].running = &running;
        w[i].t0 = w[i].t1 = 0;
        atomic_store(&w[i].received, 0);
    }
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, w_thread, &w[i]) != 0) die("windowed thread", DSM_ERR_NOMEM);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (int i = 0; i < 2; i++) {
        if (!w[i].client) continue;
        if (w[i].t0 < t0) t0 = w[i].t0;
        if (w[i].t1 > t1) t1 = w[i].t1;
    }
    return (double)(t1 - t0) / 1e9;
}

/* The windowed RPC on its own two nodes (blocking progress threads, which
 * stand down for the pollers), as many clients as r->both says; with
 * `rate`, then the message stream's rate (messages/s, both directions). */
static void windowed_measure(dsm_transport_t tr, run_t *r, double *rate)
{
    gossamer_cluster_t c;
    gossamer_cluster_start(&c, tr, 2, 0, 0);
    wnode_t w[2];
    for (int i = 0; i < 2; i++) {
        w[i] = (wnode_t){.f = dsm_node_fabric(c.k.nodes[i]), .self = (uint32_t)i, .peer = (uint32_t)(1 - i),
                         .other = &w[1 - i], .r = r, .client = i == 0 || r->both};
        dsm_status_t st = dsm_fabric_am_register(w[i].f, H_REQ, naive_req_handler, w[i].f);
        if (st == DSM_OK) st = dsm_fabric_am_register(w[i].f, H_SINK, sink_handler, &w[i]);
        if (st != DSM_OK) die("windowed handlers", st);
    }
    dsm_stats_t before[2], after[2];
    for (int i = 0; i < 2; i++) dsm_fabric_stats(w[i].f, &before[i]);
    uint64_t polling, core_wait = core_wait_ns(&polling);
    r->secs = w_run(w, 0);
    for (int i = 0; i < 2; i++) dsm_fabric_stats(w[i].f, &after[i]);
    count_waits(r, before, after);
    r->core_wait_ms = (double)(core_wait_ns(&polling) - core_wait) / 1e6;
    r->trust_wait_ms = -1;   /* its polling threads have ended (and taken their counts) by now */
    if (rate) {
        for (int i = 0; i < 2; i++) w[i].client = 1;
        *rate = 2.0 * (double)r->n / w_run(w, 1);
    }
    gossamer_cluster_stop(&c);
}

/* Gossamer's client on node i: its main fiber keeps `window` apply_then in
 * flight to the other node's thread (after WARMUP untimed ones). */
typedef struct gclient {
    _Alignas(64) bench_cluster_t *c; /* a cache line of its own: no false sharing with the other's */
    run_t *r;
    int node;
    uint64_t *t_issue;
    double *lat;
    size_t done, issued;
    uint64_t t0, t1; /* first timed issue, last completion */
    uint64_t polling_wait[2]; /* the nodes' polling threads' core wait (ns) at t0 and t1 */
    _Atomic int finished;
    dsm_status_t err;
} gclient_t;

static _Thread_local gclient_t *gc; /* the client of this runtime thread */

static void g_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)ret;
    uint64_t id = (uint64_t)(uintptr_t)arg;
    if (st != DSM_OK || len != gc->r->size) gc->err = st != DSM_OK ? st : DSM_ERR_PROTO;
    if (gc->r->latency && id >= WARMUP) gc->lat[id - WARMUP] = (double)(dsm_now_ns() - gc->t_issue[id - WARMUP]) / 1e3;
    gc->done++;
}

static void g_main(void *arg, unsigned worker)
{
    gclient_t *g = arg;
    if (!g || worker != 0) return;
    gc = g;
    static _Thread_local uint8_t payload[MAX_PAYLOAD];
    memset(payload, 0x5a, sizeof payload);
    size_t total = WARMUP + g->r->n;
    while (g->done < total && g->err == DSM_OK) {
        if (g->issued == WARMUP) {
            /* the warm-up done: the timed requests start on a drained window */
            dsm_deleg_wait_outstanding(0);
            core_wait_ns(&g->polling_wait[0]);
            g->t0 = dsm_now_ns();
        }
        size_t stop = g->issued < WARMUP ? WARMUP : total;
        while (g->issued < stop && g->issued - g->done < g->r->window) {
            uint64_t id = g->issued++;
            if (g->r->latency && id >= WARMUP) g->t_issue[id - WARMUP] = dsm_now_ns();
            dsm_status_t st = dsm_deleg_apply_then(&g->c->echo[g->node], echo_fn, NULL, 0, payload, g->r->size,
                                                   g->r->size, g_then, (void *)(uintptr_t)id);
            if (st != DSM_OK) {
                g->err = st;
                break;
            }
        }
        /* Window full (or the warm-up issued): block until one completes,
         * so that the thread serves and polls rather than spinning through
         * the fiber (the thesis's client yields when its queue is full). */
        if (g->done < total && g->err == DSM_OK)
            dsm_deleg_wait_outstanding(g->issued < total && g->issued != WARMUP ? g->r->window - 1 : 0);
    }
    g->t1 = dsm_now_ns();
    core_wait_ns(&g->polling_wait[1]);
    atomic_store_explicit(&g->finished, 1, memory_order_release);
}

static void gossamer_measure(bench_cluster_t *c, run_t *r)
{
    gclient_t g[2];
    int clients = r->both ? 2 : 1;
    for (int i = 0; i < 2; i++) {
        memset(&g[i], 0, sizeof g[i]);
        g[i] = (gclient_t){.c = c, .r = r, .node = i};
        if (r->latency) {
            g[i].t_issue = calloc(r->n, sizeof *g[i].t_issue);
            g[i].lat = calloc(r->n, sizeof *g[i].lat);
            if (!g[i].t_issue || !g[i].lat) die("latency buffers", DSM_ERR_NOMEM);
        }
    }
    dsm_stats_t before[2], after[2];
    for (int i = 0; i < 2; i++) dsm_fabric_stats(dsm_node_fabric(c->node[i]), &before[i]);
    uint64_t polling, core_wait = core_wait_ns(&polling);
    /* the trustee's node first: the client's first batch finds it running */
    for (int i = 1; i >= 0; i--)
        if (dsm_deleg_rt_start(c->rt[i], g_main, i < clients ? &g[i] : NULL) != DSM_OK) die("rt start", DSM_ERR_STATE);
    /* sleep, not spin: this thread is no part of either side */
    for (int i = 0; i < clients; i++)
        while (!atomic_load_explicit(&g[i].finished, memory_order_acquire)) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    for (int i = 0; i < 2; i++) dsm_fabric_stats(dsm_node_fabric(c->node[i]), &after[i]);
    count_waits(r, before, after);
    r->core_wait_ms = (double)(core_wait_ns(&polling) - core_wait) / 1e6;
    /* the polling threads' over client 0's timed part, sampled on its
     * thread just outside it */
    r->trust_wait_ms = (double)(g[0].polling_wait[1] - g[0].polling_wait[0]) / 1e6;
    r->wait_window_secs = (double)(g[0].t1 - g[0].t0) / 1e9;
    for (int i = 0; i < 2; i++) dsm_deleg_rt_join(c->rt[i]);
    uint64_t t0 = g[0].t0, t1 = g[0].t1;
    for (int i = 1; i < clients; i++) {
        if (g[i].t0 < t0) t0 = g[i].t0;
        if (g[i].t1 > t1) t1 = g[i].t1;
    }
    r->secs = (double)(t1 - t0) / 1e9;
    for (int i = 0; i < clients; i++)
        if (g[i].err != DSM_OK) die("gossamer echo", g[i].err);
    r->p999_us = r->latency ? p999(g[0].lat, r->n) : 0;
    for (int i = 0; i < 2; i++) {
        free(g[i].t_issue);
        free(g[i].lat);
    }
}

/* ---- cluster ------------------------------------------------------------------ */

static void cluster_start(bench_cluster_t *c, dsm_transport_t tr)
{
    memset(c, 0, sizeof *c);
    gossamer_cluster_start(&c->g, tr, 2, 0, 1);
    c->tr = tr;
    c->node[0] = c->g.k.nodes[0];
    c->node[1] = c->g.k.nodes[1];
    c->rt[0] = c->g.rt[0];
    c->rt[1] = c->g.rt[1];
    dsm_status_t st;
    for (int i = 0; i < 2; i++) {
        if ((st = dsm_deleg_entrust(c->rt[i], 0, &server_obj[i], NULL, 0, &c->owner[i])) != DSM_OK)
            die("entrust", st);
        uint8_t wire[DSM_DELEG_TRUST_WIRE];
        if ((st = dsm_deleg_trust_export(&c->owner[i], wire, sizeof wire)) != DSM_OK) die("export", st);
        if ((st = dsm_deleg_trust_import(c->rt[1 - i], wire, sizeof wire, &c->echo[1 - i])) != DSM_OK)
            die("import", st);
    }
}

/* arg: the node's two trusts (its echo trust and its own property's) */
static void drop_main(void *arg, unsigned worker)
{
    dsm_deleg_trust_t **t = arg;
    if (t && worker == 0) {
        dsm_deleg_trust_drop(t[0]);
        dsm_deleg_trust_drop(t[1]);
    }
}

static void cluster_stop(bench_cluster_t *c)
{
    dsm_deleg_trust_t *mine[2][2] = {{&c->echo[0], &c->owner[0]}, {&c->echo[1], &c->owner[1]}};
    for (int i = 0; i < 2; i++) dsm_deleg_rt_start(c->rt[i], drop_main, mine[i]);
    for (int i = 0; i < 2; i++) dsm_deleg_rt_join(c->rt[i]);
    gossamer_cluster_stop(&c->g);
}

/* ---- figures -------------------------------------------------------------------- */

/* One figure's repetitions in run order: Mops/s of Gossamer, the naive RPC
 * and (headline) the windowed RPC, p99.9 in us, the message stream's rate
 * (Mops/s), and each Gossamer and windowed run with the fabric's counters. */
typedef struct reps {
    int n;
    double g[DSM_FIGURE_MAX_REPS], v[DSM_FIGURE_MAX_REPS], w[DSM_FIGURE_MAX_REPS];
    double gl[DSM_FIGURE_MAX_REPS], vl[DSM_FIGURE_MAX_REPS], rate[DSM_FIGURE_MAX_REPS];
    char runs[3072], wruns[3072];
    run_t gr[DSM_FIGURE_MAX_REPS];   /* Gossamer's runs with their counters */
} reps_t;

/* The share of a run's timed part each node's polling thread (on
 * average) spent runnable but without its core. */
static double off_core_share(const run_t *r)
{
    return r->wait_window_secs > 0 ? r->trust_wait_ms / 1e3 / (2 * r->wait_window_secs) : 0;
}

/* The host's part in each Gossamer run, as JSON: the echo moves only while
 * both nodes' polling threads hold their cores (one off its core stalls
 * the other's requests and answers), so a run's rate follows the share of
 * it both did, (1 - off)^2 if each was off `off` of the time; the mode
 * "cores" when that share is at least half the run, else "crowded". */
static void emit_host_modes(dsm_report_t *rep, const char *tn, const reps_t *m)
{
    char json[DSM_FIGURE_MAX_REPS * 192 + 4] = "[";
    size_t at = 1;
    for (int i = 0; i < m->n; i++) {
        double off = off_core_share(&m->gr[i]), both = (1 - off) * (1 - off);
        if (off > 1) both = 0;
        at += (size_t)snprintf(json + at, sizeof json - at,
                               "%s{\"mops\":%.4g,\"polling_off_core\":%.3f,\"both_on_core\":%.3f,"
                               "\"core_rtt_ns\":%.0f,\"mode\":\"%s\"}",
                               i ? "," : "", m->g[i], off, both, m->gr[i].core_rtt_ns, both >= 0.5 ? "cores" : "crowded");
    }
    snprintf(json + at, sizeof json - at, "]");
    printf("  (the host per Gossamer run, %s: %s)\n", tn, json);
    char name[64];
    snprintf(name, sizeof name, "echo_host_%s", tn);
    dsm_report_env(rep, name, "%s", json);
}

static void note_run(char *buf, size_t cap, int i, double mops, const run_t *r)
{
    size_t at = strlen(buf);
    char polling[64] = "";
    if (r->trust_wait_ms >= 0)
        snprintf(polling, sizeof polling, ", the polling threads %.3g ms of the timed part", r->trust_wait_ms);
    snprintf(buf + at, cap - at,
             "%s%.3g Mops/s in %.3g ms (waits %llu, parks %llu, wakeups %llu, waited for a core %.3g ms%s, "
             "core-to-core round trip %.0f ns)",
             i ? "; " : "", mops, r->secs * 1e3, (unsigned long long)r->waits, (unsigned long long)r->parks,
             (unsigned long long)r->wakeups, r->core_wait_ms, polling, r->core_rtt_ns);
}

/* R interleaved repetitions of Gossamer, naive and (with `windowed`)
 * windowed RPC, the order reversed every other repetition, so that drift
 * on the shared machine and the position in a round hit them alike. */
static void interleave(bench_cluster_t *c, const run_t *spec, int nreps, int windowed, reps_t *out)
{
    memset(out, 0, sizeof *out);
    out->n = nreps;
    double clients = spec->both ? 2 : 1;
    for (int i = 0; i < nreps; i++) {
        run_t g = *spec, v = *spec, w = *spec;
        for (int j = 0; j < 3; j++) {
            switch ((i & 1) ? 2 - j : j) {
            case 0:
                g.core_rtt_ns = dsm_bench_core_rtt_ns(0, 1);
                gossamer_measure(c, &g);
                break;
            case 1: naive_measure(c->tr, &v); break;
            default:
                if (!windowed) break;
                w.core_rtt_ns = dsm_bench_core_rtt_ns(0, 1);
                windowed_measure(c->tr, &w, &out->rate[i]);
                break;
            }
        }
        out->g[i] = (double)spec->n * clients / g.secs / 1e6;
        out->v[i] = (double)spec->n / v.secs / 1e6;
        out->gl[i] = g.p999_us;
        out->vl[i] = v.p999_us;
        note_run(out->runs, sizeof out->runs, i, out->g[i], &g);
        out->gr[i] = g;
        if (!windowed) continue;
        out->w[i] = (double)spec->n * clients / w.secs / 1e6;
        out->rate[i] /= 1e6;
        note_run(out->wruns, sizeof out->wruns, i, out->w[i], &w);
    }
}

/* windowed_rpc_predicted: the windowed RPC's time per request (both
 * clients' together) against what its protocol predicts from this run's
 * base figures: two messages per request at the message stream's rate,
 * unless the window's round trips bound it (RTT/(clients x W), the naive
 * RPC's time per request being the RTT). */
static void emit_prediction(dsm_report_t *rep, const char *tn, const reps_t *m, const run_t *spec)
{
    double ours[DSM_FIGURE_MAX_REPS], pred[DSM_FIGURE_MAX_REPS], clients = spec->both ? 2 : 1;
    for (int i = 0; i < m->n; i++) {
        double by_rate = m->rate[i] / 2, by_rtt = clients * (double)spec->window * m->v[i];
        ours[i] = 1e3 / m->w[i];
        pred[i] = 1e3 / (by_rate < by_rtt ? by_rate : by_rtt);
    }
    char name[96], label[160];
    snprintf(name, sizeof name, "windowed_rpc_predicted/%s", tn);
    snprintf(label, sizeof label, "predicted: max(2 msgs at the AM stream's rate, RTT/(%gx%zu)), same run", clients,
             spec->window);
    gossamer_emit(rep, name, ours, pred, m->n, "ns/req", label, 0);
}

/* echo_vs_mpi/tcp: Open MPI's echo with the same window (64) and size,
 * interleaved with Gossamer's (which runs first alternating); reported as
 * not run if MPI is missing. */
static void mpi_figure(dsm_report_t *rep, bench_cluster_t *c, size_t n, int reps)
{
    double gm[16], mm[16], ml;
    int ok = 1;
    for (int r = 0; r < reps && ok; r++) {
        run_t gr = {.n = n, .window = 64, .size = 32};
        if (r & 1)
            ok = gossamer_mpi_echo(n, 64, 32, &mm[r], &ml) == 0;
        gossamer_measure(c, &gr);
        gm[r] = (double)n / gr.secs / 1e6;
        if (!(r & 1))
            ok = gossamer_mpi_echo(n, 64, 32, &mm[r], &ml) == 0;
    }
    if (ok) {
        char label[160];
        gossamer_emit(rep, "echo_vs_mpi/tcp", gm, mm, reps, "Mops/s",
                      gossamer_label(label, sizeof label, MPI_ANCHOR, c->tr), 1);
    } else {
        fprintf(stderr, "dsm-bench-gossamer: no Open MPI anchor (dsm-mpi-echo or mpirun missing or failed): "
                        "echo_vs_mpi/tcp not reported\n");
        dsm_report_env_str(rep, "echo_vs_mpi", "not run: dsm-mpi-echo or mpirun missing or failed");
    }
}

static const char NAIVE[] = NAIVE_ANCHOR;

/* The headline, as the thesis measures its echo (§3.3.1): every thread is
 * client and server, 32-byte asynchronous requests, each client keeps 64
 * outstanding (its fiber yields when the window is full), so a slot write
 * carries a full batch (20 requests of 48 bytes in 960). Anchors on the
 * same two cores: the naive RPC (one client, one outstanding) and the
 * windowed RPC (both threads clients, 64 outstanding each). */
static void headline(dsm_report_t *rep, bench_cluster_t *c, size_t n_head, int reps)
{
    const char *tn = dsm_transport_name(c->tr);
    run_t spec = {.n = n_head, .window = 64, .size = 32, .both = 1};
    reps_t m;
    interleave(c, &spec, reps, 1, &m);
    char name[96], label[160];
    snprintf(name, sizeof name, "echo_vs_naive_rpc/%s", tn);
    gossamer_emit(rep, name, m.g, m.v, reps, "Mops/s", gossamer_label(label, sizeof label, NAIVE, c->tr), 1);
    snprintf(name, sizeof name, "echo_vs_windowed_rpc/%s", tn);
    gossamer_emit(rep, name, m.g, m.w, reps, "Mops/s",
              gossamer_label(label, sizeof label, "windowed AM RPC, 2 clients, 64 outstanding each", c->tr), 1);
    emit_prediction(rep, tn, &m, &spec);
    /* each repetition's runs with the fabric's counters: a slow Gossamer
     * run with parks is messages waiting for a parked progress thread (over
     * tcp); the windowed RPC's pollers should leave no wake-ups */
    snprintf(name, sizeof name, "echo_runs_%s", tn);
    dsm_report_env_str(rep, name, m.runs);
    emit_host_modes(rep, tn, &m);
    snprintf(name, sizeof name, "windowed_runs_%s", tn);
    dsm_report_env_str(rep, name, m.wruns);
    printf("  (Gossamer's runs: %s)\n  (windowed RPC's runs: %s)\n", m.runs, m.wruns);
}

static void echo_figures(dsm_report_t *rep, dsm_transport_t tr, size_t n, size_t n_head, int reps, int quick)
{
    const char *tn = dsm_transport_name(tr);
    bench_cluster_t c;
    cluster_start(&c, tr);
    headline(rep, &c, n_head, reps);
    char name[96], label[160];
    const char *naive = gossamer_label(label, sizeof label, NAIVE, tr);
    reps_t m;
    /* the same with node 0's thread the only client */
    interleave(&c, &(run_t){.n = n_head, .window = 64, .size = 32}, reps, 0, &m);
    snprintf(name, sizeof name, "echo_one_client/%s", tn);
    gossamer_emit(rep, name, m.g, m.v, reps, "Mops/s", naive, 1);
    if (tr == DSM_TRANSPORT_TCP) mpi_figure(rep, &c, n, reps);
    size_t windows_full[] = {1, 4, 16, 64, 256}, windows_quick[] = {1, 16, 64};
    size_t *windows = quick ? windows_quick : windows_full, nwin = quick ? 3 : 5;
    for (size_t wi = 0; wi < nwin; wi++) {
        size_t w = windows[wi];
        run_t spec = {.n = n / (w < 4 ? 8 : w < 64 ? 2 : 1), .window = w, .size = 32, .latency = 1};
        interleave(&c, &spec, reps, 0, &m);
        snprintf(name, sizeof name, "echo/%s/w=%zu", tn, w);
        gossamer_emit(rep, name, m.g, m.v, reps, "Mops/s", naive, 1);
        snprintf(name, sizeof name, "echo_p999/%s/w=%zu", tn, w);
        gossamer_emit(rep, name, m.gl, m.vl, reps, "us", naive, 0);
    }
    size_t sizes_full[] = {8, 32, 128, 512, 896, 1024, 2048, 4096}, sizes_quick[] = {32, 896, 1024, 4096};
    size_t *sizes = quick ? sizes_quick : sizes_full, nsizes = quick ? 4 : 8;
    for (size_t si = 0; si < nsizes; si++) {
        size_t b = sizes[si];
        interleave(&c, &(run_t){.n = n / (b > 900 ? 16 : 4), .window = 64, .size = b}, quick ? 1 : 3, 0, &m);
        snprintf(name, sizeof name, "size/%s/B=%zu", tn, b);
        gossamer_emit(rep, name, m.g, m.v, m.n, "Mops/s", naive, 1);
    }
    cluster_stop(&c);
}

/* The figure catalogue (--list): each over shm and tcp; a '*' is the
 * window (w) or request size (B) the run fills in. */
#define BOTH(figure, anchor, unit, higher, run) \
    {figure "/shm", anchor, unit, higher, run, 0}, {figure "/tcp", anchor, unit, higher, run, 0}
#define BOTH_SWEEP(figure, param, anchor, unit, higher, run) \
    {figure "/shm/" param, anchor, unit, higher, run, 0}, {figure "/tcp/" param, anchor, unit, higher, run, 0}
static const dsm_bench_case_t cases[] = {
    /* throughput at W = 64 per client, both nodes' threads clients (headline) */
    BOTH("echo_vs_naive_rpc", NAIVE_ANCHOR, "Mops/s", 1, ECHO),
    BOTH("echo_vs_windowed_rpc", "windowed AM RPC, 2 clients, 64 outstanding each", "Mops/s", 1, ECHO),
    /* the windowed RPC's ns per request against its prediction: 2 messages
     * at the rate of a stream of plain AMs on its nodes, or RTT/(2 x 64) if
     * longer */
    BOTH("windowed_rpc_predicted", "predicted: max(2 msgs at the AM stream's rate, RTT/(2x64)), same run",
         "ns/req", 0, ECHO),
    BOTH("echo_one_client", NAIVE_ANCHOR, "Mops/s", 1, ECHO),
    /* throughput and p99.9 latency (issue -> completion) vs outstanding requests */
    BOTH_SWEEP("echo", "w=*", NAIVE_ANCHOR, "Mops/s", 1, ECHO),
    BOTH_SWEEP("echo_p999", "w=*", NAIVE_ANCHOR, "us", 0, ECHO),
    /* throughput vs request size, 8 B-4 KiB: requests over a slot (960 B)
     * go by message, the step the thesis shows */
    BOTH_SWEEP("size", "B=*", NAIVE_ANCHOR, "Mops/s", 1, ECHO),
    /* Gossamer's echo, one client at W = 64, against Open MPI's with the
     * same window and size (mpi_anchor.c) */
    {"echo_vs_mpi/tcp", MPI_ANCHOR, "Mops/s", 1, ECHO, 0},
    BOTH("sssp_vs_naive_rpc", "same algorithm, 1 AM per relaxation", "s", 0, SSSP),
    BOTH("sssp_vs_single", "Dijkstra, one thread", "s", 0, SSSP),
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

int main(int argc, char **argv)
{
    const char *scale_arg = NULL, *no_echo = NULL, *node_progress = "blocking", *json;
    /* --node-progress: Gossamer's nodes' progress threads (the anchors' stay
     * as they are), to compare the modes on the echo */
    const dsm_bench_flag_t flags[] = {{"--sssp-scale", "N (0: no SSSP)", &scale_arg},
                                      {"--no-echo", NULL, &no_echo},
                                      {"--node-progress", "blocking|busy|hybrid|adaptive|auto", &node_progress}};
    dsm_bench_opts_t o;
    int done = dsm_bench_parse(argc, argv, cases, N_CASES, flags, 3, &o);
    if (done >= 0)
        return done;
    if (dsm_progress_parse(node_progress, &gossamer_node_progress) != DSM_OK) {
        fprintf(stderr, "dsm-bench-gossamer: --node-progress takes blocking, busy, hybrid, adaptive or auto, not %s\n",
                node_progress);
        return 2;
    }
    int quick = o.quick, only = o.transport_set ? (int)o.transport : -1;
    int echo = !no_echo && dsm_bench_run_wanted(&o, cases, N_CASES, ECHO);
    long sssp_scale = -1;
    json = o.json;
    if (scale_arg) {
        char *end;
        sssp_scale = strtol(scale_arg, &end, 10);
        if (*end || sssp_scale < 0 || sssp_scale > 22) {
            fprintf(stderr, "dsm-bench-gossamer: --sssp-scale takes 0 (no SSSP) to 22, not %s\n", scale_arg);
            return 2;
        }
    }
    if (!dsm_bench_run_wanted(&o, cases, N_CASES, SSSP))
        sssp_scale = 0;
    /* UCX's shm FIFO (64 entries by default) sized for the windowed RPC's
     * 2 x 64 messages in flight to a node: at 64 its sends queued in UCX's
     * pending queue. Every fabric of the run gets the same (a size from the
     * environment is kept); not for tcp alone, where UCX would warn that
     * nothing used them. */
    if (only != (int)DSM_TRANSPORT_TCP) {
        setenv("UCX_POSIX_FIFO_SIZE", "256", 0);
        setenv("UCX_SYSV_FIFO_SIZE", "256", 0);
    }
    dsm_set_log_level(1);
    if (dsm_deleg_register("bench.gossamer.echo", echo_fn) != DSM_OK) die("register", DSM_ERR_EXISTS);
    dsm_report_t rep;
    dsm_report_init(&rep, "gossamer");
    dsm_report_env(&rep, "cpus", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    dsm_report_env(&rep, "threads_per_node", "1");
    dsm_report_env_str(&rep, "node_progress", dsm_progress_name(gossamer_node_progress));
    dsm_report_env(&rep, "quick", "%d", quick);
    if (o.only)
        dsm_report_env_str(&rep, "only", o.only); /* the parts measured: those with a figure named so */
    int reps = o.runs ? (o.runs < 16 ? o.runs : 16) : quick ? 3 : 5;
    size_t n = quick ? 8000 : 200000;
    /* the headline's runs: long enough that a scheduler hiccup is a small
     * part of them even with --quick */
    size_t n_head = quick ? 30000 : 200000;
    dsm_report_env(&rep, "requests_per_run", "%zu", n);
    dsm_report_env(&rep, "headline_requests_per_client", "%zu", n_head);
    dsm_report_env_str(&rep, "echo_headline",
                       "both nodes' threads are clients and servers (thesis 3.3.1), 64 outstanding per client, "
                       "32-byte requests, up to 20 per slot write; naive RPC: 1 client thread, 1 busy server "
                       "thread, 1 outstanding; windowed RPC: both nodes' threads clients and servers, 64 "
                       "outstanding per client, one AM per request and per reply, each thread polling its own "
                       "worker; no clock read per request on any side; echo_one_client: node 0's thread the "
                       "only client");
    dsm_report_env_str(&rep, "tcp_slot_write",
                       "over tcp Gossamer's slot write is an emulated one-sided write: one active message that "
                       "the target's handler applies (copy, then the flag), not RDMA; over shm a store into "
                       "the peer's mapped memory");
    dsm_report_env(&rep, "repetitions", "%d", reps);
    dsm_report_env_str(&rep, "ucx_shm_fifo_size", getenv("UCX_POSIX_FIFO_SIZE"));
    dsm_report_print_header(stdout);
    const dsm_transport_t trs[2] = {DSM_TRANSPORT_SHM, DSM_TRANSPORT_TCP};
    for (int ti = 0; ti < 2; ti++) {
        if (only >= 0 && (int)trs[ti] != only) continue;
        if (echo) echo_figures(&rep, trs[ti], n, n_head, reps, quick);
        if (sssp_scale != 0) gossamer_sssp(&rep, trs[ti], sssp_scale < 0 ? (quick ? 11u : 16u) : (unsigned)sssp_scale, 5);
    }
    int rc = 0;
    if (json && dsm_report_write_json(&rep, json) != 0) rc = 1;
    dsm_report_free(&rep);
    return rc;
}
