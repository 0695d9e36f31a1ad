/* own's pure parts without a cluster: the read cache (refcounts, pending
 * fetches shared by concurrent readers, lazy eviction under a budget, a
 * failed fetch leaves nothing), the per-slot colour memory (monotone,
 * quarantine at the last colour), a thread's spare slots (exact sizes,
 * bounded, the next colour kept), the object/record/message codecs (a
 * channel item of each kind) and the type registry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "dsm/heap.h"
#include "dsm/log.h"
#include "dsm/own.h"
#include "own/cache.h"
#include "own/colour.h"
#include "own/msg.h"
#include "own/object.h"
#include "own/place_msg.h"
#include "own/spare.h"
#include "own/types.h"

typedef struct fetcher {
    int calls;
    int fail;
} fetcher_t;

static dsm_status_t fetch(void *ctx, uint64_t key, void *buf, size_t len)
{
    fetcher_t *f = ctx;
    __atomic_fetch_add(&f->calls, 1, __ATOMIC_RELAXED);
    if (f->fail)
        return DSM_ERR_PEER_DEAD;
    memset(buf, (int)(key & 0xff), len);
    return DSM_OK;
}

static void test_cache_refcounts(void **state)
{
    (void)state;
    own_cache_t *c;
    assert_int_equal(own_cache_create(1 << 20, &c), DSM_OK);
    fetcher_t f = {0, 0};
    const uint8_t *p, *q;
    int hit;
    uint64_t k = dsm_gaddr_with_colour(dsm_gaddr_make(1, 4096), 7);
    assert_int_equal(own_cache_acquire(c, k, 100, fetch, &f, &p, &hit), DSM_OK);
    assert_int_equal(hit, 0);
    assert_int_equal(p[99], 0x00 | (k & 0xff));
    assert_int_equal(own_cache_acquire(c, k, 100, fetch, &f, &q, &hit), DSM_OK);
    assert_int_equal(hit, 1);
    assert_ptr_equal(p, q);
    assert_int_equal(f.calls, 1);
    assert_int_equal(own_cache_count(c, k), 2);
    /* Another colour of the same place is another object. */
    uint64_t k2 = dsm_gaddr_with_colour(k, 8);
    assert_int_equal(own_cache_acquire(c, k2, 100, fetch, &f, &q, &hit), DSM_OK);
    assert_int_equal(hit, 0);
    assert_int_equal(own_cache_acquire(c, k, 50, fetch, &f, &q, &hit), DSM_ERR_BAD_ADDR);
    /* Referenced entries survive eviction and forget; unreferenced ones do not. */
    assert_int_equal(own_cache_evict(c, 0), 0);
    assert_int_equal(own_cache_forget(c, k), 0);
    assert_int_equal(own_cache_release(c, k), DSM_OK);
    assert_int_equal(own_cache_release(c, k), DSM_OK);
    assert_int_equal(own_cache_release(c, k), DSM_ERR_STATE);
    assert_int_equal(own_cache_forget(c, k), 1);
    assert_int_equal(own_cache_count(c, k), -1);
    assert_int_equal(own_cache_release(c, k2), DSM_OK);
    uint64_t e, b, ev;
    own_cache_usage(c, &e, &b, &ev);
    assert_int_equal(e, 1);
    assert_int_equal(b, 100);
    assert_int_equal(own_cache_evict(c, 0), 1);
    own_cache_usage(c, &e, &b, &ev);
    assert_int_equal(e, 0);
    assert_int_equal(ev, 1);
    /* A failed fetch caches nothing. */
    f.fail = 1;
    assert_int_equal(own_cache_acquire(c, k, 100, fetch, &f, &p, &hit), DSM_ERR_PEER_DEAD);
    assert_null(p);
    assert_int_equal(own_cache_count(c, k), -1);
    own_cache_destroy(c);
}

