/* dsm-bench-fabric: latency of get / put / fetch-add / cas / AM request-reply,
 * the message rates of get, put and AM, and the bandwidth of 1 MiB gets
 * and puts between two processes over shm and tcp, each printed beside
 * ucx_perftest measuring its anchor in the same run.
 *
 * Setup. The initiator (this process) and the target (a forked child) are
 * pinned to different cores, as the two ucx_perftest processes are (-c). The
 * target's region is allocated by the fabric (dsm_fabric_region_alloc), like
 * ucx_perftest's buffers, so over shm the initiator maps it directly. The
 * initiator runs its fabric in blocking mode and spins in the blocking
 * helpers. The target's progress thread busy-polls, as ucx_perftest's server
 * does: over tcp every op is a message the target must answer; over shm the
 * one-sided ops are loads/stores/CPU atomics on the mapped region and need no
 * target CPU at all (measured: same figures with a blocking target), but AM
 * would pay a wake-up (0.69 vs 0.55 us round trip); --target-progress
 * blocking measures that. They meet over a socketpair: worker address, region
 * base and packed key each way.
 *
 * Trust on a small shared machine: every figure is measured R times, ours and
 * its anchor interleaved (which side runs first alternates), with the
 * target stopped (SIGSTOP) while ucx_perftest runs so that it does not steal
 * a core. Ours: per repetition, the median per-op latency, or the average
 * rate (see measure()). ucx_perftest: its median per-iteration latency (50th
 * percentile column), or its average message rate. Reported: the median
 * over the R repetitions of each. Over shm a cache line's round trip
 * between the two cores is measured before and after each repetition of
 * each figure (core_rtt.h): on a virtual machine the host moves it between
 * two states several times apart within a run, and ours and the anchor
 * with it; the JSON keeps it beside the repetitions.
 *
 * The figures and their anchors: the case table below (--list prints it).
 *
 * Asked for by name only (--only progress, as it starts two busy processes
 * on the host for a while): which progress mode a tcp target should run,
 * adaptive beside the better of hybrid and blocking, idle and loaded
 * (progress.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/busy.h"
#include "bench/fabric/pair.h"
#include "bench/fabric/progress.h"
#include "bench/fabric/ucx_floor.h"
#include "bench/core_rtt.h"
#include "bench/driver.h"
#include "bench/report.h"
#include "dsm/fabric.h"
#include "util/clock.h"

/* Rates: get and put keep up to WINDOW operations outstanding (WINDOW
 * issued between dsm_fabric_batch_begin and _end, then all waited for; a put
 * window ends with a flush, so every put counted is remotely complete, as
 * every get is); ucx_perftest runs with -O WINDOW. AM: fire-and-forget posts to a handler that does nothing, each
 * AM_GROUP of them closed by a request/reply through the same endpoint, so
 * every message counted was handled. Bandwidth: the same with BW_WINDOW
 * operations of BW_SIZE bytes, all on one BW_SIZE buffer each side, as
 * ucx_perftest allocates its buffers (the message size per thread): four
 * buffers would measure this host's memory against the anchor's cache. */
enum {
    BW_SIZE = 1 << 20, BW_WINDOW = 4, REGION = BW_SIZE, H_ECHO = DSM_AM_USER_FIRST, H_SINK,
    WINDOW = 32, AM_GROUP = 256, MAX_REPS = 15
};

static int cpu_initiator = 0, cpu_target = 1;

static uint8_t scratch[REGION];   /* initiator-local buffers */
static uint8_t reply[REGION];

static void die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-fabric: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

typedef struct endpoint_info {
    dsm_fabric_t *f;
    dsm_region_t *region;
    uint8_t *mem;
} endpoint_info_t;

/* Both sides: publish address + region, learn the other's, connect. */
static endpoint_info_t meet(int fd, dsm_transport_t tr, dsm_progress_mode_t mode, uint32_t my_rank)
{
    endpoint_info_t e;
    /* A call's timeout here only catches a hang: on a crowded host a
     * process can wait seconds for a core, which is the run's noise, not a
     * failure (the default 5 s ended a test's bench run under load 20). */
    dsm_fabric_config_t cfg = {.transport = tr, .progress = mode,
                               .net_device = tr == DSM_TRANSPORT_TCP ? "lo" : NULL, .op_timeout_ms = 60000};
    dsm_status_t st = dsm_fabric_create(&cfg, &e.f);
    if (st != DSM_OK)
        die("fabric create", st);
    dsm_fabric_set_rank(e.f, my_rank);
    if ((st = dsm_fabric_region_alloc(e.f, REGION, &e.region)) != DSM_OK)
        die("region alloc", st);
    e.mem = dsm_fabric_region_base(e.region);
    /* Every buffer written once: a page never written reads as the kernel's
     * one zero page, and a copy from it reads 4 KiB of cache, not the buffer. */
    memset(e.mem, 0, REGION);
    memset(scratch, 0xa5, sizeof scratch);
    dsm_bench_publish(fd, e.f, e.region);
    uint32_t n1, n2, n3;
    void *raddr = dsm_bench_recv_blob(fd, &n1), *rkey = dsm_bench_recv_blob(fd, &n2), *rbase = dsm_bench_recv_blob(fd, &n3);
    uint64_t peer_base;
    memcpy(&peer_base, rbase, 8);
    uint32_t peer = 1 - my_rank;
    if ((st = dsm_fabric_connect(e.f, peer, raddr, n1)) != DSM_OK)
        die("connect", st);
    if ((st = dsm_fabric_remote_region_add(e.f, peer, 0, peer_base, REGION, rkey, n2)) != DSM_OK)
        die("remote region", st);
    free(raddr);
    free(rkey);
    free(rbase);
    return e;
}

static void sink_handler(void *ctx, const dsm_am_msg_t *msg)
{
    (void)ctx, (void)msg;
}

