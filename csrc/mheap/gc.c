/* Collections of the managed heap, driven by the CPU server.
 *
 * MSCT: after a collection, a round of TRACE requests, one per region in
 * use, each with the region's roots as of that collection (the handles then
 * pointing into it, and its remset's target queue), traced up to the bp of
 * that collection (old_bp: the layout below it does not change until the
 * next one). A driver thread writes each region back and sends its TRACE;
 * the memory servers trace on their own memory and keep the result unless
 * the region's tag moved. In the G1-like baseline (cpu_marking, no msct)
 * the driver thread is G1's concurrent marker instead: it marks from the
 * roots through the cache, across young pauses, and its pauses are G1's
 * (young ones when eden is full, mixed ones once a marking is done).
 *
 * CSSC (stop the world): flush the barrier queues; clean the remsets (one
 * SLOTS read per server); write back the dirty pages of the regions the
 * servers collect; REMARK them, a BATCH per server (with a kept trace: the
 * SATB log's entries in it as extra roots, plus everything allocated since
 * the last collection; without one: a fresh trace from the handles, the
 * remset targets and the log); collect mostly cached regions on the CPU
 * server; then bin the server regions with enough garbage (regions of one
 * server that reference each other together, as far as they fit in one),
 * evict them, EVAC each bin into its first region (a BATCH per server),
 * and fix every pointer into them: the handles, the remsets' source slots
 * (in the CPU cache if cached, else one FIXUP per server), and the remsets,
 * merged into each bin's destination. Finally reset: old_bp = bp, an empty
 * SATB log, the roots snapshot, a new epoch.
 *
 * Full GC (the fallback, and the stop-the-world baseline): the CPU server
 * marks the whole heap through its cache (pulling pages), slides each
 * region's survivors down in address order, fixes every reference and
 * handle, and rebuilds the remsets from the survivors. It reclaims garbage
 * cycles that span regions, which per-region tracing keeps alive through
 * remsets. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mheap/cpu.h"
#include "mheap/msg.h"
#include "mheap/trace.h"
#include "util/clock.h"
#include "util/thread.h"

/* ---- MSCT rounds ------------------------------------------------------------ */

static void jobs_free(dsm_mheap_t *h)
{
    for (uint32_t i = 0; i < h->njobs; i++)
        dsm_writer_free(&h->jobs[i].req);
    free(h->jobs);
    h->jobs = NULL;
    h->njobs = 0;
}

/* Room for one more of `each` bytes in *p (n used of *cap, doubled when
 * full): 0, or -1 with *p unchanged. */
static int grow(void **p, size_t *cap, size_t n, size_t each)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 256;
    void *q = realloc(*p, c * each);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int in_region(const region_t *r, uint32_t rb, uint64_t a) { return a >= r->start && a - r->start < rb; }

/* Whether at least 7/8 of a region's used pages are in the cache: such a
 * region is collected by the CPU server itself (Task 3), the others by
 * their memory server. Not half: reading a half-cached region through a
 * small cache pulls the rest and evicts (writes back) other regions' pages:
 * most of a CSSC's fabric bytes at small caches. */
static int mostly_cached(dsm_mheap_t *h, const region_t *r)
{
    uint32_t first = (uint32_t)((r->start - DSM_MHEAP_UBASE) / DSM_MHEAP_PAGE);
    uint32_t n = (r->bp + DSM_MHEAP_PAGE - 1) / DSM_MHEAP_PAGE, cached = 0;
    for (uint32_t i = 0; i < n; i++)
        cached += h->pages[first + i].state == PAGE_CACHED;
    return (uint64_t)cached * 8 >= (uint64_t)n * 7;
}

/* Whether a round traces region r: the memory servers trace what is not
 * mostly cached. */
static int round_takes(dsm_mheap_t *h, const region_t *r)
{
    return r->in_use && r->old_bp > DSM_MHEAP_REGION_HDR && !mostly_cached(h, r);
}

static int g1_like(const dsm_mheap_t *h) { return h->cfg.cpu_marking && !h->cfg.msct; }

/* The G1-like baseline's marking: a snapshot as of the last collection
 * (its roots, each old region's top at mark start), every region in it
 * with its CPU-side trace emptied and the grey stack seeded with those
 * roots (heap lock held). Young pauses may come before it is used: they
 * move only young regions, never one in the snapshot, so the marking
 * goes on across them. */
static dsm_status_t mark_prepare(dsm_mheap_t *h)
{
    h->mark_epoch++;
    for (uint32_t i = 0; i < h->nregions; i++) {
        region_t *r = &h->regions[i];
        if (!r->in_use || r->old_bp <= DSM_MHEAP_REGION_HDR)
            continue;
        if (r->ct.bitmap == NULL && dsm_mheap_rtrace_init(&r->ct, h->region_bytes) != DSM_OK)
            return DSM_ERR_NOMEM;
        dsm_mheap_rtrace_reset(&r->ct);
        r->ct.epoch = h->mark_epoch;
        r->tams = r->old_bp;
    }
    h->mark_stack.n = 0;
    h->mark_waiting.n = 0;
    for (size_t k = 0; k < h->snap_roots.n; k++)
        if (u64vec_push(&h->mark_stack, h->snap_roots.v[k]) != 0)
            return DSM_ERR_NOMEM;
    h->mark_live = 1;
    h->mark_drained = 0;
    h->mark_concurrent = 0;
    h->mark_alloc0 = h->st.bytes_allocated;
    return DSM_OK;
}

/* A concurrent marking ends: drained by the marker, or finished by a pause
 * (a mixed one that could not wait, a full GC, a new marking) before it.
 * Then it started too late: what it saw allocated so far, doubled, is
 * what the next one is given (adaptive IHOP). A drained one moves the
 * budget a quarter of the way to what it saw, as G1's decaying predictor
 * does: one quiet marking must not make the next start at the last
 * moment. */
static void mark_ended(dsm_mheap_t *h, int drained)
{
    if (!h->mark_live || !h->mark_concurrent || h->mark_drained)
        return;
    h->st.marks_started++;
    uint64_t seen = h->st.bytes_allocated - h->mark_alloc0;
    if (drained) {
        h->mark_drained = 1;
        h->mark_alloc = seen >= h->mark_alloc ? seen : h->mark_alloc - (h->mark_alloc - seen) / 4;
        h->st.marks_finished++;
    } else if (2 * seen > h->mark_alloc) {
        h->mark_alloc = 2 * seen;
    }
}

/* Whether region r is in the marking under way (or just finished). */
static int marked_region(const dsm_mheap_t *h, const region_t *r)
{
    return r->in_use && r->ct.bitmap && h->mark_epoch && r->ct.epoch == h->mark_epoch;
}

/* Mark the object at a (in r, not yet marked) in r's CPU-side trace and
 * push its references: its header, then only its reference fields. */
static dsm_status_t mark_object(dsm_mheap_t *h, region_t *r, uint64_t a, u64vec_t *stack)
{
    const dsm_mheap_tinfo_t *ti;
    dsm_status_t st = mheap_object_type(h, a, &ti);
    if (st == DSM_ERR_BAD_ADDR)
        return mheap_unsound(h, "marking: a corrupt header at", a);
    if (st != DSM_OK)
        return st;
    uint32_t off = (uint32_t)(a - r->start);
    bit_on(r->ct.bitmap, off / 8);
    r->ct.order[r->ct.norder++] = off;
    r->ct.live_bytes += ti->size;
    r->ct.traced_bytes += ti->size;
    __atomic_fetch_add(&h->st.bytes_traced_cpu, ti->size, __ATOMIC_RELAXED);
    for (uint32_t k = 0; k < ti->nrefs && st == DSM_OK; k++) {
        uint64_t v;
        if ((st = cache_load64(h, a + DSM_MHEAP_OBJ_HDR + ti->refs[k], &v)) == DSM_OK && v &&
            u64vec_push(stack, v) != 0)
            st = DSM_ERR_NOMEM;
    }
    return st;
}

/* The first word of the object at a (its header, then its reference
 * fields) on an evicted page, or 0. */
static uint64_t evicted_part(dsm_mheap_t *h, uint64_t a)
{
    if (cache_is_evicted(h, a))
        return a;
    const dsm_mheap_tinfo_t *ti;
    if (mheap_object_type(h, a, &ti) != DSM_OK)
        return 0;   /* mark_object reports it */
    for (uint32_t k = 0; k < ti->nrefs; k++)
        if (cache_is_evicted(h, a + DSM_MHEAP_OBJ_HDR + ti->refs[k]))
            return a + DSM_MHEAP_OBJ_HDR + ti->refs[k];
    return 0;
}

/* The pages one marker turn reads, and (in h->mark_waiting, where a pause
 * finds them) the grey objects that wait for them. */
enum { MARK_FETCHES = CACHE_FETCH_MAX };
typedef struct mark_wants {
    cache_fetch_t fetch[MARK_FETCHES];
    uint32_t n, pages;
} mark_wants_t;

/* Room for one more plan in a turn: at most MARK_FETCHES, and (after the
 * first) pages for at most a quarter of the cache, so that installing
 * them does not evict what the turn's waiting objects need. */
static int wants_room(const dsm_mheap_t *h, const mark_wants_t *w)
{
    return w->n < MARK_FETCHES && (w->n == 0 || w->pages + CACHE_RA_MAX <= h->budget / 4);
}

static int wants_page(const mark_wants_t *w, uint64_t a)
{
    uint64_t page = (a - DSM_MHEAP_UBASE) / DSM_MHEAP_PAGE;
    for (uint32_t k = 0; k < w->n; k++)
        if (page >= w->fetch[k].page && page < (uint64_t)w->fetch[k].page + w->fetch[k].n)
            return 1;
    return 0;
}

/* Waiting grey objects back on the stack (a pause drains them, or the
 * marker once their pages are in). */
static dsm_status_t mark_unwait(dsm_mheap_t *h)
{
    for (size_t k = 0; k < h->mark_waiting.n; k++)
        if (u64vec_push(&h->mark_stack, h->mark_waiting.v[k]) != 0)
            return DSM_ERR_NOMEM;
    h->mark_waiting.n = 0;
    return DSM_OK;
}

static dsm_status_t mark_drain(dsm_mheap_t *h, uint32_t budget, mark_wants_t *w);

/* The waiting objects, once their pages are in: each alone, so that what
 * they reference waits on the stack for the next drain instead of
 * faulting here. After an error the rest go back on the stack. */
static dsm_status_t mark_waited(dsm_mheap_t *h)
{
    dsm_status_t st = DSM_OK;
    size_t n = h->mark_waiting.n;
    h->mark_waiting.n = 0;
    for (size_t k = 0; k < n; k++) {
        if (u64vec_push(&h->mark_stack, h->mark_waiting.v[k]) != 0)
            return DSM_ERR_NOMEM;
        if (st == DSM_OK)
            st = mark_drain(h, 1, NULL);
    }
    return st;
}

/* Grey objects of the marking, at most `budget` taken off the stack (0:
 * all), through the cache: an object's header, then only its reference
 * fields, so only pages holding live objects are touched. Objects
 * allocated since the snapshot (at or above tams, or in a region outside
 * it) are live without a trace (SATB). With `w`, an object on an evicted
 * page is set aside and its page planned (while wants_room allows);
 * without, it faults.
 * A reference to no object is an unsound heap. Heap lock held. */
static dsm_status_t mark_drain(dsm_mheap_t *h, uint32_t budget, mark_wants_t *w)
{
    dsm_status_t st = DSM_OK;
    for (uint32_t taken = 0; st == DSM_OK && h->mark_stack.n > 0 && (budget == 0 || taken < budget); taken++) {
        uint64_t a = h->mark_stack.v[--h->mark_stack.n];
        region_t *r = region_of(h, a);
        if (r == NULL || !marked_region(h, r) || a - r->start >= r->tams)
            continue;   /* new since the snapshot */
        uint32_t off = (uint32_t)(a - r->start);
        if (a % 8 || off < DSM_MHEAP_REGION_HDR || !bit_test(r->starts, off / 8))
            return mheap_unsound(h, "marking: a reference to no object at", a);
        if (bit_test(r->ct.bitmap, off / 8))
            continue;
        uint64_t need = w ? evicted_part(h, a) : 0;
        if (need) {
            if (!wants_page(w, need)) {
                if (!wants_room(h, w)) {
                    h->mark_stack.n++;   /* a is still grey: next turn */
                    return DSM_OK;
                }
                cache_fetch_plan(h, need, &w->fetch[w->n]);
                w->pages += w->fetch[w->n++].n;
            }
            if (u64vec_push(&h->mark_waiting, a) != 0)
                return DSM_ERR_NOMEM;
            continue;
        }
        st = mark_object(h, r, a, &h->mark_stack);
    }
    return st;
}

/* The marker thread's concurrent marking: a step of grey objects per turn
 * at the heap lock, taken fairly (the mutator lets it in before its next
 * operation), until the stack is empty or a pause stops it. The pages it
 * needs that are not in the cache, up to MARK_FETCHES a turn (each with
 * readahead; a quarter of the cache at most), are read without the lock,
 * so that the program runs while the marker waits, and as one batch, in
 * flight together, as the faults of G1's concurrent marking threads are:
 * a marking waits about a round trip per turn, not one per page, and
 * finishes before the program has filled the heap. One turn at the lock
 * per batch, not per page, since G1's marker takes no lock between its
 * faults. The marker caches them at its next turn, unless the program wrote a page
 * back meanwhile. A young pause resumes the marking after it (with the
 * SATB log's entries as more grey objects); a mixed pause finishes what
 * is left. */
static void mark_concurrent(dsm_mheap_t *h)
{
    /* Grey objects per turn: a turn holds the lock for well under G1's
     * 10 ms marking step, and few turns mean few hand-offs of the lock,
     * each a wake-up the scheduler may delay on a busy host. */
    enum { STEP = 4096 };
    uint8_t *buf = malloc((size_t)MARK_FETCHES * CACHE_RA_MAX * DSM_MHEAP_PAGE);
    mark_wants_t w = {0};
    for (;;) {
        if (mheap_lock_gc(h) != 0)
            break;
        uint64_t t0 = dsm_now_ns();
        if (!h->mark_live) {
            mheap_unlock(h);
            break;
        }
        dsm_status_t st = DSM_OK;
        for (uint32_t k = 0, at = 0; k < w.n && st == DSM_OK; at += w.fetch[k++].n)
            st = cache_fetch_install(h, &w.fetch[k], buf + (size_t)at * DSM_MHEAP_PAGE);
        /* The objects that waited for those pages go first, faulting if
         * they must (a page may be gone again): each turn makes progress.
         * Waiting objects of a turn a pause ended plan their pages anew. */
        if (st == DSM_OK)
            st = w.n ? mark_waited(h) : mark_unwait(h);
        w.n = w.pages = 0;
        if (st == DSM_OK)
            st = mark_drain(h, STEP, buf ? &w : NULL);
        int finished = st == DSM_OK && h->mark_stack.n == 0 && h->mark_waiting.n == 0;
        if (finished)
            mark_ended(h, 1);
        t0 = mheap_phase(h, DSM_MHEAP_PHASE_MARK, t0);
        mheap_unlock(h);
        if (finished || st != DSM_OK)
            break;   /* an error is the pause's to report: it drains the stack again */
        st = cache_fetch_read(h, w.fetch, w.n, buf);
        mheap_phase(h, DSM_MHEAP_PHASE_MARK_READ, t0);
        if (st != DSM_OK)
            break;   /* likewise */
    }
    free(buf);
}

