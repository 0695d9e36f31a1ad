/* A node's copies of objects under the directory protocol: a hash map of
 * copies with their MSI state and borrows, lazy eviction of unreferenced
 * shared copies, and the cacher's side of the protocol: INV and RECALL
 * from a home, applied in the progress handler or, while a borrow holds
 * the copy, when it ends; answered by post to the home. */
#include <stdlib.h>
#include <string.h>

#include "dir/ids.h"
#include "dir/internal.h"
#include "dir/msg.h"
#include "util/log.h"

#define LOG_MOD "dir"

dir_copy_t *dir_copy_find(dir_node_t *d, uint64_t addr)
{
    for (dir_copy_t *c = d->copies[dir_bucket(addr)]; c; c = c->chain)
        if (c->addr == addr)
            return c;
    return NULL;
}

dir_copy_t *dir_copy_insert(dir_node_t *d, uint64_t addr)
{
    dir_copy_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->addr = addr;
    unsigned b = dir_bucket(addr);
    c->chain = d->copies[b];
    d->copies[b] = c;
    c->prev = d->newest;
    if (d->newest) d->newest->next = c; else d->oldest = c;
    d->newest = c;
    d->centries++;
    return c;
}

void dir_copy_remove(dir_node_t *d, dir_copy_t *c)
{
    dir_copy_t **pp = &d->copies[dir_bucket(c->addr)];
    while (*pp != c)
        pp = &(*pp)->chain;
    *pp = c->chain;
    if (c->prev) c->prev->next = c->next; else d->oldest = c->next;
    if (c->next) c->next->prev = c->prev; else d->newest = c->prev;
    if (!c->home) {
        d->cbytes -= c->len;
        free(c->data);
    }
    d->centries--;
    free(c);
}

/* Unreferenced shared copies go, oldest first (the home still lists this
 * node as a sharer; its INV will find nothing and be acknowledged).
 * Modified copies stay: they hold the only up-to-date data. */
void dir_copy_evict(dir_node_t *d, uint64_t target)
{
    for (dir_copy_t *c = d->oldest, *n; c && d->cbytes > target; c = n) {
        n = c->next;
        if (c->home || c->pending || c->readers || c->writer || c->state != DIR_S)
            continue;
        dir_copy_remove(d, c);
        d->evictions++;
    }
}

/* Under clock: whether the home's message may be applied to c now. An INV
 * may always be (a request in flight has its copy marked stale instead);
 * a borrow that reads holds back invalidation, one that writes, and a
 * request in flight (its grant may still be on the way), any recall. */
static int may_apply(const dir_copy_t *c, int type, int mode)
{
    if (type == DIR_MSG_INV)
        return c->readers == 0 && !c->writer;
    return !c->pending && !c->writer && (mode != DIR_RECALL_INVALIDATE || c->readers == 0);
}

/* Under clock: apply to c (freed when invalidated) and fill the answer. */
static void apply(dir_node_t *d, dir_copy_t *c, int type, int mode, dir_answer_t *a)
{
    *a = (dir_answer_t){.addr = c->addr, .type = type == DIR_MSG_INV ? DIR_MSG_ACK : DIR_MSG_DATA};
    if (type == DIR_MSG_INV && c->pending) {
        c->stale = 1;   /* the copy is replaced or spent when its request returns */
        return;
    }
    if (type == DIR_MSG_RECALL && !c->home) {
        /* no memory for the data: answer "no copy", the home fails the transaction */
        if ((a->data = malloc(c->len)) == NULL) {
            a->type = DIR_MSG_ACK;
            return;
        }
        memcpy(a->data, c->data, c->len);
        a->len = c->len;
    }
    if (type == DIR_MSG_INV || mode == DIR_RECALL_INVALIDATE)
        dir_copy_remove(d, c);
    else
        c->state = DIR_S;
}

int dir_copy_answer(dir_node_t *d, uint64_t addr, int type, int mode, dir_answer_t *a)
{
    dir_copy_t *c = dir_copy_find(d, addr);
    if (c == NULL) {
        /* An INV of an evicted copy is acknowledged; a RECALL of a copy
         * that is not here (dropped) gets "no copy". */
        *a = (dir_answer_t){.addr = addr, .type = DIR_MSG_ACK};
        return 1;
    }
    if (!may_apply(c, type, mode)) {
        c->owed = type;
        c->owed_mode = mode;
        dir_count(d, DC_HELD_BACK, 1);
        return 0;
    }
    apply(d, c, type, mode, a);
    return 1;
}

int dir_copy_settle(dir_node_t *d, dir_copy_t *c, dir_answer_t *a)
{
    if (c->owed && may_apply(c, c->owed, c->owed_mode)) {
        int type = c->owed;
        c->owed = 0;
        apply(d, c, type, c->owed_mode, a);
        return 1;
    }
    if (c->stale && !c->pending && c->readers == 0 && !c->writer && !c->owed)
        dir_copy_remove(d, c);
    return 0;
}

void dir_answer_send(dir_node_t *d, dir_answer_t *a)
{
    if (a->type == 0)
        return;
    if (dsm_gaddr_node(a->addr) == dir_self(d)) {
        dir_home_answer(d, dir_self(d), a->addr, a->type, NULL, 0);
    } else {
        dir_msg_t m = {.type = (uint16_t)a->type, .addr = a->addr, .len = (uint32_t)a->len, .data = a->data};
        size_t n = dir_msg_size(&m);
        uint8_t *out = malloc(n);
        /* unsent, the home waits for this node: its failure notice ends the wait */
        if (out == NULL || dsm_fabric_am_post(d->fabric, dsm_gaddr_node(a->addr), DSM_AM_DIR_HOME, out,
                                              dir_msg_encode(&m, out)) != DSM_OK)
            DSM_WARN(LOG_MOD, "answer to the home of 0x%llx not sent", (unsigned long long)a->addr);
        free(out);
    }
    free(a->data);
    a->type = 0;
    a->data = NULL;
}

void dir_on_cache(void *ctx, const dsm_am_msg_t *msg)
{
    dir_node_t *d = ctx;
    dir_msg_t m;
    if (dir_msg_decode(msg->data, msg->len, &m) != DSM_OK || (m.type != DIR_MSG_INV && m.type != DIR_MSG_RECALL) ||
        msg->request_id != 0 || dsm_gaddr_node(m.addr) != msg->src_rank) {
        /* only an object's home may invalidate or recall it, and it asks by post */
        DSM_WARN(LOG_MOD, "malformed cache message from rank %u", msg->src_rank);
        if (msg->request_id != 0)
            (void)dsm_fabric_am_reply(d->fabric, msg->src_rank, msg->request_id, DSM_ERR_PROTO, NULL, 0);
        return;
    }
    dir_answer_t a = {0};
    pthread_mutex_lock(&d->clock);
    (void)dir_copy_answer(d, m.addr, m.type, m.mode, &a);
    pthread_mutex_unlock(&d->clock);
    dir_answer_send(d, &a);
}

void dir_copies_free(dir_node_t *d)
{
    while (d->oldest)
        dir_copy_remove(d, d->oldest);
}
