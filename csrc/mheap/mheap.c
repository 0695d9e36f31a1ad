/* The managed heap's API on the CPU server: creating a heap over the
 * memory servers (carving each one's part from its heap partition, shipping
 * the types), handles, bump allocation in regions, field reads and writes
 * through the page cache, and the barriers on every reference store: the
 * SATB pre-write barrier (the overwritten reference goes to the log) and the
 * post-write barrier (an inter-region reference goes, as a (slot, target)
 * card, to the storing thread's queue; a transfer thread moves full queues
 * into the target region's remembered set: the slot into its source queue,
 * the target into its target queue). */
#include <stdlib.h>
#include <string.h>

#include "mheap/cpu.h"
#include "mheap/msg.h"
#include "mheap/server.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/thread.h"

#define LOG_MOD "mheap"

/* ---- small containers ------------------------------------------------------ */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static int set_insert(uint64_t *v, uint32_t cap, uint64_t x)
{
    for (uint32_t i = (uint32_t)mix(x) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (v[i] == x)
            return 0;
        if (v[i] == 0) {
            v[i] = x;
            return 1;
        }
    }
}

int u64set_add(u64set_t *s, uint64_t x)
{
    if (x == 0)
        return 0;
    if ((uint64_t)(s->n + 1) * 2 > s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 16;
        uint64_t *v = calloc(cap, sizeof *v);
        if (v == NULL)
            return -1;
        for (uint32_t i = 0; i < s->cap; i++)
            if (s->v[i])
                set_insert(v, cap, s->v[i]);
        free(s->v);
        s->v = v;
        s->cap = cap;
    }
    int added = set_insert(s->v, s->cap, x);
    s->n += (uint32_t)added;
    return added;
}

void u64set_clear(u64set_t *s)
{
    if (s->v)
        memset(s->v, 0, (size_t)s->cap * sizeof *s->v);
    s->n = 0;
}

void u64set_free(u64set_t *s)
{
    free(s->v);
    s->v = NULL;
    s->cap = s->n = 0;
}

