/* dsm-bench-kv5's timed phase: one thread per node running its stream,
 * the fabric's counters summed over the nodes around it (see kv5.h). */
#include "bench/kv5/kv5.h"

#include <pthread.h>
#include <stdio.h>

#include "dsm/clock.h"

typedef struct node_job {
    int (*fn)(void *ctx, int i);
    void *ctx;
    int i, rc;
    uint64_t ns;
} node_job_t;

static void *node_main(void *arg)
{
    node_job_t *j = arg;
    uint64_t t0 = dsm_now_ns();
    j->rc = j->fn(j->ctx, j->i);
    j->ns = dsm_now_ns() - t0;
    return NULL;
}

/* What the nodes sent: active messages (requests, replies, posts, and
 * over tcp the emulated one-sided operations' messages), one-sided
 * operations issued, their bytes, and the fabric's sleeps and wake-ups. */
static void counters(dsm_harness_t *c, double v[5])
{
    v[0] = v[1] = v[2] = v[3] = v[4] = 0;
    for (int i = 0; i < c->n; i++) {
        dsm_stats_t st;
        dsm_node_stats(c->nodes[i], &st);
        v[0] += (double)st.am_sent;
        v[1] += (double)st.am_bytes_sent;
        v[2] += (double)(st.gets + st.puts + st.atomics);
        v[3] += (double)(st.bytes_read + st.bytes_written);
        v[4] += (double)(st.wait_sleeps + st.progress_wakeups);
    }
}

int kv5_run_nodes(dsm_harness_t *c, int (*fn)(void *ctx, int i), void *ctx, kv5_result_t *out)
{
    node_job_t jobs[KV5_NODES];
    pthread_t th[KV5_NODES];
    double v0[5], v1[5];
    counters(c, v0);
    for (int i = 0; i < KV5_NODES; i++) {
        jobs[i] = (node_job_t){.fn = fn, .ctx = ctx, .i = i};
        if (pthread_create(&th[i], NULL, node_main, &jobs[i]) != 0) {
            fprintf(stderr, "dsm-bench-kv5: thread\n");
            for (int k = 0; k < i; k++) pthread_join(th[k], NULL);
            return -1;
        }
    }
    int rc = 0;
    uint64_t longest = 0;
    for (int i = 0; i < KV5_NODES; i++) {
        pthread_join(th[i], NULL);
        rc |= jobs[i].rc;
        if (jobs[i].ns > longest) longest = jobs[i].ns;
    }
    counters(c, v1);
    out->seconds = (double)longest / 1e9;
    out->am = v1[0] - v0[0];
    out->am_bytes = v1[1] - v0[1];
    out->onesided = v1[2] - v0[2];
    out->onesided_bytes = v1[3] - v0[3];
    out->wakeups = v1[4] - v0[4];
    return rc;
}
