/* The coordinator: one thread polling a listening socket and one connection
 * per member. It authenticates joins, guards ranks, keeps the member table,
 * tells everyone about joins and deaths, runs barriers over the daemons and
 * declares members dead when their heartbeats stop. Connections are read
 * without blocking into per-connection buffers, so a slow or hostile client
 * cannot stall the others.
 *
 * Before a connection authenticates it costs a few bytes and nothing it
 * declares: at most MAX_PENDING of them in all and MAX_PENDING_PER_SOURCE
 * from one address, each for HELLO_TIMEOUT_MS, reading at most a hello's
 * length. A newcomer over either bound displaces the oldest unauthenticated
 * connection (of its address, or of all), which is told why: an attacker
 * holding connections open cannot keep a prompt client out, and the table
 * always has room for every member rank.
 *
 * Failed joins (a wrong secret) are remembered per source address: after
 * BACKOFF_AFTER of them a new connection from that address gets its
 * challenge only after a delay doubling per failure up to BACKOFF_MAX_MS,
 * so guessing the secret runs at a few tries a second at most, while a
 * real joiner there is only delayed. Refusals are logged once per source,
 * then as a summary every SUMMARY_MS, so a flood cannot fill the log. */
#include "dsm/coord.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dsm/fabric.h"
#include "dsm/node.h"
#include "runtime/addr_check.h"
#include "runtime/auth.h"
#include "runtime/ctl_seal.h"
#include "runtime/ctl_wire.h"
#include "runtime/sock.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/thread.h"

enum {
    MAX_PENDING = 64,
    MAX_PENDING_PER_SOURCE = 16,
    MAX_CONNS = DSM_MAX_RANKS + MAX_PENDING,
    HELLO_TIMEOUT_MS = 3000,
    /* a first check includes the checker's fabric start-up (slow under
     * sanitizers); a verdict on a started checker takes about a millisecond */
    ADDR_CHECK_TIMEOUT_MS = 20000,
    SOURCE_LEN = INET6_ADDRSTRLEN,
    MAX_SOURCES = 32,          /* failing sources remembered (least recent replaced) */
    BACKOFF_AFTER = 3,         /* failures from a source before it is slowed */
    BACKOFF_BASE_MS = 25,
    BACKOFF_MAX_MS = 500,
    SUMMARY_MS = 10000,        /* a source's refusals are summarised this often */
    SOURCE_FORGET_MS = 60000,  /* a source quiet this long starts afresh */
};

/* Failed joins from one address. */
typedef struct source_rec {
    char source[SOURCE_LEN];   /* empty: unused */
    uint32_t fails;            /* since the source was last quiet */
    uint32_t unlogged;         /* refusals since the last log line */
    uint64_t last_fail_ms, logged_ms;
} source_rec_t;

/* A member that said LEAVE is out of the table at once, but its
 * connection stays, LEAVING: once every member that was told of the
 * departure has acknowledged it (or is gone), or the peer timeout passed,
 * it is sent LEFT for its own rank (released), and it closes the
 * connection itself. Until then it still acknowledges others' departures. */
typedef enum { CONN_AWAIT_HELLO, CONN_MEMBER, CONN_LEAVING } conn_state_t;

typedef struct conn {
    int fd;
    conn_state_t state;
    uint8_t nonce[DSM_CTL_NONCE_LEN];
    uint64_t hello_deadline;
    uint64_t challenge_at;   /* nonzero: the challenge is held back until then */
    uint64_t accepted;     /* order of arrival, to find the oldest */
    char source[SOURCE_LEN]; /* the peer's address, without the port */
    uint64_t last_seen;
    int rank;              /* valid once a member */
    uint16_t kind;
    uint8_t *addr;         /* owned copies of the table entry */
    uint32_t addr_len;
    dsm_ctl_values_t *values;
    int announced;         /* the others have been told about this member */
    int acks_missing;      /* members that have not yet acknowledged this one */
    int ready;             /* READY sent */
    uint8_t *buf;          /* unparsed input */
    size_t len, cap;
    int sealed;            /* from the WELCOME on, every frame both ways is sealed */
    dsm_ctl_session_t session;
    uint64_t frames_refused; /* sealed frames that failed their check, dropped */
    /* LEAVING: by rank, the connection (its `accepted`) that still owes a
     * LEFT_ACK, else 0; how many; until when; whether released */
    uint64_t *owed;
    int owed_count;
    uint64_t leave_deadline;
    int released;
    /* MEMBER: a transport failure between this member and another (by its
     * rank and `accepted`), reported at evict_at - peer timeout; if both
     * are still members then, this one is declared dead (0: none) */
    uint64_t evict_at;
    int evict_other_rank;
    uint64_t evict_other;
} conn_t;

struct dsm_coord {
    char *secret;
    uint32_t peer_timeout_ms;
    dsm_transport_t transport;
    dsm_addr_checker_t checker;   /* proves joiners' worker addresses */
    int listen_fd;
    int wake[2];
    uint16_t port;
    pthread_t thread;
    atomic_int stopping;
    pthread_mutex_t lock;      /* guards counts read by other threads */
    conn_t *conns[MAX_CONNS];
    conn_t *by_rank[DSM_MAX_RANKS];
    uint32_t members, daemons;
    uint64_t accepted;         /* connections accepted so far */
    atomic_uint_fast64_t refused;
    uint64_t barrier_epoch;    /* last released epoch */
    uint8_t barrier_arrived[DSM_MAX_RANKS];
    source_rec_t sources[MAX_SOURCES];
};

static void send_msg(dsm_coord_t *c, conn_t *conn, const dsm_ctl_msg_t *msg);
static void drop_conn(dsm_coord_t *c, int index, const char *why);
static void drop_member(dsm_coord_t *c, int index, const char *why, uint16_t announce);
static void owe_no_more(dsm_coord_t *c, int rank, const conn_t *by);

