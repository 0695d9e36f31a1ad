/* barrier: an SST of one counter per participant. Entering round k: a
 * global fence (what was written before is placed), the row set to k and
 * pushed to all, then wait until every row is at least k. Rows only grow,
 * so a fast participant's next round never hides this one. */
#include <stdlib.h>

#include "chan/internal.h"
#include "chan/sst.h"
#include "util/log.h"

struct dsm_chan_barrier {
    dsm_chan_sst_t *sst;
    uint64_t round;
};

dsm_status_t dsm_chan_barrier_create(dsm_node_t *node, const char *name, uint32_t timeout_ms,
                                     dsm_chan_barrier_t **out)
{
    if (out == NULL)
        return DSM_ERR_INVALID;
    dsm_chan_barrier_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return DSM_ERR_NOMEM;
    dsm_status_t st = chan_sst_open(node, name, DSM_CHAN_BARRIER, 8, timeout_ms, &b->sst);
    if (st != DSM_OK) {
        free(b);
        return st;
    }
    *out = b;
    return DSM_OK;
}

dsm_status_t dsm_chan_barrier_wait(dsm_chan_barrier_t *b, uint32_t timeout_ms)
{
    dsm_chan_sst_t *s = b->sst;
    dsm_chan_t *c = s->c;
    if (timeout_ms == 0)
        timeout_ms = chan_op_timeout(c);
    dsm_status_t st = dsm_chan_fence_global(c->m->node);
    uint64_t round = ++b->round;
    dsm_chan_ack_t key = {{0}};
    if (st == DSM_OK && (st = chan_sst_store_word(s, round)) == DSM_OK)
        st = dsm_chan_sst_push_broadcast(s, &key);
    dsm_status_t w = dsm_chan_ack_wait(&key);
    if (st == DSM_OK)
        st = w;
    if (st != DSM_OK)
        return st;
    uint64_t deadline = dsm_deadline_ns(timeout_ms);
    long pause = 200;
    unsigned polls = 0;
    for (uint32_t p = 0; p < c->npeers;) {
        if (__atomic_load_n((const uint64_t *)(const void *)chan_sst_row(s, p), __ATOMIC_ACQUIRE) >= round) {
            p++;
            continue;
        }
        if (dsm_now_ns() >= deadline) {
            DSM_ERROR(LOG_MOD, "barrier '%s' round %llu: rank %u did not arrive within %u ms", c->name,
                      (unsigned long long)round, c->peers[p].rank, timeout_ms);
            return DSM_ERR_TIMEOUT;
        }
        if (dsm_node_peer_state(c->m->node, c->peers[p].rank) == DSM_ERR_PEER_DEAD) {
            DSM_ERROR(LOG_MOD, "barrier '%s' round %llu: rank %u died", c->name, (unsigned long long)round,
                      c->peers[p].rank);
            return DSM_ERR_PEER_DEAD;
        }
        chan_pause(c->m->fabric, &polls, &pause, 50000);
    }
    return DSM_OK;
}

void dsm_chan_barrier_destroy(dsm_chan_barrier_t *b)
{
    if (b == NULL)
        return;
    dsm_chan_sst_destroy(b->sst);
    free(b);
}
