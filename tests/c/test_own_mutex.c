/* own's mutexes, both kinds (delegated to the home, one-sided CAS), over
 * shm and tcp: threads on 3 nodes (two on the home) increment a counter
 * box under the mutex with borrow checks on, so a second holder would be
 * refused and counted, and no increment may be lost; the messages of an
 * uncontended lock and unlock; and the refusals. Then Mutex<Box<T>> (a
 * mutex guarding a box): the same counter through guards, the exact
 * messages of each guarded step (the grant carries the object's address,
 * the owner update rides the unlock, so no owner record is read), the
 * colour and the move seen by the next holder, and the guard's refusals;
 * the joined calls (lock and borrow, release and unlock) likewise, and
 * their fast path's refusal of forged and stale handles. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "cluster_util.h"
#include "dsm/fabric.h"
#include "dsm/node.h"
#include "dsm/own.h"
#include "dsm/runtime.h"
#include "own/object.h"

enum { N = 3, TYPE = 500, THREADS = 4 };

/* Generous timeouts: these tests keep every core busy. */
static dsm_harness_t shm_cluster = {.transport = DSM_TRANSPORT_SHM, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};
static dsm_harness_t tcp_cluster = {.transport = DSM_TRANSPORT_TCP, .op_timeout_ms = 30000,
                                      .peer_timeout_ms = 10000};

static int setup(void **state, dsm_harness_t *c)
{
    if (dsm_own_type_register(TYPE, "mutex.counter", 8) != DSM_OK)
        return -1;
    return test_cluster_setup(state, c, N);
}
static int setup_shm(void **state) { return setup(state, &shm_cluster); }
static int setup_tcp(void **state) { return setup(state, &tcp_cluster); }

typedef struct incr {
    dsm_node_t *node;
    dsm_own_mutex_t mx;
    dsm_own_box_t box;
    int iters, errors;
} incr_t;

static void *incr_thread(void *arg)
{
    incr_t *t = arg;
    for (int i = 0; i < t->iters; i++) {
        if (dsm_own_mutex_lock(t->node, t->mx) != DSM_OK) {
            t->errors++;
            continue;
        }
        dsm_own_mut_t m;
        if (dsm_own_box_borrow_mut(t->node, t->box, &m) == DSM_OK) {
            (*(uint64_t *)m.data)++;
            if (dsm_own_box_release_mut(t->node, &m) != DSM_OK)
                t->errors++;
        } else {
            t->errors++;
        }
        if (dsm_own_mutex_unlock(t->node, t->mx) != DSM_OK)
            t->errors++;
    }
    return NULL;
}

static void counter_under(dsm_harness_t *c, int kind)
{
    dsm_own_mutex_t mx;
    dsm_own_box_t box;
    assert_int_equal(dsm_own_mutex_new(c->nodes[0], kind, &mx), DSM_OK);
    assert_int_equal(dsm_own_box_alloc(c->nodes[0], TYPE, 8, &box), DSM_OK);
    int iters = c->transport == DSM_TRANSPORT_TCP ? 25 : 60;
    incr_t t[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        /* Threads 0 and 3 share the home node 0. */
        t[i] = (incr_t){.node = c->nodes[i % N], .mx = mx, .box = box, .iters = iters};
        pthread_create(&th[i], NULL, incr_thread, &t[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(t[i].errors, 0);
    }
    for (int i = 0; i < N; i++) {
        dsm_own_ref_t r;
        assert_int_equal(dsm_own_box_borrow(c->nodes[i], box, &r), DSM_OK);
        assert_int_equal(*(const uint64_t *)r.data, (uint64_t)THREADS * (uint64_t)iters);
        assert_int_equal(dsm_own_box_release(c->nodes[i], &r), DSM_OK);
    }

    /* Uncontended from another node: DELEG a round trip and a one-way
     * unlock (3 messages); CAS a round trip each (4). */
    dsm_own_stats_t s0, s1;
    dsm_own_stats(c->nodes[2], &s0);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[2], mx), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[2], mx), DSM_OK);
    dsm_own_stats(c->nodes[2], &s1);
    assert_int_equal(s1.messages - s0.messages, kind == DSM_OWN_MUTEX_DELEG ? 3 : 4);

    /* Refusals: unlock by a non-holder, free elsewhere than the home or
     * while held, forged kinds. */
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[0], mx), DSM_ERR_STATE);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[0], mx), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(c->nodes[0], mx), DSM_ERR_STATE);
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[0], mx), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(c->nodes[1], mx), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[1], dsm_gaddr_strip(mx)), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[1], dsm_gaddr_with_colour(mx, 9)), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_own_mutex_free(c->nodes[0], mx), DSM_OK);
    if (kind == DSM_OWN_MUTEX_DELEG) {
        /* A freed delegated mutex is gone at its home, from everywhere. */
        assert_int_equal(dsm_own_mutex_lock(c->nodes[1], mx), DSM_ERR_BAD_ADDR);
        assert_int_equal(dsm_own_mutex_lock(c->nodes[0], mx), DSM_ERR_BAD_ADDR);
    }
    assert_int_equal(dsm_own_box_drop(c->nodes[0], box), DSM_OK);
}

