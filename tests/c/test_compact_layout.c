/* CoRM's pure layout functions: the merge probability against the paper's
 * vectors and a Monte Carlo simulation of the merge decision itself, merge
 * plans with offset collisions, the ID table, the slot format (versions,
 * lock bits, checksum against torn copies), the pointer codec, and the
 * decoders of the wire messages and the published store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compact/info.h"
#include "compact/layout.h"
#include "compact/wire.h"
#include "util/bytes.h"

static void near(double got, double want, double rel)
{
    if (fabs(got - want) > rel * want)
        fail_msg("got %.6g, want %.6g (within %.0f%%)", got, want, rel * 100);
}

/* The spec's vectors: 4 KiB blocks, b1 = b2. */
static void test_probability_vectors(void **state)
{
    (void)state;
    /* 32-byte objects (128 slots) at 25% occupancy */
    near(dsm_compact_merge_probability(128, 128, 32, 32), 2.0e-5, 0.05);
    near(dsm_compact_merge_probability(256, 128, 32, 32), 0.0103, 0.02);
    near(dsm_compact_merge_probability(65536, 128, 32, 32), 0.984, 0.01);
    /* 256-byte objects (16 slots) at 50% */
    near(dsm_compact_merge_probability(16, 16, 8, 8), 7.8e-5, 0.02);
    near(dsm_compact_merge_probability(256, 16, 8, 8), 0.773, 0.01);
    near(dsm_compact_merge_probability(65536, 16, 8, 8), 0.999, 0.001);
    /* they do not fit: 0 */
    assert_true(dsm_compact_merge_probability(65536, 16, 9, 8) == 0.0);
    assert_true(dsm_compact_merge_probability(256, 16, 0, 0) == 1.0);
    /* the ID space the store draws from */
    assert_int_equal(dsm_compact_id_space(0, 64), 64);
    assert_int_equal(dsm_compact_id_space(8, 64), 255);
    assert_int_equal(dsm_compact_id_space(8, 1024), 1024);   /* the hybrid: offset-only */
}

static uint64_t rng = 0x1234567887654321ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Fill b of s slots with k objects the way the store does: offset-only
 * (n == 0) at random slots with ID slot + 1, else at the lowest slots with
 * distinct random IDs in 1..n. */
static void fill(uint16_t *b, uint32_t s, uint32_t k, uint32_t n)
{
    memset(b, 0, s * sizeof *b);
    for (uint32_t i = 0; i < k; i++) {
        if (n == 0) {
            uint32_t slot;
            do
                slot = (uint32_t)(next() % s);
            while (b[slot]);
            b[slot] = (uint16_t)(slot + 1);
        } else {
            uint16_t id;
            int dup;
            do {
                id = (uint16_t)(1 + next() % n);
                dup = 0;
                for (uint32_t j = 0; j < i; j++)
                    dup |= b[j] == id;
            } while (dup);
            b[i] = id;
        }
    }
}

/* Monte Carlo of dsm_compact_plan_merge against the formula. */
static void monte_carlo(uint32_t n, uint32_t s, uint32_t k, int offset_only)
{
    enum { TRIALS = 20000 };
    uint16_t a[256], b[256], to[256];
    uint32_t ok = 0;
    for (int t = 0; t < TRIALS; t++) {
        fill(a, s, k, offset_only ? 0 : n);
        fill(b, s, k, offset_only ? 0 : n);
        uint32_t moved;
        ok += dsm_compact_plan_merge(a, b, s, to, &moved) == DSM_OK;
    }
    double p = dsm_compact_merge_probability(n, s, k, k);
    double got = (double)ok / TRIALS, sigma = sqrt(p * (1 - p) / TRIALS);
    if (fabs(got - p) > 5 * sigma + 1e-4)
        fail_msg("n=%u s=%u k=%u: simulated %.4f, formula %.4f", n, s, k, got, p);
}

static void test_probability_monte_carlo(void **state)
{
    (void)state;
    monte_carlo(255, 16, 8, 0);     /* CoRM-8, 256 B at 50% (IDs 1..255) */
    monte_carlo(4095, 128, 32, 0);  /* CoRM-12, 32 B at 25% */
    monte_carlo(16, 16, 4, 1);      /* offset-only, 256 B at 25% */
    monte_carlo(64, 64, 6, 1);      /* offset-only, 64 B */
}

/* Offsets collide: the kept ones keep theirs, the others move to slots
 * nobody takes, and the result holds every object once. */
