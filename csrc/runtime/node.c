/* A node: one member of a cluster. Owns the node's fabric instance, the
 * control connection to the coordinator with its thread (table updates,
 * deaths, heartbeats, barriers), the node's view of who is alive, and the
 * slots where the layers above keep their per-node state. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "runtime/auth.h"
#include "runtime/ctl_wire.h"
#include "runtime/internal.h"
#include "dsm/module.h"
#include "runtime/node_internal.h"
#include "runtime/sock.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/thread.h"

enum { FRAME_TIMEOUT_MS = 3000 };
/* How often the control thread looks again at a leaver still held by a
 * call here (its LEFT_ACK waits for that). */
enum { LEFT_ACK_POLL_MS = 1 };

void dsm_node_config_init(dsm_node_config_t *config)
{
    memset(config, 0, sizeof *config);
    config->rank = DSM_RANK_ANY;
    config->kind = DSM_MEMBER_DAEMON;
    config->transport = DSM_TRANSPORT_AUTO;
    config->progress = DSM_PROGRESS_AUTO;
}

static void apply_defaults(dsm_node_config_t *c)
{
    if (!c->heartbeat_ms) c->heartbeat_ms = 250;
    if (!c->peer_timeout_ms) c->peer_timeout_ms = 3000;
    if (!c->op_timeout_ms) c->op_timeout_ms = 5000;
    if (!c->join_timeout_ms) c->join_timeout_ms = 10000;
}

/* ---- peers and deaths --------------------------------------------------- */

/* A peer is gone: it failed, or it left (`left`: said so first; the fabric
 * then notes it without a warning). Either way nothing more reaches it. */
static int peer_gone(dsm_node_t *n, uint32_t rank, const char *how, int left)
{
    pthread_mutex_lock(&n->lock);
    int was_live = n->peers[rank].live;
    n->peers[rank].live = 0;
    int count = n->n_dead_cbs;
    dsm_peer_dead_cb_t cbs[DSM_NODE_MAX_DEAD_CBS];
    void *ctx[DSM_NODE_MAX_DEAD_CBS];
    memcpy(cbs, n->dead_cbs, sizeof cbs);
    memcpy(ctx, n->dead_ctx, sizeof ctx);
    pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->lock);
    if (!was_live) return 0;
    DSM_INFO("node", "rank %u: peer %u %s", n->rank, rank, how);
    if (left)
        dsm_fabric_peer_leaving(n->fabric, rank);   /* acknowledged when no call holds it (ack_left) */
    else
        dsm_fabric_peer_failed(n->fabric, rank);
    for (int i = 0; i < count; i++) cbs[i](ctx[i], rank);
    return 1;
}

static dsm_status_t ctl_send(dsm_node_t *n, const dsm_ctl_msg_t *msg);

/* Whether this node said it leaves: a peer's loss or its own is then expected. */
static int is_leaving(dsm_node_t *n)
{
    pthread_mutex_lock(&n->lock);
    int leaving = n->leaving;
    pthread_mutex_unlock(&n->lock);
    return leaving;
}

/* The transport failed toward a peer the coordinator had not reported
 * gone. The peer may be alive to everyone else: then it would go on
 * sending here and wait for answers this node no longer gives. The
 * coordinator is told, so that the cluster agrees on who is out. */
static void on_fabric_peer_error(void *ctx, uint32_t rank)
{
    dsm_node_t *n = ctx;
    if (!peer_gone(n, rank, "failed (fabric error)", 0)) return;
    if (is_leaving(n)) return;   /* nothing here waits on it any more */
    dsm_ctl_msg_t suspect = {.type = DSM_CTL_SUSPECT};
    suspect.u.dead.rank = rank;
    ctl_send(n, &suspect);
}

void dsm_node_on_peer_dead(dsm_node_t *n, dsm_peer_dead_cb_t cb, void *ctx)
{
    pthread_mutex_lock(&n->lock);
    if (n->n_dead_cbs < DSM_NODE_MAX_DEAD_CBS) {
        n->dead_cbs[n->n_dead_cbs] = cb;
        n->dead_ctx[n->n_dead_cbs++] = ctx;
    }
    pthread_mutex_unlock(&n->lock);
}

static void mark_closed(dsm_node_t *n, int reason, const char *why)
{
    pthread_mutex_lock(&n->lock);
    int was = n->closed, leaving = n->leaving;
    if (!was) n->closed = reason;
    pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->lock);
    if (was || leaving || !why) return;
    if (reason == DSM_NODE_LOST) DSM_WARN("node", "rank %u: %s", n->rank, why);   /* its calls fail from now on */
    else DSM_INFO("node", "rank %u: %s", n->rank, why);
}

/* ---- control connection ------------------------------------------------- */

static dsm_status_t ctl_send(dsm_node_t *n, const dsm_ctl_msg_t *msg)
{
    dsm_writer_t w = {0};
    dsm_status_t st = dsm_ctl_encode(msg, &w);
    if (st == DSM_OK) {
        pthread_mutex_lock(&n->send_lock);   /* frames leave in the order of their seq */
        if (n->sealed) st = dsm_ctl_seal(&n->session, DSM_CTL_TO_COORD, &w, 0);
        if (st == DSM_OK) st = n->ctl_fd >= 0 ? dsm_sock_send_all(n->ctl_fd, w.buf, w.len) : DSM_ERR_CLOSED;
        pthread_mutex_unlock(&n->send_lock);
    }
    dsm_writer_free(&w);
    return st;
}

