/* The managed heap's pure parts, without a cluster: the type table's
 * validation, the control messages' codec and its refusals, and a region's
 * trace (DFS and BFS order, new objects, compaction with its forward table
 * and intra-region fix-ups, a dangling pointer of an unsound trace). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "mheap/layout.h"
#include "mheap/msg.h"
#include "mheap/trace.h"
#include "mheap/types.h"

enum { REGION = 1 << 20 };

static void test_types(void **state)
{
    (void)state;
    static dsm_mheap_types_t t;
    const uint32_t ok[] = {16, 0}, dup[] = {0, 0}, odd[] = {12}, out[] = {24};
    const dsm_mheap_type_t good = {.size = 24, .nrefs = 2, .ref_offsets = ok};
    assert_int_equal(dsm_mheap_types_build(&good, 1, REGION, &t), DSM_OK);
    assert_int_equal(t.t[0].size, 32);            /* header + payload */
    assert_int_equal(t.t[0].refs[0], 0);          /* sorted */
    assert_int_equal(t.t[0].refs[1], 16);
    assert_true(dsm_mheap_types_is_ref(&t.t[0], 16));
    assert_false(dsm_mheap_types_is_ref(&t.t[0], 8));
    assert_true(dsm_mheap_types_covers_ref(&t.t[0], 12, 8));
    assert_false(dsm_mheap_types_covers_ref(&t.t[0], 8, 8));
    const dsm_mheap_type_t bad[] = {{.size = 24, .nrefs = 2, .ref_offsets = dup},
                                    {.size = 24, .nrefs = 1, .ref_offsets = odd},
                                    {.size = 24, .nrefs = 1, .ref_offsets = out},
                                    {.size = 0, .nrefs = 0, .ref_offsets = NULL},
                                    {.size = REGION, .nrefs = 0, .ref_offsets = NULL},
                                    {.size = 24, .nrefs = 1, .ref_offsets = NULL}};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(dsm_mheap_types_build(&bad[i], 1, REGION, &t), DSM_ERR_INVALID);
    assert_int_equal(dsm_mheap_types_build(&good, 0, REGION, &t), DSM_ERR_INVALID);
}

