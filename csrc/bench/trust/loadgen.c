/* The memcached load generator: prefill, then pipelined requests counted
 * by complete responses; on request the server's CPU over the timed part
 * and its workers' share of the connections. */
#include "bench/trust/loadgen.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/trust/keys.h"
#include "util/clock.h"

struct lg_conn {
    int fd;
    unsigned outstanding;
    char rbuf[65536];
    size_t rlen;
};

/* Count complete responses in buf: VALUE blocks end at "END\r\n", others at a line. */
static size_t lg_consume(struct lg_conn *c, unsigned *done)
{
    size_t pos = 0;
    for (;;) {
        char *e = memchr(c->rbuf + pos, '\n', c->rlen - pos);
        if (!e) break;
        size_t linelen = (size_t)(e - (c->rbuf + pos)) + 1;
        if (linelen >= 6 && memcmp(c->rbuf + pos, "VALUE ", 6) == 0) {
            /* VALUE k f n\r\n<data>\r\nEND\r\n */
            char *sp = memrchr(c->rbuf + pos, ' ', linelen);
            unsigned vlen = (unsigned)strtoul(sp + 1, NULL, 10);
            size_t need = linelen + vlen + 2 + 5;
            if (c->rlen - pos < need) break;
            pos += need;
        } else {
            pos += linelen;
        }
        (*done)++;
    }
    memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
    c->rlen -= pos;
    return pos;
}

/* A process's CPU time so far (user + system), in seconds; -1 if unknown. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* One round trip on c: send cmd, read until a line "END\r\n"; the answer
 * (NUL-terminated) is left in c->rbuf and its length returned, 0 on error. */
static size_t lg_ask(struct lg_conn *c, const char *cmd)
{
    size_t len = strlen(cmd);
    if (write(c->fd, cmd, len) != (ssize_t)len) return 0;
    c->rlen = 0;
    for (;;) {
        ssize_t r = read(c->fd, c->rbuf + c->rlen, sizeof c->rbuf - 1 - c->rlen);
        if (r <= 0) return 0;
        c->rlen += (size_t)r;
        c->rbuf[c->rlen] = 0;
        if (c->rlen >= 5 && memcmp(c->rbuf + c->rlen - 5, "END\r\n", 5) == 0) break;
        if (strstr(c->rbuf, "ERROR\r\n")) return 0; /* no such stats group */
        if (c->rlen == sizeof c->rbuf - 1) return 0;
    }
    size_t n = c->rlen;
    c->rlen = 0;
    return n;
}

/* The connections each worker holds, once they add up to this run's: the
 * previous run's closes may not have been seen yet, and a worker counts a
 * connection dealt to it when it takes it. Asked at most SPLIT_TRIES times
 * (a close or a hand-over is seen within a worker's round, microseconds;
 * the bound only stops a server that never settles). */
#define SPLIT_TRIES 100000
static void lg_split(struct lg_conn *c, unsigned nconns, lg_probe_t *probe)
{
    for (int tries = 0; tries < SPLIT_TRIES; tries++) {
        if (!lg_ask(c, "stats workers\r\n")) break;
        unsigned sum = 0, workers = 0, w, v;
        const char *line = c->rbuf;
        while (line) {
            if (sscanf(line, "STAT worker:%u:curr_connections %u", &w, &v) == 2 && w < LG_MAX_WORKERS) {
                probe->split[w] = v;
                sum += v;
                if (w + 1 > workers) workers = w + 1;
            }
            line = strchr(line, '\n');
            if (line) line++;
        }
        probe->workers = workers;
        if (sum == nconns) return;
    }
}

/* The workers' counters summed, from one `stats workers`; 0 if not
 * answered. */
static int lg_counters(struct lg_conn *c, uint64_t out[LG_COUNTERS])
{
    static const char *const name[LG_COUNTERS] = {"commands", "handed_off", "wakeups", "polls", "blocking_polls"};
    if (!lg_ask(c, "stats workers\r\n")) return 0;
    memset(out, 0, LG_COUNTERS * sizeof *out);
    for (const char *line = c->rbuf; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        unsigned w;
        char what[32];
        unsigned long long v;
        if (sscanf(line, "STAT worker:%u:%31s %llu", &w, what, &v) != 3) continue;
        for (int k = 0; k < LG_COUNTERS; k++)
            if (strcmp(what, name[k]) == 0) out[k] += v;
    }
    return 1;
}

/* A connection to the server on 127.0.0.1:port, with TCP_NODELAY; the
 * server may still be starting, so a refused connect is tried again. */
static int lg_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    for (int tries = 0; connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && tries < 200; tries++)
        usleep(10000);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

