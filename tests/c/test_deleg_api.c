/* Tests of the delegation API of csrc/deleg on one node: apply, apply_with,
 * apply_then (also from delegated context), launch with a latch and nested
 * blocking, the blocking-call check, the local shortcut, in-order delivery
 * under stress from many fibers (nothing lost or duplicated, variable and
 * spilled responses, spilled arguments), a trustee's inline loop that still
 * serves its peers, and termination of a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <string.h>

#include "deleg/internal.h"
#include "dsm/deleg.h"

static dsm_deleg_rt_t *mkrt(unsigned threads, unsigned dedicated)
{
    dsm_deleg_config_t cfg = {.threads = threads, .dedicated = dedicated, .stack_size = 64 * 1024};
    dsm_deleg_rt_t *rt = NULL;
    assert_int_equal(dsm_deleg_rt_create(&cfg, &rt), DSM_OK);
    return rt;
}

/* ---- closures ---- */
static void add_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)args;
    (void)args_len;
    uint64_t *c = prop, d;
    memcpy(&d, env, 8);
    uint64_t old = *c;
    *c += d;
    dsm_deleg_return(ret, &old, sizeof old);
}

static void get_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)env;
    (void)args;
    (void)args_len;
    dsm_deleg_return(ret, prop, 8);
}

static void where_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)prop;
    (void)env;
    (void)args;
    (void)args_len;
    int self = dsm_deleg_self(), ctx = dsm_deleg_in_delegated_context();
    int v[2] = {self, ctx};
    dsm_deleg_return(ret, v, sizeof v);
}

/* ---- basic apply, dedicated and shared ---- */
struct basic {
    dsm_deleg_trust_t ctr;
    atomic_int errors;
};

static void basic_main(void *arg, unsigned worker)
{
    struct basic *b = arg;
    (void)worker;
    for (int i = 0; i < 1000; i++) {
        uint64_t one = 1, old = 0;
        if (dsm_deleg_apply(&b->ctr, add_fn, &one, 8, &old, sizeof old, NULL) != DSM_OK) b->errors++;
    }
    int where[2] = {-1, -1};
    dsm_deleg_apply(&b->ctr, where_fn, NULL, 0, where, sizeof where, NULL);
    if (where[0] != (int)dsm_deleg_trust_trustee(&b->ctr) || where[1] != 1) b->errors++;
}

static void test_apply_dedicated_and_shared(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        dsm_deleg_rt_t *rt = mkrt(3, mode == 0 ? 1 : 0);
        uint64_t counter = 17;
        struct basic b = {.errors = 0};
        assert_int_equal(dsm_deleg_entrust(rt, 0, &counter, NULL, 0, &b.ctr), DSM_OK);
        assert_int_equal(dsm_deleg_rt_run(rt, basic_main, &b), DSM_OK);
        assert_int_equal(b.errors, 0);
        unsigned clients = mode == 0 ? 2 : 3;
        assert_int_equal(counter, 17 + 1000 * clients);
        /* Between runs the caller acts as the trustee: apply runs inline. */
        uint64_t v = 0;
        assert_int_equal(dsm_deleg_apply(&b.ctr, get_fn, NULL, 0, &v, 8, NULL), DSM_OK);
        assert_int_equal(v, counter);
        assert_int_equal(dsm_deleg_trust_drop(&b.ctr), DSM_OK);
        dsm_deleg_rt_destroy(rt);
    }
}

/* ---- stress: ordering, nothing lost or duplicated, var/spill sizes ----
 * Each trustee holds two properties and each request picks one of two
 * closures for one of them at random, so a pair's stream mixes requests that
 * repeat the previous target (sent without it, REQF_SAME) with ones that
 * change it; every closure checks it ran as the target its env names. */
#define ST_THREADS 3
#define ST_FIBERS 24
#define ST_OPS 1500

struct log_prop {
    uint64_t next_seq[ST_THREADS]; /* per client thread: next expected seq */
    uint64_t bad;
    uint64_t count;
};

struct st_env {
    uint32_t client;
    uint32_t resp_len;
    uint64_t seq;
    uint32_t fn_id, prop_id; /* the target the request was sent to */
};

/* One of a trustee's two properties: both log into its one log_prop, so
 * sequence checks see the pair's whole stream. */
