/* Waiting on the calling thread: a thread that waits for an operation or a
 * reply progresses the worker itself (spinning, then, past the fabric's spin
 * budget, sleeping on the worker's event fd), and while any thread waits the
 * progress thread stands down: it neither progresses (no worker-lock
 * contention with the waiter) nor arms the worker (so no reply wakes it).
 * It resumes once no thread has begun a wait for a peer's answer for about
 * DSM_WAIT_LINGER_US (judged by the progress thread, so a waiter reads no
 * clock for it). A thread that polls anyway (a delegation runtime's) can
 * stand in for the progress thread for as long as it keeps polling. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric/fabric_int.h"
#include "util/clock.h"
#include "util/test_switch.h"

/* The longest spin by transport: a round trip on shm (< 1 µs) is over long
 * before a sleep and wake-up (several µs) could pay off; over tcp a waiter
 * that spins takes the core its peer's progress thread needs on a small host.
 * The spin adapts (unless $DSM_WAIT_SPIN_US fixes it, dsm_linger_spin_us):
 * it stops while spins rarely catch their answers (an oversubscribed host
 * answers over tcp long after 20 µs), and on a crowded host it is
 * SPIN_US_CROWDED at most: a waiter spinning 1 ms on shm held a core the
 * peer it waited for needed. */
enum { SPIN_US_SHM = 1000, SPIN_US_TCP = 20, SPIN_US_OTHER = 100, SPIN_US_CROWDED = 20 };

static uint32_t env_us(const char *name, uint32_t fallback, bool *set)
{
    const char *env = getenv(name);
    if (set)
        *set = false;
    if (env && *env) {
        char *end;
        unsigned long v = strtoul(env, &end, 10);
        if (*end == '\0') {
            if (set)
                *set = true;
            return v > 10000000ul ? 10000000u : (uint32_t)v;
        }
    }
    return fallback;
}

/* A client's next request after a reply comes within a few µs from C and
 * some tens from Python; 100 µs covers both and is short enough that an
 * idle node stops polling at once. */
enum { LINGER_US = 100 };

uint32_t dsm_fabric_default_linger_us(void)
{
    return env_us("DSM_PROGRESS_LINGER_US", LINGER_US, NULL);
}

uint32_t dsm_fabric_default_spin_us(dsm_transport_t transport, bool *set)
{
    switch (transport) {
    case DSM_TRANSPORT_SHM: return env_us("DSM_WAIT_SPIN_US", SPIN_US_SHM, set);
    case DSM_TRANSPORT_TCP: return env_us("DSM_WAIT_SPIN_US", SPIN_US_TCP, set);
    default: return env_us("DSM_WAIT_SPIN_US", SPIN_US_OTHER, set);
    }
}

/* A progress over shm is a few loads, and 64 of them pass before a clock
 * read is worth its cost; over tcp each is a system call (UCX polls its
 * sockets), so 64 of them outlast the spin budget several times over. */
uint32_t dsm_fabric_spin_check(dsm_transport_t transport)
{
    return transport == DSM_TRANSPORT_SHM ? 64 : 1;
}

void dsm_fabric_fix_wait_spin(dsm_fabric_t *f, int32_t us)
{
    if (f != NULL)
        atomic_store_explicit(&f->wait_spin_fixed, us < 0 ? -1 : us, memory_order_relaxed);
}

uint32_t dsm_fabric_spin_budget_us(dsm_fabric_t *f, uint64_t now)
{
    int32_t fixed = atomic_load_explicit(&f->wait_spin_fixed, memory_order_relaxed);
    if (fixed >= 0)
        return (uint32_t)fixed;
    if (f->wait_spin_set)
        return f->wait_spin_us;
    /* each thread probes every DSM_LINGER_SPIN_PROBE-th idle period: no
     * shared counter */
    static _Thread_local unsigned probes;
    dsm_linger_t l = {.max_us = f->wait_spin_us,
                      .caught = atomic_load_explicit(&f->wait_spin_caught, memory_order_relaxed)};
    return dsm_linger_spin_us(&l, dsm_crowd_run(&f->crowd, now) > 0, SPIN_US_CROWDED,
                              ++probes % DSM_LINGER_SPIN_PROBE == 0);
}

void dsm_fabric_spin_observe(dsm_fabric_t *f, uint64_t gap_ns)
{
    uint32_t was = atomic_load_explicit(&f->wait_spin_caught, memory_order_relaxed);
    dsm_linger_t l = {.max_us = f->wait_spin_us, .caught = was};
    dsm_linger_observe(&l, gap_ns);
    /* a catch at certainty writes nothing: the waiters' common case leaves
     * the shared line alone */
    if (l.caught != was)
        atomic_store_explicit(&f->wait_spin_caught, l.caught, memory_order_relaxed);
}

