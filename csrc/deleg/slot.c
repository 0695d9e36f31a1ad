/* The local delegation channel (§2.5.2-2.5.3): a client stages requests
 * straight into a free request slot for a trustee (or, while both of the
 * pair's slots are in flight, into a per-pair pending queue), publishes them
 * by flipping the slot's ready toggle, and the trustee answers the whole
 * batch into the matching response slot and flips its response toggle back.
 * Two batches may be in flight per pair: the trustee serves the two slots
 * alternately and the client takes responses from the oldest, so per-pair
 * order holds. Requests and responses go wholly
 * to the 128-byte primary block until one does not fit, then to the 1024-byte
 * overflow block. Variable responses carry a length prefix and spill to the
 * heap when the slot is full. Only acquire loads and release stores (plus a
 * seq_cst fence for the optional sleep handshake) synchronise the threads:
 * no atomic read-modify-write instruction anywhere in the protocol. */
#include <stdlib.h>
#include <string.h>

#include "deleg/internal.h"
#include "util/log.h"

/* ---- encoding ------------------------------------------------------------ */

static size_t req_size_of(size_t env_len, size_t args_len, int spill, int same)
{
    return REQ_META + (same ? 0 : REQ_TARGET) + r8(env_len) + (spill ? 16 : r8(args_len));
}

static uint32_t resp_min_of(const req_meta_t *m)
{
    return (m->flags & REQF_VAR) ? 16u : (uint32_t)r8(m->ret_size);
}

/* Fields are stored straight into the slot: building the meta word in a
 * stack struct and copying it out made every request pay a failed
 * store-to-load forward (the struct was written in 2-byte pieces and read
 * back as one 8-byte word; perf put a third of issue's time there). */
static void encode_req(uint8_t *dst, dsm_deleg_fn fn, dsm_deleg_prop_t *prop, unsigned env_len, unsigned ret_size,
                       unsigned inline_args_len, unsigned kind, unsigned flags, const void *env, const void *args,
                       size_t args_len)
{
    req_meta_t *m = (req_meta_t *)dst;
    m->env_len = (uint16_t)env_len;
    m->ret_size = (uint16_t)ret_size;
    m->args_len = (uint16_t)inline_args_len;
    m->kind = (uint8_t)kind;
    m->flags = (uint8_t)flags;
    uint8_t *p = dst + REQ_META;
    if (!(flags & REQF_SAME)) {
        memcpy(p, &fn, sizeof fn);
        memcpy(p + 8, &prop, sizeof prop);
        p += REQ_TARGET;
    }
    if (env_len) deleg_copy(p, env, env_len);
    p += r8(env_len);
    if (flags & REQF_ARGS_SPILL) {
        uint64_t len = args_len;
        memcpy(p, &args, sizeof args);
        memcpy(p + 8, &len, 8);
    } else if (args_len) {
        memcpy(p, args, args_len);
    }
}

static size_t decoded_size(const uint8_t *req, req_meta_t *m)
{
    memcpy(m, req, sizeof *m);
    return req_size_of(m->env_len, m->args_len, m->flags & REQF_ARGS_SPILL, m->flags & REQF_SAME);
}

/* The request's target and where its env starts: its own {fn, prop}, or
 * the pair's last target for REQF_SAME (which it then becomes). */
static inline const uint8_t *decode_target(const uint8_t *q, const req_meta_t *m, dsm_deleg_fn *fn,
                                           dsm_deleg_prop_t **prop)
{
    if (m->flags & REQF_SAME) return q + REQ_META;
    memcpy(fn, q + REQ_META, sizeof *fn);
    memcpy(prop, q + REQ_META + 8, sizeof *prop);
    return q + REQ_META + REQ_TARGET;
}

/* ---- client side ----------------------------------------------------------- */

comp_t *dsm_deleg_comp_push(comp_ring_t *r)
{
    if (!r->comp || r->tail - r->head > r->mask) {
        uint32_t cap = r->comp ? (r->mask + 1) * 2 : 64;
        comp_t *n = malloc(cap * sizeof *n);
        if (!n) return NULL;
        uint32_t count = r->tail - r->head;
        for (uint32_t i = 0; i < count; i++) n[i] = r->comp[(r->head + i) & r->mask];
        free(r->comp);
        r->comp = n;
        COMP_SET(r->head, 0);
        COMP_SET(r->tail, count);
        r->mask = cap - 1;
    }
    comp_t *c = &r->comp[r->tail & r->mask];
    COMP_SET(r->tail, r->tail + 1);
    return c;
}

