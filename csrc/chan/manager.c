/* chan's manager: the module (its arena, published at join and mapped from
 * every peer), endpoints by name, the JOIN / CONNECT / LEAVE exchange, joins
 * kept for channels a node does not have yet, readiness and teardown.
 *
 * Joins carry the sender's region descriptors, so whichever side comes
 * second learns the first's regions: a node that has the channel answers
 * a join with CONNECT (its own descriptors); one that has not keeps the
 * join (bounded in number and time) and applies it when its endpoint
 * joins, then sends its own join, which the first answers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan/ids.h"
#include "chan/internal.h"
#include "util/bytes.h"
#include "util/log.h"

#define PUBLISH_KEY "chan.arena"

chan_mgr_t *chan_mgr(dsm_node_t *node)
{
    return node ? dsm_module_state(node, &dsm_chan_module) : NULL;
}

uint32_t chan_op_timeout(const dsm_chan_t *c)
{
    uint32_t ms = dsm_node_config(c->m->node)->op_timeout_ms;
    return ms ? ms : 5000;
}

static const char *kind_name(uint32_t kind)
{
    static const char *const names[] = {"?", "plain channel", "atomic_var", "owned_var", "shared_region",
                                        "sst", "barrier", "ticket_lock", "ringbuffer", "shared_queue", "kvstore"};
    return kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

static dsm_chan_t *find(chan_mgr_t *m, const char *name)
{
    for (dsm_chan_t *c = m->chans; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

static int peer_index(const dsm_chan_t *c, uint32_t rank)
{
    for (uint32_t i = 0; i < c->npeers; i++)
        if (c->peers[i].rank == rank)
            return (int)i;
    return -1;
}

/* ---- kept joins ----------------------------------------------------------- */

static void expire(chan_mgr_t *m)
{
    uint64_t now = dsm_now_ns();
    uint32_t j = 0;
    for (uint32_t i = 0; i < m->nkept; i++) {
        chan_kept_t *k = &m->kept[i];
        if (now - k->at_ns > (uint64_t)m->keep_ms * 1000000u) {
            DSM_WARN(LOG_MOD, "join from rank %u for channel '%s' dropped: no endpoint of that name here within %u ms",
                     k->src, k->msg.name, m->keep_ms);
            m->stats.joins_expired++;
            continue;
        }
        if (j != i)
            m->kept[j] = *k;
        j++;
    }
    m->nkept = j;
}

static void keep(chan_mgr_t *m, uint32_t src, const chan_msg_t *msg)
{
    uint32_t i = 0;
    while (i < m->nkept && !(m->kept[i].src == src && strcmp(m->kept[i].msg.name, msg->name) == 0)) i++;
    if (i == m->nkept) {
        if (m->nkept == CHAN_MAX_KEPT) {
            DSM_WARN(LOG_MOD, "join from rank %u for channel '%s' dropped: %u joins kept already",
                     m->kept[0].src, m->kept[0].msg.name, (unsigned)CHAN_MAX_KEPT);
            m->stats.joins_expired++;
            memmove(&m->kept[0], &m->kept[1], (CHAN_MAX_KEPT - 1) * sizeof m->kept[0]);
            i = --m->nkept;
        }
        m->nkept++;
        m->stats.joins_kept++;
    }
    m->kept[i] = (chan_kept_t){.src = src, .at_ns = dsm_now_ns(), .msg = *msg};
}

/* ---- accepting a peer's descriptors -------------------------------------- */

static void refuse(dsm_chan_t *c, chan_peer_t *p, dsm_status_t st, const char *fmt, ...) DSM_PRINTF(4, 5);
static void refuse(dsm_chan_t *c, chan_peer_t *p, dsm_status_t st, const char *fmt, ...)
{
    if (p && p->error == DSM_OK)
        p->error = st;
    if (c->why[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, sizeof c->why, fmt, ap);
        va_end(ap);
    }
    c->m->stats.refused++;
}

/* A shape as "name value, name value" into buf (names: c's, "?" past them). */
static void shape_text(const dsm_chan_t *c, const uint64_t *values, uint32_t n, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n && at < cap; i++) {
        int k = snprintf(buf + at, cap - at, "%s%s %llu", i ? ", " : "", i < c->nshape ? c->shape_names[i] : "?",
                         (unsigned long long)values[i]);
        if (k < 0)
            break;
        at += (size_t)k;
    }
    if (n == 0)
        snprintf(buf, cap, "no arguments");
}

