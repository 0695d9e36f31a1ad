/* Delegation across nodes (Gossamer, thesis §3.2), the node and client side:
 * attaching a runtime to a node, closures by registry id, property handles
 * and exported trusts, the client side (pending queue -> batch in a staging
 * block -> slot write, responses polled from the receive square; the
 * trustee side, batches
 * polled from the receive square: remote_serve.c), the message fallbacks
 * for what does not fit a slot, remote launch, fate sharing (a dead node
 * stops the application; the end of a run: remote_term.c).
 *
 * Ordering: per (client thread, trustee thread) pair, batches carry
 * consecutive sequence numbers and the trustee serves them in that order,
 * requests in a batch in issue order; responses come back the same way and
 * completions run in issue order. R->inflight batches may be in flight per
 * pair (two, four over tcp; blocks seq % inflight): batch seq is written only
 * once the responses of seq - inflight were delivered, so neither side
 * overwrites a block the other still reads. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deleg/remote.h"
#include "util/clock.h"
#include "util/log.h"

#define LOG "deleg"

/* ---- closures by id -------------------------------------------------------- */

/* Process-wide: closure pointer -> registry id, for the client side. */
enum { MAX_CLOSURES = 1024 };
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct reg_entry {
    dsm_deleg_fn fn;
    uint32_t id;
} reg_entry_t;
static reg_entry_t reg_tab[MAX_CLOSURES];
static unsigned reg_n;

dsm_status_t dsm_deleg_register(const char *name, dsm_deleg_fn fn)
{
    if (!name || !fn) return DSM_ERR_INVALID;
    uint32_t id;
    dsm_status_t st = dsm_register_closure(name, DSM_DELEG_CLOSURE_KIND, (dsm_closure_t)fn, &id);
    if (st != DSM_OK) return st;
    pthread_mutex_lock(&reg_lock);
    unsigned i;
    for (i = 0; i < reg_n; i++)
        if (reg_tab[i].fn == fn) break;
    if (i == reg_n) {
        if (reg_n == MAX_CLOSURES) st = DSM_ERR_NOMEM;
        else reg_tab[reg_n++] = (reg_entry_t){fn, id};
    } else if (reg_tab[i].id != id) {
        /* one function under two names: the first name is its id */
        DSM_WARN(LOG, "closure '%s' was registered before under another name", name);
    }
    pthread_mutex_unlock(&reg_lock);
    return st;
}

static int fn_to_id(rthread_t *rt, dsm_deleg_fn fn, uint32_t *id)
{
    unsigned h = (unsigned)(((uintptr_t)fn >> 4) & 63);
    if (rt->idc[h].fn == fn) {
        *id = rt->idc[h].id;
        return 1;
    }
    int found = 0;
    pthread_mutex_lock(&reg_lock);
    for (unsigned i = 0; i < reg_n && !found; i++)
        if (reg_tab[i].fn == fn) {
            *id = reg_tab[i].id;
            found = 1;
        }
    pthread_mutex_unlock(&reg_lock);
    if (found) {
        rt->idc[h].fn = fn;
        rt->idc[h].id = *id;
    }
    return found;
}

dsm_deleg_fn dsm_deleg_rfn_find(rthread_t *rt, uint32_t id)
{
    unsigned h = (id ^ (id >> 6) ^ (id >> 12)) & 63;
    if (rt->fnc[h].id == id && rt->fnc[h].fn) return rt->fnc[h].fn;
    dsm_deleg_fn fn = (dsm_deleg_fn)dsm_closure_find(id, DSM_DELEG_CLOSURE_KIND);
    if (fn) {
        rt->fnc[h].id = id;
        rt->fnc[h].fn = fn;
    }
    return fn;
}

/* ---- property handles ------------------------------------------------------ */

static uint32_t handle_of(uint32_t idx, uint32_t gen) { return (gen << 16) | idx; }

/* The handle of a local property (made on first export). */
static dsm_status_t handle_get(dsm_deleg_remote_t *R, dsm_deleg_prop_t *p, uint32_t *out)
{
    pthread_mutex_lock(&R->hlock);
    if (p->handle) {
        *out = p->handle;
        pthread_mutex_unlock(&R->hlock);
        return DSM_OK;
    }
    for (uint32_t k = 0; k < RHANDLES; k++) {
        uint32_t idx = (R->hnext + k) % RHANDLES;
        if (idx == 0) continue; /* handle 0 would read as "none" with gen 0 */
        hentry_t *e = &R->htab[idx];
        if (atomic_load_explicit(&e->prop, memory_order_acquire)) continue;
        uint32_t gen = (atomic_load_explicit(&e->gen, memory_order_relaxed) + 1) & 0xffff;
        if (gen == 0) gen = 1;
        if (dsm_deleg_shares_new(p) != DSM_OK) break;
        atomic_store_explicit(&e->gen, gen, memory_order_relaxed);
        atomic_store_explicit(&e->trustee, p->trustee, memory_order_relaxed);
        atomic_store_explicit(&e->prop, p, memory_order_release);
        p->handle = handle_of(idx, gen);
        R->hnext = idx + 1;
        *out = p->handle;
        pthread_mutex_unlock(&R->hlock);
        return DSM_OK;
    }
    pthread_mutex_unlock(&R->hlock);
    return DSM_ERR_NOMEM;
}

/* The property behind a handle, if it exists and belongs to trustee s.
 * Only s frees its properties, so the pointer stays valid on s. */
dsm_deleg_prop_t *dsm_deleg_rhandle_find(dsm_deleg_remote_t *R, uint32_t handle, unsigned s)
{
    uint32_t idx = handle & 0xffff, gen = handle >> 16;
    if (idx == 0 || gen == 0) return NULL;
    hentry_t *e = &R->htab[idx];
    dsm_deleg_prop_t *p = atomic_load_explicit(&e->prop, memory_order_acquire);
    if (!p || atomic_load_explicit(&e->gen, memory_order_relaxed) != gen ||
        atomic_load_explicit(&e->trustee, memory_order_relaxed) != s)
        return NULL;
    return p;
}