static void target_main(int fd, dsm_transport_t tr, dsm_progress_mode_t mode)
{
    dsm_bench_pin(cpu_target);
    endpoint_info_t e = meet(fd, tr, mode, 1);
    dsm_fabric_am_register(e.f, H_ECHO, dsm_bench_echo_handler, e.f);
    dsm_fabric_am_register(e.f, H_SINK, sink_handler, NULL);
    char c;
    if (write(fd, "r", 1) != 1)
        exit(1);
    /* serve until the initiator closes the socket */
    while (read(fd, &c, 1) == 1)
        ;
    dsm_fabric_region_unregister(e.region);
    dsm_fabric_destroy(e.f);
    exit(0);
}

/* --------------------------------------------------------- our measurements */

/* OP_AM_FLOOR: am over shm against raw UCX, measured with the am latency
 * figure of its size just before it; OP_AM_FLOOR_DELIVERING the same against
 * raw UCX whose two sides copy out what they receive, after the floor;
 * OP_AM_RATE_FLOOR the am rate just before it against raw UCX's. */
/* OP_*_RATE_BATCHED: the same window issued between dsm_fabric_batch_begin
 * and _end (over tcp its requests leave as one message, its replies too).
 * OP_*_BW: windows of BW_WINDOW, reported in GB/s. */
typedef enum {
    OP_GET, OP_PUT, OP_FADD, OP_CAS, OP_AM, OP_GET_RATE, OP_AM_FLOOR, OP_PUT_RATE, OP_AM_RATE,
    OP_GET_RATE_BATCHED, OP_PUT_RATE_BATCHED, OP_AM_FLOOR_DELIVERING,
    OP_PROGRESS,   /* the progress comparison's figures (progress.c), arg its workload */
    OP_AM_RATE_FLOOR,
    OP_GET_BW, OP_PUT_BW,
    OP_GET_BW_UCX, OP_PUT_BW_UCX,   /* the same, against UCX's own get and put */
} op_t;
static const char *op_names[] = {"get", "put", "fadd", "cas", "am", "get", "am", "put", "am", "get", "put", "am",
                                 "progress", "am", "get", "put", "get", "put"};

static int op_is_bw(op_t op)
{
    return op == OP_GET_BW || op == OP_PUT_BW || op == OP_GET_BW_UCX || op == OP_PUT_BW_UCX;
}

/* Gets or puts issued in windows: the rates and the bandwidths. */
static int op_is_get_put_window(op_t op)
{
    return op == OP_GET_RATE || op == OP_PUT_RATE || op == OP_GET_RATE_BATCHED || op == OP_PUT_RATE_BATCHED ||
           op_is_bw(op);
}

static int op_is_rate(op_t op)
{
    return op_is_get_put_window(op) || op == OP_AM_RATE;
}

/* Operations one call of one_op does. */
static int op_count(op_t op)
{
    return op == OP_AM_RATE ? AM_GROUP : op_is_bw(op) ? BW_WINDOW : op_is_rate(op) ? WINDOW : 1;
}

/* Set by measure() for its timed groups: the am rate's posts are clocked
 * into it (ucx_floor.h), so that its figure can say where a message's
 * time goes on the sending side. */
static dsm_bench_post_clock_t *am_posts;

static dsm_status_t one_op(dsm_fabric_t *f, op_t op, size_t size, int i)
{
    uint64_t old;
    size_t rlen;
    dsm_status_t st = DSM_OK;
    switch (op) {
    case OP_GET:
        return dsm_fabric_get(f, 1, 0, 0, scratch, size);
    case OP_PUT:
        st = dsm_fabric_put(f, 1, 0, 0, scratch, size);
        return st == DSM_OK ? dsm_fabric_flush(f, 1) : st;
    case OP_FADD:
        return dsm_fabric_fetch_add(f, 1, 0, 64, 1, &old);
    case OP_CAS:
        return dsm_fabric_cas(f, 1, 0, 128, (uint64_t)i, (uint64_t)i + 1, &old);
    case OP_AM:
        return dsm_fabric_am_request(f, 1, H_ECHO, scratch, size, reply, sizeof reply, &rlen, 0);
    case OP_GET_RATE:
    case OP_PUT_RATE:
    case OP_GET_RATE_BATCHED:
    case OP_PUT_RATE_BATCHED:
    case OP_GET_BW:
    case OP_PUT_BW:
    case OP_GET_BW_UCX:
    case OP_PUT_BW_UCX: {
        dsm_op_t ops[WINDOW];
        int n = 0, get = strcmp(op_names[op], "get") == 0;
        int batched = op == OP_GET_RATE_BATCHED || op == OP_PUT_RATE_BATCHED, window = op_count(op);
        if (batched)
            dsm_fabric_batch_begin(f);
        for (; n < window && st == DSM_OK; n++) {
            size_t at = op_is_bw(op) ? 0 : (size_t)n * size;
            st = get ? dsm_fabric_get_nb(f, 1, 0, at, scratch + at, size, &ops[n])
                     : dsm_fabric_put_nb(f, 1, 0, at, scratch + at, size, &ops[n]);
        }
        if (batched)
            dsm_fabric_batch_end(f);
        for (int k = 0; k < n; k++) {
            dsm_status_t w = dsm_fabric_wait(&ops[k]);
            if (st == DSM_OK)
                st = w;
        }
        return st == DSM_OK && !get ? dsm_fabric_flush(f, 1) : st;
    }
    case OP_AM_RATE: {
        uint64_t t0 = am_posts ? dsm_now_ns() : 0, cpu0 = am_posts ? dsm_thread_cpu_ns() : 0;
        for (int k = 0; k < AM_GROUP && st == DSM_OK; k++)
            st = dsm_fabric_am_post(f, 1, H_SINK, scratch, size);
        if (am_posts)
            dsm_bench_post_clock_add(am_posts, t0, cpu0, AM_GROUP);
        return st == DSM_OK ? dsm_fabric_am_request(f, 1, H_ECHO, NULL, 0, reply, sizeof reply, &rlen, 0) : st;
    }
    default:
        return DSM_ERR_INVALID;
    }
}

