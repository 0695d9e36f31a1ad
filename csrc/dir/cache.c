/* A node's copies of objects under the directory protocol: a hash map of
 * copies with their MSI state and borrows, lazy eviction of unreferenced
 * shared copies, and the cacher's side of the protocol (INV and RECALL from
 * a home), answered in the progress context without blocking. */
#include <stdlib.h>
#include <string.h>

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

dsm_status_t dir_copy_apply(dir_node_t *d, uint64_t addr, int type, int mode, uint8_t **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    int invalidate = type == DIR_MSG_INV || mode == DIR_RECALL_INVALIDATE;
    pthread_mutex_lock(&d->clock);
    dir_copy_t *c = dir_copy_find(d, addr);
    dsm_status_t st = DSM_OK;
    if (c == NULL) {
        /* An INV for an evicted copy is fine; a RECALL of a copy that is
         * not here means the home's record is wrong. */
        st = type == DIR_MSG_INV ? DSM_OK : DSM_ERR_BAD_ADDR;
    } else if (c->pending || c->writer || (invalidate && c->readers)) {
        st = DSM_ERR_STATE;   /* busy: the home asks again */
    } else {
        if (type == DIR_MSG_RECALL && !c->home) {
            *data = malloc(c->len);
            if (*data == NULL) {
                st = DSM_ERR_NOMEM;
                goto out;
            }
            memcpy(*data, c->data, c->len);
            *len = c->len;
        }
        if (invalidate)
            dir_copy_remove(d, c);
        else
            c->state = DIR_S;
    }
out:
    pthread_mutex_unlock(&d->clock);
    return st;
}

void dir_on_cache(void *ctx, const dsm_am_msg_t *msg)
{
    dir_node_t *d = ctx;
    dir_msg_t m;
    uint8_t *data = NULL, *out = NULL;
    size_t len = 0, n = 0;
    dsm_status_t st = dir_msg_decode(msg->data, msg->len, &m);
    if (st != DSM_OK || (m.type != DIR_MSG_INV && m.type != DIR_MSG_RECALL)) {
        DSM_WARN(LOG_MOD, "malformed cache message from rank %u", msg->src_rank);
        st = DSM_ERR_PROTO;
    } else if (dsm_gaddr_node(m.addr) != msg->src_rank) {
        /* Only an object's home may invalidate or recall it. */
        st = DSM_ERR_BAD_ADDR;
    } else {
        st = dir_copy_apply(d, m.addr, m.type, m.mode, &data, &len);
    }
    if (st == DSM_OK) {
        dir_msg_t rep = {.type = m.type == DIR_MSG_INV ? DIR_MSG_ACK : DIR_MSG_DATA, .addr = m.addr,
                         .len = (uint32_t)len, .data = data};
        if (rep.type == DIR_MSG_DATA && len == 0) {
            st = DSM_ERR_BAD_ADDR;
        } else {
            n = dir_msg_size(&rep);
            out = malloc(n);
            if (out == NULL)
                st = DSM_ERR_NOMEM;
            else
                n = dir_msg_encode(&rep, out);
        }
    }
    if (msg->request_id != 0)
        (void)dsm_fabric_am_reply(d->fabric, msg->src_rank, msg->request_id, st, st == DSM_OK ? out : NULL,
                                  st == DSM_OK ? n : 0);
    free(data);
    free(out);
}

void dir_copies_free(dir_node_t *d)
{
    while (d->oldest)
        dir_copy_remove(d, d->oldest);
}
