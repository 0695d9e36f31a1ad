/* The delegation runtime: its threads, their scheduling loop, termination and
 * idle sleep. Each thread runs its fibers in FIFO order, then one delegation
 * step (serve incoming batches, poll responses, publish staged requests) —
 * the thesis's "delegation fiber", run from the scheduler context.
 * Termination: the run ends when every thread is idle (main done, no fiber,
 * nothing outstanding), every request toggle equals its response toggle, and
 * two consecutive waves read the same, balanced sent/served counters
 * (Mattern's four-counter method), so a request in transit is never lost. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "deleg/internal.h"
#include "deleg/remote.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/relax.h"
#include "util/thread.h"

/* Idle polls (each a slot scan and a pause, ~30-40 ns) before the scheduler
 * loop starts yielding the CPU. With a core per runtime thread the peer we
 * wait for is running, a round trip is a microsecond or two, and yielding
 * early only hands our core to unrelated work for a whole time slice: spin
 * ~150 us. With more runtime threads than usable CPUs the peer may need our
 * core, so yield after a couple of microseconds, as the 3-thread tests on
 * 2 cores want (a long spin there made them 10x slower). */
#define SPIN_LONG 4096u
#define SPIN_SHORT 64u
/* An attached thread's idle nap on a crowded host: short against a batch's
 * round trip over tcp, long enough that the thread leaves the run queue. */
#define IDLE_NAP_NS 20000L
/* How long an attached thread with a doorbell yields before it sleeps on
 * it on a crowded host: the fabric's waiters spin as long there
 * (fabric/wait.c, SPIN_US_CROWDED). The sleep's bound only covers a ring
 * missed where a peer's area was not mapped at the time. */
#define BELL_YIELD_NS 20000u
#define BELL_TIMEOUT_US 1000L
/* The idle wait's longest linger (cfg.linger_us): the fabric's default. */
#define IDLE_LINGER_US 100u
#define IDLE_LINGER_MAX_US 1000000u
/* Hybrid's rule, the fabric's: no linger once this many samples in a row
 * found the host crowded (one can catch a thread that is only waking). */
#define IDLE_LINGER_CROWDED_SAMPLES 3u
/* Adaptive's: its linger's crowd hold (linger.h) */
#define IDLE_CROWD_HOLD_NS (50u * 1000u * 1000u)

static unsigned usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return (unsigned)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

dsm_status_t dsm_deleg_rt_create(const dsm_deleg_config_t *cfg, dsm_deleg_rt_t **out)
{
    /* initial_weight: at most 2^62, so a node's share of a property, counted
     * signed (remote_share.c), holds any trust's weight */
    if (!cfg || !out || cfg->threads == 0 || cfg->threads > 1024 || cfg->dedicated >= cfg->threads ||
        cfg->initial_weight > (UINT64_C(1) << 62) || cfg->idle_progress < DSM_PROGRESS_BLOCKING ||
        cfg->idle_progress > DSM_PROGRESS_ADAPTIVE || cfg->idle_progress == DSM_PROGRESS_BUSY ||
        cfg->linger_us > IDLE_LINGER_MAX_US)
        return DSM_ERR_INVALID;
    dsm_deleg_rt_t *rt = calloc(1, sizeof *rt);
    if (!rt) return DSM_ERR_NOMEM;
    rt->cfg = *cfg;
    if (!rt->cfg.stack_size) rt->cfg.stack_size = 64 * 1024;
    if (rt->cfg.idle_progress == DSM_PROGRESS_AUTO) rt->cfg.idle_progress = DSM_PROGRESS_ADAPTIVE;
    if (!rt->cfg.linger_us) rt->cfg.linger_us = IDLE_LINGER_US;
    unsigned n = rt->n = cfg->threads;
    /* Before any pinning narrows this process's affinity mask. */
    rt->spin_limit = n > usable_cpus() ? SPIN_SHORT : SPIN_LONG;
    dsm_crowd_init(&rt->crowd);
    rt->req_primary = dsm_zalloc_lines((size_t)n * n * SLOT_INFLIGHT * SLOT_PRIMARY);
    rt->resp_primary = dsm_zalloc_lines((size_t)n * n * SLOT_INFLIGHT * SLOT_PRIMARY);
    rt->req_overflow = dsm_zalloc_lines((size_t)n * n * SLOT_INFLIGHT * SLOT_OVERFLOW);
    rt->resp_overflow = dsm_zalloc_lines((size_t)n * n * SLOT_INFLIGHT * SLOT_OVERFLOW);
    rt->th = dsm_zalloc_lines(n * sizeof *rt->th);
    if (!rt->req_primary || !rt->resp_primary || !rt->req_overflow || !rt->resp_overflow || !rt->th) goto fail;
    for (unsigned i = 0; i < n; i++) {
        deleg_thread_t *th = &rt->th[i];
        th->rt = rt;
        th->idx = i;
        th->efd = -1;
        th->wake_ep = -1;
        dsm_linger_init(&th->linger, rt->cfg.linger_us);
        th->linger.hold_ns = IDLE_CROWD_HOLD_NS;
        th->out = dsm_zalloc_lines(n * sizeof *th->out);
        th->in = dsm_zalloc_lines(n * sizeof *th->in);
        if (!th->out || !th->in) goto fail;
        th->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (th->efd < 0) goto fail;
    }
    *out = rt;
    return DSM_OK;
fail:
    dsm_deleg_rt_destroy(rt);
    return DSM_ERR_NOMEM;
}