static void *guard_thread(void *arg)
{
    incr_t *t = arg;
    for (int i = 0; i < t->iters; i++) {
        dsm_own_guard_t g;
        dsm_own_mut_t m;
        if (dsm_own_mutex_lock_guard(t->node, t->mx, &g) != DSM_OK) {
            t->errors++;
            continue;
        }
        if (dsm_own_guard_borrow_mut(t->node, &g, &m) == DSM_OK) {
            (*(uint64_t *)m.data)++;
            if (dsm_own_guard_release_mut(t->node, &g, &m) != DSM_OK)
                t->errors++;
        } else {
            t->errors++;
        }
        if (dsm_own_mutex_unlock_guard(t->node, &g) != DSM_OK)
            t->errors++;
    }
    return NULL;
}

static uint64_t msgs(dsm_node_t *n)
{
    dsm_own_stats_t s;
    dsm_own_stats(n, &s);
    return s.messages;
}

/* Lock node's guard, read the counter (shared borrow), unlock: returns the
 * value; *m the messages it cost. */
static uint64_t guarded_read(dsm_node_t *n, dsm_own_mutex_t mx, uint64_t *m)
{
    uint64_t m0 = msgs(n), v;
    dsm_own_guard_t g;
    dsm_own_ref_t r;
    assert_int_equal(dsm_own_mutex_lock_guard(n, mx, &g), DSM_OK);
    assert_int_equal(dsm_own_guard_borrow(n, &g, &r), DSM_OK);
    v = *(const uint64_t *)r.data;
    assert_int_equal(dsm_own_guard_release(n, &g, &r), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock_guard(n, &g), DSM_OK);
    *m = msgs(n) - m0;
    return v;
}

