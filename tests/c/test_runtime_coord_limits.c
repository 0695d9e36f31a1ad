/* The coordinator under two pre-authentication attacks, against a live
 * coordinator in this process: hundreds of idle connections that never
 * authenticate, and connections declaring (and sending) megabyte payloads.
 * During each a correct client must join, the coordinator's memory must stay
 * bounded, and whoever is turned away must be told why. Also the receive
 * buffer's growth rule: a frame of exactly the maximum payload fits, and
 * a node of another active-message version is refused at its join; a
 * joiner turned away before the challenge tries again. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "cluster_util.h"
#include "dsm/fabric.h"
#include "runtime/auth.h"
#include "runtime/ctl_wire.h"
#include "runtime/internal.h"
#include "runtime/node_internal.h"
#include "runtime/sock.h"
#include "util/clock.h"

enum { IDLE_CONNS = 512, BIG_CONNS = 200, BIG_PAYLOAD = 1000 * 1000 };

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

/* A client joins while the attack holds its connections open. */
static void client_joins(dsm_harness_t *c)
{
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, DSM_RANK_ANY);
    cfg.kind = DSM_MEMBER_CLIENT;
    cfg.partition_size = 0;
    cfg.join_timeout_ms = 20000;
    dsm_node_t *client = NULL;
    assert_int_equal(test_node_start(&cfg, -1, &client), DSM_OK);
    assert_int_equal(dsm_node_wait_daemons(client, 1, 10000), DSM_OK);
    dsm_node_destroy(client);
}

/* The daemon stays; the clients that joined have left. */
static int members_settle(dsm_harness_t *c, uint32_t want)
{
    uint64_t deadline = dsm_now_ms() + 10000;
    while (dsm_coord_members(c->coord, NULL) != want && dsm_now_ms() < deadline) usleep(10 * 1000);
    return dsm_coord_members(c->coord, NULL) == want;
}

/* Read what the coordinator sent on a connection it closed: the challenge,
 * maybe a REFUSE. Returns 1 and the reason if it refused, 0 if it just
 * closed, -1 if the connection is still open. */
static int refusal(int fd, char *reason, size_t cap)
{
    uint8_t buf[4096];
    size_t len = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + len, sizeof buf - len, MSG_DONTWAIT);
        if (n > 0) { len += (size_t)n; if (len == sizeof buf) break; continue; }
        if (n == 0) break;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return -1;
        break; /* reset: closed */
    }
    size_t off = 0;
    while (len - off >= DSM_CTL_HEADER_LEN) {
        dsm_ctl_header_t h;
        if (dsm_ctl_header_decode(buf + off, len - off, &h) != DSM_OK) break;
        if (len - off - DSM_CTL_HEADER_LEN < h.length) break;
        dsm_ctl_msg_t msg;
        if (h.type == DSM_CTL_REFUSE &&
            dsm_ctl_decode(h.type, buf + off + DSM_CTL_HEADER_LEN, h.length, &msg) == DSM_OK) {
            snprintf(reason, cap, "%s", msg.u.refuse.reason);
            return 1;
        }
        off += DSM_CTL_HEADER_LEN + h.length;
    }
    return 0;
}

/* Connections the coordinator has closed, waiting up to timeout_ms for at
 * least `want` of them; the last refusal reason seen goes to reason. */
static int closed_by_coordinator(const int *fds, int n, int want, uint32_t timeout_ms, char *reason, size_t cap)
{
    uint64_t deadline = dsm_now_ms() + timeout_ms;
    int closed;
    reason[0] = '\0';
    do {
        closed = 0;
        for (int i = 0; i < n; i++) {
            if (fds[i] < 0) { closed++; continue; }
            char why[DSM_CTL_MAX_REASON + 1];
            int r = refusal(fds[i], why, sizeof why);
            if (r >= 0) closed++;
            if (r == 1) snprintf(reason, cap, "%s", why);
        }
        if (closed >= want) break;
        usleep(20 * 1000);
    } while (dsm_now_ms() < deadline);
    return closed;
}

