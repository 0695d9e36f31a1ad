/* Workload "chan_ops": LOCO's channel objects (dsm/chan.h) under a random
 * stream of operations from every node at once, each node recording what it
 * did for a linearizability check (pydsm.tools.chaos.chan_history). Params:
 * object (kvstore | queue), ops per node, seed, round (names this run's
 * channels, so runs on one cluster never meet), history; the kvstore's
 * keys, slots, locks, get_pct, delete_pct (the rest are puts), settle_ms,
 * window (a run of puts or of deletes as one put_many or delete_many, each
 * recorded with the call's times) and fence; the queue's capacity and push_pct (the rest are pops). Every
 * put and push writes a value no other operation writes (node, sequence),
 * so a read names the write it saw.
 *
 * fence=0 is UNSAFE and exists to demonstrate why the fence matters: the
 * kvstore's updates then release their lock without fencing their write,
 * which a chaos fabric places late, and histories fail the check. A get
 * whose slot never settles (unfenced writes interleaved) is recorded with
 * found = 2 and ends that node's stream: the store is broken. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/refuse.h"
#include "apps/workloads.h"
#include "dsm/chan_sdk.h"
#include "dsm/clock.h"

enum { CHAN_OPS_GET = 1, CHAN_OPS_PUT = 2, CHAN_OPS_DELETE = 3, CHAN_OPS_PUSH = 4, CHAN_OPS_POP = 5 };
enum { FOUND_TORN = 2 };

/* One operation as its node saw it: 7 words, the driver reads them so. */
typedef struct chan_record {
    uint64_t key, kind, arg, result, found, call_ns, return_ns;
} chan_record_t;

static const dsm_param_info_t chan_params[] = {
    {"object", "str", "kvstore", "kvstore or queue (the shared_queue)"},
    {"ops", "u64", "300", "operations per node"},
    {"seed", "u64", "1", "random seed of the streams"},
    {"round", "u64", "0", "names this run's channels (chan_ops/ROUND/...): a new one per run on one cluster"},
    {"keys", "u64", "8", "kvstore: distinct keys"},
    {"slots", "u64", "64", "kvstore: slots per node"},
    {"locks", "u64", "4", "kvstore: ticket locks (key % locks)"},
    {"get_pct", "u64", "50", "kvstore: percent of gets"},
    {"delete_pct", "u64", "10", "kvstore: percent of deletes (the rest are puts)"},
    {"settle_ms", "u64", "2000", "kvstore: how long a get retries a slot whose checksum disagrees"},
    {"window", "u64", "1", "kvstore: up to this many puts in a row go as one put_many, deletes as one delete_many (1: each alone)"},
    {"fence", "u64", "1", "kvstore: 1 fences each update before its lock's release; 0 is UNSAFE, for demonstrating why the fence matters (histories then fail the check)"},
    {"capacity", "u64", "16", "queue: slots"},
    {"push_pct", "u64", "55", "queue: percent of pushes (the rest are pops)"},
    {"history", "addr", "0", "nodes*ops*56 zeroed shared bytes where each node records its operations (key, kind, argument, result, found, call and return times); 0 records nothing"},
};
const dsm_workload_info_t dsm_chan_ops_info = {
    "chan_ops", "LOCO's kvstore or shared queue under random operations from every node, recorded for a linearizability check",
    dsm_workload_chan_ops, chan_params, sizeof chan_params / sizeof chan_params[0], NULL};

typedef struct chan_run {
    uint64_t ops, keys, get_pct, delete_pct, push_pct, seed, index, window;
    chan_record_t *rec;
    uint64_t done, torn;
} chan_run_t;

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 17;
}

/* The pending window's puts or deletes as one put_many or delete_many,
 * each recorded with the window's call and return times. */