static void conn_free(conn_t *conn)
{
    if (conn->fd >= 0) close(conn->fd);
    free(conn->addr);
    free(conn->values);
    free(conn->buf);
    free(conn->owed);
    free(conn);
}

static dsm_ctl_msg_t member_msg(const conn_t *m)
{
    dsm_ctl_msg_t msg = {.type = DSM_CTL_MEMBER};
    msg.u.member = (dsm_ctl_member_t){.rank = m->rank, .kind = m->kind,
                                      .addr = m->addr, .addr_len = m->addr_len,
                                      .values = *m->values};
    if (m->ready) msg.u.member.flags = DSM_CTL_MEMBER_READY_FLAG;
    return msg;
}

static void refuse(dsm_coord_t *c, conn_t *conn, dsm_status_t status, const char *reason)
{
    dsm_ctl_msg_t msg = {.type = DSM_CTL_REFUSE};
    msg.u.refuse.status = status;
    snprintf(msg.u.refuse.reason, sizeof msg.u.refuse.reason, "%s", reason);
    /* counted first: whoever is refused may look at the count at once */
    atomic_fetch_add(&c->refused, 1);
    send_msg(c, conn, &msg);
}

static int index_of(dsm_coord_t *c, conn_t *conn)
{
    for (int i = 0; i < MAX_CONNS; i++)
        if (c->conns[i] == conn) return i;
    return -1;
}

static void send_msg(dsm_coord_t *c, conn_t *conn, const dsm_ctl_msg_t *msg)
{
    (void)c;
    dsm_writer_t w = {0};
    if (conn->state == CONN_AWAIT_HELLO) {
        /* A challenge or a refusal, a few bytes into an empty socket buffer:
         * never wait on a peer that has not authenticated. */
        if (dsm_ctl_encode(msg, &w) == DSM_OK && conn->fd >= 0) {
            ssize_t unused = send(conn->fd, w.buf, w.len, MSG_DONTWAIT | MSG_NOSIGNAL);
            (void)unused;
        }
    } else if (dsm_ctl_encode(msg, &w) == DSM_OK && conn->fd >= 0 &&
               (!conn->sealed || dsm_ctl_seal(&conn->session, DSM_CTL_TO_MEMBER, &w, 0) == DSM_OK) &&
               dsm_sock_send_all(conn->fd, w.buf, w.len) != DSM_OK) {
        /* A member that cannot take a message within the send timeout is as
         * good as dead; the poll loop sees the closed fd and reports it. */
        shutdown(conn->fd, SHUT_RDWR);
    }
    dsm_writer_free(&w);
}

static void broadcast(dsm_coord_t *c, const dsm_ctl_msg_t *msg, const conn_t *except)
{
    for (int r = 0; r < DSM_MAX_RANKS; r++)
        if (c->by_rank[r] && c->by_rank[r] != except) send_msg(c, c->by_rank[r], msg);
}

static void maybe_ready(dsm_coord_t *c, conn_t *conn)
{
    if (conn->ready || !conn->announced || conn->acks_missing > 0) return;
    dsm_ctl_msg_t msg = {.type = DSM_CTL_READY};
    send_msg(c, conn, &msg);
    conn->ready = 1;
    /* and the others may now count on it: a client that sees a daemon ready
     * can hand work to it that involves any other ready member */
    dsm_ctl_msg_t all = {.type = DSM_CTL_MEMBER_READY};
    all.u.dead.rank = (uint32_t)conn->rank;
    broadcast(c, &all, conn);
}

/* Release the pending barrier if every live daemon has arrived. */
static void maybe_release_barrier(dsm_coord_t *c, dsm_status_t status)
{
    int any = 0;
    for (int r = 0; r < DSM_MAX_DAEMONS; r++) {
        if (c->barrier_arrived[r]) any = 1;
        else if (c->by_rank[r] && status == DSM_OK) return;
    }
    if (!any) return;
    dsm_ctl_msg_t msg = {.type = DSM_CTL_BARRIER_DONE};
    msg.u.barrier.epoch = c->barrier_epoch + 1;
    msg.u.barrier.status = status;
    for (int r = 0; r < DSM_MAX_DAEMONS; r++) {
        if (c->barrier_arrived[r] && c->by_rank[r]) send_msg(c, c->by_rank[r], &msg);
        c->barrier_arrived[r] = 0;
    }
    c->barrier_epoch++;
}

static int pick_rank(dsm_coord_t *c, uint16_t kind, int32_t wanted)
{
    int lo = kind == DSM_MEMBER_DAEMON ? 0 : DSM_FIRST_CLIENT_RANK;
    int hi = kind == DSM_MEMBER_DAEMON ? DSM_MAX_DAEMONS : DSM_MAX_RANKS;
    if (wanted != DSM_RANK_ANY) return wanted >= lo && wanted < hi ? wanted : -2;
    for (int r = lo; r < hi; r++)
        if (!c->by_rank[r]) return r;
    return -3;
}

static source_rec_t *source_find(dsm_coord_t *c, const char *source)
{
    for (int i = 0; i < MAX_SOURCES; i++)
        if (c->sources[i].source[0] && strcmp(c->sources[i].source, source) == 0) return &c->sources[i];
    return NULL;
}

/* A join from source failed authentication: count it, log it (the first
 * at once, the rest in tick's summary) and lengthen its backoff. */