static void test_msg_codec(void **state)
{
    (void)state;
    static dsm_mheap_types_t types, back;
    const uint32_t refs[] = {8};
    const dsm_mheap_type_t ty = {.size = 40, .nrefs = 1, .ref_offsets = refs};
    assert_int_equal(dsm_mheap_types_build(&ty, 1, REGION, &types), DSM_OK);
    uint8_t roots[24];
    for (int i = 0; i < 24; i++)
        roots[i] = (uint8_t)i;
    uint8_t more[8];
    dsm_put_u32(more, 5);
    dsm_put_u32(more + 4, 2);
    static uint8_t pages[2 * DSM_MHEAP_PAGE_ITEM];
    for (size_t i = 0; i < sizeof pages; i++)
        pages[i] = (uint8_t)(i * 7);
    dsm_put_u32(pages, 0);
    dsm_put_u32(pages + DSM_MHEAP_PAGE_ITEM, 255);
    const dsm_mheap_msg_t msgs[] = {
        {.type = DSM_MHEAP_MSG_SETUP, .heap_id = 7, .chunk = 0x10000, .ubase = DSM_MHEAP_UBASE,
         .part_bytes = 4 << 20, .region_shift = 20, .order = 1, .types = &types},
        {.type = DSM_MHEAP_MSG_TRACE, .heap_id = 7, .region = 3, .epoch = 9, .bp = 4096, .nroots = 3, .roots = roots},
        {.type = DSM_MHEAP_MSG_REMARK, .heap_id = 7, .region = 3, .epoch = 9, .old_bp = 64, .bp = 4096, .flags = 1,
         .nroots = 2, .roots = roots},
        {.type = DSM_MHEAP_MSG_EVAC, .heap_id = 7, .region = 1, .epoch = 2},
        {.type = DSM_MHEAP_MSG_EVAC, .heap_id = 7, .region = 1, .epoch = 2, .nmore = 2, .more = more},
        {.type = DSM_MHEAP_MSG_FIXUP, .heap_id = 7, .lo = 100, .hi = 200, .npairs = 1, .nslots = 1, .pairs = roots,
         .slots = roots + 16},
        {.type = DSM_MHEAP_MSG_TRACE_REP, .heap_id = 7, .ok = 1, .live_objs = 5, .live_bytes = 500, .traced_bytes = 9},
        {.type = DSM_MHEAP_MSG_EVAC_REP, .heap_id = 7, .new_bp = 128, .npairs = 1, .pairs = roots},
        {.type = DSM_MHEAP_MSG_SLOTS, .heap_id = 7, .nslots = 2, .slots = roots},
        {.type = DSM_MHEAP_MSG_SLOTS_REP, .heap_id = 7, .nslots = 3, .slots = roots},
        {.type = DSM_MHEAP_MSG_PAGES, .heap_id = 7, .region = 3, .npages = 2, .pages = pages},
        {.type = DSM_MHEAP_MSG_PAGES_REP, .heap_id = 7},
        {.type = DSM_MHEAP_MSG_DESTROY, .heap_id = 7},
    };
    for (unsigned i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
        dsm_writer_t w = {0};
        dsm_mheap_msg_encode(&msgs[i], &w);
        assert_true(w.ok);
        dsm_mheap_msg_t m;
        assert_int_equal(dsm_mheap_msg_decode(w.buf, w.len, &m, &back), DSM_OK);
        assert_int_equal(m.type, msgs[i].type);
        assert_int_equal(m.heap_id, 7);
        assert_int_equal(m.nroots, msgs[i].nroots);
        assert_int_equal(m.npairs, msgs[i].npairs);
        assert_int_equal(m.bp, msgs[i].bp);
        assert_int_equal(m.live_bytes, msgs[i].live_bytes);
        assert_int_equal(m.nmore, msgs[i].nmore);
        assert_int_equal(m.nslots, msgs[i].nslots);
        if (m.nslots)
            assert_memory_equal(m.slots, msgs[i].slots, m.nslots * 8);
        if (m.nmore)
            assert_memory_equal(m.more, more, 8);
        if (m.nroots)
            assert_memory_equal(m.roots, roots, m.nroots * 8);
        assert_int_equal(m.npages, msgs[i].npages);
        if (m.npages) {
            assert_int_equal(m.region, 3);
            assert_memory_equal(m.pages, pages, sizeof pages);
        }
        if (m.type == DSM_MHEAP_MSG_SETUP) {
            assert_int_equal(back.n, 1);
            assert_int_equal(back.t[0].size, types.t[0].size);
            assert_int_equal(m.part_bytes, 4 << 20);
        }
        uint16_t peeked = 0;
        assert_int_equal(dsm_mheap_msg_peek_type(w.buf, w.len, &peeked), DSM_OK);
        assert_int_equal(peeked, msgs[i].type);
        /* Every truncation and a longer body are refused, peeked too. */
        for (size_t n = 0; n < w.len; n++) {
            assert_int_equal(dsm_mheap_msg_decode(w.buf, n, &m, &back), DSM_ERR_PROTO);
            assert_int_equal(dsm_mheap_msg_peek_type(w.buf, n, &peeked), DSM_ERR_PROTO);
        }
        uint8_t *longer = calloc(1, w.len + 1);
        memcpy(longer, w.buf, w.len);
        assert_int_equal(dsm_mheap_msg_decode(longer, w.len + 1, &m, &back), DSM_ERR_PROTO);
        free(longer);
        dsm_writer_free(&w);
    }
    /* Out-of-range fields. */
    dsm_mheap_msg_t bad = msgs[2];
    bad.old_bp = 8192;   /* above bp */
    dsm_writer_t w = {0};
    dsm_mheap_msg_encode(&bad, &w);
    dsm_mheap_msg_t m;
    assert_int_equal(dsm_mheap_msg_decode(w.buf, w.len, &m, &back), DSM_ERR_PROTO);
    dsm_writer_free(&w);
    bad = msgs[0];
    bad.region_shift = 23;   /* 8 MiB regions */
    dsm_mheap_msg_encode(&bad, &w);
    assert_int_equal(dsm_mheap_msg_decode(w.buf, w.len, &m, &back), DSM_ERR_PROTO);
    dsm_writer_free(&w);
    /* A page past the largest region. */
    bad = msgs[10];
    assert_int_equal(bad.type, DSM_MHEAP_MSG_PAGES);
    dsm_put_u32(pages + DSM_MHEAP_PAGE_ITEM, DSM_MHEAP_MAX_REGION / DSM_MHEAP_PAGE);
    dsm_mheap_msg_encode(&bad, &w);
    assert_int_equal(dsm_mheap_msg_decode(w.buf, w.len, &m, &back), DSM_ERR_PROTO);
    dsm_writer_free(&w);
    /* An EVAC naming a region twice, or its destination among the others. */
    for (int k = 0; k < 2; k++) {
        bad = msgs[4];
        dsm_put_u32(more + 4, k ? 1 : 5);
        dsm_mheap_msg_encode(&bad, &w);
        assert_int_equal(dsm_mheap_msg_decode(w.buf, w.len, &m, &back), DSM_ERR_PROTO);
        dsm_writer_free(&w);
    }
}

