/* A fabric instance: the UCX context and worker, transport selection, the
 * progress thread, peers (endpoints, liveness, failure), completion of
 * operation handles (wait/test) and the counters. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "fabric/am_wire.h"
#include "fabric/chaos.h"
#include "fabric/fabric_int.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/malloc_tune.h"
#include "util/relax.h"
#include "util/thread.h"
#include "util/zalloc.h"

enum { DEFAULT_OP_TIMEOUT_MS = 5000, PROGRESS_SLEEP_MS = 100 };

/* ---------------------------------------------------------------- helpers */

dsm_status_t dsm_fabric_status_from_ucs(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return DSM_OK;
    case UCS_ERR_NO_MEMORY:
        return DSM_ERR_NOMEM;
    case UCS_ERR_INVALID_PARAM:
        return DSM_ERR_INVALID;
    case UCS_ERR_TIMED_OUT:
        return DSM_ERR_TIMEOUT;
    case UCS_ERR_UNSUPPORTED:
        return DSM_ERR_UNSUPPORTED;
    case UCS_ERR_CANCELED:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR:
        return DSM_ERR_PEER_DEAD;
    default:
        return DSM_ERR_FABRIC;
    }
}

dsm_status_t dsm_transport_parse(const char *name, dsm_transport_t *out)
{
    static const struct { const char *name; dsm_transport_t t; } names[] = {
        {"auto", DSM_TRANSPORT_AUTO}, {"shm", DSM_TRANSPORT_SHM},
        {"tcp", DSM_TRANSPORT_TCP}, {"verbs", DSM_TRANSPORT_VERBS},
    };
    if (name == NULL || out == NULL)
        return DSM_ERR_INVALID;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].t;
            return DSM_OK;
        }
    }
    return DSM_ERR_INVALID;
}

static const char *const progress_names[] = {"blocking", "busy", "hybrid", "auto", "adaptive"};

dsm_status_t dsm_progress_parse(const char *name, dsm_progress_mode_t *out)
{
    if (name == NULL || out == NULL)
        return DSM_ERR_INVALID;
    for (int m = DSM_PROGRESS_BLOCKING; m <= DSM_PROGRESS_ADAPTIVE; m++) {
        if (strcmp(name, progress_names[m]) == 0) {
            *out = (dsm_progress_mode_t)m;
            return DSM_OK;
        }
    }
    return DSM_ERR_INVALID;
}

const char *dsm_progress_name(dsm_progress_mode_t mode)
{
    return mode >= DSM_PROGRESS_BLOCKING && mode <= DSM_PROGRESS_ADAPTIVE ? progress_names[mode] : "unknown";
}

/* Over tcp every one-sided op is a message the target's CPU answers, and a
 * blocking target pays a wake-up for each (the driver's fetch_add: 3.3x the
 * tag round trip blocking, 1.2x hybrid); the adaptive linger keeps that gain
 * and gives it up where lingering loses (a crowded host, a slow client).
 * shm and verbs ops need no target CPU, and a thread that lingers there
 * would only take cores. */
dsm_progress_mode_t dsm_progress_resolve(dsm_progress_mode_t mode, dsm_transport_t transport)
{
    if (mode != DSM_PROGRESS_AUTO)
        return mode;
    return transport == DSM_TRANSPORT_TCP ? DSM_PROGRESS_ADAPTIVE : DSM_PROGRESS_BLOCKING;
}

const char *dsm_transport_name(dsm_transport_t transport)
{
    switch (transport) {
    case DSM_TRANSPORT_AUTO: return "auto";
    case DSM_TRANSPORT_SHM: return "shm";
    case DSM_TRANSPORT_TCP: return "tcp";
    case DSM_TRANSPORT_VERBS: return "verbs";
    }
    return "unknown";
}

/* ------------------------------------------------------- operation handles */

void dsm_fabric_op_init(dsm_op_t *op, dsm_fabric_t *f, uint32_t rank)
{
    op->done = 0;
    op->status = DSM_OK;
    op->rank = rank;
    op->request = NULL;
    op->fabric = f;
}

void dsm_fabric_op_finish(dsm_op_t *op, dsm_status_t status)
{
    op->status = status;
    if (status != DSM_OK)
        DSM_COUNT(op->fabric, errors, 1);
    __atomic_store_n(&op->done, 1, __ATOMIC_RELEASE);
}

/* Whether the peer an op addresses has been declared failed. */
static bool op_peer_dead(const dsm_op_t *op)
{
    return op->rank < DSM_FABRIC_MAX_PEERS &&
           atomic_load_explicit(&op->fabric->peers[op->rank].state, memory_order_acquire) == DSM_PEER_DEAD;
}

static dsm_status_t op_status(dsm_op_t *op, ucs_status_t status)
{
    if (status == UCS_OK)
        return DSM_OK;
    if (op_peer_dead(op))
        return DSM_ERR_PEER_DEAD;
    return dsm_fabric_status_from_ucs(status);
}

/* UCX completion callback of every operation. It only records the result:
 * the request is released by whoever observes completion (wait/test), so a
 * waiter can still abandon a request that UCX cannot cancel (see below). */
void dsm_fabric_op_complete_cb(void *request, ucs_status_t status, void *user_data)
{
    (void)request;
    dsm_op_t *op = user_data;
    dsm_fabric_op_finish(op, op_status(op, status));
}

dsm_status_t dsm_fabric_op_submitted(dsm_op_t *op, ucs_status_ptr_t sp)
{
    if (sp == NULL) {
        dsm_fabric_op_finish(op, DSM_OK);
        return DSM_OK;
    }
    if (UCS_PTR_IS_ERR(sp)) {
        dsm_status_t st = op_status(op, UCS_PTR_STATUS(sp));
        dsm_fabric_op_finish(op, st);
        return st;
    }
    op->request = sp;   /* in flight: completes through dsm_fabric_op_complete_cb */
    return DSM_OK;
}

/* Releases the UCX request (or emulation record) of a completed op. */
static inline void op_release(dsm_op_t *op)
{
    if (op->request && dsm_fabric_op_is_emulated(op)) {
        dsm_fabric_emu_release(op);
    } else if (op->request) {
        ucp_request_free(op->request);
        op->request = NULL;
    }
}

/* Gives up on an op: ucp_request_free takes the worker lock that callbacks
 * run under, so once it returns the callback either ran or never will and the
 * op is the caller's again. */
static dsm_status_t op_abandon(dsm_op_t *op, dsm_status_t why)
{
    if (op->request && dsm_fabric_op_is_emulated(op))
        return dsm_fabric_emu_abandon(op, why);
    void *req = op->request;
    op->request = NULL;
    if (req)
        ucp_request_free(req);
    if (__atomic_load_n(&op->done, __ATOMIC_ACQUIRE))
        return op->status;
    dsm_fabric_op_finish(op, why);
    return why;
}

