/* dsm-bench-loco: the in-process cluster, its chan objects, and the
 * measurements of barrier, ticket_lock, transactions and the kvstore's
 * fence; each node's part runs on a thread of its own (the node's one busy
 * thread), the figure read on node 0's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/loco/loco.h"
#include "dsm/clock.h"

#define SECRET "loco-bench-secret"
enum { T = 60000 /* ms: setup and waits, generous for a loaded shared host */ };

void loco_die(const char *what, dsm_status_t st)
{
    fprintf(stderr, "dsm-bench-loco: %s: %s (%s)\n", what, dsm_strerror(st), dsm_last_error());
    exit(1);
}

typedef struct job {
    loco_cluster_t *c;
    int i;
    double out;
    int fence;
    void *(*fn)(struct job *);
} job_t;

static void *job_main(void *arg)
{
    job_t *j = arg;
    return j->fn(j);
}

/* fn on every node at once; node 0's figure. */
static double on_nodes(loco_cluster_t *c, void *(*fn)(job_t *), int fence)
{
    job_t jobs[LOCO_MAX_NODES];
    pthread_t th[LOCO_MAX_NODES];
    for (int i = 0; i < c->p.nodes; i++) {
        jobs[i] = (job_t){.c = c, .i = i, .fn = fn, .fence = fence};
        if (pthread_create(&th[i], NULL, job_main, &jobs[i]) != 0)
            loco_die("thread", DSM_ERR_NOMEM);
    }
    for (int i = 0; i < c->p.nodes; i++) pthread_join(th[i], NULL);
    return jobs[0].out;
}

static void check(const char *what, dsm_status_t st)
{
    if (st != DSM_OK)
        loco_die(what, st);
}

static void txn_setup(loco_cluster_t *c, int i);
static void kv_setup(loco_cluster_t *c, int i);

static void *setup_job(job_t *j)
{
    loco_cluster_t *c = j->c;
    dsm_node_t *n = c->k.nodes[j->i];
    int i = j->i;
    check("barrier", dsm_chan_barrier_create(n, "loco/bar", T, &c->bar[i]));
    check("lock", dsm_chan_lock_create(n, "loco/lock", T, &c->lock[i]));
    check("word", dsm_chan_region_create(n, "loco/word", 64, T, &c->word[i]));
    if (c->p.txn)
        txn_setup(c, i);
    if (c->p.kv)
        kv_setup(c, i);
    check("barrier", dsm_chan_barrier_wait(c->bar[i], T));
    return NULL;
}

static void txn_setup(loco_cluster_t *c, int i)
{
    dsm_node_t *n = c->k.nodes[i];
    int P = c->p.nodes;
    size_t per = (size_t)((c->p.accounts + P - 1) / P) * 8;
    check("accounts", dsm_chan_region_create(n, "loco/accts", per, T, &c->accts[i]));
    for (int l = 0; l < LOCO_TXN_LOCKS; l++) {
        char name[32];
        snprintf(name, sizeof name, "loco/txn/%d", l);
        check("txn lock", dsm_chan_lock_create(n, name, T, &c->tlock[i][l]));
    }
    size_t len;
    int64_t *a = dsm_chan_region_mine(c->accts[i], &len);
    for (long k = 0; k < (c->p.accounts - i + P - 1) / P; k++) a[k] = LOCO_START_BALANCE;
}

static void kv_setup(loco_cluster_t *c, int i)
{
    dsm_node_t *n = c->k.nodes[i];
    int P = c->p.nodes;
    check("kvstore", dsm_chan_kv_create(n, "loco/kv", c->p.kv_slots, 16, 8, T, &c->kv[i]));
    /* node i inserts the keys i, i + P, ...: into its own slots */
    for (uint64_t k = (uint64_t)i; k < c->nkeys; k += (uint64_t)P)
        check("kvstore fill", dsm_chan_kv_put(c->kv[i], loco_key(k), &k));
}

void loco_start(loco_cluster_t *c, const loco_params_t *p)
{
    memset(c, 0, sizeof *c);
    c->p = *p;
    c->nkeys = (uint64_t)p->kv_slots * 8 / 10 * (uint64_t)p->nodes;
    /* one busy thread per node, the benchmark's own; progress threads block
     * (a busy one on node 1 serving the kvstore's client was slower on 2
     * shared cores) */
    dsm_harness_bench_init(&c->k, p->transport, SECRET, 0, 0);
    dsm_status_t st = dsm_harness_start(&c->k, p->nodes);
    if (st != DSM_OK)
        loco_die("cluster", st);
    on_nodes(c, setup_job, 0);
}

