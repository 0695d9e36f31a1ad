/* The memory-server side of the managed heap: the module a node serves it
 * with (dsm_mheap_attach), the control handler that queues requests, and
 * the tracer thread that serves them against the node's own memory: SETUP
 * (take the heap's part of this node's partition, learn the types), TRACE
 * (MSCT of one region, kept unless the region's tag moved), REMARK (more
 * roots at the pause, the objects allocated since the last collection),
 * EVAC (evacuate regions into one along their traces, answer the forward
 * table), FIXUP (rewrite pointers into moved objects held here), SLOTS
 * (read remset slots), PAGES (a pause's write-back), BATCH (several of
 * these in one round trip) and
 * DESTROY. One job at a time: the memory server traces on one core, as in
 * the paper. A pause's request that finds the tracer idle is served
 * where it arrives, in the progress context: the pause waits for nothing
 * else, and handing it to the tracer would add a thread's wake-up to
 * every round trip of the pause. */
#include "mheap/server.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/heap.h"
#include "dsm/heap_sdk.h"
#include "dsm/mheap.h"
#include "mheap/cpu.h"
#include "mheap/layout.h"
#include "mheap/msg.h"
#include "mheap/trace.h"
#include "util/log.h"
#include "util/thread.h"

#define LOG_MOD "mheap"

enum { MAX_SESSIONS = 16, PREEMPT_SLOTS = 32 };

typedef struct session {
    uint32_t cpu_rank, heap_id;
    dsm_gaddr_t chunk;
    uint8_t *mem;
    uint64_t ubase, part_bytes;
    uint32_t region_bytes, nregions;
    int bfs;
    dsm_mheap_types_t *types;
    dsm_mheap_rtrace_t *traces;   /* per region; bitmap NULL until first used */
    uint8_t *scratch;
} session_t;

typedef struct job {
    struct job *next;
    uint32_t src;
    uint32_t gen;          /* the source's pause count when it came (preempt) */
    uint64_t request_id;
    size_t len;
    uint8_t data[];
} job_t;

typedef struct mserver {
    dsm_node_t *node;
    dsm_fabric_t *fabric;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *head, *tail;
    int serving;   /* a job is being served, by the tracer or in on_ctl */
    int stop;
    /* Per source rank (mod PREEMPT_SLOTS): how many requests a pause sent
     * (any request answered by a reply, except a blocking TRACE). A trace
     * sent without waiting that a pause request overtook (it came after
     * the trace) stops, or is not started: the pause should not wait for
     * a trace that it would redo or do without. */
    uint32_t preempt[PREEMPT_SLOTS];
    session_t *sessions[MAX_SESSIONS];   /* tracer thread only */
    pthread_mutex_t heaps_mu;            /* the CPU-side heaps of this node */
    dsm_mheap_t *heaps[MAX_SESSIONS];
    uint32_t heap_ids[MAX_SESSIONS];
} mserver_t;

static dsm_mheap_trace_hook_t trace_hook;
static void *trace_hook_ctx;

void dsm_mheap_set_trace_hook(dsm_mheap_trace_hook_t fn, void *ctx)
{
    __atomic_store_n(&trace_hook_ctx, ctx, __ATOMIC_RELEASE);
    __atomic_store_n(&trace_hook, fn, __ATOMIC_RELEASE);
}

static void session_free(session_t *s)
{
    if (s == NULL)
        return;
    if (s->traces)
        for (uint32_t i = 0; i < s->nregions; i++)
            dsm_mheap_rtrace_free(&s->traces[i]);
    free(s->traces);
    free(s->types);
    free(s->scratch);
    free(s);
}

static session_t **find(mserver_t *m, uint32_t rank, uint32_t heap_id)
{
    for (int i = 0; i < MAX_SESSIONS; i++)
        if (m->sessions[i] && m->sessions[i]->cpu_rank == rank && m->sessions[i]->heap_id == heap_id)
            return &m->sessions[i];
    return NULL;
}

static uint64_t tag_load(session_t *s, uint32_t region)
{
    return __atomic_load_n((uint64_t *)(void *)(s->mem + (uint64_t)region * s->region_bytes), __ATOMIC_ACQUIRE);
}

static dsm_mheap_rtrace_t *trace_of(session_t *s, uint32_t region)
{
    dsm_mheap_rtrace_t *t = &s->traces[region];
    if (t->bitmap == NULL && dsm_mheap_rtrace_init(t, s->region_bytes) != DSM_OK)
        return NULL;
    return t;
}

