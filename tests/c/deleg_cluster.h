/* Test helper: a harness cluster (cluster_util.h) whose nodes serve no
 * partition and each have a delegation runtime attached before the join,
 * as dsmd --deleg-threads starts them. */
#ifndef DSM_TESTS_DELEG_CLUSTER_H
#define DSM_TESTS_DELEG_CLUSTER_H

#include "cluster_util.h"
#include "deleg/internal.h"

typedef struct test_deleg_attach {
    const dsm_deleg_config_t *config;
    dsm_deleg_rt_t **rt;
} test_deleg_attach_t;

static inline dsm_status_t test_deleg_hook(void *ctx, int i, dsm_node_t *node)
{
    test_deleg_attach_t *d = ctx;
    dsm_status_t st = dsm_deleg_rt_create(d->config, &d->rt[i]);
    return st != DSM_OK ? st : dsm_deleg_attach(node, d->rt[i]);
}

/* Start c (its transport and timeouts as set; no partition; 10 s for every
 * node to see all n) with n nodes, node i's runtime made from config into
 * rt[i] (destroy each with dsm_deleg_rt_destroy before dsm_harness_stop). */
static inline dsm_status_t test_deleg_cluster_start(dsm_harness_t *c, int n, const dsm_deleg_config_t *config,
                                                    dsm_deleg_rt_t **rt)
{
    test_deleg_attach_t d = {.config = config, .rt = rt};
    c->partition_size = DSM_HARNESS_NO_PARTITION;
    c->wait_ms = 10000;
    c->attach = test_deleg_hook;
    c->ctx = &d;
    dsm_status_t st = dsm_harness_start(c, n);
    c->ctx = NULL;
    return st;
}

#endif
