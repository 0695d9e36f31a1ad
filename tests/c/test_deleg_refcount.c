/* Tests of the weighted reference count of trusts (csrc/deleg/trust.c): the
 * clone-then-move race that breaks the thesis's toggle-set scheme, weight
 * exhaustion and its synchronous refill, cloning and dropping in delegated
 * context, and "destructor exactly once, after the last drop". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "dsm/deleg.h"

#define MAGIC 0x5AFEC0DEu

struct obj {
    uint32_t magic;
    uint64_t uses;
    atomic_int handles; /* trusts the test still holds on this object */
};

static atomic_int dtor_calls;
static atomic_int early_free;

static void obj_dtor(void *p)
{
    struct obj *o = p;
    if (atomic_load(&o->handles) != 0) atomic_fetch_add(&early_free, 1);
    o->magic = 0xDEAD;
    free(o);
    atomic_fetch_add(&dtor_calls, 1);
}

static void use_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)env;
    (void)args;
    (void)args_len;
    struct obj *o = prop;
    uint32_t ok = o->magic == MAGIC;
    o->uses++;
    dsm_deleg_return(ret, &ok, sizeof ok);
}

static void noop_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)ret;
    (void)prop;
    (void)env;
    (void)args;
    (void)args_len;
}

static dsm_deleg_rt_t *mkrt(unsigned threads, unsigned dedicated, uint64_t weight)
{
    dsm_deleg_config_t cfg = {.threads = threads, .dedicated = dedicated, .initial_weight = weight};
    dsm_deleg_rt_t *rt = NULL;
    assert_int_equal(dsm_deleg_rt_create(&cfg, &rt), DSM_OK);
    return rt;
}

/* ---- clone on A, move to B, B drops and its drop lands first ---- */
struct moved {
    dsm_deleg_trust_t t;
    struct obj *o; /* test bookkeeping only */
};
#define RACE_ITERS 1000
struct race {
    dsm_deleg_rt_t *rt;
    _Atomic(struct moved *) mailbox;       /* A -> B: a moved clone */
    atomic_int b_dropped;                 /* B -> A: B's drop has been applied */
    dsm_deleg_trust_t fence_trust;        /* on trustee 0, B orders its drop with it */
    atomic_int bad;
};
static struct race g_r;

static void race_main(void *arg, unsigned worker)
{
    (void)arg;
    if (worker == 0) { /* A */
        for (int i = 0; i < RACE_ITERS; i++) {
            struct obj *o = malloc(sizeof *o);
            *o = (struct obj){.magic = MAGIC};
            dsm_deleg_trust_t mine;
            struct moved *moved = malloc(sizeof *moved);
            moved->o = o;
            assert_int_equal(dsm_deleg_entrust(g_r.rt, 0, o, obj_dtor, 0, &mine), DSM_OK);
            atomic_store(&o->handles, 2);
            if (dsm_deleg_trust_clone(&mine, &moved->t) != DSM_OK) atomic_fetch_add(&g_r.bad, 1);
            atomic_store(&g_r.b_dropped, 0);
            atomic_store(&g_r.mailbox, moved); /* the move */
            while (!atomic_load(&g_r.b_dropped)) { dsm_deleg_yield(); sched_yield(); }
            /* B's subtraction has been applied; our share keeps it alive. */
            uint32_t ok = 0;
            if (dsm_deleg_apply(&mine, use_fn, NULL, 0, &ok, sizeof ok, NULL) != DSM_OK || !ok)
                atomic_fetch_add(&g_r.bad, 1);
            atomic_fetch_sub(&o->handles, 1);
            dsm_deleg_trust_drop(&mine);
        }
    } else { /* B */
        for (int i = 0; i < RACE_ITERS; i++) {
            struct moved *m;
            while (!(m = atomic_exchange(&g_r.mailbox, NULL))) { dsm_deleg_yield(); sched_yield(); }
            atomic_fetch_sub(&m->o->handles, 1);
            dsm_deleg_trust_drop(&m->t);
            free(m);
            /* Same pair (B, trustee 0): in order, so the drop ran before this. */
            dsm_deleg_apply(&g_r.fence_trust, noop_fn, NULL, 0, NULL, 0, NULL);
            atomic_store(&g_r.b_dropped, 1);
        }
    }
}

static void test_clone_then_move_race(void **state)
{
    (void)state;
    for (int w = 0; w < 2; w++) {
        /* default weights, then tiny ones that force refills all the time */
        memset(&g_r, 0, sizeof g_r);
        atomic_store(&dtor_calls, 0);
        atomic_store(&early_free, 0);
        g_r.rt = mkrt(3, 1, w == 0 ? 0 : 2);
        static uint64_t dummy;
        assert_int_equal(dsm_deleg_entrust(g_r.rt, 0, &dummy, NULL, 0, &g_r.fence_trust), DSM_OK);
        assert_int_equal(dsm_deleg_rt_run(g_r.rt, race_main, NULL), DSM_OK);
        assert_int_equal(g_r.bad, 0);
        assert_int_equal(early_free, 0);
        assert_int_equal(dtor_calls, RACE_ITERS);
        dsm_deleg_trust_drop(&g_r.fence_trust);
        dsm_deleg_rt_destroy(g_r.rt);
    }
}

