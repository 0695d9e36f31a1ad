/* The runtime threads' doorbells (deleg/remote_bell.c) over shm, 2 nodes in
 * this process: the slot area has them over shm and not over tcp; a ring
 * from the peer, through its mapping of the area, clears an armed bell and
 * leaves a disarmed one alone; a thread asleep on its bell wakes when the
 * peer rings it, long before its own timeout; and a run in which each
 * node's only thread waits on the other's trustee for every request (asleep
 * on its bell between them when the host is crowded) answers every one. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "deleg_cluster.h"
#include "deleg/remote.h"
#include "dsm/deleg.h"
#include "util/clock.h"

typedef struct pair {
    dsm_harness_t c;
    dsm_deleg_rt_t *rt[2];
} pair_t;

static void pair_start(pair_t *p, dsm_transport_t tr)
{
    memset(p, 0, sizeof *p);
    p->c.transport = tr;
    p->c.peer_timeout_ms = 3000;
    p->c.op_timeout_ms = 10000;
    dsm_deleg_config_t dc = {.threads = 1};
    assert_int_equal(test_deleg_cluster_start(&p->c, 2, &dc, p->rt), DSM_OK);
}

static void pair_stop(pair_t *p)
{
    for (int i = 0; i < p->c.n; i++) dsm_deleg_rt_destroy(p->rt[i]);
    dsm_harness_stop(&p->c);
}

static _Atomic uint32_t *bell_of(pair_t *p, int node)
{
    dsm_deleg_remote_t *R = p->rt[node]->remote;
    return rbell_at(R, R->base, 0);
}

static void test_bells_only_over_shm(void **state)
{
    (void)state;
    pair_t p;
    pair_start(&p, DSM_TRANSPORT_TCP);
    assert_int_equal(p.rt[0]->remote->bells_off, 0);
    pair_stop(&p);
    pair_start(&p, DSM_TRANSPORT_SHM);
    assert_true(p.rt[0]->remote->bells_off > 0);
    assert_true(p.rt[0]->remote->bells_off + RBELL_STRIDE <= p.rt[0]->remote->size);
    pair_stop(&p);
}

static void test_ring_through_mapping(void **state)
{
    (void)state;
    pair_t p;
    pair_start(&p, DSM_TRANSPORT_SHM);
    dsm_deleg_remote_t *R0 = p.rt[0]->remote;
    uint32_t rank1 = dsm_node_rank(p.c.nodes[1]);
    _Atomic uint32_t *bell = bell_of(&p, 1);
    /* disarmed: a ring leaves it so */
    dsm_rbell_ring(R0, rank1, 0);
    assert_int_equal(atomic_load(bell), 0);
    /* armed by its thread: node 0's ring clears it */
    dsm_rbell_arm(&p.rt[1]->th[0]);
    assert_int_equal(atomic_load(bell), 1);
    dsm_rbell_ring(R0, rank1, 0);
    assert_int_equal(atomic_load(bell), 0);
    pair_stop(&p);
}

typedef struct sleeper {
    deleg_thread_t *th;
    _Atomic int armed, woke;
} sleeper_t;

static void *sleep_main(void *arg)
{
    sleeper_t *s = arg;
    dsm_rbell_arm(s->th);
    atomic_store(&s->armed, 1);
    dsm_rbell_wait(s->th, 60L * 1000 * 1000);   /* a minute: only the ring ends it within the test's bound */
    atomic_store(&s->woke, 1);
    return NULL;
}

static void test_ring_wakes_sleeper(void **state)
{
    (void)state;
    pair_t p;
    pair_start(&p, DSM_TRANSPORT_SHM);
    sleeper_t s = {.th = &p.rt[1]->th[0]};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, sleep_main, &s), 0);
    /* bounded polls, generous for a loaded host: the ring must come first */
    uint64_t deadline = dsm_deadline_ns(10000);
    while (!atomic_load(&s.armed) && dsm_now_ns() < deadline) sched_yield();
    assert_true(atomic_load(&s.armed));
    dsm_rbell_ring(p.rt[0]->remote, dsm_node_rank(p.c.nodes[1]), 0);
    while (!atomic_load(&s.woke) && dsm_now_ns() < deadline) sched_yield();
    assert_true(atomic_load(&s.woke));
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(bell_of(&p, 1)), 0);
    pair_stop(&p);
}

/* A run where each node's only thread asks the other's trustee, one request
 * at a time, so that every request finds its trustee waiting (asleep on its
 * bell when the host is crowded): every answer must come, right. */
static dsm_deleg_trust_t to_peer[2];
static uint64_t counter[2];
static _Atomic int bad;
enum { ROUNDS = 2000 };

static void bump(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)env;
    (void)args;
    (void)args_len;
    uint64_t v = ++*(uint64_t *)prop;
    dsm_deleg_return(ret, &v, sizeof v);
}

static void ping_main(void *arg, unsigned worker)
{
    (void)worker;
    int i = (int)(uintptr_t)arg;
    for (uint64_t k = 1; k <= ROUNDS; k++) {
        uint64_t v = 0;
        size_t len = 0;
        if (dsm_deleg_apply(&to_peer[i], bump, NULL, 0, &v, sizeof v, &len) != DSM_OK || v != k) atomic_store(&bad, 1);
    }
}

/* The trusts go in a run of their own: a remote drop is a request. */
static dsm_deleg_trust_t own_trust[2];
static void drop_main(void *arg, unsigned worker)
{
    (void)worker;
    int i = (int)(uintptr_t)arg;
    if (dsm_deleg_trust_drop(&to_peer[i]) != DSM_OK || dsm_deleg_trust_drop(&own_trust[i]) != DSM_OK)
        atomic_store(&bad, 1);
}

static void run_all(pair_t *p, dsm_deleg_main_fn fn)
{
    for (int i = 0; i < 2; i++) assert_int_equal(dsm_deleg_rt_start(p->rt[i], fn, (void *)(uintptr_t)i), DSM_OK);
    for (int i = 0; i < 2; i++) assert_int_equal(dsm_deleg_rt_join(p->rt[i]), DSM_OK);
}

static void test_run_with_bells(void **state)
{
    (void)state;
    pair_t p;
    pair_start(&p, DSM_TRANSPORT_SHM);
    assert_int_equal(dsm_deleg_register("test.bell.bump", bump), DSM_OK);
    for (int i = 0; i < 2; i++) {
        counter[i] = 0;
        assert_int_equal(dsm_deleg_entrust(p.rt[i], 0, &counter[i], NULL, 0, &own_trust[i]), DSM_OK);
    }
    for (int i = 0; i < 2; i++) {
        uint8_t wire[DSM_DELEG_TRUST_WIRE];
        assert_int_equal(dsm_deleg_trust_export(&own_trust[1 - i], wire, sizeof wire), DSM_OK);
        assert_int_equal(dsm_deleg_trust_import(p.rt[i], wire, sizeof wire, &to_peer[i]), DSM_OK);
    }
    run_all(&p, ping_main);
    assert_int_equal(atomic_load(&bad), 0);
    assert_int_equal(counter[0], ROUNDS);
    assert_int_equal(counter[1], ROUNDS);
    run_all(&p, drop_main);
    assert_int_equal(atomic_load(&bad), 0);
    pair_stop(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bells_only_over_shm),
        cmocka_unit_test(test_ring_through_mapping),
        cmocka_unit_test(test_ring_wakes_sleeper),
        cmocka_unit_test(test_run_with_bells),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