/* Whether rank src's endpoint, as msg describes it, is ours: DSM_OK, or
 * the refusal (recorded against p, may be NULL, with both sides named).
 * Under m->lock. */
static dsm_status_t compare(dsm_chan_t *c, chan_peer_t *p, uint32_t src, const chan_msg_t *msg)
{
    if (msg->kind != c->kind) {
        refuse(c, p, DSM_ERR_EXISTS, "channel '%s': name collision: a %s here, a %s at rank %u", c->name,
               kind_name(c->kind), kind_name(msg->kind), src);
        return DSM_ERR_EXISTS;
    }
    int same = msg->nshape == c->nshape;
    for (uint32_t i = 0; same && i < c->nshape; i++) same = msg->shape[i] == c->shape[i];
    if (!same) {
        char mine[160], theirs[160];
        shape_text(c, c->shape, c->nshape, mine, sizeof mine);
        shape_text(c, msg->shape, msg->nshape, theirs, sizeof theirs);
        refuse(c, p, DSM_ERR_INVALID, "%s '%s': its shape differs: %s here; %s at rank %u", kind_name(c->kind),
               c->name, mine, theirs, src);
        return DSM_ERR_INVALID;
    }
    if (msg->nregions != c->nregions) {
        refuse(c, p, DSM_ERR_INVALID, "channel '%s': %u regions here, %u at rank %u", c->name, c->nregions,
               msg->nregions, src);
        return DSM_ERR_INVALID;
    }
    for (uint32_t r = 0; r < c->nregions; r++) {
        const chan_wire_region_t *mine = &c->regions[r], *theirs = &msg->regions[r];
        if (strcmp(mine->name, theirs->name) != 0 || mine->size != theirs->size) {
            refuse(c, p, DSM_ERR_INVALID, "channel '%s': region %u is '%s' of %llu bytes here, '%s' of %llu at rank %u",
                   c->name, r, mine->name, (unsigned long long)mine->size, theirs->name,
                   (unsigned long long)theirs->size, src);
            return DSM_ERR_INVALID;
        }
    }
    return DSM_OK;
}

/* Check rank src's descriptors against ours and record them; under
 * m->lock. *fresh: 1 if the peer was not connected before (its callback is
 * due once, however many ways its descriptors came). */
static dsm_status_t accept(dsm_chan_t *c, uint32_t src, const chan_msg_t *msg, int *fresh)
{
    *fresh = 0;
    int i = peer_index(c, src);
    if (i < 0) {
        refuse(c, NULL, DSM_ERR_NO_PEER, "channel '%s': rank %u joined but is not a participant", c->name, src);
        return DSM_ERR_NO_PEER;
    }
    chan_peer_t *p = &c->peers[i];
    dsm_status_t st = compare(c, p, src, msg);
    if (st != DSM_OK)
        return st;
    for (uint32_t r = 0; r < c->nregions; r++) p->off[r] = msg->regions[r].offset;
    *fresh = !p->connected;
    __atomic_store_n(&p->connected, 1, __ATOMIC_RELEASE);
    return DSM_OK;
}

static void describe(const dsm_chan_t *c, uint16_t type, chan_msg_t *out)
{
    memset(out, 0, sizeof *out);
    out->type = type;
    out->kind = c->kind;
    memcpy(out->name, c->name, sizeof out->name);
    out->nregions = (uint8_t)c->nregions;
    memcpy(out->regions, c->regions, sizeof c->regions);
    out->nshape = (uint8_t)c->nshape;
    memcpy(out->shape, c->shape, sizeof c->shape);
}

/* ---- handlers ------------------------------------------------------------- */