/* Op still incomplete after waited_ms: abandoned, and its peer declared
 * failed, as an RDMA RC queue pair that exhausts its retries is. */
static dsm_status_t op_expire(dsm_op_t *op, uint32_t waited_ms, dsm_wait_kind_t kind)
{
    dsm_fabric_t *f = op->fabric;
    bool has_peer = op->rank < DSM_FABRIC_MAX_PEERS;
    if (has_peer && kind == DSM_WAIT_ANSWER)
        dsm_fabric_describe_timeout(f, op->rank,
                                    dsm_fabric_op_is_emulated(op) ? "an emulated one-sided operation"
                                                                  : "an operation",
                                    waited_ms);
    /* abandon first: failing the peer completes an emulated op with
     * DSM_ERR_PEER_DEAD, but this one timed out */
    dsm_status_t st = op_abandon(op, DSM_ERR_TIMEOUT);
    if (has_peer)
        dsm_fabric_mark_dead(f, op->rank, "operation timed out");
    return st;
}

/* Waits on the calling thread, progressing the worker so that latency does
 * not depend on the progress thread waking up.
 *
 * A dead peer, or an op still incomplete after the timeout (which declares
 * the peer failed, like an RDMA RC queue pair that exhausts its retries),
 * ends the wait: the request is released and abandoned. UCX 1.13 cannot
 * cancel it safely: a forced endpoint close, or UCX's own failure handling,
 * asserts on pending requests of its new protocols (UCX_PROTO_ENABLE=y),
 * which have no abort. So a peer that was only slow may still complete an
 * abandoned get into its destination buffer later; a dead one will not. */
static dsm_status_t wait_op(dsm_op_t *op, uint32_t timeout_ms, dsm_wait_kind_t kind, bool round_trip)
{
    if (__atomic_load_n(&op->done, __ATOMIC_ACQUIRE)) {
        op_release(op);
        return op->status;
    }
    dsm_fabric_t *f = op->fabric;
    uint64_t t0 = round_trip ? dsm_fabric_wait_clock(f) : 0;
    dsm_waiter_t w;
    dsm_fabric_waiter_begin(f, &w, timeout_ms, kind);
    dsm_fabric_waiter_watch_op(&w, op);
    if (round_trip)
        dsm_fabric_waiter_round_trip(&w);
    while (!__atomic_load_n(&op->done, __ATOMIC_ACQUIRE)) {
        if (!dsm_fabric_waiter_step(&w))
            continue;
        if (op_peer_dead(op)) {
            dsm_fabric_waiter_end(&w);
            return op_abandon(op, DSM_ERR_PEER_DEAD);
        }
        if (dsm_fabric_waiter_expired(&w)) {
            dsm_fabric_waiter_end(&w);
            return op_expire(op, w.timeout_ms, kind);
        }
    }
    dsm_fabric_waiter_end(&w);
    DSM_COUNT_WAIT_TIME(f, t0);
    op_release(op);
    return op->status;
}

dsm_status_t dsm_fabric_wait_op(dsm_op_t *op, uint32_t timeout_ms)
{
    return wait_op(op, timeout_ms, DSM_WAIT_ANSWER, true);
}

dsm_status_t dsm_fabric_wait_request_sent(dsm_op_t *op, uint32_t timeout_ms)
{
    return wait_op(op, timeout_ms, DSM_WAIT_ANSWER, false);
}

dsm_status_t dsm_fabric_wait_sent(dsm_op_t *op)
{
    return wait_op(op, 0, DSM_WAIT_SEND, false);
}

dsm_status_t dsm_fabric_wait(dsm_op_t *op)
{
    if (op == NULL)
        return DSM_ERR_INVALID;
    if (op->fabric == NULL)   /* failed before submission */
        return op->done ? op->status : DSM_ERR_INVALID;
    if (!__atomic_load_n(&op->done, __ATOMIC_ACQUIRE) && dsm_fabric_handler_depth > 0)
        return DSM_ERR_STATE;   /* cannot progress from inside a handler; op still in flight */
    return dsm_fabric_wait_op(op, 0);
}

dsm_status_t dsm_fabric_wait_for(dsm_op_t *op, uint32_t timeout_ms)
{
    if (op == NULL)
        return DSM_ERR_INVALID;
    if (op->fabric == NULL)
        return op->done ? op->status : DSM_ERR_INVALID;
    if (!__atomic_load_n(&op->done, __ATOMIC_ACQUIRE) && dsm_fabric_handler_depth > 0)
        return DSM_ERR_STATE;
    return dsm_fabric_wait_op(op, timeout_ms);
}

int dsm_fabric_test(dsm_op_t *op)
{
    if (op == NULL)
        return 1;
    if (!__atomic_load_n(&op->done, __ATOMIC_ACQUIRE) && op->fabric)
        dsm_fabric_progress(op->fabric);
    if (!__atomic_load_n(&op->done, __ATOMIC_ACQUIRE))
        return 0;
    op_release(op);
    return 1;
}

int dsm_fabric_test_for(dsm_op_t *op, uint64_t since_ns, uint32_t timeout_ms)
{
    if (dsm_fabric_test(op))
        return 1;
    dsm_fabric_t *f = op->fabric;
    if (f == NULL)
        return 0;
    if (op_peer_dead(op)) {
        (void)op_abandon(op, DSM_ERR_PEER_DEAD);
        return 1;
    }
    uint32_t limit_ms = timeout_ms ? timeout_ms : f->op_timeout_ms;
    if (dsm_now_ns() - since_ns < (uint64_t)limit_ms * 1000000u)
        return 0;
    (void)op_expire(op, limit_ms, DSM_WAIT_ANSWER);
    return 1;
}

/* ---------------------------------------------------------------- progress */

static void wake_progress(dsm_fabric_t *f)
{
    if (f->wake_fd >= 0) {
        uint64_t one = 1;
        ssize_t unused = write(f->wake_fd, &one, sizeof one);
        (void)unused;
    }
}

/* In the linger after the waits (no thread waits or polls now), how long
 * since the last wait was seen begin the parked thread keeps its hands off
 * the worker: a client's next request comes within it, and its reply then
 * wakes only its waiter. */
enum { PARK_HANDS_OFF_US = 200 };

/* Whether no thread attends the worker now (no waiter, no poller) and none
 * was seen begin a wait for PARK_HANDS_OFF_US; else *slice_ns is cut to
 * when that may next be so (a waiter's wait ends any time: look again then).
 * With pollers the slice stays a linger long: whether they still poll is
 * judged once a slice (a shorter one took a poller busy for a moment for one
 * that stopped, and woke the progress thread 3.7 times a request, ASan). */