int u64vec_push(u64vec_t *a, uint64_t x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        uint64_t *v = realloc(a->v, cap * sizeof *v);
        if (v == NULL)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* ---- accounting and failure -------------------------------------------------- */

/* Set on the threads that work only for the GC (the trace driver, the
 * G1-like marker): whatever they move is GC traffic, in any phase. */
static _Thread_local int gc_thread;

void mheap_gc_thread(void) { gc_thread = 1; }

void mheap_fabric_bytes(dsm_mheap_t *h, uint64_t n)
{
    __atomic_fetch_add(&h->st.fabric_bytes, n, __ATOMIC_RELAXED);
    if (gc_thread || __atomic_load_n(&h->in_gc, __ATOMIC_RELAXED))
        __atomic_fetch_add(&h->st.fabric_bytes_gc, n, __ATOMIC_RELAXED);
}

uint64_t mheap_phase(dsm_mheap_t *h, int ph, uint64_t t0)
{
    uint64_t now = dsm_now_ns();
    __atomic_fetch_add(&h->st.phase_ns[ph], now - t0, __ATOMIC_RELAXED);
    return now;
}

void mheap_program_ns(dsm_mheap_t *h, int ph, uint64_t t0)
{
    if (!gc_thread && !__atomic_load_n(&h->in_gc, __ATOMIC_RELAXED))
        mheap_phase(h, ph, t0);
}

void mheap_round_trips(dsm_mheap_t *h, uint64_t n)
{
    if (__atomic_load_n(&h->in_gc, __ATOMIC_RELAXED))
        __atomic_fetch_add(&h->st.pause_round_trips, n, __ATOMIC_RELAXED);
}

void mheap_gc_bytes(dsm_mheap_t *h, uint64_t n)
{
    __atomic_fetch_add(&h->st.fabric_bytes, n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->st.fabric_bytes_gc, n, __ATOMIC_RELAXED);
}

dsm_status_t mheap_unsound(dsm_mheap_t *h, const char *what, uint64_t addr)
{
    DSM_ERROR(LOG_MOD, "unsound trace: %s 0x%llx was not kept: the heap is unusable", what,
              (unsigned long long)addr);
    h->st.roots_lost++;
    if (h->dead == DSM_OK)
        h->dead = DSM_ERR_STATE;
    return DSM_ERR_STATE;
}

/* ---- the heap lock ------------------------------------------------------------ */

void mheap_lock(dsm_mheap_t *h)
{
    if (__atomic_load_n(&h->mu_waiting, __ATOMIC_SEQ_CST)) {
        /* The marker asked for a turn: it goes first. */
        pthread_mutex_lock(&h->turn_mu);
        while (h->mu_waiting)
            pthread_cond_wait(&h->turn_cv, &h->turn_mu);
        pthread_mutex_unlock(&h->turn_mu);
    }
    pthread_mutex_lock(&h->mu);
}

void mheap_unlock(dsm_mheap_t *h)
{
    pthread_mutex_unlock(&h->mu);
    if (__atomic_load_n(&h->mu_waiting, __ATOMIC_SEQ_CST))
        mheap_lock_kick(h);
}

void mheap_lock_kick(dsm_mheap_t *h)
{
    pthread_mutex_lock(&h->turn_mu);
    pthread_cond_broadcast(&h->turn_cv);
    pthread_mutex_unlock(&h->turn_mu);
}

int mheap_lock_gc(dsm_mheap_t *h)
{
    int rc = 0;
    pthread_mutex_lock(&h->turn_mu);
    __atomic_store_n(&h->mu_waiting, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        if (__atomic_load_n(&h->msct_abort, __ATOMIC_ACQUIRE)) {
            rc = -1;
            break;
        }
        if (pthread_mutex_trylock(&h->mu) == 0)
            break;
        /* Woken by the holder's mheap_unlock or by a pause's kick. */
        pthread_cond_wait(&h->turn_cv, &h->turn_mu);
    }
    __atomic_store_n(&h->mu_waiting, 0, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&h->turn_cv);
    pthread_mutex_unlock(&h->turn_mu);
    return rc;
}

/* A memory server that died takes the heap with it: every later call
 * answers PEER_DEAD rather than work on a heap with a hole in it. A timeout
 * outside a collection (a slow fetch or write-back on a loaded machine) is
 * only reported: the page stays as it was (dirty if it was) and the call
 * can be retried; inside a collection it is fatal, since a compaction may
 * be half applied. */
dsm_status_t mheap_failed(dsm_mheap_t *h, dsm_status_t st)
{
    if (st == DSM_ERR_TIMEOUT && !__atomic_load_n(&h->in_gc, __ATOMIC_RELAXED))
        return st;
    if (st == DSM_ERR_PEER_DEAD || st == DSM_ERR_NO_PEER || st == DSM_ERR_TIMEOUT) {
        if (h->dead == DSM_OK)
            DSM_ERROR(LOG_MOD, "a memory server is gone (%s): the heap is unusable", dsm_strerror(st));
        h->dead = DSM_ERR_PEER_DEAD;
        return DSM_ERR_PEER_DEAD;
    }
    return st;
}

/* Traces and compactions of a whole region can take a while on a loaded
 * machine: control requests wait longer than the op timeout (a dead server
 * is noticed anyway). */
enum { CTL_TIMEOUT_MS = 60000 };

dsm_status_t ctl_request(dsm_mheap_t *h, uint32_t server, const uint8_t *req, size_t len, uint8_t *rep,
                         size_t cap, size_t *rep_len)
{
    dsm_status_t st = dsm_fabric_am_request(h->fabric, h->servers[server], DSM_AM_MHEAP_CTL, req, len, rep, cap,
                                            rep_len, CTL_TIMEOUT_MS);
    mheap_fabric_bytes(h, len + (st == DSM_OK ? *rep_len : 0));
    __atomic_fetch_add(&h->st.ctl_requests, 1, __ATOMIC_RELAXED);
    mheap_round_trips(h, 1);
    return st;
}

dsm_status_t ctl_request_all(dsm_mheap_t *h, const uint8_t *const *req, const size_t *len, uint8_t *const *rep,
                             const size_t *cap, size_t *rep_len)
{
    dsm_op_t ops[DSM_MHEAP_MAX_SERVERS];
    int sent[DSM_MHEAP_MAX_SERVERS] = {0};
    uint32_t n = 0;
    for (uint32_t s = 0; s < h->cfg.nservers; s++) {
        if (len[s] == 0)
            continue;
        /* An error here finishes the op: the wait below reports it. */
        (void)dsm_fabric_am_request_nb(h->fabric, h->servers[s], DSM_AM_MHEAP_CTL, req[s], len[s], rep[s], cap[s],
                                       &ops[s]);
        sent[s] = 1;
        n++;
    }
    dsm_status_t first = DSM_OK;
    for (uint32_t s = 0; s < h->cfg.nservers; s++) {
        if (!sent[s])
            continue;
        dsm_status_t st = dsm_fabric_wait_for(&ops[s], CTL_TIMEOUT_MS);
        rep_len[s] = st == DSM_OK ? (size_t)ops[s].result : 0;
        mheap_fabric_bytes(h, len[s] + rep_len[s]);
        if (first == DSM_OK)
            first = st;
    }
    __atomic_fetch_add(&h->st.ctl_requests, n, __ATOMIC_RELAXED);
    if (n)
        mheap_round_trips(h, 1);   /* in flight together: one round trip's wait */
    return first;
}

/* ---- barrier queues and the transfer thread ----------------------------------- */

void remset_add_locked(dsm_mheap_t *h, uint64_t slot, uint64_t target)
{
    region_t *r = region_of(h, target);
    if (r == NULL)
        return;
    if (u64set_add(&r->slots, slot) > 0)
        h->st.remset_slots++;
    if (u64set_add(&r->targets, target) > 0)
        h->st.remset_targets++;
}

static void *transfer_main(void *arg)
{
    dsm_mheap_t *h = arg;
    dsm_thread_name("dsm-mh-transfer", -1);
    pthread_mutex_lock(&h->tl_mu);
    for (;;) {
        while (h->full == NULL && !h->transfer_stop)
            pthread_cond_wait(&h->tl_cv, &h->tl_mu);
        if (h->full == NULL && h->transfer_stop)
            break;
        cardbuf_t *b = h->full;
        h->full = NULL;
        h->transfer_busy = 1;
        pthread_mutex_unlock(&h->tl_mu);
        pthread_mutex_lock(&h->rs_mu);
        while (b) {
            for (uint32_t i = 0; i < b->n; i++)
                remset_add_locked(h, b->e[i][0], b->e[i][1]);
            cardbuf_t *next = b->next;
            free(b);
            b = next;
        }
        pthread_mutex_unlock(&h->rs_mu);
        pthread_mutex_lock(&h->tl_mu);
        h->transfer_busy = 0;
        pthread_cond_broadcast(&h->tl_idle);
    }
    pthread_mutex_unlock(&h->tl_mu);
    return NULL;
}

static _Thread_local struct {
    uint32_t serial;
    tlq_t *q;
} tl_cache;
static uint32_t next_serial = 1;

/* This thread's queues for heap h (created on first use). */
static tlq_t *my_queue(dsm_mheap_t *h)
{
    if (tl_cache.serial == h->serial && tl_cache.q)
        return tl_cache.q;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&h->tl_mu);
    tlq_t *q = h->tlqs;
    while (q && !pthread_equal(q->owner, self))
        q = q->next;
    if (q == NULL && (q = calloc(1, sizeof *q)) != NULL) {
        q->owner = self;
        q->next = h->tlqs;
        h->tlqs = q;
    }
    pthread_mutex_unlock(&h->tl_mu);
    tl_cache.serial = h->serial;
    tl_cache.q = q;
    return q;
}

