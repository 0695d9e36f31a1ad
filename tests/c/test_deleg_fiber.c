/* Tests of the fiber layer of csrc/deleg: context switch, FIFO order, stack
 * reuse, callee-saved state across switches, and the stack guard page. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deleg/fiber.h"

static dsm_sched_t sched;
static char trace[64];
static size_t tlen;

static void tracer(void *arg)
{
    char c = (char)(intptr_t)arg;
    for (int i = 0; i < 3; i++) {
        trace[tlen++] = c;
        dsm_sched_yield(&sched);
    }
}

static void test_fifo_switch(void **state)
{
    (void)state;
    dsm_sched_init(&sched, 64 * 1024);
    tlen = 0;
    assert_int_equal(dsm_sched_spawn(&sched, tracer, (void *)(intptr_t)'a'), DSM_OK);
    assert_int_equal(dsm_sched_spawn(&sched, tracer, (void *)(intptr_t)'b'), DSM_OK);
    assert_int_equal(dsm_sched_spawn(&sched, tracer, (void *)(intptr_t)'c'), DSM_OK);
    while (sched.ready) dsm_sched_run(&sched, sched.ready);
    trace[tlen] = 0;
    assert_string_equal(trace, "abcabcabc");
    assert_int_equal(sched.live, 0);
    dsm_sched_fini(&sched);
}

/* Floating point and callee-saved registers survive switches. */
static double fp_result[2];
static void fp_fiber(void *arg)
{
    int id = (int)(intptr_t)arg;
    volatile double acc = id + 0.5;
    unsigned long a = id * 3u, b = id * 7u, c = id * 11u;
    for (int i = 0; i < 100; i++) {
        acc = acc * 1.0001 + 0.25;
        a += b;
        b ^= c;
        c += a;
        dsm_sched_yield(&sched);
    }
    fp_result[id] = acc + (double)((a + b + c) % 1000);
}

static void test_registers(void **state)
{
    (void)state;
    double expect[2];
    for (int id = 0; id < 2; id++) {
        double acc = id + 0.5;
        unsigned long a = id * 3u, b = id * 7u, c = id * 11u;
        for (int i = 0; i < 100; i++) {
            acc = acc * 1.0001 + 0.25;
            a += b;
            b ^= c;
            c += a;
        }
        expect[id] = acc + (double)((a + b + c) % 1000);
    }
    dsm_sched_init(&sched, 64 * 1024);
    dsm_sched_spawn(&sched, fp_fiber, (void *)0);
    dsm_sched_spawn(&sched, fp_fiber, (void *)1);
    while (sched.ready) dsm_sched_run(&sched, sched.ready);
    assert_true(fp_result[0] == expect[0]);
    assert_true(fp_result[1] == expect[1]);
    dsm_sched_fini(&sched);
}

static int counter;
static void bump(void *arg)
{
    (void)arg;
    counter++;
}

static void test_many_and_reuse(void **state)
{
    (void)state;
    dsm_sched_init(&sched, 16 * 1024);
    counter = 0;
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < 200; i++) assert_int_equal(dsm_sched_spawn(&sched, bump, NULL), DSM_OK);
        while (sched.ready) dsm_sched_run(&sched, sched.ready);
    }
    assert_int_equal(counter, 50 * 200);
    assert_true(sched.free_count <= 200); /* stacks were reused, not leaked */
    dsm_sched_fini(&sched);
}

static volatile char sink;
static volatile int depth_limit = 1 << 30; /* opaque to the compiler */
static int recurse(int n)
{
    char buf[512];
    memset(buf, n, sizeof buf);
    sink = buf[n % 512];
    __asm__ __volatile__("" : : "r"(buf) : "memory");
    if (n > depth_limit) return 0;
    return recurse(n + 1) + buf[n % 512];
}

static void overflow_fiber(void *arg)
{
    (void)arg;
    recurse(0);
}

/* A fiber that overflows its stack hits the guard page: the child process
 * dies of SIGSEGV instead of silently corrupting memory. */
static void test_stack_guard(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        dsm_sched_t s;
        dsm_sched_init(&s, 32 * 1024);
        dsm_sched_spawn(&s, overflow_fiber, NULL);
        dsm_sched_run(&s, 1);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGSEGV);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_switch),
        cmocka_unit_test(test_registers),
        cmocka_unit_test(test_many_and_reuse),
        cmocka_unit_test(test_stack_guard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
