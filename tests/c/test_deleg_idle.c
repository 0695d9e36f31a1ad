/* Tests of dsm_deleg_idle_epoll and dsm_deleg_idle_wait (csrc/deleg/rt.c):
 * a runtime thread that blocks in its epoll set (or on its descriptor) with
 * no timeout is woken by the response to its request in flight, and by its
 * own descriptor, whichever way it waits
 * (idle_progress: sleeping at once, after a linger, or after an adaptive
 * one); the runtime's wake-up is never among the events it returns;
 * outside the runtime it is epoll_wait; a runtime refuses a way of waiting
 * that is not one. Each thread's counters (dsm_deleg_counters) name the
 * one request handed and served.
 * A wake-up that never comes hangs the test, which ctest's timeout fails:
 * no timing is asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "dsm/deleg.h"

enum { USER_TOKEN = 42 };

static struct {
    dsm_deleg_trust_t on1;    /* a counter entrusted to thread 1 */
    int user_fd;              /* an eventfd in thread 0's epoll set */
    atomic_int phase;         /* 1: thread 0 waits on its own descriptor */
    atomic_int answered;      /* the continuation of thread 0's request ran */
    atomic_int errors;
    int plain;                /* thread 0 waits with dsm_deleg_idle_wait, not _idle_epoll */
    int woke_by_response;     /* what the wait for the response returned */
    int woke_by_fd;           /* ... and the wait for the descriptor */
    uint64_t token;           /* the event's data in the second wait */
    dsm_deleg_counters_t counted[2]; /* each thread's, as its main function ends */
} g;

static void add_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)env, (void)args, (void)args_len;
    uint64_t *c = prop;
    uint64_t old = (*c)++;
    dsm_deleg_return(ret, &old, sizeof old);
}

static void on_answer(void *arg, dsm_status_t st, const void *data, size_t len)
{
    (void)arg, (void)data, (void)len;
    if (st != DSM_OK) g.errors++;
    g.answered = 1;
}

static int readable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    return poll(&pfd, 1, 0) > 0;
}

/* Thread 0's waits with dsm_deleg_idle_wait, which says nothing of what
 * ended them: each loop ends only if its wake-up comes. */
static void idle_wait_main(void)
{
    if (dsm_deleg_apply_then(&g.on1, add_fn, NULL, 0, NULL, 0, sizeof(uint64_t), on_answer, NULL) != DSM_OK)
        g.errors++;
    dsm_deleg_yield(); /* publishes it */
    while (!g.answered) {
        dsm_deleg_idle_wait(-1, -1);
        dsm_deleg_yield(); /* runs the continuation */
    }
    atomic_store(&g.phase, 1);
    while (!readable(g.user_fd)) dsm_deleg_idle_wait(g.user_fd, -1);
}

static void idle_thread(unsigned worker);

static void idle_main(void *arg, unsigned worker)
{
    (void)arg;
    idle_thread(worker);
    dsm_deleg_counters(&g.counted[worker]);
}

static void idle_thread(unsigned worker)
{
    if (worker == 0 && g.plain) {
        idle_wait_main();
        return;
    }
    if (worker == 1) {
        /* serve thread 0's request (between yields), then make its own
         * descriptor readable once it waits on that */
        while (!atomic_load(&g.phase)) dsm_deleg_yield();
        uint64_t one = 1;
        if (write(g.user_fd, &one, sizeof one) != sizeof one) g.errors++;
        return;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = USER_TOKEN}, evs[8];
    epoll_ctl(ep, EPOLL_CTL_ADD, g.user_fd, &ev);
    /* a request in flight to thread 1: its response ends the wait */
    if (dsm_deleg_apply_then(&g.on1, add_fn, NULL, 0, NULL, 0, sizeof(uint64_t), on_answer, NULL) != DSM_OK)
        g.errors++;
    dsm_deleg_yield(); /* publishes it */
    g.woke_by_response = dsm_deleg_idle_epoll(ep, evs, 8, -1);
    while (!g.answered) dsm_deleg_yield();
    /* nothing outstanding: only the descriptor ends the wait */
    atomic_store(&g.phase, 1);
    int n;
    do n = dsm_deleg_idle_epoll(ep, evs, 8, -1);
    while (n == 0); /* the runtime's wake-ups are not events; a stale one may end a wait */
    g.woke_by_fd = n;
    g.token = n > 0 ? evs[0].data.u64 : 0;
    close(ep);
}

/* A long linger, so that the waits end in the linger where a core is
 * spare, and in the sleep after it where the host is crowded: both must
 * see the wake-ups. */