void dsm_deleg_rt_destroy(dsm_deleg_rt_t *rt)
{
    if (!rt) return;
    if (atomic_load(&rt->running)) dsm_deleg_rt_join(rt);
    dsm_deleg_remote_detach(rt);
    if (rt->th) {
        for (unsigned i = 0; i < rt->n; i++) {
            deleg_thread_t *th = &rt->th[i];
            if (th->out) dsm_deleg_pairs_free(th);
            free(th->out);
            free(th->in);
            if (th->efd >= 0) close(th->efd);
        }
    }
    free(rt->th);
    free(rt->req_primary);
    free(rt->resp_primary);
    free(rt->req_overflow);
    free(rt->resp_overflow);
    dsm_crowd_fini(&rt->crowd);
    free(rt);
}

unsigned dsm_deleg_rt_threads(const dsm_deleg_rt_t *rt) { return rt->n; }

void dsm_deleg_counters(dsm_deleg_counters_t *out)
{
    const deleg_thread_t *th = dsm_deleg_tls;
    *out = th ? (dsm_deleg_counters_t){th->sent_local, th->served_local, th->wakeups} : (dsm_deleg_counters_t){0};
}

void dsm_deleg_wake_thread(dsm_deleg_rt_t *rt, unsigned idx)
{
    uint64_t one = 1;
    ssize_t r = write(rt->th[idx].efd, &one, sizeof one);
    (void)r; /* EAGAIN: the counter is already non-zero, a wakeup is pending */
    if (dsm_deleg_tls) dsm_deleg_tls->wakeups++;
    /* a thread asleep on its doorbell (bell_sleep) */
    if (rt->remote) dsm_rbell_ring_local(rt->remote, idx);
}

void dsm_deleg_rt_wake(dsm_deleg_rt_t *rt)
{
    for (unsigned i = 0; i < rt->n; i++) dsm_deleg_wake_thread(rt, i);
}

/* Anything for this thread to do right now from another thread? */
static int incoming(deleg_thread_t *th)
{
    dsm_deleg_rt_t *rt = th->rt;
    for (unsigned c = 0; c < rt->n; c++) {
        unsigned b = th->in[c].next;
        if (c != th->idx && atomic_load_explicit(&req_hdr(rt, th->idx, c, b)->toggle, memory_order_acquire) !=
                                th->in[c].toggle[b])
            return 1;
        pair_out_t *p = &th->out[c];
        if (p->in_flight && atomic_load_explicit(&resp_hdr(rt, th->idx, c, p->oldest)->toggle,
                                                 memory_order_acquire) == p->toggle[p->oldest])
            return 1;
    }
    return 0;
}