static void test_idle_connections_do_not_lock_out_joins(void **state)
{
    dsm_harness_t *c = *state;
    long before = rss_kb();
    static int fds[IDLE_CONNS];
    int opened = 0;
    for (int i = 0; i < IDLE_CONNS; i++) {
        fds[i] = -1;
        if (dsm_sock_connect(c->coordinator, 5000, &fds[i]) == DSM_OK) opened++;
    }
    assert_true(opened > IDLE_CONNS / 2);
    client_joins(c);
    /* Most of the idle ones were turned away, and told why. */
    char reason[DSM_CTL_MAX_REASON + 1];
    int closed = closed_by_coordinator(fds, IDLE_CONNS, IDLE_CONNS / 2, 10000, reason, sizeof reason);
    print_message("idle flood: %d connections opened, %d closed by the coordinator, RSS %ld -> %ld kB; "
                  "refusal: \"%s\"\n", opened, closed, before, rss_kb(), reason);
    assert_true(closed >= IDLE_CONNS / 2);
    assert_non_null(strstr(reason, "unauthenticated"));
    for (int i = 0; i < IDLE_CONNS; i++)
        if (fds[i] >= 0) close(fds[i]);
    assert_true(members_settle(c, 1));
}

static void test_declared_megabytes_cost_nothing(void **state)
{
    dsm_harness_t *c = *state;
    long before = rss_kb();
    static int fds[BIG_CONNS];
    static size_t sent[BIG_CONNS];
    static uint8_t junk[64 * 1024];
    /* A HELLO header declaring BIG_PAYLOAD bytes, then the bytes. */
    uint8_t header[DSM_CTL_HEADER_LEN] = {0x4d, 0x43, 0x54, 0x4c, DSM_CTL_VERSION, 0, DSM_CTL_HELLO, 0};
    dsm_put_u32(header + 8, BIG_PAYLOAD);
    for (int i = 0; i < BIG_CONNS; i++) {
        fds[i] = -1;
        sent[i] = 0;
        if (dsm_sock_connect(c->coordinator, 5000, &fds[i]) != DSM_OK) continue;
        if (send(fds[i], header, sizeof header, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof header) {
            close(fds[i]);
            fds[i] = -1;
        }
    }
    /* Push the payloads until each is sent or its connection is closed. */
    uint64_t deadline = dsm_now_ms() + 30000;
    long peak = rss_kb();
    int busy = 1;
    while (busy && dsm_now_ms() < deadline) {
        busy = 0;
        for (int i = 0; i < BIG_CONNS; i++) {
            if (fds[i] < 0 || sent[i] >= BIG_PAYLOAD) continue;
            size_t n = BIG_PAYLOAD - sent[i] < sizeof junk ? BIG_PAYLOAD - sent[i] : sizeof junk;
            ssize_t k = send(fds[i], junk, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) sent[i] += (size_t)k;
            else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { close(fds[i]); fds[i] = -1; continue; }
            busy = 1;
        }
        long now = rss_kb();
        if (now > peak) peak = now;
        if (busy) usleep(1000);
    }
    client_joins(c);
    long during = rss_kb();
    if (during > peak) peak = during;
    size_t total = 0;
    for (int i = 0; i < BIG_CONNS; i++) total += sent[i];
    for (int i = 0; i < BIG_CONNS; i++)
        if (fds[i] >= 0) close(fds[i]);
    print_message("declared-size flood: %zu bytes sent on %d connections, RSS %ld -> peak %ld kB (after join %ld)\n",
                  total, BIG_CONNS, before, peak, during);
    /* 200 x 1 MB must not be buffered: allow 64 MB for everything else. */
    assert_true(peak - before < 64 * 1024);
    assert_true(members_settle(c, 1));
}

/* A client on another fabric than the cluster's is refused at once, and
 * told both names. */
static void test_fabric_mismatch_refused_at_join(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, DSM_RANK_ANY);
    cfg.kind = DSM_MEMBER_CLIENT;
    cfg.partition_size = 0;
    cfg.transport = DSM_TRANSPORT_TCP;   /* the cluster is on shm */
    cfg.net_device = "lo";
    cfg.join_timeout_ms = 15000;         /* not what ends the wait */
    dsm_node_t *client = NULL;
    dsm_clear_last_error();
    assert_int_equal(test_node_start(&cfg, -1, &client), DSM_ERR_UNSUPPORTED);
    const char *why = dsm_last_error();
    print_message("fabric mismatch: \"%s\"\n", why);
    assert_non_null(strstr(why, "tcp"));
    assert_non_null(strstr(why, "shm"));
    assert_true(members_settle(c, 1));
}

/* Join by hand with a correct secret and `addr` as this member's fabric
 * address; the refusal's reason goes to reason (1 if refused). */
