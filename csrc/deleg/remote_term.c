/* The end of a delegation application across nodes: its phase on this node
 * (attached, running, finished) for the other nodes' probes, the probe
 * handler, and the cluster-wide termination of dsm_deleg_rt_join (Mattern's
 * four counters over the nodes). A node that dies ends the run here with
 * DSM_ERR_PEER_DEAD (fate sharing); such a runtime does not run again
 * until recovered, which resets the lost run's remote state in place. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deleg/remote.h"
#include "util/log.h"

#define LOG "deleg"

static dsm_status_t probe(dsm_deleg_remote_t *R, uint32_t r, rterm_t *t);
static void counts(dsm_deleg_remote_t *R, uint64_t *sent, uint64_t *served);

/* How long a start waits for peers still in the last run. */
enum { START_WAIT_S = 30 };

/* A peer seen for the first time: a running node is in this run, another
 * starts it next. */
static void first_sight(dsm_deleg_remote_t *R, uint32_t r, const rterm_t *t)
{
    R->seen[r] = t->phase == RPHASE_RUNNING ? t->runs : t->runs + 1;
    R->seen_known[r] = 1;
}

void dsm_deleg_remote_started(dsm_deleg_rt_t *rt)
{
    dsm_deleg_remote_t *R = rt->remote;
    /* a node that died between runs is simply not part of this one; its
     * shares of this node's properties go (the threads have not started) */
    atomic_store(&R->dead, 0);
    dsm_deleg_shares_settle(rt);
    /* Every thread's lane connects to every peer now, not at its first
     * batch there: a peer that dies mid-run then never leaves this node
     * owing it a wire-up reply, which UCX 1.13 aborts on. A peer that fails
     * here is the run's to find. */
    for (uint32_t r = 0; r < RMAX_NODES; r++) {
        if (r == R->self || !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire)) continue;
        for (unsigned i = 0; i < rt->n; i++) (void)dsm_fabric_lane_connect(rt->th[i].remote->lane, r);
    }
    /* a new run: every peer known is expected one run on */
    pthread_mutex_lock(&R->lock);
    for (uint32_t r = 0; r < RMAX_NODES; r++)
        if (R->seen_known[r]) R->seen[r]++;
    pthread_mutex_unlock(&R->lock);
    /* learn where the peers never seen are: a node that has started this
     * run is running it, one that has not is attached or finished (it
     * cannot have finished this run without this node) */
    for (uint32_t r = 0; r < RMAX_NODES; r++) {
        if (r == R->self || R->seen_known[r] || !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire))
            continue;
        rterm_t t;
        if (probe(R, r, &t) == DSM_OK) first_sight(R, r, &t);
    }
    /* Wait until no peer is still in the last run (running it, or lost it
     * and not recovered): this run's batches must not reach a node that
     * would take them for the last run's, or clear them when it recovers. */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t r = 0; r < RMAX_NODES; r++) {
        for (;;) {
            if (r == R->self || !R->seen_known[r] || !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire))
                break;
            rterm_t t;
            if (probe(R, r, &t) != DSM_OK) break;
            if (t.runs >= R->seen[r] || (t.phase != RPHASE_RUNNING && !t.lost)) break;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - t0.tv_sec > START_WAIT_S) {
                DSM_ERROR(LOG, "rank %u is still in its last run after %d s; starting anyway", r, START_WAIT_S);
                break;
            }
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    pthread_mutex_lock(&R->lock);
    counts(R, &R->base_sent, &R->base_served);
    R->runs++;
    R->run_lost = 0;
    memset(&R->loss, 0, sizeof R->loss);
    R->loss.rank = R->loss.trustee = -1;
    R->phase = RPHASE_RUNNING;
    pthread_mutex_unlock(&R->lock);
}

/* A run that ended with DSM_ERR_PEER_DEAD before the runtime's notice of
 * the death came (a probe's failure, another node's report of the loss):
 * the fabric knows which peer of the application is gone. Rank + 1, or 0. */
static uint32_t dead_peer_by_fabric(dsm_deleg_remote_t *R)
{
    for (uint32_t r = 0; r < RMAX_NODES; r++)
        if (r != R->self && R->seen_known[r] &&
            (dsm_fabric_peer_state(R->fabric, r) == DSM_ERR_PEER_DEAD ||
             !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire)))
            return r + 1;
    return 0;
}