static void test_cache_budget(void **state)
{
    (void)state;
    own_cache_t *c;
    assert_int_equal(own_cache_create(300, &c), DSM_OK);
    fetcher_t f = {0, 0};
    const uint8_t *p;
    int hit;
    for (uint64_t i = 1; i <= 10; i++) {
        assert_int_equal(own_cache_acquire(c, i * 16, 100, fetch, &f, &p, &hit), DSM_OK);
        assert_int_equal(own_cache_release(c, i * 16), DSM_OK);
    }
    uint64_t e, b, ev;
    own_cache_usage(c, &e, &b, &ev);
    /* Eviction runs at insertion, before the newest is released: at most one over. */
    assert_true(b <= 400);
    assert_true(ev >= 6);
    /* The newest survive (oldest first out). */
    assert_true(own_cache_count(c, 10 * 16) == 0);
    assert_true(own_cache_count(c, 1 * 16) == -1);
    own_cache_destroy(c);
}

typedef struct reader {
    own_cache_t *c;
    fetcher_t *f;
    int bad;
} reader_t;

static void *read_many(void *arg)
{
    reader_t *r = arg;
    for (int i = 0; i < 2000; i++) {
        const uint8_t *p;
        int hit;
        uint64_t k = (uint64_t)(i % 17 + 1) * 32;
        if (own_cache_acquire(r->c, k, 64, fetch, r->f, &p, &hit) != DSM_OK || p[63] != (uint8_t)k)
            r->bad++;
        else if (own_cache_release(r->c, k) != DSM_OK)
            r->bad++;
    }
    return NULL;
}

static void test_cache_threads(void **state)
{
    (void)state;
    own_cache_t *c;
    assert_int_equal(own_cache_create(1 << 20, &c), DSM_OK);
    fetcher_t f = {0, 0};
    reader_t r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (reader_t){c, &f, 0};
        pthread_create(&th[i], NULL, read_many, &r[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].bad, 0);
    }
    /* Each key fetched once: concurrent misses wait for the first fetch. */
    assert_int_equal(f.calls, 17);
    own_cache_destroy(c);
}

static void test_colours(void **state)
{
    (void)state;
    own_colours_t *t;
    assert_int_equal(own_colours_create(&t), DSM_OK);
    assert_int_equal(own_colours_start(t, 4096), 0);
    assert_int_equal(own_colours_freed(t, 4096, 5), 1);
    assert_int_equal(own_colours_start(t, 4096), 6);
    /* A colour never goes down at a slot. */
    assert_int_equal(own_colours_freed(t, 4096, 2), 1);
    assert_int_equal(own_colours_start(t, 4096), 6);
    /* The last colour quarantines the slot. */
    assert_int_equal(own_colours_freed(t, 8192, UINT16_MAX), 0);
    assert_int_equal(own_colours_quarantined(t), 1);
    /* Many slots (the table grows). */
    for (uint64_t i = 1; i <= 5000; i++)
        assert_int_equal(own_colours_freed(t, i * 64 + 65536, (uint16_t)(i % 1000)), 1);
    for (uint64_t i = 1; i <= 5000; i++)
        assert_int_equal(own_colours_start(t, i * 64 + 65536), (uint16_t)(i % 1000 + 1));
    assert_int_equal(own_colours_start(t, 4096), 6);
    own_colours_destroy(t);
}

