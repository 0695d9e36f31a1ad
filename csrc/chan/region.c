/* shared_region: the same number of bytes on every participant, read and
 * written one-sidedly with no consistency beyond the fabric's. */
#include <stdlib.h>

#include "chan/internal.h"

struct dsm_chan_region {
    dsm_chan_t *c;
};

dsm_status_t dsm_chan_region_create(dsm_node_t *node, const char *name, size_t size, uint32_t timeout_ms,
                                    dsm_chan_region_t **out)
{
    if (out == NULL)
        return DSM_ERR_INVALID;
    dsm_chan_region_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return DSM_ERR_NOMEM;
    dsm_status_t st = chan_open(node, name, DSM_CHAN_SHARED_REGION, "mem", size, NULL, NULL, 0, timeout_ms, &r->c);
    if (st != DSM_OK) {
        free(r);
        return st;
    }
    *out = r;
    return DSM_OK;
}

void *dsm_chan_region_mine(dsm_chan_region_t *r, size_t *len) { return dsm_chan_region_local(r->c, 0, len); }

dsm_status_t dsm_chan_region_put(dsm_chan_region_t *r, uint32_t peer, uint64_t offset, const void *src, size_t len)
{
    dsm_chan_ack_t key = {{0}};
    dsm_status_t st = dsm_chan_put_async(r->c, peer, 0, offset, src, len, &key);
    dsm_status_t w = dsm_chan_ack_wait(&key);
    return st != DSM_OK ? st : w;
}

dsm_status_t dsm_chan_region_get(dsm_chan_region_t *r, uint32_t peer, uint64_t offset, void *dst, size_t len)
{
    dsm_chan_ack_t key = {{0}};
    dsm_status_t st = dsm_chan_get_async(r->c, peer, 0, offset, dst, len, &key);
    dsm_status_t w = dsm_chan_ack_wait(&key);
    return st != DSM_OK ? st : w;
}

dsm_chan_t *dsm_chan_region_chan(dsm_chan_region_t *r) { return r->c; }

void dsm_chan_region_destroy(dsm_chan_region_t *r)
{
    if (r == NULL)
        return;
    dsm_chan_destroy(r->c);
    free(r);
}
