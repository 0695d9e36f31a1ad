/* The home side of the directory protocol: the MSI entry of each object
 * this node is home to, the transactions that change it (read, write,
 * drop: recall a modified copy, invalidate sharers by message, grant), and
 * the thread that serves the peers' transactions that must ask other nodes.
 * A transaction that needs no other node's answer is served in the
 * progress handler, as it arrives; one that does marks its entry busy and
 * waits without the directory's lock (a transaction on another entry goes
 * on meanwhile; one on this entry waits its turn), asking every sharer at
 * once. Transactions of this node's own borrows run on the caller's
 * thread. */
#include <stdlib.h>
#include <string.h>

#include "dir/ids.h"
#include "dir/internal.h"
#include "dir/msg.h"
#include "util/log.h"
#include "util/test_switch.h"
#include "util/thread.h"

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
    free(e);
}

void dir_entries_free(dir_node_t *d)
{
    for (unsigned b = 0; b < DIR_BUCKETS; b++)
        while (d->entries[b])
            entry_remove(d, d->entries[b]);
}

static int sharer(const dir_entry_t *e, uint32_t r) { return (int)((e->sharers[r >> 6] >> (r & 63)) & 1); }
static void set_sharer(dir_entry_t *e, uint32_t r) { e->sharers[r >> 6] |= 1ull << (r & 63); }
static void clear_sharer(dir_entry_t *e, uint32_t r) { e->sharers[r >> 6] &= ~(1ull << (r & 63)); }

/* Invalidate the copies of the ranks in set[] (this node's directly),
 * every message sent before any answer is awaited. Each rank whose copy is
 * gone (or whose node is) stops being a sharer of e; the first other
 * failure is returned, its rank still a sharer. */
static dsm_status_t invalidate_all(dir_node_t *d, dir_entry_t *e, const uint64_t set[4], uint64_t addr)
{
    uint32_t self = dir_self(d), ranks[DSM_MAX_RANKS];
    unsigned n = 0;
    dsm_status_t st = DSM_OK;
    for (uint32_t r = 0; r < DSM_MAX_RANKS; r++)
        if ((set[r >> 6] >> (r & 63)) & 1)
            ranks[n++] = r;
    if (n == 0)
        return DSM_OK;
    dsm_op_t *ops = calloc(n, sizeof *ops);
    dsm_status_t *sent = calloc(n, sizeof *sent);   /* the send's own status: the op is the fabric's once sent */
    uint8_t *replies = malloc((size_t)n * DIR_MSG_FIXED_MAX);
    if (ops == NULL || sent == NULL || replies == NULL) {
        free(ops);
        free(sent);
        free(replies);
        return DSM_ERR_NOMEM;
    }
    dir_msg_t req = {.type = DIR_MSG_INV, .addr = addr};
    uint8_t out[DIR_MSG_FIXED_MAX];
    size_t len = dir_msg_encode(&req, out);
    for (unsigned i = 0; i < n; i++) {
        if (ranks[i] == self)
            continue;
        dir_count(d, DC_INVALIDATIONS, 1);
        sent[i] = dsm_fabric_am_request_nb(d->fabric, ranks[i], DSM_AM_DIR_CACHE, out, len,
                                           replies + (size_t)i * DIR_MSG_FIXED_MAX, DIR_MSG_FIXED_MAX, &ops[i]);
    }
    /* The negative test (test_own_litmus_negative) grants without waiting
     * for the remote ACKs: the ops and replies are the fabric's until they
     * complete, so they are left to it (a test-only leak). */
    int no_ack_wait = dsm_test_switch("dir_inv_ack");
    for (unsigned i = 0; i < n; i++) {
        uint32_t r = ranks[i];
        dsm_status_t one;
        if (no_ack_wait && r != self && sent[i] == DSM_OK) {
            clear_sharer(e, r);
            continue;
        }
        if (r == self) {
            uint8_t *data;
            size_t dlen;
            one = dir_copy_apply(d, addr, DIR_MSG_INV, 0, &data, &dlen);
        } else if (sent[i] != DSM_OK) {
            one = sent[i];
        } else {
            one = dsm_fabric_wait(&ops[i]);
            size_t got = (size_t)ops[i].result;
            dir_count_round_trip(d, len, got, DIR_MSG_FIXED_MAX);
            dir_msg_t rep;
            if (one == DSM_OK && (dir_msg_decode(replies + (size_t)i * DIR_MSG_FIXED_MAX, got, &rep) != DSM_OK ||
                                  rep.addr != addr || rep.type != DIR_MSG_ACK))
                one = DSM_ERR_PROTO;
        }
        if (one == DSM_OK || one == DSM_ERR_PEER_DEAD)
            clear_sharer(e, r);   /* a dead node's copy died with it */
        else if (st == DSM_OK)
            st = one;
    }
    if (!no_ack_wait) {
        free(ops);
        free(replies);
    }
    free(sent);
    return st;
}

