/* CoRM across a 3-node in-process cluster, over shm and tcp: node 0 serves a
 * store, nodes 1 and 2 are clients. The API round trip (RPC and one-sided
 * reads from every node), the refusals (wrong ID, freed object, never
 * allocated block, oversized write, forged key tag, malformed message) with
 * the server still serving, compaction with offset collisions and pointer
 * correction, release_ptr and the reuse of old virtual blocks, the mapping
 * budget, and the consistency stress: a writer on node 1 and readers on
 * node 2 (direct_read, scan_read, get) while node 0 frees, allocates and
 * compacts in a loop; no read may return a torn or wrong object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_util.h"
#include "compact/ids.h"
#include "compact/internal.h"
#include "compact/layout.h"
#include "compact/wire.h"
#include "fabric/fabric_int.h"
#include "util/bytes.h"
#include "util/test_switch.h"
#include <sched.h>

enum { N = 3, CLS = 2 /* 192-byte slots, 21 per block */ };

typedef struct fixture {
    dsm_harness_t tc;
    dsm_compact_t *c[N];
} fixture_t;

static uint64_t g_range = 4u << 20;   /* the server's range for the next start() */
static double g_frag = 0;             /* and its fragmentation trigger */

/* One log sink for the whole program (a sink, once set, is never freed):
 * lines go to stderr, except those a test is waiting for, which it counts.
 * CAPTURE_ATTACH: the compact module's warning that a store is attached
 * already (an error about a taken module slot spoils the count);
 * CAPTURE_BUDGET: the error line of a compaction the mapping budget stops. */
enum { CAPTURE_NONE, CAPTURE_ATTACH, CAPTURE_BUDGET };
static int g_capture, g_warned, g_refusals;
static void test_sink(void *ctx, int level, const char *module, const char *message)
{
    (void)ctx;
    int mode = __atomic_load_n(&g_capture, __ATOMIC_ACQUIRE);
    if (mode == CAPTURE_ATTACH && level == 0 && strstr(message, "already")) {
        __atomic_store_n(&g_warned, 100, __ATOMIC_RELAXED);
        return;
    }
    if (mode == CAPTURE_ATTACH && level == 1 && strcmp(module, "compact") == 0 &&
        strstr(message, "attached to this node already")) {
        __atomic_fetch_add(&g_warned, 1, __ATOMIC_RELAXED);
        return;
    }
    if (mode == CAPTURE_BUDGET && level == 0 && strcmp(module, "compact") == 0 &&
        strstr(message, "pass the mapping budget") && strstr(message, "vm.max_map_count")) {
        __atomic_fetch_add(&g_refusals, 1, __ATOMIC_RELAXED);
        return;
    }
    static const char *names[] = {"error", "warn", "info", "debug"};
    fprintf(stderr, "[%s %s] %s\n", level >= 0 && level < 4 ? names[level] : "?", module, message);
}

/* Before node i joins: its CoRM store (the range on node 0 only), and a
 * second attach, which must be refused with a warning and keep the first. */
static dsm_status_t attach_compact(void *ctx, int i, dsm_node_t *node)
{
    uint32_t map_budget = *(const uint32_t *)ctx;
    dsm_status_t st;
    dsm_compact_config_t cc2;
    dsm_compact_config_init(&cc2);
    cc2.range_size = i == 0 ? g_range : 0;
    cc2.frag_threshold = g_frag;
    cc2.map_budget = map_budget;
    if ((st = dsm_compact_attach(node, &cc2)) != DSM_OK)
        return st;
    /* a second store is refused with a warning, not an error, and the
     * first stays */
    __atomic_store_n(&g_warned, 0, __ATOMIC_RELAXED);
    dsm_clear_last_error();
    int level = dsm_get_log_level();
    __atomic_store_n(&g_capture, CAPTURE_ATTACH, __ATOMIC_RELEASE);
    dsm_set_log_level(level < 1 ? 1 : level);
    st = dsm_compact_attach(node, &cc2);
    dsm_set_log_level(level);
    __atomic_store_n(&g_capture, CAPTURE_NONE, __ATOMIC_RELEASE);
    if (st != DSM_ERR_EXISTS || __atomic_load_n(&g_warned, __ATOMIC_RELAXED) != 1 ||
        dsm_last_error()[0] != '\0' || dsm_compact_of(node) == NULL)
        return DSM_ERR_STATE;
    return DSM_OK;
}

static dsm_status_t start(fixture_t *f, dsm_transport_t transport, uint32_t map_budget)
{
    memset(f, 0, sizeof *f);
    f->tc.transport = transport;
    f->tc.partition_size = DSM_HARNESS_NO_PARTITION;
    f->tc.peer_timeout_ms = 3000;
    f->tc.op_timeout_ms = 10000;
    f->tc.wait_ms = 10000;
    f->tc.attach = attach_compact;
    f->tc.ctx = &map_budget;
    dsm_status_t st = dsm_harness_start(&f->tc, N);
    f->tc.ctx = NULL;
    for (int i = 0; i < f->tc.n; i++)
        f->c[i] = dsm_compact_of(f->tc.nodes[i]);
    return st;
}

/* A self-checking payload: index, counter, and bytes derived from both. */
static size_t payload(uint8_t *p, uint32_t idx, uint32_t ctr)
{
    size_t len = dsm_compact_class_capacity(CLS);
    memcpy(p, &idx, 4);
    memcpy(p + 4, &ctr, 4);
    for (size_t i = 8; i < len; i++)
        p[i] = (uint8_t)(idx * 31u + ctr * 17u + i);
    return len;
}

static int payload_ok(const uint8_t *p, size_t len, uint32_t idx, uint32_t *ctr)
{
    uint8_t want[4096];
    uint32_t got_idx, got_ctr;
    memcpy(&got_idx, p, 4);
    memcpy(&got_ctr, p + 4, 4);
    if (got_idx != idx || payload(want, idx, got_ctr) != len || memcmp(want, p, len) != 0)
        return 0;
    *ctr = got_ctr;
    return 1;
}

/* ---- the API and its refusals ----------------------------------------------- */