/* Read one frame; *payload is malloc'd (caller frees). Once sealed, a
 * frame that fails its check is dropped (DSM_ERR_AUTH: the connection
 * stays, the caller reads on). */
static dsm_status_t ctl_recv(dsm_node_t *n, dsm_ctl_msg_t *msg, uint8_t **payload, uint32_t timeout_ms)
{
    uint8_t header[DSM_CTL_HEADER_LEN];
    dsm_ctl_header_t h;
    *payload = NULL;
    dsm_status_t st = dsm_sock_recv_all(n->ctl_fd, header, sizeof header, timeout_ms);
    if (st != DSM_OK) return st;
    if ((st = dsm_ctl_header_decode(header, sizeof header, &h)) != DSM_OK) {
        if (h.version != 0 && h.version != DSM_CTL_VERSION)
            DSM_ERROR("node", "the coordinator speaks control protocol version %u, this node %u (built from another "
                      "version of the project: every node must run the same)", h.version, (unsigned)DSM_CTL_VERSION);
        return st;
    }
    *payload = malloc(h.length ? h.length : 1);
    if (!*payload) return DSM_ERR_NOMEM;
    if ((st = dsm_sock_recv_all(n->ctl_fd, *payload, h.length, FRAME_TIMEOUT_MS)) != DSM_OK) return st;
    size_t len = h.length;
    if (n->sealed && dsm_ctl_open(&n->session, DSM_CTL_TO_MEMBER, header, &h, *payload, &len) != DSM_OK) {
        if (atomic_fetch_add(&n->frames_refused, 1) == 0)
            DSM_WARN("node", "rank %u: dropped a control frame that failed its seal check (type %u, %u bytes); "
                     "later ones are counted, not logged", n->rank, h.type, h.length);
        return DSM_ERR_AUTH;
    }
    if (!n->sealed && (h.flags & DSM_CTL_FLAG_SEALED)) return DSM_ERR_PROTO;
    return dsm_ctl_decode(h.type, *payload, len, msg);
}

/* Reach a member, record its values and run the join hooks for it: the
 * member is live (addressable) only once all of this succeeded. */
static dsm_status_t member_reachable(dsm_node_t *n, uint32_t rank, const dsm_ctl_values_t *values)
{
    dsm_status_t st = dsm_node_member_values(n, rank, values);
    if (st == DSM_OK) st = dsm_node_modules_check(n, rank);
    if (st == DSM_OK) st = dsm_node_run_join_hooks(n, rank);
    return st;
}

static void handle_member(dsm_node_t *n, const dsm_ctl_member_t *m)
{
    uint32_t rank = (uint32_t)m->rank;
    if (rank == n->rank) return;
    /* With concurrent joins a member can be heard of twice (in the table and
     * in an announcement): the second time it is already reachable. */
    dsm_status_t st = dsm_fabric_connect(n->fabric, rank, m->addr, m->addr_len);
    if (st == DSM_ERR_EXISTS) st = DSM_OK;
    else if (st == DSM_OK) st = member_reachable(n, rank, &m->values);
    if (st != DSM_OK)
        DSM_WARN("node", "rank %u: cannot reach new member %u: %s", n->rank, rank, dsm_strerror(st));
    pthread_mutex_lock(&n->lock);
    /* heard of twice: keep what the first time learnt; a rejoin starts afresh */
    int ready = (m->flags & DSM_CTL_MEMBER_READY_FLAG) || (n->peers[rank].live && n->peers[rank].ready);
    n->peers[rank] = (dsm_peer_info_t){.known = 1, .live = st == DSM_OK, .ready = ready, .kind = m->kind};
    pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->lock);
    if (m->flags & DSM_CTL_MEMBER_ACK_WANTED) {
        dsm_ctl_msg_t ack = {.type = DSM_CTL_MEMBER_ACK};
        ack.u.dead.rank = rank;
        ctl_send(n, &ack);
    }
}

/* LEFT_ACK for each leaver no thread here is inside a call toward any
 * more. A thread may hold a peer for as long as an operation's timeout: the
 * control thread does not wait for it (its heartbeats and the others'
 * departures go on), it looks again at its next turn. */
static void ack_left(dsm_node_t *n)
{
    for (uint32_t r = 0; r < DSM_MAX_RANKS && n->n_left_unacked; r++) {
        if (!n->left_unacked[r] || dsm_fabric_peer_busy(n->fabric, r)) continue;
        n->left_unacked[r] = 0;
        n->n_left_unacked--;
        dsm_ctl_msg_t ack = {.type = DSM_CTL_LEFT_ACK};
        ack.u.dead.rank = r;
        ctl_send(n, &ack);
    }
}