/* Wake the marker thread to go on with the marking under way. */
static dsm_status_t mark_resume(dsm_mheap_t *h)
{
    pthread_mutex_lock(&h->msct_mu);
    h->msct_pending = 1;
    pthread_cond_broadcast(&h->msct_cv);
    pthread_mutex_unlock(&h->msct_mu);
    return DSM_OK;
}

/* Append a TRACE job for every region a round takes now (all of them, or
 * with `kept`, those without a kept trace in it): the region's roots as
 * of the last collection, the handles then and its remset's targets (for
 * a later pass, those queued since too: more roots mark more, never
 * less). Heap lock held; jobs is the caller's (no round in flight, or the
 * driver's own). On failure none is added. */
static dsm_status_t jobs_add(dsm_mheap_t *h, const uint8_t *kept)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < h->nregions; i++)
        n += round_takes(h, &h->regions[i]) && !(kept && kept[i]);
    if (n == 0)
        return DSM_OK;
    uint32_t before = h->njobs;
    trace_job_t *jobs = realloc(h->jobs, (h->njobs + n) * sizeof *jobs);
    if (jobs == NULL)
        return DSM_ERR_NOMEM;
    h->jobs = jobs;
    memset(jobs + h->njobs, 0, n * sizeof *jobs);
    dsm_status_t st = DSM_OK;
    pthread_mutex_lock(&h->rs_mu);
    for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++) {
        region_t *r = &h->regions[i];
        if (!round_takes(h, r) || (kept && kept[i]))
            continue;   /* mostly cached regions are the CPU server's to collect */
        trace_job_t *j = &h->jobs[h->njobs++];
        j->region = i;
        dsm_writer_t roots = {0};
        for (size_t k = 0; k < h->snap_roots.n; k++)
            if (in_region(r, h->region_bytes, h->snap_roots.v[k]))
                dsm_write_u64(&roots, h->snap_roots.v[k]);
        for (uint32_t k = 0; k < r->targets.cap; k++)
            if (r->targets.v[k])
                dsm_write_u64(&roots, r->targets.v[k]);
        dsm_mheap_msg_t m = {.type = DSM_MHEAP_MSG_TRACE, .heap_id = h->heap_id, .region = r->local,
                             .epoch = h->epoch, .bp = r->old_bp, .nroots = (uint32_t)(roots.len / 8),
                             .roots = roots.buf};
        dsm_mheap_msg_encode(&m, &j->req);
        if (!j->req.ok || (!roots.ok && roots.len))
            st = DSM_ERR_NOMEM;
        dsm_writer_free(&roots);
    }
    pthread_mutex_unlock(&h->rs_mu);
    for (; st != DSM_OK && h->njobs > before; h->njobs--)   /* none added after all */
        dsm_writer_free(&h->jobs[h->njobs - 1].req);
    return st;
}

/* Continuous tracing (the driver, once every trace of the round so far
 * was answered): the regions a server would trace now and of which the
 * round kept no trace (a write-back overlapped it, or the region was
 * mostly cached when the round began and was evicted since) are traced
 * again, so that the pause finds them traced rather than tracing them
 * itself. Jobs that failed otherwise are not retried. The jobs added, 0
 * when there are none or a pause came. */
static uint32_t msct_more(dsm_mheap_t *h)
{
    if (mheap_lock_gc(h) != 0)
        return 0;
    uint64_t t0 = dsm_now_ns();
    uint32_t before = h->njobs;
    uint8_t *kept = calloc(h->nregions, 1);
    if (kept != NULL && h->epoch == h->jobs_epoch && !__atomic_load_n(&h->msct_abort, __ATOMIC_ACQUIRE)) {
        for (uint32_t i = 0; i < h->njobs; i++)
            if (h->jobs[i].ok || (h->jobs[i].status != DSM_OK && h->jobs[i].status != DSM_ERR_CLOSED))
                kept[h->jobs[i].region] = 1;
        (void)jobs_add(h, kept);   /* none added if it fails: the round ends */
    }
    free(kept);
    mheap_phase(h, DSM_MHEAP_PHASE_TRACE_WB, t0);
    mheap_unlock(h);
    return h->njobs - before;
}

dsm_status_t msct_start_locked(dsm_mheap_t *h)
{
    jobs_free(h);
    if (g1_like(h)) {
        mark_ended(h, 0);
        dsm_status_t st = mark_prepare(h);
        if (st != DSM_OK)
            return st;
        h->mark_concurrent = 1;
        return mark_resume(h);
    }
    h->jobs_epoch = h->epoch;
    dsm_status_t st = jobs_add(h, NULL);
    if (st != DSM_OK || h->njobs == 0)
        return st;
    pthread_mutex_lock(&h->msct_mu);
    h->msct_pending = 1;
    pthread_cond_broadcast(&h->msct_cv);
    pthread_mutex_unlock(&h->msct_mu);
    return DSM_OK;
}

dsm_status_t msct_wait(dsm_mheap_t *h)
{
    pthread_mutex_lock(&h->msct_mu);
    while (h->msct_pending)
        pthread_cond_wait(&h->msct_cv, &h->msct_mu);
    pthread_mutex_unlock(&h->msct_mu);
    return DSM_OK;
}

/* One trace, waiting for the reply in the request (the fabric spins while
 * it waits: used only when the node serves no managed heap). */
static dsm_status_t trace_blocking(dsm_mheap_t *h, trace_job_t *j, dsm_mheap_msg_t *m)
{
    uint8_t rep[128];
    size_t rep_len = 0;
    dsm_status_t st = ctl_request(h, h->regions[j->region].server, j->req.buf, j->req.len, rep, sizeof rep, &rep_len);
    if (st == DSM_OK &&
        (dsm_mheap_msg_decode(rep, rep_len, m, NULL) != DSM_OK || m->type != DSM_MHEAP_MSG_TRACE_REP))
        st = DSM_ERR_PROTO;
    return st;
}

/* One trace, sent without waiting; the driver sleeps until the server's
 * TRACE_DONE (msct_done) wakes it, so it takes no core from the mutator or
 * the tracers while the server traces. A pause (msct_abort) ends the wait
 * at once (DSM_ERR_CLOSED): its first request to the server stops the
 * trace there, and the TRACE_DONE that comes later is ignored. */
static dsm_status_t trace_async(dsm_mheap_t *h, trace_job_t *j, dsm_mheap_msg_t *m)
{
    const region_t *r = &h->regions[j->region];
    uint32_t rank = h->servers[r->server];
    pthread_mutex_lock(&h->msct_mu);
    h->inflight.rank = rank;
    h->inflight.local = r->local;
    h->inflight.epoch = h->jobs_epoch;
    h->inflight.waiting = 1;
    h->inflight.done = 0;
    pthread_mutex_unlock(&h->msct_mu);
    dsm_status_t st = dsm_fabric_am_send(h->fabric, rank, DSM_AM_MHEAP_CTL, j->req.buf, j->req.len);
    mheap_fabric_bytes(h, j->req.len);
    uint64_t deadline = dsm_deadline_ns(60000);
    pthread_mutex_lock(&h->msct_mu);
    while (st == DSM_OK && !h->inflight.done) {
        if (__atomic_load_n(&h->msct_abort, __ATOMIC_ACQUIRE)) {
            st = DSM_ERR_CLOSED;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->msct_cv, &h->msct_mu, &ts);
        if (h->inflight.done || __atomic_load_n(&h->msct_abort, __ATOMIC_ACQUIRE))
            continue;
        if (dsm_fabric_peer_state(h->fabric, rank) != DSM_OK)
            st = DSM_ERR_PEER_DEAD;
        else if (dsm_now_ns() > deadline)
            st = DSM_ERR_TIMEOUT;
    }
    if (st == DSM_OK)
        *m = h->inflight.rep;
    h->inflight.waiting = 0;
    pthread_mutex_unlock(&h->msct_mu);
    return st;
}

/* Before a memory server traces a region, the driver writes back the
 * region's dirty pages: the server must hold nothing older than the last
 * collection (a page dirty in the cache since before it would hide a
 * reference that no barrier logged since); anything newer is fine, the
 * SATB log covers later overwrites. Done here, as the program runs, not in
 * the pause that starts the round, and with the heap lock held only to
 * copy the pages out: the program goes on while they are sent. A pause
 * that comes meanwhile waits for the send (msct_cut waits for the round);
 * if it took the lock first, the pages stay marked dirty and are written
 * again, which costs bytes, never data. */
static dsm_status_t writeback_for_trace(dsm_mheap_t *h, uint32_t region)
{
    if (mheap_lock_gc(h) != 0)
        return DSM_ERR_CLOSED;
    uint64_t t0 = dsm_now_ns();
    region_t *r = &h->regions[region];
    int closed = h->epoch != h->jobs_epoch || __atomic_load_n(&h->msct_abort, __ATOMIC_ACQUIRE);
    uint32_t staged = closed ? 0 : cache_trace_stage(h, r);
    mheap_unlock(h);
    dsm_status_t st = closed ? DSM_ERR_CLOSED : staged ? cache_trace_send(h, r) : DSM_OK;
    if (staged && st == DSM_OK && mheap_lock_gc(h) == 0) {
        cache_trace_written(h, r);
        mheap_unlock(h);
    }
    mheap_phase(h, DSM_MHEAP_PHASE_TRACE_WB, t0);
    return st;
}

void msct_done(dsm_mheap_t *h, uint32_t src, const dsm_mheap_msg_t *m, size_t len)
{
    pthread_mutex_lock(&h->msct_mu);
    if (h->inflight.waiting && !h->inflight.done && src == h->inflight.rank && m->region == h->inflight.local &&
        m->epoch == h->inflight.epoch) {
        h->inflight.rep = *m;
        h->inflight.done = 1;
        pthread_cond_broadcast(&h->msct_cv);
    }
    pthread_mutex_unlock(&h->msct_mu);
    mheap_gc_bytes(h, len);
}

/* Passes of a round after its first (continuous tracing, msct_more): a
 * bound, since write-backs may keep discarding a region's traces. */
enum { MSCT_PASSES = 3 };

/* One job of the round on the driver thread: its region written back,
 * then traced on its server (unless a pause came first). */
static void msct_trace_job(dsm_mheap_t *h, trace_job_t *j)
{
    if (__atomic_load_n(&h->msct_abort, __ATOMIC_ACQUIRE)) {
        j->status = DSM_ERR_CLOSED;   /* a pause came first: the rest waits for the next round */
        return;
    }
    dsm_mheap_msg_t m;
    j->status = writeback_for_trace(h, j->region);
    uint64_t t0 = dsm_now_ns();
    if (j->status == DSM_OK)
        j->status = h->async ? trace_async(h, j, &m) : trace_blocking(h, j, &m);
    mheap_phase(h, DSM_MHEAP_PHASE_TRACE_WAIT, t0);
    if (j->status != DSM_OK)
        return;
    j->ok = (int)m.ok;
    j->live = m.live_bytes;
    j->traced = m.traced_bytes;
    __atomic_fetch_add(m.ok ? &h->st.traces_ok : &h->st.traces_discarded, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->st.bytes_traced_server, m.traced_bytes, __ATOMIC_RELAXED);
}

void *msct_main(void *arg)
{
    dsm_mheap_t *h = arg;
    dsm_thread_name("dsm-mh-msct", -1);
    mheap_gc_thread();
    pthread_mutex_lock(&h->msct_mu);
    for (;;) {
        while (!h->msct_pending && !h->msct_stop)
            pthread_cond_wait(&h->msct_cv, &h->msct_mu);
        if (h->msct_stop)
            break;
        pthread_mutex_unlock(&h->msct_mu);
        /* jobs is ours until msct_pending drops: the CPU side waits for that
         * before it touches them. */
        if (g1_like(h))
            mark_concurrent(h);
        /* Passes of the round: its jobs, then those msct_more adds. */
        uint32_t i = 0;
        for (uint32_t pass = 0;; pass++) {
            for (; i < h->njobs; i++)
                msct_trace_job(h, &h->jobs[i]);
            if (g1_like(h) || pass >= MSCT_PASSES || !msct_more(h))
                break;
        }
        pthread_mutex_lock(&h->msct_mu);
        h->msct_pending = 0;
        pthread_cond_broadcast(&h->msct_cv);
    }
    pthread_mutex_unlock(&h->msct_mu);
    return NULL;
}

/* At a pause: stop the round. The driver waiting for a trace stops
 * waiting (the pause's first request stops the trace on its server), one
 * waiting for its turn at the heap lock gives up, the G1-like marker ends
 * its turn; the pause waits only for the driver to let go of the round. */
static void msct_cut(dsm_mheap_t *h)
{
    __atomic_store_n(&h->msct_abort, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&h->msct_mu);
    pthread_cond_broadcast(&h->msct_cv);   /* a driver in trace_async */
    pthread_mutex_unlock(&h->msct_mu);
    mheap_lock_kick(h);   /* a marker waiting for its turn sees the abort */
    msct_wait(h);
    __atomic_store_n(&h->msct_abort, 0, __ATOMIC_RELEASE);
}

/* Take the finished round's results (heap lock held, round finished). */
static void msct_apply(dsm_mheap_t *h)
{
    for (uint32_t i = 0; i < h->njobs; i++) {
        trace_job_t *j = &h->jobs[i];
        if (j->status == DSM_ERR_PEER_DEAD)
            mheap_failed(h, j->status);
        if (j->status == DSM_OK && j->ok && h->jobs_epoch == h->epoch) {
            h->regions[j->region].trace_ok = 1;
            h->regions[j->region].trace_epoch = h->epoch;
            h->regions[j->region].trace_live = j->live;
        }
    }
    jobs_free(h);
}

/* ---- shared steps ------------------------------------------------------------- */

/* G1's adaptive IHOP: the old occupancy at which a marking starts (after
 * a pause, every region is old). The first one at G1's initial 45%; then
 * late enough that the marking, given what the last one saw allocated
 * while it ran, and a young pause's eden still end before the heap is
 * down to G1's 10% reserve. */
