/* The adaptive linger's decisions (util/linger.h), fed sequences of
 * observed gaps and crowd samples: it lingers the full time while the next
 * message keeps coming within it, stops as it does not, comes back as it
 * does again, halves per crowded sample past the first, and holds off after a
 * run of them where the crowd hold is on. No clocks, no
 * threads: the decisions alone. Also the mode's name and that auto picks it
 * over tcp. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>

#include "dsm/fabric.h"
#include "util/linger.h"
#include "util/crowd.h"

enum { MAX_US = 100, SOON_NS = 5 * 1000, LATE_NS = 1000 * 1000 };

/* A linger that gaps past max_us have stopped. */
static void linger_stopped(dsm_linger_t *l)
{
    dsm_linger_init(l, MAX_US);
    for (int i = 0; i < 100; i++)
        dsm_linger_observe(l, LATE_NS);
}

static void test_starts_lingering_in_full(void **state)
{
    (void)state;
    dsm_linger_t l;
    dsm_linger_init(&l, MAX_US);
    assert_int_equal(dsm_linger_budget_us(&l, 0), MAX_US);
    /* messages that keep coming soon keep it there */
    for (int i = 0; i < 1000; i++)
        dsm_linger_observe(&l, SOON_NS);
    assert_int_equal(dsm_linger_budget_us(&l, 0), MAX_US);
    /* the edge: a gap of exactly the longest linger was caught */
    dsm_linger_observe(&l, (uint64_t)MAX_US * 1000);
    assert_int_equal(dsm_linger_budget_us(&l, 0), MAX_US);
}

/* A part of the linger mostly misses what the whole catches, so it is
 * the whole or nothing. */
static void test_misses_stop_it(void **state)
{
    (void)state;
    dsm_linger_t l;
    dsm_linger_init(&l, MAX_US);
    int misses = 0;
    while (dsm_linger_budget_us(&l, 0) > 0) {
        assert_int_equal(dsm_linger_budget_us(&l, 0), MAX_US);
        dsm_linger_observe(&l, LATE_NS);
        assert_true(++misses < 64);
    }
    /* not at the first few misses (a burst's last message always misses),
     * but within a couple of dozen */
    assert_true(misses > 4);
    assert_true(misses <= 16);
    /* stopped, it stays stopped while the gaps stay long */
    for (int i = 0; i < 100; i++)
        dsm_linger_observe(&l, LATE_NS);
    assert_int_equal(dsm_linger_budget_us(&l, 0), 0);
}

static void test_catches_bring_it_back(void **state)
{
    (void)state;
    dsm_linger_t l;
    linger_stopped(&l);
    assert_int_equal(dsm_linger_budget_us(&l, 0), 0);
    /* observed from wake-ups while it does not linger: a message soon
     * after activity ended is one a linger would have caught */
    int hits = 0;
    while (dsm_linger_budget_us(&l, 0) == 0) {
        dsm_linger_observe(&l, SOON_NS);
        assert_true(++hits < 16);
    }
    assert_true(hits >= 2);   /* one message soon is not yet a pattern */
    for (int i = 0; i < 64; i++) {
        assert_int_equal(dsm_linger_budget_us(&l, 0), MAX_US);
        dsm_linger_observe(&l, SOON_NS);
    }
}

static void test_mixed_gaps_linger_in_full_or_not(void **state)
{
    (void)state;
    dsm_linger_t l;
    dsm_linger_init(&l, MAX_US);
    /* three in four come soon: it lingers in full (a shorter linger would
     * miss those too) */
    for (int i = 0; i < 400; i++) {
        dsm_linger_observe(&l, i % 4 == 3 ? LATE_NS : SOON_NS);
        assert_int_equal(dsm_linger_budget_us(&l, 0), MAX_US);
    }
    /* one in eight: not worth a core */
    for (int i = 0; i < 400; i++)
        dsm_linger_observe(&l, i % 8 == 0 ? SOON_NS : LATE_NS);
    assert_int_equal(dsm_linger_budget_us(&l, 0), 0);
}