/* Hand a thread's cards to the transfer thread (tl_mu held). */
static int hand_over_locked(dsm_mheap_t *h, tlq_t *q)
{
    if (q->ncard == 0)
        return 0;
    cardbuf_t *b = malloc(sizeof *b);
    if (b == NULL)
        return -1;
    b->n = q->ncard;
    memcpy(b->e, q->card, sizeof(q->card[0]) * q->ncard);
    b->next = h->full;
    h->full = b;
    q->ncard = 0;
    return 0;
}

static void satb_flush_locked(dsm_mheap_t *h, tlq_t *q)
{
    for (uint32_t i = 0; i < q->nsatb; i++)
        u64vec_push(&h->satb_log, q->satb[i]);
    q->nsatb = 0;
}

/* The post-write barrier's slow path and the SATB buffer's, when full. */
static dsm_status_t queue_card(dsm_mheap_t *h, uint64_t slot, uint64_t target)
{
    tlq_t *q = my_queue(h);
    if (q == NULL)
        return DSM_ERR_NOMEM;
    if (q->ncard == TLQ_CAP) {
        pthread_mutex_lock(&h->tl_mu);
        int rc = hand_over_locked(h, q);
        pthread_cond_signal(&h->tl_cv);
        pthread_mutex_unlock(&h->tl_mu);
        if (rc != 0)
            return DSM_ERR_NOMEM;
    }
    q->card[q->ncard][0] = slot;
    q->card[q->ncard][1] = target;
    q->ncard++;
    h->st.barrier_entries++;
    return DSM_OK;
}

static dsm_status_t queue_satb(dsm_mheap_t *h, uint64_t old)
{
    tlq_t *q = my_queue(h);
    if (q == NULL)
        return DSM_ERR_NOMEM;
    if (q->nsatb == TLQ_CAP) {
        pthread_mutex_lock(&h->tl_mu);
        satb_flush_locked(h, q);
        pthread_mutex_unlock(&h->tl_mu);
    }
    q->satb[q->nsatb++] = old;
    h->st.satb_logged++;
    return DSM_OK;
}

void remset_flush(dsm_mheap_t *h)
{
    pthread_mutex_lock(&h->tl_mu);
    for (tlq_t *q = h->tlqs; q; q = q->next) {
        hand_over_locked(h, q);
        satb_flush_locked(h, q);
    }
    cardbuf_t *b = h->full;
    h->full = NULL;
    while (h->transfer_busy)
        pthread_cond_wait(&h->tl_idle, &h->tl_mu);
    pthread_mutex_unlock(&h->tl_mu);
    pthread_mutex_lock(&h->rs_mu);
    while (b) {
        for (uint32_t i = 0; i < b->n; i++)
            remset_add_locked(h, b->e[i][0], b->e[i][1]);
        cardbuf_t *next = b->next;
        free(b);
        b = next;
    }
    pthread_mutex_unlock(&h->rs_mu);
}

/* ---- create / destroy ----------------------------------------------------------- */

void dsm_mheap_config_init(dsm_mheap_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->region_bytes = DSM_MHEAP_MIN_REGION;
    c->cache_percent = 100;
    c->msct = 1;
    c->msct_auto = 1;
    c->satb = 1;
    c->order = DSM_MHEAP_ORDER_DFS;
    c->handles = 65536;
}

static dsm_status_t setup_server(dsm_mheap_t *h, uint32_t i)
{
    dsm_mheap_msg_t m = {.type = DSM_MHEAP_MSG_SETUP, .heap_id = h->heap_id, .chunk = h->chunk[i],
                         .ubase = DSM_MHEAP_UBASE + (uint64_t)i * h->part_bytes, .part_bytes = h->part_bytes,
                         .region_shift = (uint8_t)h->region_shift, .order = (uint8_t)h->cfg.order,
                         .types = h->types};
    dsm_writer_t w = {0};
    dsm_mheap_msg_encode(&m, &w);
    if (!w.ok)
        return DSM_ERR_NOMEM;
    uint8_t rep[64];
    size_t rep_len = 0;
    dsm_status_t st = ctl_request(h, i, w.buf, w.len, rep, sizeof rep, &rep_len);
    dsm_writer_free(&w);
    return st;
}

static void destroy_servers(dsm_mheap_t *h)
{
    for (uint32_t i = 0; i < h->cfg.nservers; i++) {
        if (h->chunk[i] == 0 || dsm_node_peer_state(h->node, h->servers[i]) != DSM_OK)
            continue;
        dsm_mheap_msg_t m = {.type = DSM_MHEAP_MSG_DESTROY, .heap_id = h->heap_id};
        dsm_writer_t w = {0};
        dsm_mheap_msg_encode(&m, &w);
        uint8_t rep[64];
        size_t rep_len;
        if (w.ok)
            (void)ctl_request(h, i, w.buf, w.len, rep, sizeof rep, &rep_len);
        dsm_writer_free(&w);
        (void)dsm_free(h->node, h->chunk[i]);
    }
}

