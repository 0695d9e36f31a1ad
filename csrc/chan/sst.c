/* sst: a shared state table, one row per participant, each an owned value
 * (slot.h) its participant writes locally and pushes to every peer's copy;
 * rows are read locally. */
#include <stdlib.h>

#include "chan/internal.h"
#include "chan/slot.h"
#include "chan/sst.h"

dsm_status_t chan_sst_open(dsm_node_t *node, const char *name, dsm_chan_kind_t kind, size_t row_size,
                           uint32_t timeout_ms, dsm_chan_sst_t **out)
{
    if (out == NULL || row_size == 0 || row_size > 4096)
        return DSM_ERR_INVALID;
    dsm_chan_sst_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return DSM_ERR_NOMEM;
    s->row_size = row_size;
    s->slot = chan_slot_bytes(row_size);
    dsm_chan_t *c = NULL;
    dsm_status_t st = dsm_chan_create(node, name, kind, &c);
    if (st == DSM_OK) {
        static const char *const names[] = {"row_size"};
        st = dsm_chan_set_shape(c, names, &(uint64_t){row_size}, 1);
        if (st == DSM_OK)
            st = dsm_chan_add_region(c, "rows", s->slot * c->npeers, NULL);
        st = chan_finish(c, st, timeout_ms);
    }
    if (st != DSM_OK) {
        free(s);
        return st;
    }
    s->c = c;
    s->settle_ms = chan_op_timeout(s->c);
    *out = s;
    return DSM_OK;
}

dsm_status_t dsm_chan_sst_create(dsm_node_t *node, const char *name, size_t row_size, uint32_t timeout_ms,
                                 dsm_chan_sst_t **out)
{
    return chan_sst_open(node, name, DSM_CHAN_SST, row_size, timeout_ms, out);
}

dsm_status_t dsm_chan_sst_store_mine(dsm_chan_sst_t *s, const void *src)
{
    dsm_status_t st = dsm_chan_ack_wait(&s->pending);   /* the last push reads this row */
    chan_slot_write(chan_sst_row(s, s->c->self), s->row_size, ++s->version, src);
    return st;
}

dsm_status_t chan_sst_store_word(dsm_chan_sst_t *s, uint64_t value)
{
    if (s->row_size != sizeof value)
        return DSM_ERR_INVALID;
    dsm_status_t st = dsm_chan_ack_wait(&s->pending);
    chan_slot_write(chan_sst_row(s, s->c->self), sizeof value, ++s->version, &value);
    return st;
}

dsm_status_t dsm_chan_sst_push_broadcast(dsm_chan_sst_t *s, dsm_chan_ack_t *key)
{
    dsm_chan_t *c = s->c;
    dsm_status_t st = DSM_OK;
    uint64_t at = (uint64_t)c->self * s->slot;
    for (uint32_t p = 0; p < c->npeers && st == DSM_OK; p++)
        if (p != c->self)
            st = dsm_chan_put_async(c, p, 0, at, chan_sst_row(s, c->self), s->slot, &s->pending);
    if (key == NULL) {
        dsm_status_t w = dsm_chan_ack_wait(&s->pending);
        return st != DSM_OK ? st : w;
    }
    dsm_chan_ack_union(key, &s->pending);
    return st;
}

dsm_status_t dsm_chan_sst_read(dsm_chan_sst_t *s, uint32_t peer, void *dst)
{
    if (peer >= s->c->npeers)
        return DSM_ERR_INVALID;
    return chan_read_settled(s->c, s->c->self, 0, (uint64_t)peer * s->slot, s->row_size, dst, s->settle_ms, "sst");
}

dsm_chan_t *dsm_chan_sst_chan(dsm_chan_sst_t *s) { return s->c; }

void dsm_chan_sst_destroy(dsm_chan_sst_t *s)
{
    if (s == NULL)
        return;
    (void)dsm_chan_ack_wait(&s->pending);
    dsm_chan_destroy(s->c);
    free(s);
}
