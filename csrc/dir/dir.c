/* dir's node glue and API: attach (state, handlers, the failure notice),
 * the requester's side of the protocol (read and write misses, drop), the
 * node's borrows of its copies, and the counters. */
#include "dsm/dir.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dir/ids.h"
#include "dir/internal.h"
#include "dir/msg.h"
#include "util/clock.h"
#include "util/log.h"

#define LOG_MOD "dir"
#define DEFAULT_BUDGET (64ull << 20)

static dir_node_t *lookup(dsm_node_t *node) { return node ? dsm_module_state(node, &dsm_dir_module) : NULL; }

uint32_t dir_self(dir_node_t *d) { return dsm_node_rank(d->node); }

static void dir_node_free(void *state)
{
    dir_node_t *d = state;
    if (d == NULL)
        return;
    dir_copies_free(d);
    dir_entries_free(d);
    pthread_mutex_destroy(&d->clock);
    pthread_cond_destroy(&d->cdone);
    pthread_mutex_destroy(&d->dlock);
    free(d);
}

dsm_status_t dsm_dir_attach(dsm_node_t *node)
{
    if (node == NULL)
        return DSM_ERR_INVALID;
    if (dsm_node_fabric(node) == NULL)
        return DSM_ERR_STATE;
    dir_node_t *d = calloc(1, sizeof *d);
    if (d == NULL)
        return DSM_ERR_NOMEM;
    d->node = node;
    d->fabric = dsm_node_fabric(node);
    d->budget = DEFAULT_BUDGET;
    pthread_mutex_init(&d->clock, NULL);
    pthread_cond_init(&d->cdone, NULL);
    pthread_mutex_init(&d->dlock, NULL);
    dsm_status_t st = dsm_node_add_module(node, &dsm_dir_module, d);
    if (st != DSM_OK) {
        DSM_ERROR(LOG_MOD, "cannot attach dir: %s", dsm_strerror(st));
        dir_node_free(d);
        return st;
    }
    /* a home waiting for a dead node's answer stops waiting */
    dsm_node_on_peer_dead(node, dir_on_peer_dead, d);
    return DSM_OK;
}

static dsm_status_t attach(dsm_node_t *node, void *arg)
{
    (void)arg;
    return dsm_dir_attach(node);
}

static const dsm_am_handler_t handlers[DSM_DIR_AM_COUNT] = {
    [DSM_DIR_AM_HOME] = dir_on_home,
    [DSM_DIR_AM_CACHE] = dir_on_cache,
};
dsm_module_t dsm_dir_module = {
    .name = "dir",
    .am_count = DSM_DIR_AM_COUNT,
    .handlers = handlers,
    .attach = attach,
    .detach = dir_node_free,
};

dsm_status_t dsm_dir_set_cache_budget(dsm_node_t *node, uint64_t bytes)
{
    dir_node_t *d = lookup(node);
    if (d == NULL)
        return DSM_ERR_STATE;
    pthread_mutex_lock(&d->clock);
    d->budget = bytes;
    dir_copy_evict(d, bytes);
    pthread_mutex_unlock(&d->clock);
    return DSM_OK;
}

/* ---- messages --------------------------------------------------------------- */

dsm_status_t dir_request(dir_node_t *d, uint32_t rank, uint16_t handler, const dir_msg_t *req, size_t cap,
                         dir_msg_t *rep, uint8_t **buf)
{
    uint8_t out[DIR_MSG_FIXED_MAX];
    size_t n = dir_msg_encode(req, out);
    *buf = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        uint8_t *in = malloc(cap ? cap : 1);
        if (in == NULL)
            return DSM_ERR_NOMEM;
        size_t got = 0;
        /* A home serialises its transactions, each waiting for its
         * sharers' answers: under load one can take longer than the
         * fabric's operation timeout. */
        dsm_status_t st = dsm_fabric_am_request(d->fabric, rank, handler, out, n, in, cap, &got,
                                                handler == DSM_AM_DIR_HOME ? DIR_TIMEOUT_MS : 0);
        dir_count_round_trip(d, n, got, cap);
        if (st == DSM_ERR_TOO_BIG && attempt == 0 && got > cap && got <= DIR_MSG_HEADER_LEN + 12 + DIR_MAX_OBJECT) {
            free(in);
            cap = got;
            continue;
        }
        if (st == DSM_OK && (dir_msg_decode(in, got, rep) != DSM_OK || rep->addr != req->addr)) {
            DSM_WARN(LOG_MOD, "malformed reply from rank %u", rank);
            st = DSM_ERR_PROTO;
        }
        if (st != DSM_OK) {
            free(in);
            return st;
        }
        *buf = in;
        return DSM_OK;
    }
    return DSM_ERR_PROTO;
}