static int join_with_address(dsm_harness_t *c, const uint8_t *addr, size_t addr_len, char *reason, size_t cap)
{
    int fd = -1;
    assert_int_equal(dsm_sock_connect(c->coordinator, 5000, &fd), DSM_OK);
    uint8_t hdr[DSM_CTL_HEADER_LEN];
    dsm_ctl_header_t h;
    assert_int_equal(dsm_sock_recv_all(fd, hdr, sizeof hdr, 5000), DSM_OK);
    assert_int_equal(dsm_ctl_header_decode(hdr, sizeof hdr, &h), DSM_OK);
    uint8_t *payload = malloc(h.length ? h.length : 1);
    assert_int_equal(dsm_sock_recv_all(fd, payload, h.length, 5000), DSM_OK);
    dsm_ctl_msg_t challenge;
    assert_int_equal(dsm_ctl_decode(h.type, payload, h.length, &challenge), DSM_OK);
    assert_int_equal(challenge.type, DSM_CTL_CHALLENGE);
    dsm_ctl_msg_t hello = {.type = DSM_CTL_HELLO};
    assert_int_equal(dsm_auth_nonce(hello.u.hello.nonce, DSM_CTL_NONCE_LEN), DSM_OK);
    hello.u.hello.self = (dsm_ctl_member_t){.rank = DSM_RANK_ANY, .kind = DSM_MEMBER_CLIENT, .addr = addr,
                                            .addr_len = (uint32_t)addr_len};
    dsm_writer_t body = {0}, w = {0};
    assert_int_equal(dsm_ctl_encode_hello_body(&hello, &body), DSM_OK);
    assert_int_equal(dsm_auth_mac(DSM_HARNESS_SECRET, "dsm-join-v1", challenge.u.challenge.nonce, DSM_CTL_NONCE_LEN,
                                  body.buf, body.len, hello.u.hello.mac), DSM_OK);
    assert_int_equal(dsm_ctl_encode(&hello, &w), DSM_OK);
    assert_int_equal(dsm_sock_send_all(fd, w.buf, w.len), DSM_OK);
    dsm_writer_free(&body);
    dsm_writer_free(&w);
    free(payload);
    int refused = 0;
    reason[0] = '\0';
    if (dsm_sock_recv_all(fd, hdr, sizeof hdr, 5000) == DSM_OK && dsm_ctl_header_decode(hdr, sizeof hdr, &h) == DSM_OK &&
        h.type == DSM_CTL_REFUSE) {
        payload = malloc(h.length ? h.length : 1);
        dsm_ctl_msg_t msg;
        if (dsm_sock_recv_all(fd, payload, h.length, 5000) == DSM_OK &&
            dsm_ctl_decode(h.type, payload, h.length, &msg) == DSM_OK) {
            snprintf(reason, cap, "%s", msg.u.refuse.reason);
            refused = msg.u.refuse.status == DSM_ERR_PROTO;
        }
        free(payload);
    }
    close(fd);
    return refused;
}

/* A member whose fabric speaks another active-message version (a build of
 * another version of the project) is refused at its join and told both
 * versions; so is one whose address is no fabric address at all. The
 * cluster goes on. A node's own fabric refuses such an address too. */
static void test_other_wire_version_refused_at_join(void **state)
{
    dsm_harness_t *c = *state;
    const void *real;
    size_t real_len;
    assert_int_equal(dsm_fabric_address(dsm_node_fabric(c->nodes[0]), &real, &real_len), DSM_OK);
    unsigned theirs = 99, mine = 0;
    assert_int_equal(dsm_fabric_address_check(real, real_len, &theirs, &mine), DSM_OK);
    assert_int_equal(theirs, mine);
    uint8_t *other = malloc(real_len);
    memcpy(other, real, real_len);
    other[1] = (uint8_t)(mine - 1);   /* the version byte: the build before */
    assert_int_equal(dsm_fabric_address_check(other, real_len, &theirs, NULL), DSM_ERR_PROTO);
    assert_int_equal(theirs, mine - 1);
    /* the node's fabric will not connect to it either */
    assert_int_equal(dsm_fabric_connect(dsm_node_fabric(c->nodes[0]), 200, other, real_len), DSM_ERR_PROTO);

    char reason[DSM_CTL_MAX_REASON + 1], want[64];
    assert_true(join_with_address(c, other, real_len, reason, sizeof reason));
    print_message("other version: \"%s\"\n", reason);
    snprintf(want, sizeof want, "active-message version %u, this cluster %u", mine - 1, mine);
    assert_non_null(strstr(reason, want));
    static const uint8_t garbage[] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_true(join_with_address(c, garbage, sizeof garbage, reason, sizeof reason));
    assert_non_null(strstr(reason, "not a fabric address"));
    free(other);
    assert_true(members_settle(c, 1));
}

