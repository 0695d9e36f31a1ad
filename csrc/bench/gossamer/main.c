/* dsm-bench-gossamer: delegation across nodes (Gossamer, thesis §3.3.1-3.3.2)
 * against a naive RPC on the same fabric, in the same run.
 *
 * Setup: a coordinator and two nodes in this process, over shm and then tcp
 * (loopback); each node runs a delegation runtime of one thread (2 cores:
 * one thread per node), attached to it. The client (node 0) keeps W echo
 * requests outstanding against a trust whose trustee is node 1's thread:
 * async apply_then with a 32-byte environment, the closure returns it.
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
 *   echo_vs_naive_rpc/{shm,tcp}       throughput at W = 64 (headline)
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
    dsm_deleg_trust_t echo; /* on node 0, trustee node 1 thread 0 */
    dsm_deleg_trust_t owner;
} bench_cluster_t;

static uint64_t server_obj;

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
    double secs;
    double p999_us;
} run_t;

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
    uint64_t t0 = dsm_now_ns();
    for (uint64_t i = 0; i < r->n; i++) {
        uint64_t t = dsm_now_ns();
        size_t got = 0;
        st = dsm_fabric_am_request(f, 1, H_REQ, msg, r->size, reply, r->size, &got, 0);
        if (st == DSM_OK && got != r->size) st = DSM_ERR_PROTO;
        if (st != DSM_OK) die("naive request", st);
        lat[i] = (double)(dsm_now_ns() - t) / 1e3;
    }
    r->secs = (double)(dsm_now_ns() - t0) / 1e9;
    r->p999_us = p999(lat, r->n);
    free(lat);
    free(msg);
    free(reply);
    gossamer_cluster_stop(&c);
}

/* Gossamer's client: one fiber keeps `window` apply_then in flight. */
typedef struct gclient {
    bench_cluster_t *c;
    run_t *r;
    uint64_t *t_issue;
    double *lat;
    size_t done, issued;
    dsm_status_t err;
} gclient_t;

static gclient_t *gc;

static void g_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)ret;
    uint64_t id = (uint64_t)(uintptr_t)arg;
    if (st != DSM_OK || len != gc->r->size) gc->err = st != DSM_OK ? st : DSM_ERR_PROTO;
    gc->lat[id] = (double)(dsm_now_ns() - gc->t_issue[id]) / 1e3;
    gc->done++;
}

static void g_main(void *arg, unsigned worker)
{
    gclient_t *g = arg;
    if (!g || worker != 0) return;
    static uint8_t payload[MAX_PAYLOAD];
    memset(payload, 0x5a, sizeof payload);
    while (g->done < g->r->n) {
        while (g->issued < g->r->n && g->issued - g->done < g->r->window) {
            uint64_t id = g->issued++;
            g->t_issue[id] = dsm_now_ns();
            dsm_status_t st = dsm_deleg_apply_then(&g->c->echo, echo_fn, NULL, 0, payload, g->r->size, g->r->size,
                                                   g_then, (void *)(uintptr_t)id);
            if (st != DSM_OK) {
                g->err = st;
                return;
            }
        }
        /* Window full: block until one completes, so that the thread idles
         * as the naive client does rather than spinning through the fiber
         * (the thesis's client yields when its queue is full). */
        if (g->done < g->r->n) dsm_deleg_wait_outstanding(g->issued < g->r->n ? g->r->window - 1 : 0);
    }
}