/* A BATCH of requests and a BATCH_REP of replies, one of them an error:
 * every item comes back in order; truncations, an item too short to be a
 * message and an error reply with bytes are refused. */
static void test_batch_codec(void **state)
{
    (void)state;
    uint8_t roots[16] = {1, 2, 3};
    dsm_mheap_msg_t items[2] = {
        {.type = DSM_MHEAP_MSG_REMARK, .heap_id = 7, .region = 3, .epoch = 9, .old_bp = 64, .bp = 4096,
         .nroots = 2, .roots = roots},
        {.type = DSM_MHEAP_MSG_EVAC, .heap_id = 7, .region = 4, .epoch = 9},
    };
    for (int rep = 0; rep < 2; rep++) {
        dsm_mheap_batch_t b;
        dsm_mheap_batch_begin(&b, rep ? DSM_MHEAP_MSG_BATCH_REP : DSM_MHEAP_MSG_BATCH, 7);
        dsm_mheap_msg_t r0 = {.type = DSM_MHEAP_MSG_REMARK_REP, .heap_id = 7, .live_objs = 2, .live_bytes = 80};
        dsm_mheap_batch_add(&b, rep ? &r0 : &items[0], DSM_OK);
        dsm_mheap_batch_add(&b, &items[1], rep ? DSM_ERR_STATE : DSM_OK);
        dsm_mheap_batch_end(&b);
        assert_true(b.w.ok);
        dsm_mheap_msg_t m, it;
        assert_int_equal(dsm_mheap_msg_decode(b.w.buf, b.w.len, &m, NULL), DSM_OK);
        assert_int_equal(m.nitems, 2);
        size_t pos = 0, len;
        const uint8_t *data;
        dsm_status_t status;
        assert_int_equal(dsm_mheap_batch_item(&m, &pos, &data, &len, &status), DSM_OK);
        assert_int_equal(status, DSM_OK);
        assert_int_equal(dsm_mheap_msg_decode(data, len, &it, NULL), DSM_OK);
        assert_int_equal(it.type, rep ? DSM_MHEAP_MSG_REMARK_REP : DSM_MHEAP_MSG_REMARK);
        assert_int_equal(rep ? it.live_bytes : it.nroots, rep ? 80 : 2);
        assert_int_equal(dsm_mheap_batch_item(&m, &pos, &data, &len, &status), DSM_OK);
        assert_int_equal(status, rep ? DSM_ERR_STATE : DSM_OK);
        assert_int_equal(len, rep ? 0 : 28);
        assert_int_equal(dsm_mheap_batch_item(&m, &pos, &data, &len, &status), DSM_ERR_PROTO);
        for (size_t n = 0; n < b.w.len; n++)
            assert_int_equal(dsm_mheap_msg_decode(b.w.buf, n, &m, NULL), DSM_ERR_PROTO);
        /* Re-encoded from the decoded form: the same bytes. */
        dsm_writer_t w = {0};
        assert_int_equal(dsm_mheap_msg_decode(b.w.buf, b.w.len, &m, NULL), DSM_OK);
        dsm_mheap_msg_encode(&m, &w);
        assert_int_equal(w.len, b.w.len);
        assert_memory_equal(w.buf, b.w.buf, w.len);
        dsm_writer_free(&w);
        dsm_writer_free(&b.w);
    }
    /* Malformed: a request item of 8 bytes; an error reply carrying bytes. */
    dsm_mheap_batch_t b;
    dsm_mheap_batch_begin(&b, DSM_MHEAP_MSG_BATCH, 7);
    dsm_write_u32(&b.w, 8);
    dsm_write_u64(&b.w, 0);
    b.n = 1;
    dsm_mheap_batch_end(&b);
    dsm_mheap_msg_t m;
    assert_int_equal(dsm_mheap_msg_decode(b.w.buf, b.w.len, &m, NULL), DSM_ERR_PROTO);
    dsm_writer_free(&b.w);
    dsm_mheap_batch_begin(&b, DSM_MHEAP_MSG_BATCH_REP, 7);
    dsm_write_u32(&b.w, (uint32_t)DSM_ERR_STATE);
    dsm_write_u32(&b.w, 4);
    dsm_write_u32(&b.w, 0);
    b.n = 1;
    dsm_mheap_batch_end(&b);
    assert_int_equal(dsm_mheap_msg_decode(b.w.buf, b.w.len, &m, NULL), DSM_ERR_PROTO);
    dsm_writer_free(&b.w);
}

