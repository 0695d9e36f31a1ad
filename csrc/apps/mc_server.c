/* The memcached text-protocol server on the delegated key-value store
 * (§2.7). Socket workers are runtime threads running an epoll loop in their
 * main fiber; every command becomes one asynchronous apply_then to the shard
 * that owns the key, and the worker moves on to the next command at once.
 * Shards of different trustees answer out of order, so each connection keeps
 * a FIFO of response slots filled by the continuations and writes only its
 * ready prefix: clients see memcached's in-order responses. Connections are
 * dealt to the workers in turn, as memcached deals them to its threads.
 * Workers sleep in epoll (through the runtime's idle wait) when there is
 * nothing to do. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "apps/kv.h"
#include "apps/mc_proto.h"
#include "apps/mc_server.h"
#include "dsm/log.h"

typedef struct conn conn_t;
typedef struct worker worker_t;

typedef struct resp {
    struct resp *next;
    conn_t *c;
    int ready;
    int suppress;      /* noreply: produce nothing */
    unsigned expect;   /* continuations still to come (flush_all: one per shard) */
    uint64_t seq;      /* its place among the connection's responses */
    size_t len, cap;
    char *buf;
    char small[48];
} resp_t;

struct conn {
    int fd;
    worker_t *w;
    char *rbuf;
    size_t rlen, rcap;
    resp_t *head, *tail;
    size_t head_off;        /* bytes of head already written */
    uint64_t pending;       /* continuations not yet run */
    int read_closed;        /* EOF or error: drop everything once pending == 0 */
    int close_after_write;  /* "quit" */
    int want_out;
    int dirty;
    conn_t *next_dirty;
    conn_t *next_all, *prev_all;
    /* a storage command waiting for its data block */
    int awaiting;
    mc_cmd_t cmd;
    char key[MC_KEY_MAX + 1];
    uint64_t swallow;
    uint64_t resp_seq;      /* responses made so far */
    uint64_t sent_through;  /* while swallowing, responses up to this one (the last get's) still go */
    int spoke;              /* a command line was read: the binary magic is text from then on */
    conn_t *next_new;       /* on its worker's hand-over list until the worker takes it */
};

struct worker {
    dsm_mc_server_t *srv;
    int ep;
    int evicting;           /* a KV_EVICT of this worker is in flight */
    conn_t *dirty;
    conn_t *all;
    /* cross-thread: connections another worker accepted for this one */
    _Atomic(conn_t *) handed;
    /* cross-thread, written by this worker only: what `stats workers` shows */
    _Atomic uint64_t curr_conns, commands, polls, blocking_polls;
    /* the delegation runtime's for this worker's thread (dsm_deleg_counters):
     * commands handed to the other workers' shards, commands served for
     * them, and wake-ups given to a worker asleep */
    _Atomic uint64_t handed_off, served_for_others, wakeups;
};

struct dsm_mc_server {
    dsm_mc_config_t cfg;
    int lfd;
    uint16_t port;
    dsm_deleg_rt_t *rt;
    dsm_kv_t *kv;
    worker_t *workers;
    _Atomic int stop;
    _Atomic uint64_t total_conns;
    _Atomic uint64_t curr_conns;
    _Atomic uint64_t rejected_conns;
    _Atomic uint64_t next_worker; /* connections dispatched so far: the next goes to this modulo workers */
    time_t started;
};

/* Add to a counter only its worker writes (others read it). */
static void bump(_Atomic uint64_t *v, int64_t by)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + (uint64_t)by, memory_order_relaxed);
}

/* ---- responses ---- */

static resp_t *resp_new(conn_t *c, int suppress)
{
    resp_t *r = malloc(sizeof *r);
    if (!r) return NULL;
    r->next = NULL;
    r->c = c;
    r->ready = 0;
    r->suppress = suppress;
    r->expect = 1;
    r->seq = ++c->resp_seq;
    r->len = 0;
    r->cap = sizeof r->small;
    r->buf = r->small;
    if (c->tail) c->tail->next = r;
    else c->head = r;
    c->tail = r;
    return r;
}

static void resp_append(resp_t *r, const void *data, size_t len)
{
    if (r->suppress || len == 0) return;
    if (r->len + len > r->cap) {
        size_t cap = r->cap * 2;
        while (cap < r->len + len) cap *= 2;
        char *n = malloc(cap);
        if (!n) return; /* drop the bytes; the client will see a short answer */
        memcpy(n, r->buf, r->len);
        if (r->buf != r->small) free(r->buf);
        r->buf = n;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, data, len);
    r->len += len;
}