void dsm_mheap_destroy(dsm_mheap_t *h)
{
    if (h == NULL)
        return;
    if (h->msct_running) {
        pthread_mutex_lock(&h->msct_mu);
        h->msct_stop = 1;
        pthread_cond_broadcast(&h->msct_cv);
        pthread_mutex_unlock(&h->msct_mu);
        pthread_join(h->msct, NULL);
    }
    if (h->async)
        mheap_server_remove_heap(h->node, h);   /* no TRACE_DONE reaches it from here on */
    if (h->transfer_stop == 0 && h->regions) {
        pthread_mutex_lock(&h->tl_mu);
        h->transfer_stop = 1;
        pthread_cond_signal(&h->tl_cv);
        pthread_mutex_unlock(&h->tl_mu);
        pthread_join(h->transfer, NULL);
    }
    destroy_servers(h);
    for (uint32_t i = 0; h->jobs && i < h->njobs; i++)
        dsm_writer_free(&h->jobs[i].req);
    free(h->jobs);
    free(h->mark_stack.v);
    free(h->mark_waiting.v);
    while (h->tlqs) {
        tlq_t *q = h->tlqs;
        h->tlqs = q->next;
        free(q);
    }
    while (h->full) {
        cardbuf_t *b = h->full;
        h->full = b->next;
        free(b);
    }
    if (h->regions)
        for (uint32_t i = 0; i < h->nregions; i++) {
            free(h->regions[i].starts);
            dsm_mheap_rtrace_free(&h->regions[i].ct);
            u64set_free(&h->regions[i].slots);
            u64set_free(&h->regions[i].targets);
        }
    free(h->regions);
    cache_free(h);
    free(h->handle_addr);
    free(h->handle_used);
    free(h->handle_free);
    free(h->satb_log.v);
    free(h->snap_roots.v);
    free(h->pauses.v);
    free(h->types);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->tl_mu);
    pthread_mutex_destroy(&h->rs_mu);
    pthread_mutex_destroy(&h->msct_mu);
    pthread_mutex_destroy(&h->turn_mu);
    pthread_cond_destroy(&h->turn_cv);
    pthread_cond_destroy(&h->tl_cv);
    pthread_cond_destroy(&h->tl_idle);
    pthread_cond_destroy(&h->msct_cv);
    free(h);
}

dsm_status_t dsm_mheap_create(dsm_node_t *node, const dsm_mheap_config_t *config, dsm_mheap_t **out)
{
    if (out)
        *out = NULL;
    if (node == NULL || config == NULL || out == NULL || config->nservers == 0 ||
        config->nservers > DSM_MHEAP_MAX_SERVERS || config->memory_servers == NULL || config->heap_bytes == 0)
        return DSM_ERR_INVALID;
    uint32_t rb = config->region_bytes ? config->region_bytes : DSM_MHEAP_MIN_REGION;
    if (rb < DSM_MHEAP_MIN_REGION || rb > DSM_MHEAP_MAX_REGION || (rb & (rb - 1)) != 0) {
        DSM_ERROR(LOG_MOD, "regions of %u bytes: they must be a power of two of 1..4 MiB", rb);
        return DSM_ERR_INVALID;
    }
    uint32_t pct = config->cache_percent ? config->cache_percent : 100;
    if (pct > 100 || (config->order != DSM_MHEAP_ORDER_DFS && config->order != DSM_MHEAP_ORDER_BFS))
        return DSM_ERR_INVALID;
    if (config->gc_trigger_percent > 99) {
        DSM_ERROR(LOG_MOD, "gc_trigger_percent %u: it must be 1..99 (0: no trigger)", config->gc_trigger_percent);
        return DSM_ERR_INVALID;
    }
    dsm_mheap_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        return DSM_ERR_NOMEM;
    h->types = malloc(sizeof *h->types);
    if (h->types == NULL) {
        free(h);
        return DSM_ERR_NOMEM;
    }
    dsm_status_t st = dsm_mheap_types_build(config->types, config->ntypes, rb - DSM_MHEAP_REGION_HDR, h->types);
    if (st != DSM_OK) {
        DSM_ERROR(LOG_MOD, "refused type table: every type needs a payload of 1 byte up to a region, and "
                           "distinct 8-aligned reference fields inside it");
        free(h->types);
        free(h);
        return st;
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->tl_mu, NULL);
    pthread_mutex_init(&h->rs_mu, NULL);
    pthread_mutex_init(&h->msct_mu, NULL);
    pthread_mutex_init(&h->turn_mu, NULL);
    pthread_cond_init(&h->turn_cv, NULL);
    pthread_cond_init(&h->tl_cv, NULL);
    pthread_cond_init(&h->tl_idle, NULL);
    pthread_cond_init(&h->msct_cv, NULL);
    h->node = node;
    h->fabric = dsm_node_fabric(node);
    h->cfg = *config;
    h->cfg.cache_percent = pct;
    h->cfg.region_bytes = rb;
    h->cfg.types = NULL;
    h->cfg.memory_servers = NULL;
    memcpy(h->servers, config->memory_servers, config->nservers * sizeof(uint32_t));
    h->serial = __atomic_fetch_add(&next_serial, 1, __ATOMIC_RELAXED);
    h->heap_id = (uint32_t)mix(dsm_now_ns() ^ h->serial) | 1u;
    h->region_bytes = rb;
    h->region_shift = (uint32_t)__builtin_ctz(rb);
    h->alloc_region = UINT32_MAX;
    h->promo_region = UINT32_MAX;
    h->transfer_stop = 1;   /* until the thread runs */

    /* Each server's part: a whole number of regions, heap_bytes in all. */
    uint64_t per = (config->heap_bytes + config->nservers - 1) / config->nservers;
    h->rps = (uint32_t)((per + rb - 1) / rb);
    h->part_bytes = (uint64_t)h->rps * rb;
    h->nregions = h->rps * config->nservers;
    uint64_t held = 0;
    for (uint32_t i = 0; i < config->nservers; i++)
        held += dsm_heap_partition_size(node, h->servers[i]);
    for (uint32_t i = 0; i < config->nservers; i++) {
        if (h->servers[i] == dsm_node_rank(node) || dsm_node_peer_state(node, h->servers[i]) != DSM_OK) {
            DSM_ERROR(LOG_MOD, "rank %u is not a live memory server of this node", h->servers[i]);
            dsm_mheap_destroy(h);
            return DSM_ERR_NO_PEER;
        }
        st = dsm_alloc(node, h->servers[i], h->part_bytes, &h->chunk[i]);
        if (st != DSM_OK) {
            DSM_ERROR(LOG_MOD, "a heap of %llu bytes (%llu per server) does not fit: the %u memory servers "
                               "hold %llu bytes in all (rank %u: %s)",
                      (unsigned long long)h->part_bytes * config->nservers, (unsigned long long)h->part_bytes,
                      config->nservers, (unsigned long long)held, h->servers[i], dsm_strerror(st));
            h->chunk[i] = 0;
            dsm_mheap_destroy(h);
            return st == DSM_ERR_PEER_DEAD ? st : DSM_ERR_NOMEM;
        }
    }
    h->regions = calloc(h->nregions, sizeof *h->regions);
    uint32_t nh = config->handles ? config->handles : 65536;
    h->nhandles = nh;
    h->handle_addr = calloc(nh, sizeof(uint64_t));
    h->handle_used = calloc(nh, 1);
    h->handle_free = malloc(nh * sizeof(uint32_t));
    if (!h->regions || !h->handle_addr || !h->handle_used || !h->handle_free || (st = cache_init(h)) != DSM_OK) {
        dsm_mheap_destroy(h);
        return DSM_ERR_NOMEM;
    }
    for (uint32_t i = 1; i < nh; i++)
        h->handle_free[h->nhandle_free++] = nh - i;   /* handle 0 is "none" */
    mheap_retrigger(h);
    /* The G1-like baseline's eden: G1 sizes it to meet its pause goal,
     * which here means a young pause that finds its eden in the cache
     * (half of it, the rest for the old objects in use), within G1's
     * bounds (at most 60% of the heap, at least a region). */
    uint64_t cache_regions = (uint64_t)h->budget * DSM_MHEAP_PAGE / rb;
    h->eden_regions = (uint32_t)(cache_regions / 2);
    if (h->eden_regions > h->nregions * 6 / 10)
        h->eden_regions = h->nregions * 6 / 10;
    if (h->eden_regions < 1)
        h->eden_regions = 1;
    for (uint32_t i = 0; i < h->nregions; i++) {
        region_t *r = &h->regions[i];
        r->server = i / h->rps;
        r->local = i % h->rps;
        r->start = DSM_MHEAP_UBASE + (uint64_t)i * rb;
        r->bp = r->old_bp = DSM_MHEAP_REGION_HDR;
        if ((r->starts = calloc(rb / 512, sizeof(uint64_t))) == NULL) {
            dsm_mheap_destroy(h);
            return DSM_ERR_NOMEM;
        }
    }
    for (uint32_t i = 0; i < config->nservers; i++)
        if ((st = setup_server(h, i)) != DSM_OK) {
            DSM_ERROR(LOG_MOD, "memory server rank %u refused the heap: %s", h->servers[i], dsm_strerror(st));
            dsm_mheap_destroy(h);
            return st;
        }
    h->transfer_stop = 0;
    if (dsm_thread_start(&h->transfer, NULL, transfer_main, h) != 0) {
        h->transfer_stop = 1;
        dsm_mheap_destroy(h);
        return DSM_ERR_NOMEM;
    }
    h->async = mheap_server_add_heap(node, h, h->heap_id) == DSM_OK;
    if (dsm_thread_start(&h->msct, NULL, msct_main, h) != 0) {
        dsm_mheap_destroy(h);
        return DSM_ERR_NOMEM;
    }
    h->msct_running = 1;
    h->st.heap_bytes = (uint64_t)h->nregions * rb;
    h->st.regions = h->nregions;
    *out = h;
    return DSM_OK;
}