static void test_plan_merge(void **state)
{
    (void)state;
    uint16_t src[8] = {11, 12, 0, 0, 15, 0, 0, 0};
    uint16_t dst[8] = {21, 0, 23, 0, 0, 0, 0, 0};
    uint16_t to[8];
    uint32_t moved = 99;
    assert_int_equal(dsm_compact_plan_merge(src, dst, 8, to, &moved), DSM_OK);
    assert_int_equal(moved, 1);
    assert_int_equal(to[1], 1);   /* free in dst: kept */
    assert_int_equal(to[4], 4);
    assert_true(to[0] != 0 && to[0] != 1 && to[0] != 2 && to[0] != 4);   /* collided with 21: moved */
    /* a shared ID refuses */
    uint16_t dst2[8] = {0, 0, 15, 0, 0, 0, 0, 0};
    assert_int_equal(dsm_compact_plan_merge(src, dst2, 8, to, &moved), DSM_ERR_EXISTS);
    /* too many */
    uint16_t full[8] = {1, 2, 3, 4, 5, 6, 0, 0};
    assert_int_equal(dsm_compact_plan_merge(src, full, 8, to, &moved), DSM_ERR_NOMEM);
    /* exactly full works, every slot used once */
    uint16_t five[8] = {0, 0, 31, 32, 0, 33, 34, 35};
    assert_int_equal(dsm_compact_plan_merge(src, five, 8, to, &moved), DSM_OK);
    int used[8] = {0};
    for (int i = 0; i < 8; i++)
        if (five[i])
            used[i]++;
    for (int i = 0; i < 8; i++)
        if (src[i])
            used[to[i]]++;
    for (int i = 0; i < 8; i++)
        assert_int_equal(used[i], 1);
}

static void test_idtab(void **state)
{
    (void)state;
    enum { S = 64 };
    uint16_t slot_id[S] = {0};
    dsm_compact_idtab_t t = {.cap = dsm_compact_idtab_cap(S), .slot_id = slot_id};
    t.ent = calloc(t.cap, sizeof *t.ent);
    /* IDs that hash alike (multiples of the table size) and others */
    for (uint32_t i = 0; i < S; i++) {
        slot_id[i] = (uint16_t)(i % 2 ? (i + 1) * t.cap : 7 * i + 3);
        dsm_compact_idtab_insert(&t, slot_id[i], i);
    }
    for (uint32_t i = 0; i < S; i++)
        assert_int_equal(dsm_compact_idtab_find(&t, slot_id[i]), (int)i);
    assert_int_equal(dsm_compact_idtab_find(&t, 2), -1);
    assert_int_equal(dsm_compact_idtab_find(&t, 0), -1);
    /* remove every third; the rest stay findable */
    for (uint32_t i = 0; i < S; i += 3) {
        dsm_compact_idtab_remove(&t, slot_id[i]);
        slot_id[i] = 0;
    }
    for (uint32_t i = 0; i < S; i++)
        if (slot_id[i])
            assert_int_equal(dsm_compact_idtab_find(&t, slot_id[i]), (int)i);
    assert_int_equal(dsm_compact_idtab_find(&t, 3), -1);
    free(t.ent);
}

