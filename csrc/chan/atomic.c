/* atomic_var: one official 64-bit word on a host participant. Every
 * access, the host's own included, is a fabric atomic or read, so the
 * word is never touched by two engines (RDMA atomics need not be atomic
 * with the CPU's). */
#include <stdlib.h>

#include "chan/ids.h"
#include "chan/internal.h"

struct dsm_chan_atomic {
    dsm_chan_t *c;
    uint32_t host;
};

dsm_status_t dsm_chan_atomic_create(dsm_node_t *node, const char *name, uint32_t host, uint32_t timeout_ms,
                                    dsm_chan_atomic_t **out)
{
    if (out == NULL)
        return DSM_ERR_INVALID;
    dsm_chan_atomic_t *a = calloc(1, sizeof *a);
    if (a == NULL)
        return DSM_ERR_NOMEM;
    static const char *const names[] = {"host"};
    dsm_status_t st = chan_open(node, name, DSM_CHAN_ATOMIC_VAR, "word", 8, names, &(uint64_t){host}, 1, timeout_ms,
                                &a->c);
    if (st == DSM_OK && host >= a->c->npeers) {
        dsm_chan_destroy(a->c);
        st = DSM_ERR_INVALID;
    }
    if (st != DSM_OK) {
        free(a);
        return st;
    }
    a->host = host;
    *out = a;
    return DSM_OK;
}

static uint64_t where(const dsm_chan_atomic_t *a)
{
    const dsm_chan_t *c = a->c;
    return a->host == c->self ? c->regions[0].offset : chan_remote_off(c, a->host, 0, 0);
}

dsm_status_t dsm_chan_atomic_fetch_add(dsm_chan_atomic_t *a, uint64_t add, uint64_t *old)
{
    uint64_t o;
    return dsm_fabric_fetch_add(a->c->m->fabric, a->c->peers[a->host].rank, DSM_CHAN_REGION, where(a), add,
                                old ? old : &o);
}

dsm_status_t dsm_chan_atomic_cas(dsm_chan_atomic_t *a, uint64_t expected, uint64_t desired, uint64_t *old)
{
    uint64_t o;
    return dsm_fabric_cas(a->c->m->fabric, a->c->peers[a->host].rank, DSM_CHAN_REGION, where(a), expected, desired,
                          old ? old : &o);
}

dsm_status_t dsm_chan_atomic_load(dsm_chan_atomic_t *a, uint64_t *value)
{
    return dsm_fabric_get(a->c->m->fabric, a->c->peers[a->host].rank, DSM_CHAN_REGION, where(a), value, 8);
}

void dsm_chan_atomic_destroy(dsm_chan_atomic_t *a)
{
    if (a == NULL)
        return;
    dsm_chan_destroy(a->c);
    free(a);
}