static void resp_free(resp_t *r)
{
    if (r->buf != r->small) free(r->buf);
    free(r);
}

static void mark_dirty(conn_t *c)
{
    if (c->dirty) return;
    c->dirty = 1;
    c->next_dirty = c->w->dirty;
    c->w->dirty = c;
}

static void reply_now(conn_t *c, const char *text, int suppress)
{
    resp_t *r = resp_new(c, suppress);
    if (!r) return;
    resp_append(r, text, strlen(text));
    r->ready = 1;
    mark_dirty(c);
}

/* Continuation of every delegated command: runs on this worker's thread. */
static void on_reply(void *arg, dsm_status_t st, const void *data, size_t len)
{
    resp_t *r = arg;
    conn_t *c = r->c;
    c->pending--;
    if (st != DSM_OK) {
        resp_append(r, "SERVER_ERROR delegation failed\r\n", 32);
    } else if (r->expect > 1) {
        r->expect--; /* flush_all: answer once, when every shard is done */
        return;
    } else {
        resp_append(r, data, len);
    }
    r->expect = 0;
    r->ready = 1;
    mark_dirty(c);
}

static void delegate_meta(conn_t *c, const kv_env_t *env, const char *key, const mc_meta_t *meta, const void *val,
                          size_t vlen, int suppress)
{
    resp_t *r = resp_new(c, suppress);
    if (!r) return;
    if (env->op == KV_FLUSH) r->expect = dsm_kv_shards(c->w->srv->kv);
    c->pending += r->expect;
    dsm_status_t st = dsm_kv_mc_then(c->w->srv->kv, env, key, meta, val, vlen, on_reply, r);
    if (st != DSM_OK) {
        c->pending -= r->expect;
        resp_append(r, "SERVER_ERROR out of memory\r\n", 28);
        r->ready = 1;
        mark_dirty(c);
    }
}

static void delegate(conn_t *c, const kv_env_t *env, const char *key, const void *val, size_t vlen, int suppress)
{
    delegate_meta(c, env, key, NULL, val, vlen, suppress);
}

/* ---- connections ---- */

static void conn_free(conn_t *c)
{
    worker_t *w = c->w;
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    while (c->head) {
        resp_t *r = c->head;
        c->head = r->next;
        resp_free(r);
    }
    if (c->prev_all) c->prev_all->next_all = c->next_all;
    else w->all = c->next_all;
    if (c->next_all) c->next_all->prev_all = c->prev_all;
    free(c->rbuf);
    free(c);
    atomic_fetch_sub(&w->srv->curr_conns, 1);
    bump(&w->curr_conns, -1);
}

static void set_out(conn_t *c, int on)
{
    if (c->want_out == on) return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(c->w->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

/* Write the ready prefix of the response queue. Returns -1 if the conn died. */
/* Whether r may be written now: while a too-large value is swallowed,
 * memcached sends what came up to its last retrieval and holds the rest. */
static int resp_sendable(const conn_t *c, const resp_t *r)
{
    return r->ready && (!c->swallow || r->seq <= c->sent_through);
}

static int conn_flush(conn_t *c)
{
    for (;;) {
        struct iovec iov[64];
        int n = 0;
        size_t total = 0, off = c->head_off;
        for (resp_t *r = c->head; r && resp_sendable(c, r) && n < 64; r = r->next, off = 0) {
            if (r->len <= off) continue;
            iov[n].iov_base = r->buf + off;
            iov[n].iov_len = r->len - off;
            total += iov[n].iov_len;
            n++;
        }
        ssize_t w = 0;
        if (n > 0) {
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
            w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    set_out(c, 1);
                    return 0;
                }
                c->read_closed = 1;
                return -1;
            }
        }
        /* retire what was written (and ready empty responses) */
        size_t done = (size_t)w;
        while (c->head && resp_sendable(c, c->head)) {
            resp_t *r = c->head;
            size_t left = r->len - c->head_off;
            if (done < left) {
                c->head_off += done;
                break;
            }
            done -= left;
            c->head = r->next;
            if (!c->head) c->tail = NULL;
            c->head_off = 0;
            resp_free(r);
        }
        if (n == 0) break;
        if ((size_t)w < total) {
            set_out(c, 1);
            return 0;
        }
    }
    set_out(c, 0);
    return 0;
}