static uint64_t ihop_bytes(dsm_mheap_t *h)
{
    uint64_t total = (uint64_t)h->nregions * h->region_bytes;
    if (h->mark_alloc == 0)
        return total * 45 / 100;
    uint64_t keep = total / 10 + h->mark_alloc + (uint64_t)h->eden_regions * h->region_bytes;
    return keep < total ? total - keep : 0;
}

/* The end of every collection: the next cycle's snapshot, and (if `next`)
 * the next round of traces or the G1-like marking. */
static dsm_status_t finish_cycle(dsm_mheap_t *h, int next)
{
    h->satb_log.n = 0;
    h->snap_roots.n = 0;
    for (uint32_t x = 1; x < h->nhandles; x++)
        if (h->handle_used[x] && h->handle_addr[x])
            u64vec_push(&h->snap_roots, h->handle_addr[x]);
    for (uint32_t i = 0; i < h->nregions; i++) {
        h->regions[i].old_bp = h->regions[i].bp;
        h->regions[i].trace_ok = 0;
    }
    h->epoch++;
    if (!next)
        return DSM_OK;
    if (g1_like(h)) {
        if (h->mark_live)   /* a marking under way goes on */
            return h->mark_stack.n || h->mark_waiting.n ? mark_resume(h) : DSM_OK;
        return h->cfg.msct_auto && mheap_used(h) >= ihop_bytes(h) ? msct_start_locked(h) : DSM_OK;
    }
    return mheap_regional(h) && h->cfg.msct_auto ? msct_start_locked(h) : DSM_OK;
}

/* ---- CSSC --------------------------------------------------------------------- */

typedef struct pair {
    uint64_t old, new_addr;
    uint32_t size;
} pair_t;

/* The pair whose object contains a (old <= a < old + size), or NULL. */
static const pair_t *pair_containing(const pair_t *p, uint32_t n, uint64_t a)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p[mid].old <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const pair_t *q = &p[lo - 1];
    return a - q->old < q->size ? q : NULL;
}
static const pair_t *pair_exact(const pair_t *p, uint32_t n, uint64_t a)
{
    const pair_t *q = pair_containing(p, n, a);
    return q && q->old == a ? q : NULL;
}

/* One evacuation: the survivors of src[0..nsrc) packed into src[0] (the
 * destination), by a memory server or, for one region, the CPU server. */
typedef struct bin {
    uint32_t nsrc;
    uint32_t src[1 + DSM_MHEAP_EVAC_MAX_MORE];
    uint64_t live, objects;   /* bytes and objects that may move */
    uint32_t new_bp;
    int done;                 /* moved (an EVAC that found no trace moves nothing) */
    uint32_t base;            /* G1-like: src[0] is an old region whose objects stay below base */
} bin_t;

/* The moves of a set of bins: which bin each region is a source of (+1, 0:
 * not moved), and every survivor's pair, ascending by old address. */
typedef struct moves {
    uint32_t *bin_of;
    pair_t *p;
    uint32_t n;
} moves_t;

/* Where the entry a of a remset goes: unchanged outside the moved regions,
 * through the pairs inside them (interior: a slot inside an object; exact:
 * a target); 0 if its object died. */
static uint64_t moved_to(dsm_mheap_t *h, const moves_t *mv, uint64_t a, int interior)
{
    region_t *r = region_of(h, a);
    if (r == NULL || !mv->bin_of[r - h->regions])
        return a;
    const pair_t *q = interior ? pair_containing(mv->p, mv->n, a) : pair_exact(mv->p, mv->n, a);
    return q ? q->new_addr + (a - q->old) : 0;
}

/* Rebuild a set through the moves; entries now inside region `drop` (an
 * intra-region reference, which the region's own trace covers) go. */
static void remap_set(dsm_mheap_t *h, u64set_t *s, const moves_t *mv, int interior, const region_t *drop)
{
    int touched = 0;
    for (uint32_t i = 0; i < s->cap && !touched; i++) {
        region_t *r = s->v[i] ? region_of(h, s->v[i]) : NULL;
        touched = r && (mv->bin_of[r - h->regions] || r == drop);
    }
    if (!touched)
        return;
    u64set_t out = {0};
    for (uint32_t i = 0; i < s->cap; i++) {
        uint64_t a = s->v[i] ? moved_to(h, mv, s->v[i], interior) : 0;
        if (a != 0 && region_of(h, a) != drop)
            u64set_add(&out, a);
    }
    u64set_free(s);
    *s = out;
}

static int pair_cmp(const void *a, const void *b)
{
    uint64_t x = ((const pair_t *)a)->old, y = ((const pair_t *)b)->old;
    return x < y ? -1 : x > y;
}

/* Sort pairs by old address. A pause sorts every survivor's pair, too
 * many for a comparison sort through a function pointer: this is a radix
 * sort on the old address less the smallest, 11 bits a pass, only as many
 * passes as the addresses' span needs (a few for a heap). */
static void pairs_sort(pair_t *p, uint32_t n)
{
    enum { BITS = 11, RADIX = 1u << BITS };
    if (n < 64) {
        qsort(p, n, sizeof *p, pair_cmp);
        return;
    }
    uint64_t lo = p[0].old, hi = p[0].old;
    int sorted = 1;
    for (uint32_t k = 1; k < n; k++) {
        sorted &= p[k - 1].old <= p[k].old;
        lo = p[k].old < lo ? p[k].old : lo;
        hi = p[k].old > hi ? p[k].old : hi;
    }
    if (sorted)
        return;
    pair_t *tmp = malloc((size_t)n * sizeof *p);
    uint32_t *count = malloc(RADIX * sizeof *count);
    if (tmp == NULL || count == NULL) {   /* the slow sort needs no memory */
        free(tmp);
        free(count);
        qsort(p, n, sizeof *p, pair_cmp);
        return;
    }
    pair_t *from = p, *to = tmp;
    for (unsigned shift = 0; shift < 64 && ((hi - lo) >> shift) != 0; shift += BITS) {
        memset(count, 0, RADIX * sizeof *count);
        for (uint32_t k = 0; k < n; k++)
            count[((from[k].old - lo) >> shift) & (RADIX - 1)]++;
        for (uint32_t d = 0, sum = 0; d < RADIX; d++) {
            uint32_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (uint32_t k = 0; k < n; k++)
            to[count[((from[k].old - lo) >> shift) & (RADIX - 1)]++] = from[k];
        pair_t *x = from;
        from = to;
        to = x;
    }
    if (from != p)
        memcpy(p, from, (size_t)n * sizeof *p);
    free(count);
    free(tmp);
}

/* The region a live handle's object is in, or NULL. */
static region_t *handle_region(dsm_mheap_t *h, uint32_t x)
{
    return h->handle_used[x] && h->handle_addr[x] ? region_of(h, h->handle_addr[x]) : NULL;
}

/* The handles by region at a pause, so that a region's roots and moves
 * cost its own handles and not a pass over all of them: region i's handle
 * indexes are at[first[i] .. first[i + 1]). Until the pause's evacuation
 * fixes them, handles move only within their region (one compacted on the
 * CPU server keeps its objects), so the index holds through the pause;
 * each entry is checked again where it is read. */
typedef struct handle_index {
    uint32_t *first, *at;
} handle_index_t;

static void handle_index_free(handle_index_t *hx)
{
    free(hx->first);
    free(hx->at);
    hx->first = hx->at = NULL;
}

static dsm_status_t handle_index_build(dsm_mheap_t *h, handle_index_t *hx)
{
    hx->first = calloc((size_t)h->nregions + 1, sizeof *hx->first);
    hx->at = NULL;
    if (hx->first == NULL)
        return DSM_ERR_NOMEM;
    /* A counting sort: first[i] counts region i's handles, then ends them,
     * then (each placed below its end) starts them. */
    uint32_t n = 0;
    for (uint32_t x = 1; x < h->nhandles; x++) {
        region_t *r = handle_region(h, x);
        if (r != NULL) {
            hx->first[r - h->regions]++;
            n++;
        }
    }
    for (uint32_t i = 1; i < h->nregions; i++)
        hx->first[i] += hx->first[i - 1];
    hx->first[h->nregions] = n;
    if ((hx->at = malloc((n ? n : 1) * sizeof *hx->at)) == NULL) {
        handle_index_free(hx);
        return DSM_ERR_NOMEM;
    }
    for (uint32_t x = h->nhandles; x-- > 1;) {
        region_t *r = handle_region(h, x);
        if (r != NULL)
            hx->at[--hx->first[r - h->regions]] = x;
    }
    return DSM_OK;
}

/* Whether the object holding slot s is known to be live: known 1, the
 * young regions have been traced (a G1-like pause); 2, also the regions of
 * a finished marking (a mixed pause). A live object's pointer into a moved
 * region to an object that did not move is an unsound trace; a dead one's
 * is harmless. */
static int slot_live(dsm_mheap_t *h, uint64_t s, int known)
{
    region_t *r = region_of(h, s);
    if (known == 0 || r == NULL || !r->in_use || r->ct.bitmap == NULL)
        return 0;
    int yr = region_young(r);
    if (!yr && !(known == 2 && marked_region(h, r)))
        return 0;
    uint64_t off = (s - r->start) / 8 * 8;
    while (off > DSM_MHEAP_REGION_HDR && !bit_test(r->starts, off / 8))
        off -= 8;   /* the start of the object holding s */
    if (!bit_test(r->starts, off / 8))
        return 0;
    return (!yr && off >= r->tams) || bit_test(r->ct.bitmap, off / 8);
}

/* The handles hx lists under moved region i, at their objects' new
 * addresses (a handle whose object did not survive: an unsound trace). */
static dsm_status_t move_handles(dsm_mheap_t *h, const moves_t *mv, const handle_index_t *hx, uint32_t i)
{
    for (uint32_t k = hx->first[i]; k < hx->first[i + 1]; k++) {
        uint32_t x = hx->at[k];
        region_t *r = handle_region(h, x);
        if (r == NULL || !mv->bin_of[r - h->regions])
            continue;
        const pair_t *q = pair_exact(mv->p, mv->n, h->handle_addr[x]);
        if (q == NULL)
            return mheap_unsound(h, "a handle's object at", h->handle_addr[x]);
        h->handle_addr[x] = q->new_addr;
    }
    return DSM_OK;
}

/* Everything that pointed into the bins' regions before their evacuation
 * now points where the survivors went: handles, the remsets' source slots
 * (in the CPU cache if cached, else one FIXUP per memory server holding
 * such slots), the remsets themselves, and the regions' descriptors. A
 * slot inside the same bin as its target was fixed by the evacuation.
 * The handles to fix are those the pause's index hx lists under the bins'
 * regions. */
static dsm_status_t apply_moves(dsm_mheap_t *h, bin_t *bins, uint32_t nb, const moves_t *mv, int on_server,
                                int known, const handle_index_t *hx)
{
    const pair_t *p = mv->p;
    uint32_t n = mv->n;
    for (uint32_t b = 0; b < nb; b++)
        for (uint32_t k = 0; bins[b].done && k < bins[b].nsrc; k++) {
            dsm_status_t hs = move_handles(h, mv, hx, bins[b].src[k]);
            if (hs != DSM_OK)
                return hs;
        }
    /* Source slots: those in the cache are fixed there; the others go to
     * their server with the new addresses of the targets they may hold. */
    dsm_writer_t slots[DSM_MHEAP_MAX_SERVERS];
    memset(slots, 0, sizeof slots);
    pair_t *fix = NULL;
    size_t nfix = 0, capfix = 0;
    dsm_status_t st = DSM_OK;
    pthread_mutex_lock(&h->rs_mu);
    for (uint32_t b = 0; b < nb && st == DSM_OK; b++) {
        if (!bins[b].done)
            continue;
        for (uint32_t k = 0; k < bins[b].nsrc && st == DSM_OK; k++) {
            region_t *r = &h->regions[bins[b].src[k]];
            int far = 0;
            for (uint32_t i = 0; i < r->slots.cap && st == DSM_OK; i++) {
                uint64_t s = r->slots.v[i];
                region_t *sr = s ? region_of(h, s) : NULL;
                if (sr == NULL || !sr->in_use || mv->bin_of[sr - h->regions] == b + 1)
                    continue;
                /* A slot in a moved region that has a new place is a survivor's
                 * (not one kept in place below a bin's base: those may be dead);
                 * its pointers within its own bin were fixed by the copy. */
                uint32_t sb = mv->bin_of[sr - h->regions];
                int survivor = known && sb && s - sr->start >= bins[sb - 1].base;
                uint64_t at = s;
                if ((s = moved_to(h, mv, s, 1)) == 0)
                    continue;   /* the slot's own object died */
                sr = region_of(h, s);
                if (cache_is_cached(h, s)) {
                    uint64_t v;
                    if ((st = cache_load64(h, s, &v)) != DSM_OK)
                        break;
                    region_t *vr = v ? region_of(h, v) : NULL;
                    uint32_t vb = vr ? mv->bin_of[vr - h->regions] : 0;
                    if (vb == 0 || vb == sb)
                        continue;   /* not moved, or fixed already */
                    const pair_t *q = pair_exact(p, n, v);
                    if (q && q->new_addr != v)
                        st = cache_store64(h, s, q->new_addr);
                    else if (q == NULL && (survivor || slot_live(h, at, known)))
                        st = mheap_unsound(h, "a live object's pointer to", v);
                } else {
                    dsm_write_u64(&slots[sr->server], s);
                    far = 1;
                }
            }
            for (uint32_t i = 0; far && i < r->targets.cap && st == DSM_OK; i++) {
                const pair_t *q = r->targets.v[i] ? pair_exact(p, n, r->targets.v[i]) : NULL;
                if (q == NULL || q->new_addr == q->old)
                    continue;   /* no move (or one kept in place) */
                if (grow((void **)&fix, &capfix, nfix, sizeof *fix) != 0) {
                    st = DSM_ERR_NOMEM;
                    break;
                }
                fix[nfix++] = *q;
            }
        }
    }
    /* The remsets: slot addresses everywhere, then each bin's sets merged
     * into its destination's. */
    for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++)
        if (h->regions[i].in_use && !mv->bin_of[i])
            remap_set(h, &h->regions[i].slots, mv, 1, NULL);
    for (uint32_t b = 0; b < nb && st == DSM_OK; b++) {
        if (!bins[b].done)
            continue;
        region_t *d = &h->regions[bins[b].src[0]];
        u64set_t sl = {0}, tg = {0};
        for (uint32_t k = 0; k < bins[b].nsrc; k++) {
            region_t *r = &h->regions[bins[b].src[k]];
            for (uint32_t i = 0; i < r->slots.cap; i++) {
                uint64_t a = r->slots.v[i] ? moved_to(h, mv, r->slots.v[i], 1) : 0;
                if (a && region_of(h, a) != d)
                    u64set_add(&sl, a);
            }
            for (uint32_t i = 0; i < r->targets.cap; i++) {
                uint64_t a = r->targets.v[i] ? moved_to(h, mv, r->targets.v[i], 0) : 0;
                if (a)
                    u64set_add(&tg, a);
            }
            u64set_free(&r->slots);
            u64set_free(&r->targets);
        }
        d->slots = sl;
        d->targets = tg;
    }
    pthread_mutex_unlock(&h->rs_mu);
    if (st == DSM_OK && nfix > 1)
        pairs_sort(fix, (uint32_t)nfix);
    dsm_writer_t fw = {0};
    for (size_t k = 0; k < nfix; k++) {
        dsm_write_u64(&fw, fix[k].old);
        dsm_write_u64(&fw, fix[k].new_addr);
    }
    /* One FIXUP per server holding such slots, all in flight together. */
    dsm_writer_t fq[DSM_MHEAP_MAX_SERVERS];
    memset(fq, 0, sizeof fq);
    const uint8_t *req[DSM_MHEAP_MAX_SERVERS];
    uint8_t reps[DSM_MHEAP_MAX_SERVERS][64], *rep[DSM_MHEAP_MAX_SERVERS];
    size_t len[DSM_MHEAP_MAX_SERVERS], cap[DSM_MHEAP_MAX_SERVERS], rep_len[DSM_MHEAP_MAX_SERVERS];
    int any = 0;
    for (uint32_t s = 0; s < h->cfg.nservers; s++) {
        len[s] = 0;
        rep[s] = reps[s];
        cap[s] = sizeof reps[s];
        req[s] = NULL;
        if (st != DSM_OK || !nfix || slots[s].len == 0)
            continue;
        dsm_mheap_msg_t m = {.type = DSM_MHEAP_MSG_FIXUP, .heap_id = h->heap_id, .lo = fix[0].old,
                             .hi = fix[nfix - 1].old + 1, .npairs = (uint32_t)nfix,
                             .nslots = (uint32_t)(slots[s].len / 8), .pairs = fw.buf, .slots = slots[s].buf};
        dsm_mheap_msg_encode(&m, &fq[s]);
        if (!fq[s].ok || !fw.ok)
            st = DSM_ERR_NOMEM;
        req[s] = fq[s].buf;
        len[s] = fq[s].len;
        any = 1;
    }
    if (st == DSM_OK && any)
        st = ctl_request_all(h, req, len, rep, cap, rep_len);
    for (uint32_t s = 0; s < h->cfg.nservers; s++)
        dsm_writer_free(&fq[s]);
    dsm_writer_free(&fw);
    free(fix);
    for (uint32_t s = 0; s < DSM_MHEAP_MAX_SERVERS; s++)
        dsm_writer_free(&slots[s]);
    if (st != DSM_OK)
        return mheap_failed(h, st);
    /* The regions themselves. */
    size_t words = h->region_bytes / 512;
    for (uint32_t b = 0; b < nb; b++) {
        if (!bins[b].done)
            continue;
        for (uint32_t k = 0; k < bins[b].nsrc; k++) {
            region_t *r = &h->regions[bins[b].src[k]];
            memset(r->starts, 0, words * sizeof(uint64_t));
            r->bp = r->old_bp = k == 0 ? bins[b].new_bp : DSM_MHEAP_REGION_HDR;
            cache_region_reset(h, r, r->bp, on_server);
            if (r->bp <= DSM_MHEAP_REGION_HDR) {
                r->in_use = 0;
                h->st.regions_freed++;
            }
            h->st.regions_compacted++;
            h->st.regions_colocated += k > 0;
        }
    }
    for (uint32_t k = 0; k < n; k++) {
        region_t *r = region_of(h, p[k].new_addr);
        if (r)
            bit_on(r->starts, (p[k].new_addr - r->start) / 8);
    }
    return DSM_OK;
}

