/* owned_var: one writer, every participant reads (slot.h's layout). Push:
 * the owner's store writes every reader's copy and reads are local; pull:
 * reads fetch the owner's copy. The owner waits for its last pushes before
 * it rewrites its copy, their source. */
#include <stdlib.h>

#include "chan/ids.h"
#include "chan/internal.h"
#include "chan/slot.h"
#include "util/log.h"

struct dsm_chan_owned {
    dsm_chan_t *c;
    uint32_t owner;
    size_t size;
    dsm_chan_mode_t mode;
    uint64_t version;
    uint32_t settle_ms;
    dsm_chan_ack_t pending;     /* the last store's pushes */
};

dsm_status_t chan_read_settled(dsm_chan_t *c, uint32_t peer, uint32_t r, uint64_t at, size_t size, void *dst,
                               uint32_t settle_ms, const char *what)
{
    size_t bytes = chan_slot_bytes(size);
    uint8_t copy[bytes];
    uint64_t deadline = 0, reads = 0;
    long pause = 200;
    for (;;) {
        const uint8_t *slot;
        if (peer == c->self) {
            slot = chan_local(c, r) + at;
        } else {
            dsm_chan_ack_t key = {{0}};
            dsm_status_t st = dsm_chan_get_async(c, peer, r, at, copy, bytes, &key);
            if (st == DSM_OK)
                st = dsm_chan_ack_wait(&key);
            if (st != DSM_OK)
                return st;
            slot = copy;
        }
        reads++;
        if (chan_slot_read(slot, size, dst, NULL))
            return DSM_OK;
        if (deadline == 0)
            deadline = dsm_deadline_ns(settle_ms);
        else if (dsm_now_ns() >= deadline)
            break;
        dsm_fabric_backoff(c->m->fabric, &pause, 100000);
    }
    DSM_ERROR(LOG_MOD, "%s '%s': the value's checksum did not settle within %u ms (%llu reads)", what, c->name,
              settle_ms, (unsigned long long)reads);
    return DSM_ERR_TIMEOUT;
}

dsm_status_t dsm_chan_owned_create(dsm_node_t *node, const char *name, uint32_t owner, size_t size,
                                   dsm_chan_mode_t mode, uint32_t timeout_ms, dsm_chan_owned_t **out)
{
    if (out == NULL || size == 0 || size > 4096 || (mode != DSM_CHAN_PUSH && mode != DSM_CHAN_PULL))
        return DSM_ERR_INVALID;
    dsm_chan_owned_t *v = calloc(1, sizeof *v);
    if (v == NULL)
        return DSM_ERR_NOMEM;
    static const char *const names[] = {"owner", "size", "mode"};
    const uint64_t shape[] = {owner, size, mode};
    dsm_status_t st = chan_open(node, name, DSM_CHAN_OWNED_VAR, "ov", chan_slot_bytes(size), names, shape, 3,
                                timeout_ms, &v->c);
    if (st == DSM_OK && owner >= v->c->npeers) {
        dsm_chan_destroy(v->c);
        st = DSM_ERR_INVALID;
    }
    if (st != DSM_OK) {
        free(v);
        return st;
    }
    v->owner = owner;
    v->size = size;
    v->mode = mode;
    v->settle_ms = chan_op_timeout(v->c);
    *out = v;
    return DSM_OK;
}

dsm_status_t dsm_chan_owned_store(dsm_chan_owned_t *v, const void *src, dsm_chan_ack_t *key)
{
    dsm_chan_t *c = v->c;
    if (c->self != v->owner)
        return DSM_ERR_STATE;
    dsm_status_t st = dsm_chan_ack_wait(&v->pending);
    chan_slot_write(chan_local(c, 0), v->size, ++v->version, src);
    if (v->mode == DSM_CHAN_PULL)
        return st;
    size_t bytes = chan_slot_bytes(v->size);
    for (uint32_t p = 0; p < c->npeers && st == DSM_OK; p++)
        if (p != c->self)
            st = dsm_chan_put_async(c, p, 0, 0, chan_local(c, 0), bytes, &v->pending);
    if (key == NULL) {
        dsm_status_t w = dsm_chan_ack_wait(&v->pending);
        return st != DSM_OK ? st : w;
    }
    dsm_chan_ack_union(key, &v->pending);
    return st;
}

dsm_status_t dsm_chan_owned_load(dsm_chan_owned_t *v, void *dst)
{
    uint32_t from = v->mode == DSM_CHAN_PUSH ? v->c->self : v->owner;
    return chan_read_settled(v->c, from, 0, 0, v->size, dst, v->settle_ms, "owned_var");
}

void dsm_chan_owned_set_settle_ms(dsm_chan_owned_t *v, uint32_t ms) { v->settle_ms = ms; }
dsm_chan_t *dsm_chan_owned_chan(dsm_chan_owned_t *v) { return v->c; }

void dsm_chan_owned_destroy(dsm_chan_owned_t *v)
{
    if (v == NULL)
        return;
    (void)dsm_chan_ack_wait(&v->pending);
    dsm_chan_destroy(v->c);
    free(v);
}
