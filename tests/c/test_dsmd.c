/* Multi-process tests: real dsmd processes joined to a coordinator in this
 * process, over shm and tcp. Concurrent fetch_add from every daemon totals
 * exactly; a daemon killed with SIGKILL is reported dead within a bounded
 * time while the others keep working; a daemon with the wrong secret is
 * refused and exits; stopping the coordinator stops every daemon cleanly; a
 * plugin's function runs on every daemon that loaded it. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "dsm/clock.h"
#include "dsm/sdk.h"
#include "runtime/internal.h"

enum { DAEMONS = 3 };

typedef struct proc_cluster {
    dsm_transport_t transport;
    dsm_coord_t *coord;
    char coordinator[64];
    pid_t pids[DAEMONS];
    dsm_node_t *client;
} proc_cluster_t;

static const char *dsmd_path(void)
{
    const char *p = getenv("DSM_DSMD");
    return p ? p : "./dsmd";
}

static pid_t start_dsmd(const proc_cluster_t *c, int rank, const char *secret)
{
    pid_t pid = fork();
    if (pid == 0) {
        char rank_s[16];
        snprintf(rank_s, sizeof rank_s, "%d", rank);
        setenv("DSM_SECRET", secret, 1);
        setenv("UCX_PROTO_ENABLE", "y", 1);
        const char *tr = c->transport == DSM_TRANSPORT_TCP ? "tcp" : "shm";
        const char *plugin = getenv("DSM_TEST_PLUGIN");
        char *argv[] = {"dsmd", "--coordinator", (char *)c->coordinator, "--rank", rank_s, "--transport",
                        (char *)tr, "--net-device", c->transport == DSM_TRANSPORT_TCP ? "lo" : "all",
                        "--partition", "32MiB", "--heartbeat-ms", "100", "--peer-timeout-ms", "1500",
                        "--log-level", "1", plugin ? "--plugin" : NULL, (char *)plugin, NULL};
        execv(dsmd_path(), argv);
        _exit(127);
    }
    return pid;
}

/* Wait for a child to exit within timeout_ms; returns its exit status or -1. */
static int wait_exit(pid_t pid, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 20) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(20000);
    }
    return -1;
}

static int setup(void **state)
{
    proc_cluster_t *c = *state;
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = "proc-secret", .peer_timeout_ms = 1500};
    if (dsm_coord_start(&cc, &c->coord) != DSM_OK) return -1;
    snprintf(c->coordinator, sizeof c->coordinator, "127.0.0.1:%u", dsm_coord_port(c->coord));
    for (int r = 0; r < DAEMONS; r++) c->pids[r] = start_dsmd(c, r, "proc-secret");
    dsm_node_config_t cfg;
    dsm_node_config_init(&cfg);
    cfg.coordinator = c->coordinator;
    cfg.secret = "proc-secret";
    cfg.kind = DSM_MEMBER_CLIENT;
    cfg.transport = c->transport;
    cfg.net_device = c->transport == DSM_TRANSPORT_TCP ? "lo" : NULL;
    cfg.heartbeat_ms = 100;
    cfg.peer_timeout_ms = 1500;
    cfg.op_timeout_ms = 3000;
    if (dsm_start(&cfg, &c->client) != DSM_OK) return -1;
    return dsm_node_wait_daemons(c->client, DAEMONS, 10000) == DSM_OK ? 0 : -1;
}

static int teardown(void **state)
{
    proc_cluster_t *c = *state;
    dsm_node_destroy(c->client);
    dsm_coord_stop(c->coord);
    for (int r = 0; r < DAEMONS; r++) {
        if (c->pids[r] <= 0) continue;
        int rc = wait_exit(c->pids[r], 5000);
        if (rc < 0) {
            kill(c->pids[r], SIGKILL);
            waitpid(c->pids[r], NULL, 0);
            fprintf(stderr, "dsmd rank %d did not stop with the coordinator\n", r);
            return -1;
        }
    }
    return 0;
}

