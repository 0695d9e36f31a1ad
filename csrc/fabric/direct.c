/* Direct accesses to peers' regions mapped into this process, without a
 * reference on the peer per access: the grace period that lets an endpoint
 * close unmap its regions only once no thread can still be using them (see
 * fabric_int.h, dsm_fabric_direct_enter/exit). An entry marks the thread's
 * slot; the closing side, having made the peer non-alive, issues a barrier on
 * every thread of the process (expedited membarrier, registered here; a
 * full fence in each entry where that is unavailable) and waits for every
 * slot inside an access when it looked to leave it. */
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

void dsm_fabric_direct_quiesce(dsm_fabric_t *f)
{
    atomic_thread_fence(memory_order_seq_cst);
    /* Registered once, expedited membarrier does not fail; should it, the
     * global one (every thread of every process: slow, and rare here) serves. */
    if (f->direct_asym && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
        membarrier(MEMBARRIER_CMD_GLOBAL) != 0)
        DSM_ERROR(DSM_FABRIC_LOG, "membarrier failed before unmapping peers' regions");
    unsigned own = dsm_tslot_cur;
    unsigned high = dsm_tslot_high();
    for (unsigned s = 1; s <= high && s <= DSM_TSLOTS; s++) {
        if (s == own)
            continue;   /* the closing thread is inside no access of its own */
        dsm_direct_slot_t *d = &f->direct_slots[s - 1];
        uint64_t seq = atomic_load_explicit(&d->seq, memory_order_acquire);
        if ((seq & 1) == 0)
            continue;
        /* inside an access when we looked: wait for it to leave (any later
         * entry saw the peer non-alive) */
        while (atomic_load_explicit(&d->seq, memory_order_acquire) == seq)
            sched_yield();
    }
}