/* Where in the unpublished slot a request of `size` bytes would go, or NULL. */
static uint8_t *stage_pos(deleg_thread_t *th, unsigned s, pair_out_t *p, size_t size, uint32_t rm, unsigned flags)
{
    if (p->staged == UINT16_MAX || p->resp_min + rm > SLOT_OVERFLOW) return NULL;
    dsm_deleg_rt_t *rt = th->rt;
    unsigned b = (p->oldest + p->in_flight) % SLOT_INFLIGHT;
    uint8_t *pos;
    if (!p->in_overflow && p->plen + size <= SLOT_PRIMARY_PAYLOAD) {
        pos = (uint8_t *)req_hdr(rt, s, th->idx, b) + SLOT_HDR + p->plen;
        p->plen += (uint32_t)size;
        p->staged_primary++;
    } else if (p->olen + size <= SLOT_OVERFLOW) {
        p->in_overflow = 1;
        pos = req_ovf(rt, s, th->idx, b) + p->olen;
        p->olen += (uint32_t)size;
    } else {
        return NULL;
    }
    p->staged++;
    p->resp_min += rm;
    if (flags & REQF_HINT) p->staged_flags |= SLOT_HINTED;
    return pos;
}

/* Room for `size` more bytes at the tail of the pending queue. The queue is
 * consumed from the head a slot-load at a time while the tail keeps growing,
 * so compacting whenever the tail hit the end moved nearly the whole buffer
 * to free one slot-load. Compacting only when the live bytes fill at most a
 * quarter of the buffer, and growing otherwise, moves each byte at most a
 * third of a time more on average. */
static int pend_reserve(pair_out_t *p, size_t size)
{
    if (p->pend_head == p->pend_len) p->pend_head = p->pend_len = 0;
    if (p->pend_len + size <= p->pend_cap) return 0;
    size_t live = p->pend_len - p->pend_head;
    if (p->pend_head > 0 && live + size <= p->pend_cap / 4) {
        memmove(p->pend, p->pend + p->pend_head, live);
        p->pend_len = live;
        p->pend_head = 0;
        return 0;
    }
    size_t cap = p->pend_cap ? p->pend_cap * 2 : 4096;
    while (cap < 4 * (live + size)) cap *= 2;
    uint8_t *n = malloc(cap);
    if (!n) return -1;
    if (live) memcpy(n, p->pend + p->pend_head, live);
    free(p->pend);
    p->pend = n;
    p->pend_cap = cap;
    p->pend_len = live;
    p->pend_head = 0;
    return 0;
}

static void publish_pair(deleg_thread_t *th, unsigned s, pair_out_t *p);

/* A pair with nothing in flight publishes once this many requests are
 * staged, without waiting for the scheduler round to end: the trustee starts
 * on them while the client stages the next batch. A slot holds up to 70 of a
 * stream's requests (REQF_SAME); 64 fibers each blocked on one apply filled
 * one batch, which left nothing to overlap with it (apply to a dedicated
 * trustee: 16.7 Mops/s at 35 a slot, 10.6 at 70). */
#define SLOT_EARLY_BATCH 32u