/* Moves of one region compacted on its own (the CPU server's, or a dead one). */
static dsm_status_t apply_moves_one(dsm_mheap_t *h, region_t *r, pair_t *p, uint32_t n, uint32_t new_bp, int known,
                                    const handle_index_t *hx)
{
    moves_t mv = {.bin_of = calloc(h->nregions, sizeof(uint32_t)), .p = p, .n = n};
    if (mv.bin_of == NULL)
        return DSM_ERR_NOMEM;
    bin_t b = {.nsrc = 1, .src = {(uint32_t)(r - h->regions)}, .new_bp = new_bp, .done = 1};
    mv.bin_of[b.src[0]] = 1;
    dsm_status_t st = apply_moves(h, &b, 1, &mv, 0, known, hx);
    free(mv.bin_of);
    return st;
}

/* One BATCH to each memory server s with b[s].n > 0, in flight together;
 * the decoded BATCH_REP in out[s] (pointing into rep[s], which the caller
 * frees) with one reply per item; rep_cap[s] bounds it. */
static dsm_status_t batch_call_all(dsm_mheap_t *h, dsm_mheap_batch_t *b, const size_t *rep_cap, uint8_t **rep,
                                   dsm_mheap_msg_t *out)
{
    const uint8_t *req[DSM_MHEAP_MAX_SERVERS];
    size_t len[DSM_MHEAP_MAX_SERVERS], rep_len[DSM_MHEAP_MAX_SERVERS];
    dsm_status_t st = DSM_OK;
    for (uint32_t s = 0; s < h->cfg.nservers; s++) {
        rep[s] = NULL;
        len[s] = 0;
        if (b[s].n == 0)
            continue;
        dsm_mheap_batch_end(&b[s]);
        rep[s] = malloc(rep_cap[s]);
        if (!b[s].w.ok || rep[s] == NULL)
            st = DSM_ERR_NOMEM;
        req[s] = b[s].w.buf;
        len[s] = b[s].w.len;
    }
    if (st == DSM_OK)
        st = ctl_request_all(h, req, len, rep, rep_cap, rep_len);
    for (uint32_t s = 0; s < h->cfg.nservers && st == DSM_OK; s++)
        if (b[s].n > 0 && (dsm_mheap_msg_decode(rep[s], rep_len[s], &out[s], NULL) != DSM_OK ||
                           out[s].type != DSM_MHEAP_MSG_BATCH_REP || out[s].nitems != b[s].n))
            st = DSM_ERR_PROTO;
    return st;
}

/* The next reply of a BATCH_REP, decoded as `type`: its status, or
 * DSM_ERR_PROTO. */
static dsm_status_t batch_reply(const dsm_mheap_msg_t *rep, size_t *pos, uint16_t type, dsm_mheap_msg_t *out)
{
    const uint8_t *data;
    size_t len;
    dsm_status_t status;
    if (dsm_mheap_batch_item(rep, pos, &data, &len, &status) != DSM_OK)
        return DSM_ERR_PROTO;
    if (status != DSM_OK)
        return status;
    if (dsm_mheap_msg_decode(data, len, out, NULL) != DSM_OK || out->type != type)
        return DSM_ERR_PROTO;
    return DSM_OK;
}

static void add_in_region(dsm_writer_t *w, const region_t *r, uint32_t rb, const uint64_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (in_region(r, rb, v[i]))
            dsm_write_u64(w, v[i]);
}

/* Objects in a region now (its start map), an upper bound on its survivors. */
static uint64_t objects_in(dsm_mheap_t *h, const region_t *r)
{
    uint64_t n = 0;
    for (size_t w = 0; w < h->region_bytes / 512; w++)
        n += (uint64_t)__builtin_popcountll(r->starts[w]);
    return n;
}

static uint32_t uf_find(uint32_t *up, uint32_t x)
{
    while (up[x] != x)
        x = up[x] = up[up[x]];
    return x;
}

/* Task 2, which regions go where: regions of one memory server that
 * reference each other (a remset slot of one lies in the other) are put in
 * one bin, as many as fit in a region, so their survivors end up
 * together; then bins of a server that fit together are merged (half-full
 * regions filled). The first source of a bin is its destination. */
static uint32_t make_bins(dsm_mheap_t *h, const uint32_t *evac, uint32_t ne, const uint64_t *live, bin_t *bins)
{
    uint32_t *up = malloc(h->nregions * sizeof *up);
    uint8_t *in_e = calloc(h->nregions, 1);
    if (up == NULL || in_e == NULL) {   /* no co-location: one bin each */
        for (uint32_t k = 0; k < ne; k++)
            bins[k] = (bin_t){.nsrc = 1, .src = {evac[k]}, .live = live[evac[k]],
                              .objects = objects_in(h, &h->regions[evac[k]])};
        free(up);
        free(in_e);
        return ne;
    }
    for (uint32_t i = 0; i < h->nregions; i++)
        up[i] = i;
    for (uint32_t k = 0; k < ne; k++)
        in_e[evac[k]] = 1;
    pthread_mutex_lock(&h->rs_mu);
    for (uint32_t k = 0; k < ne; k++) {
        region_t *r = &h->regions[evac[k]];
        for (uint32_t i = 0; i < r->slots.cap; i++) {
            region_t *sr = r->slots.v[i] ? region_of(h, r->slots.v[i]) : NULL;
            uint32_t x = sr ? (uint32_t)(sr - h->regions) : 0;
            if (sr && in_e[x] && sr->server == r->server)
                up[uf_find(up, x)] = uf_find(up, evac[k]);
        }
    }
    pthread_mutex_unlock(&h->rs_mu);
    uint64_t cap = h->region_bytes - DSM_MHEAP_REGION_HDR;
    uint32_t nb = 0;
    /* Each group, in region order, first fit into bins of its own. */
    for (uint32_t k = 0; k < ne; k++) {
        if (in_e[evac[k]] == 2)
            continue;   /* already binned with its group */
        uint32_t root = uf_find(up, evac[k]);
        uint32_t first = nb;
        for (uint32_t j = k; j < ne; j++) {
            uint32_t x = evac[j];
            if (in_e[x] != 1 || uf_find(up, x) != root)
                continue;
            in_e[x] = 2;
            uint32_t b = first;
            while (b < nb && (bins[b].live + live[x] > cap || bins[b].nsrc > DSM_MHEAP_EVAC_MAX_MORE))
                b++;
            if (b == nb)
                bins[nb++] = (bin_t){0};
            bins[b].src[bins[b].nsrc++] = x;
            bins[b].live += live[x];
            bins[b].objects += objects_in(h, &h->regions[x]);
        }
    }
    /* Bins of one server that fit together: one. */
    uint32_t out = 0;
    for (uint32_t b = 0; b < nb; b++) {
        uint32_t t = 0;
        for (; t < out; t++)
            if (h->regions[bins[t].src[0]].server == h->regions[bins[b].src[0]].server &&
                bins[t].live + bins[b].live <= cap && bins[t].nsrc + bins[b].nsrc <= 1 + DSM_MHEAP_EVAC_MAX_MORE)
                break;
        if (t == out) {
            bins[out++] = bins[b];
            continue;
        }
        for (uint32_t k = 0; k < bins[b].nsrc; k++)
            bins[t].src[bins[t].nsrc++] = bins[b].src[k];
        bins[t].live += bins[b].live;
        bins[t].objects += bins[b].objects;
    }
    free(up);
    free(in_e);
    return out;
}

/* What a pause sends inside its control messages rather than in steps of
 * their own: at most this many far slots (SLOTS) and this many bytes of dirty pages
 * (PAGES) per server and step; beyond, the separate steps (read_slots,
 * the one-sided write-back) keep each message well under the fabric's
 * limit. */
enum { INLINE_SLOTS_MAX = 1u << 18, INLINE_PAGE_BYTES_MAX = 8u << 20 };

/* Send the bins' EVACs, a BATCH per memory server (split so that the
 * replies stay under the message limit), and gather the survivors' pairs.
 * The sources' dirty pages go first, in the first BATCH (a PAGES per
 * region; one-sided write-backs before it if they are too many), and
 * every source is evicted before a reply is read (Task 1, and a
 * destination's cached pages would go stale). */
