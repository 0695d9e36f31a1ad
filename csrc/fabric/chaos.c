/* The fabric's chaos mode (DSM_CHAOS, chaos_spec.h): an adversary within
 * what RDMA allows, so that every protocol is tested against the timing a
 * real rack has and one host does not. Off, it is one pointer test per send
 * and per one-sided write.
 *
 * Messages and late writes to a rank wait in that rank's queue, in order,
 * each until its due time; whatever follows them to the same rank queues
 * behind (one RC connection keeps order), while ranks' queues run
 * independently (connections do not). A releaser thread sends or places
 * what is due; a flush, a get or an atomic to a rank first releases that
 * rank's queue itself, as RC orders them after earlier writes.
 *
 * The deferred emulated requests (defer.c) run under chaos too, and chaos
 * works on them within RC: a queue may be held open (a progress pass does
 * not send it, so more requests join; the releaser sends it when the hold
 * ends), sent at once when a request joins it, and its batch delayed like a
 * message, in its rank's queue. Its issuer's own next send still sends it
 * first, and whatever chaos queues for a rank comes after it, so nothing
 * overtakes a request on its connection.
 *
 * Locks: `qlock` only links and unlinks (a handler running inside UCX's
 * progress may queue); `release_lock` is held while queued items are sent,
 * which takes UCX's worker lock, so it is never taken from a handler except
 * by trylock. The deferred requests' lock comes before both: a release
 * never sends the deferred queue (its items go straight out, and the queue
 * waits behind them). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric/am_wire.h"
#include "fabric/chaos.h"
#include "fabric/chaos_spec.h"
#include "fabric/fabric_int.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/thread.h"

enum { ITEM_AM = 1, ITEM_PUT = 2 };
enum { REAP_NS = 10 * 1000 * 1000 };   /* how often acknowledged emulated puts are freed */

typedef struct chaos_item {
    struct chaos_item *next;
    uint64_t due_ns, seq;
    int kind;
    dsm_am_wire_t header;       /* ITEM_AM */
    uint32_t region;            /* ITEM_PUT */
    uint64_t offset;
    dsm_op_t op;                /* an emulated ITEM_PUT on its way */
    uint64_t incarnation;       /* of the rank when queued: never sent to a later one */
    size_t len;
    uint8_t data[];
} chaos_item_t;

typedef struct chaos_queue {
    chaos_item_t *head, *tail;
    uint64_t enqueued, done;    /* items linked / sent or placed, ever */
    uint64_t hold_until_ns;     /* a cut link: nothing leaves before */
} chaos_queue_t;

struct dsm_chaos {
    dsm_chaos_spec_t spec;
    char text[192];
    pthread_mutex_t qlock;
    pthread_cond_t wake;        /* the releaser: an item came, or stop */
    pthread_cond_t released;    /* a drainer: items left a queue */
    pthread_mutex_t release_lock;
    pthread_t thread;
    int stop, started;
    uint64_t rng, steps;
    chaos_queue_t q[DSM_FABRIC_MAX_PEERS];
    chaos_item_t *inflight;     /* emulated puts sent, their acknowledgements not yet in */
    /* the deferred requests' queue: held open until (0: not), read by
     * progress passes without a lock; the releaser sends it at defer_due */
    _Atomic uint64_t defer_until;
    uint64_t defer_due;         /* qlock */
    dsm_chaos_counts_t counts;
};

/* set on the thread sending queued items: its own sends and writes go
 * straight out */
_Thread_local int dsm_fabric_chaos_releasing;