static bool worker_unattended(dsm_fabric_t *f, long *slice_ns)
{
    uint64_t wait_ns = (uint64_t)PARK_HANDS_OFF_US * 1000u;   /* until it may be unattended */
    if (f->worker_efd < 0 || atomic_load_explicit(&f->pollers, memory_order_acquire) > 0)
        return false;
    if (atomic_load_explicit(&f->waiters, memory_order_acquire) == 0) {
        uint64_t since = dsm_now_ns() - f->park_seen_ns;
        if (since >= wait_ns)
            return true;
        wait_ns -= since;
    }
    if ((long)wait_ns < *slice_ns)
        *slice_ns = (long)wait_ns;
    return false;
}

/* Stands down while threads wait on their own (wait.c): sleeps on the stop
 * fd alone, unarmed, so that replies to the waiters wake nobody. In the
 * linger after the waits, once nobody has begun one for a moment, it also
 * watches the worker and goes back to serving when something arrives:
 * otherwise a thread that waits, sleeps less than the linger, and waits again
 * (a poll with backoff: a rendezvous, a channel receive) kept it down for
 * good, and its peers' requests waited for that thread's next wait. Returns true to
 * loop again (stop, or still down), false to serve; *parked says whether it
 * stood down at all. */
static bool park_blocking(dsm_fabric_t *f, bool *parked, bool *woke)
{
    if (!dsm_fabric_progress_stands_down(f))
        return false;
    *parked = true;
    DSM_COUNT(f, progress_parks, 1);
    atomic_store_explicit(&f->progress_parked, 1, memory_order_release);
    bool again = true;
    do {
        struct pollfd p[2] = {{.fd = f->wake_fd, .events = POLLIN}, {.fd = f->worker_efd, .events = POLLIN}};
        nfds_t n = 1;
        long slice_ns = (long)DSM_WAIT_LINGER_US * 1000;
        if (worker_unattended(f, &slice_ns)) {
            ucs_status_t st = ucp_worker_arm(f->worker);
            if (st == UCS_ERR_BUSY) {
                again = false;   /* events are there: serve them */
                break;
            }
            n = st == UCS_OK ? 2 : 1;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = slice_ns};
        if (ppoll(p, n, &ts, NULL) > 0) {
            if (p[0].revents)
                break;   /* stop */
            *woke = true;
            again = false;
            break;
        }
    } while (dsm_fabric_progress_stands_down(f));
    atomic_store_explicit(&f->progress_parked, 0, memory_order_release);
    return again;
}

/* Hybrid progress: after activity, keep polling a moment before arming, so
 * a request that follows its predecessor's reply within the linger (a
 * client's next operation) costs no wake-up.
 * Polling pays only while there is a core to spare: with more runnable
 * threads than cores it takes the core the client needs for its next
 * request. So the thread looks at how many threads the host runs (the
 * shared sample, at most every 2 ms), and does not linger while they
 * outnumber the cores in LINGER_OVERSUBSCRIBED_SAMPLES samples in a row
 * (each linger so skipped counted: each may cost a wake-up). One sample is not enough:
 * it can catch a thread that is only waking up (a client's own progress
 * thread standing down for its first waiter, a heartbeat), and a back-off
 * on such a blip costs every request a wake-up until the next check.
 * Adaptive progress asks its linger (linger.h) instead, which halves per
 * crowded sample past the first rather than stopping at the third, and
 * stops while lingers stop catching. */
enum { LINGER_OVERSUBSCRIBED_SAMPLES = 3 };
static uint32_t linger_budget_us(dsm_fabric_t *f, uint64_t now)
{
    unsigned run = dsm_crowd_run(&f->crowd, now);
    if (f->progress_mode != DSM_PROGRESS_ADAPTIVE)
        return run >= LINGER_OVERSUBSCRIBED_SAMPLES ? 0 : f->progress_linger_us;
    uint32_t us = dsm_linger_budget_us(&f->linger, run);
    if (us > 0 && run > 0 && us < dsm_linger_budget_us(&f->linger, 0))
        DSM_COUNT(f, linger_crowded, 1);
    return dsm_linger_probe_us(&f->linger, us, run, now);
}

/* Returns true if something arrived within the linger; *idle_since is when
 * activity ended if nothing did (what comes next is observed against it)
 * and *lingered_us how long it lingered. */
static bool linger_after_activity(dsm_fabric_t *f, uint64_t *idle_since, uint32_t *lingered_us)
{
    *lingered_us = 0;
    if (f->progress_linger_us == 0)
        return false;
    uint64_t now = dsm_now_ns();
    *idle_since = now;
    uint32_t us = linger_budget_us(f, now);
    *lingered_us = us;
    if (us == 0) {
        DSM_COUNT(f, linger_backoffs, 1);
        return false;
    }
    uint64_t until = now + (uint64_t)us * 1000u;
    unsigned rounds = 0;
    while (!atomic_load_explicit(&f->stop, memory_order_relaxed)) {
        if (dsm_fabric_progress(f) != 0) {
            dsm_linger_observe(&f->linger, dsm_now_ns() - now);
            *idle_since = 0;
            return true;
        }
        if ((++rounds & 15) == 0) {
            if (dsm_fabric_progress_stands_down(f)) {
                *idle_since = 0;   /* a waiter serves now: no gap to observe */
                return false;
            }
            if (dsm_now_ns() >= until)
                return false;
        }
        dsm_cpu_relax();
    }
    return false;
}

/* A wake-up by the worker's event fd after which progress finds nothing
 * is empty. Over tcp UCX 1.13 leaves a socket's writability watched after
 * its connection completes, until the peer acknowledges it (its tx progress
 * does nothing meanwhile, and tcp's arm is a no-op): the fd stays ready, and
 * every armed sleep returned at once, a core's worth of wake-ups for as long
 * as the peer took (thousands per node as a 2-node cluster came up on a
 * loaded host). So after an empty wake-up over tcp the thread pauses with
 * the worker's fd left out, EMPTY_PAUSE_MIN_US doubling per empty wake-up
 * in a row up to EMPTY_PAUSE_MAX_US, then progresses and sleeps as before:
 * what arrives in a pause waits for its end. Over shm an empty wake-up is
 * mostly the signal of a message a waiter took first: no pause there. */
enum { EMPTY_PAUSE_MIN_US = 20, EMPTY_PAUSE_MAX_US = 1000 };

static void pause_empty(dsm_fabric_t *f, long pause_ns)
{
    struct pollfd p = {.fd = f->wake_fd, .events = POLLIN};   /* stop only */
    struct timespec ts = {.tv_sec = 0, .tv_nsec = pause_ns};
    ppoll(&p, 1, &ts, NULL);
}

