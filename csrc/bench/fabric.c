/* dsm-bench-fabric: latency of get / put / fetch-add / cas / AM request-reply
 * between two processes over shm and tcp, each printed beside ucx_perftest
 * measuring the same operation on the same transport in the same run.
 *
 * The initiator (this process) runs its progress thread in blocking mode and
 * spins in the blocking helpers; the target (a forked child) runs a busy
 * progress thread. They meet over a socketpair: worker address, region base
 * and packed key each way.
 *
 * Semantics of the figures: get, fetch_add and cas are full operation
 * latencies, as ucx_perftest's ucp_get/ucp_fadd/ucp_cswap report them. put is
 * a blocking put plus flush (data at the target) and AM a request/reply; both
 * are round trips, so their anchor is twice ucx_perftest's one-way ping-pong
 * latency (ucp_put_lat, ucp_am_lat). Rate figures pipeline 32 gets. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dsm/fabric.h"

enum { REGION = 1 << 20, H_ECHO = 56, WINDOW = 32 };

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-fabric: %s: %s\n", what, dsm_strerror(st));
    exit(1);
}

/* ------------------------------------------------------------ socket blobs */

static void send_blob(int fd, const void *p, uint32_t len)
{
    if (write(fd, &len, 4) != 4 || (len && write(fd, p, len) != (ssize_t)len)) {
        perror("write");
        exit(1);
    }
}

static void *recv_blob(int fd, uint32_t *len)
{
    if (read(fd, len, 4) != 4) {
        perror("read");
        exit(1);
    }
    uint8_t *p = malloc(*len ? *len : 1);
    size_t got = 0;
    while (got < *len) {
        ssize_t n = read(fd, p + got, *len - got);
        if (n <= 0) {
            perror("read");
            exit(1);
        }
        got += (size_t)n;
    }
    return p;
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
    dsm_fabric_config_t cfg = {.transport = tr, .progress = mode,
                               .net_device = tr == DSM_TRANSPORT_TCP ? "lo" : NULL};
    dsm_status_t st = dsm_fabric_create(&cfg, &e.f);
    if (st != DSM_OK)
        die("fabric create", st);
    dsm_fabric_set_rank(e.f, my_rank);
    e.mem = aligned_alloc(4096, REGION);
    memset(e.mem, 0, REGION);
    if ((st = dsm_fabric_region_register(e.f, e.mem, REGION, &e.region)) != DSM_OK)
        die("region register", st);
    const void *addr, *key;
    size_t addr_len, key_len;
    dsm_fabric_address(e.f, &addr, &addr_len);
    dsm_fabric_region_key(e.region, &key, &key_len);
    uint64_t base = (uintptr_t)e.mem;
    send_blob(fd, addr, (uint32_t)addr_len);
    send_blob(fd, key, (uint32_t)key_len);
    send_blob(fd, &base, 8);
    uint32_t n1, n2, n3;
    void *raddr = recv_blob(fd, &n1), *rkey = recv_blob(fd, &n2), *rbase = recv_blob(fd, &n3);
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

static void echo_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_fabric_am_reply(ctx, msg->src_rank, msg->request_id, DSM_OK, msg->data, msg->len);
}

static void target_main(int fd, dsm_transport_t tr)
{
    endpoint_info_t e = meet(fd, tr, DSM_PROGRESS_BUSY, 1);
    dsm_fabric_am_register(e.f, H_ECHO, echo_handler, e.f);
    char c;
    if (write(fd, "r", 1) != 1)
        exit(1);
    /* serve until the initiator closes the socket */
    while (read(fd, &c, 1) == 1)
        ;
    dsm_fabric_region_unregister(e.region);
    dsm_fabric_destroy(e.f);
    free(e.mem);
    exit(0);
}

/* --------------------------------------------------------- our measurements */

typedef enum { OP_GET, OP_PUT, OP_FADD, OP_CAS, OP_AM, OP_GET_RATE } op_t;
static const char *op_names[] = {"get", "put", "fadd", "cas", "am", "get"};
static const char *perftest_tests[] = {"ucp_get", "ucp_put_lat", "ucp_fadd", "ucp_cswap", "ucp_am_lat", "ucp_get"};

