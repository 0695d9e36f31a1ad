/* The home side of the directory protocol, as GAM's home runs it: the MSI
 * entry of each object this node is home to and the transactions that
 * change it (read, write, drop), driven by messages. A transaction that
 * needs no other node is answered at once, in the progress handler where
 * its request arrives. One that must invalidate sharers or recall a
 * modified copy marks its entry busy, posts every INV (or the RECALL) at
 * once and returns; the answers arrive at this handler, and the last one
 * grants and answers the requester. Requests for a busy entry queue at it
 * in order (no "busy, ask again"); other entries go on meanwhile. A drop
 * from another node comes posted (GAM's free: the dropper does not wait)
 * and is answered to no one. No lock
 * is held across a round trip, and nothing is sent under a lock. This
 * node's own transactions take the same path and wait for their outcome. */
#include <stdlib.h>
#include <string.h>

#include "dir/ids.h"
#include "dir/internal.h"
#include "dir/msg.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/test_switch.h"

#define LOG_MOD "dir"

static dir_entry_t *entry_get(dir_node_t *d, uint64_t addr, int create)
{
    unsigned b = dir_bucket(addr);
    for (dir_entry_t *e = d->entries[b]; e; e = e->chain)
        if (e->addr == addr)
            return e;
    if (!create)
        return NULL;
    dir_entry_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->addr = addr;
    e->chain = d->entries[b];
    d->entries[b] = e;
    return e;
}

static void entry_remove(dir_node_t *d, dir_entry_t *e)
{
    dir_entry_t **pp = &d->entries[dir_bucket(e->addr)];
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
    while (e->qhead) {
        dir_txn_t *t = e->qhead;
        e->qhead = t->next;
        free(t);
    }
    free(e);
}

void dir_entries_free(dir_node_t *d)
{
    for (unsigned b = 0; b < DIR_BUCKETS; b++)
        while (d->entries[b])
            entry_remove(d, d->entries[b]);
}

static int has(const uint64_t set[4], uint32_t r) { return (int)((set[r >> 6] >> (r & 63)) & 1); }
static void add(uint64_t set[4], uint32_t r) { set[r >> 6] |= 1ull << (r & 63); }
static void del(uint64_t set[4], uint32_t r) { set[r >> 6] &= ~(1ull << (r & 63)); }
static int none(const uint64_t set[4]) { return (set[0] | set[1] | set[2] | set[3]) == 0; }

/* ---- the outbox ---------------------------------------------------------- */

static void out_add(dir_outbox_t *ob, dir_out_t o)
{
    if (ob->n == ob->cap) {
        size_t cap = ob->cap ? 2 * ob->cap : 8;
        dir_out_t *v = realloc(ob->v, cap * sizeof *v);
        if (v == NULL) {
            /* unsent: a reply's requester times out, an INV's home waits for the failure notice */
            DSM_ERROR(LOG_MOD, "no memory for a message to rank %u", o.rank);
            free(o.msg);
            return;
        }
        ob->v = v;
        ob->cap = cap;
    }
    ob->v[ob->n++] = o;
}

static void out_reply(dir_outbox_t *ob, const dir_txn_t *t, dsm_status_t st, uint8_t *msg, size_t len)
{
    if (t->local) {
        t->local->st = st;
        __atomic_store_n(&t->local->done, 1, __ATOMIC_RELEASE);
        free(msg);
        return;
    }
    if (t->request_id == 0) {
        /* a posted drop: no one waits for the answer */
        if (st != DSM_OK)
            DSM_WARN(LOG_MOD, "drop from rank %u failed at the home: %s", t->who, dsm_strerror(st));
        free(msg);
        return;
    }
    out_add(ob, (dir_out_t){.rank = t->who, .request_id = t->request_id, .st = st, .msg = msg, .len = len});
}

static dsm_status_t encode(const dir_msg_t *m, uint8_t **out, size_t *len)
{
    if ((*out = malloc(dir_msg_size(m))) == NULL)
        return DSM_ERR_NOMEM;
    *len = dir_msg_encode(m, *out);
    return DSM_OK;
}

static void flush(dir_node_t *d, dir_outbox_t *ob);

/* ---- transactions (under dlock) --------------------------------------------- */

