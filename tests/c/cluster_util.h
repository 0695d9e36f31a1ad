/* Test helper: a coordinator and N nodes in this process; for runtime-only
 * nodes, a test region standing in for the heap's partition. */
#ifndef DSM_TESTS_CLUSTER_UTIL_H
#define DSM_TESTS_CLUSTER_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dsm/sdk.h"
#include "runtime/internal.h"

enum { TEST_MAX_NODES = 8 };

typedef struct test_cluster {
    dsm_transport_t transport;
    dsm_coord_t *coord;
    char coordinator[64];
    int n;
    dsm_node_t *nodes[TEST_MAX_NODES];
    uint32_t op_timeout_ms;     /* 0: 3000; longer for tests that load the machine */
    uint32_t peer_timeout_ms;   /* 0: 1500 */
    const char *chaos;          /* the nodes' chaos spec (dsm_node_config_t.chaos); NULL: $DSM_CHAOS */
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
    cfg->peer_timeout_ms = c->peer_timeout_ms ? c->peer_timeout_ms : 1500;
    cfg->op_timeout_ms = c->op_timeout_ms ? c->op_timeout_ms : 3000;
    cfg->chaos = c->chaos;
}

/* A runtime-only node's stand-in for a partition, built on the runtime's
 * own API the way the heap builds its partition: a region of
 * partition_size bytes kept in a module slot, published at join as
 * {base, size, key} under TEST_REGION_KEY, and added as region TEST_REGION
 * of every member that published one. */
enum { TEST_REGION = 0, TEST_MODULE = DSM_NODE_MAX_MODULES - 1 };
#define TEST_REGION_KEY "test.region"

typedef struct test_region {
    dsm_node_t *node;
    dsm_region_t *region;
    int joins;      /* join-hook calls seen */
} test_region_t;

static inline void test_region_free(void *state)
{
    test_region_t *t = state;
    if (t->region) dsm_fabric_region_unregister(t->region);
    free(t);
}

static inline dsm_status_t test_region_join(void *ctx, uint32_t rank)
{
    test_region_t *t = ctx;
    static _Thread_local uint8_t v[DSM_NODE_MAX_VALUE_BYTES];
    size_t len = 0;
    __atomic_fetch_add(&t->joins, 1, __ATOMIC_RELAXED);
    if (dsm_node_peer_value(t->node, rank, TEST_REGION_KEY, v, sizeof v, &len) != DSM_OK) return DSM_OK;
    if (len <= 16) return DSM_ERR_PROTO;
    uint64_t base, size;
    memcpy(&base, v, 8);   /* one process: host byte order */
    memcpy(&size, v + 8, 8);
    return dsm_fabric_remote_region_add(dsm_node_fabric(t->node), rank, TEST_REGION, base, size, v + 16, len - 16);
}

static inline dsm_status_t test_region_attach(dsm_node_t *node)
{
    uint64_t size = dsm_node_config(node)->partition_size;
    test_region_t *t = calloc(1, sizeof *t);
    if (!t) return DSM_ERR_NOMEM;
    t->node = node;
    dsm_status_t st = dsm_node_set_module(node, TEST_MODULE, t, test_region_free);
    if (st != DSM_OK) {
        free(t);
        return st;
    }
    if ((st = dsm_node_on_peer_join(node, test_region_join, t)) != DSM_OK || size == 0) return st;
    if ((st = dsm_fabric_region_alloc(dsm_node_fabric(node), size, &t->region)) != DSM_OK) return st;
    const void *key;
    size_t key_len;
    if ((st = dsm_fabric_region_key(t->region, &key, &key_len)) != DSM_OK) return st;
    uint8_t *v = malloc(16 + key_len);
    if (!v) return DSM_ERR_NOMEM;
    uint64_t base = (uint64_t)(uintptr_t)dsm_fabric_region_base(t->region);
    memcpy(v, &base, 8);
    memcpy(v + 8, &size, 8);
    memcpy(v + 16, key, key_len);
    st = dsm_node_publish(node, TEST_REGION_KEY, v, 16 + key_len);
    free(v);
    return st;
}

/* The test region's local memory (NULL if none). */
static inline void *test_region_base(dsm_node_t *node)
{
    test_region_t *t = dsm_node_module(node, TEST_MODULE);
    return t && t->region ? dsm_fabric_region_base(t->region) : NULL;
}

/* One node: with_heap attaches the heap (dsm_start); 0 gives a runtime-only
 * node with the test region; -1 a bare runtime node (nothing attached,
 * nothing published). */
static inline dsm_status_t test_node_start(const dsm_node_config_t *cfg, int with_heap, dsm_node_t **out)
{
    if (with_heap > 0) return dsm_start(cfg, out);
    dsm_status_t st = dsm_node_create(cfg, out);
    if (st == DSM_OK && with_heap == 0 && (st = test_region_attach(*out)) != DSM_OK) {
        dsm_node_destroy(*out);
        *out = NULL;
        return st;
    }
    if (st == DSM_OK && (st = dsm_node_join(*out)) != DSM_OK) {
        dsm_node_destroy(*out);
        *out = NULL;
    }
    return st;
}

/* Start a coordinator and n nodes; with_heap attaches the heap (dsm_start). */
static inline dsm_status_t test_cluster_start(test_cluster_t *c, int n, int with_heap)
{
    dsm_coord_config_t cc = {.bind = "127.0.0.1:0", .secret = TEST_SECRET,
                             .peer_timeout_ms = c->peer_timeout_ms ? c->peer_timeout_ms : 1500,
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

/* cmocka group fixtures over a test cluster: n nodes with heaps started
 * into c and handed to the tests as their state; stopped after. */
static inline int test_cluster_setup(void **state, test_cluster_t *c, int n)
{
    if (test_cluster_start(c, n, 1) != DSM_OK)
        return -1;
    *state = c;
    return 0;
}

static inline int test_cluster_teardown(void **state)
{
    test_cluster_stop(*state);
    return 0;
}

#endif