static void on_join(void *ctx, const dsm_am_msg_t *am)
{
    chan_mgr_t *m = ctx;
    chan_msg_t in, out;
    uint8_t buf[CHAN_MSG_MAX_LEN];
    size_t n = 0;
    dsm_status_t st = chan_msg_decode(am->data, am->len, &in);
    dsm_chan_connect_cb_t cb = NULL;
    void *cb_ctx = NULL;
    dsm_chan_t *c = NULL;
    int fresh = 0;
    if (st != DSM_OK || in.type != CHAN_MSG_JOIN) {
        DSM_WARN(LOG_MOD, "malformed join from rank %u refused", am->src_rank);
        st = DSM_ERR_PROTO;
    } else {
        pthread_mutex_lock(&m->lock);
        m->stats.joins_received++;
        expire(m);
        c = find(m, in.name);
        if (c == NULL || c->state != CHAN_JOINED) {
            keep(m, am->src_rank, &in);
            st = DSM_ERR_NO_HANDLER;   /* "not here yet": kept, answered by our own join */
        } else {
            st = accept(c, am->src_rank, &in, &fresh);
            /* a refusal carries our descriptors too: the joiner names both sides */
            describe(c, CHAN_MSG_CONNECT, &out);
            n = chan_msg_encode(&out, buf);
            cb = st == DSM_OK && fresh ? c->cb : NULL;
            cb_ctx = c->cb_ctx;
        }
        pthread_mutex_unlock(&m->lock);
    }
    if (cb)
        cb(cb_ctx, c, am->src_rank);
    if (am->request_id)
        (void)dsm_fabric_am_reply(m->fabric, am->src_rank, am->request_id, st, buf, n);
}

static void on_leave(void *ctx, const dsm_am_msg_t *am)
{
    chan_mgr_t *m = ctx;
    chan_msg_t in;
    if (chan_msg_decode(am->data, am->len, &in) != DSM_OK || in.type != CHAN_MSG_LEAVE) {
        DSM_WARN(LOG_MOD, "malformed leave from rank %u dropped", am->src_rank);
        if (am->request_id)
            (void)dsm_fabric_am_reply(m->fabric, am->src_rank, am->request_id, DSM_ERR_PROTO, NULL, 0);
        return;
    }
    pthread_mutex_lock(&m->lock);
    m->stats.leaves++;
    dsm_chan_t *c = find(m, in.name);
    int i = c ? peer_index(c, am->src_rank) : -1;
    if (i >= 0)
        __atomic_store_n(&c->peers[i].connected, 0, __ATOMIC_RELEASE);
    for (uint32_t k = 0; k < m->nkept; k++)
        if (m->kept[k].src == am->src_rank && strcmp(m->kept[k].msg.name, in.name) == 0) {
            m->kept[k] = m->kept[--m->nkept];
            break;
        }
    pthread_mutex_unlock(&m->lock);
    if (am->request_id)
        (void)dsm_fabric_am_reply(m->fabric, am->src_rank, am->request_id, DSM_OK, NULL, 0);
}

/* ---- attach ---------------------------------------------------------------- */