/* The object's home memory, if addr is a live object: p[0..*len). */
static uint8_t *live_object(dir_node_t *d, uint64_t addr, size_t *len)
{
    uint8_t *p = dsm_local_ptr(d->node, addr);
    size_t usable = 0;
    uint32_t type;
    uint64_t size;
    if (p == NULL || dsm_alloc_size(d->node, addr, &usable) != DSM_OK ||
        dir_obj_header_decode(p, DIR_OBJ_HEADER, usable, &type, &size) != DSM_OK)
        return NULL;
    *len = (size_t)(DIR_OBJ_HEADER + size);
    return p;
}

/* Under dlock and clock: this node's borrow of its own object. */
static dsm_status_t home_borrow(dir_node_t *d, const dir_entry_t *e, int op, uint64_t addr, uint8_t *p, size_t len)
{
    dir_copy_t *c = dir_copy_find(d, addr);
    if (c == NULL) {
        if ((c = dir_copy_insert(d, addr)) == NULL)
            return DSM_ERR_NOMEM;
        c->home = 1;
        c->data = p;
        c->len = len;
    }
    if (c->writer || (op == DIR_MSG_WRITE && c->readers))
        return DSM_ERR_STATE;
    if (op == DIR_MSG_READ) {
        c->state = e->state == DIR_M ? DIR_M : DIR_S;
        c->readers++;
    } else {
        c->state = DIR_M;
        c->writer = 1;
    }
    return DSM_OK;
}

static int start(dir_node_t *d, dir_entry_t *e, const dir_txn_t *t, dir_outbox_t *ob);

/* The transaction of e has all its answers: change the entry, answer the
 * requester, then start the queued ones in turn. Returns 1 if e is gone
 * (a drop freed it). */
static int finish(dir_node_t *d, dir_entry_t *e, dir_outbox_t *ob)
{
    uint32_t self = dir_self(d);
    dir_txn_t t = e->txn;
    dsm_status_t st = e->txn_st;
    size_t len = 0;
    uint8_t *p = live_object(d, e->addr, &len);
    int after = e->asked;   /* its requester waited for the round trips it asked for */
    e->busy = 0;
    e->asked = 0;
    /* this node's own transaction: its thread waited for them */
    if (after && t.who == self)
        dir_count(d, DC_CHAINED, 1);
    if (st == DSM_OK && p == NULL)
        st = DSM_ERR_BAD_ADDR;
    uint8_t *msg = NULL;
    size_t n = 0;
    if (st == DSM_OK && t.op == DIR_MSG_READ) {
        if (e->recalling) {
            e->state = DIR_S;
            add(e->sharers, e->owner);
        }
        if (e->state != DIR_M) {
            e->state = DIR_S;
            add(e->sharers, t.who);
        }
    } else if (st == DSM_OK && t.op == DIR_MSG_WRITE) {
        memset(e->sharers, 0, sizeof e->sharers);
        e->state = DIR_M;
        e->owner = t.who;
        if (t.who != self)
            dir_count(d, DC_MOVES, 1);
    } else if (st == DSM_OK) {
        /* DROP: this node's own copy goes too; the dropper's is gone */
        pthread_mutex_lock(&d->clock);
        dir_copy_t *c = dir_copy_find(d, e->addr);
        if (c && (c->readers || c->writer))
            st = DSM_ERR_STATE;
        else if (c)
            dir_copy_remove(d, c);
        pthread_mutex_unlock(&d->clock);
        if (st == DSM_OK) {
            uint64_t addr = e->addr;
            dir_txn_t *q = e->qhead;
            e->qhead = e->qtail = NULL;
            entry_remove(d, e);
            memset(p, 0, DIR_OBJ_HEADER);
            st = dsm_free(d->node, addr);
            if (st == DSM_OK)
                dir_count(d, DC_FREES, 1);
            if (st == DSM_OK && t.who != self && t.request_id != 0) {
                dir_msg_t ack = {.type = DIR_MSG_ACK, .addr = addr};
                st = encode(&ack, &msg, &n);
            }
            out_reply(ob, &t, st, msg, n);
            /* those queued behind the drop find no object now */
            while (q) {
                dir_txn_t *next = q->next;
                out_reply(ob, q, DSM_ERR_BAD_ADDR, NULL, 0);
                free(q);
                q = next;
            }
            return 1;
        }
    }
    e->recalling = 0;
    if (st == DSM_OK && t.who == self) {
        pthread_mutex_lock(&d->clock);
        st = home_borrow(d, e, t.op, e->addr, p, len);
        pthread_mutex_unlock(&d->clock);
    } else if (st == DSM_OK) {
        dir_msg_t rep = {.type = after ? DIR_MSG_DATA_AFTER : DIR_MSG_DATA, .addr = e->addr, .len = (uint32_t)len,
                         .data = p};
        st = encode(&rep, &msg, &n);
    }
    out_reply(ob, &t, st, msg, n);
    /* the next in line; one that needs no answers finishes at once */
    while (!e->busy && e->qhead) {
        dir_txn_t *q = e->qhead;
        e->qhead = q->next;
        if (e->qhead == NULL)
            e->qtail = NULL;
        dir_txn_t next = *q;
        free(q);
        if (start(d, e, &next, ob))
            return 1;
    }
    return 0;
}

