/* A reply given after its requester is gone: the requester left (LEAVE)
 * or was killed (SIGKILL, a process of its own), and its rank may already
 * belong to a new client. A handler holds the request, on the progress
 * thread (it replies from inside the handler while the rank's endpoint is
 * being replaced) or handed to a worker thread (which replies once the
 * requester died, and again once the rank connected anew). Every such reply
 * is refused as DSM_ERR_PEER_DEAD and counted, the daemon goes on, and the
 * new client never receives it, though its own request carries the same
 * id. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "cluster_util.h"
#include "dsm/clock.h"
#include "fabric/fabric_int.h"
#include "runtime/internal.h"

enum { HOLD_HANDLER = DSM_AM_USER_FIRST, DAEMONS = 2 };
/* Every bound below: a few control and fabric messages, but a loaded
 * 2-core host may not run a thread for seconds. */
enum { BOUND_MS = 30000 };
/* A request id as its requester made it (without DSM_AM_ID_TAG_MASK): two
 * incarnations of one rank give their first requests the same. */
#define WIRE_ID(id) ((id) & ~DSM_AM_ID_TAG_MASK)

static uint64_t errors_of(dsm_fabric_t *f)
{
    dsm_stats_t s;
    dsm_fabric_stats(f, &s);
    return s.errors;
}

/* What daemon 0's handler saw and did. The first request is held; later
 * ones are recorded and left to the test's thread. */
static struct {
    dsm_fabric_t *f;
    _Atomic int inline_hold;    /* hold on the progress thread and reply there */
    _Atomic uint64_t id, second;
    _Atomic uint32_t from;
    _Atomic int release, replied;
    _Atomic int reply_st;
    uint64_t errors_before, errors_after;
} held;

static void hold_handler(void *ctx, const dsm_am_msg_t *msg)
{
    (void)ctx;
    if (atomic_load(&held.id) != 0) {
        atomic_store(&held.second, msg->request_id);
        return;
    }
    atomic_store(&held.from, msg->src_rank);
    atomic_store(&held.id, msg->request_id);
    if (!atomic_load(&held.inline_hold))
        return;
    /* bounded so that a failed test cannot leave the daemon held for good */
    uint64_t deadline = dsm_now_ms() + 2 * BOUND_MS;
    while (!atomic_load(&held.release) && dsm_now_ms() < deadline)
        sched_yield();
    held.errors_before = errors_of(held.f);
    atomic_store(&held.reply_st, dsm_fabric_am_reply(held.f, msg->src_rank, msg->request_id, DSM_OK, "old", 3));
    held.errors_after = errors_of(held.f);
    atomic_store(&held.replied, 1);
}

static int wait_until(int (*cond)(void *), void *arg)
{
    uint64_t deadline = dsm_now_ms() + BOUND_MS;
    while (!cond(arg) && dsm_now_ms() < deadline)
        sched_yield();
    return cond(arg);
}

static int got_first(void *arg) { (void)arg; return atomic_load(&held.id) != 0; }
static int got_second(void *arg) { (void)arg; return atomic_load(&held.second) != 0; }
static int replied(void *arg) { (void)arg; return atomic_load(&held.replied); }

static int dead_here(void *arg)
{
    return dsm_fabric_peer_state(held.f, *(uint32_t *)arg) == DSM_ERR_PEER_DEAD;
}

/* A connect to a rank that died closes its old endpoint under the
 * fabric's lock, and waits there for the worker the held handler keeps. */
static int connecting(void *arg)
{
    (void)arg;
    if (pthread_mutex_trylock(&held.f->lock) == EBUSY)
        return 1;
    pthread_mutex_unlock(&held.f->lock);
    return 0;
}

static dsm_status_t client_start(const dsm_harness_t *c, dsm_node_t **out)
{
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, (uint32_t)DSM_RANK_ANY);
    cfg.kind = DSM_MEMBER_CLIENT;
    dsm_status_t st = test_node_start(&cfg, 0, out);
    if (st == DSM_OK)
        st = dsm_node_wait_daemons(*out, DAEMONS, BOUND_MS);
    return st;
}

typedef struct joiner {
    const dsm_harness_t *c;
    dsm_node_t *node;
    dsm_status_t st;
} joiner_t;

static void *join_main(void *arg)
{
    joiner_t *j = arg;
    j->st = client_start(j->c, &j->node);
    return NULL;
}