static void source_failed(dsm_coord_t *c, const char *source, uint64_t now)
{
    source_rec_t *r = source_find(c, source);
    if (!r) {
        r = &c->sources[0];
        for (int i = 0; i < MAX_SOURCES; i++) {
            if (!c->sources[i].source[0]) { r = &c->sources[i]; break; }
            if (c->sources[i].last_fail_ms < r->last_fail_ms) r = &c->sources[i];
        }
        if (r->source[0] && r->unlogged)
            DSM_WARN("coord", "%u more joins from %s refused (wrong cluster secret)", r->unlogged, r->source);
        memset(r, 0, sizeof *r);
        snprintf(r->source, SOURCE_LEN, "%s", source);
    }
    r->fails++;
    r->last_fail_ms = now;
    if (r->fails == 1) {
        DSM_WARN("coord", "join from %s refused: wrong cluster secret (more from it are summarised every %d s)",
                 source, SUMMARY_MS / 1000);
        r->logged_ms = now;
    } else {
        r->unlogged++;
    }
}

/* When a new connection from source may have its challenge: 0 at once. */
static uint64_t source_backoff_until(dsm_coord_t *c, const char *source)
{
    source_rec_t *r = source_find(c, source);
    if (!r || r->fails < BACKOFF_AFTER) return 0;
    uint32_t shift = r->fails - BACKOFF_AFTER;
    uint64_t delay = shift >= 5 ? BACKOFF_MAX_MS : (uint64_t)BACKOFF_BASE_MS << shift;
    if (delay > BACKOFF_MAX_MS) delay = BACKOFF_MAX_MS;
    return r->last_fail_ms + delay;
}

/* Periodic: summarise each source's unlogged refusals; forget quiet ones. */
static void sources_tick(dsm_coord_t *c, uint64_t now)
{
    for (int i = 0; i < MAX_SOURCES; i++) {
        source_rec_t *r = &c->sources[i];
        if (!r->source[0]) continue;
        if (r->unlogged && now - r->logged_ms >= SUMMARY_MS) {
            DSM_WARN("coord", "%u joins from %s refused in the last %llu s (wrong cluster secret)", r->unlogged,
                     r->source, (unsigned long long)((now - r->logged_ms) / 1000));
            r->unlogged = 0;
            r->logged_ms = now;
        }
        if (!r->unlogged && now - r->last_fail_ms >= SOURCE_FORGET_MS) memset(r, 0, sizeof *r);
    }
}

static void send_challenge(dsm_coord_t *c, conn_t *conn)
{
    dsm_ctl_msg_t challenge = {.type = DSM_CTL_CHALLENGE};
    memcpy(challenge.u.challenge.nonce, conn->nonce, DSM_CTL_NONCE_LEN);
    challenge.u.challenge.transport = (uint16_t)c->transport;
    conn->challenge_at = 0;
    conn->hello_deadline = dsm_now_ms() + HELLO_TIMEOUT_MS;
    send_msg(c, conn, &challenge);
}

static void handle_hello(dsm_coord_t *c, conn_t *conn, const dsm_ctl_msg_t *msg)
{
    uint8_t expect[DSM_CTL_MAC_LEN];
    if (dsm_auth_mac(c->secret, "dsm-join-v1", conn->nonce, DSM_CTL_NONCE_LEN,
                     msg->u.hello.body, msg->u.hello.body_len, expect) != DSM_OK ||
        !dsm_auth_equal(expect, msg->u.hello.mac, DSM_CTL_MAC_LEN)) {
        source_failed(c, conn->source, dsm_now_ms());
        refuse(c, conn, DSM_ERR_AUTH, "wrong cluster secret");
        drop_conn(c, index_of(c, conn), NULL);
        return;
    }
    const dsm_ctl_member_t *self = &msg->u.hello.self;
    unsigned theirs, mine;
    if (dsm_fabric_address_check(self->addr, self->addr_len, &theirs, &mine) != DSM_OK) {
        /* Its messages and ours could not be read by the other (a build of
         * another version): refused here, not after a join that fails every
         * message. */
        char reason[DSM_CTL_MAX_REASON + 1];
        if (theirs)
            snprintf(reason, sizeof reason, "its fabric speaks active-message version %u, this cluster %u: every "
                     "node must run the same build", theirs, mine);
        else
            snprintf(reason, sizeof reason, "its address is not a fabric address of this project");
        DSM_WARN("coord", "join refused: %s", reason);
        refuse(c, conn, DSM_ERR_PROTO, reason);
        drop_conn(c, index_of(c, conn), NULL);
        return;
    }
    /* Every member will hand this address to UCX, which aborts on bytes it
     * cannot parse: it is tried in the checker's process first. */
    char unusable[DSM_CTL_MAX_REASON + 1];
    dsm_status_t usable = dsm_addr_checker_check(&c->checker, self->addr, self->addr_len, ADDR_CHECK_TIMEOUT_MS,
                                                 unusable, sizeof unusable);
    if (usable != DSM_OK) {
        DSM_WARN("coord", "join refused from %s (a %s asking for rank %d): %s", conn->source,
                 self->kind == DSM_MEMBER_DAEMON ? "daemon" : "client", self->rank, unusable);
        refuse(c, conn, usable, unusable);
        drop_conn(c, index_of(c, conn), NULL);
        return;
    }
    int rank = pick_rank(c, self->kind, self->rank);
    if (rank == -2 || rank == -3) {
        DSM_WARN("coord", "join refused: rank %d not available for a %s", self->rank,
                 self->kind == DSM_MEMBER_DAEMON ? "daemon" : "client");
        refuse(c, conn, rank == -2 ? DSM_ERR_INVALID : DSM_ERR_NOMEM,
               rank == -2 ? "rank outside the range for this kind of member" : "cluster is full");
        drop_conn(c, index_of(c, conn), NULL);
        return;
    }
    if (c->by_rank[rank]) {
        DSM_WARN("coord", "join refused: rank %d is already taken", rank);
        refuse(c, conn, DSM_ERR_RANK_TAKEN, "rank already taken by a live member");
        drop_conn(c, index_of(c, conn), NULL);
        return;
    }
    conn->addr = malloc(self->addr_len);
    conn->values = dsm_ctl_values_dup(&self->values);
    if (!conn->addr || !conn->values ||
        dsm_ctl_session_derive(c->secret, msg->u.hello.nonce, conn->nonce, (uint32_t)rank, &conn->session) != DSM_OK) {
        refuse(c, conn, DSM_ERR_NOMEM, "coordinator out of memory");
        drop_conn(c, index_of(c, conn), NULL);
        return;
    }
    memcpy(conn->addr, self->addr, self->addr_len);
    conn->addr_len = self->addr_len;
    conn->rank = rank;
    conn->kind = self->kind;
    conn->state = CONN_MEMBER;
    conn->last_seen = dsm_now_ms();

    dsm_ctl_msg_t welcome = {.type = DSM_CTL_WELCOME};
    welcome.u.welcome.rank = rank;
    uint8_t rank_bytes[4];
    dsm_put_u32(rank_bytes, (uint32_t)rank);
    uint8_t nonces[2 * DSM_CTL_NONCE_LEN];
    memcpy(nonces, msg->u.hello.nonce, DSM_CTL_NONCE_LEN);
    memcpy(nonces + DSM_CTL_NONCE_LEN, conn->nonce, DSM_CTL_NONCE_LEN);
    dsm_auth_mac(c->secret, "dsm-coord-v1", nonces, sizeof nonces, rank_bytes, 4, welcome.u.welcome.mac);
    welcome.u.welcome.peer_timeout_ms = c->peer_timeout_ms;
    send_msg(c, conn, &welcome);
    conn->sealed = 1;   /* every frame after the WELCOME, both ways */

    /* Joining takes three steps, so that whoever learns of a member can talk
     * to it and be answered: the newcomer gets the table and acknowledges it
     * once it has reached everyone in it; then the others learn of the
     * newcomer and acknowledge; then the newcomer is READY. */
    for (int r = 0; r < DSM_MAX_RANKS; r++) {
        if (!c->by_rank[r]) continue;
        dsm_ctl_msg_t m = member_msg(c->by_rank[r]);
        send_msg(c, conn, &m);
    }
    dsm_ctl_msg_t end = {.type = DSM_CTL_TABLE_END};
    send_msg(c, conn, &end);
    c->by_rank[rank] = conn;
    c->members++;
    if (conn->kind == DSM_MEMBER_DAEMON) c->daemons++;
    DSM_INFO("coord", "rank %d joined (%s, %u published values); %u members", rank,
             conn->kind == DSM_MEMBER_DAEMON ? "daemon" : "client", conn->values->count, c->members);
}