double loadgen(uint16_t port, unsigned nconns, unsigned depth, uint32_t nkeys, double seconds, lg_probe_t *probe)
{
    uint32_t *ring = make_ring(nkeys, 1, 31337);
    struct lg_conn *cs = calloc(nconns, sizeof *cs);
    int ep = epoll_create1(0);
    for (unsigned i = 0; i < nconns; i++) {
        cs[i].fd = lg_connect(port);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
    }
    /* prefill every key */
    char val[33];
    memset(val, 'v', 32);
    val[32] = 0;
    for (uint32_t k = 0; k < nkeys;) {
        char buf[65536];
        size_t n = 0;
        unsigned batch = 0;
        while (k < nkeys && n < sizeof buf - 128) {
            n += (size_t)snprintf(buf + n, sizeof buf - n, "set key:%08u 0 0 32 noreply\r\n%s\r\n", k, val);
            k++;
            batch++;
        }
        if (write(cs[0].fd, buf, n) != (ssize_t)n) break;
    }
    /* a round trip so the prefill is applied before timing */
    if (write(cs[0].fd, "get key:00000000\r\n", 18) == 18) {
        unsigned d = 0;
        while (d == 0) {
            ssize_t r = read(cs[0].fd, cs[0].rbuf + cs[0].rlen, sizeof cs[0].rbuf - cs[0].rlen);
            if (r <= 0) break;
            cs[0].rlen += (size_t)r;
            lg_consume(&cs[0], &d);
        }
    }
    uint64_t before[LG_COUNTERS];
    int counted = 0;
    if (probe) {
        probe->workers = 0;
        probe->cpu_us_per_req = 0;
        memset(probe->per_command, 0, sizeof probe->per_command);
        if (probe->want_split) {
            lg_split(&cs[0], nconns, probe);
            counted = lg_counters(&cs[0], before);
        }
    }
    double cpu0 = probe && probe->server ? proc_cpu_s(probe->server) : -1;
    uint64_t seed = 5, ops = 0;
    uint32_t pos = 0;
    double t0 = dsm_now_s(), t_end = t0 + seconds;
    struct epoll_event evs[64];
    int running = 1;
    while (running) {
        if (dsm_now_s() >= t_end) running = 0;
        for (unsigned i = 0; i < nconns && running; i++) {
            struct lg_conn *c = &cs[i];
            if (c->outstanding >= (depth + 1) / 2) continue; /* refill at half (depth 1: when idle) */
            char buf[16384];
            size_t n = 0;
            while (c->outstanding < depth) {
                uint32_t k = ring[pos];
                pos = (pos + 1) & (RING - 1);
                if (xs(&seed) % 100 < 5)
                    n += (size_t)snprintf(buf + n, sizeof buf - n, "set key:%08u 0 0 32\r\n%s\r\n", k, val);
                else
                    n += (size_t)snprintf(buf + n, sizeof buf - n, "get key:%08u\r\n", k);
                c->outstanding++;
            }
            if (write(c->fd, buf, n) != (ssize_t)n) running = 0;
        }
        int ne = epoll_wait(ep, evs, 64, 10);
        for (int e = 0; e < ne; e++) {
            struct lg_conn *c = &cs[evs[e].data.u32];
            ssize_t r = read(c->fd, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen);
            if (r <= 0) {
                running = 0;
                continue;
            }
            c->rlen += (size_t)r;
            unsigned d = 0;
            lg_consume(c, &d);
            c->outstanding -= d;
            ops += d;
        }
    }
    double el = dsm_now_s() - t0;
    double cpu1 = cpu0 >= 0 ? proc_cpu_s(probe->server) : -1;
    if (cpu1 >= 0 && ops) probe->cpu_us_per_req = (cpu1 - cpu0) / (double)ops * 1e6;
    if (counted) {
        /* on a connection of its own: the run's may still have answers
           coming, whose END lines would end the stats' read early */
        struct lg_conn *q = calloc(1, sizeof *q);
        uint64_t after[LG_COUNTERS];
        if (q && (q->fd = lg_connect(port)) >= 0 && lg_counters(q, after) && after[LG_COMMANDS] > before[LG_COMMANDS]) {
            double cmds = (double)(after[LG_COMMANDS] - before[LG_COMMANDS]);
            probe->per_command[LG_COMMANDS] = cmds;
            for (int k = 1; k < LG_COUNTERS; k++) probe->per_command[k] = (double)(after[k] - before[k]) / cmds;
        }
        if (q && q->fd >= 0) close(q->fd);
        free(q);
    }
    for (unsigned i = 0; i < nconns; i++) close(cs[i].fd);
    close(ep);
    free(cs);
    free(ring);
    return (double)ops / el;
}

uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}