static void test_crowded_samples_halve_it(void **state)
{
    (void)state;
    dsm_linger_t l;
    dsm_linger_init(&l, MAX_US);
    assert_int_equal(dsm_linger_budget_us(&l, 1), MAX_US);   /* one sample: maybe a blip */
    assert_int_equal(dsm_linger_budget_us(&l, 2), MAX_US / 2);
    assert_int_equal(dsm_linger_budget_us(&l, 3), MAX_US / 4);
    /* a run of them: no linger, however well lingers caught */
    assert_int_equal(dsm_linger_budget_us(&l, DSM_CROWD_RUN_CAP), 0);
    assert_int_equal(dsm_linger_budget_us(&l, 1000), 0);
    /* a core spare again: the full linger at once */
    assert_int_equal(dsm_linger_budget_us(&l, 0), MAX_US);
    /* no linger configured, none given */
    dsm_linger_t off;
    dsm_linger_init(&off, 0);
    assert_int_equal(dsm_linger_budget_us(&off, 0), 0);
}

/* A gap seen after a sleep holds the thread's wake-up: within max_us it was
 * caught for certain; past max_us it is a miss only after a full linger. */
static void test_sleeps_observe_what_they_prove(void **state)
{
    (void)state;
    dsm_linger_t l;
    linger_stopped(&l);
    uint32_t low = l.caught;
    dsm_linger_observe_sleep(&l, 0, SOON_NS);   /* no linger, the next came soon: a catch */
    assert_true(l.caught > low);
    dsm_linger_init(&l, MAX_US);
    /* a short linger, then a gap past max_us: nothing known */
    dsm_linger_observe_sleep(&l, MAX_US / 2, LATE_NS);
    assert_int_equal(l.caught, DSM_LINGER_ONE);
    /* a full linger that caught nothing: a miss */
    dsm_linger_observe_sleep(&l, MAX_US, LATE_NS);
    assert_true(l.caught < DSM_LINGER_ONE);
}

/* Probes: a budget short of max_us lingers in full one idle period in
 * DSM_LINGER_PROBE, never while crowded or held, and a full budget is
 * left alone. */
static void test_probes(void **state)
{
    (void)state;
    dsm_linger_t l;
    dsm_linger_init(&l, MAX_US);
    int full = 0;
    for (int i = 0; i < 10 * DSM_LINGER_PROBE; i++)
        full += dsm_linger_probe_us(&l, 10, 0, 0) == MAX_US;
    assert_int_equal(full, 10);
    for (int i = 0; i < 10 * DSM_LINGER_PROBE; i++) {
        assert_int_equal(dsm_linger_probe_us(&l, 10, 1, 0), 10);             /* crowded */
        assert_int_equal(dsm_linger_probe_us(&l, MAX_US, 0, 0), MAX_US);     /* full already */
    }
    l.held_until = 1000;
    for (int i = 0; i < 10 * DSM_LINGER_PROBE; i++)
        assert_int_equal(dsm_linger_probe_us(&l, 0, 0, 999), 0);             /* held */
    dsm_linger_t off;
    dsm_linger_init(&off, 0);
    for (int i = 0; i < 2 * DSM_LINGER_PROBE; i++)
        assert_int_equal(dsm_linger_probe_us(&off, 0, 0, 0), 0);
}

/* One idle period of a thread serving a client whose next request comes
 * gap_us after activity ends, on a host whose wake-up takes wake_us: the
 * linger the thread runs (probes on or off), and what it observes. Returns
 * whether it lingered long enough to catch the request. */
static int idle_period(dsm_linger_t *l, uint32_t gap_us, uint32_t wake_us, int probes)
{
    uint32_t us = dsm_linger_budget_us(l, 0);
    if (probes)
        us = dsm_linger_probe_us(l, us, 0, 0);
    if (us >= gap_us) {
        dsm_linger_observe(l, (uint64_t)gap_us * 1000);
        return 1;
    }
    if (probes)
        dsm_linger_observe_sleep(l, us, (uint64_t)(gap_us + wake_us) * 1000);
    else
        dsm_linger_observe(l, (uint64_t)(gap_us + wake_us) * 1000);   /* the rule before probes */
    return 0;
}

