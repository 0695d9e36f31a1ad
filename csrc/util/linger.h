/* The adaptive linger: how long a thread that serves requests polls after
 * activity before it sleeps (the fabric's progress thread under
 * DSM_PROGRESS_ADAPTIVE, the delegation runtime's idle wait). A linger pays
 * when the next request comes within it (that request costs no wake-up) and
 * a core is spare; while it polls it holds a core, which on a crowded host
 * is the core the client needs to send that request. So the thread keeps a
 * decaying estimate of how often the next request came within the longest
 * linger (max_us) after activity ended, observed whether it lingered or
 * slept, and lingers max_us in full while that chance is DSM_LINGER_FLOOR
 * or more (a shorter linger misses the gaps the whole one catches), halved
 * for each crowded sample in a row past the first (crowd.h; one can be a
 * blip); short of DSM_LINGER_MIN_US, or below the floor, it sleeps at
 * once. A gap seen after a sleep holds the thread's own wake-up, which on
 * a virtual machine can alone outlast max_us, so only what such a gap
 * proves is observed (a catch, or a miss after a full linger), and a
 * thread whose budget is short of max_us lingers in full once in
 * DSM_LINGER_PROBE idle periods while the host is not crowded, so an
 * estimate gone low learns when lingers would catch again. Plain state of
 * one thread: no atomics, a few integer operations per linger. The fabric waiters'
 * spin (dsm_linger_spin_us) shares one estimate among them: fabric/wait.c
 * keeps `caught` in an atomic word and observes on a copy (a race loses an
 * observation, nothing worse). */
#ifndef DSM_UTIL_LINGER_H
#define DSM_UTIL_LINGER_H

#include <stdbool.h>
#include <stdint.h>

enum {
    DSM_LINGER_ONE = 1024,   /* the estimate's fixed point: certainty */
    DSM_LINGER_DECAY = 3,    /* each observation weighs 1/2^3 */
    /* below a quarter a linger misses more often than it saves a wake-up */
    DSM_LINGER_FLOOR = DSM_LINGER_ONE / 4,
    DSM_LINGER_MIN_US = 2,   /* shorter than a loopback message's way in: pointless */
};

typedef struct dsm_linger {
    uint32_t max_us;       /* the longest linger (the configured one) */
    uint32_t caught;       /* of DSM_LINGER_ONE: the next message came within max_us */
    uint64_t hold_ns;      /* the crowd hold's length (0: none; dsm_linger_held_budget_us) */
    uint64_t held_until;   /* clock ns before which the hold keeps lingers off */
    uint32_t idle;         /* idle periods with a short budget, for the probes */
} dsm_linger_t;

/* Starts certain: an idle host lingers max_us, as hybrid progress does. */
void dsm_linger_init(dsm_linger_t *l, uint32_t max_us);
/* What followed the end of activity: the next message came gap_ns later
 * (seen while lingering, or certain otherwise). */
void dsm_linger_observe(dsm_linger_t *l, uint64_t gap_ns);
/* The end of a sleep gap_ns after activity ended, the sleep preceded by a
 * linger of lingered_us that caught nothing: observed if it proves
 * something. A gap within max_us was caught for certain (the wake-up only
 * adds to it); one past max_us is a miss only after a full linger, since
 * otherwise the wake-up may be what put it there. */
void dsm_linger_observe_sleep(dsm_linger_t *l, uint32_t lingered_us, uint64_t gap_ns);
/* How long to linger now (µs; 0: sleep at once), given how many samples in
 * a row found the host crowded (dsm_crowd_run). */
uint32_t dsm_linger_budget_us(const dsm_linger_t *l, unsigned crowd_run);
/* dsm_linger_budget_us with the crowd hold (l->hold_ns set): a linger on a
 * crowded host takes the core the client needs for its next request, and
 * once it stops the host stops looking crowded, so lingers and wake-ups
 * take turns every sample or two. DSM_LINGER_HOLD_RUN crowded samples in a
 * row hold the lingers off for hold_ns, which each such run meanwhile
 * extends. `now` is dsm_now_ns(). Used by the delegation runtime's idle
 * wait; the fabric's progress thread, tuned without it, does not hold. */
enum { DSM_LINGER_HOLD_RUN = 2 };
uint32_t dsm_linger_held_budget_us(dsm_linger_t *l, unsigned crowd_run, uint64_t now);
/* The linger to run for a budget of budget_us: the budget, except that one
 * idle period in DSM_LINGER_PROBE with a budget short of max_us lingers
 * max_us (a probe), while no crowded sample runs and no hold is on. */
enum { DSM_LINGER_PROBE = 16 };
uint32_t dsm_linger_probe_us(dsm_linger_t *l, uint32_t budget_us, unsigned crowd_run, uint64_t now);
/* A waiter's spin before it sleeps (wait.c) keeps the same estimate, fed
 * by its spins: whether the answer came within the spin. A spin shorter
 * than the answer's way back is pure loss, so it is not scaled: the whole
 * longest spin (at most crowded_us on a crowded host, where a spinning
 * waiter holds the core its peer needs) while the estimate is at the floor
 * or above, none below it; except that a `probe` spins in full anyway, so
 * that an estimate gone low learns when spins would catch again (a waiter
 * that slept sees its answer only after its own wake-up, so sleeps tell
 * nothing). */
enum { DSM_LINGER_SPIN_PROBE = 16 };   /* one wait in this many probes */
uint32_t dsm_linger_spin_us(const dsm_linger_t *l, bool crowded, uint32_t crowded_us, bool probe);

#endif