/* One repetition: a warm-up of `group` x `groups` / 10 ops, then `groups`
 * timed groups of `group` ops each; returns the median over groups of the
 * group's mean µs per op. A rate (ops of op_count each) is all the ops over
 * all the time, as ucx_perftest's average message rate is: a stall is part
 * of a stream's rate, and a median over groups would drop ours while the
 * anchor keeps its own. This is ucx_perftest's
 * statistic (median per-iteration latency) with the clock read once per
 * group instead of once per op, so that a clock read (~20 ns) does not
 * swamp a 15 ns access; a group hit by a preemption is an outlier the median
 * ignores, as ucx_perftest's is. */
static double measure(endpoint_info_t *e, op_t op, size_t size, int group, int groups, dsm_bench_post_clock_t *posts)
{
    dsm_status_t st = DSM_OK;
    int seq = 0;
    for (int i = 0; i < group * (groups / 10 + 1) && st == DSM_OK; i++)
        st = one_op(e->f, op, size, seq++);
    am_posts = posts;
    double *v = malloc(sizeof(double) * (size_t)groups), total_us = 0;
    for (int g = 0; g < groups && st == DSM_OK; g++) {
        uint64_t t0 = dsm_now_ns();
        for (int i = 0; i < group && st == DSM_OK; i++)
            st = one_op(e->f, op, size, seq++);
        double dt = (double)(dsm_now_ns() - t0) / 1e3; /* us */
        total_us += dt;
        v[g] = dt / group;
    }
    am_posts = NULL;
    if (st != DSM_OK) {
        char what[48];
        snprintf(what, sizeof what, "%s of %zu bytes%s", op_names[op], size, op_is_rate(op) ? " (rate)" : "");
        die(what, st);
    }
    double m = op_is_rate(op) ? (double)group * groups * op_count(op) / (total_us / 1e6)
                              : dsm_report_median(v, (size_t)groups);
    free(v);
    return m;
}

/* ------------------------------------------------------------- ucx_perftest */

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(s, (struct sockaddr *)&a, &len) != 0) {
        if (s >= 0)
            close(s);
        return 20000 + getpid() % 10000;
    }
    int port = ntohs(a.sin_port);
    close(s);
    return port;
}

/* Is something listening on TCP `port`? Read from /proc/net/tcp rather than
 * probed with connect(), which the ucx_perftest server would take for its
 * client. */
static int port_listening(int port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL)
        return -1;
    char line[256];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned lport, st;
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x", &lport, &st) == 2 && (int)lport == port && st == 0x0A)
            found = 1;
    }
    fclose(f);
    return found;
}

/* Runs one ucx_perftest client/server pair, pinned like ours. Returns its
 * median latency in µs (50th percentile column) or, with `rate`, its average
 * message rate; < 0 if it could not run. */
static double perftest(const char *tls, const char *test, size_t size, int iters, int outstanding, int rate)
{
    char port[16], sz[32], n[32], w[32], out[16], cs[8], cc[8];
    int portnum = free_port();
    snprintf(port, sizeof port, "%d", portnum);
    snprintf(sz, sizeof sz, "%zu", size);
    snprintf(n, sizeof n, "%d", iters);
    snprintf(w, sizeof w, "%d", iters / 10 + 10);
    snprintf(out, sizeof out, "%d", outstanding);
    snprintf(cs, sizeof cs, "%d", cpu_target);
    snprintf(cc, sizeof cc, "%d", cpu_initiator);
    setenv("UCX_TLS", tls, 1);
    if (strcmp(tls, "tcp,self") == 0)
        setenv("UCX_NET_DEVICES", "lo", 1);
    else
        unsetenv("UCX_NET_DEVICES");

    pid_t server = fork();
    if (server == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl("/usr/bin/ucx_perftest", "ucx_perftest", "-p", port, "-c", cs, (char *)NULL);
        _exit(127);
    }
    double result = -1;
    for (int waited = 0; waited < 3000 && port_listening(portnum) == 0; waited += 2)
        usleep(2000);
    int pipefd[2];
    if (pipe(pipefd) == 0) {
        pid_t client = fork();
        if (client == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            dup2(pipefd[1], 1);
            dup2(devnull, 2);
            close(pipefd[0]);
            char *argv[] = {"ucx_perftest", "127.0.0.1", "-p", port, "-c", cc, "-t", (char *)test, "-s", sz,
                            "-n", n, "-w", w, "-f", outstanding ? "-O" : NULL, out, NULL};
            execv("/usr/bin/ucx_perftest", argv);
            _exit(127);
        }
        close(pipefd[1]);
        FILE *p = fdopen(pipefd[0], "r");
        char line[512];
        double v[8];
        while (p && fgets(line, sizeof line, p)) {
            long it;
            if (sscanf(line, " %ld %lf %lf %lf %lf %lf %lf %lf", &it, &v[0], &v[1], &v[2], &v[3], &v[4],
                       &v[5], &v[6]) == 8)
                result = rate ? v[5] : v[0];   /* msgrate average / latency 50th percentile */
        }
        if (p)
            fclose(p);
        waitpid(client, NULL, 0);
    }
    kill(server, SIGTERM);
    waitpid(server, NULL, 0);
    unsetenv("UCX_TLS");
    unsetenv("UCX_NET_DEVICES");
    return result;
}

/* ------------------------------------------------------------------ anchors */

/* An anchor is a sum of up to two ucx_perftest figures (times a factor);
 * its name is the case table's. */
typedef struct anchor_part {
    const char *test;
    size_t size;
    double mult;
} anchor_part_t;

typedef struct anchor {
    const char *name;
    anchor_part_t part[2];
    int nparts;
    int outstanding;
} anchor_t;