/* A member with the cluster's secret whose worker address UCX cannot parse
 * (a fabric prefix, then bytes that make ucp_ep_create assert) is refused at
 * its join, named, and never reaches a member: node 0 and this process (the
 * coordinator's) survive, and the next real join works (the checker that
 * died on the address is replaced). Mutated real addresses, refused or
 * taken, crash nothing either. */
static void test_malformed_worker_address_refused(void **state)
{
    dsm_harness_t *c = *state;
    const uint8_t *real;
    size_t real_len;
    assert_int_equal(dsm_fabric_address(dsm_node_fabric(c->nodes[0]), (const void **)&real, &real_len), DSM_OK);
    uint8_t poison[6];
    memcpy(poison, real, 4);   /* a prefix this build accepts */
    poison[4] = 0xca;
    poison[5] = 0x6c;
    char reason[DSM_CTL_MAX_REASON + 1];
    assert_true(join_with_address(c, poison, sizeof poison, reason, sizeof reason));
    print_message("malformed address: \"%s\"\n", reason);
    assert_non_null(strstr(reason, "worker address"));
    client_joins(c);
    assert_true(members_settle(c, 1));

    uint8_t *mutant = malloc(real_len);
    unsigned seed = 12345;
    for (int round = 0; round < 24; round++) {
        memcpy(mutant, real, real_len);
        for (int k = 0; k < 1 + round % 4; k++) {   /* a few bytes after the prefix */
            size_t at = 4 + rand_r(&seed) % (real_len - 4);
            mutant[at] = (uint8_t)rand_r(&seed);
        }
        join_with_address(c, mutant, real_len, reason, sizeof reason);   /* either way, nothing dies */
    }
    free(mutant);
    client_joins(c);
    assert_true(members_settle(c, 1));
}

/* ---- through a gate: turned away before the challenge, forged frames ---- */

/* Between a joiner and the coordinator, relaying. With turn_away the first
 * connection gets a REFUSE before any challenge (what a flood of
 * unauthenticated connections makes the coordinator send the oldest) and
 * the second is closed at once; with forge, forged frames follow the
 * member table. */
typedef struct gate {
    int listen_fd;
    uint16_t port;
    const char *coordinator;
    int turn_away;            /* the first GATE_TURN_AWAYS connections are turned away */
    int forge;                /* after the table, forged frames go to the member */
    _Atomic int accepted;
    _Atomic int forged;       /* forged frames sent */
    _Atomic int stop;
} gate_t;

/* What a proxy on the path that does not know the secret can send: a
 * well-formed STOP, and a MEMBER entry claiming a rank. */
static void send_forged(int fd)
{
    dsm_ctl_msg_t stop = {.type = DSM_CTL_STOP};
    static const uint8_t addr[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    dsm_ctl_msg_t member = {.type = DSM_CTL_MEMBER};
    member.u.member = (dsm_ctl_member_t){.rank = 5, .kind = DSM_MEMBER_DAEMON, .addr = addr, .addr_len = sizeof addr};
    const dsm_ctl_msg_t *forged[] = {&member, &stop};
    for (int i = 0; i < 2; i++) {
        dsm_writer_t w = {0};
        if (dsm_ctl_encode(forged[i], &w) == DSM_OK && dsm_sock_send_all(fd, w.buf, w.len) == DSM_OK) {}
        dsm_writer_free(&w);
    }
}

/* Relay a (member) and b (coordinator); from b, frame by frame. */
static void relay(gate_t *g, int a, int b)
{
    uint8_t buf[65536];
    struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
    while (!atomic_load(&g->stop)) {
        if (poll(p, 2, 100) < 0) return;
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = recv(a, buf, sizeof buf, 0);
            if (n <= 0 || dsm_sock_send_all(b, buf, (size_t)n) != DSM_OK) return;
        }
        if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            dsm_ctl_header_t h;
            if (dsm_sock_recv_all(b, buf, DSM_CTL_HEADER_LEN, 5000) != DSM_OK ||
                dsm_ctl_header_decode(buf, DSM_CTL_HEADER_LEN, &h) != DSM_OK || h.length > sizeof buf - 16 ||
                dsm_sock_recv_all(b, buf + DSM_CTL_HEADER_LEN, h.length, 5000) != DSM_OK ||
                dsm_sock_send_all(a, buf, DSM_CTL_HEADER_LEN + h.length) != DSM_OK)
                return;
            if (g->forge && h.type == DSM_CTL_TABLE_END && atomic_load(&g->forged) == 0) {
                send_forged(a);
                atomic_store(&g->forged, 2);
            }
        }
    }
}