/* Returns µs per operation (or ops/s for OP_GET_RATE). */
static double measure(endpoint_info_t *e, op_t op, size_t size, int iters)
{
    dsm_fabric_t *f = e->f;
    uint8_t *buf = e->mem + REGION / 2;   /* local scratch */
    static uint8_t reply[REGION / 2];
    uint64_t old;
    size_t rlen;
    dsm_status_t st = DSM_OK;
    int warm = iters / 10 + 10;
    double t0 = 0;
    for (int i = -warm; i < iters && st == DSM_OK; i++) {
        if (i == 0)
            t0 = now_us();
        switch (op) {
        case OP_GET:
            st = dsm_fabric_get(f, 1, 0, 0, buf, size);
            break;
        case OP_PUT:
            st = dsm_fabric_put(f, 1, 0, 0, buf, size);
            if (st == DSM_OK)
                st = dsm_fabric_flush(f, 1);
            break;
        case OP_FADD:
            st = dsm_fabric_fetch_add(f, 1, 0, 0, 1, &old);
            break;
        case OP_CAS:
            st = dsm_fabric_cas(f, 1, 0, 0, (uint64_t)i, (uint64_t)i + 1, &old);
            break;
        case OP_AM:
            st = dsm_fabric_am_request(f, 1, H_ECHO, buf, size, reply, sizeof reply, &rlen, 0);
            break;
        case OP_GET_RATE: {
            dsm_op_t ops[WINDOW];
            for (int k = 0; k < WINDOW && st == DSM_OK; k++)
                st = dsm_fabric_get_nb(f, 1, 0, (uint64_t)k * size, buf + (size_t)k * size, size, &ops[k]);
            for (int k = 0; k < WINDOW; k++) {
                dsm_status_t w = dsm_fabric_wait(&ops[k]);
                if (st == DSM_OK)
                    st = w;
            }
            break;
        }
        }
    }
    if (st != DSM_OK)
        die(op_names[op], st);
    double dt = now_us() - t0;
    if (op == OP_GET_RATE)
        return (double)iters * WINDOW / (dt / 1e6);
    return dt / iters;
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

/* Runs one ucx_perftest client/server pair; returns the average latency (µs)
 * or, with `rate`, the average message rate; < 0 if it could not run. */
static double perftest(const char *tls, op_t op, size_t size, int iters)
{
    int rate = op == OP_GET_RATE;
    char port[16], sz[32], n[32], w[32];
    snprintf(port, sizeof port, "%d", free_port());
    snprintf(sz, sizeof sz, "%zu", size);
    snprintf(n, sizeof n, "%d", iters);
    snprintf(w, sizeof w, "%d", iters / 10 + 10);
    setenv("UCX_TLS", tls, 1);
    if (strcmp(tls, "tcp,self") == 0)
        setenv("UCX_NET_DEVICES", "lo", 1);
    else
        unsetenv("UCX_NET_DEVICES");

    pid_t server = fork();
    if (server == 0) {
        int devnull = open("/dev/null", 1);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl("/usr/bin/ucx_perftest", "ucx_perftest", "-p", port, NULL);
        _exit(127);
    }
    double result = -1;
    for (int attempt = 0; attempt < 5 && result < 0; attempt++) {
        usleep(300000);
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/ucx_perftest 127.0.0.1 -p %s -t %s -s %s -n %s -w %s %s -f 2>/dev/null",
                 port, perftest_tests[op], sz, n, w, rate ? "-O 32" : "");
        FILE *p = popen(cmd, "r");
        if (p == NULL)
            break;
        char line[512];
        double v[8];
        while (fgets(line, sizeof line, p)) {
            long it;
            if (sscanf(line, " %ld %lf %lf %lf %lf %lf %lf %lf", &it, &v[0], &v[1], &v[2], &v[3], &v[4],
                       &v[5], &v[6]) == 8)
                result = rate ? v[5] : v[1];   /* msgrate average / latency average */
        }
        pclose(p);
    }
    kill(server, SIGTERM);
    waitpid(server, NULL, 0);
    unsetenv("UCX_TLS");
    unsetenv("UCX_NET_DEVICES");
    return result;
}

/* ------------------------------------------------------------------- main */

typedef struct figure {
    op_t op;
    size_t size;
    int iters;
    char name[64];
    const char *unit;
    double value, anchor;
    const char *better;
} figure_t;