static anchor_t anchor_for(op_t op, size_t size, int tcp)
{
    anchor_t a = {0};
    switch (op) {
    case OP_GET:
    case OP_PUT:
    case OP_FADD:
    case OP_CAS:
        if (tcp) {
            /* request of `size` (put) or 8 bytes, reply of 8 bytes or `size` (get) */
            a.part[0] = (anchor_part_t){"tag_lat", 8, 1};
            a.part[1] = (anchor_part_t){"tag_lat", (op == OP_GET || op == OP_PUT) ? size : 8, 1};
            a.nparts = 2;
        } else {
            static const char *t[] = {"ucp_get", "ucp_put_lat", "ucp_fadd", "ucp_cswap"};
            a.part[0] = (anchor_part_t){t[op], op == OP_GET || op == OP_PUT ? size : 8, 1};
            a.nparts = 1;
        }
        break;
    case OP_AM:
        a.part[0] = (anchor_part_t){"ucp_am_lat", size, 2};
        a.nparts = 1;
        break;
    case OP_GET_RATE:
    case OP_PUT_RATE:
    case OP_GET_RATE_BATCHED:
    case OP_PUT_RATE_BATCHED:
        a.part[0] = (anchor_part_t){tcp                                                 ? "tag_bw"
                                    : op == OP_GET_RATE || op == OP_GET_RATE_BATCHED ? "ucp_get"
                                                                                      : "ucp_put_bw",
                                    size, 1};
        a.nparts = 1;
        a.outstanding = WINDOW;
        break;
    case OP_AM_RATE:
        a.part[0] = (anchor_part_t){"ucp_am_bw", size, 1};
        a.nparts = 1;
        a.outstanding = WINDOW;
        break;
    case OP_GET_BW:
    case OP_PUT_BW:   /* a rate, made GB/s with ours in measure_figure */
        a.part[0] = (anchor_part_t){tcp ? "ucp_am_bw" : op == OP_GET_BW ? "ucp_get" : "ucp_put_bw", size, 1};
        a.nparts = 1;
        a.outstanding = BW_WINDOW;
        break;
    case OP_GET_BW_UCX:
    case OP_PUT_BW_UCX:
        a.part[0] = (anchor_part_t){op == OP_GET_BW_UCX ? "ucp_get" : "ucp_put_bw", size, 1};
        a.nparts = 1;
        a.outstanding = BW_WINDOW;
        break;
    default:
        break;
    }
    return a;
}

/* Within one repetition a ucx_perftest figure shared by several anchors
 * (tag_lat 8 B) is measured once. */
typedef struct pt_cache {
    const char *test;
    size_t size;
    int outstanding;
    double value;
} pt_cache_t;

static double anchor_value(const anchor_t *a, const char *tls, int iters, int rate, pt_cache_t *cache, int *ncache)
{
    double sum = 0;
    for (int p = 0; p < a->nparts; p++) {
        const anchor_part_t *ap = &a->part[p];
        double v = -1;
        for (int c = 0; c < *ncache; c++)
            if (strcmp(cache[c].test, ap->test) == 0 && cache[c].size == ap->size &&
                cache[c].outstanding == a->outstanding)
                v = cache[c].value;
        if (v < 0) {
            v = perftest(tls, ap->test, ap->size, iters, a->outstanding, rate);
            if (v < 0)
                return -1;
            if (*ncache < 64)
                cache[(*ncache)++] = (pt_cache_t){ap->test, ap->size, a->outstanding, v};
        }
        sum += v * ap->mult;
    }
    return sum;
}

/* ------------------------------------------------------------- the figures */

/* Anchors. Over shm each op has its ucx_perftest test; a flushed put is
 * anchored on ucp_put_lat one way, since on coherent shared memory a flushed
 * put is one the peer can see. Over tcp UCX emulates get/put/fadd/cas as one
 * request and one reply, so the anchor is ucx_perftest tag_lat one way of the
 * request plus one way of the reply ("tag_lat RTT"): its own one-sided tests
 * over tcp give no usable figure (its ucp_get takes ~1 ms, its server not
 * answering emulated requests promptly). The get and put rates over tcp are
 * anchored on tag_bw's message rate of the op's size (one message; each of
 * our operations is two) for the same reason. Every rate's anchor runs with
 * the same window as ours (-O WINDOW). The tcp bandwidths stand against
 * UCX's active-message stream (one message per MiB, the transport's reach)
 * and, beside it, against UCX's own get and put over tcp, which with 1 MiB
 * in windows of 4 do give a figure: the same protocol as ours, a request
 * and a reply, as UCX emulates it. */
#define SHM_GET "ucx_perftest ucp_get"
#define SHM_PUT "ucx_perftest ucp_put_lat one-way"
#define TCP_RTT "ucx_perftest tag_lat RTT"
#define AM_RTT "ucx_perftest ucp_am_lat RTT"
#define FLOOR_ANCHOR "raw UCX as the fabric configures it (multi-threaded worker, wake-up, " \
                     "16-byte header, reply from the callback)"
#define FLOOR_DELIVERING_ANCHOR "raw UCX as the fabric configures it, each side copying out the payload it " \
                                "received (the target echoes it)"
#define FLOOR_RATE_ANCHOR "raw UCX as the fabric configures it (multi-threaded worker, wake-up, 16-byte header), " \
                          "the same groups of messages each closed by one answered"
#define LAT(op, sz, tr, anchor, run) {op "_" #sz "B_latency/" tr, anchor, "us", 0, run, sz}
#define RATE(op, sz, tr, anchor, unit, run) {op "_" #sz "B_rate/" tr, anchor " -O 32 msgrate", unit, 1, run, sz}
_Static_assert(WINDOW == 32, "the rate anchors' names say -O 32");
#define BW(op, tr, anchor, run) {op "_1MiB_bw/" tr, anchor " -O 4 -s 1MiB", "GB/s", 1, run, BW_SIZE}
_Static_assert(BW_WINDOW == 4 && BW_SIZE == 1 << 20, "the bandwidth anchors' names say -O 4 -s 1MiB");
#define SIZES(op, tr, anchor, run)                                                                    \
    LAT(op, 8, tr, anchor, run), LAT(op, 64, tr, anchor, run), LAT(op, 512, tr, anchor, run),        \
        LAT(op, 4096, tr, anchor, run), LAT(op, 65536, tr, anchor, run)
