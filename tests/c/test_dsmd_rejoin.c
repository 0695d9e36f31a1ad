/* A daemon paused (SIGSTOP) past the peer timeout is declared dead and the
 * cluster carries on; resumed, it exits with 3 (lost), or with --rejoin
 * joins again as a new member whose memory works like any other's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "dsm/sdk.h"

static const char *dsmd_path(void)
{
    const char *p = getenv("DSM_DSMD");
    return p ? p : "./dsmd";
}

static pid_t start_dsmd(const char *coordinator, int rank, int rejoin)
{
    pid_t pid = fork();
    if (pid == 0) {
        char rank_s[16];
        snprintf(rank_s, sizeof rank_s, "%d", rank);
        setenv("DSM_SECRET", "rejoin-secret", 1);
        char *argv[] = {"dsmd", "--coordinator", (char *)coordinator, "--rank", rank_s, "--transport", "shm",
                        "--partition", "8MiB", "--heartbeat-ms", "100", "--peer-timeout-ms", "2000",
                        "--log-level", "1", rejoin ? "--rejoin" : NULL, NULL};
        execv(dsmd_path(), argv);
        _exit(127);
    }
    return pid;
}

static int wait_exit(pid_t pid, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 20) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(20000);
    }
    return -1;
}

/* Poll until the client sees `rank` in state `want` (0 live), or time out. */
static int peer_becomes(dsm_node_t *client, uint32_t rank, dsm_status_t want, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 20) {
        if (dsm_node_peer_state(client, rank) == want) return 1;
        usleep(20000);
    }
    return 0;
}

static void test_paused_daemon(void **state)
{
    (void)state;
    dsm_coord_t *coord;
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = "rejoin-secret", .peer_timeout_ms = 2000,
                             .transport = DSM_TRANSPORT_SHM};
    assert_int_equal(dsm_coord_start(&cc, &coord), DSM_OK);
    char coordinator[64];
    snprintf(coordinator, sizeof coordinator, "127.0.0.1:%u", dsm_coord_port(coord));
    pid_t rejoiner = start_dsmd(coordinator, 0, 1), plain = start_dsmd(coordinator, 1, 0);
    dsm_node_config_t cfg;
    dsm_node_config_init(&cfg);
    cfg.coordinator = coordinator;
    cfg.secret = "rejoin-secret";
    cfg.kind = DSM_MEMBER_CLIENT;
    cfg.transport = DSM_TRANSPORT_SHM;
    cfg.heartbeat_ms = 100;
    cfg.peer_timeout_ms = 2000;
    cfg.op_timeout_ms = 3000;
    dsm_node_t *client;
    assert_int_equal(dsm_start(&cfg, &client), DSM_OK);
    assert_int_equal(dsm_node_wait_daemons(client, 2, 20000), DSM_OK);

    /* Pause both past the peer timeout: both are declared dead. */
    kill(rejoiner, SIGSTOP);
    kill(plain, SIGSTOP);
    assert_true(peer_becomes(client, 0, DSM_ERR_PEER_DEAD, 20000));
    assert_true(peer_becomes(client, 1, DSM_ERR_PEER_DEAD, 20000));
    kill(rejoiner, SIGCONT);
    kill(plain, SIGCONT);

    /* Without --rejoin: the daemon finds itself lost and exits with 3. */
    assert_int_equal(wait_exit(plain, 20000), 3);
    /* With --rejoin: rank 0 is a member again, with working memory. */
    assert_true(peer_becomes(client, 0, DSM_OK, 30000));
    dsm_gaddr_t a;
    assert_int_equal(dsm_alloc(client, 0, 64, &a), DSM_OK);
    uint64_t v = 42, back = 0;
    assert_int_equal(dsm_write(client, a, &v, 8), DSM_OK);
    assert_int_equal(dsm_read(client, a, &back, 8), DSM_OK);
    assert_int_equal(back, 42);
    assert_int_equal(dsm_free(client, a), DSM_OK);

    dsm_node_destroy(client);
    dsm_coord_stop(coord);
    int rc = wait_exit(rejoiner, 10000);
    if (rc < 0) {
        kill(rejoiner, SIGKILL);
        waitpid(rejoiner, NULL, 0);
    }
    assert_int_equal(rc, 0);
}

int main(void)
{
    if (access(dsmd_path(), X_OK) != 0) {
        fprintf(stderr, "dsmd not found at %s (set DSM_DSMD)\n", dsmd_path());
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_paused_daemon)};
    return cmocka_run_group_tests_name("dsmd_rejoin", tests, NULL, NULL);
}
