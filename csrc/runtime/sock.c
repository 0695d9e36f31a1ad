/* TCP plumbing for the coordinator and its members. */
#include "runtime/sock.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

dsm_status_t dsm_sock_parse(const char *hostport, char *host, size_t host_cap, uint16_t *port)
{
    if (!hostport) return DSM_ERR_INVALID;
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= host_cap) return DSM_ERR_INVALID;
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || p < 0 || p > 65535) return DSM_ERR_INVALID;
    size_t n = (size_t)(colon - hostport);
    /* Accept "[::1]:port" as well as "host:port". */
    if (n >= 2 && hostport[0] == '[' && hostport[n - 1] == ']') {
        memcpy(host, hostport + 1, n - 2);
        host[n - 2] = '\0';
    } else {
        memcpy(host, hostport, n);
        host[n] = '\0';
    }
    *port = (uint16_t)p;
    return DSM_OK;
}

static dsm_status_t resolve(const char *hostport, int passive, struct addrinfo **out)
{
    char host[256], service[8];
    uint16_t port;
    if (dsm_sock_parse(hostport, host, sizeof host, &port) != DSM_OK) {
        DSM_ERROR("sock", "bad address '%s' (want host:port)", hostport ? hostport : "(null)");
        return DSM_ERR_INVALID;
    }
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    int rc = getaddrinfo(host[0] ? host : NULL, service, &hints, out);
    if (rc != 0) {
        DSM_ERROR("sock", "cannot resolve '%s': %s", hostport, gai_strerror(rc));
        return DSM_ERR_INVALID;
    }
    return DSM_OK;
}

dsm_status_t dsm_sock_listen(const char *hostport, int *fd_out, uint16_t *port_out)
{
    struct addrinfo *ai;
    dsm_status_t st = resolve(hostport, 1, &ai);
    if (st != DSM_OK) return st;
    int fd = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        DSM_ERROR("sock", "cannot listen on '%s': %s", hostport, strerror(errno));
        return DSM_ERR_IO;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return DSM_OK;
}

void dsm_sock_set_timeouts(int fd, uint32_t send_ms)
{
    struct timeval tv = {.tv_sec = send_ms / 1000, .tv_usec = (send_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

dsm_status_t dsm_sock_connect(const char *hostport, uint32_t timeout_ms, int *fd_out)
{
    uint64_t deadline = dsm_now_ms() + timeout_ms;
    for (;;) {
        struct addrinfo *ai;
        dsm_status_t st = resolve(hostport, 0, &ai);
        if (st != DSM_OK) return st;
        int fd = -1, err = 0;
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
            fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
            if (fd < 0) continue;
            if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
            err = errno;
            close(fd);
            fd = -1;
        }
        freeaddrinfo(ai);
        if (fd >= 0) {
            dsm_sock_set_timeouts(fd, 5000);
            *fd_out = fd;
            return DSM_OK;
        }
        /* The coordinator may still be starting: retry until the deadline. */
        if (dsm_now_ms() >= deadline) {
            DSM_ERROR("sock", "cannot connect to coordinator %s: %s", hostport, strerror(err));
            return DSM_ERR_IO;
        }
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

dsm_status_t dsm_sock_send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? DSM_ERR_TIMEOUT : DSM_ERR_IO;
        }
        p += n;
        len -= (size_t)n;
    }
    return DSM_OK;
}

dsm_status_t dsm_sock_recv_all(int fd, void *buf, size_t len, uint32_t timeout_ms)
{
    char *p = buf;
    while (len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int rc = poll(&pfd, 1, timeout_ms == DSM_SOCK_FOREVER ? -1 : timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms);
        if (rc < 0) {
            if (errno == EINTR) continue;
            return DSM_ERR_IO;
        }
        if (rc == 0) return DSM_ERR_TIMEOUT;
        ssize_t n = recv(fd, p, len, 0);
        if (n == 0) return DSM_ERR_CLOSED;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return DSM_ERR_IO;
        }
        p += n;
        len -= (size_t)n;
    }
    return DSM_OK;
}