/* ---- attach ----------------------------------------------------------------- */

static dsm_status_t peer_join(void *ctx, uint32_t rank)
{
    dsm_deleg_remote_t *R = ctx;
    if (rank == dsm_node_rank(R->node)) {
        /* this node's own call, at join: its rank is known from here on
         * (before join no runtime thread of it runs) */
        R->self = rank;
        return DSM_OK;
    }
    uint8_t v[DSM_NODE_MAX_VALUE_BYTES];
    size_t len = 0;
    if (dsm_node_peer_value(R->node, rank, DSM_DELEG_PUBLISH_KEY, v, sizeof v, &len) != DSM_OK)
        return DSM_OK; /* no delegation there */
    if (rank >= RMAX_NODES) {
        DSM_WARN(LOG, "rank %u is past the %d nodes remote delegation serves; not reachable by trusts", rank,
                 RMAX_NODES);
        return DSM_OK;
    }
    uint64_t base, size;
    uint32_t threads;
    if (len < 24) goto bad;
    memcpy(&base, v, 8); /* published by the same binary: host byte order */
    memcpy(&size, v + 8, 8);
    memcpy(&threads, v + 16, 4);
    if (threads != R->T || size != R->size) {
        DSM_ERROR(LOG, "rank %u runs %u delegation threads, this node %u: no remote trusts between them", rank,
                  threads, R->T);
        return DSM_OK;
    }
    if (len > 24) {
        dsm_status_t st = dsm_fabric_remote_region_add(R->fabric, rank, DSM_DELEG_REGION, base, size, v + 24, len - 24);
        if (st != DSM_OK) return st;
    } else if (!R->msg_put) {
        goto bad;
    }
    dsm_deleg_shares_rank_joined(R, rank); /* a rank a dead node had: no share yet */
    /* and a new node there counts its runs from zero */
    atomic_store(&R->fresh_from[rank], 0);
    atomic_store_explicit(&R->peer_ok[rank], 1, memory_order_release);
    return DSM_OK;
bad:
    DSM_ERROR(LOG, "rank %u published a malformed %s", rank, DSM_DELEG_PUBLISH_KEY);
    return DSM_OK;
}

void dsm_rinbox_handler(void *ctx, const dsm_am_msg_t *msg);
void dsm_deleg_rterm_handler(void *ctx, const dsm_am_msg_t *msg);

/* Fate sharing: a node of the application died. Nothing more goes to it,
 * and the join of this node's run ends the application here. */
void dsm_deleg_rpeer_dead(void *ctx, uint32_t rank)
{
    dsm_deleg_remote_t *R = ctx;
    if (rank >= RMAX_NODES || !atomic_load(&R->peer_ok[rank])) return;
    /* its share of this node's properties, before the node reads as gone */
    dsm_deleg_shares_lose(R, rank);
    if (!atomic_exchange(&R->peer_ok[rank], 0)) return;
    uint32_t none = 0;
    atomic_compare_exchange_strong(&R->dead, &none, rank + 1);
    pthread_mutex_lock(&R->lock);
    int running = R->phase == RPHASE_RUNNING;
    pthread_mutex_unlock(&R->lock);
    if (running)
        DSM_ERROR(LOG, "rank %u, a node of this delegation application, died: the application stops", rank);
    else
        DSM_INFO(LOG, "rank %u, a node of this delegation application, is gone: the next run goes on without it",
                 rank);
}

static void remote_free(void *state)
{
    dsm_deleg_remote_t *R = state;
    /* a runtime still attached (destroyed after its node) lets go here */
    if (R->rt) dsm_deleg_remote_detach(R->rt);
    /* The fabric's teardown still progresses its worker (closing endpoints):
     * no handler of ours may run on R after this. */
    for (uint16_t i = 0; i < R->handlers; i++) dsm_fabric_am_register(R->fabric, DSM_AM_DELEG_PUT + i, NULL, NULL);
    dsm_rslot_area_destroy(R);
    while (R->inbox) {
        rlarge_msg_t *m = R->inbox;
        R->inbox = m->next;
        free(m);
    }
    free(R->htab);
    free(R->board);
    pthread_mutex_destroy(&R->lock);
    pthread_mutex_destroy(&R->hlock);
    pthread_mutex_destroy(&R->inbox_lock);
    free(R);
}