static void guard_under(dsm_harness_t *c, int kind)
{
    int deleg = kind == DSM_OWN_MUTEX_DELEG;
    dsm_own_mutex_t mx, plain, gm, junk;
    dsm_own_box_t box, other;
    dsm_own_ref_t r;
    dsm_own_mut_t m;
    dsm_own_guard_t g;
    uint64_t cost;
    assert_int_equal(dsm_own_mutex_new(c->nodes[0], kind, &mx), DSM_OK);
    assert_int_equal(dsm_own_mutex_new(c->nodes[0], kind, &plain), DSM_OK);
    assert_int_equal(dsm_own_box_alloc(c->nodes[0], TYPE, 8, &box), DSM_OK);
    assert_int_equal(dsm_own_box_alloc(c->nodes[0], TYPE, 8, &other), DSM_OK);
    /* Adopting: only at the home; the box moves in (its handle dies). */
    assert_int_equal(dsm_own_mutex_adopt(c->nodes[1], mx, box, &gm), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_mutex_adopt(c->nodes[0], mx, box, &gm), DSM_OK);
    assert_int_equal(dsm_gaddr_strip(gm), dsm_gaddr_strip(mx));
    assert_int_equal(dsm_own_box_borrow(c->nodes[0], box, &r), DSM_ERR_BAD_ADDR);
    /* A second box is refused (by either handle) and stays alive; so is a
     * borrowed one. */
    assert_int_equal(dsm_own_mutex_adopt(c->nodes[0], gm, other, &junk), DSM_ERR_STATE);
    assert_int_equal(junk, 0);
    assert_int_equal(dsm_own_mutex_adopt(c->nodes[0], mx, other, &junk), DSM_ERR_STATE);
    assert_int_equal(dsm_own_box_borrow(c->nodes[0], other, &r), DSM_OK);
    assert_int_equal(dsm_own_mutex_adopt(c->nodes[0], plain, other, &junk), DSM_ERR_STATE);
    assert_int_equal(dsm_own_box_release(c->nodes[0], &r), DSM_OK);
    /* The guarding handle refuses plain lock and unlock; the old handle's
     * CAS lock sees an address where a holder would be. */
    assert_int_equal(dsm_own_mutex_lock(c->nodes[1], gm), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[1], gm), DSM_ERR_INVALID);
    if (!deleg)
        assert_int_equal(dsm_own_mutex_lock(c->nodes[1], mx), DSM_ERR_STATE);
    /* A mutex guarding nothing: lock_guard refused, the lock left free. */
    assert_int_equal(dsm_own_mutex_lock_guard(c->nodes[1], plain, &g), DSM_ERR_STATE);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[2], plain), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[2], plain), DSM_OK);
    mx = gm;

    /* Exact messages from node 1 (object on node 0, mutex on node 0).
     * Lock: DELEG a round trip whose reply is the grant (2); CAS a swap
     * that reads the address from the lock word (2), and, the first time a
     * node locks it, a read of the object's size and type (2). Unlock:
     * DELEG one-way (1, with the new address when it changed); CAS a swap
     * writing the address back (2). */
    uint64_t lock = 2, unlock = deleg ? 1 : 2, unlock_changed = unlock, first = deleg ? 0 : 2;
    /* A miss: the copy is read (2). */
    assert_int_equal(guarded_read(c->nodes[1], mx, &cost), 0);
    assert_int_equal(cost, first + lock + 2 + unlock);
    /* A hit: nothing but the lock. */
    assert_int_equal(guarded_read(c->nodes[1], mx, &cost), 0);
    assert_int_equal(cost, lock + unlock);
    /* A write from node 1 moves the object here (read 2 + one-way free 1)
     * and bumps its colour; the unlock carries the new address. */
    uint64_t m0 = msgs(c->nodes[1]);
    assert_int_equal(dsm_own_mutex_lock_guard(c->nodes[1], mx, &g), DSM_OK);
    assert_int_equal(dsm_own_guard_borrow(c->nodes[1], &g, &r), DSM_OK);
    assert_int_equal(dsm_own_guard_borrow_mut(c->nodes[1], &g, &m), DSM_ERR_STATE);   /* borrowed */
    assert_int_equal(dsm_own_mutex_unlock_guard(c->nodes[1], &g), DSM_ERR_STATE);     /* borrow live */
    assert_int_equal(dsm_own_guard_release(c->nodes[1], &g, &r), DSM_OK);
    assert_int_equal(dsm_own_guard_borrow_mut(c->nodes[1], &g, &m), DSM_OK);
    assert_int_equal(m.moved, 1);
    assert_int_equal(dsm_own_guard_borrow(c->nodes[1], &g, &r), DSM_ERR_STATE);        /* mutably borrowed */
    *(uint64_t *)m.data = 41;
    dsm_gaddr_t moved = m.g;
    assert_int_equal(dsm_own_guard_release_mut(c->nodes[1], &g, &m), DSM_OK);
    assert_int_equal(dsm_gaddr_colour(g.g), (uint16_t)(dsm_gaddr_colour(moved) + 1));
    assert_int_equal(dsm_own_mutex_unlock_guard(c->nodes[1], &g), DSM_OK);
    assert_int_equal(msgs(c->nodes[1]) - m0, lock + 3 + unlock_changed);
    assert_int_equal(dsm_own_guard_borrow(c->nodes[1], &g, &r), DSM_ERR_STATE);        /* unlocked */
    /* Node 1 now reads its own object (0 messages); node 2 misses on the
     * new coloured address and sees the write; node 0 (the mutex's home)
     * pays only the miss. */
    assert_int_equal(guarded_read(c->nodes[1], mx, &cost), 41);
    assert_int_equal(cost, lock + unlock);
    assert_int_equal(guarded_read(c->nodes[2], mx, &cost), 41);
    assert_int_equal(cost, first + lock + 2 + unlock);
    assert_int_equal(guarded_read(c->nodes[0], mx, &cost), 41);
    assert_int_equal(cost, 2);
    /* A local write: no move, the colour goes up; node 2's cached copy
     * (old colour) is never used again. */
    assert_int_equal(dsm_own_mutex_lock_guard(c->nodes[1], mx, &g), DSM_OK);
    assert_int_equal(dsm_own_guard_borrow_mut(c->nodes[1], &g, &m), DSM_OK);
    assert_int_equal(m.moved, 0);
    *(uint64_t *)m.data = 42;
    assert_int_equal(dsm_own_guard_release_mut(c->nodes[1], &g, &m), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock_guard(c->nodes[1], &g), DSM_OK);
    assert_int_equal(guarded_read(c->nodes[2], mx, &cost), 42);
    assert_int_equal(cost, lock + 2 + unlock);

    /* The counter through guards from every node. */
    int iters = c->transport == DSM_TRANSPORT_TCP ? 25 : 60;
    incr_t t[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        t[i] = (incr_t){.node = c->nodes[i % N], .mx = mx, .iters = iters};
        pthread_create(&th[i], NULL, guard_thread, &t[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(t[i].errors, 0);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(guarded_read(c->nodes[i], mx, &cost), 42 + (uint64_t)THREADS * (uint64_t)iters);

    /* Freeing the mutex drops the object, wherever it lives: moved to
     * node 1 by a write there, it is freed there (its header loses its
     * magic). */
    assert_int_equal(dsm_own_mutex_lock_guard(c->nodes[1], mx, &g), DSM_OK);
    assert_int_equal(dsm_own_guard_borrow_mut(c->nodes[1], &g, &m), DSM_OK);
    assert_int_equal(dsm_own_guard_release_mut(c->nodes[1], &g, &m), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock_guard(c->nodes[1], &g), DSM_OK);
    /* The home takes the lock once (granted once node 1's one-way unlock
     * has arrived), so the mutex is free when it frees it. */
    assert_int_equal(dsm_own_mutex_lock_guard(c->nodes[0], mx, &g), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock_guard(c->nodes[0], &g), DSM_OK);
    const uint32_t *header = dsm_local_ptr(c->nodes[1], dsm_gaddr_strip(g.g));
    assert_non_null(header);
    assert_int_equal(__atomic_load_n(header, __ATOMIC_ACQUIRE), OWN_OBJ_MAGIC);
    assert_int_equal(dsm_own_mutex_free(c->nodes[0], mx), DSM_OK);
    assert_int_not_equal(__atomic_load_n(header, __ATOMIC_ACQUIRE), OWN_OBJ_MAGIC);
    assert_int_equal(dsm_own_mutex_free(c->nodes[0], plain), DSM_OK);
    assert_int_equal(dsm_own_box_drop(c->nodes[0], other), DSM_OK);
}

/* The home's fast path (a CAS mutex and its object both on this node: one
 * swap locks, a check and a store unlock, borrows are a header compare)
 * keeps every refusal of the guard, and hands the lock to and from a
 * remote holder: a remote write moves the object away, the home's next
 * lock reads the new address from the word and borrows it through its
 * cache. (A held word sends the home's lock to the slow path, which
 * waits: guard_under's two threads on the home contend for it.) */
static void test_guard_home_fast(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *home = c->nodes[0];
    dsm_own_mutex_t mx, gm;
    dsm_own_box_t box;
    dsm_own_ref_t r;
    dsm_own_mut_t m, m2;
    dsm_own_guard_t g, g2 = {0};
    assert_int_equal(dsm_own_mutex_new(home, DSM_OWN_MUTEX_CAS, &mx), DSM_OK);
    assert_int_equal(dsm_own_box_alloc(home, TYPE, 8, &box), DSM_OK);
    assert_int_equal(dsm_own_mutex_adopt(home, mx, box, &gm), DSM_OK);
    uint64_t m0 = msgs(home);
    assert_int_equal(dsm_own_mutex_lock_guard(home, gm, &g), DSM_OK);
    assert_int_equal(dsm_own_guard_borrow(home, &g, &r), DSM_OK);
    assert_int_equal(r.cached, 0);
    assert_int_equal(dsm_own_guard_borrow_mut(home, &g, &m), DSM_ERR_STATE);   /* borrowed */
    assert_int_equal(dsm_own_mutex_unlock_guard(home, &g), DSM_ERR_STATE);     /* borrow live */
    assert_int_equal(dsm_own_guard_release(home, &g, &r), DSM_OK);
    assert_int_equal(dsm_own_guard_release(home, &g, &r), DSM_ERR_STATE);      /* twice */
    assert_int_equal(dsm_own_guard_borrow_mut(home, &g, &m), DSM_OK);
    assert_int_equal(m.moved, 0);
    assert_int_equal(dsm_own_guard_borrow(home, &g, &r), DSM_ERR_STATE);       /* mutably borrowed */
    assert_int_equal(dsm_own_guard_borrow_mut(home, &g2, &m2), DSM_ERR_STATE); /* a guard never locked */
    *(uint64_t *)m.data = 7;
    dsm_gaddr_t before = m.g;
    assert_int_equal(dsm_own_guard_release_mut(home, &g, &m), DSM_OK);
    assert_int_equal(dsm_gaddr_colour(g.g), (uint16_t)(dsm_gaddr_colour(before) + 1));
    assert_int_equal(dsm_own_mutex_unlock_guard(home, &g), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock_guard(home, &g), DSM_ERR_STATE);     /* not held */
    assert_int_equal(dsm_own_guard_borrow(home, &g, &r), DSM_ERR_STATE);       /* unlocked */
    assert_int_equal(msgs(home) - m0, 0);
    /* A remote write moves the object to node 1; the home's next lock
     * finds the new address in the word and reads it through its cache. */
    assert_int_equal(dsm_own_mutex_lock_guard(c->nodes[1], gm, &g2), DSM_OK);
    assert_int_equal(dsm_own_guard_borrow_mut(c->nodes[1], &g2, &m), DSM_OK);
    assert_int_equal(m.moved, 1);
    *(uint64_t *)m.data = 8;
    assert_int_equal(dsm_own_guard_release_mut(c->nodes[1], &g2, &m), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock_guard(c->nodes[1], &g2), DSM_OK);
    assert_int_equal(dsm_own_mutex_lock_guard(home, gm, &g), DSM_OK);
    assert_int_equal(g.g, g2.g);
    assert_int_equal(dsm_own_guard_borrow(home, &g, &r), DSM_OK);
    assert_int_equal(r.cached, 1);
    assert_int_equal(*(const uint64_t *)r.data, 8);
    assert_int_equal(dsm_own_guard_release(home, &g, &r), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock_guard(home, &g), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(home, gm), DSM_OK);
}

/* dsm_own_mutex_lock_borrow and dsm_own_guard_release_unlock, both kinds,
 * on the home (fast for CAS) and from another node: the value written
 * through a guard is read, a release of a dead borrow is refused (the lock
 * is given back all the same), and a lock of a mutex guarding nothing is
 * refused with nothing held. */
static void joined_under(dsm_harness_t *c, int kind)
{
    dsm_node_t *home = c->nodes[0];
    dsm_own_mutex_t mx, gm, plain;
    dsm_own_box_t box;
    dsm_own_guard_t g;
    dsm_own_ref_t r;
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_mutex_new(home, kind, &mx), DSM_OK);
    assert_int_equal(dsm_own_mutex_new(home, kind, &plain), DSM_OK);
    assert_int_equal(dsm_own_box_alloc(home, TYPE, 8, &box), DSM_OK);
    assert_int_equal(dsm_own_mutex_adopt(home, mx, box, &gm), DSM_OK);
    for (int i = 0; i < N; i++) {
        dsm_node_t *n = c->nodes[i];
        /* the four calls on even rounds, the two joined ones on odd */
        dsm_gaddr_t before;
        if (i % 2 == 0) {
            assert_int_equal(dsm_own_mutex_lock_guard(n, gm, &g), DSM_OK);
            assert_int_equal(dsm_own_guard_borrow_mut(n, &g, &m), DSM_OK);
            before = g.g;
            *(uint64_t *)m.data = 100u + (uint64_t)i;
            assert_int_equal(dsm_own_guard_release_mut(n, &g, &m), DSM_OK);
            assert_int_equal(dsm_own_mutex_unlock_guard(n, &g), DSM_OK);
        } else {
            assert_int_equal(dsm_own_mutex_lock_borrow_mut(n, gm, &g, &m), DSM_OK);
            assert_int_equal(dsm_own_guard_borrow(n, &g, &r), DSM_ERR_STATE);   /* mutably borrowed */
            before = m.moved ? m.g : g.g;
            *(uint64_t *)m.data = 100u + (uint64_t)i;
            assert_int_equal(dsm_own_guard_release_mut_unlock(n, &g, &m), DSM_OK);
            assert_null(m.data);
            assert_int_equal(g.live, 0);
            /* Released twice: refused, the lock (already free) not touched. */
            assert_int_equal(dsm_own_guard_release_mut_unlock(n, &g, &m), DSM_ERR_STATE);
        }
        /* a write in place ends with colour + 1 (a move's new address may start anywhere) */
        if (dsm_gaddr_strip(g.g) == dsm_gaddr_strip(before))
            assert_int_equal(dsm_gaddr_colour(g.g), (uint16_t)(dsm_gaddr_colour(before) + 1));
        for (int j = 0; j < N; j++) {
            assert_int_equal(dsm_own_mutex_lock_borrow(c->nodes[j], gm, &g, &r), DSM_OK);
            assert_int_equal(*(const uint64_t *)r.data, 100u + (uint64_t)i);
            assert_int_equal(dsm_own_guard_borrow_mut(c->nodes[j], &g, &m), DSM_ERR_STATE);   /* borrowed */
            assert_int_equal(dsm_own_guard_release_unlock(c->nodes[j], &g, &r), DSM_OK);
            assert_null(r.data);
            assert_int_equal(g.live, 0);
            /* Released twice: refused, and the lock (already free) is not touched. */
            assert_int_equal(dsm_own_guard_release_unlock(c->nodes[j], &g, &r), DSM_ERR_STATE);
        }
    }
    /* A mutex guarding nothing: refused, nothing held (a plain lock works). */
    assert_int_equal(dsm_own_mutex_lock_borrow(c->nodes[1], plain, &g, &r), DSM_ERR_STATE);
    assert_int_equal(dsm_own_mutex_lock_borrow_mut(c->nodes[0], plain, &g, &m), DSM_ERR_STATE);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[2], plain), DSM_OK);
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[2], plain), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(home, gm), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(home, plain), DSM_OK);
}
/* The home's fast path checks a handle by one subtraction and compare
 * against its heap blocks (own/internal.h, own_bounds_t): a handle with any
 * other colour, a misaligned one, one just outside the blocks or another
 * rank's is refused (the slow path reports it) and leaves the real mutex's
 * word alone; so is a guard whose handle was forged, and a freed (stale)
 * mutex. Each would lock or store through the word without the check. */
