/* The KV workload over coherent objects (see kvc.h): table layout, loading,
 * the zipfian operation streams and the checksum. A bucket object holds
 * `slots` entries of {key, value words}; key 0 marks an empty entry. */
#include "apps/kvc.h"

#include <stdlib.h>
#include <string.h>

#include "dsm/clock.h"
#include "dsm/mix.h"
#include "dsm/zipf.h"

struct dsm_kvc {
    const dsm_coh_ops_t *ops;
    const dsm_coh_lock_ops_t *locks;
    dsm_kvc_config_t cfg;
    uint64_t *bucket, *lock;
    unsigned nnodes;
    dsm_node_t **homes;
    double *cdf;            /* zipf: P(id <= i) */
    int guarded;            /* buckets live in their locks (decided once, at dsm_kvc_new) */
    dsm_kvc_record_t *history;   /* dsm_kvc_record: where each operation is written */
    uint64_t history_cap, history_len;
};

void dsm_kvc_config_default(dsm_kvc_config_t *cfg)
{
    *cfg = (dsm_kvc_config_t){.buckets = 64, .slots = 8, .keys = 256, .value_words = 4, .get_pct = 90,
                              .theta = 0.99, .seed = 42, .guard = 1, .timing = 0};
}

static uint64_t key_of(uint32_t id) { return dsm_hash64(id) | 1; }
static uint64_t initial_value(const dsm_kvc_t *t, uint32_t id) { return dsm_hash64(id ^ t->cfg.seed); }
static size_t words_per_entry(const dsm_kvc_config_t *cfg) { return 1 + (size_t)cfg->value_words; }
static size_t entry_words(const dsm_kvc_t *t) { return words_per_entry(&t->cfg); }
size_t dsm_kvc_bucket_bytes(const dsm_kvc_config_t *cfg) { return (size_t)cfg->slots * words_per_entry(cfg) * 8; }
static size_t bucket_bytes(const dsm_kvc_t *t) { return dsm_kvc_bucket_bytes(&t->cfg); }
/* Buckets live in their locks (Mutex<Box<T>>): bucket[b] is then the lock. */
static int guarded(const dsm_kvc_t *t) { return t->guarded; }

static dsm_status_t lock_borrow(dsm_kvc_t *t, dsm_node_t *node, uint32_t b, dsm_coh_ref_t *r)
{
    if (guarded(t))
        return t->ops->lock_borrow(node, t->lock[b], r);
    dsm_status_t st = t->locks->lock(node, t->lock[b]);
    if (st == DSM_OK && (st = t->ops->borrow(node, t->bucket[b], r)) != DSM_OK)
        (void)t->locks->unlock(node, t->lock[b]);
    return st;
}
static dsm_status_t unlock_release(dsm_kvc_t *t, dsm_node_t *node, uint32_t b, dsm_coh_ref_t *r)
{
    if (guarded(t))
        return t->ops->unlock_release(node, r);
    dsm_status_t st = t->ops->release(node, r), us = t->locks->unlock(node, t->lock[b]);
    return st != DSM_OK ? st : us;
}
static dsm_status_t lock_borrow_mut(dsm_kvc_t *t, dsm_node_t *node, uint32_t b, dsm_coh_mut_t *m)
{
    if (guarded(t))
        return t->ops->lock_borrow_mut(node, t->lock[b], m);
    dsm_status_t st = t->locks->lock(node, t->lock[b]);
    if (st == DSM_OK && (st = t->ops->borrow_mut(node, t->bucket[b], m)) != DSM_OK)
        (void)t->locks->unlock(node, t->lock[b]);
    return st;
}
static dsm_status_t unlock_release_mut(dsm_kvc_t *t, dsm_node_t *node, uint32_t b, dsm_coh_mut_t *m)
{
    if (guarded(t))
        return t->ops->unlock_release_mut(node, m);
    dsm_status_t st = t->ops->release_mut(node, m), us = t->locks->unlock(node, t->lock[b]);
    return st != DSM_OK ? st : us;
}

dsm_status_t dsm_kvc_drop_bucket(dsm_kvc_t *t, dsm_node_t *node, uint32_t b)
{
    if (b >= t->cfg.buckets)
        return DSM_ERR_INVALID;
    dsm_status_t st = DSM_OK;
    if (t->bucket[b] && !guarded(t))   /* a guarded bucket goes with its lock */
        st = t->ops->drop(node, t->bucket[b]);
    if (t->lock[b])
        t->locks->lock_free(node, t->lock[b]);
    t->bucket[b] = t->lock[b] = 0;
    return st;
}

void dsm_kvc_destroy(dsm_kvc_t *t)
{
    if (t == NULL)
        return;
    for (uint32_t b = 0; t->homes && t->bucket && t->lock && b < t->cfg.buckets; b++)
        (void)dsm_kvc_drop_bucket(t, t->homes[b % t->nnodes], b);
    free(t->bucket);
    free(t->lock);
    free(t->homes);
    free(t->cdf);
    free(t);
}