dsm_status_t dsm_deleg_attach(dsm_node_t *node, dsm_deleg_rt_t *rt)
{
    if (!node || !rt) return DSM_ERR_INVALID;
    if (rt->remote || atomic_load(&rt->running) || rt->n > 0xffff) return DSM_ERR_STATE;
    dsm_deleg_remote_t *R = calloc(1, sizeof *R);
    if (!R) return DSM_ERR_NOMEM;
    R->node = node;
    R->fabric = dsm_node_fabric(node);
    R->self = UINT32_MAX; /* known at join (peer_join) */
    R->T = rt->n;
    pthread_mutex_init(&R->lock, NULL);
    pthread_mutex_init(&R->hlock, NULL);
    pthread_mutex_init(&R->inbox_lock, NULL);
    R->hnext = 1;
    R->board_tag = RBOARD_NONE;
    R->htab = calloc(RHANDLES, sizeof *R->htab);
    if (!R->htab) {
        remote_free(R);
        return DSM_ERR_NOMEM;
    }
    dsm_status_t st = dsm_node_add_module(node, &dsm_deleg_module, R);
    if (st != DSM_OK) {
        remote_free(R);
        return st;
    }
    /* from here the node owns R and frees it at destroy; remote_free
     * unregisters the handlers it added */
    R->handlers = DSM_DELEG_AM_COUNT;
    if ((st = dsm_rslot_area_create(R, dsm_node_config(node)->transport)) != DSM_OK) return st;
    const void *key = NULL;
    size_t key_len = 0;
    if (!R->msg_put && (st = dsm_fabric_region_key(R->region, &key, &key_len)) != DSM_OK) return st;
    if (24 + key_len > DSM_NODE_MAX_VALUE_BYTES) return DSM_ERR_TOO_BIG;
    uint8_t v[DSM_NODE_MAX_VALUE_BYTES];
    uint64_t base = (uint64_t)(uintptr_t)R->base, size = R->size;
    uint32_t threads = R->T, zero = 0;
    memcpy(v, &base, 8);
    memcpy(v + 8, &size, 8);
    memcpy(v + 16, &threads, 4);
    memcpy(v + 20, &zero, 4);
    if (key_len) memcpy(v + 24, key, key_len);
    if ((st = dsm_node_publish(node, DSM_DELEG_PUBLISH_KEY, v, 24 + key_len)) != DSM_OK) return st;
    if ((st = dsm_node_on_peer_join(node, peer_join, R)) != DSM_OK) return st;
    dsm_node_on_peer_dead(node, dsm_deleg_rpeer_dead, R);
    R->rt = rt;
    rt->remote = R;
    for (unsigned i = 0; i < rt->n; i++) {
        dsm_deleg_remote_thread_init(&rt->th[i]);
#ifdef DSM_TEST_SWITCHES
        if (i == dsm_deleg_thread_init_fail_at) dsm_deleg_remote_thread_free(&rt->th[i]);
#endif
        if (!rt->th[i].remote) {
            /* all or nothing: the runtime is left as it was, free to attach
             * again; the node keeps R (no runtime) until it is destroyed */
            for (unsigned k = 0; k < i; k++) dsm_deleg_remote_thread_free(&rt->th[k]);
            R->rt = NULL;
            rt->remote = NULL;
            return DSM_ERR_NOMEM;
        }
    }
    /* Several nodes of a test share the cores: spin briefly before yielding. */
    rt->spin_limit = 64;
    return DSM_OK;
}

#ifdef DSM_TEST_SWITCHES
unsigned dsm_deleg_thread_init_fail_at = UINT_MAX;
#endif

static dsm_status_t attach(dsm_node_t *node, void *arg) { return dsm_deleg_attach(node, arg); }

static const dsm_am_handler_t handlers[DSM_DELEG_AM_COUNT] = {
    [DSM_DELEG_AM_PUT] = dsm_rslot_put_handler,
    [DSM_DELEG_AM_LARGE] = dsm_rinbox_handler,
    [DSM_DELEG_AM_TERM] = dsm_deleg_rterm_handler,
    [DSM_DELEG_AM_SPILL] = dsm_rinbox_handler,
    [DSM_DELEG_AM_BOARD] = dsm_deleg_rboard_handler,
    [DSM_DELEG_AM_MOVE] = dsm_deleg_rmove_handler,
};
static const char *const keys[] = {DSM_DELEG_PUBLISH_KEY, NULL};
dsm_module_t dsm_deleg_module = {
    .name = "deleg",
    .am_count = DSM_DELEG_AM_COUNT,
    .handlers = handlers,
    .keys = keys,
    .attach = attach,
    .needs_arg = 1,
    .detach = remote_free,
};

void dsm_deleg_remote_thread_init(deleg_thread_t *th)
{
    dsm_deleg_remote_t *R = th->rt->remote;
    rthread_t *t = dsm_zalloc_lines(sizeof *t);
    if (!t) return;
    t->R = R;
    t->out = dsm_zalloc_lines((size_t)RMAX_NODES * R->T * sizeof *t->out);
    t->in = dsm_zalloc_lines((size_t)RMAX_NODES * R->T * sizeof *t->in);
    if (!t->out || !t->in || dsm_fabric_lane_open(R->fabric, &t->lane) != DSM_OK) {
        free(t->out);
        free(t->in);
        free(t);
        return;
    }
    th->remote = t;
}

void dsm_deleg_remote_thread_free(deleg_thread_t *th)
{
    rthread_t *t = th->remote;
    if (!t) return;
    size_t n = (size_t)RMAX_NODES * t->R->T;
    for (size_t i = 0; i < n; i++) {
        for (unsigned b = 0; b < RINFLIGHT; b++) {
            if (t->out[i].stage[b]) dsm_rslot_reap(t->out[i].stage[b], 1);
            if (t->in[i].stage[b]) dsm_rslot_reap(t->in[i].stage[b], 1);
            free(t->out[i].stage[b]);
            free(t->in[i].stage[b]);
        }
        free(t->out[i].done.comp);
        free(t->out[i].pend);
    }
    dsm_fabric_lane_close(t->lane); /* after the reaps: their writes went on it */
    free(t->out);
    free(t->in);
    free(t->launch);
    free(t->tmp);
    free(t);
    th->remote = NULL;
}

/* The state stays where it is, for the probes that read its counters from
 * the progress thread at any time (remote_term.c's counts), and keeps its
 * buffers and lane: a reset allocates nothing, so it cannot fail. The lane
 * is no run's: it opens a new endpoint to a peer that comes back. */