/* Block in poll() on the eventfd (and extra_fd) after announcing it; writers
 * check `sleeping` after a seq_cst fence, we recheck the slots after ours. */
static void sleep_wait(deleg_thread_t *th, int extra_fd, int timeout_ms)
{
    atomic_store_explicit(&th->sleeping, 1, memory_order_relaxed);
    deleg_full_fence();
    if (!incoming(th) && !atomic_load_explicit(&th->rt->stop, memory_order_acquire)) {
        struct pollfd pfd[2] = {{.fd = th->efd, .events = POLLIN}, {.fd = extra_fd, .events = POLLIN}};
        dsm_deleg_remote_polling(th, 0);   /* the progress thread takes over meanwhile */
        poll(pfd, extra_fd >= 0 ? 2 : 1, timeout_ms);
        dsm_deleg_remote_polling(th, 1);
    }
    atomic_store_explicit(&th->sleeping, 0, memory_order_relaxed);
    uint64_t v;
    ssize_t r = read(th->efd, &v, sizeof v);
    (void)r;
}

/* Attached over shm: sleep on the doorbell until a slot write for this
 * thread, a local wake or the timeout, after announcing it to both kinds
 * of writer (local ones look at `sleeping`, remote ones at the bell) and
 * looking for work once more. Returns 0 if this runtime has no bells. */
static int bell_sleep(deleg_thread_t *th, long timeout_us)
{
    dsm_deleg_rt_t *rt = th->rt;
    if (!rt->remote || !rt->remote->bells_off || !th->remote) return 0;
    if (th->sched.ready) return 1; /* a fiber woken by this step's completions: run it */
    atomic_store_explicit(&th->sleeping, 1, memory_order_relaxed);
    dsm_rbell_arm(th);
    if (!incoming(th) && !dsm_deleg_remote_incoming(th) && !atomic_load_explicit(&rt->stop, memory_order_acquire))
        dsm_rbell_wait(th, timeout_us);
    else
        dsm_rbell_disarm(th);
    /* a local waker's eventfd count is left: it only cuts a later poll short */
    atomic_store_explicit(&th->sleeping, 0, memory_order_relaxed);
    return 1;
}

/* Whether this runtime thread may sleep now. Staged requests are published
 * by the scheduler: never sleep on them. Requests in flight are another
 * matter: their responses wake this thread (the trustee checks `sleeping`
 * after publishing them), and a thread spinning for one response, on a
 * machine with more threads than cores, only keeps the trustee it waits for
 * off the core (an unpipelined memcached request waited a time slice per
 * hop). */
static int idle_may_sleep(const deleg_thread_t *th)
{
    if (th->sched.ready || !th->rt->cfg.idle_sleep) return 0;
    for (unsigned c = 0; c < th->rt->n; c++)
        if (th->out[c].staged && !th->out[c].in_flight) return 0;
    return 1;
}

/* How long the idle wait polls before it sleeps (cfg.idle_progress), in
 * µs; 0: sleep at once. */
static uint32_t idle_linger_us(deleg_thread_t *th, uint64_t now)
{
    dsm_deleg_rt_t *rt = th->rt;
    switch (rt->cfg.idle_progress) {
    case DSM_PROGRESS_HYBRID:
        return dsm_crowd_run(&rt->crowd, now) >= IDLE_LINGER_CROWDED_SAMPLES ? 0 : rt->cfg.linger_us;
    case DSM_PROGRESS_ADAPTIVE: {
        unsigned run = dsm_crowd_run(&rt->crowd, now);
        return dsm_linger_probe_us(&th->linger, dsm_linger_held_budget_us(&th->linger, run, now), run, now);
    }
    default:
        return 0;
    }
}

