/* The socialnet workload (apps/socialnet.c) on 3 in-process nodes under own
 * (posts as boxes, transferred through channels) and dir (handles through
 * channels), over shm and tcp: the timeline's checksum on node 0 equals the
 * single-process original's (the paper's: the same services passing each
 * post by value, serialised through a socket pair; the same passing
 * pointers on plain memory, and the floor, the services fused, alike);
 * every post passes every service once; under
 * own the text service's write moves each post to it; bad parameters are
 * refused with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "workload_util.h"

enum { N = WL_NODES };

#define COMMON "posts=40\ntext=200\nseed=3\n"
enum { POSTS = 40, DIR_BYTES = 24 };

static void sn_under(dsm_harness_t *c, const char *proto)
{
    wl_run_t orig, w[N];
    wl_original(dsm_workload_socialnet, COMMON, &orig);
    assert_int_equal((int)wl_result(orig.ret, "ops"), 3 * POSTS);
    /* The original passing pointers, and its floor (the services fused on
     * one buffer), compute the same. */
    wl_run_t pointers, fused;
    wl_original(dsm_workload_socialnet, COMMON "values=0\n", &pointers);
    assert_true(wl_result(pointers.ret, "checksum") == wl_result(orig.ret, "checksum"));
    assert_int_equal((int)wl_result(pointers.ret, "ops"), 3 * POSTS);
    wl_original(dsm_workload_socialnet, COMMON "fused=1\n", &fused);
    assert_true(wl_result(fused.ret, "checksum") == wl_result(orig.ret, "checksum"));
    /* Posts larger than a socket's buffer cross the value original's
     * streams too (the one thread writes and reads them in turn). */
    wl_run_t big_values, big_pointers;
    wl_original(dsm_workload_socialnet, "posts=2\ntext=1048576\nseed=3\n", &big_values);
    wl_original(dsm_workload_socialnet, "posts=2\ntext=1048576\nseed=3\nvalues=0\n", &big_pointers);
    assert_true(wl_result(big_values.ret, "checksum") == wl_result(big_pointers.ret, "checksum"));
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
    dsm_harness_t *c = *state;
    char ret[256];
    size_t rl = 0;
    const char *bad[] = {"protocol=local\nposts=0\n", "protocol=local\ntext=0\n", "protocol=own\n",
                         "protocol=local\nlock=cas\n", "protocol=local\nchecks=3\n", "protocol=local\nfused=2\n",
                         "protocol=local\nvalues=2\n", "protocol=own\nnodes=1\ndirectory=4096\nvalues=0\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rl = 0;
        assert_int_equal(dsm_workload_socialnet(c->nodes[0], bad[i], strlen(bad[i]), ret, sizeof ret, &rl),
                         DSM_ERR_INVALID);
        assert_true(rl > 0);
        /* the values cases are refused for their values, by name */
        if (strstr(bad[i], "values="))
            assert_non_null(memmem(ret, rl, "values=", 7));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_socialnet_own),
        cmocka_unit_test(test_socialnet_dir),
        cmocka_unit_test(test_socialnet_bad_params),
    };
    return wl_main("socialnet", tests, sizeof tests / sizeof tests[0]);
}
