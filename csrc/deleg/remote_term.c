/* The end of a delegation application across nodes: its phase on this node
 * (attached, running, finished) for the other nodes' probes, the probe
 * handler, and the cluster-wide termination of dsm_deleg_rt_join (Mattern's
 * four counters over the nodes). A node that dies ends the run here with
 * DSM_ERR_PEER_DEAD (fate sharing); such a runtime does not run again. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deleg/remote.h"
#include "util/log.h"

#define LOG "deleg"

void dsm_deleg_remote_started(dsm_deleg_rt_t *rt)
{
    pthread_mutex_lock(&rt->remote->lock);
    rt->remote->phase = RPHASE_RUNNING;
    pthread_mutex_unlock(&rt->remote->lock);
}

void dsm_deleg_remote_finished(dsm_deleg_rt_t *rt)
{
    dsm_deleg_remote_t *R = rt->remote;
    pthread_mutex_lock(&R->lock);
    R->phase = RPHASE_FINISHED;
    pthread_mutex_unlock(&R->lock);
    uint32_t dead = atomic_load(&R->dead);
    if (!dead) return;
    /* the threads have stopped: report what the dead node left unanswered */
    uint64_t waiting = 0;
    for (unsigned i = 0; i < rt->n; i++) {
        rthread_t *t = rt->th[i].remote;
        for (unsigned s = 0; s < R->T; s++) {
            rpair_t *p = &t->out[(dead - 1) * R->T + s];
            waiting += p->done.tail - p->done.head;
        }
    }
    DSM_ERROR(LOG, "application stopped on rank %u: rank %u died with %llu requests to its trustees unanswered",
              R->self, dead - 1, (unsigned long long)waiting);
}

static void snapshot(dsm_deleg_remote_t *R, rterm_t *out)
{
    pthread_mutex_lock(&R->lock);
    dsm_deleg_rt_t *rt = R->rt;
    out->sent = R->final_sent;
    out->served = R->final_served;
    out->idle = R->phase != RPHASE_ATTACHED;
    if (rt) {
        if (R->phase == RPHASE_RUNNING) out->idle = dsm_deleg_rt_quiet(rt);
        for (unsigned i = 0; i < rt->n; i++) {
            rthread_t *t = rt->th[i].remote;
            out->sent += atomic_load_explicit(&t->rsent, memory_order_acquire);
            out->served += atomic_load_explicit(&t->rserved, memory_order_acquire);
        }
    }
    pthread_mutex_unlock(&R->lock);
}

void dsm_deleg_rterm_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_deleg_remote_t *R = ctx;
    rterm_t t;
    snapshot(R, &t);
    uint8_t reply[RTERM_LEN];
    dsm_rterm_encode(reply, &t);
    if (msg->request_id) dsm_fabric_am_reply(R->fabric, msg->src_rank, msg->request_id, DSM_OK, reply, sizeof reply);
}

/* One wave: every attached node's counters. DSM_ERR_PEER_DEAD if one died. */
static dsm_status_t wave(dsm_deleg_remote_t *R, int *idle, uint64_t *sent, uint64_t *served)
{
    rterm_t t;
    snapshot(R, &t);
    *idle = (int)t.idle;
    *sent = t.sent;
    *served = t.served;
    for (uint32_t r = 0; r < RMAX_NODES; r++) {
        if (r == R->self || !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire)) continue;
        uint8_t reply[RTERM_LEN];
        size_t len = 0;
        dsm_status_t st = dsm_fabric_am_request(R->fabric, r, DSM_AM_DELEG_TERM, NULL, 0, reply, sizeof reply, &len, 0);
        if (st == DSM_OK) st = dsm_rterm_decode(reply, len, &t);
        if (st == DSM_ERR_PEER_DEAD || st == DSM_ERR_NO_PEER || dsm_fabric_peer_state(R->fabric, r) != DSM_OK) {
            dsm_deleg_rpeer_dead(R, r); /* before the node's failure detection says so */
            return DSM_ERR_PEER_DEAD;
        }
        if (st != DSM_OK) return st;
        *idle &= (int)t.idle;
        *sent += t.sent;
        *served += t.served;
    }
    return DSM_OK;
}

/* Mattern's four counters across the nodes: two consecutive waves in which
 * every node is quiet and the remote requests published equal those served,
 * with the same totals, mean nothing is in flight anywhere. */
dsm_status_t dsm_deleg_remote_join(dsm_deleg_rt_t *rt)
{
    dsm_deleg_remote_t *R = rt->remote;
    uint64_t prev_sent = 0, prev_served = 0;
    int have_prev = 0;
    dsm_status_t st = DSM_OK;
    for (;;) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        if (atomic_load(&R->dead)) {
            st = DSM_ERR_PEER_DEAD;
            break;
        }
        int idle;
        uint64_t sent, served;
        st = wave(R, &idle, &sent, &served);
        if (st == DSM_ERR_PEER_DEAD) break;
        if (st != DSM_OK || !idle || sent != served) {
            have_prev = 0;
            continue;
        }
        if (have_prev && sent == prev_sent && served == prev_served) break;
        have_prev = 1;
        prev_sent = sent;
        prev_served = served;
    }
    if (st == DSM_ERR_PEER_DEAD) R->failed = 1;
    return st;
}

dsm_status_t dsm_deleg_remote_can_start(dsm_deleg_rt_t *rt)
{
    if (rt->remote && rt->remote->failed) {
        DSM_ERROR(LOG, "this runtime's last run lost a node; attach a new runtime to a new node to run again");
        return DSM_ERR_STATE;
    }
    return DSM_OK;
}
