/* Who holds an exported property's weight, so that a node's death returns
 * its share (the weighted reference count of trust.c, across nodes).
 *
 * A property's trustee counts every trust's weight in total_weight. From the
 * property's first export its node also keeps how much of that each other
 * node holds (dsm_deleg_shares_t, under R->hlock); its own share is the
 * rest. The bytes of an exported trust stay in the exporter's share until
 * the importer moves them into its own (DSM_AM_DELEG_MOVE, answered before
 * the import returns, so no drop of the imported trust can overtake it), or
 * the exporter moves them into the share of the node it names
 * (dsm_deleg_trust_export_to, answered before the bytes exist; that node's
 * import then moves nothing); remote drops and refills change their
 * sender's share as the trustee serves them. A property never exported has
 * no table and pays nothing.
 *
 * When a node dies (its death notice, any thread) its share of every
 * exported property moves to `due`, and the node is written off: its
 * trustees take `due` from their totals when the runtime is stopped next
 * (recover, start: dsm_deleg_shares_settle) or when a total reaches zero,
 * freeing what reaches zero as a last drop would. What later concerns a
 * written-off node also goes to `due`: a move from it credits the weight
 * back (the write-off counted it as the dead node's, but the importer holds
 * it), and a drop of it served late is not subtracted twice. A property
 * already freed refuses the move (DSM_ERR_BAD_ADDR: the import fails)
 * rather than revive. A move after the importer was written off (its death
 * overtook its request) is written off with it: no live node holds it.
 *
 * An importer that dies before its move left it tells nobody that it had
 * the bytes; nothing but the bytes' route knows it, so an export to anyone
 * keeps the weight in the exporter's share, and the property lives until
 * the exporter goes. An export that names its importer has no such window:
 * the weight is the importer's from the export on, written off with it
 * whether it died before, during or after its import; an export to a node
 * already written off is refused (DSM_ERR_NO_PEER), the weight staying
 * with the exporter's trust. Drops left unserved in a run that lost a node
 * (recovery clears them) stay lost too: the property then lives until its
 * runtime is destroyed, never shorter than its trusts. The bytes name a
 * rank, not a node's lifetime: a trust a dead node exported and another
 * node imports only after a new node joined in the dead one's rank is
 * taken from the new node's share, not credited back. */
#include <stdlib.h>
#include <string.h>

#include "deleg/remote.h"
#include "util/log.h"

#define LOG "deleg"

dsm_status_t dsm_deleg_shares_new(dsm_deleg_prop_t *p)
{
    if (p->shares) return DSM_OK;
    p->shares = calloc(1, sizeof *p->shares);
    return p->shares ? DSM_OK : DSM_ERR_NOMEM;
}

/* Rank's share changes by delta (under hlock). This node's own is the rest. */
static void account(dsm_deleg_remote_t *R, dsm_deleg_shares_t *sh, uint32_t rank, int64_t delta)
{
    if (rank == R->self || rank >= RMAX_NODES) return;
    if (R->written & (1u << rank)) sh->due += delta;
    else sh->w[rank] += delta;
}

void dsm_deleg_shares_note(dsm_deleg_remote_t *R, dsm_deleg_prop_t *p, uint32_t rank, int64_t delta)
{
    pthread_mutex_lock(&R->hlock);
    if (p->shares) account(R, p->shares, rank, delta);
    pthread_mutex_unlock(&R->hlock);
}

dsm_status_t dsm_deleg_shares_move(dsm_deleg_remote_t *R, uint32_t handle, unsigned trustee, uint32_t from,
                                   uint32_t to, uint64_t weight, int named)
{
    if (weight > INT64_MAX) return DSM_ERR_PROTO;
    pthread_mutex_lock(&R->hlock);
    dsm_deleg_prop_t *p = dsm_deleg_rhandle_find(R, handle, trustee);
    if (!p || !p->shares) {
        pthread_mutex_unlock(&R->hlock);
        return DSM_ERR_BAD_ADDR;
    }
    if (named && to < RMAX_NODES && to != R->self && (R->written & (1u << to))) {
        /* an export to a node already written off: the weight stays the
         * exporter's, who keeps it (the export fails) */
        pthread_mutex_unlock(&R->hlock);
        return DSM_ERR_NO_PEER;
    }
    account(R, p->shares, from, -(int64_t)weight);
    account(R, p->shares, to, (int64_t)weight);
    pthread_mutex_unlock(&R->hlock);
    return DSM_OK;
}