/* The newcomer has reached everyone in its table: announce it. */
static void announce(dsm_coord_t *c, conn_t *conn)
{
    dsm_ctl_msg_t msg = member_msg(conn);
    msg.u.member.flags = DSM_CTL_MEMBER_ACK_WANTED;
    conn->announced = 1;
    conn->acks_missing = 0;
    for (int r = 0; r < DSM_MAX_RANKS; r++) {
        if (!c->by_rank[r] || c->by_rank[r] == conn) continue;
        send_msg(c, c->by_rank[r], &msg);
        conn->acks_missing++;
    }
    maybe_ready(c, conn);
}

/* `by` says its endpoint to `rank` failed. A member that died is dropped
 * by its closed connection or its missed heartbeats within the peer
 * timeout; one alive to the coordinator after that is cut off from the
 * other, which would wait on it unanswered. One of the two is declared
 * dead then: the client if one is (a client holds no one's memory), else
 * the one reported. */
static void suspect(dsm_coord_t *c, conn_t *by, uint32_t rank)
{
    conn_t *other = c->by_rank[rank];
    if (!other || other == by) return;
    conn_t *victim = by->kind == DSM_MEMBER_CLIENT && other->kind == DSM_MEMBER_DAEMON ? by : other;
    conn_t *peer = victim == by ? other : by;
    if (victim->evict_at) return;   /* the first report stands */
    victim->evict_at = dsm_now_ms() + c->peer_timeout_ms;
    victim->evict_other_rank = peer->rank;
    victim->evict_other = peer->accepted;
    DSM_INFO("coord", "rank %d reports its endpoint to rank %u failed; unless one of them goes first, rank %d is "
             "declared dead in %u ms", by->rank, rank, victim->rank, c->peer_timeout_ms);
}

/* The reported failure's time is up: 1 if the other is still a member
 * and heard from lately, 0 if it is gone (its end was the failure), -1 if
 * it is silent (its heartbeats judge it first). */
static int cut_off_from_live_member(dsm_coord_t *c, const conn_t *conn, uint64_t now)
{
    const conn_t *other = c->by_rank[conn->evict_other_rank];
    if (!other || other->accepted != conn->evict_other) return 0;
    return now - other->last_seen <= c->peer_timeout_ms ? 1 : -1;
}