/* The ways a coordinator turns a join away without judging it, in the
 * order the gate plays them when turn_away is set. */
enum { GATE_REFUSE, GATE_CLOSE, GATE_SILENT, GATE_BUSY_AFTER_HELLO, GATE_TURN_AWAYS };

static void gate_send(int fd, const dsm_ctl_msg_t *m)
{
    dsm_writer_t w = {0};
    /* no cmocka asserts off the test's thread: a short send shows as one
     * connection more, which the test counts */
    if (dsm_ctl_encode(m, &w) == DSM_OK) (void)send(fd, w.buf, w.len, MSG_NOSIGNAL);
    dsm_writer_free(&w);
}

static void gate_refuse(int fd, dsm_status_t status)
{
    dsm_ctl_msg_t refuse = {.type = DSM_CTL_REFUSE};
    refuse.u.refuse.status = status;
    snprintf(refuse.u.refuse.reason, sizeof refuse.u.refuse.reason, "coordinator busy (a test's gate)");
    gate_send(fd, &refuse);
}

/* Until the member hangs up (or the test stops); with a frame first, the
 * first frame it sends is read and answered as busy. */
static void gate_hold(gate_t *g, int fd, int answer_busy)
{
    uint8_t buf[4096];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (!atomic_load(&g->stop)) {
        if (poll(&p, 1, 100) <= 0) continue;
        if (recv(fd, buf, sizeof buf, 0) <= 0) return;
        if (answer_busy) {
            gate_refuse(fd, DSM_ERR_BUSY);
            return;
        }
    }
}

static void *gate_main(void *arg)
{
    gate_t *g = arg;
    for (;;) {
        struct pollfd p = {.fd = g->listen_fd, .events = POLLIN};
        if (atomic_load(&g->stop)) return NULL;
        if (poll(&p, 1, 100) <= 0) continue;
        int fd = accept(g->listen_fd, NULL, NULL);
        if (fd < 0) continue;
        int k = atomic_fetch_add(&g->accepted, 1) + (g->turn_away ? 0 : GATE_TURN_AWAYS);
        if (k == GATE_REFUSE) {
            gate_refuse(fd, DSM_ERR_TIMEOUT);
        } else if (k == GATE_SILENT) {
            gate_hold(g, fd, 0);
        } else if (k == GATE_BUSY_AFTER_HELLO) {
            dsm_ctl_msg_t challenge = {.type = DSM_CTL_CHALLENGE};
            challenge.u.challenge.transport = DSM_TRANSPORT_SHM;
            gate_send(fd, &challenge);
            gate_hold(g, fd, 1);
        } else if (k >= GATE_TURN_AWAYS) {
            int up = -1;
            if (dsm_sock_connect(g->coordinator, 5000, &up) == DSM_OK) {
                relay(g, fd, up);
                close(up);
            }
        }
        close(fd);
    }
}

/* A client joined through g; NULL if the join failed. */
static dsm_node_t *join_through(dsm_harness_t *c, gate_t *g, pthread_t *t)
{
    assert_int_equal(dsm_sock_listen("127.0.0.1:0", &g->listen_fd, &g->port), DSM_OK);
    assert_int_equal(pthread_create(t, NULL, gate_main, g), 0);
    char via[64];
    snprintf(via, sizeof via, "127.0.0.1:%u", g->port);
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, DSM_RANK_ANY);
    cfg.coordinator = via;
    cfg.kind = DSM_MEMBER_CLIENT;
    cfg.partition_size = 0;
    cfg.join_timeout_ms = 20000;   /* the turn-aways cost ~1.1 s (a 1 s wait for a challenge); 20 s for a loaded host */
    dsm_node_t *client = NULL;
    return test_node_start(&cfg, -1, &client) == DSM_OK ? client : NULL;
}