static uint64_t next_random(struct dsm_chaos *c)
{
    uint64_t z = (c->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int roll(struct dsm_chaos *c, uint32_t pct) { return pct && next_random(c) % 100 < pct; }

static void count_failed(dsm_fabric_t *f, uint32_t rank, const chaos_item_t *it, dsm_status_t st)
{
    __atomic_fetch_add(&f->chaos->counts.dropped, 1, __ATOMIC_RELAXED);
    DSM_DEBUG(DSM_FABRIC_LOG, "chaos: a delayed %s to rank %u failed: %s", it->kind == ITEM_AM ? "message" : "write",
              rank, dsm_strerror(st));
}

/* Sends or places one item; true if it is still on its way (an emulated
 * put, now in c->inflight), false if it may be freed. An emulated put is
 * not waited for here: its acknowledgement may sit in the target's own
 * chaos queue behind a put its releaser waits on, which waits for this
 * releaser. The emulated messages stay in order on the connection, so a
 * read or flush sent after this one still finds the write placed. */
static bool perform(dsm_fabric_t *f, uint32_t rank, chaos_item_t *it)
{
    struct dsm_chaos *c = f->chaos;
    dsm_status_t st;
    if (atomic_load_explicit(&f->peers[rank].incarnation, memory_order_relaxed) != it->incarnation) {
        /* the rank died and connected again: its connection, and this item, are gone */
        count_failed(f, rank, it, DSM_ERR_PEER_DEAD);
        return false;
    }
    if (it->kind == ITEM_AM) {
        st = dsm_fabric_am_send_now(f, rank, &it->header, it->data, it->len);
    } else if (f->emulate_rma) {
        if ((st = dsm_fabric_put_nb(f, rank, it->region, it->offset, it->data, it->len, &it->op)) == DSM_OK) {
            pthread_mutex_lock(&c->qlock);
            it->next = c->inflight;
            c->inflight = it;
            pthread_mutex_unlock(&c->qlock);
            return true;
        }
    } else {
        st = dsm_fabric_put(f, rank, it->region, it->offset, it->data, it->len);
    }
    if (st != DSM_OK)
        count_failed(f, rank, it, st);
    return false;
}

/* Frees the emulated puts that have been acknowledged (all of them, waiting
 * for each, with `wait`). Called without qlock: testing an op progresses the
 * worker, whose handlers may queue. */
static void reap(dsm_fabric_t *f, bool wait)
{
    struct dsm_chaos *c = f->chaos;
    pthread_mutex_lock(&c->qlock);
    chaos_item_t *it = c->inflight;
    c->inflight = NULL;
    pthread_mutex_unlock(&c->qlock);
    while (it != NULL) {
        chaos_item_t *next = it->next;
        if (wait)
            (void)dsm_fabric_wait(&it->op);
        if (wait || dsm_fabric_test(&it->op)) {
            if (it->op.status != DSM_OK)
                count_failed(f, it->op.rank, it, it->op.status);
            free(it);
        } else {
            pthread_mutex_lock(&c->qlock);
            it->next = c->inflight;
            c->inflight = it;
            pthread_mutex_unlock(&c->qlock);
        }
        it = next;
    }
}

/* Sends or places the due items of one rank (all of it with `force`, except
 * during a cut), in order. release_lock held. */
static void release_rank(dsm_fabric_t *f, uint32_t rank, int force)
{
    struct dsm_chaos *c = f->chaos;
    chaos_queue_t *q = &c->q[rank];
    for (;;) {
        pthread_mutex_lock(&c->qlock);
        chaos_item_t *it = q->head;
        uint64_t now = dsm_now_ns();
        if (it == NULL || now < q->hold_until_ns || (!force && it->due_ns > now)) {
            pthread_mutex_unlock(&c->qlock);
            return;
        }
        /* atomic: the releaser looks at a head without qlock */
        __atomic_store_n(&q->head, it->next, __ATOMIC_RELAXED);
        if (q->head == NULL)
            q->tail = NULL;
        pthread_mutex_unlock(&c->qlock);
        dsm_fabric_chaos_releasing = 1;
        uint64_t seq = it->seq;
        bool on_its_way = perform(f, rank, it);
        dsm_fabric_chaos_releasing = 0;
        pthread_mutex_lock(&c->qlock);
        __atomic_store_n(&q->done, seq, __ATOMIC_RELAXED);   /* chaos_order_all looks without qlock */
        pthread_cond_broadcast(&c->released);
        pthread_mutex_unlock(&c->qlock);
        if (!on_its_way)
            free(it);
    }
}

static void *releaser(void *arg)
{
    dsm_fabric_t *f = arg;
    struct dsm_chaos *c = f->chaos;
    dsm_thread_name("dsm-chaos", -1);
    pthread_mutex_lock(&c->qlock);
    while (!c->stop) {
        uint64_t next = UINT64_MAX;
        for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++) {
            chaos_queue_t *q = &c->q[r];
            if (q->head == NULL)
                continue;
            uint64_t due = q->head->due_ns > q->hold_until_ns ? q->head->due_ns : q->hold_until_ns;
            if (due < next)
                next = due;
        }
        if (c->defer_due != 0 && c->defer_due < next)
            next = c->defer_due;
        uint64_t now = dsm_now_ns();
        if (c->defer_due != 0 && c->defer_due <= now) {
            /* a held queue's time is up: it leaves as its issuer's send
             * would send it, through the rank's queue (not releasing) */
            c->defer_due = 0;
            pthread_mutex_unlock(&c->qlock);
            dsm_fabric_defer_flush_slow(f, false);
            pthread_mutex_lock(&c->qlock);
            continue;
        }
        if (c->inflight != NULL && next > now + REAP_NS)
            next = now + REAP_NS;   /* come back to free what was acknowledged */
        if (next > now) {
            if (next == UINT64_MAX) {
                pthread_cond_wait(&c->wake, &c->qlock);
            } else {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t at = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (next - now);
                ts.tv_sec = (time_t)(at / 1000000000ull);
                ts.tv_nsec = (long)(at % 1000000000ull);
                pthread_cond_timedwait(&c->wake, &c->qlock, &ts);
            }
            continue;
        }
        pthread_mutex_unlock(&c->qlock);
        pthread_mutex_lock(&c->release_lock);
        for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++)
            if (__atomic_load_n(&c->q[r].head, __ATOMIC_RELAXED))   /* a look; release_rank checks under qlock */
                release_rank(f, r, 0);
        pthread_mutex_unlock(&c->release_lock);
        reap(f, false);
        pthread_mutex_lock(&c->qlock);
    }
    pthread_mutex_unlock(&c->qlock);
    return NULL;
}