dsm_status_t dsm_deleg_issue(deleg_thread_t *th, unsigned s, dsm_deleg_fn fn, dsm_deleg_prop_t *prop, int kind,
                             const void *env, size_t env_len, const void *args, size_t args_len,
                             size_t ret_size, dsm_deleg_then_fn then, void *cb_arg, unsigned req_flags)
{
    if (env_len > DSM_DELEG_MAX_ENV) return DSM_ERR_TOO_BIG;
    if ((req_flags & REQF_HINT) && (env_len < 8 || !prop || !prop->prefetch)) req_flags &= ~(unsigned)REQF_HINT;
    unsigned flags = req_flags & REQF_HINT, fixed_ret = 0;
    uint32_t comp_ret, rm;
    if (ret_size == DSM_DELEG_VARSIZE || ret_size > RET_FIXED_MAX) {
        flags |= REQF_VAR;
        comp_ret = RET_VAR_SIZE;
        rm = 16;
    } else {
        fixed_ret = (unsigned)ret_size;
        comp_ret = (uint32_t)ret_size;
        rm = (uint32_t)r8(ret_size);
    }
    int spill = REQ_META + REQ_TARGET + r8(env_len) + r8(args_len) > SLOT_OVERFLOW;
    const void *args_ref = args;
    if (spill) {
        /* Too big for any slot: the trustee reads a heap copy and frees it. */
        void *copy = malloc(args_len);
        if (!copy) return DSM_ERR_NOMEM;
        memcpy(copy, args, args_len);
        args_ref = copy;
        flags |= REQF_ARGS_SPILL;
    }
    pair_out_t *p = &th->out[s];
    if (fn == p->last_fn && prop == p->last_prop) flags |= REQF_SAME;
    size_t size = req_size_of(env_len, args_len, spill, flags & REQF_SAME);
    comp_t *c = dsm_deleg_comp_push(&p->done);
    if (!c) goto nomem;
    c->then = then;
    c->arg = cb_arg;
    c->ret_size = comp_ret;
    uint8_t *pos = NULL;
    if (p->in_flight < SLOT_INFLIGHT && p->pend_count == 0) pos = stage_pos(th, s, p, size, rm, flags);
    if (!pos) {
        if (pend_reserve(p, size) != 0) {
            COMP_SET(p->done.tail, p->done.tail - 1);
            goto nomem;
        }
        pos = p->pend + p->pend_len;
        p->pend_len += size;
        p->pend_count++;
    }
    encode_req(pos, fn, prop, (unsigned)env_len, fixed_ret, spill ? 0 : (unsigned)args_len, (unsigned)kind, flags,
               env, args_ref, args_len);
    p->last_fn = fn;
    p->last_prop = prop;
    th->outstanding++;
    if (p->in_flight == 0 && p->staged >= SLOT_EARLY_BATCH) {
        publish_pair(th, s, p);
        atomic_store_explicit(&th->sent, th->sent_local, memory_order_release);
    }
    return DSM_OK;
nomem:
    if (spill) free((void *)args_ref);
    return DSM_ERR_NOMEM;
}

/* Move pending requests into the (free) slot while they fit. Pending
 * requests are already encoded back to back, and consecutive ones land back
 * to back in the primary block and then in the overflow block, so they go
 * over in at most a couple of memcpy runs rather than one call each. */
static void refill(deleg_thread_t *th, unsigned s, pair_out_t *p)
{
    uint8_t *run_dst = NULL;
    const uint8_t *run_src = NULL;
    size_t run_len = 0;
    while (p->pend_count) {
        req_meta_t m;
        const uint8_t *src = p->pend + p->pend_head;
        size_t size = decoded_size(src, &m);
        uint8_t *pos = stage_pos(th, s, p, size, resp_min_of(&m), m.flags);
        if (!pos) break;
        if (run_len && pos == run_dst + run_len) {
            run_len += size;
        } else {
            if (run_len) memcpy(run_dst, run_src, run_len);
            run_dst = pos;
            run_src = src;
            run_len = size;
        }
        p->pend_head += size;
        p->pend_count--;
    }
    if (run_len) memcpy(run_dst, run_src, run_len);
}

/* Hand the staged batch of pair s to its trustee. */
static void publish_pair(deleg_thread_t *th, unsigned s, pair_out_t *p)
{
    dsm_deleg_rt_t *rt = th->rt;
    unsigned b = (p->oldest + p->in_flight) % SLOT_INFLIGHT;
    slot_hdr_t *h = req_hdr(rt, s, th->idx, b);
    h->count = p->staged;
    h->primary_count = p->staged_primary;
    h->resp_min = (uint16_t)p->resp_min;
    h->ovf_len = (uint16_t)p->olen;
    h->flags = p->staged_flags;
    p->staged_flags = 0;
    p->toggle[b] ^= 1u;
    atomic_store_explicit(&h->toggle, p->toggle[b], memory_order_release);
    p->in_flight++;
    th->overlapped += p->in_flight == SLOT_INFLIGHT;
    p->flight_count[b] = p->staged;
    th->sent_local += p->staged;
    p->staged = p->staged_primary = 0;
    p->plen = p->olen = p->resp_min = 0;
    p->in_overflow = 0;
    if (rt->cfg.idle_sleep) {
        /* Dekker handshake with a trustee going to sleep: it stores
         * sleeping=1, fences, then rechecks the toggles. */
        deleg_full_fence();
        if (atomic_load_explicit(&rt->th[s].sleeping, memory_order_relaxed)) dsm_deleg_wake_thread(rt, s);
    }
}