static void handle_ctl(dsm_node_t *n, const dsm_ctl_msg_t *msg)
{
    switch (msg->type) {
    case DSM_CTL_MEMBER:
        handle_member(n, &msg->u.member);
        break;
    case DSM_CTL_TABLE_END: {
        dsm_ctl_msg_t ack = {.type = DSM_CTL_MEMBER_ACK};
        ack.u.dead.rank = n->rank;
        ctl_send(n, &ack);
        break;
    }
    case DSM_CTL_MEMBER_READY:
        pthread_mutex_lock(&n->lock);
        if (msg->u.dead.rank < DSM_MAX_RANKS && n->peers[msg->u.dead.rank].live)
            n->peers[msg->u.dead.rank].ready = 1;
        pthread_cond_broadcast(&n->cond);
        pthread_mutex_unlock(&n->lock);
        break;
    case DSM_CTL_READY:
        pthread_mutex_lock(&n->lock);
        n->ready = 1;
        n->peers[n->rank].ready = 1;
        pthread_cond_broadcast(&n->cond);
        pthread_mutex_unlock(&n->lock);
        break;
    case DSM_CTL_DEAD:
        if (msg->u.dead.rank == n->rank) {
            /* No member answers it now: its calls fail at once, not at
             * their timeouts, from the moment it reads as closed. */
            if (!is_leaving(n)) DSM_WARN("node", "rank %u: the coordinator declared this node dead", n->rank);
            for (uint32_t r = 0; r < DSM_MAX_RANKS; r++)
                if (r != n->rank) peer_gone(n, r, "out of reach (this node was declared dead)", 0);
            mark_closed(n, DSM_NODE_LOST, NULL);
        } else {
            peer_gone(n, msg->u.dead.rank, "died (coordinator)", 0);
        }
        break;
    case DSM_CTL_LEFT:
        if (msg->u.dead.rank == n->rank) {
            pthread_mutex_lock(&n->lock);
            n->left = 1;
            pthread_cond_broadcast(&n->cond);
            pthread_mutex_unlock(&n->lock);
        } else {
            /* Acknowledged once nothing here reaches the leaver any more:
             * it waits for every member's word before it closes its
             * endpoints, so it is neither seen to fail nor connected to as
             * it exits. */
            peer_gone(n, msg->u.dead.rank, "left", 1);
            if (!n->left_unacked[msg->u.dead.rank]) {
                n->left_unacked[msg->u.dead.rank] = 1;
                n->n_left_unacked++;
            }
            ack_left(n);
        }
        break;
    case DSM_CTL_BARRIER_DONE:
        pthread_mutex_lock(&n->lock);
        if (n->barrier_waiting) {
            n->barrier_done = 1;
            n->barrier_status = msg->u.barrier.status;
            pthread_cond_broadcast(&n->cond);
        }
        pthread_mutex_unlock(&n->lock);
        break;
    case DSM_CTL_STOP:
        mark_closed(n, DSM_NODE_STOPPED, "the coordinator stopped the cluster");
        break;
    case DSM_CTL_HEARTBEAT:
        break;
    default:
        DSM_WARN("node", "rank %u: unexpected control message type %u ignored", n->rank, msg->type);
    }
}

static void *ctl_main(void *arg)
{
    dsm_node_t *n = arg;
    dsm_thread_name("dsm-node-ctl", -1);
    uint64_t last_heard = dsm_now_ms(), next_beat = 0;
    while (!dsm_node_closed(n)) {
        uint64_t now = dsm_now_ms();
        if (now >= next_beat) {
            dsm_ctl_msg_t hb = {.type = DSM_CTL_HEARTBEAT};
            if (ctl_send(n, &hb) != DSM_OK) { mark_closed(n, DSM_NODE_LOST, "lost the coordinator (send failed)"); break; }
            next_beat = now + n->config.heartbeat_ms;
        }
        if (now - last_heard > n->config.peer_timeout_ms) {
            mark_closed(n, DSM_NODE_LOST, "lost the coordinator (no heartbeat)");
            break;
        }
        struct pollfd pfds[2] = {{.fd = n->ctl_fd, .events = POLLIN}, {.fd = n->wake_fd, .events = POLLIN}};
        int wait_ms = (int)(next_beat > now ? next_beat - now : 0);
        if (n->n_left_unacked) {
            ack_left(n);
            if (n->n_left_unacked && wait_ms > LEFT_ACK_POLL_MS) wait_ms = LEFT_ACK_POLL_MS;
        }
        int rc = poll(pfds, 2, wait_ms);
        if (rc < 0 && errno != EINTR) break;
        if (pfds[1].revents) break;
        if (rc <= 0 || !pfds[0].revents) continue;
        dsm_ctl_msg_t msg;
        uint8_t *payload;
        dsm_status_t st = ctl_recv(n, &msg, &payload, FRAME_TIMEOUT_MS);
        if (st == DSM_OK) {
            last_heard = dsm_now_ms();
            handle_ctl(n, &msg);
        }
        free(payload);
        if (st == DSM_ERR_AUTH) continue;   /* a frame not from the coordinator: dropped */
        if (st != DSM_OK) {
            mark_closed(n, DSM_NODE_LOST, st == DSM_ERR_CLOSED ? "lost the coordinator (connection closed)"
                                                : "lost the coordinator (bad message)");
            break;
        }
    }
    return NULL;
}

