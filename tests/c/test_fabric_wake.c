/* A thread asleep in a wait is woken when another thread's progress takes
 * the answer it sleeps for. Here the other thread is a poller, which
 * progresses the requester's worker all the time; the progress thread and
 * a second waiter do the same in the race this guards against. The
 * worker's event fd stays quiet for the sleeper once its answer is taken,
 * so only the kick (wait.c) wakes it. With the waiter's periodic look
 * removed (the test switch wait_recheck: a sleep lasts to the wait's
 * deadline), a wake-up it misses shows as a request that takes its whole
 * timeout. The negative run (wait_kick: no kicks) must see one. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/fabric.h"
#include "fabric/fabric_int.h"
#include "util/clock.h"
#include "util/test_switch.h"

enum { NF = 2, H_ECHO = DSM_AM_USER_FIRST };
/* Requests until the poller has taken this many answers from a sleeper,
 * and at most this many in all (each a loopback round trip). */
enum { KICKS_WANTED = 10, MAX_REQUESTS = 20000 };
/* The op timeout, which a sleep lasts to: a wake-up missed makes its
 * request take all of it (the wait then finds its answer). An answered
 * request takes a round trip, under a millisecond even with the chaos
 * mode's delays, so half the timeout tells the two apart on a loaded host.
 * The negative run waits for a miss to happen: a shorter timeout. */
enum { TIMEOUT_MS = 20000, NEGATIVE_TIMEOUT_MS = 300 };

static dsm_fabric_t *fab[NF];

static void echo_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_fabric_t *f = ctx;
    dsm_fabric_am_reply(f, msg->src_rank, msg->request_id, DSM_OK, msg->data, msg->len);
}

static void fabrics_up(uint32_t timeout_ms)
{
    dsm_fabric_config_t cfg = {
        .transport = DSM_TRANSPORT_TCP,
        .progress = DSM_PROGRESS_BLOCKING,
        .net_device = "lo",
        .op_timeout_ms = timeout_ms,
    };
    for (int i = 0; i < NF; i++) {
        assert_int_equal(dsm_fabric_create(&cfg, &fab[i]), DSM_OK);
        dsm_fabric_set_rank(fab[i], (uint32_t)i);
        assert_int_equal(dsm_fabric_am_register(fab[i], H_ECHO, echo_handler, fab[i]), DSM_OK);
    }
    for (int i = 0; i < NF; i++)
        for (int j = 0; j < NF; j++) {
            const void *addr;
            size_t len;
            assert_int_equal(dsm_fabric_address(fab[j], &addr, &len), DSM_OK);
            assert_int_equal(dsm_fabric_connect(fab[i], (uint32_t)j, addr, len), DSM_OK);
        }
}

static void fabrics_down(void)
{
    for (int i = 0; i < NF; i++)
        dsm_fabric_destroy(fab[i]);
}

static _Atomic int poller_stop;

static void *poller(void *arg)
{
    dsm_fabric_t *f = arg;
    dsm_fabric_poller_begin(f);
    while (!atomic_load(&poller_stop))
        dsm_fabric_poll(f);
    dsm_fabric_poller_end(f);
    return NULL;
}

/* The switches already set (the negative run's) and wait_recheck. */
static void set_wait_recheck(void)
{
    const char *old = getenv("DSM_TEST_BREAK");
    char list[256];
    snprintf(list, sizeof list, "%s%swait_recheck", old && *old ? old : "", old && *old ? "," : "");
    assert_int_equal(setenv("DSM_TEST_BREAK", list, 1), 0);
}

static uint64_t kicks(dsm_fabric_t *f)
{
    dsm_stats_t s;
    dsm_fabric_stats(f, &s);
    return s.wait_kicks;
}

static void test_sleeper_woken_when_its_answer_is_taken(void **state)
{
    (void)state;
    int broken = dsm_test_switch("wait_kick");
    set_wait_recheck();
    fabrics_up(broken ? NEGATIVE_TIMEOUT_MS : TIMEOUT_MS);
    /* one round trip each way: connections wired up before the poller */
    for (int i = 0; i < NF; i++) {
        char rep[4];
        size_t rlen = 0;
        assert_int_equal(dsm_fabric_am_request(fab[i], (uint32_t)(1 - i), H_ECHO, "hi", 2, rep, sizeof rep, &rlen, 0),
                         DSM_OK);
    }
    atomic_store(&poller_stop, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, poller, fab[0]), 0);
    uint64_t kicks0 = kicks(fab[0]), slept_through = 0;
    uint32_t timeout_ms = broken ? NEGATIVE_TIMEOUT_MS : TIMEOUT_MS;
    int requests = 0;
    while (requests < MAX_REQUESTS && kicks(fab[0]) - kicks0 < KICKS_WANTED && !(broken && slept_through)) {
        char rep[8];
        size_t rlen = 0;
        uint64_t t0 = dsm_now_ns();
        assert_int_equal(dsm_fabric_am_request(fab[0], 1, H_ECHO, "abcd", 4, rep, sizeof rep, &rlen, 0), DSM_OK);
        if (dsm_now_ns() - t0 >= (uint64_t)timeout_ms * 1000000u / 2)
            slept_through++;
        requests++;
        assert_int_equal(rlen, 4);
        assert_memory_equal(rep, "abcd", 4);
    }
    atomic_store(&poller_stop, 1);
    pthread_join(t, NULL);
    print_message("%d requests, %llu sleepers kicked, %llu slept to the deadline\n", requests,
                  (unsigned long long)(kicks(fab[0]) - kicks0), (unsigned long long)slept_through);
    if (broken) {
        /* no kick: an answer the poller took from a sleeper left it asleep */
        assert_int_equal(kicks(fab[0]) - kicks0, 0);
        assert_true(slept_through > 0);
    } else {
        assert_int_equal(slept_through, 0);
        assert_true(kicks(fab[0]) - kicks0 >= KICKS_WANTED);
    }
    fabrics_down();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sleeper_woken_when_its_answer_is_taken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