static dsm_status_t evacuate(dsm_mheap_t *h, bin_t *bins, uint32_t nb, moves_t *mv)
{
    dsm_status_t st = DSM_OK;
    uint64_t total = 0;
    uint32_t nsrc = 0;
    region_t **src = calloc((size_t)nb * (1 + DSM_MHEAP_EVAC_MAX_MORE) + 1, sizeof *src);
    if (src == NULL)
        return DSM_ERR_NOMEM;
    for (uint32_t b = 0; b < nb; b++) {
        total += bins[b].objects;
        for (uint32_t k = 0; k < bins[b].nsrc; k++)
            src[nsrc++] = &h->regions[bins[b].src[k]];
    }
    uint64_t page_bytes[DSM_MHEAP_MAX_SERVERS] = {0};
    int inline_pages = 1;
    for (uint32_t k = 0; k < nsrc; k++) {
        page_bytes[src[k]->server] += (uint64_t)cache_dirty_pages(h, src[k]) * DSM_MHEAP_PAGE_ITEM;
        inline_pages &= page_bytes[src[k]->server] <= INLINE_PAGE_BYTES_MAX;
    }
    if (!inline_pages) {   /* written back together, then dropped (evicted) */
        st = cache_writeback_regions(h, src, nsrc);
        for (uint32_t k = 0; k < nsrc && st == DSM_OK; k++)
            st = cache_evict_region(h, src[k]);
    }
    mv->p = malloc((total ? total : 1) * sizeof *mv->p);
    if (st == DSM_OK && mv->p == NULL)
        st = DSM_ERR_NOMEM;
    if (st != DSM_OK) {
        free(src);
        return st;
    }
    /* A wave sends every server its next BATCH at once. */
    const size_t limit = DSM_AM_MAX_PAYLOAD - 4096;
    uint32_t ns = h->cfg.nservers, cur[DSM_MHEAP_MAX_SERVERS] = {0}, first[DSM_MHEAP_MAX_SERVERS];
    for (int more = 1, wave = 0; more && st == DSM_OK; wave++) {
        more = 0;
        dsm_mheap_batch_t batch[DSM_MHEAP_MAX_SERVERS];
        size_t cap[DSM_MHEAP_MAX_SERVERS];
        uint8_t *rep[DSM_MHEAP_MAX_SERVERS] = {0};
        dsm_mheap_msg_t out[DSM_MHEAP_MAX_SERVERS];
        int pages = wave == 0 && inline_pages;
        for (uint32_t s = 0; s < ns; s++) {
            uint32_t b = cur[s];
            first[s] = b;
            cap[s] = DSM_MHEAP_MSG_HEADER_LEN + 4;
            dsm_mheap_batch_begin(&batch[s], DSM_MHEAP_MSG_BATCH, h->heap_id);
            for (uint32_t k = 0; k < nsrc && pages; k++)
                if (src[k]->server == s && cache_dirty_pages(h, src[k])) {
                    cache_pages_item(h, src[k], &batch[s]);
                    cap[s] += 8 + DSM_MHEAP_MSG_HEADER_LEN;
                }
            for (; b < nb; b++) {
                if (h->regions[bins[b].src[0]].server != s)
                    continue;
                size_t need = 8 + DSM_MHEAP_MSG_HEADER_LEN + 8 + (size_t)bins[b].objects * DSM_MHEAP_EVAC_PAIR;
                if (batch[s].n > 0 && cap[s] + need > limit)
                    break;
                uint8_t m_more[4 * DSM_MHEAP_EVAC_MAX_MORE];
                for (uint32_t k = 1; k < bins[b].nsrc; k++)
                    dsm_put_u32(m_more + 4 * (k - 1), h->regions[bins[b].src[k]].local);
                dsm_mheap_msg_t m = {.type = DSM_MHEAP_MSG_EVAC, .heap_id = h->heap_id,
                                     .region = h->regions[bins[b].src[0]].local, .epoch = h->epoch,
                                     .nmore = bins[b].nsrc - 1, .more = m_more};
                dsm_mheap_batch_add(&batch[s], &m, DSM_OK);
                cap[s] += need;
            }
            cur[s] = b;
            more |= batch[s].n > 0;
        }
        if (more)
            st = batch_call_all(h, batch, cap, rep, out);
        size_t at[DSM_MHEAP_MAX_SERVERS] = {0};
        if (pages) {   /* the pages are there: clean, then dropped before anything reads them */
            for (uint32_t k = 0; k < nsrc && st == DSM_OK; k++) {
                if (!cache_dirty_pages(h, src[k]))
                    continue;
                dsm_mheap_msg_t e;
                if ((st = batch_reply(&out[src[k]->server], &at[src[k]->server], DSM_MHEAP_MSG_PAGES_REP, &e)) ==
                    DSM_OK)
                    cache_pages_written(h, src[k]);
            }
            for (uint32_t k = 0; k < nsrc && st == DSM_OK; k++)
                st = cache_evict_region(h, src[k]);
        }
        for (uint32_t s = 0; s < ns && more; s++) {
            size_t pos = at[s];
            for (uint32_t x = first[s]; x < cur[s] && st == DSM_OK && batch[s].n > 0; x++) {
                bin_t *bn = &bins[x];
                if (h->regions[bn->src[0]].server != s)
                    continue;
                dsm_mheap_msg_t e;
                dsm_status_t es = batch_reply(&out[s], &pos, DSM_MHEAP_MSG_EVAC_REP, &e);
                if (es == DSM_ERR_STATE)
                    continue;   /* no trace of this epoch there: nothing moved */
                if (es == DSM_ERR_BAD_ADDR)   /* a pointer the server's evacuation found dangling */
                    es = mheap_unsound(h, "a memory server's evacuation of the region at",
                                       h->regions[bn->src[0]].start);
                if ((st = es) != DSM_OK)
                    break;
                const region_t *d = &h->regions[bn->src[0]];
                if (e.npairs > bn->objects || e.new_bp > h->region_bytes) {
                    st = DSM_ERR_PROTO;
                    break;
                }
                /* A server answers for the bin's regions, into the destination, or not at all. */
                for (uint32_t k = 0; k < e.npairs && st == DSM_OK; k++) {
                    const uint8_t *q = e.pairs + (size_t)k * DSM_MHEAP_EVAC_PAIR;
                    pair_t pr = {dsm_get_u64(q), dsm_get_u64(q + 8), dsm_get_u32(q + 16)};
                    region_t *o = region_of(h, pr.old);
                    if (o == NULL || mv->bin_of[o - h->regions] != x + 1 || pr.new_addr < d->start + DSM_MHEAP_REGION_HDR ||
                        pr.new_addr - d->start >= e.new_bp)
                        st = DSM_ERR_PROTO;
                    mv->p[mv->n++] = pr;
                }
                bn->new_bp = e.new_bp;
                bn->done = 1;
            }
        }
        for (uint32_t s = 0; s < ns; s++) {
            free(rep[s]);
            dsm_writer_free(&batch[s].w);
        }
    }
    free(src);
    if (st == DSM_OK && mv->n > 1) {
        pairs_sort(mv->p, mv->n);
        for (uint32_t k = 1; k < mv->n && st == DSM_OK; k++)
            if (mv->p[k].old <= mv->p[k - 1].old)
                st = DSM_ERR_PROTO;
    }
    return st;
}

static void roots_at_pause(dsm_mheap_t *h, const handle_index_t *hx, const region_t *r, dsm_writer_t *roots)
{
    uint32_t i = (uint32_t)(r - h->regions);
    for (uint32_t k = hx->first[i]; k < hx->first[i + 1]; k++) {
        uint32_t x = hx->at[k];
        if (h->handle_used[x] && in_region(r, h->region_bytes, h->handle_addr[x]))
            dsm_write_u64(roots, h->handle_addr[x]);
    }
    pthread_mutex_lock(&h->rs_mu);
    for (uint32_t k = 0; k < r->targets.cap; k++)
        if (r->targets.v[k])
            dsm_write_u64(roots, r->targets.v[k]);
    pthread_mutex_unlock(&h->rs_mu);
}

/* Task 3: trace and compact a mostly cached region on the CPU server, with
 * the memory servers' tracer run over a copy taken through the cache, from
 * all of the region's roots at the pause. */
static dsm_status_t cpu_collect(dsm_mheap_t *h, const handle_index_t *hx, region_t *r, const uint64_t *satb,
                                size_t nsatb, dsm_mheap_rtrace_t *t, uint8_t *img, uint8_t *scratch)
{
    dsm_status_t st = cache_read(h, r->start, img, r->bp);
    if (st != DSM_OK)
        return st;
    dsm_writer_t roots = {0}, pairs = {0};
    roots_at_pause(h, hx, r, &roots);
    add_in_region(&roots, r, h->region_bytes, satb, nsatb);
    if (!roots.ok && roots.len) {
        dsm_writer_free(&roots);
        return DSM_ERR_NOMEM;
    }
    dsm_mheap_rtrace_reset(t);
    dsm_mheap_rtrace_mark(t, img, r->start, r->bp, h->types, h->cfg.order == DSM_MHEAP_ORDER_BFS, roots.buf,
                          (uint32_t)(roots.len / 8));
    dsm_writer_free(&roots);
    uint64_t used = r->bp - DSM_MHEAP_REGION_HDR;
    if (t->live_bytes >= used || (used - t->live_bytes) * 8 < used)
        return DSM_OK;
    uint32_t new_bp = 0, dangling = 0;
    st = dsm_mheap_rtrace_compact(t, img, r->start, r->bp, h->types, scratch, &pairs, &new_bp, &dangling);
    if (st == DSM_OK && dangling) {   /* a kept object points at one the trace dropped */
        dsm_writer_free(&pairs);
        return mheap_unsound(h, "a pointer compacted on the CPU server in the region at", r->start);
    }
    pair_t *p = NULL;
    uint32_t n = (uint32_t)(pairs.len / DSM_MHEAP_EVAC_PAIR);
    if (st == DSM_OK && (p = malloc((n ? n : 1) * sizeof *p)) == NULL)
        st = DSM_ERR_NOMEM;
    for (uint32_t k = 0; st == DSM_OK && k < n; k++) {
        const uint8_t *e = pairs.buf + (size_t)k * DSM_MHEAP_EVAC_PAIR;
        p[k] = (pair_t){dsm_get_u64(e), dsm_get_u64(e + 8), dsm_get_u32(e + 16)};
    }
    if (st == DSM_OK && new_bp > DSM_MHEAP_REGION_HDR)
        st = cache_write(h, r->start + DSM_MHEAP_REGION_HDR, img + DSM_MHEAP_REGION_HDR,
                         new_bp - DSM_MHEAP_REGION_HDR);
    if (st == DSM_OK)
        st = apply_moves_one(h, r, p, n, new_bp, 0, hx);
    free(p);
    dsm_writer_free(&pairs);
    return st;
}

/* val[far[x]] = the word at slot[far[x]] on its memory server, for x <
 * nfar: one SLOTS request per server (split to stay under the message
 * limit), the servers' requests in flight together, not a read per slot. */
static dsm_status_t read_slots(dsm_mheap_t *h, const uint64_t *slot, uint64_t *val, const size_t *far, size_t nfar)
{
    enum { CHUNK = 1u << 20 };   /* slots per request: 8 MiB each way */
    uint32_t ns = h->cfg.nservers;
    size_t most = nfar < CHUNK ? nfar : CHUNK, cap[DSM_MHEAP_MAX_SERVERS], len[DSM_MHEAP_MAX_SERVERS],
           rep_len[DSM_MHEAP_MAX_SERVERS], at[DSM_MHEAP_MAX_SERVERS] = {0};
    size_t *mine[DSM_MHEAP_MAX_SERVERS] = {0};
    uint8_t *rep[DSM_MHEAP_MAX_SERVERS] = {0};
    const uint8_t *reqp[DSM_MHEAP_MAX_SERVERS];
    uint32_t n[DSM_MHEAP_MAX_SERVERS];
    dsm_writer_t req[DSM_MHEAP_MAX_SERVERS];
    memset(req, 0, sizeof req);
    dsm_status_t st = DSM_OK;
    for (uint32_t s = 0; s < ns && st == DSM_OK; s++) {
        cap[s] = DSM_MHEAP_MSG_HEADER_LEN + 4 + most * 8;
        mine[s] = malloc(most * sizeof *mine[s]);
        rep[s] = malloc(cap[s]);
        if (mine[s] == NULL || rep[s] == NULL)
            st = DSM_ERR_NOMEM;
    }
    for (int more = 1; more && st == DSM_OK;) {
        more = 0;
        for (uint32_t s = 0; s < ns && st == DSM_OK; s++) {
            n[s] = 0;
            len[s] = 0;
            dsm_writer_t slots = {0};
            size_t x = at[s];
            for (; x < nfar && n[s] < most; x++)
                if (region_of(h, slot[far[x]])->server == s) {
                    mine[s][n[s]++] = far[x];
                    dsm_write_u64(&slots, slot[far[x]]);
                }
            at[s] = x;
            if (n[s] > 0) {
                dsm_mheap_msg_t m = {.type = DSM_MHEAP_MSG_SLOTS, .heap_id = h->heap_id, .nslots = n[s],
                                     .slots = slots.buf};
                req[s].len = 0;
                dsm_mheap_msg_encode(&m, &req[s]);
                if (!req[s].ok || !slots.ok)
                    st = DSM_ERR_NOMEM;
                len[s] = req[s].len;
                reqp[s] = req[s].buf;
                more = 1;
            }
            dsm_writer_free(&slots);
        }
        if (!more || st != DSM_OK)
            break;
        st = ctl_request_all(h, reqp, len, rep, cap, rep_len);
        for (uint32_t s = 0; s < ns && st == DSM_OK; s++) {
            if (n[s] == 0)
                continue;
            dsm_mheap_msg_t out;
            if (dsm_mheap_msg_decode(rep[s], rep_len[s], &out, NULL) != DSM_OK ||
                out.type != DSM_MHEAP_MSG_SLOTS_REP || out.nslots != n[s]) {
                st = DSM_ERR_PROTO;
                break;
            }
            for (uint32_t k = 0; k < n[s]; k++)
                val[mine[s][k]] = dsm_get_u64(out.slots + 8 * (size_t)k);
        }
    }
    for (uint32_t s = 0; s < ns; s++) {
        dsm_writer_free(&req[s]);
        free(mine[s]);
        free(rep[s]);
    }
    return st;
}

/* Remset cleanup (Task 4), at a pause: a slot stays in region r's source
 * queue only while it still points to an object of r from outside r (a
 * region traces its own pointers), and r's target queue becomes those
 * objects. Target entries are addresses, not cards: without
 * this, every object a slot ever pointed to (a vertex's last rank, and the
 * one before) would stay a root of r for good. Slots in cached pages are
 * read in the cache; the others on their server (8 bytes each, not their
 * pages). In two halves around that read: refresh_begin gathers the slots
 * and the values in the cache, refresh_end rebuilds the remsets once
 * val[far[..]] are in. Between them nothing adds to a remset: the pause
 * holds the heap lock (no barrier runs) and remset_flush left the
 * transfer thread idle. young_only: the young regions' remsets only. */
typedef struct refresh {
    uint64_t *slot, *val;
    uint32_t *owner;
    size_t *far;
    size_t n, nfar;
    int young_only;
} refresh_t;

static void refresh_free(refresh_t *rf)
{
    free(rf->slot);
    free(rf->val);
    free(rf->owner);
    free(rf->far);
    memset(rf, 0, sizeof *rf);
}

static dsm_status_t refresh_begin(dsm_mheap_t *h, int young_only, refresh_t *rf)
{
    memset(rf, 0, sizeof *rf);
    rf->young_only = young_only;
    pthread_mutex_lock(&h->rs_mu);
    size_t n = 0;
    for (uint32_t i = 0; i < h->nregions; i++)
        n += h->regions[i].in_use ? h->regions[i].slots.n : 0;
    rf->slot = malloc((n ? n : 1) * sizeof *rf->slot);
    rf->val = malloc((n ? n : 1) * sizeof *rf->val);
    rf->owner = malloc((n ? n : 1) * sizeof *rf->owner);
    rf->far = malloc((n ? n : 1) * sizeof *rf->far);
    dsm_status_t st = rf->slot && rf->val && rf->owner && rf->far ? DSM_OK : DSM_ERR_NOMEM;
    size_t k = 0;
    for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++) {
        region_t *r = &h->regions[i];
        if (!r->in_use || (young_only && !region_young(r)))
            continue;
        for (uint32_t j = 0; j < r->slots.cap && st == DSM_OK; j++) {
            uint64_t s = r->slots.v[j];
            region_t *sr = s ? region_of(h, s) : NULL;
            if (sr == NULL || !sr->in_use || s - sr->start >= sr->bp)
                continue;   /* its region was freed or compacted below it: dropped */
            rf->slot[k] = s;
            rf->owner[k] = i;
            rf->val[k] = 0;
            if (cache_is_cached(h, s)) {
                st = cache_load64(h, s, &rf->val[k]);
            } else if (!cache_is_init(h, s)) {
                rf->far[rf->nfar++] = k;
            }
            k++;
        }
    }
    rf->n = k;
    pthread_mutex_unlock(&h->rs_mu);
    return st;
}

static void refresh_end(dsm_mheap_t *h, const refresh_t *rf)
{
    pthread_mutex_lock(&h->rs_mu);
    for (uint32_t i = 0; i < h->nregions; i++) {
        if (rf->young_only && !region_young(&h->regions[i]))
            continue;
        u64set_clear(&h->regions[i].slots);
        u64set_clear(&h->regions[i].targets);
    }
    for (size_t x = 0; x < rf->n; x++) {
        region_t *r = &h->regions[rf->owner[x]], *t = region_of(h, rf->val[x]);
        uint64_t v = rf->val[x];
        if (t == r && region_of(h, rf->slot[x]) != r && v % 8 == 0 && v - r->start < r->bp &&
            bit_test(r->starts, (v - r->start) / 8))
            remset_add_locked(h, rf->slot[x], v);
    }
    pthread_mutex_unlock(&h->rs_mu);
}