/* Ask rank r (INV or RECALL of e) by post, after the lock is let go. */
static void ask(dir_node_t *d, dir_entry_t *e, uint32_t r, int type, int mode, dir_outbox_t *ob)
{
    dir_msg_t m = {.type = (uint16_t)type, .addr = e->addr, .mode = (uint8_t)mode};
    dir_out_t o = {.rank = r, .addr = e->addr};
    if (encode(&m, &o.msg, &o.len) != DSM_OK) {
        if (e->txn_st == DSM_OK)
            e->txn_st = DSM_ERR_NOMEM;
        return;
    }
    if (type == DIR_MSG_INV || mode == DIR_RECALL_INVALIDATE)
        dir_count(d, DC_INVALIDATIONS, 1);
    dir_count(d, DC_MESSAGES, 1);
    dir_count(d, DC_BYTES, o.len);
    add(e->awaiting, r);
    e->asked = 1;
    out_add(ob, o);
}

/* This node's own copy, asked directly: answered now, or when its borrow ends. */
static void ask_self(dir_node_t *d, dir_entry_t *e, int type, int mode)
{
    dir_answer_t a = {0};
    pthread_mutex_lock(&d->clock);
    int now = dir_copy_answer(d, e->addr, type, mode, &a);
    pthread_mutex_unlock(&d->clock);
    if (!now)
        add(e->awaiting, dir_self(d));
    else if (type == DIR_MSG_INV)
        del(e->sharers, dir_self(d));
}

/* Begin transaction t on e (not busy): reads downgrade a modified copy
 * elsewhere; writes and drops invalidate every other sharer at once and
 * take back a modified copy. Returns 1 if e is gone (as finish). */
static int start(dir_node_t *d, dir_entry_t *e, const dir_txn_t *t, dir_outbox_t *ob)
{
    uint32_t self = dir_self(d);
    e->busy = 1;
    e->asked = 0;
    e->txn = *t;
    e->txn.next = NULL;
    e->txn_st = DSM_OK;
    memset(e->awaiting, 0, sizeof e->awaiting);
    e->recalling = e->state == DIR_M && e->owner != t->who;
    if (e->recalling) {
        int mode = t->op == DIR_MSG_READ ? DIR_RECALL_DOWNGRADE : DIR_RECALL_INVALIDATE;
        if (e->owner == self)
            ask_self(d, e, DIR_MSG_RECALL, mode);
        else
            ask(d, e, e->owner, DIR_MSG_RECALL, mode, ob);
    }
    /* a writer keeps its copy (it becomes M) and a dropper has removed its
     * own before asking: neither is invalidated */
    int no_ack_wait = dsm_test_switch("dir_inv_ack");
    if (t->op != DIR_MSG_READ)
        for (uint32_t r = 0; r < DSM_MAX_RANKS; r++) {
            if (!has(e->sharers, r) || r == t->who)
                continue;
            if (r == self) {
                ask_self(d, e, DIR_MSG_INV, 0);
            } else {
                ask(d, e, r, DIR_MSG_INV, 0, ob);
                /* the negative test (test_own_litmus_negative) grants
                 * without waiting for the ACKs */
                if (no_ack_wait) {
                    del(e->awaiting, r);
                    del(e->sharers, r);
                }
            }
        }
    return none(e->awaiting) ? finish(d, e, ob) : 0;
}

