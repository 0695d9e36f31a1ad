/* The delegation API on the client side: apply, apply_with, apply_then, the
 * local-trustee shortcut (§2.5.2.1: a trust whose trustee is this thread runs
 * its closure inline, which is safe because closures never suspend), the
 * blocking-call check of delegated context (§2.3.4), the result writer that
 * closures call, and the fiber calls (spawn, yield) of the public header. */
#include <stdlib.h>
#include <string.h>

#include "deleg/internal.h"
#include "deleg/remote.h"
#include "util/log.h"

_Thread_local deleg_thread_t *dsm_deleg_tls;

int dsm_deleg_self(void) { return dsm_deleg_tls ? (int)dsm_deleg_tls->idx : -1; }

int dsm_deleg_in_delegated_context(void) { return dsm_deleg_tls && dsm_deleg_tls->depth > 0; }

deleg_thread_t *dsm_deleg_caller_slow(dsm_deleg_prop_t *prop, dsm_status_t *st)
{
    deleg_thread_t *th = dsm_deleg_tls;
    *st = DSM_OK;
    if (!prop) {
        *st = DSM_ERR_INVALID;
        return NULL;
    }
    if (th) {
        if (th->rt != prop->rt) {
            DSM_WARN("deleg", "trust used on a thread of another runtime");
            *st = DSM_ERR_INVALID;
            return NULL;
        }
        return th;
    }
    if (atomic_load_explicit(&prop->rt->running, memory_order_acquire)) {
        DSM_WARN("deleg", "delegation call from a thread outside the running runtime");
        *st = DSM_ERR_STATE;
    }
    return NULL;
}

int dsm_deleg_can_block_slow(deleg_thread_t *th, const char *what)
{
    if (th->depth > 0) {
        DSM_WARN("deleg", "%s: blocking delegation call in delegated context (use apply_then or launch)", what);
        return 0;
    }
    if (!th->sched.cur) {
        DSM_WARN("deleg", "%s: blocking delegation call outside a fiber", what);
        return 0;
    }
    return 1;
}

void dsm_deleg_wait_cb(void *arg, dsm_status_t st, const void *data, size_t len)
{
    waitrec_t *w = arg;
    w->status = st;
    if (w->dst && w->cap) memcpy(w->dst, data, len < w->cap ? len : w->cap);
    if (w->len_out) *w->len_out = len;
    w->done = 1;
    dsm_sched_wake(&w->th->sched, w->fiber);
}

void dsm_deleg_wait(waitrec_t *w)
{
    while (!w->done) dsm_sched_block(&w->th->sched);
}

/* ---- results --------------------------------------------------------------- */

void dsm_deleg_ret_init_buf(dsm_deleg_ret_t *r, size_t fixed, int var)
{
    memset(r, 0, offsetof(dsm_deleg_ret_t, inline_buf));
    r->mode = RET_BUF;
    r->var = var;
    r->fixed = var ? 0 : fixed;
}

void dsm_deleg_ret_fini(dsm_deleg_ret_t *r)
{
    if (r->heap) free(r->heap);
}

static void *buf_reserve(dsm_deleg_ret_t *r, size_t len)
{
    size_t cap = len > r->fixed ? len : r->fixed;
    uint8_t *p = r->inline_buf;
    if (cap > sizeof r->inline_buf) {
        p = malloc(cap);
        if (!p) return NULL;
        r->heap = p;
    }
    if (cap > len) memset(p + len, 0, cap - len);
    r->data = p;
    r->len = r->var ? len : r->fixed;
    return p;
}

void dsm_deleg_ret_result(dsm_deleg_ret_t *r, const uint8_t **data, size_t *len)
{
    if (!r->done) {
        r->done = 1;
        buf_reserve(r, 0);
    }
    *data = r->data ? r->data : r->inline_buf;
    *len = r->data ? r->len : 0;
}

void *dsm_deleg_return_reserve(dsm_deleg_ret_t *r, size_t len)
{
    if (r->done) {
        DSM_WARN("deleg", "a closure returned twice; the second result is ignored");
        return NULL;
    }
    r->done = 1;
    if (r->mode == RET_BUF) return buf_reserve(r, len);
    if (!r->var) {
        /* fixed: the zeroed slot space; a longer result is cut at the size asked */
        return len <= r->fixed ? r->data : NULL;
    }
    return dsm_deleg_slot_reserve(r, len);
}