static dsm_status_t do_setup(mserver_t *m, uint32_t src, const dsm_mheap_msg_t *in)
{
    if (find(m, src, in->heap_id))
        return DSM_ERR_EXISTS;
    int slot = -1;
    for (int i = 0; i < MAX_SESSIONS && slot < 0; i++)
        if (m->sessions[i] == NULL)
            slot = i;
    if (slot < 0)
        return DSM_ERR_NOMEM;
    size_t usable = 0;
    uint8_t *mem = dsm_local_ptr(m->node, in->chunk);
    if (mem == NULL || dsm_alloc_size(m->node, in->chunk, &usable) != DSM_OK || usable < in->part_bytes)
        return DSM_ERR_BAD_ADDR;
    session_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return DSM_ERR_NOMEM;
    s->cpu_rank = src;
    s->heap_id = in->heap_id;
    s->chunk = in->chunk;
    s->mem = mem;
    s->ubase = in->ubase;
    s->part_bytes = in->part_bytes;
    s->region_bytes = 1u << in->region_shift;
    s->nregions = (uint32_t)(in->part_bytes >> in->region_shift);
    s->bfs = in->order == DSM_MHEAP_ORDER_BFS;
    s->types = malloc(sizeof *s->types);
    s->traces = calloc(s->nregions, sizeof *s->traces);
    s->scratch = malloc(s->region_bytes);
    if (!s->types || !s->traces || !s->scratch) {
        session_free(s);
        return DSM_ERR_NOMEM;
    }
    *s->types = *in->types;
    m->sessions[slot] = s;
    DSM_DEBUG(LOG_MOD, "heap %u of rank %u: %u regions here", in->heap_id, src, s->nregions);
    return DSM_OK;
}

static dsm_status_t do_trace(session_t *s, const dsm_mheap_msg_t *in, dsm_mheap_msg_t *rep, const uint32_t *stop,
                             uint32_t gen)
{
    if (in->region >= s->nregions || in->bp > s->region_bytes)
        return DSM_ERR_INVALID;
    dsm_mheap_rtrace_t *t = trace_of(s, in->region);
    if (t == NULL)
        return DSM_ERR_NOMEM;
    dsm_mheap_rtrace_reset(t);
    t->epoch = in->epoch;
    rep->type = DSM_MHEAP_MSG_TRACE_REP;
    uint8_t *rmem = s->mem + (uint64_t)in->region * s->region_bytes;
    uint64_t ustart = s->ubase + (uint64_t)in->region * s->region_bytes;
    uint64_t t0 = tag_load(s, in->region);
    if (dsm_mheap_tag_started(t0) != dsm_mheap_tag_finished(t0))
        return DSM_OK;   /* a write-back is in flight: ok = 0 */
    if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE) != gen)
        return DSM_OK;   /* a pause came after it: not started, ok = 0 */
    t->stop = stop;
    t->stop_gen = gen;
    dsm_mheap_rtrace_mark(t, rmem, ustart, in->bp, s->types, s->bfs, in->roots, in->nroots);
    t->stop = NULL;
    if (t->stopped) {
        rep->traced_bytes = t->traced_bytes;
        dsm_mheap_rtrace_reset(t);   /* a pause overtook it */
        return DSM_OK;
    }
    dsm_mheap_trace_hook_t hook = __atomic_load_n(&trace_hook, __ATOMIC_ACQUIRE);
    if (hook)
        hook(__atomic_load_n(&trace_hook_ctx, __ATOMIC_ACQUIRE), in->region);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint64_t t1 = tag_load(s, in->region);
    rep->traced_bytes = t->traced_bytes;
    if (t1 != t0 || (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE) != gen)) {
        dsm_mheap_rtrace_reset(t);   /* the region changed under the trace, or a pause overtook it */
        return DSM_OK;
    }
    t->valid = 1;
    rep->ok = 1;
    rep->live_objs = t->norder;
    rep->live_bytes = t->live_bytes;
    return DSM_OK;
}

