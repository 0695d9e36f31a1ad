/* The job pool that runs peers' spawns on a node (runtime/spawn_pool.c):
 * its jobs run, queued ones too when it closes; a node's spawns reuse its
 * threads instead of starting one each; a cancelled job stops and its
 * thread serves the next; a node's destroy joins every pooled thread (none
 * named dsm-spawn is left); a node's spawns to itself run on its pool
 * as well, and one still running at its destroy is stopped, not left on a
 * freed node. DSM_SPAWN_MAX_RUNNING's BUSY refusal is
 * test_runtime_cluster's test_spawn_bound. No sleeps: every wait is for a
 * condition, with a deadline far beyond a loaded host's delays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <cmocka.h>

#include "cluster_util.h"
#include "spawn_util.h"
#include "runtime/internal.h"
#include "runtime/node_internal.h"

enum { WAIT_MS = 60000 };

/* ---- jobs held until released ---------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int held, release, ran;

static void hold_reset(void)
{
    pthread_mutex_lock(&lock);
    held = release = ran = 0;
    pthread_mutex_unlock(&lock);
}

static void hold_release(void)
{
    pthread_mutex_lock(&lock);
    release = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

/* Waits (WAIT_MS at most) until `held` is n; its value then. */
static int wait_held(int n)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&lock);
    int rc = 0;
    while (held != n && rc == 0) rc = pthread_cond_timedwait(&cond, &lock, &deadline);
    int h = held;
    pthread_mutex_unlock(&lock);
    return h;
}