static void test_spares(void **state)
{
    (void)state;
    own_spares_t sp = {0};
    own_spare_obj_t o;
    uint64_t a;
    assert_int_equal(own_spare_obj_take(&sp, 48, &o), 0);
    assert_int_equal(own_spare_rec_take(&sp, &a), 0);
    assert_int_equal(own_spare_obj_take(NULL, 48, &o), 0);
    own_spare_obj_t out = {0};
    assert_int_equal(own_spare_obj_put(NULL, 0x100, 48, 1, &out), 0);
    /* Only an exact size is taken, with the colour it was kept with. */
    assert_int_equal(own_spare_obj_put(&sp, 0x100, 48, 7, &out), 1);
    assert_int_equal(own_spare_obj_put(&sp, 0x200, 64, 3, &out), 1);
    assert_int_equal(own_spare_obj_take(&sp, 56, &o), 0);
    assert_int_equal(own_spare_obj_take(&sp, 48, &o), 1);
    assert_int_equal(o.addr, 0x100);
    assert_int_equal(o.colour, 7);
    assert_int_equal(own_spare_obj_take(&sp, 48, &o), 0);   /* taken once */
    assert_int_equal(own_spare_obj_take(&sp, 64, &o), 1);
    assert_int_equal(o.addr, 0x200);
    /* Bounded: past OWN_SPARES a record's slot goes back to the heap (0),
     * and an object's list gives back its oldest spare instead (2). */
    for (unsigned i = 0; i < OWN_SPARES; i++) {
        assert_int_equal(own_spare_obj_put(&sp, 0x1000 + 64u * i, 32, (uint16_t)(i + 1), &out), 1);
        assert_int_equal(own_spare_rec_put(&sp, 0x8000 + 32u * i), 1);
    }
    assert_int_equal(own_spare_rec_put(&sp, 0x9000), 0);
    /* A list full of sizes no longer asked for still takes a new one. */
    assert_int_equal(own_spare_obj_put(&sp, 0x9000, 48, 9, &out), 2);
    assert_int_equal(out.addr, 0x1000);
    assert_int_equal(out.colour, 1);
    assert_int_equal(own_spare_obj_take(&sp, 48, &o), 1);
    assert_int_equal(o.addr, 0x9000);
    assert_int_equal(o.colour, 9);
    /* The order of age holds across a take from the middle: the oldest goes next. */
    assert_int_equal(own_spare_obj_take(&sp, 32, &o), 1);
    assert_int_equal(o.addr, 0x1000 + 64u * (OWN_SPARES - 1));   /* the newest of that size */
    assert_int_equal(own_spare_obj_put(&sp, 0xa000, 16, 2, &out), 1);
    assert_int_equal(own_spare_obj_put(&sp, 0xb000, 16, 2, &out), 1);   /* full again */
    assert_int_equal(own_spare_obj_put(&sp, 0xc000, 16, 2, &out), 2);
    assert_int_equal(out.addr, 0x1000 + 64u);
    for (unsigned i = OWN_SPARES; i-- > 0;) {
        assert_int_equal(own_spare_rec_take(&sp, &a), 1);
        assert_int_equal(a, 0x8000 + 32u * i);
    }
    assert_int_equal(own_spare_rec_take(&sp, &a), 0);
}

