/* dsm-bench-gossamer: delegation across nodes (Gossamer, thesis §3.3.1-3.3.2)
 * against a naive RPC on the same fabric, in the same run.
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
 *
 * Anchor, the naive RPC: one active message per request and one per reply
 * on the same fabric, and as many polling threads as Gossamer's run has
 * (one per node): node 1's handler answers each request in place
 * (dsm_fabric_am_reply) on a busy-polling progress thread, and the client
 * thread waits for its reply polling node 0's worker (dsm_fabric_am_request),
 * one request outstanding: the fabric's AM round trip, with no batching and
 * no thread hand-off. What Gossamer's slots are measured against.
 *
 * Why not W outstanding: with the fabric's public API a handler cannot send
 * a plain message without blocking, nor can a thread poll its worker between
 * sends, so an asynchronous naive RPC needs a server thread beside the
 * handler and leaves delivery to the progress threads. The first anchor did
 * that (blocking progress, a yield-spinning server and client): every
 * message woke a sleeping progress thread through UCX's shm signal (a
 * sendto + epoll_wait return), the stages fell into lock-step (each caught
 * up and slept again before the next message, so W did not batch), and the
 * round trip cost four scheduler hand-offs, ~100 us on 2 cores: 9.5 kops/s
 * at W = 64 against a 0.44 us AM. Sleeping on eventfds instead of yield
 * spins made it 5x worse, busy progress with the spinners added 4 spinning
 * threads to 2 cores. The naive RPC runs on its own two nodes, created for
 * each measurement, so its busy progress thread never competes with
 * Gossamer's runs.
 *
 * Figures (each the median over R interleaved repetitions, Gossamer then
 * naive RPC, so drift on the shared machine hits both alike):
 *   echo_vs_naive_rpc/{shm,tcp}       throughput at W = 64 per client, both
 *                                     nodes' threads clients (headline)
 *   echo_one_client/{shm,tcp}         the same with one client
 *   echo/{shm,tcp}/w=N                throughput vs outstanding requests
 *   echo_p999/{shm,tcp}/w=N           p99.9 latency (issue -> completion)
 *   size/{shm,tcp}/B=N                throughput vs request size, 8 B-4 KiB:
 *                                     requests over a slot (960 B) go by
 *                                     message, the step the thesis shows
 *   echo_vs_mpi/tcp                   Gossamer's echo at W = 64 against Open
 *                                     MPI's (mpi_anchor.c, dsm-mpi-echo)
 *   sssp_vs_naive_rpc/TR, sssp_vs_single/TR  SSSP (sssp.c)
 * On a machine shared with other work the runtimes' spinning threads wait
 * for cores and every figure swings: read them as indicative. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/gossamer/gossamer.h"
#include "bench/report.h"
#include "dsm/coord.h"
#include "dsm/deleg.h"
#include "dsm/log.h"
#include "dsm/node.h"
#include "util/clock.h"

enum { H_REQ = DSM_AM_USER_FIRST, MAX_PAYLOAD = 4096 };
#define die gossamer_die


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
    int both;    /* Gossamer: both nodes' threads are clients (n each) */
    int latency; /* time every request (the p99.9 figures); the throughput
                  * headlines read no clock per request, on either side */
    double secs;
    double p999_us;
    /* the fabric's counters over the run, both nodes (Gossamer's runs):
     * threads that waited on their own (a send that did not complete at
     * once), and the progress threads' parks (standing down ~1 ms for such a
     * waiter: messages wait meanwhile) and wake-ups */
    uint64_t waits, parks, wakeups;
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

