/* ticket_lock: next_ticket and now_serving, two atomic words on a host
 * participant chosen from the name (locks spread over the nodes). Threads
 * of one node queue on a local mutex first, so at most one of them holds a
 * ticket; a release with another local thread waiting hands the lock over
 * without a remote operation, at most `handover` times in a row, then
 * serves the next ticket so other nodes are not starved. now_serving is
 * only ever changed by fetch-add and read by gets (never a plain write
 * beside the atomics).
 *
 * A node that released the lock last knows now_serving as its release left
 * it; while no other node has taken a ticket since, a CAS of next_ticket
 * from that value takes the lock in one operation instead of a fetch-add
 * and a read. */
#include <pthread.h>
#include <stdbool.h>
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
    /* now_serving as this node's last release left it (free_known): a
     * ticket taken by CAS of next from that value is served at once,
     * since now_serving never passes next (under `local`) */
    uint64_t free_at;
    int free_known;
    /* this node's last ticket was not served at once: other nodes want
     * the lock, so a CAS would mostly fail (under `local`) */
    int contended;
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
    if (l->free_known && !l->contended) {
        uint64_t seen;
        dsm_status_t cs = dsm_fabric_cas(f, rank, DSM_CHAN_REGION, word(l, NEXT), l->free_at, l->free_at + 1, &seen);
        if (cs == DSM_OK && seen == l->free_at) {
            l->held = 1;
            return DSM_OK;
        }
    }
    dsm_status_t st = dsm_fabric_fetch_add(f, rank, DSM_CHAN_REGION, word(l, NEXT), 1, &ticket);
    uint64_t deadline = 0;   /* read the clock only once the lock is not free at once */
    long pause = 500;
    unsigned polls = 0, reads = 0;
    while (st == DSM_OK) {
        st = dsm_fabric_get(f, rank, DSM_CHAN_REGION, word(l, SERVING), &serving, sizeof serving);
        reads++;
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
    l->contended = reads > 1;
    return DSM_OK;
}

/* A release goes to a local thread waiting for the lock (then 1: no
 * remote operation), or, after `handover` in a row, to the next ticket. */
static int hands_over(dsm_chan_lock_t *l, int may)
{
    if (may && __atomic_load_n(&l->waiters, __ATOMIC_RELAXED) > 0 && l->handed < l->handover) {
        l->handed++;
        return 1;
    }
    l->handed = 0;
    l->held = 0;
    return 0;
}

/* now_serving's fetch-add, then the local mutex goes; st is the work's. */
static dsm_status_t serve_next(dsm_chan_lock_t *l, dsm_status_t st)
{
    dsm_chan_t *c = l->c;
    uint64_t old;
    dsm_status_t fs = dsm_fabric_fetch_add(c->m->fabric, c->peers[l->host].rank, DSM_CHAN_REGION,
                                           word(l, SERVING), 1, &old);
    l->free_at = old + 1;
    l->free_known = fs == DSM_OK;
    pthread_mutex_unlock(&l->local);
    return st != DSM_OK ? st : fs;
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
    if (hands_over(l, 1)) {
        pthread_mutex_unlock(&l->local);
        return st;
    }
    return serve_next(l, st);
}

dsm_status_t chan_lock_release_after(dsm_chan_lock_t *l, dsm_chan_t *c, uint32_t peer)
{
    const dsm_chan_t *lc = l->c;
    if (hands_over(l, 1)) {
        dsm_status_t st = dsm_chan_fence_pair(c, peer);
        pthread_mutex_unlock(&l->local);
        return st;
    }
    if (peer == c->self || c->peers[peer].rank != lc->peers[l->host].rank)
        return serve_next(l, dsm_chan_fence_pair(c, peer));
    /* the writes to the lock's host: its fetch-add leaves behind them on
     * their connection (in the caller's batch, one message), which places
     * them before it applies the add */
    dsm_status_t st = serve_next(l, DSM_OK);
    dsm_status_t ws = chan_fenced_by_atomic(c, peer);
    return st != DSM_OK ? st : ws;
}

static uint32_t host_rank(const dsm_chan_lock_t *l) { return l->c->peers[l->host].rank; }

/* ls[0..n)'s indices ordered by their host's rank: a thread's batch holds
 * one peer's requests, so a window's go host by host. */
static void by_host(dsm_chan_lock_t *const *ls, uint32_t n, uint32_t *ord)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        for (; j > 0 && host_rank(ls[ord[j - 1]]) > host_rank(ls[i]); j--) ord[j] = ord[j - 1];
        ord[j] = i;
    }
}

/* One round over each ls[i] with want[i], all in flight together (one
 * message per host where emulated): with `cas`, the CAS of next from
 * val[i], want[i] keeping 1 where the ticket taken is served at once;
 * without, a read of now_serving into val[i], want[i] keeping 1 where the
 * read succeeded. */
