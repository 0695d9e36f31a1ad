/* Lanes: a thread's own endpoints to the peers (Gossamer's one endpoint per
 * thread per remote node). A lane opens, at its first use of a peer, a second
 * UCX endpoint to the peer's worker on the node's worker: on verbs its own
 * queue pair, on tcp its own connection, so threads sending to one peer do
 * not queue behind each other on one endpoint. Everything else is the shared
 * endpoint's: completions come through the node's worker, a lane endpoint
 * that fails marks its peer dead, and a peer that reconnects (a new
 * incarnation) gets a new lane endpoint at the next use, the old one closing
 * then. A one-sided operation on a region the peer mapped into this process
 * is a load or store and needs no endpoint; on any other region the lane
 * unpacks the region's key on its own endpoint (keys are per endpoint). */
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric_int.h"
#include "util/log.h"

_Thread_local dsm_lane_t *dsm_fabric_lane_tls;

dsm_status_t dsm_fabric_lane_open(dsm_fabric_t *f, dsm_lane_t **out)
{
    if (f == NULL || out == NULL)
        return DSM_ERR_INVALID;
    dsm_lane_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return DSM_ERR_NOMEM;
    l->fabric = f;
    pthread_mutex_lock(&f->lock);
    l->next = f->lanes;
    if (f->lanes)
        f->lanes->prevp = &l->next;
    l->prevp = &f->lanes;
    f->lanes = l;
    pthread_mutex_unlock(&f->lock);
    *out = l;
    return DSM_OK;
}

void dsm_fabric_lane_bind(dsm_lane_t *lane)
{
    dsm_fabric_lane_tls = lane;
}

/* The lane's keys and endpoints go (keys first: they belong to the endpoint). */
static void lane_release(dsm_lane_t *l)
{
    ucp_ep_h eps[DSM_FABRIC_MAX_PEERS];
    unsigned n = 0;
    for (uint32_t r = 0; r < DSM_FABRIC_MAX_PEERS; r++) {
        dsm_lane_peer_t *lp = l->peers[r];
        if (lp == NULL)
            continue;
        for (int i = 0; i < DSM_FABRIC_MAX_REGIONS; i++)
            if (lp->rkey[i])
                ucp_rkey_destroy(lp->rkey[i]);
        eps[n++] = lp->ep;
        free(lp);
        l->peers[r] = NULL;
    }
    while (l->retired) {
        struct dsm_rkey_retired *o = l->retired;
        l->retired = o->next;
        ucp_rkey_destroy(o->rkey);
        free(o);
    }
    dsm_fabric_close_eps(l->fabric, eps, n);
}

void dsm_fabric_lane_close(dsm_lane_t *lane)
{
    if (lane == NULL)
        return;
    dsm_fabric_t *f = lane->fabric;
    if (dsm_fabric_lane_tls == lane)
        dsm_fabric_lane_tls = NULL;
    pthread_mutex_lock(&f->lock);
    *lane->prevp = lane->next;
    if (lane->next)
        lane->next->prevp = lane->prevp;
    pthread_mutex_unlock(&f->lock);
    lane_release(lane);
    free(lane);
}

void dsm_fabric_lanes_close_all(dsm_fabric_t *f)
{
    while (f->lanes) {
        DSM_WARN(DSM_FABRIC_LOG, "a lane was still open when its fabric went: closed");
        dsm_fabric_lane_close(f->lanes);
    }
}

void dsm_fabric_lane_errs_free(dsm_fabric_t *f)
{
    while (f->lane_errs) {
        dsm_lane_err_t *e = f->lane_errs;
        f->lane_errs = e->next;
        free(e);
    }
}

unsigned dsm_fabric_lane_endpoints(const dsm_lane_t *lane)
{
    return lane ? lane->opened : 0;
}

uint64_t dsm_fabric_lane_used(const dsm_lane_t *lane)
{
    return lane ? lane->used : 0;
}

static void lane_ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    dsm_lane_err_t *e = arg;
    if (e->incarnation == atomic_load_explicit(&e->peer->incarnation, memory_order_relaxed))
        dsm_fabric_mark_dead(e->peer->fabric, e->peer->rank, ucs_status_string(status));
}

/* The lane's endpoint to an acquired peer, opened for its incarnation now
 * (at most one try per incarnation: NULL, the shared endpoint serves). */