void dsm_deleg_remote_thread_reset(deleg_thread_t *th)
{
    rthread_t *t = th->remote;
    if (!t) return;
    size_t n = (size_t)RMAX_NODES * t->R->T;
    for (size_t i = 0; i < n; i++) {
        rpair_t *p = &t->out[i];
        rin_t *in = &t->in[i];
        /* a write still under way reads its staging block */
        for (unsigned b = 0; b < RINFLIGHT; b++) {
            if (p->stage[b]) dsm_rslot_reap(p->stage[b], 1);
            if (in->stage[b]) dsm_rslot_reap(in->stage[b], 1);
        }
        p->seq_pub = p->seq_done = 0;
        p->last_handle = 0;
        memset(p->flight, 0, sizeof p->flight);
        /* the lost run's requests: their callers went with the run */
        COMP_SET(p->done.head, 0);
        COMP_SET(p->done.tail, 0);
        p->pend_head = p->pend_len = p->pend_count = 0;
        in->seq = 0;
    }
    memset(t->ep, 0, sizeof t->ep);
    t->busy_out = 0;
    memset(t->idc, 0, sizeof t->idc);
    memset(t->fnc, 0, sizeof t->fnc);
    /* generations go on: a result for a lost launch matches no new one */
    for (uint32_t i = 0; i < t->nlaunch; i++) {
        t->launch[i].used = 0;
        t->launch[i].then = NULL;
        t->launch[i].arg = NULL;
    }
    t->batches = t->full_batches = t->large_out = t->spilled_out = 0;
    t->big_out = t->overlapped = t->inline_ids = 0;
    t->last_count = 0;
}

/* The runtime goes away before the node: keep its final counters for the
 * termination probes of the other nodes. */
void dsm_deleg_remote_detach(dsm_deleg_rt_t *rt)
{
    dsm_deleg_remote_t *R = rt->remote;
    if (!R) return;
    pthread_mutex_lock(&R->lock);
    for (unsigned i = 0; i < rt->n; i++) {
        if (!rt->th[i].remote) continue;
        R->final_sent += atomic_load(&rt->th[i].remote->rsent);
        R->final_served += atomic_load(&rt->th[i].remote->rserved);
    }
    R->rt = NULL;
    pthread_mutex_unlock(&R->lock);
    if (R->failed || R->lost_props) {
        /* Fate sharing: the application is dead on every node, so are the
         * properties it shared across nodes (the ones with a handle). */
        pthread_mutex_lock(&R->hlock);
        for (uint32_t i = 1; i < RHANDLES; i++) {
            dsm_deleg_prop_t *p = atomic_load(&R->htab[i].prop);
            if (!p || p->rt != rt) continue;
            atomic_store(&R->htab[i].prop, NULL);
            if (p->dtor) p->dtor(p->obj);
            free(p->shares);
            free(p);
        }
        pthread_mutex_unlock(&R->hlock);
    }
    for (unsigned i = 0; i < rt->n; i++) dsm_deleg_remote_thread_free(&rt->th[i]);
    rt->remote = NULL;
}

/* ---- client side ------------------------------------------------------------ */