static void *progress_blocking(dsm_fabric_t *f)
{
    struct epoll_event events[2];
    /* a linger that ended on activity starts another after it is served
     * (else the completion of the reply just sent ends the linger, the next
     * pass finds nothing, and every other request wakes the thread) */
    bool active = false;
    /* when activity last ended, until what came next is observed (the
     * adaptive linger learns from sleeps as from lingers); 0: nothing to
     * observe; and how long the linger before that sleep was */
    uint64_t idle_since = 0;
    uint32_t lingered_us = 0;
    bool woke = false;   /* the last sleep ended on the worker's fd */
    long pause_ns = 0;   /* the last pause after an empty wake-up, 0 after one that found work */
    while (!atomic_load_explicit(&f->stop, memory_order_acquire)) {
        bool parked = false, down = park_blocking(f, &parked, &woke);
        if (parked)
            idle_since = 0;   /* waiters served meanwhile: no gap of ours to observe */
        if (down)
            continue;
        bool found = false;
        while (dsm_fabric_progress(f) != 0)
            found = true;
        if (woke) {
            woke = false;
            /* tcp only: over shm a wake-up is often the signal of a message
             * a waiter has already taken, and a pause there held up the
             * next one (below) */
            if (found)
                DSM_COUNT(f, progress_wakeups, 1);
            else
                DSM_COUNT(f, progress_empty_wakeups, 1);
            if (!found && f->transport == DSM_TRANSPORT_TCP) {
                pause_ns = pause_ns == 0 ? EMPTY_PAUSE_MIN_US * 1000L
                                         : pause_ns < EMPTY_PAUSE_MAX_US * 1000L / 2 ? pause_ns * 2
                                                                                     : EMPTY_PAUSE_MAX_US * 1000L;
                pause_empty(f, pause_ns);
                continue;
            }
            pause_ns = 0;
        }
        active = active || found;
        if (active && idle_since != 0) {
            dsm_linger_observe_sleep(&f->linger, lingered_us, dsm_now_ns() - idle_since);
            idle_since = 0;
        }
        if (active && (active = linger_after_activity(f, &idle_since, &lingered_us)))
            continue;
        ucs_status_t st = ucp_worker_arm(f->worker);
        if (st == UCS_ERR_BUSY)
            continue;   /* events arrived meanwhile: progress again */
        if (st != UCS_OK) {
            DSM_ERROR(DSM_FABRIC_LOG, "ucp_worker_arm: %s", ucs_status_string(st));
            poll(NULL, 0, 1);
            continue;
        }
        int n = epoll_wait(f->epoll_fd, events, 2, PROGRESS_SLEEP_MS);
        for (int i = 0; i < n; i++) {
            if (events[i].data.fd == f->wake_fd) {
                uint64_t v;
                ssize_t unused = read(f->wake_fd, &v, sizeof v);
                (void)unused;
            } else {
                woke = true;
            }
        }
    }
    return NULL;
}

/* Busy progress stands down too while a thread waits (no worker-lock
 * contention), resuming as soon as the last waiter leaves. */
static void *progress_busy(dsm_fabric_t *f)
{
    while (!atomic_load_explicit(&f->stop, memory_order_relaxed)) {
        if (atomic_load_explicit(&f->waiters, memory_order_relaxed) > 0) {
            DSM_COUNT(f, progress_parks, 1);
            while (atomic_load_explicit(&f->waiters, memory_order_acquire) > 0 &&
                   !atomic_load_explicit(&f->stop, memory_order_relaxed))
                dsm_cpu_relax();
            continue;
        }
        dsm_fabric_progress(f);
    }
    return NULL;
}

static void *progress_main(void *arg)
{
    dsm_fabric_t *f = arg;
    dsm_thread_name("dsm-progress", -1);
    atomic_store(&f->thread_tid, (int)gettid());
    return f->progress_mode == DSM_PROGRESS_BUSY ? progress_busy(f) : progress_blocking(f);
}

/* ------------------------------------------------------------ create/destroy */

static dsm_status_t configure_transport(ucp_config_t *config, const dsm_fabric_config_t *cfg)
{
    const char *tls = NULL;
    switch (cfg->transport) {
    case DSM_TRANSPORT_AUTO: break;
    case DSM_TRANSPORT_SHM: tls = "posix,sysv,self"; break;
    /* No "self" on tcp: UCX 1.13's new protocols do a node's atomics on its
     * own memory through self while peers' atomics are emulated at the target,
     * and the two interleave wrongly (increments were lost under load). Over
     * tcp loopback every atomic takes the same emulated path. */
    case DSM_TRANSPORT_TCP: tls = "tcp"; break;
    case DSM_TRANSPORT_VERBS: tls = "rc,ud,dc,self"; break;
    default: return DSM_ERR_INVALID;
    }
    if (tls) {
        ucs_status_t st = ucp_config_modify(config, "TLS", tls);
        if (st != UCS_OK) {
            DSM_ERROR(DSM_FABRIC_LOG, "UCX TLS=%s: %s", tls, ucs_status_string(st));
            return DSM_ERR_FABRIC;
        }
    }
    /* The worker is multi-threaded, and UCX's default lock for it spins: a
     * thread that finds it taken by a sender preempted inside sendmsg (this
     * process's progress thread, woken on the sender's core) spun out its
     * whole time slice while the sender could not run. Waiting on a mutex
     * sleeps instead; uncontended it costs what the spin lock does.
     * $UCX_USE_MT_MUTEX still decides. */
    if (getenv("UCX_USE_MT_MUTEX") == NULL) {
        ucs_status_t st = ucp_config_modify(config, "USE_MT_MUTEX", "y");
        if (st != UCS_OK) {
            DSM_ERROR(DSM_FABRIC_LOG, "UCX USE_MT_MUTEX=y: %s", ucs_status_string(st));
            return DSM_ERR_FABRIC;
        }
    }
    if (cfg->net_device && cfg->net_device[0] &&
        (cfg->transport == DSM_TRANSPORT_TCP || cfg->transport == DSM_TRANSPORT_VERBS ||
         cfg->transport == DSM_TRANSPORT_AUTO)) {
        ucs_status_t st = ucp_config_modify(config, "NET_DEVICES", cfg->net_device);
        if (st != UCS_OK) {
            DSM_ERROR(DSM_FABRIC_LOG, "UCX NET_DEVICES=%s: %s", cfg->net_device, ucs_status_string(st));
            return DSM_ERR_FABRIC;
        }
    }
    return DSM_OK;
}

/* Names the tcp settings dsm_fabric_ucx_env_defaults put in the
 * environment, so that a fabric without tcp (in this process or one
 * started from it) takes them out again: UCX warns of every UCX_ variable
 * no transport it opens reads. */
#define TCP_DEFAULTS_MARK "DSM_UCX_TCP_DEFAULTS"