/* A region image: objects of type 0 (refs at payload 0 and 8, 24 bytes). */
static uint8_t mem[REGION], scratch[REGION];
static const uint64_t US = DSM_MHEAP_UBASE;

static uint32_t put(uint32_t off, uint64_t a, uint64_t b, uint64_t tag)
{
    uint64_t w[4] = {dsm_mheap_hdr_make(0, 32), a, b, tag};
    memcpy(mem + off, w, 32);
    return off + 32;
}

static void test_trace_and_compact(void **state)
{
    (void)state;
    static dsm_mheap_types_t types;
    const uint32_t refs[] = {0, 8};
    const dsm_mheap_type_t ty = {.size = 24, .nrefs = 2, .ref_offsets = refs};
    assert_int_equal(dsm_mheap_types_build(&ty, 1, REGION, &types), DSM_OK);
    /* Objects at 64 (root: -> 128, -> 160), 96 (garbage), 128 (-> 192),
     * 160, 192; then 224 is new (allocated since the last collection). */
    memset(mem, 0, 4096);
    put(64, US + 128, US + 160, 1);
    put(96, US + 64, 0, 2);
    put(128, US + 192, 0, 3);
    put(160, 0, 0, 4);
    put(192, 0, US + 64, 5);
    put(224, US + 96, US + (5u << 20), 6);   /* a new object; a pointer into another region */
    uint8_t root[8];
    dsm_put_u64(root, US + 64);
    dsm_mheap_rtrace_t t;
    for (int bfs = 0; bfs < 2; bfs++) {
        assert_int_equal(dsm_mheap_rtrace_init(&t, REGION), DSM_OK);
        dsm_mheap_rtrace_mark(&t, mem, US, 224, &types, bfs, root, 1);
        assert_int_equal(t.norder, 4);
        assert_int_equal(t.live_bytes, 128);
        assert_int_equal(t.order[0], 64);
        if (bfs) {   /* 64, its children 128 and 160, then 192 */
            assert_int_equal(t.order[1], 128);
            assert_int_equal(t.order[2], 160);
            assert_int_equal(t.order[3], 192);
        } else {     /* depth first: 64, then the last pushed child first */
            assert_int_equal(t.order[1], 160);
            assert_int_equal(t.order[2], 128);
            assert_int_equal(t.order[3], 192);
        }
        dsm_mheap_rtrace_free(&t);
    }
    /* DFS, new objects, compaction. */
    assert_int_equal(dsm_mheap_rtrace_init(&t, REGION), DSM_OK);
    dsm_mheap_rtrace_mark(&t, mem, US, 224, &types, 0, root, 1);
    assert_int_equal(dsm_mheap_rtrace_mark_new(&t, mem, 224, 256, &types), DSM_OK);
    assert_int_equal(t.norder, 5);
    dsm_writer_t pairs = {0};
    uint32_t new_bp = 0, dangling = 0;
    assert_int_equal(dsm_mheap_rtrace_compact(&t, mem, US, 256, &types, scratch, &pairs, &new_bp, &dangling),
                     DSM_OK);
    assert_int_equal(new_bp, 64 + 5 * 32);
    assert_int_equal(pairs.len, 5 * DSM_MHEAP_EVAC_PAIR);
    assert_int_equal(dangling, 1);   /* the new object's pointer to garbage 96 (never happens with SATB) */
    /* Traversal order: 64 stays, 160 -> 96, 128 -> 128, 192 -> 160, 224 -> 192. */
    uint64_t w[4];
    memcpy(w, mem + 64, 32);
    assert_int_equal(w[1], US + 128);
    assert_int_equal(w[2], US + 96);
    memcpy(w, mem + 96, 32);
    assert_int_equal(w[3], 4);
    memcpy(w, mem + 160, 32);
    assert_int_equal(w[3], 5);
    assert_int_equal(w[2], US + 64);
    memcpy(w, mem + 192, 32);
    assert_int_equal(w[3], 6);
    assert_int_equal(w[1], 0);                  /* nulled: it pointed at garbage */
    assert_int_equal(w[2], US + (5u << 20));    /* other regions untouched */
    /* Pairs ascend by old address. */
    for (uint32_t k = 1; k < 5; k++)
        assert_true(dsm_get_u64(pairs.buf + k * DSM_MHEAP_EVAC_PAIR) >
                    dsm_get_u64(pairs.buf + (k - 1) * DSM_MHEAP_EVAC_PAIR));
    dsm_writer_free(&pairs);
    /* A corrupt image is refused, not followed: a root at a bad header. */
    dsm_mheap_rtrace_reset(&t);
    memset(mem + 64, 0xff, 8);
    dsm_mheap_rtrace_mark(&t, mem, US, 256, &types, 0, root, 1);
    assert_int_equal(t.norder, 0);
    assert_int_equal(dsm_mheap_rtrace_mark_new(&t, mem, 64, 256, &types), DSM_ERR_PROTO);
    dsm_mheap_rtrace_free(&t);
}