static const dsm_bench_case_t cases[] = {
    SIZES("get", "shm", SHM_GET, OP_GET),
    SIZES("put", "shm", SHM_PUT, OP_PUT),
    LAT("fadd", 8, "shm", "ucx_perftest ucp_fadd", OP_FADD),
    LAT("cas", 8, "shm", "ucx_perftest ucp_cswap", OP_CAS),
    LAT("am", 8, "shm", AM_RTT, OP_AM),
    {"am_8B_vs_ucx_floor/shm", FLOOR_ANCHOR, "us", 0, OP_AM_FLOOR, 8},   /* follows am 8 B: reuses it */
    LAT("am", 64, "shm", AM_RTT, OP_AM), LAT("am", 512, "shm", AM_RTT, OP_AM),
    LAT("am", 4096, "shm", AM_RTT, OP_AM),
    {"am_4096B_vs_ucx_floor/shm", FLOOR_ANCHOR, "us", 0, OP_AM_FLOOR, 4096},   /* follows am 4 KiB */
    {"am_4096B_vs_ucx_floor_delivering/shm", FLOOR_DELIVERING_ANCHOR, "us", 0, OP_AM_FLOOR_DELIVERING,
     4096},   /* follows the floor */
    LAT("am", 65536, "shm", AM_RTT, OP_AM),
    /* the rates, the am 8 B rate last: its floor follows it */
    RATE("get", 8, "shm", SHM_GET, "ops/s", OP_GET_RATE), RATE("get", 4096, "shm", SHM_GET, "ops/s", OP_GET_RATE),
    RATE("put", 8, "shm", "ucx_perftest ucp_put_bw", "ops/s", OP_PUT_RATE),
    RATE("put", 4096, "shm", "ucx_perftest ucp_put_bw", "ops/s", OP_PUT_RATE),
    RATE("am", 4096, "shm", "ucx_perftest ucp_am_bw", "msgs/s", OP_AM_RATE),
    RATE("am", 8, "shm", "ucx_perftest ucp_am_bw", "msgs/s", OP_AM_RATE),
    {"am_8B_rate_vs_ucx_floor/shm", FLOOR_RATE_ANCHOR, "msgs/s", 1, OP_AM_RATE_FLOOR, 8},   /* follows am 8 B's rate */
    BW("get", "shm", "ucx_perftest ucp_get", OP_GET_BW),
    BW("put", "shm", "ucx_perftest ucp_put_bw", OP_PUT_BW),
    SIZES("get", "tcp", TCP_RTT, OP_GET),
    SIZES("put", "tcp", TCP_RTT, OP_PUT),
    LAT("fadd", 8, "tcp", TCP_RTT, OP_FADD),
    LAT("cas", 8, "tcp", TCP_RTT, OP_CAS),
    SIZES("am", "tcp", AM_RTT, OP_AM),
    /* the rates as over shm */
    RATE("get", 8, "tcp", "ucx_perftest tag_bw", "ops/s", OP_GET_RATE),
    RATE("get", 4096, "tcp", "ucx_perftest tag_bw", "ops/s", OP_GET_RATE),
    RATE("put", 8, "tcp", "ucx_perftest tag_bw", "ops/s", OP_PUT_RATE),
    RATE("put", 4096, "tcp", "ucx_perftest tag_bw", "ops/s", OP_PUT_RATE),
    RATE("am", 4096, "tcp", "ucx_perftest ucp_am_bw", "msgs/s", OP_AM_RATE),
    RATE("am", 8, "tcp", "ucx_perftest ucp_am_bw", "msgs/s", OP_AM_RATE),
    {"am_8B_rate_vs_ucx_floor/tcp", FLOOR_RATE_ANCHOR, "msgs/s", 1, OP_AM_RATE_FLOOR, 8},   /* follows am 8 B's rate */
    /* emulated over active messages: anchored on UCX's own am stream */
    BW("get", "tcp", "ucx_perftest ucp_am_bw", OP_GET_BW),
    BW("put", "tcp", "ucx_perftest ucp_am_bw", OP_PUT_BW),
    /* ... and against UCX's own emulation of the same operations */
    {"get_1MiB_bw_vs_ucx_get/tcp",
     "ucx_perftest ucp_get -O 4 -s 1MiB (UCX's own get over tcp: a request and a reply, as ours)", "GB/s", 1,
     OP_GET_BW_UCX, BW_SIZE},
    {"put_1MiB_bw_vs_ucx_put/tcp",
     "ucx_perftest ucp_put_bw -O 4 -s 1MiB (UCX's own put over tcp, emulated on its active messages)", "GB/s", 1,
     OP_PUT_BW_UCX, BW_SIZE},
    /* the same windows in one batch each: over tcp one message each way
     * per window, where the anchor sends one per operation */
    {"get_8B_rate_batched/tcp", "ucx_perftest tag_bw -O 32 msgrate (ours: each window of 32 in one batch)", "ops/s",
     1, OP_GET_RATE_BATCHED, 8},
    {"put_8B_rate_batched/tcp", "ucx_perftest tag_bw -O 32 msgrate (ours: each window of 32 in one batch)", "ops/s",
     1, OP_PUT_RATE_BATCHED, 8},
    /* a tcp target's progress modes: adaptive against the better fixed one,
     * a second blocking target against it the same way (the comparison's
     * resolution), and the fixed ones against each other */
#define PROGRESS_CASES(state, w, arg)                                                                          \
    {"progress_adaptive_vs_best/" state "/" w "/tcp", "the better of hybrid and blocking progress, same runs",  \
     "us", 0, OP_PROGRESS, arg},                                                                               \
        {"progress_control_vs_best/" state "/" w "/tcp",                                                       \
         "the better of hybrid and blocking progress, same runs (control: a second blocking target)", "us", 0, \
         OP_PROGRESS, arg},                                                                                    \
        {"progress_hybrid_vs_blocking/" state "/" w "/tcp", "blocking progress, same runs", "us", 0, OP_PROGRESS, arg}
#define PROGRESS_STATE(state)                                                                                  \
    PROGRESS_CASES(state, "fadd_8B_latency", PROGRESS_FADD), PROGRESS_CASES(state, "am_8B_latency", PROGRESS_AM), \
        PROGRESS_CASES(state, "fadd_8B_gap25us_latency", PROGRESS_FADD_GAP),                                 \
        PROGRESS_CASES(state, "fadd_8B_gap250us_latency", PROGRESS_FADD_SLOW),                               \
        {"progress_adaptive_cpu_vs_hybrid/" state "/fadd_8B_gap250us/tcp",                                    \
         "the target's progress CPU per operation under hybrid progress, same runs", "us", 0, OP_PROGRESS,      \
         PROGRESS_FADD_SLOW},                                                                                  \
        {"host_wake_round_trip/" state, "the blocking target's fadd_8B round trip over tcp, same runs", "us", 0, \
         OP_PROGRESS, PROGRESS_FADD}
    PROGRESS_STATE("idle"),
    PROGRESS_STATE("loaded"),
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

typedef struct transport {
    dsm_transport_t tr;
    const char *name, *tls;   /* tls: ucx_perftest's */
    const char *fabric_tls;   /* what the fabric configures UCX with (the floor's) */
    dsm_progress_mode_t target;
} transport_t;

/* One case being measured: its repetitions, ours beside the anchor's. */
typedef struct figure {
    const dsm_bench_case_t *c;
    anchor_t anchor;
    int group, groups;
    double ours[MAX_REPS], anch[MAX_REPS];
    double core_ns[MAX_REPS][2];   /* shm: the host's core-to-core round trip before and after it (core_rtt.h) */
    /* the am rate's sending side: ours (OP_AM_RATE, and its floor figure's
     * copy) and the floor's (OP_AM_RATE_FLOOR's anchor) */
    dsm_bench_post_clock_t posts[MAX_REPS], anch_posts[MAX_REPS];
} figure_t;

static int case_on(const dsm_bench_case_t *c, const transport_t *t)
{
    size_t n = strlen(c->figure), k = strlen(t->name);
    return n > k && c->figure[n - k - 1] == '/' && strcmp(c->figure + n - k, t->name) == 0;
}

/* The cases of transport t this run measures: --only, and in quick mode the
 * sizes 8 B, 4 KiB and 64 KiB. A floor comparison goes with the am figure
 * of its size just before it, whose measurement it reuses (the delivering
 * floor with the floor). */
static int select_figures(const dsm_bench_opts_t *o, const transport_t *t, figure_t *figs)
{
    int n = 0, tcp = t->tr == DSM_TRANSPORT_TCP;
    for (int i = 0; i < N_CASES; i++) {
        const dsm_bench_case_t *c = &cases[i];
        if (!case_on(c, t) || c->run == OP_PROGRESS || (o->quick && (c->arg == 64 || c->arg == 512)))
            continue;
        int follows = c->run == OP_AM_FLOOR            ? OP_AM
                      : c->run == OP_AM_FLOOR_DELIVERING ? OP_AM_FLOOR
                      : c->run == OP_AM_RATE_FLOOR       ? OP_AM_RATE
                                                         : -1;
        if (follows >= 0 ? !(n > 0 && figs[n - 1].c->run == follows && figs[n - 1].c->arg == c->arg)
                         : !dsm_bench_wanted(o, c->figure))
            continue;
        figure_t *fg = &figs[n++];
        memset(fg, 0, sizeof *fg);
        fg->c = c;
        fg->anchor = anchor_for((op_t)c->run, (size_t)c->arg, tcp);
        fg->anchor.name = c->anchor;
        /* groups of >= ~1 µs of work (one op over tcp); ucx_perftest runs as
         * many ops as we time */
        size_t size = (size_t)c->arg;
        fg->group = tcp || size >= 4096 ? 1 : 64;
        fg->groups = (tcp ? 2000 : 20000) / (o->quick ? 2 : 1);
        if (size >= 65536 || (tcp && size >= 4096))
            fg->groups /= 4;
        if (op_is_rate((op_t)c->run)) {   /* calls of op_count ops each */
            fg->group = 1;
            fg->groups = (tcp ? 200 : 2000) / (c->run == OP_AM_RATE ? 8 : 1) / (o->quick ? 2 : 1);
        }
        if (op_is_bw((op_t)c->run))   /* tens of ms of 1 MiB operations */
            fg->groups = (tcp ? 40 : 200) / (o->quick ? 2 : 1);
    }
    return n;
}

/* Repetition r of one figure: ours and its anchor, the anchor first in odd
 * repetitions, so that a drift of the host's state within a repetition
 * favours neither side. The target is stopped (SIGSTOP) while ucx_perftest
 * runs so that it does not steal a core. */
static void measure_figure(figure_t *fg, const figure_t *prev, endpoint_info_t *e, pid_t target,
                           const transport_t *t, int r, pt_cache_t *cache, int *ncache)
{
    op_t op = (op_t)fg->c->run;
    int floor = op == OP_AM_FLOOR || op == OP_AM_FLOOR_DELIVERING || op == OP_AM_RATE_FLOOR;
    int probe = t->tr == DSM_TRANSPORT_SHM && cpu_target != cpu_initiator;
    if (probe) {
        kill(target, SIGSTOP);   /* its polling would share the probe's core */
        fg->core_ns[r][0] = dsm_bench_core_rtt_ns(cpu_initiator, cpu_target);
        kill(target, SIGCONT);
    }
    for (int side = 0; side < 2; side++) {
        if (side == (r & 1)) {
            if (floor) {
                fg->ours[r] = prev->ours[r];
                fg->posts[r] = prev->posts[r];
            } else {
                fg->posts[r] = (dsm_bench_post_clock_t){0};
                fg->ours[r] = measure(e, op, (size_t)fg->c->arg, fg->group, fg->groups, &fg->posts[r]);
            }
            continue;
        }
        kill(target, SIGSTOP);
        if (op == OP_AM_RATE_FLOOR) {
            fg->anch_posts[r] = (dsm_bench_post_clock_t){0};
            fg->anch[r] = dsm_bench_ucx_floor_am_rate(t->fabric_tls, cpu_target, (size_t)fg->c->arg, AM_GROUP,
                                                      prev->groups, &fg->anch_posts[r]);
        } else if (floor) {
            fg->anch[r] = dsm_bench_ucx_floor_am_us(t->fabric_tls, cpu_target, (size_t)fg->c->arg, prev->group,
                                                    prev->groups, op == OP_AM_FLOOR_DELIVERING);
        } else {
            fg->anch[r] = anchor_value(&fg->anchor, t->tls, fg->group * fg->groups * op_count(op), op_is_rate(op),
                                       cache, ncache);
        }
        kill(target, SIGCONT);
    }
    if (op_is_bw(op)) {   /* both sides measured operations per second */
        double gb_per_op = (double)fg->c->arg / 1e9;
        fg->ours[r] *= gb_per_op;
        if (fg->anch[r] > 0)
            fg->anch[r] *= gb_per_op;
    }
    if (probe) {   /* the state can change within a figure: a pair that differs says so */
        kill(target, SIGSTOP);
        fg->core_ns[r][1] = dsm_bench_core_rtt_ns(cpu_initiator, cpu_target);
        kill(target, SIGCONT);
    }
}

static void report_figure(dsm_report_t *report, const figure_t *fg, int reps)
{
    int ok = 1;
    for (int r = 0; r < reps; r++)
        ok &= fg->anch[r] > 0;
    const dsm_figure_t *f = dsm_report_add(report, fg->c->figure, dsm_report_median(fg->ours, (size_t)reps),
                                           fg->c->unit, fg->anchor.name,
                                           ok ? dsm_report_median(fg->anch, (size_t)reps) : -1, fg->c->higher);
    dsm_report_reps(report, f, fg->ours, fg->anch, (size_t)reps);
    if (f)
        dsm_report_print_figure(stdout, f);
}

/* Beside an am rate's floor figure: the sending thread's CPU and wall time
 * per message while it posts, ours and the floor's (medians over the
 * repetitions; ns), in the JSON's env as am_rate_sender_per_msg_<transport>
 * and printed under the figures. */
static void report_sender(dsm_report_t *report, const figure_t *fg, int reps, const char *tname)
{
    double v[4][MAX_REPS];
    int n = 0;
    for (int r = 0; r < reps; r++) {
        const dsm_bench_post_clock_t *o = &fg->posts[r], *a = &fg->anch_posts[r];
        if (o->msgs == 0 || a->msgs == 0)
            continue;
        v[0][n] = (double)o->cpu_ns / (double)o->msgs;
        v[1][n] = (double)o->wall_ns / (double)o->msgs;
        v[2][n] = (double)a->cpu_ns / (double)a->msgs;
        v[3][n] = (double)a->wall_ns / (double)a->msgs;
        n++;
    }
    if (n == 0)
        return;
    double m[4];
    for (int k = 0; k < 4; k++)
        m[k] = dsm_report_median(v[k], (size_t)n);
    char key[64];
    snprintf(key, sizeof key, "am_rate_sender_per_msg_%s", tname);
    dsm_report_env(report, key,
                   "{\"figure\": \"%s\", \"ours_cpu_ns\": %.0f, \"ours_wall_ns\": %.0f, \"floor_cpu_ns\": %.0f, "
                   "\"floor_wall_ns\": %.0f, \"repetitions\": %d}",
                   fg->c->figure, m[0], m[1], m[2], m[3], n);
    printf("    %-40s sending thread per message while posting (CPU of wall): ours %.0f of %.0f ns, "
           "floor %.0f of %.0f ns\n",
           fg->c->figure, m[0], m[1], m[2], m[3]);
}

/* Over shm, each figure's repetitions beside the host's core-to-core round
 * trip measured before and after each (printed under the figures, and in
 * the JSON's env as shm_core_rtt_ns: {figure: [[before, after] ns per
 * repetition, in run order]}). */
static void report_core_rtt(dsm_report_t *report, const figure_t *figs, int nfig, int reps)
{
    size_t cap = (size_t)nfig * (size_t)(128 + reps * 28) + 4, len = 0;
    char *json = malloc(cap);
    if (json == NULL)
        return;
    len += (size_t)snprintf(json + len, cap - len, "{");
    for (int i = 0; i < nfig; i++) {
        const figure_t *fg = &figs[i];
        printf("    %-40s core-to-core round trip per repetition, before/after (ns):", fg->c->figure);
        len += (size_t)snprintf(json + len, cap - len, "%s\"%s\":[", i ? "," : "", fg->c->figure);
        for (int r = 0; r < reps; r++) {
            printf(" %.0f/%.0f", fg->core_ns[r][0], fg->core_ns[r][1]);
            len += (size_t)snprintf(json + len, cap - len, "%s[%.1f,%.1f]", r ? "," : "", fg->core_ns[r][0],
                                    fg->core_ns[r][1]);
        }
        printf("\n");
        len += (size_t)snprintf(json + len, cap - len, "]");
    }
    snprintf(json + len, cap - len, "}");
    dsm_report_env(report, "shm_core_rtt_ns", "%s", json);
    free(json);
}

/* Every selected case of one transport: a forked target, R interleaved
 * repetitions, then the medians. */
static void run_transport(const dsm_bench_opts_t *o, const transport_t *t, int reps, dsm_report_t *report)
{
    static figure_t figs[N_CASES];
    int nfig = select_figures(o, t, figs);
    if (nfig == 0)
        return;
    dsm_fabric_ucx_env_defaults(t->tr);   /* ucx_perftest inherits them: both sides run as configured */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("socketpair");
        exit(1);
    }
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        target_main(sv[1], t->tr, t->target);
    }
    close(sv[1]);
    endpoint_info_t e = meet(sv[0], t->tr, DSM_PROGRESS_BLOCKING, 0);
    char ready;
    if (read(sv[0], &ready, 1) != 1) {
        fprintf(stderr, "target did not start\n");
        exit(1);
    }
    for (int r = 0; r < reps; r++) {
        pt_cache_t cache[64];
        int ncache = 0;
        for (int i = 0; i < nfig; i++)
            measure_figure(&figs[i], i > 0 ? &figs[i - 1] : NULL, &e, child, t, r, cache, &ncache);
    }
    for (int i = 0; i < nfig; i++)
        report_figure(report, &figs[i], reps);
    for (int i = 0; i < nfig; i++)
        if (figs[i].c->run == OP_AM_RATE_FLOOR)
            report_sender(report, &figs[i], reps, t->name);
    if (t->tr == DSM_TRANSPORT_SHM && cpu_target != cpu_initiator)
        report_core_rtt(report, figs, nfig, reps);
    /* The target leaves when the socket closes: said first, so that the
     * disconnect of its endpoint (which UCX's tcp reports to the error
     * handler as "Endpoint timeout") is a peer leaving, not a failure
     * warned about. shm endpoints have no error handler: nothing to say. */
    if (t->tr != DSM_TRANSPORT_SHM)
        dsm_fabric_peer_left(e.f, 1);
    close(sv[0]);
    waitpid(child, NULL, 0);
    dsm_fabric_region_unregister(e.region);
    dsm_fabric_destroy(e.f);
}