/* ---- life cycle --------------------------------------------------------- */

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* A node started with the auto transport takes the cluster's, as named in the
 * coordinator's challenge: UCX cannot join, say, shm daemons from a context
 * that mixes in transports they lack. AUTO if the coordinator does not say;
 * an error if it cannot be reached (joining could not either). */
static dsm_status_t ask_cluster_transport(dsm_node_t *n, dsm_transport_t *out)
{
    int fd;
    dsm_status_t st = dsm_sock_connect(n->coordinator, n->config.join_timeout_ms, &fd);
    if (st != DSM_OK) return st;
    uint8_t buf[DSM_CTL_HEADER_LEN + DSM_CTL_NONCE_LEN + 2];
    dsm_ctl_header_t h;
    dsm_ctl_msg_t msg;
    dsm_transport_t tr = DSM_TRANSPORT_AUTO;
    if (dsm_sock_recv_all(fd, buf, DSM_CTL_HEADER_LEN, FRAME_TIMEOUT_MS) == DSM_OK &&
        dsm_ctl_header_decode(buf, DSM_CTL_HEADER_LEN, &h) == DSM_OK && h.type == DSM_CTL_CHALLENGE &&
        h.length == sizeof buf - DSM_CTL_HEADER_LEN &&
        dsm_sock_recv_all(fd, buf + DSM_CTL_HEADER_LEN, h.length, FRAME_TIMEOUT_MS) == DSM_OK &&
        dsm_ctl_decode(h.type, buf + DSM_CTL_HEADER_LEN, h.length, &msg) == DSM_OK)
        tr = (dsm_transport_t)msg.u.challenge.transport;
    close(fd);
    if (tr != DSM_TRANSPORT_AUTO) DSM_INFO("node", "the cluster uses %s: joining over it", dsm_transport_name(tr));
    *out = tr;
    return DSM_OK;
}

dsm_status_t dsm_node_create(const dsm_node_config_t *config, dsm_node_t **out)
{
    if (!config || !out) return DSM_ERR_INVALID;
    if (!config->coordinator || !config->secret || !config->secret[0]) {
        DSM_ERROR("node", "a node needs a coordinator address and a non-empty cluster secret");
        return DSM_ERR_INVALID;
    }
    if (config->partition_size > (1ull << 40)) {
        DSM_ERROR("node", "partition of %llu bytes exceeds the 1 TiB a global address can reach",
                  (unsigned long long)config->partition_size);
        return DSM_ERR_INVALID;
    }
    int lo = config->kind == DSM_MEMBER_DAEMON ? 0 : DSM_FIRST_CLIENT_RANK;
    int hi = config->kind == DSM_MEMBER_DAEMON ? DSM_MAX_DAEMONS : DSM_MAX_RANKS;
    if (config->rank != DSM_RANK_ANY && (config->rank < lo || config->rank >= hi)) {
        DSM_ERROR("node", "rank %d is outside [%d, %d) for this kind of member", config->rank, lo, hi);
        return DSM_ERR_INVALID;
    }
    /* Every module's slot and handler ids, from the module table. */
    dsm_status_t assigned = dsm_modules_assign();
    if (assigned != DSM_OK) return assigned;
    dsm_node_t *n = calloc(1, sizeof *n);
    if (!n) return DSM_ERR_NOMEM;
    n->config = *config;
    apply_defaults(&n->config);
    n->coordinator = dup_or_null(config->coordinator);
    n->secret = dup_or_null(config->secret);
    n->net_device = dup_or_null(config->net_device);
    n->config.coordinator = n->coordinator;
    n->config.secret = n->secret;
    n->config.net_device = n->net_device;
    n->config.chaos = NULL;   /* the fabric reads it once, below */
    n->ctl_fd = n->wake_fd = -1;
    n->rank = UINT32_MAX;
    pthread_mutex_init(&n->lock, NULL);
    pthread_mutex_init(&n->send_lock, NULL);
    pthread_cond_init(&n->cond, NULL);

    dsm_status_t st = DSM_OK;
    if (n->config.transport == DSM_TRANSPORT_AUTO) st = ask_cluster_transport(n, &n->config.transport);
    if (st != DSM_OK) {
        dsm_node_destroy(n);
        return st;
    }
    dsm_fabric_config_t fc = {.transport = n->config.transport, .progress = config->progress,
                              .net_device = n->net_device, .op_timeout_ms = n->config.op_timeout_ms,
                              .chaos = config->chaos};
    st = dsm_fabric_create(&fc, &n->fabric);
    if (st == DSM_OK) st = dsm_spawn_attach(n);
    if (st == DSM_OK && (n->wake_fd = eventfd(0, EFD_CLOEXEC)) < 0) st = DSM_ERR_IO;
    if (st != DSM_OK) {
        dsm_node_destroy(n);
        return st;
    }
    dsm_fabric_on_peer_error(n->fabric, on_fabric_peer_error, n);
    *out = n;
    return DSM_OK;
}

