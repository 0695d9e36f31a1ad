/* ticket_lock: next_ticket and now_serving, two atomic words on a host
 * participant chosen from the name (locks spread over the nodes). Threads
 * of one node queue on a local mutex first, so at most one of them holds a
 * ticket; a release with another local thread waiting hands the lock over
 * without a remote operation, at most `handover` times in a row, then
 * serves the next ticket so other nodes are not starved. now_serving is
 * only ever changed by fetch-add and read by gets (never a plain write
 * beside the atomics). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "chan/ids.h"
#include "chan/internal.h"
#include "util/log.h"

enum { NEXT = 0, SERVING = 8, DEFAULT_HANDOVER = 4 };

struct dsm_chan_lock {
    dsm_chan_t *c;
    uint32_t host;
    pthread_mutex_t local;
    int waiters;                /* local threads queued on `local` */
    int held;                   /* this node holds the ticket being served (under `local`) */
    uint32_t handover, handed;  /* the bound; hand-overs in a row so far */
    uint64_t acquired, handed_over;
};

dsm_status_t dsm_chan_lock_create(dsm_node_t *node, const char *name, uint32_t timeout_ms, dsm_chan_lock_t **out)
{
    if (out == NULL || name == NULL)
        return DSM_ERR_INVALID;
    dsm_chan_lock_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return DSM_ERR_NOMEM;
    dsm_status_t st = chan_open(node, name, DSM_CHAN_TICKET_LOCK, "ticket", 16, NULL, NULL, 0, timeout_ms, &l->c);
    if (st != DSM_OK) {
        free(l);
        return st;
    }
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a: every node picks the same host */
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    l->host = (uint32_t)(h % l->c->npeers);
    l->handover = DEFAULT_HANDOVER;
    pthread_mutex_init(&l->local, NULL);
    *out = l;
    return DSM_OK;
}

void dsm_chan_lock_set_handover(dsm_chan_lock_t *l, uint32_t handover) { l->handover = handover; }

static uint64_t word(const dsm_chan_lock_t *l, uint64_t at)
{
    const dsm_chan_t *c = l->c;
    return (l->host == c->self ? c->regions[0].offset : chan_remote_off(c, l->host, 0, 0)) + at;
}

dsm_status_t dsm_chan_lock_acquire(dsm_chan_lock_t *l, uint32_t timeout_ms)
{
    dsm_chan_t *c = l->c;
    dsm_fabric_t *f = c->m->fabric;
    uint32_t rank = c->peers[l->host].rank;
    if (timeout_ms == 0)
        timeout_ms = chan_op_timeout(c);
    __atomic_fetch_add(&l->waiters, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&l->local);
    __atomic_fetch_sub(&l->waiters, 1, __ATOMIC_RELAXED);
    l->acquired++;
    if (l->held) {   /* handed over by a local thread */
        l->handed_over++;
        return DSM_OK;
    }
    uint64_t ticket, serving = 0;
    dsm_status_t st = dsm_fabric_fetch_add(f, rank, DSM_CHAN_REGION, word(l, NEXT), 1, &ticket);
    uint64_t deadline = 0;   /* read the clock only once the lock is not free at once */
    long pause = 500;
    unsigned polls = 0;
    while (st == DSM_OK) {
        st = dsm_fabric_get(f, rank, DSM_CHAN_REGION, word(l, SERVING), &serving, sizeof serving);
        if (st != DSM_OK || serving == ticket)
            break;
        if (deadline == 0) {
            deadline = dsm_deadline_ns(timeout_ms);
        } else if (dsm_now_ns() >= deadline) {
            DSM_ERROR(LOG_MOD, "ticket_lock '%s': ticket %llu not served within %u ms (now serving %llu)", c->name,
                      (unsigned long long)ticket, timeout_ms, (unsigned long long)serving);
            st = DSM_ERR_TIMEOUT;
            break;
        }
        chan_pause(f, &polls, &pause, 100000);
    }
    if (st != DSM_OK) {
        l->acquired--;
        pthread_mutex_unlock(&l->local);
        return st;
    }
    l->held = 1;
    return DSM_OK;
}

dsm_status_t dsm_chan_lock_release(dsm_chan_lock_t *l, dsm_chan_scope_t fence)
{
    dsm_chan_t *c = l->c;
    dsm_status_t st;
    switch (fence) {
    case DSM_CHAN_FENCE_PAIR: st = dsm_chan_fence_pair(c, l->host); break;
    case DSM_CHAN_FENCE_GLOBAL: st = dsm_chan_fence_global(c->m->node); break;
    case DSM_CHAN_FENCE_NONE: st = DSM_OK; break;
    default: st = dsm_chan_fence_thread(c->m->node); break;
    }
    if (__atomic_load_n(&l->waiters, __ATOMIC_RELAXED) > 0 && l->handed < l->handover) {
        l->handed++;
        pthread_mutex_unlock(&l->local);
        return st;
    }
    l->handed = 0;
    l->held = 0;
    uint64_t old;
    dsm_status_t fs = dsm_fabric_fetch_add(c->m->fabric, c->peers[l->host].rank, DSM_CHAN_REGION,
                                           word(l, SERVING), 1, &old);
    pthread_mutex_unlock(&l->local);
    return st != DSM_OK ? st : fs;
}

void dsm_chan_lock_counts(dsm_chan_lock_t *l, uint64_t *acquired, uint64_t *handed_over)
{
    pthread_mutex_lock(&l->local);
    if (acquired)
        *acquired = l->acquired;
    if (handed_over)
        *handed_over = l->handed_over;
    pthread_mutex_unlock(&l->local);
}

void dsm_chan_lock_destroy(dsm_chan_lock_t *l)
{
    if (l == NULL)
        return;
    dsm_chan_destroy(l->c);
    pthread_mutex_destroy(&l->local);
    free(l);
}
