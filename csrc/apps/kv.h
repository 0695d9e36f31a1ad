/* The sharded key-value store on delegation (an application of the apps
 * layer, internal to it): shards entrusted to trustees, plain get/put for
 * tests and benchmarks, and the memcached-level operation used by the
 * memcached front end (mc_server.c). For the latter the trustee executes the
 * whole command on its shard and returns the finished protocol text, so the
 * socket worker only copies bytes into the connection's ordered response
 * queue. */
#ifndef DSM_APPS_KV_H
#define DSM_APPS_KV_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/deleg.h"

typedef struct dsm_kv dsm_kv_t;

/* shards tables entrusted round-robin to trustees [first, first+count). */
dsm_status_t dsm_kv_create(dsm_deleg_rt_t *rt, unsigned shards, unsigned first_trustee, unsigned trustee_count,
                           dsm_kv_t **out);
/* Drops the shards' trusts (call between runs, or from a runtime thread). */
void dsm_kv_destroy(dsm_kv_t *kv);
unsigned dsm_kv_shard_of(const dsm_kv_t *kv, const void *key, size_t klen);
/* Simple synchronous forms for tests and the benchmark (must be in a fiber). */
dsm_status_t dsm_kv_put(dsm_kv_t *kv, const void *key, size_t klen, const void *val, size_t vlen);
/* *vlen in: capacity, out: the value's length. Returns 1 if found, 0 if
 * not, or a negative dsm_status_t. */
int dsm_kv_get(dsm_kv_t *kv, const void *key, size_t klen, void *val, size_t *vlen);
/* Asynchronous forms. The get continuation sees one byte (1 found, 0 not)
 * followed by the value. */
dsm_status_t dsm_kv_get_then(dsm_kv_t *kv, const void *key, size_t klen, dsm_deleg_then_fn then, void *cb_arg);
dsm_status_t dsm_kv_put_then(dsm_kv_t *kv, const void *key, size_t klen, const void *val, size_t vlen,
                             dsm_deleg_then_fn then, void *cb_arg);

/* ---- the memcached-level operation ---- */

enum kv_op {
    KV_GET, KV_GETS, KV_SET, KV_ADD, KV_REPLACE, KV_APPEND, KV_PREPEND, KV_CAS,
    KV_DELETE, KV_INCR, KV_DECR, KV_TOUCH, KV_FLUSH, KV_GAT, KV_GATS,
    KV_MG, KV_MS, KV_MD, KV_MA, /* meta commands: an mc_meta_t travels between key and value */
    KV_EVICT,                   /* dsm_kv_evict_then */
};

typedef struct kv_env {
    uint64_t hash;     /* the key's hash: filled in by dsm_kv_mc_then */
    uint8_t op;
    uint8_t pad[3];
    uint32_t flags;
    int32_t exptime;
    uint32_t klen;     /* args = key then value */
    uint64_t num;      /* cas unique (KV_CAS) or delta (KV_INCR/DECR) */
} kv_env_t;

/* Apply one memcached operation to the key's shard (for KV_MG..KV_MA with
 * `meta`, an mc_meta_t, else NULL); the continuation gets the
 * protocol response (e.g. "STORED\r\n", "VALUE k 0 1\r\nx\r\n" or empty for
 * a get miss). KV_FLUSH goes to every shard: then runs once per shard. */
dsm_status_t dsm_kv_mc_then(dsm_kv_t *kv, const kv_env_t *env, const void *key, const void *meta,
                            const void *val, size_t vlen, dsm_deleg_then_fn then, void *cb_arg);
unsigned dsm_kv_shards(const dsm_kv_t *kv);
/* Items across shards, read racily for `stats`. */
uint64_t dsm_kv_approx_items(const dsm_kv_t *kv);

/* Bound the bytes of items of the whole store to `total` (0: no bound):
 * a store past it evicts its shard's least recently used items, and the
 * newest item is always kept. Call before any traffic. */
void dsm_kv_set_memory(dsm_kv_t *kv, size_t total);
/* Over the limit (a store whose shard had too little to evict): the
 * fullest shard, read racily, else -1. dsm_kv_evict_then has that shard
 * evict its least recently used items until the store is within the limit
 * (or the shard is empty); its continuation sees an empty reply. */
int dsm_kv_over_limit(const dsm_kv_t *kv);
dsm_status_t dsm_kv_evict_then(dsm_kv_t *kv, unsigned shard, dsm_deleg_then_fn then, void *cb_arg);
/* Item bytes held and items evicted, summed racily for `stats`. */
void dsm_kv_memory_stats(const dsm_kv_t *kv, uint64_t *bytes, uint64_t *evictions);

#endif