void dsm_fabric_ucx_env_defaults(dsm_transport_t transport)
{
    /* UCX 1.13's older protocols make get and atomics over tcp ~10x slower. */
    setenv("UCX_PROTO_ENABLE", "y", 0);
    /* tcp carries a message in segments of this size. At UCX's 8 KiB the
     * new protocols split a 64 KiB active message into eight and took 7x
     * as long over loopback as at 256 KiB; small messages are the same.
     * In the environment: ucp_config_modify does not reach tcp's own
     * settings. */
    static const char *const seg[] = {"UCX_TCP_TX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE"};
    const char *mark = getenv(TCP_DEFAULTS_MARK);
    unsigned ours = mark ? (unsigned)atoi(mark) & 3u : 0;
    bool tcp = transport == DSM_TRANSPORT_TCP || transport == DSM_TRANSPORT_AUTO;
    for (unsigned i = 0; i < 2; i++) {
        if (tcp && getenv(seg[i]) == NULL && setenv(seg[i], "256k", 0) == 0)
            ours |= 1u << i;
        else if (!tcp && (ours & (1u << i)) && unsetenv(seg[i]) == 0)
            ours &= ~(1u << i);
    }
    char v[4];
    snprintf(v, sizeof v, "%u", ours);
    if (ours)
        setenv(TCP_DEFAULTS_MARK, v, 1);
    else
        unsetenv(TCP_DEFAULTS_MARK);
}

static dsm_status_t create_context(dsm_fabric_t *f, const dsm_fabric_config_t *cfg)
{
    dsm_fabric_ucx_env_defaults(cfg->transport);
    dsm_malloc_keep_large_blocks();
    dsm_fabric_route_ucx_log();

    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "ucp_config_read: %s", ucs_status_string(st));
        return DSM_ERR_FABRIC;
    }
    dsm_status_t ds = configure_transport(config, cfg);
    if (ds != DSM_OK) {
        ucp_config_release(config);
        return ds;
    }
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 0,
    };
    st = ucp_init(&params, config, &f->context);
    ucp_config_release(config);
    if (st != UCS_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "ucp_init (transport %s): %s", dsm_transport_name(cfg->transport),
                  ucs_status_string(st));
        return DSM_ERR_FABRIC;
    }

    ucp_worker_params_t wparams = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_MULTI,
    };
    st = ucp_worker_create(f->context, &wparams, &f->worker);
    if (st != UCS_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "ucp_worker_create: %s", ucs_status_string(st));
        return DSM_ERR_FABRIC;
    }
    ucp_worker_attr_t attr = {.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE};
    if (ucp_worker_query(f->worker, &attr) == UCS_OK && attr.thread_mode != UCS_THREAD_MODE_MULTI) {
        DSM_ERROR(DSM_FABRIC_LOG, "UCX was built without multi-thread support");
        return DSM_ERR_UNSUPPORTED;
    }
    st = ucp_worker_get_address(f->worker, &f->address, &f->address_len);
    if (st != UCS_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "ucp_worker_get_address: %s", ucs_status_string(st));
        return DSM_ERR_FABRIC;
    }
    f->wire_address_len = DSM_FABRIC_ADDR_PREFIX + f->address_len;
    if ((f->wire_address = malloc(f->wire_address_len)) == NULL)
        return DSM_ERR_NOMEM;
    dsm_fabric_addr_prefix(f->wire_address);
    memcpy(f->wire_address + DSM_FABRIC_ADDR_PREFIX, f->address, f->address_len);
    return DSM_OK;
}

static dsm_status_t start_progress(dsm_fabric_t *f)
{
    f->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    f->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (f->wake_fd < 0 || f->kick_fd < 0)
        return DSM_ERR_IO;
    if (f->progress_mode != DSM_PROGRESS_BUSY) {
        ucs_status_t st = ucp_worker_get_efd(f->worker, &f->worker_efd);
        if (st != UCS_OK) {
            DSM_ERROR(DSM_FABRIC_LOG, "ucp_worker_get_efd: %s", ucs_status_string(st));
            return DSM_ERR_FABRIC;
        }
        f->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (f->epoll_fd < 0)
            return DSM_ERR_IO;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = f->worker_efd};
        struct epoll_event wev = {.events = EPOLLIN, .data.fd = f->wake_fd};
        if (epoll_ctl(f->epoll_fd, EPOLL_CTL_ADD, f->worker_efd, &ev) != 0 ||
            epoll_ctl(f->epoll_fd, EPOLL_CTL_ADD, f->wake_fd, &wev) != 0)
            return DSM_ERR_IO;
    }
    int rc = dsm_thread_start(&f->thread, NULL, progress_main, f);
    if (rc != 0) {
        DSM_ERROR(DSM_FABRIC_LOG, "pthread_create: %s", strerror(rc));
        return DSM_ERR_IO;
    }
    f->thread_started = true;
    return DSM_OK;
}

dsm_status_t dsm_fabric_create(const dsm_fabric_config_t *config, dsm_fabric_t **out)
{
    if (config == NULL || out == NULL)
        return DSM_ERR_INVALID;
    *out = NULL;
    if (config->progress != DSM_PROGRESS_BLOCKING && config->progress != DSM_PROGRESS_BUSY &&
        config->progress != DSM_PROGRESS_HYBRID && config->progress != DSM_PROGRESS_AUTO &&
        config->progress != DSM_PROGRESS_ADAPTIVE)
        return DSM_ERR_INVALID;

    dsm_fabric_t *f = dsm_zalloc_lines(sizeof *f);
    if (f == NULL)
        return DSM_ERR_NOMEM;
    f->transport = config->transport;
    /* tcp has no RDMA: UCX would emulate one-sided ops in software anyway
     * (see rma_emu.c for why we do it ourselves). auto keeps UCX's paths:
     * the emulation's target must be able to answer a peer it has not
     * connected to, which needs UCP_AM_SEND_FLAG_REPLY, and UCX 1.13 smashes
     * its stack on that flag over its shm transports (seen in test_busy_auto);
     * and auto may pick RDMA. Choose tcp explicitly for the emulation. */
    f->emulate_rma = config->transport == DSM_TRANSPORT_TCP;
    f->progress_mode = dsm_progress_resolve(config->progress, config->transport);
    f->op_timeout_ms = config->op_timeout_ms ? config->op_timeout_ms : DEFAULT_OP_TIMEOUT_MS;
    f->wait_spin_us = dsm_fabric_default_spin_us(config->transport, &f->wait_spin_set);
    f->wait_spin_check = dsm_fabric_spin_check(config->transport);
    atomic_init(&f->wait_spin_caught, DSM_LINGER_ONE);
    atomic_init(&f->wait_spin_fixed, -1);
    f->progress_linger_us = f->progress_mode == DSM_PROGRESS_HYBRID || f->progress_mode == DSM_PROGRESS_ADAPTIVE
                                ? dsm_fabric_default_linger_us()
                                : 0;
    dsm_linger_init(&f->linger, f->progress_linger_us);
    f->worker_efd = f->wake_fd = f->kick_fd = f->epoll_fd = -1;
    dsm_crowd_init(&f->crowd);
    atomic_init(&f->next_request_id, 1);
    pthread_mutex_init(&f->lock, NULL);
    pthread_mutex_init(&f->pending_lock, NULL);
    pthread_rwlock_init(&f->regions_lock, NULL);
    dsm_fabric_direct_init(f);
    for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++) {
        f->peers[r].rank = r;
        f->peers[r].fabric = f;
    }

    /* UCX starts threads of its own (its async thread): they inherit this */
    sigset_t old_mask;
    dsm_signals_block_async(&old_mask);
    dsm_status_t st = create_context(f, config);
    dsm_signals_restore(&old_mask);
    if (st == DSM_OK)
        st = dsm_fabric_am_init(f);
    if (st == DSM_OK)
        st = dsm_fabric_chaos_start(f, config->chaos);
    if (st == DSM_OK)
        st = start_progress(f);
    if (st != DSM_OK) {
        dsm_fabric_destroy(f);
        return st;
    }
    DSM_DEBUG(DSM_FABRIC_LOG, "fabric up: transport %s, %s progress, address %zu bytes",
              dsm_transport_name(f->transport), dsm_progress_name(f->progress_mode), f->address_len);
    *out = f;
    return DSM_OK;
}