static void handle_member_msg(dsm_coord_t *c, conn_t *conn, const dsm_ctl_msg_t *msg)
{
    switch (msg->type) {
    case DSM_CTL_HEARTBEAT:
        break;
    case DSM_CTL_MEMBER_ACK: {
        conn_t *joined = c->by_rank[msg->u.dead.rank];
        if (joined == conn) {
            if (!conn->announced) announce(c, conn);
        } else if (joined && joined->acks_missing > 0) {
            joined->acks_missing--;
            maybe_ready(c, joined);
        }
        break;
    }
    case DSM_CTL_BARRIER:
        if (conn->kind != DSM_MEMBER_DAEMON) {  /* epochs are the coordinator's: members have one barrier outstanding at most */
            dsm_ctl_msg_t done = {.type = DSM_CTL_BARRIER_DONE};
            done.u.barrier.epoch = msg->u.barrier.epoch;
            done.u.barrier.status = DSM_ERR_STATE;
            send_msg(c, conn, &done);
            break;
        }
        c->barrier_arrived[conn->rank] = 1;
        maybe_release_barrier(c, DSM_OK);
        break;
    case DSM_CTL_LEAVE:
        drop_member(c, index_of(c, conn), "left", DSM_CTL_LEFT);
        break;
    case DSM_CTL_LEFT_ACK:
        owe_no_more(c, (int)msg->u.dead.rank, conn);
        break;
    case DSM_CTL_SUSPECT:
        suspect(c, conn, msg->u.dead.rank);
        break;
    default:
        DSM_WARN("coord", "rank %d sent an unexpected message type %u; dropping it", conn->rank, msg->type);
        drop_conn(c, index_of(c, conn), "protocol error");
    }
}

static void drop_conn(dsm_coord_t *c, int index, const char *why)
{
    drop_member(c, index, why, DSM_CTL_DEAD);
}

/* Every member told of the leaver's departure has acknowledged it (or the
 * wait is over): tell the leaver, which then closes the connection. */
static void release_leaver(dsm_coord_t *c, conn_t *conn)
{
    conn->released = 1;
    dsm_ctl_msg_t left = {.type = DSM_CTL_LEFT};
    left.u.dead.rank = (uint32_t)conn->rank;
    send_msg(c, conn, &left);
}

/* Connection `by` owes no more acknowledgement of the departure of `rank`:
 * to the oldest leaver of that rank it owes one (the rank may have been
 * taken and left again since), or, with rank < 0, to any leaver (it is gone). */
static void owe_no_more(dsm_coord_t *c, int rank, const conn_t *by)
{
    if (by->rank < 0) return;
    conn_t *chosen = NULL;
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_t *l = c->conns[i];
        if (!l || l == by || l->state != CONN_LEAVING || l->released || l->owed[by->rank] != by->accepted ||
            (rank >= 0 && l->rank != rank))
            continue;
        if (rank < 0) {
            l->owed[by->rank] = 0;
            if (--l->owed_count == 0) release_leaver(c, l);
        } else if (!chosen || l->accepted < chosen->accepted) {
            chosen = l;
        }
    }
    if (chosen) {
        chosen->owed[by->rank] = 0;
        if (--chosen->owed_count == 0) release_leaver(c, chosen);
    }
}

/* A member said LEAVE: out of the table (done by the caller), LEAVING
 * until the members it was announced to acknowledge. False if out of memory. */
static bool start_leaving(dsm_coord_t *c, conn_t *conn)
{
    if (!(conn->owed = calloc(DSM_MAX_RANKS, sizeof *conn->owed))) return false;
    conn->state = CONN_LEAVING;
    conn->leave_deadline = dsm_now_ms() + c->peer_timeout_ms;
    for (int r = 0; r < DSM_MAX_RANKS; r++)
        if (c->by_rank[r]) conn->owed[r] = c->by_rank[r]->accepted, conn->owed_count++;
    /* An earlier leaver still waiting for its own word has endpoints toward
     * this one: it is told too, and owes its word unless a member holds its
     * rank again (then its word is not needed: it goes first or its
     * connection's close stands for it). */
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_t *l = c->conns[i];
        if (!l || l == conn || l->state != CONN_LEAVING || l->released || conn->owed[l->rank]) continue;
        conn->owed[l->rank] = l->accepted;
        conn->owed_count++;
    }
    return true;
}

/* The members, and the leavers not yet let go (their endpoints are still
 * open: a departure or a death they were not told of would reach them as
 * a transport error). */
static void tell_everyone(dsm_coord_t *c, const dsm_ctl_msg_t *msg, const conn_t *except)
{
    broadcast(c, msg, except);
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_t *l = c->conns[i];
        if (l && l != except && l->state == CONN_LEAVING && !l->released) send_msg(c, l, msg);
    }
}

/* Drops a connection; a member's departure is announced to the others as
 * `announce`: DSM_CTL_LEFT for one that said it leaves, else DSM_CTL_DEAD. */
static void drop_member(dsm_coord_t *c, int index, const char *why, uint16_t announce)
{
    if (index < 0) return;
    conn_t *conn = c->conns[index];
    c->conns[index] = NULL;
    if (conn->state == CONN_MEMBER) {
        int rank = conn->rank;
        c->by_rank[rank] = NULL;
        c->members--;
        if (conn->kind == DSM_MEMBER_DAEMON) c->daemons--;
        if (why) DSM_INFO("coord", "rank %d %s; %u members remain", rank, why, c->members);
        dsm_ctl_msg_t dead = {.type = announce};
        dead.u.dead.rank = (uint32_t)rank;
        bool leaving = announce == DSM_CTL_LEFT && start_leaving(c, conn);
        if (leaving) {
            c->conns[index] = conn;
        } else {
            owe_no_more(c, -1, conn);   /* a leaver waits for it no more */
            conn_free(conn);
        }
        tell_everyone(c, &dead, leaving ? conn : NULL);
        if (leaving && conn->owed_count == 0) release_leaver(c, conn);
        /* Joiners waiting for the dead member's acknowledgement wait no more. */
        for (int r = 0; r < DSM_MAX_RANKS; r++) {
            conn_t *m = c->by_rank[r];
            if (m && m->announced && !m->ready) {
                m->acks_missing = 0;
                maybe_ready(c, m);
            }
        }
        /* A barrier waiting for the dead daemon would wait forever: release it
         * with an error instead. */
        if (rank < DSM_MAX_DAEMONS) {
            c->barrier_arrived[rank] = 0;
            maybe_release_barrier(c, DSM_ERR_PEER_DEAD);
        }
    } else {
        if (conn->state == CONN_LEAVING) owe_no_more(c, -1, conn);
        conn_free(conn);
    }
}