static void test_fetch_add_totals(void **state)
{
    proc_cluster_t *c = *state;
    dsm_gaddr_t counter;
    assert_int_equal(dsm_alloc(c->client, 1, 8, &counter), DSM_OK);
    uint64_t zero = 0;
    assert_int_equal(dsm_write(c->client, counter, &zero, 8), DSM_OK);
    char args[128];
    int len = snprintf(args, sizeof args, "counter=%llu\niters=2000\nthreads=2\n", (unsigned long long)counter);
    dsm_task_t *tasks[DAEMONS];
    for (uint32_t r = 0; r < DAEMONS; r++)
        assert_int_equal(dsm_spawn(c->client, r, "fetch_add", args, (size_t)len, &tasks[r]), DSM_OK);
    for (uint32_t r = 0; r < DAEMONS; r++) {
        char out[256];
        size_t out_len;
        assert_int_equal(dsm_join(tasks[r], out, sizeof out, &out_len, 60000), DSM_OK);
        assert_non_null(memmem(out, out_len, "ops_per_sec", 11));
    }
    uint64_t total;
    assert_int_equal(dsm_read(c->client, counter, &total, 8), DSM_OK);
    assert_int_equal(total, DAEMONS * 2 * 2000);
    assert_int_equal(dsm_free(c->client, counter), DSM_OK);
}

/* A function registered by a plugin runs on every daemon that loaded it. */
static void test_plugin_function(void **state)
{
    proc_cluster_t *c = *state;
    if (!getenv("DSM_TEST_PLUGIN")) fail_msg("DSM_TEST_PLUGIN is not set (ctest sets it to the built plugin)");
    for (uint32_t r = 0; r < DAEMONS; r++) {
        dsm_task_t *task;
        assert_int_equal(dsm_spawn(c->client, r, "plugin_probe", NULL, 0, &task), DSM_OK);
        char out[128], want[128];
        size_t out_len;
        assert_int_equal(dsm_join(task, out, sizeof out - 1, &out_len, 10000), DSM_OK);
        out[out_len] = '\0';
        snprintf(want, sizeof want, "rank=%u version=%s", r, dsm_version());
        assert_string_equal(out, want);
    }
}

/* A long fetch_add on rank 2 that polls its stop flag (counting on a word
 * of rank 0, returned in *counter) and a plugin function on rank 1 that
 * ignores it, both running when this returns. */
static void start_polite_and_stubborn(proc_cluster_t *c, dsm_gaddr_t *counter, dsm_task_t **polite,
                                      dsm_task_t **stubborn)
{
    if (!getenv("DSM_TEST_PLUGIN")) fail_msg("DSM_TEST_PLUGIN is not set (ctest sets it to the built plugin)");
    assert_int_equal(dsm_alloc(c->client, 0, 64, counter), DSM_OK);
    uint64_t zeros[2] = {0, 0};
    assert_int_equal(dsm_write(c->client, *counter, zeros, sizeof zeros), DSM_OK);
    char args[128];
    int len = snprintf(args, sizeof args, "counter=%llu\niters=100000000\n", (unsigned long long)*counter);
    assert_int_equal(dsm_spawn(c->client, 2, "fetch_add", args, (size_t)len, polite), DSM_OK);
    /* the stubborn one counts its start on the counter's next word */
    len = snprintf(args, sizeof args, "started=%llu\n", (unsigned long long)(*counter + 8));
    assert_int_equal(dsm_spawn(c->client, 1, "plugin_stubborn", args, (size_t)len, stubborn), DSM_OK);
    /* both have started when the fetch_add has counted and the stubborn
     * one has said so; a minute is far more than a spawn takes on a loaded
     * host, and a wait that long means a spawn was lost */
    uint64_t words[2] = {0, 0}, deadline = dsm_deadline_ns(60000);
    while ((words[0] == 0 || words[1] == 0) && dsm_now_ns() < deadline) {
        assert_int_equal(dsm_read(c->client, *counter, words, sizeof words), DSM_OK);
        sched_yield();   /* each read is a round trip: the poll paces itself */
    }
    assert_true(words[0] > 0 && words[1] == 1);
}

/* A cancelled workload that polls its flag stops and leaves its daemon
 * alone; one that ignores it is ended with its daemon (exit 4) after the
 * daemon's grace (3 s, dsmd's default), so the caller's join fails promptly
 * instead of hanging. */