static void held_job(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    held++;
    pthread_cond_broadcast(&cond);
    while (!release) pthread_cond_wait(&cond, &lock);
    held--;
    ran++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static dsm_status_t held_fn(dsm_node_t *n, const void *args, size_t len, void *ret, size_t cap, size_t *ret_len)
{
    (void)n, (void)args, (void)len, (void)ret, (void)cap;
    *ret_len = 0;
    held_job(NULL);
    return DSM_OK;
}

static void register_fns(void)
{
    static const test_fn_entry_t fns[] = {
        {"test.pool_held", held_fn}, {"test.pool_echo", test_echo_fn}, {"test.pool_until_stopped", test_until_stopped_fn}};
    test_register_fns(fns, sizeof fns / sizeof fns[0]);
}

/* Threads of this process named dsm-spawn (the pools'). */
static int spawn_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[300], name[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        if (fgets(name, sizeof name, f) && strncmp(name, "dsm-spawn", 9) == 0) n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* Waits until every thread of the pool waits for a job. */
static void wait_all_idle(dsm_spawn_pool_t *p)
{
    uint64_t deadline = dsm_now_ms() + WAIT_MS;
    while (dsm_spawn_pool_idle(p) != dsm_spawn_pool_threads(p) && dsm_now_ms() < deadline) sched_yield();
    assert_int_equal(dsm_spawn_pool_idle(p), dsm_spawn_pool_threads(p));
}

/* ---- the pool alone ----------------------------------------------------------- */

/* Jobs run, one thread each while all are held at once; jobs queued when
 * the pool closes still run, and destroy joins every thread. */
static void test_pool_runs_and_closes(void **state)
{
    (void)state;
    enum { K = 4, MORE = 3 };
    hold_reset();
    dsm_spawn_pool_t *p = dsm_spawn_pool_new();
    assert_non_null(p);
    for (int i = 0; i < K; i++) assert_int_equal(dsm_spawn_pool_run(p, held_job, NULL), DSM_OK);
    assert_int_equal(wait_held(K), K);
    assert_int_equal(dsm_spawn_pool_threads(p), K);
    /* every thread busy: these wait in the queue, each with a thread of its own */
    for (int i = 0; i < MORE; i++) assert_int_equal(dsm_spawn_pool_run(p, held_job, NULL), DSM_OK);
    assert_int_equal(dsm_spawn_pool_threads(p), K + MORE);
    hold_release();
    dsm_spawn_pool_destroy(p);
    pthread_mutex_lock(&lock);
    int r = ran;
    pthread_mutex_unlock(&lock);
    assert_int_equal(r, K + MORE);
}

/* A pool that closes with idle threads releases them, and one that is
 * closing refuses a job. */
static void test_pool_idle_close(void **state)
{
    (void)state;
    hold_reset();
    hold_release();
    dsm_spawn_pool_t *p = dsm_spawn_pool_new();
    assert_non_null(p);
    assert_int_equal(dsm_spawn_pool_run(p, held_job, NULL), DSM_OK);
    wait_all_idle(p);
    assert_int_equal(dsm_spawn_pool_threads(p), 1);
    dsm_spawn_pool_destroy(p);
    assert_int_equal(ran, 1);
}

/* ---- a node's pool --------------------------------------------------------------- */

/* Spawns one after another run on one pooled thread; K at once grow the
 * pool to K threads, which the next K reuse. */
static void test_node_pool_reuse(void **state)
{
    dsm_harness_t *c = *state;
    register_fns();
    dsm_spawn_pool_t *p = c->nodes[1]->pool;
    assert_non_null(p);
    unsigned before = dsm_spawn_pool_threads(p);
    for (int i = 0; i < 20; i++) {
        dsm_task_t *t;
        uint64_t v = (uint64_t)i, out = 0;
        size_t len = 0;
        assert_int_equal(dsm_spawn(c->nodes[0], 1, "test.pool_echo", &v, 8, &t), DSM_OK);
        assert_int_equal(dsm_join(t, &out, 8, &len, WAIT_MS), DSM_OK);
        assert_int_equal(len, 8);
        assert_int_equal(out, v);
        wait_all_idle(p);
    }
    assert_int_equal(dsm_spawn_pool_threads(p), before ? before : 1);

    enum { K = 4 };
    unsigned grown = 0;
    for (int round = 0; round < 2; round++) {
        hold_reset();
        dsm_task_t *t[K];
        for (int i = 0; i < K; i++)
            assert_int_equal(dsm_spawn(c->nodes[0], 1, "test.pool_held", NULL, 0, &t[i]), DSM_OK);
        int h = wait_held(K);
        unsigned threads = dsm_spawn_pool_threads(p);
        hold_release();
        for (int i = 0; i < K; i++) assert_int_equal(dsm_join(t[i], NULL, 0, NULL, WAIT_MS), DSM_OK);
        assert_int_equal(h, K);
        assert_true(threads >= K);
        if (round == 0) grown = threads;
        else assert_int_equal(threads, grown);   /* reused, none started */
        wait_all_idle(p);
    }
}

/* A cancel stops a pooled job (its function sees the flag), and its
 * thread then runs the next spawn, whose flag is down. */
static void test_node_pool_cancel(void **state)
{
    dsm_harness_t *c = *state;
    register_fns();
    dsm_spawn_pool_t *p = c->nodes[2]->pool;
    dsm_task_t *t;
    assert_int_equal(dsm_spawn(c->nodes[0], 2, "test.pool_until_stopped", NULL, 0, &t), DSM_OK);
    assert_int_equal(dsm_task_wait_started(t, WAIT_MS), DSM_OK);
    assert_int_equal(dsm_task_cancel(t), DSM_OK);
    assert_int_equal(dsm_join(t, NULL, 0, NULL, WAIT_MS), DSM_ERR_CANCELLED);
    wait_all_idle(p);
    unsigned threads = dsm_spawn_pool_threads(p);
    uint64_t v = 7, out = 0;
    size_t len = 0;
    assert_int_equal(dsm_spawn(c->nodes[0], 2, "test.pool_echo", &v, 8, &t), DSM_OK);
    assert_int_equal(dsm_join(t, &out, 8, &len, WAIT_MS), DSM_OK);
    assert_int_equal(out, 7);
    assert_int_equal(dsm_spawn_pool_threads(p), threads);
}

/* A spawn to the caller's own node runs on that node's pool too: K held
 * at once grow it to K threads, which a cancelled job and the next spawn
 * then reuse; its start is seen and its result is the function's. As many
 * held as a peer may run there (DSM_SPAWN_MAX_RUNNING) do not make the
 * node refuse a peer's spawn: that bound is the peers'. */
static void test_local_spawns_pooled(void **state)
{
    dsm_harness_t *c = *state;
    register_fns();
    dsm_spawn_pool_t *p = c->nodes[0]->pool;
    enum { K = DSM_SPAWN_MAX_RUNNING };
    hold_reset();
    static dsm_task_t *t[K];
    for (int i = 0; i < K; i++) assert_int_equal(dsm_spawn(c->nodes[0], 0, "test.pool_held", NULL, 0, &t[i]), DSM_OK);
    for (int i = 0; i < K; i++) assert_int_equal(dsm_task_wait_started(t[i], WAIT_MS), DSM_OK);
    int h = wait_held(K);
    dsm_task_t *peer;
    uint64_t pv = 5, pout = 0;
    dsm_status_t peer_st = dsm_spawn(c->nodes[1], 0, "test.pool_echo", &pv, 8, &peer);
    if (peer_st == DSM_OK) peer_st = dsm_join(peer, &pout, 8, NULL, WAIT_MS);
    unsigned threads = dsm_spawn_pool_threads(p);
    hold_release();   /* before the checks: a failure leaves no job held */
    assert_int_equal(peer_st, DSM_OK);
    assert_int_equal(pout, 5);
    for (int i = 0; i < K; i++) assert_int_equal(dsm_join(t[i], NULL, 0, NULL, WAIT_MS), DSM_OK);
    assert_int_equal(h, K);
    assert_true(threads >= K);
    wait_all_idle(p);

    dsm_task_t *u;
    assert_int_equal(dsm_spawn(c->nodes[0], 0, "test.pool_until_stopped", NULL, 0, &u), DSM_OK);
    assert_int_equal(dsm_task_wait_started(u, WAIT_MS), DSM_OK);
    assert_true(dsm_task_started(u));
    assert_int_equal(dsm_task_cancel(u), DSM_OK);
    assert_int_equal(dsm_join(u, NULL, 0, NULL, WAIT_MS), DSM_ERR_CANCELLED);
    uint64_t v = 11, out = 0;
    size_t len = 0;
    assert_int_equal(dsm_spawn(c->nodes[0], 0, "test.pool_echo", &v, 8, &u), DSM_OK);
    assert_int_equal(dsm_join(u, &out, 8, &len, WAIT_MS), DSM_OK);
    assert_int_equal(len, 8);
    assert_int_equal(out, 11);
    assert_int_equal(dsm_spawn_pool_threads(p), threads);   /* reused, none started */
}

/* A spawn to its own node that is still running when the node is
 * destroyed is stopped first (its flag raised, the destroy waiting for
 * it), and may be joined after: its result is the function's. */
static void test_local_spawn_outlived(void **state)
{
    (void)state;
    register_fns();
    dsm_harness_t c = {.transport = DSM_TRANSPORT_SHM};
    assert_int_equal(test_cluster_start(&c, 2, 0), DSM_OK);
    dsm_task_t *t;
    assert_int_equal(dsm_spawn(c.nodes[1], 1, "test.pool_until_stopped", NULL, 0, &t), DSM_OK);
    assert_int_equal(dsm_task_wait_started(t, WAIT_MS), DSM_OK);
    dsm_harness_stop(&c);
    assert_int_equal(dsm_join(t, NULL, 0, NULL, WAIT_MS), DSM_ERR_CANCELLED);
}

/* A node's destroy joins its pool's threads: after a cluster whose nodes
 * ran spawns at once stops, no dsm-spawn thread is left. */
static void test_destroy_joins_pool(void **state)
{
    (void)state;
    register_fns();
    int before = spawn_threads();
    assert_true(before >= 0);
    dsm_harness_t c = {.transport = DSM_TRANSPORT_SHM};
    assert_int_equal(test_cluster_start(&c, 2, 0), DSM_OK);
    enum { K = 3 };
    hold_reset();
    dsm_task_t *t[2][K];
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < K; i++)
            assert_int_equal(dsm_spawn(c.nodes[1 - r], (uint32_t)r, "test.pool_held", NULL, 0, &t[r][i]), DSM_OK);
    int h = wait_held(2 * K);
    int during = spawn_threads();
    hold_release();
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < K; i++) assert_int_equal(dsm_join(t[r][i], NULL, 0, NULL, WAIT_MS), DSM_OK);
    dsm_harness_stop(&c);
    assert_int_equal(h, 2 * K);
    assert_true(during >= before + 2 * K);
    assert_int_equal(spawn_threads(), before);
}