/* The join's exchange on a connected n->ctl_fd: the challenge within
 * challenge_ms, each later receive within timeout_ms. A coordinator that
 * turns the connection away before its challenge (its unauthenticated
 * connections are full, or it closed this one to make room), or whose
 * challenge does not come in time (under a flood the kernel can drop the
 * connection from a full accept queue while this side thinks it open),
 * sets *turned_away with the reason: that says nothing of this node, and
 * the join tries again; so does a refusal as busy after the HELLO (the
 * coordinator displaced this connection before reading it). */
static dsm_status_t handshake(dsm_node_t *n, uint32_t challenge_ms, uint32_t timeout_ms, bool *turned_away,
                              char *why, size_t why_len)
{
    dsm_ctl_msg_t msg;
    uint8_t *payload = NULL;
    dsm_status_t st = ctl_recv(n, &msg, &payload, challenge_ms);
    bool late = st == DSM_ERR_TIMEOUT && challenge_ms < timeout_ms;
    *turned_away = (st == DSM_OK && msg.type == DSM_CTL_REFUSE) || st == DSM_ERR_CLOSED || late;
    if (*turned_away) {
        if (late) snprintf(why, why_len, "no challenge within %u ms", challenge_ms);
        else snprintf(why, why_len, "%s", st == DSM_OK ? msg.u.refuse.reason : "it closed the connection");
        st = st == DSM_OK ? msg.u.refuse.status : st;
        free(payload);
        return st;
    }
    if (st == DSM_OK && msg.type != DSM_CTL_CHALLENGE) st = DSM_ERR_PROTO;
    if (st != DSM_OK) {
        free(payload);
        DSM_ERROR("node", "no valid challenge from coordinator %s: %s", n->coordinator, dsm_strerror(st));
        return st;
    }
    uint8_t coord_nonce[DSM_CTL_NONCE_LEN];
    memcpy(coord_nonce, msg.u.challenge.nonce, sizeof coord_nonce);
    dsm_transport_t cluster_tr = (dsm_transport_t)msg.u.challenge.transport;
    free(payload);
    /* Members of one cluster share one fabric: a node on another could
     * never reach them, and would only find out when its join timed out. */
    if (cluster_tr != DSM_TRANSPORT_AUTO && n->config.transport != DSM_TRANSPORT_AUTO &&
        cluster_tr != n->config.transport) {
        DSM_ERROR("node", "this node's fabric is %s but the cluster at %s uses %s: join with fabric %s (or auto)",
                  dsm_transport_name(n->config.transport), n->coordinator, dsm_transport_name(cluster_tr),
                  dsm_transport_name(cluster_tr));
        return DSM_ERR_UNSUPPORTED;
    }

    const void *addr;
    size_t addr_len;
    if ((st = dsm_fabric_address(n->fabric, &addr, &addr_len)) != DSM_OK) return st;
    dsm_ctl_msg_t hello = {.type = DSM_CTL_HELLO};
    if ((st = dsm_auth_nonce(hello.u.hello.nonce, DSM_CTL_NONCE_LEN)) != DSM_OK) return st;
    hello.u.hello.self = (dsm_ctl_member_t){
        .rank = n->config.rank, .kind = (uint16_t)n->config.kind,
        .addr = addr, .addr_len = (uint32_t)addr_len};
    if (n->published) hello.u.hello.self.values = *n->published;
    dsm_writer_t body = {0};
    dsm_ctl_encode_hello_body(&hello, &body);
    st = body.ok ? dsm_auth_mac(n->secret, "dsm-join-v1", coord_nonce, sizeof coord_nonce,
                                body.buf, body.len, hello.u.hello.mac)
                 : DSM_ERR_NOMEM;
    dsm_writer_free(&body);
    if (st == DSM_OK) st = ctl_send(n, &hello);
    if (st != DSM_OK) return st;

    st = ctl_recv(n, &msg, &payload, timeout_ms);
    if (st == DSM_OK && msg.type == DSM_CTL_REFUSE && msg.u.refuse.status == DSM_ERR_BUSY) {
        /* displaced by newer unauthenticated connections before the
         * coordinator read this HELLO: nothing was judged */
        *turned_away = true;
        snprintf(why, why_len, "%s", msg.u.refuse.reason);
        st = DSM_ERR_BUSY;
    } else if (st == DSM_OK && msg.type == DSM_CTL_REFUSE) {
        DSM_ERROR("node", "coordinator %s refused the join: %s", n->coordinator, msg.u.refuse.reason);
        st = msg.u.refuse.status;
    } else if (st == DSM_OK && msg.type != DSM_CTL_WELCOME) {
        st = DSM_ERR_PROTO;
    } else if (st == DSM_OK) {
        /* The coordinator must prove it knows the secret too. */
        uint8_t nonces[2 * DSM_CTL_NONCE_LEN], rank_bytes[4], expect[DSM_CTL_MAC_LEN];
        memcpy(nonces, hello.u.hello.nonce, DSM_CTL_NONCE_LEN);
        memcpy(nonces + DSM_CTL_NONCE_LEN, coord_nonce, DSM_CTL_NONCE_LEN);
        dsm_put_u32(rank_bytes, (uint32_t)msg.u.welcome.rank);
        st = dsm_auth_mac(n->secret, "dsm-coord-v1", nonces, sizeof nonces, rank_bytes, 4, expect);
        if (st == DSM_OK && !dsm_auth_equal(expect, msg.u.welcome.mac, DSM_CTL_MAC_LEN)) {
            DSM_ERROR("node", "coordinator %s does not know the cluster secret", n->coordinator);
            st = DSM_ERR_AUTH;
        }
        if (st == DSM_OK)
            st = dsm_ctl_session_derive(n->secret, hello.u.hello.nonce, coord_nonce, (uint32_t)msg.u.welcome.rank,
                                        &n->session);
        if (st == DSM_OK) {
            n->rank = (uint32_t)msg.u.welcome.rank;
            if (msg.u.welcome.peer_timeout_ms) n->config.peer_timeout_ms = msg.u.welcome.peer_timeout_ms;
            n->sealed = 1;   /* every frame after the WELCOME, both ways */
        }
    } else if (st == DSM_ERR_CLOSED) {
        /* The coordinator hangs up on joins it refuses before answering. */
        st = DSM_ERR_AUTH;
    }
    free(payload);
    return st;
}

