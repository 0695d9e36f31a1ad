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

/* Every message a node put on the wire: active messages (requests and
 * replies) and one-sided operations. */
static void counters(dsm_harness_t *c, double *msgs, double *bytes)
{
    *msgs = *bytes = 0;
    for (int i = 0; i < c->n; i++) {
        dsm_stats_t st;
        dsm_node_stats(c->nodes[i], &st);
        *msgs += (double)(st.am_sent + st.gets + st.puts + st.atomics);
        *bytes += (double)(st.am_bytes_sent + st.bytes_read + st.bytes_written);
    }
}

int kv5_run_nodes(dsm_harness_t *c, int (*fn)(void *ctx, int i), void *ctx, kv5_result_t *out)
{
    node_job_t jobs[KV5_NODES];
    pthread_t th[KV5_NODES];
    double m0, b0, m1, b1;
    counters(c, &m0, &b0);
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
    counters(c, &m1, &b1);
    out->seconds = (double)longest / 1e9;
    out->msgs = m1 - m0;
    out->bytes = b1 - b0;
    return rc;
}
