/* chan's objects over shm and tcp, 3 nodes, one thread per node (two for
 * the lock): the barrier lets nobody out of a round before all entered it,
 * round after round; a counter incremented non-atomically under the ticket
 * lock from every thread of every node comes out exact, the lock's local
 * hand-overs within their bound; readers of a
 * multi-word owned_var, pushed and pulled, never see a mix of two values,
 * and one whose checksum never settles fails after its bound; atomic_var
 * and sst; ack keys and fences; a ringbuffer's mixed-size messages arrive
 * whole and in order through wraps and flow control; every value pushed
 * to a shared_queue from every node is popped exactly once, and a pop
 * that waits gets the value pushed after it began. Then under
 * the chaos fabric, seed 7 (late and split writes, delayed messages),
 * atomic_var and sst too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "chan_util.h"

/* ---- barrier ---- */

enum { ROUNDS = 300 };
static int entered[ROUNDS + 1];

static void *barrier_job(void *arg)
{
    job_t *j = arg;
    dsm_chan_barrier_t *b;
    if ((j->st = dsm_chan_barrier_create(j->c->nodes[j->i], "test/barrier", T, &b)) != DSM_OK)
        return NULL;
    for (int r = 1; r <= ROUNDS && j->st == DSM_OK; r++) {
        __atomic_fetch_add(&entered[r], 1, __ATOMIC_SEQ_CST);
        j->st = dsm_chan_barrier_wait(b, T);
        /* out of round r: everybody must have entered it */
        if (__atomic_load_n(&entered[r], __ATOMIC_SEQ_CST) != N)
            j->bad++;
    }
    /* nobody may destroy it while another still waits in the last round */
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_barrier(void **state)
{
    job_t jobs[N];
    memset(entered, 0, sizeof entered);
    on_all(*state, barrier_job, jobs, NULL);
}

/* ---- ticket lock ---- */

enum { LOCK_THREADS = 2, HANDOVER = 2 /* hand-overs in a row, at most */ };
typedef struct lock_node {
    dsm_chan_lock_t *lock;
    dsm_chan_region_t *ctr;
    dsm_node_t *node;
    int iters;
    dsm_status_t st;
} lock_node_t;

static void *lock_worker(void *arg)
{
    lock_node_t *ln = arg;
    for (int k = 0; k < ln->iters && ln->st == DSM_OK; k++) {
        dsm_status_t st = dsm_chan_lock_acquire(ln->lock, T);
        uint64_t v = 0;
        if (st == DSM_OK)
            st = dsm_chan_region_get(ln->ctr, 0, 0, &v, 8);
        v++;
        if (st == DSM_OK)
            st = dsm_chan_region_put(ln->ctr, 0, 0, &v, 8);
        dsm_status_t rs = dsm_chan_lock_release(ln->lock, DSM_CHAN_FENCE_THREAD);
        if (st == DSM_OK)
            st = rs;
        if (st != DSM_OK)
            ln->st = st;
    }
    return NULL;
}

static void *lock_job(void *arg)
{
    job_t *j = arg;
    lock_node_t ln = {.node = j->c->nodes[j->i], .iters = j->c->transport == DSM_TRANSPORT_TCP ? 40 : 150};
    dsm_chan_barrier_t *b;
    if ((j->st = dsm_chan_barrier_create(ln.node, "lock/bar", T, &b)) != DSM_OK)
        return NULL;
    if ((j->st = dsm_chan_lock_create(ln.node, "lock/l", T, &ln.lock)) != DSM_OK ||
        (j->st = dsm_chan_region_create(ln.node, "lock/ctr", 64, T, &ln.ctr)) != DSM_OK)
        return NULL;
    dsm_chan_lock_set_handover(ln.lock, HANDOVER);
    pthread_t th[LOCK_THREADS];
    for (int t = 0; t < LOCK_THREADS; t++) pthread_create(&th[t], NULL, lock_worker, &ln);
    for (int t = 0; t < LOCK_THREADS; t++) pthread_join(th[t], NULL);
    j->st = ln.st;
    uint64_t acquired = 0, handed = 0;
    dsm_chan_lock_counts(ln.lock, &acquired, &handed);
    if (acquired != (uint64_t)LOCK_THREADS * (uint64_t)ln.iters)
        j->bad++;
    /* the local hand-over is bounded: each ticket served is followed by
     * at most HANDOVER of them */
    if (handed > (uint64_t)HANDOVER * (acquired - handed)) {
        print_error("%llu of %llu acquisitions handed over locally, bound %d in a row\n", (unsigned long long)handed,
                    (unsigned long long)acquired, HANDOVER);
        j->bad++;
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);   /* every node done */
    if (j->st == DSM_OK && j->i == 0) {
        uint64_t *mine = dsm_chan_region_mine(ln.ctr, NULL);
        j->count = __atomic_load_n(mine, __ATOMIC_ACQUIRE);
        if (j->count != (uint64_t)N * LOCK_THREADS * (uint64_t)ln.iters) {
            print_error("counter %llu, want %llu\n", (unsigned long long)j->count,
                        (unsigned long long)N * LOCK_THREADS * (uint64_t)ln.iters);
            j->bad++;
        }
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);   /* nobody still reading before teardown */
    dsm_chan_lock_destroy(ln.lock);
    dsm_chan_region_destroy(ln.ctr);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_ticket_lock(void **state)
{
    job_t jobs[N];
    on_all(*state, lock_job, jobs, NULL);
    assert_true(jobs[0].count > 0);
}

/* ---- owned_var: torn reads ---- */

enum { WORDS = 8, STORES = 400 };

static dsm_status_t check_value(const uint64_t *v, uint64_t *last, uint64_t *bad)
{
    for (int w = 1; w < WORDS; w++)
        if (v[w] != v[0]) {
            (*bad)++;
            return DSM_OK;
        }
    if (v[0] < *last)
        (*bad)++;
    *last = v[0];
    return DSM_OK;
}

static void *owned_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_mode_t mode = *(dsm_chan_mode_t *)j->shared;
    dsm_chan_owned_t *v;
    dsm_chan_barrier_t *b;
    const char *name = mode == DSM_CHAN_PUSH ? "ov/push" : "ov/pull";
    char bname[32];
    snprintf(bname, sizeof bname, "%s/bar", name);
    if ((j->st = dsm_chan_barrier_create(node, bname, T, &b)) != DSM_OK ||
        (j->st = dsm_chan_owned_create(node, name, 0, WORDS * 8, mode, T, &v)) != DSM_OK)
        return NULL;
    uint64_t val[WORDS];
    if (j->i == 0) {
        for (uint64_t s = 1; s <= STORES && j->st == DSM_OK; s++) {
            for (int w = 0; w < WORDS; w++) val[w] = s;
            dsm_chan_ack_t key = {{0}};
            j->st = dsm_chan_owned_store(v, val, s % 2 ? &key : NULL);
            if (j->st == DSM_OK && s % 2)
                j->st = dsm_chan_ack_wait(&key);
        }
    } else {
        uint64_t last = 0;
        uint64_t deadline = dsm_deadline_ns(T);
        while (last < STORES && j->st == DSM_OK) {
            j->st = dsm_chan_owned_load(v, val);
            if (j->st == DSM_OK)
                check_value(val, &last, &j->bad);
            j->count++;
            if (dsm_now_ns() > deadline)
                j->st = DSM_ERR_TIMEOUT;
        }
    }
    /* the writer must not store while a reader is still checking */
    if (j->st == DSM_OK && mode == DSM_CHAN_PUSH && j->i == 1) {
        /* a copy that never settles: the read gives up after its bound */
        uint64_t *copy = dsm_chan_region_local(dsm_chan_owned_chan(v), 0, NULL);
        __atomic_store_n(&copy[3], 0xdeadbeefull, __ATOMIC_RELAXED);
        dsm_chan_owned_set_settle_ms(v, 200);
        dsm_clear_last_error();
        if (dsm_chan_owned_load(v, val) != DSM_ERR_TIMEOUT || !strstr(dsm_last_error(), "did not settle"))
            j->bad++;
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_owned_destroy(v);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_owned_push(void **state)
{
    job_t jobs[N];
    dsm_chan_mode_t mode = DSM_CHAN_PUSH;
    on_all(*state, owned_job, jobs, &mode);
    assert_true(jobs[1].count > 0 && jobs[2].count > 0);
}

static void test_owned_pull(void **state)
{
    job_t jobs[N];
    dsm_chan_mode_t mode = DSM_CHAN_PULL;
    on_all(*state, owned_job, jobs, &mode);
}

/* ---- atomic_var and sst ---- */

enum { ADDS = 100, ROW = 24 };

static void *atomic_sst_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_atomic_t *a;
    dsm_chan_sst_t *s;
    dsm_chan_barrier_t *b;
    if ((j->st = dsm_chan_barrier_create(node, "as/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_atomic_create(node, "as/a", 1, T, &a)) != DSM_OK ||
        (j->st = dsm_chan_sst_create(node, "as/sst", ROW, T, &s)) != DSM_OK)
        return NULL;
    for (int k = 0; k < ADDS && j->st == DSM_OK; k++) j->st = dsm_chan_atomic_fetch_add(a, 1, NULL);
    uint8_t row[ROW];
    memset(row, 0x10 + j->i, sizeof row);
    dsm_chan_ack_t key = {{0}};
    if (j->st == DSM_OK && (j->st = dsm_chan_sst_store_mine(s, row)) == DSM_OK &&
        (j->st = dsm_chan_sst_push_broadcast(s, &key)) == DSM_OK)
        j->st = dsm_chan_ack_wait(&key);
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);   /* everyone added and pushed (fenced) */
    uint64_t v = 0;
    if (j->st == DSM_OK && (j->st = dsm_chan_atomic_load(a, &v)) == DSM_OK && v != (uint64_t)N * ADDS)
        j->bad++;
    for (uint32_t p = 0; p < N && j->st == DSM_OK; p++) {
        uint8_t got[ROW], want[ROW];
        memset(want, 0x10 + (int)p, sizeof want);
        if ((j->st = dsm_chan_sst_read(s, p, got)) == DSM_OK && memcmp(got, want, ROW) != 0)
            j->bad++;
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);   /* everyone loaded */
    uint64_t old = 0;
    if (j->st == DSM_OK && j->i == 2 && ((j->st = dsm_chan_atomic_cas(a, N * ADDS, 7, &old)) != DSM_OK ||
                                         old != (uint64_t)N * ADDS || dsm_chan_atomic_load(a, &v) != DSM_OK || v != 7))
        j->bad++;
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_atomic_destroy(a);
    dsm_chan_sst_destroy(s);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_atomic_and_sst(void **state)
{
    job_t jobs[N];
    on_all(*state, atomic_sst_job, jobs, NULL);
}

/* ---- ack keys and fences ---- */

enum { OPS = 300 /* more than a thread's 128 slots */, FENCE_REPS = 200, FENCE_RUNS = 5 };

static uint64_t fence_ns(dsm_chan_region_t *r, dsm_node_t *node, int scope)
{
    uint64_t v = 1, t0 = dsm_now_ns();
    for (int k = 0; k < FENCE_REPS; k++) {
        dsm_chan_region_put(r, 1, 8, &v, 8);
        if (scope == DSM_CHAN_FENCE_THREAD)
            dsm_chan_fence_thread(node);
        else
            dsm_chan_fence_global(node);
    }
    return (dsm_now_ns() - t0) / FENCE_REPS;
}

static void *ack_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_region_t *r;
    dsm_chan_barrier_t *b;
    if ((j->st = dsm_chan_barrier_create(node, "ack/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_region_create(node, "ack/r", OPS * 8 * N, T, &r)) != DSM_OK)
        return NULL;
    /* Every node writes its slice of every peer's copy: keys per peer,
     * unioned, tested until done; then a thread fence places them. */
    dsm_chan_ack_t keys[N] = {{{0}}}, all = {{0}};
    for (uint64_t k = 0; k < OPS && j->st == DSM_OK; k++)
        for (uint32_t p = 0; p < N && j->st == DSM_OK; p++) {
            uint64_t v = ((uint64_t)j->i << 32) | (k + 1);
            j->st = dsm_chan_put_async(dsm_chan_region_chan(r), p, 0, ((uint64_t)j->i * OPS + k) * 8, &v, 8, &keys[p]);
        }
    for (uint32_t p = 0; p < N; p++) dsm_chan_ack_union(&all, &keys[p]);
    dsm_status_t ost = DSM_OK;
    uint64_t deadline = dsm_deadline_ns(T);
    while (j->st == DSM_OK && !dsm_chan_ack_test(&all, &ost) && dsm_now_ns() < deadline) {
    }
    if (j->st == DSM_OK && (!dsm_chan_ack_empty(&all) || ost != DSM_OK))
        j->bad++;
    for (uint32_t p = 0; p < N && j->st == DSM_OK; p++) j->st = dsm_chan_ack_wait(&keys[p]);
    if (j->st == DSM_OK)
        j->st = dsm_chan_fence_thread(node);
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    /* After the writers' fences and the barrier, every slice is here. */
    const uint64_t *mine = dsm_chan_region_mine(r, NULL);
    for (uint64_t w = 0; w < (uint64_t)OPS * N && j->st == DSM_OK; w++)
        if (__atomic_load_n(&mine[w], __ATOMIC_ACQUIRE) != (((w / OPS) << 32) | (w % OPS + 1)))
            j->bad++;
    if (j->st == DSM_OK)
        j->st = dsm_chan_fence_pair(dsm_chan_region_chan(r), (uint32_t)(j->i + 1) % N);
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    /* The fences' cost, node 0 alone: a put then a thread fence (one read
     * of the peer written) against a put then a global fence (the
     * fabric's flush of every peer); medians of interleaved runs. */
    if (j->st == DSM_OK && j->i == 0) {
        uint64_t th[FENCE_RUNS], gl[FENCE_RUNS];
        for (int run = 0; run < FENCE_RUNS; run++) {
            if (run % 2) {
                gl[run] = fence_ns(r, node, DSM_CHAN_FENCE_GLOBAL);
                th[run] = fence_ns(r, node, DSM_CHAN_FENCE_THREAD);
            } else {
                th[run] = fence_ns(r, node, DSM_CHAN_FENCE_THREAD);
                gl[run] = fence_ns(r, node, DSM_CHAN_FENCE_GLOBAL);
            }
        }
        qsort(th, FENCE_RUNS, sizeof th[0], cmp_u64);
        qsort(gl, FENCE_RUNS, sizeof gl[0], cmp_u64);
        print_message("%s: put+thread fence %llu ns (%llu-%llu), put+global fence %llu ns (%llu-%llu), ratio %.2f\n",
                      j->c->transport == DSM_TRANSPORT_TCP ? "tcp" : "shm", (unsigned long long)th[FENCE_RUNS / 2],
                      (unsigned long long)th[0], (unsigned long long)th[FENCE_RUNS - 1],
                      (unsigned long long)gl[FENCE_RUNS / 2], (unsigned long long)gl[0],
                      (unsigned long long)gl[FENCE_RUNS - 1], (double)gl[FENCE_RUNS / 2] / (double)th[FENCE_RUNS / 2]);
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_region_destroy(r);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_acks_and_fences(void **state)
{
    job_t jobs[N];
    on_all(*state, ack_job, jobs, NULL);
}

/* ---- ringbuffer ---- */

enum { MSGS = 1500, RING = 1024 /* bytes: wraps every few messages, the sender waits for acks */ };

static size_t msg_len(uint64_t k) { return 1 + (size_t)(k * 37 % 200); }

static void *ring_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_ring_t *r;
    dsm_chan_barrier_t *b;
    if ((j->st = dsm_chan_barrier_create(node, "ring/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_ring_create(node, "ring/r", 0, RING, T, &r)) != DSM_OK)
        return NULL;
    uint8_t buf[256];
    if (j->i == 0) {
        /* wrong side, wrong sizes */
        size_t got;
        if (dsm_chan_ring_recv(r, buf, sizeof buf, &got, 10) != DSM_ERR_STATE ||
            dsm_chan_ring_send(r, buf, RING / 4 + 1, T) != DSM_ERR_INVALID)
            j->bad++;
        for (uint64_t k = 0; k < MSGS && j->st == DSM_OK; k++) {
            size_t n = msg_len(k);
            for (size_t x = 0; x < n; x++) buf[x] = (uint8_t)(k * 7 + x);
            j->st = dsm_chan_ring_send(r, buf, n, T);
        }
    } else {
        for (uint64_t k = 0; k < MSGS && j->st == DSM_OK; k++) {
            size_t n = 0;
            if (k == 5 && (dsm_chan_ring_recv(r, buf, 0, &n, T) != DSM_ERR_TOO_BIG || n != msg_len(k)))
                j->bad++;   /* too small a buffer: told the length, not consumed */
            if ((j->st = dsm_chan_ring_recv(r, buf, sizeof buf, &n, T)) != DSM_OK)
                break;
            if (n != msg_len(k))
                j->bad++;
            for (size_t x = 0; x < n; x++)
                if (buf[x] != (uint8_t)(k * 7 + x)) {
                    j->bad++;
                    break;
                }
            j->count++;
        }
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_ring_destroy(r);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_ringbuffer(void **state)
{
    job_t jobs[N];
    on_all(*state, ring_job, jobs, NULL);
    assert_int_equal(jobs[1].count, MSGS);
    assert_int_equal(jobs[2].count, MSGS);
}

/* ---- shared_queue ---- */

enum { PUSHES = 150, QCAP = 32 /* far fewer than the pushes: wraps and fills */ };
static uint8_t popped[N][PUSHES];
static int total_popped;

static void *queue_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_queue_t *q;
    dsm_chan_barrier_t *b;
    if ((j->st = dsm_chan_barrier_create(node, "queue/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_queue_create(node, "queue/q", QCAP, T, &q)) != DSM_OK)
        return NULL;
    /* every node pushes its values and pops until all pushes are popped */
    uint64_t next = 0, deadline = dsm_deadline_ns(2 * T);
    while (j->st == DSM_OK && __atomic_load_n(&total_popped, __ATOMIC_SEQ_CST) < N * PUSHES) {
        if (next < PUSHES) {
            dsm_status_t st = dsm_chan_queue_push(q, (uint64_t)j->i << 32 | next, 1);
            if (st == DSM_OK)
                next++;
            else if (st != DSM_ERR_BUSY)
                j->st = st;
        }
        uint64_t v;
        int got = 0;
        if (j->st == DSM_OK && (j->st = dsm_chan_queue_pop(q, &v, &got, T)) == DSM_OK && got) {
            uint64_t from = v >> 32, k = v & 0xffffffffu;
            if (from >= N || k >= PUSHES || __atomic_fetch_add(&popped[from][k], 1, __ATOMIC_SEQ_CST) != 0)
                j->bad++;   /* a value nobody pushed, or popped twice */
            __atomic_fetch_add(&total_popped, 1, __ATOMIC_SEQ_CST);
            j->count++;
        }
        if (dsm_now_ns() > deadline)
            j->st = DSM_ERR_TIMEOUT;
    }
    uint64_t v;
    int got = 1;
    if (j->st == DSM_OK && ((j->st = dsm_chan_queue_pop(q, &v, &got, T)) != DSM_OK || got))
        j->bad++;   /* empty now: a pop takes no ticket */
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_queue_destroy(q);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

/* A pop that waits: on an empty queue it times out; node 0 waits before
 * node 1 pushes, and gets exactly that value. */
static int waiting;

static void *pop_wait_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_queue_t *q;
    dsm_chan_barrier_t *b;
    if ((j->st = dsm_chan_barrier_create(node, "qwait/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_queue_create(node, "qwait/q", 4, T, &q)) != DSM_OK)
        return NULL;
    uint64_t v = 0;
    if (j->i == 0) {
        if (dsm_chan_queue_pop_wait(q, &v, 1) != DSM_ERR_TIMEOUT)
            j->bad++;   /* nothing was pushed yet */
        __atomic_store_n(&waiting, 1, __ATOMIC_SEQ_CST);
        if ((j->st = dsm_chan_queue_pop_wait(q, &v, T)) == DSM_OK && v != 0xfeedull)
            j->bad++;
    } else if (j->i == 1) {
        /* bounded by T: node 0 gets here right after its 1 ms pop */
        uint64_t deadline = dsm_deadline_ns(T);
        while (!__atomic_load_n(&waiting, __ATOMIC_SEQ_CST) && dsm_now_ns() < deadline) sched_yield();
        j->st = dsm_chan_queue_push(q, 0xfeedull, T);
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_queue_destroy(q);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_queue_pop_wait(void **state)
{
    job_t jobs[N];
    waiting = 0;
    on_all(*state, pop_wait_job, jobs, NULL);
}

static void test_shared_queue(void **state)
{
    job_t jobs[N];
    memset(popped, 0, sizeof popped);
    total_popped = 0;
    on_all(*state, queue_job, jobs, NULL);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < PUSHES; k++) assert_int_equal(popped[i][k], 1);   /* each push popped once */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_ticket_lock),
        cmocka_unit_test(test_owned_push),
        cmocka_unit_test(test_owned_pull),
        cmocka_unit_test(test_atomic_and_sst),
        cmocka_unit_test(test_acks_and_fences),
        cmocka_unit_test(test_ringbuffer),
        cmocka_unit_test(test_shared_queue),
        cmocka_unit_test(test_queue_pop_wait),
    };
    const struct CMUnitTest chaos[] = {
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_ticket_lock),
        cmocka_unit_test(test_owned_push),
        cmocka_unit_test(test_owned_pull),
        cmocka_unit_test(test_atomic_and_sst),
        cmocka_unit_test(test_acks_and_fences),
        cmocka_unit_test(test_ringbuffer),
        cmocka_unit_test(test_shared_queue),
        cmocka_unit_test(test_queue_pop_wait),
    };
    int failed = cmocka_run_group_tests_name("chan-objects/shm", tests, setup_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("chan-objects/tcp", tests, setup_tcp, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("chan-objects/chaos/shm", chaos, setup_chaos_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("chan-objects/chaos/tcp", chaos, setup_chaos_tcp, test_cluster_teardown);
    return failed;
}
