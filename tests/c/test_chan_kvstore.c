/* chan's kvstore over shm and tcp, 3 nodes, then under the chaos fabric
 * (seed 7, every fault): puts, updates from another node, deletes and
 * reinserts into a reused slot seen alike from every node; every node
 * hammering a few keys at once never reads a value that was not put for
 * that key, and afterwards every node reads the same map, also with
 * windows of puts and deletes (put_many, delete_many) among them; 28-byte values
 * hammered the same way are never read as a mix of two writes; bad input gets
 * its status (arguments, a full store, a peer's kvstore of another shape
 * whose slots take the same bytes, a slot whose checksum never agrees);
 * and, without chaos, a get's and an update's latency beside the fabric's
 * get. Linearizability of recorded
 * histories is checked from Python (tests/py/test_chan_histories.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan/internal.h"
#include "chan_util.h"
#include "dsm/log.h"

/* The value at key k on node i's round r: the key in the high bits, so a
 * value read under another key shows. */
static uint64_t val(uint64_t k, uint64_t who, uint64_t r) { return k << 40 | who << 32 | r; }

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            print_error("node %d line %d: %s (%s)\n", j->i, __LINE__, #cond, dsm_last_error()); \
            j->bad++;                                                                      \
        }                                                                                  \
    } while (0)

/* ---- one writer at a time, every node reads ---- */

enum { SLOTS = 16, KEYS = 12 };