static void test_joined_forged(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *home = c->nodes[0];
    dsm_own_mutex_t mx, gm;
    dsm_own_box_t box;
    dsm_own_guard_t g, real;
    dsm_own_ref_t r;
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_mutex_new(home, DSM_OWN_MUTEX_CAS, &mx), DSM_OK);
    assert_int_equal(dsm_own_box_alloc(home, TYPE, 8, &box), DSM_OK);
    assert_int_equal(dsm_own_mutex_adopt(home, mx, box, &gm), DSM_OK);
    const uint64_t *word = dsm_local_ptr(home, dsm_gaddr_strip(gm));
    assert_non_null(word);
    uint64_t free_word = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    uint32_t rank = dsm_gaddr_node(gm);
    uint64_t end = dsm_heap_partition_size(home, rank);
    uint16_t colour = dsm_gaddr_colour(gm);
    const dsm_own_mutex_t forged[] = {
        dsm_gaddr_with_colour(gm, (uint16_t)(colour | 0x200)),   /* an unknown colour bit */
        dsm_gaddr_with_colour(gm, (uint16_t)(colour + 0x10000 - 0x100)),   /* a colour below it */
        gm + 4,                                                   /* misaligned */
        dsm_gaddr_with_colour(dsm_gaddr_make(rank, end), colour),   /* just past the blocks */
        dsm_gaddr_with_colour(dsm_gaddr_make(rank, 8), colour),    /* below the first block */
        dsm_gaddr_with_colour(dsm_gaddr_make(rank + 77, dsm_gaddr_offset(gm)), colour),   /* no such rank */
    };
    for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
        assert_int_not_equal(dsm_own_mutex_lock_borrow(home, forged[i], &g, &r), DSM_OK);
        assert_int_not_equal(dsm_own_mutex_lock_borrow_mut(home, forged[i], &g, &m), DSM_OK);
        assert_int_equal(__atomic_load_n(word, __ATOMIC_ACQUIRE), free_word);
    }
    /* A guard whose handle is forged: the borrow ends, the unlock is refused,
     * and the real mutex stays held until its own guard unlocks it. */
    assert_int_equal(dsm_own_mutex_lock_borrow(home, gm, &real, &r), DSM_OK);
    g = real;
    g.mutex = forged[0];
    assert_int_not_equal(dsm_own_guard_release_unlock(home, &g, &r), DSM_OK);
    assert_int_equal(__atomic_load_n(word, __ATOMIC_ACQUIRE), 1u);   /* OWN_CAS_HELD */
    real.borrows = 0;   /* the borrow ended above, through the copy */
    assert_int_equal(dsm_own_mutex_unlock_guard(home, &real), DSM_OK);
    assert_int_equal(__atomic_load_n(word, __ATOMIC_ACQUIRE), free_word);
    assert_int_equal(dsm_own_mutex_lock_borrow_mut(home, gm, &real, &m), DSM_OK);
    g = real;
    g.mutex = gm + 8;   /* the word after the lock word: in the blocks, 8-aligned */
    assert_int_not_equal(dsm_own_guard_release_mut_unlock(home, &g, &m), DSM_OK);
    assert_int_equal(__atomic_load_n(word, __ATOMIC_ACQUIRE), 1u);
    real.mut = 0;
    real.g = g.g;   /* the release above bumped the colour */
    real.changed = 1;
    assert_int_equal(dsm_own_mutex_unlock_guard(home, &real), DSM_OK);
    assert_int_equal(dsm_gaddr_colour(__atomic_load_n(word, __ATOMIC_ACQUIRE)), (uint16_t)(dsm_gaddr_colour(free_word) + 1));
    /* Stale: the mutex freed (its object with it). */
    assert_int_equal(dsm_own_mutex_free(home, gm), DSM_OK);
    assert_int_not_equal(dsm_own_mutex_lock_borrow(home, gm, &g, &r), DSM_OK);
    assert_int_not_equal(dsm_own_mutex_lock_borrow_mut(home, gm, &g, &m), DSM_OK);
}