struct st_prop {
    struct log_prop *log;
    uint32_t id;
};

static uint8_t pattern(uint64_t seq, size_t i) { return (uint8_t)(seq * 131 + i * 7); }

static void log_as(uint32_t fn_id, dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args,
                   size_t args_len)
{
    struct st_prop *sp = prop;
    struct log_prop *p = sp->log;
    struct st_env e;
    memcpy(&e, env, sizeof e);
    if (e.fn_id != fn_id || e.prop_id != sp->id) p->bad++;
    if (e.client >= ST_THREADS || p->next_seq[e.client] != e.seq) p->bad++;
    else p->next_seq[e.client]++;
    const uint8_t *a = args;
    for (size_t i = 0; i < args_len; i++)
        if (a[i] != pattern(e.seq, i)) {
            p->bad++;
            break;
        }
    p->count++;
    uint8_t *out = dsm_deleg_return_reserve(ret, e.resp_len + 8);
    if (!out) return;
    memcpy(out, &e.seq, 8);
    for (size_t i = 0; i < e.resp_len; i++) out[8 + i] = pattern(e.seq + 1, i);
}

static void log_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    log_as(0, ret, prop, env, args, args_len);
}

static void log_fn_b(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    log_as(1, ret, prop, env, args, args_len);
}

struct st_thread {
    uint64_t next_seq[ST_THREADS];  /* per trustee: next seq to issue */
    uint64_t next_resp[ST_THREADS]; /* per trustee: next seq expected back */
    uint64_t bad, done;
};

struct stress {
    dsm_deleg_trust_t logs[ST_THREADS][2];
    struct st_thread th[ST_THREADS];
};
static struct stress *g_st;

struct resp_ctx {
    struct st_thread *me;
    unsigned trustee;
    uint32_t resp_len;
};

static void check_resp(struct st_thread *me, unsigned trustee, uint32_t resp_len, const void *ret, size_t len,
                       uint64_t expect_seq)
{
    uint64_t seq;
    if (len != (size_t)resp_len + 8) {
        me->bad++;
        return;
    }
    memcpy(&seq, ret, 8);
    if (expect_seq != UINT64_MAX) {
        /* blocking apply: checked when the fiber resumes, so only its own seq */
        if (seq != expect_seq) me->bad++;
    } else {
        /* continuations run in delivery order: strictly increasing per pair */
        if (seq < me->next_resp[trustee]) me->bad++;
        me->next_resp[trustee] = seq + 1;
    }
    const uint8_t *r = (const uint8_t *)ret + 8;
    for (size_t i = 0; i < resp_len; i++)
        if (r[i] != pattern(seq + 1, i)) {
            me->bad++;
            break;
        }
    me->done++;
}

static void st_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    struct resp_ctx *c = arg;
    if (st != DSM_OK) c->me->bad++;
    check_resp(c->me, c->trustee, c->resp_len, ret, len, UINT64_MAX);
    free(c);
}

static uint32_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)*s;
}

static void st_fiber(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    int self = dsm_deleg_self();
    struct st_thread *me = &g_st->th[self];
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (id * 7919 + (uint64_t)self);
    uint8_t *args = malloc(4096);
    uint8_t *resp = malloc(4096 + 8);
    for (int i = 0; i < ST_OPS; i++) {
        unsigned tr = rnd(&seed) % ST_THREADS;
        if ((int)tr == self) tr = (tr + 1) % ST_THREADS;
        uint32_t r = rnd(&seed);
        /* mostly small, some filling the overflow block, some spilled */
        uint32_t alen = (r & 7) == 0 ? (r >> 8) % 3000 : (r >> 8) % 40;
        uint32_t rlen = (r & 0x30) == 0 ? (r >> 12) % 2500 : (r >> 12) % 24;
        uint32_t pick = rnd(&seed);
        struct st_env e = {.client = (uint32_t)self, .resp_len = rlen, .seq = me->next_seq[tr]++,
                           .fn_id = pick & 1, .prop_id = (pick >> 1) & 1};
        dsm_deleg_fn fn = e.fn_id ? log_fn_b : log_fn;
        dsm_deleg_trust_t *t = &g_st->logs[tr][e.prop_id];
        for (size_t k = 0; k < alen; k++) args[k] = pattern(e.seq, k);
        if (r & 0x100) {
            struct resp_ctx *c = malloc(sizeof *c);
            *c = (struct resp_ctx){me, tr, rlen};
            if (dsm_deleg_apply_then(t, fn, &e, sizeof e, args, alen, DSM_DELEG_VARSIZE,
                                     st_then, c) != DSM_OK)
                me->bad++;
        } else {
            size_t len = 0;
            if (dsm_deleg_apply_with(t, fn, &e, sizeof e, args, alen, resp, 4096 + 8, &len) !=
                DSM_OK)
                me->bad++;
            else
                check_resp(me, tr, rlen, resp, len, e.seq);
        }
        if ((r & 0xf000) == 0) dsm_deleg_yield();
    }
    free(resp);
    free(args);
}