/* A spawn waiting for its result does not outlive what could send it: the
 * caller's destroy fails it (DSM_ERR_CLOSED), and a target that goes away
 * ends it (its job stopped, or the peer found gone). */
static void test_waiting_task_fails(void **state)
{
    (void)state;
    register_fns();
    dsm_harness_t c = {.transport = DSM_TRANSPORT_SHM};
    assert_int_equal(test_cluster_start(&c, 3, 0), DSM_OK);
    dsm_task_t *mine, *theirs;
    assert_int_equal(dsm_spawn(c.nodes[0], 1, "test.pool_until_stopped", NULL, 0, &mine), DSM_OK);
    assert_int_equal(dsm_spawn(c.nodes[2], 1, "test.pool_until_stopped", NULL, 0, &theirs), DSM_OK);
    assert_int_equal(dsm_task_wait_started(mine, WAIT_MS), DSM_OK);
    assert_int_equal(dsm_task_wait_started(theirs, WAIT_MS), DSM_OK);
    dsm_node_destroy(c.nodes[2]);   /* the caller of `theirs` */
    c.nodes[2] = NULL;
    dsm_status_t closed = dsm_join(theirs, NULL, 0, NULL, WAIT_MS);
    dsm_node_destroy(c.nodes[1]);   /* the target of `mine`: stops its jobs */
    c.nodes[1] = NULL;
    dsm_status_t gone = dsm_join(mine, NULL, 0, NULL, WAIT_MS);
    dsm_harness_stop(&c);
    assert_int_equal(closed, DSM_ERR_CLOSED);
    if (gone != DSM_ERR_CANCELLED && gone != DSM_ERR_PEER_DEAD)
        fail_msg("a spawn on a destroyed target gave %s", dsm_status_name(gone));
}