/* Ask the object's home, a peer, for a read or a write: it answers with
 * the object when the transaction is done (queued behind others on the
 * object, if need be). */
static dsm_status_t ask_home(dir_node_t *d, int op, uint64_t addr, dir_msg_t *rep, uint8_t **buf)
{
    dir_msg_t req = {.type = (uint16_t)op, .addr = addr};
    dsm_status_t st = dir_request(d, dsm_gaddr_node(addr), DSM_AM_DIR_HOME, &req, 4096, rep, buf);
    if (st == DSM_OK && rep->type == DIR_MSG_DATA_AFTER)
        dir_count(d, DC_CHAINED, 1);
    if (st == DSM_OK && !dir_msg_has_object(rep->type)) {
        free(*buf);
        *buf = NULL;
        st = DSM_ERR_PROTO;
    }
    return st;
}

static dsm_status_t check_handle(dsm_dir_obj_t obj)
{
    if (dsm_gaddr_strip(obj) != obj || dsm_gaddr_offset(obj) == 0) {
        DSM_WARN(LOG_MOD, "0x%llx is not an object address", (unsigned long long)obj);
        return DSM_ERR_BAD_ADDR;
    }
    return DSM_OK;
}

/* ---- API ----------------------------------------------------------------------- */

dsm_status_t dsm_dir_alloc(dsm_node_t *node, uint32_t type, size_t size, dsm_dir_obj_t *out)
{
    dir_node_t *d = lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    *out = 0;
    if (d == NULL)
        return DSM_ERR_STATE;
    if (type == 0 || (uint64_t)size > DIR_MAX_OBJECT - DIR_OBJ_HEADER) {
        DSM_WARN(LOG_MOD, "alloc of type %u, %zu bytes refused", type, size);
        return DSM_ERR_INVALID;
    }
    dsm_gaddr_t a;
    dsm_status_t st = dsm_alloc(node, dir_self(d), DIR_OBJ_HEADER + size, &a);
    if (st != DSM_OK)
        return st;
    uint8_t *p = dsm_local_ptr(node, a);
    if (p == NULL) {
        (void)dsm_free(node, a);
        return DSM_ERR_STATE;
    }
    /* the home reads the object under dlock when a request comes: written
     * under it, it is published to the handler whatever carried the handle */
    pthread_mutex_lock(&d->dlock);
    memset(p + DIR_OBJ_HEADER, 0, size);
    dir_obj_header_encode(type, size, p);
    pthread_mutex_unlock(&d->dlock);
    /* a directory object is named without the heap's generation tag: the
     * home's directory, not the address, says whether it is live */
    *out = dsm_gaddr_strip(a);
    return DSM_OK;
}

/* Under clock: wait while a request for addr is in flight, or a stale
 * copy serves the borrows it was fetched for (it goes when they end). */
static dir_copy_t *settled(dir_node_t *d, uint64_t addr)
{
    dir_copy_t *c;
    while ((c = dir_copy_find(d, addr)) != NULL && (c->pending || c->stale))
        pthread_cond_wait(&d->cdone, &d->clock);
    return c;
}

static void fill(const dir_copy_t *c, dsm_dir_obj_t obj, const void **data, size_t *size, uint32_t *type)
{
    const uint8_t *p = c->data;
    uint32_t t = 0;
    memcpy(&t, p + 4, 4);
    *type = t;
    *size = c->len - DIR_OBJ_HEADER;
    *data = p + DIR_OBJ_HEADER;
    (void)obj;
}

/* Take the reply's object into the pending copy c (under clock). */
static dsm_status_t install(dir_node_t *d, dir_copy_t *c, const dir_msg_t *rep)
{
    uint32_t type;
    uint64_t size;
    if (dir_obj_header_decode(rep->data, rep->len, rep->len, &type, &size) != DSM_OK ||
        size + DIR_OBJ_HEADER != rep->len)
        return DSM_ERR_PROTO;
    uint8_t *copy = malloc(rep->len);
    if (copy == NULL)
        return DSM_ERR_NOMEM;
    memcpy(copy, rep->data, rep->len);
    if (c->data)
        d->cbytes -= c->len;
    free(c->data);
    c->data = copy;
    c->len = rep->len;
    d->cbytes += c->len;
    return DSM_OK;
}