/* The linger before an idle sleep: polls for this thread's next request
 * (incoming(), or `ready` of the caller's own source) until one comes or
 * the budget runs out. Returns 1 if one came (observed: it came within the
 * linger); 0 otherwise, with the linger's start in *since and its length
 * in *lingered, for the sleep's end to be observed against
 * (dsm_linger_observe_sleep). */
static int idle_linger(deleg_thread_t *th, int (*ready)(void *), void *arg, uint64_t *since, uint32_t *lingered)
{
    uint64_t start = dsm_now_ns();
    *since = start;
    uint32_t us = idle_linger_us(th, start);
    *lingered = us;
    if (us == 0) return 0;
    uint64_t until = start + (uint64_t)us * 1000u;
    while (!atomic_load_explicit(&th->rt->stop, memory_order_relaxed)) {
        if (incoming(th) || ready(arg)) {
            dsm_linger_observe(&th->linger, dsm_now_ns() - start);
            return 1;
        }
        if (dsm_now_ns() >= until) break;
        dsm_cpu_relax();
    }
    return 0;
}

static int fd_ready(void *arg)
{
    struct pollfd pfd = {.fd = *(int *)arg, .events = POLLIN};
    return pfd.fd >= 0 && poll(&pfd, 1, 0) > 0;
}

void dsm_deleg_idle_wait(int extra_fd, int timeout_ms)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (!th) {
        if (extra_fd >= 0) {
            struct pollfd pfd = {.fd = extra_fd, .events = POLLIN};
            poll(&pfd, 1, timeout_ms);
        }
        return;
    }
    if (!idle_may_sleep(th)) return;
    uint64_t since;
    uint32_t lingered;
    if (idle_linger(th, fd_ready, &extra_fd, &since, &lingered)) return;
    sleep_wait(th, extra_fd, timeout_ms);
    dsm_linger_observe_sleep(&th->linger, lingered, dsm_now_ns() - since);
}

/* The caller's epoll set during a linger: polled, what it returns kept. */
typedef struct epoll_poll {
    int ep, max, n;
    struct epoll_event *evs;
} epoll_poll_t;

static int epoll_ready(void *arg)
{
    epoll_poll_t *p = arg;
    p->n = epoll_wait(p->ep, p->evs, p->max, 0);
    if (p->n < 0) p->n = 0;   /* EINTR: as a wait that found nothing */
    return p->n > 0;
}

/* The eventfd sits in ep edge-triggered, its data the thread itself (no
 * caller's token can be that): every wake-up write is an edge, so the
 * count is never read here; sleep_wait's read still resets it. The
 * handshake is sleep_wait's, with epoll_wait for poll. */
int dsm_deleg_idle_epoll(int ep, struct epoll_event *evs, int max, int timeout_ms)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (!th) return epoll_wait(ep, evs, max, timeout_ms);
    int block = timeout_ms != 0 && idle_may_sleep(th);
    if (block && th->wake_ep != ep) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = th};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, th->efd, &ev) == 0 || errno == EEXIST) th->wake_ep = ep;
        else block = 0;
    }
    int n;
    uint64_t since = 0;
    uint32_t lingered = 0;
    epoll_poll_t lp = {.ep = ep, .max = max, .evs = evs};
    if (block && idle_linger(th, epoll_ready, &lp, &since, &lingered)) {
        n = lp.n;
    } else if (block) {
        atomic_store_explicit(&th->sleeping, 1, memory_order_relaxed);
        deleg_full_fence();
        if (!incoming(th) && !atomic_load_explicit(&th->rt->stop, memory_order_acquire)) {
            dsm_deleg_remote_polling(th, 0);
            n = epoll_wait(ep, evs, max, timeout_ms);
            dsm_deleg_remote_polling(th, 1);
        } else {
            n = epoll_wait(ep, evs, max, 0);
        }
        atomic_store_explicit(&th->sleeping, 0, memory_order_relaxed);
        dsm_linger_observe_sleep(&th->linger, lingered, dsm_now_ns() - since);
    } else {
        n = epoll_wait(ep, evs, max, 0);
    }
    if (n <= 0 || th->wake_ep != ep) return n;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (evs[i].data.ptr != th) evs[k++] = evs[i];
    return k;
}