int main(void)
{
    static dsm_harness_t shm = {.transport = DSM_TRANSPORT_SHM}, tcp = {.transport = DSM_TRANSPORT_TCP};
    const struct CMUnitTest alone[] = {cmocka_unit_test(test_pool_runs_and_closes),
                                       cmocka_unit_test(test_pool_idle_close),
                                       cmocka_unit_test(test_destroy_joins_pool),
                                       cmocka_unit_test(test_waiting_task_fails),
                                       cmocka_unit_test(test_local_spawn_outlived)};
#define NODE_TESTS(state)                                                                            \
    cmocka_unit_test_prestate(test_node_pool_reuse, state), cmocka_unit_test_prestate(test_node_pool_cancel, state), \
        cmocka_unit_test_prestate(test_local_spawns_pooled, state)
    const struct CMUnitTest shm_tests[] = {NODE_TESTS(&shm)};
    const struct CMUnitTest tcp_tests[] = {NODE_TESTS(&tcp)};
    int failed = cmocka_run_group_tests_name("spawn_pool", alone, NULL, NULL);
    if (test_cluster_start(&shm, 3, 0) != DSM_OK) return 1;
    failed += cmocka_run_group_tests_name("spawn_pool/shm", shm_tests, NULL, NULL);
    dsm_harness_stop(&shm);
    if (test_cluster_start(&tcp, 3, 0) != DSM_OK) return 1;
    failed += cmocka_run_group_tests_name("spawn_pool/tcp", tcp_tests, NULL, NULL);
    dsm_harness_stop(&tcp);
    return failed;
}