/* A transaction for e's object: started, or queued behind the one in progress. */
static void request(dir_node_t *d, const dir_txn_t *t, uint64_t addr, dir_outbox_t *ob)
{
    size_t len;
    dir_entry_t *e = NULL;
    if (live_object(d, addr, &len) == NULL) {
        DSM_WARN(LOG_MOD, "0x%llx is not a live object", (unsigned long long)addr);
        out_reply(ob, t, DSM_ERR_BAD_ADDR, NULL, 0);
        return;
    }
    if ((e = entry_get(d, addr, 1)) == NULL) {
        out_reply(ob, t, DSM_ERR_NOMEM, NULL, 0);
        return;
    }
    if (!e->busy) {
        /* one that waits for answers is counted as one queued is */
        if (!start(d, e, t, ob) && e->busy && t->who != dir_self(d))
            dir_count(d, DC_DEFERRED, 1);
        return;
    }
    if (t->op == DIR_MSG_WRITE && e->recalling && e->owner == t->who && t->who != dir_self(d)) {
        /* The owner asks again for the grant whose reply did not fit its
         * buffer (dir_request), while the recall waits for its copy: it
         * has not written yet, so the home memory is the object. Queued,
         * it would wait for the recall that waits for it. */
        uint8_t *p = live_object(d, addr, &len), *msg = NULL;
        size_t n = 0;
        dir_msg_t rep = {.type = DIR_MSG_DATA, .addr = addr, .len = (uint32_t)len, .data = p};
        dsm_status_t st = encode(&rep, &msg, &n);
        out_reply(ob, t, st, msg, n);
        return;
    }
    dir_txn_t *q = malloc(sizeof *q);
    if (q == NULL) {
        out_reply(ob, t, DSM_ERR_NOMEM, NULL, 0);
        return;
    }
    *q = *t;
    q->next = NULL;
    if (e->qtail) e->qtail->next = q; else e->qhead = q;
    e->qtail = q;
    if (t->who != dir_self(d))
        dir_count(d, DC_DEFERRED, 1);
}

/* Rank `from` answered e's INV or RECALL (type DIR_MSG_ACK / DATA), or
 * could not (st: its node died, the post failed). */
static void answered(dir_node_t *d, dir_entry_t *e, uint32_t from, int type, const uint8_t *data, size_t len,
                     dsm_status_t st, dir_outbox_t *ob)
{
    if (!e->busy || !has(e->awaiting, from))
        return;   /* late: a failure notice came first, or the negative test's ACK */
    del(e->awaiting, from);
    if (e->recalling && from == e->owner) {
        size_t olen = 0;
        uint8_t *p = live_object(d, e->addr, &olen);
        if (st == DSM_OK && type != DIR_MSG_DATA)
            st = DSM_ERR_BAD_ADDR;   /* the owner has no copy: the home's record was wrong */
        if (st == DSM_OK && data != NULL) {
            if (p == NULL || len != olen || memcmp(data, p, DIR_OBJ_HEADER) != 0) {
                DSM_WARN(LOG_MOD, "rank %u recalled 0x%llx with a wrong object", from, (unsigned long long)e->addr);
                st = DSM_ERR_PROTO;
            } else {
                memcpy(p, data, len);
            }
        }
        if (st != DSM_OK && e->txn_st == DSM_OK)
            e->txn_st = st;
    } else if (st == DSM_OK || st == DSM_ERR_PEER_DEAD) {
        del(e->sharers, from);   /* a dead node's copy died with it */
    } else if (e->txn_st == DSM_OK) {
        e->txn_st = st;   /* still a sharer */
    }
    if (none(e->awaiting))
        (void)finish(d, e, ob);
}

static void flush(dir_node_t *d, dir_outbox_t *ob)
{
    for (size_t i = 0; i < ob->n; i++) {
        dir_out_t *o = &ob->v[i];
        if (o->request_id) {
            (void)dsm_fabric_am_reply(d->fabric, o->rank, o->request_id, o->st, o->st == DSM_OK ? o->msg : NULL,
                                      o->st == DSM_OK ? o->len : 0);
        } else {
            dsm_status_t st = dsm_fabric_am_post(d->fabric, o->rank, DSM_AM_DIR_CACHE, o->msg, o->len);
            if (st != DSM_OK) {
                /* never left: as if answered with the failure (more may be added to ob) */
                pthread_mutex_lock(&d->dlock);
                dir_entry_t *e = entry_get(d, o->addr, 0);
                if (e)
                    answered(d, e, o->rank, 0, NULL, 0, st, ob);
                pthread_mutex_unlock(&d->dlock);
                o = &ob->v[i];
            }
        }
        free(o->msg);
    }
    free(ob->v);
    *ob = (dir_outbox_t){0};
}

/* ---- entry points -------------------------------------------------------- */