static void mgr_free(void *state)
{
    chan_mgr_t *m = state;
    if (m->chans)
        DSM_WARN(LOG_MOD, "node destroyed with channel '%s' (and maybe more) not destroyed", m->chans->name);
    if (m->region)
        dsm_fabric_region_unregister(m->region);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* The arena's bytes from CHAN_ARENA_ENV, or the default; 0 if it is set
 * to something that is not a size (said in the log). */
static uint64_t arena_bytes(void)
{
    const char *env = getenv(CHAN_ARENA_ENV);
    if (env == NULL || *env == 0)
        return (uint64_t)CHAN_ARENA_DEFAULT_MB << 20;
    char *end;
    unsigned long long mb = strtoull(env, &end, 10);
    if (*end != 0 || mb < 1 || mb > CHAN_ARENA_MAX_MB) {
        DSM_ERROR(LOG_MOD, "%s='%s': the channel arena's size in MiB is 1..%u", CHAN_ARENA_ENV, env,
                  (unsigned)CHAN_ARENA_MAX_MB);
        return 0;
    }
    return (uint64_t)mb << 20;
}

static dsm_status_t attach(dsm_node_t *node, void *arg)
{
    (void)arg;
    dsm_fabric_t *f = dsm_node_fabric(node);
    if (f == NULL)
        return DSM_ERR_STATE;
    uint64_t size = arena_bytes();
    if (size == 0)
        return DSM_ERR_INVALID;
    chan_mgr_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return DSM_ERR_NOMEM;
    m->node = node;
    m->fabric = f;
    pthread_mutex_init(&m->lock, NULL);
    uint32_t jt = dsm_node_config(node)->join_timeout_ms;
    m->keep_ms = jt ? jt : 10000;
    dsm_status_t st = dsm_node_add_module(node, &dsm_chan_module, m);
    if (st != DSM_OK) {
        pthread_mutex_destroy(&m->lock);
        free(m);
        return st;
    }
    if ((st = dsm_fabric_region_alloc(f, size, &m->region)) != DSM_OK) {
        DSM_ERROR(LOG_MOD, "no %llu-byte channel arena (%s): %s", (unsigned long long)size, CHAN_ARENA_ENV,
                  dsm_strerror(st));
        return st;
    }
    m->base = dsm_fabric_region_base(m->region);
    chan_arena_init(&m->arena, size);
    m->offer = (dsm_region_offer_t){.key = PUBLISH_KEY, .region_id = DSM_CHAN_REGION};
    return dsm_node_offer_region(node, &m->offer, m->region);
}

static const dsm_am_handler_t handlers[DSM_CHAN_AM_COUNT] = {
    [DSM_CHAN_AM_JOIN] = on_join,
    [DSM_CHAN_AM_LEAVE] = on_leave,
};
static const char *const keys[] = {PUBLISH_KEY, NULL};
dsm_module_t dsm_chan_module = {
    .name = "chan",
    .am_count = DSM_CHAN_AM_COUNT,
    .handlers = handlers,
    .keys = keys,
    .attach = attach,
    .detach = mgr_free,
};

/* ---- endpoints ------------------------------------------------------------- */

static int path_ok(const char *name)
{
    size_t n = strlen(name);
    if (!chan_name_ok(name, n, DSM_CHAN_NAME_MAX) || name[0] == '/' || name[n - 1] == '/' || strstr(name, "//"))
        return 0;
    return 1;
}

static dsm_status_t create(dsm_node_t *node, dsm_chan_t *parent, const char *name, dsm_chan_kind_t kind,
                           dsm_chan_t **out)
{
    chan_mgr_t *m = chan_mgr(node);
    if (m == NULL)
        return DSM_ERR_STATE;
    if (name == NULL || out == NULL || !path_ok(name) || kind < DSM_CHAN_PLAIN || kind > DSM_CHAN_KVSTORE)
        return DSM_ERR_INVALID;
    dsm_chan_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return DSM_ERR_NOMEM;
    c->m = m;
    c->kind = kind;
    c->parent = parent;
    snprintf(c->name, sizeof c->name, "%s", name);
    uint32_t self = dsm_node_rank(node), group[DSM_CHAN_MAX_PEERS], ngroup;
    if (parent) {
        c->npeers = parent->npeers;
        for (uint32_t i = 0; i < c->npeers; i++) c->peers[i] = (chan_peer_t){.rank = parent->peers[i].rank};
    } else if ((ngroup = chan_group_ranks(m, name, group)) > 0) {
        for (uint32_t i = 0; i < ngroup; i++) c->peers[c->npeers++].rank = group[i];
    } else {
        uint32_t ranks[DSM_MAX_RANKS];
        uint32_t n = dsm_node_daemons(node, ranks, DSM_MAX_RANKS);
        if (n > DSM_CHAN_MAX_PEERS)
            n = DSM_CHAN_MAX_PEERS;
        int mine = 0;
        for (uint32_t i = 0; i < n; i++) {
            c->peers[c->npeers++].rank = ranks[i];
            mine |= ranks[i] == self;
        }
        if (!mine && c->npeers < DSM_CHAN_MAX_PEERS) {   /* a client: itself too, in rank order */
            uint32_t i = c->npeers++;
            while (i > 0 && c->peers[i - 1].rank > self) {
                c->peers[i] = c->peers[i - 1];
                i--;
            }
            c->peers[i] = (chan_peer_t){.rank = self};
        }
    }
    c->self = (uint32_t)peer_index(c, self);
    c->expect = c->npeers - 1;
    pthread_mutex_lock(&m->lock);
    dsm_status_t st = DSM_OK;
    if (find(m, c->name)) {
        st = DSM_ERR_EXISTS;
        DSM_ERROR(LOG_MOD, "channel '%s' exists on this node already", c->name);
    } else {
        c->next = m->chans;
        m->chans = c;
        if (parent)
            parent->children++;
    }
    pthread_mutex_unlock(&m->lock);
    if (st != DSM_OK) {
        free(c);
        return st;
    }
    *out = c;
    return DSM_OK;
}

dsm_status_t dsm_chan_create(dsm_node_t *node, const char *name, dsm_chan_kind_t kind, dsm_chan_t **out)
{
    return create(node, NULL, name, kind, out);
}

dsm_status_t dsm_chan_sub(dsm_chan_t *parent, const char *leaf, dsm_chan_kind_t kind, dsm_chan_t **out)
{
    if (parent == NULL || leaf == NULL || strchr(leaf, '/'))
        return DSM_ERR_INVALID;
    char name[DSM_CHAN_NAME_MAX + 2];
    int n = snprintf(name, sizeof name, "%s/%s", parent->name, leaf);
    if (n < 0 || n > DSM_CHAN_NAME_MAX)
        return DSM_ERR_INVALID;
    return create(parent->m->node, parent, name, kind, out);
}

dsm_status_t dsm_chan_set_peers(dsm_chan_t *c, const uint32_t *ranks, uint32_t n)
{
    if (c == NULL || c->state != CHAN_NEW || n == 0 || n > DSM_CHAN_MAX_PEERS || ranks == NULL)
        return c && c->state != CHAN_NEW ? DSM_ERR_STATE : DSM_ERR_INVALID;
    chan_peer_t peers[DSM_CHAN_MAX_PEERS];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;   /* insertion sort: rank order, no repeats */
        while (j > 0 && peers[j - 1].rank > ranks[i]) {
            peers[j] = peers[j - 1];
            j--;
        }
        if (j > 0 && peers[j - 1].rank == ranks[i])
            return DSM_ERR_INVALID;
        peers[j] = (chan_peer_t){.rank = ranks[i]};
    }
    memcpy(c->peers, peers, n * sizeof peers[0]);
    c->npeers = n;
    int self = peer_index(c, dsm_node_rank(c->m->node));
    if (self < 0)
        return DSM_ERR_INVALID;
    c->self = (uint32_t)self;
    c->expect = n - 1;
    return DSM_OK;
}