static int publish(deleg_thread_t *th)
{
    dsm_deleg_rt_t *rt = th->rt;
    int did = 0;
    for (unsigned s = 0; s < rt->n; s++) {
        pair_out_t *p = &th->out[s];
        if (p->in_flight == SLOT_INFLIGHT || !p->staged) continue;
        publish_pair(th, s, p);
        did = 1;
    }
    if (did) atomic_store_explicit(&th->sent, th->sent_local, memory_order_release);
    return did;
}

/* Responses of a finished batch are copied out of the slot, the next batch
 * is refilled and published at once, and only then do the continuations run:
 * the trustee works on the next batch while this thread runs continuations
 * and issues new requests, instead of idling through all of that. The copy
 * is what makes this safe: the trustee overwrites the response slot as soon
 * as it sees the new batch. Continuations still run in issue order, and any
 * request they issue goes behind the batch just published. */
static int poll_responses(deleg_thread_t *th)
{
    dsm_deleg_rt_t *rt = th->rt;
    int did = 0;
    for (unsigned s = 0; s < rt->n; s++) {
        pair_out_t *p = &th->out[s];
        if (!p->in_flight) continue;
        unsigned b = p->oldest;
        slot_hdr_t *h = resp_hdr(rt, th->idx, s, b);
        if (atomic_load_explicit(&h->toggle, memory_order_acquire) != p->toggle[b]) continue;
        unsigned n = p->flight_count[b], pc = h->primary_count;
        uint32_t olen = h->ovf_len;
        _Alignas(64) uint8_t copy[SLOT_PRIMARY_PAYLOAD + SLOT_OVERFLOW];
        memcpy(copy, (uint8_t *)h + SLOT_HDR, SLOT_PRIMARY_PAYLOAD);
        if (olen) memcpy(copy + SLOT_PRIMARY_PAYLOAD, resp_ovf(rt, th->idx, s, b), olen);
        /* the slot is free: staging moves on to it once the other is out */
        p->in_flight--;
        p->oldest = (uint8_t)((b + 1) % SLOT_INFLIGHT);
        refill(th, s, p);
        if (p->staged) {
            publish_pair(th, s, p);
            atomic_store_explicit(&th->sent, th->sent_local, memory_order_release);
        }
        uint8_t *pp = copy, *op = copy + SLOT_PRIMARY_PAYLOAD;
        for (unsigned i = 0; i < n; i++) {
            uint8_t **cur = i < pc ? &pp : &op;
            uint8_t *pos = *cur;
            comp_t cm = p->done.comp[p->done.head & p->done.mask];
            COMP_SET(p->done.head, p->done.head + 1);
            const uint8_t *data;
            size_t len;
            void *spilled = NULL;
            if (cm.ret_size == RET_VAR_SIZE) {
                uint32_t l32, fl;
                memcpy(&l32, pos, 4);
                memcpy(&fl, pos + 4, 4);
                len = l32;
                if (fl & RESP_SPILLED) {
                    memcpy(&spilled, pos + 8, sizeof spilled);
                    data = spilled;
                    *cur = pos + 16;
                } else {
                    data = pos + 8;
                    *cur = pos + 8 + r8(len);
                }
            } else {
                data = pos;
                len = cm.ret_size;
                *cur = pos + r8(len);
            }
            if (cm.then) {
                th->depth++;
                cm.then(cm.arg, DSM_OK, data, len);
                th->depth--;
            }
            if (spilled) free(spilled);
            th->outstanding--;
        }
        did = 1;
    }
    return did;
}

/* ---- trustee side ----------------------------------------------------------- */

struct resp_writer {
    uint8_t *prim, *ovf;
    uint32_t plen, olen;
    int in_ovf;
    uint16_t pcount;
};