void dsm_deleg_remote_finished(dsm_deleg_rt_t *rt, dsm_status_t st)
{
    dsm_deleg_remote_t *R = rt->remote;
    uint32_t dead = atomic_load(&R->dead);
    if (!dead && st == DSM_ERR_PEER_DEAD && (dead = dead_peer_by_fabric(R)) != 0) {
        uint32_t none = 0;
        atomic_compare_exchange_strong(&R->dead, &none, dead);
        dead = atomic_load(&R->dead);
    }
    dsm_deleg_loss_t loss = {.rank = -1, .trustee = -1};
    if (dead) {
        /* the threads have stopped: report what the dead node left unanswered */
        loss.rank = (int32_t)(dead - 1);
        for (unsigned i = 0; i < rt->n; i++) {
            rthread_t *t = rt->th[i].remote;
            for (unsigned s = 0; s < R->T; s++) {
                rpair_t *p = &t->out[(dead - 1) * R->T + s];
                uint64_t n = p->done.tail - p->done.head;
                if (n && loss.trustee < 0) {
                    loss.trustee = (int32_t)s;
                    loss.handle = p->last_handle;
                }
                loss.unanswered += n;
            }
        }
    }
    pthread_mutex_lock(&R->lock);
    R->phase = RPHASE_FINISHED;
    if (dead) R->run_lost = dead;
    R->loss = loss;
    pthread_mutex_unlock(&R->lock);
    if (!dead) return;
    if (loss.trustee >= 0)
        DSM_ERROR(LOG,
                  "application stopped on rank %u: rank %d died with %llu requests to its trustees unanswered "
                  "(trustee %d, property handle %#x among them)",
                  R->self, loss.rank, (unsigned long long)loss.unanswered, loss.trustee, loss.handle);
    else
        DSM_ERROR(LOG, "application stopped on rank %u: rank %d died (no request of this node was waiting on it)",
                  R->self, loss.rank);
}

void dsm_deleg_rt_loss(const dsm_deleg_rt_t *rt, dsm_deleg_loss_t *out)
{
    dsm_deleg_loss_t none = {.rank = -1, .trustee = -1};
    dsm_deleg_remote_t *R = rt ? rt->remote : NULL;
    if (!out) return;
    if (!R) {
        *out = none;
        return;
    }
    pthread_mutex_lock(&R->lock);
    *out = R->loss;
    pthread_mutex_unlock(&R->lock);
}

/* Remote requests published and served since attach or recover (R->lock).
 * The threads' states stay in place from attach to detach (recover resets
 * them where they are), so the progress thread may read them at any time. */
static void counts(dsm_deleg_remote_t *R, uint64_t *sent, uint64_t *served)
{
    *sent = R->final_sent;
    *served = R->final_served;
    if (!R->rt) return;
    for (unsigned i = 0; i < R->rt->n; i++) {
        rthread_t *t = R->rt->th[i].remote;
        *sent += atomic_load_explicit(&t->rsent, memory_order_acquire);
        *served += atomic_load_explicit(&t->rserved, memory_order_acquire);
    }
}

static void snapshot(dsm_deleg_remote_t *R, rterm_t *out)
{
    pthread_mutex_lock(&R->lock);
    dsm_deleg_rt_t *rt = R->rt;
    counts(R, &out->sent, &out->served);
    out->sent -= R->base_sent;
    out->served -= R->base_served;
    out->idle = R->phase != RPHASE_ATTACHED;
    out->runs = R->runs;
    out->phase = (uint32_t)R->phase;
    out->lost = R->run_lost;
    if (rt && R->phase == RPHASE_RUNNING) out->idle = dsm_deleg_rt_quiet(rt);
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

/* Probe rank r; DSM_ERR_PEER_DEAD (and the fate-sharing path taken) if it
 * is gone. */
static dsm_status_t probe(dsm_deleg_remote_t *R, uint32_t r, rterm_t *t)
{
    uint8_t reply[RTERM_LEN];
    size_t len = 0;
    dsm_status_t st = dsm_fabric_am_request(R->fabric, r, DSM_AM_DELEG_TERM, NULL, 0, reply, sizeof reply, &len, 0);
    if (st == DSM_OK) st = dsm_rterm_decode(reply, len, t);
    if (st == DSM_ERR_PEER_DEAD || st == DSM_ERR_NO_PEER || dsm_fabric_peer_state(R->fabric, r) != DSM_OK) {
        dsm_deleg_rpeer_dead(R, r); /* before the node's failure detection says so */
        return DSM_ERR_PEER_DEAD;
    }
    return st;
}

/* One wave: every attached node's counters. DSM_ERR_PEER_DEAD if one died
 * (or ended this run because one died); *over when a node has already gone
 * past this run (it saw the run end everywhere). A node not yet in this run
 * (its count below what this run expects of it) is not idle. */
static dsm_status_t wave(dsm_deleg_remote_t *R, int *idle, uint64_t *sent, uint64_t *served, int *over)
{
    rterm_t t;
    snapshot(R, &t);
    *idle = (int)t.idle;
    *sent = t.sent;
    *served = t.served;
    *over = 0;
    for (uint32_t r = 0; r < RMAX_NODES; r++) {
        if (r == R->self || !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire)) continue;
        dsm_status_t st = probe(R, r, &t);
        if (st != DSM_OK) return st;
        if (!R->seen_known[r]) first_sight(R, r, &t); /* joined after this run started */
        if (t.runs < R->seen[r]) {
            *idle = 0; /* not started this run yet */
            continue;
        }
        if (t.runs > R->seen[r]) {
            *over = 1;
            return DSM_OK;
        }
        if (t.lost) {
            /* this run ended there because a node died: here too */
            uint32_t none = 0;
            dsm_deleg_rpeer_dead(R, t.lost - 1);
            atomic_compare_exchange_strong(&R->dead, &none, t.lost);
            return DSM_ERR_PEER_DEAD;
        }
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
        int idle, over;
        uint64_t sent, served;
        st = wave(R, &idle, &sent, &served, &over);
        if (st == DSM_ERR_PEER_DEAD) break;
        if (st == DSM_OK && over) break;
        if (st != DSM_OK || !idle || sent != served) {
            have_prev = 0;
            continue;
        }
        if (have_prev && sent == prev_sent && served == prev_served) break;
        have_prev = 1;
        prev_sent = sent;
        prev_served = served;
    }
    if (st == DSM_ERR_PEER_DEAD) R->failed = R->lost_props = 1;
    return st;
}