static int rpend_reserve(rpair_t *p, size_t size)
{
    if (p->pend_head == p->pend_len) p->pend_head = p->pend_len = 0;
    if (p->pend_len + size <= p->pend_cap) return 0;
    size_t live = p->pend_len - p->pend_head;
    size_t cap = p->pend_cap ? p->pend_cap : 4096;
    while (cap < 2 * (live + size)) cap *= 2;
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

/* Queue a request for trustee (rank, s); it goes out in the next batch. */
dsm_status_t dsm_deleg_remote_issue(deleg_thread_t *th, uint32_t rank, unsigned s, uint32_t fn_id, uint8_t kind,
                           uint32_t handle, uint32_t ret_size, const void *env, size_t env_len, const void *args,
                           size_t args_len, dsm_deleg_then_fn then, void *cb_arg)
{
    rthread_t *t = th->remote;
    if (!t) return DSM_ERR_STATE;
    dsm_deleg_remote_t *R = t->R;
    if (rank >= RMAX_NODES || s >= R->T || rank == R->self) return DSM_ERR_INVALID;
    if (!atomic_load_explicit(&R->peer_ok[rank], memory_order_acquire)) return DSM_ERR_NO_PEER;
    size_t size = rreq_size(1, env_len, args_len);
    if (env_len > 0xffff || size > DSM_AM_MAX_PAYLOAD - RLARGE_HDR) return DSM_ERR_TOO_BIG;
    rpair_t *p = &t->out[rank * R->T + s];
    comp_t *c = dsm_deleg_comp_push(&p->done);
    if (!c) return DSM_ERR_NOMEM;
    if (rpend_reserve(p, size) != 0) {
        COMP_SET(p->done.tail, p->done.tail - 1);
        return DSM_ERR_NOMEM;
    }
    c->then = then;
    c->arg = cb_arg;
    c->ret_size = ret_size;
    dsm_rreq_encode(p->pend + p->pend_len, RREQ_FIDX_INLINE, fn_id, kind, handle, ret_size, env, env_len, args,
                    args_len);
    p->pend_len += size;
    p->pend_count++;
    p->last_handle = handle;
    th->outstanding++;
    return DSM_OK;
}

/* Build the next batch of pair (rank, s) from its pending queue in the
 * staging block and write it. Returns 1 if a batch went out. */
static int publish_pair(deleg_thread_t *th, uint32_t rank, unsigned s, rpair_t *p)
{
    rthread_t *t = th->remote;
    dsm_deleg_remote_t *R = t->R;
    if (!p->pend_count || p->seq_pub - p->seq_done >= R->inflight) return 0;
    uint64_t seq = p->seq_pub + 1;
    unsigned b = (unsigned)(seq % R->inflight);
    rstage_t *st = dsm_rstage_get(&p->stage[b]);
    if (!st || dsm_rslot_reap(st, 0) != DSM_OK) return 0;
    uint8_t *pay = st->buf + RSTAGE_HDR;
    size_t len = 0, resp = 0;
    unsigned count = 0, nfn = 0;
    uint32_t fn[RSLOT_FNCACHE];
    uint8_t flags = 0;
    uint32_t large_len = 0;
    while (p->pend_count) {
        const uint8_t *src = p->pend + p->pend_head;
        rreq_t q;
        size_t lsize;
        /* our own encoding: it decodes */
        dsm_rreq_decode(src, p->pend_len - p->pend_head, NULL, 0, &q, &lsize);
        unsigned fidx = RREQ_FIDX_INLINE;
        for (unsigned i = 0; i < nfn; i++)
            if (fn[i] == q.fn_id) fidx = i;
        if (fidx == RREQ_FIDX_INLINE && nfn < RSLOT_FNCACHE) fidx = nfn;
        size_t size = fidx == RREQ_FIDX_INLINE ? lsize : lsize - (RREQ_LONG_HDR - RREQ_HDR);
        size_t rmin = RRESP_HDR + (q.ret_size == RRET_VAR ? 0 : rpad8(q.ret_size));
        if (lsize - (RREQ_LONG_HDR - RREQ_HDR) > RSLOT_PAYLOAD) {
            /* larger than a slot: alone in a flagged batch, its bytes put
             * into the pair's big block when they fit one, else by message */
            if (count) break;
            dsm_status_t ws;
            if (lsize <= R->big) {
                ws = dsm_rslot_put_big(R, rank, rsq_big_off(R, s, R->self, th->idx, b), src, lsize);
                flags = RSLOT_LARGE | RSLOT_BIG;
            } else {
                uint8_t *msg = malloc(RLARGE_HDR + lsize);
                if (!msg) return 0; /* retried at the next step */
                dsm_rlarge_encode_hdr(msg, 0, s, th->idx, 0, (uint32_t)R->runs, seq);
                memcpy(msg + RLARGE_HDR, src, lsize);
                ws = dsm_fabric_am_send(R->fabric, rank, DSM_AM_DELEG_LARGE, msg, RLARGE_HDR + lsize);
                free(msg);
                flags = RSLOT_LARGE;
            }
            p->pend_head += lsize;
            p->pend_count--;
            if (ws != DSM_OK) {
                /* the node is gone or broken: the application stops (fate sharing) */
                DSM_WARN(LOG, "large request to rank %u thread %u: %s", rank, s, dsm_strerror(ws));
                dsm_deleg_rpeer_dead(R, rank);
                return 1;
            }
            count = 1;
            large_len = (uint32_t)lsize;
            break;
        }
        if (len + size > RSLOT_PAYLOAD || resp + rmin > RSLOT_PAYLOAD || count == RSLOT_MAX_COUNT) break;
        if (fidx == nfn) fn[nfn++] = q.fn_id;
        if (fidx == RREQ_FIDX_INLINE) {
            t->inline_ids++;
            memcpy(pay + len, src, lsize);
        } else {
            pay[len] = (uint8_t)fidx;
            memcpy(pay + len + 1, src + 1, RREQ_HDR - 1);
            memcpy(pay + len + RREQ_HDR, src + RREQ_LONG_HDR, lsize - RREQ_LONG_HDR);
        }
        len += size;
        resp += rmin;
        count++;
        p->pend_head += lsize;
        p->pend_count--;
    }
    if (!count) return 0;
    dsm_rslot_trailer_encode(pay + len, (uint16_t)(RSLOT_PAYLOAD - len), (uint16_t)count, fn, (uint8_t)nfn, flags,
                             large_len);
    dsm_status_t ws = dsm_rslot_write(R, &t->ep[rank], rank, s, rsq_req_off(R, s, R->self, th->idx, b), st, len, seq);
    if (ws != DSM_OK) {
        /* the node is gone or broken: the application stops (fate sharing) */
        DSM_WARN(LOG, "batch to rank %u thread %u: %s", rank, s, dsm_strerror(ws));
        dsm_deleg_rpeer_dead(R, rank);
        return 1;
    }
    p->seq_pub = seq;
    p->flight[b] = (uint16_t)count;
    t->batches++;
    t->overlapped += seq - p->seq_done >= 2;
    t->full_batches += len == RSLOT_PAYLOAD;
    t->large_out += (flags & RSLOT_LARGE) != 0;
    t->big_out += (flags & RSLOT_BIG) != 0;
    t->last_count = (uint16_t)count;
    atomic_store_explicit(&t->rsent, atomic_load_explicit(&t->rsent, memory_order_relaxed) + count,
                          memory_order_release);
    return 1;
}

/* Responses of pair (rank, s)'s oldest batch in flight, if they arrived. */
static int poll_pair(deleg_thread_t *th, uint32_t rank, unsigned s, rpair_t *p)
{
    rthread_t *t = th->remote;
    dsm_deleg_remote_t *R = t->R;
    uint64_t seq = p->seq_done + 1;
    unsigned b = (unsigned)(seq % R->inflight);
    const uint8_t *block = R->base + rsq_resp_off(R, th->idx, rank, s, b);
    if (rslot_seq(block) != seq) return 0;
    unsigned n = p->flight[b];
    rslot_view_t v;
    dsm_status_t bad = dsm_rslot_decode(block, RSLOT_SIZE, &v);
    if (bad == DSM_OK && v.count != n) bad = DSM_ERR_PROTO;
    const uint8_t *pos = block + v.offset, *end = block + RSLOT_PAYLOAD;
    /* Responses sent by message (flagged): wait until every one arrived
     * before completing any, so completions stay in issue order. Without
     * the flag the batch is decoded once, as it is delivered. */
    if (bad == DSM_OK && (v.flags & RSLOT_SPILLS)) {
        for (unsigned i = 0; i < n; i++) {
            rresp_t r;
            size_t used;
            if (dsm_rresp_decode(pos, (size_t)(end - pos), &r, &used) != DSM_OK) break; /* refused below */
            if (r.spilled && !r.big && !dsm_rinbox_find(R, 1, rank, th->idx, s, seq, i, 0)) return 0; /* not yet */
            pos += used;
        }
        pos = block + v.offset;
    }
    if (bad != DSM_OK) DSM_WARN(LOG, "malformed response batch from rank %u thread %u", rank, s);
    for (unsigned i = 0; i < n; i++) {
        comp_t cm = p->done.comp[p->done.head & p->done.mask];
        COMP_SET(p->done.head, p->done.head + 1);
        rresp_t r = {.status = bad};
        rlarge_msg_t *m = NULL;
        if (bad == DSM_OK) {
            size_t used;
            if (dsm_rresp_decode(pos, (size_t)(end - pos), &r, &used) != DSM_OK ||
                (r.big && (!R->big || r.len > R->big))) {
                /* this entry and the rest of the batch are refused */
                DSM_WARN(LOG, "malformed response %u of a batch from rank %u thread %u", i, rank, s);
                bad = r.status = DSM_ERR_PROTO;
            } else {
                pos += used;
            }
        }
        if (r.status == DSM_OK) {
            if (r.big) {
                r.data = R->base + rsq_big_resp_off(R, th->idx, rank, s, b);
            } else if (r.spilled) {
                /* an unflagged spill may not be there: refused, not waited for */
                m = dsm_rinbox_find(R, 1, rank, th->idx, s, seq, i, 1);
                if (!m) r.status = DSM_ERR_PROTO;
                else if (m->len != r.len) r.status = DSM_ERR_PROTO;
                else r.data = m->bytes;
            }
            /* a fixed-size result is exactly the size asked for */
            if (r.status == DSM_OK && cm.ret_size != RRET_VAR && r.len != cm.ret_size) r.status = DSM_ERR_PROTO;
        }
        if (cm.then) {
            th->depth++;
            cm.then(cm.arg, r.status, r.status == DSM_OK ? r.data : NULL, r.status == DSM_OK ? r.len : 0);
            th->depth--;
        }
        free(m);
        th->outstanding--;
    }
    p->seq_done = seq;
    return 1;
}

void dsm_deleg_remote_polling(deleg_thread_t *th, int on)
{
    rthread_t *t = th->remote;
    if (!t || !t->R->msg_put || t->polling == on) return;
    t->polling = on;
    if (on) dsm_fabric_poller_begin(t->R->fabric);
    else dsm_fabric_poller_end(t->R->fabric);
}

void dsm_deleg_remote_bind(deleg_thread_t *th, int on)
{
    if (th->remote) dsm_fabric_lane_bind(on ? th->remote->lane : NULL);
}

int dsm_deleg_remote_step(deleg_thread_t *th)
{
    rthread_t *t = th->remote;
    if (!t) return 0;
    dsm_deleg_remote_t *R = t->R;
    int did = t->polling && dsm_fabric_poll(R->fabric) != 0;
    for (uint32_t r = 0; r < RMAX_NODES; r++) {
        if (r == R->self || !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire)) continue;
        for (unsigned i = 0; i < R->T; i++) {
            did |= dsm_deleg_rserve_pair(th, r, i, &t->in[r * R->T + i]);
            rpair_t *p = &t->out[r * R->T + i];
            if (p->seq_done != p->seq_pub) did |= poll_pair(th, r, i, p);
            if (p->pend_count) did |= publish_pair(th, r, i, p);
        }
    }
    return did;
}

