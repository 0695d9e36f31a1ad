/* Test helper: a coordinator and N nodes in this process. */
#ifndef DSM_TESTS_CLUSTER_UTIL_H
#define DSM_TESTS_CLUSTER_UTIL_H

#include <stdio.h>
#include "dsm/dsm.h"

enum { TEST_MAX_NODES = 8 };

typedef struct test_cluster {
    dsm_transport_t transport;
    dsm_coord_t *coord;
    char coordinator[64];
    int n;
    dsm_node_t *nodes[TEST_MAX_NODES];
} test_cluster_t;

#define TEST_SECRET "cluster-test-secret"

static inline void test_node_config(test_cluster_t *c, dsm_node_config_t *cfg, int rank)
{
    dsm_node_config_init(cfg);
    cfg->coordinator = c->coordinator;
    cfg->secret = TEST_SECRET;
    cfg->rank = rank;
    cfg->transport = c->transport;
    cfg->net_device = c->transport == DSM_TRANSPORT_TCP ? "lo" : NULL;
    cfg->partition_size = 16u << 20;
    cfg->heartbeat_ms = 100;
    cfg->peer_timeout_ms = 1500;
    cfg->op_timeout_ms = 3000;
}

/* One node: with_heap attaches the heap (dsm_start), else runtime only. */
static inline dsm_status_t test_node_start(const dsm_node_config_t *cfg, int with_heap, dsm_node_t **out)
{
    if (with_heap) return dsm_start(cfg, out);
    dsm_status_t st = dsm_node_create(cfg, out);
    if (st == DSM_OK && (st = dsm_node_join(*out)) != DSM_OK) {
        dsm_node_destroy(*out);
        *out = NULL;
    }
    return st;
}

/* Start a coordinator and n nodes; with_heap attaches the heap (dsm_start). */
static inline dsm_status_t test_cluster_start(test_cluster_t *c, int n, int with_heap)
{
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = TEST_SECRET, .peer_timeout_ms = 1500,
                             .transport = c->transport};
    dsm_status_t st = dsm_coord_start(&cc, &c->coord);
    if (st != DSM_OK) return st;
    snprintf(c->coordinator, sizeof c->coordinator, "127.0.0.1:%u", dsm_coord_port(c->coord));
    for (int i = 0; i < n; i++) {
        dsm_node_config_t cfg;
        test_node_config(c, &cfg, i);
        if ((st = test_node_start(&cfg, with_heap, &c->nodes[i])) != DSM_OK) return st;
        c->n = i + 1;
    }
    for (int i = 0; i < n; i++)
        if ((st = dsm_node_wait_daemons(c->nodes[i], (uint32_t)n, 5000)) != DSM_OK) return st;
    return DSM_OK;
}

static inline void test_cluster_stop(test_cluster_t *c)
{
    for (int i = 0; i < c->n; i++) dsm_node_destroy(c->nodes[i]);
    dsm_coord_stop(c->coord);
    c->n = 0;
    c->coord = NULL;
}

#endif