static void st_main(void *arg, unsigned worker)
{
    (void)arg;
    (void)worker;
    for (uintptr_t f = 0; f < ST_FIBERS; f++) assert_int_equal(dsm_deleg_spawn(st_fiber, (void *)f), DSM_OK);
}

static void test_slot_stress(void **state)
{
    (void)state;
    dsm_deleg_rt_t *rt = mkrt(ST_THREADS, 0);
    struct stress *st = calloc(1, sizeof *st);
    struct log_prop *props = calloc(ST_THREADS, sizeof *props);
    struct st_prop sprops[ST_THREADS][2];
    g_st = st;
    for (unsigned t = 0; t < ST_THREADS; t++)
        for (uint32_t k = 0; k < 2; k++) {
            sprops[t][k] = (struct st_prop){&props[t], k};
            assert_int_equal(dsm_deleg_entrust(rt, t, &sprops[t][k], NULL, 0, &st->logs[t][k]), DSM_OK);
        }
    assert_int_equal(dsm_deleg_rt_run(rt, st_main, NULL), DSM_OK);
    uint64_t total = 0, served = 0;
    for (unsigned t = 0; t < ST_THREADS; t++) {
        assert_int_equal(st->th[t].bad, 0);
        assert_int_equal(props[t].bad, 0);
        total += st->th[t].done;
        served += props[t].count;
        for (unsigned s = 0; s < ST_THREADS; s++) {
            assert_int_equal(props[s].next_seq[t], st->th[t].next_seq[s]);
        }
    }
    assert_int_equal(total, (uint64_t)ST_THREADS * ST_FIBERS * ST_OPS);
    assert_int_equal(served, total);
    for (unsigned t = 0; t < ST_THREADS; t++)
        for (unsigned k = 0; k < 2; k++) dsm_deleg_trust_drop(&st->logs[t][k]);
    dsm_deleg_rt_destroy(rt);
    free(props);
    free(st);
}

/* ---- apply_then from delegated context; blocking-call check ---- */
struct nested {
    dsm_deleg_trust_t a, b;
    uint64_t val_a, val_b;
    int then_ran_on;
    int then_in_ctx;
    dsm_status_t blocking_in_closure, blocking_in_then, yield_ok;
    uint64_t got;
};
static struct nested g_n;

static void nested_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)arg;
    (void)st;
    if (len == 8) memcpy(&g_n.got, ret, 8);
    g_n.then_ran_on = dsm_deleg_self();
    g_n.then_in_ctx = dsm_deleg_in_delegated_context();
    uint64_t v;
    g_n.blocking_in_then = dsm_deleg_apply(&g_n.b, get_fn, NULL, 0, &v, 8, NULL);
}

/* Runs on trustee 0 (delegated context): delegates onward to trustee 1. */
static void outer_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)ret;
    (void)env;
    (void)args;
    (void)args_len;
    (*(uint64_t *)prop)++;
    uint64_t v, five = 5;
    g_n.blocking_in_closure = dsm_deleg_apply(&g_n.b, get_fn, NULL, 0, &v, 8, NULL);
    dsm_deleg_apply_then(&g_n.b, add_fn, &five, 8, NULL, 0, 8, nested_then, NULL);
}

static void nested_main(void *arg, unsigned worker)
{
    (void)arg;
    if (worker != 0) return; /* thread 2 is the client */
    uint64_t old;
    assert_int_equal(dsm_deleg_apply(&g_n.a, outer_fn, NULL, 0, NULL, 0, NULL), DSM_OK);
    assert_int_equal(dsm_deleg_apply(&g_n.b, get_fn, NULL, 0, &old, 8, NULL), DSM_OK);
    (void)old;
}