dsm_status_t dsm_chan_expect_num(dsm_chan_t *c, uint32_t n)
{
    if (c == NULL || n >= c->npeers)
        return DSM_ERR_INVALID;
    if (c->state != CHAN_NEW)
        return DSM_ERR_STATE;
    c->expect = n;
    return DSM_OK;
}

dsm_status_t dsm_chan_add_region(dsm_chan_t *c, const char *name, size_t size, uint32_t *index)
{
    if (c == NULL || name == NULL || size == 0 || !chan_name_ok(name, strlen(name), DSM_CHAN_REGION_NAME_MAX))
        return DSM_ERR_INVALID;
    if (size > c->m->arena.size) {
        DSM_ERROR(LOG_MOD, "channel '%s': region '%s' (%zu bytes) is larger than the %llu-byte arena (%s sets it)",
                  c->name, name, size, (unsigned long long)c->m->arena.size, CHAN_ARENA_ENV);
        return DSM_ERR_NOMEM;
    }
    if (c->state != CHAN_NEW)
        return DSM_ERR_STATE;
    if (c->nregions == DSM_CHAN_MAX_REGIONS)
        return DSM_ERR_TOO_BIG;
    for (uint32_t r = 0; r < c->nregions; r++)
        if (strcmp(c->regions[r].name, name) == 0)
            return DSM_ERR_EXISTS;
    chan_wire_region_t *r = &c->regions[c->nregions];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->size = size;
    if (index)
        *index = c->nregions;
    c->nregions++;
    return DSM_OK;
}

dsm_status_t dsm_chan_set_shape(dsm_chan_t *c, const char *const *names, const uint64_t *values, uint32_t n)
{
    if (c == NULL || n > DSM_CHAN_MAX_SHAPE || (n > 0 && (names == NULL || values == NULL)))
        return DSM_ERR_INVALID;
    for (uint32_t i = 0; i < n; i++)
        if (names[i] == NULL || !chan_name_ok(names[i], strlen(names[i]), DSM_CHAN_SHAPE_NAME_MAX))
            return DSM_ERR_INVALID;
    if (c->state != CHAN_NEW)
        return DSM_ERR_STATE;
    for (uint32_t i = 0; i < n; i++) {
        snprintf(c->shape_names[i], sizeof c->shape_names[i], "%s", names[i]);
        c->shape[i] = values[i];
    }
    c->nshape = n;
    return DSM_OK;
}