/* Parse every complete frame in the connection's buffer. */
static void consume(dsm_coord_t *c, int index)
{
    conn_t *conn = c->conns[index];
    size_t off = 0;
    while (conn->len - off >= DSM_CTL_HEADER_LEN) {
        dsm_ctl_header_t h;
        if (dsm_ctl_header_decode(conn->buf + off, DSM_CTL_HEADER_LEN, &h) != DSM_OK) {
            const char *who = conn->state != CONN_AWAIT_HELLO ? "a member" : "a joining node";
            if (h.version != 0 && h.version != DSM_CTL_VERSION)
                DSM_WARN("coord", "%s speaks control protocol version %u, this coordinator %u (built from another "
                         "version of the project: every node must run the same); closing", who, h.version,
                         (unsigned)DSM_CTL_VERSION);
            else
                DSM_WARN("coord", "malformed control header from %s; closing", who);
            if (conn->state == CONN_AWAIT_HELLO) atomic_fetch_add(&c->refused, 1);
            drop_conn(c, index, "sent a malformed message");
            return;
        }
        if (conn->state == CONN_AWAIT_HELLO && (h.type != DSM_CTL_HELLO || h.length > DSM_CTL_MAX_HELLO)) {
            /* Judged on the header alone: the rest is never read. */
            DSM_WARN("coord", "a joining node sent a control message of type %u and %u bytes before its hello; "
                     "closing", h.type, h.length);
            refuse(c, conn, DSM_ERR_PROTO, h.type != DSM_CTL_HELLO ? "expected a join request (hello)"
                                                                   : "join request longer than a hello can be");
            drop_conn(c, index, NULL);
            return;
        }
        if (conn->len - off - DSM_CTL_HEADER_LEN < h.length) break;
        const uint8_t *frame = conn->buf + off;
        size_t payload_len = h.length;
        off += DSM_CTL_HEADER_LEN + h.length;
        if (conn->sealed &&
            dsm_ctl_open(&conn->session, DSM_CTL_TO_COORD, frame, &h, frame + DSM_CTL_HEADER_LEN, &payload_len) !=
                DSM_OK) {
            /* not from the member (no key), a replay or out of order */
            if (conn->frames_refused++ == 0)
                DSM_WARN("coord", "rank %d: dropped a control frame that failed its seal check (type %u, %u bytes); "
                         "later ones are counted, not logged", conn->rank, h.type, h.length);
            continue;
        }
        dsm_ctl_msg_t msg;
        /* a sealed frame before the WELCOME cannot be: refused below */
        dsm_status_t st = !conn->sealed && (h.flags & DSM_CTL_FLAG_SEALED)
                              ? DSM_ERR_PROTO
                              : dsm_ctl_decode(h.type, frame + DSM_CTL_HEADER_LEN, payload_len, &msg);
        if (st != DSM_OK || (conn->state == CONN_AWAIT_HELLO && msg.type != DSM_CTL_HELLO)) {
            DSM_WARN("coord", "malformed or unexpected control message (type %u, %u bytes); closing",
                     h.type, h.length);
            if (conn->state == CONN_AWAIT_HELLO) {
                refuse(c, conn, DSM_ERR_PROTO, "malformed join request");
                drop_conn(c, index, NULL);
            } else {
                drop_conn(c, index, "sent a malformed message");
            }
            return;
        }
        conn->last_seen = dsm_now_ms();
        if (conn->state == CONN_AWAIT_HELLO) handle_hello(c, conn, &msg);
        else if (conn->state == CONN_MEMBER) handle_member_msg(c, conn, &msg);
        else if (msg.type == DSM_CTL_LEFT_ACK) owe_no_more(c, (int)msg.u.dead.rank, conn);
        /* the rest of a leaver's messages (heartbeats) need nothing */
        if (c->conns[index] != conn) return; /* dropped */
    }
    memmove(conn->buf, conn->buf + off, conn->len - off);
    conn->len -= off;
    if (conn->len == 0 && conn->cap > 16384) {
        /* A member's big frame is done with: members idle on a few bytes. */
        free(conn->buf);
        conn->buf = NULL;
        conn->cap = 0;
    }
}

static void read_conn(dsm_coord_t *c, int index)
{
    conn_t *conn = c->conns[index];
    size_t cap = dsm_ctl_rx_capacity(conn->cap, conn->len,
                                     conn->state != CONN_AWAIT_HELLO ? DSM_CTL_MAX_PAYLOAD + DSM_CTL_SEAL_LEN
                                                                     : DSM_CTL_MAX_HELLO);
    if (cap != conn->cap) {
        if (cap == 0) {
            drop_conn(c, index, "sent an oversized message");
            return;
        }
        uint8_t *buf = realloc(conn->buf, cap);
        if (!buf) { drop_conn(c, index, "exhausted coordinator memory"); return; }
        conn->buf = buf;
        conn->cap = cap;
    }
    ssize_t n = recv(conn->fd, conn->buf + conn->len, conn->cap - conn->len, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        drop_conn(c, index, "disconnected");
        return;
    }
    if (n > 0) {
        conn->len += (size_t)n;
        consume(c, index);
    }
}

static void source_of(const struct sockaddr_storage *ss, char out[SOURCE_LEN])
{
    const void *a = ss->ss_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
                                              : (const void *)&((const struct sockaddr_in *)ss)->sin_addr;
    if (!inet_ntop(ss->ss_family, a, out, SOURCE_LEN)) snprintf(out, SOURCE_LEN, "?");
}