static void test_codecs(void **state)
{
    (void)state;
    uint8_t buf[OWN_MSG_MAX_LEN + 4];
    own_msg_t m = {.type = OWN_MSG_FREE, .g = dsm_gaddr_with_colour(dsm_gaddr_make(2, 65536 + 80), 9),
                   .obj_type = 100}, d;
    size_t n = own_msg_encode(&m, buf);
    assert_int_equal(n, OWN_MSG_HEADER_LEN + 12);
    assert_int_equal(own_msg_decode(buf, n, &d), DSM_OK);
    assert_int_equal(d.g, m.g);
    assert_int_equal(d.obj_type, 100);
    assert_int_equal(own_msg_decode(buf, n - 1, &d), DSM_ERR_PROTO);
    assert_int_equal(own_msg_decode(buf, n + 1, &d), DSM_ERR_PROTO);
    assert_int_equal(own_msg_decode(NULL, 0, &d), DSM_ERR_PROTO);
    uint8_t bad[OWN_MSG_MAX_LEN];
    memcpy(bad, buf, n);
    bad[0] ^= 1;
    assert_int_equal(own_msg_decode(bad, n, &d), DSM_ERR_PROTO);
    m.g = dsm_gaddr_make(2, 0);
    own_msg_encode(&m, bad);
    assert_int_equal(own_msg_decode(bad, n, &d), DSM_ERR_PROTO);
    m.g = dsm_gaddr_make(2, 64);
    m.obj_type = 0;
    own_msg_encode(&m, bad);
    assert_int_equal(own_msg_decode(bad, n, &d), DSM_ERR_PROTO);
    /* A grant (a lock's reply for a guarding mutex) and an unlock carrying
     * the guarded object's new address. */
    own_msg_t gr = {.type = OWN_MSG_GRANT, .g = dsm_gaddr_with_colour(dsm_gaddr_make(1, 4096), 3), .obj_type = 7,
                    .arg = 40};
    assert_int_equal(own_msg_encode(&gr, bad), OWN_MSG_MAX_LEN);
    assert_int_equal(own_msg_decode(bad, OWN_MSG_MAX_LEN, &d), DSM_OK);
    assert_int_equal(d.g, gr.g);
    assert_int_equal(d.arg, 40);
    assert_int_equal(d.obj_type, 7);
    gr.arg = 1ull << 41;   /* a size beyond OWN_MAX_SIZE */
    own_msg_encode(&gr, bad);
    assert_int_equal(own_msg_decode(bad, OWN_MSG_MAX_LEN, &d), DSM_ERR_PROTO);
    own_msg_t ub = {.type = OWN_MSG_UNLOCK_BOX, .g = dsm_gaddr_make(1, 4096),
                    .arg = dsm_gaddr_with_colour(dsm_gaddr_make(2, 128), 5)};
    size_t un = own_msg_encode(&ub, bad);
    assert_int_equal(un, OWN_MSG_HEADER_LEN + 16);
    assert_int_equal(own_msg_decode(bad, un, &d), DSM_OK);
    assert_int_equal(d.arg, ub.arg);
    ub.arg = dsm_gaddr_make(2, 0);
    own_msg_encode(&ub, bad);
    assert_int_equal(own_msg_decode(bad, un, &d), DSM_ERR_PROTO);
    /* ALLOC: a size and a type, no address. */
    own_msg_t al = {.type = OWN_MSG_ALLOC, .obj_type = 9, .arg = 4096};
    size_t an = own_msg_encode(&al, bad);
    assert_int_equal(an, OWN_MSG_HEADER_LEN + 12);
    assert_int_equal(own_msg_decode(bad, an, &d), DSM_OK);
    assert_int_equal(d.arg, 4096);
    assert_int_equal(d.obj_type, 9);
    assert_int_equal(d.g, 0);
    al.obj_type = 0;
    own_msg_encode(&al, bad);
    assert_int_equal(own_msg_decode(bad, an, &d), DSM_ERR_PROTO);
    m.type = 7;
    assert_int_equal(own_msg_encode(&m, bad), 0);
    /* LOCK and UNLOCK: an address without colour, nothing else. */
    own_msg_t l = {.type = OWN_MSG_LOCK, .g = dsm_gaddr_make(1, 4096)};
    n = own_msg_encode(&l, buf);
    assert_int_equal(n, 20);
    assert_int_equal(own_msg_decode(buf, n, &d), DSM_OK);
    assert_int_equal(d.type, OWN_MSG_LOCK);
    assert_int_equal(d.g, l.g);
    assert_int_equal(own_msg_decode(buf, n + 4, &d), DSM_ERR_PROTO);
    l.type = OWN_MSG_UNLOCK;
    l.g = dsm_gaddr_with_colour(l.g, 1);
    n = own_msg_encode(&l, buf);
    assert_int_equal(own_msg_decode(buf, n, &d), DSM_ERR_PROTO);

    uint8_t h[OWN_OBJ_HEADER];
    own_obj_header_t oh = {.type = 5, .size = 1000}, od;
    own_obj_header_encode(&oh, h);
    assert_int_equal(own_obj_header_decode(h, sizeof h, &od), DSM_OK);
    assert_int_equal(od.size, 1000);
    assert_int_equal(own_obj_header_decode(h, sizeof h - 1, &od), DSM_ERR_BAD_ADDR);
    h[0] = 0;
    assert_int_equal(own_obj_header_decode(h, sizeof h, &od), DSM_ERR_BAD_ADDR);

    uint8_t rb[OWN_REC_SIZE];
    own_record_t r = {.g = dsm_gaddr_make(1, 4096), .gen = 77, .type = 5, .size = 1000}, rd;
    own_record_encode(&r, rb);
    assert_int_equal(own_record_decode(rb, sizeof rb, 77, &rd), DSM_OK);
    assert_int_equal(rd.g, r.g);
    assert_int_equal(rd.size, 1000);
    assert_int_equal(own_record_decode(rb, sizeof rb, 78, &rd), DSM_ERR_BAD_ADDR);
    assert_int_equal(own_record_decode(rb, sizeof rb, 0, &rd), DSM_ERR_BAD_ADDR);
    memset(rb, 0, sizeof rb);
    assert_int_equal(own_record_decode(rb, sizeof rb, 77, &rd), DSM_ERR_BAD_ADDR);
}