static dsm_status_t do_remark(session_t *s, const dsm_mheap_msg_t *in, dsm_mheap_msg_t *rep)
{
    if (in->region >= s->nregions || in->bp > s->region_bytes)
        return DSM_ERR_INVALID;
    dsm_mheap_rtrace_t *t = trace_of(s, in->region);
    if (t == NULL)
        return DSM_ERR_NOMEM;
    if (in->flags & DSM_MHEAP_REMARK_FRESH) {
        dsm_mheap_rtrace_reset(t);
        t->epoch = in->epoch;
        t->valid = 1;
    } else if (!t->valid || t->epoch != in->epoch) {
        return DSM_ERR_STATE;
    }
    uint8_t *rmem = s->mem + (uint64_t)in->region * s->region_bytes;
    uint64_t ustart = s->ubase + (uint64_t)in->region * s->region_bytes;
    dsm_mheap_rtrace_mark(t, rmem, ustart, in->bp, s->types, s->bfs, in->roots, in->nroots);
    /* What was allocated since the last collection is live. A kept trace
     * saw none of it, and SATB covers what it points to. A fresh trace
     * reached some of it from the roots; the rest is traced from here, so
     * that no survivor keeps a pointer to an object left unmarked. */
    dsm_status_t st = DSM_OK;
    if (in->flags & DSM_MHEAP_REMARK_FRESH) {
        dsm_writer_t fresh = {0};
        uint32_t off = in->old_bp < DSM_MHEAP_REGION_HDR ? DSM_MHEAP_REGION_HDR : in->old_bp, size, n = 0;
        while (off < in->bp && (size = dsm_mheap_object_at(rmem, off, in->bp, s->types)) != 0) {
            dsm_write_u64(&fresh, ustart + off);
            off += size;
            n++;
        }
        if (n && !fresh.ok)
            st = DSM_ERR_NOMEM;
        else
            dsm_mheap_rtrace_mark(t, rmem, ustart, in->bp, s->types, s->bfs, fresh.buf, (uint32_t)(fresh.len / 8));
        dsm_writer_free(&fresh);
    }
    if (st == DSM_OK)
        st = dsm_mheap_rtrace_mark_new(t, rmem, in->old_bp, in->bp, s->types);
    if (st != DSM_OK) {
        dsm_mheap_rtrace_reset(t);
        return st;
    }
    rep->type = DSM_MHEAP_MSG_REMARK_REP;
    rep->live_objs = t->norder;
    rep->live_bytes = t->live_bytes;
    return DSM_OK;
}

/* Evacuate region `region` and the `more` ones into `region` (their traces
 * of this epoch), answer the forward table. */
static dsm_status_t do_evac(session_t *s, const dsm_mheap_msg_t *in, dsm_mheap_msg_t *rep, dsm_writer_t *pairs)
{
    dsm_mheap_evac_src_t src[1 + DSM_MHEAP_EVAC_MAX_MORE] = {{0}};
    uint32_t nsrc = 1 + in->nmore;
    for (uint32_t k = 0; k < nsrc; k++) {
        uint32_t region = k == 0 ? in->region : dsm_get_u32(in->more + 4 * (size_t)(k - 1));
        if (region >= s->nregions)
            return DSM_ERR_INVALID;
        dsm_mheap_rtrace_t *t = &s->traces[region];
        if (t->bitmap == NULL || !t->valid || t->epoch != in->epoch)
            return DSM_ERR_STATE;   /* never evacuate along a discarded trace */
        uint8_t *rmem = s->mem + (uint64_t)region * s->region_bytes;
        /* The region's bp is where its last object ends: the trace's
         * objects and the new ones were all checked against the remark's bp. */
        src[k] = (dsm_mheap_evac_src_t){.t = t, .mem = rmem,
                                        .ustart = s->ubase + (uint64_t)region * s->region_bytes,
                                        .bp = dsm_mheap_rtrace_end(t, rmem)};
    }
    uint32_t new_bp = 0, dangling = 0;
    dsm_status_t st = dsm_mheap_rtrace_evacuate(src, nsrc, s->types, s->scratch, pairs, &new_bp, &dangling);
    for (uint32_t k = 0; k < nsrc; k++)
        dsm_mheap_rtrace_reset((dsm_mheap_rtrace_t *)src[k].t);
    if (st != DSM_OK)
        return st;
    if (dangling) {
        /* A reference to an object the trace did not keep: the CPU server
         * fails the heap on this status (mheap_unsound). */
        DSM_ERROR(LOG_MOD, "region %u: %u pointers to unmarked objects (an unsound trace)", in->region, dangling);
        return DSM_ERR_BAD_ADDR;
    }
    rep->type = DSM_MHEAP_MSG_EVAC_REP;
    rep->new_bp = new_bp;
    rep->npairs = (uint32_t)(pairs->len / DSM_MHEAP_EVAC_PAIR);
    rep->pairs = pairs->buf;
    return DSM_OK;
}

