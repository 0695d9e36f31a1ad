/* The benchmarks' report (csrc/bench/report.c): the JSON it writes keeps
 * every env member whole, however long one is or how many there are (a
 * value that outgrew a fixed buffer was once cut mid-member, and the file
 * was no JSON); a figure's ratio, of one measurement or of runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/report.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* A rate of zero is a failed run and has no ratio; a lower-is-better
 * difference (time added per operation) keeps its sign, so a run where
 * ours was faster does not read as "0 of the anchor". */
static void test_ratio_keeps_a_differences_sign(void **state)
{
    (void)state;
    dsm_report_t r;
    dsm_report_init(&r, "report-test");
    assert_true(dsm_report_add(&r, "rate", 0, "ops/s", "anchor", 10, 1)->ratio == 0);
    assert_true(dsm_report_add(&r, "rate_ok", 5, "ops/s", "anchor", 10, 1)->ratio == 0.5);
    assert_true(dsm_report_add(&r, "added", -2, "ns/op", "anchor", 40, 0)->ratio == -0.05);
    assert_true(dsm_report_add(&r, "no_anchor", -2, "ns/op", "anchor", 0, 0)->ratio == 0);
    dsm_report_free(&r);
}

/* With a run's anchor beside each run, the ratio is the median of the
 * runs' ratios. The runs are a demo's am_8B_latency/shm: ours met a slow
 * host in runs 1, 4 and 5, the anchor in runs 1 and 4, so the medians'
 * ratio read 4.95 where four of five runs read 1.09-1.61. A constant
 * anchor, or a run without one, leaves the medians' ratio. */
static void test_ratio_of_runs_is_the_median_of_their_ratios(void **state)
{
    (void)state;
    static const double ours[5] = {1.21025, 0.31625, 0.353172, 1.18849, 1.24553};
    static const double anchor[5] = {0.962, 0.24, 0.22, 1.094, 0.24};
    dsm_report_t r;
    dsm_report_init(&r, "report-test");
    const dsm_figure_t *f = dsm_report_add(&r, "paired", dsm_report_median(ours, 5), "us", "anchor",
                                           dsm_report_median(anchor, 5), 0);
    assert_true(f->ratio > 4.9);
    dsm_report_reps(&r, f, ours, anchor, 5);
    assert_float_equal(f->ratio, 0.31625 / 0.24, 1e-9);   /* runs' ratios 1.26 1.32 1.61 1.09 5.19 */
    assert_float_equal(f->value, 1.18849, 1e-9);         /* the columns stay the medians */
    assert_float_equal(f->anchor_value, 0.24, 1e-9);
    const dsm_figure_t *g = dsm_report_add_runs(&r, "paired_runs", ours, anchor, 5, "us", "anchor", 0);
    assert_float_equal(g->ratio, 0.31625 / 0.24, 1e-9);
    const double lost[5] = {0.962, 0.24, 0, 1.094, 0.24};
    const dsm_figure_t *h = dsm_report_add(&r, "a_run_without_its_anchor", 1.18849, "us", "anchor", 0.24, 0);
    dsm_report_reps(&r, h, ours, lost, 5);
    assert_float_equal(h->ratio, 1.18849 / 0.24, 1e-9);
    const dsm_figure_t *k = dsm_report_add(&r, "constant_anchor", 1.18849, "us", "parity", 0.5, 0);
    dsm_report_reps(&r, k, ours, NULL, 5);
    assert_float_equal(k->ratio, 1.18849 / 0.5, 1e-9);
    const dsm_figure_t *z = dsm_report_add(&r, "failed", 0, "ops/s", "anchor", 0.24, 1);
    dsm_report_reps(&r, z, ours, anchor, 5);
    assert_true(z->ratio == 0);
    dsm_report_free(&r);
}

static void test_long_env_members_stay_whole(void **state)
{
    (void)state;
    dsm_report_t r;
    dsm_report_init(&r, "report-test");
    /* one value of 5000 bytes, then 400 members: well past any fixed buffer */
    char *big = malloc(5001);
    assert_non_null(big);
    memset(big, 'x', 5000);
    big[5000] = '\0';
    dsm_report_env(&r, "big", "\"%s\"", big);
    for (int i = 0; i < 400; i++) {
        char key[32];
        snprintf(key, sizeof key, "member_%d", i);
        dsm_report_env(&r, key, "{\"i\": %d, \"text\": \"%s\"}", i, "some words to take room");
    }
    dsm_report_env_str(&r, "last", "the end");
    char path[] = "/tmp/test_bench_report_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(dsm_report_write_json(&r, path), 0);
    char *json = slurp(path);
    unlink(path);
    char *want = malloc(5020);
    assert_non_null(want);
    snprintf(want, 5020, "\"big\":\"%s\"", big);
    assert_non_null(strstr(json, want));
    assert_non_null(strstr(json, "\"member_399\":{\"i\": 399, \"text\": \"some words to take room\"},\"last\":\"the end\"}"));
    free(want);
    free(json);
    free(big);
    dsm_report_free(&r);
    assert_null(r.env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_long_env_members_stay_whole),
                                       cmocka_unit_test(test_ratio_keeps_a_differences_sign),
                                       cmocka_unit_test(test_ratio_of_runs_is_the_median_of_their_ratios)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