static int thread_idle(const deleg_thread_t *th)
{
    return th->main_done && th->sched.live == 0 && dsm_deleg_thread_quiet(th);
}

static int all_toggles_equal(dsm_deleg_rt_t *rt)
{
    for (unsigned s = 0; s < rt->n; s++)
        for (unsigned c = 0; c < rt->n; c++) {
            if (s == c) continue;
            for (unsigned k = 0; k < SLOT_INFLIGHT; k++) {
                uint32_t a = atomic_load_explicit(&req_hdr(rt, s, c, k)->toggle, memory_order_acquire);
                uint32_t b = atomic_load_explicit(&resp_hdr(rt, c, s, k)->toggle, memory_order_acquire);
                if (a != b) return 0;
            }
        }
    return 1;
}

static int wave(dsm_deleg_rt_t *rt, uint64_t *sent, uint64_t *served)
{
    uint64_t s = 0, r = 0;
    if (!all_toggles_equal(rt)) return 0;
    for (unsigned i = 0; i < rt->n; i++) {
        if (!atomic_load_explicit(&rt->th[i].idle, memory_order_acquire)) return 0;
        s += atomic_load_explicit(&rt->th[i].sent, memory_order_acquire);
        r += atomic_load_explicit(&rt->th[i].served, memory_order_acquire);
    }
    *sent = s;
    *served = r;
    return 1;
}

static int terminated(dsm_deleg_rt_t *rt)
{
    uint64_t s1, r1, s2, r2;
    if (!wave(rt, &s1, &r1)) return 0;
    deleg_full_fence();
    if (!wave(rt, &s2, &r2)) return 0;
    return s1 == r1 && s1 == s2 && r1 == r2;
}

int dsm_deleg_rt_quiet(dsm_deleg_rt_t *rt) { return terminated(rt); }

static void main_fiber(void *arg)
{
    deleg_thread_t *th = arg;
    th->rt->main_fn(th->rt->main_arg, th->idx - th->rt->cfg.dedicated);
    th->main_done = 1;
}

