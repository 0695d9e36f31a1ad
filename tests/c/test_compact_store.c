/* A CoRM store without a cluster: what happens while a compaction round
 * tells peers about its remaps (frees, releases and allocations in that
 * window must not lose data to the punch of the old pages), the range as
 * one mapping until blocks are aliased, and the reuse of freed blocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compact/layout.h"
#include "compact/store.h"
#include "util/bytes.h"

enum { SLOTS = 21, BLOCKS = 12, OBJS = SLOTS * BLOCKS };

typedef struct window {
    dsm_corm_store_t *s;
    dsm_corm_ptr_t *live;
    int nlive;
    dsm_corm_ptr_t fresh[OBJS];
    int nfresh;
    uint32_t notices;
} window_t;

static void fill(uint8_t *d, uint32_t tag) { memset(d, (int)(tag % 251) + 1, 150); }

/* In the window between remap and punch of the round's first batch: free
 * everything that lives, then allocate and write new objects, which take
 * the just-retired blocks. */
static void during_notify(void *ctx, const uint8_t *pairs, uint32_t n)
{
    window_t *w = ctx;
    (void)pairs;
    w->notices += n;
    if (w->nfresh)
        return;   /* later batches of the round: done already */
    for (int i = 0; i < w->nlive; i++)
        assert_int_equal(dsm_corm_store_free(w->s, &w->live[i]), DSM_OK);
    w->nlive = 0;
    uint8_t d[150];
    for (w->nfresh = 0; w->nfresh < OBJS / 2; w->nfresh++) {
        assert_int_equal(dsm_corm_store_alloc(w->s, 150, &w->fresh[w->nfresh]), DSM_OK);
        fill(d, 1000 + (uint32_t)w->nfresh);
        assert_int_equal(dsm_corm_store_write(w->s, &w->fresh[w->nfresh], d, 150), DSM_OK);
    }
}

static void test_punch_after_window(void **state)
{
    (void)state;
    static window_t w;
    memset(&w, 0, sizeof w);
    dsm_corm_config_t cfg;
    dsm_corm_config_init(&cfg);
    cfg.range_size = 64 * 4096;
    dsm_corm_store_hooks_t hooks = {.ctx = &w, .notify = during_notify};
    assert_int_equal(dsm_corm_store_create(&cfg, 0, 5, &hooks, &w.s), DSM_OK);
    static dsm_corm_ptr_t p[OBJS];
    uint8_t d[150], back[4096];
    for (int i = 0; i < OBJS; i++) {
        assert_int_equal(dsm_corm_store_alloc(w.s, 150, &p[i]), DSM_OK);
        fill(d, (uint32_t)i);
        assert_int_equal(dsm_corm_store_write(w.s, &p[i], d, 150), DSM_OK);
    }
    static dsm_corm_ptr_t live[OBJS];
    for (int i = 0; i < OBJS; i++) {
        if ((i % SLOTS) % 4 == 0)
            live[w.nlive++] = p[i];
        else
            assert_int_equal(dsm_corm_store_free(w.s, &p[i]), DSM_OK);
    }
    w.live = live;
    dsm_corm_compact_stats_t st = {0};
    assert_int_equal(dsm_corm_store_compact(w.s, 2, &st), DSM_OK);
    assert_true(st.merges > 0);
    assert_true(w.notices >= st.merges);
    /* the objects written in the window survived the punch of the old pages */
    for (int i = 0; i < w.nfresh; i++) {
        size_t len = 0;
        assert_int_equal(dsm_corm_store_read(w.s, &w.fresh[i], back, sizeof back, &len), DSM_OK);
        fill(d, 1000 + (uint32_t)i);
        assert_int_equal(len, 150);
        assert_memory_equal(back, d, 150);
    }
    /* the blocks left empty were retired afterwards: no aliases remain */
    dsm_corm_usage_t u;
    dsm_corm_store_usage(w.s, &u);
    assert_int_equal(u.alias_blocks, 0);
    assert_int_equal(u.objects, (uint64_t)w.nfresh);
    dsm_corm_store_destroy(w.s);
}

/* Mappings of the range in /proc/self/maps. */
static int range_maps(const uint8_t *base, uint64_t size)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo < (uintptr_t)base + size && hi > (uintptr_t)base)
            n++;
    }
    fclose(f);
    return n;
}

/* One VMA for the whole range until compaction aliases a block; then a
 * bounded number more (2 per aliased block at most); back to one when the
 * aliases are released. */
static void test_one_mapping(void **state)
{
    (void)state;
    dsm_corm_config_t cfg;
    dsm_corm_config_init(&cfg);
    cfg.range_size = 64 * 4096;
    dsm_corm_store_t *s;
    assert_int_equal(dsm_corm_store_create(&cfg, 0, 5, NULL, &s), DSM_OK);
    uint8_t *base = dsm_corm_store_base(s);
    uint64_t size = dsm_corm_store_size(s);
    static dsm_corm_ptr_t p[OBJS];
    for (int i = 0; i < OBJS; i++)
        assert_int_equal(dsm_corm_store_alloc(s, 150, &p[i]), DSM_OK);
    assert_int_equal(range_maps(base, size), 1);
    for (int i = 0; i < OBJS; i++)
        if (i % 4)
            assert_int_equal(dsm_corm_store_free(s, &p[i]), DSM_OK);
    dsm_corm_compact_stats_t st = {0};
    assert_int_equal(dsm_corm_store_compact(s, 2, &st), DSM_OK);
    assert_true(st.merges > 0);
    dsm_corm_usage_t u;
    dsm_corm_store_usage(s, &u);
    int maps = range_maps(base, size);
    assert_true(maps > 1 && maps <= 1 + 2 * (int)u.alias_blocks);
    for (int i = 0; i < OBJS; i += 4)
        assert_int_equal(dsm_corm_store_release(s, &p[i]), DSM_OK);
    dsm_corm_store_usage(s, &u);
    assert_int_equal(u.alias_blocks, 0);
    /* restored identity mappings merge back with their neighbours */
    assert_int_equal(range_maps(base, size), 1);
    dsm_corm_store_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_punch_after_window),
        cmocka_unit_test(test_one_mapping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