/* A channel item of each kind round-trips; a malformed one is refused: a
 * record item needs a handle (a generation, an 8-aligned nonzero offset),
 * a box's a type, a word's no type or size, and no other kind exists. */
static void test_chan_items(void **state)
{
    (void)state;
    const uint64_t rec = dsm_gaddr_with_colour(dsm_gaddr_make(1, 4096), 9);
    const own_chan_item_t good[] = {
        {.value = dsm_gaddr_make(2, 8192), .kind = OWN_CHAN_BOX, .type = 5, .size = 64},
        {.value = 12345, .kind = OWN_CHAN_WORD},
        {.value = rec, .kind = OWN_CHAN_REC, .type = 5, .size = 64},
    };
    uint8_t buf[OWN_CHAN_ITEM_LEN];
    own_chan_item_t it;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        own_chan_item_encode(&good[i], buf);
        assert_int_equal(own_chan_item_decode(buf, sizeof buf, &it), DSM_OK);
        assert_memory_equal(&it, &good[i], sizeof it);
        assert_int_equal(own_chan_item_decode(buf, sizeof buf - 1, &it), DSM_ERR_PROTO);
    }
    const own_chan_item_t bad[] = {
        {.value = dsm_gaddr_strip(rec), .kind = OWN_CHAN_REC, .type = 5},            /* no generation */
        {.value = dsm_gaddr_with_colour(0, 9), .kind = OWN_CHAN_REC, .type = 5},     /* no offset */
        {.value = rec + 4, .kind = OWN_CHAN_REC, .type = 5},                          /* unaligned */
        {.value = rec, .kind = OWN_CHAN_REC},                                         /* no type */
        {.value = dsm_gaddr_make(2, 8192), .kind = OWN_CHAN_BOX},                     /* no type */
        {.value = 1, .kind = OWN_CHAN_WORD, .type = 5},                               /* a word with a type */
        {.value = rec, .kind = 4, .type = 5},                                         /* no such kind */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        own_chan_item_encode(&bad[i], buf);
        assert_int_equal(own_chan_item_decode(buf, sizeof buf, &it), DSM_ERR_PROTO);
    }
}

static void test_types(void **state)
{
    (void)state;
    assert_int_equal(dsm_own_type_register(0, "zero", 8), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_type_register(1u << 24, "big", 8), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_type_register(9, NULL, 8), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_type_register(9, "nine", 8), DSM_OK);
    assert_int_equal(dsm_own_type_register(9, "nine", 8), DSM_OK);
    assert_int_equal(dsm_own_type_register(9, "nine", 16), DSM_ERR_EXISTS);
    assert_int_equal(dsm_own_type_register(9, "neun", 8), DSM_ERR_EXISTS);
    assert_int_equal(own_type_check(9, 8), DSM_OK);
    assert_int_equal(own_type_check(9, 9), DSM_ERR_INVALID);
    assert_int_equal(own_type_check(10, 8), DSM_ERR_INVALID);
    assert_int_equal(dsm_own_type_register(10, "any", 0), DSM_OK);
    assert_int_equal(own_type_check(10, 12345), DSM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_refcounts), cmocka_unit_test(test_cache_budget),
        cmocka_unit_test(test_cache_threads),   cmocka_unit_test(test_colours),
        cmocka_unit_test(test_spares), cmocka_unit_test(test_codecs),          cmocka_unit_test(test_types),
        cmocka_unit_test(test_chan_items),
    };
    dsm_set_log_level(0);
    return cmocka_run_group_tests_name("own/units", tests, NULL, NULL);
}
