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

/* Start c's coordinator and n nodes, attaching as with_heap says. */
static inline dsm_status_t test_cluster_start(dsm_harness_t *c, int n, int with_heap)
{
    c->attach = test_attach(with_heap);
    return dsm_harness_start(c, n);
}

/* cmocka group fixtures over a test cluster: n nodes with heaps started
 * into c and handed to the tests as their state; stopped after. */
static inline int test_cluster_setup(void **state, dsm_harness_t *c, int n)
{
    if (test_cluster_start(c, n, 1) != DSM_OK)
        return -1;
    *state = c;
    return 0;
}

static inline int test_cluster_teardown(void **state)
{
    dsm_harness_stop(*state);
    return 0;
}

#endif
