/* Private: the sharded key-value store's memcached-level operation, used by
 * the memcached front end (mc_server.c). The trustee executes the whole
 * command on its shard and returns the finished protocol text, so the socket
 * worker only copies bytes into the connection's ordered response queue. */
#ifndef DSM_DELEG_KV_H
#define DSM_DELEG_KV_H

#include <stdint.h>

#include "dsm/deleg.h"

enum kv_op {
    KV_GET, KV_GETS, KV_SET, KV_ADD, KV_REPLACE, KV_APPEND, KV_PREPEND, KV_CAS,
    KV_DELETE, KV_INCR, KV_DECR, KV_TOUCH, KV_FLUSH,
};

typedef struct kv_env {
    uint64_t hash;     /* the key's hash: filled in by dsm_deleg_kv_mc_then */
    uint8_t op;
    uint8_t pad[3];
    uint32_t flags;
    int32_t exptime;
    uint32_t klen;     /* args = key then value */
    uint64_t num;      /* cas unique (KV_CAS) or delta (KV_INCR/DECR) */
} kv_env_t;

/* Apply one memcached operation to the key's shard; the continuation gets the
 * protocol response (e.g. "STORED\r\n", "VALUE k 0 1\r\nx\r\n" or empty for
 * a get miss). KV_FLUSH goes to every shard: then runs once per shard. */
dsm_status_t dsm_deleg_kv_mc_then(dsm_deleg_kv_t *kv, const kv_env_t *env, const void *key, const void *val,
                                  size_t vlen, dsm_deleg_then_fn then, void *cb_arg);
unsigned dsm_deleg_kv_shards(const dsm_deleg_kv_t *kv);
/* Items across shards, read racily for `stats`. */
uint64_t dsm_deleg_kv_approx_items(const dsm_deleg_kv_t *kv);

#endif