static dsm_status_t do_fixup(session_t *s, const dsm_mheap_msg_t *in, dsm_mheap_msg_t *rep)
{
    uint32_t fixed = 0;
    for (uint32_t i = 0; i < in->nslots; i++) {
        uint64_t slot = dsm_get_u64(in->slots + 8 * (size_t)i);
        if (slot < s->ubase || slot - s->ubase >= s->part_bytes || slot % 8 != 0)
            continue;
        uint64_t *p = (uint64_t *)(void *)(s->mem + (slot - s->ubase));
        uint64_t v = *p;
        if (v < in->lo || v >= in->hi)
            continue;   /* a stale remset entry: the field moved on */
        uint32_t lo = 0, hi = in->npairs;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (dsm_get_u64(in->pairs + (size_t)mid * DSM_MHEAP_FIX_PAIR) < v)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < in->npairs && dsm_get_u64(in->pairs + (size_t)lo * DSM_MHEAP_FIX_PAIR) == v) {
            *p = dsm_get_u64(in->pairs + (size_t)lo * DSM_MHEAP_FIX_PAIR + 8);
            fixed++;
        }
    }
    rep->type = DSM_MHEAP_MSG_FIXUP_REP;
    rep->fixed = fixed;
    return DSM_OK;
}

/* A pause's write-back of a region's dirty pages, served in order with
 * the REMARKs and EVACs after it. No trace runs meanwhile (this thread is
 * the tracer), so the tag is left alone; the region header stays ours. */
static dsm_status_t do_pages(session_t *s, const dsm_mheap_msg_t *in, dsm_mheap_msg_t *rep)
{
    if (in->region >= s->nregions)
        return DSM_ERR_INVALID;
    for (uint32_t i = 0; i < in->npages; i++)
        if (dsm_get_u32(in->pages + (size_t)i * DSM_MHEAP_PAGE_ITEM) >= s->region_bytes / DSM_MHEAP_PAGE)
            return DSM_ERR_INVALID;
    uint8_t *rmem = s->mem + (uint64_t)in->region * s->region_bytes;
    for (uint32_t i = 0; i < in->npages; i++) {
        const uint8_t *e = in->pages + (size_t)i * DSM_MHEAP_PAGE_ITEM;
        uint32_t page = dsm_get_u32(e), skip = page == 0 ? DSM_MHEAP_REGION_HDR : 0;
        memcpy(rmem + (size_t)page * DSM_MHEAP_PAGE + skip, e + 4 + skip, DSM_MHEAP_PAGE - skip);
    }
    rep->type = DSM_MHEAP_MSG_PAGES_REP;
    return DSM_OK;
}

/* Read the words at the given slots of this server's part (0 outside it). */
static dsm_status_t do_slots(session_t *s, const dsm_mheap_msg_t *in, dsm_mheap_msg_t *rep, dsm_writer_t *vals)
{
    for (uint32_t i = 0; i < in->nslots; i++) {
        uint64_t slot = dsm_get_u64(in->slots + 8 * (size_t)i), v = 0;
        if (slot >= s->ubase && slot - s->ubase < s->part_bytes && slot % 8 == 0)
            v = __atomic_load_n((uint64_t *)(void *)(s->mem + (slot - s->ubase)), __ATOMIC_RELAXED);
        dsm_write_u64(vals, v);
    }
    if (in->nslots && !vals->ok)
        return DSM_ERR_NOMEM;
    rep->type = DSM_MHEAP_MSG_SLOTS_REP;
    rep->nslots = in->nslots;
    rep->slots = vals->buf;
    return DSM_OK;
}

/* One request of a session (not SETUP): its reply in rep (pairs holds an
 * EVAC_REP's table, a SLOTS_REP's values). */