/* ---- many clones across threads, exhausted weights, random drop order ---- */
#define FAN 64
struct fan {
    dsm_deleg_rt_t *rt;
    dsm_deleg_trust_t root;
    dsm_deleg_trust_t clones[FAN];
    atomic_int ready;
    atomic_int bad;
    struct obj *o;
    dsm_status_t clone_in_ctx_exhausted, clone_in_ctx_ok, drop_in_ctx;
};
static struct fan g_f;

/* In delegated context on trustee 1: cloning with weight left is a local
 * split; with weight 1 it needs a synchronous refill, which is refused. */
static void ctx_clone_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)ret;
    (void)prop;
    (void)env;
    (void)args;
    (void)args_len;
    static uint64_t remote_obj;
    dsm_deleg_trust_t r, a, b;
    /* a trust on trustee 0 (remote from here) with the runtime's weight, 2 */
    dsm_deleg_entrust(g_f.rt, 0, &remote_obj, NULL, 0, &r);
    g_f.clone_in_ctx_ok = dsm_deleg_trust_clone(&r, &a); /* 2 -> 1 + 1: local split */
    g_f.clone_in_ctx_exhausted = dsm_deleg_trust_clone(&a, &b); /* 1: needs a refill */
    dsm_deleg_trust_drop(&r);
    g_f.drop_in_ctx = dsm_deleg_trust_drop(&a);
}

static void fan_main(void *arg, unsigned worker)
{
    (void)arg;
    if (worker == 0) {
        /* chain and star clones from one trust, weight 2: every other clone refills */
        for (int i = 0; i < FAN; i++) {
            dsm_deleg_trust_t *src = (i % 3 == 2) ? &g_f.clones[i - 1] : &g_f.root;
            if (dsm_deleg_trust_clone(src, &g_f.clones[i]) != DSM_OK) atomic_fetch_add(&g_f.bad, 1);
        }
        atomic_store(&g_f.o->handles, FAN + 1);
        static uint64_t host;
        dsm_deleg_trust_t h;
        dsm_deleg_entrust(g_f.rt, 1, &host, NULL, 0, &h);
        dsm_deleg_apply(&h, ctx_clone_fn, NULL, 0, NULL, 0, NULL);
        dsm_deleg_trust_drop(&h);
        atomic_store(&g_f.ready, 1);
        atomic_fetch_sub(&g_f.o->handles, 1);
        dsm_deleg_trust_drop(&g_f.root);
    } else {
        while (!atomic_load(&g_f.ready)) { dsm_deleg_yield(); sched_yield(); }
    }
    /* Both workers drop half of the clones each, interleaved. */
    for (int i = (int)worker; i < FAN; i += 2) {
        uint32_t ok = 0;
        if (dsm_deleg_apply(&g_f.clones[i], use_fn, NULL, 0, &ok, sizeof ok, NULL) != DSM_OK || !ok)
            atomic_fetch_add(&g_f.bad, 1);
        atomic_fetch_sub(&g_f.o->handles, 1);
        dsm_deleg_trust_drop(&g_f.clones[i]);
    }
}

static void test_fanout_exhausted_weights(void **state)
{
    (void)state;
    memset(&g_f, 0, sizeof g_f);
    atomic_store(&dtor_calls, 0);
    atomic_store(&early_free, 0);
    g_f.rt = mkrt(3, 1, 2);
    struct obj *o = malloc(sizeof *o);
    *o = (struct obj){.magic = MAGIC};
    g_f.o = o;
    atomic_store(&o->handles, 1);
    assert_int_equal(dsm_deleg_entrust(g_f.rt, 0, o, obj_dtor, 0, &g_f.root), DSM_OK);
    assert_int_equal(dsm_deleg_rt_run(g_f.rt, fan_main, NULL), DSM_OK);
    assert_int_equal(g_f.bad, 0);
    assert_int_equal(g_f.clone_in_ctx_ok, DSM_OK);
    assert_int_equal(g_f.clone_in_ctx_exhausted, DSM_ERR_STATE);
    assert_int_equal(g_f.drop_in_ctx, DSM_OK);
    assert_int_equal(early_free, 0);
    assert_int_equal(dtor_calls, 1);
    dsm_deleg_rt_destroy(g_f.rt);
}

/* ---- outside a run: entrust, clone, drop run inline ---- */
static void test_between_runs(void **state)
{
    (void)state;
    dsm_deleg_rt_t *rt = mkrt(2, 0, 3);
    atomic_store(&dtor_calls, 0);
    struct obj *o = malloc(sizeof *o);
    *o = (struct obj){.magic = MAGIC};
    dsm_deleg_trust_t t, c[10];
    assert_int_equal(dsm_deleg_entrust(rt, 1, o, obj_dtor, 0, &t), DSM_OK);
    for (int i = 0; i < 10; i++) assert_int_equal(dsm_deleg_trust_clone(&t, &c[i]), DSM_OK);
    for (int i = 0; i < 10; i++) assert_int_equal(dsm_deleg_trust_drop(&c[i]), DSM_OK);
    assert_int_equal(dtor_calls, 0);
    assert_int_equal(dsm_deleg_trust_drop(&t), DSM_OK);
    assert_int_equal(dtor_calls, 1);
    assert_int_equal(dsm_deleg_trust_drop(&t), DSM_ERR_INVALID); /* already dropped */
    dsm_deleg_rt_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clone_then_move_race),
        cmocka_unit_test(test_fanout_exhausted_weights),
        cmocka_unit_test(test_between_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
