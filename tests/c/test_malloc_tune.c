/* The allocator setting for large messages (util/malloc_tune.h): a 1 MiB
 * message's buffer and the array its caller made for it, taken and freed
 * again and again, are faulted in once with it and every time without it
 * (the premise, checked too). Each case runs in a child of its own, whose
 * allocator no earlier test has moved. Under a sanitizer malloc is not
 * glibc's: the setting must then only be harmless. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsm/api.h"
#include "util/malloc_tune.h"

#if defined(DSM_ASAN) || defined(DSM_TSAN)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

enum { MESSAGE = 1 << 20, CYCLES = 20 };

static volatile unsigned char sink;

/* What a 1 MiB read does to the heap: the caller's array, the transport's
 * landing buffer, the copy from one to the other, both freed. */
static void message_cycle(void)
{
    unsigned char *volatile array = malloc(MESSAGE);
    unsigned char *volatile landing = malloc(MESSAGE + 97);
    assert_non_null(array);
    assert_non_null(landing);
    memset(landing, 7, MESSAGE + 97);
    memcpy(array, landing, MESSAGE);
    sink = array[MESSAGE / 2];
    free(landing);
    free(array);
}

/* Page faults in CYCLES cycles after a first, in a fresh child. */
static long faults_per_cycles(int tuned)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        if (tuned)
            dsm_malloc_keep_large_blocks();
        message_cycle();
        struct rusage before, after;
        getrusage(RUSAGE_SELF, &before);
        for (int i = 0; i < CYCLES; i++)
            message_cycle();
        getrusage(RUSAGE_SELF, &after);
        long faults = after.ru_minflt - before.ru_minflt;
        _exit(write(fd[1], &faults, sizeof faults) == sizeof faults ? 0 : 1);
    }
    close(fd[1]);
    long faults = -1;
    assert_int_equal(read(fd[0], &faults, sizeof faults), (ssize_t)sizeof faults);
    close(fd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return faults;
}

static void test_large_blocks_stay_mapped(void **state)
{
    (void)state;
    long untuned = faults_per_cycles(0), tuned = faults_per_cycles(1);
    print_message("page faults in %d cycles of a %d-byte message: %ld untuned, %ld tuned\n", CYCLES, MESSAGE,
                  untuned, tuned);
    if (SANITIZED) {
        assert_true(tuned >= 0);   /* the sanitizer's allocator: only harmless */
        return;
    }
    long pages = MESSAGE / sysconf(_SC_PAGESIZE);
    assert_true(untuned >= CYCLES * pages);   /* the premise: both blocks faulted in again each time */
    assert_true(tuned < pages);               /* with it: at most a stray page now and then */
}

static void test_twice_is_once(void **state)
{
    (void)state;
    dsm_malloc_keep_large_blocks();
    dsm_malloc_keep_large_blocks();
    void *p = malloc(MESSAGE);
    assert_non_null(p);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_large_blocks_stay_mapped),
        cmocka_unit_test(test_twice_is_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