int main(int argc, char **argv)
{
    int quick = 0;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--json PATH]\n", argv[0]);
            return 2;
        }
    }
    setenv("UCX_PROTO_ENABLE", "y", 0);
    signal(SIGPIPE, SIG_IGN);

    static const size_t full_sizes[] = {8, 64, 512, 4096, 65536};
    static const size_t quick_sizes[] = {8, 4096, 65536};
    const size_t *sizes = quick ? quick_sizes : full_sizes;
    int nsizes = quick ? 3 : 5;
    struct { dsm_transport_t tr; const char *name, *tls; } transports[] = {
        {DSM_TRANSPORT_SHM, "shm", "posix,sysv,cma,self"},
        {DSM_TRANSPORT_TCP, "tcp", "tcp,self"},
    };
    figure_t figs[128];
    int nfig = 0;

    printf("%-6s %8s %-4s %12s %14s %7s\n", "op", "size", "tl", "ours", "ucx_perftest", "ratio");
    for (int t = 0; t < 2; t++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
            perror("socketpair");
            return 1;
        }
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            close(sv[0]);
            target_main(sv[1], transports[t].tr);
        }
        close(sv[1]);
        endpoint_info_t e = meet(sv[0], transports[t].tr, DSM_PROGRESS_BLOCKING, 0);
        char ready;
        if (read(sv[0], &ready, 1) != 1) {
            fprintf(stderr, "target did not start\n");
            return 1;
        }
        /* ours first, then stop the target (its busy progress thread would
         * steal a core from ucx_perftest on a small machine), then the anchors */
        int tcp = transports[t].tr == DSM_TRANSPORT_TCP;
        int first = nfig;
        for (op_t op = OP_GET; op <= OP_GET_RATE; op++) {
            int per_size = op == OP_GET || op == OP_PUT || op == OP_AM;
            for (int s = 0; s < (per_size ? nsizes : 1); s++) {
                figure_t *fg = &figs[nfig++];
                fg->op = op;
                fg->size = per_size ? sizes[s] : 8;
                fg->iters = quick ? (tcp ? 2000 : 20000) : (tcp ? 20000 : 200000);
                if (fg->size >= 4096)
                    fg->iters /= 4;
                if (op == OP_GET_RATE)
                    fg->iters /= WINDOW;
                fg->value = measure(&e, op, fg->size, fg->iters);
            }
        }
        close(sv[0]);
        waitpid(child, NULL, 0);
        dsm_fabric_region_unregister(e.region);
        dsm_fabric_destroy(e.f);
        free(e.mem);

        for (int i = first; i < nfig; i++) {
            figure_t *fg = &figs[i];
            op_t op = fg->op;
            int rate = op == OP_GET_RATE;
            fg->anchor = perftest(transports[t].tls, op, fg->size, fg->iters);
            if (fg->anchor > 0 && (op == OP_PUT || op == OP_AM))
                fg->anchor *= 2;   /* one-way ping-pong -> round trip */
            double ratio = fg->anchor > 0 ? fg->value / fg->anchor : 0;
            printf("%-6s %8zu %-4s %12.3f %14.3f %7.2f %s\n", op_names[op], fg->size, transports[t].name,
                   rate ? fg->value / 1e6 : fg->value, rate ? fg->anchor / 1e6 : fg->anchor, ratio,
                   rate ? "Mops/s" : (op == OP_PUT || op == OP_AM) ? "us round trip" : "us");
            fflush(stdout);
            snprintf(fg->name, sizeof fg->name, "%s_%zuB_%s/%s", op_names[op], fg->size,
                     rate ? "rate" : "latency", transports[t].name);
            fg->unit = rate ? "ops/s" : "us";
            fg->better = rate ? "higher" : "lower";
        }
    }

    if (json) {
        FILE *out = fopen(json, "w");
        if (out == NULL) {
            perror(json);
            return 1;
        }
        fprintf(out, "{\"bench\":\"fabric\",\"figures\":[");
        for (int i = 0; i < nfig; i++) {
            figure_t *fg = &figs[i];
            fprintf(out, "%s{\"name\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"anchor\":\"ucx_perftest\","
                         "\"anchor_value\":%.6g,\"ratio\":%.4g,\"better\":\"%s\"}",
                    i ? "," : "", fg->name, fg->value, fg->unit, fg->anchor,
                    fg->anchor > 0 ? fg->value / fg->anchor : 0, fg->better);
        }
        fprintf(out, "],\"env\":{\"ucx_proto_enable\":\"%s\",\"quick\":%s,\"initiator_progress\":\"blocking\","
                     "\"target_progress\":\"busy\",\"round_trip_figures\":\"put (put+flush), am (request/reply);"
                     " anchor = 2x ucx_perftest one-way\"}}\n",
                getenv("UCX_PROTO_ENABLE"), quick ? "true" : "false");
        fclose(out);
    }
    return 0;
}