/* A trace whose owner changed its stop word gives up (a memory server's
 * trace that a pause overtook), one that still holds it runs to the end. */
static void test_trace_stops(void **state)
{
    (void)state;
    static dsm_mheap_types_t types;
    const uint32_t refs[] = {0, 8};
    const dsm_mheap_type_t ty = {.size = 24, .nrefs = 2, .ref_offsets = refs};
    assert_int_equal(dsm_mheap_types_build(&ty, 1, REGION, &types), DSM_OK);
    /* A chain of 2000 objects from 64, each pointing at the next. */
    enum { N = 2000 };
    memset(mem, 0, (size_t)N * 32 + 64);
    uint32_t off = 64;
    for (int i = 0; i < N; i++)
        off = put(off, i + 1 < N ? US + off + 32 : 0, 0, (uint64_t)i);
    uint8_t root[8];
    dsm_put_u64(root, US + 64);
    uint32_t word = 5;
    dsm_mheap_rtrace_t t;
    assert_int_equal(dsm_mheap_rtrace_init(&t, REGION), DSM_OK);
    t.stop = &word;
    t.stop_gen = 5;
    dsm_mheap_rtrace_mark(&t, mem, US, off, &types, 0, root, 1);
    assert_false(t.stopped);
    assert_int_equal(t.norder, N);
    for (int bfs = 0; bfs < 2; bfs++) {
        dsm_mheap_rtrace_reset(&t);
        t.stop_gen = 4;   /* the word moved on */
        dsm_mheap_rtrace_mark(&t, mem, US, off, &types, bfs, root, 1);
        assert_true(t.stopped);
        assert_true(t.norder < N);
    }
    dsm_mheap_rtrace_free(&t);
}

/* Two regions that reference each other, evacuated into the first:
 * survivors of both packed in traversal order, region after region, every
 * pointer between them fixed, the second region zeroed. */