static dsm_status_t flush_window(chan_run_t *r, dsm_chan_kv_t *kv, chan_record_t *win, uint32_t *n, uint64_t at)
{
    if (*n == 0)
        return DSM_OK;
    uint64_t keys[DSM_CHAN_ACK_BITS], vals[DSM_CHAN_ACK_BITS];
    int found[DSM_CHAN_ACK_BITS] = {0};
    for (uint32_t i = 0; i < *n; i++) {
        keys[i] = win[i].key;
        vals[i] = win[i].arg;
    }
    dsm_status_t st = win[0].kind == CHAN_OPS_PUT ? dsm_chan_kv_put_many(kv, keys, *n, vals)
                                                  : dsm_chan_kv_delete_many(kv, keys, *n, found);
    uint64_t ret = r->rec ? dsm_now_ns() : 0;
    if (st != DSM_OK)
        return st;
    for (uint32_t i = 0; i < *n; i++) {
        win[i].return_ns = ret;
        win[i].found = win[i].kind == CHAN_OPS_DELETE ? (uint64_t)found[i] : 0;
        if (r->rec)
            r->rec[at + i] = win[i];
    }
    r->done += *n;
    *n = 0;
    return DSM_OK;
}

static dsm_status_t run_kv(chan_run_t *r, dsm_chan_kv_t *kv)
{
    uint64_t rng = r->seed * 0x9e3779b97f4a7c15ull + r->index + 1;
    chan_record_t win[DSM_CHAN_ACK_BITS];
    uint32_t nwin = 0;
    dsm_status_t st = DSM_OK;
    for (uint64_t k = 0; k < r->ops; k++) {
        uint64_t key = next(&rng) % r->keys, roll = next(&rng) % 100, v = 0;
        uint64_t value = (r->index + 1) << 32 | (k + 1);
        uint64_t kind = roll < r->get_pct                  ? CHAN_OPS_GET
                        : roll < r->get_pct + r->delete_pct ? CHAN_OPS_DELETE
                                                            : CHAN_OPS_PUT;
        /* with a window, a run of puts or of deletes goes as one call */
        if (nwin > 0 && (kind != win[0].kind || nwin == r->window) &&
            (st = flush_window(r, kv, win, &nwin, k - nwin)) != DSM_OK)
            return st;
        if (r->window > 1 && kind != CHAN_OPS_GET) {
            uint64_t call = r->rec ? (nwin > 0 ? win[0].call_ns : dsm_now_ns()) : 0;
            win[nwin++] = (chan_record_t){.key = key, .kind = kind, .arg = kind == CHAN_OPS_PUT ? value : 0,
                                          .call_ns = call};
            continue;
        }
        chan_record_t rec = {.key = key, .kind = kind, .call_ns = r->rec ? dsm_now_ns() : 0};
        int found = 0;
        if (kind == CHAN_OPS_GET) {
            st = dsm_chan_kv_get(kv, key, &v, &found);
            if (st == DSM_ERR_TIMEOUT) {   /* the slot never settled: recorded, and this node stops */
                found = FOUND_TORN;
                r->torn++;
                st = DSM_OK;
            }
            rec.result = v;
        } else if (kind == CHAN_OPS_DELETE) {
            st = dsm_chan_kv_delete(kv, key, &found);
        } else {
            rec.arg = value;
            st = dsm_chan_kv_put(kv, key, &value);
        }
        rec.return_ns = r->rec ? dsm_now_ns() : 0;
        if (st != DSM_OK)
            return st;
        rec.found = (uint64_t)found;
        if (r->rec)
            r->rec[k] = rec;
        r->done++;
        if (found == FOUND_TORN)
            break;
    }
    return flush_window(r, kv, win, &nwin, r->ops - nwin);
}

