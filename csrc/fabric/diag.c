/* What a fabric knows when a wait for a peer's answer times out: one warning
 * naming what was waited for and every place on this side that could still
 * hold it (the pending table, the reply slots, the deferred queue, the
 * thread's batch, chaos's queue to the peer) and who attends the worker.
 * Only built on a timeout, so it costs nothing otherwise. */
#include <stdio.h>

#include "fabric/fabric_int.h"
#include "util/log.h"

void dsm_fabric_describe_timeout(dsm_fabric_t *f, uint32_t rank, const char *what, uint32_t waited_ms)
{
    if (f == NULL || rank >= DSM_FABRIC_MAX_PEERS)
        return;
    unsigned to_rank = 0, all = 0, slots_waiting = 0;
    uint64_t oldest = 0;
    pthread_mutex_lock(&f->pending_lock);
    for (const dsm_am_pending_t *p = f->pending; p; p = p->next) {
        all++;
        if (p->rank == rank && to_rank++ == 0)
            oldest = p->id;
    }
    pthread_mutex_unlock(&f->pending_lock);
    for (unsigned i = 0; i < DSM_TSLOTS; i++)
        if ((atomic_load_explicit(&f->reply_slots[i].word, memory_order_relaxed) & 3) == DSM_REPLY_WAITING &&
            atomic_load_explicit(&f->reply_slots[i].rank, memory_order_relaxed) == rank)
            slots_waiting++;
    static const char *const states[] = {"unknown", "alive", "dead"};
    int state = atomic_load_explicit(&f->peers[rank].state, memory_order_relaxed);
    char chaos[512] = "chaos off";
    if (f->chaos != NULL)
        dsm_fabric_chaos_describe(f, rank, chaos, sizeof chaos);
    DSM_WARN(DSM_FABRIC_LOG,
             "rank %u: %s to rank %u: no answer in %u ms. Peer %s (incarnation %llu); pending table: %u entries "
             "to it (oldest id %llu, next id %llu), %u in all, %u counted; reply slots waiting on it: %u; "
             "deferred queue: %u requests (to rank %u); this thread's batch: %u; worker: %d waiters, %d pollers, "
             "progress thread %s; waits %llu (slept %llu), progress thread parked %llu times, woken %llu; "
             "messages sent %llu, received %llu, rejected %llu; %s",
             dsm_fabric_rank(f), what, rank, waited_ms, state >= 0 && state <= 2 ? states[state] : "?",
             (unsigned long long)atomic_load_explicit(&f->peers[rank].incarnation, memory_order_relaxed), to_rank,
             (unsigned long long)oldest,
             (unsigned long long)atomic_load_explicit(&f->next_request_id, memory_order_relaxed), all,
             atomic_load_explicit(&f->defer.pending_to[rank], memory_order_relaxed), slots_waiting,
             atomic_load_explicit(&f->defer.n, memory_order_relaxed), f->defer.q.rank, dsm_fabric_batch_n,
             atomic_load_explicit(&f->waiters, memory_order_relaxed),
             atomic_load_explicit(&f->pollers, memory_order_relaxed),
             atomic_load_explicit(&f->progress_parked, memory_order_relaxed) ? "standing down" : "serving",
             (unsigned long long)DSM_COUNTER(f, waits), (unsigned long long)DSM_COUNTER(f, wait_sleeps),
             (unsigned long long)DSM_COUNTER(f, progress_parks), (unsigned long long)DSM_COUNTER(f, progress_wakeups),
             (unsigned long long)DSM_COUNTER(f, am_sent), (unsigned long long)DSM_COUNTER(f, am_recv),
             (unsigned long long)DSM_COUNTER(f, am_rejected), chaos);
}
