/* dsm-bench-trust: the Trust<T> evaluation in miniature (thesis §2.6-2.7) on
 * two threads, every figure beside its anchor measured in the same run:
 *   fetch-and-add over {1..1M} objects, uniform and zipf(1), one `pause` per
 *   critical section: apply / apply_then (shared and dedicated trustees) vs
 *   pthread_mutex, TTAS spinlock, MCS lock and a plain atomic_fetch_add, and
 *   the ceiling the measured `pause` puts on any of them;
 *   latency against offered load (mean, p99.9); the key-value store (8 B keys,
 *   16 B values, 5% writes) vs 512-shard mutex and rwlock tables; and the
 *   delegation memcached server vs stock memcached under one load generator.
 * (The server itself is the dsm-memcached program, csrc/apps/memcached.) */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "apps/kv.h"
#include "apps/mc_server.h"
#include "dsm/deleg.h"

static int quick;
static double dur_s = 0.3;
static uint32_t only_objects; /* --objects N: one row of the sweep */

static inline void cpu_pause(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs `fn` on two threads over `arg` for dur_s seconds, releasing them
 * through *go and stopping them through *stop; returns the seconds elapsed. */
static double run_two_threads(void *(*fn)(void *), void *arg, _Atomic int *go, _Atomic int *stop, double dur_s)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, fn, arg);
    atomic_store(go, 1);
    double t0 = now_s();
    usleep((useconds_t)(dur_s * 1e6));
    atomic_store(stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return now_s() - t0;
}
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Pin each benchmark thread to its own core when there are enough cores
 * (DSM_BENCH_PIN=0 turns it off, any other value forces it): unpinned, the
 * scheduler may stack both threads on one core, and a polling protocol then
 * advances once per time slice instead of once per microsecond. */
static int bench_pin(void)
{
    const char *e = getenv("DSM_BENCH_PIN");
    if (e) return strcmp(e, "0") != 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    return CPU_COUNT(&set) >= 2;
}

/* Pin the calling thread to the idx-th CPU of the process's affinity mask. */
static void pin_thread(unsigned idx)
{
    cpu_set_t set, one;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    int n = CPU_COUNT(&set);
    if (n <= 0) return;
    int want = (int)(idx % (unsigned)n), seen = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        if (seen++ == want) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            return;
        }
    }
}

static uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- key streams: a precomputed ring of indices per (n, distribution) ---- */
#define RING (1u << 20)
static uint32_t *make_ring(uint32_t n, int zipf, uint64_t seed)
{
    uint32_t *r = malloc(RING * sizeof *r);
    if (!zipf) {
        for (uint32_t i = 0; i < RING; i++) r[i] = (uint32_t)(xs(&seed) % n);
        return r;
    }
    double *cdf = malloc((size_t)n * sizeof *cdf), sum = 0;
    for (uint32_t i = 0; i < n; i++) cdf[i] = (sum += 1.0 / (i + 1.0));
    for (uint32_t i = 0; i < RING; i++) {
        double u = (double)(xs(&seed) >> 11) / 9007199254740992.0 * sum;
        uint32_t lo = 0, hi = n - 1;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        /* scatter ranks so that popular objects are not neighbours */
        r[i] = (uint32_t)(((uint64_t)lo * 2654435761u) % n);
    }
    free(cdf);
    return r;
}

/* ---- locks ---- */
typedef struct { _Atomic int v; } spin_t;
static inline void spin_lock(spin_t *l)
{
    for (;;) {
        while (atomic_load_explicit(&l->v, memory_order_relaxed)) cpu_pause();
        if (!atomic_exchange_explicit(&l->v, 1, memory_order_acquire)) return;
    }
}
static inline void spin_unlock(spin_t *l) { atomic_store_explicit(&l->v, 0, memory_order_release); }

