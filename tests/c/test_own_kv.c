/* The KV workload (apps/kvc.c) under own and dir on 3 nodes running their
 * streams at once, over shm and tcp: no lost update, no torn read, and the
 * final table's checksum equals the single-process original's (the same
 * streams run one after the other on plain memory). Also the protocol
 * switch by name, and each protocol's messages per operation (printed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "apps/coh.h"
#include "apps/kvc.h"
#include "apps/workloads.h"
#include "cluster_util.h"
#include "runtime/internal.h"

enum { N = 3 };

/* Generous timeouts: these tests keep every core busy. */
static dsm_harness_t shm_cluster = {.transport = DSM_TRANSPORT_SHM, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};
static dsm_harness_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};

static int setup_shm(void **state) { return test_cluster_setup(state, &shm_cluster, N); }
static int setup_tcp(void **state) { return test_cluster_setup(state, &tcp_cluster, N); }

typedef struct stream {
    dsm_kvc_t *t;
    dsm_node_t *node;
    uint32_t id;
    uint64_t nops;
    dsm_kvc_result_t res;
    dsm_status_t st;
} stream_t;

static void *run_stream(void *arg)
{
    stream_t *s = arg;
    s->st = dsm_kvc_run(s->t, s->node, s->id, s->nops, &s->res);
    return NULL;
}

static uint64_t original_checksum(const dsm_kvc_config_t *cfg, uint64_t nops)
{
    const dsm_coh_ops_t *local = dsm_coh_ops("local");
    dsm_node_t *none[1] = {NULL};
    dsm_kvc_t *t;
    assert_int_equal(dsm_kvc_create(local, dsm_coh_locks("local"), cfg, none, 1, &t), DSM_OK);
    dsm_kvc_result_t res = {0};
    for (uint32_t s = 0; s < N; s++)
        assert_int_equal(dsm_kvc_run(t, NULL, s, nops, &res), DSM_OK);
    assert_int_equal(res.torn, 0);
    assert_int_equal(res.not_found, 0);
    uint64_t sum;
    assert_int_equal(dsm_kvc_checksum(t, NULL, &sum), DSM_OK);
    dsm_kvc_destroy(t);
    return sum;
}

static void run_kv_with(dsm_harness_t *c, const char *proto, const char *lock, uint32_t guard)
{
    const dsm_coh_ops_t *ops = dsm_coh_ops(proto);
    const dsm_coh_lock_ops_t *locks = dsm_coh_locks(lock);
    assert_non_null(ops);
    assert_non_null(locks);
    dsm_kvc_config_t cfg;
    dsm_kvc_config_default(&cfg);
    cfg.buckets = 16;
    cfg.keys = 100;
    cfg.guard = guard;
    uint64_t nops = c->transport == DSM_TRANSPORT_TCP ? 40 : 80;
    uint64_t want = original_checksum(&cfg, nops);

    dsm_kvc_t *t;
    assert_int_equal(dsm_kvc_create(ops, locks, &cfg, c->nodes, N, &t), DSM_OK);
    uint64_t before;
    assert_int_equal(dsm_kvc_checksum(t, c->nodes[1], &before), DSM_OK);
    /* Both protocols' counters: the locks are own's mutexes whatever the protocol. */
    const dsm_coh_ops_t *own = dsm_coh_ops("own"), *dir = dsm_coh_ops("dir");
    dsm_coh_stats_t s0[N][2], s1[N][2];
    for (int i = 0; i < N; i++) {
        own->stats(c->nodes[i], &s0[i][0]);
        dir->stats(c->nodes[i], &s0[i][1]);
    }
    stream_t st[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        st[i] = (stream_t){.t = t, .node = c->nodes[i], .id = (uint32_t)i, .nops = nops};
        pthread_create(&th[i], NULL, run_stream, &st[i]);
    }
    /* Join every stream before any assertion can leave this frame. */
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    uint64_t gets = 0, sets = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(st[i].st, DSM_OK);
        assert_int_equal(st[i].res.torn, 0);
        assert_int_equal(st[i].res.not_found, 0);
        gets += st[i].res.gets;
        sets += st[i].res.sets;
    }
    assert_int_equal(gets + sets, N * nops);
    assert_true(sets > 0 && gets > 5 * sets);
    uint64_t msgs = 0, bytes = 0;
    for (int i = 0; i < N; i++) {
        own->stats(c->nodes[i], &s1[i][0]);
        dir->stats(c->nodes[i], &s1[i][1]);
        for (int k = 0; k < 2; k++) {
            msgs += s1[i][k].messages - s0[i][k].messages;
            bytes += s1[i][k].bytes - s0[i][k].bytes;
        }
    }
    /* The streams changed the table, and every node agrees with the original. */
    for (int i = 0; i < N; i++) {
        uint64_t sum;
        assert_int_equal(dsm_kvc_checksum(t, c->nodes[i], &sum), DSM_OK);
        assert_true(sum != before);
        assert_int_equal(sum, want);
    }
    printf("kv %s+%s%s/%s: %.2f messages, %.1f bytes per operation (protocol and locks)\n", proto, lock,
           strcmp(proto, "own") == 0 ? (guard ? " (Mutex<Box>)" : " (box beside mutex)") : "", dsm_transport_name(c->transport), (double)msgs / (double)(N * nops), (double)bytes / (double)(N * nops));
    dsm_kvc_destroy(t);
}