int dsm_deleg_remote_incoming(deleg_thread_t *th)
{
    rthread_t *t = th->remote;
    if (!t) return 0;
    dsm_deleg_remote_t *R = t->R;
    for (uint32_t r = 0; r < RMAX_NODES; r++) {
        if (r == R->self || !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire)) continue;
        for (unsigned i = 0; i < R->T; i++) {
            const rin_t *in = &t->in[r * R->T + i];
            uint64_t seq = in->seq + 1;
            if (rslot_seq(R->base + rsq_req_off(R, th->idx, r, i, (unsigned)(seq % R->inflight))) == seq) return 1;
            const rpair_t *p = &t->out[r * R->T + i];
            seq = p->seq_done + 1;
            if (p->seq_done != p->seq_pub &&
                rslot_seq(R->base + rsq_resp_off(R, th->idx, r, i, (unsigned)(seq % R->inflight))) == seq)
                return 1;
            if (p->pend_count && p->seq_pub - p->seq_done < R->inflight) return 1;
        }
    }
    return 0;
}

/* ---- launch across nodes ------------------------------------------------------ */

static dsm_status_t launch_token(rthread_t *t, dsm_deleg_then_fn then, void *arg, uint64_t *token)
{
    uint32_t i;
    for (i = 0; i < t->nlaunch; i++)
        if (!t->launch[i].used) break;
    if (i == t->nlaunch) {
        if (t->nlaunch == t->launch_cap) {
            uint32_t cap = t->launch_cap ? t->launch_cap * 2 : 16;
            rlaunch_t *n = realloc(t->launch, cap * sizeof *n);
            if (!n) return DSM_ERR_NOMEM;
            t->launch = n;
            t->launch_cap = cap;
        }
        t->launch[t->nlaunch++] = (rlaunch_t){0};
    }
    rlaunch_t *l = &t->launch[i];
    l->gen++;
    l->used = 1;
    l->then = then;
    l->arg = arg;
    *token = ((uint64_t)l->gen << 32) | i;
    return DSM_OK;
}

/* The LAUNCH request's own response: only an error means anything (the
 * launch never started, so no result will come). */
static void launch_ack(void *arg, dsm_status_t st, const void *data, size_t len)
{
    (void)data;
    (void)len;
    if (st == DSM_OK) return;
    uint64_t token = (uint64_t)(uintptr_t)arg;
    rthread_t *t = dsm_deleg_tls->remote;
    uint32_t idx = (uint32_t)token;
    if (idx >= t->nlaunch || !t->launch[idx].used || t->launch[idx].gen != (uint32_t)(token >> 32)) return;
    rlaunch_t l = t->launch[idx];
    t->launch[idx].used = 0;
    if (l.then) l.then(l.arg, st, NULL, 0);
    dsm_deleg_tls->outstanding--;
}