/* `stats workers`, not memcached's: how this server's workers share the
 * connections and the work (one entry per worker, so no fixed buffer), and
 * how they wait when idle (--progress). */
static void stats_workers(conn_t *c)
{
    dsm_mc_server_t *srv = c->w->srv;
    resp_t *r = resp_new(c, 0);
    if (!r) return;
    for (unsigned i = 0; i < srv->cfg.workers; i++) {
        worker_t *w = &srv->workers[i];
        const struct { const char *name; _Atomic uint64_t *v; } st[] = {
            {"curr_connections", &w->curr_conns}, {"commands", &w->commands},
            {"polls", &w->polls}, {"blocking_polls", &w->blocking_polls}, {"handed_off", &w->handed_off},
            {"served_for_others", &w->served_for_others}, {"wakeups", &w->wakeups}};
        for (size_t k = 0; k < sizeof st / sizeof st[0]; k++) {
            char line[96];
            int n = snprintf(line, sizeof line, "STAT worker:%u:%s %llu\r\n", i, st[k].name,
                             (unsigned long long)atomic_load_explicit(st[k].v, memory_order_relaxed));
            resp_append(r, line, (size_t)n);
        }
        char line[64];
        int n = snprintf(line, sizeof line, "STAT worker:%u:progress %s\r\n", i, dsm_progress_name(srv->cfg.progress));
        resp_append(r, line, (size_t)n);
    }
    resp_append(r, "END\r\n", 5);
    r->ready = 1;
    mark_dirty(c);
}

/* `stats` and its groups, in memcached's names (the values this server
 * has; there are no slab classes: items count as one class). */