static dsm_status_t remset_refresh(dsm_mheap_t *h, int young_only)
{
    refresh_t rf;
    dsm_status_t st = refresh_begin(h, young_only, &rf);
    if (st == DSM_OK && rf.nfar)
        st = read_slots(h, rf.slot, rf.val, rf.far, rf.nfar);
    if (st == DSM_OK)
        refresh_end(h, &rf);
    refresh_free(&rf);
    return st == DSM_OK || st == DSM_ERR_NOMEM ? st : mheap_failed(h, st);
}

/* The pause's first round trip to the memory servers, one BATCH per
 * server, all in flight together: the SLOTS read of the remset cleanup
 * (rf's far slots there), the dirty pages of the regions it collects (wb,
 * a PAGES per region: Task 1's write-back), then a REMARK of every region
 * it collects (on_cpu[i] == 0): with a kept trace, the SATB log's entries
 * in it; without one (or if the server no longer holds it), a fresh trace
 * from all its roots at the pause (precise: the objects allocated since
 * the last collection survive only if reached, since every reference
 * into the region from elsewhere is a root). Those roots are the remsets'
 * targets, before the cleanup unless it was done already (rf->nfar 0): a
 * superset of what the slots hold now, since every store of a value into
 * a slot queued that value as a target. A second
 * BATCH traces afresh the kept traces a server had lost. live[i] gets what
 * the remark found live; rf's values are filled in. */
static dsm_status_t pause_remark(dsm_mheap_t *h, const handle_index_t *hx, const uint8_t *on_cpu, uint64_t *live,
                                 const uint64_t *satb, size_t nsatb, refresh_t *rf, region_t *const *wb, uint32_t nwb)
{
    uint32_t ns = h->cfg.nservers;
    uint8_t *fresh = calloc(h->nregions, 1);
    size_t *mine[DSM_MHEAP_MAX_SERVERS] = {0}, nmine[DSM_MHEAP_MAX_SERVERS] = {0};
    uint64_t page_bytes[DSM_MHEAP_MAX_SERVERS] = {0};
    dsm_status_t st = fresh ? DSM_OK : DSM_ERR_NOMEM;
    /* Too much to carry inline: the separate steps first. */
    int inline_slots = rf->nfar <= INLINE_SLOTS_MAX, inline_pages = 1;
    for (uint32_t k = 0; k < nwb; k++) {
        page_bytes[wb[k]->server] += (uint64_t)cache_dirty_pages(h, wb[k]) * DSM_MHEAP_PAGE_ITEM;
        inline_pages &= page_bytes[wb[k]->server] <= INLINE_PAGE_BYTES_MAX;
    }
    if (st == DSM_OK && !inline_pages)
        st = cache_writeback_regions(h, wb, nwb);
    if (st == DSM_OK && !inline_slots && rf->nfar)
        st = read_slots(h, rf->slot, rf->val, rf->far, rf->nfar);
    for (uint32_t s = 0; s < ns && st == DSM_OK && inline_slots && rf->nfar; s++)
        if ((mine[s] = malloc(rf->nfar * sizeof *mine[s])) == NULL)
            st = DSM_ERR_NOMEM;
    for (size_t x = 0; x < rf->nfar && st == DSM_OK && inline_slots; x++) {
        uint32_t s = region_of(h, rf->slot[rf->far[x]])->server;
        mine[s][nmine[s]++] = rf->far[x];
    }
    for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++)
        fresh[i] = !(h->regions[i].trace_ok && h->regions[i].trace_epoch == h->epoch);
    /* Pass 0: every region; pass 1: the kept traces the server had lost. */
    for (int pass = 0; pass < 2 && st == DSM_OK; pass++) {
        dsm_mheap_batch_t batch[DSM_MHEAP_MAX_SERVERS];
        size_t cap[DSM_MHEAP_MAX_SERVERS];
        uint8_t *rep[DSM_MHEAP_MAX_SERVERS] = {0};
        dsm_mheap_msg_t out[DSM_MHEAP_MAX_SERVERS];
        for (uint32_t s = 0; s < ns; s++) {
            dsm_mheap_batch_begin(&batch[s], DSM_MHEAP_MSG_BATCH, h->heap_id);
            cap[s] = DSM_MHEAP_MSG_HEADER_LEN + 4;
        }
        if (pass == 0) {
            for (uint32_t s = 0; s < ns; s++) {
                if (nmine[s] == 0)
                    continue;
                dsm_writer_t slots = {0};
                for (size_t k = 0; k < nmine[s]; k++)
                    dsm_write_u64(&slots, rf->slot[mine[s][k]]);
                dsm_mheap_msg_t m = {.type = DSM_MHEAP_MSG_SLOTS, .heap_id = h->heap_id,
                                     .nslots = (uint32_t)nmine[s], .slots = slots.buf};
                if (slots.ok)
                    dsm_mheap_batch_add(&batch[s], &m, DSM_OK);
                else
                    batch[s].w.ok = 0;
                dsm_writer_free(&slots);
                cap[s] += 8 + DSM_MHEAP_MSG_HEADER_LEN + 4 + 8 * nmine[s];
            }
            for (uint32_t k = 0; k < nwb && inline_pages; k++)
                if (cache_dirty_pages(h, wb[k])) {
                    cache_pages_item(h, wb[k], &batch[wb[k]->server]);
                    cap[wb[k]->server] += 8 + DSM_MHEAP_MSG_HEADER_LEN;
                }
        }
        for (uint32_t i = 0; i < h->nregions; i++) {
            region_t *r = &h->regions[i];
            if (!r->in_use || r->bp <= DSM_MHEAP_REGION_HDR || on_cpu[i] || (pass == 1 && fresh[i] != 2))
                continue;
            /* A kept trace needs the SATB entries (what it could have
             * missed since its snapshot); a fresh one starts from every
             * reference into the region now and needs none. */
            dsm_writer_t roots = {0};
            if (fresh[i]) {
                roots_at_pause(h, hx, r, &roots);
                h->st.traces_at_pause++;
            } else {
                add_in_region(&roots, r, h->region_bytes, satb, nsatb);
            }
            /* A fresh trace is precise: from the roots at the pause, the
             * objects allocated since the last collection too (old_bp = bp),
             * as the CPU server's own collection of a region traces. */
            dsm_mheap_msg_t m = {.type = DSM_MHEAP_MSG_REMARK, .heap_id = h->heap_id, .region = r->local,
                                 .epoch = h->epoch, .old_bp = fresh[i] ? r->bp : r->old_bp, .bp = r->bp,
                                 .flags = fresh[i] ? DSM_MHEAP_REMARK_FRESH : 0,
                                 .nroots = (uint32_t)(roots.len / 8), .roots = roots.buf};
            if (roots.ok || roots.len == 0)
                dsm_mheap_batch_add(&batch[r->server], &m, DSM_OK);
            else
                batch[r->server].w.ok = 0;
            cap[r->server] += 64;
            dsm_writer_free(&roots);
        }
        int any = 0;
        for (uint32_t s = 0; s < ns; s++)
            any |= batch[s].n > 0;
        if (any)
            st = batch_call_all(h, batch, cap, rep, out);
        size_t pos[DSM_MHEAP_MAX_SERVERS] = {0};
        for (uint32_t s = 0; s < ns && st == DSM_OK && pass == 0; s++) {
            dsm_mheap_msg_t e;
            if (nmine[s] && (st = batch_reply(&out[s], &pos[s], DSM_MHEAP_MSG_SLOTS_REP, &e)) == DSM_OK) {
                if (e.nslots != nmine[s])
                    st = DSM_ERR_PROTO;
                for (uint32_t k = 0; k < e.nslots && st == DSM_OK; k++)
                    rf->val[mine[s][k]] = dsm_get_u64(e.slots + 8 * (size_t)k);
            }
        }
        for (uint32_t k = 0; k < nwb && st == DSM_OK && pass == 0 && inline_pages; k++) {
            if (!cache_dirty_pages(h, wb[k]))
                continue;
            dsm_mheap_msg_t e;
            if ((st = batch_reply(&out[wb[k]->server], &pos[wb[k]->server], DSM_MHEAP_MSG_PAGES_REP, &e)) == DSM_OK)
                cache_pages_written(h, wb[k]);
        }
        for (uint32_t i = 0; i < h->nregions && st == DSM_OK && any; i++) {
            region_t *r = &h->regions[i];
            if (!r->in_use || r->bp <= DSM_MHEAP_REGION_HDR || on_cpu[i] || (pass == 1 && fresh[i] != 2))
                continue;
            dsm_mheap_msg_t e;
            dsm_status_t es = batch_reply(&out[r->server], &pos[r->server], DSM_MHEAP_MSG_REMARK_REP, &e);
            if (es == DSM_ERR_STATE && !fresh[i])
                fresh[i] = 2;   /* trace it now from all its roots, in pass 1 */
            else if ((st = es) == DSM_OK)
                live[i] = e.live_bytes;
        }
        for (uint32_t s = 0; s < ns; s++) {
            free(rep[s]);
            dsm_writer_free(&batch[s].w);
        }
    }
    for (uint32_t s = 0; s < ns; s++)
        free(mine[s]);
    free(fresh);
    return st == DSM_OK ? st : mheap_failed(h, st);
}

/* Whether a CSSC that leaves the young server regions alone would leave
 * too little room (less than an eighth of the heap free, as too_full
 * says): the room now plus the garbage the kept traces found in the
 * regions it would evacuate (the CPU server's regions and the others
 * counted as freeing nothing). Then it cleans the remsets first and
 * traces the young regions too (precisely, as every fresh trace, from
 * the slots' values now), rather than leave the program a second CSSC in
 * the same pause that traces every region afresh. */
static int cssc_short(dsm_mheap_t *h)
{
    uint64_t room = 0;
    for (uint32_t i = 0; i < h->nregions; i++) {
        const region_t *r = &h->regions[i];
        if (!r->in_use) {
            room += h->region_bytes;
            continue;
        }
        room += h->region_bytes - r->bp;
        uint64_t old_used = r->old_bp > DSM_MHEAP_REGION_HDR ? r->old_bp - DSM_MHEAP_REGION_HDR : 0;
        uint64_t used = r->bp - DSM_MHEAP_REGION_HDR;
        if (r->trace_ok && r->trace_epoch == h->epoch && r->trace_live <= old_used &&
            (old_used - r->trace_live) * 8 >= used)
            room += old_used - r->trace_live;
    }
    return room * 8 < (uint64_t)h->nregions * h->region_bytes;
}

static dsm_status_t gc_cssc(dsm_mheap_t *h)
{
    uint64_t t0 = dsm_now_ns();
    msct_cut(h);
    msct_apply(h);
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_CUT, t0);
    remset_flush(h);
    refresh_t rf;
    dsm_status_t rst = refresh_begin(h, 0, &rf);
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_REMSET, t0);
    if (rst != DSM_OK) {
        refresh_free(&rf);
        return rst;
    }
    uint64_t *live = calloc(h->nregions, sizeof *live);
    uint8_t *on_cpu = calloc(h->nregions, 1);
    region_t **wb = malloc(h->nregions * sizeof *wb);   /* the server regions to write back */
    uint32_t nwb = 0;
    if (live == NULL || on_cpu == NULL || wb == NULL) {
        free(live);
        free(on_cpu);
        free(wb);
        refresh_free(&rf);
        return DSM_ERR_NOMEM;
    }
    dsm_status_t st = DSM_OK;
    const uint64_t *satb = h->satb_log.v;
    size_t nsatb = h->cfg.satb ? h->satb_log.n : 0;
    for (size_t k = 0; k < nsatb; k++) {
        region_t *r = region_of(h, satb[k]);
        if (r)
            on_cpu[r - h->regions] = 4;   /* marks "has SATB roots" until the loop below decides */
    }
    /* Who collects what; the memory servers must see their regions as
     * they are. */
    int young_too = cssc_short(h), refreshed = 0;
    if (young_too) {
        /* Then the remset cleanup first (its own round trip): the fresh
         * traces start from the slots' values now, not from every target
         * queued since the last cleanup, or they keep what the program
         * has already let go of and a second CSSC follows anyway. */
        if (rf.nfar)
            st = read_slots(h, rf.slot, rf.val, rf.far, rf.nfar);
        if (st == DSM_OK) {
            refresh_end(h, &rf);
            rf.nfar = 0;
            refreshed = 1;
        } else if (st != DSM_ERR_NOMEM) {
            st = mheap_failed(h, st);
        }
        t0 = mheap_phase(h, DSM_MHEAP_PHASE_REMSET, t0);
    }
    for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++) {
        region_t *r = &h->regions[i];
        int satb_roots = on_cpu[i] == 4;
        on_cpu[i] = 0;
        if (!r->in_use || r->bp <= DSM_MHEAP_REGION_HDR)
            continue;
        /* A region whose kept trace found nothing live, with nothing new
         * and no SATB root in it, is all garbage (SATB: anything the
         * program can still reach was reachable at the snapshot, so the
         * trace marked it): freed here, no REMARK, write-back or EVAC. */
        if (r->trace_ok && r->trace_epoch == h->epoch && r->trace_live == 0 && r->bp == r->old_bp &&
            !satb_roots) {
            on_cpu[i] = 3;
            continue;
        }
        on_cpu[i] = (uint8_t)mostly_cached(h, r);
        /* A region allocated wholly since the last collection, left to its
         * server, is left alone (all live) unless the pause traces the
         * young regions (young_too): it needs no write-back, REMARK or
         * trace in this pause. */
        uint64_t used_now = r->bp - DSM_MHEAP_REGION_HDR;
        if (!on_cpu[i] && r->old_bp <= DSM_MHEAP_REGION_HDR && !young_too) {
            on_cpu[i] = 2;
            live[i] = used_now;
            continue;
        }
        /* Regions that the memory server's trace found dense enough are
         * not worth a pause: what it marked stays live, so their garbage
         * can only be less than the trace says (region choice by MSCT's
         * garbage ratio, §4.3). */
        uint64_t old_used = r->old_bp - DSM_MHEAP_REGION_HDR, used = r->bp - DSM_MHEAP_REGION_HDR;
        if (!on_cpu[i] && r->trace_ok && r->trace_epoch == h->epoch &&
            r->trace_live <= old_used &&
            (old_used - r->trace_live) * 8 < used) {
            on_cpu[i] = 2;
            live[i] = used;
            h->st.regions_skipped++;
            continue;
        }
        if (!on_cpu[i])
            wb[nwb++] = r;
    }
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_WRITEBACK, t0);
    /* Remark every server region first (with the write-back and the
     * remset cleanup's reads in the same round trip): fix-ups change
     * pointers, never layouts, so the marks stay valid while regions are
     * compacted. */
    handle_index_t hx = {0};
    if (st == DSM_OK)
        st = handle_index_build(h, &hx);
    if (st == DSM_OK)
        st = pause_remark(h, &hx, on_cpu, live, satb, nsatb, &rf, wb, nwb);
    if (st == DSM_OK && !refreshed)
        refresh_end(h, &rf);
    refresh_free(&rf);
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_REMARK, t0);
    /* The CPU server's regions and the dead ones, one by one. */
    dsm_mheap_rtrace_t t;
    memset(&t, 0, sizeof t);
    uint8_t *img = NULL, *scratch = NULL;
    uint32_t *evac = malloc(h->nregions * sizeof *evac), ne = 0;
    if (evac == NULL && st == DSM_OK)
        st = DSM_ERR_NOMEM;
    for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++) {
        region_t *r = &h->regions[i];
        if (!r->in_use || r->bp <= DSM_MHEAP_REGION_HDR)
            continue;
        if (on_cpu[i] == 2)
            continue;
        if (on_cpu[i] == 3) {
            st = apply_moves_one(h, r, NULL, 0, DSM_MHEAP_REGION_HDR, 0, &hx);
            h->st.regions_dead++;
            continue;
        }
        if (on_cpu[i]) {
            if (img == NULL) {
                img = malloc(h->region_bytes);
                scratch = malloc(h->region_bytes);
                if (img == NULL || scratch == NULL || dsm_mheap_rtrace_init(&t, h->region_bytes) != DSM_OK) {
                    st = DSM_ERR_NOMEM;
                    break;
                }
            }
            st = cpu_collect(h, &hx, r, satb, nsatb, &t, img, scratch);
            h->st.regions_on_cpu++;
            continue;
        }
        uint64_t used = r->bp - DSM_MHEAP_REGION_HDR;
        if (live[i] < used && (used - live[i]) * 8 >= used)   /* enough garbage: an eighth */
            evac[ne++] = i;
    }
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_LOCAL, t0);
    /* The memory servers' regions with enough garbage, evacuated together
     * with the regions they reference. */
    if (st == DSM_OK && ne > 0) {
        bin_t *bins = malloc(ne * sizeof *bins);
        moves_t mv = {.bin_of = calloc(h->nregions, sizeof(uint32_t))};
        if (bins == NULL || mv.bin_of == NULL) {
            st = DSM_ERR_NOMEM;
        } else {
            uint32_t nb = make_bins(h, evac, ne, live, bins);
            for (uint32_t b = 0; b < nb; b++)
                for (uint32_t k = 0; k < bins[b].nsrc; k++)
                    mv.bin_of[bins[b].src[k]] = b + 1;
            st = evacuate(h, bins, nb, &mv);
            t0 = mheap_phase(h, DSM_MHEAP_PHASE_EVAC, t0);
            for (uint32_t b = 0; b < nb && st == DSM_OK; b++)
                if (!bins[b].done)   /* nothing moved: not part of the moves */
                    for (uint32_t k = 0; k < bins[b].nsrc; k++)
                        mv.bin_of[bins[b].src[k]] = 0;
            if (st == DSM_OK)
                st = apply_moves(h, bins, nb, &mv, 1, 0, &hx);
            else if (st != DSM_ERR_NOMEM)
                st = mheap_failed(h, st);
            mheap_phase(h, DSM_MHEAP_PHASE_FIXUP, t0);
        }
        free(bins);
        free(mv.bin_of);
        free(mv.p);
    }
    handle_index_free(&hx);
    free(evac);
    dsm_mheap_rtrace_free(&t);
    free(img);
    free(scratch);
    free(live);
    free(on_cpu);
    free(wb);
    if (st != DSM_OK)
        return st;
    h->st.cssc_count++;
    return DSM_OK;
}