static void run_kv(dsm_harness_t *c, const char *proto, const char *lock) { run_kv_with(c, proto, lock, 1); }

static void test_kv_own(void **state) { run_kv(*state, "own", "deleg"); }
/* own's box beside its mutex: every borrow reads the owner record. */
static void test_kv_own_box(void **state) { run_kv_with(*state, "own", "deleg", 0); }
static void test_kv_dir_deleg(void **state) { run_kv(*state, "dir", "deleg"); }
static void test_kv_dir(void **state) { run_kv(*state, "dir", "cas"); }
/* own without borrow checks (the locks keep the borrow rules). */
static void test_kv_own_unchecked(void **state)
{
    dsm_harness_t *c = *state;
    for (int i = 0; i < N; i++)
        assert_int_equal(dsm_own_set_checks(c->nodes[i], 0), DSM_OK);
    run_kv(c, "own", "cas");
    for (int i = 0; i < N; i++)
        assert_int_equal(dsm_own_set_checks(c->nodes[i], 1), DSM_OK);
}

static void test_bad_config(void **state)
{
    (void)state;
    dsm_kvc_config_t cfg;
    dsm_kvc_config_default(&cfg);
    cfg.keys = cfg.buckets * cfg.slots + 1;
    dsm_node_t *none[1] = {NULL};
    dsm_kvc_t *t;
    assert_int_equal(dsm_kvc_create(dsm_coh_ops("local"), dsm_coh_locks("local"), &cfg, none, 1, &t),
                     DSM_ERR_INVALID);
    assert_null(dsm_coh_ops("gam"));
    assert_null(dsm_coh_locks("ticket"));
    assert_non_null(dsm_coh_locks("spin"));
    assert_true(dsm_coh_locks("spin")->process && dsm_coh_locks("local")->process && !dsm_coh_locks("cas")->process);
    /* The locks that can hold their object: own's, and the original's boxed. */
    assert_true(dsm_coh_locks("boxed")->process && dsm_coh_locks("boxed")->guards && dsm_coh_locks("cas")->guards &&
                dsm_coh_locks("deleg")->guards && !dsm_coh_locks("spin")->guards && !dsm_coh_locks("local")->guards);
}

/* The registered workload "kv": every node runs it at once with the same
 * shared directory; rank_index 0's checksum equals the original's (the
 * workload with protocol=local and streams=3). */
typedef struct wl {
    dsm_node_t *node;
    char args[256];
    char ret[1024];
    size_t ret_len;
    dsm_status_t st;
} wl_t;

static void *run_wl(void *arg)
{
    wl_t *w = arg;
    w->st = dsm_workload_kv(w->node, w->args, strlen(w->args), w->ret, sizeof w->ret - 1, &w->ret_len);
    w->ret[w->ret_len] = '\0';
    return NULL;
}

static double result(const char *ret, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = ret; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    fail_msg("no %s in the result", name);
    return 0;
}