void dsm_deleg_return(dsm_deleg_ret_t *r, const void *data, size_t len)
{
    if (r->mode == RET_SLOT && !r->var && !r->done) {
        r->done = 1;
        deleg_copy(r->data, data, len < r->fixed ? len : r->fixed);
        return;
    }
    void *p = dsm_deleg_return_reserve(r, len);
    if (p && len) memcpy(p, data, len);
}

/* ---- apply ------------------------------------------------------------------ */

/* A closure run on this thread now (local trustee, or no runtime running).
 * A small fixed-size result is written straight into `small`, as the trustee
 * writes one into its slot: the growable buffer path cost the local shortcut
 * (half of all calls with two shared trustees) more than the closure. */
enum { RET_LOCAL_SMALL = 64 };
typedef struct local_call {
    dsm_deleg_ret_t r;
    _Alignas(8) uint8_t small[RET_LOCAL_SMALL];
    const uint8_t *data;
    size_t len;
} local_call_t;

static inline __attribute__((always_inline)) void run_local(local_call_t *lc, deleg_thread_t *th, dsm_deleg_fn fn, dsm_deleg_prop_t *prop,
                      const void *env, const void *args, size_t args_len, size_t fixed, int var)
{
    dsm_deleg_ret_t *r = &lc->r;
    if (!var && fixed <= sizeof lc->small) {
        deleg_ret_init_inplace(r, lc->small, fixed, NULL, 0);
    } else {
        dsm_deleg_ret_init_buf(r, fixed, var);
    }
    if (th) th->depth++;
    fn(r, prop->obj, env, args, args_len);
    if (th) th->depth--;
    if (r->mode == RET_SLOT) {
        lc->data = lc->small;
        lc->len = fixed;
    } else {
        dsm_deleg_ret_result(r, &lc->data, &lc->len);
    }
}

/* The local shortcut's common case, tested before anything else and run
 * on a straight path of its own: a runtime thread calling on its own
 * property for a small fixed-size result. At one hot object most of a
 * shared trustee's calls are these, and the general path below checks in
 * turn and returns the result through a local_call_t. Its body repeats
 * run_local's small-result branch on purpose: with the two folded into one
 * helper the compiler merged this path back into the general one and the
 * gain went. */
static inline int local_small(const deleg_thread_t *th, const dsm_deleg_trust_t *t, const dsm_deleg_prop_t *prop,
                              size_t ret_size, size_t env_len)
{
    return th != NULL && !trust_is_remote(t) && prop != NULL && th->rt == prop->rt && prop->trustee == th->idx &&
           ret_size <= RET_LOCAL_SMALL && env_len <= DSM_DELEG_MAX_ENV;
}

/* A trustee's own fibers calling apply on its properties run inline and
 * need never yield, so its peers' batches waited for the whole loop and
 * the other threads were all but starved. A
 * blocking apply may suspend anyway, so after this many inline calls without
 * the scheduler serving, the call serves the waiting batches itself.
 * apply_then does not: a fiber issuing it must yield for its own requests to
 * other trustees to go out, and the round's serving then follows (serving
 * here too starves the trustee's own requests at a contended object). */
enum { DELEG_INLINE_RUN = 64 };

dsm_status_t dsm_deleg_apply_with(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                  const void *args, size_t args_len, void *ret, size_t ret_cap,
                                  size_t *ret_len)
{
    if (!t || !fn) return DSM_ERR_INVALID;
    if (trust_is_remote(t)) return dsm_deleg_remote_apply(t, fn, env, env_len, args, args_len, ret, ret_cap, ret_len);
    dsm_status_t st;
    deleg_thread_t *th = dsm_deleg_caller(t->prop, &st);
    if (st != DSM_OK) return st;
    if (env_len > DSM_DELEG_MAX_ENV) return DSM_ERR_TOO_BIG;
    if (th && !dsm_deleg_can_block(th, "apply")) return DSM_ERR_STATE;
    if (!th || t->prop->trustee == th->idx) {
        local_call_t lc;
        run_local(&lc, th, fn, t->prop, env, args, args_len, ret_cap, ret_len != NULL);
        if (ret_cap) memcpy(ret, lc.data, lc.len < ret_cap ? lc.len : ret_cap);
        if (ret_len) *ret_len = lc.len;
        dsm_deleg_ret_fini(&lc.r);
        if (th && ++th->inline_run >= DELEG_INLINE_RUN) dsm_deleg_serve_between(th);
        return DSM_OK;
    }
    waitrec_t w = {.th = th, .fiber = th->sched.cur, .dst = ret, .cap = ret_cap, .len_out = ret_len};
    st = dsm_deleg_issue(th, t->prop->trustee, fn, t->prop, REQ_USER, env, env_len, args, args_len,
                         ret_len ? DSM_DELEG_VARSIZE : ret_cap, dsm_deleg_wait_cb, &w, 0);
    if (st != DSM_OK) return st;
    dsm_deleg_wait(&w);
    return w.status;
}

