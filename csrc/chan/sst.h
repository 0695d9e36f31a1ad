/* The sst's state, for the objects built on it (the barrier). */
#ifndef DSM_CHAN_SST_H
#define DSM_CHAN_SST_H

#include "chan/internal.h"

struct dsm_chan_sst {
    dsm_chan_t *c;
    size_t row_size, slot;      /* a row's value bytes, its slot's bytes */
    uint64_t version;
    uint32_t settle_ms;
    dsm_chan_ack_t pending;     /* the last push_broadcast's puts */
};

static inline uint8_t *chan_sst_row(const dsm_chan_sst_t *s, uint32_t peer)
{
    return chan_local(s->c, 0) + (uint64_t)peer * s->slot;
}

/* An SST endpoint of `kind` (the barrier's is its own kind). */
dsm_status_t chan_sst_open(dsm_node_t *node, const char *name, dsm_chan_kind_t kind, size_t row_size,
                           uint32_t timeout_ms, dsm_chan_sst_t **out);

/* dsm_chan_sst_store_mine for a row of one word (the barrier's round): the
 * size is known here, so no multi-word path is compiled in. */
dsm_status_t chan_sst_store_word(dsm_chan_sst_t *s, uint64_t value);

#endif