dsm_status_t dsm_fabric_chaos_start(dsm_fabric_t *f, const char *spec_text)
{
    const char *env = spec_text ? spec_text : getenv("DSM_CHAOS");
    if (env == NULL || *env == '\0')
        return DSM_OK;
    dsm_chaos_spec_t spec;
    char err[160];
    if (dsm_chaos_spec_parse(env, &spec, err, sizeof err) != DSM_OK) {
        DSM_ERROR(DSM_FABRIC_LOG, "%s", err);
        return DSM_ERR_INVALID;
    }
    if (!dsm_chaos_spec_active(&spec))
        return DSM_OK;
    if (spec.random_seed)
        spec.seed = dsm_now_ns() ^ ((uint64_t)getpid() << 32);
    struct dsm_chaos *c = calloc(1, sizeof *c);
    if (c == NULL)
        return DSM_ERR_NOMEM;
    c->spec = spec;
    c->rng = spec.seed;
    dsm_chaos_spec_format(&spec, c->text, sizeof c->text);
    pthread_mutex_init(&c->qlock, NULL);
    pthread_mutex_init(&c->release_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->wake, &ca);
    pthread_cond_init(&c->released, &ca);
    pthread_condattr_destroy(&ca);
    f->chaos = c;
    if (dsm_thread_start(&c->thread, NULL, releaser, f) != 0) {
        f->chaos = NULL;
        free(c);
        return DSM_ERR_NOMEM;
    }
    c->started = 1;
    DSM_WARN(DSM_FABRIC_LOG, "chaos mode: DSM_CHAOS=%s (repeat a failing run with it)", c->text);
    return DSM_OK;
}

void dsm_fabric_chaos_stop(dsm_fabric_t *f)
{
    struct dsm_chaos *c = f->chaos;
    if (c == NULL)
        return;
    /* what is still queued goes out now, as a connection drains at close;
     * the deferred requests first join their rank's queue */
    dsm_fabric_defer_flush_slow(f, false);
    pthread_mutex_lock(&c->release_lock);
    for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++) {
        c->q[r].hold_until_ns = 0;
        release_rank(f, r, 1);
    }
    pthread_mutex_unlock(&c->release_lock);
    pthread_mutex_lock(&c->qlock);
    c->stop = 1;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->qlock);
    if (c->started)
        pthread_join(c->thread, NULL);
    reap(f, true);
    f->chaos = NULL;
    DSM_INFO(DSM_FABRIC_LOG,
             "chaos: %llu messages delayed, %llu writes late, %llu split, %llu dropped; %llu requests deferred "
             "in %llu batches: %llu batches delayed, %llu queues held open, %llu sent early (DSM_CHAOS=%s)",
             (unsigned long long)c->counts.delayed, (unsigned long long)c->counts.late,
             (unsigned long long)c->counts.split, (unsigned long long)c->counts.dropped,
             (unsigned long long)atomic_load(&f->defer.requests), (unsigned long long)atomic_load(&f->defer.batches),
             (unsigned long long)c->counts.defer_held, (unsigned long long)c->counts.defer_opened,
             (unsigned long long)c->counts.defer_early, c->text);
    for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++)
        while (c->q[r].head) {
            chaos_item_t *it = c->q[r].head;
            c->q[r].head = it->next;
            free(it);
        }
    pthread_mutex_destroy(&c->qlock);
    pthread_mutex_destroy(&c->release_lock);
    pthread_cond_destroy(&c->wake);
    pthread_cond_destroy(&c->released);
    free(c);
}