dsm_status_t dsm_deleg_apply(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                             void *ret, size_t ret_cap, size_t *ret_len)
{
    return dsm_deleg_apply_with(t, fn, env, env_len, NULL, 0, ret, ret_cap, ret_len);
}

dsm_status_t dsm_deleg_apply_then_flags(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                        const void *args, size_t args_len, size_t ret_size, dsm_deleg_then_fn then,
                                        void *cb_arg, unsigned req_flags)
{
    if (!t || !fn) return DSM_ERR_INVALID;
    deleg_thread_t *th0 = dsm_deleg_tls;
    dsm_deleg_prop_t *prop = t->prop;
    if (__builtin_expect(local_small(th0, t, prop, ret_size, env_len), 1)) {
        dsm_deleg_ret_t r;
        _Alignas(8) uint8_t small[RET_LOCAL_SMALL];
        deleg_ret_init_inplace(&r, small, ret_size, NULL, 0);
        th0->depth++;
        fn(&r, prop->obj, env, args, args_len);
        if (then) then(cb_arg, DSM_OK, small, ret_size);
        th0->depth--;
        return DSM_OK;
    }
    if (trust_is_remote(t))
        return dsm_deleg_remote_apply_then(t, fn, env, env_len, args, args_len, ret_size, then, cb_arg);
    dsm_status_t st;
    deleg_thread_t *th = dsm_deleg_caller(t->prop, &st);
    if (st != DSM_OK) return st;
    if (env_len > DSM_DELEG_MAX_ENV) return DSM_ERR_TOO_BIG;
    if (!th || t->prop->trustee == th->idx) {
        int var = ret_size == DSM_DELEG_VARSIZE;
        local_call_t lc;
        run_local(&lc, th, fn, t->prop, env, args, args_len, var ? 0 : ret_size, var);
        if (then) {
            if (th) th->depth++;
            then(cb_arg, DSM_OK, lc.data, lc.len);
            if (th) th->depth--;
        }
        dsm_deleg_ret_fini(&lc.r);
        return DSM_OK;
    }
    return dsm_deleg_issue(th, t->prop->trustee, fn, t->prop, REQ_USER, env, env_len, args, args_len, ret_size,
                           then, cb_arg, req_flags);
}

dsm_status_t dsm_deleg_apply_then(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                  const void *args, size_t args_len, size_t ret_size,
                                  dsm_deleg_then_fn then, void *cb_arg)
{
    return dsm_deleg_apply_then_flags(t, fn, env, env_len, args, args_len, ret_size, then, cb_arg, 0);
}

dsm_status_t dsm_deleg_apply_then_hinted(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                         const void *args, size_t args_len, size_t ret_size,
                                         dsm_deleg_then_fn then, void *cb_arg)
{
    return dsm_deleg_apply_then_flags(t, fn, env, env_len, args, args_len, ret_size, then, cb_arg, REQF_HINT);
}

/* ---- fibers ------------------------------------------------------------------ */

dsm_status_t dsm_deleg_spawn(void (*fn)(void *), void *arg)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (!th || !fn) return th ? DSM_ERR_INVALID : DSM_ERR_STATE;
    return dsm_sched_spawn(&th->sched, fn, arg);
}

dsm_status_t dsm_deleg_wait_outstanding(uint64_t max)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (!th || !dsm_deleg_can_block(th, "wait_outstanding")) return DSM_ERR_STATE;
    while (th->outstanding > max) {
        if (th->window_waiter) {
            /* another fiber of this thread waits already: take turns */
            dsm_sched_yield(&th->sched);
            continue;
        }
        th->window_waiter = th->sched.cur;
        th->window_max = max;
        dsm_sched_block(&th->sched); /* woken by the scheduler loop (rt.c) */
    }
    return DSM_OK;
}

void dsm_deleg_yield(void)
{
    deleg_thread_t *th = dsm_deleg_tls;
    if (th && th->sched.cur && th->depth == 0) dsm_sched_yield(&th->sched);
}