static dsm_status_t lock_round(dsm_chan_lock_t *const *ls, uint32_t n, const uint32_t *ord, bool cas, uint64_t *val,
                               uint8_t *want)
{
    dsm_op_t op[n];
    uint8_t issued[n];
    dsm_fabric_t *f = ls[0]->c->m->fabric;
    dsm_status_t st = DSM_OK;
    memset(issued, 0, n);
    dsm_fabric_batch_begin(f);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = ord[k];
        if (!want[i] || st != DSM_OK)
            continue;
        dsm_chan_lock_t *l = ls[i];
        uint32_t rank = host_rank(l);
        st = cas ? dsm_fabric_cas_nb(f, rank, DSM_CHAN_REGION, word(l, NEXT), val[i], val[i] + 1, &op[i])
                 : dsm_fabric_get_nb(f, rank, DSM_CHAN_REGION, word(l, SERVING), &val[i], sizeof val[i], &op[i]);
        issued[i] = st == DSM_OK;
    }
    dsm_fabric_batch_end(f);
    for (uint32_t i = 0; i < n; i++) {
        if (!issued[i]) {
            want[i] = 0;
            continue;
        }
        dsm_status_t ws = dsm_fabric_wait(&op[i]);
        if (ws != DSM_OK && st == DSM_OK)
            st = ws;
        want[i] = ws == DSM_OK && (!cas || op[i].result == val[i]);
    }
    return st;
}

dsm_status_t chan_lock_try_many(dsm_chan_lock_t *const *ls, uint32_t n, uint8_t *got)
{
    if (n == 0)
        return DSM_OK;
    uint8_t mine[n], want[n], rest[n];
    uint64_t expect[n];
    uint32_t ord[n];
    by_host(ls, n, ord);
    for (uint32_t i = 0; i < n; i++) {
        dsm_chan_lock_t *l = ls[i];
        got[i] = want[i] = rest[i] = 0;
        expect[i] = 0;
        mine[i] = pthread_mutex_trylock(&l->local) == 0;
        if (!mine[i])
            continue;   /* a local thread has it or waits for it */
        if (l->held) {   /* handed over by a local thread */
            got[i] = 1;
            l->handed_over++;
        } else if (l->free_known) {
            want[i] = 1;
            expect[i] = l->free_at;
        } else {
            rest[i] = 1;
        }
    }
    /* first from the value this node's last release left: one round trip
     * while no other node took the lock since */
    dsm_status_t st = lock_round(ls, n, ord, true, expect, want);
    for (uint32_t i = 0; i < n; i++) {
        if (want[i])
            got[i] = 1;
        else if (mine[i] && !got[i])
            rest[i] = 1;
    }
    /* the others: read now_serving, then take the ticket it names, served
     * at once; a lock another node took meanwhile stays untaken */
    if (st == DSM_OK)
        st = lock_round(ls, n, ord, false, expect, rest);
    if (st == DSM_OK)
        st = lock_round(ls, n, ord, true, expect, rest);
    for (uint32_t i = 0; i < n; i++) {
        dsm_chan_lock_t *l = ls[i];
        if (rest[i] && st == DSM_OK)
            got[i] = 1;
        if (got[i]) {
            l->held = 1;
            l->acquired++;
        } else if (mine[i]) {
            pthread_mutex_unlock(&l->local);
        }
    }
    return st;
}

dsm_status_t chan_lock_release_issue(dsm_chan_lock_t *const *ls, uint32_t n, int hand, dsm_op_t *op,
                                     uint8_t *issued)
{
    uint32_t ord[n];
    by_host(ls, n, ord);
    dsm_status_t st = DSM_OK;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = ord[k];
        dsm_chan_lock_t *l = ls[i];
        issued[i] = 0;
        if (hands_over(l, hand)) {
            pthread_mutex_unlock(&l->local);
            continue;
        }
        l->free_known = 0;
        dsm_status_t fs = dsm_fabric_fetch_add_nb(l->c->m->fabric, host_rank(l), DSM_CHAN_REGION, word(l, SERVING), 1,
                                                  &op[i]);
        if (fs != DSM_OK) {
            if (st == DSM_OK)
                st = fs;
            pthread_mutex_unlock(&l->local);
            continue;
        }
        issued[i] = 1;
    }
    return st;
}

dsm_status_t chan_lock_release_finish(dsm_chan_lock_t *const *ls, uint32_t n, dsm_op_t *op, const uint8_t *issued)
{
    dsm_status_t st = DSM_OK;
    for (uint32_t i = 0; i < n; i++) {
        if (!issued[i])
            continue;
        dsm_chan_lock_t *l = ls[i];
        dsm_status_t ws = dsm_fabric_wait(&op[i]);
        if (ws == DSM_OK) {
            l->free_at = op[i].result + 1;
            l->free_known = 1;
        } else if (st == DSM_OK) {
            st = ws;
        }
        pthread_mutex_unlock(&l->local);
    }
    return st;
}

dsm_status_t chan_lock_release_many(dsm_chan_lock_t *const *ls, uint32_t n)
{
    if (n == 0)
        return DSM_OK;
    dsm_op_t op[n];
    uint8_t issued[n];
    dsm_fabric_t *f = ls[0]->c->m->fabric;
    dsm_fabric_batch_begin(f);
    dsm_status_t st = chan_lock_release_issue(ls, n, 1, op, issued);
    dsm_fabric_batch_end(f);
    dsm_status_t ws = chan_lock_release_finish(ls, n, op, issued);
    return st != DSM_OK ? st : ws;
}

uint32_t chan_lock_host_rank(const dsm_chan_lock_t *l) { return host_rank(l); }

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