dsm_status_t mheap_object_type(dsm_mheap_t *h, uint64_t a, const dsm_mheap_tinfo_t **ti)
{
    uint64_t hdr;
    dsm_status_t st = cache_load64(h, a, &hdr);
    if (st != DSM_OK)
        return st;
    uint32_t type = dsm_mheap_hdr_type(hdr);
    if (type >= h->types->n || dsm_mheap_hdr_size(hdr) != h->types->t[type].size)
        return DSM_ERR_BAD_ADDR;
    *ti = &h->types->t[type];
    return DSM_OK;
}

/* ---- handles ----------------------------------------------------------------- */

static int handle_ok(dsm_mheap_t *h, dsm_mheap_handle_t x) { return x > 0 && x < h->nhandles && h->handle_used[x]; }

dsm_status_t dsm_mheap_handle_new(dsm_mheap_t *h, dsm_mheap_handle_t *out)
{
    if (h == NULL || out == NULL)
        return DSM_ERR_INVALID;
    mheap_lock(h);
    dsm_status_t st = DSM_ERR_NOMEM;
    if (h->nhandle_free > 0) {
        uint32_t x = h->handle_free[--h->nhandle_free];
        h->handle_used[x] = 1;
        h->handle_addr[x] = 0;
        *out = x;
        st = DSM_OK;
    }
    mheap_unlock(h);
    return st;
}

void dsm_mheap_handle_free(dsm_mheap_t *h, dsm_mheap_handle_t x)
{
    if (h == NULL)
        return;
    mheap_lock(h);
    if (handle_ok(h, x)) {
        h->handle_used[x] = 0;
        h->handle_addr[x] = 0;
        h->handle_free[h->nhandle_free++] = x;
    }
    mheap_unlock(h);
}

dsm_status_t dsm_mheap_handle_set(dsm_mheap_t *h, dsm_mheap_handle_t dst, dsm_mheap_handle_t src)
{
    if (h == NULL)
        return DSM_ERR_INVALID;
    mheap_lock(h);
    dsm_status_t st = DSM_ERR_INVALID;
    if (handle_ok(h, dst) && (src == 0 || handle_ok(h, src))) {
        h->handle_addr[dst] = src ? h->handle_addr[src] : 0;
        st = DSM_OK;
    }
    mheap_unlock(h);
    return st;
}

