/* The workload catalog: descriptions of the built-in workloads and the
 * argument check every workload runs first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "apps/workloads.h"
#include "dsm/plugin.h"

static const char *check(const char *name, const char *args, dsm_status_t want)
{
    static char msg[256];
    msg[0] = '\0';
    const dsm_workload_info_t *w = dsm_workload_info(name);
    assert_non_null(w);
    assert_int_equal(dsm_workload_check_args(w, args, strlen(args), msg, sizeof msg), want);
    return msg;
}

static void builtins_are_described(void **state)
{
    (void)state;
    assert_int_equal(dsm_apps_register(), DSM_OK);
    const dsm_workload_info_t *w = dsm_workload_info("echo");
    assert_non_null(w);
    assert_string_equal(w->name, "echo");
    assert_true(w->n_params >= 1);
    assert_string_equal(w->params[0].name, "target");
    assert_string_equal(w->params[0].fallback, "next");   /* the next daemon */
    assert_non_null(dsm_workload_info("fetch_add"));
    assert_null(dsm_workload_info("no_such_workload"));
    assert_string_equal(dsm_workload_runner_key(0), "threads");
    assert_null(dsm_workload_runner_key(99));
}

static void arguments_are_checked(void **state)
{
    (void)state;
    assert_int_equal(dsm_apps_register(), DSM_OK);
    check("echo", "target=1\niters=5\nthreads=1\nrank_index=0\nnodes=2\n", DSM_OK);
    check("echo", "target=0x1", DSM_OK);
    check("echo", "iters=5\n", DSM_OK);
    assert_string_equal(check("fetch_add", "iters=5\n", DSM_ERR_INVALID),
                        "fetch_add: missing parameter 'counter' (the 64-bit counter every thread adds to)");
    assert_string_equal(check("echo", "target=1\nbogus=3\n", DSM_ERR_INVALID),
                        "echo: unknown parameter 'bogus' (echo takes target, iters, size, window)");
    assert_string_equal(check("echo", "target=1\niters=ten\n", DSM_ERR_INVALID),
                        "echo: parameter 'iters' takes an unsigned integer, not 'ten'");
    assert_string_equal(check("fetch_add", "counter=-1\n", DSM_ERR_INVALID),
                        "fetch_add: parameter 'counter' takes a global address, not '-1'");
    assert_string_equal(check("echo", "target\n", DSM_ERR_INVALID),
                        "echo: argument line 'target' is not key=value");
    /* a message longer than the buffer is cut, never overrun */
    char small[8];
    const dsm_workload_info_t *w = dsm_workload_info("echo");
    assert_int_equal(dsm_workload_check_args(w, "x=1", 3, small, sizeof small), DSM_ERR_INVALID);
    assert_int_equal(strlen(small), sizeof small - 1);
}

static uint64_t scratch(const char *workload, const char *param, const char *args, uint64_t nodes)
{
    const dsm_workload_info_t *w = dsm_workload_info(workload);
    assert_non_null(w);
    assert_non_null(w->scratch_bytes);
    return w->scratch_bytes(param, args, strlen(args), nodes);
}

/* The shared memory each coherence workload asks the driver to make for a
 * directory left out: the sizes its run checks, none under local. */
static void scratch_memory_follows_the_arguments(void **state)
{
    (void)state;
    assert_int_equal(scratch("kv", "directory", "", 3), 8 * (1 + 2 * 64));
    assert_int_equal(scratch("kv", "directory", "buckets=10\nprotocol=dir\n", 3), 8 * (1 + 2 * 10));
    assert_int_equal(scratch("kv", "directory", "protocol=local\n", 3), 0);
    assert_int_equal(scratch("kv", "history", "", 3), 0);   /* no history unless asked */
    assert_int_equal(scratch("gemm", "directory", "n=32\ntile=8\n", 2), 8 * (1 + 3 * 4 * 4));
    assert_int_equal(scratch("dataframe", "directory", "rows=1000\nchunk=64\n", 3), 8 * (1 + 2 * 16 + 2 * 3));
    assert_int_equal(scratch("socialnet", "directory", "", 2), 24);
    assert_null(dsm_workload_info("echo")->scratch_bytes);
}

static void bad_descriptions_are_refused(void **state)
{
    (void)state;
    static const dsm_param_info_t unnamed[] = {{NULL, "u64", NULL, "?"}};
    dsm_workload_info_t w = {"bad_workload", "", dsm_workload_info("echo")->fn, unnamed, 1, NULL};
    assert_int_equal(dsm_register_workload(&w), DSM_ERR_INVALID);
    assert_int_equal(dsm_register_workload(NULL), DSM_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(builtins_are_described),
        cmocka_unit_test(arguments_are_checked),
        cmocka_unit_test(scratch_memory_follows_the_arguments),
        cmocka_unit_test(bad_descriptions_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
