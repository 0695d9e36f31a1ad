/* dsm-bench-loco: the Redis anchor. redis-server (Debian's, or $DSM_REDIS)
 * without persistence on a loopback port picked here, stopped at the end;
 * a small RESP client over one TCP connection pipelines `window` GETs and
 * SETs of 8-byte keys and values at a time, as the kvstore's client keeps
 * `window` operations outstanding. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/loco/loco.h"
#include "dsm/clock.h"

struct loco_redis {
    pid_t pid;
    int fd;
    char in[1 << 16];
    size_t have, at;
};

/* The server running, stopped at exit too: a bench that dies on a failed
 * check (loco_die) must not leave it behind. */
static pid_t running;

static void stop_at_exit(void)
{
    if (running > 0) {
        kill(running, SIGTERM);
        waitpid(running, NULL, 0);
    }
}

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The next reply's bytes consumed: +..., -..., :..., $len + payload. 0 for
 * a value, 1 for a nil, -1 on an error reply or a closed connection. */
static int read_reply(loco_redis_t *r)
{
    for (;;) {
        char *nl = r->at < r->have ? memchr(r->in + r->at, '\n', r->have - r->at) : NULL;
        if (nl) {
            char type = r->in[r->at];
            long len = type == '$' ? strtol(r->in + r->at + 1, NULL, 10) : 0;
            size_t need = (size_t)(nl + 1 - r->in) + (len > 0 ? (size_t)len + 2 : 0);
            if (need <= r->have) {
                r->at = need;
                return type == '-' ? -1 : len < 0 ? 1 : 0;
            }
        }
        if (r->at > 0) {
            memmove(r->in, r->in + r->at, r->have - r->at);
            r->have -= r->at;
            r->at = 0;
        }
        ssize_t got = recv(r->fd, r->in + r->have, sizeof r->in - r->have, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        r->have += (size_t)got;
    }
}

static size_t cmd(char *out, int put, uint64_t key, uint64_t value)
{
    static const char get[] = "*2\r\n$3\r\nGET\r\n$8\r\n", set[] = "*3\r\n$3\r\nSET\r\n$8\r\n";
    size_t n = sizeof get - 1;
    memcpy(out, put ? set : get, n);
    memcpy(out + n, &key, 8);
    memcpy(out + n + 8, "\r\n", 2);
    n += 10;
    if (put) {
        memcpy(out + n, "$8\r\n", 4);
        memcpy(out + n + 4, &value, 8);
        memcpy(out + n + 12, "\r\n", 2);
        n += 14;
    }
    return n;
}

loco_redis_t *loco_redis_start(uint64_t nkeys, char *why, size_t cap)
{
    const char *bin = getenv("DSM_REDIS") ? getenv("DSM_REDIS") : "/usr/bin/redis-server";
    if (access(bin, X_OK) != 0) {
        snprintf(why, cap, "%s not found (Debian package redis-server)", bin);
        return NULL;
    }
    int port = free_port();
    loco_redis_t *r = calloc(1, sizeof *r);
    if (port < 0 || r == NULL) {
        snprintf(why, cap, "no loopback port");
        free(r);
        return NULL;
    }
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    r->fd = -1;
    r->pid = fork();
    if (r->pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execl(bin, bin, "--port", ports, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
              "--protected-mode", "yes", (char *)NULL);
        _exit(127);
    }
    if (r->pid > 0) {
        static int hooked;
        if (!hooked++)
            atexit(stop_at_exit);
        running = r->pid;
    }
    /* connect, again while the server starts (bounded: 10 s of 10 ms tries) */
    for (int t = 0; t < 1000 && r->pid > 0; t++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
            int one = 1;
            setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            r->fd = s;
            break;
        }
        if (s >= 0)
            close(s);
        usleep(10000);
    }
    if (r->fd < 0) {
        snprintf(why, cap, "%s did not accept connections on 127.0.0.1:%d within 10 s", bin, port);
        loco_redis_stop(r);
        return NULL;
    }
    /* fill: SETs pipelined 128 at a time */
    char buf[128 * 48];
    for (uint64_t k = 0; k < nkeys;) {
        size_t n = 0, m = 0;
        for (; m < 128 && k < nkeys; m++, k++) n += cmd(buf + n, 1, loco_key(k), k);
        if (send_all(r->fd, buf, n) != 0) {
            snprintf(why, cap, "redis-server closed the connection while filling");
            loco_redis_stop(r);
            return NULL;
        }
        for (size_t i = 0; i < m; i++)
            if (read_reply(r) != 0) {
                snprintf(why, cap, "redis-server refused a SET while filling: %.*s", (int)(r->have - r->at < 80 ? r->have - r->at : 80),
                         r->in + r->at);
                loco_redis_stop(r);
                return NULL;
            }
    }
    return r;
}

double loco_redis_mops(loco_redis_t *r, const loco_ops_t *o, size_t window, long min_ms)
{
    char buf[DSM_CHAN_ACK_BITS * 48];
    uint64_t t0 = dsm_now_ns(), until = t0 + (uint64_t)min_ms * 1000000u, done = 0;
    do {
        done += o->n;
        for (size_t at = 0; at < o->n; at += window) {
            size_t end = at + window < o->n ? at + window : o->n, n = 0;
            for (size_t k = at; k < end; k++) n += cmd(buf + n, o->put[k], loco_key(o->key[k]), o->key[k] + k);
            if (send_all(r->fd, buf, n) != 0)
                return -1;
            for (size_t k = at; k < end; k++)
                if (read_reply(r) != 0)
                    return -1;   /* an error, or a key that was set is missing */
        }
    } while (dsm_now_ns() < until);
    return (double)done / ((double)(dsm_now_ns() - t0) / 1e3);
}

void loco_redis_stop(loco_redis_t *r)
{
    if (r == NULL)
        return;
    if (r->fd >= 0)
        close(r->fd);
    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        waitpid(r->pid, NULL, 0);
        if (running == r->pid)
            running = 0;
    }
    free(r);
}