/* The joined mutable pair at the colour's last value: the release moves the
 * object (a new address, the value kept) instead of bumping the colour,
 * as the four calls do. The home's fast path takes the bumps up to it. */
static void test_joined_colour_wraps(void **state)
{
    dsm_harness_t *c = *state;
    dsm_node_t *home = c->nodes[0];
    dsm_own_mutex_t mx, gm;
    dsm_own_box_t box;
    dsm_own_guard_t g;
    dsm_own_ref_t r;
    dsm_own_mut_t m;
    assert_int_equal(dsm_own_mutex_new(home, DSM_OWN_MUTEX_CAS, &mx), DSM_OK);
    assert_int_equal(dsm_own_box_alloc(home, TYPE, 8, &box), DSM_OK);
    assert_int_equal(dsm_own_mutex_adopt(home, mx, box, &gm), DSM_OK);
    uint64_t n = 0;
    for (;;) {
        assert_int_equal(dsm_own_mutex_lock_borrow_mut(home, gm, &g, &m), DSM_OK);
        dsm_gaddr_t before = m.g;
        *(uint64_t *)m.data = ++n;
        assert_int_equal(dsm_own_guard_release_mut_unlock(home, &g, &m), DSM_OK);
        if (dsm_gaddr_colour(before) == UINT16_MAX) {
            assert_int_not_equal(dsm_gaddr_strip(g.g), dsm_gaddr_strip(before));   /* moved */
            break;
        }
        assert_int_equal(g.g, dsm_gaddr_with_colour(before, (uint16_t)(dsm_gaddr_colour(before) + 1)));
        assert_true(n <= 65536);
    }
    assert_int_equal(dsm_own_mutex_lock_borrow(home, gm, &g, &r), DSM_OK);
    assert_int_equal(*(const uint64_t *)r.data, n);
    assert_int_equal(dsm_own_guard_release_unlock(home, &g, &r), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(home, gm), DSM_OK);
}

