/* launch / launch_then (§2.4.3): the trustee runs the closure in a temporary
 * fiber, so the closure may block (apply, launch) without stalling the
 * trustee. The property must be a Latch<T>: a single-thread mutex with a FIFO
 * of waiting fibers and no atomics, because while a launched closure is
 * suspended other launches on the same property would otherwise interleave.
 * The result travels back as a second delegation call (trustee -> client)
 * whose closure runs the client's continuation. */
#include <stdlib.h>
#include <string.h>

#include "deleg/internal.h"
#include "deleg/remote.h"
#include "util/log.h"

/* Client-side record of a launch in progress; its address travels in the
 * request (local delegation: one process, so a pointer is fine). */
typedef struct launch_rec {
    deleg_thread_t *client;
    dsm_deleg_then_fn then;
    void *arg;
} launch_rec_t;

/* Trustee-side task of a launched closure. */
typedef struct launch_task {
    deleg_thread_t *th;
    unsigned client;
    dsm_deleg_fn fn;
    dsm_deleg_prop_t *prop;
    launch_rec_t *rec;
    int32_t rrank;      /* a remote client's node, or -1 */
    uint64_t token;     /* its launch token */
    size_t env_len, args_len;
    uint8_t *env, *args; /* point into bytes[] */
    uint8_t bytes[];
} launch_task_t;

static void latch_acquire(deleg_thread_t *th, dsm_deleg_prop_t *p)
{
    if (!p->latch_held) {
        p->latch_held = 1;
        return;
    }
    dsm_fiber_t *me = th->sched.cur;
    me->next = NULL;
    if (p->latch_tail) p->latch_tail->next = me;
    else p->latch_head = me;
    p->latch_tail = me;
    /* Woken by latch_release, which hands the latch over still held. */
    dsm_sched_block(&th->sched);
}

static void latch_release(deleg_thread_t *th, dsm_deleg_prop_t *p)
{
    dsm_fiber_t *f = p->latch_head;
    if (!f) {
        p->latch_held = 0;
        return;
    }
    p->latch_head = f->next;
    if (!p->latch_head) p->latch_tail = NULL;
    dsm_sched_wake(&th->sched, f);
}

/* Runs on the client thread, in delegated context: deliver and forget. */
static void launch_done(dsm_deleg_ret_t *ret, void *unused, const void *env, const void *args, size_t args_len)
{
    (void)ret;
    (void)unused;
    launch_rec_t *rec;
    memcpy(&rec, env, sizeof rec);
    if (rec->then) rec->then(rec->arg, DSM_OK, args, args_len);
    rec->client->outstanding--;
    free(rec);
}

static void launch_fiber(void *arg)
{
    launch_task_t *t = arg;
    deleg_thread_t *th = t->th;
    latch_acquire(th, t->prop);
    dsm_deleg_ret_t r;
    dsm_deleg_ret_init_buf(&r, 0, 1);
    t->fn(&r, t->prop->obj, t->env, t->args, t->args_len);
    latch_release(th, t->prop);
    const uint8_t *data;
    size_t len;
    dsm_deleg_ret_result(&r, &data, &len);
    if (t->rrank >= 0) {
        dsm_deleg_remote_launch_done(th, (uint32_t)t->rrank, t->client, t->token, DSM_OK, data, len);
    } else if (t->client == th->idx) {
        th->depth++;
        launch_done(NULL, NULL, &t->rec, data, len);
        th->depth--;
    } else {
        dsm_status_t st;
        /* The result is the second delegation call; retry on memory pressure
         * rather than lose the client's continuation. */
        while ((st = dsm_deleg_issue(th, t->client, launch_done, NULL, REQ_SYS, &t->rec, sizeof t->rec, data,
                                     len, 0, NULL, NULL, 0)) == DSM_ERR_NOMEM)
            dsm_sched_yield(&th->sched);
    }
    dsm_deleg_ret_fini(&r);
    free(t);
}

void dsm_deleg_start_launch(deleg_thread_t *th, unsigned client, dsm_deleg_fn fn, dsm_deleg_prop_t *prop,
                            const void *env, size_t env_len, const void *args, size_t args_len)
{
    /* env starts with the client's record pointer */
    launch_rec_t *rec;
    memcpy(&rec, env, sizeof rec);
    env_len -= sizeof rec;
    env = (const uint8_t *)env + sizeof rec;
    launch_task_t *t = malloc(sizeof *t + env_len + args_len);
    if (!t) {
        DSM_ERROR("deleg", "out of memory starting a launched closure; its client will wait forever");
        return;
    }
    *t = (launch_task_t){.th = th, .client = client, .fn = fn, .prop = prop, .rec = rec, .rrank = -1,
                         .env_len = env_len, .args_len = args_len};
    t->env = t->bytes;
    t->args = t->bytes + env_len;
    if (env_len) memcpy(t->env, env, env_len);
    if (args_len) memcpy(t->args, args, args_len);
    if (dsm_sched_spawn(&th->sched, launch_fiber, t) != DSM_OK) {
        DSM_ERROR("deleg", "cannot create a fiber for a launched closure; its client will wait forever");
        free(t);
    }
}

