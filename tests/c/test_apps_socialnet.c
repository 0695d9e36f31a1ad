/* The socialnet workload (apps/socialnet.c) on 3 in-process nodes under own
 * (posts as boxes, transferred through channels) and dir (handles through
 * channels), over shm and tcp: the timeline's checksum on node 0 equals the
 * single-process original's; every post passes every service once; under
 * own the text service's write moves each post to it; bad parameters are
 * refused with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "workload_util.h"

enum { N = 3 };
static test_cluster_t shm_cluster = {.transport = DSM_TRANSPORT_SHM, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};
static test_cluster_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};
static int setup(void **state, test_cluster_t *c)
{
    if (test_cluster_start(c, N, 1) != DSM_OK)
        return -1;
    *state = c;
    return 0;
}
static int setup_shm(void **state) { return setup(state, &shm_cluster); }
static int setup_tcp(void **state) { return setup(state, &tcp_cluster); }
static int teardown(void **state)
{
    test_cluster_stop(*state);
    return 0;
}

#define COMMON "posts=40\ntext=200\nseed=3\n"
enum { POSTS = 40, DIR_BYTES = 24 };

static void sn_under(test_cluster_t *c, const char *proto)
{
    wl_run_t orig, w[N];
    wl_original(dsm_workload_socialnet, COMMON, &orig);
    assert_int_equal((int)wl_result(orig.ret, "ops"), 3 * POSTS);
    wl_cluster(c, dsm_workload_socialnet, proto, COMMON, DIR_BYTES, &orig, w);
    for (int i = 0; i < N; i++)
        assert_int_equal((int)wl_result(w[i].ret, "ops"), POSTS);   /* one service per node */
    if (proto[0] == 'o')
        assert_int_equal((int)wl_result(w[2].ret, "moves"), POSTS);   /* text (node 2) moved each post */
}

static void test_socialnet_own(void **state) { sn_under(*state, "own"); }
static void test_socialnet_dir(void **state) { sn_under(*state, "dir"); }

static void test_socialnet_bad_params(void **state)
{
    test_cluster_t *c = *state;
    char ret[256];
    size_t rl = 0;
    const char *bad[] = {"protocol=local\nposts=0\n", "protocol=local\ntext=0\n", "protocol=own\n",
                         "protocol=local\nlock=cas\n", "protocol=local\nchecks=3\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rl = 0;
        assert_int_equal(dsm_workload_socialnet(c->nodes[0], bad[i], strlen(bad[i]), ret, sizeof ret, &rl),
                         DSM_ERR_INVALID);
        assert_true(rl > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_socialnet_own),
        cmocka_unit_test(test_socialnet_dir),
        cmocka_unit_test(test_socialnet_bad_params),
    };
    dsm_set_log_level(getenv("DSM_TEST_LOG") ? 1 : 0);
    int failed = cmocka_run_group_tests_name("socialnet/shm", tests, setup_shm, teardown);
    failed += cmocka_run_group_tests_name("socialnet/tcp", tests, setup_tcp, teardown);
    return failed;
}