int main(int argc, char **argv)
{
    int floor_target = dsm_bench_ucx_floor_target_main(argc, argv);
    if (floor_target >= 0)
        return floor_target;
    const char *target_progress = "busy";
    const dsm_bench_flag_t flags[] = {{"--target-progress", "busy|blocking", &target_progress}};
    dsm_bench_opts_t o;
    int done = dsm_bench_parse(argc, argv, cases, N_CASES, flags, 1, &o);
    if (done >= 0)
        return done;
    dsm_progress_mode_t target;
    if (dsm_bench_progress_flag("--target-progress", target_progress, &target)) return 2;
    /* quick or not: a host that changes state mid-run moves a median of 3 */
    int reps = o.runs > 0 ? o.runs : 5;
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    signal(SIGPIPE, SIG_IGN);
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        cpu_target = 0;
    dsm_bench_pin(cpu_initiator);
    char load_before[32], load_after[32];
    dsm_report_loadavg(load_before, sizeof load_before);

    const transport_t transports[] = {
        {DSM_TRANSPORT_SHM, "shm", "posix,sysv,cma,self", "posix,sysv,self", target},
        {DSM_TRANSPORT_TCP, "tcp", "tcp,self", "tcp", target},
    };
    dsm_report_t report;
    dsm_report_init(&report, "fabric");
    dsm_report_print_header(stdout);
    for (int t = 0; t < 2; t++)
        if (dsm_bench_transport_on(&o, transports[t].tr))
            run_transport(&o, &transports[t], reps, &report);
    if (o.only && strncmp(o.only, "progress", strlen("progress")) == 0 &&
        dsm_bench_transport_on(&o, DSM_TRANSPORT_TCP))
        dsm_bench_progress_compare(&report, reps, o.quick, cpu_initiator, cpu_target);
    dsm_report_loadavg(load_after, sizeof load_after);
    printf("loadavg (1 min) before %s, after %s; %d repetitions, medians\n", load_before, load_after, reps);

    dsm_report_env_str(&report, "ucx_proto_enable", getenv("UCX_PROTO_ENABLE"));
    dsm_report_env(&report, "quick", "%s", o.quick ? "true" : "false");
    dsm_report_env(&report, "repetitions", "%d", reps);
    if (o.only)
        dsm_report_env_str(&report, "only", o.only);   /* the figures measured: those named so */
    dsm_report_env_str(&report, "initiator_progress", "blocking");
    dsm_report_env_str(&report, "target_progress_shm", dsm_progress_name(target));
    dsm_report_env_str(&report, "target_progress_tcp", dsm_progress_name(target));
    dsm_report_env(&report, "cpu_initiator", "%d", cpu_initiator);
    dsm_report_env(&report, "cpu_target", "%d", cpu_target);
    dsm_report_env_str(&report, "target_memory", "dsm_fabric_region_alloc");
    dsm_report_env(&report, "loadavg_before", "%s", load_before[0] ? load_before : "null");
    dsm_report_env(&report, "loadavg_after", "%s", load_after[0] ? load_after : "null");
    dsm_report_env_str(&report, "statistic",
                       "ours: median over repetitions of the median per-op latency (clock read per group of up to "
                       "64 ops), or of the average rate; anchor: median over repetitions of ucx_perftest's "
                       "50th-percentile latency, or of its average message rate");
    dsm_report_env_str(&report, "round_trip_figures", "put = put+flush, am = request/reply");
    dsm_report_env(&report, "rate_window", "%d", WINDOW);
    dsm_report_env(&report, "am_rate_group", "%d", AM_GROUP);
    dsm_report_env(&report, "bw_window", "%d", BW_WINDOW);
    dsm_report_env_str(&report, "rate_figures",
                       "get/put: windows of rate_window operations issued (the *_batched figures: in one "
                       "dsm_fabric_batch_begin/end, over tcp the window's requests in one message), then all "
                       "waited for (a put window "
                       "ends with a flush); am: fire-and-forget posts, each am_rate_group closed by a "
                       "request/reply; anchors: ucx_perftest with -O rate_window; both sides: all "
                       "operations over all the time (average message rate)");
    int rc = o.json && dsm_report_write_json(&report, o.json) != 0 ? 1 : 0;
    dsm_report_free(&report);
    return rc;
}