/* Take back rank r's modified copy into the home memory p[0..len). */
static dsm_status_t recall(dir_node_t *d, uint32_t r, uint64_t addr, int mode, uint8_t *p, size_t len)
{
    if (r == dir_self(d)) {
        uint8_t *data;
        size_t n;
        return dir_copy_apply(d, addr, DIR_MSG_RECALL, mode, &data, &n);   /* the data is already here */
    }
    if (mode == DIR_RECALL_INVALIDATE)
        dir_count(d, DC_INVALIDATIONS, 1);
    dir_msg_t req = {.type = DIR_MSG_RECALL, .addr = addr, .mode = (uint8_t)mode}, rep;
    uint8_t *buf = NULL;
    dsm_status_t st = dir_request(d, r, DSM_AM_DIR_CACHE, &req, DIR_MSG_HEADER_LEN + 12 + len, &rep, &buf);
    if (st == DSM_OK && (rep.type != DIR_MSG_DATA || rep.len != len || memcmp(rep.data, p, 16) != 0)) {
        DSM_WARN(LOG_MOD, "rank %u recalled 0x%llx with a wrong object", r, (unsigned long long)addr);
        st = DSM_ERR_PROTO;
    }
    if (st == DSM_OK)
        memcpy(p, rep.data, len);
    free(buf);
    return st;
}

