/* The memcached load generator: prefill, then pipelined requests counted
 * by complete responses. */
#include "bench/trust/loadgen.h"

#include <arpa/inet.h>
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

double loadgen(uint16_t port, unsigned nconns, unsigned depth, uint32_t nkeys, double seconds)
{
    uint32_t *ring = make_ring(nkeys, 1, 31337);
    struct lg_conn *cs = calloc(nconns, sizeof *cs);
    int ep = epoll_create1(0);
    for (unsigned i = 0; i < nconns; i++) {
        cs[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        for (int tries = 0; connect(cs[i].fd, (struct sockaddr *)&a, sizeof a) != 0 && tries < 200; tries++)
            usleep(10000);
        int one = 1;
        setsockopt(cs[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