dsm_status_t dsm_kvc_new(const dsm_coh_ops_t *ops, const dsm_coh_lock_ops_t *locks, const dsm_kvc_config_t *cfg,
                         dsm_kvc_t **out)
{
    *out = NULL;
    if (ops == NULL || locks == NULL || cfg == NULL || cfg->buckets == 0 || cfg->slots == 0 || cfg->keys == 0 ||
        cfg->value_words == 0 || (uint64_t)cfg->keys > (uint64_t)cfg->buckets * cfg->slots ||
        cfg->get_pct > 100 || !(cfg->theta >= 0) || cfg->slots * (1ull + cfg->value_words) * 8 > (1u << 20))
        return DSM_ERR_INVALID;
    /* own refuses unknown types; buckets hold any size. */
    dsm_status_t rs = dsm_own_type_register(DSM_KVC_TYPE, "kv.bucket", 0);
    if (rs != DSM_OK)
        return rs;
    dsm_kvc_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return DSM_ERR_NOMEM;
    t->ops = ops;
    t->locks = locks;
    t->cfg = *cfg;
    t->guarded = cfg->guard && ops->adopt != NULL && locks->guards;
    t->bucket = calloc(cfg->buckets, sizeof *t->bucket);
    t->lock = calloc(cfg->buckets, sizeof *t->lock);
    t->cdf = calloc(cfg->keys, sizeof *t->cdf);
    if (!t->bucket || !t->lock || !t->cdf) {
        dsm_kvc_destroy(t);
        return DSM_ERR_NOMEM;
    }
    dsm_zipf_cdf(t->cdf, cfg->keys, cfg->theta);
    *out = t;
    return DSM_OK;
}

dsm_status_t dsm_kvc_create_bucket(dsm_kvc_t *t, dsm_node_t *node, uint32_t b)
{
    if (b >= t->cfg.buckets || t->bucket[b])
        return DSM_ERR_INVALID;
    const dsm_coh_ops_t *ops = t->ops;
    size_t ew = entry_words(t);
    dsm_status_t st;
    if ((st = ops->alloc(node, DSM_KVC_TYPE, bucket_bytes(t), &t->bucket[b])) != DSM_OK ||
        (st = t->locks->lock_new(node, &t->lock[b])) != DSM_OK)
        return st;
    dsm_coh_mut_t m;
    if ((st = ops->borrow_mut(node, t->bucket[b], &m)) != DSM_OK)
        return st;
    uint64_t *w = m.data;
    for (uint32_t id = b, s = 0; id < t->cfg.keys; id += t->cfg.buckets, s++) {
        w[s * ew] = key_of(id);
        for (size_t k = 1; k < ew; k++)
            w[s * ew + k] = initial_value(t, id);
    }
    if ((st = ops->release_mut(node, &m)) != DSM_OK || !guarded(t))
        return st;
    uint64_t guarding;
    if ((st = ops->adopt(node, t->lock[b], t->bucket[b], &guarding)) == DSM_OK)
        t->bucket[b] = t->lock[b] = guarding;
    return st;
}

void dsm_kvc_get_bucket(const dsm_kvc_t *t, uint32_t b, uint64_t *bucket, uint64_t *lock)
{
    *bucket = b < t->cfg.buckets ? t->bucket[b] : 0;
    *lock = b < t->cfg.buckets ? t->lock[b] : 0;
}

dsm_status_t dsm_kvc_set_bucket(dsm_kvc_t *t, uint32_t b, uint64_t bucket, uint64_t lock)
{
    if (b >= t->cfg.buckets || bucket == 0 || lock == 0)
        return DSM_ERR_INVALID;
    t->bucket[b] = bucket;
    t->lock[b] = lock;
    return DSM_OK;
}

dsm_status_t dsm_kvc_create(const dsm_coh_ops_t *ops, const dsm_coh_lock_ops_t *locks,
                            const dsm_kvc_config_t *cfg, dsm_node_t *const *nodes, unsigned nnodes, dsm_kvc_t **out)
{
    *out = NULL;
    if (nodes == NULL || nnodes == 0)
        return DSM_ERR_INVALID;
    dsm_kvc_t *t;
    dsm_status_t st = dsm_kvc_new(ops, locks, cfg, &t);
    if (st != DSM_OK)
        return st;
    t->nnodes = nnodes;
    t->homes = calloc(nnodes, sizeof *t->homes);
    if (t->homes == NULL) {
        dsm_kvc_destroy(t);
        return DSM_ERR_NOMEM;
    }
    memcpy(t->homes, nodes, nnodes * sizeof *nodes);
    for (uint32_t b = 0; b < cfg->buckets && st == DSM_OK; b++)
        st = dsm_kvc_create_bucket(t, t->homes[b % nnodes], b);
    if (st != DSM_OK) {
        dsm_kvc_destroy(t);
        return st;
    }
    *out = t;
    return DSM_OK;
}

static uint32_t zipf_id(const dsm_kvc_t *t, uint64_t r) { return dsm_zipf_pick(t->cdf, t->cfg.keys, r); }

/* The entry of key in a bucket's words, or NULL. */
static uint64_t *find(const dsm_kvc_t *t, const uint64_t *w, uint64_t key)
{
    size_t ew = entry_words(t);
    for (uint32_t s = 0; s < t->cfg.slots; s++)
        if (w[s * ew] == key)
            return (uint64_t *)(uintptr_t)(w + s * ew);
    return NULL;
}