dsm_status_t dsm_chan_on_connect(dsm_chan_t *c, dsm_chan_connect_cb_t cb, void *ctx)
{
    if (c == NULL)
        return DSM_ERR_INVALID;
    if (c->state != CHAN_NEW)
        return DSM_ERR_STATE;
    c->cb = cb;
    c->cb_ctx = ctx;
    return DSM_OK;
}

static void free_regions(chan_mgr_t *m, dsm_chan_t *c, uint32_t n)
{
    for (uint32_t r = 0; r < n; r++) chan_arena_free(&m->arena, c->regions[r].offset, c->regions[r].size);
}

dsm_status_t dsm_chan_join(dsm_chan_t *c)
{
    if (c == NULL)
        return DSM_ERR_INVALID;
    chan_mgr_t *m = c->m;
    uint32_t connected_now[CHAN_MAX_KEPT];
    uint32_t nconnected = 0;
    pthread_mutex_lock(&m->lock);
    if (c->state != CHAN_NEW) {
        pthread_mutex_unlock(&m->lock);
        return DSM_ERR_STATE;
    }
    for (uint32_t r = 0; r < c->nregions; r++) {
        dsm_status_t st = chan_arena_alloc(&m->arena, c->regions[r].size, &c->regions[r].offset);
        if (st != DSM_OK) {
            free_regions(m, c, r);
            pthread_mutex_unlock(&m->lock);
            DSM_ERROR(LOG_MOD, "channel '%s': no room for region '%s' (%llu bytes) in the %llu-byte arena (%s sets it)",
                      c->name, c->regions[r].name, (unsigned long long)c->regions[r].size,
                      (unsigned long long)m->arena.size, CHAN_ARENA_ENV);
            return st;
        }
        memset(m->base + c->regions[r].offset, 0, c->regions[r].size);
    }
    c->state = CHAN_JOINED;
    /* Joins that came before this endpoint: theirs are the peers' regions. */
    expire(m);
    for (uint32_t k = 0; k < m->nkept;) {
        if (strcmp(m->kept[k].msg.name, c->name) != 0) {
            k++;
            continue;
        }
        int fresh = 0;
        if (accept(c, m->kept[k].src, &m->kept[k].msg, &fresh) == DSM_OK && fresh)
            connected_now[nconnected++] = m->kept[k].src;
        m->kept[k] = m->kept[--m->nkept];
    }
    chan_msg_t join;
    describe(c, CHAN_MSG_JOIN, &join);
    pthread_mutex_unlock(&m->lock);
    for (uint32_t i = 0; i < nconnected && c->cb; i++) c->cb(c->cb_ctx, c, connected_now[i]);

    uint8_t buf[CHAN_MSG_MAX_LEN];
    size_t n = chan_msg_encode(&join, buf);
    struct answer {
        dsm_op_t op;
        uint8_t reply[CHAN_MSG_MAX_LEN];
        int sent;
    } *ans = calloc(c->npeers, sizeof *ans);
    if (ans == NULL)
        return DSM_ERR_NOMEM;
    for (uint32_t i = 0; i < c->npeers; i++) {
        if (i == c->self)
            continue;
        dsm_status_t st = dsm_fabric_am_request_nb(m->fabric, c->peers[i].rank, DSM_AM_CHAN_JOIN, buf, n,
                                                   ans[i].reply, sizeof ans[i].reply, &ans[i].op);
        ans[i].sent = st == DSM_OK;
        if (st != DSM_OK)
            DSM_WARN(LOG_MOD, "channel '%s': join to rank %u not sent: %s", c->name, c->peers[i].rank,
                     dsm_strerror(st));
    }
    for (uint32_t i = 0; i < c->npeers; i++) {
        if (!ans[i].sent)
            continue;
        chan_peer_t *p = &c->peers[i];
        dsm_status_t st = dsm_fabric_wait(&ans[i].op);
        pthread_mutex_lock(&m->lock);
        m->stats.joins_sent++;
        int cb = 0;
        chan_msg_t reply;
        if (st == DSM_OK) {
            p->answered = 1;
            if (chan_msg_decode(ans[i].reply, (size_t)ans[i].op.result, &reply) != DSM_OK ||
                reply.type != CHAN_MSG_CONNECT || strcmp(reply.name, c->name) != 0)
                refuse(c, p, DSM_ERR_PROTO, "channel '%s': rank %u answered the join with a malformed connect",
                       c->name, p->rank);
            else
                cb = accept(c, p->rank, &reply, &cb) == DSM_OK && cb;
        } else if (st == DSM_ERR_NO_HANDLER) {
            p->answered = 1;   /* kept there: its own join will come */
        } else if (st == DSM_ERR_EXISTS || st == DSM_ERR_INVALID || st == DSM_ERR_NO_PEER) {
            p->answered = 1;
            /* its endpoint, which the refusal carries, says how it differs */
            if (ans[i].op.result == 0 || ans[i].op.result > sizeof ans[i].reply ||
                chan_msg_decode(ans[i].reply, (size_t)ans[i].op.result, &reply) != DSM_OK ||
                reply.type != CHAN_MSG_CONNECT || strcmp(reply.name, c->name) != 0 ||
                compare(c, p, p->rank, &reply) == DSM_OK)
                refuse(c, p, st, "channel '%s': rank %u refused our join: %s (its endpoint differs)", c->name,
                       p->rank, dsm_strerror(st));
        }
        pthread_mutex_unlock(&m->lock);
        if (cb && c->cb)
            c->cb(c->cb_ctx, c, p->rank);
    }
    free(ans);
    return DSM_OK;
}

