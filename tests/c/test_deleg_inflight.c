/* Two batches in flight per (client, trustee) pair on one node: a client
 * streaming apply_then to a dedicated trustee publishes a batch while its
 * previous one is still being served, and per-pair order, exactly-once
 * execution and in-order completions hold throughout. The client keeps its
 * window with dsm_deleg_wait_outstanding, which returns only once the
 * thread's outstanding requests are within the bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deleg/internal.h"
#include "dsm/deleg.h"

/* A slot holds 70 of these requests (16 bytes each after the first of a
 * batch, REQF_SAME): the window is wider than two slots, so a batch always
 * waits behind the one in flight. */
enum { N = 20000, WINDOW = 192 };

typedef struct seqprop {
    uint64_t last, count;
    int bad;
} seqprop_t;

typedef struct client {
    dsm_deleg_trust_t t;
    uint64_t issued, done, last_back;
    int bad;
    uint64_t waits, over; /* waits, and returns above the bound */
    int ctx_refused;      /* refused in delegated context (a continuation) */
} client_t;

static void seq_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)args;
    (void)args_len;
    seqprop_t *p = prop;
    uint64_t s;
    memcpy(&s, env, 8);
    if (s != p->last + 1) p->bad = 1;
    p->last = s;
    p->count++;
    /* Now and then the trustee dwells on a request (5 ms), so that a client
     * that can publish its next batch while this one is served does so even
     * on a slow (sanitised, loaded) machine, where serving could otherwise
     * always finish first. */
    if (s % 500 == 1) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do clock_gettime(CLOCK_MONOTONIC, &t);
        while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 5000000L);
    }
    dsm_deleg_return(ret, &s, 8);
}

static void back(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    client_t *c = arg;
    uint64_t s = 0;
    if (st != DSM_OK || len != 8) c->bad = 1;
    else memcpy(&s, ret, 8);
    if (s != c->last_back + 1) c->bad = 1;
    c->last_back = s;
    c->done++;
    if (c->done == 1) c->ctx_refused = dsm_deleg_wait_outstanding(0) == DSM_ERR_STATE;
}

static void client_main(void *arg, unsigned worker)
{
    client_t *c = arg;
    (void)worker;
    while (c->done < N) {
        while (c->issued < N && c->issued - c->done < WINDOW) {
            uint64_t s = ++c->issued;
            assert_int_equal(dsm_deleg_apply_then(&c->t, seq_fn, &s, 8, NULL, 0, 8, back, c), DSM_OK);
        }
        if (c->done < N) {
            /* the tail: nothing left to issue, so wait for all of it (a
               bound it already meets would return at once, and this fiber
               would spin without ever letting the responses in) */
            uint64_t bound = c->issued < N ? WINDOW / 2 : 0;
            assert_int_equal(dsm_deleg_wait_outstanding(bound), DSM_OK);
            c->waits++;
            if (dsm_deleg_tls->outstanding > bound || c->issued - c->done > bound) c->over++;
        }
    }
}

static void test_two_in_flight(void **state)
{
    (void)state;
    dsm_deleg_config_t cfg = {.threads = 2, .dedicated = 1};
    dsm_deleg_rt_t *rt;
    assert_int_equal(dsm_deleg_rt_create(&cfg, &rt), DSM_OK);
    seqprop_t p = {0};
    client_t c = {0};
    assert_int_equal(dsm_deleg_entrust(rt, 0, &p, NULL, 0, &c.t), DSM_OK);
    assert_int_equal(dsm_deleg_rt_run(rt, client_main, &c), DSM_OK);
    assert_false(p.bad);
    assert_false(c.bad);
    assert_int_equal(p.count, N);
    assert_int_equal(c.done, N);
    /* the client did publish while its other slot was in flight */
    assert_true(rt->th[1].overlapped > 0);
    assert_true(c.waits > 0);
    assert_int_equal(c.over, 0);
    assert_true(c.ctx_refused);
    /* outside a fiber it is refused */
    assert_int_equal(dsm_deleg_wait_outstanding(0), DSM_ERR_STATE);
    assert_int_equal(dsm_deleg_trust_drop(&c.t), DSM_OK);
    dsm_deleg_rt_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_in_flight)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