/* A send step: the kill and the cut happen here. qlock held. */
static void step(dsm_fabric_t *f, struct dsm_chaos *c, uint64_t now)
{
    c->steps++;
    if (c->spec.kill_step && c->steps == c->spec.kill_step) {
        DSM_ERROR(DSM_FABRIC_LOG, "chaos: rank %u exits at send step %llu (DSM_CHAOS=%s)", dsm_fabric_rank(f),
                  (unsigned long long)c->steps, c->text);
        _exit(137);
    }
    if (c->spec.cut_rank < DSM_FABRIC_MAX_PEERS && c->steps == c->spec.cut_step) {
        c->q[c->spec.cut_rank].hold_until_ns = now + (uint64_t)c->spec.cut_ms * 1000000ull;
        DSM_WARN(DSM_FABRIC_LOG, "chaos: link to rank %u cut for %u ms at send step %llu (DSM_CHAOS=%s)",
                 c->spec.cut_rank, c->spec.cut_ms, (unsigned long long)c->steps, c->text);
    }
}

dsm_status_t dsm_fabric_chaos_cut(dsm_fabric_t *f, uint32_t rank, uint32_t ms)
{
    struct dsm_chaos *c = f ? f->chaos : NULL;
    if (c == NULL || rank >= DSM_FABRIC_MAX_PEERS)
        return c == NULL ? DSM_ERR_STATE : DSM_ERR_INVALID;
    pthread_mutex_lock(&c->qlock);
    c->q[rank].hold_until_ns = dsm_now_ns() + (uint64_t)ms * 1000000ull;
    pthread_mutex_unlock(&c->qlock);
    DSM_WARN(DSM_FABRIC_LOG, "chaos: link to rank %u cut for %u ms (asked for)", rank, ms);
    return DSM_OK;
}

/* Queues an item for `rank` if the roll says so or the rank's queue is not
 * empty (order); true if it took it. */
static bool enqueue(dsm_fabric_t *f, uint32_t rank, int kind, uint32_t pct, const dsm_am_wire_t *h,
                    uint32_t region, uint64_t offset, const void *a, size_t a_len, const void *b, size_t b_len)
{
    struct dsm_chaos *c = f->chaos;
    if (dsm_fabric_chaos_releasing || rank >= DSM_FABRIC_MAX_PEERS || dsm_fabric_peer_state(f, rank) != DSM_OK)
        return false;   /* a send to a peer that is not there fails as usual */
    chaos_queue_t *q = &c->q[rank];
    pthread_mutex_lock(&c->qlock);
    uint64_t now = dsm_now_ns();
    step(f, c, now);
    bool behind = q->head != NULL || q->enqueued != q->done || now < q->hold_until_ns;
    bool delay = roll(c, pct);
    if (!behind && !delay) {
        pthread_mutex_unlock(&c->qlock);
        return false;
    }
    chaos_item_t *it = malloc(sizeof *it + a_len + b_len);
    if (it == NULL) {
        pthread_mutex_unlock(&c->qlock);
        if (behind)   /* cannot queue, must not overtake: let the queue go first */
            dsm_fabric_chaos_order(f, rank);
        return false;
    }
    memset(it, 0, sizeof *it);
    it->kind = kind;
    if (h)
        it->header = *h;
    it->region = region;
    it->offset = offset;
    it->len = a_len + b_len;
    it->incarnation = atomic_load_explicit(&f->peers[rank].incarnation, memory_order_relaxed);
    if (a_len)
        memcpy(it->data, a, a_len);
    if (b_len)
        memcpy(it->data + a_len, b, b_len);
    it->due_ns = now + (delay && c->spec.max_delay_us ? next_random(c) % (c->spec.max_delay_us * 1000ull) : 0);
    it->seq = q->enqueued + 1;
    __atomic_store_n(&q->enqueued, it->seq, __ATOMIC_RELAXED);
    if (q->tail)
        q->tail->next = it;
    else
        __atomic_store_n(&q->head, it, __ATOMIC_RELAXED);
    q->tail = it;
    if (delay && kind == ITEM_AM)
        __atomic_fetch_add(dsm_fabric_defer_sending ? &c->counts.defer_held : &c->counts.delayed, 1,
                           __ATOMIC_RELAXED);
    if (kind == ITEM_PUT)
        __atomic_fetch_add(&c->counts.late, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->qlock);
    return true;
}