static dsm_status_t borrow(dir_node_t *d, dsm_dir_obj_t obj, int write, const void **data, size_t *size,
                           uint32_t *type, uint32_t *flag)
{
    dsm_status_t st = check_handle(obj);
    if (st != DSM_OK)
        return st;
    int home = dsm_gaddr_node(obj) == dir_self(d);
    /* A copy cached here must not outlive its home (own does the same). */
    if (!home && dsm_fabric_peer_state(d->fabric, dsm_gaddr_node(obj)) == DSM_ERR_PEER_DEAD)
        return DSM_ERR_PEER_DEAD;
    pthread_mutex_lock(&d->clock);
    dir_copy_t *c = settled(d, obj);
    if (c && (c->writer || (write && c->readers))) {
        pthread_mutex_unlock(&d->clock);
        DSM_WARN(LOG_MOD, "%s of 0x%llx refused: it is %s on this node", write ? "borrow_mut" : "borrow",
                 (unsigned long long)obj, c->writer ? "mutably borrowed" : "borrowed");
        return DSM_ERR_STATE;
    }
    if (c && (write ? c->state == DIR_M : 1)) {
        if (write)
            c->writer = 1;
        else
            c->readers++;
        dir_count(d, home ? DC_LOCAL : DC_HITS, 1);
        fill(c, obj, data, size, type);
        *flag = write ? 0 : !home;
        pthread_mutex_unlock(&d->clock);
        return DSM_OK;
    }
    if (home) {
        pthread_mutex_unlock(&d->clock);
        st = dir_home_local(d, write ? DIR_MSG_WRITE : DIR_MSG_READ, obj);
        if (st != DSM_OK)
            return st;
        pthread_mutex_lock(&d->clock);
        c = dir_copy_find(d, obj);
        fill(c, obj, data, size, type);
        *flag = 0;
        dir_count(d, DC_LOCAL, 1);
        pthread_mutex_unlock(&d->clock);
        return DSM_OK;
    }
    if (c == NULL && (c = dir_copy_insert(d, obj)) == NULL) {
        pthread_mutex_unlock(&d->clock);
        return DSM_ERR_NOMEM;
    }
    c->pending = 1;
    pthread_mutex_unlock(&d->clock);
    dir_msg_t rep;
    uint8_t *buf = NULL;
    st = ask_home(d, write ? DIR_MSG_WRITE : DIR_MSG_READ, obj, &rep, &buf);
    pthread_mutex_lock(&d->clock);
    c->pending = 0;
    dir_answer_t owed = {0};
    if (st == DSM_OK)
        st = install(d, c, &rep);
    if (st != DSM_OK) {
        /* a recall held back for the grant finds no copy */
        if (c->owed)
            owed = (dir_answer_t){.addr = obj, .type = DIR_MSG_ACK};
        dir_copy_remove(d, c);
    } else {
        if (write)
            c->stale = 0;   /* the grant is the newest data: every INV before it was answered */
        c->state = write ? DIR_M : DIR_S;
        if (write)
            c->writer = 1;
        else
            c->readers = 1;
        dir_count(d, DC_MISSES, 1);
        fill(c, obj, data, size, type);
        *flag = 1;
        if (d->cbytes > d->budget)
            dir_copy_evict(d, d->budget);
    }
    pthread_cond_broadcast(&d->cdone);
    pthread_mutex_unlock(&d->clock);
    dir_answer_send(d, &owed);
    free(buf);
    return st;
}

dsm_status_t dsm_dir_borrow(dsm_node_t *node, dsm_dir_obj_t obj, dsm_dir_ref_t *out)
{
    dir_node_t *d = lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    memset(out, 0, sizeof *out);
    if (d == NULL)
        return DSM_ERR_STATE;
    dsm_status_t st = borrow(d, obj, 0, &out->data, &out->size, &out->type, &out->cached);
    if (st == DSM_OK)
        out->obj = obj;
    else
        out->data = NULL;
    return st;
}

dsm_status_t dsm_dir_borrow_mut(dsm_node_t *node, dsm_dir_obj_t obj, dsm_dir_mut_t *out)
{
    dir_node_t *d = lookup(node);
    if (out == NULL)
        return DSM_ERR_INVALID;
    memset(out, 0, sizeof *out);
    if (d == NULL)
        return DSM_ERR_STATE;
    const void *data = NULL;
    dsm_status_t st = borrow(d, obj, 1, &data, &out->size, &out->type, &out->moved);
    if (st == DSM_OK) {
        out->obj = obj;
        out->data = (void *)(uintptr_t)data;
    }
    return st;
}

