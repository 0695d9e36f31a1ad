/* Tests of the sharded key-value store of csrc/apps (kv.c) on the
 * delegation runtime: puts and gets across trustees, asynchronous and
 * blocking, through the shards' growth. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "apps/kv.h"
#include "dsm/deleg.h"

static dsm_deleg_rt_t *mkrt(unsigned threads, unsigned dedicated)
{
    dsm_deleg_config_t cfg = {.threads = threads, .dedicated = dedicated, .stack_size = 64 * 1024};
    dsm_deleg_rt_t *rt = NULL;
    assert_int_equal(dsm_deleg_rt_create(&cfg, &rt), DSM_OK);
    return rt;
}

/* ---- the sharded store: puts and gets across trustees, through growth ---- */
#define KV_KEYS 20000u
struct kvt {
    dsm_kv_t *kv;
    unsigned done, inflight, wrong;
};

static void kvt_put_cb(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)ret;
    (void)len;
    struct kvt *k = arg;
    if (st != DSM_OK) k->wrong++;
    k->inflight--;
}

struct kvt_get {
    struct kvt *k;
    uint64_t key;
};
static void kvt_get_cb(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    struct kvt_get *g = arg;
    const uint8_t *r = ret;
    uint64_t want = g->key * 3 + 1, got = 0;
    if (st != DSM_OK || len != 9 || r[0] != 1) g->k->wrong++;
    else if (memcpy(&got, r + 1, 8), got != want) g->k->wrong++;
    g->k->inflight--;
    g->k->done++;
    free(g);
}

static void kvt_main(void *arg, unsigned worker)
{
    struct kvt *k = arg;
    if (worker != 0) return;
    /* 16 shards over both threads: half the requests go to the other one,
     * in batches with prefetch hints; the shards grow (rehash) meanwhile */
    for (uint64_t key = 0; key < KV_KEYS; key++) {
        uint64_t v = key * 3 + 1;
        k->inflight++;
        if (dsm_kv_put_then(k->kv, &key, 8, &v, 8, kvt_put_cb, k) != DSM_OK) k->wrong++;
        while (k->inflight > 256) dsm_deleg_yield();
    }
    while (k->inflight) dsm_deleg_yield();
    for (uint64_t key = 0; key < KV_KEYS; key++) {
        struct kvt_get *g = malloc(sizeof *g);
        g->k = k;
        g->key = key;
        k->inflight++;
        if (dsm_kv_get_then(k->kv, &key, 8, kvt_get_cb, g) != DSM_OK) k->wrong++;
        while (k->inflight > 256) dsm_deleg_yield();
    }
    while (k->inflight) dsm_deleg_yield();
    /* blocking forms, and a key never stored */
    uint64_t key = 77, v = 0, absent = KV_KEYS + 5;
    size_t vlen = sizeof v;
    if (dsm_kv_get(k->kv, &key, 8, &v, &vlen) != 1 || vlen != 8 || v != 77 * 3 + 1) k->wrong++;
    vlen = sizeof v;
    if (dsm_kv_get(k->kv, &absent, 8, &v, &vlen) != 0) k->wrong++;
    v = 5;
    if (dsm_kv_put(k->kv, &absent, 8, &v, 8) != DSM_OK) k->wrong++;
    vlen = sizeof v;
    v = 0;
    if (dsm_kv_get(k->kv, &absent, 8, &v, &vlen) != 1 || v != 5) k->wrong++;
}

static void test_kv_store_across_trustees(void **state)
{
    (void)state;
    dsm_deleg_rt_t *rt = mkrt(2, 0);
    struct kvt k = {0};
    assert_int_equal(dsm_kv_create(rt, 16, 0, 2, &k.kv), DSM_OK);
    assert_int_equal(dsm_deleg_rt_run(rt, kvt_main, &k), DSM_OK);
    assert_int_equal(k.wrong, 0);
    assert_int_equal(k.done, KV_KEYS);
    dsm_kv_destroy(k.kv);
    dsm_deleg_rt_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_store_across_trustees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