void dsm_fabric_waiter_begin(dsm_fabric_t *f, dsm_waiter_t *w, uint32_t timeout_ms, dsm_wait_kind_t kind)
{
    w->f = f;
    w->spins = 0;
    w->timeout_ms = timeout_ms ? timeout_ms : f->op_timeout_ms;
    w->answer = kind == DSM_WAIT_ANSWER;
    w->spun = false;
    w->round_trip = false;
    w->idle_since = w->spin_ns = w->slept_from = w->now = w->deadline = 0;
    w->op_done = NULL;
    w->reply_done = NULL;
    atomic_fetch_add_explicit(&f->waiters, 1, memory_order_acq_rel);
    dsm_fabric_waiting++;
    if (kind == DSM_WAIT_ANSWER)
        atomic_fetch_add_explicit(&f->answer_waits, 1, memory_order_relaxed);
    DSM_COUNT(f, waits, 1);
}

/* A wait for an answer that spun tells the spin estimate whether its spin
 * caught the answer (it never slept). One that did not spin says nothing:
 * a sleeper sees its answer only after its own wake-up, which on a busy
 * host alone outlasts a spin, so its gap would keep the estimate low for
 * good; probes (dsm_linger_spin_us) spin to find out instead. */
void dsm_fabric_waiter_end(dsm_waiter_t *w)
{
    dsm_fabric_t *f = w->f;
    atomic_fetch_sub_explicit(&f->waiters, 1, memory_order_release);
    dsm_fabric_waiting--;
    if (w->round_trip && w->slept_from)
        DSM_COUNT(f, round_trips_slept, 1);
    if (w->answer && w->spun && !f->wait_spin_set && f->worker_efd >= 0 &&
        atomic_load_explicit(&f->wait_spin_fixed, memory_order_relaxed) < 0)
        dsm_fabric_spin_observe(f, w->slept_from ? UINT64_MAX : 0);
}

uint32_t dsm_fabric_waiter_left_ms(const dsm_waiter_t *w)
{
    if (w->deadline == 0)
        return w->timeout_ms;
    uint64_t now = dsm_now_ns();
    return now < w->deadline ? (uint32_t)((w->deadline - now) / 1000000u) + 1 : 1;
}

static bool waiter_done(const dsm_waiter_t *w)
{
    return w != NULL && ((w->op_done && __atomic_load_n(w->op_done, __ATOMIC_ACQUIRE)) ||
                         (w->reply_done && atomic_load_explicit(w->reply_done, memory_order_acquire)));
}

_Thread_local int dsm_fabric_waiting;

void dsm_fabric_kick_sleepers_slow(dsm_fabric_t *f)
{
    if (dsm_test_switch("wait_kick"))
        return;
    uint64_t one = 1;
    ssize_t unused = write(f->kick_fd, &one, sizeof one);
    (void)unused;
    DSM_COUNT(f, wait_kicks, 1);
}

/* Arms the worker and sleeps on its event fd (and the kick fd) until an
 * event or timeout_ns. Another thread's pass (the progress thread's, a
 * poller's, another waiter's) may take the answer w waits for between w's
 * last look and the arm: then the worker's fd stays quiet, so w counts
 * itself a sleeper (such a pass kicks the sleepers) and looks at its flag
 * once more before it sleeps. Returns the arm's status: anything but
 * UCS_OK slept not at all (UCS_ERR_BUSY: events are there or the wait is
 * over, progress again). */
static ucs_status_t sleep_on_worker(dsm_fabric_t *f, const dsm_waiter_t *w, long timeout_ns)
{
    atomic_fetch_add_explicit(&f->sleepers, 1, memory_order_seq_cst);
    ucs_status_t st = ucp_worker_arm(f->worker);
    if (st == UCS_OK && waiter_done(w))
        st = UCS_ERR_BUSY;
    if (st == UCS_OK) {
        DSM_COUNT(f, wait_sleeps, 1);
        struct pollfd p[2] = {{.fd = f->worker_efd, .events = POLLIN}, {.fd = f->kick_fd, .events = POLLIN}};
        struct timespec ts = {timeout_ns / 1000000000L, timeout_ns % 1000000000L};
        if (ppoll(p, 2, &ts, NULL) > 0 && p[1].revents) {
            uint64_t v;
            ssize_t unused = read(f->kick_fd, &v, sizeof v);
            (void)unused;
        }
    }
    atomic_fetch_sub_explicit(&f->sleepers, 1, memory_order_release);
    return st;
}