static dsm_status_t dispatch(session_t **sp, const dsm_mheap_msg_t *in, dsm_mheap_msg_t *rep, dsm_writer_t *pairs)
{
    switch (in->type) {
    case DSM_MHEAP_MSG_TRACE: return do_trace(*sp, in, rep, NULL, 0);
    case DSM_MHEAP_MSG_REMARK: return do_remark(*sp, in, rep);
    case DSM_MHEAP_MSG_EVAC: return do_evac(*sp, in, rep, pairs);
    case DSM_MHEAP_MSG_FIXUP: return do_fixup(*sp, in, rep);
    case DSM_MHEAP_MSG_SLOTS: return do_slots(*sp, in, rep, pairs);
    case DSM_MHEAP_MSG_PAGES: return do_pages(*sp, in, rep);
    case DSM_MHEAP_MSG_DESTROY:
        session_free(*sp);
        *sp = NULL;
        rep->type = DSM_MHEAP_MSG_DESTROY_REP;
        return DSM_OK;
    default: return DSM_ERR_PROTO;
    }
}

/* A BATCH: REMARK, EVAC, FIXUP, SLOTS and PAGES requests served in order, each answered
 * in the BATCH_REP with its own status. */
static dsm_status_t do_batch(session_t **sp, const dsm_mheap_msg_t *in, dsm_mheap_batch_t *out)
{
    dsm_mheap_batch_begin(out, DSM_MHEAP_MSG_BATCH_REP, in->heap_id);
    size_t pos = 0;
    for (uint32_t i = 0; i < in->nitems; i++) {
        const uint8_t *data;
        size_t len;
        if (dsm_mheap_batch_item(in, &pos, &data, &len, NULL) != DSM_OK)
            return DSM_ERR_PROTO;   /* never: the decoder walked them */
        dsm_mheap_msg_t item, rep;
        memset(&rep, 0, sizeof rep);
        dsm_writer_t pairs = {0};
        dsm_status_t st = dsm_mheap_msg_decode(data, len, &item, NULL);
        if (st == DSM_OK && item.heap_id != in->heap_id)
            st = DSM_ERR_PROTO;
        if (st == DSM_OK && item.type != DSM_MHEAP_MSG_REMARK && item.type != DSM_MHEAP_MSG_EVAC &&
            item.type != DSM_MHEAP_MSG_FIXUP && item.type != DSM_MHEAP_MSG_SLOTS && item.type != DSM_MHEAP_MSG_PAGES)
            st = DSM_ERR_PROTO;
        if (st == DSM_OK)
            st = dispatch(sp, &item, &rep, &pairs);
        rep.heap_id = in->heap_id;
        dsm_mheap_batch_add(out, &rep, st);
        dsm_writer_free(&pairs);
    }
    dsm_mheap_batch_end(out);
    return out->w.ok ? DSM_OK : DSM_ERR_NOMEM;
}

static void serve(mserver_t *m, job_t *j)
{
    dsm_mheap_msg_t in, rep;
    memset(&rep, 0, sizeof rep);
    dsm_mheap_types_t *types = malloc(sizeof *types);
    dsm_writer_t pairs = {0}, out = {0};
    dsm_mheap_batch_t batch;
    memset(&batch, 0, sizeof batch);
    int batched = 0;
    dsm_status_t st = types ? dsm_mheap_msg_decode(j->data, j->len, &in, types) : DSM_ERR_NOMEM;
    if (st != DSM_OK) {
        DSM_WARN(LOG_MOD, "malformed control message from rank %u dropped", j->src);
    } else if (in.type == DSM_MHEAP_MSG_SETUP) {
        st = do_setup(m, j->src, &in);
        rep.type = DSM_MHEAP_MSG_SETUP_REP;
    } else {
        session_t **sp = find(m, j->src, in.heap_id);
        if (sp == NULL) {
            st = DSM_ERR_STATE;
        } else if (in.type == DSM_MHEAP_MSG_BATCH) {
            st = do_batch(sp, &in, &batch);
            batched = 1;
        } else if (in.type == DSM_MHEAP_MSG_TRACE && j->request_id == 0) {
            st = do_trace(*sp, &in, &rep, &m->preempt[j->src % PREEMPT_SLOTS], j->gen);
        } else {
            st = dispatch(sp, &in, &rep, &pairs);
        }
    }
    if (j->request_id == 0 && in.type == DSM_MHEAP_MSG_TRACE) {
        /* A trace sent without waiting: tell the CPU server when it is done
         * (a failed one as not kept). */
        if (st != DSM_OK)
            memset(&rep, 0, sizeof rep);
        rep.type = DSM_MHEAP_MSG_TRACE_DONE;
        rep.heap_id = in.heap_id;
        rep.region = in.region;
        rep.epoch = in.epoch;
        dsm_mheap_msg_encode(&rep, &out);
        dsm_status_t rs = out.ok ? dsm_fabric_am_send(m->fabric, j->src, DSM_AM_MHEAP_DONE, out.buf, out.len)
                                 : DSM_ERR_NOMEM;
        if (rs != DSM_OK)
            DSM_DEBUG(LOG_MOD, "trace-done to rank %u failed: %s", j->src, dsm_strerror(rs));
    }
    if (j->request_id != 0) {
        size_t len = 0;
        if (st == DSM_OK && batched) {
            out = batch.w;   /* already encoded */
            batch.w = (dsm_writer_t){0};
            len = out.len;
        } else if (st == DSM_OK) {
            rep.heap_id = in.heap_id;
            dsm_mheap_msg_encode(&rep, &out);
            if (!out.ok)
                st = DSM_ERR_NOMEM;
            len = out.ok ? out.len : 0;
        }
        dsm_status_t rs = dsm_fabric_am_reply(m->fabric, j->src, j->request_id, st, st == DSM_OK ? out.buf : NULL,
                                              st == DSM_OK ? len : 0);
        if (rs != DSM_OK)
            DSM_DEBUG(LOG_MOD, "reply to rank %u failed: %s", j->src, dsm_strerror(rs));
    }
    dsm_writer_free(&pairs);
    dsm_writer_free(&out);
    dsm_writer_free(&batch.w);
    free(types);
}