static void gate_close(gate_t *g, pthread_t t)
{
    atomic_store(&g->stop, 1);
    pthread_join(t, NULL);
    close(g->listen_fd);
}

/* Frames injected after the handshake by someone without the secret are
 * dropped: the member neither stops nor takes a forged table entry. */
static void test_unsealed_frames_dropped(void **state)
{
    dsm_harness_t *c = *state;
    gate_t g = {.coordinator = c->coordinator, .forge = 1};
    pthread_t t;
    dsm_node_t *client = join_through(c, &g, &t);
    assert_non_null(client);
    /* No wait needed: the gate writes the forged frames right after the
     * table's end and before it relays anything else, and the join returns
     * only once the member has read READY, which the coordinator sends
     * after the member acknowledged that table: the member's control
     * thread has read both forged frames by then. */
    assert_int_equal(atomic_load(&g.forged), 2);
    assert_int_equal(atomic_load(&client->frames_refused), 2);
    assert_false(dsm_node_closed(client));
    assert_int_not_equal(dsm_node_peer_state(client, 5), DSM_OK);   /* the forged member is unknown */
    assert_int_equal(dsm_node_wait_daemons(client, 1, 10000), DSM_OK);
    dsm_node_destroy(client);
    gate_close(&g, t);
    assert_true(members_settle(c, 1));
}

/* Turned away without being judged (refused or closed before the
 * challenge, no challenge at all, displaced as busy after the HELLO), a
 * join tries again and gets in on the next connection. */
static void test_join_tries_again_when_turned_away(void **state)
{
    dsm_harness_t *c = *state;
    gate_t g = {.coordinator = c->coordinator, .turn_away = 1};
    pthread_t t;
    dsm_node_t *client = join_through(c, &g, &t);
    assert_non_null(client);
    assert_int_equal(atomic_load(&g.accepted), GATE_TURN_AWAYS + 1);
    assert_int_equal(dsm_node_wait_daemons(client, 1, 10000), DSM_OK);
    dsm_node_destroy(client);
    gate_close(&g, t);
    assert_true(members_settle(c, 1));
}

/* The receive buffer's growth: a frame of exactly the maximum payload fits. */
static void test_max_frame_fits(void **state)
{
    (void)state;
    size_t cap = 0, len = 0, frame = DSM_CTL_HEADER_LEN + DSM_CTL_MAX_PAYLOAD;
    while (len < frame) {
        size_t next = dsm_ctl_rx_capacity(cap, len, DSM_CTL_MAX_PAYLOAD);
        assert_true(next > len);   /* 0 would mean "oversized" */
        cap = next;
        size_t take = cap - len < frame - len ? cap - len : frame - len;
        len += take;
    }
    assert_int_equal(len, frame);
    /* Nothing past a whole frame is kept for a frame that cannot be. */
    assert_true(dsm_ctl_rx_capacity(cap, frame + 1, DSM_CTL_MAX_PAYLOAD) <= frame + 8192);
    /* Before authentication only a hello's worth. */
    cap = len = 0;
    for (int i = 0; i < 64; i++) {
        size_t next = dsm_ctl_rx_capacity(cap, len, DSM_CTL_MAX_HELLO);
        if (next <= len) break;
        cap = next;
        len = cap;
    }
    assert_true(cap <= DSM_CTL_HEADER_LEN + DSM_CTL_MAX_HELLO + 8192);
}

int main(void)
{
    static dsm_harness_t c = {.transport = DSM_TRANSPORT_SHM};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_frame_fits),
        cmocka_unit_test_prestate(test_idle_connections_do_not_lock_out_joins, &c),
        cmocka_unit_test_prestate(test_declared_megabytes_cost_nothing, &c),
        cmocka_unit_test_prestate(test_fabric_mismatch_refused_at_join, &c),
        cmocka_unit_test_prestate(test_other_wire_version_refused_at_join, &c),
        cmocka_unit_test_prestate(test_malformed_worker_address_refused, &c),
        cmocka_unit_test_prestate(test_join_tries_again_when_turned_away, &c),
        cmocka_unit_test_prestate(test_unsealed_frames_dropped, &c),
    };
    if (test_cluster_start(&c, 1, 0) != DSM_OK) return 1;
    int failed = cmocka_run_group_tests_name("coord_limits", tests, NULL, NULL);
    dsm_harness_stop(&c);
    return failed;
}