static void *teardown_job(job_t *j)
{
    loco_cluster_t *c = j->c;
    int i = j->i;
    check("barrier", dsm_chan_barrier_wait(c->bar[i], T));
    dsm_chan_kv_destroy(c->kv[i]);
    for (int l = 0; l < LOCO_TXN_LOCKS; l++) dsm_chan_lock_destroy(c->tlock[i][l]);
    dsm_chan_region_destroy(c->accts[i]);   /* each NULL-safe: the parts not built */
    dsm_chan_region_destroy(c->word[i]);
    dsm_chan_lock_destroy(c->lock[i]);
    check("barrier", dsm_chan_barrier_wait(c->bar[i], T));
    dsm_chan_barrier_destroy(c->bar[i]);
    return NULL;
}

void loco_stop(loco_cluster_t *c)
{
    on_nodes(c, teardown_job, 0);
    dsm_harness_stop(&c->k);
}

/* ---- round trip ------------------------------------------------------------ */

double loco_rtt_us(loco_cluster_t *c)
{
    uint64_t v;
    long n = c->p.rtt_ops;
    for (long i = 0; i < n / 10; i++) check("get", dsm_chan_region_get(c->word[0], 1, 0, &v, 8));
    uint64_t t0 = dsm_now_ns();
    for (long i = 0; i < n; i++) check("get", dsm_chan_region_get(c->word[0], 1, 0, &v, 8));
    return (double)(dsm_now_ns() - t0) / 1e3 / (double)n;
}

/* ---- barrier -------------------------------------------------------------- */

static void *barrier_job(job_t *j)
{
    dsm_chan_barrier_t *b = j->c->bar[j->i];
    check("barrier", dsm_chan_barrier_wait(b, T));
    uint64_t t0 = dsm_now_ns();
    for (long r = 0; r < j->c->p.barriers; r++) check("barrier", dsm_chan_barrier_wait(b, T));
    j->out = (double)(dsm_now_ns() - t0) / 1e3 / (double)j->c->p.barriers;
    return NULL;
}

double loco_barrier_us(loco_cluster_t *c) { return on_nodes(c, barrier_job, 0); }

/* ---- one contended lock ----------------------------------------------------- */

static void *lock_job(job_t *j)
{
    loco_cluster_t *c = j->c;
    int i = j->i;
    dsm_chan_lock_t *l = c->lock[i];
    dsm_chan_region_t *w = c->word[i];
    if (i == 0) {
        size_t len;
        *(volatile uint64_t *)dsm_chan_region_mine(w, &len) = 0;
    }
    check("barrier", dsm_chan_barrier_wait(c->bar[i], T));
    uint64_t t0 = dsm_now_ns();
    for (long k = 0; k < c->p.lock_ops; k++) {
        uint64_t v;
        check("acquire", dsm_chan_lock_acquire(l, T));
        check("get", dsm_chan_region_get(w, 0, 0, &v, 8));
        v++;
        check("put", dsm_chan_region_put(w, 0, 0, &v, 8));
        check("release", dsm_chan_lock_release(l, DSM_CHAN_FENCE_THREAD));
    }
    double secs = (double)(dsm_now_ns() - t0) / 1e9;
    check("barrier", dsm_chan_barrier_wait(c->bar[i], T));
    if (i == 0) {
        size_t len;
        uint64_t got = *(volatile uint64_t *)dsm_chan_region_mine(w, &len);
        uint64_t want = (uint64_t)c->p.lock_ops * (uint64_t)c->p.nodes;
        if (got != want) {
            fprintf(stderr, "dsm-bench-loco: the lock's word is %llu after %llu increments: the lock failed\n",
                    (unsigned long long)got, (unsigned long long)want);
            exit(1);
        }
    }
    j->out = secs;
    return NULL;
}

double loco_lock_mops(loco_cluster_t *c)
{
    double secs = on_nodes(c, lock_job, 0);
    return (double)c->p.lock_ops * c->p.nodes / secs / 1e6;
}