void dir_home_answer(dir_node_t *d, uint32_t from, uint64_t addr, int type, const uint8_t *data, size_t len)
{
    dir_outbox_t ob = {0};
    pthread_mutex_lock(&d->dlock);
    dir_entry_t *e = entry_get(d, addr, 0);
    if (e)
        answered(d, e, from, type, data, len, DSM_OK, &ob);
    pthread_mutex_unlock(&d->dlock);
    flush(d, &ob);
}

dsm_status_t dir_home_local(dir_node_t *d, int op, uint64_t addr)
{
    dir_local_t done = {0, DSM_OK};
    dir_txn_t t = {.who = dir_self(d), .op = op, .local = &done};
    dir_outbox_t ob = {0};
    pthread_mutex_lock(&d->dlock);
    request(d, &t, addr, &ob);
    pthread_mutex_unlock(&d->dlock);
    flush(d, &ob);
    /* the answers are served by the progress thread, or by this one while it waits */
    uint64_t deadline = dsm_deadline_ns(DIR_TIMEOUT_MS);
    long pause = 1000;
    while (!__atomic_load_n(&done.done, __ATOMIC_ACQUIRE)) {
        if (dsm_now_ns() > deadline) {
            /* the transaction still points at `done`: it may not go */
            DSM_ERROR(LOG_MOD, "0x%llx: no answer in %u ms; the directory is stuck", (unsigned long long)addr,
                      DIR_TIMEOUT_MS);
            deadline = dsm_deadline_ns(DIR_TIMEOUT_MS);
        }
        (void)dsm_fabric_backoff(d->fabric, &pause, 50000);
    }
    return done.st;
}

void dir_on_home(void *ctx, const dsm_am_msg_t *msg)
{
    dir_node_t *d = ctx;
    dir_msg_t m;
    dsm_status_t st = dir_msg_decode(msg->data, msg->len, &m);
    int is_request = st == DSM_OK && (m.type == DIR_MSG_READ || m.type == DIR_MSG_WRITE || m.type == DIR_MSG_DROP);
    int is_answer = st == DSM_OK && (m.type == DIR_MSG_ACK || m.type == DIR_MSG_DATA);
    /* a drop may come posted (no answer awaited); reads and writes are requests */
    int posted_drop = st == DSM_OK && m.type == DIR_MSG_DROP && msg->request_id == 0;
    if (!(is_request && msg->request_id != 0) && !(is_answer && msg->request_id == 0) && !posted_drop) {
        DSM_WARN(LOG_MOD, "malformed directory message from rank %u (%zu bytes) refused", msg->src_rank, msg->len);
        /* a sender waiting for an answer gets one now, not its op timeout */
        if (msg->request_id)
            (void)dsm_fabric_am_reply(d->fabric, msg->src_rank, msg->request_id,
                                      msg->len > DIR_MSG_FIXED_MAX ? DSM_ERR_TOO_BIG : DSM_ERR_PROTO, NULL, 0);
        return;
    }
    if (dsm_gaddr_node(m.addr) != dir_self(d)) {
        if (msg->request_id)
            (void)dsm_fabric_am_reply(d->fabric, msg->src_rank, msg->request_id, DSM_ERR_BAD_ADDR, NULL, 0);
        return;
    }
    dir_outbox_t ob = {0};
    pthread_mutex_lock(&d->dlock);
    if (is_request) {
        dir_txn_t t = {.who = msg->src_rank, .request_id = msg->request_id, .op = m.type};
        request(d, &t, m.addr, &ob);
    } else {
        dir_count(d, DC_MESSAGES, 1);
        dir_count(d, DC_BYTES, msg->len);
        dir_entry_t *e = entry_get(d, m.addr, 0);
        if (e)
            answered(d, e, msg->src_rank, m.type, m.type == DIR_MSG_DATA ? m.data : NULL, m.len, DSM_OK, &ob);
    }
    pthread_mutex_unlock(&d->dlock);
    flush(d, &ob);
}

void dir_on_peer_dead(void *ctx, uint32_t rank)
{
    dir_node_t *d = ctx;
    dir_outbox_t ob = {0};
    pthread_mutex_lock(&d->dlock);
    for (unsigned b = 0; b < DIR_BUCKETS; b++)
        for (dir_entry_t *e = d->entries[b], *next; e; e = next) {
            next = e->chain;   /* answered may free e (a drop) */
            answered(d, e, rank, 0, NULL, 0, DSM_ERR_PEER_DEAD, &ob);
        }
    pthread_mutex_unlock(&d->dlock);
    flush(d, &ob);
}
