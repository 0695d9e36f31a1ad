/* The adaptive linger's estimate and budget (see linger.h). */
#include "util/linger.h"

void dsm_linger_init(dsm_linger_t *l, uint32_t max_us)
{
    *l = (dsm_linger_t){.max_us = max_us, .caught = DSM_LINGER_ONE};
}

void dsm_linger_observe(dsm_linger_t *l, uint64_t gap_ns)
{
    uint32_t hit = gap_ns <= (uint64_t)l->max_us * 1000u ? DSM_LINGER_ONE : 0;
    l->caught = l->caught - (l->caught >> DSM_LINGER_DECAY) + (hit >> DSM_LINGER_DECAY);
}

void dsm_linger_observe_sleep(dsm_linger_t *l, uint32_t lingered_us, uint64_t gap_ns)
{
    if (gap_ns <= (uint64_t)l->max_us * 1000u || lingered_us >= l->max_us)
        dsm_linger_observe(l, gap_ns);
}

uint32_t dsm_linger_budget_us(const dsm_linger_t *l, unsigned crowd_run)
{
    /* a linger catches a message only if it outlasts the gap to it, so a
     * part of max_us mostly misses what the whole would catch: the whole
     * while it catches, and one crowded sample may be a thread only waking
     * up, so halving begins at the second */
    if (l->caught < DSM_LINGER_FLOOR || crowd_run > 32)
        return 0;
    uint32_t us = l->max_us >> (crowd_run > 0 ? crowd_run - 1 : 0);
    return us < DSM_LINGER_MIN_US ? 0 : us;
}

uint32_t dsm_linger_held_budget_us(dsm_linger_t *l, unsigned crowd_run, uint64_t now)
{
    if (l->hold_ns && crowd_run >= DSM_LINGER_HOLD_RUN)
        l->held_until = now + l->hold_ns;
    return now < l->held_until ? 0 : dsm_linger_budget_us(l, crowd_run);
}

uint32_t dsm_linger_spin_us(const dsm_linger_t *l, bool crowded, uint32_t crowded_us, bool probe)
{
    if (l->caught < DSM_LINGER_FLOOR && !probe)
        return 0;
    return crowded && l->max_us > crowded_us ? crowded_us : l->max_us;
}

uint32_t dsm_linger_probe_us(dsm_linger_t *l, uint32_t budget_us, unsigned crowd_run, uint64_t now)
{
    if (budget_us >= l->max_us || crowd_run > 0 || now < l->held_until)
        return budget_us;
    return ++l->idle % DSM_LINGER_PROBE == 0 ? l->max_us : budget_us;
}
