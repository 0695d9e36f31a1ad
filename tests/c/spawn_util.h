/* Spawned functions and helpers the spawn tests share: an echo, a
 * function that runs until its stop flag is raised, and registering a
 * table of them. */
#ifndef TEST_SPAWN_UTIL_H
#define TEST_SPAWN_UTIL_H

#include <sched.h>
#include <string.h>

#include "dsm/clock.h"
#include "dsm/dsm.h"

/* How long a spawned function waits for its stop flag at most. */
enum { TEST_SPAWN_WAIT_MS = 60000 };

static inline dsm_status_t test_echo_fn(dsm_node_t *n, const void *args, size_t len, void *ret, size_t cap,
                                        size_t *ret_len)
{
    (void)n;
    if (len > cap) return DSM_ERR_TOO_BIG;
    memcpy(ret, args, len);
    *ret_len = len;
    return DSM_OK;
}

/* Runs until its stop flag is raised (a cancel, or the test's end), then
 * says so; TIMEOUT if nobody raised it within TEST_SPAWN_WAIT_MS. */
static inline dsm_status_t test_until_stopped_fn(dsm_node_t *n, const void *args, size_t len, void *ret,
                                                 size_t cap, size_t *ret_len)
{
    (void)n, (void)args, (void)len, (void)ret, (void)cap;
    *ret_len = 0;
    const dsm_stop_t *stop = dsm_spawn_stop();
    uint64_t deadline = dsm_now_ms() + TEST_SPAWN_WAIT_MS;
    while (!dsm_stop_requested(stop) && dsm_now_ms() < deadline) sched_yield();
    return dsm_stop_requested(stop) ? DSM_ERR_CANCELLED : DSM_ERR_TIMEOUT;
}

typedef struct test_fn_entry {
    const char *name;
    dsm_fn_t fn;
} test_fn_entry_t;

/* Registers each (a second registration of the same name is fine). */
static inline void test_register_fns(const test_fn_entry_t *fns, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dsm_status_t st = dsm_register(fns[i].name, fns[i].fn);
        if (st != DSM_OK && st != DSM_ERR_EXISTS) fail_msg("register %s: %s", fns[i].name, dsm_status_name(st));
    }
}

#endif
