/* Trusts and their weighted reference count (§2.5.4 and the spec's decision).
 * The thesis's toggle-set scheme frees early when a clone is moved to another
 * thread and dropped there before the clone's toggle arrives. Here a property
 * keeps a total weight; every trust carries a share of it. Cloning splits the
 * share locally (no message at all), dropping sends "subtract w" to the
 * trustee. Whatever order the subtractions arrive in, the total reaches zero
 * exactly when the last share is returned, so clone-then-move is safe. Only
 * an exhausted share (weight 1) needs a message: a synchronous refill. */
#include <stdlib.h>
#include <string.h>

#include "deleg/internal.h"
#include "deleg/remote.h"
#include "util/log.h"

#define DEFAULT_WEIGHT (UINT64_C(1) << 62)
#define CLONE_CHUNK (UINT64_C(1) << 32)

dsm_status_t dsm_deleg_entrust(dsm_deleg_rt_t *rt, unsigned trustee, void *property, dsm_deleg_dtor_fn dtor,
                               int latched, dsm_deleg_trust_t *out)
{
    if (!rt || !out || trustee >= rt->n) return DSM_ERR_INVALID;
    deleg_thread_t *th = dsm_deleg_tls;
    if (th && th->rt != rt) return DSM_ERR_INVALID;
    dsm_deleg_prop_t *p = dsm_zalloc_lines(sizeof *p);
    if (!p) return DSM_ERR_NOMEM;
    uint64_t w = rt->cfg.initial_weight ? rt->cfg.initial_weight : DEFAULT_WEIGHT;
    p->obj = property;
    p->dtor = dtor;
    p->rt = rt;
    p->trustee = trustee;
    p->latched = latched != 0;
    /* Written before any request can carry p: the request's release store (or
     * thread creation, before start) publishes it to the trustee. */
    p->total_weight = w;
    out->prop = p;
    out->weight = w;
    out->remote = 0;
    return DSM_OK;
}

unsigned dsm_deleg_trust_trustee(const dsm_deleg_trust_t *t)
{
    if (t && trust_is_remote(t)) return trust_thread(t);
    return t && t->prop ? t->prop->trustee : 0;
}

void dsm_deleg_trust_set_prefetch(dsm_deleg_trust_t *t, dsm_deleg_prefetch_fn fn)
{
    if (t && t->prop) t->prop->prefetch = fn; /* a remote trust's trustee has no hook */
}

/* SYS closures: they receive the property header. */
void dsm_deleg_sys_sub_weight(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)ret;
    (void)args;
    (void)args_len;
    dsm_deleg_prop_t *p = prop;
    uint64_t w;
    memcpy(&w, env, sizeof w);
    /* an exported property's total may be owed weight credited back
     * (remote_share.c) */
    if (w > p->total_weight && p->shares) dsm_deleg_shares_fold(p);
    if (w > p->total_weight) {
        DSM_ERROR("deleg", "reference weight underflow (%llu > %llu): a trust was dropped twice",
                  (unsigned long long)w, (unsigned long long)p->total_weight);
        return;
    }
    p->total_weight -= w;
    if (p->total_weight == 0) {
        /* exported: no handle finds it any more, unless weight was credited
         * back meanwhile (remote_share.c) */
        if (p->shares && !dsm_deleg_shares_release(p)) return;
        if (p->dtor) p->dtor(p->obj);
        free(p);
    }
}

void dsm_deleg_sys_add_weight(dsm_deleg_ret_t *ret, void *prop, const void *env, const void *args, size_t args_len)
{
    (void)ret;
    (void)args;
    (void)args_len;
    dsm_deleg_prop_t *p = prop;
    uint64_t w;
    memcpy(&w, env, sizeof w);
    p->total_weight += w;
}

/* Run a SYS closure now, on this thread (local trustee or stopped runtime). */
static void sys_inline(deleg_thread_t *th, dsm_deleg_fn fn, dsm_deleg_prop_t *p, uint64_t w)
{
    if (th) th->depth++;
    fn(NULL, p, &w, NULL, 0);
    if (th) th->depth--;
}

dsm_status_t dsm_deleg_trust_clone(dsm_deleg_trust_t *src, dsm_deleg_trust_t *out)
{
    if (src && trust_is_remote(src)) return out ? dsm_deleg_remote_clone(src, out) : DSM_ERR_INVALID;
    if (!src || !out || !src->prop) return DSM_ERR_INVALID;
    if (src->weight < 2) {
        dsm_status_t st;
        deleg_thread_t *th = dsm_deleg_caller(src->prop, &st);
        if (st != DSM_OK) return st;
        dsm_deleg_prop_t *p = src->prop;
        uint64_t add = p->rt->cfg.initial_weight ? p->rt->cfg.initial_weight : DEFAULT_WEIGHT;
        if (!th || p->trustee == th->idx) {
            sys_inline(th, dsm_deleg_sys_add_weight, p, add);
        } else {
            /* The refill must land before the new share can be dropped on
             * another thread, so it is synchronous. */
            if (!dsm_deleg_can_block(th, "trust_clone (weight refill)")) return DSM_ERR_STATE;
            waitrec_t w = {.th = th, .fiber = th->sched.cur};
            st = dsm_deleg_issue(th, p->trustee, dsm_deleg_sys_add_weight, p, REQ_SYS, &add, sizeof add, NULL, 0, 0,
                                 dsm_deleg_wait_cb, &w, 0);
            if (st != DSM_OK) return st;
            dsm_deleg_wait(&w);
        }
        src->weight += add;
    }
    uint64_t give = src->weight > 2 * CLONE_CHUNK ? CLONE_CHUNK : src->weight / 2;
    src->weight -= give;
    out->prop = src->prop;
    out->weight = give;
    out->remote = 0;
    return DSM_OK;
}

dsm_status_t dsm_deleg_trust_drop(dsm_deleg_trust_t *t)
{
    if (t && trust_is_remote(t)) return dsm_deleg_remote_drop(t);
    if (!t || !t->prop) return DSM_ERR_INVALID;
    dsm_status_t st;
    dsm_deleg_prop_t *p = t->prop;
    deleg_thread_t *th = dsm_deleg_caller(p, &st);
    if (st != DSM_OK) return st;
    uint64_t w = t->weight;
    if (!th || p->trustee == th->idx) {
        sys_inline(th, dsm_deleg_sys_sub_weight, p, w);
    } else {
        st = dsm_deleg_issue(th, p->trustee, dsm_deleg_sys_sub_weight, p, REQ_SYS, &w, sizeof w, NULL, 0, 0, NULL, NULL, 0);
        if (st != DSM_OK) return st;
    }
    t->prop = NULL;
    t->weight = 0;
    return DSM_OK;
}