static void gossamer_measure(bench_cluster_t *c, run_t *r)
{
    gclient_t g = {.c = c, .r = r};
    g.t_issue = calloc(r->n, sizeof *g.t_issue);
    g.lat = calloc(r->n, sizeof *g.lat);
    gc = &g;
    void *args[2] = {&g, NULL};
    uint64_t t0 = dsm_now_ns();
    for (int i = 0; i < 2; i++)
        if (dsm_deleg_rt_start(c->rt[i], g_main, args[i]) != DSM_OK) die("rt start", DSM_ERR_STATE);
    /* the client's own completion, not the runtimes' termination waves */
    /* sleep, not spin: this thread is no part of either side */
    while (__atomic_load_n(&g.done, __ATOMIC_ACQUIRE) < r->n && g.err == DSM_OK) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    r->secs = (double)(dsm_now_ns() - t0) / 1e9;
    for (int i = 0; i < 2; i++) dsm_deleg_rt_join(c->rt[i]);
    if (g.err != DSM_OK) die("gossamer echo", g.err);
    r->p999_us = p999(g.lat, r->n);
    free(g.t_issue);
    free(g.lat);
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
    if ((st = dsm_deleg_entrust(c->rt[1], 0, &server_obj, NULL, 0, &c->owner)) != DSM_OK) die("entrust", st);
    uint8_t wire[DSM_DELEG_TRUST_WIRE];
    if ((st = dsm_deleg_trust_export(&c->owner, wire, sizeof wire)) != DSM_OK) die("export", st);
    if ((st = dsm_deleg_trust_import(c->rt[0], wire, sizeof wire, &c->echo)) != DSM_OK) die("import", st);
}

static void drop_main(void *arg, unsigned worker)
{
    dsm_deleg_trust_t *t = arg;
    if (t && worker == 0) dsm_deleg_trust_drop(t);
}

static void cluster_stop(bench_cluster_t *c)
{
    for (int i = 0; i < 2; i++) dsm_deleg_rt_start(c->rt[i], drop_main, i == 0 ? (void *)&c->echo : &c->owner);
    for (int i = 0; i < 2; i++) dsm_deleg_rt_join(c->rt[i]);
    gossamer_cluster_stop(&c->g);
}

/* ---- figures -------------------------------------------------------------------- */

/* R interleaved repetitions of (Gossamer, naive); medians of each. */
static void pair(bench_cluster_t *c, size_t n, size_t window, size_t size, int reps, double *g_mops, double *n_mops,
                 double *g_p999, double *n_p999)
{
    double gt[16], nt[16], gl[16], nl[16];
    for (int i = 0; i < reps; i++) {
        run_t g = {.n = n, .window = window, .size = size}, v = g;
        gossamer_measure(c, &g);
        naive_measure(c->tr, &v);
        gt[i] = (double)n / g.secs / 1e6;
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
    size_t windows_full[] = {1, 4, 16, 64, 256}, windows_quick[] = {1, 16, 64};
    size_t *windows = quick ? windows_quick : windows_full;
    size_t nwin = quick ? 3 : 5;
    size_t sizes_full[] = {8, 32, 128, 512, 896, 1024, 2048, 4096}, sizes_quick[] = {32, 896, 1024, 4096};
    size_t *sizes = quick ? sizes_quick : sizes_full;
    size_t nsizes = quick ? 4 : 8;
    dsm_report_env(&rep, "requests_per_run", "%zu", n);
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
            /* the headline: 32-byte echo, 64 outstanding */
            pair(&c, n, 64, 32, reps, &g, &v, &gl, &vl);
            snprintf(name, sizeof name, "echo_vs_naive_rpc/%s", tn);
            gossamer_emit(&rep, name, g, "Mops/s", "naive AM RPC (1 outstanding)", v, 1);
            if (trs[ti] == DSM_TRANSPORT_TCP) mpi_figure(&rep, &c, n, reps);
            for (size_t wi = 0; wi < nwin; wi++) {
                size_t w = windows[wi];
                pair(&c, n / (w < 4 ? 8 : w < 64 ? 2 : 1), w, 32, reps, &g, &v, &gl, &vl);
                snprintf(name, sizeof name, "echo/%s/w=%zu", tn, w);
                gossamer_emit(&rep, name, g, "Mops/s", "naive AM RPC (1 outstanding)", v, 1);
                snprintf(name, sizeof name, "echo_p999/%s/w=%zu", tn, w);
                gossamer_emit(&rep, name, gl, "us", "naive AM RPC (1 outstanding)", vl, 0);
            }
            for (size_t si = 0; si < nsizes; si++) {
                size_t b = sizes[si];
                pair(&c, n / (b > 900 ? 16 : 4), 64, b, quick ? 1 : 3, &g, &v, &gl, &vl);
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
