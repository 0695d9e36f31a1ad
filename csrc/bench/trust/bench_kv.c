/* The key-value store: the delegated store of csrc/apps (shared and
 * dedicated trustees) vs 512-shard mutex and rwlock tables, 8 B keys, 16 B
 * values, 5% writes. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/kv.h"
#include "bench/trust/keys.h"
#include "bench/trust/threads.h"
#include "bench/trust/trust.h"
#include "dsm/deleg.h"
#include "util/clock.h"

#define KV_SHARDS 512
typedef struct { uint64_t key; uint8_t val[16]; uint8_t used; } slot16_t;
typedef struct {
    union {
        pthread_mutex_t m;
        pthread_rwlock_t rw;
    };
    slot16_t *tab;
    uint32_t mask;
} __attribute__((aligned(64))) lshard_t;

static uint64_t mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static slot16_t *lfind(lshard_t *s, uint64_t key)
{
    uint32_t i = (uint32_t)(mix(key) >> 20) & s->mask;
    while (s->tab[i].used && s->tab[i].key != key) i = (i + 1) & s->mask;
    return &s->tab[i];
}

struct kvl_run {
    int rw;
    lshard_t *sh;
    uint32_t *ring;
    _Atomic int go, stop;
    _Atomic uint64_t ops;
    int pin;
    _Atomic unsigned next_idx;
};

static void *kvl_thread(void *arg)
{
    struct kvl_run *r = arg;
    static _Atomic unsigned gen;
    unsigned tid = atomic_fetch_add(&gen, 1);
    if (r->pin) pin_thread(atomic_fetch_add(&r->next_idx, 1));
    uint32_t pos = (tid * 7919u) % RING;
    uint64_t ops = 0, seed = tid + 7;
    uint8_t v[16] = {0};
    while (!atomic_load(&r->go)) cpu_pause();
    while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        for (int k = 0; k < 64; k++) {
            uint64_t key = r->ring[pos];
            pos = (pos + 1) & (RING - 1);
            lshard_t *s = &r->sh[mix(key) % KV_SHARDS];
            int write = xs(&seed) % 100 < 5;
            if (r->rw) {
                if (write) pthread_rwlock_wrlock(&s->rw);
                else pthread_rwlock_rdlock(&s->rw);
            } else {
                pthread_mutex_lock(&s->m);
            }
            slot16_t *e = lfind(s, key);
            if (write) {
                memcpy(e->val, &seed, 8);
                e->key = key;
                e->used = 1;
            } else if (e->used) {
                memcpy(v, e->val, 16);
            }
            if (r->rw) pthread_rwlock_unlock(&s->rw);
            else pthread_mutex_unlock(&s->m);
        }
        ops += 64;
    }
    __asm__ __volatile__("" : : "r"(v) : "memory");
    atomic_fetch_add(&r->ops, ops);
    return NULL;
}

static double run_kv_locks(int rw, uint32_t nkeys, uint32_t *ring)
{
    struct kvl_run r = {.rw = rw, .ring = ring, .pin = bench_pin()};
    r.sh = aligned_alloc(64, KV_SHARDS * sizeof(lshard_t));
    uint32_t per = 16;
    while (per < 2 * (nkeys / KV_SHARDS + 1)) per *= 2;
    for (int i = 0; i < KV_SHARDS; i++) {
        if (rw) pthread_rwlock_init(&r.sh[i].rw, NULL);
        else pthread_mutex_init(&r.sh[i].m, NULL);
        r.sh[i].tab = calloc(per, sizeof(slot16_t));
        r.sh[i].mask = per - 1;
    }
    for (uint32_t k = 0; k < nkeys; k++) {
        slot16_t *e = lfind(&r.sh[mix(k) % KV_SHARDS], k);
        e->key = k;
        e->used = 1;
    }
    double el = run_two_threads(kvl_thread, &r, &r.go, &r.stop, dur_s);
    for (int i = 0; i < KV_SHARDS; i++) free(r.sh[i].tab);
    free(r.sh);
    return (double)atomic_load(&r.ops) / el;
}

struct kvd_run {
    dsm_kv_t *kv;
    uint32_t *ring;
    uint32_t nkeys;
    double t_end;
    _Atomic uint64_t ops;
};
struct kvd_fib {
    struct kvd_run *r;
    unsigned inflight;
    uint64_t ops;
};
static void kvd_cb(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)st;
    (void)ret;
    (void)len;
    struct kvd_fib *f = arg;
    f->inflight--;
    f->ops++;
}
static void kvd_prefill(void *arg, unsigned worker)
{
    struct kvd_run *r = arg;
    if (worker != 0) return;
    uint8_t v[16] = {1};
    struct kvd_fib f = {.r = r};
    for (uint64_t k = 0; k < r->nkeys; k++) {
        f.inflight++;
        dsm_kv_put_then(r->kv, &k, 8, v, 16, kvd_cb, &f);
        if (f.inflight > 256)
            while (f.inflight > 64) dsm_deleg_yield();
    }
    while (f.inflight) dsm_deleg_yield();
}
static void kvd_main(void *arg, unsigned worker)
{
    struct kvd_run *r = arg;
    struct kvd_fib f = {.r = r};
    uint32_t pos = (worker * 104729u) % RING;
    uint64_t seed = worker + 3;
    uint8_t v[16] = {2};
    while (dsm_now_s() < r->t_end) {
        for (int k = 0; k < 64 && f.inflight < 512; k++) {
            uint64_t key = r->ring[pos];
            pos = (pos + 1) & (RING - 1);
            f.inflight++;
            if (xs(&seed) % 100 < 5) dsm_kv_put_then(r->kv, &key, 8, v, 16, kvd_cb, &f);
            else dsm_kv_get_then(r->kv, &key, 8, kvd_cb, &f);
        }
        dsm_deleg_yield();
    }
    while (f.inflight) dsm_deleg_yield();
    atomic_fetch_add(&r->ops, f.ops);
}

static double run_kv_deleg(int dedicated, uint32_t nkeys, uint32_t *ring)
{
    dsm_deleg_config_t cfg = {.threads = 2, .dedicated = dedicated ? 1 : 0, .stack_size = 32 * 1024, .pin = bench_pin()};
    dsm_deleg_rt_t *rt;
    dsm_deleg_rt_create(&cfg, &rt);
    struct kvd_run r = {.ring = ring, .nkeys = nkeys};
    dsm_kv_create(rt, dedicated ? 16 : 16, 0, dedicated ? 1 : 2, &r.kv);
    dsm_deleg_rt_run(rt, kvd_prefill, &r);
    double t0 = dsm_now_s();
    r.t_end = t0 + dur_s;
    dsm_deleg_rt_run(rt, kvd_main, &r);
    double el = dsm_now_s() - t0;
    dsm_kv_destroy(r.kv);
    dsm_deleg_rt_destroy(rt);
    return (double)atomic_load(&r.ops) / el;
}

void bench_kv(dsm_report_t *r)
{
    printf("\n== key-value store, 8 B keys, 16 B values, 5%% writes, 2 threads, Mops/s ==\n");
    printf("%-8s %-9s %9s %9s | %9s %9s | %6s\n", "dist", "keys", "mutex512", "rwlock512", "deleg-sh", "deleg-ded",
           "ratio");
    static const uint32_t sizes[] = {1000, 1000000};
    for (int d = 0; d < 2; d++)
        for (unsigned si = 0; si < 2; si++) {
            uint32_t n = sizes[si];
            if (only_objects && n != only_objects) continue;
            uint32_t *ring = make_ring(n, d, 4242 + si);
            double m = run_kv_locks(0, n, ring) / 1e6, rw = run_kv_locks(1, n, ring) / 1e6;
            double ds = run_kv_deleg(0, n, ring) / 1e6, dd = run_kv_deleg(1, n, ring) / 1e6;
            double best_l = m > rw ? m : rw, best_d = ds > dd ? ds : dd;
            printf("%-8s %-9u %9.2f %9.2f | %9.2f %9.2f | %6.2f\n", d ? "zipf" : "uniform", n, m, rw, ds, dd,
                   best_d / best_l);
            fflush(stdout);
            char name[96];
            snprintf(name, sizeof name, "kv_%s_%s_w5", n >= 1000000 ? "1M" : "1K", d ? "zipf" : "uniform");
            dsm_report_add(r, name, best_d, "Mops/s", m > rw ? "mutex_512shard" : "rwlock_512shard", best_l, 1);
            free(ring);
        }
}