static dsm_lane_peer_t *lane_peer(dsm_lane_t *l, dsm_peer_t *peer)
{
    dsm_lane_peer_t *lp = l->peers[peer->rank];
    uint64_t incarnation = atomic_load_explicit(&peer->incarnation, memory_order_relaxed);
    if (lp && lp->incarnation == incarnation)
        return lp->ep ? lp : NULL;
    /* Inside a handler (UCX's progress, its worker lock held) nothing is
     * opened or closed: that takes the fabric's lock, whose holders call
     * into UCX, and a close progresses the worker. */
    if (dsm_fabric_handler_depth > 0)
        return NULL;
    /* A peer that died or left since it was acquired gets no new endpoint:
     * UCX would connect to it. The shared one carries the message, which
     * fails as the peer's. */
    if (atomic_load_explicit(&peer->state, memory_order_acquire) != DSM_PEER_ALIVE)
        return NULL;
    if (lp) {   /* the peer reconnected: the old endpoint and its keys go */
        for (int i = 0; i < DSM_FABRIC_MAX_REGIONS; i++) {
            if (lp->rkey[i])
                ucp_rkey_destroy(lp->rkey[i]);
            lp->rkey[i] = NULL;
        }
        dsm_fabric_close_eps(l->fabric, &lp->ep, 1);
    } else if ((lp = calloc(1, sizeof *lp)) == NULL) {
        return NULL;
    }
    l->peers[peer->rank] = lp;
    lp->incarnation = incarnation;
    dsm_lane_err_t *e = peer->address ? malloc(sizeof *e) : NULL;
    if (e == NULL)
        return NULL;
    dsm_fabric_t *f = l->fabric;
    *e = (dsm_lane_err_t){.peer = peer, .incarnation = incarnation};
    pthread_mutex_lock(&f->lock);
    e->next = f->lane_errs;
    f->lane_errs = e;
    pthread_mutex_unlock(&f->lock);
    ucs_status_t st = dsm_fabric_ep_create(f, peer->address, peer->err_mode, lane_ep_error_cb, e, &lp->ep);
    if (st != UCS_OK) {
        lp->ep = NULL;
        DSM_WARN(DSM_FABRIC_LOG, "rank %u: a thread's own endpoint: %s (the shared one serves it)", peer->rank,
                 ucs_status_string(st));
        return NULL;
    }
    l->opened++;
    return lp;
}

ucp_ep_h dsm_fabric_lane_own_ep(dsm_lane_t *l, dsm_peer_t *peer)
{
    dsm_lane_peer_t *lp = lane_peer(l, peer);
    return lp ? lp->ep : NULL;
}

ucp_ep_h dsm_fabric_lane_ep(dsm_lane_t *l, dsm_peer_t *peer)
{
    dsm_lane_peer_t *lp = lane_peer(l, peer);
    if (lp == NULL)
        return peer->ep;
    l->used++;
    return lp->ep;
}

void dsm_fabric_lane_route(dsm_lane_t *l, dsm_peer_t *peer, uint32_t region, ucp_ep_h *ep, ucp_rkey_h *rkey)
{
    dsm_fabric_t *f = l->fabric;
    dsm_remote_region_t *rr = &peer->regions[region];
    *ep = peer->ep;
    *rkey = rr->rkey;
    dsm_lane_peer_t *lp = lane_peer(l, peer);
    if (lp == NULL)
        return;
    if (lp->rkey[region] == NULL ||
        lp->key_version[region] != atomic_load_explicit(&rr->version, memory_order_relaxed)) {
        if (dsm_fabric_handler_depth > 0)
            return;   /* no unpacking under UCX's progress (see lane_peer) */
        /* a rekey (or the first use) under the lock that guards the packed key */
        pthread_mutex_lock(&f->lock);
        ucp_rkey_h k = NULL;
        uint32_t version = atomic_load_explicit(&rr->version, memory_order_relaxed);
        ucs_status_t st = rr->packed ? ucp_ep_rkey_unpack(lp->ep, rr->packed, &k) : UCS_ERR_NO_ELEM;
        pthread_mutex_unlock(&f->lock);
        if (st != UCS_OK)
            return;   /* the shared endpoint and key */
        struct dsm_rkey_retired *o = lp->rkey[region] ? malloc(sizeof *o) : NULL;
        if (o) {   /* an operation under way may still use it */
            o->rkey = lp->rkey[region];
            o->next = l->retired;
            l->retired = o;
        } else if (lp->rkey[region]) {
            ucp_rkey_destroy(k);   /* no memory to keep the old one: keep using it */
            k = lp->rkey[region];
            version = lp->key_version[region];
        }
        lp->rkey[region] = k;
        lp->key_version[region] = version;
    }
    *ep = lp->ep;
    *rkey = lp->rkey[region];
    l->used++;
}

ucp_ep_h dsm_fabric_lane_open_ep(dsm_fabric_t *f, uint32_t rank)
{
    dsm_lane_t *l = dsm_fabric_lane_of(f);
    if (l == NULL || rank >= DSM_FABRIC_MAX_PEERS || l->peers[rank] == NULL)
        return NULL;
    dsm_lane_peer_t *lp = l->peers[rank];
    return lp->incarnation == atomic_load_explicit(&f->peers[rank].incarnation, memory_order_relaxed) ? lp->ep
                                                                                                   : NULL;
}