/* The trap probes get it out of: requests 50 us apart, which a full linger
 * catches, on a host whose wake-up takes 80 us. Once the estimate is low
 * (a burst of long gaps), every gap seen after a sleep is past max_us; the
 * old rule counted each as a miss and never lingered again. */
static void test_probes_bring_back_a_linger_slow_wakeups_stopped(void **state)
{
    (void)state;
    for (int probes = 0; probes <= 1; probes++) {
        dsm_linger_t l;
        linger_stopped(&l);
        assert_int_equal(dsm_linger_budget_us(&l, 0), 0);
        int caught = 0;
        for (int i = 0; i < 400; i++)
            caught += idle_period(&l, 50, 80, probes);
        if (probes) {
            assert_int_equal(dsm_linger_budget_us(&l, 0), MAX_US);
            assert_true(caught > 300);
        } else {
            assert_int_equal(dsm_linger_budget_us(&l, 0), 0);
            assert_int_equal(caught, 0);
        }
    }
    /* gaps a full linger does not catch: once short, the budget learns only
     * from probes (a short linger that caught nothing proves nothing), each
     * a miss taking an eighth, so it stops within a dozen probes; then it
     * lingers on probes alone */
    dsm_linger_t l;
    dsm_linger_init(&l, MAX_US);
    int i = 0;
    for (; dsm_linger_budget_us(&l, 0) > 0; i++) {
        uint32_t us = dsm_linger_probe_us(&l, dsm_linger_budget_us(&l, 0), 0, 0);
        dsm_linger_observe_sleep(&l, us, (uint64_t)(200 + 80) * 1000);
        assert_true(i < 12 * DSM_LINGER_PROBE);
    }
    int lingers = 0;
    for (int k = 0; k < 10 * DSM_LINGER_PROBE; k++) {
        uint32_t us = dsm_linger_probe_us(&l, dsm_linger_budget_us(&l, 0), 0, 0);
        lingers += us > 0;
        dsm_linger_observe_sleep(&l, us, (uint64_t)(200 + 80) * 1000);
    }
    assert_int_equal(lingers, 10);
    assert_int_equal(dsm_linger_budget_us(&l, 0), 0);
}

/* The crowd hold: DSM_LINGER_HOLD_RUN crowded samples in a row hold the
 * lingers off for hold_ns past the last such run, whatever the samples say
 * meanwhile; fewer only halve (past the first); without hold_ns the
 * budget is the plain one. */
static void test_crowd_hold(void **state)
{
    (void)state;
    const uint64_t hold = 50000000, t0 = 1000000000;
    dsm_linger_t l;
    dsm_linger_init(&l, MAX_US);
    l.hold_ns = hold;
    assert_int_equal(dsm_linger_held_budget_us(&l, 1, t0), MAX_US);   /* one sample: no hold, a blip */
    assert_int_equal(dsm_linger_held_budget_us(&l, 0, t0), MAX_US);
    assert_int_equal(dsm_linger_held_budget_us(&l, DSM_LINGER_HOLD_RUN, t0), 0);
    /* the host looks spare again: still held */
    assert_int_equal(dsm_linger_held_budget_us(&l, 0, t0 + hold / 2), 0);
    /* a second run meanwhile extends the hold from then */
    assert_int_equal(dsm_linger_held_budget_us(&l, DSM_LINGER_HOLD_RUN, t0 + hold / 2), 0);
    assert_int_equal(dsm_linger_held_budget_us(&l, 0, t0 + hold), 0);
    assert_int_equal(dsm_linger_held_budget_us(&l, 0, t0 + hold / 2 + hold), MAX_US);
    /* no hold configured: a run halves as dsm_linger_budget_us does, then ends */
    dsm_linger_t plain;
    dsm_linger_init(&plain, MAX_US);
    assert_int_equal(dsm_linger_held_budget_us(&plain, DSM_LINGER_HOLD_RUN, t0), MAX_US >> (DSM_LINGER_HOLD_RUN - 1));
    assert_int_equal(dsm_linger_held_budget_us(&plain, 0, t0 + 1), MAX_US);
}