dsm_status_t dsm_deleg_remote_launch(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                     const void *args, size_t args_len, dsm_deleg_then_fn then, void *cb_arg)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (!th || !th->remote) return DSM_ERR_STATE;
    if (env_len > DSM_DELEG_MAX_ENV) return DSM_ERR_TOO_BIG;
    uint32_t id;
    if (!fn_to_id(th->remote, fn, &id)) return DSM_ERR_NO_HANDLER;
    uint64_t token;
    dsm_status_t st = launch_token(th->remote, then, cb_arg, &token);
    if (st != DSM_OK) return st;
    uint8_t env2[8 + DSM_DELEG_MAX_ENV];
    memcpy(env2, &token, 8);
    if (env_len) memcpy(env2 + 8, env, env_len);
    th->outstanding++; /* until the result comes (RK_LAUNCH_DONE) */
    st = dsm_deleg_remote_issue(th, trust_rank(t), trust_thread(t), id, RK_LAUNCH, trust_handle(t), 0, env2, 8 + env_len, args,
                args_len, launch_ack, (void *)(uintptr_t)token);
    if (st != DSM_OK) {
        th->outstanding--;
        th->remote->launch[(uint32_t)token].used = 0;
    }
    return st;
}

void dsm_deleg_remote_launch_done(deleg_thread_t *th, uint32_t rank, unsigned client, uint64_t token,
                                  dsm_status_t st, const void *data, size_t len)
{
    uint8_t env[16] = {0};
    int32_t s32 = st;
    memcpy(env, &token, 8);
    memcpy(env + 8, &s32, 4);
    dsm_status_t is;
    /* retry on memory pressure rather than lose the client's continuation */
    while ((is = dsm_deleg_remote_issue(th, rank, client, 0, RK_LAUNCH_DONE, 0, 0, env, sizeof env, data, len, NULL, NULL)) ==
           DSM_ERR_NOMEM)
        dsm_sched_yield(&th->sched);
    if (is != DSM_OK) DSM_WARN(LOG, "the result of a launch for rank %u is lost: %s", rank, dsm_strerror(is));
}

/* ---- the API on remote trusts ------------------------------------------------ */

static uint32_t ret_code(size_t ret_size)
{
    return ret_size == DSM_DELEG_VARSIZE || ret_size > RET_FIXED_MAX ? RRET_VAR : (uint32_t)ret_size;
}

dsm_status_t dsm_deleg_remote_apply_then(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                         const void *args, size_t args_len, size_t ret_size,
                                         dsm_deleg_then_fn then, void *cb_arg)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (!th || !th->remote) return DSM_ERR_STATE;
    if (env_len > DSM_DELEG_MAX_ENV) return DSM_ERR_TOO_BIG;
    uint32_t id;
    if (!fn_to_id(th->remote, fn, &id)) {
        DSM_WARN(LOG, "a closure used on a remote trust must be registered (dsm_deleg_register)");
        return DSM_ERR_NO_HANDLER;
    }
    return dsm_deleg_remote_issue(th, trust_rank(t), trust_thread(t), id, RK_USER, trust_handle(t), ret_code(ret_size), env,
                  env_len, args, args_len, then, cb_arg);
}

dsm_status_t dsm_deleg_remote_apply(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                    const void *args, size_t args_len, void *ret, size_t ret_cap, size_t *ret_len)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (!th || !th->remote) return DSM_ERR_STATE;
    if (!dsm_deleg_can_block(th, "apply")) return DSM_ERR_STATE;
    waitrec_t w = {.th = th, .fiber = th->sched.cur, .dst = ret, .cap = ret_cap, .len_out = ret_len};
    dsm_status_t st = dsm_deleg_remote_apply_then(t, fn, env, env_len, args, args_len,
                                                  ret_len ? DSM_DELEG_VARSIZE : ret_cap, dsm_deleg_wait_cb, &w);
    if (st != DSM_OK) return st;
    dsm_deleg_wait(&w);
    return w.status;
}

/* SUB/ADD name no closure: fn id 0. */
dsm_status_t dsm_deleg_remote_drop(dsm_deleg_trust_t *t)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (!th || !th->remote) return DSM_ERR_STATE;
    uint64_t w = t->weight;
    dsm_status_t st = dsm_deleg_remote_issue(th, trust_rank(t), trust_thread(t), 0, RK_SUB, trust_handle(t), 0, &w, 8, NULL, 0,
                             NULL, NULL);
    if (st != DSM_OK) return st;
    t->remote = 0;
    t->weight = 0;
    return DSM_OK;
}

dsm_status_t dsm_deleg_remote_clone(dsm_deleg_trust_t *src, dsm_deleg_trust_t *out)
{
    if (src->weight < 2) {
        deleg_thread_t *th = dsm_deleg_tls;
        if (!th || !th->remote) return DSM_ERR_STATE;
        /* the refill must land before the new share can be dropped elsewhere */
        if (!dsm_deleg_can_block(th, "trust_clone (weight refill)")) return DSM_ERR_STATE;
        uint64_t add = th->rt->cfg.initial_weight ? th->rt->cfg.initial_weight : (UINT64_C(1) << 62);
        waitrec_t w = {.th = th, .fiber = th->sched.cur};
        dsm_status_t st = dsm_deleg_remote_issue(th, trust_rank(src), trust_thread(src), 0, RK_ADD, trust_handle(src), 0, &add, 8,
                                 NULL, 0, dsm_deleg_wait_cb, &w);
        if (st != DSM_OK) return st;
        dsm_deleg_wait(&w);
        if (w.status != DSM_OK) return w.status;
        src->weight += add;
    }
    uint64_t give = src->weight / 2;
    if (give > (UINT64_C(1) << 32)) give = UINT64_C(1) << 32;
    src->weight -= give;
    *out = *src;
    out->weight = give;
    return DSM_OK;
}