/* ---- the G1-like baseline's pause ------------------------------------------- */

static int live_cmp(const void *a, const void *b, void *ctx);

/* A bin whose destination keeps its objects (base): their pointers into
 * the bin's other regions, which the copy did not see, fixed through the
 * remsets of those regions (apply_moves leaves slots within a bin alone). */
static dsm_status_t fix_kept(dsm_mheap_t *h, const bin_t *bn, uint32_t tag, const moves_t *mv, int known)
{
    region_t *d = &h->regions[bn->src[0]];
    dsm_status_t st = DSM_OK;
    pthread_mutex_lock(&h->rs_mu);
    for (uint32_t k = 1; k < bn->nsrc && st == DSM_OK; k++) {
        const region_t *r = &h->regions[bn->src[k]];
        for (uint32_t i = 0; i < r->slots.cap && st == DSM_OK; i++) {
            uint64_t s = r->slots.v[i], v;
            if (s == 0 || region_of(h, s) != d || s - d->start >= bn->base)
                continue;
            if ((st = cache_load64(h, s, &v)) != DSM_OK)
                break;
            region_t *vr = v ? region_of(h, v) : NULL;
            if (vr == NULL || mv->bin_of[vr - h->regions] != tag || v - d->start < bn->base)
                continue;
            const pair_t *q = pair_exact(mv->p, mv->n, v);
            if (q)
                st = cache_store64(h, s, q->new_addr);
            else if (slot_live(h, s, known))
                st = mheap_unsound(h, "a kept object's pointer to", v);
        }
    }
    pthread_mutex_unlock(&h->rs_mu);
    return st;
}

/* Young regions: everything in them was allocated since the last
 * collection, so the SATB marking knows nothing of them. */
static int young(const region_t *r) { return region_young(r); }

/* The young collection's trace (G1's): the young regions' objects
 * reachable now, from the handles and the remembered sets (every
 * inter-region reference into a young region is in its remset, cleaned
 * by remset_refresh to the slots that still point there), following
 * references only within the young regions. Old objects are taken as
 * live here (the marking decides for them), so a young object held by a
 * dead old one survives: conservative, as G1's. Without this, objects
 * allocated since the snapshot all survive the next pause, garbage or
 * not. Fills each young region's ct; heap lock held. */
static dsm_status_t young_mark(dsm_mheap_t *h)
{
    u64vec_t stack = {0};
    dsm_status_t st = DSM_OK;
    for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++) {
        region_t *r = &h->regions[i];
        if (!young(r))
            continue;
        if (r->ct.bitmap == NULL && dsm_mheap_rtrace_init(&r->ct, h->region_bytes) != DSM_OK)
            st = DSM_ERR_NOMEM;
        else
            dsm_mheap_rtrace_reset(&r->ct);
        pthread_mutex_lock(&h->rs_mu);
        for (uint32_t k = 0; k < r->targets.cap && st == DSM_OK; k++)
            if (r->targets.v[k] && u64vec_push(&stack, r->targets.v[k]) != 0)
                st = DSM_ERR_NOMEM;
        pthread_mutex_unlock(&h->rs_mu);
    }
    for (uint32_t x = 1; x < h->nhandles && st == DSM_OK; x++) {
        region_t *r = handle_region(h, x);
        if (r != NULL && young(r) && u64vec_push(&stack, h->handle_addr[x]) != 0)
            st = DSM_ERR_NOMEM;
    }
    while (st == DSM_OK && stack.n > 0) {
        uint64_t a = stack.v[--stack.n];
        region_t *r = region_of(h, a);
        if (r == NULL || !young(r))
            continue;   /* old: the marking's */
        uint32_t off = (uint32_t)(a - r->start);
        if (a % 8 || off < DSM_MHEAP_REGION_HDR || off >= r->bp || !bit_test(r->starts, off / 8)) {
            st = mheap_unsound(h, "young collection: a reference to no object at", a);
            break;
        }
        if (bit_test(r->ct.bitmap, off / 8))
            continue;
        st = mark_object(h, r, a, &stack);
    }
    free(stack.v);
    return st;
}

/* The G1-like baseline's stop-the-world pauses. A young pause collects
 * the young regions only: their survivors (young_mark) are evacuated, a
 * marking under way goes on after it (the SATB log's entries become grey
 * objects of it). A mixed pause (once the marking has reached its end,
 * or when asked for, or when a young pause left too little room) also
 * finishes the marking (the remark: the SATB log's entries as roots, and
 * whatever the concurrent marker had not reached) and takes the old
 * regions it marked into the collection set. Either frees the regions of
 * the set with nothing live, then evacuates only the live objects of
 * those with at least an eighth of garbage (by garbage ratio; first fit
 * into as few destination regions as hold them), reading each survivor
 * through the cache, writing it packed into the first region of its bin,
 * and fixing every pointer to it as a CSSC does (apply_moves). */
static dsm_status_t gc_g1(dsm_mheap_t *h, int mixed)
{
    uint64_t t0 = dsm_now_ns();
    msct_cut(h);
    jobs_free(h);
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_CUT, t0);
    remset_flush(h);
    /* A young pause needs the remsets of the young regions only (G1 scans
     * those of its collection set). */
    dsm_status_t st = remset_refresh(h, !mixed);
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_REMSET, t0);
    if (st != DSM_OK)
        return st;
    if (mixed && !h->mark_live)
        st = mark_prepare(h);   /* no marking under way: all of it now */
    for (size_t k = 0; st == DSM_OK && h->mark_live && h->cfg.satb && k < h->satb_log.n; k++)
        if (u64vec_push(&h->mark_stack, h->satb_log.v[k]) != 0)
            st = DSM_ERR_NOMEM;
    if (mixed)
        mark_ended(h, 0);
    if (st == DSM_OK && mixed && (st = mark_unwait(h)) == DSM_OK)
        st = mark_drain(h, 0, NULL);
    if (st == DSM_OK)
        st = young_mark(h);
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_REMARK, t0);
    if (mixed)
        h->mark_live = 0;
    if (st != DSM_OK)
        return st == DSM_ERR_NOMEM || st == DSM_ERR_STATE ? st : mheap_failed(h, st);
    int known = mixed ? 2 : 1;   /* whose marks tell a live object (slot_live) */
    uint64_t *live = calloc(h->nregions, sizeof *live);
    uint32_t *cset = malloc(h->nregions * sizeof *cset), nc = 0;
    bin_t *bins = malloc(h->nregions * sizeof *bins);
    moves_t mv = {.bin_of = calloc(h->nregions, sizeof(uint32_t))};
    pair_t *seq = NULL;
    uint8_t *img = malloc(h->region_bytes);
    handle_index_t hx = {0};
    if (!live || !cset || !bins || !mv.bin_of || !img)
        st = DSM_ERR_NOMEM;
    if (st == DSM_OK)
        st = handle_index_build(h, &hx);
    for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++) {
        region_t *r = &h->regions[i];
        if (!r->in_use || r->bp <= DSM_MHEAP_REGION_HDR)
            continue;
        if (!young(r) && !(mixed && marked_region(h, r)))
            continue;   /* old, and not (or not wholly) known to a finished marking */
        uint64_t used = r->bp - DSM_MHEAP_REGION_HDR;
        live[i] = r->ct.live_bytes + (young(r) ? 0 : r->bp - r->tams);
        if (live[i] == 0) {
            st = apply_moves_one(h, r, NULL, 0, DSM_MHEAP_REGION_HDR, known, &hx);
            h->st.regions_dead++;
        } else if (live[i] < used && (used - live[i]) * 8 >= used) {
            cset[nc++] = i;
        }
    }
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_LOCAL, t0);
    /* Most garbage first, each into the first bin it fits. */
    if (st == DSM_OK && nc > 1)
        qsort_r(cset, nc, sizeof *cset, live_cmp, live);
    uint64_t cap = h->region_bytes - DSM_MHEAP_REGION_HDR, nobj = 0;
    uint32_t nb = 0;
    /* Survivors go on filling the old region the last pause evacuated
     * into (G1 keeps its old GC allocation region), its objects staying
     * where they are: promoted objects are packed across pauses, not
     * left a region each. */
    region_t *pr = h->promo_region < h->nregions ? &h->regions[h->promo_region] : NULL;
    if (st == DSM_OK && nc > 0 && pr && pr->in_use && !young(pr) && !mv.bin_of[pr - h->regions] &&
        pr->bp > DSM_MHEAP_REGION_HDR && pr->bp < h->region_bytes) {
        uint32_t x = (uint32_t)(pr - h->regions);
        int in_cset = 0;
        for (uint32_t k = 0; k < nc; k++)
            in_cset |= cset[k] == x;
        if (!in_cset) {
            bins[nb++] = (bin_t){.nsrc = 1, .src = {x}, .live = pr->bp - DSM_MHEAP_REGION_HDR, .base = pr->bp};
            mv.bin_of[x] = 1;
            nobj += objects_in(h, pr);
        }
    }
    for (uint32_t k = 0; k < nc && st == DSM_OK; k++) {
        uint32_t x = cset[k], b = 0;
        while (b < nb && (bins[b].live + live[x] > cap || bins[b].nsrc > DSM_MHEAP_EVAC_MAX_MORE))
            b++;
        if (b == nb)
            bins[nb++] = (bin_t){0};
        bins[b].src[bins[b].nsrc++] = x;
        bins[b].live += live[x];
        mv.bin_of[x] = b + 1;
        nobj += objects_in(h, &h->regions[x]);
    }
    if (st == DSM_OK && nb > 0 && (seq = malloc(nobj * sizeof *seq)) == NULL)
        st = DSM_ERR_NOMEM;
    /* Where each survivor goes: bin by bin, in marking order, then what
     * was allocated since the last collection. Only headers are read. */
    uint32_t n = 0;
    for (uint32_t b = 0; b < nb && st == DSM_OK; b++) {
        const region_t *d = &h->regions[bins[b].src[0]];
        uint64_t to = DSM_MHEAP_REGION_HDR;
        if (bins[b].base) {   /* the kept objects stay: their sizes from the start map */
            for (uint32_t off = DSM_MHEAP_REGION_HDR, next; off < bins[b].base && n < nobj; off = next) {
                for (next = off + 8; next < bins[b].base && !bit_test(d->starts, next / 8); next += 8) {}
                if (bit_test(d->starts, off / 8))
                    seq[n++] = (pair_t){d->start + off, d->start + off, next - off};
            }
            to = bins[b].base;
        }
        for (uint32_t k = bins[b].base ? 1 : 0; k < bins[b].nsrc && st == DSM_OK; k++) {
            region_t *r = &h->regions[bins[b].src[k]];
            uint32_t nmarked = r->ct.norder, from = young(r) ? r->bp : r->tams;
            for (uint32_t o = 0, off = from; st == DSM_OK && (o < nmarked || off < r->bp);) {
                uint32_t at;
                if (o < nmarked) {
                    at = r->ct.order[o++];
                } else {
                    if (!bit_test(r->starts, off / 8)) {
                        off += 8;
                        continue;
                    }
                    at = off;
                }
                uint64_t hdr;
                if ((st = cache_load64(h, r->start + at, &hdr)) != DSM_OK)
                    break;
                uint32_t size = dsm_mheap_hdr_size(hdr);
                if (size == 0 || size % 8 || to + size > h->region_bytes || n >= nobj) {
                    st = mheap_unsound(h, "a survivor that does not parse at", r->start + at);
                    break;
                }
                seq[n++] = (pair_t){r->start + at, d->start + to, size};
                to += size;
                if (at >= from)
                    off = at + size;
            }
        }
        bins[b].new_bp = (uint32_t)to;
        bins[b].objects = 0;
        bins[b].done = 1;
    }
    if (st == DSM_OK && n > 0) {
        mv.p = malloc(n * sizeof *mv.p);
        if (mv.p == NULL)
            st = DSM_ERR_NOMEM;
        else {
            memcpy(mv.p, seq, n * sizeof *seq);
            mv.n = n;
            pairs_sort(mv.p, n);
        }
    }
    /* Copy, bin by bin: every survivor read into the destination's image,
     * its pointers into the bin fixed (those into other bins are remset
     * slots, fixed by apply_moves), then the destination's old pages
     * dropped and the image written from the header on. */
    uint32_t at = 0;
    for (uint32_t b = 0; b < nb && st == DSM_OK; b++) {
        region_t *d = &h->regions[bins[b].src[0]];
        for (; at < n && st == DSM_OK && region_of(h, seq[at].new_addr) == d; at++) {
            if (seq[at].new_addr - d->start < bins[b].base)
                continue;   /* kept in place */
            uint8_t *o = img + (seq[at].new_addr - d->start);
            if ((st = cache_read(h, seq[at].old, o, seq[at].size)) != DSM_OK)
                break;
            const dsm_mheap_tinfo_t *ti = &h->types->t[dsm_mheap_hdr_type(*(uint64_t *)(void *)o)];
            for (uint32_t k = 0; k < ti->nrefs && st == DSM_OK; k++) {
                uint64_t *f = (uint64_t *)(void *)(o + DSM_MHEAP_OBJ_HDR + ti->refs[k]);
                region_t *vr = *f ? region_of(h, *f) : NULL;
                if (vr == NULL || mv.bin_of[vr - h->regions] != b + 1)
                    continue;
                const pair_t *q = pair_exact(mv.p, mv.n, *f);
                if (q == NULL)
                    st = mheap_unsound(h, "a survivor's pointer to", *f);
                else
                    *f = q->new_addr;
            }
        }
        if (st != DSM_OK)
            break;
        uint32_t from = bins[b].base ? bins[b].base : DSM_MHEAP_REGION_HDR;
        if (bins[b].base == 0)
            cache_region_reset(h, d, 0, 0);
        else
            st = fix_kept(h, &bins[b], b + 1, &mv, known);
        if (st == DSM_OK && bins[b].new_bp > from)
            st = cache_write(h, d->start + from, img + from, bins[b].new_bp - from);
    }
    t0 = mheap_phase(h, DSM_MHEAP_PHASE_EVAC, t0);
    if (st == DSM_OK && nb > 0)
        st = apply_moves(h, bins, nb, &mv, 0, known, &hx);
    mheap_phase(h, DSM_MHEAP_PHASE_FIXUP, t0);
    handle_index_free(&hx);
    uint32_t last_dest = nb > 0 ? bins[nb - 1].src[0] : UINT32_MAX;
    free(live);
    free(cset);
    free(bins);
    free(mv.bin_of);
    free(mv.p);
    free(seq);
    free(img);
    if (st != DSM_OK)
        return st == DSM_ERR_NOMEM || st == DSM_ERR_STATE ? st : mheap_failed(h, st);
    /* New objects go to fresh (young) regions, as G1's eden; the next
     * survivors to the last bin's destination. */
    h->alloc_region = UINT32_MAX;
    if (nb > 0)
        h->promo_region = last_dest;
    h->st.cssc_count++;
    if (mixed)
        h->st.mixed_pauses++;
    else
        h->st.young_pauses++;
    return DSM_OK;
}