static void stats_reply(conn_t *c, const char *group)
{
    dsm_mc_server_t *srv = c->w->srv;
    char buf[1024];
    unsigned long long items = dsm_kv_approx_items(srv->kv);
    uint64_t bytes, evictions;
    dsm_kv_memory_stats(srv->kv, &bytes, &evictions);
    if (!group) {
        snprintf(buf, sizeof buf,
                 "STAT pid %d\r\nSTAT uptime %ld\r\nSTAT time %ld\r\nSTAT version 1.6.18-dsm-deleg\r\n"
                 "STAT max_connections %u\r\nSTAT curr_connections %llu\r\nSTAT total_connections %llu\r\n"
                 "STAT rejected_connections %llu\r\nSTAT limit_maxbytes %zu\r\nSTAT threads %u\r\n"
                 "STAT bytes %llu\r\nSTAT curr_items %llu\r\nSTAT evictions %llu\r\nEND\r\n",
                 (int)getpid(), (long)(time(NULL) - srv->started), (long)time(NULL), srv->cfg.max_conns,
                 (unsigned long long)atomic_load(&srv->curr_conns), (unsigned long long)atomic_load(&srv->total_conns),
                 (unsigned long long)atomic_load(&srv->rejected_conns), srv->cfg.memory, srv->cfg.workers,
                 (unsigned long long)bytes, items, (unsigned long long)evictions);
    } else if (strcmp(group, "settings") == 0) {
        snprintf(buf, sizeof buf,
                 "STAT maxbytes %zu\r\nSTAT maxconns %u\r\nSTAT tcpport %u\r\nSTAT udpport 0\r\n"
                 "STAT inter %s\r\nSTAT evictions on\r\nSTAT num_threads %u\r\nSTAT cas_enabled yes\r\n"
                 "STAT item_size_max %zu\r\nSTAT flush_enabled yes\r\nEND\r\n",
                 srv->cfg.memory, srv->cfg.max_conns, (unsigned)srv->port, srv->cfg.host, srv->cfg.workers,
                 srv->cfg.item_max);
    } else if (strcmp(group, "items") == 0) {
        if (items)
            snprintf(buf, sizeof buf, "STAT items:1:number %llu\r\nSTAT items:1:mem_requested %llu\r\n"
                     "STAT items:1:evicted %llu\r\nEND\r\n", items, (unsigned long long)bytes,
                     (unsigned long long)evictions);
        else
            snprintf(buf, sizeof buf, "END\r\n");
    } else if (strcmp(group, "slabs") == 0) {
        snprintf(buf, sizeof buf, "STAT active_slabs %d\r\nSTAT total_malloced %llu\r\nEND\r\n", items ? 1 : 0,
                 (unsigned long long)bytes);
    } else if (strcmp(group, "reset") == 0) {
        snprintf(buf, sizeof buf, "RESET\r\n");
    } else if (strcmp(group, "workers") == 0) {
        stats_workers(c);
        return;
    } else if (strcmp(group, "detail") == 0) {
        snprintf(buf, sizeof buf, "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    } else {
        snprintf(buf, sizeof buf, "ERROR\r\n");
    }
    reply_now(c, buf, 0);
}

static void exec_cmd(conn_t *c, const mc_cmd_t *m, const char *data)
{
    bump(&c->w->commands, 1);
    kv_env_t e = {.flags = m->flags, .exptime = m->exptime, .num = m->num, .klen = (uint32_t)m->klen};
    switch (m->kind) {
    case MC_GET:
    case MC_GETS:
    case MC_GAT:
    case MC_GATS: {
        const char *p = m->keys, *end = m->keys + m->keys_len, *key;
        size_t klen;
        e.op = m->kind == MC_GET ? KV_GET : m->kind == MC_GETS ? KV_GETS : m->kind == MC_GAT ? KV_GAT : KV_GATS;
        while (mc_next_key(&p, end, &key, &klen)) {
            e.klen = (uint32_t)klen;
            delegate(c, &e, key, NULL, 0, 0);
        }
        reply_now(c, "END\r\n", 0);
        c->sent_through = c->resp_seq;
        return;
    }
    case MC_SET: e.op = KV_SET; break;
    case MC_ADD: e.op = KV_ADD; break;
    case MC_REPLACE: e.op = KV_REPLACE; break;
    case MC_APPEND: e.op = KV_APPEND; break;
    case MC_PREPEND: e.op = KV_PREPEND; break;
    case MC_CAS: e.op = KV_CAS; break;
    case MC_DELETE: e.op = KV_DELETE; break;
    case MC_INCR: e.op = KV_INCR; break;
    case MC_DECR: e.op = KV_DECR; break;
    case MC_TOUCH: e.op = KV_TOUCH; break;
    case MC_FLUSH: e.op = KV_FLUSH; break;
    case MC_VERSION:
        reply_now(c, "VERSION 1.6.18-dsm-deleg\r\n", 0);
        return;
    case MC_STATS:
        stats_reply(c, m->key);
        return;
    case MC_MG: case MC_MS: case MC_MD: case MC_MA:
        e.op = (uint8_t)(KV_MG + (m->kind - MC_MG));
        delegate_meta(c, &e, m->key, &m->meta, data, m->kind == MC_MS ? m->vlen : 0, 0);
        return;
    default:
        return;
    }
    delegate(c, &e, m->key, data, m->vlen, m->noreply);
}

/* Parse and run every complete command in the read buffer. */
static void conn_process(conn_t *c)
{
    dsm_mc_server_t *srv = c->w->srv;
    size_t pos = 0;
    while (!c->close_after_write && !c->read_closed) {
        size_t avail = c->rlen - pos;
        if (c->swallow) {
            size_t n = avail < c->swallow ? avail : (size_t)c->swallow;
            pos += n;
            c->swallow -= n;
            if (c->swallow) break;
            continue;
        }
        if (c->awaiting) {
            size_t need = (size_t)c->cmd.vlen + 2;
            if (avail < need) {
                if (c->rcap < pos + need) break; /* the reader grows the buffer */
                break;
            }
            const char *data = c->rbuf + pos;
            if (data[need - 2] != '\r' || data[need - 1] != '\n') {
                reply_now(c, "CLIENT_ERROR bad data chunk\r\n", c->cmd.noreply);
            } else {
                c->cmd.key = c->key;
                exec_cmd(c, &c->cmd, data);
            }
            pos += need;
            c->awaiting = 0;
            continue;
        }
        if (avail == 0) break;
        /* The binary protocol's request magic as a connection's first byte:
         * not spoken here, and read as text it would be answered with
         * errors for what the client meant; close, as memcached does with
         * a protocol it does not take. */
        if (!c->spoke && (uint8_t)c->rbuf[pos] == 0x80) {
            c->read_closed = 1;
            break;
        }
        c->spoke = 1;
        mc_cmd_t m;
        size_t n = mc_parse(c->rbuf + pos, avail, srv->cfg.item_max, &m);
        if (n == 0) break;
        pos += n;
        switch (m.kind) {
        case MC_CLOSE:
            if (n == avail && avail > MC_LINE_SOFT && !memchr(c->rbuf + pos - n, '\n', n)) c->read_closed = 1;
            else c->close_after_write = 1;
            break;
        case MC_REPLY:
            if (m.reply || m.noreply) reply_now(c, m.reply ? m.reply : "", 1 - (m.reply != NULL));
            if (m.swallow) {
                c->swallow = m.swallow;
                if (m.delete_key) {
                    kv_env_t e = {.op = KV_DELETE, .klen = (uint32_t)m.klen};
                    delegate(c, &e, m.key, NULL, 0, 1);
                }
            }
            break;
        case MC_SET: case MC_ADD: case MC_REPLACE: case MC_APPEND: case MC_PREPEND: case MC_CAS: case MC_MS:
            c->awaiting = 1;
            c->cmd = m;
            memcpy(c->key, m.key, m.klen);
            break;
        default:
            exec_cmd(c, &m, NULL);
        }
    }
    if (pos > 0) {
        memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
        c->rlen -= pos;
    }
}

static void conn_read(conn_t *c)
{
    for (;;) {
        size_t want = 16384;
        if (c->awaiting && (size_t)c->cmd.vlen + 2 > want) want = (size_t)c->cmd.vlen + 2;
        if (c->rcap - c->rlen < want / 2 || c->rcap < want) {
            size_t cap = c->rcap ? c->rcap : 16384;
            while (cap - c->rlen < want / 2 || cap < want) cap *= 2;
            if (cap > c->rcap) {
                char *n = realloc(c->rbuf, cap);
                if (!n) {
                    c->read_closed = 1;
                    return;
                }
                c->rbuf = n;
                c->rcap = cap;
            }
        }
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
        if (r > 0) {
            c->rlen += (size_t)r;
            conn_process(c);
            if (c->read_closed || c->close_after_write) break;
            if ((size_t)r < want / 4) break; /* drained, most likely */
            continue;
        }
        if (r == 0) {
            c->read_closed = 1; /* also a client that vanished mid-value */
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            c->read_closed = 1;
        }
        break;
    }
    mark_dirty(c);
}

/* A connection joins its worker: on its list, counted. */
static void conn_link(worker_t *w, conn_t *c)
{
    c->next_all = w->all;
    if (w->all) w->all->prev_all = c;
    w->all = c;
    bump(&w->curr_conns, 1);
}

/* Connections go to the workers in turn, whichever worker accepted them, as
 * memcached's dispatcher deals them to its threads: the split is then known
 * (N connections: N / workers each, give or take one) rather than whatever
 * worker woke first taking every connection that was queued. One handed to
 * another worker goes on that worker's list first and into its epoll set
 * second, so by the time the worker sees an event of it, it finds it on the
 * list; the epoll set also wakes it if it sleeps. */
static void dispatch(worker_t *self, conn_t *c)
{
    dsm_mc_server_t *srv = self->srv;
    worker_t *w = &srv->workers[atomic_fetch_add(&srv->next_worker, 1) % srv->cfg.workers];
    c->w = w;
    if (w == self) conn_link(w, c);
    else {
        conn_t *head = atomic_load_explicit(&w->handed, memory_order_relaxed);
        do c->next_new = head;
        while (!atomic_compare_exchange_weak_explicit(&w->handed, &head, c, memory_order_release,
                                                      memory_order_relaxed));
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev);
}

/* Take the connections other workers handed to this one. */
static void take_handed(worker_t *w)
{
    if (!atomic_load_explicit(&w->handed, memory_order_relaxed)) return;
    conn_t *c = atomic_exchange_explicit(&w->handed, NULL, memory_order_acquire);
    while (c) {
        conn_t *next = c->next_new;
        conn_link(w, c);
        c = next;
    }
}

static void accept_all(worker_t *w)
{
    for (;;) {
        int fd = accept4(w->srv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (atomic_fetch_add(&w->srv->curr_conns, 1) >= w->srv->cfg.max_conns) {
            /* memcached's answer at maxconns (maxconns_fast) */
            static const char full[] = "ERROR Too many open connections\r\n";
            ssize_t unused = send(fd, full, sizeof full - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)unused;
            close(fd);
            atomic_fetch_sub(&w->srv->curr_conns, 1);
            atomic_fetch_add(&w->srv->rejected_conns, 1);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            atomic_fetch_sub(&w->srv->curr_conns, 1);
            continue;
        }
        c->fd = fd;
        atomic_fetch_add(&w->srv->total_conns, 1);
        dispatch(w, c);
    }
}

/* Write what is ready; free connections that are finished. */
static int service_dirty(worker_t *w)
{
    int did = 0;
    while (w->dirty) {
        conn_t *c = w->dirty;
        w->dirty = c->next_dirty;
        c->dirty = 0;
        did = 1;
        if (!c->read_closed) conn_flush(c);
        if ((c->read_closed || (c->close_after_write && !c->head)) && c->pending == 0) {
            conn_free(c);
            continue;
        }
        if (c->read_closed && c->pending) {
            /* keep the response slots until their continuations ran */
        }
    }
    return did;
}

static void on_evicted(void *arg, dsm_status_t st, const void *data, size_t len)
{
    (void)st, (void)data, (void)len;
    ((worker_t *)arg)->evicting = 0;
}

/* Over the memory limit after stores whose shards had too little to evict:
 * one eviction at a time per worker, on the fullest shard, until within. */
static void keep_limit(worker_t *w)
{
    if (w->evicting) return;
    int shard = dsm_kv_over_limit(w->srv->kv);
    if (shard < 0) return;
    w->evicting = 1;
    if (dsm_kv_evict_then(w->srv->kv, (unsigned)shard, on_evicted, w) != DSM_OK) w->evicting = 0;
}

static void worker_main(void *arg, unsigned widx)
{
    dsm_mc_server_t *srv = arg;
    worker_t *w = &srv->workers[widx];
    struct epoll_event lev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL};
    epoll_ctl(w->ep, EPOLL_CTL_ADD, srv->lfd, &lev);
    struct epoll_event evs[64];
    int idle = 0;
    while (!atomic_load_explicit(&srv->stop, memory_order_acquire)) {
        /* After a round that found nothing, sleep in the poll itself until
         * a socket or the runtime has something for this worker: spinning
         * pays only with a core to spare, and here it kept the core from the
         * clients and from the other worker this one waited for (each idle
         * round also cost an epoll_wait). */
        int n = dsm_deleg_idle_epoll(w->ep, evs, 64, idle ? 50 : 0);
        bump(&w->polls, 1);
        if (idle) bump(&w->blocking_polls, 1);
        take_handed(w);
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if (!c) {
                accept_all(w);
                continue;
            }
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) conn_read(c);
            if (evs[i].events & EPOLLOUT) mark_dirty(c);
        }
        int did = service_dirty(w);
        dsm_deleg_yield(); /* the delegation step: publish, serve, run continuations */
        did |= service_dirty(w);
        keep_limit(w);
        idle = n <= 0 && !did;
        dsm_deleg_counters_t dc;
        dsm_deleg_counters(&dc);
        atomic_store_explicit(&w->handed_off, dc.handed, memory_order_relaxed);
        atomic_store_explicit(&w->served_for_others, dc.served, memory_order_relaxed);
        atomic_store_explicit(&w->wakeups, dc.wakeups, memory_order_relaxed);
    }
    /* shutting down: wait for every continuation, then drop the connections */
    for (;;) {
        uint64_t pending = 0;
        for (conn_t *c = w->all; c; c = c->next_all) pending += c->pending;
        if (!pending && !w->evicting) break;
        dsm_deleg_yield();
    }
    take_handed(w);
    while (w->all) conn_free(w->all);
}