typedef struct mcs_node {
    _Atomic(struct mcs_node *) next;
    _Atomic int locked;
} mcs_node_t;
typedef struct { _Atomic(mcs_node_t *) tail; } mcs_t;
static inline void mcs_lock(mcs_t *l, mcs_node_t *me)
{
    atomic_store_explicit(&me->next, NULL, memory_order_relaxed);
    atomic_store_explicit(&me->locked, 1, memory_order_relaxed);
    mcs_node_t *prev = atomic_exchange_explicit(&l->tail, me, memory_order_acq_rel);
    if (!prev) return;
    atomic_store_explicit(&prev->next, me, memory_order_release);
    while (atomic_load_explicit(&me->locked, memory_order_acquire)) cpu_pause();
}
static inline void mcs_unlock(mcs_t *l, mcs_node_t *me)
{
    mcs_node_t *n = atomic_load_explicit(&me->next, memory_order_acquire);
    if (!n) {
        mcs_node_t *expect = me;
        if (atomic_compare_exchange_strong_explicit(&l->tail, &expect, NULL, memory_order_acq_rel,
                                                    memory_order_relaxed))
            return;
        while (!(n = atomic_load_explicit(&me->next, memory_order_acquire))) cpu_pause();
    }
    atomic_store_explicit(&n->locked, 0, memory_order_release);
}

typedef struct {
    union {
        pthread_mutex_t m;
        spin_t s;
        mcs_t q;
    };
    uint64_t count;
} __attribute__((aligned(64))) lobj_t;

enum { L_MUTEX, L_SPIN, L_MCS, L_ATOMIC };
static const char *lock_names[] = {"pthread_mutex", "ttas_spin", "mcs", "atomic_faa"};

struct lock_run {
    int kind;
    lobj_t *objs;
    uint32_t *ring;
    _Atomic int go, stop;
    _Atomic uint64_t ops;
    int pin;
    _Atomic unsigned next_idx; /* which core each thread takes */
    /* latency mode */
    double rate; /* per thread, ops/s; 0 = closed loop */
    uint64_t *lat;
    size_t nlat, caplat;
    pthread_mutex_t latmu;
};

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
        uint64_t gap = (uint64_t)(1e9 / r->rate), next = now_ns(), seed = tid + 1;
        size_t cap = 1u << 20, n = 0;
        uint64_t *lat = malloc(cap * sizeof *lat);
        while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
            uint64_t t;
            while ((t = now_ns()) < next) cpu_pause();
            lock_op(r, r->ring[pos], &me);
            pos = (pos + 1) & (RING - 1);
            uint64_t done = now_ns();
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
    atomic_fetch_add(&r->ops, ops);
    return NULL;
}

static double run_locks(int kind, uint32_t n, uint32_t *ring, double rate, struct lock_run *out_lat)
{
    struct lock_run r = {.kind = kind, .ring = ring, .rate = rate, .pin = bench_pin()};
    pthread_mutex_init(&r.latmu, NULL);
    r.objs = aligned_alloc(64, (size_t)n * sizeof(lobj_t));
    memset(r.objs, 0, (size_t)n * sizeof(lobj_t));
    if (kind == L_MUTEX)
        for (uint32_t i = 0; i < n; i++) pthread_mutex_init(&r.objs[i].m, NULL);
    double el = run_two_threads(lock_thread, &r, &r.go, &r.stop, dur_s);
    free(r.objs);
    if (out_lat) {
        out_lat->lat = r.lat;
        out_lat->nlat = r.nlat;
    } else {
        free(r.lat);
    }
    return (double)atomic_load(&r.ops) / el;
}

/* ---- delegation fetch-and-add ---- */
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

enum { D_APPLY, D_THEN };
struct deleg_run {
    int mode, dedicated;
    unsigned fibers, window;
    uint32_t *ring;
    uint32_t n;
    dsm_deleg_trust_t trusts[2];
    unsigned ntrustees;
    double t_end;
    _Atomic uint64_t ops;
    struct dfib *fibs[2]; /* per client thread, freed after the run */
    /* latency mode */
    double rate;
    uint64_t *lat;
    size_t nlat, caplat;
    pthread_mutex_t latmu;
};

