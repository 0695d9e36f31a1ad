/* Direct accesses to peers' regions mapped into this process, and sends to
 * a peer, without a reference on the peer per access or send: the grace
 * period that lets an endpoint close unmap its regions and hand UCX its
 * endpoint only once no thread can still be using them (see fabric_int.h,
 * dsm_fabric_direct_enter/exit, dsm_fabric_peer_enter/exit). An entry marks
 * the thread's slot; the closing side, having made the peer non-alive,
 * issues a barrier on every thread of the process (expedited membarrier,
 * registered here; a full fence in each entry where that is unavailable) and
 * waits for every slot inside an access, or a send to that peer, when it
 * looked to leave it. */
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fabric/fabric_int.h"
#include "util/log.h"

static int membarrier(int cmd) { return (int)syscall(__NR_membarrier, cmd, 0, 0); }

void dsm_fabric_direct_init(dsm_fabric_t *f)
{
    /* Registration is per process and idempotent. */
    int cmds = membarrier(MEMBARRIER_CMD_QUERY);
    f->direct_asym = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                     membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    if (!f->direct_asym)
        DSM_DEBUG(DSM_FABRIC_LOG, "no expedited membarrier: direct accesses fence on entry");
}

/* One barrier on every thread, then the waits: for every slot inside a
 * direct access when we looked (`direct`), and for every slot inside a send
 * to `rank` when we looked (rank < DSM_FABRIC_MAX_PEERS); any later entry
 * sees the peer non-alive. */
static void quiesce(dsm_fabric_t *f, bool direct, uint32_t rank)
{
    atomic_thread_fence(memory_order_seq_cst);
    /* Registered once, expedited membarrier does not fail; should it, the
     * global one (every thread of every process: slow, and rare here) serves. */
    if (f->direct_asym && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
        membarrier(MEMBARRIER_CMD_GLOBAL) != 0)
        DSM_ERROR(DSM_FABRIC_LOG, "membarrier failed before closing or unmapping a peer's");
    unsigned own = dsm_tslot_cur;
    unsigned high = dsm_tslot_high();
    const uint64_t rank_mask = (1u << DSM_PEER_USE_RANK_BITS) - 1;
    for (unsigned s = 1; s <= high && s <= DSM_TSLOTS; s++) {
        if (s == own)
            continue;   /* the closing thread is inside no access or send of its own */
        dsm_direct_slot_t *d = &f->direct_slots[s - 1];
        uint64_t seq = atomic_load_explicit(&d->seq, memory_order_acquire);
        if (direct && (seq & 1) != 0) {
            while (atomic_load_explicit(&d->seq, memory_order_acquire) == seq)
                sched_yield();
        }
        uint64_t use = atomic_load_explicit(&d->use, memory_order_acquire);
        if (rank < DSM_FABRIC_MAX_PEERS && (use & rank_mask) == rank + 1) {
            while (atomic_load_explicit(&d->use, memory_order_acquire) == use)
                sched_yield();
        }
    }
}

void dsm_fabric_direct_quiesce(dsm_fabric_t *f, uint32_t rank)
{
    quiesce(f, true, rank);
}

void dsm_fabric_peer_sends_quiesce(dsm_fabric_t *f, uint32_t rank)
{
    quiesce(f, false, rank);
}