static void *basic_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_barrier_t *b;
    dsm_chan_kv_t *kv;
    if ((j->st = dsm_chan_barrier_create(node, "kvb/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_kv_create(node, "kvb/kv", SLOTS, 4, 8, T, &kv)) != DSM_OK)
        return NULL;
    uint64_t v;
    int found;
    /* node 0 inserts; node 1 updates the odd ones; node 2 deletes every third */
    for (uint64_t k = 0; k < KEYS && j->i == 0; k++)
        CHECK(dsm_chan_kv_put(kv, k, &(uint64_t){val(k, 0, 1)}) == DSM_OK);
    CHECK(dsm_chan_barrier_wait(b, T) == DSM_OK);
    for (uint64_t k = 0; k < KEYS; k++)
        CHECK(dsm_chan_kv_get(kv, k, &v, &found) == DSM_OK && found && v == val(k, 0, 1));
    CHECK(dsm_chan_kv_get(kv, 1000, &v, &found) == DSM_OK && !found);
    {   /* the same in one batch, a missing key among them */
        uint64_t keys[KEYS + 1], vals[KEYS + 1];
        int got[KEYS + 1];
        for (uint64_t k = 0; k <= KEYS; k++) keys[k] = k == KEYS ? 1000 : k;
        CHECK(dsm_chan_kv_get_many(kv, keys, KEYS + 1, vals, got) == DSM_OK);
        for (uint64_t k = 0; k < KEYS; k++) CHECK(got[k] && vals[k] == val(k, 0, 1));
        CHECK(!got[KEYS]);
        CHECK(dsm_chan_kv_get_many(kv, keys, 0, vals, got) == DSM_ERR_INVALID);
        CHECK(dsm_chan_kv_get_many(kv, keys, DSM_CHAN_ACK_BITS + 1, vals, got) == DSM_ERR_INVALID);
    }
    CHECK(dsm_chan_kv_count(kv) == KEYS);
    CHECK(dsm_chan_barrier_wait(b, T) == DSM_OK);
    for (uint64_t k = 1; k < KEYS && j->i == 1; k += 2)
        CHECK(dsm_chan_kv_put(kv, k, &(uint64_t){val(k, 1, 2)}) == DSM_OK);
    /* the updates first: an update of 3 or 9 after its delete would insert it again */
    CHECK(dsm_chan_barrier_wait(b, T) == DSM_OK);
    for (uint64_t k = 0; k < KEYS && j->i == 2; k += 3) {
        CHECK(dsm_chan_kv_delete(kv, k, &found) == DSM_OK && found);
        CHECK(dsm_chan_kv_delete(kv, k, &found) == DSM_OK && !found);
    }
    CHECK(dsm_chan_barrier_wait(b, T) == DSM_OK);
    for (uint64_t k = 0; k < KEYS; k++) {
        int gone = k % 3 == 0;
        uint64_t want = k % 2 ? val(k, 1, 2) : val(k, 0, 1);
        CHECK(dsm_chan_kv_get(kv, k, &v, &found) == DSM_OK && found == !gone && (gone || v == want));
    }
    CHECK(dsm_chan_kv_count(kv) == KEYS - (KEYS + 2) / 3);
    CHECK(dsm_chan_barrier_wait(b, T) == DSM_OK);
    /* node 0's freed slots are reused by new keys, under new counters */
    for (uint64_t k = 100; k < 100 + (KEYS + 2) / 3 && j->i == 0; k++)
        CHECK(dsm_chan_kv_put(kv, k, &(uint64_t){val(k, 0, 3)}) == DSM_OK);
    CHECK(dsm_chan_barrier_wait(b, T) == DSM_OK);
    for (uint64_t k = 100; k < 100 + (KEYS + 2) / 3; k++)
        CHECK(dsm_chan_kv_get(kv, k, &v, &found) == DSM_OK && found && v == val(k, 0, 3));
    for (uint64_t k = 0; k < KEYS; k += 3) CHECK(dsm_chan_kv_get(kv, k, &v, &found) == DSM_OK && !found);
    CHECK(dsm_chan_barrier_wait(b, T) == DSM_OK);
    /* bad input: a full node (node 0 holds KEYS - 4 + 4 = all but 4 of its 16
     * slots), arguments */
    if (j->i == 0) {
        dsm_status_t st = DSM_OK;
        uint64_t k = 200;
        for (; k < 200 + SLOTS && st == DSM_OK; k++) st = dsm_chan_kv_put(kv, k, &(uint64_t){1});
        CHECK(st == DSM_ERR_NOMEM && strstr(dsm_last_error(), "slots") != NULL);
        CHECK(k - 1 - 200 == SLOTS - KEYS);   /* the insert that found no slot was the first past them */
        CHECK(dsm_chan_kv_get(kv, k - 1, &v, &found) == DSM_OK && !found);
        CHECK(dsm_chan_kv_put(kv, 1, &(uint64_t){5}) == DSM_OK);   /* an update needs no slot */
        CHECK(dsm_chan_kv_get(kv, 0, NULL, &found) == DSM_ERR_INVALID);
        CHECK(dsm_chan_kv_put(NULL, 0, &(uint64_t){0}) == DSM_ERR_INVALID);
        dsm_chan_kv_t *x;
        CHECK(dsm_chan_kv_create(node, "kvb/x", 0, 4, 8, T, &x) == DSM_ERR_INVALID);
        CHECK(dsm_chan_kv_create(node, "kvb/x", 8, 4, 0, T, &x) == DSM_ERR_INVALID);
        CHECK(dsm_chan_kv_create(node, "kvb/x", 8, 4, DSM_CHAN_KV_MAX_VALUE + 1, T, &x) == DSM_ERR_INVALID);
        CHECK(dsm_chan_kv_create(node, "kvb/x", 8, DSM_CHAN_KV_MAX_LOCKS + 1, 8, T, &x) == DSM_ERR_INVALID);
        CHECK(dsm_chan_kv_create(node, "kvb/x", DSM_CHAN_KV_MAX_SLOTS + 1, 4, 8, T, &x) == DSM_ERR_INVALID);
        CHECK(dsm_chan_kv_create(node, "kvb/kv", 8, 4, 8, T, &x) == DSM_ERR_EXISTS);
    }
    CHECK(dsm_chan_barrier_wait(b, T) == DSM_OK);
    dsm_chan_kv_destroy(kv);
    dsm_chan_barrier_destroy(b);
    j->st = DSM_OK;
    return NULL;
}

static void test_basic(void **state)
{
    job_t jobs[N];
    on_all(*state, basic_job, jobs, NULL);
}

/* ---- every node at once on a few keys ---- */

enum { HOT = 6, ROUNDS = 300 };
static uint64_t final_seen[N][HOT];
static int final_found[N][HOT];

static void *hot_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_barrier_t *b;
    dsm_chan_kv_t *kv;
    if ((j->st = dsm_chan_barrier_create(node, "kvh/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_kv_create(node, "kvh/kv", 64, 3, 8, T, &kv)) != DSM_OK)
        return NULL;
    int rounds = j->c->transport == DSM_TRANSPORT_TCP ? ROUNDS / 3 : ROUNDS;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(j->i + 1);
    for (int r = 1; r <= rounds && j->st == DSM_OK; r++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t k = (rng >> 33) % HOT, op = (rng >> 20) % 10, v;
        int found;
        if (op < 5) {
            j->st = dsm_chan_kv_get(kv, k, &v, &found);
            if (j->st == DSM_OK && found && (v >> 40 != k || ((v >> 32) & 0xff) >= N))
                j->bad++;   /* a value nobody put under this key: torn or misplaced */
        } else if (op < 9) {
            j->st = dsm_chan_kv_put(kv, k, &(uint64_t){val(k, (uint64_t)j->i, (uint64_t)r)});
        } else {
            j->st = dsm_chan_kv_delete(kv, k, &found);
        }
        j->count++;
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    for (uint64_t k = 0; k < HOT && j->st == DSM_OK; k++)
        j->st = dsm_chan_kv_get(kv, k, &final_seen[j->i][k], &final_found[j->i][k]);
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_kv_destroy(kv);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_hot_keys(void **state)
{
    job_t jobs[N];
    on_all(*state, hot_job, jobs, NULL);
    for (int i = 1; i < N; i++)
        for (int k = 0; k < HOT; k++) {
            assert_int_equal(final_found[i][k], final_found[0][k]);   /* every node reads the same map */
            if (final_found[0][k])
                assert_int_equal(final_seen[i][k], final_seen[0][k]);
        }
}

/* ---- windows: put_many and delete_many beside single operations ---- */

enum { WIN = 8 };
static uint64_t win_seen[N][HOT];
static int win_found[N][HOT];

/* Node 0 alone first: a window with a key twice ends with its last value,
 * new keys are inserted, and a delete window with a key twice finds it
 * once. Then every node at once: windows of puts and deletes of a few hot
 * keys (so their locks are taken by other nodes' windows and single puts
 * meanwhile) beside single gets and puts; no get reads a value that was
 * not put under its key, and afterwards every node reads the same map. */
static void *win_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_barrier_t *b;
    dsm_chan_kv_t *kv;
    if ((j->st = dsm_chan_barrier_create(node, "kvw/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_kv_create(node, "kvw/kv", 64, 3, 8, T, &kv)) != DSM_OK)
        return NULL;
    if (j->i == 0) {
        uint64_t keys[5] = {100, 101, 100, 102, 103}, vals[5] = {1, 2, 3, 4, 5}, got[5];
        int found[5];
        CHECK((j->st = dsm_chan_kv_put_many(kv, keys, 5, vals)) == DSM_OK);
        CHECK(dsm_chan_kv_get_many(kv, keys, 5, got, found) == DSM_OK);
        CHECK(found[0] && got[0] == 3 && got[1] == 2 && got[2] == 3 && got[3] == 4 && got[4] == 5);
        vals[1] = 20;   /* updates now */
        CHECK(dsm_chan_kv_put_many(kv, keys, 5, vals) == DSM_OK);
        CHECK(dsm_chan_kv_get(kv, 101, &got[1], &found[1]) == DSM_OK && found[1] && got[1] == 20);
        uint64_t del[4] = {101, 101, 104, 102};
        CHECK(dsm_chan_kv_delete_many(kv, del, 4, found) == DSM_OK);
        CHECK(found[0] == 1 && found[1] == 0 && found[2] == 0 && found[3] == 1);
        CHECK(dsm_chan_kv_get_many(kv, keys, 5, got, found) == DSM_OK);
        CHECK(found[0] && !found[1] && found[2] && !found[3] && found[4]);
        CHECK(dsm_chan_kv_put_many(kv, keys, 0, vals) == DSM_ERR_INVALID);
        CHECK(dsm_chan_kv_delete_many(kv, keys, DSM_CHAN_ACK_BITS + 1, found) == DSM_ERR_INVALID);
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    if (j->i == 1) {   /* node 0's window, seen from another node */
        uint64_t v;
        int found;
        CHECK(dsm_chan_kv_get(kv, 100, &v, &found) == DSM_OK && found && v == 3);
        CHECK(dsm_chan_kv_get(kv, 102, &v, &found) == DSM_OK && !found);
    }
    int rounds = j->c->transport == DSM_TRANSPORT_TCP ? ROUNDS / 6 : ROUNDS / 2;
    uint64_t rng = 0x51afd7ed558ccd1dull * (uint64_t)(j->i + 1);
    for (int r = 1; r <= rounds && j->st == DSM_OK; r++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t k = (rng >> 33) % HOT, op = (rng >> 20) % 10, v, keys[WIN], vals[WIN];
        uint32_t n = 1 + (uint32_t)((rng >> 8) % WIN);
        int found[WIN];
        for (uint32_t x = 0; x < n; x++) {
            keys[x] = (k + x * ((rng >> 4) % 3)) % HOT;
            vals[x] = val(keys[x], (uint64_t)j->i, (uint64_t)r);
        }
        if (op < 4) {
            j->st = dsm_chan_kv_get(kv, k, &v, &found[0]);
            if (j->st == DSM_OK && found[0] && (v >> 40 != k || ((v >> 32) & 0xff) >= N))
                j->bad++;
        } else if (op < 5) {
            j->st = dsm_chan_kv_put(kv, k, &vals[0]);
        } else if (op < 8) {
            j->st = dsm_chan_kv_put_many(kv, keys, n, vals);
        } else {
            j->st = dsm_chan_kv_delete_many(kv, keys, n, found);
        }
        j->count++;
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    for (uint64_t k = 0; k < HOT && j->st == DSM_OK; k++)
        j->st = dsm_chan_kv_get(kv, k, &win_seen[j->i][k], &win_found[j->i][k]);
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_kv_destroy(kv);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_windows(void **state)
{
    job_t jobs[N];
    on_all(*state, win_job, jobs, NULL);
    for (int i = 1; i < N; i++)
        for (int k = 0; k < HOT; k++) {
            assert_int_equal(win_found[i][k], win_found[0][k]);
            if (win_found[0][k])
                assert_int_equal(win_seen[i][k], win_seen[0][k]);
        }
}

/* ---- values wider than a word: never a mix of two writes ---- */

/* A 28-byte value (7 words of 32 bits, the last 8-byte word half used):
 * word x of node i's round r on key k is ((k << 24 | i << 16 | r) * (x + 1)),
 * so a value assembled from two writes breaks the pattern. */
enum { WIDE = 7 };

static void wide_make(uint32_t v[WIDE], uint64_t k, uint64_t who, uint64_t r)
{
    uint32_t base = (uint32_t)(k << 24 | who << 16 | (r & 0xffff));
    for (uint32_t x = 0; x < WIDE; x++) v[x] = base * (x + 1);
}

static int wide_ok(const uint32_t v[WIDE], uint64_t k)
{
    int ok = v[0] >> 24 == k && ((v[0] >> 16) & 0xff) < N;
    for (uint32_t x = 1; x < WIDE; x++) ok &= v[x] == v[0] * (x + 1);
    return ok;
}

static void *wide_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_barrier_t *b;
    dsm_chan_kv_t *kv;
    if ((j->st = dsm_chan_barrier_create(node, "kvw/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_kv_create(node, "kvw/kv", 64, 3, sizeof(uint32_t) * WIDE, T, &kv)) != DSM_OK)
        return NULL;
    int rounds = j->c->transport == DSM_TRANSPORT_TCP ? ROUNDS / 3 : ROUNDS;
    uint64_t rng = 0x2545f4914f6cdd1dull * (uint64_t)(j->i + 1);
    uint64_t keys[HOT];
    for (uint64_t k = 0; k < HOT; k++) keys[k] = k;
    for (int r = 1; r <= rounds && j->st == DSM_OK; r++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t k = (rng >> 33) % HOT, op = (rng >> 20) % 10;
        uint32_t v[WIDE], many[HOT][WIDE];
        int found, got[HOT];
        if (op < 4) {
            j->st = dsm_chan_kv_get(kv, k, v, &found);
            if (j->st == DSM_OK && found && !wide_ok(v, k))
                j->bad++;   /* torn: pieces of two writes, or another key's */
        } else if (op < 5) {
            j->st = dsm_chan_kv_get_many(kv, keys, HOT, many, got);
            for (uint64_t x = 0; x < HOT && j->st == DSM_OK; x++)
                if (got[x] && !wide_ok(many[x], x))
                    j->bad++;
        } else if (op < 9) {
            wide_make(v, k, (uint64_t)j->i, (uint64_t)r);
            j->st = dsm_chan_kv_put(kv, k, v);
        } else {
            j->st = dsm_chan_kv_delete(kv, k, &found);
        }
        j->count++;
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_kv_destroy(kv);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_wide_values(void **state)
{
    job_t jobs[N];
    on_all(*state, wide_job, jobs, NULL);
}

/* ---- what an operation costs, node 0 alone: a get and an update (with
 * and without its fence) of a key node 1 hosts, counted in node 0's fabric
 * operations, which the protocol fixes (the bench times them) ---- */

enum { REPS = 50 };

typedef struct op_cost {
    uint64_t gets, puts, atomics;
} op_cost_t;

static op_cost_t count_ops(dsm_node_t *node, dsm_chan_kv_t *kv, int what, dsm_status_t *st)
{
    dsm_stats_t a, b;
    uint64_t v = 0;
    int found;
    /* 2: updates without their fence (no chaos here, and node 0 is the
     * only writer: nothing can be seen out of order) */
    dsm_chan_kv_set_fence(kv, what != 2);
    dsm_node_stats(node, &a);
    for (int k = 0; k < REPS && *st == DSM_OK; k++)
        *st = what == 0 ? dsm_chan_kv_get(kv, 7, &v, &found) : dsm_chan_kv_put(kv, 7, &(uint64_t){(uint64_t)k});
    dsm_node_stats(node, &b);
    dsm_chan_kv_set_fence(kv, 1);
    return (op_cost_t){b.gets - a.gets, b.puts - a.puts, b.atomics - a.atomics};
}

static op_cost_t op_costs[3];

static void *cost_job(void *arg)
{
    job_t *j = arg;
    dsm_node_t *node = j->c->nodes[j->i];
    dsm_chan_barrier_t *b;
    dsm_chan_kv_t *kv;
    if ((j->st = dsm_chan_barrier_create(node, "kvl/bar", T, &b)) != DSM_OK ||
        (j->st = dsm_chan_kv_create(node, "kvl/kv", 8, 1, 8, T, &kv)) != DSM_OK)
        return NULL;
    if (j->i == 1)
        j->st = dsm_chan_kv_put(kv, 7, &(uint64_t){1});   /* hosted on node 1 */
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    if (j->st == DSM_OK && j->i == 0) {
        dsm_chan_kv_put(kv, 7, &(uint64_t){2});   /* this node's last release left the lock free */
        for (int w = 0; w < 3; w++) op_costs[w] = count_ops(node, kv, w, &j->st);
    }
    if (j->st == DSM_OK)
        j->st = dsm_chan_barrier_wait(b, T);
    dsm_chan_kv_destroy(kv);
    dsm_chan_barrier_destroy(b);
    return NULL;
}

static void test_operation_costs(void **state)
{
    job_t jobs[N];
    on_all(*state, cost_job, jobs, NULL);
    static const char *const what[3] = {"get", "update", "update without its fence"};
    for (int w = 0; w < 3; w++)
        print_message("%s: %llu gets, %llu puts, %llu atomics in %d\n", what[w], (unsigned long long)op_costs[w].gets,
                      (unsigned long long)op_costs[w].puts, (unsigned long long)op_costs[w].atomics, REPS);
    /* a get: the slot's one checksummed read, no lock */
    assert_int_equal(op_costs[0].gets, REPS);
    assert_int_equal(op_costs[0].puts + op_costs[0].atomics, 0);
    /* an update: its lock in one CAS (this node released it last), the
     * write, the release's fetch-add; its fence at most one read (none
     * where the release's atomic follows the write to the lock's host, or
     * where the fabric flushes instead) */
    assert_int_equal(op_costs[1].puts, REPS);
    assert_int_equal(op_costs[1].atomics, 2 * REPS);
    assert_true(op_costs[1].gets <= REPS);
    assert_int_equal(op_costs[2].gets, 0);
    assert_int_equal(op_costs[2].puts, REPS);
    assert_int_equal(op_costs[2].atomics, 2 * REPS);
}

/* ---- kvstores of one name whose shapes differ ---- */

/* Node 1's kvstore holds 1 slot of 40-byte values, the others' 2 of 8:
 * 64 bytes of slots each, so only the shapes tell them apart. Every node
 * is refused (within T) and says both shapes. */
static char shape_why[N][512];

static void *shape_job(void *arg)
{
    job_t *j = arg;
    dsm_chan_kv_t *kv = NULL;
    dsm_clear_last_error();
    dsm_status_t st = dsm_chan_kv_create(j->c->nodes[j->i], "kvm/kv", j->i == 1 ? 1 : 2, 1, j->i == 1 ? 40 : 8, T,
                                         &kv);
    snprintf(shape_why[j->i], sizeof shape_why[j->i], "%s", dsm_last_error());
    CHECK(st == DSM_ERR_INVALID && kv == NULL);
    if (st == DSM_OK)
        dsm_chan_kv_destroy(kv);
    j->st = DSM_OK;
    return NULL;
}

static void test_shape_mismatch(void **state)
{
    job_t jobs[N];
    on_all(*state, shape_job, jobs, NULL);
    for (int i = 0; i < N; i++) {
        assert_non_null(strstr(shape_why[i], "kvstore 'kvm/kv': its shape differs"));
        assert_non_null(strstr(shape_why[i], "value_size 40, slots 1, locks 1"));
        assert_non_null(strstr(shape_why[i], "value_size 8, slots 2, locks 1"));
    }
}

/* ---- an insert that fails leaves no trace ---- */

/* Two nodes with a test's timeouts: node 1 leaves, so node 0's inserts
 * cannot be acknowledged and fail within seconds. */
static dsm_harness_t pair_cluster = {.transport = DSM_TRANSPORT_SHM};
static int setup_pair(void **state) { return test_cluster_setup(state, &pair_cluster, 2); }
static dsm_harness_t torn_cluster = {.transport = DSM_TRANSPORT_TCP};
static int setup_torn(void **state) { return test_cluster_setup(state, &torn_cluster, 2); }

/* A kvstore name whose single lock lock.c hosts on node 0 (FNV-1a of the
 * lock's name modulo the participants), so node 0 still takes it alone. */
static void name_locked_on_0(char *name, size_t cap)
{
    for (int i = 0;; i++) {
        char lock[64];
        snprintf(name, cap, "kvf%d", i);
        snprintf(lock, sizeof lock, "%s/lock/0", name);
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char *p = lock; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
        if (h % 2 == 0)
            return;
    }
}

typedef struct pair_job {
    dsm_node_t *node;
    const char *name;
    dsm_chan_kv_t *kv;
    dsm_status_t st;
} pair_job_t;

static void *pair_create(void *arg)
{
    pair_job_t *p = arg;
    p->st = dsm_chan_kv_create(p->node, p->name, 4, 1, 8, T, &p->kv);
    return NULL;
}

/* kvstore `name` (4 slots, 1 lock, 8-byte values) on both nodes of c. */
static void create_pair(dsm_harness_t *c, const char *name, dsm_chan_kv_t *kv[2])
{
    pair_job_t jobs[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        jobs[i] = (pair_job_t){.node = c->nodes[i], .name = name};
        assert_int_equal(pthread_create(&th[i], NULL, pair_create, &jobs[i]), 0);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(jobs[i].st, DSM_OK);
        kv[i] = jobs[i].kv;
    }
}

static void test_failed_insert(void **state)
{
    dsm_harness_t *c = *state;
    char name[32];
    name_locked_on_0(name, sizeof name);
    dsm_chan_kv_t *kvs[2];
    create_pair(c, name, kvs);
    dsm_chan_kv_t *kv = kvs[0];
    assert_int_equal(dsm_chan_kv_put(kv, 1, &(uint64_t){11}), DSM_OK);
    dsm_chan_kv_destroy(kvs[1]);
    dsm_node_destroy(c->nodes[1]);
    c->nodes[1] = NULL;
    c->n = 1;
    /* Node 1 cannot acknowledge: the inserts fail, and the store is as
     * before (an index entry left behind would count, and the next put of
     * the key would take it for an update and succeed alone). More tries
     * than slots: a slot whose message never left is free again. */
    for (int t = 0; t < 6; t++) {
        assert_int_not_equal(dsm_chan_kv_put(kv, 2, &(uint64_t){22}), DSM_OK);
        assert_int_equal(dsm_chan_kv_count(kv), 1);
        uint64_t v = 0;
        int found = -1;
        assert_int_equal(dsm_chan_kv_get(kv, 2, &v, &found), DSM_OK);
        assert_int_equal(found, 0);
    }
    dsm_chan_kv_destroy(kv);
}

/* A slot whose checksum never agrees (its value word flipped in place, as
 * a write torn for good would leave it) is refused after the store's settle
 * time with a message saying so, read alone or in a batch, from the slot's
 * node and from the other; the rest of the store still reads. */
static void test_torn_slot(void **state)
{
    dsm_harness_t *c = *state;
    const char *name = "kvtorn";
    dsm_chan_kv_t *kvs[2];
    create_pair(c, name, kvs);
    const uint64_t torn = 0x70e2a11ed5a1f00dull, kept = 0x0ddba11c0ffee123ull;
    assert_int_equal(dsm_chan_kv_put(kvs[0], 7, &torn), DSM_OK);   /* inserts go to node 0's slots */
    assert_int_equal(dsm_chan_kv_put(kvs[0], 8, &kept), DSM_OK);
    /* the store's slots: region 0 of its channel on node 0 */
    chan_mgr_t *m = chan_mgr(c->nodes[0]);
    dsm_chan_t *ch;
    pthread_mutex_lock(&m->lock);
    for (ch = m->chans; ch != NULL && strcmp(ch->name, name) != 0; ch = ch->next) {
    }
    pthread_mutex_unlock(&m->lock);
    assert_non_null(ch);
    uint64_t *words = (uint64_t *)chan_local(ch, 0);
    size_t n = ch->regions[0].size / sizeof(uint64_t), at = 0, hits = 0;
    for (size_t i = 0; i < n; i++)
        if (words[i] == torn) {
            at = i;
            hits++;
        }
    assert_int_equal(hits, 1);
    __atomic_store_n(&words[at], ~torn, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++) {
        dsm_chan_kv_t *kv = kvs[i];
        dsm_chan_kv_set_settle_ms(kv, 200);
        uint64_t v = 0, keys[2] = {8, 7}, vals[2];
        int found = -1, got[2];
        dsm_clear_last_error();
        assert_int_equal(dsm_chan_kv_get(kv, 7, &v, &found), DSM_ERR_TIMEOUT);
        assert_non_null(strstr(dsm_last_error(), "key 7's slot did not settle within 200 ms"));
        dsm_clear_last_error();
        assert_int_equal(dsm_chan_kv_get_many(kv, keys, 2, vals, got), DSM_ERR_TIMEOUT);
        assert_non_null(strstr(dsm_last_error(), "1 of 2 slots did not settle within 200 ms"));
        assert_int_equal(dsm_chan_kv_get(kv, 8, &v, &found), DSM_OK);
        assert_int_equal(found, 1);
        assert_true(v == kept);
    }
    dsm_chan_kv_destroy(kvs[1]);
    dsm_chan_kv_destroy(kvs[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_hot_keys),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_wide_values),
        cmocka_unit_test(test_shape_mismatch),
        cmocka_unit_test(test_operation_costs),
    };
    const struct CMUnitTest chaos[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_hot_keys),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_wide_values),
    };
    const struct CMUnitTest pair[] = {
        cmocka_unit_test(test_failed_insert),
    };
    const struct CMUnitTest torn[] = {
        cmocka_unit_test(test_torn_slot),
    };
    int failed = cmocka_run_group_tests_name("chan-kvstore/failed-insert", pair, setup_pair, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("chan-kvstore/torn-slot/tcp", torn, setup_torn, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("chan-kvstore/shm", tests, setup_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("chan-kvstore/tcp", tests, setup_tcp, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("chan-kvstore/chaos/shm", chaos, setup_chaos_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("chan-kvstore/chaos/tcp", chaos, setup_chaos_tcp, test_cluster_teardown);
    return failed;
}