/* Make room for one more unauthenticated connection from source: displace
 * the oldest one of that source if it has its share, else the oldest of
 * all if every pending slot is taken. */
static void make_pending_room(dsm_coord_t *c, const char *source)
{
    int total = 0, from_source = 0, oldest = -1, oldest_of_source = -1;
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_t *p = c->conns[i];
        if (!p || p->state != CONN_AWAIT_HELLO) continue;
        total++;
        if (oldest < 0 || p->accepted < c->conns[oldest]->accepted) oldest = i;
        if (strcmp(p->source, source) == 0) {
            from_source++;
            if (oldest_of_source < 0 || p->accepted < c->conns[oldest_of_source]->accepted) oldest_of_source = i;
        }
    }
    char reason[DSM_CTL_MAX_REASON + 1];
    int victim = -1;
    if (from_source >= MAX_PENDING_PER_SOURCE) {
        victim = oldest_of_source;
        snprintf(reason, sizeof reason, "too many unauthenticated connections from %s (at most %d): "
                 "the oldest is closed; send the join request promptly", source, MAX_PENDING_PER_SOURCE);
    } else if (total >= MAX_PENDING) {
        victim = oldest;
        snprintf(reason, sizeof reason, "coordinator busy: too many unauthenticated connections (at most %d): "
                 "the oldest is closed; send the join request promptly", MAX_PENDING);
    }
    if (victim < 0) return;
    DSM_WARN("coord", "%s", reason);
    /* Busy, not a verdict on the joiner: it tries again. */
    refuse(c, c->conns[victim], DSM_ERR_BUSY, reason);
    drop_conn(c, victim, NULL);
}

static void accept_conn(dsm_coord_t *c)
{
    struct sockaddr_storage ss;
    socklen_t ss_len = sizeof ss;
    int fd = accept4(c->listen_fd, (struct sockaddr *)&ss, &ss_len, SOCK_CLOEXEC);
    if (fd < 0) return;
    char source[SOURCE_LEN];
    source_of(&ss, source);
    make_pending_room(c, source);
    /* Members hold at most DSM_MAX_RANKS slots and the unauthenticated at
     * most MAX_PENDING: a slot is free, unless leavers still hold theirs
     * (a few milliseconds each) while their ranks are taken again. */
    int slot = -1;
    for (int i = 0; i < MAX_CONNS && slot < 0; i++)
        if (!c->conns[i]) slot = i;
    conn_t *conn = slot >= 0 ? calloc(1, sizeof *conn) : NULL;
    if (!conn) {
        DSM_WARN("coord", slot < 0 ? "no free connection slot (leavers hold some); refusing one"
                                   : "no memory for a connection; refusing one");
        close(fd);
        return;
    }
    dsm_sock_set_timeouts(fd, 2000);
    conn->fd = fd;
    conn->rank = -1;
    conn->hello_deadline = dsm_now_ms() + HELLO_TIMEOUT_MS;
    conn->accepted = ++c->accepted;
    memcpy(conn->source, source, SOURCE_LEN);
    c->conns[slot] = conn;
    if (dsm_auth_nonce(conn->nonce, DSM_CTL_NONCE_LEN) != DSM_OK) {
        drop_conn(c, slot, NULL);
        return;
    }
    uint64_t at = source_backoff_until(c, source);
    if (at > dsm_now_ms()) {
        /* its source failed to authenticate lately: the challenge waits */
        conn->challenge_at = at;
        conn->hello_deadline = at + HELLO_TIMEOUT_MS;
    } else {
        send_challenge(c, conn);
    }
}

static void tick(dsm_coord_t *c)
{
    uint64_t now = dsm_now_ms();
    dsm_ctl_msg_t hb = {.type = DSM_CTL_HEARTBEAT};
    sources_tick(c, now);
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_t *conn = c->conns[i];
        if (!conn) continue;
        /* a reported failure whose time is up: cut_off_from_live_member's verdict */
        int cut_off = conn->state == CONN_MEMBER && conn->evict_at && now >= conn->evict_at
                          ? cut_off_from_live_member(c, conn, now) : -1;
        if (conn->challenge_at && now >= conn->challenge_at) {
            send_challenge(c, conn);
        } else if (conn->state == CONN_AWAIT_HELLO && now > conn->hello_deadline) {
            DSM_WARN("coord", "a connection from %s sent no join request in time; closing it", conn->source);
            char reason[DSM_CTL_MAX_REASON + 1];
            snprintf(reason, sizeof reason, "no join request within %d ms of connecting", HELLO_TIMEOUT_MS);
            refuse(c, conn, DSM_ERR_TIMEOUT, reason);
            drop_conn(c, i, NULL);
        } else if (conn->state == CONN_MEMBER && now - conn->last_seen > c->peer_timeout_ms) {
            /* When this thread was the one that did not run (a loaded
             * host), what arrived meanwhile is read before the member is
             * judged. Reading may drop it (it left). */
            read_conn(c, i);
            if (c->conns[i] != conn)
                continue;
            if (dsm_now_ms() - conn->last_seen > c->peer_timeout_ms)
                drop_conn(c, i, "missed its heartbeats: declared dead");
            else
                send_msg(c, conn, &hb);
        } else if (cut_off == 1) {
            char why[96];
            snprintf(why, sizeof why, "is cut off from rank %d (its endpoint failed): declared dead",
                     conn->evict_other_rank);
            dsm_ctl_msg_t dead = {.type = DSM_CTL_DEAD};
            dead.u.dead.rank = (uint32_t)conn->rank;
            send_msg(c, conn, &dead);   /* so it says why it is out */
            drop_conn(c, i, why);
        } else if (conn->state == CONN_MEMBER) {
            if (cut_off == 0) conn->evict_at = 0;   /* the other went: its end was the failure */
            send_msg(c, conn, &hb);
        } else if (conn->state == CONN_LEAVING && !conn->released && now > conn->leave_deadline) {
            DSM_INFO("coord", "rank %d: %d member(s) did not acknowledge its departure in time; letting it go",
                     conn->rank, conn->owed_count);
            release_leaver(c, conn);
        }
    }
}