static void api(dsm_transport_t transport)
{
    fixture_t f;
    assert_int_equal(start(&f, transport, 0), DSM_OK);
    /* the clients map the server's memfd (pidfd_getfd); the mapping is
     * published as the mirror at the first one-sided read, once it caught up
     * with the server's layout: then one-sided reads are loads */
    assert_null(f.c[2]->peers[0].mirror);
    if (transport == DSM_TRANSPORT_SHM)
        assert_non_null(f.c[2]->peers[0].view);
    else
        assert_null(f.c[2]->peers[0].view);

    uint8_t buf[4096], data[4096];
    size_t len = 0;
    dsm_compact_ptr_t p;
    assert_int_equal(dsm_compact_alloc(f.c[1], 0, 150, &p), DSM_OK);
    dsm_compact_ptr_fields_t pf;
    dsm_compact_ptr_decode(&p, &pf);
    assert_int_equal(pf.rank, 0);
    assert_int_equal(pf.size_class, CLS);
    assert_true(pf.id != 0);
    size_t n = payload(data, 7, 1);
    assert_int_equal(dsm_compact_write(f.c[1], &p, data, n), DSM_OK);
    for (int i = 0; i < N; i++) {
        dsm_compact_ptr_t q = p;
        uint32_t ctr;
        memset(buf, 0, sizeof buf);
        assert_int_equal(dsm_compact_read(f.c[i], &q, buf, sizeof buf, &len), DSM_OK);
        assert_true(len == n && payload_ok(buf, len, 7, &ctr) && ctr == 1);
        memset(buf, 0, sizeof buf);
        assert_int_equal(dsm_compact_direct_read(f.c[i], &q, buf, sizeof buf, &len), DSM_OK);
        assert_true(len == n && payload_ok(buf, len, 7, &ctr) && ctr == 1);
        memset(buf, 0, sizeof buf);
        assert_int_equal(dsm_compact_scan_read(f.c[i], &q, buf, sizeof buf, &len), DSM_OK);
        assert_true(len == n && payload_ok(buf, len, 7, &ctr) && ctr == 1);
        assert_int_equal(dsm_compact_direct_read(f.c[i], &q, buf, 10, &len), DSM_ERR_TOO_BIG);
    }
    if (transport == DSM_TRANSPORT_SHM)
        assert_ptr_equal(f.c[2]->peers[0].mirror, f.c[2]->peers[0].view);
    else
        assert_null(f.c[2]->peers[0].mirror);
    /* a write is seen at once by a one-sided read elsewhere */
    n = payload(data, 7, 2);
    assert_int_equal(dsm_compact_write(f.c[2], &p, data, n), DSM_OK);
    uint32_t ctr = 0;
    assert_int_equal(dsm_compact_direct_read(f.c[1], &p, buf, sizeof buf, &len), DSM_OK);
    assert_true(payload_ok(buf, len, 7, &ctr) && ctr == 2);

    /* refusals */
    assert_int_equal(dsm_compact_alloc(f.c[1], 0, 100000, &p), DSM_ERR_TOO_BIG);
    assert_int_equal(dsm_compact_write(f.c[1], &p, data, dsm_compact_class_capacity(CLS) + 1), DSM_ERR_TOO_BIG);
    dsm_compact_ptr_fields_t g = pf;
    g.id ^= 0x5555;   /* wrong ID */
    dsm_compact_ptr_t bad = dsm_compact_ptr_make(&g);
    assert_int_equal(dsm_compact_read(f.c[1], &bad, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_compact_direct_read(f.c[1], &bad, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_compact_get(f.c[2], &bad, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_compact_write(f.c[1], &bad, data, 8), DSM_ERR_BAD_ADDR);
    g = pf;
    g.offset = 3u << 20;   /* a block never allocated */
    bad = dsm_compact_ptr_make(&g);
    assert_int_equal(dsm_compact_read(f.c[1], &bad, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_compact_free(f.c[2], &bad), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_compact_get(f.c[2], &bad, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    g = pf;
    g.key_tag ^= 1;   /* a forged key */
    bad = dsm_compact_ptr_make(&g);
    assert_int_equal(dsm_compact_read(f.c[1], &bad, buf, sizeof buf, &len), DSM_ERR_INVALID);
    assert_int_equal(dsm_compact_direct_read(f.c[1], &bad, buf, sizeof buf, &len), DSM_ERR_INVALID);
    assert_int_equal(dsm_compact_free(f.c[0], &bad), DSM_ERR_INVALID);
    g = pf;
    g.offset = (8u << 20);   /* past the range */
    bad = dsm_compact_ptr_make(&g);
    assert_int_equal(dsm_compact_direct_read(f.c[1], &bad, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_compact_read(f.c[1], &bad, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    /* malformed bytes to the handler */
    uint8_t junk[40];
    memset(junk, 0xee, sizeof junk);
    size_t rl = 0;
    assert_int_equal(dsm_fabric_am_request(dsm_node_fabric(f.tc.nodes[1]), 0, DSM_AM_COMPACT_REQ, junk, sizeof junk,
                                           buf, sizeof buf, &rl, 0),
                     DSM_ERR_PROTO);
    /* a client-only node refuses to serve */
    dsm_compact_ptr_t none;
    assert_int_equal(dsm_compact_alloc(f.c[0], 1, 8, &none), DSM_ERR_UNSUPPORTED);

    /* freed: every path refuses, a second free too */
    dsm_compact_ptr_t q = p;
    assert_int_equal(dsm_compact_free(f.c[2], &q), DSM_OK);
    assert_int_equal(dsm_compact_read(f.c[1], &p, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_compact_direct_read(f.c[1], &p, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_compact_get(f.c[1], &p, buf, sizeof buf, &len), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_compact_free(f.c[1], &p), DSM_ERR_BAD_ADDR);

    /* and the server still serves */
    assert_int_equal(dsm_compact_alloc(f.c[2], 0, 8, &p), DSM_OK);
    assert_int_equal(dsm_compact_write(f.c[2], &p, "12345678", 8), DSM_OK);
    assert_int_equal(dsm_compact_get(f.c[1], &p, buf, sizeof buf, &len), DSM_OK);
    assert_true(len == 8 && memcmp(buf, "12345678", 8) == 0);
    dsm_harness_stop(&f.tc);
}

static void test_api_shm(void **s) { (void)s; api(DSM_TRANSPORT_SHM); }
static void test_api_tcp(void **s) { (void)s; api(DSM_TRANSPORT_TCP); }

/* ---- compaction, pointer correction, release_ptr, reuse -------------------------- */

enum { OBJS = 21 * 12 };   /* 12 full blocks of class CLS */

static void compaction(dsm_transport_t transport)
{
    fixture_t f;
    assert_int_equal(start(&f, transport, 0), DSM_OK);
    static dsm_compact_ptr_t p[OBJS];
    uint8_t buf[4096], data[4096];
    size_t len;
    for (uint32_t i = 0; i < OBJS; i++) {
        assert_int_equal(dsm_compact_alloc(f.c[1], 0, 150, &p[i]), DSM_OK);
        size_t n = payload(data, i, 1);
        assert_int_equal(dsm_compact_write(f.c[1], &p[i], data, n), DSM_OK);
    }
    dsm_compact_usage_t u0, u1;
    assert_int_equal(dsm_compact_usage(f.c[0], 0, &u0), DSM_OK);
    assert_int_equal(u0.blocks, 12);
    /* keep slots 0, 4, .., 20 of every block: 71% free, the same offsets
     * in every block, so every merge collides */
    int live[OBJS], nlive = 0;
    for (uint32_t i = 0; i < OBJS; i++) {
        live[i] = (i % 21) % 4 == 0;
        nlive += live[i];
        if (!live[i])
            assert_int_equal(dsm_compact_free(f.c[2], &p[i]), DSM_OK);
    }
    dsm_compact_stats_t st = {0};
    assert_int_equal(dsm_compact_now(f.c[1], 0, CLS, &st), DSM_OK);   /* explicit, remote */
    assert_true(st.merges >= 6);
    /* the same offsets in every block: every object merged in moved */
    assert_int_equal(st.moved, 6 * st.merges);
    assert_int_equal(st.kept, 0);
    assert_int_equal(dsm_compact_usage(f.c[0], 0, &u1), DSM_OK);
    assert_int_equal(u1.blocks, u0.blocks - st.merges);
    assert_int_equal(u1.objects, nlive);
    assert_true(u1.alias_blocks > 0);
    assert_true(u1.active_bytes < u0.active_bytes);
    assert_int_equal(u1.class_blocks[CLS], u1.blocks);
    assert_int_equal(u1.class_objects[CLS], nlive);
    /* the same figures from a client, by RPC */
    dsm_compact_usage_t ur;
    assert_int_equal(dsm_compact_usage(f.c[2], 0, &ur), DSM_OK);
    assert_memory_equal(&ur, &u1, sizeof ur);
    /* every old pointer still names its object: direct_read refuses a moved
     * one (BAD_ADDR), get corrects it, and the corrected one reads directly */
    uint32_t moved_seen = 0;
    for (uint32_t i = 0; i < OBJS; i++) {
        if (!live[i])
            continue;
        dsm_compact_ptr_t q = p[i];
        uint32_t ctr;
        dsm_status_t d = dsm_compact_direct_read(f.c[2], &q, buf, sizeof buf, &len);
        if (d == DSM_ERR_BAD_ADDR)
            moved_seen++;
        else
            assert_int_equal(d, DSM_OK);
        assert_int_equal(dsm_compact_get(f.c[2], &q, buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr) && ctr == 1);
        assert_int_equal(dsm_compact_direct_read(f.c[2], &q, buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr));
        dsm_compact_ptr_t r = p[i];
        assert_int_equal(dsm_compact_scan_read(f.c[1], &r, buf, sizeof buf, &len), DSM_OK);
        assert_memory_equal(&r, &q, sizeof r);
        /* writes through the old pointer land on the object */
        size_t n = payload(data, i, 2);
        assert_int_equal(dsm_compact_write(f.c[1], &p[i], data, n), DSM_OK);
        assert_int_equal(dsm_compact_direct_read(f.c[2], &q, buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr) && ctr == 2);
    }
    assert_true(moved_seen > 0);
    /* release every pointer: old virtual blocks are unmapped and reusable */
    for (uint32_t i = 0; i < OBJS; i++) {
        if (!live[i])
            continue;
        dsm_compact_ptr_t old = p[i];
        assert_int_equal(dsm_compact_release_ptr(f.c[1], &p[i]), DSM_OK);
        uint32_t ctr;
        assert_int_equal(dsm_compact_direct_read(f.c[2], &p[i], buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr) && ctr == 2);
        (void)old;
    }
    assert_int_equal(dsm_compact_usage(f.c[0], 0, &u1), DSM_OK);
    assert_int_equal(u1.alias_blocks, 0);
    assert_int_equal(u1.map_used, 0);
    /* fill the whole range: the released virtual blocks are allocated again */
    uint32_t blocks = (4u << 20) / 4096, extra = 0;
    dsm_compact_ptr_t e;
    while (dsm_compact_alloc(f.c[0], 0, 4000, &e) == DSM_OK)
        extra++;
    assert_int_equal(extra, blocks - u1.blocks);
    /* the survivors are intact */
    for (uint32_t i = 0; i < OBJS; i++) {
        uint32_t ctr;
        if (live[i]) {
            assert_int_equal(dsm_compact_get(f.c[1], &p[i], buf, sizeof buf, &len), DSM_OK);
            assert_true(payload_ok(buf, len, i, &ctr) && ctr == 2);
        }
    }
    dsm_harness_stop(&f.tc);
}

static void test_compaction_shm(void **s) { (void)s; compaction(DSM_TRANSPORT_SHM); }
static void test_compaction_tcp(void **s) { (void)s; compaction(DSM_TRANSPORT_TCP); }

/* A compaction that the mapping budget stops: DSM_ERR_NOMEM and one error
 * line saying why (taken by the sink: a passing test prints no error). */
static void compact_refused(dsm_compact_t *c, dsm_compact_stats_t *st)
{
    __atomic_store_n(&g_refusals, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_capture, CAPTURE_BUDGET, __ATOMIC_RELEASE);
    dsm_status_t rc = dsm_compact_now(c, 0, CLS, st);
    __atomic_store_n(&g_capture, CAPTURE_NONE, __ATOMIC_RELEASE);
    assert_int_equal(rc, DSM_ERR_NOMEM);
    assert_int_equal(__atomic_load_n(&g_refusals, __ATOMIC_RELAXED), 1);
}

/* The mapping budget: with room for 2 aliased blocks, compaction merges two
 * pairs and then refuses clearly, and everything stays readable. */
static void test_map_budget(void **s)
{
    (void)s;
    fixture_t f;
    assert_int_equal(start(&f, DSM_TRANSPORT_TCP, 4), DSM_OK);
    static dsm_compact_ptr_t p[OBJS];
    uint8_t buf[4096], data[4096];
    size_t len;
    for (uint32_t i = 0; i < OBJS; i++) {
        assert_int_equal(dsm_compact_alloc(f.c[1], 0, 150, &p[i]), DSM_OK);
        assert_int_equal(dsm_compact_write(f.c[1], &p[i], data, payload(data, i, 1)), DSM_OK);
    }
    for (uint32_t i = 0; i < OBJS; i++)
        if (i % 4)
            assert_int_equal(dsm_compact_free(f.c[1], &p[i]), DSM_OK);
    dsm_compact_stats_t st = {0};
    compact_refused(f.c[1], &st);
    assert_int_equal(st.merges, 2);
    assert_int_equal(st.refused_budget, 1);
    dsm_compact_usage_t u;
    assert_int_equal(dsm_compact_usage(f.c[0], 0, &u), DSM_OK);
    assert_int_equal(u.alias_blocks, 2);
    assert_int_equal(u.map_budget, 4);
    for (uint32_t i = 0; i < OBJS; i += 4) {
        uint32_t ctr;
        assert_int_equal(dsm_compact_get(f.c[2], &p[i], buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr) && ctr == 1);
    }
    /* releasing frees budget; compaction goes on */
    for (uint32_t i = 0; i < OBJS; i += 4)
        assert_int_equal(dsm_compact_release_ptr(f.c[1], &p[i]), DSM_OK);
    assert_int_equal(dsm_compact_usage(f.c[0], 0, &u), DSM_OK);
    assert_int_equal(u.alias_blocks, 0);
    memset(&st, 0, sizeof st);
    compact_refused(f.c[0], &st);
    assert_int_equal(st.merges, 2);
    dsm_harness_stop(&f.tc);
}

/* n objects of CLS on node 0's store (through c), payload (i, 1); all but
 * one in four of each block's 21 freed again: live[i] says which stay. */
static void fragment(dsm_compact_t *c, dsm_compact_ptr_t *p, int *live, uint32_t n)
{
    uint8_t data[4096];
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(dsm_compact_alloc(c, 0, 150, &p[i]), DSM_OK);
        assert_int_equal(dsm_compact_write(c, &p[i], data, payload(data, i, 1)), DSM_OK);
    }
    for (uint32_t i = 0; i < n; i++) {
        live[i] = (i % 21) % 4 == 0;
        if (!live[i])
            assert_int_equal(dsm_compact_free(c, &p[i]), DSM_OK);
    }
}

/* A peer whose mirror misses every remap notice (its handler is gone)
 * never gets a wrong object from a one-sided read: its stale view shows
 * punched pages or other blocks' objects, which fail validation, and get
 * falls back to the server. Also after old blocks are released and reused. */
static void test_stale_mirror(void **s)
{
    (void)s;
    fixture_t f;
    assert_int_equal(start(&f, DSM_TRANSPORT_SHM, 0), DSM_OK);
    assert_int_equal(dsm_compact_mirror_catch_up(f.c[2], 0), 1);
    assert_non_null(f.c[2]->peers[0].mirror);
    assert_int_equal(dsm_fabric_am_register(dsm_node_fabric(f.tc.nodes[2]), DSM_AM_COMPACT_REMAP, NULL, NULL), DSM_OK);
    static dsm_compact_ptr_t p[OBJS], fresh[OBJS];
    uint8_t buf[4096], data[4096];
    size_t len;
    int live[OBJS];
    fragment(f.c[1], p, live, OBJS);
    dsm_compact_stats_t st = {0};
    assert_int_equal(dsm_compact_now(f.c[0], 0, CLS, &st), DSM_OK);
    assert_true(st.merges > 0);
    uint32_t refused = 0;
    for (uint32_t i = 0; i < OBJS; i++) {
        if (!live[i])
            continue;
        uint32_t ctr;
        dsm_status_t d = dsm_compact_direct_read(f.c[2], &p[i], buf, sizeof buf, &len);
        if (d == DSM_OK)
            assert_true(payload_ok(buf, len, i, &ctr));
        else
            refused++;
        dsm_compact_ptr_t q = p[i];
        assert_int_equal(dsm_compact_get(f.c[2], &q, buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr) && ctr == 1);
    }
    assert_true(refused > 0);   /* the merged-away blocks: their stale view is punched */
    /* release everything: the old blocks are reused for new objects */
    for (uint32_t i = 0; i < OBJS; i++)
        if (live[i])
            assert_int_equal(dsm_compact_release_ptr(f.c[1], &p[i]), DSM_OK);
    uint32_t nfresh = 0;
    while (nfresh < OBJS && dsm_compact_alloc(f.c[1], 0, 150, &fresh[nfresh]) == DSM_OK) {
        assert_int_equal(dsm_compact_write(f.c[1], &fresh[nfresh], data, payload(data, 10000 + nfresh, 1)), DSM_OK);
        nfresh++;
    }
    assert_int_equal(nfresh, OBJS);
    for (uint32_t i = 0; i < OBJS; i++) {
        uint32_t ctr;
        if (live[i]) {
            if (dsm_compact_direct_read(f.c[2], &p[i], buf, sizeof buf, &len) == DSM_OK)
                assert_true(payload_ok(buf, len, i, &ctr));
            assert_int_equal(dsm_compact_get(f.c[2], &p[i], buf, sizeof buf, &len), DSM_OK);
            assert_true(payload_ok(buf, len, i, &ctr));
        }
        if (dsm_compact_direct_read(f.c[2], &fresh[i], buf, sizeof buf, &len) == DSM_OK)
            assert_true(payload_ok(buf, len, 10000 + i, &ctr));
        assert_int_equal(dsm_compact_get(f.c[2], &fresh[i], buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, 10000 + i, &ctr));
    }
    dsm_harness_stop(&f.tc);
}

/* ---- triggers ---------------------------------------------------------------------- */

/* Wait (generously: the machine is shared) for the store's thread. */
static int wait_blocks_below(dsm_compact_t *c, uint64_t blocks)
{
    for (int i = 0; i < 30000; i++) {
        dsm_compact_usage_t u;
        if (dsm_compact_usage(c, 0, &u) == DSM_OK && u.blocks < blocks)
            return 1;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Frees that push a class past its fragmentation threshold make the
 * store's thread compact it, with no explicit call. */
static void test_trigger_fragmentation(void **s)
{
    (void)s;
    fixture_t f;
    g_frag = 0.5;
    dsm_status_t st = start(&f, DSM_TRANSPORT_TCP, 0);
    g_frag = 0;
    assert_int_equal(st, DSM_OK);
    static dsm_compact_ptr_t p[OBJS];
    for (uint32_t i = 0; i < OBJS; i++)
        assert_int_equal(dsm_compact_alloc(f.c[1], 0, 150, &p[i]), DSM_OK);
    for (uint32_t i = 0; i < OBJS; i++)
        if (i % 4)
            assert_int_equal(dsm_compact_free(f.c[1], &p[i]), DSM_OK);
    assert_true(wait_blocks_below(f.c[0], 12));
    uint8_t buf[4096];
    size_t len;
    for (uint32_t i = 0; i < OBJS; i += 4)
        assert_int_equal(dsm_compact_get(f.c[2], &p[i], buf, sizeof buf, &len), DSM_OK);
    dsm_harness_stop(&f.tc);
}

/* An allocation that finds the range full makes the store's thread compact;
 * the allocation then succeeds (the caller retries on DSM_ERR_NOMEM). */
static void test_trigger_alloc_failure(void **s)
{
    (void)s;
    fixture_t f;
    g_range = 32 * 4096;
    dsm_status_t st = start(&f, DSM_TRANSPORT_TCP, 0);
    g_range = 4u << 20;
    assert_int_equal(st, DSM_OK);
    static dsm_compact_ptr_t p[32 * 21];
    uint32_t n = 0;
    while (n < 32 * 21 && dsm_compact_alloc(f.c[1], 0, 150, &p[n]) == DSM_OK)
        n++;
    assert_int_equal(n, 32 * 21);
    for (uint32_t i = 0; i < n; i++)
        if (i % 4)
            assert_int_equal(dsm_compact_free(f.c[1], &p[i]), DSM_OK);
    dsm_compact_ptr_t big;
    assert_int_equal(dsm_compact_alloc(f.c[1], 0, 4000, &big), DSM_ERR_NOMEM);
    assert_true(wait_blocks_below(f.c[0], 32));
    assert_int_equal(dsm_compact_alloc(f.c[1], 0, 4000, &big), DSM_OK);
    dsm_harness_stop(&f.tc);
}

/* ---- consistency stress ---------------------------------------------------------------- */

enum { TRACKED = 48, ROUNDS = 25, FILL = 160 };

typedef struct stress {
    fixture_t *f;
    dsm_compact_ptr_t ptr[TRACKED];
    volatile int stop;
    uint32_t written[TRACKED];   /* last counter whose write completed */
    uint64_t reads, direct_ok, moved, scans, bad;
    int mode;                    /* reader: 0 direct_read (+scan on refusal), 1 scan_read, 2 get */
} stress_t;

static void *writer(void *arg)
{
    stress_t *s = arg;
    dsm_compact_ptr_t p[TRACKED];
    memcpy(p, s->ptr, sizeof p);
    uint8_t data[4096];
    for (uint32_t ctr = 2; !s->stop; ctr++)
        for (uint32_t i = 0; i < TRACKED && !s->stop; i++) {
            if (dsm_compact_write(s->f->c[1], &p[i], data, payload(data, i, ctr)) != DSM_OK) {
                __atomic_fetch_add(&s->bad, 1, __ATOMIC_RELAXED);
                continue;
            }
            __atomic_store_n(&s->written[i], ctr, __ATOMIC_RELEASE);
        }
    return NULL;
}

static __thread int t_hooked;      /* this thread's direct_reads get the split copy (shm) */
static __thread int t_split_always; /* every one of them, not only the first 8 split */

typedef struct reader_arg {
    stress_t *s;
    int mode;
} reader_arg_t;

static void *reader(void *arg)
{
    reader_arg_t *ra = arg;
    stress_t *s = ra->s;
    dsm_compact_t *c = s->f->c[2];
    t_hooked = ra->mode == 0;
    dsm_compact_ptr_t p[TRACKED];
    uint32_t seen[TRACKED] = {0};
    memcpy(p, s->ptr, sizeof p);
    uint8_t buf[4096];
    while (!s->stop) {
        for (uint32_t i = 0; i < TRACKED; i++) {
            uint32_t floor = __atomic_load_n(&s->written[i], __ATOMIC_ACQUIRE);
            size_t len = 0;
            dsm_status_t st;
            if (ra->mode == 0) {
                st = dsm_compact_direct_read(c, &p[i], buf, sizeof buf, &len);
                if (st == DSM_OK)
                    __atomic_fetch_add(&s->direct_ok, 1, __ATOMIC_RELAXED);
                else if (st == DSM_ERR_BAD_ADDR || st == DSM_ERR_TIMEOUT) {
                    __atomic_fetch_add(&s->moved, 1, __ATOMIC_RELAXED);
                    st = dsm_compact_scan_read(c, &p[i], buf, sizeof buf, &len);
                }
            } else if (ra->mode == 1) {
                st = dsm_compact_scan_read(c, &p[i], buf, sizeof buf, &len);
                __atomic_fetch_add(&s->scans, 1, __ATOMIC_RELAXED);
            } else {
                st = dsm_compact_get(c, &p[i], buf, sizeof buf, &len);
            }
            uint32_t ctr = 0;
            /* Every read succeeds, returns this object (not another, not a
             * torn mix: payload_ok checks every byte), never older than a
             * write completed before it started, never older than a read
             * before it. */
            if (st != DSM_OK || !payload_ok(buf, len, i, &ctr) || ctr < floor || ctr < seen[i]) {
                fprintf(stderr, "reader mode %d object %u: status %s ctr %u floor %u seen %u\n", ra->mode, i,
                        dsm_status_name(st), ctr, floor, seen[i]);
                __atomic_fetch_add(&s->bad, 1, __ATOMIC_RELAXED);
            }
            seen[i] = ctr;
            __atomic_fetch_add(&s->reads, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

/* Hooks that make the races the one-sided reads guard against happen (shm:
 * reads are copies out of a mirror another process writes). */
static stress_t *g_stress;
static uint64_t g_split_writes;    /* copies a write completed inside */
static uint64_t g_notice_reads;    /* direct_reads of merged-away objects before the notice */

/* The first hooked copies (until 8 were split): wait until two writes of the object complete
 * between the copy's halves, as a preempted software copy would see them
 * (the second began after the first half was copied, so the halves are
 * certainly of different writes). */
static void split_copy(void *ctx, const dsm_compact_ptr_t *ptr)
{
    (void)ctx;
    if (!t_hooked || (!t_split_always && __atomic_load_n(&g_split_writes, __ATOMIC_RELAXED) >= 8))
        return;
    stress_t *s = g_stress;
    for (uint32_t i = 0; i < TRACKED; i++) {
        dsm_compact_ptr_fields_t a, b;
        dsm_compact_ptr_decode(ptr, &a);
        dsm_compact_ptr_decode(&s->ptr[i], &b);
        if (a.id != b.id)
            continue;
        uint32_t w0 = __atomic_load_n(&s->written[i], __ATOMIC_ACQUIRE);
        /* the writer cycles through TRACKED objects continuously: a bound
         * of seconds only guards against a stopped writer */
        uint64_t until = (uint64_t)time(NULL) + 5;
        while (__atomic_load_n(&s->written[i], __ATOMIC_ACQUIRE) - w0 < 2 && !s->stop && (uint64_t)time(NULL) < until)
            sched_yield();
        if (__atomic_load_n(&s->written[i], __ATOMIC_ACQUIRE) - w0 >= 2)
            __atomic_fetch_add(&g_split_writes, 1, __ATOMIC_RELAXED);
        return;
    }
}

/* Before a batch's notice: read the tracked objects whose original block was
 * merged away in it through node 2's mirror, which still shows them under
 * the compaction bit (or elsewhere, if they moved offset). */
static void read_before_notice(void *ctx, const uint8_t *pairs, uint32_t n)
{
    (void)ctx;
    stress_t *s = g_stress;
    uint8_t buf[4096];
    size_t len;
    for (uint32_t i = 0; i < TRACKED; i++) {
        dsm_compact_ptr_fields_t f;
        dsm_compact_ptr_decode(&s->ptr[i], &f);
        uint32_t v = (uint32_t)(f.offset / 4096);
        for (uint32_t k = 0; k < n; k++)
            if (dsm_get_u32(pairs + 8 * (size_t)k) == v && dsm_get_u32(pairs + 8 * (size_t)k + 4) != v) {
                (void)dsm_compact_direct_read(s->f->c[2], &s->ptr[i], buf, sizeof buf, &len);
                __atomic_fetch_add(&g_notice_reads, 1, __ATOMIC_RELAXED);
                break;
            }
    }
}

static void stress(dsm_transport_t transport)
{
    fixture_t f;
    assert_int_equal(start(&f, transport, 0), DSM_OK);
    int broken = dsm_test_switch("compact_check");   /* the negative run (main) */
    uint64_t returned_torn = 0;
    static stress_t s;
    memset(&s, 0, sizeof s);
    s.f = &f;
    dsm_compact_t *srv = f.c[0];
    uint8_t data[4096];
    /* tracked objects spread thinly over many blocks, among fillers */
    static dsm_compact_ptr_t fill[TRACKED * 8 + ROUNDS * FILL];
    uint32_t nfill = 0;
    for (uint32_t i = 0; i < TRACKED; i++) {
        assert_int_equal(dsm_compact_alloc(srv, 0, 150, &s.ptr[i]), DSM_OK);
        assert_int_equal(dsm_compact_write(srv, &s.ptr[i], data, payload(data, i, 1)), DSM_OK);
        s.written[i] = 1;
        for (int k = 0; k < 7; k++)
            assert_int_equal(dsm_compact_alloc(srv, 0, 150, &fill[nfill++]), DSM_OK);
    }
    g_stress = &s;
    g_split_writes = g_notice_reads = 0;
    if (transport == DSM_TRANSPORT_SHM) {
        f.c[2]->hook_ctx = f.c[0]->hook_ctx = &s;
        f.c[2]->copy_hook = split_copy;
        f.c[0]->before_notice = read_before_notice;
    }
    pthread_t w, r[3];
    reader_arg_t ra[3] = {{&s, 0}, {&s, 1}, {&s, 2}};
    assert_int_equal(pthread_create(&w, NULL, writer, &s), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&r[i], NULL, reader, &ra[i]), 0);
    uint64_t rng = 88172645463325252ull;
    dsm_compact_stats_t total = {0};
    for (int round = 0; round < ROUNDS; round++) {
        /* free 3 in 4 fillers at random, compact, refill */
        uint32_t keep = 0;
        for (uint32_t i = 0; i < nfill; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            if (rng % 4)
                assert_int_equal(dsm_compact_free(srv, &fill[i]), DSM_OK);
            else
                fill[keep++] = fill[i];
        }
        nfill = keep;
        /* each round overlaps a pass of every reader (no timing involved) */
        uint64_t before = __atomic_load_n(&s.reads, __ATOMIC_RELAXED);
        dsm_compact_usage_t u0, u1;
        dsm_compact_usage(srv, 0, &u0);
        dsm_compact_stats_t one;
        dsm_status_t cs = dsm_compact_now(srv, 0, CLS, &one);
        assert_int_equal(cs, DSM_OK);
        total.merges += one.merges;
        total.moved += one.moved;
        total.kept += one.kept;
        dsm_compact_usage(srv, 0, &u1);
        if (getenv("COMPACT_DEBUG"))
            fprintf(stderr, "round %d: blocks %llu -> %llu, objects %llu, aliases %llu\n", round,
                    (unsigned long long)u0.blocks, (unsigned long long)u1.blocks, (unsigned long long)u1.objects,
                    (unsigned long long)u1.alias_blocks);
        while (__atomic_load_n(&s.reads, __ATOMIC_RELAXED) < before + 3 * TRACKED)
            sched_yield();
        for (int k = 0; k < FILL && nfill < sizeof fill / sizeof fill[0]; k++)
            assert_int_equal(dsm_compact_alloc(srv, 0, 150, &fill[nfill++]), DSM_OK);
    }
    /* the readers must have run while compaction did */
    while (__atomic_load_n(&s.reads, __ATOMIC_RELAXED) < 3 * TRACKED * 4)
        sched_yield();
    if (transport == DSM_TRANSPORT_SHM) {
        /* Torn copies made here too, while the writer still runs: the
         * readers' direct reads may be few when compaction keeps moving
         * their objects. Read the tracked objects directly, the hook on,
         * until a copy was seen torn (attempts bounded, not time). */
        uint64_t torn0 = __atomic_load_n(&f.c[2]->seen_torn, __ATOMIC_RELAXED);
        t_hooked = t_split_always = 1;
        for (int k = 0; k < 2000 && __atomic_load_n(&f.c[2]->seen_torn, __ATOMIC_RELAXED) == torn0 && !returned_torn;
             k++) {
            dsm_compact_ptr_t q = s.ptr[(uint32_t)k % TRACKED];
            size_t l2;
            uint32_t ctr;
            if (dsm_compact_get(f.c[2], &q, data, sizeof data, &l2) == DSM_OK &&
                dsm_compact_direct_read(f.c[2], &q, data, sizeof data, &l2) == DSM_OK &&
                !payload_ok(data, l2, (uint32_t)k % TRACKED, &ctr))
                returned_torn++;
        }
        t_hooked = t_split_always = 0;
        if (!broken)
            assert_true(__atomic_load_n(&f.c[2]->seen_torn, __ATOMIC_RELAXED) > torn0);
    }
    s.stop = 1;
    pthread_join(w, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(r[i], NULL);
    fprintf(stderr,
            "%s: %llu merges (%llu moved, %llu kept), %llu reads, %llu direct ok, %llu refused, %llu scans, "
            "%llu locked and %llu torn copies retried\n",
            dsm_transport_name(transport), (unsigned long long)total.merges, (unsigned long long)total.moved,
            (unsigned long long)total.kept, (unsigned long long)s.reads, (unsigned long long)s.direct_ok,
            (unsigned long long)s.moved, (unsigned long long)s.scans, (unsigned long long)f.c[2]->seen_locked,
            (unsigned long long)f.c[2]->seen_torn);
    if (broken) {
        /* The negative run: without its checks a torn copy is returned as
         * the object, and the same checks as above see it. On shm that is
         * certain: the hooked copy waits for two writes between its halves,
         * so its halves differ (payload_ok checks every byte). */
        fprintf(stderr, "compact_check off: %llu bad reads by the readers, %llu torn copies returned\n",
                (unsigned long long)s.bad, (unsigned long long)returned_torn);
        assert_true(s.bad + returned_torn > 0);
        s.bad = 0;
    }
    assert_int_equal(s.bad, 0);
    assert_true(total.merges >= ROUNDS && total.moved > 0);
    if (transport == DSM_TRANSPORT_SHM && !broken) {
        f.c[0]->before_notice = NULL;
        f.c[2]->copy_hook = NULL;
        /* the races happened and were refused: copies a write landed in
         * were seen torn, objects read before their block's notice were
         * seen under the compaction bit (and sent to the server) */
        fprintf(stderr, "shm: %llu copies split by a write, %llu reads before a notice, %llu saw the compaction bit\n",
                (unsigned long long)g_split_writes, (unsigned long long)g_notice_reads,
                (unsigned long long)f.c[2]->seen_moving);
        assert_true(g_split_writes > 0 && f.c[2]->seen_torn > 0);
        assert_true(g_notice_reads > 0 && f.c[2]->seen_locked > 0 && f.c[2]->seen_moving > 0);
    }
    /* every pointer gets corrected: the originals, via get, then read directly */
    uint8_t buf[4096];
    size_t len;
    for (uint32_t i = 0; i < TRACKED; i++) {
        uint32_t ctr;
        dsm_compact_ptr_t q = s.ptr[i];
        assert_int_equal(dsm_compact_get(f.c[2], &q, buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr) && ctr == s.written[i]);
        assert_int_equal(dsm_compact_direct_read(f.c[1], &q, buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr) && ctr == s.written[i]);
    }
    dsm_harness_stop(&f.tc);
}

/* ---- a peer that attaches late ---------------------------------------------------- */

/* Start one more client node (rank f->tc.n) into the running cluster. */
static dsm_compact_t *late_join(fixture_t *f)
{
    int i = f->tc.n;
    dsm_node_config_t cfg;
    dsm_harness_node_config(&f->tc, &cfg, i);
    cfg.partition_size = 0;
    cfg.peer_timeout_ms = 3000;
    cfg.op_timeout_ms = 10000;
    assert_int_equal(dsm_node_create(&cfg, &f->tc.nodes[i]), DSM_OK);
    f->tc.n = i + 1;
    dsm_compact_config_t cc;
    dsm_compact_config_init(&cc);
    cc.range_size = 0;
    assert_int_equal(dsm_compact_attach(f->tc.nodes[i], &cc), DSM_OK);
    assert_int_equal(dsm_node_join(f->tc.nodes[i]), DSM_OK);
    assert_int_equal(dsm_node_wait_daemons(f->tc.nodes[i], (uint32_t)f->tc.n, 10000), DSM_OK);
    return dsm_compact_of(f->tc.nodes[i]);
}

/* A peer that maps the server's memfd after compaction aliased blocks maps
 * the current layout, not the original: every live object reads directly
 * through its mirror (a view of the original layout shows the merged-away
 * blocks' punched pages, which test_stale_mirror shows refused). */
static void test_late_joiner(void **s)
{
    (void)s;
    fixture_t f;
    assert_int_equal(start(&f, DSM_TRANSPORT_SHM, 0), DSM_OK);
    enum { M = 1200 };
    static dsm_compact_ptr_t p[M];
    int live[M];
    uint8_t buf[4096];
    size_t len;
    fragment(f.c[0], p, live, M);
    dsm_compact_stats_t st = {0};
    assert_int_equal(dsm_compact_now(f.c[0], 0, CLS, &st), DSM_OK);
    dsm_compact_usage_t u;
    assert_int_equal(dsm_compact_usage(f.c[0], 0, &u), DSM_OK);
    assert_true(u.alias_blocks > 0 && st.merges == u.alias_blocks && st.moved > 0);
    /* the server corrects the pointers of objects that changed slot */
    for (uint32_t i = 0; i < M; i++)
        if (live[i])
            assert_int_equal(dsm_compact_read(f.c[1], &p[i], buf, sizeof buf, &len), DSM_OK);
    dsm_compact_t *late = late_join(&f);
    assert_null(late->peers[0].mirror);
    assert_non_null(late->peers[0].view);
    for (uint32_t i = 0; i < M; i++) {
        if (!live[i])
            continue;
        uint32_t ctr;
        assert_int_equal(dsm_compact_direct_read(late, &p[i], buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr) && ctr == 1);
    }
    /* those reads were loads from the caught-up mirror */
    assert_ptr_equal(late->peers[0].mirror, late->peers[0].view);
    assert_true(late->peers[0].seq > 0);
    /* and it hears of later remaps: free most of the rest, compact again */
    uint32_t k = 0;
    for (uint32_t i = 0; i < M; i++)
        if (live[i] && k++ % 3) {
            assert_int_equal(dsm_compact_free(f.c[0], &p[i]), DSM_OK);
            live[i] = 0;
        }
    uint64_t seq0 = late->peers[0].seq;
    memset(&st, 0, sizeof st);
    assert_int_equal(dsm_compact_now(f.c[0], 0, CLS, &st), DSM_OK);
    assert_true(st.merges > 0);
    assert_true(late->peers[0].seq > seq0);
    for (uint32_t i = 0; i < M; i++)
        if (live[i]) {
            assert_int_equal(dsm_compact_read(f.c[1], &p[i], buf, sizeof buf, &len), DSM_OK);
            uint32_t ctr;
            assert_int_equal(dsm_compact_direct_read(late, &p[i], buf, sizeof buf, &len), DSM_OK);
            assert_true(payload_ok(buf, len, i, &ctr) && ctr == 1);
        }
    dsm_harness_stop(&f.tc);
}

/* A late joiner whose first reads race compaction rounds (its catch-up
 * holds the notices that come meanwhile): no read returns a wrong or torn
 * object, and once caught up every live object reads directly. */
typedef struct late_race {
    fixture_t *f;
    dsm_compact_ptr_t ptr[TRACKED];
    volatile int stop;
    int done;   /* the compactor stopped (asked to, or at its bound) */
    uint64_t rounds, merges;
} late_race_t;

static void *compactor(void *arg)
{
    late_race_t *r = arg;
    dsm_compact_t *srv = r->f->c[0];
    static dsm_compact_ptr_t fill[4096];
    uint32_t nfill = 0;
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    while (!r->stop && r->rounds < 400) {
        while (nfill < 4096 - 64 && nfill < 900) {
            if (dsm_compact_alloc(srv, 0, 150, &fill[nfill]) != DSM_OK)
                break;
            nfill++;
        }
        uint32_t keep = 0;
        for (uint32_t i = 0; i < nfill; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            if (rng % 4)
                (void)dsm_compact_free(srv, &fill[i]);
            else
                fill[keep++] = fill[i];
        }
        nfill = keep;
        dsm_compact_stats_t one = {0};
        if (dsm_compact_now(srv, 0, CLS, &one) == DSM_OK)
            r->merges += one.merges;
        __atomic_fetch_add(&r->rounds, 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void test_late_joiner_race(void **s)
{
    (void)s;
    fixture_t f;
    assert_int_equal(start(&f, DSM_TRANSPORT_SHM, 0), DSM_OK);
    static late_race_t r;
    memset(&r, 0, sizeof r);
    r.f = &f;
    uint8_t buf[4096], data[4096];
    size_t len;
    for (uint32_t i = 0; i < TRACKED; i++) {
        assert_int_equal(dsm_compact_alloc(f.c[0], 0, 150, &r.ptr[i]), DSM_OK);
        assert_int_equal(dsm_compact_write(f.c[0], &r.ptr[i], data, payload(data, i, 1)), DSM_OK);
    }
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, compactor, &r), 0);
    while (__atomic_load_n(&r.rounds, __ATOMIC_ACQUIRE) < 3 && !__atomic_load_n(&r.done, __ATOMIC_ACQUIRE))
        sched_yield();
    dsm_compact_t *late = late_join(&f);
    uint64_t bad = 0, reads = 0;
    dsm_compact_ptr_t p[TRACKED];
    memcpy(p, r.ptr, sizeof p);
    uint64_t until = __atomic_load_n(&r.rounds, __ATOMIC_ACQUIRE) + 10;
    while ((__atomic_load_n(&r.rounds, __ATOMIC_ACQUIRE) < until && !__atomic_load_n(&r.done, __ATOMIC_ACQUIRE)) ||
           reads < 20 * TRACKED)
        for (uint32_t i = 0; i < TRACKED; i++, reads++) {
            uint32_t ctr;
            dsm_status_t st = dsm_compact_direct_read(late, &p[i], buf, sizeof buf, &len);
            if (st == DSM_OK && !(payload_ok(buf, len, i, &ctr) && ctr == 1))
                bad++;
            if (st == DSM_ERR_BAD_ADDR || st == DSM_ERR_TIMEOUT)
                st = dsm_compact_scan_read(late, &p[i], buf, sizeof buf, &len);
            if (st != DSM_OK || !(payload_ok(buf, len, i, &ctr) && ctr == 1))
                bad++;
        }
    r.stop = 1;
    pthread_join(th, NULL);
    fprintf(stderr, "late joiner: %llu reads during %llu rounds (%llu merges), caught up at layout %llu\n",
            (unsigned long long)reads, (unsigned long long)r.rounds, (unsigned long long)r.merges,
            (unsigned long long)late->peers[0].seq);
    assert_int_equal(bad, 0);
    assert_true(r.merges > 0);
    assert_ptr_equal(late->peers[0].mirror, late->peers[0].view);
    /* with compaction stopped, a pointer whose object moved in the last
     * rounds is corrected by one scan read; then every pointer reads directly */
    for (uint32_t i = 0; i < TRACKED; i++) {
        uint32_t ctr;
        if (dsm_compact_direct_read(late, &p[i], buf, sizeof buf, &len) == DSM_ERR_BAD_ADDR)
            assert_int_equal(dsm_compact_scan_read(late, &p[i], buf, sizeof buf, &len), DSM_OK);
        assert_int_equal(dsm_compact_direct_read(late, &p[i], buf, sizeof buf, &len), DSM_OK);
        assert_true(payload_ok(buf, len, i, &ctr) && ctr == 1);
    }
    dsm_harness_stop(&f.tc);
}

/* ---- verbs re-registration, the transport-independent part ------------------------- */

/* What a remap on verbs does, driven by hand on shm and tcp: the range is
 * registered anew (a new key), the key travels in the store's REKEY message
 * to a peer, which swaps it in and keeps reading; a key for a region the
 * peer never learnt, or an empty one, is refused. (UCX cannot validate a
 * packed key's bytes, so a peer takes a key only from the region's owner:
 * the message's source.) On these transports dsm_fabric_region_remapped itself
 * keeps the registration (they read page tables per access). */
static void rekey(dsm_transport_t transport)
{
    fixture_t f;
    assert_int_equal(start(&f, transport, 0), DSM_OK);
    uint8_t buf[4096], data[4096];
    size_t len;
    dsm_compact_ptr_t p;
    assert_int_equal(dsm_compact_alloc(f.c[0], 0, 150, &p), DSM_OK);
    assert_int_equal(dsm_compact_write(f.c[0], &p, data, payload(data, 3, 1)), DSM_OK);
    dsm_region_t *region = f.c[0]->region;
    const void *key0, *key1;
    size_t klen0, klen1;
    assert_int_equal(dsm_fabric_region_key(region, &key0, &klen0), DSM_OK);
    assert_int_equal(dsm_fabric_region_remapped(region, 0, dsm_fabric_region_length(region)), DSM_OK);
    assert_int_equal(dsm_fabric_region_key(region, &key1, &klen1), DSM_OK);
    assert_ptr_equal(key0, key1);   /* not verbs: the registration stays */
    assert_int_equal(dsm_fabric_region_remapped(region, 1, dsm_fabric_region_length(region)), DSM_ERR_BAD_ADDR);

    assert_int_equal(dsm_fabric_region_reregister(region), DSM_OK);
    assert_int_equal(dsm_fabric_region_key(region, &key1, &klen1), DSM_OK);
    assert_true(key1 != key0);
    dsm_compact_msg_t m = {.type = DSM_COMPACT_MSG_REKEY_REQ, .seq = 1, .data = key1, .len = (uint32_t)klen1};
    uint8_t msg[DSM_COMPACT_MSG_HEADER_LEN + 12 + DSM_COMPACT_MSG_MAX_KEY];
    size_t n = dsm_compact_msg_encode(&m, msg), rl = 0;
    dsm_fabric_t *f0 = dsm_node_fabric(f.tc.nodes[0]), *f1 = dsm_node_fabric(f.tc.nodes[1]);
    assert_int_equal(dsm_fabric_am_request(f0, 1, DSM_AM_COMPACT_REMAP, msg, n, NULL, 0, &rl, 0), DSM_OK);
    /* node 1 reads the store through the fabric with the new key */
    dsm_compact_ptr_fields_t pf;
    dsm_compact_ptr_decode(&p, &pf);
    uint32_t slot = dsm_compact_class_slot_bytes(CLS), ctr;
    assert_int_equal(dsm_fabric_get(f1, 0, DSM_COMPACT_REGION, pf.offset, buf, slot), DSM_OK);
    assert_int_equal(dsm_compact_obj_check(buf, slot, pf.id, (uint32_t)(pf.offset / 4096), data, sizeof data, &len,
                                        NULL),
                     DSM_COMPACT_VALID);
    assert_true(payload_ok(data, len, 3, &ctr) && ctr == 1);
    /* a region the peer never learnt */
    assert_int_equal(dsm_fabric_remote_region_rekey(f1, 0, 7, key1, klen1), DSM_ERR_BAD_ADDR);
    assert_int_equal(dsm_fabric_remote_region_rekey(f1, 0, DSM_COMPACT_REGION, key1, 0), DSM_ERR_INVALID);
    /* and the store still serves every path */
    dsm_compact_ptr_t q = p;
    assert_int_equal(dsm_compact_get(f.c[1], &q, buf, sizeof buf, &len), DSM_OK);
    assert_true(payload_ok(buf, len, 3, &ctr) && ctr == 1);
    dsm_harness_stop(&f.tc);
}

static void test_rekey_shm(void **s) { (void)s; rekey(DSM_TRANSPORT_SHM); }
static void test_rekey_tcp(void **s) { (void)s; rekey(DSM_TRANSPORT_TCP); }

static void test_stress_shm(void **s) { (void)s; stress(DSM_TRANSPORT_SHM); }
static void test_stress_tcp(void **s) { (void)s; stress(DSM_TRANSPORT_TCP); }

int main(void)
{
    /* warnings shown: a wait that times out names what it waited for and
     * who attended the worker (the fabric's diagnostic is a warning) */
    dsm_set_log_level(getenv("COMPACT_DEBUG") ? 3 : 1);
    dsm_set_log_sink(test_sink, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rekey_shm), cmocka_unit_test(test_rekey_tcp),
        cmocka_unit_test(test_api_shm),        cmocka_unit_test(test_api_tcp),
        cmocka_unit_test(test_compaction_shm), cmocka_unit_test(test_compaction_tcp),
        cmocka_unit_test(test_map_budget),     cmocka_unit_test(test_stale_mirror),
        cmocka_unit_test(test_trigger_fragmentation),
        cmocka_unit_test(test_trigger_alloc_failure), cmocka_unit_test(test_stress_shm),
        cmocka_unit_test(test_stress_tcp),     cmocka_unit_test(test_late_joiner),
        cmocka_unit_test(test_late_joiner_race),
        cmocka_unit_test(test_rekey_shm),      cmocka_unit_test(test_rekey_tcp),
    };
    /* The negative run (ctest test_compact_cluster_negative): the stress on
     * shm, whose hooked copies are torn for certain, must catch the torn
     * copies the switch lets through. */
    if (dsm_test_switch("compact_check"))
        cmocka_set_test_filter("test_stress_shm");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
