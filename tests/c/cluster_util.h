/* The C tests' helpers over the in-process cluster they share with the
 * benchmarks (csrc/harness/cluster.h): a test region standing in for the
 * heap's partition on runtime-only nodes, starting nodes with or without
 * it, and cmocka group fixtures. */
#ifndef DSM_TESTS_CLUSTER_UTIL_H
#define DSM_TESTS_CLUSTER_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dsm/sdk.h"
#include "harness/cluster.h"
#include "runtime/internal.h"

/* A runtime-only node's stand-in for a partition, offered the way the heap
 * offers its partition (dsm_node_offer_region): a region of partition_size
 * bytes kept in a module slot, published under TEST_REGION_KEY and added as
 * region TEST_REGION of every member that offered one. */
enum { TEST_REGION = 0, TEST_MODULE = DSM_NODE_MAX_MODULES - 1 };
#define TEST_REGION_KEY "test.region"

typedef struct test_region {
    dsm_node_t *node;
    dsm_region_t *region;
    dsm_region_offer_t offer;
    int joins;      /* join-hook calls seen */
} test_region_t;

static inline void test_region_free(void *state)
{
    test_region_t *t = state;
    if (t->region) dsm_fabric_region_unregister(t->region);
    free(t);
}

static inline void test_region_seen(void *ctx, uint32_t rank, uint64_t size)
{
    (void)rank;
    (void)size;
    test_region_t *t = ctx;
    __atomic_fetch_add(&t->joins, 1, __ATOMIC_RELAXED);
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
    if (size && (st = dsm_fabric_region_alloc(dsm_node_fabric(node), size, &t->region)) != DSM_OK) return st;
    t->offer = (dsm_region_offer_t){.key = TEST_REGION_KEY, .region_id = TEST_REGION, .seen = test_region_seen, .ctx = t};
    return dsm_node_offer_region(node, &t->offer, t->region);
}

/* The test region's local memory (NULL if none). */
static inline void *test_region_base(dsm_node_t *node)
{
    test_region_t *t = dsm_node_module(node, TEST_MODULE);
    return t && t->region ? dsm_fabric_region_base(t->region) : NULL;
}

static inline dsm_status_t test_region_hook(void *ctx, int i, dsm_node_t *node)
{
    (void)ctx;
    (void)i;
    return test_region_attach(node);
}

static inline dsm_status_t test_bare_hook(void *ctx, int i, dsm_node_t *node)
{
    (void)ctx;
    (void)i;
    (void)node;
    return DSM_OK;
}

/* What a node attaches: with_heap 1 every module (dsm_start); 0 the test
 * region alone (a runtime-only node); -1 nothing (nothing published). */
static inline dsm_harness_attach_t test_attach(int with_heap)
{
    return with_heap > 0 ? NULL : with_heap == 0 ? test_region_hook : test_bare_hook;
}

/* One node of cfg, attaching as with_heap says. */
static inline dsm_status_t test_node_start(const dsm_node_config_t *cfg, int with_heap, dsm_node_t **out)
{
    dsm_harness_t h = {.attach = test_attach(with_heap)};
    return dsm_harness_node_start(&h, cfg, 0, out);
}

/* A client of c (no heap), once it sees c's n daemons ready. */
static inline dsm_status_t test_client_start(const dsm_harness_t *c, dsm_node_t **out)
{
    dsm_node_config_t cfg;
    dsm_harness_node_config(c, &cfg, (uint32_t)DSM_RANK_ANY);
    cfg.kind = DSM_MEMBER_CLIENT;
    dsm_status_t st = test_node_start(&cfg, 0, out);
    if (st == DSM_OK) st = dsm_node_wait_daemons(*out, (uint32_t)c->n, 5000);
    return st;
}

/* Start c's coordinator and n nodes, attaching as with_heap says. */
static inline dsm_status_t test_cluster_start(dsm_harness_t *c, int n, int with_heap)
{
    c->attach = test_attach(with_heap);
    return dsm_harness_start(c, n);
}

/* cmocka group fixtures over a test cluster: n nodes with heaps started
 * into c and handed to the tests as their state; stopped after. The state
 * is set before the start, so that the teardown, which cmocka runs after a
 * failed setup too, stops what a start that failed part way left running. */
static inline int test_cluster_setup(void **state, dsm_harness_t *c, int n)
{
    *state = c;
    return test_cluster_start(c, n, 1) == DSM_OK ? 0 : -1;
}

static inline int test_cluster_teardown(void **state)
{
    dsm_harness_stop(*state);
    return 0;
}

#endif