static void test_joined_cas(void **state) { joined_under(*state, DSM_OWN_MUTEX_CAS); }
static void test_joined_deleg(void **state) { joined_under(*state, DSM_OWN_MUTEX_DELEG); }

static void test_deleg(void **state) { counter_under(*state, DSM_OWN_MUTEX_DELEG); }
static void test_guard_deleg(void **state) { guard_under(*state, DSM_OWN_MUTEX_DELEG); }
static void test_guard_cas(void **state) { guard_under(*state, DSM_OWN_MUTEX_CAS); }
static void test_cas(void **state) { counter_under(*state, DSM_OWN_MUTEX_CAS); }

/* A thread waiting at its delegated mutex's home for a holder elsewhere
 * serves the holder's unlock itself, as it arrives: its node's progress
 * thread, parked for the wait, does not wake for it. (Waiting on a
 * condition variable, it left the unlock to the progress thread, which a
 * recent wait kept parked for up to its hands-off time.) */
typedef struct {
    dsm_node_t *node;
    dsm_own_mutex_t mx;
    dsm_status_t st;
    uint64_t wakeups_after;
} home_waiter_t;

static void *home_waiter(void *arg)
{
    home_waiter_t *w = arg;
    w->st = dsm_own_mutex_lock(w->node, w->mx);
    dsm_stats_t s;
    dsm_fabric_stats(dsm_node_fabric(w->node), &s);
    w->wakeups_after = s.progress_wakeups;
    if (w->st == DSM_OK)
        w->st = dsm_own_mutex_unlock(w->node, w->mx);
    return NULL;
}