bool dsm_fabric_chaos_send(dsm_fabric_t *f, uint32_t rank, const dsm_am_wire_t *h, const void *a, size_t a_len,
                           const void *b, size_t b_len)
{
    /* a batch of deferred requests is delayed at the rate chosen for them */
    uint32_t pct = dsm_fabric_defer_sending ? f->chaos->spec.defer_pct : f->chaos->spec.delay_pct;
    return enqueue(f, rank, ITEM_AM, pct, h, 0, 0, a, a_len, b, b_len);
}

bool dsm_fabric_chaos_put(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset, const void *src,
                          size_t len)
{
    return enqueue(f, rank, ITEM_PUT, f->chaos->spec.late_pct, NULL, region, offset, src, len, NULL, 0);
}

void dsm_fabric_chaos_order(dsm_fabric_t *f, uint32_t rank)
{
    struct dsm_chaos *c = f->chaos;
    if (dsm_fabric_chaos_releasing || rank >= DSM_FABRIC_MAX_PEERS)
        return;
    chaos_queue_t *q = &c->q[rank];
    pthread_mutex_lock(&c->qlock);
    uint64_t target = q->enqueued;
    pthread_mutex_unlock(&c->qlock);
    while (true) {
        pthread_mutex_lock(&c->qlock);
        bool done = q->done >= target || dsm_fabric_peer_state(f, rank) != DSM_OK;
        pthread_mutex_unlock(&c->qlock);
        if (done)
            return;
        /* a handler must not wait for the releaser (it may wait for UCX's
         * worker lock, which the handler's thread holds) */
        if (dsm_fabric_handler_depth > 0) {
            if (pthread_mutex_trylock(&c->release_lock) != 0) {
                __atomic_fetch_add(&c->counts.unordered, 1, __ATOMIC_RELAXED);
                return;
            }
        } else {
            pthread_mutex_lock(&c->release_lock);
        }
        release_rank(f, rank, 1);
        pthread_mutex_unlock(&c->release_lock);
        pthread_mutex_lock(&c->qlock);
        if (q->done < target && dsm_now_ns() < q->hold_until_ns) {
            /* a cut link: wait for it to come back, as a flush would */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&c->released, &c->qlock, &ts);
        }
        pthread_mutex_unlock(&c->qlock);
    }
}

void dsm_fabric_chaos_order_all(dsm_fabric_t *f)
{
    for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++)
        if (__atomic_load_n(&f->chaos->q[r].enqueued, __ATOMIC_RELAXED) !=
            __atomic_load_n(&f->chaos->q[r].done, __ATOMIC_RELAXED))   /* a look; _order checks under qlock */
            dsm_fabric_chaos_order(f, r);
}

void dsm_fabric_chaos_copy(dsm_fabric_t *f, void *dst, const void *src, size_t len)
{
    struct dsm_chaos *c = f->chaos;
    enum { PIECES = 64 };
    size_t n = (len + 7) / 8;
    if (n < 2 || n > PIECES) {
        memcpy(dst, src, len);
        return;
    }
    pthread_mutex_lock(&c->qlock);
    int split = roll(c, c->spec.split_pct);
    uint8_t order[PIECES];
    for (size_t i = 0; i < n; i++)
        order[i] = (uint8_t)i;
    if (split) {
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = next_random(c) % (i + 1);
            uint8_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        __atomic_fetch_add(&c->counts.split, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&c->qlock);
    if (!split) {
        memcpy(dst, src, len);
        return;
    }
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k], off = i * 8, m = len - off < 8 ? len - off : 8;
        memcpy((uint8_t *)dst + off, (const uint8_t *)src + off, m);
        atomic_signal_fence(memory_order_seq_cst);   /* keep the pieces in this order */
        if (k == n / 2)
            sched_yield();   /* a reader may look now */
    }
}

/* ---- the deferred requests' queue (defer.c; its lock held) ---------------- */