static void naive_measure(dsm_transport_t tr, run_t *r)
{
    gossamer_cluster_t c;
    gossamer_cluster_start(&c, tr, 2, 1u << 1, 0);
    dsm_status_t st = dsm_fabric_am_register(dsm_node_fabric(c.k.node[1]), H_REQ, naive_req_handler,
                                             dsm_node_fabric(c.k.node[1]));
    if (st != DSM_OK) die("naive handler", st);
    dsm_fabric_t *f = dsm_node_fabric(c.k.node[0]);
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

/* Gossamer's client on node i: its main fiber keeps `window` apply_then in
 * flight to the other node's thread (after WARMUP untimed ones). */
typedef struct gclient {
    bench_cluster_t *c;
    run_t *r;
    int node;
    uint64_t *t_issue;
    double *lat;
    size_t done, issued;
    uint64_t t0, t1; /* first timed issue, last completion */
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
    r->waits = r->parks = r->wakeups = 0;
    for (int i = 0; i < 2; i++) {
        r->waits += after[i].waits - before[i].waits;
        r->parks += after[i].progress_parks - before[i].progress_parks;
        r->wakeups += after[i].progress_wakeups - before[i].progress_wakeups;
    }
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
    c->node[0] = c->g.k.node[0];
    c->node[1] = c->g.k.node[1];
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

/* R interleaved repetitions of (Gossamer, naive); medians of each. */
static void pair(bench_cluster_t *c, size_t n, size_t window, size_t size, int both, int latency, int reps,
                 double *g_mops, double *n_mops, double *g_p999, double *n_p999, char *runs, size_t runs_cap)
{
    if (runs && runs_cap) runs[0] = 0;
    double gt[16], nt[16], gl[16], nl[16];
    for (int i = 0; i < reps; i++) {
        run_t g = {.n = n, .window = window, .size = size, .both = both, .latency = latency}, v = g;
        gossamer_measure(c, &g);
        naive_measure(c->tr, &v);
        gt[i] = (double)n * (both ? 2 : 1) / g.secs / 1e6;
        if (runs) {
            size_t at = strlen(runs);
            snprintf(runs + at, runs_cap - at, "%s%.3g Mops/s (waits %llu, parks %llu, wakeups %llu)", i ? "; " : "",
                     gt[i], (unsigned long long)g.waits, (unsigned long long)g.parks,
                     (unsigned long long)g.wakeups);
        }
        nt[i] = (double)n / v.secs / 1e6;
        gl[i] = g.p999_us;
        nl[i] = v.p999_us;
    }
    *g_mops = dsm_report_median(gt, (size_t)reps);
    *n_mops = dsm_report_median(nt, (size_t)reps);
    *g_p999 = dsm_report_median(gl, (size_t)reps);
    *n_p999 = dsm_report_median(nl, (size_t)reps);
}

/* echo_vs_mpi/tcp: Open MPI's echo with the same window (64) and size,
 * interleaved with Gossamer's; reported as not run if MPI is missing. */
static void mpi_figure(dsm_report_t *rep, bench_cluster_t *c, size_t n, int reps)
{
    double gm[16], mm[16], ml;
    int ok = 1;
    for (int r = 0; r < reps && ok; r++) {
        run_t gr = {.n = n, .window = 64, .size = 32};
        gossamer_measure(c, &gr);
        gm[r] = (double)n / gr.secs / 1e6;
        ok = gossamer_mpi_echo(n, 64, 32, &mm[r], &ml) == 0;
    }
    if (ok) {
        gossamer_emit(rep, "echo_vs_mpi/tcp", dsm_report_median(gm, (size_t)reps), "Mops/s",
                      "Open MPI send/recv, w=64", dsm_report_median(mm, (size_t)reps), 1);
    } else {
        fprintf(stderr, "dsm-bench-gossamer: no Open MPI anchor (dsm-mpi-echo or mpirun missing or failed): "
                        "echo_vs_mpi/tcp not reported\n");
        dsm_report_env_str(rep, "echo_vs_mpi", "not run: dsm-mpi-echo or mpirun missing or failed");
    }
}

int main(int argc, char **argv)
{
    int quick = 0, only = -1, echo = 1;
    long sssp_scale = -1;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--sssp-scale") && i + 1 < argc) {
            char *end;
            sssp_scale = strtol(argv[++i], &end, 10);
            if (*end || sssp_scale < 0 || sssp_scale > 22) {
                fprintf(stderr, "dsm-bench-gossamer: --sssp-scale takes 0 (no SSSP) to 22, not %s\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--no-echo")) echo = 0;
        else if (!strcmp(argv[i], "--transport") && i + 1 < argc) {
            dsm_transport_t t;
            if (dsm_transport_parse(argv[++i], &t) != DSM_OK) return 2;
            only = (int)t;
        } else {
            fprintf(stderr, "usage: %s [--quick] [--json PATH] [--transport shm|tcp] [--sssp-scale N] [--no-echo]\n"
                            "  --sssp-scale N  SSSP graph of 2^N vertices (default 16, 11 with --quick; 0: none)\n"
                            "  --no-echo       only the SSSP figures\n", argv[0]);
            return 2;
        }
    }
    dsm_set_log_level(1);
    if (dsm_deleg_register("bench.gossamer.echo", echo_fn) != DSM_OK) die("register", DSM_ERR_EXISTS);
    dsm_report_t rep;
    dsm_report_init(&rep, "gossamer");
    dsm_report_env(&rep, "cpus", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    dsm_report_env(&rep, "threads_per_node", "1");
    dsm_report_env(&rep, "quick", "%d", quick);
    int reps = quick ? 3 : 5;
    size_t n = quick ? 8000 : 200000;
    /* the headline's runs: long enough that a scheduler hiccup is a small
     * part of them even with --quick */
    size_t n_head = quick ? 30000 : 200000;
    size_t windows_full[] = {1, 4, 16, 64, 256}, windows_quick[] = {1, 16, 64};
    size_t *windows = quick ? windows_quick : windows_full;
    size_t nwin = quick ? 3 : 5;
    size_t sizes_full[] = {8, 32, 128, 512, 896, 1024, 2048, 4096}, sizes_quick[] = {32, 896, 1024, 4096};
    size_t *sizes = quick ? sizes_quick : sizes_full;
    size_t nsizes = quick ? 4 : 8;
    dsm_report_env(&rep, "requests_per_run", "%zu", n);
    dsm_report_env(&rep, "headline_requests_per_client", "%zu", n_head);
    dsm_report_env_str(&rep, "echo_headline",
                       "both nodes' threads are clients and servers (thesis 3.3.1), 64 outstanding per client, "
                       "32-byte requests, up to 20 per slot write; naive RPC: 1 client thread, 1 busy server "
                       "thread, 1 outstanding; no clock read per request on either side; echo_one_client: node "
                       "0's thread the only client");
    dsm_report_env(&rep, "repetitions", "%d", reps);
    dsm_report_print_header(stdout);
    const dsm_transport_t trs[2] = {DSM_TRANSPORT_SHM, DSM_TRANSPORT_TCP};
    for (int ti = 0; ti < 2; ti++) {
        if (only >= 0 && (int)trs[ti] != only) continue;
        if (echo) {
            const char *tn = dsm_transport_name(trs[ti]);
            bench_cluster_t c;
            cluster_start(&c, trs[ti]);
            char name[96];
            double g, v, gl, vl;
            /* The headline, as the thesis measures its echo (§3.3.1): every
             * thread is client and server, 32-byte asynchronous requests,
             * each client keeps 64 outstanding (its fiber yields when the
             * window is full), so a slot write carries a full batch (20
             * requests of 48 bytes in 960). The naive RPC on the same two
             * cores: one client thread, one busy server thread, one
             * outstanding. */
            char runs[1024];
            pair(&c, n_head, 64, 32, 1, 0, reps, &g, &v, &gl, &vl, runs, sizeof runs);
            snprintf(name, sizeof name, "echo_vs_naive_rpc/%s", tn);
            gossamer_emit(&rep, name, g, "Mops/s", "naive AM RPC (1 outstanding)", v, 1);
            /* each repetition's Gossamer run with the fabric's counters: a
             * slow run with parks is messages waiting for a parked progress
             * thread (over tcp) */
            snprintf(name, sizeof name, "echo_runs_%s", tn);
            dsm_report_env_str(&rep, name, runs);
            printf("  (Gossamer's runs: %s)\n", runs);
            /* the same with node 0's thread the only client */
            pair(&c, n_head, 64, 32, 0, 0, reps, &g, &v, &gl, &vl, NULL, 0);
            snprintf(name, sizeof name, "echo_one_client/%s", tn);
            gossamer_emit(&rep, name, g, "Mops/s", "naive AM RPC (1 outstanding)", v, 1);
            if (trs[ti] == DSM_TRANSPORT_TCP) mpi_figure(&rep, &c, n, reps);
            for (size_t wi = 0; wi < nwin; wi++) {
                size_t w = windows[wi];
                pair(&c, n / (w < 4 ? 8 : w < 64 ? 2 : 1), w, 32, 0, 1, reps, &g, &v, &gl, &vl, NULL, 0);
                snprintf(name, sizeof name, "echo/%s/w=%zu", tn, w);
                gossamer_emit(&rep, name, g, "Mops/s", "naive AM RPC (1 outstanding)", v, 1);
                snprintf(name, sizeof name, "echo_p999/%s/w=%zu", tn, w);
                gossamer_emit(&rep, name, gl, "us", "naive AM RPC (1 outstanding)", vl, 0);
            }
            for (size_t si = 0; si < nsizes; si++) {
                size_t b = sizes[si];
                pair(&c, n / (b > 900 ? 16 : 4), 64, b, 0, 0, quick ? 1 : 3, &g, &v, &gl, &vl, NULL, 0);
                snprintf(name, sizeof name, "size/%s/B=%zu", tn, b);
                gossamer_emit(&rep, name, g, "Mops/s", "naive AM RPC (1 outstanding)", v, 1);
            }
            cluster_stop(&c);
        }
        if (sssp_scale != 0) gossamer_sssp(&rep, trs[ti], sssp_scale < 0 ? (quick ? 11u : 16u) : (unsigned)sssp_scale, 3);
    }
    int rc = 0;
    if (json && dsm_report_write_json(&rep, json) != 0) rc = 1;
    dsm_report_free(&rep);
    return rc;
}