/* One round: node 1 holds the mutex, a thread at its home (node 0) waits
 * for it, node 1 unlocks. Returns whether node 0's progress thread woke
 * between the unlock's send and the waiter's grant. */
static int home_waiter_round(dsm_harness_t *c)
{
    enum { STEADY_WAITS = 16 };   /* the pause doubles from 2 us to its 100 us cap in 6 */
    dsm_own_mutex_t mx;
    assert_int_equal(dsm_own_mutex_new(c->nodes[0], DSM_OWN_MUTEX_DELEG, &mx), DSM_OK);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[1], mx), DSM_OK);
    home_waiter_t w = {.node = c->nodes[0], .mx = mx};
    dsm_fabric_t *home = dsm_node_fabric(c->nodes[0]);
    dsm_stats_t before;
    dsm_fabric_stats(home, &before);
    uint64_t waits0 = before.waits;
    pthread_t t;
    pthread_create(&t, NULL, home_waiter, &w);
    /* Unlock only once the waiter's pauses reached their cap (each a wait;
     * nothing else waits on node 0 here) and node 0's progress thread
     * stands down for it. The bound only turns a lost wait into a failure:
     * a loaded host can keep a thread off a core for seconds, and the
     * progress thread first finishes its current sleep. */
    time_t until = time(NULL) + 60;
    do {
        sched_yield();
        dsm_fabric_stats(home, &before);
    } while ((before.waits - waits0 < STEADY_WAITS || !dsm_fabric_progress_parked(home)) && time(NULL) < until);
    assert_true(before.waits - waits0 >= STEADY_WAITS && dsm_fabric_progress_parked(home));
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[1], mx), DSM_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.st, DSM_OK);
    assert_int_equal(dsm_own_mutex_free(c->nodes[0], mx), DSM_OK);
    return w.wakeups_after != before.progress_wakeups;
}