/* Closes endpoints with a flush, bounded by a second in all: a forced close
 * is avoided because UCX 1.13 asserts when it discards pending requests of
 * its new protocols, and shm endpoints (no peer error handling) refuse it. */
void dsm_fabric_close_eps(dsm_fabric_t *f, ucp_ep_h *eps, unsigned n)
{
    ucs_status_ptr_t reqs[n ? n : 1];
    unsigned live = 0;
    for (unsigned i = 0; i < n; i++) {
        if (eps[i] == NULL)
            continue;
        ucp_request_param_t p = {.op_attr_mask = 0};
        ucs_status_ptr_t sp = ucp_ep_close_nbx(eps[i], &p);
        eps[i] = NULL;
        if (UCS_PTR_IS_PTR(sp))
            reqs[live++] = sp;
    }
    uint64_t deadline = dsm_deadline_ns(1000);
    for (unsigned i = 0; i < live; i++) {
        while (ucp_request_check_status(reqs[i]) == UCS_INPROGRESS && dsm_now_ns() < deadline)
            dsm_fabric_progress(f);
        ucp_request_free(reqs[i]);
    }
}

/* Closes a peer's endpoint once no thread is inside a UCX call on it. */
static void close_endpoint(dsm_fabric_t *f, dsm_peer_t *peer)
{
    while (atomic_load_explicit(&peer->users, memory_order_acquire) != 0)
        sched_yield();
    /* the peer is not alive: no direct access left on its mappings, no send on its endpoint */
    dsm_fabric_direct_quiesce(f, peer->rank);
    dsm_fabric_remote_regions_clear(peer);
    dsm_fabric_close_eps(f, &peer->ep, 1);
}

static void close_all_endpoints(dsm_fabric_t *f)
{
    for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++) {
        dsm_peer_t *peer = &f->peers[r];
        if (peer->ep) {
            atomic_store(&peer->state, DSM_PEER_DEAD);
            close_endpoint(f, peer);
        }
    }
}

void dsm_fabric_stop(dsm_fabric_t *f)
{
    if (f == NULL)
        return;
    dsm_fabric_batch_forget(f);
    if (f->thread_started) {
        atomic_store(&f->stop, 1);
        wake_progress(f);
        pthread_join(f->thread, NULL);
        f->thread_started = false;
        atomic_store(&f->thread_tid, 0);
    }
    /* Whoever still progresses the worker (a waiter, closing endpoints)
     * must not run a handler or the peer-error callback: their owner frees
     * the state next. A handler already running on a waiter's thread holds
     * the worker's lock, which one progress call here waits for; only the
     * first stop makes it (destroy stops again, after the owner freed). */
    if (atomic_exchange(&f->handlers_closed, 1) == 0 && f->worker)
        dsm_fabric_progress(f);
}

void dsm_fabric_destroy(dsm_fabric_t *f)
{
    if (f == NULL)
        return;
    dsm_fabric_stop(f);
    dsm_fabric_chaos_stop(f);
    if (f->worker) {
        /* fail requesters still waiting (other threads) before the worker goes */
        for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++)
            dsm_fabric_am_fail_pending(f, r, DSM_ERR_CLOSED);
        dsm_fabric_lanes_close_all(f);
        close_all_endpoints(f);
        for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++)
            free(f->peers[r].address);
        if (f->address)
            ucp_worker_release_address(f->worker, f->address);
        free(f->wire_address);
        ucp_worker_destroy(f->worker);
        dsm_fabric_lane_errs_free(f);   /* no endpoint callback can come now */
    }
    if (f->context)
        ucp_cleanup(f->context);
    if (f->epoll_fd >= 0)
        close(f->epoll_fd);
    if (f->wake_fd >= 0)
        close(f->wake_fd);
    if (f->kick_fd >= 0)
        close(f->kick_fd);
    dsm_crowd_fini(&f->crowd);
    pthread_mutex_destroy(&f->lock);
    pthread_mutex_destroy(&f->pending_lock);
    pthread_mutex_destroy(&f->defer.lock);
    pthread_rwlock_destroy(&f->regions_lock);
    free(f);
}

dsm_status_t dsm_fabric_address(dsm_fabric_t *f, const void **addr, size_t *len)
{
    if (f == NULL || addr == NULL || len == NULL)
        return DSM_ERR_INVALID;
    *addr = f->wire_address;
    *len = f->wire_address_len;
    return DSM_OK;
}

dsm_status_t dsm_fabric_address_check(const void *addr, size_t len, unsigned *version, unsigned *mine)
{
    unsigned v;
    const void *transport;
    size_t transport_len;
    dsm_status_t st = dsm_fabric_addr_decode(addr, len, &v, &transport, &transport_len);
    if (version)
        *version = v;
    if (mine)
        *mine = DSM_AM_WIRE_VERSION;
    return st;
}

void dsm_fabric_set_rank(dsm_fabric_t *f, uint32_t rank)
{
    atomic_store(&f->rank, rank);
}

uint32_t dsm_fabric_rank(const dsm_fabric_t *f)
{
    return atomic_load(&((dsm_fabric_t *)f)->rank);
}