dsm_mheap_addr_t dsm_mheap_addr(dsm_mheap_t *h, dsm_mheap_handle_t x)
{
    if (h == NULL)
        return 0;
    mheap_lock(h);
    uint64_t a = handle_ok(h, x) ? h->handle_addr[x] : 0;
    mheap_unlock(h);
    return a;
}

/* ---- allocation ----------------------------------------------------------------- */

/* The next free region, taking the servers in turn; if none is free, the
 * region in use with the most room (compaction leaves survivors where they
 * were, so room collects at the ends of regions). */
static region_t *take_region(dsm_mheap_t *h, uint32_t size)
{
    uint32_t ns = h->cfg.nservers;
    uint32_t from = h->alloc_region == UINT32_MAX ? 0 : h->alloc_region;
    /* Visit regions in the order server0:0, server1:0, ..., server0:1, ... */
    uint32_t pos0 = (from % h->rps) * ns + from / h->rps;
    region_t *roomiest = NULL;
    for (uint32_t k = 1; k <= h->nregions; k++) {
        uint32_t pos = (pos0 + k) % h->nregions;
        uint32_t idx = (pos % ns) * h->rps + pos / ns;
        region_t *r = &h->regions[idx];
        if (!r->in_use) {
            r->in_use = 1;
            r->bp = r->old_bp = DSM_MHEAP_REGION_HDR;
            h->alloc_region = idx;
            return r;
        }
        if (r->bp + size <= h->region_bytes && (roomiest == NULL || r->bp < roomiest->bp))
            roomiest = r;
    }
    if (roomiest)
        h->alloc_region = (uint32_t)(roomiest - h->regions);
    return roomiest;
}

static dsm_status_t bump(dsm_mheap_t *h, uint32_t size, uint64_t *out)
{
    region_t *r = h->alloc_region == UINT32_MAX ? NULL : &h->regions[h->alloc_region];
    if (r == NULL || !r->in_use || r->bp + size > h->region_bytes) {
        if ((r = take_region(h, size)) == NULL)
            return DSM_ERR_NOMEM;
    }
    *out = r->start + r->bp;
    bit_on(r->starts, r->bp / 8);
    r->bp += size;
    return DSM_OK;
}

uint64_t mheap_used(dsm_mheap_t *h)
{
    uint64_t used = 0;
    for (uint32_t i = 0; i < h->nregions; i++)
        if (h->regions[i].in_use)
            used += h->regions[i].bp - DSM_MHEAP_REGION_HDR;
    return used;
}

void mheap_retrigger(dsm_mheap_t *h)
{
    uint64_t pct = h->cfg.gc_trigger_percent;
    if (pct == 0) {
        h->trigger_bytes = 0;
        return;
    }
    uint64_t base = h->cfg.heap_bytes * pct / 100, used = mheap_used(h),
             total = (uint64_t)h->nregions * h->region_bytes;
    /* Live data above the trigger: the next collection when half of what is
     * left is used, not at every region. */
    h->trigger_bytes = used < base ? base : used + (total > used ? (total - used) / 2 : 0);
}

/* The use trigger, and the G1-like baseline's young pause once its eden
 * is full: checked when the next object needs a new region. */
static dsm_status_t use_trigger(dsm_mheap_t *h, uint32_t size)
{
    region_t *r = h->alloc_region == UINT32_MAX ? NULL : &h->regions[h->alloc_region];
    if (r && r->in_use && r->bp + size <= h->region_bytes)
        return DSM_OK;
    if (h->cfg.cpu_marking && !h->cfg.msct && h->cfg.msct_auto) {
        uint32_t young = 0;
        for (uint32_t i = 0; i < h->nregions; i++)
            young += region_young(&h->regions[i]);
        if (young >= h->eden_regions)
            return gc_collect(h, DSM_MHEAP_GC_AUTO);
    }
    if (h->trigger_bytes == 0 || mheap_used(h) < h->trigger_bytes)
        return DSM_OK;
    h->st.trigger_gcs++;
    return gc_collect(h, DSM_MHEAP_GC_AUTO);
}

static void api_enter(dsm_mheap_t *h) { mheap_lock(h); }
static void api_leave(dsm_mheap_t *h) { mheap_unlock(h); }

dsm_status_t dsm_mheap_alloc(dsm_mheap_t *h, uint32_t type, dsm_mheap_handle_t dst)
{
    if (h == NULL)
        return DSM_ERR_INVALID;
    api_enter(h);
    dsm_status_t st = DSM_ERR_INVALID;
    if (h->dead != DSM_OK) {
        st = h->dead;
        goto out;
    }
    if (!handle_ok(h, dst) || type >= h->types->n)
        goto out;
    uint32_t size = h->types->t[type].size;
    uint64_t a;
    if ((st = use_trigger(h, size)) != DSM_OK)
        goto out;
    if ((st = bump(h, size, &a)) == DSM_ERR_NOMEM) {
        st = gc_collect(h, DSM_MHEAP_GC_AUTO);
        if (st == DSM_OK)
            st = bump(h, size, &a);
        if (st == DSM_ERR_NOMEM && mheap_regional(h)) {
            st = gc_collect(h, DSM_MHEAP_GC_FULL);
            if (st == DSM_OK)
                st = bump(h, size, &a);
        }
    }
    if (st != DSM_OK)
        goto out;
    /* Header and a zeroed payload: the page may hold a dead object's bytes. */
    uint8_t zero[512];
    memset(zero, 0, sizeof zero);
    uint64_t hdr = dsm_mheap_hdr_make(type, size);
    if ((st = cache_write(h, a, &hdr, 8)) != DSM_OK)
        goto out;
    for (uint32_t o = 8; o < size; o += (uint32_t)sizeof zero) {
        uint32_t n = size - o < sizeof zero ? size - o : (uint32_t)sizeof zero;
        if ((st = cache_write(h, a + o, zero, n)) != DSM_OK)
            goto out;
    }
    h->handle_addr[dst] = a;
    h->st.objects_allocated++;
    h->st.bytes_allocated += size;
out:
    api_leave(h);
    return st;
}