static dsm_status_t end_borrow(dir_node_t *d, dsm_dir_obj_t obj, int write)
{
    pthread_mutex_lock(&d->clock);
    dir_copy_t *c = dir_copy_find(d, obj);
    dsm_status_t st = DSM_OK;
    dir_answer_t owed = {0};
    if (c == NULL || (write ? !c->writer : c->readers <= 0)) {
        st = DSM_ERR_STATE;
    } else {
        if (write)
            c->writer = 0;
        else
            c->readers--;
        /* the home's INV or RECALL this borrow held back goes now */
        (void)dir_copy_settle(d, c, &owed);
        pthread_cond_broadcast(&d->cdone);   /* a stale copy may be gone */
    }
    pthread_mutex_unlock(&d->clock);
    dir_answer_send(d, &owed);
    if (st != DSM_OK)
        DSM_WARN(LOG_MOD, "release of a borrow of 0x%llx that is not live", (unsigned long long)obj);
    return st;
}

/* End a borrow (`live`: its view was not released yet); the caller clears
 * the view, so a second release is refused. */
static dsm_status_t release_view(dsm_node_t *node, dsm_dir_obj_t obj, int live, int mut)
{
    dir_node_t *d = lookup(node);
    if (d == NULL || !live)
        return DSM_ERR_STATE;
    return end_borrow(d, obj, mut);
}

dsm_status_t dsm_dir_release(dsm_node_t *node, dsm_dir_ref_t *ref)
{
    if (ref == NULL)
        return DSM_ERR_INVALID;
    dsm_status_t st = release_view(node, ref->obj, ref->data != NULL, 0);
    ref->data = NULL;
    return st;
}

dsm_status_t dsm_dir_release_mut(dsm_node_t *node, dsm_dir_mut_t *mut)
{
    if (mut == NULL)
        return DSM_ERR_INVALID;
    dsm_status_t st = release_view(node, mut->obj, mut->data != NULL, 1);
    mut->data = NULL;
    return st;
}

dsm_status_t dsm_dir_drop(dsm_node_t *node, dsm_dir_obj_t obj)
{
    dir_node_t *d = lookup(node);
    if (d == NULL)
        return DSM_ERR_STATE;
    dsm_status_t st = check_handle(obj);
    if (st != DSM_OK)
        return st;
    int home = dsm_gaddr_node(obj) == dir_self(d);
    /* A copy cached here must not outlive its home (own does the same). */
    if (!home && dsm_fabric_peer_state(d->fabric, dsm_gaddr_node(obj)) == DSM_ERR_PEER_DEAD)
        return DSM_ERR_PEER_DEAD;
    pthread_mutex_lock(&d->clock);
    dir_copy_t *c = settled(d, obj);
    if (c && (c->readers || c->writer)) {
        pthread_mutex_unlock(&d->clock);
        DSM_WARN(LOG_MOD, "drop of 0x%llx refused: it is borrowed on this node", (unsigned long long)obj);
        return DSM_ERR_STATE;
    }
    /* The home's own view goes in the drop transaction itself. */
    if (c && !home)
        dir_copy_remove(d, c);
    pthread_mutex_unlock(&d->clock);
    if (home)
        return dir_home_local(d, DIR_MSG_DROP, obj);
    /* Elsewhere the drop is posted, as GAM's free is: the dropper does
     * not wait for the home's transaction (its invalidations and the
     * free), and a failure there is the home's to report. */
    dir_msg_t req = {.type = DIR_MSG_DROP, .addr = obj};
    uint8_t out[DIR_MSG_FIXED_MAX];
    size_t n = dir_msg_encode(&req, out);
    st = dsm_fabric_am_post(d->fabric, dsm_gaddr_node(obj), DSM_AM_DIR_HOME, out, n);
    if (st == DSM_OK) {
        dir_count(d, DC_MESSAGES, 1);
        dir_count(d, DC_BYTES, n);
    }
    return st;
}

void dsm_dir_stats(dsm_node_t *node, dsm_dir_stats_t *out)
{
    memset(out, 0, sizeof *out);
    dir_node_t *d = lookup(node);
    if (d == NULL)
        return;
    uint64_t v[DC_COUNT];
    for (int i = 0; i < DC_COUNT; i++)
        v[i] = __atomic_load_n(&d->c[i], __ATOMIC_RELAXED);
    out->messages = v[DC_MESSAGES];
    out->bytes = v[DC_BYTES];
    out->cache_hits = v[DC_HITS];
    out->cache_misses = v[DC_MISSES];
    out->local_reads = v[DC_LOCAL];
    out->moves = v[DC_MOVES];
    out->invalidations = v[DC_INVALIDATIONS];
    out->frees_served = v[DC_FREES];
    out->home_deferred = v[DC_DEFERRED];
    out->held_back = v[DC_HELD_BACK];
    out->chained_round_trips = v[DC_CHAINED];
    pthread_mutex_lock(&d->clock);
    out->evictions = d->evictions;
    out->cache_entries = d->centries;
    out->cache_bytes = d->cbytes;
    pthread_mutex_unlock(&d->clock);
}