/* Serve j, taken by the caller as the one job being served; m->mu held
 * on entry and on return, dropped while it runs. */
static void serve_unlocked(mserver_t *m, job_t *j)
{
    m->serving = 1;
    pthread_mutex_unlock(&m->mu);
    serve(m, j);
    free(j);
    pthread_mutex_lock(&m->mu);
    m->serving = 0;
}

static void *tracer_main(void *arg)
{
    mserver_t *m = arg;
    dsm_thread_name("dsm-gc-tracer", -1);
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while ((m->head == NULL || m->serving) && !m->stop)
            pthread_cond_wait(&m->cv, &m->mu);
        if (m->stop)
            break;
        job_t *j = m->head;
        m->head = j->next;
        if (m->head == NULL)
            m->tail = NULL;
        serve_unlocked(m, j);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Whether a request of this type, sent by a waiting sender, is a pause's
 * that may be served in the progress context: a step of the pause bounded
 * by the regions it names, that asks nothing of other nodes. */
static int pause_step(uint16_t type)
{
    return type == DSM_MHEAP_MSG_BATCH || type == DSM_MHEAP_MSG_REMARK || type == DSM_MHEAP_MSG_EVAC ||
           type == DSM_MHEAP_MSG_FIXUP || type == DSM_MHEAP_MSG_SLOTS || type == DSM_MHEAP_MSG_PAGES;
}

/* Progress context: copy the request and hand it to the tracer thread, or
 * serve a pause's step here when nothing is queued or being served (then
 * every request that came before it has been answered). */
static void on_ctl(void *ctx, const dsm_am_msg_t *msg)
{
    mserver_t *m = ctx;
    if (msg->len > DSM_MHEAP_MSG_MAX_LEN) {
        DSM_WARN(LOG_MOD, "oversized control message from rank %u (%zu bytes) refused", msg->src_rank, msg->len);
        /* a sender waiting for an answer gets one now, not its op timeout */
        if (msg->request_id)
            dsm_fabric_am_reply(m->fabric, msg->src_rank, msg->request_id, DSM_ERR_TOO_BIG, NULL, 0);
        return;
    }
    job_t *j = malloc(sizeof *j + msg->len);
    if (j == NULL) {
        if (msg->request_id)
            dsm_fabric_am_reply(m->fabric, msg->src_rank, msg->request_id, DSM_ERR_NOMEM, NULL, 0);
        return;
    }
    j->next = NULL;
    j->src = msg->src_rank;
    j->request_id = msg->request_id;
    j->len = msg->len;
    memcpy(j->data, msg->data, msg->len);
    /* A request that waits for its reply, but for a blocking TRACE, is a
     * pause's: it stops the source's traces that came before it. */
    uint32_t *pre = &m->preempt[msg->src_rank % PREEMPT_SLOTS];
    uint16_t type = 0;
    int known = dsm_mheap_msg_peek_type(msg->data, msg->len, &type) == DSM_OK;
    int trace = known && type == DSM_MHEAP_MSG_TRACE;
    if (msg->request_id != 0 && !trace)
        __atomic_add_fetch(pre, 1, __ATOMIC_RELEASE);
    j->gen = __atomic_load_n(pre, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&m->mu);
    if (msg->request_id != 0 && known && pause_step(type) && m->head == NULL && !m->serving && !m->stop) {
        serve_unlocked(m, j);
        if (m->head)   /* queued meanwhile (another thread's progress) */
            pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        return;
    }
    if (m->tail)
        m->tail->next = j;
    else
        m->head = j;
    m->tail = j;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

/* Progress context: a memory server finished a trace this node sent. */
static void on_done(void *ctx, const dsm_am_msg_t *msg)
{
    mserver_t *m = ctx;
    dsm_mheap_msg_t d;
    if (dsm_mheap_msg_decode(msg->data, msg->len, &d, NULL) != DSM_OK || d.type != DSM_MHEAP_MSG_TRACE_DONE) {
        DSM_WARN(LOG_MOD, "malformed trace-done message from rank %u dropped", msg->src_rank);
        if (msg->request_id)
            dsm_fabric_am_reply(m->fabric, msg->src_rank, msg->request_id, DSM_ERR_PROTO, NULL, 0);
        return;
    }
    pthread_mutex_lock(&m->heaps_mu);
    for (int i = 0; i < MAX_SESSIONS; i++)
        if (m->heaps[i] && m->heap_ids[i] == d.heap_id)
            msct_done(m->heaps[i], msg->src_rank, &d, msg->len);
    pthread_mutex_unlock(&m->heaps_mu);
}

dsm_status_t mheap_server_add_heap(dsm_node_t *node, dsm_mheap_t *h, uint32_t heap_id)
{
    mserver_t *m = dsm_module_state(node, &dsm_mheap_module);
    if (m == NULL)
        return DSM_ERR_STATE;
    dsm_status_t st = DSM_ERR_NOMEM;
    pthread_mutex_lock(&m->heaps_mu);
    for (int i = 0; i < MAX_SESSIONS && st != DSM_OK; i++)
        if (m->heaps[i] == NULL) {
            m->heaps[i] = h;
            m->heap_ids[i] = heap_id;
            st = DSM_OK;
        }
    pthread_mutex_unlock(&m->heaps_mu);
    return st;
}

void mheap_server_remove_heap(dsm_node_t *node, dsm_mheap_t *h)
{
    mserver_t *m = dsm_module_state(node, &dsm_mheap_module);
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->heaps_mu);
    for (int i = 0; i < MAX_SESSIONS; i++)
        if (m->heaps[i] == h)
            m->heaps[i] = NULL;
    pthread_mutex_unlock(&m->heaps_mu);
}

static void mserver_free(void *state)
{
    mserver_t *m = state;
    if (m->started) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    while (m->head) {
        job_t *j = m->head;
        m->head = j->next;
        free(j);
    }
    for (int i = 0; i < MAX_SESSIONS; i++)
        session_free(m->sessions[i]);
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->heaps_mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

dsm_status_t dsm_mheap_attach(dsm_node_t *node)
{
    if (node == NULL || dsm_node_fabric(node) == NULL)
        return DSM_ERR_INVALID;
    mserver_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return DSM_ERR_NOMEM;
    m->node = node;
    m->fabric = dsm_node_fabric(node);
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->heaps_mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    dsm_status_t st = dsm_node_add_module(node, &dsm_mheap_module, m);
    if (st != DSM_OK) {
        DSM_ERROR(LOG_MOD, "cannot attach the managed heap: %s", dsm_strerror(st));
        pthread_mutex_destroy(&m->mu);
        pthread_mutex_destroy(&m->heaps_mu);
        pthread_cond_destroy(&m->cv);
        free(m);
        return st;
    }
    if (dsm_thread_start(&m->thread, NULL, tracer_main, m) != 0)
        return DSM_ERR_NOMEM;
    m->started = 1;
    return DSM_OK;
}

static dsm_status_t attach(dsm_node_t *node, void *arg)
{
    (void)arg;
    return dsm_mheap_attach(node);
}

static const dsm_am_handler_t handlers[DSM_MHEAP_AM_COUNT] = {
    [DSM_MHEAP_AM_CTL] = on_ctl,
    [DSM_MHEAP_AM_DONE] = on_done,
};
dsm_module_t dsm_mheap_module = {
    .name = "mheap",
    .am_count = DSM_MHEAP_AM_COUNT,
    .handlers = handlers,
    .attach = attach,
    .detach = mserver_free,
};
