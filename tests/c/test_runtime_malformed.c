/* Malformed requests get an error reply, promptly: a C client sends a bad
 * payload, as a request, to one handler of each module family (own, dir,
 * mheap) on a 2-node cluster with every module attached, and must get an
 * error status well before its op timeout; the node then still serves a
 * good request. Without a reply the sender would wait the whole timeout. */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "dsm/sdk.h"
#include "dsm/clock.h"
#include "dsm/module.h"
#include "own/ids.h"
#include "dir/ids.h"
#include "dir/msg.h"
#include "mheap/layout.h"
#include "cluster_util.h"

/* The op timeout the requests below carry. The bound an answer must beat,
 * 1 s, is a fifth of it and far above a loopback round trip (well under a
 * millisecond), so it tells an answer from a timeout on a loaded machine. */
enum { OP_TIMEOUT_MS = 5000, ANSWER_BOUND_MS = 1000 };

/* Send len bytes to rank 1's handler as a request; it must answer with an
 * error (not DSM_OK, not a timeout) within the bound. */
static void expect_prompt_error(dsm_harness_t *c, const char *what, uint16_t handler, const void *data, size_t len)
{
    dsm_fabric_t *f = dsm_node_fabric(c->nodes[0]);
    uint8_t reply[256];
    size_t got = 0;
    uint64_t t0 = dsm_now_ms();
    dsm_status_t st = dsm_fabric_am_request(f, 1, handler, data, len, reply, sizeof reply, &got, OP_TIMEOUT_MS);
    uint64_t took = dsm_now_ms() - t0;
    if (st == DSM_OK || st == DSM_ERR_TIMEOUT)
        fail_msg("%s (handler %u, %zu bytes) gave %s after %llu ms, expected an error reply", what, handler, len,
                 dsm_status_name(st), (unsigned long long)took);
    if (took >= ANSWER_BOUND_MS)
        fail_msg("%s (handler %u) answered %s only after %llu ms", what, handler, dsm_status_name(st),
                 (unsigned long long)took);
    /* the node still serves a good request */
    uint8_t pong[8];
    assert_int_equal(dsm_fabric_am_request(f, 1, DSM_AM_RUNTIME_PING, "ok", 2, pong, sizeof pong, &got, OP_TIMEOUT_MS),
                     DSM_OK);
    assert_int_equal(got, 2);
}

static const uint8_t garbage[3] = {0xde, 0xad, 0x01};

static void test_own_unlock_answered(void **state)
{
    expect_prompt_error(*state, "own unlock", DSM_AM_OWN_UNLOCK, garbage, sizeof garbage);
}

static void test_dir_home_oversized_answered(void **state)
{
    uint8_t big[DIR_MSG_FIXED_MAX + 1];
    memset(big, 0x5a, sizeof big);
    expect_prompt_error(*state, "oversized dir request", DSM_AM_DIR_HOME, big, sizeof big);
}

static void test_mheap_done_answered(void **state)
{
    expect_prompt_error(*state, "mheap trace-done", DSM_AM_MHEAP_DONE, garbage, sizeof garbage);
}

static void test_mheap_ctl_answered(void **state)
{
    expect_prompt_error(*state, "mheap control", DSM_AM_MHEAP_CTL, garbage, sizeof garbage);
}

static int setup(void **state)
{
    static dsm_harness_t c = {.transport = DSM_TRANSPORT_SHM, .op_timeout_ms = OP_TIMEOUT_MS};
    return test_cluster_setup(state, &c, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_unlock_answered),
        cmocka_unit_test(test_dir_home_oversized_answered),
        cmocka_unit_test(test_mheap_done_answered),
        cmocka_unit_test(test_mheap_ctl_answered),
    };
    return cmocka_run_group_tests(tests, setup, test_cluster_teardown);
}