static void pin_self(unsigned cpu)
{
    cpu_set_t set;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu <= 0) return;
    CPU_ZERO(&set);
    CPU_SET(cpu % (unsigned)ncpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *thread_main(void *arg)
{
    deleg_thread_t *th = arg;
    dsm_thread_name("dsm-trust", (int)th->idx);
    dsm_deleg_rt_t *rt = th->rt;
    dsm_deleg_tls = th;
    dsm_sched_init(&th->sched, rt->cfg.stack_size);
    if (rt->cfg.pin) pin_self(rt->cfg.pin_first + th->idx);
    th->main_done = th->idx < rt->cfg.dedicated || !rt->main_fn;
    if (!th->main_done && dsm_sched_spawn(&th->sched, main_fiber, th) != DSM_OK) {
        DSM_ERROR("deleg", "thread %u: cannot create its main fiber", th->idx);
        th->main_done = 1;
    }
    unsigned spins = 0, spin_limit = rt->spin_limit;
    uint64_t idle_ns = 0;
    dsm_deleg_remote_bind(th, 1);
    dsm_deleg_remote_polling(th, 1);
    for (;;) {
        /* attached: stop comes after the cluster-wide end, or when a node
         * died (fate sharing: fibers still waiting are abandoned) */
        if (rt->remote && atomic_load_explicit(&rt->stop, memory_order_acquire)) break;
        size_t ran = th->sched.ready ? dsm_sched_run(&th->sched, th->sched.ready) : 0;
        int did = dsm_deleg_step(th);
        if (th->remote) did |= dsm_deleg_remote_step(th);
        deleg_window_check(th);
        if (ran || did) {
            spins = 0;
            continue;
        }
        spins++;
        if (thread_idle(th)) {
            if (!atomic_load_explicit(&th->idle, memory_order_relaxed)) {
                atomic_store_explicit(&th->idle, 1, memory_order_release);
                deleg_full_fence();
            }
            if (atomic_load_explicit(&rt->stop, memory_order_acquire)) break;
            /* attached to a node: the cluster-wide join decides (remote.c) */
            if (!rt->remote && (spins & 127) == 0 && terminated(rt)) {
                atomic_store_explicit(&rt->stop, 1, memory_order_release);
                dsm_deleg_rt_wake(rt);
                break;
            }
        }
        if (rt->cfg.idle_sleep && spins > 4096 && th->outstanding == 0 && th->sched.ready == 0) {
            if (!bell_sleep(th, 2000)) sleep_wait(th, -1, 2);
            spins = 0; /* keeps the termination check on the (rare) wakeups */
            if (atomic_load_explicit(&rt->stop, memory_order_acquire)) break;
            if (!rt->remote && thread_idle(th) && terminated(rt)) {
                atomic_store_explicit(&rt->stop, 1, memory_order_release);
                dsm_deleg_rt_wake(rt);
                break;
            }
            continue;
        }
        /* Spin on the slots first: a round trip is a microsecond or two, and
         * yielding every 64 idle polls (~2 us) handed the core to whatever
         * else was runnable for a whole time slice (ms) on every batch — on a
         * loaded machine dedicated-trustee throughput fell to ~0.01 Mops/s.
         * Only after a long idle stretch (more runtime threads than cores, or
         * the peer was descheduled) let the thread we may wait for run. */
        /* Attached to a node: the other side of a batch may be another
         * process on our cores, so past the spin every idle poll yields; on
         * a crowded host it naps instead. A yield leaves a busy thread on
         * this core its whole time slice (ms) before the batch we wait for
         * is served; a sleeper that wakes preempts it. */
        /* With a doorbell, a thread on a crowded host yields for
         * BELL_YIELD_NS (a round trip whose peer is on a core is over by
         * then), then sleeps until the slot write it waits for rings it,
         * which gives its core to the thread that is to write it: a nap
         * only looked again after its timer (several times IDLE_NAP_NS on
         * a loaded host), whether the batch had come or not. */
        if (spins >= spin_limit && rt->remote) {
            uint64_t now = dsm_now_ns();
            if (spins == spin_limit) idle_ns = now;
            int bells = rt->remote->bells_off != 0;
            if ((!bells || now - idle_ns >= BELL_YIELD_NS) && dsm_crowd_run(&rt->crowd, now) > 0) {
                if (!bell_sleep(th, BELL_TIMEOUT_US)) {
                    struct timespec nap = {0, IDLE_NAP_NS};
                    nanosleep(&nap, NULL);
                }
            } else {
                sched_yield();
            }
        } else if (spins >= spin_limit && (spins & 63) == 0) {
            sched_yield();
        } else {
            dsm_cpu_relax();
        }
    }
    dsm_deleg_remote_polling(th, 0);
    dsm_deleg_remote_bind(th, 0);
    dsm_sched_fini(&th->sched);
    dsm_deleg_tls = NULL;
    return NULL;
}

dsm_status_t dsm_deleg_rt_start(dsm_deleg_rt_t *rt, dsm_deleg_main_fn main_fn, void *arg)
{
    if (!rt) return DSM_ERR_INVALID;
    if (dsm_deleg_tls || atomic_load(&rt->running)) return DSM_ERR_STATE;
    if (rt->remote && dsm_deleg_remote_can_start(rt) != DSM_OK) return DSM_ERR_STATE;
    rt->main_fn = main_fn;
    rt->main_arg = arg;
    atomic_store(&rt->stop, 0);
    for (unsigned i = 0; i < rt->n; i++) {
        atomic_store(&rt->th[i].idle, 0);
        atomic_store(&rt->th[i].sleeping, 0);
    }
    atomic_store(&rt->running, 1);
    if (rt->remote) dsm_deleg_remote_started(rt);
    for (unsigned i = 0; i < rt->n; i++) {
        int err = dsm_thread_start(&rt->th[i].tid, NULL, thread_main, &rt->th[i]);
        if (err) {
            DSM_ERROR("deleg", "pthread_create: %s", strerror(err));
            /* The started threads cannot terminate without the others: the
             * process is in no state to continue this run. */
            atomic_store(&rt->stop, 1);
            for (unsigned j = 0; j < i; j++) pthread_join(rt->th[j].tid, NULL);
            atomic_store(&rt->running, 0);
            return DSM_ERR_NOMEM;
        }
    }
    rt->started = 1;
    return DSM_OK;
}

dsm_status_t dsm_deleg_rt_join(dsm_deleg_rt_t *rt)
{
    if (!rt || !rt->started) return DSM_ERR_STATE;
    dsm_status_t st = DSM_OK;
    if (rt->remote) {
        /* attached: the application ends when it has ended on every node */
        st = dsm_deleg_remote_join(rt);
        atomic_store_explicit(&rt->stop, 1, memory_order_release);
        dsm_deleg_rt_wake(rt);
    }
    for (unsigned i = 0; i < rt->n; i++) pthread_join(rt->th[i].tid, NULL);
    rt->started = 0;
    atomic_store(&rt->running, 0);
    if (rt->remote) dsm_deleg_remote_finished(rt, st);
    return st;
}

void dsm_deleg_rt_abort(dsm_deleg_rt_t *rt)
{
    if (!rt || !rt->started) return;
    atomic_store_explicit(&rt->stop, 1, memory_order_release);
    dsm_deleg_rt_wake(rt);
    for (unsigned i = 0; i < rt->n; i++) pthread_join(rt->th[i].tid, NULL);
    rt->started = 0;
    atomic_store(&rt->running, 0);
    if (rt->remote) rt->remote->failed = 1;
}

/* After a run that lost a node (its threads have stopped wherever they were):
 * the remote side waits for the other nodes to stop too and clears its
 * state; here the local slots, pairs and counters go back to those of a new
 * runtime. */
dsm_status_t dsm_deleg_rt_recover(dsm_deleg_rt_t *rt, uint32_t timeout_ms)
{
    if (!rt) return DSM_ERR_INVALID;
    if (!rt->remote || dsm_deleg_tls || atomic_load(&rt->running)) return DSM_ERR_STATE;
    if (!rt->remote->failed) {
        /* no run was lost, but a node may have died between runs: its
         * shares of this node's properties go */
        dsm_deleg_shares_settle(rt);
        return DSM_OK;
    }
    dsm_status_t st = dsm_deleg_remote_recover(rt, timeout_ms);
    if (st != DSM_OK) return st;
    unsigned n = rt->n;
    memset(rt->req_primary, 0, (size_t)n * n * SLOT_INFLIGHT * SLOT_PRIMARY);
    memset(rt->resp_primary, 0, (size_t)n * n * SLOT_INFLIGHT * SLOT_PRIMARY);
    memset(rt->req_overflow, 0, (size_t)n * n * SLOT_INFLIGHT * SLOT_OVERFLOW);
    memset(rt->resp_overflow, 0, (size_t)n * n * SLOT_INFLIGHT * SLOT_OVERFLOW);
    for (unsigned i = 0; i < n; i++) {
        deleg_thread_t *th = &rt->th[i];
        dsm_deleg_pairs_free(th);
        memset(th->out, 0, n * sizeof *th->out);
        memset(th->in, 0, n * sizeof *th->in);
        th->depth = 0;
        th->outstanding = th->sent_local = th->served_local = th->wakeups = 0;
        th->window_waiter = NULL;
        th->busy_pairs = 0;
        atomic_store(&th->sent, 0);
        atomic_store(&th->served, 0);
    }
    return DSM_OK;
}

dsm_status_t dsm_deleg_rt_run(dsm_deleg_rt_t *rt, dsm_deleg_main_fn main_fn, void *arg)
{
    dsm_status_t st = dsm_deleg_rt_start(rt, main_fn, arg);
    if (st != DSM_OK) return st;
    return dsm_deleg_rt_join(rt);
}