/* The killed requester: this program again, as a client of the test's
 * cluster that sends one request to daemon 0 and waits to be killed. */
static int client_main(const char *coordinator, const char *transport)
{
    dsm_harness_t c = {.transport = strcmp(transport, "tcp") == 0 ? DSM_TRANSPORT_TCP : DSM_TRANSPORT_SHM,
                       .peer_timeout_ms = 60000};
    snprintf(c.coordinator, sizeof c.coordinator, "%s", coordinator);
    dsm_node_t *x;
    if (client_start(&c, &x) != DSM_OK)
        return 2;
    static uint8_t reply[8];
    static dsm_op_t op;
    if (dsm_fabric_am_request_nb(dsm_node_fabric(x), 0, HOLD_HANDLER, "old", 3, reply, sizeof reply, &op) != DSM_OK)
        return 3;
    for (;;)
        pause();
}

static pid_t client_spawn(const dsm_harness_t *c)
{
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {"test_runtime_late_reply", "--client", (char *)c->coordinator,
                        c->transport == DSM_TRANSPORT_TCP ? "tcp" : "shm", NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

/* A worker thread's reply to the held request, given once its requester
 * died here: it races the rank's next connect. */
typedef struct worker {
    uint32_t rank;
    dsm_status_t st;
    uint64_t errors_before, errors_after;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    w->errors_before = errors_of(held.f);
    w->st = dsm_fabric_am_reply(held.f, w->rank, atomic_load(&held.id), DSM_OK, "old", 3);
    w->errors_after = errors_of(held.f);
    return NULL;
}

typedef enum { LEAVES, KILLED } gone_t;
typedef enum { ON_PROGRESS, ON_WORKER } where_t;

/* The requester x (rank r) sends daemon 0 a request, which the handler
 * holds; x goes as `how` says; the reply follows as `where` says; then a
 * new client y takes rank r and its request, of the same id, is answered
 * with what it asked for. */
static void run_case(dsm_harness_t *c, gone_t how, where_t where)
{
    held.f = dsm_node_fabric(c->nodes[0]);
    atomic_store(&held.id, 0);
    atomic_store(&held.second, 0);
    atomic_store(&held.release, 0);
    atomic_store(&held.replied, 0);
    atomic_store(&held.inline_hold, where == ON_PROGRESS);
    dsm_fabric_am_register(held.f, HOLD_HANDLER, NULL, NULL);   /* a failed case's */
    assert_int_equal(dsm_fabric_am_register(held.f, HOLD_HANDLER, hold_handler, NULL), DSM_OK);

    dsm_node_t *x = NULL;
    pid_t pid = -1;
    uint8_t reply[8];
    dsm_op_t op;
    if (how == LEAVES) {
        assert_int_equal(client_start(c, &x), DSM_OK);
        assert_int_equal(dsm_fabric_am_request_nb(dsm_node_fabric(x), 0, HOLD_HANDLER, "old", 3, reply,
                                                  sizeof reply, &op), DSM_OK);
    } else {
        assert_true((pid = client_spawn(c)) > 0);
    }
    int held_it = wait_until(got_first, NULL);
    uint32_t r = atomic_load(&held.from);
    /* From here on every result is checked once the handler is let go: a
     * failed check must not leave the daemon's progress thread held. */
    int status = 0;
    if (how == LEAVES) {
        dsm_node_destroy(x);   /* fails x's request: finishing it needs no fabric */
        (void)dsm_fabric_wait(&op);
    } else {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    int dead = held_it && wait_until(dead_here, &r);

    /* y takes rank r. On the progress thread the reply waits until y's
     * connect is under way; a worker's races it. */
    worker_t w = {.rank = r};
    pthread_t wt;
    if (where == ON_WORKER)
        assert_int_equal(pthread_create(&wt, NULL, worker_main, &w), 0);
    joiner_t j = {.c = c};
    pthread_t jt;
    assert_int_equal(pthread_create(&jt, NULL, join_main, &j), 0);
    int raced = where == ON_WORKER || (held_it && wait_until(connecting, NULL));
    atomic_store(&held.release, 1);
    int answered = where == ON_WORKER || wait_until(replied, NULL);
    if (where == ON_WORKER)
        pthread_join(wt, NULL);
    pthread_join(jt, NULL);

    assert_true(held_it);
    if (how == KILLED)
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_true(dead);
    assert_true(raced);
    assert_true(answered);
    assert_int_equal(j.st, DSM_OK);
    dsm_node_t *y = j.node;
    assert_int_equal(dsm_node_rank(y), r);
    if (where == ON_PROGRESS) {
        assert_int_equal(atomic_load(&held.reply_st), DSM_ERR_PEER_DEAD);
        assert_int_equal(held.errors_after, held.errors_before + 1);
    } else {
        assert_int_equal(w.st, DSM_ERR_PEER_DEAD);
        assert_int_equal(w.errors_after, w.errors_before + 1);
    }

    /* y's first request: the same id as x's, held here */
    uint8_t yreply[8] = {0};
    dsm_op_t yop;
    assert_int_equal(dsm_fabric_am_request_nb(dsm_node_fabric(y), 0, HOLD_HANDLER, "new", 3, yreply,
                                              sizeof yreply, &yop), DSM_OK);
    assert_true(wait_until(got_second, NULL));
    assert_int_equal(WIRE_ID(atomic_load(&held.second)), WIRE_ID(atomic_load(&held.id)));
    dsm_status_t stale = DSM_ERR_PEER_DEAD;
    uint64_t e0 = 0, e1 = 0;
    if (where == ON_WORKER) {   /* the worker answers x once more, now that y has rank r */
        e0 = errors_of(held.f);
        stale = dsm_fabric_am_reply(held.f, r, atomic_load(&held.id), DSM_OK, "old", 3);
        e1 = errors_of(held.f);
    }
    assert_int_equal(dsm_fabric_am_reply(held.f, r, atomic_load(&held.second), DSM_OK, "new", 3), DSM_OK);
    assert_int_equal(dsm_fabric_wait(&yop), DSM_OK);
    assert_int_equal(yop.result, 3);
    assert_memory_equal(yreply, "new", 3);   /* not x's answer */
    assert_int_equal(stale, DSM_ERR_PEER_DEAD);
    if (where == ON_WORKER)
        assert_int_equal(e1, e0 + 1);
    /* the daemons still reach each other */
    uint64_t old;
    assert_int_equal(dsm_fabric_fetch_add(held.f, 1, TEST_REGION, 0, 1, &old), DSM_OK);
    dsm_node_destroy(y);
    dsm_fabric_am_register(held.f, HOLD_HANDLER, NULL, NULL);
}

static void test_left_reply_on_progress(void **state) { run_case(*state, LEAVES, ON_PROGRESS); }
static void test_left_reply_on_worker(void **state) { run_case(*state, LEAVES, ON_WORKER); }
static void test_killed_reply_on_progress(void **state) { run_case(*state, KILLED, ON_PROGRESS); }
static void test_killed_reply_on_worker(void **state) { run_case(*state, KILLED, ON_WORKER); }

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--client") == 0)
        return client_main(argv[2], argv[3]);
    /* A daemon held in a test's handler sends no heartbeats: a peer
     * timeout far above the test's holds keeps it a member. */
    static dsm_harness_t shm = {.transport = DSM_TRANSPORT_SHM, .peer_timeout_ms = 60000},
                         tcp = {.transport = DSM_TRANSPORT_TCP, .peer_timeout_ms = 60000};
#define LATE_TESTS(state)                                                  \
    cmocka_unit_test_prestate(test_left_reply_on_progress, state),         \
        cmocka_unit_test_prestate(test_left_reply_on_worker, state),       \
        cmocka_unit_test_prestate(test_killed_reply_on_progress, state),   \
        cmocka_unit_test_prestate(test_killed_reply_on_worker, state)
    const struct CMUnitTest shm_tests[] = {LATE_TESTS(&shm)};
    const struct CMUnitTest tcp_tests[] = {LATE_TESTS(&tcp)};
    int failed = 0;
    if (test_cluster_start(&tcp, DAEMONS, 0) != DSM_OK)
        return 1;
    failed += cmocka_run_group_tests_name("late_reply/tcp", tcp_tests, NULL, NULL);
    dsm_harness_stop(&tcp);
    if (test_cluster_start(&shm, DAEMONS, 0) != DSM_OK)
        return 1;
    failed += cmocka_run_group_tests_name("late_reply/shm", shm_tests, NULL, NULL);
    dsm_harness_stop(&shm);
    return failed;
}