dsm_status_t dsm_deleg_remote_can_start(dsm_deleg_rt_t *rt)
{
    if (rt->remote && rt->remote->failed) {
        DSM_ERROR(LOG, "this runtime's last run lost a node: dsm_deleg_rt_recover() it before running again");
        return DSM_ERR_STATE;
    }
    return DSM_OK;
}

#ifdef DSM_TEST_SWITCHES
void (*dsm_deleg_recover_hook)(dsm_deleg_rt_t *rt, unsigned i);
#endif

/* After a run that lost a node: wait until no other live node runs it any
 * more (none will write into this node's area again), then clear the remote
 * state of the lost run: the counts, every thread's pairs, the area and the
 * inbox. */
dsm_status_t dsm_deleg_remote_recover(dsm_deleg_rt_t *rt, uint32_t timeout_ms)
{
    dsm_deleg_remote_t *R = rt->remote;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t r = 0; r < RMAX_NODES; r++) {
        for (;;) {
            if (r == R->self || !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire)) break;
            rterm_t t;
            dsm_status_t st = probe(R, r, &t);
            if (st == DSM_ERR_PEER_DEAD) break;
            if (st == DSM_OK && t.phase != RPHASE_RUNNING) {
                /* its count now is the one of the run that ended */
                R->seen[r] = t.runs;
                R->seen_known[r] = 1;
                /* what still comes of that run is late: its next start
                 * waits for this recover to end */
                atomic_store(&R->fresh_from[r], (uint32_t)t.runs + 1);
                break;
            }
            clock_gettime(CLOCK_MONOTONIC, &now);
            double ms = (double)(now.tv_sec - t0.tv_sec) * 1e3 + (double)(now.tv_nsec - t0.tv_nsec) / 1e6;
            if (ms > timeout_ms) {
                DSM_ERROR(LOG, "recover: rank %u still runs the lost application after %u ms", r, timeout_ms);
                return DSM_ERR_TIMEOUT;
            }
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    /* The counts start again (what the lost run sent to the dead node was
     * never served), the threads' and the node's in one step under the
     * lock: a probe answers the lost run's counts or zero, never a mix. */
    pthread_mutex_lock(&R->lock);
    for (unsigned i = 0; i < rt->n; i++) {
        rthread_t *t = rt->th[i].remote;
        /* relaxed: their writers have stopped, and the probes read under the lock */
        atomic_store_explicit(&t->rsent, 0, memory_order_relaxed);
        atomic_store_explicit(&t->rserved, 0, memory_order_relaxed);
    }
    R->final_sent = R->final_served = 0;
    R->base_sent = R->base_served = 0;
    pthread_mutex_unlock(&R->lock);
    for (unsigned i = 0; i < rt->n; i++) {
        dsm_deleg_remote_thread_reset(&rt->th[i]);
#ifdef DSM_TEST_SWITCHES
        if (dsm_deleg_recover_hook) dsm_deleg_recover_hook(rt, i);
#endif
    }
    /* a slot write that passed its run check before fresh_from moved
     * finishes its copy before the clear, not after */
    while (atomic_load(&R->applying) != 0) sched_yield();
    memset(R->base, 0, R->size);
    pthread_mutex_lock(&R->inbox_lock);
    while (R->inbox) {
        rlarge_msg_t *m = R->inbox;
        R->inbox = m->next;
        free(m);
    }
    R->inbox_bytes = 0;
    pthread_mutex_unlock(&R->inbox_lock);
    atomic_store(&R->dead, 0);
    /* the dead node's shares of this node's properties go */
    dsm_deleg_shares_settle(rt);
    pthread_mutex_lock(&R->lock);
    R->failed = 0;
    R->run_lost = 0; /* the peers' starts wait for this */
    pthread_mutex_unlock(&R->lock);
    return DSM_OK;
}
