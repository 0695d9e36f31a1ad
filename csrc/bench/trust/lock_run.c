/* Fetch-and-add under pthread_mutex, TTAS, MCS or a plain atomic on two
 * threads, closed or open loop. */
#include "bench/trust/lock_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/trust/keys.h"
#include "bench/trust/trust.h"
#include "util/clock.h"

const char *lock_names[] = {"pthread_mutex", "ttas_spin", "mcs", "atomic_faa"};

static inline void lock_op(struct lock_run *r, uint32_t i, mcs_node_t *me)
{
    lobj_t *o = &r->objs[i];
    switch (r->kind) {
    case L_MUTEX:
        pthread_mutex_lock(&o->m);
        o->count++;
        cpu_pause();
        pthread_mutex_unlock(&o->m);
        break;
    case L_SPIN:
        spin_lock(&o->s);
        o->count++;
        cpu_pause();
        spin_unlock(&o->s);
        break;
    case L_MCS:
        mcs_lock(&o->q, me);
        o->count++;
        cpu_pause();
        mcs_unlock(&o->q, me);
        break;
    default:
        atomic_fetch_add_explicit((_Atomic uint64_t *)&o->count, 1, memory_order_relaxed);
        cpu_pause();
    }
}

static void *lock_thread(void *arg)
{
    struct lock_run *r = arg;
    static _Atomic unsigned tid_gen;
    unsigned tid = atomic_fetch_add(&tid_gen, 1);
    unsigned idx = atomic_fetch_add(&r->next_idx, 1);
    if (r->pin) pin_thread(idx);
    mcs_node_t me;
    uint32_t pos = (tid * 7919u) % RING;
    uint64_t ops = 0;
    while (!atomic_load(&r->go)) cpu_pause();
    if (r->rate <= 0) {
        while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
            for (int k = 0; k < 64; k++) {
                lock_op(r, r->ring[pos], &me);
                pos = (pos + 1) & (RING - 1);
            }
            ops += 64;
        }
    } else {
        uint64_t gap = (uint64_t)(1e9 / r->rate), next = dsm_now_ns(), seed = tid + 1;
        size_t cap = 1u << 20, n = 0;
        uint64_t *lat = malloc(cap * sizeof *lat);
        while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
            uint64_t t;
            while ((t = dsm_now_ns()) < next) cpu_pause();
            lock_op(r, r->ring[pos], &me);
            pos = (pos + 1) & (RING - 1);
            uint64_t done = dsm_now_ns();
            if (n < cap) lat[n++] = done - next;
            /* Poisson arrivals */
            double u = (double)((xs(&seed) >> 11) + 1) / 9007199254740993.0;
            next += (uint64_t)(-log(u) * (double)gap);
            ops++;
        }
        pthread_mutex_lock(&r->latmu);
        if (r->nlat + n > r->caplat) {
            r->caplat = r->nlat + n;
            r->lat = realloc(r->lat, r->caplat * sizeof *r->lat);
        }
        memcpy(r->lat + r->nlat, lat, n * sizeof *lat);
        r->nlat += n;
        pthread_mutex_unlock(&r->latmu);
        free(lat);
    }
    r->thread_ops[idx & 1] = ops;
    atomic_fetch_add(&r->ops, ops);
    return NULL;
}

double run_locks(int kind, uint32_t n, uint32_t *ring, double rate, struct lock_run *out_lat, double *min_share)
{
    struct lock_run r = {.kind = kind, .ring = ring, .rate = rate, .pin = bench_pin()};
    pthread_mutex_init(&r.latmu, NULL);
    r.objs = aligned_alloc(64, (size_t)n * sizeof(lobj_t));
    memset(r.objs, 0, (size_t)n * sizeof(lobj_t));
    if (kind == L_MUTEX)
        for (uint32_t i = 0; i < n; i++) pthread_mutex_init(&r.objs[i].m, NULL);
    double el = run_two_threads(lock_thread, &r, &r.go, &r.stop, dur_s);
    if (min_share) *min_share = bench_min_share(r.thread_ops);
    free(r.objs);
    if (out_lat) {
        out_lat->lat = r.lat;
        out_lat->nlat = r.nlat;
    } else {
        free(r.lat);
    }
    return (double)atomic_load(&r.ops) / el;
}