static void workload_under(dsm_harness_t *c, const char *proto, const char *lock)
{
    enum { B = 16 };
    const char *common = "buckets=16\nkeys=100\nops=40\nseed=7\n";
    wl_t orig = {.node = NULL};
    snprintf(orig.args, sizeof orig.args, "protocol=local\nstreams=%d\n%s", N, common);
    run_wl(&orig);
    assert_int_equal(orig.st, DSM_OK);
    /* The original with pthread mutexes instead of its own-shaped spin lock does the same work. */
    wl_t spin = {.node = NULL};
    snprintf(spin.args, sizeof spin.args, "protocol=local\nlock=local\nstreams=%d\n%s", N, common);
    run_wl(&spin);
    assert_int_equal(spin.st, DSM_OK);
    assert_true(result(spin.ret, "checksum") == result(orig.ret, "checksum"));
    /* ... and so does the original laid out as own's Mutex<Box<T>>, its
     * buckets in their locks and, with guard=0, beside them. */
    for (int guard = 0; guard <= 1; guard++) {
        wl_t boxed = {.node = NULL};
        snprintf(boxed.args, sizeof boxed.args, "protocol=local\nlock=boxed\nguard=%d\nstreams=%d\n%s", guard, N,
                 common);
        run_wl(&boxed);
        assert_int_equal(boxed.st, DSM_OK);
        assert_true(result(boxed.ret, "checksum") == result(orig.ret, "checksum"));
    }
    dsm_gaddr_t dir;
    uint64_t zero[1 + 2 * B] = {0};
    assert_int_equal(dsm_alloc(c->nodes[0], 0, sizeof zero, &dir), DSM_OK);
    assert_int_equal(dsm_write(c->nodes[0], dir, zero, sizeof zero), DSM_OK);
    wl_t w[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        w[i] = (wl_t){.node = c->nodes[i]};
        snprintf(w[i].args, sizeof w[i].args, "protocol=%s\nlock=%s\nrank_index=%d\nnodes=%d\ndirectory=%llu\n%s",
                 proto, lock, i, N, (unsigned long long)dir, common);
        pthread_create(&th[i], NULL, run_wl, &w[i]);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        assert_int_equal(w[i].st, DSM_OK);
        assert_int_equal((int)result(w[i].ret, "ops"), 40);
    }
    assert_true(result(w[0].ret, "checksum") != 0);
    assert_true(result(w[0].ret, "checksum") == result(orig.ret, "checksum"));
    assert_int_equal(dsm_free(c->nodes[0], dir), DSM_OK);
}

static void test_kv_workload(void **state)
{
    dsm_harness_t *c = *state;
    assert_int_equal(dsm_apps_register(), DSM_OK);
    uint32_t id;
    assert_int_equal(dsm_lookup("kv", &id), DSM_OK);
    workload_under(c, "own", "deleg");
    workload_under(c, "dir", "cas");
    /* own without borrow checks for the run (the locks keep the rules). */
    workload_under(c, "own", "cas\nchecks=0");
    workload_under(c, "own", "deleg\nguard=0");
    workload_under(c, "dir", "auto");   /* the default: cas over shm, deleg over tcp */
    for (int i = 0; i < N; i++)
        assert_int_equal(dsm_own_set_checks(c->nodes[i], 1), DSM_OK);
    /* Bad parameters: unknown protocol or lock, no directory, a local lock on a protocol. */
    char ret[256];
    size_t rl = 0;
    const char *bad[] = {"protocol=gam\n",
                         "protocol=own\nchecks=5\ndirectory=64\n",
                         "protocol=own\nguard=2\ndirectory=64\n",
                         "protocol=own\nlock=spin\ndirectory=64\n",
                         "protocol=own\nlock=boxed\ndirectory=64\n",
                         "protocol=own\n",
                         "protocol=dir\nlock=local\ndirectory=64\n",
                         "protocol=local\nlock=cas\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(dsm_workload_kv(c->nodes[0], bad[i], strlen(bad[i]), ret, sizeof ret, &rl),
                         DSM_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_own),
        cmocka_unit_test(test_kv_dir),
        cmocka_unit_test(test_kv_own_box),
        cmocka_unit_test(test_kv_dir_deleg),
        cmocka_unit_test(test_kv_own_unchecked),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_kv_workload),
    };
    dsm_set_log_level(getenv("DSM_TEST_LOG") ? 1 : 0);
    int failed = cmocka_run_group_tests_name("kv/shm", tests, setup_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("kv/tcp", tests, setup_tcp, test_cluster_teardown);
    return failed;
}