/* Waiting on a condition variable, every round wakes the progress thread.
 * Attending the worker, a round may still see one: a waiter kept off its
 * core between two pauses for longer than the parked thread's hands-off
 * time leaves the worker to it, which is right. So some round of a few
 * must see none. */
static void test_home_waiter_serves_grant(void **state)
{
    enum { ROUNDS = 8 };
    int woken = 0;
    for (int r = 0; r < ROUNDS && woken == r; r++)
        woken += home_waiter_round(*state);
    assert_true(woken < ROUNDS);
}

/* Free right after every node unlocked: the remote holders' unlocks are
 * one-way, so the last may still be on its way to the home; free waits for
 * it instead of refusing. A mutex a remote node still holds is refused
 * (after that bounded wait). */
static void test_free_after_remote_unlocks(void **state)
{
    dsm_harness_t *c = *state;
    for (int round = 0; round < 40; round++) {
        dsm_own_mutex_t mx;
        assert_int_equal(dsm_own_mutex_new(c->nodes[0], DSM_OWN_MUTEX_DELEG, &mx), DSM_OK);
        for (int i = 1; i < N; i++) {
            assert_int_equal(dsm_own_mutex_lock(c->nodes[i], mx), DSM_OK);
            assert_int_equal(dsm_own_mutex_unlock(c->nodes[i], mx), DSM_OK);
        }
        assert_int_equal(dsm_own_mutex_free(c->nodes[0], mx), DSM_OK);
    }
    dsm_own_mutex_t held;
    assert_int_equal(dsm_own_mutex_new(c->nodes[0], DSM_OWN_MUTEX_DELEG, &held), DSM_OK);
    assert_int_equal(dsm_own_mutex_lock(c->nodes[1], held), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(c->nodes[0], held), DSM_ERR_STATE);
    assert_int_equal(dsm_own_mutex_unlock(c->nodes[1], held), DSM_OK);
    assert_int_equal(dsm_own_mutex_free(c->nodes[0], held), DSM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_deleg), cmocka_unit_test(test_cas),
                                       cmocka_unit_test(test_guard_deleg), cmocka_unit_test(test_guard_cas), cmocka_unit_test(test_guard_home_fast),
                                       cmocka_unit_test(test_joined_cas), cmocka_unit_test(test_joined_deleg),
                                       cmocka_unit_test(test_joined_forged), cmocka_unit_test(test_joined_colour_wraps),
                                       cmocka_unit_test(test_home_waiter_serves_grant),
                                       cmocka_unit_test(test_free_after_remote_unlocks)};
    dsm_set_log_level(0);
    int failed = cmocka_run_group_tests_name("own-mutex/shm", tests, setup_shm, test_cluster_teardown);
    failed += cmocka_run_group_tests_name("own-mutex/tcp", tests, setup_tcp, test_cluster_teardown);
    return failed;
}