/* -------------------------------------------------------------------- peers */

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    dsm_peer_t *peer = arg;
    dsm_fabric_mark_dead(peer->fabric, peer->rank, ucs_status_string(status));
}

ucs_status_t dsm_fabric_ep_create(dsm_fabric_t *f, const void *addr, ucp_err_handling_mode_t mode,
                                  ucp_err_handler_cb_t on_error, void *arg, ucp_ep_h *ep)
{
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = mode,
        .err_handler = {.cb = on_error, .arg = arg},
    };
    sigset_t old_mask;   /* a first endpoint may start UCX's async thread */
    atomic_fetch_add_explicit(&f->endpoints_opened, 1, memory_order_relaxed);
    dsm_signals_block_async(&old_mask);
    ucs_status_t st = ucp_ep_create(f->worker, &params, ep);
    dsm_signals_restore(&old_mask);
    return st;
}

static void probe_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg, (void)ep, (void)status;   /* the probe's endpoint is closed at once */
}

dsm_status_t dsm_fabric_probe_address(dsm_fabric_t *f, const void *addr, size_t len)
{
    unsigned version;
    const void *transport_addr;
    size_t transport_len;
    if (f == NULL || addr == NULL)
        return DSM_ERR_INVALID;
    if (dsm_fabric_addr_decode(addr, len, &version, &transport_addr, &transport_len) != DSM_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "%zu bytes that are not a fabric address of this build", len);
        return DSM_ERR_PROTO;
    }
    /* the modes dsm_fabric_connect will use: shm endpoints have no peer
     * error handling */
    ucp_err_handling_mode_t mode = f->transport == DSM_TRANSPORT_SHM ? UCP_ERR_HANDLING_MODE_NONE
                                                                     : UCP_ERR_HANDLING_MODE_PEER;
    ucp_ep_h ep = NULL;
    ucs_status_t st = dsm_fabric_ep_create(f, transport_addr, mode, probe_error_cb, NULL, &ep);
    if (st != UCS_OK && mode == UCP_ERR_HANDLING_MODE_PEER)
        st = dsm_fabric_ep_create(f, transport_addr, UCP_ERR_HANDLING_MODE_NONE, probe_error_cb, NULL, &ep);
    if (st != UCS_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "UCX cannot use the address: %s", ucs_status_string(st));
        return DSM_ERR_FABRIC;
    }
    dsm_fabric_close_eps(f, &ep, 1);
    return DSM_OK;
}

dsm_status_t dsm_fabric_connect(dsm_fabric_t *f, uint32_t rank, const void *addr, size_t len)
{
    if (f == NULL || addr == NULL || len == 0)
        return DSM_ERR_INVALID;
    if (rank >= DSM_FABRIC_MAX_PEERS)
        return DSM_ERR_NO_PEER;
    unsigned version;
    const void *transport_addr;
    size_t transport_len;
    if (dsm_fabric_addr_decode(addr, len, &version, &transport_addr, &transport_len) != DSM_OK) {
        if (version)
            DSM_ERROR(DSM_FABRIC_LOG, "rank %u speaks active-message version %u, this node %u: every node must run "
                      "the same build", rank, version, (unsigned)DSM_AM_WIRE_VERSION);
        else
            DSM_ERROR(DSM_FABRIC_LOG, "rank %u: %zu bytes that are not a fabric address", rank, len);
        return DSM_ERR_PROTO;
    }
    addr = transport_addr;
    len = transport_len;
    dsm_peer_t *peer = &f->peers[rank];

    pthread_mutex_lock(&f->lock);
    dsm_status_t ret = DSM_OK;
    if (atomic_load(&peer->state) == DSM_PEER_ALIVE) {
        ret = DSM_ERR_EXISTS;
    } else {
        /* A dead peer may come back (a restarted daemon): drop the old endpoint. */
        if (peer->ep)
            close_endpoint(f, peer);
        /* Peer failure detection where the transports support it. UCX 1.13's
         * shm transports (posix, sysv, cma) have no peer failure handler, so
         * shm endpoints use none and the runtime's heartbeats call
         * dsm_fabric_peer_failed instead. */
        ucp_err_handling_mode_t mode = f->transport == DSM_TRANSPORT_SHM ? UCP_ERR_HANDLING_MODE_NONE
                                                                         : UCP_ERR_HANDLING_MODE_PEER;
        ucp_ep_h ep = NULL;
        ucs_status_t st = dsm_fabric_ep_create(f, addr, mode, ep_error_cb, peer, &ep);
        if (st != UCS_OK && mode == UCP_ERR_HANDLING_MODE_PEER) {
            DSM_DEBUG(DSM_FABRIC_LOG, "rank %u: peer error handling unavailable (%s), using none",
                      rank, ucs_status_string(st));
            mode = UCP_ERR_HANDLING_MODE_NONE;
            st = dsm_fabric_ep_create(f, addr, mode, ep_error_cb, peer, &ep);
        }
        if (st != UCS_OK) {
            DSM_ERROR(DSM_FABRIC_LOG, "connect to rank %u: %s", rank, ucs_status_string(st));
            ret = DSM_ERR_FABRIC;
        } else {
            void *copy = malloc(len);
            if (copy)
                memcpy(copy, addr, len);
            free(peer->address);
            peer->address = copy;   /* without it lanes use this endpoint */
            peer->address_len = copy ? len : 0;
            atomic_fetch_add_explicit(&peer->incarnation, 1, memory_order_relaxed);
            peer->ep = ep;
            peer->err_mode = mode;
            atomic_store_explicit(&peer->state, DSM_PEER_ALIVE, memory_order_release);
        }
    }
    pthread_mutex_unlock(&f->lock);
    return ret;
}

dsm_status_t dsm_fabric_peer_acquire(dsm_fabric_t *f, uint32_t rank, dsm_peer_t **out)
{
    if (rank >= DSM_FABRIC_MAX_PEERS)
        return DSM_ERR_NO_PEER;
    dsm_peer_t *peer = &f->peers[rank];
    atomic_fetch_add_explicit(&peer->users, 1, memory_order_acq_rel);
    int state = atomic_load_explicit(&peer->state, memory_order_acquire);
    if (state != DSM_PEER_ALIVE) {
        dsm_fabric_peer_release(peer);
        return state == DSM_PEER_DEAD ? DSM_ERR_PEER_DEAD : DSM_ERR_NO_PEER;
    }
    *out = peer;
    return DSM_OK;
}