static void test_cancel_ends_stubborn_workload(void **state)
{
    proc_cluster_t *c = *state;
    dsm_gaddr_t counter;
    dsm_task_t *polite, *stubborn;
    start_polite_and_stubborn(c, &counter, &polite, &stubborn);
    assert_int_equal(dsm_task_cancel(polite), DSM_OK);
    assert_int_equal(dsm_task_cancel(stubborn), DSM_OK);
    char out[256];
    size_t out_len;
    assert_int_equal(dsm_join(polite, out, sizeof out, &out_len, 10000), DSM_ERR_CANCELLED);
    dsm_status_t st = dsm_join(stubborn, out, sizeof out, &out_len, 20000);
    assert_int_equal(st, DSM_ERR_PEER_DEAD);
    assert_int_equal(wait_exit(c->pids[1], 10000), 4);
    c->pids[1] = 0;
    /* rank 2 ran a workload that stopped: it is alive and serves the next one */
    assert_int_equal(kill(c->pids[2], 0), 0);
    char args[128];
    int len = snprintf(args, sizeof args, "counter=%llu\niters=10\n", (unsigned long long)counter);
    dsm_task_t *again;
    assert_int_equal(dsm_spawn(c->client, 2, "fetch_add", args, (size_t)len, &again), DSM_OK);
    assert_int_equal(dsm_join(again, out, sizeof out, &out_len, 30000), DSM_OK);
}

/* A daemon told to stop (SIGTERM) while workloads run asks them to stop:
 * one that polls its flag returns CANCELLED to its caller and the daemon
 * exits cleanly at once; one that ignores it is ended with its daemon after
 * the grace (exit 4), never left hanging. */
static void test_sigterm_stops_workloads(void **state)
{
    proc_cluster_t *c = *state;
    dsm_gaddr_t counter;
    dsm_task_t *polite, *stubborn;
    start_polite_and_stubborn(c, &counter, &polite, &stubborn);
    kill(c->pids[2], SIGTERM);
    kill(c->pids[1], SIGTERM);
    char out[256];
    size_t out_len;
    assert_int_equal(dsm_join(polite, out, sizeof out, &out_len, 10000), DSM_ERR_CANCELLED);
    assert_int_equal(wait_exit(c->pids[2], 2000), 0);
    c->pids[2] = 0;
    assert_int_equal(wait_exit(c->pids[1], 10000), 4);
    c->pids[1] = 0;
    /* the daemon is gone: its death reaches the caller within the peer
     * timeout (1.5 s) on a quiet host; 30 s because at load 70 it took
     * over 10 */
    assert_int_equal(dsm_join(stubborn, out, sizeof out, &out_len, 30000), DSM_ERR_PEER_DEAD);
}

static void test_wrong_secret_daemon_refused(void **state)
{
    proc_cluster_t *c = *state;
    uint64_t refused = dsm_coord_refused(c->coord);
    pid_t pid = start_dsmd(c, 7, "wrong-secret");
    assert_int_equal(wait_exit(pid, 10000), 2);
    assert_int_equal(dsm_coord_refused(c->coord), refused + 1);
    assert_int_equal(dsm_node_daemons(c->client, NULL, 0), DAEMONS);
}

/* dsmd's stderr when started with secret against a coordinator that is
 * not there (it exits at once after its checks). */
static void dsmd_stderr(const char *secret, char *out, size_t cap)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        setenv("DSM_SECRET", secret, 1);
        char *argv[] = {"dsmd", "--coordinator", "127.0.0.1:1", "--rank", "0", NULL};
        execv(dsmd_path(), argv);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    ssize_t n;
    while (len + 1 < cap && (n = read(p[0], out + len, cap - 1 - len)) > 0) len += (size_t)n;
    out[len] = '\0';
    close(p[0]);
    assert_true(wait_exit(pid, 10000) >= 0);
}