/* ---- transactions ---------------------------------------------------------- */

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *txn_job(job_t *j)
{
    loco_cluster_t *c = j->c;
    int i = j->i, P = c->p.nodes;
    uint64_t A = (uint64_t)c->p.accounts, s = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    dsm_chan_region_t *r = c->accts[i];
    check("barrier", dsm_chan_barrier_wait(c->bar[i], T));
    uint64_t t0 = dsm_now_ns();
    for (long k = 0; k < c->p.txn_ops; k++) {
        uint64_t a = xorshift(&s) % A, b = xorshift(&s) % (A - 1);
        if (b >= a)
            b++;
        uint32_t la = (uint32_t)(a % LOCO_TXN_LOCKS), lb = (uint32_t)(b % LOCO_TXN_LOCKS);
        uint32_t lo = la < lb ? la : lb, hi = la < lb ? lb : la;
        check("acquire", dsm_chan_lock_acquire(c->tlock[i][lo], T));
        if (hi != lo)
            check("acquire", dsm_chan_lock_acquire(c->tlock[i][hi], T));
        uint32_t pa = (uint32_t)(a % (uint64_t)P), pb = (uint32_t)(b % (uint64_t)P);
        uint64_t oa = a / (uint64_t)P * 8, ob = b / (uint64_t)P * 8;
        int64_t va, vb;
        dsm_chan_t *ch = dsm_chan_region_chan(r);
        dsm_chan_ack_t key = {{0}};
        check("get", dsm_chan_get_async(ch, pa, 0, oa, &va, 8, &key));
        check("get", dsm_chan_get_async(ch, pb, 0, ob, &vb, 8, &key));
        check("get", dsm_chan_ack_wait(&key));
        int64_t x = (int64_t)(xorshift(&s) % 10) + 1;
        va -= x;
        vb += x;
        check("put", dsm_chan_put_async(ch, pa, 0, oa, &va, 8, &key));
        check("put", dsm_chan_put_async(ch, pb, 0, ob, &vb, 8, &key));
        check("put", dsm_chan_ack_wait(&key));
        /* one fence for both writes, then both releases */
        if (hi != lo)
            check("release", dsm_chan_lock_release(c->tlock[i][hi], DSM_CHAN_FENCE_THREAD));
        check("release", dsm_chan_lock_release(c->tlock[i][lo], hi != lo ? DSM_CHAN_FENCE_NONE
                                                                          : DSM_CHAN_FENCE_THREAD));
    }
    j->out = (double)(dsm_now_ns() - t0) / 1e9;
    check("barrier", dsm_chan_barrier_wait(c->bar[i], T));
    return NULL;
}

double loco_txn_mops(loco_cluster_t *c)
{
    double secs = on_nodes(c, txn_job, 0);
    int64_t total = 0;
    for (int i = 0; i < c->p.nodes; i++) {
        size_t len;
        const int64_t *a = dsm_chan_region_mine(c->accts[i], &len);
        for (long k = 0; k < (c->p.accounts - i + c->p.nodes - 1) / c->p.nodes; k++) total += a[k];
    }
    if (total != (int64_t)c->p.accounts * LOCO_START_BALANCE) {
        fprintf(stderr, "dsm-bench-loco: transactions: the total is %lld, want %lld: money was lost\n",
                (long long)total, (long long)c->p.accounts * LOCO_START_BALANCE);
        exit(1);
    }
    return (double)c->p.txn_ops * c->p.nodes / secs / 1e6;
}

/* ---- the kvstore's fence --------------------------------------------------- */

/* Updates of keys node 1 hosts (it inserted them: their slots are there),
 * in blocks alternating with and without the fence, so drift on a shared
 * host hits both alike. */
void loco_fence_us(loco_cluster_t *c, double *with_us, double *without_us)
{
    enum { BLOCKS = 10 };
    dsm_chan_kv_t *kv = c->kv[0];
    uint64_t P = (uint64_t)c->p.nodes, keys = c->nkeys / P, ns[2] = {0, 0};
    long per = c->p.fence_ops / BLOCKS > 0 ? c->p.fence_ops / BLOCKS : 1, k = 0;
    for (int b = 0; b < 2 * BLOCKS; b++) {
        int fence = b % 2 == 0;
        dsm_chan_kv_set_fence(kv, fence);
        uint64_t t0 = dsm_now_ns();
        for (long i = 0; i < per; i++, k++) {
            uint64_t idx = ((uint64_t)k % keys) * P + 1;
            check("update", dsm_chan_kv_put(kv, loco_key(idx), &idx));
        }
        ns[fence] += dsm_now_ns() - t0;
    }
    dsm_chan_kv_set_fence(kv, 1);
    *with_us = (double)ns[1] / 1e3 / (double)(per * BLOCKS);
    *without_us = (double)ns[0] / 1e3 / (double)(per * BLOCKS);
}

/* ---- the fence's scopes ------------------------------------------------------ */

/* A put to node 1's copy of the word region (past the lock's word, which
 * lives on node 0), then a pair, thread or global fence, in blocks that
 * rotate through the scopes so drift on a shared host hits each alike. */