/* This node is a member like any other: connected to itself through the
 * fabric (so a global address works the same whichever node it names), its
 * own values readable, its join hooks run for it. */
static dsm_status_t connect_self(dsm_node_t *n)
{
    const void *addr;
    size_t addr_len;
    dsm_status_t st = dsm_fabric_address(n->fabric, &addr, &addr_len);
    if (st == DSM_OK) st = dsm_fabric_connect(n->fabric, n->rank, addr, addr_len);
    if (st == DSM_OK) st = member_reachable(n, n->rank, n->published);
    return st;
}

/* Connect and authenticate, trying again with backoff while the
 * coordinator turns the connection away before its challenge (a flood of
 * unauthenticated connections displaces the oldest) or its challenge is
 * late, within the join timeout. The wait for a challenge starts at a
 * second, far above its usual milliseconds even on a crowded host, and
 * doubles per attempt, so a coordinator that is merely slow is still
 * waited for. Leaves n->ctl_fd open on success. */
static dsm_status_t connect_and_handshake(dsm_node_t *n)
{
    enum { RETRY_FIRST_MS = 10, RETRY_MAX_MS = 500, CHALLENGE_FIRST_MS = 1000 };
    uint64_t deadline = dsm_now_ms() + n->config.join_timeout_ms;
    uint32_t pause_ms = RETRY_FIRST_MS, challenge_ms = CHALLENGE_FIRST_MS;
    for (unsigned attempt = 1;; attempt++) {
        uint64_t now = dsm_now_ms();
        uint32_t left = now < deadline ? (uint32_t)(deadline - now) : 1;
        dsm_status_t st = dsm_sock_connect(n->coordinator, left, &n->ctl_fd);
        if (st != DSM_OK) return st;
        bool turned_away;
        char why[DSM_CTL_MAX_REASON + 1] = "";
        st = handshake(n, challenge_ms < left ? challenge_ms : left, left, &turned_away, why, sizeof why);
        if (challenge_ms < UINT32_MAX / 2) challenge_ms *= 2;
        if (st == DSM_OK) return DSM_OK;
        close(n->ctl_fd);
        n->ctl_fd = -1;
        now = dsm_now_ms();
        if (!turned_away || now + pause_ms >= deadline) {
            if (turned_away)
                DSM_ERROR("node", "coordinator %s refused the join (%u attempts within the join timeout): %s",
                          n->coordinator, attempt, why);
            return st;
        }
        if (attempt == 1)
            DSM_WARN("node", "coordinator %s turned the join away before its challenge (%s); trying again",
                     n->coordinator, why);
        /* jitter: joiners turned away together do not come back together */
        uint32_t nap_ms = pause_ms + (uint32_t)(dsm_now_ns() % (pause_ms / 2 + 1));
        struct timespec ts = {nap_ms / 1000, (long)(nap_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        pause_ms = pause_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : pause_ms * 2;
    }
}

dsm_status_t dsm_node_join(dsm_node_t *n)
{
    if (!n || n->joined) return DSM_ERR_STATE;
    dsm_status_t st = connect_and_handshake(n);
    if (st != DSM_OK) return st;
    dsm_fabric_set_rank(n->fabric, n->rank);
    if ((st = connect_self(n)) != DSM_OK) goto fail;
    pthread_mutex_lock(&n->lock);
    n->peers[n->rank] = (dsm_peer_info_t){.known = 1, .live = 1, .kind = (uint16_t)n->config.kind};
    pthread_mutex_unlock(&n->lock);
    if (dsm_thread_start(&n->ctl_thread, NULL, ctl_main, n) != 0) { st = DSM_ERR_NOMEM; goto fail; }
    n->ctl_running = 1;
    n->joined = 1;
    struct timespec deadline;
    dsm_realtime_deadline(&deadline, n->config.join_timeout_ms);
    pthread_mutex_lock(&n->lock);
    int rc = 0;
    while (!n->ready && !n->closed && rc == 0) rc = pthread_cond_timedwait(&n->cond, &n->lock, &deadline);
    st = n->ready ? DSM_OK : n->closed ? DSM_ERR_CLOSED : DSM_ERR_TIMEOUT;
    pthread_mutex_unlock(&n->lock);
    if (st == DSM_OK)
        DSM_INFO("node", "rank %u joined %s (%s, %s progress, %u published values)", n->rank, n->coordinator,
                 dsm_transport_name(n->config.transport),
                 dsm_progress_name(dsm_progress_resolve(n->config.progress, n->config.transport)),
                 n->published ? n->published->count : 0u);
    return st;
fail:
    close(n->ctl_fd);
    n->ctl_fd = -1;
    return st;
}

/* After LEAVE: until the coordinator says every member has let this node
 * go (its LEFT for this rank), so that none sees this node's endpoints
 * close before it knows of the departure, and none still connects to it.
 * Bounded by the peer timeout, within which the coordinator answers even
 * for members that do not (it declares them dead). */
static void wait_left(dsm_node_t *n)
{
    struct timespec deadline;
    dsm_realtime_deadline(&deadline, n->config.peer_timeout_ms + n->config.heartbeat_ms);
    pthread_mutex_lock(&n->lock);
    int rc = 0;
    while (!n->left && !n->closed && rc == 0) rc = pthread_cond_timedwait(&n->cond, &n->lock, &deadline);
    int left = n->left;
    pthread_mutex_unlock(&n->lock);
    if (!left) DSM_INFO("node", "rank %u: left without every member's acknowledgement", n->rank);
}

void dsm_node_destroy(dsm_node_t *n)
{
    if (!n) return;
    if (n->ctl_running && pthread_equal(pthread_self(), n->ctl_thread)) {
        /* it would join itself, then free what it still uses */
        DSM_ERROR("node", "rank %u: destroy called on the node's own control thread: refused", n->rank);
        return;
    }
    pthread_mutex_lock(&n->lock);
    n->leaving = 1;
    pthread_mutex_unlock(&n->lock);
    if (n->joined && !dsm_node_closed(n)) {
        dsm_ctl_msg_t leave = {.type = DSM_CTL_LEAVE};
        if (ctl_send(n, &leave) == DSM_OK) wait_left(n);
    }
    if (n->ctl_running) {
        uint64_t one = 1;
        ssize_t unused = write(n->wake_fd, &one, sizeof one);
        (void)unused;
        pthread_join(n->ctl_thread, NULL);
    }
    /* Spawned functions use the node: ask them to stop, and let them finish
     * first (one that ignores its flag holds the destroy; dsmd ends those). */
    dsm_node_stop_jobs(n);
    pthread_mutex_lock(&n->lock);
    if (!n->closed) n->closed = DSM_NODE_STOPPED;
    pthread_cond_broadcast(&n->cond);
    while (n->spawns_running > 0 || n->local_running > 0) pthread_cond_wait(&n->cond, &n->lock);
    pthread_mutex_unlock(&n->lock);
    /* Handlers may touch module state and the memory modules registered
     * (the heap's partition): stop the fabric's progress first, then free
     * module state (modules unregister their regions there), and only then
     * the fabric (regions belong to its context). The control connection
     * closes after the stop: its close lets other leavers go, whose
     * endpoints closing would otherwise reach this fabric as failures. */
    dsm_fabric_stop(n->fabric);
    pthread_mutex_lock(&n->send_lock);   /* a fabric error's report may be on its way out */
    if (n->ctl_fd >= 0) close(n->ctl_fd);
    n->ctl_fd = -1;
    pthread_mutex_unlock(&n->send_lock);
    if (n->wake_fd >= 0) close(n->wake_fd);
    /* no handler runs now: the job pool's threads (idle) are joined, and
     * spawns still waiting for a peer's result fail */
    if (n->pool) dsm_spawn_detach(n);
    for (int i = DSM_NODE_MAX_MODULES - 1; i >= 0; i--)
        if (n->modules[i] && n->module_destroy[i]) n->module_destroy[i](n->modules[i]);
    if (n->fabric) dsm_fabric_destroy(n->fabric);
    dsm_node_values_free(n);
    pthread_mutex_destroy(&n->lock);
    pthread_mutex_destroy(&n->send_lock);
    pthread_cond_destroy(&n->cond);
    free(n->coordinator);
    free(n->secret);
    free(n->net_device);
    free(n);
}

/* ---- queries ------------------------------------------------------------ */

dsm_status_t dsm_node_set_module(dsm_node_t *n, int id, void *state, dsm_module_destroy_t destroy)
{
    if (!n || !state || id < 0 || id >= DSM_NODE_MAX_MODULES) return DSM_ERR_INVALID;
    /* Handlers read the slot without a lock: it is set once, before joining. */
    if (n->joined) return DSM_ERR_STATE;
    if (n->modules[id]) {
        DSM_ERROR("node", "module slot %d is already taken: refused (two modules with one id?)", id);
        return DSM_ERR_EXISTS;
    }
    n->modules[id] = state;
    n->module_destroy[id] = destroy;
    return DSM_OK;
}

void *dsm_node_module(const dsm_node_t *n, int id)
{
    return n && id >= 0 && id < DSM_NODE_MAX_MODULES ? n->modules[id] : NULL;
}

uint32_t dsm_node_rank(const dsm_node_t *n) { return n->rank; }
dsm_fabric_t *dsm_node_fabric(dsm_node_t *n) { return n->fabric; }
const dsm_node_config_t *dsm_node_config(const dsm_node_t *n) { return &n->config; }

dsm_status_t dsm_node_peer_state(dsm_node_t *n, uint32_t rank)
{
    if (rank >= DSM_MAX_RANKS) return DSM_ERR_NO_PEER;
    if (rank == n->rank) return DSM_OK;
    pthread_mutex_lock(&n->lock);
    dsm_peer_info_t p = n->peers[rank];
    pthread_mutex_unlock(&n->lock);
    if (p.live) return dsm_fabric_peer_state(n->fabric, rank);
    return p.known ? DSM_ERR_PEER_DEAD : DSM_ERR_NO_PEER;
}

uint32_t dsm_node_daemons(dsm_node_t *n, uint32_t *ranks, uint32_t cap)
{
    uint32_t count = 0;
    pthread_mutex_lock(&n->lock);
    for (uint32_t r = 0; r < DSM_MAX_DAEMONS; r++) {
        if (!n->peers[r].live || n->peers[r].kind != DSM_MEMBER_DAEMON) continue;
        if (ranks && count < cap) ranks[count] = r;
        count++;
    }
    pthread_mutex_unlock(&n->lock);
    return count;
}

/* Live daemons that every member can reach. */
static uint32_t ready_daemons(dsm_node_t *n)
{
    uint32_t count = 0;
    pthread_mutex_lock(&n->lock);
    for (uint32_t r = 0; r < DSM_MAX_DAEMONS; r++)
        count += n->peers[r].live && n->peers[r].ready && n->peers[r].kind == DSM_MEMBER_DAEMON;
    pthread_mutex_unlock(&n->lock);
    return count;
}

dsm_status_t dsm_node_wait_daemons(dsm_node_t *n, uint32_t count, uint32_t timeout_ms)
{
    struct timespec deadline;
    dsm_realtime_deadline(&deadline, timeout_ms);
    for (;;) {
        if (ready_daemons(n) >= count) return DSM_OK;
        pthread_mutex_lock(&n->lock);
        int closed = n->closed;
        int rc = closed ? 0 : pthread_cond_timedwait(&n->cond, &n->lock, &deadline);
        pthread_mutex_unlock(&n->lock);
        if (closed) return DSM_ERR_CLOSED;
        if (rc == ETIMEDOUT) return ready_daemons(n) >= count ? DSM_OK : DSM_ERR_TIMEOUT;
    }
}

int dsm_node_closed(const dsm_node_t *n)
{
    dsm_node_t *m = (dsm_node_t *)n;
    pthread_mutex_lock(&m->lock);
    int closed = m->closed;
    pthread_mutex_unlock(&m->lock);
    return closed;
}

dsm_status_t dsm_node_wait_closed(dsm_node_t *n, uint32_t timeout_ms)
{
    struct timespec deadline;
    dsm_realtime_deadline(&deadline, timeout_ms);
    pthread_mutex_lock(&n->lock);
    int rc = 0;
    while (!n->closed && rc == 0) rc = pthread_cond_timedwait(&n->cond, &n->lock, &deadline);
    int closed = n->closed;
    pthread_mutex_unlock(&n->lock);
    return closed ? DSM_OK : DSM_ERR_TIMEOUT;
}

dsm_status_t dsm_node_barrier(dsm_node_t *n, uint32_t timeout_ms)
{
    if (n->config.kind != DSM_MEMBER_DAEMON) return DSM_ERR_STATE;
    pthread_mutex_lock(&n->lock);
    if (n->closed || n->barrier_waiting) {
        dsm_status_t st = n->closed ? DSM_ERR_CLOSED : DSM_ERR_STATE;
        pthread_mutex_unlock(&n->lock);
        return st;
    }
    n->barrier_waiting = 1;
    n->barrier_done = 0;
    pthread_mutex_unlock(&n->lock);
    dsm_ctl_msg_t msg = {.type = DSM_CTL_BARRIER};
    dsm_status_t st = ctl_send(n, &msg);
    struct timespec deadline;
    dsm_realtime_deadline(&deadline, timeout_ms ? timeout_ms : UINT32_MAX / 2);
    pthread_mutex_lock(&n->lock);
    int rc = 0;
    while (st == DSM_OK && !n->barrier_done && !n->closed && rc == 0)
        rc = pthread_cond_timedwait(&n->cond, &n->lock, &deadline);
    if (st == DSM_OK)
        st = n->barrier_done ? n->barrier_status : n->closed ? DSM_ERR_CLOSED : DSM_ERR_TIMEOUT;
    n->barrier_waiting = 0;
    pthread_mutex_unlock(&n->lock);
    return st;
}

void dsm_node_stats(dsm_node_t *n, dsm_stats_t *out)
{
    dsm_fabric_stats(n->fabric, out);
    out->spawns_run = atomic_load_explicit(&n->spawns_run, memory_order_relaxed);
}