static void test_apply_then_from_delegated_context(void **state)
{
    (void)state;
    dsm_deleg_rt_t *rt = mkrt(3, 2); /* 0, 1 dedicated; 2 the client */
    memset(&g_n, 0, sizeof g_n);
    g_n.val_b = 100;
    g_n.then_ran_on = -1;
    assert_int_equal(dsm_deleg_entrust(rt, 0, &g_n.val_a, NULL, 0, &g_n.a), DSM_OK);
    assert_int_equal(dsm_deleg_entrust(rt, 1, &g_n.val_b, NULL, 0, &g_n.b), DSM_OK);
    assert_int_equal(dsm_deleg_rt_run(rt, nested_main, NULL), DSM_OK);
    assert_int_equal(g_n.val_a, 1);
    assert_int_equal(g_n.val_b, 105);
    assert_int_equal(g_n.got, 100);           /* add_fn returns the old value */
    assert_int_equal(g_n.then_ran_on, 0);     /* the continuation ran on the issuing trustee */
    assert_int_equal(g_n.then_in_ctx, 1);
    assert_int_equal(g_n.blocking_in_closure, DSM_ERR_STATE);
    assert_int_equal(g_n.blocking_in_then, DSM_ERR_STATE);
    dsm_deleg_trust_drop(&g_n.a);
    dsm_deleg_trust_drop(&g_n.b);
    dsm_deleg_rt_destroy(rt);
}

/* ---- local shortcut; calls from a foreign thread ---- */
struct local {
    dsm_deleg_trust_t t;
    uint64_t v;
    int ran_inline;
    dsm_status_t foreign;
    atomic_int go, done;
};
static struct local g_l;

static void local_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)st;
    (void)ret;
    (void)len;
    /* 1: ran, in delegated context as every continuation does */
    *(int *)arg = dsm_deleg_in_delegated_context() ? 1 : 2;
}

static void *foreign_thread(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_l.go)) sched_yield();
    uint64_t v;
    g_l.foreign = dsm_deleg_apply(&g_l.t, get_fn, NULL, 0, &v, 8, NULL);
    atomic_store(&g_l.done, 1);
    return NULL;
}

static void local_main(void *arg, unsigned worker)
{
    (void)arg;
    (void)worker;
    uint64_t one = 1;
    dsm_deleg_trust_t bogus;
    assert_int_equal(dsm_deleg_entrust(NULL, 0, NULL, NULL, 0, &bogus), DSM_ERR_INVALID);
    int flag = 0;
    assert_int_equal(dsm_deleg_apply_then(&g_l.t, add_fn, &one, 8, NULL, 0, 8, local_then, &flag), DSM_OK);
    g_l.ran_inline = flag; /* set before apply_then returned: inline */
    atomic_store(&g_l.go, 1);
    while (!atomic_load(&g_l.done)) dsm_deleg_yield();
}

static void test_local_shortcut_and_foreign(void **state)
{
    (void)state;
    dsm_deleg_rt_t *rt = mkrt(1, 0);
    memset(&g_l, 0, sizeof g_l);
    pthread_t ft;
    pthread_create(&ft, NULL, foreign_thread, NULL);
    /* trust made before the run: trustee 0 is the only thread */
    dsm_deleg_trust_t t;
    assert_int_equal(dsm_deleg_entrust(rt, 0, &g_l.v, NULL, 0, &t), DSM_OK);
    g_l.t = t;
    assert_int_equal(dsm_deleg_rt_run(rt, local_main, NULL), DSM_OK);
    pthread_join(ft, NULL);
    assert_int_equal(g_l.ran_inline, 1);
    assert_int_equal(g_l.v, 1);
    assert_int_equal(g_l.foreign, DSM_ERR_STATE);
    dsm_deleg_trust_drop(&g_l.t);
    dsm_deleg_rt_destroy(rt);
}

/* ---- the local shortcut answers exactly as a remote trustee does ---- */
static void pattern_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)prop;
    (void)args;
    (void)args_len;
    uint32_t len;
    memcpy(&len, env, 4);
    uint8_t buf[512];
    for (uint32_t i = 0; i < len; i++) buf[i] = (uint8_t)(i * 7 + 1);
    dsm_deleg_return(ret, buf, len);
}