struct dfib {
    struct deleg_run *r;
    uint32_t pos;
    uint64_t ops;
    unsigned inflight;
    _Atomic int *done;
};

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
    while (now_s() < r->t_end) {
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
    uint64_t d = now_ns() - q->t0;
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
        uint64_t gap = (uint64_t)(1e9 / r->rate), next = now_ns(), seed = 99;
        while (now_s() < r->t_end) {
            uint64_t t = now_ns();
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
    for (unsigned round = 0; (round & 15) || now_s() < r->t_end; round++) {
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

static double run_deleg(int mode, int dedicated, uint32_t n, uint32_t *ring, double rate, struct deleg_run *lat_out)
{
    struct deleg_run r = {.mode = mode, .dedicated = dedicated, .fibers = 64, .window = 512, .ring = ring, .n = n,
                          .rate = rate};
    dsm_deleg_config_t cfg = {.threads = 2, .dedicated = dedicated ? 1 : 0, .stack_size = 32 * 1024, .pin = bench_pin()};
    dsm_deleg_rt_t *rt;
    if (dsm_deleg_rt_create(&cfg, &rt) != DSM_OK) return 0;
    r.ntrustees = dedicated ? 1 : 2;
    uint64_t *arrays[2];
    for (unsigned t = 0; t < r.ntrustees; t++) {
        arrays[t] = calloc((size_t)n / r.ntrustees + 1, sizeof(uint64_t));
        dsm_deleg_entrust(rt, t, arrays[t], NULL, 0, &r.trusts[t]);
    }
    if (rate > 0) {
        r.caplat = 1u << 21;
        r.lat = malloc(r.caplat * sizeof *r.lat);
    }
    double t0 = now_s();
    r.t_end = t0 + dur_s;
    dsm_deleg_rt_run(rt, deleg_main, &r);
    double el = now_s() - t0;
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

/* ---- results ---- */
struct fig {
    char name[96];
    double value, anchor_value;
    char unit[16], anchor[64];
    int higher;
};
static struct fig figs[512];
static int nfigs;

static void add_fig(const char *name, double v, const char *unit, const char *anchor, double av, int higher)
{
    struct fig *f = &figs[nfigs++];
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->unit, sizeof f->unit, "%s", unit);
    snprintf(f->anchor, sizeof f->anchor, "%s", anchor);
    f->value = v;
    f->anchor_value = av;
    f->higher = higher;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void lat_stats(uint64_t *lat, size_t n, double *mean, double *p999)
{
    if (n == 0) {
        *mean = *p999 = 0;
        return;
    }
    /* drop the first 10% (warm-up) */
    size_t skip = n / 10;
    lat += skip;
    n -= skip;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)lat[i];
    *mean = s / (double)n / 1000.0;
    qsort(lat, n, sizeof *lat, cmp_u64);
    *p999 = (double)lat[(size_t)((double)(n - 1) * 0.999)] / 1000.0;
}

/* Seconds one `pause` takes on this core, timed now: every fetch-and-add
 * runs one, so a single object can never go faster than 1/pause operations
 * per second and two threads never faster than 2/pause, whatever the
 * synchronisation. */
static double pause_seconds(void)
{
    double best = 1;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_s();
        for (int i = 0; i < 1000000; i++) cpu_pause();
        double t = (now_s() - t0) / 1e6;
        if (t < best) best = t;
    }
    return best;
}

/* ---- fetch-and-add sweep ---- */
static void bench_faa(void)
{
    static const uint32_t sizes[] = {1, 4, 16, 64, 1024, 65536, 1048576};
    const char *dist_names[] = {"uniform", "zipf"};
    double pause_s = pause_seconds();
    printf("\n== fetch-and-add, 2 threads, Mops/s (one pause per critical section) ==\n");
    printf("pause: %.1f ns, so one object tops out at %.1f Mops/s and two threads at %.1f (column ceil)\n",
           pause_s * 1e9, 1e-6 / pause_s, 2e-6 / pause_s);
    printf("%-8s %-8s %9s %9s %9s %9s | %9s %9s %9s %9s | %6s %6s\n", "dist", "objects", "mutex", "spin", "mcs",
           "atomic", "apply-sh", "apply-ded", "then-sh", "then-ded", "ceil", "ratio");
    for (int d = 0; d < 2; d++)
        for (unsigned si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            uint32_t n = sizes[si];
            if (only_objects && n != only_objects) continue;
            uint32_t *ring = make_ring(n, d, 12345 + si);
            double lk[4], dl[4];
            for (int k = 0; k < 4; k++) lk[k] = run_locks(k, n, ring, 0, NULL) / 1e6;
            dl[0] = run_deleg(D_APPLY, 0, n, ring, 0, NULL) / 1e6;
            dl[1] = run_deleg(D_APPLY, 1, n, ring, 0, NULL) / 1e6;
            dl[2] = run_deleg(D_THEN, 0, n, ring, 0, NULL) / 1e6;
            dl[3] = run_deleg(D_THEN, 1, n, ring, 0, NULL) / 1e6;
            double best_lock = lk[0];
            int bl = 0;
            for (int k = 1; k < 3; k++)
                if (lk[k] > best_lock) best_lock = lk[k], bl = k;
            double best_d = dl[0];
            for (int k = 1; k < 4; k++)
                if (dl[k] > best_d) best_d = dl[k];
            double ceiling = (n == 1 ? 1e-6 : 2e-6) / pause_s;
            printf("%-8s %-8u %9.2f %9.2f %9.2f %9.2f | %9.2f %9.2f %9.2f %9.2f | %6.1f %6.2f\n", dist_names[d], n,
                   lk[0], lk[1], lk[2], lk[3], dl[0], dl[1], dl[2], dl[3], ceiling, best_d / best_lock);
            fflush(stdout);
            char name[96], anchor[64];
            const char *dn = d ? "zipf" : "uniform";
            char sz[16];
            if (n >= 1048576) snprintf(sz, sizeof sz, "%uM", n / 1048576);
            else if (n >= 1024) snprintf(sz, sizeof sz, "%uK", n / 1024);
            else snprintf(sz, sizeof sz, "%u", n);
            snprintf(name, sizeof name, "fetch_add_%sobj_%s", sz, dn);
            snprintf(anchor, sizeof anchor, "best_lock(%s)", lock_names[bl]);
            add_fig(name, best_d, "Mops/s", anchor, best_lock, 1);
            const char *modes[] = {"apply_shared", "apply_dedicated", "apply_then_shared", "apply_then_dedicated"};
            for (int k = 0; k < 4; k++) {
                snprintf(name, sizeof name, "fetch_add_%sobj_%s/%s", sz, dn, modes[k]);
                add_fig(name, dl[k], "Mops/s", anchor, best_lock, 1);
            }
            snprintf(name, sizeof name, "fetch_add_%sobj_%s/atomic_faa", sz, dn);
            add_fig(name, lk[3], "Mops/s", anchor, best_lock, 1);
            /* What any scheme could reach here, beside the same anchor: the
             * ratio bounds what fetch_add_*obj_* can ever show. */
            snprintf(name, sizeof name, "fetch_add_%sobj_%s/pause_ceiling", sz, dn);
            add_fig(name, ceiling, "Mops/s", anchor, best_lock, 1);
            free(ring);
        }
}

/* ---- latency vs offered load (64 objects, uniform) ---- */
/* One latency point of one method, run LAT_REPS times: this is a VM where a
 * run now and then loses the core for milliseconds, which in a single
 * 0.1-0.5 s run decides p99.9 (and even the mean) for whichever method it
 * hits; the median over runs keeps what is the method's own. */
#define LAT_REPS 5
static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void lat_point(int method, uint32_t *ring, double load, double *mean, double *p999)
{
    double m[LAT_REPS], p[LAT_REPS];
    for (int rep = 0; rep < LAT_REPS; rep++) {
        uint64_t *lat;
        size_t nlat;
        if (method < 2) {
            struct lock_run lr;
            run_locks(method == 0 ? L_MUTEX : L_MCS, 64, ring, load / 2, &lr);
            lat = lr.lat;
            nlat = lr.nlat;
        } else {
            /* dedicated: one client thread offers all the load */
            struct deleg_run dr;
            int dedicated = method == 2;
            run_deleg(D_THEN, dedicated, 64, ring, dedicated ? load : load / 2, &dr);
            lat = dr.lat;
            nlat = dr.nlat;
        }
        lat_stats(lat, nlat, &m[rep], &p[rep]);
        free(lat);
    }
    qsort(m, LAT_REPS, sizeof *m, cmp_dbl);
    qsort(p, LAT_REPS, sizeof *p, cmp_dbl);
    *mean = m[LAT_REPS / 2];
    *p999 = p[LAT_REPS / 2];
}

static void bench_latency(void)
{
    printf("\n== latency vs offered load, 64 objects uniform, mean / p99.9 in us (median of %d runs) ==\n",
           LAT_REPS);
    static const double loads[] = {0.5e6, 1e6, 2e6, 4e6};
    uint32_t *ring = make_ring(64, 0, 777);
    printf("%-10s %-22s %-22s %-22s %-22s\n", "Mops/s", "mutex", "mcs", "apply_then-dedicated",
           "apply_then-shared");
    for (unsigned li = 0; li < sizeof loads / sizeof *loads; li++) {
        double L = loads[li];
        double mean[4], p[4];
        for (int k = 0; k < 4; k++) lat_point(k, ring, L, &mean[k], &p[k]);
        printf("%-10.1f", L / 1e6);
        for (int k = 0; k < 4; k++) printf(" %9.2f / %-9.2f ", mean[k], p[k]);
        printf("\n");
        const char *nm[] = {"mutex", "mcs", "apply_then_dedicated", "apply_then_shared"};
        for (int k = 0; k < 4; k++) {
            char name[96];
            snprintf(name, sizeof name, "latency_64obj_%.1fMops/%s_mean", L / 1e6, nm[k]);
            add_fig(name, mean[k], "us", "mutex_mean", mean[0], 0);
            snprintf(name, sizeof name, "latency_64obj_%.1fMops/%s_p999", L / 1e6, nm[k]);
            add_fig(name, p[k], "us", "mutex_p999", p[0], 0);
        }
    }
    free(ring);
}

/* ---- key-value store ---- */
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
    while (now_s() < r->t_end) {
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
    double t0 = now_s();
    r.t_end = t0 + dur_s;
    dsm_deleg_rt_run(rt, kvd_main, &r);
    double el = now_s() - t0;
    dsm_kv_destroy(r.kv);
    dsm_deleg_rt_destroy(rt);
    return (double)atomic_load(&r.ops) / el;
}

static void bench_kv(void)
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
            add_fig(name, best_d, "Mops/s", m > rw ? "mutex_512shard" : "rwlock_512shard", best_l, 1);
            free(ring);
        }
}