dsm_status_t dsm_chan_wait_ready(dsm_chan_t *c, uint32_t timeout_ms)
{
    if (c == NULL)
        return DSM_ERR_INVALID;
    if (c->state != CHAN_JOINED)
        return DSM_ERR_STATE;
    chan_mgr_t *m = c->m;
    if (timeout_ms == 0)
        timeout_ms = m->keep_ms;
    uint64_t deadline = dsm_deadline_ns(timeout_ms);
    long pause = 1000;
    for (;;) {
        uint32_t ready = 0;
        pthread_mutex_lock(&m->lock);
        for (uint32_t i = 0; i < c->npeers; i++) {
            chan_peer_t *p = &c->peers[i];
            if (i == c->self)
                continue;
            if (p->error != DSM_OK) {
                dsm_status_t st = p->error;
                pthread_mutex_unlock(&m->lock);
                DSM_ERROR(LOG_MOD, "%s", c->why);
                return st;
            }
            if (__atomic_load_n(&p->connected, __ATOMIC_ACQUIRE))
                ready++;
        }
        pthread_mutex_unlock(&m->lock);
        if (ready >= c->expect)
            return DSM_OK;
        for (uint32_t i = 0; i < c->npeers; i++)
            if (i != c->self && !c->peers[i].connected && dsm_node_peer_state(m->node, c->peers[i].rank) == DSM_ERR_PEER_DEAD) {
                DSM_ERROR(LOG_MOD, "channel '%s': rank %u died before it joined", c->name, c->peers[i].rank);
                return DSM_ERR_PEER_DEAD;
            }
        if (dsm_now_ns() >= deadline)
            break;
        dsm_fabric_backoff(m->fabric, &pause, 1000000);
    }
    for (uint32_t i = 0; i < c->npeers; i++) {
        chan_peer_t *p = &c->peers[i];
        if (i == c->self || __atomic_load_n(&p->connected, __ATOMIC_ACQUIRE))
            continue;
        DSM_ERROR(LOG_MOD, "channel '%s': rank %u did not join within %u ms (%s)", c->name, p->rank, timeout_ms,
                  p->answered ? "it keeps our join: it has no endpoint of that name" : "it did not answer our join");
        break;
    }
    return DSM_ERR_TIMEOUT;
}