/* The object of handle x and its type (heap lock held). */
static dsm_status_t object(dsm_mheap_t *h, dsm_mheap_handle_t x, uint64_t *a, const dsm_mheap_tinfo_t **ti)
{
    if (h->dead != DSM_OK)
        return h->dead;
    if (!handle_ok(h, x) || h->handle_addr[x] == 0)
        return DSM_ERR_INVALID;
    *a = h->handle_addr[x];
    dsm_status_t st = mheap_object_type(h, *a, ti);
    if (st == DSM_ERR_BAD_ADDR)
        DSM_ERROR(LOG_MOD, "handle %u: no object at 0x%llx", x, (unsigned long long)*a);
    return st;
}

dsm_status_t dsm_mheap_type_of(dsm_mheap_t *h, dsm_mheap_handle_t obj, uint32_t *type)
{
    if (h == NULL || type == NULL)
        return DSM_ERR_INVALID;
    api_enter(h);
    uint64_t a;
    const dsm_mheap_tinfo_t *ti;
    dsm_status_t st = object(h, obj, &a, &ti);
    if (st == DSM_OK)
        *type = (uint32_t)(ti - h->types->t);
    api_leave(h);
    return st;
}

static int in_payload(const dsm_mheap_tinfo_t *ti, uint32_t off, size_t len)
{
    return (uint64_t)off + len <= ti->size - DSM_MHEAP_OBJ_HDR;
}

dsm_status_t dsm_mheap_read(dsm_mheap_t *h, dsm_mheap_handle_t obj, uint32_t off, void *dst, size_t len)
{
    if (h == NULL || (dst == NULL && len))
        return DSM_ERR_INVALID;
    api_enter(h);
    uint64_t a;
    const dsm_mheap_tinfo_t *ti;
    dsm_status_t st = object(h, obj, &a, &ti);
    if (st == DSM_OK)
        st = in_payload(ti, off, len) ? cache_read(h, a + DSM_MHEAP_OBJ_HDR + off, dst, len) : DSM_ERR_INVALID;
    api_leave(h);
    return st;
}

dsm_status_t dsm_mheap_write(dsm_mheap_t *h, dsm_mheap_handle_t obj, uint32_t off, const void *src, size_t len)
{
    if (h == NULL || (src == NULL && len))
        return DSM_ERR_INVALID;
    api_enter(h);
    uint64_t a;
    const dsm_mheap_tinfo_t *ti;
    dsm_status_t st = object(h, obj, &a, &ti);
    if (st == DSM_OK) {
        if (!in_payload(ti, off, len) || dsm_mheap_types_covers_ref(ti, off, (uint32_t)len))
            st = DSM_ERR_INVALID;   /* references change only through the barriers */
        else
            st = cache_write(h, a + DSM_MHEAP_OBJ_HDR + off, src, len);
    }
    api_leave(h);
    return st;
}

dsm_status_t dsm_mheap_load_ref(dsm_mheap_t *h, dsm_mheap_handle_t obj, uint32_t off, dsm_mheap_handle_t dst)
{
    if (h == NULL)
        return DSM_ERR_INVALID;
    api_enter(h);
    uint64_t a, v = 0;
    const dsm_mheap_tinfo_t *ti;
    dsm_status_t st = object(h, obj, &a, &ti);
    if (st == DSM_OK && (!handle_ok(h, dst) || !dsm_mheap_types_is_ref(ti, off)))
        st = DSM_ERR_INVALID;
    if (st == DSM_OK && (st = cache_load64(h, a + DSM_MHEAP_OBJ_HDR + off, &v)) == DSM_OK)
        h->handle_addr[dst] = v;
    api_leave(h);
    return st;
}

/* Is a the start of an object of this heap (CPU-side start map)? */
static int is_object(dsm_mheap_t *h, uint64_t a)
{
    region_t *r = region_of(h, a);
    if (r == NULL || !r->in_use || a % 8 != 0)
        return 0;
    uint64_t off = a - r->start;
    return off >= DSM_MHEAP_REGION_HDR && off < r->bp && bit_test(r->starts, off / 8);
}

/* A reference store with both barriers (heap lock held). */
static dsm_status_t store(dsm_mheap_t *h, dsm_mheap_handle_t obj, uint32_t off, uint64_t v)
{
    uint64_t a, old;
    const dsm_mheap_tinfo_t *ti;
    dsm_status_t st = object(h, obj, &a, &ti);
    if (st != DSM_OK)
        return st;
    if (!dsm_mheap_types_is_ref(ti, off))
        return DSM_ERR_INVALID;
    uint64_t slot = a + DSM_MHEAP_OBJ_HDR + off;
    if ((st = cache_load64(h, slot, &old)) != DSM_OK)
        return st;
    /* SATB pre-write barrier: every overwritten reference, whatever the
     * new value and wherever it points. */
    if (h->cfg.satb && old != 0 && (st = queue_satb(h, old)) != DSM_OK)
        return st;
    if ((st = cache_store64(h, slot, v)) != DSM_OK)
        return st;
    /* Post-write barrier: inter-region references only. */
    if (v != 0 && region_of(h, v) != region_of(h, slot))
        return queue_card(h, slot, v);
    return DSM_OK;
}

dsm_status_t dsm_mheap_store_ref(dsm_mheap_t *h, dsm_mheap_handle_t obj, uint32_t off, dsm_mheap_handle_t value)
{
    if (h == NULL)
        return DSM_ERR_INVALID;
    api_enter(h);
    dsm_status_t st = DSM_ERR_INVALID;
    if (value == 0 || handle_ok(h, value))
        st = store(h, obj, off, value ? h->handle_addr[value] : 0);
    api_leave(h);
    return st;
}