/* ---- lifecycle ---- */

/* After the workers stopped: a connection handed to a worker after it took
 * its last ones is closed here, then the epoll sets. */
static void close_workers(dsm_mc_server_t *srv)
{
    if (!srv->workers) return;
    for (unsigned i = 0; i < srv->cfg.workers; i++) {
        worker_t *w = &srv->workers[i];
        for (conn_t *c = atomic_exchange(&w->handed, NULL), *next; c; c = next) {
            next = c->next_new;
            close(c->fd);
            free(c);
        }
        if (w->ep >= 0) close(w->ep);
    }
    free(srv->workers);
}

dsm_status_t dsm_mc_start(const dsm_mc_config_t *cfg_in, dsm_mc_server_t **out)
{
    if (!cfg_in || !out) return DSM_ERR_INVALID;
    dsm_mc_server_t *srv = calloc(1, sizeof *srv);
    if (!srv) return DSM_ERR_NOMEM;
    srv->cfg = *cfg_in;
    dsm_mc_config_t *cfg = &srv->cfg;
    if (!cfg->host) cfg->host = "127.0.0.1";
    if (!cfg->workers) cfg->workers = 1;
    if (!cfg->shards) cfg->shards = 64;
    if (!cfg->item_max) cfg->item_max = 1024 * 1024;
    if (!cfg->memory) cfg->memory = (size_t)64 << 20;
    if (!cfg->max_conns) cfg->max_conns = 1024;
    srv->started = time(NULL);
    srv->lfd = -1;
    dsm_status_t st = DSM_ERR_IO;
    srv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (srv->lfd < 0) goto fail;
    int one = 1;
    setsockopt(srv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(cfg->port)};
    if (inet_pton(AF_INET, cfg->host, &a.sin_addr) != 1) {
        st = DSM_ERR_INVALID;
        goto fail;
    }
    if (bind(srv->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(srv->lfd, 1024) != 0) {
        DSM_WARN("apps", "memcached: cannot listen on %s:%u: %s", cfg->host, cfg->port, strerror(errno));
        goto fail;
    }
    socklen_t alen = sizeof a;
    getsockname(srv->lfd, (struct sockaddr *)&a, &alen);
    srv->port = ntohs(a.sin_port);
    dsm_deleg_config_t rc = {.threads = cfg->trustees + cfg->workers, .dedicated = cfg->trustees,
                             .pin = cfg->pin, .idle_sleep = 1, .idle_progress = cfg->progress};
    st = dsm_deleg_rt_create(&rc, &srv->rt);
    if (st != DSM_OK) goto fail;
    st = cfg->trustees ? dsm_kv_create(srv->rt, cfg->shards, 0, cfg->trustees, &srv->kv)
                       : dsm_kv_create(srv->rt, cfg->shards, 0, cfg->workers, &srv->kv);
    if (st != DSM_OK) goto fail;
    dsm_kv_set_memory(srv->kv, cfg->memory);
    srv->workers = calloc(cfg->workers, sizeof *srv->workers);
    if (!srv->workers) {
        st = DSM_ERR_NOMEM;
        goto fail;
    }
    /* every epoll set exists before any worker runs: one may hand another a
     * connection before that one has started */
    for (unsigned i = 0; i < cfg->workers; i++) srv->workers[i].ep = -1;
    for (unsigned i = 0; i < cfg->workers; i++) {
        srv->workers[i].srv = srv;
        srv->workers[i].ep = epoll_create1(EPOLL_CLOEXEC);
        if (srv->workers[i].ep < 0) {
            st = DSM_ERR_IO;
            goto fail;
        }
    }
    st = dsm_deleg_rt_start(srv->rt, worker_main, srv);
    if (st != DSM_OK) goto fail;
    *out = srv;
    return DSM_OK;
fail:
    if (srv->kv) dsm_kv_destroy(srv->kv);
    if (srv->rt) dsm_deleg_rt_destroy(srv->rt);
    if (srv->lfd >= 0) close(srv->lfd);
    close_workers(srv);
    free(srv);
    return st;
}

uint16_t dsm_mc_port(const dsm_mc_server_t *srv) { return srv->port; }

void dsm_mc_stop(dsm_mc_server_t *srv)
{
    if (!srv) return;
    atomic_store(&srv->stop, 1);
    dsm_deleg_rt_wake(srv->rt);
    dsm_deleg_rt_join(srv->rt);
    dsm_kv_destroy(srv->kv);
    dsm_deleg_rt_destroy(srv->rt);
    close(srv->lfd);
    close_workers(srv);
    free(srv);
}

dsm_status_t dsm_mc_serve(const dsm_mc_config_t *cfg)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old); /* inherited by the runtime's threads */
    dsm_mc_server_t *srv;
    dsm_status_t st = dsm_mc_start(cfg, &srv);
    if (st != DSM_OK) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return st;
    }
    printf("listening on %s:%u\n", srv->cfg.host, (unsigned)srv->port);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    dsm_mc_stop(srv);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return DSM_OK;
}