dsm_status_t dsm_deleg_start_launch_remote(deleg_thread_t *th, uint32_t rank, unsigned client, uint64_t token,
                                           dsm_deleg_fn fn, dsm_deleg_prop_t *prop, const void *env,
                                           size_t env_len, const void *args, size_t args_len)
{
    launch_task_t *t = malloc(sizeof *t + env_len + args_len);
    if (!t) return DSM_ERR_NOMEM;
    *t = (launch_task_t){.th = th, .client = client, .fn = fn, .prop = prop, .rrank = (int32_t)rank,
                         .token = token, .env_len = env_len, .args_len = args_len};
    t->env = t->bytes;
    t->args = t->bytes + env_len;
    if (env_len) memcpy(t->env, env, env_len);
    if (args_len) memcpy(t->args, args, args_len);
    dsm_status_t st = dsm_sched_spawn(&th->sched, launch_fiber, t);
    if (st != DSM_OK) free(t);
    return st;
}

static dsm_status_t launch_common(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                  const void *args, size_t args_len, dsm_deleg_then_fn then, void *cb_arg,
                                  deleg_thread_t *th)
{
    if (!t->prop->latched) {
        DSM_WARN("deleg", "launch on a property that is not a latch");
        return DSM_ERR_INVALID;
    }
    if (env_len > DSM_DELEG_MAX_ENV) return DSM_ERR_TOO_BIG;
    launch_rec_t *rec = malloc(sizeof *rec);
    if (!rec) return DSM_ERR_NOMEM;
    *rec = (launch_rec_t){.client = th, .then = then, .arg = cb_arg};
    uint8_t env2[sizeof rec + DSM_DELEG_MAX_ENV];
    memcpy(env2, &rec, sizeof rec);
    if (env_len) memcpy(env2 + sizeof rec, env, env_len);
    th->outstanding++; /* until launch_done runs here */
    if (t->prop->trustee == th->idx) {
        dsm_deleg_start_launch(th, th->idx, fn, t->prop, env2, sizeof rec + env_len, args, args_len);
        return DSM_OK;
    }
    dsm_status_t st = dsm_deleg_issue(th, t->prop->trustee, fn, t->prop, REQ_LAUNCH, env2, sizeof rec + env_len,
                                      args, args_len, 0, NULL, NULL, 0);
    if (st != DSM_OK) {
        th->outstanding--;
        free(rec);
    }
    return st;
}

dsm_status_t dsm_deleg_launch_then(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                   const void *args, size_t args_len, dsm_deleg_then_fn then, void *cb_arg)
{
    if (!t || !fn) return DSM_ERR_INVALID;
    if (trust_is_remote(t)) return dsm_deleg_remote_launch(t, fn, env, env_len, args, args_len, then, cb_arg);
    dsm_status_t st;
    deleg_thread_t *th = dsm_deleg_caller(t->prop, &st);
    if (!th) return st != DSM_OK ? st : DSM_ERR_STATE; /* launch needs a running trustee */
    return launch_common(t, fn, env, env_len, args, args_len, then, cb_arg, th);
}

dsm_status_t dsm_deleg_launch(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                              const void *args, size_t args_len, void *ret, size_t ret_cap, size_t *ret_len)
{
    if (!t || !fn) return DSM_ERR_INVALID;
    dsm_status_t st;
    deleg_thread_t *th = dsm_deleg_tls;
    if (!trust_is_remote(t)) th = dsm_deleg_caller(t->prop, &st);
    else st = th ? DSM_OK : DSM_ERR_STATE;
    if (!th) return st != DSM_OK ? st : DSM_ERR_STATE;
    if (!dsm_deleg_can_block(th, "launch")) return DSM_ERR_STATE;
    waitrec_t w = {.th = th, .fiber = th->sched.cur, .dst = ret, .cap = ret_cap, .len_out = ret_len};
    st = trust_is_remote(t) ? dsm_deleg_remote_launch(t, fn, env, env_len, args, args_len, dsm_deleg_wait_cb, &w)
                            : launch_common(t, fn, env, env_len, args, args_len, dsm_deleg_wait_cb, &w, th);
    if (st != DSM_OK) return st;
    dsm_deleg_wait(&w);
    return w.status;
}