static void test_slot_format(void **state)
{
    (void)state;
    assert_int_equal(dsm_compact_slot_capacity(64), 40);
    assert_int_equal(dsm_compact_slot_capacity(128), 103);
    assert_int_equal(dsm_compact_class_for(40), 0);
    assert_int_equal(dsm_compact_class_for(41), 1);
    assert_int_equal(dsm_compact_class_for(100000), -1);
    for (uint32_t c = 0; c < dsm_compact_class_count(); c++)
        assert_true(dsm_compact_class_slot(c) % DSM_COMPACT_LINE == 0);

    uint8_t slot[512], out[512];
    uint8_t data[400];
    for (int i = 0; i < 400; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    dsm_compact_obj_pack(slot, 512, 0, 77, 5, 9, data, 400);
    size_t n = 0;
    assert_int_equal(dsm_compact_obj_check(slot, 512, 77, 9, out, sizeof out, &n, NULL), DSM_COMPACT_VALID);
    assert_int_equal(n, 400);
    assert_memory_equal(out, data, 400);
    /* every cache line carries the version byte */
    for (int l = 0; l < 8; l++)
        assert_int_equal(slot[l * 64], 5);
    assert_int_equal(dsm_compact_obj_check(slot, 512, 78, 9, out, sizeof out, &n, NULL), DSM_COMPACT_OTHER);
    assert_int_equal(dsm_compact_obj_check(slot, 512, 77, 8, out, sizeof out, &n, NULL), DSM_COMPACT_OTHER);
    assert_int_equal(dsm_compact_obj_check(slot, 512, 77, UINT32_MAX, out, 10, &n, NULL), DSM_COMPACT_SMALL);
    slot[1] = DSM_COMPACT_LOCK_COMPACT;
    assert_int_equal(dsm_compact_obj_check(slot, 512, 77, 9, out, sizeof out, &n, NULL), DSM_COMPACT_LOCKED);
    slot[1] = 0;
    /* A copy torn between two versions: lines of version 6 over version 5,
     * with the line version bytes consistent (what a copy that is not
     * atomic per line can still produce) -- the checksum refuses it. */
    uint8_t newer[512];
    uint8_t data2[400];
    memcpy(data2, data, 400);
    data2[200] ^= 0xff;
    dsm_compact_obj_pack(newer, 512, 0, 77, 6, 9, data2, 400);
    uint8_t torn[512];
    memcpy(torn, newer, 512);
    memcpy(torn + 192, slot + 192, 64);   /* one line of the old version */
    torn[192] = 6;                        /* its version byte from the new */
    assert_int_equal(dsm_compact_obj_check(torn, 512, 77, 9, out, sizeof out, &n, NULL), DSM_COMPACT_TORN);
    /* ... and a line version mismatch alone is caught too */
    memcpy(torn, newer, 512);
    torn[256] = 5;
    assert_int_equal(dsm_compact_obj_check(torn, 512, 77, 9, out, sizeof out, &n, NULL), DSM_COMPACT_TORN);
    /* zero-filled memory (a punched page) never validates */
    memset(torn, 0, sizeof torn);
    assert_int_equal(dsm_compact_obj_check(torn, 512, 0, 0, out, sizeof out, &n, NULL), DSM_COMPACT_OTHER);
}

static void test_pointer(void **state)
{
    (void)state;
    dsm_compact_ptr_fields_t f = {.offset = (1ull << 40) - 64, .rank = 65535, .size_class = 10,
                               .version = 0xdeadbeef, .id = 0xfffe, .key_tag = 0x1234};
    dsm_compact_ptr_t p = dsm_compact_ptr_make(&f);
    dsm_compact_ptr_fields_t g;
    dsm_compact_ptr_decode(&p, &g);
    assert_memory_equal(&f, &g, sizeof f);
    assert_int_equal(sizeof p, 16);
}

static void test_wire(void **state)
{
    (void)state;
    uint8_t buf[DSM_COMPACT_MSG_MAX_LEN], data[100];
    memset(data, 0x5a, sizeof data);
    dsm_compact_msg_t m = {.type = DSM_COMPACT_MSG_WRITE_REQ, .ptr = {{1, 2}}, .data = data, .len = 100}, d;
    size_t n = dsm_compact_msg_encode(&m, buf);
    assert_int_equal(n, 12 + 20 + 100);
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_OK);
    assert_int_equal(d.type, DSM_COMPACT_MSG_WRITE_REQ);
    assert_int_equal(d.ptr.w[1], 2);
    assert_int_equal(d.len, 100);
    assert_memory_equal(d.data, data, 100);
    /* truncated, extended, lying lengths, bad magic/type: refused */
    assert_int_equal(dsm_compact_msg_decode(buf, n - 1, &d), DSM_ERR_PROTO);
    assert_int_equal(dsm_compact_msg_decode(buf, n + 1, &d), DSM_ERR_PROTO);
    buf[32 - 4] = 99;   /* data length says 99, 100 follow */
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_ERR_PROTO);
    buf[0] ^= 1;
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_ERR_PROTO);
    dsm_compact_msg_t bad = {.type = 99};
    assert_int_equal(dsm_compact_msg_encode(&bad, buf), 0);
    /* remap notices */
    uint8_t pairs[16] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0};
    dsm_compact_msg_t r = {.type = DSM_COMPACT_MSG_REMAP_REQ, .seq = 77, .remap = pairs, .nremap = 2};
    n = dsm_compact_msg_encode(&r, buf);
    assert_int_equal(n, 12 + 12 + 16);
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_OK);
    assert_int_equal(d.seq, 77);
    uint32_t v, t;
    dsm_compact_msg_remap_at(&d, 1, &v, &t);
    assert_int_equal(v, 3);
    assert_int_equal(t, 4);
    buf[20] = 3;   /* count 3, two entries */
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_ERR_PROTO);
    /* layout pages: empty, and with entries; counts that lie are refused */
    dsm_compact_msg_t lq = {.type = DSM_COMPACT_MSG_LAYOUT_REQ, .start = 9};
    n = dsm_compact_msg_encode(&lq, buf);
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_OK);
    assert_int_equal(d.start, 9);
    dsm_compact_msg_t lp = {.type = DSM_COMPACT_MSG_LAYOUT_REP, .seq = 5, .next = 0};
    n = dsm_compact_msg_encode(&lp, buf);
    assert_int_equal(n, 12 + 16);
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_OK);
    assert_int_equal(d.nremap, 0);
    lp.remap = pairs, lp.nremap = 2, lp.next = 40;
    n = dsm_compact_msg_encode(&lp, buf);
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_OK);
    assert_true(d.seq == 5 && d.next == 40 && d.nremap == 2);
    dsm_compact_msg_remap_at(&d, 0, &v, &t);
    assert_true(v == 1 && t == 2);
    buf[12 + 12] = 1;   /* count 1, two entries */
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_ERR_PROTO);
    lp.nremap = DSM_COMPACT_MSG_MAX_LAYOUT + 1;
    assert_int_equal(dsm_compact_msg_encode(&lp, buf), 0);
    /* a new region key (verbs re-registration) */
    uint8_t key[40];
    memset(key, 0xab, sizeof key);
    dsm_compact_msg_t rk = {.type = DSM_COMPACT_MSG_REKEY_REQ, .seq = 12, .data = key, .len = sizeof key};
    n = dsm_compact_msg_encode(&rk, buf);
    assert_int_equal(n, 12 + 12 + sizeof key);
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_OK);
    assert_true(d.type == DSM_COMPACT_MSG_REKEY_REQ && d.seq == 12 && d.len == sizeof key);
    assert_memory_equal(d.data, key, sizeof key);
    assert_int_equal(dsm_compact_msg_decode(buf, n - 1, &d), DSM_ERR_PROTO);
    buf[12 + 8] = 39;   /* length 39, 40 bytes follow */
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_ERR_PROTO);
    rk.len = 0;   /* an empty key */
    assert_int_equal(dsm_compact_msg_encode(&rk, buf), 0);
    rk.len = DSM_COMPACT_MSG_MAX_KEY + 1;
    assert_int_equal(dsm_compact_msg_encode(&rk, buf), 0);
    uint8_t empty[12 + 12] = {0};
    memcpy(empty, buf, 12);
    dsm_put_u32(empty + 8, 12);
    dsm_put_u32(empty + 4, (uint32_t)DSM_COMPACT_MSG_VERSION | ((uint32_t)DSM_COMPACT_MSG_REKEY_REQ << 16));
    assert_int_equal(dsm_compact_msg_decode(empty, sizeof empty, &d), DSM_ERR_PROTO);   /* zero-length key */
    dsm_compact_msg_t cr = {.type = DSM_COMPACT_MSG_COMPACT_REQ, .cls = 300};
    n = dsm_compact_msg_encode(&cr, buf);
    assert_int_equal(dsm_compact_msg_decode(buf, n, &d), DSM_ERR_PROTO);
}