void dsm_fabric_mark_dead(dsm_fabric_t *f, uint32_t rank, const char *reason)
{
    if (rank >= DSM_FABRIC_MAX_PEERS)
        return;
    dsm_peer_t *peer = &f->peers[rank];
    int expected = DSM_PEER_ALIVE;
    if (!atomic_compare_exchange_strong(&peer->state, &expected, DSM_PEER_DEAD))
        return;
    atomic_fetch_add_explicit(reason ? &f->peers_failed : &f->peers_left, 1, memory_order_relaxed);
    if (reason)
        DSM_WARN(DSM_FABRIC_LOG, "rank %u: peer failed (%s)", rank, reason);
    else
        DSM_INFO(DSM_FABRIC_LOG, "rank %u: peer left", rank);
    dsm_fabric_am_fail_pending(f, rank, DSM_ERR_PEER_DEAD);
    dsm_peer_error_cb_t cb = atomic_load(&f->error_cb);
    if (cb && !atomic_load_explicit(&f->handlers_closed, memory_order_acquire))   /* stopped: not told */
        cb(atomic_load(&f->error_ctx), rank);
}

void dsm_fabric_peer_failed(dsm_fabric_t *f, uint32_t rank)
{
    if (f)
        dsm_fabric_mark_dead(f, rank, "reported by the runtime");
}

void dsm_fabric_peer_leaving(dsm_fabric_t *f, uint32_t rank)
{
    if (f == NULL || rank >= DSM_FABRIC_MAX_PEERS)
        return;
    dsm_fabric_mark_dead(f, rank, NULL);
}

int dsm_fabric_peer_busy(dsm_fabric_t *f, uint32_t rank)
{
    if (f == NULL || rank >= DSM_FABRIC_MAX_PEERS)
        return 0;
    /* a reconnected rank (a new incarnation) is another peer: not waited for */
    dsm_peer_t *peer = &f->peers[rank];
    if (atomic_load_explicit(&peer->users, memory_order_acquire) != 0 &&
        atomic_load_explicit(&peer->state, memory_order_acquire) == DSM_PEER_DEAD)
        return 1;
    /* a send marks its thread slot, not the count: waited for here, as each
     * is one UCX call (no hold across a wait) */
    dsm_fabric_peer_sends_quiesce(f, rank);
    return 0;
}

void dsm_fabric_peer_left(dsm_fabric_t *f, uint32_t rank)
{
    dsm_fabric_peer_leaving(f, rank);
    /* The leaver exits once every member has said it is gone here: no
     * thread may then still be inside a UCX call toward it (a lane's first
     * endpoint would connect to a process about to vanish, and UCX 1.13's
     * tcp asserts when such a connect is refused). A thread may hold the
     * peer for long (a mapping held across its caller's work, a fence that
     * waits for the peer's replies): a caller that must stay responsive
     * polls dsm_fabric_peer_busy instead. */
    while (dsm_fabric_peer_busy(f, rank))
        sched_yield();
}

dsm_status_t dsm_fabric_peer_state(dsm_fabric_t *f, uint32_t rank)
{
    if (f == NULL || rank >= DSM_FABRIC_MAX_PEERS)
        return DSM_ERR_NO_PEER;
    switch (atomic_load(&f->peers[rank].state)) {
    case DSM_PEER_ALIVE: return DSM_OK;
    case DSM_PEER_DEAD: return DSM_ERR_PEER_DEAD;
    default: return DSM_ERR_NO_PEER;
    }
}

void dsm_fabric_on_peer_error(dsm_fabric_t *f, dsm_peer_error_cb_t cb, void *ctx)
{
    atomic_store(&f->error_ctx, ctx);
    atomic_store(&f->error_cb, cb);
}

/* ------------------------------------------------------------------- stats */

void dsm_fabric_time_waits(dsm_fabric_t *f, int on)
{
    if (f)
        atomic_fetch_add_explicit(&f->wait_timing, on ? 1 : -1, memory_order_relaxed);
}

int dsm_fabric_progress_parked(dsm_fabric_t *f)
{
    return atomic_load_explicit(&f->progress_parked, memory_order_acquire) != 0;
}

void dsm_fabric_stats(dsm_fabric_t *f, dsm_stats_t *out)
{
    if (f == NULL || out == NULL)
        return;
    memset(out, 0, sizeof *out);
    dsm_fabric_counters_t c;
    dsm_tslot_sum_rows((uint64_t *)&c, f->counter_slots, &f->counters, sizeof c / sizeof(uint64_t));
    out->gets = c.gets;
    out->puts = c.puts;
    out->atomics = c.atomics;
    out->bytes_read = c.bytes_read;
    out->bytes_written = c.bytes_written;
    out->am_sent = c.am_sent;
    out->am_recv = c.am_recv;
    out->am_bytes_sent = c.am_bytes_sent;
    out->am_bytes_recv = c.am_bytes_recv;
    out->am_rejected = c.am_rejected;
    out->errors = c.errors;
    out->waits = c.waits;
    out->wait_sleeps = c.wait_sleeps;
    out->round_trips_waited = c.round_trips_waited;
    out->round_trip_wait_ns = c.round_trip_wait_ns;
    out->round_trips_slept = c.round_trips_slept;
    out->progress_wakeups = c.progress_wakeups;
    out->progress_empty_wakeups = c.progress_empty_wakeups;
    out->progress_parks = c.progress_parks;
    out->linger_backoffs = c.linger_backoffs;
    out->linger_crowded = c.linger_crowded;
    out->wait_spins_cut = c.wait_spins_cut;
    out->wait_kicks = c.wait_kicks;
    clockid_t clock;
    struct timespec ts;
    if (f->thread_started && pthread_getcpuclockid(f->thread, &clock) == 0 && clock_gettime(clock, &ts) == 0)
        out->progress_cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    out->deferred = atomic_load_explicit(&f->defer.requests, memory_order_relaxed);
    out->deferred_batches = atomic_load_explicit(&f->defer.batches, memory_order_relaxed);
    dsm_chaos_counts_t chaos;
    dsm_fabric_chaos_counts(f, &chaos);
    out->chaos_delayed = chaos.delayed;
    out->chaos_late = chaos.late;
    out->chaos_split = chaos.split;
    out->chaos_dropped = chaos.dropped;
    out->chaos_defer_held = chaos.defer_held;
    out->chaos_defer_opened = chaos.defer_opened;
    out->chaos_defer_early = chaos.defer_early;
    out->endpoints_opened = atomic_load_explicit(&f->endpoints_opened, memory_order_relaxed);
    out->peers_failed = atomic_load_explicit(&f->peers_failed, memory_order_relaxed);
    out->peers_left = atomic_load_explicit(&f->peers_left, memory_order_relaxed);
    for (int i = 0; i < DSM_AM_MAX_HANDLERS; i++) {
        out->am_sent_by_handler[i] = c.am_sent_by_handler[i];
        out->am_recv_by_handler[i] = c.am_recv_by_handler[i];
    }
}

int dsm_fabric_progress_tid(dsm_fabric_t *f) { return f ? atomic_load(&f->thread_tid) : 0; }
