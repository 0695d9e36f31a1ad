/* What chan's cluster tests share: 3 in-process nodes over shm and tcp,
 * with and without the chaos fabric (seed 7, every fault), a job per node
 * run on its own thread, and a comparison for medians. */
#ifndef DSM_TEST_CHAN_UTIL_H
#define DSM_TEST_CHAN_UTIL_H

#include <pthread.h>
#include <stdio.h>
#include <stdint.h>

#include "cluster_util.h"
#include "dsm/chan_sdk.h"
#include "dsm/clock.h"

enum { N = 3, T = 10000 /* ms: setup and each wait, generous for a loaded 2-core host */ };

static dsm_harness_t shm_cluster = {.transport = DSM_TRANSPORT_SHM, .op_timeout_ms = 20000,
                                      .peer_timeout_ms = 10000};
static dsm_harness_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP, .op_timeout_ms = 20000,
                                      .peer_timeout_ms = 10000};
/* Under the chaos fabric with a fixed seed, every fault on both fabrics. */
static dsm_harness_t chaos_shm = {.transport = DSM_TRANSPORT_SHM, .op_timeout_ms = 20000,
                                   .peer_timeout_ms = 10000, .chaos = "7:all"};
static dsm_harness_t chaos_tcp = {.transport = DSM_TRANSPORT_TCP, .op_timeout_ms = 20000,
                                   .peer_timeout_ms = 10000, .chaos = "7:all"};
static int setup_shm(void **state) { return test_cluster_setup(state, &shm_cluster, N); }
static int setup_tcp(void **state) { return test_cluster_setup(state, &tcp_cluster, N); }
static int setup_chaos_shm(void **state) { return test_cluster_setup(state, &chaos_shm, N); }
static int setup_chaos_tcp(void **state) { return test_cluster_setup(state, &chaos_tcp, N); }

typedef struct job {
    dsm_harness_t *c;
    int i;
    dsm_status_t st;
    uint64_t bad, count;
    void *shared;
    void *(*fn)(void *);
    char why[256];   /* the job thread's dsm_last_error when st is not DSM_OK */
} job_t;

/* Runs the job, then keeps its thread's last error (thread-local) for the
 * report. */
static void *job_main(void *arg)
{
    job_t *j = arg;
    j->fn(j);
    if (j->st != DSM_OK)
        snprintf(j->why, sizeof j->why, "%s", dsm_last_error());
    return NULL;
}

/* fn once per node, each on its own thread (creating an object waits for
 * the other participants, so they must create it concurrently). Every
 * node's outcome is printed before the first failing one is asserted. */
static void on_all(dsm_harness_t *c, void *(*fn)(void *), job_t *jobs, void *shared)
{
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (job_t){.c = c, .i = i, .shared = shared, .fn = fn};
        assert_int_equal(pthread_create(&th[i], NULL, job_main, &jobs[i]), 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++)
        if (jobs[i].st != DSM_OK || jobs[i].bad)
            print_error("node %d: %s (%llu bad, count %llu): %s\n", i, dsm_strerror(jobs[i].st),
                        (unsigned long long)jobs[i].bad, (unsigned long long)jobs[i].count, jobs[i].why);
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].st, DSM_OK);
        assert_int_equal(jobs[i].bad, 0);
    }
}

static inline int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#endif