static int live_cmp(const void *a, const void *b, void *ctx)
{
    const uint64_t *live = ctx;
    uint64_t x = live[*(const uint32_t *)a], y = live[*(const uint32_t *)b];
    return x < y ? -1 : x > y;
}

/* ---- full GC (CPU) -------------------------------------------------------------- */

typedef struct obj {
    uint64_t old, new_addr;
    uint32_t size;
} obj_t;

static int obj_cmp(const void *a, const void *b)
{
    uint64_t x = ((const obj_t *)a)->old, y = ((const obj_t *)b)->old;
    return x < y ? -1 : x > y;
}

static const obj_t *obj_find(const obj_t *o, size_t n, uint64_t a)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (o[mid].old < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && o[lo].old == a ? &o[lo] : NULL;
}

/* The header of the object at a, checked against the start map. */
static dsm_status_t header(dsm_mheap_t *h, uint64_t a, const dsm_mheap_tinfo_t **ti)
{
    region_t *r = region_of(h, a);
    if (r == NULL || !r->in_use || a % 8 || a - r->start >= r->bp || !bit_test(r->starts, (a - r->start) / 8))
        return DSM_ERR_BAD_ADDR;
    return mheap_object_type(h, a, ti);
}

/* Mark the whole heap from the handles through the cache (pulling the
 * pages it needs): the reachable objects, unordered, into *objs. */
static dsm_status_t cpu_mark(dsm_mheap_t *h, obj_t **objs_out, size_t *nobj_out)
{
    size_t words = h->region_bytes / 512;
    uint64_t *marks = calloc((size_t)h->nregions * words, sizeof(uint64_t));
    u64vec_t stack = {0};
    obj_t *objs = NULL;
    size_t nobj = 0, cap = 0;
    dsm_status_t st = marks ? DSM_OK : DSM_ERR_NOMEM;
    for (uint32_t x = 1; x < h->nhandles && st == DSM_OK; x++) {
        if (h->handle_used[x] && h->handle_addr[x])
            if (u64vec_push(&stack, h->handle_addr[x]) != 0)
                st = DSM_ERR_NOMEM;
    }
    while (st == DSM_OK && stack.n > 0) {
        uint64_t a = stack.v[--stack.n];
        region_t *r = region_of(h, a);
        const dsm_mheap_tinfo_t *ti;
        if (r == NULL)
            continue;
        uint64_t bit = (uint64_t)(r - h->regions) * h->region_bytes / 8 + (a - r->start) / 8;
        if (bit_test(marks, bit))
            continue;
        if ((st = header(h, a, &ti)) != DSM_OK) {
            if (st == DSM_ERR_BAD_ADDR)   /* a reference to no object: the heap fails, loudly */
                st = mheap_unsound(h, "full GC: a reference to no object at", a);
            break;
        }
        bit_on(marks, bit);
        if (grow((void **)&objs, &cap, nobj, sizeof *objs) != 0) {
            st = DSM_ERR_NOMEM;
            break;
        }
        objs[nobj++] = (obj_t){a, 0, ti->size};
        for (uint32_t k = 0; k < ti->nrefs && st == DSM_OK; k++) {
            uint64_t v;
            if ((st = cache_load64(h, a + DSM_MHEAP_OBJ_HDR + ti->refs[k], &v)) == DSM_OK && v)
                if (u64vec_push(&stack, v) != 0)
                    st = DSM_ERR_NOMEM;
        }
    }
    free(stack.v);
    free(marks);
    *objs_out = objs;
    *nobj_out = nobj;
    return st;
}

dsm_status_t gc_mark_only(dsm_mheap_t *h, uint64_t *live_bytes)
{
    remset_flush(h);
    obj_t *objs = NULL;
    size_t nobj = 0;
    dsm_status_t st = cpu_mark(h, &objs, &nobj);
    uint64_t live = 0;
    for (size_t i = 0; i < nobj; i++)
        live += objs[i].size;
    free(objs);
    *live_bytes = live;
    return st == DSM_OK ? st : mheap_failed(h, st);
}

dsm_status_t gc_full(dsm_mheap_t *h)
{
    msct_cut(h);
    jobs_free(h);
    mark_ended(h, 0);
    h->mark_live = 0;   /* G1-like: the marking's snapshot is gone with the layout */
    remset_flush(h);
    size_t words = h->region_bytes / 512;
    obj_t *objs = NULL;
    size_t nobj = 0;
    uint8_t *buf = malloc(h->region_bytes);
    dsm_status_t st = buf ? cpu_mark(h, &objs, &nobj) : DSM_ERR_NOMEM;
    if (st == DSM_OK && nobj)
        qsort(objs, nobj, sizeof *objs, obj_cmp);
    /* New addresses: each region's survivors slide down in address order. */
    uint32_t *newbp = calloc(h->nregions, sizeof *newbp);
    if (newbp == NULL)
        st = DSM_ERR_NOMEM;
    for (uint32_t i = 0; st == DSM_OK && i < h->nregions; i++)
        newbp[i] = DSM_MHEAP_REGION_HDR;
    for (size_t i = 0; st == DSM_OK && i < nobj; i++) {
        uint32_t ri = (uint32_t)(region_of(h, objs[i].old) - h->regions);
        objs[i].new_addr = h->regions[ri].start + newbp[ri];
        newbp[ri] += objs[i].size;
    }
    pthread_mutex_lock(&h->rs_mu);
    for (uint32_t i = 0; st == DSM_OK && i < h->nregions; i++) {
        u64set_clear(&h->regions[i].slots);
        u64set_clear(&h->regions[i].targets);
    }
    h->st.remset_slots = h->st.remset_targets = 0;
    /* Move and fix: ascending, so a survivor's copy never lands on bytes of
     * one not yet moved. */
    for (size_t i = 0; st == DSM_OK && i < nobj; i++) {
        obj_t *o = &objs[i];
        if ((st = cache_read(h, o->old, buf, o->size)) != DSM_OK)
            break;
        const dsm_mheap_tinfo_t *ti = &h->types->t[dsm_mheap_hdr_type(*(uint64_t *)(void *)buf)];
        for (uint32_t k = 0; k < ti->nrefs; k++) {
            uint64_t *f = (uint64_t *)(void *)(buf + DSM_MHEAP_OBJ_HDR + ti->refs[k]);
            if (*f == 0)
                continue;
            const obj_t *t = obj_find(objs, nobj, *f);
            *f = t ? t->new_addr : 0;   /* every reachable object was marked: t is never NULL */
            uint64_t slot = o->new_addr + DSM_MHEAP_OBJ_HDR + ti->refs[k];
            if (*f && region_of(h, *f) != region_of(h, slot))
                remset_add_locked(h, slot, *f);
        }
        st = cache_write(h, o->new_addr, buf, o->size);
    }
    pthread_mutex_unlock(&h->rs_mu);
    if (st == DSM_OK) {
        for (uint32_t x = 1; x < h->nhandles; x++) {
            if (!h->handle_used[x] || h->handle_addr[x] == 0)
                continue;
            const obj_t *t = obj_find(objs, nobj, h->handle_addr[x]);
            h->handle_addr[x] = t ? t->new_addr : 0;
        }
        for (uint32_t i = 0; i < h->nregions; i++) {
            region_t *r = &h->regions[i];
            if (!r->in_use)
                continue;
            memset(r->starts, 0, words * sizeof(uint64_t));
            if (newbp[i] <= DSM_MHEAP_REGION_HDR) {
                r->in_use = 0;
                h->st.regions_freed++;
            }
            r->bp = newbp[i];
            cache_region_reset(h, r, r->bp, 0);
        }
        for (size_t i = 0; i < nobj; i++) {
            region_t *r = region_of(h, objs[i].new_addr);
            bit_on(r->starts, (objs[i].new_addr - r->start) / 8);
        }
        h->st.full_gc_count++;
    }
    free(newbp);
    free(objs);
    free(buf);
    return st == DSM_OK ? st : mheap_failed(h, st);
}

/* ---- entry -------------------------------------------------------------------------- */

/* Less than an eighth of the heap free for allocation. */
static int too_full(dsm_mheap_t *h)
{
    uint64_t room = 0;
    for (uint32_t i = 0; i < h->nregions; i++)
        room += h->regions[i].in_use ? h->region_bytes - h->regions[i].bp : h->region_bytes;
    return room * 8 < (uint64_t)h->nregions * h->region_bytes;
}

dsm_status_t gc_collect(dsm_mheap_t *h, dsm_mheap_gc_t kind)
{
    uint64_t t0 = dsm_now_ns();
    __atomic_store_n(&h->in_gc, 1, __ATOMIC_RELAXED);
    dsm_status_t st;
    if (kind == DSM_MHEAP_GC_FULL || !mheap_regional(h)) {
        st = gc_full(h);
        mheap_phase(h, DSM_MHEAP_PHASE_FULL, t0);
    } else {
        /* G1-like: a young pause, unless the marking has reached its end
         * (or a collection was asked for): then a mixed one. */
        int mixed = kind == DSM_MHEAP_GC_CSSC || (h->mark_live && h->mark_drained);
        st = g1_like(h) ? gc_g1(h, mixed) : gc_cssc(h);
        /* Objects allocated since the last collection are live at a CSSC;
         * if that left too little room, a second one (a new snapshot,
         * every region traced at the pause; G1-like: a mixed pause that
         * finishes the marking) reclaims those that died, and only if
         * that fails too does the CPU server collect it all. */
        for (int again = 0; st == DSM_OK && kind == DSM_MHEAP_GC_AUTO && again < 2 && too_full(h); again++) {
            if (again == 0) {
                /* No round of traces (G1-like: no marking) is started
                 * for this pause to cut at once: the second one traces
                 * every region afresh anyway. */
                uint64_t t1 = dsm_now_ns();
                st = finish_cycle(h, 0);
                mheap_phase(h, DSM_MHEAP_PHASE_FINISH, t1);
                if (st == DSM_OK)
                    st = g1_like(h) ? gc_g1(h, 1) : gc_cssc(h);
            } else {
                uint64_t t1 = dsm_now_ns();
                st = gc_full(h);
                mheap_phase(h, DSM_MHEAP_PHASE_FULL, t1);
            }
        }
    }
    uint64_t t1 = dsm_now_ns();
    if (st == DSM_OK)
        st = finish_cycle(h, 1);
    mheap_retrigger(h);
    mheap_phase(h, DSM_MHEAP_PHASE_FINISH, t1);
    __atomic_store_n(&h->in_gc, 0, __ATOMIC_RELAXED);
    uint64_t dt = dsm_now_ns() - t0;
    h->st.gc_ns += dt;
    if (dt > h->st.pause_max_ns)
        h->st.pause_max_ns = dt;
    if (u64vec_push(&h->pauses, dt) == 0)
        h->st.pauses++;
    return st;
}
