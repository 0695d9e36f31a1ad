/* The gemm workload (apps/gemm.c) on 3 in-process nodes under own and dir,
 * over shm and tcp: rank_index 0's checksum of C equals the single-process
 * original's; C tiles are written where they live (own: colour bumps, no
 * move), A and B tiles are read from everywhere; bad parameters are
 * refused with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "workload_util.h"

enum { N = WL_NODES };

#define COMMON "n=32\ntile=8\nseed=5\n"
enum { T = 4, DIR_BYTES = 8 * (1 + 3 * T * T) };

static void gemm_under(dsm_harness_t *c, const char *proto)
{
    wl_run_t orig, w[N];
    wl_original(dsm_workload_gemm, COMMON, &orig);
    assert_int_equal((int)wl_result(orig.ret, "ops"), T * T * T);
    wl_cluster(c, dsm_workload_gemm, proto, COMMON, DIR_BYTES, &orig, w);
    double ops = 0;
    for (int i = 0; i < N; i++)
        ops += wl_result(w[i].ret, "ops");
    assert_int_equal((int)ops, T * T * T);   /* every tile product once */
    if (proto[0] == 'o')
        for (int i = 0; i < N; i++)
            assert_int_equal((int)wl_result(w[i].ret, "moves"), 0);   /* C is written where it lives */
}

static void test_gemm_own(void **state) { gemm_under(*state, "own"); }
static void test_gemm_dir(void **state) { gemm_under(*state, "dir"); }

/* The original on 3 threads computes every tile product once and the same
 * C; threads above 1 are the original's alone. */
static void test_gemm_threads(void **state)
{
    dsm_harness_t *c = *state;
    wl_run_t one, three;
    wl_original(dsm_workload_gemm, COMMON, &one);
    wl_original(dsm_workload_gemm, COMMON "threads=3\n", &three);
    assert_int_equal((int)wl_result(three.ret, "ops"), T * T * T);
    assert_true(wl_result(three.ret, "checksum") == wl_result(one.ret, "checksum"));
    assert_true(wl_result(three.ret, "seconds") > 0);
    wl_refused_under_own(c, dsm_workload_gemm, COMMON "threads=2\n", DIR_BYTES, "threads");
}

static void test_gemm_bad_params(void **state)
{
    dsm_harness_t *c = *state;
    char ret[256];
    size_t rl = 0;
    const char *bad[] = {"protocol=local\nn=30\ntile=8\n", "protocol=local\nn=24\ntile=8\n", "protocol=gam\n",
                         "protocol=own\n", "protocol=local\ntile=0\n", "protocol=local\nsize=3\n",
                         "protocol=local\nthreads=0\n", "protocol=local\nthreads=65\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rl = 0;
        assert_int_equal(dsm_workload_gemm(c->nodes[0], bad[i], strlen(bad[i]), ret, sizeof ret, &rl),
                         DSM_ERR_INVALID);
        assert_true(rl > 0);   /* with a message */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_own),
        cmocka_unit_test(test_gemm_dir),
        cmocka_unit_test(test_gemm_threads),
        cmocka_unit_test(test_gemm_bad_params),
    };
    return wl_main("gemm", tests, sizeof tests / sizeof tests[0]);
}