static void *coord_main(void *arg)
{
    dsm_coord_t *c = arg;
    dsm_thread_name("dsm-coord", -1);
    struct pollfd pfds[MAX_CONNS + 2];
    int index_of_pfd[MAX_CONNS + 2];
    uint32_t tick_ms = c->peer_timeout_ms / 6 ? c->peer_timeout_ms / 6 : 1;
    uint64_t next_tick = dsm_now_ms() + tick_ms;
    while (!atomic_load(&c->stopping)) {
        int n = 0;
        pfds[n++] = (struct pollfd){.fd = c->listen_fd, .events = POLLIN};
        pfds[n++] = (struct pollfd){.fd = c->wake[0], .events = POLLIN};
        for (int i = 0; i < MAX_CONNS; i++) {
            if (!c->conns[i]) continue;
            index_of_pfd[n] = i;
            pfds[n++] = (struct pollfd){.fd = c->conns[i]->fd, .events = POLLIN};
        }
        uint64_t now = dsm_now_ms();
        int timeout = next_tick > now ? (int)(next_tick - now) : 0;
        int rc = poll(pfds, (nfds_t)n, timeout);
        pthread_mutex_lock(&c->lock);
        if (rc > 0) {
            if (pfds[0].revents & POLLIN) accept_conn(c);
            for (int k = 2; k < n; k++)
                if (pfds[k].revents && c->conns[index_of_pfd[k]]) read_conn(c, index_of_pfd[k]);
        }
        if (dsm_now_ms() >= next_tick) {
            tick(c);
            next_tick = dsm_now_ms() + tick_ms;
        }
        pthread_mutex_unlock(&c->lock);
    }
    return NULL;
}

dsm_status_t dsm_coord_start(const dsm_coord_config_t *config, dsm_coord_t **out)
{
    if (!config || !config->bind || !config->secret || !config->secret[0]) {
        DSM_ERROR("coord", "a coordinator needs a bind address and a non-empty secret");
        return DSM_ERR_INVALID;
    }
    dsm_coord_t *c = calloc(1, sizeof *c);
    if (!c) return DSM_ERR_NOMEM;
    c->checker.fd = -1;   /* nothing to close before it starts */
    c->secret = strdup(config->secret);
    c->peer_timeout_ms = config->peer_timeout_ms ? config->peer_timeout_ms : 3000;
    c->transport = config->transport;
    c->wake[0] = c->wake[1] = -1;
    pthread_mutex_init(&c->lock, NULL);
    dsm_status_t st = dsm_sock_listen(config->bind, &c->listen_fd, &c->port);
    if (st != DSM_OK) goto fail;
    dsm_addr_checker_init(&c->checker, config->address_checker, c->transport);
    if (pipe2(c->wake, O_CLOEXEC) != 0) { st = DSM_ERR_IO; goto fail; }
    if (dsm_thread_start(&c->thread, NULL, coord_main, c) != 0) { st = DSM_ERR_NOMEM; goto fail; }
    DSM_INFO("coord", "coordinator listening on port %u", c->port);
    *out = c;
    return DSM_OK;
fail:
    dsm_addr_checker_close(&c->checker);
    if (c->listen_fd > 0) close(c->listen_fd);
    if (c->wake[0] >= 0) { close(c->wake[0]); close(c->wake[1]); }
    free(c->secret);
    free(c);
    return st;
}

uint16_t dsm_coord_port(const dsm_coord_t *c) { return c->port; }

uint32_t dsm_coord_members(dsm_coord_t *c, uint32_t *daemons)
{
    pthread_mutex_lock(&c->lock);
    uint32_t members = c->members;
    if (daemons) *daemons = c->daemons;
    pthread_mutex_unlock(&c->lock);
    return members;
}

uint64_t dsm_coord_refused(dsm_coord_t *c) { return atomic_load(&c->refused); }

uint32_t dsm_coord_leaving(dsm_coord_t *c)
{
    uint32_t n = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < MAX_CONNS; i++)
        n += c->conns[i] && c->conns[i]->state == CONN_LEAVING && !c->conns[i]->released;
    pthread_mutex_unlock(&c->lock);
    return n;
}

void dsm_coord_stop(dsm_coord_t *c)
{
    if (!c) return;
    if (pthread_equal(pthread_self(), c->thread)) {
        /* it would join itself, then free what it still uses */
        DSM_ERROR("coord", "stop called on the coordinator's own thread: refused");
        return;
    }
    pthread_mutex_lock(&c->lock);
    dsm_ctl_msg_t stop = {.type = DSM_CTL_STOP};
    broadcast(c, &stop, NULL);
    atomic_store(&c->stopping, 1);
    pthread_mutex_unlock(&c->lock);
    char byte = 1;
    ssize_t unused = write(c->wake[1], &byte, 1);
    (void)unused;
    pthread_join(c->thread, NULL);
    for (int i = 0; i < MAX_CONNS; i++)
        if (c->conns[i]) conn_free(c->conns[i]);
    dsm_addr_checker_close(&c->checker);
    close(c->listen_fd);
    close(c->wake[0]);
    close(c->wake[1]);
    pthread_mutex_destroy(&c->lock);
    free(c->secret);
    free(c);
}