static dsm_status_t data_reply(const uint8_t *p, size_t len, uint64_t addr, uint8_t **reply, size_t *reply_len)
{
    dir_msg_t rep = {.type = DIR_MSG_DATA, .addr = addr, .len = (uint32_t)len, .data = p};
    size_t n = dir_msg_size(&rep);
    uint8_t *out = malloc(n);
    if (out == NULL)
        return DSM_ERR_NOMEM;
    *reply_len = dir_msg_encode(&rep, out);
    *reply = out;
    return DSM_OK;
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

/* Under dlock: the ranks a transaction must invalidate (into inv) and
 * whether it recalls a modified copy; whether any of that is another
 * node's. */
static int plan(const dir_entry_t *e, uint32_t self, uint32_t who, int op, uint64_t inv[4], int *recall_owner)
{
    int remote = 0;
    memset(inv, 0, 4 * sizeof inv[0]);
    *recall_owner = e->state == DIR_M && e->owner != who;
    if (*recall_owner && e->owner != self)
        remote = 1;
    /* a writer keeps its copy (it becomes M) and a dropper has removed
     * its own before asking: neither is invalidated by message */
    if (op != DIR_MSG_READ)
        for (uint32_t r = 0; r < DSM_MAX_RANKS; r++)
            if (sharer(e, r) && r != who) {
                inv[r >> 6] |= 1ull << (r & 63);
                remote |= r != self;
            }
    return remote;
}

dsm_status_t dir_home_txn(dir_node_t *d, uint32_t who, int op, uint64_t addr, int may_wait, int *deferred,
                          uint8_t **reply, size_t *reply_len)
{
    uint32_t self = dir_self(d);
    *reply = NULL;
    *reply_len = 0;
    if (deferred)
        *deferred = 0;
    pthread_mutex_lock(&d->dlock);
    uint8_t *p;
    size_t len;
    dir_entry_t *e;
    dsm_status_t st;
    for (;;) {
        p = dsm_local_ptr(d->node, addr);
        size_t usable = 0;
        uint32_t type;
        uint64_t size;
        st = DSM_ERR_BAD_ADDR;
        if (p == NULL || dsm_alloc_size(d->node, addr, &usable) != DSM_OK ||
            dir_obj_header_decode(p, DIR_OBJ_HEADER, usable, &type, &size) != DSM_OK) {
            DSM_WARN(LOG_MOD, "0x%llx is not a live object", (unsigned long long)addr);
            goto out;
        }
        len = (size_t)(DIR_OBJ_HEADER + size);
        st = DSM_ERR_NOMEM;
        if ((e = entry_get(d, addr, 1)) == NULL)
            goto out;
        if (!e->busy)
            break;
        if (!may_wait)
            goto defer;
        pthread_cond_wait(&d->ecv, &d->dlock);   /* then look again: a drop may have freed it */
    }
    uint64_t inv[4];
    int recall_owner;
    int remote = plan(e, self, who, op, inv, &recall_owner);
    if (remote && !may_wait)
        goto defer;
    if (remote) {
        /* the answers are awaited without the lock; this entry is ours */
        e->busy = 1;
        pthread_mutex_unlock(&d->dlock);
    }
    /* reads downgrade the owner, writes and drops invalidate every sharer
     * at once and then take back the owner's copy */
    st = DSM_OK;
    if (op != DIR_MSG_READ)
        st = invalidate_all(d, e, inv, addr);   /* those invalidated stay so */
    if (st == DSM_OK && recall_owner)
        st = recall(d, e->owner, addr, op == DIR_MSG_READ ? DIR_RECALL_DOWNGRADE : DIR_RECALL_INVALIDATE, p, len);
    if (remote) {
        pthread_mutex_lock(&d->dlock);
        e->busy = 0;
        pthread_cond_broadcast(&d->ecv);
    }
    if (st != DSM_OK)
        goto out;
    if (op == DIR_MSG_READ) {
        if (recall_owner) {
            e->state = DIR_S;
            set_sharer(e, e->owner);
        }
        if (e->state != DIR_M) {
            e->state = DIR_S;
            set_sharer(e, who);
        }
    } else {
        if (op == DIR_MSG_WRITE)
            memset(e->sharers, 0, sizeof e->sharers);
        e->state = 0;
        if (op == DIR_MSG_DROP) {
            /* This node's own copy (if any) goes too; the dropper's is gone. */
            pthread_mutex_lock(&d->clock);
            dir_copy_t *c = dir_copy_find(d, addr);
            if (c && (c->readers || c->writer)) {
                pthread_mutex_unlock(&d->clock);
                st = DSM_ERR_STATE;
                goto out;
            }
            if (c)
                dir_copy_remove(d, c);
            pthread_mutex_unlock(&d->clock);
            entry_remove(d, e);
            memset(p, 0, DIR_OBJ_HEADER);
            st = dsm_free(d->node, addr);
            if (st == DSM_OK)
                dir_count(d, DC_FREES, 1);
            goto out;
        }
        e->state = DIR_M;
        e->owner = who;
        if (who != self)
            dir_count(d, DC_MOVES, 1);
    }
    if (who == self) {
        pthread_mutex_lock(&d->clock);
        st = home_borrow(d, e, op, addr, p, len);
        pthread_mutex_unlock(&d->clock);
    } else {
        st = data_reply(p, len, addr, reply, reply_len);
    }
out:
    pthread_mutex_unlock(&d->dlock);
    return st;
defer:
    pthread_mutex_unlock(&d->dlock);
    *deferred = 1;
    return DSM_OK;
}

/* ---- the directory thread ---------------------------------------------- */

/* A peer's transaction: decoded, run (in this context unless it would
 * wait: then *deferred), answered. */
static void serve(dir_node_t *d, uint32_t src, uint64_t request_id, const void *data, size_t len, int may_wait,
                  int *deferred)
{
    dir_msg_t m;
    uint8_t *reply = NULL;
    size_t n = 0;
    dsm_status_t st = dir_msg_decode(data, len, &m);
    *deferred = 0;
    if (st != DSM_OK || (m.type != DIR_MSG_READ && m.type != DIR_MSG_WRITE && m.type != DIR_MSG_DROP)) {
        DSM_WARN(LOG_MOD, "malformed directory request from rank %u", src);
        st = DSM_ERR_PROTO;
    } else if (dsm_gaddr_node(m.addr) != dir_self(d)) {
        st = DSM_ERR_BAD_ADDR;
    } else {
        st = dir_home_txn(d, src, m.type, m.addr, may_wait, deferred, &reply, &n);
        if (*deferred)
            return;
        if (st == DSM_OK && m.type == DIR_MSG_DROP) {
            dir_msg_t ack = {.type = DIR_MSG_ACK, .addr = m.addr};
            reply = malloc(DIR_MSG_FIXED_MAX);
            if (reply == NULL)
                st = DSM_ERR_NOMEM;
            else
                n = dir_msg_encode(&ack, reply);
        }
    }
    (void)dsm_fabric_am_reply(d->fabric, src, request_id, st, st == DSM_OK ? reply : NULL, st == DSM_OK ? n : 0);
    free(reply);
}

void dir_on_home(void *ctx, const dsm_am_msg_t *msg)
{
    dir_node_t *d = ctx;
    if (msg->request_id == 0 || msg->len > DIR_MSG_FIXED_MAX) {
        DSM_WARN(LOG_MOD, "bad directory request from rank %u (%zu bytes) refused", msg->src_rank, msg->len);
        /* a sender waiting for an answer gets one now, not its op timeout */
        if (msg->request_id)
            (void)dsm_fabric_am_reply(d->fabric, msg->src_rank, msg->request_id, DSM_ERR_TOO_BIG, NULL, 0);
        return;
    }
    int deferred;
    serve(d, msg->src_rank, msg->request_id, msg->data, msg->len, 0, &deferred);
    if (!deferred)
        return;
    dir_count(d, DC_DEFERRED, 1);
    dir_job_t *j = malloc(sizeof *j + msg->len);
    if (j == NULL) {
        (void)dsm_fabric_am_reply(d->fabric, msg->src_rank, msg->request_id, DSM_ERR_NOMEM, NULL, 0);
        return;
    }
    j->src = msg->src_rank;
    j->request_id = msg->request_id;
    j->len = msg->len;
    j->next = NULL;
    memcpy(j->data, msg->data, msg->len);
    pthread_mutex_lock(&d->qlock);
    if (d->qtail) d->qtail->next = j; else d->qhead = j;
    d->qtail = j;
    pthread_cond_signal(&d->qcond);
    pthread_mutex_unlock(&d->qlock);
}

static void *worker(void *arg)
{
    dir_node_t *d = arg;
    dsm_thread_name("dsm-dir-home", -1);
    pthread_mutex_lock(&d->qlock);
    for (;;) {
        while (d->qhead == NULL && !d->stop)
            pthread_cond_wait(&d->qcond, &d->qlock);
        if (d->qhead == NULL)
            break;
        dir_job_t *j = d->qhead;
        d->qhead = j->next;
        if (d->qhead == NULL)
            d->qtail = NULL;
        pthread_mutex_unlock(&d->qlock);
        int deferred;
        serve(d, j->src, j->request_id, j->data, j->len, 1, &deferred);
        free(j);
        pthread_mutex_lock(&d->qlock);
    }
    pthread_mutex_unlock(&d->qlock);
    return NULL;
}

dsm_status_t dir_home_start(dir_node_t *d)
{
    if (dsm_thread_start(&d->worker, NULL, worker, d) != 0)
        return DSM_ERR_NOMEM;
    d->started = 1;
    return DSM_OK;
}

void dir_home_stop(dir_node_t *d)
{
    pthread_mutex_lock(&d->qlock);
    d->stop = 1;
    pthread_cond_broadcast(&d->qcond);
    pthread_mutex_unlock(&d->qlock);
    if (d->started)
        pthread_join(d->worker, NULL);
    d->started = 0;
    while (d->qhead) {
        dir_job_t *j = d->qhead;
        d->qhead = j->next;
        free(j);
    }
    d->qtail = NULL;
}