/* A weak user-chosen secret is warned about; a strong one is not. */
static void test_weak_secret_warned(void **state)
{
    (void)state;
    static char err[16384];
    dsmd_stderr("abc", err, sizeof err);
    if (!strstr(err, "secret is weak")) fail_msg("no weak-secret warning for \"abc\"; stderr: %s", err);
    dsmd_stderr("9f2c41d07be85a36e1d4c0b7a95f3e62", err, sizeof err);
    if (strstr(err, "secret is weak")) fail_msg("a strong secret was called weak: %s", err);
}

static void test_killed_daemon(void **state)
{
    proc_cluster_t *c = *state;
    dsm_gaddr_t on2, on0;
    assert_int_equal(dsm_alloc(c->client, 2, 64, &on2), DSM_OK);
    assert_int_equal(dsm_alloc(c->client, 0, 64, &on0), DSM_OK);
    kill(c->pids[2], SIGKILL);
    waitpid(c->pids[2], NULL, 0);
    c->pids[2] = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t v = 0;
    dsm_status_t st = DSM_OK;
    /* Operations on the dead node fail -- within a bounded time, never hang. */
    while (st == DSM_OK) {
        st = dsm_fetch_add(c->client, on2, 1, &v);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (b.tv_sec - a.tv_sec > 10) break;
        usleep(10000);
    }
    assert_true(st == DSM_ERR_PEER_DEAD || st == DSM_ERR_TIMEOUT);
    /* the notice follows the failed operation at once; 60 s only catches one that never comes */
    for (uint64_t end = dsm_now_ms() + 60000; dsm_node_peer_state(c->client, 2) != DSM_ERR_PEER_DEAD && dsm_now_ms() < end;)
        sched_yield();
    assert_int_equal(dsm_node_peer_state(c->client, 2), DSM_ERR_PEER_DEAD);
    assert_int_equal(dsm_fetch_add(c->client, on2, 1, &v), DSM_ERR_PEER_DEAD);
    /* The others keep working. */
    assert_int_equal(dsm_fetch_add(c->client, on0, 1, &v), DSM_OK);
    assert_int_equal(dsm_node_daemons(c->client, NULL, 0), DAEMONS - 1);
    char args[128];
    int len = snprintf(args, sizeof args, "counter=%llu\niters=100\n", (unsigned long long)on0);
    dsm_task_t *t;
    assert_int_equal(dsm_spawn(c->client, 1, "fetch_add", args, (size_t)len, &t), DSM_OK);
    char out[256];
    size_t out_len;
    assert_int_equal(dsm_join(t, out, sizeof out, &out_len, 30000), DSM_OK);
    uint64_t after;
    assert_int_equal(dsm_read(c->client, on0, &after, 8), DSM_OK);
    assert_int_equal(after, 101);
}

int main(void)
{
    if (access(dsmd_path(), X_OK) != 0) {
        fprintf(stderr, "dsmd not found at %s (set DSM_DSMD)\n", dsmd_path());
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    static proc_cluster_t shm = {.transport = DSM_TRANSPORT_SHM}, tcp = {.transport = DSM_TRANSPORT_TCP};
#define PROC_TESTS(state)                                                                     \
    cmocka_unit_test_prestate_setup_teardown(test_fetch_add_totals, setup, teardown, state), \
        cmocka_unit_test_prestate_setup_teardown(test_plugin_function, setup, teardown, state), \
        cmocka_unit_test_prestate_setup_teardown(test_cancel_ends_stubborn_workload, setup, teardown, state), \
        cmocka_unit_test_prestate_setup_teardown(test_sigterm_stops_workloads, setup, teardown, state), \
        cmocka_unit_test_prestate_setup_teardown(test_wrong_secret_daemon_refused, setup, teardown, state), \
        cmocka_unit_test_prestate_setup_teardown(test_killed_daemon, setup, teardown, state), \
        cmocka_unit_test_prestate(test_weak_secret_warned, state)
    const struct CMUnitTest shm_tests[] = {PROC_TESTS(&shm)};
    const struct CMUnitTest tcp_tests[] = {PROC_TESTS(&tcp)};
    int failed = cmocka_run_group_tests_name("dsmd/shm", shm_tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("dsmd/tcp", tcp_tests, NULL, NULL);
    return failed;
}