static void test_info(void **state)
{
    (void)state;
    uint8_t key[5] = {1, 2, 3, 4, 5}, buf[64];
    dsm_compact_info_t in = {.base = 1 << 20, .size = 1 << 24, .block_size = 4096, .key_tag = 9,
                          .flags = DSM_COMPACT_INFO_SERVES, .pid = 42, .memfd = 7, .key = key, .key_len = 5}, out;
    size_t n = dsm_compact_info_encode(&in, buf);
    assert_int_equal(dsm_compact_info_decode(buf, n, &out), DSM_OK);
    assert_int_equal(out.size, 1 << 24);
    assert_int_equal(out.memfd, 7);
    assert_memory_equal(out.key, key, 5);
    assert_int_equal(dsm_compact_info_decode(buf, DSM_COMPACT_INFO_HEADER, &out), DSM_ERR_PROTO);   /* no key */
    assert_int_equal(dsm_compact_info_decode(buf, 20, &out), DSM_ERR_PROTO);
    in.block_size = 5000;
    n = dsm_compact_info_encode(&in, buf);
    assert_int_equal(dsm_compact_info_decode(buf, n, &out), DSM_ERR_PROTO);
    in.block_size = 4096;
    in.base = UINT64_MAX - 4096;
    n = dsm_compact_info_encode(&in, buf);
    assert_int_equal(dsm_compact_info_decode(buf, n, &out), DSM_ERR_PROTO);
    dsm_compact_info_t client = {.pid = 1, .memfd = -1};
    n = dsm_compact_info_encode(&client, buf);
    assert_int_equal(dsm_compact_info_decode(buf, n, &out), DSM_OK);
    assert_int_equal(out.flags, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probability_vectors), cmocka_unit_test(test_probability_monte_carlo),
        cmocka_unit_test(test_plan_merge),          cmocka_unit_test(test_idtab),
        cmocka_unit_test(test_slot_format),         cmocka_unit_test(test_pointer),
        cmocka_unit_test(test_wire),                cmocka_unit_test(test_info),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