/* Place `need` response bytes. `guaranteed`: the client budgeted this as the
 * response's minimum footprint, so it always fits (see serve_batch). */
static uint8_t *writer_alloc(struct resp_writer *w, size_t need, uint32_t min_after, int guaranteed)
{
    if (!w->in_ovf && w->plen + need <= SLOT_PRIMARY_PAYLOAD) {
        uint8_t *pos = w->prim + w->plen;
        w->plen += (uint32_t)need;
        w->pcount++;
        return pos;
    }
    w->in_ovf = 1;
    if (guaranteed || w->olen + need + min_after <= SLOT_OVERFLOW) {
        uint8_t *pos = w->ovf + w->olen;
        w->olen += (uint32_t)need;
        return pos;
    }
    return NULL;
}

void *dsm_deleg_slot_reserve(dsm_deleg_ret_t *r, size_t len)
{
    struct resp_writer *w = r->w;
    uint32_t l32 = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len, fl = 0;
    if (l32 != len) return NULL;
    uint8_t *pos = writer_alloc(w, 8 + r8(len), r->min_after, 0);
    uint8_t *data;
    if (pos) {
        data = pos + 8;
    } else {
        data = malloc(len ? len : 1);
        if (!data) return NULL;
        pos = writer_alloc(w, 16, r->min_after, 1);
        fl = RESP_SPILLED;
        memcpy(pos + 8, &data, sizeof data);
    }
    memcpy(pos, &l32, 4);
    memcpy(pos + 4, &fl, 4);
    r->data = data;
    r->len = len;
    return data;
}

/* Prefetch [p, p+len) a cache line at a time: the batch's lines all sit
 * in the other core's cache, and touching them one by one in the serving
 * loop would pay those transfers back to back instead of overlapped. */
static inline void prefetch_range(const uint8_t *p, size_t len, int write)
{
    for (size_t off = 0; off < len; off += 64) {
        if (write) __builtin_prefetch(p + off, 1, 3);
        else __builtin_prefetch(p + off, 0, 3);
    }
}

/* The prefetch hooks of a batch's hinted requests, two passes over the
 * batch (see REQF_HINT): with ~30 requests to a large hash table, taking the
 * bucket misses together and then the item misses together overlaps what
 * one closure after another would pay in series. */
static void prefetch_hinted(const uint8_t *pp, const uint8_t *op, unsigned n, unsigned pc, const pair_in_t *in)
{
    for (int pass = 0; pass < 2; pass++) {
        const uint8_t *a = pp, *b = op;
        dsm_deleg_fn fn = in->last_fn;
        dsm_deleg_prop_t *prop = in->last_prop;
        for (unsigned i = 0; i < n; i++) {
            const uint8_t **cur = i < pc ? &a : &b;
            const uint8_t *q = *cur;
            req_meta_t m;
            *cur = q + decoded_size(q, &m);
            const uint8_t *env = decode_target(q, &m, &fn, &prop);
            if (!(m.flags & REQF_HINT) || m.kind != REQ_USER) continue;
            uint64_t hint;
            memcpy(&hint, env, 8);
            prop->prefetch(prop->obj, hint, pass);
        }
    }
}

/* One pass over the batch: the client put the batch's total minimum response
 * footprint in the header, which is what variable responses need to know how
 * much room to leave for the ones after them. */