static dsm_status_t run_queue(chan_run_t *r, dsm_chan_queue_t *q)
{
    uint64_t rng = r->seed * 0x9e3779b97f4a7c15ull + r->index + 1;
    for (uint64_t k = 0; k < r->ops; k++) {
        uint64_t value = (r->index + 1) << 32 | (k + 1), v = 0;
        chan_record_t rec = {.call_ns = r->rec ? dsm_now_ns() : 0};
        int got = 0;
        dsm_status_t st;
        if (next(&rng) % 100 < r->push_pct) {
            rec.kind = CHAN_OPS_PUSH;
            rec.arg = value;
            st = dsm_chan_queue_push(q, value, 1);
            if (st == DSM_ERR_BUSY) {   /* full: nothing happened, nothing recorded */
                k--;
                continue;
            }
        } else {
            rec.kind = CHAN_OPS_POP;
            st = dsm_chan_queue_pop(q, &v, &got, 0);
            rec.result = v;
            rec.found = (uint64_t)got;
        }
        rec.return_ns = r->rec ? dsm_now_ns() : 0;
        if (st != DSM_OK)
            return st;
        if (r->rec)
            r->rec[k] = rec;
        r->done++;
    }
    return DSM_OK;
}

dsm_status_t dsm_workload_chan_ops(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                   size_t *ret_len)
{
    const dsm_workload_info_t *w = &dsm_chan_ops_info;
    dsm_status_t st = dsm_workload_begin(w, args, len, ret, cap, ret_len);
    if (st != DSM_OK)
        return st;
    int bad = 0;
    char object[16] = "kvstore";
    dsm_param_str(args, len, "object", object, sizeof object, &bad);
    chan_run_t r = {
        .ops = dsm_param_u64(args, len, "ops", 300, &bad),
        .keys = dsm_param_u64(args, len, "keys", 8, &bad),
        .get_pct = dsm_param_u64(args, len, "get_pct", 50, &bad),
        .delete_pct = dsm_param_u64(args, len, "delete_pct", 10, &bad),
        .push_pct = dsm_param_u64(args, len, "push_pct", 55, &bad),
        .seed = dsm_param_u64(args, len, "seed", 1, &bad),
        .index = dsm_param_u64(args, len, "rank_index", 0, &bad),
        .window = dsm_param_u64(args, len, "window", 1, &bad),
    };
    uint64_t round = dsm_param_u64(args, len, "round", 0, &bad);
    uint64_t slots = dsm_param_u64(args, len, "slots", 64, &bad);
    uint64_t locks = dsm_param_u64(args, len, "locks", 4, &bad);
    uint64_t settle = dsm_param_u64(args, len, "settle_ms", 2000, &bad);
    uint64_t fence = dsm_param_u64(args, len, "fence", 1, &bad);
    uint64_t capacity = dsm_param_u64(args, len, "capacity", 16, &bad);
    dsm_gaddr_t history = dsm_param_u64(args, len, "history", 0, &bad);
    int kv = strcmp(object, "kvstore") == 0;
    if (bad || (!kv && strcmp(object, "queue") != 0))
        return dsm_apps_refuse_param(w, args, len, "object", ret, cap, ret_len, "kvstore or queue");
    if (node == NULL)
        return dsm_apps_refuse_param(w, args, len, "object", ret, cap, ret_len, "run on a node of a cluster");
    if (r.ops == 0 || r.ops > (1u << 20))
        return dsm_apps_refuse_param(w, args, len, "ops", ret, cap, ret_len, "1..%u", 1u << 20);
    if (r.keys == 0)
        return dsm_apps_refuse_param(w, args, len, "keys", ret, cap, ret_len, "at least 1");
    if (slots == 0 || slots > DSM_CHAN_KV_MAX_SLOTS)
        return dsm_apps_refuse_param(w, args, len, "slots", ret, cap, ret_len, "1..%u", DSM_CHAN_KV_MAX_SLOTS);
    if (kv && r.keys > slots)
        return dsm_apps_refuse_param(w, args, len, "keys", ret, cap, ret_len,
                                     "at most slots (%llu): every key may be inserted by one node",
                                     (unsigned long long)slots);
    if (locks == 0 || locks > DSM_CHAN_KV_MAX_LOCKS)
        return dsm_apps_refuse_param(w, args, len, "locks", ret, cap, ret_len, "1..%u", DSM_CHAN_KV_MAX_LOCKS);
    if (r.get_pct > 100)
        return dsm_apps_refuse_param(w, args, len, "get_pct", ret, cap, ret_len, "0..100");
    if (r.get_pct + r.delete_pct > 100)
        return dsm_apps_refuse_param(w, args, len, "delete_pct", ret, cap, ret_len, "at most 100 - get_pct");
    if (r.push_pct > 100)
        return dsm_apps_refuse_param(w, args, len, "push_pct", ret, cap, ret_len, "0..100");
    if (r.window == 0 || r.window > DSM_CHAN_ACK_BITS)
        return dsm_apps_refuse_param(w, args, len, "window", ret, cap, ret_len, "1..%u", DSM_CHAN_ACK_BITS);
    if (fence > 1)
        return dsm_apps_refuse_param(w, args, len, "fence", ret, cap, ret_len, "1, or 0 (unsafe)");
    if (settle == 0 || settle > 600000)
        return dsm_apps_refuse_param(w, args, len, "settle_ms", ret, cap, ret_len, "1..600000");
    if (capacity == 0 || capacity > (1u << 20))
        return dsm_apps_refuse_param(w, args, len, "capacity", ret, cap, ret_len, "1..%u", 1u << 20);
    if (history % 8 != 0)
        return dsm_apps_refuse_param(w, args, len, "history", ret, cap, ret_len, "0, or an 8-byte aligned address");
    if (history != 0 && (r.rec = calloc(r.ops, sizeof *r.rec)) == NULL)
        return DSM_ERR_NOMEM;

    char name[64];
    uint32_t timeout = dsm_node_config(node)->op_timeout_ms;
    dsm_chan_barrier_t *b = NULL;
    dsm_chan_kv_t *store = NULL;
    dsm_chan_queue_t *q = NULL;
    snprintf(name, sizeof name, "chan_ops/%llu/bar", (unsigned long long)round);
    st = dsm_chan_barrier_create(node, name, timeout, &b);
    snprintf(name, sizeof name, "chan_ops/%llu/%s", (unsigned long long)round, kv ? "kv" : "queue");
    if (st == DSM_OK)
        st = kv ? dsm_chan_kv_create(node, name, (uint32_t)slots, (uint32_t)locks, 8, timeout, &store)
                : dsm_chan_queue_create(node, name, (uint32_t)capacity, timeout, &q);
    if (st == DSM_OK && kv) {
        dsm_chan_kv_set_settle_ms(store, (uint32_t)settle);
        dsm_chan_kv_set_fence(store, (int)fence);
    }
    if (st == DSM_OK)
        st = dsm_chan_barrier_wait(b, timeout);   /* everyone's streams start together */
    double start = dsm_now_s(), seconds = 0;
    if (st == DSM_OK)
        st = kv ? run_kv(&r, store) : run_queue(&r, q);
    seconds = dsm_now_s() - start;
    if (st == DSM_OK && r.rec)
        st = dsm_write(node, history + r.index * r.ops * sizeof *r.rec, r.rec, r.ops * sizeof *r.rec);
    dsm_status_t bs = b ? dsm_chan_barrier_wait(b, timeout) : DSM_OK;   /* nobody still at work in teardown */
    if (st == DSM_OK)
        st = bs;
    dsm_chan_kv_destroy(store);
    dsm_chan_queue_destroy(q);
    dsm_chan_barrier_destroy(b);
    free(r.rec);
    if (st != DSM_OK)
        return st;
    if (seconds <= 0)
        seconds = 1e-9;
    if ((st = dsm_result_add(ret, cap, ret_len, "ops", (double)r.done, "ops")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "ops_per_sec", (double)r.done / seconds, "ops/s")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "torn", (double)r.torn, "ops")) != DSM_OK)
        return st;
    return dsm_result_add(ret, cap, ret_len, "seconds", seconds, "s");
}
