/* The dataframe workload (apps/dataframe.c) on 3 in-process nodes under own
 * (TBox chunks, spawn_to from node 0) and dir, over shm and tcp: node 0's
 * group-by checksum equals the single-process original's; under own every
 * row is read on node 0's behalf where its chunk lives, and no chunk moves;
 * bad parameters are refused with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "workload_util.h"

enum { N = WL_NODES };

#define COMMON "rows=1000\nchunk=64\ngroups=8\nmin_value=250\nseed=9\n"
enum { ROWS = 1000, CHUNKS = 16, DIR_BYTES = 8 * (1 + 2 * CHUNKS + 2 * N) };

static void df_under(dsm_harness_t *c, const char *proto)
{
    wl_run_t orig, w[N];
    wl_original(dsm_workload_dataframe, COMMON, &orig);
    assert_int_equal((int)wl_result(orig.ret, "ops"), ROWS);
    assert_int_equal((int)wl_result(orig.ret, "groups_hit"), 8);
    wl_cluster(c, dsm_workload_dataframe, proto, COMMON, DIR_BYTES, &orig, w);
    double rows = 0;
    for (int i = 0; i < N; i++)
        rows += wl_result(w[i].ret, "ops");
    assert_int_equal((int)rows, ROWS);
    assert_int_equal((int)wl_result(w[0].ret, "groups_hit"), 8);
    if (proto[0] == 'o') {
        assert_int_equal((int)wl_result(w[0].ret, "ops"), ROWS);   /* node 0 ran the query */
        for (int i = 0; i < N; i++)
            assert_int_equal((int)wl_result(w[i].ret, "moves"), 0);   /* the work went to the data */
    }
}

static void test_dataframe_own(void **state) { df_under(*state, "own"); }

/* own's two placements: one task to each other node for all the chunks it
 * loaded (the default), or one per chunk; the same result either way. */
static void test_dataframe_own_tasks(void **state)
{
    dsm_harness_t *c = *state;
    wl_run_t orig, w[N];
    wl_original(dsm_workload_dataframe, COMMON, &orig);
    wl_cluster(c, dsm_workload_dataframe, "own", COMMON, DIR_BYTES, &orig, w);
    assert_int_equal((int)wl_result(w[0].ret, "tasks"), N - 1);
    assert_int_equal((int)wl_result(w[0].ret, "ops"), ROWS);
    wl_cluster(c, dsm_workload_dataframe, "own", COMMON "per_node=0\n", DIR_BYTES, &orig, w);
    /* chunk k is loaded by node k % N; node 0 queries its own in place */
    assert_int_equal((int)wl_result(w[0].ret, "tasks"), CHUNKS - (CHUNKS + N - 1) / N);
    assert_int_equal((int)wl_result(w[0].ret, "ops"), ROWS);
    for (int i = 1; i < N; i++)
        assert_int_equal((int)wl_result(w[i].ret, "tasks"), 0);
}
/* dir with each node querying the chunks it loaded: no chunk crosses the
 * network (only the partial results do). */
static void test_dataframe_dir_affinity(void **state)
{
    dsm_harness_t *c = *state;
    wl_run_t orig, w[N];
    wl_original(dsm_workload_dataframe, COMMON, &orig);
    /* the default: each node queries the chunks it loaded */
    wl_cluster(c, dsm_workload_dataframe, "dir", COMMON, DIR_BYTES, &orig, w);
    for (int i = 0; i < N; i++)
        assert_int_equal((int)wl_result(w[i].ret, "cache_misses"), i == 0 ? N - 1 : 0);
    /* affinity=0: by chunk number, another node's chunks */
    wl_cluster(c, dsm_workload_dataframe, "dir", COMMON "affinity=0\n", DIR_BYTES, &orig, w);
    assert_true(wl_result(w[1].ret, "cache_misses") > 0);
}
static void test_dataframe_dir(void **state) { df_under(*state, "dir"); }

/* queries=3 runs the query three times in the measured phase: three times
 * the rows read, the sums added up (the original's checksum moves with
 * them, and each protocol's must match it), own's tasks spawned anew. */
static void test_dataframe_queries(void **state)
{
    dsm_harness_t *c = *state;
    wl_run_t once, orig, w[N];
    wl_original(dsm_workload_dataframe, COMMON, &once);
    wl_original(dsm_workload_dataframe, COMMON "queries=3\n", &orig);
    assert_int_equal((int)wl_result(orig.ret, "ops"), 3 * ROWS);
    assert_true(wl_result(orig.ret, "checksum") != wl_result(once.ret, "checksum"));
    const char *protos[] = {"own", "dir"};
    for (int p = 0; p < 2; p++) {
        wl_cluster(c, dsm_workload_dataframe, protos[p], COMMON "queries=3\n", DIR_BYTES, &orig, w);
        double rows = 0;
        for (int i = 0; i < N; i++)
            rows += wl_result(w[i].ret, "ops");
        assert_int_equal((int)rows, 3 * ROWS);
        if (p == 0)
            assert_int_equal((int)wl_result(w[0].ret, "tasks"), 3 * (N - 1));
    }
}

/* The original on 3 threads (chunks 16: 6, 5 and 5 a thread) reads every
 * row of every query once and comes to the one-thread original's sums;
 * threads above 1 are the original's alone. */
static void test_dataframe_threads(void **state)
{
    dsm_harness_t *c = *state;
    wl_run_t one, three;
    wl_original(dsm_workload_dataframe, COMMON "queries=3\n", &one);
    wl_original(dsm_workload_dataframe, COMMON "queries=3\nthreads=3\n", &three);
    assert_int_equal((int)wl_result(three.ret, "ops"), 3 * ROWS);
    assert_true(wl_result(three.ret, "checksum") == wl_result(one.ret, "checksum"));
    assert_int_equal((int)wl_result(three.ret, "groups_hit"), 8);
    assert_true(wl_result(three.ret, "seconds") > 0);

    wl_refused_under_own(c, dsm_workload_dataframe, COMMON "threads=2\n", DIR_BYTES, "threads");
}

static void test_dataframe_bad_params(void **state)
{
    dsm_harness_t *c = *state;
    char ret[256];
    size_t rl = 0;
    const char *bad[] = {"protocol=local\nrows=0\n", "protocol=local\ngroups=0\n", "protocol=local\nchunk=0\n",
                         "protocol=dir\n", "protocol=local\nrows=x\n",
                         "protocol=local\naffinity=2\n",
                         "protocol=local\nper_node=2\n", "protocol=local\nqueries=0\n",
                         "protocol=local\nthreads=0\n", "protocol=local\nthreads=65\n", "protocol=own\nrows=10000\nchunk=1\nnodes=3\ndirectory=64\n",
                         "protocol=own\nrank_index=3\nnodes=3\ndirectory=64\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rl = 0;
        assert_int_equal(dsm_workload_dataframe(c->nodes[0], bad[i], strlen(bad[i]), ret, sizeof ret, &rl),
                         DSM_ERR_INVALID);
        assert_true(rl > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dataframe_own),
        cmocka_unit_test(test_dataframe_own_tasks),
        cmocka_unit_test(test_dataframe_dir),
        cmocka_unit_test(test_dataframe_dir_affinity),
        cmocka_unit_test(test_dataframe_queries),
        cmocka_unit_test(test_dataframe_threads),
        cmocka_unit_test(test_dataframe_bad_params),
    };
    return wl_main("dataframe", tests, sizeof tests / sizeof tests[0]);
}