void loco_fence_scopes_us(loco_cluster_t *c, double us[3])
{
    enum { BLOCKS = 10 };
    dsm_chan_region_t *r = c->word[0];
    dsm_chan_t *ch = dsm_chan_region_chan(r);
    dsm_node_t *node = c->k.nodes[0];
    long per = c->p.fence_ops / BLOCKS > 0 ? c->p.fence_ops / BLOCKS : 1;
    uint64_t ns[3] = {0, 0, 0}, v = 0;
    for (int b = 0; b < 3 * BLOCKS; b++) {
        int scope = (b + b / 3) % 3;
        uint64_t t0 = dsm_now_ns();
        for (long i = 0; i < per; i++, v++) {
            check("put", dsm_chan_region_put(r, 1, 8, &v, sizeof v));
            check("fence", scope == 0   ? dsm_chan_fence_pair(ch, 1)
                           : scope == 1 ? dsm_chan_fence_thread(node)
                                        : dsm_chan_fence_global(node));
        }
        ns[scope] += dsm_now_ns() - t0;
    }
    for (int s = 0; s < 3; s++) us[s] = (double)ns[s] / 1e3 / (double)(per * BLOCKS);
}

/* ---- the kvstore workload, LOCO's side ------------------------------------- */

double loco_kv_mops(loco_cluster_t *c, const loco_ops_t *o, size_t window, long min_ms)
{
    return loco_kv_mops_puts(c, o, window, min_ms, 0);
}

double loco_kv_mops_puts(loco_cluster_t *c, const loco_ops_t *o, size_t window, long min_ms, int one_by_one)
{
    dsm_chan_kv_t *kv = c->kv[0];
    uint64_t keys[DSM_CHAN_ACK_BITS], vals[DSM_CHAN_ACK_BITS], pkeys[DSM_CHAN_ACK_BITS], pvals[DSM_CHAN_ACK_BITS];
    int found[DSM_CHAN_ACK_BITS];
    uint64_t t0 = dsm_now_ns(), until = t0 + (uint64_t)min_ms * 1000000u, done = 0;
    do {
        done += o->n;
        for (size_t at = 0; at < o->n; at += window) {
            size_t end = at + window < o->n ? at + window : o->n;
            uint32_t ng = 0, np = 0;
            for (size_t k = at; k < end; k++) {
                if (!o->put[k]) {
                    keys[ng++] = loco_key(o->key[k]);
                } else if (one_by_one) {
                    check("put", dsm_chan_kv_put(kv, loco_key(o->key[k]), &(uint64_t){o->key[k] + k}));
                } else {
                    pkeys[np] = loco_key(o->key[k]);
                    pvals[np++] = o->key[k] + k;
                }
            }
            if (np > 0)
                check("put_many", dsm_chan_kv_put_many(kv, pkeys, np, pvals));
            if (ng > 0) {
                check("get", dsm_chan_kv_get_many(kv, keys, ng, vals, found));
                for (uint32_t g = 0; g < ng; g++)
                    if (!found[g])
                        loco_die("get: a key that was put is missing", DSM_ERR_INVALID);
            }
        }
    } while (dsm_now_ns() < until);
    return (double)done / ((double)(dsm_now_ns() - t0) / 1e3);
}

static double ctx_switches(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_nvcsw + (double)u.ru_nivcsw;
}

void loco_kv_count(loco_cluster_t *c, const loco_ops_t *o, size_t window, int one_by_one, loco_kv_counts_t *out)
{
    dsm_stats_t a0, a1, b0, b1;
    dsm_node_stats(c->k.nodes[0], &a0);
    dsm_node_stats(c->k.nodes[1], &a1);
    double cs = ctx_switches();
    uint64_t t0 = dsm_now_ns();
    (void)loco_kv_mops_puts(c, o, window, 0, one_by_one);
    double ns = (double)(dsm_now_ns() - t0);
    cs = ctx_switches() - cs;
    dsm_node_stats(c->k.nodes[0], &b0);
    dsm_node_stats(c->k.nodes[1], &b1);
    double n = (double)o->n;
#define PER(x, y) ((double)((y) - (x)) / n)
    *out = (loco_kv_counts_t){
        .client_sent = PER(a0.am_sent, b0.am_sent),
        .client_recv = PER(a0.am_recv, b0.am_recv),
        .server_recv = PER(a1.am_recv, b1.am_recv),
        .server_sent = PER(a1.am_sent, b1.am_sent),
        .server_dispatches = PER(a1.am_recv_by_handler[DSM_AM_RMA_HANDLER], b1.am_recv_by_handler[DSM_AM_RMA_HANDLER]),
        .deferred = PER(a0.deferred, b0.deferred),
        .deferred_batches = PER(a0.deferred_batches, b0.deferred_batches),
        .client_waits = PER(a0.waits, b0.waits),
        .client_sleeps = PER(a0.wait_sleeps, b0.wait_sleeps),
        .server_wakeups = PER(a1.progress_wakeups, b1.progress_wakeups),
        .server_cpu_us = PER(a1.progress_cpu_ns, b1.progress_cpu_ns) / 1e3,
        .ctx_switches = cs / n,
        .us = ns / 1e3 / n,
    };
#undef PER
}