static void serve_batch(deleg_thread_t *th, unsigned c, unsigned b, slot_hdr_t *h, uint32_t t)
{
    dsm_deleg_rt_t *rt = th->rt;
    unsigned s = th->idx;
    if (atomic_load_explicit(&th->idle, memory_order_relaxed))
        atomic_store_explicit(&th->idle, 0, memory_order_relaxed);
    unsigned n = h->count, pc = h->primary_count;
    uint32_t min_rest = h->resp_min;
    uint8_t *pp = (uint8_t *)h + SLOT_HDR, *op = req_ovf(rt, s, c, b);
    slot_hdr_t *rh = resp_hdr(rt, c, s, b);
    struct resp_writer w = {.prim = (uint8_t *)rh + SLOT_HDR, .ovf = resp_ovf(rt, c, s, b)};
    prefetch_range(op, h->ovf_len, 0);
    if (min_rest > SLOT_PRIMARY_PAYLOAD)
        prefetch_range(w.ovf, min_rest - SLOT_PRIMARY_PAYLOAD + 64 < SLOT_OVERFLOW ? min_rest - SLOT_PRIMARY_PAYLOAD + 64
                                                                                   : SLOT_OVERFLOW, 1);
    pair_in_t *in = &th->in[c];
    if (h->flags & SLOT_HINTED) prefetch_hinted(pp, op, n, pc, in);
    dsm_deleg_fn fn = in->last_fn;
    dsm_deleg_prop_t *prop = in->last_prop;
    for (unsigned i = 0; i < n; i++) {
        uint8_t **cur = i < pc ? &pp : &op;
        uint8_t *q = *cur;
        req_meta_t m;
        *cur = q + decoded_size(q, &m);
        const uint8_t *env = decode_target(q, &m, &fn, &prop);
        uint32_t rm = resp_min_of(&m);
        min_rest -= rm;
        const void *args = env + r8(m.env_len);
        size_t args_len = m.args_len;
        void *spilled = NULL;
        if (m.flags & REQF_ARGS_SPILL) {
            uint64_t l;
            memcpy(&spilled, args, sizeof spilled);
            memcpy(&l, (const uint8_t *)args + 8, 8);
            args = spilled;
            args_len = (size_t)l;
        }
        dsm_deleg_ret_t r;
        uint8_t *fixed_at = (m.flags & REQF_VAR) ? NULL : writer_alloc(&w, rm, min_rest, 1);
        deleg_ret_init_inplace(&r, fixed_at, m.ret_size, &w, min_rest);
        if (m.kind == REQ_LAUNCH) {
            dsm_deleg_start_launch(th, c, fn, prop, env, m.env_len, args, args_len);
        } else {
            th->depth++;
            fn(&r, m.kind == REQ_SYS ? (void *)prop : prop->obj, env, args, args_len);
            th->depth--;
        }
        if (r.var && !r.done) dsm_deleg_slot_reserve(&r, 0);
        if (spilled) free(spilled);
    }
    rh->count = (uint16_t)n;
    rh->primary_count = w.pcount;
    rh->ovf_len = (uint16_t)w.olen;
    atomic_store_explicit(&rh->toggle, t, memory_order_release);
    in->toggle[b] = t;
    in->next = (uint8_t)((b + 1) % SLOT_INFLIGHT);
    in->last_fn = fn;
    in->last_prop = prop;
    if (rt->cfg.idle_sleep) {
        deleg_full_fence();
        if (atomic_load_explicit(&rt->th[c].sleeping, memory_order_relaxed)) dsm_deleg_wake_thread(rt, c);
    }
    th->served_local += n;
    atomic_store_explicit(&th->served, th->served_local, memory_order_release);
}

static int serve(deleg_thread_t *th)
{
    dsm_deleg_rt_t *rt = th->rt;
    int did = 0;
    for (unsigned c = 0; c < rt->n; c++) {
        if (c == th->idx) continue;
        /* both of a client's batches, in order, if both are there */
        for (unsigned k = 0; k < SLOT_INFLIGHT; k++) {
            unsigned b = th->in[c].next;
            slot_hdr_t *h = req_hdr(rt, th->idx, c, b);
            uint32_t t = atomic_load_explicit(&h->toggle, memory_order_acquire);
            if (t == th->in[c].toggle[b]) break;
            serve_batch(th, c, b, h, t);
            did = 1;
        }
    }
    return did;
}

int dsm_deleg_step(deleg_thread_t *th)
{
    th->inline_run = 0;
    int did = serve(th);
    did |= poll_responses(th);
    did |= publish(th);
    return did;
}

void dsm_deleg_serve_between(deleg_thread_t *th)
{
    th->inline_run = 0;
    serve(th);
}

/* No request of this thread is staged, in flight, pending or undelivered. */
int dsm_deleg_thread_quiet(const deleg_thread_t *th) { return th->outstanding == 0; }

void dsm_deleg_pairs_free(deleg_thread_t *th)
{
    for (unsigned s = 0; s < th->rt->n; s++) {
        free(th->out[s].done.comp);
        free(th->out[s].pend);
    }
}