void dsm_fabric_chaos_defer_opened(dsm_fabric_t *f)
{
    struct dsm_chaos *c = f->chaos;
    pthread_mutex_lock(&c->qlock);
    if (c->spec.max_delay_us && roll(c, c->spec.defer_pct)) {
        uint64_t until = dsm_now_ns() + 1 + next_random(c) % (c->spec.max_delay_us * 1000ull);
        atomic_store_explicit(&c->defer_until, until, memory_order_relaxed);
        c->defer_due = until;   /* any earlier hold was another queue's, sent since */
        __atomic_fetch_add(&c->counts.defer_opened, 1, __ATOMIC_RELAXED);
        pthread_cond_signal(&c->wake);
    }
    pthread_mutex_unlock(&c->qlock);
}

bool dsm_fabric_chaos_defer_send(dsm_fabric_t *f, bool due)
{
    struct dsm_chaos *c = f->chaos;
    if (dsm_fabric_chaos_defer_held(f))
        return false;   /* the releaser sends it when the hold ends */
    if (due)
        return true;
    pthread_mutex_lock(&c->qlock);
    bool early = roll(c, c->spec.defer_pct);
    pthread_mutex_unlock(&c->qlock);
    if (early)
        __atomic_fetch_add(&c->counts.defer_early, 1, __ATOMIC_RELAXED);
    return early;
}

bool dsm_fabric_chaos_defer_held(dsm_fabric_t *f)
{
    uint64_t until = atomic_load_explicit(&f->chaos->defer_until, memory_order_relaxed);
    return until != 0 && dsm_now_ns() < until;
}

void dsm_fabric_chaos_defer_closed(dsm_fabric_t *f)
{
    atomic_store_explicit(&f->chaos->defer_until, 0, memory_order_relaxed);
}

void dsm_fabric_chaos_counts(dsm_fabric_t *f, dsm_chaos_counts_t *out)
{
    memset(out, 0, sizeof *out);
    if (f == NULL || f->chaos == NULL)
        return;
    const dsm_chaos_counts_t *c = &f->chaos->counts;
    out->on = 1;
    out->delayed = __atomic_load_n(&c->delayed, __ATOMIC_RELAXED);
    out->late = __atomic_load_n(&c->late, __ATOMIC_RELAXED);
    out->split = __atomic_load_n(&c->split, __ATOMIC_RELAXED);
    out->dropped = __atomic_load_n(&c->dropped, __ATOMIC_RELAXED);
    out->unordered = __atomic_load_n(&c->unordered, __ATOMIC_RELAXED);
    out->defer_held = __atomic_load_n(&c->defer_held, __ATOMIC_RELAXED);
    out->defer_opened = __atomic_load_n(&c->defer_opened, __ATOMIC_RELAXED);
    out->defer_early = __atomic_load_n(&c->defer_early, __ATOMIC_RELAXED);
}

size_t dsm_fabric_chaos_describe(dsm_fabric_t *f, uint32_t rank, char *buf, size_t len)
{
    struct dsm_chaos *c = f->chaos;
    if (c == NULL || rank >= DSM_FABRIC_MAX_PEERS || len == 0)
        return 0;
    pthread_mutex_lock(&c->qlock);
    const chaos_queue_t *q = &c->q[rank];
    uint64_t now = dsm_now_ns(), held = 0, defer_until = atomic_load_explicit(&c->defer_until, memory_order_relaxed);
    char head[48] = "";
    if (q->head)
        snprintf(head, sizeof head, "; head due in %lld us", ((long long)q->head->due_ns - (long long)now) / 1000);
    for (const chaos_item_t *it = q->head; it; it = it->next)
        held++;
    unsigned inflight = 0;
    for (const chaos_item_t *it = c->inflight; it; it = it->next)
        inflight++;
    int n = snprintf(buf, len,
                     "chaos (DSM_CHAOS=%s): queue to rank %u holds %llu (%llu queued, %llu sent ever%s), cut for "
                     "%lld us more, %u late emulated writes unacknowledged, deferred queue held for %lld us more; "
                     "%llu delayed, %llu late, %llu dropped, %llu unordered",
                     c->text, rank, (unsigned long long)held, (unsigned long long)q->enqueued,
                     (unsigned long long)q->done, head,
                     now < q->hold_until_ns ? (long long)(q->hold_until_ns - now) / 1000 : 0LL, inflight,
                     defer_until > now ? (long long)(defer_until - now) / 1000 : 0LL,
                     (unsigned long long)c->counts.delayed, (unsigned long long)c->counts.late,
                     (unsigned long long)c->counts.dropped, (unsigned long long)c->counts.unordered);
    pthread_mutex_unlock(&c->qlock);
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}