struct same {
    dsm_deleg_trust_t t[2];
    int errors;
};

/* (fixed result size, bytes the closure returns): short, exact and long
 * results for the direct small-result path and the buffer path. */
static const uint32_t same_cases[][2] = {{8, 4}, {8, 8}, {8, 12}, {64, 64}, {64, 3}, {100, 30}, {100, 200}, {256, 256}};

static void same_then(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    uint8_t *out = arg;
    if (st == DSM_OK) memcpy(out, ret, len);
}

static void same_main(void *arg, unsigned worker)
{
    struct same *sm = arg;
    if (worker != 0) return;
    for (size_t k = 0; k < sizeof same_cases / sizeof *same_cases; k++) {
        uint32_t cap = same_cases[k][0], produce = same_cases[k][1];
        uint8_t got[2][2][512];
        size_t var_len[2] = {0, 0};
        memset(got, 0xee, sizeof got);
        for (int w = 0; w < 2; w++) { /* w = 0: this thread (local), 1: the other */
            if (dsm_deleg_apply(&sm->t[w], pattern_fn, &produce, 4, got[w][0], cap, NULL) != DSM_OK) sm->errors++;
            if (dsm_deleg_apply_then(&sm->t[w], pattern_fn, &produce, 4, NULL, 0, cap, same_then, got[w][1]) !=
                DSM_OK)
                sm->errors++;
            uint8_t vbuf[512];
            if (dsm_deleg_apply(&sm->t[w], pattern_fn, &produce, 4, vbuf, sizeof vbuf, &var_len[w]) != DSM_OK)
                sm->errors++;
        }
        while (got[1][1][0] == 0xee) dsm_deleg_yield(); /* the remote apply_then */
        for (uint32_t i = 0; i < cap; i++) {
            uint8_t want = i < produce ? (uint8_t)(i * 7 + 1) : 0;
            for (int w = 0; w < 2; w++)
                for (int v = 0; v < 2; v++)
                    if (got[w][v][i] != want) sm->errors++;
        }
        if (var_len[0] != produce || var_len[1] != produce) sm->errors++;
    }
}

static void test_local_answers_as_remote(void **state)
{
    (void)state;
    dsm_deleg_rt_t *rt = mkrt(2, 0);
    struct same sm = {0};
    uint64_t objs[2] = {0, 0};
    for (unsigned w = 0; w < 2; w++) assert_int_equal(dsm_deleg_entrust(rt, w, &objs[w], NULL, 0, &sm.t[w]), DSM_OK);
    assert_int_equal(dsm_deleg_rt_run(rt, same_main, &sm), DSM_OK);
    assert_int_equal(sm.errors, 0);
    for (unsigned w = 0; w < 2; w++) dsm_deleg_trust_drop(&sm.t[w]);
    dsm_deleg_rt_destroy(rt);
}

/* ---- prefetch hints: the hook sees every hinted request, twice, first ---- */
struct hinted {
    dsm_deleg_trust_t t;
    uint64_t seen[2][64];
    unsigned nseen[2];
    unsigned ran, ran_before_hooks, errors;
};
static struct hinted g_h;

static void hint_hook(void *obj, uint64_t hint, int pass)
{
    (void)obj;
    if (pass < 0 || pass > 1 || g_h.nseen[pass] >= 64) {
        g_h.errors++;
        return;
    }
    g_h.seen[pass][g_h.nseen[pass]++] = hint;
}

static void hint_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)ret;
    (void)prop;
    (void)env;
    (void)args;
    (void)args_len;
    /* a closure of a hinted batch runs after both passes over it */
    if (g_h.nseen[1] == 0) g_h.ran_before_hooks++;
    g_h.ran++;
}

static void hint_main(void *arg, unsigned worker)
{
    (void)arg;
    if (worker != 1) return; /* the trust lives on thread 0: every call is remote */
    for (uint64_t i = 0; i < 10; i++) {
        uint64_t hint = 1000 + i;
        if (dsm_deleg_apply_then_flags(&g_h.t, hint_fn, &hint, 8, NULL, 0, 0, NULL, NULL, REQF_HINT) != DSM_OK)
            g_h.errors++;
    }
    /* an environment too short for a hint: served, never handed to the hook */
    uint32_t small = 7;
    if (dsm_deleg_apply_then_flags(&g_h.t, hint_fn, &small, 4, NULL, 0, 0, NULL, NULL, REQF_HINT) != DSM_OK)
        g_h.errors++;
}