void dsm_deleg_rmove_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_deleg_remote_t *R = ctx;
    rmove_t m;
    dsm_status_t st = dsm_rmove_decode(msg->data, msg->len, &m);
    int named = st == DSM_OK && m.to != RMOVE_TO_SENDER;
    if (st == DSM_OK && (m.trustee >= R->T || m.from >= RMAX_NODES || (named && m.to >= RMAX_NODES)))
        st = DSM_ERR_PROTO;
    if (st == DSM_OK)
        st = dsm_deleg_shares_move(R, m.handle, m.trustee, m.from, named ? m.to : msg->src_rank, m.weight, named);
    if (msg->request_id) dsm_fabric_am_reply(R->fabric, msg->src_rank, msg->request_id, st, NULL, 0);
}

void dsm_deleg_shares_lose(dsm_deleg_remote_t *R, uint32_t rank)
{
    if (rank >= RMAX_NODES) return;
    pthread_mutex_lock(&R->hlock);
    if (!(R->written & (1u << rank))) {
        R->written |= 1u << rank;
        for (uint32_t i = 1; i < RHANDLES; i++) {
            dsm_deleg_prop_t *p = atomic_load_explicit(&R->htab[i].prop, memory_order_relaxed);
            if (!p || !p->shares) continue;
            p->shares->due += p->shares->w[rank];
            p->shares->w[rank] = 0;
        }
    }
    pthread_mutex_unlock(&R->hlock);
}

void dsm_deleg_shares_rank_joined(dsm_deleg_remote_t *R, uint32_t rank)
{
    if (rank >= RMAX_NODES) return;
    pthread_mutex_lock(&R->hlock);
    R->written &= ~(1u << rank);
    pthread_mutex_unlock(&R->hlock);
}

/* Take p's due from its total (under hlock, on its trustee or with the
 * runtime stopped). */
static void fold_locked(dsm_deleg_prop_t *p)
{
    dsm_deleg_shares_t *sh = p->shares;
    if (!sh || !sh->due) return;
    int64_t d = sh->due;
    sh->due = 0;
    if (d < 0) {
        p->total_weight += (uint64_t)-d;
    } else if ((uint64_t)d > p->total_weight) {
        DSM_ERROR(LOG, "a dead node's share (%lld) exceeds the property's weight (%llu): written off to zero",
                  (long long)d, (unsigned long long)p->total_weight);
        p->total_weight = 0;
    } else {
        p->total_weight -= (uint64_t)d;
    }
}

/* p is going (total zero): no handle finds it any more. */
static void forget_locked(dsm_deleg_remote_t *R, dsm_deleg_prop_t *p)
{
    if (p->handle) atomic_store_explicit(&R->htab[p->handle & 0xffff].prop, NULL, memory_order_release);
    free(p->shares);
    p->shares = NULL;
}

int dsm_deleg_shares_release(dsm_deleg_prop_t *p)
{
    dsm_deleg_remote_t *R = p->rt->remote;
    if (!R) return 1;
    pthread_mutex_lock(&R->hlock);
    fold_locked(p);
    int gone = p->total_weight == 0;
    if (gone) forget_locked(R, p);
    pthread_mutex_unlock(&R->hlock);
    return gone;
}

void dsm_deleg_shares_fold(dsm_deleg_prop_t *p)
{
    dsm_deleg_remote_t *R = p->rt->remote;
    if (!R) return;
    pthread_mutex_lock(&R->hlock);
    fold_locked(p);
    pthread_mutex_unlock(&R->hlock);
}

void dsm_deleg_shares_settle(dsm_deleg_rt_t *rt)
{
    dsm_deleg_remote_t *R = rt->remote;
    if (!R) return;
    dsm_deleg_prop_t **gone = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&R->hlock);
    for (uint32_t i = 1; i < RHANDLES; i++) {
        dsm_deleg_prop_t *p = atomic_load_explicit(&R->htab[i].prop, memory_order_relaxed);
        if (!p || p->rt != rt || !p->shares || !p->shares->due) continue;
        if (n == cap) {
            size_t c = cap ? 2 * cap : 16;
            dsm_deleg_prop_t **g = realloc(gone, c * sizeof *g);
            if (!g) break; /* the rest at the next settle */
            gone = g;
            cap = c;
        }
        fold_locked(p);
        if (p->total_weight) continue;
        forget_locked(R, p);
        gone[n++] = p;
    }
    pthread_mutex_unlock(&R->hlock);
    /* as a last drop would free them, outside the lock */
    for (size_t i = 0; i < n; i++) {
        if (gone[i]->dtor) gone[i]->dtor(gone[i]->obj);
        free(gone[i]);
    }
    free(gone);
}
