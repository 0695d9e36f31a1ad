/* Test helper for the coherence workloads (gemm, dataframe, socialnet):
 * run one on every node of an in-process cluster at once, with a shared
 * zeroed directory, and compare rank_index 0's checksum with the
 * single-process original's (protocol=local); read a result line. */
#ifndef DSM_TESTS_WORKLOAD_UTIL_H
#define DSM_TESTS_WORKLOAD_UTIL_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/workloads.h"
#include "cluster_util.h"

typedef struct wl_run {
    dsm_fn_t fn;
    dsm_node_t *node;
    char args[512];
    char ret[2048];
    size_t ret_len;
    dsm_status_t st;
} wl_run_t;

static void *wl_thread(void *arg)
{
    wl_run_t *w = arg;
    w->st = w->fn(w->node, w->args, strlen(w->args), w->ret, sizeof w->ret - 1, &w->ret_len);
    w->ret[w->ret_len] = '\0';
    return NULL;
}

/* The value of result line `name`; fails the test if there is none. */
static double wl_result(const char *ret, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = ret; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    fail_msg("no %s in the result '%s'", name, ret);
    return 0;
}

/* The original (protocol=local) with `common` args: its result in *orig. */
static void wl_original(dsm_fn_t fn, const char *common, wl_run_t *orig)
{
    memset(orig, 0, sizeof *orig);
    orig->fn = fn;
    snprintf(orig->args, sizeof orig->args, "protocol=local\n%s", common);
    wl_thread(orig);
    assert_int_equal(orig->st, DSM_OK);
}

/* A fresh directory: dir_bytes zeroed on node 0 (dsm_alloc does not zero). */
static dsm_gaddr_t wl_directory(dsm_harness_t *c, size_t dir_bytes)
{
    dsm_gaddr_t dir;
    uint8_t *zero = calloc(1, dir_bytes);
    assert_non_null(zero);
    assert_int_equal(dsm_alloc(c->nodes[0], 0, dir_bytes, &dir), DSM_OK);
    assert_int_equal(dsm_write(c->nodes[0], dir, zero, dir_bytes), DSM_OK);
    free(zero);
    return dir;
}

/* Every node of c runs fn under `proto` at once; w[i] gets node i's result.
 * rank_index 0's checksum must equal the original's. */
static void wl_cluster(dsm_harness_t *c, dsm_fn_t fn, const char *proto, const char *common, size_t dir_bytes,
                       const wl_run_t *orig, wl_run_t *w)
{
    dsm_gaddr_t dir = wl_directory(c, dir_bytes);
    pthread_t th[DSM_HARNESS_MAX_NODES];
    for (int i = 0; i < c->n; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].fn = fn;
        w[i].node = c->nodes[i];
        snprintf(w[i].args, sizeof w[i].args, "protocol=%s\nrank_index=%d\nnodes=%d\ndirectory=%llu\n%s", proto, i,
                 c->n, (unsigned long long)dir, common);
        pthread_create(&th[i], NULL, wl_thread, &w[i]);
    }
    for (int i = 0; i < c->n; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < c->n; i++) {
        if (w[i].st != DSM_OK)
            fail_msg("node %d: %s (%s)", i, dsm_strerror(w[i].st), w[i].ret);
        /* The counters the bench reads are all there. */
        const char *keys[] = {"messages", "bytes", "cache_hits", "cache_misses", "moves", "invalidations",
                              "messages_per_op", "bytes_per_op", "ops", "ops_per_sec", "checksum"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            (void)wl_result(w[i].ret, keys[k]);
        assert_true(wl_result(w[i].ret, "seconds") > 0);   /* the bench's throughput: ops over the slowest node's */
    }
    assert_true(wl_result(orig->ret, "checksum") != 0);
    assert_true(wl_result(w[0].ret, "checksum") == wl_result(orig->ret, "checksum"));
    double msgs = 0;
    for (int i = 0; i < c->n; i++)
        msgs += wl_result(w[i].ret, "messages");
    assert_true(msgs > 0);   /* 3 nodes share data: the protocol talked */
    printf("%s under %s/%s: %.0f messages in all\n", common, proto, dsm_transport_name(c->transport), msgs);
    assert_int_equal(dsm_free(c->nodes[0], dir), DSM_OK);
}

/* fn on node 0 alone (nodes=1) under own with `args`, a fresh directory
 * of dir_bytes beside them, is refused, its message naming `param`. */
static inline void wl_refused_under_own(dsm_harness_t *c, dsm_fn_t fn, const char *args, size_t dir_bytes, const char *param)
{
    dsm_gaddr_t dir = wl_directory(c, dir_bytes);
    char a[512], ret[512] = {0};
    size_t rl = 0;
    snprintf(a, sizeof a, "protocol=own\nnodes=1\nrank_index=0\ndirectory=%llu\n%s", (unsigned long long)dir, args);
    assert_int_equal(fn(c->nodes[0], a, strlen(a), ret, sizeof ret - 1, &rl), DSM_ERR_INVALID);
    if (strstr(ret, param) == NULL)
        fail_msg("refused without naming %s: %s", param, ret);
    assert_int_equal(dsm_free(c->nodes[0], dir), DSM_OK);
}

/* The three-node clusters a workload test runs on, over shm and over tcp,
 * with generous timeouts (these tests keep every core busy), and a main
 * that runs `tests` on each. */
enum { WL_NODES = 3 };
static inline int wl_setup(void **state, dsm_transport_t t)
{
    static dsm_harness_t clusters[2];
    dsm_harness_t *c = &clusters[t == DSM_TRANSPORT_TCP];
    *c = (dsm_harness_t){.transport = t, .op_timeout_ms = 30000, .peer_timeout_ms = 10000};
    if (test_cluster_start(c, WL_NODES, 1) != DSM_OK)
        return -1;
    *state = c;
    return 0;
}
static inline int wl_setup_shm(void **state) { return wl_setup(state, DSM_TRANSPORT_SHM); }
static inline int wl_setup_tcp(void **state) { return wl_setup(state, DSM_TRANSPORT_TCP); }
static inline int wl_teardown(void **state)
{
    dsm_harness_stop(*state);
    return 0;
}
static inline int wl_main(const char *name, const struct CMUnitTest *tests, size_t n)
{
    char group[64];
    dsm_set_log_level(getenv("DSM_TEST_LOG") ? 1 : 0);
    snprintf(group, sizeof group, "%s/shm", name);
    int failed = _cmocka_run_group_tests(group, tests, n, wl_setup_shm, wl_teardown);
    snprintf(group, sizeof group, "%s/tcp", name);
    failed += _cmocka_run_group_tests(group, tests, n, wl_setup_tcp, wl_teardown);
    return failed;
}

#endif