static void test_prefetch_hints(void **state)
{
    (void)state;
    dsm_deleg_rt_t *rt = mkrt(2, 0);
    memset(&g_h, 0, sizeof g_h);
    uint64_t obj = 0;
    assert_int_equal(dsm_deleg_entrust(rt, 0, &obj, NULL, 0, &g_h.t), DSM_OK);
    g_h.t.prop->prefetch = hint_hook;
    assert_int_equal(dsm_deleg_rt_run(rt, hint_main, NULL), DSM_OK);
    assert_int_equal(g_h.errors, 0);
    assert_int_equal(g_h.ran, 11);
    assert_int_equal(g_h.ran_before_hooks, 0);
    assert_int_equal(g_h.nseen[0], 10);
    assert_int_equal(g_h.nseen[1], 10);
    for (unsigned i = 0; i < 10; i++) {
        assert_int_equal(g_h.seen[0][i], 1000 + i);
        assert_int_equal(g_h.seen[1][i], 1000 + i);
    }
    dsm_deleg_trust_drop(&g_h.t);
    dsm_deleg_rt_destroy(rt);
}

/* ---- launch with a latch and nested blocking ---- */
#define L_FIBERS 16
struct lprop {
    uint64_t value;
    int inside; /* fibers inside the latched section: must stay <= 1 */
    int max_inside;
};
struct lstate {
    dsm_deleg_trust_t latched; /* on trustee 0 */
    dsm_deleg_trust_t other;   /* plain counter on trustee 1 */
    uint64_t other_val;
    atomic_int then_count;
    atomic_int bad;
    dsm_status_t launch_plain;
};
static struct lstate g_ls;

/* Read, block on a nested delegation (to trustee 1), write back: a lost
 * update would show if the latch did not serialise launched closures. */
static void latched_incr(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)env;
    (void)args;
    (void)args_len;
    struct lprop *p = prop;
    p->inside++;
    if (p->inside > p->max_inside) p->max_inside = p->inside;
    uint64_t v = p->value, one = 1, old;
    if (dsm_deleg_in_delegated_context()) atomic_fetch_add(&g_ls.bad, 1);
    if (dsm_deleg_apply(&g_ls.other, add_fn, &one, 8, &old, 8, NULL) != DSM_OK) atomic_fetch_add(&g_ls.bad, 1);
    dsm_deleg_yield();
    p->value = v + 1;
    p->inside--;
    dsm_deleg_return(ret, &p->value, 8);
}

static void launch_then_cb(void *arg, dsm_status_t st, const void *ret, size_t len)
{
    (void)arg;
    if (st != DSM_OK || len != 8) atomic_fetch_add(&g_ls.bad, 1);
    (void)ret;
    atomic_fetch_add(&g_ls.then_count, 1);
}

static void launch_fiber(void *arg)
{
    (void)arg;
    for (int i = 0; i < 10; i++) {
        uint64_t v = 0;
        size_t len = 0;
        if (dsm_deleg_launch(&g_ls.latched, latched_incr, NULL, 0, NULL, 0, &v, 8, &len) != DSM_OK || len != 8 ||
            v == 0)
            atomic_fetch_add(&g_ls.bad, 1);
        if (dsm_deleg_launch_then(&g_ls.latched, latched_incr, NULL, 0, NULL, 0, launch_then_cb, NULL) != DSM_OK)
            atomic_fetch_add(&g_ls.bad, 1);
    }
}

static void launch_main(void *arg, unsigned worker)
{
    (void)arg;
    if (worker == 0) {
        uint64_t v;
        g_ls.launch_plain = dsm_deleg_launch(&g_ls.other, get_fn, NULL, 0, NULL, 0, &v, 8, NULL);
    }
    for (uintptr_t f = 0; f < L_FIBERS; f++) dsm_deleg_spawn(launch_fiber, (void *)f);
}