static void wakes_on_response_and_fd(dsm_progress_mode_t mode, int plain)
{
    dsm_deleg_config_t cfg = {.threads = 2, .idle_sleep = 1, .idle_progress = mode, .linger_us = 200000};
    dsm_deleg_rt_t *rt = NULL;
    assert_int_equal(dsm_deleg_rt_create(&cfg, &rt), DSM_OK);
    memset(&g, 0, sizeof g);
    g.plain = plain;
    uint64_t counter = 0;
    assert_int_equal(dsm_deleg_entrust(rt, 1, &counter, NULL, 0, &g.on1), DSM_OK);
    g.user_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    assert_true(g.user_fd >= 0);
    assert_int_equal(dsm_deleg_rt_run(rt, idle_main, NULL), DSM_OK);
    assert_int_equal(g.errors, 0);
    assert_int_equal(counter, 1);
    assert_true(g.answered && g.phase);
    /* thread 0 handed its one request to thread 1, which served it */
    assert_int_equal(g.counted[0].handed, 1);
    assert_int_equal(g.counted[0].served, 0);
    assert_int_equal(g.counted[1].handed, 0);
    assert_int_equal(g.counted[1].served, 1);
    if (!plain) {
        assert_int_equal(g.woke_by_response, 0); /* the wake-up is not returned */
        assert_int_equal(g.woke_by_fd, 1);
        assert_int_equal(g.token, USER_TOKEN);
    }
    close(g.user_fd);
    dsm_deleg_trust_drop(&g.on1);
    dsm_deleg_rt_destroy(rt);
}

static void test_idle_epoll_wakes_blocking(void **state)
{
    (void)state;
    wakes_on_response_and_fd(DSM_PROGRESS_BLOCKING, 0);
}

static void test_idle_wait_wakes_blocking(void **state)
{
    (void)state;
    wakes_on_response_and_fd(DSM_PROGRESS_BLOCKING, 1);
}

static void test_idle_epoll_wakes_after_a_linger(void **state)
{
    (void)state;
    wakes_on_response_and_fd(DSM_PROGRESS_HYBRID, 0);
}

static void test_idle_wait_wakes_after_a_linger(void **state)
{
    (void)state;
    wakes_on_response_and_fd(DSM_PROGRESS_HYBRID, 1);
}

static void test_idle_epoll_wakes_adaptive(void **state)
{
    (void)state;
    wakes_on_response_and_fd(DSM_PROGRESS_ADAPTIVE, 0);
}

static void test_idle_wait_wakes_adaptive(void **state)
{
    (void)state;
    wakes_on_response_and_fd(DSM_PROGRESS_ADAPTIVE, 1);
}

static void test_idle_epoll_outside_the_runtime(void **state)
{
    (void)state;
    int ep = epoll_create1(EPOLL_CLOEXEC), fd = eventfd(1, EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = USER_TOKEN}, evs[4];
    assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
    assert_int_equal(dsm_deleg_idle_epoll(ep, evs, 4, -1), 1);
    assert_int_equal(evs[0].data.u64, USER_TOKEN);
    dsm_deleg_counters_t none = {1, 1, 1};
    dsm_deleg_counters(&none);   /* not a runtime thread: nothing counted */
    assert_true(none.handed == 0 && none.served == 0 && none.wakeups == 0);
    close(fd);
    close(ep);
}

static void test_idle_progress_checked(void **state)
{
    (void)state;
    dsm_deleg_rt_t *rt = NULL;
    dsm_deleg_config_t busy = {.threads = 1, .idle_sleep = 1, .idle_progress = DSM_PROGRESS_BUSY};
    assert_int_equal(dsm_deleg_rt_create(&busy, &rt), DSM_ERR_INVALID);
    dsm_deleg_config_t unknown = {.threads = 1, .idle_sleep = 1, .idle_progress = (dsm_progress_mode_t)99};
    assert_int_equal(dsm_deleg_rt_create(&unknown, &rt), DSM_ERR_INVALID);
    dsm_deleg_config_t long_linger = {.threads = 1, .idle_sleep = 1, .idle_progress = DSM_PROGRESS_HYBRID,
                                      .linger_us = 2000000};
    assert_int_equal(dsm_deleg_rt_create(&long_linger, &rt), DSM_ERR_INVALID);
    assert_null(rt);
    dsm_deleg_config_t auto_mode = {.threads = 1, .idle_sleep = 1, .idle_progress = DSM_PROGRESS_AUTO};
    assert_int_equal(dsm_deleg_rt_create(&auto_mode, &rt), DSM_OK);
    dsm_deleg_rt_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_epoll_wakes_blocking),
        cmocka_unit_test(test_idle_wait_wakes_blocking),
        cmocka_unit_test(test_idle_epoll_wakes_after_a_linger),
        cmocka_unit_test(test_idle_wait_wakes_after_a_linger),
        cmocka_unit_test(test_idle_epoll_wakes_adaptive),
        cmocka_unit_test(test_idle_wait_wakes_adaptive),
        cmocka_unit_test(test_idle_progress_checked),
        cmocka_unit_test(test_idle_epoll_outside_the_runtime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