/* The clock when timing, else 0 (the phases then add nothing). */
static uint64_t tick(const dsm_kvc_t *t) { return t->cfg.timing ? dsm_now_ns() : 0; }
/* Add the time since *at to phase `which`, and restart *at. */
static void lap(const dsm_kvc_t *t, dsm_kvc_result_t *res, int which, uint64_t *at)
{
    uint64_t now = tick(t);
    res->ns[which] += now - *at;
    *at = now;
}

/* One operation; *seen is the key's first value word as the operation
 * found it (a GET's result, a SET's value before its add). */
static dsm_status_t one_op(dsm_kvc_t *t, dsm_node_t *node, uint32_t id, int get, uint64_t delta,
                           dsm_kvc_result_t *res, uint64_t *seen)
{
    uint32_t b = id % t->cfg.buckets;
    dsm_status_t st;
    uint64_t at = tick(t);
    *seen = 0;
    if (get) {
        dsm_coh_ref_t r;
        if ((st = lock_borrow(t, node, b, &r)) == DSM_OK) {
            lap(t, res, DSM_KVC_T_ACQUIRE, &at);
            const uint64_t *e = find(t, r.data, key_of(id));
            if (e == NULL)
                res->not_found++;
            else {
                *seen = e[1];
                for (uint32_t k = 2; k <= t->cfg.value_words; k++)
                    if (e[k] != e[1]) {
                        res->torn++;
                        break;
                    }
            }
            res->gets++;
            lap(t, res, DSM_KVC_T_WORK, &at);
            st = unlock_release(t, node, b, &r);
            lap(t, res, DSM_KVC_T_RELEASE, &at);
        }
    } else {
        dsm_coh_mut_t m;
        if ((st = lock_borrow_mut(t, node, b, &m)) == DSM_OK) {
            lap(t, res, DSM_KVC_T_ACQUIRE, &at);
            uint64_t *e = find(t, m.data, key_of(id));
            if (e == NULL)
                res->not_found++;
            else {
                *seen = e[1];
                for (uint32_t k = 1; k <= t->cfg.value_words; k++)
                    e[k] += delta;
            }
            res->sets++;
            lap(t, res, DSM_KVC_T_WORK, &at);
            st = unlock_release_mut(t, node, b, &m);
            lap(t, res, DSM_KVC_T_RELEASE, &at);
        }
    }
    return st;
}

dsm_status_t dsm_kvc_run(dsm_kvc_t *t, dsm_node_t *node, uint32_t stream, uint64_t nops, dsm_kvc_result_t *res)
{
    uint64_t state = dsm_hash64(t->cfg.seed ^ dsm_hash64((uint64_t)stream + 1));
    const dsm_stop_t *stop = dsm_spawn_stop();
    for (uint64_t i = 0; i < nops; i++) {
        if (dsm_stop_requested(stop))   /* one relaxed load; an op may take ms */
            return DSM_ERR_CANCELLED;
        uint64_t r1 = dsm_splitmix64(&state), r2 = dsm_splitmix64(&state);
        uint32_t id = zipf_id(t, r1);
        int get = (r2 % 100) < t->cfg.get_pct;
        int record = t->history_len < t->history_cap;
        uint64_t delta = (r2 >> 8) & 0xffff, seen, call_ns = record ? dsm_now_ns() : 0;
        dsm_status_t st = one_op(t, node, id, get, delta, res, &seen);
        if (st != DSM_OK)
            return st;
        if (record)
            t->history[t->history_len++] = (dsm_kvc_record_t){
                .key = id, .kind = get ? DSM_KVC_GET : DSM_KVC_SET, .initial = initial_value(t, id),
                .delta = get ? 0 : delta, .seen = seen, .call_ns = call_ns, .return_ns = dsm_now_ns()};
    }
    return DSM_OK;
}

void dsm_kvc_record(dsm_kvc_t *t, dsm_kvc_record_t *history, uint64_t cap)
{
    t->history = history;
    t->history_cap = history ? cap : 0;
    t->history_len = 0;
}

uint64_t dsm_kvc_recorded(const dsm_kvc_t *t) { return t->history_len; }

dsm_status_t dsm_kvc_checksum(dsm_kvc_t *t, dsm_node_t *node, uint64_t *sum)
{
    uint64_t s = 0;
    size_t ew = entry_words(t);
    for (uint32_t b = 0; b < t->cfg.buckets; b++) {
        dsm_coh_ref_t r;
        dsm_status_t st = lock_borrow(t, node, b, &r);
        if (st != DSM_OK)
            return st;
        const uint64_t *w = r.data;
        for (uint32_t e = 0; e < t->cfg.slots; e++)
            for (size_t k = 1; k < ew; k++)
                s += dsm_hash64(w[e * ew] ^ dsm_hash64(w[e * ew + k] + k));
        if ((st = unlock_release(t, node, b, &r)) != DSM_OK)
            return st;
    }
    *sum = s;
    return DSM_OK;
}