static void test_launch_latch_nested(void **state)
{
    (void)state;
    /* trustee 0 dedicated; 1 and 2 shared (1 also hosts `other`) */
    dsm_deleg_rt_t *rt = mkrt(3, 1);
    memset(&g_ls, 0, sizeof g_ls);
    struct lprop lp = {0};
    assert_int_equal(dsm_deleg_entrust(rt, 0, &lp, NULL, 1, &g_ls.latched), DSM_OK);
    assert_int_equal(dsm_deleg_entrust(rt, 1, &g_ls.other_val, NULL, 0, &g_ls.other), DSM_OK);
    assert_int_equal(dsm_deleg_rt_run(rt, launch_main, NULL), DSM_OK);
    uint64_t launches = 2 * L_FIBERS * 10 * 2;
    assert_int_equal(g_ls.bad, 0);
    assert_int_equal(g_ls.launch_plain, DSM_ERR_INVALID);
    assert_int_equal(lp.value, launches);
    assert_int_equal(g_ls.other_val, launches);
    assert_int_equal(lp.max_inside, 1);
    assert_int_equal(g_ls.then_count, launches / 2);
    dsm_deleg_trust_drop(&g_ls.latched);
    dsm_deleg_trust_drop(&g_ls.other);
    dsm_deleg_rt_destroy(rt);
}

/* ---- a trustee's inline loop still serves its peers ----
 * Thread 0's fiber applies to its own property in a loop that never yields;
 * thread 1 applies to the same property one request at a time. Every
 * DELEG_INLINE_RUN inline calls thread 0 serves the waiting batch, so
 * thread 1's requests are served while the loop runs. (Before, they waited
 * for the loop to end: none served during it.) */
struct inline_loop {
    dsm_deleg_trust_t t;
    atomic_int peer_started, loop_done;
    int in_loop;        /* thread 0 only: read by the closure, which runs there */
    uint64_t peer_in_loop, own_calls, errors;
};
static struct inline_loop g_il;

static void il_fn(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)prop;
    (void)args;
    (void)args_len;
    uint32_t who;
    memcpy(&who, env, 4);
    if (dsm_deleg_self() != 0) g_il.errors++;
    if (who == 1 && g_il.in_loop) g_il.peer_in_loop++;
    dsm_deleg_return(ret, &who, 4);
}

static void il_main(void *arg, unsigned worker)
{
    (void)arg;
    uint32_t who = worker, back;
    if (worker == 1) {
        atomic_store(&g_il.peer_started, 1);
        while (!atomic_load(&g_il.loop_done))
            if (dsm_deleg_apply(&g_il.t, il_fn, &who, 4, &back, 4, NULL) != DSM_OK || back != 1) g_il.errors++;
        return;
    }
    while (!atomic_load(&g_il.peer_started)) dsm_deleg_yield();
    /* until the peer was served 10 times inside the loop, or 5 s */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    g_il.in_loop = 1;
    do {
        for (int i = 0; i < 1000; i++) {
            if (dsm_deleg_apply(&g_il.t, il_fn, &who, 4, &back, 4, NULL) != DSM_OK || back != 0) g_il.errors++;
            g_il.own_calls++;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (g_il.peer_in_loop < 10 && (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 5000000000L);
    g_il.in_loop = 0;
    atomic_store(&g_il.loop_done, 1);
}

static void test_inline_loop_serves_peers(void **state)
{
    (void)state;
    dsm_deleg_rt_t *rt = mkrt(2, 0);
    memset(&g_il, 0, sizeof g_il);
    uint64_t prop = 0;
    assert_int_equal(dsm_deleg_entrust(rt, 0, &prop, NULL, 0, &g_il.t), DSM_OK);
    assert_int_equal(dsm_deleg_rt_run(rt, il_main, NULL), DSM_OK);
    assert_int_equal(g_il.errors, 0);
    assert_true(g_il.own_calls >= 1000);
    assert_true(g_il.peer_in_loop >= 10);
    dsm_deleg_trust_drop(&g_il.t);
    dsm_deleg_rt_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_apply_dedicated_and_shared),
        cmocka_unit_test(test_slot_stress),
        cmocka_unit_test(test_apply_then_from_delegated_context),
        cmocka_unit_test(test_local_shortcut_and_foreign),
        cmocka_unit_test(test_local_answers_as_remote),
        cmocka_unit_test(test_prefetch_hints),
        cmocka_unit_test(test_launch_latch_nested),
        cmocka_unit_test(test_inline_loop_serves_peers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