bool dsm_fabric_waiter_step(dsm_waiter_t *w)
{
    dsm_fabric_t *f = w->f;
    if (dsm_fabric_progress(f) != 0) {
        w->idle_since = 0;
        return false;
    }
    if ((++w->spins & (f->wait_spin_check - 1)) != 0)
        return false;
    /* every wait_spin_check idle spins: the caller checks its deadline and
     * peer, and a waiter idle past the spin budget sleeps until the worker
     * has events */
    uint64_t now = w->now = dsm_now_ns();
    if (w->deadline == 0)
        w->deadline = now + (uint64_t)w->timeout_ms * 1000000u;
    if (w->idle_since == 0) {
        w->idle_since = now;
        w->spin_ns = f->worker_efd >= 0 ? (uint64_t)dsm_fabric_spin_budget_us(f, now) * 1000u : 0;
        w->spun = w->spun || w->spin_ns != 0;
    } else if (f->worker_efd >= 0 && now - w->idle_since >= w->spin_ns) {
        if (w->slept_from == 0) {
            w->slept_from = w->idle_since;
            if (w->answer && w->spin_ns < (uint64_t)f->wait_spin_us * 1000u &&
                atomic_load_explicit(&f->wait_spin_fixed, memory_order_relaxed) < 0)
                DSM_COUNT(f, wait_spins_cut, 1);
        }
        /* a short sleep with several waiters: another may consume the
         * event that completes ours */
        int many = atomic_load_explicit(&f->waiters, memory_order_relaxed) > 1;
        long sleep_ns = many ? 100000 : 1000000;
        if (dsm_test_switch("wait_recheck"))   /* a missed wake-up then lasts to the deadline */
            sleep_ns = w->deadline > now ? (long)(w->deadline - now) : 0;
        (void)sleep_on_worker(f, w, sleep_ns);
    }
    return true;
}

unsigned dsm_fabric_backoff(dsm_fabric_t *f, long *pause_ns, long max_ns)
{
    unsigned n = 0;
    /* Without an event fd (busy progress) or inside a handler (no progress
     * there) the progress thread serves: a plain sleep. */
    if (f == NULL || f->worker_efd < 0 || dsm_fabric_handler_depth > 0) {
        dsm_backoff_sleep(pause_ns, max_ns);
        return 0;
    }
    /* A wait for an answer: the progress thread stands down (only this
     * thread wakes on what arrives) and lingers down after it, as the
     * poller's next pause is near. */
    dsm_waiter_t w;
    dsm_fabric_waiter_begin(f, &w, 0, DSM_WAIT_ANSWER);
    uint64_t deadline = dsm_now_ns() + (uint64_t)*pause_ns;
    for (;;) {
        for (unsigned k; (k = dsm_fabric_progress(f)) != 0;)
            n += k;
        uint64_t now = dsm_now_ns();
        if (n != 0 || now >= deadline)
            break;
        /* Busy: events came in since the progress (on shm, mostly the
         * signal of what was just progressed): progress again. A wake-up
         * that finds nothing (another thread took the event) sleeps on. */
        long left = (long)(deadline - now);
        ucs_status_t st = sleep_on_worker(f, NULL, left);
        if (st == UCS_ERR_BUSY)
            continue;
        if (st != UCS_OK) {
            struct timespec ts = {left / 1000000000L, left % 1000000000L};
            nanosleep(&ts, NULL);
            break;
        }
    }
    dsm_fabric_waiter_end(&w);
    if (n == 0 && *pause_ns < max_ns)
        *pause_ns *= 2;
    return n;
}

void dsm_fabric_poller_begin(dsm_fabric_t *f)
{
    atomic_fetch_add_explicit(&f->pollers, 1, memory_order_acq_rel);
}

void dsm_fabric_poller_end(dsm_fabric_t *f)
{
    atomic_fetch_sub_explicit(&f->pollers, 1, memory_order_release);
}

unsigned dsm_fabric_poll(dsm_fabric_t *f)
{
    atomic_fetch_add_explicit(&f->polls, 1, memory_order_relaxed);
    return dsm_fabric_progress(f);
}

bool dsm_fabric_progress_stands_down(dsm_fabric_t *f)
{
    if (atomic_load_explicit(&f->waiters, memory_order_acquire) > 0)
        return true;
    /* A poller stands in for the progress thread only while it polls: one
     * busy in a long function for a while (no poll since the last look, at
     * most ~DSM_WAIT_LINGER_US ago) leaves the worker to the progress thread,
     * or messages to this node would wait for it (and peers time out). */
    if (atomic_load_explicit(&f->pollers, memory_order_acquire) > 0) {
        uint64_t polls = atomic_load_explicit(&f->polls, memory_order_relaxed);
        if (polls != f->park_seen_polls) {
            f->park_seen_polls = polls;
            return true;
        }
    }
    /* every wait for an answer counts itself as it begins: a count that
     * moved since the last look is a wait that began (and ended) meanwhile */
    uint64_t waits = atomic_load_explicit(&f->answer_waits, memory_order_relaxed), now = dsm_now_ns();
    if (waits != f->park_seen_waits) {
        f->park_seen_waits = waits;
        f->park_seen_ns = now;
        return true;
    }
    return f->park_seen_ns != 0 && now - f->park_seen_ns < (uint64_t)DSM_WAIT_LINGER_US * 1000u;
}