dsm_status_t dsm_chan_destroy(dsm_chan_t *c)
{
    if (c == NULL)
        return DSM_OK;
    chan_mgr_t *m = c->m;
    pthread_mutex_lock(&m->lock);
    if (c->children) {
        pthread_mutex_unlock(&m->lock);
        DSM_ERROR(LOG_MOD, "channel '%s' still has %d sub-channels", c->name, c->children);
        return DSM_ERR_STATE;
    }
    for (dsm_chan_t **pp = &m->chans; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (c->state == CHAN_JOINED)
        free_regions(m, c, c->nregions);
    if (c->parent)
        c->parent->children--;
    pthread_mutex_unlock(&m->lock);
    if (c->state == CHAN_JOINED) {
        chan_msg_t leave = {.type = CHAN_MSG_LEAVE};
        memcpy(leave.name, c->name, sizeof leave.name);
        uint8_t buf[CHAN_MSG_MAX_LEN];
        size_t n = chan_msg_encode(&leave, buf);
        /* Answered, so that no LEAVE is still on its way when this node
         * (and its manager) goes: a handler run for one then would find
         * the manager freed. */
        dsm_op_t *ops = calloc(c->npeers, sizeof *ops);
        uint8_t *sent = calloc(c->npeers, 1), none[1];
        for (uint32_t i = 0; i < c->npeers && ops && sent; i++)
            sent[i] = i != c->self && c->peers[i].connected &&
                      dsm_fabric_am_request_nb(m->fabric, c->peers[i].rank, DSM_AM_CHAN_LEAVE, buf, n, none,
                                               sizeof none, &ops[i]) == DSM_OK;
        for (uint32_t i = 0; i < c->npeers && ops && sent; i++)
            if (sent[i])
                (void)dsm_fabric_wait(&ops[i]);
        if (ops == NULL || sent == NULL)   /* cannot wait: tell them anyway */
            for (uint32_t i = 0; i < c->npeers; i++)
                if (i != c->self && c->peers[i].connected)
                    (void)dsm_fabric_am_send(m->fabric, c->peers[i].rank, DSM_AM_CHAN_LEAVE, buf, n);
        free(ops);
        free(sent);
    }
    free(c);
    return DSM_OK;
}

const char *dsm_chan_name(const dsm_chan_t *c) { return c ? c->name : ""; }
uint32_t dsm_chan_peer_count(const dsm_chan_t *c) { return c ? c->npeers : 0; }
uint32_t dsm_chan_peer_rank(const dsm_chan_t *c, uint32_t index)
{
    return c && index < c->npeers ? c->peers[index].rank : UINT32_MAX;
}
uint32_t dsm_chan_self(const dsm_chan_t *c) { return c ? c->self : UINT32_MAX; }

void *dsm_chan_region_local(dsm_chan_t *c, uint32_t index, size_t *len)
{
    if (c == NULL || c->state != CHAN_JOINED || index >= c->nregions)
        return NULL;
    if (len)
        *len = c->regions[index].size;
    return chan_local(c, index);
}

uint32_t dsm_chan_pending(dsm_node_t *node)
{
    chan_mgr_t *m = chan_mgr(node);
    if (m == NULL)
        return 0;
    pthread_mutex_lock(&m->lock);
    expire(m);
    uint32_t n = m->nkept;
    pthread_mutex_unlock(&m->lock);
    return n;
}

void dsm_chan_stats(dsm_node_t *node, dsm_chan_stats_t *out)
{
    chan_mgr_t *m = chan_mgr(node);
    memset(out, 0, sizeof *out);
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    *out = m->stats;
    pthread_mutex_unlock(&m->lock);
}

void dsm_chan_set_keep_ms(dsm_node_t *node, uint32_t ms)
{
    chan_mgr_t *m = chan_mgr(node);
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    m->keep_ms = ms;
    pthread_mutex_unlock(&m->lock);
}

dsm_status_t chan_finish(dsm_chan_t *c, dsm_status_t st, uint32_t timeout_ms)
{
    if (st == DSM_OK && (st = dsm_chan_join(c)) == DSM_OK)
        st = dsm_chan_wait_ready(c, timeout_ms);
    if (st != DSM_OK)
        dsm_chan_destroy(c);
    return st;
}

dsm_status_t chan_open(dsm_node_t *node, const char *name, dsm_chan_kind_t kind, const char *region, size_t size,
                       const char *const *names, const uint64_t *values, uint32_t n, uint32_t timeout_ms,
                       dsm_chan_t **out)
{
    dsm_chan_t *c = NULL;
    dsm_status_t st = dsm_chan_create(node, name, kind, &c);
    if (st != DSM_OK)
        return st;
    st = dsm_chan_set_shape(c, names, values, n);
    if (st == DSM_OK)
        st = dsm_chan_add_region(c, region, size, NULL);
    if ((st = chan_finish(c, st, timeout_ms)) == DSM_OK)
        *out = c;
    return st;
}