/* ---- memcached: one load generator for both servers ---- */
struct lg_conn {
    int fd;
    unsigned outstanding;
    char rbuf[65536];
    size_t rlen;
};

/* Count complete responses in buf: VALUE blocks end at "END\r\n", others at a line. */
static size_t lg_consume(struct lg_conn *c, unsigned *done)
{
    size_t pos = 0;
    for (;;) {
        char *e = memchr(c->rbuf + pos, '\n', c->rlen - pos);
        if (!e) break;
        size_t linelen = (size_t)(e - (c->rbuf + pos)) + 1;
        if (linelen >= 6 && memcmp(c->rbuf + pos, "VALUE ", 6) == 0) {
            /* VALUE k f n\r\n<data>\r\nEND\r\n */
            char *sp = memrchr(c->rbuf + pos, ' ', linelen);
            unsigned vlen = (unsigned)strtoul(sp + 1, NULL, 10);
            size_t need = linelen + vlen + 2 + 5;
            if (c->rlen - pos < need) break;
            pos += need;
        } else {
            pos += linelen;
        }
        (*done)++;
    }
    memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
    c->rlen -= pos;
    return pos;
}

static double loadgen(uint16_t port, unsigned nconns, unsigned depth, uint32_t nkeys, double seconds)
{
    uint32_t *ring = make_ring(nkeys, 1, 31337);
    struct lg_conn *cs = calloc(nconns, sizeof *cs);
    int ep = epoll_create1(0);
    for (unsigned i = 0; i < nconns; i++) {
        cs[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        for (int tries = 0; connect(cs[i].fd, (struct sockaddr *)&a, sizeof a) != 0 && tries < 200; tries++)
            usleep(10000);
        int one = 1;
        setsockopt(cs[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
    }
    /* prefill every key */
    char val[33];
    memset(val, 'v', 32);
    val[32] = 0;
    for (uint32_t k = 0; k < nkeys;) {
        char buf[65536];
        size_t n = 0;
        unsigned batch = 0;
        while (k < nkeys && n < sizeof buf - 128) {
            n += (size_t)snprintf(buf + n, sizeof buf - n, "set key:%08u 0 0 32 noreply\r\n%s\r\n", k, val);
            k++;
            batch++;
        }
        if (write(cs[0].fd, buf, n) != (ssize_t)n) break;
    }
    /* a round trip so the prefill is applied before timing */
    if (write(cs[0].fd, "get key:00000000\r\n", 18) == 18) {
        unsigned d = 0;
        while (d == 0) {
            ssize_t r = read(cs[0].fd, cs[0].rbuf + cs[0].rlen, sizeof cs[0].rbuf - cs[0].rlen);
            if (r <= 0) break;
            cs[0].rlen += (size_t)r;
            lg_consume(&cs[0], &d);
        }
    }
    uint64_t seed = 5, ops = 0;
    uint32_t pos = 0;
    double t0 = now_s(), t_end = t0 + seconds;
    struct epoll_event evs[64];
    int running = 1;
    while (running) {
        if (now_s() >= t_end) running = 0;
        for (unsigned i = 0; i < nconns && running; i++) {
            struct lg_conn *c = &cs[i];
            if (c->outstanding >= depth / 2) continue;
            char buf[16384];
            size_t n = 0;
            while (c->outstanding < depth) {
                uint32_t k = ring[pos];
                pos = (pos + 1) & (RING - 1);
                if (xs(&seed) % 100 < 5)
                    n += (size_t)snprintf(buf + n, sizeof buf - n, "set key:%08u 0 0 32\r\n%s\r\n", k, val);
                else
                    n += (size_t)snprintf(buf + n, sizeof buf - n, "get key:%08u\r\n", k);
                c->outstanding++;
            }
            if (write(c->fd, buf, n) != (ssize_t)n) running = 0;
        }
        int ne = epoll_wait(ep, evs, 64, 10);
        for (int e = 0; e < ne; e++) {
            struct lg_conn *c = &cs[evs[e].data.u32];
            ssize_t r = read(c->fd, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen);
            if (r <= 0) {
                running = 0;
                continue;
            }
            c->rlen += (size_t)r;
            unsigned d = 0;
            lg_consume(c, &d);
            c->outstanding -= d;
            ops += d;
        }
    }
    double el = now_s() - t0;
    for (unsigned i = 0; i < nconns; i++) close(cs[i].fd);
    close(ep);
    free(cs);
    free(ring);
    return (double)ops / el;
}

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static void bench_memcached(void)
{
    printf("\n== memcached, 2 worker threads, zipf keys, 5%% writes, 32 B values, same load generator ==\n");
    const char *mc = getenv("DSM_MEMCACHED") ? getenv("DSM_MEMCACHED") : "/usr/bin/memcached";
    unsigned nconns = 8, depth = 32;
    uint32_t nkeys = quick ? 10000 : 100000;
    double secs = quick ? 2.0 : 5.0;
    /* stock memcached */
    double stock = 0;
    if (access(mc, X_OK) == 0) {
        uint16_t port = free_port();
        char portbuf[16];
        snprintf(portbuf, sizeof portbuf, "%u", port);
        pid_t pid = fork();
        if (pid == 0) {
            /* memcached refuses to run as root without -u */
            if (geteuid() == 0)
                execl(mc, mc, "-p", portbuf, "-U", "0", "-l", "127.0.0.1", "-t", "2", "-m", "512", "-c", "4096",
                      "-u", "root", (char *)NULL);
            else
                execl(mc, mc, "-p", portbuf, "-U", "0", "-l", "127.0.0.1", "-t", "2", "-m", "512", "-c", "4096",
                      (char *)NULL);
            _exit(127);
        }
        usleep(200000);
        stock = loadgen(port, nconns, depth, nkeys, secs);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    } else {
        printf("(no %s: stock memcached skipped)\n", mc);
    }
    /* the delegation server, in this process */
    dsm_mc_config_t cfg = {.workers = 2, .shards = 64};
    dsm_mc_server_t *srv;
    double deleg = 0;
    if (dsm_mc_start(&cfg, &srv) == DSM_OK) {
        deleg = loadgen(dsm_mc_port(srv), nconns, depth, nkeys, secs);
        dsm_mc_stop(srv);
    }
    printf("%-24s %12s %12s %8s\n", "", "stock(kops)", "deleg(kops)", "ratio");
    printf("%-24s %12.1f %12.1f %8.2f\n", "zipf, 5% writes", stock / 1e3, deleg / 1e3, stock > 0 ? deleg / stock : 0);
    add_fig("memcached_zipf_w5", deleg / 1e3, "kops/s", "stock_memcached_1.6", stock / 1e3, 1);
}

static void write_json(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return;
    }
    fprintf(f, "{\"bench\":\"trust\",\"figures\":[");
    for (int i = 0; i < nfigs; i++) {
        struct fig *g = &figs[i];
        double ratio = g->anchor_value > 0 ? g->value / g->anchor_value : 0;
        fprintf(f, "%s\n{\"name\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"anchor\":\"%s\",\"anchor_value\":%.6g,"
                   "\"ratio\":%.6g,\"better\":\"%s\"}",
                i ? "," : "", g->name, g->value, g->unit, g->anchor, g->anchor_value, ratio,
                g->higher ? "higher" : "lower");
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(f, "\n],\"env\":{\"threads\":2,\"cpus\":%ld,\"quick\":%s,\"duration_s\":%.3f}}\n", ncpu,
            quick ? "true" : "false", dur_s);
    fclose(f);
}

int main(int argc, char **argv)
{
    const char *json = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--objects") && i + 1 < argc) only_objects = (uint32_t)strtoul(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--quick] [--json PATH] [--only faa|latency|kv|memcached] [--objects N]\n",
                    argv[0]);
            return 2;
        }
    }
    dur_s = quick ? 0.12 : 0.5;
    signal(SIGPIPE, SIG_IGN);
    if (!only || !strcmp(only, "faa")) bench_faa();
    if (!only || !strcmp(only, "latency")) bench_latency();
    if (!only || !strcmp(only, "kv")) bench_kv();
    if (!only || !strcmp(only, "memcached")) bench_memcached();
    if (json) write_json(json);
    return 0;
}
