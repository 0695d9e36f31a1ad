/* The home side of the directory protocol: the MSI entry of each object
 * this node is home to, the transactions that change it (read, write,
 * drop: recall a modified copy, invalidate sharers by message, grant), and
 * the thread that serves peers' requests one at a time (a transaction
 * waits for other nodes' answers, which a progress-context handler must
 * not do). Transactions of this node's own borrows run on the caller's
 * thread under the same lock. */
#include <stdlib.h>
#include <string.h>

#include "dir/ids.h"
#include "dir/internal.h"
#include "dir/msg.h"
#include "util/log.h"
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

/* Invalidate rank r's copy (a message, or this node's own copy directly). */
static dsm_status_t invalidate(dir_node_t *d, uint32_t r, uint64_t addr)
{
    if (r == dir_self(d)) {
        uint8_t *data;
        size_t len;
        return dir_copy_apply(d, addr, DIR_MSG_INV, 0, &data, &len);
    }
    dir_count(d, DC_INVALIDATIONS, 1);
    dir_msg_t req = {.type = DIR_MSG_INV, .addr = addr}, rep;
    uint8_t *buf = NULL;
    dsm_status_t st = dir_request(d, r, DSM_AM_DIR_CACHE, &req, DIR_MSG_FIXED_MAX, &rep, &buf);
    if (st == DSM_OK && rep.type != DIR_MSG_ACK)
        st = DSM_ERR_PROTO;
    free(buf);
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

dsm_status_t dir_home_txn(dir_node_t *d, uint32_t who, int op, uint64_t addr, uint8_t **reply, size_t *reply_len)
{
    uint32_t self = dir_self(d);
    *reply = NULL;
    *reply_len = 0;
    pthread_mutex_lock(&d->dlock);
    uint8_t *p = dsm_local_ptr(d->node, addr);
    size_t usable = 0;
    uint32_t type;
    uint64_t size;
    dsm_status_t st = DSM_ERR_BAD_ADDR;
    if (p == NULL || dsm_alloc_size(d->node, addr, &usable) != DSM_OK ||
        dir_obj_header_decode(p, DIR_OBJ_HEADER, usable, &type, &size) != DSM_OK) {
        DSM_WARN(LOG_MOD, "0x%llx is not a live object", (unsigned long long)addr);
        goto out;
    }
    size_t len = (size_t)(DIR_OBJ_HEADER + size);
    dir_entry_t *e = entry_get(d, addr, 1);
    st = DSM_ERR_NOMEM;
    if (e == NULL)
        goto out;
    if (op == DIR_MSG_READ) {
        if (e->state == DIR_M && e->owner != who) {
            if ((st = recall(d, e->owner, addr, DIR_RECALL_DOWNGRADE, p, len)) != DSM_OK)
                goto out;
            e->state = DIR_S;
            set_sharer(e, e->owner);
        }
        if (e->state != DIR_M) {
            e->state = DIR_S;
            set_sharer(e, who);
        }
    } else {
        for (uint32_t r = 0; r < DSM_MAX_RANKS; r++) {
            if (!sharer(e, r))
                continue;
            if (!(r == who && op == DIR_MSG_WRITE) && (st = invalidate(d, r, addr)) != DSM_OK &&
                st != DSM_ERR_PEER_DEAD)
                goto out;   /* the sharers already invalidated stay so; a dead one's copy died with it */
            clear_sharer(e, r);
        }
        if (e->state == DIR_M && e->owner != who) {
            if ((st = recall(d, e->owner, addr, DIR_RECALL_INVALIDATE, p, len)) != DSM_OK)
                goto out;
        }
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
}

/* ---- the directory thread ---------------------------------------------- */

void dir_on_home(void *ctx, const dsm_am_msg_t *msg)
{
    dir_node_t *d = ctx;
    if (msg->request_id == 0 || msg->len > DIR_MSG_FIXED_MAX) {
        DSM_WARN(LOG_MOD, "bad directory request from rank %u dropped", msg->src_rank);
        return;
    }
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

static void serve(dir_node_t *d, dir_job_t *j)
{
    dir_msg_t m;
    uint8_t *reply = NULL;
    size_t n = 0;
    dsm_status_t st = dir_msg_decode(j->data, j->len, &m);
    if (st != DSM_OK || (m.type != DIR_MSG_READ && m.type != DIR_MSG_WRITE && m.type != DIR_MSG_DROP)) {
        DSM_WARN(LOG_MOD, "malformed directory request from rank %u", j->src);
        st = DSM_ERR_PROTO;
    } else if (dsm_gaddr_node(m.addr) != dir_self(d)) {
        st = DSM_ERR_BAD_ADDR;
    } else {
        st = dir_home_txn(d, j->src, m.type, m.addr, &reply, &n);
        if (st == DSM_OK && m.type == DIR_MSG_DROP) {
            dir_msg_t ack = {.type = DIR_MSG_ACK, .addr = m.addr};
            reply = malloc(DIR_MSG_FIXED_MAX);
            if (reply == NULL)
                st = DSM_ERR_NOMEM;
            else
                n = dir_msg_encode(&ack, reply);
        }
    }
    (void)dsm_fabric_am_reply(d->fabric, j->src, j->request_id, st, st == DSM_OK ? reply : NULL,
                              st == DSM_OK ? n : 0);
    free(reply);
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
        serve(d, j);
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
