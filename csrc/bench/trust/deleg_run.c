/* Fetch-and-add by delegation: the closure, the measuring fibers and the
 * timed runs. */
#include "bench/trust/deleg_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/trust/keys.h"
#include "bench/trust/threads.h"
#include "bench/trust/trust.h"
#include "util/clock.h"
#include "util/zalloc.h"

/* One property per trustee: the objects it owns, a plain counter array. */
static void faa_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)args;
    (void)args_len;
    uint64_t *c = prop;
    uint32_t i;
    memcpy(&i, env, 4);
    uint64_t v = c[i]++;
    cpu_pause();
    dsm_deleg_return(ret, &v, 8);
}

/* Objects are dealt round-robin over the one or two trustees (a shift, not
 * a division: the lock threads pay nothing like it per operation). */
static inline dsm_deleg_trust_t *obj_trust(struct deleg_run *r, uint32_t obj, uint32_t *local)
{
    unsigned two = r->ntrustees == 2;
    *local = obj >> two;
    return &r->trusts[obj & two];
}

static void apply_fiber(void *arg)
{
    struct dfib *f = arg;
    struct deleg_run *r = f->r;
    uint64_t v;
    while (dsm_now_s() < r->t_end) {
        for (int k = 0; k < 32; k++) {
            uint32_t li;
            dsm_deleg_trust_t *t = obj_trust(r, r->ring[f->pos], &li);
            f->pos = (f->pos + 1) & (RING - 1);
            dsm_deleg_apply(t, faa_fn, &li, 4, &v, 8, NULL);
            f->ops++;
        }
    }
    atomic_fetch_add(&r->ops, f->ops);
}

static void then_cb(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)st;
    (void)ret;
    (void)len;
    struct dfib *f = arg;
    f->inflight--;
    f->ops++;
}

struct lat_req {
    struct dfib *f;
    uint64_t t0;
};
static void lat_cb(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)st;
    (void)ret;
    (void)len;
    struct lat_req *q = arg;
    struct dfib *f = q->f;
    struct deleg_run *r = f->r;
    uint64_t d = dsm_now_ns() - q->t0;
    if (r->nlat < r->caplat) r->lat[r->nlat++] = d; /* one client thread: no lock needed */
    f->inflight--;
    f->ops++;
    free(q);
}

static void then_fiber(void *arg)
{
    struct dfib *f = arg;
    struct deleg_run *r = f->r;
    if (r->rate > 0) {
        /* open loop: issue at Poisson times, measure from the scheduled time */
        uint64_t gap = (uint64_t)(1e9 / r->rate), next = dsm_now_ns(), seed = 99;
        while (dsm_now_s() < r->t_end) {
            uint64_t t = dsm_now_ns();
            if (t < next) {
                dsm_deleg_yield();
                continue;
            }
            uint32_t li;
            dsm_deleg_trust_t *tr = obj_trust(r, r->ring[f->pos], &li);
            f->pos = (f->pos + 1) & (RING - 1);
            struct lat_req *q = malloc(sizeof *q);
            q->f = f;
            q->t0 = next;
            f->inflight++;
            dsm_deleg_apply_then(tr, faa_fn, &li, 4, NULL, 0, 8, lat_cb, q);
            double u = (double)((xs(&seed) >> 11) + 1) / 9007199254740993.0;
            next += (uint64_t)(-log(u) * (double)gap);
        }
        while (f->inflight) dsm_deleg_yield();
        atomic_fetch_add(&r->ops, f->ops);
        return;
    }
    /* The clock is read every 16 rounds: a round often issues only the few
     * requests whose completions just arrived, and a clock read per round
     * cost the client ~5% of its time. */
    for (unsigned round = 0; (round & 15) || dsm_now_s() < r->t_end; round++) {
        for (int k = 0; k < 64; k++) {
            if (f->inflight >= r->window) break;
            uint32_t li;
            dsm_deleg_trust_t *t = obj_trust(r, r->ring[f->pos], &li);
            f->pos = (f->pos + 1) & (RING - 1);
            f->inflight++;
            dsm_deleg_apply_then(t, faa_fn, &li, 4, NULL, 0, 8, then_cb, f);
        }
        dsm_deleg_yield();
    }
    while (f->inflight) dsm_deleg_yield();
    atomic_fetch_add(&r->ops, f->ops);
}

/* Spawn the measuring fibers and return: each adds its count when it ends,
 * and the run ends when they all did. (A main fiber that stayed to poll the
 * clock and yield added a clock read and two context switches to every
 * scheduler round of the client thread.) */
static void deleg_main(void *arg, unsigned worker)
{
    struct deleg_run *r = arg;
    unsigned nf = r->mode == D_APPLY ? r->fibers : 1;
    struct dfib *fs = calloc(nf, sizeof *fs);
    r->fibs[worker] = fs;
    for (unsigned i = 0; i < nf; i++) {
        fs[i].r = r;
        fs[i].pos = (worker * 104729u + i * 7919u) % RING;
        dsm_deleg_spawn(r->mode == D_APPLY ? apply_fiber : then_fiber, &fs[i]);
    }
}

double run_deleg(int mode, int dedicated, uint32_t n, uint32_t *ring, double rate, struct deleg_run *lat_out,
                 double *min_share)
{
    struct deleg_run r = {.mode = mode, .dedicated = dedicated, .fibers = 64, .window = 512, .ring = ring, .n = n,
                          .rate = rate};
    dsm_deleg_config_t cfg = {.threads = 2, .dedicated = dedicated ? 1 : 0, .stack_size = 32 * 1024, .pin = bench_pin()};
    dsm_deleg_rt_t *rt;
    if (dsm_deleg_rt_create(&cfg, &rt) != DSM_OK) return 0;
    r.ntrustees = dedicated ? 1 : 2;
    uint64_t *arrays[2];
    for (unsigned t = 0; t < r.ntrustees; t++) {
        /* on lines of their own, as the lock runs' objects are */
        arrays[t] = dsm_zalloc_lines(((size_t)n / r.ntrustees + 1) * sizeof(uint64_t));
        dsm_deleg_entrust(rt, t, arrays[t], NULL, 0, &r.trusts[t]);
    }
    if (rate > 0) {
        r.caplat = 1u << 21;
        r.lat = malloc(r.caplat * sizeof *r.lat);
    }
    double t0 = dsm_now_s();
    r.t_end = t0 + dur_s;
    dsm_deleg_rt_run(rt, deleg_main, &r);
    double el = dsm_now_s() - t0;
    uint64_t thread_ops[2] = {0, 0};
    unsigned nf = mode == D_APPLY ? r.fibers : 1;
    for (unsigned w = 0; w < 2; w++)
        for (unsigned i = 0; r.fibs[w] && i < nf; i++) thread_ops[w] += r.fibs[w][i].ops;
    if (min_share) *min_share = dedicated ? -1 : bench_min_share(thread_ops);
    for (unsigned w = 0; w < 2; w++) free(r.fibs[w]);
    for (unsigned t = 0; t < r.ntrustees; t++) {
        dsm_deleg_trust_drop(&r.trusts[t]);
        free(arrays[t]);
    }
    dsm_deleg_rt_destroy(rt);
    if (lat_out) {
        lat_out->lat = r.lat;
        lat_out->nlat = r.nlat;
    } else {
        free(r.lat);
    }
    return (double)atomic_load(&r.ops) / el;
}