/* A waiter's spin (the same estimate): the whole longest spin while spins
 * catch, at most the crowded cap on a crowded host, none once they stop
 * catching but for a probe, and back in full as they catch again. */
static void test_waiter_spin(void **state)
{
    (void)state;
    enum { TCP_US = 20, SHM_US = 1000, CROWDED_US = 20 };
    dsm_linger_t tcp, shm;
    dsm_linger_init(&tcp, TCP_US);
    dsm_linger_init(&shm, SHM_US);
    assert_int_equal(dsm_linger_spin_us(&tcp, false, CROWDED_US, false), TCP_US);
    assert_int_equal(dsm_linger_spin_us(&shm, false, CROWDED_US, false), SHM_US);
    /* crowded: the cap, which tcp's spin is within already */
    assert_int_equal(dsm_linger_spin_us(&shm, true, CROWDED_US, false), CROWDED_US);
    assert_int_equal(dsm_linger_spin_us(&tcp, true, CROWDED_US, false), TCP_US);
    /* answers that come long after the longest spin (an oversubscribed
     * host over tcp): in full until the estimate is at the floor, then none */
    int misses = 0;
    while (dsm_linger_spin_us(&tcp, false, CROWDED_US, false) > 0) {
        assert_int_equal(dsm_linger_spin_us(&tcp, false, CROWDED_US, false), TCP_US);   /* never scaled */
        dsm_linger_observe(&tcp, 200 * 1000);
        assert_true(++misses < 64);
    }
    assert_true(misses > 4);
    assert_int_equal(dsm_linger_spin_us(&tcp, true, CROWDED_US, false), 0);
    /* a probe spins in full all the same */
    assert_int_equal(dsm_linger_spin_us(&tcp, false, CROWDED_US, true), TCP_US);
    assert_int_equal(dsm_linger_spin_us(&shm, true, CROWDED_US, true), CROWDED_US);
    /* answers within the longest spin again (caught by probes): back in
     * full after a few */
    int hits = 0;
    while (dsm_linger_spin_us(&tcp, false, CROWDED_US, false) == 0) {
        dsm_linger_observe(&tcp, 10 * 1000);
        assert_true(++hits < 16);
    }
    assert_int_equal(dsm_linger_spin_us(&tcp, false, CROWDED_US, false), TCP_US);
}

static void test_mode_named_and_default_over_tcp(void **state)
{
    (void)state;
    dsm_progress_mode_t m;
    assert_int_equal(dsm_progress_parse("adaptive", &m), DSM_OK);
    assert_int_equal(m, DSM_PROGRESS_ADAPTIVE);
    assert_string_equal(dsm_progress_name(DSM_PROGRESS_ADAPTIVE), "adaptive");
    assert_int_equal(dsm_progress_parse("hybrid", &m), DSM_OK);
    assert_int_equal(m, DSM_PROGRESS_HYBRID);
    assert_int_equal(dsm_progress_parse("adaptiv", &m), DSM_ERR_INVALID);
    assert_int_equal(dsm_progress_resolve(DSM_PROGRESS_AUTO, DSM_TRANSPORT_TCP), DSM_PROGRESS_ADAPTIVE);
    assert_int_equal(dsm_progress_resolve(DSM_PROGRESS_AUTO, DSM_TRANSPORT_SHM), DSM_PROGRESS_BLOCKING);
    assert_int_equal(dsm_progress_resolve(DSM_PROGRESS_HYBRID, DSM_TRANSPORT_TCP), DSM_PROGRESS_HYBRID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_starts_lingering_in_full),
        cmocka_unit_test(test_misses_stop_it),
        cmocka_unit_test(test_catches_bring_it_back),
        cmocka_unit_test(test_mixed_gaps_linger_in_full_or_not),
        cmocka_unit_test(test_crowded_samples_halve_it),
        cmocka_unit_test(test_crowd_hold),
        cmocka_unit_test(test_sleeps_observe_what_they_prove),
        cmocka_unit_test(test_probes),
        cmocka_unit_test(test_probes_bring_back_a_linger_slow_wakeups_stopped),
        cmocka_unit_test(test_waiter_spin),
        cmocka_unit_test(test_mode_named_and_default_over_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