static void test_evacuate_two(void **state)
{
    (void)state;
    static dsm_mheap_types_t types;
    static uint8_t mem2[REGION];
    const uint32_t refs[] = {0, 8};
    const dsm_mheap_type_t ty = {.size = 24, .nrefs = 2, .ref_offsets = refs};
    assert_int_equal(dsm_mheap_types_build(&ty, 1, REGION, &types), DSM_OK);
    const uint64_t U2 = US + 2 * (uint64_t)REGION;
    memset(mem, 0, 4096);
    memset(mem2, 0, 4096);
    /* A: 64 (root: -> B:96), 96 (garbage). B: 64 (garbage), 96 (-> A:64, -> B:128), 128. */
    put(64, U2 + 96, 0, 1);
    put(96, 0, 0, 2);
    uint64_t w[4] = {dsm_mheap_hdr_make(0, 32), 0, 0, 3};
    memcpy(mem2 + 64, w, 32);
    uint64_t w2[4] = {dsm_mheap_hdr_make(0, 32), US + 64, U2 + 128, 4};
    memcpy(mem2 + 96, w2, 32);
    uint64_t w3[4] = {dsm_mheap_hdr_make(0, 32), 0, 0, 5};
    memcpy(mem2 + 128, w3, 32);
    dsm_mheap_rtrace_t ta, tb;
    assert_int_equal(dsm_mheap_rtrace_init(&ta, REGION), DSM_OK);
    assert_int_equal(dsm_mheap_rtrace_init(&tb, REGION), DSM_OK);
    uint8_t ra[8], rb[8];
    dsm_put_u64(ra, US + 64);
    dsm_put_u64(rb, U2 + 96);   /* B's remset target: A:64's field */
    dsm_mheap_rtrace_mark(&ta, mem, US, 128, &types, 0, ra, 1);
    dsm_mheap_rtrace_mark(&tb, mem2, U2, 160, &types, 0, rb, 1);
    assert_int_equal(ta.norder, 1);
    assert_int_equal(tb.norder, 2);
    /* Each region's bp as the trace sees it: where its highest survivor
     * ends (A's garbage at 96 is past it); a header that does not fit
     * the region gives that object's offset, which evacuation refuses. */
    assert_int_equal(dsm_mheap_rtrace_end(&ta, mem), 96);
    assert_int_equal(dsm_mheap_rtrace_end(&tb, mem2), 160);
    uint64_t saved;
    memcpy(&saved, mem2 + 128, 8);
    uint64_t huge = dsm_mheap_hdr_make(0, REGION);
    memcpy(mem2 + 128, &huge, 8);
    assert_int_equal(dsm_mheap_rtrace_end(&tb, mem2), 128);
    memcpy(mem2 + 128, &saved, 8);
    dsm_mheap_rtrace_t none;
    assert_int_equal(dsm_mheap_rtrace_init(&none, REGION), DSM_OK);
    assert_int_equal(dsm_mheap_rtrace_end(&none, mem), DSM_MHEAP_REGION_HDR);
    dsm_mheap_rtrace_free(&none);
    dsm_mheap_evac_src_t src[2] = {{.t = &ta, .mem = mem, .ustart = US, .bp = 128},
                                   {.t = &tb, .mem = mem2, .ustart = U2, .bp = 160}};
    dsm_writer_t pairs = {0};
    uint32_t new_bp = 0, dangling = 0;
    assert_int_equal(dsm_mheap_rtrace_evacuate(src, 2, &types, scratch, &pairs, &new_bp, &dangling), DSM_OK);
    assert_int_equal(new_bp, 64 + 3 * 32);
    assert_int_equal(dangling, 0);
    assert_int_equal(pairs.len, 3 * DSM_MHEAP_EVAC_PAIR);
    /* A:64 stays at 64; B:96 -> 96, B:128 -> 128 of A; pointers follow. */
    uint64_t v[4];
    memcpy(v, mem + 64, 32);
    assert_int_equal(v[1], US + 96);
    assert_int_equal(v[3], 1);
    memcpy(v, mem + 96, 32);
    assert_int_equal(v[1], US + 64);
    assert_int_equal(v[2], US + 128);
    assert_int_equal(v[3], 4);
    memcpy(v, mem + 128, 32);
    assert_int_equal(v[3], 5);
    for (uint32_t off = 64; off < 160; off++)
        assert_int_equal(mem2[off], 0);
    /* Pairs ascend by old address and land in A. */
    assert_int_equal(dsm_get_u64(pairs.buf), US + 64);
    assert_int_equal(dsm_get_u64(pairs.buf + DSM_MHEAP_EVAC_PAIR), U2 + 96);
    assert_int_equal(dsm_get_u64(pairs.buf + DSM_MHEAP_EVAC_PAIR + 8), US + 96);
    assert_int_equal(dsm_get_u64(pairs.buf + 2 * DSM_MHEAP_EVAC_PAIR + 8), US + 128);
    for (uint32_t k = 0; k < 3; k++)
        assert_int_equal(dsm_get_u32(pairs.buf + k * DSM_MHEAP_EVAC_PAIR + 16), 32);
    dsm_writer_free(&pairs);
    /* More survivors than a region holds: refused, nothing written. */
    ta.norder = 0;
    for (uint32_t k = 0; k < REGION / 32; k++)
        ta.order[ta.norder++] = 64;   /* the same object again and again */
    assert_int_equal(dsm_mheap_rtrace_evacuate(src, 1, &types, scratch, &pairs, &new_bp, &dangling), DSM_ERR_PROTO);
    dsm_writer_free(&pairs);
    dsm_mheap_rtrace_free(&ta);
    dsm_mheap_rtrace_free(&tb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_msg_codec),
        cmocka_unit_test(test_trace_and_compact),
        cmocka_unit_test(test_trace_stops),
        cmocka_unit_test(test_batch_codec),
        cmocka_unit_test(test_evacuate_two),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