/* ---- exported trusts ---------------------------------------------------------- */

dsm_status_t dsm_deleg_trust_export(dsm_deleg_trust_t *t, void *out, size_t cap)
{
    if (!t || !out || cap < RTRUST_LEN || (!t->prop && !t->remote)) return DSM_ERR_INVALID;
    rtrust_t e;
    dsm_deleg_trust_t share;
    dsm_status_t st;
    if (trust_is_remote(t)) {
        if ((st = dsm_deleg_remote_clone(t, &share)) != DSM_OK) return st;
        e = (rtrust_t){trust_rank(t), trust_thread(t), trust_holder(t), trust_handle(t), share.weight};
    } else {
        dsm_deleg_remote_t *R = t->prop->rt->remote;
        if (!R) return DSM_ERR_STATE; /* the runtime is not attached to a node */
        uint32_t h;
        if ((st = handle_get(R, t->prop, &h)) != DSM_OK) return st;
        if ((st = dsm_deleg_trust_clone(t, &share)) != DSM_OK) return st;
        e = (rtrust_t){R->self, t->prop->trustee, R->self, h, share.weight};
    }
    dsm_rtrust_encode(out, &e);
    return DSM_OK;
}

dsm_status_t dsm_deleg_trust_export_to(dsm_deleg_rt_t *rt, dsm_deleg_trust_t *t, uint32_t rank, void *out,
                                       size_t cap)
{
    if (!rt || !t || !out || cap < RTRUST_LEN || (!t->prop && !t->remote)) return DSM_ERR_INVALID;
    dsm_deleg_remote_t *R = rt->remote;
    if (!R) return DSM_ERR_STATE;
    if (trust_is_remote(t) ? trust_holder(t) != R->self : t->prop->rt != rt) return DSM_ERR_INVALID;
    if (rank >= RMAX_NODES || R->self >= RMAX_NODES) return DSM_ERR_INVALID;
    if (rank == R->self) return dsm_deleg_trust_export(t, out, cap);
    if (!atomic_load_explicit(&R->peer_ok[rank], memory_order_acquire)) return DSM_ERR_NO_PEER;
    dsm_status_t st = dsm_deleg_trust_export(t, out, cap);
    if (st != DSM_OK) return st;
    rtrust_t e;
    if ((st = dsm_rtrust_decode(out, RTRUST_LEN, &e)) != DSM_OK) return st;
    /* the weight is the importer's before the bytes exist: however it dies,
     * its write-off takes the weight with it */
    if (e.rank == R->self) {
        st = dsm_deleg_shares_move(R, e.handle, e.trustee, R->self, rank, e.weight, 1);
    } else {
        uint8_t msg[RMOVE_LEN];
        dsm_rmove_encode(msg, &(rmove_t){.trustee = e.trustee, .from = R->self, .handle = e.handle, .to = rank,
                                         .weight = e.weight});
        size_t len = 0;
        st = dsm_fabric_am_request(R->fabric, e.rank, DSM_AM_DELEG_MOVE, msg, sizeof msg, NULL, 0, &len, 0);
    }
    if (st != DSM_OK) {
        t->weight += e.weight; /* not moved: the share goes back to the trust it came from */
        memset(out, 0, RTRUST_LEN);
        return st;
    }
    e.exporter = rank;
    dsm_rtrust_encode(out, &e);
    return DSM_OK;
}

dsm_status_t dsm_deleg_trust_import(dsm_deleg_rt_t *rt, const void *in, size_t len, dsm_deleg_trust_t *out)
{
    if (!rt || !in || !out) return DSM_ERR_INVALID;
    dsm_deleg_remote_t *R = rt->remote;
    if (!R) return DSM_ERR_STATE;
    rtrust_t e;
    dsm_status_t st = dsm_rtrust_decode(in, len, &e);
    if (st != DSM_OK) return st;
    if (e.trustee >= R->T || e.exporter >= RMAX_NODES) return DSM_ERR_PROTO;
    if (R->self >= RMAX_NODES) return DSM_ERR_STATE; /* not joined, or past the ranks trusts reach */
    if (e.rank == R->self) {
        /* home: the weight joins this node's share (the rest of the total) */
        st = dsm_deleg_shares_move(R, e.handle, e.trustee, e.exporter, R->self, e.weight, 0);
        if (st != DSM_OK) return st;
        *out = (dsm_deleg_trust_t){.prop = dsm_deleg_rhandle_find(R, e.handle, e.trustee), .weight = e.weight};
        return out->prop ? DSM_OK : DSM_ERR_BAD_ADDR;
    }
    if (e.rank >= RMAX_NODES) return DSM_ERR_NO_PEER;
    if (e.exporter != R->self) {
        /* The trustee's node learns that the weight sits here now before the
         * trust can be dropped, so no drop overtakes the move, and a node
         * that dies holding it has it written off (remote_share.c). */
        uint8_t msg[RMOVE_LEN];
        dsm_rmove_encode(msg, &(rmove_t){.trustee = e.trustee, .from = e.exporter, .handle = e.handle,
                                         .to = RMOVE_TO_SENDER, .weight = e.weight});
        size_t len = 0;
        st = dsm_fabric_am_request(R->fabric, e.rank, DSM_AM_DELEG_MOVE, msg, sizeof msg, NULL, 0, &len, 0);
        if (st != DSM_OK) return st;
    }
    *out = (dsm_deleg_trust_t){
        .prop = NULL, .weight = e.weight, .remote = trust_remote_of(R->self, e.rank, e.trustee, e.handle)};
    return DSM_OK;
}

int32_t dsm_deleg_trust_node(const dsm_deleg_trust_t *t)
{
    return t && trust_is_remote(t) ? (int32_t)trust_rank(t) : -1;
}