dsm_status_t dsm_mheap_store_addr(dsm_mheap_t *h, dsm_mheap_handle_t obj, uint32_t off, dsm_mheap_addr_t value)
{
    if (h == NULL)
        return DSM_ERR_INVALID;
    api_enter(h);
    dsm_status_t st;
    if (value != 0 && !is_object(h, value)) {
        DSM_WARN(LOG_MOD, "refused a store of 0x%llx: not an object of this heap", (unsigned long long)value);
        st = DSM_ERR_BAD_ADDR;
    } else {
        st = store(h, obj, off, value);
    }
    api_leave(h);
    return st;
}

/* ---- collections, eviction, walk, stats ---------------------------------------------- */

dsm_status_t dsm_mheap_collect(dsm_mheap_t *h, dsm_mheap_gc_t kind)
{
    if (h == NULL || (kind != DSM_MHEAP_GC_AUTO && kind != DSM_MHEAP_GC_CSSC && kind != DSM_MHEAP_GC_FULL))
        return DSM_ERR_INVALID;
    if (kind == DSM_MHEAP_GC_CSSC && !mheap_regional(h))
        return DSM_ERR_UNSUPPORTED;
    api_enter(h);
    dsm_status_t st = h->dead != DSM_OK ? h->dead : gc_collect(h, kind);
    api_leave(h);
    return st;
}

dsm_status_t dsm_mheap_trace_start(dsm_mheap_t *h)
{
    if (h == NULL)
        return DSM_ERR_INVALID;
    if (!mheap_regional(h))
        return DSM_ERR_UNSUPPORTED;
    api_enter(h);
    dsm_status_t st = h->dead != DSM_OK ? h->dead : msct_wait(h);
    if (st == DSM_OK)
        st = msct_start_locked(h);
    api_leave(h);
    return st;
}

dsm_status_t dsm_mheap_trace_cpu(dsm_mheap_t *h, uint64_t *live_bytes)
{
    if (h == NULL || live_bytes == NULL)
        return DSM_ERR_INVALID;
    api_enter(h);
    dsm_status_t st = h->dead != DSM_OK ? h->dead : gc_mark_only(h, live_bytes);
    api_leave(h);
    return st;
}

dsm_status_t dsm_mheap_trace_wait(dsm_mheap_t *h)
{
    if (h == NULL)
        return DSM_ERR_INVALID;
    return msct_wait(h);
}

dsm_status_t dsm_mheap_evict(dsm_mheap_t *h, dsm_mheap_handle_t obj)
{
    if (h == NULL)
        return DSM_ERR_INVALID;
    api_enter(h);
    dsm_status_t st = h->dead;
    if (st == DSM_OK && obj == 0) {
        for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++)
            st = cache_evict_region(h, &h->regions[i]);
    } else if (st == DSM_OK) {
        st = handle_ok(h, obj) && h->handle_addr[obj] ? cache_evict_page(h, h->handle_addr[obj]) : DSM_ERR_INVALID;
    }
    api_leave(h);
    return st;
}

dsm_status_t dsm_mheap_walk(dsm_mheap_t *h, dsm_mheap_walk_fn fn, void *ctx)
{
    if (h == NULL || fn == NULL)
        return DSM_ERR_INVALID;
    api_enter(h);
    dsm_status_t st = h->dead;
    uint8_t *buf = malloc(h->region_bytes);
    if (buf == NULL)
        st = DSM_ERR_NOMEM;
    for (uint32_t i = 0; i < h->nregions && st == DSM_OK; i++) {
        region_t *r = &h->regions[i];
        if (!r->in_use)
            continue;
        for (uint32_t off = DSM_MHEAP_REGION_HDR; off < r->bp && st == DSM_OK;) {
            uint64_t hdr;
            if ((st = cache_load64(h, r->start + off, &hdr)) != DSM_OK)
                break;
            uint32_t type = dsm_mheap_hdr_type(hdr), size = dsm_mheap_hdr_size(hdr);
            if (type >= h->types->n || size != h->types->t[type].size || size > r->bp - off) {
                DSM_ERROR(LOG_MOD, "region %u does not parse at offset %u", i, off);
                st = DSM_ERR_STATE;
                break;
            }
            if ((st = cache_read(h, r->start + off + DSM_MHEAP_OBJ_HDR, buf, size - DSM_MHEAP_OBJ_HDR)) != DSM_OK)
                break;
            fn(ctx, r->start + off, type, buf, size - DSM_MHEAP_OBJ_HDR);
            off += size;
        }
    }
    free(buf);
    api_leave(h);
    return st;
}

size_t dsm_mheap_pauses(dsm_mheap_t *h, uint64_t *out, size_t cap)
{
    if (h == NULL)
        return 0;
    api_enter(h);
    size_t n = h->pauses.n;
    for (size_t i = 0; out && i < n && i < cap; i++)
        out[i] = h->pauses.v[i];
    api_leave(h);
    return n;
}

void dsm_mheap_stats(dsm_mheap_t *h, dsm_mheap_stats_t *out)
{
    if (h == NULL || out == NULL)
        return;
    api_enter(h);
    /* Some counters are bumped outside the heap lock (the fabric's
     * handlers, the trace driver), atomically: every field is read so. */
    _Static_assert(sizeof *out % sizeof(uint64_t) == 0, "dsm_mheap_stats_t holds uint64_t fields only");
    const uint64_t *from = (const uint64_t *)(const void *)&h->st;
    uint64_t *to = (uint64_t *)(void *)out;
    for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
        to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
    out->used_bytes = mheap_used(h);
    out->regions_free = 0;
    for (uint32_t i = 0; i < h->nregions; i++)
        out->regions_free += !h->regions[i].in_use;
    out->cache_pages = h->ncached;
    out->cache_budget_pages = h->budget;
    api_leave(h);
}
